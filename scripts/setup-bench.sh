#!/usr/bin/env bash
# Installs the second HTTP baseline of `durable-mcp-bench`: the official Python MCP SDK
# (`mcp`) with mcp-persist's SQLite event store, in a venv of its own:
#
#   <repo>/.tools/bench-python      (git-ignored)
#
# The bench finds it there by itself (or takes `--python-baseline PATH` to the venv's
# python); the server it runs is crates/bench/python/persist_server.py.
#
# Idempotent: the venv is created once, and the packages are installed only when the
# pinned versions are not already there. Non-interactive (CI=true, no stdin).
#
# Environment:
#   PYTHON                interpreter for the venv (default python3; needs >= 3.10)
#   MCP_SDK_VERSION       the SDK version (default: the pinned one below)
#   MCP_PERSIST_VERSION   the mcp-persist version (default: the pinned one below)
#
# On success the last line on stdout is "PYTHON_BASELINE=<the venv's python>".
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"

MCP_SDK_VERSION="${MCP_SDK_VERSION:-2.3.0}"
MCP_PERSIST_VERSION="${MCP_PERSIST_VERSION:-2.2.0}"
PYTHON="${PYTHON:-python3}"
VENV="$REPO_ROOT/.tools/bench-python"
VENV_PY="$VENV/bin/python"
SERVER="$REPO_ROOT/crates/bench/python/persist_server.py"

log() { echo "[setup-bench] $*" >&2; }

export CI="${CI:-true}"
export PIP_DISABLE_PIP_VERSION_CHECK=1
export PIP_NO_INPUT=1

source "$SCRIPT_DIR/python-venv.sh"
ensure_venv "$VENV"
# version PACKAGE: the version installed in the venv, or nothing.
version() { venv_version "$VENV_PY" "$1"; }

if [ "$(version mcp)" != "$MCP_SDK_VERSION" ] || [ "$(version mcp-persist)" != "$MCP_PERSIST_VERSION" ] \
  || [ -z "$(version aiosqlite)" ] || [ -z "$(version uvicorn)" ]; then
  log "installing mcp==$MCP_SDK_VERSION and mcp-persist[sqlite]==$MCP_PERSIST_VERSION into $VENV"
  "$VENV_PY" -m pip install --quiet --no-input \
    "mcp==$MCP_SDK_VERSION" "mcp-persist[sqlite]==$MCP_PERSIST_VERSION" uvicorn </dev/null >&2
fi

for package in "mcp:$MCP_SDK_VERSION" "mcp-persist:$MCP_PERSIST_VERSION"; do
  name="${package%%:*}" wanted="${package#*:}"
  found="$(version "$name")"
  if [ "$found" != "$wanted" ]; then
    log "ERROR: expected $name $wanted in $VENV, found '${found:-none}'"
    exit 1
  fi
done

# The server must at least import: a broken install fails here, not in the middle of a run.
if ! "$VENV_PY" "$SERVER" --check >&2; then
  log "ERROR: $SERVER does not start with $VENV_PY"
  exit 1
fi
log "python $("$VENV_PY" -c 'import platform; print(platform.python_version())'), mcp $(version mcp), mcp-persist $(version mcp-persist)"
echo "PYTHON_BASELINE=$VENV_PY"
