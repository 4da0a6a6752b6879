//! `servebench`: measure how fast an LLM inference server really is.
//!
//! A thin binary: flags → [`servebench_core::RunConfig`] → runner (events on a channel) →
//! [`servebench_results::Results`] → sinks (JSON file, final report). With no target, the
//! built-in simulator is started in-process so the first command works anywhere.

mod args;
mod checkpoint;
mod export_requests;
mod fault_args;
mod live;
mod publish;
mod rate_args;
mod registry_cmd;
mod registry_serve;
mod reports;
mod selftest;
mod session;
mod task;

use std::io::Write as _;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Parser;
use servebench_core::RunEvent;
use servebench_results::{CellStatus, Results};

use crate::args::{Cli, Command, RunArgs};

use crate::session::EXIT_USAGE;

fn main() -> ExitCode {
    #[cfg(unix)]
    session::sighup_ignored_at_start();
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            // clap prints help/version to stdout and errors to stderr with exit code 2.
            let _ = e.print();
            return ExitCode::from(e.exit_code().clamp(0, 255) as u8);
        }
    };
    // The measuring commands run on one worker thread (the multi-thread runtime's blocking pool
    // and `block_in_place` stay): with one task per stream and nothing to share, a second worker
    // only adds cross-thread wake-ups, work stealing and contended cache lines — ~20 % more
    // client CPU per SSE event in `scripts/bench-client-cost.sh` (docs/performance.md §2b). A
    // current-thread runtime was ~4 % cheaper still but held ~30 MiB more resident memory at
    // C = 1024 (tasks allocating in the main thread's malloc arena). `TOKIO_WORKER_THREADS`
    // overrides the worker count, as for tokio's default.
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if matches!(
        cli.command,
        Command::Run(_) | Command::Task(_) | Command::Selftest(_)
    ) && std::env::var_os("TOKIO_WORKER_THREADS").is_none()
    {
        builder.worker_threads(1);
    }
    let rt = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = rt.block_on(async move {
        match cli.command {
            Command::Run(a) => cmd_run(*a).await,
            Command::Sim(a) => cmd_sim(*a).await,
            Command::Report(a) => reports::cmd_report(a),
            Command::Compare(a) => reports::cmd_compare(a),
            Command::Validate(a) => cmd_validate(a),
            Command::Selftest(a) => selftest::run(a).await.map(|()| ExitCode::SUCCESS),
            Command::Task(a) => task::cmd_task(*a).await,
            Command::Registry(a) => registry_cmd::cmd_registry(a),
            Command::Publish(a) => publish::cmd_publish(*a),
        }
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "error: {}", one_line_error(&e));
            if e.downcast_ref::<args::UsageError>().is_some() {
                ExitCode::from(EXIT_USAGE)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

pub(crate) fn one_line_error(e: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in e.chain() {
        let s = cause.to_string();
        if !parts.iter().any(|p| p.contains(&s)) {
            parts.push(s);
        }
    }
    // no control characters or echoed secrets from a server's text reach the terminal (issue 17)
    servebench_client::error::server_text(&parts.join(": ")).into_owned()
}

/// A report for the terminal: every control character but the line feed (a server's model id
/// or error text with escape sequences) and every bidirectional formatting character replaced
/// by a space, and the registered secrets redacted
/// (issue 17).
fn terminal_text(text: &str) -> std::borrow::Cow<'_, str> {
    let bad = |c: char| (c.is_control() && c != '\n') || servebench_report::export::is_invisible(c);
    if !text.chars().any(bad) {
        return servebench_client::secrets::scrub(text);
    }
    let clean: String = text.chars().map(|c| if bad(c) { ' ' } else { c }).collect();
    std::borrow::Cow::Owned(servebench_client::secrets::scrub(&clean).into_owned())
}

async fn cmd_run(a: RunArgs) -> anyhow::Result<ExitCode> {
    // With --resume the results go back into the resumed file unless -o says otherwise.
    let output = a
        .output
        .clone()
        .or_else(|| a.resume.clone())
        .unwrap_or_else(|| args::DEFAULT_OUTPUT.into());
    let resumed = match &a.resume {
        Some(f) => match read_results(f).map_err(args::usage)? {
            (raw, AnyResults::Matrix(mut r)) => {
                rerun_impossible(&mut r, &raw, f);
                Some(r)
            }
            (_, AnyResults::Task(_)) => args::usage_bail!(
                "--resume {}: this is a `servebench task` results file; only `servebench run` results can be resumed",
                crate::shown(f)
            ),
        },
        None => None,
    };
    args::check_output_path(&output, "-o")?;
    let host = a.host_options()?;
    let percentiles = reports::percentiles(&a.percentiles)?;
    let exports = reports::run_exports(
        a.export_csv.as_ref(),
        a.export_md.as_ref(),
        a.export_html.as_ref(),
    );
    for (_, p, flag) in &exports {
        args::check_output_path(p, flag)?;
    }
    if let Some(p) = &a.export_requests {
        args::check_output_path(p, "--export-requests")?;
    }
    let mut outputs: Vec<(&std::path::Path, &str)> = vec![(output.as_path(), "-o")];
    outputs.extend(exports.iter().map(|(_, p, f)| (p.as_path(), *f)));
    if let Some(p) = &a.export_requests {
        outputs.push((p.as_path(), "--export-requests"));
    }
    args::check_distinct_outputs(&outputs)?;
    // Keep the embedded simulator alive for the whole run.
    let (mut cfg, sim) = a.to_config()?;
    let row_writer = match &a.export_requests {
        Some(p) => {
            let (tx, w) = export_requests::start(p)?;
            cfg.export = Some(tx);
            Some(w)
        }
        None => None,
    };
    let resume = match (&resumed, &a.resume) {
        (Some(file), Some(path)) => Some(resume_from(file, path, &mut cfg, sim.is_some())?),
        _ => None,
    };
    if let Some(sim) = &sim {
        session::announce_sim(&format!(
            "benchmarking the built-in simulator ({} personality) at {} (servebench sim --help describes its model)",
            sim.config().personality.engine_name(),
            sim.base_url()
        ));
    }
    let (display, note) = live::choose(a.display, a.quiet);
    if let Some(note) = note {
        eprintln!("servebench: {note}");
    }
    // A previous results file is never overwritten: it is renamed to NAME.1.json just before
    // the first checkpoint replaces it (with --resume, after it was read: the original is
    // kept); a run that fails to start leaves it untouched.
    let (session, rx) = session::Session::start(
        output,
        matches!(display, live::Display::Plain { .. })
            .then_some("finishing the current cell as skipped and writing partial results"),
    );
    let (live_tx, live_rx) = tokio::sync::mpsc::unbounded_channel::<RunEvent>();
    let events = session.events.clone();
    let view = live::start(
        display,
        live_rx,
        session.cancel.clone(),
        events.skip_control(),
    );
    let checkpoints = tokio::spawn(checkpoint::pump(rx, live_tx, session.output.clone()));
    let results =
        servebench_core::run_resuming(cfg, host, resume, events, session.cancel.clone()).await;
    // The event channel closes only when the session's sink is gone too.
    let output = session.output.clone();
    drop(session);
    // Every checkpoint is on disk before the final write replaces it.
    let _ = checkpoints.await;
    view.finish().await;
    drop(sim);
    // The run's config (every export sender) is gone: the writer ends at the last row.
    if let Some(w) = row_writer {
        w.finish(results.is_ok())?;
    }
    if let Err(servebench_core::RunError::Interrupted) = &results {
        eprintln!("servebench: {}", servebench_core::RunError::Interrupted);
        return Ok(ExitCode::from(session::EXIT_INTERRUPTED));
    }
    let results = results.map_err(run_error)?;
    finish_run(&results, &output, &exports, percentiles)
}

/// The rows of a file given to `--resume` that hold impossible values
/// ([`servebench_results::check::impossible_values`]: a cell with more completed requests than
/// it sent, an aggregate that is not its tokens over its window, …) are no finished
/// measurement: they are marked `error` here, so they run again like failed ones, and stderr
/// says so.
fn rerun_impossible(file: &mut Results, raw: &serde_json::Value, path: &std::path::Path) {
    let found = servebench_results::check::impossible_values(raw);
    let mut rerun = 0usize;
    let mut first = None;
    for f in &found {
        let mut parts = f.pointer.trim_start_matches('/').split('/');
        let (Some(list), Some(key)) = (parts.next(), parts.next()) else {
            continue;
        };
        let index = key.parse::<usize>().ok();
        let hit = match (list, index) {
            ("results", Some(i)) => file
                .results
                .get_mut(i)
                .map(|c| c.status = CellStatus::Error),
            ("burst_results", Some(i)) => file
                .burst_results
                .get_mut(i)
                .map(|c| c.status = CellStatus::Error),
            ("rate_results", Some(i)) => file
                .rate_results
                .get_mut(i)
                .map(|r| r.status = Some(CellStatus::Error)),
            ("prefill", _) => file
                .prefill
                .get_mut(key)
                .map(|r| r.status = Some(CellStatus::Error)),
            ("prefill_warm", _) => file
                .prefill_warm
                .get_mut(key)
                .map(|r| r.status = Some(CellStatus::Error)),
            _ => None,
        };
        if hit.is_some() {
            rerun += 1;
            first.get_or_insert_with(|| f.to_string());
        }
    }
    if let Some(first) = first {
        let _ = writeln!(
            std::io::stderr(),
            "servebench: --resume {}: {rerun} impossible values in finished rows (first: {first}); those rows run again (`servebench validate` lists them)",
            crate::shown(path)
        );
    }
}

/// Checks that `file` (the results given to `--resume`) measured what this run measures and
/// returns what it keeps; takes the file's model when none was given.
fn resume_from(
    file: &Results,
    path: &std::path::Path,
    cfg: &mut servebench_core::RunConfig,
    embedded: bool,
) -> anyhow::Result<servebench_core::resume::Resume> {
    if cfg.model.is_none() && !file.metadata.model.is_empty() {
        cfg.model = Some(file.metadata.model.clone());
    }
    servebench_core::resume::check_settings(file, cfg, embedded).map_err(|e| {
        args::usage(anyhow::anyhow!(
            "--resume {}: {}",
            crate::shown(path),
            args::resume_mismatch_message(&e)
        ))
    })?;
    let r = servebench_core::resume::Resume::from_results(file, &crate::shown(path));
    let rate_rows = if r.rate_rows.is_empty() {
        String::new()
    } else {
        format!(", {} open-loop rate rows", r.rate_rows.len())
    };
    let _ = writeln!(
        std::io::stderr(),
        "servebench: resuming {}: {} cells{rate_rows} and {} prefill rows kept, the missing and failed ones run again",
        crate::shown(path),
        r.cells.len() + r.burst_cells.len(),
        r.prefill.len()
    );
    Ok(r)
}

/// A run that could not start, worded for the command line (flag names included).
fn run_error(e: servebench_core::RunError) -> anyhow::Error {
    match e {
        servebench_core::RunError::Config(c) => args::usage(c),
        servebench_core::RunError::Probe(p) => args::probe_error(&p),
        servebench_core::RunError::ProbeTimeout {
            what,
            limit,
            detail,
        } => anyhow::anyhow!(
            "probe_timeout: the {what} got no answer within {} (--probe-timeout): {detail}",
            servebench_client::timeouts::format_secs(limit.as_secs_f64())
        ),
        servebench_core::RunError::ProbeUnanswered { limit, .. } => {
            anyhow::anyhow!("{e} (set by {})", fault_args::limit_flag(limit))
        }
        e => anyhow::anyhow!(e),
    }
}

/// The final write of a run's results, its exports and report, and the exit code. When the
/// file cannot be written, the report is still printed so the measurements are not lost.
fn finish_run(
    results: &Results,
    output: &checkpoint::OutputFile,
    exports: &[(
        servebench_report::export::ExportFormat,
        std::path::PathBuf,
        &'static str,
    )],
    percentiles: Vec<f64>,
) -> anyhow::Result<ExitCode> {
    // Every output below comes from the results with the registered secrets redacted.
    let results = &*checkpoint::scrubbed(results);
    let written = output
        .write(results)
        .with_context(|| format!("cannot write {}", crate::shown(output.path())));
    let mut opts = servebench_report::ReportOptions {
        show_capacity_limited_values: results.metadata.show_capacity_limited_values,
        json_path: None,
        percentiles,
    };
    let export_errors = reports::write_run_exports(results, exports, &opts);
    opts.json_path = written.is_ok().then(|| crate::shown(output.path()));
    let text = servebench_report::render_text(results, &opts);
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout);
    let _ = stdout.write_all(terminal_text(&text).as_bytes());
    let _ = stdout.flush();
    drop(stdout);
    written?;
    if !export_errors.is_empty() {
        anyhow::bail!(
            "the results JSON was written, but not every export: {}",
            export_errors.join("; ")
        );
    }
    Ok(exit_code(results))
}

