"""Native JSONL state in-process: commit markers, torn lines, compaction replay (no Django)."""

from __future__ import annotations

import json
from pathlib import Path

from runners.loop.messages import AssistantMessage, Generation, ToolCall, ToolResult, Usage, UserMessage
from runners.loop.state import CONVERSATION_FILE, SUMMARY_PREFIX, NativeState


def _turn(state: NativeState, text: str, *, commit: bool = True) -> None:
    turn = state.begin_turn()
    turn.add_user(text)
    turn.add_generation(Generation(text=f"re: {text}", tool_calls=(), stop_reason="stop", usage=Usage(3, 4)))
    if commit:
        turn.commit()
    else:
        turn.discard()


def test_only_committed_turns_are_loaded(tmp_path: Path) -> None:
    # given
    state = NativeState.load(tmp_path)
    _turn(state, "kept")
    _turn(state, "abandoned", commit=False)
    _turn(state, "also kept")

    # when
    reloaded = NativeState.load(tmp_path)

    # then
    expected = [
        UserMessage("kept"),
        AssistantMessage("re: kept"),
        UserMessage("also kept"),
        AssistantMessage("re: also kept"),
    ]
    assert state.context() == expected
    assert reloaded.context() == expected
    assert reloaded.cache_key == state.cache_key


def test_a_torn_last_line_is_skipped_and_the_next_record_starts_on_a_new_line(tmp_path: Path) -> None:
    # given a crash in the middle of writing a record
    state = NativeState.load(tmp_path)
    _turn(state, "one")
    state.close()
    with (tmp_path / CONVERSATION_FILE).open("ab") as handle:
        handle.write(b'{"tid":"x","type":"us')

    # when
    reopened = NativeState.load(tmp_path)
    _turn(reopened, "two")

    # then
    assert [m for m in NativeState.load(tmp_path).context() if isinstance(m, UserMessage)] == [
        UserMessage("one"),
        UserMessage("two"),
    ]


def test_tool_calls_and_results_round_trip(tmp_path: Path) -> None:
    # given
    state = NativeState.load(tmp_path)
    turn = state.begin_turn()
    turn.add_user("go")
    call = ToolCall(id="c1", name="echo", arguments={"text": "é", "n": [1, 2]})
    turn.add_generation(
        Generation(
            text="",
            tool_calls=(call,),
            stop_reason="tool_use",
            usage=Usage(),
            replay={"transport": "x", "items": [{"type": "reasoning"}]},
        )
    )
    turn.add_tool_result(ToolResult(call_id="c1", name="echo", text="é", is_error=True))
    turn.add_user("steer", steer=True)
    turn.commit()

    # then
    assert NativeState.load(tmp_path).context() == [
        UserMessage("go"),
        AssistantMessage("", (call,), {"transport": "x", "items": [{"type": "reasoning"}]}),
        ToolResult("c1", "echo", "é", True),
        UserMessage("steer"),
    ]


def test_a_compaction_replaces_older_turns_only_once_its_turn_commits(tmp_path: Path) -> None:
    # given three turns, then a turn that compacts the first two
    state = NativeState.load(tmp_path)
    for text in ("a", "b", "c"):
        _turn(state, text)
    third = state.compactable_turns()[2][0]
    turn = state.begin_turn()
    turn.add_user("d")
    turn.add_compaction("A and B happened", kept_from=third)

    # then the open turn already sees the compacted context
    assert state.context()[:2] == [UserMessage(SUMMARY_PREFIX + "A and B happened"), UserMessage("c")]
    # an uncommitted compaction is not replayed
    assert len(NativeState.load(tmp_path).context()) == 6
    turn.commit()
    assert (
        NativeState.load(tmp_path).context()
        == state.context()
        == [
            UserMessage(SUMMARY_PREFIX + "A and B happened"),
            UserMessage("c"),
            AssistantMessage("re: c"),
            UserMessage("d"),
        ]
    )


def test_every_line_is_json_and_the_file_starts_with_a_header(tmp_path: Path) -> None:
    state = NativeState.load(tmp_path)
    _turn(state, "x")
    records = [json.loads(line) for line in (tmp_path / CONVERSATION_FILE).read_bytes().splitlines()]
    assert records[0]["type"] == "header"
    assert [r["type"] for r in records[1:]] == ["user", "assistant", "turn_end"]
    assert state.checkpoint() == [
        {"path": CONVERSATION_FILE, "size": (tmp_path / CONVERSATION_FILE).stat().st_size, "append_only": True}
    ]
