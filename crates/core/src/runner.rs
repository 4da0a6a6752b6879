//! The whole run: startup checks, prompt sizing, prefill, hidden warmup, the matrix, the burst
//! layer, and the results.
//!
//! Order (seed spec §3.7): probe the server (engine, limits, metrics, KV budget) → size one
//! prompt per context → standalone prefill profile (`--standalone-prefill`; `--prefill-only`
//! stops here) or an unmeasured decode warm-up request (the server compiles its decode path),
//! the prefill warmup and the scout-only prefill contexts → hidden C=1 decode warmup at the largest runnable context → the matrix in seed order (each cell
//! skipped up front with its reason, or run as a sustained cell — or as a request-count cell with
//! `--request-count`) → the Burst / E2E layer (`--run-burst`). Ctrl-C (the `cancel` token) ends
//! the running cell and marks every remaining cell `skipped_user`; finished cells are kept.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use servebench_results::{
    format_context, CellResult, CellStatus, JsonObject, LayerMethod, Metadata, Methodology,
    PrefillRow, Results, RunState, SCHEMA_VERSION, TOOL_NAME,
};
use tokio_util::sync::CancellationToken;

use crate::burst::{run_burst_cell, BurstJob};
use crate::cache::PromptCache;
use crate::cell::{run_sustained_cell, CellJob, CellSettings};
use crate::error::ConfigError;
use crate::events::{EventSink, PlannedCell, RunEvent, RunPlan, USER_SKIP_REASON};
use crate::failure::FailureKind;
use crate::host::{HostOptions, HostRun};
use crate::plan::{
    auto_ready_timeout_s, matrix_order, pre_skip, CellSpec, PreSkip, TIMEOUT_POLICY,
};
use crate::plausibility::{apply_findings, check_context, SentPrompt};
use crate::prefill::{cold_row, measure_prefill_once, warm_row, PrefillMetric, PrefillSample};
use crate::probe::{probe_server, resolve_kv_budget, ServerInfo};
use crate::prompt::{
    build_input, calibrate, calibration_prefix, decode_prefix, make_run_id, size_estimate,
    size_exact, streaming_payload, template_id, tokenize_count, warmup_prefix, CalibrationCache,
    CalibrationEntry, PromptInput, RequestOptions, SizedPrompt, Targeting,
};
use crate::resume::Resume;
use crate::stream::{run_probe, run_single};
use crate::target::{HttpClient, Target};
use crate::telemetry::Telemetry;
use crate::timeouts::RequestPolicy;

/// How prompts are sized.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TargetingMode {
    /// `/tokenize` when the server has it, else the calibrated estimate.
    #[default]
    Auto,
    /// `/tokenize` only (error when the server lacks it).
    Exact,
    /// Calibrated chars/token estimate even when `/tokenize` exists.
    Estimate,
}

/// The prefill layer's settings (seed spec §2.4).
#[derive(Clone, Debug)]
pub struct PrefillConfig {
    /// `--prefill-contexts`: extra scout-only contexts (integrated mode) or the profile contexts
    /// (standalone mode), tokens. Contexts that do not fit the model are reported as skipped rows.
    pub contexts: Vec<u64>,
    /// `--standalone-prefill`: repeated cold samples per context before decode.
    pub standalone: bool,
    /// `--prefill-only`: the standalone profile, then stop.
    pub only: bool,
    /// `--skip-prefill`: no prefill rows at all.
    pub skip: bool,
    /// `--prefill-duration`: sampling time per standalone context (at least one sample).
    pub duration: Duration,
    /// `--prefill-metric`.
    pub metric: PrefillMetric,
}

impl Default for PrefillConfig {
    fn default() -> Self {
        PrefillConfig {
            contexts: vec![8192, 65536, 131072],
            standalone: false,
            only: false,
            skip: false,
            duration: Duration::from_secs(10),
            metric: PrefillMetric::Client,
        }
    }
}

/// The Burst / E2E layer's settings (seed spec §2.2).
#[derive(Clone, Debug)]
pub struct BurstConfig {
    /// `--request-count N`: request-count cells replace the sustained matrix (0 = sustained).
    pub request_count: u64,
    /// `--warmup-request-count W` for request-count cells.
    pub warmup_request_count: u64,
    /// `--run-burst`: a Burst / E2E matrix after the sustained one.
    pub run_burst: bool,
    /// `--burst-request-count` (0 = max(C, C × per-concurrency)).
    pub burst_request_count: u64,
    /// `--burst-warmup-request-count` (0 = C).
    pub burst_warmup_request_count: u64,
    /// `--burst-requests-per-concurrency` (≥ 1).
    pub burst_requests_per_concurrency: u64,
    /// `--prompt-cache cold|shared`; `None` = the defaults: cold for request-count and Burst /
    /// E2E cells, shared for the sustained matrix (see [`crate::cache`]).
    pub prompt_cache: Option<crate::cache::PromptCache>,
}

impl Default for BurstConfig {
    fn default() -> Self {
        BurstConfig {
            request_count: 0,
            warmup_request_count: 0,
            run_burst: false,
            burst_request_count: 0,
            burst_warmup_request_count: 0,
            burst_requests_per_concurrency: 5,
            prompt_cache: None,
        }
    }
}

/// Everything a run needs. Built by the CLI from flags.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// The server.
    pub target: Target,
    /// Model to request; `None` = the first id of `/v1/models`.
    pub model: Option<String>,
    /// Concurrency levels C.
    pub concurrency: Vec<u64>,
    /// Contexts, tokens.
    pub contexts: Vec<u64>,
    /// Measured window per cell.
    pub duration: Duration,
    /// `max_tokens` of decode requests.
    pub max_tokens: u64,
    /// Send `ignore_eos: true`.
    pub ignore_eos: bool,
    /// Sampling temperature (None = server default).
    pub temperature: Option<f64>,
    /// Hidden C=1 warmup length (zero = none).
    pub decode_warmup: Duration,
    /// Readiness timeout override (None = 60/120/180 s policy).
    pub cell_timeout: Option<Duration>,
    /// Readiness must hold this long before the window opens.
    pub stable_window: Duration,
    /// Pause between cells (lets the server drain).
    pub cell_pause: Duration,
    /// `--kv-budget`: KV budget, tokens (0 = detect from the server).
    pub kv_budget: u64,
    /// `--dcp-size`: context-parallel multiplier for a per-rank KV budget (0 = detect).
    pub dcp_size: u64,
    /// Show raw values of capacity-limited cells in reports.
    pub show_capacity_limited_values: bool,
    /// `--seed`: reproducible run id and prompts.
    pub seed: Option<u64>,
    /// Prompt sizing mode.
    pub targeting: TargetingMode,
    /// Size of the calibration probe, tokens (capped at the largest context).
    pub calibration_context: u64,
    /// Chars/token cache.
    pub calibration_cache: CalibrationCache,
    /// Prefill layer.
    pub prefill: PrefillConfig,
    /// Burst / request-count layer.
    pub burst: BurstConfig,
    /// Snapshot of the arguments for `startup_diagnostics.args`.
    pub args_snapshot: Value,
    /// Timeouts on every wait and the HTTP 429 retry policy ([`crate::timeouts`]).
    pub policy: RequestPolicy,
}

/// A run that could not start.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Bad configuration.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The server failed a startup check.
    #[error("{0}")]
    Startup(String),
}

