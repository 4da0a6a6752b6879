//! What the live views know: a pure fold of the run's events ([`Dashboard::apply`]). No clock is
//! read here; every time comes from the events (the cell clock of `elapsed_s`) or from the
//! caller (run elapsed time), so the same event sequence always gives the same screen.

use std::collections::{BTreeMap, VecDeque};

use servebench_events::RunEvent;
use servebench_events::{CellProgress, ClientHealth, Phase, RequestDone, RunPlan, ServerLive};
use servebench_results::{CellResult, CellStatus};

/// Event-log lines kept for the view.
const LOG_KEEP: usize = 200;
/// Live tok/s points kept for the sparkline (4 per second: one minute).
const TPS_KEEP: usize = 240;

/// The running cell.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Current {
    /// Position in the plan, from 1 (0 = the hidden warmup).
    pub index: usize,
    /// Cells in the plan.
    pub total: usize,
    /// Concurrency C.
    pub concurrency: u64,
    /// Context label, tokens.
    pub context: u64,
    /// The hidden C=1 warmup cell.
    pub warmup: bool,
    /// Current phase (None before the first phase event).
    pub phase: Option<Phase>,
    /// Cell-clock second at which the phase began.
    pub phase_at_s: f64,
    /// Longest duration of the phase, s (timeout, stable window or window).
    pub limit_s: Option<f64>,
    /// Latest progress snapshot.
    pub progress: Option<CellProgress>,
    /// TTFT of the requests that ended in this cell, s.
    pub ttft_s: Vec<f64>,
    /// Mean ITL of the requests that ended in this cell, s.
    pub itl_s: Vec<f64>,
    /// Requests that ended in this cell (failed ones included).
    pub requests_done: u64,
    /// Requests that failed.
    pub requests_failed: u64,
    /// Latest server scheduler sample.
    pub server: Option<ServerLive>,
}

impl Current {
    /// Seconds since the cell started (latest progress).
    pub fn elapsed_s(&self) -> f64 {
        self.progress.as_ref().map(|p| p.elapsed_s).unwrap_or(0.0)
    }

    /// Seconds spent in the current phase, and the phase's limit, s.
    pub fn phase_progress(&self) -> (f64, Option<f64>) {
        match (self.phase, &self.progress) {
            (Some(Phase::Measuring), Some(p)) if p.window_elapsed_s.is_some() => {
                let limit = self.limit_s.or((p.window_s > 0.0).then_some(p.window_s));
                (p.window_elapsed_s.unwrap_or(0.0), limit)
            }
            _ => ((self.elapsed_s() - self.phase_at_s).max(0.0), self.limit_s),
        }
    }
}

/// A finished cell as the matrix shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct Finished {
    /// Concurrency C.
    pub concurrency: u64,
    /// Context label, tokens.
    pub context: u64,
    /// Exported status.
    pub status: CellStatus,
    /// Aggregate output tok/s (ok cells).
    pub aggregate_tps: Option<f64>,
    /// Readiness timed out: the value is capacity-limited.
    pub capacity_limited: bool,
    /// Wall time of the cell, s.
    pub wall_s: Option<f64>,
    /// Why the cell is not ok.
    pub reason: String,
}

impl Finished {
    fn of(r: &CellResult) -> Self {
        Finished {
            concurrency: r.concurrency,
            context: r.context_tokens,
            status: r.status,
            aggregate_tps: r.aggregate_tps,
            capacity_limited: r.capacity_limited,
            wall_s: r.wall_time,
            reason: r.status_reason.clone(),
        }
    }
}

/// The dashboard's whole state.
#[derive(Clone, Debug, Default)]
pub struct Dashboard {
    /// The plan, once received.
    pub plan: Option<RunPlan>,
    /// The running cell.
    pub current: Option<Current>,
    /// Finished cells of the primary layer, by plan index.
    pub finished: BTreeMap<usize, Finished>,
    /// Finished cells of the Burst / E2E layer, by plan index.
    pub burst_finished: BTreeMap<usize, Finished>,
    /// Last event-log lines (`HH:MM:SS message`).
    pub log: VecDeque<String>,
    /// Warnings so far (startup warnings and cell warnings).
    pub warnings: Vec<String>,
    /// Live tok/s history of the running cells (sparkline).
    pub tps_history: VecDeque<u64>,
    /// Latest client health.
    pub health: Option<ClientHealth>,
    /// A note from the keys (`stopping ...`, `skipping ...`).
    pub note: Option<String>,
    /// Prefill rows recorded: (context, tok/s).
    pub prefill: Vec<(u64, Option<f64>)>,
    /// The run was asked to stop (q / Ctrl-C / SIGTERM).
    pub stopping: bool,
    /// The run is over (the event channel closed).
    pub ended: bool,
}

