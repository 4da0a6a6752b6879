//! One sustained-decode cell (seed spec §3.8–3.9, with its bugs fixed).
//!
//! 1. **Scout** (context > 0): one `max_tokens: 1` streaming request with the cell's prompt. It
//!    primes the prefix cache so the C streams do not compete for prefill, and is the integrated
//!    prefill sample. A failed scout makes the cell `error`.
//! 2. **Streams**: C workers each keep one request in flight and restart it the moment it ends.
//! 3. **Readiness**: every stream has produced a token, held for the stable window (3 s by
//!    default). The readiness timeout clock starts *after* the scout (the seed started it before,
//!    so slow long-context prefills ate the budget). On timeout the window opens anyway and the
//!    cell is flagged `warmup_timed_out`, and `capacity_limited` only when the failing condition
//!    is evidence of a limit (a server queue, fewer running requests than C, fewer than C
//!    producing streams). A known engine whose `/metrics` lacks the running gauge, or whose
//!    scrapes fail or answer empty, gives no server evidence: readiness falls back to the
//!    client's streams with a warning (issue 8).
//! 4. **Window**: `duration` seconds. `aggregate_tps` = output tokens that arrived inside the window
//!    / window length. Each request is credited with what it produced inside the window (usage
//!    deltas; requests straddling an edge count partially), so neither edge biases the number.
//! 5. **Close**: all streams are cut at the window end. Request statistics use only requests
//!    whose lifetime overlaps the window.
//!
//! Any stream failure (HTTP error, error object in the stream, transport error, malformed SSE,
//! empty stream) aborts the cell as `invalid` with the error text — concurrency is never silently
//! lowered.
//!
//! Shape: the streams are a [`LoadPattern::ClosedLoop`] on the load driver; readiness is the
//! pure [`Readiness`] machine fed once per monitor tick; the window is a
//! [`Window`] and its totals a [`WindowTally`]. What the cell collected is a [`SustainedRun`];
//! [`SustainedRun::measure`] makes it a [`CellMeasurement`] (statistics, findings, warnings),
//! which becomes the seed-compatible [`CellResult`] in the one mapping,
//! [`CellMeasurement::to_result`].

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use servebench_results::{BenchmarkMode, CellResult, CellStatus, FailureKind};
use servebench_sse::RequestRecord;
use tokio_util::sync::CancellationToken;

use crate::aggregate::RequestStats;
use crate::events::{CellProgress, EventSink, LiveFeed, Phase, RunEvent};
use crate::load::readiness::{Decision, Observation, Readiness, ReadinessRules};
use crate::load::scout::{scout, scout_failure_reason, Scout, INTERRUPTED_REASON};
use crate::load::window::{Window, WindowStep, WindowTally, ESTIMATED_SHARE_WARN};
use crate::load::FirstFailure;
use crate::load::{same_body, BodyFn, Load, LoadPattern, LoadSpec};
use crate::measure::{
    CellMeasurement, ClientLoad, ReadyFields, RequestCounts, ServerEvidence, Verdict, WindowTotals,
};
use crate::plan::CellSpec;
use crate::plausibility::{
    analyze_stalls, check_requests, check_stream_timing, stall_finding, Finding, RequestFacts,
    StallInput, StreamTiming,
};
use crate::procstat::process_cpu_seconds;
use crate::telemetry::{ClientWindow, Occupancy, Sampler, ServerSample, Telemetry, TimedScrape};
use servebench_client::stream::{StreamOutcome, WindowClock};
use servebench_client::target::HttpClient;
/// Margin between the readiness decision and the window start (see [`WindowClock::open_after`]).
const WINDOW_MARGIN: Duration = Duration::from_millis(20);
/// Monitor tick.
const TICK: Duration = Duration::from_millis(10);
/// Progress event period.
const PROGRESS_EVERY: Duration = Duration::from_millis(250);
/// A server sample older than this is stale (scrapes failing): readiness is not granted on it.
const STALE_SAMPLE: Duration = Duration::from_secs(5);
/// Scrape period of the server sampler (ramp-up readiness and window averages).
const SAMPLE_EVERY: Duration = Duration::from_millis(500);
/// Tick lag above which the cell carries a "client may be the bottleneck" warning, ms.
const TICK_LAG_WARN_MS: f64 = 50.0;

