//! Incremental Server-Sent Events framing.
//!
//! Follows the WHATWG HTML "event stream" interpretation rules
//! (<https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation>)
//! for the fields servebench needs (`data`, `event`), plus two robustness rules for real servers:
//! LF-only streams (events separated by a single `\n`) and a final event that is not followed by a
//! blank line. See [`SseFramer`].

use std::time::Instant;

/// One Server-Sent Event as dispatched by [`SseFramer`].
///
/// Borrowed from the framer's buffers (or the bytes of the current read); it is valid only for the
/// duration of the `on_event` callback. Copy out what must outlive it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SseEvent<'a> {
    /// The event type set by an `event:` line, if any (`None` when no `event:` line was given or its
    /// value was empty). Invalid UTF-8 is replaced lossily (U+FFFD).
    pub event: Option<&'a str>,
    /// The event's data: the values of all its `data:` lines joined with `'\n'` (WHATWG rule: the
    /// data buffer without its final line feed). Invalid UTF-8 is replaced lossily (U+FFFD).
    pub data: &'a str,
    /// Arrival time of the read that completed the event: the read holding the terminator of the
    /// blank line that dispatched it, or — for an event dispatched without a blank line (LF-only
    /// stream or end of body) — the read holding the terminator of its last `data:` line. A last
    /// line that was ended by the end of the body counts as completed at the `at` given to
    /// [`SseFramer::finish`]. This is a monotonic `Instant` supplied by the caller; the framer never
    /// reads a clock.
    pub at: Instant,
}

/// UTF-8 byte order mark, stripped from the start of the stream (WHATWG rule).
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Incremental SSE framer: bytes plus their arrival time in, [`SseEvent`]s out.
///
/// Framing rules (WHATWG event-stream interpretation plus robustness):
///
/// * a line ends with `\n`, `\r\n` or `\r`; a `\r` at the end of one read followed by `\n` at the
///   start of the next read is one line ending, not two;
/// * an empty line dispatches the pending event (nothing is dispatched when no `data:` line was
///   seen; the event type is reset either way);
/// * `data:` appends its value (with or without the single leading space) plus `'\n'` to the data
///   buffer; a line `data` without a colon appends an empty value;
/// * lines starting with `:` are comments and are ignored (keep-alive pings, `: OPENROUTER
///   PROCESSING`): they never produce an event;
/// * `event:` sets the event type; other fields (`id:`, `retry:`, unknown names) are ignored;
/// * a UTF-8 byte order mark at the very start of the stream is skipped;
/// * bytes may be split anywhere (inside a field name, inside `\r\n`, inside a multi-byte UTF-8
///   character): data is kept as bytes until dispatch; invalid UTF-8 is replaced lossily, never a
///   panic;
/// * **LF-only streams** (a single `\n` between events, as some proxies and log copies produce):
///   when a new `data:` or `event:` line starts while the pending data is a *single* `data:`
///   line holding a complete payload — it is `[DONE]`, or (after trimming ASCII whitespace) it
///   starts with `{` and ends with `}` — the pending event is dispatched first. Once an event
///   has two or more `data:` lines it is multi-line data and joins with `'\n'` until a blank
///   line, as the WHATWG rules say: a pretty-printed JSON object split over `data:` lines (whose
///   inner lines may end in `}`) is one event (issue 17);
/// * at the end of the body ([`finish`](Self::finish)) a pending event whose `data:` lines were
///   all terminated is dispatched. A final line that was not terminated is used only if it is a
///   `data:` line holding a complete payload (as above); otherwise it is discarded as truncated;
/// * a `data: [DONE]` line that starts an event is dispatched as soon as its line ends (the
///   end sentinel is final; a server may hold the connection open without the blank line).
///
/// The framer keeps its buffers between events and between requests (call
/// [`reset`](Self::reset) or [`finish`](Self::finish) to start a new body), so steady-state framing
/// allocates nothing.
#[derive(Debug)]
pub struct SseFramer {
    /// Bytes of a line that is not terminated yet (carried across reads).
    line: Vec<u8>,
    /// Data buffer: each `data:` value followed by `'\n'`. Empty ⇔ no `data:` line pending.
    data: Vec<u8>,
    /// Event type buffer.
    event: Vec<u8>,
    /// Arrival time of the read that terminated the last `data:` line of the pending event.
    data_at: Option<Instant>,
    /// `data:` lines of the pending event (the LF-only rule applies to one line only).
    data_lines: u32,
    /// Scratch for lossy UTF-8 conversion of the data.
    data_text: String,
    /// Scratch for lossy UTF-8 conversion of the event type.
    event_text: String,
    /// The previous read ended with `\r`: a `\n` at the start of the next read belongs to it.
    pending_lf: bool,
    /// No line has been processed yet (byte order mark check).
    at_start: bool,
    /// A line or an event exceeded [`MAX_EVENT_BYTES`]; its bytes were dropped.
    overflow: bool,
}

