#!/usr/bin/env bash
# Run Debian's ActiveMQ 5.17 as a private, loopback-only STOMP broker for
# side-by-side benchmarks with Meshgate.
#
#   bench/activemq.sh start DATA_DIR [STOMP_PORT [OPENWIRE_PORT [PEER_OPENWIRE_PORT]]]
#   bench/activemq.sh stop  DATA_DIR
#
# STOMP_PORT defaults to 61700. For a network of brokers (a pair), give each
# broker an OPENWIRE_PORT (an openwire connector on 127.0.0.1 that the other
# broker's networkConnector dials), and give one of them PEER_OPENWIRE_PORT:
# that broker gets <networkConnector uri="static:(tcp://127.0.0.1:PEER)"
# duplex="true"/> and start waits until the bridge is established. Start the
# broker without a peer first:
#
#   bench/activemq.sh start /tmp/amq-b 61702 61712
#   bench/activemq.sh start /tmp/amq-a 61701 61711 61712   # A dials B
#
# With ACTIVEMQ_NETWORK_SSL=KEYS_DIR both brokers of a pair speak ssl:// instead:
# the openwire connector is ssl://127.0.0.1:OPENWIRE_PORT?needClientAuth=true and
# the bridge dials static:(ssl://127.0.0.1:PEER), each broker presenting the
# certificate of KEYS_DIR/broker.p12 and trusting those of KEYS_DIR/trust.p12
# (made there with keytool on first use: one EC P-256 key naming 127.0.0.1, so
# the pair runs mutual TLS; a benchmark's throw-away keys, password bench-only).
#
# Everything (config, KahaDB, logs, PID file) lives under DATA_DIR so the
# system instance in /var/lib/activemq is never touched. See bench/README.md.
#
# Tunables (environment):
#   ACTIVEMQ_HEAP        JVM max heap                    (default 1g)
#   ACTIVEMQ_STOMP_SCHEME  stomp+nio or stomp (blocking)  (default stomp+nio)
#   ACTIVEMQ_START_TIMEOUT / ACTIVEMQ_STOP_TIMEOUT  seconds (default 60 / 20)
#   ACTIVEMQ_OPENWIRE_PORT / ACTIVEMQ_NETWORK_PEER  same as the 4th / 5th argument
#   ACTIVEMQ_NETWORK_SSL the keystores' directory: the pair's connector and bridge over ssl://
#   ACTIVEMQ_BROKER_NAME brokerName (default meshgate-bench; bench-STOMP_PORT
#                        when an openwire port is given: names must differ in a network)
#   ACTIVEMQ_KAHADB_DIR  the KahaDB directory (default DATA_DIR/kahadb). Two brokers
#                        given the same one are a shared-file-system master/slave
#                        pair: the second waits on KahaDB's lock file (bench/ha_failover.py)
#   ACTIVEMQ_LOCK_SLEEP_MS  the shared-file-locker's lockAcquireSleepInterval
#                        (ActiveMQ's default: 10000 ms)
#   ACTIVEMQ_NO_WAIT=1   start returns once the JVM is launched, without waiting for
#                        the STOMP port (a slave opens it only once it is master)
set -euo pipefail

ACTIVEMQ_HOME=${ACTIVEMQ_HOME:-/usr/share/activemq}
HEAP=${ACTIVEMQ_HEAP:-1g}
SCHEME=${ACTIVEMQ_STOMP_SCHEME:-stomp+nio}
START_TIMEOUT=${ACTIVEMQ_START_TIMEOUT:-60}
STOP_TIMEOUT=${ACTIVEMQ_STOP_TIMEOUT:-20}

usage() {
    echo "usage: $0 start|stop DATA_DIR [STOMP_PORT [OPENWIRE_PORT [PEER_OPENWIRE_PORT]]]" >&2
    exit 2
}

