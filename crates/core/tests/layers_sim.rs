//! Prefill, warm-prefix and Burst / E2E layers against the simulator's ground truth.
//!
//! Tolerances (stated, and why; truth is the simulator's own clock — its receipt of each request
//! and the emission of each token — never the client's send time):
//! * prefill tok/s within 1 % of the truth `prompt_tokens / (first token emitted − request
//!   received by the simulator)` — documented 0.02–0.07 %: the client's TTFT adds only request
//!   and token transit (~0.1–0.3 ms; 4 ms seen on a loaded machine, 0.52 %) to a prefill of
//!   0.4–0.8 s;
//! * warm-prefix cached tokens equal the simulator's `cached_tokens` exactly;
//! * burst aggregate tok/s within 0.6 % of the truth `Σ tokens of the measured requests / (last
//!   token emitted − first request received)` — documented 0.30 %, the client's span adds the
//!   transit at both ends.

use std::sync::Arc;
use std::time::Duration;

use servebench_client::{Endpoint, Target};
use servebench_core::prompt::CalibrationCache;
use servebench_core::run::{BurstConfig, PrefillConfig, RunConfig, TargetingMode};
use servebench_core::{run, EventSink};
use servebench_results::{CellStatus, Results};
use servebench_sim::{RequestTruth, Sim, SimConfig};
use tokio_util::sync::CancellationToken;

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn sim(cfg: SimConfig) -> Sim {
    Sim::spawn_thread(SimConfig {
        port: 0,
        record_truth: true,
        ..cfg
    })
    .expect("simulator starts")
}

fn config(sim: &Sim) -> RunConfig {
    RunConfig {
        target: Target::from_url(&sim.base_url(), None, Endpoint::Chat).unwrap(),
        model: None,
        concurrency: vec![1],
        contexts: vec![0],
        duration: Duration::from_secs(1),
        max_tokens: 64,
        ignore_eos: true,
        temperature: None,
        decode_warmup: Duration::ZERO,
        cell_timeout: Some(Duration::from_secs(30)),
        stable_window: Duration::from_millis(300),
        cell_pause: Duration::ZERO,
        kv_budget: 0,
        dcp_size: 0,
        show_capacity_limited_values: false,
        seed: Some(7),
        targeting: TargetingMode::Auto,
        calibration_context: 8192,
        calibration_cache: CalibrationCache::at(None),
        prefill: PrefillConfig {
            contexts: vec![],
            ..PrefillConfig::default()
        },
        burst: BurstConfig::default(),
        args_snapshot: serde_json::Value::Null,
        policy: Default::default(),
        open_loop: None,
        export: None,
    }
}

async fn go(cfg: RunConfig) -> Results {
    let r = run(
        cfg,
        Arc::new(EventSink::new(None)),
        CancellationToken::new(),
    )
    .await
    .expect("run starts");
    let schema: serde_json::Value = serde_json::from_str(servebench_results::SCHEMA_JSON).unwrap();
    let v = serde_json::to_value(&r).unwrap();
    let val = jsonschema::validator_for(&schema).unwrap();
    let errs: Vec<String> = val
        .iter_errors(&v)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect();
    assert!(errs.is_empty(), "schema: {errs:?}");
    r
}

/// The truth of the one request with this prompt size (cold = no cached tokens), by prompt tokens.
fn truth_for(truth: &[RequestTruth], prompt_tokens: u64, cached: bool) -> Vec<&RequestTruth> {
    truth
        .iter()
        .filter(|t| {
            t.prompt_tokens == prompt_tokens && (t.cached_tokens > 0) == cached && t.max_tokens == 1
        })
        .collect()
}

/// Standalone prefill tok/s against the simulator's truth (prompt tokens / (first emission −
/// the simulator's receipt)), and the warm-prefix row's cached tokens. The client's TTFT span
/// starts at its send (before the receipt) and ends at the first token's arrival (after the
/// emission), so on every attempt the measured tok/s may not exceed the truth; noise from other
/// processes only lengthens the client's span (seen: 1.06 % under a parallel workspace test
/// run), so the 1 % bound must hold on one of three attempts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_prefill_matches_truth_and_warm_prefix_reports_cache_hits() {
    let _s = SERIAL.lock().await;
    let mut worst = Vec::new();
    for attempt in 1..=3 {
        let err = standalone_prefill_error().await;
        eprintln!(
            "attempt {attempt}: worst prefill tok/s error {:.2} %",
            err * 100.0
        );
        worst.push(err);
        if err < 0.01 {
            return;
        }
    }
    panic!("prefill tok/s vs truth beyond 1 % on every attempt: {worst:?}");
}

