//! The streaming cases of `shared/reference/pitfalls.md` as small inline streams with arrival
//! times (seconds after the request was sent), asserting TTFT / ITL / token counts exactly.

mod common;

use std::time::Instant;

use common::*;
use servebench_sse::{
    RequestRecord, RequestTracker, SseFramer, ERR_NO_DONE, ERR_NO_OUTPUT, ERR_USAGE_INVALID,
};

/// Feed `(t, bytes)` reads of one request sent at `base`; the body ends at `end_t`.
fn run_reads(
    reads: &[(f64, &str)],
    end_t: f64,
    clean_eof: bool,
    cancelled: bool,
) -> (Instant, RequestRecord) {
    let base = Instant::now();
    let mut framer = SseFramer::new();
    let mut t = RequestTracker::new(base);
    for (at, bytes) in reads {
        framer.push(bytes.as_bytes(), base + secs(*at), |ev| {
            t.apply_event(ev);
        });
    }
    if clean_eof && !cancelled {
        framer.finish(base + secs(end_t), |ev| {
            t.apply_event(ev);
        });
    }
    (base, t.finish(base + secs(end_t), clean_eof, cancelled))
}

/// Each `(t, payload)` as one `data: payload\n\n` event in its own read; clean end of body.
fn run(events: &[(f64, &str)]) -> (Instant, RequestRecord) {
    let owned: Vec<(f64, String)> = events
        .iter()
        .map(|(t, p)| (*t, format!("data: {p}\n\n")))
        .collect();
    let reads: Vec<(f64, &str)> = owned.iter().map(|(t, s)| (*t, s.as_str())).collect();
    let end = events.last().map_or(0.0, |e| e.0) + 0.001;
    run_reads(&reads, end, true, false)
}

fn approx(a: Option<f64>, b: f64) {
    let a = a.expect("value");
    assert!((a - b).abs() < 1e-9, "{a} != {b}");
}

// 1. Role-only first chunk is not the first token.
#[test]
fn pitfall_01_role_only_first_chunk() {
    let (_, r) = run(&[
        (
            0.004,
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#,
        ),
        (
            0.812,
            r#"{"choices":[{"index":0,"delta":{"content":"Hello"},"finish_reason":null}]}"#,
        ),
        (
            0.835,
            r#"{"choices":[{"index":0,"delta":{"content":" world"},"finish_reason":null}]}"#,
        ),
        (0.836, "[DONE]"),
    ]);
    approx(r.ttft_s(), 0.812);
    assert_eq!(r.output_tokens, 2);
    approx(r.ttst_s(), 0.023);
    approx(r.itl_s(), 0.023);
    approx(r.latency_s(), 0.835);
    assert!(r.completed && r.error.is_none());
}

// 2 (second stream). Only the role chunk and [DONE]: no TTFT sample, failed.
#[test]
fn pitfall_02_role_then_done_has_no_ttft() {
    let (_, r) = run(&[
        (
            0.004,
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#,
        ),
        (0.005, "[DONE]"),
    ]);
    assert_eq!(r.ttft_s(), None);
    assert_eq!(r.error.as_deref(), Some(ERR_NO_OUTPUT));
    assert!(!r.completed);
}

// 3. delta.reasoning is the first token; time to first content reported separately.
#[test]
fn pitfall_03_delta_reasoning() {
    let (_, r) = run(&[
        (
            0.210,
            r#"{"choices":[{"index":0,"delta":{"reasoning":"Okay"},"finish_reason":null}]}"#,
        ),
        (
            3.480,
            r#"{"choices":[{"index":0,"delta":{"content":"\n\n"},"finish_reason":null}]}"#,
        ),
    ]);
    approx(r.ttft_s(), 0.210);
    approx(r.ttfc_s(), 3.480);
    assert_eq!(r.output_tokens, 2);
    assert_eq!(r.reasoning_token_events, 1);
    assert_eq!(
        r.error.as_deref(),
        Some(ERR_NO_DONE),
        "excerpt ends without [DONE]"
    );
}

