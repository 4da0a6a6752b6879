//! Arrival schedules of the open-loop mode: when each request is **intended** to be sent.
//!
//! A schedule is a sorted list of send offsets from the row's start. Every process sends its
//! first request at offset 0 and then adds independent inter-arrival gaps (as `vllm bench serve`
//! does: it sends, then sleeps the drawn interval):
//!
//! * `constant`: every gap is `1/λ`;
//! * `poisson`: gaps are exponential with mean `1/λ` (a Poisson process at rate λ), drawn by
//!   inversion, `−ln(1 − U) / λ`;
//! * `gamma`: gaps are Gamma(shape K, scale `1/(λK)`), mean `1/λ`, coefficient of variation
//!   `1/√K` (`--burstiness K`, the definition of `vllm bench serve --burstiness`); K = 1 is
//!   Poisson, K < 1 burstier, K > 1 more regular. Drawn with Marsaglia & Tsang (2000), "A simple
//!   method for generating gamma variables", with the `U^(1/K)` boost for K < 1.
//!
//! Draws come from `rand`'s `StdRng` seeded with the row's seed, so a seed gives the same
//! schedule with the same build.

use std::time::Duration;

use rand::{rngs::StdRng, Rng, SeedableRng};

/// The arrival process (`--arrival`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Arrival {
    /// Evenly spaced arrivals, `1/λ` apart.
    Constant,
    /// Exponential inter-arrival gaps (Poisson process).
    Poisson,
    /// Gamma inter-arrival gaps with shape K (`--burstiness`) and mean `1/λ`.
    Gamma {
        /// Shape K > 0.
        shape: f64,
    },
}

impl Arrival {
    /// Name as written to the results (`constant`, `poisson`, `gamma`).
    pub fn name(self) -> &'static str {
        self.process().as_str()
    }

    /// The results' arrival kind.
    pub fn process(self) -> servebench_results::ArrivalProcess {
        use servebench_results::ArrivalProcess as P;
        match self {
            Arrival::Constant => P::Constant,
            Arrival::Poisson => P::Poisson,
            Arrival::Gamma { .. } => P::Gamma,
        }
    }

    /// Gamma shape K (Poisson reports 1, constant `None`).
    pub fn burstiness(self) -> Option<f64> {
        match self {
            Arrival::Constant => None,
            Arrival::Poisson => Some(1.0),
            Arrival::Gamma { shape } => Some(shape),
        }
    }

    /// From the CLI's `--arrival` name and `--burstiness` (`None` = 1). `gamma` with K = 1 stays
    /// gamma (same distribution as Poisson). Errors are one line, naming the bad value.
    pub fn parse(name: &str, burstiness: Option<f64>) -> Result<Arrival, String> {
        if let Some(k) = burstiness {
            if !(k.is_finite() && k > 0.0) {
                return Err(format!("burstiness must be a number > 0 (got {k})"));
            }
        }
        match name {
            "constant" | "poisson" if burstiness.is_some_and(|k| k != 1.0) => Err(format!(
                "burstiness applies to the gamma arrival process only (got arrival {name})"
            )),
            "constant" => Ok(Arrival::Constant),
            "poisson" => Ok(Arrival::Poisson),
            "gamma" => Ok(Arrival::Gamma {
                shape: burstiness.unwrap_or(1.0),
            }),
            other => Err(format!(
                "unknown arrival process {other:?} (expected constant, poisson or gamma)"
            )),
        }
    }
}

/// How long a schedule runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Span {
    /// Every arrival with offset `< d`.
    Duration(Duration),
    /// Exactly this many arrivals.
    Count(u64),
}

/// Most arrivals one schedule may hold (guards against `--request-rate 1e9 --duration 1e5`).
pub const MAX_ARRIVALS: u64 = 10_000_000;

/// The intended send offsets of one row: sorted, the first at 0. `rate` is λ in req/s (> 0,
/// finite). Empty for `Span::Count(0)` or a zero duration. Errors (one line) for a bad rate or a
/// schedule longer than [`MAX_ARRIVALS`].
pub fn schedule(
    arrival: Arrival,
    rate: f64,
    span: Span,
    seed: u64,
) -> Result<Vec<Duration>, String> {
    if !(rate.is_finite() && rate > 0.0) {
        return Err(format!("request rate must be a number > 0 (got {rate})"));
    }
    if let Arrival::Gamma { shape } = arrival {
        if !(shape.is_finite() && shape > 0.0) {
            return Err(format!("burstiness must be a number > 0 (got {shape})"));
        }
    }
    let expected = match span {
        Span::Count(n) => n as f64,
        Span::Duration(d) => d.as_secs_f64() * rate,
    };
    if expected > MAX_ARRIVALS as f64 {
        return Err(format!(
            "{expected:.0} arrivals at {rate} req/s is more than {MAX_ARRIVALS} per row"
        ));
    }
    let mut rng = StdRng::seed_from_u64(seed);
    let mut out = Vec::with_capacity(expected.ceil() as usize + 16);
    let mut t = 0.0f64;
    let mut i = 0u64;
    loop {
        match span {
            Span::Count(n) if i >= n => break,
            Span::Duration(d) if t >= d.as_secs_f64() => break,
            _ => {}
        }
        if out.len() as u64 >= MAX_ARRIVALS {
            return Err(format!("more than {MAX_ARRIVALS} arrivals in one row"));
        }
        out.push(Duration::from_secs_f64(t));
        i += 1;
        t = match arrival {
            // Exactly i/λ (no accumulated rounding: 100 req/s for 5 s is 500 arrivals).
            Arrival::Constant => i as f64 / rate,
            _ => t + gap(arrival, rate, &mut rng),
        };
    }
    Ok(out)
}

