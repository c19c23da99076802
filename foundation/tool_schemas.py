"""JSON Schemas written by operators and tenants (tool input and output schemas, provider
descriptors and options): compiled as data, never as fetchers, and checked in linear time.

`$ref` resolves only inside the document (a registry whose retrieval refuses everything, and a
refusal at compile time of any reference that is not a local `#...` pointer or does not
resolve); `pattern`, `patternProperties` and `additionalProperties` match with RE2, whose
matching is linear in the subject, `uniqueItems` hashes instead of comparing every pair, and
the IRI formats are checked as URIs.
A pattern RE2 cannot compile (backreferences, lookaround) is refused when the schema is
compiled, and so is a schema whose references expand past the budget of foundation.schema_budget;
a validation counts its keyword checks and stops past that module's step budget or deadline.
Imports no app: the host config checks schemas before Django loads.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Iterator, Mapping
from typing import Protocol
from urllib.parse import quote

import re2
import rfc3986_validator
from jsonschema import (
    Draft3Validator,
    Draft4Validator,
    Draft6Validator,
    Draft7Validator,
    Draft201909Validator,
    Draft202012Validator,
    FormatChecker,
)
from jsonschema.exceptions import SchemaError, ValidationError, best_match
from jsonschema.protocols import Validator
from jsonschema.validators import extend, validator_for
from referencing import Registry, Resource
from referencing.exceptions import NoSuchResource, Unresolvable
from referencing.jsonschema import DRAFT202012, Schema, specification_with

from .schema_budget import MAX_VALIDATION_STEPS, VALIDATION_SECONDS, BudgetSpent, counted, expansion, metered

__all__ = [
    "MAX_SCHEMA_DEPTH",
    "compile_schema",
    "first_error",
    "first_error_off_loop",
    "schema_problem",
]

# Tool schemas are shallow (pydantic's and MCP's are a handful of levels); the bound keeps the
# metaschema check and every walk below far from Python's recursion limit.
MAX_SCHEMA_DEPTH = 64
MAX_SHOWN = 80  # characters of a reference or pattern quoted in a refusal
# Keywords whose string value names another schema: each must stay inside the document.
REFERENCE_KEYWORDS = ("$ref", "$dynamicRef", "$recursiveRef")
# Regular-expression cache: a schema's patterns are compiled once, not once per call.
PATTERN_CACHE = 1024


class _Program(Protocol):
    """A compiled RE2 pattern (the binding ships no types)."""

    def search(self, text: str, /) -> object | None: ...


class _Resolver(Protocol):
    """What the reference check uses of referencing's resolver."""

    def lookup(self, ref: str) -> object: ...

    def in_subresource(self, subresource: Resource[Schema]) -> _Resolver: ...


class _Walker(Protocol):
    """What a keyword check uses of the validator running it."""

    def is_type(self, instance: object, type: str) -> bool: ...

    def descend(
        self, instance: object, schema: object, path: str | None = None, schema_path: str | None = None
    ) -> Iterator[ValidationError]: ...


def _refuse_retrieval(uri: str) -> Resource[Schema]:
    raise NoSuchResource(ref=uri)  # type: ignore[call-arg]  # an attrs exception


# No retrieval at all: not HTTP, not file://, not the metaschemas' home (jsonschema adds the
# dialects it ships to any registry it is given).
_DOCUMENT_ONLY: Registry[Schema] = Registry(retrieve=_refuse_retrieval)  # type: ignore[call-arg]


def _options() -> re2.Options:
    options = re2.Options()
    options.log_errors = False  # a refused pattern is reported to the caller, not to stderr
    return options


@functools.lru_cache(maxsize=PATTERN_CACHE)
def _regex(pattern: str) -> _Program:
    """The RE2 program for `pattern`; raises re2.error when RE2 cannot compile it."""
    program: _Program = re2.compile(pattern, _options())
    return program


def _search(pattern: str, subject: str) -> bool:
    try:
        return _regex(pattern).search(subject) is not None
    except re2.error:  # refused when the schema compiled; a schema built around that check fails closed
        return False


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= MAX_SHOWN else text[: MAX_SHOWN - 3] + "..."


# --- keywords: the dialects' own, with RE2 and hashing --------------------------------------


def _pattern(validator: _Walker, pattern: str, instance: object, schema: object) -> Iterator[ValidationError]:
    if isinstance(instance, str) and validator.is_type(instance, "string") and not _search(pattern, instance):
        yield ValidationError(f"{_shown(instance)} does not match {pattern!r}")


def _pattern_properties(
    validator: _Walker, patterns: Mapping[str, object], instance: object, schema: object
) -> Iterator[ValidationError]:
    if not isinstance(instance, Mapping) or not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if _search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional(instance: Mapping[str, object], schema: Mapping[str, object]) -> list[str]:
    declared_properties = schema.get("properties")
    properties = declared_properties if isinstance(declared_properties, Mapping) else {}
    declared = schema.get("patternProperties")
    patterns = [str(each) for each in declared] if isinstance(declared, Mapping) else []
    return [key for key in instance if key not in properties and not any(_search(pattern, key) for pattern in patterns)]


