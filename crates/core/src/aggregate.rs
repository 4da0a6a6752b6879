//! Per-request samples and per-cell request statistics (seed spec §4.1–4.2, definitions in the
//! docs of [`servebench_results::RequestSample`]).
//!
//! * "generated" requests (output tokens > 0) feed TTFT, TTST, ITL, chunk ITL, output tok/s per
//!   user and output lengths; "completed" requests (server finished them) feed request latency and
//!   E2E tok/s per user (seed §4.2).
//! * Percentiles use NumPy's linear method ([`servebench_stats`]); unlike the seed, measured zeros
//!   are kept and unmeasured values are `null`, never 0.

use std::time::Instant;

use servebench_results::RequestSample;
use servebench_sse::RequestRecord;
use servebench_stats::Samples;

use crate::measure::Summary;

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

/// Averages of the llama.cpp `timings` objects of the requests that carried one.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServerTimings {
    /// Requests that carried `timings`.
    pub requests: u64,
    /// Mean of `predicted_per_second` (else `predicted_n / predicted_ms`), tok/s.
    pub predicted_per_second_avg: Option<f64>,
    /// Mean `prompt_n`, tokens.
    pub prompt_n_avg: Option<f64>,
    /// Mean `cache_n`, tokens.
    pub cache_n_avg: Option<f64>,
    /// Σ accepted / Σ drafted over the requests reporting both (`None` without drafts).
    pub draft_acceptance_rate: Option<f64>,
}

impl ServerTimings {
    /// The averages over `records`; `None` when no request carried `timings`.
    fn of(records: &[&RequestRecord]) -> Option<ServerTimings> {
        let timed: Vec<servebench_sse::Timings> =
            records.iter().filter_map(|r| r.timings).collect();
        if timed.is_empty() {
            return None;
        }
        let mean = |f: &dyn Fn(&servebench_sse::Timings) -> Option<f64>| {
            let v: Vec<f64> = timed.iter().filter_map(f).collect();
            (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
        };
        let (mut drafted, mut accepted) = (0u64, 0u64);
        for t in &timed {
            if let (Some(n), Some(a)) = (t.draft_n, t.draft_n_accepted) {
                drafted += n;
                accepted += a.min(n);
            }
        }
        Some(ServerTimings {
            requests: timed.len() as u64,
            predicted_per_second_avg: mean(&|t| {
                t.predicted_per_second
                    .or_else(|| t.predicted_tokens_per_s())
            }),
            prompt_n_avg: mean(&|t| t.prompt_n.map(|n| n as f64)),
            cache_n_avg: mean(&|t| t.cache_n.map(|n| n as f64)),
            draft_acceptance_rate: (drafted > 0).then(|| accepted as f64 / drafted as f64),
        })
    }
}

/// The request statistics of one cell: a [`Summary`] per metric over the requests that feed it
/// (module docs), counts, llama.cpp timings and every generated request's sample. A pure
/// function of the records ([`RequestStats::of`]); [`crate::measure`] maps it to the seed's
/// flat `*_avg` / `*_pNN` fields.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RequestStats {
    /// Time to first token, s (generated requests).
    pub ttft: Option<Summary>,
    /// Time to second token, s (generated).
    pub ttst: Option<Summary>,
    /// Per-request mean inter-token latency per token, s (generated).
    pub itl: Option<Summary>,
    /// Per-request mean gap between token-carrying SSE events, s (generated).
    pub chunk_itl: Option<Summary>,
    /// Time to first content token, s (generated).
    pub ttfc: Option<Summary>,
    /// Reasoning tokens per request, clamped to the completion total (generated).
    pub reasoning_tokens: Option<Summary>,
    /// Decode output tok/s per request (generated).
    pub output_tps: Option<Summary>,
    /// Request latency, s (completed requests).
    pub latency: Option<Summary>,
    /// End-to-end output tok/s per request (completed).
    pub e2e_output_tps: Option<Summary>,
    /// Prompt tokens per request (completed, or generated when none completed).
    pub input_len: Option<Summary>,
    /// Output tokens per request (completed, or generated when none completed).
    pub output_len: Option<Summary>,
    /// Requests that produced at least one output token.
    pub generated: u64,
    /// Of those, requests the server finished.
    pub completed: u64,
    /// Completed requests whose `finish_reason` was not `length`.
    pub early_stops: u64,
    /// llama.cpp `timings` averages, when a request carried them.
    pub timings: Option<ServerTimings>,
    /// Requests whose reasoning count exceeded their completion total (clamped).
    pub reasoning_clamped: u64,
    /// The exported sample of every generated request, in record order.
    pub samples: Vec<RequestSample>,
    /// Every per-token gap of the generated requests and their peak 1 s output
    /// ([`crate::gaps`]).
    pub gaps: Option<crate::gaps::GapStats>,
}

