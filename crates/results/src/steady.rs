//! The steady-state block of a finite load: request-count and Burst / E2E cells, and open-loop
//! rows under a concurrency cap.

use serde::{Deserialize, Serialize};

/// The longest span of a finite load during which at least 95 % of its in-flight target was in
/// flight, and what was measured inside it (the ramp-up of the first sends and the drain of the
/// last requests left out). vLLM's Rust bench client reports the same idea; servebench takes the
/// *longest* such span and counts the tokens that arrived inside it, as the sustained window does
/// (docs/metrics.md, "Steady state").
///
/// Times are seconds relative to the start of the measured load; rates are tok/s; latencies s.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SteadyState {
    /// The in-flight target: the cell's concurrency C, or a rate row's `max_concurrency`.
    pub target_in_flight: u64,
    /// The least number in flight that counts as steady: ⌈0.95 × `target_in_flight`⌉.
    pub min_in_flight: u64,
    /// Start of the span, s after the measured load started.
    pub start_s: f64,
    /// End of the span, s after the measured load started.
    pub end_s: f64,
    /// `end_s − start_s`, s.
    pub duration_s: f64,
    /// `duration_s` / the measured load's length, 0–1.
    pub fraction: f64,
    /// Mean number of requests in flight over the span (time-weighted).
    pub mean_in_flight: f64,
    /// Requests sent inside the span.
    pub requests: u64,
    /// Output tokens that arrived inside the span (timed events; a request's untimed tokens at
    /// its last token time), tokens.
    pub output_tokens: u64,
    /// `output_tokens / duration_s`, tok/s: the load's throughput without its ramp-up and drain.
    pub output_tps: Option<f64>,
    /// Median TTFT of the requests sent inside the span, s.
    pub ttft_p50: Option<f64>,
    /// p99 TTFT of the requests sent inside the span, s.
    pub ttft_p99: Option<f64>,
    /// Median per-token ITL (per-request mean, as `inter_token_latency_avg`) of the requests sent
    /// inside the span, s.
    pub itl_p50: Option<f64>,
    /// p99 of the same, s.
    pub itl_p99: Option<f64>,
    /// The span is short: under 1 s or under a quarter of the measured load (its numbers are
    /// then little more than a sample; a warning on the cell or row says so).
    pub short: bool,
}
