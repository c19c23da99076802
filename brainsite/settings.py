"""Django settings. Host behaviour comes from the host config (brain.json), not from here.

Environment: BRAIN_DATA_DIR (metadata.sqlite lives there), BRAIN_DATABASE_URL (PostgreSQL
instead of SQLite), BRAIN_SECRET_KEY (admin sessions), BRAIN_DEBUG, BRAIN_ALLOWED_HOSTS,
BRAIN_STATIC_ROOT (collected static files), and the TLS deployment switches BRAIN_TLS,
BRAIN_PROXY_SSL_HEADER, BRAIN_SSL_REDIRECT, BRAIN_HSTS_SECONDS, BRAIN_HSTS_INCLUDE_SUBDOMAINS,
BRAIN_HSTS_PRELOAD (README, Running Brain). BRAIN_TOOL_PROVIDERS installs tool providers
(README, Tool providers).
"""

from __future__ import annotations

import json
import os
import re
import secrets
from pathlib import Path
from urllib.parse import unquote, urlsplit

import django_stubs_ext
from django.core.exceptions import ImproperlyConfigured

from brainsite.hosts import derive_allowed_hosts, is_loopback_host, public_origin
from foundation.hostconfig import ConfigError, HostConfig, load_host_config

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


def envint(name: str, default: int = 0, *, minimum: int = 0) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    if not (value.isascii() and value.isdigit()) or int(value) < minimum:  # no sign, space or "1e3"
        raise ImproperlyConfigured(f"{name} must be an integer of at least {minimum}, not {value!r}")
    return int(value)


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
        # A fleet's every send and turn runs a journal statement: a connection per request would
        # cost a connect (about 10 ms on loopback) each time. Kept for 60 s, checked before reuse
        # so a restarted PostgreSQL costs one failed check, not one failed request.
        "CONN_MAX_AGE": 60,
        "CONN_HEALTH_CHECKS": True,
    }


DATA_DIR = Path(os.environ.get("BRAIN_DATA_DIR", ".brain")).resolve()
# Private from its first moment: this runs before runbrain sets its umask, and session ids are names
# in here. 0o700 is never widened by a umask.
DATA_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)


def _create_private_database(database: dict[str, object]) -> None:
    """Create the SQLite file 0600 before SQLite does with the process's umask (0644 under the
    usual 022): SQLite gives its -wal and -shm files the database file's mode, so the three stay
    private whichever command opens the database first. An existing file is left as it is."""
    if str(database["ENGINE"]).endswith("sqlite3"):
        os.close(os.open(str(database["NAME"]), os.O_WRONLY | os.O_CREAT, 0o600))


def _host_config() -> HostConfig:
    """The host config $BRAIN_CONFIG names (manage.py sets it from --config before settings load),
    else the defaults: a missing or invalid file is reported by the command that serves it."""
    path = os.environ.get("BRAIN_CONFIG")
    if path:
        try:
            return load_host_config(path)
        except ConfigError:
            pass
    return HostConfig.model_construct()  # listen and public_url keep their defaults


SECRET_KEY = envsecret("BRAIN_SECRET_KEY") or secrets.token_hex(32)
DEBUG = envbool("BRAIN_DEBUG")

_config = _host_config()
# Host validation guards the cookie-authenticated admin (DNS rebinding, forged Host headers); the
# bearer-token API answers any Host and builds no URL from it (it uses public_url).
try:
    ALLOWED_HOSTS = derive_allowed_hosts(
        listen_host=_config.listen_host,
        public_url=_config.public_url,
        override=os.environ.get("BRAIN_ALLOWED_HOSTS"),
    )
except ValueError as exc:
    raise ImproperlyConfigured(f"BRAIN_ALLOWED_HOSTS {exc}") from exc
# Behind a proxy that rewrites Host, the admin's form posts carry the public URL as their Origin.
CSRF_TRUSTED_ORIGINS = [public_origin(_config.public_url)]

# TLS. runbrain serves plain HTTP; BRAIN_TLS=1 says clients reach Brain over HTTPS through a
# TLS-terminating proxy. Each request then counts as HTTPS (brainsite.tls), unless
# BRAIN_PROXY_SSL_HEADER names a header the proxy sets to "https" or "http" for the client's scheme.
BRAIN_TLS = envbool("BRAIN_TLS")
_proxy_ssl_header = os.environ.get("BRAIN_PROXY_SSL_HEADER", "")
if _proxy_ssl_header:
    if not re.fullmatch(r"[A-Za-z0-9-]+", _proxy_ssl_header):
        raise ImproperlyConfigured(f"BRAIN_PROXY_SSL_HEADER must be a header name, not {_proxy_ssl_header!r}")
    # Django believes this header: the proxy must set it on every request, overwriting a client's.
    SECURE_PROXY_SSL_HEADER = ("HTTP_" + _proxy_ssl_header.upper().replace("-", "_"), "https")
SESSION_COOKIE_SECURE = BRAIN_TLS
CSRF_COOKIE_SECURE = BRAIN_TLS
SECURE_SSL_REDIRECT = envbool("BRAIN_SSL_REDIRECT", BRAIN_TLS)
SECURE_HSTS_SECONDS = envint("BRAIN_HSTS_SECONDS")
SECURE_HSTS_INCLUDE_SUBDOMAINS = envbool("BRAIN_HSTS_INCLUDE_SUBDOMAINS", True)
SECURE_HSTS_PRELOAD = envbool("BRAIN_HSTS_PRELOAD")
if not BRAIN_TLS and (_proxy_ssl_header or SECURE_SSL_REDIRECT or SECURE_HSTS_SECONDS):
    # without TLS: HSTS is only ever sent over HTTPS, the redirect would point at an https:// URL
    # nothing serves, and a proxy header implies the proxy BRAIN_TLS describes
    raise ImproperlyConfigured("BRAIN_PROXY_SSL_HEADER, BRAIN_SSL_REDIRECT and BRAIN_HSTS_SECONDS need BRAIN_TLS=1")
