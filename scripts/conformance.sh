#!/usr/bin/env bash
# Runs the MCP conformance suite against a running server.
#
#   scripts/conformance.sh URL [EXTRA_ARGS...]
#   e.g. scripts/conformance.sh http://127.0.0.1:8123/mcp
#
# Runs (selected with CONFORMANCE_RUNS, default: all three, in this order):
#   0.1.16       conformance@0.1.16          server --url URL --suite all
#   2025-11-25   conformance@0.2.0-alpha.12  server --url URL --requirements 2025-11-25
#   2026-07-28   conformance@0.2.0-alpha.12  server --url URL --requirements 2026-07-28
# each with Node 22 from .tools (installed by scripts/setup-tools.sh).
#
# Environment:
#   CONFORMANCE_RUNS         space separated subset of "0.1.16 2025-11-25 2026-07-28"
#   CONFORMANCE_OUT          log folder (default <repo>/.tools/conformance-logs); per run:
#                              <run>.log       full console output of the suite
#                              <run>-results/  the suite's checks.json per scenario (-o)
#   CONFORMANCE_RUN_TIMEOUT  seconds one whole run may take before it is killed (default 1800)
#   CONFORMANCE_BASELINE     a folder of expected-failures files, one per run (<run>.yml, the
#                            suite's format: "server:" then "- scenario" or "- scenario:check-id"
#                            entries). Each run is passed --expected-failures with its file and
#                            judged by it instead of by the README (see "Exit status" below).
#
# EXTRA_ARGS are passed to every run. A single scenario:
#   scripts/conformance.sh URL --scenario tools-call-image
# With --scenario, a run whose version/revision does not contain that scenario is skipped
# (not failed); 0.1.16 drops "--suite all"; the 0.2.0-alpha.12 runs replace
# "--requirements R" by "--spec-version R --force" (the CLI refuses --requirements with
# --scenario; --force mirrors how a requirements run executes its scenarios, at wire R).
# Options 0.1.16 does not know (--timeout, --force) are dropped from its run.
#
# Exit status: 0 only if every selected run ran and
#   - reported zero failed checks ("Total: N passed, 0 failed"), counting the scenarios the
#     requirement sets mark as not scored (pending / extension / added-after-release) too;
#   - passed exactly the number of checks the README states for it (its "Conformance"
#     paragraph: "`0.1.16 --suite all`: 47 passed", "--requirements 2025-11-25`: 84 passed",
#     ...), so a run that checks nothing ("0 passed, 0 failed") or less than claimed fails;
#     a --scenario run must pass at least one check;
#   - had no WARNING check (the README claims none);
#   - (0.1.16 and 2025-11-25 without --scenario) ran server-sse-polling with its priming
#     event, retry field and disconnect-resume checks all SUCCESS, as the README claims.
# No expected-failures baseline is used. Non-zero if any run failed, timed out, or printed
# no summary.
# With CONFORMANCE_BASELINE: 0 only if every selected run ran, passed at least one check, the
# suite's own baseline verdict was a pass (exit code 0: no failure or warning outside the
# baseline, no stale entry), and the same file, by the same rules, passes every scenario
# that ran: with --requirements the suite judges only the scored scenarios, so a failure in
# a not-scored one (extension, pending) is caught here, and an entry for one that now passes
# is stale here too. The README's counts, the warnings rule and the server-sse-polling rule
# do not apply (the baseline says which failures and warnings are known).
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
TOOLS="$REPO_ROOT/.tools"

usage() {
  awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "${BASH_SOURCE[0]}"
}

if [ $# -lt 1 ] || [ "$1" = "-h" ] || [ "$1" = "--help" ]; then
  usage
  [ $# -ge 1 ] && exit 0
  exit 2
fi

URL="$1"
shift
EXTRA=("$@")

RUNS="${CONFORMANCE_RUNS:-0.1.16 2025-11-25 2026-07-28}"
OUT="${CONFORMANCE_OUT:-$TOOLS/conformance-logs}"
RUN_TIMEOUT="${CONFORMANCE_RUN_TIMEOUT:-1800}"
BASELINE="${CONFORMANCE_BASELINE:-}"
if [ -n "$BASELINE" ]; then
  BASELINE="$(cd "$BASELINE" && pwd)"
fi

for r in $RUNS; do
  case "$r" in
    0.1.16 | 2025-11-25 | 2026-07-28) ;;
    *)
      echo "conformance.sh: unknown run '$r' in CONFORMANCE_RUNS (known: 0.1.16 2025-11-25 2026-07-28)" >&2
      exit 2
      ;;
  esac
done

