//! Shared helpers for the integration tests: read fixtures, feed them through the framer with
//! synthetic arrival times, decode, track.
#![allow(dead_code)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use servebench_sse::{decode_event, Decoded, RequestRecord, RequestTracker, SseFramer};

/// Path of a file under the repository's `tests/data/engines/`.
pub fn fixture_path(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/data/engines")
        .join(rel)
}

/// Bytes of a file under `tests/data/engines/`.
pub fn fixture(rel: &str) -> Vec<u8> {
    let p = fixture_path(rel);
    std::fs::read(&p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()))
}

/// Every SSE fixture the crate is tested on.
pub const ALL_SSE: &[&str] = &[
    "sse/llamacpp-b6510-reasoning-and-final-timings.excerpt.sse",
    "sse/llamacpp-b6925-gptoss-stream-tail.sse",
    "sse/llamacpp-b9020-role-null-then-stop-timings.lf-only.sse",
    "sse/openai-gpt4o-2024-stream-tail-usage-null-then-usage-chunk.payloads.sse",
    "sse/openrouter-2025-02-processing-comments-then-chunks.truncated.sse",
    "sse/openrouter-docs-midstream-error-chunk.sse",
    "sse/sagemaker-vllm-completions.lf-only.sse",
    "sse/sagemaker-vllm-reasoning-chat.lf-only.sse",
    "sse/sglang-hosted-finish_reason-empty-string.elided.sse",
    "sse/sglang-hosted-first-chunk-vendor-extra-field.sse",
    "sse/sglang-style-hosted-role-null-chunk.sse",
    "sse/sglang-usage-on-finish-chunk.sse",
    "sse/tgi-1.4-generate_stream-no-space-after-data.truncated.sse",
    "sse/tgi-2.4.0-chat-stream-role-every-chunk-empty-id.sse",
    "sse/tgi-2.4.0-completions-stream-finish_reason-empty-string.lf-only.truncated.sse",
    "sse/vllm-0.5-chat-role-only-first-chunk.truncated.sse",
    "sse/vllm-new-delta-reasoning-field.excerpt.sse",
    "sse/vllm-stream-error-then-done.sse",
    "local-captures/llama-server-chat-stream.sse",
    "local-captures/llama-server-completions-stream.sse",
    "local-captures/llamacpp-python-chat-stream.sse",
    "local-captures/vllm-chat-stream.sse",
    "local-captures/vllm-completions-stream-specdecode.sse",
    "local-captures/vllm-completions-stream.sse",
    "derived/vllm-0.5-role-first.CRLF.sse",
];

/// An owned copy of one dispatched SSE event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ev {
    pub event: Option<String>,
    pub data: String,
    pub at: Instant,
}

/// Feed `bytes` as reads `bytes[cuts[i-1]..cuts[i]]`; read `k` arrives at `base + (k+1) ms`;
/// `finish` is called at `base + (reads+1) ms`.
pub fn frame_cuts(bytes: &[u8], cuts: &[usize], base: Instant) -> Vec<Ev> {
    let mut bounds = vec![0usize];
    bounds.extend(cuts.iter().copied().filter(|&c| c > 0 && c < bytes.len()));
    bounds.push(bytes.len());
    bounds.dedup();
    let reads: Vec<&[u8]> = bounds.windows(2).map(|w| &bytes[w[0]..w[1]]).collect();
    frame_reads(&reads, base)
}

/// Feed the given reads; read `k` arrives at `base + (k+1) ms`.
pub fn frame_reads(reads: &[&[u8]], base: Instant) -> Vec<Ev> {
    let mut f = SseFramer::new();
    let mut out = Vec::new();
    let mut sink = |e: &servebench_sse::SseEvent<'_>| {
        out.push(Ev {
            event: e.event.map(str::to_owned),
            data: e.data.to_owned(),
            at: e.at,
        })
    };
    for (k, r) in reads.iter().enumerate() {
        f.push(r, base + ms(k as u64 + 1), &mut sink);
    }
    f.finish(base + ms(reads.len() as u64 + 1), &mut sink);
    out
}