/// Whether a worst monitor-tick lag of `max_lag_ms` (ms) earns the cell the
/// [`tick_lag_warning`]: above [`TICK_LAG_WARN_MS`] (50 ms, docs/metrics.md
/// `client_max_tick_lag_ms`).
pub(crate) fn tick_lag_warns(max_lag_ms: f64) -> bool {
    max_lag_ms > TICK_LAG_WARN_MS
}

/// The cell warning when the client's monitor tick ran `lag_ms` late, in plain words: what a
/// descheduled client means for the numbers, with (`kernel_stamps`) or without kernel receive
/// timestamps on the token reads.
pub fn tick_lag_warning(lag_ms: f64, kernel_stamps: bool) -> String {
    let what = if kernel_stamps {
        "token times are kernel receive timestamps and stay exact (TTFT, ITL, the window's tokens), \
         but replacement requests and the window-edge /metrics scrapes went out up to that late, so fewer \
         than C streams may have run for moments and aggregate tok/s can read low"
    } else {
        "without kernel receive timestamps (https or not Linux) token times are taken when the client reads, \
         so TTFT and ITL can be inflated by up to that much, and replacement requests went out late"
    };
    format!(
        "the client was descheduled for up to {lag_ms:.0} ms (its 10 ms monitor tick ran that late: this machine is busy): \
         {what}; for publishable numbers rerun on an idle machine"
    )
}

/// Settings shared by every cell of a run.
#[derive(Clone, Debug)]
pub struct CellSettings {
    /// Streaming API path.
    pub path: &'static str,
    /// Measured window length.
    pub duration: Duration,
    /// Readiness must hold this long.
    pub stable_window: Duration,
    /// `max_tokens` of the decode requests (for the early-stop check).
    pub max_tokens: u64,
    /// Whether `ignore_eos` was sent (for the early-stop check).
    pub ignore_eos: bool,
}

/// What one cell needs besides the settings.
pub struct CellJob {
    /// Coordinates.
    pub spec: CellSpec,
    /// Request body of the C streams.
    pub decode_body: Bytes,
    /// Request body of the scout (None for context 0).
    pub scout_body: Option<Bytes>,
    /// Readiness timeout, counted from the end of the scout.
    pub ready_timeout: Duration,
    /// Position in the plan, from 1 (0 = warmup).
    pub index: usize,
    /// Cells in the plan.
    pub total: usize,
    /// The hidden warmup cell (reported differently).
    pub warmup: bool,
    /// Cold prompts (`--prompt-cache cold`): the run id whose nonce each request replaces with
    /// its own ([`crate::cache::cold_body`]); `None` = every request sends `decode_body`.
    pub cold_run_id: Option<String>,
    /// Where the rows of the cell's requests go (`--export-requests`), when exported.
    pub export: Option<crate::export::ExportSink>,
}

/// Result of a cell plus the scout's record (the integrated prefill sample).
pub struct CellOutcome {
    /// The exported result.
    pub result: CellResult,
    /// The scout request, when one ran.
    pub scout: Option<RequestRecord>,
    /// Ctrl-C arrived during the cell.
    pub interrupted: bool,
    /// The measured window (start, end), when it opened.
    pub window: Option<(Instant, Instant)>,
    /// Every request of the cell (ramp-up and window), in completion order.
    pub records: Vec<RequestRecord>,
}

/// How readiness ended.
#[derive(Clone, Debug, PartialEq)]
pub struct ReadyVerdict {
    /// `ready_reason` of the cell (`warmup_timeout` after a timeout).
    pub ready_reason: String,
    /// After a timeout: its failing condition and whether that is capacity evidence.
    pub timed_out: Option<(String, bool)>,
    /// The client-side fallback warning, when readiness had no server evidence.
    pub warning: Option<String>,
    /// Seconds from the cell start to the decision.
    pub warmup_s: f64,
}

/// The server's side of the window: the edge scrapes and the samples inside.
pub struct ServerWindow {
    /// The engine's telemetry.
    pub telemetry: Telemetry,
    /// Scrape when the window opened.
    pub start: Option<TimedScrape>,
    /// Scrape just before the streams were cut.
    pub end: Option<TimedScrape>,
    /// Sampler samples taken inside the window (edges not included).
    pub samples: Vec<ServerSample>,
}

