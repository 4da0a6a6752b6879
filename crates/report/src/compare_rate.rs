//! Open-loop rows (`rate_results`) in `servebench compare`: A's and B's rows joined by
//! (context, offered rate), with the from-intended-send-time latency tails, the achieved rate,
//! output tok/s and goodput side by side. Each row is one sample per file (no request samples
//! are stored for rate rows), so the differences carry no interval and no faster/SLOWER verdict;
//! rows whose arrival process, cap, row length, seed or SLOs differ are named in the warnings.

use servebench_results::{format_context, RateRow, RateSummary, Results};

/// One joined open-loop row.
#[derive(Clone, Debug)]
pub struct RateDiff {
    /// Context, tokens.
    pub context: u64,
    /// Offered rate λ, req/s.
    pub offered_rate: f64,
    /// Status in A and B (`ok`, …, or `absent`).
    pub status: (String, String),
    /// Achieved rate, req/s.
    pub achieved_rate: (Option<f64>, Option<f64>),
    /// TTFT p99 from the intended send time, s.
    pub ttft_p99: (Option<f64>, Option<f64>),
    /// E2E latency p99 from the intended send time, s.
    pub e2e_p99: (Option<f64>, Option<f64>),
    /// Output tok/s over the row.
    pub output_tps: (Option<f64>, Option<f64>),
    /// Goodput, req/s (None without SLOs).
    pub goodput: (Option<f64>, Option<f64>),
    /// Whether every SLO's percentile was met (None without SLOs).
    pub slo_met: (Option<bool>, Option<bool>),
}

fn key(r: &RateRow) -> (u64, u64) {
    (r.context_tokens, r.offered_rate.to_bits())
}

fn find(rows: &[RateRow], k: (u64, u64)) -> Option<&RateRow> {
    // The last row of a key wins (a rate search can probe a rate once; a resumed file keeps one).
    rows.iter().rev().find(|r| key(r) == k)
}

fn p99(s: &Option<RateSummary>) -> Option<f64> {
    s.as_ref().map(|s| s.p99)
}

/// A's and B's rate rows joined by (context, offered rate), sorted by context then rate.
pub fn join(a: &Results, b: &Results) -> Vec<RateDiff> {
    let mut keys: Vec<(u64, u64)> = Vec::new();
    for r in a.rate_results.iter().chain(&b.rate_results) {
        if !keys.contains(&key(r)) {
            keys.push(key(r));
        }
    }
    // By context, then rate (a search probes out of order).
    keys.sort_by(|x, y| {
        x.0.cmp(&y.0)
            .then(f64::from_bits(x.1).total_cmp(&f64::from_bits(y.1)))
    });
    keys.into_iter()
        .map(|k| {
            let (ra, rb) = (find(&a.rate_results, k), find(&b.rate_results, k));
            let both = |f: &dyn Fn(&RateRow) -> Option<f64>| (ra.and_then(f), rb.and_then(f));
            let status = |r: Option<&RateRow>| match r {
                None => "absent".to_string(),
                Some(r) => r.status.map(|s| s.as_str()).unwrap_or("ok").to_string(),
            };
            RateDiff {
                context: k.0,
                offered_rate: f64::from_bits(k.1),
                status: (status(ra), status(rb)),
                achieved_rate: both(&|r| r.achieved_rate),
                ttft_p99: both(&|r| p99(&r.ttft_from_intended)),
                e2e_p99: both(&|r| p99(&r.e2e_from_intended)),
                output_tps: both(&|r| r.output_tps),
                goodput: both(&|r| r.goodput),
                slo_met: (ra.and_then(|r| r.slo_met), rb.and_then(|r| r.slo_met)),
            }
        })
        .collect()
}

/// Why joined rate rows may not be comparable: a row present in both files with a different
/// arrival process, burstiness, concurrency cap, row length, seed or SLO set.
pub fn warnings(a: &Results, b: &Results) -> Vec<String> {
    let mut out = Vec::new();
    let mut slo_warned: Option<String> = None;
    for ra in &a.rate_results {
        let Some(rb) = find(&b.rate_results, key(ra)) else {
            continue;
        };
        let label = format!(
            "rate row ctx={} λ={} req/s",
            format_context(ra.context_tokens),
            ra.offered_rate
        );
        let mut diffs = Vec::new();
        if (ra.arrival, ra.burstiness) != (rb.arrival, rb.burstiness) {
            diffs.push(format!(
                "arrivals {}{} vs {}{}",
                ra.arrival.as_str(),
                ra.burstiness.map(|k| format!(" K={k}")).unwrap_or_default(),
                rb.arrival.as_str(),
                rb.burstiness.map(|k| format!(" K={k}")).unwrap_or_default()
            ));
        }
        if ra.max_concurrency != rb.max_concurrency {
            let cap = |c: Option<u64>| c.map_or("unset".to_string(), |c| c.to_string());
            diffs.push(format!(
                "--max-concurrency {} vs {}",
                cap(ra.max_concurrency),
                cap(rb.max_concurrency)
            ));
        }
        if ra.duration != rb.duration {
            diffs.push(format!("row length {} s vs {} s", ra.duration, rb.duration));
        }
        if ra.seed != rb.seed {
            diffs.push(format!(
                "seed {} vs {} (different arrival times)",
                ra.seed, rb.seed
            ));
        }
        if !diffs.is_empty() {
            out.push(format!("{label}: {}", diffs.join(", ")));
        }
        if slo_spec(ra) != slo_spec(rb) && slo_warned.is_none() {
            slo_warned = Some(format!(
                "rate rows judged against different SLOs (A: {}, B: {}): goodput, attainment and SLOs met are not comparable",
                slo_words(ra),
                slo_words(rb)
            ));
        }
    }
    out.extend(slo_warned);
    out
}

