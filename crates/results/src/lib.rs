//! The one results type of servebench, serialised as the results JSON.
//!
//! The JSON keeps the top-level keys and the `metadata` / `results[]` field names of the tool it
//! replaces (`llm_decode_bench.py`, spec `llm-decode-bench-spec.md` §6) so that existing scripts
//! keep working, and adds:
//!
//! * `schema_version` ([`SCHEMA_VERSION`]) and a committed JSON Schema
//!   (`schema/results.schema.json`, embedded as [`SCHEMA_JSON`]);
//! * a typed [`CellStatus`] and a reason on **every** cell — skipped and failed cells are
//!   exported instead of dropped;
//! * `null` for every number that was not measured (the old tool wrote `0.0`);
//! * the complete `event_log` (the old tool kept only the last 80 lines).
//!
//! Every struct derives `Default` and uses `#[serde(default)]`, so files written by older tools
//! (0.4.18 and 0.4.29 field sets) deserialise with the same types.

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub mod check;

/// Characters that draw nothing. First Unicode's bidirectional formatting characters (U+061C, U+200E, U+200F, U+202A–U+202E,
/// U+2066–U+2069): invisible, they reorder what a terminal or a page shows after them, so a model
/// id with U+202E reads backwards ("Trojan source"). Never printed from a server's text (the
/// report's `export::one_line`, the client's `error::strip_controls` and so every log line).
///
/// Also true for the other invisible format characters a server's text could hide behind
/// (break-it round 6): zero-width space and joiners (U+200B–U+200D), the line and paragraph
/// separators U+2028 / U+2029 (a line break to a terminal), word joiner and invisible operators
/// (U+2060–U+2064), the byte-order mark U+FEFF and the tag characters (U+E0000–U+E007F).
/// Break-it round 7 added the rest of Unicode's format characters (category Cf: soft hyphen,
/// Arabic and Syriac marks, the deprecated format controls U+206A–U+206F, interlinear
/// annotation, shorthand and musical format controls) and the characters that draw nothing
/// (combining grapheme joiner, Hangul fillers, Khmer inherent vowels, Mongolian variation
/// selectors, braille blank, variation selectors): a key split by any of them read whole on a
/// terminal.
pub fn is_invisible(c: char) -> bool {
    matches!(
        c,
        '\u{00AD}'
            | '\u{034F}'
            | '\u{0600}'..='\u{0605}'
            | '\u{061C}'
            | '\u{06DD}'
            | '\u{070F}'
            | '\u{0890}'..='\u{0891}'
            | '\u{08E2}'
            | '\u{115F}'..='\u{1160}'
            | '\u{17B4}'..='\u{17B5}'
            | '\u{180B}'..='\u{180F}'
            | '\u{200B}'..='\u{200F}'
            | '\u{2028}'..='\u{202E}'
            | '\u{2060}'..='\u{206F}'
            | '\u{2800}'
            | '\u{3164}'
            | '\u{FE00}'..='\u{FE0F}'
            | '\u{FEFF}'
            | '\u{FFA0}'
            | '\u{FFF9}'..='\u{FFFB}'
            | '\u{110BD}'
            | '\u{110CD}'
            | '\u{13430}'..='\u{1343F}'
            | '\u{1BCA0}'..='\u{1BCA3}'
            | '\u{1D173}'..='\u{1D17A}'
            | '\u{E0000}'..='\u{E007F}'
            | '\u{E0100}'..='\u{E01EF}'
    )
}

