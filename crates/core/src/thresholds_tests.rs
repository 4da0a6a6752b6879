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
    measured_cell_with(lag_ms, |_, _| {})
}

/// [`measured_cell`] after `tweak` changed the run (its outcomes, CPU, failure) or the settings.
fn measured_cell_with(
    lag_ms: f64,
    tweak: impl FnOnce(&mut crate::cell::SustainedRun, &mut crate::cell::CellSettings),
) -> crate::measure::CellMeasurement {
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
    let mut run = run;
    let mut settings = CellSettings {
        path: "/v1/chat/completions",
        duration: Duration::from_secs(10),
        stable_window: Duration::from_secs(1),
        max_tokens: 0,
        ignore_eos: false,
    };
    tweak(&mut run, &mut settings);
    run.measure(&settings).0
}

/// Issue 18 (cargo-mutants `core-cell` survivors): the client-load fields, the request counts
/// and each window warning of [`crate::cell::SustainedRun::measure`] on hand-built outcomes
/// with known answers.
#[test]
fn cell_client_load_counts_and_window_warnings_on_hand_built_requests() {
    // CPU 2.5 s over the 10 s window: 0.25; read delays 4 reads, 10 ms in all, 6 ms at most
    let m = measured_cell_with(3.0, |run, _| {
        run.cpu_s = Some(2.5);
        run.outcomes[0].read_delay.reads = 4;
        run.outcomes[0].read_delay.total_s = 0.010;
        run.outcomes[0].read_delay.max_s = 0.006;
    });
    assert_eq!(m.client.cpu_util, Some(0.25));
    let (avg, max) = m.client.read_delay_ms.expect("read delays");
    assert!(
        (avg - 2.5).abs() < 1e-9 && (max - 6.0).abs() < 1e-9,
        "{avg} {max}"
    );
    // no kernel-stamped read: no read-delay figures
    assert_eq!(measured_cell(3.0).client.read_delay_ms, None);

    // counts: the hand-built requests are cut at the window end (cancelled); one finished,
    // one failed (an error), one cut with an error (not an error: cut ones are excluded)
    let m = measured_cell_with(3.0, |run, _| {
        run.outcomes[0].record.cancelled = false;
        run.outcomes[0].record.completed = true;
        run.outcomes[1].record.cancelled = false;
        run.outcomes[1].record.error = Some("boom".into());
        run.outcomes[2].record.error = Some("cut".into());
    });
    assert_eq!((m.counts.completed, m.counts.errors), (1, 1));

    // usage continuity: 3 multi-event requests without continuous usage warn (0 of 3 streamed
    // it), all three continuous do not, one token event each is not judged
    let streamed = |m: &crate::measure::CellMeasurement| {
        m.warnings
            .iter()
            .find(|w| w.starts_with("usage was not streamed"))
            .cloned()
    };
    let w = streamed(&measured_cell(3.0)).expect("fallback warning");
    assert!(w.contains("(0 of 3 requests)"), "{w}");
    assert!(w.contains("counts one token per chunk"), "{w}");
    let m = measured_cell_with(3.0, |run, _| {
        for o in &mut run.outcomes {
            o.record.continuous_usage = true;
        }
    });
    assert_eq!(streamed(&m), None, "{:?}", m.warnings);
    let m = measured_cell_with(3.0, |run, _| run.outcomes[0].record.continuous_usage = true);
    assert!(streamed(&m).expect("warning").contains("(1 of 3 requests)"));
    let m = measured_cell_with(3.0, |run, _| {
        for o in &mut run.outcomes {
            o.record.token_events = 1;
        }
    });
    assert_eq!(
        streamed(&m),
        None,
        "one event per request: {:?}",
        m.warnings
    );
    let m = measured_cell_with(3.0, |run, _| {
        for o in &mut run.outcomes {
            o.window_tokens = 0;
            o.window_token_events = 0;
        }
    });
    assert_eq!(streamed(&m), None, "no window tokens: {:?}", m.warnings);

    // ignore_eos with max_tokens 150: the 100- and 50-token requests stopped early, a
    // recounted (non-cumulative) one is not judged, max_tokens 0 (no cap) never warns
    let early = |m: &crate::measure::CellMeasurement| {
        m.warnings
            .iter()
            .find(|w| w.contains("stopped before max_tokens"))
            .cloned()
    };
    fn finished(run: &mut crate::cell::SustainedRun) {
        for o in &mut run.outcomes {
            o.record.cancelled = false;
            o.record.completed = true;
        }
    }
    let m = measured_cell_with(3.0, |run, s| {
        finished(run);
        s.ignore_eos = true;
        s.max_tokens = 150;
    });
    let w = early(&m).expect("early stop warning");
    assert!(
        w.starts_with("2 of 3 completed requests stopped before max_tokens 150"),
        "{w}"
    );
    let m = measured_cell_with(3.0, |run, s| {
        finished(run);
        s.ignore_eos = true;
        s.max_tokens = 150;
        run.outcomes[0].record.nonmonotonic_usage = true;
    });
    let w = early(&m).expect("early stop warning");
    assert!(w.starts_with("1 of 3 completed"), "{w}");
    let m = measured_cell_with(3.0, |run, s| {
        finished(run);
        s.ignore_eos = true;
        s.max_tokens = 100;
    });
    assert!(
        early(&m).expect("warning").starts_with("1 of 3"),
        "at max_tokens is not early"
    );
    let m = measured_cell_with(3.0, |run, s| {
        finished(run);
        s.ignore_eos = true;
        s.max_tokens = 0;
    });
    assert_eq!(early(&m), None);
    let m = measured_cell_with(3.0, |run, s| {
        finished(run);
        s.max_tokens = 150;
    });
    // cut requests are not judged
    assert_eq!(
        early(&measured_cell_with(3.0, |_, s| {
            s.ignore_eos = true;
            s.max_tokens = 150;
        })),
        None
    );
    assert_eq!(
        early(&m),
        None,
        "without ignore_eos an early stop is the model's"
    );

    // the descheduled-client warning names kernel timestamps only when reads carried them
    let lag = |m: &crate::measure::CellMeasurement| {
        m.warnings
            .iter()
            .find(|w| w.contains("descheduled"))
            .cloned()
            .expect("lag warning")
    };
    assert!(lag(&measured_cell(60.0)).contains("without kernel receive timestamps"));
    let m = measured_cell_with(60.0, |run, _| run.outcomes[0].read_delay.reads = 1);
    assert!(
        lag(&m).contains("are kernel receive timestamps"),
        "{}",
        lag(&m)
    );
}