/// Exit 3 when a matrix cell or an open-loop rate row failed (status `error` / `invalid`), 130
/// when the run was stopped, else 0.
fn exit_code(r: &Results) -> ExitCode {
    let bad = |s: CellStatus| matches!(s, CellStatus::Error | CellStatus::Invalid);
    let failed = r.results.iter().filter(|c| bad(c.status)).count();
    // the Burst / E2E layer's cells are cells too (break-it round 8: an invalid burst cell
    // exited 0)
    let failed_burst = r.burst_results.iter().filter(|c| bad(c.status)).count();
    let failed_rows = r
        .rate_results
        .iter()
        .filter(|row| row.status.is_some_and(bad))
        .count();
    let mut what = Vec::new();
    if failed > 0 {
        what.push(format!(
            "{failed} of {} cells failed (status error/invalid)",
            r.results.len()
        ));
    }
    // a --prefill-only run has only prefill rows: they are its cells (break-it round 8: every
    // row invalid, exit 0)
    if r.metadata.prefill_only {
        let rows: Vec<_> = r.prefill.values().chain(r.prefill_warm.values()).collect();
        let failed_prefill = rows.iter().filter(|p| p.status.is_some_and(bad)).count();
        if failed_prefill > 0 {
            what.push(format!(
                "{failed_prefill} of {} prefill rows failed (status error/invalid)",
                rows.len()
            ));
        }
    }
    if failed_burst > 0 {
        what.push(format!(
            "{failed_burst} of {} Burst / E2E cells failed (status error/invalid)",
            r.burst_results.len()
        ));
    }
    if failed_rows > 0 {
        what.push(format!(
            "{failed_rows} of {} request-rate rows failed (status error/invalid)",
            r.rate_results.len()
        ));
    }
    session::exit_code(
        r.metadata.interrupted,
        (!what.is_empty()).then(|| what.join("; ")),
    )
}