def _additional_properties(
    validator: _Walker, allowed: object, instance: object, schema: Mapping[str, object]
) -> Iterator[ValidationError]:
    # jsonschema's own, with the patterns matched by RE2 (its version joins them for `re`)
    if not isinstance(instance, Mapping) or not validator.is_type(instance, "object"):
        return
    extras = _additional(instance, schema)
    if validator.is_type(allowed, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], allowed, path=extra)
    elif not allowed and extras:
        listed = ", ".join(repr(each) for each in sorted(extras))
        declared = schema.get("patternProperties")
        if isinstance(declared, Mapping):
            patterns = ", ".join(repr(each) for each in sorted(declared))
            yield ValidationError(
                f"{listed} {'does' if len(extras) == 1 else 'do'} not match any of the regexes: {patterns}"
            )
        else:
            verb = "was" if len(extras) == 1 else "were"
            yield ValidationError(f"Additional properties are not allowed ({listed} {verb} unexpected)")


def _canonical(value: object) -> tuple[str, object]:
    """A hashable key equal for JSON-equal values (1 and 1.0 alike, true and 1 apart)."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int | float):
        return ("number", value)
    if isinstance(value, str):
        return ("string", value)
    if isinstance(value, list | tuple):
        return ("array", tuple(_canonical(item) for item in value))
    if isinstance(value, Mapping):
        return ("object", frozenset((key, _canonical(item)) for key, item in value.items()))
    return ("other", repr(value))


def _unique_items(validator: _Walker, unique: object, instance: object, schema: object) -> Iterator[ValidationError]:
    # jsonschema compares every pair when items are objects: quadratic in a tenant's array
    if not unique or not isinstance(instance, list) or not validator.is_type(instance, "array"):
        return
    seen: set[tuple[str, object]] = set()
    for item in instance:
        key = _canonical(item)
        if key in seen:
            yield ValidationError(f"{_shown(instance)} has non-unique elements")
            return
        seen.add(key)


_KEYWORDS = {
    "pattern": _pattern,
    "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties,
    "uniqueItems": _unique_items,
}


def _linear(base: type[Validator]) -> type[Validator]:
    """`base` (one dialect) with the keywords above, each keyword check counted against the
    validation's step budget (schema_budget.metered); one class per dialect."""
    replaced = {keyword: check for keyword, check in _KEYWORDS.items() if keyword in base.VALIDATORS}
    checks = {**base.VALIDATORS, **replaced}
    cls: type[Validator] = extend(base, validators={keyword: counted(check) for keyword, check in checks.items()})
    return cls


def _is_iri(rule: str, instance: object) -> bool:
    """RFC 3987 checked as its URI mapping (RFC 3987 3.1: non-ASCII characters percent-encoded)
    by the linear RFC 3986 matcher; jsonschema's own IRI parser takes seconds on a few KiB."""
    if not isinstance(instance, str):
        return True
    mapped = "".join(character if character.isascii() else quote(character, safe="") for character in instance)
    return rfc3986_validator.validate_rfc3986(mapped, rule=rule) is not None


def _format_checker(base: type[Validator]) -> FormatChecker:
    """The dialect's own format checker (draft 3's `time` and 2020-12's differ), IRIs aside."""
    checker = FormatChecker(formats=())
    checker.checkers = dict(base.FORMAT_CHECKER.checkers)
    for name, rule in (("iri", "URI"), ("iri-reference", "URI_reference")):
        if name in checker.checkers:
            checker.checkers[name] = (functools.partial(_is_iri, rule), ())
    return checker


# each dialect jsonschema knows: its class with the keywords above, and its format checker
_DIALECTS: dict[type[Validator], tuple[type[Validator], FormatChecker]] = {
    base: (_linear(base), _format_checker(base))
    for base in (
        Draft3Validator,
        Draft4Validator,
        Draft6Validator,
        Draft7Validator,
        Draft201909Validator,
        Draft202012Validator,
    )
}


# --- the checks made when a schema is compiled --------------------------------------------------


def _nodes(value: object, where: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Mapping[object, object]]]:
    """Every JSON object in `value` with its location; refuses nesting beyond the bound."""
    stack: list[tuple[tuple[str, ...], object]] = [(where, value)]
    while stack:
        location, node = stack.pop()
        if len(location) > MAX_SCHEMA_DEPTH:
            raise SchemaError(f"the schema is nested deeper than {MAX_SCHEMA_DEPTH} levels")
        if isinstance(node, Mapping):
            yield location, node
            stack.extend((location + (str(key),), item) for key, item in node.items())
        elif isinstance(node, list):
            stack.extend((location + (str(index),), item) for index, item in enumerate(node))


