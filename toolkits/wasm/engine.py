"""Wasmtime inside the worker process: the engine's configuration, loading a component with its
compiled artifact cached by content, and checking that it is the tool world."""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import stat
import tempfile
from pathlib import Path

import wasmtime
from wasmtime.component import Component

from toolkits.wasm.types import ComponentError

__all__ = ["ALLOWED_IMPORT_PREFIXES", "HOST_INTERFACE", "load_component", "make_engine"]

# The host interface of wit/tool.wit (its package version is part of the import's name).
HOST_INTERFACE = "brain:tool/host@0.1.0"
# What a component may import: the host interface and WASI 0.2 (served with the grants only).
ALLOWED_IMPORT_PREFIXES = (HOST_INTERFACE, "wasi:")
REQUIRED_EXPORTS = ("tools", "call")
WASM_MAGIC = b"\0asm"
CORE_MODULE_VERSION = b"\x01\0\0\0"  # a component's header has version 0x0d and layer 1 instead
# A component is loaded into the worker's memory whole; CPython built as a component is ~18 MB.
MAX_COMPONENT_BYTES = 128 * 1024 * 1024
# The artifact's format belongs to the Wasmtime build and the engine settings below.
ARTIFACT_VERSION = f"wasmtime-{importlib.metadata.version('wasmtime')}-fuel-epoch-1"


def make_engine() -> wasmtime.Engine:
    config = wasmtime.Config()
    config.consume_fuel = True  # every call gets a fuel budget (ComponentLimits.fuel)
    config.epoch_interruption = True  # and a deadline checked by a ticking epoch
    return wasmtime.Engine(config)


def _private_cache_dir(cache_dir: Path) -> Path | None:
    """The cache directory when only this user can write it (a cached artifact is native code
    that deserialisation trusts), created 0700 if missing; None when it cannot be trusted."""
    try:
        cache_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = cache_dir.stat()
    except OSError:
        return None
    if info.st_uid != os.getuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return None
    return cache_dir


def _read_component_file(path: Path) -> bytes:
    try:
        with path.open("rb") as file:
            data = file.read(MAX_COMPONENT_BYTES + 1)
    except OSError as error:
        raise ComponentError(f"component {path} cannot be read: {error.strerror or error}") from None
    if len(data) > MAX_COMPONENT_BYTES:
        raise ComponentError(f"component {path} is larger than {MAX_COMPONENT_BYTES // (1024 * 1024)} MiB")
    return data


def load_component(engine: wasmtime.Engine, path: Path, *, cache_dir: Path | None) -> Component:
    """The compiled component at `path`: from the cache when its content was compiled before,
    otherwise compiled (seconds for a large one) and cached. ComponentError when it is not a
    WebAssembly component of the tool world."""
    data = _read_component_file(path)
    # Checked here: wasmtime would read bytes without the header as WebAssembly text.
    if not data.startswith(WASM_MAGIC):
        raise ComponentError(f"{path} is not a WebAssembly component: it has no WebAssembly header")
    if data[4:8] == CORE_MODULE_VERSION:
        raise ComponentError(f"{path} is not a WebAssembly component: it is a core module")
    key = hashlib.sha256(ARTIFACT_VERSION.encode() + b"\0" + data).hexdigest()
    directory = _private_cache_dir(cache_dir) if cache_dir is not None else None
    artifact = directory / f"{key}.cwasm" if directory is not None else None
    component: Component | None = None
    if artifact is not None and artifact.is_file():
        try:
            component = Component.deserialize_file(engine, str(artifact))
        except wasmtime.WasmtimeError:
            component = None  # stale or damaged: compile again and replace it
    if component is None:
        try:
            component = Component(engine, data)
        except wasmtime.WasmtimeError as error:
            first = str(error).strip().splitlines()[0] if str(error).strip() else "invalid"
            raise ComponentError(f"{path} is not a WebAssembly component: {first}") from None
        if artifact is not None:
            _store_artifact(artifact, bytes(component.serialize()))
    _check_world(engine, component, path)
    return component


def _store_artifact(artifact: Path, serialized: bytes) -> None:
    """Write atomically: a concurrent reader sees the whole artifact or none."""
    try:
        descriptor, temporary = tempfile.mkstemp(dir=artifact.parent, prefix=".partial-")
        with os.fdopen(descriptor, "wb") as file:
            file.write(serialized)
        Path(temporary).replace(artifact)
    except OSError:
        return  # a cache that cannot be written only costs the next compile


def _check_world(engine: wasmtime.Engine, component: Component, path: Path) -> None:
    component_type = component.type
    exports = component_type.exports(engine)
    missing = [name for name in REQUIRED_EXPORTS if name not in exports]
    if missing:
        raise ComponentError(f"{path} does not implement the brain:tool world: it exports no {', '.join(missing)}")
    foreign = sorted(name for name in component_type.imports(engine) if not name.startswith(ALLOWED_IMPORT_PREFIXES))
    if foreign:
        raise ComponentError(f"{path} imports {', '.join(foreign)}, which Brain does not provide")
