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

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use servebench_results::{CellResult, CellStatus};
use servebench_sse::RequestRecord;
use tokio_util::sync::CancellationToken;

use crate::aggregate::fill_request_stats;
use crate::events::{CellProgress, EventSink, LiveFeed, Phase, RunEvent};
use crate::plan::CellSpec;
use crate::plausibility::{
    analyze_stalls, apply_findings, check_requests, stall_findings, RequestFacts, StallInput,
};
use crate::procstat::process_cpu_seconds;
use crate::stream::{run_single, run_stream, StreamHooks, StreamOutcome, WindowClock};
use crate::target::HttpClient;
use crate::telemetry::{
    apply_window, missing_evidence, scrape_times, server_readiness, timeout_is_capacity_evidence,
    Sampler, ServerReadiness, ServerSample, Telemetry, TimedScrape,
};

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

struct Shared {
    window: WindowClock,
    active: AtomicU64,
    completed: AtomicU64,
    live_tokens: AtomicU64,
    first_error: Mutex<crate::failure::FirstFailure>,
    outcomes: Mutex<Vec<StreamOutcome>>,
}

impl Shared {
    fn failed(&self) -> bool {
        self.first_error
            .lock()
            .map(|e| e.is_some())
            .unwrap_or(false)
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
    let ctx = job.spec.context;
    let label = format!("C={} ctx={}", c, servebench_results::format_context(ctx));
    let t_cell = Instant::now();
    let mut result = CellResult {
        concurrency: c,
        context_tokens: ctx,
        benchmark_mode: "duration".into(),
        ..Default::default()
    };
    let progress =
        |phase: Phase, active: u64, live_tps: Option<f64>, window_elapsed: Option<f64>| {
            events.emit(RunEvent::Progress(CellProgress {
                concurrency: c,
                context: ctx,
                phase,
                active_streams: active,
                elapsed_s: t_cell.elapsed().as_secs_f64(),
                live_tps,
                window_elapsed_s: window_elapsed,
                window_s: settings.duration.as_secs_f64(),
                warmup: job.warmup,
            }))
        };
    events.emit(RunEvent::CellStarted {
        index: job.index,
        total: job.total,
        concurrency: c,
        context: ctx,
        warmup: job.warmup,
    });
    events.log(format!("cell start {label}"));
    let mut feed = LiveFeed::new(job.index, job.warmup, t_cell);

    // 1. Scout.
    let mut scout_record = None;
    if let Some(body) = job.scout_body.clone() {
        feed.phase(events, Phase::Scout, None);
        progress(Phase::Scout, 0, None, None);
        let out = run_single(client, settings.path, body, run_cancel).await;
        if run_cancel.is_cancelled() {
            return interrupted(result, t_cell, None);
        }
        if let Some(err) = &out.record.error {
            result.status = CellStatus::Error;
            result.status_reason = format!(
                "the cell's first request (sent alone before the C streams, to fill the prefix cache) failed: {err}"
            );
            result.error_kind = out.facts.kind.map(|k| k.as_str().into());
            result.rejected_requests = Some(u64::from(out.facts.rejected));
            result.retried_requests = Some(u64::from(out.facts.retries));
            result.num_errors = 1;
            result.wall_time = Some(t_cell.elapsed().as_secs_f64());
            events.log(format!("cell error {label}: {}", result.status_reason));
            return CellOutcome {
                result,
                scout: Some(out.record),
                interrupted: false,
                window: None,
                records: Vec::new(),
            };
        }
        result.prompt_tokens = out.record.prompt_tokens;
        scout_record = Some(out.record);
    }
    let t_after_scout = Instant::now();
    feed.phase(events, Phase::RampUp, Some(job.ready_timeout.as_secs_f64()));

    // 2. Streams.
    let cell_cancel = run_cancel.child_token();
    let shared = Arc::new(Shared {
        window: WindowClock::new(t_cell),
        active: AtomicU64::new(0),
        completed: AtomicU64::new(0),
        live_tokens: AtomicU64::new(0),
        first_error: Mutex::new(None),
        outcomes: Mutex::new(Vec::new()),
    });
    let mut workers = Vec::with_capacity(c as usize);
    let request_no = Arc::new(AtomicU64::new(0));
    for _ in 0..c {
        let (request_no, cold) = (request_no.clone(), job.cold_run_id.clone());
        let shared = shared.clone();
        let cancel = cell_cancel.clone();
        let client = client.clone();
        let body = job.decode_body.clone();
        let path = settings.path;
        workers.push(tokio::spawn(async move {
            let produced = AtomicBool::new(false);
            let mut conn = None;
            loop {
                if cancel.is_cancelled() {
                    break;
                }
                let body = match &cold {
                    Some(id) => crate::cache::cold_body(
                        &body,
                        id,
                        request_no.fetch_add(1, Ordering::Relaxed),
                    ),
                    None => body.clone(),
                };
                let out = run_stream(
                    &client,
                    &mut conn,
                    path,
                    body,
                    StreamHooks {
                        window: Some(&shared.window),
                        cancel: Some(&cancel),
                        live_tokens: Some(&shared.live_tokens),
                        first_token: Some((&produced, &shared.active)),
                        capture_text: false,
                        in_flight: c,
                        ..Default::default()
                    },
                )
                .await;
                if out.record.completed {
                    shared.completed.fetch_add(1, Ordering::Relaxed);
                }
                let failed = out.record.error.clone().filter(|_| !out.record.cancelled);
                let kind = out.facts.kind;
                let cut = out.record.cancelled;
                if let Ok(mut o) = shared.outcomes.lock() {
                    o.push(out);
                }
                if let Some(err) = failed {
                    if let Ok(mut fe) = shared.first_error.lock() {
                        fe.get_or_insert((err, kind));
                    }
                    cancel.cancel();
                    break;
                }
                if cut {
                    break;
                }
            }
        }));
    }

    // 3. Readiness (client streams, plus the server's scheduler when metrics exist).
    let sampler_stop = cell_cancel.child_token();
    let sampler = telemetry.map(|t| Sampler::spawn(t.clone(), SAMPLE_EVERY, sampler_stop.clone()));
    let mut ticker = tokio::time::interval(TICK);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut stable_since: Option<Instant> = None;
    let mut last_progress = Instant::now();
    let mut last_live = (Instant::now(), 0u64);
    let mut live_tps: Option<f64> = None;
    let mut update_live = |now: Instant, shared: &Shared| {
        let tokens = shared.live_tokens.load(Ordering::Relaxed);
        let dt = now.duration_since(last_live.0).as_secs_f64();
        if dt > 0.0 {
            live_tps = Some((tokens - last_live.1) as f64 / dt);
        }
        last_live = (now, tokens);
        live_tps
    };
    let mut last_sample_at: Option<Instant> = None;
    let mut server_state: Option<ServerReadiness> = None;
    let stable_s = settings.stable_window.as_secs_f64();
    let open = loop {
        let scheduled = ticker.tick().await;
        let now = Instant::now();
        feed.lag(
            now.saturating_duration_since(scheduled.into_std())
                .as_secs_f64()
                * 1e3,
        );
        if run_cancel.is_cancelled() || shared.failed() {
            break false;
        }
        let active = shared.active.load(Ordering::Relaxed);
        let client_ok = active >= c;
        if let Some(sm) = &sampler {
            let latest = sm.latest();
            let since = now.saturating_duration_since(t_after_scout);
            match missing_evidence(latest.as_ref(), now, since, STALE_SAMPLE) {
                None => {
                    let smp = latest.expect("judged sample");
                    if last_sample_at != Some(smp.at) {
                        last_sample_at = Some(smp.at);
                        let generating = shared.live_tokens.load(Ordering::Relaxed) > 0;
                        let completed = shared.completed.load(Ordering::Relaxed);
                        server_state = Some(server_readiness(
                            &smp,
                            c,
                            generating,
                            settings.max_tokens,
                            completed,
                        ));
                    }
                }
                // first scrape still on its way
                Some(why) if why.is_empty() => server_state = None,
                Some(why) => server_state = Some(ServerReadiness::missing(why)),
            }
        }
        // Without server evidence (gauges missing, scrapes failing or empty) readiness falls
        // back to the client's streams; it never waits out its timeout for lack of data.
        let server_ok = match &server_state {
            None => sampler.is_none(),
            Some(s) => s.permits(),
        };
        if client_ok && server_ok {
            let since = *stable_since.get_or_insert(now);
            feed.phase(events, Phase::Readiness, Some(stable_s));
            if now.duration_since(since) >= settings.stable_window {
                if let Some(s) = server_state.as_ref().filter(|s| !s.evidence) {
                    result.warnings.push(format!(
                        "server readiness unavailable ({}): readiness from the client's streams only",
                        s.missing
                    ));
                }
                result.ready_reason = match &server_state {
                    Some(s) => format!(
                        "{}, active_streams={active}/{c}, stable={stable_s:.1}s",
                        s.reason
                    ),
                    None => format!(
                        "metrics_unavailable, active_streams={active}/{c}, stable={stable_s:.1}s"
                    ),
                };
                break true;
            }
        } else {
            stable_since = None;
            feed.phase(events, Phase::RampUp, Some(job.ready_timeout.as_secs_f64()));
        }
        if now.duration_since(t_after_scout) >= job.ready_timeout {
            result.warmup_timed_out = true;
            result.ready_reason = "warmup_timeout".into();
            result.timeout_reason = match &server_state {
                _ if sampler.is_none() && active == 0 => "no_generation".into(),
                None if sampler.is_some() => "metrics_unavailable".into(),
                Some(s) if s.evidence && !s.ready => s.failing.clone(),
                _ if !client_ok => format!("active_streams={active}/{c}"),
                _ if active == 0 => "no_generation".into(),
                _ => "not_stable".into(),
            };
            events.warn(format!("warmup timeout {label} {}", result.timeout_reason));
            break true;
        }
        if now.duration_since(last_progress) >= PROGRESS_EVERY {
            last_progress = now;
            let tps = update_live(now, &shared);
            let phase = if stable_since.is_some() {
                Phase::Readiness
            } else {
                Phase::RampUp
            };
            progress(phase, active, tps, None);
            feed.tick(
                events,
                &shared.outcomes,
                sampler.as_ref().and_then(|s| s.latest()).as_ref(),
            );
        }
    };
    let ready_at = Instant::now();
    let (window_start, window_end) = if open {
        let (s, e) = shared.window.open_after(WINDOW_MARGIN, settings.duration);
        (Some(s), Some(e))
    } else {
        (None, None)
    };

    // 4. Window.
    let mut max_lag_ms: f64 = 0.0;
    let mut cpu_used: Option<f64> = None;
    let mut edge_start: Option<TimedScrape> = None;
    let mut edge_end: Option<TimedScrape> = None;
    if let (Some(start), Some(end)) = (window_start, window_end) {
        result.warmup_duration = Some(ready_at.duration_since(t_cell).as_secs_f64());
        if !job.warmup || !result.ready_reason.is_empty() {
            events.log(format!("ready {label} {}", result.ready_reason));
        }
        tokio::time::sleep_until(start.into()).await;
        feed.phase(
            events,
            Phase::Measuring,
            Some(settings.duration.as_secs_f64()),
        );
        let cpu0 = process_cpu_seconds();
        if let Some(t) = telemetry {
            edge_start = t.edge_scrape().await;
        }
        let mut ticker = tokio::time::interval(TICK);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let scheduled = ticker.tick().await;
            let now = Instant::now();
            let lag_ms = now
                .saturating_duration_since(scheduled.into_std())
                .as_secs_f64()
                * 1e3;
            max_lag_ms = max_lag_ms.max(lag_ms);
            feed.lag(lag_ms);
            if now >= end || run_cancel.is_cancelled() || shared.failed() {
                break;
            }
            if now.duration_since(last_progress) >= PROGRESS_EVERY {
                last_progress = now;
                let tps = update_live(now, &shared);
                progress(
                    Phase::Measuring,
                    shared.active.load(Ordering::Relaxed),
                    tps,
                    Some(now.duration_since(start).as_secs_f64()),
                );
                feed.tick(
                    events,
                    &shared.outcomes,
                    sampler.as_ref().and_then(|s| s.latest()).as_ref(),
                );
            }
        }
        if let Some(t) = telemetry {
            edge_end = t.edge_scrape().await;
        }
        cpu_used = match (cpu0, process_cpu_seconds()) {
            (Some(a), Some(b)) => Some(b - a),
            _ => None,
        };
    }

