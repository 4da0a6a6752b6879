//! The open-loop request-rate layer (`servebench run --request-rate 5,10,20`): for each offered
//! rate λ (and each context), an arrival schedule ([`arrival`]) is sent through the load driver
//! ([`crate::load`], [`LoadPattern::OpenLoop`]) and folded into one
//! [`servebench_results::RateRow`]; with SLOs ([`slo`]) each row gets goodput and attainment,
//! and `--rate-search` ([`search`]) probes rates until the highest one meeting the SLOs is
//! bracketed to the resolution. Every probed rate is a row.
//!
//! **Coordinated omission.** Each request has an intended send time (`start + schedule[k]`); the
//! driver sends it then, or — under `--max-concurrency` with every slot busy — as soon as a slot
//! frees, keeping the intended time. TTFT and E2E are reported both from the actual send time
//! (`ttft`, `e2e`) and from the intended one (`ttft_from_intended`, `e2e_from_intended`); the
//! schedule lag `sent_at − intended_at` is reported as client health. No arrival is dropped
//! silently: arrivals still waiting when the row's deadline passes are `requests_not_sent`.
//!
//! **Row end.** Sending stops when the schedule is exhausted; the row then waits for the
//! requests in flight. The row has a deadline of `duration + drain` (`drain` =
//! [`RateConfig::drain`]): what is still in flight then is cut (`requests_cut`) and what has not been sent is counted as not sent.
//!
//! All rows of a run use the same seed, so at every rate the schedule is the same sequence of
//! unit draws scaled by 1/λ (common random numbers: rows differ by the rate, not by luck).

pub mod arrival;
pub mod search;
pub mod slo;

use std::time::{Duration, Instant};

use bytes::Bytes;
use servebench_results::{format_context, CellStatus, RateRow, RateSearch, RateSummary, SloCheck};
use tokio_util::sync::CancellationToken;

use crate::events::EventSink;
use crate::load::{Load, LoadPattern, LoadSpec, RequestOutcome};
use arrival::{schedule, Arrival, Span};
use search::{RateSearcher, SearchSettings};
use servebench_client::target::HttpClient;
use slo::{check_percentile, RequestValues, Slo};

/// The open-loop layer's settings (built by the CLI from `--request-rate` and friends).
#[derive(Clone, Debug, PartialEq)]
pub struct RateConfig {
    /// Offered rates λ, req/s, in run order (`--request-rate`); ignored by a search.
    pub rates: Vec<f64>,
    /// Arrival process (`--arrival`, `--burstiness`).
    pub arrival: Arrival,
    /// Client-side concurrency cap (`--max-concurrency`).
    pub max_concurrency: Option<u64>,
    /// SLOs (`--slo`); empty = no goodput.
    pub slos: Vec<Slo>,
    /// `--rate-search`: search instead of the fixed rates (needs SLOs).
    pub search: Option<SearchSettings>,
    /// How long after the schedule ends a row waits for requests in flight before cutting
    /// them.
    pub drain: Duration,
}

impl RateConfig {
    /// Checks the settings (one-line errors, no flag names).
    pub fn validate(&self) -> Result<(), String> {
        if self.search.is_none() && self.rates.is_empty() {
            return Err("no request rate given".into());
        }
        for &r in &self.rates {
            if !(r.is_finite() && r > 0.0) {
                return Err(format!("request rate must be a number > 0 (got {r})"));
            }
        }
        if self.max_concurrency == Some(0) {
            return Err("max concurrency must be ≥ 1".into());
        }
        if let Some(s) = &self.search {
            if self.slos.is_empty() {
                return Err("a rate search needs at least one SLO".into());
            }
            s.validate()?;
        }
        Ok(())
    }
}

/// Everything the layer needs from the runner.
pub struct RateJob<'a> {
    /// The server.
    pub client: &'a HttpClient,
    /// Streaming API path.
    pub path: &'static str,
    /// Per context (tokens): the request body, or why the context cannot run.
    pub bodies: Vec<(u64, Result<Bytes, String>)>,
    /// Cold prompts: each request's nonce is made unique from this run id
    /// ([`crate::cache::cold_body`]); `None` = the same prompt for every request.
    pub cold_run_id: Option<String>,
    /// Length of every row's arrival schedule.
    pub duration: Duration,
    /// Seed of the schedules (`--seed`, else drawn once for the run).
    pub seed: u64,
    /// Events (log lines).
    pub events: &'a EventSink,
    /// The run's Ctrl-C token.
    pub cancel: &'a CancellationToken,
    /// Rows kept from the file a run resumes (`--resume`): a fixed-rate row with the same
    /// context, rate, arrival, cap and duration is carried over instead of measured again.
    pub kept: Vec<RateRow>,
    /// `--export-requests`: where every row's request rows go, when exported.
    pub export: Option<crate::export::RequestExport>,
}

