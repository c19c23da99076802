"""Example client: create a session, send messages, print the streamed reply of each turn.

    export BRAIN_API_KEY=...                 # a token from the host config
    export BRAIN_TOOLS=echo                  # optional: comma-separated tool names for the session
    python examples/session.py "Hello!" 'call echo {"text": "hi"}'

`BRAIN_URL` (default http://127.0.0.1:8080) and `BRAIN_MODEL` (default openai/gpt-4.1-mini) pick
the server and the model; `--url`, `--model` and `--harness` override them; `--close` closes the
session at the end, `--delete` deletes it. A refusal (a wrong token, a tool the tenant does not have), a server that
cannot be reached or a turn that fails ends the program with one line on stderr and exit code 1.
Uses the published client (`pip install aex-brain`, 2.3.0's declarations: `Model`, `ManagedTool`)
as an application backend would, including the two things a network makes necessary:

- every message carries an idempotency key, and a send that fails in transport (the connection
  dropped, so the message may or may not have been stored) is retried with the same key: Brain
  returns the stored event instead of queueing the message twice;
- the event stream remembers the cursor of the last retained event (what an SSE client keeps as
  Last-Event-ID) and, when the connection drops, reconnects after it: no retained event is missed
  or shown twice. A reconnect mid-reply gets the reply's text so far as one `assistant.delta`
  whose `offset` says where it starts, so the part already printed is skipped; what a server
  could not keep (see the README) is completed from the retained `assistant.message`.
"""

from __future__ import annotations

import argparse
import http.client
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from queue import Empty, Queue
from typing import Any

from brain import Brain, BrainError, ManagedTool, Model

DEFAULT_MESSAGES = [
    "Hello! What can you do?",
    "Tell me a fun fact about octopuses.",
    "What was my first message?",
]
SEND_ATTEMPTS = 5  # a send that keeps failing in transport gives up after this many tries
RETRY_PAUSE_SECONDS = 1.0  # Brain's Retry-After for 429 is 1 s; transport retries back off from it
TURN_TIMEOUT_SECONDS = 300.0  # how long to wait for events of a turn before giving up
# A stream that cannot be reopened this many times in a row (about half a minute with the pauses)
# means the server is gone, not that the network dropped a connection.
RECONNECT_ATTEMPTS = 30
# What urllib raises when a connection fails or drops: URLError and socket errors are OSErrors,
# a response cut short is an HTTPException; the client raises ValueError for a stream cut mid-event.
TRANSPORT_ERRORS = (OSError, http.client.HTTPException)


class TurnFailed(Exception):
    """A turn ended in a session.error or a status other than idle, or its events stopped coming."""


def _note(text: str) -> None:
    print(f"[{text}]", file=sys.stderr, flush=True)


def describe_failure(error: BaseException, url: str) -> str:
    """One line for what ended the conversation: Brain's refusal (status, code, message), a
    server that cannot be reached, or the failed turn."""
    if isinstance(error, BrainError):
        hint = " (is BRAIN_API_KEY a token of the server's config?)" if error.status == 401 else ""
        return f"Brain refused: {error.status} {error.code}: {error}{hint}"
    if isinstance(error, TurnFailed):
        return f"the turn failed: {error}"
    reason = getattr(error, "reason", error)  # urllib's URLError wraps the socket's error
    if isinstance(reason, ConnectionRefusedError):
        return f"cannot reach Brain at {url}: connection refused (is runbrain running there?)"
    return f"cannot reach Brain at {url}: {type(reason).__name__}: {reason}"


def send_message(brain: Brain, session_id: str, text: str) -> dict[str, Any]:
    """POST the message with a fresh idempotency key; retry a transport failure (and a 429) with
    the same key, so a message Brain stored before the connection dropped is not sent twice."""
    key = str(uuid.uuid4())
    for attempt in range(1, SEND_ATTEMPTS + 1):
        try:
            return dict(brain.send(session_id, {"type": "user.message", "text": text, "key": key}))
        except BrainError as error:
            if error.status != 429 or attempt == SEND_ATTEMPTS:
                raise
            _note(f"send refused ({error.code}); retrying with key {key}")
        except TRANSPORT_ERRORS as error:
            if attempt == SEND_ATTEMPTS:
                raise
            _note(f"send failed ({type(error).__name__}); retrying with key {key}")
        time.sleep(RETRY_PAUSE_SECONDS * attempt)
    raise AssertionError("unreachable")


