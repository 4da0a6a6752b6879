//! `servebench run --resume FILE`: which cells and prefill rows of an earlier results file are
//! kept, and whether the new run measures the same thing.
//!
//! A cell is **kept** (carried into the new results unchanged, not run again) when its status is
//! `ok`, `skipped_capacity` or `skipped_context`; cells that are missing, `error`, `invalid` or
//! `skipped_user` (not run because the run was interrupted) are run again. A cold prefill row is
//! kept, with its warm-prefix row, when its status is `ok` (or, in files without a row status,
//! when it has a tok/s value); other prefill rows are measured again.
//!
//! Resuming only makes sense when the kept numbers and the new ones are comparable, so
//! [`check_settings`] refuses a resume when the target, the model or any setting that changes
//! the numbers differs ([`checked_settings`] lists them).

use indexmap::IndexMap;
use servebench_results::{CellResult, CellStatus, PrefillRow, Results, ResumedFrom};

use crate::plan::CellSpec;
use crate::run::config::RunConfig;

/// Cells and prefill rows carried over from an earlier results file.
#[derive(Clone, Debug, Default)]
pub struct Resume {
    /// Kept cells of the primary layer (`results[]`).
    pub cells: Vec<CellResult>,
    /// Kept Burst / E2E cells (`burst_results[]`).
    pub burst_cells: Vec<CellResult>,
    /// Kept cold prefill rows, keyed like `Results::prefill`.
    pub prefill: IndexMap<String, PrefillRow>,
    /// Warm-prefix rows of the kept prefill contexts.
    pub prefill_warm: IndexMap<String, PrefillRow>,
    /// Kept open-loop rows (`rate_results[]` with status ok or skipped_context, not rate-search
    /// probes: a search runs again as a whole).
    pub rate_rows: Vec<servebench_results::RateRow>,
    /// Where they came from (`kept_cells` / `kept_prefill` are filled by the runner with what
    /// it actually carried over).
    pub from: ResumedFrom,
}

/// Whether a cell with this status is carried over by a resume (measured or deterministically
/// skipped) rather than run again.
pub fn keeps(status: CellStatus) -> bool {
    matches!(
        status,
        CellStatus::Ok | CellStatus::SkippedCapacity | CellStatus::SkippedContext
    )
}

/// Whether a cold prefill row is carried over by a resume.
pub fn keeps_prefill(row: &PrefillRow) -> bool {
    match row.status {
        Some(s) => s == CellStatus::Ok,
        None => row.tok_per_sec.is_some(),
    }
}

/// `"C=8 ctx=1024"`: how kept cells are named in `resumed_from.kept_cells`.
pub fn cell_label(c: &CellResult, burst: bool) -> String {
    format!(
        "{}C={} ctx={}",
        if burst { "burst " } else { "" },
        c.concurrency,
        c.context_tokens
    )
}