/// What one sustained cell collected: the pool's requests, readiness, the window and the
/// server's scrapes. [`SustainedRun::measure`] turns it into the cell's [`CellMeasurement`].
pub struct SustainedRun {
    /// Coordinates.
    pub spec: CellSpec,
    /// Prompt tokens of the scout (None without one).
    pub scout_prompt_tokens: Option<u64>,
    /// Readiness, when it was decided.
    pub ready: Option<ReadyVerdict>,
    /// The measured window, when it opened.
    pub window: Option<Window>,
    /// Every request of the cell (ramp-up and window), completion order.
    pub outcomes: Vec<StreamOutcome>,
    /// The first failed stream.
    pub failure: FirstFailure,
    /// Largest monitor tick lag in the window, ms.
    pub max_tick_lag_ms: f64,
    /// Process CPU seconds used during the window.
    pub cpu_s: Option<f64>,
    /// Server telemetry of the window (metrics in use and the window opened).
    pub server: Option<ServerWindow>,
    /// Seconds from the cell start to the streams' end.
    pub wall_s: f64,
}

/// Live tok/s between progress events.
struct LiveRate {
    last: (Instant, u64),
    tps: Option<f64>,
}

impl LiveRate {
    fn update(&mut self, now: Instant, tokens: u64) -> Option<f64> {
        let dt = now.duration_since(self.last.0).as_secs_f64();
        if dt > 0.0 {
            self.tps = Some(tokens.saturating_sub(self.last.1) as f64 / dt);
        }
        self.last = (now, tokens);
        self.tps
    }
}

/// The cell's monitor: folds the driver's outcomes and sends progress and live events.
struct Monitor<'e> {
    events: &'e EventSink,
    feed: LiveFeed,
    outcomes: Vec<StreamOutcome>,
    live: LiveRate,
    last_progress: Instant,
    spec: CellSpec,
    t_cell: Instant,
    window_s: f64,
    warmup: bool,
}

impl Monitor<'_> {
    fn progress(&self, phase: Phase, active: u64, live_tps: Option<f64>, window: Option<f64>) {
        self.events.emit(RunEvent::Progress(CellProgress {
            concurrency: self.spec.concurrency,
            context: self.spec.context,
            phase,
            active_streams: active,
            elapsed_s: self.t_cell.elapsed().as_secs_f64(),
            live_tps,
            window_elapsed_s: window,
            window_s: self.window_s,
            warmup: self.warmup,
        }))
    }

    /// Takes the finished requests and, every [`PROGRESS_EVERY`], reports progress.
    fn tick(
        &mut self,
        now: Instant,
        load: &mut Load,
        sampler: Option<&Sampler>,
        phase: Phase,
        window_elapsed: Option<f64>,
    ) {
        let mut done = Vec::new();
        load.drain(&mut done);
        self.outcomes.extend(done.into_iter().map(|o| o.stream));
        if now.duration_since(self.last_progress) < PROGRESS_EVERY {
            return;
        }
        self.last_progress = now;
        let c = load.counters();
        let tps = self.live.update(now, c.live_tokens.load(Ordering::Relaxed));
        self.progress(
            phase,
            c.producing.load(Ordering::Relaxed),
            tps,
            window_elapsed,
        );
        let latest = sampler.and_then(|s| s.latest());
        self.feed.tick(self.events, &self.outcomes, latest.as_ref());
    }
}

/// A fresh monotonic interval at the monitor tick, delaying missed ticks.
fn ticker() -> tokio::time::Interval {
    let mut t = tokio::time::interval(TICK);
    t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    t
}

/// The C streams' body closure: the shared body, or (cold prompts) its own nonce per request.
fn decode_bodies(job: &CellJob) -> BodyFn {
    match &job.cold_run_id {
        Some(id) => {
            let (body, id) = (job.decode_body.clone(), id.clone());
            Arc::new(move |k| crate::cache::cold_body(&body, &id, k))
        }
        None => same_body(job.decode_body.clone()),
    }
}

