"""The text of the message in progress kept for streams opened mid-message: offsets, the
per-session bound (the newest text that fits) and the per-server bound (a session past it keeps
nothing of its message rather than taking another session's share)."""

from __future__ import annotations

import json

from sessions_app.runtime.deltas import DeltaBudget, DeltaBuffer


def _replayed(buffer: DeltaBuffer) -> dict[str, object]:
    frame = buffer.replay()
    assert frame.startswith(b"event: assistant.delta\ndata: ") and frame.endswith(b"\n\n")  # no id: line
    envelope: dict[str, object] = json.loads(frame.split(b"data: ", 1)[1])
    return envelope


def test_a_replay_holds_the_text_so_far_from_offset_zero_and_a_retained_message_empties_it() -> None:
    budget = DeltaBudget(limit=100)
    buffer = DeltaBuffer(budget, limit=10)
    for piece in ("héllo", " wo", "rld"):
        buffer.add(piece, input_id="a" * 32)
    assert buffer.streamed == 11
    envelope = _replayed(buffer)
    assert (envelope["input_id"], envelope["data"]) == ("a" * 32, {"text": "éllo world", "offset": 1})
    assert budget.used == 10
    buffer.clear()
    assert (buffer.replay(), buffer.streamed, budget.used) == (b"", 0, 0)


def test_a_delta_longer_than_the_bound_keeps_its_newest_characters() -> None:
    budget = DeltaBudget(limit=100)
    buffer = DeltaBuffer(budget, limit=4)
    buffer.add("ab", input_id="")
    buffer.add("cdefgh", input_id="")
    assert _replayed(buffer)["data"] == {"text": "efgh", "offset": 4}
    assert budget.used == 4


def test_a_session_past_the_server_bound_keeps_nothing_of_its_message_and_others_keep_theirs() -> None:
    budget = DeltaBudget(limit=8)
    first, second = DeltaBuffer(budget, limit=8), DeltaBuffer(budget, limit=8)
    first.add("12345", input_id="")
    second.add("abc", input_id="")
    second.add("de", input_id="")  # the server holds 8 already: second drops its own, keeps "de"
    assert budget.used == 7
    assert _replayed(first)["data"] == {"text": "12345", "offset": 0}
    assert _replayed(second)["data"] == {"text": "de", "offset": 3}
    second.add("fghi", input_id="")  # 5 + 2 + 4 > 8, and 5 + 4 > 8: nothing of it is kept
    assert (second.replay(), second.streamed, budget.used) == (b"", 9, 5)
    second.add("j", input_id="")  # the next delta that fits is kept, with where it starts
    assert _replayed(second)["data"] == {"text": "j", "offset": 9}
