#!/usr/bin/env bash
# The official conformance suites through nginx (plain round-robin, no stickiness,
# buffering off) in front of three durable-mcp workers sharing one store, for PostgreSQL
# and for Redis. Usage: scripts/lb-conformance.sh [postgres|redis ...]
# Reads DATABASE_URL / REDIS_URL (defaults on loopback). LB_CONFORMANCE_RUNS picks the runs
# (default: all three, "0.1.16 2025-11-25 2026-07-28"; the 2026-07-28 run includes the
# tasks-* scenarios, so tasks are created, polled and updated across the three workers).
set -euo pipefail
cd "$(dirname "$0")/.."
backends=("$@")
[ ${#backends[@]} -gt 0 ] || backends=(postgres redis)
scripts/setup-nginx.sh
cargo build --quiet -p durable-mcp-cli
nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 1 200); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done; echo "port $1 did not open" >&2; return 1; }

status=0
for backend in "${backends[@]}"; do
  work=$(mktemp -d)
  tag="lb$(date +%s%N | tail -c 12)"
  case "$backend" in
    postgres) base="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}"; key=schema; value="dmcp_$tag" ;;
    redis) base="${REDIS_URL:-redis://127.0.0.1:6379}"; key=prefix; value="dmcp-$tag" ;;
    *) echo "unknown backend $backend" >&2; exit 2 ;;
  esac
  case "$base" in *\?*) store="$base&$key=$value" ;; *) store="$base?$key=$value" ;; esac
  pids=()
  upstreams=""
  for i in 1 2 3; do
    port=$(free_port)
    # Default flags: the workers share the requestState key ring in the store.
    ./target/debug/durable-mcp serve --example everything --listen "127.0.0.1:$port" --store "$store" \
      >"$work/worker$i.log" 2>&1 &
    pids+=($!)
    wait_port "$port"
    upstreams+="        server 127.0.0.1:$port;"$'\n'
  done
  lb_port=$(free_port)
  mkdir -p "$work/nginx"
  cat >"$work/nginx/nginx.conf" <<CONF
daemon off;
worker_processes 1;
pid $work/nginx/nginx.pid;
error_log $work/nginx/error.log warn;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path $work/nginx/body;
    proxy_temp_path $work/nginx/proxy;
    fastcgi_temp_path $work/nginx/fastcgi;
    uwsgi_temp_path $work/nginx/uwsgi;
    scgi_temp_path $work/nginx/scgi;
    upstream mcp {
$upstreams        keepalive 32;
    }
    server {
        listen 127.0.0.1:$lb_port;
        location /mcp {
            proxy_pass http://mcp;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host \$host;
            proxy_buffering off;
            proxy_request_buffering off;
            proxy_cache off;
            proxy_read_timeout 3600s;
        }
    }
}
CONF
  "$nginx_bin" -p "$work/nginx" -c "$work/nginx/nginx.conf" &
  nginx_pid=$!
  wait_port "$lb_port"
  echo "== $backend: 3 workers behind nginx on 127.0.0.1:$lb_port (store $store)"
  if ! CONFORMANCE_RUNS="${LB_CONFORMANCE_RUNS:-0.1.16 2025-11-25 2026-07-28}" CONFORMANCE_OUT="$work/conformance" \
      scripts/conformance.sh "http://127.0.0.1:$lb_port/mcp"; then
    status=1
    tail -n 20 "$work"/worker*.log "$work/nginx/error.log" || true
  fi
  kill "$nginx_pid" "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
done
exit $status
