//! Flags of the open-loop request-rate mode (`servebench run --request-rate …`), see
//! `servebench_core::rate`.

use std::time::Duration;

use clap::Args;
use servebench_core::rate::arrival::Arrival;
use servebench_core::rate::search::SearchSettings;
use servebench_core::rate::{slo::parse_slos, RateConfig};

use crate::args::usage_bail;

/// Open-loop load: requests arrive at a rate, whatever the server does (instead of the
/// concurrency matrix). Each rate × context is a row of `rate_results`.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Open-loop request rate")]
pub struct RateArgs {
    /// Offered request rates λ, req/s, comma-separated (e.g. 5,10,20); each is a row sent for
    /// --duration seconds. Replaces the concurrency matrix.
    #[arg(long, value_name = "RATES", allow_hyphen_values = true)]
    pub request_rate: Option<String>,
    /// Arrival process: poisson (exponential gaps), constant (1/λ apart) or gamma (shape
    /// --burstiness, mean 1/λ). Seeded by --seed.
    #[arg(long, value_parser = ["poisson", "constant", "gamma"], default_value = "poisson")]
    pub arrival: String,
    /// Gamma shape K (needs --arrival gamma; 1 = Poisson, < 1 burstier, > 1 more regular).
    #[arg(long, value_name = "K", allow_negative_numbers = true)]
    pub burstiness: Option<f64>,
    /// Client-side cap on requests in flight; an arrival that finds it full waits (and keeps
    /// its intended send time).
    #[arg(long, value_name = "N")]
    pub max_concurrency: Option<u64>,
    /// SLOs, e.g. ttft_p99=500ms,itl_p99=50ms,e2e_p90=10s (metrics ttft, itl, tpot, e2e; any
    /// percentile pNN; units ms or s): each row gets goodput and attainment.
    #[arg(long, value_name = "SPEC")]
    pub slo: Option<String>,
    /// Find the highest rate meeting every --slo: double from --rate-search-start until a rate
    /// fails (or halve while it fails, never below 10 arrivals per --duration), then bisect to
    /// --rate-search-resolution. Every probed rate is a row.
    #[arg(long, requires = "slo")]
    pub rate_search: bool,
    /// First rate of --rate-search, req/s [default: 1]. Needs --rate-search.
    #[arg(long, allow_negative_numbers = true)]
    pub rate_search_start: Option<f64>,
    /// Relative resolution of --rate-search: stop when (high − low) ≤ resolution × low
    /// [default: 0.05]. Needs --rate-search.
    #[arg(long, allow_negative_numbers = true)]
    pub rate_search_resolution: Option<f64>,
    /// Most rows --rate-search may probe [default: 20]. Needs --rate-search.
    #[arg(long)]
    pub rate_search_max_probes: Option<u64>,
    /// Highest rate --rate-search probes, req/s [default: 10000]. Needs --rate-search.
    #[arg(long, allow_negative_numbers = true)]
    pub rate_search_max_rate: Option<f64>,
    /// After a row's schedule ends, wait this long for requests in flight before cutting them
    /// (they are counted as cut; arrivals never sent are counted as not sent), s [default: 60].
    /// Needs --request-rate or --rate-search.
    #[arg(long, allow_negative_numbers = true)]
    pub rate_drain_seconds: Option<f64>,
}

/// Defaults of the search and drain flags (documented in their help).
const SEARCH_START: f64 = 1.0;
const SEARCH_RESOLUTION: f64 = 0.05;
const SEARCH_MAX_PROBES: u64 = 20;
const SEARCH_MAX_RATE: f64 = 10_000.0;
const DRAIN_SECONDS: f64 = 60.0;

