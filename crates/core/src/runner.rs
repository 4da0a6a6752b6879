//! The whole run: startup checks, prompt sizing, prefill, hidden warmup, the matrix, the burst
//! layer, and the results.
//!
//! Order (seed spec §3.7): probe the server (engine, limits, metrics, KV budget) and plan the
//! run ([`plan_run`]) → size one prompt per context ([`size_prompts`]) → the prefill layer: the
//! standalone prefill profile (which ends the run in prefill-only mode), or an unmeasured decode
//! warm-up request (the server compiles its decode path), the prefill warmup and the scout-only
//! prefill contexts → hidden C=1 decode warmup at the largest runnable context → the primary
//! matrix in seed order (each cell skipped up front with its reason, or run as a sustained cell
//! — or as a request-count cell in request-count mode) → the Burst / E2E matrix when asked
//! for. Both matrices run through one loop ([`Ctx::run_matrix`]). A stop (the `cancel` token)
//! ends the running cell and marks every remaining cell `skipped_user`, saying how the run was
//! stopped ([`crate::events::StopCause`]); finished cells are kept.
//!
//! Core texts never name command-line flags: a failed startup probe is a typed
//! [`RunError::ProbeTimeout`] or [`RunError::ProbeUnanswered`] that the CLI words with its flag.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use servebench_client::stream::{run_probe, run_single};
use servebench_client::timeouts::{format_secs, Limit, RequestClass, RequestPolicy};
use servebench_client::{Endpoint, HttpClient, Target};
use servebench_results::{
    format_context, AggregateSource, BenchmarkMode, BurstE2eStatus, CellResult, CellStatus,
    DecodeMode, FailureKind, JsonObject, LayerMethod, Metadata, Methodology, PrefillMethod,
    PrefillMode, PrefillRow, PromptCache, Results, ResumedFrom, RunState, SCHEMA_VERSION,
    TOOL_NAME,
};
use servebench_stats::thousands;
use tokio_util::sync::CancellationToken;

use crate::burst::{run_burst_cell, BurstJob};
use crate::cell::{run_sustained_cell, CellJob, CellSettings};
use crate::error::ConfigError;
use crate::events::{EventSink, PlannedCell, RunEvent, RunPlan, StopCause, USER_SKIP_REASON};
use crate::host::{HostOptions, HostRun};
use crate::plan::{
    auto_ready_timeout_s, matrix_order, pre_skip, CellSpec, PreSkip, TIMEOUT_POLICY,
};
use crate::plausibility::{apply_findings, check_context, SentPrompt};
use crate::prefill::{cold_row, measure_prefill_once, warm_row, PrefillMetric, PrefillSample};
use crate::probe::{probe_server, resolve_kv_budget, KvDecision, ServerInfo};
use crate::prompt::{
    build_input, calibrate, calibration_prefix, decode_prefix, make_run_id, size_estimate,
    size_exact, streaming_payload, template_id, tokenize_count, warmup_prefix, CalibrationCache,
    CalibrationEntry, PromptInput, RequestOptions, SizedPrompt, Targeting,
};
use crate::resume::Resume;
use crate::telemetry::Telemetry;

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
    /// Timeouts on every wait and the HTTP 429 retry policy ([`servebench_client::timeouts`]).
    pub policy: RequestPolicy,
    /// `--request-rate` / `--rate-search`: open-loop rows ([`crate::rate`]) instead of the
    /// concurrency matrix; `None` = the matrix.
    pub open_loop: Option<crate::rate::RateConfig>,
    /// `--export-requests`: every measured request's row goes here ([`crate::export`]);
    /// `None` = no export.
    pub export: Option<crate::export::RequestExport>,
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
    /// The server failed the startup probe; the CLI words its [`crate::probe::Hint`] with its
    /// flag.
    #[error(transparent)]
    Probe(#[from] crate::probe::ProbeError),
    /// A startup request got no answer within the probe timeout ([`RequestPolicy::probe`]);
    /// the CLI names its flag.
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
}

/// Prompt of the decode JIT probe (a short streaming request before anything is measured).
const JIT_PROBE_PROMPT: &str = "Count from 1 to 20.";

/// What the run will do, fixed after the startup probe (before prompts are sized).
#[derive(Clone, Debug)]
struct Plan {
    /// The matrix in seed order, each cell with its up-front skip decision.
    cells: Vec<(CellSpec, Option<PreSkip>)>,
    /// The primary layer: sustained cells or request-count cells.
    mode: DecodeMode,
    /// A Burst / E2E matrix runs after the primary one.
    run_burst: bool,
    /// Context of the hidden C=1 decode warmup (the largest runnable one), if it runs.
    warmup_ctx: Option<u64>,
    /// Standalone prefill profile (`standalone` or `only` in [`PrefillConfig`]).
    standalone: bool,
    /// The prefill layer's contexts.
    prefill: PrefillPlan,
    /// Every context a prompt is sized for, ascending.
    sizing: Vec<u64>,
    /// Prompt building of request-count and Burst / E2E cells.
    burst_cache: PromptCache,
    /// Prompt building of sustained cells.
    sustained_cache: PromptCache,
}

/// The prefill layer's contexts (tokens).
#[derive(Clone, Debug, Default)]
struct PrefillPlan {
    /// Contexts asked for that fit the model (standalone: the profile).
    requested: Vec<u64>,
    /// Contexts asked for that do not fit the model, with the reason.
    skipped: Vec<(u64, String)>,
    /// Integrated mode: asked-for contexts without a decode cell (a cold request alone).
    scout_only: Vec<u64>,
    /// Integrated mode: decode contexts whose first cell takes the cold sample.
    integrated: Vec<u64>,
}

impl Plan {
    /// The `benchmark_mode` of a layer's cells.
    fn cell_mode(&self, layer: Layer) -> BenchmarkMode {
        match layer {
            Layer::Primary => self.mode.cell_mode(),
            Layer::Burst => BenchmarkMode::BurstE2e,
        }
    }

    /// How a layer's prompts are built.
    fn cache(&self, layer: Layer) -> PromptCache {
        match (layer, self.mode) {
            (Layer::Primary, DecodeMode::Duration) => self.sustained_cache,
            _ => self.burst_cache,
        }
    }
}

/// Which matrix a loop runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Layer {
    /// `results[]`: sustained cells, or request-count cells.
    Primary,
    /// `burst_results[]`: the Burst / E2E matrix after the sustained one.
    Burst,
}

