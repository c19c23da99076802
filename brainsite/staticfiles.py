"""Static files (the admin's CSS, JavaScript and images) served by runbrain itself, from the
STATIC_ROOT that `manage.py collectstatic` fills: ServeStatic's ASGI app in front of Django.

Names with a content hash (those in the manifest collectstatic writes) never change, so they are
cached for ten years; any other name for a minute. `runbrain` collects when STATIC_ROOT has no
manifest; where it cannot (a read-only install), the admin's files are served unhashed from the
apps' own static directories, so no page ever fails for want of them. Imports no models and no
app of Brain's.
"""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable
from pathlib import Path

from django.conf import settings
from django.contrib.staticfiles import finders
from django.core.management import call_command
from django.core.management.base import CommandError
from servestatic import ServeStaticASGI
from servestatic.storage import CompressedManifestStaticFilesStorage

from foundation.logs import logger

__all__ = ["MANIFEST_NAME", "AdminStaticStorage", "collect_static_files", "hashed_urls", "static_files"]

MANIFEST_NAME = "staticfiles.json"  # what ManifestStaticFilesStorage writes into STATIC_ROOT
UNHASHED_MAX_AGE_SECONDS = 60  # a name without a hash may get new content at the next collectstatic
PUBLIC_UMASK = 0o022  # static files are public; a proxy may serve STATIC_ROOT as another user


class AdminStaticStorage(CompressedManifestStaticFilesStorage):  # type: ignore[misc]  # servestatic is untyped
    """The manifest's hashed names; a name the manifest lacks (files not collected) gets its plain
    URL, served from the apps' static directories, instead of failing the page with a 500."""

    def read_manifest(self) -> str | None:
        try:
            manifest: str | None = super().read_manifest()
            return manifest
        except OSError:  # STATIC_ROOT itself is missing or not a directory
            return None

    def stored_name(self, name: str) -> str:
        try:
            stored: str = super().stored_name(name)
            return stored
        except ValueError:  # Django: "Missing staticfiles manifest entry" / "could not be found"
            return name


def collect_static_files() -> bool:
    """Run collectstatic when STATIC_ROOT has no manifest (a fresh install), as runbrain migrates.
    Returns whether collected files are in place; False leaves the unhashed fallback serving."""
    static_root = Path(settings.STATIC_ROOT)
    if (static_root / MANIFEST_NAME).is_file():
        return True
    previous = os.umask(PUBLIC_UMASK)
    try:
        call_command("collectstatic", interactive=False, verbosity=0)
    except (OSError, CommandError) as exc:
        logger.warning(
            "static files could not be collected; serving them unhashed from the apps",
            extra={"static_root": str(static_root), "error": str(exc)},
        )
        return False
    finally:
        os.umask(previous)
    logger.info("static files collected", extra={"static_root": str(static_root)})
    return True


def hashed_urls(static_root: Path, static_url: str) -> frozenset[str]:
    """The URLs of the content-hashed files the manifest names; empty without a manifest."""
    try:
        manifest = json.loads((static_root / MANIFEST_NAME).read_text())
    except (FileNotFoundError, NotADirectoryError):
        return frozenset()
    return frozenset(static_url + name for name in manifest.get("paths", {}).values())


def static_files(application: Callable[..., Awaitable[None]] | None) -> ServeStaticASGI:
    """`application` behind a server of STATIC_URL from STATIC_ROOT; other paths pass through.

    A STATIC_ROOT that collectstatic has not filled is logged at startup, and the apps' own static
    directories are served instead (unhashed, cached for a minute), as AdminStaticStorage links.
    """
    static_root = Path(settings.STATIC_ROOT)
    static_url = settings.STATIC_URL
    immutable = hashed_urls(static_root, static_url)
    server = ServeStaticASGI(
        application,
        max_age=UNHASHED_MAX_AGE_SECONDS,
        allow_all_origins=False,  # the admin's own pages load them; no other origin needs to
        immutable_file_test=lambda path, url: url in immutable,
    )
    if immutable:
        server.add_files(static_root, prefix=static_url)
        return server
    logger.error(
        "static files are not collected: serving the apps' files unhashed; run `python manage.py collectstatic`",
        extra={"static_root": str(static_root)},
    )
    for directory in _app_static_directories():
        server.add_files(directory, prefix=static_url)
    return server


def _app_static_directories() -> list[Path]:
    """Where the staticfiles finders look (each app's static/), in their order of precedence."""
    directories: list[Path] = []
    for finder in finders.get_finders():
        for storage in getattr(finder, "storages", {}).values():
            location = Path(storage.location)
            if location.is_dir() and location not in directories:
                directories.append(location)
    return directories
