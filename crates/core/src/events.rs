//! The live event channel: the runner reports what it does here and never prints.
//!
//! Consumers (the CLI's progress lines, a future TUI, an event file) receive [`RunEvent`]s over
//! an unbounded channel. Every human-readable message is also kept, complete, for the results'
//! `event_log`.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use servebench_results::{CellResult, DecodeMode, PrefillRow, Results};
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;

use crate::telemetry::ServerSample;
use servebench_client::stream::StreamOutcome;

/// Where a cell is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// The `max_tokens: 1` scout request that primes the prefix cache.
    Scout,
    /// C streams running, waiting until every stream produces (and the server runs C with an
    /// empty queue, when its metrics are read).
    RampUp,
    /// Readiness reached; it must hold for the stable window before the window opens.
    Readiness,
    /// Inside the measured window.
    Measuring,
}

impl Phase {
    /// Short lower-case name for progress lines (`scout`, `ramp-up`, `readiness`, `window`).
    pub fn label(self) -> &'static str {
        match self {
            Phase::Scout => "scout",
            Phase::RampUp => "ramp-up",
            Phase::Readiness => "readiness",
            Phase::Measuring => "window",
        }
    }
}

/// The run's plan, sent once after the startup probe (before prompts are sized).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunPlan {
    /// Engine name (`vllm`, `sglang`, `llama.cpp`, ...).
    pub engine: String,
    /// Engine version, when the server reports one.
    pub engine_version: Option<String>,
    /// Model requested.
    pub model: String,
    /// Server base URL.
    pub url: String,
    /// KV-cache budget, tokens (0 = unknown).
    pub kv_budget_tokens: u64,
    /// Where the budget came from (`--kv-budget`, metrics, ...).
    pub kv_budget_source: String,
    /// The model's context length, tokens.
    pub max_model_len: Option<u64>,
    /// Measured window per sustained cell, s.
    pub window_s: f64,
    /// Pause between cells, s.
    pub pause_s: f64,
    /// Primary layer: sustained cells (`duration`) or request-count cells.
    pub layer: DecodeMode,
    /// Length of the hidden C=1 warmup, s (None when it does not run).
    pub warmup_s: Option<f64>,
    /// A Burst / E2E layer runs after the matrix (its duration is not known in advance).
    pub burst_layer: bool,
    /// The matrix in run order.
    pub cells: Vec<PlannedCell>,
}

/// One cell of the [`RunPlan`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PlannedCell {
    /// Position in the plan, from 1.
    pub index: usize,
    /// Concurrency C.
    pub concurrency: u64,
    /// Context label, tokens.
    pub context: u64,
    /// Skipped before any request (model length, KV budget, server cap): the reason.
    pub skip_reason: Option<String>,
    /// Expected wall time of the cell, s: stable window + measured window + pause between
    /// cells; scout and ramp-up come on top (None when unknown: request-count cells).
    pub expected_s: Option<f64>,
}

/// A request of the running cell ended (sent at the next progress tick).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RequestDone {
    /// Time to first token, s (`first_token_at − sent_at`).
    pub ttft_s: Option<f64>,
    /// Mean inter-token latency of the request, s (`(last − first token) / (tokens − 1)`).
    pub itl_s: Option<f64>,
    /// Output tokens of the request.
    pub output_tokens: u64,
    /// The request failed (HTTP, stream or transport error).
    pub failed: bool,
}

/// The server's scheduler state from the latest `/metrics` sample.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServerLive {
    /// Running requests.
    pub running: Option<f64>,
    /// Queued (waiting) requests.
    pub waiting: Option<f64>,
    /// KV-cache usage, 0–1.
    pub kv_usage: Option<f64>,
}

/// The client's own health over the last progress interval.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClientHealth {
    /// CPU time used by this process / wall time (1.0 = one core busy).
    pub cpu_util: Option<f64>,
    /// Largest lateness of the monitor's 10 ms tick, ms.
    pub tick_lag_ms: f64,
    /// Mean wait of received bytes in the kernel before they were read, ms (requests ended in
    /// the interval; None without kernel timestamps).
    pub read_delay_ms: Option<f64>,
}

