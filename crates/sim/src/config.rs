//! Simulator configuration: every field is a long command-line flag with a default.

use serde::Serialize;

/// Which real engine the simulator impersonates: info endpoints, `/metrics` names and labels,
/// and (for llama.cpp) the streaming chunk shape.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Personality {
    /// servebench's own simulator (engine name `servebench-sim`): vLLM-shaped streams,
    /// `/version` = `servebench-sim <version>`, no `/metrics` page.
    #[default]
    Neutral,
    /// vLLM 0.32 (V1 engine): `/version`, `/v1/models` with `max_model_len`, `/tokenize`,
    /// `/metrics` with `vllm:` names labelled `engine="0",model_name="<model>"`.
    Vllm,
    /// SGLang: `/get_server_info`, `/get_model_info`, `/v1/models`, `/metrics` with `sglang:`
    /// (or `sglang_`) names labelled `engine_type,model_name,pp_rank,tp_rank`; no `/version`.
    Sglang,
    /// llama.cpp `llama-server --metrics --slots`: `/props`, `/slots`, `/health`, `/v1/models`
    /// with `models` and `data`, `/metrics` with unlabelled `llamacpp:` names, llama.cpp chunk
    /// shapes (`timings`, role chunk with `content: null`); `/version` is 404.
    Llamacpp,
}

impl Personality {
    /// Engine name: `servebench-sim`, `vllm`, `sglang` or `llamacpp` (also `owned_by` in
    /// `/v1/models`).
    pub fn engine_name(self) -> &'static str {
        match self {
            Personality::Neutral => "servebench-sim",
            Personality::Vllm => "vllm",
            Personality::Sglang => "sglang",
            Personality::Llamacpp => "llamacpp",
        }
    }

    /// Whether this personality serves `GET /metrics` (every one except the neutral one).
    pub fn has_metrics(self) -> bool {
        self != Personality::Neutral
    }
}

/// vLLM's default KV-cache block size in tokens (`--block-size`).
pub const DEFAULT_BLOCK_SIZE: u64 = 16;

/// Salt of the per-request stop-length draw (keeps it independent of the speculative draws).
const EOS_SALT: u64 = 0x656f_735f_6166_7465;

/// Largest accepted `--spec-tokens` (draft tokens per step).
pub const MAX_SPEC_TOKENS: u32 = 64;

/// Configuration of the built-in simulator.
///
/// Every field is a long flag (`--max-batch 64`, `--no-role-chunk`, ...) with its default in
/// its `#[arg]` attribute (`--help` prints it once, as `[default: …]`);
/// [`SimConfig::default`] returns exactly those defaults. Times are in
/// milliseconds (`*_ms`), rates in tokens per second (`*_tps`), lengths in tokens.
#[derive(clap::Args, Clone, Debug, PartialEq, Serialize)]
pub struct SimConfig {
    /// Address to bind the HTTP listener to (IP address or host name).
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,

    /// TCP port to listen on; `0` picks a free ephemeral port.
    #[arg(long, default_value_t = 8000)]
    pub port: u16,

    /// Model name served by `/v1/models` and required (when given) in requests.
    #[arg(long, default_value = "servebench-sim")]
    pub model: String,

    /// Maximum context length in tokens: prompt tokens + max_tokens must not exceed it.
    #[arg(long, default_value_t = 32768)]
    pub max_model_len: u64,

    /// Prefill speed in prompt tokens per second (only uncached prompt tokens are prefilled).
    #[arg(long, default_value_t = 20000.0)]
    pub prefill_tps: f64,

    /// Fixed cost of one decode step in milliseconds.
    #[arg(long, default_value_t = 10.0)]
    pub decode_base_ms: f64,

    /// Extra decode-step cost in milliseconds per sequence in the batch.
    #[arg(long, default_value_t = 0.05)]
    pub decode_per_seq_ms: f64,

    /// Extra decode-step cost in milliseconds per 1000 context tokens summed over the running
    /// batch (prompt + generated tokens).
    #[arg(long, default_value_t = 0.002)]
    pub decode_per_kctx_ms: f64,

