"""Validators of the components a running server publishes at GET /openapi.json, their `$ref`s
resolved within that document: what a test checks recorded event data against."""

from __future__ import annotations

from typing import Any

import httpx
import jsonschema
import referencing
import referencing.jsonschema

__all__ = ["EVENT_SCHEMAS", "assert_event_data_served", "served_validators"]

# The served component that describes the data of each event type a tool call records.
EVENT_SCHEMAS = {"tool.call": "Call", "tool.result": "ToolResult", "tool.event": "ToolEvent"}


def served_validators(document: dict[str, Any]) -> dict[str, jsonschema.protocols.Validator]:
    """A validator per component of the served `document`, by component name."""
    resource = referencing.Resource.from_contents(document, default_specification=referencing.jsonschema.DRAFT202012)
    registry: referencing.Registry[Any] = referencing.Registry().with_resource("urn:served", resource)
    return {
        name: jsonschema.Draft202012Validator({"$ref": f"urn:served#/components/schemas/{name}"}, registry=registry)
        for name in document["components"]["schemas"]
    }


def assert_event_data_served(client: httpx.Client, events: list[dict[str, Any]]) -> set[str]:
    """Validate the data of each tool event among `events` against the server's published
    components (through `client`); returns the event types checked."""
    validators = served_validators(client.get("/openapi.json").json())
    checked = set()
    for event in events:
        name = EVENT_SCHEMAS.get(event["type"])
        if name is not None:
            validators[name].validate(event["data"])
            checked.add(event["type"])
    return checked
