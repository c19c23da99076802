"""Where tenant schemas are compiled and values checked against them: a small pool of threads of
their own, never the event loop and never the loop's default executor (which the ORM and file I/O
share), with a bound on the work waiting for it.

The object that owns a pool (the runtime executors' hub, the tool registry) builds it once and
lives as long as the process; its threads start on first use. A check past the bound is refused
at once with Overloaded (429 for a request; a tool call ends with an error result). Each check
is bounded in its turn by the budgets of foundation.schema_budget, so a thread is back within
VALIDATION_SECONDS whatever the schema and the value. Imports no app.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from jsonschema.exceptions import ValidationError
from jsonschema.protocols import Validator

from .errors import Overloaded
from .tool_schemas import compile_schema, first_error, schema_problem

__all__ = ["MAX_SCHEMA_JOBS", "SCHEMA_THREADS", "SchemaWorkers"]

# Threads checking schemas at once. Two of the machine's cores' worth is enough for tool calls
# (a check is milliseconds), and a tenant that makes every check cost its full deadline holds
# two threads, not the six the loop's default executor shares with the database.
SCHEMA_THREADS = 2
# Compilations and checks running or waiting. At the deadline of every one, the last waits
# MAX_SCHEMA_JOBS / SCHEMA_THREADS deadlines; more are refused rather than queued without end.
MAX_SCHEMA_JOBS = 32

T = TypeVar("T")


class SchemaWorkers:
    """A bounded pool for schema work: `compile`, `problem`, `first_error` and `run`."""

    def __init__(
        self, *, threads: int = SCHEMA_THREADS, jobs: int = MAX_SCHEMA_JOBS, name: str = "brain-schemas"
    ) -> None:
        self._threads = threads
        self._jobs = jobs
        self._name = name
        self._pool: ThreadPoolExecutor | None = None  # built on first use
        self._lock = threading.Lock()  # guards the count: a job ends in its own thread
        self._pending = 0
        self._closed = False

    @property
    def pending(self) -> int:
        """Jobs submitted and not yet finished (running or waiting)."""
        return self._pending

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self._threads, thread_name_prefix=self._name)
        return self._pool

    def _done(self, _: Future[Any]) -> None:
        with self._lock:
            self._pending -= 1

    async def run(self, job: Callable[[], T]) -> T:
        """`job()` on the pool. Raises Overloaded when MAX_SCHEMA_JOBS are running or waiting.
        A caller cancelled while its job runs leaves the job counted until it ends."""
        with self._lock:
            if self._closed or self._pending >= self._jobs:
                raise Overloaded(
                    f"the server's schema checks are busy ({self._jobs} running or waiting); try again shortly"
                )
            self._pending += 1
        try:
            future = self._executor().submit(job)
        except RuntimeError:  # shut down meanwhile
            with self._lock:
                self._pending -= 1
            raise Overloaded("the server's schema checks are shutting down") from None
        future.add_done_callback(self._done)
        return await asyncio.wrap_future(future)

    async def compile(self, schema: object) -> Validator:
        """compile_schema() on the pool (raises its SchemaError, or Overloaded)."""
        return await self.run(lambda: compile_schema(schema))

    async def problem(self, schema: object) -> str:
        """schema_problem() on the pool (raises Overloaded)."""
        return await self.run(lambda: schema_problem(schema))

    async def first_error(self, validator: Validator, instance: object) -> ValidationError | None:
        """first_error() on the pool, within its step budget and deadline (raises Overloaded)."""
        return await self.run(lambda: first_error(validator, instance))

    def close(self) -> None:
        """Refuse new work and stop the threads once the running checks end (none waits)."""
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
