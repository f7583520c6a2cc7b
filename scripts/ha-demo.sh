#!/usr/bin/env bash
# The local three-process demo of docs/production.md: a pg_auto_failover monitor and two
# PostgreSQL nodes (synchronous replication, TLS with self-signed certificates), three
# nats-servers in one JetStream cluster, and `ledger serve` on the multi-host URL with the
# standby as a read replica and the in-process outbox publisher. Everything on loopback, in
# one folder; Ctrl-C (or `scripts/ha-demo.sh stop DIR`) tears it all down.
#
#   scripts/ha-demo.sh start [DIR]    start (DIR: default /tmp/ledger-ha-demo), then wait
#   scripts/ha-demo.sh kill-primary DIR   SIGKILL the primary's process group; watch the ledger go on
#   scripts/ha-demo.sh rejoin DIR     restart the killed node (it rejoins as the standby)
#   scripts/ha-demo.sh states DIR     the monitor's view of the nodes
#   scripts/ha-demo.sh stop DIR       stop everything
#
# Needs scripts/ensure-deps.sh (PostgreSQL 15, pg_auto_failover, nats-server), root (the
# PostgreSQL processes run as the postgres user) and a built `ledger` (target/release or
# target/debug, or LEDGER_BIN). Ports: 16400-16409 (LEDGER_DEMO_PORT_BASE to move them).
set -euo pipefail
cd "$(dirname "$0")/.."

BASE=${LEDGER_DEMO_PORT_BASE:-16400}
MON=$BASE P1=$((BASE + 1)) P2=$((BASE + 2)) GRPC=$((BASE + 3)) METRICS=$((BASE + 4))
NATS=($((BASE + 5)) $((BASE + 6)) $((BASE + 7)))
PG_BIN=/usr/lib/postgresql/15/bin
LEDGER=${LEDGER_BIN:-$( [ -x target/release/ledger ] && echo target/release/ledger || echo target/debug/ledger )}

log() { printf 'ha-demo: %s\n' "$*" >&2; }

as_pg() { # runs a command as postgres in the demo's environment
    runuser -u postgres -- env -i PATH="$PG_BIN:/usr/bin:/bin" HOME="$DIR" \
        XDG_CONFIG_HOME="$DIR/xdg/config" XDG_DATA_HOME="$DIR/xdg/data" \
        XDG_RUNTIME_DIR="$DIR/xdg/run" PGHOST="$DIR/sock" "$@"
}

monitor_sql() { "$PG_BIN/psql" "host=127.0.0.1 port=$MON user=postgres dbname=pg_auto_failover sslmode=require" -Atc "$1"; }

states() { monitor_sql "select string_agg(nodename||'='||reportedstate||'/'||goalstate,' ' order by nodeid) from pgautofailover.node"; }

wait_states() { # wait_states PATTERN...: until the monitor's view is one of them (60 s at most)
    for _ in $(seq 1 600); do
        local s; s=$(states 2>/dev/null || true)
        for want in "$@"; do [ "$s" = "$want" ] && return 0; done
        sleep 0.1
    done
    log "the formation did not reach $*: $(states || true)"; return 1
}

run_node() { # run_node NAME: pg_autoctl run in a process group of its own
    as_pg setsid pg_autoctl run --pgdata "$DIR/$1" >>"$DIR/$1.run.log" 2>&1 </dev/null &
    sleep 0.2
    pgrep -u postgres -f "pg_autoctl run --pgdata $DIR/$1\$" | head -1 >"$DIR/$1.pid"
}

initdb_node() {
    as_pg initdb -D "$DIR/$1" --auth=trust -U postgres >/dev/null
    printf "unix_socket_directories='%s'\nshared_buffers='128MB'\n" "$DIR/sock" >>"$DIR/$1/postgresql.conf"
}

create_node() { # create_node NAME PORT
    as_pg pg_autoctl create postgres --pgdata "$DIR/$1" --pgport "$2" --hostname 127.0.0.1 \
        --listen 127.0.0.1 --name "$1" --dbname ledger \
        --monitor "postgres://autoctl_node@127.0.0.1:$MON/pg_auto_failover" \
        --auth trust --ssl-self-signed >>"$DIR/$1.create.log" 2>&1
    as_pg pg_autoctl config set --pgdata "$DIR/$1" timeout.network_partition_timeout 4 >/dev/null
    run_node "$1"
}

start_postgres() {
    mkdir -p "$DIR"/xdg/{config,data,run} "$DIR/sock"
    chmod 700 "$DIR/xdg/run"; chown -R postgres: "$DIR"
    initdb_node monitor
    as_pg pg_autoctl create monitor --pgdata "$DIR/monitor" --pgport "$MON" --hostname 127.0.0.1 \
        --listen 127.0.0.1 --auth trust --ssl-self-signed >>"$DIR/monitor.create.log" 2>&1
    run_node monitor
    for _ in $(seq 1 100); do monitor_sql "select 1" >/dev/null 2>&1 && break; sleep 0.1; done
    # Fast failure detection (HA.md): a dead primary is replaced in about 10 s.
    for kv in health_check_period=1000 health_check_timeout=1000 health_check_max_retries=1 \
        health_check_retry_delay=500 node_considered_unhealthy_timeout=3000 primary_demote_timeout=6000; do
        monitor_sql "ALTER SYSTEM SET pgautofailover.${kv%%=*} = ${kv#*=}" >/dev/null
    done
    monitor_sql "SELECT pg_reload_conf()" >/dev/null
    initdb_node node1
    create_node node1 "$P1"
    wait_states "node1=single/single"
    create_node node2 "$P2"
    wait_states "node1=primary/primary node2=secondary/secondary"
}

