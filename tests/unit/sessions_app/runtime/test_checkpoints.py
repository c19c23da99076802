"""checkpoints.jsonl and native/: recording what the harness reports, restoring it exactly."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from sessions_app.runtime.checkpoints import CheckpointError, CheckpointStore

TIME = "2026-10-15T12:00:00.000000Z"


def _store(tmp_path: Path, files: dict[str, bytes] | None = None) -> CheckpointStore:
    store = CheckpointStore(tmp_path / "session")
    store.native.mkdir(parents=True)
    for relative, content in (files or {}).items():
        path = store.native / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    return store


def _native_tree(store: CheckpointStore) -> dict[str, bytes]:
    return {
        path.relative_to(store.native).as_posix(): path.read_bytes()
        for path in sorted(store.native.rglob("*"))
        if path.is_file()
    }


def _journal_lines(store: CheckpointStore) -> list[dict[str, Any]]:
    journal = store.directory / "checkpoints.jsonl"
    if not journal.exists():
        return []
    return [json.loads(line) for line in journal.read_bytes().splitlines()]


# --- record ---------------------------------------------------------------------------------


def test_record_appends_the_checkpoint_to_the_journal(tmp_path: Path) -> None:
    # given
    store = _store(tmp_path, {"conversation.jsonl": b"line\n", "state/meta.json": b"{}"})
    reported = [
        {"path": "conversation.jsonl", "size": 5, "append_only": True},
        {"path": "state/meta.json", "size": 2, "append_only": False},
    ]

    # when
    entry = store.record("c1", offset=256, time=TIME, reported=reported)

    # then
    assert entry == {"id": "c1", "offset": 256, "time": TIME, "files": reported}
    assert _journal_lines(store) == [entry]
    assert store.last() == entry


def test_record_of_no_files_is_a_valid_checkpoint(tmp_path: Path) -> None:
    # given
    store = _store(tmp_path)

    # when
    entry = store.record("c0", offset=0, time=TIME, reported=[])

    # then
    assert entry == {"id": "c0", "offset": 0, "time": TIME, "files": []}
    assert store.last() == entry


def test_record_defaults_append_only_to_false(tmp_path: Path) -> None:
    # given
    store = _store(tmp_path, {"a.json": b"{}"})

    # when
    entry = store.record("c1", offset=0, time=TIME, reported=[{"path": "a.json", "size": 2}])

    # then
    assert entry["files"] == [{"path": "a.json", "size": 2, "append_only": False}]


def test_record_snapshots_files_that_are_not_append_only(tmp_path: Path) -> None:
    # given
    store = _store(tmp_path, {"log.jsonl": b"a\n", "state/meta.json": b'{"v":1}'})
    reported = [
        {"path": "log.jsonl", "size": 2, "append_only": True},
        {"path": "state/meta.json", "size": 7, "append_only": False},
    ]

    # when
    store.record("c1", offset=0, time=TIME, reported=reported)

    # then
    snapshots = store.directory / "snapshots" / "c1"
    assert {path.relative_to(snapshots).as_posix() for path in snapshots.rglob("*") if path.is_file()} == {
        "state/meta.json"
    }
    assert (snapshots / "state" / "meta.json").read_bytes() == b'{"v":1}'


INVALID_PATHS = [
    pytest.param("/etc/passwd", "checkpoint path '/etc/passwd' must be relative", id="absolute_case"),
    pytest.param("", "checkpoint path '' must be relative", id="empty_case"),
    pytest.param("a\\b", "checkpoint path 'a\\\\b' must be relative", id="backslash_case"),
    pytest.param("../outside", "checkpoint path '../outside' must be normalised", id="parent_case"),
    pytest.param("a/../b", "checkpoint path 'a/../b' must be normalised", id="inner_parent_case"),
    pytest.param("./a", "checkpoint path './a' must be normalised", id="dot_case"),
    pytest.param("a//b", "checkpoint path 'a//b' must be normalised", id="double_slash_case"),
    pytest.param("a/", "checkpoint path 'a/' must be normalised", id="trailing_slash_case"),
]


@pytest.mark.parametrize(("path", "message"), INVALID_PATHS)
def test_record_rejects_paths_that_are_not_relative_and_normalised(tmp_path: Path, path: str, message: str) -> None:
    # given
    store = _store(tmp_path, {"a": b"x", "b": b"y"})

    # when
    with pytest.raises(CheckpointError) as caught:
        store.record("c1", offset=0, time=TIME, reported=[{"path": path, "size": 1, "append_only": True}])

    # then
    assert str(caught.value) == message
    assert _journal_lines(store) == []


@pytest.mark.parametrize(
    ("reported", "message"),
    [
        pytest.param({"files": []}, "checkpoint result must be a list", id="not_a_list_case"),
        pytest.param(["a"], "checkpoint entry must be {path, size, append_only}", id="entry_not_object_case"),
        pytest.param(
            [{"path": "a", "size": 1, "mode": 420}],
            "checkpoint entry must be {path, size, append_only}",
            id="unknown_key_case",
        ),
        pytest.param(
            [{"path": "a", "size": -1}],
            "checkpoint size for 'a' must be a non-negative integer",
            id="negative_size_case",
        ),
        pytest.param(
            [{"path": "a", "size": "1"}],
            "checkpoint size for 'a' must be a non-negative integer",
            id="string_size_case",
        ),
        pytest.param(
            [{"path": "a", "size": 1, "append_only": "yes"}],
            "append_only must be a boolean",
            id="append_only_not_boolean_case",
        ),
        pytest.param(
            [{"path": "a", "size": 1}, {"path": "a", "size": 1}],
            "checkpoint path 'a' listed twice",
            id="duplicate_path_case",
        ),
    ],
)
def test_record_rejects_malformed_results(tmp_path: Path, reported: Any, message: str) -> None:
    # given
    store = _store(tmp_path, {"a": b"x"})

    # when
    with pytest.raises(CheckpointError) as caught:
        store.record("c1", offset=0, time=TIME, reported=reported)

    # then
    assert str(caught.value) == message
    assert _journal_lines(store) == []


def test_record_rejects_a_symlink(tmp_path: Path) -> None:
    # given a symlink inside native/ to a regular file also inside native/
    store = _store(tmp_path, {"real.jsonl": b"abc"})
    (store.native / "link.jsonl").symlink_to(store.native / "real.jsonl")

    # when
    with pytest.raises(CheckpointError) as caught:
        store.record("c1", offset=0, time=TIME, reported=[{"path": "link.jsonl", "size": 3, "append_only": True}])

    # then
    assert str(caught.value) == "checkpoint file 'link.jsonl' is not a regular file"
    assert _journal_lines(store) == []


def test_record_rejects_a_path_through_a_symlinked_directory_outside_native(tmp_path: Path) -> None:
    # given
    store = _store(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"abc")
    (store.native / "escape").symlink_to(outside)

    # when
    with pytest.raises(CheckpointError) as caught:
        store.record("c1", offset=0, time=TIME, reported=[{"path": "escape/secret", "size": 3, "append_only": False}])

    # then
    assert str(caught.value) == "checkpoint path 'escape/secret' leaves the native directory"
    assert not (store.directory / "snapshots").exists()


def test_record_rejects_a_directory(tmp_path: Path) -> None:
    # given
    store = _store(tmp_path)
    (store.native / "state").mkdir()

    # when
    with pytest.raises(CheckpointError) as caught:
        store.record("c1", offset=0, time=TIME, reported=[{"path": "state", "size": 0, "append_only": False}])

    # then
    assert str(caught.value) == "checkpoint file 'state' is not a regular file"


def test_record_rejects_a_missing_file(tmp_path: Path) -> None:
    # given
    store = _store(tmp_path)

    # when
    with pytest.raises(CheckpointError) as caught:
        store.record("c1", offset=0, time=TIME, reported=[{"path": "gone.jsonl", "size": 0, "append_only": True}])

    # then
    assert str(caught.value) == "checkpoint file 'gone.jsonl' does not exist"


@pytest.mark.parametrize(
    "reported_size",
    [pytest.param(4, id="smaller_case"), pytest.param(6, id="larger_case")],
)
def test_record_rejects_a_size_that_is_not_exact(tmp_path: Path, reported_size: int) -> None:
    # given
    store = _store(tmp_path, {"conversation.jsonl": b"12345"})

    # when
    with pytest.raises(CheckpointError) as caught:
        store.record(
            "c1",
            offset=0,
            time=TIME,
            reported=[{"path": "conversation.jsonl", "size": reported_size, "append_only": True}],
        )

    # then
    assert str(caught.value) == f"checkpoint file 'conversation.jsonl' has 5 bytes, harness reported {reported_size}"
    assert _journal_lines(store) == []


def test_a_failed_record_leaves_no_snapshot_behind(tmp_path: Path) -> None:
    # given a valid snapshot file listed before a file with a wrong size
    store = _store(tmp_path, {"meta.json": b"{}", "log.jsonl": b"abc"})
    reported = [
        {"path": "meta.json", "size": 2, "append_only": False},
        {"path": "log.jsonl", "size": 9, "append_only": True},
    ]

    # when
    with pytest.raises(CheckpointError):
        store.record("c1", offset=0, time=TIME, reported=reported)

    # then
    assert not (store.directory / "snapshots" / "c1").exists()
    assert _journal_lines(store) == []


# --- last -----------------------------------------------------------------------------------


def test_last_is_none_without_a_journal(tmp_path: Path) -> None:
    # given
    store = _store(tmp_path)

    # when
    last = store.last()

    # then
    assert last is None


def test_last_returns_the_most_recent_checkpoint(tmp_path: Path) -> None:
    # given
    store = _store(tmp_path)
    store.record("c1", offset=0, time=TIME, reported=[])
    second = store.record("c2", offset=100, time=TIME, reported=[])

    # when
    last = store.last()

    # then
    assert last == second
    assert [entry["id"] for entry in _journal_lines(store)] == ["c1", "c2"]


def test_last_ignores_a_torn_last_line(tmp_path: Path) -> None:
    # given a crash mid-append after one whole checkpoint
    store = _store(tmp_path)
    first = store.record("c1", offset=0, time=TIME, reported=[])
    with (store.directory / "checkpoints.jsonl").open("ab") as handle:
        handle.write(b'{"id":"c2","offset":1')

    # when
    last = store.last()

    # then
    assert last == first


def test_a_checkpoint_recorded_after_a_torn_line_is_the_last(tmp_path: Path) -> None:
    # given a torn line left by a crash
    store = _store(tmp_path)
    store.record("c1", offset=0, time=TIME, reported=[])
    with (store.directory / "checkpoints.jsonl").open("ab") as handle:
        handle.write(b'{"id":"c2","offset":1')

    # when
    third = store.record("c3", offset=200, time=TIME, reported=[])

    # then
    assert store.last() == third
    assert (store.directory / "checkpoints.jsonl").read_bytes().split(b"\n")[1:] == [
        b'{"id":"c2","offset":1',
        json.dumps(third, separators=(",", ":")).encode(),
        b"",
    ]


# --- restore --------------------------------------------------------------------------------


def test_restore_truncates_append_only_files_to_their_recorded_size(tmp_path: Path) -> None:
    # given a checkpoint, then a later turn that appended more
    store = _store(tmp_path, {"conversation.jsonl": b"turn1\n"})
    checkpoint = store.record(
        "c1", offset=0, time=TIME, reported=[{"path": "conversation.jsonl", "size": 6, "append_only": True}]
    )
    with (store.native / "conversation.jsonl").open("ab") as handle:
        handle.write(b"turn2\n")

    # when
    store.restore(checkpoint)

    # then
    assert _native_tree(store) == {"conversation.jsonl": b"turn1\n"}


def test_restore_removes_files_not_in_the_checkpoint(tmp_path: Path) -> None:
    # given
    store = _store(tmp_path, {"conversation.jsonl": b"turn1\n"})
    checkpoint = store.record(
        "c1", offset=0, time=TIME, reported=[{"path": "conversation.jsonl", "size": 6, "append_only": True}]
    )
    (store.native / "later.json").write_bytes(b"{}")
    (store.native / "cache").mkdir()
    (store.native / "cache" / "blob").write_bytes(b"x")

    # when
    store.restore(checkpoint)

    # then
    assert _native_tree(store) == {"conversation.jsonl": b"turn1\n"}


def test_restoring_the_creation_checkpoint_empties_native(tmp_path: Path) -> None:
    # given
    store = _store(tmp_path)
    checkpoint = store.record("c0", offset=0, time=TIME, reported=[])
    (store.native / "conversation.jsonl").write_bytes(b"turn1\n")

    # when
    store.restore(checkpoint)

    # then
    assert _native_tree(store) == {}


def test_restore_creates_native_when_it_is_missing(tmp_path: Path) -> None:
    # given
    store = CheckpointStore(tmp_path / "session")
    (tmp_path / "session").mkdir()

    # when
    store.restore({"id": "c0", "offset": 0, "time": TIME, "files": []})

    # then
    assert store.native.is_dir()


def test_restore_puts_back_snapshots_of_rewritten_and_deleted_files(tmp_path: Path) -> None:
    # given
    store = _store(tmp_path, {"state/meta.json": b'{"v":1}', "settings.json": b"[1]"})
    checkpoint = store.record(
        "c1",
        offset=0,
        time=TIME,
        reported=[
            {"path": "state/meta.json", "size": 7, "append_only": False},
            {"path": "settings.json", "size": 3, "append_only": False},
        ],
    )
    (store.native / "state" / "meta.json").write_bytes(b'{"v":2,"more":true}')
    (store.native / "settings.json").unlink()

    # when
    store.restore(checkpoint)

    # then
    assert _native_tree(store) == {"settings.json": b"[1]", "state/meta.json": b'{"v":1}'}


def test_restore_of_an_older_checkpoint_uses_its_own_snapshot(tmp_path: Path) -> None:
    # given two checkpoints with different contents of the same file
    store = _store(tmp_path, {"meta.json": b"one"})
    first = store.record("c1", offset=0, time=TIME, reported=[{"path": "meta.json", "size": 3, "append_only": False}])
    (store.native / "meta.json").write_bytes(b"second")
    store.record("c2", offset=10, time=TIME, reported=[{"path": "meta.json", "size": 6, "append_only": False}])

    # when
    store.restore(first)

    # then
    assert _native_tree(store) == {"meta.json": b"one"}


def test_restore_fails_when_an_append_only_file_is_shorter_than_recorded(tmp_path: Path) -> None:
    # given a checkpoint whose append-only file later lost bytes, and an extra file
    store = _store(tmp_path, {"conversation.jsonl": b"turn1\n", "meta.json": b"{}"})
    checkpoint = store.record(
        "c1",
        offset=0,
        time=TIME,
        reported=[
            {"path": "conversation.jsonl", "size": 6, "append_only": True},
            {"path": "meta.json", "size": 2, "append_only": False},
        ],
    )
    os.truncate(store.native / "conversation.jsonl", 3)
    (store.native / "meta.json").write_bytes(b"[changed]")
    (store.native / "extra.json").write_bytes(b"{}")
    before = _native_tree(store)

    # when
    with pytest.raises(CheckpointError) as caught:
        store.restore(checkpoint)

    # then nothing was changed
    assert str(caught.value) == "native file 'conversation.jsonl' is shorter than its checkpoint"
    assert _native_tree(store) == before


def test_restore_fails_when_an_append_only_file_is_missing(tmp_path: Path) -> None:
    # given
    store = _store(tmp_path, {"conversation.jsonl": b"turn1\n", "extra.json": b"{}"})
    checkpoint = store.record(
        "c1", offset=0, time=TIME, reported=[{"path": "conversation.jsonl", "size": 6, "append_only": True}]
    )
    (store.native / "conversation.jsonl").unlink()

    # when
    with pytest.raises(CheckpointError) as caught:
        store.restore(checkpoint)

    # then
    assert str(caught.value) == "native file 'conversation.jsonl' is missing"
    assert _native_tree(store) == {"extra.json": b"{}"}


def test_restore_fails_when_a_snapshot_is_missing(tmp_path: Path) -> None:
    # given
    store = _store(tmp_path, {"meta.json": b"{}"})
    checkpoint = store.record(
        "c1", offset=0, time=TIME, reported=[{"path": "meta.json", "size": 2, "append_only": False}]
    )
    (store.directory / "snapshots" / "c1" / "meta.json").unlink()
    (store.native / "meta.json").write_bytes(b"[changed]")

    # when
    with pytest.raises(CheckpointError) as caught:
        store.restore(checkpoint)

    # then
    assert str(caught.value) == "snapshot of 'meta.json' for checkpoint 'c1' is missing"
    assert _native_tree(store) == {"meta.json": b"[changed]"}


def test_restore_rejects_a_checkpoint_with_an_unsafe_path(tmp_path: Path) -> None:
    # given a checkpoint entry that did not come from record()
    store = _store(tmp_path, {"meta.json": b"{}"})
    checkpoint = {"id": "c1", "offset": 0, "time": TIME, "files": [{"path": "../x", "size": 0, "append_only": True}]}

    # when
    with pytest.raises(CheckpointError) as caught:
        store.restore(checkpoint)

    # then
    assert str(caught.value) == "checkpoint path '../x' must be normalised"
    assert _native_tree(store) == {"meta.json": b"{}"}
