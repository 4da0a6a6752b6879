//! Engine catalog and detection against the fixtures of INDEX.md §A / §F.

mod common;

use common::{close, close_some, fixture, scrape};
use servebench_metrics::{detect_engine_from_metrics, Catalog, Concept, Engine, Kind, Scrape};

// ------------------------------------------------------------------ SGLang

#[test]
fn sglang_v04_docs_gauges_and_counters() {
    let s = scrape("sglang-v0.4-metrics-docs.prom");
    assert_eq!(detect_engine_from_metrics(&s), Some(Engine::Sglang));
    let e = Engine::Sglang;
    close_some(s.concept(e, Concept::Running), 162.0);
    close_some(s.concept(e, Concept::Waiting), 2826.0);
    close_some(s.concept(e, Concept::KvUsage), 0.28);
    close_some(
        s.concept(e, Concept::GenThroughputGauge),
        86.508_141_777_269_02,
    );
    assert_eq!(
        (s.concept(e, Concept::GenThroughputGauge).unwrap() * 100.0).round() / 100.0,
        86.51
    );
    close_some(
        s.concept(e, Concept::CacheHitRateGauge),
        0.007_507_552_643_049_313,
    );
    assert_eq!(
        (s.concept(e, Concept::CacheHitRateGauge).unwrap() * 10_000.0).round() / 10_000.0,
        0.0075
    );
    // Counters in exponent notation.
    close_some(s.concept(e, Concept::PromptTokens), 8_128_902.0);
    close_some(s.concept(e, Concept::GenerationTokens), 7_557_572.0);
    assert_eq!(
        s.reading(e, Concept::Running).unwrap().source,
        "sglang:num_running_reqs"
    );
    // Not exported by this version: absent, never 0.
    assert_eq!(s.concept(e, Concept::SpecAcceptLengthGauge), None);
    assert_eq!(s.concept(e, Concept::PromptTokensCached), None);
    // func_latency_seconds uses label `name`, not `model_name`.
    let f = s
        .series("sglang:func_latency_seconds_count")
        .next()
        .unwrap();
    assert_eq!(f.label("name"), Some("generate_request"));
    assert_eq!(f.label("model_name"), None);
}

#[test]
fn sglang_051_head() {
    let s = scrape("sglang-0.5.1-metrics-head-issue13485.prom");
    assert_eq!(detect_engine_from_metrics(&s), Some(Engine::Sglang));
    let e = Engine::Sglang;
    close_some(s.concept(e, Concept::Running), 1.0);
    close_some(s.concept(e, Concept::KvUsage), 0.0);
    close_some(
        s.concept(e, Concept::GenThroughputGauge),
        0.837_128_445_740_378_3,
    );
    let x = s.series("sglang:num_running_reqs").next().unwrap();
    for k in ["engine_type", "model_name", "pp_rank", "tp_rank"] {
        assert!(x.label(k).is_some(), "{k}");
    }
    assert_eq!(s.concept(e, Concept::Waiting), None);
}

#[test]
fn sglang_2024_11_first_prometheus_capacity_gauges() {
    let s = scrape("sglang-2024-11-first-prometheus-pr1853-head.prom");
    assert_eq!(detect_engine_from_metrics(&s), Some(Engine::Sglang));
    let e = Engine::Sglang;
    close_some(s.concept(e, Concept::KvCapacityTokens), 570_979.0);
    close_some(s.concept(e, Concept::MaxRunningRequests), 2231.0);
    close_some(s.concept(e, Concept::ContextLength), 131_072.0);
    close_some(s.concept(e, Concept::PromptTokens), 230_794.0);
    assert_eq!(
        s.series("sglang:context_len").next().unwrap().label("name"),
        Some("/models/meta-llama/Llama-3.2-3B/<snapshot-hash>/")
    );
    assert_eq!(
        s.series("sglang:max_prefill_tokens")
            .next()
            .map(|x| x.value),
        Some(16384.0)
    );
}

