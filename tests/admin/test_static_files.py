"""The admin's static files, served by runbrain itself from the collected STATIC_ROOT: hashed
names cached for ten years, other names for a minute, gzip when asked, nothing outside the root."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import httpx
import pytest
from django.conf import settings
from django.test import override_settings

from brainsite.staticfiles import MANIFEST_NAME, hashed_urls, static_files
from tests.fixtures.server import BrainServer

TEN_YEARS = "max-age=315360000, public, immutable"


def manifest() -> dict[str, str]:
    paths: dict[str, str] = json.loads((Path(settings.STATIC_ROOT) / MANIFEST_NAME).read_text())["paths"]
    return paths


def test_the_login_page_links_hashed_stylesheets_that_are_served_for_ten_years(admin_brain: BrainServer) -> None:
    # given
    page = httpx.get(admin_brain.url + "/admin/login/").text
    stylesheets = re.findall(r'<link rel="stylesheet" href="(/static/[^"]+)"', page)

    # when
    responses = [httpx.get(admin_brain.url + url) for url in stylesheets]

    # then
    assert "/static/" + manifest()["admin/css/base.css"] in stylesheets
    assert all(re.search(r"\.[0-9a-f]{12}\.css$", url) for url in stylesheets), stylesheets
    assert [response.status_code for response in responses] == [200] * len(stylesheets)
    assert {response.headers["cache-control"] for response in responses} == {TEN_YEARS}
    assert all(response.headers["content-type"].startswith("text/css") for response in responses)
    assert all(response.headers["x-content-type-options"] == "nosniff" for response in responses)


def test_a_file_comes_gzipped_to_clients_that_accept_it(admin_brain: BrainServer) -> None:
    # given
    url = admin_brain.url + "/static/" + manifest()["admin/css/base.css"]

    # when
    plain = httpx.get(url, headers={"Accept-Encoding": "identity"})
    zipped = httpx.get(url, headers={"Accept-Encoding": "gzip"})

    # then
    assert plain.headers.get("content-encoding") is None
    assert zipped.headers["content-encoding"] == "gzip" and zipped.headers["vary"] == "Accept-Encoding"
    assert int(zipped.headers["content-length"]) < int(plain.headers["content-length"])
    assert zipped.content == plain.content  # as httpx decoded it


def test_an_unhashed_name_is_cached_for_a_minute_and_a_head_has_no_body(admin_brain: BrainServer) -> None:
    # when
    response = httpx.get(admin_brain.url + "/static/admin/css/base.css")
    head = httpx.head(admin_brain.url + "/static/admin/css/base.css")

    # then
    assert response.status_code == head.status_code == 200
    assert response.headers["cache-control"] == head.headers["cache-control"] == "max-age=60, public"
    assert head.content == b""


def test_brain_s_own_stylesheet_is_collected_and_served(admin_brain: BrainServer) -> None:
    # when
    response = httpx.get(admin_brain.url + "/static/" + manifest()["sessions_app/admin/session.css"])

    # then
    assert response.status_code == 200 and b".transcript" in response.content
    assert response.headers["cache-control"] == TEN_YEARS


@pytest.mark.parametrize(
    "path",
    [
        pytest.param("/static/admin/css/missing.css", id="missing_case"),
        pytest.param("/static/../brainsite/settings.py", id="dot_dot_case"),
        pytest.param("/static/%2e%2e/brainsite/settings.py", id="encoded_dot_dot_case"),
        pytest.param("/static/staticfiles.json/", id="trailing_slash_case"),
    ],
)
def test_nothing_else_is_served_under_static(admin_brain: BrainServer, path: str) -> None:
    # when
    response = httpx.get(admin_brain.url + path)

    # then
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_an_uncollected_static_root_is_logged_and_the_apps_files_are_served_unhashed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # when
    with override_settings(STATIC_ROOT=tmp_path / "nothing-here"), caplog.at_level(logging.ERROR, logger="brain"):
        server = static_files(None)

    # then
    assert "/static/admin/css/base.css" in server.files
    assert not any(re.search(r"\.[0-9a-f]{12}\.", url) for url in server.files)
    assert [record.getMessage() for record in caplog.records] == [
        "static files are not collected: serving the apps' files unhashed; run `python manage.py collectstatic`"
    ]


def test_only_the_manifest_s_names_are_hashed(tmp_path: Path) -> None:
    # given
    (tmp_path / MANIFEST_NAME).write_text(json.dumps({"paths": {"a/b.css": "a/b.0123456789ab.css"}, "version": "1.1"}))

    # when
    urls = hashed_urls(tmp_path, "/static/")

    # then
    assert urls == frozenset({"/static/a/b.0123456789ab.css"})
    assert hashed_urls(tmp_path / "absent", "/static/") == frozenset()