/// Runs one sustained cell. `run_cancel` is the run's Ctrl-C token; `telemetry` is `Some` when
/// the server's metrics are usable.
pub async fn run_sustained_cell(
    client: &HttpClient,
    settings: &CellSettings,
    job: CellJob,
    events: &EventSink,
    telemetry: Option<&Telemetry>,
    run_cancel: &CancellationToken,
) -> CellOutcome {
    let c = job.spec.concurrency;
    let label = cell_label(&job.spec);
    let t_cell = Instant::now();
    events.emit(RunEvent::CellStarted {
        index: job.index,
        total: job.total,
        concurrency: c,
        context: job.spec.context,
        warmup: job.warmup,
    });
    events.log(format!("cell start {label}"));
    let mut mon = Monitor {
        events,
        feed: LiveFeed::new(job.index, job.warmup, t_cell),
        outcomes: Vec::new(),
        live: LiveRate {
            last: (Instant::now(), 0),
            tps: None,
        },
        last_progress: Instant::now(),
        spec: job.spec,
        t_cell,
        window_s: settings.duration.as_secs_f64(),
        warmup: job.warmup,
    };

    // 1. Scout.
    let mut scout_record = None;
    if let Some(body) = job.scout_body.clone() {
        mon.feed.phase(events, Phase::Scout, None);
        mon.progress(Phase::Scout, 0, None, None);
        match scout(client, settings.path, body, run_cancel).await {
            Scout::Interrupted => {
                let m = CellMeasurement::new(job.spec, BenchmarkMode::Duration, Verdict::ok());
                return interrupted(m, t_cell, None);
            }
            Scout::Failed(out) => return scout_failed(&job.spec, out, t_cell, events),
            Scout::Done(out) => scout_record = Some(out.record),
        }
    }
    let t_after_scout = Instant::now();
    mon.feed
        .phase(events, Phase::RampUp, Some(job.ready_timeout.as_secs_f64()));

    // 2. Streams.
    let clock = Arc::new(WindowClock::new(t_cell));
    let mut spec = LoadSpec::new(
        settings.path,
        LoadPattern::ClosedLoop { concurrency: c },
        decode_bodies(&job),
    );
    spec.window = Some(clock.clone());
    spec.export = job.export.clone();
    let mut load = Load::start(client, spec, run_cancel);
    let sampler_stop = run_cancel.child_token();
    let sampler = telemetry.map(|t| Sampler::spawn(t.clone(), SAMPLE_EVERY, sampler_stop.clone()));

    // 3. Readiness.
    let rules = ReadinessRules {
        concurrency: c,
        stable: settings.stable_window,
        timeout: job.ready_timeout,
        max_tokens: settings.max_tokens,
        server_metrics: sampler.is_some(),
        stale: STALE_SAMPLE,
    };
    let ready = await_readiness(
        &mut mon,
        &mut load,
        sampler.as_ref(),
        Readiness::new(rules, t_after_scout).metrics_known_failing(
            telemetry
                .and_then(|t| t.failing_for(Instant::now()))
                .is_some_and(|d| d >= STALE_SAMPLE),
        ),
        (&label, job.ready_timeout, settings.stable_window),
        run_cancel,
    )
    .await;
    let window = ready.as_ref().map(|_| {
        let (start, end) = clock.open_after(WINDOW_MARGIN, settings.duration);
        Window { start, end }
    });

    // 4. Window.
    let mut measured = WindowRun::default();
    if let (Some(w), Some(r)) = (window, &ready) {
        events.log(format!("ready {label} {}", r.ready_reason));
        measured = measure_window(
            &mut mon,
            &mut load,
            sampler.as_ref(),
            telemetry,
            w,
            run_cancel,
        )
        .await;
    }

    // 5. Close.
    sampler_stop.cancel();
    let window_samples = match sampler {
        Some(sm) => sm.finish().await,
        None => Vec::new(),
    };
    load.stop();
    let report = load.finish().await;
    let mut outcomes = mon.outcomes;
    outcomes.extend(report.outcomes.into_iter().map(|o| o.stream));
    let run = SustainedRun {
        spec: job.spec,
        scout_prompt_tokens: scout_record.as_ref().and_then(|r| r.prompt_tokens),
        ready,
        window,
        outcomes,
        failure: report.first_failure,
        max_tick_lag_ms: measured.max_lag_ms,
        cpu_s: measured.cpu_s,
        server: telemetry
            .filter(|_| window.is_some())
            .map(|t| ServerWindow {
                telemetry: t.clone(),
                start: measured.edges.0,
                end: measured.edges.1,
                samples: window_samples,
            }),
        wall_s: t_cell.elapsed().as_secs_f64(),
    };
    if run_cancel.is_cancelled() {
        return interrupted(run.readiness(), t_cell, scout_record);
    }
    let (m, records) = run.measure(settings);
    let result = m.to_result();
    match (result.status, result.aggregate_tps) {
        (CellStatus::Ok, Some(tps)) => events.log(format!("cell done {label} {tps:.1} tok/s")),
        _ => events.log(format!("cell invalid {label}: {}", result.status_reason)),
    }
    CellOutcome {
        result,
        scout: scout_record,
        interrupted: false,
        window: window.map(|w| (w.start, w.end)),
        records,
    }
}

fn cell_label(spec: &CellSpec) -> String {
    format!(
        "C={} ctx={}",
        spec.concurrency,
        servebench_results::format_context(spec.context)
    )
}

