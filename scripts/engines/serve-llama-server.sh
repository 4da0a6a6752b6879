#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Start llama.cpp's `llama-server` (from setup-llama-server.sh) on 127.0.0.1 in
# its own process group, serving the tiny GGUF with Prometheus /metrics, /slots
# and 8 parallel slots; wait until /health says ready; write a pidfile. Stop with
#   scripts/engines/stop-engine.sh PIDFILE
#
# Usage: scripts/engines/serve-llama-server.sh [PORT] [-- LLAMA_SERVER_ARGS...]
#   PORT  default 8001
# Env:   SERVEBENCH_ENGINES_DIR  cache dir (default ~/.cache/servebench-engines)
#        GGUF          default $ENGINES_DIR/tiny-llama.gguf (make-model.sh)
#        SERVED_NAME   default tiny-llama
#        BIN           default $ENGINES_DIR/llama-server/bin/llama-server
#        PARALLEL      slots (-np), default 8
#        CTX           total context, split across the slots; default 2048*PARALLEL
#        THREADS       default: nproc
#        EXTRA_ARGS    extra llama-server arguments, split on whitespace
#        READY_TIMEOUT seconds, default 60
#        LOG, PIDFILE  default $ENGINES_DIR/llama-server-PORT.{log,pid}
#
# Startup is ~0.1 s, RSS ~85 MB.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=common.sh
. "$here/common.sh"

PORT=8001
if [ $# -gt 0 ] && [ "$1" != "--" ]; then
  PORT=$1
  shift
fi
[ $# -gt 0 ] && [ "$1" = "--" ] && shift
case $PORT in '' | *[!0-9]*) die "PORT must be a number, got '$PORT'" ;; esac

GGUF=${GGUF:-$ENGINES_DIR/tiny-llama.gguf}
SERVED_NAME=${SERVED_NAME:-tiny-llama}
BIN=${BIN:-$ENGINES_DIR/llama-server/bin/llama-server}
PARALLEL=${PARALLEL:-8}
CTX=${CTX:-$((2048 * PARALLEL))}
LOG=${LOG:-$ENGINES_DIR/llama-server-$PORT.log}
PIDFILE=${PIDFILE:-$ENGINES_DIR/llama-server-$PORT.pid}
read -r -a extra <<<"${EXTRA_ARGS:-}"

[ -x "$BIN" ] || die "no llama-server at $BIN; run setup-llama-server.sh"
[ -f "$GGUF" ] || die "no GGUF at $GGUF; run make-model.sh"
if [ -f "$PIDFILE" ] && kill -0 -- "-$(cat "$PIDFILE")" 2>/dev/null; then
  die "already running (pidfile $PIDFILE, pid $(cat "$PIDFILE"))"
fi
port_in_use "$PORT" && die "127.0.0.1:$PORT is already in use"
rm -f "$PIDFILE"

start=$(now_s)
# Own session/process group; the inner shell writes its PID (= group id), then
# becomes llama-server.
# shellcheck disable=SC2016  # $$ and $1 expand in the inner shell
setsid bash -c 'echo $$ >"$1"; shift; exec "$@"' serve-llama "$PIDFILE" \
  "$BIN" -m "$GGUF" --alias "$SERVED_NAME" \
  --host 127.0.0.1 --port "$PORT" \
  --metrics --slots -np "$PARALLEL" -c "$CTX" -t "${THREADS:-$(nproc)}" \
  "${extra[@]}" "$@" </dev/null >"$LOG" 2>&1 &
for _ in $(seq 1 100); do
  [ -s "$PIDFILE" ] && break
  sleep 0.05
done
[ -s "$PIDFILE" ] || die "llama-server did not start (log: $LOG)"
pid=$(cat "$PIDFILE")

if ! wait_ready "http://127.0.0.1:$PORT/health" "$pid" "$LOG" "${READY_TIMEOUT:-60}"; then
  "$here/stop-engine.sh" "$PIDFILE" >&2 || true
  die "llama-server failed to start on 127.0.0.1:$PORT"
fi
log "llama-server ready on http://127.0.0.1:$PORT pid=$pid startup=$(elapsed_s "$start")s log=$LOG pidfile=$PIDFILE"
