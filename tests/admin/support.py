"""Operators of a real Brain server's admin: users made with `manage.py` as the README says, and
an HTTP client logged in with a session cookie and CSRF token, as a browser is."""

from __future__ import annotations

import html
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from tests.fixtures.server import BrainServer

ROOT = Path(__file__).resolve().parents[2]
OPERATOR = "operator"
OPERATOR_PASSWORD = "operator-password-0123"  # test-only; Django's validators do not run on --noinput
VIEWER = "viewer"
VIEWER_PASSWORD = "viewer-password-0123"
MANAGE_TIMEOUT_SECONDS = 60


def manage(server: BrainServer, *arguments: str, env: dict[str, str] | None = None) -> str:
    """`python manage.py ARGUMENTS --config <the server's config>` on the server's data dir."""
    completed = subprocess.run(
        [sys.executable, "manage.py", *arguments, "--config", str(server.config_path)],
        cwd=ROOT,
        env={**server.env, **(env or {})},
        capture_output=True,
        text=True,
        timeout=MANAGE_TIMEOUT_SECONDS,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    return completed.stdout


def create_superuser(server: BrainServer, username: str = OPERATOR, password: str = OPERATOR_PASSWORD) -> None:
    manage(
        server,
        "createsuperuser",
        "--noinput",
        "--username",
        username,
        "--email",
        f"{username}@example.com",
        env={"DJANGO_SUPERUSER_PASSWORD": password},
    )


def create_viewer(server: BrainServer) -> None:
    """A staff user who may view sessions but not change them (so neither interrupt nor close)."""
    code = (
        "from django.contrib.auth.models import Permission, User; "
        f"user = User.objects.create_user({VIEWER!r}, password={VIEWER_PASSWORD!r}, is_staff=True); "
        "user.user_permissions.add("
        "Permission.objects.get(codename='view_session', content_type__app_label='sessions_app'))"
    )
    manage(server, "shell", "-c", code)


class AdminClient:
    """An admin session over HTTP: the cookies a browser keeps, the CSRF token it would send."""

    def __init__(self, server: BrainServer) -> None:
        self.http = httpx.Client(base_url=server.url, timeout=30)

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.http.close()

    def login(self, username: str = OPERATOR, password: str = OPERATOR_PASSWORD) -> AdminClient:
        self.http.get("/admin/login/")
        response = self.post("/admin/login/?next=/admin/", {"username": username, "password": password})
        assert response.status_code == 302 and response.headers["location"] == "/admin/", response.text[:2000]
        return self

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.http.get(path, **kwargs)

    def post(self, path: str, data: dict[str, str] | None = None) -> httpx.Response:
        token = self.http.cookies.get("csrftoken", "")
        return self.http.post(path, data={"csrfmiddlewaretoken": token, **(data or {})})

    def page(self, path: str) -> str:
        response = self.get(path)
        assert response.status_code == 200, (response.status_code, response.text[:2000])
        return response.text


def transcript_rows(page: str) -> list[tuple[str, str]]:
    """(event type, text) of each transcript entry on a session page, in page order."""
    rows = re.findall(r'<li class="transcript-entry[^"]*" data-type="([^"]+)">(.*?)</li>', page, re.DOTALL)
    return [(kind, _text_of(body)) for kind, body in rows]


def _text_of(body: str) -> str:
    match = re.search(r'<div class="entry-text">(.*?)(?:<span class="entry-more">|</div>)', body, re.DOTALL)
    if match is None:
        match = re.search(r'<span class="entry-status-value">(.*?)</span>', body, re.DOTALL)
    return html.unescape(match.group(1).strip()) if match else ""