impl RateArgs {
    /// The open-loop settings, or `None` without --request-rate / --rate-search; `duration` is
    /// each row's length, s (it sets the search's lowest rate, [`search_min_rate`]). Bad values
    /// are usage errors (exit 2) with one line naming the flag.
    pub fn to_config(&self, duration: f64) -> anyhow::Result<Option<RateConfig>> {
        let open_loop_flag = self.burstiness.is_some()
            || self.max_concurrency.is_some()
            || self.slo.is_some()
            || self.rate_drain_seconds.is_some()
            || self.arrival != "poisson";
        let search_flag = self.rate_search_start.is_some()
            || self.rate_search_resolution.is_some()
            || self.rate_search_max_probes.is_some()
            || self.rate_search_max_rate.is_some();
        if search_flag && !self.rate_search {
            usage_bail!(
                "--rate-search-start, --rate-search-resolution, --rate-search-max-probes and --rate-search-max-rate need --rate-search"
            );
        }
        if self.request_rate.is_none() && !self.rate_search {
            if open_loop_flag {
                usage_bail!(
                    "--arrival, --burstiness, --max-concurrency, --slo and --rate-drain-seconds need --request-rate or --rate-search"
                );
            }
            return Ok(None);
        }
        if self.request_rate.is_some() && self.rate_search {
            usage_bail!(
                "--request-rate and --rate-search exclude each other (the search picks the rates)"
            );
        }
        let rates = match &self.request_rate {
            Some(s) => parse_rates(s)?,
            None => Vec::new(),
        };
        let arrival = match Arrival::parse(&self.arrival, self.burstiness) {
            Ok(a) => a,
            Err(e) => usage_bail!("--burstiness: {e}"),
        };
        let slos = match &self.slo {
            Some(s) => match parse_slos(s) {
                Ok(v) => v,
                Err(e) => usage_bail!("--slo: {e}"),
            },
            None => Vec::new(),
        };
        let drain = self.rate_drain_seconds.unwrap_or(DRAIN_SECONDS);
        if !(drain.is_finite() && (0.0..=86_400.0).contains(&drain)) {
            usage_bail!("--rate-drain-seconds must be between 0 and 86400 (got {drain})");
        }
        let start = self.rate_search_start.unwrap_or(SEARCH_START);
        let search = self.rate_search.then_some(SearchSettings {
            start,
            resolution: self.rate_search_resolution.unwrap_or(SEARCH_RESOLUTION),
            max_probes: self.rate_search_max_probes.unwrap_or(SEARCH_MAX_PROBES),
            max_rate: self.rate_search_max_rate.unwrap_or(SEARCH_MAX_RATE),
            min_rate: search_min_rate(start, duration),
        });
        let cfg = RateConfig {
            rates,
            arrival,
            max_concurrency: self.max_concurrency,
            slos,
            search,
            drain: Duration::from_secs_f64(drain),
        };
        if let Err(e) = cfg.validate() {
            usage_bail!("open-loop settings: {e}");
        }
        Ok(Some(cfg))
    }
}

/// A search row should expect at least this many arrivals: halving below that says nothing
/// about a percentile.
const SEARCH_MIN_ARRIVALS: f64 = 10.0;

/// The lowest rate `--rate-search` probes, req/s: max(start / 1024, 10 / duration), at most
/// `start` (a failing start is then the only probe below it). `duration` in s.
pub fn search_min_rate(start: f64, duration: f64) -> f64 {
    let floor = if duration.is_finite() && duration > 0.0 {
        SEARCH_MIN_ARRIVALS / duration
    } else {
        0.0
    };
    (start / servebench_core::rate::search::MIN_RATE_DIVISOR)
        .max(floor)
        .min(start)
}

/// The open-loop mode replaces the matrix: the matrix's own flags would be silently ignored, so
/// they are a usage error (with the flag to use instead). `duration` is each row's length, s
/// (--duration or its default): a rate whose row would hold more than
/// [`servebench_core::rate::arrival::MAX_ARRIVALS`] arrivals is a usage error too.
pub fn check_exclusive(run: &crate::args::RunArgs, duration: f64) -> anyhow::Result<()> {
    if run.concurrency.is_some() {
        usage_bail!(
            "--concurrency does not apply to --request-rate / --rate-search (the rate sets the load; cap requests in flight with --max-concurrency)"
        );
    }
    if run.request_count > 0 || run.run_burst || run.prefill_only {
        usage_bail!(
            "--request-count, --run-burst and --prefill-only cannot be combined with --request-rate / --rate-search"
        );
    }
    // A row's schedule is drawn in memory: refuse one that cannot be drawn before anything is
    // sent (the layer would otherwise fail each row after the warmup).
    if let Some(rates) = &run.rate.request_rate {
        let max = servebench_core::rate::arrival::MAX_ARRIVALS as f64;
        for r in parse_rates(rates)? {
            if r * duration > max {
                usage_bail!(
                    "--request-rate {r} for --duration {duration} s is {:.0} arrivals per row, more than {} (lower the rate or the duration)",
                    r * duration,
                    servebench_core::rate::arrival::MAX_ARRIVALS
                );
            }
        }
    }
    Ok(())
}

