//! The server under test: base URL, authentication, endpoint, and the HTTP client.
//!
//! The client is an HTTP/1.1 keep-alive pool with no cap on connections per host (pitfall 28:
//! a pool smaller than C silently caps concurrency), a 30 s connect timeout and **no total
//! timeout** on a stream (pitfall 29: long prefills and long decodes must not be cut).

use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;

use crate::error::{summarize_error_body, HttpError};

/// Which OpenAI-compatible API the benchmark requests use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Endpoint {
    /// `POST /v1/chat/completions` with `messages` (default).
    #[default]
    Chat,
    /// `POST /v1/completions` with a `prompt` string.
    Completions,
}

impl Endpoint {
    /// Path of the streaming API.
    pub fn path(self) -> &'static str {
        match self {
            Endpoint::Chat => "/v1/chat/completions",
            Endpoint::Completions => "/v1/completions",
        }
    }

    /// Name recorded in `metadata.endpoint`.
    pub fn as_str(self) -> &'static str {
        match self {
            Endpoint::Chat => "chat",
            Endpoint::Completions => "completions",
        }
    }
}

/// Why a URL or host cannot be the server under test. Each variant carries the offending value;
/// the text names no command-line flag (the CLI words it with the flag the value came from).
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum TargetError {
    /// The URL does not start with `http://` or `https://`.
    #[error("the URL {url:?} must start with http:// or https://")]
    Scheme {
        /// The URL as given (trimmed).
        url: String,
    },
    /// The URL has no host (`http://`, `http://:8000`).
    #[error("the URL {url:?} has no host")]
    NoHost {
        /// The URL as given (trimmed).
        url: String,
    },
    /// The URL's host is malformed (`http://[::1`: an IPv6 address without its `]`, or one
    /// that is no IPv6 address).
    #[error("the URL {url:?} has an invalid host {host:?}")]
    InvalidHost {
        /// The URL as given (trimmed).
        url: String,
        /// The authority as given.
        host: String,
    },
    /// The URL's port is not a number from 0 to 65535.
    #[error("the URL {url:?} has an invalid port {port:?}")]
    Port {
        /// The URL as given (trimmed).
        url: String,
        /// The text after the last `:` of the authority.
        port: String,
    },
    /// The URL carries credentials (`user:password@host`). They are refused rather than sent or
    /// recorded: the URL goes into the results, the logs and error messages. `url` is the URL
    /// with its credentials replaced by `***`, so the error never repeats the secret.
    #[error(
        "the URL {url:?} contains credentials (user:password@); pass the key as an API key instead"
    )]
    Credentials {
        /// The URL as given (trimmed), credentials replaced by `***`.
        url: String,
    },
    /// The URL has a query string or a fragment (`/?api_key=X`, `#x`): servebench appends the
    /// API paths to the base URL, so they would end up in the middle of every request's URL.
    /// `url` is the URL up to the `?` or `#`, so the error never repeats what came after it (a
    /// key in a query string).
    #[error(
        "the URL {url:?} is followed by a query string or fragment (not shown); give the base URL only, and the key as an API key"
    )]
    QueryOrFragment {
        /// The URL as given (trimmed), cut before its `?` or `#`.
        url: String,
    },
    /// The host is empty (or only whitespace).
    #[error("the host is empty")]
    EmptyHost,
    /// A bare host (not a URL) that contains a `/`: paths need a full URL.
    #[error("the host {host:?} contains a path; give a full URL for a target with a path")]
    HostWithPath {
        /// The host as given (trimmed).
        host: String,
    },
}

/// `u` as an error may show it: cut before its first `?` or `#` (a query may hold a key), and
/// whatever stands before an `@` in its authority replaced by `***` — also when the scheme is
/// missing or misspelt (`HTTP://user:pw@h`, `http:/user:pw@h`, `user:pw@h`), which the
/// scheme check refuses before the credentials check could see them.
fn shown(u: &str) -> String {
    let u = u.split(['?', '#']).next().unwrap_or("");
    let start = u
        .find("://")
        .map(|i| i + 3)
        .or_else(|| u.find(":/").map(|i| i + 2))
        .unwrap_or(0);
    let rest = &u[start..];
    let authority = &rest[..rest.find('/').unwrap_or(rest.len())];
    match authority.rfind(AT_SIGNS) {
        Some(at) => format!("{}***{}", &u[..start], &rest[at..]),
        None => u.to_string(),
    }
}

