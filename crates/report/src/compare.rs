//! `servebench compare`: is run B faster than run A beyond the noise?
//!
//! Cells are joined on (layer, C, context). Per joined cell the report gives the difference of
//! aggregate decode tok/s, TTFT p50 and ITL p50 as B − A and as a percentage of A, each with a 95 %
//! confidence interval of the percentage, and marks the differences beyond the noise; the
//! "every metric" table adds per-user tok/s, TTST, per-gap ITL p99 and E2E latency
//! ([`crate::compare_metrics`]).
//!
//! **How the interval is computed** (the results file keeps one number per cell for aggregate
//! tok/s, but every request of the cell as a sample; it has no per-second token counts):
//!
//! * `request bootstrap` (when both cells carry request samples): the requests of each cell are
//!   resampled with replacement, [`CompareOptions::resamples`] times, independently for A and B.
//!   Aggregate tok/s is scaled by the ratio of the original to the resampled mean per-token ITL
//!   of the requests (C streams together decode about C / mean ITL tokens per second), TTFT and
//!   ITL p50 are the medians of the resampled requests. The interval is the 2.5th–97.5th percentile of
//!   the resampled B / A − 1. It covers the request-to-request variation inside each cell; it
//!   cannot see run-to-run drift (another load on the machine, a server restart), which is why a
//!   difference also has to exceed [`CompareOptions::noise_pct`] to be marked.
//! * `spread estimate` (no samples, e.g. files written without them): a normal approximation
//!   from what the file keeps — the per-request spread σ ≈ (p90 − p50) / 1.2816 of the metric
//!   (per-token ITL for aggregate tok/s), the standard error of the mean σ / √n over the cell's
//!   `request_count` (× 1.2533 for a median), combined for the
//!   log-ratio (delta method). Rougher; it assumes a normal spread.
//! * `none`: neither is available (or the row is one sample, as prefill rows are): no interval,
//!   and the difference is never marked as significant.
//!
//! **Run-to-run noise.** Each side is one run, so the intervals above see only the variation
//! inside a run. For the verdict the interval is widened by ± `noise_pct` (default 2 %), the
//! run-to-run allowance ([`single_run_interval`]); the widened interval is the one shown.
//!
//! **Verdicts** ([`verdict_for`]): `same` when the change is under `noise_pct`; `unclear` when
//! it is larger but the interval spans 0 (so a large change never reads "same"); `needs
//! repeats` when the interval excludes 0 but A or B flagged its own machine as busy (a client
//! tick late by ≥ [`BUSY_TICK_LAG_MS`]): a single run on a busy machine cannot carry a verdict;
//! otherwise `faster` / `SLOWER` by the sign. [`Comparison::slower_than`] (the
//! `--fail-if-slower` gate) counts a cell only when the whole widened interval lies at or below
//! −PCT, so two runs of the same build differing by their run-to-run noise do not fail it.

use std::fmt::Write as _;

use servebench_results::{format_context, CellResult, CellStatus, Results};

use crate::cells::{by_context, layers, prefill_ok, Metric};
use crate::compare_metrics::CompareMetric;
use crate::html::{esc, head, plots};
use crate::plot::{Chart, Series, XScale};
use crate::{fmt_ms, fmt_tps};

/// Options of a comparison.
#[derive(Clone, Debug)]
pub struct CompareOptions {
    /// Smallest difference, %, that is marked even when its interval excludes 0 (run-to-run
    /// noise the request bootstrap cannot see). Default 2.
    pub noise_pct: f64,
    /// Bootstrap resamples per cell. Default 2000.
    pub resamples: usize,
    /// Seed of the bootstrap's random numbers (results are reproducible). Default 1.
    pub seed: u64,
}

impl Default for CompareOptions {
    fn default() -> Self {
        CompareOptions {
            noise_pct: 2.0,
            resamples: 2000,
            seed: 1,
        }
    }
}

/// How an interval was obtained.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IntervalMethod {
    /// Bootstrap over the request samples of both cells.
    RequestBootstrap,
    /// Normal approximation from the stored p50 / p90 and request counts.
    SpreadEstimate,
    /// No interval.
    None,
}

impl IntervalMethod {
    /// Short name used in the tables.
    pub fn as_str(self) -> &'static str {
        match self {
            IntervalMethod::RequestBootstrap => "request bootstrap",
            IntervalMethod::SpreadEstimate => "spread estimate",
            IntervalMethod::None => "none",
        }
    }
}

/// Which way a metric is better.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Better {
    /// Higher is better (tok/s).
    Higher,
    /// Lower is better (latency).
    Lower,
}

/// The verdict of one difference.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// B is better beyond the noise.
    Faster,
    /// B is worse beyond the noise.
    Slower,
    /// Within the noise.
    Same,
    /// No interval, so no verdict (one sample per cell, or no samples and no spread).
    Unknown,
    /// The change is at least the noise threshold but its interval spans 0: neither faster
    /// nor the same.
    Unclear,
    /// The interval excludes 0, but a single run on a machine the run itself flagged as busy
    /// cannot tell a change from run-to-run noise: repeat the runs.
    NeedsRepeats,
    /// The value is missing in A or B.
    Missing,
}

