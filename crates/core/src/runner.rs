//! The whole run: startup checks, prompt sizing, hidden warmup, the matrix, and the results.
//!
//! Order (seed spec §3.7, sustained layer): probe the server → size one prompt per context →
//! hidden C=1 decode warmup at the largest runnable context → cells in matrix order, each either
//! skipped up front (with its reason) or run by [`crate::cell::run_sustained_cell`]. Ctrl-C
//! (the `cancel` token) ends the running cell and marks every remaining cell `skipped_user`; the
//! finished cells are kept.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use servebench_results::{
    format_context, CellResult, CellStatus, JsonObject, LayerMethod, Metadata, Methodology,
    PrefillRow, Results, SCHEMA_VERSION, TOOL_NAME,
};
use tokio_util::sync::CancellationToken;

use crate::cell::{run_sustained_cell, CellJob, CellSettings};
use crate::error::ConfigError;
use crate::events::{EventSink, RunEvent};
use crate::plan::{
    auto_ready_timeout_s, matrix_order, pre_skip, CellSpec, PreSkip, TIMEOUT_POLICY,
};
use crate::probe::{probe_server, ServerInfo};
use crate::prompt::{
    build_input, calibrate, calibration_prefix, decode_prefix, make_run_id, size_estimate,
    size_exact, streaming_payload, template_id, tokenize_count, warmup_prefix, CalibrationCache,
    CalibrationEntry, PromptInput, RequestOptions, SizedPrompt, Targeting,
};
use crate::target::{HttpClient, Target};

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
    /// KV budget, tokens (0 = unknown: no capacity skipping).
    pub kv_budget: u64,
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
    /// Do not record prefill rows.
    pub skip_prefill: bool,
    /// Snapshot of the arguments for `startup_diagnostics.args`.
    pub args_snapshot: Value,
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

struct Plan {
    cells: Vec<(CellSpec, Option<PreSkip>)>,
}

