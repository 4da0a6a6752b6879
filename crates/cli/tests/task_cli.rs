//! End-to-end tests of `servebench task` (the binary) against the built-in simulator hosted in
//! this test process: the report sections, the JSON against `schema/task.schema.json`,
//! per-item scoring of the example dataset, `--save-text`, the adaptive search phases, failed
//! requests (exit code 3, results still written) and one-line errors for bad input.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use servebench_core::task::TASK_SCHEMA_JSON;
use servebench_sim::{Sim, SimConfig};

const BIN: &str = env!("CARGO_BIN_EXE_servebench");
const TIMEOUT: Duration = Duration::from_secs(90);

fn sim(cfg: SimConfig) -> Sim {
    Sim::spawn_thread(SimConfig {
        port: 0,
        decode_base_ms: 1.0,
        ..cfg
    })
    .expect("start the simulator")
}

struct Out {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn servebench(args: &[&str]) -> Out {
    let mut child = Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn servebench");
    let start = Instant::now();
    loop {
        if let Some(_status) = child.try_wait().expect("wait") {
            break;
        }
        if start.elapsed() > TIMEOUT {
            let _ = child.kill();
            panic!("servebench {args:?} ran longer than {TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = child.wait_with_output().expect("output");
    Out {
        code: o.status.code(),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

fn validate(path: &Path) -> Value {
    let v: Value = serde_json::from_str(&std::fs::read_to_string(path).expect("results written"))
        .expect("results JSON");
    let schema: Value = serde_json::from_str(TASK_SCHEMA_JSON).unwrap();
    let val = jsonschema::validator_for(&schema).expect("schema compiles");
    let errors: Vec<String> = val
        .iter_errors(&v)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "schema violations: {errors:#?}");
    assert_eq!(v["schema_version"], "1.0");
    assert_eq!(v["metadata"]["tool"], "servebench");
    assert_eq!(v["metadata"]["mode"], "completion_stats");
    v
}

fn example_dataset() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/tasks/arithmetic.jsonl")
}

#[test]
fn fixed_concurrency_report_json_and_save_text() {
    let sim = sim(SimConfig {
        answer: Some("42".into()),
        answer_accuracy: 0.75,
        eos_after_min: Some(10),
        eos_after_max: Some(40),
        reasoning_tokens: 4,
        ..SimConfig::default()
    });
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("task.json");
    let url = sim.base_url();
    let o = servebench(&[
        "task",
        "--url",
        &url,
        "--prompt",
        "What is 6 x 7?",
        "--answer",
        "42",
        "--concurrency",
        "4",
        "--runs",
        "8",
        "--max-tokens",
        "30",
        "--save-text",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.code, Some(0), "stderr: {}", o.stderr);
    let v = validate(&out);
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 8);
    assert!(runs
        .iter()
        .all(|r| r["phase"] == "profile" && r["ok"] == true));
    assert!(runs.iter().all(|r| r["content_text"].is_string()
        && r["reasoning_text"]
            .as_str()
            .unwrap()
            .contains("So the answer is 42.")));
    assert_eq!(v["selected_concurrency"], 4);
    let s = &v["selected_summary"];
    assert_eq!(s["attempted"], 8);
    // Requests 2..=9 (the scout was request 1): ⌈n·0.75⌉ − ⌈(n−1)·0.75⌉ over n = 2..9 is 6 of 8,
    // minus those cut by max_tokens 30 before their answer line.
    let truth = sim.truth();
    let truth_correct = truth
        .iter()
        .skip(1)
        .filter(|t| t.answer_correct == Some(true))
        .count();
    assert_eq!(s["accuracy"]["correct"], truth_correct);
    assert_eq!(s["accuracy"]["scored"], 8);
    assert_eq!(
        s["hit_max_tokens"],
        truth
            .iter()
            .skip(1)
            .filter(|t| t.finish_reason.as_deref() == Some("length"))
            .count()
    );
    assert!(v["prefill_scout"]["phase"] == "prefill_scout");
    assert_eq!(v["level_summaries"].as_array().unwrap().len(), 1);
    // The text report.
    for want in [
        "Concurrency levels",
        "Selected C=4: 8 runs, 8 ok, 0 errors",
        "completion tokens",
        "TTFT (s)",
        "max-token hits:",
        "system throughput:",
        "Wilson 95 % CI",
        "Results JSON:",
    ] {
        assert!(
            o.stdout.contains(want),
            "missing {want:?} in:\n{}",
            o.stdout
        );
    }
    if truth_correct < 8 {
        assert!(o.stdout.contains("Wrong answers"), "{}", o.stdout);
    }
    assert!(
        o.stderr.contains("profile C=4"),
        "progress lines: {}",
        o.stderr
    );
}

#[test]
fn example_dataset_is_scored_per_item() {
    // The simulator always answers 42: exactly the items whose answer is 42 are correct.
    let sim = sim(SimConfig {
        answer: Some("42".into()),
        ..SimConfig::default()
    });
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("ds.json");
    let url = sim.base_url();
    let ds = example_dataset();
    let o = servebench(&[
        "task",
        "--url",
        &url,
        "--dataset",
        ds.to_str().unwrap(),
        "--concurrency",
        "8",
        "--max-tokens",
        "24",
        "--no-prefill-scout",
        "-q",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.code, Some(0), "stderr: {}", o.stderr);
    assert!(o.stderr.is_empty(), "--quiet: {}", o.stderr);
    let v = validate(&out);
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 20, "one run per item by default");
    for r in runs {
        assert_eq!(r["final_answer"], "Final answer: 42");
        let expect = r["expected_answer"] == "42";
        assert_eq!(r["correct"], expect, "{r}");
        assert!(r.get("content_text").is_none(), "no --save-text");
    }
    let ids: std::collections::BTreeSet<&str> = runs
        .iter()
        .map(|r| r["item_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 20);
    assert_eq!(v["selected_summary"]["accuracy"]["correct"], 2);
    assert_eq!(v["wrong_runs"].as_array().unwrap().len(), 18);
    assert!(v["metadata"]["prompt_source"]
        .as_str()
        .unwrap()
        .starts_with("dataset:"));
    assert_eq!(v["metadata"]["dataset_items"], 20);
}

#[test]
fn adaptive_search_phases_and_unscored_runs() {
    let sim = sim(SimConfig {
        eos_after_min: Some(8),
        eos_after_max: Some(16),
        ..SimConfig::default()
    });
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("a.json");
    let url = sim.base_url();
    let o = servebench(&[
        "task",
        "--url",
        &url,
        "--prompt",
        "hello",
        "--concurrency-levels",
        "2,1",
        "--min-results",
        "5",
        "--no-auto-stop",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.code, Some(0), "stderr: {}", o.stderr);
    let v = validate(&out);
    let levels: Vec<u64> = v["level_summaries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["concurrency"].as_u64().unwrap())
        .collect();
    assert_eq!(levels, vec![1, 2]);
    let c = v["selected_concurrency"].as_u64().unwrap();
    let phases: Vec<&str> = v["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["concurrency"] == c)
        .map(|r| r["phase"].as_str().unwrap())
        .collect();
    assert!(
        phases.contains(&"probe") && phases.contains(&"collect"),
        "{phases:?}"
    );
    assert_eq!(v["selected_summary"]["completed"], 5);
    assert!(v["selected_summary"]["accuracy"].is_null());
    assert_eq!(v["metadata"]["score_available"], false);
    assert!(o.stdout.contains("accuracy: not scored"), "{}", o.stdout);
}

#[test]
fn failed_requests_exit_3_with_results() {
    let sim = sim(SimConfig {
        fault_http_status: Some(500),
        fault_every: 2,
        ..SimConfig::default()
    });
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("f.json");
    let url = sim.base_url();
    let o = servebench(&[
        "task",
        "--url",
        &url,
        "--prompt",
        "hi",
        "--concurrency",
        "2",
        "--runs",
        "4",
        "--max-tokens",
        "8",
        "--no-prefill-scout",
        "-q",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.code, Some(3), "stderr: {}", o.stderr);
    let v = validate(&out);
    assert_eq!(v["all_summary"]["errors"], 2);
    assert_eq!(v["all_summary"]["score_labels"]["ERROR"], 2);
    assert!(o.stdout.contains("failed request(s)"), "{}", o.stdout);
    assert!(o.stderr.contains("2 of 4 requests failed"), "{}", o.stderr);
}

#[test]
fn bad_input_is_one_error_line() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(&bad, "{\"prompt\": \"ok\"}\n{\"answer\": 3}\n").unwrap();
    let o = servebench(&[
        "task",
        "--url",
        "http://127.0.0.1:9",
        "--dataset",
        bad.to_str().unwrap(),
    ]);
    assert_eq!(o.code, Some(1));
    let lines: Vec<&str> = o
        .stderr
        .lines()
        .filter(|l| l.starts_with("error:"))
        .collect();
    assert_eq!(lines.len(), 1, "{}", o.stderr);
    assert!(
        lines[0].contains("line 2") && lines[0].contains("prompt"),
        "{}",
        lines[0]
    );

    let o = servebench(&[
        "task",
        "--url",
        "http://127.0.0.1:9",
        "--prompt",
        "x",
        "--correct-regex",
        "(",
    ]);
    assert_eq!(o.code, Some(2), "a bad flag value: {}", o.stderr);
    assert!(
        o.stderr.contains("error:") && o.stderr.contains("--correct-regex"),
        "{}",
        o.stderr
    );

    // No prompt at all: a usage error from the flag parser.
    let o = servebench(&["task", "--url", "http://127.0.0.1:9"]);
    assert_eq!(o.code, Some(2), "{}", o.stderr);

    // Nothing listening.
    let o = servebench(&["task", "--url", "http://127.0.0.1:9", "--prompt", "x", "-q"]);
    assert_eq!(o.code, Some(1));
    assert!(
        o.stderr.contains("error:") && !o.stderr.contains("panicked"),
        "{}",
        o.stderr
    );
}

#[test]
fn example_dataset_on_the_embedded_simulator_scores_the_stated_fraction() {
    // No --url: the built-in simulator is given the dataset's answers and states the right one
    // in 70 % of the requests, by design, and the output says so.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("ds.json");
    let ds = example_dataset();
    let o = servebench(&[
        "task",
        "--dataset",
        ds.to_str().unwrap(),
        "--concurrency",
        "8",
        "--runs",
        "40",
        "--no-prefill-scout",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.code, Some(0), "stderr: {}", o.stderr);
    assert!(
        o.stdout
            .contains("simulator: answers ~70 % of items correctly by design"),
        "{}",
        o.stdout
    );
    let v = validate(&out);
    let correct = v["selected_summary"]["accuracy"]["correct"]
        .as_u64()
        .unwrap();
    // 40 consecutive requests hold the fraction to within one request.
    assert!((27..=29).contains(&correct), "{correct} of 40 correct");
}
