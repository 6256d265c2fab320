#!/usr/bin/env bash
# Builds the durable-mcp binary, starts the example server on the default embedded SQLite
# store (a fresh file) and runs the three official conformance runs against it
# (scripts/conformance.sh). Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
port="${CONFORMANCE_PORT:-18123}"
work="$(mktemp -d)"
trap 'kill "$server_pid" 2>/dev/null || true; rm -rf "$work"' EXIT

cargo build --quiet -p durable-mcp-cli
./target/debug/durable-mcp serve --example everything --listen "127.0.0.1:$port" \
  --store "sqlite:$work/conformance.db" >"$work/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 100); do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then break; fi
  sleep 0.1
done
if ! scripts/conformance.sh "http://127.0.0.1:$port/mcp"; then
  echo "--- server log (last 50 lines) ---"
  tail -n 50 "$work/server.log"
  exit 1
fi
