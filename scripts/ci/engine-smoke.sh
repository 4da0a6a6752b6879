#!/usr/bin/env bash
# Engine-level smoke test, independent of servebench: checks that an
# OpenAI-compatible server at URL lists MODEL and streams a chat completion
# (ignore_eos, include_usage) to the end. Catches a broken engine install before
# the servebench end-to-end checks run. Needs curl and python3.
#
# Usage: scripts/ci/engine-smoke.sh URL [MODEL]     (MODEL default tiny-llama)
set -euo pipefail
url=${1:?usage: $0 URL [MODEL]}
model=${2:-tiny-llama}

models=$(curl -sfS --max-time 10 "$url/v1/models")
stream=$(curl -sfSN --max-time 120 "$url/v1/chat/completions" -H 'content-type: application/json' \
  -d "{\"model\":\"$model\",\"messages\":[{\"role\":\"user\",\"content\":\"Say something.\"}],
       \"max_tokens\":32,\"temperature\":0,\"ignore_eos\":true,\"stream\":true,
       \"stream_options\":{\"include_usage\":true}}")

python3 - "$model" "$models" "$stream" <<'PY'
import json
import sys

model, models, stream = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
ids = [m["id"] for m in models.get("data", [])]
assert model in ids, f"/v1/models does not list {model}: {ids}"
payloads = [line[len("data:"):].strip() for line in stream.splitlines() if line.startswith("data:")]
assert payloads and payloads[-1] == "[DONE]", "stream did not end with data: [DONE]"
chunks = [json.loads(p) for p in payloads[:-1]]
usage = [c["usage"] for c in chunks if c.get("usage")]
assert usage, "no usage in the stream"
n = usage[-1]["completion_tokens"]
assert n == 32, f"expected 32 completion tokens with ignore_eos, got {n}"
print(f"engine smoke ok: model {model}, {len(chunks)} chunks, {n} completion tokens")
PY