/// The job of a run: cold prompts unless `--prompt-cache shared`, the run's `--duration`, and
/// `--seed` (else a seed drawn now and recorded in every row).
pub fn job_from_run<'a>(
    client: &'a HttpClient,
    path: &'static str,
    cfg: &crate::run::config::RunConfig,
    run_id: &str,
    bodies: &[(u64, Result<Bytes, String>)],
    events: &'a EventSink,
    cancel: &'a CancellationToken,
) -> RateJob<'a> {
    let cold = cfg
        .burst
        .prompt_cache
        .unwrap_or(crate::cache::PromptCache::Cold)
        == crate::cache::PromptCache::Cold;
    RateJob {
        client,
        path,
        bodies: bodies.to_vec(),
        cold_run_id: cold.then(|| run_id.to_string()),
        duration: cfg.duration,
        seed: cfg.seed.unwrap_or_else(rand::random),
        events,
        cancel,
        kept: Vec::new(),
        export: cfg.export.clone(),
    }
}

impl RateJob<'_> {
    /// The job carrying over the kept rows of `resume` (`--resume`).
    pub fn keeping(mut self, resume: Option<&crate::resume::Resume>) -> Self {
        self.kept = resume.map(|r| r.rate_rows.clone()).unwrap_or_default();
        self
    }
}

/// `status_reason` of a `--request-rate` row the run never reached because it was interrupted.
pub const NOT_RUN_REASON: &str =
    "not run: the run was interrupted by the user (Ctrl-C, SIGTERM or SIGHUP) before this row";

/// What the layer has finished so far (handed to the runner after every row, to checkpoint).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RateProgress {
    /// Finished rows, run order.
    pub rows: Vec<RateRow>,
    /// Search outcomes, one per searched context (updated after every probe).
    pub searches: Vec<RateSearch>,
}

/// Runs every row of `cfg` (each context × each rate, or a search per context), calling
/// `on_row` after each finished row with everything so far.
pub async fn run_rate_layer(
    cfg: &RateConfig,
    job: &RateJob<'_>,
    on_row: &mut (dyn FnMut(&RateProgress) + Send),
) -> RateProgress {
    let mut p = RateProgress::default();
    for (ctx, body) in &job.bodies {
        let body = match body {
            Ok(b) => b,
            Err(why) => {
                let rates: Vec<f64> = match &cfg.search {
                    Some(s) => vec![s.start],
                    None => cfg.rates.clone(),
                };
                for rate in rates {
                    let mut row = row_header(cfg, job, *ctx, rate, 0);
                    row.status = Some(CellStatus::SkippedContext);
                    row.status_reason = Some(why.clone());
                    p.rows.push(row);
                    on_row(&p);
                }
                continue;
            }
        };
        match &cfg.search {
            None => {
                for &rate in &cfg.rates {
                    if job.cancel.is_cancelled() {
                        // Listed like the matrix's unreached cells, never dropped.
                        let mut row = row_header(cfg, job, *ctx, rate, 0);
                        row.status = Some(CellStatus::SkippedUser);
                        row.status_reason = Some(NOT_RUN_REASON.into());
                        p.rows.push(row);
                        on_row(&p);
                        continue;
                    }
                    let header = row_header(cfg, job, *ctx, rate, 0);
                    let kept = job.kept.iter().find(|k| same_row(k, &header));
                    let row = match kept {
                        Some(k) => {
                            job.events.log(format!(
                                "rate row ctx={} rate={rate} req/s kept from the resumed file",
                                format_context(*ctx)
                            ));
                            k.clone()
                        }
                        None => run_row(cfg, job, *ctx, body, rate, None).await,
                    };
                    p.rows.push(row);
                    on_row(&p);
                }
            }
            Some(settings) => {
                let mut s = RateSearcher::new(*settings);
                p.searches.push(s.outcome(*ctx));
                let mut step = 0u64;
                while let Some(rate) = s.next_rate() {
                    step += 1;
                    let row = run_row(cfg, job, *ctx, body, rate, Some(step)).await;
                    if row.status == Some(CellStatus::SkippedUser) {
                        s.interrupt();
                    } else {
                        s.record(rate, row.slo_met == Some(true));
                    }
                    p.rows.push(row);
                    *p.searches.last_mut().expect("pushed above") = s.outcome(*ctx);
                    on_row(&p);
                    if job.cancel.is_cancelled() {
                        s.interrupt();
                        break;
                    }
                }
                let out = s.outcome(*ctx);
                job.events.log(format!(
                    "rate search ctx={}: best {} req/s ({} probes, stopped: {})",
                    format_context(*ctx),
                    out.best_rate
                        .map(|r| format!("{r:.3}"))
                        .unwrap_or_else(|| "none".into()),
                    out.probes.len(),
                    out.stopped.as_str()
                ));
                *p.searches.last_mut().expect("pushed above") = out;
                on_row(&p);
            }
        }
    }
    p
}

/// Whether a kept row was measured with the settings of `header` (the seed may differ: a
/// resumed run without `--seed` draws a new one).
fn same_row(kept: &RateRow, header: &RateRow) -> bool {
    kept.context_tokens == header.context_tokens
        && kept.offered_rate == header.offered_rate
        && kept.arrival == header.arrival
        && kept.burstiness == header.burstiness
        && kept.max_concurrency == header.max_concurrency
        && kept.duration == header.duration
        && kept.search_step.is_none()
}

