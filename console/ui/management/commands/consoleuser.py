"""``manage.py consoleuser NAME [--admin] [--password-stdin]``: add a console user (a
viewer, or an administrator with ``--admin``) or change one's password and role. The
password must pass Django's validators (``AUTH_PASSWORD_VALIDATORS``: not too short,
common, all digits or like the user name); a refused one changes nothing."""

from __future__ import annotations

import getpass
import sys

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
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
        users = get_user_model()
        user = users.objects.filter(username=username).first()
        created = user is None
        if created:
            user = users(username=username)
        try:
            validate_password(password, user)
        except ValidationError as error:
            raise CommandError("password refused: " + " ".join(error.messages)) from None
        user.set_password(password)
        user.save()
        admins, _ = Group.objects.get_or_create(name=ADMINS)
        if admin:
            user.groups.add(admins)
        else:
            user.groups.remove(admins)
        role = "an administrator" if admin else "a viewer"
        self.stdout.write(f"{'added' if created else 'updated'} {username}, {role}")
