//! Ground truth: the simulator records when it emitted every token; what servebench measures
//! against it must match within stated tolerances.
//!
//! * aggregate tok/s exactly the window's tokens / the window's length, within 1 % of the tokens the
//!   simulator emitted inside the window, and the
//!   window's token count within C / 4 of the simulator's (best of three);
//! * at C = 64, the median first-token lag (arrival − the moment the simulator wrote the token) is
//!   below 0.1 ms (kernel receive timestamps; best of three);
//! * TTFT against the simulator's own clock (first emission − the simulator's receipt of the
//!   request, never the client's send time): never shorter, median excess < 0.6 ms at C = 4;
//! * with several tokens per SSE event (speculative decoding), per-token ITL equals the truth and
//!   chunk ITL is the step time.

use std::sync::Arc;
use std::time::{Duration, Instant};

use servebench_client::{Endpoint, HttpClient, Target};
use servebench_core::cell::{run_sustained_cell, CellJob, CellOutcome, CellSettings};
use servebench_core::plan::CellSpec;
use servebench_core::prompt::{build_input, streaming_payload, RequestOptions};
use servebench_core::EventSink;
use servebench_results::CellStatus;
use servebench_sim::{tokens_emitted_between, RequestTruth, Sim, SimConfig};
use tokio_util::sync::CancellationToken;

/// Timing tests run one at a time: they share two cores with the simulator thread.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn sim(cfg: SimConfig) -> Sim {
    Sim::spawn_thread(SimConfig {
        port: 0,
        record_truth: true,
        ..cfg
    })
    .expect("simulator starts")
}

async fn cell(
    sim: &Sim,
    c: u64,
    ctx_padding: usize,
    duration: f64,
    max_tokens: u64,
) -> CellOutcome {
    let target = Target::from_url(&sim.base_url(), None, Endpoint::Chat).unwrap();
    let client = HttpClient::new(target).unwrap();
    let opts = RequestOptions {
        model: "servebench-sim".into(),
        endpoint: Endpoint::Chat,
        max_tokens,
        ignore_eos: true,
        temperature: None,
        continuous_usage: true,
    };
    let input = build_input(
        Endpoint::Chat,
        "[BENCH_test_CTX_1]",
        ctx_padding,
        ctx_padding > 0,
    );
    let scout = RequestOptions {
        max_tokens: 1,
        continuous_usage: false,
        ..opts.clone()
    };
    let settings = CellSettings {
        path: Endpoint::Chat.path(),
        duration: Duration::from_secs_f64(duration),
        stable_window: Duration::from_secs(1),
        max_tokens,
        ignore_eos: true,
    };
    let job = CellJob {
        spec: CellSpec {
            concurrency: c,
            context: ctx_padding as u64,
        },
        decode_body: streaming_payload(&opts, &input),
        scout_body: (ctx_padding > 0).then(|| streaming_payload(&scout, &input)),
        ready_timeout: Duration::from_secs(30),
        index: 1,
        total: 1,
        warmup: false,
        cold_run_id: None,
        export: None,
    };
    let events = Arc::new(EventSink::new(None));
    run_sustained_cell(
        &client,
        &settings,
        job,
        &events,
        None,
        &CancellationToken::new(),
    )
    .await
}

fn truth_by_id<'a>(truth: &'a [RequestTruth], id: &str) -> Option<&'a RequestTruth> {
    truth.iter().find(|t| t.id == id)
}

/// Time of the emission at which the truth's cumulative token count reached `n`.
fn emission_reaching(t: &RequestTruth, n: u64) -> Option<Instant> {
    let mut total = 0u64;
    for &(at, k) in &t.emissions {
        total += k as u64;
        if total >= n {
            return Some(at);
        }
    }
    None
}