/// The row's configuration fields (nothing measured yet).
fn row_header(cfg: &RateConfig, job: &RateJob<'_>, ctx: u64, rate: f64, step: u64) -> RateRow {
    RateRow {
        context_tokens: ctx,
        offered_rate: rate,
        arrival: cfg.arrival.process(),
        burstiness: cfg.arrival.burstiness(),
        max_concurrency: cfg.max_concurrency,
        duration: job.duration.as_secs_f64(),
        seed: job.seed,
        search_step: (step > 0).then_some(step),
        ..Default::default()
    }
}

/// Sends one schedule at `rate` and folds it into a row.
async fn run_row(
    cfg: &RateConfig,
    job: &RateJob<'_>,
    ctx: u64,
    body: &Bytes,
    rate: f64,
    step: Option<u64>,
) -> RateRow {
    measure_row(cfg, job, ctx, body, rate, step).await.0
}

/// A `--request-rate` row whose arrivals that did not complete (failed, cut at the deadline or
/// never sent) exceed this share of the scheduled ones is `invalid`: its latency summaries cover
/// only the completed requests, and the missing ones are the slowest (or the server's failures),
/// so above 1 % even the p99 does not describe the server.
pub const UNFINISHED_INVALID_FRACTION: f64 = 0.01;

/// Marks an `ok` row `invalid` when more than [`UNFINISHED_INVALID_FRACTION`] of its arrivals
/// did not complete. Rate-search probes are left `ok`: their verdict is `slo_met`, which already
/// counts every unfinished arrival as missing its SLOs, and an overloaded probe is how the search
/// finds the bracket.
fn judge_unfinished(row: &mut RateRow) {
    let unfinished = row.requests_failed + row.requests_cut + row.requests_not_sent;
    let share = unfinished as f64 / row.requests_scheduled.max(1) as f64;
    if row.status != Some(CellStatus::Ok)
        || row.search_step.is_some()
        || share <= UNFINISHED_INVALID_FRACTION
    {
        return;
    }
    row.status = Some(CellStatus::Invalid);
    let why = format!(
        "{unfinished} of {} arrivals did not complete ({} failed, {} cut, {} not sent: {:.1} %, over {:.0} %): the latency summaries cover only the {} completed requests and do not describe the server at this rate",
        row.requests_scheduled,
        row.requests_failed,
        row.requests_cut,
        row.requests_not_sent,
        share * 100.0,
        UNFINISHED_INVALID_FRACTION * 100.0,
        row.requests_completed
    );
    row.status_reason = Some(match row.status_reason.take() {
        Some(r) => format!("{why}; {r}"),
        None => why,
    });
}

/// The steady state of a row under the cap `cap` ([`crate::steady`]): from its first intended
/// send to its last request's end.
fn capped_steady_state(
    outcomes: &[RequestOutcome],
    cap: u64,
) -> Option<servebench_results::SteadyState> {
    let start = outcomes.iter().map(|o| o.intended_at).min()?;
    let end = outcomes.iter().map(|o| o.stream.record.end_at).max()?;
    let records: Vec<&servebench_sse::RequestRecord> =
        outcomes.iter().map(|o| &o.stream.record).collect();
    crate::steady::steady_state(&records, cap, start, end)
}

