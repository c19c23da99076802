"""Browser clients in Chromium against a real runbrain with a `cors` block: a page served from a
listed origin (another port on loopback) sends a message with a session-scoped token and reads
the reply from the SSE stream through fetch; a page from an unlisted origin is refused by the
browser at the preflight, and the session gets nothing. In a fleet the page talks through a
non-owner, and a preflight is answered where it lands, even when the owner is gone."""

from __future__ import annotations

import json
import re
import secrets
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest

from tests.browser.conftest import Screenshots
from tests.fixtures.server import (
    BrainServer,
    create_session,
    history,
    make_server,
    send_ok,
    wait_for_turn_end,
)
from tests.fixtures.services import PostgresServer

HEX32 = re.compile(r"^[0-9a-f]{32}$")
FLEET_SECRET = secrets.token_hex(32)
# Long enough that a killed owner's lease outlives every request the test then makes (nothing
# here waits for it to expire).
FLEET_LEASE_SECONDS = 300
PAGE_SECONDS = 20.0  # a page's whole conversation on loopback; only a stuck one takes this long
LOG_SECONDS = 10.0  # a log line the server wrote reaching the test's reader thread

# A browser app as its authors would write it: EventSource cannot send an Authorization header,
# so the stream is read with fetch and a ReadableStream, and its SSE frames parsed here.
PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>Brain from the browser</title>
<style>
body { font: 15px system-ui, sans-serif; margin: 2em; color: #222; }
h1 { font-size: 1.3em; } code { background: #eee; padding: 0 .3em; }
#events li { margin: .2em 0; font-family: monospace; }
.error { color: #b00020; }
</style></head>
<body>
<h1>Brain from <code id="origin"></code></h1>
<p>Session <code id="session"></code>, talking to <code id="brain"></code> with a session-scoped token.</p>
<p id="state">starting</p>
<ol id="events"></ol>
<script>
const params = new URLSearchParams(location.hash.slice(1));
const brain = params.get("brain"), token = params.get("token"), session = params.get("session");
const headers = { Authorization: `Bearer ${token}` };
document.getElementById("origin").textContent = location.origin;
document.getElementById("session").textContent = session;
document.getElementById("brain").textContent = brain;

function show(text, error = false) {
  const item = document.createElement("li");
  item.textContent = text;
  if (error) item.className = "error";
  document.getElementById("events").append(item);
}

async function sendMessage(text) {
  const response = await fetch(`${brain}/sessions/${session}/events`, {
    method: "POST",
    headers: { ...headers, "Content-Type": "application/json" },
    body: JSON.stringify({ type: "user.message", text }),
  });
  const body = await response.json();
  show(`POST /events -> ${response.status} ${body.type || body.error.code}`);
  return { status: response.status, requestId: response.headers.get("X-Request-ID"), body };
}

// Reads the stream until `done(event)`; each frame's `id:` is the cursor a reconnect passes back.
async function readStream(done) {
  const controller = new AbortController();
  const response = await fetch(`${brain}/sessions/${session}/events`, {
    headers: { ...headers, Accept: "text/event-stream" }, signal: controller.signal,
  });
  const result = { status: response.status, contentType: response.headers.get("Content-Type"), frames: [] };
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done: ended } = await reader.read();
    if (ended) return result;
    buffer += value;
    let end;
    while ((end = buffer.indexOf("\\n\\n")) >= 0) {
      const frame = { data: [] };
      for (const line of buffer.slice(0, end).split("\\n")) {
        if (line.startsWith(":")) continue;  // a keepalive
        const colon = line.indexOf(":");
        const field = line.slice(0, colon), text = line.slice(colon + 1).replace(/^ /, "");
        if (field === "data") frame.data.push(text); else frame[field] = text;
      }
      buffer = buffer.slice(end + 2);
      if (!frame.data.length) continue;
      const event = JSON.parse(frame.data.join("\\n"));
      result.frames.push({ id: frame.id, event: frame.event, envelope: event });
      show(`${frame.event}  ${JSON.stringify(event.data)}`);
      if (done(event)) { controller.abort(); return result; }
    }
  }
}

async function attempt(step) {
  try { return await step(); } catch (error) {
    show(`${error.name}: ${error.message}`, true);
    return { error: `${error.name}: ${error.message}` };
  }
}

async function converse() {
  const sent = await attempt(() => sendMessage(params.get("text")));
  const inputId = sent.body && sent.body.id;
  const streamed = await attempt(() => readStream(
    (event) => inputId === undefined || (event.type === "session.status" && event.input_id === inputId
      && ["idle", "interrupted", "failed"].includes(event.data.status))));
  window.result = { sent, streamed };
  const state = sent.status === 202 && streamed.status === 200 ? "done" : "refused";
  document.getElementById("state").textContent = state;
  document.body.dataset.state = state;
}
converse();
</script></body></html>
"""


class PageServer:
    """A static site on its own loopback port: another origin than Brain's."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802  # http.server's handler name
                body = PAGE.encode() if self.path == "/" else b"not found"
                self.send_response(200 if self.path == "/" else 404)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002  # http.server's name
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> PageServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def listed_site() -> Iterator[PageServer]:
    with PageServer() as site:
        yield site


@pytest.fixture(scope="module")
def unlisted_site() -> Iterator[PageServer]:
    with PageServer() as site:
        yield site


@dataclass(frozen=True)
class Setup:
    server: BrainServer
    session_id: str  # the session the session-scoped token is limited to


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory, listed_site: PageServer) -> Iterator[Setup]:
    """Brain answering the listed site's origin, with a session and a token scoped to it (tokens
    are read at startup, so the token is added by a restart once the session exists)."""
    server = make_server(tmp_path_factory.mktemp("brain"), cors={"origins": [listed_site.origin]})
    server.start()
    session = create_session(server)
    server.stop()
    server.config["tokens"].append({"token_env": "TEST_SESSION_TOKEN", "tenant": "acme", "session": session["id"]})
    server.start()
    yield Setup(server, session["id"])
    server.stop(signal.SIGKILL)


