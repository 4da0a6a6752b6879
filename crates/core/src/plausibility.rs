//! Plausibility checks: numbers a correct server cannot produce never pass as `ok`.
//!
//! Each check gives a typed [`Finding`]: a warning (the cell stays `ok`, the text goes to
//! `warnings`, the kind to `warning_kinds`) or `invalid` (status `invalid`, the text becomes
//! `status_reason`, the kind `error_kind`). The rules (also in docs/metrics.md):
//!
//! * **Completion tokens above `max_tokens`** (any request of the cell, final count): invalid
//!   `completion_above_max_tokens`.
//! * **A server that ignores `max_tokens`**: a stream whose counted tokens pass
//!   [`max_tokens_cut`](servebench_client::stream::max_tokens_cut) (2 × max_tokens + 16) is cut at once, so an endless stream ends; the
//!   request fails with `max_tokens_ignored` and the cell is invalid.
//! * **Usage faster than the stream**: a request whose counted tokens ever exceed
//!   [`MAX_TOKENS_PER_EVENT`] (64) × its token-carrying events so far (token events and chunks
//!   whose usage grew) plus one token per byte of text received
//!   ([`servebench_client::stream::usage_bound`]): invalid `usage_implausible`. Speculative decoding / MTP
//!   chunks carry a few tokens each (num_speculative_tokens + 1, typically ≤ 8), far below the
//!   bound; a server that merges many tokens' deltas into one chunk when it falls behind (vLLM
//!   under load) sends their text with them, which the per-byte allowance covers.
//! * **Usage the text cannot carry** (issue 17): a request whose output tokens (less the
//!   reasoning tokens the server reported) exceed 1 token per byte of its text plus one per
//!   delta chunk plus 8 ([`MAX_TOKENS_PER_TEXT_BYTE`], [`UNBACKED_TOKEN_SLACK`]; role,
//!   finish and usage-only chunks are not delta chunks; a tool-call chunk's payload counts as
//!   text): warning `usage_implausible` when any request of the cell does; more than
//!   [`UNBACKED_INVALID_FACTOR`] (1.5) times the text and chunk allowance, plus 8, on any
//!   request: invalid `usage_implausible`. Reasoning tokens the server reported but whose text
//!   never came (hidden reasoning) are the only tokens let past this bound, with a warning
//!   `usage_implausible`: the headline, per-token ITL and per-user tok/s then count tokens whose
//!   arrival no client saw.
//! * **Prompt truncation**: the server counted fewer than [`TRUNCATION_RATIO`] (50 %) of the
//!   prompt tokens servebench sent (exact `/tokenize` count or calibrated estimate): invalid
//!   `prompt_truncated`; with an uncalibrated estimate only a warning.
//! * **Requested vs real context**: measured prompt tokens differ from the requested context by
//!   more than [`CONTEXT_TOLERANCE`] (5 %), including a base prompt larger than the requested
//!   context: warning `context_mismatch`. Context 0 ("the base prompt only") is never flagged.
//! * **Stalls inside the window**: a silence between consecutive token arrivals of one request
//!   (or from its last token to its end) longer than max([`STALL_FACTOR`] (10) × the cell's
//!   typical chunk gap, [`STALL_FLOOR`] (1 s)) that overlaps the window is a stall. The typical
//!   chunk gap is the mean gap between token events of the cell's in-window requests, leaving out
//!   gaps over 1 s (so the stalls do not raise their own threshold); without such gaps, the
//!   cell's chunk-ITL p50. Any stall: warning `stream_stalls`; stalled stream-time above
//!   [`STALL_INVALID_FRACTION`] (50 %) of the stream-time in the window: invalid (the streams
//!   were silent for most of the window, so the throughput does not describe decode). Shorter
//!   stalls are real server behaviour (an engine starved of CPU pauses all its streams) and stay
//!   a warning with `stall_fraction`.
//! * **Tokens that all arrived in one read** (issue 17): at least half of the cell's requests of
//!   at least [`SINGLE_WRITE_MIN_TOKENS`] (16) output tokens had their first and last token
//!   arrive in the same read (TTFT = E2E, no ITL): warning `single_write` — the server or a proxy
//!   buffered the answers, so TTFT, ITL and per-stream rates are not a stream's. Publish gives
//!   such a row a non-`accepted` verdict. A minority is not flagged: a client descheduled for a
//!   whole short request (a busy load host) reads it in one go too, and the client-health
//!   evidence (tick lag, read delay) already speaks for that.
//! * **A final count above a continuous one** (issue 17): at least half of the eligible
//!   requests streamed a cumulative usage on every token chunk, then a final usage-only chunk
//!   added more than [`CONTINUOUS_USAGE_UNTIMED_SLACK`] (4) tokens that no chunk carried
//!   (1, 2, 3, 4, then 32): warning `usage_implausible`; publish gives the row a non-`accepted`
//!   verdict. A server that counts continuously has no tokens left for the end.
//! * **Per-stream speed beyond the bound** (issue 17): the median decode rate of the cell's
//!   requests (`output_tps_per_user` = 1 / ITL) exceeds [`MAX_TOK_S_PER_STREAM`] (5,000 tok/s, the
//!   registry's physical bound for one stream, which it applies to the row's median too): warning
//!   `implausible_speed`; publish gives the row a non-`accepted` verdict. One request read in a
//!   burst after a client pause is not the server's speed, so single outliers are not flagged.
//! * **Plain JSON answer to `stream: true`** and the timeouts are request failures
//!   ([`FailureKind`]) that invalidate the cell through the usual path.

use std::time::Instant;

use servebench_client::stream::{MAX_TOKENS_PER_EVENT, STALL_FLOOR};
use servebench_results::{format_context, CellResult, CellStatus, FailureKind};

/// A stall is a silence longer than this many typical chunk gaps.
pub const STALL_FACTOR: f64 = 10.0;
/// Stalled share of the window's stream-time above which a cell is invalid.
pub const STALL_INVALID_FRACTION: f64 = 0.5;
/// Measured / sent prompt tokens below this = truncation.
pub const TRUNCATION_RATIO: f64 = 0.5;
/// Relative difference of measured prompt tokens and requested context that is flagged.
pub const CONTEXT_TOLERANCE: f64 = 0.05;
/// Fewest output tokens of a request whose arrival in one read is flagged `single_write`
/// (shorter answers can fit one read legitimately, e.g. a few speculative-decoding chunks that
/// the client read together).
pub const SINGLE_WRITE_MIN_TOKENS: u64 = 16;
/// Fastest plausible decode rate of one stream, tok/s (the registry's
/// `validate::bounds::MAX_DECODE_TOK_S_PER_STREAM`).
pub const MAX_TOK_S_PER_STREAM: f64 = 5_000.0;

/// What the stream-timing checks need of one request.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StreamTiming {
    /// Output tokens.
    pub output_tokens: u64,
    /// First and last token arrived at the same instant (the same read).
    pub one_read: bool,
    /// Decode rate seen by the request, tok/s (1 / ITL), when it has an ITL.
    pub tps_per_user: Option<f64>,
    /// Bytes of output text the stream carried (content and reasoning).
    pub text_bytes: u64,
    /// Delta chunks of the stream (token events plus text-less delta chunks).
    pub delta_chunks: u64,
    /// Reasoning tokens the server reported (hidden reasoning carries no text).
    pub reasoning_tokens: Option<u64>,
    /// Every token event carried a cumulative `usage.completion_tokens`
    /// ([`RequestRecord::continuous_usage`](servebench_sse::RequestRecord::continuous_usage)).
    pub continuous_usage: bool,
    /// Tokens counted from chunks without a token time (the final usage-only chunk), tokens.
    pub untimed_tokens: u64,
    /// Tokens credited to the first token event, tokens.
    pub first_event_tokens: u64,
    /// Token events (chunks with a token time).
    pub token_events: u64,
    /// Bytes of text that came with the first token event (and any text before it), bytes;
    /// None when unknown.
    pub first_event_text_bytes: Option<u64>,
    /// When the first timed event carried no text (a text-less chunk whose usage grew) and at
    /// least two more followed: (gap from it to the next timed event, mean gap of the later
    /// events), s.
    pub textless_first: Option<(f64, f64)>,
}

