"""Private credentials for tests against a real server: keyed servers, the stored records, and
the credential commands."""

from __future__ import annotations

import base64
import contextlib
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from brain import Brain, RuntimeTool

from tests.fixtures.server import ROOT, BrainServer
from tools_app.vault import CredentialVault, SealedCredential

MODEL = "openai/gpt-4.1-mini"
SECRET = "private-resource-token-7f3a9c"  # must appear nowhere Brain writes
KEY_ENVS = {"k1": "TEST_CREDENTIAL_KEY_1", "k2": "TEST_CREDENTIAL_KEY_2"}


def _lookup(arguments: Any, context: Any) -> dict[str, Any]:
    return {"echo": arguments}


LOOKUP = RuntimeTool("lookup", "Read application data", {"type": "object"}, _lookup)


def keyed_server(
    factory: Callable[..., BrainServer], *, active: str = "k1", env: dict[str, str] | None = None, **overrides: Any
) -> BrainServer:
    """A server whose credential_keys hold k1 and k2 (random keys), `active` sealing."""
    server: BrainServer = factory(start=False, credential_keys={"active": active, "keys": dict(KEY_ENVS)}, **overrides)
    for name in KEY_ENVS.values():
        server.env[name] = base64.b64encode(os.urandom(32)).decode()
    server.env.update(env or {})
    server.start()
    return server


def vault_of(server: BrainServer, *, active: str = "k1") -> CredentialVault:
    keys = {key_id: base64.b64decode(server.env[name]) for key_id, name in KEY_ENVS.items()}
    return CredentialVault(keys, active=active)


def stored_credentials(data_dir: Path) -> dict[tuple[str, str], tuple[str, SealedCredential]]:
    """(session, alias) -> (tenant, record) as the server's SQLite database holds them."""
    with contextlib.closing(sqlite3.connect(data_dir / "metadata.sqlite")) as connection:
        rows = connection.execute(
            "SELECT session_id, alias, tenant, version, key_id, nonce, ciphertext, revoked"
            " FROM tools_app_sessioncredential"
        ).fetchall()
    return {(row[0], row[1]): (row[2], SealedCredential(row[3], row[4], row[5], row[6], bool(row[7]))) for row in rows}


def files_holding(root: Path, needle: bytes) -> list[str]:
    return sorted(str(path) for path in root.rglob("*") if path.is_file() and needle in path.read_bytes())


def create_with_credential(client: Brain, value: Any = None) -> Any:
    body = {
        "harness": "instant",
        "config": {"model": MODEL, "tools": []},
        "credentials": [{"binding": "runtime", "value": value if value is not None else {"token": SECRET}}],
    }
    return client.create(body, runtime_tools=[LOOKUP])  # type: ignore[arg-type]  # the SDK passes extra keys on


def manage(server: BrainServer, *arguments: str, config: Path | None = None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "manage.py", *arguments, "--config", str(config or server.config_path)]
    return subprocess.run(command, cwd=ROOT, env=server.env, capture_output=True, text=True, timeout=60)


def create_with_model_credential(client: Brain, credential: dict[str, str] | None, *, harness: str = "loop") -> Any:
    """A session whose model calls use `credential` ({"api_key": K} or {"reference": R}), created
    as the 2.3.0 client's own style does (`Model(name, ApiKey(k))`, `CredentialReference(r)`);
    the 2.0.0 client lacks those and sends the same body as a wire dict."""
    import brain

    if hasattr(brain, "Model"):
        wrapped = None
        if credential is not None:
            api_key = credential.get("api_key")
            wrapped = (
                brain.ApiKey(api_key) if api_key is not None else brain.CredentialReference(credential["reference"])
            )
        return client.create(harness=harness, model=brain.Model(MODEL, wrapped), tools=[])
    body: dict[str, Any] = {"harness": harness, "config": {"model": MODEL, "tools": []}}
    if credential is not None:
        body["model_credential"] = credential
    return client.create(body)  # type: ignore[arg-type]  # the 2.0.0 client passes the extra key on