/// The cell of a failed scout: `error`, with the scout's failure and 429 counts.
fn scout_failed(
    spec: &CellSpec,
    out: StreamOutcome,
    t_cell: Instant,
    events: &EventSink,
) -> CellOutcome {
    let reason = scout_failure_reason(out.record.error.as_deref().unwrap_or_default());
    let mut m = CellMeasurement::new(
        *spec,
        BenchmarkMode::Duration,
        Verdict::new(CellStatus::Error, reason, out.facts.kind),
    );
    m.counts = RequestCounts {
        completed: 0,
        errors: 1,
        rejected: Some(u64::from(out.facts.rejected)),
        retried: Some(u64::from(out.facts.retries)),
    };
    m.wall_s = Some(t_cell.elapsed().as_secs_f64());
    events.log(format!(
        "cell error {}: {}",
        cell_label(spec),
        m.verdict.reason
    ));
    CellOutcome {
        result: m.to_result(),
        scout: Some(out.record),
        interrupted: false,
        window: None,
        records: Vec::new(),
    }
}

/// Feeds the readiness machine once per tick until it decides; `None` when Ctrl-C or a failed
/// stream ended the cell first. `limits`: label, readiness timeout, stable window.
async fn await_readiness(
    mon: &mut Monitor<'_>,
    load: &mut Load,
    sampler: Option<&Sampler>,
    mut machine: Readiness,
    limits: (&str, Duration, Duration),
    run_cancel: &CancellationToken,
) -> Option<ReadyVerdict> {
    let (label, timeout, stable) = limits;
    let events = mon.events;
    let mut ticker = ticker();
    loop {
        let scheduled = ticker.tick().await;
        let now = Instant::now();
        mon.feed.lag(
            now.saturating_duration_since(scheduled.into_std())
                .as_secs_f64()
                * 1e3,
        );
        if run_cancel.is_cancelled() || load.failed() {
            return None;
        }
        let latest = sampler.and_then(|s| s.latest());
        let counters = load.counters();
        let decision = machine.observe(Observation {
            now,
            producing: counters.producing.load(Ordering::Relaxed),
            live_tokens: counters.live_tokens.load(Ordering::Relaxed),
            completed: counters.completed.load(Ordering::Relaxed),
            latest: latest.as_ref(),
        });
        let warmup_s = || Instant::now().duration_since(mon.t_cell).as_secs_f64();
        match decision {
            Decision::Ready { reason, warning } => {
                mon.feed
                    .phase(events, Phase::Readiness, Some(stable.as_secs_f64()));
                return Some(ReadyVerdict {
                    ready_reason: reason,
                    timed_out: None,
                    warning,
                    warmup_s: warmup_s(),
                });
            }
            Decision::TimedOut {
                reason,
                capacity_evidence,
            } => {
                events.warn(format!("warmup timeout {label} {reason}"));
                return Some(ReadyVerdict {
                    ready_reason: "warmup_timeout".into(),
                    timed_out: Some((reason, capacity_evidence)),
                    warning: None,
                    warmup_s: warmup_s(),
                });
            }
            Decision::Waiting { stable: true } => {
                mon.feed
                    .phase(events, Phase::Readiness, Some(stable.as_secs_f64()));
                mon.tick(now, load, sampler, Phase::Readiness, None);
            }
            Decision::Waiting { stable: false } => {
                mon.feed
                    .phase(events, Phase::RampUp, Some(timeout.as_secs_f64()));
                mon.tick(now, load, sampler, Phase::RampUp, None);
            }
        }
    }
}

/// What the window loop saw.
#[derive(Default)]
struct WindowRun {
    max_lag_ms: f64,
    cpu_s: Option<f64>,
    edges: (Option<TimedScrape>, Option<TimedScrape>),
}

