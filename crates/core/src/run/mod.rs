//! The whole run: startup checks, prompt sizing, prefill, hidden warmup, the matrix, the burst
//! layer, and the results.
//!
//! Order (seed spec §3.7): probe the server (engine, limits, metrics, KV budget) and plan the
//! run ([`plan::plan_run`]) → size one prompt per context ([`sizing::size_prompts`]) → the
//! prefill layer ([`Ctx::prefill_layer`]): the standalone prefill profile (which ends the run in
//! prefill-only mode), or an unmeasured decode warm-up request (the server compiles its decode
//! path), the prefill warmup and the scout-only prefill contexts → hidden C=1 decode warmup at
//! the largest runnable context → the primary matrix in seed order (each cell skipped up front
//! with its reason, or run as a sustained cell — or as a request-count cell in request-count
//! mode) → the Burst / E2E matrix when asked for. Both matrices run through one loop
//! ([`Ctx::run_matrix`]). A stop (the `cancel` token) ends the running cell and marks every
//! remaining cell `skipped_user`, saying how the run was stopped ([`crate::events::StopCause`]);
//! finished cells are kept.
//!
//! Core texts never name command-line flags: a failed startup probe is a typed
//! [`RunError::ProbeTimeout`] or [`RunError::ProbeUnanswered`] that the CLI words with its flag.
//!
//! The files, one concern each, in dependency order: [`config`] (what a run is asked to do; it
//! imports nothing from the rest of `run`), `plan` (the plan fixed after the startup probe, and
//! its log lines), `sizing` (one prompt per context, and the context checks of a finished cell),
//! `prefill` (the prefill layer and the unmeasured startup requests), `matrix` (the hidden decode
//! warmup and the loop over a matrix's cells), `open_loop` (the request-rate rows), `assemble`
//! (the results from what the run finished, and the placeholder rows of cells not run), and this
//! one: the entry points, [`RunError`], and the state the phases share (`Ctx`, `Partial`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use servebench_client::timeouts::{format_secs, Limit};
use servebench_client::HttpClient;
use servebench_results::{format_context, CellResult, PrefillRow, Results};
use tokio_util::sync::CancellationToken;

use crate::error::ConfigError;
use crate::events::{EventSink, RunEvent, StopCause};
use crate::host::{HostOptions, HostRun};
use crate::plan::{auto_ready_timeout_s, CellSpec};
use crate::probe::{probe_server, ServerInfo};
use crate::prompt::{
    build_input, make_run_id, PromptInput, RequestOptions, SizedPrompt, Targeting,
};
use crate::resume::Resume;
use crate::telemetry::Telemetry;

mod assemble;
pub mod config;
mod matrix;
mod open_loop;
mod plan;
mod prefill;
mod sizing;

pub use assemble::methodology;
pub use config::{BurstConfig, PrefillConfig, RunConfig, TargetingMode, DEFAULT_BATCH_TIMEOUT_S};

use assemble::prefill_skip_row;
use matrix::MatrixState;
use plan::{emit_plan, kv_budget, log_prefill_plan, log_server, plan_run, Layer, Plan};
use sizing::size_prompts;

/// A run that could not start.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Bad configuration.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The server failed a startup check.
    #[error("{0}")]
    Startup(String),
    /// The server failed the startup probe; the CLI words its [`crate::probe::Hint`] with its
    /// flag.
    #[error(transparent)]
    Probe(#[from] crate::probe::ProbeError),
    /// A startup request got no answer within the probe timeout
    /// ([`servebench_client::timeouts::RequestPolicy::probe`]); the CLI names its flag.
    #[error("probe_timeout: the {what} got no answer within {}: {detail}", format_secs(.limit.as_secs_f64()))]
    ProbeTimeout {
        /// The request, in words.
        what: String,
        /// The probe timeout that passed.
        limit: Duration,
        /// The HTTP error.
        detail: String,
    },
    /// A startup streaming probe (the decode JIT probe, the health probe) was accepted but passed
    /// a deadline; the CLI names the flag of `limit`.
    #[error("the server accepted the {what} but did not answer it: {detail}")]
    ProbeUnanswered {
        /// The request, in words.
        what: String,
        /// The deadline that passed.
        limit: Limit,
        /// The request's failure text (names the limit in words).
        detail: String,
    },
    /// The stop (`cancel`) came while the server was being probed, before any measurement: no
    /// results (break-it round 7: a SIGINT waited for the model list's 10 s timeout).
    #[error("interrupted while probing the server, before any measurement: no results written")]
    Interrupted,
}

