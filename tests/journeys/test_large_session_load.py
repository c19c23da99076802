"""A large session (a 30 MB event log) loads after a restart while another session keeps running
turns: the right status, the right last events, cursor pages at the end of the log, and the
idempotency key of its first message. Load time and the other session's latency are printed."""

from __future__ import annotations

import signal
import statistics
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from bench.harness import append_turns, cursor
from tests.fixtures.server import (
    BrainServer,
    create_session,
    make_server,
    open_stream,
    send,
    send_ok,
    wait_for_turn_end,
)

LOG_BYTES = 30 << 20
FIRST_KEY = "first-message-of-a-long-session"
FIRST_TEXT = "the first message of a long session"


@dataclass
class LargeSession:
    server: BrainServer
    big: str
    other: str
    first: dict[str, Any]  # the first user.message as the 202 returned it
    built: dict[str, Any]  # what append_turns wrote: counts, ids and offsets of the last turn


@pytest.fixture(scope="module")
def large(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LargeSession]:
    """Two sessions with one API turn each; the big one then grows to 30 MB while Brain is stopped."""
    server = make_server(tmp_path_factory.mktemp("brain"))
    server.start()
    big, other = create_session(server)["id"], create_session(server)["id"]
    first = send_ok(server, big, FIRST_TEXT, key=FIRST_KEY)
    wait_for_turn_end(server, big, first["id"])
    warm = send_ok(server, other, "warm")
    wait_for_turn_end(server, other, warm["id"])
    server.stop()
    built = append_turns(server.data_dir / "sessions" / big / "events.jsonl", LOG_BYTES)
    yield LargeSession(server, big, other, first, built)
    server.stop(signal.SIGKILL)


@dataclass
class TurnStream:
    """Short turns back to back on one session, on a thread, until stopped."""

    server: BrainServer
    session_id: str
    turns: list[tuple[float, float, str]] = field(default_factory=list)  # (start, end, ending status)
    stopping: threading.Event = field(default_factory=threading.Event)
    changed: threading.Condition = field(default_factory=threading.Condition)
    failure: BaseException | None = None

    def __post_init__(self) -> None:
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> TurnStream:
        self.thread.start()
        return self

    def _run(self) -> None:
        try:
            path = f"/sessions/{self.session_id}/events"
            with self.server.client() as client, open_stream(self.server, self.session_id) as stream:
                while not self.stopping.is_set():
                    started = time.perf_counter()
                    response = client.post(path, json={"type": "user.message", "text": "hi"})
                    assert response.status_code == 202, response.text
                    sent = response.json()

                    def ended(events: list[dict[str, Any]], input_id: str = sent["id"]) -> bool:
                        return any(
                            e["type"] == "session.status"
                            and e.get("input_id") == input_id
                            and e["data"]["status"] in ("idle", "failed", "interrupted")
                            for e in events
                        )

                    status = next(
                        e["data"]["status"]
                        for e in reversed(stream.wait_for(ended))
                        if e["type"] == "session.status" and e.get("input_id") == sent["id"]
                    )
                    with self.changed:
                        self.turns.append((started, time.perf_counter(), status))
                        self.changed.notify_all()
        except BaseException as exc:  # reported by stop()
            self.failure = exc
            with self.changed:
                self.changed.notify_all()

    def wait_for_turns(self, count: int, timeout: float = 60) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: len(self.turns) >= count or self.failure is not None, timeout)
        assert self.failure is None, self.failure

    def stop(self) -> list[tuple[float, float, str]]:
        self.stopping.set()
        self.thread.join(timeout=30)
        assert self.failure is None, self.failure
        return self.turns


