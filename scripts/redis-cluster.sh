#!/usr/bin/env bash
# A private Redis Cluster on loopback for the cluster tests: 3 masters + 3 replicas of the
# local redis-server, each node in its own directory (own nodes.conf) under
# .tools/redis-cluster/node-N/, on free ports of 127.0.0.1 (client port and cluster bus port),
# node timeout 2 s, no persistence, replicas synced without the default 5 s delay. The shared
# Redis on 6379 and the TLS Redis of scripts/tls-services.sh are not touched: a node is ours
# when its pidfile's process runs redis-server with its working directory in the node's
# directory.
#   scripts/redis-cluster.sh start             starts the cluster unless it is healthy: stopped
#                                               nodes again if some of ours run, else (a new
#                                               boot) a new cluster on new ports; prints one line
#   scripts/redis-cluster.sh stop              stops the six nodes
#   scripts/redis-cluster.sh env               prints .tools/redis-cluster/env (`export NAME='value'`)
#   scripts/redis-cluster.sh kill-master-of KEY  SIGKILLs the master of KEY's slot; prints its port
#   scripts/redis-cluster.sh restart-node PORT   starts a killed node again (it rejoins as a
#                                               replica of the one promoted in its place)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/ports.sh"
source "$here/pids.sh"
# -P: /proc/PID/cwd is the physical path.
dir="$(cd "$here/.." && pwd -P)/.tools/redis-cluster"
nodes=6
node_timeout_ms=2000
umask 022