/// Largest line or event the framer buffers (16 MiB). A server that streams more without a line
/// break is broken (or hostile); the framer drops the bytes and reports
/// [`SseFramer::overflowed`] instead of growing without bound.
pub const MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

impl Default for SseFramer {
    fn default() -> Self {
        Self::new()
    }
}

impl SseFramer {
    /// A framer at the start of a body.
    pub fn new() -> Self {
        SseFramer {
            line: Vec::new(),
            data: Vec::new(),
            event: Vec::new(),
            data_at: None,
            data_lines: 0,
            data_text: String::new(),
            event_text: String::new(),
            pending_lf: false,
            at_start: true,
            overflow: false,
        }
    }

    /// True once a line or event exceeded [`MAX_EVENT_BYTES`] (the stream is unusable).
    pub fn overflowed(&self) -> bool {
        self.overflow
    }

    /// Forget any partial line or pending event and start a new body (buffers keep their capacity).
    pub fn reset(&mut self) {
        self.line.clear();
        self.data.clear();
        self.event.clear();
        self.data_at = None;
        self.data_lines = 0;
        self.pending_lf = false;
        self.at_start = true;
        self.overflow = false;
    }

    /// Feed the bytes of one read that arrived at `at`; `on_event` is called, in order, for every
    /// event completed by these bytes (zero or more).
    ///
    /// `at` is the caller's monotonic arrival time of this read (taken right after the read returned,
    /// before parsing). Events carry it as [`SseEvent::at`] (see there for LF-only events).
    pub fn push<F: FnMut(&SseEvent<'_>)>(&mut self, bytes: &[u8], at: Instant, mut on_event: F) {
        let mut rest = bytes;
        if self.pending_lf {
            match rest.first() {
                None => return,
                Some(b'\n') => {
                    rest = &rest[1..];
                    self.pending_lf = false;
                }
                Some(_) => self.pending_lf = false,
            }
        }
        while let Some(i) = memchr::memchr2(b'\n', b'\r', rest) {
            let is_cr = rest[i] == b'\r';
            if self.line.is_empty() {
                self.process_line(&rest[..i], at, &mut on_event);
            } else {
                let mut line = std::mem::take(&mut self.line);
                line.extend_from_slice(&rest[..i]);
                self.process_line(&line, at, &mut on_event);
                line.clear();
                self.line = line;
            }
            rest = &rest[i + 1..];
            if is_cr {
                match rest.first() {
                    Some(b'\n') => rest = &rest[1..],
                    Some(_) => {}
                    None => self.pending_lf = true,
                }
            }
        }
        self.line.extend_from_slice(rest);
        if self.line.len() > MAX_EVENT_BYTES || self.data.len() > MAX_EVENT_BYTES {
            self.overflow = true;
            self.line.clear();
            self.data.clear();
        }
    }

