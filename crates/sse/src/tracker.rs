//! Per-request token accounting and timing (pure: the caller supplies every `Instant`).
//!
//! Definitions follow the seed tool's per-request sample (seed spec §4.1,
//! `shared/reference/llm-decode-bench-spec.md`), with the corrections listed on
//! [`RequestTracker`]: tokens are counted from cumulative usage when the server sends it (several
//! tokens per chunk under speculative decoding), otherwise one per token event.

use std::time::Instant;

use crate::decode::{decode_event, Chunk, Decoded, Timings};
use crate::framer::SseEvent;

/// Error message of a request whose body ended normally without any output token.
pub const ERR_NO_OUTPUT: &str = "stream ended without any output token";
/// Error message prefix of a request whose token events arrived while the server's cumulative
/// `usage.completion_tokens` stayed at 0: output arrived, but its count cannot be trusted (not
/// [`ERR_NO_OUTPUT`]; issue 17). The full message adds the number of token events.
pub const ERR_USAGE_ZERO: &str =
    "usage_implausible: token events arrived but usage.completion_tokens stayed 0";
/// Error message of a request whose `usage.completion_tokens` was present but no token count
/// (negative, fractional or beyond 2^64; [`crate::Usage::completion_tokens_invalid`]): a server
/// that sends it cannot be counted by its usage, and its value is not merely missing.
pub const ERR_USAGE_INVALID: &str =
    "usage_implausible: usage.completion_tokens was not a token count (negative, fractional or beyond 2^64)";
/// Error message of a request whose body ended normally after tokens but without `[DONE]` and
/// without a `finish_reason`.
pub const ERR_NO_DONE: &str = "stream ended before [DONE]";
/// Error message of a request whose body was interrupted (transport error) before `[DONE]`, when no
/// other error was recorded. Callers usually replace it with the transport error text.
pub const ERR_INTERRUPTED: &str = "stream interrupted before [DONE]";

/// Per-request token accounting and timing.
///
/// Feed it every decoded payload of one response, in arrival order, with the payload's arrival
/// time ([`SseEvent::at`]); then [`finish`](Self::finish) it into a [`RequestRecord`]. It never
/// reads a clock.
///
/// Rules (seed spec §4.1, made exact):
/// * A **token event** is a chunk with [`Chunk::token_event`] (non-empty content, reasoning or
///   tool calls). Role-only chunks, `content: ""` / `null`, usage-only chunks, comments and
///   `[DONE]` are never token events.
/// * The **counted total** starts at 0. A token event without usage adds exactly 1. Any event
///   carrying `usage.completion_tokens = u` sets `total = max(total, u)`: usage is cumulative and is
///   never summed, so totals never decrease (vLLM speculative decoding 3→5→7 counts 7).
/// * **Token times come from token events only.** A *timed event* is a token event, or an
///   in-progress choice chunk (a choice, no `finish_reason`, no finish seen before) whose usage
///   raised the counted total — a token whose text is empty (pitfall 12's caveat: with continuous
///   usage, `""` can be a real token). Usage-only chunks (`choices: []` or no choices), finish
///   chunks without token text and anything after the finish chunk **correct the count but never
///   a time**: servers send the final usage in a separate chunk, some after the finish chunk,
///   and often later than the last token (issue 8).
/// * **First token time** = arrival of the first timed event. **Second token time** = arrival of
///   the first timed event at which the counted total was ≥ 2 (equal to the first with
///   multi-token chunks; `None` for a one-token-event answer, even when a final usage says 2).
///   **Last token time** = arrival of the last timed event.
/// * **Non-cumulative usage** ([`RequestRecord::nonmonotonic_usage`]: a value below an earlier
///   one, or below the token events so far, vLLM #9357) is not a count at all: at
///   [`finish`](RequestTracker::finish) the request is recounted one token per timed event, raised
///   only by a usage value from an untimed chunk (the final usage-only chunk), and the second
///   token time is the second timed event. When that final value equals the sum of the
///   per-chunk values (per-delta usage: 2, 2, 2, then 6), each event is credited its own value. Callers that credited tokens live recount them from
///   [`RequestRecord::timed_events`].
/// * **Continuous usage**: at least 2 token events, every token event carried
///   `usage.completion_tokens`, and the values are consistent with cumulative counting (see
///   [`RequestRecord::nonmonotonic_usage`]).
#[derive(Clone, Debug)]
pub struct RequestTracker {
    sent_at: Instant,
    total: u64,
    first_token_at: Option<Instant>,
    second_token_at: Option<Instant>,
    last_token_at: Option<Instant>,
    first_token_event_at: Option<Instant>,
    prev_token_event_at: Option<Instant>,
    last_token_event_at: Option<Instant>,
    first_content_at: Option<Instant>,
    token_events: u64,
    usage_token_events: u64,
    reasoning_token_events: u64,
    last_usage: Option<u64>,
    max_usage: Option<u64>,
    max_untimed_usage: Option<u64>,
    nonmonotonic_usage: bool,
    prompt_tokens: Option<u64>,
    cached_tokens: Option<u64>,
    reasoning_tokens: Option<u64>,
    untimed_tokens: u64,
    finish_reason: Option<String>,
    finish_at: Option<Instant>,
    timings: Option<Timings>,
    done: bool,
    error: Option<String>,
    response_id: Option<String>,
    timed_events: Vec<TimedEvent>,
    /// `usage.completion_tokens` of each timed event (`u32::MAX`: none), kept so per-delta
    /// usage confirmed by the final total can be credited where it arrived.
    event_usage: Vec<u32>,
}

