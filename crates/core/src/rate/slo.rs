//! Service-level objectives (`--slo ttft_p99=500ms,itl_p99=50ms,e2e_p90=10s`) and how a row is
//! judged against them. Two definitions are reported side by side (they answer different
//! questions and tools disagree on the name):
//!
//! * **Per-request attainment → goodput** (the definition of `vllm bench serve --goodput` and of
//!   DistServe): a request is *good* when it completed and each of its own values is within
//!   every threshold (the percentile of the SLO plays no part here). `goodput` = good requests per
//!   second of the arrival schedule (`slo_attainment` × `schedule_rate`, req/s; the drain after
//!   the last arrival is `drain_s`, apart); `slo_attainment` = good requests / scheduled arrivals
//!   (unsent and failed arrivals are misses).
//! * **Percentile constraint on the row** (`slo_met`, what `ttft_p99=500ms` literally says, the
//!   form GuideLLM's and most SLO dashboards use): the row's NN-th percentile of the metric is
//!   ≤ the threshold. Failed and unsent arrivals enter the percentile as +∞ (a request that never
//!   answered did not meet any latency objective), so a row cannot pass by failing its slow
//!   requests.
//!
//! TTFT and E2E are taken from the **intended** send time (coordinated-omission safe: a request
//! held back by the client or a concurrency cap counts its wait); ITL and TPOT do not depend on
//! the send time.

use std::fmt;

pub use servebench_results::SloMetric;

/// One objective: the `percentile`-th percentile of `metric` at most `threshold_s`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Slo {
    /// What is constrained.
    pub metric: SloMetric,
    /// Percentile of the row constraint, in (0, 100].
    pub percentile: f64,
    /// Threshold, s (> 0).
    pub threshold_s: f64,
}

impl fmt::Display for Slo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}_p{}={}ms",
            self.metric.as_str(),
            self.percentile,
            self.threshold_s * 1e3
        )
    }
}

/// Parses `metric_pNN=VALUEunit[,…]`: metric `ttft`, `itl`, `tpot` or `e2e`; `pNN` any
/// percentile in (0, 100] (`p50`, `p99`, `p99.9`); value a number > 0 with unit `ms` or `s`.
/// Whitespace around entries is ignored; the same metric and percentile twice is an error.
/// Errors are one line and quote the bad entry.
pub fn parse_slos(spec: &str) -> Result<Vec<Slo>, String> {
    let mut out: Vec<Slo> = Vec::new();
    if spec.trim().is_empty() {
        return Err("empty SLO list (expected e.g. ttft_p99=500ms,itl_p99=50ms)".into());
    }
    for entry in spec.split(',') {
        let e = entry.trim();
        let bad = |why: &str| format!("bad SLO {e:?}: {why}");
        let (key, value) = e
            .split_once('=')
            .ok_or_else(|| bad("expected metric_pNN=value, e.g. ttft_p99=500ms"))?;
        let (metric, pct) = key
            .trim()
            .split_once("_p")
            .ok_or_else(|| bad("expected metric_pNN before '=', e.g. ttft_p99"))?;
        let metric = SloMetric::from_name(metric).ok_or_else(|| {
            bad(&format!(
                "unknown metric {metric:?} (expected ttft, itl, tpot or e2e)"
            ))
        })?;
        let percentile: f64 = pct
            .parse()
            .ok()
            .filter(|p: &f64| p.is_finite() && *p > 0.0 && *p <= 100.0)
            .ok_or_else(|| bad(&format!("percentile p{pct} must be a number in (0, 100]")))?;
        let value = value.trim();
        let (num, scale) = if let Some(n) = value.strip_suffix("ms") {
            (n, 1e-3)
        } else if let Some(n) = value.strip_suffix('s') {
            (n, 1.0)
        } else {
            return Err(bad("the value needs a unit, ms or s (e.g. 500ms, 10s)"));
        };
        let threshold_s = num
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite() && *v > 0.0)
            .map(|v| v * scale)
            .ok_or_else(|| bad(&format!("threshold {num:?} must be a number > 0")))?;
        if out
            .iter()
            .any(|s| s.metric == metric && s.percentile == percentile)
        {
            return Err(bad("this metric and percentile are given twice"));
        }
        out.push(Slo {
            metric,
            percentile,
            threshold_s,
        });
    }
    Ok(out)
}

