#!/usr/bin/env bash
# The official conformance suites through nginx (plain round-robin, no stickiness,
# buffering off) in front of three durable-mcp workers sharing one store, for PostgreSQL
# for Redis and for a Redis Cluster. Usage: scripts/lb-conformance.sh [postgres|redis|redis-cluster ...]
# Reads DATABASE_URL / REDIS_URL (defaults on loopback) and REDIS_CLUSTER_URL (from
# scripts/redis-cluster.sh, which redis-cluster starts when it is unset). LB_CONFORMANCE_RUNS picks the runs
# (default: all three, "0.1.16 2025-11-25 2026-07-28"; the 2026-07-28 run includes the
# tasks-* scenarios, so tasks are created, polled and updated across the three workers).
# nginx runs scripts/nginx.conf.template (the configuration docs/deployment.md shows and the
# Rust load-balancer test runs). Fails if a run fails (scripts/conformance.sh: the README's
# counts, no warning), if a worker served no request (nginx's access log names the upstream
# of each) or if a worker log has a panic.
set -euo pipefail
cd "$(dirname "$0")/.."
backends=("$@")
[ ${#backends[@]} -gt 0 ] || backends=(postgres redis)
scripts/setup-nginx.sh
cargo build --quiet -p durable-mcp-cli
nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)
source scripts/ports.sh
wait_port() { wait_listening "$1" 10 || { echo "port $1 did not open" >&2; return 1; }; }

# check_workers WORK PORT...: every worker served requests (nginx's access log records the
# upstream of each) and no worker log has a panic.
check_workers() {
  local work="$1" ok=0 i=0 port served
  shift
  for port in "$@"; do
    i=$((i + 1))
    served=$(grep -c "^127\.0\.0\.1:$port " "$work/nginx/access.log" || true)
    echo "  worker$i (127.0.0.1:$port): $served requests"
    if [ "$served" -eq 0 ]; then
      echo "  FAILED: worker$i served no request; the run did not go through all three workers" >&2
      ok=1
    fi
    if grep -n "panicked" "$work/worker$i.log" >&2; then
      echo "  FAILED: worker$i panicked (log above)" >&2
      ok=1
    fi
  done
  return $ok
}

status=0
for backend in "${backends[@]}"; do
  work=$(mktemp -d)
  tag="lb$(date +%s%N | tail -c 12)"
  case "$backend" in
    postgres) base="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}"; key=schema; value="dmcp_$tag" ;;
    redis) base="${REDIS_URL:-redis://127.0.0.1:6379}"; key=prefix; value="dmcp-$tag" ;;
    redis-cluster)
      if [ -z "${REDIS_CLUSTER_URL:-}" ]; then scripts/redis-cluster.sh start >/dev/null; source .tools/redis-cluster/env; fi
      base="$REDIS_CLUSTER_URL"; key=prefix; value="dmcp-$tag" ;;
    *) echo "unknown backend $backend" >&2; exit 2 ;;
  esac
  case "$base" in *\?*) store="$base&$key=$value" ;; *) store="$base?$key=$value" ;; esac
  pids=()
  ports=()
  upstreams=""
  for i in 1 2 3; do
    port=$(free_port)
    # Default flags: the workers share the requestState key ring in the store.
    ./target/debug/durable-mcp serve --example everything --listen "127.0.0.1:$port" --store "$store" \
      >"$work/worker$i.log" 2>&1 &
    pids+=($!)
    ports+=("$port")
    wait_port "$port"
    upstreams+="        server 127.0.0.1:$port;"$'\n'
  done
  lb_port=$(free_port)
  mkdir -p "$work/nginx"
  # The one nginx configuration (also read by crates/cli/tests/support/nginx.rs).
  servers="${upstreams%$'\n'}"
  awk -v dir="$work/nginx" -v listen="127.0.0.1:$lb_port" -v servers="$servers" \
    '{ gsub(/@DIR@/, dir); gsub(/@LISTEN@/, listen); if ($0 ~ /@SERVERS@/) $0 = servers; print }' \
    scripts/nginx.conf.template >"$work/nginx/nginx.conf"
  "$nginx_bin" -p "$work/nginx" -c "$work/nginx/nginx.conf" &
  nginx_pid=$!
  wait_port "$lb_port"
  echo "== $backend: 3 workers behind nginx on 127.0.0.1:$lb_port (store $store)"
  if ! CONFORMANCE_RUNS="${LB_CONFORMANCE_RUNS:-0.1.16 2025-11-25 2026-07-28}" CONFORMANCE_OUT="$work/conformance" \
      scripts/conformance.sh "http://127.0.0.1:$lb_port/mcp"; then
    status=1
    tail -n 20 "$work"/worker*.log "$work/nginx/error.log" || true
  fi
  if ! check_workers "$work" "${ports[@]}"; then
    status=1
  fi
  kill "$nginx_pid" "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
done
exit $status
