"""Commands of the repository: `make run`'s demo and `make cluster`."""