impl Verdict {
    /// Word used in the tables.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Faster => "faster",
            Verdict::Slower => "SLOWER",
            Verdict::Same => "same (within noise)",
            Verdict::Unknown => "unknown (no interval)",
            Verdict::Unclear => "unclear (interval spans 0)",
            Verdict::NeedsRepeats => "needs repeats (busy machine)",
            Verdict::Missing => "-",
        }
    }

    /// One word, for the latency column.
    pub fn short(self) -> &'static str {
        match self {
            Verdict::Faster => "faster",
            Verdict::Slower => "SLOWER",
            Verdict::Same => "same",
            Verdict::Unknown => "unknown",
            Verdict::Unclear => "unclear",
            Verdict::NeedsRepeats => "needs repeats",
            Verdict::Missing => "-",
        }
    }
}

/// The difference of one metric between A and B.
#[derive(Clone, Debug)]
pub struct Diff {
    /// A's value (tok/s or s).
    pub a: Option<f64>,
    /// B's value.
    pub b: Option<f64>,
    /// (B − A) / A × 100.
    pub pct: Option<f64>,
    /// 95 % interval of `pct`.
    pub ci_pct: Option<(f64, f64)>,
    /// How the interval was obtained.
    pub method: IntervalMethod,
    /// Better, worse or the same beyond the noise.
    pub verdict: Verdict,
}

impl Diff {
    /// B is worse than A by at least `pct` % beyond the noise: verdict `SLOWER` and the whole
    /// interval at or below −`pct` (higher-is-better metrics; for lower-is-better ones, at or
    /// above +`pct`).
    pub fn slower_beyond(&self, pct: f64) -> bool {
        self.verdict == Verdict::Slower
            && self.ci_pct.is_some_and(|(lo, hi)| hi <= -pct || lo >= pct)
    }
}

/// One joined cell.
#[derive(Clone, Debug)]
pub struct CellDiff {
    /// `sustained`, `request_count`, `burst` or `prefill`.
    pub layer: String,
    /// Concurrency C (1 for prefill rows).
    pub concurrency: u64,
    /// Context, tokens.
    pub context: u64,
    /// Status in A and B (`ok`, …, or `absent`).
    pub status: (String, String),
    /// Aggregate decode tok/s (prefill rows: prefill tok/s).
    pub tps: Diff,
    /// TTFT p50, s.
    pub ttft_p50: Diff,
    /// Per-token ITL p50, s.
    pub itl_p50: Diff,
    /// Every metric judged for this row, the three above included, in
    /// [`CompareMetric::ALL`] order (decode cells: tps to e2e; prefill rows: prefill and
    /// prefill_ttft).
    pub metrics: Vec<(CompareMetric, Diff)>,
}

/// A against one B.
#[derive(Clone, Debug)]
pub struct Comparison {
    /// Label of the baseline (its file name).
    pub a: String,
    /// Label of the other run.
    pub b: String,
    /// Joined cells, in A's order, then B's cells that A lacks.
    pub cells: Vec<CellDiff>,
    /// Joined open-loop rows ([`crate::compare_rate`]); empty when neither file has any.
    pub rates: Vec<crate::compare_rate::RateDiff>,
    /// One line per context a rate search ran on in either file: best rate A→B.
    pub rate_searches: Vec<String>,
    /// Why the two runs may not be comparable.
    pub warnings: Vec<String>,
}

/// A cell measured in the baseline (A `ok` or `capacity-limited`) that B did not measure
/// (`invalid`, `error`, a skip, or `absent`): for a regression gate a lost cell is worse than a
/// slower one. `status`: (A, B) as in [`CellDiff::status`].
pub fn lost(status: &(String, String)) -> bool {
    let measured = |s: &str| s == "ok" || s == "capacity-limited";
    measured(&status.0) && !measured(&status.1)
}

impl Comparison {
    /// Cells measured in A that B did not measure ([`lost`]).
    pub fn lost_cells(&self) -> Vec<&CellDiff> {
        self.cells.iter().filter(|c| lost(&c.status)).collect()
    }

    /// Cells whose aggregate tok/s is lower beyond the noise by at least `pct` %: verdict
    /// `SLOWER` and the whole 95 % interval (widened for run-to-run noise) at or below −`pct`.
    pub fn slower_than(&self, pct: f64) -> Vec<&CellDiff> {
        self.cells
            .iter()
            .filter(|c| c.tps.slower_beyond(pct))
            .collect()
    }
}

/// splitmix64: small, fast, reproducible.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    servebench_stats::percentile_sorted(v, 50.0)
}

/// The statistic a bootstrap resamples.
#[derive(Clone, Copy)]
enum Stat {
    /// 1 / mean: per-request ITLs (s/token) → a speed (tok/s).
    InverseMean,
    Median,
}

fn stat(s: Stat, v: &mut [f64]) -> f64 {
    match s {
        Stat::InverseMean => 1.0 / mean(v),
        Stat::Median => median(v),
    }
}

/// Bootstrap interval of (B / A − 1) × 100, where each side is `point × stat(resample) /
/// stat(original)`.
fn bootstrap_pct(
    a: (f64, &[f64]),
    b: (f64, &[f64]),
    s: Stat,
    opts: &CompareOptions,
    rng: &mut Rng,
) -> Option<(f64, f64)> {
    let (pa, va) = a;
    let (pb, vb) = b;
    if va.len() < 2 || vb.len() < 2 {
        return None;
    }
    let sa = stat(s, &mut va.to_vec());
    let sb = stat(s, &mut vb.to_vec());
    if sa <= 0.0 || sb <= 0.0 {
        return None;
    }
    let mut ra = vec![0.0; va.len()];
    let mut rb = vec![0.0; vb.len()];
    let mut out: Vec<f64> = Vec::with_capacity(opts.resamples);
    for _ in 0..opts.resamples.max(100) {
        for x in ra.iter_mut() {
            *x = va[rng.below(va.len())];
        }
        for x in rb.iter_mut() {
            *x = vb[rng.below(vb.len())];
        }
        let ea = pa * stat(s, &mut ra) / sa;
        let eb = pb * stat(s, &mut rb) / sb;
        if ea > 0.0 {
            out.push((eb / ea - 1.0) * 100.0);
        }
    }
    if out.len() < 100 {
        return None;
    }
    out.sort_by(f64::total_cmp);
    Some((
        servebench_stats::percentile_sorted(&out, 2.5),
        servebench_stats::percentile_sorted(&out, 97.5),
    ))
}

