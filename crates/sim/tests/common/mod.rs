//! A tiny HTTP/1.1 client over tokio's TcpStream, with SSE event splitting and per-event arrival
//! timestamps (the Instant of the read that completed the event).

#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::Value;
use servebench_sim::{Sim, SimConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub fn sim(cfg: SimConfig) -> Sim {
    Sim::spawn_thread(SimConfig { port: 0, ..cfg }).expect("start sim")
}

fn request_bytes(
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> Vec<u8> {
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: sim\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if let Some(b) = body {
        req.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            b.len()
        ));
    }
    req.push_str("\r\n");
    let mut out = req.into_bytes();
    if let Some(b) = body {
        out.extend_from_slice(b.as_bytes());
    }
    out
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    Size,
    Data(usize),
    Crlf,
    Done,
}

/// Incremental HTTP/1.1 response reader.
pub struct Conn {
    stream: TcpStream,
    raw: Vec<u8>,
    pub status: u16,
    pub headers: Vec<(String, String)>,
    chunked: bool,
    /// Decoded body bytes not yet consumed as events.
    body: Vec<u8>,
    state: Chunk,
    eof: bool,
    last_read_at: Instant,
}

impl Conn {
    pub async fn open(
        addr: SocketAddr,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&str>,
    ) -> Conn {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        stream.set_nodelay(true).expect("nodelay");
        stream
            .write_all(&request_bytes(method, path, headers, body))
            .await
            .expect("write request");
        let mut c = Conn {
            stream,
            raw: Vec::new(),
            status: 0,
            headers: Vec::new(),
            chunked: false,
            body: Vec::new(),
            state: Chunk::Size,
            eof: false,
            last_read_at: Instant::now(),
        };
        loop {
            if let Some(pos) = find(&c.raw, b"\r\n\r\n") {
                let head = String::from_utf8(c.raw[..pos].to_vec()).expect("utf8 head");
                c.raw.drain(..pos + 4);
                let mut lines = head.split("\r\n");
                let status_line = lines.next().expect("status line");
                c.status = status_line
                    .split(' ')
                    .nth(1)
                    .and_then(|s| s.parse().ok())
                    .expect("status");
                for l in lines {
                    if let Some((k, v)) = l.split_once(':') {
                        c.headers
                            .push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
                    }
                }
                c.chunked = c
                    .header("transfer-encoding")
                    .is_some_and(|v| v.eq_ignore_ascii_case("chunked"));
                c.decode();
                return c;
            }
            assert!(
                c.read_more().await,
                "connection closed before response head"
            );
        }
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    async fn read_more(&mut self) -> bool {
        let mut buf = [0u8; 16384];
        let n: usize = self.stream.read(&mut buf).await.unwrap_or_default();
        self.last_read_at = Instant::now();
        if n == 0 {
            self.eof = true;
            return false;
        }
        self.raw.extend_from_slice(&buf[..n]);
        true
    }

    /// Move decodable bytes from `raw` into `body`.
    fn decode(&mut self) {
        if !self.chunked {
            self.body.append(&mut self.raw);
            return;
        }
        loop {
            match self.state {
                Chunk::Done => return,
                Chunk::Data(left) => {
                    let take = left.min(self.raw.len());
                    self.body.extend(self.raw.drain(..take));
                    if take < left {
                        self.state = Chunk::Data(left - take);
                        return;
                    }
                    self.state = Chunk::Crlf;
                }
                Chunk::Crlf => {
                    if self.raw.len() < 2 {
                        return;
                    }
                    assert_eq!(&self.raw[..2], b"\r\n", "chunk trailer");
                    self.raw.drain(..2);
                    self.state = Chunk::Size;
                }
                Chunk::Size => {
                    let Some(pos) = find(&self.raw, b"\r\n") else {
                        return;
                    };
                    let line = std::str::from_utf8(&self.raw[..pos]).expect("chunk size line");
                    let size =
                        usize::from_str_radix(line.split(';').next().unwrap_or("").trim(), 16)
                            .expect("chunk size");
                    self.raw.drain(..pos + 2);
                    self.state = if size == 0 {
                        Chunk::Done
                    } else {
                        Chunk::Data(size)
                    };
                }
            }
        }
    }

    fn finished(&self) -> bool {
        self.state == Chunk::Done || self.eof
    }

    /// Read the whole remaining body.
    pub async fn read_to_end(&mut self) -> Vec<u8> {
        while !self.finished() {
            self.read_more().await;
            self.decode();
        }
        std::mem::take(&mut self.body)
    }

    /// Next SSE event's `data:` payload (without the `data: ` prefix) and the arrival time of the
    /// read that completed it; `None` at the end of the body.
    pub async fn next_event(&mut self) -> Option<(Instant, String)> {
        loop {
            if let Some(pos) = find(&self.body, b"\n\n") {
                let ev: Vec<u8> = self.body.drain(..pos + 2).collect();
                let text = String::from_utf8(ev).expect("utf8 event");
                let data = text
                    .trim_end()
                    .strip_prefix("data: ")
                    .expect("data: prefix")
                    .to_string();
                return Some((self.last_read_at, data));
            }
            if self.finished() {
                assert!(
                    self.body.is_empty(),
                    "trailing bytes: {:?}",
                    String::from_utf8_lossy(&self.body)
                );
                return None;
            }
            self.read_more().await;
            self.decode();
        }
    }

    pub async fn events(mut self) -> Vec<(Instant, String)> {
        let mut v = Vec::new();
        while let Some(e) = self.next_event().await {
            v.push(e);
        }
        v
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("json {e}: {}", String::from_utf8_lossy(&self.body)))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

pub async fn call(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> Resp {
    let mut c = Conn::open(addr, method, path, headers, body).await;
    let body = c.read_to_end().await;
    Resp {
        status: c.status,
        headers: c.headers.clone(),
        body,
    }
}

pub async fn post(addr: SocketAddr, path: &str, body: &Value) -> Resp {
    call(addr, "POST", path, &[], Some(&body.to_string())).await
}

pub async fn get(addr: SocketAddr, path: &str) -> Resp {
    call(addr, "GET", path, &[], None).await
}

/// A streamed request: status, headers and (arrival, payload) per event.
pub struct Streamed {
    pub status: u16,
    pub content_type: Option<String>,
    pub sent_at: Instant,
    pub events: Vec<(Instant, String)>,
}

impl Streamed {
    /// JSON payloads (everything but `[DONE]`).
    pub fn json(&self) -> Vec<(Instant, Value)> {
        self.events
            .iter()
            .filter(|(_, d)| d != "[DONE]")
            .map(|(t, d)| (*t, serde_json::from_str(d).expect("event json")))
            .collect()
    }

    /// The response id shared by the chunks.
    pub fn id(&self) -> String {
        self.json()
            .iter()
            .find_map(|(_, v)| v["id"].as_str().map(str::to_string))
            .expect("id")
    }

    /// Token-carrying events: (arrival, tokens).
    pub fn token_events(&self) -> Vec<(Instant, u64)> {
        self.json()
            .iter()
            .map(|(t, v)| (*t, chunk_tokens(v)))
            .filter(|&(_, n)| n > 0)
            .collect()
    }
}

pub async fn stream(addr: SocketAddr, path: &str, body: &Value) -> Streamed {
    let sent_at = Instant::now();
    let c = Conn::open(addr, "POST", path, &[], Some(&body.to_string())).await;
    let status = c.status;
    let content_type = c.header("content-type").map(str::to_string);
    let events = c.events().await;
    Streamed {
        status,
        content_type,
        sent_at,
        events,
    }
}

/// Words in a delta / text value = tokens (every generated word is one token).
pub fn words(v: &Value) -> u64 {
    v.as_str()
        .map(|s| s.split_whitespace().count() as u64)
        .unwrap_or(0)
}

/// Tokens carried by one chunk payload (content + reasoning_content + text words).
pub fn chunk_tokens(v: &Value) -> u64 {
    let Some(choices) = v["choices"].as_array() else {
        return 0;
    };
    choices
        .iter()
        .map(|c| {
            words(&c["delta"]["content"])
                + words(&c["delta"]["reasoning_content"])
                + words(&c["text"])
        })
        .sum()
}

pub fn chat_body(content: &str, max_tokens: u64, extra: Value) -> Value {
    let mut v = serde_json::json!({
        "model": "servebench-sim",
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
    });
    if let (Some(o), Some(e)) = (v.as_object_mut(), extra.as_object()) {
        for (k, x) in e {
            o.insert(k.clone(), x.clone());
        }
    }
    v
}

pub fn stream_opts(continuous: bool) -> Value {
    serde_json::json!({
        "stream": true,
        "ignore_eos": true,
        "stream_options": {"include_usage": true, "continuous_usage_stats": continuous},
    })
}

pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    assert!(n > 0);
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Poll `f` until it returns true or `timeout` passes.
pub async fn eventually(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + timeout;
    while Instant::now() < end {
        if f() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    f()
}

/// `GET /metrics`, parsed with the benchmark's own parser (no rejected lines allowed).
pub async fn scrape(addr: SocketAddr) -> servebench_metrics::Scrape {
    let r = get(addr, "/metrics").await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let text = String::from_utf8(r.body).expect("utf8 metrics");
    let s = servebench_metrics::Scrape::parse(&text).expect("exposition");
    assert_eq!(s.rejected_lines(), 0, "rejected lines in:\n{text}");
    s
}

/// A completion prompt of exactly `n` tokens (token ids `base..base+n`).
pub fn token_prompt(base: u32, n: u32) -> Vec<u32> {
    (base..base + n).collect()
}

/// Read a fixture under the repository's `tests/data/engines/`.
pub fn engine_fixture(rel: &str) -> String {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/data/engines")
        .join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Metric family names listed in a `name (type)` names file or the first column of a TSV.
pub fn fixture_names(rel: &str) -> std::collections::BTreeSet<String> {
    engine_fixture(rel)
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| l.split([' ', '\t']).next())
        .map(str::to_string)
        .collect()
}