/// A text-less first timed event whose gap to the next one is above this many times the
/// request's later mean gap, and above [`TEXTLESS_FIRST_MIN_GAP_S`], is flagged
/// ([`textless_first_finding`]).
pub const TEXTLESS_FIRST_GAP_FACTOR: f64 = 10.0;

/// Shortest first gap flagged after a text-less first event, s.
pub const TEXTLESS_FIRST_MIN_GAP_S: f64 = 0.05;

/// `(first gap, later mean gap)` of a request whose first timed event had no text
/// ([`StreamTiming::textless_first`]).
fn textless_first_gaps(r: &servebench_sse::RequestRecord) -> Option<(f64, f64)> {
    let first = r.first_token_at?;
    if r.first_token_event_at.is_some_and(|t| t <= first) {
        return None;
    }
    let ev = &r.timed_events;
    if ev.len() < 3 {
        return None;
    }
    let ns =
        |a: usize, b: usize| ev[b].after_sent_ns.saturating_sub(ev[a].after_sent_ns) as f64 / 1e9;
    Some((ns(0, 1), ns(1, ev.len() - 1) / (ev.len() - 2) as f64))
}

impl StreamTiming {
    /// What the checks need of one finished request and its stream facts.
    pub fn of(
        r: &servebench_sse::RequestRecord,
        f: &servebench_client::stream::StreamFacts,
    ) -> Self {
        StreamTiming {
            output_tokens: r.output_tokens,
            one_read: r.first_token_at.is_some() && r.first_token_at == r.last_token_at,
            tps_per_user: r.output_tps_per_user(),
            text_bytes: f.text_bytes,
            delta_chunks: f.delta_chunks,
            reasoning_tokens: r.reasoning_tokens,
            continuous_usage: r.continuous_usage,
            untimed_tokens: r.untimed_tokens,
            first_event_tokens: r.timed_events.first().map_or(0, |e| e.tokens),
            first_event_text_bytes: f.first_token_text_bytes,
            token_events: r.timed_events.len() as u64,
            textless_first: textless_first_gaps(r),
        }
    }
}

/// Untimed tokens a stream with continuous usage may add at its end before its final count is
/// flagged: the last token can come without text on the finish chunk, which is not timed.
pub const CONTINUOUS_USAGE_UNTIMED_SLACK: u64 = 4;

/// The request counted every token on its chunks, then its final usage added more than
/// [`CONTINUOUS_USAGE_UNTIMED_SLACK`] tokens that no chunk carried.
fn jumped_at_end(r: &StreamTiming) -> bool {
    r.continuous_usage && r.untimed_tokens > CONTINUOUS_USAGE_UNTIMED_SLACK
}

/// The request's first token event carried at least half of its tokens although more events
/// followed: a prefill step yields one token (speculative decoding adds drafts only from the
/// next step), so the usage was front-loaded or the server held its first tokens back; TTFT
/// then times a burst and TTST is 0 by definition.
fn front_loaded(r: &StreamTiming) -> bool {
    r.token_events >= 2 && r.first_event_tokens >= 2 && 2 * r.first_event_tokens >= r.output_tokens
}

/// Tokens a first chunk may carry beyond [`MAX_TOKENS_PER_TEXT_BYTE`] per byte of its text
/// (special tokens without text merged into it).
pub const FIRST_CHUNK_TOKEN_SLACK: u64 = 4;

/// A request whose first token event, with more events after it, was credited more tokens
/// than its text can carry (more than [`MAX_TOKENS_PER_TEXT_BYTE`] per byte plus
/// [`FIRST_CHUNK_TOKEN_SLACK`]), whatever share of the request's tokens that is: no buffered
/// burst (a server holding its first tokens back sends their text), only a count (break-it
/// round 9: "tok " credited 33 of 96 tokens read 81 tok/s for 49 that arrived). Hidden
/// reasoning carries no text and is not judged.
fn front_loaded_unbacked(r: &StreamTiming) -> bool {
    let Some(bytes) = r.first_event_text_bytes else {
        return false;
    };
    r.token_events >= 2
        && r.first_event_tokens >= 2
        && r.reasoning_tokens.is_none_or(|n| n == 0)
        && r.first_event_tokens as f64
            > MAX_TOKENS_PER_TEXT_BYTE * bytes as f64 + FIRST_CHUNK_TOKEN_SLACK as f64
}

/// Most output tokens per byte of text a stream can carry before its count is flagged: a
/// byte-level BPE token decodes to at least one byte, so a real stream stays at or below 1 (a
/// token without text — special, empty — comes as its own delta chunk and is allowed one each;
/// break-it round 7: at 2 per byte, usage growing by 9 per `"tok "` chunk passed silently).
pub const MAX_TOKENS_PER_TEXT_BYTE: f64 = 1.0;

/// Tokens a stream may count beyond its text and chunks (the end-of-sequence token on the
/// finish chunk, a stop string's tokens, whose text the server removes; special tokens merged
/// into a text chunk). Break-it round 7: at 16, two one-byte events and a usage of 16 read
/// `ok` at 7 × the true rate.
pub const UNBACKED_TOKEN_SLACK: u64 = 8;

/// A request whose visible tokens exceed this many times what its text and chunks can have
/// carried, plus [`UNBACKED_TOKEN_SLACK`] ([`far_unbacked`]), makes the cell `invalid`: the
/// headline would count tokens that never arrived (break-it round 6: 640 tokens claimed over
/// ten role-only chunks read `ok` at 11,200 tok/s; round 7: two lying requests of five gave
/// 38 × the true rate, so one such request is enough). Between the line and this factor it
/// is a warning: special tokens merged into a text chunk by a server that fell behind can pass
/// the line a little.
pub const UNBACKED_INVALID_FACTOR: f64 = 1.5;

/// Output tokens a request's stream can have carried, tokens:
/// `MAX_TOKENS_PER_TEXT_BYTE × text bytes + delta chunks + UNBACKED_TOKEN_SLACK`. Delta
/// chunks are token events plus text-less delta chunks that are neither the role chunk nor
/// the finish chunk; usage-only chunks (`choices: []`) do not count.
fn carried(r: &StreamTiming) -> f64 {
    carried_tokens(r.text_bytes, r.delta_chunks) as f64
}

/// [`carried`] of a stream with `text_bytes` bytes of text in `delta_chunks` delta chunks,
/// tokens (rounded down).
pub fn carried_tokens(text_bytes: u64, delta_chunks: u64) -> u64 {
    (MAX_TOKENS_PER_TEXT_BYTE * text_bytes as f64) as u64 + delta_chunks + UNBACKED_TOKEN_SLACK
}

/// Output tokens minus the reasoning tokens the server reported (hidden reasoning carries no
/// text), tokens.
fn visible_tokens(r: &StreamTiming) -> u64 {
    r.output_tokens
        .saturating_sub(r.reasoning_tokens.unwrap_or(0))
}

/// The request reported more output tokens than its stream can have carried:
/// `output − reported reasoning >` [`carried`].
fn unbacked(r: &StreamTiming) -> bool {
    visible_tokens(r) as f64 > carried(r)
}

