//! The metrics `servebench compare` judges per cell beyond the headline, and the per-metric
//! regression gate (`--fail-if-slower METRIC=PCT`).
//!
//! Decode cells: aggregate tok/s (the headline, [`CellDiff::tps`]), per-user tok/s p50 (1 /
//! ITL), TTFT p50, TTST p50, per-token ITL p50, per-gap ITL p99 (the `itl_gaps` histogram of
//! every token-event gap; issue 19) and E2E request latency p50. Prefill rows: prefill tok/s and
//! prefill TTFT.
//!
//! Intervals: the p50 metrics are medians of the cells' request samples, so they get the request
//! bootstrap (or the spread estimate for TTFT and ITL when a file has no samples), like the
//! headline ([`crate::compare`]). Per-gap p99 is one number per cell from its gap histogram
//! and a prefill row is one sample: those have **no interval**, so the table gives no verdict
//! for them and the gate judges them on the point change alone, which must be worse than PCT
//! plus the run-to-run allowance (`--noise-pct`) to count.

use servebench_results::format_context;

use crate::compare::{fmt_pct, Better, CellDiff, Comparison, Diff, IntervalMethod, Verdict};
use crate::{fmt_ms, fmt_tps};

/// A metric `compare` judges per cell; [`name`](Self::name) is its key in
/// `--fail-if-slower METRIC=PCT`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CompareMetric {
    /// Aggregate decode tok/s (higher is better).
    Tps,
    /// Per-user output tok/s p50, 1 / ITL (higher is better).
    PerUser,
    /// TTFT p50, s (lower is better).
    Ttft,
    /// TTST p50, s (lower is better).
    Ttst,
    /// Per-token ITL p50 (each request's mean), s (lower is better).
    Itl,
    /// Per-gap ITL p99 over every token-event gap of the cell, s (lower is better; no interval).
    ItlGapP99,
    /// E2E request latency p50 (completed requests), s (lower is better).
    E2e,
    /// Prefill tok/s of a prefill row (higher is better; one sample, no interval).
    Prefill,
    /// TTFT of a prefill row, s (lower is better; one sample, no interval).
    PrefillTtft,
}

impl CompareMetric {
    /// Every metric, in table order.
    pub const ALL: [CompareMetric; 9] = [
        CompareMetric::Tps,
        CompareMetric::PerUser,
        CompareMetric::Ttft,
        CompareMetric::Ttst,
        CompareMetric::Itl,
        CompareMetric::ItlGapP99,
        CompareMetric::E2e,
        CompareMetric::Prefill,
        CompareMetric::PrefillTtft,
    ];

    /// Key in `--fail-if-slower METRIC=PCT`.
    pub fn name(self) -> &'static str {
        match self {
            CompareMetric::Tps => "tps",
            CompareMetric::PerUser => "per_user",
            CompareMetric::Ttft => "ttft",
            CompareMetric::Ttst => "ttst",
            CompareMetric::Itl => "itl",
            CompareMetric::ItlGapP99 => "itl_gap_p99",
            CompareMetric::E2e => "e2e",
            CompareMetric::Prefill => "prefill",
            CompareMetric::PrefillTtft => "prefill_ttft",
        }
    }

    /// The metric of a key ([`name`](Self::name)).
    pub fn from_name(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.name() == s)
    }

    /// Label in the tables.
    pub fn label(self) -> &'static str {
        match self {
            CompareMetric::Tps => "aggregate tok/s",
            CompareMetric::PerUser => "per-user tok/s p50",
            CompareMetric::Ttft => "TTFT p50",
            CompareMetric::Ttst => "TTST p50",
            CompareMetric::Itl => "ITL p50 (per token)",
            CompareMetric::ItlGapP99 => "ITL per-gap p99",
            CompareMetric::E2e => "E2E latency p50",
            CompareMetric::Prefill => "prefill tok/s",
            CompareMetric::PrefillTtft => "prefill TTFT",
        }
    }

    /// Which way is better.
    pub fn better(self) -> Better {
        match self {
            CompareMetric::Tps | CompareMetric::PerUser | CompareMetric::Prefill => Better::Higher,
            _ => Better::Lower,
        }
    }

    /// False for the metrics that never have an interval (one number per cell or row).
    pub fn has_interval(self) -> bool {
        !matches!(
            self,
            CompareMetric::ItlGapP99 | CompareMetric::Prefill | CompareMetric::PrefillTtft
        )
    }

    fn fmt(self, v: Option<f64>) -> String {
        match self.better() {
            Better::Higher => fmt_tps(v),
            Better::Lower => format!("{} ms", fmt_ms(v)),
        }
    }
}

