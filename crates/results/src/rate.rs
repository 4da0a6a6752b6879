//! Open-loop request-rate rows (`rate_results`): one row per offered rate λ (and context), written
//! by `servebench run --request-rate …` (and by `--rate-search`, one row per probed rate).
//!
//! Definitions (what is computed, from which timestamps) are in `docs/metrics.md`
//! ("Open-loop request rate"); the fields below give units. Every time is in **s**, every rate in
//! **req/s** unless the name says tok/s; `null` = not measured.

use serde::{Deserialize, Serialize};

use crate::CellStatus;

/// The arrival process of a row (`--arrival`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArrivalProcess {
    /// Exponential gaps with mean 1/λ.
    #[default]
    Poisson,
    /// Gaps of exactly 1/λ.
    Constant,
    /// Gamma gaps, shape K (`burstiness`), mean 1/λ.
    Gamma,
}

impl ArrivalProcess {
    /// The JSON name.
    pub fn as_str(self) -> &'static str {
        match self {
            ArrivalProcess::Poisson => "poisson",
            ArrivalProcess::Constant => "constant",
            ArrivalProcess::Gamma => "gamma",
        }
    }
}

/// The latency an SLO constrains (`--slo metric_pNN=…`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SloMetric {
    /// Time to first token, from the intended send time, s.
    #[default]
    Ttft,
    /// Per-request mean inter-token latency, s.
    Itl,
    /// Per-request time per output token (vLLM's TPOT), s.
    Tpot,
    /// End-to-end latency (last token), from the intended send time, s.
    E2e,
}

impl SloMetric {
    /// The name used in `--slo` and in the JSON (`ttft`, `itl`, `tpot`, `e2e`).
    pub fn as_str(self) -> &'static str {
        match self {
            SloMetric::Ttft => "ttft",
            SloMetric::Itl => "itl",
            SloMetric::Tpot => "tpot",
            SloMetric::E2e => "e2e",
        }
    }

    /// From its name; `None` for anything else.
    pub fn from_name(s: &str) -> Option<SloMetric> {
        Some(match s {
            "ttft" => SloMetric::Ttft,
            "itl" => SloMetric::Itl,
            "tpot" => SloMetric::Tpot,
            "e2e" => SloMetric::E2e,
            _ => return None,
        })
    }
}

/// Why a rate search ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SearchStop {
    /// The bracket is within the resolution.
    Resolution,
    /// The probe budget is spent.
    MaxProbes,
    /// Halving reached start / 1024 without a passing rate.
    MinRate,
    /// Every rate up to the maximum passed.
    MaxRate,
    /// A probe was interrupted (or the search has not ended yet).
    #[default]
    Interrupted,
}

impl SearchStop {
    /// The JSON name.
    pub fn as_str(self) -> &'static str {
        match self {
            SearchStop::Resolution => "resolution",
            SearchStop::MaxProbes => "max_probes",
            SearchStop::MinRate => "min_rate",
            SearchStop::MaxRate => "max_rate",
            SearchStop::Interrupted => "interrupted",
        }
    }
}