class EventFollower:
    """Reads a session's events on a thread and hands them over through a queue. It keeps the
    cursor of the last retained event and reconnects after it whenever the stream ends."""

    def __init__(self, brain: Brain, session_id: str, *, on_retained: Callable[[dict[str, Any]], None]) -> None:
        self.brain, self.session_id = brain, session_id
        self.last_event_id = ""  # the cursor of the last retained event seen
        # events, then the error that stopped the stream for good (if one did)
        self.events: Queue[dict[str, Any] | BaseException] = Queue(maxsize=1024)
        self._on_retained = on_retained
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._follow, name="brain-events", daemon=True)

    def start(self) -> EventFollower:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop reconnecting (the thread is a daemon: a read in progress ends with the process)."""
        self._stopped.set()

    def _follow(self) -> None:
        pause = 0.0
        failures = 0  # reconnects in a row that received nothing
        while not self._stopped.is_set():
            try:
                for event in self.brain.observe(self.session_id, after=self.last_event_id):
                    pause, failures = 0.0, 0
                    if event.get("cursor"):  # retained: a reconnect continues after it
                        self.last_event_id = str(event["cursor"])
                        self._on_retained(dict(event))
                    self.events.put(dict(event))
                reason = "the server ended the stream"
            except BrainError as error:
                if error.status != 429:
                    self.events.put(error)
                    return
                reason = "too many streams"
            except (*TRANSPORT_ERRORS, ValueError) as error:
                failures += 1
                if failures >= RECONNECT_ATTEMPTS:
                    self.events.put(error)
                    return
                reason = f"{type(error).__name__}: {error}"
            if self._stopped.is_set():
                return
            _note(f"event stream dropped ({reason}); reconnecting after {self.last_event_id or 'the start'}")
            time.sleep(pause)
            pause = min(RETRY_PAUSE_SECONDS, pause + 0.2)


def _print_turn(follower: EventFollower, input_id: str) -> None:
    """Print the turn of `input_id` until it ends; TurnFailed when it did not end idle, or the
    error that stopped the event stream."""
    shown = ""  # assistant text printed from deltas since the last complete message
    while True:
        try:
            event = follower.events.get(timeout=TURN_TIMEOUT_SECONDS)
        except Empty:
            raise TurnFailed(f"no event for {TURN_TIMEOUT_SECONDS:.0f} s") from None
        if isinstance(event, BaseException):
            raise event
        if event.get("input_id") != input_id:
            continue
        kind, data = event["type"], event["data"]
        if kind == "assistant.delta":
            offset = data.get("offset", len(shown))  # servers before offsets: every delta is new
            if offset <= len(shown):  # a replay after a reconnect repeats what was printed
                new = data["text"][len(shown) - offset :]
                shown += new
                print(new, end="", flush=True)
        elif kind == "assistant.message":
            text = data["text"]
            # the retained message completes what a reconnect could not get back
            print(text[len(shown) :] if text.startswith(shown) else f"\n{text}", end="", flush=True)
            shown = ""
        elif kind == "tool.call":
            print(f"\n  [tool.call {data['name']} {data['arguments']}]", flush=True)
        elif kind == "tool.result":
            print(f"  [tool.result {data['result']}]", flush=True)
        elif kind == "session.error":
            print(flush=True)
            raise TurnFailed(f"{data['code']}: {data['message']}")
        elif kind == "session.status" and data["status"] != "running":
            print("\n", flush=True)
            if data["status"] != "idle":
                raise TurnFailed(f"the session is {data['status']}")
            return


def run_conversation(
    brain: Brain,
    *,
    harness: str,
    model: str,
    messages: list[str],
    tools: list[str] | None = None,
    bindings: Mapping[str, Sequence[str]] | None = None,
    on_retained: Callable[[dict[str, Any]], None] = lambda event: None,
) -> str:
    """Create a session, send each message after the previous turn ends, print every turn.
    Returns the session id; the session stays open for more messages. TurnFailed when a turn
    fails (the messages after it are not sent), BrainError when Brain refuses a request.

    `tools` are config tools by name (the host config's `tools`); `bindings` bind installed
    providers, name → operations (the model sees `<name>_<operation>`)."""
    session = brain.create(
        harness=harness,
        model=Model(model),
        tools=[
            *(ManagedTool(name) for name in tools or []),
            *(ManagedTool(name, operations=list(operations)) for name, operations in (bindings or {}).items()),
        ],
    )
    print(f"Session: {session['id']} ({harness}, {model})\n", flush=True)
    follower = EventFollower(brain, session["id"], on_retained=on_retained).start()
    try:
        for text in messages:
            print(f"you> {text}")
            message = send_message(brain, session["id"], text)
            print("agent> ", end="", flush=True)
            _print_turn(follower, str(message["id"]))
    finally:
        follower.stop()
    return str(session["id"])


def tools_from_environment() -> list[str]:
    """BRAIN_TOOLS: a comma-separated list of tool names (as the quickstart's examples take it)."""
    return [name.strip() for name in os.environ.get("BRAIN_TOOLS", "").split(",") if name.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default=os.environ.get("BRAIN_URL", "http://127.0.0.1:8080"))
    parser.add_argument("--harness", default="loop")
    parser.add_argument("--model", default=os.environ.get("BRAIN_MODEL", "openai/gpt-4.1-mini"))
    parser.add_argument("--trace", action="store_true", help="also list each retained event (id, type) on stderr")
    parser.add_argument("--close", action="store_true", help="close the session at the end (its history stays)")
    parser.add_argument("--delete", action="store_true", help="delete the session at the end (history and all)")
    parser.add_argument("message", nargs="*", help="messages to send (default: a short demo)")
    arguments = parser.parse_args()
    token = os.environ.get("BRAIN_API_KEY")
    if not token:
        sys.exit("set BRAIN_API_KEY to a token from the host config")

    def trace(event: dict[str, Any]) -> None:
        print(f"retained {event['id']} {event['type']}", file=sys.stderr, flush=True)

    brain = Brain(arguments.url, token)
    try:
        session_id = run_conversation(
            brain,
            harness=arguments.harness,
            model=arguments.model,
            messages=arguments.message or DEFAULT_MESSAGES,
            tools=tools_from_environment(),
            on_retained=trace if arguments.trace else lambda event: None,
        )
        if arguments.delete:
            brain.delete(session_id)
        elif arguments.close:
            brain.close(session_id)
    except (BrainError, TurnFailed, *TRANSPORT_ERRORS) as error:
        sys.exit(f"session.py: {describe_failure(error, arguments.url)}")


if __name__ == "__main__":
    main()
