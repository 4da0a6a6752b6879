//! The task results file of `servebench task` (`metadata.mode = "completion_stats"`): one
//! results type family with the matrix results, read and written by the same code paths (the
//! runner in `servebench-core::task` fills it; the CLI writes it with the same atomic writer).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;
pub use servebench_stats::Summary;

/// Version of the task results format (`schema_version`).
pub const TASK_SCHEMA_VERSION: &str = "1.0";

/// The JSON Schema (draft 2020-12) of the task results file (`schema/task.schema.json`).
pub const TASK_SCHEMA_JSON: &str = include_str!("../../../schema/task.schema.json");

/// `metadata.mode` of task results files (the old tool's name for the mode).
pub const TASK_MODE: &str = "completion_stats";

/// What is matched against the scoring regex.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScoreSource {
    /// The last non-empty line of the answer content (reasoning and `<think>` blocks excluded).
    #[default]
    FinalAnswer,
    /// The whole answer content (reasoning and `<think>` blocks excluded).
    Content,
}

impl ScoreSource {
    /// Name recorded in `metadata.score_source`.
    pub fn as_str(self) -> &'static str {
        match self {
            ScoreSource::FinalAnswer => "final_answer",
            ScoreSource::Content => "content",
        }
    }
}

// ------------------------------------------------------------------------------------------
// Results

/// The task results file (`metadata.mode = "completion_stats"`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TaskResults {
    /// Format version ([`TASK_SCHEMA_VERSION`]).
    pub schema_version: String,
    /// Configuration and server identity.
    pub metadata: TaskMetadata,
    /// The max_tokens = 1 scout request (`null` when disabled or not run).
    pub prefill_scout: Option<TaskRun>,
    /// The selected (fixed or best) concurrency; `null` when no level produced tokens.
    pub selected_concurrency: Option<u64>,
    /// Every run at the selected concurrency (probe and collect); `null` when none selected.
    pub selected_summary: Option<TaskSummary>,
    /// Every measured run (the scout excluded).
    pub all_summary: TaskSummary,
    /// One entry per probed level (or the one fixed level), in run order.
    pub level_summaries: Vec<LevelSummary>,
    /// Runs scored wrong (copies of their `runs` entries).
    pub wrong_runs: Vec<TaskRun>,
    /// Every measured run, by `run_index`.
    pub runs: Vec<TaskRun>,
    /// Every event of the run as `"HH:MM:SS message"` (local time).
    pub event_log: Vec<String>,
    /// How the numbers are computed.
    pub methodology: TaskMethodology,
}

