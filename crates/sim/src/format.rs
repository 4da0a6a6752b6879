//! Byte-level formatting of SSE events and JSON bodies (vLLM shapes).

use std::fmt::Write as _;

use bytes::{BufMut, Bytes, BytesMut};

/// Generated text: token `i` of a response is `WORDS[i % WORDS.len()]` (each a single token
/// under the built-in tokenizer, with a leading space).
pub const WORDS: [&str; 19] = [
    " lorem",
    " ipsum",
    " dolor",
    " sit",
    " amet",
    " consectetur",
    " adipiscing",
    " elit",
    " sed",
    " do",
    " eiusmod",
    " tempor",
    " incididunt",
    " ut",
    " labore",
    " et",
    " dolore",
    " magna",
    " aliqua",
];

/// The final SSE event.
pub(crate) const DONE: &[u8] = b"data: [DONE]\n\n";

/// The mid-stream fault event.
pub(crate) const MIDSTREAM_ERROR: &[u8] = b"data: {\"error\":{\"message\":\"simulated failure\",\"type\":\"InternalServerError\",\"code\":500}}\n\n";

/// Which OpenAI endpoint a request came through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Endpoint {
    /// `/v1/chat/completions`
    Chat,
    /// `/v1/completions`
    Completion,
}

impl Endpoint {
    pub(crate) fn id_prefix(self) -> &'static str {
        match self {
            Endpoint::Chat => "chatcmpl-sim-",
            Endpoint::Completion => "cmpl-sim-",
        }
    }
}

/// Append the words of tokens `from..from+n` to `out`.
pub(crate) fn push_words(out: &mut impl Extend<u8>, from: u64, n: u64) {
    for i in from..from + n {
        let w = WORDS[(i % WORDS.len() as u64) as usize];
        out.extend(w.bytes());
    }
}

/// Words of tokens `from..from+n` as a string.
#[cfg(test)]
pub(crate) fn words(from: u64, n: u64) -> String {
    let mut s = String::new();
    for i in from..from + n {
        s.push_str(WORDS[(i % WORDS.len() as u64) as usize]);
    }
    s
}

/// JSON string body of `s` (escaped, without the surrounding quotes).
fn json_escaped(s: &str) -> String {
    let q = serde_json::to_string(s).unwrap_or_default();
    q[1..q.len() - 1].to_string()
}

/// What one request says, token by token: which tokens are reasoning, and the text of each.
///
/// Token `i` is `WORDS[i % WORDS.len()]` unless an override gives it another text (the
/// `<think>` / `</think>` markers of inline reasoning, the reasoning's answer mention and the
/// content's `Final answer:` line). Every token stays one token of usage, whatever its text.
#[derive(Debug, Clone, Default)]
pub(crate) struct Script {
    /// Tokens `0..reasoning` are the reasoning phase.
    reasoning: u64,
    /// The reasoning phase is streamed inside `content` (between `<think>` and `</think>`).
    inline: bool,
    /// (position, raw text, JSON-escaped text), sorted by position.
    overrides: Vec<(u64, String, String)>,
}

/// The final content line's lead token (`Final answer:` after a line break).
pub(crate) const ANSWER_LEAD: &str = "\nFinal answer:";

impl Script {
    /// Plain filler text with `reasoning` leading reasoning tokens (streamed as
    /// `reasoning_content`, or inline between `<think>` and `</think>` when `inline` and
    /// `reasoning >= 2`).
    pub(crate) fn new(reasoning: u64, inline: bool) -> Script {
        let mut s = Script {
            reasoning,
            inline,
            overrides: Vec::new(),
        };
        if inline && reasoning >= 2 {
            s.set(0, "<think>");
            s.set(reasoning - 1, "</think>");
        }
        s
    }

    fn set(&mut self, pos: u64, text: &str) {
        self.overrides.retain(|o| o.0 != pos);
        self.overrides
            .push((pos, text.to_string(), json_escaped(text)));
        self.overrides.sort_by_key(|o| o.0);
    }

    /// The reasoning ends with `So the answer is <answer>.` (in its last three tokens inside the
    /// `<think>` markers), when it has room for them.
    pub(crate) fn mention_in_reasoning(&mut self, answer: &str) {
        let (lo, hi) = if self.inline && self.reasoning >= 2 {
            (1, self.reasoning - 1)
        } else {
            (0, self.reasoning)
        };
        if hi >= lo + 3 {
            self.set(hi - 3, "\nSo the answer is");
            self.set(hi - 2, &format!(" {answer}"));
            self.set(hi - 1, ".");
        }
    }

