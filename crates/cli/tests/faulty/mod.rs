//! A small misbehaving OpenAI-compatible server on 127.0.0.1 for fault tests.
//!
//! Plain `std::net` threads, one per connection, `Connection: close` after every answer.
//! `GET /v1/models` lists model `m`; `POST /tokenize` counts (characters of the message
//! contents / 4) + 10 tokens (at least `min_prompt_tokens`); every other GET is a 404.
//! Completion requests get the healthy stream (a role chunk, then `max_tokens` one-token chunks
//! 5 ms apart, each with cumulative usage, a finish chunk and `[DONE]`) for the first
//! `healthy_first` requests, then the configured [`Fault`].

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What the server does to completion requests after the healthy ones.
#[derive(Clone, Debug)]
pub enum Fault {
    /// Answers correctly.
    Healthy,
    /// Reads the request and never answers.
    HangBeforeHeaders,
    /// Sends the SSE response head, then nothing.
    HangAfterHeaders,
    /// Streams `tokens` tokens, then goes silent (connection kept open).
    StallAfter { tokens: u64 },
    /// Streams tokens forever, ignoring max_tokens.
    Endless,
    /// Streams tokens forever, one every `every_ms`, ignoring max_tokens (a trickle inside the
    /// stream idle timeout).
    Trickle { every_ms: u64 },
    /// After three tokens, usage.completion_tokens jumps to 1,000,000.
    AbsurdUsage,
    /// Healthy stream, but usage.prompt_tokens is this.
    PromptTokens(u64),
    /// A plain JSON chat completion (no SSE) to the stream request.
    PlainJson,
    /// `per_chunk` tokens per chunk (`"tok "` each), 2 ms apart, up to max_tokens, no usage at
    /// all, then a `length` finish and `[DONE]`.
    NoUsageMultiToken { per_chunk: u64 },
    /// HTTP 429 for the next `times` completion requests (with `Retry-After: s` when given),
    /// healthy after that.
    TooMany {
        times: usize,
        retry_after: Option<u64>,
    },
    /// Streams `burst` tokens 5 ms apart, is silent for `pause_ms`, streams the rest.
    PauseMidStream { burst: u64, pause_ms: u64 },
    /// Like `PauseMidStream`, but sends an SSE comment (`: ping`) every 200 ms of the pause.
    PingPause { burst: u64, pause_ms: u64 },
    /// A healthy stream with this many tokens more than max_tokens.
    ExtraTokens(u64),
    /// A healthy stream up to `data: [DONE]`, then the body is held open (no chunked
    /// terminator, connection not closed).
    HoldAfterDone,
    /// A healthy stream up to `data: [DONE]`; the body ends (terminator, close) `ms` later.
    EndLateAfterDone { ms: u64 },
    /// A healthy stream up to `data: [DONE]`, then `extra` more token events (usage growing
    /// past max_tokens) and a second `[DONE]`, then the terminator.
    DataAfterDone { extra: u64 },
    /// The SSE head says `Content-Encoding: gzip` (never asked for); the body is gzip bytes.
    Gzip,
    /// A healthy stream whose every chunk is pretty-printed JSON over several `data:` lines.
    MultiLineData,
    /// Token chunks whose usage goes down to 0: the first says completion_tokens 0 and so do
    /// all later ones, the finish chunk too (tokens arrived, usage never counted them).
    UsageZero,
    /// Token chunks whose usage counts down (max_tokens, …, 1) and a finish chunk that says 1:
    /// not cumulative, so the whole count on the first chunk says nothing about arrival times.
    UsageCountsDown,
    /// Token chunks whose usage.completion_tokens is negative (-5): no token count at all.
    UsageNegative,
    /// One token, then an SSE comment (`: ping`) every 200 ms, never a second token or the end.
    PingsAfterFirstToken,
    /// An answer `Final answer: <the request's bearer key>`, three key characters per chunk.
    EchoKeyInAnswer,
    /// 40 one-byte chunks whose continuous usage grows by 60 per chunk (2,400 tokens claimed for
    /// 40 bytes of text).
    InflatedUsage,
    /// `100 Continue` and `103 Early Hints` interim heads (the second with a `Link` header),
    /// then a healthy stream (RFC 9110 §15.2: a client skips them).
    InterimHeads,
    /// Ten role-only chunks, a finish chunk and a usage-only chunk that says max_tokens: no
    /// text at all (break-it round 6, `fewrole`: `ok` at 11,200 tok/s).
    RoleChunksThenUsage,
    /// Token chunks with continuous usage 1, 2, …, max_tokens / 8, then a finish chunk whose
    /// usage says max_tokens: tokens no chunk carried (break-it round 3, `usage_jump_final`).
    UsageJumpAtEnd,
    /// Token chunks without end whose usage stays at 1 (the count never passes max_tokens).
    EndlessUsageStuck,
    /// This HTTP status (with an OpenAI error body) for every completion request.
    Status(u16),
    /// A healthy stream written all at once (one write: TTFT = E2E, no ITL).
    SingleWrite,
    /// Errors that quote the request's `Authorization` header: an SSE stream whose first event
    /// is an error object with it (`in_stream`), else HTTP 500 with it in the OpenAI error body.
    EchoKey { in_stream: bool },
}

