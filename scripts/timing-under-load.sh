#!/usr/bin/env bash
# Runs the timing suites RUNS times in a row while every core but one is kept busy by a spin
# loop (issue 18: "the timing suites pass 10 runs in a row with the other core busy").
#
# Usage: scripts/timing-under-load.sh [RUNS]      (default 10; from anywhere)
#   SERVEBENCH_LOAD_SPINNERS=N   busy loops to run beside the tests (default: cores - 1, at least 1)
#
# The suites are the tests that hold a wall-clock or simulator-truth bound:
#   servebench-core: tests/sim_accuracy.rs, tests/rate_sim.rs, tests/layers_sim.rs,
#   tests/telemetry_sim.rs, and the lib's load::tests (open_loop_sends_on_schedule).
# The test binaries are built first (no compiling while the spinners run). A run passes when
# every suite exits 0 and no test printed `CANNOT JUDGE` (a test that could not judge because
# every attempt was disturbed is counted apart, never as a pass). The script stops at the first
# failing run. Per-run logs: target/timing-under-load/run-<k>.log; exit 0 only when all RUNS passed.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
RUNS=${1:-10}
case "$RUNS" in
  '' | *[!0-9]*)
    echo "timing-under-load: RUNS must be a whole number, got '$RUNS'" >&2
    exit 2
    ;;
esac
CORES=$(nproc)
SPINNERS=${SERVEBENCH_LOAD_SPINNERS:-$((CORES > 1 ? CORES - 1 : 1))}
LOG_DIR="$ROOT/target/timing-under-load"
mkdir -p "$LOG_DIR"

SUITES=(
  "--test sim_accuracy"
  "--test rate_sim"
  "--test layers_sim"
  "--test telemetry_sim"
  "--lib load::tests"
)

echo "timing-under-load: building the test binaries"
cargo test -p servebench-core --tests --no-run --quiet

SPIN_PIDS=()
stop_spinners() {
  for pid in "${SPIN_PIDS[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
}
trap stop_spinners EXIT
for _ in $(seq 1 "$SPINNERS"); do
  # A shell spin loop: one core's worth of work, never sleeping.
  bash -c 'while :; do :; done' &
  SPIN_PIDS+=("$!")
done
echo "timing-under-load: $SPINNERS busy loop(s) on $CORES core(s); $RUNS run(s)"

passed=0
undecided=0
for k in $(seq 1 "$RUNS"); do
  log="$LOG_DIR/run-$k.log"
  : >"$log"
  start=$(date +%s)
  ok=1
  for suite in "${SUITES[@]}"; do
    # shellcheck disable=SC2086 # the suite is "--test NAME" or "--lib FILTER", split on purpose
    if ! cargo test -p servebench-core --quiet $suite -- --nocapture >>"$log" 2>&1; then
      ok=0
      echo "run $k: FAILED in '$suite' (log: $log)"
      break
    fi
  done
  secs=$(($(date +%s) - start))
  load=$(cut -d' ' -f1-3 /proc/loadavg)
  if [ "$ok" = 1 ] && grep -q "CANNOT JUDGE" "$log"; then
    undecided=$((undecided + 1))
    echo "run $k: passed, but a test could not judge ($(grep -c 'CANNOT JUDGE' "$log") line(s)); ${secs}s, load $load"
  elif [ "$ok" = 1 ]; then
    passed=$((passed + 1))
    echo "run $k: passed; ${secs}s, load $load"
  else
    echo "timing-under-load: $passed of $RUNS run(s) passed before run $k failed"
    grep -E "panicked|FAILED|failed" "$log" | head -20 || true
    exit 1
  fi
done
echo "timing-under-load: $passed of $RUNS run(s) passed, $undecided could not judge, with $SPINNERS busy loop(s)"
[ "$passed" = "$RUNS" ]