async fn cmd_sim(a: servebench_sim::SimConfig) -> anyhow::Result<ExitCode> {
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        // colours only on a terminal: a log file or journald gets plain text
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .try_init();
    a.validate().map_err(args::usage)?;
    let mut a = a;
    a.record_truth = false;
    // Bind first so the line shows the actual address (`--port 0` picks an ephemeral port).
    let sim = servebench_sim::Sim::start(a).await?;
    eprintln!(
        "servebench sim: OpenAI-compatible simulator on {} (model {:?}; Ctrl-C stops)",
        sim.base_url(),
        sim.config().model
    );
    tokio::signal::ctrl_c()
        .await
        .context("waiting for Ctrl-C")?;
    sim.shutdown();
    Ok(ExitCode::SUCCESS)
}

/// A results file of either kind.
pub(crate) enum AnyResults {
    /// `servebench run` (or `llm_decode_bench.py`) results.
    Matrix(Box<Results>),
    /// `servebench task` (or the old tool's completion-stats) results.
    Task(Box<servebench_results::task::TaskResults>),
}

/// Largest input file servebench reads (a results file, a record to import), bytes.
pub(crate) const MAX_INPUT_BYTES: u64 = 1 << 30;

/// The text of the input file `path`: a regular file (a FIFO, a device such as /dev/zero or a
/// directory is refused at once, never read or waited on) of at most [`MAX_INPUT_BYTES`].
pub(crate) fn read_input_file(path: &std::path::Path) -> anyhow::Result<String> {
    use std::io::Read as _;
    let shown = crate::shown(path);
    let meta = std::fs::metadata(path).with_context(|| format!("cannot read {shown}"))?;
    if !meta.is_file() {
        anyhow::bail!("cannot read {shown}: not a regular file (a directory, FIFO or device)");
    }
    if meta.len() > MAX_INPUT_BYTES {
        anyhow::bail!(
            "cannot read {shown}: {} bytes, over the {} MiB limit for input files",
            meta.len(),
            MAX_INPUT_BYTES >> 20
        );
    }
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_INPUT_BYTES + 1).read_to_string(&mut text))
        .with_context(|| format!("cannot read {shown}"))?;
    if text.len() as u64 > MAX_INPUT_BYTES {
        anyhow::bail!(
            "cannot read {shown}: it grew past the {} MiB limit for input files while it was read",
            MAX_INPUT_BYTES >> 20
        );
    }
    Ok(text)
}