/// Configuration and server identity of a task run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TaskMetadata {
    /// Version of servebench that wrote the file.
    pub version: String,
    /// `servebench`.
    pub tool: String,
    /// `completion_stats`.
    pub mode: String,
    /// Ctrl-C ended the run early (the results are partial).
    pub interrupted: bool,
    /// Server label: `host:port`, or the URL as given.
    pub server: String,
    /// Resolved base URL.
    pub base_url: String,
    /// `chat` or `completions`.
    pub endpoint: String,
    /// Detected engine (`vllm`, `sglang`, `llamacpp`, …, `openai_proxy`, `servebench-sim`).
    pub engine: String,
    /// Engine version when reported.
    pub server_version: Option<String>,
    /// Model used.
    pub model: String,
    /// Models listed by `/v1/models`.
    pub models: Vec<String>,
    /// The model's maximum sequence length, tokens, when reported.
    pub max_model_len: Option<u64>,
    /// The server's concurrency cap, when reported.
    pub max_running_requests: Option<u64>,
    /// `prompt`, `prompt_file:<path>`, `stdin` or `dataset:<path>`.
    pub prompt_source: String,
    /// Characters of the first prompt.
    pub prompt_chars: u64,
    /// Items in the dataset (1 for a single prompt).
    pub dataset_items: u64,
    /// Local ISO-8601 time when the file was written.
    pub timestamp: String,
    /// `max_tokens` of every request (0 = omitted).
    pub max_tokens: u64,
    /// Whether requests carried `ignore_eos: true`.
    pub ignore_eos: bool,
    /// Fixed concurrency (0 = adaptive search).
    pub fixed_concurrency: u64,
    /// Requests of a fixed-concurrency run (0 in adaptive mode).
    pub requested_runs: u64,
    /// `--concurrency-levels` as given (adaptive mode).
    pub concurrency_levels_requested: Vec<u64>,
    /// Levels as searched (1 first, sorted, deduplicated; empty in fixed mode).
    pub concurrency_levels: Vec<u64>,
    /// Ok runs wanted at the selected level (adaptive mode).
    pub min_results: u64,
    /// Probe requests per level = C × probe_waves.
    pub probe_waves: u64,
    /// Whether the search stops after `patience` non-improving levels.
    pub auto_stop: bool,
    /// Relative system-throughput gain that counts as an improvement.
    pub min_improvement: f64,
    /// Non-improving levels before the search stops.
    pub patience: u64,
    /// `--correct-regex` (items' own regex or answer take precedence); `null` when none.
    pub correct_regex: Option<String>,
    /// `final_answer` or `content`.
    pub score_source: String,
    /// Whether any item can be scored.
    pub score_available: bool,
    /// Whether the max_tokens = 1 scout was sent.
    pub prefill_scout: bool,
    /// Sampling temperature sent (`null` = server default).
    pub temperature: Option<f64>,
    /// `top_p` sent (`null` = server default).
    pub top_p: Option<f64>,
    /// Whether full texts are kept in `runs`.
    pub save_text: bool,
    /// The metric that selects the level: `system_gen_tok_s`.
    pub selection_metric: String,
    /// Argument snapshot.
    pub args: Value,
}

/// One request of a task run. Times in s, rates in tok/s, tokens in tokens; `null` = not
/// measured.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TaskRun {
    /// 0 for the scout, then 1, 2, … in claim order.
    pub run_index: u64,
    /// `prefill_scout`, `probe`, `collect` or `profile`.
    pub phase: String,
    /// Concurrency of its batch.
    pub concurrency: u64,
    /// Completed with ≥ 1 output token (no error, not cancelled).
    pub ok: bool,
    /// Score: `true`/`false`, `null` when not scored (no regex, not ok, scout).
    pub correct: Option<bool>,
    /// `PASS`, `FAIL`, `TRUNC` (hit max_tokens without a match), `UNSCORED`, `ERROR`,
    /// `CANCEL` or `SCOUT`.
    pub score_label: String,
    /// Completion tokens (server usage; SSE token events when `estimated_tokens`).
    pub completion_tokens: u64,
    /// Prompt tokens from usage.
    pub prompt_tokens: Option<u64>,
    /// Reasoning tokens from `usage.completion_tokens_details`, when reported.
    pub reasoning_tokens: Option<u64>,
    /// Request sent → end of the response, s.
    pub elapsed: f64,
    /// First → last output token, s.
    pub gen_elapsed: Option<f64>,
    /// Time to the first output token of any kind (reasoning counts), s.
    pub ttft: Option<f64>,
    /// Time to the first answer-content token, s.
    pub time_to_first_content: Option<f64>,
    /// First → second output token, s.
    pub time_to_second_token: Option<f64>,
    /// Decode rate of this request: (tokens − 1) / gen_elapsed, tok/s.
    pub gen_tok_s: Option<f64>,
    /// tokens / elapsed, tok/s.
    pub e2e_tok_s: Option<f64>,
    /// Last finish_reason (`stop`, `length`, …).
    pub finish_reason: Option<String>,
    /// Last non-empty line of the answer content (reasoning excluded).
    pub final_answer: String,
    /// Last ≤ 240 characters of the answer content (of the reasoning when the content is
    /// empty).
    pub output_excerpt: String,
    /// Reasoning field text followed by the raw content (`--save-text` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_text: Option<String>,
    /// Reasoning: `reasoning_content` deltas plus inline `<think>` blocks (`--save-text` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_text: Option<String>,
    /// Answer content with `<think>` blocks removed (`--save-text` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content_text: Option<String>,
    /// Why it failed.
    pub error: Option<String>,
    /// finish_reason was `length`.
    pub hit_max_tokens: bool,
    /// The server sent no usage: tokens were counted from SSE token events.
    pub estimated_tokens: bool,
    /// Cut by Ctrl-C.
    pub cancelled: bool,
    /// Id of the dataset item.
    pub item_id: String,
    /// The item's expected answer.
    pub expected_answer: Option<String>,
    /// Response id sent by the server.
    pub response_id: Option<String>,
}