/// `s` fit for a terminal line: every control character (line breaks included) and every
/// invisible character ([`is_invisible`]) written as a `\u{…}` escape, so a file name or a
/// record's text cannot retitle or recolour the terminal, reorder what follows, or forge a
/// line (break-it round 8: registry file names and schema messages printed raw). Borrowed
/// when there is none.
pub fn escape_for_terminal(s: &str) -> std::borrow::Cow<'_, str> {
    let bad = |c: char| c.is_control() || is_invisible(c);
    if !s.chars().any(bad) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        if bad(c) {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Characters a secret's matcher skips in a text: the invisible ones ([`is_invisible`]) and
/// combining marks (U+0300–U+036F, U+1AB0–U+1AFF, U+1DC0–U+1DFF, U+20D0–U+20FF,
/// U+FE20–U+FE2F), and white space, which a text's sanitiser puts in place of the invisible
/// ones: a key split by a zero-width space, by accents or by blanks still reads as the key.
fn is_skipped_in_secrets(c: char) -> bool {
    is_invisible(c)
        || c.is_whitespace()
        || matches!(
            c,
            '\u{0300}'..='\u{036F}'
                | '\u{1AB0}'..='\u{1AFF}'
                | '\u{1DC0}'..='\u{1DFF}'
                | '\u{20D0}'..='\u{20FF}'
                | '\u{FE20}'..='\u{FE2F}'
        )
}

/// `hay` with every occurrence of each of `needles` replaced by `with`, matching whatever the
/// ASCII case and whatever invisible characters or combining marks stand between the
/// characters (break-it rounds 7 and 8: a server echoing the API key lower-cased, or split by
/// U+200B, U+00AD or U+0301, passed an exact match). The rest of the text is kept as it was.
/// `None` when nothing matched. Needles that are empty once those characters are skipped are
/// ignored.
pub fn replace_secrets<S: AsRef<str>>(hay: &str, needles: &[S], with: &str) -> Option<String> {
    // the text as matched (skipped characters out, ASCII lower case), and for each of its
    // bytes the start of the original character it came from
    let mut skel = String::with_capacity(hay.len());
    let mut origin: Vec<usize> = Vec::with_capacity(hay.len());
    for (i, c) in hay.char_indices() {
        if is_skipped_in_secrets(c) {
            continue;
        }
        skel.push(c.to_ascii_lowercase());
        origin.resize(skel.len(), i);
    }
    let mut ranges: Vec<(usize, usize)> = Vec::new();
    for n in needles {
        let n: String = n
            .as_ref()
            .chars()
            .filter(|c| !is_skipped_in_secrets(*c))
            .map(|c| c.to_ascii_lowercase())
            .collect();
        if n.is_empty() {
            continue;
        }
        for (i, _) in skel.match_indices(&n) {
            let last = origin[i + n.len() - 1];
            let last_len = hay[last..].chars().next().map_or(1, char::len_utf8);
            ranges.push((origin[i], last + last_len));
        }
    }
    if ranges.is_empty() {
        return None;
    }
    ranges.sort_unstable();
    let mut out = String::with_capacity(hay.len());
    let mut at = 0;
    for (a, b) in ranges {
        if b <= at {
            continue;
        }
        if a >= at {
            out.push_str(&hay[at..a]);
            out.push_str(with);
        }
        at = b;
    }
    out.push_str(&hay[at..]);
    Some(out)
}

#[cfg(test)]
mod secret_match_tests {
    use super::replace_secrets;

    #[test]
    fn secrets_match_whatever_the_case_invisible_characters_and_marks() {
        let k = ["CanaryKey123456"];
        let r = |s: &str| replace_secrets(s, &k, "<r>");
        assert_eq!(
            r("x canarykey123456-instruct").as_deref(),
            Some("x <r>-instruct")
        );
        assert_eq!(
            r("CAN\u{200B}ARY\u{00AD}KEY\u{2060}123456!").as_deref(),
            Some("<r>!")
        );
        assert_eq!(r("CA\u{0301}NARYKEY123456").as_deref(), Some("<r>"));
        assert_eq!(r("é CANARYKEY123456 é").as_deref(), Some("é <r> é"));
        assert_eq!(r("x CAN ARY KEY 123 456 y").as_deref(), Some("x <r> y"));
        assert_eq!(r("nothing here"), None);
        // overlapping needles: the text is replaced once
        assert_eq!(
            replace_secrets("aaSECRETSECRETaa", &["secretsecret", "secret"], "#").as_deref(),
            Some("aa#aa")
        );
        assert_eq!(replace_secrets("abc", &["\u{200B}"], "#"), None);
    }

    #[test]
    fn terminal_escapes() {
        use super::escape_for_terminal as e;
        assert_eq!(e("plain/path.json"), "plain/path.json");
        assert_eq!(
            e("a\u{1b}]0;T\u{7}b\nc\u{202E}"),
            "a\\u{1b}]0;T\\u{7}b\\u{a}c\\u{202e}"
        );
    }
}

#[cfg(test)]
mod invisible_tests {
    #[test]
    fn invisible_format_characters_are_recognised() {
        for c in [
            '\u{202E}',
            '\u{2067}',
            '\u{200B}',
            '\u{FEFF}',
            '\u{2028}',
            '\u{2029}',
            '\u{E0041}',
            '\u{2060}',
            '\u{00AD}',
            '\u{206A}',
            '\u{FFF9}',
            '\u{3164}',
            '\u{FE0F}',
            '\u{E0100}',
            '\u{1D173}',
        ] {
            assert!(super::is_invisible(c), "{:04X}", c as u32);
        }
        for c in ['a', 'é', '模', ' ', '\u{2030}', '\u{00A0}'] {
            assert!(!super::is_invisible(c), "{:04X}", c as u32);
        }
    }
}
mod kinds;
pub mod task;

pub use kinds::{
    AggregateSource, BenchmarkMode, BurstE2eStatus, CacheState, DecodeLayer, DecodeMode,
    FailureKind, PrefillMethod, PrefillMode, PromptCache,
};
mod rate;
mod steady;
pub use rate::{
    ArrivalProcess, RateProbe, RateRow, RateSearch, RateSummary, SearchStop, SloCheck, SloMetric,
};
pub use steady::SteadyState;

/// A JSON object (`{}` when empty).
pub type JsonObject = serde_json::Map<String, Value>;

/// Version of the results format written by this build. Bumped on incompatible changes; new
/// optional fields do not bump it.
pub const SCHEMA_VERSION: &str = "1.0";

/// The JSON Schema (draft 2020-12) that every results file validates against.
pub const SCHEMA_JSON: &str = include_str!("../../../schema/results.schema.json");

/// Tool name recorded in `metadata.tool`.
pub const TOOL_NAME: &str = "servebench";

/// A whole benchmark run: what the results JSON contains.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Results {
    /// Format version ([`SCHEMA_VERSION`]); empty in files written by the old tool.
    pub schema_version: String,
    /// Run configuration and server identity.
    pub metadata: Metadata,
    /// Client host and argument snapshot taken before the server was contacted.
    pub startup_diagnostics: JsonObject,
    /// NVIDIA P2P override check; `{"status": "not_run"}` when servebench did not check it.
    pub nvidia_p2p_override: JsonObject,
    /// GPU fabric micro-benchmark (not run by servebench: `{"status": "not_run"}`).
    pub p2pmark: JsonObject,
    /// AMD NUMA fabric micro-benchmark (not run by servebench: `{"status": "not_run"}`).
    pub amd_fabric: JsonObject,
    /// Hardware summary over the whole run (`{}` when no hardware sampler ran).
    pub hardware_run_summary: JsonObject,
    /// The engine's launch when the server runs on this host (`status` `found`: pid, command
    /// line, working directory, engine environment, container hints; secrets redacted), else
    /// `status` `remote` / `not_found` / `unreadable` with a `reason`. `{}` in older files.
    pub engine_launch: JsonObject,
    /// Every event of the run as `"HH:MM:SS message"` (local time), complete.
    pub event_log: Vec<String>,
    /// Cold prefill rows keyed by context label (`"8192"`), in run order.
    pub prefill: IndexMap<String, PrefillRow>,
    /// Warm-prefix prefill rows (the same prompt sent again), keyed like `prefill`. Kept apart so
    /// warm (cache-hit) and cold prefill are never compared by mistake.
    pub prefill_warm: IndexMap<String, PrefillRow>,
    /// Sustained-decode (or request-count) cells, every planned cell, in run order.
    pub results: Vec<CellResult>,
    /// `{ "<ctx>": { "<C>": aggregate_tps } }` over cells with status `ok`.
    pub summary_table: IndexMap<String, IndexMap<String, f64>>,
    /// Burst / E2E cells (empty unless the burst layer ran).
    pub burst_results: Vec<CellResult>,
    /// Same shape as `summary_table`, for the burst layer.
    pub burst_summary_table: IndexMap<String, IndexMap<String, f64>>,
    /// How each layer's headline number is computed.
    pub methodology: Methodology,
    /// Open-loop request-rate rows (`--request-rate`, `--rate-search`), in run order; absent
    /// when that mode did not run.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rate_results: Vec<RateRow>,
    /// `--rate-search` outcomes (one per context), each with every probed rate; absent otherwise.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rate_search: Vec<RateSearch>,
    /// True only in the file written after the whole plan ran; false in every checkpoint and
    /// after an interruption. `None` in files written before checkpoints existed (and the old
    /// tool's), which were only ever written at the end.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_complete: Option<bool>,
    /// `running` (a checkpoint: the run was still going when this was written — if no process is
    /// running, it was killed), `complete`, or `interrupted` (Ctrl-C, SIGTERM or SIGHUP: partial
    /// results, the remaining cells are `skipped_user`). `None` in older files.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_state: Option<RunState>,
    /// Set when this run resumed an earlier results file (`servebench run --resume`): which file
    /// and which cells were carried over unchanged. `None` otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resumed_from: Option<ResumedFrom>,
}

