//! No input may panic the framer, the decoder or the tracker: random bytes, SSE-looking noise,
//! mutated fixtures, random JSON fragments, random read boundaries.

mod common;

use std::time::{Duration, Instant};

use common::*;
use servebench_sse::{decode, decode_event, RequestTracker, SseFramer};

const PIECES: &[&str] = &[
    "data:",
    "data: ",
    "event: error\n",
    ":",
    "\n",
    "\r",
    "\r\n",
    "\n\n",
    "[DONE]",
    "{",
    "}",
    "[",
    "]",
    "\"",
    ",",
    "\"choices\":",
    "\"delta\":",
    "\"content\":",
    "\"text\":",
    "\"usage\":",
    "\"completion_tokens\":",
    "\"prompt_tokens\":",
    "\"reasoning\":",
    "\"tool_calls\":",
    "\"error\":",
    "\"object\":\"error\"",
    "\"finish_reason\":",
    "\"timings\":",
    "\"token\":",
    "\"details\":",
    "null",
    "true",
    "false",
    "0",
    "1",
    "-1",
    "7.5",
    "1e400",
    "18446744073709551616",
    "\"x\"",
    "\"\"",
    "\"\\u00e9\"",
    "\"\\ud800\"",
    "\\",
    "é",
    "\u{FEFF}",
    "\u{FFFD}",
    "我",
];

/// Feed `bytes` in random reads with random arrival times through framer → decode → tracker, and
/// compute every derived metric.
fn pump(rng: &mut Rng, bytes: &[u8]) {
    let base = Instant::now();
    let mut framer = SseFramer::new();
    let mut t = RequestTracker::new(base + Duration::from_millis(rng.below(10)));
    let mut pos = 0usize;
    let mut now = base;
    while pos < bytes.len() {
        let n = 1 + rng.below(40) as usize;
        let end = (pos + n).min(bytes.len());
        // arrival times are usually increasing, sometimes equal
        now += Duration::from_micros(rng.below(3) * 100);
        framer.push(&bytes[pos..end], now, |ev| {
            let _ = decode(ev.data);
            let _ = decode_event(ev);
            t.apply_event(ev);
        });
        pos = end;
    }
    let cancelled = rng.below(4) == 0;
    if rng.below(2) == 0 {
        framer.finish(now, |ev| {
            t.apply_event(ev);
        });
    } else {
        framer.reset();
    }
    let r = t.finish(now, rng.below(2) == 0, cancelled);
    let _ = (
        r.ttft_s(),
        r.ttst_s(),
        r.latency_s(),
        r.itl_s(),
        r.chunk_itl_s(),
        r.output_tps_per_user(),
        r.e2e_output_tps_per_user(),
        r.ttfc_s(),
    );
    assert!(r.output_tokens >= r.usage_completion_tokens.unwrap_or(0));
    assert!(!(r.completed && r.failed()));
    assert!(!(r.cancelled && r.completed));
    if let Some(itl) = r.itl_s() {
        assert!(itl.is_finite() && itl > 0.0);
    }
}

#[test]
fn random_bytes_never_panic() {
    let mut rng = Rng(0x1234_5678_9ABC_DEF1);
    for _ in 0..3000 {
        let len = rng.below(600) as usize;
        let bytes: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
        pump(&mut rng, &bytes);
    }
}

#[test]
fn sse_looking_noise_never_panics() {
    let mut rng = Rng(0xDEAD_BEEF_CAFE_F00D);
    for _ in 0..5000 {
        let mut s = Vec::new();
        for _ in 0..rng.below(80) {
            if rng.below(10) == 0 {
                s.push(rng.next_u64() as u8);
            } else {
                s.extend_from_slice(PIECES[rng.below(PIECES.len() as u64) as usize].as_bytes());
            }
        }
        pump(&mut rng, &s);
        if let Ok(text) = std::str::from_utf8(&s) {
            let _ = decode(text);
        }
    }
}

