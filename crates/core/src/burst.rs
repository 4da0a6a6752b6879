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
//! * Deadline ([`BurstJob::deadline`]): when the warmup and measured batches are not done by
//!   then, the requests in flight are cut and the cell is `invalid` with `batch_timeout`
//!   (requests finished, cut and never sent in the reason): per-request deadlines alone let a
//!   server that trickles tokens just inside the stream idle timeout hold a batch for hours.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use servebench_results::{AggregateSource, BenchmarkMode, CellResult, CellStatus, FailureKind};
use servebench_sse::RequestRecord;
use tokio_util::sync::CancellationToken;

use crate::aggregate::RequestStats;
use crate::events::{CellProgress, EventSink, Phase, RunEvent};
use crate::load::scout::{scout_failure_reason, Scout, INTERRUPTED_REASON};
use crate::load::FirstFailure;
use crate::load::{same_body, BodyFn, Load, LoadPattern, LoadSpec, RequestOutcome};
use crate::measure::{CellMeasurement, RequestCounts, ServerEvidence, Verdict, WindowTotals};
use crate::plan::CellSpec;
use crate::plausibility::{check_requests, check_stream_timing, RequestFacts, StreamTiming};
use crate::telemetry::{ClientWindow, Occupancy, Sampler, ServerSample, Telemetry, TimedScrape};
use servebench_client::stream::StreamFacts;
use servebench_client::target::HttpClient;

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
    pub mode: BenchmarkMode,
    /// Cold prompts (`--prompt-cache cold`): the run id whose nonce each request replaces with
    /// its own ([`crate::cache::cold_body`]); `None` = every request sends `body` (shared).
    pub cold_run_id: Option<String>,
    /// Position in the plan, from 1.
    pub index: usize,
    /// Cells in the plan.
    pub total: usize,
    /// Where the rows of the measured requests go (`--export-requests`), when exported.
    pub export: Option<crate::export::ExportSink>,
    /// Wall-clock deadline of the warmup and measured batches together, from the end of the
    /// scout (`--batch-timeout`); `None` = none beyond the per-request deadlines.
    pub deadline: Option<Duration>,
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

/// The driver spec of `count` requests at most `c` in flight, stopping at the first failure.
/// With cold prompts, request k carries the nonce of request number `first + k`.
fn batch_spec(
    path: &'static str,
    body: &Bytes,
    cold: Option<(&str, u64)>,
    count: u64,
    c: u64,
) -> LoadSpec {
    let body_fn = match cold {
        Some((id, first)) => {
            let (body, id) = (body.clone(), id.to_owned());
            Arc::new(move |k| crate::cache::cold_body(&body, &id, first + k)) as BodyFn
        }
        None => same_body(body.clone()),
    };
    LoadSpec::new(
        path,
        LoadPattern::Batch {
            count,
            concurrency: c,
        },
        body_fn,
    )
}

/// When the cell started, and its batches' deadline.
#[derive(Clone, Copy)]
struct CellClock {
    started: Instant,
    deadline: Option<Instant>,
}

/// Waits until `deadline` (forever when `None`).
async fn until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d.into()).await,
        None => std::future::pending().await,
    }
}

/// The reason of a cell whose batch passed its deadline.
fn deadline_reason(
    phase: &str,
    timeout: Option<Duration>,
    done: u64,
    cut: u64,
    not_sent: u64,
) -> String {
    format!(
        "batch_timeout: the cell's deadline ({:.0} s for its batches) passed during the {phase} batch: \
         {done} requests had finished, {cut} in flight were cut, {not_sent} never sent",
        timeout.unwrap_or_default().as_secs_f64()
    )
}

/// Records and fault facts of a finished batch, completion order.
fn split(outcomes: Vec<RequestOutcome>) -> (Vec<RequestRecord>, Vec<StreamFacts>) {
    outcomes
        .into_iter()
        .map(|o| (o.stream.record, o.stream.facts))
        .unzip()
}

/// Adds the 429 rejections and retries of `facts` to `counts`.
fn count_429(facts: &[StreamFacts], counts: &mut RequestCounts) {
    let rej: u64 = facts.iter().map(|f| u64::from(f.rejected)).sum();
    let ret: u64 = facts.iter().map(|f| u64::from(f.retries)).sum();
    *counts.rejected.get_or_insert(0) += rej;
    *counts.retried.get_or_insert(0) += ret;
}

