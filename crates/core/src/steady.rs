//! Steady state of a finite load (request-count and Burst / E2E cells, open-loop rows under a
//! cap): the longest span during which at least 95 % of the in-flight target was in flight, and
//! the throughput and latency inside it. Pure: records and instants in, a
//! [`servebench_results::SteadyState`] out (docs/metrics.md, "Steady state").
//!
//! A finite batch ramps up (the first sends) and drains (the last requests finish alone), so its
//! `aggregate_tps` (all tokens / the whole batch) mixes the server at full load with the server
//! half idle. The steady span leaves both out. In flight at `t`: requests with
//! `sent_at ≤ t < end_at`; at one instant ends are counted before sends (a request that ends as
//! another starts never counts twice).

use std::time::Instant;

use servebench_results::SteadyState;
use servebench_sse::RequestRecord;
use servebench_stats::percentile;

/// Share of the in-flight target that counts as steady (vLLM's Rust bench client uses 95 %).
pub const STEADY_SHARE: f64 = 0.95;
/// A dip below the threshold shorter than this does not end a span, s: a closed loop's worker
/// sends its next request right after the last one ends, so a C = 1 batch dips to 0 for the
/// client's turnaround between every pair of requests (and a descheduled client for longer).
pub const DIP_TOLERANCE_S: f64 = 0.05;
/// A span shorter than this is `short`, s.
pub const SHORT_SPAN_S: f64 = 1.0;
/// A span shorter than this share of the measured load is `short`.
pub const SHORT_SPAN_SHARE: f64 = 0.25;

/// ⌈[`STEADY_SHARE`] × `target`⌉, at least 1: the least number in flight that counts as steady.
pub fn min_in_flight(target: u64) -> u64 {
    ((target as f64 * STEADY_SHARE) - 1e-9).ceil().max(1.0) as u64
}

/// The steady state of the requests `records` of a load measured from `start` to `end`, with
/// in-flight target `target` (C, or the cap). `None` when `target` is 0, the load is empty or
/// never had [`min_in_flight`] requests in flight at once. The span is the longest (the first
/// of equals); times are clipped to `[start, end]` and reported relative to `start`.
pub fn steady_state(
    records: &[&RequestRecord],
    target: u64,
    start: Instant,
    end: Instant,
) -> Option<SteadyState> {
    let need = min_in_flight(target);
    if target == 0 || records.is_empty() || end <= start {
        return None;
    }
    let (a, b) = longest_span(records, need, start, end)?;
    let span_s = b.duration_since(a).as_secs_f64();
    let load_s = end.duration_since(start).as_secs_f64();
    let inside: Vec<&RequestRecord> = records
        .iter()
        .copied()
        .filter(|r| r.sent_at >= a && r.sent_at <= b)
        .collect();
    let ttft: Vec<f64> = inside.iter().filter_map(|r| r.ttft_s()).collect();
    let itl: Vec<f64> = inside.iter().filter_map(|r| r.itl_s()).collect();
    let output_tokens: u64 = records.iter().map(|r| r.tokens_between(a, b)).sum();
    Some(SteadyState {
        target_in_flight: target,
        min_in_flight: need,
        start_s: a.duration_since(start).as_secs_f64(),
        end_s: b.duration_since(start).as_secs_f64(),
        duration_s: span_s,
        fraction: (span_s / load_s).clamp(0.0, 1.0),
        mean_in_flight: mean_in_flight(records, a, b),
        requests: inside.len() as u64,
        output_tokens,
        output_tps: (span_s > 0.0).then(|| output_tokens as f64 / span_s),
        ttft_p50: percentile(&ttft, 50.0),
        ttft_p99: percentile(&ttft, 99.0),
        itl_p50: percentile(&itl, 50.0),
        itl_p99: percentile(&itl, 99.0),
        short: span_s < SHORT_SPAN_S || span_s < SHORT_SPAN_SHARE * load_s,
    })
}

/// The warning of a short (or missing) steady span, for the cell or row's `warnings`.
pub fn steady_warning(s: Option<&SteadyState>, target: u64) -> Option<String> {
    match s {
        None if target > 0 => Some(format!(
            "steady state: never {} of {target} requests in flight at once; the headline includes ramp-up and drain",
            min_in_flight(target)
        )),
        Some(s) if s.short => Some(format!(
            "steady state short: {:.2} s ({:.0} % of the load) with at least {} of {} requests in flight; its numbers are little more than a sample",
            s.duration_s,
            s.fraction * 100.0,
            s.min_in_flight,
            s.target_in_flight
        )),
        _ => None,
    }
}

