//! `--rate-search`: the highest offered rate whose row still meets the SLOs.
//!
//! **Stopping rule** (assumes "meets the SLOs" is monotone in the rate — true for a queueing
//! server up to noise; each probe is one full row):
//! 1. *Bracket.* Probe `start`. If it passes, double until a rate fails (bracket =
//!    [last pass, first fail]) or the next rate would exceed `max_rate` (stop `max_rate`: the
//!    best is the last pass). If `start` fails, halve until a rate passes, never below
//!    `min_rate` (probed itself when halving would skip past it; stop `min_rate`: no passing
//!    rate found). The CLI sets `min_rate` to
//!    max(start / 1024, 10 / row duration): a slower row would expect under 10 arrivals and
//!    say nothing about a percentile.
//! 2. *Bisect* the bracket `[lo, hi]` at its midpoint until `hi − lo ≤ resolution × lo`
//!    (stop `resolution`; default 5 %, `--rate-search-resolution`).
//! 3. Never more than `max_probes` probes in all (stop `max_probes`); an interrupted probe ends
//!    the search (stop `interrupted`).
//!
//! The answer is the highest probed rate that passed (`lo`); with the resolution reached, the
//! true threshold lies in `[lo, lo × (1 + resolution)]`.
//!
//! The search is a state machine ([`RateSearcher`]: `next_rate`, then `record`), so the async
//! layer drives it probe by probe; [`search`] runs it over a synchronous probe closure.

use servebench_results::{RateProbe, RateSearch, SearchStop};

/// Lowest rate tried below a failing start by default: `start / 2^10`.
pub const MIN_RATE_DIVISOR: f64 = 1024.0;

/// The search's settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SearchSettings {
    /// First rate probed, req/s (> 0).
    pub start: f64,
    /// Relative bracket width at which bisection stops (> 0; 0.05 = 5 %).
    pub resolution: f64,
    /// Most probes (≥ 1).
    pub max_probes: u64,
    /// Highest rate ever probed, req/s (≥ start).
    pub max_rate: f64,
    /// Lowest rate ever probed, req/s (> 0, ≤ start); halving below it stops the search
    /// (`min_rate`).
    pub min_rate: f64,
}

impl Default for SearchSettings {
    fn default() -> Self {
        SearchSettings {
            start: 1.0,
            resolution: 0.05,
            max_probes: 20,
            max_rate: 100_000.0,
            min_rate: 1.0 / MIN_RATE_DIVISOR,
        }
    }
}

impl SearchSettings {
    /// Checks the settings; one-line error naming the bad value.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.start.is_finite() && self.start > 0.0) {
            return Err(format!(
                "search start rate must be > 0 (got {})",
                self.start
            ));
        }
        if !(self.resolution.is_finite() && self.resolution > 0.0 && self.resolution < 1.0) {
            return Err(format!(
                "search resolution must be in (0, 1) (got {})",
                self.resolution
            ));
        }
        if self.max_probes == 0 {
            return Err("search needs at least one probe".into());
        }
        if !(self.min_rate.is_finite() && self.min_rate > 0.0 && self.min_rate <= self.start) {
            return Err(format!(
                "search min rate must be in (0, start rate] (got {})",
                self.min_rate
            ));
        }
        if !(self.max_rate.is_finite() && self.max_rate >= self.start) {
            return Err(format!(
                "search max rate must be ≥ the start rate (got {})",
                self.max_rate
            ));
        }
        Ok(())
    }

    /// The rule in words, as written to `rate_search.rule`.
    pub fn rule(&self) -> String {
        format!(
            "probe {} req/s; double while the SLOs are met (up to {} req/s), or halve while \
             missed (down to {} req/s); then bisect until (high - low) <= {} x low; at most {} \
             probes; best = highest passing rate",
            self.start, self.max_rate, self.min_rate, self.resolution, self.max_probes
        )
    }
}

/// The search state: probes so far and the bracket.
#[derive(Clone, Debug)]
pub struct RateSearcher {
    settings: SearchSettings,
    probes: Vec<RateProbe>,
    /// Highest passing rate.
    lo: Option<f64>,
    /// Lowest failing rate.
    hi: Option<f64>,
    stopped: Option<SearchStop>,
}