// 4. reasoning_content only (capped inside reasoning): TTFT not null, no visible content.
#[test]
fn pitfall_04_reasoning_content_capped() {
    let (_, r) = run(&[
        (
            0.150,
            r#"{"choices":[{"index":0,"delta":{"reasoning_content":"Let"},"finish_reason":null}]}"#,
        ),
        (
            0.170,
            r#"{"choices":[{"index":0,"delta":{"reasoning_content":" me"},"finish_reason":"length"}]}"#,
        ),
        (
            0.171,
            r#"{"choices":[],"usage":{"prompt_tokens":40,"completion_tokens":2,"total_tokens":42}}"#,
        ),
        (0.172, "[DONE]"),
    ]);
    approx(r.ttft_s(), 0.150);
    assert_eq!(r.output_tokens, 2);
    assert_eq!(r.first_content_at, None, "visible-content tokens 0");
    assert_eq!(r.ttfc_s(), None);
    assert_eq!(r.reasoning_token_events, 2);
    assert_eq!(r.prompt_tokens, Some(40));
    approx(r.itl_s(), 0.020);
    assert_eq!(r.finish_reason.as_deref(), Some("length"));
    assert!(r.completed);
}

// 6. No valid token: failed, excluded from TTFT (never TTFT 0).
#[test]
fn pitfall_06_no_token_is_not_success() {
    let (_, r) = run_reads(
        &[(0.01, "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\ndata: [DONE]\n\n")],
        0.02,
        true,
        false,
    );
    assert!(r.done);
    assert_eq!(r.ttft_s(), None);
    assert_eq!(r.output_tokens, 0);
    assert_eq!(r.error.as_deref(), Some(ERR_NO_OUTPUT));
    assert!(!r.completed);
}

// 7. Error object inside an HTTP-200 stream, and its variants.
#[test]
fn pitfall_07_error_inside_200_stream() {
    let (_, r) = run(&[
        (
            0.5,
            r#"{"error": {"message": "TimeoutError", "type": "GatewayTimeout", "code": 504}}"#,
        ),
        (0.6, "[DONE]"),
    ]);
    assert_eq!(r.error.as_deref(), Some("stream error: TimeoutError (504)"));
    assert_eq!(r.ttft_s(), None);
    assert_eq!(r.output_tokens, 0);
    assert!(!r.completed);

    // vLLM error object
    let (_, r) = run(&[(
        0.5,
        r#"{"object":"error","message":"This model's maximum context length is 2048 tokens","type":"BadRequestError","param":null,"code":400}"#,
    )]);
    assert_eq!(
        r.error.as_deref(),
        Some("stream error: This model's maximum context length is 2048 tokens (400)")
    );

    // OpenRouter: error + finish_reason "error", after a token
    let (_, r) = run(&[
        (
            0.3,
            r#"{"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}"#,
        ),
        (
            0.5,
            r#"{"error":{"code":"server_error","message":"Provider disconnected"},"choices":[{"index":0,"delta":{"content":""},"finish_reason":"error"}]}"#,
        ),
    ]);
    assert_eq!(
        r.error.as_deref(),
        Some("stream error: Provider disconnected (server_error)")
    );
    assert_eq!(r.output_tokens, 1, "tokens before the error are kept");
    assert!(!r.completed);

    // finish_reason "error" alone
    let (_, r) = run(&[
        (
            0.3,
            r#"{"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}"#,
        ),
        (
            0.5,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"error"}]}"#,
        ),
        (0.6, "[DONE]"),
    ]);
    assert!(r.failed() && !r.completed);

    // Anthropic-style `event: error`
    let (_, r) = run_reads(
        &[
            (0.3, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n"),
            (0.4, "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n"),
        ],
        0.5,
        true,
        false,
    );
    assert_eq!(
        r.error.as_deref(),
        Some("stream error: Overloaded (overloaded_error)")
    );
}