# ------------------------------------------------------------------ tools --
setup_out="$("$SCRIPT_DIR/setup-tools.sh" </dev/null)"
NODE22_BIN="$(printf '%s\n' "$setup_out" | sed -n 's/^NODE22_BIN=//p' | tail -n1)"
if [ -z "$NODE22_BIN" ] || [ ! -x "$NODE22_BIN/node" ]; then
  echo "conformance.sh: setup-tools.sh did not report a Node 22 binary" >&2
  exit 1
fi
export PATH="$NODE22_BIN:$PATH"
export CI="${CI:-true}"
export NO_COLOR=1 FORCE_COLOR=0
node_version="$(node --version)"
if [[ "$node_version" != v22.* ]]; then
  echo "conformance.sh: expected Node v22 on PATH, got $node_version" >&2
  exit 1
fi

mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"

# ----------------------------------------------------------- extra args --
SCENARIO=""
for ((i = 0; i < ${#EXTRA[@]}; i++)); do
  case "${EXTRA[$i]}" in
    --scenario) SCENARIO="${EXTRA[$((i + 1))]:-}" ;;
    --scenario=*) SCENARIO="${EXTRA[$i]#--scenario=}" ;;
  esac
done

# EXTRA minus the options 0.1.16 does not have.
extra_for_0116() {
  local skip_next=0 a
  EXTRA_0116=()
  for a in "${EXTRA[@]+"${EXTRA[@]}"}"; do
    if [ "$skip_next" = 1 ]; then skip_next=0; continue; fi
    case "$a" in
      --timeout) skip_next=1 ;;
      --timeout=* | --force) ;;
      *) EXTRA_0116+=("$a") ;;
    esac
  done
}

strip_ansi() { sed -e 's/\x1b\[[0-9;]*m//g'; }

# Prints the statuses of the server-sse-polling checks found in a results folder.
report_sse_polling() { # $1 = results dir
  local f
  f="$(find "$1" -path '*server-server-sse-polling-*' -name checks.json 2>/dev/null | sort | tail -n1 || true)"
  [ -n "$f" ] || return 0
  node -e '
    const checks = require(process.argv[1]);
    const count = {};
    for (const c of checks) count[c.status] = (count[c.status] || 0) + 1;
    const summary = Object.entries(count).map(([k, v]) => `${v} ${k}`).join(", ") || "no checks";
    console.log(`  server-sse-polling: ${summary}`);
    for (const c of checks)
      console.log(`    ${c.status.padEnd(7)} ${c.id}${c.errorMessage ? " - " + String(c.errorMessage).split("\n")[0] : ""}`);
  ' "$f"
}

# The number of checks the README states run $1 passes ("" if it states none).
readme_expected() { # $1 = run
  local pattern
  case "$1" in
    0.1.16) pattern='`0\.1\.16 --suite all`: [0-9]+ passed' ;;
    *) pattern="--requirements ${1//./\\.}\`: [0-9]+ passed" ;;
  esac
  { tr '\n' ' ' <"$REPO_ROOT/README.md" | tr -s ' ' | grep -oE -e "$pattern" || true; } |
    head -n1 | sed -E 's/.*: ([0-9]+) passed$/\1/'
}

# Prints every WARNING check of a results folder ("  warnings: N" first).
report_warnings() { # $1 = results dir
  local files
  files="$(find "$1" -name checks.json 2>/dev/null | sort || true)"
  [ -n "$files" ] || return 0
  # shellcheck disable=SC2086
  node -e '
    const path = require("path");
    let n = 0;
    const lines = [];
    for (const f of process.argv.slice(1)) {
      const scen = path.basename(path.dirname(f)).replace(/^server-/, "").replace(/-\d{4}-\d\d-\d\dT.*$/, "");
      for (const c of require(f)) if (c.status === "WARNING") { n++; lines.push(`    ${scen}: ${c.id}${c.errorMessage ? " - " + String(c.errorMessage).split("\n")[0] : ""}`); }
    }
    console.log(`  warnings: ${n}`);
    for (const l of lines) console.log(l);
  ' $files
}

