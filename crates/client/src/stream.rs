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

use crate::failure::{retry_after_of, FailureKind};
use crate::h1::{self, H1Conn, StartError};
use crate::target::{error_chain, HttpClient};
use crate::timeouts::{body_max_tokens, RequestClass, RequestLimits};

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
    /// Fault facts: typed failure, 429s and retries, implausible usage, long silences.
    pub facts: StreamFacts,
}

/// What a request revealed about the server beyond its record (servebench-core's plausibility
/// checks read it).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StreamFacts {
    /// Typed reason of `record.error` (None when the request did not fail).
    pub kind: Option<FailureKind>,
    /// The HTTP status of a request the server refused before streaming (non-2xx), if any.
    pub http_status: Option<u16>,
    /// HTTP 429 answers this request got (retries included).
    pub rejected: u32,
    /// Retries after a 429 ([`crate::timeouts::RequestPolicy::max_retries`]).
    pub retries: u32,
    /// `Retry-After` of the last 429, when the server sent one.
    pub retry_after: Option<Duration>,
    /// The first moment the counted tokens exceeded [`usage_bound`]: (counted tokens, delta
    /// chunks then — token-carrying events plus text-less delta chunks). Usage grew faster than
    /// the stream could carry.
    pub usage_jump: Option<(u64, u64)>,
    /// Silences between consecutive output-token arrivals of this request longer than
    /// [`STALL_FLOOR`]: (previous token arrival, next token arrival). A request still silent
    /// when it ended (cut at the window end) adds (last token arrival, end).
    pub long_gaps: Vec<(Instant, Instant)>,
    /// Arrival of the response body's first bytes (after the HTTP head), when any came.
    pub first_byte_at: Option<Instant>,
    /// SSE events that arrived after `data: [DONE]` in the reads that were made (ignored: the
    /// response ended at `[DONE]`; the client stops reading there).
    pub events_after_done: u64,
    /// Bytes of output text received (content and reasoning deltas), bytes.
    pub text_bytes: u64,
    /// Bytes of output text received up to and including the first token arrival (the text
    /// the first token event carried, and any text-only chunk before it), bytes; None when no
    /// token arrived.
    pub first_token_text_bytes: Option<u64>,
    /// Delta chunks of the stream: token-carrying events plus text-less delta chunks (the
    /// count [`usage_bound`] uses).
    pub delta_chunks: u64,
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
    /// Requests of the same prompt in flight at once (C; 0 counts as 1): scales the first-token
    /// deadline ([`crate::timeouts`]).
    pub in_flight: u64,
    /// Normal request or startup probe (which deadlines apply).
    pub class: RequestClass,
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
    /// Cut the stream when the counted tokens exceed this ([`max_tokens_cut`]).
    cut_above: Option<u64>,
    max_tokens: Option<u64>,
    limit_exceeded: Option<(String, FailureKind)>,
    usage_jump: Option<(u64, u64)>,
    /// Events that carried tokens: token events plus chunks whose usage grew (the usage bound
    /// of [`usage_bound`] counts these).
    carry_events: u64,
    /// Delta chunks without text (a choice whose `content` is `""` or absent; not the role
    /// chunk, not the finish chunk) that did not count as carriers. vLLM sends one per token
    /// whose text decodes to nothing (seen: a greedy random-weight model repeating such a
    /// token 96 times, every chunk `"content": ""`, usage 96 at the end); the usage bound
    /// counts them too.
    empty_deltas: u64,
    /// Bytes of content and reasoning text received so far.
    text_bytes: u64,
    /// `text_bytes` at the first token arrival.
    first_text_bytes: Option<u64>,
    prev_token_at: Option<Instant>,
    long_gaps: Vec<(Instant, Instant)>,
    sse_events: u64,
    first_bytes: Vec<u8>,
    first_byte_at: Option<Instant>,
    json_content_type: bool,
    /// The response's `Content-Type` when it is neither SSE nor JSON (e.g. `text/html` from a
    /// proxy's error page), cleaned for a log line and cut to 64 characters.
    other_content_type: Option<String>,
    /// Arrival of `data: [DONE]`: the protocol's end of the response, and the request's end.
    done_at: Option<Instant>,
    /// Events that arrived after `[DONE]` (ignored: the response had ended).
    after_done: u64,
}

/// After `data: [DONE]`, the rest of the HTTP body (the chunked terminator) is read for at most
/// this long so that the connection can be reused; a server that holds the body open longer gets
/// its connection closed, and the stream slot opens a new one (issue 17).
pub const DRAIN_AFTER_DONE: Duration = Duration::from_millis(50);
/// At most this many bytes after `data: [DONE]` are read and discarded while draining.
pub const DRAIN_AFTER_DONE_BYTES: usize = 64 * 1024;

/// Bound on tokens per token-carrying event ([`usage_bound`]; the rule is in servebench-core's
/// `plausibility` module and docs/metrics.md, Faults).
pub const MAX_TOKENS_PER_EVENT: u64 = 64;
/// Silences shorter than this are never stalls (and are not recorded in
/// [`StreamFacts::long_gaps`]).
pub const STALL_FLOOR: Duration = Duration::from_secs(1);

/// Counted tokens above which a stream is cut as ignoring `max_tokens`: 2 × max_tokens + 16.
pub fn max_tokens_cut(max_tokens: u64) -> u64 {
    max_tokens.saturating_mul(2).saturating_add(16)
}

/// Most output tokens a stream can have carried after `events` delta chunks (token-carrying
/// events, chunks whose usage grew, and text-less delta chunks) and `text_bytes` bytes of text:
/// [`MAX_TOKENS_PER_EVENT`] per chunk plus one per byte of text. A server that falls behind
/// merges many tokens' deltas into one chunk (vLLM does under load), and those chunks carry the
/// text of every merged token; tokens that decode to no text (special tokens, partial UTF-8)
/// are covered by the per-chunk allowance, and vLLM sends a `"content": ""` chunk for each. Usage above this bound is
/// `usage_implausible` (docs/metrics.md, Faults).
pub fn usage_bound(events: u64, text_bytes: u64) -> u64 {
    MAX_TOKENS_PER_EVENT
        .saturating_mul(events.max(1))
        .saturating_add(text_bytes)
}

/// At most this many long gaps are kept per request.
const MAX_GAPS: usize = 4096;

impl<'h, 'a> Accounting<'h, 'a> {
    fn new(
        hooks: &'h StreamHooks<'a>,
        sent_at: Instant,
        max_tokens: Option<u64>,
        content_type: Option<&str>,
    ) -> Self {
        let json_content_type = content_type.is_some_and(|c| {
            let c = c.to_ascii_lowercase();
            c.contains("json") && !c.contains("event-stream")
        });
        let other_content_type = content_type
            .filter(|c| {
                let c = c.to_ascii_lowercase();
                !c.contains("json") && !c.contains("event-stream") && !c.trim().is_empty()
            })
            .map(|c| {
                let cut: String = c.chars().take(64).collect();
                crate::error::strip_controls(&cut).into_owned()
            });
        Accounting {
            hooks,
            other_content_type,
            tracker: RequestTracker::new(sent_at),
            framer: SseFramer::new(),
            lt_start: 0,
            le_end: 0,
            window_events: 0,
            text: hooks.capture_text.then(CapturedText::default),
            cut_above: max_tokens.map(max_tokens_cut),
            max_tokens,
            limit_exceeded: None,
            usage_jump: None,
            carry_events: 0,
            text_bytes: 0,
            first_text_bytes: None,
            empty_deltas: 0,
            prev_token_at: None,
            long_gaps: Vec::new(),
            sse_events: 0,
            first_bytes: Vec::new(),
            first_byte_at: None,
            json_content_type,
            done_at: None,
            after_done: 0,
        }
    }

