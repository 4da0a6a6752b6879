//! The open-loop request-rate layer against the simulator's recorded truth.
//!
//! * at 100 req/s (constant arrivals, 5 s) the achieved send rate is within 1 % of the offered
//!   rate, and a Poisson row's achieved rate is within 1 % of its drawn schedule's rate;
//! * under overload — 40 req/s offered to a simulator that serves ≈ 23 req/s (4 batch slots,
//!   ≈ 17 steps of ≈ 10 ms per request) — TTFT and E2E measured from the intended send times
//!   match the truth (the simulator's first / last emission − the intended time): per request
//!   never shorter and at most 5 ms longer (client receive path), and the row's p50 / p99
//!   within 5 ms of the truth's; both with the queue in the server (no cap) and in the client
//!   (`max_concurrency` 4, where TTFT from the send time hides the wait and from the intended
//!   time does not);
//! * the arrivals the simulator received (its own clock) pass a KS test against Exp(λ);
//! * goodput for a set SLO equals the goodput computed from the simulator's own times, except
//!   for requests whose [true, measured] interval holds a threshold (no wall-clock tolerance);
//! * the wall-clock bounds (5 ms excess over the truth, 20 ms schedule lag) are judged against
//!   the machine's own pauses ([`PauseWitness`]): an attempt that misses one is run again only
//!   when the witness saw a pause that explains it, and a test whose every attempt was disturbed
//!   says `CANNOT JUDGE` in its output;
//! * through the runner: a checkpoint after every row, `skipped_context` rows, `--resume`
//!   carrying kept rows over, and arrivals a full cap kept back past the deadline counted as not
//!   sent.

use std::sync::Arc;
use std::time::{Duration, Instant};

use servebench_client::{Endpoint, HttpClient, Target};
use servebench_core::load::RequestOutcome;
use servebench_core::prompt::{build_input, streaming_payload, RequestOptions};
use servebench_core::rate::arrival::Arrival;
use servebench_core::rate::slo::parse_slos;
use servebench_core::rate::{measure_row, RateConfig, RateJob};
use servebench_core::EventSink;
use servebench_results::{CellStatus, RateRow};
use servebench_sim::noise::PauseWitness;
use servebench_sim::{RequestTruth, Sim, SimConfig};
use tokio_util::sync::CancellationToken;

/// Timing tests run one at a time: they share two cores with the simulator thread.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Largest allowed excess of a measured time over the truth (client receive path), s.
const TOL_S: f64 = 0.005;

fn sim(cfg: SimConfig) -> Sim {
    Sim::spawn_thread(SimConfig {
        port: 0,
        record_truth: true,
        ..cfg
    })
    .expect("simulator starts")
}

fn overload_sim() -> Sim {
    sim(SimConfig {
        max_batch: 4,
        decode_base_ms: 10.0,
        ..Default::default()
    })
}

fn rate_cfg(arrival: Arrival, cap: Option<u64>, slo: &str) -> RateConfig {
    RateConfig {
        rates: vec![],
        arrival,
        max_concurrency: cap,
        slos: if slo.is_empty() {
            vec![]
        } else {
            parse_slos(slo).unwrap()
        },
        search: None,
        drain: Duration::from_secs(30),
    }
}

async fn row(
    sim: &Sim,
    cfg: &RateConfig,
    rate: f64,
    duration: f64,
    max_tokens: u64,
) -> (RateRow, Vec<RequestOutcome>) {
    let target = Target::from_url(&sim.base_url(), None, Endpoint::Chat).unwrap();
    let client = HttpClient::new(target).unwrap();
    let opts = RequestOptions {
        model: "servebench-sim".into(),
        endpoint: Endpoint::Chat,
        max_tokens,
        ignore_eos: true,
        temperature: None,
        continuous_usage: true,
    };
    let body = streaming_payload(
        &opts,
        &build_input(Endpoint::Chat, "[BENCH_ratetest]", 0, false),
    );
    let events = Arc::new(EventSink::new(None));
    let cancel = CancellationToken::new();
    let job = RateJob {
        client: &client,
        path: Endpoint::Chat.path(),
        bodies: vec![],
        cold_run_id: Some("ratetest".into()),
        duration: Duration::from_secs_f64(duration),
        seed: 11,
        events: &events,
        cancel: &cancel,
        kept: vec![],
        export: None,
    };
    measure_row(cfg, &job, 0, &body, rate, None).await
}