def _milliseconds(samples: list[float]) -> str:
    if not samples:
        return "none"
    ordered = sorted(samples)
    p99 = ordered[max(0, -(-len(ordered) * 99 // 100) - 1)]
    return f"median {statistics.median(ordered) * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms (n={len(ordered)})"


def test_a_large_session_loads_while_another_session_runs_turns(large: LargeSession) -> None:
    # given: a fresh server, the other session running turns
    server = large.server
    server.restart()
    stream = TurnStream(server, large.other).start()
    stream.wait_for_turns(25)
    # when
    started = time.perf_counter()
    with server.client() as client:
        loaded = client.get(f"/sessions/{large.big}")
    load_started, load_ended = started, time.perf_counter()
    stream.wait_for_turns(len(stream.turns) + 20)
    turns = stream.stop()
    # then: the big session, its last events, and the other session's turns
    assert loaded.status_code == 200, loaded.text
    assert loaded.json()["status"] == "idle"
    last = large.built["last"]
    with server.client() as client:
        tail = client.get(f"/sessions/{large.big}/events", params={"after": cursor(last["offsets"][0], last["ids"][0])})
    assert tail.status_code == 200, tail.text
    assert [(e["id"], e["type"], e.get("input_id"), e["data"]) for e in tail.json()["events"]] == [
        (last["ids"][1], "session.status", last["input_id"], {"status": "running"}),
        (last["ids"][2], "assistant.message", last["input_id"], _reply(last)),
        (last["ids"][3], "session.status", last["input_id"], {"status": "idle"}),
    ]
    assert all(status == "idle" for _, _, status in turns)
    during = [end - start for start, end, _ in turns if start < load_ended and end > load_started]
    before = [end - start for start, end, _ in turns[5:] if end <= load_started]  # after the host start
    print(
        f"\nload of a {large.built['bytes'] / (1 << 20):.0f} MB session ({large.built['events'] + 4} events): "
        f"{(load_ended - load_started) * 1000:.0f} ms; other session's turns before it: {_milliseconds(before)}; "
        f"during it: {_milliseconds(during)}"
    )


def _reply(turn: dict[str, Any]) -> dict[str, Any]:
    usage = {"input": len(turn["message"]["text"]), "output": len(turn["answer"])}
    return {"text": turn["answer"], "usage": usage, "stop_reason": "stop"}


def test_cursor_pages_work_at_the_end_of_the_large_log(large: LargeSession) -> None:
    # given
    server = large.server
    if server.process is None:
        server.start()
    last = large.built["last"]
    after = cursor(last["offsets"][0], last["ids"][0])
    with server.client("reader") as client:
        # when
        first = client.get(f"/sessions/{large.big}/events", params={"after": after, "limit": 2}).json()
        rest = client.get(f"/sessions/{large.big}/events", params={"after": first["next_cursor"]}).json()
        end = client.get(f"/sessions/{large.big}/events", params={"after": rest["next_cursor"]}).json()
    # then
    assert [e["id"] for e in first["events"]] == last["ids"][1:3]
    assert first["next_cursor"] == first["events"][-1]["cursor"] == cursor(last["offsets"][2], last["ids"][2])
    assert [e["id"] for e in rest["events"]] == last["ids"][3:]
    assert rest["next_cursor"] == cursor(last["offsets"][3], last["ids"][3])
    assert end == {"events": [], "next_cursor": rest["next_cursor"]}


def test_the_first_messages_idempotency_key_is_recognized_after_the_restart(large: LargeSession) -> None:
    # given: a fresh server that has not loaded the big session yet
    server = large.server
    server.restart()
    # when
    again = send_ok(server, large.big, FIRST_TEXT, key=FIRST_KEY)
    changed = send(server, large.big, "a different text", key=FIRST_KEY)
    # then
    assert again == large.first
    assert changed.status_code == 409, changed.text
    last = large.built["last"]
    with server.client() as client:
        end = client.get(f"/sessions/{large.big}/events", params={"after": cursor(last["offsets"][3], last["ids"][3])})
    assert end.json()["events"] == []  # nothing was appended


def test_a_turn_on_the_large_session_after_the_load_completes(large: LargeSession) -> None:
    # given
    server = large.server
    if server.process is None:
        server.start()
    last = large.built["last"]
    end_of_log = cursor(last["offsets"][3], last["ids"][3])
    # when
    with open_stream(server, large.big, after=end_of_log) as stream:
        sent = send_ok(server, large.big, "after the load")
        events = stream.wait_for_event("session.status", timeout=60, input_id=sent["id"], status="idle")
    with server.client() as client:
        tail = client.get(f"/sessions/{large.big}/events", params={"after": end_of_log}).json()["events"]
    # then: the new turn follows the large log's last event, live and in the log alike
    retained = [e for e in events if "cursor" in e]
    assert tail == retained
    assert [(e["type"], e.get("input_id")) for e in tail] == [
        ("user.message", None),
        ("session.status", sent["id"]),
        ("assistant.message", sent["id"]),
        ("session.status", sent["id"]),
    ]
    assert tail[0] == sent
    assert tail[2]["data"]["text"] == "echo: after the load"
    assert tail[3]["data"] == {"status": "idle"}