/// One row at `rate` for context `ctx` (`step` = its rate-search probe number): the row and
/// every sent request's outcome (completion order; for tests against the simulator's truth).
pub async fn measure_row(
    cfg: &RateConfig,
    job: &RateJob<'_>,
    ctx: u64,
    body: &Bytes,
    rate: f64,
    step: Option<u64>,
) -> (RateRow, Vec<RequestOutcome>) {
    let mut row = row_header(cfg, job, ctx, rate, step.unwrap_or(0));
    let offsets = match schedule(cfg.arrival, rate, Span::Duration(job.duration), job.seed) {
        Ok(s) => s,
        Err(e) => {
            row.status = Some(CellStatus::Error);
            row.status_reason = Some(e);
            return (row, Vec::new());
        }
    };
    job.events.log(format!(
        "rate row start ctx={} rate={rate} req/s arrival={} requests={}{}",
        format_context(ctx),
        cfg.arrival.name(),
        offsets.len(),
        cfg.max_concurrency
            .map(|c| format!(" max_concurrency={c}"))
            .unwrap_or_default()
    ));
    let body_fn: crate::load::BodyFn = match &job.cold_run_id {
        Some(id) => {
            let (body, id) = (body.clone(), id.clone());
            std::sync::Arc::new(move |n| crate::cache::cold_body(&body, &id, n))
        }
        None => crate::load::same_body(body.clone()),
    };
    let mut spec = LoadSpec::new(
        job.path,
        LoadPattern::OpenLoop {
            schedule: offsets.clone(),
            max_concurrency: cfg.max_concurrency,
        },
        body_fn,
    );
    // One failed request must not end an open-loop row: failures are part of what it measures.
    spec.stop_on_failure = false;
    spec.export = job.export.as_ref().map(|x| {
        x.sink(crate::export::ExportKey {
            layer: "rate",
            context_tokens: ctx,
            concurrency: cfg.max_concurrency,
            request_rate: Some(rate),
        })
    });
    let deadline = Instant::now() + job.duration + cfg.drain;
    let mut load = Load::start(job.client, spec, job.cancel);
    let mut outcomes: Vec<RequestOutcome> = Vec::with_capacity(offsets.len());
    let mut cut = false;
    // The row ends when every arrival has an outcome (or the channel closes), at the
    // deadline (the load is stopped: streams in flight are cut), or on Ctrl-C.
    while outcomes.len() < offsets.len() {
        tokio::select! {
            o = load.next() => match o {
                Some(o) => outcomes.push(o),
                None => break,
            },
            _ = tokio::time::sleep_until(deadline.into()) => {
                cut = true;
                load.stop();
                break;
            }
            _ = job.cancel.cancelled() => break,
        }
    }
    let report = load.finish().await;
    outcomes.extend(report.outcomes);
    let interrupted = job.cancel.is_cancelled();
    fold_row(&mut row, &offsets, &outcomes, &cfg.slos);
    let max_tokens = servebench_client::timeouts::body_max_tokens(body).unwrap_or(0);
    judge_plausibility(&mut row, &outcomes, max_tokens);
    row.steady_state = cfg
        .max_concurrency
        .and_then(|cap| capped_steady_state(&outcomes, cap));
    if interrupted {
        row.status = Some(CellStatus::SkippedUser);
        row.status_reason = Some(
            "interrupted by the user (Ctrl-C, SIGTERM or SIGHUP) while the row was running".into(),
        );
    } else {
        if cut {
            let why = format!(
                "the row's deadline (schedule {:.1} s + drain {:.1} s) passed: {} requests in flight were cut, {} arrivals never sent",
                job.duration.as_secs_f64(),
                cfg.drain.as_secs_f64(),
                row.requests_cut,
                row.requests_not_sent
            );
            row.status_reason = Some(match row.status_reason.take() {
                Some(r) => format!("{why}; {r}"),
                None => why,
            });
        }
        judge_unfinished(&mut row);
    }
    job.events.log(format!(
        "rate row done ctx={} rate={rate} req/s: achieved {} req/s, {} of {} completed, TTFT p50 {} (from intended {}){}",
        format_context(ctx),
        row.achieved_rate.map(|r| format!("{r:.2}")).unwrap_or_else(|| "-".into()),
        row.requests_completed,
        row.requests_scheduled,
        ms(row.ttft.map(|s| s.p50)),
        ms(row.ttft_from_intended.map(|s| s.p50)),
        match (row.goodput, row.slo_met) {
            (Some(g), Some(m)) => format!(", goodput {g:.2} req/s, SLOs {}", if m { "met" } else { "missed" }),
            _ => String::new(),
        }
    ));
    (row, outcomes)
}

/// The plausibility checks of the window modes over a row's requests
/// ([`crate::plausibility`]): per-request usage (above `max_tokens`, faster than the stream),
/// and over the completed requests the stream checks (single write, unbacked or end-jumping
/// usage, per-stream speed), plus non-cumulative usage. Warnings go to `warnings` /
/// `warning_kinds`; an invalid finding makes an `ok` row `invalid` with its text as the reason.
pub fn judge_plausibility(row: &mut RateRow, outcomes: &[RequestOutcome], max_tokens: u64) {
    use crate::plausibility::{check_requests, check_stream_timing, RequestFacts, StreamTiming};
    let facts: Vec<RequestFacts> = outcomes
        .iter()
        .map(|o| RequestFacts {
            output_tokens: o.stream.record.output_tokens,
            usage_jump: o.stream.facts.usage_jump,
        })
        .collect();
    let mut findings = check_requests(&facts, max_tokens);
    let timings: Vec<StreamTiming> = outcomes
        .iter()
        .filter(|o| o.stream.record.completed)
        .map(|o| StreamTiming::of(&o.stream.record, &o.stream.facts))
        .collect();
    findings.extend(check_stream_timing(&timings));
    if outcomes.iter().any(|o| o.stream.record.nonmonotonic_usage) {
        row.warnings
            .push(crate::cell::NOT_CUMULATIVE_WARNING.into());
    }
    for f in findings {
        if f.invalid && row.status == Some(CellStatus::Ok) {
            row.status = Some(CellStatus::Invalid);
            row.status_reason = Some(match row.status_reason.take() {
                Some(r) => format!("{}; {r}", f.message),
                None => f.message,
            });
            if !row.warning_kinds.contains(&f.kind) {
                row.warning_kinds.push(f.kind);
            }
            continue;
        }
        row.warnings.push(f.message);
        if !row.warning_kinds.contains(&f.kind) {
            row.warning_kinds.push(f.kind);
        }
    }
}

fn ms(v: Option<f64>) -> String {
    v.map(|s| format!("{:.1} ms", s * 1e3))
        .unwrap_or_else(|| "-".into())
}

fn secs(from: Instant, to: Instant) -> f64 {
    to.saturating_duration_since(from).as_secs_f64()
}

