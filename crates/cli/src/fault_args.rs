//! Flags for timeouts on every wait and HTTP 429 retries (`servebench run`).

use std::time::Duration;

use clap::Args;
use servebench_client::timeouts::{
    Limit, RequestPolicy, DEFAULT_FIRST_TOKEN_PER_1K_S, DEFAULT_FIRST_TOKEN_TIMEOUT_S,
    DEFAULT_PROBE_TIMEOUT_S, DEFAULT_STREAM_IDLE_TIMEOUT_S,
};

use crate::args::usage_bail;

/// Timeouts and retries. A request past a deadline fails its cell with a typed reason
/// (`first_byte_timeout`, `first_token_timeout`, `stream_stalled`, `request_timeout`) whose text
/// names the limit in words (quoted in each flag's help; [`limit_flag`] maps them back).
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Timeouts and retries")]
pub struct FaultArgs {
    /// Startup probes (decode JIT probe, each /tokenize call, each calibration request), s; a
    /// probe that times out ends the run with exit 1 ("probe timeout"). Without
    /// --request-timeout a whole probe may take this plus --stream-idle-timeout.
    #[arg(long, default_value_t = DEFAULT_PROBE_TIMEOUT_S, allow_negative_numbers = true)]
    pub probe_timeout: f64,
    /// Request sent → response headers ("first-byte timeout"), s (0 = the request's first-token
    /// timeout).
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub first_byte_timeout: f64,
    /// Request sent → first output token ("first-token timeout"), s; --first-token-timeout-per-1k
    /// is added per 1,000 prompt tokens in flight (the prompt × C).
    #[arg(long, default_value_t = DEFAULT_FIRST_TOKEN_TIMEOUT_S, allow_negative_numbers = true)]
    pub first_token_timeout: f64,
    /// Added to --first-token-timeout per 1,000 prompt tokens in flight, s.
    #[arg(long, default_value_t = DEFAULT_FIRST_TOKEN_PER_1K_S, allow_negative_numbers = true)]
    pub first_token_timeout_per_1k: f64,
    /// After the first token: fail a stream that sends no bytes for this long ("stream idle
    /// timeout"), s (SSE comment pings count as bytes; 0 = off), or no output token for twice
    /// this long whatever else it sends.
    #[arg(long, default_value_t = DEFAULT_STREAM_IDLE_TIMEOUT_S, allow_negative_numbers = true)]
    pub stream_idle_timeout: f64,
    /// Whole-request ceiling ("request timeout"), s (0 = none).
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub request_timeout: f64,
    /// Retry a request answered with HTTP 429 up to N times, waiting Retry-After (at most 60 s)
    /// or 1, 2, 4 … s (at most 30 s); off by default because retries hide queueing.
    #[arg(long, default_value_t = 0)]
    pub max_retries: u32,
}

/// The flag that sets `limit` (timeout messages in cell reasons name the limit in words, e.g.
/// "stream idle timeout").
pub fn limit_flag(limit: Limit) -> &'static str {
    match limit {
        Limit::Probe => "--probe-timeout",
        Limit::FirstByte => "--first-byte-timeout",
        Limit::FirstByteFromFirstToken => "--first-byte-timeout (unset: --first-token-timeout)",
        Limit::FirstToken => "--first-token-timeout (+ --first-token-timeout-per-1k)",
        Limit::StreamIdle => "--stream-idle-timeout",
        Limit::Request => "--request-timeout",
    }
}

fn secs(flag: &str, v: f64, allow_zero: bool) -> anyhow::Result<Option<Duration>> {
    if !v.is_finite() || !(0.0..=86_400.0).contains(&v) || (!allow_zero && v == 0.0) {
        let lo = if allow_zero { "between 0" } else { "> 0 and" };
        usage_bail!("--{flag} must be {lo} ≤ 86400 seconds (got {v})");
    }
    Ok((v > 0.0).then(|| Duration::from_secs_f64(v)))
}

impl FaultArgs {
    /// The request policy; errors are usage errors (exit 2).
    pub fn to_policy(&self) -> anyhow::Result<RequestPolicy> {
        Ok(RequestPolicy {
            probe: secs("probe-timeout", self.probe_timeout, false)?.unwrap_or_default(),
            first_byte: secs("first-byte-timeout", self.first_byte_timeout, true)?,
            first_token: secs("first-token-timeout", self.first_token_timeout, false)?
                .unwrap_or_default(),
            first_token_per_1k: secs(
                "first-token-timeout-per-1k",
                self.first_token_timeout_per_1k,
                true,
            )?
            .unwrap_or_default(),
            stream_idle: secs("stream-idle-timeout", self.stream_idle_timeout, true)?,
            request: secs("request-timeout", self.request_timeout, true)?,
            max_retries: self.max_retries,
        })
    }

    /// The values for `startup_diagnostics.args`.
    pub fn snapshot(&self) -> serde_json::Value {
        serde_json::json!({
            "probe_timeout": self.probe_timeout,
            "first_byte_timeout": self.first_byte_timeout,
            "first_token_timeout": self.first_token_timeout,
            "first_token_timeout_per_1k": self.first_token_timeout_per_1k,
            "stream_idle_timeout": self.stream_idle_timeout,
            "request_timeout": self.request_timeout,
            "max_retries": self.max_retries,
        })
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;
    use servebench_client::timeouts::Limit;

    /// Every limit maps to flags `servebench run` has, and the help of its first flag quotes the
    /// words a timeout message uses for it.
    #[test]
    fn every_limit_has_run_flags_whose_help_names_it() {
        let cmd = crate::args::Cli::command();
        let run = cmd.find_subcommand("run").expect("run subcommand");
        for limit in Limit::ALL {
            let text = super::limit_flag(limit);
            let flags: Vec<&str> = text
                .split([' ', '(', ')'])
                .filter_map(|w| w.strip_prefix("--"))
                .collect();
            assert!(!flags.is_empty(), "{limit:?}: {text}");
            for f in &flags {
                assert!(
                    run.get_arguments().any(|a| a.get_long() == Some(f)),
                    "{limit:?}: servebench run has no --{f}"
                );
            }
            let arg = run
                .get_arguments()
                .find(|a| a.get_long() == Some(flags[0]))
                .unwrap();
            let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
            let words = limit.as_str().split(',').next().unwrap();
            assert!(
                help.replace('\n', " ").contains(&format!("\"{words}\"")),
                "--{}: help lacks \"{words}\": {help}",
                flags[0]
            );
        }
    }
}
