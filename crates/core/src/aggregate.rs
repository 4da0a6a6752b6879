//! Per-request samples and per-cell request statistics (seed spec §4.1–4.2, definitions in the
//! docs of [`servebench_results::RequestSample`]).
//!
//! * "generated" requests (output tokens > 0) feed TTFT, TTST, ITL, chunk ITL, output tok/s per
//!   user and output lengths; "completed" requests (server finished them) feed request latency and
//!   E2E tok/s per user (seed §4.2).
//! * Percentiles use NumPy's linear method ([`servebench_stats`]); unlike the seed, measured zeros
//!   are kept and unmeasured values are `null`, never 0.

use std::time::Instant;

use servebench_results::{CellResult, RequestSample};
use servebench_sse::RequestRecord;
use servebench_stats::Samples;

/// Signed seconds from `origin` to `t`.
pub fn signed_secs(t: Instant, origin: Instant) -> f64 {
    if t >= origin {
        (t - origin).as_secs_f64()
    } else {
        -(origin - t).as_secs_f64()
    }
}

/// The exported sample of one request. `window_start`: origin for `sent_at_window_s`.
pub fn sample_of(r: &RequestRecord, window_start: Option<Instant>) -> RequestSample {
    RequestSample {
        ttft: r.ttft_s(),
        time_to_second_token: r.ttst_s(),
        latency: r.latency_s(),
        inter_token_latency_avg: r.itl_s(),
        chunk_inter_token_latency_avg: r.chunk_itl_s(),
        input_tokens: r.prompt_tokens,
        output_tokens: r.output_tokens,
        output_tps_per_user: r.output_tps_per_user(),
        e2e_output_tps_per_user: r.e2e_output_tps_per_user(),
        completed: r.completed,
        cancelled: r.cancelled,
        token_events: Some(r.token_events),
        continuous_usage: Some(r.continuous_usage),
        cached_tokens: r.cached_tokens,
        finish_reason: r.finish_reason.clone(),
        response_id: r.response_id.clone(),
        sent_at_window_s: window_start.map(|w| signed_secs(r.sent_at, w)),
        time_to_first_content: r.ttfc_s(),
        reasoning_tokens: r.reasoning_tokens.map(|t| t.min(r.output_tokens)),
        untimed_output_tokens: Some(r.untimed_tokens),
        timings_prompt_n: r.timings.and_then(|t| t.prompt_n),
        timings_cache_n: r.timings.and_then(|t| t.cache_n),
        timings_predicted_n: r.timings.and_then(|t| t.predicted_n),
        timings_predicted_per_second: r.timings.and_then(|t| {
            t.predicted_per_second
                .or_else(|| t.predicted_tokens_per_s())
        }),
        timings_draft_n: r.timings.and_then(|t| t.draft_n),
        timings_draft_n_accepted: r.timings.and_then(|t| t.draft_n_accepted),
        draft_acceptance_rate: r.timings.and_then(|t| t.draft_acceptance_rate()),
    }
}

