"""The agent loop of one prompt: call the model, run its tool calls, repeat until it stops.

    1. resolve the model (catalog, reasoning effort, host overrides) and check the message's
       images against what the model takes → brain_error if impossible
    2. append the user text; then per generation: take queued steers, compact if the context
       nears the window, stream the model call (assistant.delta), record it (assistant.message)
       and report every model request, compaction's too, as it ends (model.request)
    3. run that generation's tool calls in parallel through Brain, record the results, go to 2
    4. stop when the model makes no tool call and no steer is waiting, or when Brain marks a
       tool result `end_turn` and no steer is waiting; commit the turn

Any exception (failure, cancellation by interrupt) discards the turn: it never enters the context.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Protocol

from runners.accounting import MODEL_REQUEST, RequestRecord, check_request_record
from runners.media import Media, refusal
from runners.protocol import DeltaData, MessageData

from . import compaction
from .catalog import ResolvedModel, media_support, resolve_model
from .errors import BrainFailure
from .messages import Generation, ModelRequest, ToolCall, ToolResult
from .metering import CURRENT_METER, RequestMeter
from .providers import ProviderPool
from .providers.base import MAX_RETRIES, Endpoint, Provider, TextSink
from .settings import SessionSettings
from .state import NativeState, OpenTurn

__all__ = ["TurnIO", "run_turn"]

# Providers that route their prompt cache by a per-session key: OpenAI's own APIs and the ChatGPT
# backend of Codex (`prompt_cache_key`), Radius (Pi's `sessionId` option) and Mistral (the
# `x-affinity` header, as Pi sends it).
_CACHE_KEY_PROVIDERS = frozenset({"openai", "azure", "openai-codex", "radius", "mistral"})


class TurnIO(Protocol):
    """How the loop talks to Brain for one turn."""

    async def emit(self, event: str, data: DeltaData | MessageData | RequestRecord) -> None: ...

    async def call_tool(self, call: ToolCall) -> ToolResult: ...

    def take_steers(self) -> list[str]: ...


async def run_turn(
    settings: SessionSettings,
    state: NativeState,
    *,
    text: str,
    media: tuple[Media, ...] = (),
    io: TurnIO,
    pool: ProviderPool,
) -> None:
    """`media`: the message's images; ones the model cannot take fail the turn before any call."""
    resolved = resolve_model(settings.model, reasoning_effort=settings.reasoning_effort, provider=settings.provider)
    reason = refusal(list(media), media_support(settings.model, settings.provider), model=settings.model)
    if reason:
        raise BrainFailure(reason)
    endpoint = Endpoint(
        transport=resolved.transport,
        base_url=resolved.base_url,
        provider=resolved.spec.provider,
        api_key=resolved.api_key,
    )
    provider = await pool.get(endpoint)
    turn = state.begin_turn()
    try:
        turn.add_user(text, media=media)
        await _loop(settings, state, turn, resolved, provider, io)
        turn.commit()
    except BaseException:
        turn.discard()
        raise


async def _loop(
    settings: SessionSettings,
    state: NativeState,
    turn: OpenTurn,
    resolved: ResolvedModel,
    provider: Provider,
    io: TurnIO,
) -> None:
    async def on_text(delta: str) -> None:
        await io.emit("assistant.delta", {"text": delta})

    while True:
        for steer in io.take_steers():
            turn.add_user(steer, steer=True)
        request = _request(settings, state, resolved)
        if compaction.needs_compaction(request, context_window=resolved.spec.context_window):
            if await _compact(state, turn, resolved, provider, io):
                request = _request(settings, state, resolved)
        generation = await _generate(provider, request, purpose="turn", resolved=resolved, io=io, on_text=on_text)
        turn.add_generation(generation)
        await io.emit("assistant.message", _message_data(generation))
        if generation.tool_calls:
            results = await _call_tools(tuple(map(settings.placed.dispatch, generation.tool_calls)), io)
            for result in results:
                turn.add_tool_result(result)
            if any(result.end_turn for result in results):
                steers = io.take_steers()
                if not steers:
                    return  # a tool showed the user something: their next message continues
                for steer in steers:  # the user answered already: a steer it took is never dropped
                    turn.add_user(steer, steer=True)
            continue
        steers = io.take_steers()
        if not steers:
            return
        for steer in steers:  # guidance that arrived during the last generation gets its own call
            turn.add_user(steer, steer=True)


