#!/usr/bin/env bash
# Install everything the tests need (apt: redis-server, postgresql for the console's
# PostgreSQL tests (no service is started: the tests run their own server), chromium for the console's
# browser tests, prometheus for promtool, a Java runtime for Spark, buildah, podman and
# debootstrap for the image's test; pip: the project with its test extra) and
# run the whole suite: lint, the type check (scripts/typecheck.py), then unit, protocol,
# end-to-end, console and browser tests. Extra arguments go to pytest.
source "$(dirname "$0")/bootstrap.sh"
apt_install redis-server postgresql chromium prometheus default-jre-headless buildah podman debootstrap
ensure_venv test
cd "$ROOT"
"$VENV/bin/ruff" check .
"$VENV/bin/python" scripts/typecheck.py
exec "$VENV/bin/python" -m pytest "$@"