/// A parsed `--fail-if-slower`: per metric, the smallest worsening (%) that fails the gate.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Gate {
    /// (metric, PCT ≥ 0).
    pub limits: Vec<(CompareMetric, f64)>,
}

impl Gate {
    /// Parses `PCT` (aggregate tok/s, the old form) or `METRIC=PCT[,METRIC=PCT…]`.
    ///
    /// # Errors
    /// One line naming the bad part and the known metric names.
    pub fn parse(s: &str) -> Result<Gate, String> {
        let pct = |v: &str| -> Result<f64, String> {
            match v.trim().parse::<f64>() {
                Ok(p) if p.is_finite() && p >= 0.0 => Ok(p),
                _ => Err(format!("a percentage ≥ 0, got {:?}", v.trim())),
            }
        };
        let names = || {
            CompareMetric::ALL
                .iter()
                .map(|m| m.name())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut limits = Vec::new();
        for part in s.split(',') {
            let part = part.trim();
            let (metric, p) = match part.split_once('=') {
                None => (CompareMetric::Tps, pct(part)?),
                Some((m, v)) => {
                    let metric = CompareMetric::from_name(m.trim()).ok_or_else(|| {
                        format!("unknown metric {:?} (known: {})", m.trim(), names())
                    })?;
                    (metric, pct(v)?)
                }
            };
            if limits.iter().any(|(m, _)| *m == metric) {
                return Err(format!("{} is given twice", metric.name()));
            }
            limits.push((metric, p));
        }
        Ok(Gate { limits })
    }
}

impl Diff {
    /// B is worse than A by at least `pct` %: with an interval, [`Diff::slower_beyond`]; for a
    /// metric without one ([`CompareMetric::has_interval`]), the point change worse than `pct`
    /// + `noise` %.
    pub fn worse_beyond(&self, metric: CompareMetric, pct: f64, noise: f64) -> bool {
        if metric.has_interval() {
            return self.slower_beyond(pct);
        }
        let limit = pct + noise;
        match (self.pct, metric.better()) {
            (Some(p), Better::Higher) => p <= -limit,
            (Some(p), Better::Lower) => p >= limit,
            _ => false,
        }
    }
}

impl CellDiff {
    /// This row's difference of `metric`, when the row has that metric.
    pub fn metric(&self, metric: CompareMetric) -> Option<&Diff> {
        self.metrics
            .iter()
            .find(|(m, _)| *m == metric)
            .map(|(_, d)| d)
    }
}

impl Comparison {
    /// The rows (with their change, %) that fail `metric` at `pct` ([`Diff::worse_beyond`]):
    /// both sides measured.
    pub fn worse_than(&self, metric: CompareMetric, pct: f64, noise: f64) -> Vec<(&CellDiff, f64)> {
        self.cells
            .iter()
            .filter(|c| c.status.0 == "ok" && c.status.1 == "ok")
            .filter_map(|c| {
                let d = c.metric(metric)?;
                d.worse_beyond(metric, pct, noise)
                    .then_some((c, d.pct.unwrap_or(0.0)))
            })
            .collect()
    }
}

/// Headers of the per-metric table.
pub const HEADERS: [&str; 9] = [
    "layer",
    "C",
    "ctx",
    "metric",
    "A",
    "B",
    "Δ",
    "95% interval",
    "verdict",
];

/// The per-metric table: one row per joined cell and metric other than the headline (aggregate
/// tok/s, prefill tok/s: the main table), for cells measured in both runs and metrics with a
/// value in both.
pub fn rows(cmp: &Comparison) -> Vec<[String; 9]> {
    let mut out = Vec::new();
    for c in &cmp.cells {
        if c.status.0 != "ok" || c.status.1 != "ok" {
            continue;
        }
        for (m, d) in &c.metrics {
            if matches!(m, CompareMetric::Tps | CompareMetric::Prefill)
                || d.verdict == Verdict::Missing
            {
                continue;
            }
            let ci = match (d.ci_pct, d.method) {
                (Some((lo, hi)), _) => format!("[{lo:+.1}, {hi:+.1}]%"),
                (None, IntervalMethod::None) if !m.has_interval() => "none (one value)".into(),
                (None, _) => "no interval".into(),
            };
            out.push([
                c.layer.clone(),
                c.concurrency.to_string(),
                format_context(c.context),
                m.label().to_string(),
                m.fmt(d.a),
                m.fmt(d.b),
                fmt_pct(d.pct),
                ci,
                d.verdict.as_str().to_string(),
            ]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gate_parses_the_old_and_the_per_metric_form() {
        assert_eq!(
            Gate::parse("5").unwrap().limits,
            vec![(CompareMetric::Tps, 5.0)]
        );
        assert_eq!(
            Gate::parse("tps=5, ttft=10,itl_gap_p99=20").unwrap().limits,
            vec![
                (CompareMetric::Tps, 5.0),
                (CompareMetric::Ttft, 10.0),
                (CompareMetric::ItlGapP99, 20.0)
            ]
        );
        for bad in [
            "",
            "x",
            "-1",
            "ttft=",
            "foo=3",
            "ttft=3,ttft=4",
            "nan",
            "ttft=inf",
        ] {
            assert!(Gate::parse(bad).is_err(), "{bad:?}");
        }
        assert!(Gate::parse("foo=3").unwrap_err().contains("itl_gap_p99"));
        for m in CompareMetric::ALL {
            assert_eq!(CompareMetric::from_name(m.name()), Some(m));
        }
    }

    fn diff(pct: f64, ci: Option<(f64, f64)>, verdict: Verdict) -> Diff {
        Diff {
            a: Some(1.0),
            b: Some(1.0 + pct / 100.0),
            pct: Some(pct),
            ci_pct: ci,
            method: if ci.is_some() {
                IntervalMethod::RequestBootstrap
            } else {
                IntervalMethod::None
            },
            verdict,
        }
    }

    #[test]
    fn metrics_without_an_interval_gate_on_the_point_change_beyond_the_noise() {
        // per-gap p99 +25 %: fails a 20 % gate only when 20 + 2 (noise) ≤ 25
        let d = diff(25.0, None, Verdict::Unknown);
        assert!(d.worse_beyond(CompareMetric::ItlGapP99, 20.0, 2.0));
        assert!(!d.worse_beyond(CompareMetric::ItlGapP99, 24.0, 2.0));
        // lower tok/s on a prefill row
        let d = diff(-12.0, None, Verdict::Unknown);
        assert!(d.worse_beyond(CompareMetric::Prefill, 10.0, 2.0));
        assert!(!d.worse_beyond(CompareMetric::PrefillTtft, 10.0, 2.0));
        // a metric with an interval needs the interval: no interval, no failure
        assert!(!d.worse_beyond(CompareMetric::Tps, 5.0, 2.0));
        let d = diff(15.0, Some((11.0, 19.0)), Verdict::Slower);
        assert!(d.worse_beyond(CompareMetric::Ttft, 10.0, 2.0));
        assert!(!d.worse_beyond(CompareMetric::Ttft, 12.0, 2.0));
    }
}