    /// `data: [DONE]` arrived: the response is over, whatever the connection does next.
    fn done(&self) -> bool {
        self.done_at.is_some()
    }

    fn first_token_at(&self) -> Option<Instant> {
        self.tracker.first_token_at()
    }

    /// Arrival of the latest output progress (a token event or usage growth), if any.
    fn last_token_at(&self) -> Option<Instant> {
        self.prev_token_at
    }

    /// Bookkeeping of one token arrival: long gaps, the usage bound, the max_tokens cut.
    fn on_token_arrival(&mut self, at: Instant) {
        if let Some(prev) = self.prev_token_at {
            if at.saturating_duration_since(prev) > STALL_FLOOR && self.long_gaps.len() < MAX_GAPS {
                self.long_gaps.push((prev, at));
            }
        }
        self.prev_token_at = Some(at);
        self.first_text_bytes.get_or_insert(self.text_bytes);
        self.carry_events += 1;
        let total = self.tracker.tokens();
        let events = self.carry_events + self.empty_deltas;
        let bound = usage_bound(events, self.text_bytes);
        if self.usage_jump.is_none() && total > bound {
            self.usage_jump = Some((total, events));
        }
        if let (Some(cut), Some(m), None) = (self.cut_above, self.max_tokens, &self.limit_exceeded)
        {
            // token events count too: a server whose usage stays low while it streams text
            // without end is as endless as one whose usage runs away
            let total = total.max(self.tracker.token_events());
            if total > cut {
                let (kind, what) = if total > bound {
                    (
                        FailureKind::UsageImplausible,
                        "usage_implausible: the server's usage reported",
                    )
                } else {
                    (
                        FailureKind::MaxTokensIgnored,
                        "max_tokens_ignored: the server streamed",
                    )
                };
                self.limit_exceeded = Some((
                    format!(
                        "{what} {total} completion tokens for max_tokens {m} over {events} token events; the stream was cut"
                    ),
                    kind,
                ));
            }
        }
    }

    fn on_event(&mut self, ev: &servebench_sse::SseEvent<'_>) {
        if self.done_at.is_some() {
            // the response ended at [DONE]: what follows it (in the same read) is not counted
            self.after_done += 1;
            return;
        }
        self.sse_events += 1;
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
        if let Decoded::Chunk(Chunk {
            content,
            reasoning,
            tool_call,
            ..
        }) = &d
        {
            let mut n =
                content.as_ref().map_or(0, |c| c.len()) + reasoning.as_ref().map_or(0, |r| r.len());
            if *tool_call {
                // the arguments' text sits inside the payload, which bounds it
                n += ev.data.len();
            }
            self.text_bytes += n as u64;
        }
        let events_before = self.tracker.token_events();
        let added = self.tracker.apply(&d, ev.at);
        if matches!(d, Decoded::Done) {
            self.done_at = Some(ev.at);
        }
        let token_event = self.tracker.token_events() > events_before;
        if added == 0 && !token_event {
            // the role chunk opens the message and the finish chunk closes it: neither is a
            // token's chunk (a server that sends ten role chunks and a usage of 640 is not
            // backed by them); usage-only chunks carry no choice
            if matches!(&d, Decoded::Chunk(c) if c.has_choice && !c.role && c.finish_reason.is_none())
            {
                self.empty_deltas += 1;
            }
            return;
        }
        self.on_token_arrival(ev.at);
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
        if self.first_byte_at.is_none() && !bytes.is_empty() {
            self.first_byte_at = Some(at);
        }
        if self.first_bytes.len() < 64 {
            let n = (64 - self.first_bytes.len()).min(bytes.len());
            self.first_bytes.extend_from_slice(&bytes[..n]);
        }
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
        self.tracker.error().is_some() || self.framer.overflowed() || self.limit_exceeded.is_some()
    }

    /// Closes the request. `transport_error`: a transport failure or a deadline that ended the
    /// read loop, with its kind.
    fn close(
        mut self,
        clean_eof: bool,
        cancelled: bool,
        transport_error: Option<(String, FailureKind)>,
    ) -> StreamOutcome {
        let in_stream = self.tracker.error().map(str::to_owned);
        let json_body = self
            .first_bytes
            .iter()
            .find(|b| !b.is_ascii_whitespace())
            .is_some_and(|&b| b == b'{');
        let not_streaming =
            !cancelled && self.sse_events == 0 && (self.json_content_type || json_body);
        // a body that is neither SSE nor JSON under a foreign content type (a proxy's HTML
        // error page with status 200): the content type names the problem
        let foreign_body = !cancelled
            && self.sse_events == 0
            && !not_streaming
            && !self.first_bytes.is_empty()
            && self.other_content_type.is_some();
        // A response that reached `[DONE]` ended then, not when the connection did.
        let now = self.done_at.unwrap_or_else(Instant::now);
        let last_token = self.prev_token_at;
        let mut record = self.tracker.finish(now, clean_eof, cancelled);
        if record.nonmonotonic_usage {
            // usage was not cumulative: the tracker recounted the request one token per timed
            // event, so the live credit (taken from the usage values) is recounted the same way
            self.lt_start = 0;
            self.le_end = self
                .hooks
                .window
                .and_then(WindowClock::window)
                .map_or(0, |(start, end)| record.tokens_between(start, end));
        }
        // A request silent from its last token to its end (cut at the window end, or failed).
        if let Some(last) = last_token {
            if now.saturating_duration_since(last) > STALL_FLOOR && self.long_gaps.len() < MAX_GAPS
            {
                self.long_gaps.push((last, now));
            }
        }
        let mut kind = None;
        let special = if let Some(l) = self.limit_exceeded.take() {
            Some(l)
        } else if self.framer.overflowed() {
            Some((
                format!(
                    "malformed SSE stream: a line or event exceeded {} MiB",
                    servebench_sse::MAX_EVENT_BYTES / (1024 * 1024)
                ),
                FailureKind::MalformedStream,
            ))
        } else if not_streaming {
            Some((
                "not_streaming: the server answered the stream: true request with a plain JSON body, not an SSE stream \
                 (it ignores `stream`; servebench needs token arrival times)"
                    .to_string(),
                FailureKind::NotStreaming,
            ))
        } else if foreign_body {
            Some((
                format!(
                    "not_streaming: the server answered the stream: true request with Content-Type {}, not text/event-stream, and no SSE event (a proxy's or gateway's page?)",
                    self.other_content_type.as_deref().unwrap_or("?")
                ),
                FailureKind::NotStreaming,
            ))
        } else {
            None
        };
        if !cancelled {
            if let Some((msg, k)) = special {
                record.error = Some(match &in_stream {
                    Some(prev) => format!("{prev}; {msg}"),
                    None => msg,
                });
                kind = Some(k);
            } else if let Some((te, k)) = transport_error {
                let timeout = k.is_timeout();
                record.error = Some(match record.error.take() {
                    Some(prev) if timeout && in_stream.is_none() => {
                        let _ = prev;
                        te
                    }
                    Some(prev) if prev != servebench_sse::ERR_INTERRUPTED => {
                        format!("{prev}; {te}")
                    }
                    _ => te,
                });
                kind = Some(if in_stream.is_some() && !timeout {
                    crate::failure::of_stream_error(in_stream.as_deref().unwrap_or_default())
                } else {
                    k
                });
            } else if let Some(e) = &record.error {
                kind = Some(crate::failure::of_stream_error(e));
            }
        }
        StreamOutcome {
            record,
            window_tokens: self.le_end.saturating_sub(self.lt_start),
            window_token_events: self.window_events,
            text: self.text,
            read_delay: crate::h1::ReadDelay::default(),
            facts: StreamFacts {
                kind,
                usage_jump: self.usage_jump,
                long_gaps: self.long_gaps,
                first_byte_at: self.first_byte_at,
                events_after_done: self.after_done,
                text_bytes: self.text_bytes,
                first_token_text_bytes: self.first_text_bytes,
                delta_chunks: self.carry_events + self.empty_deltas,
                ..Default::default()
            },
        }
    }
}

