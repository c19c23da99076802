"""compile_schema(): references stay inside the document, patterns run on RE2, costs stay linear."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from jsonschema import SchemaError

from foundation.tool_schemas import MAX_SCHEMA_DEPTH, compile_schema, first_error, first_error_off_loop, schema_problem

LOOPBACK = "http://127.0.0.1:9"  # nothing listens: a fetch would fail loudly, not silently


def _message(schema: Any) -> str:
    with pytest.raises(SchemaError) as refused:
        compile_schema(schema)
    return str(refused.value.message)


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        pytest.param(
            {"$ref": f"{LOOPBACK}/s.json"},
            f"$ref '{LOOPBACK}/s.json' at the root: only references inside the schema (#...) are allowed",
            id="remote_case",
        ),
        pytest.param(
            {"properties": {"p": {"$ref": "file:///etc/passwd"}}},
            "$ref 'file:///etc/passwd' at /properties/p: only references inside the schema (#...) are allowed",
            id="file_case",
        ),
        pytest.param(
            {"$id": f"{LOOPBACK}/root.json", "properties": {"p": {"$ref": "item.json"}}},
            "$ref 'item.json' at /properties/p: only references inside the schema (#...) are allowed",
            id="id_relative_case",
        ),
        pytest.param(
            {"$defs": {"a": {"$dynamicRef": f"{LOOPBACK}/s.json#meta"}}},
            f"$dynamicRef '{LOOPBACK}/s.json#meta' at /$defs/a: only references inside the schema (#...) are allowed",
            id="dynamic_ref_case",
        ),
        pytest.param(
            {"$schema": "https://json-schema.org/draft/2019-09/schema", "$recursiveRef": "other.json"},
            "$recursiveRef 'other.json' at the root: only references inside the schema (#...) are allowed",
            id="recursive_ref_case",
        ),
        pytest.param(
            {"properties": {"p": {"$ref": "#/$defs/missing"}}},
            "$ref '#/$defs/missing' does not resolve inside the schema",
            id="pointer_to_nowhere_case",
        ),
        pytest.param(
            {"properties": {"p": {"$id": f"{LOOPBACK}/inner.json", "$ref": "#/nowhere"}}},
            "$ref '#/nowhere' does not resolve inside the schema",
            id="pointer_inside_an_embedded_id_case",
        ),
    ],
)
def test_a_reference_that_leaves_the_document_or_resolves_nowhere_is_refused(schema: Any, message: str) -> None:
    # when / then
    assert _message(schema) == message


def test_a_local_reference_validates_through_defs_and_embedded_ids() -> None:
    # given
    validator = compile_schema(
        {
            "$defs": {"count": {"type": "integer", "minimum": 0}},
            "properties": {
                "n": {"$ref": "#/$defs/count"},
                "inner": {"$id": f"{LOOPBACK}/inner.json", "$defs": {"s": {"type": "string"}}, "$ref": "#/$defs/s"},
            },
        }
    )

    # when / then
    assert first_error(validator, {"n": 3, "inner": "x"}) is None
    problem = first_error(validator, {"n": -1})
    assert problem is not None and problem.message == "-1 is less than the minimum of 0"
    problem = first_error(validator, {"inner": 5})
    assert problem is not None and problem.message == "5 is not of type 'string'"


def test_a_draft_4_schema_with_definitions_validates() -> None:
    # given
    validator = compile_schema(
        {
            "$schema": "http://json-schema.org/draft-04/schema#",
            "definitions": {"code": {"type": "string", "pattern": "^[A-Z]{3}$"}},
            "properties": {"code": {"$ref": "#/definitions/code"}},
        }
    )

    # when / then
    assert first_error(validator, {"code": "ABC"}) is None
    problem = first_error(validator, {"code": "abc"})
    assert problem is not None and problem.message == "'abc' does not match '^[A-Z]{3}$'"


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        pytest.param(
            {"properties": {"p": {"type": "string", "pattern": "^(a)\\1$"}}},
            "pattern '^(a)\\\\1$' at /properties/p is not supported: patterns must compile as RE2 "
            "(no backreferences or lookaround)",
            id="backreference_case",
        ),
        pytest.param(
            {"patternProperties": {"^(?!x)": {}}},
            "patternProperties '^(?!x)' at the root is not supported: patterns must compile as RE2 "
            "(no backreferences or lookaround)",
            id="lookahead_key_case",
        ),
        pytest.param(
            {"patternProperties": {"^a": {}}, "unevaluatedProperties": False},
            "unevaluatedProperties cannot be combined with patternProperties",
            id="unevaluated_with_pattern_properties_case",
        ),
        pytest.param({"type": "nope"}, "is not a valid JSON Schema: ", id="metaschema_case"),
    ],
)
def test_a_pattern_re2_cannot_run_is_refused_with_its_location(schema: Any, message: str) -> None:
    # when / then
    assert _message(schema).startswith(message)


def test_a_catastrophic_pattern_validates_a_long_subject_correctly() -> None:
    # given: exponential for a backtracking engine on this subject
    validator = compile_schema({"type": "string", "pattern": "^(a+)+$"})

    # when
    refused = first_error(validator, "a" * 10_000 + "!")
    accepted = first_error(validator, "a" * 10_000)

    # then
    assert refused is not None
    assert refused.message.endswith("does not match '^(a+)+$'")
    assert accepted is None


def test_pattern_properties_and_additional_properties_match_with_re2() -> None:
    # given
    validator = compile_schema(
        {
            "type": "object",
            "properties": {"id": {"type": "string"}},
            "patternProperties": {"^(x+)+$": {"type": "integer"}},
            "additionalProperties": False,
        }
    )
    long_key = "x" * 5_000

    # when / then
    assert first_error(validator, {"id": "a", long_key: 1}) is None
    problem = first_error(validator, {long_key: "one"})
    assert problem is not None and problem.message == "'one' is not of type 'integer'"
    problem = first_error(validator, {long_key + "!": 1})
    assert problem is not None
    assert problem.message.endswith("does not match any of the regexes: '^(x+)+$'")


@pytest.mark.parametrize(
    ("items", "unique"),
    [
        pytest.param([{"a": 1}, {"a": 1.0}], False, id="equal_numbers_case"),
        pytest.param([1, True], True, id="true_is_not_one_case"),
        pytest.param([[1, 2], [2, 1]], True, id="order_matters_in_arrays_case"),
        pytest.param([{"a": 1, "b": 2}, {"b": 2, "a": 1}], False, id="order_is_ignored_in_objects_case"),
        pytest.param([{"a": i} for i in range(20_000)], True, id="many_objects_case"),
    ],
)
def test_unique_items_compares_as_json(items: list[Any], unique: bool) -> None:
    # given
    validator = compile_schema({"type": "array", "uniqueItems": True})

    # when
    problem = first_error(validator, items)

    # then
    assert (problem is None) is unique


def test_the_iri_formats_are_checked() -> None:
    # given
    validator = compile_schema({"type": "string", "format": "iri"})

    # when / then
    assert first_error(validator, "https://例え.jp/パス?q=1") is None
    assert first_error(validator, "http://x/ space") is not None
    assert first_error(validator, "a" * 10_000 + "!") is not None


def test_a_schema_nested_too_deeply_is_refused() -> None:
    # given
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(MAX_SCHEMA_DEPTH + 1):
        schema = {"not": schema}

    # when / then
    assert _message(schema) == f"the schema is nested deeper than {MAX_SCHEMA_DEPTH} levels"


def test_a_recursion_without_end_is_an_invalid_value_not_an_exception() -> None:
    # given
    validator = compile_schema({"$ref": "#"})

    # when
    problem = first_error(validator, {"a": 1})

    # then
    assert problem is not None and problem.message == "the value is nested too deeply to be checked"


def test_off_loop_validation_gives_the_same_answer() -> None:
    # given
    validator = compile_schema({"type": "object", "required": ["q"]})

    # when
    problem = asyncio.run(first_error_off_loop(validator, {}))

    # then
    assert problem is not None and problem.message == "'q' is a required property"


def test_schema_problem_is_empty_for_a_valid_schema_and_says_why_otherwise() -> None:
    # when / then
    assert schema_problem({"type": "object", "properties": {"q": {"type": "string"}}}) == ""
    assert schema_problem([]) == "a schema must be a JSON object"
