"""The checkpoint manifest's format: its version and limits, and the field-by-field check a
manifest read back from the archive must pass before anything is written (archive.read_manifest).
Problems are named in words that name no server path or host. No I/O."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from foundation.rfc3339 import TIME_FORMAT
from persistence_app.stores.base import MAX_OBJECT_BYTES
from runners.protocol import FrameError, validate_native_files
from sessions_app.records import model_credential_source
from sessions_app.storage import EVENT_LOG

__all__ = [
    "BLOCK_BYTES",
    "MANIFEST_VERSION",
    "MAX_FILES",
    "MAX_TAIL_SEGMENTS",
    "ManifestProblem",
    "check_manifest",
    "is_hex_id",
]

BLOCK_BYTES = 64 << 10
MANIFEST_VERSION = 1
MAX_FILES = 129  # events.jsonl and up to 128 native files
MAX_NAME_BYTES = 1024  # a native file's relative path, in UTF-8
MAX_NAME_PART_BYTES = 255  # one path component (NAME_MAX): longer names cannot be written
MAX_ID_CHARS = 128  # tenant, harness and parent call ids in a manifest's session fields
MAX_TAIL_SEGMENTS = 16  # past this, a checkpoint uploads its file's tail again as one segment


def is_hex_id(value: object) -> bool:
    return isinstance(value, str) and len(value) == 32 and all(c in "0123456789abcdef" for c in value)


class ManifestProblem(Exception):
    """What is wrong with a manifest, in words that name no server path."""


def check_manifest(
    value: object, session_id: str, checkpoint: str, max_history_bytes: int, max_total_bytes: int
) -> None:
    if not isinstance(value, dict) or value.get("version") != MANIFEST_VERSION:
        raise ManifestProblem("unknown version")
    expected = {"version", "checkpoint", "session", "native_checkpoint", "resume_offset", "history_bytes", "time"}
    expected |= {"files", "credentials"}
    if not value.keys() <= expected or not (expected - {"credentials"}) <= value.keys():
        raise ManifestProblem("unexpected or missing fields")
    _refuse_nul(value, depth=0)
    if value["checkpoint"] != checkpoint:
        raise ManifestProblem("it names another checkpoint")
    _check_session(value["session"], session_id)
    if not _is_time(value["time"]):
        raise ManifestProblem("time is not an RFC 3339 UTC time")
    if not isinstance(value.get("credentials", []), list):
        raise ManifestProblem("credentials is not a list")
    files = value["files"]
    if not isinstance(files, dict) or EVENT_LOG not in files or len(files) > MAX_FILES:
        raise ManifestProblem(f"files must name events.jsonl and at most {MAX_FILES - 1} native files")
    generations: set[str] = set()
    tail_keys: set[str] = set()
    total = 0
    for name, entry in files.items():
        _check_name(name)
        _check_entry(session_id, name, entry, generations, tail_keys)
        total += entry["size"]
    _check_nesting(files)
    history = files[EVENT_LOG]["size"]
    if history > max_history_bytes:
        raise ManifestProblem(f"its event log has {history} bytes, more than this server's {max_history_bytes}")
    if total > max_total_bytes:
        raise ManifestProblem(f"its files hold {total} bytes, more than this server's {max_total_bytes}")
    history_bytes, resume_offset = value["history_bytes"], value["resume_offset"]
    if not (_is_count(history_bytes) and history_bytes == history):
        raise ManifestProblem("history_bytes does not match its event log")
    if not (_is_count(resume_offset) and resume_offset <= history_bytes):
        raise ManifestProblem("resume_offset is outside its event log")
    _check_native_checkpoint(value["native_checkpoint"], files, resume_offset)


def _refuse_nul(value: object, *, depth: int) -> None:
    """No string (key or value) holds NUL: no file name, database text or JSON column takes one.
    Depth is bounded by the JSON decoder; the manifest by MAX_OBJECT_BYTES."""
    if isinstance(value, str):
        if "\x00" in value:
            raise ManifestProblem("a string holds a NUL character")
    elif isinstance(value, dict):
        for key, item in value.items():
            _refuse_nul(key, depth=depth + 1)
            _refuse_nul(item, depth=depth + 1)
    elif isinstance(value, list):
        for item in value:
            _refuse_nul(item, depth=depth + 1)


def _check_session(session: object, session_id: str) -> None:
    if not isinstance(session, dict) or session.get("id") != session_id:
        raise ManifestProblem("session does not name this session")
    for field in ("tenant", "harness"):
        text = session.get(field)
        if not isinstance(text, str) or not 0 < len(text) <= MAX_ID_CHARS:
            raise ManifestProblem(f"session.{field} is not a name")
    config = session.get("config")
    if not isinstance(config, dict) or not isinstance(config.get("model"), str):
        raise ManifestProblem("session.config is not a session config")
    tools = config.get("tools", [])
    if not isinstance(tools, list) or not all(isinstance(tool, str) for tool in tools):
        raise ManifestProblem("session.config.tools is not a list of names")
    descriptors = session.get("descriptors", [])
    if not isinstance(descriptors, list) or not all(isinstance(item, dict) for item in descriptors):
        raise ManifestProblem("session.descriptors is not a list of tools")
    if not isinstance(session.get("created_at"), str):
        raise ManifestProblem("session.created_at is not a time")
    bindings = session.get("credential_bindings", [])
    if not isinstance(bindings, list) or not all(isinstance(alias, str) for alias in bindings):
        raise ManifestProblem("session.credential_bindings is not a list of names")
    for field in ("parent_session", "parent_call", "status"):
        text = session.get(field, "")
        if not isinstance(text, str) or len(text) > MAX_ID_CHARS:
            raise ManifestProblem(f"session.{field} is not a name")
    depth = session.get("depth", 0)
    if not _is_count(depth):
        raise ManifestProblem("session.depth is not a count")
    try:
        model_credential_source(session.get("model_credential"))
    except ValueError:
        raise ManifestProblem("session.model_credential is not a key source a server writes") from None


def _check_name(name: str) -> None:
    """events.jsonl, or native/ and a relative, normalised path that can be a file name."""
    if name == EVENT_LOG:
        return
    relative = name.removeprefix("native/")
    if relative == name or not relative or relative.startswith("/") or "\\" in relative:
        raise ManifestProblem(f"file {name[:80]!r} is not events.jsonl or a relative native/ path")
    parts = relative.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise ManifestProblem(f"file {name[:80]!r} is not a normalised path")
    encoded = [part.encode("utf-8", "surrogatepass") for part in parts]
    if sum(len(part) + 1 for part in encoded) > MAX_NAME_BYTES or any(len(p) > MAX_NAME_PART_BYTES for p in encoded):
        raise ManifestProblem(f"file {name[:80]!r} has a name too long to write")


def _check_nesting(files: dict[str, Any]) -> None:
    """No file is also a directory of another (native/a and native/a/b cannot both be written)."""
    directories = {name.rsplit("/", 1)[0] for name in files if name.count("/") > 1}
    for name in list(directories):
        while name.count("/") > 1:
            name = name.rsplit("/", 1)[0]
            directories.add(name)
    clash = next((name for name in files if name in directories), None)
    if clash is not None:
        raise ManifestProblem(f"file {clash[:80]!r} is also a directory of another file")


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_time(value: object) -> bool:
    if not isinstance(value, str) or len(value) > 40:
        return False
    try:
        datetime.strptime(value, TIME_FORMAT)
    except ValueError:
        return False
    return True


def _check_native_checkpoint(native: object, files: dict[str, Any], resume_offset: int) -> None:
    """The checkpoints.jsonl entry a restore writes back: as the runtime records it, naming the
    manifest's native files with their sizes, at the manifest's resume offset."""
    if not isinstance(native, dict) or native.keys() - {"covered_seq"} != {"id", "offset", "time", "files"}:
        raise ManifestProblem("native_checkpoint is not a checkpoint entry")
    # a fleet's input journal seq the checkpoint covers: optional, absent = 0
    if "covered_seq" in native and not _is_count(native["covered_seq"]):
        raise ManifestProblem("native_checkpoint.covered_seq is not a count")
    if not is_hex_id(native["id"]) or not _is_time(native["time"]) or native["offset"] != resume_offset:
        raise ManifestProblem("native_checkpoint is not a checkpoint entry")
    if not _is_count(native["offset"]):
        raise ManifestProblem("native_checkpoint is not a checkpoint entry")
    try:
        listed = validate_native_files(native["files"])
    except FrameError as exc:
        raise ManifestProblem(f"native_checkpoint: {str(exc)[:200]}") from None
    if not all(item["append_only"] for item in listed):
        raise ManifestProblem("native_checkpoint lists a file that is not append-only")
    named = {f"native/{item['path']}": item["size"] for item in listed}
    actual = {name: entry["size"] for name, entry in files.items() if name != EVENT_LOG}
    if named != actual:
        raise ManifestProblem("its files do not match its native checkpoint")


_TAIL_KEY = re.compile(r"^sessions/([0-9a-f]{32})/tails/[0-9a-f]{32}/([0-9a-f]{32})$")


def _check_entry(session_id: str, name: str, entry: object, generations: set[str], tail_keys: set[str]) -> None:
    """One file: whole blocks of a generation no other file uses, then tail segments of that
    generation, each a distinct object of at most MAX_OBJECT_BYTES, adding up to its size."""
    problem = f"file {name[:80]!r}"
    if not isinstance(entry, dict) or entry.keys() != {"generation", "size", "blocks", "tail"}:
        raise ManifestProblem(f"{problem} is not a file entry")
    size, blocks, generation, tail = entry["size"], entry["blocks"], entry["generation"], entry["tail"]
    if not (_is_count(size) and _is_count(blocks) and is_hex_id(generation)):
        raise ManifestProblem(f"{problem} is not a file entry")
    if generation in generations:
        raise ManifestProblem(f"{problem} shares its blocks with another file")
    generations.add(generation)
    if blocks * BLOCK_BYTES > size or not isinstance(tail, list) or len(tail) > MAX_TAIL_SEGMENTS:
        raise ManifestProblem(f"{problem} does not add up")
    total = 0
    for segment in tail:
        if not (isinstance(segment, list) and len(segment) == 2):
            raise ManifestProblem(f"{problem} has a malformed tail segment")
        key, segment_size = segment
        match = _TAIL_KEY.match(key) if isinstance(key, str) else None
        if match is None or match.group(1) != session_id or match.group(2) != generation:
            raise ManifestProblem(f"{problem} has a tail segment of another file")
        if not _is_count(segment_size) or not 0 < segment_size <= MAX_OBJECT_BYTES:
            raise ManifestProblem(f"{problem} has a tail segment of an impossible size")
        if key in tail_keys:
            raise ManifestProblem(f"{problem} names a tail segment twice")
        tail_keys.add(key)
        total += segment_size
    if total != size - blocks * BLOCK_BYTES:
        raise ManifestProblem(f"{problem} does not add up")
