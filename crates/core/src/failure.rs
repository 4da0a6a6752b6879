//! Typed reasons why a request failed, a cell is invalid, or a cell carries a warning.
//!
//! The kind is exported per cell as `error_kind` (the failure behind an `error` / `invalid`
//! status) and in `warning_kinds` (one entry per kind of warning), so scripts can tell a server
//! that hung (`first_token_timeout`) from one that lied (`usage_implausible`) without parsing
//! the reason text.

use crate::error::HttpError;

/// The first failure of a cell's requests: its text and kind.
pub type FirstFailure = Option<(String, Option<FailureKind>)>;

/// Why a request failed or a cell is not trustworthy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FailureKind {
    /// No response head within the first-byte deadline.
    FirstByteTimeout,
    /// Response head, but no output token within the first-token deadline.
    FirstTokenTimeout,
    /// After the first token, no bytes for the stream idle timeout.
    StreamStalled,
    /// The whole-request ceiling passed.
    RequestTimeout,
    /// HTTP 429 (after any retries).
    RateLimited,
    /// Another non-2xx status.
    HttpStatus,
    /// TCP connect failed.
    Connect,
    /// Connection reset, malformed HTTP, body read error.
    Transport,
    /// An error object inside a 200 stream.
    StreamError,
    /// A payload that is not SSE / not JSON.
    MalformedStream,
    /// A plain JSON answer to a `stream: true` request.
    NotStreaming,
    /// The stream ended without any output token.
    NoOutput,
    /// The stream ended (or broke) before `[DONE]` / a finish reason.
    IncompleteStream,
    /// More tokens than `max_tokens` (the stream was cut at the limit in the stream module).
    MaxTokensIgnored,
    /// Completion tokens above `max_tokens` in the final count.
    CompletionAboveMaxTokens,
    /// Usage grew faster than the token events could carry.
    UsageImplausible,
    /// The server counted far fewer prompt tokens than were sent.
    PromptTruncated,
    /// The measured prompt differs from the requested context by more than the tolerance.
    ContextMismatch,
    /// Streams were silent inside the window for much longer than the cell's ITL.
    StreamStalls,
    /// A startup probe timed out.
    ProbeTimeout,
}

impl FailureKind {
    /// Every kind.
    pub const ALL: [FailureKind; 20] = [
        FailureKind::FirstByteTimeout,
        FailureKind::FirstTokenTimeout,
        FailureKind::StreamStalled,
        FailureKind::RequestTimeout,
        FailureKind::RateLimited,
        FailureKind::HttpStatus,
        FailureKind::Connect,
        FailureKind::Transport,
        FailureKind::StreamError,
        FailureKind::MalformedStream,
        FailureKind::NotStreaming,
        FailureKind::NoOutput,
        FailureKind::IncompleteStream,
        FailureKind::MaxTokensIgnored,
        FailureKind::CompletionAboveMaxTokens,
        FailureKind::UsageImplausible,
        FailureKind::PromptTruncated,
        FailureKind::ContextMismatch,
        FailureKind::StreamStalls,
        FailureKind::ProbeTimeout,
    ];

    /// The snake_case name exported in `error_kind` / `warning_kinds`.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::FirstByteTimeout => "first_byte_timeout",
            FailureKind::FirstTokenTimeout => "first_token_timeout",
            FailureKind::StreamStalled => "stream_stalled",
            FailureKind::RequestTimeout => "request_timeout",
            FailureKind::RateLimited => "rate_limited",
            FailureKind::HttpStatus => "http_status",
            FailureKind::Connect => "connect_error",
            FailureKind::Transport => "transport_error",
            FailureKind::StreamError => "stream_error",
            FailureKind::MalformedStream => "malformed_stream",
            FailureKind::NotStreaming => "not_streaming",
            FailureKind::NoOutput => "no_output",
            FailureKind::IncompleteStream => "incomplete_stream",
            FailureKind::MaxTokensIgnored => "max_tokens_ignored",
            FailureKind::CompletionAboveMaxTokens => "completion_above_max_tokens",
            FailureKind::UsageImplausible => "usage_implausible",
            FailureKind::PromptTruncated => "prompt_truncated",
            FailureKind::ContextMismatch => "context_mismatch",
            FailureKind::StreamStalls => "stream_stalls",
            FailureKind::ProbeTimeout => "probe_timeout",
        }
    }

    /// True for the deadline kinds.
    pub fn is_timeout(self) -> bool {
        matches!(
            self,
            FailureKind::FirstByteTimeout
                | FailureKind::FirstTokenTimeout
                | FailureKind::StreamStalled
                | FailureKind::RequestTimeout
                | FailureKind::ProbeTimeout
        )
    }

    /// The kind of an HTTP error that ended a request before its stream started.
    pub fn of_http(e: &HttpError) -> FailureKind {
        match e {
            HttpError::Connect { .. } => FailureKind::Connect,
            HttpError::Status { status: 429, .. } => FailureKind::RateLimited,
            HttpError::Status { .. } => FailureKind::HttpStatus,
            HttpError::Transport { detail, .. } if detail.starts_with("timed out") => {
                FailureKind::RequestTimeout
            }
            HttpError::Transport { .. } => FailureKind::Transport,
            HttpError::Body { .. } => FailureKind::MalformedStream,
        }
    }

    /// The kind of a failure text recorded by the stream tracker (in-stream errors).
    pub fn of_stream_error(e: &str) -> FailureKind {
        if e.starts_with("stream error:") {
            FailureKind::StreamError
        } else if e.starts_with("malformed") {
            FailureKind::MalformedStream
        } else if e == servebench_sse::ERR_NO_OUTPUT {
            FailureKind::NoOutput
        } else if e.starts_with("stream read failed") {
            FailureKind::Transport
        } else {
            FailureKind::IncompleteStream
        }
    }
}

/// The `Retry-After` of a 429 error (servebench's HTTP errors append ` (Retry-After: X)` to the
/// body text; see [`crate::h1::start`] and [`crate::target::HttpClient::post_stream`]).
pub fn retry_after_of(e: &HttpError) -> Option<std::time::Duration> {
    let HttpError::Status { body, .. } = e else {
        return None;
    };
    let i = body.rfind("(Retry-After: ")?;
    let v = body[i + "(Retry-After: ".len()..].trim_end_matches(')');
    crate::timeouts::parse_retry_after(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds() {
        let e = HttpError::Status {
            method: "POST",
            url: "u".into(),
            status: 429,
            body: "slow down (Retry-After: 2)".into(),
        };
        assert_eq!(FailureKind::of_http(&e), FailureKind::RateLimited);
        assert_eq!(retry_after_of(&e), Some(std::time::Duration::from_secs(2)));
        assert_eq!(
            FailureKind::of_stream_error(servebench_sse::ERR_NO_OUTPUT),
            FailureKind::NoOutput
        );
        assert!(FailureKind::StreamStalled.is_timeout());
    }

    #[test]
    fn schema_lists_every_kind() {
        let schema: serde_json::Value =
            serde_json::from_str(servebench_results::SCHEMA_JSON).unwrap();
        let cell = &schema["$defs"]["cell"]["properties"];
        for field in ["error_kind", "warning_kinds"] {
            let e = if field == "error_kind" {
                &cell[field]["enum"]
            } else {
                &cell[field]["items"]["enum"]
            };
            let names: Vec<&str> = e
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|v| v.as_str())
                .collect();
            for k in FailureKind::ALL {
                assert!(names.contains(&k.as_str()), "{field} lacks {}", k.as_str());
            }
            assert_eq!(names.len(), FailureKind::ALL.len());
        }
    }
}