/// Plans the run: matrix order and skips, the warmup context, the prefill contexts and the
/// contexts to size prompts for.
fn plan_run(cfg: &RunConfig, info: &ServerInfo, kv_budget: u64) -> Plan {
    let mode = if cfg.burst.request_count > 0 {
        DecodeMode::RequestCount
    } else {
        DecodeMode::Duration
    };
    let cells: Vec<(CellSpec, Option<PreSkip>)> = if cfg.prefill.only || cfg.open_loop.is_some() {
        Vec::new()
    } else {
        matrix_order(&cfg.concurrency, &cfg.contexts)
            .into_iter()
            .map(|c| (c, pre_skip_cell(c, cfg, info, kv_budget)))
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
        let runs_at_c1 = |context: u64| {
            let c = CellSpec {
                concurrency: 1,
                context,
            };
            pre_skip_cell(c, cfg, info, kv_budget).is_none()
        };
        cfg.contexts
            .iter()
            .copied()
            .filter(|&x| runs_at_c1(x))
            .max()
    };
    let standalone = cfg.prefill.standalone || cfg.prefill.only;
    let prefill = plan_prefill(cfg, info, standalone, &decode_contexts);
    let mut sizing: Vec<u64> = decode_contexts.clone();
    sizing.extend(warmup_ctx);
    sizing.extend(prefill.requested.iter().copied());
    if cfg.open_loop.is_some() {
        let fits = |x: u64| info.max_model_len.is_none_or(|m| x < m);
        sizing.extend(cfg.contexts.iter().copied().filter(|&x| fits(x)));
    }
    sizing.sort_unstable();
    sizing.dedup();
    Plan {
        cells,
        mode,
        run_burst: cfg.burst.run_burst && mode == DecodeMode::Duration && !cfg.prefill.only,
        warmup_ctx,
        standalone,
        prefill,
        sizing,
        burst_cache: cfg.burst.prompt_cache.unwrap_or(PromptCache::Cold),
        sustained_cache: cfg.burst.prompt_cache.unwrap_or(PromptCache::Shared),
    }
}

/// The prefill layer's contexts. A prefill request is the prompt plus one output token, so a
/// context fits when it is below the model length.
fn plan_prefill(
    cfg: &RunConfig,
    info: &ServerInfo,
    standalone: bool,
    decode_contexts: &[u64],
) -> PrefillPlan {
    let mut p = PrefillPlan::default();
    if cfg.prefill.skip {
        return p;
    }
    let fits = |x: u64| info.max_model_len.is_none_or(|m| x < m);
    for &x in crate::plan::dedup_keep_order(&cfg.prefill.contexts)
        .iter()
        .filter(|&&x| x > 0)
    {
        if fits(x) {
            p.requested.push(x);
        } else {
            p.skipped.push((
                x,
                format!(
                    "prefill context {} does not fit the model's max_model_len {}",
                    format_context(x),
                    info.max_model_len.unwrap_or(0)
                ),
            ));
        }
    }
    if standalone {
        if let (true, Some(m)) = (p.requested.is_empty(), info.max_model_len) {
            p.requested.push(m.saturating_sub(64).max(1));
        }
        return p;
    }
    p.scout_only = p
        .requested
        .iter()
        .copied()
        .filter(|x| !decode_contexts.contains(x))
        .collect();
    p.integrated = decode_contexts.iter().copied().filter(|&x| x > 0).collect();
    p
}

/// Sends [`RunEvent::Plan`].
fn emit_plan(events: &EventSink, cfg: &RunConfig, info: &ServerInfo, kv: &KvDecision, plan: &Plan) {
    let timed = plan.mode == DecodeMode::Duration;
    let cells = plan
        .cells
        .iter()
        .enumerate()
        .map(|(i, (c, skip))| PlannedCell {
            index: i + 1,
            concurrency: c.concurrency,
            context: c.context,
            skip_reason: skip.as_ref().map(|s| match s {
                PreSkip::Context { reason } | PreSkip::Capacity { reason, .. } => reason.clone(),
            }),
            expected_s: (skip.is_none() && timed)
                .then(|| (cfg.stable_window + cfg.duration + cfg.cell_pause).as_secs_f64()),
        })
        .collect();
    events.emit(RunEvent::Plan(Box::new(RunPlan {
        engine: info.engine_name.clone(),
        engine_version: info.engine_version.clone(),
        model: info.model.clone(),
        url: cfg.target.base_url.clone(),
        kv_budget_tokens: kv.tokens,
        kv_budget_source: kv.source.to_string(),
        max_model_len: info.max_model_len,
        window_s: cfg.duration.as_secs_f64(),
        pause_s: cfg.cell_pause.as_secs_f64(),
        layer: plan.mode,
        warmup_s: plan.warmup_ctx.map(|_| cfg.decode_warmup.as_secs_f64()),
        burst_layer: plan.run_burst,
        cells,
    })));
}

/// Logs what the prefill layer will do.
fn log_prefill_plan(events: &EventSink, cfg: &RunConfig, plan: &Plan) {
    let list = |v: &[u64]| {
        v.iter()
            .map(|&x| format_context(x))
            .collect::<Vec<_>>()
            .join(",")
    };
    let p = &plan.prefill;
    if cfg.prefill.skip {
        events.log("startup prefill tests: skipped");
    } else if plan.standalone {
        events.log(format!(
            "startup prefill tests: standalone cold profile at {}",
            list(&p.requested)
        ));
    } else {
        events.log(format!(
            "startup prefill tests: one cold request before the first decode cell of each context{}",
            if p.scout_only.is_empty() {
                String::new()
            } else {
                format!(", plus cold requests alone at {}", list(&p.scout_only))
            }
        ));
    }
    for (x, why) in &p.skipped {
        events.log(format!(
            "startup prefill context {} skipped: {why}",
            format_context(*x)
        ));
    }
}