    /// The content ends, at token `end`, with the line `Final answer: <value>` (tokens `end − 2`
    /// and `end − 1`). Returns false (and changes nothing) when those tokens would fall inside
    /// the reasoning phase.
    pub(crate) fn final_answer_at(&mut self, end: u64, value: &str) -> bool {
        if end < self.reasoning + 2 {
            return false;
        }
        self.set(end - 2, ANSWER_LEAD);
        self.set(end - 1, &format!(" {value}"));
        true
    }

    /// Tokens below this go to `reasoning_content` (0 when the reasoning is inline).
    pub(crate) fn reasoning_field_end(&self) -> u64 {
        if self.inline {
            0
        } else {
            self.reasoning
        }
    }

    fn lookup(&self, i: u64) -> Option<&(u64, String, String)> {
        if self.overrides.is_empty() {
            return None;
        }
        self.overrides
            .binary_search_by_key(&i, |o| o.0)
            .ok()
            .map(|k| &self.overrides[k])
    }

    /// Appends the JSON-escaped text of tokens `from..from+n`.
    pub(crate) fn push_json(&self, out: &mut impl Extend<u8>, from: u64, n: u64) {
        if self.overrides.is_empty() {
            push_words(out, from, n);
            return;
        }
        for i in from..from + n {
            match self.lookup(i) {
                Some(o) => out.extend(o.2.bytes()),
                None => push_words(out, i, 1),
            }
        }
    }

    /// Raw text of tokens `from..from+n`.
    pub(crate) fn text(&self, from: u64, n: u64) -> String {
        let mut s = String::new();
        for i in from..from + n {
            match self.lookup(i) {
                Some(o) => s.push_str(&o.1),
                None => s.push_str(WORDS[(i % WORDS.len() as u64) as usize]),
            }
        }
        s
    }
}

/// Byte shape of streamed chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    /// vLLM (also the neutral and SGLang personalities): `id, object, created, model, choices`;
    /// finish_reason on the last token event; `"choices":[]` usage chunk.
    Vllm,
    /// llama.cpp `llama-server`: `choices` first, then `created, id, model,
    /// system_fingerprint, object`; role chunk `content: null`; a separate finish chunk with an
    /// empty delta (chat) or empty text (completions); `timings` on the final chunk; usage on
    /// the finish chunk for completions and in a `"choices":[]` chunk for chat.
    Llamacpp,
}

/// `system_fingerprint` of llama.cpp-dialect chunks (a llama.cpp build id).
pub(crate) const LLAMACPP_BUILD: &str = "b1-sim";

/// The fixed parts of every event of one streamed request: `head` + choices + `tail` +
/// optional `usage` / `timings` + `}`.
pub(crate) struct Frame {
    head: String,
    tail: String,
    dialect: Dialect,
    endpoint: Endpoint,
}

impl Frame {
    /// `model_json` is the JSON-encoded model name (quotes included).
    pub(crate) fn new(
        dialect: Dialect,
        endpoint: Endpoint,
        id: &str,
        created: u64,
        model_json: &str,
    ) -> Frame {
        let object = match endpoint {
            Endpoint::Chat => "chat.completion.chunk",
            Endpoint::Completion => "text_completion",
        };
        let (head, tail) = match dialect {
            Dialect::Vllm => (
                format!(
                    "data: {{\"id\":\"{id}\",\"object\":\"{object}\",\"created\":{created},\"model\":{model_json},\"choices\":["
                ),
                "]".to_string(),
            ),
            Dialect::Llamacpp => (
                "data: {\"choices\":[".to_string(),
                format!(
                    "],\"created\":{created},\"id\":\"{id}\",\"model\":{model_json},\"system_fingerprint\":\"{LLAMACPP_BUILD}\",\"object\":\"{object}\""
                ),
            ),
        };
        Frame {
            head,
            tail,
            dialect,
            endpoint,
        }
    }

    /// The chunk dialect.
    pub(crate) fn dialect(&self) -> Dialect {
        self.dialect
    }

    fn start(&self, extra: usize) -> BytesMut {
        let mut b = BytesMut::with_capacity(self.head.len() + self.tail.len() + extra);
        b.put_slice(self.head.as_bytes());
        b
    }