/// How far a run got when its results file was written ([`Results::run_state`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    /// A checkpoint written while the run was going (after each finished cell or prefill row).
    Running,
    /// The whole plan ran.
    Complete,
    /// The user (Ctrl-C, SIGTERM, SIGHUP) interrupted the run; the file holds partial results.
    Interrupted,
}

impl RunState {
    /// The snake_case name used in the JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Running => "running",
            RunState::Complete => "complete",
            RunState::Interrupted => "interrupted",
        }
    }
}

/// Where the cells of a resumed run came from ([`Results::resumed_from`]).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ResumedFrom {
    /// Path of the results file given to `--resume`, as given.
    pub file: String,
    /// `metadata.run_id` of that file (the run that measured the kept cells).
    pub run_id: String,
    /// `metadata.timestamp` of that file.
    pub timestamp: String,
    /// Cells carried over unchanged, as `"C=<C> ctx=<tokens>"` (burst cells prefixed `burst `).
    pub kept_cells: Vec<String>,
    /// Prefill contexts (tokens) whose cold and warm rows were carried over unchanged.
    pub kept_prefill: Vec<u64>,
}

/// Run configuration and server identity (`metadata`, seed spec §6.1, plus servebench fields).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Metadata {
    /// Version of the tool that wrote the file.
    pub version: String,
    /// `servebench` (absent in the old tool's files).
    pub tool: String,
    /// Detected engine: `vllm`, `sglang`, `llamacpp`, `tgi`, `ollama`, `openai_proxy`, `servebench-sim`.
    pub engine: String,
    /// Engine version string when the server reports one.
    pub engine_version: Option<String>,
    /// Model name used in the requests.
    pub model: String,
    /// Server label: `host:port`, or the URL as given.
    pub server: String,
    /// Resolved base URL (scheme, host, port, path).
    pub base_url: String,
    /// API endpoint: `chat` (`/v1/chat/completions`) or `completions` (`/v1/completions`).
    pub endpoint: String,
    /// Local ISO-8601 time when the file was written.
    pub timestamp: String,
    /// RFC3339 UTC time (`…Z`) when the run started, before the server was contacted: the
    /// measurement time a registry record carries (`measured_at`). Null in older files.
    pub started_at: Option<String>,
    /// `duration` (sustained cells) or `request-count` (burst cells as the primary layer).
    pub decode_mode: DecodeMode,
    /// `sustained_decode` or `burst_e2e_decode`.
    pub primary_decode_layer: DecodeLayer,
    /// Measured window of each sustained cell, s.
    pub duration_per_test: f64,
    /// Requests per cell in request-count mode (0 = sustained mode).
    pub request_count: u64,
    /// Discarded requests before each request-count cell.
    pub warmup_request_count: u64,
    /// Whether the burst layer ran after the sustained matrix.
    pub run_burst: bool,
    /// `skipped`, `standalone_cold` or `integrated_decode_scout`.
    pub prefill_mode: PrefillMode,
    /// `--standalone-prefill` given.
    pub standalone_prefill: bool,
    /// `--prefill-only` given.
    pub prefill_only: bool,
    /// `--skip-prefill` given.
    pub skip_prefill: bool,
    /// `--prefill-contexts` as parsed, tokens.
    pub prefill_contexts: Option<Vec<u64>>,
    /// `--prefill-metric`: `client`, `auto` or `prometheus`.
    pub prefill_metric: Option<String>,
    /// `not_run_use_--run-burst` or `enabled`.
    pub burst_e2e_status: BurstE2eStatus,
    /// Burst requests per cell (0 = automatic).
    pub burst_request_count: u64,
    /// Burst warmup requests (0 = automatic).
    pub burst_warmup_request_count: u64,
    /// Automatic burst size multiplier.
    pub burst_requests_per_concurrency: u64,
    /// Hidden C=1 decode warmup length, s (0 = disabled).
    pub decode_warmup_seconds: f64,
    /// Context of the hidden decode warmup, tokens (0 when none ran).
    pub decode_warmup_context: u64,
    /// Concurrency of the hidden decode warmup (1 when enabled, else 0).
    pub decode_warmup_concurrency: u64,
    /// Readiness timeout override per cell, s (0 = automatic policy).
    pub cell_warmup_timeout_seconds: f64,
    /// The automatic readiness timeout policy, as text.
    pub cell_warmup_timeout_policy: String,
    /// Stable window that readiness must hold before a cell's measured window opens, s.
    pub stable_window_seconds: Option<f64>,
    /// `--show-capacity-limited-values` given.
    pub show_capacity_limited_values: bool,
    /// `max_tokens` of every decode request.
    pub max_tokens: u64,
    /// Sampling temperature sent, or null when the server default was used.
    pub temperature: Option<f64>,
    /// Whether requests carried `ignore_eos: true`.
    pub ignore_eos: bool,
    /// KV budget used for capacity skipping, tokens (0 = none known).
    pub max_total_tokens: u64,
    /// Where the KV budget came from: `argument`, `vllm_metrics`, `sglang_server_info`,
    /// `llamacpp_slots`, `none`.
    pub kv_budget_source: Option<String>,
    /// The server's concurrency cap, when it reports one (SGLang, TGI).
    pub max_running_requests: Option<u64>,
    /// `--dcp-size` argument (0 = automatic).
    pub dcp_size: u64,
    /// Whether the server's Prometheus `/metrics` was usable.
    pub metrics_available: bool,
    /// Why metrics are not available (empty when they are).
    pub metrics_warning: String,
    /// Concurrency levels as given.
    pub concurrency_levels: Vec<u64>,
    /// Context lengths as given, tokens.
    pub context_lengths: Vec<u64>,
    /// The server's maximum model length (prompt + output), tokens, when known.
    pub max_model_len: Option<u64>,
    /// How prompts were sized: `tokenize_exact` (server `/tokenize`), `calibrated_estimate` or
    /// `cached_estimate` (chars/token ratio), `none` (only context 0).
    pub prompt_targeting: String,
    /// Characters per prompt token used by estimate targeting.
    pub chars_per_token: Option<f64>,
    /// Per-run nonce in every prompt prefix (12 lowercase letters).
    pub run_id: String,
    /// `--seed`, when prompts were made reproducible.
    pub seed: Option<u64>,
    /// True when the run was interrupted (Ctrl-C) and the file holds partial results.
    pub interrupted: bool,
    /// Whether the startup diagnostics were collected.
    pub startup_diagnostics_available: bool,
    /// NVIDIA P2P override state; null when not checked.
    pub nvidia_p2p_override_effective: Option<bool>,
    /// `not_run` unless the fabric helper ran.
    pub p2pmark_status: String,
    /// `not_run` unless the fabric helper ran.
    pub amd_fabric_status: String,
}

