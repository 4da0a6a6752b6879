//! Issue 18: every documented threshold of the cell verdict (docs/metrics.md) at both sides of
//! it — just below, at, just above — written with the documented numbers, not the constants,
//! so a changed constant or comparison fails here.
//!
//! Registry rules and plausibility bounds: `crates/registry/tests/thresholds.rs`.

use std::time::{Duration, Instant};

use servebench_metrics::Engine;
use servebench_results::{CacheState, CellResult, RequestSample};

use crate::cache::cache_state;
use crate::cell::tick_lag_warns;
use crate::plausibility::{
    analyze_stalls, stall_finding, stall_threshold_s, StallInput, StallStats,
};
use crate::rate::slo::{check_percentile, RequestValues, Slo, SloMetric};
use crate::telemetry::{
    apply_window, server_readiness, ClientWindow, Occupancy, ServerSample, WindowEvidence,
};

/// `client_max_tick_lag_ms`: above 50 ms the cell gets the descheduled-client warning.
#[test]
fn tick_lag_warning_is_above_50_ms() {
    for (lag, warns) in [
        (49.0, false),
        (49.999, false),
        (50.0, false),
        (50.001, true),
        (51.0, true),
    ] {
        assert_eq!(tick_lag_warns(lag), warns, "lag {lag} ms");
    }
}

fn sample(running: f64) -> ServerSample {
    ServerSample {
        at: Instant::now(),
        running: Some(running),
        waiting: Some(0.0),
        kv_usage: Some(0.5),
        generation_tokens: Some(1.0),
        spec_accept_rate: None,
        spec_accept_length: None,
    }
}

/// The occupancy flags of a sustained window at C whose running gauge read `running`.
fn occupancy(c: u64, running: &[f64]) -> (bool, bool) {
    let samples: Vec<ServerSample> = running.iter().map(|&r| sample(r)).collect();
    let evidence = WindowEvidence {
        engine: Engine::Vllm,
        start: None,
        end: None,
        samples: &samples,
    };
    let mut cell = CellResult::default();
    apply_window(
        &mut cell,
        &evidence,
        ClientWindow {
            concurrency: c,
            tokens: 100,
            seconds: 1.0,
            occupancy: Occupancy::Sustained,
        },
    );
    (cell.capacity_limited, cell.underfilled)
}

/// `capacity_limited`: mean running < 0.95 C (the max reaching C), or max < C.
#[test]
fn capacity_limited_is_below_95_percent_of_c() {
    // C = 20: 0.95 C = 19. Samples [20, x]: max 20, mean (20 + x) / 2.
    for (x, limited) in [(17.98, true), (18.0, false), (18.02, false)] {
        let (cap, _) = occupancy(20, &[20.0, x]);
        assert_eq!(cap, limited, "mean running {}", (20.0 + x) / 2.0);
    }
    // max < C alone
    for (max, limited) in [(19.99, true), (20.0, false)] {
        assert_eq!(occupancy(20, &[max, max]).0, limited, "max running {max}");
    }
    // C = 1 is never limited by the gauge
    assert_eq!(occupancy(1, &[0.5, 0.5]), (false, false));
}

/// `underfilled`: C > 1 and mean running < 0.98 C.
#[test]
fn underfilled_is_below_98_percent_of_c() {
    // C = 50: 0.98 C = 49 (0.95 C = 47.5: not capacity-limited by the mean here).
    for (x, under) in [(47.98, true), (48.0, false), (48.02, false)] {
        let (cap, u) = occupancy(50, &[50.0, x]);
        assert_eq!(u, under, "mean running {}", (50.0 + x) / 2.0);
        assert!(!cap);
    }
}

fn req(prompt: u64, cached: u64) -> RequestSample {
    RequestSample {
        input_tokens: Some(prompt),
        cached_tokens: Some(cached),
        output_tokens: 10,
        ..RequestSample::default()
    }
}

fn state_of(samples: Vec<RequestSample>, hit_rate: Option<f64>) -> Option<CacheState> {
    cache_state(&CellResult {
        request_samples: samples,
        server_prefix_cache_hit_rate: hit_rate,
        ..CellResult::default()
    })
}

