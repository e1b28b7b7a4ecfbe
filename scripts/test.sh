#!/usr/bin/env bash
# Install everything the tests need (apt + pip) and run the whole suite:
# lint, then unit, protocol and end-to-end tests. Extra arguments go to pytest.
source "$(dirname "$0")/bootstrap.sh"
apt_install redis-server
ensure_venv test
cd "$ROOT"
"$VENV/bin/ruff" check .
exec "$VENV/bin/python" -m pytest "$@"
