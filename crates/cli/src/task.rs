//! `servebench task`: task profiles — a prompt or a JSONL dataset with expected answers, fixed
//! or adaptive concurrency, completion-token statistics and correctness
//! ([`servebench_core::task`]; docs/tasks.md).

use std::fmt::Write as _;
use std::io::{Read as _, Write as _};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context as _};
use clap::{ArgGroup, Args, ValueEnum};
use serde_json::json;
use servebench_core::plan::parse_concurrency;
use servebench_core::task::{
    parse_dataset, run_task, ScoreSource, Summary, TaskConfig, TaskItem, TaskResults, TaskRun,
    TaskSummary, TASK_SCHEMA_JSON,
};
use servebench_sim::{Sim, SimConfig};

use crate::args::{check_output_path, usage, usage_bail, TargetArgs};
use crate::session::{self, Session};

/// Fraction of a dataset's items the embedded simulator answers correctly (by design).
const SIM_DATASET_ACCURACY: f64 = 0.7;
/// Wrong answers listed in the text report.
const WRONG_SHOWN: usize = 20;

/// What the scoring regex is matched against.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum ScoreSourceArg {
    /// The last non-empty line of the answer content (reasoning never counts).
    FinalAnswer,
    /// The whole answer content (reasoning never counts).
    Content,
}

/// Flags of `servebench task`.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("input").required(true).args(["prompt", "prompt_file", "dataset"])))]
pub struct TaskArgs {
    #[command(flatten)]
    pub target: TargetArgs,

    /// The prompt (one user message).
    #[arg(long)]
    pub prompt: Option<String>,
    /// Read the prompt from a file (`-` = stdin).
    #[arg(long)]
    pub prompt_file: Option<PathBuf>,
    /// JSONL dataset: one {"id", "prompt", "answer", "regex"} object per line (prompt required);
    /// run i uses item (i − 1) mod items.
    #[arg(long)]
    pub dataset: Option<PathBuf>,
    /// Expected answer of --prompt / --prompt-file (scored with a regex derived from it).
    #[arg(long, conflicts_with = "dataset")]
    pub answer: Option<String>,
    /// Scoring regex (case-insensitive) for items without their own `regex` or `answer`
    /// [default: none = no scoring].
    #[arg(long)]
    pub correct_regex: Option<String>,
    /// What the regex is matched against (reasoning and <think> blocks never are).
    #[arg(long, value_enum, default_value_t = ScoreSourceArg::FinalAnswer)]
    pub score_source: ScoreSourceArg,

    /// max_tokens of every request (0 = omit the field).
    #[arg(long, default_value_t = 4096)]
    pub max_tokens: u64,
    /// Sampling temperature (default: the server's).
    #[arg(long, allow_negative_numbers = true)]
    pub temperature: Option<f64>,
    /// Nucleus sampling top_p (default: the server's).
    #[arg(long, allow_negative_numbers = true)]
    pub top_p: Option<f64>,
    /// Send `ignore_eos: true` (off: a task needs the model's own stop).
    #[arg(long)]
    pub ignore_eos: bool,

    /// Fixed concurrency C: run --runs requests C at a time (no search).
    #[arg(long)]
    pub concurrency: Option<u64>,
    /// Requests of a fixed-concurrency run [default: dataset items, else 30]; in adaptive mode
    /// it sets --min-results.
    #[arg(long)]
    pub runs: Option<u64>,
    /// Adaptive search levels, comma-separated (C=1 is always probed first).
    #[arg(long, default_value = "1,2,4,8,16,30")]
    pub concurrency_levels: String,
    /// Ok runs wanted at the selected level (probe runs count).
    #[arg(long, default_value_t = 30)]
    pub min_results: u64,
    /// Probe requests per level = C × waves.
    #[arg(long, default_value_t = 1)]
    pub probe_waves: u64,
    /// Relative system-throughput gain that counts as an improvement (0.03 = 3 %).
    #[arg(long, default_value_t = 0.03, allow_negative_numbers = true)]
    pub min_improvement: f64,
    /// Non-improving levels before the search stops.
    #[arg(long, default_value_t = 1)]
    pub patience: u64,
    /// Probe every level (no early stop).
    #[arg(long)]
    pub no_auto_stop: bool,
    /// Do not send the max_tokens=1 scout of the first prompt.
    #[arg(long)]
    pub no_prefill_scout: bool,
    /// Keep the full output, reasoning and content text of every run in the JSON.
    #[arg(long)]
    pub save_text: bool,