    /// Maximum number of requests decoded together (continuous-batching slots); the rest wait
    /// in a FIFO queue.
    #[arg(long, default_value_t = 256)]
    pub max_batch: usize,

    /// Tokens produced per request per decode step, all carried by one SSE event (emulates
    /// speculative decoding).
    #[arg(long, default_value_t = 1)]
    pub tokens_per_chunk: u32,

    /// The first N generated tokens of each chat request are streamed as
    /// `delta.reasoning_content` instead of `delta.content`.
    #[arg(long, default_value_t = 0)]
    pub reasoning_tokens: u64,

    /// Send a role-only first chunk (`{"role":"assistant","content":""}`) on chat streams, as
    /// vLLM does: together with (just before) the first token, as vLLM 0.32's V1 scheduler
    /// sends it, or at admission with [`early_role_chunk`](Self::early_role_chunk). Default
    /// on; `--no-role-chunk` turns it off.
    #[arg(long = "no-role-chunk", action = clap::ArgAction::SetFalse,
          help = "Do not send the role-only first chunk vLLM sends on chat streams (sent by default)")]
    pub role_chunk: bool,

    /// Send the vLLM role-only chunk at admission, one decode step or more before the first
    /// token (the simulator's timing before issue 19; older vLLM front ends), instead of with
    /// the first token. For tests of clients that must not time an early role chunk.
    #[arg(long)]
    pub early_role_chunk: bool,

    /// Honour `stream_options.continuous_usage_stats` (cumulative usage on every chunk). Default
    /// on; `--no-continuous-usage` emulates servers that only send the final usage chunk.
    #[arg(long = "no-continuous-usage", action = clap::ArgAction::SetFalse,
          help = "Ignore stream_options.continuous_usage_stats: usage only in the final chunk, like servers without per-chunk usage (per-chunk usage by default)")]
    pub continuous_usage: bool,

    /// Serve `POST /tokenize`. Default on; `--no-tokenize` answers it with 404.
    #[arg(long = "no-tokenize", action = clap::ArgAction::SetFalse,
          help = "Answer POST /tokenize with 404 (served by default)")]
    pub tokenize_endpoint: bool,

    /// Prefix cache over 16-token blocks: cached prompt tokens skip prefill and are reported in
    /// `usage.prompt_tokens_details.cached_tokens`. Default on; `--no-prefix-cache` disables it.
    #[arg(long = "no-prefix-cache", action = clap::ArgAction::SetFalse,
          help = "Disable the prefix cache (on by default: cached 16-token blocks skip prefill and are reported as usage.prompt_tokens_details.cached_tokens)")]
    pub prefix_cache: bool,

    /// Stop each request after this many generated tokens with finish_reason `stop`, unless it
    /// sent `ignore_eos: true`. Default: unset (requests run to max_tokens).
    #[arg(long)]
    pub eos_after: Option<u64>,

    /// Ignore the requests' `ignore_eos` (like TGI, which has no such HTTP parameter): `--eos-after`
    /// stops apply to every request. For testing that clients flag early stops. Default off.
    #[arg(long)]
    pub ignore_eos_unsupported: bool,

    /// Per-request stop lengths: with `--eos-after-min A --eos-after-max B` request number `n`
    /// stops after `A + mix(seed, n) mod (B − A + 1)` generated tokens (a deterministic, uniform
    /// draw in `A..=B`) with finish_reason `stop`, unless it sent `ignore_eos: true` or reaches
    /// max_tokens first (`length`). The simulator's ground
    /// truth records the draw. Not combinable with `--eos-after`. Default: unset.
    #[arg(long, requires = "eos_after_max", conflicts_with = "eos_after")]
    pub eos_after_min: Option<u64>,

    /// Upper end (tokens, inclusive) of the `--eos-after-min` range. Default: unset.
    #[arg(long, requires = "eos_after_min", conflicts_with = "eos_after")]
    pub eos_after_max: Option<u64>,

    /// Answer with a known correct value: the content of every request ends with the line
    /// `Final answer: <value>` in its last two tokens (placed at the request's natural end: its
    /// EOS point, or max_tokens without one; a request cut by max_tokens before that point never
    /// states an answer). A fraction `--answer-accuracy` of requests give this text, the others a
    /// wrong value. With a reasoning phase the reasoning always ends
    /// with `So the answer is <this text>.` — so a scorer that reads the reasoning is caught.
    /// The simulator's ground truth records what each request stated.
    /// Must be one non-empty line. Default: unset (plain filler text).
    #[arg(long)]
    pub answer: Option<String>,

    /// Fraction (0..=1) of requests whose final answer line is correct. Deterministic per
    /// request number `n`: request `n` is correct when `⌈n·P⌉ > ⌈(n−1)·P⌉`, so any run of
    /// consecutive requests holds the fraction to within one request.
    #[arg(long, default_value_t = 1.0)]
    pub answer_accuracy: f64,

    /// Answer the prompts of a task dataset: FILE is JSONL (the `servebench task --dataset`
    /// format, one `{"prompt", "answer"}` object per line). A request whose prompt (the last user
    /// message, or the completion prompt), trimmed, equals an item's prompt ends with that item's
    /// `Final answer: <answer>` line exactly as with `--answer` — correct in a fraction
    /// `--answer-accuracy` of the requests, otherwise a wrong value. The simulator solves
    /// nothing: it looks the prompt up, so the scoring path can be tried without a model. Not
    /// combinable with `--answer`. Default: unset.
    #[arg(long, value_name = "FILE", conflicts_with = "answer")]
    pub answer_key: Option<std::path::PathBuf>,

    /// Stream the reasoning phase (`--reasoning-tokens`) inline in `delta.content`, wrapped in
    /// `<think>` … `</think>` (its first and last reasoning tokens), as servers without a
    /// reasoning parser do, instead of `delta.reasoning_content`. Needs `--reasoning-tokens` 0
    /// or ≥ 2. Default off.
    #[arg(long)]
    pub reasoning_inline: bool,

    /// Require `Authorization: Bearer <KEY>` on every endpoint except `/health`. Default: unset.
    /// Serialized as `"<redacted>"`.
    #[arg(long)]
    #[serde(serialize_with = "redact")]
    pub api_key: Option<String>,

    /// Fault injection: answer every `--fault-every`-th completion request with this HTTP status
    /// and an OpenAI-style error body (429 adds `Retry-After: 1`). Default: unset.
    #[arg(long)]
    pub fault_http_status: Option<u16>,

    /// Period N of `--fault-http-status` (every Nth completion request fails); `0` = off.
    #[arg(long, default_value_t = 0)]
    pub fault_every: u32,

    /// Every Nth streaming request sends an error event right after its first token and then
    /// ends the stream; `0` = off.
    #[arg(long, default_value_t = 0)]
    pub fault_midstream_every: u32,

    /// Record per-request ground truth (bounded: the most recent 100,000 requests and 1,000,000
    /// emissions). Default on; `--no-record-truth` turns it off (the `servebench sim` command
    /// does, so memory stays flat).
    #[arg(long = "no-record-truth", action = clap::ArgAction::SetFalse,
          help = "Do not record per-request ground truth (recording is for tests; `servebench sim` never records, so this flag changes nothing there)")]
    pub record_truth: bool,

    /// Engine to impersonate: `neutral` (servebench-sim itself), `vllm`, `sglang` or
    /// `llamacpp`. Changes the info endpoints, adds a `/metrics` page with that engine's real
    /// metric names, and (llamacpp) the chunk shapes.
    #[arg(long, value_enum, default_value_t = Personality::Neutral)]
    pub personality: Personality,

    /// KV-cache size in blocks of `--block-size` tokens. A running request holds
    /// ceil((prompt + generated) / block_size) blocks; requests wait when the free blocks cannot
    /// hold their prompt plus the step's tokens, and running ones are preempted when decoding
    /// runs out. Must hold at least `--max-model-len` tokens. Default: unset =
    /// `max_batch × ceil(max_model_len / block_size)` blocks, which never binds. Not allowed
    /// with `--personality llamacpp` (its KV is `slots × per-slot context` = `max_batch ×
    /// max_model_len`).
    #[arg(long)]
    pub kv_blocks: Option<u64>,

    /// KV-cache block size in tokens (vLLM `--block-size`).
    #[arg(long, default_value_t = DEFAULT_BLOCK_SIZE)]
    pub block_size: u64,

    /// Speculative decoding: draft tokens K proposed per request per decode step; `0` = off.
    /// Each step accepts a prefix of the drafts (stopping at the first rejection) plus one bonus
    /// token, all sent in ONE SSE event. Not combinable with `--tokens-per-chunk` > 1.
    #[arg(long, default_value_t = 0)]
    pub spec_tokens: u32,

    /// Speculative decoding: probability (0..=1) that a draft token is accepted, given that the
    /// drafts before it in the same step were. The expected accepted/draft ratio is then
    /// (P + P² + … + P^K) / K.
    #[arg(long, default_value_t = 0.7)]
    pub spec_accept_rate: f64,

    /// Seed of the deterministic pseudo-random draws (speculative acceptance). The draw for a
    /// draft position depends only on (seed, request number, tokens generated so far,
    /// position), so a rerun with the same requests accepts the same drafts.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,

    /// With `--personality sglang`: name metrics `sglang_*` (underscore, as re-exported by
    /// SGLang routers / sidecars) instead of `sglang:*`. Ignored otherwise. Default off.
    #[arg(long)]
    pub sglang_underscore_prefix: bool,

    /// With `--personality sglang`: name the running and queue gauges the old way,
    /// `num_requests_running` / `num_requests_waiting` (with the same `sglang:` prefix), instead
    /// of `num_running_reqs` / `num_queue_reqs`. Default off.
    #[arg(long)]
    pub sglang_old_gauge_names: bool,

    /// Leave the running-requests and waiting-requests gauges out of `/metrics` (a known engine
    /// whose build or exporter lacks them). Default off.
    #[arg(long)]
    pub metrics_without_running: bool,

    /// After this many `/metrics` scrapes, answer every further scrape with an empty body
    /// (HTTP 200, no samples), as a broken exporter does mid-run. Default: unset (never).
    #[arg(long)]
    pub metrics_empty_after: Option<u64>,

    /// After this many `/metrics` scrapes, answer every further scrape with HTTP 503. Default:
    /// unset (never).
    #[arg(long)]
    pub metrics_fail_after: Option<u64>,
}