fn failed_before_stream(sent_at: Instant, err: String, kind: FailureKind) -> StreamOutcome {
    let mut record = RequestTracker::new(sent_at).finish(Instant::now(), false, false);
    record.error = Some(err);
    StreamOutcome {
        record,
        window_tokens: 0,
        window_token_events: 0,
        text: None,
        read_delay: crate::h1::ReadDelay::default(),
        facts: StreamFacts {
            kind: Some(kind),
            ..Default::default()
        },
    }
}

fn http_failure(sent_at: Instant, e: &crate::error::HttpError) -> StreamOutcome {
    let mut out = failed_before_stream(sent_at, e.to_string(), crate::failure::of_http(e));
    out.facts.retry_after = retry_after_of(e);
    out.facts.http_status = e.status();
    out
}

fn head_timeout(sent_at: Instant, limits: &RequestLimits) -> StreamOutcome {
    failed_before_stream(
        sent_at,
        limits.message(FailureKind::FirstByteTimeout),
        FailureKind::FirstByteTimeout,
    )
}

/// The outcome of a request cut before it was sent (its load was stopped first).
pub fn cancelled_outcome() -> StreamOutcome {
    cancelled_before_stream(Instant::now())
}

fn cancelled_before_stream(sent_at: Instant) -> StreamOutcome {
    let record = RequestTracker::new(sent_at).finish(Instant::now(), false, true);
    StreamOutcome {
        record,
        window_tokens: 0,
        window_token_events: 0,
        text: None,
        read_delay: crate::h1::ReadDelay::default(),
        facts: StreamFacts::default(),
    }
}

/// Polls a future only after it asked to be woken (and on the first poll), like
/// `FuturesUnordered` does for its members.
///
/// The stream loop `select!`s over the cancellation token, the deadline timer and the socket read
/// for every SSE event. Polling a `CancellationToken` future takes two mutexes that every stream
/// of the cell shares (the token node's and its `Notify`'s waiter list); polling a timer touches
/// the timer entry. Neither can become ready without waking its waker (the `Future` contract), so
/// a poll that was not preceded by a wake-up is skipped: one atomic swap instead.
struct WakeGate<F> {
    inner: std::pin::Pin<Box<F>>,
    gate: std::sync::Arc<GateWaker>,
    /// The task waker last registered in `gate.task` (skips re-registering the same one).
    task: Option<std::task::Waker>,
}

struct GateWaker {
    woken: AtomicBool,
    task: futures_util::task::AtomicWaker,
}

impl futures_util::task::ArcWake for GateWaker {
    fn wake_by_ref(arc_self: &std::sync::Arc<Self>) {
        // `woken` first: a poll that sees it false knows `task` still holds its waker.
        arc_self.woken.store(true, Ordering::Release);
        arc_self.task.wake();
    }
}

impl<F: std::future::Future> WakeGate<F> {
    fn new(inner: F) -> Self {
        WakeGate {
            inner: Box::pin(inner),
            gate: std::sync::Arc::new(GateWaker {
                woken: AtomicBool::new(true),
                task: futures_util::task::AtomicWaker::new(),
            }),
            task: None,
        }
    }

    /// The wrapped future, for changes that need a fresh poll (a timer reset): the next poll
    /// polls it.
    fn rearm(&mut self) -> std::pin::Pin<&mut F> {
        self.gate.woken.store(true, Ordering::Release);
        self.inner.as_mut()
    }
}

impl<F: std::future::Future> std::future::Future for WakeGate<F> {
    type Output = F::Output;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<F::Output> {
        let this = &mut *self;
        let woken = this.gate.woken.swap(false, Ordering::AcqRel);
        let same_task = this.task.as_ref().is_some_and(|w| w.will_wake(cx.waker()));
        // A wake-up takes the waker out of `gate.task`: register again after one, or when the
        // task's waker changed. Registering happens before the inner poll, so a wake-up during
        // or after that poll reaches the task.
        if woken || !same_task {
            this.gate.task.register(cx.waker());
            if !same_task {
                this.task = Some(cx.waker().clone());
            }
        }
        if !woken {
            return std::task::Poll::Pending;
        }
        let waker = futures_util::task::waker_ref(&this.gate);
        this.inner
            .as_mut()
            .poll(&mut std::task::Context::from_waker(&waker))
    }
}

async fn cancelled(c: Option<&CancellationToken>) {
    match c {
        Some(c) => c.cancelled().await,
        None => std::future::pending().await,
    }
}

/// One stand-alone request (scout, prefill sample, warmup) on a fresh connection, cut only by
/// `cancel` and by the client's deadlines ([`crate::timeouts`]).
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

/// A startup probe (the decode JIT probe): like [`run_single`], with first byte and first token
/// due within the probe timeout ([`crate::timeouts::Limit::Probe`]).
pub async fn run_probe(
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
            class: RequestClass::Probe,
            ..Default::default()
        },
    )
    .await
}

/// Sends one streaming request and reads it to the end (or until cancelled or past a deadline).
///
/// `conn` is the stream slot's kept-alive connection (plain-HTTP targets): taken, reused and put
/// back when the response ended cleanly. Never returns an error: failures are in
/// `record.error` with their kind in `facts.kind` (HTTP status with the server's message,
/// connection errors, error objects inside a 200 stream, malformed SSE, empty streams, plain JSON
/// answers, timeouts, a server that ignores `max_tokens`). A request answered with HTTP 429 is
/// retried up to the client's `max_retries` times after [`crate::timeouts::RequestPolicy::backoff`];
/// the 429s and retries are counted in `facts`.
pub async fn run_stream(
    client: &HttpClient,
    conn: &mut Option<H1Conn>,
    path: &str,
    body: Bytes,
    hooks: StreamHooks<'_>,
) -> StreamOutcome {
    let policy = *client.policy();
    let mut limits = policy.limits(hooks.class, body.len(), hooks.in_flight);
    let max_tokens = body_max_tokens(&body);
    if max_tokens == Some(1) {
        limits.single_token_end = limits.idle;
    }
    let (mut rejected, mut retries) = (0u32, 0u32);
    loop {
        let mut out = match client.h1_endpoint() {
            Some(ep) => run_stream_h1(ep, conn, path, &body, &hooks, &limits, max_tokens).await,
            None => {
                run_stream_reqwest(client, path, body.clone(), &hooks, &limits, max_tokens).await
            }
        };
        if out.facts.kind == Some(FailureKind::RateLimited) {
            rejected += 1;
            if retries < policy.max_retries {
                retries += 1;
                let wait = policy.backoff(retries, out.facts.retry_after);
                let stop = tokio::select! {
                    biased;
                    _ = cancelled(hooks.cancel) => true,
                    _ = tokio::time::sleep(wait) => false,
                };
                if !stop {
                    continue;
                }
                out = cancelled_before_stream(Instant::now());
            }
        }
        out.facts.rejected = rejected;
        out.facts.retries = retries;
        return out;
    }
}