/// Prompt of the decode JIT probe (a short streaming request before anything is measured).
const JIT_PROBE_PROMPT: &str = "Count from 1 to 20.";

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

    /// The decode JIT probe (a startup probe: first byte and first token within
    /// `--probe-timeout`). A timeout is fatal: a server that cannot answer a 64-token request
    /// would only make every cell wait; other failures are logged (the cells report them).
    async fn jit_probe(&self, what: &str, body: bytes::Bytes) -> Result<(), RunError> {
        let out = run_probe(&self.client, self.path(), body, self.cancel).await;
        match (out.record.error, out.facts.kind) {
            (Some(e), Some(k)) if k.is_timeout() && !self.cancel.is_cancelled() => {
                self.events.log(format!("{what} failed: {e}"));
                Err(RunError::Startup(format!(
                    "the server accepted the {what} but did not answer it: {e}"
                )))
            }
            (Some(e), _) if !self.cancel.is_cancelled() => {
                self.events.log(format!("warning: {what} failed: {e}"));
                Ok(())
            }
            _ => {
                self.events.log(format!("{what} done"));
                Ok(())
            }
        }
    }

    /// One unrecorded streaming request (warmups). Errors are logged, not fatal.
    async fn unrecorded(&self, what: &str, body: bytes::Bytes) {
        let out = run_single(&self.client, self.path(), body, self.cancel).await;
        match out.record.error {
            Some(e) if !self.cancel.is_cancelled() => {
                self.events.log(format!("{what} failed: {e}"))
            }
            _ => self.events.log(format!("{what} done")),
        }
    }

    /// A measured prefill request for `ctx` with `prefix`.
    async fn prefill_sample(&self, ctx: u64, prefix: &str) -> Result<PrefillSample, String> {
        let input = self
            .input_with_prefix(ctx, prefix)
            .ok_or_else(|| "no prompt for this context".to_string())?;
        let body = streaming_payload(&self.opts(1, false), &input);
        let validate = self.cfg.prefill.metric.validates() && self.telemetry.is_some();
        measure_prefill_once(
            &self.client,
            self.path(),
            body,
            self.telemetry.as_ref(),
            validate,
            self.cancel,
        )
        .await
    }

    /// Cold row + warm row for one context from one cold request (`prefix`) and its repeat.
    async fn scout_rows(&self, ctx: u64, prefix: &str, method: &str) -> (PrefillRow, PrefillRow) {
        let cold = self.prefill_sample(ctx, prefix).await;
        let (samples, failures): (Vec<PrefillSample>, Vec<String>) = match cold {
            Ok(s) => (vec![s], vec![]),
            Err(e) => (vec![], vec![e]),
        };
        let row = cold_row(&samples, &failures, method, self.cfg.prefill.metric);
        let warm = if samples.is_empty() {
            warm_row(Err(&"the cold request failed".to_string()))
        } else {
            let w = self.prefill_sample(ctx, prefix).await;
            warm_row(w.as_ref())
        };
        (row, warm)
    }
}

fn prefill_skip_row(reason: String) -> PrefillRow {
    PrefillRow {
        method: "skipped".into(),
        status: Some(CellStatus::SkippedContext),
        status_reason: Some(reason),
        ..Default::default()
    }
}

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
}

/// What the results assembly needs besides [`Partial`] (fixed once the prompts are sized).
#[derive(Clone, Copy)]
struct Fixed<'a> {
    cfg: &'a RunConfig,
    targeting: &'a Targeting,
    kv_source: &'static str,
    started_at: &'a str,
    events: &'a EventSink,
    standalone: bool,
    request_count_mode: bool,
    primary_mode: &'static str,
    run_burst: bool,
    resume: Option<&'a Resume>,
}

/// Emits the results so far as a [`RunEvent::Checkpoint`] (`run_state: running`; the run's
/// hardware summary comes only with the final results).
fn checkpoint(rc: &Ctx<'_>, fx: &Fixed<'_>, st: &Partial, host: &HostRun) {
    rc.events.emit(RunEvent::Checkpoint(Box::new(assemble(
        rc,
        fx,
        st,
        RunState::Running,
        host,
        JsonObject::new(),
    ))));
}

