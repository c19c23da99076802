"""Harness programs that Brain runs as child processes. Nothing here imports Django."""