/// One `--prefill-only` standalone run at 2k and 4k on a fresh simulator (an empty prefix
/// cache): checks the rows (every check must hold) and returns the larger relative prefill
/// tok/s error of the two contexts.
async fn standalone_prefill_error() -> f64 {
    // 5,000 prompt tokens/s: a 4k prompt takes ~0.8 s of prefill — large against any client lag.
    let s = sim(SimConfig {
        prefill_tps: 5000.0,
        ..SimConfig::default()
    });
    let mut cfg = config(&s);
    cfg.prefill = PrefillConfig {
        contexts: vec![2048, 4096],
        standalone: true,
        only: true,
        duration: Duration::from_millis(1),
        ..PrefillConfig::default()
    };
    let r = go(cfg).await;
    assert!(r.results.is_empty(), "--prefill-only runs no decode cells");
    assert_eq!(r.metadata.prefill_mode.as_str(), "standalone_cold");
    let truth = s.truth();
    let mut worst: f64 = 0.0;
    for ctx in [2048u64, 4096] {
        let row = &r.prefill[&ctx.to_string()];
        assert_eq!(row.status, Some(CellStatus::Ok), "{row:?}");
        assert_eq!(row.method.as_str(), "client");
        // Sized exactly with the decode prefix; each standalone sample's `_R<n>` suffix adds a
        // couple of tokens, and the row reports what the server counted.
        let p = row.prompt_tokens.unwrap();
        assert!(
            (ctx..=ctx + 4).contains(&p),
            "prompt tokens {p} for context {ctx}"
        );
        let cold = truth_for(&truth, p, false);
        assert!(!cold.is_empty());
        // The truth TTFT is measured from the simulator's receive time (≤ the client's send time).
        let t = cold[0];
        let ttft_truth = (t.first_token_at().unwrap() - t.received_at).as_secs_f64();
        let tps_truth = p as f64 / ttft_truth;
        let tps = row.tok_per_sec.unwrap();
        let err = (tps - tps_truth).abs() / tps_truth;
        eprintln!(
            "ctx {ctx}: client {tps:.0} tok/s, truth {tps_truth:.0} tok/s ({:.2}%)",
            err * 100.0
        );
        assert!(
            tps <= tps_truth * (1.0 + 1e-6),
            "prefill tok/s {tps} above the simulator's truth {tps_truth} (the client's span cannot be shorter)"
        );
        worst = worst.max(err);
        // Warm prefix: the same prompt again; cached tokens straight from usage.
        let warm = &r.prefill_warm[&ctx.to_string()];
        let wt = truth_for(&truth, p, true);
        assert_eq!(wt.len(), 1, "one warm request at {ctx}");
        assert_eq!(warm.cached_tokens, Some(wt[0].cached_tokens));
        assert_eq!(warm.cached_tokens_source.as_deref(), Some("usage"));
        assert_eq!(warm.computed_tokens, Some(p - wt[0].cached_tokens));
        assert!(warm.cache_hit_rate.unwrap() > 0.95);
        assert!(
            warm.ttft_seconds.unwrap() < row.ttft_seconds.unwrap() / 5.0,
            "a warm prefix is much faster"
        );
    }
    worst
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn integrated_and_scout_only_prefill_rows_and_skipped_contexts() {
    let _s = SERIAL.lock().await;
    let s = sim(SimConfig {
        max_model_len: 8192,
        ..SimConfig::default()
    });
    let mut cfg = config(&s);
    cfg.contexts = vec![0, 1024];
    cfg.prefill.contexts = vec![2048, 16384];
    let r = go(cfg).await;
    assert_eq!(r.metadata.prefill_mode.as_str(), "integrated_decode_scout");
    assert_eq!(r.prefill["1024"].method.as_str(), "integrated_scout");
    assert_eq!(r.prefill["2048"].method.as_str(), "scout_only");
    // 16k does not fit an 8k model: reported, not silently dropped.
    let skipped = &r.prefill["16384"];
    assert_eq!(skipped.status, Some(CellStatus::SkippedContext));
    assert!(skipped
        .status_reason
        .as_deref()
        .unwrap()
        .contains("max_model_len"));
    assert!(r.results.iter().all(|c| c.status == CellStatus::Ok));
}

/// Burst / E2E aggregate against the simulator's truth. The client's span (first send → last
/// token arrival) can only be longer than the simulator's (first receipt → last emission):
/// the send precedes the receipt and the arrival follows the emission, so on every attempt the
/// measured tok/s may not exceed the truth (beyond float rounding). Noise from other processes
/// on a 2-vCPU machine only lengthens the client's span (seen: 2 % under a parallel workspace
/// test run), so the 0.6 % bound must hold on one of three attempts; a systematic error in
/// either direction fails all three.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn burst_layer_aggregate_matches_truth() {
    let _s = SERIAL.lock().await;
    let s = sim(SimConfig::default());
    let mut errors = Vec::new();
    for attempt in 1..=3 {
        let err = burst_aggregate_error(&s).await;
        eprintln!(
            "attempt {attempt}: burst aggregate − truth = {:+.2} %",
            err * 100.0
        );
        assert!(
            err <= 1e-6,
            "attempt {attempt}: burst aggregate above the simulator's truth by {:.4} % \
             (the client's span cannot be shorter than the server's)",
            err * 100.0
        );
        errors.push(err);
        if err.abs() < 0.006 {
            return;
        }
    }
    panic!("burst aggregate vs truth beyond 0.6 % on every attempt: {errors:?}");
}

