#!/usr/bin/env bash
# End-to-end check of servebench against a real llama.cpp llama-server (called by
# .ci/run unless SERVEBENCH_CI_LLAMA=0). Runs the ignored tests of
# crates/cli/tests/e2e_real_engine.rs against it: a chat matrix (C 1,2,4 x context
# 0,512), a short /v1/completions run and two open-loop request-rate rows with SLOs
# (e2e_real_engine/rate.rs). llama-server sends usage only at the end
# of a stream, so the truthful aggregate source there is
# openai_stream_chunks_fallback; its generated-token counter is
# llamacpp:tokens_predicted_total (needs --metrics). ~90 s.
#
# Usage: SERVEBENCH_E2E_URL=http://127.0.0.1:PORT scripts/ci/e2e-llama.sh
# Env:   SERVEBENCH_E2E_URL    base URL of the running llama-server (alias tiny-llama, --metrics,
#                              2048 tokens per slot, as scripts/engines/serve-llama-server.sh starts it)
#        SERVEBENCH_E2E_OUT    a directory for the results JSON, stdout and stderr of each run
#                              (set by .ci/run; default: a temporary directory)
#        SERVEBENCH_BIN        optional; the servebench binary .ci/run built (the test itself
#                              runs cargo's target/debug/servebench, the same file)
set -euo pipefail
: "${SERVEBENCH_E2E_URL:?set SERVEBENCH_E2E_URL (e.g. http://127.0.0.1:8001)}"
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

if [ -n "${SERVEBENCH_BIN:-}" ]; then
  "$SERVEBENCH_BIN" --version
fi
SERVEBENCH_E2E_ENGINE=llamacpp \
  cargo test -p servebench --test e2e_real_engine -- --ignored --nocapture