    // 5. Close.
    sampler_stop.cancel();
    let window_samples = match sampler {
        Some(sm) => sm.finish().await,
        None => Vec::new(),
    };
    cell_cancel.cancel();
    for w in workers {
        let _ = w.await;
    }
    let t_done = Instant::now();
    result.wall_time = Some(t_done.duration_since(t_cell).as_secs_f64());
    if run_cancel.is_cancelled() {
        return interrupted(result, t_cell, scout_record);
    }
    let outcomes = std::mem::take(&mut *shared.outcomes.lock().unwrap_or_else(|e| e.into_inner()));
    let first_error = shared.first_error.lock().ok().and_then(|e| e.clone());

    result.num_completed = outcomes.iter().filter(|o| o.record.completed).count() as u64;
    result.num_errors = outcomes
        .iter()
        .filter(|o| o.record.error.is_some() && !o.record.cancelled)
        .count() as u64;
    result.rejected_requests = Some(outcomes.iter().map(|o| u64::from(o.facts.rejected)).sum());
    result.retried_requests = Some(outcomes.iter().map(|o| u64::from(o.facts.retries)).sum());

    if let Some((err, kind)) = first_error {
        result.status = CellStatus::Invalid;
        result.status_reason = format!("a stream failed: {err}");
        result.error_kind = kind.map(|k| k.as_str().into());
        events.log(format!("cell invalid {label}: {}", result.status_reason));
        let recs: Vec<&RequestRecord> = outcomes.iter().map(|o| &o.record).collect();
        fill_request_stats(&mut result, &recs, window_start);
        return CellOutcome {
            result,
            scout: scout_record,
            interrupted: false,
            window: window_start.zip(window_end),
            records: outcomes.into_iter().map(|o| o.record).collect(),
        };
    }
    let (Some(start), Some(end)) = (window_start, window_end) else {
        result.status = CellStatus::Error;
        result.status_reason = "the measured window never opened".into();
        return CellOutcome {
            result,
            scout: scout_record,
            interrupted: false,
            window: None,
            records: outcomes.into_iter().map(|o| o.record).collect(),
        };
    };

