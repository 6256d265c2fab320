# Process helpers for the scripts that start servers of their own (scripts/tls-services.sh,
# scripts/redis-cluster.sh); sourced, not run.

# pid_is PIDFILE NEEDLE [CWD]: the pidfile's process is alive, its command line contains
# NEEDLE and (if given) its working directory is CWD: a pid of a past boot may belong to
# anything now, the machine's own redis-server included.
pid_is() {
  local pid
  [ -s "$1" ] || return 1
  pid=$(head -n 1 "$1")
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$2" \
    && { [ -z "${3:-}" ] || [ "$(readlink "/proc/$pid/cwd")" = "$3" ]; }
}
# alive PID: the process exists and is not a zombie.
alive() {
  local state
  state=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d ' ' -f 1) && [ -n "$state" ] && [ "$state" != Z ]
}
# stop_pid PIDFILE NEEDLE [CWD]: SIGTERM the pidfile's process if it is ours (pid_is), wait
# for it, and remove the pidfile.
stop_pid() {
  if pid_is "$@"; then
    local pid
    pid=$(head -n 1 "$1")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do alive "$pid" || break; sleep 0.05; done
  fi
  rm -f "$1"
}