async fn run_stream_h1(
    ep: &h1::H1Endpoint,
    slot: &mut Option<H1Conn>,
    path: &str,
    body: &[u8],
    hooks: &StreamHooks<'_>,
    limits: &RequestLimits,
    max_tokens: Option<u64>,
) -> StreamOutcome {
    let t0 = Instant::now();
    let head_sleep = tokio::time::sleep_until((t0 + limits.first_byte).into());
    tokio::pin!(head_sleep);
    // Start: reuse the slot's connection; if the server had closed it, retry once on a new one.
    let started = loop {
        let (conn, reused) = match slot.take() {
            Some(c) => (c, true),
            None => {
                let c = tokio::select! {
                    biased;
                    _ = cancelled(hooks.cancel) => return cancelled_before_stream(t0),
                    _ = &mut head_sleep => return head_timeout(t0, limits),
                    c = H1Conn::connect(ep) => c,
                };
                match c {
                    Ok(c) => (c, false),
                    Err(e) => return http_failure(t0, &e),
                }
            }
        };
        let r = tokio::select! {
            biased;
            _ = cancelled(hooks.cancel) => return cancelled_before_stream(t0),
            _ = &mut head_sleep => return head_timeout(t0, limits),
            r = h1::start(ep, conn, path, body, reused) => r,
        };
        match r {
            Ok(s) => break s,
            Err(StartError::StaleConnection) => continue,
            Err(StartError::Http(e)) => return http_failure(t0, &e),
        }
    };
    let (mut stream, sent_at) = started;
    let mut acc = Accounting::new(hooks, sent_at, max_tokens, stream.content_type());
    let mut buf: Vec<u8> = Vec::with_capacity(16 * 1024);
    let (mut clean_eof, mut was_cancelled, mut transport_error) = (false, false, None);
    let mut ended_by_done = false;
    // One cancellation future for the whole stream: creating it per read would register and
    // unregister a waiter (a locked list operation) for every SSE event; gated, so that it is
    // polled only when the token woke it (see `WakeGate`).
    let mut cancel = WakeGate::new(cancelled(hooks.cancel));
    // One deadline timer, re-armed lazily when it fires (bytes move the idle deadline on).
    let mut last_byte = sent_at;
    let mut idle_armed = false;
    let mut sleep = WakeGate::new(tokio::time::sleep_until(
        deadline_or_far(limits.body_deadline(sent_at, None, sent_at)).into(),
    ));
    loop {
        buf.clear();
        let r = tokio::select! {
            biased;
            _ = &mut cancel => { was_cancelled = true; break; }
            _ = &mut sleep => {
                match next_deadline(limits, sent_at, &acc, last_byte) {
                    Some((d, kind, msg)) if Instant::now() >= d => {
                        transport_error = Some((msg, kind));
                        break;
                    }
                    d => {
                        sleep.rearm().reset(deadline_or_far(d.map(|(d, k, _)| (d, k))).into());
                        continue;
                    }
                }
            }
            r = stream.next(&mut buf) => r,
        };
        match r {
            Ok(Some(at)) => {
                last_byte = last_byte.max(at);
                acc.push(&buf, at);
                if acc.done() {
                    acc.finish_framer(at);
                    clean_eof = true;
                    ended_by_done = true;
                    break;
                }
                if !idle_armed && acc.first_token_at().is_some() {
                    // the first token switches to the (usually shorter) idle deadline
                    idle_armed = true;
                    let d = next_deadline(limits, sent_at, &acc, last_byte);
                    sleep
                        .rearm()
                        .reset(deadline_or_far(d.map(|(d, k, _)| (d, k))).into());
                }
            }
            Ok(None) => {
                acc.finish_framer(Instant::now());
                clean_eof = true;
                break;
            }
            Err(e) => {
                transport_error = Some((e, FailureKind::Transport));
                break;
            }
        }
        if acc.failed() {
            break;
        }
    }
    if ended_by_done {
        // The response ended at [DONE]; read the end of the HTTP body (bounded) so the
        // connection can carry the next request, else it is closed (never reused mid-body).
        stream.drain(DRAIN_AFTER_DONE_BYTES, DRAIN_AFTER_DONE).await;
    }
    let read_delay = stream.read_delay();
    if clean_eof {
        *slot = stream.into_reusable();
    }
    let mut out = acc.close(clean_eof, was_cancelled, transport_error);
    out.read_delay = read_delay;
    out
}

/// The earliest deadline of the request now, with its failure kind and, once it has passed,
/// its message (empty before, so re-arming the timer allocates nothing): the phase and
/// whole-request deadlines ([`RequestLimits::body_deadline`]) and, after the first token, the
/// no-output-token one ([`RequestLimits::no_token_deadline`]).
fn next_deadline(
    limits: &RequestLimits,
    sent_at: Instant,
    acc: &Accounting<'_, '_>,
    last_byte: Instant,
) -> Option<(Instant, FailureKind, String)> {
    let phase = limits.body_deadline(sent_at, acc.first_token_at(), last_byte);
    let no_token = acc
        .first_token_at()
        .and_then(|_| limits.no_token_deadline(acc.last_token_at()));
    let now = Instant::now();
    let earlier =
        |d: Instant, other: Option<(Instant, FailureKind)>| other.is_none_or(|(o, _)| d < o);
    if let Some(s) = limits
        .single_token_deadline(acc.first_token_at())
        .filter(|&s| earlier(s, phase) && no_token.is_none_or(|n| s < n))
    {
        return Some((
            s,
            FailureKind::MaxTokensIgnored,
            msg_if(now >= s, || limits.single_token_message()),
        ));
    }
    match no_token {
        Some(n) if earlier(n, phase) => Some((
            n,
            FailureKind::StreamStalled,
            msg_if(now >= n, || limits.no_token_message()),
        )),
        _ => phase.map(|(d, k)| (d, k, msg_if(now >= d, || limits.message(k)))),
    }
}

/// `text()` when `passed`, else an empty string (no allocation).
fn msg_if(passed: bool, text: impl FnOnce() -> String) -> String {
    if passed {
        text()
    } else {
        String::new()
    }
}

/// The deadline, or one far in the future when none applies.
fn deadline_or_far(d: Option<(Instant, FailureKind)>) -> Instant {
    d.map(|d| d.0)
        .unwrap_or_else(|| Instant::now() + Duration::from_secs(365 * 86_400))
}

