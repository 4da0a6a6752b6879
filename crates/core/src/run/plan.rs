//! The run's plan, fixed after the startup probe (before prompts are sized): the matrix in seed
//! order with each cell's up-front skip, the hidden warmup's context, the prefill layer's
//! contexts and the contexts to size prompts for; the [`RunEvent::Plan`] event and the startup
//! log lines about the server, the KV budget and the prefill layer.

use servebench_results::{format_context, BenchmarkMode, DecodeMode, PromptCache};
use servebench_stats::thousands;

use super::config::RunConfig;
use crate::events::{EventSink, PlannedCell, RunEvent, RunPlan};
use crate::plan::{matrix_order, pre_skip, CellSpec, PreSkip};
use crate::probe::{resolve_kv_budget, KvDecision, ServerInfo};

/// What the run will do, fixed after the startup probe (before prompts are sized).
#[derive(Clone, Debug)]
pub(super) struct Plan {
    /// The matrix in seed order, each cell with its up-front skip decision.
    pub(super) cells: Vec<(CellSpec, Option<PreSkip>)>,
    /// The primary layer: sustained cells or request-count cells.
    pub(super) mode: DecodeMode,
    /// A Burst / E2E matrix runs after the primary one.
    pub(super) run_burst: bool,
    /// Context of the hidden C=1 decode warmup (the largest runnable one), if it runs.
    pub(super) warmup_ctx: Option<u64>,
    /// Standalone prefill profile (`standalone` or `only` in [`super::PrefillConfig`]).
    pub(super) standalone: bool,
    /// The prefill layer's contexts.
    pub(super) prefill: PrefillPlan,
    /// Every context a prompt is sized for, ascending.
    pub(super) sizing: Vec<u64>,
    /// Prompt building of request-count and Burst / E2E cells.
    pub(super) burst_cache: PromptCache,
    /// Prompt building of sustained cells.
    pub(super) sustained_cache: PromptCache,
}

/// The prefill layer's contexts (tokens).
#[derive(Clone, Debug, Default)]
pub(super) struct PrefillPlan {
    /// Contexts asked for that fit the model (standalone: the profile).
    pub(super) requested: Vec<u64>,
    /// Contexts asked for that do not fit the model, with the reason.
    pub(super) skipped: Vec<(u64, String)>,
    /// Integrated mode: asked-for contexts without a decode cell (a cold request alone).
    pub(super) scout_only: Vec<u64>,
    /// Integrated mode: decode contexts whose first cell takes the cold sample.
    pub(super) integrated: Vec<u64>,
}

impl Plan {
    /// The `benchmark_mode` of a layer's cells.
    pub(super) fn cell_mode(&self, layer: Layer) -> BenchmarkMode {
        match layer {
            Layer::Primary => self.mode.cell_mode(),
            Layer::Burst => BenchmarkMode::BurstE2e,
        }
    }

    /// How a layer's prompts are built.
    pub(super) fn cache(&self, layer: Layer) -> PromptCache {
        match (layer, self.mode) {
            (Layer::Primary, DecodeMode::Duration) => self.sustained_cache,
            _ => self.burst_cache,
        }
    }
}

/// Which matrix a loop runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Layer {
    /// `results[]`: sustained cells, or request-count cells.
    Primary,
    /// `burst_results[]`: the Burst / E2E matrix after the sustained one.
    Burst,
}

/// Plans the run: matrix order and skips, the warmup context, the prefill contexts and the
/// contexts to size prompts for.
pub(super) fn plan_run(cfg: &RunConfig, info: &ServerInfo, kv_budget: u64) -> Plan {
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
pub(super) fn emit_plan(
    events: &EventSink,
    cfg: &RunConfig,
    info: &ServerInfo,
    kv: &KvDecision,
    plan: &Plan,
) {
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
pub(super) fn log_prefill_plan(events: &EventSink, cfg: &RunConfig, plan: &Plan) {
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
pub(super) fn log_server(events: &EventSink, info: &ServerInfo) {
    events.log(format!("benchmark start engine={}", info.engine_name));
    events.log(format!(
        "startup engine {}{} models={}",
        info.engine_name,
        info.engine_version
            .as_deref()
            .map(|v| format!(" {v}"))
            .unwrap_or_default(),
        crate::probe::summarize_ids_of(&info.models, info.models_total, 10)
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
pub(super) fn kv_budget(cfg: &RunConfig, info: &ServerInfo, events: &EventSink) -> KvDecision {
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