    /// Close the choices, add usage / timings, end the event.
    fn close(&self, mut b: BytesMut, usage: Option<Usage>, timings: Option<&Timings>) -> Bytes {
        b.put_slice(self.tail.as_bytes());
        if let Some(u) = usage {
            push_usage(&mut b, self.dialect, u, None);
        }
        if let Some(t) = timings {
            t.push(&mut b);
        }
        b.put_slice(b"}\n\n");
        b.freeze()
    }
}

/// Cumulative usage attached to a chunk: (prompt tokens, completion tokens).
pub(crate) type Usage = (u64, u64);

fn push_usage(b: &mut BytesMut, dialect: Dialect, (p, c): Usage, cached: Option<u64>) {
    match dialect {
        Dialect::Vllm => {
            let _ = write!(
                b,
                ",\"usage\":{{\"prompt_tokens\":{p},\"total_tokens\":{},\"completion_tokens\":{c}",
                p + c
            );
        }
        Dialect::Llamacpp => {
            let _ = write!(
                b,
                ",\"usage\":{{\"completion_tokens\":{c},\"prompt_tokens\":{p},\"total_tokens\":{}",
                p + c
            );
        }
    }
    if let Some(x) = cached {
        let _ = write!(b, ",\"prompt_tokens_details\":{{\"cached_tokens\":{x}}}");
    }
    b.put_u8(b'}');
}

/// llama.cpp's per-request `timings` object.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Timings {
    /// Prompt tokens served from the cache.
    pub cache_n: u64,
    /// Prompt tokens computed.
    pub prompt_n: u64,
    /// Prompt processing time (ms).
    pub prompt_ms: f64,
    /// Tokens generated.
    pub predicted_n: u64,
    /// Generation time (ms).
    pub predicted_ms: f64,
    /// Speculative decoding on: (`draft_n` proposed, `draft_n_accepted`) for this request, as
    /// llama-server adds them to `timings`.
    pub draft: Option<(u64, u64)>,
}

impl Timings {
    fn push(&self, b: &mut BytesMut) {
        let per = |ms: f64, n: u64| if n > 0 { ms / n as f64 } else { 0.0 };
        let rate = |ms: f64, n: u64| if ms > 0.0 { 1e3 * n as f64 / ms } else { 0.0 };
        let _ = write!(
            b,
            ",\"timings\":{{\"cache_n\":{},\"prompt_n\":{},\"prompt_ms\":{:.3},\"prompt_per_token_ms\":{},\"prompt_per_second\":{},\"predicted_n\":{},\"predicted_ms\":{:.3},\"predicted_per_token_ms\":{},\"predicted_per_second\":{}}}",
            self.cache_n,
            self.prompt_n,
            self.prompt_ms,
            per(self.prompt_ms, self.prompt_n),
            rate(self.prompt_ms, self.prompt_n),
            self.predicted_n,
            self.predicted_ms,
            per(self.predicted_ms, self.predicted_n),
            rate(self.predicted_ms, self.predicted_n),
        );
        if let Some((n, acc)) = self.draft {
            // inside the object: drop its closing brace, append, close again
            b.truncate(b.len() - 1);
            let _ = write!(b, ",\"draft_n\":{n},\"draft_n_accepted\":{acc}}}");
        }
    }
}

/// The chat role-only first chunk (vLLM: `content:""`; llama.cpp: `content:null`, no usage).
pub(crate) fn role_event(frame: &Frame, usage: Option<Usage>) -> Bytes {
    let mut b = frame.start(200);
    match frame.dialect {
        Dialect::Vllm => {
            b.put_slice(
                b"{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}",
            );
            frame.close(b, usage, None)
        }
        Dialect::Llamacpp => {
            b.put_slice(
                b"{\"finish_reason\":null,\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":null}}",
            );
            frame.close(b, None, None)
        }
    }
}

/// One token-carrying event: tokens `from..from+n` of `script`, of which those of a
/// non-inline reasoning phase go to `delta.reasoning_content` (chat only). In the llama.cpp dialect `finish` must be `None`
/// (the finish reason comes in [`finish_event`]).
pub(crate) struct TokenEvent<'a> {
    pub frame: &'a Frame,
    pub from: u64,
    pub n: u64,
    pub script: &'a Script,
    pub finish: Option<&'a str>,
    pub usage: Option<Usage>,
}

