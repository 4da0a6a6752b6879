//! Typed modes, sources, statuses and failure kinds of the results JSON.
//!
//! Each enum serialises to exactly the string the JSON has always carried (the seed tool's
//! values where it had the field), so old files read unchanged and new files are byte-for-byte
//! what the string fields wrote. `as_str` gives the same string; `ALL` lists every value (the
//! tests check them against `schema/results.schema.json`).

use serde::{Deserialize, Serialize};

/// Declares a fieldless enum whose serde form is the given string per variant, with `as_str`,
/// `ALL` and `Display`.
macro_rules! string_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[$vmeta:meta])* $var:ident = $s:literal ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum $name {
            $( $(#[$vmeta])* #[serde(rename = $s)] $var ),+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$var),+];

            /// The string used in the JSON.
            pub fn as_str(self) -> &'static str {
                match self {
                    $( $name::$var => $s ),+
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

string_enum! {
    /// How a cell was measured (`results[].benchmark_mode`).
    #[derive(Default)]
    pub enum BenchmarkMode {
        /// A sustained cell: C streams kept in flight, a measured window of fixed length.
        #[default]
        Duration = "duration",
        /// A request-count cell (`request_count` requests at C, the primary layer).
        RequestCount = "request-count",
        /// A Burst / E2E cell (finite batch after the sustained matrix).
        BurstE2e = "burst-e2e",
    }
}

string_enum! {
    /// The primary layer's mode (`metadata.decode_mode`).
    #[derive(Default)]
    pub enum DecodeMode {
        /// Sustained cells with a measured window.
        #[default]
        Duration = "duration",
        /// Request-count cells replace the sustained matrix.
        RequestCount = "request-count",
    }
}

impl DecodeMode {
    /// The `benchmark_mode` of the primary layer's cells.
    pub fn cell_mode(self) -> BenchmarkMode {
        match self {
            DecodeMode::Duration => BenchmarkMode::Duration,
            DecodeMode::RequestCount => BenchmarkMode::RequestCount,
        }
    }

    /// The `primary_decode_layer` that goes with this mode.
    pub fn layer(self) -> DecodeLayer {
        match self {
            DecodeMode::Duration => DecodeLayer::SustainedDecode,
            DecodeMode::RequestCount => DecodeLayer::BurstE2eDecode,
        }
    }
}

string_enum! {
    /// The layer whose cells are in `results[]` (`metadata.primary_decode_layer`).
    #[derive(Default)]
    pub enum DecodeLayer {
        /// Sustained decode.
        #[default]
        SustainedDecode = "sustained_decode",
        /// Burst / E2E decode (request-count mode).
        BurstE2eDecode = "burst_e2e_decode",
    }
}

string_enum! {
    /// Where a cell's `aggregate_tps` came from (`results[].aggregate_source`).
    #[derive(Default)]
    pub enum AggregateSource {
        /// Cumulative `usage.completion_tokens` on every chunk (continuous usage stats).
        OpenaiContinuousUsage = "openai_continuous_usage",
        /// One token per SSE token event (the server sent no per-chunk usage).
        OpenaiStreamChunksFallback = "openai_stream_chunks_fallback",
        /// Final usage of completed requests (request-count and Burst / E2E cells).
        OpenaiCompletedUsage = "openai_completed_usage",
        /// The server's Prometheus token counter.
        PrometheusFallback = "prometheus_fallback",
        /// No headline number (skipped or failed cells).
        None = "none",
        /// Not set (an empty string in the JSON).
        #[default]
        Unset = "",
    }
}

string_enum! {
    /// How the prefill layer ran (`metadata.prefill_mode`).
    #[derive(Default)]
    pub enum PrefillMode {
        /// `--skip-prefill`: no prefill rows.
        Skipped = "skipped",
        /// The standalone cold profile before decode.
        StandaloneCold = "standalone_cold",
        /// One cold request before the first decode cell of each context.
        #[default]
        IntegratedDecodeScout = "integrated_decode_scout",
    }
}

string_enum! {
    /// How a prefill row was measured (`prefill{}.method`).
    #[derive(Default)]
    pub enum PrefillMethod {
        /// The cold request before the first decode cell of the context.
        IntegratedScout = "integrated_scout",
        /// Such a request at a context with no decode cell.
        ScoutOnly = "scout_only",
        /// Standalone cold requests (median), client-side timing.
        Client = "client",
        /// Standalone cold requests timed by the server's Prometheus counters.
        Prometheus = "prometheus",
        /// The same prompt sent again (prefix cache).
        WarmPrefix = "warm_prefix",
        /// Not run.
        Skipped = "skipped",
        /// Not given (an empty string in the old tool's warm rows).
        #[default]
        Unspecified = "",
    }
}

string_enum! {
    /// Whether the Burst / E2E layer ran (`metadata.burst_e2e_status`; the seed's values).
    #[derive(Default)]
    pub enum BurstE2eStatus {
        /// The layer ran.
        Enabled = "enabled",
        /// The layer was not asked for.
        #[default]
        NotRun = "not_run_use_--run-burst",
    }
}

impl BurstE2eStatus {
    /// The `methodology.burst_e2e_decode.status` text that goes with the status.
    pub fn methodology_status(self) -> &'static str {
        match self {
            BurstE2eStatus::Enabled => "present",
            BurstE2eStatus::NotRun => "not run; use --run-burst",
        }
    }
}

string_enum! {
    /// How the prompts of a cell were built (`results[].prompt_cache`, `--prompt-cache`).
    pub enum PromptCache {
        /// A unique prefix per request: no prefix-cache reuse between requests.
        Cold = "cold",
        /// One prompt for every request of the cell (prefix-cache reuse on purpose).
        Shared = "shared",
    }
}

string_enum! {
    /// What the server reported about its prompt cache for a cell (`results[].cache_state`).
    pub enum CacheState {
        /// No cached prompt tokens beyond the chat template.
        Cold = "cold",
        /// Cached prompt tokens.
        Warm = "warm",
        /// The server reported nothing about its cache.
        Unverified = "unverified",
    }
}

string_enum! {
    /// Why a request failed, a cell is invalid, or a cell carries a warning
    /// (`results[].error_kind`, `results[].warning_kinds`; docs/metrics.md, Faults).
    pub enum FailureKind {
        /// No response head within the first-byte deadline.
        FirstByteTimeout = "first_byte_timeout",
        /// Response head, but no output token within the first-token deadline.
        FirstTokenTimeout = "first_token_timeout",
        /// After the first token, no bytes for the stream idle timeout.
        StreamStalled = "stream_stalled",
        /// The whole-request ceiling passed.
        RequestTimeout = "request_timeout",
        /// HTTP 429 (after any retries).
        RateLimited = "rate_limited",
        /// Another non-2xx status.
        HttpStatus = "http_status",
        /// TCP connect failed.
        Connect = "connect_error",
        /// Connection reset, malformed HTTP, body read error.
        Transport = "transport_error",
        /// An error object inside a 200 stream.
        StreamError = "stream_error",
        /// A payload that is not SSE / not JSON.
        MalformedStream = "malformed_stream",
        /// A plain JSON answer to a `stream: true` request.
        NotStreaming = "not_streaming",
        /// The stream ended without any output token.
        NoOutput = "no_output",
        /// The stream ended (or broke) before `[DONE]` / a finish reason.
        IncompleteStream = "incomplete_stream",
        /// More tokens than `max_tokens` (the stream was cut at the limit).
        MaxTokensIgnored = "max_tokens_ignored",
        /// Completion tokens above `max_tokens` in the final count.
        CompletionAboveMaxTokens = "completion_above_max_tokens",
        /// Usage grew faster than the token events could carry.
        UsageImplausible = "usage_implausible",
        /// The server counted far fewer prompt tokens than were sent.
        PromptTruncated = "prompt_truncated",
        /// The measured prompt differs from the requested context by more than the tolerance.
        ContextMismatch = "context_mismatch",
        /// Streams were silent inside the window for much longer than the cell's ITL.
        StreamStalls = "stream_stalls",
        /// A startup probe (or a health probe between cells) timed out.
        ProbeTimeout = "probe_timeout",
        /// Every token of a stream arrived in one read (TTFT = E2E, no ITL): the server (or a
        /// proxy) buffered the answer; its timing is not a stream's.
        SingleWrite = "single_write",
        /// A stream's decode rate (1 / ITL) beyond the plausibility bound.
        ImplausibleSpeed = "implausible_speed",
        /// A request-count or Burst / E2E cell passed its wall-clock deadline (`--batch-timeout`):
        /// the requests in flight were cut, the rest never sent.
        BatchTimeout = "batch_timeout",
        /// A warning: the window's token count is partly an estimate (usage only at the end
        /// with chunks that straddle the window's edges, or no usage at all: one token per
        /// chunk, a lower bound) and that part is large enough to move the headline.
        EstimatedTokens = "estimated_tokens",
    }
}

impl FailureKind {
    /// True for the deadline kinds.
    pub fn is_timeout(self) -> bool {
        matches!(
            self,
            FailureKind::FirstByteTimeout
                | FailureKind::FirstTokenTimeout
                | FailureKind::StreamStalled
                | FailureKind::RequestTimeout
                | FailureKind::ProbeTimeout
                | FailureKind::BatchTimeout
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip<T>(all: &[T], name: fn(&T) -> &'static str)
    where
        T: Serialize + for<'de> Deserialize<'de> + PartialEq + std::fmt::Debug,
    {
        for v in all {
            let s = serde_json::to_value(v).unwrap();
            assert_eq!(s, serde_json::Value::String(name(v).into()));
            let back: T = serde_json::from_value(s).unwrap();
            assert_eq!(&back, v);
        }
    }

    #[test]
    fn serde_strings_are_as_str() {
        round_trip(BenchmarkMode::ALL, |v| v.as_str());
        round_trip(DecodeMode::ALL, |v| v.as_str());
        round_trip(DecodeLayer::ALL, |v| v.as_str());
        round_trip(AggregateSource::ALL, |v| v.as_str());
        round_trip(PrefillMode::ALL, |v| v.as_str());
        round_trip(PrefillMethod::ALL, |v| v.as_str());
        round_trip(BurstE2eStatus::ALL, |v| v.as_str());
        round_trip(PromptCache::ALL, |v| v.as_str());
        round_trip(CacheState::ALL, |v| v.as_str());
        round_trip(FailureKind::ALL, |v| v.as_str());
        assert_eq!(BenchmarkMode::BurstE2e.as_str(), "burst-e2e");
        assert_eq!(DecodeMode::RequestCount.to_string(), "request-count");
        assert!(serde_json::from_str::<BenchmarkMode>("\"sustained\"").is_err());
    }

    #[test]
    fn enums_match_the_schema() {
        let schema: serde_json::Value = serde_json::from_str(crate::SCHEMA_JSON).unwrap();
        let names = |v: &serde_json::Value| -> Vec<String> {
            v.as_array()
                .unwrap_or_else(|| panic!("no enum: {v}"))
                .iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        };
        let cell = &schema["$defs"]["cell"]["properties"];
        let meta = &schema["$defs"]["metadata"]["properties"];
        let check = |enum_: &serde_json::Value, all: Vec<&str>| {
            let mut want = names(enum_);
            want.sort();
            let mut got: Vec<String> = all.into_iter().map(str::to_owned).collect();
            got.sort();
            assert_eq!(got, want);
        };
        check(
            &cell["benchmark_mode"]["enum"],
            BenchmarkMode::ALL.iter().map(|v| v.as_str()).collect(),
        );
        check(
            &cell["aggregate_source"]["enum"],
            AggregateSource::ALL.iter().map(|v| v.as_str()).collect(),
        );
        check(
            &cell["error_kind"]["enum"],
            FailureKind::ALL.iter().map(|v| v.as_str()).collect(),
        );
        check(
            &cell["warning_kinds"]["items"]["enum"],
            FailureKind::ALL.iter().map(|v| v.as_str()).collect(),
        );
        check(
            &meta["decode_mode"]["enum"],
            DecodeMode::ALL.iter().map(|v| v.as_str()).collect(),
        );
        check(
            &meta["primary_decode_layer"]["enum"],
            DecodeLayer::ALL.iter().map(|v| v.as_str()).collect(),
        );
    }
}
