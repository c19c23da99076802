"""The example tool service (echo, inspect_session, ask_approval). See `python -m examples.tools -h`."""