impl TokenEvent<'_> {
    pub(crate) fn encode(&self) -> Bytes {
        let frame = self.frame;
        let mut b = frame.start(160 + 12 * self.n as usize);
        let end = self.from + self.n;
        let llama = frame.dialect == Dialect::Llamacpp;
        match frame.endpoint {
            Endpoint::Chat => {
                if llama {
                    b.put_slice(b"{\"finish_reason\":null,\"index\":0,\"delta\":{");
                } else {
                    b.put_slice(b"{\"index\":0,\"delta\":{");
                }
                let r_end = end.min(self.script.reasoning_field_end().max(self.from));
                if r_end > self.from {
                    b.put_slice(b"\"reasoning_content\":\"");
                    self.script.push_json(&mut b, self.from, r_end - self.from);
                    b.put_u8(b'"');
                    if end > r_end {
                        b.put_u8(b',');
                    }
                }
                if end > r_end {
                    b.put_slice(b"\"content\":\"");
                    self.script.push_json(&mut b, r_end, end - r_end);
                    b.put_u8(b'"');
                }
                if llama {
                    b.put_slice(b"}}");
                    return frame.close(b, None, None);
                }
                b.put_slice(b"},\"logprobs\":null,");
            }
            Endpoint::Completion => {
                if llama {
                    b.put_slice(b"{\"text\":\"");
                    self.script.push_json(&mut b, self.from, self.n);
                    b.put_slice(b"\",\"index\":0,\"logprobs\":null,\"finish_reason\":null}");
                    return frame.close(b, None, None);
                }
                b.put_slice(b"{\"index\":0,\"text\":\"");
                self.script.push_json(&mut b, self.from, self.n);
                b.put_slice(b"\",\"logprobs\":null,");
            }
        }
        match self.finish {
            Some(f) => {
                let _ = write!(b, "\"finish_reason\":\"{f}\",\"stop_reason\":null}}");
            }
            None if frame.endpoint == Endpoint::Completion => {
                b.put_slice(b"\"finish_reason\":null,\"stop_reason\":null}");
            }
            None => b.put_slice(b"\"finish_reason\":null}"),
        }
        frame.close(b, self.usage, None)
    }
}

/// llama.cpp dialect: the separate last choice chunk carrying the finish reason (empty delta
/// for chat, empty text for completions), with usage (completions only) and timings when
/// given.
pub(crate) fn finish_event(
    frame: &Frame,
    reason: &str,
    usage: Option<(Usage, u64)>,
    timings: Option<&Timings>,
) -> Bytes {
    let mut b = frame.start(400);
    match frame.endpoint {
        Endpoint::Chat => {
            let _ = write!(
                b,
                "{{\"finish_reason\":\"{reason}\",\"index\":0,\"delta\":{{}}}}"
            );
        }
        Endpoint::Completion => {
            let _ = write!(
                b,
                "{{\"text\":\"\",\"index\":0,\"logprobs\":null,\"finish_reason\":\"{reason}\"}}"
            );
        }
    }
    b.put_slice(frame.tail.as_bytes());
    if let Some((u, cached)) = usage {
        push_usage(&mut b, frame.dialect, u, Some(cached));
    }
    if let Some(t) = timings {
        t.push(&mut b);
    }
    b.put_slice(b"}\n\n");
    b.freeze()
}

/// The final `"choices":[]` usage chunk (with `prompt_tokens_details.cached_tokens`, and
/// llama.cpp `timings` when given).
pub(crate) fn usage_event(
    frame: &Frame,
    usage: Usage,
    cached: u64,
    timings: Option<&Timings>,
) -> Bytes {
    let mut b = frame.start(400);
    b.put_slice(frame.tail.as_bytes());
    push_usage(&mut b, frame.dialect, usage, Some(cached));
    if let Some(t) = timings {
        t.push(&mut b);
    }
    b.put_slice(b"}\n\n");
    b.freeze()
}

/// Everything a non-streaming response needs.
pub(crate) struct UnaryResponse<'a> {
    pub endpoint: Endpoint,
    pub id: &'a str,
    pub created: u64,
    pub model: &'a str,
    pub reasoning: &'a str,
    pub content: &'a str,
    pub finish: &'a str,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub cached_tokens: u64,
}