impl RequestStats {
    /// The statistics of `records` (already restricted to the requests that belong to the
    /// cell's statistics). `window_start`: origin of the samples' `sent_at_window_s`.
    pub fn of(records: &[&RequestRecord], window_start: Option<Instant>) -> RequestStats {
        let generated: Vec<&RequestRecord> = records
            .iter()
            .copied()
            .filter(|r| r.output_tokens > 0)
            .collect();
        let completed: Vec<&RequestRecord> =
            generated.iter().copied().filter(|r| r.completed).collect();
        let col = |rs: &[&RequestRecord], f: &dyn Fn(&RequestRecord) -> Option<f64>| {
            let mut s = Samples::new();
            for r in rs {
                s.push_opt(f(r));
            }
            Summary::of(&s)
        };
        let len_src: &[&RequestRecord] = if completed.is_empty() {
            &generated
        } else {
            &completed
        };
        RequestStats {
            ttft: col(&generated, &|r| r.ttft_s()),
            ttst: col(&generated, &|r| r.ttst_s()),
            itl: col(&generated, &|r| r.itl_s()),
            chunk_itl: col(&generated, &|r| r.chunk_itl_s()),
            ttfc: col(&generated, &|r| r.ttfc_s()),
            reasoning_tokens: col(&generated, &|r| {
                r.reasoning_tokens.map(|t| t.min(r.output_tokens) as f64)
            }),
            output_tps: col(&generated, &|r| r.output_tps_per_user()),
            latency: col(&completed, &|r| r.latency_s()),
            e2e_output_tps: col(&completed, &|r| r.e2e_output_tps_per_user()),
            input_len: col(len_src, &|r| r.prompt_tokens.map(|v| v as f64)),
            output_len: col(len_src, &|r| Some(r.output_tokens as f64)),
            generated: generated.len() as u64,
            completed: completed.len() as u64,
            early_stops: completed
                .iter()
                .filter(|r| r.finish_reason.as_deref().is_some_and(|f| f != "length"))
                .count() as u64,
            timings: ServerTimings::of(&generated),
            reasoning_clamped: generated
                .iter()
                .filter(|r| r.reasoning_tokens_clamped)
                .count() as u64,
            samples: generated
                .iter()
                .map(|r| sample_of(r, window_start))
                .collect(),
            gaps: crate::gaps::GapStats::of(generated.iter().copied()),
        }
    }

    /// The cell warnings the requests themselves call for (a clamped reasoning count).
    pub fn warnings(&self) -> Vec<String> {
        let n = self.reasoning_clamped;
        if n == 0 {
            return Vec::new();
        }
        vec![format!(
            "the server reported more reasoning tokens than completion tokens in {n} request(s):              reasoning_tokens clamped to the completion total"
        )]
    }
}

#[cfg(test)]
mod tests {
    //! Cell statistics from crafted requests with known times (found by `cargo mutants`,
    //! docs/mutants.md).

    use std::time::Duration;

    use servebench_results::CellResult;
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

    /// The request fields of a cell whose statistics are `records`.
    fn cell_of(records: &[&RequestRecord], window_start: Option<Instant>) -> CellResult {
        let mut cell = CellResult::default();
        crate::measure::write_request_stats(&mut cell, &RequestStats::of(records, window_start));
        cell
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

        let cell = cell_of(&[&r1, &r2, &r3, &r4], Some(ms(base, 5)));
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
        let cell = cell_of(&[&r], None);
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
        let cell = cell_of(&[&plain], None);
        assert_eq!(cell.timings_requests, None);
        assert!(cell.warnings.is_empty());
    }
}