/// Fills the llama.cpp `timings` fields of `cell` from the requests that carried them, and
/// warns when a server's reasoning count exceeded its completion total (clamped).
fn fill_server_request_fields(cell: &mut CellResult, records: &[&RequestRecord]) {
    let timed: Vec<servebench_sse::Timings> = records.iter().filter_map(|r| r.timings).collect();
    if !timed.is_empty() {
        let mean = |f: &dyn Fn(&servebench_sse::Timings) -> Option<f64>| {
            let v: Vec<f64> = timed.iter().filter_map(f).collect();
            (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
        };
        cell.timings_requests = Some(timed.len() as u64);
        cell.timings_predicted_per_second_avg = mean(&|t| {
            t.predicted_per_second
                .or_else(|| t.predicted_tokens_per_s())
        });
        cell.timings_prompt_n_avg = mean(&|t| t.prompt_n.map(|n| n as f64));
        cell.timings_cache_n_avg = mean(&|t| t.cache_n.map(|n| n as f64));
        let (mut drafted, mut accepted) = (0u64, 0u64);
        for t in &timed {
            if let (Some(n), Some(a)) = (t.draft_n, t.draft_n_accepted) {
                drafted += n;
                accepted += a.min(n);
            }
        }
        cell.timings_draft_acceptance_rate =
            (drafted > 0).then(|| accepted as f64 / drafted as f64);
    }
    let clamped = records
        .iter()
        .filter(|r| r.reasoning_tokens_clamped)
        .count();
    if clamped > 0 {
        cell.warnings.push(format!(
            "the server reported more reasoning tokens than completion tokens in {clamped} request(s):              reasoning_tokens clamped to the completion total"
        ));
    }
}

/// Writes avg/p50/p90/p99 of `s` through `set` (all `None` when empty).
fn put(s: &Samples, mut set: impl FnMut(Option<f64>, Option<f64>, Option<f64>, Option<f64>)) {
    match s.summary() {
        Some(x) => set(Some(x.avg), Some(x.p50), Some(x.p90), Some(x.p99)),
        None => set(None, None, None, None),
    }
}

/// Fills the request statistics of `cell` from `records` (already restricted to the requests
/// that belong to the cell's statistics) and stores their samples.
pub fn fill_request_stats(
    cell: &mut CellResult,
    records: &[&RequestRecord],
    window_start: Option<Instant>,
) {
    let generated: Vec<&RequestRecord> = records
        .iter()
        .copied()
        .filter(|r| r.output_tokens > 0)
        .collect();
    let completed: Vec<&RequestRecord> =
        generated.iter().copied().filter(|r| r.completed).collect();

    let col = |rs: &[&RequestRecord], f: &dyn Fn(&RequestRecord) -> Option<f64>| -> Samples {
        let mut s = Samples::new();
        for r in rs {
            s.push_opt(f(r));
        }
        s
    };
    let ttft = col(&generated, &|r| r.ttft_s());
    let ttst = col(&generated, &|r| r.ttst_s());
    let itl = col(&generated, &|r| r.itl_s());
    let citl = col(&generated, &|r| r.chunk_itl_s());
    let ttfc = col(&generated, &|r| r.ttfc_s());
    let reasoning = col(&generated, &|r| {
        r.reasoning_tokens.map(|t| t.min(r.output_tokens) as f64)
    });
    let tps = col(&generated, &|r| r.output_tps_per_user());
    let lat = col(&completed, &|r| r.latency_s());
    let e2e = col(&completed, &|r| r.e2e_output_tps_per_user());
    let len_src: &[&RequestRecord] = if completed.is_empty() {
        &generated
    } else {
        &completed
    };
    let isl = col(len_src, &|r| r.prompt_tokens.map(|v| v as f64));
    let osl = col(len_src, &|r| Some(r.output_tokens as f64));

    put(&ttft, |a, b, c, d| {
        (cell.ttft_avg, cell.ttft_p50, cell.ttft_p90, cell.ttft_p99) = (a, b, c, d)
    });
    put(&ttst, |a, b, c, d| {
        (
            cell.time_to_second_token_avg,
            cell.time_to_second_token_p50,
            cell.time_to_second_token_p90,
            cell.time_to_second_token_p99,
        ) = (a, b, c, d)
    });
    put(&lat, |a, b, c, d| {
        (
            cell.request_latency_avg,
            cell.request_latency_p50,
            cell.request_latency_p90,
            cell.request_latency_p99,
        ) = (a, b, c, d)
    });
    put(&itl, |a, b, c, d| {
        (
            cell.inter_token_latency_avg,
            cell.inter_token_latency_p50,
            cell.inter_token_latency_p90,
            cell.inter_token_latency_p99,
        ) = (a, b, c, d)
    });
    put(&tps, |a, b, c, d| {
        (
            cell.output_tps_per_user_avg,
            cell.output_tps_per_user_p50,
            cell.output_tps_per_user_p90,
            cell.output_tps_per_user_p99,
        ) = (a, b, c, d)
    });
    put(&e2e, |a, b, c, d| {
        (
            cell.e2e_output_tps_per_user_avg,
            cell.e2e_output_tps_per_user_p50,
            cell.e2e_output_tps_per_user_p90,
            cell.e2e_output_tps_per_user_p99,
        ) = (a, b, c, d)
    });
    put(&citl, |a, b, c, d| {
        (
            cell.chunk_inter_token_latency_avg,
            cell.chunk_inter_token_latency_p50,
            cell.chunk_inter_token_latency_p90,
            cell.chunk_inter_token_latency_p99,
        ) = (a, b, c, d)
    });
    cell.input_seq_len_avg = isl.summary().map(|s| s.avg);
    put(&osl, |a, b, c, d| {
        (
            cell.output_seq_len_avg,
            cell.output_seq_len_p50,
            cell.output_seq_len_p90,
            cell.output_seq_len_p99,
        ) = (a, b, c, d)
    });
    put(&ttfc, |a, b, c, d| {
        (
            cell.time_to_first_content_avg,
            cell.time_to_first_content_p50,
            cell.time_to_first_content_p90,
            cell.time_to_first_content_p99,
        ) = (a, b, c, d)
    });
    cell.reasoning_tokens_avg = reasoning.summary().map(|s| s.avg);
    cell.early_stop_requests = Some(
        completed
            .iter()
            .filter(|r| r.finish_reason.as_deref().is_some_and(|f| f != "length"))
            .count() as u64,
    );
    fill_server_request_fields(cell, &generated);
    cell.request_count = generated.len() as u64;
    cell.completed_request_count = completed.len() as u64;
    cell.request_samples = generated
        .iter()
        .map(|r| sample_of(r, window_start))
        .collect();
}

#[cfg(test)]
mod tests {
    //! Cell statistics from crafted requests with known times (found by `cargo mutants`,
    //! docs/mutants.md).

    use std::time::Duration;

    use servebench_sse::{decode, RequestTracker};

    use super::*;

    const TOK: &str = r#"{"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}]}"#;

    fn ms(base: Instant, m: u64) -> Instant {
        base + Duration::from_millis(m)
    }

    /// A request sent at `sent` ms whose payloads arrive at the given ms; ended (cleanly, or cut
    /// when `cancelled`) 1 ms after the last one.
    fn rec(base: Instant, sent: u64, events: &[(u64, &str)], cancelled: bool) -> RequestRecord {
        let mut t = RequestTracker::new(ms(base, sent));
        for (m, p) in events {
            t.apply(&decode(p), ms(base, *m));
        }
        let end = ms(base, events.last().map_or(sent, |e| e.0) + 1);
        t.finish(end, !cancelled, cancelled)
    }

    fn approx(a: Option<f64>, b: f64) {
        let a = a.expect("a value");
        assert!((a - b).abs() < 1e-9, "{a} != {b}");
    }

    #[test]
    fn signed_seconds_both_ways() {
        let o = Instant::now();
        assert_eq!(signed_secs(o + Duration::from_millis(1500), o), 1.5);
        assert_eq!(signed_secs(o, o + Duration::from_millis(250)), -0.25);
        assert_eq!(signed_secs(o, o), 0.0);
    }

    #[test]
    fn request_stats_use_generated_and_completed_requests() {
        let base = Instant::now();
        // r1: sent 0, tokens at 100/120/140 ms, stop, llama.cpp timings (draft 12 of 10: clamped).
        let r1 = rec(
            base,
            0,
            &[
                (100, TOK),
                (120, TOK),
                (140, TOK),
                (
                    140,
                    r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"timings":{"prompt_n":20,"cache_n":4,"predicted_n":3,"predicted_per_second":70.0,"draft_n":10,"draft_n_accepted":12}}"#,
                ),
                (
                    141,
                    r#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":3}}"#,
                ),
                (141, "[DONE]"),
            ],
            false,
        );
        // r2: sent 10, tokens at 60/110 ms, length, timings (draft 6 of 10).
        let r2 = rec(
            base,
            10,
            &[
                (60, TOK),
                (110, TOK),
                (
                    110,
                    r#"{"choices":[{"index":0,"delta":{},"finish_reason":"length"}],"timings":{"prompt_n":10,"cache_n":0,"predicted_n":2,"predicted_per_second":50.0,"draft_n":10,"draft_n_accepted":6}}"#,
                ),
                (110, "[DONE]"),
            ],
            false,
        );
        // r3: sent 20, tokens at 220/230 ms, cut by the window end: generated, not completed.
        let r3 = rec(base, 20, &[(220, TOK), (230, TOK)], true);
        // r4: no output token: failed, not part of any statistic.
        let r4 = rec(base, 30, &[(40, "[DONE]")], false);
        assert!(r1.completed && r2.completed && !r3.completed && r4.failed());

        let mut cell = CellResult::default();
        fill_request_stats(&mut cell, &[&r1, &r2, &r3, &r4], Some(ms(base, 5)));
        assert_eq!(cell.request_count, 3);
        assert_eq!(cell.completed_request_count, 2);
        // TTFT over generated requests: 0.1, 0.05, 0.2 s.
        approx(cell.ttft_avg, 0.35 / 3.0);
        approx(cell.ttft_p50, 0.1);
        approx(cell.ttft_p90, 0.18);
        // Latency over completed requests only: 0.14, 0.1 s.
        approx(cell.request_latency_avg, 0.12);
        approx(cell.request_latency_p99, 0.1 + 0.99 * 0.04);
        // ITL: 0.04 / 2, 0.05 / 1, 0.01 / 1 s.
        approx(cell.inter_token_latency_avg, 0.08 / 3.0);
        approx(cell.output_tps_per_user_p50, 1.0 / 0.02);
        approx(
            cell.e2e_output_tps_per_user_avg,
            (3.0 / 0.14 + 2.0 / 0.1) / 2.0,
        );
        // TTST: 0.02, 0.05, 0.01 s.
        approx(cell.time_to_second_token_p50, 0.02);
        // Lengths from completed requests: 3 and 2 tokens; prompt only r1 reported (5).
        approx(cell.output_seq_len_avg, 2.5);
        approx(cell.input_seq_len_avg, 5.0);
        assert_eq!(
            cell.early_stop_requests,
            Some(1),
            "r1 stopped; r2 hit the length"
        );
        // llama.cpp timings of r1 and r2.
        assert_eq!(cell.timings_requests, Some(2));
        approx(cell.timings_predicted_per_second_avg, 60.0);
        approx(cell.timings_prompt_n_avg, 15.0);
        approx(cell.timings_cache_n_avg, 2.0);
        approx(cell.timings_draft_acceptance_rate, (10.0 + 6.0) / 20.0);
        assert!(cell.warnings.is_empty(), "{:?}", cell.warnings);
        // Samples: one per generated request.
        assert_eq!(cell.request_samples.len(), 3);
        let s = &cell.request_samples[0];
        approx(s.ttft, 0.1);
        approx(s.sent_at_window_s, -0.005);
        assert_eq!(s.output_tokens, 3);
        assert_eq!(s.input_tokens, Some(5));
        approx(s.timings_predicted_per_second, 70.0);
        approx(s.draft_acceptance_rate, 1.0);
        assert!(s.completed && !cell.request_samples[2].completed);
        assert!(cell.request_samples[2].cancelled);
    }

    #[test]
    fn server_fields_without_drafts_and_clamped_reasoning() {
        let base = Instant::now();
        // Timings without a rate or draft counts (rate computed: 4 / 0.1 s), and a reasoning
        // count (9) above the completion total (2).
        let r = rec(
            base,
            0,
            &[
                (10, TOK),
                (20, TOK),
                (
                    20,
                    r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"completion_tokens":2,"reasoning_tokens":9},"timings":{"predicted_n":4,"predicted_ms":100.0}}"#,
                ),
                (20, "[DONE]"),
            ],
            false,
        );
        let mut cell = CellResult::default();
        fill_request_stats(&mut cell, &[&r], None);
        assert_eq!(cell.timings_requests, Some(1));
        assert_eq!(
            cell.early_stop_requests,
            Some(1),
            "stopped before the length"
        );
        approx(cell.timings_predicted_per_second_avg, 40.0);
        assert_eq!(cell.timings_prompt_n_avg, None);
        assert_eq!(
            cell.timings_draft_acceptance_rate, None,
            "no speculation reported"
        );
        approx(cell.reasoning_tokens_avg, 2.0);
        assert_eq!(cell.warnings.len(), 1, "{:?}", cell.warnings);
        assert!(cell.warnings[0].contains("in 1 request(s)"));
        assert_eq!(cell.request_samples[0].sent_at_window_s, None);
        // No timings at all: the fields stay unset.
        let plain = rec(base, 0, &[(10, TOK), (10, "[DONE]")], false);
        let mut cell = CellResult::default();
        fill_request_stats(&mut cell, &[&plain], None);
        assert_eq!(cell.timings_requests, None);
        assert!(cell.warnings.is_empty());
    }
}
