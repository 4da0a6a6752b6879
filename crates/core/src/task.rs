//! Task profiles (`servebench task`): run a prompt or a dataset of prompts with known answers,
//! pick the concurrency with the highest **system** throughput, and report completion-token
//! statistics, latency and correctness.
//!
//! # Method
//!
//! * **Requests**: streaming, `stream_options.include_usage` (final usage only — no continuous
//!   usage), no `ignore_eos` unless asked. Completion tokens come from the server's usage
//!   (`estimated_tokens` marks runs where the server sent none and SSE token events were
//!   counted). TTFT is the first output token of any kind (reasoning counts); the time to the
//!   first answer content is reported apart.
//! * **Fixed mode** (`concurrency` set): one batch of `runs` requests kept `C` in flight
//!   (phase `profile`).
//! * **Adaptive mode**: the levels (C = 1 first) are probed in order with `C × probe_waves`
//!   requests each (phase `probe`). A level *improved* when its system throughput exceeds the best
//!   so far by more than `min_improvement` (relative); the search stops after `patience`
//!   non-improving levels (with `auto_stop`). The best level is then topped up (phase `collect`)
//!   until it holds `min_results` ok runs (its probe runs count).
//! * **System throughput** of a batch = Σ completion tokens of its ok requests / (end of the
//!   last request − start of the first). Over several batches (a summary) the walls add up. The
//!   old tool's "aggregate" (Σ tokens / Σ per-request generation time) is a token-weighted
//!   *per-request* speed that falls as C rises; it is kept as `mean_per_request_gen_tok_s` and
//!   never used to select a level.
//! * **Scoring**: the score source is the content with inline `<think>…</think>` blocks split
//!   off (reasoning is never scored): its last non-empty line (`final_answer`, the default) or
//!   all of it (`content`). A run is correct when the item's regex matches it
//!   (case-insensitive). The regex is the item's own `regex`, else one derived from its `answer`
//!   ([`answer_pattern`]), else the run-wide `correct_regex`; without any, runs are unscored.
//!   Accuracy = correct / scored ok runs, with a Wilson 95 % interval
//!   ([`servebench_stats::wilson_interval`]). A run that hit max_tokens without a match is
//!   labelled `TRUNC` and counts as wrong.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use regex::{Regex, RegexBuilder};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
pub use servebench_results::task::{
    Accuracy, LevelSummary, ScoreSource, Summary, TaskMetadata, TaskMethodology, TaskResults,
    TaskRun, TaskSummary, TASK_MODE, TASK_SCHEMA_JSON, TASK_SCHEMA_VERSION,
};
use servebench_results::TOOL_NAME;
use servebench_sse::RequestRecord;
use servebench_stats::wilson_interval;
use tokio_util::sync::CancellationToken;

use crate::error::ConfigError;
use crate::events::EventSink;
use crate::load::{Load, LoadPattern, LoadSpec};
use crate::probe::probe_server;
use servebench_client::stream::StreamOutcome;
use servebench_client::target::{Endpoint, HttpClient, Target};

/// z of the two-sided 95 % Wilson interval.
const Z95: f64 = 1.959_963_984_540_054;

/// Characters kept in `output_excerpt`.
const EXCERPT_CHARS: usize = 240;

/// Default levels of the adaptive search.
pub const DEFAULT_LEVELS: &[u64] = &[1, 2, 4, 8, 16, 30];

// ------------------------------------------------------------------------------------------
// Items and scoring

/// One prompt of a task, with what counts as a correct answer.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TaskItem {
    /// Item id (`item_id` of its runs).
    pub id: String,
    /// The user message (chat) or prompt text (completions).
    pub prompt: String,
    /// The expected answer; scoring uses a regex derived from it ([`answer_pattern`]) unless
    /// `regex` is set.
    pub answer: Option<String>,
    /// Scoring regex for this item (case-insensitive search in the score source).
    pub regex: Option<String>,
}

/// Parses a JSONL dataset: one JSON object per non-empty line with `prompt` (string, required),
/// `id` (string or number; default: the line number), `answer` (string or number) and `regex`
/// (string). Unknown keys are ignored. Errors name the line.
pub fn parse_dataset(text: &str) -> Result<Vec<TaskItem>, ConfigError> {
    let mut items = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line_no = i + 1;
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(line)
            .map_err(|e| ConfigError::new(format!("dataset line {line_no}: not JSON ({e})")))?;
        let Some(o) = v.as_object() else {
            return Err(ConfigError::new(format!(
                "dataset line {line_no}: expected a JSON object"
            )));
        };
        let text_of = |k: &str| -> Result<Option<String>, ConfigError> {
            match o.get(k) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(Value::Number(n)) if k != "prompt" && k != "regex" => Ok(Some(n.to_string())),
                Some(_) => Err(ConfigError::new(format!(
                    "dataset line {line_no}: `{k}` must be a string"
                ))),
            }
        };
        let prompt = text_of("prompt")?
            .filter(|p| !p.trim().is_empty())
            .ok_or_else(|| {
                ConfigError::new(format!(
                    "dataset line {line_no}: `prompt` is missing or empty"
                ))
            })?;
        let id = text_of("id")?.unwrap_or_else(|| line_no.to_string());
        let item = TaskItem {
            id,
            prompt,
            answer: text_of("answer")?.filter(|a| !a.trim().is_empty()),
            regex: text_of("regex")?.filter(|r| !r.is_empty()),
        };
        if let Some(r) = &item.regex {
            compile(r).map_err(|e| {
                ConfigError::new(format!("dataset line {line_no}: bad `regex`: {e}"))
            })?;
        }
        items.push(item);
    }
    if items.is_empty() {
        return Err(ConfigError::new("the dataset has no items"));
    }
    Ok(items)
}

