"""How the model sees a session's placed tools (config.placement) and how its calls name their
environment: by the session's explicit policy (ordinary tools; each call goes to the environment
the policy names) or by an environment selector (the model's input is `{environment, input}`,
unwrapped on dispatch). Never a ranking or a fallback: a call the model did not place exactly
goes to Brain as the model made it, and Brain refuses it."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from runners.protocol import JSONObject

from .errors import BrainFailure
from .messages import ToolCall, ToolSpec

__all__ = ["Placed", "parse_placement", "wrap_input"]

WRAPPER_KEYS = frozenset({"environment", "input"})  # exactly the selector's keys
# What moves from the canonical input to the wrapper's root: JSON pointers start at the root.
HOISTED_KEYS = ("$schema", "$defs", "definitions")
INPUT_POINTER = "#/properties/input"  # where the canonical input is in the wrapper
# Keywords whose values are data, not schemas: a `$ref` inside them is not a reference.
DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples"})


@dataclass(frozen=True, slots=True)
class Placed:
    environments: dict[str, tuple[str, ...]] = field(default_factory=dict)  # tool -> its environments
    selector: bool = False
    chosen: dict[str, str] = field(default_factory=dict)  # the policy's environment of each tool

    def present(self, spec: ToolSpec) -> ToolSpec:
        """The spec the model sees: with a selector, the canonical input wrapped."""
        if not self.selector or spec.name not in self.environments:
            return spec
        return replace(spec, input_schema=wrap_input(spec.input_schema, list(self.environments[spec.name])))

    def dispatch(self, call: ToolCall) -> ToolCall:
        """The call as Brain receives it: the environment named, the canonical input."""
        if call.name not in self.environments:
            return call
        if not self.selector:
            return replace(call, environment=self.chosen.get(call.name, ""))
        arguments = call.arguments
        if set(arguments) != WRAPPER_KEYS or not isinstance(arguments["environment"], str):
            return call  # not the wrapper: the model's arguments as they are, no environment
        if not isinstance(arguments["input"], dict):
            return call
        return replace(call, environment=arguments["environment"], arguments=arguments["input"])


def wrap_input(schema: JSONObject, environments: list[str]) -> JSONObject:
    """`{environment, input}` with `schema` as `input`. Its `$defs` and `definitions` (and
    `$schema`) move to the wrapper's root, where a pointer's `#` now is: a `$ref` into them stays
    as it was, any other local `$ref` (`#`, `#/properties/...`) gains `/properties/input`. A
    schema with its own `$id` is a resource of its own, its pointers resolved against it: it is
    nested unchanged."""
    if "$id" in schema:
        hoisted: JSONObject = {}
        inner: object = schema
    else:
        hoisted = {key: schema[key] for key in HOISTED_KEYS if key in schema}
        kept = tuple(f"#/{key}/" for key in hoisted if key != "$schema")
        inner = _moved_refs({key: value for key, value in schema.items() if key not in hoisted}, kept)
        hoisted = {key: value if key == "$schema" else _moved_refs(value, kept) for key, value in hoisted.items()}
    return {
        "type": "object",
        "properties": {"environment": {"type": "string", "enum": environments}, "input": inner},
        "required": ["environment", "input"],
        "additionalProperties": False,
        **hoisted,
    }


def _moved_refs(node: object, kept: tuple[str, ...]) -> object:
    """`node` with its local `$ref`s pointing where the nested schema now is (values of data
    keywords are not schemas: left alone)."""
    if isinstance(node, list):
        return [_moved_refs(item, kept) for item in node]
    if not isinstance(node, dict):
        return node
    moved: JSONObject = {}
    for key, value in node.items():
        if key == "$ref" and isinstance(value, str) and (value == "#" or value.startswith("#/")):
            moved[key] = value if value.startswith(kept) else INPUT_POINTER + value[1:]
        elif key in DATA_KEYWORDS:
            moved[key] = value
        else:
            moved[key] = _moved_refs(value, kept)
    return moved


def parse_placement(config: JSONObject) -> Placed:
    placement = config.get("placement")
    if placement is None:
        return Placed()
    if not isinstance(placement, dict):
        raise BrainFailure("config.placement must be an object")
    environments: dict[str, tuple[str, ...]] = {}
    for item in placement.get("tools") or ():
        tool = item.get("tool") if isinstance(item, dict) else None
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str) or not isinstance(item.get("env"), str):
            raise BrainFailure("config.placement.tools must be {tool: {name}, env}")
        environments[tool["name"]] = (*environments.get(tool["name"], ()), item["env"])
    presentation = placement.get("presentation") or {}
    chosen = presentation.get("choose") if isinstance(presentation, dict) else None
    return Placed(
        environments=environments,
        selector=isinstance(presentation, dict) and presentation.get("mode") == "selector",
        chosen={str(k): str(v) for k, v in chosen.items()} if isinstance(chosen, dict) else {},
    )
