#!/usr/bin/env bash
# Measure Meshgate and ActiveMQ 5.17 one after the other on this machine with the
# same load generator, and print both tables (for docs/performance.md).
#   bench/side_by_side.sh [REPEAT] [COUNT]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="$ROOT/.venv/bin/python"
REPEAT="${1:-3}"
COUNT="${2:-1}"
WORK="$(mktemp -d /tmp/meshgate-bench.XXXXXX)"
SCENARIOS=(queue-256 queue-256-persistent queue-64k client-individual topic-fanout)
bench() {  # label port pid [extra...]
    local label=$1 port=$2 pid=$3; shift 3
    "$PY" "$ROOT/bench/stomp_bench.py" --port "$port" --broker-pid "$pid" --label "$label" \
        --count "$COUNT" --wait-quiet 60 "$@"
}
free_port() { "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

meshgate() {  # fresh node each time: idle-connections wants a clean heap
    local port; port=$(free_port)
    rm -rf "$WORK/mg"
    "$ROOT/.venv/bin/meshgate" broker --name bench --stomp "127.0.0.1:$port" --data "$WORK/mg" \
        --log-level WARNING > "$WORK/meshgate.log" 2>&1 &
    MG_PID=$!
    until grep -q "listening on" "$WORK/meshgate.log"; do sleep 0.1; done
    MG_PORT=$port
}

meshgate
bench meshgate "$MG_PORT" "$MG_PID" --repeat "$REPEAT" --scenario "${SCENARIOS[@]}" | tee "$WORK/meshgate.txt"
kill "$MG_PID"; wait "$MG_PID" || true
meshgate
bench meshgate "$MG_PORT" "$MG_PID" --warmup 0 --scenario idle-connections | tee -a "$WORK/meshgate.txt"
kill "$MG_PID"; wait "$MG_PID" || true

AMQ_PORT=$(free_port)
"$ROOT/bench/activemq.sh" start "$WORK/amq" "$AMQ_PORT" >/dev/null
bench activemq-5.17 "$AMQ_PORT" "$(cat "$WORK/amq/activemq.pid")" --repeat "$REPEAT" --scenario "${SCENARIOS[@]}" \
    | tee "$WORK/activemq.txt"
"$ROOT/bench/activemq.sh" stop "$WORK/amq"
rm -rf "$WORK/amq"
"$ROOT/bench/activemq.sh" start "$WORK/amq" "$AMQ_PORT" >/dev/null
bench activemq-5.17 "$AMQ_PORT" "$(cat "$WORK/amq/activemq.pid")" --warmup 0 --scenario idle-connections \
    | tee -a "$WORK/activemq.txt"
"$ROOT/bench/activemq.sh" stop "$WORK/amq"
echo "results in $WORK"
