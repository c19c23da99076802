"""OpenTelemetry export: traces and metrics over OTLP/HTTP, as service `brain`, when
$OTEL_EXPORTER_OTLP_ENDPOINT is set. Without it the SDK is never imported and every method of
`Telemetry` returns at once. Imports nothing of Brain's apps; hot paths import only this module.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING

from foundation.logs import logger

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.metrics import Counter, Histogram, Meter, UpDownCounter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import MetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span, Tracer

__all__ = [
    "ENDPOINT_ENV",
    "UNMATCHED_ROUTE",
    "Telemetry",
    "ToolCallTrace",
    "TurnTrace",
    "route_template",
]

ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"
INTERVAL_ENV = "OTEL_METRIC_EXPORT_INTERVAL"  # the SDK's own name; tests shorten the interval with it
METRIC_INTERVAL_MILLIS = 15_000  # spec: metrics are exported every 15 seconds
SERVICE_NAME = "brain"  # spec
FLUSH_SECONDS = 5.0  # shutdown waits this long for the last export; an absent collector must not hold exit
# Seconds, from a fast API call to a long tool call or a cold harness start.
SECONDS_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
UNMATCHED_ROUTE = "unmatched"  # a path no route serves (404, or a body rejected before routing)
_PATH_PARAMETER = re.compile(r"<(?:\w+:)?(\w+)>")


@dataclass(slots=True)
class _Instruments:
    tracer: Tracer
    tracer_provider: TracerProvider
    meter_provider: MeterProvider
    http_requests: Counter
    http_duration: Histogram
    http_rejected: Counter
    executions_active: UpDownCounter
    queue_delay: Histogram
    first_output: Histogram
    runner_startup: Histogram
    tool_calls: Counter
    tool_duration: Histogram
    transcript_bytes: Counter
    native_bytes: Counter
    sync_duration: Histogram
    sync_failures: Counter
    fleet_acquisitions: Counter
    fleet_failovers: Counter
    fleet_forwarded: Counter
    meter: Meter


def _build_instruments() -> _Instruments | None:
    """The SDK's providers and Brain's instruments, when $OTEL_EXPORTER_OTLP_ENDPOINT is set.

    The exporters read the endpoint (and the SDK's other OTEL_EXPORTER_OTLP_* variables)
    themselves.
    """
    if not os.environ.get(ENDPOINT_ENV, "").strip() or os.environ.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return None
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    interval = float(os.environ.get(INTERVAL_ENV) or METRIC_INTERVAL_MILLIS)
    reader = PeriodicExportingMetricReader(OTLPMetricExporter(), export_interval_millis=interval)
    instruments = _instruments_with(reader)
    instruments.tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    logger.info("telemetry exporting", extra={"endpoint": os.environ[ENDPOINT_ENV]})
    return instruments


def _instruments_with(reader: MetricReader) -> _Instruments:
    """Brain's instruments, their metrics read by `reader`; traces go nowhere until a span
    processor is added."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.resources import SERVICE_NAME as SERVICE_NAME_KEY
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider

    resource = Resource.create({SERVICE_NAME_KEY: SERVICE_NAME})
    # Not installed as the global providers: the application object owns their lifetime, and
    # their atexit hooks could hold the exit for 30 s when the collector is gone.
    tracer_provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    meter_provider = MeterProvider(resource=resource, metric_readers=[reader], shutdown_on_exit=False)
    meter = meter_provider.get_meter("brain")

    def seconds(name: str, description: str) -> Histogram:
        return meter.create_histogram(
            name, unit="s", description=description, explicit_bucket_boundaries_advisory=SECONDS_BUCKETS
        )

    instruments = _Instruments(
        tracer=tracer_provider.get_tracer("brain"),
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
        http_requests=meter.create_counter("brain.http.requests", unit="{request}", description="HTTP requests"),
        http_duration=seconds("brain.http.duration", "HTTP request latency (SSE streams are not timed)"),
        http_rejected=meter.create_counter("brain.http.rejected", unit="{request}", description="Error responses"),
        executions_active=meter.create_up_down_counter(
            "brain.executions.active", unit="{turn}", description="Running turns"
        ),
        queue_delay=seconds("brain.input.queue_delay", "Time a message waited before its turn started"),
        first_output=seconds("brain.assistant.first_output", "Time from accepting a message to its first output"),
        runner_startup=seconds("brain.runner.startup", "Time to start a harness process"),
        tool_calls=meter.create_counter("brain.tool.calls", unit="{call}", description="Tool calls"),
        tool_duration=seconds("brain.tool.duration", "Tool call latency"),
        transcript_bytes=meter.create_counter(
            "brain.transcript.bytes", unit="By", description="Bytes appended to event logs"
        ),
        native_bytes=meter.create_counter(
            "brain.native.appended_bytes", unit="By", description="Growth of native harness state"
        ),
        sync_duration=seconds("brain.sync.duration", "Time to publish a session to external storage"),
        sync_failures=meter.create_counter(
            "brain.sync.failures", unit="{sync}", description="Publishes that failed after their retries"
        ),
        fleet_acquisitions=meter.create_counter(
            "brain.fleet.acquisitions", unit="{lease}", description="Session leases this instance took"
        ),
        fleet_failovers=meter.create_counter(
            "brain.fleet.failovers",
            unit="{lease}",
            description="Sessions taken over after their previous owner's lease expired (not released)",
        ),
        fleet_forwarded=meter.create_counter(
            "brain.fleet.forwarded", unit="{request}", description="Session requests forwarded to their owner"
        ),
        meter=meter,
    )
    return instruments


@cache
def route_template(route: str) -> str:
    """`sessions/<session_id>/events` (a Django route) as `/sessions/{session_id}/events`."""
    return "/" + _PATH_PARAMETER.sub(r"{\1}", route).lstrip("/")


# -- turns and tool calls ----------------------------------------------------------------------


@dataclass(slots=True)
class ToolCallTrace:
    instruments: _Instruments
    span: Span
    traceparent: str  # the tool.call span's context, forwarded to the tool
    started: float = field(default_factory=time.monotonic)

    def end(self, tool: str, *, is_error: bool) -> None:
        """`tool` labels the metrics: a configured tool name, never model-invented text."""
        outcome = "tool_error" if is_error else "success"
        self.span.set_attribute("brain.tool.outcome", outcome)
        self.span.end()
        attributes = {"brain.tool.name": tool, "brain.tool.outcome": outcome}
        self.instruments.tool_calls.add(1, attributes)
        self.instruments.tool_duration.record(time.monotonic() - self.started, attributes)


@dataclass(slots=True)
class TurnTrace:
    """One running turn: its session.execute span and its first-output clock."""

    instruments: _Instruments
    span: Span
    accepted: float  # time.monotonic() when its message was accepted
    awaiting_output: bool = True

    def started(self) -> None:
        """The turn got its slot: the message's queueing ended."""
        self.instruments.queue_delay.record(time.monotonic() - self.accepted)

    def output(self) -> None:
        """An assistant event arrived; the first one of the turn is measured."""
        if self.awaiting_output:
            self.awaiting_output = False
            self.instruments.first_output.record(time.monotonic() - self.accepted)

    def tool_call(self, name: str) -> ToolCallTrace:
        from opentelemetry.propagate import inject
        from opentelemetry.trace import set_span_in_context

        span = self.instruments.tracer.start_span(
            "tool.call", context=set_span_in_context(self.span), attributes={"brain.tool.name": name}
        )
        carrier: dict[str, str] = {}
        inject(carrier, context=set_span_in_context(span))
        return ToolCallTrace(self.instruments, span, carrier.get("traceparent", ""))

    def end(self, error_code: str) -> None:
        if error_code:
            from opentelemetry.trace import StatusCode

            self.span.set_status(StatusCode.ERROR, error_code)
        self.span.end()
        self.instruments.executions_active.add(-1)


class Telemetry:
    """This process's exporters and instruments; every method returns at once when off."""

    def __init__(self, instruments: _Instruments | None = None) -> None:
        self._instruments = instruments

    @classmethod
    def from_environment(cls) -> Telemetry:
        """Exporting when $OTEL_EXPORTER_OTLP_ENDPOINT is set, else switched off."""
        return cls(_build_instruments())

    @classmethod
    def read_by(cls, reader: MetricReader) -> Telemetry:
        """Metrics read by `reader` alone (an SDK InMemoryMetricReader in tests), no export."""
        return cls(_instruments_with(reader))

    @property
    def enabled(self) -> bool:
        return self._instruments is not None

    def record_request(self, route: str, method: str, status: int, code: str, seconds: float | None) -> None:
        """One finished response; `seconds` is None for an SSE stream (counted, not timed)."""
        instruments = self._instruments
        if instruments is None:
            return
        attributes = {"http.route": route, "http.request.method": method}
        instruments.http_requests.add(1, attributes)
        if seconds is not None:
            instruments.http_duration.record(seconds, attributes)
        if status >= 400:
            instruments.http_rejected.add(1, {"error.code": code or "unknown"})

    def start_turn(self, session_id: str, harness: str, *, traceparent: str, accepted: float) -> TurnTrace | None:
        """A session.execute span joining `traceparent` (if any); None when telemetry is off."""
        instruments = self._instruments
        if instruments is None:
            return None
        from opentelemetry.propagate import extract

        parent: Context | None = extract({"traceparent": traceparent}) if traceparent else None
        span = instruments.tracer.start_span(
            "session.execute", context=parent, attributes={"session.id": session_id, "brain.harness": harness}
        )
        instruments.executions_active.add(1)
        return TurnTrace(instruments, span, accepted)

    def record_runner_startup(self, harness: str, seconds: float) -> None:
        if self._instruments is not None:
            self._instruments.runner_startup.record(seconds, {"brain.harness": harness})

    def record_transcript_bytes(self, count: int) -> None:
        if self._instruments is not None and count > 0:
            self._instruments.transcript_bytes.add(count)

    def record_native_bytes(self, count: int) -> None:
        if self._instruments is not None and count > 0:
            self._instruments.native_bytes.add(count)

    def record_sync(self, seconds: float, *, failed: bool) -> None:
        if self._instruments is not None:
            self._instruments.sync_duration.record(seconds)
            if failed:
                self._instruments.sync_failures.add(1)

    def observe_sync_pending(self, pending: Callable[[], int]) -> None:
        """brain.sync.pending: the upload backlog, read at each export."""
        if self._instruments is None:
            return
        from opentelemetry.metrics import Observation

        self._instruments.meter.create_observable_up_down_counter(
            "brain.sync.pending",
            callbacks=[lambda _options: [Observation(pending())]],
            unit="{session}",
            description="Sessions waiting for upload to external storage",
        )

    def observe_sync_workers(self, workers: Callable[[], int]) -> None:
        """brain.sync.workers: the Celery workers that answered the last ping of the broker."""
        if self._instruments is None:
            return
        from opentelemetry.metrics import Observation

        self._instruments.meter.create_observable_gauge(
            "brain.sync.workers",
            callbacks=[lambda _options: [Observation(workers())]],
            unit="{worker}",
            description="Celery workers that answered the last ping of the broker",
        )

    def record_fleet_acquisition(self, *, failover: bool) -> None:
        """A session lease taken; `failover` when its previous owner's lease had expired."""
        if self._instruments is not None:
            self._instruments.fleet_acquisitions.add(1)
            if failover:
                self._instruments.fleet_failovers.add(1)

    def record_fleet_forward(self) -> None:
        if self._instruments is not None:
            self._instruments.fleet_forwarded.add(1)

    def observe_fleet_leases(self, held: Callable[[], int]) -> None:
        """brain.fleet.leases: the session leases this instance holds, read at each export."""
        if self._instruments is None:
            return
        from opentelemetry.metrics import Observation

        self._instruments.meter.create_observable_gauge(
            "brain.fleet.leases",
            callbacks=[lambda _options: [Observation(held())]],
            unit="{lease}",
            description="Session leases this instance holds",
        )

    def shutdown(self) -> None:
        """Export what is buffered and stop; blocks up to the exporters' timeouts."""
        instruments, self._instruments = self._instruments, None
        if instruments is None:
            return
        instruments.tracer_provider.shutdown()
        instruments.meter_provider.shutdown(timeout_millis=FLUSH_SECONDS * 1000)

    async def ashutdown(self) -> None:
        """shutdown() off the loop, waiting at most FLUSH_SECONDS.

        A daemon thread rather than to_thread: the interpreter joins executor threads at exit, so
        an export stuck on a dead collector would hold the process past its shutdown deadline.
        """
        if self._instruments is None:
            return
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()

        def finish() -> None:
            if not done.done():
                done.set_result(None)

        def run() -> None:
            try:
                self.shutdown()
            except Exception:  # supervision boundary: a failed flush must not fail the exit
                logger.exception("telemetry flush failed")
            finally:
                with contextlib.suppress(RuntimeError):  # the loop closed while we flushed
                    loop.call_soon_threadsafe(finish)

        threading.Thread(target=run, name="brain-telemetry-flush", daemon=True).start()
        try:
            await asyncio.wait_for(done, FLUSH_SECONDS)
        except TimeoutError:
            logger.warning("telemetry flush timed out")