/// One open-loop row: the requests of one arrival schedule at offered rate λ.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RateRow {
    /// Prompt context of the requests, tokens (0 = a short prompt).
    pub context_tokens: u64,
    /// Offered rate λ, req/s (`--request-rate`, or the rate a search probed).
    pub offered_rate: f64,
    /// Arrival process: `constant`, `poisson` or `gamma`.
    pub arrival: ArrivalProcess,
    /// Gamma shape K (`--burstiness`; 1 = Poisson); null for `constant`.
    pub burstiness: Option<f64>,
    /// Client-side concurrency cap (`--max-concurrency`); null = none.
    pub max_concurrency: Option<u64>,
    /// Length of the arrival schedule, s (`--duration`).
    pub duration: f64,
    /// Seed of the arrival schedule (`--seed`, else drawn); the same seed gives the same schedule.
    pub seed: u64,
    /// Arrivals in the schedule (requests the run was asked to send).
    pub requests_scheduled: u64,
    /// Requests actually sent.
    pub requests_sent: u64,
    /// Sent requests that completed (an answer with ≥ 1 token and a clean end).
    pub requests_completed: u64,
    /// Sent requests that failed (HTTP error, connection error, timeout, malformed stream).
    pub requests_failed: u64,
    /// Sent requests that neither completed nor failed: cut at the row's deadline (schedule +
    /// drain) or by an interruption.
    pub requests_cut: u64,
    /// Arrivals never sent: the concurrency cap was still full when the schedule ended, or the
    /// run was interrupted. Counted, never dropped silently.
    pub requests_not_sent: u64,
    /// Realised rate of the drawn schedule, `(n − 1) / (last intended − first intended)`, req/s
    /// (Poisson and gamma schedules differ from λ by sampling noise).
    pub schedule_rate: Option<f64>,
    /// Rate at which requests really left the client,
    /// `(sent − 1) / (last sent_at − first sent_at)`, req/s.
    pub achieved_rate: Option<f64>,
    /// `1 − achieved_rate / schedule_rate` (fraction): ≈ 0 when the client sent the drawn
    /// schedule on time, positive when it sent slower (a full concurrency cap, a starved client).
    /// Against the schedule's own rate, so a Poisson draw's sampling noise is not a shortfall
    /// (`schedule_rate` vs `offered_rate` shows that noise).
    pub shortfall: Option<f64>,
    /// Completed requests / (last end − first intended send), req/s (request throughput).
    pub completed_rate: Option<f64>,
    /// Median schedule lag `sent_at − intended_at`, s (client health: ≈ 0 when the client keeps
    /// up; grows when a concurrency cap holds arrivals back or the client is starved).
    pub schedule_lag_p50: Option<f64>,
    /// 99th percentile of the schedule lag, s.
    pub schedule_lag_p99: Option<f64>,
    /// Largest schedule lag, s.
    pub schedule_lag_max: Option<f64>,
    /// TTFT from the send time (`first token − sent_at`), s.
    pub ttft: Option<RateSummary>,
    /// TTFT from the intended send time (`first token − intended_at`; coordinated-omission safe).
    pub ttft_from_intended: Option<RateSummary>,
    /// Per-request mean inter-token latency, s (`(last − first token) / (tokens − 1)`).
    pub itl: Option<RateSummary>,
    /// Per-request time per output token, s (`(end − first token) / (tokens − 1)`, vLLM bench
    /// serve's TPOT with the stream's end as the request's end).
    pub tpot: Option<RateSummary>,
    /// End-to-end latency from the send time (`last token − sent_at`), completed requests, s.
    pub e2e: Option<RateSummary>,
    /// End-to-end latency from the intended send time (`last token − intended_at`), s.
    pub e2e_from_intended: Option<RateSummary>,
    /// Distribution of every per-token gap of the row's requests (see [`crate::ItlGaps`]).
    pub itl_gaps: Option<crate::ItlGaps>,
    /// Peak output rate over 1 s buckets of token arrivals, tok/s (see
    /// [`crate::CellResult::peak_output_tps_1s`]).
    pub peak_output_tps_1s: Option<f64>,
    /// Output tokens of all sent requests.
    pub output_tokens: u64,
    /// Output tokens / (last end − first intended send), tok/s.
    pub output_tps: Option<f64>,
    /// The SLOs the row was judged against (`--slo`); empty without `--slo`.
    pub slo: Vec<SloCheck>,
    /// Good requests per second of the arrival schedule: `slo_attainment × schedule_rate`
    /// (req/s), so a row where every scheduled request met its SLOs has the schedule's own rate
    /// as goodput; the drain after the last arrival is not in the span (see [`RateRow::drain_s`]).
    /// One-arrival rows (no realised rate): `slo_attainment` × `offered_rate`. Null without
    /// `--slo`.
    pub goodput: Option<f64>,
    /// The drain: last request end − last intended send, s (how long the row ran on after its
    /// schedule's last arrival). Null when nothing was sent.
    pub drain_s: Option<f64>,
    /// Fraction of **scheduled** arrivals that completed and met every per-request SLO (0–1);
    /// unsent and failed requests count as misses. Null without `--slo`.
    pub slo_attainment: Option<f64>,
    /// True when every SLO's percentile over the row (from the intended send time where the
    /// metric has one) meets its threshold. Null without `--slo`.
    pub slo_met: Option<bool>,
    /// Set on rows probed by `--rate-search`: which probe this was (1-based).
    pub search_step: Option<u64>,
    /// Row outcome: `ok`, `error` (no request completed), `skipped_user` (interrupted).
    pub status: Option<CellStatus>,
    /// Why the row is not `ok`, or a note.
    pub status_reason: Option<String>,
    /// Rows under a concurrency cap: the longest span with at least 95 % of `max_concurrency` in
    /// flight, and its throughput and latency ([`crate::SteadyState`]; times relative to the
    /// row's first intended send). Null without a cap (an open loop has no in-flight target) and
    /// in files written before this field.
    pub steady_state: Option<crate::SteadyState>,
    /// Plausibility and usage warnings of the row's requests (the stream checks of the window
    /// modes: single write, usage the stream cannot have carried, a final count above a
    /// continuous one, per-stream speed, non-cumulative usage). Left out of the file when empty.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// Typed kinds of [`RateRow::warnings`], one entry per kind.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warning_kinds: Vec<crate::FailureKind>,
}

