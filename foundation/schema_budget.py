"""The cost budgets of a tenant's JSON Schema: one checked when it is compiled, one while a value
is checked against it.

Compile time: the schema's expansion, every subschema validation could enter with each `$ref`
(`$dynamicRef`, `$recursiveRef`) counted as the subschemas it leads to, stays within
MAX_SCHEMA_EXPANSION. Twenty-one `$defs` that each point twice at the next expand to 2^21 and
are refused; a recursive schema (a reference back to a schema it is inside) counts its cycle
once, its cost decided by the value, which the second budget bounds.

Validation: every keyword check counts one step (`$ref` included) and the check stops past
MAX_VALIDATION_STEPS or VALIDATION_SECONDS, whichever comes first, with a reason instead of an
answer. The meter lives in a context variable set by the check itself, in the thread running it.
Imports no app.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Protocol

from jsonschema.exceptions import SchemaError
from referencing import Resource, Specification
from referencing.exceptions import Unresolvable
from referencing.jsonschema import Schema

__all__ = [
    "MAX_EXPANSION_DEPTH",
    "MAX_SCHEMA_EXPANSION",
    "MAX_VALIDATION_STEPS",
    "VALIDATION_SECONDS",
    "BudgetSpent",
    "counted",
    "expansion",
    "metered",
]

# Subschemas a schema may expand to through its references. A tool schema of a few hundred
# properties with shared `$defs` expands to a few thousand; each subschema costs a validation at
# least one keyword check per value it reaches, so a budget far past that is where a schema is
# built to multiply work (2^n from n definitions that each reference the next twice).
MAX_SCHEMA_EXPANSION = 20_000
# Subschemas and references followed one inside the other while the expansion is counted: the
# walk recurses, and Python's own limit (1000 frames) must stay out of reach of a chain of
# definitions that each reference the next.
MAX_EXPANSION_DEPTH = 200
# Keyword checks in one validation. Checking a model's 4 MiB argument (about 100,000 small
# objects against a typed `items` schema) takes about 700,000; a check runs at roughly 3 us, so
# the budget stops a check near 5 s of one thread's time at worst.
MAX_VALIDATION_STEPS = 1_500_000
# Wall time of one validation: the step budget's bound in time, whatever a step costs (a pattern
# on a long string, a `format` check, a thread sharing the interpreter with others).
VALIDATION_SECONDS = 5.0
# The clock is read once per this many steps: a read costs more than a step's counting.
CLOCK_EVERY = 256


class BudgetSpent(Exception):
    """A validation stopped before its answer: `reason` says which budget it spent."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _Meter:
    """Steps left and the deadline of one validation."""

    __slots__ = ("deadline", "left", "seconds", "steps", "until_clock")

    def __init__(self, steps: int, seconds: float) -> None:
        self.steps = steps
        self.seconds = seconds
        self.left = steps
        self.until_clock = CLOCK_EVERY
        self.deadline = time.monotonic() + seconds

    def tick(self) -> None:
        self.left -= 1
        if self.left < 0:
            raise BudgetSpent(
                f"the value needs more than {self.steps} checks against the schema (the validation step budget); "
                "it was not accepted"
            )
        self.until_clock -= 1
        if not self.until_clock:
            self.until_clock = CLOCK_EVERY
            if time.monotonic() > self.deadline:
                raise BudgetSpent(
                    f"checking the value against the schema took longer than {self.seconds:g} s "
                    "(the validation deadline); it was not accepted"
                )


_METER: ContextVar[_Meter | None] = ContextVar("brain_schema_meter", default=None)

# A keyword check of jsonschema: (validator, keyword value, instance, schema) -> errors or None.
Check = Callable[[object, object, object, object], object]


def counted(check: Check) -> Check:
    """`check`, counting one step on the meter of the validation running it (if any)."""

    def step(validator: object, value: object, instance: object, schema: object) -> object:
        meter = _METER.get()
        if meter is not None:
            meter.tick()
        return check(validator, value, instance, schema)

    return step


@contextmanager
def metered(steps: int = MAX_VALIDATION_STEPS, seconds: float = VALIDATION_SECONDS) -> Iterator[None]:
    """Count the keyword checks run in this context (this thread) against the budgets."""
    token = _METER.set(_Meter(steps, seconds))
    try:
        yield
    finally:
        _METER.reset(token)


# --- the expansion at compile time ------------------------------------------------------------


class Resolved(Protocol):
    """What the walk uses of referencing's lookup result."""

    @property
    def contents(self) -> Schema: ...

    @property
    def resolver(self) -> Resolver: ...


class Resolver(Protocol):
    """What the walk uses of referencing's resolver."""

    def lookup(self, ref: str) -> Resolved: ...

    def in_subresource(self, subresource: Resource[Schema]) -> Resolver: ...


# `$recursiveRef` (2019-09) names the root of its dynamic scope; "#" is its static target.
_REFERENCES = (("$ref", None), ("$dynamicRef", None), ("$recursiveRef", "#"))


class _Expansion:
    """One memoized walk: each subschema's cost is worked out once, by identity."""

    def __init__(self, specification: Specification[Schema], budget: int) -> None:
        self.specification = specification
        self.budget = budget
        self.costs: dict[int, int] = {}
        self.open: set[int] = set()  # subschemas whose cost is being worked out: a cycle
        self.total = 0

    def cost(self, resolver: Resolver, resource: Resource[Schema], depth: int) -> int:
        contents = resource.contents
        key = id(contents)
        known = self.costs.get(key)
        if known is not None:
            return self._spent(known)
        if key in self.open:
            return self._spent(1)  # a cycle: counted once, its cost is the value's
        if depth > MAX_EXPANSION_DEPTH:
            raise SchemaError(f"the schema's subschemas and references nest deeper than {MAX_EXPANSION_DEPTH} levels")
        self.open.add(key)
        cost = self._spent(1)
        if isinstance(contents, Mapping):
            for keyword, target in _REFERENCES:
                reference = contents.get(keyword)
                if isinstance(reference, str):
                    cost += self._follow(resolver, target or reference, depth)
        for subresource in resource.subresources():
            cost += self.cost(resolver.in_subresource(subresource), subresource, depth + 1)
        self.open.discard(key)
        self.costs[key] = cost
        return cost

    def _follow(self, resolver: Resolver, reference: str, depth: int) -> int:
        try:
            resolved = resolver.lookup(reference)
        except Unresolvable:
            return 0  # refused by the resolution check, with its own reason
        target = Resource.from_contents(resolved.contents, default_specification=self.specification)
        return self.cost(resolved.resolver, target, depth + 1)

    def _spent(self, cost: int) -> int:
        self.total += cost
        if self.total > self.budget:
            raise SchemaError(
                f"the schema expands to more than {self.budget} subschemas through its references (the schema "
                "expansion budget): reference shared definitions fewer times, or flatten the schema"
            )
        return cost


def expansion(
    resolver: Resolver,
    resource: Resource[Schema],
    specification: Specification[Schema],
    *,
    budget: int = MAX_SCHEMA_EXPANSION,
) -> int:
    """The subschemas `resource` expands to (a subschema without `$schema` of its own is of
    `specification`); raises SchemaError, naming the budget, past `budget`."""
    return _Expansion(specification, budget).cost(resolver, resource, 0)
