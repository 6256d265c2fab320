#!/usr/bin/env bash
# The facade's cargo features (docs/features.md): each set builds on its own, a URL whose
# backend is off is refused naming its feature (the facade's unit test, with the defaults off),
# and the SQLite-only build compiles no other backend. Prints the package counts.
set -euo pipefail
cd "$(dirname "$0")/.."

sets=("--no-default-features" "--no-default-features --features sqlite" "--no-default-features --features postgres"
    "--no-default-features --features redis" "--no-default-features --features auth" "--no-default-features --features metrics"
    "--features postgres,redis,auth,metrics,otlp,testing")
for set in "${sets[@]}"; do
    echo "-- cargo check -p durable-mcp $set"
    # shellcheck disable=SC2086 # the set is several words on purpose
    cargo check --quiet -p durable-mcp $set
done

echo "-- cargo test -p durable-mcp --no-default-features --lib"
cargo test --quiet -p durable-mcp --no-default-features --lib

count() {
    # shellcheck disable=SC2068
    cargo tree -p durable-mcp -e normal --prefix none $@ | sed 's/ (\*)//; s/ (proc-macro)//' | sort -u | wc -l
}
sqlite_only=$(cargo tree -p durable-mcp -e normal --prefix none --no-default-features --features sqlite)
for forbidden in durable-mcp-store-postgres tokio-postgres durable-mcp-store-redis 'redis v' metrics-exporter-prometheus opentelemetry-otlp opentelemetry_sdk \
    jsonwebtoken 'rustls v' 'ring v'; do
    if grep -q "^$forbidden" <<<"$sqlite_only"; then
        echo "the SQLite-only facade compiles $forbidden" >&2
        exit 1
    fi
done
echo "packages (cargo tree -e normal, unique): SQLite only $(count --no-default-features --features sqlite), every feature $(count --features postgres,redis,auth,metrics,otlp)"
