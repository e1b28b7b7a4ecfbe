"""``manage.py ensureadmin``: make sure there is an administrator to sign in with.

If no superuser exists, create one (``--username``, default ``admin``) with a
generated password, kept in ``<data dir>/admin-password`` (readable by the owner
only). Prints how to sign in either way."""

from __future__ import annotations

import secrets

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Create the first administrator (with a generated password) unless one exists."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--username", default="admin")

    def handle(self, *args, username: str = "admin", **options) -> None:
        users = get_user_model()
        password_file = settings.DATA_DIR / "admin-password"
        if not users.objects.filter(is_superuser=True).exists():
            password = secrets.token_urlsafe(12)
            users.objects.create_superuser(username, password=password)
            settings.DATA_DIR.mkdir(parents=True, exist_ok=True)
            password_file.write_text(password + "\n")
            password_file.chmod(0o600)
        user = users.objects.filter(is_superuser=True).order_by("id").first()
        if password_file.exists():
            self.stdout.write(f"sign in as {user.get_username()} with the password in {password_file} "
                              f"({password_file.read_text().strip()})")
        else:
            self.stdout.write(f"sign in as {user.get_username()} (its password was set by hand)")