def page_url(site: PageServer, setup: Setup, text: str) -> str:
    token = setup.server.token("alice_session")
    fragment = urlencode({"brain": setup.server.url, "token": token, "session": setup.session_id, "text": text})
    return f"{site.origin}/#{fragment}"  # the fragment never leaves the browser


def converse(page: Any, url: str) -> dict[str, Any]:
    page.goto(url)
    page.wait_for_function("() => document.body.dataset.state", timeout=PAGE_SECONDS * 1000)
    result: dict[str, Any] = page.evaluate("() => window.result")
    return result


def refusals(server: BrainServer, origin: str, count: int) -> list[dict[str, Any]]:
    """The server's `cors origin refused` log lines for `origin`, once `count` of them are there."""
    deadline = time.monotonic() + LOG_SECONDS
    while True:
        found = []
        for line in list(server.log_lines):
            if '"cors origin refused"' in line:
                entry = json.loads(line)
                if entry["origin"] == origin:
                    found.append({key: entry[key] for key in ("level", "origin", "path", "requested_method")})
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.02)


def test_a_page_from_a_listed_origin_sends_a_message_and_reads_the_reply_from_the_stream(
    page: Any, setup: Setup, listed_site: PageServer, tmp_path: Path
) -> None:
    # given
    server, session_id = setup.server, setup.session_id
    before = history(server, session_id)
    # when
    result = converse(page, page_url(listed_site, setup, "hello from the browser"))
    shot = tmp_path / "cors-listed-origin.png"
    page.screenshot(path=str(shot), full_page=True)
    print(f"screenshot of the page: {shot}")
    # then: the send was accepted and the page could read its exposed request id
    sent = result["sent"]
    assert sent["status"] == 202
    assert HEX32.match(sent["requestId"])
    assert sent["body"]["data"] == {"type": "user.message", "text": "hello from the browser", "delivery": "queue"}
    # the stream replayed the session and followed the turn live to its end
    streamed = result["streamed"]
    assert (streamed["status"], streamed["contentType"]) == (200, "text/event-stream")
    after = history(server, session_id)
    retained = [frame for frame in streamed["frames"] if frame["event"] != "assistant.delta"]
    assert [frame["envelope"] for frame in retained] == after
    assert [frame["event"] for frame in retained] == [event["type"] for event in after]
    new = after[len(before) :]
    assert [(event["type"], event["data"].get("status"), event["data"].get("text")) for event in new] == [
        ("user.message", None, "hello from the browser"),
        ("session.status", "running", None),
        ("assistant.message", None, "echo: hello from the browser"),
        ("session.status", "idle", None),
    ]
    assert new[0]["id"] == sent["body"]["id"]
    assert page.inner_text("#state") == "done"
    assert refusals(server, listed_site.origin, 0) == []