impl Resume {
    /// The kept cells and prefill rows of `r` (read from `file`, as given on the command line).
    pub fn from_results(r: &Results, file: &str) -> Resume {
        let prefill: IndexMap<String, PrefillRow> = r
            .prefill
            .iter()
            .filter(|(_, row)| keeps_prefill(row))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let prefill_warm = r
            .prefill_warm
            .iter()
            .filter(|(k, _)| prefill.contains_key(*k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        Resume {
            cells: r
                .results
                .iter()
                .filter(|c| keeps(c.status))
                .cloned()
                .collect(),
            burst_cells: r
                .burst_results
                .iter()
                .filter(|c| keeps(c.status))
                .cloned()
                .collect(),
            prefill,
            prefill_warm,
            rate_rows: r
                .rate_results
                .iter()
                .filter(|x| x.search_step.is_none() && x.status.is_some_and(keeps))
                .cloned()
                .collect(),
            from: ResumedFrom {
                file: file.to_string(),
                run_id: r.metadata.run_id.clone(),
                timestamp: r.metadata.timestamp.clone(),
                kept_cells: Vec::new(),
                kept_prefill: Vec::new(),
            },
        }
    }

    /// The kept result of the cell `spec` (burst layer when `burst`).
    pub fn cell(&self, spec: CellSpec, burst: bool) -> Option<&CellResult> {
        let list = if burst {
            &self.burst_cells
        } else {
            &self.cells
        };
        list.iter()
            .find(|c| c.concurrency == spec.concurrency && c.context_tokens == spec.context)
    }

    /// Whether the cold prefill row of context `ctx` (tokens) is kept.
    pub fn has_prefill(&self, ctx: u64) -> bool {
        self.prefill.contains_key(&ctx.to_string())
    }
}

/// A setting a resume compares (see [`checked_settings`]). The CLI names each by its flag;
/// [`Setting::name`] is the results field (or `startup_diagnostics.args` key) it is read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Setting {
    /// `metadata.endpoint`.
    Endpoint,
    /// `metadata.concurrency_levels`.
    Concurrency,
    /// `metadata.context_lengths`.
    Contexts,
    /// `metadata.duration_per_test`, s.
    Duration,
    /// `metadata.max_tokens`.
    MaxTokens,
    /// `metadata.ignore_eos`.
    IgnoreEos,
    /// `metadata.temperature`.
    Temperature,
    /// `metadata.stable_window_seconds`.
    StableWindow,
    /// `metadata.request_count`.
    RequestCount,
    /// `metadata.warmup_request_count`.
    WarmupRequestCount,
    /// `metadata.run_burst`.
    RunBurst,
    /// `metadata.burst_request_count`.
    BurstRequestCount,
    /// `metadata.burst_warmup_request_count`.
    BurstWarmupRequestCount,
    /// `metadata.burst_requests_per_concurrency`.
    BurstRequestsPerConcurrency,
    /// `metadata.dcp_size`.
    DcpSize,
    /// `metadata.skip_prefill`.
    SkipPrefill,
    /// `metadata.standalone_prefill`.
    StandalonePrefill,
    /// `metadata.prefill_only`.
    PrefillOnly,
    /// `metadata.prefill_contexts`.
    PrefillContexts,
    /// `metadata.prefill_metric`.
    PrefillMetric,
    /// `startup_diagnostics.args.kv_budget`.
    KvBudget,
    /// `startup_diagnostics.args.token_targeting`.
    TokenTargeting,
    /// `startup_diagnostics.args.prefill_duration`.
    PrefillDuration,
    /// `startup_diagnostics.args.open_loop` (the open-loop flags).
    OpenLoop,
    /// `metadata.model`.
    Model,
}

impl Setting {
    /// Every setting, in the order they are compared.
    pub const ALL: [Setting; 25] = [
        Setting::Endpoint,
        Setting::Concurrency,
        Setting::Contexts,
        Setting::Duration,
        Setting::MaxTokens,
        Setting::IgnoreEos,
        Setting::Temperature,
        Setting::StableWindow,
        Setting::RequestCount,
        Setting::WarmupRequestCount,
        Setting::RunBurst,
        Setting::BurstRequestCount,
        Setting::BurstWarmupRequestCount,
        Setting::BurstRequestsPerConcurrency,
        Setting::DcpSize,
        Setting::SkipPrefill,
        Setting::StandalonePrefill,
        Setting::PrefillOnly,
        Setting::PrefillContexts,
        Setting::PrefillMetric,
        Setting::KvBudget,
        Setting::TokenTargeting,
        Setting::PrefillDuration,
        Setting::OpenLoop,
        Setting::Model,
    ];

    /// The results field (or argument key) the setting is read from.
    pub fn name(self) -> &'static str {
        match self {
            Setting::Endpoint => "endpoint",
            Setting::Concurrency => "concurrency_levels",
            Setting::Contexts => "context_lengths",
            Setting::Duration => "duration_per_test",
            Setting::MaxTokens => "max_tokens",
            Setting::IgnoreEos => "ignore_eos",
            Setting::Temperature => "temperature",
            Setting::StableWindow => "stable_window_seconds",
            Setting::RequestCount => "request_count",
            Setting::WarmupRequestCount => "warmup_request_count",
            Setting::RunBurst => "run_burst",
            Setting::BurstRequestCount => "burst_request_count",
            Setting::BurstWarmupRequestCount => "burst_warmup_request_count",
            Setting::BurstRequestsPerConcurrency => "burst_requests_per_concurrency",
            Setting::DcpSize => "dcp_size",
            Setting::SkipPrefill => "skip_prefill",
            Setting::StandalonePrefill => "standalone_prefill",
            Setting::PrefillOnly => "prefill_only",
            Setting::PrefillContexts => "prefill_contexts",
            Setting::PrefillMetric => "prefill_metric",
            Setting::KvBudget => "kv_budget",
            Setting::TokenTargeting => "token_targeting",
            Setting::PrefillDuration => "prefill_duration",
            Setting::OpenLoop => "open_loop",
            Setting::Model => "model",
        }
    }
}

