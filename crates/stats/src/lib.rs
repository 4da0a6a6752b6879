//! Summary statistics with one documented definition, shared by every layer of servebench.
//!
//! * **Percentile**: linear interpolation between closest ranks, identical to NumPy's default
//!   `"linear"` method and to the seed tool (`llm-decode-bench-spec.md` §4.2): sort the values,
//!   `k = (n − 1) · p / 100`, `f = ⌊k⌋`, result `x[f] + (k − f)(x[f+1] − x[f])` (or `x[f]` when
//!   `f + 1 ≥ n`).
//! * **Mean** is the arithmetic mean, **std** the *population* standard deviation (0 for one
//!   value).
//! * Unlike the seed tool, values are **not** dropped when they are ≤ 0: a measured zero (for
//!   example a time-to-second-token of 0 s when the first SSE event carried two tokens) is a real
//!   observation. Values that were not measured are simply never added; non-finite values are
//!   ignored.
//!
//! [`Samples`] keeps the raw values, so two sample sets merge exactly by concatenation
//! ([`Samples::merge`]) — cells are bounded by their measurement window, so this stays small.

use serde::{Deserialize, Serialize};

/// A bag of raw observations of one quantity (unit chosen by the caller: s, tokens, tok/s).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Samples {
    values: Vec<f64>,
}

impl Samples {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one observation; NaN and ±∞ are ignored (they are never measurements).
    pub fn push(&mut self, v: f64) {
        if v.is_finite() {
            self.values.push(v);
        }
    }

    /// Adds `v` when it is `Some` (a quantity that was measured for this request).
    pub fn push_opt(&mut self, v: Option<f64>) {
        if let Some(v) = v {
            self.push(v);
        }
    }

    /// Appends every observation of `other` (exact merge: percentiles of the union).
    pub fn merge(&mut self, other: &Samples) {
        self.values.extend_from_slice(&other.values);
    }

    /// Number of observations.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// True when nothing was observed.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The observations in insertion order.
    pub fn values(&self) -> &[f64] {
        &self.values
    }

    /// Summary (mean, min, max, p50, p90, p99, population std); `None` when empty.
    pub fn summary(&self) -> Option<Summary> {
        Summary::of(&self.values)
    }
}

impl FromIterator<f64> for Samples {
    fn from_iter<I: IntoIterator<Item = f64>>(iter: I) -> Self {
        let mut s = Samples::new();
        for v in iter {
            s.push(v);
        }
        s
    }
}

/// Summary of a non-empty set of observations, in the unit of the observations.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Number of observations.
    pub count: usize,
    /// Arithmetic mean.
    pub avg: f64,
    /// Smallest observation.
    pub min: f64,
    /// Largest observation.
    pub max: f64,
    /// 50th percentile (linear interpolation, NumPy default).
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Population standard deviation (divides by n; 0 for a single value).
    pub std: f64,
}

impl Summary {
    /// Summarises `values` (non-finite values ignored); `None` when nothing finite remains.
    pub fn of(values: &[f64]) -> Option<Summary> {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let avg = v.iter().sum::<f64>() / n as f64;
        let var = v.iter().map(|x| (x - avg) * (x - avg)).sum::<f64>() / n as f64;
        Some(Summary {
            count: n,
            avg,
            min: v[0],
            max: v[n - 1],
            p50: percentile_sorted(&v, 50.0),
            p90: percentile_sorted(&v, 90.0),
            p99: percentile_sorted(&v, 99.0),
            std: var.sqrt(),
        })
    }
}

/// Percentile `p` (0–100) of already **sorted** finite values, NumPy `"linear"` method.
///
/// Returns NaN for an empty slice. `p` outside 0–100 is clamped.
pub fn percentile_sorted(sorted: &[f64], p: f64) -> f64 {
    let n = sorted.len();
    if n == 0 {
        return f64::NAN;
    }
    let p = p.clamp(0.0, 100.0);
    let k = (n - 1) as f64 * p / 100.0;
    let f = k.floor() as usize;
    if f + 1 >= n {
        return sorted[f.min(n - 1)];
    }
    sorted[f] + (k - f as f64) * (sorted[f + 1] - sorted[f])
}