/// The request reported more than [`UNBACKED_INVALID_FACTOR`] times what its text and chunks
/// can have carried, plus [`UNBACKED_TOKEN_SLACK`]: `output − reported reasoning > 1.5 ×
/// (text bytes + delta chunks) + 8` (64 tokens over no text and one chunk are a claim).
fn far_unbacked(r: &StreamTiming) -> bool {
    let backed = MAX_TOKENS_PER_TEXT_BYTE * r.text_bytes as f64 + r.delta_chunks as f64;
    visible_tokens(r) as f64 > UNBACKED_INVALID_FACTOR * backed + UNBACKED_TOKEN_SLACK as f64
}

/// Checks of a cell's request timings: `single_write` and `implausible_speed` warnings, and
/// the `usage_implausible` findings of counts the streams cannot carry (see the module docs).
pub fn check_stream_timing(requests: &[StreamTiming]) -> Vec<Finding> {
    let eligible = requests
        .iter()
        .filter(|r| r.output_tokens >= SINGLE_WRITE_MIN_TOKENS)
        .count();
    [
        single_write_finding(requests, eligible),
        unbacked_finding(requests),
        hidden_reasoning_finding(requests),
        end_jump_finding(requests, eligible),
        front_loaded_finding(requests, eligible),
        textless_first_finding(requests),
        speed_finding(requests),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// `single_write`: at least half of the requests with [`SINGLE_WRITE_MIN_TOKENS`] or more
/// (`eligible` of them) received all their tokens in one read.
fn single_write_finding(requests: &[StreamTiming], eligible: usize) -> Option<Finding> {
    let one: Vec<u64> = requests
        .iter()
        .filter(|r| r.one_read && r.output_tokens >= SINGLE_WRITE_MIN_TOKENS)
        .map(|r| r.output_tokens)
        .collect();
    let &most = one.iter().max().filter(|_| 2 * one.len() >= eligible)?;
    Some(Finding {
        kind: FailureKind::SingleWrite,
        invalid: false,
        message: format!(
            "single_write: {} of {} requests received all their tokens (up to {most}) in one read (TTFT = E2E, no ITL): the server or a proxy buffers the stream, so TTFT, ITL and per-stream rates are not a stream's",
            one.len(),
            requests.len()
        ),
    })
}

/// `usage_implausible` for counts above what the streams carried ([`unbacked`]): invalid
/// when one request is [`far_unbacked`], else a warning. Every request is judged, however
/// short: the slack already covers what a real stream cannot show.
fn unbacked_finding(requests: &[StreamTiming]) -> Option<Finding> {
    let over: Vec<&StreamTiming> = requests.iter().filter(|r| unbacked(r)).collect();
    let far: Vec<&&StreamTiming> = over.iter().filter(|r| far_unbacked(r)).collect();
    if let Some(worst) = far.iter().max_by_key(|r| r.output_tokens) {
        return Some(Finding {
            kind: FailureKind::UsageImplausible,
            invalid: true,
            message: format!(
                "usage_implausible: {} of {} requests reported far more output tokens than their streams could carry (beyond {UNBACKED_INVALID_FACTOR} × (1 per byte of text + 1 per delta chunk) + {UNBACKED_TOKEN_SLACK}; up to {} tokens for {} bytes of text in {} delta chunks): the token count and the tok/s would be the server's claim, not what arrived (a server that hides reasoning must report usage.completion_tokens_details.reasoning_tokens)",
                far.len(),
                requests.len(),
                worst.output_tokens,
                worst.text_bytes,
                worst.delta_chunks
            ),
        });
    }
    let worst = over.iter().max_by_key(|r| r.output_tokens)?;
    Some(Finding {
        kind: FailureKind::UsageImplausible,
        invalid: false,
        message: format!(
            "usage_implausible: {} of {} requests reported more output tokens than their streams carried (up to {} tokens for {} bytes of text in {} chunks): the count is the server's claim, not what arrived",
            over.len(),
            requests.len(),
            worst.output_tokens,
            worst.text_bytes,
            worst.delta_chunks
        ),
    })
}

/// A warning for hidden reasoning: the reported reasoning tokens are the only explanation of
/// a count above what the stream carried.
fn hidden_reasoning_finding(requests: &[StreamTiming]) -> Option<Finding> {
    let hidden: Vec<&StreamTiming> = requests
        .iter()
        .filter(|r| !unbacked(r) && r.output_tokens as f64 > carried(r))
        .collect();
    let worst = hidden
        .iter()
        .max_by_key(|r| r.reasoning_tokens.unwrap_or(0))?;
    Some(Finding {
        kind: FailureKind::UsageImplausible,
        invalid: false,
        message: format!(
            "usage_implausible: {} of {} requests counted reasoning tokens whose text never came (up to {} of {} tokens over {} bytes of text): hidden reasoning, so aggregate tok/s, per-token ITL and per-user tok/s count tokens whose arrival no client saw",
            hidden.len(),
            requests.len(),
            worst.reasoning_tokens.unwrap_or(0),
            worst.output_tokens,
            worst.text_bytes
        ),
    })
}

/// A warning when at least half of the `eligible` requests streamed a cumulative count, then
/// a final usage above it ([`jumped_at_end`]).
fn end_jump_finding(requests: &[StreamTiming], eligible: usize) -> Option<Finding> {
    let jumped: Vec<&StreamTiming> = requests
        .iter()
        .filter(|r| r.output_tokens >= SINGLE_WRITE_MIN_TOKENS && jumped_at_end(r))
        .collect();
    if jumped.is_empty() || 2 * jumped.len() < eligible {
        return None;
    }
    let worst = jumped.iter().max_by_key(|r| r.untimed_tokens)?;
    Some(Finding {
        kind: FailureKind::UsageImplausible,
        invalid: false,
        message: format!(
            "usage_implausible: {} of {} requests streamed a cumulative count on every chunk, then a final usage up to {} tokens above it ({} of {} tokens) that no chunk carried: the count is the server's claim, not what arrived",
            jumped.len(),
            requests.len(),
            worst.untimed_tokens,
            worst.untimed_tokens,
            worst.output_tokens
        ),
    })
}

/// First chunks credited more tokens than their text can carry ([`front_loaded_unbacked`]) in
/// at least half of the `eligible` requests: invalid; in fewer (at least one): a warning.
/// Else front-loaded usage ([`front_loaded`]) in at least half of them: a warning.
fn front_loaded_finding(requests: &[StreamTiming], eligible: usize) -> Option<Finding> {
    let front: Vec<&StreamTiming> = requests
        .iter()
        .filter(|r| r.output_tokens >= SINGLE_WRITE_MIN_TOKENS && front_loaded(r))
        .collect();
    let unbacked_front: Vec<&StreamTiming> = requests
        .iter()
        .filter(|r| front_loaded_unbacked(r))
        .collect();
    if !unbacked_front.is_empty() {
        // the headline would count tokens no chunk carried (370 tok/s for 183 that arrived)
        let worst = unbacked_front.iter().max_by_key(|r| r.first_event_tokens)?;
        return Some(Finding {
            kind: FailureKind::UsageImplausible,
            invalid: 2 * unbacked_front.len() >= requests.len(),
            message: format!(
                "usage_implausible: {} of {} requests were credited more tokens on a first chunk than its text can carry (up to {} tokens on {} bytes of text, of {} tokens) although more chunks followed: the usage is front-loaded, so the token count and the tok/s are the server's claim, not what arrived",
                unbacked_front.len(),
                requests.len(),
                worst.first_event_tokens,
                worst.first_event_text_bytes.unwrap_or(0),
                worst.output_tokens
            ),
        });
    }
    if front.is_empty() || 2 * front.len() < eligible {
        return None;
    }
    let worst = front.iter().max_by_key(|r| r.first_event_tokens)?;
    Some(Finding {
        kind: FailureKind::UsageImplausible,
        invalid: false,
        message: format!(
            "usage_implausible: {} of {} requests had at least half of their tokens on the first chunk (up to {} of {}) although more chunks followed: a prefill step yields one token, so the usage is front-loaded or the server held its first tokens back; TTFT times that burst and TTST is 0",
            front.len(),
            requests.len(),
            worst.first_event_tokens,
            worst.output_tokens
        ),
    })
}

/// A warning when requests started with a text-less chunk whose usage grew and the next
/// chunk came far later than the request's later gaps (more than
/// [`TEXTLESS_FIRST_GAP_FACTOR`] × and [`TEXTLESS_FIRST_MIN_GAP_S`]): TTFT then times an
/// empty chunk, not a token a user could see (break-it round 8: usage 1 on an empty chunk at
/// once, the text 0.5 s later; TTFT read 2 ms). vLLM's partial UTF-8 first token comes one
/// decode step before the next and is not flagged.
fn textless_first_finding(requests: &[StreamTiming]) -> Option<Finding> {
    let flagged: Vec<(f64, f64)> = requests
        .iter()
        .filter_map(|r| r.textless_first)
        .filter(|&(first, later)| {
            first > TEXTLESS_FIRST_MIN_GAP_S && first > TEXTLESS_FIRST_GAP_FACTOR * later
        })
        .collect();
    let worst = flagged.iter().copied().max_by(|a, b| a.0.total_cmp(&b.0))?;
    Some(Finding {
        kind: FailureKind::UsageImplausible,
        invalid: false,
        message: format!(
            "usage_implausible: {} of {} requests began with a chunk without text whose usage counted a token, then waited up to {:.0} ms for the next (later gaps {:.1} ms): TTFT times that empty chunk, not a token; time_to_first_content is the first text",
            flagged.len(),
            requests.len(),
            worst.0 * 1e3,
            worst.1 * 1e3
        ),
    })
}

/// `implausible_speed`: the median per-stream decode rate is above
/// [`MAX_TOK_S_PER_STREAM`].
fn speed_finding(requests: &[StreamTiming]) -> Option<Finding> {
    let mut speeds: Vec<f64> = requests.iter().filter_map(|r| r.tps_per_user).collect();
    speeds.sort_by(f64::total_cmp);
    let median = (!speeds.is_empty()).then(|| servebench_stats::percentile_sorted(&speeds, 50.0));
    let fast: Vec<f64> = speeds
        .iter()
        .copied()
        .filter(|&t| t > MAX_TOK_S_PER_STREAM)
        .collect();
    let top = fast
        .last()
        .copied()
        .filter(|_| median.is_some_and(|m| m > MAX_TOK_S_PER_STREAM))?;
    Some(Finding {
        kind: FailureKind::ImplausibleSpeed,
        invalid: false,
        message: format!(
            "implausible_speed: {} of {} requests decoded faster than {MAX_TOK_S_PER_STREAM:.0} tok/s per stream (up to {top:.0} tok/s): no server streams that fast; the tokens arrived buffered",
            fast.len(),
            requests.len()
        ),
    })
}

/// One check's outcome.
#[derive(Clone, Debug, PartialEq)]
pub struct Finding {
    /// Typed kind.
    pub kind: FailureKind,
    /// Makes the cell `invalid` (else a warning).
    pub invalid: bool,
    /// One-line text.
    pub message: String,
}

/// Applies findings to a cell: warnings are appended; the first invalid finding of a cell that
/// is still `ok` sets status `invalid`, `status_reason` and `error_kind` (later ones are kept as
/// warnings). Every kind is listed once in `warning_kinds` (for warnings) or is the `error_kind`.
pub fn apply_findings(result: &mut CellResult, findings: Vec<Finding>) {
    for f in findings {
        if f.invalid && result.status == CellStatus::Ok {
            result.status = CellStatus::Invalid;
            result.status_reason = f.message;
            result.error_kind = Some(f.kind);
            continue;
        }
        result.warnings.push(f.message);
        if !result.warning_kinds.contains(&f.kind) {
            result.warning_kinds.push(f.kind);
        }
    }
}

/// What the request checks need of one request.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RequestFacts {
    /// Final counted output tokens.
    pub output_tokens: u64,
    /// First moment the usage bound was broken: (tokens, token events).
    pub usage_jump: Option<(u64, u64)>,
}

/// Per-request checks over a cell's requests (`max_tokens` of the decode requests).
pub fn check_requests(requests: &[RequestFacts], max_tokens: u64) -> Vec<Finding> {
    let mut out = Vec::new();
    if max_tokens > 0 {
        let above: Vec<u64> = requests
            .iter()
            .map(|r| r.output_tokens)
            .filter(|&t| t > max_tokens)
            .collect();
        if let Some(&worst) = above.iter().max() {
            out.push(Finding {
                kind: FailureKind::CompletionAboveMaxTokens,
                invalid: true,
                message: format!(
                    "completion_above_max_tokens: {} of {} requests reported more completion tokens than max_tokens {max_tokens} (up to {worst}); the token counts cannot be trusted",
                    above.len(),
                    requests.len()
                ),
            });
        }
    }
    let jumps: Vec<(u64, u64)> = requests.iter().filter_map(|r| r.usage_jump).collect();
    if let Some(&(t, e)) = jumps.iter().max_by_key(|j| j.0) {
        out.push(Finding {
            kind: FailureKind::UsageImplausible,
            invalid: true,
            message: format!(
                "usage_implausible: {} of {} requests' usage grew faster than their token events could carry ({t} tokens after {e} delta chunks; bound {MAX_TOKENS_PER_EVENT} tokens per delta chunk plus one per byte of text)",
                jumps.len(),
                requests.len()
            ),
        });
    }
    out
}

/// How the prompt's intended size is known.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SentPrompt {
    /// Prompt tokens servebench meant to send.
    pub tokens: u64,
    /// Exact (`/tokenize`) or a calibrated / cached estimate; false for the uncalibrated guess.
    pub reliable: bool,
    /// The prompt carries no padding: it is the base prompt alone.
    pub base_only: bool,
    /// Bytes of the request's input as sent (the JSON of its `messages` or `prompt`, an upper
    /// bound of its text); 0 when unknown.
    pub bytes: u64,
}

