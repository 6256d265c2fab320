#!/usr/bin/env bash
# Drives the durable-mcp example server with the official TypeScript MCP SDK clients:
#   tests/typescript/sdk_v1.mjs     @modelcontextprotocol/sdk (v1, legacy era, 2025-11-25)
#   tests/typescript/client_v2.mjs  @modelcontextprotocol/client (v2, modern era, 2026-07-28)
# with the exact versions of tests/typescript/package.json and package-lock.json.
#
#   scripts/typescript-client-test.sh [-k SUBSTRING]
#
# 1. Node 22 from .tools (scripts/setup-tools.sh); the clients are installed with `npm ci`
#    into .tools/typescript-clients (git-ignored), skipped when the lock file is unchanged;
#    the test files are copied beside them (plain ESM, no build step).
# 2. Builds the durable-mcp binary (cargo build -p durable-mcp-cli, under flock).
# 3. For each store, `memory:` then `sqlite:<fresh temp file>`: starts
#      durable-mcp serve --example everything --listen 127.0.0.1:<free port> --store <store>
#    runs both client files against http://127.0.0.1:<port>/mcp, stops the server. Tests
#    that kill and restart a server start their own (on a SQLite file of their own).
# 4. Through the proxy: starts
#      durable-mcp proxy --listen 127.0.0.1:<free port> --store sqlite:<fresh temp file> -- \
#        node .tools/server-everything/.../dist/index.js stdio
#    and runs tests/typescript/proxy_clients.mjs (both SDK clients, both eras) against it.
#
# -k SUBSTRING runs only the tests whose name contains it.
#
# Environment:
#   CARGO_LOCK    lock file for flock around cargo (default /tmp/cargo.lock)
#   SKIP_BUILD=1  use the existing target/debug/durable-mcp as is
#   TS_SDK_*=1    run a test that is skipped because of a known defect as a failure (the
#                 SKIP line names its variable)
#
# Prints one PASS/FAIL/SKIP line per test, client and store, then the closing line
# "N passed, M failed, K skipped". Exits non-zero if any test failed, if no test passed, or
# if anything else went wrong.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
cd "$REPO_ROOT"

SRC="$REPO_ROOT/tests/typescript"
DEST="$REPO_ROOT/.tools/typescript-clients"
BIN="$REPO_ROOT/target/debug/durable-mcp"
CARGO_LOCK="${CARGO_LOCK:-/tmp/cargo.lock}"
CLIENTS=(sdk_v1 client_v2)

log() { echo "[typescript-client-test] $*" >&2; }

source "$SCRIPT_DIR/client-harness.sh"
parse_selector "$@"
work="$(mktemp -d)"
server_pid=""
total_passed=0
total_failed=0
total_skipped=0
summary_printed=0
on_exit() {
  local rc=$?
  stop_server
  rm -rf "$work"
  if [ "$summary_printed" = 0 ] && [ "$rc" -ne 0 ]; then
    echo "$total_passed passed, $((total_failed + 1)) failed, $total_skipped skipped"
  fi
  exit "$rc"
}
trap on_exit EXIT

# ------------------------------------------------------------ Node, clients --
setup_out="$("$SCRIPT_DIR/setup-tools.sh" </dev/null)"
NODE22_BIN="$(printf '%s\n' "$setup_out" | sed -n 's/^NODE22_BIN=//p' | tail -n1)"
if [ -z "$NODE22_BIN" ] || [ ! -x "$NODE22_BIN/node" ]; then
  log "ERROR: setup-tools.sh did not report a Node 22 binary"
  exit 1
fi
export PATH="$NODE22_BIN:$PATH"
export npm_config_update_notifier=false npm_config_fund=false npm_config_audit=false
export npm_config_loglevel="${npm_config_loglevel:-error}"

