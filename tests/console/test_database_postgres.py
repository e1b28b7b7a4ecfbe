"""The console's database: SQLite in its data dir unless ``MESHGATE_CONSOLE_DATABASE_URL``
names a PostgreSQL database, which every console process naming it shares (issue 27: the
console run twice).

How the URL is read (console.settings.database_settings), and what a bad one says: never
its password. Then for real: a PostgreSQL server of the test's own (postgres_support.py),
``migrate`` with the variable set, and two console processes (daphne), each with a data dir
of its own and the same database and secret key: a session signed in on one is a session
on the other, an API token works on both, and signing out on one signs out on both."""

from __future__ import annotations

import secrets
import subprocess
import sys
import traceback
from pathlib import Path
from types import SimpleNamespace

import pytest
import requests
from django.core.exceptions import ImproperlyConfigured
from mesh_support import wait_until

from console.settings import database_settings
from tests.console import test_browser as browser_tests

ROOT = Path(__file__).resolve().parent.parent.parent
SECRET = "s3cr3t-Pa55"  # in the refused URLs below: must not appear in what they say
USER, PASSWORD = "alice", "correct horse battery staple"


# --- how the URL is read ----------------------------------------------------------------

def test_unset_or_empty_keeps_sqlite_in_the_data_dir(tmp_path: Path) -> None:
    for environ in ({}, {"MESHGATE_CONSOLE_DATABASE_URL": ""}, {"MESHGATE_CONSOLE_DATABASE_URL": "  "}):
        assert database_settings(environ, tmp_path) == {"ENGINE": "django.db.backends.sqlite3",
                                                        "NAME": tmp_path / "console.sqlite3"}


def test_a_postgresql_url_is_django_s_postgresql_backend(tmp_path: Path) -> None:
    url = ("postgresql://mesh%20gate:p%40ss%2Fw%3Ard%25@db.example.org:5433/console%2Dprod"
           "?sslmode=verify-full&sslrootcert=/etc/ca.crt&application_name=console")
    assert database_settings({"MESHGATE_CONSOLE_DATABASE_URL": url}, tmp_path) == {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "console-prod",
        "USER": "mesh gate",
        "PASSWORD": "p@ss/w:rd%",
        "HOST": "db.example.org",
        "PORT": "5433",
        "OPTIONS": {"sslmode": "verify-full", "sslrootcert": "/etc/ca.crt", "application_name": "console"},
        "CONN_MAX_AGE": 0,
        "CONN_HEALTH_CHECKS": True,
    }


@pytest.mark.parametrize(("url", "expected"), [
    ("postgres://console@db/console", {"USER": "console", "PASSWORD": "", "HOST": "db", "PORT": "", "OPTIONS": {}}),
    ("POSTGRESQL://u:p@[::1]:6543/console", {"USER": "u", "PASSWORD": "p", "HOST": "::1", "PORT": "6543"}),
    ("postgresql:///console?host=/run/postgresql", {"HOST": "", "OPTIONS": {"host": "/run/postgresql"}}),
])
def test_other_forms_of_the_url(url: str, expected: dict, tmp_path: Path) -> None:
    database = database_settings({"MESHGATE_CONSOLE_DATABASE_URL": url}, tmp_path)
    assert database["ENGINE"] == "django.db.backends.postgresql"
    assert database["NAME"] == "console"
    assert {key: database[key] for key in expected} == expected