fn redact<S: serde::Serializer>(key: &Option<String>, s: S) -> Result<S::Ok, S::Error> {
    match key {
        Some(_) => s.serialize_some("<redacted>"),
        None => s.serialize_none(),
    }
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            host: "127.0.0.1".to_string(),
            port: 8000,
            model: "servebench-sim".to_string(),
            max_model_len: 32768,
            prefill_tps: 20000.0,
            decode_base_ms: 10.0,
            decode_per_seq_ms: 0.05,
            decode_per_kctx_ms: 0.002,
            max_batch: 256,
            tokens_per_chunk: 1,
            reasoning_tokens: 0,
            role_chunk: true,
            early_role_chunk: false,
            continuous_usage: true,
            tokenize_endpoint: true,
            prefix_cache: true,
            eos_after: None,
            ignore_eos_unsupported: false,
            eos_after_min: None,
            eos_after_max: None,
            answer: None,
            answer_accuracy: 1.0,
            answer_key: None,
            reasoning_inline: false,
            api_key: None,
            fault_http_status: None,
            fault_every: 0,
            fault_midstream_every: 0,
            record_truth: true,
            personality: Personality::Neutral,
            kv_blocks: None,
            block_size: DEFAULT_BLOCK_SIZE,
            spec_tokens: 0,
            spec_accept_rate: 0.7,
            seed: 0,
            sglang_underscore_prefix: false,
            sglang_old_gauge_names: false,
            metrics_without_running: false,
            metrics_empty_after: None,
            metrics_fail_after: None,
        }
    }
}

