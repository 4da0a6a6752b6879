//! Timeouts on every wait, and the retry policy for HTTP 429.
//!
//! Every request servebench sends has a deadline for each of its phases, so a server that stops
//! answering ends the request (and the cell) with a typed reason in bounded time instead of
//! hanging the run:
//!
//! | phase | deadline ([`RequestPolicy`] field) | [`Limit`] | reason |
//! |---|---|---|---|
//! | request sent → response head (status line and headers) | `first_byte`; unset: the first-token deadline | [`Limit::FirstByte`], [`Limit::FirstByteFromFirstToken`] | `first_byte_timeout` |
//! | request sent → first output token | `first_token` + `first_token_per_1k` × prompt tokens in flight / 1000 | [`Limit::FirstToken`] | `first_token_timeout` |
//! | after the first token: no bytes at all (SSE comment pings count) | `stream_idle` | [`Limit::StreamIdle`] | `stream_stalled` |
//! | after the first token: no output token, whatever else arrives (pings, text-less or usage-only chunks) | [`NO_TOKEN_IDLE_FACTOR`] × `stream_idle` | [`Limit::StreamIdle`] | `stream_stalled` |
//! | request sent → end of the response (off by default) | `request` | [`Limit::Request`] | `request_timeout` |
//! | startup probes (decode JIT probe, each `/tokenize` call, each calibration request) | `probe` (calibration: + the per-1k scaling of its prompt); the whole probe: `request`, else `probe` + `stream_idle` | [`Limit::Probe`] | `probe_timeout` |
//!
//! A timeout's message (it becomes the cell's reason in the results) names its [`Limit`] in words
//! ("stream idle timeout"), never a command-line flag; the CLI maps each [`Limit`] to its flag.
//!
//! **Prompt tokens in flight** = the request's prompt tokens × the requests the server may be
//! prefilling at the same time (C for the streams of a cell, 1 for single requests): without a
//! prefix cache, a stream's first token can wait for every prompt of its cell. The prompt size of a
//! request is estimated from its body: [`estimate_prompt_tokens`] = body bytes / 3, an
//! over-estimate for the padding text servebench sends (≈ 4 characters per token), so the
//! deadline errs long.
//!
//! The pure functions here are tested directly; [`crate::stream`] applies them to both transports.
//! The defaults below are those of the CLI's flags.

use std::time::{Duration, Instant};

use crate::failure::FailureKind;

/// Default probe timeout ([`RequestPolicy::probe`]), s.
pub const DEFAULT_PROBE_TIMEOUT_S: f64 = 30.0;
/// Default first-token timeout ([`RequestPolicy::first_token`], the base of the scaled
/// deadline), s.
pub const DEFAULT_FIRST_TOKEN_TIMEOUT_S: f64 = 60.0;
/// Default [`RequestPolicy::first_token_per_1k`]: added per 1,000 prompt tokens in flight, s
/// (assumes a prefill of at least 500 tok/s; raise it for CPU servers).
pub const DEFAULT_FIRST_TOKEN_PER_1K_S: f64 = 2.0;
/// After the first token, the longest time without an output token, as a multiple of the
/// stream idle timeout, even while other bytes arrive ([`RequestLimits::no_token_deadline`]).
pub const NO_TOKEN_IDLE_FACTOR: f64 = 2.0;
/// Default stream idle timeout ([`RequestPolicy::stream_idle`]), s.
pub const DEFAULT_STREAM_IDLE_TIMEOUT_S: f64 = 60.0;
/// Longest wait honoured from a `Retry-After` header, s.
pub const MAX_RETRY_AFTER_S: f64 = 60.0;
/// Largest backoff without a `Retry-After` header, s (1, 2, 4, … s).
pub const MAX_BACKOFF_S: f64 = 30.0;

