//! The live event channel: the runner reports what it does here and never prints.
//!
//! Consumers (the CLI's progress lines, a future TUI, an event file) receive [`RunEvent`]s over
//! an unbounded channel. Every human-readable message is also kept, complete, for the results'
//! `event_log`.

use std::sync::Mutex;

use servebench_results::{CellResult, PrefillRow};
use tokio::sync::mpsc::UnboundedSender;

/// Where a cell is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// The `max_tokens: 1` scout request that primes the prefix cache.
    Scout,
    /// C streams running, waiting for readiness.
    RampUp,
    /// Inside the measured window.
    Measuring,
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
    /// A prefill row was recorded.
    Prefill {
        /// Context label.
        context: u64,
        /// The row.
        row: Box<PrefillRow>,
    },
}

/// Collects the event log and forwards events to an optional live consumer.
#[derive(Debug, Default)]
pub struct EventSink {
    lines: Mutex<Vec<String>>,
    tx: Option<UnboundedSender<RunEvent>>,
}

impl EventSink {
    /// A sink that forwards to `tx` (None: only the log is kept).
    pub fn new(tx: Option<UnboundedSender<RunEvent>>) -> Self {
        EventSink {
            lines: Mutex::new(Vec::new()),
            tx,
        }
    }

    /// Records a log line (`"HH:MM:SS message"`) and forwards it.
    pub fn log(&self, message: impl Into<String>) {
        let message = message.into();
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
