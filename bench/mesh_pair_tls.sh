#!/usr/bin/env bash
# A Meshgate pair over mutual TLS ([mesh.tls]) beside the same pair in plaintext, and
# ActiveMQ's ssl:// network connector pair beside its tcp:// pair: produce on A, consume on B.
#
#   bench/mesh_pair.sh --tls [--count SCALE] [--repeat ROUNDS] [--wait-quiet S] [--no-activemq] [--profile]
#   bench/mesh_pair.sh --tls --count 0.05 --repeat 1 --wait-quiet 10   # a smoke test, ~3 minutes
#
# Both pairs of a broker run at once, started fresh, and are measured in interleaved rounds
# (round 1 plaintext then TLS, round 2 TLS then plaintext, ...): this machine's speed drifts,
# so only runs taken side by side compare. Each round runs queue-256 and queue-256-persistent
# (100k x 256 B at --count 1) on each pair; the first round of each pair starts with
# stomp_bench.py's warm-up, the others with none. The summary gives msgs/s of every round,
# the TLS/plaintext ratio of each round and their median, and µs of CPU (both brokers'
# processes, from /proc) per message, against the goals of issue 24 (TLS >= 0.75 of plaintext
# non-persistent, >= 0.9 persistent).
#
# The certificates come from a throw-away CA made in WORK/certs (bench/tls_pair.py), each
# node's naming 127.0.0.1; ActiveMQ's are keytool keystores in WORK/amq-keys
# (bench/activemq.sh, ACTIVEMQ_NETWORK_SSL). --profile: after the rounds, one more run of each
# scenario through the TLS pair with py-spy attached to both nodes (WORK/profile-tls-{a,b}-SCENARIO.txt).
set -euo pipefail
source "$(dirname "$0")/common.sh"
PYSPY="$ROOT/.venv/bin/py-spy"
pair_options 20 "$@"
SCENARIOS=(queue-256 queue-256-persistent)
WORK="$(mktemp -d /tmp/meshgate-pair-tls.XXXXXX)"
FAILED=0

trap stop_started_and_activemq EXIT

declare -A STOMP PID  # node name -> its STOMP port, its PID

mesh_config() {  # NAME LINK_BIND STATIC_PEER_OR_EMPTY TLS(0|1): WORK/NAME.toml (mode 600: it holds the password)
    local name=$1 bind=$2 peer=$3 tls=$4 static="[]"
    [ -n "$peer" ] && static="[\"$peer\"]"
    (umask 077; cat >"$WORK/$name.toml" <<EOF
[mesh]
bind = "$bind"
static = $static
cluster_password = "$PASSWORD"
EOF
    )
    if [ "$tls" = 1 ]; then
        cat >>"$WORK/$name.toml" <<EOF

[mesh.tls]
certificate = "$WORK/certs/$name.crt"
private_key = "$WORK/certs/$name.key"
ca_certificate = "$WORK/certs/ca.crt"
EOF
    fi
}

mesh_pair() {  # PREFIX TLS(0|1): nodes PREFIX-b (listens) and PREFIX-a (dials it), linked
    local prefix=$1 tls=$2 link name
    link=$(free_port)
    mesh_config "$prefix-b" "127.0.0.1:$link" "" "$tls"
    mesh_config "$prefix-a" "127.0.0.1:0" "127.0.0.1:$link" "$tls"
    for name in "$prefix-b" "$prefix-a"; do
        STOMP[$name]=$(free_port)
        start_meshgate "$WORK/$name.log" "${STOMP[$name]}" --name "$name" --stomp "127.0.0.1:${STOMP[$name]}" \
            --data "$WORK/data-$name" --config "$WORK/$name.toml"
        PID[$name]=$MG_PID
    done
    wait_for "$WORK/$prefix-a.log" "mesh: linked with $prefix-b" "${PID[$prefix-a]}" "meshgate $prefix-a"
    wait_for "$WORK/$prefix-b.log" "mesh: linked with $prefix-a" "${PID[$prefix-b]}" "meshgate $prefix-b"
}

rounds() {  # PLAIN_LABEL TLS_LABEL: the interleaved rounds (`endpoints LABEL` says where each runs)
    local plain=$1 tls=$2 round label warmup
    for round in $(seq 1 "$REPEAT"); do
        local order=("$plain" "$tls")
        [ $((round % 2)) -eq 0 ] && order=("$tls" "$plain")
        for label in "${order[@]}"; do
            warmup=(); [ "$round" -gt 1 ] && warmup=(--warmup 0)
            # shellcheck disable=SC2046  # the PIDs are words
            pair_bench "$WORK/round-$round-$label.txt" "$label" $(endpoints "$label") -- \
                "${warmup[@]}" --scenario "${SCENARIOS[@]}"
        done
    done
}

