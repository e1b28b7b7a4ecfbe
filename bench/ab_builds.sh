#!/usr/bin/env bash
# A/B two builds of Meshgate on this machine in one run, interleaved (this machine's
# speed drifts 30 % within a day: only rounds taken side by side compare).
#
#   bench/ab_builds.sh BEFORE_DIR AFTER_DIR [--rounds N] [--count SCALE] [--no-pair]
#
# BEFORE_DIR and AFTER_DIR are checkouts (e.g. `git archive REV | tar -x -C DIR`); each
# runs on this checkout's venv with its own code first on the path. Per round, in an
# order that alternates (A B, then B A, ...): one fresh node per build measured with
# stomp_bench.py (queue-256, queue-256-persistent, topic-fanout), then a pair of nodes
# per build with mesh_pair.sh --no-activemq (producer on A, consumer on B). The same
# load generators (this checkout's) measure both builds. Prints every table line,
# labelled before/after, and leaves them in WORK/*.txt.
set -euo pipefail
source "$(dirname "$0")/common.sh"
[ $# -ge 2 ] || { sed -n '2,14p' "$0"; exit 2; }
BEFORE=$(cd "$1" && pwd)
AFTER=$(cd "$2" && pwd)
shift 2
ROUNDS=3
COUNT=1
PAIR=1
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) ROUNDS=$2; shift 2 ;;
        --count) COUNT=$2; shift 2 ;;
        --no-pair) PAIR=0; shift ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
done
WORK="$(mktemp -d /tmp/meshgate-ab.XXXXXX)"
trap stop_started EXIT

build_commands "$BEFORE" "$AFTER" "$WORK"

single() {  # label
    local label=$1 port
    port=$(free_port)
    rm -rf "$WORK/data"
    MESHGATE="$WORK/meshgate-$label" start_meshgate "$WORK/$label.log" "$port" --name ab --stomp "127.0.0.1:$port" \
        --data "$WORK/data" --log-level WARNING
    "$PY" "$ROOT/bench/stomp_bench.py" --port "$port" --broker-pid "$MG_PID" --label "$label" --count "$COUNT" \
        --wait-quiet 30 --scenario queue-256 queue-256-persistent topic-fanout | tee -a "$WORK/single.txt"
    stop_started
}

pair() {  # label
    MESHGATE="$WORK/meshgate-$1" "$ROOT/bench/mesh_pair.sh" --no-activemq --repeat 1 --count "$COUNT" \
        --wait-quiet 30 2>&1 | sed "s/^/$1 /" | tee -a "$WORK/pair.txt"
}

for round in $(seq 1 "$ROUNDS"); do
    order=(before after)
    [ $((round % 2)) -eq 0 ] && order=(after before)
    for label in "${order[@]}"; do
        echo "== round $round: $label"
        single "$label"
        [ "$PAIR" = 1 ] && pair "$label"
    done
done
echo "results in $WORK"