/// A cell that ended before its measurement finished (error, invalid warmup, Ctrl-C).
fn ended(m: &CellMeasurement, scout: Option<RequestRecord>, interrupted: bool) -> BurstOutcome {
    BurstOutcome {
        result: m.to_result(),
        scout,
        interrupted,
        records: Vec::new(),
    }
}

fn interrupted(mut m: CellMeasurement, scout: Option<RequestRecord>) -> BurstOutcome {
    m.verdict = Verdict::new(CellStatus::SkippedUser, INTERRUPTED_REASON.into(), None);
    ended(&m, scout, true)
}

/// What the measured batch gave.
struct Measured {
    records: Vec<RequestRecord>,
    facts: Vec<StreamFacts>,
    failure: FirstFailure,
    /// The deadline cut the batch: the requests never sent.
    cut: Option<u64>,
    start: Instant,
    end: Instant,
    edges: (Option<TimedScrape>, Option<TimedScrape>),
    samples: Vec<ServerSample>,
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
    let label = format!(
        "C={} ctx={}",
        c,
        servebench_results::format_context(job.spec.context)
    );
    let t_cell = Instant::now();
    let mut m = CellMeasurement::new(job.spec, job.mode, Verdict::ok());
    m.batch = Some((job.request_count, job.warmup_count));
    events.emit(RunEvent::CellStarted {
        index: job.index,
        total: job.total,
        concurrency: c,
        context: job.spec.context,
        warmup: false,
    });
    events.log(format!(
        "cell start {label} request-count={} warmup={}",
        job.request_count, job.warmup_count
    ));

    let mut scout = None;
    if let Some(body) = job.scout_body.clone() {
        match crate::load::scout::scout(client, path, body, run_cancel).await {
            Scout::Interrupted => return interrupted(m, None),
            Scout::Failed(out) => {
                count_429(std::slice::from_ref(&out.facts), &mut m.counts);
                m.verdict = Verdict::new(
                    CellStatus::Error,
                    scout_failure_reason(out.record.error.as_deref().unwrap_or_default()),
                    out.facts.kind,
                );
                events.log(format!("cell error {label}: {}", m.verdict.reason));
                return ended(&m, Some(out.record), false);
            }
            Scout::Done(out) => {
                count_429(std::slice::from_ref(&out.facts), &mut m.counts);
                m.prompt_tokens = out.record.prompt_tokens;
                scout = Some(out.record);
            }
        }
    }

    let deadline = job.deadline.map(|d| Instant::now() + d);
    if job.warmup_count > 0 {
        let cold = job.cold_run_id.as_deref().map(|id| (id, 0));
        let spec = batch_spec(path, &job.body, cold, job.warmup_count, c);
        let mut load = Load::start(client, spec, run_cancel);
        let mut outcomes = Vec::new();
        let mut cut = false;
        loop {
            tokio::select! {
                o = load.next() => match o {
                    Some(o) => outcomes.push(o),
                    None => break,
                },
                _ = until(deadline), if !cut => {
                    cut = true;
                    load.stop();
                }
            }
        }
        let report = load.finish().await;
        if run_cancel.is_cancelled() {
            return interrupted(m, scout);
        }
        outcomes.extend(report.outcomes);
        let (records, facts) = split(outcomes);
        count_429(&facts, &mut m.counts);
        if cut {
            let done = records.iter().filter(|r| r.completed).count() as u64;
            let cut_n = records.iter().filter(|r| r.cancelled).count() as u64;
            m.verdict = Verdict::new(
                CellStatus::Invalid,
                deadline_reason("warmup", job.deadline, done, cut_n, report.not_sent),
                Some(FailureKind::BatchTimeout),
            );
            events.log(format!("cell invalid {label}: {}", m.verdict.reason));
            return ended(&m, scout, false);
        }
        if let Some((err, kind)) = report.first_failure {
            m.verdict = Verdict::new(
                CellStatus::Invalid,
                format!("a warmup request failed: {err}"),
                kind,
            );
            events.log(format!("cell invalid {label}: {}", m.verdict.reason));
            return ended(&m, scout, false);
        }
    }

