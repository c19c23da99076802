"""Storage tools end to end: sessions created with the published client's declarations on a real
`runbrain`, a `loop` turn whose scripted model calls the tools, moto's S3 server as the bucket
(`aws_s3` bindings with their own sealed keys) and a directory (the operator's `storage_*`)."""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.provider import LOOP_HARNESS, ScriptedProvider
from tests.fixtures.server import BrainServer, history
from tests.fixtures.services import MotoS3
from tests.support.credentials import keyed_server
from tests.support.storage_sessions import create_with_aws_s3, create_with_managed_tools
from toolkits.storage.keys import tenant_root

pytestmark = pytest.mark.client  # run under 2.3.0 and again under 2.0.0

TURN_SECONDS = 30.0
STORAGE_TOOLS = ["storage_list", "storage_read", "storage_write", "storage_delete"]
NOTE = "Buy milk, then call Ada."
TURN_SCRIPT = {
    "rules": [
        {
            "match": "save my note",
            "tool_calls": [{"name": "aws_s3_write", "arguments": {"key": "notes/today.md", "content": NOTE}}],
        },
        {
            "match": "Wrote notes/today.md",
            "after_tool": True,
            "tool_calls": [{"name": "aws_s3_list", "arguments": {"prefix": "notes/"}}],
        },
        {
            "match": f"notes/today.md ({len(NOTE)} bytes)",
            "after_tool": True,
            "tool_calls": [{"name": "aws_s3_read", "arguments": {"key": "notes/today.md"}}],
        },
    ]
}


def _server(factory: Callable[..., BrainServer], provider: ScriptedProvider, files: Path) -> BrainServer:
    providers = {
        "aws_s3": {"class": "tests.support.storage.LoopbackAwsS3Provider"},
        "storage": {
            "class": "tests.support.storage.LoopbackStorageProvider",
            "options": {"backend": "filesystem", "root": str(files), "prefix": "agents", "allow_write": True},
        },
    }
    tools = [
        {"name": name, "transport": "provider", "provider": "storage", "operation": name.removeprefix("storage_")}
        | {"tenants": ["acme", "globex"]}
        for name in STORAGE_TOOLS
    ]
    return keyed_server(
        factory,
        env={"BRAIN_TOOL_PROVIDERS": json.dumps(providers)},
        harnesses={"loop": LOOP_HARNESS},
        providers=provider.providers(),
        tools=tools,
    )


def _turn(server: BrainServer, session_id: str, text: str, name: str = "alice") -> list[dict[str, Any]]:
    sent = server.sdk(name).send(session_id, {"type": "user.message", "text": text})
    deadline = time.monotonic() + TURN_SECONDS
    while time.monotonic() < deadline:
        events = [event for event in history(server, session_id, name) if event.get("input_id") == sent["id"]]
        if events and events[-1]["type"] == "session.status" and events[-1]["data"]["status"] != "running":
            return events
        time.sleep(0.05)
    raise AssertionError(f"the turn of {text!r} never ended")


def _of(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [event["data"] for event in events if event["type"] == kind]


def _aws(moto: MotoS3, bucket: str) -> dict[str, str]:
    return {
        "bucket": bucket,
        "region": moto.region,
        "endpoint": moto.endpoint,
        "prefix": "agents",
        "access_key_id": moto.access_key,
        "secret_access_key": moto.secret_key,
    }


def test_a_turn_writes_lists_and_reads_through_an_aws_s3_binding_and_another_tenant_cannot_read_it(
    brain_factory: Callable[..., BrainServer], scripted_provider: ScriptedProvider, moto_s3: MotoS3, tmp_path: Path
) -> None:
    # given
    server = _server(brain_factory, scripted_provider, tmp_path / "files")
    bucket = moto_s3.create_bucket(f"notes-{secrets.token_hex(4)}")
    session = create_with_aws_s3(
        server.sdk("alice"), _aws(moto_s3, bucket), operations=["list", "read", "write", "delete"]
    )
    foreign = create_with_aws_s3(server.sdk("charlie"), _aws(moto_s3, bucket))
    scripted_provider.set_script(TURN_SCRIPT)
    # when
    events = _turn(server, session["id"], "Please save my note.")
    acme = tenant_root("", "acme").rstrip("/")
    crafted = [f"../{acme}/notes/today.md", f"agents/{acme}/notes/today.md", "notes/today.md"]
    calls = "\n".join(f"call aws_s3_read {json.dumps({'key': key})}" for key in crafted)
    stolen = _turn(server, foreign["id"], calls, "charlie")
    # then: three calls, one after another, each ok; the model answered from the read
    calls_made = _of(events, "tool.call")
    assert [call["name"] for call in calls_made] == ["aws_s3_write", "aws_s3_list", "aws_s3_read"]
    assert [result["outcome"] for result in _of(events, "tool.result")] == ["ok", "ok", "ok"]
    assert _of(events, "assistant.message")[-1]["text"] == f"Tool aws_s3_read returned: {NOTE}"
    stored = moto_s3.client().get_object(Bucket=bucket, Key=tenant_root("agents", "acme") + "notes/today.md")
    assert stored["Body"].read() == NOTE.encode()
    # the other tenant's calls ran and got nothing of acme's
    results = _of(stolen, "tool.result")
    assert [result["outcome"] for result in results] == ["error", "error", "error"]
    assert NOTE not in json.dumps(stolen)
    assert moto_s3.client().list_objects_v2(Bucket=bucket)["KeyCount"] == 1


def test_an_aws_s3_binding_without_write_gives_the_model_no_write_tool(
    brain_factory: Callable[..., BrainServer], scripted_provider: ScriptedProvider, moto_s3: MotoS3, tmp_path: Path
) -> None:
    # given: the client's default operations (list, read)
    server = _server(brain_factory, scripted_provider, tmp_path / "files")
    bucket = moto_s3.create_bucket(f"notes-{secrets.token_hex(4)}")
    session = create_with_aws_s3(server.sdk("alice"), _aws(moto_s3, bucket))
    # when
    events = _turn(server, session["id"], 'call aws_s3_write {"key": "x.txt", "content": "x"}')
    # then
    names = [descriptor["name"] for descriptor in server.sdk("alice").get(session["id"])["descriptors"]]
    assert sorted(names) == ["aws_s3_list", "aws_s3_read"]
    assert _of(events, "tool.call") == []
    assert _of(events, "assistant.message")[-1]["text"].startswith("I cannot call aws_s3_write")
    assert moto_s3.client().list_objects_v2(Bucket=bucket)["KeyCount"] == 0


def test_the_operators_storage_tools_work_from_config_tools(
    brain_factory: Callable[..., BrainServer], scripted_provider: ScriptedProvider, tmp_path: Path
) -> None:
    # given
    files = tmp_path / "files"
    server = _server(brain_factory, scripted_provider, files)
    session = create_with_managed_tools(server.sdk("alice"), STORAGE_TOOLS)
    # when
    wrote = _turn(server, session["id"], 'call storage_write {"key": "plan.txt", "content": "Ship it"}')
    read = _turn(server, session["id"], 'call storage_read {"key": "plan.txt"}')
    # then
    assert [result["outcome"] for result in _of(wrote, "tool.result")] == ["ok"]
    assert _of(read, "assistant.message")[-1]["text"] == "Tool storage_read returned: Ship it"
    assert (files / tenant_root("agents", "acme") / "plan.txt").read_text() == "Ship it"