fn slo_spec(r: &RateRow) -> Vec<(&'static str, u64, u64)> {
    r.slo
        .iter()
        .map(|c| {
            (
                c.metric.as_str(),
                c.percentile.to_bits(),
                c.threshold.to_bits(),
            )
        })
        .collect()
}

/// `ttft_p99=500ms,e2e_p90=10s` (the `--slo` form), or `none`.
fn slo_words(r: &RateRow) -> String {
    if r.slo.is_empty() {
        return "none".into();
    }
    r.slo
        .iter()
        .map(|c| {
            format!(
                "{}_p{}={}ms",
                c.metric.as_str(),
                c.percentile,
                c.threshold * 1e3
            )
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// One line per context searched in either file: the best rate A→B with the change, and why
/// each search stopped.
pub fn search_lines(a: &Results, b: &Results) -> Vec<String> {
    let mut ctxs: Vec<u64> = a
        .rate_search
        .iter()
        .chain(&b.rate_search)
        .map(|s| s.context_tokens)
        .collect();
    ctxs.sort_unstable();
    ctxs.dedup();
    ctxs.into_iter()
        .map(|ctx| {
            let (sa, sb) = (
                a.rate_search.iter().find(|s| s.context_tokens == ctx),
                b.rate_search.iter().find(|s| s.context_tokens == ctx),
            );
            let best = (sa.and_then(|s| s.best_rate), sb.and_then(|s| s.best_rate));
            let stop = |s: Option<&servebench_results::RateSearch>| {
                s.map_or("absent", |s| s.stopped.as_str())
            };
            format!(
                "rate search ctx={}: best req/s {} (stopped: A {}, B {})",
                format_context(ctx),
                pair(best, 1.0, 3, true),
                stop(sa),
                stop(sb)
            )
        })
        .collect()
}

/// Headers of the rate table (text, Markdown, HTML).
pub const HEADERS: [&str; 9] = [
    "ctx",
    "rate req/s",
    "status A / B",
    "achieved req/s",
    "TTFT* p99 ms",
    "E2E* p99 ms",
    "out tok/s",
    "goodput req/s",
    "SLOs p-met",
];

/// ` (+12.3%)`, the change as `servebench compare` words it for cells, or nothing.
fn pct(a: Option<f64>, b: Option<f64>) -> String {
    crate::compare::pct_of(a, b)
        .map(|p| format!(" ({})", crate::compare::fmt_pct(Some(p))))
        .unwrap_or_default()
}

/// `A→B (change)`; the change only when `compare` (both rows `ok`).
fn pair(v: (Option<f64>, Option<f64>), scale: f64, digits: usize, compare: bool) -> String {
    let f = |x: Option<f64>| {
        x.map(|x| format!("{:.digits$}", x * scale))
            .unwrap_or_else(|| "-".into())
    };
    let change = if compare {
        pct(v.0, v.1)
    } else {
        String::new()
    };
    format!("{}→{}{change}", f(v.0), f(v.1))
}

fn met(m: Option<bool>) -> &'static str {
    match m {
        Some(true) => "yes",
        Some(false) => "no",
        None => "-",
    }
}

/// The table rows as text cells, one per [`RateDiff`], in [`HEADERS`] order (values A→B with
/// the change (B − A) / A).
pub fn rows(diffs: &[RateDiff]) -> Vec<[String; 9]> {
    diffs
        .iter()
        .map(|d| {
            // Changes only between two ok rows: an interrupted or invalid row's values are shown,
            // never compared.
            let ok = d.status.0 == "ok" && d.status.1 == "ok";
            let pair = |v, scale, digits| pair(v, scale, digits, ok);
            [
                format_context(d.context),
                format!("{}", d.offered_rate),
                format!("{} / {}", d.status.0, d.status.1),
                pair(d.achieved_rate, 1.0, 2),
                pair(d.ttft_p99, 1e3, 1),
                pair(d.e2e_p99, 1e3, 1),
                pair(d.output_tps, 1.0, 0),
                pair(d.goodput, 1.0, 2),
                format!("{} / {}", met(d.slo_met.0), met(d.slo_met.1)),
            ]
        })
        .collect()
}

/// The note under the rate table.
pub const NOTE: &str = "Open-loop rows joined by context and offered rate; values A→B, with the change (B − A) / A when both rows are ok. TTFT* and E2E* from each request's intended send time. One row per file: no interval, no verdict, and --fail-if-slower does not look at these rows.";