start_nats() {
    for i in 0 1 2; do
        local routes="" j
        for j in 0 1 2; do [ "$j" != "$i" ] && routes="$routes nats-route://127.0.0.1:$((BASE + 8 + j)),"; done
        mkdir -p "$DIR/nats$i"
        cat >"$DIR/nats$i.conf" <<EOF
server_name: n$i
listen: 127.0.0.1:${NATS[$i]}
http: 127.0.0.1:$((BASE + 11 + i))
jetstream { store_dir: "$DIR/nats$i", max_memory_store: 256MB, max_file_store: 1GB }
cluster { name: ledger, listen: 127.0.0.1:$((BASE + 8 + i)), routes: [${routes%,}] }
EOF
        setsid nats-server -c "$DIR/nats$i.conf" >>"$DIR/nats$i.log" 2>&1 </dev/null &
        echo $! >"$DIR/nats$i.pid"
    done
}

start_ledger() {
    local url="postgresql://postgres@127.0.0.1:$P1,127.0.0.1:$P2/ledger?target_session_attrs=read-write&sslmode=require&connect_timeout=2"
    local replica="postgresql://postgres@127.0.0.1:$P2/ledger?sslmode=require&connect_timeout=1"
    local nats="nats://127.0.0.1:${NATS[0]},nats://127.0.0.1:${NATS[1]},nats://127.0.0.1:${NATS[2]}"
    DATABASE_URL="$url" "$LEDGER" migrate >/dev/null
    DATABASE_URL="$url" LEDGER_REPLICA_URL="$replica" LEDGER_NATS_URL="$nats" \
        setsid "$LEDGER" serve --listen "127.0.0.1:$GRPC" --metrics-listen "127.0.0.1:$METRICS" \
        --nats-replicas 3 >>"$DIR/ledger.log" 2>&1 </dev/null &
    echo $! >"$DIR/ledger.pid"
    echo "$url" >"$DIR/database-url"
}

kill_group() { [ -s "$1" ] && kill -9 -- "-$(cat "$1")" 2>/dev/null || true; rm -f "$1"; }

stop() {
    for f in "$DIR"/*.pid; do [ -e "$f" ] && kill_group "$f"; done
    # The postmasters' children make groups of their own: whatever still works in DIR.
    for p in /proc/[0-9]*; do
        case "$(readlink "$p/cwd" 2>/dev/null)" in "$DIR"*) kill -9 "${p#/proc/}" 2>/dev/null || true ;; esac
    done
    log "stopped; logs in $DIR"
}

primary_node() { case "$(states)" in *node1=primary*|*node1=wait_primary*) echo node1 ;; *) echo node2 ;; esac; }

cmd=${1:-start}
case "$cmd" in
    kill-primary) DIR=$2; n=$(primary_node); kill_group "$DIR/$n.pid"
        for p in /proc/[0-9]*; do case "$(readlink "$p/cwd" 2>/dev/null)" in "$DIR/$n"*) kill -9 "${p#/proc/}" 2>/dev/null || true ;; esac; done
        log "$n SIGKILLed at $(date +%T.%N); watch: scripts/ha-demo.sh states $DIR"; echo "$n" >"$DIR/killed" ;;
    rejoin) DIR=$2; n=$(cat "$DIR/killed"); run_node "$n"; log "$n restarted; it rejoins as the standby" ;;
    states) DIR=$2; states ;;
    stop) DIR=$2; stop ;;
    start) DIR=${2:-/tmp/ledger-ha-demo}
        [ -e "$DIR" ] && { log "$DIR exists: scripts/ha-demo.sh stop $DIR, then remove it"; exit 1; }
        mkdir -p "$DIR"; DIR=$(cd "$DIR" && pwd)
        trap stop EXIT
        log "starting in $DIR"; began=$(date +%s)
        start_postgres; start_nats; start_ledger
        log "ready in $(( $(date +%s) - began )) s: gRPC 127.0.0.1:$GRPC, metrics http://127.0.0.1:$METRICS/metrics"
        log "try: $LEDGER account create --server 127.0.0.1:$GRPC …; $LEDGER bench --server 127.0.0.1:$GRPC --duration 60"
        log "then, in another shell: scripts/ha-demo.sh kill-primary $DIR; scripts/ha-demo.sh rejoin $DIR"
        log "Ctrl-C stops everything"
        while :; do sleep 5; printf '%s  %s\n' "$(date +%T)" "$(states 2>/dev/null || echo 'monitor unreachable')"; done ;;
    *) sed -n '2,17p' "$0"; exit 2 ;;
esac