#[test]
fn sglang_underscore_prefix_sidecar() {
    let s = scrape("sglang-grpc-sidecar-underscore-prefix-excerpt.prom");
    assert_eq!(detect_engine_from_metrics(&s), Some(Engine::Sglang));
    let e = Engine::Sglang;
    // Pitfall 33: cache_hit_rate 0 (a present 0, not absent).
    let r = s.reading(e, Concept::CacheHitRateGauge).unwrap();
    assert_eq!(r.value, Some(0.0));
    assert_eq!(r.source, "sglang_cache_hit_rate");
    close_some(s.concept(e, Concept::PromptTokensComputed), 55.0);
    assert_eq!(
        s.series("sglang_cuda_graph_passes_total")
            .next()
            .unwrap()
            .label("worker_addr"),
        Some("grpc://127.0.0.1:8001")
    );
    close_some(s.sum("sglang_cuda_graph_passes_total"), 311.0);
}

#[test]
fn sglang_colon_and_underscore_prefixes_give_the_same_concepts() {
    // Pitfall 33: rewrite the v0.4 dump with the router's `sglang_` prefix.
    let colon_text = fixture("sglang-v0.4-metrics-docs.prom");
    let underscore_text = colon_text.replace("sglang:", "sglang_");
    let colon = Scrape::parse(&colon_text).unwrap();
    let underscore = Scrape::parse(&underscore_text).unwrap();
    assert_eq!(
        detect_engine_from_metrics(&underscore),
        Some(Engine::Sglang)
    );
    for &c in Concept::ALL {
        assert_eq!(
            colon.concept(Engine::Sglang, c),
            underscore.concept(Engine::Sglang, c),
            "{c:?}"
        );
    }
    close_some(underscore.concept(Engine::Sglang, Concept::Running), 162.0);
    assert_eq!(
        servebench_metrics::histogram_mean(&colon, "sglang:time_to_first_token_seconds"),
        servebench_metrics::histogram_mean(&underscore, "sglang_time_to_first_token_seconds")
    );
}

#[test]
fn sglang_catalog_names_are_in_the_2025_10_catalog_when_listed_there() {
    // Names of the live 2025-10 catalog that the tables rely on.
    let tsv = fixture("sglang-2025-10-metric-catalog.tsv");
    let listed: Vec<&str> = tsv
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split('\t').next())
        .collect();
    for (concept, base) in [
        (Concept::Running, "sglang:num_running_reqs"),
        (Concept::Waiting, "sglang:num_queue_reqs"),
        (Concept::KvUsage, "sglang:token_usage"),
        (Concept::GenThroughputGauge, "sglang:gen_throughput"),
        (Concept::CacheHitRateGauge, "sglang:cache_hit_rate"),
        (Concept::SpecAcceptLengthGauge, "sglang:spec_accept_length"),
        (Concept::PromptTokens, "sglang:prompt_tokens"),
        (Concept::GenerationTokens, "sglang:generation_tokens"),
        (Concept::PromptTokensCached, "sglang:cached_tokens"),
        (Concept::RequestSuccess, "sglang:num_requests"),
    ] {
        assert!(listed.contains(&base), "{base} not in the catalog TSV");
        let first = Catalog::candidates(Engine::Sglang, concept)[0];
        let expected_name = if first.kind == Kind::Counter {
            format!("{base}_total")
        } else {
            base.to_string()
        };
        assert_eq!(first.metric, expected_name, "{concept:?}");
        // The underscore twin is always offered too.
        let twin = expected_name.replacen("sglang:", "sglang_", 1);
        assert!(
            Catalog::candidates(Engine::Sglang, concept)
                .iter()
                .any(|c| c.metric == twin),
            "{concept:?}: no {twin}"
        );
    }
}

// ------------------------------------------------------------------ vLLM