# cli PORT ARGS...: redis-cli against 127.0.0.1:PORT (bounded: a stopped node must not hang us).
cli() { local port=$1; shift; timeout 5 redis-cli -h 127.0.0.1 -p "$port" "$@"; }
node_dir() { echo "$dir/node-$1"; }
# port_free PORT: nothing is bound to 127.0.0.1:PORT (SO_REUSEADDR, as the servers bind).
port_free() {
  python3 -c 'import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))' "$1" 2>/dev/null
}
ours() { pid_is "$1/redis.pid" redis-server "$1"; }
# running DIR: the node of DIR is ours and answers PING.
running() { ours "$1" && [ "$(cli "$(cat "$1/port")" PING 2>/dev/null)" = PONG ]; }
# dir_of_port PORT: the node directory whose client port is PORT.
dir_of_port() {
  local i d
  for i in $(seq 1 "$nodes"); do
    d=$(node_dir "$i")
    [ "$(cat "$d/port" 2>/dev/null)" = "$1" ] && { echo "$d"; return 0; }
  done
  return 1
}
all_ports() { local i; for i in $(seq 1 "$nodes"); do cat "$(node_dir "$i")/port"; done | tr '\n' ' ' | sed 's/ $//'; }
# live_ports: the client ports of our running nodes.
live_ports() {
  local i d
  for i in $(seq 1 "$nodes"); do
    d=$(node_dir "$i")
    [ -s "$d/port" ] && running "$d" && cat "$d/port"
  done
  return 0
}
# masters PORT: the masters (not failed, with slots) as seen by the node on PORT, one
# "port first-slot" line each, in slot order.
masters() {
  cli "$1" CLUSTER NODES 2>/dev/null | awk '
    $3 ~ /master/ && $3 !~ /fail/ && NF >= 9 {
      split($2, a, "[:@]"); first = $9; sub(/-.*/, "", first); print a[2], first
    }' | sort -k 2 -n
}
# healthy PORTS...: every node on PORTS says cluster_state:ok, there are 3 masters with
# slots, each with a replica whose cluster link is connected and whose replication link is up
# (a replica that never synced cannot be elected in a failover).
healthy() {
  local p
  for p in "$@"; do
    cli "$p" CLUSTER INFO 2>/dev/null | grep -q '^cluster_state:ok' || return 1
  done
  local view
  view=$(cli "$1" CLUSTER NODES 2>/dev/null) || return 1
  [ "$(masters "$1" | wc -l)" = 3 ] || return 1
  # Masters (not failed) without a connected replica of theirs.
  [ -z "$(awk '
    $3 ~ /master/ && $3 !~ /fail/ && NF >= 9 { m[$1] = 1 }
    $3 ~ /slave/ && $3 !~ /fail/ && $8 == "connected" { r[$4] = 1 }
    END { for (id in m) if (!(id in r)) print id }' <<<"$view")" ] || return 1
  local slaves
  slaves=$(awk '$3 ~ /slave/ && $3 !~ /fail/ && $8 == "connected" { split($2, a, "[:@]"); print a[2] }' <<<"$view")
  [ "$(wc -w <<<"$slaves")" -ge 3 ] || return 1
  for p in $slaves; do
    cli "$p" INFO replication 2>/dev/null | tr -d '\r' | grep -q '^master_link_status:up' || return 1
  done
}
# wait_healthy SECONDS: healthy on all our running nodes within SECONDS.
wait_healthy() {
  local end=$(( SECONDS + $1 ))
  while :; do
    # shellcheck disable=SC2046
    healthy $(live_ports) && return 0
    [ "$SECONDS" -lt "$end" ] || return 1
    sleep 0.1
  done
}

# start_node DIR: the node of DIR (its port, bus-port and nodes.conf), daemonized.
start_node() {
  local d=$1 port bus
  port=$(cat "$d/port")
  bus=$(cat "$d/bus-port")
  rm -f "$d/redis.pid"
  # (9>&-: the servers must not inherit the lock start/stop hold on fd 9.)
  redis-server --port "$port" --bind 127.0.0.1 --cluster-enabled yes --cluster-port "$bus" \
    --cluster-config-file "$d/nodes.conf" --cluster-node-timeout "$node_timeout_ms" \
    --cluster-allow-reads-when-down no --save "" --appendonly no --repl-diskless-sync-delay 0 \
    --daemonize yes --pidfile "$d/redis.pid" --logfile "$d/redis.log" --dir "$d" >/dev/null 9>&-
  wait_listening "$port" 10 || { echo "redis-cluster: node on $port did not start (see $d/redis.log)" >&2; return 1; }
  for _ in $(seq 1 100); do running "$d" && return 0; sleep 0.05; done
  echo "redis-cluster: node on $port does not answer PING (see $d/redis.log)" >&2
  return 1
}

stop_all() {
  local i
  for i in $(seq 1 "$nodes"); do
    stop_pid "$(node_dir "$i")/redis.pid" redis-server "$(node_dir "$i")"
  done
}

# create: six fresh nodes on new ports, joined into a cluster (3 masters, 1 replica each).
create() {
  stop_all
  rm -rf "$dir"/node-* "$dir/create.log"
  local i d p ports
  # Client and cluster bus ports (the bus's default, port + 10000, may be past 65535).
  mapfile -t ports < <(free_ports $(( 2 * nodes )))
  for i in $(seq 1 "$nodes"); do
    d=$(node_dir "$i")
    mkdir -p "$d"
    echo "${ports[2 * i - 2]}" >"$d/port"
    echo "${ports[2 * i - 1]}" >"$d/bus-port"
  done
  for i in $(seq 1 "$nodes"); do start_node "$(node_dir "$i")"; done
  local addrs=()
  for p in $(all_ports); do addrs+=("127.0.0.1:$p"); done
  if ! timeout 60 redis-cli --cluster create "${addrs[@]}" --cluster-replicas 1 --cluster-yes \
    >"$dir/create.log" 2>&1 9>&-; then
    echo "redis-cluster: redis-cli --cluster create failed (see $dir/create.log)" >&2
    return 1
  fi
}

write_env() {
  local p tmp="$dir/env.tmp" seeds=""
  p=$(live_ports | head -n 1)
  for m in $(masters "$p" | cut -d ' ' -f 1); do seeds="$seeds${seeds:+,}127.0.0.1:$m"; done
  {
    echo "# Written by scripts/redis-cluster.sh; source it."
    printf "export REDIS_CLUSTER_URL='%s'\n" "redis+cluster://$seeds"
    printf "export REDIS_CLUSTER_PORTS='%s'\n" "$(all_ports)"
  } >"$tmp"
  if cmp -s "$tmp" "$dir/env"; then rm -f "$tmp"; else mv "$tmp" "$dir/env"; fi
  master_list=${seeds//127.0.0.1:/}
}

lock() {
  mkdir -p "$dir"
  exec 9>"$dir/.lock"
  flock 9
}

case "${1:-}" in
  start)
    lock
    up=0 down=""
    for i in $(seq 1 "$nodes"); do
      d=$(node_dir "$i")
      if [ -s "$d/port" ] && [ -s "$d/bus-port" ] && running "$d"; then up=$((up + 1)); else down="$down $d"; fi
    done
    # All six up: a failover may be settling; give it a few seconds before starting anew.
    if [ "$up" = "$nodes" ] && wait_healthy 5; then
      write_env
      echo "redis-cluster: running (masters ${master_list//,/ }; ports $(all_ports)); env in ${dir#"$(pwd -P)/"}/env"
      exit 0
    fi
    # Some of ours run (a test killed nodes): start the others again with their nodes.conf.
    # None (a new boot): start anew, as below when that does not work either.
    if [ "$up" -gt 0 ] && [ -n "$down" ]; then
      repaired=1
      for d in $down; do
        [ -s "$d/nodes.conf" ] && port_free "$(cat "$d/port")" && port_free "$(cat "$d/bus-port")" \
          && start_node "$d" || { repaired=0; break; }
      done
      if [ "$repaired" = 1 ] && wait_healthy 20; then
        write_env
        echo "redis-cluster: started$(for d in $down; do printf ' %s' "$(cat "$d/port")"; done) again (masters ${master_list//,/ }; ports $(all_ports)); env in ${dir#"$(pwd -P)/"}/env"
        exit 0
      fi
      echo "redis-cluster: could not start the stopped nodes again; starting anew" >&2
    fi
    create
    if ! wait_healthy 20; then
      echo "redis-cluster: the cluster is not healthy after 20 s (see $dir/node-*/redis.log, $dir/create.log)" >&2
      exit 1
    fi
    write_env
    echo "redis-cluster: started 3 masters + 3 replicas (masters ${master_list//,/ }; ports $(all_ports)); env in ${dir#"$(pwd -P)/"}/env"
    ;;
  stop)
    [ -d "$dir" ] || exit 0
    lock
    stop_all
    echo "redis-cluster: stopped"
    ;;
  env)
    cat "$dir/env"
    ;;
  kill-master-of)
    [ -n "${2:-}" ] || { echo "usage: $0 kill-master-of KEY" >&2; exit 2; }
    lock
    p=$(live_ports | head -n 1)
    [ -n "$p" ] || { echo "redis-cluster: no node is running" >&2; exit 1; }
    slot=$(cli "$p" CLUSTER KEYSLOT "$2")
    master=$(cli "$p" CLUSTER NODES | awk -v slot="$slot" '
      $3 ~ /master/ && $3 !~ /fail/ {
        for (i = 9; i <= NF; i++) {
          if ($i ~ /^\[/) continue
          n = split($i, r, "-"); lo = r[1]; hi = (n == 2 ? r[2] : r[1])
          if (slot + 0 >= lo + 0 && slot + 0 <= hi + 0) { split($2, a, "[:@]"); print a[2]; exit }
        }
      }')
    [ -n "$master" ] || { echo "redis-cluster: no master serves slot $slot" >&2; exit 1; }
    d=$(dir_of_port "$master") || { echo "redis-cluster: port $master is not one of our nodes" >&2; exit 1; }
    ours "$d" || { echo "redis-cluster: the node on $master is not running" >&2; exit 1; }
    pid=$(head -n 1 "$d/redis.pid")
    kill -KILL "$pid"
    for _ in $(seq 1 100); do alive "$pid" || break; sleep 0.05; done
    echo "$master"
    ;;
  restart-node)
    [ -n "${2:-}" ] || { echo "usage: $0 restart-node PORT" >&2; exit 2; }
    lock
    d=$(dir_of_port "$2") || { echo "redis-cluster: port $2 is not one of our nodes" >&2; exit 1; }
    if running "$d"; then
      echo "redis-cluster: the node on $2 is running"
      exit 0
    fi
    start_node "$d"
    # It rejoins as a replica of the node promoted in its place once it has synced.
    for _ in $(seq 1 200); do
      cli "$2" INFO replication 2>/dev/null | tr -d '\r' | grep -q '^master_link_status:up' \
        && break
      sleep 0.1
    done
    wait_healthy 20 || { echo "redis-cluster: the cluster is not healthy 20 s after restarting $2 (see $d/redis.log)" >&2; exit 1; }
    write_env
    echo "redis-cluster: node $2 is back as $(cli "$2" ROLE | head -n 1) (masters ${master_list//,/ })"
    ;;
  *)
    echo "usage: $0 start|stop|env|kill-master-of KEY|restart-node PORT" >&2
    exit 2
    ;;
esac