/// Everything the phases of a run share.
struct Ctx<'a> {
    cfg: &'a RunConfig,
    client: HttpClient,
    info: ServerInfo,
    run_id: String,
    events: &'a EventSink,
    telemetry: Option<Telemetry>,
    cancel: &'a CancellationToken,
    prompts: BTreeMap<u64, SizedPrompt>,
    kv_budget: u64,
    kv_source: &'static str,
    targeting: Targeting,
    started_at: String,
    plan: Plan,
    resume: Option<Resume>,
}

impl Ctx<'_> {
    fn path(&self) -> &'static str {
        self.cfg.target.endpoint.path()
    }

    fn opts(&self, max_tokens: u64, continuous: bool) -> RequestOptions {
        RequestOptions {
            model: self.info.model.clone(),
            endpoint: self.cfg.target.endpoint,
            max_tokens,
            ignore_eos: self.cfg.ignore_eos,
            temperature: self.cfg.temperature,
            continuous_usage: continuous,
        }
    }

    fn ready_timeout(&self, ctx: u64) -> Duration {
        self.cfg
            .cell_timeout
            .unwrap_or_else(|| Duration::from_secs_f64(auto_ready_timeout_s(ctx)))
    }

    fn input_with_prefix(&self, ctx: u64, prefix: &str) -> Option<PromptInput> {
        let p = self.prompts.get(&ctx)?;
        Some(build_input(
            self.cfg.target.endpoint,
            prefix,
            p.input.padding_chars,
            ctx > 0,
        ))
    }

    /// The kept cell of `spec` in `layer`, when resuming.
    fn kept(&self, spec: CellSpec, layer: Layer) -> Option<&CellResult> {
        self.resume
            .as_ref()
            .and_then(|r| r.cell(spec, layer == Layer::Burst))
    }

    /// Whether the cold prefill row of `ctx` is kept from the resumed file.
    fn kept_prefill(&self, ctx: u64) -> bool {
        self.resume.as_ref().is_some_and(|r| r.has_prefill(ctx))
    }

    /// Why the run was stopped, in words (`Ctrl-C`, `SIGTERM`, `key q in the live view`).
    fn stop_words(&self) -> &'static str {
        self.events
            .skip_control()
            .stop_cause()
            .map_or(UNKNOWN_STOP, StopCause::words)
    }
}

/// How a stop is described when the cause is not known (the cancel token fired without the
/// CLI recording why).
const UNKNOWN_STOP: &str = "Ctrl-C, SIGTERM or SIGHUP";

/// Runs the benchmark and returns the results (partial when `cancel` fired), with the default
/// [`HostOptions`] (diagnostics, P2P check and engine launch; no hardware monitor).
///
/// After every finished cell and prefill row it emits [`RunEvent::Checkpoint`] with the results
/// so far (`run_state: running`), so a consumer can keep them on disk.
pub async fn run(
    cfg: RunConfig,
    events: Arc<EventSink>,
    cancel: CancellationToken,
) -> Result<Results, RunError> {
    run_with_host(cfg, HostOptions::default(), events, cancel).await
}

/// [`run`] with explicit host-evidence settings (hardware monitor, P2P paths, command line).
pub async fn run_with_host(
    cfg: RunConfig,
    host_opts: HostOptions,
    events: Arc<EventSink>,
    cancel: CancellationToken,
) -> Result<Results, RunError> {
    run_resuming(cfg, host_opts, None, events, cancel).await
}

/// What a run has finished so far; checkpointed after every finished cell and prefill row.
#[derive(Debug, Default)]
struct Partial {
    prefill: indexmap::IndexMap<String, PrefillRow>,
    prefill_warm: indexmap::IndexMap<String, PrefillRow>,
    results: Vec<CellResult>,
    burst_results: Vec<CellResult>,
    warmup_context_done: u64,
    rate: crate::rate::RateProgress,
}

impl Partial {
    /// Records a prefill row (and its warm-prefix row), announcing it on `events`.
    fn record_prefill(
        &mut self,
        events: &EventSink,
        ctx: u64,
        cold: PrefillRow,
        warm: Option<PrefillRow>,
    ) {
        events.emit(RunEvent::Prefill {
            context: ctx,
            row: Box::new(cold.clone()),
        });
        events.log(format!(
            "prefill ctx={} {} {}",
            format_context(ctx),
            cold.tok_per_sec
                .map(|t| format!("{t:.0} tok/s"))
                .unwrap_or_else(|| "-".into()),
            cold.status_reason.clone().unwrap_or_default()
        ));
        self.prefill.insert(ctx.to_string(), cold);
        if let Some(w) = warm {
            self.prefill_warm.insert(ctx.to_string(), w);
        }
    }

    /// The finished cells of `layer`.
    fn layer_mut(&mut self, layer: Layer) -> &mut Vec<CellResult> {
        match layer {
            Layer::Primary => &mut self.results,
            Layer::Burst => &mut self.burst_results,
        }
    }
}