    /// End of body at `at`: dispatch a final event that was not followed by a blank line (see the
    /// type-level rules), then reset the framer for the next body.
    ///
    /// Call it only when the body ended (clean end of stream). A caller that cuts a stream
    /// (cancellation) may call [`reset`](Self::reset) instead; calling `finish` then is harmless too,
    /// because a truncated final line is discarded unless it holds a complete payload.
    pub fn finish<F: FnMut(&SseEvent<'_>)>(&mut self, at: Instant, mut on_event: F) {
        self.pending_lf = false;
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            let mut body: &[u8] = &line;
            if self.at_start && body.starts_with(BOM) {
                body = &body[BOM.len()..];
            }
            if let Some(value) = data_field_value(body) {
                if is_complete_payload(value) {
                    self.process_line(&line, at, &mut on_event);
                }
            }
            let mut line = line;
            line.clear();
            self.line = line;
        }
        if !self.data.is_empty() {
            let t = self.data_at.unwrap_or(at);
            self.dispatch(t, &mut on_event);
        }
        self.reset();
    }

    /// Interpret one complete line (without its terminator) that was completed by the read at `at`.
    fn process_line<F: FnMut(&SseEvent<'_>)>(
        &mut self,
        mut line: &[u8],
        at: Instant,
        on_event: &mut F,
    ) {
        if self.at_start {
            self.at_start = false;
            if line.starts_with(BOM) {
                line = &line[BOM.len()..];
            }
        }
        let Some(&first) = line.first() else {
            self.dispatch(at, on_event);
            return;
        };
        if first == b':' {
            return; // comment
        }
        let (field, value) = split_field(line);
        match field {
            b"data" => {
                self.dispatch_if_complete(on_event);
                self.data.extend_from_slice(value);
                self.data.push(b'\n');
                self.data_at = Some(at);
                self.data_lines = self.data_lines.saturating_add(1);
                if self.data_lines == 1 && value.trim_ascii() == b"[DONE]" {
                    // The OpenAI end sentinel is final: dispatched when its line ends, not at
                    // a blank line that a server holding the connection open may never send
                    // (break-it round 9: `data: [DONE]\n` then silence stalled the request).
                    self.dispatch(at, on_event);
                }
            }
            b"event" => {
                self.dispatch_if_complete(on_event);
                self.event.clear();
                self.event.extend_from_slice(value);
            }
            _ => {} // id, retry, unknown fields
        }
    }

    /// LF-only rule: dispatch the pending event when its data is one `data:` line that is
    /// already a complete payload.
    fn dispatch_if_complete<F: FnMut(&SseEvent<'_>)>(&mut self, on_event: &mut F) {
        if self.data_lines != 1 {
            return;
        }
        if let Some((_, pending)) = self.data.split_last() {
            if is_complete_payload(pending) {
                if let Some(t) = self.data_at {
                    self.dispatch(t, on_event);
                }
            }
        }
    }

    /// Dispatch the pending event (if any data was given) and clear the event buffers.
    fn dispatch<F: FnMut(&SseEvent<'_>)>(&mut self, at: Instant, on_event: &mut F) {
        if let Some((_, data_bytes)) = self.data.split_last() {
            let data: &str = match std::str::from_utf8(data_bytes) {
                Ok(s) => s,
                Err(_) => {
                    self.data_text.clear();
                    self.data_text
                        .push_str(&String::from_utf8_lossy(data_bytes));
                    &self.data_text
                }
            };
            let event: Option<&str> = if self.event.is_empty() {
                None
            } else {
                match std::str::from_utf8(&self.event) {
                    Ok(s) => Some(s),
                    Err(_) => {
                        self.event_text.clear();
                        self.event_text
                            .push_str(&String::from_utf8_lossy(&self.event));
                        Some(&self.event_text)
                    }
                }
            };
            on_event(&SseEvent { event, data, at });
        }
        self.data.clear();
        self.event.clear();
        self.data_at = None;
        self.data_lines = 0;
    }
}

/// Split `field:value` (value without the single leading space); a line without a colon is a field
/// name with an empty value.
fn split_field(line: &[u8]) -> (&[u8], &[u8]) {
    match memchr::memchr(b':', line) {
        Some(c) => {
            let value = &line[c + 1..];
            let value = value.strip_prefix(b" ").unwrap_or(value);
            (&line[..c], value)
        }
        None => (line, &[]),
    }
}

/// The value of a `data` line, or `None` for any other line.
fn data_field_value(line: &[u8]) -> Option<&[u8]> {
    if line.first() == Some(&b':') {
        return None;
    }
    let (field, value) = split_field(line);
    (field == b"data").then_some(value)
}

