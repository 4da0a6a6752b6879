//! Engine info endpoints (INDEX.md §B).

mod common;

use common::fixture;
use servebench_metrics::{
    parse_llamacpp_props, parse_llamacpp_slots, parse_ollama_version, parse_sglang_model_info,
    parse_sglang_server_info, parse_tgi_info, parse_v1_models, parse_vllm_version, Engine,
    EngineInfo,
};

#[test]
fn sglang_model_info_uses_the_smaller_limit() {
    let m = parse_sglang_model_info(&fixture("sglang-2025-10-get_model_info.json")).unwrap();
    assert_eq!(m.max_context_length, Some(414_382));
    assert_eq!(m.max_req_input_len, Some(131_066));
    assert_eq!(m.prompt_limit(), Some(131_066));
    assert_eq!(
        m.served_model_name.as_deref(),
        Some("/raid/models/meta-llama/Llama-3.1-8B-Instruct")
    );
    let mut info = EngineInfo::new(Engine::Sglang);
    info.apply_sglang_model_info(&m);
    assert_eq!(info.max_input_tokens, Some(131_066));
    assert_eq!(info.max_model_len, Some(414_382));
}

#[test]
fn sglang_server_info_head_is_truncated_json_but_the_shape_parses() {
    let text = fixture("sglang-2025-10-get_server_info-head.json.txt");
    // The head (with its comment lines, cut mid-object) is not JSON: an error, not a panic.
    assert!(parse_sglang_server_info(&text).is_err());
    // Repaired: drop the comment lines and close the two objects.
    let repaired: String = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect::<String>()
        + "}}";
    let i = parse_sglang_server_info(&repaired).unwrap();
    assert_eq!(i.chunked_prefill_size, Some(8192));
    assert_eq!(i.context_length, None, "null = model default");
    assert_eq!(i.max_total_num_tokens, None);
    assert!(!i.is_sglang());
}

#[test]
fn sglang_flat_server_info() {
    let body = r#"{"model_path":"/models/x","context_length":32768,"max_running_requests":2231,
        "chunked_prefill_size":8192,"max_total_num_tokens":570979,"max_req_input_len":32762,
        "internal_states":[{"last_gen_throughput":12.5,"avg_spec_accept_length":null}],
        "version":"0.5.1"}"#;
    let i = parse_sglang_server_info(body).unwrap();
    assert!(i.is_sglang());
    assert_eq!(i.max_total_num_tokens, Some(570_979));
    assert_eq!(i.max_running_requests, Some(2231));
    assert_eq!(i.context_length, Some(32_768));
    assert_eq!(i.version.as_deref(), Some("0.5.1"));
    let mut info = EngineInfo::new(Engine::Sglang);
    info.apply_sglang_server_info(&i);
    assert_eq!(info.kv_budget_tokens, Some(570_979));
    assert_eq!(info.max_running_requests, Some(2231));
    assert_eq!(info.max_model_len, Some(32_768));
    assert_eq!(info.max_input_tokens, Some(32_762));
    assert_eq!(info.version.as_deref(), Some("0.5.1"));
}

#[test]
fn llamacpp_props_per_slot_context() {
    let p = parse_llamacpp_props(&fixture("llamacpp-props-readme.json")).unwrap();
    assert_eq!(p.per_slot_ctx, Some(1024));
    assert_eq!(p.total_slots, Some(1));
    assert_eq!(p.total_ctx(), Some(1024));
    assert_eq!(
        p.build_info.as_deref(),
        Some("b(build number)-(build commit hash)")
    );
    assert_eq!(
        p.model_path.as_deref(),
        Some("../models/Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf")
    );
    let mut info = EngineInfo::new(Engine::LlamaCpp);
    info.apply_llamacpp_props(&p);
    assert_eq!(
        (info.slots, info.per_slot_ctx, info.max_model_len),
        (Some(1), Some(1024), Some(1024))
    );
}

#[test]
fn llamacpp_router_placeholder_n_ctx_zero_is_unknown() {
    let p = parse_llamacpp_props(
        r#"{"default_generation_settings":{"n_ctx":0},"total_slots":4,"build_info":"b6000-abc"}"#,
    )
    .unwrap();
    assert_eq!(p.per_slot_ctx, None);
    assert_eq!(p.total_slots, Some(4));
    assert_eq!(p.total_ctx(), None);
    let mut info = EngineInfo::new(Engine::LlamaCpp);
    info.max_model_len = Some(8192);
    info.apply_llamacpp_props(&p);
    assert_eq!(
        info.max_model_len,
        Some(8192),
        "a placeholder never overrides"
    );
}

#[test]
fn llamacpp_slots() {
    let slots = parse_llamacpp_slots(&fixture("llamacpp-slots-readme.json")).unwrap();
    assert_eq!(slots.len(), 2);
    assert_eq!(slots[1].id, 1);
    assert_eq!(slots[1].n_decoded, Some(136));
    assert!(slots[1].is_processing);
    assert!(slots.iter().all(|s| s.n_ctx == Some(65_536)));
    assert_eq!(slots[0].n_decoded, Some(0));
    assert!(parse_llamacpp_slots("{}").is_err());
}

