"""Django settings. Host behaviour comes from the host config (brain.json), not from here.

Environment: BRAIN_DATA_DIR (metadata.sqlite lives there), BRAIN_DATABASE_URL (PostgreSQL
instead of SQLite), BRAIN_SECRET_KEY (admin sessions), BRAIN_DEBUG.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from urllib.parse import unquote, urlsplit

import django_stubs_ext
from django.core.exceptions import ImproperlyConfigured

django_stubs_ext.monkeypatch()  # generic admin and form classes (ModelAdmin[Model]) at run time

BASE_DIR = Path(__file__).resolve().parent.parent


def envbool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    if value.lower() in ("1", "true", "yes", "on"):
        return True
    if value.lower() in ("0", "false", "no", "off", ""):
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean, not {value!r}")


def envsecret(name: str) -> str | None:
    """A secret from NAME or from the file named by NAME_FILE."""
    if os.environ.get(name):
        return os.environ[name]
    path = os.environ.get(f"{name}_FILE")
    if path:
        return Path(path).read_text().strip()
    return None


def _database(data_dir: Path) -> dict[str, object]:
    url = envsecret("BRAIN_DATABASE_URL")
    if not url:
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(data_dir / "metadata.sqlite"),
            # WAL lets readers proceed during writes; IMMEDIATE avoids upgrade deadlocks.
            "OPTIONS": {
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=5000;",
                "transaction_mode": "IMMEDIATE",
            },
        }
    parts = urlsplit(url)
    if parts.scheme not in ("postgres", "postgresql"):
        raise ImproperlyConfigured("BRAIN_DATABASE_URL must be a postgres:// URL")
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(parts.path.lstrip("/")),
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname or "",
        "PORT": str(parts.port or ""),
    }


DATA_DIR = Path(os.environ.get("BRAIN_DATA_DIR", ".brain")).resolve()
DATA_DIR.mkdir(parents=True, exist_ok=True)

SECRET_KEY = envsecret("BRAIN_SECRET_KEY") or secrets.token_hex(32)
DEBUG = envbool("BRAIN_DEBUG")
ALLOWED_HOSTS = ["*"]  # Brain authenticates every request with bearer tokens

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "sessions_app.apps.SessionsAppConfig",
    "tools_app.apps.ToolsAppConfig",
    "persistence_app.apps.PersistenceAppConfig",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

ROOT_URLCONF = "brainsite.urls"
ASGI_APPLICATION = "brainsite.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {"default": _database(DATA_DIR)}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

USE_TZ = True
TIME_ZONE = "UTC"
STATIC_URL = "/static/"
# The API enforces its own body limit (input_bytes + 16 KiB, 413); let it see the body.
DATA_UPLOAD_MAX_MEMORY_SIZE = None
APPEND_SLASH = False

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"json": {"()": "brainsite.logs.JsonFormatter"}},
    "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "json"}},
    "root": {"handlers": ["stderr"], "level": "WARNING"},
    "loggers": {
        "brain": {"handlers": ["stderr"], "level": "INFO", "propagate": False},
        "django.request": {"level": "ERROR"},
        "daphne": {"level": "WARNING"},
    },
}

CELERY_BROKER_URL = os.environ.get("BRAIN_CELERY_BROKER", "")