/// One timed event of a request (a token event, or an in-progress usage growth; see
/// [`RequestTracker`]): when it arrived and how many tokens it added to the counted total.
///
/// The gaps between consecutive entries are the request's inter-token gaps, chunk-aware: an
/// event that added `tokens = k` stands for `k` tokens that arrived together, so its gap counts
/// as `k` per-token gaps of `gap / k` each (the per-token ITL of a chunk, issue 19).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimedEvent {
    /// Arrival after the request's send time ([`RequestRecord::sent_at`]), ns.
    pub after_sent_ns: u64,
    /// Tokens the event added to the counted total (0 for a token event whose cumulative usage
    /// did not grow, for example a repeated usage value), tokens.
    pub tokens: u64,
}

impl RequestTracker {
    /// A tracker for a request sent at `sent_at` (monotonic time taken just before the request was
    /// written; the TTFT reference, seed spec §4.1 `t0`).
    pub fn new(sent_at: Instant) -> Self {
        RequestTracker {
            sent_at,
            total: 0,
            first_token_at: None,
            second_token_at: None,
            last_token_at: None,
            first_token_event_at: None,
            prev_token_event_at: None,
            last_token_event_at: None,
            first_content_at: None,
            token_events: 0,
            usage_token_events: 0,
            reasoning_token_events: 0,
            last_usage: None,
            max_usage: None,
            max_untimed_usage: None,
            nonmonotonic_usage: false,
            prompt_tokens: None,
            cached_tokens: None,
            reasoning_tokens: None,
            untimed_tokens: 0,
            finish_reason: None,
            finish_at: None,
            timings: None,
            done: false,
            error: None,
            response_id: None,
            timed_events: Vec::new(),
            event_usage: Vec::new(),
        }
    }

    /// Apply one decoded payload that arrived at `at`. Returns how many tokens this event added to
    /// the counted total (0 for non-token events, 1 for a token event without usage, the usage
    /// growth for an event with usage — possibly several under speculative decoding).
    ///
    /// * [`Decoded::Done`] marks the stream done (`[DONE]` seen).
    /// * [`Decoded::Error`] fails the request with `"stream error: <message> (<code>)"`; the first
    ///   error is kept.
    /// * [`Decoded::Malformed`] fails the request with `"malformed SSE payload: <reason>"`, except
    ///   an empty / whitespace-only payload, which is ignored.
    pub fn apply(&mut self, d: &Decoded<'_>, at: Instant) -> u64 {
        match d {
            Decoded::Chunk(c) => self.apply_chunk(c, at),
            Decoded::Done => {
                self.done = true;
                0
            }
            Decoded::Error { message, code } => {
                if self.error.is_none() {
                    // server-supplied text: no control characters (terminal escapes) and at
                    // most 300 characters reach the results and the terminal
                    let message = clean_text(message);
                    self.error = Some(match code {
                        Some(code) => format!("stream error: {message} ({})", clean_text(code)),
                        None => format!("stream error: {message}"),
                    });
                }
                0
            }
            Decoded::Malformed { reason } => {
                if !d.is_empty_payload() && self.error.is_none() {
                    self.error = Some(format!("malformed SSE payload: {}", clean_text(reason)));
                }
                0
            }
        }
    }

