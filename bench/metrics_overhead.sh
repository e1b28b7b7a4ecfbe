#!/usr/bin/env bash
# What the management plane's metrics cost one node: the same load against the same
# checkout three ways, interleaved run by run, and a table with the ratios.
#   bench/metrics_overhead.sh [--checkout DIR] [--python PY] [--base DIR [--base-python PY]]
#       [--modes "off on down"] [--repeat N] [--count SCALE] [--wait-quiet S]
#       [--interval-ms MS] [--buffer N] [--scenario "queue-256 ..."] [--work DIR]
#   bench/metrics_overhead.sh --repeat 3 --count 1          # this checkout, ~10 minutes
#   bench/metrics_overhead.sh --checkout /tmp/wt-after --python /tmp/venv-after/bin/python \
#       --base /tmp/wt-before --base-python /tmp/venv-before/bin/python --modes off
#
# Modes (each a freshly started node per round, `meshgate broker --name bench ...`):
#   off   no [metrics] (the default configuration)
#   on    metrics.redis_url -> a redis-server this script starts on a free port
#         (snapshots every --interval-ms, events as they happen)
#   down  metrics.redis_url -> a free port where nothing listens: Redis down; the
#         publisher's buffer (--buffer entries, default 10 so it fills within seconds)
#         is full and drops its oldest entry for each new one
#   --base DIR adds "base-off": metrics off on another checkout (e.g. the commit before
#   the counters and histograms), interleaved with the others: what the per-message
#   counters, latency histogram and created timestamp cost.
# Each round starts every node (and Redis), then for each scenario runs stomp_bench.py
# once against each node, in an order rotated every scenario and round; the first run
# on a node carries stomp_bench's warm-up. After the round it reads each metrics node's
# publisher status (meshgate nodes --json: state, buffered, dropped) and, for "on",
# XLEN of <prefix>:snapshots and :events, then stops everything it started, by PID.
# DIR is a source checkout (a git worktree is fine); PY must import that checkout's
# code: the script checks it (PYTHONPATH=DIR, run from DIR) and refuses otherwise,
# e.g. when an editable install of another tree shadows it.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CHECKOUT="$ROOT"
PY=""
BASE=""
BASE_PY=""
MODES="off on down"
REPEAT=3
COUNT=1
WAIT_QUIET=60
INTERVAL_MS=1000
BUFFER=10
SCENARIOS="queue-256 queue-256-persistent client-individual"
WORK=""
usage() { sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
    case "$1" in
        --checkout) CHECKOUT="$(cd "$2" && pwd)"; shift 2 ;;
        --python) PY="$2"; shift 2 ;;
        --base) BASE="$(cd "$2" && pwd)"; shift 2 ;;
        --base-python) BASE_PY="$2"; shift 2 ;;
        --modes) MODES="$2"; shift 2 ;;
        --repeat) REPEAT="$2"; shift 2 ;;
        --count) COUNT="$2"; shift 2 ;;
        --wait-quiet) WAIT_QUIET="$2"; shift 2 ;;
        --interval-ms) INTERVAL_MS="$2"; shift 2 ;;
        --buffer) BUFFER="$2"; shift 2 ;;
        --scenario) SCENARIOS="$2"; shift 2 ;;
        --work) WORK="$2"; shift 2 ;;
        -h|--help) usage ;;
        *) echo "unknown argument: $1" >&2; usage ;;
    esac
done
default_python() { if [ -x "$1/.venv/bin/python" ]; then echo "$1/.venv/bin/python"; else echo "$ROOT/.venv/bin/python"; fi; }
PY="${PY:-$(default_python "$CHECKOUT")}"
BASE_PY="${BASE_PY:-$(if [ -n "$BASE" ]; then default_python "$BASE"; fi)}"
BENCH_PY="$PY"  # stomp_bench.py needs the standard library only
WORK="${WORK:-$(mktemp -d /tmp/metrics-overhead.XXXXXX)}"
mkdir -p "$WORK"
STARTED=()  # every PID this script started, killed on exit

