//! Simulator configuration: every field is a long command-line flag with a default.

use serde::Serialize;

/// Configuration of the built-in simulator.
///
/// Every field is a long flag (`--max-batch 64`, `--no-role-chunk`, ...) with the default shown in
/// its documentation; [`SimConfig::default`] returns exactly those defaults. Times are in
/// milliseconds (`*_ms`), rates in tokens per second (`*_tps`), lengths in tokens.
#[derive(clap::Args, Clone, Debug, PartialEq, Serialize)]
pub struct SimConfig {
    /// Address to bind the HTTP listener to (IP address or host name). Default `127.0.0.1`.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,

    /// TCP port to listen on; `0` picks a free ephemeral port. Default `8000`.
    #[arg(long, default_value_t = 8000)]
    pub port: u16,

    /// Model name served by `/v1/models` and required (when given) in requests. Default
    /// `servebench-sim`.
    #[arg(long, default_value = "servebench-sim")]
    pub model: String,

    /// Maximum context length in tokens: prompt tokens + max_tokens must not exceed it.
    /// Default `32768`.
    #[arg(long, default_value_t = 32768)]
    pub max_model_len: u64,

    /// Prefill speed in prompt tokens per second (only uncached prompt tokens are prefilled).
    /// Default `20000`.
    #[arg(long, default_value_t = 20000.0)]
    pub prefill_tps: f64,

    /// Fixed cost of one decode step in milliseconds. Default `10.0`.
    #[arg(long, default_value_t = 10.0)]
    pub decode_base_ms: f64,

    /// Extra decode-step cost in milliseconds per sequence in the batch. Default `0.05`.
    #[arg(long, default_value_t = 0.05)]
    pub decode_per_seq_ms: f64,

    /// Extra decode-step cost in milliseconds per 1000 context tokens summed over the running
    /// batch (prompt + generated tokens). Default `0.002`.
    #[arg(long, default_value_t = 0.002)]
    pub decode_per_kctx_ms: f64,

    /// Maximum number of requests decoded together (continuous-batching slots); the rest wait
    /// in a FIFO queue. Default `256`.
    #[arg(long, default_value_t = 256)]
    pub max_batch: usize,

    /// Tokens produced per request per decode step, all carried by one SSE event (emulates
    /// speculative decoding). Default `1`.
    #[arg(long, default_value_t = 1)]
    pub tokens_per_chunk: u32,

    /// The first N generated tokens of each chat request are streamed as
    /// `delta.reasoning_content` instead of `delta.content`. Default `0`.
    #[arg(long, default_value_t = 0)]
    pub reasoning_tokens: u64,

    /// Send a role-only first chunk (`{"role":"assistant","content":""}`) on chat streams at
    /// admission time, as vLLM does. Default on; `--no-role-chunk` turns it off.
    #[arg(long = "no-role-chunk", action = clap::ArgAction::SetFalse)]
    pub role_chunk: bool,

    /// Honour `stream_options.continuous_usage_stats` (cumulative usage on every chunk). Default
    /// on; `--no-continuous-usage` emulates servers that only send the final usage chunk.
    #[arg(long = "no-continuous-usage", action = clap::ArgAction::SetFalse)]
    pub continuous_usage: bool,

    /// Serve `POST /tokenize`. Default on; `--no-tokenize` answers it with 404.
    #[arg(long = "no-tokenize", action = clap::ArgAction::SetFalse)]
    pub tokenize_endpoint: bool,

    /// Prefix cache over 16-token blocks: cached prompt tokens skip prefill and are reported in
    /// `usage.prompt_tokens_details.cached_tokens`. Default on; `--no-prefix-cache` disables it.
    #[arg(long = "no-prefix-cache", action = clap::ArgAction::SetFalse)]
    pub prefix_cache: bool,

    /// Stop each request after this many generated tokens with finish_reason `stop`, unless it
    /// sent `ignore_eos: true`. Default: unset (requests run to max_tokens).
    #[arg(long)]
    pub eos_after: Option<u64>,

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
    /// Default `0`.
    #[arg(long, default_value_t = 0)]
    pub fault_every: u32,

    /// Every Nth streaming request sends an error event right after its first token and then
    /// ends the stream; `0` = off. Default `0`.
    #[arg(long, default_value_t = 0)]
    pub fault_midstream_every: u32,

    /// Record per-request ground truth (bounded: the most recent 100,000 requests and 1,000,000
    /// emissions). Default on; `--no-record-truth` turns it off (the `servebench sim` command
    /// does, so memory stays flat).
    #[arg(long = "no-record-truth", action = clap::ArgAction::SetFalse)]
    pub record_truth: bool,
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
            continuous_usage: true,
            tokenize_endpoint: true,
            prefix_cache: true,
            eos_after: None,
            api_key: None,
            fault_http_status: None,
            fault_every: 0,
            fault_midstream_every: 0,
            record_truth: true,
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
            "prefill_tps must be > 0 tokens/s, got {}",
            self.prefill_tps
        );
        finite_nonneg("decode_base_ms", self.decode_base_ms)?;
        finite_nonneg("decode_per_seq_ms", self.decode_per_seq_ms)?;
        finite_nonneg("decode_per_kctx_ms", self.decode_per_kctx_ms)?;
        anyhow::ensure!(self.max_batch >= 1, "max_batch must be >= 1");
        anyhow::ensure!(self.tokens_per_chunk >= 1, "tokens_per_chunk must be >= 1");
        anyhow::ensure!(self.max_model_len >= 2, "max_model_len must be >= 2");
        anyhow::ensure!(!self.model.is_empty(), "model must not be empty");
        if let Some(status) = self.fault_http_status {
            anyhow::ensure!(
                (100..=599).contains(&status),
                "fault_http_status must be an HTTP status (100..=599), got {status}"
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
    fn step_formula() {
        let c = SimConfig::default();
        let ms = c.decode_step_ms(100, 1_000_000);
        assert!((ms - (10.0 + 5.0 + 2.0)).abs() < 1e-9);
        assert!((c.prefill_ms(20000) - 1000.0).abs() < 1e-9);
    }
}