/// [`run`], carrying over the kept cells and prefill rows of `resume` (`--resume`): they are not
/// run again and appear unchanged in the results.
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
    let info: ServerInfo = probe_server(&client, cfg.model.as_deref())
        .await
        .map_err(|e| RunError::Startup(e.to_string()))?;
    events.log(format!("benchmark start engine={}", info.engine_name));
    events.log(format!(
        "startup engine {}{} models={:?}",
        info.engine_name,
        info.engine_version
            .as_deref()
            .map(|v| format!(" {v}"))
            .unwrap_or_default(),
        info.models
    ));
    events.log(format!("startup model {}", info.model));
    if let Some(len) = info.max_model_len {
        events.log(format!(
            "startup model context length: {} tokens",
            thousands(len)
        ));
    }
    for w in &info.warnings {
        events.warn(format!("startup warning: {w}"));
    }
    if info.metrics_available {
        events.log(format!(
            "startup metrics: {} /metrics in use",
            info.engine_name
        ));
    } else {
        events.warn(format!(
            "startup warning: metrics disabled: {}",
            info.metrics_warning
        ));
    }
    let local_cp = if info.engine == servebench_metrics::Engine::Vllm
        && cfg.dcp_size == 0
        && cfg.target.is_loopback()
    {
        cfg.target.port().and_then(crate::probe::local_vllm_cp_size)
    } else {
        None
    };
    let kv = resolve_kv_budget(&info, cfg.kv_budget, cfg.dcp_size, local_cp);
    events.log(format!("startup {}", kv.event));
    if let Some(m) = info.max_running_requests {
        events.log(format!("startup max running requests: {m}"));
    }
    let kv_budget = kv.tokens;
    let telemetry = info
        .metrics_available
        .then(|| Telemetry::new(client.clone(), info.engine));

    // Plan.
    let request_count_mode = cfg.burst.request_count > 0;
    let burst_cache = cfg.burst.prompt_cache.unwrap_or(PromptCache::Cold);
    let sustained_cache = cfg.burst.prompt_cache.unwrap_or(PromptCache::Shared);
    let cells: Vec<(CellSpec, Option<PreSkip>)> = if cfg.prefill.only {
        Vec::new()
    } else {
        matrix_order(&cfg.concurrency, &cfg.contexts)
            .into_iter()
            .map(|c| (c, pre_skip_cell(c, &cfg, &info, kv_budget)))
            .collect()
    };
    let mut decode_contexts: Vec<u64> = cells
        .iter()
        .filter(|(_, s)| s.is_none())
        .map(|(c, _)| c.context)
        .collect();
    decode_contexts.sort_unstable();
    decode_contexts.dedup();
    let warmup_ctx = if cfg.decode_warmup.is_zero() || cfg.prefill.only {
        None
    } else {
        cfg.contexts
            .iter()
            .copied()
            .filter(|&x| {
                pre_skip_cell(
                    CellSpec {
                        concurrency: 1,
                        context: x,
                    },
                    &cfg,
                    &info,
                    kv_budget,
                )
                .is_none()
            })
            .max()
    };
    events.emit(RunEvent::Plan(Box::new(RunPlan {
        engine: info.engine_name.clone(),
        engine_version: info.engine_version.clone(),
        model: info.model.clone(),
        url: cfg.target.base_url.clone(),
        kv_budget_tokens: kv_budget,
        kv_budget_source: kv.source.to_string(),
        max_model_len: info.max_model_len,
        window_s: cfg.duration.as_secs_f64(),
        pause_s: cfg.cell_pause.as_secs_f64(),
        layer: if request_count_mode {
            "request-count"
        } else {
            "sustained"
        }
        .into(),
        warmup_s: warmup_ctx.map(|_| cfg.decode_warmup.as_secs_f64()),
        burst_layer: cfg.burst.run_burst && !request_count_mode && !cfg.prefill.only,
        cells: cells
            .iter()
            .enumerate()
            .map(|(i, (c, skip))| PlannedCell {
                index: i + 1,
                concurrency: c.concurrency,
                context: c.context,
                skip_reason: skip.as_ref().map(|s| match s {
                    PreSkip::Context { reason } | PreSkip::Capacity { reason, .. } => {
                        reason.clone()
                    }
                }),
                expected_s: (skip.is_none() && !request_count_mode)
                    .then(|| (cfg.stable_window + cfg.duration + cfg.cell_pause).as_secs_f64()),
            })
            .collect(),
    })));
    // Prefill contexts: a prefill request is the prompt plus one output token.
    let fits = |x: u64| info.max_model_len.is_none_or(|m| x < m);
    let standalone = cfg.prefill.standalone || cfg.prefill.only;
    let mut prefill_skipped: Vec<(u64, String)> = Vec::new();
    let mut requested_prefill: Vec<u64> = Vec::new();
    if !cfg.prefill.skip {
        for &x in crate::plan::dedup_keep_order(&cfg.prefill.contexts)
            .iter()
            .filter(|&&x| x > 0)
        {
            if fits(x) {
                requested_prefill.push(x);
            } else {
                prefill_skipped.push((
                    x,
                    format!(
                        "prefill context {} does not fit the model's max_model_len {}",
                        format_context(x),
                        info.max_model_len.unwrap_or(0)
                    ),
                ));
            }
        }
    }
    if standalone && requested_prefill.is_empty() && !cfg.prefill.skip {
        if let Some(m) = info.max_model_len {
            requested_prefill.push(m.saturating_sub(64).max(1));
        }
    }
    let scout_only: Vec<u64> = if standalone || cfg.prefill.skip {
        Vec::new()
    } else {
        requested_prefill
            .iter()
            .copied()
            .filter(|x| !decode_contexts.contains(x))
            .collect()
    };
    let integrated: Vec<u64> = if standalone || cfg.prefill.skip {
        Vec::new()
    } else {
        decode_contexts.iter().copied().filter(|&x| x > 0).collect()
    };
    let mut sizing: Vec<u64> = decode_contexts.clone();
    sizing.extend(warmup_ctx);
    sizing.extend(requested_prefill.iter().copied());
    sizing.sort_unstable();
    sizing.dedup();
    if cfg.prefill.skip {
        events.log("startup prefill tests: skipped");
    } else if standalone {
        events.log(format!(
            "startup prefill tests: standalone cold profile at {}",
            requested_prefill
                .iter()
                .map(|&x| format_context(x))
                .collect::<Vec<_>>()
                .join(",")
        ));
    } else {
        events.log(format!(
            "startup prefill tests: one cold request before the first decode cell of each context{}",
            if scout_only.is_empty() {
                String::new()
            } else {
                format!(
                    ", plus cold requests alone at {}",
                    scout_only
                        .iter()
                        .map(|&x| format_context(x))
                        .collect::<Vec<_>>()
                        .join(",")
                )
            }
        ));
    }
    for (x, why) in &prefill_skipped {
        events.log(format!(
            "startup prefill context {} skipped: {why}",
            format_context(*x)
        ));
    }

    // Prompts.
    let (targeting, prompts) = tokio::select! {
        r = size_prompts(&client, &cfg, &info, &run_id, &sizing, &events) => r?,
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
        kv_budget,
    };

    let primary_mode = if request_count_mode {
        "request-count"
    } else {
        "duration"
    };
    let run_burst = cfg.burst.run_burst && !request_count_mode && !cfg.prefill.only;
    let fx = Fixed {
        cfg: &cfg,
        targeting: &targeting,
        kv_source: kv.source,
        started_at: &started_at,
        events: &events,
        standalone,
        request_count_mode,
        primary_mode,
        run_burst,
        resume: resume.as_ref(),
    };
    let mut st = Partial::default();
    let kept_prefill = |x: u64| resume.as_ref().is_some_and(|r| r.has_prefill(x));
    if let Some(r) = &resume {
        st.prefill = r.prefill.clone();
        st.prefill_warm = r.prefill_warm.clone();
        let runnable = cells
            .iter()
            .filter(|(c, skip)| skip.is_none() && r.cell(*c, false).is_none())
            .count();
        events.log(format!(
            "resume from {} (run {}): keeping {} cells and {} prefill rows; {} cells to run",
            r.from.file,
            r.from.run_id,
            cells
                .iter()
                .filter(|(c, _)| r.cell(*c, false).is_some())
                .count(),
            r.prefill.len(),
            runnable
        ));
    }
    for (x, why) in &prefill_skipped {
        st.record_prefill(&events, *x, prefill_skip_row(why.clone()), None);
        checkpoint(&rc, &fx, &st, &host);
    }

    // 1. Prefill before decode.
    let jit_body = || {
        let input = match cfg.target.endpoint {
            crate::target::Endpoint::Chat => PromptInput {
                value: json!([{"role": "user", "content": JIT_PROBE_PROMPT}]),
                padding_chars: 0,
            },
            crate::target::Endpoint::Completions => PromptInput {
                value: Value::String(format!("{JIT_PROBE_PROMPT}\n")),
                padding_chars: 0,
            },
        };
        streaming_payload(
            &RequestOptions {
                ignore_eos: false,
                ..rc.opts(64, false)
            },
            &input,
        )
    };
    if standalone && !requested_prefill.is_empty() && !cancel.is_cancelled() {
        rc.jit_probe("prefill warmup A (short decode)", jit_body())
            .await?;
        let smallest = requested_prefill.iter().copied().min().unwrap_or(0);
        if let Some(input) = rc.input_with_prefix(smallest, &format!("[WARMUP_{}]", rc.run_id)) {
            rc.unrecorded(
                "prefill warmup B (prefill)",
                streaming_payload(&rc.opts(1, false), &input),
            )
            .await;
        }
        for &x in &requested_prefill {
            if cancel.is_cancelled() {
                break;
            }
            if kept_prefill(x) {
                continue;
            }
            let t0 = Instant::now();
            let (mut samples, mut failures) = (Vec::new(), Vec::new());
            let mut r = 0u64;
            while !cancel.is_cancelled() && (r == 0 || t0.elapsed() < cfg.prefill.duration) {
                r += 1;
                match rc
                    .prefill_sample(x, &format!("[BENCH_{}_CTX_{x}_R{r:04}]", rc.run_id))
                    .await
                {
                    Ok(s) => samples.push(s),
                    Err(e) if !cancel.is_cancelled() => failures.push(e),
                    Err(_) => {}
                }
            }
            if cancel.is_cancelled() {
                break;
            }
            let method = if cfg.prefill.metric == PrefillMetric::Prometheus {
                "prometheus"
            } else {
                "client"
            };
            let cold = cold_row(&samples, &failures, method, cfg.prefill.metric);
            let warm = match samples.last() {
                Some(_) => {
                    let w = rc
                        .prefill_sample(x, &format!("[BENCH_{}_CTX_{x}_R{r:04}]", rc.run_id))
                        .await;
                    warm_row(w.as_ref())
                }
                None => warm_row(Err(&"every cold sample failed".to_string())),
            };
            st.record_prefill(&events, x, cold, Some(warm));
            checkpoint(&rc, &fx, &st, &host);
        }
    } else if !cfg.prefill.only && !cancel.is_cancelled() {
        rc.jit_probe(
            "decode warm-up request (unmeasured; lets the server compile its decode path first)",
            jit_body(),
        )
        .await?;
        let first_prefill = integrated.iter().chain(scout_only.iter()).copied().min();
        if let Some(smallest) = first_prefill {
            let wctx = smallest.min(8192);
            let wctx = if rc.prompts.contains_key(&wctx) {
                wctx
            } else {
                smallest
            };
            if let Some(input) =
                rc.input_with_prefix(wctx, &format!("[WARMUP_{}_PREFILL]", rc.run_id))
            {
                rc.unrecorded(
                    "prefill warmup",
                    streaming_payload(&rc.opts(1, false), &input),
                )
                .await;
            }
        }
        for &x in &scout_only {
            if cancel.is_cancelled() {
                break;
            }
            if kept_prefill(x) {
                continue;
            }
            let (cold, warm) = rc
                .scout_rows(x, &decode_prefix(&rc.run_id, x), "scout_only")
                .await;
            st.record_prefill(&events, x, cold, Some(warm));
            checkpoint(&rc, &fx, &st, &host);
        }
    }

    // 2. Hidden decode warmup.
    let settings = CellSettings {
        path: rc.path(),
        duration: cfg.duration,
        stable_window: cfg.stable_window,
        max_tokens: cfg.max_tokens,
        ignore_eos: cfg.ignore_eos,
    };
    let decode_opts = rc.opts(cfg.max_tokens, true);
    let burst_opts = rc.opts(cfg.max_tokens, false);
    let scout_opts = rc.opts(1, false);
    // A resume with nothing left to measure needs no warmup.
    let nothing_to_run = resume.as_ref().is_some_and(|r| {
        cells.iter().all(|(c, skip)| {
            skip.is_some()
                || (r.cell(*c, false).is_some() && (!run_burst || r.cell(*c, true).is_some()))
        })
    });
    let warmup_ctx = warmup_ctx.filter(|_| !nothing_to_run);
    if let (Some(wctx), false) = (warmup_ctx, cancel.is_cancelled()) {
        if let Some(input) = rc.input_with_prefix(wctx, &warmup_prefix(&rc.run_id, wctx)) {
            events.log("decode warmup start");
            events.log(format!(
                "decode warmup start C=1 ctx={} {}s",
                format_context(wctx),
                cfg.decode_warmup.as_secs_f64()
            ));
            let wsettings = CellSettings {
                duration: cfg.decode_warmup,
                ..settings.clone()
            };
            let job = CellJob {
                spec: CellSpec {
                    concurrency: 1,
                    context: wctx,
                },
                decode_body: streaming_payload(&decode_opts, &input),
                scout_body: (wctx > 0).then(|| streaming_payload(&scout_opts, &input)),
                ready_timeout: rc.ready_timeout(wctx),
                index: 0,
                total: cells.len(),
                warmup: true,
                cold_run_id: None,
            };
            let cell_cancel = events.skip_control().begin(&cancel);
            let out = run_sustained_cell(
                &rc.client,
                &wsettings,
                job,
                &events,
                rc.telemetry.as_ref(),
                &cell_cancel.token,
            )
            .await;
            if cell_cancel.skipped(&cancel) {
                events.log("decode warmup skipped by the user");
            }
            drop(cell_cancel);
            if !out.interrupted {
                events.log(format!(
                    "decode warmup done C=1 ctx={} ({}{})",
                    format_context(wctx),
                    out.result.status.as_str(),
                    if out.result.status_reason.is_empty() {
                        String::new()
                    } else {
                        format!(": {}", out.result.status_reason)
                    }
                ));
                if out.result.status == CellStatus::Ok {
                    st.warmup_context_done = wctx;
                }
            }
            pause(cfg.cell_pause, &cancel).await;
        }
    }

    // 3. The matrix (sustained, or request-count cells as the primary layer).
    let total = cells.len();
    let mut prefill_done: Vec<u64> = integrated
        .iter()
        .copied()
        .filter(|&x| kept_prefill(x))
        .collect();
    // Set when a health probe after a timed-out cell got no answer: the remaining cells are
    // not run (an unattended run against a dead server ends instead of timing out every cell).
    let mut server_gone: Option<String> = None;
    // Prompt tokens of each context's cold prefill sample (for the context checks).
    let mut cold_prompt: BTreeMap<u64, u64> = BTreeMap::new();
    for (i, (spec, skip)) in cells.iter().enumerate() {
        let index = i + 1;
        let kept = resume.as_ref().and_then(|r| r.cell(*spec, false));
        let mut result = if let Some(k) = kept {
            // A kept cell whose context's prefill row was not kept (it failed): measure it now.
            if integrated.contains(&spec.context)
                && !prefill_done.contains(&spec.context)
                && rc.prompts.contains_key(&spec.context)
                && !cancel.is_cancelled()
            {
                prefill_done.push(spec.context);
                let (cold, warm) = rc
                    .scout_rows(
                        spec.context,
                        &decode_prefix(&rc.run_id, spec.context),
                        "integrated_scout",
                    )
                    .await;
                st.record_prefill(&events, spec.context, cold, Some(warm));
                checkpoint(&rc, &fx, &st, &host);
            }
            events.log(format!(
                "cell kept from {} C={} ctx={}: {}",
                resume.as_ref().map_or("", |r| r.from.file.as_str()),
                spec.concurrency,
                format_context(spec.context),
                k.status.as_str()
            ));
            k.clone()
        } else if cancel.is_cancelled() {
            skipped(
                *spec,
                CellStatus::SkippedUser,
                "not run: the run was interrupted by the user (Ctrl-C, SIGTERM or SIGHUP)".into(),
                None,
                primary_mode,
            )
        } else if let (Some(why), None) = (&server_gone, skip) {
            server_gone_result(*spec, why, primary_mode)
        } else if let Some(s) = skip {
            let r = skip_result(*spec, s, primary_mode);
            events.log(format!(
                "cell skipped C={} ctx={}: {}",
                spec.concurrency,
                format_context(spec.context),
                r.status_reason
            ));
            r
        } else if let Some(p) = rc.prompts.get(&spec.context) {
            // The first cell of a context takes the measured (integrated) prefill sample itself;
            // the cell's own scout then only re-primes the cache for later cells.
            let mut scout_body =
                (spec.context > 0).then(|| streaming_payload(&scout_opts, &p.input));
            if integrated.contains(&spec.context) && !prefill_done.contains(&spec.context) {
                prefill_done.push(spec.context);
                let (cold, warm) = rc
                    .scout_rows(
                        spec.context,
                        &decode_prefix(&rc.run_id, spec.context),
                        "integrated_scout",
                    )
                    .await;
                if cold.status == Some(CellStatus::Ok) {
                    scout_body = None;
                }
                if let Some(t) = cold.prompt_tokens {
                    cold_prompt.insert(spec.context, t);
                }
                st.record_prefill(&events, spec.context, cold, Some(warm));
                checkpoint(&rc, &fx, &st, &host);
            }
            let cell_cancel = events.skip_control().begin(&cancel);
            let mut r = if request_count_mode {
                let job = BurstJob {
                    spec: *spec,
                    body: streaming_payload(&burst_opts, &p.input),
                    scout_body,
                    request_count: cfg.burst.request_count,
                    warmup_count: cfg.burst.warmup_request_count,
                    mode: "request-count",
                    cold_run_id: (burst_cache == PromptCache::Cold).then(|| rc.run_id.clone()),
                    index,
                    total,
                };
                let out = run_burst_cell(
                    &rc.client,
                    rc.path(),
                    job,
                    &events,
                    rc.telemetry.as_ref(),
                    &cell_cancel.token,
                )
                .await;
                let mut r = out.result;
                host.attach_records(&mut r, &out.records, &events);
                r
            } else {
                let job = CellJob {
                    spec: *spec,
                    decode_body: streaming_payload(&decode_opts, &p.input),
                    scout_body,
                    ready_timeout: rc.ready_timeout(spec.context),
                    index,
                    total,
                    warmup: false,
                    cold_run_id: (sustained_cache == PromptCache::Cold).then(|| rc.run_id.clone()),
                };
                let out = run_sustained_cell(
                    &rc.client,
                    &settings,
                    job,
                    &events,
                    rc.telemetry.as_ref(),
                    &cell_cancel.token,
                )
                .await;
                let mut r = out.result;
                host.attach(&mut r, out.window, &events);
                r
            };
            user_skip(&mut r, &cell_cancel, &cancel, &events);
            if r.prompt_tokens.is_none() {
                r.prompt_tokens = p.exact_tokens;
            }
            let cold = cold_prompt.get(&spec.context).copied();
            context_checks(&mut r, spec.context, p, &targeting, cold, &events);
            let prompts = if request_count_mode {
                burst_cache
            } else {
                sustained_cache
            };
            crate::cache::record(&mut r, prompts);
            r
        } else {
            skipped(
                *spec,
                CellStatus::Error,
                "no prompt could be built for this context".into(),
                None,
                primary_mode,
            )
        };
        if result.status == CellStatus::SkippedUser && result.status_reason.is_empty() {
            result.status_reason = "skipped by the user".into();
        }
        let more = index < total || (cfg.burst.run_burst && !request_count_mode);
        if more && server_gone.is_none() && !cancel.is_cancelled() && timed_out(&result) {
            if let Err(RunError::Startup(e)) = rc
                .jit_probe("health probe after a timed-out cell", jit_body())
                .await
            {
                events.log(format!(
                    "the server stopped answering; the remaining cells are not run: {e}"
                ));
                server_gone = Some(e);
            }
        }
        events.emit(RunEvent::CellFinished {
            index,
            result: Box::new(result.clone()),
        });
        let ran = kept.is_none() && !result.status.is_skipped();
        st.results.push(result);
        checkpoint(&rc, &fx, &st, &host);
        if ran && index < total {
            pause(cfg.cell_pause, &cancel).await;
        }
    }

    // 4. Burst / E2E layer after the sustained matrix.
    if run_burst {
        events.log("burst/e2e layer start");
        for (i, (spec, skip)) in cells.iter().enumerate() {
            let index = i + 1;
            let c = spec.concurrency;
            let n = if cfg.burst.burst_request_count > 0 {
                cfg.burst.burst_request_count
            } else {
                c.max(c * cfg.burst.burst_requests_per_concurrency.max(1))
            };
            let w = if cfg.burst.burst_warmup_request_count > 0 {
                cfg.burst.burst_warmup_request_count
            } else {
                c
            };
            let kept = resume.as_ref().and_then(|r| r.cell(*spec, true));
            let result = if let Some(k) = kept {
                k.clone()
            } else if cancel.is_cancelled() {
                skipped(
                    *spec,
                    CellStatus::SkippedUser,
                    "not run: the run was interrupted by the user (Ctrl-C, SIGTERM or SIGHUP)"
                        .into(),
                    None,
                    "burst-e2e",
                )
            } else if let (Some(why), None) = (&server_gone, skip) {
                server_gone_result(*spec, why, "burst-e2e")
            } else if let Some(s) = skip {
                skip_result(*spec, s, "burst-e2e")
            } else if let Some(p) = rc.prompts.get(&spec.context) {
                let job = BurstJob {
                    spec: *spec,
                    body: streaming_payload(&burst_opts, &p.input),
                    scout_body: (spec.context > 0)
                        .then(|| streaming_payload(&scout_opts, &p.input)),
                    request_count: n,
                    warmup_count: w,
                    mode: "burst-e2e",
                    cold_run_id: (burst_cache == PromptCache::Cold).then(|| rc.run_id.clone()),
                    index,
                    total,
                };
                let cell_cancel = events.skip_control().begin(&cancel);
                let out = run_burst_cell(
                    &rc.client,
                    rc.path(),
                    job,
                    &events,
                    rc.telemetry.as_ref(),
                    &cell_cancel.token,
                )
                .await;
                let mut r = out.result;
                user_skip(&mut r, &cell_cancel, &cancel, &events);
                host.attach_records(&mut r, &out.records, &events);
                r.request_count_target = n;
                let cold = cold_prompt.get(&spec.context).copied();
                context_checks(&mut r, spec.context, p, &targeting, cold, &events);
                crate::cache::record(&mut r, burst_cache);
                r
            } else {
                skipped(
                    *spec,
                    CellStatus::Error,
                    "no prompt could be built for this context".into(),
                    None,
                    "burst-e2e",
                )
            };
            let ran = kept.is_none() && !result.status.is_skipped();
            events.emit(RunEvent::CellFinished {
                index,
                result: Box::new(result.clone()),
            });
            st.burst_results.push(result);
            checkpoint(&rc, &fx, &st, &host);
            if ran && index < total {
                pause(
                    Duration::from_secs(1).min(cfg.cell_pause.max(Duration::from_millis(0))),
                    &cancel,
                )
                .await;
            }
        }
    }
    let interrupted = cancel.is_cancelled();
    if interrupted {
        events.log("run interrupted by the user: partial results");
    }
    events.log(format!(
        "benchmark done in {:.1}s",
        t_run.elapsed().as_secs_f64()
    ));
    let state = if interrupted {
        RunState::Interrupted
    } else {
        RunState::Complete
    };
    let hardware = host.finish();
    Ok(assemble(&rc, &fx, &st, state, &host, hardware))
}