pub(crate) fn read_results(
    path: &std::path::Path,
) -> anyhow::Result<(serde_json::Value, AnyResults)> {
    let text = read_input_file(path)?;
    let value = match serde_json::from_str::<serde_json::Value>(&text) {
        Ok(v) => v,
        Err(e) => servebench_results::extract_json_object(&text).ok_or_else(|| {
            anyhow::anyhow!("{} is not a results JSON file ({e})", crate::shown(path))
        })?,
    };
    if !value.is_object() {
        let what = match &value {
            serde_json::Value::Array(_) => "an array",
            serde_json::Value::Null => "null",
            serde_json::Value::String(_) => "a string",
            serde_json::Value::Number(_) => "a number",
            _ => "a boolean",
        };
        anyhow::bail!(
            "{} is not a servebench results file: its top level is {what}, not the JSON object servebench writes (metadata, results, summary_table, …)",
            crate::shown(path)
        );
    }
    if value.pointer("/metadata/mode").and_then(|m| m.as_str()) == Some("completion_stats") {
        let r = serde_json::from_value(value.clone()).with_context(|| {
            format!(
                "{} does not have the task results structure",
                crate::shown(path)
            )
        })?;
        return Ok((value, AnyResults::Task(Box::new(r))));
    }
    let results: Results = serde_json::from_value(value.clone())
        .with_context(|| format!("{} does not have the results structure", crate::shown(path)))?;
    Ok((value, AnyResults::Matrix(Box::new(results))))
}