impl SimConfig {
    /// Check that the numbers make sense (positive rates, at least one batch slot and one token
    /// per chunk, a fault status in 100..=599).
    pub fn validate(&self) -> anyhow::Result<()> {
        fn finite_nonneg(name: &str, v: f64) -> anyhow::Result<()> {
            anyhow::ensure!(
                v.is_finite() && v >= 0.0,
                "{name} must be a finite number >= 0, got {v}"
            );
            Ok(())
        }
        anyhow::ensure!(
            self.prefill_tps.is_finite() && self.prefill_tps > 0.0,
            "--prefill-tps must be > 0 tokens/s, got {}",
            self.prefill_tps
        );
        finite_nonneg("--decode-base-ms", self.decode_base_ms)?;
        finite_nonneg("--decode-per-seq-ms", self.decode_per_seq_ms)?;
        finite_nonneg("--decode-per-kctx-ms", self.decode_per_kctx_ms)?;
        anyhow::ensure!(self.max_batch >= 1, "--max-batch must be >= 1");
        anyhow::ensure!(
            self.tokens_per_chunk >= 1,
            "--tokens-per-chunk must be >= 1"
        );
        anyhow::ensure!(self.max_model_len >= 2, "--max-model-len must be >= 2");
        anyhow::ensure!(!self.model.is_empty(), "--model must not be empty");
        anyhow::ensure!(self.block_size >= 1, "--block-size must be >= 1 token");
        if let Some(p) = &self.answer_key {
            anyhow::ensure!(
                self.answer.is_none(),
                "--answer-key and --answer cannot be combined"
            );
            crate::answer_key::load(p)?;
        }
        if let Some(blocks) = self.kv_blocks {
            anyhow::ensure!(
                self.personality != Personality::Llamacpp,
                "--kv-blocks cannot be set with the llamacpp personality: its KV budget is \
                 slots x per-slot context (set --max-batch and --max-model-len instead)"
            );
            let tokens = blocks.saturating_mul(self.block_size);
            anyhow::ensure!(
                tokens >= self.max_model_len,
                "--kv-blocks x --block-size = {tokens} tokens cannot hold one request of \
                 --max-model-len {} tokens; raise --kv-blocks or lower --max-model-len",
                self.max_model_len
            );
        }
        anyhow::ensure!(
            self.spec_tokens <= MAX_SPEC_TOKENS,
            "--spec-tokens must be <= {MAX_SPEC_TOKENS}, got {}",
            self.spec_tokens
        );
        anyhow::ensure!(
            self.spec_accept_rate.is_finite() && (0.0..=1.0).contains(&self.spec_accept_rate),
            "--spec-accept-rate must be a probability in 0..=1, got {}",
            self.spec_accept_rate
        );
        anyhow::ensure!(
            self.spec_tokens == 0 || self.tokens_per_chunk == 1,
            "--spec-tokens and --tokens-per-chunk > 1 are two ways to put several tokens in one \
             event; use one of them"
        );
        match (self.eos_after_min, self.eos_after_max) {
            (None, None) => {}
            (Some(lo), Some(hi)) => {
                anyhow::ensure!(
                    self.eos_after.is_none(),
                    "--eos-after and --eos-after-min/--eos-after-max are two ways to set the stop \
                     length; use one of them"
                );
                anyhow::ensure!(
                    lo >= 1 && lo <= hi,
                    "--eos-after-min must be >= 1 and <= --eos-after-max, got {lo}..={hi}"
                );
            }
            _ => anyhow::bail!("--eos-after-min and --eos-after-max must be given together"),
        }
        if let Some(a) = &self.answer {
            anyhow::ensure!(
                !a.trim().is_empty() && !a.contains(['\n', '\r']),
                "--answer must be one non-empty line, got {a:?}"
            );
        }
        anyhow::ensure!(
            self.answer_accuracy.is_finite() && (0.0..=1.0).contains(&self.answer_accuracy),
            "--answer-accuracy must be a fraction in 0..=1, got {}",
            self.answer_accuracy
        );
        anyhow::ensure!(
            !self.reasoning_inline || self.reasoning_tokens == 0 || self.reasoning_tokens >= 2,
            "--reasoning-inline needs --reasoning-tokens 0 or >= 2 (the <think> and </think> tokens)"
        );
        if let Some(status) = self.fault_http_status {
            anyhow::ensure!(
                (100..=599).contains(&status),
                "--fault-http-status must be an HTTP status (100..=599), got {status}"
            );
        }
        Ok(())
    }

