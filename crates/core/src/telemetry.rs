//! Server telemetry beside the runner: periodic `/metrics` scrapes for readiness and scheduler
//! state, and per-window counter deltas for the server-side cell fields.
//!
//! Rules (issue "engine telemetry", seed spec §3.9 with its bugs fixed):
//! * every number comes from the engine's own catalog entry ([`servebench_metrics::Catalog`]);
//!   a failed scrape is *unknown*, never 0;
//! * server tokens, throughput, speculative acceptance (rate = Δaccepted/Δdraft tokens, length =
//!   1 + Δaccepted/Δdrafts), prefix-cache hit rate and preemptions are counter deltas between a
//!   scrape at the window start and one at the window end, taken **before** the streams are cut;
//! * scheduler state (running, queued, KV usage) is sampled about once a second inside the
//!   window; averages, maxima and the queue fraction come from those samples.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use servebench_metrics::{window_stats, Concept, Engine, Scrape};
use servebench_results::{CellResult, ServerScrapes};

use crate::probe::scrape_metrics_typed;
use servebench_client::target::HttpClient;

/// Scrape timeout.
pub const SCRAPE_TIMEOUT: Duration = Duration::from_secs(5);

/// One scrape's scheduler state.
#[derive(Clone, Debug, PartialEq)]
pub struct ServerSample {
    /// When the scrape's answer arrived.
    pub at: Instant,
    /// Running requests (gauge).
    pub running: Option<f64>,
    /// Queued / waiting requests (gauge).
    pub waiting: Option<f64>,
    /// KV-cache usage 0–1 (gauge).
    pub kv_usage: Option<f64>,
    /// Generated tokens so far (counter), for "generating" checks.
    pub generation_tokens: Option<f64>,
    /// Speculative acceptance rate gauge (engines without draft counters: SGLang).
    pub spec_accept_rate: Option<f64>,
    /// Speculative acceptance length gauge (SGLang; 0 when speculative decoding is off).
    pub spec_accept_length: Option<f64>,
}

/// A scrape with its request and arrival times. The server read its counters somewhere in
/// between (a slow answer or a client starved of CPU makes that interval long).
#[derive(Clone, Debug)]
pub struct TimedScrape {
    /// When the request was started.
    pub sent: Instant,
    /// Arrival time of the answer.
    pub at: Instant,
    /// Parsed exposition.
    pub scrape: Scrape,
}

/// Telemetry for one server whose engine and metrics were identified at startup.
///
/// A scrape that overruns its size cap ([`servebench_client::target::MAX_BODY_BYTES`]) or its
/// time cap ([`SCRAPE_TIMEOUT`]) while the page is arriving disables the source for the rest of the run: every later
/// scrape gives `None` at once (unknown, never zero) and [`Telemetry::take_disabled`] gives the
/// warning, once (issue 17: a 200 MB page scraped every second starved the measurement).
#[derive(Clone, Debug)]
pub struct Telemetry {
    client: HttpClient,
    engine: Engine,
    disabled: Arc<Mutex<Disabled>>,
    /// Since when every scrape has failed (`None` after a successful one), across cells.
    failing_since: Arc<Mutex<Option<Instant>>>,
}

#[derive(Debug, Default)]
struct Disabled {
    /// Why the source was disabled.
    reason: Option<String>,
    /// The warning was handed out.
    reported: bool,
}

impl Telemetry {
    /// Telemetry through `client` for `engine` (only build it when metrics are available).
    pub fn new(client: HttpClient, engine: Engine) -> Self {
        Telemetry {
            client,
            engine,
            disabled: Arc::new(Mutex::new(Disabled::default())),
            failing_since: Arc::new(Mutex::new(None)),
        }
    }

    /// How long every scrape has failed, at `now` (`None` when the last scrape succeeded or
    /// none was tried; the whole run when the source is disabled). Shared by every cell of the
    /// run, so a cell that starts after `/metrics` went away knows it at once (break-it round
    /// 9: each later cell's readiness waited the 5 s staleness for a first sample).
    pub fn failing_for(&self, now: Instant) -> Option<Duration> {
        let since = (*self.failing_since.lock().ok()?)?;
        Some(now.saturating_duration_since(since))
    }

    fn note_scrape(&self, ok: bool, at: Instant) {
        if let Ok(mut f) = self.failing_since.lock() {
            if ok {
                *f = None;
            } else {
                f.get_or_insert(at);
            }
        }
    }

    /// Why `/metrics` was disabled during the run, if it was.
    pub fn disabled(&self) -> Option<String> {
        self.disabled.lock().ok().and_then(|d| d.reason.clone())
    }

    /// The warning of a source disabled since the last call (`Some` once per run).
    pub fn take_disabled(&self) -> Option<String> {
        let mut d = self.disabled.lock().ok()?;
        if d.reported {
            return None;
        }
        let r = d.reason.clone()?;
        d.reported = true;
        Some(r)
    }

    /// The engine whose catalog is used.
    pub fn engine(&self) -> Engine {
        self.engine
    }