/// Typed outcome of one planned cell.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CellStatus {
    /// Measured; the numbers are valid.
    #[default]
    Ok,
    /// Not run: C × (ctx + max_tokens) exceeds the KV budget.
    SkippedCapacity,
    /// Not run: ctx + max_tokens exceeds the model's maximum length.
    SkippedContext,
    /// Not run: the user interrupted or skipped it.
    SkippedUser,
    /// The cell could not run (for example its scout request failed).
    Error,
    /// The cell ran but its numbers cannot be trusted (a stream failed, no tokens in the window).
    Invalid,
}

impl CellStatus {
    /// The snake_case name used in the JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            CellStatus::Ok => "ok",
            CellStatus::SkippedCapacity => "skipped_capacity",
            CellStatus::SkippedContext => "skipped_context",
            CellStatus::SkippedUser => "skipped_user",
            CellStatus::Error => "error",
            CellStatus::Invalid => "invalid",
        }
    }

    /// True for the three `skipped_*` statuses.
    pub fn is_skipped(self) -> bool {
        matches!(
            self,
            CellStatus::SkippedCapacity | CellStatus::SkippedContext | CellStatus::SkippedUser
        )
    }
}

/// One per-request sample (seed spec §4.1). Times in s, rates in tok/s; `null` = not measured.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RequestSample {
    /// TTFT: first output token (content, reasoning or tool call) arrival − request sent, s.
    pub ttft: Option<f64>,
    /// TTST: arrival of the event that brought the output to ≥ 2 tokens − first token arrival, s.
    pub time_to_second_token: Option<f64>,
    /// Request latency: last token arrival − request sent, s (completed requests only).
    pub latency: Option<f64>,
    /// Per-token ITL: (last − first token arrival) / (output tokens − 1), s.
    pub inter_token_latency_avg: Option<f64>,
    /// Chunk ITL: (last − first token *event*) / (token events − 1), s.
    pub chunk_inter_token_latency_avg: Option<f64>,
    /// Prompt tokens from usage (null when the server sent no usage).
    pub input_tokens: Option<u64>,
    /// Output tokens (usage when present, else one per token event).
    pub output_tokens: u64,
    /// 1 / ITL, tok/s.
    pub output_tps_per_user: Option<f64>,
    /// output tokens / (last token arrival − request sent), tok/s (completed only).
    pub e2e_output_tps_per_user: Option<f64>,
    /// `[DONE]` (or a finish reason at a clean end of stream) was received.
    pub completed: bool,
    /// The stream was cut by the benchmark (window closed), not by the server.
    pub cancelled: bool,
    /// SSE events that carried output tokens.
    pub token_events: Option<u64>,
    /// Whether this request's usage arrived on every token event (cumulative).
    pub continuous_usage: Option<bool>,
    /// Prompt tokens served from the prefix cache (usage.prompt_tokens_details.cached_tokens).
    pub cached_tokens: Option<u64>,
    /// Server's finish reason (`length`, `stop`, …).
    pub finish_reason: Option<String>,
    /// Response `id` of the stream (correlates with server logs).
    pub response_id: Option<String>,
    /// Request send time relative to the opening of the cell's measured window, s (negative =
    /// before the window).
    pub sent_at_window_s: Option<f64>,
    /// Time to the first *answer* token (not reasoning), s — TTFT to content for reasoning models.
    pub time_to_first_content: Option<f64>,
    /// Reasoning tokens (`usage.completion_tokens_details.reasoning_tokens`, clamped to the
    /// output tokens); null when the server does not report them (never assumed 0).
    pub reasoning_tokens: Option<u64>,
    /// Output tokens counted only by events without a time (a usage-only chunk, a finish chunk
    /// without text, usage after the finish chunk): part of `output_tokens`, never of a token
    /// time (TTST, ITL, latency).
    pub untimed_output_tokens: Option<u64>,
    /// llama.cpp `timings.prompt_n`: prompt tokens the server computed (cached ones excluded).
    pub timings_prompt_n: Option<u64>,
    /// llama.cpp `timings.cache_n`: prompt tokens the server reused from its cache.
    pub timings_cache_n: Option<u64>,
    /// llama.cpp `timings.predicted_n`: tokens the server generated.
    pub timings_predicted_n: Option<u64>,
    /// llama.cpp `timings.predicted_per_second`: the server's decode rate for this request,
    /// tok/s (as sent; else `predicted_n / predicted_ms`).
    pub timings_predicted_per_second: Option<f64>,
    /// llama.cpp `timings.draft_n`: speculative draft tokens proposed.
    pub timings_draft_n: Option<u64>,
    /// llama.cpp `timings.draft_n_accepted`: draft tokens accepted.
    pub timings_draft_n_accepted: Option<u64>,
    /// `draft_n_accepted / draft_n` (0–1); null without draft counts or with `draft_n = 0`.
    pub draft_acceptance_rate: Option<f64>,
}

