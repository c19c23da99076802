"""RunnerFrame lines: strict decoding, symmetric JSON rules on both codecs (orjson and the stdlib
fallback), the 4 MiB cap, checkpoint results, and no Django in runners/."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from runners import protocol
from runners.protocol import (
    BRAIN_METHODS,
    ERROR_CODES,
    EVENT_NAMES,
    MAX_DEPTH,
    MAX_FRAME,
    MAX_TOOL_CALLS,
    Frame,
    FrameError,
    decode_frame,
    encode_frame,
    validate_native_files,
)

PROJECT_ROOT = Path(__file__).resolve().parents[3]
# Modules a runner must never load: Django and the server's own apps and wiring.
SERVER_MODULES = (
    "django",
    "channels",
    "ninja",
    "daphne",
    "foundation",
    "brainsite",
    "sessions_app",
    "tools_app",
    "persistence_app",
)


@pytest.fixture(params=["orjson_case", "stdlib_case"])
def codec(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test once with each codec; orjson is in requirements.txt, so both are present here."""
    chosen = protocol.ORJSON_CODEC if request.param == "orjson_case" else protocol.STDLIB_CODEC
    assert chosen is not None
    monkeypatch.setattr(protocol, "_CODEC", chosen)
    return chosen.name


def test_the_protocol_constants_match_the_spec() -> None:
    # then
    assert MAX_FRAME == 4 << 20 == 4194304
    assert MAX_TOOL_CALLS == 32
    assert frozenset({"open", "prompt", "steer", "interrupt", "checkpoint", "detach"}) == BRAIN_METHODS
    assert frozenset({"assistant.delta", "assistant.message", "model.request"}) == EVENT_NAMES
    assert frozenset({"provider_error", "brain_error"}) == ERROR_CODES


SPEC_FRAMES: list[Any] = [
    pytest.param(
        {
            "attachment": "A",
            "id": "R",
            "method": "open",
            "params": {
                "session_id": "S",
                "dir": "/path/to/native",
                "config": {"model": "openai/gpt-4.1-mini", "tools": ["echo"]},
                "tools": [{"name": "echo", "description": "Echo text", "input_schema": {"type": "object"}}],
                "provider": {"api_key": "PROVIDER_TOKEN"},
            },
        },
        id="open_case",
    ),
    pytest.param(
        {"attachment": "A", "turn": "T", "id": "R", "method": "prompt", "params": {"text": "Hello"}}, id="prompt_case"
    ),
    pytest.param({"attachment": "A", "id": "R", "method": "checkpoint", "params": None}, id="checkpoint_case"),
    pytest.param({"attachment": "A", "turn": "T", "id": "R", "result": {}}, id="result_case"),
    pytest.param(
        {"attachment": "A", "turn": "T", "id": "R", "error": {"code": "provider_error", "message": "rate limit"}},
        id="error_case",
    ),
    pytest.param(
        {"attachment": "A", "turn": "T", "event": "assistant.delta", "data": {"text": "Hello"}}, id="event_case"
    ),
    pytest.param(
        {
            "attachment": "A",
            "turn": "T",
            "id": "C",
            "method": "tool.call",
            "params": {"id": "TC", "name": "echo", "arguments": {"value": "hi"}},
        },
        id="tool_call_case",
    ),
    pytest.param(
        {"attachment": "A", "id": "R", "result": [{"path": "session/file.jsonl", "size": 1024, "append_only": True}]},
        id="checkpoint_result_case",
    ),
    pytest.param(
        {"attachment": "A", "turn": "T", "event": "assistant.message", "data": {"text": "héllo ✓"}}, id="non_ascii_case"
    ),
]


@pytest.mark.parametrize("frame", SPEC_FRAMES)
def test_frames_round_trip(frame: Frame, codec: str) -> None:
    # when
    line = encode_frame(frame)

    # then
    assert line.endswith(b"\n")
    assert line.count(b"\n") == 1
    assert decode_frame(line) == frame


def test_frames_are_compact_utf8_json(codec: str) -> None:
    # when
    line = encode_frame({"attachment": "A", "event": "assistant.delta", "data": {"text": "é"}})

    # then
    assert line == '{"attachment":"A","event":"assistant.delta","data":{"text":"é"}}\n'.encode()


