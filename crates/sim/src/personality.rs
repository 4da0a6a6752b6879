//! Info-endpoint bodies of each personality, modelled on the captures in
//! `tests/data/engines/` (vLLM 0.32 `/version` and `/v1/models`, SGLang `/get_server_info` and
//! `/get_model_info`, llama.cpp `/props`, `/slots` and `/v1/models`).

use serde_json::{json, Value};

use crate::config::Personality;
use crate::format::LLAMACPP_BUILD;
use crate::tokenizer::VOCAB_SIZE;
use crate::Shared;

/// `/version` of the vLLM personality.
pub(crate) const VLLM_VERSION: &str = "0.32.0+sim";
/// `version` in SGLang's `/get_server_info`.
pub(crate) const SGLANG_VERSION: &str = "0.5.1+sim";
/// Trained context length llama.cpp reports in `/v1/models` `meta.n_ctx_train` (at least this,
/// or `max_model_len` when larger): NOT the served limit, which is `/props` `n_ctx`.
pub(crate) const LLAMACPP_N_CTX_TRAIN: u64 = 131_072;

/// `GET /v1/models`.
pub(crate) fn models(s: &Shared) -> Value {
    let cfg = &s.cfg;
    match cfg.personality {
        Personality::Neutral => json!({
            "object": "list",
            "data": [{
                "id": cfg.model,
                "object": "model",
                "created": s.started_unix,
                "owned_by": "servebench-sim",
                "root": cfg.model,
                "parent": null,
                "max_model_len": cfg.max_model_len,
                "permission": [],
            }],
        }),
        Personality::Vllm => json!({
            "object": "list",
            "data": [{
                "id": cfg.model,
                "object": "model",
                "created": s.started_unix,
                "owned_by": "vllm",
                "root": cfg.model,
                "parent": null,
                "max_model_len": cfg.max_model_len,
                "permission": [{
                    "id": "modelperm-sim",
                    "object": "model_permission",
                    "created": s.started_unix,
                    "allow_create_engine": false,
                    "allow_sampling": true,
                    "allow_logprobs": true,
                    "allow_search_indices": false,
                    "allow_view": true,
                    "allow_fine_tuning": false,
                    "organization": "*",
                    "group": null,
                    "is_blocking": false,
                }],
            }],
        }),
        Personality::Sglang => json!({
            "object": "list",
            "data": [{
                "id": cfg.model,
                "object": "model",
                "created": s.started_unix,
                "owned_by": "sglang",
                "root": cfg.model,
                "parent": null,
                "max_model_len": cfg.max_model_len,
            }],
        }),
        Personality::Llamacpp => json!({
            "models": [{
                "name": cfg.model,
                "model": cfg.model,
                "modified_at": "",
                "size": "",
                "digest": "",
                "type": "model",
                "description": "",
                "tags": [""],
                "capabilities": ["completion"],
                "parameters": "",
                "details": {
                    "parent_model": "",
                    "format": "gguf",
                    "family": "",
                    "families": [""],
                    "parameter_size": "",
                    "quantization_level": "",
                },
            }],
            "object": "list",
            "data": [{
                "id": cfg.model,
                "object": "model",
                "created": s.started_unix,
                "owned_by": "llamacpp",
                "meta": {
                    "vocab_type": 2,
                    "n_vocab": VOCAB_SIZE,
                    "n_ctx_train": LLAMACPP_N_CTX_TRAIN.max(cfg.max_model_len),
                    "n_embd": 256,
                    "n_params": 4_400_000u64,
                    "size": 18_000_000u64,
                },
            }],
        }),
    }
}

/// `GET /version` (neutral and vLLM only).
pub(crate) fn version(p: Personality) -> Value {
    match p {
        Personality::Vllm => json!({ "version": VLLM_VERSION }),
        _ => json!({ "version": format!("servebench-sim {}", env!("CARGO_PKG_VERSION")) }),
    }
}