/// One matrix cell (seed spec §6.2 field names, plus status fields). Times in s, rates in tok/s.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CellResult {
    /// Concurrency C: streams kept in flight.
    pub concurrency: u64,
    /// Context label in prompt tokens (the target, not the measured prompt tokens).
    pub context_tokens: u64,
    /// Typed outcome.
    pub status: CellStatus,
    /// Why the cell is not `ok` (empty for ok cells).
    pub status_reason: String,
    /// `duration`, `request-count` or `burst-e2e`.
    pub benchmark_mode: BenchmarkMode,
    /// Requests per cell (request-count / burst modes).
    pub request_count_target: u64,
    /// Discarded warmup requests (request-count / burst modes).
    pub warmup_request_count: u64,
    /// Denominator of `aggregate_tps`, s.
    pub measurement_seconds: Option<f64>,
    /// Readiness tick → window close, s (sustained).
    pub measurement_wall_seconds: Option<f64>,
    /// Output tokens credited to the window by the client (usage-corrected).
    pub client_output_tokens: Option<u64>,
    /// Server-side generated tokens over the window (Prometheus counter delta).
    pub server_output_tokens: Option<u64>,
    /// Where `aggregate_tps` came from: `openai_continuous_usage`,
    /// `openai_stream_chunks_fallback`, `openai_completed_usage`, `prometheus_fallback`, `none`.
    pub aggregate_source: AggregateSource,
    /// Headline: output tokens generated inside the window / window length, tok/s.
    pub aggregate_tps: Option<f64>,
    /// aggregate_tps / C (derived), tok/s.
    pub per_request_avg_tps: Option<f64>,
    /// TTFT statistics over the cell's requests, s.
    pub ttft_avg: Option<f64>,
    /// TTFT p50, s.
    pub ttft_p50: Option<f64>,
    /// TTFT p90, s.
    pub ttft_p90: Option<f64>,
    /// TTFT p99, s.
    pub ttft_p99: Option<f64>,
    /// TTST mean, s.
    pub time_to_second_token_avg: Option<f64>,
    /// TTST p50, s.
    pub time_to_second_token_p50: Option<f64>,
    /// TTST p90, s.
    pub time_to_second_token_p90: Option<f64>,
    /// TTST p99, s.
    pub time_to_second_token_p99: Option<f64>,
    /// Request latency mean (completed requests only), s.
    pub request_latency_avg: Option<f64>,
    /// Request latency p50, s.
    pub request_latency_p50: Option<f64>,
    /// Request latency p90, s.
    pub request_latency_p90: Option<f64>,
    /// Request latency p99, s.
    pub request_latency_p99: Option<f64>,
    /// Per-token ITL mean, s.
    pub inter_token_latency_avg: Option<f64>,
    /// Per-token ITL p50, s.
    pub inter_token_latency_p50: Option<f64>,
    /// Per-token ITL p90, s.
    pub inter_token_latency_p90: Option<f64>,
    /// Per-token ITL p99, s.
    pub inter_token_latency_p99: Option<f64>,
    /// Output tok/s per user (1/ITL) mean.
    pub output_tps_per_user_avg: Option<f64>,
    /// Output tok/s per user p50.
    pub output_tps_per_user_p50: Option<f64>,
    /// Output tok/s per user p90.
    pub output_tps_per_user_p90: Option<f64>,
    /// Output tok/s per user p99.
    pub output_tps_per_user_p99: Option<f64>,
    /// E2E output tok/s per user mean (completed only).
    pub e2e_output_tps_per_user_avg: Option<f64>,
    /// E2E output tok/s per user p50.
    pub e2e_output_tps_per_user_p50: Option<f64>,
    /// E2E output tok/s per user p90.
    pub e2e_output_tps_per_user_p90: Option<f64>,
    /// E2E output tok/s per user p99.
    pub e2e_output_tps_per_user_p99: Option<f64>,
    /// Time to first answer content (after any reasoning) mean, s.
    pub time_to_first_content_avg: Option<f64>,
    /// Time to first answer content p50, s.
    pub time_to_first_content_p50: Option<f64>,
    /// Time to first answer content p90, s.
    pub time_to_first_content_p90: Option<f64>,
    /// Time to first answer content p99, s.
    pub time_to_first_content_p99: Option<f64>,
    /// Mean reasoning tokens per request (requests whose server reported them).
    pub reasoning_tokens_avg: Option<f64>,
    /// Completed requests that stopped before `max_tokens` (finish_reason other than `length`).
    pub early_stop_requests: Option<u64>,
    /// Chunk ITL mean, s.
    pub chunk_inter_token_latency_avg: Option<f64>,
    /// Chunk ITL p50, s.
    pub chunk_inter_token_latency_p50: Option<f64>,
    /// Chunk ITL p90, s.
    pub chunk_inter_token_latency_p90: Option<f64>,
    /// Chunk ITL p99, s.
    pub chunk_inter_token_latency_p99: Option<f64>,
    /// Mean prompt tokens (usage), tokens.
    pub input_seq_len_avg: Option<f64>,
    /// Output tokens per request mean.
    pub output_seq_len_avg: Option<f64>,
    /// Output tokens per request p50.
    pub output_seq_len_p50: Option<f64>,
    /// Output tokens per request p90.
    pub output_seq_len_p90: Option<f64>,
    /// Output tokens per request p99.
    pub output_seq_len_p99: Option<f64>,
    /// Requests in the statistics (those that produced output).
    pub request_count: u64,
    /// Of those, requests that completed.
    pub completed_request_count: u64,
    /// Every per-request sample used for the statistics.
    pub request_samples: Vec<RequestSample>,
    /// Tokens accounted to the cell (usage tokens in the window; for skipped-capacity cells the
    /// tokens the cell would need).
    pub total_tokens: Option<u64>,
    /// Cell start (before the scout) → end of collection, s.
    pub wall_time: Option<f64>,
    /// Requests that completed during the cell (all, not only in the window).
    pub num_completed: u64,
    /// Requests that failed during the cell.
    pub num_errors: u64,
    /// Server generation throughput over the window, tok/s.
    pub server_gen_throughput: Option<f64>,
    /// Server utilisation gauge (vLLM: KV-cache usage), 0–1.
    pub server_utilization: Option<f64>,
    /// Speculative-decoding acceptance rate over the window, 0–1.
    pub server_spec_accept_rate: Option<f64>,
    /// Mean acceptance length over the window, tokens per verify step.
    pub server_spec_accept_length: Option<f64>,
    /// Mean running requests on the server during the window.
    pub avg_running_reqs: Option<f64>,
    /// Max running requests on the server during the window.
    pub max_running_reqs: Option<f64>,
    /// Mean running requests, rounded to 0.1 (same value as avg_running_reqs).
    pub effective_concurrency: Option<f64>,
    /// Mean queued requests during the window.
    pub avg_queue_reqs: Option<f64>,
    /// Max queued requests during the window.
    pub max_queue_reqs: Option<f64>,
    /// Share of window samples with a non-empty queue, 0–1.
    pub queue_fraction: Option<f64>,
    /// C > 1 and fewer than 98 % of C requests ran on average.
    pub underfilled: bool,
    /// Readiness did not hold before the readiness timeout.
    pub warmup_timed_out: bool,
    /// Cell start → readiness, s.
    pub warmup_duration: Option<f64>,
    /// Why readiness was declared (or `warmup_timeout`).
    pub ready_reason: String,
    /// First failing readiness condition at a timeout, or the KV deficit of a skipped cell.
    pub timeout_reason: String,
    /// The server could not run all C requests (queueing, timeout, underfill).
    pub capacity_limited: bool,
    /// Hardware summary of the window (`{}` without a hardware sampler).
    pub hardware_summary: JsonObject,
    /// SSE events carrying tokens that arrived inside the window.
    pub client_token_events: Option<u64>,
    /// Requests in the window whose usage streamed on every token event / all requests.
    pub continuous_usage_requests: Option<u64>,
    /// Measured prompt tokens of this context's prompt (server count), tokens.
    pub prompt_tokens: Option<u64>,
    /// Client CPU time during the window / window length (1.0 = one full core).
    pub client_cpu_util: Option<f64>,
    /// Worst lateness of the client's 10 ms monitor tick during the window, ms — proof that the
    /// client kept up (large values mean the client, not the server, was the bottleneck).
    pub client_max_tick_lag_ms: Option<f64>,
    /// Mean KV-cache usage on the server during the window, 0–1.
    pub server_kv_usage_avg: Option<f64>,
    /// Max KV-cache usage on the server during the window, 0–1.
    pub server_kv_usage_max: Option<f64>,
    /// Prefix-cache hit rate over the window (Δhits / Δqueries), 0–1.
    pub server_prefix_cache_hit_rate: Option<f64>,
    /// Requests the server preempted during the window.
    pub server_preemptions: Option<u64>,
    /// A server counter went down during the window (restart): deltas are partial.
    pub server_counter_reset: Option<bool>,
    /// Scheduler samples (scrapes) behind the averages.
    pub server_samples: Option<u64>,
    /// Mean time received bytes waited in the kernel before the client read them, ms (requests
    /// of the window; kernel receive timestamps). Timing uses the kernel's arrival times, so this
    /// shows how far behind the client ran without distorting TTFT or ITL.
    pub client_read_delay_avg_ms: Option<f64>,
    /// Largest such wait, ms.
    pub client_read_delay_max_ms: Option<f64>,
    /// Timing of the two `/metrics` scrapes behind `server_output_tokens`, relative to the
    /// opening of the measured window, s. The server read each counter somewhere between the
    /// scrape's request and its answer; null when either scrape failed.
    pub server_scrapes: Option<ServerScrapes>,
    /// Estimated time between the server's two counter readings, s (midpoints of each scrape's
    /// request → answer interval); `server_gen_throughput` = `server_output_tokens` / this.
    /// It exceeds `measurement_seconds` when a scrape was sent or answered late (a client
    /// starved of CPU, a slow `/metrics`).
    pub server_window_seconds: Option<f64>,
    /// Warnings about this cell (usage not continuous, short outputs under ignore_eos, …).
    pub warnings: Vec<String>,
    /// Typed reason behind an `error` / `invalid` status (`first_byte_timeout`,
    /// `first_token_timeout`, `stream_stalled`, `request_timeout`, `rate_limited`,
    /// `not_streaming`, `max_tokens_ignored`, `completion_above_max_tokens`,
    /// `usage_implausible`, `prompt_truncated`, `stream_stalls`, …; see docs/metrics.md). Null
    /// for ok and skipped cells and in older files.
    pub error_kind: Option<FailureKind>,
    /// Typed kinds of this cell's fault and plausibility warnings (`context_mismatch`,
    /// `stream_stalls`, …), one entry per kind; the texts are in `warnings`.
    pub warning_kinds: Vec<FailureKind>,
    /// The requested context of the cell, tokens (= `context_tokens`, the label).
    pub requested_context_tokens: Option<u64>,
    /// Prompt tokens the server reported for this cell's prompt (usage.prompt_tokens), tokens.
    pub measured_prompt_tokens: Option<u64>,
    /// Prompt tokens servebench meant to send: the `/tokenize` count, or the calibrated
    /// estimate, tokens.
    pub sent_prompt_tokens: Option<u64>,
    /// Requests of the cell answered with HTTP 429 (retries included).
    pub rejected_requests: Option<u64>,
    /// Retries after HTTP 429 (`--max-retries`; 0 when off).
    pub retried_requests: Option<u64>,
    /// Stalls inside the window: silences between consecutive token arrivals of one request
    /// longer than `stall_threshold_s` that overlap the window.
    pub stall_count: Option<u64>,
    /// Longest such silence, s.
    pub stall_longest_s: Option<f64>,
    /// Stream-time inside the window spent in stalls, s (summed over streams, clipped to the
    /// window).
    pub stall_seconds: Option<f64>,
    /// `stall_seconds` / stream-time inside the window (Σ over requests of their overlap with the
    /// window), 0–1. Above 0.5 the cell is `invalid`.
    pub stall_fraction: Option<f64>,
    /// Silence that counts as a stall in this cell: max(10 × typical chunk gap, 1 s), s.
    pub stall_threshold_s: Option<f64>,
    /// Request-count and Burst / E2E cells: the longest span with at least 95 % of C in flight
    /// and its throughput and latency ([`SteadyState`]); null for sustained cells (their window
    /// is the steady state) and in files written before this field.
    pub steady_state: Option<SteadyState>,
    /// Requests of the cell's statistics that carried llama.cpp's final `timings` object; null
    /// when none did (other engines).
    pub timings_requests: Option<u64>,
    /// Mean of llama.cpp's per-request `timings.predicted_per_second` (the server's own decode
    /// rate of each request, tokens/s).
    pub timings_predicted_per_second_avg: Option<f64>,
    /// Mean of `timings.prompt_n`: prompt tokens llama.cpp actually computed per request.
    pub timings_prompt_n_avg: Option<f64>,
    /// Mean of `timings.cache_n`: prompt tokens llama.cpp reused from its cache per request.
    pub timings_cache_n_avg: Option<f64>,
    /// Speculative draft acceptance rate from llama.cpp's per-request timings:
    /// Σ`draft_n_accepted` / Σ`draft_n` over the requests (0–1); null without draft counts.
    pub timings_draft_acceptance_rate: Option<f64>,
    /// Prompt-cache state of the cell's requests: `cold` (the server reported no cached prompt
    /// tokens beyond the chat template), `warm` (it reported cached prompt tokens), `unverified`
    /// (it reported nothing about its cache). Null in results written before this field.
    pub cache_state: Option<CacheState>,
    /// How the cell's prompts were built: `cold` (a unique prefix per request) or `shared` (one
    /// prompt for every request). Null in results written before this field.
    pub prompt_cache: Option<PromptCache>,
    /// Distribution of every per-token gap of the cell's generated requests (not of their
    /// per-request means: a 300 ms pause in one stream shows here); null without gaps and in
    /// results written before this field.
    pub itl_gaps: Option<ItlGaps>,
    /// Peak output rate over 1 s buckets of token arrivals, tok/s: the most tokens whose timed
    /// event arrived in one second (buckets from the first request's send) of the cell's
    /// requests. Null without timed tokens.
    pub peak_output_tps_1s: Option<f64>,
}

