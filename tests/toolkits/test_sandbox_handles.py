"""Signed handles through the shared tool layer over a real local sandbox: a tampered handle,
another tenant's or another session's, and exec after the 5-minute window are refused before
anything runs; inspect and terminate still work after it; a handle outlives a restart."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from tests.toolkits.support import local_backend
from toolkits.sandbox.handles import HandleSigner
from toolkits.sandbox.local import LocalBackend
from toolkits.sandbox.tools import Answer, BackendConfig, SandboxTools, Scope

KEY = b"k" * 32
ALICE = Scope("acme", "session-a")
CONFIGS: dict[str, BackendConfig] = {"local": ({}, {})}
MARKER = "touch ran.txt; echo ran"


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def backend(tmp_path: Path) -> LocalBackend:
    return local_backend(tmp_path / "data")


def tools_over(backend: LocalBackend, clock: Clock, **limits: int) -> SandboxTools:
    return SandboxTools({"local": backend}, HandleSigner(KEY, clock=clock), **limits)


async def created(tools: SandboxTools, scope: Scope = ALICE) -> tuple[str, str]:
    answer = await tools.run("create", scope, {}, CONFIGS)
    assert answer.structured is not None, answer.text
    handle = str(answer.structured["handle"])
    sandbox_id = json.loads(base64.urlsafe_b64decode(handle.split(".")[1] + "=="))["i"]
    return handle, sandbox_id


async def exec_marker(tools: SandboxTools, handle: str, scope: Scope = ALICE) -> Answer:
    return await tools.run("exec", scope, {"handle": handle, "command": MARKER}, CONFIGS)


def flip(text: str, index: int) -> str:
    return text[:index] + ("A" if text[index] != "A" else "B") + text[index + 1 :]


async def test_a_valid_handle_runs_the_command_and_reports_status_and_flags(
    backend: LocalBackend, clock: Clock
) -> None:
    # given
    tools = tools_over(backend, clock)
    handle, sandbox_id = await created(tools)
    # when
    answer = await tools.run("exec", ALICE, {"handle": handle, "command": "python3 -c 'print(6*7)'"}, CONFIGS)
    # then
    assert answer.structured == {"exit_code": 0, "stdout": "42\n", "stderr": "", "truncated": False, "timed_out": False}
    assert (answer.is_error, answer.unknown_outcome) == (False, False)
    assert sandbox_id not in answer.text


@pytest.mark.parametrize(
    ("tamper", "message"),
    [
        pytest.param(lambda handle: flip(handle, 10), "signature does not match", id="payload_case"),
        pytest.param(lambda handle: flip(handle, len(handle) - 3), "signature does not match", id="signature_case"),
        pytest.param(lambda handle: handle.replace("sbx1", "sbx2", 1), "not a sandbox handle", id="prefix_case"),
        pytest.param(lambda handle: "x" * 5000, "not a sandbox handle", id="oversized_case"),
    ],
)
async def test_a_tampered_handle_is_refused_and_nothing_runs(
    backend: LocalBackend, clock: Clock, tamper: object, message: str
) -> None:
    # given
    tools = tools_over(backend, clock)
    handle, sandbox_id = await created(tools)
    # when
    answer = await exec_marker(tools, tamper(handle))  # type: ignore[operator]  # the parametrized lambda
    # then
    assert (answer.is_error, answer.unknown_outcome) == (True, False)
    assert message in answer.text
    assert not (backend.root / sandbox_id / "work" / "ran.txt").exists()


@pytest.mark.parametrize(
    "intruder",
    [
        pytest.param(Scope("globex", "session-a"), id="other_tenant_case"),
        pytest.param(Scope("acme", "session-b"), id="other_session_case"),
    ],
)
async def test_a_handle_presented_by_another_tenant_or_session_is_refused(
    backend: LocalBackend, clock: Clock, intruder: Scope
) -> None:
    # given
    tools = tools_over(backend, clock)
    handle, sandbox_id = await created(tools)
    # when
    answers = [
        await exec_marker(tools, handle, intruder),
        await tools.run("inspect", intruder, {"handle": handle}, CONFIGS),
        await tools.run("terminate", intruder, {"handle": handle}, CONFIGS),
    ]
    # then
    assert [(answer.is_error, answer.text) for answer in answers] == [
        (True, "this sandbox handle belongs to another session")
    ] * 3
    assert not (backend.root / sandbox_id / "work" / "ran.txt").exists()
    assert (backend.root / sandbox_id).is_dir()


async def test_exec_is_refused_five_minutes_after_create_but_inspect_and_terminate_still_work(
    tmp_path: Path, clock: Clock
) -> None:
    # given: a sandbox that outlives the handle's exec window
    backend = local_backend(tmp_path / "data", lifetime_seconds=3600)
    tools = tools_over(backend, clock)
    handle, sandbox_id = await created(tools)
    clock.now += 300
    # when
    refused = await exec_marker(tools, handle)
    inspected = await tools.run("inspect", ALICE, {"handle": handle}, CONFIGS)
    terminated = await tools.run("terminate", ALICE, {"handle": handle}, CONFIGS)
    # then
    assert refused.is_error and "no longer authorizes exec" in refused.text
    assert not (tmp_path / "data" / "sandboxes" / sandbox_id / "work" / "ran.txt").exists()
    assert inspected.structured is not None and inspected.structured["state"] == "running"
    assert inspected.structured["exec_allowed"] is False
    assert (terminated.is_error, terminated.structured) == (False, {"terminated": True})
    assert not (tmp_path / "data" / "sandboxes" / sandbox_id).exists()


async def test_a_handle_stays_valid_across_a_restart_with_the_same_key(tmp_path: Path, clock: Clock) -> None:
    # given
    first = tools_over(local_backend(tmp_path / "data"), clock)
    handle, _ = await created(first)
    await first.run("exec", ALICE, {"handle": handle, "command": "echo kept > note.txt"}, CONFIGS)
    await first.aclose()
    # when: a new process: new backend over the same directory, same key
    second = tools_over(local_backend(tmp_path / "data"), clock)
    answer = await second.run("exec", ALICE, {"handle": handle, "command": "cat note.txt"}, CONFIGS)
    other_key = SandboxTools({"local": local_backend(tmp_path / "data")}, HandleSigner(b"z" * 32, clock=clock))
    refused = await other_key.run("exec", ALICE, {"handle": handle, "command": "cat note.txt"}, CONFIGS)
    # then
    assert answer.structured is not None and answer.structured["stdout"] == "kept\n"
    assert refused.is_error and "signature does not match" in refused.text


async def test_a_tenant_holds_a_bounded_number_of_live_sandboxes(backend: LocalBackend, clock: Clock) -> None:
    # given
    tools = tools_over(backend, clock, max_live_per_tenant=2)
    first, _ = await created(tools)
    await created(tools)
    # when
    third = await tools.run("create", ALICE, {}, CONFIGS)
    other_tenant = await tools.run("create", Scope("globex", "s"), {}, CONFIGS)
    await tools.run("terminate", ALICE, {"handle": first}, CONFIGS)
    after_terminate = await tools.run("create", ALICE, {}, CONFIGS)
    # then
    assert (third.is_error, third.unknown_outcome) == (True, False) and "2 live sandboxes" in third.text
    assert not other_tenant.is_error and not after_terminate.is_error
    assert len(list(backend.root.glob("[0-9a-f]*"))) == 3
