//! End-to-end tests of `servebench report`, `servebench compare`, the `run --export-*` files,
//! the never-overwrite rule for results files, and the wording fixes of help and errors.
//!
//! The compare tests run the binary against the built-in simulator hosted in this process: two
//! runs of one configuration must show no significant difference, and a simulator whose decode
//! step is 20 % slower must be reported as a regression whose 95 % interval excludes 0.

use std::path::{Path, PathBuf};
use std::process::Command;

use servebench_report::compare::{compare, CompareOptions, IntervalMethod, Verdict};
use servebench_report::compare_metrics::CompareMetric;
use servebench_results::Results;
use servebench_sim::{Sim, SimConfig};

const BIN: &str = env!("CARGO_BIN_EXE_servebench");

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

fn run_in(dir: &Path, args: &[&str]) -> Out {
    let out = Command::new("timeout")
        .arg("180")
        .arg(BIN)
        .args(args)
        .current_dir(dir)
        .env_remove("SERVEBENCH_API_KEY")
        .env_remove("SERVEBENCH_DCP_SIZE")
        .env("XDG_CACHE_HOME", dir.join("cache"))
        .env("HOME", dir)
        .env("RUST_BACKTRACE", "1")
        .output()
        .expect("run servebench");
    let o = Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert!(
        !o.stderr.contains("panicked"),
        "servebench panicked: {}",
        o.stderr
    );
    o
}

fn data(name: &str) -> String {
    format!(
        "{}/../../tests/data/results/{name}",
        env!("CARGO_MANIFEST_DIR")
    )
}

const OLD: &str = "llm-decode-bench-0.4.18-vllm-cpu-tiny.json";
const SEED: &str = "seed-000-llm-decode-bench-0.4.29.txt";

#[test]
fn report_formats_on_old_tool_files() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for file in [OLD, SEED] {
        let f = data(file);
        let text = run_in(d, &["report", &f]);
        assert_eq!(text.code, 0, "{}", text.stderr);
        assert!(
            text.stdout.contains("Aggregate decode tok/s"),
            "{}",
            text.stdout
        );
        let md = run_in(d, &["report", &f, "--format", "md"]);
        assert_eq!(md.code, 0, "{}", md.stderr);
        assert!(md.stdout.contains("| ctx \\ C |"), "{}", md.stdout);
        let csv = run_in(d, &["report", &f, "--format", "csv"]);
        assert_eq!(csv.code, 0, "{}", csv.stderr);
        assert!(csv
            .stdout
            .starts_with("layer,context_tokens,context,concurrency,status,"));
        let html = d.join("r.html");
        let h = run_in(
            d,
            &[
                "report",
                &f,
                "--format",
                "html",
                "-o",
                html.to_str().unwrap(),
            ],
        );
        assert_eq!(h.code, 0, "{}", h.stderr);
        assert!(h.stdout.is_empty(), "-o still printed: {}", h.stdout);
        let page = std::fs::read_to_string(&html).unwrap();
        assert!(page.starts_with("<!DOCTYPE html>") && page.contains("<svg"));
        // JSON re-export reads back as servebench results.
        let j = run_in(d, &["report", &f, "--format", "json"]);
        assert_eq!(j.code, 0, "{}", j.stderr);
        let _: Results = serde_json::from_str(&j.stdout).unwrap();
    }
    let p = run_in(d, &["report", &data(OLD), "--percentiles", "50,90,99"]);
    assert_eq!(p.code, 0);
    assert!(
        p.stdout.contains("    p90 ") && p.stdout.contains("    p99 "),
        "{}",
        p.stdout
    );
    let bad = run_in(d, &["report", &data(OLD), "--percentiles", "50,abc"]);
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    assert!(
        bad.stderr.contains("--percentiles") && bad.stderr.contains("abc"),
        "{}",
        bad.stderr
    );
    let bad = run_in(d, &["report", &data(OLD), "--percentiles", "150"]);
    assert_eq!(bad.code, 2, "{}", bad.stderr);
}