def test_a_page_from_an_unlisted_origin_is_refused_by_the_browser_and_sends_nothing(
    page: Any, setup: Setup, unlisted_site: PageServer, screenshots: Screenshots
) -> None:
    # given
    server, session_id = setup.server, setup.session_id
    before = history(server, session_id)
    console: list[str] = []
    page.on("console", lambda message: console.append(message.text))
    # when
    result = converse(page, page_url(unlisted_site, setup, "from an unlisted origin"))
    screenshots.take(page, "unlisted-origin")
    # then: the browser refused both requests at their preflight, which the server saw and refused
    assert result == {
        "sent": {"error": "TypeError: Failed to fetch"},
        "streamed": {"error": "TypeError: Failed to fetch"},
    }
    path = f"/sessions/{session_id}/events"
    assert refusals(server, unlisted_site.origin, 2) == [
        {"level": "info", "origin": unlisted_site.origin, "path": path, "requested_method": "POST"},
        {"level": "info", "origin": unlisted_site.origin, "path": path, "requested_method": "GET"},
    ]
    blocked = [text for text in console if "has been blocked by CORS policy" in text]
    assert len(blocked) == 2, console
    assert all(f"from origin '{unlisted_site.origin}'" in text for text in blocked)
    # and the message never reached the session
    assert history(server, session_id) == before
    assert page.inner_text("#state") == "refused"


def test_a_preflight_is_answered_without_a_token_and_errors_are_readable_by_a_listed_origin(
    setup: Setup, listed_site: PageServer
) -> None:
    # given
    server = setup.server
    path = f"/sessions/{setup.session_id}/events"
    origin = {"Origin": listed_site.origin}
    # when
    with httpx.Client(base_url=server.url, timeout=30) as client:
        preflight = client.options(path, headers={**origin, "Access-Control-Request-Method": "POST"})
        refused = client.post(path, headers={**origin, "Authorization": "Bearer " + "x" * 48}, json={})
    # then
    assert preflight.status_code == 204
    assert {name: value for name, value in preflight.headers.items() if name.startswith("access-control-")} == {
        "access-control-allow-origin": listed_site.origin,
        "access-control-allow-methods": "GET, POST, DELETE",
        "access-control-allow-headers": "Authorization, Content-Type, Accept, Last-Event-ID, traceparent, tracestate",
        "access-control-max-age": "600",
    }
    assert preflight.headers["vary"] == "Origin"
    assert refused.status_code == 401
    assert refused.json()["error"]["code"] == "forbidden"
    assert refused.headers["access-control-allow-origin"] == listed_site.origin
    assert refused.headers["access-control-expose-headers"] == "X-Request-ID, Retry-After, WWW-Authenticate"
    assert refused.headers["www-authenticate"] == "Bearer"


