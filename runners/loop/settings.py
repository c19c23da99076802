"""Session settings from an `open` request: validated shape, credentials kept out of repr."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from runners.protocol import JSONObject

from .errors import BrainFailure
from .messages import ToolSpec
from .placement import Placed, parse_placement

__all__ = ["DEFAULT_INSTRUCTIONS", "SessionSettings", "parse_open_params"]

# spec (reference-models, "Prompt caching"): the system prompt when config.instructions is absent.
DEFAULT_INSTRUCTIONS = "You are a helpful assistant. Use the available tools when needed."


@dataclass(frozen=True, slots=True)
class SessionSettings:
    session_id: str
    directory: Path
    model: str
    instructions: str
    reasoning_effort: str
    tools: tuple[ToolSpec, ...]
    provider: JSONObject = field(repr=False)  # api_key, base_url?, api?
    placed: Placed = field(default_factory=Placed)  # the session's placed tools (config.placement)


def parse_open_params(params: object) -> SessionSettings:
    if not isinstance(params, dict):
        raise BrainFailure("open params must be an object")
    config = params.get("config")
    directory = params.get("dir")
    if not isinstance(config, dict) or not isinstance(config.get("model"), str):
        raise BrainFailure("open params need config.model")
    if not isinstance(directory, str) or not directory:
        raise BrainFailure("open params need dir")
    provider = params.get("provider") or {}
    if not isinstance(provider, dict):
        raise BrainFailure("open params provider must be an object")
    placed = parse_placement(config)
    return SessionSettings(
        session_id=str(params.get("session_id", "")),
        directory=Path(directory),
        model=config["model"],
        instructions=str(config.get("instructions") or DEFAULT_INSTRUCTIONS),
        reasoning_effort=str(config.get("reasoning_effort") or "off"),
        tools=tuple(map(placed.present, _tool_specs(params.get("tools") or []))),
        provider=dict(provider),
        placed=placed,
    )


def _tool_specs(descriptors: object) -> tuple[ToolSpec, ...]:
    """Every descriptor Brain sent, in its order: the session's config tools and bound tools
    (`<alias>_<name>`), which are exactly the tools the model is offered."""
    if not isinstance(descriptors, list):
        raise BrainFailure("open params tools must be a list")
    specs = []
    seen: set[str] = set()
    for descriptor in descriptors:
        if not isinstance(descriptor, dict) or not isinstance(descriptor.get("name"), str):
            raise BrainFailure("each tool needs a name")
        if descriptor["name"] in seen:
            raise BrainFailure(f"tool {descriptor['name']!r} is described twice")
        seen.add(descriptor["name"])
        schema = descriptor.get("input_schema")
        specs.append(
            ToolSpec(
                name=descriptor["name"],
                description=str(descriptor.get("description") or ""),
                input_schema=schema if isinstance(schema, dict) else {"type": "object"},
            )
        )
    return tuple(specs)