/// Prompt tokens a chat template may add beyond one per byte of the request's input (system
/// prompts, role markers, the generation prompt).
pub const PROMPT_TEMPLATE_SLACK_TOKENS: u64 = 1024;

/// Requested vs real context of a cell (fills `requested_context_tokens`,
/// `measured_prompt_tokens`, `sent_prompt_tokens`; truncation and mismatch findings).
///
/// The measured size is the largest `usage.prompt_tokens` seen for the cell's prompt: the cell's
/// `prompt_tokens`, its requests' `input_tokens` and `cold_prompt_tokens` (the context's cold
/// prefill sample), because some servers (Ollama) count only the uncached part of a warm prompt.
pub fn check_context(
    result: &mut CellResult,
    requested: u64,
    sent: Option<SentPrompt>,
    cold_prompt_tokens: Option<u64>,
) -> Vec<Finding> {
    result.requested_context_tokens = Some(requested);
    result.sent_prompt_tokens = sent.map(|s| s.tokens);
    let measured = result
        .prompt_tokens
        .into_iter()
        .chain(result.request_samples.iter().filter_map(|r| r.input_tokens))
        .chain(cold_prompt_tokens)
        .max();
    result.measured_prompt_tokens = measured;
    let mut out = Vec::new();
    let Some(m) = measured else {
        return out;
    };
    // A count no prompt of this cell can have (issue 17: 1e12 prompt tokens): the server's
    // usage is not a count of what was sent, and `input_seq_len_avg` would publish it.
    let reference = sent.map_or(requested, |s| s.tokens.max(requested));
    let limit = crate::prefill::PROMPT_INFLATION_RATIO * reference as f64
        + crate::prefill::PROMPT_INFLATION_SLACK as f64;
    // more tokens than bytes sent (plus a template's share): no tokenizer counts so
    // (break-it round 7: a server counting 10 × the prompt)
    if let Some(s) = sent.filter(|s| s.bytes > 0) {
        if m > s.bytes + PROMPT_TEMPLATE_SLACK_TOKENS {
            out.push(Finding {
                kind: FailureKind::UsageImplausible,
                invalid: true,
                message: format!(
                    "usage_implausible: the server reported {m} prompt tokens for a request input of {} bytes (context {}): more than one token per byte plus {PROMPT_TEMPLATE_SLACK_TOKENS} for the template is no count of what was sent",
                    s.bytes,
                    format_context(requested)
                ),
            });
            return out;
        }
    }
    if m as f64 > limit {
        out.push(Finding {
            kind: FailureKind::UsageImplausible,
            invalid: true,
            message: format!(
                "usage_implausible: the server reported {m} prompt tokens for prompts of ~{reference} tokens (context {}): the count is no count of what was sent",
                format_context(requested)
            ),
        });
        return out;
    }
    if requested == 0 {
        return out;
    }
    let label = format_context(requested);
    if let Some(s) = sent.filter(|s| s.tokens > 0) {
        if (m as f64) < s.tokens as f64 * TRUNCATION_RATIO {
            out.push(Finding {
                kind: FailureKind::PromptTruncated,
                invalid: s.reliable,
                message: format!(
                    "prompt_truncated: the server counted {m} prompt tokens of the ~{} sent for context {label}: it truncated the prompt (e.g. Ollama past its num_ctx), so this cell does not measure a {label} context{}",
                    s.tokens,
                    if s.reliable { "" } else { " (the prompt size is an uncalibrated estimate)" }
                ),
            });
            return out;
        }
    }
    let diff = (m as f64 - requested as f64) / requested as f64;
    if diff.abs() > CONTEXT_TOLERANCE {
        let base = sent.is_some_and(|s| s.base_only) && m > requested;
        out.push(Finding {
            kind: FailureKind::ContextMismatch,
            invalid: false,
            message: format!(
                "context_mismatch: cells labelled context {label} sent prompts of {m} tokens ({:+.0} %){}",
                diff * 100.0,
                if base {
                    "; the base prompt alone is larger than the requested context"
                } else {
                    ""
                }
            ),
        });
    }
    out
}

