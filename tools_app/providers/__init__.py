"""Installed tool providers: operator-installed classes that sessions bind with an alias,
operations and parameters (the Python counterpart of Brain's application SDK)."""
