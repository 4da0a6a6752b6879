#!/usr/bin/env bash
# End-to-end check of servebench against a real llama.cpp llama-server (called by
# .ci/run when SERVEBENCH_CI_LLAMA=1).
# PLACEHOLDER: the lead fills in the real checks; for now it only proves the
# binary runs.
#
# Usage: SERVEBENCH_E2E_URL=http://127.0.0.1:PORT SERVEBENCH_BIN=/path/to/servebench \
#          scripts/ci/e2e-llama.sh
# Env:   SERVEBENCH_E2E_URL    base URL of the running llama-server (alias: tiny-llama)
#        SERVEBENCH_BIN        the release servebench binary
#        SERVEBENCH_E2E_OUT    a directory for result files (set by .ci/run)
set -euo pipefail
: "${SERVEBENCH_E2E_URL:?set SERVEBENCH_E2E_URL (e.g. http://127.0.0.1:8001)}"
: "${SERVEBENCH_BIN:?set SERVEBENCH_BIN to the servebench binary}"

"$SERVEBENCH_BIN" --version