cleanup() {
    local pid
    for pid in "${STARTED[@]}"; do
        if kill -0 "$pid" 2>/dev/null; then kill "$pid" 2>/dev/null || true; fi
    done
    for pid in "${STARTED[@]}"; do wait "$pid" 2>/dev/null || true; done
    STARTED=()
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() { "$BENCH_PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# The package a checkout's `broker` command lives in: meshgate/ from 407147e on, gateway/ before.
cli_module() { if [ -f "$1/meshgate/cli.py" ]; then echo meshgate; else echo gateway; fi; }

check_imports() {  # dir python modules...: each module must come from dir
    local dir=$1 py=$2; shift 2
    local files
    files=$(cd "$dir" && PYTHONPATH="$dir" "$py" -c '
import importlib, sys
for name in sys.argv[1:]:
    print(name, importlib.import_module(name).__file__)' "$@") || { echo "cannot import $* with $py" >&2; exit 1; }
    echo "$files" | while read -r name file; do
        case "$file" in
            "$dir"/*) ;;
            *) echo "$py imports $name from $file, not from $dir: use another --python (a venv of its own)" >&2
               exit 1 ;;
        esac
    done
    echo "$files" | sed 's/^/    /'
}

describe() {  # dir
    local rev dirty=""
    rev=$(git -C "$1" rev-parse --short HEAD 2>/dev/null || echo "?")
    if [ -n "$(git -C "$1" status --porcelain --untracked-files=no 2>/dev/null)" ]; then dirty=" (modified)"; fi
    echo "$rev$dirty"
}

# Variants: name, checkout, python, metrics mode.
V_NAME=(); V_DIR=(); V_PY=(); V_MODE=()
for mode in $MODES; do
    case "$mode" in off|on|down) ;; *) echo "unknown mode $mode (off, on, down)" >&2; exit 2 ;; esac
    V_NAME+=("$mode"); V_DIR+=("$CHECKOUT"); V_PY+=("$PY"); V_MODE+=("$mode")
done
if [ -n "$BASE" ]; then
    V_NAME+=("base-off"); V_DIR+=("$BASE"); V_PY+=("$BASE_PY"); V_MODE+=("off")
fi
NV=${#V_NAME[@]}
[ "$NV" -gt 0 ] || { echo "nothing to measure" >&2; exit 2; }

{
    echo "# metrics_overhead.sh $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "repeat $REPEAT, count $COUNT, wait-quiet $WAIT_QUIET s, interval $INTERVAL_MS ms, buffer $BUFFER"
    echo "scenarios: $SCENARIOS"
    for i in $(seq 0 $((NV - 1))); do
        mods="gateway"
        if [ "$(cli_module "${V_DIR[$i]}")" = meshgate ]; then mods="$mods meshgate"; fi
        if [ "${V_MODE[$i]}" != off ]; then mods="$mods metrics"; fi
        echo "variant ${V_NAME[$i]}: ${V_DIR[$i]} at $(describe "${V_DIR[$i]}"), ${V_PY[$i]}, mode ${V_MODE[$i]}"
        # shellcheck disable=SC2086
        check_imports "${V_DIR[$i]}" "${V_PY[$i]}" $mods
    done
} | tee "$WORK/setup.txt"
RESULTS="$WORK/results.tsv"   # round, scenario, variant, stomp_bench's result line
STATUS="$WORK/status.tsv"     # round, variant, state, buffered, dropped, snapshots, events, seconds
: >"$RESULTS"; : >"$STATUS"

start_node() {  # index round -> V_PID[i], V_PORT[i]
    local i=$1 round=$2 port dir=${V_DIR[$1]} data="$WORK/data-${V_NAME[$1]}" log="$WORK/node-${V_NAME[$1]}-r$2.log"
    local extra=()
    port=$(free_port)
    while [ "$port" = "$DEAD_PORT" ] || [ "$port" = "${REDIS_PORT:-}" ]; do port=$(free_port); done
    rm -rf "$data"
    case "${V_MODE[$i]}" in
        on) extra=(--set "metrics.redis_url=redis://127.0.0.1:$REDIS_PORT/0") ;;
        down) extra=(--set "metrics.redis_url=redis://127.0.0.1:$DEAD_PORT/0") ;;
    esac
    if [ "${V_MODE[$i]}" != off ]; then
        extra+=(--set "metrics.interval_ms=$INTERVAL_MS" --set "metrics.buffer=$BUFFER")
    fi
    (cd "$dir" && PYTHONPATH="$dir" exec "${V_PY[$i]}" -m "$(cli_module "$dir")" broker --name bench \
        --stomp "127.0.0.1:$port" --data "$data" --log-level WARNING ${extra[@]+"${extra[@]}"} \
        >"$log" 2>&1 </dev/null) &
    V_PID[$i]=$!
    STARTED+=("${V_PID[$i]}")
    V_PORT[$i]=$port
    local deadline=$((SECONDS + 60))
    until grep -q "listening on" "$log" 2>/dev/null; do
        if ! kill -0 "${V_PID[$i]}" 2>/dev/null || [ $SECONDS -gt $deadline ]; then
            echo "node ${V_NAME[$i]} did not start; see $log" >&2; cat "$log" >&2; exit 1
        fi
        sleep 0.1
    done
}

stop_pid() {
    kill "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
}

xlen() {  # stream -> its length on the live redis-server (0 if it has no such stream yet)
    local n
    n=$(redis-cli -h 127.0.0.1 -p "$REDIS_PORT" XLEN "$1" 2>/dev/null || true)
    case "$n" in ''|*[!0-9]*) echo "-1" ;; *) echo "$n" ;; esac
}

metrics_status() {  # index -> "state buffered dropped"
    local i=$1 dir=${V_DIR[$1]}
    (cd "$dir" && PYTHONPATH="$dir" "${V_PY[$i]}" -m meshgate nodes --stomp "127.0.0.1:${V_PORT[$i]}" --json \
        2>/dev/null) | "$BENCH_PY" -c '
import json, sys
m = json.load(sys.stdin)["result"]["nodes"][0]["node"]["metrics"]
print(m["state"], m["buffered"], m["dropped"])' 2>/dev/null || echo "? ? ?"
}

needs_redis=0
for m in "${V_MODE[@]}"; do if [ "$m" = on ]; then needs_redis=1; fi; done
V_PID=(); V_PORT=()
for round in $(seq 1 "$REPEAT"); do
    echo "== round $round/$REPEAT" | tee -a "$WORK/raw.txt"
    REDIS_PORT=""; DEAD_PORT=$(free_port)  # nothing listens there
    if [ $needs_redis = 1 ]; then
        REDIS_PORT=$(free_port)
        mkdir -p "$WORK/redis"
        redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save '' --appendonly no --daemonize no \
            --dir "$WORK/redis" --loglevel warning >"$WORK/redis/redis-r$round.log" 2>&1 </dev/null &
        REDIS_PID=$!
        STARTED+=("$REDIS_PID")
        until redis-cli -h 127.0.0.1 -p "$REDIS_PORT" PING >/dev/null 2>&1; do
            kill -0 "$REDIS_PID" 2>/dev/null || { echo "redis-server did not start" >&2; exit 1; }
            sleep 0.1
        done
    fi
    for i in $(seq 0 $((NV - 1))); do start_node "$i" "$round"; done
    round_start=$SECONDS
    snaps0=0; events0=0
    if [ $needs_redis = 1 ]; then snaps0=$(xlen meshgate:snapshots); events0=$(xlen meshgate:events); fi
    warm=()
    for i in $(seq 0 $((NV - 1))); do warm[$i]=1; done
    s=0
    for scenario in $SCENARIOS; do
        for k in $(seq 0 $((NV - 1))); do
            i=$(( (k + round + s) % NV ))
            warmup=()
            if [ "${warm[$i]}" = 1 ]; then warm[$i]=0; else warmup=(--warmup 0); fi
            out=$("$BENCH_PY" "$ROOT/bench/stomp_bench.py" --port "${V_PORT[$i]}" --broker-pid "${V_PID[$i]}" \
                --label "${V_NAME[$i]}" --count "$COUNT" --wait-quiet "$WAIT_QUIET" --repeat 1 \
                ${warmup[@]+"${warmup[@]}"} --scenario "$scenario" 2>&1) || true
            echo "[round $round, ${V_NAME[$i]}] $out" >>"$WORK/raw.txt"
            line=$(echo "$out" | grep -E "^$scenario: " | head -1 || true)
            [ -n "$line" ] || line="$scenario: FAILED (no result line; see raw.txt)"
            printf '%s\t%s\t%s\t%s\n' "$round" "$scenario" "${V_NAME[$i]}" "$line" >>"$RESULTS"
            echo "  ${V_NAME[$i]}: $line"
        done
        s=$((s + 1))
    done
    seconds=$((SECONDS - round_start))
    for i in $(seq 0 $((NV - 1))); do
        if [ "${V_MODE[$i]}" = off ]; then continue; fi
        read -r state buffered dropped <<<"$(metrics_status "$i")"
        snaps="-"; events="-"
        if [ "${V_MODE[$i]}" = on ]; then
            snaps=$(( $(xlen meshgate:snapshots) - snaps0 )); events=$(( $(xlen meshgate:events) - events0 ))
        fi
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "${V_NAME[$i]}" "$state" "$buffered" "$dropped" \
            "$snaps" "$events" "$seconds" >>"$STATUS"
        echo "  ${V_NAME[$i]} publisher: $state, buffered $buffered, dropped $dropped, snapshots written $snaps in ${seconds} s"
    done
    for i in $(seq 0 $((NV - 1))); do stop_pid "${V_PID[$i]}"; rm -rf "$WORK/data-${V_NAME[$i]}"; done
    if [ $needs_redis = 1 ]; then stop_pid "$REDIS_PID"; fi
done
cleanup

"$BENCH_PY" - "$RESULTS" "$STATUS" "$WORK/setup.txt" "$INTERVAL_MS" "$BUFFER" <<'EOF' | tee "$WORK/summary.md"
import re, statistics, sys
from collections import defaultdict

results_path, status_path, setup_path, interval_ms, buffer = sys.argv[1:6]
rows = [l.rstrip("\n").split("\t", 3) for l in open(results_path) if l.strip()]
status = [l.rstrip("\n").split("\t") for l in open(status_path) if l.strip()]
NOISY = 30.0

def parse(line):
    r = {"ok": "FAILED" not in line, "line": line}
    m = re.search(r"([\d,]+) msgs/s", line)
    r["rate"] = float(m.group(1).replace(",", "")) if m else None
    m = re.search(r"broker CPU (\d+)%", line)
    r["cpu"] = float(m.group(1)) if m else None
    m = re.search(r"other load (\d+)%", line)
    r["other"] = float(m.group(1)) if m else None
    m = re.search(r"latency p50 ([\d.]+) ms, p99 ([\d.]+) ms", line)
    r["p50"], r["p99"] = (float(m.group(1)), float(m.group(2))) if m else (None, None)
    r["noisy"] = r["other"] is not None and r["other"] > NOISY
    r["ok"] = r["ok"] and r["rate"] is not None
    # broker CPU time per message, microseconds: less sensitive to other load than msgs/s
    r["us"] = r["cpu"] / 100 / r["rate"] * 1e6 if r["ok"] and r["cpu"] else None
    return r

runs = defaultdict(dict)  # (scenario, round) -> variant -> parsed
scenarios, variants, rounds = [], [], []
for rnd, sc, var, line in rows:
    runs[(sc, int(rnd))][var] = parse(line)
    for seq, x in ((scenarios, sc), (variants, var), (rounds, int(rnd))):
        if x not in seq:
            seq.append(x)
order = [v for v in ("off", "on", "down", "base-off") if v in variants]
ref = "off" if "off" in order else order[0]

def med(xs):
    return statistics.median(xs) if xs else None

def f0(x):
    return "-" if x is None else f"{x:,.0f}"

def pct(x):
    return "-" if x is None else f"{(x - 1) * 100:+.1f}%"

print(open(setup_path).read().rstrip())
print()
print(f"### msgs/s per round (broker CPU; * = NOISY, other load > {NOISY:.0f}%)")
print()
print("| scenario | round | " + " | ".join(order) + " |")
print("|---|---:|" + "---:|" * len(order))
for sc in scenarios:
    for rnd in rounds:
        cells = []
        for v in order:
            r = runs[(sc, rnd)].get(v)
            if r is None:
                cells.append("")
            elif not r["ok"]:
                cells.append("FAILED")
            else:
                cells.append(f"{r['rate']:,.0f} ({r['cpu']:.0f}%)" + ("*" if r["noisy"] else ""))
        print(f"| {sc} | {rnd} | " + " | ".join(cells) + " |")
print()

def pool(sc, v):
    ok = [runs[(sc, rnd)][v] for rnd in rounds if v in runs[(sc, rnd)] and runs[(sc, rnd)][v]["ok"]]
    quiet = [r for r in ok if not r["noisy"]]
    return quiet or ok, len(ok) - len(quiet or ok)

print("### Medians (NOISY runs left out when there are quiet ones)")
print()
print(f"Ratios are against `{ref}`: ratio of the medians, and the median (min..max) of the ratios "
      "within each round (runs of one round were interleaved). CPU µs/msg = broker CPU time per message.")
print()
print(f"| scenario | variant | runs | msgs/s median | min..max | spread | vs {ref} (medians) | "
      f"vs {ref} per round: median (min..max) | CPU µs/msg | p50 / p99 ms |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for sc in scenarios:
    ref_rate = med([r["rate"] for r in pool(sc, ref)[0]])
    for v in order:
        p, dropped = pool(sc, v)
        if not p:
            print(f"| {sc} | {v} | 0 | - | - | - | - | - | - | - |")
            continue
        rates = [r["rate"] for r in p]
        m = med(rates)
        spread = (max(rates) - min(rates)) / m * 100 if m else 0
        paired = []
        for rnd in rounds:
            a, b = runs[(sc, rnd)].get(v), runs[(sc, rnd)].get(ref)
            if a and b and a["ok"] and b["ok"] and not a["noisy"] and not b["noisy"]:
                paired.append(a["rate"] / b["rate"])
        if v == ref:
            vs = vsr = "1"
        else:
            vs = f"{m / ref_rate:.3f} ({pct(m / ref_rate)})" if ref_rate else "-"
            vsr = (f"{med(paired):.3f} ({min(paired):.3f}..{max(paired):.3f})" if paired else "-")
        us = med([r["us"] for r in p if r["us"] is not None])
        p50 = med([r["p50"] for r in p if r["p50"] is not None])
        p99 = med([r["p99"] for r in p if r["p99"] is not None])
        lat = "-" if p50 is None else f"{p50:.0f} / {p99:.0f}"
        runs_note = f"{len(p)}" + (f" (+{dropped} noisy)" if dropped else "")
        print(f"| {sc} | {v} | {runs_note} | {f0(m)} | {f0(min(rates))}..{f0(max(rates))} | ±{spread / 2:.0f}% | "
              f"{vs} | {vsr} | {'-' if us is None else f'{us:.1f}'} | {lat} |")
print()
if status:
    print(f"### Metrics publisher at the end of each round (interval {interval_ms} ms, buffer {buffer} entries)")
    print()
    print("| round | variant | state | buffered | dropped | snapshots written (XLEN) | events written | round s |")
    print("|---:|---|---|---:|---:|---:|---:|---:|")
    for rnd, v, state, buffered, dropped, snaps, events, secs in status:
        print(f"| {rnd} | {v} | {state} | {buffered} | {dropped} | {snaps} | {events} | {secs} |")
EOF
echo
echo "raw output, node logs and summary.md in $WORK"