/// Summary (avg, p50/p90/p95/p99, max) of `v`, s; `None` when empty.
pub fn summarize(v: &[f64]) -> Option<RateSummary> {
    let mut v: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let p = |q| servebench_stats::percentile_sorted(&v, q);
    Some(RateSummary {
        count: v.len() as u64,
        avg: v.iter().sum::<f64>() / v.len() as f64,
        p50: p(50.0),
        p90: p(90.0),
        p95: p(95.0),
        p99: p(99.0),
        max: v[v.len() - 1],
    })
}

/// One request's SLO values: TTFT and E2E (last token) from the intended send time, mean ITL,
/// TPOT = `(end − first token) / (tokens − 1)`. `None` when the request did not complete.
pub fn request_values(o: &RequestOutcome) -> Option<RequestValues> {
    let r = &o.stream.record;
    if !r.completed {
        return None;
    }
    Some(RequestValues {
        completed: true,
        ttft: r.first_token_at.map(|t| secs(o.intended_at, t)),
        itl: r.itl_s(),
        tpot: tpot_s(r),
        e2e: r.last_token_at.map(|t| secs(o.intended_at, t)),
    })
}

/// vLLM bench serve's TPOT with the stream's end as the request's end:
/// `(end_at − first_token_at) / (output_tokens − 1)`, s; needs ≥ 2 tokens.
fn tpot_s(r: &servebench_sse::RequestRecord) -> Option<f64> {
    let first = r.first_token_at?;
    (r.output_tokens >= 2).then(|| secs(first, r.end_at) / (r.output_tokens - 1) as f64)
}