    /// Task results JSON path. A file already there is kept: renamed to NAME.1.json (or the next
    /// free number) first.
    #[arg(long, short, default_value = "task_results.json")]
    pub output: PathBuf,
    /// Only the final report (no progress lines on stderr).
    #[arg(long, short)]
    pub quiet: bool,
}

impl TaskArgs {
    /// Builds the task configuration; starts the embedded simulator when no target was given.
    pub fn to_config(&self) -> anyhow::Result<(TaskConfig, Option<Sim>)> {
        let (items, source) = self.items()?;
        if let Some(t) = self.temperature {
            if !(t.is_finite() && t >= 0.0) {
                usage_bail!("--temperature must be ≥ 0 (got {t})");
            }
        }
        if let Some(p) = self.top_p {
            if !(p.is_finite() && p > 0.0 && p <= 1.0) {
                usage_bail!("--top-p must be in (0, 1] (got {p})");
            }
        }
        let levels = parse_concurrency(&self.concurrency_levels)
            .context("--concurrency-levels")
            .map_err(usage)?;
        // Demo target: varied lengths, and the expected answer of a single prompt stated by 80 %
        // of the requests (a dataset's answers by 70 %: the simulator is given the dataset as its
        // answer key), so every part of the report has something to show.
        let (target, sim) = self.target.resolve(|| SimConfig {
            eos_after_min: Some(32),
            eos_after_max: Some(256),
            answer: self.answer.clone().filter(|a| !a.contains(['\n', '\r'])),
            answer_accuracy: if self.dataset.is_some() {
                SIM_DATASET_ACCURACY
            } else {
                0.8
            },
            answer_key: self.dataset.clone(),
            ..SimConfig::default()
        })?;
        let default_runs = if self.dataset.is_some() {
            items.len() as u64
        } else {
            30
        };
        if self.runs == Some(0) {
            usage_bail!("--runs must be ≥ 1");
        }
        let min_results = match (self.concurrency, self.runs) {
            (None, Some(r)) => r,
            _ => self.min_results,
        };
        let mut cfg = TaskConfig::new(target, items, source);
        cfg.model = self.target.model.clone();
        cfg.max_tokens = self.max_tokens;
        cfg.temperature = self.temperature;
        cfg.top_p = self.top_p;
        cfg.ignore_eos = self.ignore_eos;
        cfg.concurrency = self.concurrency;
        cfg.runs = self.runs.unwrap_or(default_runs);
        cfg.levels = levels;
        cfg.min_results = min_results;
        cfg.probe_waves = self.probe_waves;
        cfg.min_improvement = self.min_improvement;
        cfg.patience = self.patience;
        cfg.auto_stop = !self.no_auto_stop;
        cfg.correct_regex = self.correct_regex.clone().filter(|r| !r.is_empty());
        cfg.score_source = match self.score_source {
            ScoreSourceArg::FinalAnswer => ScoreSource::FinalAnswer,
            ScoreSourceArg::Content => ScoreSource::Content,
        };
        cfg.save_text = self.save_text;
        cfg.prefill_scout = !self.no_prefill_scout;
        cfg.args_snapshot = json!({
            "endpoint": self.target.endpoint().as_str(),
            "prompt_source": cfg.prompt_source,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "ignore_eos": self.ignore_eos,
            "concurrency": self.concurrency,
            "runs": self.runs,
            "concurrency_levels": self.concurrency_levels,
            "min_results": self.min_results,
            "probe_waves": self.probe_waves,
            "min_improvement": self.min_improvement,
            "patience": self.patience,
            "auto_stop": !self.no_auto_stop,
            "correct_regex": self.correct_regex,
            "answer": self.answer,
            "score_source": cfg.score_source.as_str(),
            "save_text": self.save_text,
            "prefill_scout": !self.no_prefill_scout,
            "embedded_simulator": sim.is_some(),
        });
        Ok((cfg, sim))
    }

