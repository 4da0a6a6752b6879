//! `servebench report` (any results file as text, Markdown, CSV, HTML or JSON), `servebench
//! compare` and the output files of `servebench run` (results JSON and `--export-*` files,
//! never overwriting a previous file).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use servebench_report::compare::{self, CompareOptions};
use servebench_report::compare_metrics;
use servebench_report::export::{ExportFormat, ExportManager};
use servebench_report::{cells, ReportOptions};
use servebench_results::Results;

use crate::args::{usage, usage_bail};
use crate::{read_results, AnyResults};

/// Exit code of `compare --fail-if-slower` when a cell is slower beyond the threshold.
pub const EXIT_SLOWER: u8 = 4;

/// Output format of `servebench report`.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum ReportFormat {
    /// The plain-text report (as printed at the end of a run).
    Text,
    /// Markdown tables.
    #[value(alias = "markdown")]
    Md,
    /// One row per cell (columns: docs/exports.md).
    Csv,
    /// One self-contained HTML file with plots (no network needed to read it).
    Html,
    /// The results JSON (servebench's format; converts an old tool's file).
    Json,
}

impl ReportFormat {
    fn export(self) -> ExportFormat {
        match self {
            ReportFormat::Text => ExportFormat::Text,
            ReportFormat::Md => ExportFormat::Markdown,
            ReportFormat::Csv => ExportFormat::Csv,
            ReportFormat::Html => ExportFormat::Html,
            ReportFormat::Json => ExportFormat::Json,
        }
    }
}

/// Flags of `servebench report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Path of the results JSON file (servebench's or llm_decode_bench.py's).
    pub file: PathBuf,
    /// Output format.
    #[arg(long, short = 'f', value_enum, default_value_t = ReportFormat::Text)]
    pub format: ReportFormat,
    /// Write to this file instead of standard output (an existing file is replaced).
    #[arg(long, short)]
    pub output: Option<PathBuf>,
    /// Percentiles of TTFT and ITL shown in the tables, comma-separated (0-100).
    #[arg(long, default_value = "50")]
    pub percentiles: String,
    /// Show the tok/s of capacity-limited cells instead of ∅.
    #[arg(long)]
    pub show_capacity_limited_values: bool,
}

/// Output format of `servebench compare`.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum CompareFormat {
    /// Plain text.
    Text,
    /// Markdown tables.
    #[value(alias = "markdown")]
    Md,
    /// One self-contained HTML file with overlaid plots.
    Html,
}

/// Flags of `servebench compare`.
#[derive(Debug, Args)]
pub struct CompareArgs {
    /// Results files: the first is the baseline A, each other one is compared with it.
    #[arg(required = true, num_args = 2.., value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// Output format.
    #[arg(long, short = 'f', value_enum, default_value_t = CompareFormat::Text)]
    pub format: CompareFormat,
    /// Write to this file instead of standard output (an existing file is replaced).
    #[arg(long, short)]
    pub output: Option<PathBuf>,
    /// Exit with code 4 when any cell's aggregate tok/s is SLOWER than the baseline's with its
    /// whole 95 % interval (widened by --noise-pct for run-to-run noise) at or below -PCT percent,
    /// or when a cell the baseline measured was not measured by the other run (invalid, error,
    /// skipped or absent) (for CI regression gates). Per metric: METRIC=PCT[,METRIC=PCT…] with
    /// METRIC one of tps, per_user, ttft, ttst, itl, itl_gap_p99, e2e, prefill, prefill_ttft
    /// (itl_gap_p99 and the prefill metrics have no interval: their point change must pass PCT
    /// plus --noise-pct).
    #[arg(long, value_name = "[METRIC=]PCT", allow_negative_numbers = true)]
    pub fail_if_slower: Option<String>,
    /// Smallest difference in percent that is marked faster/slower, even when its 95 % interval
    /// excludes 0 (run-to-run noise that the interval cannot see).
    #[arg(
        long,
        default_value_t = 2.0,
        value_name = "PCT",
        allow_negative_numbers = true
    )]
    pub noise_pct: f64,
}

/// Parses `--percentiles` as a usage error on bad input.
pub fn percentiles(s: &str) -> anyhow::Result<Vec<f64>> {
    cells::parse_percentiles(s).map_err(|e| usage(anyhow::anyhow!("--percentiles: {e}")))
}

/// Writes `bytes` to `path`, or to standard output when `path` is `None`.
fn emit(bytes: &[u8], path: Option<&Path>) -> anyhow::Result<()> {
    match path {
        Some(p) => servebench_report::write_atomic(p, bytes)
            .with_context(|| format!("cannot write {}", crate::shown(p))),
        None => {
            let mut out = std::io::stdout().lock();
            out.write_all(bytes)
                .and_then(|()| out.flush())
                .context("cannot write to standard output")
        }
    }
}

