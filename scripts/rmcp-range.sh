#!/usr/bin/env bash
# rmcp as a range (Cargo.toml: "3.11"): the adapter, the facade and the rmcp drop-in tests
# against the lowest rmcp the range allows and against the newest. Cargo.lock is put back.
set -euo pipefail
cd "$(dirname "$0")/.."
lowest=3.11.0
cp Cargo.lock target/Cargo.lock.rmcp-range
trap 'cp target/Cargo.lock.rmcp-range Cargo.lock' EXIT
for which in lowest newest; do
    if [ "$which" = lowest ]; then
        cargo update --quiet -p rmcp --precise "$lowest"
    else
        cargo update --quiet -p rmcp
    fi
    version=$(cargo tree -p durable-mcp-handler -e normal --prefix none -i rmcp 2>/dev/null | head -1)
    echo "-- $which: $version"
    cargo test --quiet -p durable-mcp-protocol -p durable-mcp-handler -p durable-mcp -p rmcp-dropin-tests
done