/// Relative standard error of a cell's mean from its stored spread: σ ≈ (p90 − p50) / 1.2816,
/// SE = σ / √n, relative to `center`.
fn spread_rel_se(p50: Option<f64>, p90: Option<f64>, center: f64, n: u64) -> Option<f64> {
    let (p50, p90) = (p50?, p90?);
    if n < 2 || center <= 0.0 {
        return None;
    }
    let sigma = (p90 - p50).abs() / 1.2816;
    Some(sigma / (n as f64).sqrt() / center)
}

/// Client monitor-tick lag, ms, from which a run flags its machine as busy (the threshold of
/// the cell warning in `servebench_core::cell::tick_lag_warning`).
pub const BUSY_TICK_LAG_MS: f64 = 50.0;

/// The interval of a single-run comparison for its verdict: the within-run 95 % interval
/// `ci` (%, of B / A − 1) widened by ± `allowance_pct` (%), the run-to-run noise that a
/// within-run interval cannot see.
pub fn single_run_interval(ci: (f64, f64), allowance_pct: f64) -> (f64, f64) {
    let a = allowance_pct.max(0.0);
    (ci.0 - a, ci.1 + a)
}

/// The verdict of a change `pct` (%, (B − A) / A) with its 95 % interval `ci` (%), for a metric
/// better `better`, a noise threshold `noise` (%), and `busy`: A or B flagged its machine as
/// busy. Missing without `pct`, unknown without `ci`; `same` under the threshold; `unclear` when
/// the interval spans 0; `needs repeats` on a busy machine; else faster / SLOWER by the sign,
/// so the word never contradicts the sign of the change.
pub fn verdict_for(
    pct: Option<f64>,
    ci: Option<(f64, f64)>,
    better: Better,
    noise: f64,
    busy: bool,
) -> Verdict {
    let (Some(p), Some((lo, hi))) = (pct, ci) else {
        return if pct.is_some() {
            Verdict::Unknown
        } else {
            Verdict::Missing
        };
    };
    if p.abs() < noise {
        return Verdict::Same;
    }
    if lo <= 0.0 && hi >= 0.0 {
        return Verdict::Unclear;
    }
    if busy {
        return Verdict::NeedsRepeats;
    }
    match (p > 0.0, better) {
        (true, Better::Higher) | (false, Better::Lower) => Verdict::Faster,
        _ => Verdict::Slower,
    }
}

/// Whether the cell's run flagged its machine as busy (a client tick ≥ [`BUSY_TICK_LAG_MS`]
/// late).
fn busy(c: &CellResult) -> bool {
    c.client_max_tick_lag_ms
        .is_some_and(|ms| ms >= BUSY_TICK_LAG_MS)
}

fn ok(c: Option<&CellResult>) -> Option<&CellResult> {
    c.filter(|c| c.status == CellStatus::Ok)
}

pub(crate) fn pct_of(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if a > 0.0 => Some((b / a - 1.0) * 100.0),
        _ => None,
    }
}

/// Per-request per-token ITLs of a cell, s (from `output_tps_per_user` when only that is stored).
fn itls(c: &CellResult) -> Vec<f64> {
    c.request_samples
        .iter()
        .filter(|s| s.output_tokens > 0)
        .filter_map(|s| {
            s.inter_token_latency_avg
                .or_else(|| s.output_tps_per_user.filter(|&t| t > 0.0).map(|t| 1.0 / t))
        })
        .filter(|v| v.is_finite() && *v > 0.0)
        .collect()
}

