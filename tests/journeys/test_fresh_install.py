"""A fresh install started with `runbrain` alone: the data dir is private from its first moment,
and the admin's static files are collected (or served unhashed where they cannot be), so no admin
page fails for want of them."""

from __future__ import annotations

import re
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx

from tests.fixtures.server import ROOT, BrainServer


def _stylesheets(server: BrainServer) -> tuple[int, list[str]]:
    page = httpx.get(server.url + "/admin/login/")
    return page.status_code, re.findall(r'<link rel="stylesheet" href="(/static/[^"]+)"', page.text)


def test_runbrain_collects_static_files_into_an_empty_static_root(
    brain_factory: Callable[..., BrainServer], tmp_path: Path
) -> None:
    # given: a STATIC_ROOT nobody has collected into
    static_root = tmp_path / "static"
    server = brain_factory(start=False)
    server.env["BRAIN_STATIC_ROOT"] = str(static_root)
    # when
    server.start()
    status, stylesheets = _stylesheets(server)
    # then: hashed names, collected and served
    assert status == 200
    assert (static_root / "staticfiles.json").is_file()
    assert stylesheets and all(re.search(r"\.[0-9a-f]{12}\.css$", url) for url in stylesheets), stylesheets
    assert [httpx.get(server.url + url).status_code for url in stylesheets] == [200] * len(stylesheets)
    assert "static files collected" in server.logs()


def test_a_static_root_that_cannot_be_written_serves_the_admin_unhashed(
    brain_factory: Callable[..., BrainServer], tmp_path: Path
) -> None:
    # given: STATIC_ROOT below a regular file, which no user can create
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    server = brain_factory(start=False)
    server.env["BRAIN_STATIC_ROOT"] = str(blocker / "static")
    # when
    server.start()
    status, stylesheets = _stylesheets(server)
    responses = [httpx.get(server.url + url) for url in stylesheets]
    # then
    assert status == 200
    assert "/static/admin/css/base.css" in stylesheets
    assert [response.status_code for response in responses] == [200] * len(stylesheets)
    assert all(response.headers["content-type"].startswith("text/css") for response in responses)
    assert "static files could not be collected" in server.logs()


def test_the_data_dir_is_private_from_the_first_import_of_the_settings(tmp_path: Path) -> None:
    # given: a data dir that does not exist yet, and the usual umask of a shell
    data_dir = tmp_path / "fresh" / "data"
    code = "import os; os.umask(0o022); import django; django.setup()"
    # when: anything loads the settings (check_brain_config, createsuperuser, runbrain)
    subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={"DJANGO_SETTINGS_MODULE": "brainsite.settings", "BRAIN_DATA_DIR": str(data_dir), "PATH": "/usr/bin"},
        check=True,
    )
    # then
    assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700


def test_runbrain_makes_an_existing_open_data_dir_private(
    brain_factory: Callable[..., BrainServer], tmp_path: Path
) -> None:
    # given: a data dir an older release left readable by everyone
    server = brain_factory(start=False)
    server.data_dir.mkdir(parents=True)
    server.data_dir.chmod(0o755)
    # when
    server.start()
    # then
    assert stat.S_IMODE(server.data_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE((server.data_dir / "sessions").stat().st_mode) & 0o077 == 0