/// How requests wait and retry. One per run, carried by [`crate::target::HttpClient`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RequestPolicy {
    /// Each startup probe request ([`Limit::Probe`]).
    pub probe: Duration,
    /// Request sent → response head ([`Limit::FirstByte`]); `None` = the request's first-token
    /// deadline ([`Limit::FirstByteFromFirstToken`]: headers may legitimately arrive only with
    /// the first token).
    pub first_byte: Option<Duration>,
    /// The base of the first-token deadline ([`Limit::FirstToken`]).
    pub first_token: Duration,
    /// Added to the first-token deadline per 1,000 prompt tokens in flight.
    pub first_token_per_1k: Duration,
    /// After the first token, the longest time without any byte ([`Limit::StreamIdle`]);
    /// `None` = off.
    pub stream_idle: Option<Duration>,
    /// Whole-request ceiling ([`Limit::Request`]); `None` = off (the default).
    pub request: Option<Duration>,
    /// Retries of a request answered with HTTP 429 (0 = fail at once).
    pub max_retries: u32,
}

impl Default for RequestPolicy {
    fn default() -> Self {
        RequestPolicy {
            probe: Duration::from_secs_f64(DEFAULT_PROBE_TIMEOUT_S),
            first_byte: None,
            first_token: Duration::from_secs_f64(DEFAULT_FIRST_TOKEN_TIMEOUT_S),
            first_token_per_1k: Duration::from_secs_f64(DEFAULT_FIRST_TOKEN_PER_1K_S),
            stream_idle: Some(Duration::from_secs_f64(DEFAULT_STREAM_IDLE_TIMEOUT_S)),
            request: None,
            max_retries: 0,
        }
    }
}

/// Prompt tokens of a request estimated from its JSON body: bytes / 3 (see the module docs).
pub fn estimate_prompt_tokens(body_len: usize) -> u64 {
    body_len as u64 / 3
}

/// `"max_tokens": N` of a serialised request body, if present. Inside JSON strings a quote is
/// always escaped, so the unescaped pattern `"max_tokens":` can only be the key.
pub fn body_max_tokens(body: &[u8]) -> Option<u64> {
    const KEY: &[u8] = b"\"max_tokens\":";
    let i = body.windows(KEY.len()).position(|w| w == KEY)? + KEY.len();
    let rest = &body[i..];
    let rest = &rest[rest.iter().take_while(|b| b.is_ascii_whitespace()).count()..];
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()
}

/// A deadline of a [`RequestPolicy`], named in words without the command line's flags (the CLI
/// maps each to its flag). A timeout's message names the limit that passed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Limit {
    /// [`RequestPolicy::probe`]: startup probes.
    Probe,
    /// [`RequestPolicy::first_byte`], when set: request sent → response head.
    FirstByte,
    /// The first-byte deadline when [`RequestPolicy::first_byte`] is unset: the request's
    /// first-token deadline.
    FirstByteFromFirstToken,
    /// [`RequestPolicy::first_token`] plus [`RequestPolicy::first_token_per_1k`] per 1,000 prompt
    /// tokens in flight: request sent → first output token.
    FirstToken,
    /// [`RequestPolicy::stream_idle`]: after the first token, the longest time without bytes.
    StreamIdle,
    /// [`RequestPolicy::request`]: the whole request.
    Request,
}

impl Limit {
    /// Every limit, in the order of the module docs' table.
    pub const ALL: [Limit; 6] = [
        Limit::FirstByte,
        Limit::FirstByteFromFirstToken,
        Limit::FirstToken,
        Limit::StreamIdle,
        Limit::Request,
        Limit::Probe,
    ];

    /// The limit in words, as timeout messages name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Limit::Probe => "probe timeout",
            Limit::FirstByte => "first-byte timeout",
            Limit::FirstByteFromFirstToken => {
                "first-byte timeout, by default the first-token timeout"
            }
            Limit::FirstToken => "first-token timeout",
            Limit::StreamIdle => "stream idle timeout",
            Limit::Request => "request timeout",
        }
    }
}

impl std::fmt::Display for Limit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which kind of request the deadlines are for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RequestClass {
    /// A measured or warmup request (first byte / first token from the scaled rule).
    #[default]
    Normal,
    /// A startup probe (decode JIT probe): first byte and first token within the probe timeout
    /// ([`RequestPolicy::probe`]).
    Probe,
}

