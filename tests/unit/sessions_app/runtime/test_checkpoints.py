"""checkpoints.jsonl and native/: recording what the harness reports, restoring it exactly."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from sessions_app.storage.checkpoints import CheckpointEntry, CheckpointError, CheckpointStore

TIME = "2026-10-15T12:00:00.000000Z"
CONVERSATION = [{"path": "conversation.jsonl", "size": 6, "append_only": True}]


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
    store = _store(tmp_path, {"conversation.jsonl": b"line\n", "state/tools.jsonl": b"{}\n"})
    reported = [
        {"path": "conversation.jsonl", "size": 5, "append_only": True},
        {"path": "state/tools.jsonl", "size": 3, "append_only": True},
    ]

    # when
    entry = store.record("c1", offset=256, time=TIME, reported=reported)

    # then
    assert entry == {"id": "c1", "offset": 256, "time": TIME, "files": reported}
    assert _journal_lines(store) == [entry]
    assert store.last() == entry


def test_the_creation_checkpoint_may_list_no_files(tmp_path: Path) -> None:
    # given
    store = _store(tmp_path)

    # when
    entry = store.record("c0", offset=0, time=TIME, reported=[])

    # then
    assert entry == {"id": "c0", "offset": 0, "time": TIME, "files": []}
    assert store.last() == entry


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
        store.record("c1", offset=0, time=TIME, reported=[{"path": "escape/secret", "size": 3, "append_only": True}])

    # then
    assert str(caught.value) == "checkpoint path 'escape/secret' leaves the native directory"
    assert _journal_lines(store) == []


def test_record_rejects_a_directory(tmp_path: Path) -> None:
    # given
    store = _store(tmp_path)
    (store.native / "state").mkdir()

    # when
    with pytest.raises(CheckpointError) as caught:
        store.record("c1", offset=0, time=TIME, reported=[{"path": "state", "size": 0, "append_only": True}])

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


def test_record_rejects_a_file_that_is_not_append_only(tmp_path: Path) -> None:
    # given
    store = _store(tmp_path, {"conversation.jsonl": b"a\n", "meta.json": b"{}"})
    reported = [
        {"path": "conversation.jsonl", "size": 2, "append_only": True},
        {"path": "meta.json", "size": 2, "append_only": False},
    ]

    # when
    with pytest.raises(CheckpointError) as caught:
        store.record("c1", offset=0, time=TIME, reported=reported)

    # then
    assert str(caught.value) == "checkpoint file 'meta.json' is not append-only"
    assert _journal_lines(store) == []


def test_record_rejects_a_file_without_append_only(tmp_path: Path) -> None:
    # given
    store = _store(tmp_path, {"a.jsonl": b"{}"})

    # when
    with pytest.raises(CheckpointError) as caught:
        store.record("c1", offset=0, time=TIME, reported=[{"path": "a.jsonl", "size": 2}])

    # then
    assert str(caught.value) == "checkpoint file 'a.jsonl' is not append-only"
    assert _journal_lines(store) == []


@pytest.mark.parametrize(
    ("count", "accepted"),
    [pytest.param(128, True, id="at_the_limit_case"), pytest.param(129, False, id="over_the_limit_case")],
)
def test_record_accepts_at_most_128_files(tmp_path: Path, count: int, accepted: bool) -> None:
    # given
    store = _store(tmp_path, {f"part-{index}.jsonl": b"x\n" for index in range(count)})
    reported = [{"path": f"part-{index}.jsonl", "size": 2, "append_only": True} for index in range(count)]

    # when
    if accepted:
        entry = store.record("c1", offset=0, time=TIME, reported=reported)
    else:
        with pytest.raises(CheckpointError) as caught:
            store.record("c1", offset=0, time=TIME, reported=reported)

    # then
    if accepted:
        assert len(entry["files"]) == 128
        assert _journal_lines(store) == [entry]
    else:
        assert str(caught.value) == "checkpoint lists 129 files, more than 128"
        assert _journal_lines(store) == []


def test_record_rejects_a_hard_linked_file(tmp_path: Path) -> None:
    # given a native file that is also linked from outside native/
    store = _store(tmp_path, {"conversation.jsonl": b"abc"})
    os.link(store.native / "conversation.jsonl", tmp_path / "outside.jsonl")

    # when
    with pytest.raises(CheckpointError) as caught:
        store.record(
            "c1", offset=0, time=TIME, reported=[{"path": "conversation.jsonl", "size": 3, "append_only": True}]
        )

    # then
    assert str(caught.value) == "checkpoint file 'conversation.jsonl' has 2 hard links"
    assert _journal_lines(store) == []


def test_record_rejects_a_fifo_without_blocking(tmp_path: Path) -> None:
    # given
    store = _store(tmp_path)
    os.mkfifo(store.native / "pipe.jsonl")

    # when
    with pytest.raises(CheckpointError) as caught:
        store.record("c1", offset=0, time=TIME, reported=[{"path": "pipe.jsonl", "size": 0, "append_only": True}])

    # then
    assert str(caught.value) == "checkpoint file 'pipe.jsonl' is not a regular file"
    assert _journal_lines(store) == []


@pytest.mark.parametrize(
    ("first_offset", "offset"),
    [
        pytest.param(None, 100, id="first_entry_past_offset_zero_case"),
        pytest.param(0, 0, id="second_entry_case"),
        pytest.param(0, 100, id="later_entry_case"),
    ],
)
def test_only_the_creation_checkpoint_may_list_no_files(tmp_path: Path, first_offset: int | None, offset: int) -> None:
    # given
    store = _store(tmp_path)
    if first_offset is not None:
        store.record("c0", offset=first_offset, time=TIME, reported=[])
    before = _journal_lines(store)

    # when
    with pytest.raises(CheckpointError) as caught:
        store.record("c1", offset=offset, time=TIME, reported=[])

    # then
    assert str(caught.value) == "only the creation checkpoint may list no native files"
    assert _journal_lines(store) == before


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
    store = _store(tmp_path, {"conversation.jsonl": b"turn1\n"})
    store.record("c1", offset=0, time=TIME, reported=[])
    second = store.record("c2", offset=100, time=TIME, reported=CONVERSATION)

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


def test_last_is_none_for_a_journal_with_only_a_torn_line(tmp_path: Path) -> None:
    # given
    store = _store(tmp_path)
    (store.directory / "checkpoints.jsonl").write_bytes(b'{"id":"c0","offs')

    # when
    last = store.last()

    # then
    assert last is None


def test_last_reads_only_the_tail_of_the_journal(tmp_path: Path) -> None:
    # given a journal whose first line is garbage, followed by many whole entries
    store = _store(tmp_path, {"conversation.jsonl": b"turn1\n"})
    (store.directory / "checkpoints.jsonl").write_bytes(b"not json at all\n")
    for index in range(200):
        entry = store.record(f"c{index}", offset=index * 100, time=TIME, reported=CONVERSATION)

    # when
    last = store.last()

    # then
    assert last == entry


@pytest.mark.parametrize(
    "earlier_entries", [pytest.param(0, id="only_entry_case"), pytest.param(3, id="after_others_case")]
)
def test_last_reads_an_entry_longer_than_its_read_chunk(tmp_path: Path, earlier_entries: int) -> None:
    # given an entry of 128 files with long paths (tens of KiB)
    directory = "d" * 200
    store = _store(tmp_path, {f"{directory}/{index:03}.jsonl": b"x\n" for index in range(128)})
    reported = [{"path": f"{directory}/{index:03}.jsonl", "size": 2, "append_only": True} for index in range(128)]
    for index in range(earlier_entries):
        store.record(f"early{index}", offset=0 if index == 0 else index, time=TIME, reported=reported)
    entry = store.record("long", offset=500, time=TIME, reported=reported)

    # when
    last = store.last()

    # then
    assert len((store.directory / "checkpoints.jsonl").read_bytes().splitlines()[-1]) > 8 * 1024
    assert last == entry


@pytest.mark.parametrize(
    "line",
    [
        pytest.param(b"garbage", id="not_json_case"),
        pytest.param(b"", id="empty_line_case"),
        pytest.param(b"[]", id="not_an_object_case"),
        pytest.param(b'{"id":"c2","offset":5,"time":"t"}', id="missing_files_case"),
        pytest.param(b'{"id":"c2","offset":true,"time":"t","files":[]}', id="boolean_offset_case"),
        pytest.param(b'{"id":"c2","offset":-1,"time":"t","files":[]}', id="negative_offset_case"),
        pytest.param(b'{"id":2,"offset":5,"time":"t","files":[]}', id="numeric_id_case"),
        pytest.param(b'{"id":"c2","offset":5,"time":"t","files":[],"more":1}', id="unknown_key_case"),
    ],
)
def test_last_rejects_a_whole_last_line_that_does_not_decode(tmp_path: Path, line: bytes) -> None:
    # given a whole (newline-terminated) last line after a good entry
    store = _store(tmp_path)
    store.record("c1", offset=0, time=TIME, reported=[])
    journal = store.directory / "checkpoints.jsonl"
    offset = journal.stat().st_size
    with journal.open("ab") as handle:
        handle.write(line + b"\n")

    # when
    with pytest.raises(CheckpointError) as caught:
        store.last()

    # then
    assert str(caught.value) == f"checkpoint journal entry at byte {offset} cannot be decoded"


def test_last_names_a_bad_file_list_in_its_error(tmp_path: Path) -> None:
    # given
    store = _store(tmp_path)
    (store.directory / "checkpoints.jsonl").write_bytes(
        b'{"id":"c1","offset":0,"time":"t","files":[{"path":"../x","size":1,"append_only":true}]}\n'
    )

    # when
    with pytest.raises(CheckpointError) as caught:
        store.last()

    # then
    assert (
        str(caught.value)
        == "checkpoint journal entry at byte 0 cannot be decoded: checkpoint path '../x' must be normalised"
    )


def test_a_checkpoint_recorded_after_a_torn_line_is_the_last(tmp_path: Path) -> None:
    # given a torn line left by a crash
    store = _store(tmp_path)
    store.record("c1", offset=0, time=TIME, reported=[])
    with (store.directory / "checkpoints.jsonl").open("ab") as handle:
        handle.write(b'{"id":"c2","offset":1')

    (store.native / "conversation.jsonl").write_bytes(b"turn1\n")

    # when
    third = store.record("c3", offset=200, time=TIME, reported=CONVERSATION)

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


def test_restore_fails_when_an_append_only_file_is_shorter_than_recorded(tmp_path: Path) -> None:
    # given a checkpoint whose second append-only file later lost bytes, and an extra file
    store = _store(tmp_path, {"tools.jsonl": b"call\n", "conversation.jsonl": b"turn1\n"})
    checkpoint = store.record(
        "c1",
        offset=0,
        time=TIME,
        reported=[
            {"path": "tools.jsonl", "size": 5, "append_only": True},
            {"path": "conversation.jsonl", "size": 6, "append_only": True},
        ],
    )
    with (store.native / "tools.jsonl").open("ab") as handle:
        handle.write(b"more\n")
    os.truncate(store.native / "conversation.jsonl", 3)
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


def test_restore_rejects_a_checkpoint_with_an_unsafe_path(tmp_path: Path) -> None:
    # given a checkpoint entry that did not come from record()
    store = _store(tmp_path, {"meta.json": b"{}"})
    checkpoint: CheckpointEntry = {
        "id": "c1",
        "offset": 0,
        "time": TIME,
        "files": [{"path": "../x", "size": 0, "append_only": True}],
    }

    # when
    with pytest.raises(CheckpointError) as caught:
        store.restore(checkpoint)

    # then
    assert str(caught.value) == "checkpoint path '../x' must be normalised"
    assert _native_tree(store) == {"meta.json": b"{}"}


def test_restoring_the_creation_checkpoint_creates_native_when_it_is_missing(tmp_path: Path) -> None:
    # given
    store = _store(tmp_path)
    checkpoint = store.record("c0", offset=0, time=TIME, reported=[])
    store.native.rmdir()

    # when
    store.restore(checkpoint)

    # then
    assert store.native.is_dir()
    assert _native_tree(store) == {}


def _fallback(checkpoint_id: str) -> CheckpointEntry:
    """What a caller restores when last() found nothing: the session row's checkpoint, no files."""
    return {"id": checkpoint_id, "offset": 0, "time": TIME, "files": []}