    /// A scrape that marks a window edge: one retry right away when the first attempt failed
    /// (a connection closed by the server at that moment), `None` when both failed.
    pub async fn edge_scrape(&self) -> Option<TimedScrape> {
        match self.scrape().await {
            Some(s) => Some(s),
            None => self.scrape().await,
        }
    }

    /// One scrape; `None` when it failed (unknown, never zero), when the page was empty, or
    /// when the source is disabled.
    pub async fn scrape(&self) -> Option<TimedScrape> {
        if self.disabled().is_some() {
            self.note_scrape(false, Instant::now());
            return None;
        }
        let sent = Instant::now();
        let s = match scrape_metrics_typed(&self.client, SCRAPE_TIMEOUT).await {
            Ok(s) => s,
            Err(e) => {
                self.note_scrape(false, sent);
                if e.overrun {
                    if let Ok(mut d) = self.disabled.lock() {
                        d.reason.get_or_insert_with(|| {
                            format!(
                                "server metrics disabled for the rest of the run: {} overran its cap ({}); server-side fields of later cells are unknown",
                                self.client.target().url("/metrics"),
                                e.message
                            )
                        });
                    }
                }
                return None;
            }
        };
        self.note_scrape(true, sent);
        Some(TimedScrape {
            sent,
            at: Instant::now(),
            scrape: s,
        })
    }

    /// Scheduler state of a scrape.
    pub fn sample_of(&self, t: &TimedScrape) -> ServerSample {
        let c = |k| t.scrape.concept(self.engine, k);
        ServerSample {
            at: t.at,
            running: c(Concept::Running),
            waiting: c(Concept::Waiting),
            kv_usage: c(Concept::KvUsage),
            generation_tokens: c(Concept::GenerationTokens),
            spec_accept_rate: c(Concept::SpecAcceptRateGauge),
            spec_accept_length: c(Concept::SpecAcceptLengthGauge),
        }
    }
}

/// Background `/metrics` sampler: the latest sample (for readiness) and every sample taken until
/// stopped (callers keep those inside their window).
pub struct Sampler {
    latest: Arc<Mutex<Option<ServerSample>>>,
    task: tokio::task::JoinHandle<Vec<ServerSample>>,
}

impl Sampler {
    /// Starts scraping every `every` until `stop` is cancelled.
    pub fn spawn(t: Telemetry, every: Duration, stop: CancellationToken) -> Sampler {
        let latest: Arc<Mutex<Option<ServerSample>>> = Arc::new(Mutex::new(None));
        let l = latest.clone();
        let task = tokio::spawn(async move {
            let mut all = Vec::new();
            loop {
                let scraped = tokio::select! {
                    biased;
                    _ = stop.cancelled() => break,
                    s = t.scrape() => s,
                };
                if let Some(ts) = scraped {
                    let smp = t.sample_of(&ts);
                    all.push(smp.clone());
                    if let Ok(mut g) = l.lock() {
                        *g = Some(smp);
                    }
                }
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = tokio::time::sleep(every) => {}
                }
            }
            all
        });
        Sampler { latest, task }
    }

    /// The most recent successful sample.
    pub fn latest(&self) -> Option<ServerSample> {
        self.latest.lock().ok().and_then(|g| g.clone())
    }

    /// Waits for the sampler to stop (cancel its token first) and returns every sample.
    pub async fn finish(self) -> Vec<ServerSample> {
        self.task.await.unwrap_or_default()
    }
}

/// Server-side readiness of a cell at one sample (seed §3.9 step 5).
#[derive(Clone, Debug, PartialEq)]
pub struct ServerReadiness {
    /// All server conditions hold.
    pub ready: bool,
    /// `running_reqs=R/C, queue_reqs=Q` (the seed's `ready_reason` prefix); `metrics_unavailable`
    /// without evidence.
    pub reason: String,
    /// First failing condition (`running_reqs=R/C`, `queue_reqs=Q`, `no_generation`), or empty;
    /// `metrics_unavailable` without evidence.
    pub failing: String,
    /// The server gave scheduler evidence (a running-requests gauge in a fresh scrape). Without
    /// it readiness falls back to the client's streams (issue 8: missing evidence is not
    /// evidence of a limit), and `missing` says why.
    pub evidence: bool,
    /// Why there is no evidence (`""` when there is).
    pub missing: String,
}

impl ServerReadiness {
    /// No server evidence, for the reason `why` (readiness then uses the client's streams only).
    pub fn missing(why: impl Into<String>) -> ServerReadiness {
        ServerReadiness {
            ready: false,
            reason: "metrics_unavailable".into(),
            failing: "metrics_unavailable".into(),
            evidence: false,
            missing: why.into(),
        }
    }

    /// Readiness may be granted as far as the server is concerned: its conditions hold, or it
    /// gave no evidence (client-side fallback).
    pub fn permits(&self) -> bool {
        self.ready || !self.evidence
    }
}

