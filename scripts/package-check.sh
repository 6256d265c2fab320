#!/usr/bin/env bash
# Every crate meant for users packages and builds on its own (`cargo package`, which checks
# the metadata, packs the files a build needs and builds each crate from its package, the
# workspace's crates through a local registry). Internal crates are `publish = false`.
set -euo pipefail
cd "$(dirname "$0")/.."
packages=(durable-mcp-store durable-mcp-protocol durable-mcp-handler durable-mcp-store-memory durable-mcp-store-sqlite durable-mcp-store-postgres
    durable-mcp-store-redis durable-mcp-store-crypt durable-mcp-engine-core durable-mcp-engine durable-mcp-outbound durable-mcp-auth durable-mcp-http
    durable-mcp-stdio durable-mcp-proxy durable-mcp durable-mcp-demo durable-mcp-cli)
# Every crate of crates/ is either listed or not published.
for manifest in crates/*/Cargo.toml; do
    name=$(sed -n 's/^name = "\(.*\)"/\1/p' "$manifest" | head -1)
    if ! grep -q '^publish = false' "$manifest" && [[ ! " ${packages[*]} " =~ " $name " ]]; then
        echo "$manifest: $name is neither packaged here nor publish = false" >&2
        exit 1
    fi
done
args=()
for package in "${packages[@]}"; do args+=(-p "$package"); done
# The verifying build is thrown away: without debug info it links in a fraction of the time.
output=$(CARGO_PROFILE_DEV_DEBUG=0 cargo package "${args[@]}" --allow-dirty 2>&1) || { echo "$output" >&2; exit 1; }
if grep -E '^warning' <<<"$output"; then
    echo "cargo package warned (above)" >&2
    exit 1
fi
echo "packaged and built on their own: ${packages[*]}"
