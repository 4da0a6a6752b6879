//! Decoding of one SSE `data` payload of an OpenAI-compatible streaming response.
//!
//! Deserialisation is borrowed (`Cow::Borrowed` into the payload whenever the JSON string has no
//! escapes) and allocation-free on the common path: unknown fields are skipped with
//! [`serde::de::IgnoredAny`], only `choices[0]` is kept, and the other choices are skipped.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

use crate::framer::SseEvent;

/// Token usage as reported by the server (the `usage` object of a chunk).
///
/// All fields are optional: an absent field is `None`, never `0` (a server that says `0` gives
/// `Some(0)`). Units: tokens.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// `usage.prompt_tokens`: input tokens of the request as counted by the server.
    pub prompt_tokens: Option<u64>,
    /// `usage.completion_tokens`: output tokens generated so far. With continuous usage stats this
    /// is cumulative (vLLM `continuous_usage_stats`); in a final usage chunk it is the total.
    pub completion_tokens: Option<u64>,
    /// `usage.completion_tokens` was present but no token count (negative, fractional, beyond
    /// `u64`, a string): `completion_tokens` is then `None`, and the tracker fails the request as
    /// `usage_implausible` rather than counting it as usage that was not sent.
    pub completion_tokens_invalid: bool,
    /// `usage.prompt_tokens_details.cached_tokens`: prompt tokens served from the prefix cache.
    pub cached_tokens: Option<u64>,
    /// `usage.completion_tokens_details.reasoning_tokens` (OpenAI, vLLM), else SGLang's flat
    /// `usage.reasoning_tokens`: output tokens that were reasoning. As sent (not clamped; the
    /// tracker clamps it to the completion total).
    pub reasoning_tokens: Option<u64>,
}

/// llama.cpp `timings` object (server-side measurements attached to the final chunks).
///
/// All fields optional. Counts are tokens, durations are milliseconds (llama.cpp's units).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Timings {
    /// `prompt_n`: prompt tokens actually computed (excludes the cached ones, see `cache_n`).
    pub prompt_n: Option<u64>,
    /// `prompt_ms`: prompt processing time, milliseconds.
    pub prompt_ms: Option<f64>,
    /// `predicted_n`: generated tokens.
    pub predicted_n: Option<u64>,
    /// `predicted_ms`: generation time, milliseconds.
    pub predicted_ms: Option<f64>,
    /// `cache_n`: prompt tokens reused from the KV cache.
    pub cache_n: Option<u64>,
    /// `predicted_per_second`: the server's own decode rate, tokens/s (as sent; llama.cpp
    /// computes it as `predicted_n / predicted_ms × 1000`).
    pub predicted_per_second: Option<f64>,
    /// `draft_n`: speculative draft tokens proposed for this request (llama.cpp with a draft
    /// model or n-gram speculation; absent otherwise).
    pub draft_n: Option<u64>,
    /// `draft_n_accepted`: draft tokens accepted for this request.
    pub draft_n_accepted: Option<u64>,
}

impl Timings {
    /// Server prefill rate `prompt_n / (prompt_ms / 1000)` in tokens per second (uses the computed
    /// prompt tokens only, not `cache_n`); `None` when a field is missing or `prompt_ms ≤ 0`.
    pub fn prompt_tokens_per_s(&self) -> Option<f64> {
        rate(self.prompt_n?, self.prompt_ms?)
    }

    /// Server decode rate `predicted_n / (predicted_ms / 1000)` in tokens per second; `None` when a
    /// field is missing or `predicted_ms ≤ 0`.
    pub fn predicted_tokens_per_s(&self) -> Option<f64> {
        rate(self.predicted_n?, self.predicted_ms?)
    }

    /// Prompt tokens of the request as llama.cpp saw them: `prompt_n + cache_n` (tokens).
    pub fn prompt_total(&self) -> Option<u64> {
        Some(self.prompt_n? + self.cache_n.unwrap_or(0))
    }

    /// Speculative draft acceptance rate `draft_n_accepted / draft_n` (0–1); `None` without draft
    /// counts or with `draft_n = 0` (no speculation happened).
    pub fn draft_acceptance_rate(&self) -> Option<f64> {
        let (n, a) = (self.draft_n?, self.draft_n_accepted?);
        (n > 0).then(|| a.min(n) as f64 / n as f64)
    }
}

fn rate(n: u64, ms: f64) -> Option<f64> {
    (ms > 0.0 && ms.is_finite()).then(|| n as f64 * 1000.0 / ms)
}