/// Why the latest sampler state gives no server evidence, or `None` when `latest` (a sample no
/// older than `stale`) can be judged. `since_start`: time since the sampler started; while it is
/// below `stale` and no sample arrived yet, the evidence is still pending (`Some("")`).
pub fn missing_evidence(
    latest: Option<&ServerSample>,
    now: Instant,
    since_start: Duration,
    stale: Duration,
) -> Option<String> {
    match latest {
        Some(s) if now.saturating_duration_since(s.at) <= stale => s.running.is_none().then(|| {
            "the engine's /metrics has no running-requests gauge (missing, renamed, or an empty page)"
                .to_string()
        }),
        Some(_) => Some(format!(
            "/metrics scrapes failed for more than {:.0} s",
            stale.as_secs_f64()
        )),
        None if since_start >= stale => Some(format!(
            "no /metrics scrape succeeded within {:.0} s",
            stale.as_secs_f64()
        )),
        None => Some(String::new()),
    }
}

/// Whether a readiness timeout's failing condition is evidence of a capacity limit: the server
/// reported a queue or fewer running requests than C, or the client saw fewer than C streams
/// producing tokens. `metrics_unavailable`, `not_stable` and `no_generation` are not.
pub fn timeout_is_capacity_evidence(timeout_reason: &str) -> bool {
    ["queue_reqs=", "running_reqs=", "active_streams="]
        .iter()
        .any(|p| timeout_reason.starts_with(p))
}

/// Evaluates the server conditions: queue = 0, generating, and running ≥ C — or, for short
/// generations (`max_tokens` ≤ 512) whose requests finish and restart between scrapes, at least C
/// completed requests with an empty queue (the seed's "short request flow" rule).
pub fn server_readiness(
    s: &ServerSample,
    c: u64,
    generating: bool,
    max_tokens: u64,
    completed: u64,
) -> ServerReadiness {
    // a gauge below 0 (or not finite) is no count: no evidence of an empty queue or a full
    // batch, and never printed as `running_reqs=-5/4` (break-it round 5)
    for (name, g) in [("running", s.running), ("waiting", s.waiting)] {
        if let Some(x) = g.filter(|x| *x < 0.0 || !x.is_finite()) {
            return ServerReadiness::missing(format!(
                "the engine's /metrics {name}-requests gauge read {x} (below 0 or not finite: no count)"
            ));
        }
    }
    let running = s.running.unwrap_or(0.0);
    let waiting = s.waiting.unwrap_or(0.0);
    let reason = format!(
        "running_reqs={}/{c}, queue_reqs={}",
        running.round() as i64,
        waiting.round() as i64
    );
    let full = running + 1e-9 >= c as f64;
    let short_flow = max_tokens <= 512 && completed >= c && waiting <= 0.0 && generating;
    if s.running.is_none() {
        return ServerReadiness::missing(
            "the engine's /metrics has no running-requests gauge (missing, renamed, or an empty page)",
        );
    }
    let failing = if waiting > 0.0 {
        format!("queue_reqs={}", waiting.round() as i64)
    } else if !generating {
        "no_generation".to_string()
    } else if !(full || short_flow) {
        format!("running_reqs={}/{c}", running.round() as i64)
    } else {
        String::new()
    };
    ServerReadiness {
        ready: failing.is_empty(),
        reason,
        failing,
        evidence: true,
        missing: String::new(),
    }
}

/// Times of the two edge scrapes relative to `window_start`, s (negative = before it).
pub fn scrape_times(window_start: Instant, a: &TimedScrape, b: &TimedScrape) -> ServerScrapes {
    let rel = |t: Instant| {
        if t >= window_start {
            t.duration_since(window_start).as_secs_f64()
        } else {
            -window_start.duration_since(t).as_secs_f64()
        }
    };
    ServerScrapes {
        start_sent_s: rel(a.sent),
        start_answered_s: rel(a.at),
        end_sent_s: rel(b.sent),
        end_answered_s: rel(b.at),
    }
}

/// What the server showed of one window.
#[derive(Clone, Copy, Debug)]
pub struct WindowEvidence<'a> {
    /// The engine whose catalog reads the scrapes.
    pub engine: Engine,
    /// Scrape taken when the window opened.
    pub start: Option<&'a TimedScrape>,
    /// Scrape taken just before it closed (before the streams were cut).
    pub end: Option<&'a TimedScrape>,
    /// Scheduler samples inside the window (the two edge scrapes included).
    pub samples: &'a [ServerSample],
}

/// How a window's scheduler samples judge `underfilled` and `capacity_limited`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Occupancy {
    /// A sustained window holds C requests: fewer running than C (max below C, average below
    /// 95 %) or any queue is a capacity limit, an average below 98 % is underfilled.
    Sustained,
    /// A finite batch ramps up and drains by design: only queueing marks it capacity-limited,
    /// and it is never underfilled.
    Drains,
}

/// The client's side of one window.
#[derive(Clone, Copy, Debug)]
pub struct ClientWindow {
    /// Requests the client kept in flight (C).
    pub concurrency: u64,
    /// Tokens the client credited to the window.
    pub tokens: u64,
    /// Window length, s.
    pub seconds: f64,
    /// How occupancy is judged.
    pub occupancy: Occupancy,
}

