//! The run's event types: what the runner reports while it measures, and the one way back
//! into it (skipping a cell, recording why the run stopped).
//!
//! A small crate of plain data so that consumers (the CLI's progress lines, the live dashboard
//! in `servebench-tui`, an event file) depend on these types, `servebench-results` and
//! `servebench-stats` only, never on the measuring core (as oha's monitor depends only on its
//! request-result type). The producer side, `servebench_core::events::EventSink`, keeps the
//! event log and sends [`RunEvent`]s over an unbounded channel; it never waits on a consumer.

use std::sync::{Arc, Mutex};

use servebench_results::{CellResult, DecodeMode, PrefillRow, Results};
use tokio_util::sync::CancellationToken;

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skip_cancels_only_the_current_cell() {
        let ctl = SkipControl::default();
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
}