/// The results of a run from what it finished so far (`st`), in state `state`.
fn assemble(
    rc: &Ctx<'_>,
    fx: &Fixed<'_>,
    st: &Partial,
    state: RunState,
    host: &HostRun,
    hardware_run_summary: JsonObject,
) -> Results {
    let Fixed {
        cfg,
        targeting,
        kv_source,
        started_at,
        events,
        standalone,
        request_count_mode,
        primary_mode,
        run_burst,
        resume,
    } = *fx;
    let Partial {
        prefill,
        prefill_warm,
        results,
        burst_results,
        warmup_context_done,
    } = st;
    let interrupted = state == RunState::Interrupted;

    // Results.
    let table = |rs: &[CellResult]| {
        let mut t: indexmap::IndexMap<String, indexmap::IndexMap<String, f64>> =
            indexmap::IndexMap::new();
        for r in rs.iter().filter(|r| r.status == CellStatus::Ok) {
            if let Some(v) = r.aggregate_tps {
                t.entry(r.context_tokens.to_string())
                    .or_default()
                    .insert(r.concurrency.to_string(), v);
            }
        }
        t
    };
    let summary_table = table(results);
    let burst_summary_table = table(burst_results);
    let cpt = match targeting {
        Targeting::Estimate {
            chars_per_token, ..
        } if *chars_per_token > 0.0 => Some(*chars_per_token),
        _ => None,
    };
    let info = &rc.info;
    let prefill_mode = if cfg.prefill.skip {
        "skipped"
    } else if standalone {
        "standalone_cold"
    } else {
        "integrated_decode_scout"
    };
    let metadata = Metadata {
        version: env!("CARGO_PKG_VERSION").into(),
        tool: TOOL_NAME.into(),
        engine: info.engine_name.clone(),
        engine_version: info.engine_version.clone(),
        model: info.model.clone(),
        server: cfg.target.server_label.clone(),
        base_url: cfg.target.base_url.clone(),
        endpoint: cfg.target.endpoint.as_str().into(),
        timestamp: chrono::Local::now()
            .format("%Y-%m-%dT%H:%M:%S%.6f")
            .to_string(),
        started_at: Some(started_at.to_string()),
        decode_mode: primary_mode.into(),
        primary_decode_layer: if request_count_mode {
            "burst_e2e_decode"
        } else {
            "sustained_decode"
        }
        .into(),
        duration_per_test: cfg.duration.as_secs_f64(),
        request_count: cfg.burst.request_count,
        warmup_request_count: cfg.burst.warmup_request_count,
        run_burst: cfg.burst.run_burst,
        prefill_mode: prefill_mode.into(),
        standalone_prefill: cfg.prefill.standalone,
        prefill_only: cfg.prefill.only,
        skip_prefill: cfg.prefill.skip,
        prefill_contexts: Some(cfg.prefill.contexts.clone()),
        prefill_metric: Some(
            match cfg.prefill.metric {
                PrefillMetric::Client => "client",
                PrefillMetric::Auto => "auto",
                PrefillMetric::Prometheus => "prometheus",
            }
            .into(),
        ),
        burst_e2e_status: if run_burst {
            "enabled"
        } else {
            "not_run_use_--run-burst"
        }
        .into(),
        burst_request_count: cfg.burst.burst_request_count,
        burst_warmup_request_count: cfg.burst.burst_warmup_request_count,
        burst_requests_per_concurrency: cfg.burst.burst_requests_per_concurrency,
        decode_warmup_seconds: cfg.decode_warmup.as_secs_f64(),
        decode_warmup_context: *warmup_context_done,
        decode_warmup_concurrency: u64::from(!cfg.decode_warmup.is_zero()),
        cell_warmup_timeout_seconds: cfg.cell_timeout.map(|d| d.as_secs_f64()).unwrap_or(0.0),
        cell_warmup_timeout_policy: TIMEOUT_POLICY.into(),
        stable_window_seconds: Some(cfg.stable_window.as_secs_f64()),
        show_capacity_limited_values: cfg.show_capacity_limited_values,
        max_tokens: cfg.max_tokens,
        temperature: cfg.temperature,
        ignore_eos: cfg.ignore_eos,
        max_total_tokens: rc.kv_budget,
        kv_budget_source: Some(kv_source.into()),
        max_running_requests: info.max_running_requests,
        dcp_size: cfg.dcp_size,
        metrics_available: info.metrics_available,
        metrics_warning: info.metrics_warning.clone(),
        concurrency_levels: cfg.concurrency.clone(),
        context_lengths: cfg.contexts.clone(),
        max_model_len: info.max_model_len,
        prompt_targeting: targeting.label().into(),
        chars_per_token: cpt,
        run_id: rc.run_id.clone(),
        seed: cfg.seed,
        interrupted,
        startup_diagnostics_available: true,
        nvidia_p2p_override_effective: host.p2p_effective(),
        p2pmark_status: "not_run".into(),
        amd_fabric_status: "not_run".into(),
    };
    let not_run = || {
        let mut m = JsonObject::new();
        m.insert("status".into(), Value::String("not_run".into()));
        m.insert(
            "reason".into(),
            Value::String(
                "servebench has no fabric micro-benchmark yet (docs/interconnect-check.md)".into(),
            ),
        );
        m
    };
    let has_ok = |rs: &[CellResult]| rs.iter().any(|r| r.status == CellStatus::Ok);
    let resumed_from = resume.map(|r| {
        let mut from = r.from.clone();
        let kept = |list: &[CellResult], burst: bool| {
            list.iter()
                .filter(|c| {
                    r.cell(
                        CellSpec {
                            concurrency: c.concurrency,
                            context: c.context_tokens,
                        },
                        burst,
                    )
                    .is_some_and(|k| k == *c)
                })
                .map(|c| crate::resume::cell_label(c, burst))
                .collect::<Vec<_>>()
        };
        from.kept_cells = kept(results, false);
        from.kept_cells.extend(kept(burst_results, true));
        from.kept_prefill = r.prefill.keys().filter_map(|k| k.parse().ok()).collect();
        from
    });
    Results {
        schema_version: SCHEMA_VERSION.into(),
        metadata,
        startup_diagnostics: host.startup.clone(),
        nvidia_p2p_override: host.p2p.clone(),
        p2pmark: not_run(),
        amd_fabric: not_run(),
        hardware_run_summary,
        engine_launch: host.launch.clone(),
        event_log: host.scrub_lines(events.lines()),
        methodology: methodology(
            prefill.values().any(|r| r.status == Some(CellStatus::Ok)),
            prefill_mode,
            !request_count_mode && has_ok(results),
            if request_count_mode {
                has_ok(results)
            } else {
                has_ok(burst_results)
            },
            run_burst || request_count_mode,
        ),
        prefill: prefill.clone(),
        prefill_warm: prefill_warm.clone(),
        results: results.clone(),
        summary_table,
        burst_results: burst_results.clone(),
        burst_summary_table,
        run_complete: Some(state == RunState::Complete),
        run_state: Some(state),
        resumed_from,
    }
}

