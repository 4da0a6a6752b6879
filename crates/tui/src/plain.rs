//! Plain progress lines (for pipes, CI logs and `--display plain`): one line when the running
//! cell enters a phase, and one every [`HEARTBEAT_S`] while a phase lasts, e.g.
//! `cell 3/12 C=8 ctx=16k window 12/30 s, run ETA 14 min`.

use servebench_events::Phase;
use servebench_events::RunEvent;
use servebench_results::format_context;

use crate::state::{human_duration, thousands, Current, Dashboard};

/// Seconds between two lines of the same phase.
pub const HEARTBEAT_S: f64 = 10.0;

/// Turns events into plain progress lines.
#[derive(Debug, Default)]
pub struct PlainProgress {
    state: Dashboard,
    /// (cell index, warmup, phase) of the last line.
    last: Option<(usize, bool, Phase)>,
    /// Cell-clock second of the last line.
    last_at_s: f64,
}

impl PlainProgress {
    /// A printer with an empty state.
    pub fn new() -> Self {
        Self::default()
    }

    /// The state the lines are made from.
    pub fn state(&self) -> &Dashboard {
        &self.state
    }

    /// Folds `ev` in; returns the progress line it causes, if any (log lines are not repeated).
    pub fn on_event(&mut self, ev: &RunEvent) -> Option<String> {
        self.state.apply(ev);
        let c = self.state.current.as_ref()?;
        let phase = c.phase?;
        let key = (c.index, c.warmup, phase);
        let now = c.elapsed_s();
        let changed = self.last != Some(key);
        let due = matches!(ev, RunEvent::Progress(_)) && now - self.last_at_s >= HEARTBEAT_S;
        if !(changed || due) {
            return None;
        }
        self.last = Some(key);
        // A phase change may arrive before the progress of the new phase.
        self.last_at_s = now.max(c.phase_at_s);
        Some(progress_line(&self.state, c))
    }
}

/// `cell 3/12 C=8 ctx=16k window 12/30 s, run ETA 14 min`.
pub fn progress_line(d: &Dashboard, c: &Current) -> String {
    let which = if c.warmup {
        "warmup".to_string()
    } else {
        format!("cell {}/{}", c.index, c.total.max(d.total()))
    };
    let mut s = format!(
        "{which} C={} ctx={} {}",
        c.concurrency,
        format_context(c.context),
        phase_text(c)
    );
    if let Some(eta) = d.eta_s() {
        s.push_str(&format!(", run ETA {}", human_duration(eta)));
    }
    s
}

/// `window 12/30 s`, `ramp-up 3/8 streams producing (timeout 60 s)`, ...
pub fn phase_text(c: &Current) -> String {
    let (done, limit) = c.phase_progress();
    let of = |l: Option<f64>| match l {
        Some(l) => format!("{}/{} s", secs(done.min(l)), secs(l)),
        None => format!("{} s", secs(done)),
    };
    match c.phase {
        Some(Phase::Scout) => format!("scout (first prefill of the prompt) {}", of(None)),
        Some(Phase::RampUp) => {
            let active = c.progress.as_ref().map(|p| p.active_streams).unwrap_or(0);
            let timeout = limit
                .map(|l| format!(", times out at {l:.0} s"))
                .unwrap_or_default();
            format!(
                "ramp-up {active}/{} streams producing, {} s{timeout}",
                c.concurrency,
                secs(done)
            )
        }
        Some(Phase::Readiness) => format!("readiness held {}", of(limit)),
        // Request-count and burst cells: a fixed number of requests, no fixed window.
        Some(Phase::Measuring) if limit.is_none() => {
            format!("measured requests running {}", of(None))
        }
        Some(Phase::Measuring) => {
            let tps = c
                .progress
                .as_ref()
                .filter(|p| p.phase == Phase::Measuring)
                .and_then(|p| p.live_tps)
                .map(|t| format!(" ({} tok/s)", thousands(t)))
                .unwrap_or_default();
            format!("window {}{tps}", of(limit))
        }
        None => "starting".into(),
    }
}

/// Seconds for progress text: one decimal under 10 s (`0.5`, `2.3`), whole seconds above.
pub fn secs(v: f64) -> String {
    if v < 9.95 {
        format!("{v:.1}")
    } else {
        format!("{v:.0}")
    }
}
