#!/usr/bin/env python3
"""Build a tiny random-weight Llama model, fully offline and deterministically.

Usage:
  make-tiny-model.py OUT_DIR [--gguf OUT.gguf] [--force]
                     [--vocab 4096] [--hidden 256] [--layers 4] [--heads 4]
                     [--kv-heads 2] [--ffn 688] [--ctx 4096] [--seed 0]

Writes into OUT_DIR an HF-style model directory that vLLM (and transformers)
can load:
  config.json              LlamaForCausalLM
  generation_config.json
  model.safetensors        float32 weights, N(0, 0.02), fixed seed
  tokenizer.json           byte-level BPE trained here (the `tokenizers` library)
  tokenizer_config.json    ChatML chat template and special tokens
  special_tokens_map.json
With --gguf PATH it also writes the same weights as an F32 GGUF for llama.cpp.

The tokenizer is trained on a built-in synthetic corpus produced by a fixed
pseudo-random generator, so it is the same on every machine (a corpus taken from
the file system, e.g. /usr/share/doc, changes whenever a package is installed).
Running twice gives byte-identical files (with the same pinned package versions,
see setup-model-tools.sh).

Needs only numpy, safetensors, tokenizers and gguf: no torch, no transformers,
no network. If the outputs already exist it does nothing unless --force.
"""

import argparse
import json
import os
import sys

# Special tokens get the first ids, in this order: <s>=0 </s>=1 <pad>=2
# <|im_start|>=3 <|im_end|>=4.
SPECIAL_TOKENS = ["<s>", "</s>", "<pad>", "<|im_start|>", "<|im_end|>"]

CHATML_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)

OUTPUT_FILES = [
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
]

# Vocabulary of the synthetic corpus: words an LLM-serving benchmark talks about,
# plus common English glue words.
LEXICON = """
a an the and or but if then else when while for with without from into onto over under
of to in on at by as is are was were be been being has have had do does did can could
will would shall should may might must not no yes all any each every some many most few
this that these those here there where which who whom whose what why how very more less
server client request response stream streaming token tokens prompt prefill decode output
input context window length batch batches queue queued waiting running finished aborted
latency throughput second seconds millisecond minute hour rate rates per sustained peak
model models weight weights layer layers head heads hidden vocabulary embedding attention
cache caches block blocks memory page pages prefix hit hits miss misses eviction capacity
engine engines worker workers process processes thread threads core cores device devices
scheduler schedule step steps iteration iterations speculative draft drafts accepted rejected
metric metrics counter counters gauge gauges histogram buckets label labels sample samples
report reports result results table column row summary median mean percentile tail p50 p90
p99 minimum maximum total count sum value values number numbers unit units byte bytes
benchmark benchmarks measure measured measurement run runs cell cells concurrency matrix
warmup scout readiness window windows timestamp clock monotonic arrival chunk chunks event
events frame frames parse parser decoder encoder field fields schema version versions
config configuration option options flag flags default defaults setting settings file files
path paths directory directories host port address network socket connection connections
error errors warning warnings timeout timeouts retry retries failure failures success
fast faster fastest slow slower slowest small smaller large larger long longer short shorter
first second third last next previous new old same other different exact approximate
time times day days year years people world system systems program programs data code
build builds test tests check checks release releases package packages library libraries
user users group groups name names key keys list lists string strings map maps set sets
""".split()

PUNCTUATION = [".", ".", ".", ".", ",", ";", ":", "!", "?"]
EXTRAS = ["(", ")", "-", "--", "/", "=", "%", "+", "e.g.", "i.e.", "v0.1", "127.0.0.1", "8000", "2048", "x86_64"]


class SplitMix64:
    """Tiny deterministic PRNG (independent of Python's `random` implementation)."""

    MASK = (1 << 64) - 1

    def __init__(self, seed):
        self.state = seed & self.MASK

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & self.MASK
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & self.MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & self.MASK
        return z ^ (z >> 31)

    def below(self, n):
        return self.next() % n

    def pick(self, seq):
        return seq[self.below(len(seq))]


def synthetic_corpus(total_bytes, seed=20240601):
    """Yield lines of deterministic pseudo-English until about total_bytes."""
    rng = SplitMix64(seed)
    produced = 0
    while produced < total_bytes:
        words = [rng.pick(LEXICON) for _ in range(5 + rng.below(20))]
        roll = rng.below(100)
        if roll < 25:
            words.insert(rng.below(len(words) + 1), str(rng.below(100000)))
        elif roll < 40:
            words.insert(rng.below(len(words) + 1), rng.pick(EXTRAS))
        elif roll < 45:
            words.insert(rng.below(len(words) + 1), "%d.%d" % (rng.below(100), rng.below(1000)))
        line = " ".join(words)
        line = line[:1].upper() + line[1:] + rng.pick(PUNCTUATION)
        produced += len(line) + 1
        yield line


