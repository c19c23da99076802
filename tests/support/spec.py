"""The specification the suite checks against, found through the repository's layout: a
`shared/spec` directory beside the checkout (`../shared/spec` from the repository root), as CI
lays it out. A test that needs it and cannot find it fails naming the path; it never skips."""

from __future__ import annotations

from pathlib import Path

__all__ = ["REPOSITORY_ROOT", "SPEC_ROOT", "spec_path"]

REPOSITORY_ROOT = Path(__file__).resolve().parents[2]
SPEC_ROOT = REPOSITORY_ROOT.parent / "shared" / "spec"


def spec_path(relative: str) -> Path:
    """The specification file at `relative` (e.g. `openapi.json`); AssertionError naming the
    path it looked for when that file is missing."""
    path = SPEC_ROOT / relative
    if not path.is_file():
        raise AssertionError(
            f"specification file missing: {path} (the suite reads the specification from "
            f"shared/spec beside the checkout, {SPEC_ROOT})"
        )
    return path