/// Waits for the window's start, scrapes its start edge, ticks until it closes (end, Ctrl-C,
/// a failed stream), and scrapes its end edge before the streams are cut.
async fn measure_window(
    mon: &mut Monitor<'_>,
    load: &mut Load,
    sampler: Option<&Sampler>,
    telemetry: Option<&Telemetry>,
    w: Window,
    run_cancel: &CancellationToken,
) -> WindowRun {
    tokio::time::sleep_until(w.start.into()).await;
    mon.feed
        .phase(mon.events, Phase::Measuring, Some(w.seconds()));
    let cpu0 = process_cpu_seconds();
    let mut run = WindowRun::default();
    if let Some(t) = telemetry {
        run.edges.0 = t.edge_scrape().await;
    }
    let mut ticker = ticker();
    loop {
        let scheduled = ticker.tick().await;
        let now = Instant::now();
        let lag_ms = now
            .saturating_duration_since(scheduled.into_std())
            .as_secs_f64()
            * 1e3;
        run.max_lag_ms = run.max_lag_ms.max(lag_ms);
        mon.feed.lag(lag_ms);
        match w.step(now, run_cancel.is_cancelled() || load.failed()) {
            WindowStep::Close => break,
            WindowStep::Before => {}
            WindowStep::Measuring { elapsed_s } => {
                mon.tick(now, load, sampler, Phase::Measuring, Some(elapsed_s))
            }
        }
    }
    if let Some(t) = telemetry {
        run.edges.1 = t.edge_scrape().await;
    }
    run.cpu_s = match (cpu0, process_cpu_seconds()) {
        (Some(a), Some(b)) => Some(b - a),
        _ => None,
    };
    run
}

impl SustainedRun {
    /// The measurement known before the window: coordinates, the scout's prompt tokens,
    /// readiness (also what an interrupted cell reports).
    fn readiness(&self) -> CellMeasurement {
        let mut m = CellMeasurement::new(self.spec, BenchmarkMode::Duration, Verdict::ok());
        m.prompt_tokens = self.scout_prompt_tokens;
        if let Some(r) = &self.ready {
            m.ready = ReadyFields {
                reason: r.ready_reason.clone(),
                timed_out: r.timed_out.as_ref().map(|(reason, _)| reason.clone()),
                warmup_s: self.window.is_some().then_some(r.warmup_s),
                warning: r.warning.clone(),
            };
        }
        m
    }

    /// What the cell measured and every request's record (completion order): counts, the
    /// window's totals and request statistics, server evidence, warnings, plausibility and the
    /// headline. [`CellMeasurement::to_result`] makes it the seed's [`CellResult`].
    pub fn measure(self, settings: &CellSettings) -> (CellMeasurement, Vec<RequestRecord>) {
        let mut m = self.readiness();
        m.wall_s = Some(self.wall_s);
        let outs = &self.outcomes;
        m.counts = RequestCounts {
            completed: outs.iter().filter(|o| o.record.completed).count() as u64,
            errors: outs
                .iter()
                .filter(|o| o.record.error.is_some() && !o.record.cancelled)
                .count() as u64,
            rejected: Some(outs.iter().map(|o| u64::from(o.facts.rejected)).sum()),
            retried: Some(outs.iter().map(|o| u64::from(o.facts.retries)).sum()),
        };
        if let Some((err, kind)) = &self.failure {
            m.verdict = Verdict::new(
                CellStatus::Invalid,
                format!("a stream failed: {err}"),
                *kind,
            );
            let recs: Vec<&RequestRecord> = outs.iter().map(|o| &o.record).collect();
            m.requests = Some(RequestStats::of(&recs, self.window.map(|w| w.start)));
        } else if let Some(w) = self.window {
            self.measure_window(&mut m, w, settings);
        } else {
            m.verdict = Verdict::new(
                CellStatus::Error,
                "the measured window never opened".into(),
                None,
            );
        }
        let records = self.outcomes.into_iter().map(|o| o.record).collect();
        (m, records)
    }