/// Percentile `p` (0–100) of unsorted values (copies and sorts; non-finite values ignored).
pub fn percentile(values: &[f64], p: f64) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(percentile_sorted(&v, p))
}

/// Median of unsorted values (50th percentile, linear).
pub fn median(values: &[f64]) -> Option<f64> {
    percentile(values, 50.0)
}

/// Wilson score interval for a binomial proportion (successes out of `n`) at confidence `z`
/// (1.96 for 95 %). Returns `(low, high)` in 0–1; `None` when `n == 0`.
///
/// Formula: Wilson (1927); centre `(p̂ + z²/2n) / (1 + z²/n)`, half-width
/// `z·sqrt(p̂(1−p̂)/n + z²/4n²) / (1 + z²/n)`.
pub fn wilson_interval(successes: u64, n: u64, z: f64) -> Option<(f64, f64)> {
    if n == 0 {
        return None;
    }
    let n_f = n as f64;
    let p = successes.min(n) as f64 / n_f;
    let z2 = z * z;
    let denom = 1.0 + z2 / n_f;
    let centre = (p + z2 / (2.0 * n_f)) / denom;
    let half = z * ((p * (1.0 - p) / n_f) + z2 / (4.0 * n_f * n_f)).sqrt() / denom;
    Some(((centre - half).max(0.0), (centre + half).min(1.0)))
}

