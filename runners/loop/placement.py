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

__all__ = ["Placed", "parse_placement"]


@dataclass(frozen=True, slots=True)
class Placed:
    environments: dict[str, tuple[str, ...]] = field(default_factory=dict)  # tool -> its environments
    selector: bool = False
    chosen: dict[str, str] = field(default_factory=dict)  # the policy's environment of each tool

    def present(self, spec: ToolSpec) -> ToolSpec:
        """The spec the model sees: with a selector, the canonical input wrapped."""
        if not self.selector or spec.name not in self.environments:
            return spec
        wrapped: JSONObject = {
            "type": "object",
            "properties": {
                "environment": {"type": "string", "enum": list(self.environments[spec.name])},
                "input": spec.input_schema,
            },
            "required": ["environment", "input"],
            "additionalProperties": False,
        }
        return replace(spec, input_schema=wrapped)

    def dispatch(self, call: ToolCall) -> ToolCall:
        """The call as Brain receives it: the environment named, the canonical input."""
        if call.name not in self.environments:
            return call
        if not self.selector:
            return replace(call, environment=self.chosen.get(call.name, ""))
        environment = call.arguments.get("environment")
        given = call.arguments.get("input")
        return replace(
            call,
            environment=environment if isinstance(environment, str) else "",
            arguments=given if isinstance(given, dict) else {},
        )


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
