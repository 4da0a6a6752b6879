//! One Burst / E2E cell: a finite batch of N requests at concurrency C (seed spec §3.10).
//!
//! This is what a client sees when it throws N requests at the server — admission, scheduling,
//! prefill and completion included — and the number AIPerf reports. It is a different question
//! from sustained decode and is reported in its own table.
//!
//! * Payload: final usage only (`stream_options.include_usage`, no continuous usage), as AIPerf.
//! * Warmup: W discarded requests, started by min(C, W) workers.
//! * Measurement: min(C, N) workers claim request slots until N have been started; every request
//!   runs to its end. `aggregate_tps = Σ completion_tokens of completed requests / wall time`
//!   (from the measurement start to the end of the last request).
//! * A failed request makes the cell `invalid` (the failure is kept as the reason).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use servebench_results::{CellResult, CellStatus};
use servebench_sse::RequestRecord;
use tokio_util::sync::CancellationToken;

use crate::aggregate::fill_request_stats;
use crate::events::{CellProgress, EventSink, Phase, RunEvent};
use crate::failure::FirstFailure;
use crate::plan::CellSpec;
use crate::plausibility::{apply_findings, check_requests, RequestFacts};
use crate::stream::{run_single, run_stream, StreamFacts, StreamHooks};
use crate::target::HttpClient;
use crate::telemetry::{apply_window, scrape_times, Sampler, ServerSample, Telemetry};

/// Scrape period while a burst runs.
const SAMPLE_EVERY: Duration = Duration::from_millis(500);

/// One burst cell to run.
pub struct BurstJob {
    /// Coordinates.
    pub spec: CellSpec,
    /// Request body (final usage only).
    pub body: Bytes,
    /// Scout body (context > 0).
    pub scout_body: Option<Bytes>,
    /// Measured requests N.
    pub request_count: u64,
    /// Discarded warmup requests W.
    pub warmup_count: u64,
    /// `request-count` (primary layer) or `burst-e2e` (after the sustained matrix).
    pub mode: &'static str,
    /// Cold prompts (`--prompt-cache cold`): the run id whose nonce each request replaces with
    /// its own ([`crate::cache::cold_body`]); `None` = every request sends `body` (shared).
    pub cold_run_id: Option<String>,
    /// Position in the plan, from 1.
    pub index: usize,
    /// Cells in the plan.
    pub total: usize,
}

/// Result of a burst cell and its scout.
pub struct BurstOutcome {
    /// The exported result.
    pub result: CellResult,
    /// The scout request.
    pub scout: Option<RequestRecord>,
    /// Ctrl-C arrived.
    pub interrupted: bool,
    /// Measured requests.
    pub records: Vec<RequestRecord>,
}

/// Runs `count` requests with at most `workers` in flight; stops early on the first failure or
/// on `cancel`. Returns the records in completion order.
#[allow(clippy::too_many_arguments)]
async fn run_batch(
    client: &HttpClient,
    path: &'static str,
    body: &Bytes,
    cold: Option<(&str, u64)>,
    count: u64,
    workers: u64,
    cancel: &CancellationToken,
    live_tokens: Arc<AtomicU64>,
) -> Batch {
    let next = Arc::new(AtomicU64::new(0));
    let records: Arc<Mutex<Vec<(RequestRecord, StreamFacts)>>> =
        Arc::new(Mutex::new(Vec::with_capacity(count as usize)));
    let failure: Arc<Mutex<FirstFailure>> = Arc::new(Mutex::new(None));
    let stop = cancel.child_token();
    let mut handles = Vec::new();
    let cold = cold.map(|(id, first)| (id.to_owned(), first));
    for _ in 0..workers.min(count) {
        let cold = cold.clone();
        let (client, body, next, records, failure, stop, live) = (
            client.clone(),
            body.clone(),
            next.clone(),
            records.clone(),
            failure.clone(),
            stop.clone(),
            live_tokens.clone(),
        );
        handles.push(tokio::spawn(async move {
            let mut conn = None;
            loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= count || stop.is_cancelled() {
                    break;
                }
                let body = match &cold {
                    Some((id, first)) => crate::cache::cold_body(&body, id, first + i),
                    None => body.clone(),
                };
                let out = run_stream(
                    &client,
                    &mut conn,
                    path,
                    body,
                    StreamHooks {
                        cancel: Some(&stop),
                        live_tokens: Some(&live),
                        in_flight: workers,
                        ..Default::default()
                    },
                )
                .await;
                let failed = out.record.error.clone().filter(|_| !out.record.cancelled);
                let kind = out.facts.kind;
                if let Ok(mut r) = records.lock() {
                    r.push((out.record, out.facts));
                }
                if let Some(e) = failed {
                    if let Ok(mut f) = failure.lock() {
                        f.get_or_insert((e, kind));
                    }
                    stop.cancel();
                    break;
                }
            }
        }));
    }
    for h in handles {
        let _ = h.await;
    }
    let recs = std::mem::take(&mut *records.lock().unwrap_or_else(|e| e.into_inner()));
    let fail = failure.lock().ok().and_then(|f| f.clone());
    let (records, facts) = recs.into_iter().unzip();
    Batch {
        records,
        facts,
        failure: fail,
    }
}