/// One request's values for the SLO metrics, s (`None` = not measured for it: no token, one
/// token for ITL/TPOT, not completed for E2E).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RequestValues {
    /// The request completed (answer with ≥ 1 token and a clean end).
    pub completed: bool,
    /// TTFT from the intended send time, s.
    pub ttft: Option<f64>,
    /// Mean ITL, s.
    pub itl: Option<f64>,
    /// TPOT, s.
    pub tpot: Option<f64>,
    /// E2E from the intended send time, s.
    pub e2e: Option<f64>,
}

impl RequestValues {
    /// The value of `m`.
    pub fn get(&self, m: SloMetric) -> Option<f64> {
        match m {
            SloMetric::Ttft => self.ttft,
            SloMetric::Itl => self.itl,
            SloMetric::Tpot => self.tpot,
            SloMetric::E2e => self.e2e,
        }
    }

    /// Per-request attainment: completed, and every SLO's value present and ≤ its threshold —
    /// except ITL and TPOT, which a completed one-token answer does not have and so cannot
    /// miss.
    pub fn good(&self, slos: &[Slo]) -> bool {
        self.completed
            && slos.iter().all(|s| match (s.metric, self.get(s.metric)) {
                (_, Some(v)) => v <= s.threshold_s,
                (SloMetric::Itl | SloMetric::Tpot, None) => true,
                _ => false,
            })
    }
}

/// The row's percentile check of one SLO over `requests`: one entry per **scheduled** arrival,
/// `Some` for a completed request, `None` for one that was never sent, failed or was cut (it
/// enters as +∞). A completed request without the metric (ITL/TPOT of a one-token answer) is
/// left out. Returns (the percentile, s — `None` when it is +∞ or nothing was measured; met).
pub fn check_percentile(slo: &Slo, requests: &[Option<RequestValues>]) -> (Option<f64>, bool) {
    let mut v: Vec<f64> = Vec::with_capacity(requests.len());
    for r in requests {
        match r.map(|r| r.get(slo.metric)) {
            Some(Some(x)) => v.push(x),
            Some(None) if matches!(slo.metric, SloMetric::Itl | SloMetric::Tpot) => {}
            _ => v.push(f64::INFINITY),
        }
    }
    if v.is_empty() {
        return (None, false);
    }
    v.sort_by(f64::total_cmp);
    let p = percentile_with_inf(&v, slo.percentile);
    if p.is_finite() {
        (Some(p), p <= slo.threshold_s)
    } else {
        (None, false)
    }
}