/// In-flight changes of `records` inside `[start, end]`, sorted by time, ends (−1) before sends
/// (+1) at one instant; requests in flight at `start` are the initial count.
fn edges(records: &[&RequestRecord], start: Instant, end: Instant) -> (i64, Vec<(Instant, i64)>) {
    let mut initial = 0i64;
    let mut ev = Vec::with_capacity(records.len() * 2);
    for r in records {
        if r.end_at <= start || r.sent_at >= end || r.end_at <= r.sent_at {
            continue;
        }
        if r.sent_at <= start {
            initial += 1;
        } else {
            ev.push((r.sent_at, 1));
        }
        if r.end_at < end {
            ev.push((r.end_at, -1));
        }
    }
    ev.sort_by_key(|&(t, d)| (t, d));
    (initial, ev)
}

/// The longest `[a, b]` inside `[start, end]` with at least `need` requests in flight.
fn longest_span(
    records: &[&RequestRecord],
    need: u64,
    start: Instant,
    end: Instant,
) -> Option<(Instant, Instant)> {
    let (mut n, ev) = edges(records, start, end);
    let need = need as i64;
    let tolerance = std::time::Duration::from_secs_f64(DIP_TOLERANCE_S);
    // the span being built, and when its current dip below `need` began
    let mut open = (n >= need).then_some(start);
    let mut dip: Option<Instant> = None;
    let mut best: Option<(Instant, Instant)> = None;
    let keep = |a: Instant, b: Instant, best: &mut Option<(Instant, Instant)>| {
        if b > a && best.is_none_or(|(x, y)| b.duration_since(a) > y.duration_since(x)) {
            *best = Some((a, b));
        }
    };
    for (t, d) in ev {
        n += d;
        match (open, dip) {
            (Some(_), None) if n < need => dip = Some(t),
            (Some(a), Some(low)) if n >= need => {
                if t.duration_since(low) > tolerance {
                    keep(a, low, &mut best);
                    open = Some(t);
                }
                dip = None;
            }
            (None, _) if n >= need => open = Some(t),
            _ => {}
        }
    }
    if let Some(a) = open {
        keep(a, dip.unwrap_or(end), &mut best);
    }
    best
}

/// Time-weighted mean number in flight over `[a, b]`.
fn mean_in_flight(records: &[&RequestRecord], a: Instant, b: Instant) -> f64 {
    let span = b.duration_since(a).as_secs_f64();
    if span <= 0.0 {
        return 0.0;
    }
    let busy: f64 = records
        .iter()
        .map(|r| {
            let s = r.sent_at.max(a);
            let e = r.end_at.min(b);
            if e > s {
                e.duration_since(s).as_secs_f64()
            } else {
                0.0
            }
        })
        .sum();
    busy / span
}

#[cfg(test)]
mod tests {
    use super::*;
    use servebench_sse::RequestTracker;
    use std::time::Duration;

    fn at(t0: Instant, s: f64) -> Instant {
        t0 + Duration::from_secs_f64(s)
    }