/// A running faulty server.
pub struct Faulty {
    /// Port on 127.0.0.1.
    pub port: u16,
    /// Completion requests received so far.
    pub completions: Arc<AtomicUsize>,
}

impl Faulty {
    /// `http://127.0.0.1:port`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

/// Settings of a faulty server.
#[derive(Clone, Debug)]
pub struct Config {
    /// The fault.
    pub fault: Fault,
    /// Completion requests answered healthily before the fault starts (the startup JIT probe is
    /// the first one).
    pub healthy_first: usize,
    /// Smallest `/tokenize` count (a base prompt of this size).
    pub min_prompt_tokens: u64,
    /// Answer `/tokenize` with 404 (prompts are then sized by calibration requests, which are
    /// completion requests).
    pub no_tokenize: bool,
    /// `/v1/models` lists these ids instead of `m` (hostile or huge lists).
    pub model_ids: Option<Arc<Vec<String>>>,
    /// `GET /metrics` answers an endless page of Prometheus comments (else 404).
    pub endless_metrics: bool,
}

impl Config {
    /// `fault` after `healthy_first` healthy completions.
    pub fn new(fault: Fault, healthy_first: usize) -> Self {
        Config {
            fault,
            healthy_first,
            min_prompt_tokens: 0,
            no_tokenize: false,
            model_ids: None,
            endless_metrics: false,
        }
    }
}

/// Starts the server on an ephemeral port.
pub fn start(cfg: Config) -> Faulty {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().unwrap().port();
    let completions = Arc::new(AtomicUsize::new(0));
    let count = completions.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let cfg = cfg.clone();
            let count = count.clone();
            std::thread::spawn(move || {
                let _ = serve(conn, &cfg, &count);
            });
        }
    });
    Faulty { port, completions }
}

struct Request {
    method: String,
    path: String,
    /// The `Authorization` header's value (empty when none).
    auth: String,
    body: String,
}

fn read_request(s: &mut TcpStream) -> std::io::Result<Option<Request>> {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 65536];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = s.read(&mut tmp)?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&tmp[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let first = head.lines().next().unwrap_or_default();
    let mut parts = first.split_whitespace();
    let method = parts.next().unwrap_or_default().to_string();
    let path = parts.next().unwrap_or_default().to_string();
    let header = |name: &str| {
        head.lines()
            .skip(1)
            .filter_map(|l| l.split_once(':'))
            .find(|(k, _)| k.trim().eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim().to_string())
    };
    let len: usize = header("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let auth = header("authorization").unwrap_or_default();
    while buf.len() < head_end + len {
        let n = s.read(&mut tmp)?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&tmp[..n]);
    }
    let body = String::from_utf8_lossy(&buf[head_end..]).to_string();
    Ok(Some(Request {
        method,
        path,
        auth,
        body,
    }))
}

fn respond(s: &mut TcpStream, status: &str, extra: &str, ctype: &str, body: &str) {
    let _ = write!(
        s,
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n{extra}\r\n{body}",
        body.len()
    );
    let _ = s.flush();
}

fn sse_head(s: &mut TcpStream) -> std::io::Result<()> {
    write!(
        s,
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    )?;
    s.flush()
}

fn chunk(s: &mut TcpStream, data: &str) -> std::io::Result<()> {
    write!(s, "{:x}\r\n{data}\r\n", data.len())?;
    s.flush()
}