CODE="$(git -C "$ROOT" log -1 --format='%h %ad %s' --date=format:'%Y-%m-%d %H:%M' 2>/dev/null || echo unknown)"
DIRTY="$(git -C "$ROOT" status --porcelain -- model gateway mesh metrics management meshgate 2>/dev/null | wc -l)"
echo "meshgate code: $CODE ($DIRTY uncommitted file(s) under the code packages)" | tee "$WORK/code.txt"

# ------------------------------------------------------- Meshgate: plaintext and TLS pairs
PASSWORD="$("$PY" -c 'import secrets; print(secrets.token_urlsafe(32))')"
"$PY" "$ROOT/bench/tls_pair.py" certs "$WORK/certs" tls-a tls-b
mesh_pair plain 0
mesh_pair tls 1
endpoints() {  # LABEL -> produce port, consume port, the brokers' PIDs
    local p=${1#meshgate-}
    echo "${STOMP[$p-a]} ${STOMP[$p-b]} ${PID[$p-a]} ${PID[$p-b]}"
}
rounds meshgate-plain meshgate-tls
if [ "$PROFILE" = 1 ]; then
    for sc in "${SCENARIOS[@]}"; do
        spies=()
        for side in a b; do
            "$PYSPY" record --rate 500 --nonblocking -p "${PID[tls-$side]}" -f raw \
                -o "$WORK/profile-tls-$side-$sc.txt" >"$WORK/py-spy-$side-$sc.log" 2>&1 &
            spies+=($!)
        done
        sleep 1
        # shellcheck disable=SC2046
        pair_bench "$WORK/profiled-$sc.txt" meshgate-tls-profiled $(endpoints meshgate-tls) -- \
            --warmup 0 --scenario "$sc"
        kill -INT "${spies[@]}" 2>/dev/null || true
        wait "${spies[@]}" || true
    done
fi
grep -h "mesh:\|tls:" "$WORK"/plain-?.log "$WORK"/tls-?.log | grep -v "linked with" | sed 's/^/  (node log) /' || true
stop_started

# ------------------------------------------------------- ActiveMQ: tcp:// and ssl:// pairs
if [ "$ACTIVEMQ" = 1 ]; then
    declare -A AMQ  # label -> "produce port consume port"
    for label in activemq-tcp activemq-ssl; do
        ssl=""; [ "$label" = activemq-ssl ] && ssl="$WORK/amq-keys"
        a=$(free_port); b=$(free_port); a_ow=$(free_port); b_ow=$(free_port)
        AMQ_DIRS+=("$WORK/$label-b")
        ACTIVEMQ_NETWORK_SSL=$ssl "$ROOT/bench/activemq.sh" start "$WORK/$label-b" "$b" "$b_ow"
        AMQ_DIRS+=("$WORK/$label-a")
        ACTIVEMQ_NETWORK_SSL=$ssl "$ROOT/bench/activemq.sh" start "$WORK/$label-a" "$a" "$a_ow" "$b_ow"
        AMQ[$label]="$a $b"
    done
    endpoints() {
        echo "${AMQ[$1]} $(cat "$WORK/$1-a/activemq.pid") $(cat "$WORK/$1-b/activemq.pid")"
    }
    rounds activemq-tcp activemq-ssl
    for dir in "${AMQ_DIRS[@]}"; do "$ROOT/bench/activemq.sh" stop "$dir"; done
    AMQ_DIRS=()
fi

# ----------------------------------------------------------------------------- report
echo
echo "## TLS / plaintext pairs (count scale $COUNT, $REPEAT interleaved round(s))"
cat "$WORK/code.txt"
echo
grep -h '^| [am]' "$WORK"/round-*.txt | sort -t'|' -k2,3 -s || true
echo
"$PY" "$ROOT/bench/tls_pair.py" summary "$WORK"
rm -rf "$WORK"/data-* "$WORK"/activemq-*/kahadb "$WORK"/activemq-*/data "$WORK"/activemq-*/tmp
echo "raw output and node logs in $WORK"
exit "$FAILED"