def test_decoding_accepts_a_line_without_its_newline(codec: str) -> None:
    # when
    frame = decode_frame(b'{"attachment":"A","id":"R","result":{}}')

    # then
    assert frame == {"attachment": "A", "id": "R", "result": {}}


def test_an_error_without_a_message_is_accepted(codec: str) -> None:
    # when
    frame = decode_frame(b'{"attachment":"A","id":"R","error":{"code":"brain_error"}}')

    # then
    assert frame == {"attachment": "A", "id": "R", "error": {"code": "brain_error"}}


INVALID_LINES = [
    pytest.param(b"", "frame is not JSON: Expecting value: line 1 column 1 (char 0)", id="empty_case"),
    pytest.param(
        b"{",
        "frame is not JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)",
        id="truncated_case",
    ),
    pytest.param(
        b'{"attachment":"A"} {}', "frame is not JSON: Extra data: line 1 column 20 (char 19)", id="trailing_data_case"
    ),
    pytest.param(b'{"attachment":"A","data":NaN}', "frame is not JSON: NaN is not JSON", id="nan_case"),
    pytest.param(b'{"attachment":"A","data":Infinity}', "frame is not JSON: Infinity is not JSON", id="infinity_case"),
    pytest.param(
        b'{"attachment":"\xff"}',
        "frame is not JSON: 'utf-8' codec can't decode byte 0xff in position 15: invalid start byte",
        id="not_utf8_case",
    ),
    pytest.param(
        '{"attachment":"A"}'.encode("utf-16"),
        "frame is not JSON: 'utf-8' codec can't decode byte 0xff in position 0: invalid start byte",
        id="utf16_case",
    ),
    pytest.param(b"[]", "frame is not a JSON object", id="array_case"),
    pytest.param(b"null", "frame is not a JSON object", id="null_case"),
    pytest.param(b'"attachment"', "frame is not a JSON object", id="string_case"),
    pytest.param(b'{"attachment":"A","extra":1}', "unknown frame field 'extra'", id="unknown_field_case"),
    pytest.param(b'{"attachment":"A","Id":"R"}', "unknown frame field 'Id'", id="wrong_case_field_case"),
    pytest.param(b'{"id":"R","result":{}}', "frame has no attachment", id="missing_attachment_case"),
    pytest.param(
        b'{"attachment":null,"id":"R"}', "frame field 'attachment' must be a string", id="null_attachment_case"
    ),
    pytest.param(b'{"attachment":1}', "frame field 'attachment' must be a string", id="numeric_attachment_case"),
    pytest.param(b'{"attachment":"A","turn":7}', "frame field 'turn' must be a string", id="numeric_turn_case"),
    pytest.param(b'{"attachment":"A","id":1}', "frame field 'id' must be a string", id="numeric_id_case"),
    pytest.param(
        b'{"attachment":"A","method":["open"]}', "frame field 'method' must be a string", id="list_method_case"
    ),
    pytest.param(b'{"attachment":"A","event":{}}', "frame field 'event' must be a string", id="object_event_case"),
    pytest.param(b'{"attachment":"A","error":"boom"}', "frame error must be {code, message}", id="string_error_case"),
    pytest.param(
        b'{"attachment":"A","error":{"message":"x"}}',
        "frame error must be {code, message}",
        id="error_without_code_case",
    ),
    pytest.param(
        b'{"attachment":"A","error":{"code":1,"message":"x"}}',
        "frame error must be {code, message}",
        id="numeric_code_case",
    ),
    pytest.param(
        b'{"attachment":"A","error":{"code":"brain_error","message":2}}',
        "frame error must be {code, message}",
        id="numeric_message_case",
    ),
    pytest.param(
        b'{"attachment":"A","error":{"code":"brain_error","message":"x","stack":"y"}}',
        "frame error must be {code, message}",
        id="error_extra_key_case",
    ),
]


@pytest.mark.parametrize(("line", "message"), INVALID_LINES)
def test_invalid_lines_are_frame_errors(line: bytes, message: str, codec: str) -> None:
    # when
    with pytest.raises(FrameError) as caught:
        decode_frame(line)

    # then
    assert str(caught.value) == message