// 8. Body exactly `data: [DONE]\n\n`.
#[test]
fn pitfall_08_done_only() {
    let (_, r) = run_reads(&[(0.2, "data: [DONE]\n\n")], 0.2, true, false);
    assert!(r.done);
    assert_eq!(r.ttft_s(), None);
    assert_eq!(r.error.as_deref(), Some(ERR_NO_OUTPUT));
    assert!(!r.completed);
}

// 9. llama.cpp: HTTP 200, error object without choices.
#[test]
fn pitfall_09_llamacpp_context_error() {
    let (_, r) = run(&[(
        0.05,
        r#"{"error":{"code":400,"message":"the request exceeds the available context size","type":"exceed_context_size_error"}}"#,
    )]);
    assert_eq!(
        r.error.as_deref(),
        Some("stream error: the request exceeds the available context size (400)")
    );
    assert_eq!(r.ttft_s(), None);
    assert_eq!(r.latency_s(), None);
}

// 10. Several tokens per chunk: token ITL from usage vs chunk ITL.
#[test]
fn pitfall_10_spec_decode_itl_per_token_not_per_chunk() {
    let payloads: Vec<(f64, String)> = (0..10)
        .map(|i| {
            (
                0.1 + 0.00872 * i as f64,
                format!(
                    r#"{{"choices":[{{"index":0,"delta":{{"content":"abc"}}}}],"usage":{{"prompt_tokens":9,"completion_tokens":{}}}}}"#,
                    3 * (i + 1)
                ),
            )
        })
        .collect();
    let mut events: Vec<(f64, &str)> = payloads.iter().map(|(t, p)| (*t, p.as_str())).collect();
    events.push((0.2, "[DONE]"));
    let (_, r) = run(&events);
    assert_eq!(r.output_tokens, 30);
    assert_eq!(r.token_events, 10);
    assert!(r.continuous_usage);
    approx(r.chunk_itl_s(), 0.00872);
    approx(r.itl_s(), 9.0 * 0.00872 / 29.0);
    approx(r.ttst_s(), 0.0); // the first chunk already carried 3 tokens
    approx(r.output_tps_per_user(), 29.0 / (9.0 * 0.00872));
}

// 11. TTFT is never an ITL gap.
#[test]
fn pitfall_11_ttft_not_in_itl() {
    let (_, r) = run(&[
        (
            1.000,
            r#"{"choices":[{"index":0,"text":"a","finish_reason":null}]}"#,
        ),
        (
            1.100,
            r#"{"choices":[{"index":0,"text":"b","finish_reason":null}]}"#,
        ),
        (
            1.200,
            r#"{"choices":[{"index":0,"text":"c","finish_reason":"length"}]}"#,
        ),
        (1.201, "[DONE]"),
    ]);
    approx(r.ttft_s(), 1.000);
    approx(r.itl_s(), 0.100);
    approx(r.chunk_itl_s(), 0.100);
    approx(r.ttst_s(), 0.100);
    approx(r.latency_s(), 1.200);
    approx(r.e2e_output_tps_per_user(), 3.0 / 1.2);
    approx(r.output_tps_per_user(), 10.0);
}

