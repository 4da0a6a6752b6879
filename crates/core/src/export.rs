//! Per-request records (`--export-requests`, issue 19): one [`RequestRow`] per measured request,
//! sent on a channel the moment the request ends, so the run never collects them in memory.
//!
//! The core only builds rows (from a [`RequestOutcome`] and the cell / row key of its load) and
//! sends them; whoever holds the receiving end ([`channel`]) writes them (the CLI: a JSON Lines
//! writer on its own thread, documented in `docs/exports.md`). Sending never waits and never
//! fails the run: when the receiver is gone, rows are dropped.
//!
//! Times: `intended_s` / `sent_s` are seconds from the run's start (the [`RequestExport`]'s
//! origin, a monotonic `Instant`), `sent_unix_s` the same moment on the wall clock; every time of
//! a request after its send (`first_byte_s`, `event_ns`, ...) is counted from its own send
//! time, the TTFT reference (seed spec §4.1 `t0`). `ttft_s`, `ttst_s`, `itl_s` and `latency_s`
//! are the record's own values, bit for bit the ones the cell's statistics are built from.

use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::load::RequestOutcome;

/// Which cell or row a load's requests belong to.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ExportKey {
    /// `sustained`, `request_count`, `burst` or `rate` (the CSV's `layer` words).
    pub layer: &'static str,
    /// Context of the cell or row, prompt tokens.
    pub context_tokens: u64,
    /// C of the cell (`None` for an open-loop row without a cap).
    pub concurrency: Option<u64>,
    /// Offered request rate of an open-loop row, requests/s (`None` for matrix cells).
    pub request_rate: Option<f64>,
}

/// One request as exported: the keys of its cell / row, its times, tokens and status (module
/// docs for the time origins).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RequestRow {
    /// Layer of the cell / row (see [`ExportKey::layer`]).
    pub layer: &'static str,
    /// Context, prompt tokens.
    pub context_tokens: u64,
    /// C of the cell, when it has one.
    pub concurrency: Option<u64>,
    /// Offered rate of the open-loop row, requests/s.
    pub request_rate: Option<f64>,
    /// Position in the load's send order, from 0.
    pub index: u64,
    /// When the request was due, s from the run start (open loop: its schedule time).
    pub intended_s: f64,
    /// When it was handed to the client, s from the run start.
    pub sent_s: f64,
    /// The send time on the wall clock, s since the Unix epoch.
    pub sent_unix_s: f64,
    /// First bytes of the response body after the send, s (`None`: no body came).
    pub first_byte_s: Option<f64>,
    /// Time to first token, s (the record's TTFT).
    pub ttft_s: Option<f64>,
    /// Time to second token, s.
    pub ttst_s: Option<f64>,
    /// First answer content (not reasoning) after the send, s.
    pub first_content_s: Option<f64>,
    /// Mean inter-token latency per token, s (the record's ITL: `(last − first) / (N − 1)`).
    pub itl_s: Option<f64>,
    /// Request latency (completed requests), s.
    pub latency_s: Option<f64>,
    /// Longest silence between two consecutive timed events of the request, s (`None` with
    /// fewer than two): the stall a user saw in this stream, whatever its length (the cell's
    /// stall analysis counts only silences of 1 s and more).
    pub max_gap_s: Option<f64>,
    /// End (body ended or cut) after the send, s.
    pub end_s: f64,
    /// Every timed event's arrival after the send, ns (ascending; first = first token).
    pub event_ns: Vec<u64>,
    /// Tokens each timed event added (same length as `event_ns`), tokens.
    pub event_tokens: Vec<u64>,
    /// Output tokens of the request (counted total), tokens.
    pub output_tokens: u64,
    /// Of those, tokens no timed event carried (usage-only chunks), tokens.
    pub untimed_tokens: u64,
    /// `usage.prompt_tokens`, tokens.
    pub prompt_tokens: Option<u64>,
    /// `usage.prompt_tokens_details.cached_tokens`, tokens.
    pub cached_tokens: Option<u64>,
    /// The last `usage.completion_tokens`, tokens.
    pub completion_tokens: Option<u64>,
    /// Reasoning tokens from usage (clamped to `output_tokens`), tokens.
    pub reasoning_tokens: Option<u64>,
    /// Output tokens credited to the sustained cell's measured window, tokens; `None` outside
    /// sustained cells (request-count, Burst / E2E and open-loop loads have no window).
    pub window_tokens: Option<u64>,
    /// Last non-empty `finish_reason`.
    pub finish_reason: Option<String>,
    /// The server finished it.
    pub completed: bool,
    /// The load cut it (window end, row deadline, Ctrl-C).
    pub cancelled: bool,
    /// Open loop: it waited for a slot under the concurrency cap.
    pub waited: bool,
    /// Why it failed (`None` when it did not).
    pub error: Option<String>,
    /// The typed failure kind (the results' `error_kind` words).
    pub error_kind: Option<servebench_results::FailureKind>,
}