    /// Decode `ev` with [`decode_event`] (so `event: error` fails the request) and
    /// [`apply`](Self::apply) it at `ev.at`. Returns the tokens added.
    pub fn apply_event(&mut self, ev: &SseEvent<'_>) -> u64 {
        self.apply(&decode_event(ev), ev.at)
    }

    fn apply_chunk(&mut self, c: &Chunk<'_>, at: Instant) -> u64 {
        let finished_before = self.finish_reason.is_some();
        if self.response_id.is_none() {
            if let Some(id) = c.id.as_deref().filter(|s| !s.is_empty()) {
                self.response_id = Some(id.to_owned());
            }
        }
        if let Some(f) = c.finish_reason.as_deref().filter(|s| !s.is_empty()) {
            if self.finish_reason.as_deref() != Some(f) {
                self.finish_reason = Some(f.to_owned());
            }
            self.finish_at.get_or_insert(at);
        }
        if c.timings.is_some() {
            self.timings = c.timings;
        }
        if c.usage.is_some_and(|u| u.completion_tokens_invalid) && self.error.is_none() {
            self.error = Some(ERR_USAGE_INVALID.to_owned());
        }
        let usage_completion = c.usage.and_then(|u| u.completion_tokens);
        if let Some(u) = c.usage {
            self.prompt_tokens = u.prompt_tokens.or(self.prompt_tokens);
            self.cached_tokens = u.cached_tokens.or(self.cached_tokens);
            self.reasoning_tokens = u.reasoning_tokens.or(self.reasoning_tokens);
        }

        let before = self.total;
        if c.token_event {
            self.token_events += 1;
            if self.first_token_event_at.is_none() {
                self.first_token_event_at = Some(at);
            }
            self.prev_token_event_at = self.last_token_event_at;
            self.last_token_event_at = Some(at);
            if c.reasoning_only {
                self.reasoning_token_events += 1;
            } else if self.first_content_at.is_none() {
                self.first_content_at = Some(at);
            }
            if usage_completion.is_some() {
                self.usage_token_events += 1;
            } else {
                self.total += 1;
            }
        }
        if let Some(u) = usage_completion {
            if self.max_usage.is_some_and(|m| u < m) {
                self.nonmonotonic_usage = true; // decreased: per-delta counts (vLLM #9357)
            }
            if c.token_event && u < self.token_events {
                // cumulative usage cannot be below the number of token events so far:
                // the values are per-delta (vLLM #9357, e.g. 1, 1, 1, ...)
                self.nonmonotonic_usage = true;
            }
            self.max_usage = Some(self.max_usage.map_or(u, |m| m.max(u)));
            self.last_usage = Some(u);
            self.total = self.total.max(u);
        }
        let added = self.total - before;
        let in_progress = c.has_choice && c.finish_reason.is_none() && !finished_before;
        let timed = c.token_event || (added > 0 && in_progress);
        // The first text comes without usage growth after text-less chunks whose usage grew:
        // the tokens counted on those chunks arrived with this text (break-it round 8: an
        // empty `"content": ""` chunk with usage 1 at once, the text 0.5 s later, timed TTFT
        // at 2 ms and a max_tokens = 1 prefill at 111 x its rate). A partial UTF-8 first token
        // (vLLM: an empty chunk, then the next token's text with usage grown) is not this.
        let mut credited = added;
        if c.token_event && added == 0 && self.token_events == 1 && !self.timed_events.is_empty() {
            credited = self.timed_events.iter().map(|e| e.tokens).sum();
            self.timed_events.clear();
            self.event_usage.clear();
            self.first_token_at = None;
            self.second_token_at = None;
        }
        if timed {
            self.timed_events.push(TimedEvent {
                after_sent_ns: at.saturating_duration_since(self.sent_at).as_nanos() as u64,
                tokens: credited,
            });
            self.event_usage
                .push(usage_completion.map_or(u32::MAX, |u| u.min(u32::MAX as u64 - 1) as u32));
            if self.first_token_at.is_none() {
                self.first_token_at = Some(at);
            }
            self.last_token_at = Some(at);
            if self.second_token_at.is_none() && self.total >= 2 {
                self.second_token_at = Some(at);
            }
        } else if added > 0 {
            self.untimed_tokens += added;
        }
        if !timed {
            if let Some(u) = usage_completion {
                self.max_untimed_usage = Some(self.max_untimed_usage.map_or(u, |m| m.max(u)));
            }
        }
        added
    }

