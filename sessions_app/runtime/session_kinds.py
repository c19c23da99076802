"""The kinds of the call path a loaded session brings with it: its runtime executor tools and
provider bindings (`config.bindings`) and its placed tools (`config.placement`), built from what
the session saved at create."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

from foundation.hostconfig import HostConfig
from sessions_app.records import SessionRecord
from sessions_app.storage import SessionStorage
from tools_app.bindings import CredentialSource, ProviderBindings, RuntimeTools
from tools_app.environments.kind import PlacedTools
from tools_app.executors import ExecutorHub
from tools_app.invocation import CallContext, ToolKind
from tools_app.invocation.path import Target
from tools_app.invocation.results import Invocation
from tools_app.providers.registry import ProviderRegistry
from tools_app.tool_path import ToolPath

from .session_reads import OwnSession

if TYPE_CHECKING:
    from .actor import SessionActor

__all__ = ["session_kinds"]


class KindSources(Protocol):
    """What the session's kinds are built from (the engine's)."""

    config: HostConfig
    providers: ProviderRegistry
    executors: ExecutorHub
    binding_credentials: CredentialSource
    tool_path: ToolPath
    storage: SessionStorage


def session_kinds(
    engine: KindSources, record: SessionRecord, loaded: Callable[[str], SessionActor | None]
) -> tuple[ToolKind, ...]:
    kinds: list[ToolKind] = []
    bindings = record.config.get("bindings")
    session_id = record.id
    if bindings:
        providers = ProviderBindings(
            bindings,
            engine.providers,
            schemas=engine.executors.schemas,
            descriptors=record.descriptors,
            credentials=engine.binding_credentials,
            session=OwnSession(
                lambda: actor.record if (actor := loaded(session_id)) is not None else None,
                lambda: actor.log if (actor := loaded(session_id)) is not None else None,
            ),
        )
        kinds += [RuntimeTools(bindings, engine.executors), providers]
    placement = record.config.get("placement")
    if placement:
        config_tools = engine.tool_path.config_tools

        async def service(context: CallContext, name: str) -> Target | Invocation:
            # the host-config tool a service environment maps to, authorized for this call alone
            return await config_tools.resolve(replace(context, tools=(name,)), name)

        kinds.append(
            PlacedTools(
                placement,
                environments={environment.name: environment for environment in engine.config.environments},
                hub=engine.executors,
                service=service,
                components=engine.tool_path.components,
                workspace=str(engine.storage.files(session_id).workspace),
            )
        )
    return tuple(kinds)