/// Why a resume is refused ([`check_settings`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ResumeMismatch {
    /// The file measured another server (or the built-in simulator, or not).
    #[error("the target differs: the file measured {file}, this run targets {run}")]
    Target {
        /// What the file measured (URL or `the built-in simulator`).
        file: String,
        /// What this run targets.
        run: String,
    },
    /// A setting that changes the numbers differs.
    #[error("{} differs: the file has {file}, this run {run}", .setting.name())]
    Setting {
        /// Which setting.
        setting: Setting,
        /// Its value in the file, as text.
        file: String,
        /// Its value in this run, as text.
        run: String,
    },
}

/// The settings a resume compares, as (setting, value in the file, value of this run). Values
/// are rendered as text so the error can show them.
pub fn checked_settings(file: &Results, cfg: &RunConfig) -> Vec<(Setting, String, String)> {
    let m = &file.metadata;
    let list = |v: &[u64]| {
        v.iter()
            .map(|x| x.to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    let opt_f = |v: Option<f64>| v.map_or("server default".to_string(), |t| t.to_string());
    let secs = |v: f64| format!("{}", (v * 1e6).round() / 1e6);
    let b = &cfg.burst;
    let p = &cfg.prefill;
    let n = |a: u64, b: u64| (a.to_string(), b.to_string());
    let f = |a: bool, b: bool| (a.to_string(), b.to_string());
    let pairs = [
        (
            Setting::Endpoint,
            (m.endpoint.clone(), cfg.target.endpoint.as_str().to_string()),
        ),
        (
            Setting::Concurrency,
            (list(&m.concurrency_levels), list(&cfg.concurrency)),
        ),
        (
            Setting::Contexts,
            (list(&m.context_lengths), list(&cfg.contexts)),
        ),
        (
            Setting::Duration,
            (secs(m.duration_per_test), secs(cfg.duration.as_secs_f64())),
        ),
        (Setting::MaxTokens, n(m.max_tokens, cfg.max_tokens)),
        (Setting::IgnoreEos, f(m.ignore_eos, cfg.ignore_eos)),
        (
            Setting::Temperature,
            (opt_f(m.temperature), opt_f(cfg.temperature)),
        ),
        (
            Setting::StableWindow,
            (
                m.stable_window_seconds.map_or("unset".into(), secs),
                secs(cfg.stable_window.as_secs_f64()),
            ),
        ),
        (Setting::RequestCount, n(m.request_count, b.request_count)),
        (
            Setting::WarmupRequestCount,
            n(m.warmup_request_count, b.warmup_request_count),
        ),
        (Setting::RunBurst, f(m.run_burst, b.run_burst)),
        (
            Setting::BurstRequestCount,
            n(m.burst_request_count, b.burst_request_count),
        ),
        (
            Setting::BurstWarmupRequestCount,
            n(m.burst_warmup_request_count, b.burst_warmup_request_count),
        ),
        (
            Setting::BurstRequestsPerConcurrency,
            n(
                m.burst_requests_per_concurrency,
                b.burst_requests_per_concurrency,
            ),
        ),
        (Setting::DcpSize, n(m.dcp_size, cfg.dcp_size)),
        (Setting::SkipPrefill, f(m.skip_prefill, p.skip)),
        (
            Setting::StandalonePrefill,
            f(m.standalone_prefill, p.standalone),
        ),
        (Setting::PrefillOnly, f(m.prefill_only, p.only)),
        (
            Setting::PrefillContexts,
            (
                m.prefill_contexts.as_deref().map_or("unset".into(), &list),
                list(&p.contexts),
            ),
        ),
        (
            Setting::PrefillMetric,
            (
                m.prefill_metric.clone().unwrap_or_else(|| "unset".into()),
                crate::run::config::prefill_metric_name(p.metric).to_string(),
            ),
        ),
    ];
    let mut out: Vec<(Setting, String, String)> =
        pairs.into_iter().map(|(s, (a, b))| (s, a, b)).collect();
    out.extend(recorded_args(file, cfg));
    out
}

/// Settings only servebench records (in `startup_diagnostics.args`), compared when both runs
/// recorded them.
fn recorded_args(file: &Results, cfg: &RunConfig) -> Vec<(Setting, String, String)> {
    let show = |v: &serde_json::Value| match v {
        serde_json::Value::Null => "unset".to_string(),
        serde_json::Value::String(s) => s.clone(),
        v => v.to_string(),
    };
    let old_args = file.startup_diagnostics.get("args");
    [
        Setting::KvBudget,
        Setting::TokenTargeting,
        Setting::PrefillDuration,
        Setting::OpenLoop,
    ]
    .into_iter()
    .filter_map(|s| {
        let a = old_args.and_then(|a| a.get(s.name()))?;
        let b = cfg.args_snapshot.get(s.name())?;
        Some((s, show(a), show(b)))
    })
    .collect()
}

/// Refuses a resume that would mix incomparable numbers. `embedded` says whether this run
/// benchmarks the built-in simulator (its URL changes between runs: a new ephemeral port).
///
/// Errors: the first difference: the target, the model, or a setting with the file's value and
/// this run's.
pub fn check_settings(
    file: &Results,
    cfg: &RunConfig,
    embedded: bool,
) -> Result<(), ResumeMismatch> {
    let m = &file.metadata;
    let file_embedded = file
        .startup_diagnostics
        .get("args")
        .and_then(|a| a.get("embedded_simulator"))
        .and_then(|v| v.as_bool())
        .unwrap_or(false);
    if embedded != file_embedded || (!embedded && m.base_url != cfg.target.base_url) {
        let label = |e: bool, url: &str| {
            if e {
                "the built-in simulator".to_string()
            } else {
                url.to_string()
            }
        };
        return Err(ResumeMismatch::Target {
            file: label(file_embedded, &m.base_url),
            run: label(embedded, &cfg.target.base_url),
        });
    }
    if let Some(model) = &cfg.model {
        if !m.model.is_empty() && model != &m.model {
            return Err(ResumeMismatch::Setting {
                setting: Setting::Model,
                file: format!("{:?}", m.model),
                run: format!("{model:?}"),
            });
        }
    }
    for (setting, file, run) in checked_settings(file, cfg) {
        if file != run {
            return Err(ResumeMismatch::Setting { setting, file, run });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(c: u64, ctx: u64, status: CellStatus) -> CellResult {
        CellResult {
            concurrency: c,
            context_tokens: ctx,
            status,
            ..Default::default()
        }
    }

    #[test]
    fn keeps_measured_and_skipped_cells_and_ok_prefill_rows() {
        let mut r = Results::default();
        r.metadata.run_id = "abc".into();
        r.results = vec![
            cell(1, 0, CellStatus::Ok),
            cell(2, 0, CellStatus::Invalid),
            cell(4, 0, CellStatus::Error),
            cell(8, 0, CellStatus::SkippedUser),
            cell(16, 0, CellStatus::SkippedCapacity),
            cell(1, 1024, CellStatus::SkippedContext),
        ];
        let ok = PrefillRow {
            status: Some(CellStatus::Ok),
            tok_per_sec: Some(1000.0),
            ..Default::default()
        };
        let failed = PrefillRow {
            status: Some(CellStatus::Error),
            ..Default::default()
        };
        let old_tool = PrefillRow {
            tok_per_sec: Some(900.0),
            ..Default::default()
        };
        r.prefill.insert("1024".into(), ok.clone());
        r.prefill.insert("2048".into(), failed.clone());
        r.prefill.insert("4096".into(), old_tool);
        r.prefill_warm.insert("1024".into(), ok);
        r.prefill_warm.insert("2048".into(), failed);
        let k = Resume::from_results(&r, "f.json");
        let spec = |c, ctx| CellSpec {
            concurrency: c,
            context: ctx,
        };
        for (c, ctx, kept) in [
            (1, 0, true),
            (2, 0, false),
            (4, 0, false),
            (8, 0, false),
            (16, 0, true),
            (1, 1024, true),
            (32, 0, false),
        ] {
            assert_eq!(
                k.cell(spec(c, ctx), false).is_some(),
                kept,
                "C={c} ctx={ctx}"
            );
            assert!(k.cell(spec(c, ctx), true).is_none(), "no burst cells");
        }
        assert!(k.has_prefill(1024) && k.has_prefill(4096) && !k.has_prefill(2048));
        assert_eq!(
            k.prefill_warm.keys().collect::<Vec<_>>(),
            vec!["1024"],
            "warm rows follow their cold row"
        );
        assert_eq!(k.from.run_id, "abc");
        assert_eq!(k.from.file, "f.json");
        assert_eq!(
            cell_label(&r.results[0], true),
            "burst C=1 ctx=0".to_string()
        );
    }
}
