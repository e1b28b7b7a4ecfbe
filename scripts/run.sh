#!/usr/bin/env bash
# Install what is needed and run Meshgate on embedded defaults: a local mesh of
# three linked nodes (STOMP on 127.0.0.1:61613, :61623, :61633; stores under
# ./data/local-mesh) writing their metrics to a redis-server of its own, the web
# console, and the metrics pipeline on local Spark (hence the Java runtime).
# Extra arguments go to `meshgate local-mesh` (e.g. --nodes 1).
source "$(dirname "$0")/bootstrap.sh"
apt_install redis-server default-jre-headless
ensure_venv run
cd "$ROOT"
exec "$VENV/bin/meshgate" local-mesh "$@"
