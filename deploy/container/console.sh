#!/bin/bash
# The console in the image (installed as /usr/local/bin/meshgate-console); run it under tini:
#   podman run --entrypoint tini meshgate:VERSION -- meshgate-console [--bind 0.0.0.0] [--port 8161]
# Migrates its database, makes the first administrator (password in $MESHGATE_CONSOLE_DATA),
# then runs the live worker (meshwatch) and the web server (daphne) side by side. SIGTERM or
# SIGINT stops both (exit 0); when either ends by itself the other is stopped and its status is
# the script's.
# Settings (environment): docs/console.md.
set -euo pipefail
PORT=8161
BIND=0.0.0.0
while [ $# -gt 0 ]; do
    case "$1" in
        --port) PORT="$2"; shift 2 ;;
        --bind) BIND="$2"; shift 2 ;;
        *) echo "meshgate-console: unknown argument $1" >&2; exit 2 ;;
    esac
done
cd /opt/meshgate/src   # console/settings.py finds static/ beside the console package
python -m django migrate --noinput --settings console.settings >/dev/null
python -m django ensureadmin --settings console.settings
python -m django meshwatch --settings console.settings &
worker=$!
python -m daphne -b "$BIND" -p "$PORT" console.asgi:application &
web=$!
stopping=0
stop() { kill -TERM "$worker" "$web" 2>/dev/null || true; }
trap 'stopping=1; stop' TERM INT
status=0
wait -n "$worker" "$web" || status=$?
stop
wait "$worker" "$web" 2>/dev/null || true
[ "$stopping" = 1 ] && exit 0   # asked to stop: both were told to
exit "$status"
