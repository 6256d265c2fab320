#!/usr/bin/env bash
# Instructions per `tools/call` of one server under callgrind (docs/benchmarks.md,
# "Instruction counts"): two runs of one keep-alive client, of N and N + 500 calls, each
# from a fresh server; a call costs (Ir of the long run − Ir of the short one) / 500, so
# start-up, the session's `initialize` and shutdown cancel out.
#
#   scripts/callgrind.sh [durable|rmcp] [legacy|modern] [STORE URL, durable only]
#
# Prints one line: server, era, store, instructions per call. Needs valgrind.
# CALLGRIND_NO_BUILD=1 measures the release binaries as they are, without building.
set -euo pipefail
shopt -s inherit_errexit
cd "$(dirname "$0")/.."
server=${1:-durable}
era=${2:-legacy}
store=${3:-memory:}
short=${CALLGRIND_SHORT:-100}
long=$((short + 500))
command -v valgrind >/dev/null || { echo "callgrind.sh: valgrind is not installed" >&2; exit 1; }
target=${CARGO_TARGET_DIR:-target}
[[ -n ${CALLGRIND_NO_BUILD:-} ]] || cargo build --release --quiet -p durable-mcp-cli -p durable-mcp-bench
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# Total instructions of a server that served one client's `calls` calls.
instructions() {
    local calls=$1 dir="$scratch/$1"
    mkdir "$dir"
    mkfifo "$dir/stdin"
    local cmd=("$target"/release/durable-mcp-bench bench-server rmcp --listen 127.0.0.1:0)
    if [[ $server == durable ]]; then
        cmd=("$target"/release/durable-mcp bench-server durable --store "$store" --listen 127.0.0.1:0)
    fi
    valgrind --tool=callgrind --callgrind-out-file="$dir/out" "${cmd[@]}" \
        <"$dir/stdin" >"$dir/stdout" 2>"$dir/stderr" &
    local pid=$!
    exec {keep}>"$dir/stdin" # the server stops when its stdin ends
    local addr=""
    for _ in $(seq 600); do
        addr=$(sed -n 's/^LISTENING //p' "$dir/stdout")
        [[ -n $addr ]] && break
        sleep 0.1
    done
    [[ -n $addr ]] || { cat "$dir/stderr" >&2; echo "callgrind.sh: the server did not start" >&2; exit 1; }
    # The load generator, too, stops when its stdin ends: keep it open while it runs.
    mkfifo "$dir/load-stdin"
    exec {load}<>"$dir/load-stdin"
    "$target"/release/durable-mcp-bench bench-load --addr "$addr" --era "$era" \
        --warmup-calls 0 --max-calls "$calls" --duration-ms 600000 \
        <"$dir/load-stdin" >/dev/null {keep}>&- {load}>&-
    exec {load}>&- {keep}>&-
    wait "$pid"
    sed -n 's/^summary: //p; s/^totals: //p' "$dir/out" | head -n 1
}

a=$(instructions "$short")
b=$(instructions "$long")
echo "$server $era $([[ $server == durable ]] && echo "$store" || echo -) $(( (b - a) / 500 )) instructions per call"