/// The deadlines of one request, derived from a [`RequestPolicy`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RequestLimits {
    /// Request sent → response head.
    pub first_byte: Duration,
    /// Request sent → first output token.
    pub first_token: Duration,
    /// After the first token: longest time without bytes (`None` = off).
    pub idle: Option<Duration>,
    /// Whole request (`None` = off).
    pub total: Option<Duration>,
    /// The limit behind [`RequestLimits::first_byte`] (named in its timeout message).
    pub first_byte_limit: Limit,
    /// The limit behind [`RequestLimits::first_token`] (named in its timeout message).
    pub first_token_limit: Limit,
    /// The limit behind [`RequestLimits::total`]: [`Limit::Request`], or [`Limit::Probe`] for a
    /// probe bounded by default (named in its timeout message).
    pub total_limit: Limit,
    /// The prompt tokens in flight behind the first-token deadline (for the message).
    pub prompt_tokens_in_flight: u64,
    /// A `max_tokens = 1` request (a scout, a prefill sample): after its first token the whole
    /// answer must end within this (the stream idle timeout), else it is cut as
    /// `max_tokens_ignored` ([`RequestLimits::single_token_deadline`]). Set by the stream from
    /// the body; `None` for every other request.
    pub single_token_end: Option<Duration>,
}

impl RequestPolicy {
    /// First-token deadline for `prompt_tokens_in_flight` (the rule in the module docs):
    /// `first_token + first_token_per_1k × prompt_tokens_in_flight / 1000`.
    pub fn first_token_for(&self, prompt_tokens_in_flight: u64) -> Duration {
        self.first_token
            + self
                .first_token_per_1k
                .mul_f64(prompt_tokens_in_flight as f64 / 1000.0)
    }

    /// Whole-request timeout of a non-streaming startup request (calibration) with a prompt of
    /// `prompt_tokens`: `probe + first_token_per_1k × prompt_tokens / 1000`.
    pub fn probe_for(&self, prompt_tokens: u64) -> Duration {
        self.probe
            + self
                .first_token_per_1k
                .mul_f64(prompt_tokens as f64 / 1000.0)
    }

    /// The deadlines of one streaming request with a `body_len`-byte body, `in_flight` requests of
    /// the same prompt at once (≥ 1).
    pub fn limits(&self, class: RequestClass, body_len: usize, in_flight: u64) -> RequestLimits {
        let tokens = estimate_prompt_tokens(body_len).saturating_mul(in_flight.max(1));
        match class {
            RequestClass::Probe => RequestLimits {
                first_byte: self.probe,
                first_token: self.probe,
                idle: self.stream_idle,
                // a probe is a short request: bounded as a whole even when no whole-request
                // deadline is set (first token within the probe limit, then at most one idle)
                total: self
                    .request
                    .or(Some(self.probe + self.stream_idle.unwrap_or(self.probe))),
                first_byte_limit: Limit::Probe,
                first_token_limit: Limit::Probe,
                total_limit: if self.request.is_some() {
                    Limit::Request
                } else {
                    Limit::Probe
                },
                prompt_tokens_in_flight: tokens,
                single_token_end: None,
            },
            RequestClass::Normal => {
                let ft = self.first_token_for(tokens);
                RequestLimits {
                    first_byte: self.first_byte.unwrap_or(ft),
                    first_token: ft,
                    idle: self.stream_idle,
                    total: self.request,
                    first_byte_limit: if self.first_byte.is_some() {
                        Limit::FirstByte
                    } else {
                        Limit::FirstByteFromFirstToken
                    },
                    first_token_limit: Limit::FirstToken,
                    total_limit: Limit::Request,
                    prompt_tokens_in_flight: tokens,
                    single_token_end: None,
                }
            }
        }
    }

    /// Wait before retry number `attempt` (1-based) of a request answered with HTTP 429:
    /// the server's `Retry-After` (capped at [`MAX_RETRY_AFTER_S`]) when given, else
    /// 2^(attempt−1) s capped at [`MAX_BACKOFF_S`].
    pub fn backoff(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        match retry_after {
            Some(d) => d.min(Duration::from_secs_f64(MAX_RETRY_AFTER_S)),
            None => Duration::from_secs_f64(
                2f64.powi(attempt.saturating_sub(1).min(16) as i32)
                    .min(MAX_BACKOFF_S),
            ),
        }
    }
}