SECURE_CONTENT_TYPE_NOSNIFF = True
SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"

SILENCED_SYSTEM_CHECKS: list[str] = []
if not BRAIN_TLS and is_loopback_host(_config.listen_host) and _config.public_url.startswith("http:"):
    # Plain HTTP on a loopback listen with an http public URL never crosses a network: there is
    # no TLS for secure cookies (W012, W016), HSTS (W004) or an https redirect (W008) to protect.
    # A non-loopback listen or an https public URL without BRAIN_TLS keeps these warnings.
    SILENCED_SYSTEM_CHECKS += ["security.W004", "security.W008", "security.W012", "security.W016"]
if SECURE_HSTS_SECONDS and not SECURE_HSTS_PRELOAD:
    # Preload asks browsers to hard-code HTTPS for the domain, which takes months to undo: an
    # operator's explicit choice (BRAIN_HSTS_PRELOAD=1), not a checklist item.
    SILENCED_SYSTEM_CHECKS += ["security.W021"]

INSTALLED_APPS = [
    "daphne",
    "brainsite.apps.BrainAdminConfig",  # django.contrib.admin with a throttled login
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "sessions_app.apps.SessionsAppConfig",
    "tools_app.apps.ToolsAppConfig",
    "persistence_app.apps.PersistenceAppConfig",
    "fleet_app.apps.FleetAppConfig",  # leases, the input journal and instance registry of a fleet (cluster block)
    "brainsite.apps.BrainsiteConfig",  # the server's management commands: runbrain, check_brain_config, syncworker
]

MIDDLEWARE = [
    *(["brainsite.tls.tls_terminated_middleware"] if BRAIN_TLS and not _proxy_ssl_header else []),
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.common.CommonMiddleware",  # validates Host on every admin request
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]
# Messages live in the session (server side): the default falls back to a cookie.
MESSAGE_STORAGE = "django.contrib.messages.storage.session.SessionStorage"

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
_create_private_database(DATABASES["default"])
# Per process: each runbrain process counts its own admin login failures (brainsite.login_throttle).
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    "login-throttle": {
        "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
        "LOCATION": "login-throttle",
        # its own store, large enough that a flood of made-up usernames does not evict the counts
        "OPTIONS": {"MAX_ENTRIES": 10_000},
    },
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

USE_TZ = True
TIME_ZONE = "UTC"
STATIC_URL = "/static/"
# The admin's static files: `manage.py collectstatic` (run by `make bootstrap`) copies them here with
# a content hash in each name and gzip variants; runbrain serves them (brainsite.staticfiles), or a
# proxy does from the same directory (README, The admin).
STATIC_ROOT = Path(os.environ.get("BRAIN_STATIC_ROOT") or BASE_DIR / "staticfiles").resolve()
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "brainsite.staticfiles.AdminStaticStorage"},
}
# gzip variants only: brotli needs a package of its own and zstd Python 3.14; every browser takes gzip
SERVESTATIC_USE_BROTLI = False
SERVESTATIC_USE_ZSTD = False
# The API enforces its own body limit (input_bytes + 16 KiB, 413); let it see the body.
DATA_UPLOAD_MAX_MEMORY_SIZE = None
APPEND_SLASH = False

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"json": {"()": "foundation.logs.JsonFormatter"}},
    "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "json"}},
    "root": {"handlers": ["stderr"], "level": "WARNING"},
    "loggers": {
        "brain": {"handlers": ["stderr"], "level": "INFO", "propagate": False},
        "django.request": {"level": "ERROR"},
        # A Host outside ALLOWED_HOSTS is answered 400 "host not allowed"; scanners send such
        # requests all day, and Django logs each one as an error with a traceback.
        "django.security.DisallowedHost": {"level": "CRITICAL"},
        "daphne": {"level": "WARNING"},
    },
}

# Background sync on Celery (`manage.py syncworker`): without a broker, the server publishes
# in-process. Tasks are acknowledged after they run, one at a time per worker process; a lost
# task is dispatched again by the server, so results are not kept.
CELERY_BROKER_URL = os.environ.get("BRAIN_CELERY_BROKER", "")
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_CONNECTION_TIMEOUT = 5
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 300, "socket_timeout": 5, "socket_connect_timeout": 5}
CELERY_TASK_PUBLISH_RETRY_POLICY = {"max_retries": 2, "interval_start": 0.2, "interval_step": 0.5}


def _tool_providers() -> object:
    """$BRAIN_TOOL_PROVIDERS (or the file $BRAIN_TOOL_PROVIDERS_FILE names) as JSON; its shape is
    checked when the providers are installed, where runbrain and check_brain_config report it."""
    raw = envsecret("BRAIN_TOOL_PROVIDERS")
    if raw is None:
        return {}
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"BRAIN_TOOL_PROVIDERS is not valid JSON: {exc}") from exc


# Installed tool providers (README, Tool providers): name -> {"class": dotted path, "options": {...}},
# installed once at startup. A deployment's own settings module may assign it directly.
BRAIN_TOOL_PROVIDERS = _tool_providers()