[ $# -ge 2 ] || usage
ACTION=$1
DATA_DIR=$2
PORT=${3:-61700}
OPENWIRE_PORT=${4:-${ACTIVEMQ_OPENWIRE_PORT:-}}
PEER_PORT=${5:-${ACTIVEMQ_NETWORK_PEER:-}}
if [ -n "$OPENWIRE_PORT" ]; then
    BROKER_NAME=${ACTIVEMQ_BROKER_NAME:-bench-$PORT}
else
    BROKER_NAME=${ACTIVEMQ_BROKER_NAME:-meshgate-bench}
fi
PIDFILE="$DATA_DIR/activemq.pid"
KAHADB_DIR=${ACTIVEMQ_KAHADB_DIR:-}
LOCK_SLEEP_MS=${ACTIVEMQ_LOCK_SLEEP_MS:-}
NO_WAIT=${ACTIVEMQ_NO_WAIT:-}
SSL_DIR=${ACTIVEMQ_NETWORK_SSL:-}
SSL_PASSWORD=bench-only

is_running() {
    [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null
}

port_open() {  # [PORT]
    # bash's /dev/tcp avoids depending on nc/ss being installed.
    (exec 3<>"/dev/tcp/127.0.0.1/${1:-$PORT}") 2>/dev/null
}

ssl_keys() {  # the keystore and truststore of ACTIVEMQ_NETWORK_SSL, made once per directory
    mkdir -p "$SSL_DIR"
    SSL_DIR=$(cd "$SSL_DIR" && pwd -P)
    [ -f "$SSL_DIR/trust.p12" ] && return 0
    keytool -genkeypair -alias broker -keyalg EC -groupname secp256r1 -sigalg SHA256withECDSA \
        -dname CN=127.0.0.1 -ext san=ip:127.0.0.1,dns:localhost -validity 2 \
        -keystore "$SSL_DIR/broker.p12" -storetype PKCS12 -storepass "$SSL_PASSWORD" -keypass "$SSL_PASSWORD"
    keytool -exportcert -rfc -alias broker -keystore "$SSL_DIR/broker.p12" -storepass "$SSL_PASSWORD" \
        -file "$SSL_DIR/broker.crt"
    keytool -importcert -noprompt -alias broker -file "$SSL_DIR/broker.crt" \
        -keystore "$SSL_DIR/trust.p12.new" -storetype PKCS12 -storepass "$SSL_PASSWORD"
    mv "$SSL_DIR/trust.p12.new" "$SSL_DIR/trust.p12"
}

# Extra connectors for a network of brokers (empty without an openwire port).
network_xml() {
    local scheme=tcp query=""
    SSL_XML=""
    if [ -n "$SSL_DIR" ]; then
        ssl_keys >/dev/null
        scheme=ssl
        query="?needClientAuth=true"
        SSL_XML="<sslContext><sslContext
            keyStore=\"file:$SSL_DIR/broker.p12\" keyStorePassword=\"$SSL_PASSWORD\" keyStoreType=\"pkcs12\"
            trustStore=\"file:$SSL_DIR/trust.p12\" trustStorePassword=\"$SSL_PASSWORD\" trustStoreType=\"pkcs12\"/>
        </sslContext>"
    fi
    if [ -n "$OPENWIRE_PORT" ]; then
        OPENWIRE_XML="<transportConnector name=\"openwire\" uri=\"$scheme://127.0.0.1:$OPENWIRE_PORT$query\"/>"
    else
        OPENWIRE_XML=""
    fi
    if [ -n "$PEER_PORT" ]; then
        # Defaults otherwise (networkTTL 1, prefetchSize 1000, conduit
        # subscriptions, dynamic demand-driven forwarding): a plain pair.
        NETWORK_XML="<networkConnectors>
            <networkConnector name=\"bench-bridge\" uri=\"static:($scheme://127.0.0.1:$PEER_PORT)\" duplex=\"true\"/>
        </networkConnectors>"
    else
        NETWORK_XML=""
    fi
}

write_config() {
    local conf=$1
    mkdir -p "$conf" "$DATA_DIR/data" "$DATA_DIR/tmp"
    # Debian's build logs through log4j 1.2 (lib/optional), so the shipped
    # log4j2.properties is ignored; without this file the broker is silent.
    cat >"$conf/log4j.properties" <<'EOF'
log4j.rootLogger=INFO, out
log4j.logger.org.springframework=WARN
log4j.logger.org.apache.xbean=WARN
log4j.appender.out=org.apache.log4j.ConsoleAppender
log4j.appender.out.layout=org.apache.log4j.PatternLayout
log4j.appender.out.layout.ConversionPattern=%d | %-5p | %m | %c | %t%n
EOF
    # Based on Debian's instances-available/main/activemq.xml. Deviations:
    # - KahaDB lives under DATA_DIR; its defaults (journal disk syncs on every
    #   sync send, i.e. every SEND that asks for a receipt) are kept so the
    #   persistent numbers are honest.
    # - Only a STOMP connector (plus, for a broker pair, an openwire connector
    #   and a duplex networkConnector), bound to loopback; maximumConnections is raised
    #   for the idle-connections scenario (NIO so 10k sockets don't need 10k
    #   threads).
    # - Memory and store limits are raised and producer flow control is off so
    #   100k x 256 B (or 10k x 64 KiB) can sit in a queue without the producer
    #   being blocked; non-persistent overflow spills to the temp store.
    local kahadb=${KAHADB_DIR:-$DATA_DIR/kahadb}
    local locker=""
    if [ -n "$LOCK_SLEEP_MS" ]; then
        locker="<locker><shared-file-locker lockAcquireSleepInterval=\"$LOCK_SLEEP_MS\"/></locker>"
    fi
    cat >"$conf/activemq.xml" <<EOF
<beans
  xmlns="http://www.springframework.org/schema/beans"
  xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
  xsi:schemaLocation="http://www.springframework.org/schema/beans http://www.springframework.org/schema/beans/spring-beans-2.0.xsd
  http://activemq.apache.org/schema/core http://activemq.apache.org/schema/core/activemq-core.xsd">

    <bean class="org.springframework.beans.factory.config.PropertyPlaceholderConfigurer"/>

    <broker xmlns="http://activemq.apache.org/schema/core"
            useJmx="false"
            brokerName="$BROKER_NAME"
            dataDirectory="$DATA_DIR/data"
            tmpDataDirectory="$DATA_DIR/tmp">

        <destinationPolicy>
            <policyMap>
                <policyEntries>
                    <policyEntry queue="&gt;" producerFlowControl="false"/>
                    <policyEntry topic="&gt;" producerFlowControl="false"/>
                </policyEntries>
            </policyMap>
        </destinationPolicy>

        <managementContext>
            <managementContext createConnector="false"/>
        </managementContext>

        <persistenceAdapter>
            <kahaDB directory="$kahadb">$locker</kahaDB>
        </persistenceAdapter>

        <systemUsage>
            <systemUsage sendFailIfNoSpace="false">
                <memoryUsage><memoryUsage limit="600 mb"/></memoryUsage>
                <storeUsage><storeUsage limit="20 gb"/></storeUsage>
                <tempUsage><tempUsage limit="10 gb"/></tempUsage>
            </systemUsage>
        </systemUsage>

        <transportConnectors>
            <transportConnector name="stomp"
                uri="$SCHEME://127.0.0.1:$PORT?maximumConnections=20000&amp;wireFormat.maxFrameSize=104857600"/>
            $OPENWIRE_XML
        </transportConnectors>
        $NETWORK_XML
        $SSL_XML
    </broker>
</beans>
EOF
}

start() {
    if is_running; then
        echo "activemq already running (pid $(cat "$PIDFILE"))" >&2
        exit 1
    fi
    if port_open; then
        echo "port $PORT is already in use" >&2
        exit 1
    fi
    if [ -n "$OPENWIRE_PORT" ] && port_open "$OPENWIRE_PORT"; then
        echo "port $OPENWIRE_PORT is already in use" >&2
        exit 1
    fi
    if [ -n "$PEER_PORT" ] && [ -z "$OPENWIRE_PORT" ]; then
        echo "a network peer needs an openwire port of this broker too (the duplex bridge)" >&2
        exit 2
    fi
    network_xml
    mkdir -p "$DATA_DIR"
    DATA_DIR=$(cd "$DATA_DIR" && pwd -P)
    PIDFILE="$DATA_DIR/activemq.pid"
    local conf="$DATA_DIR/conf"
    write_config "$conf"

    # 10k idle connections need 10k fds in the broker.
    ulimit -n "$(ulimit -Hn)"
    # Same JVM flags as /usr/bin/activemq for Java > 8, minus the dedicated
    # task runner (a thread per connection) that /etc/default/activemq sets.
    # setsid: the broker must not die with the shell that started it.
    setsid java "-Xmx$HEAP" \
        -Djava.util.logging.config.file=logging.properties \
        --add-reads=java.xml=java.logging \
        --add-opens java.base/java.security=ALL-UNNAMED \
        --add-opens java.base/java.net=ALL-UNNAMED \
        --add-opens java.base/java.lang=ALL-UNNAMED \
        --add-opens java.base/java.util=ALL-UNNAMED \
        --add-opens java.naming/javax.naming.spi=ALL-UNNAMED \
        --add-opens java.rmi/sun.rmi.transport.tcp=ALL-UNNAMED \
        --add-opens java.base/java.util.concurrent=ALL-UNNAMED \
        --add-opens java.base/java.util.concurrent.atomic=ALL-UNNAMED \
        --add-exports=java.base/sun.net.www.protocol.http=ALL-UNNAMED \
        --add-exports=java.base/sun.net.www.protocol.https=ALL-UNNAMED \
        --add-exports=java.base/sun.net.www.protocol.jar=ALL-UNNAMED \
        --add-exports=jdk.xml.dom/org.w3c.dom.html=ALL-UNNAMED \
        --add-exports=jdk.naming.rmi/com.sun.jndi.url.rmi=ALL-UNNAMED \
        -Dactivemq.classpath="$conf:$ACTIVEMQ_HOME/lib/" \
        -Dactivemq.home="$ACTIVEMQ_HOME" \
        -Dactivemq.base="$DATA_DIR" \
        -Dactivemq.conf="$conf" \
        -Dactivemq.data="$DATA_DIR/data" \
        -Djava.io.tmpdir="$DATA_DIR/tmp" \
        -jar "$ACTIVEMQ_HOME/bin/activemq.jar" start "xbean:file:$conf/activemq.xml" \
        >"$DATA_DIR/activemq.out" 2>&1 </dev/null &
    local pid=$!
    echo "$pid" >"$PIDFILE"
    if [ -n "$NO_WAIT" ]; then
        echo "activemq launched: pid $pid, stomp 127.0.0.1:$PORT (not waited for), data $DATA_DIR"
        return 0
    fi

    local deadline=$((SECONDS + START_TIMEOUT))
    until port_open; do
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "activemq exited during startup; see $DATA_DIR/activemq.out" >&2
            tail -n 20 "$DATA_DIR/activemq.out" >&2 || true
            rm -f "$PIDFILE"
            exit 1
        fi
        if [ $SECONDS -ge $deadline ]; then
            echo "activemq did not open port $PORT within ${START_TIMEOUT}s" >&2
            stop
            exit 1
        fi
        sleep 0.5
    done
    if [ -n "$PEER_PORT" ]; then
        # DemandForwardingBridgeSupport logs "Network connection between
        # vm://A#0 and tcp://... (B) has been established." once the bridge is up.
        until grep -q "has been established" "$DATA_DIR/activemq.out"; do
            if ! kill -0 "$pid" 2>/dev/null || [ $SECONDS -ge $deadline ]; then
                echo "activemq: no network bridge to 127.0.0.1:$PEER_PORT within ${START_TIMEOUT}s; see $DATA_DIR/activemq.out" >&2
                tail -n 20 "$DATA_DIR/activemq.out" >&2 || true
                stop
                exit 1
            fi
            sleep 0.2
        done
    fi
    local extra=""
    [ -n "$OPENWIRE_PORT" ] && extra=", openwire 127.0.0.1:$OPENWIRE_PORT, broker $BROKER_NAME"
    [ -n "$PEER_PORT" ] && extra="$extra, bridged to 127.0.0.1:$PEER_PORT"
    [ -n "$SSL_DIR" ] && extra="$extra, over ssl://"
    echo "activemq running: pid $pid, stomp 127.0.0.1:$PORT$extra, data $DATA_DIR"
}

stop() {
    if ! is_running; then
        echo "activemq not running (no live pid in $PIDFILE)"
        rm -f "$PIDFILE"
        return 0
    fi
    local pid
    pid=$(cat "$PIDFILE")
    kill -TERM "$pid"
    local deadline=$((SECONDS + STOP_TIMEOUT))
    while kill -0 "$pid" 2>/dev/null; do
        if [ $SECONDS -ge $deadline ]; then
            echo "activemq (pid $pid) ignored SIGTERM for ${STOP_TIMEOUT}s; sending SIGKILL" >&2
            kill -KILL "$pid" 2>/dev/null || true
            break
        fi
        sleep 0.5
    done
    rm -f "$PIDFILE"
    echo "activemq stopped (pid $pid)"
}

case "$ACTION" in
    start) start ;;
    stop) stop ;;
    *) usage ;;
esac