/// What one SSE data payload means.
// `Chunk` is the variant of almost every event: boxing it would allocate per event on the hot
// path to shrink the rare ones.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum Decoded<'a> {
    /// A streamed chunk (chat `delta`, completions `text`, or TGI `/generate_stream` `token`).
    Chunk(Chunk<'a>),
    /// `data: [DONE]`, the OpenAI end-of-stream marker.
    Done,
    /// An error reported inside the (HTTP 200) stream: a top-level `error` key (object or string),
    /// a vLLM `{"object":"error",...}` payload, `finish_reason: "error"` (OpenRouter), or an SSE
    /// `event: error` (see [`decode_event`]).
    Error {
        /// Human-readable message (`error.message`, the `error` string, or the top-level `message`).
        message: String,
        /// `error.code`, else `error.type` (or TGI's `error_type`), stringified (`504`, `"server_error"`).
        code: Option<String>,
    },
    /// A payload that is not JSON, or not a JSON object this decoder understands.
    /// [`EMPTY_PAYLOAD`] is the reason for an empty / whitespace-only payload.
    Malformed {
        /// Why the payload was rejected (parser message plus a short excerpt of the payload).
        reason: String,
    },
}

/// [`Decoded::Malformed`] reason for a payload that is empty or only whitespace (a `data:` line
/// with nothing in it). [`RequestTracker`](crate::RequestTracker) ignores such payloads.
pub const EMPTY_PAYLOAD: &str = "empty payload";

impl Decoded<'_> {
    /// Copy every borrowed string so that the value outlives the payload it was decoded from.
    pub fn into_owned(self) -> Decoded<'static> {
        match self {
            Decoded::Chunk(c) => Decoded::Chunk(c.into_owned()),
            Decoded::Done => Decoded::Done,
            Decoded::Error { message, code } => Decoded::Error { message, code },
            Decoded::Malformed { reason } => Decoded::Malformed { reason },
        }
    }

    /// `true` for the [`Decoded::Malformed`] value of an empty or whitespace-only payload.
    pub fn is_empty_payload(&self) -> bool {
        matches!(self, Decoded::Malformed { reason } if reason == EMPTY_PAYLOAD)
    }
}

/// One decoded streamed chunk. Only `choices[0]` is read.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Chunk<'a> {
    /// Top-level `id` as sent (may be `""`, e.g. TGI 2.4).
    pub id: Option<Cow<'a, str>>,
    /// `true` when `choices[0]` carries non-empty `delta.content`, `delta.reasoning_content`,
    /// `delta.reasoning`, non-empty `delta.tool_calls`, or (completions endpoint) non-empty `text`;
    /// for TGI `/generate_stream`, a non-empty `token.text` whose `token.special` is not `true`.
    /// Whether the delta has a `role` does not matter. This is the "text chunk" of seed spec §4.1
    /// (role-only, `""`, `null`, usage-only chunks and `[DONE]` are not token events).
    pub token_event: bool,
    /// The token text of this event was reasoning (`reasoning_content` / `reasoning`) and there
    /// was no answer content (nor tool call) in it.
    pub reasoning_only: bool,
    /// Answer text: `delta.content`, else completions `text`, else TGI `token.text` (non-special).
    pub content: Option<Cow<'a, str>>,
    /// Reasoning text: `delta.reasoning_content`, else `delta.reasoning` (the first non-empty one).
    pub reasoning: Option<Cow<'a, str>>,
    /// `usage` of this chunk, from any chunk (finish chunk, content chunk or `choices: []` chunk);
    /// `usage: null` gives `None`. For TGI `/generate_stream`, `details.generated_tokens` of the
    /// final event is reported as `completion_tokens`.
    pub usage: Option<Usage>,
    /// `choices[0].finish_reason` (TGI: `details.finish_reason`); `""` and `null` give `None`.
    pub finish_reason: Option<Cow<'a, str>>,
    /// llama.cpp `timings`, when present.
    pub timings: Option<Timings>,
    /// The payload carried a choice (`choices[0]`, or a TGI `token` object): an in-progress or
    /// finishing delta, as opposed to a usage-only chunk (`choices: []` or no `choices`).
    pub has_choice: bool,
    /// `choices[0].delta` carried a non-null `role` (the message's opening chunk; vLLM sends
    /// it with `"content": ""` before the first token).
    pub role: bool,
    /// `choices[0].delta.tool_calls` was non-empty (its argument text is not in `content`).
    pub tool_call: bool,
}

impl Chunk<'_> {
    /// Copy every borrowed string (see [`Decoded::into_owned`]).
    pub fn into_owned(self) -> Chunk<'static> {
        fn own(c: Option<Cow<'_, str>>) -> Option<Cow<'static, str>> {
            c.map(|s| Cow::Owned(s.into_owned()))
        }
        Chunk {
            id: own(self.id),
            token_event: self.token_event,
            reasoning_only: self.reasoning_only,
            content: own(self.content),
            reasoning: own(self.reasoning),
            usage: self.usage,
            finish_reason: own(self.finish_reason),
            timings: self.timings,
            has_choice: self.has_choice,
            role: self.role,
            tool_call: self.tool_call,
        }
    }
}

