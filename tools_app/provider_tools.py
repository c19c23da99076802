"""Operator tools served by installed providers (`transport: provider` in the host config's
`tools` or an admin binding): each is bound once, for every tenant it lists, when it is
configured; its description and input schema default to the provider's descriptor.

Imports no runtime or API modules.
"""

from __future__ import annotations

from collections.abc import Mapping

from jsonschema import SchemaError

from foundation.hostconfig import HostConfig, ToolBindingConfig
from foundation.tool_schemas import compile_schema

from .providers.base import ProviderConfigError, ProviderError, ToolProvider
from .providers.options import UnknownOperation
from .providers.registry import SETTING

__all__ = ["bind_provider_tool", "resolve_provider_tools"]


async def bind_provider_tool(binding: ToolBindingConfig, providers: Mapping[str, ToolProvider]) -> ToolBindingConfig:
    """The binding with its provider's descriptor filled in where it states none; ValueError
    naming the field at fault when the provider is not installed, refuses a tenant, or refuses
    the operation or parameters."""
    if not binding.provider_backed:
        return binding
    provider = providers.get(binding.provider)
    if provider is None:
        raise ValueError(f"provider: tool provider {binding.provider!r} is not installed (BRAIN_TOOL_PROVIDERS)")
    descriptor = None
    for tenant in binding.tenants:
        if not provider.authorize(tenant):
            raise ValueError(f"tenants: tool provider {binding.provider!r} is not available to tenant {tenant!r}")
        try:
            descriptors = await provider.bind(
                tenant=tenant, operations=[binding.operation], parameters=binding.parameters
            )
        except UnknownOperation as exc:
            raise ValueError(f"operation: tool provider {binding.provider!r} refused it: {exc}") from exc
        except ValueError as exc:
            raise ValueError(f"parameters: tool provider {binding.provider!r} refused them: {exc}") from exc
        except ProviderError as exc:
            raise ValueError(f"provider: tool provider {binding.provider!r} is unavailable: {exc}") from exc
        matching = [item for item in descriptors if item.get("name") == binding.operation]
        if len(matching) != 1:
            raise ValueError(f"operation: tool provider {binding.provider!r} serves no {binding.operation!r}")
        descriptor = matching[0]
    if descriptor is None:
        return binding
    update: dict[str, object] = {}
    if not binding.description:
        update["description"] = descriptor.get("description") or binding.operation
    if binding.input_schema is None:
        update["input_schema"] = descriptor.get("input_schema") or {"type": "object"}
    if binding.output_schema is None and descriptor.get("output_schema") is not None:
        update["output_schema"] = descriptor["output_schema"]
    for key in ("input_schema", "output_schema"):
        schema = update.get(key)
        if isinstance(schema, dict):
            try:
                compile_schema(schema)
            except SchemaError as exc:
                raise ValueError(
                    f"{key}: tool provider {binding.provider!r} returned a schema that is refused: {exc.message}"
                ) from exc
    return binding.model_copy(update=update) if update else binding


async def resolve_provider_tools(config: HostConfig, providers: Mapping[str, ToolProvider]) -> HostConfig:
    """The config with every provider-backed tool bound; ProviderConfigError names the tool (its
    index and name), or the approval rule, and the field at fault."""
    for name, provider in providers.items():  # first, each provider's options against this config
        try:
            provider.check_host_config(config)
        except ValueError as exc:
            raise ProviderConfigError(f"{SETTING}.{name}.options.{exc}") from exc
    for index, rule in enumerate(config.approvals):  # a rule naming no installed provider matches nothing
        missing = [name for name in rule.providers or () if name not in providers]
        if missing:
            raise ProviderConfigError(
                f"approvals[{index}].providers: tool provider {missing[0]!r} is not installed ({SETTING})"
            )
    tools: list[ToolBindingConfig] = []
    for index, binding in enumerate(config.tools):
        try:
            tools.append(await bind_provider_tool(binding, providers))
        except ValueError as exc:
            raise ProviderConfigError(f"tools[{index}].{exc} (tool {binding.name!r})") from exc
    if all(new is old for new, old in zip(tools, config.tools, strict=True)):
        return config
    return config.model_copy(update={"tools": tools})
