"""A graceful stop that cuts no request (runbrain, on SIGTERM or SIGINT).

At once: `/health/ready` answers 503, every answer says `Connection: close`, and the runtime
begins handing its sessions off (turns interrupted, streams ended; in a fleet each session
uploaded and its lease released, after which its requests are forwarded to the new owner),
while the instance keeps accepting and answering. After the grace period (BRAIN_DRAIN_SECONDS,
long enough for a balancer's health check to route elsewhere) the listener closes (new
connections are refused, which a balancer retries on another instance), idle keep-alive
connections close, event streams end at their next event boundary, and the process stops once
no request is in flight. Everything fits in the budget runbrain promises (about 20 s); whatever
is still in flight at its end is cut. A second signal stops at once.

Knows Twisted's reactor and the HTTP factory through the narrow protocols below; nothing of
sessions.
"""

from __future__ import annotations

import math
import signal
import time
from collections.abc import Callable, Mapping
from types import FrameType
from typing import Protocol

from foundation.logs import logger

__all__ = ["DRAIN_ENV", "DRAIN_SECONDS", "MAX_DRAIN_SECONDS", "Drain", "drain_seconds_from_environment"]

DRAIN_ENV = "BRAIN_DRAIN_SECONDS"
# The grace period: a balancer checking /health/ready every second or two sees the 503 and stops
# routing here well within it (Kubernetes removes a terminating pod from its Service in a few).
DRAIN_SECONDS = 5.0
# The grace period counts in the stop budget (SHUTDOWN_SECONDS, about 20 s): past this, requests
# in flight when the listener closes would have too little left to finish.
MAX_DRAIN_SECONDS = 10.0
# What the budget keeps after the last request for the runtime's last steps (leave the fleet,
# close the archive, flush telemetry) and the process's exit.
STOP_RESERVE_SECONDS = 3.0
# How often the end of the requests still in flight is checked once the listener closed.
IN_FLIGHT_POLL_SECONDS = 0.05


def drain_seconds_from_environment(environ: Mapping[str, str]) -> float:
    """BRAIN_DRAIN_SECONDS (0 to MAX_DRAIN_SECONDS), or the default; ValueError else."""
    raw = environ.get(DRAIN_ENV, "")
    if not raw:
        return DRAIN_SECONDS
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and 0 <= seconds <= MAX_DRAIN_SECONDS):
        raise ValueError(f"{DRAIN_ENV} must be a number of seconds from 0 to {MAX_DRAIN_SECONDS:g}, not {raw!r}")
    return seconds


class Connections(Protocol):
    """brainsite.bounded_http.BoundedHTTPFactory: the server's HTTP connections."""

    def begin_draining(self) -> None: ...

    def close_connections(self) -> None: ...

    def in_flight(self) -> int: ...


class Listener(Protocol):
    def stopListening(self) -> object: ...


class Reactor(Protocol):
    def callLater(self, delay: float, callable: Callable[[], object]) -> object: ...

    def callFromThread(self, callable: Callable[[], object]) -> None: ...

    def stop(self) -> None: ...


class Drain:
    """One per process: `watch` the listener once it listens, `install` the signal handlers once
    the reactor runs; `remaining()` is what the budget leaves the runtime's stop."""

    def __init__(
        self,
        *,
        reactor: Reactor,
        grace_seconds: float,
        budget_seconds: float,
        begin: Callable[[], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.reactor = reactor
        self.grace_seconds = grace_seconds
        self.budget_seconds = budget_seconds
        self._begin_runtime = begin
        self._clock = clock
        self._listeners: list[Listener] = []
        self._connections: Connections | None = None
        self.began: float | None = None  # monotonic time of the signal
        self._stopping = False

    def watch(self, listener: Listener, connections: Connections) -> None:
        self._listeners.append(listener)
        self._connections = connections

    def install(self) -> None:
        """Take SIGTERM and SIGINT from Twisted's handlers (which stop the reactor at once)."""
        for number in (signal.SIGTERM, signal.SIGINT):
            signal.signal(number, self._signalled)

    def _signalled(self, number: int, frame: FrameType | None) -> None:
        self.reactor.callFromThread(self.begin)

    def remaining(self) -> float:
        """Seconds of the budget left (all of it before a signal), at least one."""
        spent = 0.0 if self.began is None else self._clock() - self.began
        return max(1.0, self.budget_seconds - spent)

    def begin(self) -> None:
        if self.began is not None:
            logger.warning("second stop signal: stopping now")
            self._stop()
            return
        self.began = self._clock()
        logger.info("brain draining", extra={"grace_seconds": self.grace_seconds})
        if self._connections is not None:
            self._connections.begin_draining()
        self._begin_runtime()
        self.reactor.callLater(self.grace_seconds, self._close_listeners)
        self.reactor.callLater(max(0.0, self.budget_seconds - STOP_RESERVE_SECONDS), self._overdue)

    def _close_listeners(self) -> None:
        for listener in self._listeners:
            listener.stopListening()
        if self._connections is not None:
            self._connections.close_connections()
        logger.info("brain listener closed", extra={"in_flight": self._in_flight()})
        self._wait_in_flight()

    def _in_flight(self) -> int:
        return self._connections.in_flight() if self._connections is not None else 0

    def _wait_in_flight(self) -> None:
        if self._stopping:
            return
        if self._in_flight() == 0:
            self._stop()
        else:
            self.reactor.callLater(IN_FLIGHT_POLL_SECONDS, self._wait_in_flight)

    def _overdue(self) -> None:
        if not self._stopping:
            in_flight = self._in_flight()
            logger.warning("requests still in flight at the end of the stop budget", extra={"in_flight": in_flight})
            self._stop()

    def _stop(self) -> None:
        if not self._stopping:
            self._stopping = True
            self.reactor.stop()
