//! # servebench-sse
//!
//! The measurement core of servebench: pure, clock-free parsing of streamed OpenAI-compatible
//! responses (vLLM, SGLang, llama.cpp, TGI, hosted APIs).
//!
//! Bytes plus the monotonic [`Instant`](std::time::Instant) at which they arrived go in; events
//! come out. The crate never reads a clock, never does I/O and never prints; tests build instants
//! as `base + Duration`.
//!
//! Three stages, each usable alone:
//!
//! 1. [`SseFramer`] — Server-Sent Events framing (WHATWG rules plus robustness for LF-only
//!    streams, split reads, CR/CRLF line endings, comments): bytes → [`SseEvent`].
//! 2. [`decode`] / [`decode_event`] — one `data` payload → [`Decoded`] (chunk with token flags,
//!    usage, finish reason, llama.cpp timings; `[DONE]`; in-band error; malformed).
//! 3. [`RequestTracker`] — per-request token accounting and timing → [`RequestRecord`] with TTFT,
//!    TTST, ITL, chunk ITL, per-user rates (definitions: seed spec §4.1,
//!    `shared/reference/llm-decode-bench-spec.md`).
//!
//! ```
//! use std::time::{Duration, Instant};
//! use servebench_sse::{RequestTracker, SseFramer};
//!
//! let sent = Instant::now(); // taken by the caller, never by this crate
//! let mut framer = SseFramer::new();
//! let mut tracker = RequestTracker::new(sent);
//! let reads: [(&[u8], u64); 3] = [
//!     (b"data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n", 5),
//!     (b"data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"!\"}}]}\n\n", 800),
//!     (b"data: [DONE]\n\n", 900),
//! ];
//! for (bytes, ms) in reads {
//!     framer.push(bytes, sent + Duration::from_millis(ms), |ev| {
//!         tracker.apply_event(ev);
//!     });
//! }
//! framer.finish(sent + Duration::from_millis(901), |ev| {
//!     tracker.apply_event(ev);
//! });
//! let rec = tracker.finish(sent + Duration::from_millis(901), true, false);
//! assert!(rec.completed);
//! assert_eq!(rec.output_tokens, 2);
//! assert_eq!(rec.ttft_s(), Some(0.8)); // the role-only chunk is not a token
//! ```

#![warn(missing_docs)]

mod decode;
mod fast;
mod framer;
mod tracker;

pub use decode::{decode, decode_event, Chunk, Decoded, Timings, Usage, EMPTY_PAYLOAD};
pub use framer::{SseEvent, SseFramer, MAX_EVENT_BYTES};
pub use tracker::{
    RequestRecord, RequestTracker, TimedEvent, ERR_INTERRUPTED, ERR_NO_DONE, ERR_NO_OUTPUT,
    ERR_USAGE_INVALID, ERR_USAGE_ZERO,
};
