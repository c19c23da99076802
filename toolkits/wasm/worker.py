"""The process a component call runs in: `python -m toolkits.wasm.worker`.

It reads one request frame on stdin (`run` or `check`; a spare reads `prepare` first and loads
its component while it waits for the `run`), loads the component (cached artifact or compile),
instantiates it in a fresh store with the call's fuel, memory and epoch deadline, WASI with the
grants only, and the host interface; relays each `emit` as a frame and blocks until the
parent answers `emitted` or `refused`; and writes one `outcome` (or `checked`) frame. The parent
kills it at the deadline, on cancellation and on any protocol violation; it exits on its own
when stdin closes. Only frames go to the real stdout: fd 1 is pointed at stderr first, so
nothing a library prints can corrupt the protocol.
"""

from __future__ import annotations

import math
import os
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import orjson
import wasmtime
from wasmtime.component import Component, Linker, Variant

from toolkits.events import EVENT_KIND, KIND_RULE, MAX_EVENT_BYTES
from toolkits.wasm.engine import HOST_INTERFACE, load_component, make_engine
from toolkits.wasm.frames import FrameError, read_frame_sync, write_frame_sync
from toolkits.wasm.types import (
    GUEST_WORKSPACE,
    MAX_EMIT_TEXT_BYTES,
    MAX_OUTPUT_BYTES,
    ComponentError,
)

# The request carries the call's input and configuration JSON: generous, but bounded.
MAX_REQUEST_BYTES = 16 * 1024 * 1024
# The parent's answer to an emit is a short status line.
MAX_REPLY_BYTES = 64 * 1024
# The epoch ticks this often; the deadline is checked at this granularity inside wasm code.
EPOCH_TICK_S = 0.01
# Tables live outside linear memory (8 bytes an element): cap them too. CPython as a component
# needs tens of thousands.
MAX_TABLE_ELEMENTS = 1_000_000
# What the component writes to stderr is kept (its tail) to explain a trap; stdout is dropped.
STDERR_TAIL_BYTES = 4096
# An error line stays readable in a tool result.
MAX_ERROR_CHARS = 500
# Listing the tools at check time is tiny work: a component that needs more is broken.
CHECK_FUEL = 2_000_000_000
CHECK_MEMORY_BYTES = 512 * 1024 * 1024
CHECK_DEADLINE_S = 30.0
MAX_TOOLS = 256
MAX_TOOL_NAME_CHARS = 64


class ProtocolAbort(Exception):
    """The parent answered an emit with something else than emitted/refused, or went away."""


def one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= MAX_ERROR_CHARS else line[: MAX_ERROR_CHARS - 1] + "…"


@dataclass(slots=True)
class Channel:
    """The worker's end of the frames: requests and emit answers in, emits and outcomes out."""

    incoming: BinaryIO
    outgoing: BinaryIO
    stderr_tail: bytearray = field(default_factory=bytearray)

    def keep_stderr(self, chunk: bytes) -> None:
        self.stderr_tail += chunk
        del self.stderr_tail[:-STDERR_TAIL_BYTES]

    def stderr_text(self) -> str:
        return self.stderr_tail.decode("utf-8", "replace")

    def emit(self, kind: str, data: str) -> str | None:
        """The host import: None (ok) once the parent says the event is committed, else the
        refusal that becomes the component's `err`."""
        if not EVENT_KIND.fullmatch(kind):
            return KIND_RULE
        size = len(data.encode("utf-8", "surrogatepass"))
        if size > MAX_EMIT_TEXT_BYTES:
            return f"event data of {size} bytes exceeds {MAX_EVENT_BYTES}"
        write_frame_sync(self.outgoing, {"type": "emit", "kind": kind, "data": data})
        try:
            reply = read_frame_sync(self.incoming, limit=MAX_REPLY_BYTES)
        except FrameError as error:
            raise ProtocolAbort(str(error)) from None
        if reply["type"] == "emitted":
            return None
        if reply["type"] == "refused" and isinstance(reply.get("error"), str):
            return one_line(reply["error"])
        raise ProtocolAbort(f"unexpected answer to emit: {reply['type']!r}")