/// `601344` → `"601,344"`: an integer with a comma between each group of three digits (the seed
/// tool's token-count format, seed spec §3.3). Shared by the event log, the live view and the
/// KV-budget lines so they print one number one way.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn thousands_groups_three_digits() {
        assert_eq!(super::thousands(601344), "601,344");
        assert_eq!(super::thousands(12), "12");
        assert_eq!(super::thousands(1000), "1,000");
        assert_eq!(super::thousands(0), "0");
    }

    use super::*;

    #[test]
    fn numpy_linear_percentiles() {
        // numpy.percentile([1,2,3,4], [50,90,99]) = [2.5, 3.7, 3.97]
        let s = Summary::of(&[4.0, 1.0, 3.0, 2.0]).unwrap();
        assert_eq!(s.p50, 2.5);
        assert!((s.p90 - 3.7).abs() < 1e-12);
        assert!((s.p99 - 3.97).abs() < 1e-12);
        assert_eq!(s.min, 1.0);
        assert_eq!(s.max, 4.0);
        assert_eq!(s.avg, 2.5);
        // population std of 1..4 = sqrt(1.25)
        assert!((s.std - 1.25f64.sqrt()).abs() < 1e-12);
    }

    #[test]
    fn single_value_and_empty() {
        let s = Summary::of(&[0.185]).unwrap();
        assert_eq!((s.p50, s.p90, s.p99, s.std), (0.185, 0.185, 0.185, 0.0));
        assert!(Summary::of(&[]).is_none());
        assert!(Summary::of(&[f64::NAN]).is_none());
    }

    #[test]
    fn zeros_are_kept() {
        let s = Summary::of(&[0.0, 0.0, 1.0]).unwrap();
        assert_eq!(s.p50, 0.0);
        assert!((s.avg - 1.0 / 3.0).abs() < 1e-12);
    }

    #[test]
    fn merge_is_union() {
        let mut a: Samples = [1.0, 2.0].into_iter().collect();
        let b: Samples = [3.0, 4.0].into_iter().collect();
        a.merge(&b);
        assert_eq!(a.summary().unwrap().p50, 2.5);
        assert_eq!(a.len(), 4);
    }

    #[test]
    fn percentile_edges_and_clamping() {
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile_sorted(&v, 0.0), 1.0);
        assert_eq!(
            percentile_sorted(&v, 100.0),
            4.0,
            "the max, not an index past it"
        );
        // numpy.percentile([1,2,3,4], 25) = 1.75; 60 -> 2.8
        assert_eq!(percentile_sorted(&v, 25.0), 1.75);
        assert!((percentile_sorted(&v, 60.0) - 2.8).abs() < 1e-12);
        assert_eq!(percentile_sorted(&v, 150.0), 4.0, "clamped to 100");
        assert_eq!(percentile_sorted(&v, -5.0), 1.0, "clamped to 0");
        assert_eq!(percentile_sorted(&[7.5], 99.0), 7.5);
        assert!(percentile_sorted(&[], 50.0).is_nan());
        // numpy.percentile([10, 20, 40], 75) = 30 (k = 1.5)
        assert_eq!(percentile_sorted(&[10.0, 20.0, 40.0], 75.0), 30.0);
    }

    #[test]
    fn unsorted_percentile_and_median_ignore_non_finite() {
        assert_eq!(
            percentile(&[4.0, f64::NAN, 1.0, 3.0, f64::INFINITY, 2.0], 50.0),
            Some(2.5)
        );
        assert_eq!(percentile(&[40.0, 10.0, 20.0], 75.0), Some(30.0));
        assert_eq!(percentile(&[f64::NAN], 50.0), None);
        assert_eq!(percentile(&[], 50.0), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[]), None);
    }

    #[test]
    fn summary_of_skewed_values() {
        // mean 3, population variance (4 + 1 + 9) / 3, sorted before the percentiles
        let s = Summary::of(&[6.0, 1.0, f64::NAN, 2.0]).unwrap();
        assert_eq!(s.count, 3);
        assert_eq!((s.min, s.max, s.avg, s.p50), (1.0, 6.0, 3.0, 2.0));
        assert!((s.std - (14.0f64 / 3.0).sqrt()).abs() < 1e-12);
        // numpy.percentile([1,2,6], [90, 99]) = [5.2, 5.92]
        assert!((s.p90 - 5.2).abs() < 1e-12, "{}", s.p90);
        assert!((s.p99 - 5.92).abs() < 1e-12, "{}", s.p99);
    }

    #[test]
    fn std_is_stable_for_a_large_mean() {
        // Deviations from the mean are squared (two-pass): the one-pass Σx² − n·mean² form
        // cancels catastrophically here (it gives a negative variance). Values like offsets of
        // 10⁸ s with 0.1–0.4 s spread; population variance of [0.1, 0.2, 0.4] = 0.14 / 9.
        let s = Summary::of(&[1e8 + 0.1, 1e8 + 0.2, 1e8 + 0.4]).unwrap();
        let want = (0.14f64 / 9.0).sqrt();
        assert!((s.std - want).abs() < 1e-6, "{} vs {want}", s.std);
    }

    #[test]
    fn samples_keep_finite_measurements_in_order() {
        let mut s = Samples::new();
        assert!(s.is_empty());
        assert_eq!(s.summary(), None);
        s.push(0.5);
        s.push(f64::NAN);
        s.push(f64::NEG_INFINITY);
        s.push_opt(None);
        s.push_opt(Some(0.25));
        s.push_opt(Some(f64::INFINITY));
        assert_eq!(s.values(), &[0.5, 0.25]);
        assert_eq!(s.len(), 2);
        assert!(!s.is_empty());
        assert_eq!(s.summary().unwrap().p50, 0.375);
        let c: Samples = [1.0, f64::NAN, 2.0].into_iter().collect();
        assert_eq!(c.values(), &[1.0, 2.0]);
    }

    #[test]
    fn wilson_known_values() {
        // 8/10 at 95 %: (0.4902, 0.9433) — standard textbook value
        let (lo, hi) = wilson_interval(8, 10, 1.96).unwrap();
        assert!((lo - 0.4902).abs() < 1e-3, "{lo}");
        assert!((hi - 0.9433).abs() < 1e-3, "{hi}");
        assert!(wilson_interval(0, 0, 1.96).is_none());
        let (lo, hi) = wilson_interval(0, 5, 1.96).unwrap();
        assert_eq!(lo, 0.0);
        assert!(hi > 0.4 && hi < 0.5);
    }
}
