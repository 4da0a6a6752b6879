//! What one matrix cell measured, in domain terms ([`CellMeasurement`]), and the one mapping to
//! the seed-compatible [`CellResult`] ([`CellMeasurement::to_result`]).
//!
//! Sustained cells ([`crate::cell`]), request-count and Burst / E2E cells ([`crate::burst`])
//! each build a [`CellMeasurement`] — a pure function of their request records, window and
//! server scrapes: the request statistics ([`RequestStats`], one [`Summary`] per metric), the
//! counts, the window's totals, the stalls, the plausibility findings and the warnings. Nothing
//! else writes a cell's [`CellResult`]; the run adds run-level checks afterwards (the context
//! check of [`crate::plausibility::check_context`]).
//!
//! Statistics: NumPy's linear percentile method and the arithmetic mean of
//! [`servebench_stats`]; a [`Summary`] keeps every observation sorted, so any percentile is
//! available, not only the p50 / p90 / p99 the seed's JSON fields carry.

use std::time::Instant;

use servebench_metrics::Engine;
use servebench_results::{AggregateSource, BenchmarkMode, CellResult, CellStatus, FailureKind};
use servebench_stats::{percentile_sorted, Samples};

use crate::aggregate::RequestStats;
use crate::plan::CellSpec;
use crate::plausibility::{apply_findings, Finding, StallStats};
use crate::telemetry::{
    apply_window, scrape_times, ClientWindow, ServerSample, TimedScrape, WindowEvidence,
};

/// The observations of one metric, sorted: mean and any percentile (unit of the metric).
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    sorted: Vec<f64>,
    avg: f64,
}

impl Summary {
    /// The summary of `samples` (finite values only, as [`Samples`] keeps them); `None` when
    /// nothing was observed.
    pub fn of(samples: &Samples) -> Option<Summary> {
        let mut sorted = samples.values().to_vec();
        if sorted.is_empty() {
            return None;
        }
        sorted.sort_by(f64::total_cmp);
        // Summed in sorted order, as `servebench_stats::Summary` does (same last bit).
        let avg = sorted.iter().sum::<f64>() / sorted.len() as f64;
        Some(Summary { sorted, avg })
    }

    /// Number of observations (≥ 1).
    pub fn count(&self) -> usize {
        self.sorted.len()
    }

    /// Arithmetic mean.
    pub fn avg(&self) -> f64 {
        self.avg
    }

    /// Percentile `p` (0–100, clamped), NumPy linear method
    /// ([`servebench_stats::percentile_sorted`]).
    pub fn percentile(&self, p: f64) -> f64 {
        percentile_sorted(&self.sorted, p)
    }

    /// The observations, ascending.
    pub fn sorted(&self) -> &[f64] {
        &self.sorted
    }
}

/// How the cell ended: its `status`, `status_reason` and `error_kind` before the plausibility
/// findings (the first invalid finding of an `ok` cell makes it `invalid`).
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    /// Cell status.
    pub status: CellStatus,
    /// Why, when not `ok`.
    pub reason: String,
    /// Typed cause, when not `ok`.
    pub error_kind: Option<FailureKind>,
}

impl Verdict {
    /// An `ok` cell.
    pub fn ok() -> Verdict {
        Verdict::new(CellStatus::Ok, String::new(), None)
    }

    /// A cell with `status`, `reason` and `error_kind`.
    pub fn new(status: CellStatus, reason: String, error_kind: Option<FailureKind>) -> Verdict {
        Verdict {
            status,
            reason,
            error_kind,
        }
    }
}

/// How a sustained cell's readiness ended (fields `ready_reason`, `warmup_*`, `timeout_reason`);
/// request-count and burst cells only carry their `ready_reason`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReadyFields {
    /// `ready_reason`.
    pub reason: String,
    /// The failing condition after a readiness timeout (`warmup_timed_out`, `timeout_reason`).
    pub timed_out: Option<String>,
    /// Seconds from the cell start to the decision, when the window opened.
    pub warmup_s: Option<f64>,
    /// The client-side fallback warning (no server evidence for readiness).
    pub warning: Option<String>,
}