def _frame_of_size(size: int) -> Frame:
    """A frame whose encoded line, without the newline, is exactly `size` bytes."""
    overhead = len(encode_frame({"attachment": "A", "data": ""})) - 1
    return {"attachment": "A", "data": "x" * (size - overhead)}


def test_a_frame_line_of_exactly_max_frame_bytes_with_its_newline_is_accepted(codec: str) -> None:
    # given
    frame = _frame_of_size(MAX_FRAME - 1)

    # when
    line = encode_frame(frame)

    # then
    assert len(line) == MAX_FRAME
    assert decode_frame(line) == frame


def test_encoding_a_frame_over_max_frame_fails(codec: str) -> None:
    # given
    frame = _frame_of_size(MAX_FRAME)

    # when
    with pytest.raises(FrameError) as caught:
        encode_frame(frame)

    # then
    assert str(caught.value) == f"frame of {MAX_FRAME} bytes exceeds {MAX_FRAME}"


def test_decoding_a_line_over_max_frame_fails_before_parsing() -> None:
    # given a valid frame one byte too long
    line = json.dumps(_frame_of_size(MAX_FRAME), separators=(",", ":")).encode() + b"\n"

    # when
    with pytest.raises(FrameError) as caught:
        decode_frame(line)

    # then
    assert len(line) == MAX_FRAME + 1
    assert str(caught.value) == f"frame of {MAX_FRAME + 1} bytes exceeds {MAX_FRAME}"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        pytest.param(float("nan"), "frame is not JSON-serialisable: NaN is not JSON", id="nan_case"),
        pytest.param(float("inf"), "frame is not JSON-serialisable: Infinity is not JSON", id="infinity_case"),
        pytest.param(
            {1, 2}, "frame is not JSON-serialisable: Object of type set is not JSON serializable", id="set_case"
        ),
        pytest.param(
            b"x", "frame is not JSON-serialisable: Object of type bytes is not JSON serializable", id="bytes_case"
        ),
        pytest.param(
            object(), "frame is not JSON-serialisable: Object of type object is not JSON serializable", id="object_case"
        ),
        pytest.param({1: "x"}, "frame is not JSON-serialisable: object keys must be strings", id="integer_key_case"),
        pytest.param({None: "x"}, "frame is not JSON-serialisable: object keys must be strings", id="null_key_case"),
    ],
)
def test_encoding_a_value_that_is_not_json_fails(data: Any, message: str, codec: str) -> None:
    # when
    with pytest.raises(FrameError) as caught:
        encode_frame({"attachment": "A", "data": data})

    # then
    assert str(caught.value) == message


# --- the same JSON rules on both sides --------------------------------------------------------


def _nested(levels: int) -> Any:
    """`levels` arrays inside each other: [[...]]."""
    value: Any = []
    for _ in range(levels - 1):
        value = [value]
    return value


# (value in a frame's `data`, the same value as JSON text, the rule it breaks)
REFUSED_BY_BOTH_SIDES = [
    pytest.param(2**64, "18446744073709551616", "integer out of the 64-bit range", id="above_uint64_case"),
    pytest.param(-(2**63) - 1, "-9223372036854775809", "integer out of the 64-bit range", id="below_int64_case"),
    pytest.param(10**400, "1" + "0" * 400, "integer out of the 64-bit range", id="huge_integer_case"),
    pytest.param(10**5000, "1" + "0" * 5000, "integer out of the 64-bit range", id="past_int_digit_limit_case"),
    pytest.param(
        [1, {"n": 2**70}],
        '[1,{"n":1180591620717411303424}]',
        "integer out of the 64-bit range",
        id="nested_integer_case",
    ),
    pytest.param("\ud800", '"\\ud800"', "lone surrogate in a string", id="lone_high_surrogate_case"),
    pytest.param("a\udfffb", '"a\\udfffb"', "lone surrogate in a string", id="lone_low_surrogate_case"),
    pytest.param("\udc00\ud800", '"\\udc00\\ud800"', "lone surrogate in a string", id="reversed_pair_case"),
    pytest.param({"\ud83d": 1}, '{"\\ud83d":1}', "lone surrogate in a string", id="surrogate_key_case"),
    pytest.param(float("nan"), "NaN", "NaN is not JSON", id="nan_case"),
    pytest.param(float("inf"), "Infinity", "Infinity is not JSON", id="infinity_case"),
    pytest.param([float("-inf")], "[-Infinity]", "-Infinity is not JSON", id="negative_infinity_case"),
    pytest.param(
        _nested(MAX_DEPTH),
        "[" * MAX_DEPTH + "]" * MAX_DEPTH,
        f"nested deeper than {MAX_DEPTH} levels",
        id="too_deep_case",
    ),
]