def _ticker(engine: wasmtime.Engine, stop: threading.Event) -> None:
    while not stop.wait(EPOCH_TICK_S):
        engine.increment_epoch()


def _store(
    engine: wasmtime.Engine, channel: Channel, *, request: dict[str, Any], memory: int, fuel: int
) -> wasmtime.Store:
    store = wasmtime.Store(engine)
    wasi = wasmtime.WasiConfig()  # no argv, no environment, no stdin, no network
    wasi.stdout_custom = lambda chunk: None
    wasi.stderr_custom = channel.keep_stderr
    for index, grant in enumerate(request.get("grants", [])):
        guest = GUEST_WORKSPACE if index == 0 else f"{GUEST_WORKSPACE}-{index + 1}"
        wasi.preopen_dir(str(grant["path"]), guest, grant["mode"] == "read-write")
    store.set_wasi(wasi)
    store.set_limits(memory_size=memory, table_elements=MAX_TABLE_ELEMENTS)
    store.set_fuel(fuel)
    return store


def _linker(engine: wasmtime.Engine, channel: Channel) -> Linker:
    linker = Linker(engine)
    linker.add_wasip2()
    with linker.root() as root, root.add_instance(HOST_INTERFACE) as host:
        host.add_func("emit", lambda _store, kind, data: channel.emit(kind, data))
    return linker


def describe_failure(error: Exception, channel: Channel, *, memory: int, deadline_s: float) -> tuple[str, str]:
    """(status, one readable line) for a call that trapped or failed inside wasmtime."""
    trap_code = error.trap_code if isinstance(error, wasmtime.Trap) else None
    text = str(error)
    if trap_code is wasmtime.TrapCode.OUT_OF_FUEL or "all fuel consumed" in text:
        return "error", "fuel exhausted"
    if trap_code is wasmtime.TrapCode.INTERRUPT or "interrupt" in text.split("\n")[0]:
        return "timeout", f"deadline {deadline_s:g} s passed"
    stderr = channel.stderr_text()
    if "MemoryError" in stderr or "out of memory" in text.lower() or "out of memory" in stderr.lower():
        return "error", f"memory limit {memory / (1024 * 1024):g} MiB exceeded"
    detail = text.strip().splitlines()[0] if text.strip() else type(error).__name__
    last = [line for line in stderr.splitlines() if line.strip()][-1:] or [""]
    return "error", one_line(f"component trapped: {detail}" + (f" ({last[0].strip()})" if last[0] else ""))


def _run(engine: wasmtime.Engine, component: Component, channel: Channel, request: dict[str, Any]) -> dict[str, Any]:
    limits = request["limits"]
    memory, fuel, deadline_s = int(limits["memory_bytes"]), int(limits["fuel"]), float(limits["deadline_s"])
    store = _store(engine, channel, request=request, memory=memory, fuel=fuel)
    store.set_epoch_deadline(max(1, math.ceil(float(request["remaining_s"]) / EPOCH_TICK_S)))
    try:
        instance = _linker(engine, channel).instantiate(store, component)
        call = instance.get_func(store, "call")
        if call is None:
            return {"type": "outcome", "status": "error", "error": "the component exports no call"}
        result = call(store, request["tool"], request["input"], request["config"])
    except ProtocolAbort:
        raise
    except (wasmtime.WasmtimeError, wasmtime.Trap) as error:
        status, message = describe_failure(error, channel, memory=memory, deadline_s=deadline_s)
        return {"type": "outcome", "status": status, "error": message}
    return _outcome(result)


