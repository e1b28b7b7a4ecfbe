#!/usr/bin/env bash
# Measure Meshgate and ActiveMQ 5.17 one after the other on this machine with the
# same load generator, and print both tables (for docs/performance.md).
#   bench/side_by_side.sh [REPEAT] [COUNT]
set -euo pipefail
source "$(dirname "$0")/common.sh"
REPEAT="${1:-3}"
COUNT="${2:-1}"
WORK="$(mktemp -d /tmp/meshgate-bench.XXXXXX)"
SCENARIOS=(queue-256 queue-256-persistent queue-64k client-individual topic-fanout)
trap stop_started EXIT
bench() {  # label port pid [extra...]
    local label=$1 port=$2 pid=$3; shift 3
    "$PY" "$ROOT/bench/stomp_bench.py" --port "$port" --broker-pid "$pid" --label "$label" \
        --count "$COUNT" --wait-quiet 60 "$@"
}

meshgate() {  # fresh node each time: idle-connections wants a clean heap
    MG_PORT=$(free_port)
    rm -rf "$WORK/mg"
    start_meshgate "$WORK/meshgate.log" "$MG_PORT" --name bench --stomp "127.0.0.1:$MG_PORT" --data "$WORK/mg" \
        --log-level WARNING
}

meshgate
bench meshgate "$MG_PORT" "$MG_PID" --repeat "$REPEAT" --scenario "${SCENARIOS[@]}" | tee "$WORK/meshgate.txt"
stop_started
meshgate
bench meshgate "$MG_PORT" "$MG_PID" --warmup 0 --scenario idle-connections | tee -a "$WORK/meshgate.txt"
stop_started

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
