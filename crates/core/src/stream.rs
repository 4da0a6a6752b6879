//! One streaming request: send, timestamp every body read on arrival, frame, decode, account.
//!
//! The read loop stamps `Instant::now()` immediately after each body read returns, before any
//! parsing, and hands the bytes to the pure [`servebench_sse`] pipeline. Window accounting
//! happens here, per event, against the cell's [`WindowClock`]: a request that straddles a window
//! edge is credited with exactly the tokens that arrived inside the window.
//!
//! Plain-`http://` targets go through [`crate::h1`] (one connection per stream slot, read and
//! parsed by the same task); `https://` targets through reqwest.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use servebench_sse::{decode_event, Chunk, Decoded, RequestRecord, RequestTracker, SseFramer};
use tokio_util::sync::CancellationToken;

use crate::h1::{self, H1Conn, StartError};
use crate::target::{error_chain, HttpClient};

/// The measured window of a cell, shared by its streams. Unset until readiness; then fixed.
///
/// The window is published with a start slightly in the future (see
/// [`WindowClock::open_after`]), so no event that arrives at or after the start can be processed
/// before the stream task sees the window: classification by arrival time is exact.
#[derive(Debug)]
pub struct WindowClock {
    epoch: Instant,
    start_ns: AtomicU64,
    end_ns: AtomicU64,
}

const UNSET: u64 = u64::MAX;

impl WindowClock {
    /// A clock whose offsets count from `epoch` (the cell start).
    pub fn new(epoch: Instant) -> Self {
        WindowClock {
            epoch,
            start_ns: AtomicU64::new(UNSET),
            end_ns: AtomicU64::new(UNSET),
        }
    }

    /// Opens the window `margin` from now, for `duration`. Returns (start, end).
    pub fn open_after(&self, margin: Duration, duration: Duration) -> (Instant, Instant) {
        let start = Instant::now() + margin;
        let end = start + duration;
        let ns = |t: Instant| t.saturating_duration_since(self.epoch).as_nanos() as u64;
        self.end_ns.store(ns(end), Ordering::SeqCst);
        self.start_ns.store(ns(start), Ordering::SeqCst);
        (start, end)
    }

    /// The window, once opened.
    pub fn window(&self) -> Option<(Instant, Instant)> {
        let s = self.start_ns.load(Ordering::SeqCst);
        if s == UNSET {
            return None;
        }
        let e = self.end_ns.load(Ordering::SeqCst);
        Some((
            self.epoch + Duration::from_nanos(s),
            self.epoch + Duration::from_nanos(e),
        ))
    }
}

/// Output of one request.
#[derive(Debug)]
pub struct StreamOutcome {
    /// Everything the tracker derived (times, tokens, completion, error).
    pub record: RequestRecord,
    /// Output tokens that arrived inside the window (0 when no window was given or overlapped).
    pub window_tokens: u64,
    /// Token events that arrived inside the window.
    pub window_token_events: u64,
    /// Answer text (`content`) and reasoning text, when capture was requested.
    pub text: Option<CapturedText>,
    /// How long received bytes waited in the kernel before this stream read them (plain-HTTP
    /// targets with kernel receive timestamps; zero reads otherwise).
    pub read_delay: crate::h1::ReadDelay,
}

/// Text of a response, captured for task scoring.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CapturedText {
    /// Concatenated `content` / `text` deltas.
    pub content: String,
    /// Concatenated `reasoning_content` / `reasoning` deltas.
    pub reasoning: String,
}

/// Per-stream hooks into the cell's shared counters.
#[derive(Default)]
pub struct StreamHooks<'a> {
    /// The cell's window, if this request belongs to a measured cell.
    pub window: Option<&'a WindowClock>,
    /// Cut the stream when cancelled (window closed, cell aborted, Ctrl-C).
    pub cancel: Option<&'a CancellationToken>,
    /// Added to for every output token (live tok/s).
    pub live_tokens: Option<&'a AtomicU64>,
    /// Set (and the counter incremented once) when this stream slot first produces a token:
    /// readiness needs every one of the C streams to be producing.
    pub first_token: Option<(&'a AtomicBool, &'a AtomicU64)>,
    /// Keep the response text (task mode).
    pub capture_text: bool,
}

/// The per-request accounting state fed by both transports.
struct Accounting<'h, 'a> {
    hooks: &'h StreamHooks<'a>,
    tracker: RequestTracker,
    framer: SseFramer,
    lt_start: u64,
    le_end: u64,
    window_events: u64,
    text: Option<CapturedText>,
}

