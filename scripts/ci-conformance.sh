#!/usr/bin/env bash
# Builds the durable-mcp binary, starts the example server on the default embedded SQLite
# store (a fresh file) and runs the three official conformance runs against it
# (scripts/conformance.sh: it fails unless the counts match the README's, with no warning).
# Exits non-zero on any failure. CONFORMANCE_PORT picks the port (default: a free one).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ports.sh
port="${CONFORMANCE_PORT:-$(free_port)}"
work="$(mktemp -d)"
trap 'kill "$server_pid" 2>/dev/null || true; rm -rf "$work"' EXIT

cargo build --quiet -p durable-mcp-cli
./target/debug/durable-mcp serve --example everything --listen "127.0.0.1:$port" \
  --store "sqlite:$work/conformance.db" >"$work/server.log" 2>&1 &
server_pid=$!
if ! wait_listening "$port" 10; then
  echo "the example server did not listen on port $port; its log:"
  cat "$work/server.log"
  exit 1
fi
if ! scripts/conformance.sh "http://127.0.0.1:$port/mcp"; then
  echo "--- server log (last 50 lines) ---"
  tail -n 50 "$work/server.log"
  exit 1
fi