/// The regex an expected answer is scored with (case-insensitive search):
///
/// * a number (`42`, `-3.5`): the literal, not preceded by a digit, `.` or `-` and not followed
///   by a digit or by `.` and a digit (`142`, `42.5`, `-42` do not match `42`; `42.` does);
/// * otherwise the literal, with a word boundary at each end that is a word character
///   (`\bEstonia\b`).
pub fn answer_pattern(answer: &str) -> String {
    let a = answer.trim();
    let esc = regex::escape(a);
    if a.parse::<f64>().is_ok() && a.chars().all(|c| c.is_ascii_digit() || ".-+eE".contains(c)) {
        return format!(r"(?:^|[^0-9.\-]){esc}(?:$|[^0-9.]|\.(?:$|[^0-9]))");
    }
    let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
    let pre = if word(a.chars().next()) { r"\b" } else { "" };
    let post = if word(a.chars().last()) { r"\b" } else { "" };
    format!("{pre}{esc}{post}")
}

fn compile(pattern: &str) -> Result<Regex, regex::Error> {
    RegexBuilder::new(pattern)
        .case_insensitive(true)
        .size_limit(1 << 22)
        .build()
}

/// Splits inline `<think>…</think>` blocks off `content`. Returns (reasoning, answer content).
///
/// A `</think>` with no `<think>` before it closes a block the chat template opened (everything
/// before it is reasoning); an unclosed `<think>` makes the rest reasoning (the response was cut
/// while thinking). Blocks are joined with a newline.
pub fn split_think(content: &str) -> (String, String) {
    const OPEN: &str = "<think>";
    const CLOSE: &str = "</think>";
    let mut reasoning = String::new();
    let mut out = String::new();
    let push_reasoning = |r: &mut String, s: &str| {
        if !r.is_empty() && !s.is_empty() {
            r.push('\n');
        }
        r.push_str(s);
    };
    let mut rest = content;
    if let Some(end) = rest.find(CLOSE) {
        if rest.find(OPEN).is_none_or(|o| o > end) {
            push_reasoning(&mut reasoning, &rest[..end]);
            rest = &rest[end + CLOSE.len()..];
        }
    }
    loop {
        match rest.find(OPEN) {
            None => {
                out.push_str(rest);
                break;
            }
            Some(o) => {
                out.push_str(&rest[..o]);
                let after = &rest[o + OPEN.len()..];
                match after.find(CLOSE) {
                    Some(e) => {
                        push_reasoning(&mut reasoning, &after[..e]);
                        rest = &after[e + CLOSE.len()..];
                    }
                    None => {
                        push_reasoning(&mut reasoning, after);
                        break;
                    }
                }
            }
        }
    }
    (reasoning, out)
}

/// The last non-empty line of `content`, trimmed (empty when there is none).
pub fn final_answer_line(content: &str) -> &str {
    content
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("")
}

/// The regex `item` is scored with: its own `regex`, else one derived from its `answer`
/// ([`answer_pattern`]), else `correct_regex`; `None` = not scored. Case-insensitive.
pub fn item_scorer(
    item: &TaskItem,
    correct_regex: Option<&str>,
) -> Result<Option<Regex>, ConfigError> {
    let (pattern, what) = if let Some(r) = &item.regex {
        (r.clone(), "regex")
    } else if let Some(a) = &item.answer {
        (answer_pattern(a), "answer regex")
    } else if let Some(r) = correct_regex.filter(|r| !r.is_empty()) {
        (r.to_string(), "correct regex")
    } else {
        return Ok(None);
    };
    compile(&pattern)
        .map(Some)
        .map_err(|e| ConfigError::new(format!("item {}: bad {what}: {e}", item.id)))
}

/// Scores a response's `content` (reasoning excluded by the caller; inline `<think>` blocks are
/// split off here) for `item`: `None` when the item has no regex.
pub fn score_content(
    item: &TaskItem,
    correct_regex: Option<&str>,
    source: ScoreSource,
    content: &str,
) -> Result<Option<bool>, ConfigError> {
    let Some(re) = item_scorer(item, correct_regex)? else {
        return Ok(None);
    };
    let (_, content) = split_think(content);
    Ok(Some(match source {
        ScoreSource::FinalAnswer => re.is_match(final_answer_line(&content)),
        ScoreSource::Content => re.is_match(&content),
    }))
}

// ------------------------------------------------------------------------------------------
// Configuration

/// Everything a task run needs. Built by the CLI from flags.
#[derive(Clone, Debug)]
pub struct TaskConfig {
    /// The server.
    pub target: Target,
    /// Model to request; `None` = the first id of `/v1/models`.
    pub model: Option<String>,
    /// The prompts; run `i` (from 1) uses item `(i − 1) mod len`.
    pub items: Vec<TaskItem>,
    /// Where the prompts came from: `prompt`, `prompt_file:<path>`, `stdin` or
    /// `dataset:<path>`.
    pub prompt_source: String,
    /// `max_tokens` of every request (0 = omit the field).
    pub max_tokens: u64,
    /// Sampling temperature (None = server default).
    pub temperature: Option<f64>,
    /// Nucleus sampling `top_p` (None = server default).
    pub top_p: Option<f64>,
    /// Send `ignore_eos: true` (off by default: a task needs the model's own stop).
    pub ignore_eos: bool,
    /// Fixed concurrency C; `None` = adaptive search over `levels`.
    pub concurrency: Option<u64>,
    /// Requests of a fixed-concurrency run.
    pub runs: u64,
    /// Adaptive: levels to probe (C = 1 is put first).
    pub levels: Vec<u64>,
    /// Adaptive: ok runs wanted at the selected level (probe runs count).
    pub min_results: u64,
    /// Adaptive: probe requests per level = C × waves.
    pub probe_waves: u64,
    /// Adaptive: relative system-throughput gain that counts as an improvement (0.03 = 3 %).
    pub min_improvement: f64,
    /// Adaptive: non-improving levels before the search stops.
    pub patience: u64,
    /// Adaptive: stop the search early (after `patience` non-improving levels).
    pub auto_stop: bool,
    /// Scoring regex for items with neither `regex` nor `answer`.
    pub correct_regex: Option<String>,
    /// What the regex is matched against.
    pub score_source: ScoreSource,
    /// Keep the full output, reasoning and content text of every run.
    pub save_text: bool,
    /// Send a max_tokens = 1 copy of the first prompt first (primes the prefix cache; reported
    /// as `prefill_scout`, never scored).
    pub prefill_scout: bool,
    /// Snapshot of the arguments (`metadata.args`).
    pub args_snapshot: Value,
}

