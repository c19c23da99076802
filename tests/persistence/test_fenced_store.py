"""Fenced writes of `latest` against each store (a directory, moto's S3 API, fake-gcs-server):
a write carrying an older lease epoch than the stored object's is refused and `latest` never
goes back; a writer that read the object before a successor replaced it is refused by the
server's own precondition (S3 If-Match, GCS if_generation_match), not by luck."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import orjson
import pytest

from persistence_app.stores import gcs, s3
from persistence_app.stores.base import Fenced, StoreError, recorded_epoch
from tests.persistence import test_store_contract as contract
from tests.persistence.test_store_contract import Backend

# the store contract's fixtures: a fresh directory, moto bucket or fake-gcs-server bucket
backend = contract.backend
network_backend = contract.network_backend
s3_environment = contract.s3_environment

KEY = "sessions/abc/latest"


def pointer(checkpoint: str, epoch: int) -> bytes:
    return orjson.dumps({"checkpoint": checkpoint, "time": "2025-01-01T00:00:00Z", "epoch": epoch})


def test_a_stale_epoch_is_refused_and_latest_never_goes_back(backend: Backend) -> None:
    # given: the successor (epoch 3) published
    store = backend.store()
    store.put_fenced(KEY, pointer("c1", 2), epoch=2)
    store.put_fenced(KEY, pointer("c2", 3), epoch=3)
    # when: the former owner (epoch 2) publishes late
    with pytest.raises(Fenced) as refused:
        store.put_fenced(KEY, pointer("c-stale", 2), epoch=2)
    # then
    assert (refused.value.stored, refused.value.epoch, refused.value.retryable) == (3, 2, False)
    assert refused.value.reason == "another instance owns the session now"
    assert store.get(KEY) == pointer("c2", 3)


def test_the_same_or_a_newer_epoch_replaces_and_one_instance_writes_as_before(backend: Backend) -> None:
    # given: a single instance's unfenced latest
    store = backend.store()
    store.put(KEY, b'{"checkpoint":"c0","time":"t"}', immutable=False)
    # when
    store.put_fenced(KEY, b'{"checkpoint":"c1","time":"t"}', epoch=0)
    store.put_fenced(KEY, pointer("c2", 1), epoch=1)
    store.put_fenced(KEY, pointer("c3", 1), epoch=1)
    store.put_fenced(KEY, pointer("c4", 5), epoch=5)
    # then
    assert store.get(KEY) == pointer("c4", 5)
    with pytest.raises(Fenced):
        store.put_fenced(KEY, b'{"checkpoint":"c5","time":"t"}', epoch=0)  # a fleet wrote it: no going back
    assert store.get(KEY) == pointer("c4", 5)


def test_a_pointer_that_does_not_record_its_epoch_is_refused_before_any_io(backend: Backend) -> None:
    store = backend.store()
    with pytest.raises(StoreError) as refused:
        store.put_fenced(KEY, pointer("c1", 1), epoch=2)
    assert refused.value.retryable is False
    assert not isinstance(refused.value, Fenced)
    with pytest.raises(StoreError):
        store.get(KEY)


def test_racing_owners_leave_the_highest_epoch(backend: Backend) -> None:
    # given: eight writers of increasing epochs, each on its own store (own connection or fd)
    stores = [backend.store() for _ in range(8)]
    start = threading.Barrier(len(stores))
    outcomes: dict[int, str] = {}

    def publish(epoch: int) -> None:
        start.wait()
        try:
            stores[epoch - 1].put_fenced(KEY, pointer(f"c{epoch}", epoch), epoch=epoch)
            outcomes[epoch] = "written"
        except Fenced:
            outcomes[epoch] = "fenced"

    threads = [threading.Thread(target=publish, args=(epoch,)) for epoch in range(1, 9)]
    # when
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # then: the highest always lands; whatever was refused was refused as fenced
    assert outcomes[8] == "written"
    assert set(outcomes.values()) <= {"written", "fenced"} and len(outcomes) == 8
    assert stores[0].get(KEY) == pointer("c8", 8)


def test_a_writer_overtaken_between_its_read_and_its_write_is_refused_by_the_server(
    network_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given: the former owner (epoch 1) reads latest at epoch 1; before it writes, the successor
    # (epoch 2) replaces it. The write conditional on the version read must fail at the server.
    old, successor = network_backend.store(), network_backend.store()
    old.put_fenced(KEY, pointer("c1", 1), epoch=1)
    module = s3 if network_backend.provider in ("s3", "r2") else gcs
    original = module.write_fenced
    conditional_writes: list[bool] = []

    def interleaved(key: str, data: bytes, epoch: int, *, read: Any, write: Any) -> None:
        if data == pointer("c2", 2):  # the successor's own write goes straight through
            original(key, data, epoch, read=read, write=write)
            return
        overtaken = False

        def read_then_overtaken() -> Any:
            nonlocal overtaken
            current = read()
            if not overtaken:
                overtaken = True
                successor.put_fenced(KEY, pointer("c2", 2), epoch=2)
            return current

        def recorded_write(version: Any) -> bool:
            conditional_writes.append(written := write(version))
            return written

        original(key, data, epoch, read=read_then_overtaken, write=recorded_write)

    monkeypatch.setattr(module, "write_fenced", interleaved)
    # when
    with pytest.raises(Fenced):
        old.put_fenced(KEY, pointer("c1-late", 1), epoch=1)
    # then: the server refused the stale version once, and the re-read saw the successor
    assert conditional_writes == [False]
    assert old.get(KEY) == pointer("c2", 2)
    assert recorded_epoch(old.get(KEY)) == 2


def test_the_filesystem_lock_file_sits_beside_the_object(tmp_path: Path) -> None:
    # given: the filesystem store alone (the object stores keep no lock file)
    backend = Backend("filesystem", {"provider": "filesystem", "directory": str(tmp_path / "archive")}, {})
    store = backend.store()
    # when
    try:
        store.put_fenced(KEY, pointer("c1", 1), epoch=1)
    finally:
        backend.close()
    # then
    directory = tmp_path / "archive" / "sessions" / "abc"
    assert sorted(path.name for path in directory.iterdir()) == [".lock-latest", "latest"]