/// Folds a row's outcomes (completion order) into `row`: counts, rates, lags, latency
/// summaries, throughput, SLOs and goodput (definitions in `docs/metrics.md`; the row's span
/// is first intended send → last end). `offsets` is the schedule the load was given.
pub fn fold_row(
    row: &mut RateRow,
    offsets: &[Duration],
    outcomes: &[RequestOutcome],
    slos: &[Slo],
) {
    let n = offsets.len() as u64;
    row.requests_scheduled = n;
    row.requests_sent = outcomes.len() as u64;
    row.requests_not_sent = n.saturating_sub(row.requests_sent);
    row.requests_completed = outcomes
        .iter()
        .filter(|o| o.stream.record.completed)
        .count() as u64;
    row.requests_failed = outcomes
        .iter()
        .filter(|o| o.failed() && !o.stream.record.completed)
        .count() as u64;
    row.requests_cut = row.requests_sent - row.requests_completed - row.requests_failed;
    if n >= 2 {
        let span = (offsets[offsets.len() - 1] - offsets[0]).as_secs_f64();
        row.schedule_rate = (span > 0.0).then(|| (n - 1) as f64 / span);
    }
    let first_sent = outcomes.iter().map(|o| o.sent_at).min();
    let last_sent = outcomes.iter().map(|o| o.sent_at).max();
    if let (Some(a), Some(b)) = (first_sent, last_sent) {
        let span = secs(a, b);
        if outcomes.len() >= 2 && span > 0.0 {
            let r = (outcomes.len() - 1) as f64 / span;
            row.achieved_rate = Some(r);
            row.shortfall = row.schedule_rate.map(|s| 1.0 - r / s);
        }
    }
    let lags: Vec<f64> = outcomes.iter().map(|o| o.schedule_lag_s()).collect();
    if let Some(s) = summarize(&lags) {
        row.schedule_lag_p50 = Some(s.p50);
        row.schedule_lag_p99 = Some(s.p99);
        row.schedule_lag_max = Some(s.max);
    }
    let done: Vec<&RequestOutcome> = outcomes
        .iter()
        .filter(|o| o.stream.record.completed)
        .collect();
    let collect = |f: &dyn Fn(&RequestOutcome) -> Option<f64>| -> Option<RateSummary> {
        summarize(&done.iter().filter_map(|o| f(o)).collect::<Vec<f64>>())
    };
    row.ttft = collect(&|o| o.stream.record.ttft_s());
    row.ttft_from_intended = collect(&|o| {
        o.stream
            .record
            .first_token_at
            .map(|t| secs(o.intended_at, t))
    });
    row.itl = collect(&|o| o.stream.record.itl_s());
    row.tpot = collect(&|o| tpot_s(&o.stream.record));
    row.e2e = collect(&|o| o.stream.record.latency_s());
    row.e2e_from_intended = collect(&|o| {
        o.stream
            .record
            .last_token_at
            .map(|t| secs(o.intended_at, t))
    });
    // Gaps of every sent request (a cut one's stall is part of what the row measured).
    let gaps = crate::gaps::GapStats::of(outcomes.iter().map(|o| &o.stream.record));
    row.itl_gaps = gaps.as_ref().and_then(crate::gaps::GapStats::summary);
    row.peak_output_tps_1s = gaps
        .as_ref()
        .and_then(crate::gaps::GapStats::peak_output_tps_1s);
    row.output_tokens = outcomes.iter().map(|o| o.stream.record.output_tokens).sum();
    let start = outcomes.iter().map(|o| o.intended_at).min();
    let end = outcomes.iter().map(|o| o.stream.record.end_at).max();
    let span = match (start, end) {
        (Some(a), Some(b)) => Some(secs(a, b)).filter(|s| *s > 0.0),
        _ => None,
    };
    if let Some(span) = span {
        row.completed_rate = Some(row.requests_completed as f64 / span);
        row.output_tps = Some(row.output_tokens as f64 / span);
    }
    let last_intended = outcomes.iter().map(|o| o.intended_at).max();
    if let (Some(a), Some(b)) = (last_intended, end) {
        row.drain_s = Some(secs(a, b).max(0.0));
    }
    if !slos.is_empty() {
        // One entry per scheduled arrival: unsent arrivals are `None` like failed requests.
        let mut values: Vec<Option<RequestValues>> = outcomes.iter().map(request_values).collect();
        values.resize(n.max(values.len() as u64) as usize, None);
        let good = values
            .iter()
            .filter(|v| v.is_some_and(|v| v.good(slos)))
            .count() as u64;
        row.slo_attainment = (n > 0).then(|| good as f64 / n as f64);
        // Over the schedule's span, not first intended → last end: the drain after the last
        // arrival would make a row where every request met its SLOs read below its own rate.
        // One arrival has no realised rate: the offered one stands in (break-it round 8: good
        // / (end − intended) gave 6 req/s of goodput for 0.1 req/s offered, 1 / E2E)
        row.goodput = Some(match (row.slo_attainment, row.schedule_rate) {
            (Some(att), Some(rate)) => att * rate,
            (Some(att), None) => att * row.offered_rate,
            (None, _) => 0.0,
        });
        row.slo = slos
            .iter()
            .map(|s| {
                let (measured, met) = check_percentile(s, &values);
                SloCheck {
                    metric: s.metric,
                    percentile: s.percentile,
                    threshold: s.threshold_s,
                    measured,
                    met,
                }
            })
            .collect();
        row.slo_met = Some(row.slo.iter().all(|c| c.met));
    }
    row.status = Some(if row.requests_completed > 0 {
        CellStatus::Ok
    } else {
        CellStatus::Error
    });
    let first_error = outcomes
        .iter()
        .find(|o| o.failed())
        .and_then(|o| o.stream.record.error.clone());
    row.status_reason = match (row.requests_completed, first_error) {
        (0, Some(e)) => Some(format!("no request completed; first error: {e}")),
        (0, None) if n == 0 => Some("the schedule holds no arrival".into()),
        (0, None) => Some("no request completed".into()),
        (_, Some(e)) => Some(format!(
            "{} of {} sent requests failed; first error: {e}",
            row.requests_failed, row.requests_sent
        )),
        _ => None,
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(
        scheduled: u64,
        cut: u64,
        not_sent: u64,
        step: Option<u64>,
        status: CellStatus,
    ) -> RateRow {
        RateRow {
            requests_scheduled: scheduled,
            requests_sent: scheduled - not_sent,
            requests_completed: scheduled - not_sent - cut,
            requests_cut: cut,
            requests_not_sent: not_sent,
            search_step: step,
            status: Some(status),
            ..Default::default()
        }
    }

    #[test]
    fn rows_with_over_one_percent_unfinished_are_invalid_except_search_probes() {
        let judged = |mut r: RateRow| {
            judge_unfinished(&mut r);
            r.status.unwrap()
        };
        assert_eq!(
            judged(row(100, 1, 0, None, CellStatus::Ok)),
            CellStatus::Ok,
            "1 % is the limit"
        );
        assert_eq!(
            judged(row(100, 1, 1, None, CellStatus::Ok)),
            CellStatus::Invalid
        );
        assert_eq!(
            judged(row(100, 0, 2, None, CellStatus::Ok)),
            CellStatus::Invalid,
            "unsent count too"
        );
        let mut failing = row(100, 0, 0, None, CellStatus::Ok);
        (failing.requests_failed, failing.requests_completed) = (2, 98);
        assert_eq!(
            judged(failing),
            CellStatus::Invalid,
            "failed requests count too"
        );
        assert_eq!(
            judged(row(100, 50, 0, Some(3), CellStatus::Ok)),
            CellStatus::Ok,
            "a search probe"
        );
        assert_eq!(
            judged(row(100, 50, 0, None, CellStatus::Error)),
            CellStatus::Error
        );
        assert_eq!(
            judged(row(0, 0, 0, None, CellStatus::Ok)),
            CellStatus::Ok,
            "an empty schedule"
        );
        let mut r = row(10, 5, 0, None, CellStatus::Ok);
        r.status_reason = Some("the row's deadline passed".into());
        judge_unfinished(&mut r);
        assert_eq!(
            r.status_reason.as_deref(),
            Some("5 of 10 arrivals did not complete (0 failed, 5 cut, 0 not sent: 50.0 %, over 1 %): the latency summaries cover only the 5 completed requests and do not describe the server at this rate; the row's deadline passed")
        );
    }

    /// Issue 18: the open-loop arithmetic on hand-built records with known answers.
    ///
    /// Five arrivals scheduled 1 s apart (0..4 s); four were sent, 0, 0.1, 0.2 and 0.5 s late;
    /// the fifth never went out. Each sent request's first token comes 0.2 s after it was
    /// sent, three tokens 0.1 s apart, and its stream ends 0.3 s after the last token.
    /// A request of the hand-built rows: sent `lag` ms after its intended time `k` × `gap`
    /// ms; `kind` 0 completes (3 tokens, end at +700 ms), 1 fails (an error, one token), 2 is
    /// cut by the row deadline (one token).
    fn hand_built(k: u64, gap: u64, lag: u64, kind: u8, t0: Instant) -> RequestOutcome {
        use servebench_client::h1::ReadDelay;
        use servebench_client::stream::StreamOutcome;
        use servebench_sse::{decode, RequestTracker};
        const TOK: &str =
            r#"{"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}]}"#;
        const FIN: &str = r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#;
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let intended = k * gap;
        let sent = intended + lag;
        let mut t = RequestTracker::new(at(sent));
        let tokens = if kind == 0 { 3 } else { 1 };
        for i in 0..tokens {
            t.apply(&decode(TOK), at(sent + 200 + 100 * i));
        }
        let mut record = if kind == 0 {
            t.apply(&decode(FIN), at(sent + 400));
            t.apply(&decode("[DONE]"), at(sent + 700));
            t.finish(at(sent + 700), true, false)
        } else {
            t.finish(at(sent + 300), false, kind == 2)
        };
        if kind == 1 {
            record.error = Some("HTTP 500 from the server".into());
        }
        RequestOutcome {
            index: k,
            intended_at: at(intended),
            sent_at: at(sent),
            waited: false,
            stream: StreamOutcome {
                record,
                window_tokens: 0,
                window_token_events: 0,
                text: None,
                read_delay: ReadDelay::default(),
                facts: Default::default(),
            },
        }
    }

    /// The same arithmetic at 2 req/s with a failed and a cut request (core-rate survivors:
    /// at 1 req/s a rate multiplied and divided alike, and no request failed or was cut).
    #[test]
    fn open_loop_arithmetic_with_failures_cuts_and_a_rate_of_two() {
        let t0 = Instant::now();
        // 4 arrivals every 500 ms (1.5 s span: 2 req/s); sent 0, 100, 0, 0 ms late
        let offsets: Vec<Duration> = (0..4).map(|k| Duration::from_millis(500 * k)).collect();
        let outcomes = vec![
            hand_built(0, 500, 0, 0, t0),
            hand_built(1, 500, 100, 1, t0),
            hand_built(2, 500, 0, 2, t0),
            hand_built(3, 500, 0, 0, t0),
        ];
        let slo = Slo {
            metric: servebench_results::SloMetric::Ttft,
            percentile: 50.0,
            threshold_s: 0.4,
        };
        let mut row = RateRow {
            offered_rate: 2.0,
            ..RateRow::default()
        };
        fold_row(&mut row, &offsets, &outcomes, &[slo]);
        let close = |got: Option<f64>, want: f64, what: &str| {
            let g = got.unwrap_or_else(|| panic!("{what}: none"));
            assert!((g - want).abs() < 1e-9, "{what}: {g} != {want}");
        };
        assert_eq!(
            (
                row.requests_completed,
                row.requests_failed,
                row.requests_cut
            ),
            (2, 1, 1)
        );
        close(row.schedule_rate, 2.0, "schedule_rate: 3 gaps over 1.5 s");
        // sent at 0, 0.6, 1.0, 1.5 s: 3 gaps over 1.5 s
        close(row.achieved_rate, 2.0, "achieved_rate");
        close(row.shortfall, 0.0, "shortfall 1 − 2 / 2");
        // two good of four scheduled (TTFT 0.2 s each, from intended): 0.5 × 2 req/s
        close(row.slo_attainment, 0.5, "slo_attainment");
        close(row.goodput, 0.5 * 2.0, "goodput");
        assert_eq!(row.status, Some(CellStatus::Ok));
        assert_eq!(
            row.status_reason.as_deref(),
            Some("1 of 4 sent requests failed; first error: HTTP 500 from the server")
        );
        // a late send: achieved below the schedule (sent at 0, 0.9, 1.0, 1.5 s → 2 req/s over
        // 1.5 s still; the 4th 600 ms late: 3 gaps over 2.1 s)
        let late = vec![
            hand_built(0, 500, 0, 0, t0),
            hand_built(1, 500, 0, 0, t0),
            hand_built(2, 500, 0, 0, t0),
            hand_built(3, 500, 600, 0, t0),
        ];
        let mut row = RateRow::default();
        fold_row(&mut row, &offsets, &late, &[]);
        close(row.achieved_rate, 3.0 / 2.1, "achieved_rate, late");
        close(row.shortfall, 1.0 - (3.0 / 2.1) / 2.0, "shortfall, late");
        assert_eq!(row.goodput, None, "no SLO: no goodput");
        assert_eq!(row.status_reason, None);
        // one arrival: no realised rate, goodput at the offered rate
        let mut row = RateRow {
            offered_rate: 0.25,
            ..RateRow::default()
        };
        fold_row(&mut row, &offsets[..1], &late[..1], &[slo]);
        assert_eq!((row.schedule_rate, row.achieved_rate), (None, None));
        close(
            row.goodput,
            0.25,
            "goodput of one good arrival at 0.25 req/s",
        );
        // nothing completed: an error row, with the first error or why
        let mut row = RateRow::default();
        fold_row(&mut row, &offsets[..2], &outcomes[1..3], &[]);
        assert_eq!(row.status, Some(CellStatus::Error));
        assert_eq!(
            row.status_reason.as_deref(),
            Some("no request completed; first error: HTTP 500 from the server")
        );
        let mut row = RateRow::default();
        fold_row(&mut row, &offsets[..1], &outcomes[2..3], &[]);
        assert_eq!(row.status_reason.as_deref(), Some("no request completed"));
        let mut row = RateRow::default();
        fold_row(&mut row, &[], &[], &[slo]);
        assert_eq!(
            row.status_reason.as_deref(),
            Some("the schedule holds no arrival")
        );
        assert_eq!(
            row.slo_attainment, None,
            "no arrival: no attainment (not 0 / 0)"
        );
        // a schedule that does not start at 0: its span is last − first (1 s for 3 arrivals)
        let mut row = RateRow::default();
        fold_row(&mut row, &offsets[1..], &late[1..3], &[]);
        close(row.schedule_rate, 2.0, "schedule_rate from 0.5 s");
        // two arrivals at the same instant: no rate (not infinity)
        let same = [Duration::from_millis(500); 2];
        let mut row = RateRow::default();
        fold_row(&mut row, &same, &late[..1], &[]);
        assert_eq!(row.schedule_rate, None);
    }

    #[test]
    fn open_loop_arithmetic_on_hand_built_records() {
        let t0 = Instant::now();
        let offsets: Vec<Duration> = (0..5).map(Duration::from_secs).collect();
        let outcomes: Vec<RequestOutcome> = [0u64, 100, 200, 500]
            .iter()
            .enumerate()
            .map(|(k, lag)| hand_built(k as u64, 1000, *lag, 0, t0))
            .collect();
        assert!(outcomes.iter().all(|o| o.stream.record.completed));
        let slo = Slo {
            metric: servebench_results::SloMetric::Ttft,
            percentile: 50.0,
            threshold_s: 0.4,
        };
        let mut row = RateRow::default();
        fold_row(&mut row, &offsets, &outcomes, &[slo]);
        let close = |got: Option<f64>, want: f64, what: &str| {
            let g = got.unwrap_or_else(|| panic!("{what}: none"));
            assert!((g - want).abs() < 1e-9, "{what}: {g} != {want}");
        };
        assert_eq!(
            (
                row.requests_scheduled,
                row.requests_sent,
                row.requests_not_sent
            ),
            (5, 4, 1)
        );
        assert_eq!(
            (
                row.requests_completed,
                row.requests_failed,
                row.requests_cut
            ),
            (4, 0, 0)
        );
        // (n − 1) / span of the schedule: 4 gaps over 4 s (n / span would be 1.25).
        close(row.schedule_rate, 1.0, "schedule_rate");
        // From the actual send times: 3 gaps from 0 s to 3.5 s (the intended times give 1.0).
        close(row.achieved_rate, 3.0 / 3.5, "achieved_rate");
        close(row.shortfall, 1.0 - 3.0 / 3.5, "shortfall");
        // TPOT to the stream's end: (0.7 − 0.2) / 2 (to the last token it would be 0.1).
        close(row.tpot.map(|s| s.p50), 0.25, "tpot p50");
        close(row.tpot.map(|s| s.max), 0.25, "tpot max");
        close(row.itl.map(|s| s.avg), 0.1, "itl");
        close(row.ttft.map(|s| s.max), 0.2, "ttft from the send");
        close(
            row.ttft_from_intended.map(|s| s.max),
            0.7,
            "ttft from intended",
        );
        close(
            row.ttft_from_intended.map(|s| s.avg),
            (0.2 + 0.3 + 0.4 + 0.7) / 4.0,
            "ttft_from_intended avg",
        );
        close(row.e2e.map(|s| s.max), 0.4, "e2e to the last token");
        close(
            row.e2e_from_intended.map(|s| s.max),
            0.9,
            "e2e from intended",
        );
        close(row.schedule_lag_max, 0.5, "schedule lag max");
        // Span: first intended send (0 s) to the last stream end (3.5 + 0.7 = 4.2 s).
        assert_eq!(row.output_tokens, 12);
        close(row.completed_rate, 4.0 / 4.2, "completed_rate");
        close(row.output_tps, 12.0 / 4.2, "output_tps");
        // TTFT from intended ≤ 0.4 s: 0.2, 0.3 and 0.4 (at the threshold) are good, 0.7 is not.
        // Goodput = attainment × the schedule's own rate (3/5 × 1.0 req/s): over the schedule's
        // span, the drain after the last arrival apart (issue 24), not 3 good / 4.2 s.
        close(row.goodput, 3.0 / 5.0 * 1.0, "goodput");
        close(row.slo_attainment, 3.0 / 5.0, "slo_attainment");
        // p50 over 5 scheduled arrivals (the unsent one is +∞): 0.2, 0.3, 0.4, 0.7, ∞ → 0.4.
        assert_eq!(row.slo.len(), 1);
        close(row.slo[0].measured, 0.4, "slo p50");
        assert_eq!(row.slo_met, Some(true), "p50 = threshold is met (≤)");
    }
}
