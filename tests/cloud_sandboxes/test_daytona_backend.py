"""The Daytona backend against a loopback Daytona, through the SDK's own API clients: the whole
lifecycle, the helper's flags, an auth refusal (nothing happened) and a lost answer (unknown)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cloud_sandboxes.daytona_fake import API_KEY, FakeDaytona
from tests.cloud_sandboxes.http_fake import serve
from toolkits.sandbox.backend import OUTPUT_LIMIT_BYTES, SandboxFailure
from toolkits.sandbox.daytona import DaytonaBackend


@pytest.fixture
def daytona() -> Iterator[FakeDaytona]:
    fake = FakeDaytona()
    with serve(fake.handle) as base_url:
        fake.base_url = base_url
        yield fake


def _settings(fake: FakeDaytona) -> dict[str, str]:
    return {"apiUrl": fake.base_url}


async def test_a_daytona_sandbox_is_created_run_inspected_and_terminated(daytona: FakeDaytona) -> None:
    # given
    backend, credential = DaytonaBackend(allow_http_api=True), {"apiKey": API_KEY}
    # when
    sandbox_id = await backend.create(_settings(daytona), credential)
    result = await backend.exec(
        sandbox_id, "echo out; echo err >&2; exit 7", settings=_settings(daytona), credential=credential
    )
    state = await backend.inspect(sandbox_id, settings=_settings(daytona), credential=credential)
    await backend.terminate(sandbox_id, settings=_settings(daytona), credential=credential)
    gone = await backend.inspect(sandbox_id, settings=_settings(daytona), credential=credential)
    await backend.terminate(sandbox_id, settings=_settings(daytona), credential=credential)  # already gone
    # then
    assert sandbox_id == "dtn-1"
    assert daytona.created == [
        {"target": "us", "autoStopInterval": 5, "autoDeleteInterval": 0, "public": False, "env": {}}
    ]
    assert (result.exit_code, result.stdout, result.stderr) == (7, "out\n", "err\n")
    assert (result.truncated, result.timed_out) == (False, False)
    assert state["state"] == "started" and state["target"] == "us"
    assert gone == {"state": "gone"}
    assert daytona.deleted == ["dtn-1"]
    assert API_KEY not in str(daytona.executed)  # the key never enters the sandbox


async def test_the_daytona_target_comes_from_the_binding(daytona: FakeDaytona) -> None:
    backend = DaytonaBackend(allow_http_api=True)
    await backend.create({**_settings(daytona), "target": "eu"}, {"apiKey": API_KEY})
    assert daytona.created[0]["target"] == "eu"


async def test_a_daytona_command_past_its_deadline_is_killed_and_flagged(daytona: FakeDaytona) -> None:
    backend, credential = DaytonaBackend(allow_http_api=True), {"apiKey": API_KEY}
    sandbox_id = await backend.create(_settings(daytona), credential)
    result = await backend.exec(
        sandbox_id, "echo begun; sleep 30", settings=_settings(daytona), credential=credential, deadline_seconds=1
    )
    assert (result.exit_code, result.stdout, result.timed_out, result.truncated) == (None, "begun\n", True, False)
    assert daytona.executed[0]["timeout"] == 16  # Daytona's own limit stays behind the helper's


async def test_a_daytona_command_past_the_output_limit_is_cut_and_flagged(daytona: FakeDaytona) -> None:
    backend, credential = DaytonaBackend(allow_http_api=True), {"apiKey": API_KEY}
    sandbox_id = await backend.create(_settings(daytona), credential)
    result = await backend.exec(sandbox_id, "yes", settings=_settings(daytona), credential=credential)
    assert (result.exit_code, result.truncated, result.timed_out) == (None, True, False)
    assert len(result.stdout) == OUTPUT_LIMIT_BYTES and result.stderr == ""


async def test_a_daytona_auth_refusal_is_a_failure_that_did_nothing(daytona: FakeDaytona) -> None:
    backend = DaytonaBackend(allow_http_api=True)
    with pytest.raises(SandboxFailure) as refused:
        await backend.create(_settings(daytona), {"apiKey": "wrong-key"})
    assert refused.value.reached is False
    assert "401" in str(refused.value) and "wrong-key" not in str(refused.value)
    assert daytona.created == []


async def test_a_lost_daytona_exec_answer_is_unknown_and_not_retried(daytona: FakeDaytona) -> None:
    # given
    backend, credential = DaytonaBackend(allow_http_api=True), {"apiKey": API_KEY}
    sandbox_id = await backend.create(_settings(daytona), credential)
    daytona.drop_exec = True
    # when
    with pytest.raises(SandboxFailure) as lost:
        await backend.exec(sandbox_id, "echo once >> /dev/null", settings=_settings(daytona), credential=credential)
    # then
    assert lost.value.reached is True
    assert len(daytona.executed) == 1  # sent once: no automatic retry


async def test_a_daytona_binding_without_a_key_or_with_a_clear_text_api_is_refused(daytona: FakeDaytona) -> None:
    with pytest.raises(SandboxFailure, match="no credential 'apiKey'") as missing:
        await DaytonaBackend(allow_http_api=True).create(_settings(daytona), {})
    with pytest.raises(SandboxFailure, match="must be an https URL") as clear:
        await DaytonaBackend().create(_settings(daytona), {"apiKey": API_KEY})
    assert (missing.value.reached, clear.value.reached) == (False, False)
    assert daytona.created == []