def _request(settings: SessionSettings, state: NativeState, resolved: ResolvedModel) -> ModelRequest:
    return ModelRequest(
        model=resolved.spec.provider_model,
        instructions=settings.instructions,
        tools=settings.tools,
        messages=tuple(state.context()),
        reasoning_effort=resolved.reasoning_effort,
        cache_key=state.cache_key if resolved.spec.provider in _CACHE_KEY_PROVIDERS else None,
    )


async def _generate(
    provider: Provider, request: ModelRequest, *, purpose: str, resolved: ResolvedModel, io: TurnIO, on_text: TextSink
) -> Generation:
    """One model request, reported to Brain as `model.request` however it ends."""
    meter = RequestMeter(allowed_attempts=MAX_RETRIES + 1)  # every transport retries MAX_RETRIES times
    token = CURRENT_METER.set(meter)
    try:
        generation = await provider.generate(request, on_text=on_text, meter=meter)
    except asyncio.CancelledError:
        await _report(meter, io, purpose=purpose, state="interrupted", resolved=resolved, model=request.model)
        raise
    except Exception:
        await _report(meter, io, purpose=purpose, state="failed", resolved=resolved, model=request.model)
        raise
    finally:
        CURRENT_METER.reset(token)
    await _report(meter, io, purpose=purpose, state="completed", resolved=resolved, model=request.model)
    return generation


async def _report(
    meter: RequestMeter, io: TurnIO, *, purpose: str, state: str, resolved: ResolvedModel, model: str
) -> None:
    record = meter.record(purpose=purpose, state=state, provider=resolved.spec.provider, model=model)
    if record is None:
        return
    try:
        check_request_record(record)  # Brain refuses what fails here, and would fail the turn
    except ValueError as exc:
        print(f"loop: model.request not reported: {exc}", file=sys.stderr, flush=True)
        return
    await io.emit(MODEL_REQUEST, record)


async def _compact(state: NativeState, turn: OpenTurn, resolved: ResolvedModel, provider: Provider, io: TurnIO) -> bool:
    """Summarise the oldest committed turns; False when there is nothing older to summarise."""
    turns = state.compactable_turns()
    if not turns:
        return False
    window = resolved.spec.context_window
    first_kept = compaction.choose_first_kept_turn([messages for _tid, messages in turns], context_window=window)
    request = compaction.summary_request(
        model=resolved.spec.provider_model,
        summary=state.summary,
        turns=[messages for _tid, messages in turns[:first_kept]],
        context_window=window,
    )

    async def ignore_text(_text: str) -> None:
        return None  # the summary is internal: no assistant.delta for it

    generation = await _generate(provider, request, purpose="compaction", resolved=resolved, io=io, on_text=ignore_text)
    summary = generation.text.strip()
    turn.add_compaction(summary, kept_from=turns[first_kept][0] if first_kept < len(turns) else None)
    return True


async def _call_tools(calls: tuple[ToolCall, ...], io: TurnIO) -> list[ToolResult]:
    """All calls of one generation at once; cancelling the turn cancels every pending call."""
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(io.call_tool(call)) for call in calls]
    except ExceptionGroup as failures:
        raise failures.exceptions[0] from None  # the first failure ends the turn; peers are cancelled
    return [task.result() for task in tasks]


def _message_data(generation: Generation) -> MessageData:
    return {
        "text": generation.text,
        "usage": {"input": generation.usage.input, "output": generation.usage.output},
        "stop_reason": generation.stop_reason,
    }
