#!/usr/bin/env bash
# Reruns the cargo-mutants scope of docs/mutants.md: the measurement path (SSE tracker, framer and
# decoder, window accounting, kernel-timestamp conversion, percentiles), the cell's headline and
# thresholds, the open-loop arithmetic and the registry's verdict rules, one scope at a time, each
# mutant built and tested only in the crate it is in.
#
#   scripts/mutants.sh            # every scope, in order
#   scripts/mutants.sh sse-tracker client-stream   # some scopes
#   MUTANTS_ITERATE=1 scripts/mutants.sh sse-tracker   # only the survivors of the last run
#
# Needs `cargo install cargo-mutants --locked` (v27.1.0 was used). Results: $MUTANTS_OUT/<scope>/
# mutants.out/{caught,missed,unviable,timeout}.txt (default /tmp/servebench-mutants). The scratch
# copies of the tree go to $TMPDIR (default /tmp) and are deleted by cargo-mutants when it ends;
# builds share the worktree's target directory (CARGO_TARGET_DIR) so dependencies are not rebuilt,
# and the mutated crate is built at opt-level 0 (faster to compile; no timing test is run).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=${MUTANTS_OUT:-/tmp/servebench-mutants}
export TMPDIR=${TMPDIR:-/tmp}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target}
jobs=${MUTANTS_JOBS:-1}

common=(--no-shuffle -j "$jobs" --minimum-test-timeout 60 --build-timeout 900 --copy-target=false)
# MUTANTS_ITERATE=1: retest only the mutants that were not caught in the previous run of a scope.
if [ -n "${MUTANTS_ITERATE:-}" ]; then common+=(--iterate); fi
# MUTANTS_BASELINE=skip: do not first run the tests on the unmutated tree (saves one full build
# per scope; only when the tests are known to pass). A fixed test timeout applies then
# (MUTANTS_TIMEOUT, default 60 s: the unmutated suites of these scopes take 0-3 s; a mutant
# that loops, e.g. a framer that stops advancing, counts as a timeout = detected).
if [ "${MUTANTS_BASELINE:-run}" = skip ]; then
    common+=(--baseline skip --timeout "${MUTANTS_TIMEOUT:-60}")
fi

# name  package  file  extra cargo-mutants args...
run() {
    local name=$1 pkg=$2 file=$3
    shift 3
    mkdir -p "$out/$name"
    echo "== $name: $pkg $file $*"
    cargo mutants -p "$pkg" -f "$file" -o "$out/$name" "${common[@]}" \
        --cargo-arg=--config=profile.dev.package.$pkg.opt-level=0 "$@" || true
    for k in caught missed unviable timeout; do
        printf '%s %s: %s\n' "$name" "$k" "$(wc -l < "$out/$name/mutants.out/$k.txt" 2>/dev/null || echo 0)"
    done
}

# Library and integration tests of the crate; doctests are not run (they duplicate unit tests).
sse_tests=(--cargo-test-arg=--tests)
core_tests=(--cargo-test-arg=--lib)
client_tests=(--cargo-test-arg=--lib)
# The verdict rules are pinned by the crate's integration tests (publish_rules, thresholds).
registry_tests=(--cargo-test-arg=--tests)

scope() {
    case $1 in
    sse-tracker) run sse-tracker servebench-sse crates/sse/src/tracker.rs "${sse_tests[@]}" ;;
    sse-framer) run sse-framer servebench-sse crates/sse/src/framer.rs "${sse_tests[@]}" ;;
    # The serde visitors are the fallback decoder (see docs/mutants.md, scope); fast.rs is out of scope.
    sse-decode) run sse-decode servebench-sse crates/sse/src/decode.rs "${sse_tests[@]}" \
        -E 'impl Deserialize|Visitor|excerpt' ;;
    stats) run stats servebench-stats crates/stats/src/lib.rs -E 'wilson' ;;
    client-stream) run client-stream servebench-client crates/client/src/stream.rs "${client_tests[@]}" \
        -F 'WindowClock|on_event|usage_bound' -E 'delete field' ;;
    core-aggregate) run core-aggregate servebench-core crates/core/src/aggregate.rs "${core_tests[@]}" ;;
    client-h1) run client-h1 servebench-client crates/client/src/h1.rs "${client_tests[@]}" \
        -F 'to_instant|recv|enable|ReadDelay' ;;
    # Issue 18: the cell's headline and warnings, the window, the open-loop arithmetic, the
    # documented thresholds of the cell verdict, and the registry's verdict rules.
    core-window) run core-window servebench-core crates/core/src/load/window.rs "${core_tests[@]}" ;;
    core-cell) run core-cell servebench-core crates/core/src/cell.rs "${core_tests[@]}" \
        -F 'tick_lag_warns|SustainedRun::(measure|judge|window_warnings|readiness)' ;;
    core-rate) run core-rate servebench-core crates/core/src/rate/mod.rs "${core_tests[@]}" \
        -f crates/core/src/rate/slo.rs -F 'fold_row|tpot_s|request_values|summarize|judge_unfinished|good|check_percentile|percentile_with_inf' ;;
    core-thresholds) run core-thresholds servebench-core crates/core/src/load/readiness.rs "${core_tests[@]}" \
        -f crates/core/src/telemetry.rs -f crates/core/src/cache.rs -f crates/core/src/plausibility.rs \
        -F 'Readiness|server_readiness|apply_window|cache_state|stall_threshold_s|analyze_stalls|stall_finding|StallStats' ;;
    registry-verdict) run registry-verdict servebench-registry crates/registry/src/publish.rs "${registry_tests[@]}" \
        -f crates/registry/src/validate.rs -F 'decide|implausible' ;;
    *) echo "unknown scope $1" >&2; exit 2 ;;
    esac
}

if [ $# -eq 0 ]; then
    set -- sse-tracker sse-framer sse-decode stats client-stream core-aggregate client-h1 \
        core-window core-cell core-rate core-thresholds registry-verdict
fi
for s in "$@"; do scope "$s"; done
