#!/usr/bin/env bash
# basic.get across a mesh pair beside one node (issue 26), A/B in one run.
#
#   bench/amqp_get_pair.sh [--rounds N] [--repeat N] [--get-count N] [--wait-quiet S] [--profile]
#
# Starts three fresh Meshgate nodes with AMQP, all on 127.0.0.1 and free ports: a
# pair (A lists B in mesh.static) and a standalone node. Each round runs
# amqp_bench.py's get scenario on both setups, alternating which goes first:
#   single  pre-load and basic.get loop on the standalone node;
#   pair    pre-load on node B, the basic.get loop on node A (--get-port), which
#           pulls the messages from B (gateway/amqp/gets.py).
# Then a table per round: single msgs/s, pair msgs/s, pair/single (goal >= 0.5).
#
# The nodes run this checkout's code: PYTHONPATH is set to it (an installed or
# editable meshgate would otherwise be imported). MESHGATE / PY choose the build's
# entry point and interpreter as in common.sh.
#
# --profile: after the measured rounds, one more pair run with py-spy attached to A
# and B; raw (collapsed-stack) profiles WORK/profile-{a,b}.txt. Not in the figures.
set -euo pipefail
source "$(dirname "$0")/common.sh"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
PYSPY="${PYSPY:-$(dirname "$PY")/py-spy}"
ROUNDS=3 REPEAT=3 GET_COUNT=20000 WAIT_QUIET=30 PROFILE=0
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) ROUNDS=$2; shift 2 ;;
        --repeat) REPEAT=$2; shift 2 ;;
        --get-count) GET_COUNT=$2; shift 2 ;;
        --wait-quiet) WAIT_QUIET=$2; shift 2 ;;
        --profile) PROFILE=1; shift ;;
        -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
        *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done
WORK="$(mktemp -d /tmp/meshgate-get-pair.XXXXXX)"
FAILED=0
SPY_PIDS=()
cleanup() {
    local pid
    for pid in "${SPY_PIDS[@]}"; do kill -INT "$pid" 2>/dev/null || true; done
    stop_started
}
trap cleanup EXIT

CODE="$(git -C "$ROOT" log -1 --format='%h %s' 2>/dev/null | cut -c1-100 || echo unknown)"
DIRTY="$(git -C "$ROOT" status --porcelain -- model gateway mesh metrics management meshgate 2>/dev/null | wc -l)"
IMPORTS="$("$PY" -c 'import gateway; print(gateway.__file__)')"
echo "meshgate code: $CODE ($DIRTY uncommitted file(s) under the code packages); nodes import $IMPORTS" \
    | tee "$WORK/code.txt"

PASSWORD="$("$PY" -c 'import secrets; print(secrets.token_urlsafe(32))')"
A_STOMP=$(free_port); B_STOMP=$(free_port); S_STOMP=$(free_port)
A_AMQP=$(free_port); B_AMQP=$(free_port); S_AMQP=$(free_port); B_LINK=$(free_port)
umask 077  # the configs hold the cluster password
printf '[mesh]\nbind = "127.0.0.1:%s"\ncluster_password = "%s"\n' "$B_LINK" "$PASSWORD" >"$WORK/mg-b.toml"
printf '[mesh]\nbind = "127.0.0.1:0"\nstatic = ["127.0.0.1:%s"]\ncluster_password = "%s"\n' \
    "$B_LINK" "$PASSWORD" >"$WORK/mg-a.toml"
umask 022
node() {  # name amqp_port stomp_port [args...] -> MG_PID
    local name=$1 amqp=$2 stomp=$3; shift 3
    start_meshgate "$WORK/$name.log" "$amqp" --name "$name" --stomp "127.0.0.1:$stomp" --amqp "127.0.0.1:$amqp" \
        --data "$WORK/data-$name" "$@"
}
node mg-b "$B_AMQP" "$B_STOMP" --config "$WORK/mg-b.toml"; B_PID=$MG_PID
node mg-a "$A_AMQP" "$A_STOMP" --config "$WORK/mg-a.toml"; A_PID=$MG_PID
node mg-single "$S_AMQP" "$S_STOMP" --log-level WARNING; S_PID=$MG_PID
wait_for "$WORK/mg-a.log" "mesh: linked with mg-b" "$A_PID" "meshgate mg-a"
wait_for "$WORK/mg-b.log" "mesh: linked with mg-a" "$B_PID" "meshgate mg-b"
echo "pids: single $S_PID, pair A $A_PID (gets) B $B_PID (pre-load)" | tee -a "$WORK/code.txt"