@pytest.mark.parametrize(
    ("journal", "message"),
    [
        pytest.param(None, "checkpoint journal is missing: native state cannot be restored", id="missing_case"),
        pytest.param(b"", "checkpoint journal holds no checkpoint: native state cannot be restored", id="empty_case"),
        pytest.param(
            b'{"id":"c0","offset":0,"ti',
            "checkpoint journal holds no checkpoint: native state cannot be restored",
            id="only_a_torn_line_case",
        ),
        pytest.param(
            b'{"id":"c0","offset":0,"time":"t","files":[]}\n{"id":"c1",\n',
            "checkpoint journal entry at byte 45 cannot be decoded",
            id="undecodable_last_entry_case",
        ),
    ],
)
def test_restore_without_a_readable_journal_fails_and_keeps_native(
    tmp_path: Path, journal: bytes | None, message: str
) -> None:
    # given native state from later turns, and a journal that cannot say what to keep
    store = _store(tmp_path, {"conversation.jsonl": b"turn1\nturn2\n", "tools/calls.jsonl": b"call\n"})
    if journal is not None:
        (store.directory / "checkpoints.jsonl").write_bytes(journal)
    before = _native_tree(store)

    # when
    with pytest.raises(CheckpointError) as caught:
        store.restore(_fallback("c0"))

    # then
    assert str(caught.value) == message
    assert _native_tree(store) == before


