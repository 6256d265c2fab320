#!/usr/bin/env bash
# Private TLS stores on loopback for the TLS tests, and pgbouncer in front of the shared
# PostgreSQL, all under .tools/tls/ (kept between runs; the shared servers on 5432/6379 are
# not touched):
# - a test CA, a server certificate for localhost/127.0.0.1, a client certificate for CN
#   dmcp_cert, and an unrelated CA for negative tests (made once);
# - a PostgreSQL 15 accepting only TLS (hostssl): role dmcp by password, dmcp_cert by
#   certificate, database test;
# - a Redis accepting only TLS, on 127.0.0.1 and 127.0.0.2 (a name its certificate lacks), ACL
#   user dmcp (the default user is off);
# - two pgbouncers (pool_mode session and transaction) in front of 127.0.0.1:5432/test.
# Installs pgbouncer (Debian's package) if it is missing.
#   scripts/tls-services.sh start   starts what is not running (reuses what is); prints one line
#   scripts/tls-services.sh stop    stops all four servers
#   scripts/tls-services.sh env     prints .tools/tls/env (`export NAME='value'` lines to source)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/ports.sh"
source "$here/pids.sh"
dir="$(cd "$here/.." && pwd)/.tools/tls"
pgbin=/usr/lib/postgresql/15/bin
pgdata="$dir/pg/data"
pgrun="$dir/pg/run"
db_password='p@ss/w%rd:1'
redis_password='s3cr3t@pw'
umask 022

