#!/usr/bin/env bash
# The Python wheel, installed into a fresh venv, runs: `durable-mcp --version`, and
# `durable-mcp proxy` in front of a server on the official Python SDK
# (tests/python/upstream_server.py, on the SDK of scripts/setup-python.sh) serving a call.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/mcp-call.sh
log() { echo "[wheel-test] $*"; }
repo=$PWD
sdk_python=$repo/.tools/venv/bin/python
"$sdk_python" -c 'import mcp' 2>/dev/null || { echo "wheel-test: no Python MCP SDK in .tools/venv (run scripts/setup-python.sh)" >&2; exit 1; }
wheel=$repo/$(scripts/package-wheel.sh)
dir=$(mktemp -d)
proxy=
cleanup() { [ -n "$proxy" ] && kill "$proxy" 2>/dev/null; rm -rf "$dir"; }
trap cleanup EXIT
python3 -m venv "$dir/venv"
"$dir/venv/bin/pip" install --quiet --disable-pip-version-check --no-input "$wheel" </dev/null
version=$("$dir/venv/bin/durable-mcp" --version)
log "pip install $(basename "$wheel"); durable-mcp --version: $version"
[[ "$version" == "durable-mcp $(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1) (commit "* ]]
port=$(free_port)
"$dir/venv/bin/durable-mcp" proxy --listen "127.0.0.1:$port" --store "sqlite:$dir/store.db" -- "$sdk_python" tests/python/upstream_server.py >"$dir/proxy.log" 2>&1 &
proxy=$!
wait_ready "$port" "$dir/proxy.log"
answer=$(call_tool "$port" lookup '{"key":"wheel"}')
grep -q '"result"' <<<"$answer" && grep -q 'wheel' <<<"$answer" || { echo "wheel-test: no result: $answer" >&2; cat "$dir/proxy.log" >&2; exit 1; }
log "a tools/call of a Python SDK server through the wheel's durable-mcp proxy: $(grep -o '"text":"[^"]*"' <<<"$answer" | head -1)"
kill -TERM "$proxy"
status=0
wait "$proxy" || status=$?
proxy=
[ "$status" = 0 ] || { echo "wheel-test: the proxy ended with status $status on SIGTERM" >&2; exit 1; }