/// The window's readings of one gauge (`name`, read by `get`): a reading below 0 (or not
/// finite) is no count of requests or share of a cache (issue 17: a running gauge of -5), so
/// such readings are left out and `warnings` says so once, with the lowest one.
fn gauge(
    samples: &[ServerSample],
    name: &str,
    get: impl Fn(&ServerSample) -> Option<f64>,
    warnings: &mut Vec<String>,
) -> Vec<f64> {
    let (good, bad): (Vec<f64>, Vec<f64>) = samples
        .iter()
        .filter_map(get)
        .partition(|x| *x >= 0.0 && x.is_finite());
    if let Some(low) = bad.into_iter().min_by(f64::total_cmp) {
        warnings.push(format!(
            "the server's {name} gauge read {low} (below 0, no count): those samples are left out"
        ));
    }
    good
}

/// Fills the server-side fields of `cell` from the window's scrapes and samples
/// ([`WindowEvidence`]) and the client's totals ([`ClientWindow`]).
///
/// Adds a warning when client and server token counts disagree by more than
/// max(5 %, 2·C tokens) after scaling the server delta to the window length, for every instant
/// inside the two scrapes (request → answer) at which the server may have read its counters.
pub fn apply_window(cell: &mut CellResult, server: &WindowEvidence<'_>, client: ClientWindow) {
    let WindowEvidence {
        engine,
        start,
        end,
        samples,
    } = *server;
    if let (Some(a), Some(b)) = (start, end) {
        apply_counters(cell, engine, (a, b), &client);
    }
    apply_gauges(cell, samples);
    judge_occupancy(cell, client.concurrency, client.occupancy);
}

/// The counter deltas between the window's edge scrapes `a` and `b`: generated tokens (and
/// their check against the client's count), speculative-decoding acceptance, prefix-cache hit
/// rate, preemptions and counter resets, with the warnings they call for.
fn apply_counters(
    cell: &mut CellResult,
    engine: Engine,
    (a, b): (&TimedScrape, &TimedScrape),
    client: &ClientWindow,
) {
    let (client_tokens, window_s) = (client.tokens, client.seconds);
    let mut w = window_stats(&a.scrape, &b.scrape, engine);
    if engine == Engine::LlamaCpp {
        // llama-server adds to `tokens_predicted_total` only when a request leaves its slot,
        // so a window delta counts whole finished requests, not the tokens generated inside
        // the window: unusable for a window (null, not a wrong number).
        w.generation_tokens = None;
    }
    // Each scrape read the counters somewhere between its request and its answer: the
    // interval between the two readings is best estimated from the midpoints and lies
    // between `dt_min` and `dt_max` (arrival times alone overstate a slow first answer).
    let secs = |x: Instant, y: Instant| y.saturating_duration_since(x).as_secs_f64();
    let dt = (secs(a.sent, b.sent) + secs(a.at, b.at)) / 2.0;
    let dt_min = secs(a.at, b.sent);
    let dt_max = secs(a.sent, b.at);
    cell.server_window_seconds = (dt > 0.0).then_some(dt);
    if dt > 0.0 && (dt - window_s).abs() > (0.1 * window_s).max(0.5) {
        cell.warnings.push(format!(
            "the server's counters were read {dt:.2} s apart for a {window_s:.2} s window (edge scrapes sent or answered late: \
             client starved of CPU or a slow /metrics): server_output_tokens covers those {dt:.2} s"
        ));
    }
    // A counter that did not move while the client received more than 2·C tokens (issue
    // 17: a stuck `generation_tokens_total`) measures nothing: null, not "generated 0".
    let stuck = w.generation_tokens.is_some_and(|g| g <= 0.0)
        && !w.any_reset
        && client_tokens as f64 > 2.0 * client.concurrency as f64;
    if stuck {
        cell.warnings.push(format!(
            "the server's generated-token counter did not move during the window while the client counted {client_tokens} tokens: a stuck counter (or one that counts only finished requests); server_output_tokens is left empty"
        ));
    }
    if let Some(g) = w.generation_tokens.filter(|_| !stuck) {
        record_generated(cell, g, w.any_reset, (dt, dt_min, dt_max), client);
    }
    cell.server_spec_accept_rate = w.spec_accept_rate;
    cell.server_spec_accept_length = w.spec_accept_length;
    cell.server_prefix_cache_hit_rate = w.prefix_cache_hit_rate;
    cell.server_preemptions = w.preemptions.map(|p| p.round().max(0.0) as u64);
    cell.server_counter_reset = Some(w.any_reset);
    if w.any_reset {
        cell.warnings.push("a server counter went down during the window (server restart?): server-side deltas are partial".into());
    }
    if let Some(p) = w.preemptions.filter(|&p| p > 0.0) {
        cell.warnings.push(format!(
            "the server preempted {p:.0} requests during the window (KV cache full)"
        ));
    }
}