// 12. Empty "" texts are not tokens; a multi-token chunk; usage 2 then 3.
#[test]
fn pitfall_12_empty_chunks_and_multi_token_chunks() {
    let base = Instant::now();
    let mut t = RequestTracker::new(base);
    let mut added = Vec::new();
    let mut framer = SseFramer::new();
    for (at, p) in [
        (
            0.40,
            r#"{"choices":[{"index":0,"text":"","finish_reason":null}]}"#,
        ),
        (
            0.55,
            r#"{"choices":[{"index":0,"text":"","finish_reason":null}]}"#,
        ),
        (
            0.70,
            r#"{"choices":[{"index":0,"text":" Hello world","finish_reason":null}],"usage":{"prompt_tokens":9000,"completion_tokens":2,"total_tokens":9002}}"#,
        ),
        (
            0.72,
            r#"{"choices":[{"index":0,"text":"!","finish_reason":"stop"}],"usage":{"prompt_tokens":9000,"completion_tokens":3,"total_tokens":9003}}"#,
        ),
    ] {
        framer.push(format!("data: {p}\n\n").as_bytes(), base + secs(at), |ev| {
            added.push(t.apply_event(ev));
        });
    }
    assert_eq!(added, vec![0, 0, 2, 1], "tokens in the first chunk: 2");
    let r = t.finish(base + secs(0.73), true, false);
    approx(r.ttft_s(), 0.70);
    assert_eq!(r.output_tokens, 3);
    assert_eq!(r.token_events, 2);
    assert!(r.continuous_usage);
    approx(r.ttst_s(), 0.0);
    approx(r.itl_s(), 0.01);
    assert_eq!(r.prompt_tokens, Some(9000));
    assert!(r.completed, "finish_reason without [DONE] on a clean end");
}

// 12 (caveat). Usage grew while the text was empty: that event is the first token.
#[test]
fn pitfall_12_usage_growth_on_empty_text_is_a_token() {
    let (_, r) = run(&[
        (
            0.40,
            r#"{"choices":[{"index":0,"text":""}],"usage":{"completion_tokens":0}}"#,
        ),
        (
            0.50,
            r#"{"choices":[{"index":0,"text":""}],"usage":{"completion_tokens":1}}"#,
        ),
        (
            0.60,
            r#"{"choices":[{"index":0,"text":"é"}],"usage":{"completion_tokens":2}}"#,
        ),
        (0.61, "[DONE]"),
    ]);
    approx(r.ttft_s(), 0.50);
    approx(r.ttst_s(), 0.10);
    assert_eq!(r.output_tokens, 2);
    assert_eq!(r.token_events, 1);
    assert!(!r.continuous_usage, "fewer than 2 token events");
}

// 13. Server usage is authoritative over the number of text events.
#[test]
fn pitfall_13_usage_is_authoritative() {
    let (_, r) = run(&[
        (
            0.107,
            r#"{"choices":[{"index":0,"delta":{"content":"junk"}}]}"#,
        ),
        (
            6.47,
            r#"{"choices":[{"index":0,"delta":{"content":"junk"},"finish_reason":"length"}]}"#,
        ),
        (
            6.47,
            r#"{"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":1000}}"#,
        ),
        (6.471, "[DONE]"),
    ]);
    assert_eq!(r.output_tokens, 1000);
    assert_eq!(r.usage_completion_tokens, Some(1000));
    assert!(!r.usage_below_count);
    approx(r.itl_s(), (6.47 - 0.107) / 999.0);
}

// 14. Tool-call deltas are generated output.
#[test]
fn pitfall_14_tool_calls_count() {
    let (_, r) = run(&[
        (
            0.2,
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"f","arguments":""}}]}}],"usage":{"completion_tokens":1}}"#,
        ),
        (
            0.3,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"a\":"}}]}}],"usage":{"completion_tokens":64}}"#,
        ),
        (
            0.4,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"1}"}}]},"finish_reason":"tool_calls"}],"usage":{"completion_tokens":127}}"#,
        ),
        (0.41, "[DONE]"),
    ]);
    approx(r.ttft_s(), 0.2);
    assert_eq!(r.token_events, 3);
    assert_eq!(r.output_tokens, 127);
    assert!(r.continuous_usage);
    approx(r.itl_s(), 0.2 / 126.0);
    assert_eq!(r.finish_reason.as_deref(), Some("tool_calls"));
}