def train_tokenizer(vocab_size, corpus_bytes):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(synthetic_corpus(corpus_bytes), trainer)
    for i, t in enumerate(SPECIAL_TOKENS):
        if tokenizer.token_to_id(t) != i:
            sys.exit(f"special token {t} got id {tokenizer.token_to_id(t)}, expected {i}")
    return tokenizer


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.write("\n")


def random_weights(args, vocab_size):
    import numpy as np

    rng = np.random.default_rng(args.seed)
    hidden, ffn = args.hidden, args.ffn
    head_dim = hidden // args.heads
    q_rows, kv_rows = args.heads * head_dim, args.kv_heads * head_dim

    def normal(rows, cols):
        return (rng.standard_normal((rows, cols), dtype=np.float32) * np.float32(0.02)).astype(np.float32)

    def ones(n):
        return np.ones((n,), dtype=np.float32)

    weights = {"model.embed_tokens.weight": normal(vocab_size, hidden)}
    for i in range(args.layers):
        p = f"model.layers.{i}."
        weights[p + "input_layernorm.weight"] = ones(hidden)
        weights[p + "self_attn.q_proj.weight"] = normal(q_rows, hidden)
        weights[p + "self_attn.k_proj.weight"] = normal(kv_rows, hidden)
        weights[p + "self_attn.v_proj.weight"] = normal(kv_rows, hidden)
        weights[p + "self_attn.o_proj.weight"] = normal(hidden, q_rows)
        weights[p + "post_attention_layernorm.weight"] = ones(hidden)
        weights[p + "mlp.gate_proj.weight"] = normal(ffn, hidden)
        weights[p + "mlp.up_proj.weight"] = normal(ffn, hidden)
        weights[p + "mlp.down_proj.weight"] = normal(hidden, ffn)
    weights["model.norm.weight"] = ones(hidden)
    weights["lm_head.weight"] = normal(vocab_size, hidden)
    return weights