/// `cache_state`: a request is warm when more than max(64, 25 % of its prompt) tokens were
/// cached; without per-request counts the window's hit rate decides (> 0.25 = warm).
#[test]
fn warm_cache_is_above_25_percent_of_the_prompt_and_64_tokens() {
    use CacheState::{Cold, Warm};
    // 1000-token prompt: 25 % = 250 tokens
    for (cached, want) in [(249, Cold), (250, Cold), (251, Warm)] {
        assert_eq!(
            state_of(vec![req(1000, cached)], None),
            Some(want),
            "{cached} of 1000"
        );
    }
    // 100-token prompt: 25 % = 25, the 64-token floor decides
    for (cached, want) in [(63, Cold), (64, Cold), (65, Warm)] {
        assert_eq!(
            state_of(vec![req(100, cached)], None),
            Some(want),
            "{cached} of 100"
        );
    }
    // hit rate
    for (h, want) in [(0.2499, Cold), (0.25, Cold), (0.2501, Warm)] {
        assert_eq!(state_of(Vec::new(), Some(h)), Some(want), "hit rate {h}");
    }
}

fn ms(t0: Instant, v: u64) -> Instant {
    t0 + Duration::from_millis(v)
}

/// `stall_threshold_s` = max(10 × typical chunk gap, 1 s); a silence longer than it (not equal)
/// is a stall.
#[test]
fn stall_threshold_is_10_times_the_typical_gap_with_a_1_s_floor() {
    for (gap, want) in [
        (None, 1.0),
        (Some(0.0999), 1.0),
        (Some(0.1), 1.0),
        (Some(0.1001), 1.001),
        (Some(0.2), 2.0),
    ] {
        let got = stall_threshold_s(gap);
        assert!((got - want).abs() < 1e-12, "gap {gap:?}: {got} != {want}");
    }
    // Typical gap 200 ms (21 events over 4 s) → threshold 2 s; one silence after the last token
    // of 1.999, 2.000 or 2.001 s until the request's end.
    let t0 = Instant::now();
    for (silence_ms, stall) in [(1_999u64, false), (2_000, false), (2_001, true)] {
        let last = ms(t0, 4_000);
        let end = ms(t0, 4_000 + silence_ms);
        let gaps = [(last, end)];
        let r = StallInput {
            sent_at: t0,
            end_at: end,
            token_events_span: Some((t0, last)),
            token_events: 21,
            long_gaps: &gaps,
        };
        let st = analyze_stalls(&[r], (t0, ms(t0, 10_000)), None);
        assert!((st.threshold_s - 2.0).abs() < 1e-9, "{}", st.threshold_s);
        assert_eq!(st.count, u64::from(stall), "silence {silence_ms} ms");
    }
}

/// A cell whose stalls cover more than 50 % of its stream-time is invalid; up to 50 % a
/// warning.
#[test]
fn stalls_invalidate_above_half_the_stream_time() {
    for (stalled, invalid) in [(4.99, false), (5.0, false), (5.01, true)] {
        let st = StallStats {
            count: 1,
            longest_s: stalled,
            stalled_s: stalled,
            stream_s: 10.0,
            threshold_s: 1.0,
        };
        let f = stall_finding(&st).expect("a stall is a finding");
        assert_eq!(f.invalid, invalid, "{stalled} s of 10 s stalled");
    }
}

fn values(ttft: f64) -> Option<RequestValues> {
    Some(RequestValues {
        completed: true,
        ttft: Some(ttft),
        itl: Some(0.01),
        tpot: Some(0.01),
        e2e: Some(1.0),
    })
}

/// SLOs: a value equal to the threshold meets it (≤), per request and for the row's percentile.
#[test]
fn slo_threshold_is_met_at_equality() {
    let slo = Slo {
        metric: SloMetric::Ttft,
        percentile: 50.0,
        threshold_s: 0.5,
    };
    for (v, met) in [(0.4999, true), (0.5, true), (0.5001, false)] {
        assert_eq!(values(v).unwrap().good(&[slo]), met, "request TTFT {v}");
        let (p, row_met) = check_percentile(&slo, &[values(v)]);
        assert_eq!((p, row_met), (Some(v), met), "row p50 {v}");
    }
}