def test_restore_refuses_no_files_from_anything_but_the_creation_checkpoint(tmp_path: Path) -> None:
    # given a journal whose creation entry is c0 and a later checkpoint with files
    store = _store(tmp_path, {"conversation.jsonl": b"turn1\n"})
    store.record("c0", offset=0, time=TIME, reported=[])
    store.record("c1", offset=100, time=TIME, reported=CONVERSATION)
    before = _native_tree(store)

    # when
    with pytest.raises(CheckpointError) as caught:
        store.restore(_fallback("c1"))

    # then
    assert str(caught.value) == "checkpoint 'c1' lists no files but is not the creation checkpoint"
    assert _native_tree(store) == before


def test_restore_refuses_a_journal_entry_that_is_not_append_only(tmp_path: Path) -> None:
    # given an entry written when rewritable files were still accepted
    store = _store(tmp_path, {"meta.json": b"{}", "extra.json": b"[]"})
    (store.directory / "checkpoints.jsonl").write_bytes(
        b'{"id":"c1","offset":0,"time":"t","files":[{"path":"meta.json","size":2,"append_only":false}]}\n'
    )
    checkpoint = store.last()
    assert checkpoint is not None

    # when
    with pytest.raises(CheckpointError) as caught:
        store.restore(checkpoint)

    # then
    assert str(caught.value) == "checkpoint file 'meta.json' is not append-only"
    assert _native_tree(store) == {"extra.json": b"[]", "meta.json": b"{}"}


