//! Task profiles against the simulator's truth.
//!
//! * Completion-token statistics are usage-based and therefore **exact**: every run's tokens,
//!   finish reason and max-token hit equal what the simulator recorded for that request (matched
//!   by response id), and avg / p50 / p90 / p99 equal the truth's summary.
//! * Correctness equals the truth's (the simulator knows which requests stated the right answer),
//!   the Wilson interval is `wilson_interval(correct, scored)`, and reasoning is never scored:
//!   every reasoning phase states the correct answer, yet runs whose final content line is wrong
//!   are wrong — also with inline `<think>` blocks and with responses cut inside the reasoning.
//! * The adaptive search picks the level with the highest **system** throughput (the simulator's
//!   rises with C up to `max_batch` while per-request speed falls), stops after `patience`
//!   non-improving levels, and measures each level's system throughput within 3 % of the truth.
//! * Every results file validates against `schema/task.schema.json`.

use std::collections::HashMap;
use std::sync::Arc;

use servebench_client::{Endpoint, Target};
use servebench_core::task::{run_task, TaskConfig, TaskItem, TaskResults, TASK_SCHEMA_JSON};
use servebench_core::EventSink;
use servebench_sim::{RequestTruth, Sim, SimConfig};
use servebench_stats::{wilson_interval, Summary};
use tokio_util::sync::CancellationToken;

/// Timing-sensitive tests run one at a time (two cores, shared with the simulator thread).
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn sim(cfg: SimConfig) -> Sim {
    Sim::spawn_thread(SimConfig {
        port: 0,
        record_truth: true,
        ..cfg
    })
    .expect("simulator starts")
}

fn config(sim: &Sim, answer: Option<&str>) -> TaskConfig {
    let target = Target::from_url(&sim.base_url(), None, Endpoint::Chat).unwrap();
    TaskConfig::new(
        target,
        vec![TaskItem {
            id: "q1".into(),
            prompt: "What is 6 x 7? End with a line 'Final answer: <n>'.".into(),
            answer: answer.map(str::to_string),
            regex: None,
        }],
        "prompt",
    )
}

async fn run(cfg: TaskConfig) -> TaskResults {
    let events = Arc::new(EventSink::new(None));
    let r = run_task(cfg, events, CancellationToken::new())
        .await
        .expect("task runs");
    validate(&r);
    r
}

fn validate(r: &TaskResults) {
    let schema: serde_json::Value = serde_json::from_str(TASK_SCHEMA_JSON).unwrap();
    let v = jsonschema::validator_for(&schema).expect("schema compiles");
    let value = serde_json::to_value(r).unwrap();
    let errors: Vec<String> = v
        .iter_errors(&value)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "schema violations: {errors:#?}");
    // Round trip.
    let back: TaskResults = serde_json::from_value(value).unwrap();
    assert_eq!(&back, r);
}

