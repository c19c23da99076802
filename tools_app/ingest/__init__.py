"""Documents in, chunks out: parsing and chunking (documents.py) and the budgeted child process
that runs them (worker.py). Imports no Django and nothing else of tools_app."""