/// One inter-arrival gap, s.
fn gap(arrival: Arrival, rate: f64, rng: &mut StdRng) -> f64 {
    match arrival {
        Arrival::Constant => 1.0 / rate, // not used by `schedule` (it takes i/λ)
        Arrival::Poisson => exponential(rng) / rate,
        Arrival::Gamma { shape } => gamma(shape, rng) / (rate * shape),
    }
}

/// Exp(1) by inversion; `U ∈ [0, 1)` so `1 − U ∈ (0, 1]` and the log is finite.
fn exponential(rng: &mut StdRng) -> f64 {
    let u: f64 = rng.gen();
    -(1.0 - u).ln()
}

/// Standard normal (Box–Muller, one of the pair).
fn normal(rng: &mut StdRng) -> f64 {
    let u1: f64 = 1.0 - rng.gen::<f64>(); // (0, 1]
    let u2: f64 = rng.gen();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// Gamma(shape, scale 1), Marsaglia & Tsang; shape < 1 via `Gamma(shape + 1) · U^(1/shape)`.
fn gamma(shape: f64, rng: &mut StdRng) -> f64 {
    if shape < 1.0 {
        let u: f64 = 1.0 - rng.gen::<f64>();
        return gamma(shape + 1.0, rng) * u.powf(1.0 / shape);
    }
    let d = shape - 1.0 / 3.0;
    let c = 1.0 / (9.0 * d).sqrt();
    loop {
        let x = normal(rng);
        let v = 1.0 + c * x;
        if v <= 0.0 {
            continue;
        }
        let v = v * v * v;
        let u: f64 = 1.0 - rng.gen::<f64>();
        if u.ln() < 0.5 * x * x + d - d * v + d * v.ln() {
            return d * v;
        }
    }
}

/// One-sample Kolmogorov–Smirnov statistic `D = sup |F_n(x) − F(x)|` of `values` against the
/// continuous CDF `cdf`: over the sorted sample, `max_i max(i/n − F(x_i), F(x_i) − (i−1)/n)`.
/// 0 for an empty sample.
pub fn ks_statistic(values: &[f64], cdf: impl Fn(f64) -> f64) -> f64 {
    let mut v: Vec<f64> = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len() as f64;
    let mut d = 0.0f64;
    for (i, &x) in v.iter().enumerate() {
        let f = cdf(x);
        d = d.max((i + 1) as f64 / n - f).max(f - i as f64 / n);
    }
    d
}

/// Asymptotic critical value of the one-sample KS statistic at significance α = 0.01:
/// `1.628 / √n` (Kolmogorov distribution, `c(0.01) = √(−ln(0.005)/2) ≈ 1.6276`; accurate for
/// n ≳ 35).
pub fn ks_critical_001(n: usize) -> f64 {
    (-(0.005f64).ln() / 2.0).sqrt() / (n as f64).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gaps(s: &[Duration]) -> Vec<f64> {
        s.windows(2).map(|w| (w[1] - w[0]).as_secs_f64()).collect()
    }

    fn mean(v: &[f64]) -> f64 {
        v.iter().sum::<f64>() / v.len() as f64
    }

    fn var(v: &[f64]) -> f64 {
        let m = mean(v);
        v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / v.len() as f64
    }

    #[test]
    fn constant_schedule_is_evenly_spaced_and_ends_before_the_duration() {
        let s = schedule(
            Arrival::Constant,
            4.0,
            Span::Duration(Duration::from_secs(2)),
            1,
        )
        .unwrap();
        let want: Vec<f64> = (0..8).map(|i| i as f64 * 0.25).collect();
        let got: Vec<f64> = s.iter().map(|d| d.as_secs_f64()).collect();
        assert_eq!(got.len(), 8, "{got:?}");
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() < 1e-9, "{got:?}");
        }
        let n = schedule(Arrival::Constant, 100.0, Span::Count(5), 1).unwrap();
        assert_eq!(n.len(), 5);
        let d = Span::Duration(Duration::from_secs(5));
        assert_eq!(schedule(Arrival::Constant, 100.0, d, 1).unwrap().len(), 500);
        assert!(schedule(Arrival::Poisson, 3.0, Span::Count(0), 1)
            .unwrap()
            .is_empty());
    }

    #[test]
    fn same_seed_same_schedule_other_seed_other_schedule() {
        let a = schedule(Arrival::Poisson, 10.0, Span::Count(100), 42).unwrap();
        let b = schedule(Arrival::Poisson, 10.0, Span::Count(100), 42).unwrap();
        let c = schedule(Arrival::Poisson, 10.0, Span::Count(100), 43).unwrap();
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert!(a.windows(2).all(|w| w[0] <= w[1]), "sorted");
        assert_eq!(a[0], Duration::ZERO);
    }

    /// Poisson inter-arrival gaps pass a one-sample KS test against Exp(λ) at α = 0.01, and a
    /// constant schedule (the wrong distribution) fails it — so the test can fail.
    #[test]
    fn poisson_gaps_pass_a_ks_test_against_the_exponential_cdf() {
        let rate = 50.0;
        let cdf = |x: f64| {
            if x <= 0.0 {
                0.0
            } else {
                1.0 - (-rate * x).exp()
            }
        };
        for seed in [1u64, 2, 3] {
            let g = gaps(&schedule(Arrival::Poisson, rate, Span::Count(5001), seed).unwrap());
            let d = ks_statistic(&g, cdf);
            let crit = ks_critical_001(g.len());
            assert!(d < crit, "seed {seed}: D = {d:.4} ≥ critical {crit:.4}");
        }
        // Gamma with K = 4 has the right mean but not an exponential shape: rejected.
        let g = gaps(&schedule(Arrival::Gamma { shape: 4.0 }, rate, Span::Count(5001), 1).unwrap());
        assert!(ks_statistic(&g, cdf) > ks_critical_001(g.len()));
    }

    #[test]
    fn ks_statistic_matches_a_hand_computed_case() {
        // Uniform(0,1) CDF, sample {0.1, 0.4, 0.7}: D = max(1/3−0.1, 0.1, 2/3−0.4, 0.4−1/3,
        // 1−0.7, 0.7−2/3) = 0.3.
        let d = ks_statistic(&[0.7, 0.1, 0.4], |x| x.clamp(0.0, 1.0));
        assert!((d - 0.3).abs() < 1e-12, "{d}");
        assert!((ks_critical_001(100) - 0.16276).abs() < 1e-4);
    }

    #[test]
    fn gamma_gaps_have_mean_one_over_rate_and_cv_one_over_sqrt_k() {
        let rate = 20.0;
        for k in [0.25, 0.5, 1.0, 2.0, 8.0] {
            let g =
                gaps(&schedule(Arrival::Gamma { shape: k }, rate, Span::Count(40_001), 9).unwrap());
            let m = mean(&g);
            let cv = var(&g).sqrt() / m;
            assert!((m * rate - 1.0).abs() < 0.03, "K={k}: mean {m}");
            let want_cv = 1.0 / k.sqrt();
            assert!(
                (cv / want_cv - 1.0).abs() < 0.05,
                "K={k}: cv {cv}, want {want_cv}"
            );
        }
    }

    #[test]
    fn duration_schedule_holds_about_rate_times_duration_arrivals() {
        let s = schedule(
            Arrival::Poisson,
            100.0,
            Span::Duration(Duration::from_secs(100)),
            5,
        )
        .unwrap();
        // 10,000 expected, std 100: within 4 σ.
        assert!((s.len() as f64 - 10_000.0).abs() < 400.0, "{}", s.len());
        assert!(s.last().unwrap().as_secs_f64() < 100.0);
    }

    #[test]
    fn bad_input_is_a_one_line_error() {
        for r in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let e = schedule(Arrival::Constant, r, Span::Count(3), 0).unwrap_err();
            assert!(e.contains("request rate") && !e.contains('\n'), "{e}");
        }
        assert!(schedule(Arrival::Gamma { shape: 0.0 }, 1.0, Span::Count(3), 0).is_err());
        assert!(schedule(
            Arrival::Constant,
            1e9,
            Span::Duration(Duration::from_secs(100)),
            0
        )
        .is_err());
        assert_eq!(
            Arrival::parse("gamma", Some(2.0)),
            Ok(Arrival::Gamma { shape: 2.0 })
        );
        assert_eq!(Arrival::parse("poisson", None), Ok(Arrival::Poisson));
        assert!(Arrival::parse("poisson", Some(2.0)).is_err());
        assert!(Arrival::parse("uniform", None)
            .unwrap_err()
            .contains("\"uniform\""));
        assert!(Arrival::parse("gamma", Some(-1.0)).is_err());
    }
}