/// A cell ended by the live view's skip key: `skipped_user` with [`USER_SKIP_REASON`] (the cell
/// itself reports an interruption).
fn user_skip(
    r: &mut CellResult,
    cell: &crate::events::CellCancel,
    run: &CancellationToken,
    events: &EventSink,
) {
    if cell.skipped(run) {
        r.status = CellStatus::SkippedUser;
        r.status_reason = format!("{USER_SKIP_REASON} while the cell was running");
        events.log(format!(
            "cell skipped C={} ctx={}: {}",
            r.concurrency,
            format_context(r.context_tokens),
            r.status_reason
        ));
    }
}

async fn pause(d: Duration, cancel: &CancellationToken) {
    if d.is_zero() {
        return;
    }
    tokio::select! {
        _ = tokio::time::sleep(d) => {}
        _ = cancel.cancelled() => {}
    }
}

/// Pre-run skip decision for a cell: model length, KV budget, and the server's concurrency cap
/// (SGLang `max_running_requests`: a larger C would queue, not run). Context-0 cells within the
/// cap are never capacity-skipped on SGLang (seed §3.4 exception).
fn pre_skip_cell(
    c: CellSpec,
    cfg: &RunConfig,
    info: &ServerInfo,
    kv_budget: u64,
) -> Option<PreSkip> {
    let sglang = info.engine == servebench_metrics::Engine::Sglang;
    if let Some(cap) = info.max_running_requests.filter(|_| sglang) {
        if c.concurrency > cap {
            return Some(PreSkip::Capacity {
                reason: format!(
                    "C={} exceeds the server's max_running_requests {cap}",
                    c.concurrency
                ),
                needed: c.concurrency,
                deficit: format!("{} requests", c.concurrency - cap),
            });
        }
        if c.context == 0 {
            return pre_skip(c, cfg.max_tokens, info.max_model_len, 0);
        }
    }
    pre_skip(c, cfg.max_tokens, info.max_model_len, kv_budget)
}

