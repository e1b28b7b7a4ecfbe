"""``manage.py consoleuser NAME [--admin] [--password-stdin]``: add a console user (a
viewer, or an administrator with ``--admin``) or change one's password and role."""

from __future__ import annotations

import getpass
import sys

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand, CommandError

from console.api.permissions import ADMINS


class Command(BaseCommand):
    help = "Add a console user (a viewer; --admin: an administrator) or change one's password and role."

    def add_arguments(self, parser) -> None:
        parser.add_argument("username")
        parser.add_argument("--admin", action="store_true", help="may act, not only look")
        parser.add_argument("--password-stdin", action="store_true", help="read the password from standard input")

    def handle(self, *args, username: str, admin: bool = False, password_stdin: bool = False, **options) -> None:
        password = sys.stdin.readline().rstrip("\n") if password_stdin else getpass.getpass("password: ")
        if not password:
            raise CommandError("empty password")
        user, created = get_user_model().objects.get_or_create(username=username)
        user.set_password(password)
        user.save()
        admins, _ = Group.objects.get_or_create(name=ADMINS)
        if admin:
            user.groups.add(admins)
        else:
            user.groups.remove(admins)
        role = "an administrator" if admin else "a viewer"
        self.stdout.write(f"{'added' if created else 'updated'} {username}, {role}")
