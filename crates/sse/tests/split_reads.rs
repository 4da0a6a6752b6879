//! Read boundaries must not change what is parsed: the CRLF fixture under every cut plan of
//! `derived/split-read-plan-for-vllm-0.5-role-first.CRLF.json` (pitfalls 20, 21), and every fixture
//! fed all at once, line by line, byte by byte and in pseudo-random reads.

mod common;

use std::time::Instant;

use common::*;
use servebench_sse::{Decoded, RequestTracker, SseFramer};

const CRLF: &str = "derived/vllm-0.5-role-first.CRLF.sse";
const PLAN: &str = "derived/split-read-plan-for-vllm-0.5-role-first.CRLF.json";
const TEXT: &str = "我是阿里云开发的一款";

/// (event, data) pairs, without arrival times.
fn payloads(evs: &[Ev]) -> Vec<(Option<String>, String)> {
    evs.iter()
        .map(|e| (e.event.clone(), e.data.clone()))
        .collect()
}

fn content(evs: &[Ev]) -> String {
    decode_all(evs)
        .iter()
        .filter_map(|d| match d {
            Decoded::Chunk(c) => c.content.as_deref().map(str::to_owned),
            _ => None,
        })
        .collect()
}

/// The cut plans of the JSON file: name → offsets (`one_byte_reads` expands to 1..len).
fn plans() -> Vec<(String, Vec<usize>)> {
    let plan: serde_json::Value =
        serde_json::from_slice(&fixture(PLAN)).expect("plan file is JSON");
    let len = plan["length"].as_u64().expect("length") as usize;
    assert_eq!(len, fixture(CRLF).len());
    let mut out = Vec::new();
    for (name, v) in plan["cut_offsets"].as_object().expect("cut_offsets") {
        let cuts: Vec<usize> = match v {
            serde_json::Value::Array(a) => a.iter().map(|x| x.as_u64().unwrap() as usize).collect(),
            serde_json::Value::String(s) => {
                assert_eq!(s, "every offset 1..len-1");
                (1..len).collect()
            }
            other => panic!("unexpected plan {other}"),
        };
        out.push((name.clone(), cuts));
    }
    assert_eq!(out.len(), 6);
    out
}

#[test]
fn crlf_file_equals_its_lf_source() {
    let base = Instant::now();
    let lf = frame_cuts(
        &fixture("sse/vllm-0.5-chat-role-only-first-chunk.truncated.sse"),
        &[],
        base,
    );
    let crlf = frame_cuts(&fixture(CRLF), &[], base);
    assert_eq!(crlf.len(), 6);
    assert_eq!(payloads(&lf), payloads(&crlf));
    assert_eq!(content(&crlf), TEXT);
    // and with CR-only line endings
    let cr: Vec<u8> = fixture("sse/vllm-0.5-chat-role-only-first-chunk.truncated.sse")
        .into_iter()
        .map(|b| if b == b'\n' { b'\r' } else { b })
        .collect();
    assert_eq!(payloads(&frame_bytes(&cr, base)), payloads(&lf));
}

#[test]
fn crlf_every_cut_plan_gives_identical_events() {
    let base = Instant::now();
    let bytes = fixture(CRLF);
    let reference = payloads(&frame_cuts(&bytes, &[], base));
    assert_eq!(reference.len(), 6);
    for (name, cuts) in plans() {
        let evs = frame_cuts(&bytes, &cuts, base);
        assert_eq!(payloads(&evs), reference, "plan {name}");
        assert_eq!(content(&evs), TEXT, "plan {name}");
        // the tracker sees the same request whatever the reads
        let rec = track(&evs, base, base + ms(10_000), true, false);
        assert_eq!(rec.output_tokens, 5, "plan {name}");
        assert_eq!(rec.token_events, 5, "plan {name}");
    }
}

#[test]
fn crlf_every_single_cut_gives_identical_events() {
    let base = Instant::now();
    let bytes = fixture(CRLF);
    let reference = payloads(&frame_cuts(&bytes, &[], base));
    for cut in 1..bytes.len() {
        let evs = frame_cuts(&bytes, &[cut], base);
        assert_eq!(payloads(&evs), reference, "cut at {cut}");
    }
}