#[test]
fn mutated_fixtures_never_panic() {
    let mut rng = Rng(0x0F0F_1234_4321_F0F0);
    for rel in ALL_SSE {
        let original = fixture(rel);
        for _ in 0..60 {
            let mut b = original.clone();
            for _ in 0..1 + rng.below(8) {
                if b.is_empty() {
                    break;
                }
                let i = rng.below(b.len() as u64) as usize;
                match rng.below(4) {
                    0 => b[i] = rng.next_u64() as u8,
                    1 => {
                        b.remove(i);
                    }
                    2 => b.insert(
                        i,
                        PIECES[rng.below(PIECES.len() as u64) as usize].as_bytes()[0],
                    ),
                    _ => b.truncate(i),
                }
            }
            pump(&mut rng, &b);
        }
    }
}

#[test]
fn decode_arbitrary_strings_never_panics() {
    let mut rng = Rng(42);
    for _ in 0..20000 {
        let mut s = String::new();
        for _ in 0..rng.below(30) {
            s.push_str(PIECES[rng.below(PIECES.len() as u64) as usize]);
        }
        let _ = decode(&s);
        let _ = decode(&format!("{{{s}}}"));
        let _ = decode(&format!("{{\"choices\":[{{\"delta\":{{{s}}}}}]}}"));
        let _ = decode(&format!("{{\"usage\":{{{s}}}}}"));
    }
}

#[test]
fn huge_and_odd_numbers_do_not_fail_usage() {
    // lenient counts: huge, negative, fractional values are "unknown", not a failure
    for u in ["18446744073709551616", "-1", "2.5", "1e400"] {
        let s = format!(r#"{{"choices":[],"usage":{{"completion_tokens":{u}}}}}"#);
        match decode(&s) {
            servebench_sse::Decoded::Chunk(c) => {
                assert_eq!(c.usage.and_then(|u| u.completion_tokens), None, "{u}")
            }
            servebench_sse::Decoded::Malformed { .. } => {} // serde_json may reject 1e400
            other => panic!("{u}: {other:?}"),
        }
    }
}

#[test]
fn an_endless_line_is_bounded_and_reported() {
    let t0 = std::time::Instant::now();
    let mut f = servebench_sse::SseFramer::new();
    let chunk = vec![b'x'; 1024 * 1024];
    let mut events = 0;
    for _ in 0..20 {
        f.push(&chunk, t0, |_| events += 1);
    }
    assert!(f.overflowed());
    assert_eq!(events, 0);
    f.reset();
    assert!(!f.overflowed());
}

/// The limit is 16 MiB: a 4 MiB event (a long reasoning chunk, a tool call's arguments) is
/// dispatched whole, split over many reads (found by `cargo mutants`, docs/mutants.md).
#[test]
fn a_large_event_below_the_limit_is_dispatched() {
    assert_eq!(servebench_sse::MAX_EVENT_BYTES, 16 * 1024 * 1024);
    let t0 = Instant::now();
    let mut f = SseFramer::new();
    let text = "y".repeat(4 * 1024 * 1024);
    let body = format!("data: {{\"choices\":[{{\"delta\":{{\"content\":\"{text}\"}}}}]}}\n\n");
    let mut got = Vec::new();
    for piece in body.as_bytes().chunks(64 * 1024) {
        f.push(piece, t0, |ev| got.push(ev.data.len()));
    }
    assert!(!f.overflowed());
    assert_eq!(got, vec![body.len() - "data: ".len() - 2]);
}

/// Overflow is detected however the bytes arrive: reads that step over the limit without
/// landing on it, for an unterminated line and for an event of many `data:` lines (found by
/// `cargo mutants`, docs/mutants.md).
#[test]
fn overflow_is_detected_when_reads_step_over_the_limit() {
    let t0 = Instant::now();
    let mut f = SseFramer::new();
    let chunk = vec![b'x'; 3 * 1024 * 1024]; // 3, 6, ..., 15, 18 MiB: never exactly 16
    for _ in 0..6 {
        f.push(&chunk, t0, |_| panic!("no event"));
    }
    assert!(f.overflowed(), "an 18 MiB line");
    let mut f = SseFramer::new();
    let mut line = b"data: ".to_vec();
    line.extend_from_slice(&vec![b'y'; 3 * 1024 * 1024]);
    line.push(b'\n');
    for _ in 0..6 {
        f.push(&line, t0, |_| panic!("no event"));
    }
    assert!(f.overflowed(), "an event of six 3 MiB data lines");
}
