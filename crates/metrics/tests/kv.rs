//! KV budget detection (spec §3.3) on the cache_config_info fixtures.

mod common;

use common::{fixture, scrape};
use servebench_metrics::{
    format_kv_event, format_sglang_kv_event, format_thousands, resolve_vllm_kv_budget,
    sglang_kv_budget, vllm_cp_size, vllm_kv_from_cache_config, KvBudget, KvBudgetError, Scrape,
};

#[test]
fn local_vllm_capture_524288_tokens_both_ways_agree() {
    for f in [
        "local-captures/vllm-metrics.txt",
        "local-captures/vllm-metrics-under-load.txt",
        "local-captures/vllm-metrics-queued.txt",
        "local-captures/vllm-metrics-specdecode.txt",
    ] {
        let s = scrape(f);
        // kv_cache_size_tokens="524288" and num_gpu_blocks 4096 × block_size 128 agree.
        assert_eq!(
            vllm_kv_from_cache_config(&s),
            Some((524_288, "4096 blocks x 128".to_string())),
            "{f}"
        );
        assert_eq!(vllm_cp_size(&s), None);
    }
    let s = scrape("local-captures/vllm-metrics.txt");
    // Served with --max-model-len 2048: local KV ≥ model length → CP 1 by default.
    let b = resolve_vllm_kv_budget(&s, None, None, Some(2048)).unwrap();
    assert_eq!(
        b,
        KvBudget {
            tokens: 524_288,
            local_tokens: 524_288,
            cp: 1,
            detail: "4096 blocks x 128".to_string(),
            source: "default".to_string(),
        }
    );
    assert_eq!(
        format_kv_event(&b),
        "KV cache budget from vLLM metrics: 524,288 tokens (4096 blocks x 128; local 524,288 × CP 1; CP source: default)"
    );
}

#[test]
fn nim_551520_from_kv_cache_size_tokens() {
    let s = scrape("vllm-nim-qwen3vl-cache-config-info.prom");
    // kv_cache_size_tokens 551520 = 34470 × 16.
    assert_eq!(
        vllm_kv_from_cache_config(&s),
        Some((551_520, "34470 blocks x 16".to_string()))
    );
}

#[test]
fn aibrix_v0_blocks_times_block_size() {
    let s = scrape("vllm-v0.7-metrics-aibrix-docs.prom");
    // No kv_cache_size_tokens label in V0: 81767 × 16 = 1,308,272.
    assert_eq!(
        vllm_kv_from_cache_config(&s),
        Some((1_308_272, "81767 blocks x 16".to_string()))
    );
    let b = resolve_vllm_kv_budget(&s, None, None, None).unwrap();
    assert_eq!(b.tokens, 1_308_272);
    assert_eq!(
        format_kv_event(&b),
        "KV cache budget from vLLM metrics: 1,308,272 tokens (81767 blocks x 16; local 1,308,272 × CP 1; CP source: default)"
    );
}

#[test]
fn openvino_line_has_only_kv_cache_size_tokens_and_kserve_prefix_is_a_fallback() {
    let s = scrape("vllm-0.30-openvino-and-kserve-prefix-cache-config-lines.prom");
    assert_eq!(
        vllm_kv_from_cache_config(&s),
        Some((570_336, "kv_cache_size_tokens".to_string()))
    );
    // The UNVERIFIED kserve_vllm: line alone (a "maybe" case): 2000 × 16.
    let text = fixture("vllm-0.30-openvino-and-kserve-prefix-cache-config-lines.prom");
    let kserve_only: String = text
        .lines()
        .filter(|l| !l.starts_with("vllm:"))
        .map(|l| format!("{l}\n"))
        .collect();
    let k = Scrape::parse(&kserve_only).unwrap();
    assert_eq!(
        vllm_kv_from_cache_config(&k),
        Some((32_000, "2000 blocks x 16".to_string()))
    );
}

#[test]
fn kv_cache_size_tokens_is_preferred_when_the_product_disagrees() {
    // Pitfall 38: hybrid models — prefer kv_cache_size_tokens.
    let s = Scrape::parse(
        "vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"100\",kv_cache_size_tokens=\"4000\"} 1\n",
    )
    .unwrap();
    assert_eq!(
        vllm_kv_from_cache_config(&s),
        Some((
            4000,
            "kv_cache_size_tokens; 100 blocks x 16 = 1,600".to_string()
        ))
    );
}

#[test]
fn missing_or_none_labels() {
    let s = Scrape::parse(
        "vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"None\",kv_cache_size_tokens=\"None\"} 1\n",
    )
    .unwrap();
    assert_eq!(vllm_kv_from_cache_config(&s), None);
    assert_eq!(
        resolve_vllm_kv_budget(&s, Some(2), None, None),
        Err(KvBudgetError::NoCacheConfig)
    );
    assert_eq!(
        KvBudgetError::NoCacheConfig.warning(),
        "KV cache budget not available from metrics; set the KV cache budget explicitly"
    );
    let empty = Scrape::parse("vllm:num_requests_running 0\n").unwrap();
    assert_eq!(vllm_kv_from_cache_config(&empty), None);
}

