#!/usr/bin/env bash
# What tracing a 1 % sample costs on a real node over sockets (docs/performance.md,
# "Message journeys, on"): one node with [journeys] on, stomp_bench.py's queue-256 on one
# queue, run after run, alternating (in an order that swaps each round) between nothing
# armed (`meshgate trace-next Q --count 0`) and a 1 % sample (`--every 100`). With
# --paired, bench/journeys_paired.py's short paired rounds instead (the node's CPU a slice).
#
#   bench/journeys_sockets.sh [--rounds N] [--count SCALE] [--every K]
#   bench/journeys_sockets.sh --paired [--rounds N] [--slice S] [--every K]
set -euo pipefail
source "$(dirname "$0")/common.sh"
ROUNDS=5
COUNT=1
EVERY=100
PAIRED=
SLICE=5000
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) ROUNDS=$2; shift 2 ;;
        --count) COUNT=$2; shift 2 ;;
        --every) EVERY=$2; shift 2 ;;
        --paired) PAIRED=1; shift ;;
        --slice) SLICE=$2; shift 2 ;;
        *) sed -n '2,9p' "$0"; exit 2 ;;
    esac
done
WORK="$(mktemp -d /tmp/meshgate-journeys.XXXXXX)"
trap stop_started EXIT
PORT=$(free_port)
QUEUE=bench-journeys
start_meshgate "$WORK/node.log" "$PORT" --name journeys --stomp "127.0.0.1:$PORT" --data "$WORK/data" \
    --log-level WARNING --set journeys.enabled=true

if [ -n "$PAIRED" ]; then
    "$PY" "$ROOT/bench/journeys_paired.py" --port "$PORT" --broker-pid "$MG_PID" --rounds "$ROUNDS" \
        --slice "$SLICE" --every "$EVERY" --queue "$QUEUE"
    exit
fi

arm() {  # EVERY (0: disarm)
    local how=(--every "$1" --for 1h)
    [ "$1" = 0 ] && how=(--count 0)
    "$MESHGATE" trace-next "/queue/$QUEUE" "${how[@]}" --stomp "127.0.0.1:$PORT" >/dev/null
}

measure() {  # LABEL
    "$PY" "$ROOT/bench/stomp_bench.py" --port "$PORT" --broker-pid "$MG_PID" --label "$1" --count "$COUNT" \
        --wait-quiet 30 --warmup 0 --destination "$QUEUE" --scenario queue-256 | grep '^|' | tail -n 1
}

"$PY" "$ROOT/bench/stomp_bench.py" --port "$PORT" --broker-pid "$MG_PID" --count "$COUNT" \
    --destination "$QUEUE" --scenario queue-256 >/dev/null  # warm-up (its warm-up run included)
for round in $(seq 1 "$ROUNDS"); do
    order=(0 "$EVERY")
    [ $((round % 2)) -eq 0 ] && order=("$EVERY" 0)
    for every in "${order[@]}"; do
        arm "$every"
        if [ "$every" = 0 ]; then measure "nothing-armed"; else measure "one-in-$every"; fi
    done
done
