#!/bin/sh
# The console in the image (installed as /usr/local/bin/meshgate-console); run it under tini:
#   podman run --entrypoint tini meshgate:VERSION -- meshgate-console [--port 8161]
# Migrates its database, makes the first administrator (password in $MESHGATE_CONSOLE_DATA),
# then runs the live worker (meshwatch) and the web server (daphne) side by side. SIGTERM
# (from tini) stops both; the script exits when either ends. Settings: docs/console.md.
set -eu
PORT=8161
BIND=0.0.0.0
while [ $# -gt 0 ]; do
    case "$1" in
        --port) PORT="$2"; shift 2 ;;
        --bind) BIND="$2"; shift 2 ;;
        *) echo "meshgate-console: unknown argument $1" >&2; exit 2 ;;
    esac
done
cd /opt/meshgate/src
python -m django migrate --noinput --settings console.settings >/dev/null
python -m django ensureadmin --settings console.settings
python -m django meshwatch --settings console.settings &
worker=$!
python -m daphne -b "$BIND" -p "$PORT" console.asgi:application &
web=$!
trap 'kill -TERM "$worker" "$web" 2>/dev/null' TERM INT
# Wait for either to end (a signal interrupts wait too), then stop the other.
while kill -0 "$worker" 2>/dev/null && kill -0 "$web" 2>/dev/null; do
    wait "$web" 2>/dev/null || true
done
kill -TERM "$worker" "$web" 2>/dev/null || true
wait "$worker" 2>/dev/null || true
wait "$web" 2>/dev/null || status=$?
exit "${status:-0}"