def _at(location: tuple[str, ...]) -> str:
    return "/" + "/".join(location) if location else "the root"


def _check_document(schema: Mapping[str, object]) -> None:
    """Refuse what would make validation fetch, fail late or run in more than linear time.

    Every object of the document is looked at, subschema or not (an `enum` value holding a
    remote `$ref` is refused too): a reference in a place jsonschema only reaches through a
    pointer is still a reference.
    """
    keywords: set[str] = set()
    for location, node in _nodes(schema):
        keywords.update(key for key in node if isinstance(key, str))
        for keyword in REFERENCE_KEYWORDS:
            reference = node.get(keyword)
            if isinstance(reference, str) and not reference.startswith("#"):
                raise SchemaError(
                    f"{keyword} {_shown(reference)} at {_at(location)}: only references inside the schema "
                    "(#...) are allowed"
                )
        patterns: list[tuple[str, str]] = []
        pattern_value = node.get("pattern")
        if isinstance(pattern_value, str):
            patterns.append(("pattern", pattern_value))
        pattern_keys = node.get("patternProperties")
        if isinstance(pattern_keys, Mapping):
            patterns.extend(("patternProperties", pattern) for pattern in pattern_keys if isinstance(pattern, str))
        for keyword, pattern in patterns:
            try:
                _regex(pattern)
            except re2.error:
                raise SchemaError(
                    f"{keyword} {_shown(pattern)} at {_at(location)} is not supported: patterns must compile "
                    "as RE2 (no backreferences or lookaround)"
                ) from None
    if "patternProperties" in keywords and "unevaluatedProperties" in keywords:
        # jsonschema matches patternProperties with `re` when it works out unevaluated keys
        raise SchemaError("unevaluatedProperties cannot be combined with patternProperties")


def _unresolved(resolver: _Resolver, resource: Resource[Schema]) -> str:
    contents = resource.contents
    if isinstance(contents, Mapping):
        for keyword in ("$ref", "$dynamicRef"):
            reference = contents.get(keyword)
            if isinstance(reference, str):
                try:
                    resolver.lookup(reference)
                except Unresolvable:
                    return f"{keyword} {_shown(reference)} does not resolve inside the schema"
    for subresource in resource.subresources():
        problem = _unresolved(resolver.in_subresource(subresource), subresource)
        if problem:
            return problem
    return ""


def compile_schema(schema: object) -> Validator:
    """A validator for `schema` that checks `format`, resolves `$ref` only inside the document
    and matches patterns with RE2. Raises jsonschema.SchemaError (a readable `message`) when
    the schema is invalid or refused."""
    if not isinstance(schema, Mapping):
        raise SchemaError("a schema must be a JSON object")
    _check_document(schema)
    base: type[Validator] = validator_for(schema, default=Draft202012Validator)
    try:
        base.check_schema(schema)
    except SchemaError as exc:
        raise SchemaError(f"is not a valid JSON Schema: {exc.message}") from exc
    meta = base.META_SCHEMA
    specification = specification_with(meta.get("$id") or meta.get("id") or "", default=DRAFT202012)
    resource = specification.create_resource(schema)
    resolver = _DOCUMENT_ONLY.resolver_with_root(resource)
    problem = _unresolved(resolver, resource)
    if problem:
        raise SchemaError(problem)
    expansion(resolver, resource, specification)  # raises past the expansion budget
    cls, checker = _DIALECTS.get(base) or _DIALECTS[Draft202012Validator]
    validator: Validator = cls(schema, registry=_DOCUMENT_ONLY, format_checker=checker)
    return validator


def schema_problem(schema: object) -> str:
    """Why `schema` is refused by compile_schema(), or "" when it compiles."""
    try:
        compile_schema(schema)
    except SchemaError as exc:
        return str(exc.message)
    return ""


def first_error(
    validator: Validator, instance: object, *, steps: int = MAX_VALIDATION_STEPS, seconds: float = VALIDATION_SECONDS
) -> ValidationError | None:
    """The most relevant reason `instance` is invalid, or None. A value nested too deeply for
    the schema's recursion, a reference that cannot resolve, or a check past `steps` keyword
    checks or `seconds` is a reason, not an exception."""
    try:
        with metered(steps, seconds):
            return best_match(validator.iter_errors(instance))
    except BudgetSpent as exc:
        return ValidationError(exc.reason)
    except RecursionError:
        return ValidationError("the value is nested too deeply to be checked")
    except Unresolvable as exc:
        return ValidationError(f"the schema's reference {_shown(str(exc))} does not resolve inside the schema")


async def first_error_off_loop(validator: Validator, instance: object) -> ValidationError | None:
    """first_error() in a worker thread: a tenant's schema and a model's or tool's value decide
    its cost (applicators multiply, values reach 4 MiB), so it never runs on the event loop."""
    return await asyncio.to_thread(first_error, validator, instance)