#[test]
fn data_parallel_engines_are_summed() {
    let s = Scrape::parse(concat!(
        "vllm:cache_config_info{block_size=\"16\",engine=\"0\",num_gpu_blocks=\"100\"} 1\n",
        "vllm:cache_config_info{block_size=\"16\",engine=\"1\",num_gpu_blocks=\"100\"} 1\n",
    ))
    .unwrap();
    assert_eq!(
        vllm_kv_from_cache_config(&s),
        Some((
            3200,
            "engine 0: 100 blocks x 16 + engine 1: 100 blocks x 16".to_string()
        ))
    );
}

#[test]
fn seed_event_example_with_cp_argument() {
    let s =
        Scrape::parse("vllm:cache_config_info{block_size=\"3456\",num_gpu_blocks=\"87\"} 1.0\n")
            .unwrap();
    let b = resolve_vllm_kv_budget(&s, Some(2), None, Some(1_000_000)).unwrap();
    assert_eq!(
        format_kv_event(&b),
        "KV cache budget from vLLM metrics: 601,344 tokens (87 blocks x 3456; local 300,672 × CP 2; CP source: argument)"
    );
}

#[test]
fn cp_size_from_info_labels_in_spec_order() {
    let s = Scrape::parse(concat!(
        "vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"1000\",dcp_world_size=\"8\"} 1\n",
        "vllm:vllm_config_info{prefill_context_parallel_size=\"2\",decode_context_parallel_size=\"3\"} 1\n",
        "vllm:parallel_config_info{cp_world_size=\"None\",dcp_world_size=\"4\"} 1\n",
    ))
    .unwrap();
    // parallel_config_info has no usable cp_world_size nor product; vllm_config_info's product
    // wins before any dcp_world_size is considered.
    assert_eq!(
        vllm_cp_size(&s),
        Some((
            6,
            "vllm:vllm_config_info labels prefill_context_parallel_size x decode_context_parallel_size"
                .to_string()
        ))
    );
    let b = resolve_vllm_kv_budget(&s, None, Some(5), None).unwrap();
    assert_eq!((b.tokens, b.cp), (96_000, 6));
    let s2 = Scrape::parse(concat!(
        "vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"1000\",dcp_world_size=\"8\"} 1\n",
        "vllm:parallel_config_info{dcp_world_size=\"4\",decode_context_parallel_size=\"0\",prefill_context_parallel_size=\"2\"} 1\n",
    ))
    .unwrap();
    assert_eq!(
        vllm_cp_size(&s2),
        Some((
            4,
            "vllm:parallel_config_info label dcp_world_size".to_string()
        ))
    );
    let s3 = Scrape::parse("vllm:parallel_config_info{cp_world_size=\"2\"} 1\n").unwrap();
    assert_eq!(
        vllm_cp_size(&s3),
        Some((
            2,
            "vllm:parallel_config_info label cp_world_size".to_string()
        ))
    );
}

#[test]
fn unknown_cp_with_local_kv_below_model_length_leaves_budget_unset() {
    let s = Scrape::parse("vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"1000\"} 1\n")
        .unwrap();
    let err = resolve_vllm_kv_budget(&s, None, None, Some(131_072)).unwrap_err();
    assert_eq!(
        err,
        KvBudgetError::LocalOnly {
            local_tokens: 16_000,
            model_len: 131_072
        }
    );
    assert!(err.warning().contains("16,000"));
    // The local process inspection (step 3) resolves it.
    let b = resolve_vllm_kv_budget(&s, None, Some(8), Some(131_072)).unwrap();
    assert_eq!((b.tokens, b.source.as_str()), (128_000, "local process"));
    // --dcp-size 0 means "not given".
    assert!(resolve_vllm_kv_budget(&s, Some(0), None, Some(131_072)).is_err());
}

#[test]
fn sglang_budget_and_event() {
    let b = sglang_kv_budget(570_979, Some(2));
    assert_eq!((b.tokens, b.cp), (1_141_958, 2));
    assert_eq!(
        format_sglang_kv_event(&b),
        "KV cache budget: 1,141,958 tokens (SGLang reported 570,979 x DCP 2)"
    );
    let b = sglang_kv_budget(570_979, None);
    assert_eq!(
        format_sglang_kv_event(&b),
        "KV cache budget: 570,979 tokens"
    );
    assert_eq!(sglang_kv_budget(10, Some(1)).tokens, 10);
}

#[test]
fn thousands() {
    assert_eq!(format_thousands(0), "0");
    assert_eq!(format_thousands(999), "999");
    assert_eq!(format_thousands(1000), "1,000");
    assert_eq!(format_thousands(601_344), "601,344");
    assert_eq!(format_thousands(u64::MAX), "18,446,744,073,709,551,615");
}