/// SGLang `GET /get_server_info` (flat HTTP shape: server args + scheduler info +
/// `internal_states` + `version`).
pub(crate) fn sglang_server_info(s: &Shared) -> Value {
    let cfg = &s.cfg;
    let st = s.stats.snapshot();
    let spec = cfg.spec_tokens > 0;
    let accept_len = if st.spec_drafts_total > 0 {
        1.0 + st.spec_accepted_tokens_total as f64 / st.spec_drafts_total as f64
    } else {
        1.0
    };
    let gen_throughput = s.metrics_state().gen_throughput;
    json!({
        "model_path": cfg.model,
        "tokenizer_path": cfg.model,
        "served_model_name": cfg.model,
        "host": cfg.host,
        "context_length": cfg.max_model_len,
        "max_running_requests": cfg.max_batch,
        "max_total_num_tokens": cfg.kv_tokens_total(),
        "max_req_input_len": cfg.max_model_len - 1,
        "chunked_prefill_size": 8192,
        "page_size": cfg.block_size,
        "disable_radix_cache": !cfg.prefix_cache,
        "enable_metrics": true,
        "tp_size": 1,
        "pp_size": 1,
        "dp_size": 1,
        "speculative_algorithm": if spec { json!("NGRAM") } else { Value::Null },
        "speculative_num_draft_tokens": if spec { json!(cfg.spec_tokens) } else { Value::Null },
        "random_seed": cfg.seed,
        "internal_states": [{
            "last_gen_throughput": gen_throughput,
            "avg_spec_accept_length": accept_len,
        }],
        "version": SGLANG_VERSION,
    })
}

/// SGLang `GET /get_model_info`.
pub(crate) fn sglang_model_info(s: &Shared) -> Value {
    let cfg = &s.cfg;
    json!({
        "model_path": cfg.model,
        "tokenizer_path": cfg.model,
        "is_generation": true,
        "weight_version": "default",
        "served_model_name": cfg.model,
        "max_context_length": cfg.max_model_len,
        "vocab_size": VOCAB_SIZE,
        "model_type": "transformer",
        "bos_token_id": null,
        "max_req_input_len": cfg.max_model_len - 1,
    })
}

fn llama_params(s: &Shared) -> Value {
    json!({
        "n_predict": -1,
        "seed": s.cfg.seed,
        "temperature": 0.800000011920929,
        "top_k": 40,
        "top_p": 0.949999988079071,
        "min_p": 0.05000000074505806,
        "max_tokens": -1,
        "n_keep": 0,
        "ignore_eos": false,
        "stream": true,
        "n_probs": 0,
        "speculative.n_max": s.cfg.spec_tokens,
        "speculative.n_min": 0,
        "speculative.p_min": 0.75,
        "timings_per_token": false,
    })
}

/// llama.cpp `GET /props`: `default_generation_settings.n_ctx` is the per-slot context
/// (= `max_model_len`), `total_slots` = `max_batch`.
pub(crate) fn llamacpp_props(s: &Shared) -> Value {
    let cfg = &s.cfg;
    json!({
        "default_generation_settings": {
            "id": 0,
            "id_task": -1,
            "n_ctx": cfg.max_model_len,
            "speculative": cfg.spec_tokens > 0,
            "is_processing": false,
            "params": llama_params(s),
            "prompt": "",
            "next_token": {
                "has_next_token": true,
                "has_new_line": false,
                "n_remain": -1,
                "n_decoded": 0,
                "stopping_word": "",
            },
        },
        "total_slots": cfg.max_batch,
        "model_path": cfg.model,
        "chat_template": "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}",
        "chat_template_caps": {},
        "modalities": {"vision": false, "audio": false},
        "build_info": LLAMACPP_BUILD,
        "is_sleeping": false,
    })
}

/// llama.cpp `GET /slots`: one entry per slot with the request it serves and its
/// `next_token.n_decoded` (as of the latest scheduler step).
pub(crate) fn llamacpp_slots(s: &Shared) -> Value {
    let slots = s.metrics_state().slots.clone();
    let params = llama_params(s);
    let v: Vec<Value> = slots
        .iter()
        .enumerate()
        .map(|(i, sl)| {
            let busy = sl.task.is_some();
            json!({
                "id": i,
                "id_task": sl.task.map_or(-1, |t| t as i64),
                "n_ctx": s.cfg.max_model_len,
                "speculative": s.cfg.spec_tokens > 0,
                "is_processing": busy,
                "params": params,
                "next_token": {
                    "has_next_token": busy,
                    "has_new_line": false,
                    "n_remain": -1,
                    "n_decoded": sl.n_decoded,
                    "stopping_word": "",
                },
            })
        })
        .collect();
    Value::Array(v)
}
