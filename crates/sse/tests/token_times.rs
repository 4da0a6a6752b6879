//! Token times come from token events only (issue 8, §2): usage-only chunks — a separate final
//! usage chunk, usage after the finish chunk, usage on a finish chunk without text — correct the
//! token count but never a token time; a one-token-event answer has no ITL and no TTST (`None`,
//! neither 0 nor a gap invented from the usage chunk's arrival).
//!
//! Each rule is replayed on a captured stream (`tests/data/engines/`, one read per line, read k
//! arriving at k+1 ms) and on a crafted stream with arrival times in seconds.

mod common;

use std::time::Instant;

use common::*;
use servebench_sse::{RequestRecord, RequestTracker, SseFramer};

/// Each `(t, payload)` as one `data: payload\n\n` event in its own read at `t` s; clean end.
fn run(events: &[(f64, &str)]) -> (Instant, RequestRecord) {
    let base = Instant::now();
    let mut framer = SseFramer::new();
    let mut t = RequestTracker::new(base);
    for (at, p) in events {
        framer.push(
            format!("data: {p}\n\n").as_bytes(),
            base + secs(*at),
            |ev| {
                t.apply_event(ev);
            },
        );
    }
    let end = base + secs(events.last().map_or(0.0, |e| e.0) + 0.001);
    framer.finish(end, |ev| {
        t.apply_event(ev);
    });
    (base, t.finish(end, true, false))
}

fn at(base: Instant, t: Option<Instant>) -> f64 {
    t.expect("a time").duration_since(base).as_secs_f64()
}

fn approx(a: Option<f64>, b: f64) {
    let a = a.expect("value");
    assert!((a - b).abs() < 1e-9, "{a} != {b}");
}

const TOK_A: &str = r#"{"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}]}"#;
const TOK_B: &str = r#"{"choices":[{"index":0,"delta":{"content":"b"},"finish_reason":null}]}"#;
const TOK_C: &str = r#"{"choices":[{"index":0,"delta":{"content":"c"},"finish_reason":null}]}"#;
const FINISH: &str = r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#;

// ------------------------------------------------------------------ usage-only final chunk

/// Captured (OpenAI gpt-4o): 2 token events, a finish chunk, then a `choices: []` usage chunk
/// saying 3. The count is 3; the last token time stays at the second token event.
#[test]
fn captured_usage_only_final_chunk_corrects_count_not_time() {
    let r =
        Run::lines("sse/openai-gpt4o-2024-stream-tail-usage-null-then-usage-chunk.payloads.sse");
    let rec = &r.record;
    assert_eq!(rec.output_tokens, 3);
    assert_eq!(rec.untimed_tokens, 1);
    assert_eq!(r.idx(rec.first_token_at), Some(0));
    assert_eq!(r.idx(rec.second_token_at), Some(1));
    assert_eq!(r.idx(rec.last_token_at), Some(1), "not the usage chunk (3)");
    assert_eq!(rec.last_token_at, rec.last_token_event_at);
    // ITL over the timed span, N − 1 = 2 gaps (seed §4.1).
    let span = at(r.base, rec.last_token_at) - at(r.base, rec.first_token_at);
    approx(rec.itl_s(), span / 2.0);
    approx(rec.latency_s(), at(r.base, rec.last_token_event_at));
}

/// Crafted: the usage-only chunk arrives 200 ms after the last token: neither the latency nor
/// the ITL stretches to it.
#[test]
fn crafted_late_usage_only_chunk_stretches_nothing() {
    let (_, r) = run(&[
        (0.100, TOK_A),
        (0.120, TOK_B),
        (0.140, TOK_C),
        (0.140, FINISH),
        (
            0.340,
            r#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":3}}"#,
        ),
        (0.341, "[DONE]"),
    ]);
    assert_eq!(r.output_tokens, 3);
    assert_eq!(r.untimed_tokens, 0, "usage agreed with the count");
    approx(r.ttft_s(), 0.100);
    approx(r.ttst_s(), 0.020);
    approx(r.latency_s(), 0.140);
    approx(r.itl_s(), 0.020);
    approx(r.chunk_itl_s(), 0.020);
}