fn skip_result(spec: CellSpec, s: &PreSkip, mode: &str) -> CellResult {
    match s {
        PreSkip::Context { reason } => {
            skipped(spec, CellStatus::SkippedContext, reason.clone(), None, mode)
        }
        PreSkip::Capacity {
            reason,
            needed,
            deficit,
        } => {
            let mut r = skipped(
                spec,
                CellStatus::SkippedCapacity,
                reason.clone(),
                Some(*needed),
                mode,
            );
            r.timeout_reason = deficit.clone();
            r.capacity_limited = true;
            r
        }
    }
}

fn skipped(
    spec: CellSpec,
    status: CellStatus,
    reason: String,
    needed: Option<u64>,
    mode: &str,
) -> CellResult {
    CellResult {
        concurrency: spec.concurrency,
        context_tokens: spec.context,
        status,
        status_reason: reason,
        benchmark_mode: mode.into(),
        aggregate_source: "none".into(),
        total_tokens: needed,
        ..Default::default()
    }
}

/// A cell that failed by a deadline (or got no output at all): worth a health probe.
fn timed_out(r: &CellResult) -> bool {
    matches!(r.status, CellStatus::Error | CellStatus::Invalid)
        && r.error_kind.as_deref().is_some_and(|k| {
            k == FailureKind::NoOutput.as_str()
                || FailureKind::ALL
                    .iter()
                    .any(|f| f.is_timeout() && f.as_str() == k)
        })
}