/// [`run`], carrying over the kept cells and prefill rows of `resume` (`--resume`): they are not
/// run again and appear unchanged in the results.
///
/// Phases: startup probe and plan, prompt sizing ([`size_prompts`]), the prefill layer
/// ([`Ctx::prefill_layer`]), the hidden decode warmup ([`Ctx::decode_warmup`]), the primary
/// matrix and the Burst / E2E matrix (both [`Ctx::run_matrix`]), then [`assemble::assemble`].
pub async fn run_resuming(
    cfg: RunConfig,
    host_opts: HostOptions,
    resume: Option<Resume>,
    events: Arc<EventSink>,
    cancel: CancellationToken,
) -> Result<Results, RunError> {
    let t_run = Instant::now();
    let started_at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let run_id = make_run_id(cfg.seed);
    let client = HttpClient::new(cfg.target.clone())
        .map_err(|e| RunError::Startup(e.to_string()))?
        .with_policy(cfg.policy);
    // Helper programs (nvidia-smi) run with timeouts, off the async threads.
    let mut host = {
        let (c, e) = (cfg.clone(), events.clone());
        tokio::task::spawn_blocking(move || HostRun::start(&c, &host_opts, &e))
            .await
            .map_err(|e| RunError::Startup(format!("host diagnostics failed: {e}")))?
    };
    events.log(format!(
        "startup server={} run_id={run_id}",
        cfg.target.base_url
    ));
    let info: ServerInfo = tokio::select! {
        r = probe_server(&client, cfg.model.as_deref()) => r?,
        _ = cancel.cancelled() => return Err(RunError::Interrupted),
    };
    log_server(&events, &info);
    let kv = kv_budget(&cfg, &info, &events);
    let telemetry = info
        .metrics_available
        .then(|| Telemetry::new(client.clone(), info.engine));
    let plan = plan_run(&cfg, &info, kv.tokens);
    emit_plan(&events, &cfg, &info, &kv, &plan);
    log_prefill_plan(&events, &cfg, &plan);

    let (targeting, prompts) = tokio::select! {
        r = size_prompts(&client, &cfg, &info, &run_id, &plan.sizing, &events) => r?,
        _ = cancel.cancelled() => (Targeting::Estimate { chars_per_token: 4.0, overhead_tokens: 0.0, source: "none" }, BTreeMap::new()),
    };
    events.log("startup: preparation done (prompts sized)");
    let rc = Ctx {
        cfg: &cfg,
        client,
        info,
        run_id,
        events: &events,
        telemetry,
        cancel: &cancel,
        prompts,
        kv_budget: kv.tokens,
        kv_source: kv.source,
        targeting,
        started_at,
        plan,
        resume,
    };
    let mut st = Partial::default();
    rc.carry_over(&mut st);
    for (x, why) in &rc.plan.prefill.skipped {
        st.record_prefill(&events, *x, prefill_skip_row(why.clone()), None);
        rc.checkpoint(&st, &host);
    }
    rc.prefill_layer(&mut st, &host).await?;
    rc.decode_warmup(&mut st).await;
    let mut m = MatrixState {
        prefill_done: (rc.plan.prefill.integrated.iter().copied())
            .filter(|&x| rc.kept_prefill(x))
            .collect(),
        ..MatrixState::default()
    };
    rc.run_matrix(Layer::Primary, &mut st, &mut m, &host).await;
    if rc.plan.run_burst {
        events.log("burst/e2e layer start");
        rc.run_matrix(Layer::Burst, &mut st, &mut m, &host).await;
    }
    rc.rate_layer(&mut st, &host).await;
    Ok(rc.finish(&st, &mut host, t_run))
}

impl Ctx<'_> {
    /// With a resume: takes over its prefill rows and logs what is kept.
    fn carry_over(&self, st: &mut Partial) {
        let Some(r) = &self.resume else {
            return;
        };
        st.prefill = r.prefill.clone();
        st.prefill_warm = r.prefill_warm.clone();
        let cells = &self.plan.cells;
        let kept = cells
            .iter()
            .filter(|(c, _)| r.cell(*c, false).is_some())
            .count();
        let runnable = cells
            .iter()
            .filter(|(c, skip)| skip.is_none() && r.cell(*c, false).is_none())
            .count();
        let rate_rows = if self.cfg.open_loop.is_some() {
            format!(
                ", {} open-loop rate rows (the rest runs again)",
                r.rate_rows.len()
            )
        } else {
            String::new()
        };
        self.events.log(format!(
            "resume from {} (run {}): keeping {kept} cells and {} prefill rows{rate_rows}; {runnable} cells to run",
            r.from.file,
            r.from.run_id,
            r.prefill.len(),
        ));
    }
}