    /// Nominal duration of one decode step in milliseconds for `batch` sequences holding
    /// `context_tokens` tokens in total:
    /// `decode_base_ms + decode_per_seq_ms × batch + decode_per_kctx_ms × context_tokens / 1000`.
    pub fn decode_step_ms(&self, batch: usize, context_tokens: u64) -> f64 {
        self.decode_base_ms
            + self.decode_per_seq_ms * batch as f64
            + self.decode_per_kctx_ms * context_tokens as f64 / 1000.0
    }

    /// KV-cache size in blocks: `kv_blocks`, or when unset
    /// `max_batch × ceil(max_model_len / block_size)` (enough for every batch slot to hold a
    /// full-length request, so the budget never binds).
    pub fn kv_blocks_total(&self) -> u64 {
        self.kv_blocks.unwrap_or_else(|| {
            (self.max_batch as u64).saturating_mul(self.max_model_len.div_ceil(self.block_size))
        })
    }

    /// KV-cache size in tokens: [`SimConfig::kv_blocks_total`] × `block_size` (vLLM
    /// `kv_cache_size_tokens`, SGLang `max_total_num_tokens`).
    pub fn kv_tokens_total(&self) -> u64 {
        self.kv_blocks_total().saturating_mul(self.block_size)
    }

    /// Blocks held by a sequence of `tokens` tokens: `ceil(tokens / block_size)`.
    pub fn blocks_for(&self, tokens: u64) -> u64 {
        tokens.div_ceil(self.block_size)
    }