/// A snapshot of a running cell (sent about 4 times per second).
#[derive(Clone, Debug, PartialEq)]
pub struct CellProgress {
    /// Concurrency C.
    pub concurrency: u64,
    /// Context label, tokens.
    pub context: u64,
    /// Current phase.
    pub phase: Phase,
    /// Streams that have produced at least one token.
    pub active_streams: u64,
    /// Seconds since the cell started.
    pub elapsed_s: f64,
    /// Output tok/s over the last progress interval (client-side, all streams).
    pub live_tps: Option<f64>,
    /// Seconds into the measured window (Measuring only).
    pub window_elapsed_s: Option<f64>,
    /// Length of the measured window, s.
    pub window_s: f64,
    /// True for the hidden warmup cell.
    pub warmup: bool,
}

/// Something the runner did.
#[derive(Clone, Debug, PartialEq)]
pub enum RunEvent {
    /// A line of the event log (`time` is local `HH:MM:SS`).
    Log {
        /// Local wall-clock time.
        time: String,
        /// The message.
        message: String,
    },
    /// A cell starts (`index` counts from 1; warmup cells are not counted).
    CellStarted {
        /// Position in the plan, from 1 (0 for the warmup).
        index: usize,
        /// Cells in the plan.
        total: usize,
        /// Concurrency C.
        concurrency: u64,
        /// Context label.
        context: u64,
        /// The hidden warmup cell.
        warmup: bool,
    },
    /// Live state of the running cell.
    Progress(CellProgress),
    /// A planned cell is finished (measured, skipped or failed).
    CellFinished {
        /// Position in the plan, from 1.
        index: usize,
        /// The cell's result.
        result: Box<CellResult>,
    },
    /// The run's plan (once, after the startup probe).
    Plan(Box<RunPlan>),
    /// The running cell entered `phase`.
    PhaseChanged {
        /// Position in the plan, from 1 (0 for the warmup).
        index: usize,
        /// The hidden warmup cell.
        warmup: bool,
        /// The new phase.
        phase: Phase,
        /// Seconds since the cell started (same clock as [`CellProgress::elapsed_s`]).
        at_s: f64,
        /// How long the phase lasts at most, s: the readiness timeout (ramp-up), the stable
        /// window (readiness), the window (measuring); None for the scout.
        limit_s: Option<f64>,
    },
    /// A request of the running cell ended.
    RequestDone(RequestDone),
    /// A server scheduler sample during the running cell.
    ServerSample(ServerLive),
    /// The client's own health during the running cell.
    ClientHealth(ClientHealth),
    /// A warning worth showing apart from the log (it is also logged).
    Warning {
        /// The message.
        message: String,
    },
    /// A prefill row was recorded.
    Prefill {
        /// Context label.
        context: u64,
        /// The row.
        row: Box<PrefillRow>,
    },
    /// The results so far (`run_state: running`), sent after every finished cell and prefill
    /// row so that a consumer can keep them on disk (a killed run keeps what it finished).
    Checkpoint(Box<Results>),
}

/// Collects the event log and forwards events to an optional live consumer.
#[derive(Debug, Default)]
pub struct EventSink {
    lines: Mutex<Vec<String>>,
    tx: Option<UnboundedSender<RunEvent>>,
    skip: SkipControl,
}

impl EventSink {
    /// A sink that forwards to `tx` (None: only the log is kept).
    pub fn new(tx: Option<UnboundedSender<RunEvent>>) -> Self {
        EventSink {
            lines: Mutex::new(Vec::new()),
            tx,
            skip: SkipControl::default(),
        }
    }

    /// Records a log line and also forwards it as a [`RunEvent::Warning`].
    pub fn warn(&self, message: impl Into<String>) {
        let message = clean(message.into());
        self.log(message.clone());
        self.emit(RunEvent::Warning { message });
    }

    /// The handle a live view uses to skip the running cell (key `s`).
    pub fn skip_control(&self) -> SkipControl {
        self.skip.clone()
    }

    /// Records a log line (`"HH:MM:SS message"`) and forwards it. Control characters (a
    /// server's model id or error text with escape sequences) are replaced by spaces first.
    pub fn log(&self, message: impl Into<String>) {
        let message = clean(message.into());
        let time = chrono::Local::now().format("%H:%M:%S").to_string();
        if let Ok(mut l) = self.lines.lock() {
            l.push(format!("{time} {message}"));
        }
        self.emit(RunEvent::Log { time, message });
    }

    /// Forwards an event to the live consumer (dropped when there is none or it is gone).
    pub fn emit(&self, ev: RunEvent) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(ev);
        }
    }

    /// The complete event log so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().map(|l| l.clone()).unwrap_or_default()
    }
}

