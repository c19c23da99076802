"""A component reaches nothing but its grant: paths outside the workspace, a symlink pointing
out of it and a write under a read grant all fail inside the component, with a readable error,
no worker left behind, and the next call unaffected."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.wasm.conftest import assert_the_next_call_works, call
from toolkits.wasm import ComponentOutcome, WorkspaceGrant

NOT_PERMITTED = "not permitted (outside the granted workspace or not granted)"


@pytest.mark.parametrize(
    ("path", "error"),
    [
        ("../../etc/passwd", f"cannot read ../../etc/passwd: {NOT_PERMITTED}"),
        ("inner/../../secret.txt", f"cannot read inner/../../secret.txt: {NOT_PERMITTED}"),
        ("/etc/passwd", "cannot read /etc/passwd: no such file in the workspace"),
    ],
)
async def test_a_path_outside_the_grant_cannot_be_read(cache_dir: Path, workspace: Path, path: str, error: str) -> None:
    (workspace / "inner").mkdir()
    (workspace.parent / "secret.txt").write_text("outside")
    outcome = await call("read_file", {"path": path}, cache_dir=cache_dir, grants=[WorkspaceGrant(workspace, "read")])
    assert outcome == ComponentOutcome("error", None, error)
    await assert_the_next_call_works(cache_dir, workspace)


async def test_a_symlink_in_the_workspace_pointing_out_of_it_cannot_be_followed(
    cache_dir: Path, workspace: Path
) -> None:
    outside = workspace.parent / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("outside")
    (workspace / "file-link").symlink_to(outside / "secret.txt")
    (workspace / "dir-link").symlink_to(outside)
    (workspace / "passwd-link").symlink_to("/etc/passwd")
    grants = [WorkspaceGrant(workspace, "read-write")]
    for path in ("file-link", "dir-link/secret.txt", "passwd-link"):
        outcome = await call("read_file", {"path": path}, cache_dir=cache_dir, grants=grants)
        assert outcome == ComponentOutcome("error", None, f"cannot read {path}: {NOT_PERMITTED}")
    outcome = await call(
        "write_file", {"path": "dir-link/planted.txt", "text": "x"}, cache_dir=cache_dir, grants=grants
    )
    assert outcome == ComponentOutcome("error", None, f"cannot write dir-link/planted.txt: {NOT_PERMITTED}")
    assert sorted(path.name for path in outside.iterdir()) == ["secret.txt"]
    await assert_the_next_call_works(cache_dir, workspace)


async def test_a_write_under_a_read_grant_is_refused_and_nothing_is_written(cache_dir: Path, workspace: Path) -> None:
    (workspace / "existing.txt").write_text("original")
    grants = [WorkspaceGrant(workspace, "read")]
    for path in ("new.txt", "existing.txt"):
        outcome = await call("write_file", {"path": path, "text": "changed"}, cache_dir=cache_dir, grants=grants)
        assert outcome == ComponentOutcome("error", None, f"cannot write {path}: {NOT_PERMITTED}")
    assert sorted(path.name for path in workspace.iterdir()) == ["existing.txt"]
    assert (workspace / "existing.txt").read_text() == "original"
    await assert_the_next_call_works(cache_dir, workspace)


async def test_without_a_grant_the_component_sees_no_filesystem(cache_dir: Path, workspace: Path) -> None:
    (workspace / "notes.txt").write_text("granted elsewhere")
    outcome = await call("list_dir", {"path": "."}, cache_dir=cache_dir, grants=[])
    assert outcome == ComponentOutcome("error", None, "cannot list .: no such file in the workspace")
    await assert_the_next_call_works(cache_dir, workspace)
