//! Server-side histograms (`x_bucket{le}`, `x_sum`, `x_count`).
//!
//! Quantiles follow Prometheus `histogram_quantile` (linear interpolation inside the bucket,
//! lower bound 0 for the first bucket) with one deliberate difference: when the rank falls in
//! the `+Inf` bucket, Prometheus returns the last finite upper bound, which silently clamps
//! (SGLang v0.4 docs: TTFT p50 would read "30 s" while 77% of requests took longer). Here that
//! case is [`QuantileEstimate::AboveLastFiniteBucket`], displayed as `">30"`.

use std::fmt;

use crate::catalog::LabelFilter;
use crate::delta::{metric_increase, series_increases};
use crate::exposition::Scrape;

/// A quantile read from a bucketed histogram.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub enum QuantileEstimate {
    /// Interpolated value (in the histogram's unit, usually seconds).
    Value(f64),
    /// The rank lies in the `+Inf` bucket: the true value is only known to exceed this last
    /// finite bucket bound.
    AboveLastFiniteBucket(f64),
}

impl QuantileEstimate {
    /// The interpolated value, `None` for [`QuantileEstimate::AboveLastFiniteBucket`].
    pub fn value(&self) -> Option<f64> {
        match *self {
            QuantileEstimate::Value(v) => Some(v),
            QuantileEstimate::AboveLastFiniteBucket(_) => None,
        }
    }
}

impl fmt::Display for QuantileEstimate {
    /// `Value(v)` prints `v`; `AboveLastFiniteBucket(30.0)` prints `>30`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            QuantileEstimate::Value(v) => write!(f, "{v}"),
            QuantileEstimate::AboveLastFiniteBucket(le) => write!(f, ">{le}"),
        }
    }
}

/// A histogram aggregated over all matching series (`sum by (le)`), `tp_rank` replicas
/// collapsed.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize)]
pub struct Histogram {
    /// `(upper bound le, cumulative count)` sorted by `le`; the `+Inf` bucket is included when
    /// the server exported it.
    pub buckets: Vec<(f64, f64)>,
    /// Σ `x_sum` (same unit as the observations).
    pub sum: Option<f64>,
    /// Σ `x_count`.
    pub count: Option<f64>,
}

fn merge_bucket(buckets: &mut Vec<(f64, f64)>, le: f64, count: f64) {
    match buckets.iter_mut().find(|(b, _)| *b == le) {
        Some(entry) => entry.1 += count,
        None => buckets.push((le, count)),
    }
}

fn sort_buckets(buckets: &mut [(f64, f64)]) {
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
}

impl Histogram {
    /// Histogram family `name` (without the `_bucket` suffix) from one scrape, summing every
    /// series that passes `filters`. `None` when neither buckets nor `_sum` / `_count` exist.
    pub fn from_scrape_filtered(s: &Scrape, name: &str, filters: &[LabelFilter]) -> Option<Self> {
        let mut buckets = Vec::new();
        for b in s.select(&format!("{name}_bucket"), filters) {
            let Some(le) = b.label("le").and_then(|v| v.trim().parse::<f64>().ok()) else {
                continue;
            };
            if le.is_nan() {
                continue;
            }
            merge_bucket(&mut buckets, le, b.value);
        }
        sort_buckets(&mut buckets);
        let total = |suffix: &str| {
            let sel = s.select(&format!("{name}{suffix}"), filters);
            (!sel.is_empty()).then(|| sel.iter().map(|x| x.value).sum::<f64>())
        };
        let h = Histogram {
            buckets,
            sum: total("_sum"),
            count: total("_count"),
        };
        (!h.buckets.is_empty() || h.sum.is_some() || h.count.is_some()).then_some(h)
    }

    /// [`Histogram::from_scrape_filtered`] without label filters.
    pub fn from_scrape(s: &Scrape, name: &str) -> Option<Self> {
        Self::from_scrape_filtered(s, name, &[])
    }