impl Dashboard {
    /// Folds one event into the state.
    pub fn apply(&mut self, ev: &RunEvent) {
        match ev {
            RunEvent::Log { time, message } => {
                self.log.push_back(format!("{time} {message}"));
                while self.log.len() > LOG_KEEP {
                    self.log.pop_front();
                }
            }
            RunEvent::Plan(p) => self.plan = Some((**p).clone()),
            RunEvent::CellStarted {
                index,
                total,
                concurrency,
                context,
                warmup,
            } => {
                self.current = Some(Current {
                    index: *index,
                    total: *total,
                    concurrency: *concurrency,
                    context: *context,
                    warmup: *warmup,
                    ..Default::default()
                });
                self.note = None;
            }
            RunEvent::PhaseChanged {
                index,
                warmup,
                phase,
                at_s,
                limit_s,
            } => {
                if let Some(c) = self
                    .current
                    .as_mut()
                    .filter(|c| c.index == *index && c.warmup == *warmup)
                {
                    c.phase = Some(*phase);
                    c.phase_at_s = *at_s;
                    c.limit_s = *limit_s;
                }
            }
            RunEvent::Progress(p) => {
                if let Some(c) = self.current.as_mut() {
                    // Cells without phase events (request-count / burst) take the phase from
                    // their progress.
                    if c.phase != Some(p.phase) {
                        c.phase = Some(p.phase);
                        c.phase_at_s = p.elapsed_s;
                        c.limit_s = None;
                    }
                    c.progress = Some(p.clone());
                }
                if let Some(t) = p.live_tps {
                    self.tps_history.push_back(t.max(0.0).round() as u64);
                    while self.tps_history.len() > TPS_KEEP {
                        self.tps_history.pop_front();
                    }
                }
            }
            RunEvent::RequestDone(RequestDone {
                ttft_s,
                itl_s,
                failed,
                ..
            }) => {
                if let Some(c) = self.current.as_mut() {
                    c.requests_done += 1;
                    if *failed {
                        c.requests_failed += 1;
                    } else {
                        c.ttft_s.extend(*ttft_s);
                        c.itl_s.extend(*itl_s);
                    }
                }
            }
            RunEvent::ServerSample(s) => {
                if let Some(c) = self.current.as_mut() {
                    c.server = Some(s.clone());
                }
            }
            RunEvent::ClientHealth(h) => {
                // Read delays come with ended requests: keep the last one between them.
                let read_delay_ms = h
                    .read_delay_ms
                    .or(self.health.as_ref().and_then(|o| o.read_delay_ms));
                self.health = Some(ClientHealth {
                    read_delay_ms,
                    ..h.clone()
                });
            }
            RunEvent::Warning { message } => self.warnings.push(message.clone()),
            RunEvent::CellFinished { index, result } => {
                let f = Finished::of(result);
                for w in &result.warnings {
                    self.warnings.push(format!(
                        "C={} ctx={}: {w}",
                        f.concurrency,
                        servebench_results::format_context(f.context)
                    ));
                }
                if result.benchmark_mode == servebench_results::BenchmarkMode::BurstE2e {
                    self.burst_finished.insert(*index, f);
                } else {
                    self.finished.insert(*index, f);
                }
                if self.current.as_ref().is_some_and(|c| c.index == *index) {
                    self.current = None;
                }
            }
            RunEvent::Prefill { context, row } => self.prefill.push((*context, row.tok_per_sec)),
            // Results snapshots for the checkpoint writer; nothing to show.
            RunEvent::Checkpoint(_) => {}
        }
    }

    /// Cells in the plan (0 before the plan arrives).
    pub fn total(&self) -> usize {
        self.plan
            .as_ref()
            .map(|p| p.cells.len())
            .or(self.current.as_ref().map(|c| c.total))
            .unwrap_or(0)
    }