/// Readiness from the server's gauges: running ≥ C (or the short-flow rule at max_tokens ≤ 512
/// once C requests completed), nothing queued, tokens flowing.
#[test]
fn server_readiness_thresholds() {
    let s = |r: f64, q: f64| ServerSample {
        waiting: Some(q),
        ..sample(r)
    };
    for (running, ready) in [(3.0, false), (3.999, false), (4.0, true), (5.0, true)] {
        assert_eq!(
            server_readiness(&s(running, 0.0), 4, true, 2048, 0).ready,
            ready,
            "running {running} of 4"
        );
    }
    for (queue, ready) in [(0.0, true), (0.001, false), (1.0, false)] {
        assert_eq!(
            server_readiness(&s(4.0, queue), 4, true, 2048, 0).ready,
            ready,
            "queue {queue}"
        );
    }
    // short flow: fewer than C running is ready at max_tokens ≤ 512 once C completed
    for (max_tokens, completed, ready) in [
        (511, 4, true),
        (512, 4, true),
        (513, 4, false),
        (512, 3, false),
        (512, 5, true),
    ] {
        assert_eq!(
            server_readiness(&s(2.0, 0.0), 4, true, max_tokens, completed).ready,
            ready,
            "max_tokens {max_tokens}, completed {completed}"
        );
    }
    assert!(
        !server_readiness(&s(4.0, 0.0), 4, false, 2048, 0).ready,
        "no generation"
    );
}

/// A sustained cell's window of 10 s with three requests credited 100, 200 and 50 tokens, and a
/// monitor tick that ran `lag_ms` late at worst, through [`crate::cell::SustainedRun::measure`].
fn measured_cell(lag_ms: f64) -> crate::measure::CellMeasurement {
    use crate::cell::{CellSettings, ReadyVerdict, SustainedRun};
    use crate::load::window::Window;
    use crate::plan::CellSpec;
    use servebench_client::h1::ReadDelay;
    use servebench_client::stream::StreamOutcome;
    use servebench_sse::RequestTracker;
    let t0 = Instant::now();
    let w = Window::after(t0, Duration::from_millis(20), Duration::from_secs(10));
    let outcome = |tokens: u64| {
        let mut record = RequestTracker::new(t0).finish(w.end, false, true);
        record.token_events = tokens;
        record.output_tokens = tokens;
        StreamOutcome {
            record,
            window_tokens: tokens,
            window_token_events: tokens,
            text: None,
            read_delay: ReadDelay::default(),
            facts: Default::default(),
        }
    };
    let run = SustainedRun {
        spec: CellSpec {
            concurrency: 3,
            context: 0,
        },
        scout_prompt_tokens: None,
        ready: Some(ReadyVerdict {
            ready_reason: "active_streams=3/3".into(),
            timed_out: None,
            warning: None,
            warmup_s: 0.5,
        }),
        window: Some(w),
        outcomes: vec![outcome(100), outcome(200), outcome(50)],
        failure: None,
        max_tick_lag_ms: lag_ms,
        cpu_s: None,
        server: None,
        wall_s: 11.0,
    };
    let settings = CellSettings {
        path: "/v1/chat/completions",
        duration: Duration::from_secs(10),
        stable_window: Duration::from_secs(1),
        max_tokens: 0,
        ignore_eos: false,
    };
    run.measure(&settings).0
}

/// The headline of a sustained cell is exactly window tokens / window length (350 / 10 s), and
/// the descheduled-client warning appears above 50 ms of tick lag, through the cell's own path.
#[test]
fn cell_aggregate_is_window_tokens_over_window_length_and_warns_above_50_ms() {
    let m = measured_cell(3.0);
    assert_eq!(m.aggregate_tps, Some(35.0));
    let w = m.window.as_ref().expect("window totals");
    assert_eq!((w.seconds, w.tokens), (10.0, Some(350)));
    assert_eq!(m.client.max_tick_lag_ms, Some(3.0));
    for (lag, warns) in [(49.999, false), (50.0, false), (50.001, true)] {
        let m = measured_cell(lag);
        assert_eq!(
            m.warnings.iter().any(|w| w.contains("descheduled")),
            warns,
            "lag {lag} ms: {:?}",
            m.warnings
        );
        assert_eq!(
            m.aggregate_tps,
            Some(35.0),
            "the warning leaves the number alone"
        );
    }
}