fn assert_aggregate_matches(out: &CellOutcome, truth: &[RequestTruth]) {
    let (start, end) = out.window.expect("window opened");
    let window_s = (end - start).as_secs_f64();
    let truth_tokens = tokens_emitted_between(truth, start, end);
    let measured = out.result.client_output_tokens.unwrap();
    let truth_tps = truth_tokens as f64 / window_s;
    let tps = out.result.aggregate_tps.unwrap();
    // The headline is exactly the window's tokens over the window's length (issue 18): not the
    // measured loop time, not a rounded length. Both sides are the same f64 computation.
    assert_eq!(
        tps,
        measured as f64 / window_s,
        "aggregate_tps is not window tokens / window length ({measured} tokens / {window_s} s)"
    );
    assert_eq!(out.result.measurement_seconds, Some(window_s));
    let err = (tps - truth_tps).abs() / truth_tps;
    eprintln!("aggregate: measured {measured} tokens {tps:.1} tok/s, truth {truth_tokens} tokens {truth_tps:.1} tok/s, error {:.3}%", err * 100.0);
    assert!(
        err < 0.01,
        "aggregate tok/s off by {:.2}% (measured {tps:.1}, truth {truth_tps:.1})",
        err * 100.0
    );
}

/// TTFT errors of one C = 64 cell against the truth: (median first-token lag ms, mean ms, p99 ms,
/// |cell TTFT p50 − true p50| ms).
fn ttft_errors(out: &CellOutcome, truth: &[RequestTruth]) -> (f64, f64, f64, f64) {
    // First-token observation lag: arrival − the moment the simulator wrote the token.
    let mut lags_ms: Vec<f64> = Vec::new();
    for r in &out.records {
        let (Some(id), Some(first)) = (&r.response_id, r.first_token_at) else {
            continue;
        };
        let t = truth_by_id(truth, id).expect("every response id is in the truth");
        let emit = t.first_token_at().expect("truth has the first token");
        assert!(first >= emit, "a token cannot arrive before it was emitted");
        lags_ms.push(first.duration_since(emit).as_secs_f64() * 1e3);
    }
    assert!(lags_ms.len() >= 64);
    lags_ms.sort_by(f64::total_cmp);
    let p99 = lags_ms[(lags_ms.len() - 1) * 99 / 100];
    let mean = lags_ms.iter().sum::<f64>() / lags_ms.len() as f64;
    let median = lags_ms[lags_ms.len() / 2];
    // The cell's TTFT p50 against the true p50. True TTFT is the simulator's own clock only:
    // first emission − the moment its HTTP handler had the request (never the client's send
    // time, which would make the check circular).
    let ttft_truths: Vec<f64> = out
        .result
        .request_samples
        .iter()
        .filter_map(|smp| {
            let t = truth_by_id(truth, smp.response_id.as_deref()?)?;
            Some((t.first_token_at()? - t.received_at).as_secs_f64())
        })
        .collect();
    let truth_p50 = servebench_stats::median(&ttft_truths).unwrap();
    let p50_err = (out.result.ttft_p50.unwrap() - truth_p50).abs() * 1e3;
    (median, mean, p99, p50_err)
}

