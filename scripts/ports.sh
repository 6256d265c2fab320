# Loopback port helpers for the scripts that start servers; sourced, not run.

# free_port: a free loopback port (the kernel's pick; free when printed).
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# free_ports N: N distinct free loopback ports, one a line (one python3 start: each is
# about 0.2 s here).
free_ports() {
  python3 -c 'import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks: s.bind(("127.0.0.1", 0))
print("\n".join(str(s.getsockname()[1]) for s in socks))' "$1"
}

# wait_listening PORT [SECONDS]: succeeds once something listens on 127.0.0.1:PORT, fails
# after SECONDS (default 10).
wait_listening() {
  local tries=$(( ${2:-10} * 20 ))
  for _ in $(seq 1 "$tries"); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.05
  done
  return 1
}
