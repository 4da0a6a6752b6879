//! The secret values this process sends to the server (the API key), so that no text a server
//! sends back can carry them into a file, a log or a terminal (issue 17: a server that echoes the
//! `Authorization` header in an error body).
//!
//! [`HttpClient::new`](crate::HttpClient::new) registers its target's API key here. Every
//! funnel for server-supplied text ([`crate::error::one_line`], [`crate::error::server_text`])
//! replaces a registered value with [`REDACTED`], and the writers of results files, reports and
//! request exports apply [`scrub`] / [`scrub_json`] to what they write, as the last safety net for
//! text that reached the results by another road (an in-stream error event, a model id).
//!
//! The set is process-wide on purpose: the text funnels are free functions called from every
//! layer, and a key must be redacted wherever it shows up, not only where its client is in scope.
//! Values shorter than [`MIN_LEN`] characters are not registered (replacing `abc` everywhere would
//! damage the data, and such a value is no secret).

use std::borrow::Cow;
use std::sync::RwLock;

/// What a secret value is replaced with (the same marker as the host evidence's
/// `servebench_host::REDACTED`).
pub const REDACTED: &str = "<redacted>";

/// Shortest value treated as a secret, characters.
pub const MIN_LEN: usize = 6;

static KNOWN: RwLock<Vec<String>> = RwLock::new(Vec::new());

/// Registers a secret value (trimmed), together with the forms a text may quote it in: Rust
/// `{:?}` / JSON escaping (`"` → `\"`), percent-encoding (`/` → `%2F`) and HTML escaping of
/// those. Values shorter than [`MIN_LEN`] characters and values already known are ignored.
pub fn register(value: &str) {
    let v = value.trim();
    if v.chars().count() < MIN_LEN {
        return;
    }
    let debug = format!("{v:?}");
    let escaped = debug[1..debug.len() - 1].to_string();
    let mut forms = vec![v.to_string(), escaped.clone(), percent_encoded(v)];
    forms.push(html_escaped(v));
    forms.push(html_escaped(&escaped));
    let mut known = KNOWN.write().unwrap_or_else(|e| e.into_inner());
    for f in forms {
        if !known.contains(&f) {
            known.push(f);
        }
    }
    // Longest first, so a secret that contains another is replaced whole.
    known.sort_by_key(|s| std::cmp::Reverse(s.len()));
}

/// RFC 3986 percent-encoding of every byte but the unreserved ones (upper-case hex).
fn percent_encoded(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for b in v.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `&`, `<`, `>`, `"`, `'` as HTML character references.
fn html_escaped(v: &str) -> String {
    v.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

/// True when at least one secret is registered (writers skip the scrub otherwise).
pub fn any() -> bool {
    !KNOWN.read().unwrap_or_else(|e| e.into_inner()).is_empty()
}

/// `s` with every registered secret replaced by [`REDACTED`]; borrowed (no copy) when it holds
/// none.
///
/// The match ignores ASCII case and the invisible characters and combining marks that may
/// stand between a secret's characters ([`servebench_results::replace_secrets`]): a server
/// that echoes the key lower-cased or split by U+200B does not get it through.
pub fn scrub(s: &str) -> Cow<'_, str> {
    let known = KNOWN.read().unwrap_or_else(|e| e.into_inner());
    if known.is_empty() {
        return Cow::Borrowed(s);
    }
    match servebench_results::replace_secrets(s, &known, REDACTED) {
        Some(out) => Cow::Owned(out),
        None => Cow::Borrowed(s),
    }
}

/// Scrubs every string and object key inside `v` in place ([`scrub`]); true when something was
/// replaced. Working on the value, not on its JSON text, keeps the document valid whatever
/// characters a secret holds.
pub fn scrub_json(v: &mut serde_json::Value) -> bool {
    use serde_json::Value;
    match v {
        Value::String(s) => match scrub(s) {
            Cow::Owned(o) => {
                *s = o;
                true
            }
            Cow::Borrowed(_) => false,
        },
        Value::Array(a) => a.iter_mut().fold(false, |acc, x| scrub_json(x) | acc),
        Value::Object(m) => {
            let mut changed = false;
            if m.keys().any(|k| matches!(scrub(k), Cow::Owned(_))) {
                let old = std::mem::take(m);
                for (k, x) in old {
                    m.insert(scrub(&k).into_owned(), x);
                }
                changed = true;
            }
            m.values_mut().fold(changed, |acc, x| scrub_json(x) | acc)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // One process-wide set: the values here are unique to this test.
    #[test]
    fn registered_values_are_replaced_everywhere() {
        register("  sk-test-Zq81xR  ");
        register("ab"); // too short: never a secret
        assert!(any());
        assert_eq!(
            scrub("HTTP 401: bad key sk-test-Zq81xR (sk-test-Zq81xR)"),
            "HTTP 401: bad key <redacted> (<redacted>)"
        );
        assert!(matches!(scrub("nothing here, ab"), Cow::Borrowed(_)));
        let mut v = serde_json::json!({
            "reason": "echo: Bearer sk-test-Zq81xR",
            "list": ["sk-test-Zq81xR", 1, null],
            "sk-test-Zq81xR": {"n": 2},
        });
        assert!(scrub_json(&mut v));
        assert!(!scrub_json(&mut v), "nothing left to replace");
        assert_eq!(
            v,
            serde_json::json!({
                "reason": "echo: Bearer <redacted>",
                "list": ["<redacted>", 1, null],
                "<redacted>": {"n": 2},
            })
        );
    }

    /// Issue 17, second break-it round: a key quoted with `{:?}` (a rejected `/metrics` line),
    /// percent-encoded (a URL) or HTML-escaped reached stderr, the results and the HTML report.
    #[test]
    fn quoted_encoded_and_escaped_forms_are_replaced() {
        register(r#"CANq"<ARY>&z/93k"#);
        for form in [
            r#"CANq"<ARY>&z/93k"#,
            r#"CANq\"<ARY>&z/93k"#,
            "CANq%22%3CARY%3E%26z%2F93k",
            "CANq&quot;&lt;ARY&gt;&amp;z/93k",
            r#"CANq\&quot;&lt;ARY&gt;&amp;z/93k"#,
        ] {
            assert_eq!(scrub(&format!("a {form} b")), "a <redacted> b", "{form}");
        }
    }

    #[test]
    fn a_longer_secret_containing_a_shorter_one_goes_whole() {
        register("Kk9-short");
        register("Kk9-short-and-longer");
        assert_eq!(scrub("x Kk9-short-and-longer y"), "x <redacted> y");
    }
}
