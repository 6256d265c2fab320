#!/usr/bin/env bash
# Makes sure the PostgreSQL and Redis services the tests use are up on loopback, starting
# the machine's own services if they have stopped. Tests read DATABASE_URL / REDIS_URL;
# when those point elsewhere, this script only checks reachability.
set -uo pipefail
up() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }
wait_up() { for _ in $(seq 1 100); do up "$1" "$2" && return 0; sleep 0.1; done; return 1; }

if ! up 127.0.0.1 5432; then
  echo "PostgreSQL is down; starting it"
  if command -v pg_ctlcluster >/dev/null 2>&1 && [ -d /etc/postgresql ]; then
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n 1)" main start || true
  fi
  wait_up 127.0.0.1 5432 || echo "PostgreSQL still unreachable on 127.0.0.1:5432" >&2
fi
if ! up 127.0.0.1 6379; then
  echo "Redis is down; starting it"
  if command -v redis-server >/dev/null 2>&1; then
    mkdir -p /var/lib/redis /var/log/redis
    redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
      --dir /var/lib/redis --logfile /var/log/redis/ci.log || true
  fi
  wait_up 127.0.0.1 6379 || echo "Redis still unreachable on 127.0.0.1:6379" >&2
fi
exit 0