/// Summary of one per-request latency, s.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RateSummary {
    /// Requests with a value.
    pub count: u64,
    /// Arithmetic mean, s.
    pub avg: f64,
    /// Median (NumPy linear percentile), s.
    pub p50: f64,
    /// 90th percentile, s.
    pub p90: f64,
    /// 95th percentile, s.
    pub p95: f64,
    /// 99th percentile, s.
    pub p99: f64,
    /// Largest value, s.
    pub max: f64,
}

/// One SLO of `--slo` and how a row did against it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SloCheck {
    /// `ttft`, `itl`, `tpot` or `e2e`.
    pub metric: SloMetric,
    /// The percentile of the row constraint, 0–100 (`p99` → 99).
    pub percentile: f64,
    /// Threshold, s.
    pub threshold: f64,
    /// The row's percentile of the metric, s (TTFT and E2E from the intended send time); null
    /// when no request had the metric.
    pub measured: Option<f64>,
    /// `measured ≤ threshold`; false when nothing was measured.
    pub met: bool,
}

/// The `--rate-search` outcome: every probed rate is also a row of `rate_results`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RateSearch {
    /// Context of the searched rows, tokens.
    pub context_tokens: u64,
    /// First rate probed, req/s.
    pub start_rate: f64,
    /// Relative resolution of the bisection: it stops when `(high − low) ≤ resolution × low`.
    pub resolution: f64,
    /// Most probes allowed.
    pub max_probes: u64,
    /// The stopping rule in words.
    pub rule: String,
    /// Highest probed rate that met the SLOs, req/s; null when none did.
    pub best_rate: Option<f64>,
    /// Lowest probed rate that missed them, req/s; null when none did (the bracket never closed).
    pub lowest_failing_rate: Option<f64>,
    /// Why the search ended: `resolution`, `max_probes`, `min_rate`, `max_rate`, `interrupted`.
    pub stopped: SearchStop,
    /// Each probe in order: rate and whether it met the SLOs.
    pub probes: Vec<RateProbe>,
}

/// One probe of a rate search.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RateProbe {
    /// Probed rate, req/s.
    pub rate: f64,
    /// Whether the row met every SLO (percentile constraints).
    pub met: bool,
}
