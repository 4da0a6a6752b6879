#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Build the tiny random-weight Llama used by the real-engine checks:
#   $ENGINES_DIR/tiny-llama        HF directory (vLLM)
#   $ENGINES_DIR/tiny-llama.gguf   F32 GGUF of the same weights (llama.cpp)
# Idempotent: does nothing when both exist (pass --force to rebuild).
# Needs the venv from setup-model-tools.sh.
#
# Usage: scripts/engines/make-model.sh [--force]
# Env:   SERVEBENCH_ENGINES_DIR (default ~/.cache/servebench-engines),
#        TOOLS_VENV (default $ENGINES_DIR/tools-venv)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=common.sh
. "$here/common.sh"

TOOLS_VENV=${TOOLS_VENV:-$ENGINES_DIR/tools-venv}
[ -x "$TOOLS_VENV/bin/python" ] || die "no model-tools venv at $TOOLS_VENV; run setup-model-tools.sh first"

start=$(now_s)
"$TOOLS_VENV/bin/python" "$here/make-tiny-model.py" "$ENGINES_DIR/tiny-llama" \
  --gguf "$ENGINES_DIR/tiny-llama.gguf" "$@"
log "model ready in $ENGINES_DIR (tiny-llama, tiny-llama.gguf) after $(elapsed_s "$start") s"