impl TaskConfig {
    /// A configuration with the old tool's defaults for `items` against `target`.
    pub fn new(target: Target, items: Vec<TaskItem>, prompt_source: impl Into<String>) -> Self {
        TaskConfig {
            target,
            model: None,
            items,
            prompt_source: prompt_source.into(),
            max_tokens: 4096,
            temperature: None,
            top_p: None,
            ignore_eos: false,
            concurrency: None,
            runs: 30,
            levels: DEFAULT_LEVELS.to_vec(),
            min_results: 30,
            probe_waves: 1,
            min_improvement: 0.03,
            patience: 1,
            auto_stop: true,
            correct_regex: None,
            score_source: ScoreSource::FinalAnswer,
            save_text: false,
            prefill_scout: true,
            args_snapshot: Value::Object(Default::default()),
        }
    }

    /// The adaptive levels as run: positive, deduplicated, sorted, with 1 first.
    pub fn effective_levels(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self.levels.iter().copied().filter(|&c| c > 0).collect();
        v.push(1);
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Checks the numbers and compiles every regex.
    fn scorers(&self) -> Result<Vec<Option<Regex>>, TaskError> {
        if self.items.is_empty() {
            return Err(ConfigError::new("no prompt: give a prompt or a dataset").into());
        }
        let bad = |setting, problem: &str| Err(SettingError::new(setting, problem).into());
        if let Some(c) = self.concurrency {
            if c == 0 {
                return bad(TaskSetting::Concurrency, "must be ≥ 1");
            }
            if self.runs == 0 {
                return bad(TaskSetting::Runs, "must be ≥ 1");
            }
        } else {
            if self.min_results == 0 {
                return bad(TaskSetting::MinResults, "must be ≥ 1");
            }
            if self.probe_waves == 0 {
                return bad(TaskSetting::ProbeWaves, "must be ≥ 1");
            }
            if !(self.min_improvement.is_finite() && self.min_improvement >= 0.0) {
                let problem = format!("must be ≥ 0 (got {})", self.min_improvement);
                return bad(TaskSetting::MinImprovement, &problem);
            }
            if self.patience == 0 {
                return bad(TaskSetting::Patience, "must be ≥ 1");
            }
        }
        if let Some(r) = self.correct_regex.as_deref().filter(|r| !r.is_empty()) {
            if let Err(e) = compile(r) {
                return bad(
                    TaskSetting::CorrectRegex,
                    &format!("is not a valid regex: {e}"),
                );
            }
        }
        Ok(self
            .items
            .iter()
            .map(|it| item_scorer(it, self.correct_regex.as_deref()))
            .collect::<Result<_, _>>()?)
    }
}

/// A task setting the configuration checks (see [`TaskConfig`]). The CLI names each by its
/// flag; [`TaskSetting::name`] is the [`TaskConfig`] field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskSetting {
    /// [`TaskConfig::concurrency`] (fixed mode).
    Concurrency,
    /// [`TaskConfig::runs`].
    Runs,
    /// [`TaskConfig::min_results`].
    MinResults,
    /// [`TaskConfig::probe_waves`].
    ProbeWaves,
    /// [`TaskConfig::min_improvement`].
    MinImprovement,
    /// [`TaskConfig::patience`].
    Patience,
    /// [`TaskConfig::correct_regex`].
    CorrectRegex,
}

impl TaskSetting {
    /// The [`TaskConfig`] field's name.
    pub fn name(self) -> &'static str {
        match self {
            TaskSetting::Concurrency => "concurrency",
            TaskSetting::Runs => "runs",
            TaskSetting::MinResults => "min_results",
            TaskSetting::ProbeWaves => "probe_waves",
            TaskSetting::MinImprovement => "min_improvement",
            TaskSetting::Patience => "patience",
            TaskSetting::CorrectRegex => "correct_regex",
        }
    }
}

/// A task setting out of range (or a regex that does not compile): `setting problem`.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{} {problem}", .setting.name())]
pub struct SettingError {
    /// The setting.
    pub setting: TaskSetting,
    /// What is wrong with it (`must be ≥ 1`).
    pub problem: String,
}

impl SettingError {
    /// `setting` with `problem`.
    pub fn new(setting: TaskSetting, problem: &str) -> SettingError {
        SettingError {
            setting,
            problem: problem.to_owned(),
        }
    }
}

