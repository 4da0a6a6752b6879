//! The events a live view gets from a real run on the simulator (vLLM personality, so the
//! server sampler runs): the plan first, phase changes in order with their limits, requests
//! done, server samples, client health, and the skip control ending only the running cell.

use std::sync::Arc;
use std::time::Duration;

use servebench_client::{Endpoint, Target};
use servebench_core::events::{Phase, RunEvent, StopCause, USER_SKIP_REASON};
use servebench_core::prompt::CalibrationCache;
use servebench_core::run::{BurstConfig, PrefillConfig, RunConfig, TargetingMode};
use servebench_core::{run, EventSink};
use servebench_results::CellStatus;
use servebench_sim::{Personality, Sim, SimConfig};
use tokio_util::sync::CancellationToken;

fn config(sim: &Sim, concurrency: Vec<u64>, duration: Duration) -> RunConfig {
    RunConfig {
        target: Target::from_url(&sim.base_url(), None, Endpoint::Chat).unwrap(),
        model: None,
        concurrency,
        contexts: vec![0],
        duration,
        max_tokens: 32,
        ignore_eos: true,
        temperature: None,
        decode_warmup: Duration::ZERO,
        cell_timeout: Some(Duration::from_secs(20)),
        stable_window: Duration::from_millis(500),
        cell_pause: Duration::ZERO,
        kv_budget: 0,
        dcp_size: 0,
        show_capacity_limited_values: false,
        seed: Some(5),
        targeting: TargetingMode::Auto,
        calibration_context: 1024,
        calibration_cache: CalibrationCache::at(None),
        prefill: PrefillConfig {
            contexts: vec![],
            ..PrefillConfig::default()
        },
        burst: BurstConfig::default(),
        args_snapshot: serde_json::Value::Null,
        policy: Default::default(),
        open_loop: None,
        export: None,
    }
}

