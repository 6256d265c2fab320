#!/usr/bin/env bash
# Build the release binary as deploy/Dockerfile's build stage does (the same cargo command;
# a local rustc other than the image's is noted), for CI without docker; then check
# that it runs and needs no library beyond what the runtime image (distroless/cc: glibc,
# libgcc, libstdc++) has. crates/cli/tests/deploy.rs checks that the command is the Dockerfile's.
set -euo pipefail
cd "$(dirname "$0")/.."
image=$(sed -n 's/^FROM rust:\([0-9.]*\)-bookworm AS build$/\1/p' deploy/Dockerfile)
[[ -n "$image" ]] || { echo "deploy/Dockerfile: no 'FROM rust:VERSION-bookworm AS build' line" >&2; exit 1; }
local_version=$(rustc --version | cut -d' ' -f2)
if [[ "$local_version" != "$image".* ]]; then
    echo "note: rustc $local_version here, rust $image in the image" >&2
fi
cargo build --release --locked -p durable-mcp-cli
binary="${CARGO_TARGET_DIR:-target}/release/durable-mcp"
"$binary" --version
"$binary" healthcheck --help >/dev/null
# Every shared library the binary loads, by name, must be one distroless/cc ships.
unexpected=$(ldd "$binary" | awk '{print $1}' | grep -Ev '^(linux-vdso\.so|/lib64/ld-linux|ld-linux|libc\.so|libm\.so|libgcc_s\.so|libstdc\+\+\.so|libpthread\.so|libdl\.so|librt\.so)' || true)
if [[ -n "$unexpected" ]]; then
    echo "$binary needs libraries the runtime image does not have:" >&2
    echo "$unexpected" >&2
    exit 1
fi
echo "built $binary as deploy/Dockerfile does"
