"""The session directory: its layout, event log path, checkpoint journal, native files,
uploaded.json and the reads that rebuild a session's state. See layout.py."""

from .checkpoints import CheckpointEntry, CheckpointError, CheckpointStore
from .layout import EVENT_LOG, NATIVE, RUNNING_MARKER, SessionFiles, SessionStorage, history_size
from .recovery import Recovered

__all__ = [
    "EVENT_LOG",
    "NATIVE",
    "RUNNING_MARKER",
    "CheckpointEntry",
    "CheckpointError",
    "CheckpointStore",
    "Recovered",
    "SessionFiles",
    "SessionStorage",
    "history_size",
]