/// Records the server's generated tokens `g` over the scrapes `dt` s apart (reading instants
/// between `dt_min` and `dt_max`, s) and warns when the client's count of its window differs
/// by more than max(5 %, 2·C tokens) from every scaling those instants allow.
fn record_generated(
    cell: &mut CellResult,
    g: f64,
    any_reset: bool,
    (dt, dt_min, dt_max): (f64, f64, f64),
    client: &ClientWindow,
) {
    let ClientWindow {
        concurrency: c,
        tokens: client_tokens,
        seconds: window_s,
        ..
    } = *client;
    cell.server_output_tokens = Some(g.round().max(0.0) as u64);
    if dt > 0.0 {
        cell.server_gen_throughput = Some(g / dt);
    }
    if dt > 0.0 && g > 0.0 && !any_reset {
        let scaled = g * window_s / dt;
        // Only a difference that no reading time inside the scrapes explains.
        let lo = g * window_s / dt_max;
        let hi = if dt_min > 0.0 {
            g * window_s / dt_min
        } else {
            f64::INFINITY
        };
        let client = client_tokens as f64;
        let diff = (client - scaled).abs();
        let unexplained = (lo - client).max(client - hi).max(0.0);
        let tol = (0.05 * scaled).max(2.0 * c as f64);
        if unexplained > tol {
            cell.warnings.push(format!(
                "client counted {client_tokens} tokens in the window but the server generated {scaled:.0} \
                 (Prometheus, scaled to the window): {:.1}% apart",
                100.0 * diff / scaled
            ));
        }
    }
}

/// The scheduler gauges of the window's samples: running and waiting requests, KV-cache use
/// and (without draft counters) speculative acceptance from gauges.
fn apply_gauges(cell: &mut CellResult, samples: &[ServerSample]) {
    let running = gauge(
        samples,
        "running requests",
        |s| s.running,
        &mut cell.warnings,
    );
    let waiting = gauge(
        samples,
        "waiting requests",
        |s| s.waiting,
        &mut cell.warnings,
    );
    let kv = gauge(
        samples,
        "KV-cache usage",
        |s| s.kv_usage,
        &mut cell.warnings,
    );
    let mean = |v: &[f64]| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
    if cell.server_spec_accept_rate.is_none() && cell.server_spec_accept_length.is_none() {
        // No draft counters (SGLang exports acceptance only as gauges over its recent decode
        // batches): the mean of the window's samples. A length below 1 (SGLang reports 0 when
        // speculative decoding is off) means no speculative decoding.
        let spec: Vec<&ServerSample> = samples
            .iter()
            .filter(|s| s.spec_accept_length.is_some_and(|l| l >= 1.0))
            .collect();
        let len: Vec<f64> = spec.iter().filter_map(|s| s.spec_accept_length).collect();
        let rate: Vec<f64> = spec.iter().filter_map(|s| s.spec_accept_rate).collect();
        cell.server_spec_accept_length = mean(&len);
        cell.server_spec_accept_rate = mean(&rate);
    }
    let max = |v: &[f64]| {
        v.iter()
            .copied()
            .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))))
    };
    cell.server_samples = Some(samples.len() as u64);
    cell.avg_running_reqs = mean(&running);
    cell.max_running_reqs = max(&running);
    cell.effective_concurrency = cell.avg_running_reqs.map(|a| (a * 10.0).round() / 10.0);
    cell.avg_queue_reqs = mean(&waiting);
    cell.max_queue_reqs = max(&waiting);
    cell.queue_fraction = (!waiting.is_empty())
        .then(|| waiting.iter().filter(|&&q| q > 0.0).count() as f64 / waiting.len() as f64);
    cell.server_kv_usage_avg = mean(&kv);
    cell.server_kv_usage_max = max(&kv);
    cell.server_utilization = cell.server_kv_usage_avg;
}

