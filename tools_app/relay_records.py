"""What the executor relay keeps in Redis, encoded and decoded: an alias's route, an executor's
holder, and the record a bind on another instance checks an executor by (tools_app.relay). Each
is sealed under the relay's key for the place it is stored (tools_app.relay_seal): one that does
not verify reads as absent. A holder names an instance and its process, never an address: other
instances reach it at the address the fleet's instances table gives."""

from __future__ import annotations

import time
from dataclasses import dataclass, fields
from typing import Self

import orjson

from runners.protocol import ToolDescriptor

from .executor_store import Executor
from .relay_seal import RelaySeal

__all__ = [
    "DELETE_IF_SAME",
    "EXECUTOR_KEY",
    "HOLDER_KEY",
    "ROUTES_KEY",
    "HDELETE_IF_SAME",
    "Holder",
    "Located",
    "Records",
    "Route",
    "channel_of",
    "holder_key",
    "routes_key",
    "executor_key",
]

CHANNEL_PREFIX = "brain-executors."
ROUTES_KEY = "brain:executor-routes:{session}"  # a hash: alias -> the route that serves it
HOLDER_KEY = "brain:executor-holder:{executor}"  # the instance holding an executor
EXECUTOR_KEY = "brain:executor:{executor}"  # what a bind on another instance checks it by

DELETE_IF_SAME = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"
HDELETE_IF_SAME = (
    "if redis.call('hget', KEYS[1], ARGV[1]) == ARGV[2] then return redis.call('hdel', KEYS[1], ARGV[1]) end return 0"
)


class _Fields:
    """A record of string fields kept in Redis as a JSON object of those fields."""

    __slots__ = ()

    def encode(self) -> bytes:
        return orjson.dumps({field.name: getattr(self, field.name) for field in fields(self)})  # type: ignore[arg-type]  # subclasses are dataclasses

    @classmethod
    def decode(cls, raw: bytes | str) -> Self | None:
        """The record, or None for a value that does not parse (another version wrote it, say)."""
        try:
            value = orjson.loads(raw)
            return cls(**{field.name: str(value[field.name]) for field in fields(cls)})  # type: ignore[arg-type]  # as above
        except (orjson.JSONDecodeError, KeyError, TypeError):
            return None


@dataclass(frozen=True, slots=True)
class Route(_Fields):
    """The instance (and its process) whose hub holds the executor that serves an alias."""

    instance: str
    incarnation: str
    executor: str


@dataclass(frozen=True, slots=True)
class Holder(_Fields):
    """The instance (and its process) whose hub holds an executor."""

    instance: str
    incarnation: str


@dataclass(frozen=True, slots=True)
class Located:
    """A holder that is a live member of the fleet, at the address its instances row gives."""

    instance: str
    incarnation: str
    url: str


class Records:
    """The relay's records, sealed for where they are stored and opened from there."""

    def __init__(self, seal: RelaySeal) -> None:
        self._seal = seal

    def route(self, session: str, alias: str, route: Route) -> bytes:
        return self._seal.seal(f"{routes_key(session)}\x00{alias}", route.encode())

    def open_route(self, session: str, alias: str, raw: bytes | str | None) -> Route | None:
        payload = self._seal.open("route", f"{routes_key(session)}\x00{alias}", raw)
        return Route.decode(payload) if payload is not None else None

    def holder(self, executor_id: str, holder: Holder) -> bytes:
        return self._seal.seal(holder_key(executor_id), holder.encode())

    def open_holder(self, executor_id: str, raw: bytes | str | None) -> Holder | None:
        payload = self._seal.open("holder", holder_key(executor_id), raw)
        return Holder.decode(payload) if payload is not None else None

    def executor(self, executor: Executor) -> bytes:
        record = {
            "tenant": executor.tenant,
            "binding": executor.binding,
            "tools": executor.tools,
            "session": executor.session,
        }
        return self._seal.seal(executor_key(executor.id), orjson.dumps(record))

    def open_executor(self, executor_id: str, raw: bytes | str | None, holder: Holder) -> Executor | None:
        """The executor `holder` recorded, or None for a record that is absent, does not verify
        or does not parse."""
        payload = self._seal.open("executor", executor_key(executor_id), raw)
        return _executor_of_record(executor_id, payload, holder) if payload is not None else None


def routes_key(session: str) -> str:
    return ROUTES_KEY.format(session=session)


def holder_key(executor: str) -> str:
    return HOLDER_KEY.format(executor=executor)


def executor_key(executor: str) -> str:
    return EXECUTOR_KEY.format(executor=executor)


def channel_of(instance: str) -> str:
    name = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in instance)
    return CHANNEL_PREFIX + name[:80]


def _executor_of_record(executor_id: str, raw: bytes, holder: Holder) -> Executor | None:
    try:
        record = orjson.loads(raw)
        tenant, binding, session, tools = record["tenant"], record["binding"], record["session"], record["tools"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return None
    if not (isinstance(tenant, str) and isinstance(binding, str) and isinstance(session, str)):
        return None
    if not isinstance(tools, list):
        return None
    descriptors: list[ToolDescriptor] = tools
    return Executor(
        id=executor_id,
        tenant=tenant,
        binding=binding,
        tools=descriptors,
        token_digest=b"",
        created=time.monotonic(),
        session=session,
        holder=(holder.instance, holder.incarnation),
    )
