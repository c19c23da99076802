"""The served OpenAPI document against the wire contract (spec/openapi.json): the same
operations, operationIds, parameters, and request and response schemas once `$ref`s are
resolved and cosmetic differences are normalised away. Operations the contract does not have
are allowed only when listed below as additive, with their own components."""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonschema
import pytest

from brainsite.api import api
from foundation import wire
from sessions_app import schemas as session_schemas
from tests.support.served_schemas import served_validators
from tests.support.spec import spec_path
from toolkits.events import EVENT_KIND_PATTERN
from tools_app import schemas as tool_schemas
from tools_app.invocation.results import Outcome

METHODS = frozenset({"get", "put", "post", "delete", "patch", "head", "options"})
# Keys that only document: they never change what a body may be.
COSMETIC_KEYS = frozenset({"title", "description", "example", "examples", "summary", "tags"})
# Where we publish more than the contract says: the enums a send validates (`type`, whose
# "session.configure" changes the configuration between turns: README, "Changing a session's
# configuration"; and `delivery`, whose "steer" joins the running turn: README, "Steering a
# running turn"). Checked exactly, then removed.
REFINEMENTS = {
    ("Input", "type"): ["user.message", "user.interrupt", "session.configure"],
    ("Input", "delivery"): ["queue", "steer"],
}

# Fields the 2.3.0 client sends, recorded in the contract under LATER_SDK (`"Schema.field": schema`):
# each served one must match that record (we may be stricter: no unknown keys), then it is removed
# before the comparison with the contract proper. Their components are additive.
LATER_SDK = "x-later-sdk-2.3.0"
LATER_SDK_FIELDS = frozenset({("CreateSession", "model_credential"), ("Input", "media")})
LATER_SDK_COMPONENTS = frozenset({"Media", "ModelCredential"})

# Additive fields (documented in the README) of the contract's request schemas: each optional (a
# 2.0.0 client never sends it), exactly a reference to its additive component, then removed
# before the comparison with the contract proper.
ADDITIVE_FIELDS = {
    ("Input", "config"): "ConfigChange",  # session.configure's change
    ("SessionConfig", "placement"): "Placement",  # tool environments (README, "Tool environments")
    ("Reply", "event"): "ExtensionEvent",  # a placed call's committed extension event
    ("ToolResult", "outcome"): "Outcome",  # how a call ended (invalid_input, invalid_output among them)
}
# Additive text fields (README, "Tool environments"): each optional and exactly a string, then
# removed before the comparison with the contract proper.
ADDITIVE_TEXT_FIELDS = frozenset(
    {
        ("Call", "environment"),  # the environment of a placed tool's tool.call
        ("ToolResult", "environment"),  # and of its tool.result
        ("ToolScope", "environment"),  # a host executor's command: the call's environment,
        ("ToolScope", "sequence"),  # the committed position of its tool.call,
        ("ToolScope", "deadline"),  # its deadline
        ("ToolScope", "options"),  # and its placement's options (JSON text)
    }
)
# The components only additive fields use, beside the fields' own.
ADDITIVE_FIELD_PARTS = frozenset({"PlacedTool", "ToolPlacement", "EnvironmentBinding", "Presentation"})
# Additive components no operation uses: published event data (a placed call's `tool.event`).
ADDITIVE_EVENT_DATA = frozenset({"ToolEvent"})

# Additive operations (documented in the README): served beside the contract's, never changing
# one of them. Each is checked for its operationId, the contract's bearer security and error
# envelope; the components only they use are listed too.
ADDITIVE_OPERATIONS = {
    ("get", "/tasks"): "listTasks",
    ("post", "/sessions/{id}/approvals/{approval_id}"): "decide_approval",
    ("delete", "/sessions/{id}"): "delete",  # what aex-brain 2.3.0's Brain.delete sends
    # a tool service's extension event of a placed call, under its per-call emit token
    ("post", "/sessions/{id}/tool-calls/{call_id}/events"): "emitToolEvent",
}
ADDITIVE_COMPONENTS = frozenset(
    {
        "Approval",
        "ApprovalDecision",
        "Deleted",
        "TaskItem",
        "TaskPage",
        *LATER_SDK_COMPONENTS,
        *ADDITIVE_FIELDS.values(),
        *ADDITIVE_FIELD_PARTS,
        *ADDITIVE_EVENT_DATA,
    }
)