/// What `servebench validate` finds in a results file: schema violations (one line each, with
/// where) and impossible values (`servebench_results::check`).
pub(crate) struct Problems {
    /// Schema violations.
    pub schema: Vec<String>,
    /// Values no measurement can have produced.
    pub impossible: Vec<servebench_results::check::ImpossibleValue>,
    /// `results` or `task results`.
    pub what: &'static str,
    /// The schema version checked against.
    pub version: &'static str,
}

impl Problems {
    /// No problem found.
    pub fn is_empty(&self) -> bool {
        self.schema.is_empty() && self.impossible.is_empty()
    }
}

/// Checks a results file's JSON against its schema and the impossible-value rules. Errors: the
/// embedded schema does not compile (a build defect).
/// `task`: a `servebench task` results file (its own schema), else a matrix results file.
pub(crate) fn problems(value: &serde_json::Value, task: bool) -> anyhow::Result<Problems> {
    let (schema_text, version, what) = match task {
        false => (
            servebench_results::SCHEMA_JSON,
            servebench_results::SCHEMA_VERSION,
            "results",
        ),
        true => (
            servebench_results::task::TASK_SCHEMA_JSON,
            servebench_results::task::TASK_SCHEMA_VERSION,
            "task results",
        ),
    };
    let schema: serde_json::Value = serde_json::from_str(schema_text)?;
    let validator = jsonschema::validator_for(&schema)
        .map_err(|e| anyhow::anyhow!("schema does not compile: {e}"))?;
    let schema_errors: Vec<String> = validator
        .iter_errors(value)
        .map(|e| {
            let at = e.instance_path().to_string();
            if at.is_empty() {
                format!("{e} (at the top level of the file)")
            } else {
                format!("{e} (at {at})")
            }
        })
        .collect();
    // Values no measurement can have produced (negative latencies or rates, percentiles out
    // of order, timestamps that do not parse): `servebench_results::check`.
    let impossible = servebench_results::check::impossible_values(value);
    Ok(Problems {
        schema: schema_errors,
        impossible,
        what,
        version,
    })
}

