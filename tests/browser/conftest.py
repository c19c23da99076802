"""Playwright driving Debian's chromium (installed by `make test`; Playwright's own browser
download is not used). One browser per module, a fresh context per test, screenshots of the main
pages in the test's tmp dir; a failing test takes one more of the page it was on and names the
directory in its report."""

from __future__ import annotations

import os
import shutil
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = os.environ.get("BRAIN_TEST_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
TIMEOUT_MS = 15_000  # per action; pages are served on loopback, so only a stuck page takes this long
VIEWPORT = {"width": 1280, "height": 900}


class Screenshots:
    """Full-page screenshots, numbered in the order the test took them."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.taken: list[Path] = []

    def take(self, page: Any, name: str) -> None:
        path = self.directory / f"{len(self.taken) + 1:02d}-{name}.png"
        page.screenshot(path=str(path), full_page=True)
        self.taken.append(path)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail(f"no chromium at {CHROMIUM}: `make system-packages` installs Debian's chromium")
    arguments = ["--disable-dev-shm-usage"]  # containers often have a small /dev/shm
    if os.geteuid() == 0:
        arguments.append("--no-sandbox")  # chromium refuses to sandbox as root
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=arguments)
        yield browser
        browser.close()


@pytest.fixture
def screenshots(tmp_path: Path) -> Screenshots:
    directory = tmp_path / "screenshots"
    directory.mkdir()
    return Screenshots(directory)


@pytest.fixture
def page(browser: Any, screenshots: Screenshots) -> Iterator[Any]:
    context = browser.new_context(viewport=VIEWPORT)
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    yield page
    context.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    funcargs: dict[str, Any] = getattr(item, "funcargs", {})
    shots: Screenshots | None = funcargs.get("screenshots")
    if report.when != "call" or not report.failed or shots is None:
        return report
    page = funcargs.get("page")
    if page is not None and not page.is_closed():
        try:
            shots.take(page, "failure")
        except Exception as exc:  # the page may be what failed; the report still names the folder
            report.sections.append(("browser screenshots", f"no failure screenshot: {exc}"))
    listing = "\n".join(str(path) for path in shots.taken) or "(none taken)"
    report.sections.append(("browser screenshots", f"{shots.directory}\n{listing}"))
    return report