/// `@` and the look-alikes a URL's authority may hide credentials behind (fullwidth U+FF20,
/// small U+FE6B; break-it round 8: `u:KEY＠host` passed the credentials check and was printed).
const AT_SIGNS: [char; 3] = ['@', '\u{FF20}', '\u{FE6B}'];

/// Where the server is and how to talk to it.
#[derive(Clone, Debug, PartialEq)]
pub struct Target {
    /// Base URL without a trailing slash and without a trailing `/v1`
    /// (`http://127.0.0.1:8000`, `https://host/prefix`). API paths are appended to it.
    pub base_url: String,
    /// Label for reports: `host:port`, or the URL as given.
    pub server_label: String,
    /// Bearer token sent on every request, `/metrics` included.
    pub api_key: Option<String>,
    /// Chat or completions API.
    pub endpoint: Endpoint,
}

impl Target {
    /// Target from a full URL (`http(s)://host[:port][/path]`). The path is kept; a trailing
    /// `/v1` or `/` is removed because servebench appends `/v1/...` itself.
    ///
    /// Errors: a missing or unsupported scheme ([`TargetError::Scheme`]), no host
    /// ([`TargetError::NoHost`]), a port that is not a `u16` ([`TargetError::Port`]),
    /// credentials in the authority ([`TargetError::Credentials`], checked first so no other
    /// error repeats them), a query string or fragment ([`TargetError::QueryOrFragment`], checked
    /// next for the same reason).
    pub fn from_url(
        url: &str,
        api_key: Option<String>,
        endpoint: Endpoint,
    ) -> Result<Target, TargetError> {
        let u = url.trim();
        let rest = u
            .strip_prefix("http://")
            .or_else(|| u.strip_prefix("https://"))
            .ok_or_else(|| TargetError::Scheme { url: shown(u) })?;
        let host = rest.split(['/', '?', '#']).next().unwrap_or("");
        if let Some((_, after)) = host.rsplit_once(AT_SIGNS) {
            let scheme = &u[..u.len() - rest.len()];
            return Err(TargetError::Credentials {
                url: format!(
                    "{scheme}***@{after}{}",
                    rest[host.len()..].split(['?', '#']).next().unwrap_or("")
                ),
            });
        }
        if let Some(i) = u.find(['?', '#']) {
            return Err(TargetError::QueryOrFragment {
                url: u[..i].to_string(),
            });
        }
        if host.is_empty() || host.starts_with(':') {
            return Err(TargetError::NoHost { url: shown(u) });
        }
        let bad_host = || TargetError::InvalidHost {
            url: shown(u),
            host: host.to_string(),
        };
        if let Some(v6) = host.strip_prefix('[') {
            let (addr, after) = v6.split_once(']').ok_or_else(bad_host)?;
            if addr.parse::<std::net::Ipv6Addr>().is_err()
                || !(after.is_empty() || after.starts_with(':'))
            {
                return Err(bad_host());
            }
        } else if host.contains(['[', ']']) {
            return Err(bad_host());
        }
        if let Some(port) = host
            .rsplit_once(':')
            .map(|(_, p)| p)
            .filter(|p| !p.contains(']'))
        {
            if port.parse::<u16>().is_err() {
                return Err(TargetError::Port {
                    url: shown(u),
                    port: port.to_string(),
                });
            }
        }
        let mut base = u.trim_end_matches('/').to_string();
        if let Some(stripped) = base.strip_suffix("/v1") {
            base = stripped.to_string();
        }
        Ok(Target {
            base_url: base,
            server_label: u.to_string(),
            api_key,
            endpoint,
        })
    }