/// Runs the benchmark and returns the results (partial when `cancel` fired).
pub async fn run(
    cfg: RunConfig,
    events: Arc<EventSink>,
    cancel: CancellationToken,
) -> Result<Results, RunError> {
    let t_run = Instant::now();
    let run_id = make_run_id(cfg.seed);
    let client =
        HttpClient::new(cfg.target.clone()).map_err(|e| RunError::Startup(e.to_string()))?;
    let startup = startup_diagnostics(&cfg);

    events.log(format!(
        "startup server={} run_id={run_id}",
        cfg.target.base_url
    ));
    let info: ServerInfo = probe_server(&client, cfg.model.as_deref())
        .await
        .map_err(|e| RunError::Startup(e.to_string()))?;
    events.log(format!(
        "startup engine {}{} models={:?}",
        info.engine,
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
        events.log(format!("startup warning: {w}"));
    }
    if cfg.kv_budget > 0 {
        events.log(format!(
            "startup KV cache budget manual: {} tokens",
            thousands(cfg.kv_budget)
        ));
    }

    let plan = Plan {
        cells: matrix_order(&cfg.concurrency, &cfg.contexts)
            .into_iter()
            .map(|c| {
                let skip = pre_skip(c, cfg.max_tokens, info.max_model_len, cfg.kv_budget);
                (c, skip)
            })
            .collect(),
    };
    let runnable_contexts: Vec<u64> = {
        let mut v: Vec<u64> = plan
            .cells
            .iter()
            .filter(|(_, s)| s.is_none())
            .map(|(c, _)| c.context)
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    };
    // Hidden warmup context: the largest context that fits at C = 1.
    let warmup_ctx = if cfg.decode_warmup.is_zero() {
        None
    } else {
        cfg.contexts
            .iter()
            .copied()
            .filter(|&x| {
                pre_skip(
                    CellSpec {
                        concurrency: 1,
                        context: x,
                    },
                    cfg.max_tokens,
                    info.max_model_len,
                    cfg.kv_budget,
                )
                .is_none()
            })
            .max()
    };

    // Prompts.
    let opts = RequestOptions {
        model: info.model.clone(),
        endpoint: cfg.target.endpoint,
        max_tokens: cfg.max_tokens,
        ignore_eos: cfg.ignore_eos,
        temperature: cfg.temperature,
        continuous_usage: true,
    };
    let mut sizing_contexts = runnable_contexts.clone();
    if let Some(w) = warmup_ctx {
        if !sizing_contexts.contains(&w) {
            sizing_contexts.push(w);
        }
    }
    let (targeting, prompts) = tokio::select! {
        r = size_prompts(&client, &cfg, &info, &run_id, &sizing_contexts, &events) => r,
        _ = cancel.cancelled() => (Targeting::Estimate { chars_per_token: 4.0, overhead_tokens: 0.0, source: "none" }, BTreeMap::new()),
    };
    events.log("startup startup preparation done");

    let settings = CellSettings {
        path: cfg.target.endpoint.path(),
        duration: cfg.duration,
        stable_window: cfg.stable_window,
        max_tokens: cfg.max_tokens,
        ignore_eos: cfg.ignore_eos,
    };
    let ready_timeout = |ctx: u64| {
        cfg.cell_timeout
            .unwrap_or_else(|| Duration::from_secs_f64(auto_ready_timeout_s(ctx)))
    };
    let scout_opts = RequestOptions {
        max_tokens: 1,
        continuous_usage: false,
        ..opts.clone()
    };

    // Hidden decode warmup.
    let mut warmup_context_done = 0;
    if let (Some(wctx), false) = (warmup_ctx, cancel.is_cancelled()) {
        if let Some(p) = prompts.get(&wctx) {
            let input = rebuild_with_prefix(p, &warmup_prefix(&run_id, wctx), cfg.target.endpoint);
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
                decode_body: streaming_payload(&opts, &input),
                scout_body: (wctx > 0).then(|| streaming_payload(&scout_opts, &input)),
                ready_timeout: ready_timeout(wctx),
                index: 0,
                total: plan.cells.len(),
                warmup: true,
            };
            let out = run_sustained_cell(&client, &wsettings, job, &events, &cancel).await;
            if !out.interrupted {
                events.log(format!(
                    "decode warmup done C=1 ctx={} ({})",
                    format_context(wctx),
                    out.result.status.as_str()
                ));
                warmup_context_done = wctx;
            }
            pause(cfg.cell_pause, &cancel).await;
        }
    }

    // The matrix.
    let total = plan.cells.len();
    let mut results: Vec<CellResult> = Vec::with_capacity(total);
    let mut prefill: indexmap::IndexMap<String, PrefillRow> = indexmap::IndexMap::new();
    for (i, (spec, skip)) in plan.cells.iter().enumerate() {
        let index = i + 1;
        let mut result = if cancel.is_cancelled() {
            skipped(
                *spec,
                CellStatus::SkippedUser,
                "not run: the run was interrupted by the user (Ctrl-C)".into(),
                None,
            )
        } else if let Some(s) = skip {
            let r = match s {
                PreSkip::Context { reason } => {
                    skipped(*spec, CellStatus::SkippedContext, reason.clone(), None)
                }
                PreSkip::Capacity {
                    reason,
                    needed,
                    deficit,
                } => {
                    let mut r = skipped(
                        *spec,
                        CellStatus::SkippedCapacity,
                        reason.clone(),
                        Some(*needed),
                    );
                    r.timeout_reason = deficit.clone();
                    r.capacity_limited = true;
                    r
                }
            };
            events.log(format!(
                "cell skipped C={} ctx={}: {}",
                spec.concurrency,
                format_context(spec.context),
                r.status_reason
            ));
            r
        } else if let Some(p) = prompts.get(&spec.context) {
            let job = CellJob {
                spec: *spec,
                decode_body: streaming_payload(&opts, &p.input),
                scout_body: (spec.context > 0).then(|| streaming_payload(&scout_opts, &p.input)),
                ready_timeout: ready_timeout(spec.context),
                index,
                total,
                warmup: false,
            };
            let out = run_sustained_cell(&client, &settings, job, &events, &cancel).await;
            if let (Some(scout), false) = (&out.scout, cfg.skip_prefill) {
                let key = spec.context.to_string();
                if !prefill.contains_key(&key) && scout.error.is_none() {
                    let row = integrated_prefill_row(scout, spec.context);
                    events.emit(RunEvent::Prefill {
                        context: spec.context,
                        row: Box::new(row.clone()),
                    });
                    prefill.insert(key, row);
                }
            }
            let mut r = out.result;
            if r.prompt_tokens.is_none() {
                r.prompt_tokens = p.exact_tokens;
            }
            r
        } else {
            skipped(
                *spec,
                CellStatus::Error,
                "no prompt could be built for this context".into(),
                None,
            )
        };
        if result.status == CellStatus::SkippedUser && result.status_reason.is_empty() {
            result.status_reason = "skipped by the user".into();
        }
        events.emit(RunEvent::CellFinished {
            index,
            result: Box::new(result.clone()),
        });
        let ran = !result.status.is_skipped();
        results.push(result);
        if ran && index < total {
            pause(cfg.cell_pause, &cancel).await;
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

    // Results.
    let mut summary_table: indexmap::IndexMap<String, indexmap::IndexMap<String, f64>> =
        indexmap::IndexMap::new();
    for r in results.iter().filter(|r| r.status == CellStatus::Ok) {
        if let Some(v) = r.aggregate_tps {
            summary_table
                .entry(r.context_tokens.to_string())
                .or_default()
                .insert(r.concurrency.to_string(), v);
        }
    }
    let (cpt, overhead_label) = match &targeting {
        Targeting::Estimate {
            chars_per_token, ..
        } => (Some(*chars_per_token), targeting.label()),
        Targeting::Exact => (None, targeting.label()),
    };
    let metadata = Metadata {
        version: env!("CARGO_PKG_VERSION").into(),
        tool: TOOL_NAME.into(),
        engine: info.engine.clone(),
        engine_version: info.engine_version.clone(),
        model: info.model.clone(),
        server: cfg.target.server_label.clone(),
        base_url: cfg.target.base_url.clone(),
        endpoint: cfg.target.endpoint.as_str().into(),
        timestamp: chrono::Local::now()
            .format("%Y-%m-%dT%H:%M:%S%.6f")
            .to_string(),
        decode_mode: "duration".into(),
        primary_decode_layer: "sustained_decode".into(),
        duration_per_test: cfg.duration.as_secs_f64(),
        prefill_mode: if cfg.skip_prefill {
            "skipped"
        } else {
            "integrated_decode_scout"
        }
        .into(),
        skip_prefill: cfg.skip_prefill,
        burst_e2e_status: "not_run_use_--run-burst".into(),
        burst_requests_per_concurrency: 5,
        decode_warmup_seconds: cfg.decode_warmup.as_secs_f64(),
        decode_warmup_context: warmup_context_done,
        decode_warmup_concurrency: u64::from(!cfg.decode_warmup.is_zero()),
        cell_warmup_timeout_seconds: cfg.cell_timeout.map(|d| d.as_secs_f64()).unwrap_or(0.0),
        cell_warmup_timeout_policy: TIMEOUT_POLICY.into(),
        stable_window_seconds: Some(cfg.stable_window.as_secs_f64()),
        show_capacity_limited_values: cfg.show_capacity_limited_values,
        max_tokens: cfg.max_tokens,
        temperature: cfg.temperature,
        ignore_eos: cfg.ignore_eos,
        max_total_tokens: cfg.kv_budget,
        dcp_size: 0,
        metrics_available: false,
        metrics_warning:
            "server metrics are not read by this build; readiness uses client streams only".into(),
        concurrency_levels: cfg.concurrency.clone(),
        context_lengths: cfg.contexts.clone(),
        max_model_len: info.max_model_len,
        prompt_targeting: overhead_label.into(),
        chars_per_token: cpt,
        run_id: run_id.clone(),
        seed: cfg.seed,
        interrupted,
        startup_diagnostics_available: true,
        nvidia_p2p_override_effective: None,
        p2pmark_status: "not_run".into(),
        amd_fabric_status: "not_run".into(),
        ..Default::default()
    };
    let not_run = || {
        let mut m = JsonObject::new();
        m.insert("status".into(), Value::String("not_run".into()));
        m
    };
    Ok(Results {
        schema_version: SCHEMA_VERSION.into(),
        metadata,
        startup_diagnostics: startup,
        nvidia_p2p_override: not_run(),
        p2pmark: not_run(),
        amd_fabric: not_run(),
        hardware_run_summary: JsonObject::new(),
        event_log: events.lines(),
        methodology: methodology(
            !prefill.is_empty(),
            cfg.skip_prefill,
            results.iter().any(|r| r.status == CellStatus::Ok),
        ),
        prefill,
        results,
        summary_table,
        burst_results: Vec::new(),
        burst_summary_table: indexmap::IndexMap::new(),
    })
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

fn skipped(spec: CellSpec, status: CellStatus, reason: String, needed: Option<u64>) -> CellResult {
    CellResult {
        concurrency: spec.concurrency,
        context_tokens: spec.context,
        status,
        status_reason: reason,
        benchmark_mode: "duration".into(),
        aggregate_source: "none".into(),
        total_tokens: needed,
        ..Default::default()
    }
}

/// The integrated prefill sample of a context: the scout's prompt tokens / TTFT (client).
fn integrated_prefill_row(scout: &servebench_sse::RequestRecord, _ctx: u64) -> PrefillRow {
    let ttft = scout.ttft_s();
    let prompt = scout.prompt_tokens;
    let tps = match (ttft, prompt) {
        (Some(t), Some(p)) if t > 0.0 => Some(p as f64 / t),
        _ => None,
    };
    PrefillRow {
        ttft_seconds: ttft,
        prefill_seconds: ttft,
        tok_per_sec: tps,
        client_ttft_seconds: ttft,
        client_tok_per_sec: tps,
        prompt_tokens: prompt,
        samples: 1,
        method: "integrated_scout".into(),
        server_validation: JsonObject::new(),
        hardware_summary: JsonObject::new(),
        status: Some(CellStatus::Ok),
        status_reason: None,
    }
}

fn rebuild_with_prefix(
    p: &SizedPrompt,
    prefix: &str,
    endpoint: crate::target::Endpoint,
) -> PromptInput {
    build_input(endpoint, prefix, p.input.padding_chars, p.context > 0)
}

/// Sizes one prompt per context; returns the targeting used.
async fn size_prompts(
    client: &HttpClient,
    cfg: &RunConfig,
    info: &ServerInfo,
    run_id: &str,
    contexts: &[u64],
    events: &EventSink,
) -> (Targeting, BTreeMap<u64, SizedPrompt>) {
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
        return (
            Targeting::Estimate {
                chars_per_token: 0.0,
                overhead_tokens: 0.0,
                source: "none",
            },
            out,
        );
    }
    // Exact targeting when /tokenize answers.
    let tokenize_ok = cfg.targeting != TargetingMode::Estimate && {
        let probe = build_input(endpoint, &decode_prefix(run_id, 0), 16, true);
        tokenize_count(client, &info.model, endpoint, &probe)
            .await
            .is_ok()
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
            return (Targeting::Exact, out);
        }
    } else if cfg.targeting == TargetingMode::Exact {
        events.log("startup warning: --token-targeting exact requested but /tokenize is not available; using the estimate");
    }
    // Estimate targeting.
    let tid = template_id(endpoint);
    let key = CalibrationCache::key(&info.engine, &info.model, &tid);
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
                    engine: info.engine.clone(),
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
            out.insert(ctx, p);
        }
    }
    (targeting, out)
}

