"""Console users: the first administrator made at start, and viewers and admins added
from the command line, with the right to act or not, and passwords Django's validators
accept."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from console.api.permissions import is_admin

pytestmark = pytest.mark.django_db


def test_ensureadmin_makes_one_administrator_once(settings, tmp_path):
    from django.contrib.auth.models import User

    settings.DATA_DIR = tmp_path
    first = StringIO()
    call_command("ensureadmin", stdout=first)
    password = (tmp_path / "admin-password").read_text().strip()
    assert password in first.getvalue() and oct((tmp_path / "admin-password").stat().st_mode)[-3:] == "600"
    admin = User.objects.get(username="admin")
    assert admin.check_password(password) and is_admin(admin)
    again = StringIO()
    call_command("ensureadmin", stdout=again)
    assert User.objects.filter(is_superuser=True).count() == 1 and password in again.getvalue()


def test_consoleuser_adds_viewers_and_admins(monkeypatch):
    from django.contrib.auth.models import User

    monkeypatch.setattr("sys.stdin", StringIO("viewer-secret\n"))
    call_command("consoleuser", "vera", password_stdin=True, stdout=StringIO())
    monkeypatch.setattr("sys.stdin", StringIO("admin-secret\n"))
    call_command("consoleuser", "ada", admin=True, password_stdin=True, stdout=StringIO())
    vera, ada = User.objects.get(username="vera"), User.objects.get(username="ada")
    assert vera.check_password("viewer-secret") and not is_admin(vera)
    assert ada.check_password("admin-secret") and is_admin(ada)
    monkeypatch.setattr("sys.stdin", StringIO("new-secret\n"))
    call_command("consoleuser", "ada", password_stdin=True, stdout=StringIO())  # no --admin: back to a viewer
    ada.refresh_from_db()
    assert ada.check_password("new-secret") and not is_admin(ada)


@pytest.mark.parametrize(("password", "why"), [
    ("s3cret", "too short"),
    ("password123", "too common"),
    ("8675309112358", "entirely numeric"),
    ("veronica-m", "too similar to the username"),
])
def test_consoleuser_refuses_weak_passwords_and_changes_nothing(monkeypatch, password, why):
    from django.contrib.auth.models import User

    monkeypatch.setattr("sys.stdin", StringIO(password + "\n"))
    with pytest.raises(CommandError, match=why) as refused:
        call_command("consoleuser", "veronica-m", password_stdin=True, stdout=StringIO())
    assert password not in str(refused.value)
    assert not User.objects.filter(username="veronica-m").exists()  # not made with a weak password
    monkeypatch.setattr("sys.stdin", StringIO("a-long-passphrase\n"))
    call_command("consoleuser", "veronica-m", password_stdin=True, stdout=StringIO())
    monkeypatch.setattr("sys.stdin", StringIO(password + "\n"))
    with pytest.raises(CommandError, match=why):
        call_command("consoleuser", "veronica-m", admin=True, password_stdin=True, stdout=StringIO())
    user = User.objects.get(username="veronica-m")
    assert user.check_password("a-long-passphrase") and not is_admin(user)  # neither password nor role changed