#[test]
fn words_in_help_and_errors() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let help = run_in(d, &["run", "--help"]);
    assert!(
        !help.stdout.contains("SERVEBENCH_DCP_SIZE="),
        "{}",
        help.stdout
    );
    assert!(help.stdout.contains("--export-html"));
    let sim = run_in(d, &["sim", "--help"]);
    assert!(
        !sim.stdout.contains("Default `"),
        "sim --help gives a default twice:\n{}",
        sim.stdout
    );
    assert!(sim.stdout.contains("[default: 10]"));
    let neg = run_in(d, &["run", "--concurrency", "-1"]);
    assert_eq!(neg.code, 2, "{}", neg.stderr);
    assert!(
        neg.stderr.contains("--concurrency") && neg.stderr.contains("\"-1\""),
        "{}",
        neg.stderr
    );
    assert!(
        !neg.stderr.contains("unexpected argument"),
        "{}",
        neg.stderr
    );
    let top = d.join("array.json");
    std::fs::write(&top, "[]").unwrap();
    let v = run_in(d, &["validate", top.to_str().unwrap()]);
    assert_ne!(v.code, 0);
    assert!(
        !v.stderr.contains(" at \n") && !v.stderr.contains(" at  "),
        "{}",
        v.stderr
    );
    assert!(v.stderr.contains("top level"), "{}", v.stderr);
    // break-it round 6: `[1,2]` said "invalid type: integer `1`, expected a string"
    std::fs::write(&top, "[1,2]").unwrap();
    let v = run_in(d, &["validate", top.to_str().unwrap()]);
    assert_eq!(v.code, 1, "{}", v.stderr);
    assert!(
        v.stderr.contains("its top level is an array"),
        "{}",
        v.stderr
    );
    assert_eq!(v.stderr.lines().count(), 1, "{}", v.stderr);
}

/// Break-it round 6: `report` rendered files that `validate` rejects without a word.
#[test]
fn report_and_compare_warn_about_a_file_that_does_not_validate() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let clean = run_in(d, &["report", &data(OLD)]);
    assert_eq!(clean.code, 0, "{}", clean.stderr);
    assert!(!clean.stderr.contains("warning"), "{}", clean.stderr);
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(data(OLD)).unwrap()).unwrap();
    v["results"][0]["aggregate_tps"] = serde_json::json!(-5.0);
    let bad = d.join("bad.json");
    std::fs::write(&bad, v.to_string()).unwrap();
    for args in [
        vec!["report", bad.to_str().unwrap()],
        vec!["report", bad.to_str().unwrap(), "--format", "csv"],
        vec!["compare", &data(OLD), bad.to_str().unwrap()],
    ] {
        let o = run_in(d, &args);
        assert_eq!(o.code, 0, "{args:?}: {}", o.stderr);
        let warned: Vec<&str> = o
            .stderr
            .lines()
            .filter(|l| l.contains("does not pass `servebench validate`"))
            .collect();
        assert_eq!(warned.len(), 1, "{args:?}: {}", o.stderr);
        assert!(
            warned[0].contains("bad.json")
                && warned[0].contains(
                    "impossible values; first: impossible value at /results/0/aggregate_tps"
                ),
            "{}",
            warned[0]
        );
    }
}

fn sim(decode_base_ms: f64) -> Sim {
    Sim::spawn_thread(SimConfig {
        port: 0,
        record_truth: false,
        decode_base_ms,
        ..SimConfig::default()
    })
    .expect("start the simulator")
}