/// The keys of the JSON `text` that appear twice in one object, as impossible values (a file
/// that says two things: readers disagree on which counts).
pub(crate) fn duplicated(text: &str) -> Vec<servebench_results::check::ImpossibleValue> {
    servebench_results::check::duplicate_keys(text)
        .into_iter()
        .map(|pointer| servebench_results::check::ImpossibleValue {
            pointer,
            message: "this key appears more than once in its object (readers disagree on which one counts)".into(),
        })
        .collect()
}

fn cmd_validate(a: args::FileArgs) -> anyhow::Result<ExitCode> {
    let (value, kind) = read_results(&a.file)?;
    let Problems {
        schema: errors,
        mut impossible,
        what,
        version,
    } = problems(&value, matches!(kind, AnyResults::Task(_)))?;
    impossible.extend(duplicated(&read_input_file(&a.file)?));
    if errors.is_empty() && impossible.is_empty() {
        println!("{}: valid ({what} schema {version})", crate::shown(&a.file));
        return Ok(ExitCode::SUCCESS);
    }
    for e in errors.iter().take(20) {
        eprintln!("{}: {e}", crate::shown(&a.file));
    }
    for p in impossible.iter().take(20) {
        eprintln!("{}: impossible value at {p}", crate::shown(&a.file));
    }
    if !errors.is_empty() {
        let n = errors.len();
        let plural = if n == 1 { "" } else { "s" };
        eprintln!(
            "error: {} violates the {what} schema ({n} problem{plural})",
            crate::shown(&a.file)
        );
    }
    if !impossible.is_empty() {
        let n = impossible.len();
        let plural = if n == 1 { "" } else { "s" };
        eprintln!(
            "error: {} has {n} impossible value{plural} (negative latency or rate, percentiles out of order, a timestamp that does not parse, or a key given twice)",
            crate::shown(&a.file)
        );
    }
    Ok(ExitCode::FAILURE)
}

/// A path for a terminal line or a message: its control and invisible characters escaped
/// (`\u{1b}`), so a file name cannot retitle the terminal or forge a line (break-it round 8).
pub(crate) fn shown(p: &std::path::Path) -> String {
    servebench_results::escape_for_terminal(&p.display().to_string()).into_owned()
}