@pytest.mark.parametrize(("value", "text", "rule"), REFUSED_BY_BOTH_SIDES)
def test_the_encoder_refuses_what_the_decoder_refuses(value: Any, text: str, rule: str, codec: str) -> None:
    # given
    line = b'{"attachment":"A","data":' + text.encode() + b"}\n"

    # when
    with pytest.raises(FrameError) as encoding:
        encode_frame({"attachment": "A", "data": value})
    with pytest.raises(FrameError) as decoding:
        decode_frame(line)

    # then
    assert str(encoding.value) == f"frame is not JSON-serialisable: {rule}"
    assert str(decoding.value) == f"frame is not JSON: {rule}"


def test_a_json_number_that_overflows_to_infinity_is_refused(codec: str) -> None:
    # when
    with pytest.raises(FrameError) as caught:
        decode_frame(b'{"attachment":"A","data":[1e400]}')

    # then
    assert str(caught.value) == "frame is not JSON: Infinity is not JSON"


# (value in a frame's `data`, the same value as JSON text with escapes where there are any)
ACCEPTED_BY_BOTH_SIDES = [
    pytest.param(2**64 - 1, "18446744073709551615", id="uint64_max_case"),
    pytest.param(-(2**63), "-9223372036854775808", id="int64_min_case"),
    pytest.param([2**63, -1, 0], "[9223372036854775808,-1,0]", id="integers_case"),
    pytest.param("😀", '"\\ud83d\\ude00"', id="surrogate_pair_case"),
    pytest.param("\u2028\x00\x7f", '"\\u2028\\u0000\\u007f"', id="odd_characters_case"),
    pytest.param([1e308, 5e-324, -0.0, 0.1], "[1e308,5e-324,-0.0,0.1]", id="floats_case"),
    pytest.param(_nested(MAX_DEPTH - 1), "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1), id="deepest_case"),
    pytest.param("12345678901234567890123", '"12345678901234567890123"', id="long_digits_in_a_string_case"),
    pytest.param({"a": None, "b": [True, False]}, '{"a":null,"b":[true,false]}', id="constants_case"),
]


@pytest.mark.parametrize(("value", "text"), ACCEPTED_BY_BOTH_SIDES)
def test_the_decoder_accepts_what_the_encoder_accepts(value: Any, text: str, codec: str) -> None:
    # given
    frame: Frame = {"attachment": "A", "data": value}

    # when
    line = encode_frame(frame)
    escaped = decode_frame(b'{"attachment":"A","data":' + text.encode() + b"}")

    # then
    assert decode_frame(line) == frame
    assert escaped == frame


@pytest.mark.parametrize(
    "line",
    [
        pytest.param(b"[" * 100_000 + b"]" * 100_000, id="very_deep_case"),
        pytest.param(b'{"attachment":"A","data":"\\ud8', id="cut_escape_case"),
        pytest.param(b'{"attachment":"A","data":-}', id="bare_minus_case"),
        pytest.param(b'{"attachment":"A","data":01}', id="leading_zero_case"),
        pytest.param(b'\xef\xbb\xbf{"attachment":"A"}', id="byte_order_mark_case"),
        pytest.param(b'{"attachment":"\xed\xa0\x80"}', id="encoded_surrogate_case"),
        pytest.param(b'{"attachment":"A\x01"}', id="control_character_case"),
        pytest.param(bytearray(b"{"), id="bytearray_case"),
    ],
)
def test_every_decoding_failure_is_a_frame_error(line: bytes, codec: str) -> None:
    # when
    with pytest.raises(FrameError) as caught:
        decode_frame(line)

    # then
    assert str(caught.value).startswith("frame is not JSON: ")


@pytest.mark.parametrize(
    "line", [pytest.param("{}", id="text_case"), pytest.param(None, id="none_case"), pytest.param(7, id="number_case")]
)
def test_decoding_something_that_is_not_bytes_is_a_frame_error(line: Any, codec: str) -> None:
    # when
    with pytest.raises(FrameError) as caught:
        decode_frame(line)

    # then
    assert str(caught.value) == f"frame is not JSON: {type(line).__name__} is not bytes"


def _cycle() -> list[Any]:
    value: list[Any] = []
    value.append(value)
    return value


@pytest.mark.parametrize(
    ("frame", "message"),
    [
        pytest.param(["attachment"], "frame is not a JSON object", id="list_case"),
        pytest.param({"attachment": "A", "extra": 1}, "unknown frame field 'extra'", id="unknown_field_case"),
        pytest.param({"attachment": "A", 1: 1}, "unknown frame field 1", id="integer_field_case"),
        pytest.param({"id": "R"}, "frame has no attachment", id="missing_attachment_case"),
        pytest.param({"attachment": "A", "turn": 1}, "frame field 'turn' must be a string", id="numeric_turn_case"),
        pytest.param({"attachment": "A", "error": "x"}, "frame error must be {code, message}", id="string_error_case"),
        pytest.param(
            {"attachment": "A", "data": _cycle()},
            f"frame is not JSON-serialisable: nested deeper than {MAX_DEPTH} levels",
            id="cycle_case",
        ),
    ],
)
def test_the_encoder_refuses_frames_the_decoder_would_refuse(frame: Any, message: str, codec: str) -> None:
    # when
    with pytest.raises(FrameError) as caught:
        encode_frame(frame)

    # then
    assert str(caught.value) == message


def test_without_orjson_the_module_imports_and_keeps_the_same_rules() -> None:
    # given an interpreter where importing orjson fails
    script = (
        "import sys\n"
        "sys.modules['orjson'] = None\n"
        "from runners import protocol\n"
        "assert protocol.ORJSON_CODEC is None and protocol._CODEC is protocol.STDLIB_CODEC\n"
        "line = protocol.encode_frame({'attachment': 'A', 'data': [2**64 - 1, 'é']})\n"
        "assert protocol.decode_frame(line) == {'attachment': 'A', 'data': [2**64 - 1, 'é']}\n"
        "for bad in (b'[18446744073709551616]', b'[NaN]', b'[\"\\\\ud800\"]'):\n"
        "    try:\n"
        '        protocol.decode_frame(b\'{"attachment":"A","data":\' + bad + b\'}\')\n'
        "    except protocol.FrameError as exc:\n"
        "        print(exc)\n"
    )

    # when
    completed = subprocess.run(
        [sys.executable, "-c", script],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(PROJECT_ROOT)},
    )

    # then
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.splitlines() == [
        "frame is not JSON: integer out of the 64-bit range",
        "frame is not JSON: NaN is not JSON",
        "frame is not JSON: lone surrogate in a string",
    ]