/// Distribution of per-token inter-token gaps (issue 19), chunk-aware like the per-token ITL:
/// each timed event after a request's first carrying `k` tokens after a gap `g` counts as `k`
/// gaps of `g / k`. From an HDR histogram (3 significant digits: every value is within 0.1 %
/// of its bucket, and a percentile is the highest value of its bucket; `hdrhistogram` crate), so
/// its memory does not grow with the number of requests and two cells' histograms merge.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ItlGaps {
    /// Per-token gaps counted.
    pub gaps: u64,
    /// Mean gap, s.
    pub mean: f64,
    /// Median gap, s.
    pub p50: f64,
    /// 90th percentile, s.
    pub p90: f64,
    /// 99th percentile, s.
    pub p99: f64,
    /// 99.9th percentile, s.
    pub p99_9: f64,
    /// Longest gap, s.
    pub max: f64,
    /// Non-empty log-spaced buckets (doubling from 1 µs): gaps up to `le_s` and above the
    /// previous bucket's `le_s`.
    pub histogram: Vec<GapBucket>,
}

/// One bucket of [`ItlGaps::histogram`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GapBucket {
    /// Upper edge of the bucket, s.
    pub le_s: f64,
    /// Gaps in the bucket.
    pub count: u64,
}

/// When the window's edge scrapes were sent and answered, s relative to the window's opening
/// (the end scrape is due at `measurement_seconds`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ServerScrapes {
    /// Start scrape: request sent, s.
    pub start_sent_s: f64,
    /// Start scrape: answer received, s.
    pub start_answered_s: f64,
    /// End scrape: request sent, s.
    pub end_sent_s: f64,
    /// End scrape: answer received, s.
    pub end_answered_s: f64,
}