/// A task run that could not start.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    /// Bad configuration.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A setting out of range; the CLI names its flag.
    #[error(transparent)]
    Setting(#[from] SettingError),
    /// The server failed the startup probe; the CLI words its hint with its flag.
    #[error(transparent)]
    Probe(#[from] crate::probe::ProbeError),
    /// The server failed the startup probe.
    #[error("{0}")]
    Startup(String),
}

fn methodology() -> TaskMethodology {
    TaskMethodology {
        name: "Task profile: completion-token statistics and correctness".into(),
        prefill: "Unless disabled, one max_tokens=1 copy of the first prompt is sent first (it primes the prefix \
                  cache; prefill tok/s = prompt_tokens / TTFT). It is never scored or counted."
            .into(),
        adaptive_concurrency: "Levels (C=1 first) are probed with C x probe_waves requests kept C in flight. A level \
                               improved when its system throughput > best x (1 + min_improvement); the search stops \
                               after `patience` non-improving levels (auto_stop). The best level is topped up to \
                               min_results ok runs (probe runs count). Fixed mode runs `runs` requests at C."
            .into(),
        token_need: "Streaming with include_usage (final usage only, no continuous usage, no ignore_eos unless \
                     asked): completion tokens are the server's usage.completion_tokens (SSE token events when \
                     the server sends none: estimated_tokens). TTFT counts reasoning tokens; time_to_first_content \
                     does not."
            .into(),
        correctness: "Reasoning is never scored: reasoning_content and inline <think> blocks are split off the \
                      content. The item's regex (or one derived from its answer, or the run's correct regex) is searched \
                      case-insensitively in the last non-empty content line (final_answer) or the whole content. \
                      accuracy = correct / scored ok runs with a Wilson 95% interval; a run that hit max_tokens \
                      without a match is TRUNC and counts as wrong."
            .into(),
        throughput: "system_gen_tok_s = sum of completion tokens of ok runs / (end of the last request - start of \
                     the first) per batch (walls add over batches): the selection metric. \
                     mean_per_request_gen_tok_s = sum of tokens / sum of per-request generation times is the old \
                     tool's 'aggregate', a per-request speed that falls as C rises; it is reported, never used \
                     to select."
            .into(),
    }
}

// ------------------------------------------------------------------------------------------
// Running

/// A finished batch: its runs and its wall interval.
#[derive(Clone, Debug, Default)]
struct Batch {
    runs: Vec<TaskRun>,
    /// (start of the first request, end of the last).
    span: Option<(Instant, Instant)>,
}

impl Batch {
    fn wall_s(&self) -> Option<f64> {
        self.span
            .map(|(a, b)| b.saturating_duration_since(a).as_secs_f64())
    }

    fn system_tps(&self) -> Option<f64> {
        let tokens: u64 = self
            .runs
            .iter()
            .filter(|r| r.ok)
            .map(|r| r.completion_tokens)
            .sum();
        let wall = self.wall_s()?;
        (tokens > 0 && wall > 0.0).then(|| tokens as f64 / wall)
    }
}

/// Summarises `runs`; `walls` are the wall times of the batches they came from, s.
pub fn summarize(runs: &[&TaskRun], walls: &[f64]) -> TaskSummary {
    let ok: Vec<&TaskRun> = runs.iter().copied().filter(|r| r.ok).collect();
    let stat = |f: &dyn Fn(&TaskRun) -> Option<f64>| -> Option<Summary> {
        let v: Vec<f64> = ok.iter().filter_map(|r| f(r)).collect();
        Summary::of(&v)
    };
    let scored: Vec<&TaskRun> = ok.iter().copied().filter(|r| r.correct.is_some()).collect();
    let correct = scored.iter().filter(|r| r.correct == Some(true)).count() as u64;
    let n = scored.len() as u64;
    let accuracy = wilson_interval(correct, n, Z95).map(|(lo, hi)| Accuracy {
        correct,
        scored: n,
        rate: correct as f64 / n as f64,
        wilson_low: lo,
        wilson_high: hi,
        confidence: 0.95,
    });
    let mut labels = BTreeMap::new();
    for r in runs {
        *labels.entry(r.score_label.clone()).or_insert(0) += 1;
    }
    let total: u64 = ok.iter().map(|r| r.completion_tokens).sum();
    let wall: f64 = walls.iter().sum();
    let gen_time: f64 = ok.iter().filter_map(|r| r.gen_elapsed).sum();
    let gen_tokens: u64 = ok
        .iter()
        .filter(|r| r.gen_elapsed.is_some())
        .map(|r| r.completion_tokens)
        .sum();
    TaskSummary {
        attempted: runs.len() as u64,
        completed: ok.len() as u64,
        errors: runs
            .iter()
            .filter(|r| r.error.is_some() && !r.cancelled)
            .count() as u64,
        cancelled: runs.iter().filter(|r| r.cancelled).count() as u64,
        score_available: runs.iter().any(|r| r.score_label != "UNSCORED" && r.ok),
        scored: n,
        correct,
        wrong: n - correct,
        correct_rate: (n > 0).then(|| correct as f64 / n as f64),
        accuracy,
        score_labels: labels,
        hit_max_tokens: ok.iter().filter(|r| r.hit_max_tokens).count() as u64,
        estimated_token_runs: ok.iter().filter(|r| r.estimated_tokens).count() as u64,
        completion_tokens: stat(&|r| Some(r.completion_tokens as f64)),
        ttft: stat(&|r| r.ttft),
        time_to_first_content: stat(&|r| r.time_to_first_content),
        elapsed: stat(&|r| Some(r.elapsed)),
        gen_elapsed: stat(&|r| r.gen_elapsed),
        gen_tok_s: stat(&|r| r.gen_tok_s),
        e2e_tok_s: stat(&|r| r.e2e_tok_s),
        total_completion_tokens: total,
        wall_time: (!walls.is_empty()).then_some(wall),
        system_gen_tok_s: (total > 0 && wall > 0.0).then(|| total as f64 / wall),
        mean_per_request_gen_tok_s: (gen_time > 0.0).then(|| gen_tokens as f64 / gen_time),
        batches: walls.len() as u64,
    }
}

/// Shared by the workers of every batch.
struct Runner {
    client: HttpClient,
    path: &'static str,
    items: Vec<TaskItem>,
    bodies: Arc<Vec<Bytes>>,
    scorers: Vec<Option<Regex>>,
    source: ScoreSource,
    save_text: bool,
    cancel: CancellationToken,
}

/// Request body of one prompt.
pub fn task_payload(
    model: &str,
    endpoint: Endpoint,
    prompt: &str,
    max_tokens: u64,
    temperature: Option<f64>,
    top_p: Option<f64>,
    ignore_eos: bool,
) -> Bytes {
    let mut body = serde_json::Map::new();
    body.insert("model".into(), json!(model));
    match endpoint {
        Endpoint::Chat => body.insert(
            "messages".into(),
            json!([{"role": "user", "content": prompt}]),
        ),
        Endpoint::Completions => body.insert("prompt".into(), json!(prompt)),
    };
    body.insert("stream".into(), json!(true));
    body.insert("stream_options".into(), json!({"include_usage": true}));
    if max_tokens > 0 {
        body.insert("max_tokens".into(), json!(max_tokens));
    }
    if let Some(t) = temperature {
        body.insert("temperature".into(), json!(t));
    }
    if let Some(p) = top_p {
        body.insert("top_p".into(), json!(p));
    }
    if ignore_eos {
        body.insert("ignore_eos".into(), json!(true));
    }
    Bytes::from(serde_json::to_vec(&Value::Object(body)).unwrap_or_default())
}

fn secs(a: Instant, b: Instant) -> f64 {
    b.saturating_duration_since(a).as_secs_f64()
}

/// Last `n` characters of `s` (with a leading `…` when cut).
fn tail_chars(s: &str, n: usize) -> String {
    let s = s.trim_end();
    let count = s.chars().count();
    if count <= n {
        return s.to_string();
    }
    let skip = count - (n - 1);
    format!("…{}", s.chars().skip(skip).collect::<String>())
}

impl Runner {
    /// Turns a finished request into a scored run.
    fn run_of(
        &self,
        run_index: u64,
        phase: &str,
        concurrency: u64,
        item: usize,
        out: StreamOutcome,
    ) -> TaskRun {
        let r: &RequestRecord = &out.record;
        let text = out.text.unwrap_or_default();
        let (think, content) = split_think(&text.content);
        let mut reasoning = text.reasoning.clone();
        if !think.is_empty() {
            if !reasoning.is_empty() {
                reasoning.push('\n');
            }
            reasoning.push_str(&think);
        }
        let final_answer = final_answer_line(&content).to_string();
        let ok = r.completed && r.output_tokens > 0;
        let hit_max = r.finish_reason.as_deref() == Some("length");
        let scout = phase == "prefill_scout";
        let scorer = self.scorers.get(item).and_then(Option::as_ref);
        let correct = match scorer {
            Some(re) if ok && !scout => Some(match self.source {
                ScoreSource::FinalAnswer => re.is_match(&final_answer),
                ScoreSource::Content => re.is_match(&content),
            }),
            _ => None,
        };
        let label = if scout {
            "SCOUT"
        } else if r.cancelled {
            "CANCEL"
        } else if !ok {
            "ERROR"
        } else {
            match correct {
                None => "UNSCORED",
                Some(true) => "PASS",
                Some(false) if hit_max => "TRUNC",
                Some(false) => "FAIL",
            }
        };
        let gen_elapsed = match (r.first_token_at, r.last_token_at) {
            (Some(a), Some(b)) if b > a => Some(secs(a, b)),
            _ => None,
        };
        let elapsed = secs(r.sent_at, r.end_at);
        let it = &self.items[item];
        let excerpt_src = if content.trim().is_empty() {
            &reasoning
        } else {
            &content
        };
        TaskRun {
            run_index,
            phase: phase.to_string(),
            concurrency,
            ok,
            correct,
            score_label: label.to_string(),
            completion_tokens: r.output_tokens,
            prompt_tokens: r.prompt_tokens,
            reasoning_tokens: r.reasoning_tokens,
            elapsed,
            gen_elapsed,
            ttft: r.ttft_s(),
            time_to_first_content: r.ttfc_s(),
            time_to_second_token: r.ttst_s(),
            gen_tok_s: r.output_tps_per_user(),
            e2e_tok_s: (elapsed > 0.0 && r.output_tokens > 0)
                .then(|| r.output_tokens as f64 / elapsed),
            finish_reason: r.finish_reason.clone(),
            final_answer,
            output_excerpt: tail_chars(excerpt_src, EXCERPT_CHARS),
            output_text: self
                .save_text
                .then(|| format!("{}{}", text.reasoning, text.content)),
            reasoning_text: self.save_text.then(|| reasoning.clone()),
            content_text: self.save_text.then(|| content.clone()),
            error: r.error.clone(),
            hit_max_tokens: ok && hit_max,
            estimated_tokens: r.output_tokens > 0 && r.usage_completion_tokens.is_none(),
            cancelled: r.cancelled,
            item_id: it.id.clone(),
            expected_answer: it.answer.clone(),
            response_id: r.response_id.clone(),
        }
    }
}

/// Runs `count` requests with `c` in flight on the load driver (a failed request does not stop
/// the batch); run indexes `first_index..first_index + count`, item `(run_index − 1) mod items`.
async fn run_batch(
    runner: &Arc<Runner>,
    phase: &'static str,
    c: u64,
    count: u64,
    first_index: u64,
) -> Batch {
    let items = runner.items.len() as u64;
    let item_of = move |k: u64| ((first_index + k - 1) % items) as usize;
    let bodies = runner.bodies.clone();
    let mut spec = LoadSpec::new(
        runner.path,
        LoadPattern::Batch {
            count,
            concurrency: c,
        },
        Arc::new(move |k| bodies[item_of(k)].clone()),
    );
    spec.stop_on_failure = false;
    spec.capture_text = true;
    spec.deadline_in_flight = 0;
    let report = Load::run(&runner.client, spec, &runner.cancel).await;
    let mut v: Vec<(TaskRun, Instant, Instant)> = report
        .outcomes
        .into_iter()
        .map(|o| {
            let (sent, end) = (o.stream.record.sent_at, o.stream.record.end_at);
            let run = runner.run_of(first_index + o.index, phase, c, item_of(o.index), o.stream);
            (run, sent, end)
        })
        .collect();
    v.sort_by_key(|(r, _, _)| r.run_index);
    let span = match (v.iter().map(|x| x.1).min(), v.iter().map(|x| x.2).max()) {
        (Some(a), Some(b)) => Some((a, b)),
        _ => None,
    };
    Batch {
        runs: v.into_iter().map(|x| x.0).collect(),
        span,
    }
}

fn fmt_opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "n/a".to_string(), |x| format!("{x:.digits$}"))
}