fn diff_metric(
    a: Option<&CellResult>,
    b: Option<&CellResult>,
    metric: Option<Metric>,
    better: Better,
    opts: &CompareOptions,
    rng: &mut Rng,
) -> Diff {
    let value = |c: &CellResult| match metric {
        None => c.aggregate_tps,
        Some(Metric::Ttft) => c.ttft_p50,
        Some(Metric::Itl) => c.inter_token_latency_p50,
        Some(m) => crate::cells::percentile(c, m, 50.0),
    };
    let (ca, cb) = (ok(a), ok(b));
    let va = ca.and_then(value);
    let vb = cb.and_then(value);
    let pct = pct_of(va, vb);
    let (mut ci, mut method) = (None, IntervalMethod::None);
    if let (Some(ca), Some(cb), Some(x), Some(y)) = (ca, cb, va, vb) {
        let (sa, sb, st) = match metric {
            None => (itls(ca), itls(cb), Stat::InverseMean),
            Some(m) => (m.sample_values(ca), m.sample_values(cb), Stat::Median),
        };
        ci = bootstrap_pct((x, &sa), (y, &sb), st, opts, rng);
        if ci.is_some() {
            method = IntervalMethod::RequestBootstrap;
        } else {
            let se = |c: &CellResult| match metric {
                // Mean per-token ITL (its relative error is that of C / mean ITL).
                None => spread_rel_se(
                    c.inter_token_latency_p50,
                    c.inter_token_latency_p90,
                    c.inter_token_latency_avg
                        .or(c.inter_token_latency_p50)
                        .unwrap_or(0.0),
                    c.request_count,
                ),
                // The median's standard error ≈ 1.2533 × that of the mean (normal spread).
                Some(Metric::Ttft) => spread_rel_se(
                    c.ttft_p50,
                    c.ttft_p90,
                    c.ttft_p50.unwrap_or(0.0),
                    c.request_count,
                )
                .map(|s| s * 1.2533),
                Some(Metric::Itl) => spread_rel_se(
                    c.inter_token_latency_p50,
                    c.inter_token_latency_p90,
                    c.inter_token_latency_p50.unwrap_or(0.0),
                    c.request_count,
                )
                .map(|s| s * 1.2533),
                Some(_) => None,
            };
            if let (Some(ea), Some(eb)) = (se(ca), se(cb)) {
                if x > 0.0 && y > 0.0 {
                    let l = (y / x).ln();
                    let h = 1.96 * (ea * ea + eb * eb).sqrt();
                    ci = Some((((l - h).exp() - 1.0) * 100.0, ((l + h).exp() - 1.0) * 100.0));
                    method = IntervalMethod::SpreadEstimate;
                }
            }
        }
    }
    let ci = ci.map(|ci| single_run_interval(ci, opts.noise_pct));
    let busy = ca.is_some_and(busy) || cb.is_some_and(busy);
    Diff {
        a: va,
        b: vb,
        pct,
        ci_pct: ci,
        method,
        verdict: verdict_for(pct, ci, better, opts.noise_pct, busy),
    }
}

fn status_of(c: Option<&CellResult>, show: bool) -> String {
    match c {
        None => "absent".into(),
        Some(c) if c.status == CellStatus::Ok && c.capacity_limited && !show => {
            "capacity-limited".into()
        }
        Some(c) => c.status.as_str().to_string(),
    }
}

/// Why A and B may not be comparable: different model, max_tokens, ignore_eos, API, window,
/// decode mode, engine or engine version, or prompt sizes (measured prompt tokens of a context
/// differing by more than 1 %).
pub fn comparability_warnings(a: &Results, b: &Results) -> Vec<String> {
    let (ma, mb) = (&a.metadata, &b.metadata);
    let mut w = Vec::new();
    let mut check = |what: &str, x: String, y: String| {
        if x != y {
            w.push(format!("{what} differs: {x:?} vs {y:?}"));
        }
    };
    check("model", ma.model.clone(), mb.model.clone());
    check(
        "max_tokens",
        ma.max_tokens.to_string(),
        mb.max_tokens.to_string(),
    );
    check(
        "ignore_eos",
        ma.ignore_eos.to_string(),
        mb.ignore_eos.to_string(),
    );
    check("engine", ma.engine.clone(), mb.engine.clone());
    check(
        "engine version",
        ma.engine_version.clone().unwrap_or_default(),
        mb.engine_version.clone().unwrap_or_default(),
    );
    check("API endpoint", ma.endpoint.clone(), mb.endpoint.clone());
    check(
        "decode mode",
        ma.decode_mode.to_string(),
        mb.decode_mode.to_string(),
    );
    check(
        "measured window per cell (s)",
        crate::cells::fmt_num(ma.duration_per_test),
        crate::cells::fmt_num(mb.duration_per_test),
    );
    check(
        "temperature",
        ma.temperature
            .map(|t| t.to_string())
            .unwrap_or_else(|| "server default".into()),
        mb.temperature
            .map(|t| t.to_string())
            .unwrap_or_else(|| "server default".into()),
    );
    // Prompt sizes per context.
    let prompt = |r: &Results, x: u64| -> Option<f64> {
        r.results
            .iter()
            .filter(|c| c.context_tokens == x)
            .find_map(|c| c.prompt_tokens.map(|t| t as f64).or(c.input_seq_len_avg))
    };
    let mut ctxs: Vec<u64> = a.results.iter().map(|c| c.context_tokens).collect();
    ctxs.sort_unstable();
    ctxs.dedup();
    for x in ctxs {
        if let (Some(pa), Some(pb)) = (prompt(a, x), prompt(b, x)) {
            if pa > 0.0 && ((pb - pa) / pa).abs() > 0.01 {
                w.push(format!(
                    "prompt size at context {} differs: {pa:.0} vs {pb:.0} prompt tokens",
                    format_context(x)
                ));
            }
        }
    }
    w
}

fn get<'a>(ls: &[crate::cells::Layer<'a>], id: &str, c: u64, x: u64) -> Option<&'a CellResult> {
    ls.iter()
        .find(|l| l.id == id)
        .and_then(|l| crate::cells::find(l.cells, x, c))
}

fn visible(c: Option<&CellResult>, show: bool) -> Option<&CellResult> {
    c.filter(|c| !c.capacity_limited || show)
}