/// The cheap "complete payload" check of the LF-only rule: `[DONE]`, or a value that starts with
/// `{` and ends with `}` (ASCII whitespace around it ignored).
fn is_complete_payload(data: &[u8]) -> bool {
    let d = data.trim_ascii();
    d == b"[DONE]" || (d.len() >= 2 && d[0] == b'{' && d[d.len() - 1] == b'}')
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn collect(reads: &[&[u8]], base: Instant) -> Vec<(Option<String>, String, Duration)> {
        let mut f = SseFramer::new();
        let mut out = Vec::new();
        for (i, r) in reads.iter().enumerate() {
            let at = base + Duration::from_millis(i as u64);
            f.push(r, at, |e| {
                out.push((e.event.map(str::to_owned), e.data.to_owned(), e.at - base))
            });
        }
        let end = base + Duration::from_millis(reads.len() as u64);
        f.finish(end, |e| {
            out.push((e.event.map(str::to_owned), e.data.to_owned(), e.at - base))
        });
        out
    }

    #[test]
    fn crlf_split_across_reads_is_one_event() {
        let base = Instant::now();
        let ev = collect(&[b"data: A\r\n", b"data: B\r", b"data: C\r\n", b"\n"], base);
        assert_eq!(ev.len(), 1);
        assert_eq!(ev[0].1, "A\nB\nC");
        assert_eq!(ev[0].2, Duration::from_millis(3));
    }

    #[test]
    fn cr_only_lines() {
        let base = Instant::now();
        let ev = collect(&[b"data: x\r\rdata:y\r", b"\r"], base);
        assert_eq!(ev.len(), 2);
        assert_eq!(ev[0].1, "x");
        assert_eq!(ev[1].1, "y");
        assert_eq!(ev[1].2, Duration::from_millis(1));
    }

    #[test]
    fn fields_comments_and_event_names() {
        let base = Instant::now();
        let ev = collect(
            &[b": ping\n\nid: 7\nretry: 10\nevent: error\ndata\ndata:  two\nfoo: bar\n\n"],
            base,
        );
        assert_eq!(
            ev,
            vec![(Some("error".into()), "\n two".into(), Duration::ZERO)]
        );
    }

    #[test]
    fn event_without_data_is_not_dispatched_and_type_resets() {
        let base = Instant::now();
        let ev = collect(&[b"event: x\n\ndata: 1\n\n"], base);
        assert_eq!(ev, vec![(None, "1".into(), Duration::ZERO)]);
    }

    #[test]
    fn lf_only_dispatch_uses_line_arrival() {
        let base = Instant::now();
        let ev = collect(&[b"data: {\"a\":1}\n", b"data: [DONE]\n"], base);
        assert_eq!(ev.len(), 2);
        assert_eq!(ev[0], (None, "{\"a\":1}".into(), Duration::ZERO));
        // dispatched by finish(), completed by read 1
        assert_eq!(ev[1], (None, "[DONE]".into(), Duration::from_millis(1)));
    }

    #[test]
    fn unterminated_final_line() {
        let base = Instant::now();
        // the sentinel line alone, no blank line, the connection held open: dispatched at once
        let mut f = SseFramer::new();
        let mut got = Vec::new();
        f.push(b"data: {\"a\":1}\n\ndata: [DONE]\n", base, |e| {
            got.push(e.data.to_string())
        });
        assert_eq!(got, vec!["{\"a\":1}".to_string(), "[DONE]".to_string()]);
        // and the blank line that may follow adds nothing
        f.push(b"\n", base, |e| got.push(e.data.to_string()));
        assert_eq!(got.len(), 2);
        let ev = collect(&[b"data: [DONE]"], base);
        assert_eq!(ev, vec![(None, "[DONE]".into(), Duration::from_millis(1))]);
        let ev = collect(&[b"data: {\"a\":1}\n\ndata: {\"trunc"], base);
        assert_eq!(ev.len(), 1);
    }

    #[test]
    fn bom_and_invalid_utf8() {
        let base = Instant::now();
        let ev = collect(&[b"\xEF\xBB", b"\xBFdata: a\xFFb\n\n"], base);
        assert_eq!(ev.len(), 1);
        assert_eq!(ev[0].1, "a\u{FFFD}b");
    }

    /// WHATWG: every `data:` line of an event joins with `'\n'` until the blank line, also when
    /// an inner line of a pretty-printed JSON object ends in `}` (issue 17: the LF-only rule used
    /// to dispatch the first lines early as their own, malformed, event).
    #[test]
    fn multi_line_json_is_one_event() {
        let base = Instant::now();
        let body: &[u8] = b"data: {\ndata:   \"choices\": [{\"index\": 0, \"delta\": {\"content\": \"a\"}}],\ndata:   \"usage\": {\"completion_tokens\": 1}\ndata: }\n\n";
        let want = "{\n  \"choices\": [{\"index\": 0, \"delta\": {\"content\": \"a\"}}],\n  \"usage\": {\"completion_tokens\": 1}\n}";
        let ev = collect(&[body], base);
        assert_eq!(ev.len(), 1, "{ev:?}");
        assert_eq!(ev[0].1, want);
        // any split of the reads gives the same event
        for cut in 1..body.len() {
            let ev = collect(&[&body[..cut], &body[cut..]], base);
            assert_eq!(ev.len(), 1, "cut {cut}: {ev:?}");
            assert_eq!(ev[0].1, want, "cut {cut}");
        }
        // the LF-only rule still splits single complete lines
        let ev = collect(&[b"data: {\"a\":1}\ndata: {\"b\":2}\n"], base);
        assert_eq!(ev.len(), 2);
    }

    #[test]
    fn empty_reads_keep_pending_cr() {
        let base = Instant::now();
        let ev = collect(&[b"data: a\r", b"", b"\n", b"\n"], base);
        assert_eq!(ev.len(), 1);
        assert_eq!(ev[0].1, "a");
        assert_eq!(ev[0].2, Duration::from_millis(3));
    }
}
