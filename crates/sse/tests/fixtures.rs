//! Every SSE fixture under `tests/data/engines/` (real server bytes), with the expected values of
//! `tests/data/engines/INDEX.md` (sections C, D, F).

mod common;

use common::*;
use servebench_sse::{Decoded, Timings, Usage, ERR_NO_DONE, ERR_NO_OUTPUT};

fn chunk<'a>(d: &'a Decoded<'static>) -> &'a servebench_sse::Chunk<'static> {
    match d {
        Decoded::Chunk(c) => c,
        other => panic!("expected a chunk, got {other:?}"),
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

// ---------------------------------------------------------------- C. artifacts/sse

#[test]
fn llamacpp_b6510_reasoning_and_final_timings() {
    let r = Run::lines("sse/llamacpp-b6510-reasoning-and-final-timings.excerpt.sse");
    assert_eq!(r.events.len(), 2);
    assert_eq!(r.count_malformed(), 0);
    let c0 = chunk(&r.decoded[0]);
    assert!(c0.token_event && c0.reasoning_only);
    assert_eq!(c0.reasoning.as_deref(), Some("Okay"));
    let c1 = chunk(&r.decoded[1]);
    assert!(!c1.token_event);
    assert_eq!(c1.finish_reason.as_deref(), Some("stop"));
    assert_eq!(
        c1.timings,
        Some(Timings {
            prompt_n: Some(1),
            prompt_ms: Some(17.92),
            predicted_n: Some(394),
            predicted_ms: Some(2623.392),
            cache_n: Some(13),
            predicted_per_second: Some(150.18723850648323),
            draft_n: None,
            draft_n_accepted: None,
        })
    );
    let rec = &r.record;
    assert_eq!(r.idx(rec.first_token_at), Some(0));
    assert_eq!(rec.first_content_at, None);
    assert_eq!(rec.reasoning_token_events, 1);
    assert_eq!(rec.output_tokens, 1);
    assert_eq!(
        rec.response_id.as_deref(),
        Some("chatcmpl-L2v2Gl6NZl443MjXX2LtUNcR6eoUYusk")
    );
    // excerpt: no [DONE], but a finish_reason → completed (clean end)
    assert!(!rec.done && rec.completed && rec.error.is_none());
}

#[test]
fn llamacpp_b6925_gptoss_stream_tail() {
    let r = Run::lines("sse/llamacpp-b6925-gptoss-stream-tail.sse");
    assert_eq!(r.events.len(), 3);
    assert_eq!(r.count_done(), 1);
    assert_eq!(r.token_event_indices(), vec![0]);
    assert_eq!(r.content(), "!");
    let rec = &r.record;
    let t = rec.timings.expect("timings");
    assert_eq!(t.predicted_n, Some(2188));
    assert_eq!(t.predicted_ms, Some(13095.01));
    assert_eq!(t.prompt_n, Some(58));
    assert_eq!(t.cache_n, Some(89));
    assert_eq!(t.prompt_n.unwrap() + t.cache_n.unwrap(), 147);
    assert!((t.predicted_tokens_per_s().unwrap() - 167.09).abs() < 0.005);
    assert!((t.prompt_tokens_per_s().unwrap() - 58.0 / 0.023467).abs() < 1e-6);
    assert_eq!(rec.usage_completion_tokens, None);
    assert_eq!(rec.prompt_tokens, None);
    assert_eq!(rec.finish_reason.as_deref(), Some("stop"));
    assert!(rec.done && rec.completed);
}

#[test]
fn llamacpp_b9020_role_null_then_stop_timings_lf_only() {
    let r = Run::lines("sse/llamacpp-b9020-role-null-then-stop-timings.lf-only.sse");
    assert_eq!(r.events.len(), 3, "LF-only events must be split");
    assert_eq!(r.count_malformed(), 0);
    assert_eq!(r.count_done(), 1);
    let c0 = chunk(&r.decoded[0]);
    assert!(
        !c0.token_event,
        "role chunk with content:null is not a token"
    );
    assert_eq!(c0.content, None);
    let t = r.record.timings.expect("timings");
    assert_eq!(t.predicted_n, Some(81));
    assert_eq!(t.prompt_n, Some(20));
    assert!((t.predicted_tokens_per_s().unwrap() - 39.99).abs() < 0.005);
    assert!((t.prompt_tokens_per_s().unwrap() - 134.95).abs() < 0.005);
    // the capture holds no token event at all → zero output tokens → failed
    assert_eq!(r.record.output_tokens, 0);
    assert_eq!(r.record.first_token_at, None);
    assert_eq!(r.record.error.as_deref(), Some(ERR_NO_OUTPUT));
    assert!(!r.record.completed);
}

#[test]
fn openai_gpt4o_usage_null_then_usage_chunk() {
    let r =
        Run::lines("sse/openai-gpt4o-2024-stream-tail-usage-null-then-usage-chunk.payloads.sse");
    assert_eq!(r.events.len(), 5);
    assert_eq!(r.token_event_indices(), vec![0, 1]);
    assert_eq!(r.content(), "助手。");
    for d in &r.decoded[..3] {
        assert_eq!(chunk(d).usage, None, "usage:null → None");
    }
    assert_eq!(
        chunk(&r.decoded[3]).usage,
        Some(Usage {
            prompt_tokens: Some(14),
            completion_tokens: Some(3),
            completion_tokens_invalid: false,
            cached_tokens: None,
            reasoning_tokens: None
        })
    );
    let rec = &r.record;
    assert_eq!(rec.output_tokens, 3);
    assert_eq!(rec.usage_completion_tokens, Some(3));
    assert_eq!(rec.token_events, 2);
    assert_eq!(rec.usage_token_events, 0);
    assert!(!rec.continuous_usage && !rec.nonmonotonic_usage && !rec.usage_below_count);
    assert_eq!(rec.prompt_tokens, Some(14));
    assert_eq!(rec.cached_tokens, None);
    assert_eq!(r.idx(rec.first_token_at), Some(0));
    assert_eq!(r.idx(rec.second_token_at), Some(1));
    // the usage chunk raised the total from 2 to 3: it corrects the count, not the last token
    // time (issue 8)
    assert_eq!(r.idx(rec.last_token_at), Some(1));
    assert_eq!(rec.finish_reason.as_deref(), Some("stop"));
    assert!(rec.done && rec.completed);
}

#[test]
fn openrouter_processing_comments_then_chunks() {
    let r = Run::lines("sse/openrouter-2025-02-processing-comments-then-chunks.truncated.sse");
    assert_eq!(r.events.len(), 2, "comments are never events");
    assert_eq!(r.token_event_indices(), vec![1]);
    assert_eq!(r.content(), "亚");
    let rec = &r.record;
    assert_eq!(r.idx(rec.first_token_at), Some(1));
    // the first token arrived with the 8th line (2 comments + blank lines + role chunk + blank)
    assert_eq!(rec.first_token_at, Some(r.base + ms(8)));
    assert_eq!(rec.output_tokens, 1);
    // truncated by the source: no [DONE], no finish_reason
    assert_eq!(rec.error.as_deref(), Some(ERR_NO_DONE));
}

#[test]
fn openrouter_midstream_error_chunk() {
    let r = Run::lines("sse/openrouter-docs-midstream-error-chunk.sse");
    assert_eq!(r.events.len(), 1);
    assert_eq!(
        r.decoded[0],
        Decoded::Error {
            message: "Provider disconnected unexpectedly".into(),
            code: Some("server_error".into())
        }
    );
    let rec = &r.record;
    assert!(rec.failed() && !rec.completed);
    assert_eq!(
        rec.error.as_deref(),
        Some("stream error: Provider disconnected unexpectedly (server_error)")
    );
    assert_eq!(rec.ttft_s(), None);
    assert_eq!(rec.output_tokens, 0);
}

#[test]
fn sagemaker_vllm_completions_lf_only() {
    let r = Run::lines("sse/sagemaker-vllm-completions.lf-only.sse");
    assert_eq!(r.events.len(), 5);
    assert_eq!(r.count_done(), 1);
    assert_eq!(r.token_event_indices(), vec![0, 1, 2, 3]);
    assert_eq!(r.content(), "If you have a");
    let last = chunk(&r.decoded[3]);
    assert!(last.token_event, "finish chunk with text \" a\" is a token");
    assert_eq!(last.finish_reason.as_deref(), Some("stop"));
    let rec = &r.record;
    assert_eq!(rec.output_tokens, 4);
    assert_eq!(rec.usage_completion_tokens, None);
    assert!(!rec.continuous_usage);
    assert_eq!(rec.prompt_tokens, None);
    assert_eq!(r.idx(rec.first_token_at), Some(0));
    assert_eq!(r.idx(rec.last_token_at), Some(3));
    // LF-only: each event carries the arrival of its own line
    for (k, e) in r.events.iter().enumerate() {
        assert_eq!(e.at, r.base + ms(k as u64 + 1));
    }
    assert!(rec.done && rec.completed);
}

#[test]
fn sagemaker_vllm_reasoning_chat_lf_only() {
    let r = Run::lines("sse/sagemaker-vllm-reasoning-chat.lf-only.sse");
    assert_eq!(r.events.len(), 24);
    assert_eq!(r.count_done(), 1);
    let c0 = chunk(&r.decoded[0]);
    assert!(!c0.token_event, "role chunk content:\"\" is not a token");
    let tokens = r.token_event_indices();
    assert_eq!(tokens, (1..=21).collect::<Vec<_>>());
    let reasoning: Vec<usize> = r
        .decoded
        .iter()
        .enumerate()
        .filter(|(_, d)| matches!(d, Decoded::Chunk(c) if c.reasoning_only))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(reasoning, (1..=12).collect::<Vec<_>>());
    assert!(
        !chunk(&r.decoded[22]).token_event,
        "final content:\"\" + stop is not a token"
    );
    assert_eq!(
        r.content(),
        "\n\nThe best treatment for this pregnant woman..."
    );
    assert!(r.reasoning().starts_with("\nOkay, let me try"));
    let rec = &r.record;
    assert_eq!(rec.token_events, 21);
    assert_eq!(rec.reasoning_token_events, 12);
    assert_eq!(rec.output_tokens, 21, "no usage: one token per token event");
    assert_eq!(rec.usage_completion_tokens, None);
    assert!(!rec.continuous_usage);
    assert_eq!(
        r.idx(rec.first_token_at),
        Some(1),
        "TTFT at the first reasoning delta"
    );
    assert_eq!(r.idx(rec.first_content_at), Some(13));
    assert_eq!(r.idx(rec.last_token_at), Some(21));
    assert_eq!(rec.finish_reason.as_deref(), Some("stop"));
    assert!(rec.done && rec.completed);
    // ITL over 21 tokens: (22 ms − 2 ms) / 20 gaps
    assert!(close(rec.itl_s().unwrap(), 0.020 / 20.0));
    assert!(close(rec.chunk_itl_s().unwrap(), 0.020 / 20.0));
}

#[test]
fn sglang_hosted_finish_reason_empty_string() {
    let r = Run::lines("sse/sglang-hosted-finish_reason-empty-string.elided.sse");
    assert_eq!(r.events.len(), 4);
    for d in &r.decoded[..3] {
        assert_eq!(chunk(d).finish_reason, None, "\"\" finish_reason is null");
        assert_eq!(chunk(d).usage, None);
    }
    assert_eq!(chunk(&r.decoded[3]).finish_reason.as_deref(), Some("stop"));
    assert_eq!(r.token_event_indices(), vec![1, 2]);
    assert_eq!(r.content(), "月光洒在");
    let rec = &r.record;
    assert_eq!(rec.output_tokens, 2);
    assert_eq!(rec.finish_reason.as_deref(), Some("stop"));
    // no [DONE] in the excerpt, finish_reason present → completed
    assert!(rec.completed);
}

#[test]
fn sglang_hosted_vendor_extra_field() {
    let r = Run::lines("sse/sglang-hosted-first-chunk-vendor-extra-field.sse");
    assert_eq!(r.events.len(), 1);
    let c = chunk(&r.decoded[0]);
    assert!(!c.token_event);
    assert_eq!(c.usage, None);
    assert_eq!(c.reasoning, None);
    assert_eq!(c.id.as_deref(), Some("0ff9d21adf1d458e9b24575c5b1b8115"));
    assert_eq!(r.record.error.as_deref(), Some(ERR_NO_OUTPUT));
}

#[test]
fn sglang_style_hosted_role_null_chunk() {
    let r = Run::lines("sse/sglang-style-hosted-role-null-chunk.sse");
    assert_eq!(r.events.len(), 1);
    let c = chunk(&r.decoded[0]);
    assert!(c.token_event && !c.reasoning_only);
    assert_eq!(c.content.as_deref(), Some("Ta"));
    assert_eq!(c.usage, None);
    assert_eq!(r.idx(r.record.first_token_at), Some(0));
    assert_eq!(r.record.output_tokens, 1);
}

#[test]
fn sglang_usage_on_finish_chunk() {
    let r = Run::lines("sse/sglang-usage-on-finish-chunk.sse");
    assert_eq!(r.events.len(), 2);
    assert_eq!(r.token_event_indices(), vec![0]);
    let c1 = chunk(&r.decoded[1]);
    assert_eq!(c1.finish_reason.as_deref(), Some("length"));
    assert_eq!(
        c1.usage,
        Some(Usage {
            prompt_tokens: Some(5),
            completion_tokens: Some(1),
            completion_tokens_invalid: false,
            cached_tokens: None,
            reasoning_tokens: None
        })
    );
    let rec = &r.record;
    assert_eq!(rec.output_tokens, 1);
    assert_eq!(rec.usage_completion_tokens, Some(1));
    assert_eq!(rec.prompt_tokens, Some(5));
    assert_eq!(
        rec.cached_tokens, None,
        "prompt_tokens_details:null → unknown, not 0"
    );
    assert!(!rec.usage_below_count);
    assert_eq!(rec.finish_reason.as_deref(), Some("length"));
    assert!(rec.completed);
    assert_eq!(rec.itl_s(), None);
    assert_eq!(rec.ttst_s(), None);
}

#[test]
fn tgi_1_4_generate_stream_no_space_after_data() {
    let r = Run::lines("sse/tgi-1.4-generate_stream-no-space-after-data.truncated.sse");
    assert_eq!(r.events.len(), 4);
    assert!(r.events.iter().all(|e| e.event.is_none()));
    assert_eq!(r.token_event_indices(), vec![0, 1, 2, 3]);
    assert_eq!(r.content(), " Deep Learning is a");
    let rec = &r.record;
    assert_eq!(rec.output_tokens, 4);
    assert_eq!(r.idx(rec.first_token_at), Some(0));
    assert_eq!(r.idx(rec.second_token_at), Some(1));
    assert_eq!(r.idx(rec.last_token_at), Some(3));
    // truncated: no final details event
    assert_eq!(rec.error.as_deref(), Some(ERR_NO_DONE));
}

#[test]
fn tgi_2_4_chat_role_every_chunk_empty_id() {
    let r = Run::lines("sse/tgi-2.4.0-chat-stream-role-every-chunk-empty-id.sse");
    assert_eq!(r.events.len(), 3);
    assert_eq!(
        r.token_event_indices(),
        vec![0],
        "role on the chunk does not hide the token"
    );
    assert_eq!(chunk(&r.decoded[0]).id.as_deref(), Some(""));
    let rec = &r.record;
    assert_eq!(rec.output_tokens, 1);
    assert_eq!(rec.response_id, None, "empty id is not an id");
    assert_eq!(rec.usage_completion_tokens, None);
    assert!(rec.done && rec.completed);
    assert_eq!(rec.itl_s(), None);
    assert_eq!(rec.chunk_itl_s(), None);
}

#[test]
fn tgi_2_4_completions_finish_reason_empty_string_lf_only() {
    let r = Run::lines(
        "sse/tgi-2.4.0-completions-stream-finish_reason-empty-string.lf-only.truncated.sse",
    );
    assert_eq!(r.events.len(), 3);
    for d in &r.decoded {
        assert_eq!(chunk(d).finish_reason, None);
    }
    assert_eq!(r.token_event_indices(), vec![0, 1, 2]);
    assert_eq!(r.content(), "\n\n``");
    assert_eq!(r.record.output_tokens, 3);
    assert_eq!(r.record.finish_reason, None);
    assert_eq!(r.record.error.as_deref(), Some(ERR_NO_DONE));
}

#[test]
fn vllm_0_5_role_only_first_chunk() {
    let r = Run::lines("sse/vllm-0.5-chat-role-only-first-chunk.truncated.sse");
    assert_eq!(r.events.len(), 6);
    let c0 = chunk(&r.decoded[0]);
    assert!(!c0.token_event);
    assert_eq!(c0.content, None, "no content key at all");
    assert_eq!(r.token_event_indices(), vec![1, 2, 3, 4, 5]);
    assert_eq!(r.content(), "我是阿里云开发的一款");
    let rec = &r.record;
    assert_eq!(r.idx(rec.first_token_at), Some(1), "TTFT = arrival of 我是");
    assert_eq!(rec.output_tokens, 5);
    assert_eq!(rec.usage_completion_tokens, None);
    assert_eq!(rec.prompt_tokens, None);
}

#[test]
fn vllm_new_delta_reasoning_field() {
    let r = Run::lines("sse/vllm-new-delta-reasoning-field.excerpt.sse");
    assert_eq!(r.events.len(), 2);
    let c0 = chunk(&r.decoded[0]);
    assert!(c0.token_event && c0.reasoning_only);
    assert_eq!(c0.reasoning.as_deref(), Some("Okay"));
    let rec = &r.record;
    assert_eq!(
        r.idx(rec.first_token_at),
        Some(0),
        "first token is delta.reasoning"
    );
    assert_eq!(r.idx(rec.first_content_at), Some(1));
    assert_eq!(rec.reasoning_token_events, 1);
    assert_eq!(rec.output_tokens, 2);
}

#[test]
fn vllm_stream_error_then_done() {
    let r = Run::lines("sse/vllm-stream-error-then-done.sse");
    assert_eq!(r.events.len(), 2);
    assert_eq!(
        r.decoded[0],
        Decoded::Error {
            message: "TimeoutError".into(),
            code: Some("504".into())
        }
    );
    assert_eq!(r.decoded[1], Decoded::Done);
    let rec = &r.record;
    assert_eq!(
        rec.error.as_deref(),
        Some("stream error: TimeoutError (504)")
    );
    assert!(rec.done && !rec.completed);
    assert_eq!(rec.ttft_s(), None);
    assert_eq!(rec.itl_s(), None);
    assert_eq!(rec.output_tokens, 0);
}

// ---------------------------------------------------------------- F. local captures

#[test]
fn llama_server_chat_stream() {
    let r = Run::lines("local-captures/llama-server-chat-stream.sse");
    assert_eq!(r.events.len(), 12);
    let c0 = chunk(&r.decoded[0]);
    assert!(!c0.token_event && c0.content.is_none());
    assert_eq!(r.token_event_indices(), (1..=8).collect::<Vec<_>>());
    assert!(
        r.content().contains('\u{8}'),
        "control characters are content"
    );
    let usage = chunk(&r.decoded[10]);
    assert_eq!(
        usage.usage,
        Some(Usage {
            prompt_tokens: Some(14),
            completion_tokens: Some(8),
            completion_tokens_invalid: false,
            cached_tokens: Some(0),
            reasoning_tokens: None
        })
    );
    let rec = &r.record;
    assert_eq!(rec.output_tokens, 8);
    assert_eq!(rec.usage_completion_tokens, Some(8));
    assert_eq!(rec.token_events, 8);
    assert!(!rec.continuous_usage && !rec.usage_below_count);
    assert_eq!(rec.cached_tokens, Some(0), "server said 0");
    assert_eq!(rec.prompt_tokens, Some(14));
    assert_eq!(rec.finish_reason.as_deref(), Some("length"));
    assert_eq!(rec.timings.and_then(|t| t.predicted_n), Some(8));
    assert_eq!(r.idx(rec.first_token_at), Some(1));
    assert_eq!(r.idx(rec.last_token_at), Some(8));
    assert!(rec.done && rec.completed);
}

#[test]
fn llama_server_completions_stream_usage_on_last_choice_chunk() {
    let r = Run::lines("local-captures/llama-server-completions-stream.sse");
    assert_eq!(r.events.len(), 9);
    assert_eq!(r.token_event_indices(), (0..=6).collect::<Vec<_>>());
    assert!(r.content().contains("\u{FFFD} package"));
    let last = chunk(&r.decoded[7]);
    assert!(!last.token_event, "text \"\" is not a token");
    assert_eq!(last.finish_reason.as_deref(), Some("length"));
    assert_eq!(last.usage.and_then(|u| u.completion_tokens), Some(8));
    assert_eq!(last.timings.and_then(|t| t.prompt_n), Some(2));
    let rec = &r.record;
    assert_eq!(rec.token_events, 7);
    assert_eq!(rec.usage_token_events, 0);
    assert_eq!(rec.output_tokens, 8, "usage 8 on the last choice chunk");
    assert_eq!(rec.usage_completion_tokens, Some(8));
    assert_eq!(
        r.idx(rec.last_token_at),
        Some(6),
        "usage raised the total 7 → 8 on the finish chunk: counted, not timed"
    );
    assert_eq!(r.idx(rec.last_token_event_at), Some(6));
    assert_eq!(rec.prompt_tokens, Some(2));
    assert_eq!(rec.cached_tokens, Some(0));
    assert!(!rec.continuous_usage);
    assert!(rec.done && rec.completed);
}

#[test]
fn llamacpp_python_chat_stream() {
    let r = Run::lines("local-captures/llamacpp-python-chat-stream.sse");
    assert_eq!(r.events.len(), 11);
    assert_eq!(r.count_malformed(), 0, "JSON with spaces after colons");
    assert_eq!(r.token_event_indices(), (1..=8).collect::<Vec<_>>());
    let rec = &r.record;
    assert_eq!(rec.output_tokens, 8);
    assert_eq!(rec.usage_completion_tokens, None);
    assert_eq!(rec.finish_reason.as_deref(), Some("length"));
    assert!(rec.done && rec.completed);
}

#[test]
fn vllm_chat_stream_continuous_usage() {
    let r = Run::lines("local-captures/vllm-chat-stream.sse");
    assert_eq!(r.events.len(), 11);
    let c0 = chunk(&r.decoded[0]);
    assert!(
        !c0.token_event,
        "role chunk with usage completion_tokens 0 is not a token"
    );
    assert_eq!(c0.usage.and_then(|u| u.completion_tokens), Some(0));
    assert_eq!(r.token_event_indices(), (1..=8).collect::<Vec<_>>());
    let fin = chunk(&r.decoded[9]);
    assert!(!fin.token_event, "final choices:[] chunk");
    assert_eq!(fin.usage.and_then(|u| u.completion_tokens), Some(8));
    let rec = &r.record;
    assert_eq!(rec.output_tokens, 8);
    assert_eq!(rec.token_events, 8);
    assert_eq!(rec.usage_token_events, 8);
    assert!(rec.continuous_usage && !rec.nonmonotonic_usage && !rec.usage_below_count);
    assert_eq!(rec.prompt_tokens, Some(14));
    assert_eq!(rec.cached_tokens, None);
    assert_eq!(r.idx(rec.first_token_at), Some(1));
    assert_eq!(r.idx(rec.second_token_at), Some(2));
    assert_eq!(r.idx(rec.last_token_at), Some(8));
    assert_eq!(rec.finish_reason.as_deref(), Some("length"));
    assert_eq!(
        rec.response_id.as_deref(),
        Some("chatcmpl-bae4e66667db26bb")
    );
    assert!(rec.done && rec.completed);
}

#[test]
fn vllm_completions_stream() {
    let r = Run::lines("local-captures/vllm-completions-stream.sse");
    assert_eq!(r.events.len(), 10);
    assert_eq!(r.token_event_indices(), (0..=7).collect::<Vec<_>>());
    let rec = &r.record;
    assert_eq!(rec.output_tokens, 8);
    assert!(rec.continuous_usage);
    assert_eq!(rec.prompt_tokens, Some(2));
    assert!(rec.done && rec.completed);
    // one token per event: token ITL == chunk ITL
    assert!(close(rec.itl_s().unwrap(), rec.chunk_itl_s().unwrap()));
}

#[test]
fn vllm_completions_specdecode_tokens_are_not_chunks() {
    let r = Run::lines("local-captures/vllm-completions-stream-specdecode.sse");
    assert_eq!(r.events.len(), 18);
    assert_eq!(r.token_event_indices(), (0..16).collect::<Vec<_>>());
    let usage: Vec<u64> = r.decoded[..16]
        .iter()
        .map(|d| chunk(d).usage.and_then(|u| u.completion_tokens).unwrap())
        .collect();
    assert_eq!(
        usage,
        vec![1, 2, 3, 5, 7, 8, 9, 10, 11, 12, 13, 14, 15, 17, 20, 24]
    );
    let rec = &r.record;
    assert_eq!(rec.token_events, 16);
    assert_eq!(rec.counted_tokens, 24);
    assert_eq!(rec.output_tokens, 24);
    assert!(rec.continuous_usage && !rec.nonmonotonic_usage);
    assert_eq!(r.idx(rec.first_token_at), Some(0));
    assert_eq!(r.idx(rec.second_token_at), Some(1));
    assert_eq!(r.idx(rec.last_token_at), Some(15));
    // token ITL divides by 23 gaps, chunk ITL by 15
    let span = (rec.last_token_at.unwrap() - rec.first_token_at.unwrap()).as_secs_f64();
    assert!(close(rec.itl_s().unwrap(), span / 23.0));
    assert!(close(rec.chunk_itl_s().unwrap(), span / 15.0));
    assert!(rec.done && rec.completed);
}

#[test]
fn tracker_apply_returns_tokens_added_specdecode() {
    let base = std::time::Instant::now();
    let evs = frame_lines(
        &fixture("local-captures/vllm-completions-stream-specdecode.sse"),
        base,
    );
    let mut t = servebench_sse::RequestTracker::new(base);
    let added: Vec<u64> = decode_all(&evs).iter().map(|d| t.apply(d, base)).collect();
    assert_eq!(
        added,
        vec![1, 1, 1, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 2, 3, 4, 0, 0]
    );
    assert_eq!(t.tokens(), 24);
    assert!(t.is_done());
}
