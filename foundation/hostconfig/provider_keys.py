"""Model keys as the runtime reads them (each provider's, and each declared `model_credentials`
entry's): from NAME, or from the file NAME_FILE names (a mounted secret), re-read when that file
changes so a rotated key reaches the next turn. No Django."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from foundation.logs import logger

from .base import ConfigError

__all__ = ["KEY_POLL_SECONDS", "ProviderKeys", "credential_fingerprint"]

# How often the key files are stat()ed: a rotation reaches idle runners within about this long,
# and a stat per file per second costs nothing measurable.
KEY_POLL_SECONDS = 1.0
MAX_KEY_FILE_BYTES = 64 * 1024  # a provider key is a line; anything larger is not one


@dataclass(frozen=True, slots=True)
class _FileState:
    """What changes when a file is rewritten in place or replaced by a rename (Kubernetes swaps
    the `..data` symlink, Docker and editors rename over the file): stat() of the path it names."""

    device: int
    inode: int
    mtime_ns: int
    size: int


def _file_state(path: str) -> _FileState | None:
    try:
        stat = Path(path).stat()  # follows symlinks: a swapped ..data link shows as a new inode
    except OSError:
        return None
    return _FileState(stat.st_dev, stat.st_ino, stat.st_mtime_ns, stat.st_size)


def _read_key_file(path: str) -> str:
    """The key a secret file holds (surrounding whitespace and the trailing newline dropped)."""
    with Path(path).open("rb") as handle:
        raw = handle.read(MAX_KEY_FILE_BYTES + 1)
    if len(raw) > MAX_KEY_FILE_BYTES:
        raise ValueError(f"larger than {MAX_KEY_FILE_BYTES} bytes")
    return raw.decode("utf-8").strip()


def credential_fingerprint(options: Mapping[str, object]) -> str:
    """A short digest of a runner's provider options (key, base_url, api): equal options give
    equal digests, and the key itself is never kept next to the attachment it opened."""
    digest = hashlib.sha256()
    for name in sorted(options):
        digest.update(f"{name}\0{options[name]}\0".encode())
    return digest.hexdigest()[:16]


class KeyDeclaration(Protocol):
    """A config entry naming the variable of a key (a provider, a declared model credential)."""

    @property
    def api_key_env(self) -> str: ...


class ProviderKeys(Mapping[str, str]):
    """The current key of each configured entry of a section (`providers` by provider name,
    `model_credentials` by reference name). An entry whose variable is set directly keeps that
    value (a process's environment cannot change from outside); one given as `NAME_FILE` follows
    the file: `poll()` re-reads it when its stat() changes."""

    def __init__(
        self, providers: Mapping[str, KeyDeclaration], environ: Mapping[str, str], *, section: str = "providers"
    ) -> None:
        self.section = section
        self._keys: dict[str, str] = {}
        self._files: dict[str, str] = {}  # entry name -> key file path
        self._states: dict[str, _FileState | None] = {}
        problems: list[str] = []
        for name, provider in providers.items():
            variable = provider.api_key_env
            where = f"{section}.{name}.api_key_env"
            value = environ.get(variable, "")
            path = environ.get(f"{variable}_FILE", "")
            if not value and path:
                state = _file_state(path)
                try:
                    value = _read_key_file(path)
                except (OSError, UnicodeDecodeError, ValueError) as exc:
                    reason = getattr(exc, "strerror", None) or exc
                    problems.append(f"{where}: cannot read {variable}_FILE: {reason}")
                    continue
                self._files[name] = path
                self._states[name] = state
            if not value:
                problems.append(
                    f"{where}: environment variable {variable} is not set"
                    + (f" ({variable}_FILE names an empty file)" if path else "")
                )
                continue
            self._keys[name] = value
        if problems:
            raise ConfigError.of(problems)

    def __getitem__(self, name: str) -> str:
        return self._keys[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def __repr__(self) -> str:
        return f"ProviderKeys({self.section}: {sorted(self._keys)}, <redacted>)"

    @property
    def _label(self) -> str:
        """What a log line calls one entry: `provider`, or `model_credential` for a reference."""
        return "provider" if self.section == "providers" else "model_credential"

    @property
    def watched(self) -> bool:
        """Whether any key comes from a file (otherwise there is nothing to poll)."""
        return bool(self._files)

    def poll(self) -> frozenset[str]:
        """Re-read the key files whose stat() changed; the providers whose key changed.

        Blocking (stat and read): call it off the event loop. A file that is missing, unreadable
        or empty keeps the key it last held, with a warning: a rotation half done (the old file
        removed before the new one lands) must not leave sessions with no key at all.
        """
        changed: set[str] = set()
        for name, path in self._files.items():
            state = _file_state(path)
            if state == self._states[name]:
                continue
            self._states[name] = state
            try:
                value = _read_key_file(path) if state is not None else ""
            except (OSError, UnicodeDecodeError, ValueError) as exc:
                logger.warning(
                    "provider key file unreadable; keeping the current key",
                    extra={self._label: name, "error": str(exc)},
                )
                continue
            if not value:
                logger.warning("provider key file missing or empty; keeping the current key", extra={self._label: name})
                continue
            if value != self._keys[name]:
                self._keys[name] = value
                changed.add(name)
        return frozenset(changed)

    async def watch(
        self, on_tick: Callable[[frozenset[str]], Awaitable[None]], *, interval: float = KEY_POLL_SECONDS
    ) -> None:
        """Until cancelled: every `interval` seconds poll the key files (in a thread), then await
        `on_tick` on the loop with the providers whose key changed (often none: a caller with
        work left over from an earlier change gets its turn to finish it)."""
        if not self._files:
            return
        while True:
            await asyncio.sleep(interval)
            changed = await asyncio.to_thread(self.poll)
            if changed:
                logger.info("provider key changed", extra={self.section: sorted(changed)})
            try:
                await on_tick(changed)
            except Exception:  # supervision boundary: keep following the keys
                logger.exception("recycling runners after a provider key change failed")
