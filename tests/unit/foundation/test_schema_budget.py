"""The schema budgets: expansion refused at compile time, steps and a deadline at validation,
and the schema pool's bound on waiting work."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from foundation.errors import Overloaded
from foundation.schema_budget import MAX_SCHEMA_EXPANSION
from foundation.schema_workers import SchemaWorkers
from foundation.tool_schemas import compile_schema, first_error, schema_problem


def _multiplying(definitions: int) -> dict[str, Any]:
    defs: dict[str, Any] = {
        f"d{i}": {"anyOf": [{"$ref": f"#/$defs/d{i + 1}"}, {"$ref": f"#/$defs/d{i + 1}"}]} for i in range(definitions)
    }
    defs[f"d{definitions}"] = {"type": "string"}
    return {"$ref": "#/$defs/d0", "$defs": defs}


def test_a_schema_whose_references_multiply_past_the_budget_is_refused_naming_it() -> None:
    # when
    small, large = schema_problem(_multiplying(8)), schema_problem(_multiplying(21))

    # then
    assert small == ""
    assert large == (
        f"the schema expands to more than {MAX_SCHEMA_EXPANSION} subschemas through its references (the schema "
        "expansion budget): reference shared definitions fewer times, or flatten the schema"
    )


def test_a_recursive_schema_counts_its_cycle_once_and_a_deep_value_stops_at_the_step_budget() -> None:
    # given
    node = {"anyOf": [{"type": "array", "items": {"$ref": "#"}}, {"type": "array", "items": {"$ref": "#"}}]}
    validator = compile_schema(node)
    value: Any = "x"
    for _ in range(40):
        value = [value]

    # when
    problem = first_error(validator, value, steps=10_000)

    # then
    assert problem is not None
    assert problem.message == (
        "the value needs more than 10000 checks against the schema (the validation step budget); it was not accepted"
    )
    assert first_error(validator, [[[]]]) is None


def test_a_check_past_its_deadline_stops_with_the_deadline_as_its_reason() -> None:
    # given
    validator = compile_schema(
        {"$defs": {"n": {"anyOf": [{"type": "array", "items": {"$ref": "#/$defs/n"}}] * 2}}, "$ref": "#/$defs/n"}
    )
    value: Any = "x"
    for _ in range(40):
        value = [value]

    # when
    problem = first_error(validator, value, steps=10**9, seconds=0.05)

    # then
    assert problem is not None
    assert "took longer than 0.05 s (the validation deadline)" in problem.message


def test_the_schema_pool_refuses_work_past_its_bound_and_runs_it_off_the_loop() -> None:
    # given
    workers = SchemaWorkers(threads=1, jobs=2)
    release = threading.Event()
    loop_thread = threading.get_ident()

    async def scenario() -> tuple[list[bool], int]:
        held = [asyncio.ensure_future(workers.run(release.wait)) for _ in range(2)]
        await asyncio.sleep(0.05)
        with pytest.raises(Overloaded):
            await workers.run(lambda: None)
        release.set()
        results = list(await asyncio.gather(*held))
        return results, await workers.run(threading.get_ident)

    # when
    try:
        results, thread = asyncio.run(scenario())
    finally:
        workers.close()

    # then
    assert results == [True, True]
    assert thread != loop_thread
    assert workers.pending == 0