impl RateArgs {
    /// The flags as given, for `startup_diagnostics.args` (`null` without the mode).
    pub fn snapshot(&self) -> serde_json::Value {
        if self.request_rate.is_none() && !self.rate_search {
            return serde_json::Value::Null;
        }
        serde_json::json!({
            "request_rate": self.request_rate,
            "arrival": self.arrival,
            "burstiness": self.burstiness,
            "max_concurrency": self.max_concurrency,
            "slo": self.slo,
            "rate_search": self.rate_search,
            "rate_search_start": self.rate_search_start.unwrap_or(SEARCH_START),
            "rate_search_resolution": self.rate_search_resolution.unwrap_or(SEARCH_RESOLUTION),
            "rate_search_max_probes": self.rate_search_max_probes.unwrap_or(SEARCH_MAX_PROBES),
            "rate_search_max_rate": self.rate_search_max_rate.unwrap_or(SEARCH_MAX_RATE),
            "rate_drain_seconds": self.rate_drain_seconds.unwrap_or(DRAIN_SECONDS),
        })
    }
}

/// `5,10,20` → rates in req/s (each finite and > 0).
fn parse_rates(s: &str) -> anyhow::Result<Vec<f64>> {
    let mut out = Vec::new();
    for part in s.split(',') {
        let p = part.trim();
        match p.parse::<f64>() {
            Ok(r) if r.is_finite() && r > 0.0 => out.push(r),
            _ => usage_bail!("--request-rate: {p:?} is not a rate in req/s > 0 (e.g. 5,10,20)"),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        r: RateArgs,
    }

    fn cfg(args: &[&str]) -> anyhow::Result<Option<RateConfig>> {
        let mut v = vec!["t"];
        v.extend_from_slice(args);
        T::try_parse_from(v).unwrap().r.to_config(10.0)
    }

    #[test]
    fn flags_build_the_config() {
        assert_eq!(cfg(&[]).unwrap(), None);
        let c = cfg(&["--request-rate", "5, 10,20", "--slo", "ttft_p99=500ms"])
            .unwrap()
            .unwrap();
        assert_eq!(c.rates, vec![5.0, 10.0, 20.0]);
        assert_eq!(c.arrival, Arrival::Poisson);
        assert_eq!(c.slos.len(), 1);
        let c = cfg(&[
            "--rate-search",
            "--slo",
            "e2e_p90=2s",
            "--arrival",
            "gamma",
            "--burstiness",
            "0.5",
        ])
        .unwrap()
        .unwrap();
        assert!(c.search.is_some() && c.rates.is_empty());
        assert_eq!(c.arrival, Arrival::Gamma { shape: 0.5 });
        // 10 s rows: the search never halves below 1 req/s (10 arrivals a row).
        assert_eq!(c.search.unwrap().min_rate, 1.0);
    }

    #[test]
    fn the_search_floor_keeps_ten_arrivals_a_row() {
        assert_eq!(search_min_rate(1.0, 10.0), 1.0, "start itself is the floor");
        assert_eq!(search_min_rate(8.0, 10.0), 1.0);
        assert_eq!(search_min_rate(8.0, 100.0), 0.1);
        assert_eq!(
            search_min_rate(1024.0, 1e6),
            1.0,
            "start / 1024 when rows are long"
        );
        assert_eq!(search_min_rate(0.5, 10.0), 0.5, "never above the start");
    }

    #[test]
    fn bad_flags_are_one_line_usage_errors() {
        for args in [
            &["--request-rate", "5,x"][..],
            &["--request-rate", "0"],
            &["--request-rate", "-3"],
            &["--request-rate", "5", "--slo", "ttft_p99=5"],
            &["--request-rate", "5", "--burstiness", "2"],
            &[
                "--request-rate",
                "5",
                "--arrival",
                "gamma",
                "--burstiness",
                "0",
            ],
            &["--request-rate", "5", "--max-concurrency", "0"],
            &["--slo", "ttft_p99=5ms"],
            &[
                "--request-rate",
                "5",
                "--rate-search",
                "--slo",
                "ttft_p99=5ms",
            ],
            &[
                "--rate-search",
                "--slo",
                "ttft_p99=5ms",
                "--rate-search-resolution",
                "0",
            ],
        ] {
            let e = cfg(args).unwrap_err();
            assert!(
                e.downcast_ref::<crate::args::UsageError>().is_some(),
                "{args:?}: {e}"
            );
            assert!(!e.to_string().contains('\n'), "{args:?}: {e}");
        }
    }
}