/// `underfilled` and `capacity_limited` from the gauges [`apply_gauges`] recorded, for a window
/// that held `c` requests and is judged by `occupancy`.
fn judge_occupancy(cell: &mut CellResult, c: u64, occupancy: Occupancy) {
    let cf = c as f64;
    let has_sched = cell.max_running_reqs.is_some_and(|m| m > 0.0)
        || cell.max_queue_reqs.is_some_and(|m| m > 0.0);
    if occupancy == Occupancy::Drains {
        cell.underfilled = false;
        cell.capacity_limited =
            cell.avg_queue_reqs.unwrap_or(0.0) > 0.0 || cell.queue_fraction.unwrap_or(0.0) > 0.0;
    } else if has_sched {
        // Only what the server reported counts: a missing running gauge is no evidence of a
        // limit (issue 8).
        let avg = cell.avg_running_reqs;
        cell.underfilled = c > 1 && avg.is_some_and(|a| a < 0.98 * cf);
        cell.capacity_limited = cell.capacity_limited
            || (c > 1 && cell.max_running_reqs.is_some_and(|m| m < cf))
            || (c > 1 && avg.is_some_and(|a| a < 0.95 * cf))
            || cell.avg_queue_reqs.unwrap_or(0.0) > 0.0
            || cell.queue_fraction.unwrap_or(0.0) > 0.0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sustained-window form with every input spelled out.
    #[allow(clippy::too_many_arguments)]
    fn apply_sustained(
        cell: &mut CellResult,
        engine: Engine,
        start: Option<&TimedScrape>,
        end: Option<&TimedScrape>,
        samples: &[ServerSample],
        c: u64,
        tokens: u64,
        seconds: f64,
    ) {
        let evidence = WindowEvidence {
            engine,
            start,
            end,
            samples,
        };
        let client = ClientWindow {
            concurrency: c,
            tokens,
            seconds,
            occupancy: Occupancy::Sustained,
        };
        apply_window(cell, &evidence, client);
    }

    #[test]
    fn a_draining_batch_is_capacity_limited_only_by_a_queue() {
        let samples = [sample(2.0, 0.0), sample(1.0, 0.0)];
        let evidence = WindowEvidence {
            engine: Engine::Vllm,
            start: None,
            end: None,
            samples: &samples,
        };
        let client = |occupancy| ClientWindow {
            concurrency: 4,
            tokens: 100,
            seconds: 1.0,
            occupancy,
        };
        let mut sustained = CellResult::default();
        apply_window(&mut sustained, &evidence, client(Occupancy::Sustained));
        assert!(sustained.underfilled && sustained.capacity_limited);
        let mut burst = CellResult::default();
        apply_window(&mut burst, &evidence, client(Occupancy::Drains));
        assert!(!burst.underfilled && !burst.capacity_limited);
        let queued = [sample(4.0, 2.0), sample(4.0, 0.0)];
        let evidence = WindowEvidence {
            samples: &queued,
            ..evidence
        };
        let mut burst = CellResult::default();
        apply_window(&mut burst, &evidence, client(Occupancy::Drains));
        assert!(!burst.underfilled && burst.capacity_limited);
    }

    fn sample(r: f64, q: f64) -> ServerSample {
        ServerSample {
            at: Instant::now(),
            running: Some(r),
            waiting: Some(q),
            kv_usage: Some(0.5),
            generation_tokens: Some(1.0),
            spec_accept_rate: None,
            spec_accept_length: None,
        }
    }

    #[test]
    fn readiness_conditions() {
        let ok = server_readiness(&sample(4.0, 0.0), 4, true, 2048, 0);
        assert!(ok.ready);
        assert_eq!(ok.reason, "running_reqs=4/4, queue_reqs=0");
        let q = server_readiness(&sample(4.0, 2.0), 4, true, 2048, 0);
        assert_eq!(q.failing, "queue_reqs=2");
        let r = server_readiness(&sample(3.0, 0.0), 4, true, 2048, 0);
        assert_eq!(r.failing, "running_reqs=3/4");
        // short requests: C completed and an empty queue are enough
        assert!(server_readiness(&sample(3.0, 0.0), 4, true, 256, 4).ready);
        // negative gauges are no evidence (a queue of -5 is no empty queue) and never printed
        for (run, wait) in [(-5.0, 0.0), (4.0, -5.0), (f64::NAN, 0.0)] {
            let r = server_readiness(&sample(run, wait), 4, true, 256, 4);
            assert!(!r.evidence && !r.ready && r.permits(), "{run} {wait}");
            assert_eq!(r.reason, "metrics_unavailable");
            assert!(r.missing.contains("no count"), "{}", r.missing);
        }
        assert_eq!(
            server_readiness(&sample(4.0, 0.0), 4, false, 2048, 0).failing,
            "no_generation"
        );
    }

    fn timed(sent: Instant, latency_ms: u64, generated: f64) -> TimedScrape {
        let text = format!(
            "# TYPE vllm:generation_tokens_total counter\n\
             vllm:generation_tokens_total{{engine=\"0\",model_name=\"m\"}} {generated}\n"
        );
        TimedScrape {
            sent,
            at: sent + Duration::from_millis(latency_ms),
            scrape: Scrape::parse(&text).unwrap(),
        }
    }

    #[test]
    fn slow_scrape_answer_is_not_a_token_mismatch() {
        // A 5 s window; the first scrape's answer took 650 ms (client starved of CPU): the
        // server's 1,132 tokens match the client's 1,136, whatever instant inside the scrapes
        // the counters were read at.
        let t0 = Instant::now();
        let (a, b) = (
            timed(t0, 650, 0.0),
            timed(t0 + Duration::from_secs(5), 10, 1132.0),
        );
        let mut cell = CellResult::default();
        apply_sustained(
            &mut cell,
            Engine::Vllm,
            Some(&a),
            Some(&b),
            &[],
            4,
            1136,
            5.0,
        );
        assert_eq!(cell.server_output_tokens, Some(1132));
        assert!(cell.warnings.is_empty(), "{:?}", cell.warnings);
        // Midpoint interval: (5.0 + 4.36) / 2 = 4.68 s.
        let tps = cell.server_gen_throughput.unwrap();
        assert!((tps - 1132.0 / 4.68).abs() < 0.5, "{tps}");
        // A real disagreement still warns.
        let mut cell = CellResult::default();
        apply_sustained(
            &mut cell,
            Engine::Vllm,
            Some(&a),
            Some(&b),
            &[],
            4,
            700,
            5.0,
        );
        assert!(
            cell.warnings
                .iter()
                .any(|w| w.contains("client counted 700")),
            "{:?}",
            cell.warnings
        );
    }

    /// Issue 17 break-it round 4: a `generation_tokens_total` that never moved gave "server 0"
    /// beside the client's 192 tokens with no warning, and a running gauge of -5 was recorded.
    #[test]
    fn a_stuck_counter_and_negative_gauges_are_no_evidence() {
        let t0 = Instant::now();
        let (a, b) = (
            timed(t0, 5, 500.0),
            timed(t0 + Duration::from_secs(5), 5, 500.0),
        );
        let mut cell = CellResult::default();
        let neg = [sample(-5.0, 0.0), sample(4.0, -1.0), sample(4.0, 0.0)];
        apply_sustained(
            &mut cell,
            Engine::Vllm,
            Some(&a),
            Some(&b),
            &neg,
            4,
            192,
            5.0,
        );
        assert_eq!(cell.server_output_tokens, None);
        assert_eq!(cell.server_gen_throughput, None);
        assert!(
            cell.warnings
                .iter()
                .any(|w| w.contains("did not move") && w.contains("192 tokens")),
            "{:?}",
            cell.warnings
        );
        assert_eq!(cell.avg_running_reqs, Some(4.0));
        assert_eq!(cell.avg_queue_reqs, Some(0.0));
        assert!(
            cell.warnings
                .iter()
                .any(|w| w.contains("running requests gauge read -5")),
            "{:?}",
            cell.warnings
        );
        assert!(cell
            .warnings
            .iter()
            .any(|w| w.contains("waiting requests gauge read -1")));
        // an idle window (no client tokens beyond 2·C) reads a still counter as 0, no warning
        let mut idle = CellResult::default();
        apply_sustained(&mut idle, Engine::Vllm, Some(&a), Some(&b), &[], 4, 8, 5.0);
        assert_eq!(idle.server_output_tokens, Some(0));
        assert!(idle.warnings.is_empty(), "{:?}", idle.warnings);
    }

    #[test]
    fn late_end_scrape_is_timed_and_flagged() {
        // A 5 s window whose end scrape was sent 2 s late (the client was not scheduled): the
        // delta covers ~7 s, which the cell says instead of passing it off as the window's.
        let t0 = Instant::now();
        let (a, b) = (
            timed(t0, 20, 0.0),
            timed(t0 + Duration::from_secs(7), 40, 1400.0),
        );
        let mut cell = CellResult::default();
        apply_sustained(
            &mut cell,
            Engine::Vllm,
            Some(&a),
            Some(&b),
            &[],
            2,
            1000,
            5.0,
        );
        assert_eq!(cell.server_output_tokens, Some(1400));
        let between = cell.server_window_seconds.unwrap();
        assert!((between - 7.01).abs() < 1e-9, "{between}");
        assert!((cell.server_gen_throughput.unwrap() - 1400.0 / 7.01).abs() < 1e-9);
        assert!(
            cell.warnings
                .iter()
                .any(|w| w.contains("read 7.01 s apart for a 5.00 s window")),
            "{:?}",
            cell.warnings
        );
        // 200 tok/s over 7 s is the client's rate: no token mismatch is claimed.
        assert!(!cell.warnings.iter().any(|w| w.contains("client counted")));
        let times = scrape_times(t0, &a, &b);
        assert_eq!(times.start_sent_s, 0.0);
        assert!((times.start_answered_s - 0.02).abs() < 1e-9);
        assert!((times.end_sent_s - 7.0).abs() < 1e-9);
        assert!((times.end_answered_s - 7.04).abs() < 1e-9);
        // A scrape sent before the window opened has a negative offset.
        let early = scrape_times(t0 + Duration::from_millis(100), &a, &b);
        assert!((early.start_sent_s + 0.1).abs() < 1e-9);
    }

    #[test]
    fn spec_gauges_when_there_are_no_draft_counters() {
        let mut cell = CellResult::default();
        let g = |len: f64, rate: f64| ServerSample {
            spec_accept_length: Some(len),
            spec_accept_rate: Some(rate),
            ..sample(4.0, 0.0)
        };
        let s = vec![g(2.4, 0.46), g(2.6, 0.54)];
        apply_sustained(&mut cell, Engine::Sglang, None, None, &s, 4, 100, 1.0);
        assert!((cell.server_spec_accept_length.unwrap() - 2.5).abs() < 1e-12);
        assert!((cell.server_spec_accept_rate.unwrap() - 0.5).abs() < 1e-12);
        // SGLang reports length 0 with speculative decoding off: nothing to report.
        let mut off = CellResult::default();
        apply_sustained(
            &mut off,
            Engine::Sglang,
            None,
            None,
            &[g(0.0, 0.0)],
            4,
            100,
            1.0,
        );
        assert_eq!(off.server_spec_accept_length, None);
        assert_eq!(off.server_spec_accept_rate, None);
    }

    #[test]
    fn missing_evidence_is_not_a_limit() {
        let now = Instant::now();
        let stale = Duration::from_secs(5);
        let fresh = sample(4.0, 0.0);
        assert_eq!(missing_evidence(Some(&fresh), now, stale, stale), None);
        // the running gauge is missing (renamed, or an empty page)
        let blind = ServerSample {
            running: None,
            waiting: None,
            ..sample(0.0, 0.0)
        };
        let why = missing_evidence(Some(&blind), now, stale, stale).unwrap();
        assert!(why.contains("no running-requests gauge"), "{why}");
        let r = server_readiness(&blind, 4, true, 2048, 0);
        assert!(!r.evidence && !r.ready && r.permits());
        // first scrape pending: wait; no answer for 5 s: fall back
        assert_eq!(
            missing_evidence(None, now, Duration::from_secs(1), stale).as_deref(),
            Some("")
        );
        assert!(missing_evidence(None, now, stale, stale)
            .unwrap()
            .contains("no /metrics scrape succeeded"));
        // a good sample gone stale: scrapes are failing
        let old = ServerSample {
            at: now - Duration::from_secs(6),
            ..sample(4.0, 0.0)
        };
        assert!(missing_evidence(Some(&old), now, stale, stale)
            .unwrap()
            .contains("scrapes failed"));
        // server evidence of a limit, or not
        assert!(timeout_is_capacity_evidence("queue_reqs=2"));
        assert!(timeout_is_capacity_evidence("running_reqs=3/4"));
        assert!(timeout_is_capacity_evidence("active_streams=3/4"));
        for r in ["metrics_unavailable", "not_stable", "no_generation"] {
            assert!(!timeout_is_capacity_evidence(r), "{r}");
        }
        // a waiting gauge without a running gauge: no running-based limit is inferred
        let mut cell = CellResult::default();
        let waiting_only = ServerSample {
            running: None,
            waiting: Some(0.0),
            ..sample(0.0, 0.0)
        };
        apply_sustained(
            &mut cell,
            Engine::Vllm,
            None,
            None,
            &[waiting_only.clone(), waiting_only],
            4,
            100,
            1.0,
        );
        assert!(!cell.capacity_limited && !cell.underfilled);
        assert_eq!(cell.avg_running_reqs, None);
    }

    #[test]
    fn window_fields_from_samples() {
        let mut cell = CellResult::default();
        let s = vec![
            sample(4.0, 0.0),
            sample(3.0, 1.0),
            sample(4.0, 0.0),
            sample(4.0, 0.0),
        ];
        apply_sustained(&mut cell, Engine::Vllm, None, None, &s, 4, 100, 1.0);
        assert_eq!(cell.avg_running_reqs, Some(3.75));
        assert_eq!(cell.max_running_reqs, Some(4.0));
        assert_eq!(cell.effective_concurrency, Some(3.8));
        assert_eq!(cell.queue_fraction, Some(0.25));
        assert!(cell.underfilled);
        assert!(cell.capacity_limited);
    }

    /// A local server whose `/metrics` answers are `pages` in order (the last one repeated);
    /// `"ENDLESS"` is a never-ending page. Counts the scrapes it got.
    fn metrics_server(
        pages: Vec<&'static str>,
    ) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        use std::io::{Read, Write};
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let h = hits.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let k = h.fetch_add(1, Ordering::SeqCst);
                let page = pages[k.min(pages.len() - 1)];
                std::thread::spawn(move || {
                    let mut s = conn;
                    let mut req = Vec::new();
                    let mut b = [0u8; 4096];
                    while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                        match s.read(&mut b) {
                            Ok(n) if n > 0 => req.extend_from_slice(&b[..n]),
                            _ => return,
                        }
                    }
                    if page == "ENDLESS" {
                        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n");
                        let data = "# HELP x y\n".repeat(5000);
                        let c = format!("{:x}\r\n{data}\r\n", data.len());
                        while s.write_all(c.as_bytes()).is_ok() {}
                    } else {
                        let _ = write!(
                            s,
                            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{page}",
                            page.len()
                        );
                    }
                });
            }
        });
        (url, hits)
    }

    /// An empty page is not a sample; a page that overruns its cap disables the source with a
    /// warning naming it, once, and later scrapes send nothing (issue 17).
    #[test]
    fn empty_pages_are_not_samples_and_an_overrun_disables_the_source() {
        use std::sync::atomic::Ordering;
        let (url, hits) = metrics_server(vec![
            "vllm:num_requests_running 2\n",
            "",
            "ENDLESS",
            "vllm:num_requests_running 2\n",
        ]);
        let client = HttpClient::new(
            servebench_client::Target::from_url(&url, None, servebench_client::Endpoint::Chat)
                .unwrap(),
        )
        .unwrap();
        let t = Telemetry::new(client, Engine::Vllm);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            assert_eq!(t.failing_for(Instant::now()), None, "nothing tried yet");
            let first = t.scrape().await.expect("a sample");
            assert_eq!(t.sample_of(&first).running, Some(2.0));
            assert_eq!(
                t.failing_for(Instant::now()),
                None,
                "the last scrape succeeded"
            );
            assert!(t.scrape().await.is_none(), "an empty page is no sample");
            let failing = t
                .failing_for(Instant::now())
                .expect("failing since the empty page");
            assert!(failing < Duration::from_secs(5), "{failing:?}");
            assert!(t.disabled().is_none(), "an empty page does not disable");
            assert!(t.scrape().await.is_none(), "the endless page overran");
            let w = t.take_disabled().expect("disabled");
            assert!(
                w.contains(&format!("{url}/metrics")) && w.contains("16 MiB"),
                "{w}"
            );
            assert!(t.take_disabled().is_none(), "the warning comes once");
            assert!(t.scrape().await.is_none(), "disabled: no more scrapes");
        });
        assert_eq!(hits.load(Ordering::SeqCst), 3, "nothing sent once disabled");
    }
}