/// NumPy-linear percentile of sorted values that may end in +∞ (interpolating towards +∞ gives
/// +∞, never NaN).
fn percentile_with_inf(sorted: &[f64], p: f64) -> f64 {
    let n = sorted.len();
    let k = (n - 1) as f64 * p.clamp(0.0, 100.0) / 100.0;
    let f = k.floor() as usize;
    if f + 1 >= n || k == f as f64 {
        return sorted[f.min(n - 1)];
    }
    let (a, b) = (sorted[f], sorted[f + 1]);
    if b.is_infinite() {
        return f64::INFINITY;
    }
    a + (k - f as f64) * (b - a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_example() {
        let s = parse_slos("ttft_p99=500ms, itl_p99=50ms,e2e_p90=10s,tpot_p99.9=0.2s").unwrap();
        assert_eq!(s.len(), 4);
        assert_eq!(s[0].metric, SloMetric::Ttft);
        assert_eq!(s[0].percentile, 99.0);
        assert!((s[0].threshold_s - 0.5).abs() < 1e-12);
        assert!((s[1].threshold_s - 0.05).abs() < 1e-12);
        assert_eq!(
            (s[2].metric, s[2].percentile, s[2].threshold_s),
            (SloMetric::E2e, 90.0, 10.0)
        );
        assert_eq!((s[3].metric, s[3].percentile), (SloMetric::Tpot, 99.9));
    }

    #[test]
    fn bad_entries_are_one_line_errors_that_quote_the_entry() {
        for (spec, needle) in [
            ("", "empty"),
            ("ttft_p99", "metric_pNN=value"),
            ("ttft=5ms", "metric_pNN"),
            ("latency_p99=5ms", "unknown metric"),
            ("ttft_p0=5ms", "percentile"),
            ("ttft_p101=5ms", "percentile"),
            ("ttft_pxx=5ms", "percentile"),
            ("ttft_p99=5", "unit"),
            ("ttft_p99=5min", "unit"),
            ("ttft_p99=-5ms", "> 0"),
            ("ttft_p99=0s", "> 0"),
            ("ttft_p99=abcms", "> 0"),
            ("ttft_p99=5ms,ttft_p99=6ms", "twice"),
            ("ttft_p99=5ms,,", "metric_pNN=value"),
        ] {
            let e = parse_slos(spec).unwrap_err();
            assert!(e.contains(needle), "{spec:?}: {e}");
            assert!(!e.contains('\n'), "{spec:?}: {e}");
        }
        assert!(parse_slos("ttft_p99=5min")
            .unwrap_err()
            .contains("\"ttft_p99=5min\""));
    }

    fn req(ttft: f64, itl: Option<f64>, e2e: f64) -> Option<RequestValues> {
        Some(RequestValues {
            completed: true,
            ttft: Some(ttft),
            itl,
            tpot: itl,
            e2e: Some(e2e),
        })
    }

    /// A completed request without the SLO's metric is left out only for ITL / TPOT (a
    /// one-token answer); without a TTFT or E2E it counts as +∞ (core-rate survivor).
    #[test]
    fn a_missing_ttft_is_infinite_a_missing_itl_is_left_out() {
        let no_values = Some(RequestValues {
            completed: true,
            ..Default::default()
        });
        let fast = req(0.05, Some(0.01), 0.5);
        let ttft = parse_slos("ttft_p50=100ms").unwrap()[0];
        // 0.05 and +∞: the median is +∞
        assert_eq!(check_percentile(&ttft, &[fast, no_values]), (None, false));
        let itl = parse_slos("itl_p50=20ms").unwrap()[0];
        // only the 10 ms ITL counts
        assert_eq!(
            check_percentile(&itl, &[fast, no_values]),
            (Some(0.01), true)
        );
        // a percentile that falls exactly on a finite value is that value, even when +inf
        // follows it (core-rate survivor: it interpolated towards +inf)
        assert_eq!(percentile_with_inf(&[0.1, 0.2, f64::INFINITY], 50.0), 0.2);
        let tail = percentile_with_inf(&[0.1, 0.2, f64::INFINITY], 75.0);
        assert_eq!(tail, f64::INFINITY);
        // between finite values: NumPy's linear interpolation (k = 1.5, 0.25)
        let mid = percentile_with_inf(&[0.1, 0.2, 0.4], 75.0);
        assert!((mid - 0.3).abs() < 1e-12, "{mid}");
        let low = percentile_with_inf(&[1.0, 3.0], 25.0);
        assert!((low - 1.5).abs() < 1e-12, "{low}");
    }

    #[test]
    fn per_request_attainment_needs_every_slo() {
        let slos = parse_slos("ttft_p99=100ms,itl_p50=10ms").unwrap();
        assert!(
            req(0.1, Some(0.01), 1.0).unwrap().good(&slos),
            "equal to the threshold is met"
        );
        assert!(!req(0.11, Some(0.01), 1.0).unwrap().good(&slos));
        assert!(!req(0.05, Some(0.02), 1.0).unwrap().good(&slos));
        // One-token answer: no ITL, cannot miss it.
        assert!(req(0.05, None, 0.05).unwrap().good(&slos));
        let failed = RequestValues {
            completed: false,
            ttft: Some(0.01),
            ..Default::default()
        };
        assert!(!failed.good(&slos), "a failed request is never good");
    }

    #[test]
    fn percentile_constraint_counts_missing_requests_as_infinite() {
        let slo = parse_slos("ttft_p50=100ms").unwrap()[0];
        let rows = vec![
            req(0.01, None, 1.0),
            req(0.02, None, 1.0),
            req(0.03, None, 1.0),
        ];
        let (p, met) = check_percentile(&slo, &rows);
        assert!((p.unwrap() - 0.02).abs() < 1e-12 && met);
        // Two of four never answered: the median interpolates towards +∞ → not met.
        let mut with_fail = vec![req(0.01, None, 1.0), req(0.02, None, 1.0)];
        with_fail.extend([None, None]);
        assert_eq!(check_percentile(&slo, &with_fail), (None, false));
        // One of five failed: p50 is still finite and met.
        let mut one_fail = rows.clone();
        one_fail.extend([req(0.04, None, 1.0), None]);
        let (p, met) = check_percentile(&slo, &one_fail);
        assert!((p.unwrap() - 0.03).abs() < 1e-12 && met);
        // ITL of completed one-token answers is left out, not infinite.
        let itl = parse_slos("itl_p99=10ms").unwrap()[0];
        let (p, met) =
            check_percentile(&itl, &[req(0.01, None, 0.01), req(0.01, Some(0.005), 1.0)]);
        assert_eq!((p, met), (Some(0.005), true));
        assert_eq!(check_percentile(&itl, &[]), (None, false));
    }
}