    /// Target from a host and a port like the seed tool: a host that is a URL keeps its path and
    /// gets the port only when it has none; a bare host becomes `http://host:port`.
    ///
    /// Errors: an empty host ([`TargetError::EmptyHost`]), a bare host with a path
    /// ([`TargetError::HostWithPath`]), a host with credentials ([`TargetError::Credentials`]),
    /// and those of [`Target::from_url`] for a URL.
    pub fn from_host_port(
        host: &str,
        port: u16,
        api_key: Option<String>,
        endpoint: Endpoint,
    ) -> Result<Target, TargetError> {
        let h = host.trim();
        if h.is_empty() {
            return Err(TargetError::EmptyHost);
        }
        if h.starts_with("http://") || h.starts_with("https://") {
            let mut t = Target::from_url(h, api_key, endpoint)?;
            let (scheme, rest) = t
                .base_url
                .split_once("://")
                .unwrap_or(("http", &t.base_url));
            let (authority, path) = match rest.find('/') {
                Some(i) => (&rest[..i], &rest[i..]),
                None => (rest, ""),
            };
            if !authority.contains(':') {
                t.base_url = format!("{scheme}://{authority}:{port}{path}");
            }
            t.server_label = h.to_string();
            return Ok(t);
        }
        if let Some((_, after)) = h.rsplit_once('@') {
            return Err(TargetError::Credentials {
                url: format!("***@{after}"),
            });
        }
        if h.contains('/') {
            return Err(TargetError::HostWithPath { host: shown(h) });
        }
        let authority = if h.contains(':') && !h.starts_with('[') {
            format!("[{h}]")
        } else {
            h.to_string()
        };
        Ok(Target {
            base_url: format!("http://{authority}:{port}"),
            server_label: format!("{h}:{port}"),
            api_key,
            endpoint,
        })
    }

    /// Full URL of `path` (which starts with `/`).
    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base_url, path)
    }

    /// The port of the base URL (explicit, or 80/443 by scheme).
    pub fn port(&self) -> Option<u16> {
        let (scheme, rest) = self.base_url.split_once("://")?;
        let authority = rest.split('/').next()?;
        match authority.rsplit_once(':') {
            Some((_, p)) if !p.contains(']') => p.parse().ok(),
            _ => Some(if scheme == "https" { 443 } else { 80 }),
        }
    }

    /// True when the server is on this machine (loopback), which allows local-process checks.
    pub fn is_loopback(&self) -> bool {
        let rest = self
            .base_url
            .split_once("://")
            .map(|(_, r)| r)
            .unwrap_or(&self.base_url);
        let host = rest.split(['/', ':']).next().unwrap_or("");
        matches!(host, "127.0.0.1" | "localhost" | "0.0.0.0" | "[") || rest.starts_with("[::1]")
    }
}

/// Shared HTTP client for one run. Cheap to clone (an `Arc` inside).
#[derive(Clone, Debug)]
pub struct HttpClient {
    inner: reqwest::Client,
    target: Target,
    h1: Option<std::sync::Arc<crate::h1::H1Endpoint>>,
    policy: crate::timeouts::RequestPolicy,
}

/// Connect timeout for every request, s (seed §3.11).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Idle keep-alive connections are dropped after this long (below the servers' own keep-alive
/// timeouts: uvicorn 5 s), so a reused connection is never one the server is closing.
pub const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(4);

/// Timeout for small JSON requests (`/v1/models`, `/version`, `/metrics`, `/tokenize`).
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// Largest body servebench reads outside the SSE stream (`/v1/models`, `/tokenize`, info
/// endpoints, `/metrics`), in bytes: 16 MiB. A larger body is refused with
/// [`HttpError::TooLarge`] as soon as the cap is passed (issue 17: a 200 MB `/metrics` page was
/// read whole, 3 GB of memory). vLLM's `/metrics` is ~100 KiB; a list of 200,000 model ids
/// ~11 MiB.
pub const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;

/// Largest error body read for its message, in bytes (the message keeps 300 characters).
pub const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;

/// The time cap of a body read that has no deadline of its own (a `post_json` without one).
pub const BODY_TIMEOUT: Duration = Duration::from_secs(300);