/// Per-request TTFT error against the simulator's clock, ms: client TTFT − (first emission −
/// request received by the simulator). Physically ≥ 0 (request transit + parse, plus token
/// transit); sorted.
fn ttft_truth_errors_ms(out: &CellOutcome, truth: &[RequestTruth]) -> Vec<f64> {
    let mut errs: Vec<f64> = out
        .records
        .iter()
        .filter_map(|r| {
            let t = truth_by_id(truth, r.response_id.as_deref()?)?;
            let truth_ttft = (t.first_token_at()? - t.received_at).as_secs_f64();
            Some((r.ttft_s()? - truth_ttft) * 1e3)
        })
        .collect();
    errs.sort_by(f64::total_cmp);
    errs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aggregate_and_ttft_match_truth_at_c64() {
    let _serial = SERIAL.lock().await;
    // Best of three for the first-token lag and the window's exact token count: noise from other
    // processes on a 2-vCPU machine can only *add* lag (the simulator and the client share the
    // cores), so a systematic client error fails every attempt, while one quiet attempt proves
    // the client's own error is within the bound. The aggregate (1 %) and window-length bounds
    // must hold on every attempt.
    let mut attempts = Vec::new();
    for attempt in 1..=3 {
        let s = sim(SimConfig {
            max_batch: 256,
            ..SimConfig::default()
        });
        let out = cell(&s, 64, 2000, 4.0, 256).await;
        assert_eq!(
            out.result.status,
            CellStatus::Ok,
            "{}",
            out.result.status_reason
        );
        assert_eq!(
            out.result.aggregate_source.as_str(),
            "openai_continuous_usage"
        );
        // The window is as long as asked (a short window would still give a right rate), to
        // the nanosecond: its end is its start + the duration.
        let window_s = out.result.measurement_seconds.unwrap();
        assert!(
            (window_s - 4.0).abs() < 1e-9,
            "window {window_s} s for a 4 s cell"
        );
        let truth = s.truth();
        assert_aggregate_matches(&out, &truth);
        let tokens_diff = window_tokens_diff(&out, &truth);
        let (median, mean, p99, p50_err) = ttft_errors(&out, &truth);
        eprintln!(
            "attempt {attempt}: first-token lag median {median:.3} ms, mean {mean:.3} ms, p99 {p99:.3} ms; \
             |TTFT p50 − truth (simulator clock)| {p50_err:.3} ms (request transit at a 64-request burst, not asserted)"
        );
        eprintln!("attempt {attempt}: window tokens client − simulator = {tokens_diff}");
        attempts.push((median, tokens_diff));
        if median < FIRST_TOKEN_LAG_MS && tokens_diff.unsigned_abs() <= 64 / 4 {
            return;
        }
    }
    panic!(
        "on every attempt the median first-token lag was ≥ {FIRST_TOKEN_LAG_MS} ms or the window's \
         tokens were more than C/4 = 16 apart from the simulator's (lag ms, token difference): {attempts:?}"
    );
}

/// Median first-token lag bound (token arrival − the simulator's emission), ms: 0.003–0.008 ms
/// with kernel receive timestamps; without them 0.38–0.7 ms on this machine (the client's
/// wake-up), so 0.1 ms separates the two with margin for a loaded 2-vCPU machine (best of three
/// attempts).
const FIRST_TOKEN_LAG_MS: f64 = 0.1;

/// Client tokens of the window − the simulator's tokens emitted inside it. Only tokens in flight
/// across an edge (a few µs with kernel timestamps) may differ: the test allows C / 4; a token
/// counted twice at an edge, once per straddling request, is C tokens.
fn window_tokens_diff(out: &CellOutcome, truth: &[RequestTruth]) -> i64 {
    let (start, end) = out.window.expect("window opened");
    let truth_tokens = tokens_emitted_between(truth, start, end);
    let measured = out.result.client_output_tokens.unwrap();
    measured as i64 - truth_tokens as i64
}

/// Bound on the median per-request TTFT error against the simulator's own clock, ms (client
/// TTFT − (first emission − request received by the simulator's handler)): request transit,
/// the simulator reading a 500-token body, and the first token's transit — 0.05–0.3 ms measured
/// on this machine at C = 4. A 1 ms bias either way exceeds it; a negative error is impossible.
const TTFT_ERR_MS: f64 = 0.6;

/// TTFT against the simulator's own receive and emission times (never the client's clock): no
/// client TTFT is shorter than the simulator's, and the median excess is below [`TTFT_ERR_MS`].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttft_matches_the_simulators_own_clock() {
    let _serial = SERIAL.lock().await;
    let mut attempts = Vec::new();
    for attempt in 1..=3 {
        let s = sim(SimConfig::default());
        let out = cell(&s, 4, 500, 2.0, 24).await;
        assert_eq!(
            out.result.status,
            CellStatus::Ok,
            "{}",
            out.result.status_reason
        );
        let truth = s.truth();
        let errs = ttft_truth_errors_ms(&out, &truth);
        assert!(errs.len() >= 8, "{} requests", errs.len());
        let (e_min, e_med) = (errs[0], errs[errs.len() / 2]);
        eprintln!(
            "attempt {attempt}: TTFT − truth (simulator clock) over {} requests: min {e_min:.3} ms, median {e_med:.3} ms, max {:.3} ms",
            errs.len(),
            errs[errs.len() - 1]
        );
        // Physically impossible: a client that makes TTFT too short fails on every attempt.
        assert!(
            e_min > -0.02,
            "a client TTFT is {:.3} ms shorter than the simulator's own",
            -e_min
        );
        attempts.push(e_med);
        if e_med < TTFT_ERR_MS {
            return;
        }
    }
    panic!("median TTFT error ≥ {TTFT_ERR_MS} ms on every attempt: {attempts:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_token_chunks_keep_per_token_itl_exact() {
    let _serial = SERIAL.lock().await;
    // 4 tokens per SSE event, as with speculative decoding accepting 3 drafts per step.
    let s = sim(SimConfig {
        tokens_per_chunk: 4,
        ..SimConfig::default()
    });
    let out = cell(&s, 8, 0, 3.0, 400).await;
    assert_eq!(
        out.result.status,
        CellStatus::Ok,
        "{}",
        out.result.status_reason
    );
    assert_eq!(
        out.result.aggregate_source.as_str(),
        "openai_continuous_usage"
    );
    let truth = s.truth();
    assert_aggregate_matches(&out, &truth);
    let mut checked = 0;
    for r in out.records.iter().filter(|r| r.output_tokens >= 20) {
        let t = truth_by_id(&truth, r.response_id.as_deref().unwrap()).unwrap();
        let first = t.first_token_at().unwrap();
        let last = emission_reaching(t, r.output_tokens).unwrap();
        let itl_truth = (last - first).as_secs_f64() / (r.output_tokens - 1) as f64;
        let itl = r.itl_s().unwrap();
        assert!(
            (itl - itl_truth).abs() < 0.1e-3 + itl_truth * 0.02,
            "ITL {itl} vs truth {itl_truth}"
        );
        // chunk ITL ≈ 4 × token ITL
        let chunk = r.chunk_itl_s().unwrap();
        assert!(
            chunk > 3.0 * itl,
            "chunk ITL {chunk} should be ~4× token ITL {itl}"
        );
        checked += 1;
    }
    assert!(checked >= 8, "checked {checked} requests");
    let itl_p50 = out.result.inter_token_latency_p50.unwrap();
    let chunk_p50 = out.result.chunk_inter_token_latency_p50.unwrap();
    assert!(
        (chunk_p50 / itl_p50 - 4.0).abs() < 0.4,
        "chunk/token ITL ratio {}",
        chunk_p50 / itl_p50
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn final_usage_only_servers_are_labelled_fallback() {
    let _serial = SERIAL.lock().await;
    let s = sim(SimConfig {
        continuous_usage: false,
        ..SimConfig::default()
    });
    let out = cell(&s, 4, 0, 2.0, 100).await;
    assert_eq!(
        out.result.status,
        CellStatus::Ok,
        "{}",
        out.result.status_reason
    );
    assert_eq!(
        out.result.aggregate_source.as_str(),
        "openai_stream_chunks_fallback"
    );
    assert!(out
        .result
        .warnings
        .iter()
        .any(|w| w.contains("not streamed on every chunk")));
    // One token per event: chunk counting is still exact.
    assert_aggregate_matches(&out, &s.truth());
}

/// Usage only at the end and 4 tokens per chunk (speculative decoding behind a server without
/// continuous usage stats): the window credit spreads each finished request's final usage over
/// its chunks and credits requests cut at the end at the finished ones' tokens per chunk
/// (`WindowTally::of`). Every chunk carries 4 tokens, so both are exact and the aggregate
/// matches the simulator's emissions within 1%; before, a request ending inside the window
/// credited its pre-window tokens there and cut requests counted 1 per chunk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn final_usage_only_with_multi_token_chunks_matches_truth() {
    let _serial = SERIAL.lock().await;
    let s = sim(SimConfig {
        continuous_usage: false,
        tokens_per_chunk: 4,
        ..SimConfig::default()
    });
    let out = cell(&s, 8, 0, 3.0, 200).await;
    assert_eq!(
        out.result.status,
        CellStatus::Ok,
        "{}",
        out.result.status_reason
    );
    assert_eq!(
        out.result.aggregate_source.as_str(),
        "openai_stream_chunks_fallback"
    );
    assert!(
        out.result
            .warnings
            .iter()
            .any(|w| w.contains("credited 4.00 tokens per chunk")),
        "{:?}",
        out.result.warnings
    );
    // the estimated part is named with a typed warning (exact here, but an estimate)
    assert!(
        out.result
            .warning_kinds
            .contains(&servebench_results::FailureKind::EstimatedTokens),
        "{:?}",
        out.result.warning_kinds
    );
    assert_aggregate_matches(&out, &s.truth());
}