fn startup_diagnostics(cfg: &RunConfig) -> JsonObject {
    let mut env = serde_json::Map::new();
    for (k, v) in std::env::vars() {
        if ["NCCL_", "VLLM_", "SGLANG_", "CUDA_", "OMP_"]
            .iter()
            .any(|p| k.starts_with(p))
        {
            env.insert(k, Value::String(v));
        }
    }
    let v = json!({
        "version": env!("CARGO_PKG_VERSION"),
        "tool": TOOL_NAME,
        "server_url": cfg.target.base_url,
        "hostname": hostname(),
        "uname": uname(),
        "os": std::env::consts::OS,
        "arch": std::env::consts::ARCH,
        "client_cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        "env": Value::Object(env),
        "args": cfg.args_snapshot,
    });
    match v {
        Value::Object(m) => m,
        _ => JsonObject::new(),
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn uname() -> String {
    #[cfg(unix)]
    {
        // SAFETY: uname fills the zeroed struct we own.
        let mut u: libc::utsname = unsafe { std::mem::zeroed() };
        if unsafe { libc::uname(&mut u) } == 0 {
            let f = |a: &[libc::c_char]| {
                let bytes: Vec<u8> = a
                    .iter()
                    .take_while(|&&c| c != 0)
                    .map(|&c| c as u8)
                    .collect();
                String::from_utf8_lossy(&bytes).into_owned()
            };
            return format!(
                "{} {} {} {} {}",
                f(&u.sysname),
                f(&u.nodename),
                f(&u.release),
                f(&u.version),
                f(&u.machine)
            );
        }
    }
    String::new()
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
    skip_prefill: bool,
    sustained_present: bool,
) -> Methodology {
    Methodology {
        prefill: LayerMethod {
            name: "Prefill".into(),
            present: prefill_present,
            mode: Some(if skip_prefill { "skipped" } else { "integrated_decode_scout" }.into()),
            status: None,
            formula: "prompt_tokens / TTFT".into(),
            notes: "Client-side: prompt tokens reported by the server's usage divided by the time to the first output token \
                    of a cold max_tokens=1 request. Integrated mode uses the scout request each decode context sends anyway \
                    (its prompt carries a fresh per-run, per-context prefix, so it is not served from the prefix cache)."
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
                    tokens and that held for the stable window; requests straddling the window edges are credited with \
                    exactly what they produced inside it. This is the engine's steady-state decode throughput, the signal \
                    for kernel, parallelism, speculative-decoding and scheduler tuning."
                .into(),
        },
        burst_e2e_decode: LayerMethod {
            name: "Burst / E2E Decode".into(),
            present: false,
            mode: None,
            status: Some("not run; use --run-burst".into()),
            formula: "sum(completion_tokens) / profiling_wall_time".into(),
            notes: "Finite client-facing request burst using final stream usage. It includes admission, scheduling, prefill \
                    and completion; never compare it with sustained decode numbers."
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
