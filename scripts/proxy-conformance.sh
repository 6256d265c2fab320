#!/usr/bin/env bash
# The official conformance runs through `durable-mcp proxy` (SQLite store) in front of
# `durable-mcp serve --stdio --example everything` (a stdio upstream), judged by the
# expected-failures baselines in tests/conformance/proxy/<run>.yml (scripts/conformance.sh
# with CONFORMANCE_BASELINE): a failure not listed fails the run, and so does a listed one
# that passes now (a stale entry). Uses the debug binary the test command built (cargo
# build is a no-op then). PROXY_CONFORMANCE_PORT picks the port (default: a free one).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ports.sh
port="${PROXY_CONFORMANCE_PORT:-$(free_port)}"
work="$(mktemp -d)"
proxy_pid=""
trap '[ -z "$proxy_pid" ] || kill "$proxy_pid" 2>/dev/null || true; rm -rf "$work"' EXIT

cargo build --quiet -p durable-mcp-cli
bin="$PWD/target/debug/durable-mcp"
# One pool child: the example keeps state per process (its dynamic tool, toggled by one
# scenario), and 2026-07-28 requests spread over several children would see several states
# (`tools-list-deterministic-order` then warns or not, by which child answered each probe).
# That per-process state is the documented limit of a stateful upstream (docs/proxy.md),
# not a conformance question.
"$bin" proxy --listen "127.0.0.1:$port" --store "sqlite:$work/proxy.db" --pool-size 1 -- \
  "$bin" serve --stdio --example everything --store memory: >"$work/proxy.log" 2>&1 &
proxy_pid=$!
if ! wait_listening "$port" 30; then
  echo "the proxy did not listen on port $port; its log:"
  cat "$work/proxy.log"
  exit 1
fi
if ! CONFORMANCE_BASELINE=tests/conformance/proxy CONFORMANCE_OUT="${CONFORMANCE_OUT:-.tools/conformance-logs/proxy}" \
  scripts/conformance.sh "http://127.0.0.1:$port/mcp"; then
  echo "--- proxy log (last 50 lines) ---"
  tail -n 50 "$work/proxy.log"
  exit 1
fi
if grep -n "panicked" "$work/proxy.log"; then
  echo "the proxy or its upstream panicked (above)"
  exit 1
fi
