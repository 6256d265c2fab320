#!/usr/bin/env bash
# Removes what the tests and the load-balancer conformance run leave on this machine, of test
# processes that are gone:
# - in the shared PostgreSQL, the schemas `dmcp_t<digits>` / `dmcp_lb<digits>`
#   (crates/testkit, scripts/lb-conformance.sh) and `dmcp_test_<pid>_<id>` (the store-postgres
#   tests, which drop those of dead processes themselves only at their next run), and the
#   role the doctor test creates;
# - in the shared Redis, the key prefixes `dmcp-t<digits>` / `dmcp-lb<digits>`;
# - the scratch directories `durable-mcp-<name>-<pid>-<id>` under the temporary directory.
# Each test gets a store of its own and leaves it for retention; on a machine that runs the
# suite again and again they pile up (hundreds of thousands of Redis keys slow every Redis
# call: docs/benchmarks.md, "Noise").
# Reads DATABASE_URL / REDIS_URL like the tests; skips, saying so, what it cannot reach.
# .ci/run calls it before and after the suites; run it by hand after `cargo test`.
set -uo pipefail
db="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}"
redis="${REDIS_URL:-redis://127.0.0.1:6379}"

if command -v psql >/dev/null 2>&1 && psql "$db" -qAtc 'SELECT 1' >/dev/null 2>&1; then
  schemas=$(psql "$db" -qAtc "SELECT nspname FROM pg_namespace WHERE nspname ~ '^dmcp_(t|lb)[0-9]+\$'")
  # The store-postgres tests' own `dmcp_test_<pid>_<id>`: those of test processes that are
  # gone (the tests drop them too, at their next run).
  for schema in $(psql "$db" -qAtc "SELECT nspname FROM pg_namespace WHERE nspname ~ '^dmcp_test_[0-9]+_'"); do
    pid=${schema#dmcp_test_}
    pid=${pid%%_*}
    [ -d "/proc/$pid" ] || schemas="$schemas $schema"
  done
  n=0
  for schema in $schemas; do
    psql "$db" -qc "DROP SCHEMA IF EXISTS \"$schema\" CASCADE" >/dev/null 2>&1 && n=$((n + 1))
  done
  role=dmcp_doctor_nosync
  if [ "$(psql "$db" -qAtc "SELECT 1 FROM pg_roles WHERE rolname = '$role'")" = 1 ]; then
    psql "$db" -qc "DROP OWNED BY $role CASCADE; DROP ROLE IF EXISTS $role" >/dev/null 2>&1 || echo "clean-test-data: could not drop role $role" >&2
  fi
  echo "clean-test-data: dropped $n test schema(s) in $db"
else
  echo "clean-test-data: PostgreSQL not reachable at $db (or no psql); skipped"
fi

if command -v redis-cli >/dev/null 2>&1 && redis-cli -u "$redis" PING >/dev/null 2>&1; then
  keys=$(for pattern in 'dmcp-t[0-9]*' 'dmcp-lb[0-9]*'; do redis-cli -u "$redis" --scan --pattern "$pattern"; done)
  [ -z "$keys" ] || printf '%s\n' "$keys" | xargs -d '\n' -n 500 redis-cli -u "$redis" DEL >/dev/null
  echo "clean-test-data: deleted $(printf '%s' "$keys" | grep -c '') test key(s) in $redis"
else
  echo "clean-test-data: Redis not reachable at $redis (or no redis-cli); skipped"
fi
# Scratch directories: crates/testkit `temp_dir`, the SQLite and encryption store tests (about
# 50 MB a run). `durable-mcp-ports` (live port claims) does not match.
tmp="${TMPDIR:-/tmp}"
n=0
for dir in "$tmp"/durable-mcp-*-*-*; do
  [ -d "$dir" ] || continue
  name=${dir##*/}
  rest=${name%-*}
  id=${name##*-}
  pid=${rest##*-}
  case "$pid" in '' | *[!0-9]*) continue ;; esac
  case "$id" in '' | *[!0-9a-f]*) continue ;; esac
  [ -d "/proc/$pid" ] || { rm -rf "$dir" && n=$((n + 1)); }
done
echo "clean-test-data: removed $n test scratch director(y/ies) in $tmp"
exit 0