async fn run_stream_reqwest(
    client: &HttpClient,
    path: &str,
    body: Bytes,
    hooks: &StreamHooks<'_>,
    limits: &RequestLimits,
    max_tokens: Option<u64>,
) -> StreamOutcome {
    let sent_at = Instant::now();
    let resp = tokio::select! {
        biased;
        _ = cancelled(hooks.cancel) => return cancelled_before_stream(sent_at),
        _ = tokio::time::sleep(limits.first_byte) => return head_timeout(sent_at, limits),
        r = client.post_stream(path, body) => r,
    };
    let mut resp = match resp {
        Ok(r) => r,
        Err(e) => return http_failure(sent_at, &e),
    };
    let content_type = resp
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    if let Some(enc) = resp
        .headers()
        .get(reqwest::header::CONTENT_ENCODING)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).trim().to_string())
        .filter(|e| !e.is_empty() && !e.eq_ignore_ascii_case("identity"))
    {
        let e = crate::error::HttpError::Body {
            url: client.target().url(path),
            detail: h1::unrequested_encoding(&enc),
        };
        return http_failure(sent_at, &e);
    }
    let mut acc = Accounting::new(hooks, sent_at, max_tokens, content_type.as_deref());
    let (mut clean_eof, mut was_cancelled, mut transport_error) = (false, false, None);
    let mut cancel = WakeGate::new(cancelled(hooks.cancel));
    let mut last_byte = sent_at;
    let mut idle_armed = false;
    let mut sleep = WakeGate::new(tokio::time::sleep_until(
        deadline_or_far(limits.body_deadline(sent_at, None, sent_at)).into(),
    ));
    loop {
        let chunk = tokio::select! {
            biased;
            _ = &mut cancel => { was_cancelled = true; break; }
            _ = &mut sleep => {
                match next_deadline(limits, sent_at, &acc, last_byte) {
                    Some((d, kind, msg)) if Instant::now() >= d => {
                        transport_error = Some((msg, kind));
                        break;
                    }
                    d => {
                        sleep.rearm().reset(deadline_or_far(d.map(|(d, k, _)| (d, k))).into());
                        continue;
                    }
                }
            }
            c = resp.chunk() => c,
        };
        let at = Instant::now();
        match chunk {
            Ok(Some(bytes)) => {
                last_byte = at;
                acc.push(&bytes, at);
                if acc.done() {
                    // the protocol's end; dropping `resp` unread closes its connection
                    acc.finish_framer(at);
                    clean_eof = true;
                    break;
                }
                if !idle_armed && acc.first_token_at().is_some() {
                    idle_armed = true;
                    let d = next_deadline(limits, sent_at, &acc, last_byte);
                    sleep
                        .rearm()
                        .reset(deadline_or_far(d.map(|(d, k, _)| (d, k))).into());
                }
            }
            Ok(None) => {
                acc.finish_framer(at);
                clean_eof = true;
                break;
            }
            Err(e) => {
                transport_error = Some((
                    format!("stream read failed: {}", error_chain(&e)),
                    FailureKind::Transport,
                ));
                break;
            }
        }
        if acc.failed() {
            break;
        }
    }
    acc.close(clean_eof, was_cancelled, transport_error)
}

#[cfg(test)]
mod tests {
    //! Window crediting and per-event accounting, on crafted streams with known arrival times
    //! (found by `cargo mutants`, docs/mutants.md).

    use super::*;

    const TOK: &str = r#"{"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}]}"#;
    const FINISH: &str = r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#;

    fn ms(base: Instant, m: u64) -> Instant {
        base + Duration::from_millis(m)
    }

    /// A window `[start_ms, end_ms]` after `base`, as `open_after` publishes it (offsets in ns
    /// from the epoch), without its `Instant::now()`.
    fn clock(base: Instant, start_ms: u64, end_ms: u64) -> WindowClock {
        let c = WindowClock::new(base);
        c.end_ns.store(end_ms * 1_000_000, Ordering::SeqCst);
        c.start_ns.store(start_ms * 1_000_000, Ordering::SeqCst);
        c
    }

    /// Each `(ms, payload)` as one `data:` event in its own read at `base + ms`; clean end.
    fn replay_ct(
        hooks: &StreamHooks<'_>,
        base: Instant,
        content_type: &str,
        events: &[(u64, &str)],
    ) -> StreamOutcome {
        let mut acc = Accounting::new(hooks, base, None, Some(content_type));
        for (m, p) in events {
            acc.push(format!("data: {p}\n\n").as_bytes(), ms(base, *m));
        }
        acc.finish_framer(ms(base, events.last().map_or(0, |e| e.0) + 1));
        acc.close(true, false, None)
    }

    fn replay(hooks: &StreamHooks<'_>, base: Instant, events: &[(u64, &str)]) -> StreamOutcome {
        replay_ct(hooks, base, "text/event-stream", events)
    }

    fn usage(completion: u64) -> String {
        format!(
            r#"{{"choices":[],"usage":{{"prompt_tokens":3,"completion_tokens":{completion}}}}}"#
        )
    }

    fn tok_usage(completion: u64) -> String {
        format!(
            r#"{{"choices":[{{"index":0,"delta":{{"content":"a"}},"finish_reason":null}}],"usage":{{"completion_tokens":{completion}}}}}"#
        )
    }

    #[test]
    fn window_edges_are_inclusive_and_tokens_outside_are_not_credited() {
        let base = Instant::now();
        let w = clock(base, 15, 35);
        let hooks = StreamHooks {
            window: Some(&w),
            ..Default::default()
        };
        // before, at the start, inside, at the end, after
        let out = replay(
            &hooks,
            base,
            &[
                (10, TOK),
                (15, TOK),
                (25, TOK),
                (35, TOK),
                (40, TOK),
                (40, "[DONE]"),
            ],
        );
        assert_eq!(out.record.output_tokens, 5);
        assert!(out.record.completed);
        assert_eq!(out.window_tokens, 3, "tokens at 15, 25 and 35 ms");
        assert_eq!(out.window_token_events, 3);
    }

    #[test]
    fn untimed_usage_tokens_belong_to_the_last_token_time() {
        let base = Instant::now();
        let w = clock(base, 15, 35);
        let hooks = StreamHooks {
            window: Some(&w),
            ..Default::default()
        };
        // Two token events inside the window; the final usage (5) arrives after the window end:
        // its 3 extra tokens were generated with the last token event (30 ms), inside.
        let late = usage(5);
        let out = replay(
            &hooks,
            base,
            &[
                (20, TOK),
                (30, TOK),
                (30, FINISH),
                (50, &late),
                (50, "[DONE]"),
            ],
        );
        assert_eq!(out.record.output_tokens, 5);
        assert_eq!(out.window_tokens, 5);
        assert_eq!(
            out.window_token_events, 2,
            "the usage chunk is not a token event"
        );
        // The other way round: the token event is before the window, the usage chunk inside.
        let inside = usage(3);
        let out = replay(
            &hooks,
            base,
            &[(10, TOK), (10, FINISH), (20, &inside), (20, "[DONE]")],
        );
        assert_eq!(out.record.output_tokens, 3);
        assert_eq!(
            out.window_tokens, 0,
            "all 3 tokens belong to 10 ms, before the window"
        );
        assert_eq!(out.window_token_events, 0);
    }