# The baseline $1 applied to every scenario in results folder $2 by the suite's rules: a
# FAILURE or WARNING check fails its scenario unless the scenario, or that check
# ("scenario:check-id"), is listed; a listed scenario with no failing check, or a listed
# check whose (most severe) status is SUCCESS, is a stale entry. Prints the verdict;
# non-zero on an unexpected failure or a stale entry.
check_baseline() { # $1 = baseline file, $2 = results dir
  local files
  files="$(find "$2" -name checks.json 2>/dev/null | sort || true)"
  # shellcheck disable=SC2086
  node -e '
    const [file, yamlDir, ...files] = process.argv.slice(1);
    const path = require("path");
    const doc = require(yamlDir).parse(require("fs").readFileSync(file, "utf8")) || {};
    const entries = (doc.server || []).map(String);
    const whole = new Set(entries.filter((e) => !e.includes(":")));
    const perCheck = new Map();
    for (const e of entries.filter((e) => e.includes(":"))) {
      const [scen, id] = [e.slice(0, e.indexOf(":")), e.slice(e.indexOf(":") + 1)];
      perCheck.set(scen, (perCheck.get(scen) || new Set()).add(id));
    }
    const failing = (s) => s === "FAILURE" || s === "WARNING";
    const rank = (s) => ({ FAILURE: 3, WARNING: 2, SUCCESS: 1 })[s] || 0;
    const unexpected = [], stale = [], expected = [];
    for (const f of files) {
      const scen = path.basename(path.dirname(f)).replace(/^server-/, "").replace(/-\d{4}-\d\d-\d\dT.*$/, "");
      const checks = require(f);
      if (whole.has(scen)) {
        (checks.some((c) => failing(c.status)) ? expected : stale).push(scen);
        continue;
      }
      const worst = new Map();
      for (const c of checks) if (c.status !== "INFO" && rank(c.status) >= rank(worst.get(c.id) || "")) worst.set(c.id, c.status);
      const listed = perCheck.get(scen) || new Set();
      for (const [id, status] of worst) if (failing(status)) (listed.has(id) ? expected : unexpected).push(`${scen}:${id}`);
      for (const id of listed) if (worst.get(id) === "SUCCESS") stale.push(`${scen}:${id}`);
    }
    console.log(`  baseline (every scenario): ${expected.length} expected, ${unexpected.length} unexpected, ${stale.length} stale`);
    for (const e of unexpected) console.log(`    UNEXPECTED ${e}`);
    for (const e of stale) console.log(`    STALE      ${e} (passes now: remove it from ${path.basename(file)})`);
    process.exit(unexpected.length || stale.length ? 1 : 0);
  ' "$1" "$TOOLS/conformance-0.2.0-alpha.12/node_modules/yaml" $files
}

# ------------------------------------------------------------------- runs --
overall=0
ran_any=0
declare -a SUMMARY_LINES=()

