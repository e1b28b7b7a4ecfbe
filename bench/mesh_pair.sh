#!/usr/bin/env bash
# Forwarding through a pair of brokers: produce on node A, consume on node B.
#
#   bench/mesh_pair.sh [--count SCALE] [--repeat N] [--wait-quiet S] [--no-activemq] [--profile]
#   bench/mesh_pair.sh --tls [...]   # plaintext and TLS pairs side by side: bench/mesh_pair_tls.sh
#
# Runs queue-256 and queue-256-persistent (100k x 256 B each at --count 1)
#   1. through two Meshgate nodes linked by a static mesh (A lists B in mesh.static),
#   2. on one standalone Meshgate node,
#   3. through two ActiveMQ 5.17 brokers joined by a duplex networkConnector,
#   4. on one ActiveMQ broker,
# then prints the four tables and a summary: pair / single for each broker and
# Meshgate pair / ActiveMQ pair. Everything listens on 127.0.0.1 only, on free ports.
#
# The consumer subscribes on B first (with a receipt) and the producer starts on A
# 1 s later (stomp_bench.py --settle, the default when --consume-port differs), so
# B's demand has reached A before the first SEND. Every broker is started fresh.
#
# --profile: after the measured Meshgate pair runs, run each scenario once more
# with py-spy attached to both nodes; raw (collapsed-stack) profiles are written
# to WORK/profile-{a,b}-SCENARIO.txt. Not part of the measured figures.
set -euo pipefail
source "$(dirname "$0")/common.sh"
for arg in "$@"; do
    if [ "$arg" = --tls ]; then  # the other options pass on as they are
        args=()
        for a in "$@"; do [ "$a" = --tls ] || args+=("$a"); done
        exec "$ROOT/bench/mesh_pair_tls.sh" "${args[@]}"
    fi
done
PYSPY="$ROOT/.venv/bin/py-spy"
pair_options 21 "$@"
SCENARIOS=(queue-256 queue-256-persistent)
WORK="$(mktemp -d /tmp/meshgate-pair.XXXXXX)"
FAILED=0

trap stop_started_and_activemq EXIT

mesh_node() {  # name config_file_or_empty stomp_port -> sets MG_PID
    local name=$1 config=$2 port=$3 args=()
    [ -n "$config" ] && args=(--config "$config")
    start_meshgate "$WORK/$name.log" "$port" --name "$name" --stomp "127.0.0.1:$port" --data "$WORK/data-$name" \
        "${args[@]}"
}

# Which code the Meshgate nodes run (they load it when they start, just below).
CODE="$(git -C "$ROOT" log -1 --format='%h %ad %s' --date=format:'%Y-%m-%d %H:%M' 2>/dev/null || echo unknown)"
DIRTY="$(git -C "$ROOT" status --porcelain -- model gateway mesh metrics management meshgate 2>/dev/null | wc -l)"
echo "meshgate code: $CODE ($DIRTY uncommitted file(s) under the code packages)" | tee "$WORK/code.txt"

# ---------------------------------------------------------------- Meshgate pair
PASSWORD="$("$PY" -c 'import secrets; print(secrets.token_urlsafe(32))')"
MG_A_STOMP=$(free_port); MG_B_STOMP=$(free_port); MG_B_LINK=$(free_port)
umask 077  # the configs hold the cluster password
cat >"$WORK/mg-b.toml" <<EOF
[mesh]
bind = "127.0.0.1:$MG_B_LINK"
cluster_password = "$PASSWORD"
EOF
cat >"$WORK/mg-a.toml" <<EOF
[mesh]
bind = "127.0.0.1:0"
static = ["127.0.0.1:$MG_B_LINK"]
cluster_password = "$PASSWORD"
EOF
umask 022
mesh_node mg-b "$WORK/mg-b.toml" "$MG_B_STOMP"; MG_B_PID=$MG_PID
mesh_node mg-a "$WORK/mg-a.toml" "$MG_A_STOMP"; MG_A_PID=$MG_PID
wait_for "$WORK/mg-a.log" "mesh: linked with mg-b" "$MG_A_PID" "meshgate mg-a"
wait_for "$WORK/mg-b.log" "mesh: linked with mg-a" "$MG_B_PID" "meshgate mg-b"
pair_bench "$WORK/meshgate-pair.txt" meshgate-pair "$MG_A_STOMP" "$MG_B_STOMP" "$MG_A_PID" "$MG_B_PID" -- \
    --repeat "$REPEAT" --scenario "${SCENARIOS[@]}"