    let window_s = end.duration_since(start).as_secs_f64();
    let tokens: u64 = outcomes.iter().map(|o| o.window_tokens).sum();
    let events_in_window: u64 = outcomes.iter().map(|o| o.window_token_events).sum();
    let in_window: Vec<&RequestRecord> = outcomes
        .iter()
        .map(|o| &o.record)
        .filter(|r| r.sent_at <= end && r.end_at >= start)
        .collect();
    let multi_event: Vec<&&RequestRecord> =
        in_window.iter().filter(|r| r.token_events >= 2).collect();
    let continuous = multi_event.iter().filter(|r| r.continuous_usage).count();
    let all_continuous = !multi_event.is_empty() && continuous == multi_event.len();

    result.measurement_seconds = Some(window_s);
    result.measurement_wall_seconds = Some(window_s);
    result.client_output_tokens = Some(tokens);
    result.client_token_events = Some(events_in_window);
    result.continuous_usage_requests = Some(continuous as u64);
    result.total_tokens = Some(tokens);
    result.aggregate_source = if tokens == 0 {
        "none"
    } else if all_continuous {
        "openai_continuous_usage"
    } else {
        "openai_stream_chunks_fallback"
    }
    .into();
    fill_request_stats(&mut result, &in_window, Some(start));
    if result.prompt_tokens.is_none() {
        result.prompt_tokens = in_window.iter().find_map(|r| r.prompt_tokens);
    }
    if let Some(cpu) = cpu_used {
        result.client_cpu_util = Some(cpu / window_s);
    }
    result.client_max_tick_lag_ms = Some(max_lag_ms);
    let mut delay = crate::h1::ReadDelay::default();
    for o in outcomes
        .iter()
        .filter(|o| o.record.sent_at <= end && o.record.end_at >= start)
    {
        delay.merge(&o.read_delay);
    }
    if delay.reads > 0 {
        result.client_read_delay_avg_ms = Some(delay.total_s / delay.reads as f64 * 1e3);
        result.client_read_delay_max_ms = Some(delay.max_s * 1e3);
    }
    if let Some(t) = telemetry {
        let mut samples: Vec<ServerSample> = Vec::with_capacity(window_samples.len() + 2);
        samples.extend(edge_start.as_ref().map(|e| t.sample_of(e)));
        samples.extend(
            window_samples
                .into_iter()
                .filter(|x| x.at >= start && x.at <= end),
        );
        samples.extend(edge_end.as_ref().map(|e| t.sample_of(e)));
        apply_window(
            &mut result,
            t.engine(),
            edge_start.as_ref(),
            edge_end.as_ref(),
            &samples,
            c,
            tokens,
            window_s,
        );
        if let (Some(a), Some(b)) = (&edge_start, &edge_end) {
            result.server_scrapes = Some(scrape_times(start, a, b));
        }
    }