#[test]
fn vllm_local_captures_request_state() {
    let e = Engine::Vllm;
    let idle = scrape("local-captures/vllm-metrics.txt");
    let load = scrape("local-captures/vllm-metrics-under-load.txt");
    let queued = scrape("local-captures/vllm-metrics-queued.txt");
    for s in [&idle, &load, &queued] {
        assert_eq!(detect_engine_from_metrics(s), Some(Engine::Vllm));
        // Renamed in V1: the old name is absent, the new one is read.
        assert!(!s.has_series("vllm:gpu_cache_usage_perc"));
        assert_eq!(
            s.reading(e, Concept::KvUsage).unwrap().source,
            "vllm:kv_cache_usage_perc"
        );
    }
    close_some(idle.concept(e, Concept::Running), 0.0);
    close_some(load.concept(e, Concept::Running), 8.0);
    close_some(load.concept(e, Concept::Waiting), 0.0);
    close_some(load.concept(e, Concept::KvUsage), 0.007_814_407_814_407_787);
    close_some(queued.concept(e, Concept::Running), 2.0);
    close_some(queued.concept(e, Concept::Waiting), 6.0);
    close_some(
        queued.concept(e, Concept::KvUsage),
        0.001_953_601_953_601_946_7,
    );
}

#[test]
fn vllm_local_capture_token_counters() {
    let e = Engine::Vllm;
    let load = scrape("local-captures/vllm-metrics-under-load.txt");
    close_some(load.concept(e, Concept::GenerationTokens), 10_770.0);
    close_some(load.concept(e, Concept::PromptTokens), 3056.0);
    close_some(load.concept(e, Concept::PromptTokensComputed), 2288.0);
    let cached = load.reading(e, Concept::PromptTokensCached).unwrap();
    assert_eq!(cached.source, "vllm:prompt_tokens_cached_total");
    close_some(cached.value, 768.0);
    close_some(load.concept(e, Concept::PrefixCacheQueries), 3056.0);
    close_some(load.concept(e, Concept::PrefixCacheHits), 768.0);
    close_some(load.concept(e, Concept::Preemptions), 0.0);
    // finished_reason: length 30, every other reason 0.
    close_some(load.concept(e, Concept::RequestSuccess), 30.0);
    close_some(load.concept(e, Concept::RequestAborted), 0.0);
    close_some(
        load.concept(e, Concept::PrefillTimeSum),
        0.392_318_543_000_101_27,
    );
    close_some(load.concept(e, Concept::PrefillTimeCount), 30.0);
    // No V0 gauges, no spec decode in this capture: absent.
    assert_eq!(load.concept(e, Concept::GenThroughputGauge), None);
    assert_eq!(load.reading(e, Concept::SpecDrafts), None);
    assert_eq!(load.reading(e, Concept::CacheHitRateGauge), None);
}

#[test]
fn vllm_spec_decode_capture_uses_totals_not_per_pos_or_created() {
    let e = Engine::Vllm;
    let s = scrape("local-captures/vllm-metrics-specdecode.txt");
    close_some(s.concept(e, Concept::SpecDrafts), 160.0);
    close_some(s.concept(e, Concept::SpecDraftTokens), 432.0);
    let acc = s.reading(e, Concept::SpecAcceptedTokens).unwrap();
    assert_eq!(acc.source, "vllm:spec_decode_num_accepted_tokens_total");
    // 328, not 328 + Σper_pos (= 656) and not + the 1.7959e9 `_created` value.
    close_some(acc.value, 328.0);
    close_some(
        s.sum("vllm:spec_decode_num_accepted_tokens_per_pos_total"),
        328.0,
    );
}

