"""The remote command helper run for real as a subprocess, as a cloud sandbox runs it: its
deadline kills the whole process group, its output cap cuts and flags, and its one JSON line is
parsed strictly."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from toolkits.sandbox.backend import SandboxFailure
from toolkits.sandbox.remote_helper import (
    MAX_COMMAND_BYTES,
    helper_argv,
    helper_shell_command,
    parse_helper_result,
    result_line_limit,
)


def _run(command: str, *, deadline: float = 10.0, limit: int = 1024) -> tuple[str, float]:
    started = time.monotonic()
    completed = subprocess.run(
        helper_argv(command, deadline_seconds=deadline, output_limit=limit),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert completed.stderr == ""
    return completed.stdout, time.monotonic() - started


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def test_the_helper_prints_one_json_line_with_the_exit_status_and_both_outputs() -> None:
    answer, _ = _run("printf 'a\\nb'; printf 'oops' >&2; exit 3")
    assert answer.count("\n") == 1
    assert json.loads(answer) == {
        "v": 1,
        "exit_code": 3,
        "stdout": base64.b64encode(b"a\nb").decode(),
        "stderr": base64.b64encode(b"oops").decode(),
        "truncated": False,
        "timed_out": False,
    }
    result = parse_helper_result(answer, output_limit=1024)
    assert (result.exit_code, result.stdout, result.stderr) == (3, "a\nb", "oops")


def test_the_deadline_kills_the_whole_process_group_and_flags_it(tmp_path: Path) -> None:
    # given: a command whose children ignore SIGTERM and run past the deadline
    pids = tmp_path / "pids"
    command = f"trap '' TERM; (sleep 60 & echo $! >> {pids}; wait) & echo $! >> {pids}; echo begun; sleep 60"
    # when
    answer, elapsed = _run(command, deadline=1.0)
    # then
    result = parse_helper_result(answer, output_limit=1024)
    assert (result.exit_code, result.stdout, result.timed_out, result.truncated) == (None, "begun\n", True, False)
    survivors = [int(pid) for pid in pids.read_text().split() if _alive(int(pid))]
    assert survivors == []
    print(f"deadline 1 s: the helper answered after {elapsed:.2f} s")


def test_a_process_left_behind_by_a_finished_command_is_killed(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    answer, _ = _run(f"sleep 60 > /dev/null 2>&1 & echo $! > {pids}; echo done")
    result = parse_helper_result(answer, output_limit=1024)
    assert (result.exit_code, result.stdout, result.timed_out) == (0, "done\n", False)
    assert not _alive(int(pids.read_text()))


def test_output_past_the_cap_is_cut_at_the_cap_flagged_and_the_command_killed() -> None:
    answer, _ = _run("echo start >&2; yes", limit=1000)
    result = parse_helper_result(answer, output_limit=1000)
    assert (result.exit_code, result.truncated, result.timed_out) == (None, True, False)
    # stdout may reach the cap before the helper has read stderr's line: which pipe is read first
    # is the scheduler's choice, so the line is there whole or not at all
    assert result.stderr in ("start\n", "")
    assert len(result.stdout) + len(result.stderr) == 1000


def test_output_exactly_at_the_cap_is_not_truncated() -> None:
    answer, _ = _run("head -c 1000 /dev/zero | tr '\\0' x", limit=1000)
    result = parse_helper_result(answer, output_limit=1000)
    assert (result.exit_code, result.truncated, len(result.stdout)) == (0, False, 1000)


def test_a_command_killed_by_a_signal_reports_128_plus_the_signal() -> None:
    answer, _ = _run("kill -9 $$")
    assert parse_helper_result(answer, output_limit=1024).exit_code == 137


def test_model_input_reaches_the_shell_unquoted_through_base64() -> None:
    command = "printf '%s' \"$(echo 'it''s' \\\"quoted\\\" `echo back`)\"; printf '\\377'"
    completed = subprocess.run(
        ["/bin/sh", "-c", helper_shell_command(command, deadline_seconds=10, output_limit=1024)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert parse_helper_result(completed.stdout, output_limit=1024).stdout == 'its "quoted" back\ufffd'


@pytest.mark.parametrize(
    ("answer_case", "answer"),
    [
        ("empty_case", ""),
        ("two_lines_case", '{"v": 1}\n{"v": 1}\n'),
        ("not_json_case", "Traceback (most recent call last):\n"),
        ("extra_field_case", '{"v":1,"exit_code":0,"stdout":"","stderr":"","truncated":false,"timed_out":false,"x":1}'),
        ("wrong_version_case", '{"v":2,"exit_code":0,"stdout":"","stderr":"","truncated":false,"timed_out":false}'),
        ("bool_exit_case", '{"v":1,"exit_code":true,"stdout":"","stderr":"","truncated":false,"timed_out":false}'),
        ("exit_range_case", '{"v":1,"exit_code":999,"stdout":"","stderr":"","truncated":false,"timed_out":false}'),
        ("flag_type_case", '{"v":1,"exit_code":0,"stdout":"","stderr":"","truncated":"no","timed_out":false}'),
        ("not_base64_case", '{"v":1,"exit_code":0,"stdout":"@@","stderr":"","truncated":false,"timed_out":false}'),
        (
            "over_limit_case",
            json.dumps(
                {
                    "v": 1,
                    "exit_code": 0,
                    "stdout": base64.b64encode(b"x" * 11).decode(),
                    "stderr": "",
                    "truncated": False,
                    "timed_out": False,
                }
            ),
        ),
        ("over_length_case", "x" * (result_line_limit(10) + 1)),
    ],
)
def test_an_answer_out_of_form_is_an_unknown_outcome(answer_case: str, answer: str) -> None:
    with pytest.raises(SandboxFailure) as malformed:
        parse_helper_result(answer, output_limit=10)
    assert malformed.value.reached is True


def test_a_command_over_the_size_limit_is_refused_before_sending() -> None:
    with pytest.raises(SandboxFailure) as refused:
        helper_argv("x" * (MAX_COMMAND_BYTES + 1), deadline_seconds=1, output_limit=10)
    assert refused.value.reached is False