impl RateSearcher {
    /// A new search (settings assumed valid, see [`SearchSettings::validate`]).
    pub fn new(settings: SearchSettings) -> Self {
        RateSearcher {
            settings,
            probes: Vec::new(),
            lo: None,
            hi: None,
            stopped: None,
        }
    }

    /// The next rate to probe, or `None` when the search has stopped.
    pub fn next_rate(&mut self) -> Option<f64> {
        if self.stopped.is_some() {
            return None;
        }
        if self.probes.len() as u64 >= self.settings.max_probes {
            self.stopped = Some(SearchStop::MaxProbes);
            return None;
        }
        let s = self.settings;
        let next = match (self.lo, self.hi) {
            (None, None) => s.start,
            (Some(lo), None) => {
                let r = lo * 2.0;
                if r > s.max_rate {
                    if lo < s.max_rate {
                        s.max_rate
                    } else {
                        self.stopped = Some(SearchStop::MaxRate);
                        return None;
                    }
                } else {
                    r
                }
            }
            (None, Some(hi)) => {
                let r = hi / 2.0;
                if r < s.min_rate {
                    // The floor itself is the last probe when halving would skip past it.
                    if hi > s.min_rate && !self.probes.iter().any(|p| p.rate == s.min_rate) {
                        return Some(s.min_rate);
                    }
                    self.stopped = Some(SearchStop::MinRate);
                    return None;
                }
                r
            }
            (Some(lo), Some(hi)) => {
                if hi - lo <= s.resolution * lo {
                    self.stopped = Some(SearchStop::Resolution);
                    return None;
                }
                (lo + hi) / 2.0
            }
        };
        Some(next)
    }

    /// Records the outcome of probing `rate`.
    pub fn record(&mut self, rate: f64, met: bool) {
        self.probes.push(RateProbe { rate, met });
        if met {
            self.lo = Some(self.lo.map_or(rate, |l| l.max(rate)));
        } else {
            self.hi = Some(self.hi.map_or(rate, |h| h.min(rate)));
        }
    }

    /// Ends the search early (a probe was interrupted).
    pub fn interrupt(&mut self) {
        self.stopped = Some(SearchStop::Interrupted);
    }

    /// The outcome so far, for `rate_search` (`context` = the rows' context, tokens).
    pub fn outcome(&self, context: u64) -> RateSearch {
        RateSearch {
            context_tokens: context,
            start_rate: self.settings.start,
            resolution: self.settings.resolution,
            max_probes: self.settings.max_probes,
            rule: self.settings.rule(),
            best_rate: self.lo,
            lowest_failing_rate: self.hi,
            stopped: self.stopped.unwrap_or(SearchStop::Interrupted),
            probes: self.probes.clone(),
        }
    }
}

