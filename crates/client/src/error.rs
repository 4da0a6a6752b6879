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
    /// The body passed the size cap ([`crate::target::MAX_BODY_BYTES`]); it was not read
    /// further and its connection was closed.
    #[error("{method} {url}: the body is larger than {} MiB, not read further", .limit_bytes / (1024 * 1024))]
    TooLarge {
        /// HTTP method.
        method: &'static str,
        /// URL that was requested.
        url: String,
        /// The cap, bytes.
        limit_bytes: u64,
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

/// How the detail of a time cap that struck while a body was arriving begins
/// ([`HttpError::is_overrun`]).
pub const BODY_TIMEOUT_PREFIX: &str = "timed out while the body was arriving";

impl HttpError {
    /// The body read overran a cap: its size cap ([`HttpError::TooLarge`]) or its time cap
    /// while the body was arriving (a page still trickling in when the timeout struck:
    /// [`BODY_TIMEOUT_PREFIX`]). A timeout before the first body byte is no overrun: a server
    /// (or a client starved of CPU) that was slow to answer once says nothing about the page.
    pub fn is_overrun(&self) -> bool {
        match self {
            HttpError::TooLarge { .. } => true,
            HttpError::Transport { detail, .. } => detail.starts_with(BODY_TIMEOUT_PREFIX),
            _ => false,
        }
    }

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

/// Replaces every control character of a server-supplied string (C0 including ESC, DEL, C1)
/// and every bidirectional formatting character ([`servebench_results::is_invisible`]: a
/// model id with U+202E would print backwards) with a space, so that a model id or an error
/// message cannot move the cursor, recolour or clear a terminal, reorder it, or break a log line
/// (issue 17). A registered secret ([`crate::secrets`]) is redacted first, so one split by
/// invisible characters does not come out readable with blanks. Text without such characters
/// and secrets is returned unchanged (borrowed).
pub fn strip_controls(s: &str) -> std::borrow::Cow<'_, str> {
    // a registered secret split by invisible characters is redacted before they are blanked
    if crate::secrets::any() {
        if let std::borrow::Cow::Owned(o) = crate::secrets::scrub(s) {
            return std::borrow::Cow::Owned(strip_controls_only(&o).into_owned());
        }
    }
    strip_controls_only(s)
}

/// [`strip_controls`] without the secrets' scrub.
fn strip_controls_only(s: &str) -> std::borrow::Cow<'_, str> {
    let bad = |c: char| c.is_control() || servebench_results::is_invisible(c);
    if !s.chars().any(bad) {
        return std::borrow::Cow::Borrowed(s);
    }
    std::borrow::Cow::Owned(s.chars().map(|c| if bad(c) { ' ' } else { c }).collect())
}

/// A server-supplied string made safe to record or show: control characters replaced
/// ([`strip_controls`]) and the registered secrets ([`crate::secrets`]) redacted, so an error
/// body that echoes the API key never carries it further. Borrowed when there was nothing to do.
///
/// The secrets go first: blanking the invisible characters that split an echoed key would
/// leave it readable with spaces (break-it round 8: `CAN ARY KEY` on stderr).
pub fn server_text(s: &str) -> std::borrow::Cow<'_, str> {
    match crate::secrets::scrub(s) {
        std::borrow::Cow::Borrowed(b) => strip_controls(b),
        std::borrow::Cow::Owned(o) => std::borrow::Cow::Owned(strip_controls(&o).into_owned()),
    }
}

/// Collapses whitespace to single spaces, replaces control characters and redacts the
/// registered secrets ([`server_text`]), and truncates to `max` characters.
pub fn one_line(s: &str, max: usize) -> String {
    let s = server_text(s);
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

    /// A server's error text cannot reach a terminal with escape sequences or control bytes
    /// (issue 17).
    #[test]
    fn control_characters_are_stripped() {
        let hostile =
            "{\"error\":{\"message\":\"bad\\u001b[2J\\u001b]0;pwned\\u0007 key\\u0000\\u009b\"}}";
        let m = summarize_error_body(hostile);
        assert_eq!(m, "bad [2J ]0;pwned key");
        assert!(!m.chars().any(char::is_control), "{m:?}");
        assert_eq!(one_line("a\x1b[31mb\x7f", 50), "a [31mb");
        assert!(matches!(
            strip_controls("plain"),
            std::borrow::Cow::Borrowed(_)
        ));
        // break-it round 5: `startup model` printed a model id with U+202E raw on stderr
        assert_eq!(strip_controls("gpt\u{202E}lmth.exe"), "gpt lmth.exe");
        assert_eq!(server_text("a\u{2066}b\u{200F}c"), "a b c");
        assert!(matches!(
            strip_controls("naïve 模型"),
            std::borrow::Cow::Borrowed(_)
        ));
    }
}