/// Signed seconds from `origin` to `t`.
fn since(t: Instant, origin: Instant) -> f64 {
    crate::aggregate::signed_secs(t, origin)
}

/// The sending side of a run's request export: cloned into every load that exports.
#[derive(Clone)]
pub struct RequestExport {
    tx: mpsc::Sender<RequestRow>,
    origin: Instant,
    origin_unix_s: f64,
}

impl std::fmt::Debug for RequestExport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestExport").finish_non_exhaustive()
    }
}

/// A new export whose times count from now, and the receiver of its rows (never bounded: the
/// writer drains it as rows come; sending never blocks a request).
pub fn channel() -> (RequestExport, mpsc::Receiver<RequestRow>) {
    let (tx, rx) = mpsc::channel();
    let origin_unix_s = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    (
        RequestExport {
            tx,
            origin: Instant::now(),
            origin_unix_s,
        },
        rx,
    )
}

impl RequestExport {
    /// The sink of one load (cell or row) with key `key`.
    pub fn sink(&self, key: ExportKey) -> ExportSink {
        ExportSink {
            export: self.clone(),
            key: Arc::new(key),
        }
    }
}

/// The export of one load: its key and the run's channel.
#[derive(Clone, Debug)]
pub struct ExportSink {
    export: RequestExport,
    key: Arc<ExportKey>,
}

impl ExportSink {
    /// The row of `out`.
    pub fn row(&self, out: &RequestOutcome) -> RequestRow {
        let r = &out.stream.record;
        let o = self.export.origin;
        let after_sent = |t: Option<Instant>| t.map(|t| since(t, r.sent_at));
        let sent_s = since(out.sent_at, o);
        RequestRow {
            layer: self.key.layer,
            context_tokens: self.key.context_tokens,
            concurrency: self.key.concurrency,
            request_rate: self.key.request_rate,
            index: out.index,
            intended_s: since(out.intended_at, o),
            sent_s,
            sent_unix_s: self.export.origin_unix_s + sent_s,
            first_byte_s: after_sent(out.stream.facts.first_byte_at),
            ttft_s: r.ttft_s(),
            ttst_s: r.ttst_s(),
            first_content_s: after_sent(r.first_content_at),
            itl_s: r.itl_s(),
            latency_s: r.latency_s(),
            max_gap_s: r
                .timed_events
                .windows(2)
                .map(|w| w[1].after_sent_ns.saturating_sub(w[0].after_sent_ns))
                .max()
                .map(|ns| ns as f64 / 1e9),
            end_s: since(r.end_at, r.sent_at),
            event_ns: r.timed_events.iter().map(|e| e.after_sent_ns).collect(),
            event_tokens: r.timed_events.iter().map(|e| e.tokens).collect(),
            output_tokens: r.output_tokens,
            untimed_tokens: r.untimed_tokens,
            prompt_tokens: r.prompt_tokens,
            cached_tokens: r.cached_tokens,
            completion_tokens: r.usage_completion_tokens,
            reasoning_tokens: r.reasoning_tokens,
            window_tokens: (self.key.layer == "sustained").then_some(out.stream.window_tokens),
            finish_reason: r.finish_reason.clone(),
            completed: r.completed,
            cancelled: r.cancelled,
            waited: out.waited,
            error: r.error.clone(),
            error_kind: out.stream.facts.kind,
        }
    }

    /// Sends the row of `out` (dropped when the receiver is gone).
    pub fn send(&self, out: &RequestOutcome) {
        let _ = self.export.tx.send(self.row(out));
    }
}
