#!/usr/bin/env bash
# A/B two builds' AMQP path on this machine in one run, rounds interleaved (this
# machine's speed drifts 30 % within a day: only rounds taken side by side compare).
#
#   bench/amqp_ab_builds.sh BEFORE_DIR AFTER_DIR [--rounds N] [--scenario NAME] [--count N]
#
# BEFORE_DIR and AFTER_DIR are checkouts (e.g. `git archive REV | tar -x -C DIR`); each
# runs on this checkout's venv with its own code first on the path. Per round, in an
# order that alternates, one fresh node per build measured by amqp_bench.py (this
# checkout's), 3 runs each; prints the table lines labelled before/after.
set -euo pipefail
source "$(dirname "$0")/common.sh"
[ $# -ge 2 ] || { sed -n '2,10p' "$0"; exit 2; }
BEFORE=$(cd "$1" && pwd)
AFTER=$(cd "$2" && pwd)
shift 2
ROUNDS=3 SCENARIO=publish-256 COUNT=200000
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) ROUNDS=$2; shift 2 ;;
        --scenario) SCENARIO=$2; shift 2 ;;
        --count) COUNT=$2; shift 2 ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
done
WORK="$(mktemp -d /tmp/meshgate-amqp-ab.XXXXXX)"
trap stop_started EXIT
build_commands "$BEFORE" "$AFTER" "$WORK"
for round in $(seq "$ROUNDS"); do
    order="before after"; [ $((round % 2)) = 0 ] && order="after before"
    for label in $order; do
        stomp=$(free_port) amqp=$(free_port)
        MESHGATE="$WORK/meshgate-$label" start_meshgate "$WORK/$label-$round.log" "$amqp" --name ab \
            --stomp "127.0.0.1:$stomp" --amqp "127.0.0.1:$amqp" --data "$WORK/$label-$round" --log-level WARNING
        "$PY" "$ROOT/bench/amqp_bench.py" --port "$amqp" --broker-pid "$MG_PID" --label "$label" \
            --scenario "$SCENARIO" --count "$COUNT" --repeat 3 | grep "^| $label"
        stop_started
    done
done
