"""Console settings: embedded defaults that run on loopback without setup; every
value from the environment in production.

- ``MESHGATE_CONSOLE_DATA``: the console's own data dir (users, sessions, tokens in
  SQLite; the generated secret key). Default ``./data/console``.
- ``MESHGATE_CONSOLE_DATABASE_URL``: ``postgresql://user:password@host[:port]/dbname[?sslmode=…]``
  (or ``postgres://``): users, sessions and tokens in PostgreSQL instead, shared by every
  console process that names it (two or more replicas; they need one ``MESHGATE_CONSOLE_SECRET``
  too). User and password percent-decoded; query parameters are libpq's (``OPTIONS``).
- ``MESHGATE_REDIS_URL``, ``MESHGATE_STREAM_PREFIX``: where the nodes' snapshots and
  events are (the nodes' ``[metrics]``), and the channel layer.
- ``MESHGATE_CONSOLE_STOMP``: nodes to send management requests to
  (``host:port[,stomp+ssl://host:port…]``, the first that answers), with
  ``MESHGATE_CONSOLE_LOGIN`` / ``MESHGATE_CONSOLE_PASSCODE`` (a user with the admin
  permission on the management address; none for an anonymous mesh). For the
  ``stomp+ssl://`` ones: ``MESHGATE_CONSOLE_CA`` (the CA that signed the nodes'
  certificates; else the system's), ``MESHGATE_CONSOLE_CERT`` / ``MESHGATE_CONSOLE_KEY``
  (for nodes that require client certificates), ``MESHGATE_CONSOLE_VERIFY_HOSTNAME=0``.
- ``MESHGATE_CONSOLE_SECRET`` (else generated into the data dir),
  ``MESHGATE_CONSOLE_HOSTS`` (allowed host names), ``MESHGATE_CONSOLE_TLS=1``
  (secure cookies, behind TLS), ``MESHGATE_CONSOLE_DEBUG=1``.
- ``MESHGATE_CONSOLE_ORIGINS``: origins besides the console's own (``scheme://host[:port]``,
  comma-separated) whose pages may open the live WebSocket and post forms: the address
  browsers use when a proxy in front rewrites the Host header.
- ``MESHGATE_CONSOLE_METRICS_OPEN=1``: ``/metrics`` without a token (docs/security.md)."""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = Path(os.environ.get("MESHGATE_CONSOLE_DATA", "data/console")).resolve()


def _secret_key() -> str:
    if os.environ.get("MESHGATE_CONSOLE_SECRET"):
        return os.environ["MESHGATE_CONSOLE_SECRET"]
    path = DATA_DIR / "secret-key"
    if not path.exists():
        DATA_DIR.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()


SECRET_KEY = _secret_key()
DEBUG = os.environ.get("MESHGATE_CONSOLE_DEBUG", "0") == "1"
ALLOWED_HOSTS = os.environ.get("MESHGATE_CONSOLE_HOSTS", "127.0.0.1,localhost").split(",")
# Pages from these origins, besides the console's own, may open /ws/mesh and post forms.
CONSOLE_ALLOWED_ORIGINS = [origin.strip().rstrip("/")
                           for origin in os.environ.get("MESHGATE_CONSOLE_ORIGINS", "").split(",") if origin.strip()]
CSRF_TRUSTED_ORIGINS = CONSOLE_ALLOWED_ORIGINS
# A live socket asks again whether its session is still signed in this often (seconds).
CONSOLE_SESSION_RECHECK = 10.0
# Failed sign-ins allowed per user name and per address within the window (seconds) before
# sign-in is refused, for either, until the window ends.
CONSOLE_LOGIN_THROTTLE = {"per_user": 5, "per_address": 20, "window": 300}
# /metrics answers without a token (Prometheus on a trusted network); else it needs one.
CONSOLE_METRICS_OPEN = os.environ.get("MESHGATE_CONSOLE_METRICS_OPEN", "0") == "1"



def management_settings(environ: Mapping[str, str]) -> dict[str, Any]:
    """The nodes the console asks, and how (the MESHGATE_CONSOLE_* variables above)."""
    return {
        "STOMP": [address.strip() for address in environ.get("MESHGATE_CONSOLE_STOMP", "127.0.0.1:61613").split(",")
                  if address.strip()],
        "LOGIN": environ.get("MESHGATE_CONSOLE_LOGIN") or None,
        "PASSCODE": environ.get("MESHGATE_CONSOLE_PASSCODE") or None,
        "CA": environ.get("MESHGATE_CONSOLE_CA") or None,
        "CERT": environ.get("MESHGATE_CONSOLE_CERT") or None,
        "KEY": environ.get("MESHGATE_CONSOLE_KEY") or None,
        "VERIFY_HOSTNAME": environ.get("MESHGATE_CONSOLE_VERIFY_HOSTNAME", "1") != "0",
    }


POSTGRES_SCHEMES = ("postgresql", "postgres")
# OPTIONS Django's PostgreSQL backend reads itself, each wanting a type a URL cannot carry
# ("false" would be true): not taken from the URL's query.
_DJANGO_ONLY_OPTIONS = ("pool", "isolation_level", "server_side_binding")


