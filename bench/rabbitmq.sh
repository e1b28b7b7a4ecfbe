#!/usr/bin/env bash
# Run Debian's RabbitMQ (3.10 on bookworm) as a private, loopback-only AMQP 0-9-1
# broker for side-by-side benchmarks with Meshgate.
#
#   bench/rabbitmq.sh start WORK_DIR [AMQP_PORT]
#   bench/rabbitmq.sh stop  WORK_DIR
#
# AMQP_PORT defaults to 5700 (not 5672, so a system RabbitMQ is never in the way).
# Everything (config, mnesia, logs, erlang cookie, PID files) lives under WORK_DIR,
# so /var/lib/rabbitmq and /etc/rabbitmq are never used. start prints the PID to
# give amqp_bench.py --broker-pid (also in WORK_DIR/rabbitmq.pid).
#
# If rabbitmq-server is not installed, start installs it with apt-get and stops the
# distro's own service if the package started it (Debian's postinst runs
# invoke-rc.d rabbitmq-server start, which a policy-rc.d may or may not allow).
#
# Only loopback is used: AMQP on 127.0.0.1:AMQP_PORT, the Erlang distribution port
# (a free port) bound to 127.0.0.1, and a private epmd on a free port bound to
# 127.0.0.1 that this script starts and stops itself, so the node never registers
# with (or spawns) a system-wide epmd on 4369.
#
# Tunables (environment):
#   RABBITMQ_START_TIMEOUT / RABBITMQ_STOP_TIMEOUT  seconds (default 60 / 30)
set -euo pipefail

RMQ_BIN=/usr/lib/rabbitmq/bin
START_TIMEOUT=${RABBITMQ_START_TIMEOUT:-60}
STOP_TIMEOUT=${RABBITMQ_STOP_TIMEOUT:-30}

usage() {
    echo "usage: $0 start|stop WORK_DIR [AMQP_PORT]" >&2
    exit 2
}

