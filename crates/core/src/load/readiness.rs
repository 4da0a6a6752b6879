//! Readiness of a sustained cell as a pure, clock-injected state machine (seed spec §3.9, with
//! its bugs fixed; issue 8 for the fallbacks).
//!
//! The cell's monitor feeds one [`Observation`] per tick (the time, the client's counters, the
//! latest server sample) and gets a [`Decision`]. Rules:
//! * **client**: all C streams have produced a token;
//! * **server** (when the engine's metrics are used): in the latest fresh sample the queue is
//!   empty, tokens are being generated, and running ≥ C — or, for short generations, C requests
//!   completed with an empty queue ([`server_readiness`]);
//! * both must hold without a break for the stable window; a break restarts it;
//! * the timeout counts from `started` (the end of the scout, so a long prefill does not eat
//!   it); on timeout the window opens anyway and the failing condition is the reason;
//! * **fallback**: a sample without the running gauge, scrapes failing for longer than `stale`,
//!   or no scrape at all within `stale` give no server evidence: readiness uses the client's
//!   streams only, with a warning — it never waits out its timeout for lack of data;
//! * a timeout is evidence of a capacity limit only when its reason is (a server queue, fewer
//!   running than C, fewer than C producing streams: [`timeout_is_capacity_evidence`]).

use std::time::{Duration, Instant};

use crate::telemetry::{
    missing_evidence, server_readiness, timeout_is_capacity_evidence, ServerReadiness, ServerSample,
};

/// The rules of one cell.
#[derive(Clone, Debug, PartialEq)]
pub struct ReadinessRules {
    /// Streams (C).
    pub concurrency: u64,
    /// Readiness must hold this long.
    pub stable: Duration,
    /// Give up waiting this long after `started`.
    pub timeout: Duration,
    /// `max_tokens` of the decode requests (the short-flow rule applies at ≤ 512).
    pub max_tokens: u64,
    /// The server's metrics are sampled (a known engine with `/metrics`).
    pub server_metrics: bool,
    /// A sample older than this is stale (scrapes failing): no evidence.
    pub stale: Duration,
}

/// What the monitor saw at one tick.
#[derive(Clone, Copy, Debug)]
pub struct Observation<'a> {
    /// Now.
    pub now: Instant,
    /// Streams that have produced a token.
    pub producing: u64,
    /// Output tokens the client has received so far.
    pub live_tokens: u64,
    /// Requests completed so far.
    pub completed: u64,
    /// The sampler's latest successful sample.
    pub latest: Option<&'a ServerSample>,
}

/// The machine's answer to one observation.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// Not ready yet; `stable`: the conditions hold and the stable window is running.
    Waiting {
        /// Conditions hold now (the readiness phase, not ramp-up).
        stable: bool,
    },
    /// Ready: open the window.
    Ready {
        /// The cell's `ready_reason`.
        reason: String,
        /// A warning for the cell when readiness fell back to the client's streams.
        warning: Option<String>,
    },
    /// The timeout passed: open the window anyway, flag `warmup_timed_out`.
    TimedOut {
        /// The failing condition (`timeout_reason`).
        reason: String,
        /// The reason is evidence of a capacity limit.
        capacity_evidence: bool,
    },
}

/// Readiness state of one cell.
#[derive(Clone, Debug)]
pub struct Readiness {
    rules: ReadinessRules,
    started: Instant,
    stable_since: Option<Instant>,
    last_sample_at: Option<Instant>,
    server: Option<ServerReadiness>,
    /// Every scrape of the run had already failed for at least `stale` when the cell began.
    metrics_failing: bool,
}

impl Readiness {
    /// A machine whose timeout and staleness count from `started` (the end of the scout).
    pub fn new(rules: ReadinessRules, started: Instant) -> Self {
        Readiness {
            rules,
            started,
            stable_since: None,
            last_sample_at: None,
            server: None,
            metrics_failing: false,
        }
    }

    /// The same machine told that every `/metrics` scrape of the run has failed for at least
    /// `stale` already (`yes`; [`crate::telemetry::Telemetry::failing_for`]): without a sample
    /// it falls back to the client's streams at once instead of waiting `stale` for a first
    /// one; a sample that arrives later is judged as usual.
    pub fn metrics_known_failing(mut self, yes: bool) -> Self {
        self.metrics_failing = yes;
        self
    }

