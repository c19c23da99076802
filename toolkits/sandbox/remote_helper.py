"""The Python 3 helper that runs one command inside a remote sandbox (Modal, E2B, Daytona), and
the host side that builds its command line and parses its answer. Standard library only.

The helper runs `/bin/sh -c COMMAND` in its own process group with stdin closed, keeps at most
`limit` bytes of stdout and stderr together, kills the whole group at the deadline, past the
limit, and when the command's own process ends (nothing is left behind), and prints exactly one
JSON line: `{"v": 1, "exit_code": int | null, "stdout": base64, "stderr": base64, "truncated":
bool, "timed_out": bool}`. `exit_code` is null when the helper killed the command before it
ended (deadline or output limit); a command killed by a signal reports 128 + the signal, as a
shell does. The helper and the request travel as base64 arguments of `python3 -c`, so no shell
quoting of model input is involved.
"""

from __future__ import annotations

import base64
import binascii
import json
import shlex
from typing import Final

from toolkits.sandbox.backend import ExecResult, SandboxFailure

__all__ = [
    "HELPER_SOURCE",
    "MAX_COMMAND_BYTES",
    "helper_argv",
    "helper_shell_command",
    "parse_helper_result",
    "result_line_limit",
]

MAX_COMMAND_BYTES = 64 << 10  # a command line, not a program: larger inputs belong in files
# Room for the JSON keys and flags beside the two base64 fields in the result line.
_RESULT_OVERHEAD_CHARS = 256
# How long the helper waits for the pipes to close after killing the group: the kill is
# immediate, so only a process that left the group (setsid) can hold them open this long.
_DRAIN_SECONDS = 1.0

HELPER_SOURCE: Final = r"""
import base64, json, os, selectors, signal, subprocess, sys, time

def kill_group(pid):
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass

def main():
    request = json.loads(base64.b64decode(sys.argv[2]))
    command, deadline, limit = request["command"], float(request["deadline"]), int(request["limit"])
    drain = float(request["drain"])
    process = subprocess.Popen(
        ["/bin/sh", "-c", command], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, start_new_session=True,
    )
    kept = {"stdout": bytearray(), "stderr": bytearray()}
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ, "stdout")
    selector.register(process.stderr, selectors.EVENT_READ, "stderr")
    deadline_at = ends_at = time.monotonic() + deadline
    truncated = timed_out = killed = forced = False
    while selector.get_map():
        now = time.monotonic()
        if process.poll() is not None and not killed:
            kill_group(process.pid)  # the command ended: nothing it started outlives it
            killed = True
            ends_at = min(ends_at, now + drain)
        if now >= ends_at:
            if process.poll() is None:
                timed_out = forced = True
                kill_group(process.pid)
            break
        for key, _ in selector.select(timeout=min(0.2, ends_at - now)):
            chunk = os.read(key.fileobj.fileno(), 65536)
            if not chunk:
                selector.unregister(key.fileobj)
                continue
            room = limit - len(kept["stdout"]) - len(kept["stderr"])
            kept[key.data] += chunk[:room]
            if len(chunk) > room:
                truncated = True
        if truncated:
            forced = process.poll() is None
            kill_group(process.pid)
            break
    if not (timed_out or truncated):
        try:  # both pipes closed while the command runs on: it still has its deadline
            process.wait(timeout=max(0.0, deadline_at - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = forced = True
    kill_group(process.pid)
    code = process.wait()
    exit_code = None if forced else (128 - code if code < 0 else code)
    result = {
        "v": 1, "exit_code": exit_code, "truncated": truncated, "timed_out": timed_out,
        "stdout": base64.b64encode(bytes(kept["stdout"])).decode("ascii"),
        "stderr": base64.b64encode(bytes(kept["stderr"])).decode("ascii"),
    }
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()

main()
"""

_BOOTSTRAP: Final = "import base64,sys;exec(base64.b64decode(sys.argv[1]))"
_ENCODED_HELPER: Final = base64.b64encode(HELPER_SOURCE.encode()).decode("ascii")


def helper_argv(command: str, *, deadline_seconds: float, output_limit: int) -> list[str]:
    """`python3 -c BOOTSTRAP HELPER REQUEST`: every argument after the bootstrap is base64."""
    if len(command.encode("utf-8", "surrogatepass")) > MAX_COMMAND_BYTES:
        raise SandboxFailure(f"the command is over {MAX_COMMAND_BYTES} bytes", reached=False)
    if "\x00" in command:
        raise SandboxFailure("the command holds a NUL character", reached=False)
    request = {"command": command, "deadline": deadline_seconds, "limit": output_limit, "drain": _DRAIN_SECONDS}
    encoded = base64.b64encode(json.dumps(request).encode("utf-8", "surrogatepass")).decode("ascii")
    return ["python3", "-c", _BOOTSTRAP, _ENCODED_HELPER, encoded]


def helper_shell_command(command: str, *, deadline_seconds: float, output_limit: int) -> str:
    """The same as one shell command line, for providers that take a string."""
    return shlex.join(helper_argv(command, deadline_seconds=deadline_seconds, output_limit=output_limit))


def result_line_limit(output_limit: int) -> int:
    """The longest answer a helper keeping `output_limit` bytes can give (base64 is 4/3)."""
    return (output_limit + 2) // 3 * 4 + 8 + _RESULT_OVERHEAD_CHARS


def parse_helper_result(text: str, *, output_limit: int) -> ExecResult:
    """The helper's one JSON line, checked field by field; anything else means the helper did
    not run to its end (python3 missing, the sandbox gone mid-command), and the command may
    have run: `SandboxFailure(reached=True)`."""
    if len(text) > result_line_limit(output_limit):
        raise _malformed("is longer than any result")
    line = text.removesuffix("\n")
    if not line or "\n" in line:
        raise _malformed("is not one line")
    try:
        data = json.loads(line)
    except ValueError:
        raise _malformed("is not JSON") from None
    if not isinstance(data, dict) or set(data) != {"v", "exit_code", "stdout", "stderr", "truncated", "timed_out"}:
        raise _malformed("has other fields")
    exit_code, truncated, timed_out = data["exit_code"], data["truncated"], data["timed_out"]
    if data["v"] != 1 or not isinstance(truncated, bool) or not isinstance(timed_out, bool):
        raise _malformed("has a wrong version or flag")
    if exit_code is not None and (isinstance(exit_code, bool) or not isinstance(exit_code, int)):
        raise _malformed("has a wrong exit status")
    if exit_code is not None and not 0 <= exit_code <= 255:
        raise _malformed("has an exit status out of range")
    stdout, stderr = _decoded(data["stdout"]), _decoded(data["stderr"])
    if len(stdout) + len(stderr) > output_limit:
        raise _malformed("carries more output than the limit")
    return ExecResult(
        exit_code=exit_code,
        stdout=stdout.decode("utf-8", "replace"),
        stderr=stderr.decode("utf-8", "replace"),
        truncated=truncated,
        timed_out=timed_out,
    )


def _decoded(value: object) -> bytes:
    if not isinstance(value, str):
        raise _malformed("has a non-text output field")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise _malformed("has an output field that is not base64") from None


def _malformed(why: str) -> SandboxFailure:
    return SandboxFailure(f"the sandbox's command helper gave no valid result: its answer {why}", reached=True)