#[test]
fn vllm_aibrix_v0_docs() {
    let e = Engine::Vllm;
    let s = scrape("vllm-v0.7-metrics-aibrix-docs.prom");
    assert_eq!(detect_engine_from_metrics(&s), Some(Engine::Vllm));
    // -1 = prefix caching disabled: the series is present but its value is N/A.
    let r = s.reading(e, Concept::CacheHitRateGauge).unwrap();
    assert_eq!(r.value, None);
    assert_eq!(r.source, "vllm:gpu_prefix_cache_hit_rate");
    assert_eq!(s.concept(e, Concept::CacheHitRateGauge), None);
    let kv = s.reading(e, Concept::KvUsage).unwrap();
    assert_eq!(kv.source, "vllm:gpu_cache_usage_perc");
    close_some(kv.value, 0.0);
    close_some(s.concept(e, Concept::Running), 0.0);
    close_some(s.concept(e, Concept::Waiting), 0.0);
    close_some(s.concept(e, Concept::Swapped), 0.0);
    close_some(s.concept(e, Concept::Preemptions), 0.0);
    close_some(s.concept(e, Concept::PromptTokens), 148.0);
    close_some(s.concept(e, Concept::GenerationTokens), 955.0);
    close_some(s.concept(e, Concept::RequestSuccess), 4.0);
    // lora_requests_info's VALUE is a unix timestamp: no concept reads it.
    close_some(s.sum("vllm:lora_requests_info"), 1.738_217_335_840_715_4e9);
    for &c in Concept::ALL {
        if let Some(r) = s.reading(e, c) {
            assert_ne!(r.source, "vllm:lora_requests_info");
        }
    }
}

#[test]
fn vllm_0_7_v1_early_excerpt() {
    let e = Engine::Vllm;
    let s = scrape("vllm-0.7-v1engine-metrics-excerpt.prom");
    assert_eq!(detect_engine_from_metrics(&s), Some(Engine::Vllm));
    close_some(s.concept(e, Concept::Running), 0.0);
    close_some(s.concept(e, Concept::Waiting), 0.0);
    close_some(s.concept(e, Concept::KvUsage), 0.0);
    // The queries counter's samples were cut off by the excerpt: absent, not 0.
    assert_eq!(s.reading(e, Concept::PrefixCacheQueries), None);
}

#[test]
fn vllm_0_10_0_old_and_new_prefix_names_and_created_ignored() {
    let e = Engine::Vllm;
    let s = scrape("vllm-0.10.0-metrics-excerpt-glm45.prom");
    let q = s.reading(e, Concept::PrefixCacheQueries).unwrap();
    assert_eq!(q.source, "vllm:prefix_cache_queries_total");
    close_some(q.value, 32.0);
    // New hits name absent in the excerpt → deprecated alias, never its `_created` gauge.
    let h = s.reading(e, Concept::PrefixCacheHits).unwrap();
    assert_eq!(h.source, "vllm:gpu_prefix_cache_hits_total");
    close_some(h.value, 0.0);
    close_some(s.concept(e, Concept::KvUsage), 9.750_104_813_632_81e-6);
    assert_eq!(
        s.series("vllm:kv_cache_usage_perc")
            .next()
            .unwrap()
            .label("engine"),
        Some("0")
    );
}

#[test]
fn vllm_0_10_2_catalog_names_are_all_mapped() {
    let tsv = fixture("vllm-0.10.2-metric-catalog.tsv");
    let mut checked = 0;
    for line in tsv.lines().filter(|l| !l.starts_with('#')) {
        let mut cols = line.split('\t');
        let (Some(name), Some(ty)) = (cols.next(), cols.next()) else {
            continue;
        };
        let series = match ty {
            "counter" => format!("{name}_total"),
            "gauge" => name.to_string(),
            _ => continue,
        };
        let mapped = Concept::ALL.iter().any(|&c| {
            Catalog::candidates(Engine::Vllm, c)
                .iter()
                .any(|cand| cand.metric == series)
        });
        assert!(mapped, "{series} is not in the vLLM catalog");
        checked += 1;
    }
    assert_eq!(checked, 12);
}

