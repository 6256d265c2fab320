#!/usr/bin/env bash
# Drives the durable-mcp example server with the official Python MCP SDK (`mcp` on PyPI).
#
#   scripts/python-client-test.sh [-k SUBSTRING]
#
# 1. Creates <repo>/.tools/venv (git-ignored) with the machine's python3 and installs the
#    pinned SDK into it (scripts/setup-python.sh; skipped when that version is there).
# 2. Builds the durable-mcp binary (cargo build -p durable-mcp-cli, under flock).
# 3. For each store, `memory:` then `sqlite:<fresh temp file>`: starts
#      durable-mcp serve --example everything --listen 127.0.0.1:<free port> --store <store>
#    runs tests/python/test_client.py against http://127.0.0.1:<port>/mcp, stops the server.
#    The same run drives `durable-mcp serve --stdio` (launched by the SDK's stdio client)
#    on its own store of the same kind.
#
# The Python tests cover both protocol eras: 2025-11-25 (initialize, tools/list,
# tools/call, elicitation answered by the SDK's callback, progress) and 2026-07-28
# (server/discover, tools/list, tools/call, input_required results retried with
# inputResponses / requestState, by hand and through the SDK's callbacks), and stdio
# (list changes and resource updates reach the client).
#
# 4. Authorization: a server with `--auth-api-keys` (a key file made here), the HTTP tests
#    run again with the key as the SDK's bearer token, and the SDK is refused without it
#    or with a wrong one (`--token`, see test_client.py).
# 5. The HTTP tests again through `durable-mcp proxy` (SQLite) in front of the example
#    served over stdio, both eras (one known gap left out with --skip).
#
# -k SUBSTRING runs only the tests whose name contains it.
#
# Environment:
#   PYTHON            interpreter for the venv (default python3; needs >= 3.10)
#   MCP_SDK_VERSION   SDK version to install (default: the pinned one below)
#   CARGO_LOCK        lock file for flock around cargo (default /tmp/cargo.lock)
#   SKIP_BUILD=1      use the existing target/debug/durable-mcp as is
#
# Prints one PASS/FAIL line per test and per store, then the closing line
# "N passed, M failed". Exits non-zero if any test failed or anything else went wrong.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
cd "$REPO_ROOT"

MCP_SDK_VERSION="${MCP_SDK_VERSION:-2.3.0}"
PYTHON="${PYTHON:-python3}"
VENV="$REPO_ROOT/.tools/venv"
VENV_PY="$VENV/bin/python"
TEST_FILE="$REPO_ROOT/tests/python/test_client.py"
BIN="$REPO_ROOT/target/debug/durable-mcp"
CARGO_LOCK="${CARGO_LOCK:-/tmp/cargo.lock}"

log() { echo "[python-client-test] $*" >&2; }

source "$SCRIPT_DIR/client-harness.sh"
parse_selector "$@"
work="$(mktemp -d)"
server_pid=""
total_passed=0
total_failed=0
summary_printed=0
on_exit() {
  local rc=$?
  stop_server
  rm -rf "$work"
  # A setup step (venv, SDK install, build) failed before any summary: still close with one.
  if [ "$summary_printed" = 0 ] && [ "$rc" -ne 0 ]; then
    echo "$total_passed passed, $((total_failed + 1)) failed"
  fi
  exit "$rc"
}
trap on_exit EXIT

# ------------------------------------------------------------------ venv --
# scripts/setup-python.sh creates the venv and installs the pinned SDK (PYTHON and
# MCP_SDK_VERSION pass through to it).
PYTHON="$PYTHON" MCP_SDK_VERSION="$MCP_SDK_VERSION" "$SCRIPT_DIR/setup-python.sh" >/dev/null

# ----------------------------------------------------------------- build --
build_cli

# ------------------------------------------------------------------- run --
free_port() {
  "$VENV_PY" -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()'
}

run_store() {
  local label="$1" store="$2" stdio_store="$3"
  local out="$work/$label.out" logfile="$work/$label-server.log" rc=0
  log "store $store"
  if ! start_server "$store" "$logfile"; then
    echo "FAIL [$label] server_start: the server did not start with --store $store"
    total_failed=$((total_failed + 1))
    return 0
  fi
  local stdio_args=()
  if [ -n "$stdio_store" ]; then
    stdio_args=(--stdio-command "$BIN" --stdio-store "$stdio_store")
  fi
  "$VENV_PY" "$TEST_FILE" --url "http://127.0.0.1:$port/mcp" ${stdio_args[@]+"${stdio_args[@]}"} \
    --label "$label" ${CLIENT_EXTRA[@]+"${CLIENT_EXTRA[@]}"} "${SELECTOR[@]}" \
    </dev/null 2>&1 | tee "$out" || rc=$?
  if ! alive "$server_pid"; then
    echo "FAIL [$label] server_alive: the server exited during the tests"
    total_failed=$((total_failed + 1))
    rc=1
  fi
  stop_server
  if ! read_summary "$out"; then
    echo "FAIL [$label] test_client: the Python test run printed no summary (exit $rc)"
    total_failed=$((total_failed + 1))
    rc=1
  else
    total_passed=$((total_passed + summary_passed))
    total_failed=$((total_failed + summary_failed))
    if [ "$rc" -ne 0 ] && [ "$summary_failed" -eq 0 ]; then
      echo "FAIL [$label] test_client: the Python test run exited $rc"
      total_failed=$((total_failed + 1))
    fi
  fi
  if [ "$rc" -ne 0 ]; then
    echo "--- server log, --store $store (last 40 lines) ---"
    tail -n 40 "$logfile" || true
    echo "--- end of server log ---"
  fi
}

run_store memory "memory:" "memory:"
run_store sqlite "sqlite:$work/python-client.db" "sqlite:$work/python-stdio.db"

# Authorization (API keys): the same HTTP tests with a bearer token, and refusals without it.
api_key="k-python-$RANDOM$RANDOM$RANDOM"
printf 'python %s\n' "$api_key" >"$work/api-keys"
SERVER_EXTRA=(--auth-api-keys "$work/api-keys")
CLIENT_EXTRA=(--token "$api_key")
run_store auth "sqlite:$work/python-auth.db" ""
SERVER_EXTRA=()
CLIENT_EXTRA=()

# Through `durable-mcp proxy` on SQLite, in front of the example served over stdio: the
# same HTTP tests, both eras. Left out: the one test that checks the example's own name
# for a 2026-07-28 question, which a 2025-era upstream behind the proxy cannot give (the
# proxy numbers its questions q1, q2, ...: docs/proxy.md, "Conformance through the proxy").
SERVED=(proxy --pool-size 1)
SERVER_EXTRA=(-- "$BIN" serve --stdio --example everything --store memory:)
CLIENT_EXTRA=(--skip modern_input_required_manual_retry)
run_store proxy "sqlite:$work/python-proxy.db" ""
unset SERVED
SERVER_EXTRA=()
CLIENT_EXTRA=()

summary_printed=1
echo "$total_passed passed, $total_failed failed"
if [ "$total_failed" -ne 0 ] || [ "$total_passed" -eq 0 ]; then
  exit 1
fi
