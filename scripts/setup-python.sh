#!/usr/bin/env bash
# Installs the official Python MCP SDK (`mcp` on PyPI, pinned) into <repo>/.tools/venv
# (git-ignored), with the machine's python3. Used by scripts/python-client-test.sh (the SDK
# as a client) and by the proxy's end-to-end tests (crates/cli/tests/proxy.rs run a stdio
# server written on the SDK, tests/python/upstream_server.py, behind `durable-mcp proxy`).
#
# Idempotent: skips what is already installed. Works non-interactively (CI=true, no stdin).
#
# Environment:
#   PYTHON            interpreter for the venv (default python3; needs >= 3.10)
#   MCP_SDK_VERSION   SDK version to install (default: the pinned one below)
#
# On success prints "VENV_PY=<path of the venv's python>" as its last line.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"

MCP_SDK_VERSION="${MCP_SDK_VERSION:-2.3.0}"
PYTHON="${PYTHON:-python3}"
VENV="$REPO_ROOT/.tools/venv"
VENV_PY="$VENV/bin/python"

log() { echo "[setup-python] $*" >&2; }

source "$SCRIPT_DIR/python-venv.sh"
ensure_venv "$VENV"
sdk_version() { venv_version "$VENV_PY" mcp; }

if [ "$(sdk_version)" != "$MCP_SDK_VERSION" ]; then
  log "installing mcp==$MCP_SDK_VERSION into $VENV"
  "$VENV_PY" -m pip install --quiet --disable-pip-version-check --no-input "mcp==$MCP_SDK_VERSION" </dev/null >&2
fi
installed="$(sdk_version)"
if [ "$installed" != "$MCP_SDK_VERSION" ]; then
  log "ERROR: expected mcp $MCP_SDK_VERSION in $VENV, found '${installed:-none}'"
  exit 1
fi
log "python $("$VENV_PY" -c 'import platform; print(platform.python_version())'), mcp $installed"
echo "VENV_PY=$VENV_PY"