/// Request counts of the cell.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RequestCounts {
    /// Requests the server finished (`num_completed`).
    pub completed: u64,
    /// Requests that failed, cut ones excluded (`num_errors`).
    pub errors: u64,
    /// HTTP 429 answers (`rejected_requests`; `None` = not counted).
    pub rejected: Option<u64>,
    /// Requests retried after a 429 (`retried_requests`).
    pub retried: Option<u64>,
}

/// The measured window's client totals (a burst's "window" is its measured batch).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WindowTotals {
    /// Window length, s (`measurement_seconds`).
    pub seconds: f64,
    /// `measurement_wall_seconds` (sustained cells).
    pub wall_seconds: Option<f64>,
    /// Output tokens credited to the window (`client_output_tokens`, `total_tokens`); `None`
    /// when the cell failed before counting them.
    pub tokens: Option<u64>,
    /// Token events inside the window (`client_token_events`).
    pub token_events: Option<u64>,
    /// Requests whose usage came on every chunk (`continuous_usage_requests`).
    pub continuous: Option<u64>,
    /// Where `aggregate_tps` comes from; `None` leaves the cell's default.
    pub aggregate_source: Option<AggregateSource>,
}

/// The client's own load during the window.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ClientLoad {
    /// Process CPU seconds / window seconds (`client_cpu_util`).
    pub cpu_util: Option<f64>,
    /// Largest monitor tick lag, ms (`client_max_tick_lag_ms`).
    pub max_tick_lag_ms: Option<f64>,
    /// Mean and largest kernel read delay, ms (`client_read_delay_*`).
    pub read_delay_ms: Option<(f64, f64)>,
}

/// The server's side of the window: edge scrapes, scheduler samples inside (edges included)
/// and the client's totals they are compared with.
#[derive(Clone, Debug)]
pub struct ServerEvidence {
    /// The engine whose catalog reads the scrapes.
    pub engine: Engine,
    /// Scrape when the window opened.
    pub start: Option<TimedScrape>,
    /// Scrape when it closed.
    pub end: Option<TimedScrape>,
    /// Samples inside the window, the edges included.
    pub samples: Vec<ServerSample>,
    /// Origin of `server_scrapes` (the window start).
    pub origin: Instant,
    /// The client's side.
    pub client: ClientWindow,
}

/// What one cell measured. Built by the cell paths, mapped once by [`Self::to_result`].
#[derive(Clone, Debug)]
pub struct CellMeasurement {
    /// Coordinates.
    pub spec: CellSpec,
    /// `duration`, `request-count` or `burst-e2e`.
    pub mode: BenchmarkMode,
    /// Measured and warmup request counts of a request-count or burst cell
    /// (`request_count_target`, `warmup_request_count`).
    pub batch: Option<(u64, u64)>,
    /// Status before the findings.
    pub verdict: Verdict,
    /// Readiness.
    pub ready: ReadyFields,
    /// A readiness timeout whose failing condition is evidence of a limit (`capacity_limited`).
    pub capacity_limited: bool,
    /// Prompt tokens of the scout, else of the first window request reporting them.
    pub prompt_tokens: Option<u64>,
    /// Seconds from the cell start to its end (`wall_time`).
    pub wall_s: Option<f64>,
    /// Request counts.
    pub counts: RequestCounts,
    /// Request statistics, when the cell got as far as measuring requests.
    pub requests: Option<RequestStats>,
    /// The window's client totals.
    pub window: Option<WindowTotals>,
    /// The client's own load.
    pub client: ClientLoad,
    /// The server's side of the window (metrics in use).
    pub server: Option<ServerEvidence>,
    /// Warnings of the window (usage reporting, early stops, a descheduled client), in order.
    pub warnings: Vec<String>,
    /// Stalls inside the window (sustained cells).
    pub stalls: Option<StallStats>,
    /// Request-count and Burst / E2E cells: the steady span (`steady_state`,
    /// [`crate::steady`]).
    pub steady: Option<servebench_results::SteadyState>,
    /// Plausibility findings, in order.
    pub findings: Vec<Finding>,
    /// The headline, output tok/s of the window (`aggregate_tps`).
    pub aggregate_tps: Option<f64>,
}