impl HttpClient {
    /// Builds the client: HTTP/1.1 only (one stream per connection, predictable), unlimited
    /// idle connections per host, TCP_NODELAY, 30 s connect timeout, no overall timeout.
    ///
    /// Registers the target's API key with [`crate::secrets`], so that no server text echoing
    /// it is recorded or shown.
    pub fn new(target: Target) -> Result<HttpClient, HttpError> {
        if let Some(key) = &target.api_key {
            crate::secrets::register(key);
        }
        let inner = reqwest::Client::builder()
            .http1_only()
            .connect_timeout(CONNECT_TIMEOUT)
            .pool_max_idle_per_host(usize::MAX)
            // Below uvicorn's 5 s keep-alive (vLLM, SGLang): a connection the server is closing
            // is never picked for the next request (which would fail, e.g. an edge scrape).
            .pool_idle_timeout(POOL_IDLE_TIMEOUT)
            .tcp_nodelay(true)
            .user_agent(concat!("servebench/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| HttpError::Transport {
                method: "INIT",
                url: target.base_url.clone(),
                detail: e.to_string(),
            })?;
        let h1 = crate::h1::H1Endpoint::from_target(&target).map(std::sync::Arc::new);
        Ok(HttpClient {
            inner,
            target,
            h1,
            policy: crate::timeouts::RequestPolicy::default(),
        })
    }

    /// The same client with `policy` (timeouts and 429 retries) for every streaming request.
    pub fn with_policy(mut self, policy: crate::timeouts::RequestPolicy) -> HttpClient {
        self.policy = policy;
        self
    }

    /// Timeouts and retries of streaming requests.
    pub fn policy(&self) -> &crate::timeouts::RequestPolicy {
        &self.policy
    }

    /// The plain-HTTP streaming endpoint (None for `https://` targets, which stream via reqwest).
    pub fn h1_endpoint(&self) -> Option<&crate::h1::H1Endpoint> {
        self.h1.as_deref()
    }

    /// The server this client talks to.
    pub fn target(&self) -> &Target {
        &self.target
    }

    fn auth(&self, rb: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.target.api_key {
            Some(k) if !k.is_empty() => rb.bearer_auth(k),
            _ => rb,
        }
    }

    fn map_err(method: &'static str, url: &str, e: reqwest::Error) -> HttpError {
        let detail = error_chain(&e);
        if e.is_connect() {
            HttpError::Connect {
                url: url.to_string(),
                detail,
            }
        } else if e.is_timeout() {
            HttpError::Transport {
                method,
                url: url.to_string(),
                detail: format!("timed out ({detail})"),
            }
        } else {
            HttpError::Transport {
                method,
                url: url.to_string(),
                detail,
            }
        }
    }

    async fn check(
        method: &'static str,
        url: &str,
        resp: reqwest::Response,
    ) -> Result<reqwest::Response, HttpError> {
        let status = resp.status();
        if status.is_success() {
            return Ok(resp);
        }
        let retry_after = resp
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .map(|s| format!(" (Retry-After: {s})"))
            .unwrap_or_default();
        let body = match read_capped(method, url, resp, MAX_ERROR_BODY_BYTES).await {
            Ok(b) => b,
            Err((partial, _)) => partial,
        };
        Err(HttpError::Status {
            method,
            url: url.to_string(),
            status: status.as_u16(),
            body: format!("{}{}", summarize_error_body(&body), retry_after),
        })
    }

    /// `GET path` and return the body as text (status must be 2xx).
    pub async fn get_text(&self, path: &str, timeout: Duration) -> Result<String, HttpError> {
        let url = self.target.url(path);
        let rb = self.auth(self.inner.get(&url)).timeout(timeout);
        let resp = rb.send().await.map_err(|e| Self::map_err("GET", &url, e))?;
        let resp = Self::check("GET", &url, resp).await?;
        read_capped("GET", &url, resp, MAX_BODY_BYTES)
            .await
            .map_err(|(_, e)| e)
    }

    /// `GET path` and parse JSON.
    pub async fn get_json(&self, path: &str, timeout: Duration) -> Result<Value, HttpError> {
        let text = self.get_text(path, timeout).await?;
        serde_json::from_str(&text).map_err(|e| HttpError::Body {
            url: self.target.url(path),
            detail: format!("not JSON ({e}): {}", crate::error::one_line(&text, 120)),
        })
    }

    /// `POST path` with a JSON body and parse the JSON answer. `timeout` = None: no total timeout.
    pub async fn post_json(
        &self,
        path: &str,
        body: &Value,
        timeout: Option<Duration>,
    ) -> Result<Value, HttpError> {
        let url = self.target.url(path);
        let rb = self
            .auth(self.inner.post(&url))
            .json(body)
            .timeout(timeout.unwrap_or(BODY_TIMEOUT));
        let resp = rb
            .send()
            .await
            .map_err(|e| Self::map_err("POST", &url, e))?;
        let resp = Self::check("POST", &url, resp).await?;
        let text = read_capped("POST", &url, resp, MAX_BODY_BYTES)
            .await
            .map_err(|(_, e)| e)?;
        serde_json::from_str(&text).map_err(|e| HttpError::Body {
            url: url.clone(),
            detail: format!("not JSON ({e}): {}", crate::error::one_line(&text, 120)),
        })
    }

