#!/usr/bin/env bash
# scripts/fuzz.sh [SECONDS]: run every fuzz target of fuzz/ for SECONDS (default 60) each,
# starting from its seed corpus (fuzz/corpus/<target>/); fails on the first crash, leaving
# the input in fuzz/artifacts/<target>/. The inputs found along the way go to a temporary
# directory, not into the repository's corpus.
#
# cargo fuzz needs nightly-only rustc flags (-Zsanitizer, sancov options): on the stable
# toolchain they are allowed with RUSTC_BOOTSTRAP=1, as cargo-fuzz documents. Builds go to
# $CARGO_TARGET_DIR when it is set, else to the machine's build cache
# ($DURABLE_MCP_CACHE, default ${XDG_CACHE_HOME:-~/.cache}/durable-mcp: <cache>/fuzz-target),
# outside the checkout: a fresh clone on the same machine (CI's) rebuilds only the
# project's own crates, not every dependency with the sanitizer's flags. cargo-fuzz itself
# comes from scripts/setup-fuzz.sh (into the same cache).
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
SECONDS_EACH="${1:-60}"
TARGETS=(jsonrpc sse headers request_state token)

bin="$("$SCRIPT_DIR/setup-fuzz.sh" | tail -n 1)"
export PATH="${bin#CARGO_FUZZ_BIN=}:$PATH"
export RUSTC_BOOTSTRAP=1
cache="${DURABLE_MCP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/durable-mcp}"
target_dir="${CARGO_TARGET_DIR:-$cache/fuzz-target}"
# cargo fuzz builds for the host triple with its own flags: a CARGO_TARGET_DIR shared with
# ordinary builds would be rebuilt back and forth, so keep fuzz builds in their own folder.
unset CARGO_TARGET_DIR

cd "$REPO_ROOT/fuzz"
found="$(mktemp -d)"
trap 'rm -rf "$found"' EXIT
echo "[fuzz] building ${#TARGETS[@]} targets" >&2
cargo fuzz build --target-dir "$target_dir" >&2
for target in "${TARGETS[@]}"; do
  echo "[fuzz] $target: ${SECONDS_EACH}s" >&2
  mkdir -p "$found/$target" "artifacts/$target"
  status=0
  cargo fuzz run --target-dir "$target_dir" "$target" "$found/$target" "corpus/$target" -- \
    -max_total_time="$SECONDS_EACH" -print_final_stats=1 -artifact_prefix="artifacts/$target/" \
    >"$found/$target.log" 2>&1 || status=$?
  grep -E "^(#[0-9]+ *DONE|stat::number_of_executed_units|stat::peak_rss_mb)" "$found/$target.log" >&2 || true
  if [ "$status" -ne 0 ]; then
    tail -n 40 "$found/$target.log" >&2
    echo "[fuzz] $target: CRASH (exit $status; input in fuzz/artifacts/$target/)" >&2
    exit 1
  fi
done
echo "[fuzz] all ${#TARGETS[@]} targets ran ${SECONDS_EACH}s each without a crash" >&2