    let clock = CellClock {
        started: t_cell,
        deadline,
    };
    let batch = measure(client, path, &job, events, telemetry, run_cancel, clock).await;
    if run_cancel.is_cancelled() {
        return interrupted(m, scout);
    }
    m.wall_s = Some(t_cell.elapsed().as_secs_f64());
    let records = finish(&mut m, &job, batch, telemetry);
    let result = m.to_result();
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

/// The measured batch: N requests at C with the server sampled beside it and scraped at its
/// edges; progress every 250 ms.
async fn measure(
    client: &HttpClient,
    path: &'static str,
    job: &BurstJob,
    events: &EventSink,
    telemetry: Option<&Telemetry>,
    run_cancel: &CancellationToken,
    clock: CellClock,
) -> Measured {
    let CellClock {
        started: t_cell,
        deadline,
    } = clock;
    let c = job.spec.concurrency;
    let stop_sampler = CancellationToken::new();
    let sampler = telemetry.map(|t| Sampler::spawn(t.clone(), SAMPLE_EVERY, stop_sampler.clone()));
    let edge_start = match telemetry {
        Some(t) => t.edge_scrape().await,
        None => None,
    };
    events.log(format!(
        "measure start C={} ctx={} request-count={}",
        c,
        servebench_results::format_context(job.spec.context),
        job.request_count
    ));
    let start = Instant::now();
    let cold = job.cold_run_id.as_deref().map(|id| (id, job.warmup_count));
    let mut spec = batch_spec(path, &job.body, cold, job.request_count, c);
    spec.export = job.export.clone();
    let mut load = Load::start(client, spec, run_cancel);
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    let mut outcomes = Vec::with_capacity(job.request_count as usize);
    let mut cut = false;
    loop {
        tokio::select! {
            o = load.next() => match o {
                Some(o) => outcomes.push(o),
                None => break,
            },
            _ = until(deadline), if !cut => {
                cut = true;
                load.stop();
            }
            _ = tick.tick() => {
                let live = load.counters().live_tokens.load(Ordering::Relaxed);
                events.emit(RunEvent::Progress(CellProgress {
                    concurrency: c,
                    context: job.spec.context,
                    phase: Phase::Measuring,
                    active_streams: c,
                    elapsed_s: t_cell.elapsed().as_secs_f64(),
                    live_tps: Some(live as f64 / start.elapsed().as_secs_f64().max(1e-3)),
                    window_elapsed_s: Some(start.elapsed().as_secs_f64()),
                    window_s: 0.0,
                    warmup: false,
                }))
            }
        }
    }
    let report = load.finish().await;
    let end = Instant::now();
    outcomes.extend(report.outcomes);
    let not_sent = report.not_sent;
    let edge_end = match telemetry {
        Some(t) => t.edge_scrape().await,
        None => None,
    };
    stop_sampler.cancel();
    let samples = match sampler {
        Some(s) => s.finish().await,
        None => Vec::new(),
    };
    let (records, facts) = split(outcomes);
    Measured {
        records,
        facts,
        failure: report.first_failure,
        cut: cut.then_some(not_sent),
        start,
        end,
        edges: (edge_start, edge_end),
        samples,
    }
}

/// The measured batch's part of the measurement: counts, request statistics, totals, server
/// evidence, plausibility and the headline; returns its records.
fn finish(
    m: &mut CellMeasurement,
    job: &BurstJob,
    batch: Measured,
    telemetry: Option<&Telemetry>,
) -> Vec<RequestRecord> {
    let c = job.spec.concurrency;
    let Measured {
        records,
        facts,
        failure,
        cut,
        start,
        end,
        edges: (edge_start, edge_end),
        samples,
    } = batch;
    let wall = end.duration_since(start).as_secs_f64();
    let refs: Vec<&RequestRecord> = records.iter().collect();
    m.requests = Some(RequestStats::of(&refs, None));
    m.steady = crate::steady::steady_state(&refs, c, start, end);
    m.warnings
        .extend(crate::steady::steady_warning(m.steady.as_ref(), c));
    m.counts.completed = records.iter().filter(|r| r.completed).count() as u64;
    m.counts.errors = records
        .iter()
        .filter(|r| r.error.is_some() && !r.cancelled)
        .count() as u64;
    m.ready.reason = format!(
        "request_count={}, warmup_request_count={}",
        job.request_count, job.warmup_count
    );
    let mut totals = WindowTotals {
        seconds: wall,
        wall_seconds: None,
        tokens: None,
        token_events: None,
        continuous: None,
        aggregate_source: None,
    };
    count_429(&facts, &mut m.counts);
    if let Some(not_sent) = cut {
        let cut_n = records.iter().filter(|r| r.cancelled).count() as u64;
        m.verdict = Verdict::new(
            CellStatus::Invalid,
            deadline_reason(
                "measured",
                job.deadline,
                m.counts.completed,
                cut_n,
                not_sent,
            ),
            Some(FailureKind::BatchTimeout),
        );
        m.window = Some(totals);
        return records;
    }
    if let Some((err, kind)) = failure {
        m.verdict = Verdict::new(
            CellStatus::Invalid,
            format!("a request failed: {err}"),
            kind,
        );
        m.window = Some(totals);
        return records;
    }
    let tokens: u64 = records
        .iter()
        .filter(|r| r.completed)
        .map(|r| r.output_tokens)
        .sum();
    totals.tokens = Some(tokens);
    totals.token_events = Some(records.iter().map(|r| r.token_events).sum());
    m.server = telemetry.map(|t| {
        let mut s: Vec<ServerSample> = edge_start.iter().map(|e| t.sample_of(e)).collect();
        s.extend(samples.into_iter().filter(|x| x.at >= start && x.at <= end));
        s.extend(edge_end.iter().map(|e| t.sample_of(e)));
        ServerEvidence {
            engine: t.engine(),
            start: edge_start,
            end: edge_end,
            samples: s,
            origin: start,
            client: ClientWindow {
                concurrency: c,
                tokens,
                seconds: wall,
                occupancy: Occupancy::Drains,
            },
        }
    });
    let max_tokens = servebench_client::timeouts::body_max_tokens(&job.body).unwrap_or(0);
    let checks: Vec<RequestFacts> = records
        .iter()
        .zip(&facts)
        .map(|(r, f)| RequestFacts {
            output_tokens: r.output_tokens,
            usage_jump: f.usage_jump,
        })
        .collect();
    m.findings = check_requests(&checks, max_tokens);
    // The stream checks of the window modes (single write, unbacked or end-jumping usage,
    // per-stream speed) over the completed requests: a burst is no less exposed to them.
    let timings: Vec<StreamTiming> = records
        .iter()
        .zip(&facts)
        .filter(|(r, _)| r.completed)
        .map(|(r, f)| StreamTiming::of(r, f))
        .collect();
    m.findings.extend(check_stream_timing(&timings));
    if records.iter().any(|r| r.nonmonotonic_usage) {
        m.warnings.push(crate::cell::NOT_CUMULATIVE_WARNING.into());
    }
    if tokens == 0 || wall <= 0.0 {
        m.verdict = Verdict::new(
            CellStatus::Invalid,
            "no completed request produced output tokens".into(),
            Some(FailureKind::NoOutput),
        );
    } else {
        // a completed request without usage was counted one token per SSE event: the
        // chunk fallback, a lower bound when chunks carry several tokens (break-it round 8:
        // labelled completed usage at 1/8 of the true count, without a word)
        let done: Vec<&RequestRecord> = records.iter().filter(|r| r.completed).collect();
        let no_usage = done
            .iter()
            .filter(|r| r.usage_completion_tokens.is_none())
            .count();
        totals.aggregate_source = Some(if no_usage > 0 {
            m.findings.push(crate::plausibility::Finding {
                kind: FailureKind::EstimatedTokens,
                invalid: false,
                message: format!(
                    "estimated_tokens: {no_usage} of {} completed requests sent no usage: their tokens were counted one per SSE event (a lower bound when chunks carry several tokens, as with speculative decoding)",
                    done.len()
                ),
            });
            AggregateSource::OpenaiStreamChunksFallback
        } else {
            AggregateSource::OpenaiCompletedUsage
        });
        if body_ignores_eos(&job.body) && max_tokens > 0 {
            let short = done
                .iter()
                // without usage the count is one per chunk, no stop
                .filter(|r| {
                    r.output_tokens < max_tokens
                        && !r.nonmonotonic_usage
                        && r.usage_completion_tokens.is_some()
                })
                .count();
            if short > 0 {
                m.warnings.push(format!(
                    "{short} of {} completed requests stopped before max_tokens {max_tokens} although ignore_eos was sent",
                    done.len()
                ));
            }
        }
        m.aggregate_tps = Some(tokens as f64 / wall);
    }
    m.window = Some(totals);
    records
}

/// The request body asks the server to ignore the end-of-sequence token (`"ignore_eos": true`).
fn body_ignores_eos(body: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("ignore_eos")?.as_bool())
        .unwrap_or(false)
}
