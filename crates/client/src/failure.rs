//! Typed reasons why a request failed, a cell is invalid, or a cell carries a warning.
//!
//! The kind is exported per cell as `error_kind` (the failure behind an `error` / `invalid`
//! status) and in `warning_kinds` (one entry per kind of warning), so scripts can tell a server
//! that hung (`first_token_timeout`) from one that lied (`usage_implausible`) without parsing
//! the reason text.

use crate::error::HttpError;

/// Why a request failed or a cell is not trustworthy: the typed kind that goes into the
/// results (`error_kind`, `warning_kinds`) as it is.
pub use servebench_results::FailureKind;

/// The kind of an HTTP error that ended a request before its stream started.
pub fn of_http(e: &HttpError) -> FailureKind {
    match e {
        HttpError::Connect { .. } => FailureKind::Connect,
        HttpError::Status { status: 429, .. } => FailureKind::RateLimited,
        HttpError::Status { .. } => FailureKind::HttpStatus,
        HttpError::Transport { detail, .. } if detail.starts_with("timed out") => {
            FailureKind::RequestTimeout
        }
        HttpError::Transport { .. } | HttpError::TooLarge { .. } => FailureKind::Transport,
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
    } else if e.starts_with(servebench_sse::ERR_USAGE_ZERO)
        || e.starts_with(servebench_sse::ERR_USAGE_INVALID)
    {
        FailureKind::UsageImplausible
    } else if e.starts_with("stream read failed") {
        FailureKind::Transport
    } else {
        FailureKind::IncompleteStream
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
        assert_eq!(of_http(&e), FailureKind::RateLimited);
        assert_eq!(retry_after_of(&e), Some(std::time::Duration::from_secs(2)));
        assert_eq!(
            of_stream_error(servebench_sse::ERR_NO_OUTPUT),
            FailureKind::NoOutput
        );
        assert!(FailureKind::StreamStalled.is_timeout());
        // tokens arrived but usage said 0: not `no_output` (issue 17)
        assert_eq!(
            of_stream_error(&format!(
                "{} (3 token events)",
                servebench_sse::ERR_USAGE_ZERO
            )),
            FailureKind::UsageImplausible
        );
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
