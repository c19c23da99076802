"""The tool path of this process: the one road every call takes (tools_app.invocation.path),
with the config tools as its last kind (sent through their transports or installed providers)
and the operator's approval rules over every kind. The application object assembles it from
the catalog, the installed providers and the rules; a session's own kinds (its runtime executor
tools, its provider bindings) come with each call."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from foundation.hostconfig import EnvironmentConfig
from foundation.schema_workers import SchemaWorkers

from .environments.components import ComponentCatalog
from .environments.emits import EmitGrants
from .invocation.approvals import ApprovalPolicy
from .invocation.config_tools import ConfigTools, InspectionGrants
from .invocation.path import CallContext, ToolKind, invoke_tool
from .invocation.results import CallResult, Invocation
from .providers.registry import ProviderRegistry
from .registry import ToolRegistry
from .transports.base import Transport, Transports

__all__ = ["ToolPath", "assemble_tool_path"]


class ToolPath:
    """Runs calls: a session's kinds first, then the config tools, which answer for any other
    name; approval is asked when a config tool requires it or `approvals` match the call."""

    def __init__(
        self,
        config_tools: ConfigTools,
        *,
        approvals: ApprovalPolicy | None = None,
        components: ComponentCatalog | None = None,
    ) -> None:
        self.config_tools = config_tools
        self.approvals = approvals if approvals is not None else ApprovalPolicy()
        # the brain environments' components (none without brain environments)
        self.components = components if components is not None else ComponentCatalog(())

    async def invoke_call(
        self, context: CallContext, name: str, arguments: object, *, kinds: Sequence[ToolKind] = ()
    ) -> Invocation:
        """One call through the path. Never raises for tool failures (see invoke_tool)."""
        return await invoke_tool(context, name, arguments, kinds=(*kinds, self.config_tools), approvals=self.approvals)

    async def invoke(self, context: CallContext, name: str, arguments: object) -> CallResult:
        """invoke_call() of a config tool, without the outcome."""
        return (await self.invoke_call(context, name, arguments)).result

    async def aclose(self) -> None:
        """Close pooled connections and the config tools' schema threads (shutdown)."""
        await self.config_tools.aclose()


def assemble_tool_path(
    registry: ToolRegistry,
    *,
    providers: ProviderRegistry | None = None,
    inspections: InspectionGrants | None = None,
    approvals: ApprovalPolicy | None = None,
    public_url: str = "",
    header_timeout: float | None = None,
    transports: Mapping[str, Transport] | None = None,
    environments: Sequence[EnvironmentConfig] = (),
    emit_key: bytes | None = None,
) -> ToolPath:
    """The path over `registry`'s config tools. The header deadline defaults to
    $BRAIN_TOOL_HEADER_TIMEOUT, else 30 s; `transports` replaces transport instances by name
    (fault tests inject clients with httpx.MockTransport). The config tools' values are checked
    on a pool of the path's own. `environments`' brain components are checked now (ConfigError).
    `emit_key` seals the emit tokens of placed calls sent to services (a fleet's; else one of
    this process)."""
    config_tools = ConfigTools(
        registry.entry,
        transports=Transports(transports),
        providers=providers if providers is not None else ProviderRegistry(),
        inspections=inspections,
        header_timeout=header_timeout,
        public_url=public_url.rstrip("/"),
        schemas=SchemaWorkers(name="brain-config-schemas"),
        emits=EmitGrants(emit_key, public_url=public_url),
    )
    return ToolPath(config_tools, approvals=approvals, components=ComponentCatalog(environments))