/// Compares `b` against the baseline `a`.
pub fn compare(a: (&str, &Results), b: (&str, &Results), opts: &CompareOptions) -> Comparison {
    let mut rng = Rng(opts.seed);
    // the extra metrics draw from their own stream, so adding them left the headline's
    // intervals as they were
    let mut extra_rng = Rng(opts.seed ^ 0x006d_6574_7269_6373);
    let mut cells = Vec::new();
    let la = layers(a.1);
    let lb = layers(b.1);
    let mut keys: Vec<(&'static str, u64, u64)> = Vec::new();
    for l in la.iter().chain(lb.iter()) {
        for c in l.cells {
            let k = (l.id, c.concurrency, c.context_tokens);
            if !keys.contains(&k) {
                keys.push(k);
            }
        }
    }
    for (id, c, x) in keys {
        let (ca, cb) = (get(&la, id, c, x), get(&lb, id, c, x));
        // Cells that are capacity-limited show no headline; do not compare hidden values.
        let show = a.1.metadata.show_capacity_limited_values;
        let (va, vb) = (visible(ca, show), visible(cb, show));
        let tps = diff_metric(va, vb, None, Better::Higher, opts, &mut rng);
        let ttft_p50 = diff_metric(va, vb, Some(Metric::Ttft), Better::Lower, opts, &mut rng);
        let itl_p50 = diff_metric(va, vb, Some(Metric::Itl), Better::Lower, opts, &mut rng);
        let mut extra =
            |m: Metric, better: Better| diff_metric(va, vb, Some(m), better, opts, &mut extra_rng);
        let per_user = extra(Metric::TpsPerUser, Better::Higher);
        let ttst = extra(Metric::Ttst, Better::Lower);
        let e2e = extra(Metric::Latency, Better::Lower);
        let gap_p99 =
            |c: Option<&CellResult>| ok(c).and_then(|c| c.itl_gaps.as_ref().map(|g| g.p99));
        let metrics = vec![
            (CompareMetric::Tps, tps.clone()),
            (CompareMetric::PerUser, per_user),
            (CompareMetric::Ttft, ttft_p50.clone()),
            (CompareMetric::Ttst, ttst),
            (CompareMetric::Itl, itl_p50.clone()),
            (
                CompareMetric::ItlGapP99,
                one_value(gap_p99(va), gap_p99(vb)),
            ),
            (CompareMetric::E2e, e2e),
        ];
        cells.push(CellDiff {
            layer: id.to_string(),
            concurrency: c,
            context: x,
            status: (status_of(ca, show), status_of(cb, show)),
            tps,
            ttft_p50,
            itl_p50,
            metrics,
        });
    }
    // Prefill rows: one sample each, no interval.
    let mut pkeys: Vec<u64> = Vec::new();
    for r in [a.1, b.1] {
        for (_, n, _) in by_context(&r.prefill) {
            if let Some(n) = n {
                if !pkeys.contains(&n) {
                    pkeys.push(n);
                }
            }
        }
    }
    pkeys.sort_unstable();
    for x in pkeys {
        let row = |r: &Results| r.prefill.get(&x.to_string()).cloned();
        let (ra, rb) = (row(a.1), row(b.1));
        let v = |r: &Option<servebench_results::PrefillRow>| {
            r.as_ref()
                .filter(|r| prefill_ok(r))
                .and_then(|r| r.tok_per_sec)
        };
        let t = |r: &Option<servebench_results::PrefillRow>| {
            r.as_ref()
                .filter(|r| prefill_ok(r))
                .and_then(|r| r.ttft_seconds)
        };
        let mk = one_value;
        let st = |r: &Option<servebench_results::PrefillRow>| match r {
            None => "absent".to_string(),
            Some(r) => r.status.map(|s| s.as_str()).unwrap_or("ok").to_string(),
        };
        let (tps, ttft) = (mk(v(&ra), v(&rb)), mk(t(&ra), t(&rb)));
        cells.push(CellDiff {
            layer: "prefill".into(),
            concurrency: 1,
            context: x,
            status: (st(&ra), st(&rb)),
            metrics: vec![
                (CompareMetric::Prefill, tps.clone()),
                (CompareMetric::PrefillTtft, ttft.clone()),
            ],
            tps,
            ttft_p50: ttft,
            itl_p50: mk(None, None),
        });
    }
    let mut warnings = comparability_warnings(a.1, b.1);
    warnings.extend(crate::compare_rate::warnings(a.1, b.1));
    Comparison {
        a: a.0.to_string(),
        b: b.0.to_string(),
        cells,
        rates: crate::compare_rate::join(a.1, b.1),
        rate_searches: crate::compare_rate::search_lines(a.1, b.1),
        warnings,
    }
}

/// The difference of a metric with one value per cell or row (no samples, so no interval and
/// no verdict beyond `unknown`).
fn one_value(a: Option<f64>, b: Option<f64>) -> Diff {
    let pct = pct_of(a, b);
    Diff {
        a,
        b,
        pct,
        ci_pct: None,
        method: IntervalMethod::None,
        verdict: if pct.is_some() {
            Verdict::Unknown
        } else {
            Verdict::Missing
        },
    }
}

pub(crate) fn fmt_pct(p: Option<f64>) -> String {
    p.map(|p| format!("{p:+.1}%")).unwrap_or_else(|| "-".into())
}

fn fmt_ci(d: &Diff) -> String {
    match d.ci_pct {
        Some((lo, hi)) => format!("[{lo:+.1}, {hi:+.1}]%"),
        None => "no interval".into(),
    }
}

/// Table rows (as cells of text) shared by the text and Markdown forms.
fn rows(cmp: &Comparison) -> Vec<[String; 9]> {
    cmp.cells
        .iter()
        .map(|c| {
            let unit = |v: Option<f64>| {
                if c.layer == "prefill" {
                    v.map(|x| format!("{x:.0}")).unwrap_or_else(|| "-".into())
                } else {
                    fmt_tps(v)
                }
            };
            let verdict = if c.status.0 == "ok" && c.status.1 == "ok" {
                c.tps.verdict.as_str().to_string()
            } else {
                format!("not compared: A {}, B {}", c.status.0, c.status.1)
            };
            [
                c.layer.clone(),
                c.concurrency.to_string(),
                format_context(c.context),
                unit(c.tps.a),
                unit(c.tps.b),
                fmt_pct(c.tps.pct),
                fmt_ci(&c.tps),
                verdict,
                format!(
                    "TTFT p50 {}→{} ms {} ({}), ITL p50 {}→{} ms {} ({})",
                    fmt_ms(c.ttft_p50.a),
                    fmt_ms(c.ttft_p50.b),
                    fmt_pct(c.ttft_p50.pct),
                    c.ttft_p50.verdict.short(),
                    fmt_ms(c.itl_p50.a),
                    fmt_ms(c.itl_p50.b),
                    fmt_pct(c.itl_p50.pct),
                    c.itl_p50.verdict.short()
                ),
            ]
        })
        .collect()
}

const HEADERS: [&str; 9] = [
    "layer",
    "C",
    "ctx",
    "A tok/s",
    "B tok/s",
    "Δ",
    "95% interval",
    "verdict",
    "latency (A→B)",
];

/// The interval methods used in `cmp`, for the footnote.
fn methods_used(cmp: &[Comparison]) -> Vec<&'static str> {
    let mut v: Vec<&'static str> = cmp
        .iter()
        .flat_map(|c| c.cells.iter())
        .flat_map(|c| c.metrics.iter().map(|(_, d)| d.method))
        .map(IntervalMethod::as_str)
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

fn method_note(opts: &CompareOptions) -> String {
    format!(
        "Δ = (B − A) / A. 95% interval: \"request bootstrap\" = {} resamples of each cell's requests \
         (aggregate tok/s scaled by 1 / the mean per-token ITL of the requests; TTFT and ITL by their median); \
         \"spread estimate\" = normal approximation from the stored p50/p90 and request counts (no request samples in the file); \
         \"no interval\" = neither is available (prefill rows are one sample). One run per side: each interval is widened by \
         ±{n}% for the run-to-run noise a within-run interval cannot see. A difference is marked faster/SLOWER when it is at least \
         {n}% and its interval excludes 0; \"unclear\" when it is that large but the interval spans 0; \"needs repeats\" when A or B \
         flagged its machine as busy (client tick ≥ {busy} ms late). --fail-if-slower PCT counts a SLOWER cell whose whole interval is at or below -PCT; \
         METRIC=PCT does the same for one metric of the \"every metric\" table, where ITL per-gap p99 (one histogram per cell) and the prefill rows \
         (one sample) have no interval and count when their change is worse than PCT plus {n}%.",
        opts.resamples,
        n = crate::cells::fmt_num(opts.noise_pct),
        busy = BUSY_TICK_LAG_MS
    )
}

/// An aligned text table: every column padded to its widest cell but the last.
fn text_table<const N: usize>(out: &mut String, headers: &[&str; N], rows: &[[String; N]]) {
    let mut width = headers.map(|h| h.chars().count());
    for r in rows {
        for (i, s) in r.iter().enumerate() {
            width[i] = width[i].max(s.chars().count());
        }
    }
    let line = |cells: &[String]| {
        let mut s = String::from(" ");
        for (i, c) in cells.iter().enumerate() {
            if i + 1 < N {
                let pad = width[i].saturating_sub(c.chars().count());
                let _ = write!(s, " {c}{}", " ".repeat(pad));
            } else {
                let _ = write!(s, " {c}");
            }
        }
        s.trim_end().to_string()
    };
    let _ = writeln!(out, "{}", line(&headers.map(String::from)));
    for r in rows {
        let _ = writeln!(out, "{}", line(r));
    }
}

/// The comparisons as plain text.
pub fn render_text(cmps: &[Comparison], opts: &CompareOptions) -> String {
    let mut out = String::new();
    for cmp in cmps {
        let _ = writeln!(out, "A = {}\nB = {}", cmp.a, cmp.b);
        for w in &cmp.warnings {
            let _ = writeln!(out, "warning: not comparable: {w}");
        }
        if !cmp.cells.is_empty() || cmp.rates.is_empty() {
            text_table(&mut out, &HEADERS, &rows(cmp));
        }
        let per_metric = crate::compare_metrics::rows(cmp);
        if !per_metric.is_empty() {
            let _ = writeln!(out, "\nEvery metric (cells measured in both runs):");
            text_table(&mut out, &crate::compare_metrics::HEADERS, &per_metric);
        }
        if !cmp.rates.is_empty() {
            let _ = writeln!(out, "Open-loop request rate:");
            text_table(
                &mut out,
                &crate::compare_rate::HEADERS,
                &crate::compare_rate::rows(&cmp.rates),
            );
            for l in &cmp.rate_searches {
                let _ = writeln!(out, "{l}");
            }
            let _ = writeln!(out, "{}\n", crate::compare_rate::NOTE);
        }
        if cmp.cells.is_empty() && !cmp.rates.is_empty() {
            continue;
        }
        let slower = cmp
            .cells
            .iter()
            .filter(|c| c.tps.verdict == Verdict::Slower)
            .count();
        let faster = cmp
            .cells
            .iter()
            .filter(|c| c.tps.verdict == Verdict::Faster)
            .count();
        let _ = writeln!(
            out,
            "Summary: B is faster in {faster} cell(s), slower in {slower} cell(s) beyond the noise (aggregate tok/s).\n"
        );
    }
    if cmps.iter().any(|c| !c.cells.is_empty()) {
        let _ = writeln!(out, "{}", method_note(opts));
        let _ = writeln!(
            out,
            "Interval methods used: {}",
            methods_used(cmps).join(", ")
        );
    }
    out
}

/// The comparisons as Markdown.
pub fn render_markdown(cmps: &[Comparison], opts: &CompareOptions) -> String {
    let mut out = String::from("# servebench compare\n\n");
    for cmp in cmps {
        let _ = writeln!(
            out,
            "## A = `{}`, B = `{}`\n",
            cmp.a.replace('`', "'"),
            cmp.b.replace('`', "'")
        );
        for w in &cmp.warnings {
            let _ = writeln!(
                out,
                "- **Not comparable:** {}",
                crate::markdown::md_escape(w)
            );
        }
        if !cmp.warnings.is_empty() {
            out.push('\n');
        }
        if !cmp.cells.is_empty() || cmp.rates.is_empty() {
            let _ = writeln!(out, "| {} |", HEADERS.join(" | "));
            let _ = writeln!(out, "|---|---:|---|---:|---:|---:|---|---|---|");
            for r in rows(cmp) {
                let cells: Vec<String> = r.iter().map(|s| crate::markdown::md_escape(s)).collect();
                let _ = writeln!(out, "| {} |", cells.join(" | "));
            }
            out.push('\n');
        }
        let per_metric = crate::compare_metrics::rows(cmp);
        if !per_metric.is_empty() {
            let _ = writeln!(out, "### Every metric (cells measured in both runs)\n");
            let _ = writeln!(out, "| {} |", crate::compare_metrics::HEADERS.join(" | "));
            let _ = writeln!(out, "|---|---:|---|---|---:|---:|---:|---|---|");
            for r in per_metric {
                let cells: Vec<String> = r.iter().map(|s| crate::markdown::md_escape(s)).collect();
                let _ = writeln!(out, "| {} |", cells.join(" | "));
            }
            out.push('\n');
        }
        if !cmp.rates.is_empty() {
            let _ = writeln!(out, "### Open-loop request rate\n");
            let _ = writeln!(out, "| {} |", crate::compare_rate::HEADERS.join(" | "));
            let _ = writeln!(out, "|---:|---:|---|---:|---:|---:|---:|---:|---|");
            for r in crate::compare_rate::rows(&cmp.rates) {
                let cells: Vec<String> = r.iter().map(|s| crate::markdown::md_escape(s)).collect();
                let _ = writeln!(out, "| {} |", cells.join(" | "));
            }
            out.push('\n');
            for l in &cmp.rate_searches {
                let _ = writeln!(out, "- {}", crate::markdown::md_escape(l));
            }
            let _ = writeln!(out, "\n{}\n", crate::compare_rate::NOTE);
        }
    }
    if cmps.iter().any(|c| !c.cells.is_empty()) {
        let _ = writeln!(out, "{}\n", method_note(opts));
        let _ = writeln!(
            out,
            "Interval methods used: {}.",
            methods_used(cmps).join(", ")
        );
    }
    out
}

/// The comparisons as one self-contained HTML page with overlaid plots (one line per file).
///
/// # Errors
/// A drawing error from the plotting library.
pub fn render_html(
    runs: &[(&str, &Results)],
    cmps: &[Comparison],
    opts: &CompareOptions,
) -> anyhow::Result<String> {
    let mut out = head("servebench compare");
    out.push_str("<h1>servebench compare</h1>\n<ul>");
    for (i, (name, r)) in runs.iter().enumerate() {
        let _ = write!(
            out,
            "<li><b>{}</b> = {} — {} on {}</li>",
            if i == 0 {
                "A (baseline)".to_string()
            } else {
                format!("run {}", i + 1)
            },
            esc(name),
            esc(&r.metadata.model),
            esc(&crate::cells::engine_label(r))
        );
    }
    out.push_str("</ul>\n");
    for cmp in cmps {
        let _ = writeln!(out, "<h2>A = {} vs B = {}</h2>", esc(&cmp.a), esc(&cmp.b));
        for w in &cmp.warnings {
            let _ = writeln!(
                out,
                "<p class=\"warn\"><b>Not comparable:</b> {}</p>",
                esc(w)
            );
        }
        if !cmp.cells.is_empty() || cmp.rates.is_empty() {
            matrix_table_html(&mut out, cmp);
        }
        metrics_table_html(&mut out, cmp);
        if !cmp.rates.is_empty() {
            rate_table_html(&mut out, cmp);
        }
    }
    matrix_plots_html(&mut out, runs)?;
    if cmps.iter().any(|c| !c.cells.is_empty()) {
        let _ = writeln!(
            out,
            "<h2>Method</h2><p class=\"note\">{}</p>",
            esc(&method_note(opts))
        );
        let _ = writeln!(
            out,
            "<p class=\"note\">Interval methods used: {}.</p>",
            esc(&methods_used(cmps).join(", "))
        );
    }
    out.push_str("</body>\n</html>\n");
    Ok(out)
}

fn matrix_table_html(out: &mut String, cmp: &Comparison) {
    out.push_str("<table><tr>");
    for h in HEADERS {
        let _ = write!(out, "<th>{}</th>", esc(h));
    }
    out.push_str("</tr>\n");
    for (r, c) in rows(cmp).iter().zip(&cmp.cells) {
        let style = match c.tps.verdict {
            Verdict::Slower => " style=\"background:#f8d7da\"",
            Verdict::Faster => " style=\"background:#d4edda\"",
            _ => "",
        };
        let _ = write!(out, "<tr{style}>");
        for (i, s) in r.iter().enumerate() {
            let class = if (1..=6).contains(&i) {
                " class=\"num\""
            } else {
                ""
            };
            let _ = write!(out, "<td{class}>{}</td>", esc(s));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
}

fn metrics_table_html(out: &mut String, cmp: &Comparison) {
    let rows = crate::compare_metrics::rows(cmp);
    if rows.is_empty() {
        return;
    }
    out.push_str("<h3>Every metric (cells measured in both runs)</h3>\n<table><tr>");
    for h in crate::compare_metrics::HEADERS {
        let _ = write!(out, "<th>{}</th>", esc(h));
    }
    out.push_str("</tr>\n");
    for r in rows {
        let style = match r[8].as_str() {
            "SLOWER" => " style=\"background:#f8d7da\"",
            "faster" => " style=\"background:#d4edda\"",
            _ => "",
        };
        let _ = write!(out, "<tr{style}>");
        for (i, s) in r.iter().enumerate() {
            let class = if (4..=7).contains(&i) || i == 1 {
                " class=\"num\""
            } else {
                ""
            };
            let _ = write!(out, "<td{class}>{}</td>", esc(s));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
}

fn rate_table_html(out: &mut String, cmp: &Comparison) {
    out.push_str("<h3>Open-loop request rate</h3>\n<table><tr>");
    for h in crate::compare_rate::HEADERS {
        let _ = write!(out, "<th>{}</th>", esc(h));
    }
    out.push_str("</tr>\n");
    for r in crate::compare_rate::rows(&cmp.rates) {
        out.push_str("<tr>");
        for (i, s) in r.iter().enumerate() {
            let class = if i == 2 || i == 8 {
                ""
            } else {
                " class=\"num\""
            };
            let _ = write!(out, "<td{class}>{}</td>", esc(s));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
    for l in &cmp.rate_searches {
        let _ = writeln!(out, "<p>{}</p>", esc(l));
    }
    let _ = writeln!(
        out,
        "<p class=\"note\">{}</p>",
        esc(crate::compare_rate::NOTE)
    );
}

/// Overlaid plots: per layer and context, one line per file.
fn matrix_plots_html(out: &mut String, runs: &[(&str, &Results)]) -> anyhow::Result<()> {
    let base = runs.first().map(|r| r.1);
    if let Some(base) = base {
        for l in layers(base) {
            let (_, xs) = crate::cells::axes(l.cells);
            // (title, y-axis, lines) per chart.
            let mut owned: Vec<(String, &str, Vec<Series>)> = Vec::new();
            for &x in &xs {
                let mut tps = Vec::new();
                let mut ttft = Vec::new();
                let mut itl = Vec::new();
                for (i, (name, r)) in runs.iter().enumerate() {
                    let Some(layer) = layers(r).into_iter().find(|m| m.id == l.id) else {
                        continue;
                    };
                    let mut cs: Vec<&CellResult> = layer
                        .cells
                        .iter()
                        .filter(|c| {
                            c.context_tokens == x
                                && crate::cells::shown(c, r.metadata.show_capacity_limited_values)
                        })
                        .collect();
                    cs.sort_by_key(|c| c.concurrency);
                    let mk = |f: &dyn Fn(&CellResult) -> Option<f64>| Series {
                        name: name.to_string(),
                        points: cs
                            .iter()
                            .filter_map(|c| f(c).map(|v| (c.concurrency as f64, v)))
                            .collect(),
                        point_labels: None,
                        color: i,
                        dashed: i > 0,
                    };
                    tps.push(mk(&|c| c.aggregate_tps));
                    ttft.push(mk(&|c| c.ttft_p50.map(|s| s * 1e3)));
                    itl.push(mk(&|c| c.inter_token_latency_p50.map(|s| s * 1e3)));
                }
                let ctx = format_context(x);
                owned.push((
                    format!("{}: aggregate tok/s, ctx {ctx}", l.id),
                    "aggregate tok/s",
                    tps,
                ));
                owned.push((
                    format!("{}: TTFT p50, ctx {ctx}", l.id),
                    "TTFT p50, ms",
                    ttft,
                ));
                owned.push((format!("{}: ITL p50, ctx {ctx}", l.id), "ITL p50, ms", itl));
            }
            let charts: Vec<Chart<'_>> = owned
                .iter()
                .map(|(title, y_desc, series)| Chart {
                    title,
                    x_desc: "concurrency C",
                    y_desc,
                    x_scale: XScale::Log2,
                    series: series.clone(),
                })
                .collect();
            if !charts.is_empty() {
                let _ = writeln!(
                    out,
                    "<h2>{} (solid: A, dashed: the others)</h2>",
                    esc(l.title)
                );
                plots(out, &charts)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod lost_tests {
    use super::lost;

    /// Break-it round 6: `compare A B --fail-if-slower 5` passed with B's cell invalid or absent.
    #[test]
    fn a_cell_the_new_run_did_not_measure_is_lost() {
        let st = |a: &str, b: &str| (a.to_string(), b.to_string());
        for b in [
            "invalid",
            "error",
            "absent",
            "skipped_user",
            "skipped_context",
        ] {
            assert!(lost(&st("ok", b)), "{b}");
            assert!(lost(&st("capacity-limited", b)), "{b}");
        }
        assert!(!lost(&st("ok", "ok")));
        assert!(!lost(&st("ok", "capacity-limited")));
        assert!(!lost(&st("invalid", "absent")));
        assert!(!lost(&st("absent", "ok")));
    }
}
