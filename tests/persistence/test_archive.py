"""The archive's object layout on a real filesystem store: blocks reused as a session grows,
new generations when a prefix changes, no readable partial checkpoint, hostile manifests."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson
import pytest

from persistence_app import archive, localstate
from persistence_app.archive import BLOCK_BYTES, LocalFile
from persistence_app.stores.base import ObjectMissing, StoreError
from persistence_app.stores.filesystem import FilesystemStore

SESSION = "a" * 32
SESSION_RECORD = {
    "id": SESSION,
    "tenant": "acme",
    "harness": "instant",
    "config": {"model": "openai/gpt-4.1-mini", "tools": []},
    "descriptors": [],
    "created_at": "2026-12-01T00:00:00.000000Z",
}
BUDGET = 1 << 30


def _read(store: FilesystemStore, checkpoint: str, *, budget: int = BUDGET) -> archive.Manifest:
    return archive.read_manifest(store, SESSION, checkpoint, max_history_bytes=budget, max_total_bytes=2 * budget)


def _native_checkpoint(size: int) -> dict[str, object]:
    files = [{"path": "state.bin", "size": size, "append_only": True}]
    return {"id": "c" * 32, "offset": 0, "time": "2026-12-01T00:00:00.000000Z", "files": files}


def _publish(store: FilesystemStore, directory: Path, uploaded: dict[str, archive.UploadedFile]) -> archive.Published:
    events, native = directory / "events.jsonl", directory / "native" / "state.bin"
    history = localstate.history_size(events)
    return archive.publish(
        store,
        checkpoint=archive.new_checkpoint_id(),
        session=dict(SESSION_RECORD),
        native_checkpoint=_native_checkpoint(native.stat().st_size),
        history_bytes=history,
        time="2026-12-01T00:00:00.000000Z",
        files=[
            LocalFile("events.jsonl", str(events), history),
            LocalFile("native/state.bin", str(native), native.stat().st_size),
        ],
        uploaded=uploaded,
    )


@pytest.fixture
def session_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "sessions" / SESSION
    (directory / "native").mkdir(parents=True)
    (directory / "events.jsonl").write_bytes(b"")
    (directory / "native" / "state.bin").write_bytes(b"")
    return directory


def _grow(directory: Path, events: int, native: int) -> None:
    with (directory / "events.jsonl").open("ab") as handle:
        line = b'{"x":"' + b"e" * 90 + b'"}\n'
        handle.write(line * (events // len(line)))
    with (directory / "native" / "state.bin").open("ab") as handle:
        handle.write(os.urandom(native))


def test_later_checkpoints_upload_only_new_bytes_plus_a_tail(tmp_path: Path, session_dir: Path) -> None:
    store = FilesystemStore(tmp_path / "archive")
    uploaded: dict[str, archive.UploadedFile] = {}
    sent = []
    for _ in range(6):
        before = sum(p.stat().st_size for p in (session_dir / "events.jsonl", session_dir / "native" / "state.bin"))
        _grow(session_dir, events=300_000, native=200_000)
        after = sum(p.stat().st_size for p in (session_dir / "events.jsonl", session_dir / "native" / "state.bin"))
        published = _publish(store, session_dir, uploaded)
        uploaded = published.uploaded
        sent.append((published.bytes_sent, after - before))
    for bytes_sent, new_bytes in sent[1:]:
        # the new bytes, less than a block's worth sent again per file (both grew), the manifest
        assert bytes_sent <= new_bytes + 2 * BLOCK_BYTES + 4096
    generations = {name: state["generation"] for name, state in uploaded.items()}
    assert len(set(generations.values())) == 2


def test_a_checkpoint_reads_back_byte_for_byte(tmp_path: Path, session_dir: Path) -> None:
    store = FilesystemStore(tmp_path / "archive")
    _grow(session_dir, events=200_000, native=150_001)
    published = _publish(store, session_dir, {})
    manifest = _read(store, published.manifest["checkpoint"])
    target = tmp_path / "restored"
    localstate.materialize(store, manifest, target)
    for name in ("events.jsonl", "native/state.bin"):
        assert (target / name).read_bytes() == (session_dir / name).read_bytes()
    journal = (target / "checkpoints.jsonl").read_bytes().splitlines()
    assert [orjson.loads(line)["id"] for line in journal] == ["c" * 32]
    assert localstate.read_uploaded(target)["files"] == {}  # type: ignore[index]


def test_a_changed_prefix_starts_a_new_generation(tmp_path: Path, session_dir: Path) -> None:
    store = FilesystemStore(tmp_path / "archive")
    _grow(session_dir, events=0, native=3 * BLOCK_BYTES)
    first = _publish(store, session_dir, {})
    # when: the native file is rewritten with other bytes of the same size
    (session_dir / "native" / "state.bin").write_bytes(os.urandom(3 * BLOCK_BYTES))
    second = _publish(store, session_dir, first.uploaded)
    # then
    assert second.uploaded["native/state.bin"]["generation"] != first.uploaded["native/state.bin"]["generation"]
    manifest = _read(store, second.manifest["checkpoint"])
    restored = b"".join(archive.read_file(store, SESSION, manifest["files"]["native/state.bin"]))
    assert restored == (session_dir / "native" / "state.bin").read_bytes()


class FailingStore(FilesystemStore):
    def __init__(self, directory: Path, fail_after: int) -> None:
        super().__init__(directory)
        self.fail_after = fail_after

    def put(self, key: str, data: bytes, *, immutable: bool) -> None:
        if self.fail_after == 0:
            raise StoreError("connection reset", retryable=True)
        self.fail_after -= 1
        super().put(key, data, immutable=immutable)


def test_a_failed_upload_never_leaves_a_readable_checkpoint(tmp_path: Path, session_dir: Path) -> None:
    _grow(session_dir, events=200_000, native=200_000)
    for fail_after in range(8):
        store = FailingStore(tmp_path / f"archive{fail_after}", fail_after)
        checkpoint = archive.new_checkpoint_id()
        with pytest.raises(StoreError):
            events, native = session_dir / "events.jsonl", session_dir / "native" / "state.bin"
            archive.publish(
                store,
                checkpoint=checkpoint,
                session=dict(SESSION_RECORD),
                native_checkpoint=_native_checkpoint(native.stat().st_size),
                history_bytes=events.stat().st_size,
                time="2026-12-01T00:00:00.000000Z",
                files=[
                    LocalFile("events.jsonl", str(events), events.stat().st_size),
                    LocalFile("native/state.bin", str(native), native.stat().st_size),
                ],
                uploaded={},
            )
        with pytest.raises(ObjectMissing):
            _read(store, checkpoint)


def _two_tails(m: dict[str, Any]) -> None:
    """events.jsonl as two tail segments of one checkpoint: the same object named twice."""
    entry = m["files"]["events.jsonl"]
    (key, size), whole = entry["tail"][0], entry["blocks"] * BLOCK_BYTES
    entry.update(size=whole + 2 * size, tail=[[key, size], [key, size]])
    m["history_bytes"] = entry["size"]


def _shared_generation(m: dict[str, Any]) -> None:
    """A second native file reusing the first one's blocks: its bytes would be written twice."""
    entry = dict(m["files"]["native/state.bin"])
    m["files"]["native/copy.bin"] = entry
    m["native_checkpoint"]["files"].append({"path": "copy.bin", "size": entry["size"], "append_only": True})