    /// Starts a streaming `POST path` with a pre-serialised JSON body. Returns the response once
    /// the status line and headers arrived with status 2xx; any other status is an error carrying
    /// the server's message.
    pub async fn post_stream(
        &self,
        path: &str,
        body: Bytes,
    ) -> Result<reqwest::Response, HttpError> {
        let url = self.target.url(path);
        let rb = self
            .auth(self.inner.post(&url))
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .body(body);
        let resp = rb
            .send()
            .await
            .map_err(|e| Self::map_err("POST", &url, e))?;
        Self::check("POST", &url, resp).await
    }
}

/// Reads `resp`'s body, at most `max` bytes (a `Content-Length` above it is refused before
/// reading). On an error, also returns what was read so far (lossy UTF-8). The time cap is the
/// request's own timeout (reqwest's covers the body).
async fn read_capped(
    method: &'static str,
    url: &str,
    mut resp: reqwest::Response,
    max: usize,
) -> Result<String, (String, HttpError)> {
    let too_large = || HttpError::TooLarge {
        method,
        url: url.to_string(),
        limit_bytes: max as u64,
    };
    if resp.content_length().is_some_and(|n| n > max as u64) {
        return Err((String::new(), too_large()));
    }
    let mut out: Vec<u8> = Vec::new();
    loop {
        match resp.chunk().await {
            Ok(Some(c)) => {
                if out.len() + c.len() > max {
                    let room = max - out.len();
                    out.extend_from_slice(&c[..room]);
                    return Err((String::from_utf8_lossy(&out).into_owned(), too_large()));
                }
                out.extend_from_slice(&c);
            }
            Ok(None) => return Ok(String::from_utf8_lossy(&out).into_owned()),
            Err(e) => {
                let err = if e.is_timeout() && !out.is_empty() {
                    HttpError::Transport {
                        method,
                        url: url.to_string(),
                        detail: format!(
                            "{} ({} bytes read; {})",
                            crate::error::BODY_TIMEOUT_PREFIX,
                            out.len(),
                            error_chain(&e)
                        ),
                    }
                } else {
                    HttpClient::map_err(method, url, e)
                };
                return Err((String::from_utf8_lossy(&out).into_owned(), err));
            }
        }
    }
}