    /// Non-cumulative usage (see [`RequestRecord::nonmonotonic_usage`]): the per-chunk values
    /// say nothing about when tokens arrived (a stream whose usage counts down from 20 would
    /// credit all 20 tokens to its first chunk), so the request is recounted one token per timed
    /// event, the chunk fallback of seed spec §4.1. A usage value that came on an untimed chunk
    /// (the final usage-only chunk, where a server that miscounts per chunk usually sends the
    /// true total) still raises the total, as untimed tokens.
    ///
    /// **Per-delta usage confirmed by the final total**: when every timed event carried usage and
    /// the final untimed usage equals the sum of those values (2, 2, 2, then 6: each chunk
    /// counted its own tokens), each event is credited its own value instead, so multi-token
    /// per-delta chunks are neither undercounted nor credited at the end.
    fn count_by_events(&mut self) {
        let sum: u64 = self.event_usage.iter().map(|&u| u as u64).sum();
        let per_delta = !self.event_usage.is_empty()
            && self.event_usage.iter().all(|&u| u != u32::MAX)
            && self.max_untimed_usage == Some(sum);
        let mut total = 0;
        self.second_token_at = None;
        for (e, &u) in self.timed_events.iter_mut().zip(&self.event_usage) {
            e.tokens = if per_delta { u as u64 } else { 1 };
            total += e.tokens;
            if total >= 2 && self.second_token_at.is_none() {
                self.second_token_at =
                    Some(self.sent_at + std::time::Duration::from_nanos(e.after_sent_ns));
            }
        }
        self.total = total.max(self.max_untimed_usage.unwrap_or(0));
        self.untimed_tokens = self.total - total;
    }

    /// Counted output tokens so far (never decreases). Units: tokens.
    pub fn tokens(&self) -> u64 {
        self.total
    }

    /// Arrival of the first output token (see the type-level definition), if any yet.
    pub fn first_token_at(&self) -> Option<Instant> {
        self.first_token_at
    }

    /// Arrival of the last timed event (token event, or in-progress usage growth), if any yet.
    /// Tokens counted by usage-only chunks belong to this time.
    pub fn last_token_at(&self) -> Option<Instant> {
        self.last_token_at
    }

    /// Number of token events (chunks with token text) so far.
    pub fn token_events(&self) -> u64 {
        self.token_events
    }

    /// Arrival of the most recent token event, if any.
    pub fn last_token_event_at(&self) -> Option<Instant> {
        self.last_token_event_at
    }

    /// Arrival of the token event before the most recent one, if any (the pair gives the latest
    /// chunk gap).
    pub fn previous_token_event_at(&self) -> Option<Instant> {
        self.prev_token_event_at
    }

    /// The last `usage.completion_tokens` seen, if any. Units: tokens.
    pub fn usage_completion_tokens(&self) -> Option<u64> {
        self.last_usage
    }