    /// Where request number `seq` stops on its own (generated tokens), if anywhere: `eos_after`,
    /// or the deterministic draw from `eos_after_min..=eos_after_max`; `None` when neither is
    /// set. Requests that send `ignore_eos: true` ignore it.
    pub fn eos_after_for(&self, seq: u64) -> Option<u64> {
        match (self.eos_after_min, self.eos_after_max) {
            (Some(lo), Some(hi)) if hi >= lo => {
                let span = hi - lo + 1;
                Some(
                    lo + crate::engine::mix64(crate::engine::mix64(self.seed ^ EOS_SALT) ^ seq)
                        % span,
                )
            }
            _ => self.eos_after.map(|e| e.max(1)),
        }
    }

    /// Whether request number `seq` (from 1) states the correct answer (see
    /// [`SimConfig::answer_accuracy`]): `⌈seq·P⌉ > ⌈(seq−1)·P⌉`, computed exactly with P in
    /// parts per million, so requests `1..=n` hold exactly `⌈n·P⌉` correct ones (request 1 is
    /// correct whenever P > 0).
    pub fn answer_correct_for(&self, seq: u64) -> bool {
        const PPM: u128 = 1_000_000;
        let p = (self.answer_accuracy.clamp(0.0, 1.0) * PPM as f64).round() as u128;
        let ceil = |n: u64| (u128::from(n) * p).div_ceil(PPM);
        ceil(seq) > ceil(seq.saturating_sub(1))
    }

    /// The value wrong requests state instead of `answer`: the integer plus one when `answer` is
    /// an integer, else `unknown` (or `none` when `answer` contains "unknown").
    pub fn wrong_answer(&self) -> String {
        Self::wrong_answer_for(self.answer.as_deref().unwrap_or_default())
    }