#[test]
fn vllm_nim_kv_usage() {
    let s = scrape("vllm-nim-qwen3vl-cache-config-info.prom");
    assert_eq!(detect_engine_from_metrics(&s), Some(Engine::Vllm));
    close_some(s.concept(Engine::Vllm, Concept::KvUsage), 0.0);
}

#[test]
fn vllm_issue_8115_histogram_only_is_vllm() {
    let s = scrape("vllm-0.5-ttft-histogram-count-vs-requests-issue8115.prom");
    assert_eq!(detect_engine_from_metrics(&s), Some(Engine::Vllm));
}

#[test]
fn pitfall_32_new_names_old_alias_and_absent() {
    let e = Engine::Vllm;
    let new = Scrape::parse(concat!(
        "vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0.42\n",
        "vllm:prefix_cache_queries_total{engine=\"0\",model_name=\"m\"} 2000.0\n",
        "vllm:prefix_cache_hits_total{engine=\"0\",model_name=\"m\"} 500.0\n",
    ))
    .unwrap();
    close_some(new.concept(e, Concept::KvUsage), 0.42);
    let w = servebench_metrics::window_stats_since_start(&new, e);
    close_some(w.prefix_cache_hit_rate, 0.25);
    let old = Scrape::parse(concat!(
        "vllm:gpu_cache_usage_perc{model_name=\"m\"} 0.3\n",
        "vllm:gpu_prefix_cache_queries_total{model_name=\"m\"} 10\n",
        "vllm:gpu_prefix_cache_hits_total{model_name=\"m\"} 4\n",
    ))
    .unwrap();
    close_some(old.concept(e, Concept::KvUsage), 0.3);
    close_some(old.concept(e, Concept::PrefixCacheQueries), 10.0);
    close_some(old.concept(e, Concept::PrefixCacheHits), 4.0);
    let none = Scrape::parse("vllm:num_requests_running 1\n").unwrap();
    assert_eq!(none.concept(e, Concept::KvUsage), None);
    assert_eq!(none.reading(e, Concept::PrefixCacheHits), None);
}

#[test]
fn pitfall_38_data_parallel_engines_are_summed_ratios_averaged() {
    let e = Engine::Vllm;
    let s = Scrape::parse(concat!(
        "# TYPE vllm:num_requests_running gauge\n",
        "vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 3.0\n",
        "vllm:num_requests_running{engine=\"1\",model_name=\"m\"} 4.0\n",
        "# TYPE vllm:generation_tokens_total counter\n",
        "vllm:generation_tokens_total{engine=\"0\",model_name=\"m\"} 100.0\n",
        "vllm:generation_tokens_total{engine=\"1\",model_name=\"m\"} 250.0\n",
        "# TYPE vllm:generation_tokens_created gauge\n",
        "vllm:generation_tokens_created{engine=\"0\",model_name=\"m\"} 1.7855e9\n",
        "vllm:generation_tokens_created{engine=\"1\",model_name=\"m\"} 1.7855e9\n",
        "# TYPE vllm:kv_cache_usage_perc gauge\n",
        "vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0.2\n",
        "vllm:kv_cache_usage_perc{engine=\"1\",model_name=\"m\"} 0.4\n",
        "vllm:request_success_total{engine=\"0\",finished_reason=\"stop\",model_name=\"m\"} 5\n",
        "vllm:request_success_total{engine=\"0\",finished_reason=\"length\",model_name=\"m\"} 6\n",
        "vllm:request_success_total{engine=\"1\",finished_reason=\"abort\",model_name=\"m\"} 7\n",
        "vllm:request_success_total{engine=\"1\",finished_reason=\"error\",model_name=\"m\"} 8\n",
    ))
    .unwrap();
    close_some(s.concept(e, Concept::Running), 7.0);
    close_some(s.concept(e, Concept::GenerationTokens), 350.0);
    close_some(s.concept(e, Concept::KvUsage), 0.3);
    close_some(s.concept(e, Concept::RequestSuccess), 11.0);
    close_some(s.concept(e, Concept::RequestAborted), 7.0);
}