/// Warns on stderr (one line) when a file that is about to be shown does not pass `servebench
/// validate`: a report of a hand-edited or damaged file must not look like a clean one.
fn warn_if_invalid(path: &Path, value: &serde_json::Value, task: bool) {
    let Ok(p) = crate::problems(value, task) else {
        return;
    };
    if p.is_empty() {
        return;
    }
    let first = p.schema.first().cloned().or_else(|| {
        p.impossible
            .first()
            .map(|v| format!("impossible value at {v}"))
    });
    let first: String = first.unwrap_or_default().chars().take(200).collect();
    let first = servebench_report::export::without_controls(first).replace(['\n', '\r', '\t'], " ");
    let count = |n: usize, what: &str| match n {
        1 => format!("1 {what}"),
        n => format!("{n} {what}s"),
    };
    let mut found = Vec::new();
    if !p.schema.is_empty() {
        found.push(count(p.schema.len(), "schema problem"));
    }
    if !p.impossible.is_empty() {
        found.push(count(p.impossible.len(), "impossible value"));
    }
    eprintln!(
        "warning: {} does not pass `servebench validate` ({}; first: {first}); it is shown as written",
        crate::shown(path),
        found.join(", ")
    );
}

/// What a results file says about the server, the client's arguments, the engine launch and
/// the event log, secrets redacted again (`servebench_host::secrets`): servebench writes them
/// redacted, but a file written by an older version, another tool or a hand edit may not be
/// (break-it round 9: a report showed `base_url` credentials, `args.api_key` and an event-log
/// bearer token as written). Publish redacts the same fields it copies.
fn redact_for_display(r: &mut Results) {
    use servebench_host::secrets;
    let md = &mut r.metadata;
    md.server = secrets::redact_urls(&md.server);
    md.base_url = secrets::redact_urls(&md.base_url);
    for obj in [&mut r.startup_diagnostics, &mut r.engine_launch] {
        let mut v = serde_json::Value::Object(std::mem::take(obj));
        secrets::redact_json(&mut v);
        if let serde_json::Value::Object(m) = v {
            *obj = m;
        }
    }
    for line in &mut r.event_log {
        *line = secrets::redact_text(line);
    }
}

/// Reads a matrix results file (`servebench run` or llm_decode_bench.py), with a one-line error
/// for anything else; a file that does not validate is read with a warning.
fn read_matrix(path: &Path) -> anyhow::Result<Results> {
    let (value, kind) = read_results(path)?;
    let has = |k: &str, arr: bool| {
        value
            .get(k)
            .is_some_and(|v| if arr { v.is_array() } else { v.is_object() })
    };
    match kind {
        AnyResults::Matrix(r) if has("metadata", false) && has("results", true) => {
            warn_if_invalid(path, &value, false);
            let mut r = *r;
            redact_for_display(&mut r);
            Ok(r)
        }
        AnyResults::Task(_) => anyhow::bail!(
            "{} is a `servebench task` results file; only `servebench report` with the text format reads it",
            crate::shown(path)
        ),
        _ => anyhow::bail!(
            "{} is not a servebench (or llm_decode_bench) results file: it has no `metadata` object and `results` list",
            crate::shown(path)
        ),
    }
}

