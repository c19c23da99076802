"""Modal, E2B and Daytona sandboxes end to end: a session created with the published client's
declarations (`Modal(app=, image=, token_id=, token_secret=)`, `E2B(template=, api_key=)`,
`Daytona(api_url=, target=, api_key=)`; under 2.0.0 the wire body they lower to), a real
`runbrain` with the providers `modal`, `e2b` and `daytona` installed, the `loop` harness and a
scripted model that creates a sandbox, runs a command in it and terminates it. The sandboxes are
the loopback fakes of tests/cloud_sandboxes, reached through the official SDKs; E2B and Daytona
through the tests' LoopbackSandboxProvider (the production class with the backend's connection
keywords in code), Modal through the production provider with the SDK's own `MODAL_SERVER_URL`
set in the test server's environment."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import brain
import pytest

from tests.cloud_sandboxes import daytona_fake, e2b_fake, modal_fake
from tests.cloud_sandboxes.daytona_fake import FakeDaytona
from tests.cloud_sandboxes.e2b_fake import FakeE2B, serve_e2b
from tests.cloud_sandboxes.http_fake import serve
from tests.cloud_sandboxes.modal_fake import FakeModal, serve_modal
from tests.fixtures.provider import LOOP_HARNESS, ScriptedProvider
from tests.fixtures.server import ROOT, BrainServer, history
from tests.support.startup import serve_and_check
from tests.tools.test_builtin_tools_loop import results_of, turn
from toolkits.sandbox.registry import BACKENDS

pytestmark = pytest.mark.client  # run under 2.3.0 and again under 2.0.0

MODEL = "openai/gpt-4.1-mini"
SIGNING_KEY = "c" * 40
OPERATIONS = ["create", "exec", "inspect", "terminate"]  # what 2.3.0 declares by default
COMMAND = "echo hello from the cloud; python3 -c 'print(6*7)'"
COMMAND_SECONDS = 60
CREDENTIAL_KEY_ENV = "TEST_CREDENTIAL_KEY_1"  # seals the bindings' credentials
LOOPBACK_PROVIDER = "tests.support.sandbox_provider.LoopbackSandboxProvider"


@dataclass
class Clouds:
    e2b: FakeE2B
    e2b_api_url: str
    e2b_envd_url: str
    daytona: FakeDaytona
    modal: FakeModal
    modal_url: str


@dataclass(frozen=True)
class Declaration:
    """One cloud as the client declares it (`options`, its keyword arguments) and as it lowers
    (`parameters`, `credential`)."""

    name: str  # the class in the client; lowercased, the provider and the binding's alias
    options: dict[str, str]
    parameters: dict[str, str]
    credential: dict[str, str]
    key: str  # the credential's secret, which must never be shown

    @property
    def provider(self) -> str:
        return self.name.lower()


@pytest.fixture
def clouds() -> Iterator[Clouds]:
    fake_e2b, fake_daytona, fake_modal = FakeE2B(), FakeDaytona(), FakeModal()
    with (
        serve_e2b(fake_e2b) as (api_url, envd_url),
        serve(fake_daytona.handle) as daytona_url,
        serve_modal(fake_modal) as modal_url,
    ):
        fake_daytona.base_url = daytona_url
        yield Clouds(fake_e2b, api_url, envd_url, fake_daytona, fake_modal, modal_url)


def declaration(provider: str, clouds: Clouds) -> Declaration:
    if provider == "modal":
        key = modal_fake.TOKEN_SECRET
        parameters = {"app": "my-tools", "image": "python:3.12-slim"}
        options = {**parameters, "token_id": modal_fake.TOKEN_ID, "token_secret": key}
        return Declaration("Modal", options, parameters, {"tokenId": modal_fake.TOKEN_ID, "tokenSecret": key}, key)
    if provider == "e2b":
        key = e2b_fake.API_KEY
        return Declaration("E2B", {"template": "base", "api_key": key}, {"template": "base"}, {"apiKey": key}, key)
    key = daytona_fake.API_KEY
    url = clouds.daytona.base_url
    return Declaration(
        "Daytona",
        {"api_url": url, "target": "eu", "api_key": key},
        {"apiUrl": url, "target": "eu"},
        {"apiKey": key},
        key,
    )


def cloud_server(brain_factory: Callable[..., BrainServer], provider: ScriptedProvider, clouds: Clouds) -> BrainServer:
    server = brain_factory(
        start=False,
        harnesses={"loop": LOOP_HARNESS},
        providers=provider.providers(),
        credential_keys={"active": "k1", "keys": {"k1": CREDENTIAL_KEY_ENV}},
    )
    server.env[CREDENTIAL_KEY_ENV] = base64.b64encode(os.urandom(32)).decode()
    # HTTP/1.1: the loopback envd speaks no h2c
    e2b_connection = {"api_url": clouds.e2b_api_url, "sandbox_url": clouds.e2b_envd_url, "http_version": "1.1"}
    installed = {
        "e2b": {"class": LOOPBACK_PROVIDER, "options": {"test_connection": e2b_connection}},
        "daytona": {"class": LOOPBACK_PROVIDER, "options": {"test_connection": {"allow_http_api": True}}},
        "modal": {"class": "tools_app.providers.sandbox.SandboxProvider", "options": {}},
    }
    server.env["MODAL_SERVER_URL"] = clouds.modal_url  # the SDK's own setting, process-wide
    server.env["BRAIN_TOOL_PROVIDERS"] = json.dumps(installed)
    server.env["SANDBOX_SIGNING_KEY"] = SIGNING_KEY
    server.start()
    return server


def lowered(declared: Declaration) -> dict[str, Any]:
    """The wire body 2.3.0 sends for the declaration (what 2.0.0's callers send by hand)."""
    binding = {
        "alias": declared.provider,
        "provider": declared.provider,
        "operations": OPERATIONS,
        "parameters": declared.parameters,
    }
    return {
        "harness": "loop",
        "config": {"model": MODEL, "tools": [], "bindings": [binding]},
        "credentials": [{"binding": declared.provider, "value": declared.credential}],
    }


def create_session(server: BrainServer, declared: Declaration) -> str:
    """With 2.3.0's declaration where the client has it, else the wire body it lowers to."""
    sdk = server.sdk()
    if hasattr(brain, declared.name):
        from brain.authoring import lower

        tool = getattr(brain, declared.name)(**declared.options)
        assert lower("loop", brain.Model(MODEL), [tool], None, None)[0] == lowered(declared)
        session = sdk.create(harness="loop", model=brain.Model(MODEL), tools=[tool])
    else:
        session = sdk.create(lowered(declared))
    return str(session["id"])


@pytest.mark.parametrize("provider", ["modal", "e2b", "daytona"])
def test_a_model_creates_a_cloud_sandbox_runs_a_command_and_terminates_it_with_the_binding_credential(
    brain_factory: Callable[..., BrainServer], scripted_provider: ScriptedProvider, clouds: Clouds, provider: str
) -> None:
    # given
    server = cloud_server(brain_factory, scripted_provider, clouds)
    declared = declaration(provider, clouds)
    owner, intruder = create_session(server, declared), create_session(server, declared)
    # when
    created = results_of(turn(server, owner, f"call {provider}_create {{}}"))
    handle = created[0]["result"]["structured_content"]["handle"]
    ran = turn(server, owner, f"call {provider}_exec {json.dumps({'handle': handle, 'command': COMMAND})}")
    intrusion = json.dumps({"handle": handle, "command": "echo intruder"})
    (refused,) = results_of(turn(server, intruder, f"call {provider}_exec {intrusion}"))
    (ended,) = results_of(turn(server, owner, f"call {provider}_terminate {json.dumps({'handle': handle})}"))
    # then: the model got the command's output
    assert [result["outcome"] for result in created] == ["ok"]
    (executed,) = results_of(ran)
    assert executed["outcome"] == "ok"
    assert executed["result"]["structured_content"] == {
        "exit_code": 0,
        "stdout": "hello from the cloud\n42\n",
        "stderr": "",
        "truncated": False,
        "timed_out": False,
    }
    answer = [event["data"]["text"] for event in ran if event["type"] == "assistant.message"][-1]
    assert answer.startswith(f"Tool {provider}_exec returned: exit status 0") and "42" in answer
    # and: another session's handle ran nothing
    assert (refused["outcome"], refused["result"]["is_error"]) == ("error", True)
    assert refused["result"]["content"][0]["text"] == "this sandbox handle belongs to another session"
    assert ended["result"]["structured_content"] == {"terminated": True}
    # and: the fake saw the binding's parameters and its key, and ran one command
    if provider == "modal":
        assert clouds.modal.requests["AppGetOrCreate"].app_name == "my-tools"
        assert clouds.modal.requests["ImageGetOrCreate"].image.dockerfile_commands == ["FROM python:3.12-slim"]
        assert clouds.modal.tokens_seen == {(modal_fake.TOKEN_ID, declared.key)}
        assert len(clouds.modal.started) == 1 and clouds.modal.terminated == ["sb-v2-1"]
    elif provider == "e2b":
        assert [body["templateID"] for body in clouds.e2b.created] == ["base"]
        assert clouds.e2b.keys_seen == {declared.key}
        assert len(clouds.e2b.started) == 1 and clouds.e2b.killed == ["e2b-1"]
    else:
        assert [body["target"] for body in clouds.daytona.created] == ["eu"]
        assert clouds.daytona.authorizations_seen == {f"Bearer {declared.key}"}
        assert len(clouds.daytona.executed) == 1 and clouds.daytona.deleted == ["dtn-1"]
    # and: the credential keys are the ones the client lowers to, and the key is never shown
    assert set(declared.credential) == set(BACKENDS[provider].credential_env)
    assert set(declared.credential) == ({"tokenId", "tokenSecret"} if provider == "modal" else {"apiKey"})
    assert set(declared.parameters) == set(BACKENDS[provider].settings_env)
    with server.client() as client:
        resources = [client.get(f"/sessions/{session_id}").text for session_id in (owner, intruder)]
    shown = [json.dumps(history(server, owner)), json.dumps(history(server, intruder)), *resources, server.logs()]
    assert [declared.key in text for text in shown] == [False] * len(shown)


def test_the_production_sandbox_provider_refuses_a_test_connection_option(
    brain_factory: Callable[..., BrainServer], tmp_path: Path
) -> None:
    # given: the production class with the tests' option
    server = brain_factory(start=False)
    installed = {
        "e2b": {
            "class": "tools_app.providers.sandbox.SandboxProvider",
            "options": {"test_connection": {"api_url": "http://127.0.0.1:9"}},
        }
    }
    server.env["BRAIN_TOOL_PROVIDERS"] = json.dumps(installed)
    server.env["SANDBOX_SIGNING_KEY"] = SIGNING_KEY
    server.config_path.write_text(json.dumps(server.config))
    # when
    checked = subprocess.run(
        [sys.executable, "manage.py", "check_brain_config", "--config", str(server.config_path)],
        cwd=ROOT,
        env=server.env,
        capture_output=True,
        text=True,
        timeout=COMMAND_SECONDS,
        check=False,
    )
    # then
    assert checked.returncode != 0
    assert "BRAIN_TOOL_PROVIDERS.e2b.options: test_connection: unknown option" in checked.stderr


def test_a_modal_provider_refuses_startup_when_the_sdk_is_pointed_at_another_server(
    brain_factory: Callable[..., BrainServer],
) -> None:
    # given the Modal provider installed and MODAL_SERVER_URL naming a server that is not Modal's
    server = brain_factory(start=False)
    installed = {"modal": {"class": "tools_app.providers.sandbox.SandboxProvider", "options": {}}}
    server.env["BRAIN_TOOL_PROVIDERS"] = json.dumps(installed)
    server.env["SANDBOX_SIGNING_KEY"] = SIGNING_KEY
    server.env["MODAL_SERVER_URL"] = "https://modal.example.com"
    served, checked = serve_and_check(server)
    # then both refuse with one line naming the setting; no server listens
    line = "MODAL_SERVER_URL points Modal's SDK at 'modal.example.com': every tenant's Modal token would go there"
    assert served.returncode != 0 and line in served.stderr
    assert "brain listening" not in served.stderr
    assert checked.returncode != 0 and line in checked.stderr