/// Stall statistics of one cell's window (fields `stall_*`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StallStats {
    /// Stalls overlapping the window.
    pub count: u64,
    /// Longest stall, s.
    pub longest_s: f64,
    /// Stalled stream-time inside the window, s.
    pub stalled_s: f64,
    /// Stream-time inside the window, s.
    pub stream_s: f64,
    /// The threshold used, s.
    pub threshold_s: f64,
}

impl StallStats {
    /// `stalled_s / stream_s` (0 without stream-time).
    pub fn fraction(&self) -> f64 {
        if self.stream_s > 0.0 {
            self.stalled_s / self.stream_s
        } else {
            0.0
        }
    }
}

/// One in-window request for the stall analysis.
#[derive(Clone, Debug)]
pub struct StallInput<'a> {
    /// Request sent.
    pub sent_at: Instant,
    /// Request ended or was cut.
    pub end_at: Instant,
    /// First / last token event arrival.
    pub token_events_span: Option<(Instant, Instant)>,
    /// Token events.
    pub token_events: u64,
    /// Silences over [`STALL_FLOOR`] (see [`servebench_client::stream::StreamFacts::long_gaps`]).
    pub long_gaps: &'a [(Instant, Instant)],
}

/// The stall threshold, s: max(STALL_FACTOR × typical chunk gap, STALL_FLOOR).
pub fn stall_threshold_s(typical_gap_s: Option<f64>) -> f64 {
    let floor = STALL_FLOOR.as_secs_f64();
    typical_gap_s
        .filter(|g| g.is_finite() && *g > 0.0)
        .map_or(floor, |g| (STALL_FACTOR * g).max(floor))
}

fn secs(a: Instant, b: Instant) -> f64 {
    b.saturating_duration_since(a).as_secs_f64()
}