def test_restore_does_not_follow_a_symlink_in_place_of_a_listed_file(tmp_path: Path) -> None:
    # given a listed file replaced by a symlink to a longer file also inside native/
    store = _store(tmp_path, {"conversation.jsonl": b"turn1\n"})
    checkpoint = store.record("c1", offset=0, time=TIME, reported=CONVERSATION)
    (store.native / "conversation.jsonl").rename(store.native / "other.jsonl")
    with (store.native / "other.jsonl").open("ab") as handle:
        handle.write(b"turn2\n")
    (store.native / "conversation.jsonl").symlink_to(store.native / "other.jsonl")

    # when
    with pytest.raises(CheckpointError) as caught:
        store.restore(checkpoint)

    # then nothing was truncated or deleted
    assert str(caught.value) == "checkpoint file 'conversation.jsonl' is not a regular file"
    assert (store.native / "conversation.jsonl").is_symlink()
    assert (store.native / "other.jsonl").read_bytes() == b"turn1\nturn2\n"


def test_restore_refuses_a_symlink_that_leads_out_of_native(tmp_path: Path) -> None:
    # given a listed file replaced by a symlink to a file outside native/
    store = _store(tmp_path, {"conversation.jsonl": b"turn1\n", "extra.json": b"{}"})
    checkpoint = store.record("c1", offset=0, time=TIME, reported=CONVERSATION)
    outside = tmp_path / "outside.jsonl"
    outside.write_bytes(b"turn1\nsecret\n")
    (store.native / "conversation.jsonl").unlink()
    (store.native / "conversation.jsonl").symlink_to(outside)

    # when
    with pytest.raises(CheckpointError) as caught:
        store.restore(checkpoint)

    # then: the symlink is never followed
    assert str(caught.value) == "checkpoint file 'conversation.jsonl' is not a regular file"
    assert outside.read_bytes() == b"turn1\nsecret\n"
    assert (store.native / "extra.json").read_bytes() == b"{}"