/// The levels measured so far: every batch with its level and phase, and each level's summary.
#[derive(Default)]
struct Search {
    batches: Vec<(u64, &'static str, Batch)>,
    levels: Vec<LevelSummary>,
    next_index: u64,
}

/// Runs the task and returns its results (partial when `cancel` fired).
pub async fn run_task(
    cfg: TaskConfig,
    events: Arc<EventSink>,
    cancel: CancellationToken,
) -> Result<TaskResults, TaskError> {
    let scorers = cfg.scorers()?;
    let client =
        HttpClient::new(cfg.target.clone()).map_err(|e| TaskError::Startup(e.to_string()))?;
    let info = startup(&client, &cfg, &events).await?;
    let endpoint = cfg.target.endpoint;
    let runner = Arc::new(Runner {
        client: client.clone(),
        path: endpoint.path(),
        bodies: Arc::new(
            cfg.items
                .iter()
                .map(|it| body_of(&cfg, &info.model, &it.prompt, cfg.max_tokens))
                .collect(),
        ),
        items: cfg.items.clone(),
        scorers: scorers.clone(),
        source: cfg.score_source,
        save_text: cfg.save_text,
        cancel: cancel.clone(),
    });
    let score_available = scorers.iter().any(Option::is_some);
    if !score_available {
        events.log("startup no scoring regex (no answer, item regex or correct regex): runs are not scored");
    }
    let scout = if cfg.prefill_scout && !cancel.is_cancelled() {
        let body = body_of(&cfg, &info.model, &cfg.items[0].prompt, 1);
        Some(scout_run(&runner, body, &events).await)
    } else {
        None
    };
    let mut search = Search {
        next_index: 1,
        ..Default::default()
    };
    let selected = match cfg.concurrency {
        Some(c) => fixed_level(&runner, &cfg, c, &events, &mut search).await,
        None => {
            let selected = adaptive_levels(&runner, &cfg, &events, &mut search).await;
            if let Some(c) = selected {
                collect_selected(&runner, &cfg, c, &events, &mut search).await;
            } else {
                events.log("no level produced tokens: nothing selected");
            }
            selected
        }
    };
    Ok(assemble(
        &cfg,
        &info,
        &events,
        &cancel,
        scout,
        selected,
        search,
        score_available,
    ))
}

/// Probes the server and logs what it found (and a max_tokens that cannot fit).
async fn startup(
    client: &HttpClient,
    cfg: &TaskConfig,
    events: &EventSink,
) -> Result<crate::probe::ServerInfo, TaskError> {
    events.log(format!("task start server={}", cfg.target.base_url));
    let info = probe_server(client, cfg.model.as_deref()).await?;
    events.log(format!(
        "startup engine {}{} model {}",
        info.engine_name,
        info.engine_version
            .as_deref()
            .map(|v| format!(" {v}"))
            .unwrap_or_default(),
        info.model
    ));
    if let (Some(len), true) = (info.max_model_len, cfg.max_tokens > 0) {
        if cfg.max_tokens >= len {
            events.log(format!(
                "startup warning: max_tokens {} is not below the model's max_model_len {len}: \
                 requests will fail (lower max_tokens)",
                cfg.max_tokens
            ));
        }
    }
    Ok(info)
}

/// The request body of `prompt` with the task's sampling settings.
fn body_of(cfg: &TaskConfig, model: &str, prompt: &str, max_tokens: u64) -> Bytes {
    task_payload(
        model,
        cfg.target.endpoint,
        prompt,
        max_tokens,
        cfg.temperature,
        cfg.top_p,
        cfg.ignore_eos,
    )
}

/// The prefill scout: the first item with `max_tokens: 1`, alone.
async fn scout_run(runner: &Runner, body: Bytes, events: &EventSink) -> TaskRun {
    let o =
        crate::load::scout::single(&runner.client, runner.path, body, true, &runner.cancel).await;
    let run = runner.run_of(0, "prefill_scout", 1, 0, o);
    match &run.error {
        Some(e) => events.log(format!("prefill scout failed: {e}")),
        None => events.log(format!(
            "prefill scout: {} prompt tokens, TTFT {} s",
            run.prompt_tokens
                .map_or_else(|| "?".to_string(), |p| p.to_string()),
            fmt_opt(run.ttft, 3)
        )),
    }
    run
}

/// Fixed concurrency C: one profile batch of `runs` requests. Returns C when it produced tokens.
async fn fixed_level(
    runner: &Arc<Runner>,
    cfg: &TaskConfig,
    c: u64,
    events: &EventSink,
    search: &mut Search,
) -> Option<u64> {
    events.log(format!("profile C={c}: {} requests", cfg.runs));
    let b = run_batch(runner, "profile", c, cfg.runs, search.next_index).await;
    let s = summarize(
        &b.runs.iter().collect::<Vec<_>>(),
        &b.wall_s().into_iter().collect::<Vec<_>>(),
    );
    events.log(format!(
        "profile C={c} done: {}/{} ok, system {} tok/s",
        s.completed,
        s.attempted,
        fmt_opt(s.system_gen_tok_s, 1)
    ));
    let produced = s.system_gen_tok_s.is_some();
    search.levels.push(LevelSummary {
        concurrency: c,
        phase: "profile".into(),
        summary: s,
        selected: produced,
        improved: produced,
    });
    search.batches.push((c, "profile", b));
    produced.then_some(c)
}

/// The adaptive search over the levels; returns the level with the highest system throughput.
async fn adaptive_levels(
    runner: &Arc<Runner>,
    cfg: &TaskConfig,
    events: &EventSink,
    search: &mut Search,
) -> Option<u64> {
    let cancel = &runner.cancel;
    let Search {
        batches,
        levels,
        next_index,
    } = search;
    let mut best: Option<(u64, f64)> = None;
    let mut non_improving = 0u64;
    for (k, &c) in cfg.effective_levels().iter().enumerate() {
        if cancel.is_cancelled() {
            break;
        }
        let count = c * cfg.probe_waves;
        events.log(format!("probe C={c}: {count} requests"));
        let b = run_batch(runner, "probe", c, count, *next_index).await;
        *next_index += b.runs.len() as u64;
        let tps = b.system_tps();
        let improved = match (tps, best) {
            (Some(t), None) => t > 0.0,
            (Some(t), Some((_, bt))) => t > bt * (1.0 + cfg.min_improvement),
            (None, _) => false,
        };
        if improved {
            best = tps.map(|t| (c, t));
            non_improving = 0;
        } else {
            non_improving += 1;
        }
        let s = summarize(
            &b.runs.iter().collect::<Vec<_>>(),
            &b.wall_s().into_iter().collect::<Vec<_>>(),
        );
        events.log(format!(
            "probe C={c} done: {}/{} ok, system {} tok/s, per-request {} tok/s{}",
            s.completed,
            s.attempted,
            fmt_opt(tps, 1),
            fmt_opt(s.mean_per_request_gen_tok_s, 1),
            if improved { " (improved)" } else { "" }
        ));
        levels.push(LevelSummary {
            concurrency: c,
            phase: "probe".into(),
            summary: s,
            selected: false,
            improved,
        });
        batches.push((c, "probe", b));
        if cancel.is_cancelled() {
            events.log(format!("search interrupted at C={c}"));
            break;
        }
        if cfg.auto_stop && k > 0 && non_improving >= cfg.patience {
            events.log(format!(
                "search stopped after {non_improving} non-improving level(s)"
            ));
            break;
        }
    }
    best.map(|(c, _)| c)
}

/// Tops the selected level up to `min_results` successful runs.
async fn collect_selected(
    runner: &Arc<Runner>,
    cfg: &TaskConfig,
    c: u64,
    events: &EventSink,
    search: &mut Search,
) {
    let cancel = &runner.cancel;
    let Search {
        batches,
        levels,
        next_index,
    } = search;
    events.log(format!(
        "selected C={c} (highest system throughput{})",
        if cancel.is_cancelled() {
            " among the levels measured before the interruption"
        } else {
            ""
        }
    ));
    for l in levels.iter_mut() {
        l.selected = l.concurrency == c;
    }
    let mut have: u64 = batches
        .iter()
        .filter(|(bc, _, _)| *bc == c)
        .flat_map(|(_, _, b)| b.runs.iter())
        .filter(|r| r.ok)
        .count() as u64;
    while have < cfg.min_results && !cancel.is_cancelled() {
        let need = cfg.min_results - have;
        events.log(format!("collect C={c}: {need} requests"));
        let b = run_batch(runner, "collect", c, need, *next_index).await;
        *next_index += b.runs.len() as u64;
        let got = b.runs.iter().filter(|r| r.ok).count() as u64;
        batches.push((c, "collect", b));
        if got == 0 {
            events.log(format!("collect C={c}: no request succeeded; stopping"));
            break;
        }
        have += got;
    }
}

/// The results: summaries of every run and of the selected level, the metadata.
#[allow(clippy::too_many_arguments)]
fn assemble(
    cfg: &TaskConfig,
    info: &crate::probe::ServerInfo,
    events: &EventSink,
    cancel: &CancellationToken,
    scout: Option<TaskRun>,
    selected: Option<u64>,
    search: Search,
    score_available: bool,
) -> TaskResults {
    let endpoint = cfg.target.endpoint;
    let Search {
        batches, levels, ..
    } = search;
    let interrupted = cancel.is_cancelled();
    if interrupted {
        events.log("interrupted by the user (Ctrl-C, SIGTERM or SIGHUP): results are partial");
    }
    let all_runs: Vec<&TaskRun> = batches.iter().flat_map(|(_, _, b)| b.runs.iter()).collect();
    let all_walls: Vec<f64> = batches.iter().filter_map(|(_, _, b)| b.wall_s()).collect();
    let all_summary = summarize(&all_runs, &all_walls);
    let selected_summary = selected.map(|c| {
        let sel: Vec<&(u64, &str, Batch)> = batches.iter().filter(|(bc, _, _)| *bc == c).collect();
        let runs: Vec<&TaskRun> = sel.iter().flat_map(|(_, _, b)| b.runs.iter()).collect();
        let walls: Vec<f64> = sel.iter().filter_map(|(_, _, b)| b.wall_s()).collect();
        summarize(&runs, &walls)
    });
    if let Some(s) = &selected_summary {
        events.log(format!(
            "task done: C={} {} ok runs, system {} tok/s{}",
            selected.unwrap_or(0),
            s.completed,
            fmt_opt(s.system_gen_tok_s, 1),
            s.accuracy
                .as_ref()
                .map(|a| format!(", accuracy {}/{}", a.correct, a.scored))
                .unwrap_or_default()
        ));
    }
    let mut runs: Vec<TaskRun> = batches
        .into_iter()
        .flat_map(|(_, _, b)| b.runs.into_iter())
        .collect();
    runs.sort_by_key(|r| r.run_index);
    let wrong_runs = runs
        .iter()
        .filter(|r| r.correct == Some(false))
        .cloned()
        .collect();
    let adaptive = cfg.concurrency.is_none();
    let metadata = TaskMetadata {
        version: env!("CARGO_PKG_VERSION").into(),
        tool: TOOL_NAME.into(),
        mode: TASK_MODE.into(),
        interrupted,
        server: cfg.target.server_label.clone(),
        base_url: cfg.target.base_url.clone(),
        endpoint: endpoint.as_str().into(),
        engine: info.engine_name.clone(),
        server_version: info.engine_version.clone(),
        model: info.model.clone(),
        models: info.models.clone(),
        max_model_len: info.max_model_len,
        max_running_requests: info.max_running_requests,
        prompt_source: cfg.prompt_source.clone(),
        prompt_chars: cfg.items[0].prompt.chars().count() as u64,
        dataset_items: cfg.items.len() as u64,
        timestamp: chrono::Local::now().to_rfc3339(),
        max_tokens: cfg.max_tokens,
        ignore_eos: cfg.ignore_eos,
        fixed_concurrency: cfg.concurrency.unwrap_or(0),
        requested_runs: if adaptive { 0 } else { cfg.runs },
        concurrency_levels_requested: if adaptive {
            cfg.levels.clone()
        } else {
            Vec::new()
        },
        concurrency_levels: if adaptive {
            cfg.effective_levels()
        } else {
            Vec::new()
        },
        min_results: if adaptive { cfg.min_results } else { 0 },
        probe_waves: cfg.probe_waves,
        auto_stop: cfg.auto_stop,
        min_improvement: cfg.min_improvement,
        patience: cfg.patience,
        correct_regex: cfg.correct_regex.clone().filter(|r| !r.is_empty()),
        score_source: cfg.score_source.as_str().into(),
        score_available,
        prefill_scout: cfg.prefill_scout,
        temperature: cfg.temperature,
        top_p: cfg.top_p,
        save_text: cfg.save_text,
        selection_metric: "system_gen_tok_s".into(),
        args: cfg.args_snapshot.clone(),
    };
    TaskResults {
        schema_version: TASK_SCHEMA_VERSION.into(),
        metadata,
        prefill_scout: scout,
        selected_concurrency: selected,
        selected_summary,
        all_summary,
        level_summaries: levels,
        wrong_runs,
        runs,
        event_log: events.lines(),
        methodology: methodology(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn think_blocks_are_split_off() {
        assert_eq!(
            split_think("<think>a\nb</think>\nFinal answer: 4"),
            ("a\nb".to_string(), "\nFinal answer: 4".to_string())
        );
        // Template-opened block: only the closing tag is in the output.
        assert_eq!(
            split_think("hmm 42</think>answer 5"),
            ("hmm 42".to_string(), "answer 5".to_string())
        );
        // Cut while thinking: everything after <think> is reasoning.
        assert_eq!(
            split_think("x<think>still 42"),
            ("still 42".to_string(), "x".to_string())
        );
        assert_eq!(
            split_think("<think>a</think>b<think>c</think>d"),
            ("a\nc".to_string(), "bd".to_string())
        );
        assert_eq!(split_think("plain"), (String::new(), "plain".to_string()));
    }

    #[test]
    fn final_line_is_the_last_non_empty_content_line() {
        assert_eq!(
            final_answer_line("a\nFinal answer: 7\n\n  \n"),
            "Final answer: 7"
        );
        assert_eq!(final_answer_line(""), "");
    }

    fn matches(answer: &str, text: &str) -> bool {
        compile(&answer_pattern(answer)).unwrap().is_match(text)
    }

    #[test]
    fn answer_patterns() {
        assert!(matches("42", "Final answer: 42"));
        assert!(matches("42", "Final answer: 42."));
        assert!(matches("42", "**42**"));
        assert!(!matches("42", "Final answer: 142"));
        assert!(!matches("42", "Final answer: 42.5"));
        assert!(!matches("42", "Final answer: -42"));
        assert!(!matches("42", "Final answer: 43"));
        assert!(matches("-3", "answer: -3"));
        assert!(matches("Estonia", "final answer: ESTONIA"));
        assert!(!matches("Estonia", "Estonian"));
        assert!(matches("C++", "language: C++!"));
        assert!(matches("a.b", "x a.b y"));
        assert!(!matches("a.b", "axb"));
    }

    #[test]
    fn dataset_parsing() {
        let items = parse_dataset(
            "{\"id\": 1, \"prompt\": \"p1\", \"answer\": 42}\n\n{\"prompt\": \"p2\", \"regex\": \"\\\\bx\\\\b\"}\n",
        )
        .unwrap();
        assert_eq!(items.len(), 2);
        assert_eq!(items[0].id, "1");
        assert_eq!(items[0].answer.as_deref(), Some("42"));
        assert_eq!(items[1].id, "3");
        assert_eq!(items[1].regex.as_deref(), Some("\\bx\\b"));
        let e = parse_dataset("{\"answer\": 1}").unwrap_err();
        assert!(e.0.contains("line 1") && e.0.contains("prompt"), "{e}");
        let e = parse_dataset("{\"prompt\": \"p\"}\nnot json").unwrap_err();
        assert!(e.0.contains("line 2"), "{e}");
        let e = parse_dataset("{\"prompt\": \"p\", \"regex\": \"(\"}").unwrap_err();
        assert!(e.0.contains("regex"), "{e}");
        assert!(parse_dataset("\n").is_err());
    }

    fn run(ok: bool, tokens: u64, correct: Option<bool>, gen: f64, label: &str) -> TaskRun {
        TaskRun {
            ok,
            completion_tokens: tokens,
            correct,
            gen_elapsed: Some(gen),
            score_label: label.into(),
            elapsed: gen + 0.1,
            error: (!ok).then(|| "x".to_string()),
            ..Default::default()
        }
    }

    #[test]
    fn summary_separates_system_and_per_request_rates() {
        // Two requests of 100 tokens each, both decoding for 2 s, in one 2.5 s batch: the system
        // produced 200 / 2.5 = 80 tok/s; the old "aggregate" says 200 / 4 = 50.
        let a = run(true, 100, Some(true), 2.0, "PASS");
        let b = run(true, 100, Some(false), 2.0, "FAIL");
        let c = run(false, 0, None, 0.0, "ERROR");
        let s = summarize(&[&a, &b, &c], &[2.5]);
        assert_eq!(s.system_gen_tok_s, Some(80.0));
        assert_eq!(s.mean_per_request_gen_tok_s, Some(50.0));
        assert_eq!((s.attempted, s.completed, s.errors), (3, 2, 1));
        assert_eq!((s.scored, s.correct, s.wrong), (2, 1, 1));
        let acc = s.accuracy.unwrap();
        let (lo, hi) = wilson_interval(1, 2, Z95).unwrap();
        assert_eq!((acc.wilson_low, acc.wilson_high), (lo, hi));
        assert_eq!(s.score_labels["ERROR"], 1);
        assert_eq!(s.completion_tokens.unwrap().p50, 100.0);
    }

    #[test]
    fn levels_put_one_first() {
        let t = Target::from_url("http://127.0.0.1:1", None, Endpoint::Chat).unwrap();
        let mut c = TaskConfig::new(t, vec![TaskItem::default()], "prompt");
        c.levels = vec![8, 0, 4, 8, 2];
        assert_eq!(c.effective_levels(), vec![1, 2, 4, 8]);
    }

    #[test]
    fn excerpt_keeps_the_tail() {
        assert_eq!(tail_chars("abc", 5), "abc");
        assert_eq!(tail_chars("abcdefgh", 4), "…fgh");
    }
}