/// One prefill row (seed spec §6.7 `prefill`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PrefillRow {
    /// Headline TTFT, s.
    pub ttft_seconds: Option<f64>,
    /// Time spent in prefill, s (client: = TTFT).
    pub prefill_seconds: Option<f64>,
    /// Headline prefill speed, tok/s.
    pub tok_per_sec: Option<f64>,
    /// Client TTFT, s.
    pub client_ttft_seconds: Option<f64>,
    /// Client prompt_tokens / TTFT, tok/s.
    pub client_tok_per_sec: Option<f64>,
    /// Prompt tokens of the measured request (usage).
    pub prompt_tokens: Option<u64>,
    /// Samples behind the row.
    pub samples: u64,
    /// How the row was measured: `integrated_scout` (the cold request before the first decode
    /// cell of the context), `scout_only` (such a request at a context with no decode cell),
    /// `client` (standalone cold requests), `prometheus` (server counters), `warm_prefix`.
    pub method: PrefillMethod,
    /// Server-side validation (Prometheus counters), when available.
    pub server_validation: JsonObject,
    /// Hardware summary (`{}` without a sampler).
    pub hardware_summary: JsonObject,
    /// Row outcome (`ok`, `error`, …).
    pub status: Option<CellStatus>,
    /// Why the row is not ok, or a note about it.
    pub status_reason: Option<String>,
    /// Warm-prefix rows: prompt tokens served from the prefix cache (null = unknown, never 0).
    pub cached_tokens: Option<u64>,
    /// Warm-prefix rows: prompt tokens actually computed (prompt − cached).
    pub computed_tokens: Option<u64>,
    /// Warm-prefix rows: cached / prompt tokens, 0–1.
    pub cache_hit_rate: Option<f64>,
    /// Warm-prefix rows: where cached tokens came from (`usage`, `prefix_cache_counters`, `unknown`).
    pub cached_tokens_source: Option<String>,
}