for run in $RUNS; do
  case "$run" in
    0.1.16)
      ver="0.1.16"
      extra_for_0116
      if [ -n "$SCENARIO" ]; then
        args=(server --url "$URL" "${EXTRA_0116[@]+"${EXTRA_0116[@]}"}")
      else
        args=(server --url "$URL" --suite all "${EXTRA_0116[@]+"${EXTRA_0116[@]}"}")
      fi
      list_args=(list --server)
      ;;
    *)
      ver="0.2.0-alpha.12"
      if [ -n "$SCENARIO" ]; then
        args=(server --url "$URL" --spec-version "$run" --force "${EXTRA[@]}")
      else
        args=(server --url "$URL" --requirements "$run" "${EXTRA[@]+"${EXTRA[@]}"}")
      fi
      list_args=(list --server --requirements "$run")
      ;;
  esac
  if [ -n "$BASELINE" ]; then
    if [ ! -f "$BASELINE/$run.yml" ]; then
      echo "conformance.sh: no baseline $BASELINE/$run.yml for run $run" >&2
      overall=1
      SUMMARY_LINES+=("$run: [FAILED (no baseline file)]")
      continue
    fi
    args+=(--expected-failures "$BASELINE/$run.yml")
  fi
  cli="$TOOLS/conformance-$ver/node_modules/.bin/conformance"
  log="$OUT/$run.log"
  results="$OUT/$run-results"

  echo
  echo "=== run $run: conformance@$ver ${args[*]}"

  if [ -n "$SCENARIO" ]; then
    if ! "$cli" "${list_args[@]}" | strip_ansi | grep -Eq "^[[:space:]]+- ${SCENARIO//./\\.}( |\$)"; then
      echo "  skipped: scenario '$SCENARIO' is not part of run $run"
      SUMMARY_LINES+=("$run: skipped ($SCENARIO not in this run)")
      continue
    fi
  fi

  ran_any=1
  rm -rf "$results"
  mkdir -p "$results"
  set +e
  timeout --kill-after=15 "$RUN_TIMEOUT" "$cli" "${args[@]}" -o "$results" </dev/null >"$log" 2>&1
  rc=$?
  set -e

  clean="$(strip_ansi <"$log")"
  total="$(printf '%s\n' "$clean" | grep -E '^Total: [0-9]+ passed, [0-9]+ failed' | tail -n1 || true)"
  single="$(printf '%s\n' "$clean" | grep -E '^Passed: [0-9]+/[0-9]+, [0-9]+ failed, [0-9]+ warnings' | tail -n1 || true)"
  status="ok"
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    status="TIMED OUT after ${RUN_TIMEOUT}s"
  elif [ -n "$total" ]; then
    failed="$(printf '%s\n' "$total" | sed -E 's/^Total: [0-9]+ passed, ([0-9]+) failed.*/\1/')"
    [ "$failed" = 0 ] || [ -n "$BASELINE" ] || status="FAILED"
  elif [ -n "$single" ]; then
    failed="$(printf '%s\n' "$single" | sed -E 's/^Passed: [0-9]+\/[0-9]+, ([0-9]+) failed.*/\1/')"
    [ "$failed" = 0 ] || [ -n "$BASELINE" ] || status="FAILED"
    total="$single"
  elif printf '%s\n' "$clean" | grep -q '^SKIPPED: '; then
    status="FAILED (scenario skipped by the suite)"
    total="$(printf '%s\n' "$clean" | grep '^SKIPPED: ' | tail -n1)"
  else
    status="FAILED (no summary line; the suite did not run - see $log)"
  fi
  if [ "$status" = ok ] && [ "$rc" != 0 ]; then
    status="FAILED (suite exited $rc)"
  fi

  # Scenario lines that failed, and the not-scored block of requirement runs.
  printf '%s\n' "$clean" | grep -E '^✗ ' | sed 's/^/  /' || true
  printf '%s\n' "$clean" | sed -n '/^Not scored for /,$p' | sed 's/^/  /' || true
  echo "  ${total:-<no summary line>}"
  if [ "$run" = 0.1.16 ] || [ -n "$SCENARIO" ]; then
    echo "  suite exit code: $rc"
  else
    # With --requirements the CLI's own exit code only reflects the scored scenarios.
    echo "  suite exit code: $rc (scored scenarios only: $([ "$rc" = 0 ] && echo pass || echo FAIL))"
  fi
  passed="$(printf '%s\n' "$total" | sed -nE 's/^(Total|Passed): ([0-9]+)[ ,/].*/\2/p')"
  if [ "$status" = ok ] && [ "${passed:-0}" -eq 0 ]; then
    status="FAILED (no check passed)"
  fi
  if [ -n "$BASELINE" ]; then
    # The suite's verdict on the baseline, then the same file on every scenario.
    printf '%s\n' "$clean" | sed -n '/^Expected failures (in baseline)/,$p' | sed 's/^/  /' || true
    verdict="$(check_baseline "$BASELINE/$run.yml" "$results")" && baseline_ok=1 || baseline_ok=0
    printf '%s\n' "$verdict"
    if [ "$status" = ok ] && [ "$baseline_ok" = 0 ]; then
      status="FAILED (baseline $run.yml: unexpected failure or stale entry)"
    fi
    echo "  result: $status   (log: $log)"
    SUMMARY_LINES+=("$run: ${total:-<no summary line>}  [$status]")
    [ "$status" = ok ] || overall=1
    continue
  fi
  if [ "$status" = ok ] && [ -z "$SCENARIO" ]; then
    expected="$(readme_expected "$run")"
    if [ -z "$expected" ]; then
      status="FAILED (README.md states no expected count for run $run)"
    elif [ "$passed" != "$expected" ]; then
      status="FAILED ($passed checks passed, README.md states $expected)"
    fi
  fi
  sse="$(report_sse_polling "$results")"
  [ -z "$sse" ] || printf '%s\n' "$sse"
  if [ "$status" = ok ]; then
    if printf '%s\n' "$sse" | grep -Eq '^    (FAILURE|WARNING|SKIPPED)'; then
      status="FAILED (server-sse-polling not all SUCCESS)"
    elif [ -z "$SCENARIO" ] && [ "$run" != 2026-07-28 ] &&
      [ "$(printf '%s\n' "$sse" | grep -cE '^    SUCCESS server-sse-(priming-event|retry-field|disconnect-resume)$')" != 3 ]; then
      status="FAILED (server-sse-polling: priming event, retry field and disconnect-resume not all SUCCESS)"
    fi
  fi
  warnings="$(report_warnings "$results")"
  [ -z "$warnings" ] || printf '%s\n' "$warnings"
  if [ "$status" = ok ] && ! printf '%s\n' "$warnings" | grep -q '^  warnings: 0$' && [ -n "$warnings" ]; then
    status="FAILED (warnings)"
  fi
  echo "  result: $status   (log: $log)"
  SUMMARY_LINES+=("$run: ${total:-<no summary line>}  [$status]")
  [ "$status" = ok ] || overall=1
done

if [ -n "$SCENARIO" ] && [ "$ran_any" = 0 ]; then
  echo "conformance.sh: scenario '$SCENARIO' is not part of any selected run ($RUNS)" >&2
  overall=2
fi

echo
echo "=== conformance summary (logs in $OUT)"
for l in "${SUMMARY_LINES[@]}"; do echo "  $l"; done
if [ "$overall" = 0 ]; then
  echo "conformance: all runs passed"
else
  echo "conformance: FAILED"
fi
exit "$overall"