    /// The wrong value stated instead of `correct` (see [`SimConfig::wrong_answer`]).
    pub fn wrong_answer_for(correct: &str) -> String {
        let a = correct.trim();
        if let Ok(n) = a.parse::<i64>() {
            return n.wrapping_add(1).to_string();
        }
        if a.to_lowercase().contains("unknown") {
            "none".to_string()
        } else {
            "unknown".to_string()
        }
    }

    /// Nominal prefill time in milliseconds for `tokens` uncached prompt tokens.
    pub fn prefill_ms(&self, tokens: u64) -> f64 {
        tokens as f64 * 1000.0 / self.prefill_tps
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        sim: SimConfig,
    }

    #[test]
    fn default_matches_flags() {
        let cli = Cli::try_parse_from(["x"]).expect("parse");
        assert_eq!(cli.sim, SimConfig::default());
        SimConfig::default().validate().expect("valid");
    }

    #[test]
    fn negative_flags_and_options() {
        let cli = Cli::try_parse_from([
            "x",
            "--no-role-chunk",
            "--no-continuous-usage",
            "--no-tokenize",
            "--no-prefix-cache",
            "--no-record-truth",
            "--eos-after",
            "5",
            "--api-key",
            "k",
            "--fault-http-status",
            "429",
            "--fault-every",
            "3",
            "--tokens-per-chunk",
            "4",
            "--port",
            "0",
        ])
        .expect("parse");
        let c = cli.sim;
        assert!(!c.role_chunk && !c.continuous_usage && !c.tokenize_endpoint);
        assert!(!c.prefix_cache && !c.record_truth);
        assert_eq!(c.eos_after, Some(5));
        assert_eq!(c.api_key.as_deref(), Some("k"));
        assert_eq!(c.fault_http_status, Some(429));
        assert_eq!((c.fault_every, c.tokens_per_chunk, c.port), (3, 4, 0));
        let json = serde_json::to_value(&c).expect("serialize");
        assert_eq!(json["api_key"], "<redacted>");
    }

    #[test]
    fn answer_and_stop_length_flags() {
        let cli = Cli::try_parse_from([
            "x",
            "--eos-after-min",
            "10",
            "--eos-after-max",
            "20",
            "--answer",
            "Estonia",
            "--answer-accuracy",
            "0.25",
            "--reasoning-tokens",
            "8",
            "--reasoning-inline",
        ])
        .expect("parse");
        let c = cli.sim;
        c.validate().expect("valid");
        assert_eq!((c.eos_after_min, c.eos_after_max), (Some(10), Some(20)));
        assert!(c.reasoning_inline);
        let draws: Vec<u64> = (1..=200).map(|s| c.eos_after_for(s).unwrap()).collect();
        assert!(draws.iter().all(|d| (10..=20).contains(d)));
        assert_eq!(c.eos_after_for(7), c.eos_after_for(7));
        let distinct: std::collections::BTreeSet<_> = draws.iter().collect();
        assert_eq!(distinct.len(), 11, "every length in the range is drawn");
        // Exactly a quarter of every 4 consecutive requests is correct.
        let correct = (1..=100).filter(|&s| c.answer_correct_for(s)).count();
        assert_eq!(correct, 25);
        assert_eq!(c.wrong_answer(), "unknown");
        let n = SimConfig {
            answer: Some("41".into()),
            ..SimConfig::default()
        };
        assert_eq!(n.wrong_answer(), "42");
        assert!((1..50).all(|s| n.answer_correct_for(s)));
        assert_eq!(n.eos_after_for(3), None);
        assert!(Cli::try_parse_from(["x", "--eos-after-min", "3"]).is_err());
        assert!(Cli::try_parse_from([
            "x",
            "--eos-after",
            "3",
            "--eos-after-min",
            "1",
            "--eos-after-max",
            "2"
        ])
        .is_err());
    }