impl RequestLimits {
    /// The earliest deadline that applies now, and the failure it means:
    /// before the first token, `sent + first_token` (`first_token_timeout`); after it,
    /// `last_byte + idle` (`stream_stalled`); always `sent + total` (`request_timeout`).
    /// `None` when no deadline applies.
    pub fn body_deadline(
        &self,
        sent: Instant,
        first_token: Option<Instant>,
        last_byte: Instant,
    ) -> Option<(Instant, FailureKind)> {
        let phase = match first_token {
            None => Some((sent + self.first_token, FailureKind::FirstTokenTimeout)),
            Some(_) => self
                .idle
                .map(|d| (last_byte.max(sent) + d, FailureKind::StreamStalled)),
        };
        let total = self.total.map(|d| (sent + d, FailureKind::RequestTimeout));
        match (phase, total) {
            (Some(a), Some(b)) => Some(if b.0 < a.0 { b } else { a }),
            (a, b) => a.or(b),
        }
    }

    /// After the first token, the latest time the next output token may arrive even while
    /// other bytes keep the stream alive (SSE comment pings, text-less or usage-only chunks):
    /// `last_token + NO_TOKEN_IDLE_FACTOR × idle` (`stream_stalled`, [`Self::no_token_message`]).
    /// Without it a server that sent one token and then only pings would hold a request (a
    /// startup probe, a scout, a request-count cell) forever when no whole-request deadline is
    /// set. `None` before the first token or with the idle limit off.
    pub fn no_token_deadline(&self, last_token: Option<Instant>) -> Option<Instant> {
        Some(last_token? + self.idle?.mul_f64(NO_TOKEN_IDLE_FACTOR))
    }

    /// After the first token of a `max_tokens = 1` request, the latest time its answer may
    /// end: `first_token + single_token_end` (break-it round 8: a server ignoring max_tokens
    /// and trickling a token every 1.9 s held each scout until the 2 × max_tokens + 16 cut,
    /// 19 tokens; at one token just inside the idle timeout, 19 minutes per context). `None`
    /// for other requests and before the first token.
    pub fn single_token_deadline(&self, first_token: Option<Instant>) -> Option<Instant> {
        Some(first_token? + self.single_token_end?)
    }

    /// The message of a [`Self::single_token_deadline`] that passed.
    pub fn single_token_message(&self) -> String {
        format!(
            "max_tokens_ignored: a max_tokens = 1 request was still streaming {} after its first token ({})",
            format_secs(self.single_token_end.unwrap_or_default().as_secs_f64()),
            Limit::StreamIdle
        )
    }

    /// The message of a [`Self::no_token_deadline`] that passed.
    pub fn no_token_message(&self) -> String {
        format!(
            "stream_stalled: no output token for {} although bytes kept arriving (keep-alive comments or chunks without tokens; {} × the {})",
            format_secs(self.idle.unwrap_or_default().as_secs_f64() * NO_TOKEN_IDLE_FACTOR),
            NO_TOKEN_IDLE_FACTOR,
            Limit::StreamIdle
        )
    }

    /// The limit whose passing is a failure of `kind` (`None` for a kind that is no deadline of
    /// these limits).
    pub fn limit_of(&self, kind: FailureKind) -> Option<Limit> {
        match kind {
            FailureKind::FirstByteTimeout => Some(self.first_byte_limit),
            FailureKind::FirstTokenTimeout => Some(self.first_token_limit),
            FailureKind::StreamStalled => Some(Limit::StreamIdle),
            FailureKind::RequestTimeout => Some(self.total_limit),
            _ => None,
        }
    }

    /// The one-line message of a timeout of `kind`: the phase, the time, and the [`Limit`] in
    /// words (no command-line flag).
    pub fn message(&self, kind: FailureKind) -> String {
        let s = |d: Duration| format_secs(d.as_secs_f64());
        match kind {
            FailureKind::FirstByteTimeout => format!(
                "first_byte_timeout: no response headers within {} of sending the request ({})",
                s(self.first_byte),
                self.first_byte_limit
            ),
            FailureKind::FirstTokenTimeout => format!(
                "first_token_timeout: no output token within {} of sending the request ({}; ~{} prompt tokens in flight)",
                s(self.first_token),
                self.first_token_limit,
                self.prompt_tokens_in_flight
            ),
            FailureKind::StreamStalled => format!(
                "stream_stalled: no bytes for {} after the stream had started ({})",
                s(self.idle.unwrap_or_default()),
                Limit::StreamIdle
            ),
            FailureKind::RequestTimeout => format!(
                "request_timeout: the request did not finish within {} ({})",
                s(self.total.unwrap_or_default()),
                self.total_limit
            ),
            other => other.as_str().to_string(),
        }
    }
}