impl CellMeasurement {
    /// A cell at `spec` in `mode` that measured nothing yet, with `verdict`.
    pub fn new(spec: CellSpec, mode: BenchmarkMode, verdict: Verdict) -> CellMeasurement {
        CellMeasurement {
            spec,
            mode,
            batch: None,
            verdict,
            ready: ReadyFields::default(),
            capacity_limited: false,
            prompt_tokens: None,
            wall_s: None,
            counts: RequestCounts::default(),
            requests: None,
            window: None,
            client: ClientLoad::default(),
            server: None,
            warnings: Vec::new(),
            stalls: None,
            steady: None,
            findings: Vec::new(),
            aggregate_tps: None,
        }
    }

    /// The seed-compatible result: the one mapping from a cell's measurement to [`CellResult`]
    /// (seed field names; `*_avg` / `*_p50` / `*_p90` / `*_p99` from the [`Summary`]s).
    /// Warnings in order: readiness, requests, server, window, findings.
    pub fn to_result(&self) -> CellResult {
        let mut r = CellResult {
            concurrency: self.spec.concurrency,
            context_tokens: self.spec.context,
            benchmark_mode: self.mode,
            ..Default::default()
        };
        if let Some((n, w)) = self.batch {
            r.request_count_target = n;
            r.warmup_request_count = w;
            r.aggregate_source = AggregateSource::None;
        }
        r.prompt_tokens = self.prompt_tokens;
        r.wall_time = self.wall_s;
        r.ready_reason = self.ready.reason.clone();
        r.warnings.extend(self.ready.warning.clone());
        if let Some(reason) = &self.ready.timed_out {
            r.warmup_timed_out = true;
            r.timeout_reason = reason.clone();
        }
        r.warmup_duration = self.ready.warmup_s;
        r.num_completed = self.counts.completed;
        r.num_errors = self.counts.errors;
        r.rejected_requests = self.counts.rejected;
        r.retried_requests = self.counts.retried;
        if let Some(w) = &self.window {
            r.measurement_seconds = Some(w.seconds);
            r.measurement_wall_seconds = w.wall_seconds;
            r.client_output_tokens = w.tokens;
            r.total_tokens = w.tokens;
            r.client_token_events = w.token_events;
            r.continuous_usage_requests = w.continuous;
            if let Some(source) = w.aggregate_source {
                r.aggregate_source = source;
            }
        }
        if let Some(s) = &self.requests {
            write_request_stats(&mut r, s);
        }
        r.client_cpu_util = self.client.cpu_util;
        r.client_max_tick_lag_ms = self.client.max_tick_lag_ms;
        if let Some((avg, max)) = self.client.read_delay_ms {
            r.client_read_delay_avg_ms = Some(avg);
            r.client_read_delay_max_ms = Some(max);
        }
        if let Some(sv) = &self.server {
            let evidence = WindowEvidence {
                engine: sv.engine,
                start: sv.start.as_ref(),
                end: sv.end.as_ref(),
                samples: &sv.samples,
            };
            apply_window(&mut r, &evidence, sv.client);
            if let (Some(a), Some(b)) = (&sv.start, &sv.end) {
                r.server_scrapes = Some(scrape_times(sv.origin, a, b));
            }
        }
        r.warnings.extend(self.warnings.iter().cloned());
        if let Some(st) = &self.stalls {
            r.stall_count = Some(st.count);
            r.stall_threshold_s = Some(st.threshold_s);
            r.stall_seconds = Some(st.stalled_s);
            r.stall_fraction = Some(st.fraction());
            r.stall_longest_s = (st.count > 0).then_some(st.longest_s);
        }
        r.steady_state = self.steady.clone();
        r.status = self.verdict.status;
        r.status_reason = self.verdict.reason.clone();
        r.error_kind = self.verdict.error_kind;
        if let Some(tps) = self.aggregate_tps {
            r.aggregate_tps = Some(tps);
            r.per_request_avg_tps = Some(tps / self.spec.concurrency as f64);
        }
        if self.capacity_limited {
            r.capacity_limited = true;
        }
        apply_findings(&mut r, self.findings.clone());
        r
    }
}