bench() {  # setup out [args...]
    local setup=$1 out=$2; shift 2
    local args=(--port "$S_AMQP" --broker-pid "$S_PID" --label single)
    [ "$setup" = pair ] && args=(--port "$B_AMQP" --get-port "$A_AMQP" --broker-pid "$B_PID" "$A_PID" --label pair)
    echo "== $setup" | tee -a "$out"
    uptime | tee -a "$out"
    set +e
    "$PY" "$ROOT/bench/amqp_bench.py" "${args[@]}" --scenario get --get-count "$GET_COUNT" \
        --wait-quiet "$WAIT_QUIET" "$@" 2>&1 | tee -a "$out"
    local rc=${PIPESTATUS[0]}
    set -e
    [ "$rc" -eq 0 ] || { FAILED=1; echo "($setup: amqp_bench.py exited $rc)" | tee -a "$out"; }
}

for r in $(seq 1 "$ROUNDS"); do
    if [ $((r % 2)) = 1 ]; then order="single pair"; else order="pair single"; fi
    for setup in $order; do bench "$setup" "$WORK/round-$r.txt" --repeat "$REPEAT"; done
done

if [ "$PROFILE" = 1 ]; then
    "$PYSPY" record --rate 500 --nonblocking -p "$A_PID" -f raw -o "$WORK/profile-a.txt" >"$WORK/py-spy-a.log" 2>&1 &
    SPY_PIDS+=($!)
    "$PYSPY" record --rate 500 --nonblocking -p "$B_PID" -f raw -o "$WORK/profile-b.txt" >"$WORK/py-spy-b.log" 2>&1 &
    SPY_PIDS+=($!)
    sleep 1
    bench pair "$WORK/profiled.txt" --warmup 0
    kill -INT "${SPY_PIDS[@]}" 2>/dev/null || true
    wait "${SPY_PIDS[@]}" || true
    SPY_PIDS=()
fi
grep -h "mesh:" "$WORK/mg-a.log" "$WORK/mg-b.log" | grep -vE "linked with|(defined|deleted) queue" \
    | sed 's/^/  (node log) /' || true
stop_started

echo
echo "## get across a pair (get count $GET_COUNT, repeat $REPEAT, median per setup and round)"
cat "$WORK/code.txt"
"$PY" - "$WORK" "$ROUNDS" <<'EOF'
import pathlib
import statistics
import sys

work, rounds = pathlib.Path(sys.argv[1]), int(sys.argv[2])


def rate(path: pathlib.Path, label: str) -> float | None:
    if not path.exists():
        return None
    for line in path.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 11 and cells[0] == label and cells[3] not in ("msgs/s", "-") \
                and not cells[-1].startswith("FAILED"):
            return float(cells[3])
    return None


print("| round | first | single msgs/s | pair msgs/s | pair/single |")
print("|---:|---|---:|---:|---:|")
ratios = []
for r in range(1, rounds + 1):
    s, p = rate(work / f"round-{r}.txt", "single"), rate(work / f"round-{r}.txt", "pair")
    ratio = p / s if s and p else None
    if ratio is not None:
        ratios.append(ratio)
    first = "single" if r % 2 else "pair"
    print(f"| {r} | {first} | {s or 0:,.0f} | {p or 0:,.0f} | {ratio if ratio is not None else float('nan'):.2f} |")
if ratios:
    print(f"\npair/single: median {statistics.median(ratios):.2f}, range {min(ratios):.2f}..{max(ratios):.2f}"
          " (goal >= 0.5)")
EOF
rm -rf "$WORK"/data-*
echo "raw output, node logs and profiles in $WORK"
exit "$FAILED"