Document = dict[str, Any]


def _served() -> Document:
    # through JSON, as clients read it: ninja keys responses by int status codes
    document: Document = json.loads(json.dumps(api.get_openapi_schema(path_prefix="")))
    return document


def _contract() -> Document:
    document: Document = json.loads(spec_path("openapi.json").read_text(encoding="utf-8"))
    return document


def _canonical(node: Any, components: Document, trail: tuple[str, ...] = ()) -> Any:
    """`node` with every `$ref` inlined and cosmetic differences removed."""
    if isinstance(node, list):
        return [_canonical(item, components, trail) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]  # components/schemas/X, or x-later-sdk-2.3.0/schemas/X
        if name in trail:  # a recursive schema: compare by name below this point
            return {"$ref": name}
        return _canonical(components[name], components, (*trail, name))
    result: dict[str, Any] = {}
    for key, value in node.items():
        if key in COSMETIC_KEYS or key.startswith("x-"):
            continue  # documentation and evidence notes
        if key == "default" and value is None:
            continue  # pydantic's marker of an optional field; the contract leaves it out of `required`
        if key == "additionalProperties" and value in (True, {}):
            continue  # `true` and `{}` both say what an absent keyword says
        if key == "properties":
            result[key] = {name: _canonical(item, components, trail) for name, item in value.items()}
        else:
            result[key] = _canonical(value, components, trail)
    if "required" in result:
        result["required"] = sorted(result["required"])  # a set, written in any order
    options = result.get("anyOf")
    if isinstance(options, list) and len(options) == 2 and {"type": "null"} in options:
        # pydantic spells an optional field `X | None` as `anyOf [X, null]`; the contract as X
        del result["anyOf"]
        result.update(next(option for option in options if option != {"type": "null"}))
    return result


