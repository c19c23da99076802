"""Dispatch to an installed provider: `handle` run once under its deadline, its errors turned
into outcomes, its turn effects kept with a successful result. Shared by provider-backed config
tools and provider bindings."""

from __future__ import annotations

import asyncio
import dataclasses

from jsonschema.protocols import Validator

from foundation.schema_workers import SchemaWorkers

from ..providers.base import ProviderCall, ProviderError, ToolProvider, TurnEffects
from .results import CallCancelled, Invocation, Outcome, checked_invocation, detail

__all__ = ["run_provider"]


async def run_provider(
    provider: ToolProvider,
    call: ProviderCall,
    *,
    name: str,
    output: Validator | None,
    timeout: float,
    schemas: SchemaWorkers,
) -> Invocation:
    """Run `provider.handle(call)` once under `timeout`: a ProviderError that reached the service
    is an unknown outcome, one that did not an error; cancellation once handle() started raises
    CallCancelled (it may have acted). A provider with `turn_events` gets a TurnEffects collector;
    what it recorded travels with a successful Invocation. `output` is checked on `schemas`."""
    effects = TurnEffects(provider.turn_events) if provider.turn_events else None
    if effects is not None:
        call = dataclasses.replace(call, effects=effects)
    try:
        async with asyncio.timeout(timeout) as deadline:
            raw = await provider.handle(call)
    except asyncio.CancelledError:
        raise CallCancelled(name) from None
    except TimeoutError:
        if not deadline.expired():  # the provider's own TimeoutError: it ran and failed
            return Invocation.failed(
                f"tool {name!r} failed: TimeoutError; remote outcome unknown", outcome=Outcome.UNKNOWN
            )
        return Invocation.failed(
            f"tool {name!r} timed out after {timeout:g} s; remote outcome unknown", outcome=Outcome.TIMEOUT
        )
    except ProviderError as exc:
        suffix = "; remote outcome may be unknown" if exc.reached else ""
        return Invocation.failed(
            detail(f"tool {name!r} failed: {exc}{suffix}"), outcome=Outcome.UNKNOWN if exc.reached else Outcome.ERROR
        )
    invocation = await checked_invocation(raw, output, name, schemas=schemas)
    if effects is None or invocation.outcome is not Outcome.OK:
        return invocation
    return dataclasses.replace(invocation, events=tuple(effects.events), end_turn=effects.end_turn)