/// Decode one SSE data payload (the [`SseEvent::data`] string).
///
/// * `[DONE]` (surrounding whitespace ignored) → [`Decoded::Done`];
/// * an error payload → [`Decoded::Error`] (see there for the recognised shapes);
/// * a JSON object with at least one of `choices`, `usage`, `id`, `object`, `timings`, `error`,
///   `token`, `details`, `generated_text` → [`Decoded::Chunk`]; unknown fields anywhere are
///   ignored (`chutes_verification`, `matched_stop`, `system_fingerprint`, `logprobs`, ...);
/// * anything else → [`Decoded::Malformed`] ([`EMPTY_PAYLOAD`] when empty or whitespace).
///
/// Never panics. Strings are borrowed from `data` unless they contain JSON escapes.
///
/// Implementation: ordinary chunks go through a strict hand-written reader (`fast.rs`, no
/// allocation; the throughput target is ≥ 1 M events/s per core for framing + decoding +
/// tracking, see `benches/sse.rs`); anything it does not handle
/// exactly — error payloads, llama.cpp `timings`, unusual number forms, escaped keys, invalid
/// JSON — is decoded by the serde visitors (borrowed `Cow`s, `IgnoredAny` for skipped values),
/// which define the semantics. Tests check that both paths agree.
pub fn decode(data: &str) -> Decoded<'_> {
    let trimmed = data.trim_ascii();
    if trimmed.is_empty() {
        return malformed(EMPTY_PAYLOAD.to_owned());
    }
    if trimmed == "[DONE]" {
        return Decoded::Done;
    }
    if !trimmed.starts_with('{') {
        return malformed(format!("not a JSON object: {}", excerpt(trimmed)));
    }
    let mut top = Top::default();
    match crate::fast::parse(trimmed, &mut top) {
        Some(()) => top.into_decoded(),
        None => decode_serde(trimmed),
    }
}

/// The reference decoder (serde visitors) for a trimmed payload that starts with `{`; the fast
/// path in `fast.rs` must agree with it whenever it does not give up.
pub(crate) fn decode_serde(trimmed: &str) -> Decoded<'_> {
    match serde_json::from_str::<Top<'_>>(trimmed) {
        Ok(top) => top.into_decoded(),
        Err(e) => malformed(format!("invalid JSON ({e}): {}", excerpt(trimmed))),
    }
}

/// Decode an SSE event, honouring its event type: `event: error` always gives
/// [`Decoded::Error`] (message from the payload's error object when it has one, else the payload
/// text itself, else `"event: error"`); any other event is [`decode`] of its data.
pub fn decode_event<'a>(ev: &SseEvent<'a>) -> Decoded<'a> {
    let d = decode(ev.data);
    if ev.event != Some("error") {
        return d;
    }
    match d {
        Decoded::Error { .. } => d,
        _ => {
            let text = ev.data.trim();
            let message = if text.is_empty() {
                "event: error".to_owned()
            } else {
                excerpt(text).into_owned()
            };
            Decoded::Error {
                message,
                code: None,
            }
        }
    }
}

fn malformed(reason: String) -> Decoded<'static> {
    Decoded::Malformed { reason }
}

/// At most 120 bytes of `s` (cut at a character boundary), for error messages.
fn excerpt(s: &str) -> Cow<'_, str> {
    const MAX: usize = 120;
    if s.len() <= MAX {
        return Cow::Borrowed(s);
    }
    let mut end = MAX;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!("{}…", &s[..end]))
}

fn non_empty(s: &Option<Cow<'_, str>>) -> bool {
    s.as_deref().is_some_and(|s| !s.is_empty())
}

// ---------------------------------------------------------------------------------------------
// Raw wire shapes (manual visitors: borrowed strings, no per-event allocation, lenient numbers).
// ---------------------------------------------------------------------------------------------

/// Map a key to its index in `keys`, or `usize::MAX` for an unknown key (no allocation).
struct KeySeed(&'static [&'static str]);

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = usize;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<usize, D::Error> {
        d.deserialize_identifier(self)
    }
}

impl<'de> Visitor<'de> for KeySeed {
    type Value = usize;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a field name")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<usize, E> {
        Ok(self.0.iter().position(|k| *k == v).unwrap_or(usize::MAX))
    }
    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<usize, E> {
        Ok(self
            .0
            .iter()
            .position(|k| k.as_bytes() == v)
            .unwrap_or(usize::MAX))
    }
}

/// A JSON string, borrowed when it has no escapes.
struct Str<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Str<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Str<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