    /// Observations made between two scrapes: per-series `increase()` of every bucket, `_sum`
    /// and `_count` (reset-aware, see [`crate::counter_delta`]), then summed by `le`. Returns the
    /// window histogram and whether a reset was seen. `None` when the family is absent from
    /// either scrape.
    pub fn window(before: &Scrape, after: &Scrape, name: &str) -> Option<(Self, bool)> {
        Self::from_scrape(before, name)?;
        Self::from_scrape(after, name)?;
        let mut reset = false;
        let mut buckets = Vec::new();
        if let Some((incs, r)) = series_increases(before, after, &format!("{name}_bucket"), &[]) {
            reset |= r;
            for (sample, inc) in incs {
                let Some(le) = sample
                    .label("le")
                    .and_then(|v| v.trim().parse::<f64>().ok())
                else {
                    continue;
                };
                if !le.is_nan() {
                    merge_bucket(&mut buckets, le, inc);
                }
            }
        }
        sort_buckets(&mut buckets);
        let mut inc = |suffix: &str| {
            metric_increase(before, after, &format!("{name}{suffix}"), &[]).map(|(d, r)| {
                reset |= r;
                d
            })
        };
        let sum = inc("_sum");
        let count = inc("_count");
        Some((
            Histogram {
                buckets,
                sum,
                count,
            },
            reset,
        ))
    }

    /// Total observation count: the `+Inf` bucket, else `_count`.
    pub fn total(&self) -> Option<f64> {
        self.buckets
            .iter()
            .find(|(le, _)| *le == f64::INFINITY)
            .map(|(_, c)| *c)
            .or(self.count)
    }

    /// Mean observation = `_sum / _count`; `None` when either is missing or count is 0.
    pub fn mean(&self) -> Option<f64> {
        match (self.sum, self.count) {
            (Some(s), Some(c)) if c > 0.0 && s.is_finite() => Some(s / c),
            _ => None,
        }
    }

    /// Quantile `q` in [0, 1] (Prometheus `histogram_quantile` interpolation). `None` for an
    /// invalid `q`, no `+Inf` bucket (a truncated histogram has no known total), or no
    /// observations.
    pub fn quantile(&self, q: f64) -> Option<QuantileEstimate> {
        if !(0.0..=1.0).contains(&q) {
            return None;
        }
        let inf_pos = self
            .buckets
            .iter()
            .position(|(le, _)| *le == f64::INFINITY)?;
        // Enforce monotonic cumulative counts (Prometheus does the same).
        let mut cum: Vec<(f64, f64)> = Vec::with_capacity(inf_pos + 1);
        let mut running = 0.0f64;
        for &(le, c) in &self.buckets[..=inf_pos] {
            if !c.is_finite() {
                return None;
            }
            running = running.max(c);
            cum.push((le, running));
        }
        let total = cum[inf_pos].1;
        if total <= 0.0 {
            return None;
        }
        let rank = q * total;
        // `c > 0` skips leading empty buckets, so q = 0 lands on the first non-empty one.
        let i = cum.iter().position(|&(_, c)| c >= rank && c > 0.0)?;
        if i == inf_pos {
            return if i == 0 {
                None
            } else {
                Some(QuantileEstimate::AboveLastFiniteBucket(cum[i - 1].0))
            };
        }
        let (upper, upper_count) = cum[i];
        let (lower, lower_count) = if i == 0 {
            if upper <= 0.0 {
                return Some(QuantileEstimate::Value(upper));
            }
            (0.0, 0.0)
        } else {
            cum[i - 1]
        };
        let in_bucket = upper_count - lower_count;
        if in_bucket <= 0.0 {
            return Some(QuantileEstimate::Value(lower));
        }
        Some(QuantileEstimate::Value(
            lower + (upper - lower) * ((rank - lower_count) / in_bucket),
        ))
    }
}

/// Quantile `q` of histogram family `name` (e.g. `"sglang:time_to_first_token_seconds"`),
/// summed over all its series. See [`Histogram::quantile`].
pub fn histogram_quantile(s: &Scrape, name: &str, q: f64) -> Option<QuantileEstimate> {
    Histogram::from_scrape(s, name)?.quantile(q)
}

/// Mean of histogram family `name` = Σsum / Σcount (e.g. SGLang v0.4 TTFT 213.65 s).
pub fn histogram_mean(s: &Scrape, name: &str) -> Option<f64> {
    Histogram::from_scrape(s, name)?.mean()
}

/// Observation count of histogram family `name` (`+Inf` bucket, else `_count`): cross-check it
/// against the client's request count (vLLM issue 8115).
pub fn histogram_count(s: &Scrape, name: &str) -> Option<f64> {
    Histogram::from_scrape(s, name)?.total()
}