/// One short sustained run: C=4, context 0, a 3 s window, 48-token requests.
fn bench(dir: &Path, url: &str, out: &Path, extra: &[&str]) -> Out {
    let mut args = vec![
        "run",
        "--url",
        url,
        "--concurrency",
        "4",
        "--contexts",
        "0",
        "--duration",
        "3",
        "--stable-seconds",
        "0.5",
        "--decode-warmup-seconds",
        "0",
        "--cell-pause-seconds",
        "0",
        "--max-tokens",
        "48",
        "--skip-prefill",
        "-q",
        "-o",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let o = run_in(dir, &args);
    assert_eq!(o.code, 0, "run failed: {}", o.stderr);
    o
}

fn read(p: &Path) -> Results {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

#[test]
fn exports_rotation_and_compare_against_the_simulator() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let path = |n: &str| -> PathBuf { d.join(n) };
    let s = sim(20.0);
    let url = s.base_url();
    let exports = [
        "--export-csv",
        "r.csv",
        "--export-md",
        "r.md",
        "--export-html",
        "r.html",
        "--percentiles",
        "50,99",
    ];
    let first = bench(d, &url, &path("results.json"), &exports);
    assert!(
        !first.stderr.contains("already existed"),
        "{}",
        first.stderr
    );
    for f in ["r.csv", "r.md", "r.html"] {
        assert!(path(f).is_file(), "{f} not written");
    }
    assert!(std::fs::read_to_string(path("r.html"))
        .unwrap()
        .contains("<svg"));
    assert!(first.stdout.contains("    p99 "), "{}", first.stdout);
    // The same path again: the first results are kept as results.1.json, never overwritten.
    let second = bench(d, &url, &path("results.json"), &exports);
    assert!(
        second.stderr.contains("previous file is kept as"),
        "{}",
        second.stderr
    );
    for f in ["results.1.json", "r.1.csv", "r.1.md", "r.1.html"] {
        assert!(path(f).is_file(), "{f} not kept");
    }
    drop(s);

    // Same configuration twice: no significant difference in aggregate tok/s.
    let (a, b) = (read(&path("results.1.json")), read(&path("results.json")));
    let opts = CompareOptions::default();
    let same = compare(("a", &a), ("b", &b), &opts);
    let cell = same.cells.iter().find(|c| c.layer == "sustained").unwrap();
    assert!(cell.tps.ci_pct.is_some(), "no interval: {cell:?}");
    assert_eq!(
        cell.tps.verdict,
        Verdict::Same,
        "two runs of one configuration differ significantly: {cell:?}"
    );
    assert!(same.warnings.is_empty(), "{:?}", same.warnings);
    let gate = run_in(
        d,
        &[
            "compare",
            "results.1.json",
            "results.json",
            "--fail-if-slower",
            "5",
        ],
    );
    assert_eq!(gate.code, 0, "{}\n{}", gate.stdout, gate.stderr);
    assert!(gate.stdout.contains("request bootstrap"), "{}", gate.stdout);
    // issue 19: every headline metric is compared, and each can gate
    let gate = run_in(
        d,
        &[
            "compare",
            "results.1.json",
            "results.json",
            "--fail-if-slower",
            "tps=5,per_user=5,itl=5,e2e=5,itl_gap_p99=50",
        ],
    );
    assert_eq!(gate.code, 0, "{}\n{}", gate.stdout, gate.stderr);
    for m in [
        "Every metric",
        "per-user tok/s p50",
        "TTST p50",
        "ITL per-gap p99",
        "E2E latency p50",
    ] {
        assert!(gate.stdout.contains(m), "{m}: {}", gate.stdout);
    }

    // A simulator with a 20 % slower decode step: a regression whose interval excludes 0.
    let slow = sim(24.0);
    bench(d, &slow.base_url(), &path("slow.json"), &[]);
    drop(slow);
    let c = read(&path("slow.json"));
    let reg = compare(("a", &a), ("slow", &c), &opts);
    let cell = reg.cells.iter().find(|c| c.layer == "sustained").unwrap();
    let (lo, hi) = cell.tps.ci_pct.expect("an interval");
    assert_eq!(cell.tps.verdict, Verdict::Slower, "{cell:?}");
    assert!(
        hi < 0.0 && lo < hi,
        "interval [{lo}, {hi}] does not exclude 0"
    );
    let pct = cell.tps.pct.unwrap();
    assert!(
        (-25.0..=-10.0).contains(&pct),
        "Δ {pct}% for a 20 % slower decode step"
    );
    assert_eq!(cell.itl_p50.verdict, Verdict::Slower, "{cell:?}");
    for m in [CompareMetric::PerUser, CompareMetric::E2e] {
        let d = cell.metric(m).unwrap();
        assert_eq!(d.verdict, Verdict::Slower, "{m:?}: {d:?}");
        assert_eq!(d.method, IntervalMethod::RequestBootstrap, "{m:?}: {d:?}");
    }
    let gap = cell.metric(CompareMetric::ItlGapP99).unwrap();
    assert!(gap.pct.is_some_and(|p| p > 5.0), "{gap:?}");
    // the per-metric gate: per-token ITL 20 % slower fails `itl=10`, not `itl=40`
    let gate = run_in(
        d,
        &[
            "compare",
            "results.1.json",
            "slow.json",
            "--fail-if-slower",
            "itl=10",
        ],
    );
    assert_eq!(gate.code, 4, "{}\n{}", gate.stdout, gate.stderr);
    assert!(
        gate.stderr
            .contains("ITL p50 (per token) worse by at least 10% beyond the noise in 1 cell(s)"),
        "{}",
        gate.stderr
    );
    let gate = run_in(
        d,
        &[
            "compare",
            "results.1.json",
            "slow.json",
            "--fail-if-slower",
            "itl=40",
        ],
    );
    assert_eq!(gate.code, 0, "{}", gate.stderr);

    let gate = run_in(
        d,
        &[
            "compare",
            "results.1.json",
            "slow.json",
            "--fail-if-slower",
            "10",
        ],
    );
    assert_eq!(gate.code, 4, "{}\n{}", gate.stdout, gate.stderr);
    assert!(gate.stdout.contains("SLOWER"), "{}", gate.stdout);
    assert!(gate.stderr.contains("C=4 ctx=0"), "{}", gate.stderr);
    // Not slower by 30 %: the gate passes.
    let gate = run_in(
        d,
        &[
            "compare",
            "results.1.json",
            "slow.json",
            "--fail-if-slower",
            "30",
        ],
    );
    assert_eq!(gate.code, 0, "{}", gate.stderr);
    // break-it round 6: a cell the baseline measured that the new run did not (invalid here)
    // passed the gate
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path("results.json")).unwrap()).unwrap();
    for c in v["results"].as_array_mut().unwrap() {
        c["status"] = "invalid".into();
        c["status_reason"] = "usage_implausible: test".into();
        c["aggregate_tps"] = serde_json::Value::Null;
        c["per_request_avg_tps"] = serde_json::Value::Null;
    }
    std::fs::write(path("lost.json"), serde_json::to_vec(&v).unwrap()).unwrap();
    let gate = run_in(
        d,
        &[
            "compare",
            "results.1.json",
            "lost.json",
            "--fail-if-slower",
            "30",
        ],
    );
    assert_eq!(gate.code, 4, "{}\n{}", gate.stdout, gate.stderr);
    assert!(
        gate.stderr.contains("were not measured")
            && gate.stderr.contains("ok in the baseline, invalid here"),
        "{}",
        gate.stderr
    );
    // Markdown and HTML forms, three files at once.
    let md = run_in(
        d,
        &[
            "compare",
            "results.1.json",
            "results.json",
            "slow.json",
            "--format",
            "md",
        ],
    );
    assert_eq!(md.code, 0, "{}", md.stderr);
    assert_eq!(md.stdout.matches("## A = ").count(), 2, "{}", md.stdout);
    let html = run_in(
        d,
        &[
            "compare",
            "results.1.json",
            "slow.json",
            "--format",
            "html",
            "-o",
            "cmp.html",
        ],
    );
    assert_eq!(html.code, 0, "{}", html.stderr);
    let page = std::fs::read_to_string(path("cmp.html")).unwrap();
    assert!(page.contains("<svg") && page.contains("SLOWER"));
}

#[test]
fn compare_warns_when_runs_are_not_comparable() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let seed = data(SEED);
    let old = data(OLD);
    let out = run_in(d, &["compare", &old, &seed]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    for what in ["model differs", "max_tokens differs"] {
        assert!(out.stdout.contains(what), "{}", out.stdout);
        assert!(out.stderr.contains(what), "{}", out.stderr);
    }
    let one = run_in(d, &["compare", &old]);
    assert_eq!(one.code, 2, "{}", one.stderr);
    for wrong in ["-3", "ttft=-1", "speed=5", "ttft=5,ttft=6"] {
        let bad = run_in(d, &["compare", &old, &old, "--fail-if-slower", wrong]);
        assert_eq!(bad.code, 2, "{wrong}: {}", bad.stderr);
        assert_eq!(
            bad.stderr.trim().lines().count(),
            1,
            "{wrong}: {}",
            bad.stderr
        );
        assert!(bad.stderr.contains("--fail-if-slower"), "{}", bad.stderr);
    }
}
