#!/usr/bin/env bash
# Install what is needed and run Meshgate on embedded defaults: one broker node
# on 127.0.0.1:61613 with its store under ./data/<name>. Extra arguments go to
# `meshgate broker` (e.g. --stomp 127.0.0.1:61700).
source "$(dirname "$0")/bootstrap.sh"
ensure_venv run
cd "$ROOT"
exec "$VENV/bin/meshgate" broker "$@"