fn truth_of<'a>(truth: &'a [RequestTruth], o: &RequestOutcome) -> &'a RequestTruth {
    let id = o.stream.record.response_id.as_deref().expect("response id");
    truth
        .iter()
        .find(|t| t.id == id)
        .expect("every response is in the truth")
}

fn secs(from: Instant, to: Instant) -> f64 {
    to.saturating_duration_since(from).as_secs_f64()
}

fn pct(v: &[f64], p: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    servebench_stats::percentile_sorted(&v, p)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn achieved_rate_is_within_one_percent_of_offered_at_100_per_second() {
    let _g = SERIAL.lock().await;
    let s = sim(SimConfig::default());
    let (r, _) = row(&s, &rate_cfg(Arrival::Constant, None, ""), 100.0, 5.0, 8).await;
    eprintln!(
        "constant: sent {} achieved {:?} lag p50 {:?} p99 {:?}",
        r.requests_sent, r.achieved_rate, r.schedule_lag_p50, r.schedule_lag_p99
    );
    assert_eq!(r.status, Some(CellStatus::Ok), "{:?}", r.status_reason);
    assert_eq!(r.requests_scheduled, 500);
    assert_eq!(
        (r.requests_sent, r.requests_completed, r.requests_not_sent),
        (500, 500, 0)
    );
    let achieved = r.achieved_rate.unwrap();
    assert!(
        (achieved / 100.0 - 1.0).abs() < 0.01,
        "achieved {achieved} req/s"
    );
    assert!(r.shortfall.unwrap().abs() < 0.01);

    let (p, _) = row(&s, &rate_cfg(Arrival::Poisson, None, ""), 100.0, 5.0, 8).await;
    let (a, sched) = (p.achieved_rate.unwrap(), p.schedule_rate.unwrap());
    eprintln!(
        "poisson: scheduled {} schedule rate {sched} achieved {a}",
        p.requests_scheduled
    );
    assert_eq!(p.requests_sent, p.requests_scheduled);
    assert!(
        (a / sched - 1.0).abs() < 0.01,
        "achieved {a}, schedule {sched}"
    );
    assert!(
        p.shortfall.unwrap().abs() < 0.01,
        "shortfall is against the drawn schedule"
    );
}

/// Checks one overloaded row's from-intended TTFT / E2E against the truth; returns per completed
/// request (true TTFT, true E2E, measured TTFT, measured E2E) from the intended time, the true queue waits, and the
/// misses of the [`TOL_S`] bounds (empty when every bound held).
///
/// A measured time shorter than the truth is impossible whatever the load (the arrival follows
/// the emission): that panics at once. An excess over [`TOL_S`] is a wall-clock bound (the
/// client's receive path, the simulator's write): a loaded machine can break it, so it is
/// returned for the caller to judge against its [`PauseWitness`].
fn check_against_truth(
    r: &RateRow,
    outcomes: &[RequestOutcome],
    truth: &[RequestTruth],
) -> (Vec<Pair>, Vec<f64>, Vec<Miss>) {
    let mut true_pairs = Vec::new();
    let mut queue = Vec::new();
    let mut misses = Vec::new();
    let (mut true_ttft, mut true_e2e) = (vec![], vec![]);
    for o in outcomes.iter().filter(|o| o.stream.record.completed) {
        let t = truth_of(truth, o);
        let rec = &o.stream.record;
        let tt = secs(o.intended_at, t.first_token_at().unwrap());
        let te = secs(o.intended_at, t.emissions.last().unwrap().0);
        let mt = secs(o.intended_at, rec.first_token_at.unwrap());
        let me = secs(o.intended_at, rec.last_token_at.unwrap());
        assert!(mt >= tt, "TTFT from intended {mt} below the truth {tt}");
        assert!(me >= te, "E2E from intended {me} below the truth {te}");
        if mt - tt >= TOL_S {
            misses.push((
                format!("TTFT from intended {mt:.4} vs truth {tt:.4}"),
                TOL_S,
            ));
        }
        if me - te >= TOL_S {
            misses.push((format!("E2E from intended {me:.4} vs truth {te:.4}"), TOL_S));
        }
        queue.push(secs(t.received_at, t.admitted_at.unwrap()));
        true_pairs.push((tt, te, mt, me));
        true_ttft.push(tt);
        true_e2e.push(te);
    }
    let row_ttft = r.ttft_from_intended.unwrap();
    let row_e2e = r.e2e_from_intended.unwrap();
    for (what, p, row_v, truth_v) in [
        ("TTFT", 50.0, row_ttft.p50, pct(&true_ttft, 50.0)),
        ("TTFT", 99.0, row_ttft.p99, pct(&true_ttft, 99.0)),
        ("E2E", 50.0, row_e2e.p50, pct(&true_e2e, 50.0)),
        ("E2E", 99.0, row_e2e.p99, pct(&true_e2e, 99.0)),
    ] {
        if (row_v - truth_v).abs() >= TOL_S {
            misses.push((
                format!("{what} p{p}: row {row_v:.4} vs truth {truth_v:.4}"),
                TOL_S,
            ));
        }
    }
    (true_pairs, queue, misses)
}

/// Attempts of a test whose wall-clock bounds a loaded machine can break: the next attempt runs
/// only when the [`PauseWitness`] saw a pause that explains the miss.
const ATTEMPTS: usize = 4;

/// A wall-clock bound an attempt missed: what, and the bound, s.
type Miss = (String, f64);

/// One completed request's (true TTFT, true E2E, measured TTFT, measured E2E) from the
/// intended send time, s.
type Pair = (f64, f64, f64, f64);

/// The outcome of one attempt with its bound misses and the witness's longest pause: `true`
/// when the test is done (it passed); panics when it missed without evidence of load (a pause
/// of at least half the largest bound that was missed).
fn judged(attempt: usize, misses: &[Miss], pause: Duration) -> bool {
    if misses.is_empty() {
        eprintln!("attempt {attempt}: every bound held (longest machine pause {pause:?})");
        return true;
    }
    let bound = Duration::from_secs_f64(misses.iter().map(|m| m.1).fold(0.0, f64::max));
    let shown: Vec<&String> = misses.iter().map(|m| &m.0).take(5).collect();
    assert!(
        PauseWitness::explains(pause, bound),
        "attempt {attempt}: {} bound misses with the machine quiet (longest pause {pause:?}, \
         below half of {bound:?}): {shown:?}",
        misses.len()
    );
    eprintln!(
        "attempt {attempt}: {} bound misses, the machine paused {pause:?} (≥ half of {bound:?}): \
         not judged, retrying: {shown:?}",
        misses.len()
    );
    false
}

/// Every attempt was disturbed: the test could not judge its wall-clock bounds (its
/// load-independent checks all held).
fn could_not_judge(test: &str) {
    eprintln!(
        "CANNOT JUDGE {test}: the machine paused on all {ATTEMPTS} attempts (see above); \
         the wall-clock bounds were not checked, only the load-independent ones"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_overload_latency_from_intended_times_matches_the_queueing_truth() {
    let _g = SERIAL.lock().await;
    for attempt in 1..=ATTEMPTS {
        let witness = PauseWitness::start();
        let misses = overload_attempt().await;
        if judged(attempt, &misses, witness.finish()) {
            return;
        }
    }
    could_not_judge("under_overload_latency_from_intended_times_matches_the_queueing_truth");
}

/// One attempt of the overload test: its load-independent checks assert, its wall-clock bounds
/// are returned as misses.
async fn overload_attempt() -> Vec<Miss> {
    // Queue in the server: every arrival is sent on time and waits for a batch slot.
    let s = overload_sim();
    let cfg = rate_cfg(Arrival::Constant, None, "");
    let (r, outcomes) = row(&s, &cfg, 40.0, 2.0, 16).await;
    assert_eq!(
        (r.requests_completed, r.requests_not_sent),
        (80, 0),
        "{:?}",
        r.status_reason
    );
    let (_, queue, mut misses) = check_against_truth(&r, &outcomes, &s.truth());
    let q99 = pct(&queue, 99.0);
    eprintln!(
        "server queue: true queue wait p99 {q99:.3}s, TTFT from intended p99 {:.3}s, lag p99 {:?}",
        r.ttft_from_intended.unwrap().p99,
        r.schedule_lag_p99
    );
    assert!(
        q99 > 0.5,
        "the simulator must really be overloaded (queue p99 {q99})"
    );
    // Arrivals go out on time without a cap (a wall-clock bound: 20 ms).
    let lag99 = r.schedule_lag_p99.unwrap();
    if lag99 >= 0.02 {
        misses.push((format!("schedule lag p99 {lag99:.4} s without a cap"), 0.02));
    }
    assert!(
        r.completed_rate.unwrap() < 30.0,
        "served below the offered 40 req/s"
    );

    // Queue in the client: the cap holds arrivals back; TTFT from the send time hides the
    // wait, from the intended time it does not.
    let s = overload_sim();
    let cfg = rate_cfg(Arrival::Constant, Some(4), "");
    let (r, outcomes) = row(&s, &cfg, 40.0, 2.0, 16).await;
    assert_eq!(
        (r.requests_completed, r.requests_not_sent),
        (80, 0),
        "{:?}",
        r.status_reason
    );
    let (_, queue, more) = check_against_truth(&r, &outcomes, &s.truth());
    misses.extend(more);
    let (sent_p99, intended_p99) = (r.ttft.unwrap().p99, r.ttft_from_intended.unwrap().p99);
    eprintln!(
        "client queue: server queue p99 {:.3}s, TTFT p99 from send {sent_p99:.3}s, from intended {intended_p99:.3}s, lag p99 {:?}",
        pct(&queue, 99.0),
        r.schedule_lag_p99
    );
    // The server's queue is the truth's (no wall-clock bound): with the cap at the batch size
    // a request waits at most for the admission at the next step.
    // (The simulator's clock, but its scheduler's steps run late on a busy machine: a
    // wall-clock bound of 50 ms.)
    let q99 = pct(&queue, 99.0);
    if q99 >= 0.05 {
        misses.push((
            format!("with the cap at the batch size the server queued: p99 {q99:.4} s"),
            0.05,
        ));
    }
    // TTFT from the send time hides the wait (a wall-clock bound of 100 ms); from the intended
    // time it holds the client queue's ≥ 0.5 s (load only adds to it).
    if sent_p99 >= 0.1 {
        misses.push((format!("TTFT p99 from the send {sent_p99:.4} s"), 0.1));
    }
    assert!(intended_p99 > 0.5, "intended {intended_p99}");
    assert!(r.schedule_lag_p99.unwrap() > 0.5);
    // The cap is full for nearly the whole overloaded row: its steady state is the span with
    // all 4 in flight, and the tokens that arrived inside it are the ones the simulator emitted
    // inside it (transit shifts a few tokens at the edges; a wall-clock bound of 2 % + 8).
    let st = r
        .steady_state
        .as_ref()
        .expect("a capped row has a steady state");
    assert_eq!((st.target_in_flight, st.min_in_flight), (4, 4), "{st:?}");
    assert!(st.fraction > 0.8 && !st.short && st.requests > 50, "{st:?}");
    let t0 = outcomes.iter().map(|o| o.intended_at).min().unwrap();
    let (a, b) = (
        t0 + Duration::from_secs_f64(st.start_s),
        t0 + Duration::from_secs_f64(st.end_s),
    );
    let truth_tokens = servebench_sim::tokens_emitted_between(&s.truth(), a, b);
    let off = (st.output_tokens as f64 - truth_tokens as f64).abs();
    eprintln!(
        "steady state: {:.3} s, {} tokens, truth {truth_tokens}",
        st.duration_s, st.output_tokens
    );
    if off > 0.02 * truth_tokens as f64 + 8.0 {
        misses.push((
            format!(
                "steady-state tokens {} vs the simulator's {truth_tokens}",
                st.output_tokens
            ),
            0.02,
        ));
    }
    misses
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn goodput_matches_the_truth_for_a_set_slo() {
    let _g = SERIAL.lock().await;
    for attempt in 1..=ATTEMPTS {
        let witness = PauseWitness::start();
        let misses = goodput_attempt().await;
        if judged(attempt, &misses, witness.finish()) {
            return;
        }
    }
    could_not_judge("goodput_matches_the_truth_for_a_set_slo");
}

/// One attempt of the goodput test (load-independent checks assert; see
/// [`check_against_truth`]). Goodput is judged against the truth with the requests within
/// [`TOL_S`] of a threshold allowed to differ; a request the client saw more than [`TOL_S`]
/// late is a bound miss, so the count comparison holds whenever there is none.
async fn goodput_attempt() -> Vec<Miss> {
    let s = overload_sim();
    let slo_ttft = 0.6;
    let slo_e2e = 1.0;
    let cfg = rate_cfg(Arrival::Poisson, None, "ttft_p90=600ms,e2e_p50=1s");
    let (r, outcomes) = row(&s, &cfg, 40.0, 2.0, 16).await;
    let (pairs, _, misses) = check_against_truth(&r, &outcomes, &s.truth());
    let n = r.requests_scheduled as f64;
    let good_of = |t: f64, e: f64| t <= slo_ttft && e <= slo_e2e;
    let good_truth = pairs.iter().filter(|p| good_of(p.0, p.1)).count() as f64;
    let good_measured = pairs.iter().filter(|p| good_of(p.2, p.3)).count() as f64;
    // Requests whose [truth, measured] interval holds a threshold: the only ones whose verdict
    // may differ from the truth's (a measured time is never below the truth). No tolerance,
    // so no wall-clock bound: a late client only makes more of them.
    let straddle = pairs
        .iter()
        .filter(|p| (p.0 <= slo_ttft && p.2 > slo_ttft) || (p.1 <= slo_e2e && p.3 > slo_e2e))
        .count() as f64;
    let span = {
        let start = outcomes.iter().map(|o| o.intended_at).min().unwrap();
        let end = outcomes
            .iter()
            .map(|o| o.stream.record.end_at)
            .max()
            .unwrap();
        secs(start, end)
    };
    let good = r.slo_attainment.unwrap() * n;
    eprintln!(
        "goodput {:?} req/s ({good:.0} good), truth {:.3} req/s ({good_truth} good, {straddle} straddling a threshold), attainment {:?}, slo met {:?}",
        r.goodput,
        good_truth / n * r.schedule_rate.unwrap_or(0.0),
        r.slo_attainment,
        r.slo_met
    );
    assert!(
        good_truth > 0.0 && good_truth < n,
        "the SLO must split the row"
    );
    assert_eq!(good, good_measured, "good requests of the row's own values");
    assert!(
        good <= good_truth && good_truth - good <= straddle,
        "good {good} vs truth {good_truth} ({straddle} straddle a threshold)"
    );
    // Goodput is over the schedule's span (its own rate), the drain apart.
    let rate = r.schedule_rate.unwrap();
    assert!((r.goodput.unwrap() - good / n * rate).abs() < 1e-9);
    let last_intended = outcomes.iter().map(|o| o.intended_at).max().unwrap();
    let end = outcomes
        .iter()
        .map(|o| o.stream.record.end_at)
        .max()
        .unwrap();
    assert!((r.drain_s.unwrap() - secs(last_intended, end)).abs() < 1e-9);
    assert!(span > 0.0);
    // The row's percentile verdicts agree with the truth's percentiles, when the truth's are
    // clear of the thresholds by more than the client's worst excess of this attempt.
    let tt: Vec<f64> = pairs.iter().map(|p| p.0).collect();
    let te: Vec<f64> = pairs.iter().map(|p| p.1).collect();
    let excess = pairs
        .iter()
        .map(|p| (p.2 - p.0).max(p.3 - p.1))
        .fold(0.0f64, f64::max);
    let want = pct(&tt, 90.0) <= slo_ttft && pct(&te, 50.0) <= slo_e2e;
    let margin = (pct(&tt, 90.0) - slo_ttft)
        .abs()
        .min((pct(&te, 50.0) - slo_e2e).abs());
    if margin > excess {
        assert_eq!(
            r.slo_met,
            Some(want),
            "margin {margin} s, worst excess {excess} s"
        );
    } else {
        eprintln!("slo_met not compared: the truth's percentile is {margin} s from a threshold, the worst excess {excess} s");
    }
    misses
}

fn run_config(sim: &Sim, open_loop: RateConfig, contexts: Vec<u64>) -> servebench_core::RunConfig {
    use servebench_core::prompt::CalibrationCache;
    use servebench_core::run::{BurstConfig, PrefillConfig, TargetingMode};
    servebench_core::RunConfig {
        target: Target::from_url(&sim.base_url(), None, Endpoint::Chat).unwrap(),
        model: None,
        concurrency: vec![1],
        contexts,
        duration: Duration::from_secs(1),
        max_tokens: 16,
        ignore_eos: true,
        temperature: None,
        decode_warmup: Duration::ZERO,
        cell_timeout: Some(Duration::from_secs(20)),
        stable_window: Duration::from_millis(300),
        cell_pause: Duration::ZERO,
        kv_budget: 0,
        dcp_size: 0,
        show_capacity_limited_values: false,
        seed: Some(9),
        targeting: TargetingMode::Auto,
        calibration_context: 1024,
        calibration_cache: CalibrationCache::at(None),
        prefill: PrefillConfig {
            skip: true,
            ..PrefillConfig::default()
        },
        burst: BurstConfig::default(),
        args_snapshot: serde_json::Value::Null,
        policy: Default::default(),
        open_loop: Some(open_loop),
        export: None,
    }
}

/// Through the runner: every finished row is checkpointed (a `Checkpoint` event with the rows so
/// far), a context that does not fit is a `skipped_context` row, and arrivals the cap kept back
/// past the row's deadline are counted as not sent (and the requests in flight as cut).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runner_checkpoints_rows_and_counts_unsent_arrivals() {
    let _g = SERIAL.lock().await;
    let s = sim(SimConfig {
        max_model_len: 4096,
        ..SimConfig::default()
    });
    let mut ol = rate_cfg(Arrival::Constant, None, "ttft_p99=1s");
    ol.rates = vec![10.0, 20.0];
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let events = Arc::new(EventSink::new(Some(tx)));
    let res = servebench_core::run(
        run_config(&s, ol, vec![0, 8192]),
        events.clone(),
        CancellationToken::new(),
    )
    .await
    .expect("run");
    drop(events);
    let mut checkpoints = Vec::new();
    while let Some(e) = rx.recv().await {
        if let servebench_core::RunEvent::Checkpoint(r) = e {
            checkpoints.push(r.rate_results.len());
        }
    }
    assert!(res.results.is_empty(), "no matrix cells in rate mode");
    let rows = &res.rate_results;
    assert_eq!(rows.len(), 4, "2 rates × 2 contexts");
    assert_eq!(
        rows[0].status,
        Some(CellStatus::Ok),
        "{:?}",
        rows[0].status_reason
    );
    assert_eq!(
        (rows[0].requests_scheduled, rows[1].requests_scheduled),
        (10, 20)
    );
    assert!(rows[1].slo_met == Some(true) && rows[1].goodput.unwrap() > 0.0);
    // Every scheduled request good: goodput is the schedule's own rate, whatever the drain
    // after its last arrival (it read 54 req/s against 63 achieved when divided by a span that
    // included the drain).
    let (good, att, sched) = (
        rows[1].goodput.unwrap(),
        rows[1].slo_attainment.unwrap(),
        rows[1].schedule_rate.unwrap(),
    );
    assert!(
        (good - att * sched).abs() < 1e-9,
        "goodput {good} vs {att} x schedule rate {sched}"
    );
    assert!(rows[1].drain_s.unwrap() > 0.0);
    assert_eq!(rows[2].status, Some(CellStatus::SkippedContext));
    assert!(rows[2]
        .status_reason
        .as_deref()
        .unwrap()
        .contains("max_model_len"));
    for n in 1..=4 {
        assert!(
            checkpoints.contains(&n),
            "a checkpoint after row {n}: {checkpoints:?}"
        );
    }

    // --resume: the kept ok row (ctx 0, 10 req/s) and the skipped_context rows are carried over
    // unchanged; the dropped one (ctx 0, 20 req/s) is measured again.
    let mut partial = res.clone();
    partial.rate_results.remove(1);
    let resume = servebench_core::resume::Resume::from_results(&partial, "r.json");
    assert_eq!(resume.rate_rows.len(), 3);
    let mut ol = rate_cfg(Arrival::Constant, None, "ttft_p99=1s");
    ol.rates = vec![10.0, 20.0];
    let again = servebench_core::run_resuming(
        run_config(&s, ol, vec![0, 8192]),
        Default::default(),
        Some(resume),
        Arc::new(EventSink::new(None)),
        CancellationToken::new(),
    )
    .await
    .expect("resumed run");
    assert_eq!(again.rate_results.len(), 4);
    assert_eq!(again.rate_results[0], res.rate_results[0], "kept unchanged");
    assert_eq!(again.rate_results[1].offered_rate, 20.0);
    assert_ne!(again.rate_results[1], res.rate_results[1], "measured again");
    assert_eq!(again.rate_results[1].status, Some(CellStatus::Ok));

    // A cap of 1 with 20 tokens of 10 ms per request serves ≈ 5 req/s; 40 req/s for 1 s with
    // no drain leaves most arrivals unsent at the deadline: counted, not dropped.
    let slow = overload_sim();
    let mut cfg = rate_cfg(Arrival::Constant, Some(1), "ttft_p50=1s");
    cfg.drain = Duration::ZERO;
    let (r, _) = row(&slow, &cfg, 40.0, 1.0, 20).await;
    eprintln!(
        "capped: sent {} completed {} cut {} not sent {} ({:?})",
        r.requests_sent, r.requests_completed, r.requests_cut, r.requests_not_sent, r.status_reason
    );
    assert_eq!(r.requests_scheduled, 40);
    assert_eq!(
        r.requests_sent + r.requests_not_sent,
        40,
        "every arrival is sent or counted as not sent"
    );
    assert_eq!(
        r.requests_completed + r.requests_failed + r.requests_cut,
        r.requests_sent
    );
    assert!(r.requests_not_sent >= 25, "{}", r.requests_not_sent);
    assert!(r.status_reason.as_deref().unwrap().contains("never sent"));
    // Most arrivals never finished: the latency summaries cover only the survivors, so the row
    // is invalid (a rate-search probe would stay ok: its verdict is slo_met).
    assert_eq!(r.status, Some(CellStatus::Invalid), "{:?}", r.status_reason);
    assert!(
        r.status_reason
            .as_deref()
            .unwrap()
            .contains("arrivals did not complete"),
        "{:?}",
        r.status_reason
    );
    // Unsent arrivals miss the SLO: attainment counts them, the p50 constraint fails.
    assert!(r.slo_attainment.unwrap() <= (r.requests_completed as f64) / 40.0 + 1e-9);
    assert_eq!(r.slo_met, Some(false));
}

/// An interrupted run lists every rate it never reached as a `skipped_user` row (like the
/// matrix's unreached cells); the row it was running is `skipped_user` too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_run_lists_the_unreached_rates() {
    let _g = SERIAL.lock().await;
    let s = sim(SimConfig::default());
    let mut ol = rate_cfg(Arrival::Constant, None, "");
    ol.rates = vec![10.0, 20.0, 40.0];
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let events = Arc::new(EventSink::new(Some(tx)));
    let cancel = CancellationToken::new();
    let stop = cancel.clone();
    // Ctrl-C as soon as the first row is checkpointed.
    let watcher = tokio::spawn(async move {
        while let Some(e) = rx.recv().await {
            if let servebench_core::RunEvent::Checkpoint(r) = e {
                if !r.rate_results.is_empty() {
                    stop.cancel();
                }
            }
        }
    });
    let res = servebench_core::run(run_config(&s, ol, vec![0]), events.clone(), cancel)
        .await
        .expect("run");
    drop(events);
    let _ = watcher.await;
    let rows: Vec<(f64, Option<CellStatus>)> = res
        .rate_results
        .iter()
        .map(|r| (r.offered_rate, r.status))
        .collect();
    assert_eq!(
        rows,
        [
            (10.0, Some(CellStatus::Ok)),
            (20.0, Some(CellStatus::SkippedUser)),
            (40.0, Some(CellStatus::SkippedUser)),
        ],
        "{:?}",
        res.rate_results
            .iter()
            .map(|r| &r.status_reason)
            .collect::<Vec<_>>()
    );
    assert_eq!(
        res.rate_results[2].status_reason.as_deref(),
        Some(servebench_core::rate::NOT_RUN_REASON)
    );
    assert_eq!(
        res.rate_results[2].requests_scheduled, 0,
        "nothing was drawn or sent"
    );
}

/// The arrivals the simulator saw (its own receipt times) form a Poisson process at the offered
/// rate: their gaps pass a one-sample KS test against Exp(λ) at α = 0.01 (the client's timer
/// granularity, ≈ 1 ms against 50 ms mean gaps, moves the CDF by < 0.02 of the ≈ 0.115 margin).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poisson_arrivals_at_the_simulator_pass_a_ks_test() {
    use servebench_core::rate::arrival::{ks_critical_001, ks_statistic};
    let _g = SERIAL.lock().await;
    let rate = 20.0;
    let exp_cdf = |x: f64| {
        if x <= 0.0 {
            0.0
        } else {
            1.0 - (-rate * x).exp()
        }
    };
    // The receive times are the simulator's wall clock: a machine that stands still bunches
    // them. An attempt that fails the KS test is run again only when the witness saw a pause
    // of at least half the mean gap (50 ms); on a quiet machine a failure fails at once.
    let mean_gap = Duration::from_secs_f64(1.0 / rate);
    let mut judged_once = false;
    for attempt in 1..=ATTEMPTS {
        let s = sim(SimConfig::default());
        let witness = PauseWitness::start();
        let (r, outcomes) = row(&s, &rate_cfg(Arrival::Poisson, None, ""), rate, 10.0, 4).await;
        let pause = witness.finish();
        assert_eq!(
            r.requests_completed, r.requests_scheduled,
            "{:?}",
            r.status_reason
        );
        let truth = s.truth();
        let mut received: Vec<Instant> = outcomes
            .iter()
            .map(|o| truth_of(&truth, o).received_at)
            .collect();
        received.sort();
        let gaps: Vec<f64> = received.windows(2).map(|w| secs(w[0], w[1])).collect();
        let d = ks_statistic(&gaps, exp_cdf);
        let crit = ks_critical_001(gaps.len());
        eprintln!(
            "attempt {attempt}: KS at the simulator: n = {}, D = {d:.4}, critical {crit:.4}, machine pause {pause:?}",
            gaps.len()
        );
        if d < crit {
            judged_once = true;
            break;
        }
        assert!(
            PauseWitness::explains(pause, mean_gap),
            "D = {d:.4} ≥ {crit:.4} with the machine quiet (longest pause {pause:?})"
        );
        eprintln!("attempt {attempt}: not judged (the machine paused {pause:?}), retrying");
    }
    if !judged_once {
        could_not_judge("poisson_arrivals_at_the_simulator_pass_a_ks_test");
    }
    // The same test rejects constant arrivals at that rate (the test can fail).
    let s = sim(SimConfig::default());
    let (_, outcomes) = row(&s, &rate_cfg(Arrival::Constant, None, ""), rate, 3.0, 4).await;
    let truth = s.truth();
    let mut received: Vec<Instant> = outcomes
        .iter()
        .map(|o| truth_of(&truth, o).received_at)
        .collect();
    received.sort();
    let gaps: Vec<f64> = received.windows(2).map(|w| secs(w[0], w[1])).collect();
    let d = ks_statistic(&gaps, |x| 1.0 - (-rate * x).exp());
    assert!(
        d > ks_critical_001(gaps.len()),
        "constant gaps must fail: D = {d}"
    );
}
