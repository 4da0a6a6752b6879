//! Engine model: KV-cache blocks (admission, queueing, preemption with recompute) and
//! speculative decoding statistics, checked against the ground truth and the `/metrics` page.

mod common;

use std::time::Duration;

use common::*;
use serde_json::json;
use servebench_metrics::{counter_delta, window_stats, Concept, Engine, Scrape};
use servebench_sim::{Personality, RequestTruth, SimConfig, WORDS};

/// Timing-sensitive tests run one at a time (2 cores).
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn value(s: &Scrape, c: Concept) -> f64 {
    s.concept(Engine::Vllm, c)
        .unwrap_or_else(|| panic!("{c:?} not readable"))
}

fn delta(a: &Scrape, b: &Scrape, c: Concept) -> f64 {
    counter_delta(a, b, Engine::Vllm, c)
        .value
        .unwrap_or_else(|| panic!("{c:?} delta absent"))
}

/// The text a request of `n` generated tokens must have received.
fn expected_text(n: usize) -> String {
    (0..n).map(|i| WORDS[i % WORDS.len()]).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kv_budget_queues_requests() {
    let _serial = SERIAL.lock().await;
    // 32 blocks x 16 tokens; a 200-token prompt needs ceil(201/16) = 13 blocks to be admitted
    // and grows to ceil(250/16) = 16: two fit, the third waits although max_batch is 256.
    let sim = sim(SimConfig {
        personality: Personality::Vllm,
        kv_blocks: Some(32),
        block_size: 16,
        max_model_len: 256,
        decode_base_ms: 8.0,
        ..SimConfig::default()
    });
    let addr = sim.addr();
    let s0 = scrape(addr).await;
    let tasks: Vec<_> = (0..6u32)
        .map(|i| {
            tokio::spawn(async move {
                let body = json!({"prompt": token_prompt(1000 * (i + 1), 200), "max_tokens": 50});
                post(addr, "/v1/completions", &body).await
            })
        })
        .collect();
    assert!(
        eventually(Duration::from_secs(3), || {
            let st = sim.stats();
            st.running == 2 && st.waiting == 4
        })
        .await,
        "expected 2 running / 4 waiting, got {:?}",
        sim.stats()
    );
    let sq = scrape(addr).await;
    assert_eq!(value(&sq, Concept::Running), 2.0);
    assert_eq!(value(&sq, Concept::Waiting), 4.0);
    let usage = value(&sq, Concept::KvUsage);
    assert!(
        (26.0 / 32.0..=1.0).contains(&usage),
        "KV usage {usage} with two 13-16 block requests of 32 blocks"
    );
    for t in tasks {
        let r = t.await.expect("task");
        assert_eq!(r.status, 200);
        assert_eq!(r.json()["usage"]["completion_tokens"], 50);
    }
    let s1 = scrape(addr).await;
    assert_eq!(delta(&s0, &s1, Concept::Preemptions), 0.0);
    assert_eq!(delta(&s0, &s1, Concept::GenerationTokens), 300.0);
    assert_eq!(value(&s1, Concept::KvUsage), 0.0);
    let st = sim.stats();
    assert_eq!((st.kv_blocks_used, st.kv_blocks_total), (0, 32));
    // FIFO in pairs: admissions 3 and 4 only after the first pair finished (unary requests:
    // finished_at is the engine's retire time)
    let truth = sim.truth();
    let mut admitted: Vec<_> = truth.iter().filter_map(|t| t.admitted_at).collect();
    admitted.sort();
    let mut finished: Vec<_> = truth.iter().filter_map(|t| t.finished_at).collect();
    finished.sort();
    assert!(admitted[2] >= finished[0] && admitted[3] >= finished[0]);
    assert!(admitted[4] >= finished[2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preemption_when_kv_runs_out() {
    let _serial = SERIAL.lock().await;
    // 10 blocks x 16 = 160 tokens for four requests that each grow to 16 + 100 tokens.
    let sim = sim(SimConfig {
        personality: Personality::Vllm,
        kv_blocks: Some(10),
        block_size: 16,
        max_model_len: 160,
        decode_base_ms: 1.0,
        ..SimConfig::default()
    });
    let addr = sim.addr();
    let s0 = scrape(addr).await;
    let tasks: Vec<_> = (0..4u32)
        .map(|i| {
            tokio::spawn(async move {
                let body = json!({"prompt": token_prompt(100 * (i + 1), 16), "max_tokens": 100, "stream": true});
                stream(addr, "/v1/completions", &body).await
            })
        })
        .collect();
    let mut max_usage = 0u64;
    for t in tasks {
        let s = t.await.expect("task");
        // every token exactly once, in order, despite the recompute
        let text: String = s
            .json()
            .iter()
            .filter_map(|(_, v)| v["choices"][0]["text"].as_str().map(str::to_string))
            .collect();
        assert_eq!(text, expected_text(100));
        let last = s.json().last().map(|e| e.1.clone()).expect("events");
        assert_eq!(last["choices"][0]["finish_reason"], "length");
        max_usage = max_usage.max(sim.stats().kv_blocks_used);
    }
    assert!(max_usage <= 10);
    let s1 = scrape(addr).await;
    let st = sim.stats();
    let truth = sim.truth();
    let preemptions: u32 = truth.iter().map(|t| t.preemptions).sum();
    assert!(preemptions > 0, "tiny KV must preempt");
    assert_eq!(u64::from(preemptions), st.preemptions_total);
    assert_eq!(
        delta(&s0, &s1, Concept::Preemptions),
        f64::from(preemptions)
    );
    assert!(st.recompute_tokens_total > 0);
    // the oldest running request is never the victim
    let first = truth
        .iter()
        .min_by_key(|t| t.admitted_at.expect("admitted"))
        .expect("truth");
    assert_eq!(first.preemptions, 0);
    // counters: each request counted once despite being prefilled again
    assert_eq!(delta(&s0, &s1, Concept::GenerationTokens), 400.0);
    assert_eq!(delta(&s0, &s1, Concept::PromptTokens), 64.0);
    assert_eq!(delta(&s0, &s1, Concept::PrefixCacheQueries), 64.0);
    assert_eq!(delta(&s0, &s1, Concept::RequestSuccess), 4.0);
    assert_eq!(delta(&s0, &s1, Concept::PrefillTimeCount), 4.0);
    assert!(truth.iter().all(|t| t.tokens() == 100 && !t.cancelled));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spec_decoding_statistics() {
    let _serial = SERIAL.lock().await;
    let (k, p) = (3u32, 0.6f64);
    let sim = sim(SimConfig {
        personality: Personality::Vllm,
        spec_tokens: k,
        spec_accept_rate: p,
        seed: 42,
        decode_base_ms: 1.0,
        ..SimConfig::default()
    });
    let addr = sim.addr();
    let s0 = scrape(addr).await;
    assert!(s0.has_series("vllm:spec_decode_num_drafts_total"));
    let n_req = 16u64;
    let max_tokens = 300u64;
    let tasks: Vec<_> = (0..n_req)
        .map(|i| {
            tokio::spawn(async move {
                let body = json!({"prompt": format!("spec {i}"), "max_tokens": max_tokens, "stream": true});
                stream(addr, "/v1/completions", &body).await
            })
        })
        .collect();
    let mut client_events = 0usize;
    for t in tasks {
        let s = t.await.expect("task");
        let te = s.token_events();
        assert_eq!(te[0].1, 1, "the prefill step emits one token");
        assert!(te.iter().all(|e| (1..=u64::from(k) + 1).contains(&e.1)));
        assert_eq!(te.iter().map(|e| e.1).sum::<u64>(), max_tokens);
        assert!((te.len() as u64) < max_tokens, "tokens != chunks");
        client_events += te.len();
    }
    let s1 = scrape(addr).await;
    let truth = sim.truth();
    let spec = sim.spec_truth();
    assert_eq!((spec.spec_tokens, spec.accept_rate), (k, p));

    // every token event = 1 bonus token + the accepted drafts of that step
    let emitted: u64 = truth.iter().map(RequestTruth::tokens).sum();
    assert_eq!(emitted, n_req * max_tokens);
    let events: u64 = truth.iter().map(|t| t.emissions.len() as u64).sum();
    assert_eq!(events as usize, client_events);
    let accepted: u64 = truth.iter().map(|t| t.accepted_draft_tokens).sum();
    let drafted: u64 = truth.iter().map(|t| t.draft_tokens).sum();
    assert_eq!(events + accepted, emitted);
    assert_eq!(
        (accepted, drafted),
        (spec.accepted_tokens, spec.draft_tokens)
    );
    assert_eq!(spec.accepted_per_position.len(), k as usize);
    assert_eq!(spec.accepted_per_position.iter().sum::<u64>(), accepted);
    // drafting steps: all but the prefill step and a last step with one token left
    assert!(spec.drafts >= events - 2 * n_req && spec.drafts <= events - n_req);

    // statistics: acceptance of position 0 and conditional acceptance of position 1 are P;
    // accepted/draft tokens is (P + P² + P³)/3. ~2,200 drafts: σ ≈ 0.011 for position 0, so a
    // 0.05 tolerance is > 4σ (and the draws are deterministic for a given seed anyway).
    let pos = &spec.accepted_per_position;
    let p0 = pos[0] as f64 / spec.drafts as f64;
    let p1 = pos[1] as f64 / pos[0] as f64;
    assert!(spec.drafts > 1500, "drafts {}", spec.drafts);
    assert!((p0 - p).abs() < 0.05, "position 0 acceptance {p0}");
    assert!(
        (p1 - p).abs() < 0.06,
        "position 1 conditional acceptance {p1}"
    );
    let rate = spec.acceptance_rate().expect("rate");
    let expected = spec.expected_acceptance_rate();
    assert!((expected - (0.6 + 0.36 + 0.216) / 3.0).abs() < 1e-12);
    assert!((rate - expected).abs() < 0.04, "rate {rate} vs {expected}");

    // the benchmark reads the same numbers from /metrics
    let w = window_stats(&s0, &s1, Engine::Vllm);
    assert_eq!(w.spec_drafts, Some(spec.drafts as f64));
    assert_eq!(w.spec_draft_tokens, Some(spec.draft_tokens as f64));
    assert_eq!(w.spec_accepted_tokens, Some(spec.accepted_tokens as f64));
    assert!((w.spec_accept_rate.expect("rate") - rate).abs() < 1e-12);
    let len = w.spec_accept_length.expect("length");
    assert!((len - spec.mean_acceptance_length().expect("len")).abs() < 1e-12);
    assert_eq!(w.generation_tokens, Some(emitted as f64));
    for (i, &n) in pos.iter().enumerate() {
        let series = s1
            .series("vllm:spec_decode_num_accepted_tokens_per_pos_total")
            .find(|x| x.label("position") == Some(&i.to_string()))
            .expect("per-position series");
        assert_eq!(series.value, n as f64);
    }
}

#[tokio::test]
async fn spec_draws_follow_the_seed() {
    let pattern = |seed: u64| async move {
        let sim = sim(SimConfig {
            spec_tokens: 4,
            spec_accept_rate: 0.5,
            seed,
            decode_base_ms: 0.5,
            ..SimConfig::default()
        });
        let body = json!({"prompt": "x", "max_tokens": 80, "stream": true});
        let s = stream(sim.addr(), "/v1/completions", &body).await;
        s.token_events().iter().map(|e| e.1).collect::<Vec<_>>()
    };
    let a = pattern(7).await;
    assert_eq!(a.iter().sum::<u64>(), 80);
    assert_eq!(a, pattern(7).await, "same seed, same acceptance");
    assert_ne!(a, pattern(8).await, "another seed, other draws");
}

#[tokio::test]
async fn fixed_k_mode_still_works_with_metrics() {
    let sim = sim(SimConfig {
        personality: Personality::Vllm,
        tokens_per_chunk: 4,
        decode_base_ms: 1.0,
        ..SimConfig::default()
    });
    let s0 = scrape(sim.addr()).await;
    let body = json!({"prompt": "x", "max_tokens": 10, "stream": true});
    let s = stream(sim.addr(), "/v1/completions", &body).await;
    let sizes: Vec<u64> = s.token_events().iter().map(|e| e.1).collect();
    assert_eq!(sizes, vec![4, 4, 2]);
    let s1 = scrape(sim.addr()).await;
    assert_eq!(delta(&s0, &s1, Concept::GenerationTokens), 10.0);
    assert!(!s1.has_series("vllm:spec_decode_num_drafts_total"));
    assert_eq!(sim.spec_truth().drafts, 0);
}
