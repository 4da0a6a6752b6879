//! Personalities: info endpoints, `/metrics` shapes (parsed and mapped with the benchmark's own
//! `servebench-metrics`), counters consistent with the ground truth, llama.cpp chunk shapes.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::*;
use serde_json::{json, Value};
use servebench_metrics::{
    counter_delta, detect_engine_from_metrics, parse_llamacpp_props, parse_llamacpp_slots,
    parse_sglang_model_info, parse_sglang_server_info, parse_v1_models, parse_vllm_version,
    resolve_vllm_kv_budget, vllm_kv_from_cache_config, window_stats, Catalog, Concept, Engine,
    Histogram, HistogramConcept, Scrape,
};
use servebench_sim::{Personality, RequestTruth, Sim, SimConfig};

/// Timing-sensitive parts run one at a time (2 cores).
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn cfg(p: Personality) -> SimConfig {
    SimConfig {
        personality: p,
        model: "tiny-llama".into(),
        decode_base_ms: 2.0,
        ..SimConfig::default()
    }
}

fn value(s: &Scrape, e: Engine, c: Concept) -> f64 {
    s.concept(e, c)
        .unwrap_or_else(|| panic!("{e} {c:?} not readable"))
}

fn delta(a: &Scrape, b: &Scrape, e: Engine, c: Concept) -> f64 {
    let d = counter_delta(a, b, e, c);
    assert!(!d.reset, "{c:?} reset");
    d.value.unwrap_or_else(|| panic!("{e} {c:?} delta absent"))
}

/// A mixed load: streamed chat (with usage), streamed completion, non-streamed, and the same
/// long prompt twice (prefix-cache hit). Returns the truth of the finished requests.
async fn load(sim: &Sim) -> Vec<RequestTruth> {
    let addr = sim.addr();
    let long = "shared prefix ".repeat(40);
    let mut tasks = Vec::new();
    for i in 0..4u64 {
        tasks.push(tokio::spawn(async move {
            let body = json!({
                "model": "tiny-llama",
                "messages": [{"role": "user", "content": format!("hello {i}")}],
                "max_tokens": 10 + i,
                "stream": true,
                "ignore_eos": true,
                "stream_options": {"include_usage": true},
            });
            stream(addr, "/v1/chat/completions", &body).await.status
        }));
    }
    tasks.push(tokio::spawn(async move {
        let body = json!({"prompt": token_prompt(10, 33), "max_tokens": 7, "stream": true});
        stream(addr, "/v1/completions", &body).await.status
    }));
    tasks.push(tokio::spawn(async move {
        post(
            addr,
            "/v1/completions",
            &json!({"prompt": "unary", "max_tokens": 5}),
        )
        .await
        .status
    }));
    for t in tasks {
        assert_eq!(t.await.expect("task"), 200);
    }
    for _ in 0..2 {
        let body = json!({"prompt": long, "max_tokens": 3});
        assert_eq!(post(addr, "/v1/completions", &body).await.status, 200);
    }
    let truth = sim.truth();
    assert!(truth.iter().all(|t| t.finish_reason.is_some()));
    truth
}

/// Start `running + waiting` requests of `max_tokens` tokens each (chosen so that one batch
/// round lasts ~0.5 s) and wait until the engine shows them queued. Returns the client tasks
/// (they finish on their own).
async fn blocked_queue(
    sim: &Sim,
    running: u64,
    waiting: u64,
    max_tokens: u64,
) -> Vec<tokio::task::JoinHandle<u16>> {
    let addr = sim.addr();
    let tasks: Vec<_> = (0..running + waiting)
        .map(|i| {
            tokio::spawn(async move {
                let body = json!({"prompt": format!("queued {i}"), "max_tokens": max_tokens, "ignore_eos": true});
                post(addr, "/v1/completions", &body).await.status
            })
        })
        .collect();
    assert!(
        eventually(Duration::from_secs(3), || {
            let st = sim.stats();
            st.running == running && st.waiting == waiting
        })
        .await,
        "engine never showed {running} running / {waiting} waiting: {:?}",
        sim.stats()
    );
    tasks
}