def _rename(old: str, new: str) -> Any:
    def tamper(m: dict[str, Any]) -> None:
        m["files"][new] = m["files"].pop(old)
        path = new.removeprefix("native/")
        m["native_checkpoint"]["files"] = [{"path": path, "size": m["files"][new]["size"], "append_only": True}]

    return tamper


def _nested(m: dict[str, Any]) -> None:
    """native/state.bin as a file and as the directory of native/state.bin/inner."""
    _shared_generation(m)
    m["files"]["native/state.bin/inner"] = m["files"].pop("native/copy.bin")
    m["files"]["native/state.bin/inner"]["generation"] = "d" * 32
    m["files"]["native/state.bin/inner"]["tail"] = []
    m["files"]["native/state.bin/inner"]["blocks"] = 0
    m["files"]["native/state.bin/inner"]["size"] = 0
    m["native_checkpoint"]["files"][1] = {"path": "state.bin/inner", "size": 0, "append_only": True}


TAMPERED = {
    "parent_segment": lambda m: m["files"].update({"native/../escape": m["files"].pop("native/state.bin")}),
    "blocks_beyond_size": lambda m: m["files"]["events.jsonl"].update({"blocks": 99}),
    "tail_of_another_session": lambda m: m["files"]["events.jsonl"].update({"tail": "sessions/other/tails/x/y"}),
    "other_session": lambda m: m["session"].update({"id": "b" * 32}),
    "resume_beyond_history": lambda m: m.update({"resume_offset": 10**12}),
    "unknown_version": lambda m: m.update({"version": 2}),
    "no_native_checkpoint": lambda m: m.pop("native_checkpoint"),
    "repeated_tail_segment": _two_tails,
    "shared_generation": _shared_generation,
    "nul_in_name": _rename("native/state.bin", "native/sta\x00te.bin"),
    "absolute_name": _rename("native/state.bin", "native//etc/passwd"),
    "name_part_too_long": _rename("native/state.bin", "native/" + "x" * 256),
    "file_and_directory": _nested,
    "nul_in_tenant": lambda m: m["session"].update({"tenant": "ac\x00me"}),
    "time_not_a_string": lambda m: m.update({"time": 12}),
    "time_not_a_time": lambda m: m.update({"time": "yesterday"}),
    "offset_not_an_integer": lambda m: m["native_checkpoint"].update({"offset": "0"}),
    "config_without_model": lambda m: m["session"].update({"config": {"tools": []}}),
    "descriptors_not_a_list": lambda m: m["session"].update({"descriptors": "all"}),
    "sizes_unlike_its_journal": lambda m: m["native_checkpoint"]["files"][0].update({"size": 1}),
    "segment_over_the_object_limit": lambda m: m["files"]["events.jsonl"]["tail"][0].__setitem__(1, 3 << 20),
    "unexpected_field": lambda m: m.update({"extra": True}),
}