    /// `true` once `[DONE]` was seen.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// The first in-stream error (error payload or malformed payload), if any.
    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    /// Close the request at `end` (monotonic time the body ended or was cut).
    ///
    /// * `clean_eof`: the body ended normally (no transport error, not cancelled).
    /// * `cancelled`: the caller cut the stream (measurement window closed). A cancelled request is
    ///   never completed and the end-of-stream checks below are not applied (a partial request is
    ///   not an error); an error payload received before the cut is still reported.
    ///
    /// Outcome when not cancelled: an in-stream error → failed; otherwise, if no output token was
    /// counted → failed with [`ERR_USAGE_ZERO`] when token events arrived (their usage said 0),
    /// else with [`ERR_NO_OUTPUT`] (covers `data: [DONE]` alone and role-then-`[DONE]`);
    /// otherwise `[DONE]` seen → completed; otherwise a clean end with a `finish_reason` → completed
    /// (TGI style); a clean end without either → failed with [`ERR_NO_DONE`]; an interrupted body
    /// → failed with [`ERR_INTERRUPTED`].
    pub fn finish(mut self, end: Instant, clean_eof: bool, cancelled: bool) -> RequestRecord {
        // usage that never left 0 is no per-delta count but no count at all: ERR_USAGE_ZERO below
        if self.nonmonotonic_usage && self.max_usage.is_some_and(|m| m > 0) {
            self.count_by_events();
        }
        let mut error = self.error;
        let mut completed = false;
        if !cancelled && error.is_none() {
            if self.total == 0 && self.token_events > 0 {
                error = Some(format!(
                    "{ERR_USAGE_ZERO} ({} token events)",
                    self.token_events
                ));
            } else if self.total == 0 {
                error = Some(ERR_NO_OUTPUT.to_owned());
            } else if self.done || (clean_eof && self.finish_reason.is_some()) {
                completed = true;
            } else if clean_eof {
                error = Some(ERR_NO_DONE.to_owned());
            } else {
                error = Some(ERR_INTERRUPTED.to_owned());
            }
        }
        // Recounted (non-cumulative) usage: its per-chunk values are no total to compare.
        let usage_below_count =
            !self.nonmonotonic_usage && self.last_usage.is_some_and(|u| u < self.total);
        // SGLang's flat `usage.reasoning_tokens` has been seen above the completion total:
        // reasoning is part of the output, never more than all of it.
        let reasoning_tokens_clamped = self.reasoning_tokens.is_some_and(|r| r > self.total);
        let reasoning_tokens = self.reasoning_tokens.map(|r| r.min(self.total));
        let continuous_usage = self.token_events >= 2
            && self.usage_token_events == self.token_events
            && !self.nonmonotonic_usage;
        RequestRecord {
            sent_at: self.sent_at,
            first_token_at: self.first_token_at,
            second_token_at: self.second_token_at,
            last_token_at: self.last_token_at,
            first_token_event_at: self.first_token_event_at,
            last_token_event_at: self.last_token_event_at,
            first_content_at: self.first_content_at,
            end_at: end,
            output_tokens: self.total,
            counted_tokens: self.total,
            usage_completion_tokens: self.last_usage,
            token_events: self.token_events,
            usage_token_events: self.usage_token_events,
            reasoning_token_events: self.reasoning_token_events,
            continuous_usage,
            nonmonotonic_usage: self.nonmonotonic_usage,
            usage_below_count,
            prompt_tokens: self.prompt_tokens,
            cached_tokens: self.cached_tokens,
            reasoning_tokens,
            reasoning_tokens_clamped,
            untimed_tokens: self.untimed_tokens,
            finish_reason: self.finish_reason,
            finish_at: self.finish_at,
            timings: self.timings,
            done: self.done,
            completed,
            cancelled,
            error,
            response_id: self.response_id,
            timed_events: self.timed_events,
        }
    }
}

