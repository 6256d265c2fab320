#!/usr/bin/env bash
# The Debian package, installed with dpkg on this machine (as root), serves a real MCP call:
# its unit file passes `systemd-analyze verify`, its configuration file is read by
# `durable-mcp config`, its man pages and bash completion load, and the unit's ExecStart,
# run as systemd would (in its state directory), proxies a tools/call to an upstream MCP server. The package is purged after.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/mcp-call.sh
log() { echo "[deb-test] $*"; }
[ "$(id -u)" = 0 ] || { echo "deb-test: needs root (dpkg -i)" >&2; exit 1; }
if dpkg -s durable-mcp >/dev/null 2>&1 || [ -e /var/lib/durable-mcp ]; then
    echo "deb-test: durable-mcp is installed here already; not touching it" >&2
    exit 1
fi
deb=$(scripts/package-deb.sh)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    dpkg --purge durable-mcp >/dev/null 2>&1 || true
    rm -rf /var/lib/durable-mcp
}
trap cleanup EXIT
log "dpkg -i $deb"
dpkg -i "$deb" >/dev/null
version=$(/usr/bin/durable-mcp --version)
log "installed: $version"
[[ "$version" == "durable-mcp $(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1) (commit "* ]]
if command -v systemd-analyze >/dev/null; then
    systemd-analyze verify /lib/systemd/system/durable-mcp.service
    log "systemd-analyze verify: ok"
fi
# The man pages and the bash completion, as a user's shell would load it.
zcat /usr/share/man/man1/durable-mcp-serve.1.gz | grep -q 'DURABLE_MCP_STORE' || { echo "deb-test: no man page of serve" >&2; exit 1; }
completed=$(bash -c 'source /usr/share/bash-completion/completions/durable-mcp
    function=$(complete -p durable-mcp | sed "s/.* -F \([^ ]*\) .*/\1/")
    COMP_WORDS=(durable-mcp se); COMP_CWORD=1; "$function" durable-mcp se durable-mcp; echo "${COMPREPLY[*]}"')
[[ " $completed " == *" serve "* ]] || { echo "deb-test: bash completes 'se' to '$completed'" >&2; exit 1; }
log "man pages and bash completion: ok ($completed)"
/usr/bin/durable-mcp config --config /etc/durable-mcp/durable-mcp.toml | grep -q '^store = "sqlite:/var/lib/durable-mcp/durable-mcp.db"'
up=$(free_port)
/usr/bin/durable-mcp serve --listen "127.0.0.1:$up" --store memory: >/dev/null 2>&1 &
pids+=($!)
# The unit's command, in its state directory, as systemd starts it.
exec_start=$(sed -n 's/^ExecStart=//p' /lib/systemd/system/durable-mcp.service)
install -d -m 0700 /var/lib/durable-mcp
listen=$(free_port)
(cd /var/lib/durable-mcp && DURABLE_MCP_LISTEN="127.0.0.1:$listen" DURABLE_MCP_UPSTREAM="http://127.0.0.1:$up/mcp" exec $exec_start) >/tmp/deb-test-proxy.log 2>&1 &
proxy=$!
pids+=("$proxy")
wait_ready "$listen" /tmp/deb-test-proxy.log
answer=$(call_tool "$listen" test_simple_text '{}')
grep -q '"result"' <<<"$answer" || { echo "deb-test: no result: $answer" >&2; exit 1; }
log "a tools/call through the installed service: $(grep -o '"text":"[^"]*"' <<<"$answer" | head -1)"
[ -s /var/lib/durable-mcp/durable-mcp.db ] || { echo "deb-test: no SQLite store in the state directory" >&2; exit 1; }
kill -TERM "$proxy"
wait "$proxy"
log "drained on SIGTERM; purging"