/// A cell not run because the server stopped answering.
fn server_gone_result(spec: CellSpec, why: &str, mode: &str) -> CellResult {
    let mut r = skipped(
        spec,
        CellStatus::Error,
        format!("not run: the server stopped answering ({why})"),
        None,
        mode,
    );
    r.error_kind = Some(FailureKind::ProbeTimeout.as_str().into());
    r
}

/// Requested vs real context and prompt truncation of a finished cell
/// ([`crate::plausibility::check_context`]); a failed cell keeps its reason, the findings become
/// warnings.
fn context_checks(
    r: &mut CellResult,
    ctx: u64,
    p: &SizedPrompt,
    targeting: &Targeting,
    cold_prompt_tokens: Option<u64>,
    events: &EventSink,
) {
    if r.status.is_skipped() {
        return;
    }
    let sent = p
        .exact_tokens
        .or(p.estimated_tokens.map(|e| e.round() as u64))
        .map(|tokens| SentPrompt {
            tokens,
            reliable: p.exact_tokens.is_some()
                || !matches!(
                    targeting,
                    Targeting::Estimate {
                        source: "uncalibrated_estimate",
                        ..
                    }
                ),
            base_only: p.input.padding_chars == 0,
        });
    let findings = check_context(r, ctx, sent, cold_prompt_tokens);
    for f in &findings {
        events.log(format!(
            "cell {} C={} ctx={}: {}",
            if f.invalid { "invalid" } else { "warning" },
            r.concurrency,
            format_context(ctx),
            f.message
        ));
    }
    apply_findings(r, findings);
}

/// The startup warning for a sized prompt whose size differs from its context by more than
/// the tolerance of [`crate::plausibility::CONTEXT_TOLERANCE`].
fn sizing_warning(ctx: u64, p: &SizedPrompt) -> Option<String> {
    let tokens = p.exact_tokens.map(|t| t as f64).or(p.estimated_tokens)?;
    let diff = (tokens - ctx as f64) / ctx.max(1) as f64;
    if ctx == 0 || diff.abs() <= crate::plausibility::CONTEXT_TOLERANCE {
        return None;
    }
    let how = if p.exact_tokens.is_some() { "" } else { "~" };
    Some(if p.input.padding_chars == 0 && diff > 0.0 {
        format!(
            "startup warning: context {}: the base prompt alone has {how}{} tokens, more than the requested context; cells labelled {} measure {how}{}-token prompts",
            format_context(ctx),
            tokens.round(),
            format_context(ctx),
            tokens.round()
        )
    } else {
        format!(
            "startup warning: context {}: the prompt has {how}{} tokens ({:+.0} % of the requested context)",
            format_context(ctx),
            tokens.round(),
            diff * 100.0
        )
    })
}

/// The startup error when a startup request timed out.
fn probe_timeout_error(what: &str, e: &crate::HttpError, limit: Duration) -> RunError {
    RunError::Startup(format!(
        "{}: the {what} got no answer within {} (--probe-timeout): {e}",
        FailureKind::ProbeTimeout.as_str(),
        crate::timeouts::format_secs(limit.as_secs_f64())
    ))
}

