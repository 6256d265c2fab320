# Sourced by the scripts that make a Python venv in .tools/ (setup-python.sh,
# setup-bench.sh): the interpreter check, the venv's creation, and version lookups.
#
# Needs `log` defined by the caller. Uses PYTHON (default python3; the MCP SDK needs
# Python >= 3.10).

# ensure_venv VENV: VENV exists with a working python made by $PYTHON; exits on failure.
ensure_venv() {
  local venv="$1" python="${PYTHON:-python3}"
  if ! command -v "$python" >/dev/null 2>&1; then
    log "ERROR: $python not found (set PYTHON to a Python >= 3.10)"
    exit 1
  fi
  if ! "$python" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)'; then
    log "ERROR: $python is $("$python" --version 2>&1); the MCP SDK needs Python >= 3.10"
    exit 1
  fi
  if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import sys' >/dev/null 2>&1; then
    log "creating $venv with $("$python" --version 2>&1)"
    rm -rf "$venv"
    mkdir -p "$(dirname "$venv")"
    "$python" -m venv "$venv"
  fi
}

# venv_version VENV_PY PACKAGE: the version of PACKAGE installed in that venv, or nothing.
venv_version() {
  "$1" -c 'import importlib.metadata as m, sys; print(m.version(sys.argv[1]))' "$2" 2>/dev/null || true
}