impl<'h, 'a> Accounting<'h, 'a> {
    fn new(hooks: &'h StreamHooks<'a>, sent_at: Instant) -> Self {
        Accounting {
            hooks,
            tracker: RequestTracker::new(sent_at),
            framer: SseFramer::new(),
            lt_start: 0,
            le_end: 0,
            window_events: 0,
            text: hooks.capture_text.then(CapturedText::default),
        }
    }

    fn on_event(&mut self, ev: &servebench_sse::SseEvent<'_>) {
        let d: Decoded<'_> = decode_event(ev);
        if let (
            Some(t),
            Decoded::Chunk(Chunk {
                content, reasoning, ..
            }),
        ) = (self.text.as_mut(), &d)
        {
            if let Some(c) = content {
                t.content.push_str(c);
            }
            if let Some(r) = reasoning {
                t.reasoning.push_str(r);
            }
        }
        let events_before = self.tracker.token_events();
        let added = self.tracker.apply(&d, ev.at);
        let token_event = self.tracker.token_events() > events_before;
        if added == 0 && !token_event {
            return;
        }
        if let Some((flag, counter)) = self.hooks.first_token {
            if !flag.load(Ordering::Relaxed) && !flag.swap(true, Ordering::Relaxed) {
                counter.fetch_add(1, Ordering::Relaxed);
            }
        }
        if let Some(live) = self.hooks.live_tokens {
            if added > 0 {
                live.fetch_add(added, Ordering::Relaxed);
            }
        }
        let total = self.tracker.tokens();
        // Tokens counted by an untimed event (a usage-only chunk) belong to the last token
        // event's time, not to the usage chunk's arrival (issue 8).
        let at = self.tracker.last_token_at().unwrap_or(ev.at);
        match self.hooks.window.and_then(WindowClock::window) {
            None => {
                self.lt_start = total;
                self.le_end = total;
            }
            Some((start, end)) => {
                if at < start {
                    self.lt_start = total;
                    self.le_end = total;
                } else if at <= end {
                    self.le_end = total;
                    if token_event {
                        self.window_events += 1;
                    }
                }
            }
        }
    }

    fn push(&mut self, bytes: &[u8], at: Instant) {
        let mut framer = std::mem::take(&mut self.framer);
        framer.push(bytes, at, |ev| self.on_event(ev));
        self.framer = framer;
    }

    fn finish_framer(&mut self, at: Instant) {
        let mut framer = std::mem::take(&mut self.framer);
        framer.finish(at, |ev| self.on_event(ev));
        self.framer = framer;
    }

    fn failed(&self) -> bool {
        self.tracker.error().is_some() || self.framer.overflowed()
    }

    fn close(
        self,
        clean_eof: bool,
        cancelled: bool,
        mut transport_error: Option<String>,
    ) -> StreamOutcome {
        if self.framer.overflowed() {
            transport_error = Some(format!(
                "malformed SSE stream: a line or event exceeded {} MiB",
                servebench_sse::MAX_EVENT_BYTES / (1024 * 1024)
            ));
        }
        let mut record = self.tracker.finish(Instant::now(), clean_eof, cancelled);
        if let Some(te) = transport_error {
            if !cancelled {
                record.error = Some(match record.error.take() {
                    Some(prev) if prev != servebench_sse::ERR_INTERRUPTED => {
                        format!("{prev}; {te}")
                    }
                    _ => te,
                });
            }
        }
        StreamOutcome {
            record,
            window_tokens: self.le_end.saturating_sub(self.lt_start),
            window_token_events: self.window_events,
            text: self.text,
            read_delay: crate::h1::ReadDelay::default(),
        }
    }
}

fn failed_before_stream(sent_at: Instant, err: String) -> StreamOutcome {
    let mut record = RequestTracker::new(sent_at).finish(Instant::now(), false, false);
    record.error = Some(err);
    StreamOutcome {
        record,
        window_tokens: 0,
        window_token_events: 0,
        text: None,
        read_delay: crate::h1::ReadDelay::default(),
    }
}

fn cancelled_before_stream(sent_at: Instant) -> StreamOutcome {
    let record = RequestTracker::new(sent_at).finish(Instant::now(), false, true);
    StreamOutcome {
        record,
        window_tokens: 0,
        window_token_events: 0,
        text: None,
        read_delay: crate::h1::ReadDelay::default(),
    }
}

async fn cancelled(c: Option<&CancellationToken>) {
    match c {
        Some(c) => c.cancelled().await,
        None => std::future::pending().await,
    }
}

/// One stand-alone request (scout, prefill sample, warmup) on a fresh connection, cut only by
/// `cancel`.
pub async fn run_single(
    client: &HttpClient,
    path: &str,
    body: Bytes,
    cancel: &CancellationToken,
) -> StreamOutcome {
    run_stream(
        client,
        &mut None,
        path,
        body,
        StreamHooks {
            cancel: Some(cancel),
            ..Default::default()
        },
    )
    .await
}

