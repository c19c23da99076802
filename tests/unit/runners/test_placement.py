"""The environment selector of both harnesses (runners/loop/placement.py and its pi counterpart):
the wrapped input schema keeps every `$ref` of the canonical one resolvable, and a call that is
not the wrapper goes to Brain as the model made it, naming no environment."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from runners.loop.messages import ToolCall
from runners.loop.placement import parse_placement, wrap_input

ROOT = Path(__file__).resolve().parents[3]
ENVIRONMENTS = ["app", "reader"]
# A canonical input using `$defs`, `definitions`, a ref to a property and a recursive ref to its root.
INPUT: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "properties": {
        "target": {"$ref": "#/$defs/Target"},
        "mode": {"$ref": "#/definitions/Mode"},
        "again": {"$ref": "#/properties/mode"},
        "child": {"$ref": "#"},
        "note": {"type": "string", "const": {"$ref": "#/not/a/reference"}},
    },
    "required": ["target"],
    "additionalProperties": False,
    "$defs": {"Target": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}},
    "definitions": {"Mode": {"enum": ["fast", "slow"]}},
}
GOOD = {"target": {"path": "a"}, "mode": "fast", "again": "slow", "child": {"target": {"path": "b"}}}
# The config of a tool `read` placed in both environments, presented with a selector.
SELECTOR: dict[str, Any] = {
    "placement": {
        "tools": [{"tool": {"name": "read"}, "env": env} for env in ENVIRONMENTS],
        "presentation": {"mode": "selector"},
    }
}
BAD = [
    {"target": {}},  # Target's required path
    {"target": {"path": "a"}, "mode": "other"},  # Mode's enum
    {"target": {"path": "a"}, "again": "other"},  # the property ref
    {"target": {"path": "a"}, "child": {"mode": "fast"}},  # the recursive root ref
]


def _wrapped_by_pi(schema: dict[str, Any]) -> Any:
    script = (
        "import { wrapInput } from './runners/pi/src/placement.mjs';"
        f"console.log(JSON.stringify(wrapInput({json.dumps(schema)}, {json.dumps(ENVIRONMENTS)})));"
    )
    done = subprocess.run(
        ["node", "--input-type=module", "-e", script], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout)


def _dispatched_by_pi(arguments: Any) -> Any:
    script = (
        "import { parsePlacement, dispatch } from './runners/pi/src/placement.mjs';"
        f"const placed = parsePlacement({json.dumps(SELECTOR)});"
        f"console.log(JSON.stringify(dispatch(placed, 'read', {json.dumps(arguments)})));"
    )
    done = subprocess.run(
        ["node", "--input-type=module", "-e", script], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout)


@pytest.mark.parametrize("harness", ["loop", "pi"])
def test_a_wrapped_input_with_defs_validates_as_the_canonical_one(harness: str) -> None:
    # given
    wrapped: Any = wrap_input(INPUT, ENVIRONMENTS) if harness == "loop" else _wrapped_by_pi(INPUT)
    jsonschema.Draft202012Validator.check_schema(wrapped)
    validator = jsonschema.Draft202012Validator(wrapped)

    # when / then: every reference resolves and checks what it checked in the canonical schema
    assert list(validator.iter_errors({"environment": "app", "input": GOOD})) == []
    for bad in BAD:
        assert [error.validator for error in validator.iter_errors({"environment": "app", "input": bad})] != []
    assert [e.validator for e in validator.iter_errors({"environment": "elsewhere", "input": GOOD})] == ["enum"]
    assert wrapped["properties"]["input"]["properties"]["note"]["const"] == {"$ref": "#/not/a/reference"}
    assert sorted(wrapped) == sorted(
        ["$schema", "$defs", "definitions", "type", "properties", "required", "additionalProperties"]
    )


@pytest.mark.parametrize("harness", ["loop", "pi"])
def test_an_input_with_its_own_id_is_nested_unchanged(harness: str) -> None:
    schema = {"$id": "https://example.com/input", **INPUT}
    wrapped: Any = wrap_input(schema, ENVIRONMENTS) if harness == "loop" else _wrapped_by_pi(schema)
    assert wrapped["properties"]["input"] == schema
    validator = jsonschema.Draft202012Validator(wrapped)
    assert list(validator.iter_errors({"environment": "app", "input": GOOD})) == []
    assert list(validator.iter_errors({"environment": "app", "input": BAD[0]})) != []


@pytest.mark.parametrize(
    ("arguments", "environment", "sent"),
    [
        pytest.param({"environment": "app", "input": {"path": "a"}}, "app", {"path": "a"}, id="wrapper_case"),
        pytest.param({"environment": "nope", "input": {}}, "nope", {}, id="unplaced_environment_case"),
        pytest.param({"path": "a"}, "", {"path": "a"}, id="unwrapped_case"),
        pytest.param({"environment": "app"}, "", {"environment": "app"}, id="no_input_case"),
        pytest.param({"environment": 1, "input": {}}, "", {"environment": 1, "input": {}}, id="not_a_name_case"),
        pytest.param({"environment": "app", "input": [1]}, "", {"environment": "app", "input": [1]}, id="list_case"),
        pytest.param(
            {"environment": "app", "input": {}, "path": "a"},
            "",
            {"environment": "app", "input": {}, "path": "a"},
            id="extra_key_case",
        ),
    ],
)
@pytest.mark.parametrize("harness", ["loop", "pi"])
def test_a_call_that_is_not_the_wrapper_goes_as_the_model_made_it(
    harness: str, arguments: dict[str, Any], environment: str, sent: dict[str, Any]
) -> None:
    # when
    if harness == "loop":
        call = parse_placement(SELECTOR).dispatch(ToolCall(id="c1", name="read", arguments=arguments))
        dispatched = {"environment": call.environment, "arguments": call.arguments}
    else:
        dispatched = _dispatched_by_pi(arguments)

    # then
    assert dispatched == {"environment": environment, "arguments": sent}
