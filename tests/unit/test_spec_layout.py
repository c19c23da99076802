"""The suite finds the specification through the repository's layout (`shared/spec` beside the
checkout) and a missing file is a failure naming the path, never a skip."""

from __future__ import annotations

import pytest

from tests.support.spec import REPOSITORY_ROOT, SPEC_ROOT, spec_path


def test_the_specification_is_found_beside_the_checkout() -> None:
    # when
    contract = spec_path("openapi.json")
    # then
    assert contract == REPOSITORY_ROOT.parent / "shared" / "spec" / "openapi.json"
    assert (REPOSITORY_ROOT / "manage.py").is_file()


def test_a_missing_specification_file_fails_naming_the_path_it_looked_for() -> None:
    # when
    with pytest.raises(AssertionError) as missing:
        spec_path("brain-docs/no-such-page.md")
    # then
    assert str(SPEC_ROOT / "brain-docs" / "no-such-page.md") in str(missing.value)