/// Sends one streaming request and reads it to the end (or until cancelled).
///
/// `conn` is the stream slot's kept-alive connection (plain-HTTP targets): taken, reused and put
/// back when the response ended cleanly. Never returns an error: failures are in
/// `record.error` (HTTP status with the server's message, connection errors, error objects
/// inside a 200 stream, malformed SSE, empty streams).
pub async fn run_stream(
    client: &HttpClient,
    conn: &mut Option<H1Conn>,
    path: &str,
    body: Bytes,
    hooks: StreamHooks<'_>,
) -> StreamOutcome {
    match client.h1_endpoint() {
        Some(ep) => run_stream_h1(ep, conn, path, &body, &hooks).await,
        None => run_stream_reqwest(client, path, body, &hooks).await,
    }
}

async fn run_stream_h1(
    ep: &h1::H1Endpoint,
    slot: &mut Option<H1Conn>,
    path: &str,
    body: &[u8],
    hooks: &StreamHooks<'_>,
) -> StreamOutcome {
    let t0 = Instant::now();
    // Start: reuse the slot's connection; if the server had closed it, retry once on a new one.
    let started = loop {
        let (conn, reused) = match slot.take() {
            Some(c) => (c, true),
            None => {
                let c = tokio::select! {
                    biased;
                    _ = cancelled(hooks.cancel) => return cancelled_before_stream(t0),
                    c = H1Conn::connect(ep) => c,
                };
                match c {
                    Ok(c) => (c, false),
                    Err(e) => return failed_before_stream(t0, e.to_string()),
                }
            }
        };
        let r = tokio::select! {
            biased;
            _ = cancelled(hooks.cancel) => return cancelled_before_stream(t0),
            r = h1::start(ep, conn, path, body, reused) => r,
        };
        match r {
            Ok(s) => break s,
            Err(StartError::StaleConnection) => continue,
            Err(StartError::Http(e)) => return failed_before_stream(t0, e.to_string()),
        }
    };
    let (mut stream, sent_at) = started;
    let mut acc = Accounting::new(hooks, sent_at);
    let mut buf: Vec<u8> = Vec::with_capacity(16 * 1024);
    let (mut clean_eof, mut was_cancelled, mut transport_error) = (false, false, None);
    // One cancellation future for the whole stream: creating it per read would register and
    // unregister a waiter (a locked list operation) for every SSE event.
    let cancel = cancelled(hooks.cancel);
    tokio::pin!(cancel);
    loop {
        buf.clear();
        let r = tokio::select! {
            biased;
            _ = &mut cancel => { was_cancelled = true; break; }
            r = stream.next(&mut buf) => r,
        };
        match r {
            Ok(Some(at)) => acc.push(&buf, at),
            Ok(None) => {
                acc.finish_framer(Instant::now());
                clean_eof = true;
                break;
            }
            Err(e) => {
                transport_error = Some(e);
                break;
            }
        }
        if acc.failed() {
            break;
        }
    }
    let read_delay = stream.read_delay();
    if clean_eof {
        *slot = stream.into_reusable();
    }
    let mut out = acc.close(clean_eof, was_cancelled, transport_error);
    out.read_delay = read_delay;
    out
}

async fn run_stream_reqwest(
    client: &HttpClient,
    path: &str,
    body: Bytes,
    hooks: &StreamHooks<'_>,
) -> StreamOutcome {
    let sent_at = Instant::now();
    let resp = tokio::select! {
        biased;
        _ = cancelled(hooks.cancel) => return cancelled_before_stream(sent_at),
        r = client.post_stream(path, body) => r,
    };
    let mut resp = match resp {
        Ok(r) => r,
        Err(e) => return failed_before_stream(sent_at, e.to_string()),
    };
    let mut acc = Accounting::new(hooks, sent_at);
    let (mut clean_eof, mut was_cancelled, mut transport_error) = (false, false, None);
    let cancel = cancelled(hooks.cancel);
    tokio::pin!(cancel);
    loop {
        let chunk = tokio::select! {
            biased;
            _ = &mut cancel => { was_cancelled = true; break; }
            c = resp.chunk() => c,
        };
        let at = Instant::now();
        match chunk {
            Ok(Some(bytes)) => acc.push(&bytes, at),
            Ok(None) => {
                acc.finish_framer(at);
                clean_eof = true;
                break;
            }
            Err(e) => {
                transport_error = Some(format!("stream read failed: {}", error_chain(&e)));
                break;
            }
        }
        if acc.failed() {
            break;
        }
    }
    acc.close(clean_eof, was_cancelled, transport_error)
}