def test_restore_refuses_a_hard_linked_file(tmp_path: Path) -> None:
    # given a listed file that gained a second link outside native/
    store = _store(tmp_path, {"conversation.jsonl": b"turn1\n", "extra.json": b"{}"})
    checkpoint = store.record("c1", offset=0, time=TIME, reported=CONVERSATION)
    with (store.native / "conversation.jsonl").open("ab") as handle:
        handle.write(b"turn2\n")
    os.link(store.native / "conversation.jsonl", tmp_path / "outside.jsonl")

    # when
    with pytest.raises(CheckpointError) as caught:
        store.restore(checkpoint)

    # then
    assert str(caught.value) == "checkpoint file 'conversation.jsonl' has 2 hard links"
    assert (tmp_path / "outside.jsonl").read_bytes() == b"turn1\nturn2\n"
    assert _native_tree(store) == {"conversation.jsonl": b"turn1\nturn2\n", "extra.json": b"{}"}


def test_restore_removes_a_symlinked_directory_without_touching_its_target(tmp_path: Path) -> None:
    # given
    store = _store(tmp_path, {"conversation.jsonl": b"turn1\n"})
    checkpoint = store.record("c1", offset=0, time=TIME, reported=CONVERSATION)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "kept").write_bytes(b"x")
    (store.native / "escape").symlink_to(outside)

    # when
    store.restore(checkpoint)

    # then
    assert not (store.native / "escape").exists()
    assert (outside / "kept").read_bytes() == b"x"
    assert _native_tree(store) == {"conversation.jsonl": b"turn1\n"}


def test_restore_refuses_a_directory_in_place_of_a_listed_file(tmp_path: Path) -> None:
    # given a listed file moved away and a directory of its name in its place
    store = _store(tmp_path, {"conversation.jsonl": b"turn1\n", "extra.json": b"{}"})
    checkpoint = store.record("c1", offset=0, time=TIME, reported=CONVERSATION)
    with (store.native / "conversation.jsonl").open("ab") as handle:
        handle.write(b"turn2\n")
    (store.native / "conversation.jsonl").rename(store.native / "moved.jsonl")
    (store.native / "conversation.jsonl").mkdir()
    before = _native_tree(store)

    # when
    with pytest.raises(CheckpointError) as caught:
        store.restore(checkpoint)

    # then
    assert str(caught.value) == "checkpoint file 'conversation.jsonl' is not a regular file"
    assert _native_tree(store) == before
