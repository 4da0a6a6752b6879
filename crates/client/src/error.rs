//! HTTP errors and the server error bodies they carry. Every error renders as one clear line.

use thiserror::Error;

/// A failed HTTP exchange with the server under test.
#[derive(Clone, Debug, Error, PartialEq)]
pub enum HttpError {
    /// TCP connect failed or timed out (server down, wrong port, DNS).
    #[error("cannot connect to {url}: {detail}")]
    Connect {
        /// URL that was requested.
        url: String,
        /// Cause from the transport.
        detail: String,
    },
    /// The server answered with a non-success status.
    #[error("{method} {url} returned HTTP {status}{}", body_suffix(.body))]
    Status {
        /// HTTP method.
        method: &'static str,
        /// URL that was requested.
        url: String,
        /// Status code.
        status: u16,
        /// First 300 characters of the body (error message extracted when JSON).
        body: String,
    },
    /// Any other transport problem (reset connection, malformed HTTP, body read error).
    #[error("{method} {url} failed: {detail}")]
    Transport {
        /// HTTP method.
        method: &'static str,
        /// URL that was requested.
        url: String,
        /// Cause from the transport.
        detail: String,
    },
    /// The response was not the JSON we expected.
    #[error("{url} returned an unexpected body: {detail}")]
    Body {
        /// URL that was requested.
        url: String,
        /// What was wrong.
        detail: String,
    },
}

fn body_suffix(body: &str) -> String {
    if body.is_empty() {
        String::new()
    } else {
        format!(": {body}")
    }
}

impl HttpError {
    /// The HTTP status, when the server answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            HttpError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// Builds a short, single-line error text from a server's error body: the `message` of an
/// OpenAI/vLLM error object when there is one, else the first 300 characters.
pub fn summarize_error_body(body: &str) -> String {
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(body) {
        let msg = v
            .pointer("/error/message")
            .or_else(|| v.get("message"))
            .or_else(|| v.get("error"))
            .or_else(|| v.get("detail"));
        if let Some(m) = msg {
            let text = match m {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            return one_line(&text, 300);
        }
    }
    one_line(body, 300)
}

/// Collapses whitespace to single spaces and truncates to `max` characters.
pub fn one_line(s: &str, max: usize) -> String {
    let collapsed: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if collapsed.chars().count() > max {
        let cut: String = collapsed.chars().take(max).collect();
        format!("{cut}…")
    } else {
        collapsed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_bodies() {
        assert_eq!(
            summarize_error_body(
                r#"{"object":"error","message":"The model `x` does not exist.","code":404}"#
            ),
            "The model `x` does not exist."
        );
        assert_eq!(
            summarize_error_body(r#"{"error":{"message":"Unauthorized","type":"auth"}}"#),
            "Unauthorized"
        );
        assert_eq!(
            summarize_error_body("<html>\n bad gateway </html>"),
            "<html> bad gateway </html>"
        );
        let e = HttpError::Status {
            method: "GET",
            url: "http://x/v1/models".into(),
            status: 401,
            body: "Unauthorized".into(),
        };
        assert_eq!(
            e.to_string(),
            "GET http://x/v1/models returned HTTP 401: Unauthorized"
        );
    }
}