    /// The window's part: client totals, request statistics, server evidence, warnings,
    /// plausibility and the headline.
    fn measure_window(&self, m: &mut CellMeasurement, w: Window, settings: &CellSettings) {
        let c = self.spec.concurrency;
        let window_s = w.seconds();
        let tally = WindowTally::of(&w, &self.outcomes);
        let in_window: Vec<&RequestRecord> = self
            .outcomes
            .iter()
            .map(|o| &o.record)
            .filter(|r| w.holds(r))
            .collect();
        m.window = Some(WindowTotals {
            seconds: window_s,
            wall_seconds: Some(window_s),
            tokens: Some(tally.tokens),
            token_events: Some(tally.token_events),
            continuous: Some(tally.continuous),
            aggregate_source: Some(tally.aggregate_source()),
        });
        let stats = RequestStats::of(&in_window, Some(w.start));
        if m.prompt_tokens.is_none() {
            m.prompt_tokens = in_window.iter().find_map(|r| r.prompt_tokens);
        }
        let delay = &tally.read_delay;
        m.client = ClientLoad {
            cpu_util: self.cpu_s.map(|cpu| cpu / window_s),
            max_tick_lag_ms: Some(self.max_tick_lag_ms),
            read_delay_ms: (delay.reads > 0)
                .then(|| (delay.total_s / delay.reads as f64 * 1e3, delay.max_s * 1e3)),
        };
        m.server = self.server.as_ref().map(|sw| {
            let t = &sw.telemetry;
            let mut samples: Vec<ServerSample> = Vec::with_capacity(sw.samples.len() + 2);
            samples.extend(sw.start.as_ref().map(|e| t.sample_of(e)));
            samples.extend(
                sw.samples
                    .iter()
                    .filter(|x| x.at >= w.start && x.at <= w.end)
                    .cloned(),
            );
            samples.extend(sw.end.as_ref().map(|e| t.sample_of(e)));
            ServerEvidence {
                engine: t.engine(),
                start: sw.start.clone(),
                end: sw.end.clone(),
                samples,
                origin: w.start,
                client: ClientWindow {
                    concurrency: c,
                    tokens: tally.tokens,
                    seconds: window_s,
                    occupancy: Occupancy::Sustained,
                },
            }
        });
        m.warnings = self.window_warnings(&tally, &in_window, settings);
        self.judge(m, w, &tally, &stats, settings);
        m.requests = Some(stats);
    }

    /// Warnings about usage reporting, early stops and a descheduled client (the typed
    /// estimate warning is [`estimate_finding`]).
    fn window_warnings(
        &self,
        tally: &WindowTally,
        in_window: &[&RequestRecord],
        settings: &CellSettings,
    ) -> Vec<String> {
        let mut warnings = Vec::new();
        if tally.tokens > 0 && tally.multi_event > 0 && !tally.all_continuous() {
            let mut w = format!(
                "usage was not streamed on every chunk ({} of {} requests): window tokens were counted one per SSE event, \
                 corrected by each request's final usage spread over its chunks",
                tally.continuous, tally.multi_event
            );
            match (tally.fallback_tokens_per_chunk, tally.extrapolated) {
                (Some(ratio), (n, added)) if n > 0 => w.push_str(&format!(
                    "; {n} request(s) cut at the window end had no usage yet and were credited {ratio:.2} tokens per chunk, \
                     the ratio of the finished ones (an estimate: +{added} tokens)"
                )),
                _ => w.push_str(
                    "; a request cut at the window end counts one token per chunk (multi-token chunks undercounted)",
                ),
            }
            warnings.push(w);
        }
        if tally.nonmonotonic_usage {
            warnings.push(NOT_CUMULATIVE_WARNING.into());
        }
        if tally.usage_below_count {
            warnings.push("final usage reported fewer tokens than token events were seen".into());
        }
        if settings.ignore_eos && settings.max_tokens > 0 {
            let done: Vec<&&RequestRecord> = in_window.iter().filter(|r| r.completed).collect();
            // A recounted (non-cumulative usage) request's count is a lower bound: no stop
            // is inferred from it.
            let short = done
                .iter()
                .filter(|r| r.output_tokens < settings.max_tokens && !r.nonmonotonic_usage)
                .count();
            if short > 0 {
                warnings.push(format!(
                    "{short} of {} completed requests stopped before max_tokens {} although ignore_eos was sent",
                    done.len(),
                    settings.max_tokens
                ));
            }
        }
        if tick_lag_warns(self.max_tick_lag_ms) {
            warnings.push(tick_lag_warning(
                self.max_tick_lag_ms,
                tally.read_delay.reads > 0,
            ));
        }
        warnings
    }

