//! `servebench run --request-rate … --slo …` end to end against the simulator (hosted in this
//! process): the results JSON validates against the schema and holds the rate rows; a bad
//! `--slo` is one `error:` line and exit 2; `--rate-search` writes every probe as a row.

use std::process::Output;
use std::time::Duration;

use serde_json::Value;
use servebench_sim::{Sim, SimConfig};

mod common;
use common::{assert_schema_valid as validate, isolated, wait_for};

fn sim() -> Sim {
    common::default_sim()
}

/// Runs the binary with `args` (isolated from the user's environment, in a temporary
/// directory), killing it after `limit`.
fn run(args: &[&str], limit: Duration) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let child = isolated(dir.path())
        .args(args)
        .env("CI", "1")
        .spawn()
        .expect("spawn servebench");
    let exit = wait_for(child, limit);
    Output {
        status: exit.finished(limit),
        stdout: exit.stdout.into_bytes(),
        stderr: exit.stderr.into_bytes(),
    }
}

const COMMON: &[&str] = &[
    "--contexts",
    "0",
    "--skip-prefill",
    "--decode-warmup-seconds",
    "0",
    "--max-tokens",
    "16",
    "--no-hw-monitor",
    "--seed",
    "3",
];

#[test]
fn request_rate_with_slo_writes_valid_rate_rows() {
    let s = sim();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.json");
    let csv = dir.path().join("r.csv");
    let url = s.base_url();
    let mut args = vec![
        "run",
        "--url",
        &url,
        "--request-rate",
        "10,20",
        "--arrival",
        "constant",
        "--duration",
        "1",
        "--slo",
        "ttft_p99=500ms,itl_p99=50ms,e2e_p90=10s",
        "-o",
        out.to_str().unwrap(),
        "--export-csv",
        csv.to_str().unwrap(),
    ];
    args.extend_from_slice(COMMON);
    let o = run(&args, Duration::from_secs(90));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "exit {:?}\n{stdout}\n{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        stdout.contains("Open-loop request rate"),
        "the report shows the rate table:\n{stdout}"
    );
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    validate(&v);
    let rows = v["rate_results"].as_array().expect("rate_results");
    assert_eq!(rows.len(), 2);
    for (row, rate) in rows.iter().zip([10.0, 20.0]) {
        assert_eq!(row["offered_rate"], rate);
        assert_eq!(row["requests_scheduled"], rate as u64, "{row}");
        assert_eq!(row["requests_completed"], row["requests_sent"]);
        assert_eq!(row["status"], "ok");
        assert_eq!(row["slo"].as_array().unwrap().len(), 3);
        assert_eq!(row["slo_met"], true, "{row}");
        assert!(row["goodput"].as_f64().unwrap() > 0.0);
        assert_eq!(row["seed"], 3);
        // the row's own configuration, as asked (core-rate survivors: `row_header`)
        assert_eq!(row["context_tokens"], 0, "{row}");
        assert_eq!(row["arrival"], "constant", "{row}");
        assert_eq!(row["duration"], 1.0, "{row}");
        assert!(row["max_concurrency"].is_null(), "uncapped: {row}");
        assert!(row["search_step"].is_null(), "not a search: {row}");
    }
    assert!(
        v["results"].as_array().unwrap().is_empty(),
        "no matrix in rate mode"
    );
    assert!(std::fs::read_to_string(&csv)
        .unwrap()
        .contains("offered_rate"));
}

#[test]
fn a_bad_slo_is_one_line_and_exit_2() {
    for bad in ["ttft_p99=5", "latency_p99=5ms", "ttft_p101=5ms"] {
        let o = run(
            &[
                "run",
                "--request-rate",
                "5",
                "--slo",
                bad,
                "--duration",
                "1",
            ],
            Duration::from_secs(20),
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{bad}: {err}");
        let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "{bad}: one line expected:\n{err}");
        assert!(
            lines[0].starts_with("error:") && lines[0].contains("--slo"),
            "{bad}: {err}"
        );
        assert!(!err.contains("panicked"));
    }
}