/// Statistics of a set of runs. Stats objects are `null` when nothing was measured.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TaskSummary {
    /// Runs started.
    pub attempted: u64,
    /// Ok runs (completed with ≥ 1 token).
    pub completed: u64,
    /// Failed runs.
    pub errors: u64,
    /// Runs cut by Ctrl-C.
    pub cancelled: u64,
    /// Whether these runs could be scored.
    pub score_available: bool,
    /// Ok runs that were scored.
    pub scored: u64,
    /// Scored runs that matched.
    pub correct: u64,
    /// Scored runs that did not match (TRUNC included).
    pub wrong: u64,
    /// correct / scored; `null` when nothing was scored.
    pub correct_rate: Option<f64>,
    /// Accuracy with its Wilson 95 % interval; `null` when nothing was scored.
    pub accuracy: Option<Accuracy>,
    /// Runs per score label.
    pub score_labels: BTreeMap<String, u64>,
    /// Ok runs that ended with finish_reason `length`.
    pub hit_max_tokens: u64,
    /// Ok runs without server usage.
    pub estimated_token_runs: u64,
    /// Completion tokens per ok run, tokens.
    pub completion_tokens: Option<Summary>,
    /// TTFT per ok run, s.
    pub ttft: Option<Summary>,
    /// Time to first answer content per ok run, s.
    pub time_to_first_content: Option<Summary>,
    /// Elapsed time per ok run, s.
    pub elapsed: Option<Summary>,
    /// Generation time (first → last token) per ok run, s.
    pub gen_elapsed: Option<Summary>,
    /// Per-request decode rate, tok/s.
    pub gen_tok_s: Option<Summary>,
    /// Per-request end-to-end rate, tok/s.
    pub e2e_tok_s: Option<Summary>,
    /// Σ completion tokens of ok runs, tokens.
    pub total_completion_tokens: u64,
    /// Σ over batches of (end of the last request − start of the first), s.
    pub wall_time: Option<f64>,
    /// **System throughput**: total_completion_tokens / wall_time, tok/s (the selection
    /// metric).
    pub system_gen_tok_s: Option<f64>,
    /// The old tool's "aggregate": Σ tokens / Σ per-request generation time — a token-weighted
    /// per-request speed, not a system rate, tok/s.
    pub mean_per_request_gen_tok_s: Option<f64>,
    /// Batches the runs came from.
    pub batches: u64,
}

/// Accuracy of the scored runs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Accuracy {
    /// Correct runs.
    pub correct: u64,
    /// Scored runs.
    pub scored: u64,
    /// correct / scored (0–1).
    pub rate: f64,
    /// Wilson interval, low end (0–1).
    pub wilson_low: f64,
    /// Wilson interval, high end (0–1).
    pub wilson_high: f64,
    /// Confidence of the interval (0.95).
    pub confidence: f64,
}

/// One level of the search (or the fixed level).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct LevelSummary {
    /// Concurrency C.
    pub concurrency: u64,
    /// `probe` (adaptive) or `profile` (fixed).
    pub phase: String,
    /// Statistics of the level's probe (or profile) batch.
    pub summary: TaskSummary,
    /// This level was selected.
    pub selected: bool,
    /// Its system throughput beat the best so far by more than min_improvement.
    pub improved: bool,
}

/// How the task numbers are computed (one sentence each).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TaskMethodology {
    /// Name of the mode.
    pub name: String,
    /// The scout.
    pub prefill: String,
    /// The level search.
    pub adaptive_concurrency: String,
    /// Token accounting.
    pub token_need: String,
    /// Scoring.
    pub correctness: String,
    /// The throughput definitions.
    pub throughput: String,
}
