//! The in-progress accessors of `RequestTracker` (servebench-core's stream accounting reads them
//! after every event: window crediting, live tok/s, stall detection) and two record boundaries.
//! Found by `cargo mutants` (docs/mutants.md): no other test read these while a stream was open.

use std::time::{Duration, Instant};

use servebench_sse::{decode, RequestTracker};

fn ms(base: Instant, m: u64) -> Instant {
    base + Duration::from_millis(m)
}

const ROLE: &str = r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#;
const TOK: &str = r#"{"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}]}"#;

fn tok_usage(n: u64) -> String {
    format!(
        r#"{{"choices":[{{"index":0,"delta":{{"content":"a"}},"finish_reason":null}}],"usage":{{"completion_tokens":{n}}}}}"#
    )
}

#[test]
fn in_progress_accessors_follow_the_stream() {
    let base = Instant::now();
    let mut t = RequestTracker::new(base);
    assert_eq!((t.tokens(), t.token_events()), (0, 0));
    assert_eq!((t.first_token_at(), t.last_token_at()), (None, None));
    assert_eq!(t.usage_completion_tokens(), None);
    assert!(!t.is_done());
    assert_eq!(t.error(), None);

    assert_eq!(
        t.apply(&decode(ROLE), ms(base, 5)),
        0,
        "role-only: not a token"
    );
    assert_eq!(t.first_token_at(), None);

    // 2 tokens in the first event (speculative decoding)
    assert_eq!(t.apply(&decode(&tok_usage(2)), ms(base, 10)), 2);
    assert_eq!(t.tokens(), 2);
    assert_eq!(t.token_events(), 1);
    assert_eq!(t.first_token_at(), Some(ms(base, 10)));
    assert_eq!(t.last_token_at(), Some(ms(base, 10)));
    assert_eq!(t.last_token_event_at(), Some(ms(base, 10)));
    assert_eq!(t.previous_token_event_at(), None);
    assert_eq!(t.usage_completion_tokens(), Some(2));

    assert_eq!(t.apply(&decode(&tok_usage(3)), ms(base, 30)), 1);
    assert_eq!(t.token_events(), 2);
    assert_eq!(t.last_token_at(), Some(ms(base, 30)));
    assert_eq!(t.last_token_event_at(), Some(ms(base, 30)));
    assert_eq!(t.previous_token_event_at(), Some(ms(base, 10)));
    assert_eq!(t.usage_completion_tokens(), Some(3));

    // a usage-only chunk corrects the count, not the token times
    let fin = r#"{"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":5}}"#;
    assert_eq!(t.apply(&decode(fin), ms(base, 50)), 2);
    assert_eq!(t.tokens(), 5);
    assert_eq!(t.token_events(), 2);
    assert_eq!(t.last_token_at(), Some(ms(base, 30)));
    assert_eq!(t.last_token_event_at(), Some(ms(base, 30)));
    assert_eq!(t.usage_completion_tokens(), Some(5));
    assert!(!t.is_done());
    assert_eq!(t.apply(&decode("[DONE]"), ms(base, 51)), 0);
    assert!(t.is_done());
    assert_eq!(t.error(), None);

    let mut e = RequestTracker::new(base);
    e.apply(&decode(TOK), ms(base, 10));
    e.apply(
        &decode(r#"{"error":{"message":"bad","code":400}}"#),
        ms(base, 20),
    );
    assert_eq!(e.error(), Some("stream error: bad (400)"));
}

#[test]
fn two_token_events_have_a_chunk_itl() {
    let base = Instant::now();
    let mut t = RequestTracker::new(base);
    t.apply(&decode(TOK), ms(base, 100));
    t.apply(&decode(TOK), ms(base, 125));
    t.apply(&decode("[DONE]"), ms(base, 126));
    let r = t.finish(ms(base, 126), true, false);
    assert_eq!(r.token_events, 2);
    let c = r.chunk_itl_s().expect("2 token events: 1 gap");
    assert!((c - 0.025).abs() < 1e-12, "{c}");
}

#[test]
fn reasoning_equal_to_the_completion_total_is_not_clamped() {
    let base = Instant::now();
    let mut t = RequestTracker::new(base);
    t.apply(&decode(TOK), ms(base, 10));
    t.apply(&decode(TOK), ms(base, 20));
    t.apply(
        &decode(r#"{"choices":[],"usage":{"completion_tokens":2,"reasoning_tokens":2}}"#),
        ms(base, 21),
    );
    t.apply(&decode("[DONE]"), ms(base, 21));
    let r = t.finish(ms(base, 22), true, false);
    assert_eq!(r.reasoning_tokens, Some(2));
    assert!(
        !r.reasoning_tokens_clamped,
        "all of the output was reasoning: nothing to clamp"
    );
}

#[test]
fn zero_latency_has_no_e2e_rate() {
    // A token stamped at the send time (crafted: a zero-length clock step): TTFT and latency are
    // a measured 0, the end-to-end rate (tokens / latency) is undefined, never +inf.
    let base = Instant::now();
    let mut t = RequestTracker::new(base);
    t.apply(&decode(TOK), base);
    t.apply(&decode("[DONE]"), base);
    let r = t.finish(ms(base, 1), true, false);
    assert!(r.completed);
    assert_eq!(r.ttft_s(), Some(0.0));
    assert_eq!(r.latency_s(), Some(0.0));
    assert_eq!(r.e2e_output_tps_per_user(), None);
    // and a positive latency gives tokens / latency
    let mut t = RequestTracker::new(base);
    t.apply(&decode(TOK), ms(base, 100));
    t.apply(&decode(TOK), ms(base, 250));
    t.apply(&decode("[DONE]"), ms(base, 250));
    let e2e = t
        .finish(ms(base, 251), true, false)
        .e2e_output_tps_per_user();
    assert!((e2e.expect("a rate") - 2.0 / 0.25).abs() < 1e-9);
}