    /// A completed request sent at `sent` with one token per `gap` s from `first` to `end`.
    fn req(t0: Instant, sent: f64, first: f64, gap: f64, end: f64) -> RequestRecord {
        let mut t = RequestTracker::new(at(t0, sent));
        let mut x = first;
        while x <= end + 1e-9 {
            let ev = servebench_sse::decode(r#"{"choices":[{"index":0,"delta":{"content":"t"}}]}"#);
            t.apply(&ev, at(t0, x));
            x += gap;
        }
        t.apply(&servebench_sse::decode("[DONE]"), at(t0, end));
        t.finish(at(t0, end), true, false)
    }

    #[test]
    fn the_threshold_is_ninety_five_percent_rounded_up() {
        let table = [
            (1, 1),
            (2, 2),
            (8, 8),
            (19, 19),
            (20, 19),
            (64, 61),
            (100, 95),
            (1000, 950),
        ];
        for (target, need) in table {
            assert_eq!(min_in_flight(target), need, "{target}");
        }
    }

    #[test]
    fn a_batch_with_ramp_up_and_drain_keeps_only_the_full_span() {
        // C = 4: sends at 0, 0.1, 0.2, 0.3 s; ends at 2.0, 2.5, 3.0, 3.5 s. All four are in
        // flight from 0.3 s (the last send) to 2.0 s (the first end).
        let t0 = Instant::now();
        let rs: Vec<RequestRecord> = (0..4)
            .map(|k| {
                let k = k as f64;
                req(t0, 0.1 * k, 0.1 * k + 0.05, 0.1, 2.0 + 0.5 * k)
            })
            .collect();
        let refs: Vec<&RequestRecord> = rs.iter().collect();
        let s = steady_state(&refs, 4, t0, at(t0, 3.5)).unwrap();
        assert_eq!((s.target_in_flight, s.min_in_flight), (4, 4));
        assert!(
            (s.start_s - 0.3).abs() < 1e-6 && (s.end_s - 2.0).abs() < 1e-6,
            "{s:?}"
        );
        assert!((s.duration_s - 1.7).abs() < 1e-6);
        assert!((s.fraction - 1.7 / 3.5).abs() < 1e-6);
        assert!((s.mean_in_flight - 4.0).abs() < 1e-6);
        assert_eq!(s.requests, 1, "only the send at 0.3 s is inside");
        // tokens every 0.1 s per stream inside [0.3, 2.0]: exactly counted from the records
        let want: u64 = rs
            .iter()
            .map(|r| r.tokens_between(at(t0, 0.3), at(t0, 2.0)))
            .sum();
        assert_eq!(s.output_tokens, want);
        assert!((s.output_tps.unwrap() - want as f64 / 1.7).abs() < 1e-6);
        assert!(!s.short);
        assert!(steady_warning(Some(&s), 4).is_none());
    }

    #[test]
    fn the_longest_of_two_spans_wins_and_short_ones_warn() {
        // C = 2: [0, 1] both in flight, a gap, then [1.5, 4] both in flight
        let t0 = Instant::now();
        let rs = [
            req(t0, 0.0, 0.05, 0.1, 1.0),
            req(t0, 0.0, 0.05, 0.1, 4.0),
            req(t0, 1.5, 1.55, 0.1, 4.0),
        ];
        let refs: Vec<&RequestRecord> = rs.iter().collect();
        let s = steady_state(&refs, 2, t0, at(t0, 4.0)).unwrap();
        assert!(
            (s.start_s - 1.5).abs() < 1e-6 && (s.end_s - 4.0).abs() < 1e-6,
            "{s:?}"
        );
        // C = 3 is never reached: no span, and a warning
        assert!(steady_state(&refs, 3, t0, at(t0, 4.0)).is_none());
        assert!(steady_warning(None, 3).unwrap().contains("never 3 of 3"));
        // a span of 0.5 s in a 4 s load is short
        let rs = [req(t0, 0.0, 0.05, 0.1, 0.5), req(t0, 0.0, 0.05, 0.1, 4.0)];
        let refs: Vec<&RequestRecord> = rs.iter().collect();
        let s = steady_state(&refs, 2, t0, at(t0, 4.0)).unwrap();
        assert!(s.short && (s.duration_s - 0.5).abs() < 1e-6);
        assert!(steady_warning(Some(&s), 2)
            .unwrap()
            .starts_with("steady state short"));
    }

    #[test]
    fn a_closed_loop_turnaround_does_not_end_the_span_but_a_real_gap_does() {
        // C = 1, back to back with 2 ms of client turnaround: one span over the whole load
        let t0 = Instant::now();
        let rs: Vec<RequestRecord> = (0..5)
            .map(|k| {
                let s0 = k as f64 * 0.502;
                req(t0, s0, s0 + 0.05, 0.05, s0 + 0.5)
            })
            .collect();
        let refs: Vec<&RequestRecord> = rs.iter().collect();
        let end = rs.last().unwrap().end_at;
        let s = steady_state(&refs, 1, t0, end).unwrap();
        assert!((s.start_s - 0.0).abs() < 1e-6, "{s:?}");
        assert!(
            (s.end_s - end.duration_since(t0).as_secs_f64()).abs() < 1e-6,
            "{s:?}"
        );
        assert_eq!(s.requests, 5);
        assert!(!s.short);
        // a 200 ms gap splits it
        let rs = [req(t0, 0.0, 0.05, 0.05, 1.0), req(t0, 1.2, 1.25, 0.05, 1.7)];
        let refs: Vec<&RequestRecord> = rs.iter().collect();
        let s = steady_state(&refs, 1, t0, at(t0, 1.7)).unwrap();
        assert!((s.end_s - 1.0).abs() < 1e-6, "{s:?}");
    }

    #[test]
    fn a_request_ending_as_another_starts_is_not_counted_twice() {
        let t0 = Instant::now();
        let rs = [req(t0, 0.0, 0.05, 0.1, 1.0), req(t0, 1.0, 1.05, 0.1, 2.0)];
        let refs: Vec<&RequestRecord> = rs.iter().collect();
        assert!(steady_state(&refs, 2, t0, at(t0, 2.0)).is_none());
        let s = steady_state(&refs, 1, t0, at(t0, 2.0)).unwrap();
        assert!(
            (s.duration_s - 2.0).abs() < 1e-6,
            "one span across the hand-over: {s:?}"
        );
        assert!(steady_state(&[], 1, t0, at(t0, 2.0)).is_none());
        assert!(steady_state(&refs, 0, t0, at(t0, 2.0)).is_none());
    }
}
