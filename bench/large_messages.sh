#!/usr/bin/env bash
# Large messages, Meshgate and ActiveMQ 5.17 one after the other on this machine with
# the same load generator (bench/stomp_bench.py): 1 MiB and 16 MiB bodies through a
# queue, one producer and one consumer. Prints both tables (for docs/performance.md).
#   bench/large_messages.sh [REPEAT] [COUNT]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="$ROOT/.venv/bin/python"
REPEAT="${1:-3}"
COUNT="${2:-1}"
WORK="$(mktemp -d /tmp/meshgate-large.XXXXXX)"
SCENARIOS=(queue-1m queue-16m)
free_port() { "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
bench() {  # label port pid
    "$PY" "$ROOT/bench/stomp_bench.py" --port "$2" --broker-pid "$3" --label "$1" --count "$COUNT" \
        --warmup 0 --wait-quiet 60 --repeat "$REPEAT" --scenario "${SCENARIOS[@]}"
}

port=$(free_port)
"$ROOT/.venv/bin/meshgate" broker --name bench --stomp "127.0.0.1:$port" --data "$WORK/mg" \
    --log-level WARNING > "$WORK/meshgate.log" 2>&1 &
pid=$!
until grep -qs "listening on" "$WORK/meshgate.log"; do sleep 0.1; done
bench meshgate "$port" "$pid" | tee "$WORK/meshgate.txt"
kill "$pid"; wait "$pid" || true

port=$(free_port)
"$ROOT/bench/activemq.sh" start "$WORK/amq" "$port" >/dev/null
bench activemq-5.17 "$port" "$(cat "$WORK/amq/activemq.pid")" | tee "$WORK/activemq.txt"
"$ROOT/bench/activemq.sh" stop "$WORK/amq"
echo "results in $WORK"