    #[test]
    fn token_events_without_usage_growth_still_count_as_window_events() {
        let base = Instant::now();
        let w = clock(base, 0, 100);
        let live = AtomicU64::new(0);
        let hooks = StreamHooks {
            window: Some(&w),
            live_tokens: Some(&live),
            ..Default::default()
        };
        let (u2, u4) = (tok_usage(2), tok_usage(4));
        let fin = usage(6);
        // 2 tokens in one event (speculative decoding), an event whose usage did not grow, 2 more,
        // then a usage-only chunk adding 2 (untimed, credited at 30 ms).
        let out = replay(
            &hooks,
            base,
            &[
                (10, &u2),
                (20, &u2),
                (30, &u4),
                (30, FINISH),
                (40, &fin),
                (40, "[DONE]"),
            ],
        );
        assert_eq!(out.record.output_tokens, 6);
        assert_eq!(out.record.token_events, 3);
        assert_eq!(out.window_tokens, 6);
        assert_eq!(out.window_token_events, 3);
        assert_eq!(
            live.load(Ordering::Relaxed),
            6,
            "live tok/s gets every counted token"
        );
    }

    #[test]
    fn no_window_or_unopened_window_credits_nothing() {
        let base = Instant::now();
        let events = [(10, TOK), (20, TOK), (20, "[DONE]")];
        let out = replay(&StreamHooks::default(), base, &events);
        assert_eq!((out.record.output_tokens, out.window_tokens), (2, 0));
        let w = WindowClock::new(base);
        assert_eq!(w.window(), None);
        let hooks = StreamHooks {
            window: Some(&w),
            ..Default::default()
        };
        let out = replay(&hooks, base, &events);
        assert_eq!((out.window_tokens, out.window_token_events), (0, 0));
    }

    #[test]
    fn open_after_publishes_start_after_the_margin_and_the_exact_duration() {
        let epoch = Instant::now();
        let w = WindowClock::new(epoch);
        let before = Instant::now();
        let (s, e) = w.open_after(Duration::from_millis(50), Duration::from_secs(4));
        let after = Instant::now();
        assert!(
            s >= before + Duration::from_millis(50),
            "start is margin after now"
        );
        assert!(s <= after + Duration::from_millis(50));
        assert_eq!(e - s, Duration::from_secs(4));
        assert_eq!(
            w.window(),
            Some((s, e)),
            "ns offsets from the epoch round-trip exactly"
        );
    }

    #[test]
    fn silences_longer_than_the_stall_floor_are_reported() {
        let base = Instant::now();
        let late = 10 + STALL_FLOOR.as_millis() as u64 + 500;
        let out = replay(
            &StreamHooks::default(),
            base,
            &[(10, TOK), (20, TOK), (late, TOK), (late, "[DONE]")],
        );
        assert_eq!(out.record.output_tokens, 3);
        assert_eq!(out.facts.long_gaps, vec![(ms(base, 20), ms(base, late))]);
    }

    #[test]
    fn first_token_hook_fires_once_per_stream() {
        let base = Instant::now();
        let (flag, counter) = (AtomicBool::new(false), AtomicU64::new(0));
        let hooks = StreamHooks {
            first_token: Some((&flag, &counter)),
            ..Default::default()
        };
        let out = replay(
            &hooks,
            base,
            &[(10, TOK), (20, TOK), (30, TOK), (30, "[DONE]")],
        );
        assert_eq!(out.record.output_tokens, 3);
        assert!(flag.load(Ordering::Relaxed));
        assert_eq!(counter.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn max_tokens_cut_is_twice_plus_sixteen() {
        assert_eq!(max_tokens_cut(32), 80);
        assert_eq!(max_tokens_cut(0), 16);
        assert_eq!(max_tokens_cut(u64::MAX), u64::MAX, "saturates");
    }

    #[test]
    fn usage_bound_is_per_event_allowance_plus_text_bytes() {
        assert_eq!(usage_bound(3, 10), 3 * MAX_TOKENS_PER_EVENT + 10);
        assert_eq!(
            usage_bound(0, 0),
            MAX_TOKENS_PER_EVENT,
            "at least one event"
        );
        assert_eq!(usage_bound(u64::MAX, 5), u64::MAX, "saturates");
        // One event carrying 6 bytes of content and 2 of reasoning: bound 64 + 8 = 72.
        let chunk = |n: u64| {
            format!(
                r#"{{"choices":[{{"index":0,"delta":{{"content":"abcdef","reasoning_content":"xy"}}}}],"usage":{{"completion_tokens":{n}}}}}"#
            )
        };
        let base = Instant::now();
        let hooks = StreamHooks::default();
        let at_bound = chunk(MAX_TOKENS_PER_EVENT + 8);
        let out = replay(&hooks, base, &[(10, &at_bound), (10, "[DONE]")]);
        assert_eq!(
            out.facts.usage_jump, None,
            "72 tokens over 8 bytes in 1 event is plausible"
        );
        let above = chunk(MAX_TOKENS_PER_EVENT + 9);
        let out = replay(&hooks, base, &[(10, &above), (10, "[DONE]")]);
        assert_eq!(out.facts.usage_jump, Some((MAX_TOKENS_PER_EVENT + 9, 1)));
    }

    /// A real vLLM stream (tests/data/engines/local-captures/vllm-chat-stream-empty-content-tokens.sse):
    /// 96 tokens whose text is empty, one `"content": ""` chunk each, usage 96 at the end. No
    /// token event, so no token times; the usage is plausible (one delta chunk per token). The
    /// same usage after only the role and finish chunks is still implausible.
    #[test]
    fn text_less_delta_chunks_carry_tokens_for_the_usage_bound() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/data/engines/local-captures/vllm-chat-stream-empty-content-tokens.sse"
        );
        let text = std::fs::read_to_string(path).unwrap();
        let payloads: Vec<&str> = text
            .split("\n\n")
            .filter_map(|e| e.strip_prefix("data: "))
            .collect();
        assert_eq!(
            payloads.len(),
            99,
            "role + 96 empty deltas (the last finishes) + usage + [DONE]"
        );
        let base = Instant::now();
        let hooks = StreamHooks::default();
        let events: Vec<(u64, &str)> = payloads
            .iter()
            .enumerate()
            .map(|(i, p)| (i as u64 * 5, *p))
            .collect();
        let out = replay(&hooks, base, &events);
        assert_eq!(out.record.output_tokens, 96);
        assert_eq!(out.record.token_events, 0);
        assert_eq!(
            out.record.first_token_at, None,
            "no token event, no token time"
        );
        assert!(out.record.error.is_none(), "{:?}", out.record.error);
        assert_eq!(
            out.facts.usage_jump, None,
            "one delta chunk per token is plausible"
        );
        assert_eq!(
            out.facts.delta_chunks, 96,
            "95 empty deltas (not the role chunk, not the finish chunk) + the usage growth"
        );
        // Role chunk, finish chunk, usage 200: only the usage growth carries (64 < 200).
        let liar = [
            (0, payloads[0]),
            (5, payloads[96]),
            (
                10,
                r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":200}}"#,
            ),
            (15, "[DONE]"),
        ];
        let out = replay(&hooks, base, &liar);
        assert_eq!(out.facts.usage_jump, Some((200, 1)));
        // Ten role chunks do not back a usage either (break-it round 6).
        let role = r#"{"choices":[{"index":0,"delta":{"role":"assistant"},"finish_reason":null}]}"#;
        let mut roles: Vec<(u64, &str)> = (0..10).map(|i| (i, role)).collect();
        roles.push((
            10,
            r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":64}}"#,
        ));
        roles.push((11, "[DONE]"));
        let out = replay(&hooks, base, &roles);
        assert_eq!((out.facts.delta_chunks, out.facts.text_bytes), (1, 0));
    }

