# Sourced by the bench scripts: where the checkout is, free loopback ports, and
# starting and stopping the brokers under test (only the ones the script started,
# by PID). The load generators' own shared code is common.py.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PY:-$ROOT/.venv/bin/python}"  # another interpreter (e.g. a worktree without .venv): set it
MESHGATE="${MESHGATE:-$ROOT/.venv/bin/meshgate}"  # another build to measure: set it
STARTED=()  # PIDs of the nodes started by start_meshgate, for stop_started

free_port() {
    # Bind to port 0 and let the kernel choose; bash cannot bind a socket by itself.
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

port_open() {  # PORT
    # bash's /dev/tcp avoids depending on nc/ss being installed.
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

wait_for() {  # FILE PATTERN PID WHAT: up to 60 s for an extended regex in FILE while PID lives
    local file=$1 pattern=$2 pid=$3 what=$4 deadline=$((SECONDS + 60))
    until grep -qE "$pattern" "$file" 2>/dev/null; do
        if ! kill -0 "$pid" 2>/dev/null || [ $SECONDS -ge $deadline ]; then
            echo "$what: gave up waiting for '$pattern' in $file:" >&2
            tail -n 20 "$file" >&2 || true
            return 1
        fi
        sleep 0.1
    done
}

start_meshgate() {  # LOG PORT BROKER_ARGS...: a `meshgate broker` in the background; MG_PID once PORT listens
    local log=$1 port=$2
    shift 2
    # The node holds one descriptor per connection (idle-connections opens 10,000).
    (ulimit -n "$(ulimit -Hn)"; exec "$MESHGATE" broker "$@" >"$log" 2>&1 </dev/null) &
    MG_PID=$!
    STARTED+=("$MG_PID")
    wait_for "$log" "listening on .*:$port\$" "$MG_PID" "meshgate (log $log)"
}

build_commands() {  # BEFORE_DIR AFTER_DIR WORK: WORK/meshgate-before and -after, each build's code first on the path
    local label dir
    for label in before after; do
        dir=$1; [ "$label" = after ] && dir=$2
        printf '#!/bin/sh\ncd %s && PYTHONPATH=%s exec %s -m meshgate "$@"\n' "$dir" "$dir" "$PY" >"$3/meshgate-$label"
        chmod +x "$3/meshgate-$label"
    done
}

stop_pid() {  # PID: SIGTERM and wait for it
    kill "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
}

stop_started() {
    local pid
    for pid in "${STARTED[@]}"; do stop_pid "$pid"; done
    STARTED=()
}

AMQ_DIRS=()  # ActiveMQ data dirs a pair bench started brokers in, for stop_started_and_activemq

stop_started_and_activemq() {  # the pair benches' EXIT trap
    local dir
    stop_started
    for dir in "${AMQ_DIRS[@]}"; do
        "$ROOT/bench/activemq.sh" stop "$dir" >/dev/null 2>&1 || true
    done
}

pair_bench() {  # OUT LABEL PRODUCE_PORT CONSUME_PORT PID... -- STOMP_BENCH_ARGS...
    # stomp_bench.py producing on one port and consuming on the other (the same port for
    # one broker), broker CPU summed over the PIDs; output to the screen and OUT. Reads
    # COUNT and WAIT_QUIET; a failed run sets FAILED=1 and the script goes on.
    local out=$1 label=$2 pport=$3 cport=$4; shift 4
    local pids=()
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do pids+=("$1"); shift; done
    [ $# -gt 0 ] && shift
    echo "== $label (produce on :$pport, consume on :$cport)" | tee "$out"
    uptime | tee -a "$out"
    set +e
    "$PY" "$ROOT/bench/stomp_bench.py" --port "$pport" --consume-port "$cport" --broker-pid "${pids[@]}" \
        --label "$label" --count "$COUNT" --wait-quiet "$WAIT_QUIET" "$@" 2>&1 | tee -a "$out"
    local rc=${PIPESTATUS[0]}
    set -e
    [ "$rc" -eq 0 ] || { FAILED=1; echo "($label: stomp_bench.py exited $rc)" | tee -a "$out"; }
}

pair_options() {  # HELP_LINES "$@": the pair benches' options into COUNT REPEAT WAIT_QUIET ACTIVEMQ PROFILE
    local help=$1
    shift
    COUNT=1 REPEAT=3 WAIT_QUIET=60 ACTIVEMQ=1 PROFILE=0
    while [ $# -gt 0 ]; do
        case "$1" in
            --count) COUNT=$2; shift 2 ;;
            --repeat) REPEAT=$2; shift 2 ;;
            --wait-quiet) WAIT_QUIET=$2; shift 2 ;;
            --no-activemq) ACTIVEMQ=0; shift ;;
            --profile) PROFILE=1; shift ;;
            -h|--help) sed -n "2,${help}p" "$0"; exit 0 ;;
            *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
        esac
    done
}