    /// Folds the server's latest sample into the server state.
    fn judge_server(&mut self, o: &Observation<'_>) {
        if !self.rules.server_metrics {
            return;
        }
        let mut since = o.now.saturating_duration_since(self.started);
        if self.metrics_failing {
            since = since.max(self.rules.stale);
        }
        match missing_evidence(o.latest, o.now, since, self.rules.stale) {
            None => {
                let smp = o.latest.expect("a judged sample");
                if self.last_sample_at != Some(smp.at) {
                    self.last_sample_at = Some(smp.at);
                    self.server = Some(server_readiness(
                        smp,
                        self.rules.concurrency,
                        o.live_tokens > 0,
                        self.rules.max_tokens,
                        o.completed,
                    ));
                }
            }
            // the first scrape is still on its way
            Some(why) if why.is_empty() => self.server = None,
            Some(why) => self.server = Some(ServerReadiness::missing(why)),
        }
    }

    /// One tick.
    pub fn observe(&mut self, o: Observation<'_>) -> Decision {
        let c = self.rules.concurrency;
        self.judge_server(&o);
        let active = o.producing;
        let client_ok = active >= c;
        let server_ok = match &self.server {
            None => !self.rules.server_metrics,
            Some(s) => s.permits(),
        };
        if client_ok && server_ok {
            let since = *self.stable_since.get_or_insert(o.now);
            if o.now.duration_since(since) >= self.rules.stable {
                let stable_s = self.rules.stable.as_secs_f64();
                let warning = self.server.as_ref().filter(|s| !s.evidence).map(|s| {
                    format!(
                        "server readiness unavailable ({}): readiness from the client's streams only",
                        s.missing
                    )
                });
                let reason = match &self.server {
                    Some(s) => format!(
                        "{}, active_streams={active}/{c}, stable={stable_s:.1}s",
                        s.reason
                    ),
                    None => format!(
                        "metrics_unavailable, active_streams={active}/{c}, stable={stable_s:.1}s"
                    ),
                };
                return Decision::Ready { reason, warning };
            }
        } else {
            self.stable_since = None;
        }
        if o.now.duration_since(self.started) >= self.rules.timeout {
            let reason = self.timeout_reason(active, client_ok);
            return Decision::TimedOut {
                capacity_evidence: timeout_is_capacity_evidence(&reason),
                reason,
            };
        }
        Decision::Waiting {
            stable: self.stable_since.is_some(),
        }
    }