/// `message` without control characters and registered secrets
/// ([`servebench_client::error::server_text`]); no copy when it has none.
fn clean(message: String) -> String {
    match servebench_client::error::server_text(&message) {
        std::borrow::Cow::Borrowed(_) => message,
        std::borrow::Cow::Owned(s) => s,
    }
}

/// Why a run was stopped (recorded by whoever cancels the run's token, read by the runner for
/// the reasons of the cells it could not finish).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopCause {
    /// Ctrl-C (SIGINT, or the key in the live dashboard).
    CtrlC,
    /// SIGTERM (`timeout`, `docker stop`, systemd, Slurm).
    Sigterm,
    /// SIGHUP (the terminal or SSH session went away).
    Sighup,
    /// The live view's `q` key.
    QuitKey,
    /// The live dashboard's terminal went away without a signal reaching servebench (end of
    /// file, an I/O error or a hang-up on the terminal: a dead parent pty).
    TerminalLost,
}

impl StopCause {
    /// How the stop is named in cell reasons (`interrupted by the user (…)`).
    pub fn words(self) -> &'static str {
        match self {
            StopCause::CtrlC => "Ctrl-C",
            StopCause::Sigterm => "SIGTERM",
            StopCause::Sighup => "SIGHUP",
            StopCause::QuitKey => "key q in the live view",
            StopCause::TerminalLost => "the terminal went away",
        }
    }
}

/// "Skip the running cell" from a live view into the runner. The runner installs a token per
/// cell ([`SkipControl::begin`]); [`SkipControl::skip_current`] cancels it, which ends the cell
/// the way Ctrl-C does, but only that cell: the run goes on with the next one. It also carries
/// why the whole run was stopped ([`SkipControl::record_stop`]).
#[derive(Clone, Debug, Default)]
pub struct SkipControl(
    Arc<Mutex<Option<CancellationToken>>>,
    Arc<Mutex<Option<StopCause>>>,
);

impl SkipControl {
    /// Records why the run is being stopped; the first cause recorded wins (a second Ctrl-C
    /// after `q` does not change what happened first).
    pub fn record_stop(&self, cause: StopCause) {
        if let Ok(mut g) = self.1.lock() {
            g.get_or_insert(cause);
        }
    }

    /// The recorded stop cause, if any.
    pub fn stop_cause(&self) -> Option<StopCause> {
        self.1.lock().ok().and_then(|g| *g)
    }

    /// Skips the running cell; false when no cell is running (nothing happens then).
    pub fn skip_current(&self) -> bool {
        match self.0.lock().ok().and_then(|g| g.clone()) {
            Some(t) if !t.is_cancelled() => {
                t.cancel();
                true
            }
            _ => false,
        }
    }

    /// Starts a cell: returns a child of `run` that also fires when the cell is skipped. The
    /// token stays installed until the returned guard is dropped.
    pub fn begin(&self, run: &CancellationToken) -> CellCancel {
        let token = run.child_token();
        if let Ok(mut g) = self.0.lock() {
            *g = Some(token.clone());
        }
        CellCancel {
            token,
            control: self.clone(),
        }
    }
}

/// The cancel token of one cell (see [`SkipControl::begin`]); uninstalled on drop.
#[derive(Debug)]
pub struct CellCancel {
    /// Fires on Ctrl-C (the run's token) or when the user skips the cell.
    pub token: CancellationToken,
    control: SkipControl,
}

impl CellCancel {
    /// The user skipped this cell (and the run itself was not stopped).
    pub fn skipped(&self, run: &CancellationToken) -> bool {
        self.token.is_cancelled() && !run.is_cancelled()
    }
}

impl Drop for CellCancel {
    fn drop(&mut self) {
        if let Ok(mut g) = self.control.0.lock() {
            *g = None;
        }
    }
}

/// Reason of a cell skipped with [`SkipControl::skip_current`].
pub const USER_SKIP_REASON: &str = "skipped by the user (key s in the live view)";

/// Turns a running cell's monitor state into live events: phase changes, requests done, server
/// samples and client health. Owned by the cell's monitor loop and called at its progress ticks
/// (a lock of the finished-request list per tick; nothing on the streams' path).
pub(crate) struct LiveFeed {
    index: usize,
    warmup: bool,
    t_cell: Instant,
    phase: Option<Phase>,
    seen: usize,
    last_sample: Option<Instant>,
    cpu: Option<(Instant, f64)>,
    lag_ms: f64,
}