fn families(s: &Scrape) -> BTreeSet<String> {
    s.family_names().map(str::to_string).collect()
}

#[tokio::test]
async fn neutral_personality_is_unchanged() {
    let sim = sim(SimConfig {
        decode_base_ms: 1.0,
        ..SimConfig::default()
    });
    assert_eq!(sim.config().personality, Personality::Neutral);
    assert_eq!(Personality::Neutral.engine_name(), "servebench-sim");
    let addr = sim.addr();
    assert_eq!(get(addr, "/metrics").await.status, 404);
    assert!(sim.metrics_text().is_none());
    for path in ["/get_server_info", "/get_model_info", "/props", "/slots"] {
        assert_eq!(get(addr, path).await.status, 404, "{path}");
    }
    let v = get(addr, "/version").await.json();
    assert_eq!(
        v["version"],
        format!("servebench-sim {}", env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(
        get(addr, "/v1/models").await.json()["data"][0]["owned_by"],
        "servebench-sim"
    );
    let s = stream(
        addr,
        "/v1/chat/completions",
        &chat_body("x", 3, stream_opts(false)),
    )
    .await;
    // role chunk content "" (vLLM), finish on the last token event, choices:[] usage chunk
    let ev = s.json();
    assert_eq!(ev[0].1["choices"][0]["delta"]["content"], "");
    assert_eq!(ev[3].1["choices"][0]["finish_reason"], "length");
    assert_eq!(ev[4].1["choices"], json!([]));
    let st = sim.stats();
    // the default KV budget never binds: max_batch x ceil(max_model_len / 16) blocks
    assert_eq!(st.kv_blocks_total, 256 * 32768 / 16);
    assert_eq!(st.preemptions_total, 0);
    assert_eq!(st.spec_drafts_total, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vllm_personality() {
    let _serial = SERIAL.lock().await;
    let sim = sim(SimConfig {
        kv_blocks: Some(4096),
        max_model_len: 4096,
        ..cfg(Personality::Vllm)
    });
    let addr = sim.addr();

    // info endpoints
    let v = get(addr, "/version").await;
    assert_eq!(
        parse_vllm_version(std::str::from_utf8(&v.body).expect("utf8")),
        Ok("0.32.0+sim".to_string())
    );
    let m =
        parse_v1_models(std::str::from_utf8(&get(addr, "/v1/models").await.body).expect("utf8"))
            .expect("models");
    assert_eq!(m.model_ids(), vec!["tiny-llama".to_string()]);
    assert_eq!(m.models[0].max_model_len, Some(4096));
    assert_eq!(m.models[0].owned_by.as_deref(), Some("vllm"));
    let t = post(addr, "/tokenize", &json!({"prompt": "a b c"}))
        .await
        .json();
    assert_eq!(t["count"], 3);
    assert_eq!(t["max_model_len"], 4096);

    // metrics shape
    let raw = String::from_utf8(get(addr, "/metrics").await.body).expect("utf8");
    assert!(raw.contains("# TYPE vllm:generation_tokens_total counter\n"));
    assert!(raw.contains("vllm:num_requests_running{engine=\"0\",model_name=\"tiny-llama\"} 0.0\n"));
    assert!(raw.contains("# TYPE vllm:generation_tokens_created gauge\n"));
    let s0 = scrape(addr).await;
    assert_eq!(detect_engine_from_metrics(&s0), Some(Engine::Vllm));
    // every family is a real vLLM 0.32 family
    let real = fixture_names("local-captures/vllm-metric-names.txt");
    let ours = families(&s0);
    let unknown: Vec<_> = ours.difference(&real).collect();
    assert!(unknown.is_empty(), "not in vLLM 0.32: {unknown:?}");
    for f in [
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:prefix_cache_queries_total",
        "vllm:prefix_cache_hits_total",
        "vllm:num_preemptions_total",
        "vllm:request_success_total",
        "vllm:request_prefill_time_seconds",
        "vllm:time_to_first_token_seconds",
        "vllm:cache_config_info",
    ] {
        assert!(ours.contains(f), "missing {f}");
    }
    // spec-decode families only when speculative decoding is configured
    assert!(!ours.iter().any(|f| f.contains("spec_decode")));
    // every series but the info gauge carries engine="0", model_name="tiny-llama"
    for x in s0.samples() {
        assert_eq!(x.label("engine"), Some("0"), "{}", x.name);
        if x.name != "vllm:cache_config_info" {
            assert_eq!(x.label("model_name"), Some("tiny-llama"), "{}", x.name);
        }
    }
    // `_created` series are set apart (process epoch seconds), never read as counters
    let created: Vec<_> = s0.created_samples().collect();
    assert!(created.len() > 10);
    assert!(created.iter().all(|c| c.value > 1.6e9));
    // KV budget from cache_config_info = blocks x block size
    assert_eq!(
        vllm_kv_from_cache_config(&s0),
        Some((4096 * 16, "4096 blocks x 16".to_string()))
    );
    let kv = resolve_vllm_kv_budget(&s0, None, None, Some(4096)).expect("kv budget");
    assert_eq!(kv.tokens, 65_536);
    assert_eq!(value(&s0, Engine::Vllm, Concept::KvUsage), 0.0);

    // counters move by exactly what the engine did
    let truth = load(&sim).await;
    let s1 = scrape(addr).await;
    let gen: u64 = truth.iter().map(RequestTruth::tokens).sum();
    let prompt: u64 = truth.iter().map(|t| t.prompt_tokens).sum();
    let cached: u64 = truth.iter().map(|t| t.cached_tokens).sum();
    assert!(
        cached > 0,
        "the repeated prompt should hit the prefix cache"
    );
    let e = Engine::Vllm;
    assert_eq!(delta(&s0, &s1, e, Concept::GenerationTokens), gen as f64);
    assert_eq!(delta(&s0, &s1, e, Concept::PromptTokens), prompt as f64);
    assert_eq!(
        delta(&s0, &s1, e, Concept::PrefixCacheQueries),
        prompt as f64
    );
    assert_eq!(delta(&s0, &s1, e, Concept::PrefixCacheHits), cached as f64);
    assert_eq!(
        delta(&s0, &s1, e, Concept::PromptTokensCached),
        cached as f64
    );
    assert_eq!(
        delta(&s0, &s1, e, Concept::PromptTokensComputed),
        (prompt - cached) as f64
    );
    assert_eq!(
        delta(&s0, &s1, e, Concept::RequestSuccess),
        truth.len() as f64
    );
    assert_eq!(delta(&s0, &s1, e, Concept::RequestAborted), 0.0);
    assert_eq!(delta(&s0, &s1, e, Concept::Preemptions), 0.0);
    assert_eq!(
        delta(&s0, &s1, e, Concept::PrefillTimeCount),
        truth.len() as f64
    );
    // prefill time (engine clock) vs truth: admitted → first token handed to the connection
    let truth_prefill: f64 = truth
        .iter()
        .map(|t| (t.emissions[0].0 - t.admitted_at.expect("admitted")).as_secs_f64())
        .sum();
    let prefill = delta(&s0, &s1, e, Concept::PrefillTimeSum);
    assert!(
        prefill <= truth_prefill + 1e-6 && truth_prefill - prefill < 0.02 * truth.len() as f64,
        "prefill sum {prefill} vs truth {truth_prefill}"
    );
    let w = window_stats(&s0, &s1, e);
    assert_eq!(w.generation_tokens, Some(gen as f64));
    assert!(w.spec_accept_rate.is_none());
    // histograms through the catalog names
    let ttft_name = Catalog::histograms(e, HistogramConcept::Ttft)[0];
    let ttft = Histogram::from_scrape(&s1, ttft_name).expect("ttft histogram");
    assert_eq!(ttft.total(), Some(truth.len() as f64));
    for hc in [
        HistogramConcept::Itl,
        HistogramConcept::Tpot,
        HistogramConcept::E2e,
        HistogramConcept::Queue,
        HistogramConcept::Prefill,
    ] {
        let name = Catalog::histograms(e, hc)[0];
        assert!(Histogram::from_scrape(&s1, name).is_some(), "{name}");
    }
    let e2e = Histogram::from_scrape(&s1, "vllm:e2e_request_latency_seconds").expect("e2e");
    assert_eq!(e2e.total(), Some(truth.len() as f64));
    assert_eq!(value(&s1, e, Concept::Running), 0.0);
    assert_eq!(value(&s1, e, Concept::Waiting), 0.0);

    // the page agrees with Sim::metrics_text and Sim::stats
    let text = sim.metrics_text().expect("vllm has metrics");
    let s2 = Scrape::parse(&text).expect("parse");
    assert_eq!(
        value(&s2, e, Concept::GenerationTokens),
        sim.stats().generation_tokens_total as f64
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vllm_blocked_queue_gauges() {
    let _serial = SERIAL.lock().await;
    let sim = sim(SimConfig {
        max_batch: 2,
        decode_base_ms: 5.0,
        ..cfg(Personality::Vllm)
    });
    let tasks = blocked_queue(&sim, 2, 4, 100).await;
    let s = scrape(sim.addr()).await;
    assert_eq!(value(&s, Engine::Vllm, Concept::Running), 2.0);
    assert_eq!(value(&s, Engine::Vllm, Concept::Waiting), 4.0);
    let capacity = s
        .series("vllm:num_requests_waiting_by_reason")
        .find(|x| x.label("reason") == Some("capacity"))
        .expect("by reason");
    assert_eq!(capacity.value, 4.0);
    let kv = value(&s, Engine::Vllm, Concept::KvUsage);
    assert!(kv > 0.0 && kv < 0.01, "kv usage {kv}");
    for t in tasks {
        assert_eq!(t.await.expect("task"), 200);
    }
    let s = scrape(sim.addr()).await;
    assert_eq!(value(&s, Engine::Vllm, Concept::Waiting), 0.0);
    assert_eq!(value(&s, Engine::Vllm, Concept::RequestSuccess), 6.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sglang_personality() {
    let _serial = SERIAL.lock().await;
    let sim = sim(SimConfig {
        kv_blocks: Some(1000),
        max_model_len: 8192,
        max_batch: 3,
        spec_tokens: 2,
        spec_accept_rate: 0.5,
        ..cfg(Personality::Sglang)
    });
    let addr = sim.addr();
    let body = |path: &'static str| async move {
        let r = get(addr, path).await;
        assert_eq!(r.status, 200, "{path}");
        String::from_utf8(r.body).expect("utf8")
    };
    let info = parse_sglang_server_info(&body("/get_server_info").await).expect("server info");
    assert!(info.is_sglang());
    assert_eq!(info.max_total_num_tokens, Some(16_000));
    assert_eq!(info.max_running_requests, Some(3));
    assert_eq!(info.context_length, Some(8192));
    assert_eq!(info.version.as_deref(), Some("0.5.1+sim"));
    let mi = parse_sglang_model_info(&body("/get_model_info").await).expect("model info");
    assert_eq!(mi.prompt_limit(), Some(8191));
    assert_eq!(mi.served_model_name.as_deref(), Some("tiny-llama"));
    let m = parse_v1_models(&body("/v1/models").await).expect("models");
    assert_eq!(m.models[0].owned_by.as_deref(), Some("sglang"));
    assert_eq!(m.models[0].max_model_len, Some(8192));
    assert_eq!(get(addr, "/version").await.status, 404);

    let s0 = scrape(addr).await;
    assert_eq!(detect_engine_from_metrics(&s0), Some(Engine::Sglang));
    let mut real = fixture_names("sglang-2025-10-metric-catalog.tsv");
    // the TSV lists counters without `_total`
    for n in real.clone() {
        real.insert(format!("{n}_total"));
    }
    real.insert("sglang:realtime_tokens_total".into()); // sidecar excerpt (sglang_ prefix)
    real.insert("sglang:spec_accept_rate".into()); // read by servebench's catalog
    real.insert("sglang:per_stage_req_latency_seconds".into()); // idem
    let unknown: Vec<_> = families(&s0)
        .into_iter()
        .filter(|f| !real.contains(f))
        .collect();
    assert!(unknown.is_empty(), "not SGLang names: {unknown:?}");
    for x in s0.samples() {
        assert_eq!(x.label("engine_type"), Some("unified"), "{}", x.name);
        assert_eq!(x.label("model_name"), Some("tiny-llama"), "{}", x.name);
        assert_eq!(x.label("tp_rank"), Some("0"));
        assert_eq!(x.label("pp_rank"), Some("0"));
    }
    assert!(s0.created_samples().count() > 0);

    let e = Engine::Sglang;
    let tasks = blocked_queue(&sim, 3, 2, 500).await;
    let sq = scrape(addr).await;
    assert_eq!(value(&sq, e, Concept::Running), 3.0);
    assert_eq!(value(&sq, e, Concept::Waiting), 2.0);
    let usage = value(&sq, e, Concept::KvUsage);
    assert!(usage > 0.0 && usage < 0.12, "token usage {usage}");
    for t in tasks {
        assert_eq!(t.await.expect("task"), 200);
    }
    let truth = load(&sim).await;
    let s1 = scrape(addr).await;
    let gen: u64 = truth.iter().map(RequestTruth::tokens).sum();
    let prompt: u64 = truth.iter().map(|t| t.prompt_tokens).sum();
    let cached: u64 = truth.iter().map(|t| t.cached_tokens).sum();
    assert_eq!(delta(&s0, &s1, e, Concept::GenerationTokens), gen as f64);
    assert_eq!(delta(&s0, &s1, e, Concept::PromptTokens), prompt as f64);
    assert_eq!(
        delta(&s0, &s1, e, Concept::PromptTokensCached),
        cached as f64
    );
    assert_eq!(
        delta(&s0, &s1, e, Concept::PromptTokensComputed),
        (prompt - cached) as f64
    );
    assert_eq!(
        delta(&s0, &s1, e, Concept::RequestSuccess),
        truth.len() as f64
    );
    assert_eq!(
        delta(&s0, &s1, e, Concept::PrefillTimeCount),
        truth.len() as f64
    );
    assert_eq!(delta(&s0, &s1, e, Concept::Preemptions), 0.0);
    // speculative gauges = the realised counts
    let spec = sim.spec_truth();
    assert!(spec.drafts > 0);
    let rate = value(&s1, e, Concept::SpecAcceptRateGauge);
    assert!((rate - spec.acceptance_rate().expect("rate")).abs() < 1e-9);
    let len = value(&s1, e, Concept::SpecAcceptLengthGauge);
    assert!((len - spec.mean_acceptance_length().expect("len")).abs() < 1e-9);
    assert!(value(&s1, e, Concept::GenThroughputGauge) >= 0.0);
    let hit = value(&s1, e, Concept::CacheHitRateGauge);
    assert!(hit > 0.0 && hit < 1.0);
    let ttft = Catalog::histograms(e, HistogramConcept::Ttft)[0];
    assert_eq!(
        Histogram::from_scrape(&s1, ttft).and_then(|h| h.total()),
        Some(truth.len() as f64)
    );
}

#[tokio::test]
async fn sglang_underscore_prefix() {
    let sim = sim(SimConfig {
        sglang_underscore_prefix: true,
        ..cfg(Personality::Sglang)
    });
    let s0 = scrape(sim.addr()).await;
    assert!(families(&s0).iter().all(|f| f.starts_with("sglang_")));
    assert_eq!(detect_engine_from_metrics(&s0), Some(Engine::Sglang));
    let body = json!({"prompt": "x", "max_tokens": 4});
    assert_eq!(post(sim.addr(), "/v1/completions", &body).await.status, 200);
    let s1 = scrape(sim.addr()).await;
    assert_eq!(
        delta(&s0, &s1, Engine::Sglang, Concept::GenerationTokens),
        4.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llamacpp_personality() {
    let _serial = SERIAL.lock().await;
    let sim = sim(SimConfig {
        max_batch: 2,
        max_model_len: 2048,
        decode_base_ms: 5.0,
        ..cfg(Personality::Llamacpp)
    });
    let addr = sim.addr();
    let text = |r: Resp| String::from_utf8(r.body).expect("utf8");

    // info endpoints
    let props = parse_llamacpp_props(&text(get(addr, "/props").await)).expect("props");
    assert_eq!(props.per_slot_ctx, Some(2048));
    assert_eq!(props.total_slots, Some(2));
    assert_eq!(props.total_ctx(), Some(4096));
    assert_eq!(props.build_info.as_deref(), Some("b1-sim"));
    assert_eq!(sim.stats().kv_blocks_total * 16, 4096); // KV = slots x per-slot ctx
    let h = get(addr, "/health").await;
    assert_eq!((h.status, h.json()), (200, json!({"status": "ok"})));
    let v = get(addr, "/version").await;
    assert_eq!(v.status, 404);
    assert_eq!(v.json()["error"]["type"], "not_found_error");
    let models = get(addr, "/v1/models").await.json();
    assert_eq!(models["models"][0]["name"], "tiny-llama");
    let m = parse_v1_models(&models.to_string()).expect("models");
    assert_eq!(m.models[0].owned_by.as_deref(), Some("llamacpp"));
    assert!(m.models[0].n_ctx_train.is_some_and(|n| n >= 2048));
    let tk = post(addr, "/tokenize", &json!({"content": "a b c"}))
        .await
        .json();
    assert_eq!(tk["tokens"].as_array().map(Vec::len), Some(3));

    // metrics: exactly the 15 llama-server families, no labels, integer counters
    let raw = text(get(addr, "/metrics").await);
    let s0 = Scrape::parse(&raw).expect("parse");
    assert_eq!(
        families(&s0),
        fixture_names("local-captures/llama-server-metric-names.txt")
    );
    assert_eq!(detect_engine_from_metrics(&s0), Some(Engine::LlamaCpp));
    assert!(s0.samples().all(|x| x.labels.is_empty()));
    assert_eq!(s0.created_samples().count(), 0);
    assert!(raw.contains("\nllamacpp:tokens_predicted_total 0\n"));
    assert!(raw.contains("\nllamacpp:requests_processing 0\n"));

    // blocked queue: 2 slots busy, 3 deferred; /slots shows the work
    let e = Engine::LlamaCpp;
    let tasks = blocked_queue(&sim, 2, 3, 100).await;
    let sq = scrape(addr).await;
    assert_eq!(value(&sq, e, Concept::Running), 2.0);
    assert_eq!(value(&sq, e, Concept::Waiting), 3.0);
    assert!(eventually(Duration::from_secs(2), || sim.stats().steps_total > 3).await);
    let slots = parse_llamacpp_slots(&text(get(addr, "/slots").await)).expect("slots");
    assert_eq!(slots.len(), 2);
    assert!(slots
        .iter()
        .all(|s| s.is_processing && s.n_ctx == Some(2048)));
    assert!(slots.iter().any(|s| s.n_decoded.is_some_and(|n| n > 0)));
    for t in tasks {
        assert_eq!(t.await.expect("task"), 200);
    }

    let s0 = scrape(addr).await;
    let steps0 = sim.stats().steps_total;
    let truth0 = sim.truth().len();
    let truth: Vec<RequestTruth> = load(&sim).await.into_iter().skip(truth0).collect();
    let s1 = scrape(addr).await;
    let gen: u64 = truth.iter().map(RequestTruth::tokens).sum();
    let prompt: u64 = truth.iter().map(|t| t.prompt_tokens).sum();
    let cached: u64 = truth.iter().map(|t| t.cached_tokens).sum();
    assert_eq!(delta(&s0, &s1, e, Concept::GenerationTokens), gen as f64);
    assert_eq!(delta(&s0, &s1, e, Concept::PromptTokens), prompt as f64);
    assert_eq!(
        delta(&s0, &s1, e, Concept::PromptTokensCached),
        cached as f64
    );
    assert_eq!(
        delta(&s0, &s1, e, Concept::PromptTokensComputed),
        (prompt - cached) as f64
    );
    assert_eq!(
        delta(&s0, &s1, e, Concept::DecodeCalls),
        (sim.stats().steps_total - steps0) as f64
    );
    let w = window_stats(&s0, &s1, e);
    assert!(w.decode_seconds.is_some_and(|d| d > 0.0));
    assert!(w.prefill_seconds.is_some_and(|d| d > 0.0));
    assert!(w.decode_rate.is_some_and(|r| r > 0.0));
    // the two throughput gauges cover only the window since the previous scrape
    let again = scrape(addr).await;
    assert_eq!(again.sum("llamacpp:predicted_tokens_seconds"), Some(0.0));
    assert_eq!(again.sum("llamacpp:prompt_tokens_seconds"), Some(0.0));
}

#[tokio::test]
async fn llamacpp_stream_shapes() {
    let sim = sim(SimConfig {
        decode_base_ms: 1.0,
        ..cfg(Personality::Llamacpp)
    });
    let addr = sim.addr();
    // chat with usage: role chunk (content null) → tokens → finish chunk (empty delta) →
    // choices:[] chunk with usage + timings → [DONE]
    let s = stream(
        addr,
        "/v1/chat/completions",
        &chat_body("hi there", 4, stream_opts(true)),
    )
    .await;
    assert_eq!(s.status, 200);
    let ev = s.json();
    assert_eq!(ev.len(), 1 + 4 + 1 + 1);
    assert_eq!(
        ev[0].1["choices"][0]["delta"],
        json!({"role": "assistant", "content": null})
    );
    assert!(ev[1..5].iter().all(|(_, v)| v.get("usage").is_none()
        && v["choices"][0]["finish_reason"].is_null()
        && v["system_fingerprint"] == "b1-sim"));
    assert_eq!(ev[5].1["choices"][0]["delta"], json!({}));
    assert_eq!(ev[5].1["choices"][0]["finish_reason"], "length");
    assert!(ev[5].1.get("timings").is_none());
    let last: &Value = &ev[6].1;
    assert_eq!(last["choices"], json!([]));
    assert_eq!(last["usage"]["completion_tokens"], 4);
    assert_eq!(last["timings"]["predicted_n"], 4);
    assert_eq!(
        last["timings"]["prompt_n"].as_u64().expect("prompt_n")
            + last["timings"]["cache_n"].as_u64().expect("cache_n"),
        last["usage"]["prompt_tokens"].as_u64().expect("prompt")
    );
    assert_eq!(s.events.last().map(|e| e.1.as_str()), Some("[DONE]"));
    assert_eq!(s.token_events().len(), 4);

    // chat without usage: timings ride on the finish chunk
    let s = stream(
        addr,
        "/v1/chat/completions",
        &chat_body("hi", 2, json!({"stream": true, "ignore_eos": true})),
    )
    .await;
    let ev = s.json();
    assert_eq!(ev.len(), 1 + 2 + 1);
    assert_eq!(ev[3].1["choices"][0]["finish_reason"], "length");
    assert!(ev[3].1["timings"].is_object());

    // completions with usage: usage + timings on the last choice chunk (text ""), no
    // choices:[] chunk
    let body = json!({
        "prompt": "abc", "max_tokens": 3, "stream": true,
        "stream_options": {"include_usage": true, "continuous_usage_stats": true},
    });
    let s = stream(addr, "/v1/completions", &body).await;
    let ev = s.json();
    assert_eq!(ev.len(), 3 + 1);
    assert!(ev[..3].iter().all(|(_, v)| v.get("usage").is_none()));
    let last = &ev[3].1;
    assert_eq!(last["choices"][0]["text"], "");
    assert_eq!(last["choices"][0]["finish_reason"], "length");
    assert_eq!(last["usage"]["completion_tokens"], 3);
    assert_eq!(last["usage"]["prompt_tokens"], 1);
    assert_eq!(last["timings"]["predicted_n"], 3);
    assert_eq!(last["object"], "text_completion");

    // the truth still counts only token frames
    let truth = sim.truth();
    assert_eq!(
        truth.iter().map(RequestTruth::tokens).collect::<Vec<_>>(),
        vec![4, 2, 3]
    );
}
