"""The executor relay's seal (tools_app.relay_seal): what a writer to Redis without the fleet
secret can and cannot make an instance accept. Pure code: no Redis, no server."""

from __future__ import annotations

import secrets

import orjson
import pytest

from tools_app.executors import Executor, ExecutorUnavailable, bound_to
from tools_app.relay_records import Holder, Records, Route
from tools_app.relay_seal import MESSAGE_WINDOW_SECONDS, RelaySeal, ReplayMemory

SECRET = secrets.token_bytes(32)
CHANNEL = "brain-executors.brain-b"
NOW = 1_700_000_000.0


def test_a_record_opens_only_where_it_was_sealed_and_unaltered() -> None:
    records = Records(RelaySeal(SECRET))
    holder = Holder("brain-b", "0" * 32)
    sealed = records.holder("a" * 32, holder)
    assert records.open_holder("a" * 32, sealed) == holder
    # copied under another executor's key, altered, unsealed, or sealed under another secret: absent
    assert records.open_holder("b" * 32, sealed) is None
    assert records.open_holder("a" * 32, sealed.replace(b"brain-b", b"brain-c")) is None
    assert records.open_holder("a" * 32, holder.encode()) is None
    assert Records(RelaySeal(secrets.token_bytes(32))).open_holder("a" * 32, sealed) is None
    route = Route("brain-b", "0" * 32, "a" * 32)
    assert records.open_route("s1", "runtime", records.route("s1", "runtime", route)) == route
    assert records.open_route("s2", "runtime", records.route("s1", "runtime", route)) is None
    assert records.open_route("s1", "other", records.route("s1", "runtime", route)) is None


def test_a_message_is_accepted_once_on_its_own_channel_within_the_window() -> None:
    seal = RelaySeal(SECRET)
    message = seal.message(CHANNEL, "call", {"relay": "r1", "session": "s1"}, now=NOW)
    assert seal.open_message("brain-executors.brain-c", message, now=NOW) is None  # another channel's
    opened = seal.open_message(CHANNEL, message, now=NOW + 1)
    assert opened is not None and opened[0] == "call" and opened[1]["session"] == "s1"
    assert seal.open_message(CHANNEL, message, now=NOW + 2) is None  # the same bytes again
    late = seal.message(CHANNEL, "call", {"relay": "r2"}, now=NOW)
    assert seal.open_message(CHANNEL, late, now=NOW + MESSAGE_WINDOW_SECONDS + 1) is None
    # another kind under the same MAC, an altered body, an unsealed one: dropped
    fresh = seal.message(CHANNEL, "close", {"executor": "e"}, now=NOW)
    assert seal.open_message(CHANNEL, {**fresh, "type": "relay.call"}, now=NOW) is None
    body = orjson.loads(fresh["body"])  # type: ignore[arg-type]
    assert seal.open_message(CHANNEL, {**fresh, "body": orjson.dumps({**body, "executor": "x"})}, now=NOW) is None
    assert seal.open_message(CHANNEL, {"type": "relay.close", "body": fresh["body"]}, now=NOW) is None
    assert seal.open_message(CHANNEL, fresh, now=NOW) is not None


def test_the_replay_memory_is_bounded_and_refuses_what_it_forgot() -> None:
    memory = ReplayMemory(window=60, capacity=2)
    assert [memory.admit(nonce, NOW + i, NOW + 3) for i, nonce in enumerate("abc")] == [None, None, None]
    assert memory.admit("a", NOW, NOW + 3) == "stale"  # forgotten to stay within 2: refused by time
    assert memory.admit("c", NOW + 2, NOW + 3) == "replayed"
    assert memory.admit("d", NOW + 3, NOW + 3) is None


def test_a_call_reaches_only_an_executor_bound_to_its_session_and_tenant() -> None:
    executor = Executor(id="e", tenant="acme", binding="runtime", tools=[], token_digest=b"", created=0.0, session="s1")
    assert bound_to(executor, "s1", "acme") is executor
    for session, tenant in (("", "acme"), ("s2", "acme"), ("s1", "globex"), ("s1", "")):
        with pytest.raises(ExecutorUnavailable, match="serves another session"):
            bound_to(executor, session, tenant)
    executor.session = ""  # unbound: no call at all
    with pytest.raises(ExecutorUnavailable, match="serves another session"):
        bound_to(executor, "", "acme")