[ $# -ge 2 ] || usage
ACTION=$1
WORK_DIR=$2
PORT=${3:-5700}
PIDFILE="$WORK_DIR/rabbitmq.pid"
EPMD_PIDFILE="$WORK_DIR/epmd.pid"

alive() {  # PIDFILE
    [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null
}

port_open() {  # PORT
    # bash's /dev/tcp avoids depending on nc/ss being installed.
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

free_port() {
    # Bind to port 0 and let the kernel choose; python3 is a dependency of the
    # bench anyway, and bash cannot bind a socket by itself.
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

epmd_pids() {
    pgrep -x epmd 2>/dev/null | sort || true
}

ensure_installed() {
    [ -x "$RMQ_BIN/rabbitmq-server" ] && return 0
    if ! [ "$(id -u)" = 0 ]; then
        echo "rabbitmq-server is not installed and installing it needs root" >&2
        exit 1
    fi
    # The package is absent, so its service cannot be running yet: whatever
    # runs after the install was started by the install.
    local systemd=""
    [ -d /run/systemd/system ] && systemd=1
    local epmd_before epmd_socket_before=""
    epmd_before=$(epmd_pids)
    if [ -n "$systemd" ] && systemctl is-active --quiet epmd.socket 2>/dev/null; then
        epmd_socket_before=1
    fi
    echo "installing rabbitmq-server (apt-get) ..." >&2
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y rabbitmq-server >"$WORK_DIR/apt.log" 2>&1; then
        # A fresh machine may have no package lists yet.
        DEBIAN_FRONTEND=noninteractive apt-get update >>"$WORK_DIR/apt.log" 2>&1
        DEBIAN_FRONTEND=noninteractive apt-get install -y rabbitmq-server >>"$WORK_DIR/apt.log" 2>&1 || {
            echo "apt-get install rabbitmq-server failed; see $WORK_DIR/apt.log" >&2
            tail -n 20 "$WORK_DIR/apt.log" >&2
            exit 1
        }
    fi
    # Not `service rabbitmq-server status`: Debian's init script answers it with
    # rabbitmqctl, which itself daemonises an epmd on 0.0.0.0:4369.
    if [ -n "$systemd" ]; then
        if systemctl is-active --quiet rabbitmq-server; then
            echo "the package started the distro's rabbitmq-server service; stopping it (systemctl)" >&2
            systemctl stop rabbitmq-server
        else
            echo "the package did not start the rabbitmq-server service (nothing to stop)" >&2
        fi
        # Debian's erlang socket-activates epmd; the service pulled it in.
        if [ -z "$epmd_socket_before" ] && systemctl is-active --quiet epmd.socket 2>/dev/null; then
            echo "stopping epmd.socket/epmd.service, activated by the install" >&2
            systemctl stop epmd.socket epmd.service || true
        fi
    elif pgrep -u rabbitmq -x beam.smp >/dev/null 2>&1; then
        echo "the package started the distro's rabbitmq-server service; stopping it (service)" >&2
        service rabbitmq-server stop
        # The init script's epmd outlives the node; it did not exist before
        # the install, so it is ours to stop (by PID).
        local pid
        for pid in $(comm -13 <(echo "$epmd_before") <(epmd_pids)); do
            echo "stopping epmd pid $pid, started by the distro service" >&2
            kill -TERM "$pid" 2>/dev/null || true
        done
    else
        echo "the package did not start a rabbitmq-server service (no init system or policy-rc.d" \
            "denied it; nothing to stop)" >&2
    fi
}

write_config() {
    mkdir -p "$WORK_DIR/mnesia" "$WORK_DIR/log"
    # An empty env file: Debian's /etc/rabbitmq/rabbitmq-env.conf (NODENAME etc.)
    # must not leak into the private node.
    : >"$WORK_DIR/rabbitmq-env.conf"
    # No plugins: no management listener on 15672, nothing beyond AMQP.
    echo "[]." >"$WORK_DIR/enabled_plugins"
    # Defaults otherwise (vm_memory_high_watermark 0.4, classic queues,
    # guest/guest allowed from loopback only), so the figures are stock RabbitMQ.
    cat >"$WORK_DIR/rabbitmq.conf" <<EOF
listeners.tcp.1 = 127.0.0.1:$PORT
loopback_users.guest = true
log.console = false
log.file.level = info
EOF
}

start() {
    mkdir -p "$WORK_DIR"
    WORK_DIR=$(cd "$WORK_DIR" && pwd -P)
    PIDFILE="$WORK_DIR/rabbitmq.pid"
    EPMD_PIDFILE="$WORK_DIR/epmd.pid"
    if alive "$PIDFILE"; then
        echo "rabbitmq already running (pid $(cat "$PIDFILE"))" >&2
        exit 1
    fi
    if port_open "$PORT"; then
        echo "port $PORT is already in use" >&2
        exit 1
    fi
    ensure_installed
    write_config

    local epmd_port dist_port node
    epmd_port=$(free_port)
    dist_port=$(free_port)
    # Unique per start, so two private nodes (or a system one) never clash.
    node="bench-$PORT-$$@localhost"

    # Our own epmd, started before the node so that erl finds it on
    # ERL_EPMD_PORT and does not daemonise one of its own (which we could not
    # stop by PID). setsid: it must not die with the shell that started it.
    setsid epmd -address 127.0.0.1 -port "$epmd_port" >"$WORK_DIR/log/epmd.out" 2>&1 </dev/null &
    echo "$!" >"$EPMD_PIDFILE"
    local deadline=$((SECONDS + 10))
    until port_open "$epmd_port"; do
        if ! alive "$EPMD_PIDFILE" || [ $SECONDS -ge $deadline ]; then
            echo "epmd did not start on 127.0.0.1:$epmd_port" >&2
            stop
            exit 1
        fi
        sleep 0.1
    done

    # The real server script, not /usr/sbin/rabbitmq-server: as root that
    # wrapper switches to the rabbitmq user, who cannot write WORK_DIR.
    # HOME: the node's .erlang.cookie is created under WORK_DIR, not in /root.
    # It runs in its foreground mode (a sh that traps SIGTERM and stops the
    # VM cleanly), so the PID we record is the one to signal.
    env HOME="$WORK_DIR" \
        RABBITMQ_NODENAME="$node" \
        RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 \
        RABBITMQ_NODE_PORT="$PORT" \
        RABBITMQ_DIST_PORT="$dist_port" \
        RABBITMQ_CONF_ENV_FILE="$WORK_DIR/rabbitmq-env.conf" \
        RABBITMQ_CONFIG_FILE="$WORK_DIR/rabbitmq.conf" \
        RABBITMQ_ADVANCED_CONFIG_FILE="$WORK_DIR/advanced.config" \
        RABBITMQ_ENABLED_PLUGINS_FILE="$WORK_DIR/enabled_plugins" \
        RABBITMQ_MNESIA_BASE="$WORK_DIR/mnesia" \
        RABBITMQ_LOG_BASE="$WORK_DIR/log" \
        RABBITMQ_PID_FILE="$WORK_DIR/beam.pid" \
        RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}" \
        ERL_EPMD_ADDRESS=127.0.0.1 \
        ERL_EPMD_PORT="$epmd_port" \
        setsid "$RMQ_BIN/rabbitmq-server" >"$WORK_DIR/log/server.out" 2>&1 </dev/null &
    local pid=$!
    echo "$pid" >"$PIDFILE"
    echo "$node" >"$WORK_DIR/nodename"

    deadline=$((SECONDS + START_TIMEOUT))
    # RabbitMQ opens its AMQP listener last in its boot sequence, so an open
    # port means the node is ready for clients.
    until port_open "$PORT"; do
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "rabbitmq exited during startup; see $WORK_DIR/log" >&2
            tail -n 20 "$WORK_DIR/log/server.out" >&2 || true
            stop
            exit 1
        fi
        if [ $SECONDS -ge $deadline ]; then
            echo "rabbitmq did not open port $PORT within ${START_TIMEOUT}s" >&2
            stop
            exit 1
        fi
        sleep 0.5
    done
    local version
    version=$(dpkg-query -W -f '${Version}' rabbitmq-server 2>/dev/null || echo "?")
    echo "rabbitmq $version running: pid $pid, amqp 127.0.0.1:$PORT, dist 127.0.0.1:$dist_port," \
        "epmd 127.0.0.1:$epmd_port (pid $(cat "$EPMD_PIDFILE")), node $node, data $WORK_DIR"
}

stop_pid() {  # NAME PIDFILE
    local name=$1 pidfile=$2 pid
    if ! alive "$pidfile"; then
        echo "$name not running (no live pid in $pidfile)"
        rm -f "$pidfile"
        return 0
    fi
    pid=$(cat "$pidfile")
    kill -TERM "$pid"
    local deadline=$((SECONDS + STOP_TIMEOUT))
    while kill -0 "$pid" 2>/dev/null; do
        if [ $SECONDS -ge $deadline ]; then
            echo "$name (pid $pid) ignored SIGTERM for ${STOP_TIMEOUT}s; sending SIGKILL" >&2
            # The wrapper sh would die without stopping its VM; kill the VM
            # (its child, recorded by RabbitMQ itself) first.
            if [ -f "$WORK_DIR/beam.pid" ] && [ "$pidfile" = "$PIDFILE" ]; then
                kill -KILL "$(cat "$WORK_DIR/beam.pid")" 2>/dev/null || true
            fi
            kill -KILL "$pid" 2>/dev/null || true
            break
        fi
        sleep 0.2
    done
    rm -f "$pidfile"
    echo "$name stopped (pid $pid)"
}

stop() {
    # The node first: epmd must outlive it so the node can unregister.
    stop_pid rabbitmq "$PIDFILE"
    stop_pid epmd "$EPMD_PIDFILE"
}

case "$ACTION" in
    start) start ;;
    stop) stop ;;
    *) usage ;;
esac
