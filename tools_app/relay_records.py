"""What the executor relay keeps in Redis, encoded and decoded: an alias's route, an executor's
holder, and the record a bind on another instance checks an executor by (tools_app.relay)."""

from __future__ import annotations

import time
from dataclasses import dataclass, fields
from typing import Self

import orjson

from runners.protocol import ToolDescriptor

from .executors import Executor

__all__ = [
    "DELETE_IF_SAME",
    "EXECUTOR_KEY",
    "HOLDER_KEY",
    "ROUTES_KEY",
    "HDELETE_IF_SAME",
    "Holder",
    "Route",
    "channel_of",
    "holder_key",
    "routes_key",
    "executor_key",
    "executor_of_record",
    "executor_record",
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
    """The instance whose hub holds an executor, and how the other instances reach it."""

    instance: str
    incarnation: str
    url: str


def executor_record(executor: Executor) -> bytes:
    return orjson.dumps(
        {"tenant": executor.tenant, "binding": executor.binding, "tools": executor.tools, "session": executor.session}
    )


def routes_key(session: str) -> str:
    return ROUTES_KEY.format(session=session)


def holder_key(executor: str) -> str:
    return HOLDER_KEY.format(executor=executor)


def executor_key(executor: str) -> str:
    return EXECUTOR_KEY.format(executor=executor)


def channel_of(instance: str) -> str:
    name = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in instance)
    return CHANNEL_PREFIX + name[:80]


def executor_of_record(executor_id: str, raw: bytes | str, holder: Holder) -> Executor | None:
    """The executor `holder` recorded (executor_record), or None for a record that does not parse."""
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
