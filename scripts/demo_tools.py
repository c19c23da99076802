"""The tools `make run` binds besides `echo`: `web_fetch` on a page the demo serves itself on
127.0.0.1:8093, and a `local` sandbox (bubblewrap) when this machine can run one.

The shipped WebProvider refuses loopback, and no option, variable or host-config field changes
that. The demo installs DemoWebProvider instead: a subclass, defined here and nowhere else,
whose allow-list names exactly the demo page's address and port, in code. scripts/ is not in the
container image, and a server whose config names tools_app.providers.web.WebProvider cannot
fetch this page or any other loopback address.
"""

from __future__ import annotations

import json
import os
import tempfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from threading import Thread
from typing import Any

from toolkits.sandbox.bubblewrap import BubblewrapUnavailable, check_bubblewrap, find_bubblewrap
from toolkits.sandbox.local import MAX_LIVE_SANDBOXES, UID_BASE
from toolkits.web import AllowList, Fetcher
from tools_app.providers.web import WebProvider

__all__ = [
    "PAGE_PORT",
    "PAGE_URL",
    "DemoWebProvider",
    "demo_script",
    "installed_providers",
    "sandbox_unavailable",
    "serve_page",
]

ROOT = Path(__file__).resolve().parents[1]
PAGE_HOST = "127.0.0.1"
PAGE_PORT = 8093  # beside Brain (8080), the scripted provider (8091) and the tool service (8092)
PAGE_URL = f"http://{PAGE_HOST}:{PAGE_PORT}/"
PAGE_HTML = (
    b"<html><head><title>Brain's demo page</title><script>var unseen = 'not part of the text';</script></head>"
    b"<body><nav><a href='/'>Home</a></nav><article><h1>A page for the demo</h1>"
    b"<p>The agent fetched this paragraph with web_fetch from a page the demo serves on 127.0.0.1:8093.</p>"
    b"<p>Brain turned the HTML into readable text: the navigation and the script are gone.</p>"
    b"</article></body></html>"
)
# The Python the scripted model runs in the sandbox once it has read the handle.
SANDBOX_COMMAND = "python3 -c \"import sys; print('Python', sys.version.split()[0], 'says 6 * 7 =', 6 * 7)\""
SANDBOX_REQUEST = "Run a little Python in a sandbox."


class DemoWebProvider(WebProvider):
    """The web provider of the demo: public addresses, and the demo's own page."""

    def build_fetcher(self) -> Fetcher:
        return Fetcher(allow=AllowList([(PAGE_HOST, PAGE_PORT)]))


class _PageHandler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802  # http.server's handler name
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(PAGE_HTML)))
        self.end_headers()
        self.wfile.write(PAGE_HTML)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002  # http.server's name
        return


def serve_page() -> ThreadingHTTPServer:
    """The demo page on 127.0.0.1:8093, served from a daemon thread until `shutdown()`."""
    server = ThreadingHTTPServer((PAGE_HOST, PAGE_PORT), _PageHandler)
    server.daemon_threads = True
    Thread(target=server.serve_forever, name="demo-page", daemon=True).start()
    return server


def sandbox_unavailable() -> str | None:
    """Why this machine cannot run a local sandbox (bwrap missing, or unable to create one here),
    or None: the same check the local backend makes at startup."""
    try:
        bwrap = find_bubblewrap()
        with tempfile.TemporaryDirectory(prefix="brain-demo-") as scratch:
            privileged = os.geteuid() == 0  # as root, commands run as a sandbox uid of their own
            check_bubblewrap(bwrap, Path(scratch), uid=UID_BASE + MAX_LIVE_SANDBOXES if privileged else None)
    except BubblewrapUnavailable as exc:
        return str(exc).removeprefix("local sandbox: ")
    return None


def installed_providers(*, tenant: str, sandbox: bool) -> dict[str, Any]:
    """BRAIN_TOOL_PROVIDERS of the demo: `web`, and `local` when the sandbox runs here."""
    providers: dict[str, Any] = {
        "web": {"class": f"{__name__}.DemoWebProvider", "options": {"tenants": [tenant]}},
    }
    if sandbox:
        providers["local"] = {"class": "tools_app.providers.sandbox.SandboxProvider", "options": {"tenants": [tenant]}}
    return providers


def demo_script() -> dict[str, Any]:
    """The scripted model's default script, and two rules: asked to run Python in a sandbox it
    creates one, then reads the handle out of the result and runs the command with it."""
    script: dict[str, Any] = json.loads((ROOT / "services" / "scripted_provider" / "default_script.json").read_text())
    script["rules"] = [
        {
            "match": SANDBOX_REQUEST,
            "requires_tool": "local_create",
            "reply": "I will create a sandbox first.",
            "tool_calls": [{"name": "local_create", "arguments": {}}],
        },
        {
            "after_tool": True,
            "regex": r"Created a local sandbox\. Handle: (\S+)",
            "requires_tool": "local_exec",
            "reply": "Now I run the Python in it.",
            "tool_calls": [{"name": "local_exec", "arguments": {"handle": "{group1}", "command": SANDBOX_COMMAND}}],
        },
        *script["rules"],
    ]
    return script