#[test]
fn llamacpp_v1_models_trained_context_is_not_served_context() {
    let m = parse_v1_models(&fixture("llamacpp-v1-models-readme.json")).unwrap();
    assert_eq!(m.models.len(), 1);
    let e = &m.models[0];
    assert_eq!(e.id, "../models/Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf");
    assert_eq!(e.n_ctx_train, Some(131_072));
    assert_eq!(e.n_ctx, None);
    assert_eq!(e.served_context(), None);
    assert_eq!(e.owned_by.as_deref(), Some("llamacpp"));
    let mut info = EngineInfo::new(Engine::LlamaCpp);
    info.apply_models(&m);
    assert_eq!(info.max_model_len, None);
    assert_eq!(info.model_ids, vec![e.id.clone()]);
    // With a served meta.n_ctx it is used.
    let m2 =
        parse_v1_models(r#"{"data":[{"id":"x","meta":{"n_ctx":16384,"n_ctx_train":131072}}]}"#)
            .unwrap();
    assert_eq!(m2.models[0].served_context(), Some(16_384));
}

#[test]
fn vllm_v1_models_with_lora_inheriting_max_model_len() {
    let body = r#"{"object":"list","data":[
        {"id":"tiny-llama","object":"model","owned_by":"vllm","root":"/models/tiny","parent":null,"max_model_len":2048},
        {"id":"my-lora","object":"model","owned_by":"vllm","root":"/loras/a","parent":"tiny-llama"}
    ]}"#;
    let m = parse_v1_models(body).unwrap();
    assert_eq!(m.model_ids(), vec!["tiny-llama", "my-lora"]);
    assert_eq!(m.get("tiny-llama").unwrap().max_model_len, Some(2048));
    let lora = m.get("my-lora").unwrap();
    assert_eq!(lora.parent.as_deref(), Some("tiny-llama"));
    assert_eq!(lora.max_model_len, Some(2048));
    let mut info = EngineInfo::new(Engine::Vllm);
    info.apply_models(&m);
    assert_eq!(info.max_model_len, Some(2048));
}

#[test]
fn v1_models_errors() {
    assert!(parse_v1_models("").is_err());
    assert!(parse_v1_models("[]").is_err());
    assert!(parse_v1_models(r#"{"object":"list"}"#).is_err());
    assert!(parse_v1_models("<html>502</html>").is_err());
    // Entries without a string id are skipped, not fatal.
    let m = parse_v1_models(r#"{"data":[{"id":5},{"id":"ok","max_model_len":"4096"}]}"#).unwrap();
    assert_eq!(m.model_ids(), vec!["ok"]);
    assert_eq!(m.models[0].max_model_len, Some(4096));
}

#[test]
fn versions() {
    assert_eq!(
        parse_vllm_version(r#"{"version":"0.32.0"}"#).unwrap(),
        "0.32.0"
    );
    assert_eq!(
        parse_ollama_version(r#"{"version":"0.5.7"}"#).unwrap(),
        "0.5.7"
    );
    assert!(parse_vllm_version(r#"{"version":32}"#).is_err());
    assert!(parse_vllm_version("404 page not found").is_err());
    assert!(parse_ollama_version("{}").is_err());
}

#[test]
fn tgi_info() {
    let body = r#"{"model_id":"bigscience/bloom-560m","model_sha":"e985a63cdc139290c5f700ff1929f0b5942cced2",
        "model_dtype":"torch.float16","model_device_type":"cuda","model_pipeline_tag":"text-generation",
        "max_concurrent_requests":128,"max_best_of":2,"max_stop_sequences":4,"max_input_tokens":1024,
        "max_total_tokens":2048,"validation_workers":2,"max_client_batch_size":32,
        "router":"text-generation-router","version":"3.0.0","sha":null,"docker_label":null}"#;
    let t = parse_tgi_info(body).unwrap();
    assert_eq!(t.model_id.as_deref(), Some("bigscience/bloom-560m"));
    assert_eq!(t.version.as_deref(), Some("3.0.0"));
    assert_eq!(t.max_input_tokens, Some(1024));
    assert_eq!(t.max_total_tokens, Some(2048));
    assert_eq!(t.max_concurrent_requests, Some(128));
    let mut info = EngineInfo::new(Engine::Tgi);
    info.apply_tgi_info(&t);
    assert_eq!(info.model_ids, vec!["bigscience/bloom-560m"]);
    assert_eq!(info.max_model_len, Some(2048));
    assert_eq!(info.max_input_tokens, Some(1024));
    assert_eq!(info.max_running_requests, Some(128));
    // TGI 1.x name.
    let old = parse_tgi_info(r#"{"max_input_length":1000,"max_total_tokens":1512}"#).unwrap();
    assert_eq!(old.max_input_tokens, Some(1000));
}