// 16. Non-cumulative per-chunk usage is flagged; the final usage (3) wins.
#[test]
fn pitfall_16_non_cumulative_usage_flagged() {
    let (_, r) = run(&[
        (
            0.1,
            r#"{"choices":[{"index":0,"delta":{"content":"a"}}],"usage":{"prompt_tokens":5,"completion_tokens":1}}"#,
        ),
        (
            0.2,
            r#"{"choices":[{"index":0,"delta":{"content":"b"}}],"usage":{"prompt_tokens":5,"completion_tokens":1}}"#,
        ),
        (
            0.3,
            r#"{"choices":[{"index":0,"delta":{"content":"c"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1}}"#,
        ),
        (
            0.31,
            r#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":3}}"#,
        ),
        (0.32, "[DONE]"),
    ]);
    assert_eq!(r.output_tokens, 3);
    assert_eq!(r.usage_completion_tokens, Some(3));
    assert!(r.nonmonotonic_usage);
    assert!(!r.continuous_usage);
    assert!(r.completed);

    // per-delta values that go down (speculative decoding with the same bug)
    let (_, r) = run(&[
        (
            0.1,
            r#"{"choices":[{"index":0,"delta":{"content":"a"}}],"usage":{"completion_tokens":3}}"#,
        ),
        (
            0.2,
            r#"{"choices":[{"index":0,"delta":{"content":"b"}}],"usage":{"completion_tokens":2}}"#,
        ),
        (0.3, "[DONE]"),
    ]);
    assert!(r.nonmonotonic_usage && !r.continuous_usage);
    assert_eq!(
        r.output_tokens, 2,
        "non-cumulative usage is no count: one token per token event"
    );
    assert!(r.timed_events.iter().all(|e| e.tokens == 1));

    // usage that counts down (5, 4, 3, 2, 1): the 5 on the first chunk is no arrival of 5
    // tokens; recounted one per event, the second token is the second event (break-it round 2)
    let events: Vec<(f64, String)> = (1..=5u64)
        .map(|k| {
            (
                0.1 * k as f64,
                format!(
                    r#"{{"choices":[{{"index":0,"delta":{{"content":"t"}}}}],"usage":{{"completion_tokens":{}}}}}"#,
                    6 - k
                ),
            )
        })
        .chain([(0.6, "[DONE]".to_string())])
        .collect();
    let refs: Vec<(f64, &str)> = events.iter().map(|(t, e)| (*t, e.as_str())).collect();
    let (_, r) = run(&refs);
    assert!(r.nonmonotonic_usage && r.completed);
    assert_eq!(
        (r.output_tokens, r.counted_tokens, r.untimed_tokens),
        (5, 5, 0)
    );
    assert_eq!(r.timed_events.len(), 5);
    assert!(r.timed_events.iter().all(|e| e.tokens == 1));
    approx(r.ttst_s(), 0.1);
    approx(r.itl_s(), 0.1);

    // a final usage-only chunk above the event count still raises it (untimed)
    let (_, r) = run(&[
        (
            0.1,
            r#"{"choices":[{"index":0,"delta":{"content":"a"}}],"usage":{"completion_tokens":1}}"#,
        ),
        (
            0.2,
            r#"{"choices":[{"index":0,"delta":{"content":"b"}}],"usage":{"completion_tokens":1}}"#,
        ),
        (0.25, r#"{"choices":[],"usage":{"completion_tokens":4}}"#),
        (0.3, "[DONE]"),
    ]);
    assert_eq!((r.output_tokens, r.untimed_tokens), (4, 2));

    // per-delta usage of 2 per chunk, confirmed by a final total of 6 (break-it round 3: it was
    // counted 3, one per event, plus 3 untimed at the end)
    let (_, r) = run(&[
        (
            0.1,
            r#"{"choices":[{"index":0,"delta":{"content":"ab"}}],"usage":{"completion_tokens":2}}"#,
        ),
        (
            0.2,
            r#"{"choices":[{"index":0,"delta":{"content":"cd"}}],"usage":{"completion_tokens":2}}"#,
        ),
        (
            0.3,
            r#"{"choices":[{"index":0,"delta":{"content":"ef"}}],"usage":{"completion_tokens":2}}"#,
        ),
        (0.35, r#"{"choices":[],"usage":{"completion_tokens":6}}"#),
        (0.4, "[DONE]"),
    ]);
    assert!(r.nonmonotonic_usage && r.completed);
    assert_eq!((r.output_tokens, r.untimed_tokens), (6, 0));
    assert!(r.timed_events.iter().all(|e| e.tokens == 2), "{r:?}");
    assert!(!r.usage_below_count);
    approx(r.ttst_s(), 0.0);
    // …and without the confirming total it stays one per event (a lower bound, warned of)
    let (_, r) = run(&[
        (
            0.1,
            r#"{"choices":[{"index":0,"delta":{"content":"ab"}}],"usage":{"completion_tokens":2}}"#,
        ),
        (
            0.2,
            r#"{"choices":[{"index":0,"delta":{"content":"cd"}}],"usage":{"completion_tokens":2}}"#,
        ),
        (
            0.3,
            r#"{"choices":[{"index":0,"delta":{"content":"ef"}}],"usage":{"completion_tokens":2}}"#,
        ),
        (0.4, "[DONE]"),
    ]);
    assert_eq!((r.output_tokens, r.untimed_tokens), (3, 0));
    assert!(
        !r.usage_below_count,
        "per-chunk values are no total to compare"
    );
}

// 16b. A completion count that is no count (negative, fractional, beyond u64) is no missing
// usage: the request fails as usage_implausible (break-it round 2: it was dropped silently and
// the cell said usage "was not streamed on every chunk").
#[test]
fn pitfall_16_completion_tokens_that_are_no_count_fail_the_request() {
    for bad in ["-3", "2.5", "1e308", "99999999999999999999"] {
        let first = format!(
            r#"{{"choices":[{{"index":0,"delta":{{"content":"a"}}}}],"usage":{{"completion_tokens":{bad}}}}}"#
        );
        let (_, r) = run(&[
            (0.1, first.as_str()),
            (
                0.2,
                r#"{"choices":[{"index":0,"delta":{"content":"b"}}],"usage":{"completion_tokens":2}}"#,
            ),
            (0.3, "[DONE]"),
        ]);
        assert!(!r.completed, "{bad}");
        assert_eq!(r.error.as_deref(), Some(ERR_USAGE_INVALID), "{bad}");
    }
    // null is usage not sent, not a bad count
    let (_, r) = run(&[
        (
            0.1,
            r#"{"choices":[{"index":0,"delta":{"content":"a"}}],"usage":{"completion_tokens":null}}"#,
        ),
        (0.3, "[DONE]"),
    ]);
    assert!(r.completed && r.error.is_none());
}

// 19. No reasoning breakdown: unknown, never 0.
#[test]
fn pitfall_19_reasoning_tokens_unknown() {
    let (_, r) = run(&[
        (
            0.1,
            r#"{"choices":[{"index":0,"delta":{"reasoning_content":"think"}}]}"#,
        ),
        (
            0.2,
            r#"{"choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":"stop"}]}"#,
        ),
        (
            0.3,
            r#"{"choices":[],"usage":{"prompt_tokens":32,"completion_tokens":474,"total_tokens":506}}"#,
        ),
        (0.4, "[DONE]"),
    ]);
    assert_eq!(r.output_tokens, 474);
    assert_eq!(r.reasoning_tokens, None);
    assert_eq!(r.cached_tokens, None);
}

// 20. `data:` without a space, CRLF.
#[test]
fn pitfall_20_no_space_and_crlf() {
    let (_, r) = run_reads(
        &[
            (
                0.1,
                "data:{\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\r\n\r\n",
            ),
            (
                0.2,
                "data:{\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\r\n\r\ndata:[DONE]\r\n\r\n",
            ),
        ],
        0.3,
        true,
        false,
    );
    assert_eq!(r.output_tokens, 2);
    approx(r.ttft_s(), 0.1);
    assert!(r.completed);
}

// 22. Comment lines are never tokens and never JSON.
#[test]
fn pitfall_22_comments() {
    let (_, r) = run_reads(
        &[
            (0.5, ": OPENROUTER PROCESSING\n\n"),
            (30.0, ":\n\n"),
            (31.0, ": ping - 2025-01-01 00:00:00\r\n\r\n"),
            (32.5, "data: {\"choices\":[{\"delta\":{\"content\":\"Hello\"}}]}\n\n"),
            (32.6, ":\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"!\"},\"finish_reason\":\"stop\"}]}\n\n"),
            (32.7, "data: [DONE]\n\n"),
        ],
        33.0,
        true,
        false,
    );
    approx(r.ttft_s(), 32.5);
    assert_eq!(r.output_tokens, 2);
    assert!(r.error.is_none() && r.completed);
}

// Cancellation: a partial request is not an error and not completed; ITL allowed.
#[test]
fn cancelled_partial_request() {
    let (_, r) = run_reads(
        &[
            (0.3, "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n"),
            (0.4, "data: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n\n"),
            (0.5, "data: {\"choices\":[{\"delta\":{\"content\":\"c\"}}]}\n\ndata: {\"choices\":[{\"del"),
        ],
        0.55,
        false,
        true,
    );
    assert!(r.cancelled && !r.completed && !r.failed());
    assert_eq!(r.output_tokens, 3);
    approx(r.itl_s(), 0.1);
    assert_eq!(r.latency_s(), None, "completed requests only");
    assert_eq!(r.e2e_output_tps_per_user(), None);
    assert_eq!(r.last_token_at.map(|t| t > r.sent_at), Some(true));

    // cancelled before any token: not failed either
    let (_, r) = run_reads(&[], 1.0, false, true);
    assert!(r.cancelled && !r.failed() && !r.completed);
}

// Transport error before [DONE] fails the request; after [DONE] it does not matter.
#[test]
fn transport_error_endings() {
    let (_, r) = run_reads(
        &[(
            0.3,
            "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n",
        )],
        0.4,
        false,
        false,
    );
    assert_eq!(r.error.as_deref(), Some(servebench_sse::ERR_INTERRUPTED));
    let (_, r) = run_reads(
        &[(
            0.3,
            "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: [DONE]\n\n",
        )],
        0.4,
        false,
        false,
    );
    assert!(r.completed && r.error.is_none());
}

// Malformed payloads fail the request; a whitespace-only payload is ignored.
#[test]
fn malformed_payloads() {
    let (_, r) = run(&[
        (0.1, r#"{"choices":[{"delta":{"content":"a"}}]}"#),
        (0.2, "   "),
        (0.3, "[DONE]"),
    ]);
    assert!(r.completed && r.error.is_none());
    let (_, r) = run(&[
        (0.1, r#"{"choices":[{"delta":{"content":"a"}}]}"#),
        (0.2, r#"{"choices":[{"delta":{"content":"b"#),
        (0.3, "[DONE]"),
    ]);
    let e = r.error.expect("failed");
    assert!(e.starts_with("malformed SSE payload: "), "{e}");
}

// LF-only stream through the tracker: a final chunk followed directly by `data: [DONE]`.
#[test]
fn lf_only_stream_times() {
    let (_, r) = run_reads(
        &[
            (0.1, "data: {\"choices\":[{\"text\":\"a\"}]}\n"),
            (
                0.2,
                "data: {\"choices\":[{\"text\":\"b\",\"finish_reason\":\"stop\"}]}\n",
            ),
            (0.9, "data: [DONE]\n"),
        ],
        1.0,
        true,
        false,
    );
    approx(r.ttft_s(), 0.1);
    approx(r.itl_s(), 0.1);
    approx(r.latency_s(), 0.2);
    assert!(r.done && r.completed);
}
