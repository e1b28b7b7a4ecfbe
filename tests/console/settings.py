"""The console's settings for the test run: its data dir (database, secret key)
is a temporary one. pytest-django loads this (pyproject.toml)."""

import os
import tempfile

os.environ.setdefault("MESHGATE_CONSOLE_DATA", tempfile.mkdtemp(prefix="meshgate-console-test-"))

from console.settings import *  # noqa: E402,F403

# Users made by tests sign in in microseconds, not a quarter of a second each.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