#[test]
fn nan_values_are_not_numbers() {
    let s = Scrape::parse("sglang:gen_throughput NaN\n").unwrap();
    let r = s
        .reading(Engine::Sglang, Concept::GenThroughputGauge)
        .unwrap();
    assert_eq!(r.value, None);
}

// ------------------------------------------------------------------ llama.cpp

#[test]
fn llamacpp_b10380() {
    let e = Engine::LlamaCpp;
    let s = scrape("llamacpp-b10380-metrics.prom");
    assert_eq!(detect_engine_from_metrics(&s), Some(Engine::LlamaCpp));
    close_some(s.concept(e, Concept::PromptTokensComputed), 25.0);
    close_some(s.concept(e, Concept::PrefillSeconds), 3.68);
    close_some(s.concept(e, Concept::GenerationTokens), 200.0);
    close_some(s.concept(e, Concept::DecodeSeconds), 39.8);
    close_some(s.concept(e, Concept::DecodeCalls), 202.0);
    close_some(s.concept(e, Concept::Running), 0.0);
    // No requests_deferred line in this capture; no KV metric; no cached counter.
    assert_eq!(s.reading(e, Concept::Waiting), None);
    assert_eq!(s.reading(e, Concept::KvUsage), None);
    assert_eq!(s.reading(e, Concept::PromptTokens), None);
    // The per-scrape-window gauges are derived from the counters (6.79348 = 25/3.68,
    // 5.02513 = 200/39.8, printed to 6 significant digits) and are not catalogued.
    let g_prompt = s.sum("llamacpp:prompt_tokens_seconds").unwrap();
    let g_pred = s.sum("llamacpp:predicted_tokens_seconds").unwrap();
    close(g_prompt, 6.793_48);
    close(g_pred, 5.025_13);
    assert!((g_prompt - 25.0 / 3.68).abs() < 5e-6);
    assert!((g_pred - 200.0 / 39.8).abs() < 5e-6);
    assert_eq!(s.reading(e, Concept::GenThroughputGauge), None);
    assert_eq!(s.reading(e, Concept::PromptThroughputGauge), None);
    // The same numbers from the counters.
    let w = servebench_metrics::window_stats_since_start(&s, e);
    close_some(w.decode_rate, 200.0 / 39.8);
    close_some(w.prefill_rate, 25.0 / 3.68);
}

#[test]
fn llamacpp_2025_06_head() {
    let e = Engine::LlamaCpp;
    let s = scrape("llamacpp-2025-06-metrics-head-pr13196.prom");
    assert_eq!(detect_engine_from_metrics(&s), Some(Engine::LlamaCpp));
    close_some(s.concept(e, Concept::PromptTokensComputed), 143.0);
    close_some(s.concept(e, Concept::PrefillSeconds), 8.168);
    close_some(s.concept(e, Concept::GenerationTokens), 673.0);
    close_some(s.concept(e, Concept::DecodeSeconds), 29.567);
    assert!(!s.has_series("llamacpp:kv_cache_usage_ratio"));
    assert!(!s.has_series("llamacpp:kv_cache_tokens"));
}

