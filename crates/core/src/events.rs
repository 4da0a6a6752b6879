//! The live event channel: the runner reports what it does here and never prints.
//!
//! The event types live in `servebench-events` (re-exported here, so `servebench_core::events::*`
//! names them too); this module holds the producer side: [`EventSink`], which keeps every
//! human-readable message, complete, for the results' `event_log` and forwards [`RunEvent`]s to
//! an optional consumer over an unbounded channel, and the cell monitor's `LiveFeed`.

use std::sync::Mutex;
use std::time::Instant;

use tokio::sync::mpsc::UnboundedSender;

use crate::telemetry::ServerSample;
use servebench_client::stream::StreamOutcome;
pub use servebench_events::*;

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

    /// Break-it round 5: `startup model` and `startup engine … models=` printed a model id
    /// with U+202E (and ESC) raw on stderr.
    #[test]
    fn log_lines_carry_no_control_or_bidi_characters() {
        let sink = EventSink::new(None);
        sink.log("startup model evil\u{202E}gpj.exe\u{1b}[2J");
        let line = &sink.lines()[0];
        assert!(line.ends_with("startup model evil gpj.exe [2J"), "{line:?}");
    }
}