if [ "$PROFILE" = 1 ]; then
    for sc in "${SCENARIOS[@]}"; do
        "$PYSPY" record --rate 500 --nonblocking -p "$MG_A_PID" -f raw -o "$WORK/profile-a-$sc.txt" >"$WORK/py-spy-a-$sc.log" 2>&1 &
        SPY_A=$!
        "$PYSPY" record --rate 500 --nonblocking -p "$MG_B_PID" -f raw -o "$WORK/profile-b-$sc.txt" >"$WORK/py-spy-b-$sc.log" 2>&1 &
        SPY_B=$!
        sleep 1
        pair_bench "$WORK/meshgate-pair-profiled-$sc.txt" meshgate-pair-profiled "$MG_A_STOMP" "$MG_B_STOMP" \
            "$MG_A_PID" "$MG_B_PID" -- --warmup 0 --scenario "$sc"
        kill -INT "$SPY_A" "$SPY_B" 2>/dev/null || true
        wait "$SPY_A" "$SPY_B" || true
    done
fi
grep -h "mesh:" "$WORK/mg-a.log" "$WORK/mg-b.log" | grep -v "linked with" | sed 's/^/  (node log) /' || true
stop_pid "$MG_A_PID"; stop_pid "$MG_B_PID"

# -------------------------------------------------------------- Meshgate single
MG_PORT=$(free_port)
mesh_node mg-single "" "$MG_PORT"; MG_SINGLE_PID=$MG_PID
pair_bench "$WORK/meshgate-single.txt" meshgate-single "$MG_PORT" "$MG_PORT" "$MG_SINGLE_PID" -- \
    --repeat "$REPEAT" --scenario "${SCENARIOS[@]}"
stop_pid "$MG_SINGLE_PID"

# ---------------------------------------------------------------------- ActiveMQ
if [ "$ACTIVEMQ" = 1 ]; then
    AMQ_A=$(free_port); AMQ_B=$(free_port); AMQ_A_OW=$(free_port); AMQ_B_OW=$(free_port)
    AMQ_DIRS+=("$WORK/amq-b"); "$ROOT/bench/activemq.sh" start "$WORK/amq-b" "$AMQ_B" "$AMQ_B_OW"
    AMQ_DIRS+=("$WORK/amq-a"); "$ROOT/bench/activemq.sh" start "$WORK/amq-a" "$AMQ_A" "$AMQ_A_OW" "$AMQ_B_OW"
    pair_bench "$WORK/activemq-pair.txt" activemq-pair "$AMQ_A" "$AMQ_B" \
        "$(cat "$WORK/amq-a/activemq.pid")" "$(cat "$WORK/amq-b/activemq.pid")" -- \
        --repeat "$REPEAT" --scenario "${SCENARIOS[@]}"
    "$ROOT/bench/activemq.sh" stop "$WORK/amq-a"
    "$ROOT/bench/activemq.sh" stop "$WORK/amq-b"

    AMQ=$(free_port)
    AMQ_DIRS+=("$WORK/amq"); "$ROOT/bench/activemq.sh" start "$WORK/amq" "$AMQ"
    pair_bench "$WORK/activemq-single.txt" activemq-single "$AMQ" "$AMQ" "$(cat "$WORK/amq/activemq.pid")" -- \
        --repeat "$REPEAT" --scenario "${SCENARIOS[@]}"
    "$ROOT/bench/activemq.sh" stop "$WORK/amq"
fi

# ----------------------------------------------------------------------- report
echo
echo "## tables (count scale $COUNT, repeat $REPEAT)"
cat "$WORK/code.txt"
for f in meshgate-pair meshgate-single activemq-pair activemq-single; do
    [ -f "$WORK/$f.txt" ] || continue
    echo
    grep '^|' "$WORK/$f.txt" || echo "($f: no table; see $WORK/$f.txt)"
done
echo
"$PY" - "$WORK" <<'EOF'
import pathlib
import sys

work = pathlib.Path(sys.argv[1])
rate = {}  # (label, scenario) -> msgs/s of the median run
for path in work.glob("*.txt"):
    for line in path.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 11 and cells[3] not in ("msgs/s", "---:", "-") and not cells[-1].startswith("FAILED"):
            rate[cells[0], cells[1]] = float(cells[3])


def ratio(a, b):
    return f"{a / b:.2f}" if a and b else "-"


def num(v):
    return f"{v:,.0f}" if v else "-"


print("| scenario | Meshgate pair | Meshgate single | MG pair/single | ActiveMQ pair | ActiveMQ single"
      " | AMQ pair/single | MG pair / AMQ pair |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for sc in ("queue-256", "queue-256-persistent"):
    mp, ms = rate.get(("meshgate-pair", sc)), rate.get(("meshgate-single", sc))
    ap, as_ = rate.get(("activemq-pair", sc)), rate.get(("activemq-single", sc))
    print(f"| {sc} | {num(mp)} | {num(ms)} | {ratio(mp, ms)} | {num(ap)} | {num(as_)} | {ratio(ap, as_)}"
          f" | {ratio(mp, ap)} |")
print()
print("targets: MG pair / AMQ pair >= 2; MG pair/single >= 0.70 (forwarding costs < 30% of single-node throughput)")
EOF
# Stores are bulky and of no further use; keep the logs, tables and profiles.
rm -rf "$WORK"/data-* "$WORK"/amq*/kahadb "$WORK"/amq*/data "$WORK"/amq*/tmp
echo "raw output and node logs in $WORK"
exit "$FAILED"