/// Runs a whole search over `probe` (rate → met the SLOs, or `None` when interrupted).
pub fn search(settings: SearchSettings, mut probe: impl FnMut(f64) -> Option<bool>) -> RateSearch {
    let mut s = RateSearcher::new(settings);
    while let Some(rate) = s.next_rate() {
        match probe(rate) {
            Some(met) => s.record(rate, met),
            None => {
                s.interrupt();
                break;
            }
        }
    }
    s.outcome(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn threshold(t: f64) -> impl FnMut(f64) -> Option<bool> {
        move |r| Some(r <= t)
    }

    #[test]
    fn brackets_by_doubling_then_bisects_to_the_resolution() {
        let st = SearchSettings {
            start: 1.0,
            resolution: 0.05,
            max_probes: 50,
            max_rate: 1e6,
            min_rate: 1.0 / MIN_RATE_DIVISOR,
        };
        let out = search(st, threshold(37.0));
        assert_eq!(out.stopped, SearchStop::Resolution);
        let rates: Vec<f64> = out.probes.iter().map(|p| p.rate).collect();
        assert_eq!(&rates[..7], &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0]);
        assert_eq!(
            rates[7], 48.0,
            "first bisection at the midpoint of [32, 64]"
        );
        let best = out.best_rate.unwrap();
        let hi = out.lowest_failing_rate.unwrap();
        assert!(best <= 37.0 && 37.0 < hi, "[{best}, {hi}]");
        assert!(hi - best <= 0.05 * best, "[{best}, {hi}]");
        // Every probe's verdict is the probe's truth.
        assert!(out.probes.iter().all(|p| p.met == (p.rate <= 37.0)));
    }

    #[test]
    fn a_failing_start_halves_until_a_rate_passes() {
        let st = SearchSettings {
            start: 100.0,
            ..Default::default()
        };
        let out = search(st, threshold(9.0));
        let rates: Vec<f64> = out.probes.iter().map(|p| p.rate).collect();
        assert_eq!(&rates[..5], &[100.0, 50.0, 25.0, 12.5, 6.25]);
        assert_eq!(out.stopped, SearchStop::Resolution);
        let best = out.best_rate.unwrap();
        assert!(best <= 9.0 && 9.0 - best <= 0.05 * best * 1.0001, "{best}");
    }

    #[test]
    fn nothing_passes_stops_at_the_floor() {
        let out = search(SearchSettings::default(), |_| Some(false));
        assert_eq!(out.stopped, SearchStop::MinRate);
        assert_eq!(out.best_rate, None);
        assert_eq!(out.probes.len(), 11, "1, 1/2, …, 1/1024");
        // A floor from the row length (the CLI's 10 / duration: 10 s rows → 1 req/s).
        let st = SearchSettings {
            start: 8.0,
            min_rate: 1.0,
            ..Default::default()
        };
        let out = search(st, |_| Some(false));
        let rates: Vec<f64> = out.probes.iter().map(|p| p.rate).collect();
        assert_eq!(rates, [8.0, 4.0, 2.0, 1.0], "the floor itself is probed");
        assert_eq!(out.stopped, SearchStop::MinRate);
        assert!(out.rule.contains("down to 1 req/s"), "{}", out.rule);
        // Halving would skip past the floor (7 → 3.5 < 5): the floor is probed last.
        let st = SearchSettings {
            start: 7.0,
            min_rate: 5.0,
            ..Default::default()
        };
        let out = search(st, |_| Some(false));
        let rates: Vec<f64> = out.probes.iter().map(|p| p.rate).collect();
        assert_eq!(rates, [7.0, 5.0]);
        assert_eq!(out.stopped, SearchStop::MinRate);
        // A passing floor brackets the threshold, and bisection goes on.
        let out = search(st, |r| Some(r <= 5.0));
        assert_eq!(out.best_rate, Some(5.0));
        assert_eq!(out.stopped, SearchStop::Resolution);
        assert!(out.lowest_failing_rate.unwrap() <= 5.0 * 1.05, "{out:?}");
    }

    #[test]
    fn everything_passes_stops_at_the_max_rate() {
        let st = SearchSettings {
            start: 1.0,
            max_rate: 100.0,
            max_probes: 50,
            ..Default::default()
        };
        let out = search(st, |_| Some(true));
        assert_eq!(out.stopped, SearchStop::MaxRate);
        assert_eq!(out.best_rate, Some(100.0));
        assert_eq!(
            out.probes.last().unwrap().rate,
            100.0,
            "the cap itself is probed"
        );
    }

    #[test]
    fn probe_budget_and_interruption_end_the_search() {
        let st = SearchSettings {
            max_probes: 4,
            ..Default::default()
        };
        let out = search(st, threshold(1000.0));
        assert_eq!((out.stopped, out.probes.len()), (SearchStop::MaxProbes, 4));
        let mut n = 0;
        let out = search(SearchSettings::default(), |r| {
            n += 1;
            (n < 3).then_some(r < 100.0)
        });
        assert_eq!(
            (out.stopped, out.probes.len()),
            (SearchStop::Interrupted, 2)
        );
    }

    #[test]
    fn settings_are_validated() {
        assert!(SearchSettings::default().validate().is_ok());
        for bad in [
            SearchSettings {
                start: 0.0,
                ..Default::default()
            },
            SearchSettings {
                resolution: 0.0,
                ..Default::default()
            },
            SearchSettings {
                resolution: 1.5,
                ..Default::default()
            },
            SearchSettings {
                max_probes: 0,
                ..Default::default()
            },
            SearchSettings {
                min_rate: 0.0,
                ..Default::default()
            },
            SearchSettings {
                min_rate: 2.0,
                ..Default::default()
            },
            SearchSettings {
                max_rate: 0.5,
                ..Default::default()
            },
        ] {
            let e = bad.validate().unwrap_err();
            assert!(!e.contains('\n'), "{e}");
        }
    }
}