/// With one-byte reads the arrival time of each event is that of the byte that completed it: the
/// `\r` that ends the blank line (a following `\n` belongs to the same line ending).
#[test]
fn crlf_one_byte_reads_event_times() {
    let base = Instant::now();
    let bytes = fixture(CRLF);
    let evs = frame_bytes(&bytes, base);
    let blank_line_ends: Vec<usize> = bytes
        .windows(4)
        .enumerate()
        .filter(|(_, w)| *w == b"\r\n\r\n")
        .map(|(i, _)| i + 2)
        .collect();
    assert_eq!(blank_line_ends.len(), 6);
    for (e, off) in evs.iter().zip(&blank_line_ends) {
        // read k (0-based) carries byte k and arrives at base + (k+1) ms
        assert_eq!(e.at, base + ms(*off as u64 + 1));
    }
}

/// Pitfall 21: `data: A\r\n`, `data: B\r`, `data: C\r\n`, `\n` as four reads → ONE event.
#[test]
fn pitfall_21_crlf_split_across_reads() {
    let base = Instant::now();
    let evs = frame_reads(&[b"data: A\r\n", b"data: B\r", b"data: C\r\n", b"\n"], base);
    assert_eq!(payloads(&evs), vec![(None, "A\nB\nC".to_owned())]);
    assert_eq!(evs[0].at, base + ms(4));
}

fn random_cuts(rng: &mut Rng, len: usize) -> Vec<usize> {
    let mut cuts = Vec::new();
    let mut pos = 0usize;
    loop {
        pos += 1 + rng.below(64) as usize;
        if pos >= len {
            return cuts;
        }
        cuts.push(pos);
    }
}

/// Property: for each fixture, feeding all at once, line by line, byte by byte, or in random reads
/// gives the same events and the same decoded sequence, and the same token accounting.
#[test]
fn every_fixture_is_independent_of_read_boundaries() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for rel in ALL_SSE {
        let base = Instant::now();
        let bytes = fixture(rel);
        let whole = frame_cuts(&bytes, &[], base);
        assert!(!whole.is_empty(), "{rel}: no events");
        let reference = payloads(&whole);
        let decoded = decode_all(&whole);
        let rec0 = track(&whole, base, base + ms(100_000), true, false);
        let mut variants = vec![
            ("lines", frame_lines(&bytes, base)),
            ("bytes", frame_bytes(&bytes, base)),
        ];
        for i in 0..20 {
            let cuts = random_cuts(&mut rng, bytes.len());
            variants.push((
                if i == 0 { "random" } else { "random+" },
                frame_cuts(&bytes, &cuts, base),
            ));
        }
        for (how, evs) in variants {
            assert_eq!(payloads(&evs), reference, "{rel} fed {how}");
            assert_eq!(decode_all(&evs), decoded, "{rel} fed {how}");
            let rec = track(&evs, base, base + ms(100_000), true, false);
            assert_eq!(rec.output_tokens, rec0.output_tokens, "{rel} fed {how}");
            assert_eq!(rec.token_events, rec0.token_events, "{rel} fed {how}");
            assert_eq!(rec.error, rec0.error, "{rel} fed {how}");
            assert_eq!(rec.completed, rec0.completed, "{rel} fed {how}");
        }
    }
}

/// One framer and one buffer set reused across many bodies gives the same result each time.
#[test]
fn framer_is_reusable_across_bodies() {
    let base = Instant::now();
    let mut framer = SseFramer::new();
    let mut first: Option<Vec<(Option<String>, String)>> = None;
    for rel in ALL_SSE.iter().cycle().take(ALL_SSE.len() * 2) {
        let bytes = fixture(rel);
        let mut out = Vec::new();
        let mut t = RequestTracker::new(base);
        for chunk in bytes.chunks(7) {
            framer.push(chunk, base, |e| {
                out.push((e.event.map(str::to_owned), e.data.to_owned()));
                t.apply_event(e);
            });
        }
        framer.finish(base, |e| {
            out.push((e.event.map(str::to_owned), e.data.to_owned()));
            t.apply_event(e);
        });
        assert_eq!(out, payloads(&frame_cuts(&bytes, &[], base)), "{rel}");
        if *rel == ALL_SSE[0] {
            match &first {
                None => first = Some(out),
                Some(f) => assert_eq!(f, &out),
            }
        }
    }
}