// ------------------------------------------------------------ usage after the finish chunk

/// Crafted: usage arrives after the finish chunk and says one more token than the events
/// (an end-of-sequence token without text): counted, not timed; ITL divides the token-event span
/// by N − 1.
#[test]
fn crafted_usage_after_finish_counts_untimed_token() {
    let (_, r) = run(&[
        (0.100, TOK_A),
        (0.130, TOK_B),
        (0.160, TOK_C),
        (0.165, FINISH),
        // a choice chunk after the finish (some servers repeat it with usage): still untimed
        (
            0.385,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":null}],"usage":{"completion_tokens":4}}"#,
        ),
        (0.386, "[DONE]"),
    ]);
    assert_eq!(r.output_tokens, 4);
    assert_eq!(r.untimed_tokens, 1);
    approx(r.latency_s(), 0.160);
    approx(r.itl_s(), 0.060 / 3.0);
    assert!(r.completed);
}

/// Captured (llama-server `/v1/completions`): usage 8 rides on the last choice chunk, which has
/// `finish_reason: "length"` and `text: ""`, after 7 token events: 8 tokens, last time at event 6.
#[test]
fn captured_usage_on_finish_chunk_without_text_is_untimed() {
    let r = Run::lines("local-captures/llama-server-completions-stream.sse");
    let rec = &r.record;
    assert_eq!(rec.token_events, 7);
    assert_eq!(rec.output_tokens, 8);
    assert_eq!(rec.untimed_tokens, 1);
    assert_eq!(r.idx(rec.last_token_at), Some(6));
    let span = at(r.base, rec.last_token_at) - at(r.base, rec.first_token_at);
    approx(rec.itl_s(), span / 7.0);
}

// ------------------------------------------------------------------- single-token answers

/// Captured (SGLang): one token, then the finish chunk carrying usage 1: no ITL, no TTST.
#[test]
fn captured_single_token_answer_has_no_itl() {
    let r = Run::lines("sse/sglang-usage-on-finish-chunk.sse");
    let rec = &r.record;
    assert_eq!(rec.output_tokens, 1);
    assert_eq!(rec.token_events, 1);
    assert_eq!(rec.itl_s(), None);
    assert_eq!(rec.ttst_s(), None);
    assert_eq!(rec.chunk_itl_s(), None);
    assert_eq!(rec.output_tps_per_user(), None);
    assert_eq!(r.idx(rec.last_token_at), Some(0));
    assert!(rec.completed);
}

/// Crafted (the issue's case): one token event, then a usage chunk 220 ms later saying 2 tokens
/// (the token plus end-of-sequence). The old rule stamped the second token at the usage chunk and
/// invented a 220 ms ITL; now there is no ITL and no TTST, and the latency ends at the token.
#[test]
fn crafted_single_token_answer_with_usage_two_has_no_invented_itl() {
    let (_, r) = run(&[
        (
            0.004,
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#,
        ),
        (0.050, TOK_A),
        (0.051, FINISH),
        (
            0.270,
            r#"{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2}}"#,
        ),
        (0.271, "[DONE]"),
    ]);
    assert_eq!(r.output_tokens, 2);
    assert_eq!(r.untimed_tokens, 1);
    approx(r.ttft_s(), 0.050);
    assert_eq!(r.ttst_s(), None);
    assert_eq!(r.itl_s(), None, "neither 0 nor 0.220");
    assert_eq!(r.output_tps_per_user(), None);
    approx(r.latency_s(), 0.050);
    assert!(r.completed);
}

