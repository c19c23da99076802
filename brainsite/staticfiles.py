"""Static files (the admin's CSS, JavaScript and images) served by runbrain itself, from the
STATIC_ROOT that `manage.py collectstatic` fills: ServeStatic's ASGI app in front of Django.

Names with a content hash (those in the manifest collectstatic writes) never change, so they are
cached for ten years; any other name for a minute. Imports no models and no app of Brain's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.conf import settings
from servestatic import ServeStaticASGI

from brainsite.logs import logger

__all__ = ["MANIFEST_NAME", "hashed_urls", "static_files"]

MANIFEST_NAME = "staticfiles.json"  # what ManifestStaticFilesStorage writes into STATIC_ROOT
UNHASHED_MAX_AGE_SECONDS = 60  # a name without a hash may get new content at the next collectstatic


def hashed_urls(static_root: Path, static_url: str) -> frozenset[str]:
    """The URLs of the content-hashed files the manifest names; empty without a manifest."""
    try:
        manifest = json.loads((static_root / MANIFEST_NAME).read_text())
    except FileNotFoundError:
        return frozenset()
    return frozenset(static_url + name for name in manifest.get("paths", {}).values())


def static_files(application: Any) -> ServeStaticASGI:
    """`application` behind a server of STATIC_URL from STATIC_ROOT; other paths pass through.

    A STATIC_ROOT that collectstatic has not filled is logged at startup (the admin would render
    unstyled, or fail on its first page): `make bootstrap` runs collectstatic.
    """
    static_root = Path(settings.STATIC_ROOT)
    static_url = settings.STATIC_URL
    immutable = hashed_urls(static_root, static_url)
    if not immutable:
        logger.error(
            "static files are not collected: run `python manage.py collectstatic --noinput`",
            extra={"static_root": str(static_root)},
        )
    server = ServeStaticASGI(
        application,
        max_age=UNHASHED_MAX_AGE_SECONDS,
        allow_all_origins=False,  # the admin's own pages load them; no other origin needs to
        immutable_file_test=lambda path, url: url in immutable,
    )
    if static_root.is_dir():
        server.add_files(static_root, prefix=static_url)
    return server