def database_settings(environ: Mapping[str, str], data_dir: Path) -> dict[str, Any]:
    """``DATABASES["default"]``: PostgreSQL as ``MESHGATE_CONSOLE_DATABASE_URL`` says, else
    SQLite in the data dir. A URL that cannot be used is refused here, at startup, in words
    that never hold its password (nor any piece of the URL but its scheme)."""
    url = environ.get("MESHGATE_CONSOLE_DATABASE_URL", "").strip()
    if not url:
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": data_dir / "console.sqlite3"}

    def refused(why: str) -> ImproperlyConfigured:
        return ImproperlyConfigured(f"MESHGATE_CONSOLE_DATABASE_URL: {why} (expected "
                                    "postgresql://user:password@host[:port]/dbname[?sslmode=...], or unset for SQLite)")

    try:
        parts = urlsplit(url)
        port = parts.port  # ValueError when not a number in 0-65535
    except ValueError:
        raise refused("not a URL that can be read (a bad port, or an unbalanced [ ]? "
                      "percent-encode / : @ ? # in the user and password)") from None
    scheme = parts.scheme.lower()
    if scheme not in POSTGRES_SCHEMES:
        if not scheme or not url.lower().startswith(scheme + "://"):  # "user:password@…": no scheme at all
            raise refused("no postgresql:// scheme")
        raise refused(f"unsupported scheme {scheme!r}")
    name = unquote(parts.path[1:]) if parts.path.startswith("/") else ""
    if not name or "/" in parts.path[1:]:
        raise refused("no database name, or a path that is more than /dbname "
                      "(percent-encode / : @ ? # in the user and password)")
    if parts.fragment:
        raise refused("a #fragment has no meaning here (percent-encode # in the password)")
    try:
        query = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError:
        raise refused("a query that is not key=value&key=value") from None
    options = dict(query)
    if len(options) != len(query):
        raise refused("a query parameter given twice")
    django_only = sorted(set(options) & set(_DJANGO_ONLY_OPTIONS))
    if django_only:
        raise refused(f"{', '.join(django_only)} is not a connection parameter here")
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": name,
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": unquote(parts.hostname or ""),  # none: libpq's default (its Unix socket)
        "PORT": str(port) if port else "",
        "OPTIONS": options,
        # Not persistent: under ASGI each request's thread opens its own connection, and one
        # kept past the request would never be used again (Django: "When using ASGI,
        # persistent connections should be disabled"). A connection per request it is.
        "CONN_MAX_AGE": 0,
        "CONN_HEALTH_CHECKS": True,
    }


MESHGATE = {
    "REDIS_URL": os.environ.get("MESHGATE_REDIS_URL", "redis://127.0.0.1:6379/0"),
    "STREAM_PREFIX": os.environ.get("MESHGATE_STREAM_PREFIX", "meshgate"),
    **management_settings(os.environ),
}

INSTALLED_APPS = [
    "daphne",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "channels",
    "console.api",
    "console.live",
    "console.ui",
]
MIDDLEWARE = [
    "console.ui.headers.ContentSecurityPolicy",  # first: every answer, errors of later middleware too
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]
ROOT_URLCONF = "console.urls"
TEMPLATES = [{
    "BACKEND": "django.template.backends.django.DjangoTemplates",
    "DIRS": [],
    "APP_DIRS": True,
    "OPTIONS": {"context_processors": [
        "django.template.context_processors.request",
        "django.contrib.auth.context_processors.auth",
        "django.contrib.messages.context_processors.messages",
    ]},
}]
ASGI_APPLICATION = "console.asgi.application"
DATABASES = {"default": database_settings(os.environ, DATA_DIR)}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
AUTH_PASSWORD_VALIDATORS = [{"NAME": "django.contrib.auth.password_validation." + name} for name in (
    "UserAttributeSimilarityValidator", "MinimumLengthValidator", "CommonPasswordValidator",
    "NumericPasswordValidator")]
CHANNEL_LAYERS = {"default": {
    "BACKEND": "channels_redis.core.RedisChannelLayer",
    "CONFIG": {"hosts": [MESHGATE["REDIS_URL"]], "prefix": MESHGATE["STREAM_PREFIX"] + ":console:channels"},
}}

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = DATA_DIR / "static"
USE_TZ = True
TIME_ZONE = "UTC"

LOGIN_URL = "ui:login"
LOGIN_REDIRECT_URL = "ui:overview"
LOGOUT_REDIRECT_URL = "ui:login"
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
if os.environ.get("MESHGATE_CONSOLE_TLS", "0") == "1":
    SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = True
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

REST_FRAMEWORK = {
    # Token first: an unauthenticated request gets 401 with WWW-Authenticate, not 403.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["console.api.permissions.Viewer"],
    "DEFAULT_RENDERER_CLASSES": ["console.api.renderers.FastJSONRenderer"],
    "DEFAULT_PAGINATION_CLASS": "console.api.pagination.Pages",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "console.api.errors.handle",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Meshgate management API",
    "DESCRIPTION": "The whole mesh: nodes, links, partial queues, connections, events, and admin actions. "
                   "Shapes are the model of docs/management.md.",
    "VERSION": "1",
    "OAS_VERSION": "3.1.0",  # the model's components are JSON Schema 2020-12 (msgspec)
    "SERVE_PERMISSIONS": ["console.api.permissions.Viewer"],
    "SERVE_INCLUDE_SCHEMA": False,
    "POSTPROCESSING_HOOKS": ["drf_spectacular.hooks.postprocess_schema_enums", "console.api.schema.add_model"],
}
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}, "none": {"class": "logging.NullHandler"}},
    "root": {"handlers": ["console"], "level": os.environ.get("MESHGATE_CONSOLE_LOG_LEVEL", "WARNING")},
    # Anyone can send a Host the console does not serve, as often as they like: the
    # request gets its 400, and the log does not get a traceback for each.
    "loggers": {"django.security.DisallowedHost": {"handlers": ["none"], "level": "CRITICAL", "propagate": False}},
}