/// Stalls of a cell's requests inside `window` (the rule in the module docs). `chunk_itl_p50_s`
/// is the fallback typical gap.
pub fn analyze_stalls(
    requests: &[StallInput<'_>],
    window: (Instant, Instant),
    chunk_itl_p50_s: Option<f64>,
) -> StallStats {
    let (ws, we) = window;
    // Typical chunk gap: mean of the gaps ≤ STALL_FLOOR between token events.
    let (mut short_time, mut short_count) = (0.0f64, 0u64);
    for r in requests {
        let Some((first, last)) = r.token_events_span else {
            continue;
        };
        if r.token_events < 2 {
            continue;
        }
        let inner: Vec<&(Instant, Instant)> = r.long_gaps.iter().filter(|g| g.1 <= last).collect();
        let long_time: f64 = inner.iter().map(|g| secs(g.0, g.1)).sum();
        let n = (r.token_events - 1).saturating_sub(inner.len() as u64);
        if n > 0 {
            short_time += (secs(first, last) - long_time).max(0.0);
            short_count += n;
        }
    }
    let typical = (short_count > 0)
        .then(|| short_time / short_count as f64)
        .or(chunk_itl_p50_s);
    let threshold = stall_threshold_s(typical);
    let mut st = StallStats {
        threshold_s: threshold,
        ..Default::default()
    };
    for r in requests {
        let (a, b) = (r.sent_at.max(ws), r.end_at.min(we));
        st.stream_s += secs(a, b);
        for &(g0, g1) in r.long_gaps {
            let len = secs(g0, g1);
            let inside = secs(g0.max(ws), g1.min(we));
            if len > threshold && inside > 0.0 {
                st.count += 1;
                st.longest_s = st.longest_s.max(len);
                st.stalled_s += inside;
            }
        }
    }
    st
}

/// The stall finding of a window's stall statistics, if any (the `stall_*` fields are
/// written by [`crate::measure::CellMeasurement::to_result`]).
pub fn stall_finding(st: &StallStats) -> Option<Finding> {
    if st.count == 0 {
        return None;
    }
    let frac = st.fraction();
    let invalid = frac > STALL_INVALID_FRACTION;
    Some(Finding {
        kind: FailureKind::StreamStalls,
        invalid,
        message: format!(
            "stream_stalls: {} silence{} longer than {:.2} s inside the window (longest {:.1} s); streams were stalled for {:.0} % of their time in the window{}",
            st.count,
            if st.count == 1 { "" } else { "s" },
            st.threshold_s,
            st.longest_s,
            frac * 100.0,
            if invalid {
                format!(" (over {:.0} %: the throughput does not describe the server's decode speed)", STALL_INVALID_FRACTION * 100.0)
            } else {
                String::new()
            }
        ),
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn ms(t0: Instant, v: u64) -> Instant {
        t0 + Duration::from_millis(v)
    }

    #[test]
    fn usage_bound_allows_merged_deltas_and_refuses_absurd_usage() {
        use servebench_client::stream::usage_bound;
        // vLLM under load: 256 tokens merged into 2 chunks that carry their text (~4 bytes/token)
        assert!(usage_bound(2, 1_000) >= 256);
        // speculative chunks: 8 tokens per event, little text
        assert!(usage_bound(10, 10) >= 80);
        // issue 7 case 3: usage jumps to 1e6 after a few short events
        assert!(usage_bound(3, 20) < 1_000_000);
        // tokens without text beyond 64 per event are refused
        assert_eq!(usage_bound(1, 0), 64);
    }

    #[test]
    fn stalls_case_5() {
        // C=1, 30 s window: tokens every 5 ms for 4 s, then silent for 26 s until the cut.
        let t0 = Instant::now();
        let gaps = [(ms(t0, 4_000), ms(t0, 30_000))];
        let r = StallInput {
            sent_at: t0,
            end_at: ms(t0, 30_000),
            token_events_span: Some((ms(t0, 5), ms(t0, 4_000))),
            token_events: 800,
            long_gaps: &gaps,
        };
        let st = analyze_stalls(&[r], (t0, ms(t0, 30_000)), None);
        assert_eq!(st.count, 1);
        assert!((st.threshold_s - 1.0).abs() < 1e-9, "{}", st.threshold_s);
        assert!((st.longest_s - 26.0).abs() < 1e-6);
        assert!(st.fraction() > 0.8);
        let mut cell = CellResult::default();
        apply_findings(&mut cell, stall_finding(&st).into_iter().collect());
        assert_eq!(cell.status, CellStatus::Invalid);
        assert_eq!(cell.error_kind, Some(FailureKind::StreamStalls));
    }

    /// The typical gap leaves out the long silences (core-thresholds survivors): tokens every
    /// 150 ms with one 3 s silence give a typical gap of 150 ms (threshold 10 × = 1.5 s), so
    /// the silence is a stall; a two-event request counts; the threshold of a non-finite gap
    /// is the floor; a tally without stream time has no stalled fraction.
    #[test]
    fn the_typical_gap_leaves_out_long_silences() {
        let t0 = Instant::now();
        // events at 0.15, 0.30, 0.45, then 3.45 (a 3 s gap), then 3.60: span 3.45 s, 4 gaps
        let gaps = [(ms(t0, 450), ms(t0, 3_450))];
        let r = StallInput {
            sent_at: t0,
            end_at: ms(t0, 3_700),
            token_events_span: Some((ms(t0, 150), ms(t0, 3_600))),
            token_events: 5,
            long_gaps: &gaps,
        };
        let st = analyze_stalls(std::slice::from_ref(&r), (t0, ms(t0, 10_000)), Some(9.0));
        assert!((st.threshold_s - 1.5).abs() < 1e-9, "{}", st.threshold_s);
        assert_eq!(st.count, 1);
        assert!((st.stalled_s - 3.0).abs() < 1e-6, "{}", st.stalled_s);
        // the same silence before the window opened is not this window's stall
        let st = analyze_stalls(
            std::slice::from_ref(&r),
            (ms(t0, 3_450), ms(t0, 10_000)),
            None,
        );
        assert_eq!((st.count, st.stalled_s), (0, 0.0));
        // two token events 400 ms apart are a typical gap of 400 ms: threshold 4 s, and the
        // chunk ITL fallback (9 s, threshold 90 s) is not used
        let two = StallInput {
            sent_at: t0,
            end_at: ms(t0, 500),
            token_events_span: Some((ms(t0, 50), ms(t0, 450))),
            token_events: 2,
            long_gaps: &[],
        };
        let st = analyze_stalls(&[two], (t0, ms(t0, 10_000)), Some(9.0));
        assert!((st.threshold_s - 4.0).abs() < 1e-9, "{}", st.threshold_s);
        assert_eq!(stall_threshold_s(Some(f64::INFINITY)), 1.0);
        assert_eq!(stall_threshold_s(Some(0.0)), 1.0);
        assert_eq!(StallStats::default().fraction(), 0.0);
    }

    #[test]
    fn slow_but_steady_is_no_stall() {
        // 1.5 s between tokens, always: typical gap falls back to the chunk ITL p50.
        let t0 = Instant::now();
        let gaps: Vec<(Instant, Instant)> = (0..10)
            .map(|i| (ms(t0, i * 1500), ms(t0, (i + 1) * 1500)))
            .collect();
        let r = StallInput {
            sent_at: t0,
            end_at: ms(t0, 15_000),
            token_events_span: Some((t0, ms(t0, 15_000))),
            token_events: 11,
            long_gaps: &gaps,
        };
        let st = analyze_stalls(&[r], (t0, ms(t0, 15_000)), Some(1.5));
        assert_eq!(st.count, 0);
        assert!((st.threshold_s - 15.0).abs() < 1e-9);
    }

    #[test]
    fn request_checks() {
        let ok = RequestFacts {
            output_tokens: 32,
            usage_jump: None,
        };
        assert!(check_requests(&[ok], 32).is_empty());
        let absurd = RequestFacts {
            output_tokens: 1_000_000,
            usage_jump: Some((1_000_000, 3)),
        };
        let f = check_requests(&[ok, absurd], 32);
        assert_eq!(f.len(), 2);
        assert!(f.iter().all(|f| f.invalid));
        assert_eq!(f[1].kind, FailureKind::UsageImplausible);
        // speculative chunks of 5 tokens stay valid
        let spec = RequestFacts {
            output_tokens: 30,
            usage_jump: None,
        };
        assert!(check_requests(&[spec], 32).is_empty());
    }

    /// Break-it round 7: a server counting 10 × the prompt kept its cells `ok`.
    #[test]
    fn more_prompt_tokens_than_bytes_sent_are_invalid() {
        let sent = SentPrompt {
            tokens: 4096,
            reliable: true,
            base_only: false,
            bytes: 1700,
        };
        let mut c = CellResult {
            prompt_tokens: Some(4110),
            ..Default::default()
        };
        let f = check_context(&mut c, 4096, Some(sent), None);
        assert_eq!(
            (f.len(), f[0].kind, f[0].invalid),
            (1, FailureKind::UsageImplausible, true)
        );
        assert!(
            f[0].message.contains("input of 1700 bytes"),
            "{}",
            f[0].message
        );
        // at the line: bytes + the template's share
        let mut c = CellResult {
            prompt_tokens: Some(1700 + PROMPT_TEMPLATE_SLACK_TOKENS),
            ..Default::default()
        };
        assert!(check_context(&mut c, 2048, Some(sent), None)
            .iter()
            .all(|f| f.kind != FailureKind::UsageImplausible));
    }

    #[test]
    fn context_checks() {
        let mut c = CellResult {
            prompt_tokens: Some(10),
            ..Default::default()
        };
        let sent = SentPrompt {
            tokens: 1000,
            reliable: true,
            base_only: false,
            bytes: 0,
        };
        // a warm request counted only its uncached tokens; the cold sample had them all
        assert!(check_context(&mut c.clone(), 1024, Some(sent), Some(1000)).is_empty());
        let f = check_context(&mut c, 1024, Some(sent), None);
        assert_eq!(f[0].kind, FailureKind::PromptTruncated);
        assert!(f[0].invalid);
        assert_eq!(c.measured_prompt_tokens, Some(10));
        let mut c = CellResult {
            prompt_tokens: Some(354),
            ..Default::default()
        };
        let base = SentPrompt {
            tokens: 354,
            reliable: true,
            base_only: true,
            bytes: 0,
        };
        let f = check_context(&mut c, 64, Some(base), None);
        assert_eq!(f.len(), 1);
        assert!(!f[0].invalid);
        assert!(f[0].message.contains("base prompt"), "{}", f[0].message);
        let mut c = CellResult {
            prompt_tokens: Some(1010),
            ..Default::default()
        };
        assert!(check_context(&mut c, 1024, Some(sent), None).is_empty());
        let mut c = CellResult {
            prompt_tokens: Some(40),
            ..Default::default()
        };
        assert!(check_context(&mut c, 0, None, None).is_empty());
        assert_eq!(c.requested_context_tokens, Some(0));
        // issue 17 break-it round 4: 1e12 prompt tokens for a 1,000-token prompt
        let mut c = CellResult {
            prompt_tokens: Some(1_000_000_000_000),
            ..Default::default()
        };
        let f = check_context(&mut c, 1024, Some(sent), None);
        assert_eq!(f.len(), 1);
        assert!(f[0].invalid && f[0].kind == FailureKind::UsageImplausible);
        assert!(f[0]
            .message
            .contains("1000000000000 prompt tokens for prompts of ~1024"));
        let mut c = CellResult {
            prompt_tokens: Some(4097),
            ..Default::default()
        };
        assert!(check_context(&mut c, 0, None, None)[0].invalid);
        let mut c = CellResult {
            prompt_tokens: Some(4096),
            ..Default::default()
        };
        assert!(check_context(&mut c, 0, None, None).is_empty());
    }
}

#[cfg(test)]
mod stream_timing_tests {
    use super::*;

    /// A stream whose text backs its 32 tokens (4 bytes each, one chunk each).
    fn plain() -> StreamTiming {
        StreamTiming {
            output_tokens: 32,
            text_bytes: 128,
            delta_chunks: 32,
            ..StreamTiming::default()
        }
    }

    /// Break-it round 8: an empty chunk with usage 1 at once, the text 0.5 s later, then a
    /// token every 5 ms: TTFT timed the empty chunk. One decode step (vLLM's partial UTF-8
    /// first token) is not flagged.
    #[test]
    fn a_textless_first_chunk_long_before_the_next_is_flagged() {
        let fake = StreamTiming {
            textless_first: Some((0.5, 0.005)),
            ..plain()
        };
        let f = check_stream_timing(&[fake, fake]);
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(!f[0].invalid);
        assert!(
            f[0].message.contains("TTFT times that empty chunk"),
            "{}",
            f[0].message
        );
        let utf8 = StreamTiming {
            textless_first: Some((0.006, 0.005)),
            ..plain()
        };
        assert!(check_stream_timing(&[utf8]).is_empty());
    }

    /// Issue 17 break-it round 3: usage 1, 2, 3, 4 on the chunks, then a usage-only 32 read
    /// `ok` at 398 tok/s where the cell's 1-s peak was 49.
    #[test]
    fn a_final_count_above_a_continuous_one_is_flagged() {
        let jump = StreamTiming {
            output_tokens: 32,
            text_bytes: 28,
            delta_chunks: 4,
            continuous_usage: true,
            untimed_tokens: 28,
            ..StreamTiming::default()
        };
        let f = check_stream_timing(&[jump, jump]);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(
            (f[0].kind, f[0].invalid),
            (FailureKind::UsageImplausible, false)
        );
        assert!(f[0].message.contains("28 of 32 tokens"), "{}", f[0].message);
        // the slack: a last token without text on the (untimed) finish chunk
        let slack = StreamTiming {
            untimed_tokens: CONTINUOUS_USAGE_UNTIMED_SLACK,
            ..jump
        };
        assert!(check_stream_timing(&[slack]).is_empty());
        // without continuous usage, untimed tokens are the multi-token chunks of speculative
        // decoding, counted by the final usage: no finding
        let spec = StreamTiming {
            continuous_usage: false,
            ..jump
        };
        assert!(check_stream_timing(&[spec]).is_empty());
        assert!(check_stream_timing(&[plain(), plain(), jump]).is_empty());
    }

    /// Issue 17 break-it round 4: usage 32 on the first chunk gave TTST 0 on an ok cell with
    /// no word about it.
    #[test]
    fn front_loaded_usage_is_flagged() {
        let front = StreamTiming {
            first_event_tokens: 32,
            token_events: 33,
            output_tokens: 64,
            text_bytes: 256,
            delta_chunks: 33,
            ..StreamTiming::default()
        };
        let f = check_stream_timing(&[front, front, plain()]);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(
            (f[0].kind, f[0].invalid),
            (FailureKind::UsageImplausible, false)
        );
        assert!(
            f[0].message.contains("2 of 3 requests") && f[0].message.contains("up to 32 of 64")
        );
        // below half: speculative chunks or a small first burst are fine
        let some = StreamTiming {
            first_event_tokens: 31,
            ..front
        };
        assert!(check_stream_timing(&[some]).is_empty());
        // one event only is single_write's case, not this one
        let one = StreamTiming {
            token_events: 1,
            ..front
        };
        assert!(check_stream_timing(&[one]).is_empty());
        // one request in three is no pattern
        assert!(check_stream_timing(&[front, plain(), plain()]).is_empty());
    }

    /// Break-it round 9: usage 33 on a first chunk of "tok " (4 bytes), then +1 per chunk for
    /// 63 more chunks: a third of the tokens, below the front-loaded half, read 81 tok/s for 49
    /// that arrived in an ok cell. The first chunk's text cannot carry 33 tokens whatever the
    /// share: invalid when half of the requests do it, a warning when fewer do.
    #[test]
    fn a_first_chunk_claim_below_half_of_the_tokens_is_still_implausible() {
        let claim = StreamTiming {
            first_event_tokens: 33,
            token_events: 64,
            output_tokens: 96,
            text_bytes: 256,
            delta_chunks: 64,
            first_event_text_bytes: Some(4),
            ..StreamTiming::default()
        };
        let f = check_stream_timing(&[claim, claim]);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(
            (f[0].kind, f[0].invalid),
            (FailureKind::UsageImplausible, true),
            "{f:?}"
        );
        assert!(
            f[0].message
                .contains("up to 33 tokens on 4 bytes of text, of 96"),
            "{}",
            f[0].message
        );
        // one request of three: a warning, the cell stays measured
        let f = check_stream_timing(&[claim, plain(), plain()]);
        assert_eq!((f.len(), f[0].invalid), (1, false), "{f:?}");
        // at the bound (4 bytes + 4 = 8 tokens) nothing; one above, flagged
        let at = StreamTiming {
            first_event_tokens: 8,
            ..claim
        };
        assert!(check_stream_timing(&[at, at]).is_empty());
        let above = StreamTiming {
            first_event_tokens: 9,
            ..claim
        };
        assert!(check_stream_timing(&[above, above])[0].invalid);
        // a single token event (nothing followed) is another rule's business
        let lone = StreamTiming {
            token_events: 1,
            ..claim
        };
        assert!(!check_stream_timing(&[lone, lone])
            .iter()
            .any(|f| f.message.contains("first chunk than its text")));
    }

    /// Break-it round 5: usage 32 on a first chunk of "tok " (4 bytes), then +1 per chunk,
    /// kept an ok cell whose headline counted the claim (370 tok/s for 183 that arrived).
    #[test]
    fn front_loaded_usage_the_first_chunk_cannot_carry_makes_the_cell_invalid() {
        let claim = StreamTiming {
            first_event_tokens: 32,
            token_events: 33,
            output_tokens: 64,
            text_bytes: 132,
            delta_chunks: 33,
            first_event_text_bytes: Some(4),
            ..StreamTiming::default()
        };
        let f = check_stream_timing(&[claim, claim, plain()]);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(
            (f[0].kind, f[0].invalid),
            (FailureKind::UsageImplausible, true)
        );
        assert!(
            f[0].message.contains("up to 32 tokens on 4 bytes of text"),
            "{}",
            f[0].message
        );
        // at the line: 28 + 4 = 32 tokens may ride on 28 bytes (a held-back burst)
        let burst = StreamTiming {
            first_event_text_bytes: Some(28),
            ..claim
        };
        let f = check_stream_timing(&[burst, burst]);
        assert_eq!((f.len(), f[0].invalid), (1, false), "{f:?}");
        let over = StreamTiming {
            first_event_text_bytes: Some(27),
            ..claim
        };
        assert!(check_stream_timing(&[over, over])[0].invalid);
        // hidden reasoning carries no text; unknown text is not judged
        let hidden = StreamTiming {
            reasoning_tokens: Some(30),
            ..claim
        };
        assert!(!check_stream_timing(&[hidden, hidden])[0].invalid);
        let unknown = StreamTiming {
            first_event_text_bytes: None,
            ..claim
        };
        assert!(!check_stream_timing(&[unknown, unknown])[0].invalid);
    }

    #[test]
    fn usage_beyond_what_the_text_carried_is_flagged_at_the_line() {
        // 97 one-byte chunks: the line is 97 + 97 + 8 = 202 tokens
        let at_line = StreamTiming {
            output_tokens: 202,
            text_bytes: 97,
            delta_chunks: 97,
            ..StreamTiming::default()
        };
        assert!(check_stream_timing(&[at_line]).is_empty());
        let over = StreamTiming {
            output_tokens: 203,
            ..at_line
        };
        let f = check_stream_timing(&[over]);
        assert_eq!(
            (f.len(), f[0].kind, f[0].invalid),
            (1, FailureKind::UsageImplausible, false)
        );
        assert!(
            f[0].message
                .starts_with("usage_implausible: 1 of 1 requests reported more output tokens"),
            "{}",
            f[0].message
        );
        // up to 1.5 × (97 + 97) + 8 = 299 is a warning; beyond it the cell is invalid
        let warned = StreamTiming {
            output_tokens: 299,
            ..at_line
        };
        assert!(!check_stream_timing(&[warned])[0].invalid);
        let just_over = StreamTiming {
            output_tokens: 300,
            ..at_line
        };
        assert!(check_stream_timing(&[just_over])[0].invalid);
        // break-it round 7: usage + 9 per "tok " chunk (4 bytes): 9 × 40 = 360 > 1.5 × 200 + 8
        let x9 = StreamTiming {
            output_tokens: 360,
            text_bytes: 160,
            delta_chunks: 40,
            ..StreamTiming::default()
        };
        assert!(check_stream_timing(&[x9, x9])[0].invalid);
        // the inflating server: ~60 tokens per one-byte chunk
        let inflate = StreamTiming {
            output_tokens: 5_800,
            ..at_line
        };
        let f = check_stream_timing(&[inflate, inflate]);
        assert_eq!(
            (f.len(), f[0].kind, f[0].invalid),
            (1, FailureKind::UsageImplausible, true),
            "{f:?}"
        );
        assert!(
            f[0].message
                .contains("up to 5800 tokens for 97 bytes of text in 97 delta chunks"),
            "{}",
            f[0].message
        );
        // break-it round 7: one lying request among honest ones is enough (2 of 5 lying gave
        // 38 × the true rate); one slightly over the line is a warning
        assert!(check_stream_timing(&[inflate, plain(), plain(), plain()])[0].invalid);
        let f = check_stream_timing(&[warned, plain(), plain()]);
        assert_eq!((f.len(), f[0].invalid), (1, false), "{f:?}");
        // break-it round 6: 640 tokens over ten role-only chunks, no text (no delta chunk counts)
        let roles = StreamTiming {
            output_tokens: 640,
            ..StreamTiming::default()
        };
        assert!(check_stream_timing(&[roles, roles])[0].invalid);
        // 64 tokens over no text and one chunk (the usage growth): 64 > 1.5 × 1 + 8
        let small = StreamTiming {
            output_tokens: 64,
            delta_chunks: 1,
            ..StreamTiming::default()
        };
        assert!(check_stream_timing(&[small, small])[0].invalid);
        // a stop string's tokens removed from a short answer stay a warning at most
        let stop = StreamTiming {
            output_tokens: 24,
            text_bytes: 6,
            delta_chunks: 6,
            ..StreamTiming::default()
        };
        let f = check_stream_timing(&[stop]);
        assert!(!f.is_empty() && f.iter().all(|f| !f.invalid), "{f:?}");
        // hidden reasoning the server reported explains tokens without text, with a warning
        // (break-it round 7: 296 of 300 tokens hidden read ok at 75 × the visible rate, no word)
        let reasoning = StreamTiming {
            reasoning_tokens: Some(5_600),
            ..inflate
        };
        let f = check_stream_timing(&[reasoning]);
        assert_eq!(
            (f.len(), f[0].kind, f[0].invalid),
            (1, FailureKind::UsageImplausible, false),
            "{f:?}"
        );
        assert!(
            f[0].message.contains("hidden reasoning"),
            "{}",
            f[0].message
        );
        assert!(
            f[0].message.contains("up to 5600 of 5800 tokens"),
            "{}",
            f[0].message
        );
        // reasoning that came as text is no hidden reasoning
        let shown = StreamTiming {
            reasoning_tokens: Some(100),
            output_tokens: 200,
            ..at_line
        };
        assert!(check_stream_timing(&[shown]).is_empty());
        // text-less tokens each in their own chunk (vLLM's `content: ""`) are backed by chunks
        let empty_text = StreamTiming {
            output_tokens: 100,
            text_bytes: 4,
            delta_chunks: 100,
            ..StreamTiming::default()
        };
        assert!(check_stream_timing(&[empty_text]).is_empty());
    }

    #[test]
    fn one_read_streams_and_impossible_speeds_are_flagged() {
        let ok = StreamTiming {
            output_tokens: 32,
            one_read: false,
            tps_per_user: Some(180.0),
            ..plain()
        };
        assert!(check_stream_timing(&[ok, ok]).is_empty());
        // a short answer in one read is not flagged
        let short = StreamTiming {
            output_tokens: 4,
            one_read: true,
            tps_per_user: None,
            ..plain()
        };
        assert!(check_stream_timing(&[short]).is_empty());
        let buffered = StreamTiming {
            output_tokens: 32,
            one_read: true,
            tps_per_user: None,
            ..plain()
        };
        // Half of the eligible requests in one read: flagged (a buffering server or proxy).
        let f = check_stream_timing(&[ok, buffered, short]);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].kind, FailureKind::SingleWrite);
        assert!(!f[0].invalid);
        assert!(
            f[0].message.starts_with("single_write: 1 of 3 requests"),
            "{}",
            f[0].message
        );
        // A minority (a client descheduled for one whole request) is not.
        assert!(check_stream_timing(&[ok, ok, buffered]).is_empty());
        let fast = StreamTiming {
            output_tokens: 32,
            one_read: false,
            tps_per_user: Some(5_001.0),
            ..plain()
        };
        let f = check_stream_timing(&[fast]);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].kind, FailureKind::ImplausibleSpeed);
        // The median decides: two of three beyond the bound are flagged, one of three is not
        // (one request read in a burst after a client pause).
        let f = check_stream_timing(&[ok, fast, fast]);
        assert_eq!(f.len(), 1);
        assert!(
            f[0].message
                .starts_with("implausible_speed: 2 of 3 requests"),
            "{}",
            f[0].message
        );
        assert!(check_stream_timing(&[ok, ok, fast]).is_empty());
        // exactly at the bound is plausible
        let edge = StreamTiming {
            tps_per_user: Some(MAX_TOK_S_PER_STREAM),
            ..fast
        };
        assert!(check_stream_timing(&[edge]).is_empty());
        assert!(check_stream_timing(&[edge, edge, fast]).is_empty());
    }
}
