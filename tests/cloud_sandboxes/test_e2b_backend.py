"""The E2B backend against a loopback E2B (control plane over HTTP, envd's Connect process
service), through the official SDK: the whole lifecycle, the helper's flags, an auth refusal
(nothing happened) and a lost answer (unknown)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cloud_sandboxes.e2b_fake import API_KEY, FakeE2B, serve_e2b
from toolkits.sandbox.backend import OUTPUT_LIMIT_BYTES, SandboxFailure
from toolkits.sandbox.e2b import E2BBackend

CREDENTIAL = {"apiKey": API_KEY}


@pytest.fixture
def e2b() -> Iterator[tuple[FakeE2B, E2BBackend]]:
    fake = FakeE2B()
    with serve_e2b(fake) as (api_url, envd_url):
        # the SDK's own connection settings; HTTP/1.1 because the loopback envd speaks no h2c
        yield fake, E2BBackend(api_url=api_url, sandbox_url=envd_url, http_version="1.1")


async def test_an_e2b_sandbox_is_created_run_inspected_and_terminated(e2b: tuple[FakeE2B, E2BBackend]) -> None:
    # given
    fake, backend = e2b
    # when
    sandbox_id = await backend.create({}, CREDENTIAL)
    result = await backend.exec(sandbox_id, "echo out; echo err >&2; exit 7", settings={}, credential=CREDENTIAL)
    state = await backend.inspect(sandbox_id, settings={}, credential=CREDENTIAL)
    await backend.terminate(sandbox_id, settings={}, credential=CREDENTIAL)
    gone = await backend.inspect(sandbox_id, settings={}, credential=CREDENTIAL)
    await backend.terminate(sandbox_id, settings={}, credential=CREDENTIAL)  # already gone
    # then
    assert sandbox_id == "e2b-1"
    assert fake.created == [
        {"templateID": "code-interpreter-v1", "timeout": 300, "autoPause": False, "metadata": {}, "envVars": {}}
    ]
    assert (result.exit_code, result.stdout, result.stderr) == (7, "out\n", "err\n")
    assert (result.truncated, result.timed_out) == (False, False)
    assert state["state"] == "running" and state["template_id"] == "code-interpreter-v1"
    assert gone == {"state": "gone"}
    assert fake.killed == ["e2b-1", "e2b-1"]
    assert [argv[:3] for argv in fake.started] == [["/bin/bash", "-l", "-c"]]
    assert API_KEY not in str(fake.started)  # the key never enters the sandbox


async def test_the_e2b_template_comes_from_the_binding(e2b: tuple[FakeE2B, E2BBackend]) -> None:
    fake, backend = e2b
    await backend.create({"template": "base"}, CREDENTIAL)
    assert fake.created[0]["templateID"] == "base"


async def test_an_e2b_command_past_its_deadline_is_killed_and_flagged(e2b: tuple[FakeE2B, E2BBackend]) -> None:
    fake, backend = e2b
    sandbox_id = await backend.create({}, CREDENTIAL)
    result = await backend.exec(
        sandbox_id, "echo begun; sleep 30", settings={}, credential=CREDENTIAL, deadline_seconds=1
    )
    assert (result.exit_code, result.stdout, result.timed_out, result.truncated) == (None, "begun\n", True, False)


async def test_an_e2b_command_past_the_output_limit_is_cut_and_flagged(e2b: tuple[FakeE2B, E2BBackend]) -> None:
    fake, backend = e2b
    sandbox_id = await backend.create({}, CREDENTIAL)
    result = await backend.exec(sandbox_id, "yes", settings={}, credential=CREDENTIAL)
    assert (result.exit_code, result.truncated, result.timed_out) == (None, True, False)
    assert len(result.stdout) == OUTPUT_LIMIT_BYTES and result.stderr == ""


async def test_an_e2b_auth_refusal_is_a_failure_that_did_nothing(e2b: tuple[FakeE2B, E2BBackend]) -> None:
    fake, backend = e2b
    with pytest.raises(SandboxFailure) as refused:
        await backend.create({}, {"apiKey": "e2b_wrong_key"})
    assert refused.value.reached is False
    assert "e2b_wrong_key" not in str(refused.value)
    assert fake.created == []


async def test_a_lost_e2b_exec_answer_is_unknown_and_not_retried(e2b: tuple[FakeE2B, E2BBackend]) -> None:
    # given
    fake, backend = e2b
    sandbox_id = await backend.create({}, CREDENTIAL)
    fake.drop_exec = True
    # when
    with pytest.raises(SandboxFailure) as lost:
        await backend.exec(sandbox_id, "echo once", settings={}, credential=CREDENTIAL)
    # then
    assert lost.value.reached is True
    assert len(fake.started) == 1  # sent once: no automatic retry


async def test_an_e2b_exec_on_a_sandbox_gone_is_refused_without_running(e2b: tuple[FakeE2B, E2BBackend]) -> None:
    fake, backend = e2b
    with pytest.raises(SandboxFailure) as gone:
        await backend.exec("e2b-404", "echo never", settings={}, credential=CREDENTIAL)
    assert gone.value.reached is False
    assert fake.started == []


async def test_an_e2b_binding_without_a_key_is_refused_naming_it(e2b: tuple[FakeE2B, E2BBackend]) -> None:
    fake, backend = e2b
    with pytest.raises(SandboxFailure, match="no credential 'apiKey'") as missing:
        await backend.create({}, {})
    assert missing.value.reached is False
    assert fake.created == []
