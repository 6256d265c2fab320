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
#    127.0.0.1:<free port> --dashboard-api-keys <temp file>` (the charts read the metrics
#    recorder the dashboard turns on) with two
#    random dashboard keys, `viewer` (dashboard:read) and `ops` (dashboard:read,
#    dashboard:act), and runs the Node script against it: no key is 401; the page asks
#    for a key, loads, shows a session the script created and lists a tools/call started
#    after it loaded without a reload; charts and filters; the viewer sees no button and
#    is refused an action (403); the ops key cancels a live run from the page (its client
#    reads the error -32040 with the reason); a run's page shows its attempt and steps.
#    It writes the screenshots to target/dashboard.png and target/dashboard-run.png (a
#    test run leaves the checkout clean; `SCREENSHOT=docs/dashboard.png` and
#    `SCREENSHOT_RUN=docs/dashboard-run.png` refresh the ones in the docs).
#
# Environment:
#   CARGO_LOCK   lock file for flock around cargo (default /tmp/cargo.lock)
#   SKIP_BUILD=1 use the existing binary (target/debug/durable-mcp, or CARGO_TARGET_DIR's)
#   SCREENSHOT   where to write the overview's screenshot (default target/dashboard.png)
#   SCREENSHOT_RUN  where to write the run page's (default target/dashboard-run.png)
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
SCREENSHOT_RUN="${SCREENSHOT_RUN:-$TARGET/dashboard-run.png}"

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
    cargo build --quiet -p durable-mcp-cli || return 1
  fi
  cp "$TARGET/debug/durable-mcp" "$BIN"
}
log "building durable-mcp-cli"
built=0
if command -v flock >/dev/null 2>&1; then
  export -f build
  export SKIP_BUILD TARGET BIN
  flock "$CARGO_LOCK" bash -c build && built=1
else
  build && built=1
fi
if [ "$built" != 1 ]; then
  log "ERROR: the build failed"
  echo "0 passed, 1 failed"
  exit 1
fi

# ------------------------------------------------------------------- run --
free_port() {
  node -e 'const s = require("net").createServer(); s.listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); });'
}
dashboard_port="$(free_port)"
# Two dashboard keys, fresh each run: one may read, one may act too.
secret() { od -An -tx1 -N16 /dev/urandom | tr -d ' \n'; }
viewer_key="$(secret)"
ops_key="$(secret)"
keys="$work/dashboard-keys"
printf 'viewer %s dashboard:read\nops %s dashboard:read,dashboard:act\n' "$viewer_key" "$ops_key" >"$keys"
chmod 600 "$keys"
SERVER_EXTRA=(--dashboard-listen "127.0.0.1:$dashboard_port" --dashboard-api-keys "$keys"
  --worker-id dashboard-test-worker)
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
mkdir -p "$(dirname "$SCREENSHOT")" "$(dirname "$SCREENSHOT_RUN")"
rc=0
node "$REPO_ROOT/tests/dashboard/dashboard.mjs" \
  --dashboard "http://127.0.0.1:$dashboard_port/" --mcp "http://127.0.0.1:$port/mcp" \
  --chromium "$CHROMIUM" --playwright "$PLAYWRIGHT_DIR" --screenshot "$SCREENSHOT" \
  --screenshot-run "$SCREENSHOT_RUN" --viewer-key "$viewer_key" --ops-key "$ops_key" </dev/null || rc=$?
if [ "$rc" -ne 0 ]; then
  echo "--- server log (last 40 lines) ---"
  tail -n 40 "$logfile" || true
  echo "--- end of server log ---"
fi
exit "$rc"
