//! Prompt-cache state as part of the measurement (issue 8, §4).
//!
//! * **How prompts are built** ([`PromptCache`]): `shared` sends one prompt to every request of a
//!   cell (the seed's sustained matrix: the scout primes the prefix cache, so decode is measured
//!   without re-prefilling); `cold` gives each request a unique prefix, so a prefix cache cannot
//!   serve it (AIPerf and `vllm bench serve` send distinct prompts). Defaults: `cold` for
//!   request-count and Burst / E2E cells, `shared` for the sustained matrix.
//! * **What the server says happened** ([`cache_state`]): from the per-request cached prompt
//!   tokens (`usage.prompt_tokens_details.cached_tokens`, else llama.cpp `timings.cache_n`), else
//!   from the window's prefix-cache counters (`server_prefix_cache_hit_rate`): `cold`, `warm`, or
//!   `unverified` when the server reported neither.
//!
//! A cold prefix keeps the prompt's length in characters: the run id in the nonce
//! `[BENCH_<run>_CTX_<ctx>]` is replaced by another 12-letter id derived from the request's
//! number, so prompts sized by `/tokenize` stay within a token or two of their target.

use bytes::Bytes;
use servebench_results::{CacheState, CellResult};

/// How the prompts of a cell are built (`cold` or `shared`; the results field `prompt_cache`).
pub use servebench_results::PromptCache;

/// A 12-letter id for request `n` of a cell, different from `run_id` and from every other `n`
/// (FNV-1a of the run id and `n`, written in base 26).
fn request_id(run_id: &str, n: u64) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in run_id.bytes().chain(n.to_le_bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    // 26^12 > 2^56: the low 56 bits of the hash mixed with n give distinct ids for distinct n
    // in practice; the first letter encodes n mod 26 so that consecutive requests differ at once.
    let mut v = (h >> 8) ^ n;
    let mut out = String::with_capacity(12);
    out.push((b'a' + (n % 26) as u8) as char);
    for _ in 1..12 {
        out.push((b'a' + (v % 26) as u8) as char);
        v /= 26;
    }
    if out == run_id {
        out.replace_range(0..1, if run_id.starts_with('z') { "y" } else { "z" });
    }
    out
}

