"""The live check (what `python -m services.sandbox live` runs): missing credentials fail naming
the variables before anything is called, and a full run creates, executes, inspects and always
terminates (here against the loopback Daytona)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cloud_sandboxes.daytona_fake import API_KEY, FakeDaytona
from tests.cloud_sandboxes.http_fake import serve
from toolkits.sandbox.daytona import DaytonaBackend
from toolkits.sandbox.live import LiveCheckFailed, live_check


@pytest.mark.parametrize(
    ("provider_case", "provider", "environ", "message"),
    [
        ("modal_case", "modal", {}, "modal live check: set MODAL_TOKEN_ID, MODAL_TOKEN_SECRET (missing credentials)"),
        ("modal_half_case", "modal", {"MODAL_TOKEN_ID": "ak-1"}, "modal live check: set MODAL_TOKEN_SECRET"),
        ("e2b_case", "e2b", {"E2B_TEMPLATE": "base"}, "e2b live check: set E2B_API_KEY (missing credentials)"),
        ("daytona_case", "daytona", {"DAYTONA_API_KEY": ""}, "daytona live check: set DAYTONA_API_KEY"),
    ],
)
async def test_a_live_check_without_credentials_fails_naming_the_variables(
    provider_case: str, provider: str, environ: dict[str, str], message: str, tmp_path: Path
) -> None:
    with pytest.raises(LiveCheckFailed) as failed:
        await live_check(provider, environ, data_dir=tmp_path)
    assert str(failed.value).startswith(message)


async def test_a_live_check_of_an_unknown_provider_names_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(LiveCheckFailed, match="unknown provider 'nimbus': choose one of local, modal, e2b, daytona"):
        await live_check("nimbus", {}, data_dir=tmp_path)


async def test_a_live_check_creates_runs_inspects_and_terminates(tmp_path: Path) -> None:
    fake = FakeDaytona()
    with serve(fake.handle) as base_url:
        fake.base_url = base_url
        environ = {"DAYTONA_API_KEY": API_KEY, "DAYTONA_API_URL": base_url, "DAYTONA_TARGET": "eu"}
        report = await live_check("daytona", environ, data_dir=tmp_path, backend=DaytonaBackend(allow_http_api=True))
    assert report["sandbox"] == "dtn-1" and report["terminated"] is True
    assert report["exec"] == {"exit_code": 0, "stdout": "3\nbrain-live-check\n", "stderr": ""}
    assert fake.created[0]["target"] == "eu"
    assert fake.deleted == ["dtn-1"] and fake.sandboxes == {}


async def test_a_live_check_whose_command_fails_still_terminates_the_sandbox(tmp_path: Path) -> None:
    fake = FakeDaytona(drop_exec=True)
    with serve(fake.handle) as base_url:
        fake.base_url = base_url
        environ = {"DAYTONA_API_KEY": API_KEY, "DAYTONA_API_URL": base_url}
        with pytest.raises(LiveCheckFailed, match="daytona live check: daytona exec: the outcome is unknown"):
            await live_check("daytona", environ, data_dir=tmp_path, backend=DaytonaBackend(allow_http_api=True))
    assert fake.deleted == ["dtn-1"]
