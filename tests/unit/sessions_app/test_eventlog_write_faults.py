"""A write that fails part way (a file size limit, as on a full disk) is cut back off the log."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sessions_app.eventlog import LogWriteFailed, public_message

ROOT = Path(__file__).resolve().parents[3]

# Run in a child: RLIMIT_FSIZE and SIGXFSZ are process-wide.
PROGRAM = """
import json, resource, signal, sys
from pathlib import Path
from sessions_app.eventlog import Event, EventLog, LogWriteFailed

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # past the limit write(2) returns short or EFBIG
path = Path(sys.argv[1])
log = EventLog(path, max_bytes=1 << 30)
resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))
outcomes = []
for size in (250, 250, 250, 20, 250):  # lines of 375 bytes, then one of 145
    try:
        log.append(Event.build("assistant.message", {"text": "x" * size}))
        outcomes.append("ok")
    except LogWriteFailed as exc:
        outcomes.append(str(exc))
print(json.dumps({"outcomes": outcomes, "size": log.size, "on_disk": path.stat().st_size}))
"""


def test_a_short_write_is_truncated_and_the_append_fails_clearly(tmp_path: Path) -> None:
    # given
    path = tmp_path / "events.jsonl"

    # when
    output = subprocess.run(
        [sys.executable, "-c", PROGRAM, str(path)], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout

    # then: the line that crossed the limit is gone, a smaller one fits after it
    report = json.loads(output)
    assert report["outcomes"][:2] == ["ok", "ok"]
    assert report["outcomes"][2] == "event log write failed: wrote 250 of 375 bytes"
    assert report["outcomes"][3] == "ok"
    assert report["outcomes"][4].startswith("event log write failed")
    assert str(tmp_path) not in " ".join(report["outcomes"])
    assert report["size"] == report["on_disk"] <= 1000
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b""
    assert [json.loads(line)["type"] for line in lines[:-1]] == ["assistant.message"] * 3


@pytest.mark.parametrize(
    ("exc", "message"),
    [
        pytest.param(
            FileNotFoundError(2, "No such file or directory", "/srv/brain/x"),
            "FileNotFoundError: No such file or directory",
            id="os_error_case",
        ),
        pytest.param(
            LogWriteFailed("event log write failed: wrote 1 of 2 bytes"),
            "event log write failed: wrote 1 of 2 bytes",
            id="log_write_case",
        ),
        pytest.param(TimeoutError(), "TimeoutError", id="empty_case"),
        pytest.param(
            ValueError("bad checkpoint 'conversation.jsonl'"), "bad checkpoint 'conversation.jsonl'", id="plain_case"
        ),
    ],
)
def test_a_session_error_message_names_no_server_path(exc: BaseException, message: str) -> None:
    assert public_message(exc) == message