/// `body` with its nonce made unique for request `n`: the first `BENCH_<run_id>` becomes
/// `BENCH_<id>` with a 12-letter id derived from `n` (same length, so the prompt's size is
/// unchanged in characters). Returns `body` unchanged when the nonce is not in it.
pub fn cold_body(body: &Bytes, run_id: &str, n: u64) -> Bytes {
    let needle = format!("BENCH_{run_id}");
    let Some(pos) = find(body, needle.as_bytes()) else {
        return body.clone();
    };
    let id = request_id(run_id, n);
    let mut out = Vec::with_capacity(body.len() + 12);
    out.extend_from_slice(&body[..pos + 6]);
    out.extend_from_slice(id.as_bytes());
    out.extend_from_slice(&body[pos + needle.len()..]);
    Bytes::from(out)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// A request counts as served from a warm cache when more than this many of its prompt tokens,
/// and more than [`WARM_FRACTION`] of them, were cached. Below it, what a cold prefix can still
/// share (the chat template before the nonce, rounded down to the cache's block) is not warmth.
pub const WARM_MIN_TOKENS: u64 = 64;
/// See [`WARM_MIN_TOKENS`].
pub const WARM_FRACTION: f64 = 0.25;

/// The cache state of a finished cell: `cold`, `warm` or `unverified` (see the module docs).
///
/// Per-request evidence first: a request is warm when its cached prompt tokens exceed
/// max([`WARM_MIN_TOKENS`], [`WARM_FRACTION`] × its prompt tokens); the cell is `warm` when any
/// measured request was, `cold` when every request that reported a count was not. Without any
/// per-request count, the window's prefix-cache hit rate decides (`warm` above
/// [`WARM_FRACTION`]). Neither: `unverified`. `None` for cells without requests.
pub fn cache_state(cell: &CellResult) -> Option<CacheState> {
    if cell.request_samples.is_empty() && cell.server_prefix_cache_hit_rate.is_none() {
        return None;
    }
    let mut reported = 0usize;
    let mut warm = 0usize;
    for r in &cell.request_samples {
        let cached = r.cached_tokens.or(r.timings_cache_n);
        let prompt = r.input_tokens.or_else(|| {
            r.timings_prompt_n
                .map(|p| p + r.timings_cache_n.unwrap_or(0))
        });
        if let Some(cached) = cached {
            reported += 1;
            let limit = (WARM_FRACTION * prompt.unwrap_or(0) as f64).max(WARM_MIN_TOKENS as f64);
            if cached as f64 > limit {
                warm += 1;
            }
        }
    }
    if reported > 0 {
        return Some(if warm > 0 {
            CacheState::Warm
        } else {
            CacheState::Cold
        });
    }
    match cell.server_prefix_cache_hit_rate {
        Some(h) if h > WARM_FRACTION => Some(CacheState::Warm),
        Some(_) => Some(CacheState::Cold),
        None => Some(CacheState::Unverified),
    }
}

/// Records how the cell's prompts were built and the verified cache state, with a warning when
/// cold prompts were served warm.
pub fn record(cell: &mut CellResult, prompts: PromptCache) {
    cell.prompt_cache = Some(prompts);
    cell.cache_state = cache_state(cell);
    if prompts == PromptCache::Cold && cell.cache_state == Some(CacheState::Warm) {
        cell.warnings.push(
            "prompts had a unique prefix per request, yet the server reported cached prompt tokens: \
             the measurement is not cold"
                .into(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use servebench_results::RequestSample;

    #[test]
    fn cold_bodies_are_unique_and_keep_their_length() {
        let body = Bytes::from_static(
            br#"{"messages":[{"role":"user","content":"[BENCH_abcdefghijkl_CTX_0] Write"}]}"#,
        );
        let mut seen = std::collections::HashSet::new();
        for n in 0..2000 {
            let b = cold_body(&body, "abcdefghijkl", n);
            assert_eq!(b.len(), body.len());
            assert!(!b.windows(18).any(|w| w == b"BENCH_abcdefghijkl"));
            assert!(seen.insert(b), "request {n} repeats a prefix");
        }
        // no nonce: unchanged
        assert_eq!(cold_body(&body, "zzzzzzzzzzzz", 1), body);
    }

    fn sample(input: Option<u64>, cached: Option<u64>) -> RequestSample {
        RequestSample {
            input_tokens: input,
            cached_tokens: cached,
            output_tokens: 10,
            ..RequestSample::default()
        }
    }

    #[test]
    fn states_from_evidence() {
        let mut cell = CellResult {
            request_samples: vec![sample(Some(142), Some(0)), sample(Some(142), Some(16))],
            ..CellResult::default()
        };
        assert_eq!(cache_state(&cell), Some(CacheState::Cold));
        cell.request_samples.push(sample(Some(142), Some(128)));
        assert_eq!(
            cache_state(&cell),
            Some(CacheState::Warm),
            "128 of 142 cached"
        );
        // nothing per request: the server's counters decide, else unverified
        cell.request_samples = vec![sample(Some(142), None)];
        assert_eq!(cache_state(&cell), Some(CacheState::Unverified));
        cell.server_prefix_cache_hit_rate = Some(0.9);
        assert_eq!(cache_state(&cell), Some(CacheState::Warm));
        cell.server_prefix_cache_hit_rate = Some(0.01);
        assert_eq!(cache_state(&cell), Some(CacheState::Cold));
        // llama.cpp timings
        cell.request_samples = vec![RequestSample {
            timings_prompt_n: Some(1),
            timings_cache_n: Some(236),
            ..RequestSample::default()
        }];
        assert_eq!(cache_state(&cell), Some(CacheState::Warm));
        // the prompt is computed + cached tokens (400 + 300 = 700): 300 cached is above a
        // quarter of it (core-thresholds survivor: 400 × 300 would make it cold)
        cell.request_samples = vec![RequestSample {
            timings_prompt_n: Some(400),
            timings_cache_n: Some(300),
            ..RequestSample::default()
        }];
        assert_eq!(cache_state(&cell), Some(CacheState::Warm));
        let mut c = CellResult::default();
        assert_eq!(cache_state(&c), None);
        c.request_samples = vec![sample(Some(1000), Some(900))];
        record(&mut c, PromptCache::Cold);
        assert_eq!(c.cache_state, Some(CacheState::Warm));
        assert_eq!(c.prompt_cache, Some(PromptCache::Cold));
        assert!(c.warnings[0].contains("not cold"));
    }
}