/// Sizes one prompt per context; returns the targeting used. Fails only when the calibration's
/// first (tiny) request times out: the server does not answer completions.
async fn size_prompts(
    client: &HttpClient,
    cfg: &RunConfig,
    info: &ServerInfo,
    run_id: &str,
    contexts: &[u64],
    events: &EventSink,
) -> Result<(Targeting, BTreeMap<u64, SizedPrompt>), RunError> {
    let endpoint = cfg.target.endpoint;
    let mut out = BTreeMap::new();
    for &ctx in contexts.iter().filter(|&&c| c == 0) {
        let input = build_input(endpoint, &decode_prefix(run_id, ctx), 0, false);
        out.insert(
            ctx,
            SizedPrompt {
                context: 0,
                input,
                exact_tokens: None,
                estimated_tokens: None,
            },
        );
    }
    let nonzero: Vec<u64> = contexts.iter().copied().filter(|&c| c > 0).collect();
    if nonzero.is_empty() {
        return Ok((
            Targeting::Estimate {
                chars_per_token: 0.0,
                overhead_tokens: 0.0,
                source: "none",
            },
            out,
        ));
    }
    // Exact targeting when /tokenize answers.
    let tokenize_ok = cfg.targeting != TargetingMode::Estimate
        && {
            let probe = build_input(endpoint, &decode_prefix(run_id, 0), 16, true);
            match tokenize_count(client, &info.model, endpoint, &probe).await {
                Ok(_) => true,
                Err(e) => {
                    if FailureKind::of_http(&e) == FailureKind::RequestTimeout {
                        events.log(format!(
                        "startup warning: /tokenize did not answer within {} (--probe-timeout); sizing prompts by the estimate",
                        crate::timeouts::format_secs(client.policy().probe.as_secs_f64())
                    ));
                    }
                    false
                }
            }
        };
    if tokenize_ok {
        events.log("startup token targeting: /tokenize exact");
        let mut all_ok = true;
        for &ctx in &nonzero {
            match size_exact(
                client,
                &info.model,
                endpoint,
                &decode_prefix(run_id, ctx),
                ctx,
            )
            .await
            {
                Ok(p) => {
                    events.log(format!(
                        "startup context {}: {} chars ({} prompt tokens via /tokenize)",
                        format_context(ctx),
                        thousands(p.input.padding_chars as u64),
                        thousands(p.exact_tokens.unwrap_or(0))
                    ));
                    if let Some(w) = sizing_warning(ctx, &p) {
                        events.log(w);
                    }
                    out.insert(ctx, p);
                }
                Err(e) => {
                    events.log(format!(
                        "startup /tokenize sizing failed for {}: {e}; falling back to the estimate",
                        format_context(ctx)
                    ));
                    all_ok = false;
                    break;
                }
            }
        }
        if all_ok {
            return Ok((Targeting::Exact, out));
        }
    } else if cfg.targeting == TargetingMode::Exact {
        events.log("startup warning: --token-targeting exact requested but /tokenize is not available; using the estimate");
    }
    // Estimate targeting.
    let tid = template_id(endpoint);
    let key = CalibrationCache::key(&info.engine_name, &info.model, &tid);
    let max_ctx = nonzero.iter().copied().max().unwrap_or(0);
    let cal_ctx = cfg.calibration_context.min(max_ctx).max(256);
    let targeting = if let Some(e) = cfg.calibration_cache.get(&key) {
        events.log(format!(
            "startup calibrated: {:.2} chars/token, overhead {:.0} tokens (cached, source={})",
            e.chars_per_token,
            e.overhead_tokens,
            format_context(e.source_context)
        ));
        Targeting::Estimate {
            chars_per_token: e.chars_per_token,
            overhead_tokens: e.overhead_tokens,
            source: "cached_estimate",
        }
    } else {
        events.log(format!(
            "startup calibrating padding text run={run_id} probe={}",
            format_context(cal_ctx)
        ));
        match calibrate(
            client,
            &info.model,
            endpoint,
            &calibration_prefix(run_id),
            cal_ctx,
        )
        .await
        {
            Ok((cpt, overhead)) => {
                events.log(format!("startup calibrated: {cpt:.2} chars/token, overhead {overhead:.0} tokens (source={})", format_context(cal_ctx)));
                let entry = CalibrationEntry {
                    chars_per_token: cpt,
                    overhead_tokens: overhead,
                    engine: info.engine_name.clone(),
                    model: info.model.clone(),
                    template_id: tid.clone(),
                    source_context: cal_ctx,
                    updated_at: chrono::Local::now().to_rfc3339(),
                };
                if let Err(e) = cfg.calibration_cache.put(&key, entry) {
                    events.log(format!(
                        "startup warning: could not write the calibration cache: {e}"
                    ));
                }
                Targeting::Estimate {
                    chars_per_token: cpt,
                    overhead_tokens: overhead,
                    source: "calibrated_estimate",
                }
            }
            Err(e)
                if e.overhead_request
                    && FailureKind::of_http(&e.error) == FailureKind::RequestTimeout =>
            {
                events.log(format!("startup calibration failed: {e}"));
                return Err(probe_timeout_error(
                    "calibration request (a max_tokens=1 completion of the empty document)",
                    &e.error,
                    client.policy().probe,
                ));
            }
            Err(e) => {
                events.log(format!(
                    "startup WARNING: calibration failed ({e}); prompts use an uncalibrated 4.0 chars/token guess, \
                     so context sizes are approximate (measured prompt tokens are still recorded per cell)"
                ));
                Targeting::Estimate {
                    chars_per_token: 4.0,
                    overhead_tokens: 0.0,
                    source: "uncalibrated_estimate",
                }
            }
        }
    };
    if let Targeting::Estimate {
        chars_per_token,
        overhead_tokens,
        ..
    } = targeting
    {
        for &ctx in &nonzero {
            let p = size_estimate(
                endpoint,
                &decode_prefix(run_id, ctx),
                ctx,
                chars_per_token,
                overhead_tokens,
            );
            events.log(format!(
                "startup context {}: {} chars (~{} tokens)",
                format_context(ctx),
                thousands(p.input.padding_chars as u64),
                thousands(p.estimated_tokens.unwrap_or(0.0).round() as u64)
            ));
            if let Some(w) = sizing_warning(ctx, &p) {
                events.log(w);
            }
            out.insert(ctx, p);
        }
    }
    Ok((targeting, out))
}

/// `601344` → `601,344`.
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// The `methodology` block: how each layer's headline is computed.
pub fn methodology(
    prefill_present: bool,
    prefill_mode: &str,
    sustained_present: bool,
    burst_present: bool,
    burst_run: bool,
) -> Methodology {
    Methodology {
        prefill: LayerMethod {
            name: "Prefill".into(),
            present: prefill_present,
            mode: Some(prefill_mode.into()),
            status: None,
            formula: "prompt_tokens / TTFT".into(),
            notes: "Client-side: prompt tokens reported by the server's usage divided by the time to the first output token \
                    of a cold max_tokens=1 request whose prompt carries a fresh per-run, per-context prefix (never served from \
                    the prefix cache). Integrated mode uses the scout each decode context needs anyway; standalone mode takes \
                    the median of repeated cold samples. Prometheus prefill counters, when available and uncontaminated (an \
                    idle server before and after, exactly one prefill observed), are stored as server_validation. Warm-prefix \
                    rows (the same prompt again) are kept apart in prefill_warm."
                .into(),
        },
        sustained_decode: LayerMethod {
            name: "Sustained Decode".into(),
            present: sustained_present,
            mode: None,
            status: None,
            formula: "output tokens that arrived inside the measured window / window length; per request, tokens come from \
                      cumulative usage.completion_tokens (continuous usage stats), else one per SSE token event"
                .into(),
            notes: "C streams are kept in flight (each restarts when it ends). The window opens once every stream produces \
                    tokens (and, with server metrics, C requests run with an empty queue) and that held for the stable window; \
                    requests straddling the window edges are credited with exactly what they produced inside it. This is the \
                    engine's steady-state decode throughput, the signal for kernel, parallelism, speculative-decoding and \
                    scheduler tuning."
                .into(),
        },
        burst_e2e_decode: LayerMethod {
            name: "Burst / E2E Decode".into(),
            present: burst_present,
            mode: None,
            status: Some(if burst_run { "present" } else { "not run; use --run-burst" }.into()),
            formula: "sum(completion_tokens) / profiling_wall_time".into(),
            notes: "Finite client-facing request burst using final stream usage (no continuous usage, as AIPerf): N requests \
                    at concurrency C after W discarded warmup requests; the wall time runs from the first request to the end \
                    of the last. It includes admission, scheduling, prefill and completion; never compare it with sustained \
                    decode numbers."
                .into(),
        },
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn thousands_sep() {
        assert_eq!(super::thousands(601344), "601,344");
        assert_eq!(super::thousands(12), "12");
        assert_eq!(super::thousands(1000), "1,000");
    }
}