def _later_sdk_refs(node: Any) -> Any:
    """A schema of the LATER_SDK record with its `$ref`s spelt as components' refs."""
    if isinstance(node, list):
        return [_later_sdk_refs(item) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        return {"$ref": node["$ref"].replace(f"#/{LATER_SDK}/schemas/", "#/components/schemas/")}
    return {key: _later_sdk_refs(value) for key, value in node.items()}


def _strict_as_recorded(node: Any) -> Any:
    """A served schema without `additionalProperties: false`, which the record leaves out."""
    if isinstance(node, list):
        return [_strict_as_recorded(item) for item in node]
    if not isinstance(node, dict):
        return node
    return {k: _strict_as_recorded(v) for k, v in node.items() if not (k == "additionalProperties" and v is False)}


def _apply_later_sdk_fields(document: Document) -> list[str]:
    """Check each LATER_SDK_FIELDS field against the contract's record of it, then remove it."""
    problems = []
    record = _contract()[LATER_SDK]
    recorded_components = _later_sdk_refs(record["schemas"])
    schemas = document["components"]["schemas"]
    for schema, field in sorted(LATER_SDK_FIELDS):
        served = schemas[schema]["properties"].pop(field, None)
        if served is None:
            problems.append(f"{schema}.{field}: not served")
            continue
        expected = _canonical(_later_sdk_refs(record[f"{schema}.{field}"]), recorded_components)
        if _strict_as_recorded(_canonical(served, schemas)) != expected:
            problems.append(f"{schema}.{field}: differs from the {LATER_SDK} record")
        if field in schemas[schema].get("required", []):
            problems.append(f"{schema}.{field}: required, but the 2.0.0 client never sends it")
    return problems


def _apply_additive_fields(document: Document) -> list[str]:
    """Check each ADDITIVE_FIELDS field (optional, its component's reference), then remove it."""
    problems = []
    schemas = document["components"]["schemas"]
    for (schema, field), component in sorted(ADDITIVE_FIELDS.items()):
        served = schemas[schema]["properties"].pop(field, None)
        reference = {"$ref": f"#/components/schemas/{component}"}
        if served is None:
            problems.append(f"{schema}.{field}: not served")
        elif [option for option in served.get("anyOf", [served]) if option != {"type": "null"}] != [reference]:
            problems.append(f"{schema}.{field}: is not a reference to {component}")
        if field in schemas[schema].get("required", []):
            problems.append(f"{schema}.{field}: required, but the 2.0.0 client never sends it")
    return problems


def _apply_additive_text_fields(document: Document) -> list[str]:
    """Check each ADDITIVE_TEXT_FIELDS field (optional, a string), then remove it."""
    problems = []
    schemas = document["components"]["schemas"]
    for schema, field in sorted(ADDITIVE_TEXT_FIELDS):
        served = schemas[schema]["properties"].pop(field, None)
        if served is None:
            problems.append(f"{schema}.{field}: not served")
        elif [option for option in served.get("anyOf", [served]) if option != {"type": "null"}] != [{"type": "string"}]:
            problems.append(f"{schema}.{field}: is not a string")
        if field in schemas[schema].get("required", []):
            problems.append(f"{schema}.{field}: required, but the 2.0.0 client never sends it")
    return problems


def _apply_refinements(document: Document) -> list[str]:
    problems = _apply_later_sdk_fields(document) + _apply_additive_fields(document)
    problems += _apply_additive_text_fields(document)
    schemas = document["components"]["schemas"]
    for (schema, field), values in REFINEMENTS.items():
        published = schemas[schema]["properties"][field]
        target: dict[str, Any] = next(
            (option for option in published.get("anyOf", [published]) if "enum" in option), {}
        )
        if target.get("enum") != values:
            problems.append(f"{schema}.{field}: enum {target.get('enum')} is not {values}")
        target.pop("enum", None)
    return problems


def _operations(document: Document) -> dict[tuple[str, str], Document]:
    return {
        (method, path): operation
        for path, item in document["paths"].items()
        for method, operation in item.items()
        if method in METHODS
    }


def _parameters(operation: Document, components: Document) -> dict[tuple[str, str], Any]:
    return {
        (parameter["in"], parameter["name"]): (
            bool(parameter.get("required", False)),
            _canonical(parameter.get("schema", {}), components),
        )
        for parameter in operation.get("parameters", [])
    }


def _content(holder: Document, components: Document) -> dict[str, Any]:
    # a response without a body may omit `content` or give it empty
    return {media: _canonical(item.get("schema", {}), components) for media, item in holder.get("content", {}).items()}


def _body(operation: Document, components: Document) -> Any:
    body = operation.get("requestBody")
    return None if body is None else (bool(body.get("required", False)), _content(body, components))


def _differences(served: Document, contract: Document) -> list[str]:
    """Every way the served document's operations differ from the contract's."""
    served = copy.deepcopy(served)
    problems = _apply_refinements(served)
    ours, theirs = _operations(served), _operations(contract)
    ours_components, their_components = served["components"]["schemas"], contract["components"]["schemas"]
    problems += [f"missing operation {method.upper()} {path}" for method, path in sorted(theirs.keys() - ours.keys())]
    extra = ours.keys() - theirs.keys() - ADDITIVE_OPERATIONS.keys()
    problems += [f"extra operation {method.upper()} {path}" for method, path in sorted(extra)]
    problems += _additive_problems(served, ours, theirs)
    for key in sorted(ours.keys() & theirs.keys()):
        mine, spec = ours[key], theirs[key]
        label = f"{key[0].upper()} {key[1]}"
        if mine.get("operationId") != spec.get("operationId"):
            problems.append(f"{label}: operationId {mine.get('operationId')} != {spec.get('operationId')}")
        if mine.get("security", []) != spec.get("security", []):  # absent: the document's (none)
            problems.append(f"{label}: security {mine.get('security')} != {spec.get('security')}")
        if _parameters(mine, ours_components) != _parameters(spec, their_components):
            problems.append(f"{label}: parameters differ")
        if _body(mine, ours_components) != _body(spec, their_components):
            problems.append(f"{label}: request body differs")
        if mine["responses"].keys() != spec["responses"].keys():
            problems.append(f"{label}: statuses {sorted(mine['responses'])} != {sorted(spec['responses'])}")
        for status in sorted(mine["responses"].keys() & spec["responses"].keys()):
            if _content(mine["responses"][status], ours_components) != _content(
                spec["responses"][status], their_components
            ):
                problems.append(f"{label}: response {status} differs")
    return problems


def _additive_problems(served: Document, ours: dict[tuple[str, str], Document], theirs: Any) -> list[str]:
    """The documented additive operations: present, outside the contract, secured and with the
    error envelope exactly as the contract's authenticated operations are."""
    problems = []
    envelope = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorResponse"}}}
    for (method, path), operation_id in sorted(ADDITIVE_OPERATIONS.items()):
        label = f"additive {method.upper()} {path}"
        operation = ours.get((method, path))
        if (method, path) in theirs:
            problems.append(f"{label} is in the contract: remove it from ADDITIVE_OPERATIONS")
        if operation is None:
            problems.append(f"{label} is not served")
            continue
        if operation.get("operationId") != operation_id:
            problems.append(f"{label}: operationId {operation.get('operationId')} != {operation_id}")
        if operation.get("security") != [{"bearer": []}]:
            problems.append(f"{label}: security {operation.get('security')}")
        if operation["responses"].get("default", {}).get("content") != envelope:
            problems.append(f"{label}: no error envelope")
    return problems


def test_the_served_document_has_the_contracts_operations_and_schemas() -> None:
    # when
    problems = _differences(_served(), _contract())

    # then
    assert problems == []


def test_the_served_components_are_named_as_in_the_contract() -> None:
    # when
    served = set(_served()["components"]["schemas"])

    # then
    assert ADDITIVE_COMPONENTS <= served
    assert served - ADDITIVE_COMPONENTS == set(_contract()["components"]["schemas"])
    assert _served()["components"]["securitySchemes"] == _contract()["components"]["securitySchemes"]


def test_each_served_component_matches_the_contracts() -> None:
    # given
    served, contract = _served(), _contract()
    _apply_refinements(served)
    ours, theirs = served["components"]["schemas"], contract["components"]["schemas"]

    # when
    differing = sorted(name for name in theirs if _canonical(ours.get(name), ours) != _canonical(theirs[name], theirs))

    # then
    assert differing == []


@pytest.mark.parametrize(
    ("copy_", "original"),
    [
        pytest.param(tool_schemas.Tool, session_schemas.Tool, id="tool_case"),
        pytest.param(tool_schemas.Status, session_schemas.Status, id="tools_status_case"),
        pytest.param(wire.Status, session_schemas.Status, id="health_status_case"),
    ],
)
def test_schemas_shared_across_apps_publish_the_same_schema(copy_: Any, original: Any) -> None:
    # the document keeps one schema per name, so a drifted copy would go unnoticed there
    assert copy_.model_json_schema() == original.model_json_schema()


def _drop_required(document: Document) -> None:
    document["components"]["schemas"]["Session"]["required"].remove("descriptors")


def _retype(document: Document) -> None:
    document["components"]["schemas"]["Checkpoint"]["properties"]["offset"]["type"] = "string"


def _remove_field(document: Document) -> None:
    del document["components"]["schemas"]["SyncStatus"]["properties"]["native_checkpoint"]


def _restatus(document: Document) -> None:
    responses = document["paths"]["/sessions/{id}/close"]["post"]["responses"]
    responses["200"] = responses.pop("202")


def _drop_errors(document: Document) -> None:
    del document["paths"]["/catalog"]["get"]["responses"]["default"]


def _rename_parameter(document: Document) -> None:
    document["paths"]["/sessions/{id}"]["get"]["parameters"][0]["name"] = "session_id"


def _allow_extra_fields(document: Document) -> None:
    document["components"]["schemas"]["ErrorDetail"]["additionalProperties"] = True


def _widen_enum(document: Document) -> None:
    document["components"]["schemas"]["Input"]["properties"]["delivery"]["type"] = "integer"


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(_drop_required, id="required_list_case"),
        pytest.param(_retype, id="wrong_type_case"),
        pytest.param(_remove_field, id="missing_field_case"),
        pytest.param(_restatus, id="status_code_case"),
        pytest.param(_drop_errors, id="error_response_case"),
        pytest.param(_rename_parameter, id="path_parameter_case"),
        pytest.param(_allow_extra_fields, id="additional_properties_case"),
        pytest.param(_widen_enum, id="input_type_case"),
    ],
)
def test_the_comparison_catches_a_changed_contract(change: Any) -> None:
    # given
    contract = _contract()
    change(contract)

    # when
    problems = _differences(_served(), contract)

    # then
    assert problems != []