/// The outcome of one streamed request: timestamps (monotonic `Instant`s supplied by the caller),
/// token counts (tokens) and status. Derived metrics are methods returning seconds or tokens/s.
#[derive(Clone, Debug, PartialEq)]
pub struct RequestRecord {
    /// When the request was sent (seed spec §4.1 `t0`).
    pub sent_at: Instant,
    /// First output token (§4.1 `t1`): the first timed event (see [`RequestTracker`]). `None` if
    /// no token arrived, or only usage-only chunks counted tokens.
    pub first_token_at: Option<Instant>,
    /// First timed event at which the counted total was ≥ 2 (TTST reference, §4.1 `t2`).
    pub second_token_at: Option<Instant>,
    /// Last timed event (§4.1 `tL`). Never a usage-only chunk, the cancellation or close time.
    pub last_token_at: Option<Instant>,
    /// First token event (chunk with token text).
    pub first_token_event_at: Option<Instant>,
    /// Last token event (chunk with token text).
    pub last_token_event_at: Option<Instant>,
    /// First token event with answer content (not reasoning only): time to first answer content.
    pub first_content_at: Option<Instant>,
    /// When the body ended or was cut (the `end` given to [`RequestTracker::finish`]).
    pub end_at: Instant,
    /// Output tokens `N` (§4.1): the last usage `completion_tokens` when usage was seen and it is
    /// ≥ the counted total, else the counted total (then `usage_below_count` is set). Because
    /// usage only ever raises the counted total, this equals `counted_tokens`. With
    /// non-cumulative usage (`nonmonotonic_usage`) it is one per timed event, raised only by a
    /// usage-only chunk's value (see [`RequestTracker`]).
    pub output_tokens: u64,
    /// Counted total: max of the cumulative usage values and of one-per-token-event counting
    /// (one per timed event when usage was not cumulative).
    pub counted_tokens: u64,
    /// The last `usage.completion_tokens` seen in the stream, if any.
    pub usage_completion_tokens: Option<u64>,
    /// Number of token events (chunks with non-empty content, reasoning or tool calls).
    pub token_events: u64,
    /// Token events that carried `usage.completion_tokens`.
    pub usage_token_events: u64,
    /// Token events whose text was reasoning only.
    pub reasoning_token_events: u64,
    /// Every token event (≥ 2 of them) carried cumulative usage: per-token timing from usage is
    /// trustworthy (the seed's continuous-usage headline).
    pub continuous_usage: bool,
    /// Usage values were not cumulative: a value lower than an earlier usage value, or a token
    /// event whose usage was lower than the number of token events so far (per-delta counts, the
    /// vLLM #9357 bug).
    pub nonmonotonic_usage: bool,
    /// The last usage value was below the counted total (server usage undercounts the stream).
    pub usage_below_count: bool,
    /// `usage.prompt_tokens` from the last usage that had it; `None` when never reported.
    pub prompt_tokens: Option<u64>,
    /// `usage.prompt_tokens_details.cached_tokens` from the last usage that had it.
    pub cached_tokens: Option<u64>,
    /// Reasoning tokens from the last usage that had them
    /// (`usage.completion_tokens_details.reasoning_tokens`, else SGLang's flat
    /// `usage.reasoning_tokens`), clamped to `output_tokens`.
    pub reasoning_tokens: Option<u64>,
    /// The server's reasoning count exceeded the completion total and was clamped to it.
    pub reasoning_tokens_clamped: bool,
    /// Tokens counted by events that carry no time (usage-only chunks, finish chunks without
    /// text, usage after the finish chunk): part of `output_tokens`, never of a token time.
    pub untimed_tokens: u64,
    /// Last non-empty `finish_reason`.
    pub finish_reason: Option<String>,
    /// Arrival of the first chunk with a non-empty `finish_reason`. Not a token time (a finish
    /// chunk may carry no text); the prefill layer uses it for a one-token answer whose token
    /// had no text (`servebench-core` `prefill`).
    pub finish_at: Option<Instant>,
    /// Last llama.cpp `timings` object seen.
    pub timings: Option<Timings>,
    /// `[DONE]` was seen.
    pub done: bool,
    /// The request completed: not cancelled, no error, ≥ 1 output token, and `[DONE]` seen (or a
    /// clean end of body with a `finish_reason`).
    pub completed: bool,
    /// The caller cut the stream (window closed).
    pub cancelled: bool,
    /// Why the request failed; `None` for completed and for cancelled-without-error requests.
    pub error: Option<String>,
    /// First non-empty response `id`.
    pub response_id: Option<String>,
    /// Every timed event in arrival order (first = `first_token_at`, last = `last_token_at`),
    /// with the tokens each added. Untimed tokens (`untimed_tokens`) are in none of them.
    pub timed_events: Vec<TimedEvent>,
}

