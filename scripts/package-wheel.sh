#!/usr/bin/env bash
# Build the Python wheel of the durable-mcp command (maturin, bindings = "bin", as ruff and
# uv ship theirs): target/wheels/durable_mcp_proxy-VERSION-*.whl. Prints its path. maturin
# is installed into .tools/venv (scripts/setup-python.sh makes the venv) if it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.tools/venv
[ -x "$venv/bin/python" ] || scripts/setup-python.sh >&2
if ! "$venv/bin/python" -m maturin --version >/dev/null 2>&1; then
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input "maturin>=1.5,<2" </dev/null >&2
fi
rm -f target/wheels/durable_mcp_proxy-*.whl
(cd packaging/python && CARGO_TARGET_DIR="$OLDPWD/target" "$OLDPWD/$venv/bin/python" -m maturin build --quiet --release --locked --out "$OLDPWD/target/wheels" >&2)
ls target/wheels/durable_mcp_proxy-*.whl