    #[test]
    fn tool_call_payloads_count_as_text_for_the_usage_bound() {
        let base = Instant::now();
        let call = r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\": \"Paris\", \"unit\": \"celsius\"}"}}]}}]}"#;
        let out = replay(&StreamHooks::default(), base, &[(1, call), (2, "[DONE]")]);
        assert_eq!(out.facts.text_bytes, call.len() as u64);
        assert_eq!(out.facts.delta_chunks, 1);
    }

    #[test]
    fn sse_body_under_a_json_content_type_is_still_a_stream() {
        let base = Instant::now();
        let out = replay_ct(
            &StreamHooks::default(),
            base,
            "application/json",
            &[(10, TOK), (20, TOK), (20, "[DONE]")],
        );
        assert_eq!(out.record.error, None);
        assert_eq!(out.facts.kind, None);
        assert!(out.record.completed);
        // The same content type with a plain JSON body is `not_streaming`.
        let hooks = StreamHooks::default();
        let mut acc = Accounting::new(&hooks, base, None, Some("application/json"));
        acc.push(
            br#"{"choices":[{"message":{"content":"hi"}}]}"#,
            ms(base, 10),
        );
        acc.finish_framer(ms(base, 11));
        let out = acc.close(true, false, None);
        assert_eq!(out.facts.kind, Some(FailureKind::NotStreaming));
    }

    /// Break-it round 6: a 200 with a proxy's HTML page said "no output token"; it is
    /// `not_streaming` and names the content type (cleaned of control characters).
    #[test]
    fn a_page_under_a_foreign_content_type_is_not_streaming_and_named() {
        let base = Instant::now();
        let hooks = StreamHooks::default();
        let mut acc = Accounting::new(&hooks, base, None, Some("text/html\u{1b}[31m"));
        acc.push(b"<html>\x1b[31mhello</html>", ms(base, 10));
        acc.finish_framer(ms(base, 11));
        let out = acc.close(true, false, None);
        assert_eq!(out.facts.kind, Some(FailureKind::NotStreaming));
        let e = out.record.error.unwrap();
        assert!(e.contains("Content-Type text/html"), "{e}");
        assert!(!e.contains('\u{1b}'), "{e}");
        // SSE under text/plain is still a stream
        let out = replay_ct(&hooks, base, "text/plain", &[(10, TOK), (20, "[DONE]")]);
        assert_eq!((out.facts.kind, out.record.error), (None, None));
        // an empty body under text/html is the usual "no output" case
        let mut acc = Accounting::new(&hooks, base, None, Some("text/html"));
        acc.finish_framer(ms(base, 11));
        let out = acc.close(true, false, None);
        assert_ne!(out.facts.kind, Some(FailureKind::NotStreaming));
    }

    /// Issue 18: each window edge with a token 1 µs and 1 ms on either side of it, and one on
    /// it. The window is [start, end] (both edges inclusive); a crediting bug of 1 µs or 1 ms at
    /// either edge changes the count.
    #[test]
    fn window_edges_to_the_microsecond_and_the_millisecond() {
        let base = Instant::now();
        let (start_us, end_us) = (100_000u64, 300_000u64);
        let w = WindowClock::new(base);
        w.end_ns.store(end_us * 1_000, Ordering::SeqCst);
        w.start_ns.store(start_us * 1_000, Ordering::SeqCst);
        let hooks = StreamHooks {
            window: Some(&w),
            ..Default::default()
        };
        // (offset from the edge, µs; credited?)
        let around = |edge: u64, inside_after: bool| -> Vec<(u64, bool)> {
            [-1000i64, -1, 0, 1, 1000]
                .iter()
                .map(|&d| {
                    let inside = if d == 0 {
                        true
                    } else {
                        (d > 0) == inside_after
                    };
                    ((edge as i64 + d) as u64, inside)
                })
                .collect()
        };
        for (edge, inside_after) in [(start_us, true), (end_us, false)] {
            for (at_us, inside) in around(edge, inside_after) {
                let mut acc = Accounting::new(&hooks, base, None, Some("text/event-stream"));
                let at = base + Duration::from_micros(at_us);
                acc.push(format!("data: {TOK}\n\n").as_bytes(), at);
                acc.push(b"data: [DONE]\n\n", at);
                acc.finish_framer(at + Duration::from_micros(1));
                let out = acc.close(true, false, None);
                assert_eq!(out.record.output_tokens, 1);
                assert_eq!(
                    (out.window_tokens, out.window_token_events),
                    if inside { (1, 1) } else { (0, 0) },
                    "a token at {at_us} µs, window [{start_us}, {end_us}] µs"
                );
            }
        }
        // All ten in one stream: 6 inside (start, start + 1 µs, start + 1 ms, end − 1 ms,
        // end − 1 µs, end).
        let mut acc = Accounting::new(&hooks, base, None, Some("text/event-stream"));
        let mut all: Vec<u64> = around(start_us, true)
            .into_iter()
            .chain(around(end_us, false))
            .map(|x| x.0)
            .collect();
        all.sort_unstable();
        for &at_us in &all {
            let at = base + Duration::from_micros(at_us);
            acc.push(format!("data: {TOK}\n\n").as_bytes(), at);
        }
        let last = base + Duration::from_micros(*all.last().unwrap());
        acc.push(b"data: [DONE]\n\n", last);
        acc.finish_framer(last + Duration::from_micros(1));
        let out = acc.close(true, false, None);
        assert_eq!(out.record.output_tokens, 10);
        assert_eq!((out.window_tokens, out.window_token_events), (6, 6));
    }
}

#[cfg(test)]
mod wake_gate_tests {
    use super::*;
    use std::future::Future;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;
    use std::task::{Context, Poll};

    /// Pending until `ready` is set; counts its polls; wakes the last waker on `fire`.
    struct Probe {
        polls: Arc<AtomicUsize>,
        ready: Arc<AtomicBool>,
        waker: Arc<std::sync::Mutex<Option<std::task::Waker>>>,
    }

    impl Future for Probe {
        type Output = ();
        fn poll(self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            self.polls.fetch_add(1, Ordering::SeqCst);
            if self.ready.load(Ordering::SeqCst) {
                return Poll::Ready(());
            }
            *self.waker.lock().unwrap() = Some(cx.waker().clone());
            Poll::Pending
        }
    }

