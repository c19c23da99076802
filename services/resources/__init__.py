"""The resources tool service: `python -m services.resources` serves the web tools (and each
tool family registered below) over the external tools protocol, for operators who run tools
outside Brain; `--catalog URL --tenant T` prints their host-config entries.

Extension point: a tool family is a module with a `ToolSource` (registry.py),
`tools(environ) -> list[ServiceTool]`, building its tools from the service's environment (an
empty list when it is not configured, ValueError naming the variable at fault). It is
registered with one line in SOURCES below; the service, its catalog, authentication,
concurrency bound and deadline then serve it with nothing else to change. The storage tools
are `storage_tools.tools`, with `mutates=True` on storage_write and storage_delete (so a failure
after dispatch is an unknown outcome).
"""

from __future__ import annotations

from collections.abc import Mapping

from . import storage_tools, web_tools
from .registry import Call, ServiceTool, ToolSource

__all__ = ["SOURCES", "Call", "ServiceTool", "ToolSource", "service_tools"]

SOURCES: tuple[ToolSource, ...] = (
    web_tools.tools,
    storage_tools.tools,  # one line per tool family
)


def service_tools(environ: Mapping[str, str]) -> list[ServiceTool]:
    """Every registered family's tools, as `environ` configures them."""
    return [tool for source in SOURCES for tool in source(environ)]