#[test]
fn llama_server_local_captures() {
    let e = Engine::LlamaCpp;
    let load = scrape("local-captures/llama-server-metrics-under-load.txt");
    assert_eq!(detect_engine_from_metrics(&load), Some(Engine::LlamaCpp));
    close_some(load.concept(e, Concept::Running), 8.0);
    close_some(load.concept(e, Concept::Waiting), 0.0);
    close_some(load.concept(e, Concept::PromptTokensComputed), 1000.0);
    close_some(load.concept(e, Concept::PromptTokensCached), 1600.0);
    let p = load.reading(e, Concept::PromptTokens).unwrap();
    assert_eq!(
        p.source,
        "llamacpp:prompt_tokens_total + llamacpp:prompt_tokens_cached_total"
    );
    close_some(p.value, 2600.0);
    close_some(load.concept(e, Concept::GenerationTokens), 14_352.0);
    close_some(load.concept(e, Concept::DecodeSeconds), 37.9072);
    close_some(load.concept(e, Concept::SpecDraftTokens), 0.0);
    close_some(load.sum("llamacpp:n_busy_slots_per_decode"), 4.219);
    let idle = scrape("local-captures/llama-server-metrics.txt");
    close_some(idle.concept(e, Concept::Running), 0.0);
    close_some(idle.concept(e, Concept::GenerationTokens), 16.0);
}

// ------------------------------------------------------------------ TGI and the IBM fork

#[test]
fn ibm_vllm_fork_with_tgi_names_is_detected_as_vllm() {
    let s = scrape("vllm-ibm-tgis-compat-metrics-excerpt.prom");
    assert_eq!(detect_engine_from_metrics(&s), Some(Engine::Vllm));
    close_some(s.concept(Engine::Vllm, Concept::Running), 0.0);
    close_some(s.concept(Engine::Vllm, Concept::Waiting), 0.0);
    // Without the Python-dict label the same families read as TGI (≥ 2 tgi_* families)...
    let rust_like = fixture("vllm-ibm-tgis-compat-metrics-excerpt.prom")
        .replace("{'method': 'prefill'}", "prefill");
    let t = Scrape::parse(&rust_like).unwrap();
    assert_eq!(detect_engine_from_metrics(&t), Some(Engine::Tgi));
    // ...but a Python runtime family still betrays vLLM.
    let with_python =
        format!("{rust_like}python_gc_objects_collected_total{{generation=\"0\"}} 1\n");
    let p = Scrape::parse(&with_python).unwrap();
    assert_eq!(detect_engine_from_metrics(&p), Some(Engine::Vllm));
    // A single tgi_ family decides nothing.
    let one = Scrape::parse("tgi_queue_size 0\n").unwrap();
    assert_eq!(detect_engine_from_metrics(&one), None);
}

#[test]
fn tgi_counters_without_total_suffix() {
    let s = Scrape::parse(concat!(
        "# TYPE tgi_request_success counter\n",
        "tgi_request_success 42\n",
        "# TYPE tgi_queue_size gauge\n",
        "tgi_queue_size 3\n",
        "# TYPE tgi_batch_current_size gauge\n",
        "tgi_batch_current_size 5\n",
        "# TYPE tgi_request_generated_tokens histogram\n",
        "tgi_request_generated_tokens_bucket{le=\"+Inf\"} 42\n",
        "tgi_request_generated_tokens_sum 4200\n",
        "tgi_request_generated_tokens_count 42\n",
        "# TYPE tgi_request_input_length histogram\n",
        "tgi_request_input_length_bucket{le=\"+Inf\"} 42\n",
        "tgi_request_input_length_sum 840\n",
        "tgi_request_input_length_count 42\n",
    ))
    .unwrap();
    assert_eq!(detect_engine_from_metrics(&s), Some(Engine::Tgi));
    let e = Engine::Tgi;
    close_some(s.concept(e, Concept::RequestSuccess), 42.0);
    close_some(s.concept(e, Concept::Waiting), 3.0);
    close_some(s.concept(e, Concept::Running), 5.0);
    close_some(s.concept(e, Concept::GenerationTokens), 4200.0);
    close_some(s.concept(e, Concept::PromptTokens), 840.0);
}

