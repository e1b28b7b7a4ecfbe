#!/usr/bin/env bash
# Large messages, Meshgate and ActiveMQ 5.17 one after the other on this machine with
# the same load generator (bench/stomp_bench.py): 1 MiB and 16 MiB bodies through a
# queue, one producer and one consumer. Prints both tables (for docs/performance.md).
#   bench/large_messages.sh [REPEAT] [COUNT]
set -euo pipefail
source "$(dirname "$0")/common.sh"
REPEAT="${1:-3}"
COUNT="${2:-1}"
WORK="$(mktemp -d /tmp/meshgate-large.XXXXXX)"
SCENARIOS=(queue-1m queue-16m)
trap stop_started EXIT
bench() {  # label port pid
    "$PY" "$ROOT/bench/stomp_bench.py" --port "$2" --broker-pid "$3" --label "$1" --count "$COUNT" \
        --warmup 0 --wait-quiet 60 --repeat "$REPEAT" --scenario "${SCENARIOS[@]}"
}

port=$(free_port)
start_meshgate "$WORK/meshgate.log" "$port" --name bench --stomp "127.0.0.1:$port" --data "$WORK/mg" --log-level WARNING
bench meshgate "$port" "$MG_PID" | tee "$WORK/meshgate.txt"
stop_started

port=$(free_port)
"$ROOT/bench/activemq.sh" start "$WORK/amq" "$port" >/dev/null
bench activemq-5.17 "$port" "$(cat "$WORK/amq/activemq.pid")" | tee "$WORK/activemq.txt"
"$ROOT/bench/activemq.sh" stop "$WORK/amq"
echo "results in $WORK"