def _outcome(result: object) -> dict[str, Any]:
    if not isinstance(result, Variant) or not isinstance(result.payload, str):
        return {"type": "outcome", "status": "error", "error": "the component's call returned no result"}
    if result.tag == "err":
        return {"type": "outcome", "status": "error", "error": one_line(result.payload) or "error"}
    encoded = result.payload.encode("utf-8", "surrogatepass")
    if len(encoded) > MAX_OUTPUT_BYTES:
        limit = MAX_OUTPUT_BYTES // 1024
        return {"type": "outcome", "status": "error", "error": f"output of {len(encoded)} bytes exceeds {limit} KiB"}
    try:
        output = orjson.loads(encoded)
    except orjson.JSONDecodeError:
        return {"type": "outcome", "status": "error", "error": "output is not JSON"}
    return {"type": "outcome", "status": "ok", "output": output}


def _check(engine: wasmtime.Engine, component: Component, channel: Channel) -> dict[str, Any]:
    store = _store(engine, channel, request={}, memory=CHECK_MEMORY_BYTES, fuel=CHECK_FUEL)
    store.set_epoch_deadline(math.ceil(CHECK_DEADLINE_S / EPOCH_TICK_S))
    try:
        instance = _linker(engine, channel).instantiate(store, component)
        tools_func = instance.get_func(store, "tools")
        tools = tools_func(store) if tools_func is not None else None
    except (wasmtime.WasmtimeError, wasmtime.Trap) as error:
        _status, message = describe_failure(error, channel, memory=CHECK_MEMORY_BYTES, deadline_s=CHECK_DEADLINE_S)
        return {"type": "outcome", "status": "error", "error": f"listing its tools failed: {message}"}
    if not isinstance(tools, list) or not all(isinstance(name, str) for name in tools):
        return {"type": "outcome", "status": "error", "error": "its tools export returned no list of names"}
    bad = [name for name in tools if not 0 < len(name) <= MAX_TOOL_NAME_CHARS]
    if bad or len(tools) > MAX_TOOLS or len(set(tools)) != len(tools):
        return {"type": "outcome", "status": "error", "error": "its tool names are empty, too long or repeated"}
    return {"type": "checked", "tools": tools}


def _load(engine: wasmtime.Engine, request: dict[str, Any]) -> Component | ComponentError:
    cache_dir = Path(request["cache_dir"]) if request.get("cache_dir") else None
    try:
        return load_component(engine, Path(request["component"]), cache_dir=cache_dir)
    except ComponentError as error:
        return error


def serve(incoming: BinaryIO, outgoing: BinaryIO) -> int:
    """Answer one request. A spare worker first gets `prepare` (its component, loaded while it
    waits), then the call's `run` for that component; end of input before the run: exit 0."""
    channel = Channel(incoming, outgoing)
    try:
        request = read_frame_sync(incoming, limit=MAX_REQUEST_BYTES)
    except FrameError:
        return 2
    engine = make_engine()
    loaded: Component | ComponentError | None = None
    if request["type"] == "prepare":
        prepared, loaded = request["component"], _load(engine, request)
        try:
            request = read_frame_sync(incoming, limit=MAX_REQUEST_BYTES)
        except FrameError:
            return 0  # never used: the server stopped it or went away
        if request["type"] != "run" or request.get("component") != prepared:
            loaded = ComponentError("the worker was prepared for another component")
    stop = threading.Event()
    threading.Thread(target=_ticker, args=(engine, stop), daemon=True).start()
    try:
        component = loaded if loaded is not None else _load(engine, request)
        if isinstance(component, ComponentError):
            raise component
        if request["type"] == "check":
            reply = _check(engine, component, channel)
        else:
            reply = _run(engine, component, channel, request)
    except ComponentError as error:
        reply = {"type": "outcome", "status": "error", "error": one_line(str(error))}
    except ProtocolAbort:
        return 3
    finally:
        stop.set()
    write_frame_sync(outgoing, reply)
    return 0


def main() -> int:
    outgoing = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything printed from here on lands on stderr, never among the frames
    sys.stdout = sys.stderr
    return serve(sys.stdin.buffer, outgoing)


if __name__ == "__main__":
    sys.exit(main())