/// Issue 18 (`core-cell` survivor): the stream checks judge the window's requests that did
/// not fail: two single-write streams of 100 and 200 tokens beside one that failed are a
/// `single_write` warning; the failed one alone is not.
#[test]
fn stream_checks_skip_failed_requests() {
    let one_write = |o: &mut servebench_client::stream::StreamOutcome| {
        let at = o.record.end_at;
        o.record.first_token_at = Some(at);
        o.record.last_token_at = Some(at);
    };
    let single = |m: &crate::measure::CellMeasurement| {
        m.findings.iter().any(|f| f.message.contains("one read"))
            || m.warnings.iter().any(|w| w.contains("one read"))
    };
    let m = measured_cell_with(3.0, |run, _| {
        one_write(&mut run.outcomes[0]);
        one_write(&mut run.outcomes[1]);
        run.outcomes[2].record.error = Some("boom".into());
    });
    assert!(single(&m), "{:?} {:?}", m.findings, m.warnings);
    let m = measured_cell_with(3.0, |run, _| {
        one_write(&mut run.outcomes[0]);
        run.outcomes[0].record.error = Some("boom".into());
    });
    assert!(!single(&m), "{:?}", m.findings);
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

/// Issue 18 (`core-cell` survivors): the headline's failure kinds, the fallback warning's
/// extrapolation clause and the server samples kept (those inside the window, edges included).
#[test]
fn cell_verdicts_fallback_clause_and_window_samples() {
    use servebench_results::FailureKind;
    // token events in the window but no token credited: the usage did not grow (not no_output)
    let m = measured_cell_with(3.0, |run, _| {
        for o in &mut run.outcomes {
            o.window_tokens = 0;
        }
    });
    assert_eq!(
        m.verdict.error_kind,
        Some(FailureKind::UsageImplausible),
        "{:?}",
        m.verdict
    );
    assert_eq!(m.aggregate_tps, None);
    let m = measured_cell_with(3.0, |run, _| {
        for o in &mut run.outcomes {
            o.window_tokens = 0;
            o.window_token_events = 0;
        }
    });
    assert_eq!(
        m.verdict.error_kind,
        Some(FailureKind::NoOutput),
        "{:?}",
        m.verdict
    );

    // a finished request whose final usage (200) doubles its 100 timed tokens: cut requests
    // without usage are credited 2 tokens per chunk (capped by what their text carried), and
    // the warning says how many were; with none cut it says a cut request counts one per chunk
    let fallback = |run: &mut crate::cell::SustainedRun| {
        let r = &mut run.outcomes[0].record;
        r.cancelled = false;
        r.completed = true;
        r.usage_completion_tokens = Some(200);
        r.output_tokens = 200;
        r.untimed_tokens = 100;
    };
    let streamed = |m: &crate::measure::CellMeasurement| {
        m.warnings
            .iter()
            .find(|w| w.starts_with("usage was not streamed"))
            .cloned()
            .expect("fallback warning")
    };
    let w = streamed(&measured_cell_with(3.0, |run, _| fallback(run)));
    assert!(
        w.contains("2 request(s) cut at the window end had no usage yet and were credited 2.00 tokens per chunk"),
        "{w}"
    );
    let w = streamed(&measured_cell_with(3.0, |run, _| {
        fallback(run);
        for o in &mut run.outcomes[1..] {
            o.record.cancelled = false;
            o.record.completed = true;
        }
    }));
    assert!(
        w.contains("a request cut at the window end counts one token per chunk"),
        "{w}"
    );

    // server samples: 1 ms before the window, at its start, inside, at its end, 1 ms after
    let m = measured_cell_with(3.0, |run, _| {
        let w = run.window.expect("window");
        let client = servebench_client::HttpClient::new(
            servebench_client::Target::from_url(
                "http://127.0.0.1:9",
                None,
                servebench_client::Endpoint::Chat,
            )
            .expect("target"),
        )
        .expect("client");
        let ms1 = Duration::from_millis(1);
        let samples = [
            w.start - ms1,
            w.start,
            w.start + Duration::from_secs(5),
            w.end,
            w.end + ms1,
        ]
        .into_iter()
        .map(|at| ServerSample { at, ..sample(3.0) })
        .collect();
        run.server = Some(crate::cell::ServerWindow {
            telemetry: crate::telemetry::Telemetry::new(client, Engine::Vllm),
            start: None,
            end: None,
            samples,
        });
    });
    let server = m.server.as_ref().expect("server evidence");
    let w = m.window.as_ref().expect("window");
    assert_eq!(w.seconds, 10.0);
    let kept: Vec<f64> = server
        .samples
        .iter()
        .map(|s| s.at.saturating_duration_since(server.origin).as_secs_f64())
        .collect();
    assert_eq!(
        kept,
        vec![0.0, 5.0, 10.0],
        "samples kept (s after the window start)"
    );
}