def hf_rope_to_ggml(w, n_heads):
    """Reorder q/k projection rows from HF's rotate-half RoPE layout to the
    interleaved-pairs layout llama.cpp uses (what convert_hf_to_gguf.py does)."""
    rows = w.shape[0]
    return w.reshape(n_heads, 2, rows // n_heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(path, args, tokenizer_json_path, weights, vocab_size):
    import gguf

    with open(tokenizer_json_path, encoding="utf-8") as f:
        tj = json.load(f)
    tokens = [None] * vocab_size
    for text, idx in tj["model"]["vocab"].items():
        tokens[idx] = text
    for added in tj.get("added_tokens", []):
        tokens[added["id"]] = added["content"]
    if any(t is None for t in tokens):
        sys.exit("tokenizer vocabulary has holes; cannot write GGUF")
    token_types = [gguf.TokenType.CONTROL if t in SPECIAL_TOKENS else gguf.TokenType.NORMAL for t in tokens]
    merges = [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]]

    head_dim = args.hidden // args.heads
    tmp = path + ".tmp"
    w = gguf.GGUFWriter(tmp, "llama")
    w.add_name(args.name)
    w.add_context_length(args.ctx)
    w.add_embedding_length(args.hidden)
    w.add_block_count(args.layers)
    w.add_feed_forward_length(args.ffn)
    w.add_head_count(args.heads)
    w.add_head_count_kv(args.kv_heads)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(ROPE_THETA)
    w.add_layer_norm_rms_eps(RMS_EPS)
    w.add_vocab_size(vocab_size)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)

    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types(token_types)
    w.add_token_merges(merges)
    w.add_bos_token_id(SPECIAL_TOKENS.index("<s>"))
    w.add_eos_token_id(SPECIAL_TOKENS.index("</s>"))
    w.add_eot_token_id(SPECIAL_TOKENS.index("<|im_end|>"))
    w.add_pad_token_id(SPECIAL_TOKENS.index("<pad>"))
    w.add_add_bos_token(False)
    w.add_add_eos_token(False)
    w.add_chat_template(CHATML_TEMPLATE)

    w.add_tensor("token_embd.weight", weights["model.embed_tokens.weight"])
    for i in range(args.layers):
        hf, gg = f"model.layers.{i}.", f"blk.{i}."
        w.add_tensor(gg + "attn_norm.weight", weights[hf + "input_layernorm.weight"])
        w.add_tensor(gg + "attn_q.weight", hf_rope_to_ggml(weights[hf + "self_attn.q_proj.weight"], args.heads))
        w.add_tensor(gg + "attn_k.weight", hf_rope_to_ggml(weights[hf + "self_attn.k_proj.weight"], args.kv_heads))
        w.add_tensor(gg + "attn_v.weight", weights[hf + "self_attn.v_proj.weight"])
        w.add_tensor(gg + "attn_output.weight", weights[hf + "self_attn.o_proj.weight"])
        w.add_tensor(gg + "ffn_norm.weight", weights[hf + "post_attention_layernorm.weight"])
        w.add_tensor(gg + "ffn_gate.weight", weights[hf + "mlp.gate_proj.weight"])
        w.add_tensor(gg + "ffn_up.weight", weights[hf + "mlp.up_proj.weight"])
        w.add_tensor(gg + "ffn_down.weight", weights[hf + "mlp.down_proj.weight"])
    w.add_tensor("output_norm.weight", weights["model.norm.weight"])
    w.add_tensor("output.weight", weights["lm_head.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(tmp, path)


ROPE_THETA = 10000.0
RMS_EPS = 1e-5


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    ap.add_argument("--gguf", metavar="PATH", help="also write an F32 GGUF of the same weights")
    ap.add_argument("--force", action="store_true", help="rebuild even if the outputs exist")
    ap.add_argument("--name", default="tiny-llama")
    ap.add_argument("--vocab", type=int, default=4096, help="BPE vocabulary size target")
    ap.add_argument("--corpus-bytes", type=int, default=2_000_000)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--ffn", type=int, default=688)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    if args.hidden % args.heads or args.heads % args.kv_heads or (args.hidden // args.heads) % 2:
        sys.exit("hidden must divide into heads, heads into kv-heads, and head_dim must be even")

    out = args.out_dir
    have_hf = all(os.path.exists(os.path.join(out, f)) for f in OUTPUT_FILES)
    have_gguf = args.gguf is None or os.path.exists(args.gguf)
    if have_hf and have_gguf and not args.force:
        print(f"{out} already complete (use --force to rebuild)")
        return
    os.makedirs(out, exist_ok=True)
    # config.json is written last, so an interrupted run never looks complete.
    for f in OUTPUT_FILES:
        try:
            os.remove(os.path.join(out, f))
        except FileNotFoundError:
            pass

    from safetensors.numpy import save_file

    # Tokenizer.
    tokenizer = train_tokenizer(args.vocab, args.corpus_bytes)
    vocab_size = tokenizer.get_vocab_size()
    tokenizer_json = os.path.join(out, "tokenizer.json")
    tokenizer.save(tokenizer_json)
    ids = {t: SPECIAL_TOKENS.index(t) for t in SPECIAL_TOKENS}
    write_json(
        os.path.join(out, "tokenizer_config.json"),
        {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "added_tokens_decoder": {
                str(ids[t]): {
                    "content": t,
                    "lstrip": False,
                    "normalized": False,
                    "rstrip": False,
                    "single_word": False,
                    "special": True,
                }
                for t in SPECIAL_TOKENS
            },
            "bos_token": "<s>",
            "eos_token": "<|im_end|>",
            "pad_token": "<pad>",
            "unk_token": None,
            "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
            "add_bos_token": False,
            "add_eos_token": False,
            "clean_up_tokenization_spaces": False,
            "model_max_length": args.ctx,
            "chat_template": CHATML_TEMPLATE,
        },
    )
    write_json(
        os.path.join(out, "special_tokens_map.json"),
        {
            "bos_token": "<s>",
            "eos_token": "<|im_end|>",
            "pad_token": "<pad>",
            "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        },
    )
    write_json(
        os.path.join(out, "generation_config.json"),
        {
            "bos_token_id": ids["<s>"],
            "eos_token_id": [ids["</s>"], ids["<|im_end|>"]],
            "pad_token_id": ids["<pad>"],
            "do_sample": False,
        },
    )

    # Weights.
    weights = random_weights(args, vocab_size)
    save_file(weights, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    n_params = sum(int(x.size) for x in weights.values())

    if args.gguf:
        os.makedirs(os.path.dirname(os.path.abspath(args.gguf)), exist_ok=True)
        write_gguf(args.gguf, args, tokenizer_json, weights, vocab_size)

    head_dim = args.hidden // args.heads
    write_json(
        os.path.join(out, "config.json"),
        {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "vocab_size": vocab_size,
            "hidden_size": args.hidden,
            "intermediate_size": args.ffn,
            "num_hidden_layers": args.layers,
            "num_attention_heads": args.heads,
            "num_key_value_heads": args.kv_heads,
            "head_dim": head_dim,
            "hidden_act": "silu",
            "max_position_embeddings": args.ctx,
            "rms_norm_eps": RMS_EPS,
            "rope_theta": ROPE_THETA,
            "rope_scaling": None,
            "attention_bias": False,
            "mlp_bias": False,
            "tie_word_embeddings": False,
            "initializer_range": 0.02,
            "use_cache": True,
            "bos_token_id": ids["<s>"],
            "eos_token_id": ids["</s>"],
            "pad_token_id": ids["<pad>"],
            "torch_dtype": "float32",
        },
    )
    print(
        f"wrote {out}: vocab={vocab_size} hidden={args.hidden} layers={args.layers} "
        f"heads={args.heads}/{args.kv_heads} ffn={args.ffn} ctx={args.ctx} params={n_params / 1e6:.2f}M"
        + (f"; gguf {args.gguf} ({os.path.getsize(args.gguf) / 1e6:.1f} MB)" if args.gguf else "")
    )


if __name__ == "__main__":
    main()