/// What [`run_batch`] returns.
struct Batch {
    /// Records in completion order.
    records: Vec<RequestRecord>,
    /// Their fault facts, same order.
    facts: Vec<StreamFacts>,
    /// The first failure and its kind.
    failure: FirstFailure,
}

fn count_429(facts: &[StreamFacts], result: &mut CellResult) {
    let rej: u64 = facts.iter().map(|f| u64::from(f.rejected)).sum();
    let ret: u64 = facts.iter().map(|f| u64::from(f.retries)).sum();
    *result.rejected_requests.get_or_insert(0) += rej;
    *result.retried_requests.get_or_insert(0) += ret;
}

/// Runs one Burst / E2E (or request-count) cell.
pub async fn run_burst_cell(
    client: &HttpClient,
    path: &'static str,
    job: BurstJob,
    events: &EventSink,
    telemetry: Option<&Telemetry>,
    run_cancel: &CancellationToken,
) -> BurstOutcome {
    let c = job.spec.concurrency;
    let ctx = job.spec.context;
    let label = format!("C={} ctx={}", c, servebench_results::format_context(ctx));
    let t_cell = Instant::now();
    let mut result = CellResult {
        concurrency: c,
        context_tokens: ctx,
        benchmark_mode: job.mode.into(),
        request_count_target: job.request_count,
        warmup_request_count: job.warmup_count,
        aggregate_source: "none".into(),
        ..Default::default()
    };
    let interrupted = |mut result: CellResult, scout| {
        result.status = CellStatus::SkippedUser;
        result.status_reason =
            "interrupted by the user (Ctrl-C, SIGTERM or SIGHUP) while the cell was running".into();
        BurstOutcome {
            result,
            scout,
            interrupted: true,
            records: Vec::new(),
        }
    };
    events.emit(RunEvent::CellStarted {
        index: job.index,
        total: job.total,
        concurrency: c,
        context: ctx,
        warmup: false,
    });
    events.log(format!(
        "cell start {label} request-count={} warmup={}",
        job.request_count, job.warmup_count
    ));

    let mut scout = None;
    if let Some(body) = job.scout_body.clone() {
        let out = run_single(client, path, body, run_cancel).await;
        if run_cancel.is_cancelled() {
            return interrupted(result, None);
        }
        count_429(std::slice::from_ref(&out.facts), &mut result);
        if let Some(err) = &out.record.error {
            result.status = CellStatus::Error;
            result.status_reason = format!(
                "the cell's first request (sent alone before the C streams, to fill the prefix cache) failed: {err}"
            );
            result.error_kind = out.facts.kind.map(|k| k.as_str().into());
            events.log(format!("cell error {label}: {}", result.status_reason));
            return BurstOutcome {
                result,
                scout: Some(out.record),
                interrupted: false,
                records: Vec::new(),
            };
        }
        result.prompt_tokens = out.record.prompt_tokens;
        scout = Some(out.record);
    }

    let live = Arc::new(AtomicU64::new(0));
    if job.warmup_count > 0 {
        let Batch {
            facts,
            failure: fail,
            ..
        } = run_batch(
            client,
            path,
            &job.body,
            job.cold_run_id.as_deref().map(|id| (id, 0)),
            job.warmup_count,
            c,
            run_cancel,
            live.clone(),
        )
        .await;
        if run_cancel.is_cancelled() {
            return interrupted(result, scout);
        }
        count_429(&facts, &mut result);
        if let Some((err, kind)) = fail {
            result.status = CellStatus::Invalid;
            result.status_reason = format!("a warmup request failed: {err}");
            result.error_kind = kind.map(|k| k.as_str().into());
            events.log(format!("cell invalid {label}: {}", result.status_reason));
            return BurstOutcome {
                result,
                scout,
                interrupted: false,
                records: Vec::new(),
            };
        }
    }

    // Measurement.
    let stop_sampler = CancellationToken::new();
    let sampler = telemetry.map(|t| Sampler::spawn(t.clone(), SAMPLE_EVERY, stop_sampler.clone()));
    let edge_start = match telemetry {
        Some(t) => t.edge_scrape().await,
        None => None,
    };
    events.log(format!(
        "measure start {label} request-count={}",
        job.request_count
    ));
    let start = Instant::now();
    let emit_progress = || {
        events.emit(RunEvent::Progress(CellProgress {
            concurrency: c,
            context: ctx,
            phase: Phase::Measuring,
            active_streams: c,
            elapsed_s: t_cell.elapsed().as_secs_f64(),
            live_tps: Some(
                live.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64().max(1e-3),
            ),
            window_elapsed_s: Some(start.elapsed().as_secs_f64()),
            window_s: 0.0,
            warmup: false,
        }))
    };
    live.store(0, Ordering::Relaxed);
    let batch = run_batch(
        client,
        path,
        &job.body,
        job.cold_run_id.as_deref().map(|id| (id, job.warmup_count)),
        job.request_count,
        c,
        run_cancel,
        live.clone(),
    );
    tokio::pin!(batch);
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    let Batch {
        records,
        facts,
        failure,
    } = loop {
        tokio::select! {
            r = &mut batch => break r,
            _ = tick.tick() => emit_progress(),
        }
    };
    let end = Instant::now();
    let edge_end = match telemetry {
        Some(t) => t.edge_scrape().await,
        None => None,
    };
    stop_sampler.cancel();
    let samples: Vec<ServerSample> = match sampler {
        Some(s) => s.finish().await,
        None => Vec::new(),
    };
    if run_cancel.is_cancelled() {
        return interrupted(result, scout);
    }

    let wall = end.duration_since(start).as_secs_f64();
    let refs: Vec<&RequestRecord> = records.iter().collect();
    fill_request_stats(&mut result, &refs, None);
    result.num_completed = records.iter().filter(|r| r.completed).count() as u64;
    result.num_errors = records
        .iter()
        .filter(|r| r.error.is_some() && !r.cancelled)
        .count() as u64;
    result.wall_time = Some(t_cell.elapsed().as_secs_f64());
    result.ready_reason = format!(
        "request_count={}, warmup_request_count={}",
        job.request_count, job.warmup_count
    );
    result.measurement_seconds = Some(wall);
    count_429(&facts, &mut result);
    if let Some((err, kind)) = failure {
        result.status = CellStatus::Invalid;
        result.status_reason = format!("a request failed: {err}");
        result.error_kind = kind.map(|k| k.as_str().into());
        events.log(format!("cell invalid {label}: {}", result.status_reason));
        return BurstOutcome {
            result,
            scout,
            interrupted: false,
            records,
        };
    }
    let tokens: u64 = records
        .iter()
        .filter(|r| r.completed)
        .map(|r| r.output_tokens)
        .sum();
    result.client_output_tokens = Some(tokens);
    result.total_tokens = Some(tokens);
    result.client_token_events = Some(records.iter().map(|r| r.token_events).sum());
    if let Some(t) = telemetry {
        let mut s: Vec<ServerSample> = edge_start.iter().map(|e| t.sample_of(e)).collect();
        s.extend(samples.into_iter().filter(|x| x.at >= start && x.at <= end));
        s.extend(edge_end.iter().map(|e| t.sample_of(e)));
        apply_window(
            &mut result,
            t.engine(),
            edge_start.as_ref(),
            edge_end.as_ref(),
            &s,
            c,
            tokens,
            wall,
        );
        if let (Some(a), Some(b)) = (&edge_start, &edge_end) {
            result.server_scrapes = Some(scrape_times(start, a, b));
        }
        // A burst ramps up and drains by design: only queueing marks it capacity-limited.
        result.underfilled = false;
        result.capacity_limited = result.avg_queue_reqs.unwrap_or(0.0) > 0.0
            || result.queue_fraction.unwrap_or(0.0) > 0.0;
    }
    let max_tokens = crate::timeouts::body_max_tokens(&job.body).unwrap_or(0);
    let checks: Vec<RequestFacts> = records
        .iter()
        .zip(&facts)
        .map(|(r, f)| RequestFacts {
            output_tokens: r.output_tokens,
            usage_jump: f.usage_jump,
        })
        .collect();
    let findings = check_requests(&checks, max_tokens);
    if tokens == 0 || wall <= 0.0 {
        result.status = CellStatus::Invalid;
        result.status_reason = "no completed request produced output tokens".into();
        result.error_kind = Some("no_output".into());
    } else {
        let tps = tokens as f64 / wall;
        result.aggregate_source = "openai_completed_usage".into();
        result.aggregate_tps = Some(tps);
        result.per_request_avg_tps = Some(tps / c as f64);
    }
    apply_findings(&mut result, findings);
    match (result.status, result.aggregate_tps) {
        (CellStatus::Ok, Some(tps)) => events.log(format!(
            "cell done {label} {tps:.1} tok/s ({}/{} completed)",
            result.num_completed, job.request_count
        )),
        _ => events.log(format!("cell invalid {label}: {}", result.status_reason)),
    }
    BurstOutcome {
        result,
        scout,
        interrupted: false,
        records,
    }
}