/// One Burst / E2E run of 12 measured requests (4 warmup) at C = 4, 40 tokens each: the
/// relative error (measured − truth) / truth of its aggregate tok/s, truth = tokens / (last
/// emission − first receipt) of the measured requests, from the simulator's clock.
async fn burst_aggregate_error(s: &Sim) -> f64 {
    let mut cfg = config(s);
    cfg.concurrency = vec![4];
    cfg.max_tokens = 40;
    cfg.burst = BurstConfig {
        run_burst: true,
        burst_request_count: 12,
        burst_warmup_request_count: 4,
        ..BurstConfig::default()
    };
    s.clear_truth();
    let r = go(cfg).await;
    assert_eq!(r.burst_results.len(), 1);
    let b = &r.burst_results[0];
    assert_eq!(b.status, CellStatus::Ok, "{}", b.status_reason);
    assert_eq!(b.benchmark_mode.as_str(), "burst-e2e");
    assert_eq!(b.aggregate_source.as_str(), "openai_completed_usage");
    assert_eq!(b.num_completed, 12);
    assert_eq!(b.client_output_tokens, Some(12 * 40));
    assert_eq!(r.burst_summary_table["0"]["4"], b.aggregate_tps.unwrap());
    assert!(r.methodology.burst_e2e_decode.present);
    // Truth: the last 12 streaming max_tokens=40 requests are the measured ones.
    let mut truth: Vec<RequestTruth> = s
        .truth()
        .into_iter()
        .filter(|t| t.max_tokens == 40)
        .collect();
    truth.sort_by_key(|t| t.received_at);
    let measured = &truth[truth.len() - 12..];
    let first = measured.iter().map(|t| t.received_at).min().unwrap();
    let last = measured
        .iter()
        .filter_map(|t| t.emissions.last().map(|e| e.0))
        .max()
        .unwrap();
    let tokens: u64 = measured.iter().map(|t| t.tokens()).sum();
    let truth_tps = tokens as f64 / (last - first).as_secs_f64();
    let tps = b.aggregate_tps.unwrap();
    eprintln!("burst: measured {tps:.1} tok/s, truth {truth_tps:.1} tok/s");
    (tps - truth_tps) / truth_tps
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_count_mode_is_the_primary_layer() {
    let _s = SERIAL.lock().await;
    let s = sim(SimConfig::default());
    let mut cfg = config(&s);
    cfg.concurrency = vec![2];
    cfg.max_tokens = 20;
    cfg.burst = BurstConfig {
        request_count: 6,
        warmup_request_count: 2,
        ..BurstConfig::default()
    };
    let r = go(cfg).await;
    assert_eq!(r.metadata.decode_mode.as_str(), "request-count");
    assert_eq!(r.metadata.primary_decode_layer.as_str(), "burst_e2e_decode");
    assert_eq!(r.results.len(), 1);
    let c = &r.results[0];
    assert_eq!(c.status, CellStatus::Ok, "{}", c.status_reason);
    assert_eq!(c.benchmark_mode.as_str(), "request-count");
    assert_eq!(c.request_count_target, 6);
    assert_eq!(c.warmup_request_count, 2);
    assert_eq!(c.num_completed, 6);
    assert_eq!(c.ready_reason, "request_count=6, warmup_request_count=2");
    assert!(!r.methodology.sustained_decode.present);
    assert!(r.methodology.burst_e2e_decode.present);
    assert!(r.burst_results.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn burst_failure_makes_the_cell_invalid() {
    let _s = SERIAL.lock().await;
    let s = sim(SimConfig {
        fault_http_status: Some(503),
        fault_every: 5,
        ..SimConfig::default()
    });
    let mut cfg = config(&s);
    cfg.concurrency = vec![2];
    cfg.max_tokens = 10;
    cfg.burst = BurstConfig {
        request_count: 8,
        ..BurstConfig::default()
    };
    let r = go(cfg).await;
    let c = &r.results[0];
    assert_eq!(c.status, CellStatus::Invalid);
    assert!(c.status_reason.contains("503"), "{}", c.status_reason);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reasoning_phase_separates_ttft_from_time_to_first_content() {
    let _s = SERIAL.lock().await;
    let s = sim(SimConfig {
        reasoning_tokens: 20,
        ..SimConfig::default()
    });
    let mut cfg = config(&s);
    cfg.max_tokens = 60;
    let r = go(cfg).await;
    let c = &r.results[0];
    assert_eq!(c.status, CellStatus::Ok, "{}", c.status_reason);
    let ttft = c.ttft_p50.unwrap();
    let ttfc = c.time_to_first_content_p50.unwrap();
    // 20 reasoning tokens at one token per ~10 ms step come before the first answer token.
    assert!(
        ttfc - ttft > 0.15,
        "TTFT {ttft} must be the first reasoning token, content {ttfc} later"
    );
    // The simulator does not report completion_tokens_details: unknown, never 0.
    assert!(c
        .request_samples
        .iter()
        .all(|s| s.reasoning_tokens.is_none()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn early_stops_under_ignore_eos_are_flagged() {
    let _s = SERIAL.lock().await;
    // A server without ignore_eos support (TGI): every request stops after 12 tokens.
    let s = sim(SimConfig {
        eos_after: Some(12),
        ignore_eos_unsupported: true,
        ..SimConfig::default()
    });
    let mut cfg = config(&s);
    cfg.concurrency = vec![2];
    cfg.max_tokens = 50;
    let r = go(cfg).await;
    let c = &r.results[0];
    assert_eq!(c.status, CellStatus::Ok, "{}", c.status_reason);
    assert!(c.early_stop_requests.unwrap() > 0);
    assert_eq!(c.early_stop_requests, Some(c.completed_request_count));
    assert!(
        c.warnings
            .iter()
            .any(|w| w.contains("stopped before max_tokens") && w.contains("ignore_eos")),
        "{:?}",
        c.warnings
    );
    assert!(c
        .request_samples
        .iter()
        .filter(|s| s.completed)
        .all(|s| s.output_tokens == 12 && s.finish_reason.as_deref() == Some("stop")));
}

/// Cache state is part of the measurement (issue 8, §4): Burst / E2E cells send a unique prefix
/// per request by default, and the simulator (which reports `cached_tokens`) confirms they were
/// served cold; with `--prompt-cache shared` every request after the first hits the prefix
/// cache and the cell says `warm`. The sustained cell (shared, primed by its scout) is `warm`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn burst_prompts_are_cold_by_default_and_the_cell_says_so() {
    use servebench_core::cache::PromptCache;
    let _s = SERIAL.lock().await;
    let s = sim(SimConfig::default());
    for (flag, want_prompts, want_state) in [
        (None, "cold", "cold"),
        (Some(PromptCache::Shared), "shared", "warm"),
    ] {
        let mut cfg = config(&s);
        cfg.concurrency = vec![2];
        cfg.contexts = vec![512];
        cfg.max_tokens = 16;
        cfg.burst = BurstConfig {
            run_burst: true,
            burst_request_count: 6,
            burst_warmup_request_count: 2,
            prompt_cache: flag,
            ..BurstConfig::default()
        };
        s.clear_truth();
        let r = go(cfg).await;
        let b = &r.burst_results[0];
        assert_eq!(b.status, CellStatus::Ok, "{}", b.status_reason);
        assert_eq!(b.prompt_cache.map(|v| v.as_str()), Some(want_prompts));
        assert_eq!(
            b.cache_state.map(|v| v.as_str()),
            Some(want_state),
            "{:?}",
            b.warnings
        );
        // the simulator's truth agrees: cached prompt tokens of the measured requests
        let truth: Vec<RequestTruth> = s
            .truth()
            .into_iter()
            .filter(|t| t.max_tokens == 16)
            .collect();
        let measured = &truth[truth.len() - 6..];
        let cached: u64 = measured.iter().map(|t| t.cached_tokens).sum();
        let prompt: u64 = measured.iter().map(|t| t.prompt_tokens).sum();
        if want_state == "cold" {
            assert!(
                cached * 10 < prompt,
                "cold prompts: {cached} of {prompt} tokens cached"
            );
        } else {
            assert!(cached * 2 > prompt, "shared: {cached} of {prompt} cached");
        }
        let sustained = &r.results[0];
        assert_eq!(sustained.prompt_cache.map(|v| v.as_str()), Some("shared"));
        if flag.is_none() {
            assert_eq!(sustained.cache_state.map(|v| v.as_str()), Some("warm"));
        }
    }
}

/// The steady state of a Burst / E2E batch against the simulator's own view of the same batch:
/// the span where all C = 4 measured requests were inside the simulator (received → `[DONE]`
/// handed over; dips under 50 ms bridged, as `servebench_core::steady` does) and the tokens it
/// emitted inside that span. The client's span is shifted from the server's by request and token
/// transit (sub-millisecond on loopback), so its length must agree within 10 ms and its tok/s
/// within 1 %; a loaded machine can delay the client's stamps, so one of three attempts must
/// hold (a systematic error fails all three).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn burst_steady_state_matches_truth() {
    let _s = SERIAL.lock().await;
    let s = sim(SimConfig::default());
    let mut seen = Vec::new();
    for attempt in 1..=3 {
        let (dur_err_s, tps_err) = burst_steady_error(&s).await;
        eprintln!(
            "attempt {attempt}: steady span − truth = {:+.1} ms, steady tok/s − truth = {:+.2} %",
            dur_err_s * 1e3,
            tps_err * 100.0
        );
        seen.push((dur_err_s, tps_err));
        if dur_err_s.abs() < 0.010 && tps_err.abs() < 0.01 {
            return;
        }
    }
    panic!("steady state vs truth beyond 10 ms / 1 % on every attempt: {seen:?}");
}

/// One Burst / E2E batch of 24 measured requests at C = 4: (measured − truth) steady-span
/// length in s, and relative steady tok/s error.
async fn burst_steady_error(s: &Sim) -> (f64, f64) {
    let mut cfg = config(s);
    cfg.concurrency = vec![4];
    cfg.max_tokens = 40;
    cfg.burst = BurstConfig {
        run_burst: true,
        burst_request_count: 24,
        burst_warmup_request_count: 4,
        ..BurstConfig::default()
    };
    s.clear_truth();
    let r = go(cfg).await;
    let b = &r.burst_results[0];
    assert_eq!(b.status, CellStatus::Ok, "{}", b.status_reason);
    let st = b
        .steady_state
        .as_ref()
        .expect("a burst cell has a steady state");
    assert_eq!((st.target_in_flight, st.min_in_flight), (4, 4), "{st:?}");
    assert!(
        st.duration_s > 0.0 && st.fraction > 0.5 && !st.short,
        "{st:?}"
    );
    assert!(st.requests >= 16, "{st:?}");
    let mut truth: Vec<RequestTruth> = s
        .truth()
        .into_iter()
        .filter(|t| t.max_tokens == 40)
        .collect();
    truth.sort_by_key(|t| t.received_at);
    let measured = &truth[truth.len() - 24..];
    let spans: Vec<(std::time::Instant, std::time::Instant)> = measured
        .iter()
        .map(|t| (t.received_at, t.finished_at.expect("finished")))
        .collect();
    let mut edges: Vec<std::time::Instant> = spans.iter().flat_map(|&(a, b)| [a, b]).collect();
    edges.sort();
    // segments between consecutive edges with all 4 inside, bridged over dips under 50 ms
    let mut best = (edges[0], edges[0]);
    let mut cur: Option<(std::time::Instant, std::time::Instant)> = None;
    for w in edges.windows(2) {
        let (a, b) = (w[0], w[1]);
        if b <= a {
            continue;
        }
        let mid = a + (b - a) / 2;
        let n = spans.iter().filter(|&&(s, e)| s <= mid && mid < e).count();
        if n >= 4 {
            cur = match cur {
                Some((x, y)) if a.duration_since(y) <= Duration::from_millis(50) => Some((x, b)),
                _ => Some((a, b)),
            };
            let c = cur.unwrap();
            if c.1 - c.0 > best.1 - best.0 {
                best = c;
            }
        }
    }
    let truth_s = (best.1 - best.0).as_secs_f64();
    let truth_tokens = servebench_sim::tokens_emitted_between(measured, best.0, best.1);
    let truth_tps = truth_tokens as f64 / truth_s;
    let tps = st.output_tps.unwrap();
    eprintln!(
        "steady: measured {:.3} s {tps:.1} tok/s ({} tokens), truth {truth_s:.3} s {truth_tps:.1} tok/s ({truth_tokens} tokens)",
        st.duration_s, st.output_tokens
    );
    (st.duration_s - truth_s, (tps - truth_tps) / truth_tps)
}
