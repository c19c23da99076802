"""The Modal backend against a loopback Modal through the official SDK's blocking API: the control
plane and the task command router over gRPC on Modal's own generated service bases, the exec
running the command helper on this machine. The whole lifecycle, the helper's flags, an auth
refusal (nothing happened) and a lost answer (unknown)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cloud_sandboxes.modal_fake import TOKEN_ID, TOKEN_SECRET, FakeModal, serve_modal
from toolkits.sandbox.backend import OUTPUT_LIMIT_BYTES, SandboxFailure
from toolkits.sandbox.modal import ModalBackend

CREDENTIAL = {"tokenId": TOKEN_ID, "tokenSecret": TOKEN_SECRET}


@pytest.fixture
def modal_fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeModal]:
    fake = FakeModal()
    with serve_modal(fake) as server_url:
        monkeypatch.setenv("MODAL_SERVER_URL", server_url)  # the SDK's documented server setting
        yield fake


async def test_a_modal_sandbox_is_created_run_inspected_and_terminated(modal_fake: FakeModal) -> None:
    # given
    backend = ModalBackend()
    # when
    sandbox_id = await backend.create({}, CREDENTIAL)
    result = await backend.exec(sandbox_id, "echo out; echo err >&2; exit 7", settings={}, credential=CREDENTIAL)
    state = await backend.inspect(sandbox_id, settings={}, credential=CREDENTIAL)
    await backend.terminate(sandbox_id, settings={}, credential=CREDENTIAL)
    ended = await backend.inspect(sandbox_id, settings={}, credential=CREDENTIAL)
    # then
    assert sandbox_id == "sb-v2-1"
    definition = modal_fake.created[0].definition
    assert (definition.timeout_secs, definition.resources.milli_cpu, definition.resources.memory_mb) == (300, 1000, 512)
    assert list(modal_fake.created[0].secret_sources) == []  # no credentials enter the sandbox
    assert (result.exit_code, result.stdout, result.stderr) == (7, "out\n", "err\n")
    assert (result.truncated, result.timed_out) == (False, False)
    assert state == {"state": "running"}
    assert ended == {"state": "ended", "exit_code": 137}  # Modal's code for a terminated sandbox
    assert modal_fake.terminated == ["sb-v2-1"]
    assert modal_fake.router_calls == ["TaskExecStart", "TaskExecStdioRead", "TaskExecWait"]
    assert [argv[:2] for argv in modal_fake.started] == [["python3", "-c"]]
    assert TOKEN_SECRET not in str(modal_fake.started)


async def test_a_modal_create_looks_up_the_spec_app_and_image_with_the_binding_token(modal_fake: FakeModal) -> None:
    # when
    await ModalBackend().create({}, CREDENTIAL)
    # then (the SDK looks the environment up once per process, so it may not appear here)
    assert {"AppGetOrCreate", "ImageGetOrCreate", "AuthTokenGet"} <= set(modal_fake.calls)
    assert modal_fake.calls[-1] == "SandboxCreateV2" and modal_fake.calls.count("SandboxCreateV2") == 1
    assert modal_fake.requests["AppGetOrCreate"].app_name == "brain-tools"
    assert modal_fake.requests["ImageGetOrCreate"].image.dockerfile_commands == ["FROM python:3.13-slim"]
    assert modal_fake.created[0].app_id == "ap-1" and modal_fake.created[0].definition.image_id == "im-1"


async def test_the_modal_app_and_image_come_from_the_binding(modal_fake: FakeModal) -> None:
    settings = {"app": "my-tools", "image": "python:3.12-slim"}
    await ModalBackend().create(settings, CREDENTIAL)
    assert modal_fake.requests["AppGetOrCreate"].app_name == "my-tools"
    assert modal_fake.requests["ImageGetOrCreate"].image.dockerfile_commands == ["FROM python:3.12-slim"]


async def test_a_modal_command_past_its_deadline_is_killed_and_flagged(modal_fake: FakeModal) -> None:
    backend = ModalBackend()
    sandbox_id = await backend.create({}, CREDENTIAL)
    result = await backend.exec(
        sandbox_id, "echo begun; sleep 30", settings={}, credential=CREDENTIAL, deadline_seconds=1
    )
    assert (result.exit_code, result.stdout, result.timed_out, result.truncated) == (None, "begun\n", True, False)


async def test_a_modal_command_past_the_output_limit_is_cut_and_flagged(modal_fake: FakeModal) -> None:
    backend = ModalBackend()
    sandbox_id = await backend.create({}, CREDENTIAL)
    result = await backend.exec(sandbox_id, "yes", settings={}, credential=CREDENTIAL)
    assert (result.exit_code, result.truncated, result.timed_out) == (None, True, False)
    assert len(result.stdout) == OUTPUT_LIMIT_BYTES and result.stderr == ""


async def test_a_modal_auth_refusal_is_a_failure_that_did_nothing(modal_fake: FakeModal) -> None:
    # when
    with pytest.raises(SandboxFailure) as refused:
        await ModalBackend().create({}, {"tokenId": TOKEN_ID, "tokenSecret": "as-wrong"})
    # then
    assert refused.value.reached is False
    assert "as-wrong" not in str(refused.value)
    assert modal_fake.calls == [] and modal_fake.created == []


async def test_a_lost_modal_exec_answer_is_unknown_and_not_retried(modal_fake: FakeModal) -> None:
    # given
    backend = ModalBackend()
    sandbox_id = await backend.create({}, CREDENTIAL)
    modal_fake.drop_exec = True
    # when
    with pytest.raises(SandboxFailure) as lost:
        await backend.exec(sandbox_id, "echo once", settings={}, credential=CREDENTIAL)
    # then
    assert lost.value.reached is True
    assert len(modal_fake.started) == 1  # run once: no automatic retry


async def test_a_modal_exec_on_a_sandbox_gone_is_refused_without_running(modal_fake: FakeModal) -> None:
    with pytest.raises(SandboxFailure) as gone:
        await ModalBackend().exec("sb-v2-404", "echo never", settings={}, credential=CREDENTIAL)
    assert gone.value.reached is False
    assert modal_fake.started == [] and modal_fake.router_calls == []


async def test_a_modal_exec_on_a_terminated_sandbox_is_refused_without_running(modal_fake: FakeModal) -> None:
    backend = ModalBackend()
    sandbox_id = await backend.create({}, CREDENTIAL)
    await backend.terminate(sandbox_id, settings={}, credential=CREDENTIAL)
    with pytest.raises(SandboxFailure, match="the sandbox has ended") as ended:
        await backend.exec(sandbox_id, "echo never", settings={}, credential=CREDENTIAL)
    assert ended.value.reached is False
    assert modal_fake.started == []


async def test_a_modal_sandbox_that_does_not_exist_is_gone_and_terminating_it_succeeds(modal_fake: FakeModal) -> None:
    backend = ModalBackend()
    assert await backend.inspect("sb-v2-404", settings={}, credential=CREDENTIAL) == {"state": "gone"}
    await backend.terminate("sb-v2-404", settings={}, credential=CREDENTIAL)
    assert modal_fake.terminated == []  # the look-up said not found: already gone, nothing to end


async def test_a_modal_binding_without_its_token_secret_is_refused_naming_it(modal_fake: FakeModal) -> None:
    with pytest.raises(SandboxFailure, match="no credential 'tokenSecret'") as missing:
        await ModalBackend().create({}, {"tokenId": TOKEN_ID})
    assert missing.value.reached is False
    assert modal_fake.calls == []