    /// The first failing condition at the timeout.
    fn timeout_reason(&self, active: u64, client_ok: bool) -> String {
        let metrics = self.rules.server_metrics;
        match &self.server {
            _ if !metrics && active == 0 => "no_generation".into(),
            None if metrics => "metrics_unavailable".into(),
            Some(s) if s.evidence && !s.ready => s.failing.clone(),
            _ if !client_ok => format!("active_streams={active}/{}", self.rules.concurrency),
            _ if active == 0 => "no_generation".into(),
            _ => "not_stable".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STABLE: Duration = Duration::from_secs(3);
    const TIMEOUT: Duration = Duration::from_secs(60);
    const STALE: Duration = Duration::from_secs(5);

    fn rules(server_metrics: bool) -> ReadinessRules {
        ReadinessRules {
            concurrency: 4,
            stable: STABLE,
            timeout: TIMEOUT,
            max_tokens: 2048,
            server_metrics,
            stale: STALE,
        }
    }

    fn sample(at: Instant, running: Option<f64>, waiting: f64) -> ServerSample {
        ServerSample {
            at,
            running,
            waiting: Some(waiting),
            kv_usage: None,
            generation_tokens: None,
            spec_accept_rate: None,
            spec_accept_length: None,
        }
    }

    /// One tick of a table: seconds after the start, producing streams, live tokens, the
    /// latest sample (seconds after the start it arrived, running, waiting).
    type Smp = Option<(f64, Option<f64>, f64)>;
    type Tick = (f64, u64, u64, Smp);

    fn run(r: ReadinessRules, ticks: &[Tick]) -> Vec<Decision> {
        run_known(r, false, ticks)
    }

    /// [`run`] with the machine told whether `/metrics` was already failing.
    fn run_known(r: ReadinessRules, failing: bool, ticks: &[Tick]) -> Vec<Decision> {
        let t0 = Instant::now();
        let at = |s: f64| t0 + Duration::from_secs_f64(s);
        let mut m = Readiness::new(r, t0).metrics_known_failing(failing);
        ticks
            .iter()
            .map(|&(t, producing, live, smp)| {
                let s = smp.map(|(a, run, q)| sample(at(a), run, q));
                m.observe(Observation {
                    now: at(t),
                    producing,
                    live_tokens: live,
                    completed: 0,
                    latest: s.as_ref(),
                })
            })
            .collect()
    }

    fn waiting(stable: bool) -> Decision {
        Decision::Waiting { stable }
    }

    fn timed_out(reason: &str, capacity_evidence: bool) -> Decision {
        Decision::TimedOut {
            reason: reason.into(),
            capacity_evidence,
        }
    }

    #[test]
    fn client_only_rules_all_streams_producing_then_stable() {
        let d = run(
            rules(false),
            &[
                (0.0, 0, 0, None),
                (1.0, 3, 10, None),
                (2.0, 4, 20, None),
                (4.9, 4, 50, None),
                (5.0, 4, 60, None),
            ],
        );
        assert_eq!(
            &d[..4],
            &[waiting(false), waiting(false), waiting(true), waiting(true)]
        );
        assert_eq!(
            d[4],
            Decision::Ready {
                reason: "metrics_unavailable, active_streams=4/4, stable=3.0s".into(),
                warning: None
            }
        );
    }

    #[test]
    fn server_rules_running_c_and_no_queue() {
        let d = run(
            rules(true),
            &[
                // all streams produce, but the server queues one
                (1.0, 4, 10, Some((0.9, Some(3.0), 1.0))),
                // running = C, queue empty: the stable window starts
                (2.0, 4, 20, Some((1.9, Some(4.0), 0.0))),
                (5.0, 4, 50, Some((4.9, Some(4.0), 0.0))),
            ],
        );
        assert_eq!(d[0], waiting(false));
        assert_eq!(d[1], waiting(true));
        assert_eq!(
            d[2],
            Decision::Ready {
                reason: "running_reqs=4/4, queue_reqs=0, active_streams=4/4, stable=3.0s".into(),
                warning: None
            }
        );
    }

    #[test]
    fn a_break_restarts_the_stable_window() {
        let d = run(
            rules(true),
            &[
                (1.0, 4, 10, Some((0.9, Some(4.0), 0.0))),
                (2.0, 4, 20, Some((1.9, Some(4.0), 2.0))),
                (3.0, 4, 30, Some((2.9, Some(4.0), 0.0))),
                (5.5, 4, 50, Some((5.4, Some(4.0), 0.0))),
                (6.0, 4, 60, Some((5.9, Some(4.0), 0.0))),
            ],
        );
        assert_eq!(
            &d[..4],
            &[waiting(true), waiting(false), waiting(true), waiting(true)]
        );
        assert!(matches!(d[4], Decision::Ready { .. }), "{:?}", d[4]);
    }

    #[test]
    fn the_server_needs_tokens_generated() {
        let d = run(rules(true), &[(1.0, 4, 0, Some((0.9, Some(4.0), 0.0)))]);
        assert_eq!(d[0], waiting(false));
    }

    #[test]
    fn timeouts_name_the_failing_condition() {
        let t = TIMEOUT.as_secs_f64();
        // (rules with server metrics, producing, live tokens, sample) → (reason, capacity evidence)
        let table: &[(bool, u64, u64, Smp, &str, bool)] = &[
            (false, 0, 0, None, "no_generation", false),
            (false, 2, 10, None, "active_streams=2/4", true),
            (
                true,
                4,
                10,
                Some((t - 0.5, Some(4.0), 3.0)),
                "queue_reqs=3",
                true,
            ),
            (
                true,
                4,
                10,
                Some((t - 0.5, Some(2.0), 0.0)),
                "running_reqs=2/4",
                true,
            ),
            (
                true,
                4,
                0,
                Some((t - 0.5, Some(4.0), 0.0)),
                "no_generation",
                false,
            ),
            (
                true,
                2,
                10,
                Some((t - 0.5, Some(4.0), 0.0)),
                "active_streams=2/4",
                true,
            ),
        ];
        for &(metrics, producing, live, smp, reason, evidence) in table {
            let d = run(rules(metrics), &[(t, producing, live, smp)]);
            assert_eq!(
                d[0],
                timed_out(reason, evidence),
                "{metrics} {producing} {smp:?}"
            );
        }
    }

    #[test]
    fn not_stable_when_the_window_restarts_up_to_the_timeout() {
        let t = TIMEOUT.as_secs_f64();
        let d = run(rules(false), &[(t - 1.0, 4, 10, None), (t, 4, 10, None)]);
        assert_eq!(d[1], timed_out("not_stable", false));
    }

    #[test]
    fn the_timeout_counts_from_the_end_of_the_scout() {
        let t0 = Instant::now();
        let started = t0 + Duration::from_secs(100);
        let mut m = Readiness::new(rules(false), started);
        // 120 s after the cell start but 20 s after the scout: still waiting
        let d = m.observe(Observation {
            now: t0 + Duration::from_secs(120),
            producing: 0,
            live_tokens: 0,
            completed: 0,
            latest: None,
        });
        assert_eq!(d, waiting(false));
    }

    #[test]
    fn fallback_without_the_running_gauge_warns_and_uses_the_client() {
        let d = run(
            rules(true),
            &[
                (1.0, 4, 10, Some((0.9, None, 0.0))),
                (4.0, 4, 40, Some((3.9, None, 0.0))),
            ],
        );
        assert_eq!(d[0], waiting(true));
        let Decision::Ready { reason, warning } = &d[1] else {
            panic!("{:?}", d[1])
        };
        assert_eq!(
            reason,
            "metrics_unavailable, active_streams=4/4, stable=3.0s"
        );
        assert!(
            warning
                .as_deref()
                .unwrap()
                .contains("no running-requests gauge"),
            "{warning:?}"
        );
    }

    #[test]
    fn fallback_when_scrapes_go_stale() {
        // a good sample at 0.5 s, then none: after 5 s it is stale and readiness falls back
        let d = run(
            rules(true),
            &[
                (1.0, 4, 10, Some((0.5, Some(2.0), 0.0))),
                (5.4, 4, 40, Some((0.5, Some(2.0), 0.0))),
                (5.6, 4, 40, Some((0.5, Some(2.0), 0.0))),
                (8.6, 4, 80, Some((0.5, Some(2.0), 0.0))),
            ],
        );
        assert_eq!(&d[..3], &[waiting(false), waiting(false), waiting(true)]);
        let Decision::Ready { warning, .. } = &d[3] else {
            panic!("{:?}", d[3])
        };
        assert!(
            warning.as_deref().unwrap().contains("scrapes failed"),
            "{warning:?}"
        );
    }

    #[test]
    fn fallback_when_no_scrape_ever_succeeds() {
        let d = run(
            rules(true),
            &[(1.0, 4, 10, None), (5.0, 4, 40, None), (8.0, 4, 80, None)],
        );
        // pending while the first scrape may still come, then the client decides
        assert_eq!(&d[..2], &[waiting(false), waiting(true)]);
        let Decision::Ready { warning, .. } = &d[2] else {
            panic!("{:?}", d[2])
        };
        assert!(
            warning.as_deref().unwrap().contains("no /metrics scrape"),
            "{warning:?}"
        );
    }

    /// A cell that starts after every scrape of the run has failed for the staleness limit
    /// falls back to the client's streams at once (break-it round 9: each later cell waited 5 s
    /// for a first sample), and a sample that comes after all is judged as usual.
    #[test]
    fn metrics_known_failing_fall_back_at_once_and_a_later_sample_counts() {
        let d = run_known(
            rules(true),
            true,
            &[(1.0, 4, 10, None), (3.9, 4, 40, None), (4.0, 4, 50, None)],
        );
        assert_eq!(&d[..2], &[waiting(true), waiting(true)]);
        let Decision::Ready { warning, .. } = &d[2] else {
            panic!("{:?}", d[2])
        };
        assert!(
            warning.as_deref().unwrap().contains("no /metrics scrape"),
            "{warning:?}"
        );
        // the same ticks without that knowledge are still waiting for a first scrape
        let d = run(
            rules(true),
            &[(1.0, 4, 10, None), (3.9, 4, 40, None), (4.0, 4, 50, None)],
        );
        assert_eq!(d, [waiting(false), waiting(false), waiting(false)]);
        // /metrics is back: its sample (2 of 4 running) holds readiness back
        let d = run_known(
            rules(true),
            true,
            &[
                (1.0, 4, 10, None),
                (2.0, 4, 20, Some((1.9, Some(2.0), 0.0))),
            ],
        );
        assert_eq!(d, [waiting(true), waiting(false)]);
    }

    #[test]
    fn missing_metrics_at_the_timeout_are_no_capacity_evidence() {
        // the first scrape never came and the timeout is shorter than the staleness limit
        let mut r = rules(true);
        r.timeout = Duration::from_secs(2);
        let d = run(r, &[(2.0, 4, 10, None)]);
        assert_eq!(d[0], timed_out("metrics_unavailable", false));
    }

    #[test]
    fn short_generations_count_completed_requests() {
        let t0 = Instant::now();
        let mut r = rules(true);
        r.max_tokens = 64;
        r.stable = Duration::ZERO;
        let mut m = Readiness::new(r, t0);
        let s = sample(t0 + Duration::from_millis(900), Some(1.0), 0.0);
        let d = m.observe(Observation {
            now: t0 + Duration::from_secs(1),
            producing: 4,
            live_tokens: 100,
            completed: 4,
            latest: Some(&s),
        });
        assert!(matches!(d, Decision::Ready { .. }), "{d:?}");
    }
}
