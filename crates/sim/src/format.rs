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
pub(crate) fn words(from: u64, n: u64) -> String {
    let mut s = String::new();
    for i in from..from + n {
        s.push_str(WORDS[(i % WORDS.len() as u64) as usize]);
    }
    s
}

/// `data: {"id":..,"object":..,"created":..,"model":..,"choices":[` — shared by every event of
/// one streamed request. `model_json` is the JSON-encoded model name (quotes included).
pub(crate) fn chunk_prefix(endpoint: Endpoint, id: &str, created: u64, model_json: &str) -> String {
    let object = match endpoint {
        Endpoint::Chat => "chat.completion.chunk",
        Endpoint::Completion => "text_completion",
    };
    format!(
        "data: {{\"id\":\"{id}\",\"object\":\"{object}\",\"created\":{created},\"model\":{model_json},\"choices\":["
    )
}

/// Cumulative usage attached to a chunk: (prompt tokens, completion tokens).
pub(crate) type Usage = (u64, u64);

fn push_usage(b: &mut BytesMut, (p, c): Usage, cached: Option<u64>) {
    let _ = write!(
        b,
        ",\"usage\":{{\"prompt_tokens\":{p},\"total_tokens\":{},\"completion_tokens\":{c}",
        p + c
    );
    if let Some(x) = cached {
        let _ = write!(b, ",\"prompt_tokens_details\":{{\"cached_tokens\":{x}}}");
    }
    b.put_u8(b'}');
}

fn close(mut b: BytesMut, usage: Option<Usage>) -> Bytes {
    b.put_u8(b']');
    if let Some(u) = usage {
        push_usage(&mut b, u, None);
    }
    b.put_slice(b"}\n\n");
    b.freeze()
}

/// The chat role-only first chunk.
pub(crate) fn role_event(prefix: &str, usage: Option<Usage>) -> Bytes {
    let mut b = BytesMut::with_capacity(prefix.len() + 200);
    b.put_slice(prefix.as_bytes());
    b.put_slice(
        b"{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}",
    );
    close(b, usage)
}

/// One token-carrying event: tokens `from..from+n`, of which those below `reasoning_tokens` go
/// to `delta.reasoning_content` (chat only).
pub(crate) struct TokenEvent<'a> {
    pub prefix: &'a str,
    pub endpoint: Endpoint,
    pub from: u64,
    pub n: u64,
    pub reasoning_tokens: u64,
    pub finish: Option<&'a str>,
    pub usage: Option<Usage>,
}

impl TokenEvent<'_> {
    pub(crate) fn encode(&self) -> Bytes {
        let mut b = BytesMut::with_capacity(self.prefix.len() + 160 + 12 * self.n as usize);
        b.put_slice(self.prefix.as_bytes());
        let end = self.from + self.n;
        match self.endpoint {
            Endpoint::Chat => {
                b.put_slice(b"{\"index\":0,\"delta\":{");
                let r_end = end.min(self.reasoning_tokens.max(self.from));
                if r_end > self.from {
                    b.put_slice(b"\"reasoning_content\":\"");
                    push_words(&mut b, self.from, r_end - self.from);
                    b.put_u8(b'"');
                    if end > r_end {
                        b.put_u8(b',');
                    }
                }
                if end > r_end {
                    b.put_slice(b"\"content\":\"");
                    push_words(&mut b, r_end, end - r_end);
                    b.put_u8(b'"');
                }
                b.put_slice(b"},\"logprobs\":null,");
            }
            Endpoint::Completion => {
                b.put_slice(b"{\"index\":0,\"text\":\"");
                push_words(&mut b, self.from, self.n);
                b.put_slice(b"\",\"logprobs\":null,");
            }
        }
        match self.finish {
            Some(f) => {
                let _ = write!(b, "\"finish_reason\":\"{f}\",\"stop_reason\":null}}");
            }
            None if self.endpoint == Endpoint::Completion => {
                b.put_slice(b"\"finish_reason\":null,\"stop_reason\":null}");
            }
            None => b.put_slice(b"\"finish_reason\":null}"),
        }
        close(b, self.usage)
    }
}

/// The final `"choices":[]` usage chunk (with `prompt_tokens_details.cached_tokens`).
pub(crate) fn usage_event(prefix: &str, usage: Usage, cached: u64) -> Bytes {
    let mut b = BytesMut::with_capacity(prefix.len() + 160);
    b.put_slice(prefix.as_bytes());
    b.put_u8(b']');
    push_usage(&mut b, usage, Some(cached));
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
        let p = chunk_prefix(Endpoint::Chat, "chatcmpl-sim-1", 5, "\"m\"");
        let ev = TokenEvent {
            prefix: &p,
            endpoint: Endpoint::Chat,
            from: 1,
            n: 3,
            reasoning_tokens: 2,
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
        let u = payload(&usage_event(&p, (7, 4), 3));
        assert_eq!(u["choices"], serde_json::json!([]));
        assert_eq!(u["usage"]["prompt_tokens_details"]["cached_tokens"], 3);
    }

    #[test]
    fn completion_event_shape() {
        let p = chunk_prefix(Endpoint::Completion, "cmpl-sim-2", 5, "\"m\"");
        let v = payload(
            &TokenEvent {
                prefix: &p,
                endpoint: Endpoint::Completion,
                from: 0,
                n: 2,
                reasoning_tokens: 0,
                finish: None,
                usage: None,
            }
            .encode(),
        );
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
}