/// How each layer is computed (`methodology`, seed spec §6.7).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Methodology {
    /// Prefill layer.
    pub prefill: LayerMethod,
    /// Sustained decode layer.
    pub sustained_decode: LayerMethod,
    /// Burst / E2E layer.
    pub burst_e2e_decode: LayerMethod,
}

/// Description of one measurement layer.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct LayerMethod {
    /// Display name.
    pub name: String,
    /// Whether this layer has results in the file.
    pub present: bool,
    /// Mode (prefill layer).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// Status text (burst layer).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// The formula of the headline number.
    pub formula: String,
    /// Interpretation notes.
    pub notes: String,
}

/// Formats a context label for humans: `0`, `512`, `16k` (exact multiples of 1024), else the
/// number (the old tool truncated 1536 to "1k"; servebench writes `1.5k`).
pub fn format_context(ctx: u64) -> String {
    if ctx == 0 {
        "0".to_string()
    } else if ctx % 1024 == 0 {
        format!("{}k", ctx / 1024)
    } else if ctx >= 1024 && (ctx * 10) % 1024 == 0 {
        format!("{}k", ctx as f64 / 1024.0)
    } else {
        ctx.to_string()
    }
}

/// Extracts a results object from a text that may carry page text around it (the seed files
/// `shared/seeds/000_*.txt` are a web page with code examples and then the JSON). Returns the
/// first JSON object that starts a line and has a `metadata` key.
pub fn extract_json_object(text: &str) -> Option<Value> {
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_start();
        if trimmed.starts_with('{') {
            let start = offset + (line.len() - trimmed.len());
            let mut de = serde_json::Deserializer::from_str(&text[start..]).into_iter::<Value>();
            if let Some(Ok(v @ Value::Object(_))) = de.next() {
                if v.get("metadata").is_some() {
                    return Some(v);
                }
            }
        }
        offset += line.len();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_labels() {
        assert_eq!(format_context(0), "0");
        assert_eq!(format_context(512), "512");
        assert_eq!(format_context(16384), "16k");
        assert_eq!(format_context(1536), "1.5k");
        assert_eq!(format_context(1000), "1000");
    }

    #[test]
    fn status_names_match_serde() {
        for s in [
            CellStatus::Ok,
            CellStatus::SkippedCapacity,
            CellStatus::SkippedContext,
            CellStatus::SkippedUser,
            CellStatus::Error,
            CellStatus::Invalid,
        ] {
            assert_eq!(
                serde_json::to_value(s).unwrap(),
                Value::String(s.as_str().into())
            );
        }
    }
}