    // Warnings.
    if tokens > 0 && !all_continuous {
        result.warnings.push(format!(
            "usage was not streamed on every chunk ({continuous} of {} requests): window tokens were counted one per SSE event, \
             corrected by usage only when it arrived; multi-token chunks (speculative decoding) are undercounted",
            multi_event.len()
        ));
    }
    if in_window.iter().any(|r| r.nonmonotonic_usage) {
        result.warnings.push(
            "the server's usage.completion_tokens went down within a stream (not cumulative)"
                .into(),
        );
    }
    if in_window.iter().any(|r| r.usage_below_count) {
        result
            .warnings
            .push("final usage reported fewer tokens than token events were seen".into());
    }
    if settings.ignore_eos && settings.max_tokens > 0 {
        let done: Vec<&&RequestRecord> = in_window.iter().filter(|r| r.completed).collect();
        let short = done
            .iter()
            .filter(|r| r.output_tokens < settings.max_tokens)
            .count();
        if short > 0 {
            result.warnings.push(format!(
                "{short} of {} completed requests stopped before max_tokens {} although ignore_eos was sent",
                done.len(),
                settings.max_tokens
            ));
        }
    }
    if max_lag_ms > TICK_LAG_WARN_MS {
        result
            .warnings
            .push(tick_lag_warning(max_lag_ms, delay.reads > 0));
    }