/// A server-supplied text for a message: control characters replaced by spaces, at most 300
/// characters.
fn clean_text(s: &str) -> String {
    let mut out: String = s
        .chars()
        .take(300)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if s.chars().nth(300).is_some() {
        out.push('…');
    }
    out
}

fn secs(from: Instant, to: Instant) -> f64 {
    to.saturating_duration_since(from).as_secs_f64()
}

impl RequestRecord {
    /// `true` when the request failed (`error` is set).
    pub fn failed(&self) -> bool {
        self.error.is_some()
    }

    /// Time to first token in seconds: `first_token_at − sent_at` (§4.1 `ttft = t1 − t0`).
    pub fn ttft_s(&self) -> Option<f64> {
        Some(secs(self.sent_at, self.first_token_at?))
    }

    /// Time to second token in seconds: `second_token_at − first_token_at` (§4.1 `t2 − t1`); needs
    /// ≥ 2 output tokens. 0 when the first chunk already carried ≥ 2 tokens.
    pub fn ttst_s(&self) -> Option<f64> {
        Some(secs(self.first_token_at?, self.second_token_at?))
    }

    /// Request latency in seconds: `last_token_at − sent_at` (§4.1 `tL − t0`); completed requests
    /// only.
    pub fn latency_s(&self) -> Option<f64> {
        if !self.completed {
            return None;
        }
        Some(secs(self.sent_at, self.last_token_at?))
    }

    /// Mean inter-token latency in seconds: `(last_token_at − first_token_at) / (output_tokens − 1)`
    /// (§4.1 ITL); needs `output_tokens ≥ 2` and `last > first`. Partial (cancelled) requests are
    /// allowed. The first token's wait (TTFT) is never part of it. A one-token-event answer has
    /// no ITL (`None`, never 0), whatever a later usage chunk says.
    pub fn itl_s(&self) -> Option<f64> {
        let (first, last) = (self.first_token_at?, self.last_token_at?);
        if self.output_tokens < 2 || last <= first {
            return None;
        }
        Some(secs(first, last) / (self.output_tokens - 1) as f64)
    }

    /// Output tokens that arrived in `[start, end]` (both edges included): the tokens of its
    /// timed events inside, plus a share of its untimed tokens. The rule of the sustained
    /// window's per-request credit, applied after the fact (steady-state spans, a count revised
    /// at finish). Units: tokens.
    ///
    /// Where the untimed tokens go:
    /// * **continuous usage** (usage on every token event): the few untimed tokens a final
    ///   usage-only chunk adds belong to the last token event's time (issue 8), so they count
    ///   when that time is inside;
    /// * **otherwise** (usage only at the end, or recounted per event): the final usage is the
    ///   total of tokens that came spread over every chunk (a speculative-decoding server's
    ///   chunks carry several), so the untimed tokens are spread over the timed ones in
    ///   proportion: `round(untimed × timed inside / timed)`. Crediting them at the last token
    ///   would put a request's pre-window tokens inside the window when it ends there
    ///   (break-it round 7: C = 2, 8 tokens per chunk, the window was credited 9% off).
    pub fn tokens_between(&self, start: Instant, end: Instant) -> u64 {
        let inside = |at: Instant| at >= start && at <= end;
        let timed_all: u64 = self.timed_events.iter().map(|e| e.tokens).sum();
        let timed: u64 = self
            .timed_events
            .iter()
            .filter(|e| inside(self.sent_at + std::time::Duration::from_nanos(e.after_sent_ns)))
            .map(|e| e.tokens)
            .sum();
        let untimed = if self.untimed_tokens == 0 {
            0
        } else if !self.continuous_usage && timed_all > 0 {
            // integer rounding of untimed × timed / timed_all (u128: no overflow)
            let num = self.untimed_tokens as u128 * timed as u128;
            ((num + timed_all as u128 / 2) / timed_all as u128) as u64
        } else {
            match self.last_token_at {
                Some(at) if inside(at) => self.untimed_tokens,
                _ => 0,
            }
        };
        timed + untimed
    }