@pytest.mark.parametrize(("url", "why"), [
    (f"mysql://console:{SECRET}@db/console", "unsupported scheme 'mysql'"),
    (f"console:{SECRET}@db/console", "no postgresql:// scheme"),
    (f"postgresql://console:{SECRET}@db", "no database name"),
    (f"postgresql://console:{SECRET}@db/", "no database name"),
    (f"postgresql://console:{SECRET}@db:port/console", "not a URL that can be read"),
    (f"postgresql://console:{SECRET}@db:70000/console", "not a URL that can be read"),
    (f"postgresql://console:{SECRET[:4]}/{SECRET[4:]}@db/console", "not a URL that can be read"),  # unencoded /
    (f"postgresql://console:{SECRET[:4]}#{SECRET[4:]}@db/console", "not a URL that can be read"),  # unencoded #
    (f"postgresql://console:{SECRET}@db/console/more", "more than /dbname"),
    (f"postgresql://console:{SECRET}@db/console?sslmode", "not key=value"),
    (f"postgresql://console:{SECRET}@db/console?sslmode=require&sslmode=disable", "given twice"),
    (f"postgresql://console:{SECRET}@db/console?pool=false", "pool is not a connection parameter"),
])
def test_a_url_that_cannot_be_used_is_refused_without_its_password(url: str, why: str, tmp_path: Path) -> None:
    with pytest.raises(ImproperlyConfigured) as refused:
        database_settings({"MESHGATE_CONSOLE_DATABASE_URL": url}, tmp_path)
    said = "".join(traceback.format_exception(refused.value))  # the chained errors too, as a log shows them
    assert "MESHGATE_CONSOLE_DATABASE_URL" in said and why in said
    for piece in (SECRET, SECRET[:4], SECRET[4:]):
        assert piece not in said