# --- checkpoint results ---------------------------------------------------------------------

VALID_NATIVE_FILES = [
    pytest.param([], [], id="empty_case"),
    pytest.param(
        [{"path": "session/file.jsonl", "size": 1024, "append_only": True}],
        [{"path": "session/file.jsonl", "size": 1024, "append_only": True}],
        id="spec_example_case",
    ),
    pytest.param(
        [{"path": "meta.json", "size": 0}],
        [{"path": "meta.json", "size": 0, "append_only": False}],
        id="append_only_default_case",
    ),
    pytest.param(
        [{"path": ".hidden", "size": 1, "append_only": False}],
        [{"path": ".hidden", "size": 1, "append_only": False}],
        id="dotfile_case",
    ),
    pytest.param(
        [{"path": "a..b/c", "size": 1, "append_only": True}],
        [{"path": "a..b/c", "size": 1, "append_only": True}],
        id="dots_inside_a_name_case",
    ),
]


@pytest.mark.parametrize(("value", "expected"), VALID_NATIVE_FILES)
def test_valid_checkpoint_results_are_normalised(value: Any, expected: list[dict[str, Any]]) -> None:
    # when
    files = validate_native_files(value)

    # then
    assert files == expected


INVALID_NATIVE_FILES = [
    pytest.param(None, "checkpoint result must be a list", id="null_case"),
    pytest.param({"path": "a", "size": 1}, "checkpoint result must be a list", id="object_case"),
    pytest.param(["a"], "checkpoint entry must be {path, size, append_only}", id="string_entry_case"),
    pytest.param(
        [{"path": "a", "size": 1, "sha": "x"}],
        "checkpoint entry must be {path, size, append_only}",
        id="unknown_key_case",
    ),
    pytest.param([{"size": 1}], "checkpoint path None must be relative", id="missing_path_case"),
    pytest.param([{"path": "", "size": 1}], "checkpoint path '' must be relative", id="empty_path_case"),
    pytest.param([{"path": 3, "size": 1}], "checkpoint path 3 must be relative", id="numeric_path_case"),
    pytest.param([{"path": "/abs", "size": 1}], "checkpoint path '/abs' must be relative", id="absolute_case"),
    pytest.param([{"path": "a\\b", "size": 1}], "checkpoint path 'a\\\\b' must be relative", id="backslash_case"),
    pytest.param([{"path": "..", "size": 1}], "checkpoint path '..' must be normalised", id="parent_case"),
    pytest.param([{"path": "a/./b", "size": 1}], "checkpoint path 'a/./b' must be normalised", id="dot_segment_case"),
    pytest.param([{"path": "a//b", "size": 1}], "checkpoint path 'a//b' must be normalised", id="empty_segment_case"),
    pytest.param(
        [{"path": "a", "size": 1}, {"path": "a", "size": 2}], "checkpoint path 'a' listed twice", id="duplicate_case"
    ),
    pytest.param([{"path": "a"}], "checkpoint size for 'a' must be a non-negative integer", id="missing_size_case"),
    pytest.param(
        [{"path": "a", "size": -1}], "checkpoint size for 'a' must be a non-negative integer", id="negative_size_case"
    ),
    pytest.param(
        [{"path": "a", "size": 1.0}], "checkpoint size for 'a' must be a non-negative integer", id="float_size_case"
    ),
    pytest.param(
        [{"path": "a", "size": True}], "checkpoint size for 'a' must be a non-negative integer", id="boolean_size_case"
    ),
    pytest.param(
        [{"path": "a", "size": 1, "append_only": 1}], "append_only must be a boolean", id="numeric_append_only_case"
    ),
]


