#!/usr/bin/env bash
# Client cost of servebench: CPU time of the whole servebench process per SSE token event, against
# the simulator running as its OWN process (so the simulator's CPU is not counted).
#
# The run (issue 9, item 9): the simulator with a vLLM personality and a fixed 10 ms decode step,
# `servebench run` in request-count mode: C = 256 streams, 1,024 requests of 256 tokens
# (ignore_eos, one token per SSE event), context 0, no prefill rows, no decode warmup, no Burst
# layer, no hardware monitor. CPU = user + sys of the servebench process (getrusage of the child,
# via /usr/bin/time), so startup, model detection and the cell's first (scout) request are
# included: "whole process".
#
# Usage: scripts/bench-client-cost.sh            (builds release, 3 runs)
#   REPEAT=5 C=256 REQUESTS=1024 MAX_TOKENS=256 STEP_MS=10 NO_BUILD=1 scripts/bench-client-cost.sh
#   BIN=path/to/servebench   use that binary (implies NO_BUILD=1)
# Prints one line per run and the best and median µs per event; the machine's /proc/loadavg
# before and after (other processes on the machine can only add to the client's CPU time through
# cache and scheduler effects: take the best and the median of several runs).
set -euo pipefail

REPEAT=${REPEAT:-3}
C=${C:-256}
REQUESTS=${REQUESTS:-1024}
MAX_TOKENS=${MAX_TOKENS:-256}
STEP_MS=${STEP_MS:-10}
cd "$(dirname "$0")/.."

if [[ -n "${BIN:-}" ]]; then
    NO_BUILD=1
else
    BIN=target/release/servebench
fi
if [[ -z "${NO_BUILD:-}" ]]; then
    cargo build --release -q -p servebench
fi
[[ -x "$BIN" ]] || { echo "error: $BIN not found (build it or set BIN)" >&2; exit 1; }
[[ -x /usr/bin/time ]] || { echo "error: /usr/bin/time (GNU time) is needed" >&2; exit 1; }
command -v jq >/dev/null || { echo "error: jq is needed" >&2; exit 1; }

tmp=$(mktemp -d)
sim_pid=
cleanup() {
    if [[ -n "$sim_pid" ]]; then kill "$sim_pid" 2>/dev/null || true; wait "$sim_pid" 2>/dev/null || true; fi
    rm -rf "$tmp"
}
trap cleanup EXIT

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
# A fixed step: 10 ms whatever the batch size and context (--decode-per-*-ms 0); every request
# fits the batch (--max-batch C).
"$BIN" sim --port "$port" --personality vllm --decode-base-ms "$STEP_MS" \
    --decode-per-seq-ms 0 --decode-per-kctx-ms 0 --max-batch "$C" >"$tmp/sim.log" 2>&1 &
sim_pid=$!
for _ in $(seq 100); do
    if curl -fsS "http://127.0.0.1:$port/health" >/dev/null 2>&1; then break; fi
    sleep 0.1
done
curl -fsS "http://127.0.0.1:$port/health" >/dev/null || { echo "error: the simulator did not start" >&2; cat "$tmp/sim.log" >&2; exit 1; }

echo "servebench client cost: C=$C, $REQUESTS requests x $MAX_TOKENS tokens, ${STEP_MS} ms decode step, simulator pid $sim_pid (own process)"
echo "binary: $BIN ($(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet 2>/dev/null || echo '+dirty'))"
echo "loadavg before: $(cat /proc/loadavg)"
printf '%-4s %8s %8s %8s %8s %10s %10s %12s %10s\n' run user_s sys_s cpu_s wall_s tokens events us/event rss_mib
per_event=()
for i in $(seq "$REPEAT"); do
    out="$tmp/r$i.json"
    /usr/bin/time -f '%U %S %e %M' -o "$tmp/time$i" \
        "$BIN" run --url "http://127.0.0.1:$port" --concurrency "$C" --contexts 0 \
        --max-tokens "$MAX_TOKENS" --request-count "$REQUESTS" --skip-prefill \
        --decode-warmup-seconds 0 --cell-pause-seconds 0 --no-hw-monitor \
        --quiet --display plain -o "$out" >"$tmp/run$i.log" 2>&1 \
        || { echo "error: servebench run failed:" >&2; tail -20 "$tmp/run$i.log" >&2; exit 1; }
    read -r user sys wall rss_kb <"$tmp/time$i"
    status=$(jq -r '.results[0].status' "$out")
    tokens=$(jq -r '.results[0].client_output_tokens // 0' "$out")
    events=$(jq -r '.results[0].client_token_events // 0' "$out")
    done_n=$(jq -r '.results[0].num_completed // 0' "$out")
    if [[ "$status" != ok || "$done_n" != "$REQUESTS" ]]; then
        echo "error: run $i: cell status $status, $done_n of $REQUESTS requests completed" >&2
        exit 1
    fi
    cpu=$(echo "$user + $sys" | bc -l)
    us=$(echo "$cpu * 1000000 / $events" | bc -l)
    per_event+=("$us")
    printf '%-4s %8.2f %8.2f %8.2f %8.2f %10d %10d %12.2f %10.1f\n' "$i" "$user" "$sys" "$cpu" "$wall" \
        "$tokens" "$events" "$us" "$(echo "$rss_kb / 1024" | bc -l)"
done
echo "loadavg after:  $(cat /proc/loadavg)"
sorted=$(printf '%s\n' "${per_event[@]}" | sort -g)
best=$(echo "$sorted" | head -1)
median=$(echo "$sorted" | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}')
printf 'us per token event (whole servebench process): best %.2f, median %.2f over %d runs\n' "$best" "$median" "$REPEAT"