    // Plausibility (every request of the cell) and stalls (requests of the window).
    let facts: Vec<RequestFacts> = outcomes
        .iter()
        .map(|o| RequestFacts {
            output_tokens: o.record.output_tokens,
            usage_jump: o.facts.usage_jump,
        })
        .collect();
    let mut findings = check_requests(&facts, settings.max_tokens);
    let stall_inputs: Vec<StallInput<'_>> = outcomes
        .iter()
        .filter(|o| o.record.sent_at <= end && o.record.end_at >= start)
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
    let stalls = analyze_stalls(
        &stall_inputs,
        (start, end),
        result.chunk_inter_token_latency_p50,
    );
    findings.extend(stall_findings(&mut result, &stalls));

    if tokens == 0 {
        result.status = CellStatus::Invalid;
        result.status_reason = "no output tokens arrived inside the measured window".into();
        result.error_kind = Some("no_output".into());
    } else {
        let tps = tokens as f64 / window_s;
        result.aggregate_tps = Some(tps);
        result.per_request_avg_tps = Some(tps / c as f64);
        if result.warmup_timed_out && timeout_is_capacity_evidence(&result.timeout_reason) {
            result.capacity_limited = true;
        }
    }
    apply_findings(&mut result, findings);
    match (result.status, result.aggregate_tps) {
        (CellStatus::Ok, Some(tps)) => events.log(format!("cell done {label} {tps:.1} tok/s")),
        _ => events.log(format!("cell invalid {label}: {}", result.status_reason)),
    }
    CellOutcome {
        result,
        scout: scout_record,
        interrupted: false,
        window: Some((start, end)),
        records: outcomes.into_iter().map(|o| o.record).collect(),
    }
}

fn interrupted(
    mut result: CellResult,
    t_cell: Instant,
    scout: Option<RequestRecord>,
) -> CellOutcome {
    result.status = CellStatus::SkippedUser;
    result.status_reason =
        "interrupted by the user (Ctrl-C, SIGTERM or SIGHUP) while the cell was running".into();
    result.wall_time = Some(t_cell.elapsed().as_secs_f64());
    result.request_samples.clear();
    CellOutcome {
        result,
        scout,
        interrupted: true,
        window: None,
        records: Vec::new(),
    }
}