    /// Every per-token gap of the request, chunk-aware: for each timed event after the first,
    /// `(gap to the previous timed event in ns / tokens, tokens)`; an event that added no token
    /// contributes its gap to the next one that did. Units: ns per token, tokens. The weighted
    /// mean of these over all events equals [`itl_s`](Self::itl_s) when no token was untimed
    /// and the first event carried one token.
    pub fn per_token_gaps_ns(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        let mut prev = self.timed_events.first().map(|e| e.after_sent_ns);
        self.timed_events.iter().skip(1).filter_map(move |e| {
            if e.tokens == 0 {
                return None;
            }
            let gap = e.after_sent_ns.saturating_sub(prev?);
            prev = Some(e.after_sent_ns);
            Some((gap / e.tokens, e.tokens))
        })
    }

    /// Mean gap between token events in seconds:
    /// `(last_token_event_at − first_token_event_at) / (token_events − 1)` (§4.1 chunk ITL); needs
    /// ≥ 2 token events. Larger than [`itl_s`](Self::itl_s) when chunks carry several tokens.
    pub fn chunk_itl_s(&self) -> Option<f64> {
        if self.token_events < 2 {
            return None;
        }
        let (first, last) = (self.first_token_event_at?, self.last_token_event_at?);
        Some(secs(first, last) / (self.token_events - 1) as f64)
    }

    /// Decode rate seen by this user in tokens/s: `1 / itl_s` (§4.1 `output_tps_per_user`).
    pub fn output_tps_per_user(&self) -> Option<f64> {
        let itl = self.itl_s()?;
        (itl > 0.0).then(|| 1.0 / itl)
    }

    /// End-to-end output rate in tokens/s: `output_tokens / (last_token_at − sent_at)`; completed
    /// requests only (§4.1 `e2e_output_tps_per_user`).
    pub fn e2e_output_tps_per_user(&self) -> Option<f64> {
        let latency = self.latency_s()?;
        (latency > 0.0 && self.output_tokens > 0).then(|| self.output_tokens as f64 / latency)
    }

    /// Time to first answer content in seconds: `first_content_at − sent_at` (for reasoning models
    /// this excludes the thinking phase; TTFT does not).
    pub fn ttfc_s(&self) -> Option<f64> {
        Some(secs(self.sent_at, self.first_content_at?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::decode;
    use std::time::Duration;

    /// Token events whose usage said 0 are not "no output" (issue 17).
    #[test]
    fn tokens_with_zero_usage_are_not_no_output() {
        let t0 = Instant::now();
        let mut t = RequestTracker::new(t0);
        let tok =
            r#"{"choices":[{"index":0,"delta":{"content":"a"}}],"usage":{"completion_tokens":0}}"#;
        for i in 1..=3 {
            t.apply(&decode(tok), t0 + Duration::from_millis(i));
        }
        t.apply(&decode("[DONE]"), t0 + Duration::from_millis(4));
        let r = t.finish(t0 + Duration::from_millis(5), true, false);
        let e = r.error.unwrap();
        assert!(e.starts_with(ERR_USAGE_ZERO), "{e}");
        assert!(e.contains("3 token events"), "{e}");
    }

    /// An in-stream error message cannot carry terminal escapes (issue 17).
    #[test]
    fn stream_error_text_has_no_control_characters() {
        let t0 = Instant::now();
        let mut t = RequestTracker::new(t0);
        t.apply(
            &decode(r#"{"error":{"message":"boom\u001b[2J\u0007","code":"x\u001b"}}"#),
            t0,
        );
        let e = t.error().unwrap().to_string();
        assert!(!e.chars().any(char::is_control), "{e:?}");
        assert!(e.starts_with("stream error: boom [2J"), "{e:?}");
    }
}
