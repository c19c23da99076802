"""Telemetry switched off costs no SDK: a fresh interpreter loads the hot paths, runs the
helpers, and never imports the OpenTelemetry SDK, exporters or protobuf classes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from foundation import telemetry

ROOT = Path(__file__).resolve().parents[3]
SDK_PACKAGES = ("opentelemetry.sdk", "opentelemetry.exporter", "opentelemetry.proto", "google.protobuf")
PROGRAM = """
import json, sys
import django
django.setup()
import brainsite.asgi
from brainsite import application
from foundation import telemetry
from sessions_app.runtime import actor, engine
from sessions_app.harness import host, pool
from tools_app import registry

recorder = telemetry.Telemetry.from_environment()
enabled = recorder.enabled
trace = recorder.start_turn("s" * 32, "instant", traceparent="00-" + "a" * 32 + "-" + "b" * 16 + "-01", accepted=0.0)
recorder.record_request("/sessions", "POST", 201, "", 0.01)
recorder.record_request("/sessions", "POST", 404, "not_found", 0.01)
recorder.record_runner_startup("instant", 0.1)
recorder.record_transcript_bytes(10)
recorder.record_native_bytes(10)
recorder.shutdown()
loaded = sorted(name for name in sys.modules if name.startswith(("opentelemetry", "google.protobuf")))
print(json.dumps({"enabled": enabled, "trace": trace is not None, "loaded": loaded}))
"""


def test_without_the_endpoint_the_sdk_is_never_imported() -> None:
    # given
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    env["DJANGO_SETTINGS_MODULE"] = "brainsite.settings"

    # when
    output = subprocess.run(
        [sys.executable, "-c", PROGRAM], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    ).stdout

    # then
    report = json.loads(output.splitlines()[-1])
    assert report["enabled"] is False and report["trace"] is False
    assert [name for name in report["loaded"] if name.startswith(SDK_PACKAGES)] == []
    assert "opentelemetry.propagate" in report["loaded"]  # the API alone: the registry's fallback


@pytest.mark.parametrize(
    ("route", "template"),
    [
        pytest.param("sessions", "/sessions", id="plain_case"),
        pytest.param("sessions/<session_id>/events", "/sessions/{session_id}/events", id="parameter_case"),
        pytest.param("items/<int:item_id>", "/items/{item_id}", id="converter_case"),
        pytest.param("/admin", "/admin", id="prefix_case"),
    ],
)
def test_a_django_route_becomes_a_bounded_template(route: str, template: str) -> None:
    # when / then
    assert telemetry.route_template(route) == template