# (9>&-: the servers must not inherit the lock start/stop hold on fd 9.)
as_pg() { runuser -u postgres -- "$@" 9>&-; }
urlenc() { python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' "$1"; }
# port_free PORT: nothing is bound to 127.0.0.1:PORT (SO_REUSEADDR, as the servers bind).
port_free() {
  python3 -c 'import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))' "$1" 2>/dev/null
}
taken=" "
# pick_port FILE: the port recorded in FILE if it is still free, else a new one (recorded).
pick_port() {
  local port=""
  [ -s "$1" ] && port=$(cat "$1")
  if [ -z "$port" ] || ! port_free "$port" || [[ "$taken" == *" $port "* ]]; then
    port=$(free_port)
    while [[ "$taken" == *" $port "* ]]; do port=$(free_port); done
    echo "$port" >"$1"
  fi
  taken="$taken$port "
  echo "$port"
}

redis_cli() {
  redis-cli --tls --cacert "$dir/ca.crt" -h 127.0.0.1 -p "$(cat "$dir/redis/port")" \
    --user dmcp --pass "$redis_password" --no-auth-warning "$@"
}
pg_running() { pid_is "$pgdata/postmaster.pid" "-D $pgdata"; }
redis_running() {
  pid_is "$dir/redis/redis.pid" redis-server "$dir/redis" && [ "$(redis_cli PING 2>/dev/null)" = PONG ]
}
bouncer_running() { pid_is "$dir/pgbouncer-$1/pgbouncer.pid" "$dir/pgbouncer-$1/pgbouncer.ini"; }

make_certs() {
  [ -s "$dir/ca.crt" ] && [ -s "$dir/server.crt" ] && [ -s "$dir/client.crt" ] && [ -s "$dir/wrong-ca.crt" ] && return 0
  local cnf="$dir/openssl.cnf"
  # X.509 v3 with the extensions webpki checks: CA:TRUE + keyCertSign on the CAs, CA:FALSE and
  # an EKU on the leaves, the host names in the SAN (webpki ignores the CN).
  cat >"$cnf" <<'EOF'
[req]
distinguished_name = dn
prompt = no
[dn]
CN = unused
[ca_ext]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[server_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = DNS:localhost, IP:127.0.0.1
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid, issuer
[client_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid, issuer
EOF
  # EC P-256 keys, PKCS#8 PEM (-----BEGIN PRIVATE KEY-----).
  key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$dir/$1.key" 2>/dev/null; chmod 600 "$dir/$1.key"; }
  serial() { echo "0x$(openssl rand -hex 15)"; }
  ca() {
    key "$1"
    openssl req -x509 -new -key "$dir/$1.key" -subj "/CN=$2" -days 3650 -config "$cnf" \
      -extensions ca_ext -set_serial "$(serial)" -out "$dir/$1.crt"
  }
  leaf() {
    key "$1"
    openssl req -new -key "$dir/$1.key" -subj "/CN=$2" -config "$cnf" -out "$dir/$1.csr"
    openssl x509 -req -in "$dir/$1.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -set_serial "$(serial)" \
      -days 3650 -extfile "$cnf" -extensions "$3" -out "$dir/$1.crt" 2>/dev/null
    rm -f "$dir/$1.csr"
  }
  ca ca "durable-mcp test CA"
  ca wrong-ca "durable-mcp unrelated test CA"
  leaf server localhost server_ext
  leaf client dmcp_cert client_ext
  # PostgreSQL reads the server's key: it must be the server's, mode 0600.
  chown postgres:postgres "$dir/server.crt" "$dir/server.key"
}

start_pg() {
  pg_running && { pg_port=$(cat "$dir/pg/port"); return 0; }
  # A setup that did not finish (or a data directory of unknown state) is made again.
  if [ ! -e "$dir/pg/setup-done" ]; then
    rm -rf "$dir/pg"
  fi
  mkdir -p "$dir/pg" "$pgrun"
  chown postgres:postgres "$dir/pg" "$pgrun"
  chmod 700 "$dir/pg"
  local fresh=0
  if [ ! -d "$pgdata" ]; then
    as_pg "$pgbin/initdb" -D "$pgdata" -U postgres --auth-local=peer --auth-host=scram-sha-256 \
      --encoding=UTF8 --locale=C >"$dir/pg/initdb.log" 2>&1
    echo "include_if_exists = 'dmcp.conf'" >>"$pgdata/postgresql.conf"
    # Only TLS over TCP; the socket (peer, postgres only) is for the setup.
    cat >"$pgdata/pg_hba.conf" <<EOF
local   all  postgres                peer
hostssl all  dmcp_cert  127.0.0.1/32 cert
hostssl all  all        127.0.0.1/32 scram-sha-256
EOF
    chown postgres:postgres "$pgdata/pg_hba.conf"
    fresh=1
  fi
  pg_port=$(pick_port "$dir/pg/port")
  cat >"$pgdata/dmcp.conf" <<EOF
listen_addresses = '127.0.0.1'
port = $pg_port
unix_socket_directories = '$pgrun'
ssl = on
ssl_cert_file = '$dir/server.crt'
ssl_key_file = '$dir/server.key'
ssl_ca_file = '$dir/ca.crt'
password_encryption = 'scram-sha-256'
# A throwaway server for tests.
fsync = off
synchronous_commit = off
full_page_writes = off
EOF
  chown postgres:postgres "$pgdata/dmcp.conf"
  # Left by a server of a past boot (their pids may belong to anything now).
  rm -f "$pgdata/postmaster.pid" "$pgrun"/.s.PGSQL.*
  as_pg "$pgbin/pg_ctl" -D "$pgdata" -w -t 60 -l "$dir/pg/postgres.log" start >/dev/null
  if [ "$fresh" = 1 ]; then
    as_pg psql -h "$pgrun" -p "$pg_port" -U postgres -d postgres -qAt -v ON_ERROR_STOP=1 >/dev/null <<EOF
CREATE ROLE dmcp LOGIN PASSWORD '$db_password';
CREATE ROLE dmcp_cert LOGIN;
CREATE DATABASE test OWNER dmcp;
GRANT ALL ON DATABASE test TO dmcp, dmcp_cert;
\\connect test
GRANT ALL ON SCHEMA public TO dmcp_cert;
EOF
    touch "$dir/pg/setup-done"
  fi
}

start_redis() {
  mkdir -p "$dir/redis"
  redis_running && { redis_port=$(cat "$dir/redis/port"); return 0; }
  stop_pid "$dir/redis/redis.pid" redis-server "$dir/redis"
  redis_port=$(pick_port "$dir/redis/port")
  cat >"$dir/redis/users.acl" <<EOF
user default off
user dmcp on >$redis_password ~* &* +@all
EOF
  chmod 600 "$dir/redis/users.acl"
  redis-server --port 0 --tls-port "$redis_port" --bind 127.0.0.1 127.0.0.2 \
    --tls-cert-file "$dir/server.crt" --tls-key-file "$dir/server.key" --tls-ca-cert-file "$dir/ca.crt" \
    --tls-auth-clients optional --aclfile "$dir/redis/users.acl" --save "" --appendonly no \
    --daemonize yes --pidfile "$dir/redis/redis.pid" --logfile "$dir/redis/redis.log" --dir "$dir/redis" >/dev/null 9>&-
  wait_listening "$redis_port" 10 || { echo "tls-services: Redis did not start (see $dir/redis/redis.log)" >&2; return 1; }
  for _ in $(seq 1 100); do redis_running && return 0; sleep 0.05; done
  echo "tls-services: Redis does not answer PING over TLS (see $dir/redis/redis.log)" >&2
  return 1
}

install_pgbouncer() {
  command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ] && return 0
  export DEBIAN_FRONTEND=noninteractive
  # Keep the package from starting Debian's own pgbouncer service (port 6432).
  local policy=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    policy=/usr/sbin/policy-rc.d
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod 755 "$policy"
  fi
  local rc=0
  { apt-get install -y -q pgbouncer >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q pgbouncer >/dev/null; }; } || rc=$?
  [ -z "$policy" ] || rm -f "$policy"
  return "$rc"
}

# start_bouncer MODE: a pgbouncer with pool_mode MODE; sets bouncer_port.
start_bouncer() {
  local d="$dir/pgbouncer-$1"
  mkdir -p "$d"
  chown postgres:postgres "$d"
  if bouncer_running "$1"; then bouncer_port=$(cat "$d/port"); return 0; fi
  rm -f "$d/pgbouncer.pid"
  bouncer_port=$(pick_port "$d/port")
  echo '"postgres" ""' >"$d/userlist.txt"
  cat >"$d/pgbouncer.ini" <<EOF
[databases]
test = host=127.0.0.1 port=5432 dbname=test

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $bouncer_port
unix_socket_dir =
auth_type = trust
auth_file = $d/userlist.txt
admin_users = postgres
pool_mode = $1
max_client_conn = 200
default_pool_size = 20
ignore_startup_parameters = extra_float_digits
logfile = $d/pgbouncer.log
pidfile = $d/pgbouncer.pid
EOF
  chown postgres:postgres "$d/userlist.txt" "$d/pgbouncer.ini"
  as_pg "$(command -v pgbouncer || echo /usr/sbin/pgbouncer)" -q -d "$d/pgbouncer.ini"
  wait_listening "$bouncer_port" 10 || { echo "tls-services: pgbouncer ($1) did not start (see $d/pgbouncer.log)" >&2; return 1; }
}

write_env() {
  local ca="$dir/ca.crt" tmp="$dir/env.tmp"
  q() { printf "export %s='%s'\n" "$1" "${2//\'/\'\\\'\'}"; }
  {
    echo "# Written by scripts/tls-services.sh start; source it."
    q DATABASE_TLS_URL "postgres://dmcp:$(urlenc "$db_password")@localhost:$pg_port/test?sslmode=verify-full&sslrootcert=$ca"
    q DATABASE_TLS_PORT "$pg_port"
    q DATABASE_TLS_CA "$ca"
    q DATABASE_TLS_WRONG_CA "$dir/wrong-ca.crt"
    q DATABASE_TLS_CLIENT_CERT "$dir/client.crt"
    q DATABASE_TLS_CLIENT_KEY "$dir/client.key"
    q DATABASE_TLS_CERT_USER dmcp_cert
    q DATABASE_TLS_PASSWORD "$db_password"
    q REDIS_TLS_URL "rediss://dmcp:$(urlenc "$redis_password")@localhost:$redis_port/0?tls_ca=$ca"
    q REDIS_TLS_PORT "$redis_port"
    q REDIS_TLS_CA "$ca"
    q REDIS_TLS_CLIENT_CERT "$dir/client.crt"
    q REDIS_TLS_CLIENT_KEY "$dir/client.key"
    q REDIS_TLS_PASSWORD "$redis_password"
    q PGBOUNCER_SESSION_URL "postgres://postgres@127.0.0.1:$session_port/test"
    q PGBOUNCER_TRANSACTION_URL "postgres://postgres@127.0.0.1:$transaction_port/test"
  } >"$tmp"
  if cmp -s "$tmp" "$dir/env"; then rm -f "$tmp"; else mv "$tmp" "$dir/env"; fi
}

case "${1:-}" in
  start)
    mkdir -p "$dir"
    exec 9>"$dir/.lock"
    flock 9
    make_certs
    start_pg
    start_redis
    install_pgbouncer
    start_bouncer session
    session_port=$bouncer_port
    start_bouncer transaction
    transaction_port=$bouncer_port
    write_env
    echo "tls-services: PostgreSQL (TLS) 127.0.0.1:$pg_port, Redis (TLS) 127.0.0.1:$redis_port, pgbouncer session :$session_port transaction :$transaction_port; env in ${dir#"$(pwd)/"}/env"
    ;;
  stop)
    [ -d "$dir" ] || exit 0
    exec 9>"$dir/.lock"
    flock 9
    if pg_running; then as_pg "$pgbin/pg_ctl" -D "$pgdata" -m fast -w stop >/dev/null; fi
    stop_pid "$dir/redis/redis.pid" redis-server "$dir/redis"
    for mode in session transaction; do
      stop_pid "$dir/pgbouncer-$mode/pgbouncer.pid" "$dir/pgbouncer-$mode/pgbouncer.ini"
    done
    echo "tls-services: stopped"
    ;;
  env)
    cat "$dir/env"
    ;;
  *)
    echo "usage: $0 start|stop|env" >&2
    exit 2
    ;;
esac