@pytest.mark.parametrize(("value", "message"), INVALID_NATIVE_FILES)
def test_invalid_checkpoint_results_are_frame_errors(value: Any, message: str) -> None:
    # when
    with pytest.raises(FrameError) as caught:
        validate_native_files(value)

    # then
    assert str(caught.value) == message


# --- no Django in runners/ ------------------------------------------------------------------


def _runner_modules() -> list[str]:
    modules = []
    for path in sorted((PROJECT_ROOT / "runners").rglob("*.py")):
        relative = path.relative_to(PROJECT_ROOT).with_suffix("")
        if relative.name == "__main__":
            continue  # importing it would start the runner; its imports are covered by the AST test
        parts = relative.parts[:-1] if relative.name == "__init__" else relative.parts
        modules.append(".".join(parts))
    return modules


def test_every_runner_module_is_found() -> None:
    # when
    modules = _runner_modules()

    # then
    assert "runners.protocol" in modules
    assert "runners" in modules


@pytest.mark.parametrize("module", _runner_modules(), ids=lambda module: module.replace(".", "_") + "_case")
def test_importing_a_runner_module_loads_no_django_or_server_app(module: str) -> None:
    # given a fresh interpreter without Django settings
    script = (
        "import importlib, json, sys\n"
        f"importlib.import_module({module!r})\n"
        f"prefixes = {SERVER_MODULES!r}\n"
        "print(json.dumps(sorted(name for name in sys.modules if name.split('.')[0] in prefixes)))\n"
    )

    # when
    completed = subprocess.run(
        [sys.executable, "-c", script],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(PROJECT_ROOT)},
    )

    # then
    assert completed.returncode == 0, completed.stderr
    assert json.loads(completed.stdout) == []
