//! The results of a run from what it has finished so far: [`assemble`] (for every checkpoint and
//! the final results) with its `metadata`, `methodology`, `summary_table` and `resumed_from`
//! blocks; and the placeholder rows of cells and prefill contexts that were not run (skipped up
//! front, stopped, or the server gone).

use std::time::Instant;

use serde_json::Value;
use servebench_results::{
    AggregateSource, BenchmarkMode, BurstE2eStatus, CellResult, CellStatus, DecodeMode,
    FailureKind, JsonObject, LayerMethod, Metadata, Methodology, PrefillMethod, PrefillMode,
    PrefillRow, Results, ResumedFrom, RunState, SCHEMA_VERSION, TOOL_NAME,
};

use super::config::prefill_metric_name;
use super::{Ctx, Partial};
use crate::events::RunEvent;
use crate::host::HostRun;
use crate::plan::{CellSpec, PreSkip, TIMEOUT_POLICY};
use crate::prompt::Targeting;

impl Ctx<'_> {
    /// Emits the results so far as a [`RunEvent::Checkpoint`] (`run_state: running`; the run's
    /// hardware summary comes only with the final results).
    pub(super) fn checkpoint(&self, st: &Partial, host: &HostRun) {
        let r = assemble(self, st, RunState::Running, host, JsonObject::new());
        self.events.emit(RunEvent::Checkpoint(Box::new(r)));
    }

    /// The final results after the last phase (or the stop).
    pub(super) fn finish(&self, st: &Partial, host: &mut HostRun, t_run: Instant) -> Results {
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

/// The results of a run from what it finished so far (`st`), in state `state`.
pub(super) fn assemble(
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

pub(super) fn prefill_skip_row(reason: String) -> PrefillRow {
    PrefillRow {
        method: PrefillMethod::Skipped,
        status: Some(CellStatus::SkippedContext),
        status_reason: Some(reason),
        ..Default::default()
    }
}

pub(super) fn skip_result(spec: CellSpec, s: &PreSkip, mode: BenchmarkMode) -> CellResult {
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

pub(super) fn skipped(
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

/// A cell not run because the server stopped answering.
pub(super) fn server_gone_result(spec: CellSpec, why: &str, mode: BenchmarkMode) -> CellResult {
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
