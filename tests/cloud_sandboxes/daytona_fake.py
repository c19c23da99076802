"""A loopback Daytona: the control-plane paths the API client calls (`/sandbox`,
`/sandbox/{id}`) and the toolbox's `/process/execute`, which runs the command on this machine as
Daytona's daemon runs it inside the sandbox (`sh -c`, stdout back as `result`)."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler

from tests.cloud_sandboxes.http_fake import drop_connection, run_like_a_daemon, send_json

API_KEY = "daytona-test-key-0123456789"


@dataclass
class FakeDaytona:
    base_url: str = ""
    sandboxes: dict[str, dict[str, object]] = field(default_factory=dict)
    created: list[dict[str, object]] = field(default_factory=list)  # the create bodies
    executed: list[dict[str, object]] = field(default_factory=list)  # the execute bodies
    deleted: list[str] = field(default_factory=list)
    authorizations_seen: set[str] = field(default_factory=set)  # every Authorization header received
    drop_exec: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def handle(self, request: BaseHTTPRequestHandler, method: str, path: str, body: bytes) -> None:
        with self.lock:
            self.authorizations_seen.add(str(request.headers.get("Authorization")))
        if request.headers.get("Authorization") != f"Bearer {API_KEY}":
            send_json(request, 401, {"statusCode": 401, "message": "Unauthorized"})
            return
        parts = path.split("?")[0].strip("/").split("/")
        if method == "POST" and parts == ["sandbox"]:
            self._create(request, json.loads(body))
        elif parts[0] == "sandbox" and len(parts) == 2:
            self._one(request, method, parts[1])
        elif method == "POST" and parts[0] == "toolbox" and parts[2:] == ["process", "execute"]:
            self._execute(request, parts[1], json.loads(body))
        else:
            send_json(request, 404, {"statusCode": 404, "message": f"no route {method} {path}"})

    def _create(self, request: BaseHTTPRequestHandler, body: dict[str, object]) -> None:
        with self.lock:
            self.created.append(body)
            sandbox_id = f"dtn-{len(self.created)}"
            self.sandboxes[sandbox_id] = _sandbox(sandbox_id, body, self.base_url, state="creating")
            send_json(request, 200, self.sandboxes[sandbox_id])

    def _one(self, request: BaseHTTPRequestHandler, method: str, sandbox_id: str) -> None:
        with self.lock:
            sandbox = self.sandboxes.get(sandbox_id)
            if sandbox is None:
                send_json(request, 404, {"statusCode": 404, "message": "Sandbox not found"})
            elif method == "GET":
                if sandbox["state"] == "creating":  # booted by the time it is read again
                    sandbox["state"] = "started"
                send_json(request, 200, sandbox)
            elif method == "DELETE":
                del self.sandboxes[sandbox_id]
                self.deleted.append(sandbox_id)
                send_json(request, 200, {**sandbox, "state": "destroying"})

    def _execute(self, request: BaseHTTPRequestHandler, sandbox_id: str, body: dict[str, object]) -> None:
        with self.lock:
            self.executed.append(body)
            known = sandbox_id in self.sandboxes
        if not known:
            send_json(request, 404, {"statusCode": 404, "message": "Sandbox not found"})
            return
        code, stdout, _ = run_like_a_daemon(["/bin/sh", "-c", str(body["command"])])
        if self.drop_exec:
            drop_connection(request)
            return
        send_json(request, 200, {"exitCode": code, "result": stdout})


def _sandbox(sandbox_id: str, body: dict[str, object], base_url: str, *, state: str) -> dict[str, object]:
    return {
        "id": sandbox_id,
        "organizationId": "org-1",
        "name": sandbox_id,
        "user": "daytona",
        "env": body.get("env") or {},
        "labels": body.get("labels") or {},
        "public": bool(body.get("public")),
        "networkBlockAll": False,
        "target": body.get("target") or "us",
        "cpu": 1,
        "gpu": 0,
        "memory": 1,
        "disk": 3,
        "state": state,
        "autoStopInterval": body.get("autoStopInterval"),
        "autoDeleteInterval": body.get("autoDeleteInterval"),
        "createdAt": "2026-01-01T00:00:00Z",
        "toolboxProxyUrl": f"{base_url}/toolbox",
    }