/// `30 s`, `2.5 s`.
pub fn format_secs(v: f64) -> String {
    if (v - v.round()).abs() < 1e-9 {
        format!("{v:.0} s")
    } else {
        format!("{v:.1} s")
    }
}

/// Parses a `Retry-After` value: delay-seconds, or an HTTP date (relative to now).
pub fn parse_retry_after(v: &str) -> Option<Duration> {
    let v = v.trim();
    if let Ok(s) = v.parse::<f64>() {
        return (s.is_finite() && s >= 0.0).then(|| Duration::from_secs_f64(s));
    }
    let t = chrono::DateTime::parse_from_rfc2822(v).ok()?;
    let now = chrono::Utc::now();
    let d = t.with_timezone(&chrono::Utc) - now;
    Some(d.to_std().unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_token_scaling() {
        let p = RequestPolicy::default();
        assert_eq!(p.first_token_for(0), Duration::from_secs(60));
        assert_eq!(p.first_token_for(16_000), Duration::from_secs(92));
        // the default deadlines of a context-0 request and of a startup probe are ≤ 60 s, so a
        // server that never answers ends the run within about two minutes
        let l = p.limits(RequestClass::Normal, 300, 1);
        assert!(l.first_byte <= Duration::from_secs(61));
        assert_eq!(l.first_byte, l.first_token);
        let l = p.limits(RequestClass::Probe, 300, 1);
        assert_eq!(l.first_byte, Duration::from_secs(30));
        // prompt tokens in flight: body bytes / 3 × C
        let l = p.limits(RequestClass::Normal, 3_000, 4);
        assert_eq!(l.prompt_tokens_in_flight, 4_000);
        assert_eq!(l.first_token, Duration::from_secs(68));
        assert_eq!(p.probe_for(8_000), Duration::from_secs(46));
    }

    #[test]
    fn deadlines_by_phase() {
        let p = RequestPolicy {
            request: Some(Duration::from_secs(100)),
            stream_idle: Some(Duration::from_secs(5)),
            ..Default::default()
        };
        let l = p.limits(RequestClass::Normal, 0, 1);
        let t0 = Instant::now();
        let (d, k) = l.body_deadline(t0, None, t0).unwrap();
        assert_eq!(
            (d - t0, k),
            (Duration::from_secs(60), FailureKind::FirstTokenTimeout)
        );
        let ft = t0 + Duration::from_secs(1);
        let last = t0 + Duration::from_secs(3);
        let (d, k) = l.body_deadline(t0, Some(ft), last).unwrap();
        assert_eq!(
            (d - t0, k),
            (Duration::from_secs(8), FailureKind::StreamStalled)
        );
        let last = t0 + Duration::from_secs(97);
        let (d, k) = l.body_deadline(t0, Some(ft), last).unwrap();
        assert_eq!(
            (d - t0, k),
            (Duration::from_secs(100), FailureKind::RequestTimeout)
        );
        let off = RequestLimits {
            idle: None,
            total: None,
            ..l
        };
        assert!(off.body_deadline(t0, Some(ft), last).is_none());
        assert_eq!(
            l.message(FailureKind::StreamStalled),
            "stream_stalled: no bytes for 5 s after the stream had started (stream idle timeout)"
        );
        assert_eq!(
            l.message(FailureKind::RequestTimeout),
            "request_timeout: the request did not finish within 100 s (request timeout)"
        );
    }

    #[test]
    fn each_timeout_names_its_limit_in_words() {
        let set = RequestPolicy {
            first_byte: Some(Duration::from_secs(2)),
            ..Default::default()
        };
        let cases = [
            (RequestPolicy::default(), RequestClass::Normal),
            (set, RequestClass::Normal),
            (RequestPolicy::default(), RequestClass::Probe),
        ];
        let expected = [
            [
                Limit::FirstByteFromFirstToken,
                Limit::FirstToken,
                Limit::StreamIdle,
                Limit::Request,
            ],
            [
                Limit::FirstByte,
                Limit::FirstToken,
                Limit::StreamIdle,
                Limit::Request,
            ],
            // a probe without --request-timeout is bounded as a whole by the probe limit
            [Limit::Probe, Limit::Probe, Limit::StreamIdle, Limit::Probe],
        ];
        let kinds = [
            FailureKind::FirstByteTimeout,
            FailureKind::FirstTokenTimeout,
            FailureKind::StreamStalled,
            FailureKind::RequestTimeout,
        ];
        for ((p, class), want) in cases.iter().zip(expected) {
            let l = p.limits(*class, 300, 1);
            for (k, limit) in kinds.iter().zip(want) {
                assert_eq!(l.limit_of(*k), Some(limit), "{class:?} {k:?}");
                let m = l.message(*k);
                assert!(m.starts_with(k.as_str()), "{m}");
                assert!(m.contains(&format!("({limit}")), "{m}");
                assert!(!m.contains("--"), "{m}");
            }
            assert_eq!(l.limit_of(FailureKind::Connect), None);
        }
        assert_eq!(
            RequestPolicy::default()
                .limits(RequestClass::Probe, 0, 1)
                .message(FailureKind::FirstByteTimeout),
            "first_byte_timeout: no response headers within 30 s of sending the request (probe timeout)"
        );
    }

    #[test]
    fn body_scan_and_backoff() {
        assert_eq!(
            body_max_tokens(
                br#"{"messages":[{"content":"\"max_tokens\": 5"}],"max_tokens": 32,"stream":true}"#
            ),
            Some(32)
        );
        assert_eq!(body_max_tokens(b"{}"), None);
        let p = RequestPolicy::default();
        assert_eq!(p.backoff(1, None), Duration::from_secs(1));
        assert_eq!(p.backoff(3, None), Duration::from_secs(4));
        assert_eq!(p.backoff(20, None), Duration::from_secs(30));
        assert_eq!(
            p.backoff(1, Some(Duration::from_secs(2))),
            Duration::from_secs(2)
        );
        assert_eq!(
            p.backoff(1, Some(Duration::from_secs(999))),
            Duration::from_secs(60)
        );
        assert_eq!(parse_retry_after(" 3 "), Some(Duration::from_secs(3)));
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon"), None);
    }

    #[test]
    fn no_output_token_ends_a_stream_that_only_pings_and_probes_are_bounded() {
        let p = RequestPolicy::default();
        let l = p.limits(RequestClass::Normal, 300, 1);
        let t0 = Instant::now();
        assert_eq!(l.no_token_deadline(None), None);
        let last = t0 + Duration::from_secs(3);
        assert_eq!(
            l.no_token_deadline(Some(last)),
            Some(
                last + Duration::from_secs_f64(
                    DEFAULT_STREAM_IDLE_TIMEOUT_S * NO_TOKEN_IDLE_FACTOR
                )
            )
        );
        assert!(
            l.no_token_message().contains("no output token for 120 s"),
            "{}",
            l.no_token_message()
        );
        let off = RequestLimits { idle: None, ..l };
        assert_eq!(off.no_token_deadline(Some(last)), None);
        // a probe without --request-timeout: probe + idle as a whole, named as the probe limit
        let probe = p.limits(RequestClass::Probe, 300, 1);
        assert_eq!(
            probe.total,
            Some(Duration::from_secs_f64(
                DEFAULT_PROBE_TIMEOUT_S + DEFAULT_STREAM_IDLE_TIMEOUT_S
            ))
        );
        assert_eq!(
            probe.limit_of(FailureKind::RequestTimeout),
            Some(Limit::Probe)
        );
        let set = RequestPolicy {
            request: Some(Duration::from_secs(5)),
            ..RequestPolicy::default()
        };
        let probe = set.limits(RequestClass::Probe, 300, 1);
        assert_eq!(probe.total, Some(Duration::from_secs(5)));
        assert_eq!(
            probe.limit_of(FailureKind::RequestTimeout),
            Some(Limit::Request)
        );
    }
}