def test_the_comparison_catches_an_additive_field_made_required_or_retyped() -> None:
    # given a served document whose session.configure config is required, and one where it is a string
    required, retyped = _served(), _served()
    required["components"]["schemas"]["Input"]["required"].append("config")
    retyped["components"]["schemas"]["Input"]["properties"]["config"] = {"type": "string"}

    # when
    problems = _differences(required, _contract()), _differences(retyped, _contract())

    # then
    assert "Input.config: required, but the 2.0.0 client never sends it" in problems[0]
    assert problems[1] == ["Input.config: is not a reference to ConfigChange"]


def test_the_comparison_catches_an_additive_text_field_made_required_or_retyped() -> None:
    # given a served document whose tool.call environment is required, and one where it is a number
    required, retyped = _served(), _served()
    required["components"]["schemas"]["Call"]["required"].append("environment")
    retyped["components"]["schemas"]["ToolScope"]["properties"]["sequence"] = {"type": "integer"}

    # when
    problems = _differences(required, _contract()), _differences(retyped, _contract())

    # then
    assert problems[0] == ["Call.environment: required, but the 2.0.0 client never sends it"]
    assert problems[1] == ["ToolScope.sequence: is not a string"]


def _validator(name: str) -> jsonschema.protocols.Validator:
    return served_validators(_served())[name]