fn event(s: &mut TcpStream, json: &str) -> std::io::Result<()> {
    chunk(s, &format!("data: {json}\n\n"))
}

fn token(s: &mut TcpStream, prompt: u64, completion: u64) -> std::io::Result<()> {
    event(
        s,
        &format!(
            r#"{{"id":"x","object":"chat.completion.chunk","choices":[{{"index":0,"delta":{{"content":"tok "}},"finish_reason":null}}],"usage":{{"prompt_tokens":{prompt},"completion_tokens":{completion},"total_tokens":{}}}}}"#,
            prompt + completion
        ),
    )
}

fn finish(s: &mut TcpStream, prompt: u64, completion: u64) -> std::io::Result<()> {
    event(
        s,
        &format!(
            r#"{{"id":"x","object":"chat.completion.chunk","choices":[{{"index":0,"delta":{{}},"finish_reason":"length"}}],"usage":{{"prompt_tokens":{prompt},"completion_tokens":{completion},"total_tokens":{}}}}}"#,
            prompt + completion
        ),
    )?;
    event(s, "[DONE]")?;
    chunk(s, "")
}

/// One token chunk pretty-printed over several `data:` lines (one event, WHATWG joins them).
fn token_multiline(s: &mut TcpStream, prompt: u64, completion: u64) -> std::io::Result<()> {
    chunk(
        s,
        &format!(
            "data: {{\ndata:   \"id\": \"x\",\ndata:   \"choices\": [{{\"index\": 0, \"delta\": {{\"content\": \"tok \"}}, \"finish_reason\": null}}],\ndata:   \"usage\": {{\"prompt_tokens\": {prompt}, \"completion_tokens\": {completion}}}\ndata: }}\n\n"
        ),
    )
}

fn hang() {
    std::thread::sleep(Duration::from_secs(3600));
}

/// Characters of every `"content"` string of the request / 4 + 10.
fn count_tokens(body: &str, min: u64) -> u64 {
    let v: serde_json::Value = serde_json::from_str(body).unwrap_or_default();
    let mut chars = 0usize;
    if let Some(msgs) = v.get("messages").and_then(|m| m.as_array()) {
        for m in msgs {
            chars += m
                .get("content")
                .and_then(|c| c.as_str())
                .map_or(0, str::len);
        }
    }
    if let Some(p) = v.get("prompt").and_then(|p| p.as_str()) {
        chars += p.len();
    }
    (chars as u64 / 4 + 10).max(min)
}