/// One read per line (each read ends just after a `\n`).
pub fn frame_lines(bytes: &[u8], base: Instant) -> Vec<Ev> {
    let cuts: Vec<usize> = bytes
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == b'\n')
        .map(|(i, _)| i + 1)
        .collect();
    frame_cuts(bytes, &cuts, base)
}

/// One read per byte.
pub fn frame_bytes(bytes: &[u8], base: Instant) -> Vec<Ev> {
    let cuts: Vec<usize> = (1..bytes.len()).collect();
    frame_cuts(bytes, &cuts, base)
}

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

pub fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

/// Decode every event (owned).
pub fn decode_all(evs: &[Ev]) -> Vec<Decoded<'static>> {
    evs.iter()
        .map(|e| {
            let ev = servebench_sse::SseEvent {
                event: e.event.as_deref(),
                data: &e.data,
                at: e.at,
            };
            decode_event(&ev).into_owned()
        })
        .collect()
}

/// Track the events of one request sent at `sent`; the body ends cleanly 1 ms after the last read.
pub fn track(
    evs: &[Ev],
    sent: Instant,
    end: Instant,
    clean_eof: bool,
    cancelled: bool,
) -> RequestRecord {
    let mut t = RequestTracker::new(sent);
    for e in evs {
        let ev = servebench_sse::SseEvent {
            event: e.event.as_deref(),
            data: &e.data,
            at: e.at,
        };
        t.apply_event(&ev);
    }
    t.finish(end, clean_eof, cancelled)
}

/// A fixture fed line by line, decoded and tracked (clean end of body, not cancelled).
pub struct Run {
    pub base: Instant,
    pub events: Vec<Ev>,
    pub decoded: Vec<Decoded<'static>>,
    pub record: RequestRecord,
}

impl Run {
    pub fn lines(rel: &str) -> Run {
        let base = Instant::now();
        let bytes = fixture(rel);
        let events = frame_lines(&bytes, base);
        let decoded = decode_all(&events);
        let end = base + ms(100_000);
        let record = track(&events, base, end, true, false);
        Run {
            base,
            events,
            decoded,
            record,
        }
    }

    /// Index of the (first) event that arrived at `at`.
    pub fn idx(&self, at: Option<Instant>) -> Option<usize> {
        let at = at?;
        self.events.iter().position(|e| e.at == at)
    }

    /// Indices of the token events.
    pub fn token_event_indices(&self) -> Vec<usize> {
        self.decoded
            .iter()
            .enumerate()
            .filter(|(_, d)| matches!(d, Decoded::Chunk(c) if c.token_event))
            .map(|(i, _)| i)
            .collect()
    }

    /// Concatenated content text of all chunks.
    pub fn content(&self) -> String {
        self.decoded
            .iter()
            .filter_map(|d| match d {
                Decoded::Chunk(c) => c.content.as_deref().map(str::to_owned),
                _ => None,
            })
            .collect()
    }

    /// Concatenated reasoning text of all chunks.
    pub fn reasoning(&self) -> String {
        self.decoded
            .iter()
            .filter_map(|d| match d {
                Decoded::Chunk(c) => c.reasoning.as_deref().map(str::to_owned),
                _ => None,
            })
            .collect()
    }

    pub fn count_done(&self) -> usize {
        self.decoded
            .iter()
            .filter(|d| matches!(d, Decoded::Done))
            .count()
    }

    pub fn count_malformed(&self) -> usize {
        self.decoded
            .iter()
            .filter(|d| matches!(d, Decoded::Malformed { .. }))
            .count()
    }
}

/// Small deterministic PRNG (xorshift64*), so the tests need no extra dependency.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform-ish in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}