    fn items(&self) -> anyhow::Result<(Vec<TaskItem>, String)> {
        let single = |prompt: String, source: String| -> anyhow::Result<_> {
            if prompt.trim().is_empty() {
                usage_bail!("the prompt is empty");
            }
            Ok((
                vec![TaskItem {
                    id: "prompt".into(),
                    prompt,
                    answer: self.answer.clone().filter(|a| !a.trim().is_empty()),
                    regex: None,
                }],
                source,
            ))
        };
        if let Some(p) = &self.prompt {
            return single(p.clone(), "prompt".into());
        }
        if let Some(f) = &self.prompt_file {
            if f.as_os_str() == "-" {
                let mut s = String::new();
                std::io::stdin()
                    .read_to_string(&mut s)
                    .context("cannot read the prompt from stdin")?;
                return single(s, "stdin".into());
            }
            let s = std::fs::read_to_string(f)
                .with_context(|| format!("cannot read --prompt-file {}", f.display()))?;
            return single(s, format!("prompt_file:{}", f.display()));
        }
        if let Some(d) = &self.dataset {
            let s = std::fs::read_to_string(d)
                .with_context(|| format!("cannot read --dataset {}", d.display()))?;
            let items = parse_dataset(&s).with_context(|| format!("--dataset {}", d.display()))?;
            return Ok((items, format!("dataset:{}", d.display())));
        }
        usage_bail!("give a prompt: --prompt, --prompt-file or --dataset")
    }
}

/// Runs `servebench task`.
pub async fn cmd_task(a: TaskArgs) -> anyhow::Result<ExitCode> {
    check_output_path(&a.output, "-o")?;
    let (cfg, sim) = a.to_config()?;
    let sim_note = sim.as_ref().map(|s| match &s.config().answer_key {
        Some(d) => format!(
            "simulator: answers ~{:.0} % of items correctly by design (the built-in simulator is given the answers of {} \
             and states the right one in that fraction of the requests, a wrong one otherwise: this checks the scoring path, not a model)",
            s.config().answer_accuracy * 100.0,
            d.display()
        ),
        None => format!(
            "simulator: filler text{} (the built-in simulator, not a model)",
            if s.config().answer.is_some() {
                format!(
                    "; states the --answer in ~{:.0} % of the requests by design",
                    s.config().answer_accuracy * 100.0
                )
            } else {
                String::new()
            }
        ),
    });
    if let (Some(sim), Some(note)) = (&sim, &sim_note) {
        session::announce_sim(&format!(
            "running the task against the built-in simulator at {}\n{note}",
            sim.base_url()
        ));
    }
    // Like `run`: a previous results file is kept as NAME.1.json, never overwritten.
    let (session, rx) = Session::start(
        a.output.clone(),
        Some("cutting the running requests and writing partial results"),
    );
    let printer = tokio::spawn(crate::live::print_events(rx, a.quiet));
    let results = run_task(cfg, session.events.clone(), session.cancel.clone()).await;
    // The event channel closes only when the session's sink is gone too.
    let output = session.output.clone();
    drop(session);
    let _ = printer.await;
    drop(sim);
    let results = results.map_err(|e| match e {
        servebench_core::task::TaskError::Config(c) => usage(c),
        servebench_core::task::TaskError::Setting(s) => crate::args::setting_error(&s),
        servebench_core::task::TaskError::Probe(p) => crate::args::probe_error(&p),
        e => anyhow::anyhow!(e),
    })?;
    let written = output
        .write(&results)
        .with_context(|| format!("cannot write {}", output.path().display()));
    // what the terminal shows is what the file holds: registered secrets redacted (a server
    // can spell the API key out in an answer, one token at a time), no control characters
    let text = render_report(
        &crate::checkpoint::scrubbed(&results),
        written.is_ok().then(|| a.output.display().to_string()),
    );
    let text = servebench_report::export::without_controls(
        servebench_client::secrets::scrub(&text).into_owned(),
    );
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout);
    let _ = stdout.write_all(text.as_bytes());
    if let Some(note) = &sim_note {
        let _ = writeln!(stdout, "{note}");
    }
    let _ = stdout.flush();
    drop(stdout);
    written?;
    // Self-check: what was written must match the committed schema.
    let violations = schema_violations(&results)?;
    if !violations.is_empty() {
        for v in violations.iter().take(10) {
            eprintln!("servebench: schema violation: {v}");
        }
        bail!(
            "the results written to {} violate schema/task.schema.json ({} problems): this is a servebench bug",
            output.path().display(),
            violations.len()
        );
    }
    let errors = results.all_summary.errors;
    let failed = (errors > 0 || results.selected_concurrency.is_none()).then(|| {
        format!(
            "{errors} of {} requests failed{}",
            results.all_summary.attempted,
            if results.selected_concurrency.is_none() {
                " and no level produced tokens"
            } else {
                ""
            }
        )
    });
    Ok(session::exit_code(results.metadata.interrupted, failed))
}

