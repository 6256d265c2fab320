#!/usr/bin/env bash
# Installs cargo-fuzz (the libFuzzer driver of the fuzz/ crate) into the machine's build
# cache, $DURABLE_MCP_CACHE (default ${XDG_CACHE_HOME:-~/.cache}/durable-mcp), outside the
# checkout: <cache>/cargo/bin/cargo-fuzz. A fresh clone on the same machine (CI's) reuses
# it instead of compiling it again; a new machine installs it. Idempotent: skips an install
# of the same version. Needs the crates registry and a C++ compiler (libfuzzer-sys builds libFuzzer).
# Prints the bin directory on stdout's last line as "CARGO_FUZZ_BIN=<dir>".
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
CACHE="${DURABLE_MCP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/durable-mcp}"
ROOT="$CACHE/cargo"
VERSION="0.13.2"

log() { echo "[setup-fuzz] $*" >&2; }

if [ -x "$ROOT/bin/cargo-fuzz" ] && "$ROOT/bin/cargo-fuzz" --version 2>/dev/null | grep -q "$VERSION"; then
  log "cargo-fuzz $VERSION already installed"
else
  log "installing cargo-fuzz $VERSION into $ROOT"
  # Its own target dir (not the caller's CARGO_TARGET_DIR, which may hold the project's
  # builds): removed once the binary is installed.
  cargo install cargo-fuzz --version "=$VERSION" --locked --root "$ROOT" --target-dir "$ROOT/build" >&2
  rm -rf "$ROOT/build"
fi
echo "CARGO_FUZZ_BIN=$ROOT/bin"
