//! Property tests of the SSE reader and the token tracker (framer → decode → tracker), over
//! arbitrary bytes and over streams built from realistic pieces (chunks with content, reasoning,
//! cumulative or per-delta usage, speculative multi-token usage jumps, comments, `[DONE]`,
//! in-band errors, CR / CRLF / LF-only line endings, garbage), each cut at arbitrary points:
//!
//! * nothing panics;
//! * the same bytes cut differently give the same events and the same record;
//! * the counted total never decreases;
//! * times never go backwards (reads arrive at increasing `Instant`s).
//!
//! Case counts are moderate (256 per property) so the file runs in a few seconds.

use std::time::{Duration, Instant};

use proptest::prelude::*;
use servebench_sse::{RequestRecord, RequestTracker, SseFramer};

/// One piece of a generated stream.
fn piece() -> impl Strategy<Value = Vec<u8>> {
    let eol = prop_oneof![Just("\n"), Just("\r\n"), Just("\r")];
    let text = "[a-zA-Z0-9 é你]{0,6}";
    prop_oneof![
        // content chunk, optional cumulative usage
        (text, proptest::option::of(0u64..5000), eol.clone(), any::<bool>()).prop_map(
            |(t, u, e, blank)| {
                let usage = u
                    .map(|u| format!(r#","usage":{{"prompt_tokens":7,"completion_tokens":{u}}}"#))
                    .unwrap_or_default();
                let t = serde_json::to_string(&t).unwrap();
                format!(
                    r#"data: {{"id":"x","choices":[{{"index":0,"delta":{{"content":{t}}},"finish_reason":null}}]{usage}}}{e}{}"#,
                    if blank { e } else { "" }
                )
                .into_bytes()
            }
        ),
        // reasoning chunk
        (text, eol.clone()).prop_map(|(t, e)| {
            let t = serde_json::to_string(&t).unwrap();
            format!(r#"data: {{"choices":[{{"delta":{{"reasoning_content":{t}}}}}]}}{e}{e}"#)
                .into_bytes()
        }),
        // usage-only / finish chunk
        (0u64..5000, eol.clone()).prop_map(|(u, e)| format!(
            r#"data: {{"choices":[{{"delta":{{}},"finish_reason":"length"}}],"usage":{{"completion_tokens":{u}}}}}{e}{e}"#
        )
        .into_bytes()),
        eol.clone().prop_map(|e| format!("data: [DONE]{e}{e}").into_bytes()),
        eol.clone().prop_map(|e| format!(": ping{e}").into_bytes()),
        eol.clone()
            .prop_map(|e| format!("event: error{e}data: {{\"error\":{{\"message\":\"boom\"}}}}{e}{e}").into_bytes()),
        eol.prop_map(|e| e.as_bytes().to_vec()),
        // anything at all
        proptest::collection::vec(any::<u8>(), 0..24),
    ]
}

fn stream() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(piece(), 0..24).prop_map(|p| p.concat())
}

/// Cut positions as fractions of the length (so they fit any stream).
fn cuts() -> impl Strategy<Value = Vec<f64>> {
    proptest::collection::vec(0.0f64..1.0, 0..16)
}

/// (event, data, arrival) of every dispatched event, the record, and the checks made on the
/// way: the counted total after each event never decreases and event times never go backwards.
struct Run {
    events: Vec<(Option<String>, String)>,
    record: RequestRecord,
}

/// Feeds `bytes` in reads cut at `fractions` of its length; read `i` arrives at
/// `base + 1 ms + i ms`. Asserts the per-event invariants on the way.
fn feed(bytes: &[u8], fractions: &[f64], base: Instant) -> Run {
    let mut points: Vec<usize> = fractions
        .iter()
        .map(|f| (f * bytes.len() as f64) as usize)
        .collect();
    points.push(bytes.len());
    points.sort_unstable();
    points.dedup();
    let mut framer = SseFramer::new();
    let mut tracker = RequestTracker::new(base);
    let mut events = Vec::new();
    let mut last_total = 0u64;
    let mut last_at = base;
    let mut last_token_at: Option<Instant> = None;
    let mut start = 0usize;
    let mut on_event = |ev: &servebench_sse::SseEvent<'_>,
                        tracker: &mut RequestTracker,
                        events: &mut Vec<(Option<String>, String)>| {
        assert!(ev.at >= last_at, "event times went backwards");
        last_at = ev.at;
        events.push((ev.event.map(str::to_owned), ev.data.to_owned()));
        tracker.apply_event(ev);
        assert!(
            tracker.tokens() >= last_total,
            "the counted total decreased"
        );
        last_total = tracker.tokens();
        if let (Some(prev), Some(now)) = (last_token_at, tracker.last_token_at()) {
            assert!(now >= prev, "last token time went backwards");
        }
        last_token_at = tracker.last_token_at().or(last_token_at);
    };
    let mut i = 0u64;
    for &p in &points {
        i += 1;
        let at = base + Duration::from_millis(1 + i);
        framer.push(&bytes[start..p], at, |ev| {
            on_event(ev, &mut tracker, &mut events)
        });
        start = p;
    }
    let end = base + Duration::from_millis(2 + i);
    framer.finish(end, |ev| on_event(ev, &mut tracker, &mut events));
    let record = tracker.finish(end, true, false);
    check_record(&record);
    Run { events, record }
}

/// Time order inside one record: sent ≤ first token ≤ second ≤ last ≤ end, and the same for
/// token events; derived durations are finite and non-negative.
fn check_record(r: &RequestRecord) {
    let le = |a: Option<Instant>, b: Option<Instant>, what: &str| {
        if let (Some(a), Some(b)) = (a, b) {
            assert!(a <= b, "{what}");
        }
    };
    le(Some(r.sent_at), r.first_token_at, "sent > first token");
    le(r.first_token_at, r.second_token_at, "first > second token");
    le(r.first_token_at, r.last_token_at, "first > last token");
    le(r.second_token_at, r.last_token_at, "second > last token");
    le(r.last_token_at, Some(r.end_at), "last token > end");
    le(
        r.first_token_event_at,
        r.last_token_event_at,
        "first > last token event",
    );
    le(
        r.last_token_event_at,
        Some(r.end_at),
        "last token event > end",
    );
    assert!(r.output_tokens >= r.token_events.saturating_sub(r.usage_token_events));
    for v in [r.ttft_s(), r.ttst_s()].into_iter().flatten() {
        assert!(v.is_finite() && v >= 0.0);
    }
}

/// What must not depend on how the bytes were cut.
fn same_record(a: &RequestRecord, b: &RequestRecord) {
    assert_eq!(a.output_tokens, b.output_tokens);
    assert_eq!(a.counted_tokens, b.counted_tokens);
    assert_eq!(a.token_events, b.token_events);
    assert_eq!(a.usage_completion_tokens, b.usage_completion_tokens);
    assert_eq!(a.done, b.done);
    assert_eq!(a.completed, b.completed);
    assert_eq!(a.error, b.error);
    assert_eq!(a.finish_reason, b.finish_reason);
    assert_eq!(a.nonmonotonic_usage, b.nonmonotonic_usage);
    assert_eq!(a.first_token_at.is_some(), b.first_token_at.is_some());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512), c in cuts()) {
        let base = Instant::now();
        feed(&bytes, &c, base);
    }

    #[test]
    fn split_points_do_not_change_events(s in stream(), a in cuts(), b in cuts()) {
        let base = Instant::now();
        let whole = feed(&s, &[], base);
        let x = feed(&s, &a, base);
        let y = feed(&s, &b, base);
        prop_assert_eq!(&x.events, &whole.events);
        prop_assert_eq!(&y.events, &whole.events);
        same_record(&x.record, &whole.record);
        same_record(&y.record, &whole.record);
    }

    #[test]
    fn byte_by_byte_equals_all_at_once(s in stream()) {
        let base = Instant::now();
        let whole = feed(&s, &[], base);
        let n = s.len().max(1) as f64;
        let every: Vec<f64> = (1..s.len()).map(|i| i as f64 / n).collect();
        let bytes = feed(&s, &every, base);
        prop_assert_eq!(&bytes.events, &whole.events);
        same_record(&bytes.record, &whole.record);
    }
}