/// Flattens an error and its sources into one line.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        let t = s.to_string();
        if !out.contains(&t) {
            out.push_str(": ");
            out.push_str(&t);
        }
        src = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_in_the_url_are_refused_without_repeating_them() {
        for (u, shown) in [
            (
                "http://user:CANARY@127.0.0.1:8000/v1",
                "http://***@127.0.0.1:8000/v1",
            ),
            ("https://CANARY@host.example", "https://***@host.example"),
            // Checked before the port, whose error would print the URL as given.
            ("http://u:CANARY@h:99999", "http://***@h:99999"),
            // a fullwidth at sign hides them too (break-it round 8)
            (
                "http://u:CANARY\u{FF20}127.0.0.1:9745",
                "http://***@127.0.0.1:9745",
            ),
        ] {
            let e = Target::from_url(u, None, Endpoint::Chat).unwrap_err();
            assert_eq!(e, TargetError::Credentials { url: shown.into() });
            assert!(!e.to_string().contains("CANARY"), "{e}");
        }
        let e =
            Target::from_host_port("u:CANARY@10.0.0.1", 8000, None, Endpoint::Chat).unwrap_err();
        assert!(matches!(e, TargetError::Credentials { .. }));
        assert!(!e.to_string().contains("CANARY"), "{e}");
        let e = Target::from_host_port("http://u:CANARY@10.0.0.1", 8000, None, Endpoint::Chat)
            .unwrap_err();
        assert!(!e.to_string().contains("CANARY"), "{e}");
        // An `@` after the authority (in a path) is not a credential.
        assert!(Target::from_url("http://h:1/a@b", None, Endpoint::Chat).is_ok());
    }

    /// Issue 17 break-it round: `--url http://h/?api_key=X` became `…/?api_key=X/v1/models` on
    /// every request, and the error printed the key.
    #[test]
    fn a_query_string_or_fragment_is_refused_without_repeating_it() {
        for (u, shown) in [
            (
                "http://127.0.0.1:8000/?api_key=CANARY",
                "http://127.0.0.1:8000/",
            ),
            ("http://h:1/v1?token=CANARY#x", "http://h:1/v1"),
            ("https://h/p#CANARY", "https://h/p"),
        ] {
            let e = Target::from_url(u, None, Endpoint::Chat).unwrap_err();
            assert_eq!(e, TargetError::QueryOrFragment { url: shown.into() });
            assert!(!e.to_string().contains("CANARY"), "{e}");
            let e = Target::from_host_port(u, 8000, None, Endpoint::Chat).unwrap_err();
            assert!(!e.to_string().contains("CANARY"), "{e}");
        }
        // Misspelt or missing schemes: refused by the scheme check, credentials masked.
        for (u, shown) in [
            ("HTTP://CANARY@127.0.0.1:8000", "HTTP://***@127.0.0.1:8000"),
            ("ftp://u:CANARY@h/x", "ftp://***@h/x"),
            ("http:/u:CANARY@h", "http:/***@h"),
            ("u:CANARY@127.0.0.1", "***@127.0.0.1"),
            ("h:1/?token=CANARY", "h:1/"),
        ] {
            let e = Target::from_url(u, None, Endpoint::Chat).unwrap_err();
            assert_eq!(e, TargetError::Scheme { url: shown.into() });
        }
        let e = Target::from_host_port("h/p?token=CANARY", 1, None, Endpoint::Chat).unwrap_err();
        assert!(!e.to_string().contains("CANARY"), "{e}");
        let e = Target::from_url("http://u:p@h/?k=CANARY", None, Endpoint::Chat).unwrap_err();
        assert_eq!(
            e,
            TargetError::Credentials {
                url: "http://***@h/".into()
            }
        );
    }

    #[test]
    fn urls() {
        let t = Target::from_url("http://127.0.0.1:8000/v1/", None, Endpoint::Chat).unwrap();
        assert_eq!(t.base_url, "http://127.0.0.1:8000");
        assert_eq!(t.url("/v1/models"), "http://127.0.0.1:8000/v1/models");
        assert!(t.is_loopback());
        let t = Target::from_url("https://host.example/proxy/llm", None, Endpoint::Chat).unwrap();
        assert_eq!(
            t.url("/v1/models"),
            "https://host.example/proxy/llm/v1/models"
        );
        assert!(!t.is_loopback());
        let err = |u: &str| Target::from_url(u, None, Endpoint::Chat).unwrap_err();
        assert_eq!(
            err(" host:8000 "),
            TargetError::Scheme {
                url: "host:8000".into()
            }
        );
        assert_eq!(
            err("http://:80"),
            TargetError::NoHost {
                url: "http://:80".into()
            }
        );
        let e = err("http://h:99999");
        assert_eq!(
            e,
            TargetError::Port {
                url: "http://h:99999".into(),
                port: "99999".into()
            }
        );
        // the text names the value, never a command-line flag
        assert_eq!(
            e.to_string(),
            r#"the URL "http://h:99999" has an invalid port "99999""#
        );
        assert_eq!(
            err("ftp://h").to_string(),
            r#"the URL "ftp://h" must start with http:// or https://"#
        );
        // a malformed IPv6 host is a bad value, not a network failure (break-it round 5:
        // `--url http://[::1` ended in "builder error: invalid IPv6 address", exit 1)
        for bad in [
            "http://[::1",
            "http://[zz]:80",
            "http://[::1]x",
            "http://a]b:1",
        ] {
            assert!(
                matches!(err(bad), TargetError::InvalidHost { .. }),
                "{bad}: {:?}",
                err(bad)
            );
        }
        for good in ["http://[::1]", "http://[::1]:8000/v1", "http://[fe80::1]:1"] {
            assert!(
                Target::from_url(good, None, Endpoint::Chat).is_ok(),
                "{good}"
            );
        }
    }

    #[test]
    fn host_port() {
        let t = Target::from_host_port("localhost", 5000, None, Endpoint::Chat).unwrap();
        assert_eq!(t.base_url, "http://localhost:5000");
        assert_eq!(t.server_label, "localhost:5000");
        let t = Target::from_host_port("https://h/x", 8443, None, Endpoint::Chat).unwrap();
        assert_eq!(t.base_url, "https://h:8443/x");
        let t = Target::from_host_port("http://h:1/x", 8443, None, Endpoint::Chat).unwrap();
        assert_eq!(t.base_url, "http://h:1/x");
        let err = |h: &str| Target::from_host_port(h, 1, None, Endpoint::Chat).unwrap_err();
        assert_eq!(err("h/x"), TargetError::HostWithPath { host: "h/x".into() });
        assert_eq!(err("  "), TargetError::EmptyHost);
        assert_eq!(
            err("http://h:x"),
            TargetError::Port {
                url: "http://h:x".into(),
                port: "x".into()
            }
        );
        for e in [err("h/x"), err(""), err("http://:1")] {
            assert!(!e.to_string().contains("--"), "{e}");
        }
    }

    /// A server that answers every request with `head` and then `body_chunk` repeated until
    /// the client goes away.
    fn endless_server(head: &'static str, body_chunk: &'static [u8]) -> String {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                std::thread::spawn(move || {
                    let mut s = conn;
                    let mut req = Vec::new();
                    let mut b = [0u8; 4096];
                    while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                        match s.read(&mut b) {
                            Ok(n) if n > 0 => req.extend_from_slice(&b[..n]),
                            _ => return,
                        }
                    }
                    if s.write_all(head.as_bytes()).is_err() {
                        return;
                    }
                    if body_chunk.is_empty() {
                        // hold the connection, send nothing more
                        std::thread::sleep(std::time::Duration::from_secs(30));
                        return;
                    }
                    while s.write_all(body_chunk).is_ok() {}
                });
            }
        });
        url
    }

    /// The time cap is an overrun only once the body is arriving: a page that trickles in
    /// (one byte, then nothing) is one, an answer that is late as a whole is a failed request
    /// (a CI run disabled vLLM's `/metrics` for good after one scrape was late on a starved
    /// machine).
    #[test]
    fn a_late_answer_is_no_overrun_but_a_trickling_body_is() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let silent = endless_server("", b"");
        let trickle = endless_server(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 100\r\n\r\n#",
            b"",
        );
        rt.block_on(async {
            for (url, overrun) in [(silent, false), (trickle, true)] {
                let c =
                    HttpClient::new(Target::from_url(&url, None, Endpoint::Chat).unwrap()).unwrap();
                let e = c
                    .get_text("/metrics", Duration::from_millis(300))
                    .await
                    .unwrap_err();
                assert_eq!(e.is_overrun(), overrun, "{url}: {e}");
                assert!(e.to_string().contains("timed out"), "{e}");
            }
        });
    }

    /// Bodies outside the SSE stream are capped (issue 17: a 200 MB `/metrics` page was read
    /// whole): an endless chunked page and a 200 MB `Content-Length` both end as `TooLarge`,
    /// long before the time cap.
    #[test]
    fn bodies_are_capped() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        // an endless page, 64 KiB chunks of Prometheus comments
        static CHUNK: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
        let chunk = CHUNK.get_or_init(|| {
            let data = "# HELP x y\n".repeat(5958);
            format!("{:x}\r\n{data}\r\n", data.len()).into_bytes()
        });
        let endless = endless_server(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n",
            chunk,
        );
        let huge = endless_server(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 200000000\r\n\r\n",
            b"# HELP x y\n",
        );
        rt.block_on(async {
            for url in [endless, huge] {
                let c = HttpClient::new(Target::from_url(&url, None, Endpoint::Chat).unwrap())
                    .unwrap();
                let t0 = std::time::Instant::now();
                let e = c
                    .get_text("/metrics", Duration::from_secs(60))
                    .await
                    .unwrap_err();
                assert!(
                    matches!(e, HttpError::TooLarge { limit_bytes, .. } if limit_bytes == MAX_BODY_BYTES as u64),
                    "{e}"
                );
                assert!(e.is_overrun());
                assert!(e.to_string().contains("larger than 16 MiB"), "{e}");
                assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", t0.elapsed());
            }
        });
    }
}
