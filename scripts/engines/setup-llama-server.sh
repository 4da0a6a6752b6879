#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Build llama.cpp's native `llama-server` (OpenAI API, continuous batching,
# Prometheus /metrics, /slots) without GitHub: the llama-cpp-python sdist on PyPI
# vendors the complete llama.cpp tree. Static llama/ggml libraries, no curl, no
# OpenSSL, portable x86-64 (AVX2/FMA/F16C, not -march=native). Idempotent: a
# no-op when the binary for this version is already built.
#
# Usage: scripts/engines/setup-llama-server.sh [PREFIX]
#   PREFIX  default $ENGINES_DIR/llama-server  ->  $PREFIX/bin/llama-server
# Env:   SERVEBENCH_ENGINES_DIR (default ~/.cache/servebench-engines)
#        LLAMA_CPP_PYTHON_VERSION  sdist to take llama.cpp from (default 0.3.36)
#        JOBS        parallel build jobs (default: nproc)
#        KEEP_BUILD  1 = keep the sdist, source and build trees, ~400 MB (default: delete)
#        PYTHON      python with pip, for `pip download` (default python3)
#
# Needs a C/C++ compiler, make and cmake; missing ones are installed with apt-get
# (as root, or through sudo). Takes ~6-7 min on 2 cores.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=common.sh
. "$here/common.sh"

PREFIX=${1:-$ENGINES_DIR/llama-server}
VER=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
BIN="$PREFIX/bin/llama-server"
STAMP="$PREFIX/bin/.llama-cpp-python-version"

if [ -x "$BIN" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$VER" ] && "$BIN" --version >/dev/null 2>&1; then
  log "llama-server (llama-cpp-python $VER) already built: $BIN"
  exit 0
fi

missing=()
command -v cmake >/dev/null 2>&1 || missing+=(cmake)
command -v make >/dev/null 2>&1 || missing+=(make)
command -v g++ >/dev/null 2>&1 || missing+=(g++)
if [ ${#missing[@]} -gt 0 ]; then
  log "installing build tools: ${missing[*]}"
  apt_install "${missing[@]}"
fi

start=$(now_s)
src_root="$PREFIX/src"
build="$PREFIX/build"
mkdir -p "$src_root"
sdist="$src_root/llama_cpp_python-$VER.tar.gz"
if [ ! -f "$sdist" ]; then
  log "downloading the llama-cpp-python $VER sdist (~76 MB)"
  "$SB_PYTHON" -m pip download -q --disable-pip-version-check --no-deps \
    --no-binary llama-cpp-python "llama-cpp-python==$VER" -d "$src_root"
fi
[ -f "$sdist" ] || die "pip download did not produce $sdist"
rm -rf "${src_root:?}/llama_cpp_python-$VER"
tar -xzf "$sdist" -C "$src_root"
llama_src="$src_root/llama_cpp_python-$VER/vendor/llama.cpp"
[ -f "$llama_src/CMakeLists.txt" ] || die "no vendored llama.cpp in $sdist"

cpu_flags=()
case $(uname -m) in
  x86_64 | amd64) cpu_flags=(-DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON) ;;
esac

rm -rf "$build"
log "configuring llama.cpp from $llama_src"
cmake -S "$llama_src" -B "$build" -DCMAKE_BUILD_TYPE=Release \
  -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF "${cpu_flags[@]}" \
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON >"$PREFIX/cmake-configure.log" 2>&1 \
  || { tail -n 40 "$PREFIX/cmake-configure.log" >&2; die "cmake configure failed"; }
log "building llama-server with ${JOBS:-$(nproc)} jobs (several minutes)"
cmake --build "$build" --target llama-server -j "${JOBS:-$(nproc)}" >"$PREFIX/cmake-build.log" 2>&1 \
  || { tail -n 40 "$PREFIX/cmake-build.log" >&2; die "build failed (log: $PREFIX/cmake-build.log)"; }

mkdir -p "$PREFIX/bin"
install -m 0755 "$build/bin/llama-server" "$BIN.tmp"
mv -f "$BIN.tmp" "$BIN"
echo "$VER" >"$STAMP"
if [ "${KEEP_BUILD:-0}" != 1 ]; then
  rm -rf "$build" "$src_root"
fi
"$BIN" --version 2>&1 | grep -E '^(version|built with)' >&2 || true
log "llama-server built in $(elapsed_s "$start") s: $BIN ($(du -sh "$BIN" | cut -f1))"
