# Shared by the scripts that drive the example server with an official SDK client
# (python-client-test.sh, typescript-client-test.sh); sourced, not run. Expects the sourcing
# script to define `log MESSAGE`, `free_port` (prints a free loopback port), BIN (the
# durable-mcp binary) and CARGO_LOCK, and to keep `server_pid` and `port` as globals.

# parse_selector ARGS...: `-k SUBSTRING` (run only the tests whose name contains it) into
# the array SELECTOR; anything else is a usage error.
parse_selector() {
  SELECTOR=()
  if [ "${1:-}" = "-k" ] && [ -n "${2:-}" ]; then
    SELECTOR=(-k "$2")
  elif [ $# -gt 0 ]; then
    echo "usage: $0 [-k SUBSTRING]" >&2
    exit 2
  fi
}

# alive PID: the process runs (an exited child not yet waited for is a zombie, which a
# signal-0 probe would still find).
alive() {
  local state
  state="$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null)" || return 1
  [ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ]
}

# stop_server: SIGTERM, up to 10 s to exit, then SIGKILL.
stop_server() {
  if [ -n "$server_pid" ]; then
    kill "$server_pid" 2>/dev/null || true
    for _ in $(seq 1 100); do
      alive "$server_pid" || break
      sleep 0.1
    done
    if alive "$server_pid"; then
      log "WARNING: server (pid $server_pid) still running 10 s after SIGTERM; sending SIGKILL"
      kill -KILL "$server_pid" 2>/dev/null || true
    fi
    wait "$server_pid" 2>/dev/null || true
    server_pid=""
  fi
}

# build_cli: builds the durable-mcp binary (under flock when there is one), unless
# SKIP_BUILD=1; fails if BIN is not there afterwards.
build_cli() {
  if [ "${SKIP_BUILD:-0}" != "1" ]; then
    log "building durable-mcp-cli"
    if command -v flock >/dev/null 2>&1; then
      flock "$CARGO_LOCK" cargo build --quiet -p durable-mcp-cli
    else
      cargo build --quiet -p durable-mcp-cli
    fi
  fi
  if [ ! -x "$BIN" ]; then
    log "ERROR: $BIN was not built"
    return 1
  fi
}

# start_server STORE LOG: starts the example server on a free port (three attempts); sets
# server_pid and port. The array SERVER_EXTRA, if set, holds more `serve` flags; the array
# SERVED, if set, replaces `serve --example everything` (e.g. `proxy`, with the upstream's
# command line after `--` in SERVER_EXTRA).
start_server() {
  local store="$1" logfile="$2" attempt
  local served=(serve --example everything)
  if [ -n "${SERVED+x}" ]; then served=("${SERVED[@]}"); fi
  for attempt in 1 2 3; do
    port="$(free_port)"
    NO_COLOR=1 "$BIN" "${served[@]}" --listen "127.0.0.1:$port" --store "$store" \
      ${SERVER_EXTRA[@]+"${SERVER_EXTRA[@]}"} >"$logfile" 2>&1 </dev/null &
    server_pid=$!
    for _ in $(seq 1 150); do
      alive "$server_pid" || break
      if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
        return 0
      fi
      sleep 0.1
    done
    log "server did not come up on port $port (attempt $attempt); log:"
    tail -n 20 "$logfile" >&2 || true
    stop_server
  done
  return 1
}

# read_summary OUT: from a client run's output, the counts of its closing line
# "summary passed=N failed=M" into summary_passed and summary_failed; fails if there is none.
read_summary() {
  local line
  line="$(grep -E '^summary passed=[0-9]+ failed=[0-9]+$' "$1" | tail -n 1 || true)"
  [ -n "$line" ] || return 1
  summary_passed="$(sed -E 's/^summary passed=([0-9]+) failed=([0-9]+)$/\1/' <<<"$line")"
  summary_failed="$(sed -E 's/^summary passed=([0-9]+) failed=([0-9]+)$/\2/' <<<"$line")"
}
