//! Per-gap inter-token latency and peak output rate (issue 19): the distribution of every
//! per-token gap of a set of requests, in a mergeable HDR histogram, and the most tokens that
//! arrived in one second.
//!
//! Gaps are chunk-aware like the per-token ITL ([`RequestRecord::per_token_gaps_ns`]): a timed
//! event carrying `k` tokens `g` ns after the previous one adds `k` gaps of `g / k`. The
//! histogram keeps 3 significant digits (every recorded value lies within 0.1 % of the
//! highest value of its bucket, which is what a percentile returns) and resizes itself to the
//! longest gap, so its memory depends on the range of the gaps, not on how many there are.

use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use servebench_results::{GapBucket, ItlGaps};
use servebench_sse::RequestRecord;

/// Significant digits of the gap histogram.
const SIGFIG: u8 = 3;
/// First bucket edge of the exported histogram, ns (1 µs; doubling from there).
const FIRST_BUCKET_NS: u64 = 1_000;

/// The gaps of some requests: their histogram (ns per token) and the tokens per 1 s bucket.
#[derive(Clone, Debug, PartialEq)]
pub struct GapStats {
    /// Per-token gaps, ns.
    pub hist: Histogram<u64>,
    /// Most tokens whose timed event arrived in one 1 s bucket (buckets counted from the
    /// earliest send among the requests), tokens.
    pub peak_tokens_1s: u64,
}

/// A new empty gap histogram (auto-resizing, 3 significant digits).
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new(SIGFIG).expect("3 significant digits are valid")
}

/// Adds every per-token gap of `r` to `hist`.
pub fn record_gaps(hist: &mut Histogram<u64>, r: &RequestRecord) {
    for (gap_ns, tokens) in r.per_token_gaps_ns() {
        // Auto-resizing: recording only fails for values above u64 range limits.
        let _ = hist.record_n(gap_ns, tokens);
    }
}

impl GapStats {
    /// The gaps of `records`; `None` when they have no gap and no timed token.
    pub fn of<'a>(records: impl IntoIterator<Item = &'a RequestRecord> + Clone) -> Option<Self> {
        let mut hist = new_histogram();
        let origin: Option<Instant> = records.clone().into_iter().map(|r| r.sent_at).min();
        let mut buckets: Vec<u64> = Vec::new();
        for r in records {
            record_gaps(&mut hist, r);
            let Some(origin) = origin else { continue };
            let base = r.sent_at.saturating_duration_since(origin);
            for e in &r.timed_events {
                let at = base + Duration::from_nanos(e.after_sent_ns);
                let b = at.as_secs() as usize;
                if buckets.len() <= b {
                    buckets.resize(b + 1, 0);
                }
                buckets[b] += e.tokens;
            }
        }
        let peak = buckets.iter().copied().max().unwrap_or(0);
        (!hist.is_empty() || peak > 0).then_some(GapStats {
            hist,
            peak_tokens_1s: peak,
        })
    }

    /// The exported summary (s); `None` when no gap was recorded.
    pub fn summary(&self) -> Option<ItlGaps> {
        summary_of(&self.hist)
    }

    /// Peak output rate over 1 s buckets, tok/s (`None` without timed tokens).
    pub fn peak_output_tps_1s(&self) -> Option<f64> {
        (self.peak_tokens_1s > 0).then_some(self.peak_tokens_1s as f64)
    }
}

/// The exported summary of a gap histogram in ns; `None` when it is empty.
pub fn summary_of(h: &Histogram<u64>) -> Option<ItlGaps> {
    if h.is_empty() {
        return None;
    }
    let s = |ns: u64| ns as f64 / 1e9;
    let histogram = h
        .iter_log(FIRST_BUCKET_NS, 2.0)
        .filter(|v| v.count_since_last_iteration() > 0)
        .map(|v| GapBucket {
            le_s: s(v.value_iterated_to()),
            count: v.count_since_last_iteration(),
        })
        .collect();
    Some(ItlGaps {
        gaps: h.len(),
        mean: h.mean() / 1e9,
        p50: s(h.value_at_quantile(0.50)),
        p90: s(h.value_at_quantile(0.90)),
        p99: s(h.value_at_quantile(0.99)),
        p99_9: s(h.value_at_quantile(0.999)),
        max: s(h.max()),
        histogram,
    })
}

#[cfg(test)]
mod tests {
    use servebench_sse::{decode, RequestTracker};

    use super::*;

    fn tok(usage: Option<u64>) -> String {
        match usage {
            None => r#"{"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}]}"#
                .to_string(),
            Some(u) => format!(
                r#"{{"choices":[{{"index":0,"delta":{{"content":"a"}},"finish_reason":null}}],"usage":{{"completion_tokens":{u}}}}}"#
            ),
        }
    }

    /// A request sent at `base` whose timed events arrive at `events` (ms, usage).
    fn rec(base: Instant, events: &[(u64, Option<u64>)]) -> RequestRecord {
        let mut t = RequestTracker::new(base);
        for (ms, u) in events {
            let p = tok(*u);
            t.apply(&decode(&p), base + Duration::from_millis(*ms));
        }
        t.apply(&decode("[DONE]"), base + Duration::from_millis(20_000));
        t.finish(base + Duration::from_millis(20_000), true, false)
    }

    #[test]
    fn one_pause_is_the_max_and_the_tail_not_the_median() {
        let base = Instant::now();
        // 500 gaps of 10 ms and one of 300 ms (1 in 501: above the 99.9th percentile's rank).
        let mut ev: Vec<(u64, Option<u64>)> = (0..=500).map(|i| (i * 10, None)).collect();
        ev.push((5_000 + 300, None));
        let r = rec(base, &ev);
        let g = GapStats::of([&r]).unwrap().summary().unwrap();
        assert_eq!(g.gaps, 501);
        assert!((g.max - 0.300).abs() <= 0.300 * 1e-3, "{g:?}");
        assert!((g.p50 - 0.010).abs() <= 0.010 * 1e-3, "{g:?}");
        assert!((g.p99 - 0.010).abs() <= 0.010 * 1e-3, "{g:?}");
        assert!(g.p99_9 > 0.2, "p99.9 catches the single pause: {g:?}");
        assert_eq!(g.histogram.iter().map(|b| b.count).sum::<u64>(), 501);
        // The per-request mean hardly moves: (5,300 ms / 501).
        let itl = r.itl_s().unwrap();
        assert!(itl < 0.0106, "{itl}");
    }

    #[test]
    fn a_chunk_of_k_tokens_counts_k_gaps_of_a_kth() {
        let base = Instant::now();
        // usage 1 at 0 ms, 4 at 30 ms (3 tokens), 5 at 40 ms.
        let r = rec(base, &[(0, Some(1)), (30, Some(4)), (40, Some(5))]);
        let gaps: Vec<(u64, u64)> = r.per_token_gaps_ns().collect();
        assert_eq!(gaps, vec![(10_000_000, 3), (10_000_000, 1)]);
        let g = GapStats::of([&r]).unwrap();
        assert_eq!(g.hist.len(), 4);
        assert_eq!(g.peak_tokens_1s, 5);
    }

    #[test]
    fn peak_is_the_busiest_second() {
        let base = Instant::now();
        let a = rec(base, &[(100, None), (200, None), (1500, None)]);
        let b = rec(
            base + Duration::from_millis(50),
            &[(100, None), (150, None)],
        );
        let g = GapStats::of([&a, &b]).unwrap();
        assert_eq!(g.peak_tokens_1s, 4);
        assert_eq!(g.peak_output_tps_1s(), Some(4.0));
    }
}
