#!/usr/bin/env bash
# The dashboard in a real headless browser (tests/dashboard/dashboard.mjs).
#
#   scripts/dashboard-test.sh
#
# 1. scripts/setup-chromium.sh: Debian's chromium (apt-get, if /usr/bin/chromium is
#    missing) and playwright-core (npm, into .tools/playwright) with the Node of
#    scripts/setup-tools.sh. If that fails: with CI=true the script fails; otherwise it
#    prints why and skips (exit 0).
# 2. Builds the durable-mcp binary (cargo build -p durable-mcp-cli, under flock) and copies
#    it, so that another build cannot change it under the test.
# 3. Starts `durable-mcp serve --example everything --store sqlite:<temp> --dashboard-listen
#    127.0.0.1:<free port>`, runs the Node script against it (the page loads, shows a
#    session the script created, and lists a tools/call started after it loaded without a
#    reload), and writes the screenshot to target/dashboard.png (a test run leaves the
#    checkout clean; `SCREENSHOT=docs/dashboard.png` refreshes the one in the docs).
#
# Environment:
#   CARGO_LOCK   lock file for flock around cargo (default /tmp/cargo.lock)
#   SKIP_BUILD=1 use the existing binary (target/debug/durable-mcp, or CARGO_TARGET_DIR's)
#   SCREENSHOT   where to write the screenshot (default target/dashboard.png)
#
# Prints the Node script's PASS/FAIL lines and "N passed, M failed"; exits non-zero if a
# check failed.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
cd "$REPO_ROOT"
CARGO_LOCK="${CARGO_LOCK:-/tmp/cargo.lock}"
TARGET="${CARGO_TARGET_DIR:-$REPO_ROOT/target}"
SCREENSHOT="${SCREENSHOT:-$TARGET/dashboard.png}"

log() { echo "[dashboard-test] $*" >&2; }

work="$(mktemp -d)"
server_pid=""
BIN="$work/durable-mcp"
source "$SCRIPT_DIR/client-harness.sh"
on_exit() {
  local rc=$?
  stop_server
  rm -rf "$work"
  exit "$rc"
}
trap on_exit EXIT

# ------------------------------------------------------------------ tools --
if ! setup="$("$SCRIPT_DIR/setup-chromium.sh")"; then
  if [ "${CI:-}" = "true" ]; then
    log "ERROR: scripts/setup-chromium.sh failed (CI=true: the browser test is mandatory)"
    echo "0 passed, 1 failed"
    exit 1
  fi
  log "SKIP: chromium or playwright-core could not be installed (scripts/setup-chromium.sh failed)"
  exit 0
fi
NODE_BIN="$(sed -n 's/^NODE_BIN=//p' <<<"$setup")"
CHROMIUM="$(sed -n 's/^CHROMIUM=//p' <<<"$setup")"
PLAYWRIGHT_DIR="$(sed -n 's/^PLAYWRIGHT_DIR=//p' <<<"$setup")"
export PATH="$NODE_BIN:$PATH"
log "node $(node --version), $("$CHROMIUM" --version 2>/dev/null || echo "$CHROMIUM")"

# ----------------------------------------------------------------- build --
build() {
  if [ "${SKIP_BUILD:-0}" != "1" ]; then
    cargo build --quiet -p durable-mcp-cli
  fi
  cp "$TARGET/debug/durable-mcp" "$BIN"
}
log "building durable-mcp-cli"
if command -v flock >/dev/null 2>&1; then
  export -f build
  export SKIP_BUILD TARGET BIN
  flock "$CARGO_LOCK" bash -c build
else
  build
fi

# ------------------------------------------------------------------- run --
free_port() {
  node -e 'const s = require("net").createServer(); s.listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); });'
}
dashboard_port="$(free_port)"
SERVER_EXTRA=(--dashboard-listen "127.0.0.1:$dashboard_port" --worker-id dashboard-test-worker)
logfile="$work/server.log"
if ! start_server "sqlite:$work/dashboard.db" "$logfile"; then
  log "ERROR: the server did not start"
  echo "0 passed, 1 failed"
  exit 1
fi
for _ in $(seq 1 100); do
  (exec 3<>"/dev/tcp/127.0.0.1/$dashboard_port") 2>/dev/null && break
  sleep 0.1
done
mkdir -p "$(dirname "$SCREENSHOT")"
rc=0
node "$REPO_ROOT/tests/dashboard/dashboard.mjs" \
  --dashboard "http://127.0.0.1:$dashboard_port/" --mcp "http://127.0.0.1:$port/mcp" \
  --chromium "$CHROMIUM" --playwright "$PLAYWRIGHT_DIR" --screenshot "$SCREENSHOT" </dev/null || rc=$?
if [ "$rc" -ne 0 ]; then
  echo "--- server log (last 40 lines) ---"
  tail -n 40 "$logfile" || true
  echo "--- end of server log ---"
fi
exit "$rc"
