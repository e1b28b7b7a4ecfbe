#!/usr/bin/env bash
# Measure Meshgate's AMQP 0-9-1 listener and RabbitMQ one after the other on this
# machine with the same load generator (bench/amqp_bench.py), and print both tables.
#   bench/amqp_side_by_side.sh [REPEAT] [COUNT]
# REPEAT runs per scenario (default 3, the table shows the median), COUNT messages
# per scenario (default 100000). If `meshgate broker` has no --amqp option yet,
# only RabbitMQ is measured. AMQP_USER / AMQP_PASSWORD (default guest/guest) are
# the credentials used for both brokers; MESHGATE_ARGS adds options to `meshgate
# broker` (e.g. "--set broker.memory_limit=1GiB": with the default 256 MiB,
# consume-prefetch's pre-load of more than ~400k x 256 B waits for room forever).
set -euo pipefail
source "$(dirname "$0")/common.sh"
REPEAT="${1:-3}"
COUNT="${2:-100000}"
WORK="$(mktemp -d /tmp/meshgate-amqp-bench.XXXXXX)"
SCENARIOS=(publish-256 publish-256-confirms consume-prefetch)
RMQ_STARTED=""

bench() {  # label port pid [extra...]
    local label=$1 port=$2 pid=$3; shift 3
    "$PY" "$ROOT/bench/amqp_bench.py" --port "$port" --broker-pid "$pid" --label "$label" \
        --user "${AMQP_USER:-guest}" --password "${AMQP_PASSWORD:-guest}" \
        --count "$COUNT" --repeat "$REPEAT" --wait-quiet 60 --scenario "${SCENARIOS[@]}" "$@"
}
cleanup() {
    # Only what this script started, by PID.
    stop_started
    if [ -n "$RMQ_STARTED" ]; then
        "$ROOT/bench/rabbitmq.sh" stop "$WORK/rmq" || true
    fi
}
trap cleanup EXIT

meshgate() {  # a fresh node: no state left over from earlier runs
    local stomp_port
    stomp_port=$(free_port)
    MG_AMQP_PORT=$(free_port)
    rm -rf "$WORK/mg"
    # shellcheck disable=SC2086 # MESHGATE_ARGS is a list of options
    start_meshgate "$WORK/meshgate.log" "$MG_AMQP_PORT" --name bench --stomp "127.0.0.1:$stomp_port" \
        --amqp "127.0.0.1:$MG_AMQP_PORT" --data "$WORK/mg" --log-level WARNING ${MESHGATE_ARGS:-}
}

status=0
if "$MESHGATE" broker --help | grep -q -- --amqp; then
    # A node that fails to start still leaves the RabbitMQ figures to take.
    if meshgate; then
        bench meshgate "$MG_AMQP_PORT" "$MG_PID" | tee "$WORK/meshgate.txt" || status=1
    else
        echo "note: meshgate failed to start; measuring RabbitMQ only" | tee "$WORK/meshgate.txt"
        status=1
    fi
    stop_started
else
    echo "note: 'meshgate broker' has no --amqp option yet (no AMQP listener); measuring RabbitMQ only" \
        | tee "$WORK/meshgate.txt"
fi

RMQ_PORT=$(free_port)
RMQ_STARTED=1
"$ROOT/bench/rabbitmq.sh" start "$WORK/rmq" "$RMQ_PORT"
RMQ_LABEL="rabbitmq-$(dpkg-query -W -f '${Version}' rabbitmq-server | cut -d- -f1)"
bench "$RMQ_LABEL" "$RMQ_PORT" "$(cat "$WORK/rmq/rabbitmq.pid")" | tee "$WORK/rabbitmq.txt" || status=1
"$ROOT/bench/rabbitmq.sh" stop "$WORK/rmq"
RMQ_STARTED=""

# Both tables as one, for docs/performance.md: the header once, then every row.
echo
grep -h '^|' "$WORK/meshgate.txt" "$WORK/rabbitmq.txt" | awk '!(/^\| broker \|/ || /^\|---/) || !seen[$0]++'
echo "results in $WORK"
exit $status