fn cow(s: Option<Str<'_>>) -> Option<Cow<'_, str>> {
    s.map(|s| s.0)
}

/// A token count: accepts non-negative integers (also written as `8.0`); `null`, negative or
/// fractional values give `None`.
struct Count(Option<u64>);

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Count;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a token count")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Count, E> {
                Ok(Count(Some(v)))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Count, E> {
                Ok(Count(u64::try_from(v).ok()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Count, E> {
                let ok = v.is_finite() && v >= 0.0 && v.fract() == 0.0 && v < 1.8e19;
                Ok(Count(ok.then_some(v as u64)))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Count, E> {
                Ok(Count(None))
            }
        }
        d.deserialize_any(V)
    }
}

/// `usage.completion_tokens`: like [`Count`], but remembers a value that was present and no
/// token count (`Err`), which [`Count`] turns into `None` like `null`.
struct CompletionCount(Result<Option<u64>, ()>);

impl<'de> Deserialize<'de> for CompletionCount {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = CompletionCount;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a token count")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<CompletionCount, E> {
                Ok(CompletionCount(Ok(Some(v))))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<CompletionCount, E> {
                Ok(CompletionCount(u64::try_from(v).map(Some).map_err(|_| ())))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<CompletionCount, E> {
                let ok = v.is_finite() && v >= 0.0 && v.fract() == 0.0 && v < 1.8e19;
                Ok(CompletionCount(if ok {
                    Ok(Some(v as u64))
                } else {
                    Err(())
                }))
            }
            fn visit_unit<E: de::Error>(self) -> Result<CompletionCount, E> {
                Ok(CompletionCount(Ok(None)))
            }
        }
        d.deserialize_any(V)
    }
}

/// A JSON number as `f64`; `null` gives `None`.
struct Float(Option<f64>);

impl<'de> Deserialize<'de> for Float {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Float;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Float, E> {
                Ok(Float(Some(v as f64)))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Float, E> {
                Ok(Float(Some(v as f64)))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Float, E> {
                Ok(Float(Some(v)))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Float, E> {
                Ok(Float(None))
            }
        }
        d.deserialize_any(V)
    }
}

/// Any JSON scalar stringified (`504` → `"504"`); `null`, objects and arrays give `None`.
struct Scalar(Option<String>);

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Scalar;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a scalar")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Scalar, E> {
                Ok(Scalar(Some(v.to_owned())))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Scalar, E> {
                Ok(Scalar(Some(v.to_string())))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Scalar, E> {
                Ok(Scalar(Some(v.to_string())))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Scalar, E> {
                Ok(Scalar(Some(v.to_string())))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Scalar, E> {
                Ok(Scalar(Some(v.to_string())))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Scalar, E> {
                Ok(Scalar(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Scalar, A::Error> {
                while m.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Scalar(None))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<Scalar, A::Error> {
                while s.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Scalar(None))
            }
        }
        d.deserialize_any(V)
    }
}

/// An error value: a string, or an object with `message` / `code` / `type`.
struct ErrorValue(Option<(String, Option<String>)>);

impl<'de> Deserialize<'de> for ErrorValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        const KEYS: &[&str] = &["message", "code", "type"];
        impl<'de> Visitor<'de> for V {
            type Value = ErrorValue;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an error object or string")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ErrorValue, E> {
                Ok(ErrorValue(Some((v.to_owned(), None))))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ErrorValue, E> {
                Ok(ErrorValue(Some((
                    format!("error {v}"),
                    Some(v.to_string()),
                ))))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ErrorValue, E> {
                Ok(ErrorValue(Some((
                    format!("error {v}"),
                    Some(v.to_string()),
                ))))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<ErrorValue, E> {
                Ok(ErrorValue(Some((format!("error {v}"), None))))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<ErrorValue, E> {
                Ok(ErrorValue(v.then(|| ("error".to_owned(), None))))
            }
            fn visit_unit<E: de::Error>(self) -> Result<ErrorValue, E> {
                Ok(ErrorValue(None))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<ErrorValue, A::Error> {
                while s.next_element::<IgnoredAny>()?.is_some() {}
                Ok(ErrorValue(Some(("error".to_owned(), None))))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<ErrorValue, A::Error> {
                let (mut message, mut code, mut kind) = (None, None, None);
                while let Some(k) = m.next_key_seed(KeySeed(KEYS))? {
                    match k {
                        0 => message = m.next_value::<Scalar>()?.0,
                        1 => code = m.next_value::<Scalar>()?.0,
                        2 => kind = m.next_value::<Scalar>()?.0,
                        _ => {
                            m.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                let code = code.or(kind);
                let message = message
                    .or_else(|| code.as_ref().map(|c| format!("error {c}")))
                    .unwrap_or_else(|| "error".to_owned());
                Ok(ErrorValue(Some((message, code))))
            }
        }
        d.deserialize_any(V)
    }
}

/// `{ "<field>": count }` objects (`prompt_tokens_details`, `completion_tokens_details`).
struct DetailCount<const CACHED: bool>(Option<u64>);

impl<'de, const CACHED: bool> Deserialize<'de> for DetailCount<CACHED> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<const C: bool>;
        impl<'de, const C: bool> Visitor<'de> for V<C> {
            type Value = DetailCount<C>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a token details object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<DetailCount<C>, A::Error> {
                const CACHED_KEYS: &[&str] = &["cached_tokens"];
                const REASONING_KEYS: &[&str] = &["reasoning_tokens"];
                let keys = if C { CACHED_KEYS } else { REASONING_KEYS };
                let mut v = None;
                while let Some(k) = m.next_key_seed(KeySeed(keys))? {
                    if k == 0 {
                        v = m.next_value::<Count>()?.0;
                    } else {
                        m.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(DetailCount(v))
            }
        }
        d.deserialize_map(V::<CACHED>)
    }
}

impl<'de> Deserialize<'de> for Usage {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        const KEYS: &[&str] = &[
            "prompt_tokens",
            "completion_tokens",
            "prompt_tokens_details",
            "completion_tokens_details",
            "reasoning_tokens",
        ];
        impl<'de> Visitor<'de> for V {
            type Value = Usage;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a usage object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Usage, A::Error> {
                let mut u = Usage::default();
                let mut flat_reasoning = None;
                while let Some(k) = m.next_key_seed(KeySeed(KEYS))? {
                    match k {
                        0 => u.prompt_tokens = m.next_value::<Count>()?.0,
                        1 => match m.next_value::<CompletionCount>()?.0 {
                            Ok(v) => u.completion_tokens = v,
                            Err(()) => {
                                u.completion_tokens = None;
                                u.completion_tokens_invalid = true;
                            }
                        },
                        2 => {
                            u.cached_tokens = m
                                .next_value::<Option<DetailCount<true>>>()?
                                .and_then(|c| c.0)
                        }
                        3 => {
                            u.reasoning_tokens = m
                                .next_value::<Option<DetailCount<false>>>()?
                                .and_then(|c| c.0)
                        }
                        4 => flat_reasoning = m.next_value::<Count>()?.0,
                        _ => {
                            m.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                u.reasoning_tokens = u.reasoning_tokens.or(flat_reasoning);
                Ok(u)
            }
        }
        d.deserialize_map(V)
    }
}

impl<'de> Deserialize<'de> for Timings {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        const KEYS: &[&str] = &[
            "prompt_n",
            "prompt_ms",
            "predicted_n",
            "predicted_ms",
            "cache_n",
            "predicted_per_second",
            "draft_n",
            "draft_n_accepted",
        ];
        impl<'de> Visitor<'de> for V {
            type Value = Timings;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a timings object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Timings, A::Error> {
                let mut t = Timings::default();
                while let Some(k) = m.next_key_seed(KeySeed(KEYS))? {
                    match k {
                        0 => t.prompt_n = m.next_value::<Count>()?.0,
                        1 => t.prompt_ms = m.next_value::<Float>()?.0,
                        2 => t.predicted_n = m.next_value::<Count>()?.0,
                        3 => t.predicted_ms = m.next_value::<Float>()?.0,
                        4 => t.cache_n = m.next_value::<Count>()?.0,
                        5 => t.predicted_per_second = m.next_value::<Float>()?.0,
                        6 => t.draft_n = m.next_value::<Count>()?.0,
                        7 => t.draft_n_accepted = m.next_value::<Count>()?.0,
                        _ => {
                            m.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(t)
            }
        }
        d.deserialize_map(V)
    }
}

/// `true` when a JSON array has at least one element (`tool_calls`).
struct NonEmptySeq(bool);

impl<'de> Deserialize<'de> for NonEmptySeq {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = NonEmptySeq;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an array")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<NonEmptySeq, A::Error> {
                let mut n = false;
                while s.next_element::<IgnoredAny>()?.is_some() {
                    n = true;
                }
                Ok(NonEmptySeq(n))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<NonEmptySeq, A::Error> {
                // a single tool call object instead of an array: non-empty if it has any key
                let mut n = false;
                while m.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {
                    n = true;
                }
                Ok(NonEmptySeq(n))
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Default)]
pub(crate) struct Delta<'a> {
    pub(crate) content: Option<Cow<'a, str>>,
    pub(crate) reasoning_content: Option<Cow<'a, str>>,
    pub(crate) reasoning: Option<Cow<'a, str>>,
    pub(crate) tool_calls: bool,
    pub(crate) role: bool,
}

impl<'de> Deserialize<'de> for Delta<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        const KEYS: &[&str] = &[
            "content",
            "reasoning_content",
            "reasoning",
            "tool_calls",
            "role",
        ];
        impl<'de> Visitor<'de> for V {
            type Value = Delta<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a delta object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Delta<'de>, A::Error> {
                let mut out = Delta::default();
                while let Some(k) = m.next_key_seed(KeySeed(KEYS))? {
                    match k {
                        0 => out.content = cow(m.next_value()?),
                        1 => out.reasoning_content = cow(m.next_value()?),
                        2 => out.reasoning = cow(m.next_value()?),
                        3 => {
                            out.tool_calls =
                                m.next_value::<Option<NonEmptySeq>>()?.is_some_and(|n| n.0)
                        }
                        4 => out.role = m.next_value::<Option<IgnoredAny>>()?.is_some(),
                        _ => {
                            m.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(out)
            }
        }
        d.deserialize_map(V)
    }
}

#[derive(Default)]
pub(crate) struct Choice<'a> {
    pub(crate) delta: Option<Delta<'a>>,
    pub(crate) text: Option<Cow<'a, str>>,
    pub(crate) finish_reason: Option<Cow<'a, str>>,
}

impl<'de> Deserialize<'de> for Choice<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        const KEYS: &[&str] = &["delta", "text", "finish_reason"];
        impl<'de> Visitor<'de> for V {
            type Value = Choice<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a choice object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Choice<'de>, A::Error> {
                let mut out = Choice::default();
                while let Some(k) = m.next_key_seed(KeySeed(KEYS))? {
                    match k {
                        0 => out.delta = m.next_value()?,
                        1 => out.text = cow(m.next_value()?),
                        2 => out.finish_reason = cow(m.next_value()?),
                        _ => {
                            m.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(out)
            }
        }
        d.deserialize_map(V)
    }
}

/// `choices`: keep the first element, skip the rest.
struct FirstChoice<'a>(Option<Choice<'a>>);

impl<'de> Deserialize<'de> for FirstChoice<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = FirstChoice<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a choices array")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<FirstChoice<'de>, A::Error> {
                let first = s.next_element::<Choice<'de>>()?;
                if first.is_some() {
                    while s.next_element::<IgnoredAny>()?.is_some() {}
                }
                Ok(FirstChoice(first))
            }
        }
        d.deserialize_seq(V)
    }
}

/// TGI `/generate_stream` `token` object.
#[derive(Default)]
pub(crate) struct TgiToken<'a> {
    pub(crate) text: Option<Cow<'a, str>>,
    pub(crate) special: bool,
}

impl<'de> Deserialize<'de> for TgiToken<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        const KEYS: &[&str] = &["text", "special"];
        impl<'de> Visitor<'de> for V {
            type Value = TgiToken<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a token object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<TgiToken<'de>, A::Error> {
                let mut out = TgiToken::default();
                while let Some(k) = m.next_key_seed(KeySeed(KEYS))? {
                    match k {
                        0 => out.text = cow(m.next_value()?),
                        1 => out.special = m.next_value::<Option<bool>>()?.unwrap_or(false),
                        _ => {
                            m.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(out)
            }
        }
        d.deserialize_map(V)
    }
}

/// TGI `/generate_stream` final `details` object.
#[derive(Default)]
pub(crate) struct TgiDetails<'a> {
    pub(crate) finish_reason: Option<Cow<'a, str>>,
    pub(crate) generated_tokens: Option<u64>,
}

impl<'de> Deserialize<'de> for TgiDetails<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        const KEYS: &[&str] = &["finish_reason", "generated_tokens"];
        impl<'de> Visitor<'de> for V {
            type Value = TgiDetails<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a details object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<TgiDetails<'de>, A::Error> {
                let mut out = TgiDetails::default();
                while let Some(k) = m.next_key_seed(KeySeed(KEYS))? {
                    match k {
                        0 => out.finish_reason = cow(m.next_value()?),
                        1 => out.generated_tokens = m.next_value::<Count>()?.0,
                        _ => {
                            m.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(out)
            }
        }
        d.deserialize_map(V)
    }
}

/// The top-level payload object (filled by the serde visitors below or by the fast path in
/// `fast.rs`; both then build the result with [`Top::into_decoded`]).
#[derive(Default)]
pub(crate) struct Top<'a> {
    /// at least one recognised key was present
    pub(crate) recognised: bool,
    pub(crate) id: Option<Cow<'a, str>>,
    pub(crate) choice: Option<Choice<'a>>,
    pub(crate) usage: Option<Usage>,
    pub(crate) object: Option<Cow<'a, str>>,
    pub(crate) token: Option<TgiToken<'a>>,
    pub(crate) details: Option<TgiDetails<'a>>,
    /// Fields that are absent from ordinary chunks (boxed to keep `Top` small).
    pub(crate) rare: Option<Box<Rare>>,
}

/// Error fields and llama.cpp timings.
#[derive(Default)]
pub(crate) struct Rare {
    timings: Option<Timings>,
    error: Option<(String, Option<String>)>,
    message: Option<String>,
    code: Option<String>,
    kind: Option<String>,
    error_type: Option<String>,
}

impl<'de> Deserialize<'de> for Top<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        const KEYS: &[&str] = &[
            "id",             // 0
            "choices",        // 1
            "usage",          // 2
            "timings",        // 3
            "error",          // 4
            "object",         // 5
            "message",        // 6
            "code",           // 7
            "type",           // 8
            "error_type",     // 9
            "token",          // 10
            "details",        // 11
            "generated_text", // 12
        ];
        impl<'de> Visitor<'de> for V {
            type Value = Top<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Top<'de>, A::Error> {
                let mut t = Top::default();
                while let Some(k) = m.next_key_seed(KeySeed(KEYS))? {
                    match k {
                        0 => t.id = cow(m.next_value()?),
                        1 => t.choice = m.next_value::<Option<FirstChoice>>()?.and_then(|c| c.0),
                        2 => t.usage = m.next_value()?,
                        3 => t.rare_mut().timings = m.next_value()?,
                        4 => t.rare_mut().error = m.next_value::<ErrorValue>()?.0,
                        5 => t.object = cow(m.next_value()?),
                        6 => t.rare_mut().message = m.next_value::<Scalar>()?.0,
                        7 => t.rare_mut().code = m.next_value::<Scalar>()?.0,
                        8 => t.rare_mut().kind = m.next_value::<Scalar>()?.0,
                        9 => t.rare_mut().error_type = m.next_value::<Scalar>()?.0,
                        10 => t.token = m.next_value()?,
                        11 => t.details = m.next_value()?,
                        12 => {
                            m.next_value::<IgnoredAny>()?;
                        }
                        _ => {
                            m.next_value::<IgnoredAny>()?;
                            continue;
                        }
                    }
                    if k <= 5 || k >= 10 {
                        t.recognised = true;
                    }
                }
                Ok(t)
            }
        }
        d.deserialize_map(V)
    }
}

impl<'a> Top<'a> {
    fn rare_mut(&mut self) -> &mut Rare {
        self.rare.get_or_insert_with(Box::default)
    }

    pub(crate) fn into_decoded(self) -> Decoded<'a> {
        let rare = self.rare.map(|r| *r).unwrap_or_default();
        if let Some((message, code)) = rare.error {
            return Decoded::Error {
                message,
                code: code.or(rare.error_type),
            };
        }
        if self.object.as_deref() == Some("error") {
            return Decoded::Error {
                message: rare.message.unwrap_or_else(|| "error".to_owned()),
                code: rare.code.or(rare.kind),
            };
        }
        if !self.recognised {
            return malformed(
                "JSON object without choices, usage, token or error fields".to_owned(),
            );
        }
        let has_choice = self.choice.is_some() || self.token.is_some();
        let choice = self.choice.unwrap_or_default();
        let finish_reason = choice
            .finish_reason
            .or_else(|| self.details.as_ref().and_then(|d| d.finish_reason.clone()))
            .filter(|f| !f.is_empty());
        if finish_reason.as_deref() == Some("error") {
            return Decoded::Error {
                message: "finish_reason: error".to_owned(),
                code: None,
            };
        }
        let delta = choice.delta.unwrap_or_default();
        let mut content = delta.content.or(choice.text);
        if content.is_none() {
            if let Some(tok) = self.token {
                if !tok.special {
                    content = tok.text;
                }
            }
        }
        let reasoning = match (delta.reasoning_content, delta.reasoning) {
            (Some(rc), r) if !rc.is_empty() || r.is_none() => Some(rc),
            (_, r) => r,
        };
        let has_content = non_empty(&content);
        let has_reasoning = non_empty(&reasoning);
        let token_event = has_content || has_reasoning || delta.tool_calls;
        let reasoning_only = has_reasoning && !has_content && !delta.tool_calls;
        let usage = self.usage.or_else(|| {
            self.details
                .and_then(|d| d.generated_tokens)
                .map(|n| Usage {
                    completion_tokens: Some(n),
                    completion_tokens_invalid: false,
                    ..Usage::default()
                })
        });
        Decoded::Chunk(Chunk {
            id: self.id,
            token_event,
            reasoning_only,
            content,
            reasoning,
            usage,
            finish_reason,
            timings: rare.timings,
            has_choice,
            role: delta.role,
            tool_call: delta.tool_calls,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(d: Decoded<'_>) -> Chunk<'_> {
        match d {
            Decoded::Chunk(c) => c,
            other => panic!("expected a chunk, got {other:?}"),
        }
    }

    #[test]
    fn borrowed_strings() {
        let s = r#"{"id":"x","choices":[{"delta":{"content":"hi"}}]}"#;
        let c = chunk(decode(s));
        assert!(matches!(c.content, Some(Cow::Borrowed("hi"))));
        assert!(matches!(c.id, Some(Cow::Borrowed("x"))));
        let s = r#"{"choices":[{"delta":{"content":"a\nb\u00e9"}}]}"#;
        let c = chunk(decode(s));
        assert_eq!(c.content.as_deref(), Some("a\nbé"));
        assert!(c.token_event);
    }

    #[test]
    fn role_only_and_empty_are_not_tokens() {
        for s in [
            r#"{"choices":[{"index":0,"delta":{"role":"assistant"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":null}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[]}}]}"#,
            r#"{"choices":[{"index":0,"text":""}]}"#,
            r#"{"choices":[],"usage":{"completion_tokens":0}}"#,
        ] {
            assert!(!chunk(decode(s)).token_event, "{s}");
        }
        let c = chunk(decode(
            r#"{"choices":[{"delta":{"role":"assistant","content":"safe"}}]}"#,
        ));
        assert!(c.token_event && !c.reasoning_only && c.role && !c.tool_call);
        let c = chunk(decode(
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{"}}]}}]}"#,
        ));
        assert!(c.token_event && !c.reasoning_only && c.tool_call && !c.role);
        let c = chunk(decode(
            r#"{"choices":[{"delta":{"role":null,"content":""}}]}"#,
        ));
        assert!(!c.role && c.has_choice);
    }

    #[test]
    fn reasoning_fields() {
        let c = chunk(decode(r#"{"choices":[{"delta":{"reasoning":"Okay"}}]}"#));
        assert!(c.token_event && c.reasoning_only);
        assert_eq!(c.reasoning.as_deref(), Some("Okay"));
        let c = chunk(decode(
            r#"{"choices":[{"delta":{"reasoning_content":"","reasoning":"x","content":null}}]}"#,
        ));
        assert_eq!(c.reasoning.as_deref(), Some("x"));
        assert!(c.reasoning_only);
        let c = chunk(decode(
            r#"{"choices":[{"delta":{"reasoning_content":"r","content":"c"}}]}"#,
        ));
        assert!(c.token_event && !c.reasoning_only);
    }

    #[test]
    fn usage_shapes() {
        let c = chunk(decode(
            r#"{"choices":[],"usage":{"prompt_tokens":14,"completion_tokens":8,"prompt_tokens_details":{"cached_tokens":3},"completion_tokens_details":{"reasoning_tokens":2}}}"#,
        ));
        assert_eq!(
            c.usage,
            Some(Usage {
                prompt_tokens: Some(14),
                completion_tokens: Some(8),
                completion_tokens_invalid: false,
                cached_tokens: Some(3),
                reasoning_tokens: Some(2)
            })
        );
        let c = chunk(decode(r#"{"choices":[],"usage":null}"#));
        assert_eq!(c.usage, None);
        let c = chunk(decode(
            r#"{"usage":{"prompt_tokens":5,"completion_tokens":7.0,"prompt_tokens_details":null,"completion_tokens_details":null}}"#,
        ));
        assert_eq!(
            c.usage,
            Some(Usage {
                prompt_tokens: Some(5),
                completion_tokens: Some(7),
                completion_tokens_invalid: false,
                cached_tokens: None,
                reasoning_tokens: None
            })
        );
    }

    #[test]
    fn errors() {
        let e = decode(
            r#"{"error": {"message": "TimeoutError", "type": "GatewayTimeout", "code": 504}}"#,
        );
        assert_eq!(
            e,
            Decoded::Error {
                message: "TimeoutError".into(),
                code: Some("504".into())
            }
        );
        let e = decode(
            r#"{"object":"error","message":"bad","type":"BadRequestError","param":null,"code":400}"#,
        );
        assert_eq!(
            e,
            Decoded::Error {
                message: "bad".into(),
                code: Some("400".into())
            }
        );
        let e = decode(r#"{"error":"Model is overloaded","error_type":"overloaded"}"#);
        assert_eq!(
            e,
            Decoded::Error {
                message: "Model is overloaded".into(),
                code: Some("overloaded".into())
            }
        );
        let e = decode(r#"{"choices":[{"delta":{"content":""},"finish_reason":"error"}]}"#);
        assert!(matches!(e, Decoded::Error { .. }));
        // `error: null` is not an error
        assert!(matches!(
            decode(r#"{"id":"a","error":null,"choices":[]}"#),
            Decoded::Chunk(_)
        ));
    }

    #[test]
    fn malformed_and_done() {
        assert_eq!(decode(" [DONE] \r"), Decoded::Done);
        assert!(decode("").is_empty_payload());
        assert!(decode("  \t").is_empty_payload());
        for s in [
            "[1,2]",
            "\"x\"",
            "{",
            "{}",
            r#"{"foo":1}"#,
            "nope",
            r#"{"choices":"x"}"#,
        ] {
            match decode(s) {
                Decoded::Malformed { reason } => assert_ne!(reason, EMPTY_PAYLOAD),
                other => panic!("{s}: {other:?}"),
            }
        }
    }

    #[test]
    fn tgi_generate_stream() {
        let c = chunk(decode(
            r#"{"index":1,"token":{"id":89554,"text":" Deep","logprob":-0.97,"special":false},"generated_text":null,"details":null}"#,
        ));
        assert!(c.token_event);
        assert_eq!(c.content.as_deref(), Some(" Deep"));
        let c = chunk(decode(
            r#"{"index":5,"token":{"id":2,"text":"</s>","logprob":-0.1,"special":true},"generated_text":"x","details":{"finish_reason":"eos_token","generated_tokens":5,"seed":null}}"#,
        ));
        assert!(!c.token_event);
        assert_eq!(c.finish_reason.as_deref(), Some("eos_token"));
        assert_eq!(c.usage.and_then(|u| u.completion_tokens), Some(5));
    }

    #[test]
    fn decode_event_error_type() {
        let at = std::time::Instant::now();
        let ev = SseEvent {
            event: Some("error"),
            data: r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            at,
        };
        assert_eq!(
            decode_event(&ev),
            Decoded::Error {
                message: "Overloaded".into(),
                code: Some("overloaded_error".into())
            }
        );
        let ev = SseEvent {
            event: Some("error"),
            data: "upstream died",
            at,
        };
        assert_eq!(
            decode_event(&ev),
            Decoded::Error {
                message: "upstream died".into(),
                code: None
            }
        );
        let ev = SseEvent {
            event: Some("message"),
            data: "[DONE]",
            at,
        };
        assert_eq!(decode_event(&ev), Decoded::Done);
    }
}