fn serve(mut s: TcpStream, cfg: &Config, count: &AtomicUsize) -> std::io::Result<()> {
    let Some(req) = read_request(&mut s)? else {
        return Ok(());
    };
    match (req.method.as_str(), req.path.as_str()) {
        ("GET", "/v1/models") if cfg.model_ids.is_some() => {
            let ids = cfg.model_ids.as_ref().unwrap();
            let data: Vec<serde_json::Value> = ids
                .iter()
                .map(|i| serde_json::json!({"id": i, "object": "model", "owned_by": "faulty"}))
                .collect();
            let body = serde_json::json!({"object": "list", "data": data}).to_string();
            respond(&mut s, "200 OK", "", "application/json", &body);
            return Ok(());
        }
        ("GET", "/metrics") if cfg.endless_metrics => {
            write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n"
            )?;
            let data = "# HELP x y\n".repeat(5000);
            let c = format!("{:x}\r\n{data}\r\n", data.len());
            while s.write_all(c.as_bytes()).is_ok() {}
            return Ok(());
        }
        ("GET", "/v1/models") => {
            respond(
                &mut s,
                "200 OK",
                "",
                "application/json",
                r#"{"object":"list","data":[{"id":"m","object":"model","owned_by":"faulty"}]}"#,
            );
            return Ok(());
        }
        ("POST", "/tokenize") if !cfg.no_tokenize => {
            let n = count_tokens(&req.body, cfg.min_prompt_tokens);
            respond(
                &mut s,
                "200 OK",
                "",
                "application/json",
                &format!(r#"{{"count":{n},"max_model_len":131072}}"#),
            );
            return Ok(());
        }
        ("POST", p) if p.ends_with("/completions") => {}
        _ => {
            respond(&mut s, "404 Not Found", "", "text/plain", "not found");
            return Ok(());
        }
    }
    let v: serde_json::Value = serde_json::from_str(&req.body).unwrap_or_default();
    let max_tokens = v.get("max_tokens").and_then(|m| m.as_u64()).unwrap_or(16);
    let prompt = count_tokens(&req.body, cfg.min_prompt_tokens);
    let n = count.fetch_add(1, Ordering::SeqCst);
    let fault = if n < cfg.healthy_first {
        Fault::Healthy
    } else {
        cfg.fault.clone()
    };
    if v.get("stream").and_then(|s| s.as_bool()) != Some(true)
        && !matches!(fault, Fault::HangBeforeHeaders)
    {
        // calibration (non-streaming)
        respond(
            &mut s,
            "200 OK",
            "",
            "application/json",
            &format!(
                r#"{{"id":"x","object":"chat.completion","choices":[{{"index":0,"message":{{"role":"assistant","content":"a"}},"finish_reason":"length"}}],"usage":{{"prompt_tokens":{prompt},"completion_tokens":1,"total_tokens":1}}}}"#
            ),
        );
        return Ok(());
    }
    let healthy_n = |s: &mut TcpStream, prompt: u64, n: u64| -> std::io::Result<()> {
        sse_head(s)?;
        for k in 1..=n {
            token(s, prompt, k)?;
            std::thread::sleep(Duration::from_millis(5));
        }
        finish(s, prompt, n)
    };
    let healthy = |s: &mut TcpStream, prompt: u64| healthy_n(s, prompt, max_tokens);
    match fault {
        Fault::Healthy => healthy(&mut s, prompt)?,
        Fault::InterimHeads => {
            write!(
                s,
                "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"
            )?;
            s.flush()?;
            std::thread::sleep(Duration::from_millis(5));
            healthy(&mut s, prompt)?
        }
        Fault::HangBeforeHeaders => hang(),
        Fault::HangAfterHeaders => {
            sse_head(&mut s)?;
            hang();
        }
        Fault::StallAfter { tokens } => {
            sse_head(&mut s)?;
            for k in 1..=tokens {
                token(&mut s, prompt, k)?;
                std::thread::sleep(Duration::from_millis(5));
            }
            hang();
        }
        Fault::Endless => {
            sse_head(&mut s)?;
            let mut k = 0;
            loop {
                k += 1;
                token(&mut s, prompt, k)?;
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        Fault::Trickle { every_ms } => {
            sse_head(&mut s)?;
            let mut k = 0;
            loop {
                k += 1;
                token(&mut s, prompt, k)?;
                std::thread::sleep(Duration::from_millis(every_ms));
            }
        }
        Fault::AbsurdUsage => {
            sse_head(&mut s)?;
            for k in 1..=3 {
                token(&mut s, prompt, k)?;
            }
            token(&mut s, prompt, 1_000_000)?;
            finish(&mut s, prompt, 1_000_000)?;
        }
        Fault::PromptTokens(p) => healthy(&mut s, p)?,
        Fault::PlainJson => respond(
            &mut s,
            "200 OK",
            "",
            "application/json",
            &format!(
                r#"{{"id":"x","object":"chat.completion","choices":[{{"index":0,"message":{{"role":"assistant","content":"hello"}},"finish_reason":"length"}}],"usage":{{"prompt_tokens":{prompt},"completion_tokens":{max_tokens},"total_tokens":1}}}}"#
            ),
        ),
        Fault::TooMany { times, retry_after } => {
            if n < cfg.healthy_first + times {
                let extra = retry_after
                    .map(|r| format!("Retry-After: {r}\r\n"))
                    .unwrap_or_default();
                respond(
                    &mut s,
                    "429 Too Many Requests",
                    &extra,
                    "application/json",
                    r#"{"error":{"message":"rate limit exceeded","type":"rate_limit"}}"#,
                );
            } else {
                healthy(&mut s, prompt)?;
            }
        }
        Fault::ExtraTokens(extra) => healthy_n(&mut s, prompt, max_tokens + extra)?,
        Fault::HoldAfterDone | Fault::EndLateAfterDone { .. } | Fault::DataAfterDone { .. } => {
            sse_head(&mut s)?;
            for k in 1..=max_tokens {
                token(&mut s, prompt, k)?;
                std::thread::sleep(Duration::from_millis(5));
            }
            event(
                &mut s,
                &format!(
                    r#"{{"id":"x","object":"chat.completion.chunk","choices":[{{"index":0,"delta":{{}},"finish_reason":"length"}}],"usage":{{"prompt_tokens":{prompt},"completion_tokens":{max_tokens}}}}}"#
                ),
            )?;
            event(&mut s, "[DONE]")?;
            match fault {
                Fault::HoldAfterDone => hang(),
                Fault::EndLateAfterDone { ms } => {
                    std::thread::sleep(Duration::from_millis(ms));
                    chunk(&mut s, "")?;
                }
                Fault::DataAfterDone { extra } => {
                    for k in 1..=extra {
                        token(&mut s, prompt, max_tokens + k)?;
                    }
                    event(&mut s, "[DONE]")?;
                    chunk(&mut s, "")?;
                }
                _ => unreachable!(),
            }
        }
        Fault::Gzip => {
            write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Encoding: gzip\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
            )?;
            // gzip magic and junk: not SSE without decoding
            let body = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03\xabV*\xc9\xcf";
            write!(s, "{:x}\r\n", body.len())?;
            s.write_all(body)?;
            write!(s, "\r\n0\r\n\r\n")?;
            s.flush()?;
        }
        Fault::MultiLineData => {
            sse_head(&mut s)?;
            for k in 1..=max_tokens {
                token_multiline(&mut s, prompt, k)?;
                std::thread::sleep(Duration::from_millis(5));
            }
            finish(&mut s, prompt, max_tokens)?;
        }
        Fault::UsageZero => {
            sse_head(&mut s)?;
            for _ in 1..=max_tokens {
                token(&mut s, prompt, 0)?;
                std::thread::sleep(Duration::from_millis(5));
            }
            finish(&mut s, prompt, 0)?;
        }
        Fault::UsageCountsDown => {
            sse_head(&mut s)?;
            for k in 1..=max_tokens {
                token(&mut s, prompt, max_tokens - k + 1)?;
                std::thread::sleep(Duration::from_millis(5));
            }
            finish(&mut s, prompt, 1)?;
        }
        Fault::UsageJumpAtEnd => {
            sse_head(&mut s)?;
            for k in 1..=(max_tokens / 8).max(2) {
                token(&mut s, prompt, k)?;
                std::thread::sleep(Duration::from_millis(5));
            }
            finish(&mut s, prompt, max_tokens)?;
        }
        Fault::InflatedUsage => {
            sse_head(&mut s)?;
            for k in 1..=40u64 {
                event(
                    &mut s,
                    &format!(
                        r#"{{"id":"x","object":"chat.completion.chunk","choices":[{{"index":0,"delta":{{"content":"a"}},"finish_reason":null}}],"usage":{{"prompt_tokens":{prompt},"completion_tokens":{}}}}}"#,
                        60 * k
                    ),
                )?;
                std::thread::sleep(Duration::from_millis(5));
            }
            finish(&mut s, prompt, 2400)?;
        }
        Fault::NoUsageMultiToken { per_chunk } => {
            sse_head(&mut s)?;
            let per = per_chunk.max(1);
            let text = "tok ".repeat(per as usize);
            for _ in 0..max_tokens.div_ceil(per) {
                event(
                    &mut s,
                    &format!(
                        r#"{{"id":"x","object":"chat.completion.chunk","choices":[{{"index":0,"delta":{{"content":"{text}"}},"finish_reason":null}}]}}"#
                    ),
                )?;
                std::thread::sleep(Duration::from_millis(2));
            }
            event(
                &mut s,
                r#"{"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"length"}]}"#,
            )?;
            event(&mut s, "[DONE]")?;
        }
        Fault::RoleChunksThenUsage => {
            sse_head(&mut s)?;
            for _ in 0..10 {
                event(
                    &mut s,
                    r#"{"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant"},"finish_reason":null}]}"#,
                )?;
                std::thread::sleep(Duration::from_millis(5));
            }
            event(
                &mut s,
                r#"{"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"length"}]}"#,
            )?;
            event(
                &mut s,
                &format!(
                    r#"{{"id":"x","object":"chat.completion.chunk","choices":[],"usage":{{"prompt_tokens":{prompt},"completion_tokens":{max_tokens}}}}}"#
                ),
            )?;
            event(&mut s, "[DONE]")?;
        }
        Fault::EchoKeyInAnswer => {
            sse_head(&mut s)?;
            let key = req.auth.trim_start_matches("Bearer ").to_string();
            let mut pieces: Vec<String> = vec!["Final answer: ".into()];
            pieces.extend(
                key.chars()
                    .collect::<Vec<char>>()
                    .chunks(3)
                    .map(|c| c.iter().collect::<String>()),
            );
            for piece in &pieces {
                event(
                    &mut s,
                    &serde_json::json!({"id": "x", "object": "chat.completion.chunk",
                        "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": null}]})
                    .to_string(),
                )?;
                std::thread::sleep(Duration::from_millis(2));
            }
            finish(&mut s, prompt, pieces.len() as u64)?;
        }
        Fault::PingsAfterFirstToken => {
            sse_head(&mut s)?;
            token(&mut s, prompt, 1)?;
            loop {
                std::thread::sleep(Duration::from_millis(200));
                chunk(&mut s, ": ping\n\n")?;
            }
        }
        Fault::EndlessUsageStuck => {
            sse_head(&mut s)?;
            loop {
                token(&mut s, prompt, 1)?;
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        Fault::UsageNegative => {
            sse_head(&mut s)?;
            for _ in 1..=max_tokens {
                event(
                    &mut s,
                    r#"{"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"tok "},"finish_reason":null}],"usage":{"prompt_tokens":8,"completion_tokens":-5}}"#,
                )?;
                std::thread::sleep(Duration::from_millis(5));
            }
            finish(&mut s, prompt, max_tokens)?;
        }
        Fault::SingleWrite => {
            let mut all = String::new();
            let mut ev = |json: &str| {
                let d = format!("data: {json}\n\n");
                all.push_str(&format!("{:x}\r\n{d}\r\n", d.len()));
            };
            for k in 1..=max_tokens {
                ev(&format!(
                    r#"{{"id":"x","choices":[{{"index":0,"delta":{{"content":"tok "}},"finish_reason":null}}],"usage":{{"prompt_tokens":{prompt},"completion_tokens":{k}}}}}"#
                ));
            }
            ev(&format!(
                r#"{{"id":"x","choices":[{{"index":0,"delta":{{}},"finish_reason":"length"}}],"usage":{{"prompt_tokens":{prompt},"completion_tokens":{max_tokens}}}}}"#
            ));
            ev("[DONE]");
            all.push_str("0\r\n\r\n");
            // the whole answer after a decode-like delay, in one write
            std::thread::sleep(Duration::from_millis(150));
            write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n{all}"
            )?;
            s.flush()?;
        }
        Fault::EchoKey { in_stream: false } => respond(
            &mut s,
            "500 Internal Server Error",
            "",
            "application/json",
            &serde_json::json!({"error": {"message": format!("backend refused header {}", req.auth), "type": "internal"}}).to_string(),
        ),
        Fault::EchoKey { in_stream: true } => {
            sse_head(&mut s)?;
            event(
                &mut s,
                &serde_json::json!({"error": {"message": format!("stream aborted for {}", req.auth), "code": 500}}).to_string(),
            )?;
            chunk(&mut s, "")?;
        }
        Fault::Status(code) => respond(
            &mut s,
            &format!("{code} Error"),
            "",
            "application/json",
            r#"{"error":{"message":"denied","type":"auth"}}"#,
        ),
        Fault::PingPause { burst, pause_ms } => {
            sse_head(&mut s)?;
            for k in 1..=max_tokens {
                token(&mut s, prompt, k)?;
                if k == burst {
                    for _ in 0..pause_ms / 200 {
                        std::thread::sleep(Duration::from_millis(200));
                        chunk(&mut s, ": ping\n\n")?;
                    }
                } else {
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
            finish(&mut s, prompt, max_tokens)?;
        }
        Fault::PauseMidStream { burst, pause_ms } => {
            sse_head(&mut s)?;
            for k in 1..=max_tokens {
                token(&mut s, prompt, k)?;
                if k == burst {
                    std::thread::sleep(Duration::from_millis(pause_ms));
                } else {
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
            finish(&mut s, prompt, max_tokens)?;
        }
    }
    Ok(())
}