/// Crafted: only usage-only chunks counted tokens (no token text at all): the count stands, but
/// there is no token time (TTFT unknown, not the usage chunk's arrival).
#[test]
fn crafted_usage_without_any_token_event_has_no_times() {
    let (_, r) = run(&[
        (0.010, FINISH),
        (0.300, r#"{"choices":[],"usage":{"completion_tokens":5}}"#),
        (0.301, "[DONE]"),
    ]);
    assert_eq!(r.output_tokens, 5);
    assert_eq!(r.untimed_tokens, 5);
    assert_eq!(r.ttft_s(), None);
    assert_eq!(r.itl_s(), None);
    assert_eq!(r.latency_s(), None);
}

// ------------------------------------------------------------------ multi-token chunks

/// Captured (vLLM ngram speculative decoding, continuous usage): 24 tokens in 16 token events;
/// the events carry the usage, so every token is timed and TTST is 0 at a multi-token chunk.
#[test]
fn captured_multi_token_chunks_are_timed_at_their_event() {
    let r = Run::lines("local-captures/vllm-completions-stream-specdecode.sse");
    let rec = &r.record;
    assert_eq!(rec.output_tokens, 24);
    assert_eq!(rec.token_events, 16);
    assert_eq!(rec.untimed_tokens, 0);
    assert_eq!(rec.last_token_at, rec.last_token_event_at);
    let span = at(r.base, rec.last_token_at) - at(r.base, rec.first_token_at);
    approx(rec.itl_s(), span / 23.0);
    approx(rec.chunk_itl_s(), span / 15.0);
}

/// Crafted: a multi-token chunk (usage 1 → 3) and a final usage-only chunk that agrees: TTST 0
/// at the multi-token chunk, ITL over 3 gaps, latency at the last token event.
#[test]
fn crafted_multi_token_chunk_then_usage_only() {
    let (_, r) = run(&[
        (
            0.100,
            r#"{"choices":[{"index":0,"text":"x"}],"usage":{"completion_tokens":1}}"#,
        ),
        (
            0.120,
            r#"{"choices":[{"index":0,"text":"yz"}],"usage":{"completion_tokens":3}}"#,
        ),
        (
            0.150,
            r#"{"choices":[{"index":0,"text":"w","finish_reason":"length"}],"usage":{"completion_tokens":4}}"#,
        ),
        (0.500, r#"{"choices":[],"usage":{"completion_tokens":4}}"#),
        (0.501, "[DONE]"),
    ]);
    assert_eq!(r.output_tokens, 4);
    approx(r.ttst_s(), 0.020);
    approx(r.itl_s(), 0.050 / 3.0);
    approx(r.latency_s(), 0.150);
    assert!(r.continuous_usage);
}

/// Crafted: a token whose text is empty mid-stream (usage grew on an in-progress choice chunk)
/// is still a timed token (pitfall 12's caveat), unlike usage after the finish.
#[test]
fn crafted_empty_text_token_mid_stream_is_timed() {
    let (_, r) = run(&[
        (
            0.100,
            r#"{"choices":[{"index":0,"text":"x"}],"usage":{"completion_tokens":1}}"#,
        ),
        (
            0.120,
            r#"{"choices":[{"index":0,"text":""}],"usage":{"completion_tokens":2}}"#,
        ),
        (
            0.140,
            r#"{"choices":[{"index":0,"text":"","finish_reason":"stop"}],"usage":{"completion_tokens":3}}"#,
        ),
        (0.141, "[DONE]"),
    ]);
    assert_eq!(r.output_tokens, 3);
    assert_eq!(r.untimed_tokens, 1, "the finish chunk's token");
    approx(r.ttst_s(), 0.020);
    approx(r.latency_s(), 0.120);
    approx(r.itl_s(), 0.020 / 2.0);
}

// --------------------------------------------------------------- server-side extras (§3)

/// SGLang's flat `usage.reasoning_tokens` is read, and clamped to the completion total with a
/// flag when it exceeds it.
#[test]
fn sglang_flat_reasoning_tokens_read_and_clamped() {
    let (_, r) = run(&[
        (0.1, TOK_A),
        (0.2, TOK_B),
        (
            0.2,
            r#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2,"reasoning_tokens":1}}"#,
        ),
        (0.21, "[DONE]"),
    ]);
    assert_eq!(r.reasoning_tokens, Some(1));
    assert!(!r.reasoning_tokens_clamped);
    let (_, r) = run(&[
        (0.1, TOK_A),
        (0.2, TOK_B),
        (
            0.2,
            r#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2,"reasoning_tokens":7}}"#,
        ),
        (0.21, "[DONE]"),
    ]);
    assert_eq!(r.reasoning_tokens, Some(2));
    assert!(r.reasoning_tokens_clamped);
    // the details form wins over the flat one
    let (_, r) = run(&[
        (0.1, TOK_A),
        (
            0.2,
            r#"{"choices":[],"usage":{"completion_tokens":1,"reasoning_tokens":0,"completion_tokens_details":{"reasoning_tokens":1}}}"#,
        ),
        (0.21, "[DONE]"),
    ]);
    assert_eq!(r.reasoning_tokens, Some(1));
}

/// llama.cpp's final `timings` with speculative draft counts (shape of llama-server with a draft
/// model: `draft_n`, `draft_n_accepted` beside the usual fields).
#[test]
fn llamacpp_timings_with_draft_counts() {
    let (_, r) = run(&[
        (0.1, TOK_A),
        (
            0.2,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"timings":{"cache_n":236,"prompt_n":1,"prompt_ms":30.958,"prompt_per_token_ms":30.958,"prompt_per_second":32.30,"predicted_n":35,"predicted_ms":661.064,"predicted_per_token_ms":18.88,"predicted_per_second":52.94,"draft_n":40,"draft_n_accepted":30}}"#,
        ),
        (0.21, "[DONE]"),
    ]);
    let t = r.timings.expect("timings");
    assert_eq!(t.prompt_n, Some(1));
    assert_eq!(t.cache_n, Some(236));
    assert_eq!(t.prompt_total(), Some(237));
    assert_eq!(t.predicted_n, Some(35));
    assert_eq!(t.predicted_per_second, Some(52.94));
    assert_eq!(t.draft_n, Some(40));
    assert_eq!(t.draft_n_accepted, Some(30));
    approx(t.draft_acceptance_rate(), 0.75);
    approx(t.predicted_tokens_per_s(), 35.0 * 1000.0 / 661.064);
}

/// Break-it round 8: an empty chunk whose usage grew at once, and the text 0.5 s later with
/// the usage unchanged: the token came with its text (TTFT 0.5 s, not at the empty chunk).
#[test]
fn an_empty_chunk_counted_before_its_text_does_not_time_the_first_token() {
    let empty1 = r#"{"choices":[{"index":0,"delta":{"content":""},"finish_reason":null}],"usage":{"completion_tokens":1}}"#;
    let text1 = r#"{"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}],"usage":{"completion_tokens":1}}"#;
    let text2 = r#"{"choices":[{"index":0,"delta":{"content":" yo"},"finish_reason":null}],"usage":{"completion_tokens":2}}"#;
    let (base, r) = run(&[(0.002, empty1), (0.5, text1), (0.6, text2), (0.6, "[DONE]")]);
    assert_eq!(r.output_tokens, 2);
    approx(Some(at(base, r.first_token_at)), 0.5);
    approx(Some(at(base, r.second_token_at)), 0.6);
    assert_eq!(r.timed_events.len(), 2);
    assert_eq!(r.timed_events[0].tokens, 1);
    // vLLM's partial UTF-8 first token: the empty chunk is a token, the next one's usage grew
    let part = r#"{"choices":[{"index":0,"delta":{"content":"\u00e9"},"finish_reason":null}],"usage":{"completion_tokens":2}}"#;
    let (base, r) = run(&[(0.002, empty1), (0.01, part), (0.01, "[DONE]")]);
    approx(Some(at(base, r.first_token_at)), 0.002);
    assert_eq!(r.output_tokens, 2);
}