def test_without_a_cors_block_no_response_names_an_origin(
    brain_factory: Callable[..., BrainServer], listed_site: PageServer
) -> None:
    # given
    server = brain_factory()
    origin = {"Origin": listed_site.origin}
    # when
    with server.client() as client:
        preflight = client.options("/sessions", headers={**origin, "Access-Control-Request-Method": "POST"})
        listed = client.get("/sessions", headers=origin)
    # then: the preflight reaches the API as before, and nothing says the origin may read
    assert listed.status_code == 200
    for response in (preflight, listed):
        assert [name for name in response.headers if name.startswith("access-control-") or name == "vary"] == []
    assert preflight.status_code == 405


def test_in_a_fleet_a_page_talks_through_a_non_owner_and_preflights_never_reach_the_owner(
    page: Any,
    brain_factory: Callable[..., BrainServer],
    postgres_server: PostgresServer,
    listed_site: PageServer,
    tmp_path: Path,
) -> None:
    # given: instance a owns a session; b has a session-scoped token for it and forwards to a
    database = postgres_server.create_database(f"brain_cors_{secrets.token_hex(4)}")
    archive = tmp_path / "archive"
    archive.mkdir()

    def instance(name: str, shared_from: BrainServer | None = None) -> BrainServer:
        server = brain_factory(
            start=False,
            persistence={"provider": "filesystem", "directory": str(archive)},
            cors={"origins": [listed_site.origin]},
        )
        server.config["cluster"] = {
            "instance": name,
            "url": server.url,
            "lease_seconds": FLEET_LEASE_SECONDS,
            "shared_directory": True,
        }
        if shared_from is None:
            server.env |= {"BRAIN_DATABASE_URL": database, "BRAIN_FLEET_SECRET": FLEET_SECRET}
        else:
            server.tokens = shared_from.tokens
            server.env = {**shared_from.env, "BRAIN_DATA_DIR": server.env["BRAIN_DATA_DIR"]}
        return server

    owner = instance("a")
    owner.start()
    session_id = create_session(owner)["id"]
    owner.stop()
    scoped = {"token_env": "TEST_SESSION_TOKEN", "tenant": "acme", "session": session_id}
    owner.config["tokens"].append(scoped)
    owner.start()
    wait_for_turn_end(owner, session_id, send_ok(owner, session_id, "warm up")["id"])  # a holds the lease
    other = instance("b", shared_from=owner)
    other.config["tokens"].append(scoped)
    other.start()

    # when: the page talks to b
    result = converse(page, page_url(listed_site, Setup(other, session_id), "through another instance"))
    # then: the send and the stream were forwarded to a and answered the page
    assert (result["sent"]["status"], result["streamed"]["status"]) == (202, 200)
    texts = [frame["envelope"]["data"].get("text") for frame in result["streamed"]["frames"]]
    assert "echo: through another instance" in texts
    assert history(owner, session_id)[-1]["data"] == {"status": "idle"}
    with httpx.Client(base_url=other.url, timeout=30) as client:
        forwarded = client.get(
            f"/sessions/{session_id}",
            headers={"Origin": listed_site.origin, "Authorization": f"Bearer {other.token('alice_session')}"},
        )
    assert forwarded.status_code == 200
    assert forwarded.headers.get_list("access-control-allow-origin") == [listed_site.origin]  # once, not twice

    # when: the owner dies with its lease live, so b cannot serve the session
    owner.kill()
    path = f"/sessions/{session_id}/events"
    with httpx.Client(base_url=other.url, timeout=30) as client:
        preflight = client.options(
            path, headers={"Origin": listed_site.origin, "Access-Control-Request-Method": "POST"}
        )
        unavailable = client.get(
            path, headers={"Origin": listed_site.origin, "Authorization": f"Bearer {other.token('alice_session')}"}
        )
    # then: the preflight is answered by b itself; the request it announces gets the owner's
    # unavailability, which the page can read (status, code, Retry-After)
    assert preflight.status_code == 204
    assert preflight.headers["access-control-allow-origin"] == listed_site.origin
    assert unavailable.status_code == 503
    assert unavailable.json()["error"]["code"] == "unavailable"
    assert unavailable.headers.get_list("access-control-allow-origin") == [listed_site.origin]
    assert unavailable.headers["retry-after"] == "1"