/// Violations of `schema/task.schema.json` by `r` (empty when it conforms).
pub fn schema_violations(r: &TaskResults) -> anyhow::Result<Vec<String>> {
    let schema: serde_json::Value = serde_json::from_str(TASK_SCHEMA_JSON)?;
    let validator = jsonschema::validator_for(&schema)
        .map_err(|e| anyhow::anyhow!("task schema does not compile: {e}"))?;
    let value = serde_json::to_value(r)?;
    Ok(validator
        .iter_errors(&value)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect())
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "-".to_string(), |x| format!("{x:.digits$}"))
}

fn pct(x: f64) -> String {
    format!("{:.1} %", x * 100.0)
}

/// One-line excerpt: newlines shown as ⏎, at most `n` characters.
fn one_line(s: &str, n: usize) -> String {
    let flat: String = s.trim().replace(['\n', '\r'], "⏎");
    if flat.chars().count() <= n {
        flat
    } else {
        let mut t: String = flat.chars().take(n.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

fn stats_row(out: &mut String, name: &str, s: Option<&Summary>, digits: usize) {
    let _ = match s {
        Some(s) => writeln!(
            out,
            "  {name:<26} {:>10.digits$} {:>10.digits$} {:>10.digits$} {:>10.digits$} {:>10.digits$} {:>10.digits$}",
            s.avg, s.p50, s.p90, s.p99, s.min, s.max
        ),
        None => writeln!(out, "  {name:<26} {:>10}", "-"),
    };
}

fn summary_block(out: &mut String, s: &TaskSummary) {
    let _ = writeln!(
        out,
        "  {:<26} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "", "avg", "p50", "p90", "p99", "min", "max"
    );
    stats_row(out, "completion tokens", s.completion_tokens.as_ref(), 1);
    stats_row(out, "elapsed (s)", s.elapsed.as_ref(), 3);
    stats_row(out, "TTFT (s)", s.ttft.as_ref(), 3);
    stats_row(
        out,
        "time to first content (s)",
        s.time_to_first_content.as_ref(),
        3,
    );
    stats_row(out, "per-request decode (tok/s)", s.gen_tok_s.as_ref(), 1);
    let _ = writeln!(
        out,
        "  max-token hits: {} of {} ok runs{}",
        s.hit_max_tokens,
        s.completed,
        if s.estimated_token_runs > 0 {
            format!(
                "; {} runs without server usage (tokens counted from SSE events)",
                s.estimated_token_runs
            )
        } else {
            String::new()
        }
    );
    let _ = writeln!(
        out,
        "  system throughput: {} tok/s ({} tokens in {} s over {} batch(es)); pooled decode {} tok/s \
         (Σ tokens / Σ generation time; the per-request row averages (tokens − 1) / generation time)",
        opt(s.system_gen_tok_s, 1),
        s.total_completion_tokens,
        opt(s.wall_time, 2),
        s.batches,
        opt(s.mean_per_request_gen_tok_s, 1)
    );
    match &s.accuracy {
        Some(a) => {
            let labels: Vec<String> = s
                .score_labels
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect();
            let _ = writeln!(
                out,
                "  accuracy: {}/{} = {} (Wilson 95 % CI {} – {}); labels: {}",
                a.correct,
                a.scored,
                pct(a.rate),
                pct(a.wilson_low),
                pct(a.wilson_high),
                labels.join(", ")
            );
        }
        None => {
            let _ = writeln!(
                out,
                "  accuracy: not scored (no answer, item regex or --correct-regex)"
            );
        }
    }
}

fn run_line(r: &TaskRun) -> String {
    format!(
        "  {:>5} {:>4} {:<12} {:<6} {:>7} {:<8} {:<16} {}",
        r.run_index,
        r.concurrency,
        one_line(&r.item_id, 12),
        r.score_label,
        r.completion_tokens,
        r.finish_reason.as_deref().unwrap_or("-"),
        one_line(r.expected_answer.as_deref().unwrap_or("-"), 16),
        one_line(&r.final_answer, 60)
    )
}

/// The plain-text report of a task run.
pub fn render_report(r: &TaskResults, json_path: Option<String>) -> String {
    let mut out = String::new();
    report_header(&mut out, r);
    report_levels(&mut out, r);
    report_selection(&mut out, r);
    report_failures(&mut out, r);
    if let Some(p) = json_path {
        let _ = writeln!(out, "\nResults JSON: {p}");
    }
    out
}

/// The report's head: model, server and engine; prompt source, items, max_tokens and score
/// source (and whether the run was interrupted); the prefill scout (tokens, TTFT in s,
/// prefill tok/s).
fn report_header(out: &mut String, r: &TaskResults) {
    let m = &r.metadata;
    let _ = writeln!(
        out,
        "servebench task — model {} on {} ({}{})",
        m.model,
        m.server,
        m.engine,
        match m.server_version.as_deref() {
            // The simulator reports `servebench-sim <version>`: do not repeat the name.
            Some(v) if v.starts_with(&m.engine) => v[m.engine.len()..].to_string(),
            Some(v) => format!(" {v}"),
            None => String::new(),
        }
    );
    let _ = writeln!(
        out,
        "prompt: {} ({} item{}), max_tokens {}, score source {}{}",
        m.prompt_source,
        m.dataset_items,
        if m.dataset_items == 1 { "" } else { "s" },
        m.max_tokens,
        m.score_source,
        if m.interrupted {
            "  [INTERRUPTED: partial results]"
        } else {
            ""
        }
    );
    if let Some(s) = &r.prefill_scout {
        let prefill = match (s.prompt_tokens, s.ttft) {
            (Some(p), Some(t)) if t > 0.0 => format!(", prefill {:.0} tok/s", p as f64 / t),
            _ => String::new(),
        };
        let _ = writeln!(
            out,
            "prefill scout: {} prompt tokens, TTFT {} s{prefill}{}",
            s.prompt_tokens.map_or("?".into(), |p| p.to_string()),
            opt(s.ttft, 3),
            s.error
                .as_deref()
                .map(|e| format!(" (failed: {e})"))
                .unwrap_or_default()
        );
    }
}

/// The concurrency-level table: per level, runs, ok runs, system and per-request tok/s,
/// average completion tokens, accuracy, and whether it improved or was selected.
fn report_levels(out: &mut String, r: &TaskResults) {
    let _ = writeln!(
        out,
        "\nConcurrency levels (system tok/s = completion tokens of ok runs / batch wall time; selection metric)"
    );
    let _ = writeln!(
        out,
        "  {:>5} {:<8} {:>5} {:>5} {:>12} {:>16} {:>10} {:>9} {:<8} {:<8}",
        "C",
        "phase",
        "runs",
        "ok",
        "system tok/s",
        "per-request tok/s",
        "tokens avg",
        "accuracy",
        "improved",
        "selected"
    );
    for l in &r.level_summaries {
        let s = &l.summary;
        let _ = writeln!(
            out,
            "  {:>5} {:<8} {:>5} {:>5} {:>12} {:>16} {:>10} {:>9} {:<8} {:<8}",
            l.concurrency,
            l.phase,
            s.attempted,
            s.completed,
            opt(s.system_gen_tok_s, 1),
            opt(s.mean_per_request_gen_tok_s, 1),
            opt(s.completion_tokens.as_ref().map(|x| x.avg), 1),
            s.accuracy
                .as_ref()
                .map_or("-".into(), |a| format!("{}/{}", a.correct, a.scored)),
            if l.improved { "yes" } else { "" },
            if l.selected { "<==" } else { "" }
        );
    }
}

/// The selected level's summary (or that nothing was selected), and the all-levels summary
/// when there is more than one level or no selection.
fn report_selection(out: &mut String, r: &TaskResults) {
    match (&r.selected_summary, r.selected_concurrency) {
        (Some(s), Some(c)) => {
            let _ = writeln!(
                out,
                "\nSelected C={c}: {} runs, {} ok, {} errors{}",
                s.attempted,
                s.completed,
                s.errors,
                if s.cancelled > 0 {
                    format!(", {} cancelled", s.cancelled)
                } else {
                    String::new()
                }
            );
            summary_block(out, s);
        }
        _ => {
            let _ = writeln!(out, "\nNo level produced tokens: nothing selected.");
        }
    }
    if r.level_summaries.len() > 1 || r.selected_summary.is_none() {
        let s = &r.all_summary;
        let _ = writeln!(
            out,
            "\nAll levels: {} runs, {} ok, {} errors",
            s.attempted, s.completed, s.errors
        );
        summary_block(out, s);
    }
}

/// The failed requests (count and the first error, cancelled runs left out) and the wrong
/// answers table (the first [`WRONG_SHOWN`]).
fn report_failures(out: &mut String, r: &TaskResults) {
    let errors: Vec<&TaskRun> = r
        .runs
        .iter()
        .filter(|x| x.error.is_some() && !x.cancelled)
        .collect();
    if let Some(e) = errors.first() {
        let _ = writeln!(
            out,
            "\n{} failed request(s); first: run {}: {}",
            errors.len(),
            e.run_index,
            e.error.as_deref().unwrap_or("")
        );
    }
    if !r.wrong_runs.is_empty() {
        let _ = writeln!(
            out,
            "\nWrong answers ({}{})",
            r.wrong_runs.len(),
            if r.wrong_runs.len() > WRONG_SHOWN {
                format!(", first {WRONG_SHOWN}")
            } else {
                String::new()
            }
        );
        let _ = writeln!(
            out,
            "  {:>5} {:>4} {:<12} {:<6} {:>7} {:<8} {:<16} final answer",
            "run", "C", "item", "label", "tokens", "finish", "expected"
        );
        for w in r.wrong_runs.iter().take(WRONG_SHOWN) {
            let _ = writeln!(out, "{}", run_line(w));
        }
    }
}