fn sim() -> Sim {
    Sim::spawn_thread(SimConfig {
        port: 0,
        record_truth: false,
        personality: Personality::Vllm,
        ..SimConfig::default()
    })
    .expect("simulator starts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_sends_plan_phases_requests_samples_and_health() {
    let sim = sim();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<RunEvent>();
    let events = Arc::new(EventSink::new(Some(tx)));
    let cfg = config(&sim, vec![2], Duration::from_millis(1500));
    let results = run(cfg, events.clone(), CancellationToken::new())
        .await
        .expect("run");
    drop(events);
    let mut all = Vec::new();
    while let Some(e) = rx.recv().await {
        all.push(e);
    }
    assert_eq!(results.results[0].status, CellStatus::Ok);

    let pos = |f: &dyn Fn(&RunEvent) -> bool| all.iter().position(f);
    let plan_at = pos(&|e| matches!(e, RunEvent::Plan(_))).expect("a plan event");
    let started_at = pos(&|e| matches!(e, RunEvent::CellStarted { .. })).expect("cell started");
    assert!(plan_at < started_at, "the plan comes before any cell");
    let RunEvent::Plan(plan) = &all[plan_at] else {
        unreachable!()
    };
    assert_eq!(plan.engine, "vllm");
    assert_eq!(plan.model, "servebench-sim");
    assert_eq!(plan.cells.len(), 1);
    assert_eq!(plan.cells[0].concurrency, 2);
    assert_eq!(
        plan.cells[0].expected_s,
        Some(2.0),
        "stable 0.5 + window 1.5"
    );
    assert!(
        plan.kv_budget_tokens > 0,
        "the vLLM personality reports its KV cache"
    );

    let phases: Vec<(Phase, Option<f64>)> = all
        .iter()
        .filter_map(|e| match e {
            RunEvent::PhaseChanged { phase, limit_s, .. } => Some((*phase, *limit_s)),
            _ => None,
        })
        .collect();
    // Context 0: no scout. Ramp-up may come back after a readiness that did not hold.
    assert_eq!(
        phases.first(),
        Some(&(Phase::RampUp, Some(20.0))),
        "{phases:?}"
    );
    assert_eq!(
        phases.last(),
        Some(&(Phase::Measuring, Some(1.5))),
        "{phases:?}"
    );
    assert_eq!(
        phases[phases.len() - 2],
        (Phase::Readiness, Some(0.5)),
        "{phases:?}"
    );
    let done: Vec<_> = all
        .iter()
        .filter_map(|e| match e {
            RunEvent::RequestDone(d) => Some(d),
            _ => None,
        })
        .collect();
    assert!(!done.is_empty(), "32-token requests end within the cell");
    assert!(done.iter().all(|d| !d.failed && d.ttft_s.is_some()));
    assert!(done.iter().any(|d| d.itl_s.is_some_and(|i| i > 0.0)));
    let sample = all.iter().find_map(|e| match e {
        RunEvent::ServerSample(s) => Some(s),
        _ => None,
    });
    assert!(
        sample.is_some_and(|s| s.running.is_some() && s.kv_usage.is_some()),
        "{sample:?}"
    );
    assert!(all
        .iter()
        .any(|e| matches!(e, RunEvent::ClientHealth(h) if h.cpu_util.is_some())));
    // Every event about the cell comes between its start and its end.
    let finished_at = pos(&|e| matches!(e, RunEvent::CellFinished { .. })).expect("finished");
    let last_live = all
        .iter()
        .rposition(|e| {
            matches!(
                e,
                RunEvent::PhaseChanged { .. }
                    | RunEvent::RequestDone(_)
                    | RunEvent::ServerSample(_)
                    | RunEvent::ClientHealth(_)
            )
        })
        .unwrap();
    assert!(started_at < last_live && last_live < finished_at);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skip_ends_the_running_cell_only() {
    let sim = sim();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<RunEvent>();
    let events = Arc::new(EventSink::new(Some(tx)));
    let skip = events.skip_control();
    // A 60 s window that the skip must cut short; the next cell runs until the live view's `q`
    // stops the run, and the third cell is not run.
    let cfg = config(&sim, vec![1, 2, 4], Duration::from_secs(60));
    let cancel = CancellationToken::new();
    let runner = tokio::spawn(run(cfg, events.clone(), cancel.clone()));
    drop(events);
    let mut skipped_once = false;
    let mut finished = Vec::new();
    let t0 = std::time::Instant::now();
    while let Some(e) = rx.recv().await {
        match e {
            RunEvent::PhaseChanged {
                index,
                phase: Phase::Measuring,
                ..
            } => {
                if index == 1 && !skipped_once {
                    skipped_once = true;
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    assert!(skip.skip_current(), "a cell is running");
                } else if index == 2 {
                    // The q key during the second cell: the view records why, then stops.
                    skip.record_stop(StopCause::QuitKey);
                    cancel.cancel();
                }
            }
            RunEvent::CellFinished { index, result } => finished.push((index, result)),
            _ => {}
        }
    }
    let results = runner.await.unwrap().expect("run");
    assert!(
        t0.elapsed() < Duration::from_secs(30),
        "neither 60 s window ran out"
    );
    assert!(!skip.skip_current(), "nothing runs after the run");
    let r = &results.results;
    assert_eq!(r.len(), 3);
    assert_eq!(r[0].status, CellStatus::SkippedUser);
    assert_eq!(
        r[0].status_reason,
        format!("{USER_SKIP_REASON} while the cell was running")
    );
    assert!(r[0].aggregate_tps.is_none());
    assert_eq!(r[1].status, CellStatus::SkippedUser);
    assert_eq!(
        r[1].status_reason,
        "interrupted by the user (key q in the live view) while the cell was running"
    );
    assert_eq!(r[2].status, CellStatus::SkippedUser);
    assert_eq!(
        r[2].status_reason,
        "not run: the run was interrupted by the user (key q in the live view)"
    );
    assert!(results.metadata.interrupted);
    assert_eq!(finished.len(), 3, "every cell reported to the live view");
    assert!(results
        .event_log
        .iter()
        .any(|l| l.contains("cell skipped C=1 ctx=0: skipped by the user")));
}