mkdir -p "$DEST"
lock_sum="$(cat "$SRC/package.json" "$SRC/package-lock.json" | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$DEST/.installed" 2>/dev/null || true)" != "$lock_sum" ] || [ ! -d "$DEST/node_modules" ]; then
  log "installing the TypeScript SDK clients into $DEST (npm ci)"
  rm -rf "$DEST/node_modules" "$DEST/.installed"
  cp "$SRC/package.json" "$SRC/package-lock.json" "$DEST/"
  (cd "$DEST" && npm ci --no-audit --no-fund </dev/null >&2)
  echo "$lock_sum" >"$DEST/.installed"
fi
cp "$SRC"/*.mjs "$DEST/"
installed() { node -e 'process.stdout.write(require(process.argv[1]).version)' "$DEST/node_modules/$1/package.json"; }
log "node $(node --version), @modelcontextprotocol/sdk $(installed @modelcontextprotocol/sdk), @modelcontextprotocol/client $(installed @modelcontextprotocol/client)"

# ----------------------------------------------------------------- build --
build_cli

# ------------------------------------------------------------------- run --
free_port() {
  node -e 'const s = require("net").createServer(); s.listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); });'
}

# run_client LABEL CLIENT: one client file against the running server; adds up its summary.
run_client() {
  local label="$1" client="$2" out="$work/$1-$2.out" rc=0
  (cd "$DEST" && node "$client.mjs" --url "http://127.0.0.1:$port/mcp" --bin "$BIN" \
    --work "$work/$label-$client" --label "$label $client" "${SELECTOR[@]}") </dev/null 2>&1 | tee "$out" || rc=$?
  total_skipped=$((total_skipped + $(grep -c '^SKIP ' "$out" || true)))
  if ! read_summary "$out"; then
    echo "FAIL [$label $client] run: the client printed no summary (exit $rc)"
    total_failed=$((total_failed + 1))
    return 1
  fi
  total_passed=$((total_passed + summary_passed))
  total_failed=$((total_failed + summary_failed))
  if [ "$rc" -ne 0 ] && [ "$summary_failed" -eq 0 ]; then
    echo "FAIL [$label $client] run: the client exited $rc"
    total_failed=$((total_failed + 1))
  fi
  [ "$rc" -eq 0 ]
}

run_store() {
  local label="$1" store="$2" logfile="$work/$1-server.log" ok=1 client
  log "store $store"
  if ! start_server "$store" "$logfile"; then
    echo "FAIL [$label] server_start: the server did not start with --store $store"
    total_failed=$((total_failed + 1))
    return 0
  fi
  for client in "${CLIENTS[@]}"; do
    run_client "$label" "$client" || ok=0
  done
  if ! alive "$server_pid"; then
    echo "FAIL [$label] server_alive: the server exited during the tests"
    total_failed=$((total_failed + 1))
    ok=0
  fi
  stop_server
  if [ "$ok" = 0 ]; then
    echo "--- server log, --store $store (last 40 lines) ---"
    tail -n 40 "$logfile" || true
    echo "--- end of server log ---"
  fi
}

run_store memory "memory:"
run_store sqlite "sqlite:$work/typescript-client.db"

# The official server-everything (stdio) behind `durable-mcp proxy`: both clients, both eras.
everything="$REPO_ROOT/.tools/server-everything/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
if [ ! -f "$everything" ]; then
  log "ERROR: setup-tools.sh did not install server-everything at $everything"
  exit 1
fi
PROXY_UPSTREAM="$(node -e 'console.log(JSON.stringify(process.argv.slice(1)))' "$(command -v node)" "$everything" stdio)"
export PROXY_UPSTREAM
SERVED=(proxy)
SERVER_EXTRA=(-- "$(command -v node)" "$everything" stdio)
CLIENTS=(proxy_clients)
run_store proxy "sqlite:$work/typescript-proxy.db"

summary_printed=1
echo "$total_passed passed, $total_failed failed, $total_skipped skipped"
if [ "$total_failed" -ne 0 ] || [ "$total_passed" -eq 0 ]; then
  exit 1
fi
