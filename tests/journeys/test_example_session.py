"""examples/session.py end to end, as a user runs it, against a real runbrain (the `loop` harness,
the scripted provider, the example tool service), through a loopback TCP proxy that breaks the
network twice: it swallows the answer to the first send (the message was stored, the client saw
the connection drop) and cuts the event stream in the middle of the `tool.call` event. The example
retries the send with the same idempotency key and reconnects its stream after the last cursor;
every retained event is seen exactly once and the message is queued once."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bench.harness import TOOLS_KEY, start_tool_service, stop
from examples.tools.app import tool_bindings
from tests.fixtures.provider import LOOP_HARNESS, ScriptedProvider
from tests.fixtures.server import BrainServer, history

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_TIMEOUT_SECONDS = 120
TOOL_CALL_MARK = b"event: tool.call\n"


class BreakingProxy:
    """A loopback TCP proxy to Brain. Each connection carries one request (the published client
    sends `Connection: close`). It breaks the first send of a message after Brain has answered
    it, and the first event stream that carries a tool.call, halfway through that event."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.sends_broken = 0
        self.streams_broken = 0
        self._lock = threading.Lock()
        self._connections: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self.listener.close()
        for connection in self._connections:
            with contextlib.suppress(OSError):
                connection.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            self._connections.append(client)
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        upstream = socket.create_connection(self.upstream)
        self._connections.append(upstream)
        try:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = client.recv(65536)
                if not chunk:
                    return
                head += chunk
            upstream.sendall(head)
            request_line = head.split(b"\r\n", 1)[0]
            is_send = request_line.startswith(b"POST /sessions/") and b"/events" in request_line
            is_stream = b"text/event-stream" in head.lower()
            with self._lock:
                break_send = is_send and self.sends_broken == 0
                self.sends_broken += break_send
            if break_send:
                self._forward_body(client, upstream, head)
                while upstream.recv(65536):  # Brain answers (the message is stored) ...
                    pass
                return  # ... and the client never hears it: its connection just closes
            threading.Thread(target=self._pipe, args=(client, upstream), daemon=True).start()
            self._relay_response(upstream, client, watch=is_stream)
        except OSError:
            return
        finally:
            for end in (client, upstream):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)  # a FIN now, even while the other pipe thread reads
                with contextlib.suppress(OSError):
                    end.close()

    @staticmethod
    def _forward_body(client: socket.socket, upstream: socket.socket, head: bytes) -> None:
        headers = head.split(b"\r\n\r\n", 1)
        length = 0
        for line in headers[0].split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        received = len(headers[1])
        while received < length:
            chunk = client.recv(65536)
            if not chunk:
                return
            upstream.sendall(chunk)
            received += len(chunk)

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while chunk := source.recv(65536):
                sink.sendall(chunk)

    def _relay_response(self, upstream: socket.socket, client: socket.socket, *, watch: bool) -> None:
        seen = b""
        while chunk := upstream.recv(65536):
            if watch:
                seen += chunk
                at = seen.find(TOOL_CALL_MARK)
                if at >= 0:
                    with self._lock:
                        cut = self.streams_broken == 0
                        self.streams_broken += cut
                    if cut:  # forward up to the middle of the tool.call event, then hang up
                        middle = at + len(TOOL_CALL_MARK) + 10 - (len(seen) - len(chunk))
                        client.sendall(chunk[: max(0, middle)])
                        return
                    watch = False
                seen = seen[-len(TOOL_CALL_MARK) :]
            client.sendall(chunk)


@pytest.fixture
def tool_service() -> Iterator[str]:
    process, url = start_tool_service()
    yield url
    stop(process)


def _brain(factory: Callable[..., BrainServer], provider: ScriptedProvider, tools_url: str) -> BrainServer:
    server = factory(
        start=False,
        harnesses={"loop": LOOP_HARNESS},
        providers=provider.providers(),
        tools=tool_bindings(tools_url, tenant="acme"),
    )
    server.env["BRAIN_TOOLS_KEY"] = TOOLS_KEY
    server.start()
    return server


@pytest.mark.timeout(240)
def test_the_example_retries_its_send_with_the_same_key_and_resumes_its_stream_after_a_drop(
    brain_factory: Callable[..., BrainServer], scripted_provider: ScriptedProvider, tool_service: str
) -> None:
    # given: Brain behind a proxy that breaks the first send and the stream carrying the tool call
    server = _brain(brain_factory, scripted_provider, tool_service)
    host, _, port = server.config["listen"].partition(":")
    proxy = BreakingProxy((host, int(port)))
    messages = ['call echo {"text": "through a flaky network"}', "and once more"]
    environment = {
        "PATH": os.environ["PATH"],
        "LANG": "C.UTF-8",
        "BRAIN_API_KEY": server.token(),
        "BRAIN_URL": proxy.url,
        "BRAIN_TOOLS": "echo",
    }

    # when: a user runs the example
    try:
        done = subprocess.run(
            [sys.executable, "examples/session.py", "--trace", *messages],
            cwd=ROOT,
            env=environment,
            capture_output=True,
            text=True,
            timeout=EXAMPLE_TIMEOUT_SECONDS,
        )
    finally:
        proxy.close()

    # then: it succeeded through both faults
    assert done.returncode == 0, done.stdout + done.stderr
    assert (proxy.sends_broken, proxy.streams_broken) == (1, 1)
    notes = [line for line in done.stderr.splitlines() if line.startswith("[")]
    assert len(notes) == 2, done.stderr
    assert notes[0].startswith("[send failed (RemoteDisconnected); retrying with key ")
    assert notes[1].startswith(
        "[event stream dropped (IncompleteRead: IncompleteRead(0 bytes read)); reconnecting after "
    )

    # and: the message was queued once, with the tool call and both turns in the session
    session_id = done.stdout.split("Session: ", 1)[1].split()[0]
    events = history(server, session_id)
    assert [event["data"]["text"] for event in events if event["type"] == "user.message"] == messages
    assert [event["data"]["name"] for event in events if event["type"] == "tool.call"] == ["echo"]
    assert [event["data"]["status"] for event in events if event["type"] == "session.status"] == [
        "running",
        "idle",
        "running",
        "idle",
    ]
    tool_requests = [body for body in scripted_provider.bodies() if "through a flaky network" in str(body)]
    assert len(tool_requests) == 3  # the call, its result, and the second turn: no second copy of the message

    # and: the example saw every retained event exactly once, in order, across the reconnect
    traced = [line.split()[1:] for line in done.stderr.splitlines() if line.startswith("retained ")]
    assert traced == [[event["id"], event["type"]] for event in events]
    assert "[tool.call echo {'text': 'through a flaky network'}]" in done.stdout
    assert "[tool.result {'content': [{'type': 'text', 'text': 'through a flaky network'}]" in done.stdout