#[test]
fn tgi_catalog_names_come_from_the_tgi_metric_catalog() {
    let tsv = fixture("tgi-metric-catalog.tsv");
    let listed: Vec<(&str, &str)> = tsv
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let mut c = l.split('\t');
            Some((c.next()?, c.next()?))
        })
        .collect();
    let mut n = 0;
    for &c in Concept::ALL {
        for cand in Catalog::candidates(Engine::Tgi, c) {
            let ok = listed.iter().any(|&(name, ty)| {
                (cand.metric == name && (ty == "counter" || ty == "gauge"))
                    || (ty == "histogram" && cand.metric == format!("{name}_sum"))
            });
            assert!(ok, "{} not in tgi-metric-catalog.tsv", cand.metric);
            assert!(!cand.metric.ends_with("_total"), "{}", cand.metric);
            n += 1;
        }
    }
    assert_eq!(n, 5);
}

#[test]
fn engines_without_metrics_have_empty_tables() {
    for &c in Concept::ALL {
        assert!(Catalog::candidates(Engine::Ollama, c).is_empty());
        assert!(Catalog::candidates(Engine::OpenAiProxy, c).is_empty());
    }
    let nothing = Scrape::parse("process_open_fds 3\n").unwrap();
    assert_eq!(detect_engine_from_metrics(&nothing), None);
    assert_eq!(Engine::OpenAiProxy.as_str(), "openai_proxy");
    assert_eq!(Engine::LlamaCpp.to_string(), "llamacpp");
}

#[test]
fn every_catalog_name_is_exact_and_never_created_or_per_pos() {
    for e in [Engine::Vllm, Engine::Sglang, Engine::LlamaCpp, Engine::Tgi] {
        for &c in Concept::ALL {
            for cand in Catalog::candidates(e, c) {
                for m in cand.metrics() {
                    assert!(!m.ends_with("_created"), "{m}");
                    assert!(!m.contains("per_pos"), "{m}");
                }
            }
        }
    }
}

/// Older SGLang builds name the scheduler gauges `num_requests_running` / `num_requests_waiting`
/// (with the `sglang:` prefix, or `sglang_` re-exported): they are the running / waiting
/// concepts when the current names are absent (issue 8).
#[test]
fn sglang_old_scheduler_gauge_names() {
    for p in ["sglang:", "sglang_"] {
        let text = format!(
            "# TYPE {p}num_requests_running gauge\n\
             {p}num_requests_running{{model_name=\"m\"}} 3\n\
             # TYPE {p}num_requests_waiting gauge\n\
             {p}num_requests_waiting{{model_name=\"m\"}} 2\n"
        );
        let s = Scrape::parse(&text).unwrap();
        let e = Engine::Sglang;
        close_some(s.concept(e, Concept::Running), 3.0);
        close_some(s.concept(e, Concept::Waiting), 2.0);
        assert_eq!(
            s.reading(e, Concept::Running).unwrap().source,
            format!("{p}num_requests_running")
        );
    }
}

/// SGLang's prefix-cache hit rate over a window is Δcached_tokens / Δprompt_tokens (its
/// `cache_hit_rate` gauge reads 0 once decoding runs).
#[test]
fn sglang_hit_rate_from_cached_and_prompt_counters() {
    let page = |prompt: u64, cached: u64| {
        Scrape::parse(&format!(
            "# TYPE sglang:prompt_tokens_total counter\n\
             sglang:prompt_tokens_total{{model_name=\"m\"}} {prompt}\n\
             # TYPE sglang:cached_tokens_total counter\n\
             sglang:cached_tokens_total{{model_name=\"m\"}} {cached}\n\
             # TYPE sglang:cache_hit_rate gauge\n\
             sglang:cache_hit_rate{{model_name=\"m\"}} 0\n"
        ))
        .unwrap()
    };
    let w = servebench_metrics::window_stats(&page(1000, 100), &page(2420, 1380), Engine::Sglang);
    close_some(w.prefix_cache_hit_rate, 1280.0 / 1420.0);
    // no prompt tokens in the window: unknown, not 0
    let w = servebench_metrics::window_stats(&page(1000, 100), &page(1000, 100), Engine::Sglang);
    assert_eq!(w.prefix_cache_hit_rate, None);
}
