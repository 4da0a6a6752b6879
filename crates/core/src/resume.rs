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
use crate::runner::RunConfig;

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

/// The settings a resume compares, as (flag, value in the file, value of this run). Values are
/// rendered as text so the error can show them.
pub fn checked_settings(file: &Results, cfg: &RunConfig) -> Vec<(&'static str, String, String)> {
    let m = &file.metadata;
    let list = |v: &[u64]| {
        v.iter()
            .map(|x| x.to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    let opt_f = |v: Option<f64>| v.map_or("server default".to_string(), |t| t.to_string());
    let secs = |v: f64| format!("{}", (v * 1e6).round() / 1e6);
    let arg = |k: &str| {
        file.startup_diagnostics
            .get("args")
            .and_then(|a| a.get(k))
            .cloned()
    };
    let new_arg = |k: &str| cfg.args_snapshot.get(k).cloned();
    let show = |v: Option<serde_json::Value>| match v {
        None | Some(serde_json::Value::Null) => "unset".to_string(),
        Some(serde_json::Value::String(s)) => s,
        Some(v) => v.to_string(),
    };
    let prefill_metric = |p: crate::prefill::PrefillMetric| match p {
        crate::prefill::PrefillMetric::Client => "client",
        crate::prefill::PrefillMetric::Auto => "auto",
        crate::prefill::PrefillMetric::Prometheus => "prometheus",
    };
    let mut out = vec![
        (
            "--endpoint",
            m.endpoint.clone(),
            cfg.target.endpoint.as_str().to_string(),
        ),
        (
            "--concurrency",
            list(&m.concurrency_levels),
            list(&cfg.concurrency),
        ),
        ("--contexts", list(&m.context_lengths), list(&cfg.contexts)),
        (
            "--duration",
            secs(m.duration_per_test),
            secs(cfg.duration.as_secs_f64()),
        ),
        (
            "--max-tokens",
            m.max_tokens.to_string(),
            cfg.max_tokens.to_string(),
        ),
        (
            "--respect-eos (ignore_eos)",
            m.ignore_eos.to_string(),
            cfg.ignore_eos.to_string(),
        ),
        (
            "--temperature",
            opt_f(m.temperature),
            opt_f(cfg.temperature),
        ),
        (
            "--stable-seconds",
            m.stable_window_seconds.map_or("unset".into(), secs),
            secs(cfg.stable_window.as_secs_f64()),
        ),
        (
            "--request-count",
            m.request_count.to_string(),
            cfg.burst.request_count.to_string(),
        ),
        (
            "--warmup-request-count",
            m.warmup_request_count.to_string(),
            cfg.burst.warmup_request_count.to_string(),
        ),
        (
            "--run-burst",
            m.run_burst.to_string(),
            cfg.burst.run_burst.to_string(),
        ),
        (
            "--burst-request-count",
            m.burst_request_count.to_string(),
            cfg.burst.burst_request_count.to_string(),
        ),
        (
            "--burst-warmup-request-count",
            m.burst_warmup_request_count.to_string(),
            cfg.burst.burst_warmup_request_count.to_string(),
        ),
        (
            "--burst-requests-per-concurrency",
            m.burst_requests_per_concurrency.to_string(),
            cfg.burst.burst_requests_per_concurrency.to_string(),
        ),
        (
            "--dcp-size",
            m.dcp_size.to_string(),
            cfg.dcp_size.to_string(),
        ),
        (
            "--skip-prefill",
            m.skip_prefill.to_string(),
            cfg.prefill.skip.to_string(),
        ),
        (
            "--standalone-prefill",
            m.standalone_prefill.to_string(),
            cfg.prefill.standalone.to_string(),
        ),
        (
            "--prefill-only",
            m.prefill_only.to_string(),
            cfg.prefill.only.to_string(),
        ),
        (
            "--prefill-contexts",
            m.prefill_contexts.as_deref().map_or("unset".into(), &list),
            list(&cfg.prefill.contexts),
        ),
        (
            "--prefill-metric",
            m.prefill_metric.clone().unwrap_or_else(|| "unset".into()),
            prefill_metric(cfg.prefill.metric).to_string(),
        ),
    ];
    // Settings only servebench records (in startup_diagnostics.args).
    for (flag, key) in [
        ("--kv-budget", "kv_budget"),
        ("--token-targeting", "token_targeting"),
        ("--prefill-duration", "prefill_duration"),
    ] {
        if let (Some(a), Some(b)) = (arg(key), new_arg(key)) {
            out.push((flag, show(Some(a)), show(Some(b))));
        }
    }
    out
}

/// Refuses a resume that would mix incomparable numbers. `embedded` says whether this run
/// benchmarks the built-in simulator (its URL changes between runs: a new ephemeral port).
///
/// Errors: one line naming the first differing setting, the file's value and this run's.
pub fn check_settings(file: &Results, cfg: &RunConfig, embedded: bool) -> Result<(), String> {
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
        return Err(format!(
            "the target differs: the file measured {}, this run targets {}",
            label(file_embedded, &m.base_url),
            label(embedded, &cfg.target.base_url)
        ));
    }
    if let Some(model) = &cfg.model {
        if !m.model.is_empty() && model != &m.model {
            return Err(format!(
                "--model differs: the file has {:?}, this run {:?}",
                m.model, model
            ));
        }
    }
    for (flag, a, b) in checked_settings(file, cfg) {
        if a != b {
            return Err(format!(
                "{flag} differs: the file has {a}, this run {b} (give the same flags as the run being resumed)"
            ));
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