impl UnaryResponse<'_> {
    pub(crate) fn encode(&self) -> Bytes {
        let usage = serde_json::json!({
            "prompt_tokens": self.prompt_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
            "completion_tokens": self.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": self.cached_tokens},
        });
        let v = match self.endpoint {
            Endpoint::Chat => {
                let mut message = serde_json::json!({"role": "assistant", "content": self.content});
                if !self.reasoning.is_empty() {
                    message["reasoning_content"] = self.reasoning.into();
                }
                serde_json::json!({
                    "id": self.id,
                    "object": "chat.completion",
                    "created": self.created,
                    "model": self.model,
                    "choices": [{
                        "index": 0,
                        "message": message,
                        "logprobs": null,
                        "finish_reason": self.finish,
                        "stop_reason": null,
                    }],
                    "usage": usage,
                })
            }
            Endpoint::Completion => serde_json::json!({
                "id": self.id,
                "object": "text_completion",
                "created": self.created,
                "model": self.model,
                "choices": [{
                    "index": 0,
                    "text": self.content,
                    "logprobs": null,
                    "finish_reason": self.finish,
                    "stop_reason": null,
                }],
                "usage": usage,
            }),
        };
        Bytes::from(v.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokenizer::count_tokens;

    fn payload(b: &Bytes) -> serde_json::Value {
        let s = std::str::from_utf8(b).expect("utf8");
        let s = s.strip_prefix("data: ").expect("prefix");
        let s = s.strip_suffix("\n\n").expect("suffix");
        serde_json::from_str(s).expect("json")
    }

    #[test]
    fn words_are_one_token_each() {
        for w in WORDS {
            assert_eq!(count_tokens(w), 1, "{w}");
        }
        assert_eq!(count_tokens(&words(0, 50)), 50);
    }

    #[test]
    fn chat_event_splits_reasoning() {
        let p = Frame::new(Dialect::Vllm, Endpoint::Chat, "chatcmpl-sim-1", 5, "\"m\"");
        let ev = TokenEvent {
            frame: &p,
            from: 1,
            n: 3,
            script: &Script::new(2, false),
            finish: Some("length"),
            usage: Some((7, 4)),
        }
        .encode();
        let v = payload(&ev);
        assert_eq!(v["id"], "chatcmpl-sim-1");
        assert_eq!(v["object"], "chat.completion.chunk");
        assert_eq!(v["model"], "m");
        let d = &v["choices"][0]["delta"];
        assert_eq!(d["reasoning_content"], " ipsum");
        assert_eq!(d["content"], " dolor sit");
        assert_eq!(v["choices"][0]["finish_reason"], "length");
        assert_eq!(v["usage"]["total_tokens"], 11);
        let r = payload(&role_event(&p, None));
        assert_eq!(r["choices"][0]["delta"]["role"], "assistant");
        assert!(r.get("usage").is_none());
        let u = payload(&usage_event(&p, (7, 4), 3, None));
        assert_eq!(u["choices"], serde_json::json!([]));
        assert_eq!(u["usage"]["prompt_tokens_details"]["cached_tokens"], 3);
    }

    #[test]
    fn script_places_answers_and_think_markers() {
        // 6 reasoning tokens inline: <think> w w w w </think>; answer mention in 1..5.
        let mut sc = Script::new(6, true);
        sc.mention_in_reasoning("42");
        assert!(sc.final_answer_at(10, "43"));
        assert_eq!(sc.reasoning_field_end(), 0);
        let all = sc.text(0, 10);
        assert_eq!(
            all,
            format!(
                "<think>{}\nSo the answer is 42.</think>{}\nFinal answer: 43",
                WORDS[1],
                words(6, 2)
            )
        );
        // JSON escaping of the line breaks.
        let mut b = Vec::new();
        sc.push_json(&mut b, 8, 2);
        assert_eq!(String::from_utf8(b).unwrap(), "\\nFinal answer: 43");
        // No room for the answer line inside a short response: nothing changes.
        let mut short = Script::new(4, false);
        assert!(!short.final_answer_at(5, "x"));
        assert_eq!(short.text(0, 5), words(0, 5));
        // Reasoning field split (not inline): answer mention in the last three reasoning tokens.
        let mut r = Script::new(5, false);
        r.mention_in_reasoning("Estonia");
        assert_eq!(r.reasoning_field_end(), 5);
        assert_eq!(
            r.text(0, 5),
            format!("{}\nSo the answer is Estonia.", words(0, 2))
        );
        let p = Frame::new(Dialect::Vllm, Endpoint::Chat, "chatcmpl-sim-1", 5, "\"m\"");
        let v = payload(
            &TokenEvent {
                frame: &p,
                from: 3,
                n: 4,
                script: &r,
                finish: None,
                usage: None,
            }
            .encode(),
        );
        assert_eq!(v["choices"][0]["delta"]["reasoning_content"], " Estonia.");
        assert_eq!(v["choices"][0]["delta"]["content"], words(5, 2));
    }

    #[test]
    fn completion_event_shape() {
        let p = Frame::new(
            Dialect::Vllm,
            Endpoint::Completion,
            "cmpl-sim-2",
            5,
            "\"m\"",
        );
        let bytes = TokenEvent {
            frame: &p,
            from: 0,
            n: 2,
            script: &Script::default(),
            finish: None,
            usage: None,
        }
        .encode();
        // byte-exact vLLM shape
        assert_eq!(
            std::str::from_utf8(&bytes).expect("utf8"),
            "data: {\"id\":\"cmpl-sim-2\",\"object\":\"text_completion\",\"created\":5,\"model\":\"m\",\"choices\":[{\"index\":0,\"text\":\" lorem ipsum\",\"logprobs\":null,\"finish_reason\":null,\"stop_reason\":null}]}\n\n"
        );
        let v = payload(&bytes);
        assert_eq!(v["object"], "text_completion");
        assert_eq!(v["choices"][0]["text"], " lorem ipsum");
        assert!(v["choices"][0]["finish_reason"].is_null());
        assert!(v.get("usage").is_none());
        let e: serde_json::Value = serde_json::from_slice(
            MIDSTREAM_ERROR
                .strip_prefix(b"data: ")
                .expect("prefix")
                .trim_ascii_end(),
        )
        .expect("json");
        assert_eq!(e["error"]["code"], 500);
    }

    #[test]
    fn llamacpp_dialect_shapes() {
        let chat = Frame::new(
            Dialect::Llamacpp,
            Endpoint::Chat,
            "chatcmpl-sim-3",
            9,
            "\"m\"",
        );
        let role = std::str::from_utf8(&role_event(&chat, Some((1, 0))))
            .expect("utf8")
            .to_string();
        assert!(role.starts_with("data: {\"choices\":[{\"finish_reason\":null,\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":null}}],\"created\":9,\"id\":\"chatcmpl-sim-3\""));
        assert!(!role.contains("usage"));
        let v = payload(
            &TokenEvent {
                frame: &chat,
                from: 0,
                n: 2,
                script: &Script::default(),
                finish: None,
                usage: None,
            }
            .encode(),
        );
        assert_eq!(v["choices"][0]["delta"]["content"], " lorem ipsum");
        assert!(v["choices"][0]["finish_reason"].is_null());
        assert_eq!(v["system_fingerprint"], LLAMACPP_BUILD);
        let t = Timings {
            cache_n: 16,
            prompt_n: 4,
            prompt_ms: 2.0,
            predicted_n: 10,
            predicted_ms: 100.0,
            draft: None,
        };
        let f = payload(&finish_event(&chat, "length", None, Some(&t)));
        assert_eq!(f["choices"][0]["delta"], serde_json::json!({}));
        assert_eq!(f["choices"][0]["finish_reason"], "length");
        assert_eq!(f["timings"]["predicted_per_second"], 100.0);
        assert_eq!(f["timings"]["prompt_n"], 4);
        let u = payload(&usage_event(&chat, (20, 10), 16, Some(&t)));
        assert_eq!(u["choices"], serde_json::json!([]));
        assert_eq!(u["usage"]["completion_tokens"], 10);
        assert_eq!(u["timings"]["cache_n"], 16);

        let cmpl = Frame::new(
            Dialect::Llamacpp,
            Endpoint::Completion,
            "cmpl-sim-4",
            9,
            "\"m\"",
        );
        let f = payload(&finish_event(&cmpl, "length", Some(((2, 8), 0)), Some(&t)));
        assert_eq!(f["choices"][0]["text"], "");
        assert_eq!(f["choices"][0]["finish_reason"], "length");
        assert_eq!(f["usage"]["total_tokens"], 10);
        assert_eq!(f["object"], "text_completion");
        assert!(f["timings"].is_object());
    }
}