/// Logs the server's identity, limits and metrics state after the startup probe.
fn log_server(events: &EventSink, info: &ServerInfo) {
    events.log(format!("benchmark start engine={}", info.engine_name));
    events.log(format!(
        "startup engine {}{} models={}",
        info.engine_name,
        info.engine_version
            .as_deref()
            .map(|v| format!(" {v}"))
            .unwrap_or_default(),
        crate::probe::summarize_ids(&info.models, 10)
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
}

/// The KV budget (the local vLLM process's context-parallel size counts when the server runs
/// on this host), logged.
fn kv_budget(cfg: &RunConfig, info: &ServerInfo, events: &EventSink) -> KvDecision {
    let local_cp = if info.engine == servebench_metrics::Engine::Vllm
        && cfg.dcp_size == 0
        && cfg.target.is_loopback()
    {
        cfg.target.port().and_then(crate::probe::local_vllm_cp_size)
    } else {
        None
    };
    let kv = resolve_kv_budget(info, cfg.kv_budget, cfg.dcp_size, local_cp);
    events.log(format!("startup {}", kv.event));
    if let Some(m) = info.max_running_requests {
        events.log(format!("startup max running requests: {m}"));
    }
    kv
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

    /// The body of the decode JIT probe (64 tokens, the model's own stop).
    fn jit_body(&self) -> bytes::Bytes {
        let input = match self.cfg.target.endpoint {
            Endpoint::Chat => PromptInput {
                value: json!([{"role": "user", "content": JIT_PROBE_PROMPT}]),
                padding_chars: 0,
            },
            Endpoint::Completions => PromptInput {
                value: Value::String(format!("{JIT_PROBE_PROMPT}\n")),
                padding_chars: 0,
            },
        };
        let opts = RequestOptions {
            ignore_eos: false,
            ..self.opts(64, false)
        };
        streaming_payload(&opts, &input)
    }

    /// The decode JIT probe (a startup probe: first byte and first token within the probe
    /// timeout). A timeout is fatal: a server that cannot answer a 64-token request would only
    /// make every cell wait; other failures are logged (the cells report them).
    async fn jit_probe(&self, what: &str) -> Result<(), RunError> {
        let out = run_probe(&self.client, self.path(), self.jit_body(), self.cancel).await;
        let status = out.facts.http_status;
        match (out.record.error, out.facts.kind) {
            // A refused completion request (no or wrong key, wrong path or endpoint): a
            // startup error (exit 1), not a cell to fail (issue 17; README, exit codes).
            (Some(e), Some(FailureKind::HttpStatus))
                if matches!(status, Some(401 | 403 | 404)) && !self.cancel.is_cancelled() =>
            {
                self.events.log(format!("{what} failed: {e}"));
                let has_key = self
                    .client
                    .target()
                    .api_key
                    .as_deref()
                    .is_some_and(|k| !k.is_empty());
                let p = match status {
                    Some(404) => crate::probe::ProbeError::hinted(
                        format!("the server refused the {what}: {e}"),
                        crate::probe::Hint::UrlPath,
                    ),
                    _ if has_key => crate::probe::ProbeError::new(format!(
                        "the server rejected the API key for the {what}: {e}"
                    )),
                    _ => crate::probe::ProbeError::hinted(
                        format!("the server requires an API key for the {what}: {e}"),
                        crate::probe::Hint::ApiKey,
                    ),
                };
                Err(RunError::Probe(p))
            }
            (Some(e), Some(k)) if k.is_timeout() && !self.cancel.is_cancelled() => {
                self.events.log(format!("{what} failed: {e}"));
                let limits = self.client.policy().limits(RequestClass::Probe, 0, 1);
                match limits.limit_of(k) {
                    Some(limit) => Err(RunError::ProbeUnanswered {
                        what: what.to_string(),
                        limit,
                        detail: e,
                    }),
                    None => Err(RunError::Startup(format!(
                        "the server accepted the {what} but did not answer it: {e}"
                    ))),
                }
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
    async fn scout_rows(
        &self,
        ctx: u64,
        prefix: &str,
        method: PrefillMethod,
    ) -> (PrefillRow, PrefillRow) {
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

    /// Emits the results so far as a [`RunEvent::Checkpoint`] (`run_state: running`; the run's
    /// hardware summary comes only with the final results).
    fn checkpoint(&self, st: &Partial, host: &HostRun) {
        let r = assemble(self, st, RunState::Running, host, JsonObject::new());
        self.events.emit(RunEvent::Checkpoint(Box::new(r)));
    }
}

/// How a stop is described when the cause is not known (the cancel token fired without the
/// CLI recording why).
const UNKNOWN_STOP: &str = "Ctrl-C, SIGTERM or SIGHUP";

fn prefill_skip_row(reason: String) -> PrefillRow {
    PrefillRow {
        method: PrefillMethod::Skipped,
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
/// matrix and the Burst / E2E matrix (both [`Ctx::run_matrix`]), then [`assemble`].
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
    let info: ServerInfo = probe_server(&client, cfg.model.as_deref()).await?;
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

    /// The prefill layer before decode: the standalone profile, or (integrated mode) the decode
    /// JIT probe, the prefill warmup and the scout-only contexts. Fails only when the JIT probe
    /// times out.
    async fn prefill_layer(&self, st: &mut Partial, host: &HostRun) -> Result<(), RunError> {
        if self.cancel.is_cancelled() {
            return Ok(());
        }
        if self.plan.standalone && !self.plan.prefill.requested.is_empty() {
            return self.standalone_prefill(st, host).await;
        }
        if self.cfg.prefill.only {
            return Ok(());
        }
        self.jit_probe(
            "decode warm-up request (unmeasured; lets the server compile its decode path first)",
        )
        .await?;
        let p = &self.plan.prefill;
        if let Some(smallest) = p
            .integrated
            .iter()
            .chain(p.scout_only.iter())
            .copied()
            .min()
        {
            let wctx = smallest.min(8192);
            let wctx = if self.prompts.contains_key(&wctx) {
                wctx
            } else {
                smallest
            };
            let prefix = format!("[WARMUP_{}_PREFILL]", self.run_id);
            if let Some(input) = self.input_with_prefix(wctx, &prefix) {
                let body = streaming_payload(&self.opts(1, false), &input);
                self.unrecorded("prefill warmup", body).await;
            }
        }
        for &x in &p.scout_only {
            if self.cancel.is_cancelled() {
                break;
            }
            if self.kept_prefill(x) {
                continue;
            }
            let prefix = decode_prefix(&self.run_id, x);
            let (cold, warm) = self.scout_rows(x, &prefix, PrefillMethod::ScoutOnly).await;
            st.record_prefill(self.events, x, cold, Some(warm));
            self.checkpoint(st, host);
        }
        Ok(())
    }

    /// The standalone prefill profile: warmups, then repeated cold samples per context for the
    /// prefill duration (at least one), each context's row checkpointed.
    async fn standalone_prefill(&self, st: &mut Partial, host: &HostRun) -> Result<(), RunError> {
        let requested = &self.plan.prefill.requested;
        self.jit_probe("prefill warmup A (short decode)").await?;
        let smallest = requested.iter().copied().min().unwrap_or(0);
        let prefix = format!("[WARMUP_{}]", self.run_id);
        if let Some(input) = self.input_with_prefix(smallest, &prefix) {
            let body = streaming_payload(&self.opts(1, false), &input);
            self.unrecorded("prefill warmup B (prefill)", body).await;
        }
        for &x in requested {
            if self.cancel.is_cancelled() {
                break;
            }
            if self.kept_prefill(x) {
                continue;
            }
            let Some((cold, warm)) = self.standalone_context(x).await else {
                break;
            };
            st.record_prefill(self.events, x, cold, Some(warm));
            self.checkpoint(st, host);
        }
        Ok(())
    }

    /// The cold and warm rows of one standalone context; `None` when the run was stopped.
    async fn standalone_context(&self, x: u64) -> Option<(PrefillRow, PrefillRow)> {
        let t0 = Instant::now();
        let (mut samples, mut failures) = (Vec::new(), Vec::new());
        let mut r = 0u64;
        let prefix = |r: u64| format!("[BENCH_{}_CTX_{x}_R{r:04}]", self.run_id);
        while !self.cancel.is_cancelled() && (r == 0 || t0.elapsed() < self.cfg.prefill.duration) {
            r += 1;
            match self.prefill_sample(x, &prefix(r)).await {
                Ok(s) => samples.push(s),
                Err(e) if !self.cancel.is_cancelled() => failures.push(e),
                Err(_) => {}
            }
        }
        if self.cancel.is_cancelled() {
            return None;
        }
        let metric = self.cfg.prefill.metric;
        let method = if metric == PrefillMetric::Prometheus {
            PrefillMethod::Prometheus
        } else {
            PrefillMethod::Client
        };
        let cold = cold_row(&samples, &failures, method, metric);
        let warm = match samples.last() {
            Some(_) => warm_row(self.prefill_sample(x, &prefix(r)).await.as_ref()),
            None => warm_row(Err(&"every cold sample failed".to_string())),
        };
        Some((cold, warm))
    }

    /// The sustained-cell settings of this run (the measured window of `duration`).
    fn cell_settings(&self, duration: Duration) -> CellSettings {
        CellSettings {
            path: self.path(),
            duration,
            stable_window: self.cfg.stable_window,
            max_tokens: self.cfg.max_tokens,
            ignore_eos: self.cfg.ignore_eos,
        }
    }

    /// The hidden C=1 decode warmup at the largest runnable context (not when a resume has
    /// nothing left to measure). Its result is only logged.
    async fn decode_warmup(&self, st: &mut Partial) {
        let nothing_to_run = self.resume.as_ref().is_some_and(|r| {
            self.plan.cells.iter().all(|(c, skip)| {
                skip.is_some()
                    || (r.cell(*c, false).is_some()
                        && (!self.plan.run_burst || r.cell(*c, true).is_some()))
            })
        });
        let Some(wctx) = self.plan.warmup_ctx.filter(|_| !nothing_to_run) else {
            return;
        };
        if self.cancel.is_cancelled() {
            return;
        }
        let Some(input) = self.input_with_prefix(wctx, &warmup_prefix(&self.run_id, wctx)) else {
            return;
        };
        let (cfg, events) = (self.cfg, self.events);
        events.log("decode warmup start");
        events.log(format!(
            "decode warmup start C=1 ctx={} {}s",
            format_context(wctx),
            cfg.decode_warmup.as_secs_f64()
        ));
        let job = CellJob {
            spec: CellSpec {
                concurrency: 1,
                context: wctx,
            },
            decode_body: streaming_payload(&self.opts(cfg.max_tokens, true), &input),
            scout_body: (wctx > 0).then(|| streaming_payload(&self.opts(1, false), &input)),
            ready_timeout: self.ready_timeout(wctx),
            index: 0,
            total: self.plan.cells.len(),
            warmup: true,
            cold_run_id: None,
            export: None,
        };
        let cell_cancel = events.skip_control().begin(self.cancel);
        let out = run_sustained_cell(
            &self.client,
            &self.cell_settings(cfg.decode_warmup),
            job,
            events,
            self.telemetry.as_ref(),
            &cell_cancel.token,
        )
        .await;
        if cell_cancel.skipped(self.cancel) {
            events.log("decode warmup skipped by the user");
        }
        drop(cell_cancel);
        if !out.interrupted {
            let r = &out.result;
            events.log(format!(
                "decode warmup done C=1 ctx={} ({}{})",
                format_context(wctx),
                r.status.as_str(),
                if r.status_reason.is_empty() {
                    String::new()
                } else {
                    format!(": {}", r.status_reason)
                }
            ));
            if r.status == CellStatus::Ok {
                st.warmup_context_done = wctx;
            }
        }
        pause(cfg.cell_pause, self.cancel).await;
    }
}

/// What the matrix loops carry from cell to cell (and from the primary matrix to the burst one).
#[derive(Debug, Default)]
struct MatrixState {
    /// Contexts whose integrated prefill sample was taken (or kept).
    prefill_done: Vec<u64>,
    /// Set when a health probe after a timed-out cell got no answer: the remaining cells are
    /// not run (an unattended run against a dead server ends instead of timing out every cell).
    server_gone: Option<String>,
    /// Prompt tokens of each context's cold prefill sample (for the context checks).
    cold_prompt: BTreeMap<u64, u64>,
}

impl Ctx<'_> {
    /// One matrix (`layer`) in plan order: each cell kept from the resume, skipped (stopped run,
    /// dead server, up-front skip) or measured; each finished cell announced and checkpointed.
    async fn run_matrix(
        &self,
        layer: Layer,
        st: &mut Partial,
        m: &mut MatrixState,
        host: &HostRun,
    ) {
        let total = self.plan.cells.len();
        for (i, (spec, skip)) in self.plan.cells.iter().enumerate() {
            let index = i + 1;
            let kept = self.kept(*spec, layer).cloned();
            let mut result = match &kept {
                Some(k) => {
                    if layer == Layer::Primary {
                        self.kept_cell_prefill(*spec, st, m, host).await;
                        self.events.log(format!(
                            "cell kept from {} C={} ctx={}: {}",
                            self.resume.as_ref().map_or("", |r| r.from.file.as_str()),
                            spec.concurrency,
                            format_context(spec.context),
                            k.status.as_str()
                        ));
                    }
                    k.clone()
                }
                None => {
                    self.cell_result(layer, index, *spec, skip.as_ref(), st, m, host)
                        .await
                }
            };
            if result.status == CellStatus::SkippedUser && result.status_reason.is_empty() {
                result.status_reason = "skipped by the user".into();
            }
            if layer == Layer::Primary {
                let more = index < total
                    || (self.cfg.burst.run_burst && self.plan.mode == DecodeMode::Duration);
                self.health_check(&result, more, m).await;
            }
            if let Some(w) = self.telemetry.as_ref().and_then(Telemetry::take_disabled) {
                self.events.warn(format!("warning: {w}"));
                result.warnings.push(w);
            }
            let ran = kept.is_none() && !result.status.is_skipped();
            self.events.emit(RunEvent::CellFinished {
                index,
                result: Box::new(result.clone()),
            });
            st.layer_mut(layer).push(result);
            self.checkpoint(st, host);
            if ran && index < total {
                let d = match layer {
                    Layer::Primary => self.cfg.cell_pause,
                    Layer::Burst => Duration::from_secs(1).min(self.cfg.cell_pause),
                };
                pause(d, self.cancel).await;
            }
        }
    }

    /// The result of a cell that was not kept: skipped (stopped run, dead server, up-front
    /// skip, no prompt) or measured.
    #[allow(clippy::too_many_arguments)]
    async fn cell_result(
        &self,
        layer: Layer,
        index: usize,
        spec: CellSpec,
        skip: Option<&PreSkip>,
        st: &mut Partial,
        m: &mut MatrixState,
        host: &HostRun,
    ) -> CellResult {
        let mode = self.plan.cell_mode(layer);
        if self.cancel.is_cancelled() {
            let why = format!(
                "not run: the run was interrupted by the user ({})",
                self.stop_words()
            );
            return skipped(spec, CellStatus::SkippedUser, why, None, mode);
        }
        if let (Some(why), None) = (&m.server_gone, skip) {
            return server_gone_result(spec, why, mode);
        }
        if let Some(s) = skip {
            let r = skip_result(spec, s, mode);
            if layer == Layer::Primary {
                self.events.log(format!(
                    "cell skipped C={} ctx={}: {}",
                    spec.concurrency,
                    format_context(spec.context),
                    r.status_reason
                ));
            }
            return r;
        }
        if !self.prompts.contains_key(&spec.context) {
            let why = "no prompt could be built for this context".to_string();
            return skipped(spec, CellStatus::Error, why, None, mode);
        }
        self.measure_cell(layer, index, spec, st, m, host).await
    }

    /// Measures one cell of `layer` (the context's prompt exists): the integrated prefill sample
    /// first when this is the context's first primary cell, then a sustained, request-count or
    /// Burst / E2E cell; then the user-skip, context and cache checks.
    async fn measure_cell(
        &self,
        layer: Layer,
        index: usize,
        spec: CellSpec,
        st: &mut Partial,
        m: &mut MatrixState,
        host: &HostRun,
    ) -> CellResult {
        let p = &self.prompts[&spec.context];
        let mut scout_body =
            (spec.context > 0).then(|| streaming_payload(&self.opts(1, false), &p.input));
        // The first cell of a context takes the measured (integrated) prefill sample itself;
        // the cell's own scout then only re-primes the cache for later cells.
        if layer == Layer::Primary {
            let sampled = self.integrated_prefill(spec.context, true, st, m, host);
            if sampled.await == Some(true) {
                scout_body = None;
            }
        }
        let cache = self.plan.cache(layer);
        let cold_run_id = (cache == PromptCache::Cold).then(|| self.run_id.clone());
        let cell_cancel = self.events.skip_control().begin(self.cancel);
        let export = self.cfg.export.as_ref().map(|x| {
            x.sink(crate::export::ExportKey {
                layer: match (layer, self.plan.cell_mode(layer)) {
                    (Layer::Burst, _) => "burst",
                    (_, BenchmarkMode::Duration) => "sustained",
                    _ => "request_count",
                },
                context_tokens: spec.context,
                concurrency: Some(spec.concurrency),
                request_rate: None,
            })
        });
        let mut r = if self.plan.cell_mode(layer) == BenchmarkMode::Duration {
            let job = CellJob {
                spec,
                decode_body: streaming_payload(&self.opts(self.cfg.max_tokens, true), &p.input),
                scout_body,
                ready_timeout: self.ready_timeout(spec.context),
                index,
                total: self.plan.cells.len(),
                warmup: false,
                cold_run_id,
                export,
            };
            let out = run_sustained_cell(
                &self.client,
                &self.cell_settings(self.cfg.duration),
                job,
                self.events,
                self.telemetry.as_ref(),
                &cell_cancel.token,
            )
            .await;
            let mut r = out.result;
            host.attach(&mut r, out.window, self.events);
            r
        } else {
            let (n, w) = self.burst_counts(layer, spec.concurrency);
            let job = BurstJob {
                spec,
                body: streaming_payload(&self.opts(self.cfg.max_tokens, false), &p.input),
                scout_body,
                request_count: n,
                warmup_count: w,
                mode: self.plan.cell_mode(layer),
                cold_run_id,
                index,
                total: self.plan.cells.len(),
                export,
            };
            let out = run_burst_cell(
                &self.client,
                self.path(),
                job,
                self.events,
                self.telemetry.as_ref(),
                &cell_cancel.token,
            )
            .await;
            let mut r = out.result;
            host.attach_records(&mut r, &out.records, self.events);
            if layer == Layer::Burst {
                r.request_count_target = n;
            }
            r
        };
        self.after_cell(&mut r, &cell_cancel);
        drop(cell_cancel);
        if layer == Layer::Primary && r.prompt_tokens.is_none() {
            r.prompt_tokens = p.exact_tokens;
        }
        let cold = m.cold_prompt.get(&spec.context).copied();
        context_checks(&mut r, spec.context, p, &self.targeting, cold, self.events);
        crate::cache::record(&mut r, cache);
        r
    }

    /// Requests N and discarded warmup requests W of a request-count (primary) or Burst / E2E
    /// cell at concurrency `c`.
    fn burst_counts(&self, layer: Layer, c: u64) -> (u64, u64) {
        let b = &self.cfg.burst;
        match layer {
            Layer::Primary => (b.request_count, b.warmup_request_count),
            Layer::Burst => (
                if b.burst_request_count > 0 {
                    b.burst_request_count
                } else {
                    c.max(c * b.burst_requests_per_concurrency.max(1))
                },
                if b.burst_warmup_request_count > 0 {
                    b.burst_warmup_request_count
                } else {
                    c
                },
            ),
        }
    }

    /// The integrated prefill sample of `ctx` when it is due (the context's first cell, not yet
    /// taken or kept): recorded and checkpointed; its prompt tokens go to the context checks of
    /// the cells measured after it when `for_checks`. `Some(cold row ok)` when it ran.
    async fn integrated_prefill(
        &self,
        ctx: u64,
        for_checks: bool,
        st: &mut Partial,
        m: &mut MatrixState,
        host: &HostRun,
    ) -> Option<bool> {
        if !self.plan.prefill.integrated.contains(&ctx) || m.prefill_done.contains(&ctx) {
            return None;
        }
        m.prefill_done.push(ctx);
        let prefix = decode_prefix(&self.run_id, ctx);
        let (cold, warm) = self
            .scout_rows(ctx, &prefix, PrefillMethod::IntegratedScout)
            .await;
        let ok = cold.status == Some(CellStatus::Ok);
        if let (Some(t), true) = (cold.prompt_tokens, for_checks) {
            m.cold_prompt.insert(ctx, t);
        }
        st.record_prefill(self.events, ctx, cold, Some(warm));
        self.checkpoint(st, host);
        Some(ok)
    }

    /// A kept cell whose context's prefill row was not kept (it failed): the row is measured
    /// now.
    async fn kept_cell_prefill(
        &self,
        spec: CellSpec,
        st: &mut Partial,
        m: &mut MatrixState,
        host: &HostRun,
    ) {
        if self.prompts.contains_key(&spec.context) && !self.cancel.is_cancelled() {
            self.integrated_prefill(spec.context, false, st, m, host)
                .await;
        }
    }

    /// A finished cell's stop handling: ended by the live view's skip key → `skipped_user` with
    /// [`USER_SKIP_REASON`]; ended because the run was stopped → the reason says how it was
    /// stopped.
    fn after_cell(&self, r: &mut CellResult, cell: &crate::events::CellCancel) {
        if cell.skipped(self.cancel) {
            r.status = CellStatus::SkippedUser;
            r.status_reason = format!("{USER_SKIP_REASON} while the cell was running");
            self.events.log(format!(
                "cell skipped C={} ctx={}: {}",
                r.concurrency,
                format_context(r.context_tokens),
                r.status_reason
            ));
        } else if self.cancel.is_cancelled() && r.status == CellStatus::SkippedUser {
            let words = self.stop_words();
            if words != UNKNOWN_STOP {
                r.status_reason = r.status_reason.replace(UNKNOWN_STOP, words);
            }
        }
    }

    /// After a cell that failed by a deadline, with more cells to come: a health probe; no
    /// answer marks the server gone.
    async fn health_check(&self, r: &CellResult, more: bool, m: &mut MatrixState) {
        if !more || m.server_gone.is_some() || self.cancel.is_cancelled() || !timed_out(r) {
            return;
        }
        if let Err(e) = self.jit_probe("health probe after a timed-out cell").await {
            self.events.log(format!(
                "the server stopped answering; the remaining cells are not run: {e}"
            ));
            m.server_gone = Some(e.to_string());
        }
    }

    /// The final results after the last phase (or the stop).
    fn finish(&self, st: &Partial, host: &mut HostRun, t_run: Instant) -> Results {
        let interrupted = self.cancel.is_cancelled();
        if interrupted {
            self.events
                .log("run interrupted by the user: partial results");
        }
        self.events.log(format!(
            "benchmark done in {:.1}s",
            t_run.elapsed().as_secs_f64()
        ));
        let state = if interrupted {
            RunState::Interrupted
        } else {
            RunState::Complete
        };
        let hardware = host.finish();
        assemble(self, st, state, host, hardware)
    }
}

/// `{ "<ctx>": { "<C>": aggregate_tps } }` over the `ok` cells of `rs`.
fn summary_table(rs: &[CellResult]) -> indexmap::IndexMap<String, indexmap::IndexMap<String, f64>> {
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
}

/// The prefill layer's mode.
fn prefill_mode(rc: &Ctx<'_>) -> PrefillMode {
    if rc.cfg.prefill.skip {
        PrefillMode::Skipped
    } else if rc.plan.standalone {
        PrefillMode::StandaloneCold
    } else {
        PrefillMode::IntegratedDecodeScout
    }
}

/// The results of a run from what it finished so far (`st`), in state `state`.
fn assemble(
    rc: &Ctx<'_>,
    st: &Partial,
    state: RunState,
    host: &HostRun,
    hardware_run_summary: JsonObject,
) -> Results {
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
    let request_count_mode = rc.plan.mode == DecodeMode::RequestCount;
    let methodology = methodology(
        st.prefill
            .values()
            .any(|r| r.status == Some(CellStatus::Ok)),
        prefill_mode(rc),
        !request_count_mode && has_ok(&st.results),
        if request_count_mode {
            has_ok(&st.results)
        } else {
            has_ok(&st.burst_results)
        },
        if rc.plan.run_burst || request_count_mode {
            BurstE2eStatus::Enabled
        } else {
            BurstE2eStatus::NotRun
        },
    );
    Results {
        schema_version: SCHEMA_VERSION.into(),
        metadata: metadata(rc, st, state, host),
        startup_diagnostics: host.startup.clone(),
        nvidia_p2p_override: host.p2p.clone(),
        p2pmark: not_run(),
        amd_fabric: not_run(),
        hardware_run_summary,
        engine_launch: host.launch.clone(),
        event_log: host.scrub_lines(rc.events.lines()),
        methodology,
        prefill: st.prefill.clone(),
        prefill_warm: st.prefill_warm.clone(),
        results: st.results.clone(),
        summary_table: summary_table(&st.results),
        burst_results: st.burst_results.clone(),
        burst_summary_table: summary_table(&st.burst_results),
        run_complete: Some(state == RunState::Complete),
        run_state: Some(state),
        resumed_from: resumed_from(rc, st),
        rate_results: st.rate.rows.clone(),
        rate_search: st.rate.searches.clone(),
    }
}

impl Ctx<'_> {
    /// The open-loop request-rate rows (`--request-rate`, instead of the matrix), each
    /// checkpointed.
    async fn rate_layer(&self, st: &mut Partial, host: &HostRun) {
        let (Some(ol), false) = (&self.cfg.open_loop, self.cancel.is_cancelled()) else {
            return;
        };
        let bodies = self.rate_bodies();
        let job = crate::rate::job_from_run(
            &self.client,
            self.path(),
            self.cfg,
            &self.run_id,
            &bodies,
            self.events,
            self.cancel,
        )
        .keeping(self.resume.as_ref());
        let on_row = &mut |p: &crate::rate::RateProgress| {
            st.rate = p.clone();
            self.checkpoint(st, host);
        };
        crate::rate::run_rate_layer(ol, &job, on_row).await;
    }

    /// The open-loop rows' request body per context (`--contexts`), or why it cannot run.
    fn rate_bodies(&self) -> Vec<(u64, Result<bytes::Bytes, String>)> {
        let opts = self.opts(self.cfg.max_tokens, true);
        crate::plan::dedup_keep_order(&self.cfg.contexts)
            .into_iter()
            .map(|x| match (self.prompts.get(&x), self.info.max_model_len) {
                (_, Some(m)) if x >= m => (
                    x,
                    Err(format!(
                        "context {x} does not fit the model's max_model_len {m}"
                    )),
                ),
                (Some(p), _) => (x, Ok(streaming_payload(&opts, &p.input))),
                (None, _) => (x, Err("no prompt could be built for this context".into())),
            })
            .collect()
    }
}

/// `resumed_from`: the resumed file, with the cells and prefill rows actually carried over.
fn resumed_from(rc: &Ctx<'_>, st: &Partial) -> Option<ResumedFrom> {
    let r = rc.resume.as_ref()?;
    let mut from = r.from.clone();
    let kept = |list: &[CellResult], burst: bool| {
        list.iter()
            .filter(|c| {
                let spec = CellSpec {
                    concurrency: c.concurrency,
                    context: c.context_tokens,
                };
                r.cell(spec, burst).is_some_and(|k| k == *c)
            })
            .map(|c| crate::resume::cell_label(c, burst))
            .collect::<Vec<_>>()
    };
    from.kept_cells = kept(&st.results, false);
    from.kept_cells.extend(kept(&st.burst_results, true));
    from.kept_prefill = r.prefill.keys().filter_map(|k| k.parse().ok()).collect();
    Some(from)
}

/// The `metadata` block.
fn metadata(rc: &Ctx<'_>, st: &Partial, state: RunState, host: &HostRun) -> Metadata {
    let (cfg, info, targeting) = (rc.cfg, &rc.info, &rc.targeting);
    let cpt = match targeting {
        Targeting::Estimate {
            chars_per_token, ..
        } if *chars_per_token > 0.0 => Some(*chars_per_token),
        _ => None,
    };
    Metadata {
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
        started_at: Some(rc.started_at.clone()),
        decode_mode: rc.plan.mode,
        primary_decode_layer: rc.plan.mode.layer(),
        duration_per_test: cfg.duration.as_secs_f64(),
        request_count: cfg.burst.request_count,
        warmup_request_count: cfg.burst.warmup_request_count,
        run_burst: cfg.burst.run_burst,
        prefill_mode: prefill_mode(rc),
        standalone_prefill: cfg.prefill.standalone,
        prefill_only: cfg.prefill.only,
        skip_prefill: cfg.prefill.skip,
        prefill_contexts: Some(cfg.prefill.contexts.clone()),
        prefill_metric: Some(prefill_metric_name(cfg.prefill.metric).into()),
        burst_e2e_status: if rc.plan.run_burst {
            BurstE2eStatus::Enabled
        } else {
            BurstE2eStatus::NotRun
        },
        burst_request_count: cfg.burst.burst_request_count,
        burst_warmup_request_count: cfg.burst.burst_warmup_request_count,
        burst_requests_per_concurrency: cfg.burst.burst_requests_per_concurrency,
        decode_warmup_seconds: cfg.decode_warmup.as_secs_f64(),
        decode_warmup_context: st.warmup_context_done,
        decode_warmup_concurrency: u64::from(!cfg.decode_warmup.is_zero()),
        cell_warmup_timeout_seconds: cfg.cell_timeout.map(|d| d.as_secs_f64()).unwrap_or(0.0),
        cell_warmup_timeout_policy: TIMEOUT_POLICY.into(),
        stable_window_seconds: Some(cfg.stable_window.as_secs_f64()),
        show_capacity_limited_values: cfg.show_capacity_limited_values,
        max_tokens: cfg.max_tokens,
        temperature: cfg.temperature,
        ignore_eos: cfg.ignore_eos,
        max_total_tokens: rc.kv_budget,
        kv_budget_source: Some(rc.kv_source.into()),
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
        interrupted: state == RunState::Interrupted,
        startup_diagnostics_available: true,
        nvidia_p2p_override_effective: host.p2p_effective(),
        p2pmark_status: "not_run".into(),
        amd_fabric_status: "not_run".into(),
    }
}

/// The `metadata.prefill_metric` name of a prefill metric.
pub(crate) fn prefill_metric_name(m: PrefillMetric) -> &'static str {
    match m {
        PrefillMetric::Client => "client",
        PrefillMetric::Auto => "auto",
        PrefillMetric::Prometheus => "prometheus",
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

fn skip_result(spec: CellSpec, s: &PreSkip, mode: BenchmarkMode) -> CellResult {
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
    mode: BenchmarkMode,
) -> CellResult {
    CellResult {
        concurrency: spec.concurrency,
        context_tokens: spec.context,
        status,
        status_reason: reason,
        benchmark_mode: mode,
        aggregate_source: AggregateSource::None,
        total_tokens: needed,
        ..Default::default()
    }
}

/// A cell that failed by a deadline (or got no output at all): worth a health probe.
fn timed_out(r: &CellResult) -> bool {
    matches!(r.status, CellStatus::Error | CellStatus::Invalid)
        && r.error_kind
            .is_some_and(|k| k == FailureKind::NoOutput || k.is_timeout())
}

/// A cell not run because the server stopped answering.
fn server_gone_result(spec: CellSpec, why: &str, mode: BenchmarkMode) -> CellResult {
    let mut r = skipped(
        spec,
        CellStatus::Error,
        format!("not run: the server stopped answering ({why})"),
        None,
        mode,
    );
    r.error_kind = Some(FailureKind::ProbeTimeout);
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

/// Sizes one prompt per context; returns the targeting used: `/tokenize` exact when the server
/// has it (unless the estimate is asked for), else the calibrated (or cached) estimate. Fails
/// only when the calibration's first (tiny) request times out: the server does not answer
/// completions.
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
        let p = SizedPrompt {
            context: 0,
            input,
            exact_tokens: None,
            estimated_tokens: None,
        };
        out.insert(ctx, p);
    }
    let nonzero: Vec<u64> = contexts.iter().copied().filter(|&c| c > 0).collect();
    if nonzero.is_empty() {
        let none = Targeting::Estimate {
            chars_per_token: 0.0,
            overhead_tokens: 0.0,
            source: "none",
        };
        return Ok((none, out));
    }
    let tokenize_ok = cfg.targeting != TargetingMode::Estimate
        && tokenize_available(client, &info.model, endpoint, run_id, events).await;
    if tokenize_ok {
        events.log("startup token targeting: /tokenize exact");
        if size_all_exact(client, info, endpoint, run_id, &nonzero, events, &mut out).await {
            return Ok((Targeting::Exact, out));
        }
    } else if cfg.targeting == TargetingMode::Exact {
        events.log("startup warning: exact token targeting was requested but /tokenize is not available; using the estimate");
    }
    let max_ctx = nonzero.iter().copied().max().unwrap_or(0);
    let cal_ctx = cfg.calibration_context.min(max_ctx).max(256);
    let targeting = estimate_targeting(client, cfg, info, run_id, cal_ctx, events).await?;
    if let Targeting::Estimate {
        chars_per_token,
        overhead_tokens,
        ..
    } = targeting
    {
        for &ctx in &nonzero {
            let prefix = decode_prefix(run_id, ctx);
            let p = size_estimate(endpoint, &prefix, ctx, chars_per_token, overhead_tokens);
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

/// Whether `/tokenize` answers a small probe (a timeout is logged as a warning).
async fn tokenize_available(
    client: &HttpClient,
    model: &str,
    endpoint: Endpoint,
    run_id: &str,
    events: &EventSink,
) -> bool {
    let probe = build_input(endpoint, &decode_prefix(run_id, 0), 16, true);
    match tokenize_count(client, model, endpoint, &probe).await {
        Ok(_) => true,
        Err(e) => {
            if servebench_client::failure::of_http(&e) == FailureKind::RequestTimeout {
                events.log(format!(
                    "startup warning: /tokenize did not answer within {} (the probe timeout); sizing prompts by the estimate",
                    format_secs(client.policy().probe.as_secs_f64())
                ));
            }
            false
        }
    }
}

/// Sizes every context in `nonzero` through `/tokenize` into `out`; false (after a log line)
/// at the first failure: the caller falls back to the estimate.
async fn size_all_exact(
    client: &HttpClient,
    info: &ServerInfo,
    endpoint: Endpoint,
    run_id: &str,
    nonzero: &[u64],
    events: &EventSink,
    out: &mut BTreeMap<u64, SizedPrompt>,
) -> bool {
    for &ctx in nonzero {
        let prefix = decode_prefix(run_id, ctx);
        match size_exact(client, &info.model, endpoint, &prefix, ctx).await {
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
                return false;
            }
        }
    }
    true
}

/// The estimate's chars/token ratio: from the calibration cache, else calibrated at `cal_ctx`
/// tokens (and cached), else the uncalibrated 4.0 guess. Fails when the calibration's first
/// request times out.
async fn estimate_targeting(
    client: &HttpClient,
    cfg: &RunConfig,
    info: &ServerInfo,
    run_id: &str,
    cal_ctx: u64,
    events: &EventSink,
) -> Result<Targeting, RunError> {
    let endpoint = cfg.target.endpoint;
    let tid = template_id(endpoint);
    let key = CalibrationCache::key(&info.engine_name, &info.model, &tid);
    if let Some(e) = cfg.calibration_cache.get(&key) {
        events.log(format!(
            "startup calibrated: {:.2} chars/token, overhead {:.0} tokens (cached, source={})",
            e.chars_per_token,
            e.overhead_tokens,
            format_context(e.source_context)
        ));
        return Ok(Targeting::Estimate {
            chars_per_token: e.chars_per_token,
            overhead_tokens: e.overhead_tokens,
            source: "cached_estimate",
        });
    }
    events.log(format!(
        "startup calibrating padding text run={run_id} probe={}",
        format_context(cal_ctx)
    ));
    let prefix = calibration_prefix(run_id);
    match calibrate(client, &info.model, endpoint, &prefix, cal_ctx).await {
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
            Ok(Targeting::Estimate {
                chars_per_token: cpt,
                overhead_tokens: overhead,
                source: "calibrated_estimate",
            })
        }
        Err(e)
            if e.overhead_request
                && servebench_client::failure::of_http(&e.error) == FailureKind::RequestTimeout =>
        {
            events.log(format!("startup calibration failed: {e}"));
            Err(RunError::ProbeTimeout {
                what: "calibration request (a max_tokens=1 completion of the empty document)"
                    .into(),
                limit: client.policy().probe,
                detail: e.error.to_string(),
            })
        }
        Err(e) => {
            events.log(format!(
                "startup WARNING: calibration failed ({e}); prompts use an uncalibrated 4.0 chars/token guess, \
                 so context sizes are approximate (measured prompt tokens are still recorded per cell)"
            ));
            Ok(Targeting::Estimate {
                chars_per_token: 4.0,
                overhead_tokens: 0.0,
                source: "uncalibrated_estimate",
            })
        }
    }
}

/// The `methodology` block: how each layer's headline is computed.
pub fn methodology(
    prefill_present: bool,
    prefill_mode: PrefillMode,
    sustained_present: bool,
    burst_present: bool,
    burst_status: BurstE2eStatus,
) -> Methodology {
    Methodology {
        prefill: LayerMethod {
            name: "Prefill".into(),
            present: prefill_present,
            mode: Some(prefill_mode.as_str().into()),
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
            status: Some(burst_status.methodology_status().into()),
            formula: "sum(completion_tokens) / profiling_wall_time".into(),
            notes: "Finite client-facing request burst using final stream usage (no continuous usage, as AIPerf): N requests \
                    at concurrency C after W discarded warmup requests; the wall time runs from the first request to the end \
                    of the last. It includes admission, scheduling, prefill and completion; never compare it with sustained \
                    decode numbers."
                .into(),
        },
    }
}
