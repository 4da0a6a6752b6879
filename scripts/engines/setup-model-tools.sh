#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Create the venv that make-tiny-model.py needs: numpy, safetensors, tokenizers,
# gguf (no torch, no network beyond PyPI). ~10 s, ~150 MB. Idempotent: a quick
# no-op when the venv already holds exactly the pinned versions.
#
# Usage: scripts/engines/setup-model-tools.sh [VENV]
#   VENV  default $ENGINES_DIR/tools-venv
# Env:   SERVEBENCH_ENGINES_DIR (default ~/.cache/servebench-engines), PYTHON (python3)
#
# The versions are pinned because the trained tokenizer and the random weights
# must be byte-identical everywhere (tests and captures refer to token ids).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=common.sh
. "$here/common.sh"

VENV=${1:-$ENGINES_DIR/tools-venv}
REQUIREMENTS=(numpy==2.4.6 safetensors==0.8.0 tokenizers==0.23.3 gguf==0.19.0)
STAMP="$VENV/.servebench-requirements"

if [ -x "$VENV/bin/python" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "${REQUIREMENTS[*]}" ] \
  && "$VENV/bin/python" -c 'import numpy, safetensors, tokenizers, gguf' 2>/dev/null; then
  log "model tools already installed in $VENV"
  exit 0
fi

start=$(now_s)
[ -x "$VENV/bin/python" ] || make_venv "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check "${REQUIREMENTS[@]}"
"$VENV/bin/python" -c 'import numpy, safetensors, tokenizers, gguf'
echo "${REQUIREMENTS[*]}" >"$STAMP"
log "model tools installed in $VENV in $(elapsed_s "$start") s ($(du -sh "$VENV" | cut -f1))"