fn truth_by_id(sim: &Sim) -> HashMap<String, RequestTruth> {
    sim.truth().into_iter().map(|t| (t.id.clone(), t)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statistics_and_accuracy_equal_the_truth() {
    let _g = SERIAL.lock().await;
    let sim = sim(SimConfig {
        decode_base_ms: 1.0,
        answer: Some("42".into()),
        answer_accuracy: 0.7,
        eos_after_min: Some(20),
        eos_after_max: Some(130),
        reasoning_tokens: 8,
        ..SimConfig::default()
    });
    let mut cfg = config(&sim, Some("42"));
    cfg.concurrency = Some(8);
    cfg.runs = 40;
    cfg.max_tokens = 100;
    cfg.save_text = true;
    let r = run(cfg).await;
    let truth = truth_by_id(&sim);

    assert_eq!(r.selected_concurrency, Some(8));
    assert_eq!(r.runs.len(), 40);
    let scout = r.prefill_scout.as_ref().expect("scout ran");
    assert_eq!((scout.completion_tokens, scout.correct), (1, None));
    let s = r.selected_summary.as_ref().unwrap();
    assert_eq!((s.attempted, s.completed, s.errors), (40, 40, 0));

    let mut truth_tokens = Vec::new();
    let (mut t_correct, mut t_length, mut wrong_with_right_reasoning) = (0u64, 0u64, 0);
    for run in &r.runs {
        let id = run.response_id.as_deref().expect("response id");
        let t = &truth[id];
        assert!(run.ok, "{run:?}");
        assert!(!run.estimated_tokens, "tokens come from usage");
        assert_eq!(run.completion_tokens, t.tokens(), "tokens of {id}");
        assert_eq!(run.finish_reason, t.finish_reason, "finish of {id}");
        let length = t.finish_reason.as_deref() == Some("length");
        assert_eq!(run.hit_max_tokens, length, "max-token hit of {id}");
        assert_eq!(run.correct, t.answer_correct, "correctness of {id}");
        assert_eq!(run.reasoning_tokens, None);
        // The reasoning always states the right answer; only the content's last line counts.
        let reasoning = run.reasoning_text.as_deref().unwrap();
        assert!(reasoning.ends_with("So the answer is 42."), "{reasoning:?}");
        if run.correct == Some(false) {
            wrong_with_right_reasoning += 1;
            assert!(matches!(run.score_label.as_str(), "FAIL" | "TRUNC"));
        }
        if let Some(a) = &t.answer {
            assert_eq!(run.final_answer, format!("Final answer: {a}"));
        }
        assert!(run.ttft.unwrap() <= run.elapsed);
        assert!(run.time_to_first_content.unwrap() >= run.ttft.unwrap());
        truth_tokens.push(t.tokens() as f64);
        t_correct += u64::from(t.answer_correct == Some(true));
        t_length += u64::from(length);
    }
    assert!(wrong_with_right_reasoning > 0);
    assert!(
        t_length > 0 && t_length < 40,
        "some runs hit max_tokens: {t_length}"
    );
    assert!(r.runs.iter().any(|x| x.score_label == "TRUNC"));

    // Distribution: exact (usage-based).
    let want = Summary::of(&truth_tokens).unwrap();
    let got = s.completion_tokens.unwrap();
    assert_eq!(
        (got.avg, got.p50, got.p90, got.p99, got.min, got.max),
        (want.avg, want.p50, want.p90, want.p99, want.min, want.max)
    );
    assert!(want.max > want.min, "lengths vary");
    assert_eq!(s.hit_max_tokens, t_length);
    assert_eq!(
        s.total_completion_tokens,
        truth_tokens.iter().sum::<f64>() as u64
    );

    // Accuracy and its interval.
    let acc = s.accuracy.as_ref().unwrap();
    assert_eq!((acc.correct, acc.scored), (t_correct, 40));
    let (lo, hi) = wilson_interval(t_correct, 40, 1.959_963_984_540_054).unwrap();
    assert!((acc.wilson_low - lo).abs() < 1e-12 && (acc.wilson_high - hi).abs() < 1e-12);
    assert_eq!(r.wrong_runs.len() as u64, 40 - t_correct);
    assert_eq!(s.score_labels.values().sum::<u64>(), 40);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inline_think_and_reasoning_cut_short_are_never_scored() {
    let _g = SERIAL.lock().await;
    // Inline <think> blocks: the answer inside them never counts.
    let sim1 = sim(SimConfig {
        decode_base_ms: 1.0,
        answer: Some("Estonia".into()),
        answer_accuracy: 0.5,
        eos_after_min: Some(30),
        eos_after_max: Some(60),
        reasoning_tokens: 10,
        reasoning_inline: true,
        ..SimConfig::default()
    });
    let mut cfg = config(&sim1, Some("Estonia"));
    cfg.concurrency = Some(4);
    cfg.runs = 8;
    cfg.max_tokens = 200;
    cfg.prefill_scout = false;
    cfg.save_text = true;
    let r = run(cfg).await;
    let truth = truth_by_id(&sim1);
    let mut wrong = 0;
    for run in &r.runs {
        let t = &truth[run.response_id.as_deref().unwrap()];
        assert_eq!(run.correct, t.answer_correct);
        assert!(run
            .reasoning_text
            .as_deref()
            .unwrap()
            .contains("So the answer is Estonia."));
        let content = run.content_text.as_deref().unwrap();
        assert!(
            !content.contains("think>") && !content.contains("So the answer"),
            "{content:?}"
        );
        wrong += usize::from(run.correct == Some(false));
    }
    assert_eq!(wrong, 4, "half are wrong");
    assert_eq!(r.selected_summary.unwrap().accuracy.unwrap().correct, 4);

    // Cut at the end of the reasoning: the content is empty, so nothing is stated — wrong,
    // although the last line of the whole output is "So the answer is 42.".
    let sim2 = sim(SimConfig {
        decode_base_ms: 1.0,
        answer: Some("42".into()),
        reasoning_tokens: 12,
        ..SimConfig::default()
    });
    let mut cfg = config(&sim2, Some("42"));
    cfg.concurrency = Some(2);
    cfg.runs = 2;
    cfg.max_tokens = 12;
    cfg.prefill_scout = false;
    let r = run(cfg).await;
    for run in &r.runs {
        assert_eq!(run.correct, Some(false));
        assert_eq!(run.score_label, "TRUNC");
        assert!(run.hit_max_tokens);
        assert_eq!(run.final_answer, "");
        assert!(run.output_excerpt.ends_with("So the answer is 42."));
    }
    assert!(sim2.truth().iter().all(|t| t.answer_correct == Some(false)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adaptive_search_selects_the_highest_system_throughput() {
    let _g = SERIAL.lock().await;
    // Step = 8 ms + 4 ms × batch, at most 4 in the batch. System throughput C / (8 + 4C) ms:
    // 83, 125, 167 tok/s at C = 1, 2, 4 and no more beyond (C = 8 queues). Per-request speed
    // 1 / (8 + 4C) ms falls: 83, 62, 42 tok/s — the old tool's "aggregate" would pick C = 1.
    let sim = sim(SimConfig {
        decode_base_ms: 8.0,
        decode_per_seq_ms: 4.0,
        decode_per_kctx_ms: 0.0,
        max_batch: 4,
        ..SimConfig::default()
    });
    let mut cfg = config(&sim, None);
    cfg.levels = vec![1, 2, 4, 8, 16];
    cfg.min_results = 8;
    cfg.max_tokens = 64;
    cfg.prefill_scout = false;
    let r = run(cfg).await;
    let truth = truth_by_id(&sim);

    let cs: Vec<u64> = r.level_summaries.iter().map(|l| l.concurrency).collect();
    assert_eq!(cs, vec![1, 2, 4, 8], "stops after one non-improving level");
    let improved: Vec<bool> = r.level_summaries.iter().map(|l| l.improved).collect();
    assert_eq!(improved, vec![true, true, true, false]);
    assert_eq!(r.selected_concurrency, Some(4));
    let sel: Vec<u64> = r
        .level_summaries
        .iter()
        .filter(|l| l.selected)
        .map(|l| l.concurrency)
        .collect();
    assert_eq!(sel, vec![4]);

    // The per-request metric (the old tool's "aggregate") would have picked C = 1.
    let per_request_best = r
        .level_summaries
        .iter()
        .max_by(|a, b| {
            a.summary
                .mean_per_request_gen_tok_s
                .unwrap()
                .total_cmp(&b.summary.mean_per_request_gen_tok_s.unwrap())
        })
        .unwrap()
        .concurrency;
    assert_eq!(per_request_best, 1);

    // Each level's system throughput against the truth: its requests' tokens over the span from
    // the first request received to the last one finished.
    for l in &r.level_summaries {
        let runs: Vec<_> = r
            .runs
            .iter()
            .filter(|x| x.phase == "probe" && x.concurrency == l.concurrency)
            .collect();
        assert_eq!(runs.len() as u64, l.concurrency);
        let ts: Vec<&RequestTruth> = runs
            .iter()
            .map(|x| &truth[x.response_id.as_deref().unwrap()])
            .collect();
        let tokens: u64 = ts.iter().map(|t| t.tokens()).sum();
        let start = ts.iter().map(|t| t.received_at).min().unwrap();
        let end = ts.iter().filter_map(|t| t.finished_at).max().unwrap();
        let truth_tps = tokens as f64 / (end - start).as_secs_f64();
        let got = l.summary.system_gen_tok_s.unwrap();
        let err = (got - truth_tps).abs() / truth_tps;
        eprintln!(
            "C={}: system {got:.1} tok/s (truth {truth_tps:.1}), per-request {:.1}",
            l.concurrency,
            l.summary.mean_per_request_gen_tok_s.unwrap()
        );
        assert!(
            err < 0.03,
            "C={}: {got:.1} vs truth {truth_tps:.1}",
            l.concurrency
        );
    }

    // Collected up to min_results at the selected level (its probe runs count).
    let s = r.selected_summary.as_ref().unwrap();
    assert_eq!(s.completed, 8);
    assert_eq!(s.batches, 2);
    assert_eq!(
        r.runs.iter().filter(|x| x.phase == "collect").count(),
        4,
        "4 probe + 4 collect runs at C=4"
    );
    assert!(r
        .runs
        .iter()
        .all(|x| x.correct.is_none() && x.score_label == "UNSCORED"));
    assert!(s.accuracy.is_none() && !s.score_available);
    assert!(r
        .runs
        .iter()
        .all(|x| x.completion_tokens == 64 && x.hit_max_tokens));
}

/// The example dataset shipped in the repository parses, and each item's scorer accepts its own
/// answer on the final line and rejects a wrong one and an answer that only appears earlier.
#[test]
fn example_dataset_is_consistent() {
    use servebench_core::task::{parse_dataset, score_content, ScoreSource};
    let text = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/tasks/arithmetic.jsonl"
    ));
    let items = parse_dataset(text).expect("dataset parses");
    assert_eq!(items.len(), 20);
    let ids: std::collections::BTreeSet<&str> = items.iter().map(|i| i.id.as_str()).collect();
    assert_eq!(ids.len(), 20, "ids are unique");
    let fa = ScoreSource::FinalAnswer;
    for it in &items {
        let answer = it
            .answer
            .as_deref()
            .expect("every example item has an answer");
        let right = format!("Let me think.\nFinal answer: {answer}\n");
        let wrong = format!("<think>Final answer: {answer}</think>\nFinal answer: 999999\n");
        let earlier = format!("I first thought {answer}.\nFinal answer: 7777\n");
        assert_eq!(
            score_content(it, None, fa, &right).unwrap(),
            Some(true),
            "{}",
            it.id
        );
        assert_eq!(
            score_content(it, None, fa, &wrong).unwrap(),
            Some(false),
            "{}",
            it.id
        );
        assert_eq!(
            score_content(it, None, fa, &earlier).unwrap(),
            Some(false),
            "{}",
            it.id
        );
    }
}
