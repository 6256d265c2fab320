#!/usr/bin/env bash
# Installs what the dashboard's browser test (scripts/dashboard-test.sh) needs:
#
#   /usr/bin/chromium                  Debian's chromium package (apt-get), if missing
#   .tools/playwright/node_modules     playwright-core (npm), pinned below; it drives the
#                                      system chromium and never downloads a browser
#
# Idempotent: each step is skipped when what it installs is there already. Needs root for
# apt-get (CI and the development machines run as root) and the Node of
# scripts/setup-tools.sh (installed by it when missing).
#
# Prints "CHROMIUM=<path>" and "PLAYWRIGHT_DIR=<dir>" as its last two lines.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
TOOLS="$REPO_ROOT/.tools"
PLAYWRIGHT_VERSION="${PLAYWRIGHT_VERSION:-1.65.1}"
PLAYWRIGHT_DIR="$TOOLS/playwright"
CHROMIUM=/usr/bin/chromium

log() { echo "[setup-chromium] $*" >&2; }

# --------------------------------------------------------------- chromium --
if [ -x "$CHROMIUM" ]; then
  log "chromium already installed: $("$CHROMIUM" --version 2>/dev/null || echo "$CHROMIUM")"
else
  if ! command -v apt-get >/dev/null 2>&1; then
    log "ERROR: $CHROMIUM is missing and there is no apt-get to install it"
    exit 1
  fi
  log "installing Debian's chromium (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq </dev/null >&2
  apt-get install -y -qq --no-install-recommends chromium </dev/null >&2
  if [ ! -x "$CHROMIUM" ]; then
    log "ERROR: apt-get install chromium left no $CHROMIUM"
    exit 1
  fi
  log "installed $("$CHROMIUM" --version 2>/dev/null || echo "$CHROMIUM")"
fi

# ---------------------------------------------------------- playwright-core --
# The Node of the conformance suite (setup-tools.sh prints its bin dir last).
NODE_BIN="$("$SCRIPT_DIR/setup-tools.sh" | sed -n 's/^NODE22_BIN=//p' | tail -n1)"
if [ -z "$NODE_BIN" ] || [ ! -x "$NODE_BIN/node" ]; then
  log "ERROR: scripts/setup-tools.sh gave no Node bin directory"
  exit 1
fi
export PATH="$NODE_BIN:$PATH"
installed() {
  node -e 'console.log(require(process.argv[1] + "/node_modules/playwright-core/package.json").version)' "$PLAYWRIGHT_DIR" 2>/dev/null || true
}
if [ "$(installed)" = "$PLAYWRIGHT_VERSION" ]; then
  log "playwright-core $PLAYWRIGHT_VERSION already installed in $PLAYWRIGHT_DIR"
else
  log "installing playwright-core@$PLAYWRIGHT_VERSION into $PLAYWRIGHT_DIR"
  rm -rf "$PLAYWRIGHT_DIR"
  mkdir -p "$PLAYWRIGHT_DIR"
  # A package.json of its own keeps npm from walking up to another project.
  printf '{"name":"dashboard-playwright","private":true}\n' >"$PLAYWRIGHT_DIR/package.json"
  # playwright-core has no install script and downloads no browser.
  PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm install --prefix "$PLAYWRIGHT_DIR" --no-audit --no-fund --save-exact \
    "playwright-core@$PLAYWRIGHT_VERSION" </dev/null >&2
  if [ "$(installed)" != "$PLAYWRIGHT_VERSION" ]; then
    log "ERROR: playwright-core $PLAYWRIGHT_VERSION is not in $PLAYWRIGHT_DIR after npm install"
    exit 1
  fi
fi
echo "NODE_BIN=$NODE_BIN"
echo "CHROMIUM=$CHROMIUM"
echo "PLAYWRIGHT_DIR=$PLAYWRIGHT_DIR"