def test_the_console_does_not_start_with_a_bad_url_and_does_not_print_its_password(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "DJANGO_SETTINGS_MODULE": "console.settings",
           "MESHGATE_CONSOLE_DATA": str(tmp_path), "MESHGATE_CONSOLE_DATABASE_URL": f"mysql://console:{SECRET}@db/c"}
    done = subprocess.run([sys.executable, "-m", "django", "check"], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode != 0
    assert "ImproperlyConfigured: MESHGATE_CONSOLE_DATABASE_URL: unsupported scheme 'mysql'" in done.stderr
    assert SECRET not in done.stderr + done.stdout


# --- two consoles, one PostgreSQL ---------------------------------------------------------

@pytest.fixture(scope="module")
def shared(postgres):
    """A database of its own on the test's PostgreSQL: its URL."""
    return postgres.database("console_shared")


@pytest.fixture(scope="module")
def consoles(postgres, shared, redis_only, tmp_path_factory):
    """Two console processes (daphne; no worker: nothing here is live) with data dirs of
    their own, one database and one secret key; ``alice`` made through the first."""
    env = {"MESHGATE_CONSOLE_DATABASE_URL": shared, "MESHGATE_CONSOLE_SECRET": secrets.token_urlsafe(50)}
    mesh = SimpleNamespace(redis=redis_only, nodes=[])  # no nodes: no page here asks them
    started = []
    try:
        for name in ("a", "b"):
            started.append(browser_tests.ConsoleProcesses(mesh, tmp_path_factory.mktemp(f"console-{name}"), stomp=[],
                                                          worker=False, env=env))
        started[0].add_user(USER, PASSWORD)
        for console in started:
            wait_until(console.listening, "daphne to listen", timeout=30)
        yield SimpleNamespace(a=started[0], b=started[1])
    finally:
        for console in started:
            console.stop()


def sign_in(console) -> requests.Session:
    """A browser's cookie jar signed in on ``console`` through its sign-in form."""
    browser = requests.Session()
    form = browser.get(console.url + "/login/", timeout=10)
    assert form.status_code == 200
    answer = browser.post(console.url + "/login/", timeout=10, allow_redirects=False, data={
        "username": USER, "password": PASSWORD, "csrfmiddlewaretoken": browser.cookies["csrftoken"]})
    assert answer.status_code == 302 and answer.headers["Location"] == "/", answer.text[-500:]
    assert browser.cookies.get("sessionid")
    return browser


def with_cookie(session_id: str | None) -> dict[str, str]:
    return {"sessionid": session_id} if session_id else {}


def overview(console, session_id: str | None) -> requests.Response:
    """The overview page, with only this session cookie (a fresh jar: no cookie of another console)."""
    return requests.get(console.url + "/", cookies=with_cookie(session_id), timeout=10, allow_redirects=False)


def schema(console, session_id: str | None = None, token: str | None = None) -> requests.Response:
    headers = {"Authorization": "Token " + token} if token else {}
    return requests.get(console.url + "/api/v1/schema/", cookies=with_cookie(session_id), headers=headers, timeout=10)


def test_migrate_made_the_console_s_tables_in_postgresql(consoles, postgres) -> None:
    with postgres.superuser("console_shared") as connection:
        tables = {row[0] for row in connection.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'").fetchall()}
        users = {row[0] for row in connection.execute("SELECT username FROM auth_user").fetchall()}
    assert {"django_session", "auth_user", "authtoken_token", "django_migrations"} <= tables
    assert USER in users and "admin" in users  # alice through A; the first administrator by ensureadmin
    for console in (consoles.a, consoles.b):  # and no SQLite beside it
        assert not (Path(console.env["MESHGATE_CONSOLE_DATA"]) / "console.sqlite3").exists()


def test_a_session_signed_in_on_one_console_is_a_session_on_the_other(consoles) -> None:
    session_id = sign_in(consoles.a).cookies["sessionid"]
    for console in (consoles.a, consoles.b):
        page = overview(console, session_id)
        assert page.status_code == 200, (console.url, page.status_code, page.headers.get("Location"))
        assert USER in page.text  # the page is rendered for alice
        assert schema(console, session_id).status_code == 200  # the API takes the session too
        signed_out = overview(console, None)
        assert signed_out.status_code == 302 and signed_out.headers["Location"].startswith("/login/")
        assert schema(console).status_code == 401


def test_an_api_token_made_through_one_console_works_on_the_other(consoles) -> None:
    token = consoles.a.token(USER)  # drf_create_token with the first console's settings
    for console in (consoles.a, consoles.b):
        answer = schema(console, token=token)
        assert answer.status_code == 200 and "title: Meshgate management API" in answer.text
        assert schema(console, token=token[::-1]).status_code == 401


def test_signing_out_on_one_console_signs_out_on_the_other(consoles) -> None:
    browser = sign_in(consoles.a)
    session_id = browser.cookies["sessionid"]
    assert overview(consoles.b, session_id).status_code == 200
    out = browser.post(consoles.a.url + "/logout/", timeout=10, allow_redirects=False,
                       data={"csrfmiddlewaretoken": browser.cookies["csrftoken"]})
    assert out.status_code == 302 and out.headers["Location"].startswith("/login/")
    for console in (consoles.a, consoles.b):
        after = overview(console, session_id)
        assert after.status_code == 302 and after.headers["Location"].startswith("/login/"), console.url
        assert schema(console, session_id).status_code in (401, 403)


def test_requests_do_not_leave_connections_open(consoles, postgres) -> None:
    """Under ASGI each request's thread opens its own connection: kept open (CONN_MAX_AGE > 0)
    they would pile up, one per request, until PostgreSQL's max_connections refuses more."""
    session_id = sign_in(consoles.b).cookies["sessionid"]

    def open_connections() -> int:
        with postgres.superuser() as connection:
            return connection.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = 'console_shared'"
                                      ).fetchone()[0]

    for _ in range(30):
        assert overview(consoles.b, session_id).status_code == 200
    wait_until(lambda: open_connections() <= 2, "the consoles' connections to close", timeout=10,
               describe=lambda: f"{open_connections()} open")


def test_a_console_with_a_secret_key_of_its_own_refuses_the_others_sessions(consoles, shared, redis_only,
                                                                             tmp_path_factory) -> None:
    """Why the replicas need one MESHGATE_CONSOLE_SECRET: the session is in the shared
    database, but signed with the key of the console that made it."""
    session_id = sign_in(consoles.a).cookies["sessionid"]
    env = {"MESHGATE_CONSOLE_DATABASE_URL": shared, "MESHGATE_CONSOLE_SECRET": ""}  # "": generated
    workdir = tmp_path_factory.mktemp("console-own-key")
    own_key = browser_tests.ConsoleProcesses(SimpleNamespace(redis=redis_only, nodes=[]), workdir, stomp=[],
                                             worker=False, env=env)
    try:
        wait_until(own_key.listening, "daphne to listen", timeout=30)
        assert overview(consoles.b, session_id).status_code == 200
        refused = overview(own_key, session_id)
        assert refused.status_code == 302 and refused.headers["Location"].startswith("/login/")
    finally:
        own_key.stop()