    struct CountWakes(AtomicUsize);
    impl futures_util::task::ArcWake for CountWakes {
        fn wake_by_ref(a: &Arc<Self>) {
            a.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn wake_gate_polls_only_after_a_wake_and_forwards_it() {
        let (polls, ready) = (
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        let inner_waker = Arc::new(std::sync::Mutex::new(None));
        let mut gate = WakeGate::new(Probe {
            polls: polls.clone(),
            ready: ready.clone(),
            waker: inner_waker.clone(),
        });
        let task = Arc::new(CountWakes(AtomicUsize::new(0)));
        let waker = futures_util::task::waker(task.clone());
        let mut cx = Context::from_waker(&waker);
        let mut gate = std::pin::Pin::new(&mut gate);
        // first poll reaches the inner future
        assert!(gate.as_mut().poll(&mut cx).is_pending());
        assert_eq!(polls.load(Ordering::SeqCst), 1);
        // no wake-up: not polled again
        for _ in 0..5 {
            assert!(gate.as_mut().poll(&mut cx).is_pending());
        }
        assert_eq!(polls.load(Ordering::SeqCst), 1);
        // the inner future's wake-up reaches the task and lets the next poll through
        ready.store(true, Ordering::SeqCst);
        inner_waker.lock().unwrap().take().unwrap().wake();
        assert_eq!(task.0.load(Ordering::SeqCst), 1);
        assert!(gate.as_mut().poll(&mut cx).is_ready());
        assert_eq!(polls.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn wake_gate_rearm_forces_a_poll_and_a_new_task_waker_is_registered() {
        let (polls, ready) = (
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        let inner_waker = Arc::new(std::sync::Mutex::new(None));
        let mut gate = WakeGate::new(Probe {
            polls: polls.clone(),
            ready: ready.clone(),
            waker: inner_waker.clone(),
        });
        let (t1, t2) = (
            Arc::new(CountWakes(AtomicUsize::new(0))),
            Arc::new(CountWakes(AtomicUsize::new(0))),
        );
        let (w1, w2) = (
            futures_util::task::waker(t1.clone()),
            futures_util::task::waker(t2.clone()),
        );
        assert!(std::pin::Pin::new(&mut gate)
            .poll(&mut Context::from_waker(&w1))
            .is_pending());
        let _reset_here = gate.rearm();
        assert!(std::pin::Pin::new(&mut gate)
            .poll(&mut Context::from_waker(&w1))
            .is_pending());
        assert_eq!(polls.load(Ordering::SeqCst), 2);
        // polled from another task (its waker changed), then woken: the new task is woken
        assert!(std::pin::Pin::new(&mut gate)
            .poll(&mut Context::from_waker(&w2))
            .is_pending());
        assert_eq!(polls.load(Ordering::SeqCst), 2);
        inner_waker.lock().unwrap().take().unwrap().wake();
        assert_eq!(
            (t1.0.load(Ordering::SeqCst), t2.0.load(Ordering::SeqCst)),
            (0, 1)
        );
    }
}

#[cfg(test)]
mod done_tests {
    //! The end of a stream at `data: [DONE]` (issue 17), on loopback servers.

    use super::*;

    const TOK: &str = r#"{"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}]}"#;

    fn ms(base: Instant, m: u64) -> Instant {
        base + Duration::from_millis(m)
    }

    /// A loopback keep-alive server for one connection: answers each request on it with the
    /// response that `answer(k)` writes (k = 0, 1, ...). Returns the URL and how many requests
    /// it read on that connection.
    fn keep_alive_server(
        answer: impl Fn(usize, &mut std::net::TcpStream) + Send + 'static,
    ) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        use std::io::Read;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let served = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = served.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let mut s = conn;
                let mut k = 0;
                loop {
                    let mut req = Vec::new();
                    let mut b = [0u8; 4096];
                    while !req.ends_with(b"}") {
                        match s.read(&mut b) {
                            Ok(n) if n > 0 => req.extend_from_slice(&b[..n]),
                            _ => break,
                        }
                    }
                    if !req.ends_with(b"}") {
                        break;
                    }
                    count.fetch_add(1, Ordering::SeqCst);
                    answer(k, &mut s);
                    k += 1;
                }
            }
        });
        (url, served)
    }

    fn sse_chunk(s: &mut std::net::TcpStream, data: &str) {
        use std::io::Write;
        let _ = write!(s, "{:x}\r\n{data}\r\n", data.len());
        let _ = s.flush();
    }

    fn three_tokens_and_done(s: &mut std::net::TcpStream) {
        use std::io::Write;
        let _ = write!(
            s,
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        );
        for _ in 0..3 {
            sse_chunk(s, &format!("data: {TOK}\n\n"));
        }
        sse_chunk(s, "data: [DONE]\n\n");
    }

    fn client_for(url: &str) -> HttpClient {
        let t = crate::Target::from_url(url, None, crate::Endpoint::Chat).unwrap();
        HttpClient::new(t).unwrap()
    }

    /// The request ends at `data: [DONE]`; a body held open after it is not waited for, what
    /// comes after `[DONE]` is not counted, and the half-read connection is never reused
    /// (issue 17: the run used to wait for the idle timeout).
    #[test]
    fn done_ends_the_request_and_a_held_body_is_not_reused() {
        let (url, served) = keep_alive_server(|_, s| {
            three_tokens_and_done(s);
            std::thread::sleep(Duration::from_millis(1500));
            sse_chunk(s, &format!("data: {TOK}\n\n"));
            sse_chunk(s, "");
        });
        let client = client_for(&url);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let mut slot = None;
            let t0 = Instant::now();
            let out = run_stream(
                &client,
                &mut slot,
                "/v1/chat/completions",
                Bytes::from_static(b"{\"max_tokens\":16}"),
                StreamHooks::default(),
            )
            .await;
            let took = t0.elapsed();
            assert!(out.record.completed, "{:?}", out.record.error);
            assert_eq!(out.record.output_tokens, 3);
            assert!(
                took < Duration::from_millis(1000),
                "waited {took:?} after [DONE]"
            );
            assert!(
                out.record.end_at < t0 + Duration::from_millis(1000),
                "the request ends at [DONE]"
            );
            assert!(
                slot.is_none(),
                "a connection whose body was not read to its end is not reused"
            );
        });
        assert_eq!(served.load(Ordering::SeqCst), 1);
    }

    /// A body that ends right after `[DONE]` (the terminator in its own write) keeps its
    /// connection: the next request goes over it (keep-alive is not lost by ending at [DONE]).
    #[test]
    fn body_end_right_after_done_keeps_the_connection() {
        let (url, served) = keep_alive_server(|_, s| {
            three_tokens_and_done(s);
            std::thread::sleep(Duration::from_millis(5));
            sse_chunk(s, "");
        });
        let client = client_for(&url);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let mut slot = None;
            for _ in 0..2 {
                let out = run_stream(
                    &client,
                    &mut slot,
                    "/v1/chat/completions",
                    Bytes::from_static(b"{\"max_tokens\":16}"),
                    StreamHooks::default(),
                )
                .await;
                assert!(out.record.completed, "{:?}", out.record.error);
                assert_eq!(out.record.output_tokens, 3);
                assert!(slot.is_some(), "the drained connection is kept");
            }
        });
        // both requests on the first connection
        assert_eq!(served.load(Ordering::SeqCst), 2);
    }

    /// Events in the same read after `[DONE]` are not counted.
    #[test]
    fn events_after_done_in_the_same_read_are_ignored() {
        let base = Instant::now();
        let hooks = StreamHooks::default();
        let mut acc = Accounting::new(&hooks, base, None, Some("text/event-stream"));
        acc.push(
            format!("data: {TOK}\n\ndata: [DONE]\n\ndata: {TOK}\n\ndata: {TOK}\n\n").as_bytes(),
            ms(base, 5),
        );
        assert!(acc.done());
        acc.finish_framer(ms(base, 6));
        let out = acc.close(true, false, None);
        assert_eq!(out.record.output_tokens, 1);
        assert_eq!(out.facts.events_after_done, 2);
        assert_eq!(out.record.end_at, ms(base, 5), "ends at the [DONE] arrival");
    }
}