    /// Cells skipped before any request (model length, KV budget).
    pub fn planned_skips(&self) -> usize {
        self.plan
            .as_ref()
            .map(|p| p.cells.iter().filter(|c| c.skip_reason.is_some()).count())
            .unwrap_or(0)
    }

    /// Ratio of observed to expected cell time over the finished cells that ran (1 before any).
    /// Observed = the cell's wall time + the pause; expected = the plan's estimate. Kept within
    /// 0.5–20 so one odd cell cannot make the ETA absurd.
    pub fn pace(&self) -> f64 {
        let Some(plan) = &self.plan else { return 1.0 };
        let (mut obs, mut exp) = (0.0, 0.0);
        for pc in &plan.cells {
            if let (Some(f), Some(e)) = (self.finished.get(&pc.index), pc.expected_s) {
                if let (Some(w), false) = (f.wall_s, f.status.is_skipped()) {
                    obs += w + plan.pause_s;
                    exp += e;
                }
            }
        }
        if exp > 0.0 {
            (obs / exp).clamp(0.5, 20.0)
        } else {
            1.0
        }
    }

    /// Estimated seconds until the matrix is done: the cells still to run at the observed pace,
    /// plus what is left of the running cell. None before the plan, when a cell's duration is not
    /// known in advance (request-count cells) or after a stop.
    pub fn eta_s(&self) -> Option<f64> {
        let plan = self.plan.as_ref()?;
        if self.stopping || self.ended {
            return None;
        }
        let pace = self.pace();
        let mut left = 0.0;
        for pc in &plan.cells {
            if self.finished.contains_key(&pc.index) || pc.skip_reason.is_some() {
                continue;
            }
            let expected = pc.expected_s? * pace;
            match &self.current {
                Some(c) if !c.warmup && c.index == pc.index => {
                    let by_pace = expected - c.elapsed_s();
                    let by_phase = match c.phase {
                        Some(Phase::Measuring) => {
                            let (done, limit) = c.phase_progress();
                            limit.map(|l| (l - done).max(0.0) + plan.pause_s)
                        }
                        _ => None,
                    };
                    left += by_phase.unwrap_or(by_pace.max(0.0));
                }
                _ => left += expected,
            }
        }
        if let (Some(c), Some(w)) = (&self.current, plan.warmup_s) {
            if c.warmup {
                left += (w + plan.pause_s - c.elapsed_s()).max(0.0);
            }
        }
        Some(left)
    }

    /// Cells of the primary layer done so far.
    pub fn done(&self) -> usize {
        self.finished.len()
    }
}

/// Linear-interpolated percentile (NumPy's default) of unsorted values; None when empty.
pub fn percentile(values: &[f64], q: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let pos = (q / 100.0).clamp(0.0, 1.0) * (v.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    Some(v[lo] + (v[hi] - v[lo]) * (pos - lo as f64))
}

/// `75` → `1 min 15 s`-style short durations: `45 s`, `14 min`, `2 h 05 min`.
pub fn human_duration(s: f64) -> String {
    let s = s.max(0.0).round() as u64;
    if s < 90 {
        format!("{s} s")
    } else if s < 3600 {
        format!("{} min", (s + 30) / 60)
    } else {
        let m = (s + 30) / 60;
        format!("{} h {:02} min", m / 60, m % 60)
    }
}

/// `1234.5` → `1,235`.
pub fn thousands(v: f64) -> String {
    servebench_stats::thousands(v.max(0.0).round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_matches_numpy_linear() {
        assert_eq!(percentile(&[], 50.0), None);
        assert_eq!(percentile(&[3.0, 1.0, 2.0], 50.0), Some(2.0));
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0], 50.0), Some(2.5));
        assert!((percentile(&[1.0, 2.0, 3.0, 4.0], 99.0).unwrap() - 3.97).abs() < 1e-9);
    }

    #[test]
    fn durations_read_plainly() {
        assert_eq!(human_duration(45.2), "45 s");
        assert_eq!(human_duration(14.0 * 60.0), "14 min");
        assert_eq!(human_duration(2.0 * 3600.0 + 5.0 * 60.0), "2 h 05 min");
    }
}
