"""What the input journal answers when it records an acknowledged input: the entry's place in
the session's journal, the input id its event carries, and whether this call created it. The
session runtime reads it as it is (sessions_app.runtime.ownership). No Django.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["JournalReceipt"]


@dataclass(frozen=True, slots=True)
class JournalReceipt:
    seq: int
    input_id: str  # on a resend of a key: the first send's input id, to replay its event
    created: bool  # False when the key was already journaled for this session