/// `servebench report FILE [--format F] [-o OUT]`.
pub fn cmd_report(a: ReportArgs) -> anyhow::Result<ExitCode> {
    let pcts = percentiles(&a.percentiles)?;
    if let Some(o) = &a.output {
        crate::args::check_output_path(o, "-o")?;
        // `report in.json -o in.json` would replace the results with their report.
        crate::args::check_distinct_outputs(&[(a.file.as_path(), "the input file"), (o, "-o")])?;
    }
    let (value, kind) = read_results(&a.file)?;
    if let AnyResults::Task(r) = &kind {
        let has = value.get("metadata").is_some_and(|v| v.is_object())
            && value.get("runs").is_some_and(|v| v.is_array());
        if !has {
            anyhow::bail!(
                "{} is not a servebench (or llm_decode_bench) results file: it has no `metadata` object and `runs` list",
                crate::shown(&a.file)
            );
        }
        warn_if_invalid(&a.file, &value, true);
        if a.format != ReportFormat::Text {
            usage_bail!(
                "{} is a `servebench task` results file: only --format text is available for it",
                crate::shown(&a.file)
            );
        }
        emit(
            servebench_report::export::without_controls(crate::task::render_report(r, None))
                .as_bytes(),
            a.output.as_deref(),
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    let r = read_matrix(&a.file)?;
    let opts = ReportOptions {
        show_capacity_limited_values: a.show_capacity_limited_values,
        json_path: None,
        percentiles: pcts,
    };
    let bytes = a.format.export().render(&r, &opts)?;
    emit(&bytes, a.output.as_deref())?;
    Ok(ExitCode::SUCCESS)
}

/// `servebench compare A B [C …]`.
pub fn cmd_compare(a: CompareArgs) -> anyhow::Result<ExitCode> {
    let gate = match &a.fail_if_slower {
        Some(g) => Some(
            compare_metrics::Gate::parse(g)
                .map_err(|e| usage(anyhow::anyhow!("--fail-if-slower: {e}")))?,
        ),
        None => None,
    };
    if !(a.noise_pct.is_finite() && a.noise_pct >= 0.0) {
        usage_bail!("--noise-pct must be a percentage ≥ 0 (got {})", a.noise_pct);
    }
    if let Some(o) = &a.output {
        crate::args::check_output_path(o, "-o")?;
        for f in &a.files {
            crate::args::check_distinct_outputs(&[(f.as_path(), "an input file"), (o, "-o")])?;
        }
    }
    let mut runs: Vec<(String, Results)> = Vec::new();
    for f in &a.files {
        runs.push((crate::shown(f), read_matrix(f)?));
    }
    let opts = CompareOptions {
        noise_pct: a.noise_pct,
        ..CompareOptions::default()
    };
    let cmps: Vec<compare::Comparison> = runs[1..]
        .iter()
        .map(|(n, r)| compare::compare((&runs[0].0, &runs[0].1), (n, r), &opts))
        .collect();
    let text = match a.format {
        CompareFormat::Text => compare::render_text(&cmps, &opts),
        CompareFormat::Md => compare::render_markdown(&cmps, &opts),
        CompareFormat::Html => {
            let refs: Vec<(&str, &Results)> = runs.iter().map(|(n, r)| (n.as_str(), r)).collect();
            compare::render_html(&refs, &cmps, &opts)?
        }
    };
    // model ids and error texts from the servers, without control characters
    let text = servebench_report::export::without_controls(text);
    emit(text.as_bytes(), a.output.as_deref())?;
    for c in &cmps {
        for w in &c.warnings {
            eprintln!("warning: {} and {} may not be comparable: {w}", c.a, c.b);
        }
    }
    if let Some(gate) = gate {
        let mut slower: Vec<String> = Vec::new();
        for (metric, pct) in &gate.limits {
            let found: Vec<String> = cmps
                .iter()
                .flat_map(|c| {
                    // tps has an interval: the same rule as `slower_than`
                    let rows = c.worse_than(*metric, *pct, opts.noise_pct);
                    rows.into_iter().map(move |(d, change)| {
                        format!(
                            "{} {} C={} ctx={} {change:+.1}%",
                            c.b,
                            d.layer,
                            d.concurrency,
                            servebench_results::format_context(d.context),
                        )
                    })
                })
                .collect();
            if !found.is_empty() {
                slower.push(format!(
                    "{} worse by at least {}% beyond the noise in {} cell(s): {}",
                    metric.label(),
                    cells::fmt_num(*pct),
                    found.len(),
                    found.join("; ")
                ));
            }
        }
        let lost: Vec<String> = cmps
            .iter()
            .flat_map(|c| {
                c.lost_cells().into_iter().map(move |d| {
                    format!(
                        "{} {} C={} ctx={}: {} in the baseline, {} here",
                        c.b,
                        d.layer,
                        d.concurrency,
                        servebench_results::format_context(d.context),
                        d.status.0,
                        d.status.1
                    )
                })
            })
            .collect();
        if !lost.is_empty() {
            eprintln!(
                "servebench compare: {} cell(s) measured in the baseline were not measured: {}",
                lost.len(),
                lost.join("; ")
            );
        }
        for line in &slower {
            eprintln!("servebench compare: {line}");
        }
        if !slower.is_empty() || !lost.is_empty() {
            return Ok(ExitCode::from(EXIT_SLOWER));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The export files of `servebench run` (`--export-csv`, `--export-md`, `--export-html`).
pub fn run_exports(
    csv: Option<&PathBuf>,
    md: Option<&PathBuf>,
    html: Option<&PathBuf>,
) -> Vec<(ExportFormat, PathBuf, &'static str)> {
    let mut v = Vec::new();
    for (f, p, flag) in [
        (ExportFormat::Csv, csv, "--export-csv"),
        (ExportFormat::Markdown, md, "--export-md"),
        (ExportFormat::Html, html, "--export-html"),
    ] {
        if let Some(p) = p {
            v.push((f, p.clone(), flag));
        }
    }
    v
}

/// Keeps a previous file at `path` (renamed to `NAME.1.EXT`, …) and says so on stderr.
pub fn keep_previous(path: &Path) {
    match servebench_report::rotate_existing(path) {
        Ok(Some(kept)) => eprintln!(
            "servebench: {} already existed; the previous file is kept as {}",
            crate::shown(path),
            crate::shown(&kept)
        ),
        Ok(None) => {}
        Err(e) => eprintln!(
            "servebench: cannot keep the previous {} ({e}); it will be replaced",
            crate::shown(path)
        ),
    }
}

/// Writes the run's exports through one [`ExportManager`], each after keeping a previous file;
/// returns the errors as lines.
pub fn write_run_exports(
    results: &Results,
    exports: &[(ExportFormat, PathBuf, &'static str)],
    opts: &ReportOptions,
) -> Vec<String> {
    let mut manager = ExportManager::new();
    for (format, path, _) in exports {
        keep_previous(path);
        manager.add(*format, path.clone());
    }
    manager
        .write_all(results, opts)
        .into_iter()
        .map(|(path, e)| {
            let flag = exports
                .iter()
                .find(|(_, p, _)| *p == path)
                .map_or("export", |(_, _, f)| *f);
            format!(
                "{flag} {}: {}",
                crate::shown(&path),
                crate::one_line_error(&e)
            )
        })
        .collect()
}