#[test]
fn matrix_flags_with_a_request_rate_are_usage_errors() {
    for (extra, needle) in [
        (&["--concurrency", "4"][..], "--max-concurrency"),
        (&["--request-count", "10"], "--request-count"),
        (
            &["--arrival", "gamma", "--burstiness", "-1"],
            "--burstiness",
        ),
    ] {
        let mut args = vec!["run", "--request-rate", "5", "--duration", "1"];
        args.extend_from_slice(extra);
        let o = run(&args, Duration::from_secs(20));
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{extra:?}: {err}");
        assert!(err.contains(needle), "{extra:?}: {err}");
    }
    // A row too large to draw is refused before anything is sent; search and drain flags
    // without their mode are refused, not ignored.
    for (args, needle) in [
        (
            &["run", "--request-rate", "1e12", "--duration", "1"][..],
            "--request-rate",
        ),
        (&["run", "--rate-search-start", "2"], "--rate-search"),
        (
            &["run", "--request-rate", "5", "--rate-search-max-rate", "9"],
            "--rate-search",
        ),
        (
            &["run", "--rate-drain-seconds", "2"],
            "--rate-drain-seconds",
        ),
    ] {
        let o = run(args, Duration::from_secs(20));
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    // Rate flags without a rate are an error too, not silently ignored.
    let o = run(
        &["run", "--slo", "ttft_p99=1s", "--duration", "1"],
        Duration::from_secs(20),
    );
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn rate_search_writes_every_probe_as_a_row() {
    let s = sim();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("s.json");
    let url = s.base_url();
    let mut args = vec![
        "run",
        "--url",
        &url,
        "--rate-search",
        "--slo",
        "ttft_p50=1s",
        "--rate-search-start",
        "4",
        "--rate-search-max-probes",
        "3",
        "--duration",
        "0.5",
        "-o",
        out.to_str().unwrap(),
        "-q",
    ];
    args.extend_from_slice(COMMON);
    let o = run(&args, Duration::from_secs(90));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    validate(&v);
    let rows = v["rate_results"].as_array().unwrap();
    let search = &v["rate_search"][0];
    assert_eq!(search["stopped"], "max_probes", "{search}");
    let probes = search["probes"].as_array().unwrap();
    assert_eq!(probes.len(), 3);
    assert_eq!(rows.len(), 3);
    // The simulator answers a light load well within 1 s: 4, 8, 16 req/s all pass.
    for (i, (row, p)) in rows.iter().zip(probes).enumerate() {
        assert_eq!(row["offered_rate"], p["rate"]);
        assert_eq!(row["search_step"], i as u64 + 1);
        assert_eq!(row["slo_met"], p["met"]);
    }
    assert_eq!(
        probes
            .iter()
            .map(|p| p["rate"].as_f64().unwrap())
            .collect::<Vec<_>>(),
        [4.0, 8.0, 16.0]
    );
    assert_eq!(search["best_rate"], 16.0);
}

/// A rate row whose every request failed is status `error`, and the run exits 3 (as a failed
/// matrix cell does), with the results written.
#[test]
fn failed_rate_rows_exit_3() {
    let s = common::sim(SimConfig {
        fault_http_status: Some(500),
        fault_every: 1,
        ..Default::default()
    });
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.json");
    let url = s.base_url();
    let mut args = vec![
        "run",
        "--url",
        &url,
        "--request-rate",
        "3",
        "--duration",
        "1",
        "-o",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(COMMON);
    let o = run(&args, Duration::from_secs(60));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(err.contains("request-rate rows failed"), "{err}");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    validate(&v);
    assert_eq!(v["rate_results"][0]["status"], "error");
}

/// The prefill layer runs in rate mode only when asked for: no `prefill` rows by default, a row
/// per context with `--prefill-contexts`.
#[test]
fn rate_mode_runs_prefill_only_when_asked() {
    let s = sim();
    let url = s.base_url();
    let dir = tempfile::tempdir().unwrap();
    let prefill_of = |extra: &[&str]| -> Value {
        let out = dir.path().join("p.json");
        let mut args = vec![
            "run",
            "--url",
            &url,
            "--request-rate",
            "20",
            "--duration",
            "0.5",
            "--contexts",
            "0",
            "--decode-warmup-seconds",
            "0",
            "--max-tokens",
            "8",
            "--no-hw-monitor",
            "-o",
            out.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let o = run(&args, Duration::from_secs(90));
        assert!(
            o.status.success(),
            "{extra:?}: exit {:?}\n{}",
            o.status,
            String::from_utf8_lossy(&o.stderr)
        );
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
        validate(&v);
        assert_eq!(v["rate_results"].as_array().map(Vec::len), Some(1));
        v["prefill"].clone()
    };
    let none = prefill_of(&[]);
    assert!(
        none.as_object().is_none_or(|m| m.is_empty()),
        "no prefill rows by default in rate mode: {none}"
    );
    let asked = prefill_of(&["--prefill-contexts", "1k"]);
    assert_eq!(
        asked["1024"]["status"], "ok",
        "the asked-for context is measured: {asked}"
    );
}

/// `--resume` of an open-loop file: the kept rows are counted on standard error; a resume with
/// another open-loop flag is refused with one line naming that flag and both values.
#[test]
fn rate_resume_keeps_rows_and_names_a_changed_flag() {
    let s = sim();
    let url = s.base_url();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.json");
    let file = out.to_str().unwrap();
    let base = [
        "run",
        "--url",
        &url,
        "--request-rate",
        "20",
        "--arrival",
        "constant",
        "--duration",
        "0.5",
    ];
    let with = |extra: &[&str]| {
        let mut args: Vec<&str> = base.to_vec();
        args.extend_from_slice(extra);
        args.extend_from_slice(COMMON);
        run(&args, Duration::from_secs(90))
    };
    let first = with(&["-o", file]);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let again = with(&["--resume", file]);
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(again.status.success(), "{stderr}");
    assert!(stderr.contains("1 open-loop rate rows"), "{stderr}");
    let bad = {
        let mut args: Vec<&str> = base.to_vec();
        args[5] = "--arrival";
        args[6] = "poisson";
        args.extend_from_slice(&["--resume", file]);
        args.extend_from_slice(COMMON);
        run(&args, Duration::from_secs(90))
    };
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(bad.status.code(), Some(2), "{stderr}");
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    assert!(
        errors[0].contains("--arrival differs: the file has constant, this run poisson"),
        "{}",
        errors[0]
    );
    assert!(
        !errors[0].contains('{'),
        "no JSON in the message: {}",
        errors[0]
    );
}