@pytest.mark.parametrize("tamper", list(TAMPERED.values()), ids=[f"{name}_case" for name in TAMPERED])
def test_a_tampered_manifest_is_refused(tmp_path: Path, session_dir: Path, tamper: Any) -> None:
    store = FilesystemStore(tmp_path / "archive")
    _grow(session_dir, events=100_000, native=70_000)
    published = _publish(store, session_dir, {})
    manifest = orjson.loads(orjson.dumps(published.manifest))
    tamper(manifest)
    checkpoint = archive.new_checkpoint_id()
    manifest["checkpoint"] = checkpoint
    store.put(archive.checkpoint_key(SESSION, checkpoint), orjson.dumps(manifest), immutable=True)
    with pytest.raises(archive.InvalidManifest) as refused:
        _read(store, checkpoint)
    assert "\x00" not in str(refused.value) and str(tmp_path) not in str(refused.value)


def test_a_manifest_over_the_servers_budget_is_refused(tmp_path: Path, session_dir: Path) -> None:
    store = FilesystemStore(tmp_path / "archive")
    _grow(session_dir, events=100_000, native=70_000)
    checkpoint = _publish(store, session_dir, {}).manifest["checkpoint"]
    history = localstate.history_size(session_dir / "events.jsonl")
    native = (session_dir / "native" / "state.bin").stat().st_size
    # the log alone over the history budget
    with pytest.raises(archive.InvalidManifest, match=f"its event log has {history} bytes"):
        archive.read_manifest(store, SESSION, checkpoint, max_history_bytes=history - 1, max_total_bytes=BUDGET)
    # every file together over the total budget
    with pytest.raises(archive.InvalidManifest, match=f"its files hold {history + native} bytes"):
        archive.read_manifest(store, SESSION, checkpoint, max_history_bytes=history, max_total_bytes=history)
    # exactly at both budgets it reads
    exact = archive.read_manifest(
        store, SESSION, checkpoint, max_history_bytes=history, max_total_bytes=history + native
    )
    assert exact["checkpoint"] == checkpoint


def test_history_is_cut_at_the_last_whole_line(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    events.write_bytes(b'{"a":1}\n{"b":2}\n{"c":')
    assert localstate.history_size(events) == 16
    events.write_bytes(b"")
    assert localstate.history_size(events) == 0