    #[test]
    fn validate_rejects_bad_answers() {
        for bad in [
            SimConfig {
                eos_after_min: Some(5),
                eos_after_max: Some(4),
                ..SimConfig::default()
            },
            SimConfig {
                eos_after_min: Some(5),
                ..SimConfig::default()
            },
            SimConfig {
                answer: Some("two\nlines".into()),
                ..SimConfig::default()
            },
            SimConfig {
                answer: Some(" ".into()),
                ..SimConfig::default()
            },
            SimConfig {
                answer_accuracy: 1.5,
                ..SimConfig::default()
            },
            SimConfig {
                reasoning_tokens: 1,
                reasoning_inline: true,
                ..SimConfig::default()
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn validate_rejects_nonsense() {
        let bad = SimConfig {
            tokens_per_chunk: 0,
            ..SimConfig::default()
        };
        assert!(bad.validate().is_err());
        let bad = SimConfig {
            prefill_tps: 0.0,
            ..SimConfig::default()
        };
        assert!(bad.validate().is_err());
        let bad = SimConfig {
            fault_http_status: Some(1000),
            ..SimConfig::default()
        };
        assert!(bad.validate().is_err());
    }

    #[test]
    fn personality_and_engine_model_flags() {
        let cli = Cli::try_parse_from([
            "x",
            "--personality",
            "sglang",
            "--kv-blocks",
            "4096",
            "--block-size",
            "32",
            "--spec-tokens",
            "3",
            "--spec-accept-rate",
            "0.5",
            "--seed",
            "9",
            "--sglang-underscore-prefix",
        ])
        .expect("parse");
        let c = cli.sim;
        assert_eq!(c.personality, Personality::Sglang);
        assert_eq!((c.kv_blocks, c.block_size), (Some(4096), 32));
        assert_eq!((c.spec_tokens, c.spec_accept_rate, c.seed), (3, 0.5, 9));
        assert!(c.sglang_underscore_prefix);
        c.validate().expect("valid");
        assert_eq!(c.kv_tokens_total(), 4096 * 32);
        assert_eq!(c.blocks_for(33), 2);
        let json = serde_json::to_value(&c).expect("serialize");
        assert_eq!(json["personality"], "sglang");
        for p in ["neutral", "vllm", "llamacpp"] {
            assert!(Cli::try_parse_from(["x", "--personality", p]).is_ok());
        }
        assert!(Cli::try_parse_from(["x", "--personality", "tgi"]).is_err());
        // default KV: every batch slot can hold a full-length request
        let d = SimConfig::default();
        assert_eq!(d.kv_blocks_total(), 256 * 2048);
        assert_eq!(d.kv_tokens_total(), 256 * 32768);
        assert_eq!(Personality::Llamacpp.engine_name(), "llamacpp");
        assert!(!Personality::Neutral.has_metrics() && Personality::Vllm.has_metrics());
    }

    #[test]
    fn validate_rejects_bad_engine_model() {
        let base = SimConfig::default();
        let bad = [
            SimConfig {
                kv_blocks: Some(10),
                ..base.clone()
            },
            SimConfig {
                block_size: 0,
                ..base.clone()
            },
            SimConfig {
                personality: Personality::Llamacpp,
                kv_blocks: Some(1 << 20),
                ..base.clone()
            },
            SimConfig {
                spec_tokens: 2,
                tokens_per_chunk: 2,
                ..base.clone()
            },
            SimConfig {
                spec_tokens: 2,
                spec_accept_rate: 1.5,
                ..base.clone()
            },
            SimConfig {
                spec_tokens: MAX_SPEC_TOKENS + 1,
                ..base.clone()
            },
        ];
        for c in bad {
            assert!(c.validate().is_err(), "{c:?}");
        }
        let ok = SimConfig {
            kv_blocks: Some(2048),
            spec_tokens: 4,
            spec_accept_rate: 1.0,
            ..base
        };
        ok.validate()
            .expect("32768 tokens of KV hold one max_model_len request");
    }

    #[test]
    fn step_formula() {
        let c = SimConfig::default();
        let ms = c.decode_step_ms(100, 1_000_000);
        assert!((ms - (10.0 + 5.0 + 2.0)).abs() < 1e-9);
        assert!((c.prefill_ms(20000) - 1000.0).abs() < 1e-9);
    }
}
