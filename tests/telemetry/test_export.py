"""OTLP/HTTP export from a real runbrain process to a loopback receiver: spans joining the
sender's trace, the tool's traceparent, metric names without tenant or session labels, and
silence without $OTEL_EXPORTER_OTLP_ENDPOINT."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from typing import Any

from tests.fixtures.server import BrainServer, create_session, open_stream, wait_for_turn_end
from tests.telemetry.collector import OtlpReceiver
from tests.tools.servers import LoopbackServer, ToolZoo

METRICS = {
    "brain.http.requests",
    "brain.http.duration",
    "brain.http.rejected",
    "brain.executions.active",
    "brain.input.queue_delay",
    "brain.assistant.first_output",
    "brain.runner.startup",
    "brain.tool.calls",
    "brain.tool.duration",
    "brain.transcript.bytes",
    "brain.native.appended_bytes",
}
EXPORT_INTERVAL_MILLIS = "200"


def tool_server(
    brain_factory: Callable[..., BrainServer], zoo_server: tuple[ToolZoo, LoopbackServer], env: dict[str, str]
) -> BrainServer:
    binding = {
        "name": "whoami",
        "description": "Identity probe.",
        "input_schema": {"type": "object"},
        "url": zoo_server[1].url + "/identity",
        "tenants": ["acme"],
    }
    server = brain_factory(start=False, tools=[binding])
    server.env.update(env)
    server.start()
    return server


def run_traced_turn(server: BrainServer, traceparent: str) -> tuple[str, list[dict[str, Any]]]:
    """A session whose one turn calls whoami, sent with `traceparent`; also a 404 and a stream."""
    session = create_session(server, tools=["whoami"])
    stream = open_stream(server, session["id"])
    with server.client() as client:
        response = client.post(
            f"/sessions/{session['id']}/events",
            json={"type": "user.message", "text": "tool:whoami {}"},
            headers={"traceparent": traceparent},
        )
        assert response.status_code == 202, response.text
        assert client.get("/sessions/" + "0" * 32).status_code == 404
    events = wait_for_turn_end(server, session["id"], response.json()["id"])
    stream.close()
    return session["id"], events


def wait_for(condition: Callable[[], bool], timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the receiver never got it"
        time.sleep(0.05)


def test_a_turn_exports_its_spans_in_the_senders_trace_and_the_tool_joins_it(
    brain_factory: Callable[..., BrainServer],
    receiver: OtlpReceiver,
    zoo_server: tuple[ToolZoo, LoopbackServer],
    zoo: ToolZoo,
) -> None:
    # given
    server = tool_server(
        brain_factory,
        zoo_server,
        {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "OTEL_METRIC_EXPORT_INTERVAL": EXPORT_INTERVAL_MILLIS},
    )
    trace_id, parent_id = secrets.token_hex(16), secrets.token_hex(8)

    # when
    session_id, events = run_traced_turn(server, f"00-{trace_id}-{parent_id}-01")
    assert server.stop() == 0  # shutdown flushes the spans still batched

    # then
    (execute,) = receiver.named("session.execute")
    (tool,) = receiver.named("tool.call")
    assert (execute.trace_id, execute.parent_span_id) == (trace_id, parent_id)
    assert execute.attributes == {"session.id": session_id, "brain.harness": "instant"}
    assert (tool.trace_id, tool.parent_span_id) == (trace_id, execute.span_id)
    assert tool.attributes == {"brain.tool.name": "whoami", "brain.tool.outcome": "success"}
    assert execute.resource["service.name"] == "brain"
    (call,) = zoo.calls("/identity")
    assert call.headers["traceparent"] == f"00-{trace_id}-{tool.span_id}-01"
    assert [event["type"] for event in events].count("tool.result") == 1


def test_metrics_are_exported_by_name_without_tenant_or_session_labels(
    brain_factory: Callable[..., BrainServer],
    receiver: OtlpReceiver,
    zoo_server: tuple[ToolZoo, LoopbackServer],
    zoo: ToolZoo,
) -> None:
    # given
    server = tool_server(
        brain_factory,
        zoo_server,
        {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "OTEL_METRIC_EXPORT_INTERVAL": EXPORT_INTERVAL_MILLIS},
    )

    # when
    session_id, _ = run_traced_turn(server, f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01")
    wait_for(lambda: METRICS <= receiver.metric_names())  # the periodic export, before any shutdown

    # then
    assert receiver.latest("brain.tool.calls") == {
        (("brain.tool.name", "whoami"), ("brain.tool.outcome", "success")): 1.0
    }
    assert receiver.latest("brain.runner.startup") == {(("brain.harness", "instant"),): 1.0}
    assert receiver.latest("brain.executions.active") == {(): 0.0}
    assert receiver.latest("brain.http.rejected") == {(("error.code", "not_found"),): 1.0}
    requests = receiver.latest("brain.http.requests")
    events_route = ("http.route", "/sessions/{id}/events")
    assert requests[(("http.request.method", "POST"), events_route)] == 1.0
    assert requests[(("http.request.method", "GET"), events_route)] >= 1.0  # the stream, and history pages
    assert requests[(("http.request.method", "GET"), ("http.route", "/sessions/{id}"))] == 1.0
    for point in receiver.points:
        assert point.resource["service.name"] == "brain"
        assert not any("tenant" in key or "session.id" in key for key in point.attributes), point
        assert session_id not in point.attributes.values() and "acme" not in point.attributes.values(), point


def test_without_the_endpoint_variable_nothing_is_exported(
    brain_factory: Callable[..., BrainServer],
    receiver: OtlpReceiver,
    zoo_server: tuple[ToolZoo, LoopbackServer],
    zoo: ToolZoo,
) -> None:
    # given: the per-signal variables point at the receiver, but the switch is off
    server = tool_server(
        brain_factory,
        zoo_server,
        {
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": receiver.url + "/v1/traces",
            "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": receiver.url + "/v1/metrics",
            "OTEL_METRIC_EXPORT_INTERVAL": EXPORT_INTERVAL_MILLIS,
        },
    )
    traceparent = f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01"

    # when
    run_traced_turn(server, traceparent)
    time.sleep(1.0)  # five export intervals
    assert server.stop() == 0

    # then
    assert receiver.posts == []
    (call,) = zoo.calls("/identity")
    assert call.headers["traceparent"] == traceparent  # the sender's own: no span of Brain's