impl LiveFeed {
    /// A feed for the cell at `index` that started at `t_cell`.
    pub(crate) fn new(index: usize, warmup: bool, t_cell: Instant) -> Self {
        LiveFeed {
            index,
            warmup,
            t_cell,
            phase: None,
            seen: 0,
            last_sample: None,
            cpu: crate::procstat::process_cpu_seconds().map(|c| (Instant::now(), c)),
            lag_ms: 0.0,
        }
    }

    /// Emits [`RunEvent::PhaseChanged`] when `phase` differs from the last one.
    pub(crate) fn phase(&mut self, events: &EventSink, phase: Phase, limit_s: Option<f64>) {
        if self.phase == Some(phase) {
            return;
        }
        self.phase = Some(phase);
        events.emit(RunEvent::PhaseChanged {
            index: self.index,
            warmup: self.warmup,
            phase,
            at_s: self.t_cell.elapsed().as_secs_f64(),
            limit_s,
        });
    }

    /// Notes one monitor tick's lateness, ms.
    pub(crate) fn lag(&mut self, ms: f64) {
        self.lag_ms = self.lag_ms.max(ms);
    }

    /// Emits the requests that ended since the last call, the server sample when it is new and
    /// the client's health over the interval.
    pub(crate) fn tick(
        &mut self,
        events: &EventSink,
        outcomes: &[StreamOutcome],
        sample: Option<&ServerSample>,
    ) {
        if events.tx.is_none() {
            return;
        }
        let mut done = Vec::new();
        let mut delay = servebench_client::h1::ReadDelay::default();
        for out in outcomes.iter().skip(self.seen) {
            let r = &out.record;
            delay.merge(&out.read_delay);
            done.push(RequestDone {
                ttft_s: r.ttft_s(),
                itl_s: r.itl_s(),
                output_tokens: r.output_tokens,
                failed: r.error.is_some() && !r.cancelled,
            });
        }
        self.seen = outcomes.len();
        for d in done {
            events.emit(RunEvent::RequestDone(d));
        }
        if let Some(s) = sample.filter(|s| self.last_sample != Some(s.at)) {
            self.last_sample = Some(s.at);
            events.emit(RunEvent::ServerSample(ServerLive {
                running: s.running,
                waiting: s.waiting,
                kv_usage: s.kv_usage,
            }));
        }
        let now = Instant::now();
        let cpu_now = crate::procstat::process_cpu_seconds();
        let cpu_util = match (self.cpu, cpu_now) {
            (Some((t0, c0)), Some(c1)) => {
                let dt = now.duration_since(t0).as_secs_f64();
                (dt > 0.0).then(|| (c1 - c0).max(0.0) / dt)
            }
            _ => None,
        };
        self.cpu = cpu_now.map(|c| (now, c));
        events.emit(RunEvent::ClientHealth(ClientHealth {
            cpu_util,
            tick_lag_ms: std::mem::take(&mut self.lag_ms),
            read_delay_ms: (delay.reads > 0).then(|| delay.total_s / delay.reads as f64 * 1e3),
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skip_cancels_only_the_current_cell() {
        let sink = EventSink::new(None);
        let ctl = sink.skip_control();
        let run = CancellationToken::new();
        assert!(!ctl.skip_current(), "nothing runs yet");
        let cell = ctl.begin(&run);
        assert!(ctl.skip_current());
        assert!(cell.token.is_cancelled() && cell.skipped(&run));
        assert!(!run.is_cancelled());
        drop(cell);
        assert!(!ctl.skip_current(), "uninstalled after the cell");
        let cell = ctl.begin(&run);
        assert!(!cell.token.is_cancelled(), "a fresh token per cell");
        run.cancel();
        assert!(cell.token.is_cancelled() && !cell.skipped(&run));
    }

    #[test]
    fn warn_logs_and_emits() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let sink = EventSink::new(Some(tx));
        sink.warn("startup warning: x");
        assert!(sink.lines()[0].ends_with("startup warning: x"));
        assert!(matches!(rx.try_recv(), Ok(RunEvent::Log { .. })));
        assert_eq!(
            rx.try_recv().ok(),
            Some(RunEvent::Warning {
                message: "startup warning: x".into()
            })
        );
    }
}