    /// Plausibility (every request) and stalls (requests of the window), then the headline:
    /// `aggregate_tps` = window tokens / window length, or `invalid` without tokens.
    fn judge(
        &self,
        m: &mut CellMeasurement,
        w: Window,
        tally: &WindowTally,
        stats: &RequestStats,
        s: &CellSettings,
    ) {
        let facts: Vec<RequestFacts> = self
            .outcomes
            .iter()
            .map(|o| RequestFacts {
                output_tokens: o.record.output_tokens,
                usage_jump: o.facts.usage_jump,
            })
            .collect();
        let mut findings = check_requests(&facts, s.max_tokens);
        let timings: Vec<StreamTiming> = self
            .outcomes
            .iter()
            .filter(|o| w.holds(&o.record) && !o.record.failed())
            .map(|o| StreamTiming::of(&o.record, &o.facts))
            .collect();
        findings.extend(check_stream_timing(&timings));
        let stall_inputs: Vec<StallInput<'_>> = self
            .outcomes
            .iter()
            .filter(|o| w.holds(&o.record))
            .map(|o| StallInput {
                sent_at: o.record.sent_at,
                end_at: o.record.end_at,
                token_events_span: o
                    .record
                    .first_token_event_at
                    .zip(o.record.last_token_event_at),
                token_events: o.record.token_events,
                long_gaps: &o.facts.long_gaps,
            })
            .collect();
        let typical_gap = stats.chunk_itl.as_ref().map(|x| x.percentile(50.0));
        let stalls = analyze_stalls(&stall_inputs, (w.start, w.end), typical_gap);
        findings.extend(stall_finding(&stalls));
        findings.extend(estimate_finding(tally));
        m.stalls = Some(stalls);
        if tally.tokens == 0 && tally.token_events > 0 {
            // Tokens arrived, but the server's cumulative usage did not grow inside the window
            // (it went down, or stayed at a value reached before): the count cannot be trusted,
            // and the server did send output, so this is not `no_output` (issue 17).
            m.verdict = Verdict::new(
                CellStatus::Invalid,
                format!(
                    "usage_implausible: {} token events arrived inside the measured window but the server's usage.completion_tokens did not grow over them{}; the token count cannot be trusted",
                    tally.token_events,
                    if tally.nonmonotonic_usage { " (it went down)" } else { "" }
                ),
                Some(FailureKind::UsageImplausible),
            );
        } else if tally.tokens == 0 {
            m.verdict = Verdict::new(
                CellStatus::Invalid,
                "no output tokens arrived inside the measured window".into(),
                Some(FailureKind::NoOutput),
            );
        } else {
            m.aggregate_tps = Some(tally.tokens as f64 / w.seconds());
            m.capacity_limited = self
                .ready
                .as_ref()
                .and_then(|r| r.timed_out.as_ref())
                .is_some_and(|(_, evidence)| *evidence);
        }
        m.findings = findings;
    }
}

/// Warning of a cell with a request whose `usage.completion_tokens` was not cumulative
/// ([`RequestRecord::nonmonotonic_usage`]).
pub const NOT_CUMULATIVE_WARNING: &str = "the server's usage.completion_tokens was not cumulative within a stream (it went down, or stayed below the token events): \
     those requests were counted one token per token event (each chunk its own value where the final usage confirmed the per-chunk counts)";

/// The cell Ctrl-C ended: what `m` knew (readiness), `skipped_user`.
fn interrupted(
    mut m: CellMeasurement,
    t_cell: Instant,
    scout: Option<RequestRecord>,
) -> CellOutcome {
    m.verdict = Verdict::new(CellStatus::SkippedUser, INTERRUPTED_REASON.into(), None);
    m.wall_s = Some(t_cell.elapsed().as_secs_f64());
    m.requests = None;
    CellOutcome {
        result: m.to_result(),
        scout,
        interrupted: true,
        window: None,
        records: Vec::new(),
    }
}

/// The typed `estimated_tokens` warning of a window whose count is partly an estimate
/// (break-it round 8: cells `ok` at 0.125× to 2.5× the truth with no typed warning):
/// * more than [`ESTIMATED_SHARE_WARN`] of its tokens are final usage spread over the chunks
///   of requests straddling its edges, or cut requests credited at the cell's tokens per chunk
///   ([`WindowTally::of`]): exact when every chunk carries the same number of tokens, off when
///   that number changes over time;
/// * or no request of the window reported any usage: every token was counted one per chunk,
///   a lower bound when chunks carry several.
fn estimate_finding(tally: &WindowTally) -> Option<Finding> {
    if tally.tokens == 0 {
        return None;
    }
    let est = tally.estimated();
    let share = est as f64 / tally.tokens as f64;
    let message = if share > ESTIMATED_SHARE_WARN {
        format!(
            "estimated_tokens: {est} of the window's {} tokens ({:.0} %) are an estimate, not a count: usage came only at the end, so the final usage of requests straddling the window's edges was spread over their chunks and requests cut at its end were credited at the finished ones' tokens per chunk; exact only when every chunk carries as many tokens",
            tally.tokens,
            share * 100.0
        )
    } else if !tally.usage_seen && tally.multi_event > 0 {
        format!(
            "estimated_tokens: no request of the window reported usage: its {} tokens were counted one per chunk, a lower bound when chunks carry several (speculative decoding)",
            tally.tokens
        )
    } else {
        return None;
    };
    Some(Finding {
        kind: FailureKind::EstimatedTokens,
        invalid: false,
        message,
    })
}