/// Writes the request statistics' fields of `cell` (part of [`CellMeasurement::to_result`]).
pub(crate) fn write_request_stats(cell: &mut CellResult, s: &RequestStats) {
    type Four = (Option<f64>, Option<f64>, Option<f64>, Option<f64>);
    let four = |x: &Option<Summary>| -> Four {
        match x {
            Some(x) => (
                Some(x.avg()),
                Some(x.percentile(50.0)),
                Some(x.percentile(90.0)),
                Some(x.percentile(99.0)),
            ),
            None => (None, None, None, None),
        }
    };
    (cell.ttft_avg, cell.ttft_p50, cell.ttft_p90, cell.ttft_p99) = four(&s.ttft);
    (
        cell.time_to_second_token_avg,
        cell.time_to_second_token_p50,
        cell.time_to_second_token_p90,
        cell.time_to_second_token_p99,
    ) = four(&s.ttst);
    (
        cell.request_latency_avg,
        cell.request_latency_p50,
        cell.request_latency_p90,
        cell.request_latency_p99,
    ) = four(&s.latency);
    (
        cell.inter_token_latency_avg,
        cell.inter_token_latency_p50,
        cell.inter_token_latency_p90,
        cell.inter_token_latency_p99,
    ) = four(&s.itl);
    (
        cell.output_tps_per_user_avg,
        cell.output_tps_per_user_p50,
        cell.output_tps_per_user_p90,
        cell.output_tps_per_user_p99,
    ) = four(&s.output_tps);
    (
        cell.e2e_output_tps_per_user_avg,
        cell.e2e_output_tps_per_user_p50,
        cell.e2e_output_tps_per_user_p90,
        cell.e2e_output_tps_per_user_p99,
    ) = four(&s.e2e_output_tps);
    (
        cell.chunk_inter_token_latency_avg,
        cell.chunk_inter_token_latency_p50,
        cell.chunk_inter_token_latency_p90,
        cell.chunk_inter_token_latency_p99,
    ) = four(&s.chunk_itl);
    cell.itl_gaps = s.gaps.as_ref().and_then(crate::gaps::GapStats::summary);
    cell.peak_output_tps_1s = s
        .gaps
        .as_ref()
        .and_then(crate::gaps::GapStats::peak_output_tps_1s);
    cell.input_seq_len_avg = s.input_len.as_ref().map(Summary::avg);
    (
        cell.output_seq_len_avg,
        cell.output_seq_len_p50,
        cell.output_seq_len_p90,
        cell.output_seq_len_p99,
    ) = four(&s.output_len);
    (
        cell.time_to_first_content_avg,
        cell.time_to_first_content_p50,
        cell.time_to_first_content_p90,
        cell.time_to_first_content_p99,
    ) = four(&s.ttfc);
    cell.reasoning_tokens_avg = s.reasoning_tokens.as_ref().map(Summary::avg);
    cell.early_stop_requests = Some(s.early_stops);
    if let Some(t) = &s.timings {
        cell.timings_requests = Some(t.requests);
        cell.timings_predicted_per_second_avg = t.predicted_per_second_avg;
        cell.timings_prompt_n_avg = t.prompt_n_avg;
        cell.timings_cache_n_avg = t.cache_n_avg;
        cell.timings_draft_acceptance_rate = t.draft_acceptance_rate;
    }
    cell.warnings.extend(s.warnings());
    cell.request_count = s.generated;
    cell.completed_request_count = s.completed;
    cell.request_samples = s.samples.clone();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_gives_the_mean_and_any_linear_percentile() {
        let s = Summary::of(&[4.0, 1.0, 3.0, 2.0, f64::NAN].into_iter().collect()).unwrap();
        assert_eq!(s.count(), 4);
        assert_eq!(s.sorted(), &[1.0, 2.0, 3.0, 4.0]);
        assert_eq!(s.avg(), 2.5);
        assert_eq!(s.percentile(0.0), 1.0);
        assert_eq!(s.percentile(100.0), 4.0);
        // k = 3 · 0.95 = 2.85: 3 + 0.85 · (4 − 3).
        assert!((s.percentile(95.0) - 3.85).abs() < 1e-12);
        assert!((s.percentile(50.0) - 2.5).abs() < 1e-12);
        assert_eq!(Summary::of(&Samples::new()), None);
    }

    #[test]
    fn summary_matches_the_stats_crate() {
        let v = [0.3, 0.1, 0.7, 0.2, 0.9, 0.4];
        let ours = Summary::of(&v.iter().copied().collect()).unwrap();
        let theirs = servebench_stats::Summary::of(&v).unwrap();
        assert_eq!(ours.avg(), theirs.avg);
        assert_eq!(ours.percentile(50.0), theirs.p50);
        assert_eq!(ours.percentile(90.0), theirs.p90);
        assert_eq!(ours.percentile(99.0), theirs.p99);
    }

    fn spec() -> CellSpec {
        CellSpec {
            concurrency: 4,
            context: 0,
        }
    }

    #[test]
    fn mapping_applies_the_first_invalid_finding_to_an_ok_cell_only() {
        let finding = |invalid, msg: &str| Finding {
            kind: FailureKind::StreamStalls,
            invalid,
            message: msg.into(),
        };
        let mut m = CellMeasurement::new(spec(), BenchmarkMode::Duration, Verdict::ok());
        m.aggregate_tps = Some(100.0);
        m.warnings.push("window".into());
        m.findings = vec![
            finding(false, "warn"),
            finding(true, "bad"),
            finding(true, "worse"),
        ];
        let r = m.to_result();
        assert_eq!(r.status, CellStatus::Invalid);
        assert_eq!(r.status_reason, "bad");
        assert_eq!(r.warnings, vec!["window", "warn", "worse"]);
        assert_eq!(r.warning_kinds, vec![FailureKind::StreamStalls]);
        assert_eq!(r.per_request_avg_tps, Some(25.0));
        m.verdict = Verdict::new(CellStatus::Error, "scout".into(), None);
        let r = m.to_result();
        assert_eq!(r.status, CellStatus::Error);
        assert_eq!(r.status_reason, "scout");
        assert_eq!(r.warnings.len(), 4);
    }

    #[test]
    fn mapping_of_a_batch_cell() {
        let mut m = CellMeasurement::new(spec(), BenchmarkMode::RequestCount, Verdict::ok());
        m.batch = Some((32, 4));
        let r = m.to_result();
        assert_eq!((r.request_count_target, r.warmup_request_count), (32, 4));
        assert_eq!(r.aggregate_source, AggregateSource::None);
        assert_eq!(r.measurement_seconds, None);
        m.window = Some(WindowTotals {
            seconds: 2.0,
            wall_seconds: None,
            tokens: Some(10),
            token_events: Some(9),
            continuous: None,
            aggregate_source: Some(AggregateSource::OpenaiCompletedUsage),
        });
        let r = m.to_result();
        assert_eq!(r.aggregate_source, AggregateSource::OpenaiCompletedUsage);
        assert_eq!(
            (r.client_output_tokens, r.total_tokens),
            (Some(10), Some(10))
        );
        assert_eq!(r.client_token_events, Some(9));
    }
}