def test_the_served_tool_event_data_carry_environments_outcomes_and_extension_events() -> None:
    # given: the data of a placed call's events as the server records them
    call = {"id": "c1", "name": "read", "arguments": {"path": "a"}, "environment": "app"}
    result = {
        "call_id": "c1",
        "result": {"content": [{"type": "text", "text": "no"}], "is_error": True},
        "outcome": "invalid_input",
        "environment": "app",
    }
    event = {"call_id": "c1", "environment": "app", "kind": "read.started", "data": [1]}
    scope = {"tenant_id": "t", "session_id": "s", "call_id": "c1", "environment": "app", "sequence": "7"}

    # then: each validates, and what the server never records does not
    assert _served()["components"]["schemas"]["Outcome"]["enum"] == [outcome.value for outcome in Outcome]
    for name, data in (("Call", call), ("ToolResult", result), ("ToolEvent", event), ("ToolScope", scope)):
        assert list(_validator(name).iter_errors(data)) == [], name
    assert not _validator("ToolResult").is_valid({**result, "outcome": "skipped"})
    assert not _validator("ToolEvent").is_valid({**event, "kind": "Read:Started"})
    assert not _validator("ToolEvent").is_valid({**event, "extra": 1})
    assert _served()["components"]["schemas"]["ToolEvent"]["properties"]["kind"]["pattern"] == EVENT_KIND_PATTERN


def test_the_comparison_catches_an_undocumented_extra_operation() -> None:
    # given
    served = _served()
    served["paths"]["/sessions/{id}/undocumented"] = {"post": {"operationId": "undocumented", "responses": {}}}

    # when
    problems = _differences(served, _contract())

    # then
    assert "extra operation POST /sessions/{id}/undocumented" in problems


def test_the_comparison_catches_an_additive_operation_that_changed_its_id() -> None:
    # given
    served = _served()
    served["paths"]["/sessions/{id}/approvals/{approval_id}"]["post"]["operationId"] = "approve"

    # when
    problems = _differences(served, _contract())

    # then
    assert "additive POST /sessions/{id}/approvals/{approval_id}: operationId approve != decide_approval" in problems


def test_the_document_is_built_once_and_served_from_then_on() -> None:
    from brainsite.api import api

    # when / then: the same object, not a rebuild per request
    assert api.get_openapi_schema(path_prefix="") is api.get_openapi_schema(path_prefix="")


def test_every_authenticated_operation_documents_the_fleets_retryable_503() -> None:
    from foundation.errors import Unavailable

    # given: the served document, as a client reads it
    served = _served()
    # when: the error responses of the operations that take a bearer token are read
    described = {
        (method, path): operation["responses"]["default"]["description"]
        for path, operations in served["paths"].items()
        for method, operation in operations.items()
        if operation["security"]
    }
    # then: each names the 503 a fleet answers while a session's owner moves, and its Retry-After
    assert len(described) >= 15
    mentioned = f"{Unavailable.status} {Unavailable.code} (Retry-After: {Unavailable('').headers()['Retry-After']})"
    assert [key for key, text in described.items() if mentioned not in text] == []
