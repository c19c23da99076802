"""Sandboxes: create, exec, inspect and terminate on a backend (local bubblewrap, Modal, E2B,
Daytona) behind signed handles scoped to a tenant and a session."""
