//! End-to-end tests of the `servebench` binary.
//!
//! Each test runs the real binary as a child process. The server under test is the built-in
//! simulator, hosted in this test process on its own thread (`Sim::spawn_thread`, port 0), so
//! fault injection, API keys and model lengths are set per test. Runs are kept short (1 s
//! windows, 0.5 s readiness, no warmup, no pauses, 64-token requests, one or two cells).
//!
//! Every failing command must exit non-zero with exactly one `error:` line that says what is
//! wrong, and must never panic.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;
use servebench_sim::SimConfig;

mod common;

use common::{assert_schema_valid, cell, cells, default_sim, drain, sim};

/// Flags that keep every cell around 1.5 s.
const SHORT: &[&str] = &[
    "--duration",
    "1",
    "--stable-seconds",
    "0.5",
    "--decode-warmup-seconds",
    "0",
    "--cell-pause-seconds",
    "0",
    "--max-tokens",
    "64",
];

/// Upper bound for one short benchmark run (it normally takes a few seconds).
const RUN_TIMEOUT: Duration = Duration::from_secs(60);
/// Upper bound for a command that should fail or finish at once.
const QUICK_TIMEOUT: Duration = Duration::from_secs(20);

// ------------------------------------------------------------------------------------------
// Harness

/// What a finished child process left behind.
#[derive(Debug)]
struct Out {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

impl Out {
    fn code(&self) -> Option<i32> {
        self.status.code()
    }

    /// Panics with the whole output unless the exit code is `want`.
    #[track_caller]
    fn expect_code(&self, want: i32) -> &Self {
        assert_eq!(
            self.code(),
            Some(want),
            "exit code\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.stdout,
            self.stderr
        );
        self.no_panic()
    }

    #[track_caller]
    fn no_panic(&self) -> &Self {
        for text in [&self.stdout, &self.stderr] {
            assert!(
                !text.contains("panicked") && !text.contains("stack backtrace"),
                "the binary panicked\n--- stdout ---\n{}\n--- stderr ---\n{}",
                self.stdout,
                self.stderr
            );
        }
        self
    }

    /// The one `error:` line of stderr; asserts there is exactly one and that it contains
    /// every word of `words`.
    #[track_caller]
    fn error_line(&self, words: &[&str]) -> String {
        self.no_panic();
        let lines: Vec<&str> = self
            .stderr
            .lines()
            .filter(|l| l.starts_with("error:"))
            .collect();
        assert_eq!(
            lines.len(),
            1,
            "expected exactly one `error:` line on stderr:\n{}",
            self.stderr
        );
        let line = lines[0];
        for w in words {
            assert!(
                line.contains(w),
                "error line does not mention {w:?}: {line}"
            );
        }
        line.to_string()
    }

    /// A runtime error (not a flag parse error): the `error:` line is the last line of stderr,
    /// so nothing of the message spilled onto further lines.
    #[track_caller]
    fn runtime_error(&self, code: i32, words: &[&str]) -> String {
        self.expect_code(code);
        let line = self.error_line(words);
        let last = self.stderr.lines().rev().find(|l| !l.trim().is_empty());
        assert_eq!(
            last,
            Some(line.as_str()),
            "the error is not the last line of stderr:\n{}",
            self.stderr
        );
        line
    }

    /// A flag error reported by the argument parser: one `error:` line, then only clap's
    /// usage hint (`tip:`, `Usage:`, `For more information`).
    #[track_caller]
    fn usage_error(&self, words: &[&str]) -> String {
        assert!(
            matches!(self.code(), Some(c) if c != 0),
            "expected a non-zero exit code, got {:?}\n{}",
            self.code(),
            self.stderr
        );
        let line = self.error_line(words);
        for l in self
            .stderr
            .lines()
            .skip_while(|l| !l.starts_with("error:"))
            .skip(1)
        {
            let t = l.trim();
            assert!(
                t.is_empty()
                    || t.starts_with("tip:")
                    || t.starts_with("Usage:")
                    || t.starts_with("For more information"),
                "unexpected stderr line after the error: {l:?}\n{}",
                self.stderr
            );
        }
        line
    }
}

/// Waits for `child` at most `timeout`; kills it and panics when it overruns.
fn wait(
    child: Child,
    stdout: JoinHandle<String>,
    stderr: JoinHandle<String>,
    timeout: Duration,
) -> Out {
    let e = common::wait_drained(child, stdout, stderr, timeout);
    Out {
        status: e.finished(timeout),
        stdout: e.stdout,
        stderr: e.stderr,
    }
}

/// A scratch directory for one test: the working directory, cache and output of its commands.
struct Bench {
    dir: tempfile::TempDir,
}

impl Bench {
    fn new() -> Self {
        Bench {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Default results path of [`Bench::bench`].
    fn output(&self) -> PathBuf {
        self.path("results.json")
    }

    /// A `servebench` command isolated from the user's environment (no API key, cache in the
    /// scratch directory, backtraces on so a panic cannot hide).
    fn command(&self, args: &[&str]) -> Command {
        let mut c = common::isolated(self.dir.path());
        c.args(args);
        c
    }

    fn spawn(&self, args: &[&str], env: &[(&str, &str)]) -> Child {
        let mut c = self.command(args);
        for (k, v) in env {
            c.env(k, v);
        }
        c.spawn().expect("spawn servebench")
    }

    fn run_env(&self, args: &[&str], env: &[(&str, &str)], timeout: Duration) -> Out {
        let mut child = self.spawn(args, env);
        let out = drain(child.stdout.take().expect("stdout"), None);
        let err = drain(child.stderr.take().expect("stderr"), None);
        wait(child, out, err, timeout)
    }

    fn run(&self, args: &[&str]) -> Out {
        self.run_env(args, &[], RUN_TIMEOUT)
    }

    /// `servebench run --url URL <SHORT> -o results.json <extra>`.
    fn bench_env(&self, url: &str, extra: &[&str], env: &[(&str, &str)]) -> Out {
        let output = self.output();
        let mut args: Vec<&str> = vec!["run", "--url", url];
        args.extend_from_slice(SHORT);
        args.extend_from_slice(&["-o", output.to_str().expect("utf-8 path")]);
        args.extend_from_slice(extra);
        self.run_env(&args, env, RUN_TIMEOUT)
    }

    fn bench(&self, url: &str, extra: &[&str]) -> Out {
        self.bench_env(url, extra, &[])
    }

    /// The results JSON of the last run, checked against the schema.
    fn results(&self) -> Value {
        read_valid_results(&self.output())
    }
}

fn read_valid_results(path: &Path) -> Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("results file {} not written: {e}", path.display()));
    let v: Value = serde_json::from_str(&text).expect("results file is JSON");
    assert_schema_valid(&v);
    v
}

fn status(cell: &Value) -> &str {
    cell["status"].as_str().expect("status string")
}

fn reason(cell: &Value) -> &str {
    cell["status_reason"].as_str().unwrap_or("")
}

#[track_caller]
fn assert_ok_cell(v: &Value, c: u64, ctx: u64) {
    let r = cell(v, c, ctx);
    assert_eq!(status(r), "ok", "C={c} ctx={ctx}: {r:#}");
    let tps = r["aggregate_tps"].as_f64().expect("aggregate_tps");
    assert!(tps > 0.0, "C={c} ctx={ctx}: aggregate_tps {tps}");
}

// ------------------------------------------------------------------------------------------
// 1. Flags

#[test]
fn invalid_flags_fail_with_one_clear_line() {
    let b = Bench::new();
    let url = "http://127.0.0.1:1";

    let out = b.run_env(&["run", "--bogus"], &[], QUICK_TIMEOUT);
    out.usage_error(&["--bogus"]);
    // issue 17 break-it round 4: --run-burst was ignored with --request-count
    let out = b.run_env(
        &["run", "--request-count", "2", "--run-burst"],
        &[],
        QUICK_TIMEOUT,
    );
    out.usage_error(&["--run-burst", "--request-count"]);

    let out = b.run_env(
        &["run", "--url", url, "--concurrency", "0"],
        &[],
        QUICK_TIMEOUT,
    );
    out.runtime_error(2, &["--concurrency", "≥ 1"]);

    let out = b.run_env(
        &["run", "--url", url, "--contexts", "abc"],
        &[],
        QUICK_TIMEOUT,
    );
    out.runtime_error(2, &["--contexts", "abc"]);

    let out = b.run_env(&["run", "--url", url, "--duration=-1"], &[], QUICK_TIMEOUT);
    out.runtime_error(2, &["--duration", "-1"]);

    let out = b.run_env(
        &["run", "--url", url, "--batch-timeout", "-5"],
        &[],
        QUICK_TIMEOUT,
    );
    out.runtime_error(2, &["--batch-timeout", "-5"]);

    let out = b.run_env(
        &["run", "--url", url, "--duration", "0"],
        &[],
        QUICK_TIMEOUT,
    );
    out.runtime_error(2, &["--duration"]);

    let out = b.run_env(&["run", "--url", "ftp://x"], &[], QUICK_TIMEOUT);
    out.runtime_error(2, &["--url", "ftp://x", "http://"]);

    // Credentials in the URL are refused (exit 2) and never repeated: not in the error, not
    // in a file (issue 17: secrets never written).
    for args in [
        &["run", "--url", "http://user:CANARYx9@127.0.0.1:1"][..],
        &["run", "--host", "u:CANARYx9@127.0.0.1", "--port", "1"][..],
        &["run", "--url", "http://u:p@127.0.0.1:1/?api_key=CANARYx9"][..],
    ] {
        let out = b.run_env(args, &[], QUICK_TIMEOUT);
        let line = out.runtime_error(2, &["credentials", "***@127.0.0.1"]);
        assert!(!line.contains("CANARYx9"), "{line}");
        assert!(!out.stderr.contains("CANARYx9"), "{}", out.stderr);
        assert!(!out.stdout.contains("CANARYx9"), "{}", out.stdout);
    }
    // So is a query string or fragment (a key in `?api_key=`): it was appended to, and then
    // split by, every API path, and the error printed it.
    for url in [
        "http://127.0.0.1:1/?api_key=CANARYx9",
        "http://127.0.0.1:1/v1#CANARYx9",
    ] {
        let out = b.run_env(&["run", "--url", url], &[], QUICK_TIMEOUT);
        let line = out.runtime_error(2, &["--url", "query string or fragment"]);
        assert!(!line.contains("CANARYx9"), "{line}");
        assert!(!out.stderr.contains("CANARYx9"), "{}", out.stderr);
        assert!(!out.stdout.contains("CANARYx9"), "{}", out.stdout);
    }

    // None of them got as far as writing results.
    assert!(!b.path("benchmark_results.json").exists());
}

/// `--duration -1` (space-separated) is read by clap as an unknown flag `-1`: the user gets
/// "unexpected argument '-1' found" instead of the range check.
#[test]
fn negative_duration_names_the_flag() {
    let b = Bench::new();
    let out = b.run_env(
        &["run", "--url", "http://127.0.0.1:1", "--duration", "-1"],
        &[],
        QUICK_TIMEOUT,
    );
    out.runtime_error(2, &["--duration", "-1"]);
}

#[test]
fn negative_duration_is_rejected() {
    // Whatever the wording (see `negative_duration_names_the_flag`), it fails cleanly.
    let b = Bench::new();
    let out = b.run_env(
        &["run", "--url", "http://127.0.0.1:1", "--duration", "-1"],
        &[],
        QUICK_TIMEOUT,
    );
    out.usage_error(&["-1"]);
}

// ------------------------------------------------------------------------------------------
// 2–4. Startup failures

#[test]
fn unreachable_server() {
    let b = Bench::new();
    let out = b.bench(
        "http://127.0.0.1:1",
        &["--concurrency", "1", "--contexts", "0"],
    );
    out.runtime_error(1, &["cannot reach", "127.0.0.1:1"]);
    assert!(
        !b.output().exists(),
        "no results for a run that never started"
    );
}

#[test]
fn api_key_missing_wrong_and_right() {
    const KEY: &str = "sb-test-secret-7f3a";
    let s = sim(SimConfig {
        api_key: Some(KEY.into()),
        ..Default::default()
    });
    let url = s.base_url();
    let b = Bench::new();
    let small = ["--concurrency", "1", "--contexts", "0"];

    let out = b.bench(&url, &small);
    out.runtime_error(1, &["401", "--api-key"]);

    let mut args = small.to_vec();
    args.extend(["--api-key", "wrong"]);
    let out = b.bench(&url, &args);
    let line = out.runtime_error(1, &["rejected", "401"]);
    assert!(!line.contains("--api-key wrong"), "{line}");

    let mut args = small.to_vec();
    args.extend(["--api-key", KEY]);
    b.bench(&url, &args).expect_code(0);
    let v = b.results();
    assert_ok_cell(&v, 1, 0);
    let text = std::fs::read_to_string(b.output()).unwrap();
    assert!(!text.contains(KEY), "the API key leaked into the results");
    std::fs::remove_file(b.output()).unwrap();

    let out = b.bench_env(&url, &small, &[("SERVEBENCH_API_KEY", KEY)]);
    out.expect_code(0);
    assert!(!out.stdout.contains(KEY) && !out.stderr.contains(KEY));
    assert_ok_cell(&b.results(), 1, 0);
}

#[test]
fn unknown_model_lists_available_models() {
    let s = default_sim();
    let b = Bench::new();
    let out = b.bench(
        &s.base_url(),
        &["--model", "nope", "--concurrency", "1", "--contexts", "0"],
    );
    out.runtime_error(1, &["\"nope\"", "available", "servebench-sim"]);
    assert!(!b.output().exists());
}

/// Runs one tiny cell against the embedded simulator with `-o` pointing at a directory.
fn run_with_output_dir(b: &Bench) -> Out {
    let dir = b.path("outdir");
    std::fs::create_dir_all(&dir).unwrap();
    let mut args = vec!["run"];
    args.extend_from_slice(SHORT);
    args.extend_from_slice(&[
        "--concurrency",
        "1",
        "--contexts",
        "0",
        "-o",
        dir.to_str().unwrap(),
    ]);
    b.run_env(&args, &[], QUICK_TIMEOUT)
}

#[test]
fn unwritable_output_is_rejected_before_the_run() {
    let b = Bench::new();
    let out = run_with_output_dir(&b);
    // A bad flag value (exit 2), found before anything is measured: no report.
    out.runtime_error(2, &["-o", "outdir", "is a directory"]);
    assert!(
        !out.stdout.contains("Aggregate decode tok/s"),
        "{}",
        out.stdout
    );
}

#[test]
fn unwritable_output_leaves_no_temp_file() {
    let b = Bench::new();
    let out = run_with_output_dir(&b);
    out.runtime_error(2, &["is a directory"]);
    let leftovers: Vec<String> = std::fs::read_dir(b.dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
}

/// Issue 17 break-it round 4: `-o /dev/full` renamed the device node to `/dev/full.1` and put a
/// regular file in its place; a FIFO or a symbolic link was replaced the same way. Outputs that
/// are no regular file are refused (exit 2) before anything runs, and the node is left alone.
#[cfg(unix)]
#[test]
fn outputs_that_are_no_regular_file_are_refused_and_left_alone() {
    let b = Bench::new();
    let target = b.path("real.json");
    std::fs::write(&target, "{}").unwrap();
    let link = b.path("link.json");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let fifo = b.path("pipe.json");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    let mut cases = vec![(link.clone(), "symbolic link")];
    if made.is_ok_and(|s| s.success()) {
        cases.push((fifo.clone(), "not a regular file"));
    }
    if Path::new("/dev/null").exists() {
        cases.push((PathBuf::from("/dev/null"), "not a regular file"));
    }
    for (path, words) in &cases {
        let p = path.to_str().unwrap();
        for flag in ["-o", "--export-md", "--export-requests"] {
            let mut args = vec!["run"];
            args.extend_from_slice(SHORT);
            args.extend_from_slice(&["--concurrency", "1", "--contexts", "0", flag, p]);
            let out = b.run_env(&args, &[], QUICK_TIMEOUT);
            out.runtime_error(2, &[flag, words]);
        }
        let out = b.run_env(
            &["report", target.to_str().unwrap(), "-o", p],
            &[],
            QUICK_TIMEOUT,
        );
        out.runtime_error(2, &["-o", words]);
    }
    // issue 17 break-it round 5: `report in.json -o in.json` replaced the results with the report
    let t = target.to_str().unwrap();
    let dotted = format!("{}/./real.json", b.dir.path().display());
    let out = b.run_env(
        &["report", t, "--format", "md", "-o", &dotted],
        &[],
        QUICK_TIMEOUT,
    );
    out.runtime_error(2, &["the input file", "-o", "both name"]);
    let out = b.run_env(&["compare", t, t, "-o", t], &[], QUICK_TIMEOUT);
    out.runtime_error(2, &["an input file", "-o", "both name"]);
    // break-it round 5: a command that failed on its input left the -o folder behind, empty;
    // the folder is made at the first write
    let missing = b.path("missing.json");
    let newdir = b.path("newdir");
    let x = newdir.join("sub/x.md");
    let out = b.run_env(
        &[
            "report",
            missing.to_str().unwrap(),
            "-o",
            x.to_str().unwrap(),
        ],
        &[],
        QUICK_TIMEOUT,
    );
    assert_ne!(out.code(), Some(0), "{}", out.stderr);
    assert!(
        !newdir.exists(),
        "the failed report made {}",
        newdir.display()
    );
    let old = data_file("llm-decode-bench-0.4.18-vllm-cpu-tiny.json");
    let out = b.run_env(
        &["report", &old, "--format", "md", "-o", x.to_str().unwrap()],
        &[],
        QUICK_TIMEOUT,
    );
    assert_eq!(out.code(), Some(0), "{}", out.stderr);
    assert!(x.is_file());
    // a file where a folder should be is still refused before anything is read
    let under_file = format!("{t}/x.md");
    let out = b.run_env(&["report", t, "-o", &under_file], &[], QUICK_TIMEOUT);
    out.runtime_error(2, &["-o", "not a folder"]);
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "{}");
    assert!(!b.path("link.1.json").exists() && !b.path("pipe.1.json").exists());
    assert!(!Path::new("/dev/null.1").exists());
}

/// Issue 17 break-it round 4: `-o res.json --export-md res.json` exited 0 with the JSON moved
/// to `res.1.json`. Two outputs naming one file are a flag error.
#[test]
fn two_outputs_naming_one_file_are_refused() {
    let b = Bench::new();
    let same = b.path("res.json");
    let p = same.to_str().unwrap();
    let dotted = format!("{}/./res.json", b.dir.path().display());
    for (a, x, flag) in [
        (p, p, "--export-md"),
        (p, dotted.as_str(), "--export-csv"),
        (p, p, "--export-requests"),
    ] {
        let mut args = vec!["run"];
        args.extend_from_slice(SHORT);
        args.extend_from_slice(&["--concurrency", "1", "--contexts", "0", "-o", a, flag, x]);
        let out = b.run_env(&args, &[], QUICK_TIMEOUT);
        out.runtime_error(2, &["-o", flag, "both name"]);
    }
    assert!(!same.exists() && !b.path("res.1.json").exists());
}

/// Issue 17 break-it round 4: a run that failed to start (an unreachable server) had already
/// renamed the previous results file to NAME.1.json. The previous file is kept only when a new
/// one is written.
#[test]
fn a_run_that_fails_to_start_leaves_the_previous_results_where_they_were() {
    let b = Bench::new();
    std::fs::write(b.output(), "previous").unwrap();
    let req = b.path("req.jsonl");
    std::fs::write(&req, "previous rows").unwrap();
    let out = b.bench(
        "http://127.0.0.1:1",
        &[
            "--concurrency",
            "1",
            "--contexts",
            "0",
            "--export-requests",
            req.to_str().unwrap(),
        ],
    );
    assert_eq!(out.code(), Some(1), "{}", out.stderr);
    assert_eq!(std::fs::read_to_string(b.output()).unwrap(), "previous");
    assert_eq!(std::fs::read_to_string(&req).unwrap(), "previous rows");
    assert!(!b.path("results.1.json").exists() && !b.path("req.1.jsonl").exists());
}

/// The output folder was writable at the start but is gone when the results are written (here:
/// replaced by a file a second after the start): the report still reaches stdout, so the
/// measurements are not lost, and the exit code says the write failed.
#[test]
fn output_that_fails_at_the_end_still_prints_the_report() {
    let b = Bench::new();
    let dir = b.path("out");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("results.json");
    let mut args = vec!["run"];
    args.extend_from_slice(SHORT);
    args.extend_from_slice(&["--concurrency", "1", "--contexts", "0", "--skip-prefill"]);
    args.extend_from_slice(&["-o", file.to_str().unwrap()]);
    let mut child = b.spawn(&args, &[]);
    let so = drain(child.stdout.take().expect("stdout"), None);
    let se = drain(child.stderr.take().expect("stderr"), None);
    std::thread::sleep(Duration::from_millis(1000));
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::write(&dir, "not a folder").unwrap();
    let out = wait(child, so, se, RUN_TIMEOUT);
    out.runtime_error(1, &["cannot write", "results.json"]);
    assert!(
        out.stdout.contains("Aggregate decode tok/s"),
        "no report on stdout:\n{}",
        out.stdout
    );
    assert!(!out.stdout.contains("Results saved to"), "{}", out.stdout);
}

// ------------------------------------------------------------------------------------------
// 5. Failures during cells

/// Runs C=1,2 at context 0 against `cfg` and checks: exit 3, a schema-valid file, at least one
/// `invalid` cell whose reason carries `message`, and no cell in another failure state.
/// Returns the results.
fn assert_cells_invalid(cfg: SimConfig, message: &str) -> Value {
    let s = sim(cfg);
    let b = Bench::new();
    let out = b.bench(&s.base_url(), &["--concurrency", "1,2", "--contexts", "0"]);
    out.expect_code(3);
    assert!(
        out.stderr.contains("cells failed"),
        "no failed-cells notice:\n{}",
        out.stderr
    );
    // The report marks the cell and says why.
    assert!(out.stdout.contains("INVALID"), "{}", out.stdout);
    assert!(out.stdout.contains(message), "{}", out.stdout);
    let v = b.results();
    assert_eq!(cells(&v).len(), 2);
    let invalid: Vec<&Value> = cells(&v)
        .iter()
        .filter(|c| status(c) == "invalid")
        .collect();
    assert!(!invalid.is_empty(), "no invalid cell: {:#}", v["results"]);
    for c in &invalid {
        assert!(
            reason(c).contains(message),
            "status_reason {:?} lacks the server's message {message:?}",
            reason(c)
        );
        assert!(c["num_errors"].as_u64().unwrap_or(0) >= 1, "{c:#}");
        assert!(
            c["aggregate_tps"].is_null(),
            "invalid cell has a tok/s: {c:#}"
        );
    }
    for c in cells(&v) {
        assert!(
            matches!(status(c), "ok" | "invalid"),
            "unexpected status: {c:#}"
        );
    }
    // The summary only holds ok cells.
    let ok = cells(&v).iter().filter(|c| status(c) == "ok").count();
    let summarised: usize = v["summary_table"]
        .as_object()
        .map(|m| {
            m.values()
                .map(|r| r.as_object().map_or(0, |r| r.len()))
                .sum()
        })
        .unwrap_or(0);
    assert_eq!(ok, summarised);
    v
}

#[test]
fn http_500_during_cells_marks_them_invalid() {
    // C=1 (64 tokens at 10 ms a step, ~1.5 s of cell) sends 3 requests; the 4th completion
    // request, the first of C=2, gets the 500. So the first cell stays ok.
    let v = assert_cells_invalid(
        SimConfig {
            fault_http_status: Some(500),
            fault_every: 4,
            ..Default::default()
        },
        "simulated fault (HTTP 500)",
    );
    assert_ok_cell(&v, 1, 0);
    assert_eq!(status(cell(&v, 2, 0)), "invalid");
    assert!(reason(cell(&v, 2, 0)).contains("HTTP 500"));
}

#[test]
fn http_429_during_cells_marks_them_invalid() {
    let _ = assert_cells_invalid(
        SimConfig {
            fault_http_status: Some(429),
            fault_every: 3,
            ..Default::default()
        },
        "simulated fault (HTTP 429)",
    );
}

#[test]
fn midstream_error_marks_cells_invalid() {
    let _ = assert_cells_invalid(
        SimConfig {
            fault_midstream_every: 3,
            ..Default::default()
        },
        "simulated failure",
    );
}

// ------------------------------------------------------------------------------------------
// 6. A normal run, its file, `validate` and `report`

#[test]
fn normal_run_writes_valid_results_and_report() {
    let s = default_sim();
    let b = Bench::new();
    let out = b.bench(
        &s.base_url(),
        &["--concurrency", "1,2", "--contexts", "0,1k"],
    );
    out.expect_code(0);
    assert!(
        !out.stderr.lines().any(|l| l.starts_with("error:")),
        "{}",
        out.stderr
    );
    assert!(
        out.stdout.contains("Aggregate decode tok/s"),
        "no report on stdout:\n{}",
        out.stdout
    );

    let v = b.results();
    assert_eq!(v["schema_version"], servebench_results::SCHEMA_VERSION);
    assert_eq!(v["metadata"]["tool"], "servebench");
    assert_eq!(v["metadata"]["engine"], "servebench-sim");
    assert_eq!(v["metadata"]["endpoint"], "chat");
    assert_eq!(v["metadata"]["interrupted"], false);
    assert_eq!(v["metadata"]["max_tokens"], 64);
    assert_eq!(cells(&v).len(), 4);
    for (c, ctx) in [(1, 0), (1, 1024), (2, 0), (2, 1024)] {
        assert_ok_cell(&v, c, ctx);
        let tps = cell(&v, c, ctx)["aggregate_tps"].as_f64().unwrap();
        assert_eq!(
            v["summary_table"][ctx.to_string()][c.to_string()].as_f64(),
            Some(tps),
            "summary_table[{ctx}][{c}]"
        );
    }
    // Exact targeting through the simulator's /tokenize: every context cell gets its size.
    assert_eq!(v["metadata"]["prompt_targeting"], "tokenize_exact");
    for c in [1, 2] {
        assert_eq!(
            cell(&v, c, 1024)["prompt_tokens"],
            1024,
            "C={c} ctx=1k prompt_tokens"
        );
    }

    let file = b.output();
    let file = file.to_str().unwrap();
    let out = b.run_env(&["validate", file], &[], QUICK_TIMEOUT);
    out.expect_code(0);
    assert!(out.stdout.contains("valid"), "{}", out.stdout);

    // The same file with a value the schema forbids: one `error:` line, the problem named.
    let mut bad = v.clone();
    bad["results"][0]["concurrency"] = 0.into();
    let bad_path = b.path("bad.json");
    std::fs::write(&bad_path, serde_json::to_string(&bad).unwrap()).unwrap();
    let out = b.run_env(
        &["validate", bad_path.to_str().unwrap()],
        &[],
        QUICK_TIMEOUT,
    );
    out.runtime_error(1, &["bad.json", "violates the results schema", "1 problem"]);
    assert!(
        out.stderr.contains("/results/0/concurrency"),
        "{}",
        out.stderr
    );

    let out = b.run_env(&["report", file], &[], QUICK_TIMEOUT);
    out.expect_code(0);
    assert!(
        out.stdout.contains("Aggregate decode tok/s"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("ctx \\ C"), "{}", out.stdout);
    let matrix = out
        .stdout
        .split("Aggregate decode tok/s")
        .nth(1)
        .expect("matrix section");
    let row_1k = matrix
        .lines()
        .find(|l| l.trim_start().starts_with("1k "))
        .unwrap_or_else(|| panic!("no 1k row in the report:\n{}", out.stdout));
    let tps = cell(&v, 2, 1024)["aggregate_tps"].as_f64().unwrap();
    assert!(
        row_1k.contains(&format!("{tps:.1}")),
        "1k row lacks C=2's {tps:.1}: {row_1k}"
    );
}

// ------------------------------------------------------------------------------------------
// 7. Files of the old tool, and garbage

fn data_file(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/data/results")
        .join(name);
    assert!(p.exists(), "missing fixture {}", p.display());
    p.to_str().unwrap().to_string()
}

#[test]
fn validate_and_report_accept_old_tool_files() {
    let b = Bench::new();
    for (name, rows) in [
        // JSON embedded in a saved web page.
        (
            "seed-000-llm-decode-bench-0.4.29.txt",
            &["0 ", "16k ", "32k "][..],
        ),
        (
            "llm-decode-bench-0.4.18-vllm-cpu-tiny.json",
            &["0 ", "512 "][..],
        ),
    ] {
        let f = data_file(name);
        let out = b.run_env(&["validate", &f], &[], QUICK_TIMEOUT);
        out.expect_code(0);
        assert!(out.stdout.contains("valid"), "{name}: {}", out.stdout);

        let out = b.run_env(&["report", &f], &[], QUICK_TIMEOUT);
        out.expect_code(0);
        assert!(
            out.stdout.contains("Aggregate decode tok/s"),
            "{name}: {}",
            out.stdout
        );
        for row in rows {
            assert!(
                out.stdout.lines().any(|l| l.trim_start().starts_with(row)),
                "{name}: no {row:?} row in\n{}",
                out.stdout
            );
        }
    }
}

#[test]
fn garbage_files_fail_with_one_line() {
    let b = Bench::new();
    let garbage = b.path("garbage.txt");
    std::fs::write(&garbage, "this is not JSON\n{ nor is this\n").unwrap();
    let g = garbage.to_str().unwrap();
    for cmd in ["validate", "report"] {
        let out = b.run_env(&[cmd, g], &[], QUICK_TIMEOUT);
        out.runtime_error(1, &["garbage.txt", "not a results JSON"]);
    }

    // JSON, but not a results file.
    let wrong = b.path("wrong.json");
    std::fs::write(&wrong, r#"{"metadata": 5, "results": "x"}"#).unwrap();
    let w = wrong.to_str().unwrap();
    for cmd in ["validate", "report"] {
        let out = b.run_env(&[cmd, w], &[], QUICK_TIMEOUT);
        out.runtime_error(1, &["wrong.json"]);
    }

    // Valid JSON of another kind: every results struct has defaults, but a report of nothing
    // would be misleading.
    for (name, text) in [
        ("empty.json", "{}"),
        ("pkg.json", r#"{"name": "foo", "version": "1.0"}"#),
        ("list.json", "[]"),
    ] {
        let p = b.path(name);
        std::fs::write(&p, text).unwrap();
        let out = b.run_env(&["report", p.to_str().unwrap()], &[], QUICK_TIMEOUT);
        out.runtime_error(1, &[name, "not a servebench"]);
    }

    let missing = b.path("missing.json");
    let out = b.run_env(&["validate", missing.to_str().unwrap()], &[], QUICK_TIMEOUT);
    out.runtime_error(1, &["cannot read", "missing.json"]);
}

// ------------------------------------------------------------------------------------------
// 8. Skipped cells

#[test]
fn cells_over_max_model_len_are_skipped_context() {
    let s = sim(SimConfig {
        max_model_len: 600,
        ..Default::default()
    });
    let b = Bench::new();
    let out = b.bench(&s.base_url(), &["--concurrency", "1", "--contexts", "0,1k"]);
    out.expect_code(0);
    let v = b.results();
    assert_eq!(v["metadata"]["max_model_len"], 600);
    assert_ok_cell(&v, 1, 0);
    let skipped = cell(&v, 1, 1024);
    assert_eq!(status(skipped), "skipped_context", "{skipped:#}");
    for w in ["1024", "64", "600", "max_model_len"] {
        assert!(reason(skipped).contains(w), "reason lacks {w}: {skipped:#}");
    }
    assert!(skipped["aggregate_tps"].is_null());
    assert!(v["summary_table"].get("1024").is_none());
}

#[test]
fn cells_over_kv_budget_are_skipped_capacity() {
    let s = default_sim();
    let b = Bench::new();
    // C × (100 + 64): 164 fits in 500, 656 does not (deficit 156).
    let out = b.bench(
        &s.base_url(),
        &[
            "--concurrency",
            "1,4",
            "--contexts",
            "100",
            "--kv-budget",
            "500",
        ],
    );
    out.expect_code(0);
    let v = b.results();
    assert_eq!(v["metadata"]["max_total_tokens"], 500);
    assert_ok_cell(&v, 1, 100);
    let skipped = cell(&v, 4, 100);
    assert_eq!(status(skipped), "skipped_capacity", "{skipped:#}");
    assert_eq!(skipped["timeout_reason"], "156", "{skipped:#}");
    assert_eq!(skipped["total_tokens"], 656, "{skipped:#}");
    assert_eq!(skipped["capacity_limited"], true);
    assert!(reason(skipped).contains("KV budget"), "{skipped:#}");
    assert!(skipped["aggregate_tps"].is_null());
}

// ------------------------------------------------------------------------------------------
// 9. Ctrl-C

#[cfg(unix)]
#[test]
fn ctrl_c_writes_partial_results() {
    let s = default_sim();
    let b = Bench::new();
    let output = b.output();
    let url = s.base_url();
    // Long enough that a cell which ignored the interrupt would show in the timing.
    let mut args = vec!["run", "--url", url.as_str()];
    args.extend(SHORT.chunks(2).filter(|f| f[0] != "--duration").flatten());
    args.extend_from_slice(&[
        "--duration",
        "4",
        "--concurrency",
        "1,2,4",
        "--contexts",
        "0",
        "-o",
        output.to_str().unwrap(),
    ]);
    let mut child = b.spawn(&args, &[]);
    let (tx, rx) = mpsc::channel();
    let out = drain(child.stdout.take().unwrap(), None);
    let err = drain(child.stderr.take().unwrap(), Some(tx));

    // The first cell finishes; interrupt once the second one is measuring.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                let measuring = line.contains(" ready C=2 ");
                seen.push(line);
                if measuring {
                    break;
                }
            }
            Err(_) => {
                let _ = child.kill();
                panic!("the second cell never became ready:\n{}", seen.join("\n"));
            }
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    let pid = child.id() as libc::pid_t;
    // SAFETY: plain kill(2) on our own child's pid.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
    let t_int = Instant::now();
    let out = wait(child, out, err, Duration::from_secs(30));
    let took = t_int.elapsed();

    out.expect_code(130);
    assert!(out.stderr.contains("interrupted"), "{}", out.stderr);
    // The running cell stops at once instead of finishing its 4 s window.
    assert!(
        took < Duration::from_millis(2500),
        "exit took {took:?} after SIGINT"
    );
    let v = b.results();
    assert_eq!(v["metadata"]["interrupted"], true);
    assert_eq!(cells(&v).len(), 3, "every planned cell is present");
    assert_ok_cell(&v, 1, 0);
    assert!(v["summary_table"]["0"]["1"].is_number());
    for c in [2, 4] {
        let r = cell(&v, c, 0);
        assert_eq!(status(r), "skipped_user", "{r:#}");
        assert!(!reason(r).is_empty(), "{r:#}");
        assert!(r["aggregate_tps"].is_null(), "{r:#}");
    }
    assert!(reason(cell(&v, 2, 0)).contains("while the cell was running"));
    assert!(v["summary_table"]["0"].get("2").is_none());
}

/// Break-it round 7: a SIGINT while `/v1/models` was pending waited for the probe's 10 s
/// timeout and then exited 1 ("cannot list models"); it ends the run at once with 130.
#[cfg(unix)]
#[test]
fn ctrl_c_while_probing_the_server_exits_130_at_once() {
    // a server that accepts and never answers
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let held = std::thread::spawn(move || {
        let mut conns = Vec::new();
        for c in listener.incoming().take(4).flatten() {
            conns.push(c);
        }
        std::thread::sleep(Duration::from_secs(60));
    });
    let b = Bench::new();
    let output = b.output();
    let mut child = b.spawn(
        &[
            "run",
            "--url",
            &url,
            "--probe-timeout",
            "100",
            "-o",
            output.to_str().unwrap(),
        ],
        &[],
    );
    let out = drain(child.stdout.take().unwrap(), None);
    let err = drain(child.stderr.take().unwrap(), None);
    std::thread::sleep(Duration::from_millis(1500));
    let pid = child.id() as libc::pid_t;
    // SAFETY: plain kill(2) on our own child's pid.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
    let t_int = Instant::now();
    let out = wait(child, out, err, Duration::from_secs(30));
    let took = t_int.elapsed();
    out.expect_code(130);
    assert!(
        out.stderr.contains("interrupted while probing the server"),
        "{}",
        out.stderr
    );
    // the models request has a 10 s limit of its own; the stop must not wait for it
    assert!(
        took < Duration::from_secs(5),
        "exit took {took:?} after SIGINT"
    );
    assert!(
        !output.exists(),
        "no results file for a run that measured nothing"
    );
    drop(held);
}

// ------------------------------------------------------------------------------------------
// 10. Endpoints and prompt targeting

#[test]
fn completions_endpoint() {
    let s = default_sim();
    let b = Bench::new();
    let out = b.bench(
        &s.base_url(),
        &[
            "--endpoint",
            "completions",
            "--concurrency",
            "1",
            "--contexts",
            "0,1k",
        ],
    );
    out.expect_code(0);
    let v = b.results();
    assert_eq!(v["metadata"]["endpoint"], "completions");
    assert_eq!(v["metadata"]["prompt_targeting"], "tokenize_exact");
    assert_ok_cell(&v, 1, 0);
    assert_ok_cell(&v, 1, 1024);
    assert_eq!(cell(&v, 1, 1024)["prompt_tokens"], 1024);
}

#[test]
fn estimate_targeting_without_tokenize() {
    let s = sim(SimConfig {
        tokenize_endpoint: false,
        ..Default::default()
    });
    let b = Bench::new();
    let out = b.bench(
        &s.base_url(),
        &[
            "--token-targeting",
            "estimate",
            "--no-calibration-cache",
            "--concurrency",
            "1",
            "--contexts",
            "0,1k",
        ],
    );
    out.expect_code(0);
    let v = b.results();
    let targeting = v["metadata"]["prompt_targeting"].as_str().unwrap_or("");
    assert!(
        targeting.starts_with("calibrated"),
        "prompt_targeting {targeting:?}"
    );
    assert!(v["metadata"]["chars_per_token"].as_f64().unwrap_or(0.0) > 0.0);
    assert_ok_cell(&v, 1, 0);
    assert_ok_cell(&v, 1, 1024);
    let tokens = cell(&v, 1, 1024)["prompt_tokens"]
        .as_u64()
        .expect("prompt_tokens");
    assert!(
        (922..=1126).contains(&tokens),
        "estimated 1k prompt is {tokens} tokens"
    );
    assert!(
        !b.path("cache/servebench").exists(),
        "--no-calibration-cache wrote a cache"
    );
}

// ------------------------------------------------------------------------------------------
// 11–12. The built-in simulator

#[test]
fn run_without_target_uses_embedded_simulator() {
    let b = Bench::new();
    let mut args = vec!["run"];
    args.extend_from_slice(SHORT);
    args.extend_from_slice(&["--concurrency", "1", "--contexts", "0"]);
    let out = b.run(&args);
    out.expect_code(0);
    assert!(out.stderr.contains("built-in simulator"), "{}", out.stderr);
    // Default output path, in the working directory.
    let v = read_valid_results(&b.path("benchmark_results.json"));
    // It impersonates vLLM, so the server-side evidence is there: metrics, KV budget, readiness.
    assert_eq!(v["metadata"]["engine"], "vllm");
    assert_eq!(v["metadata"]["metrics_available"], true);
    assert!(v["metadata"]["max_total_tokens"].as_u64().unwrap() > 0);
    assert_eq!(v["startup_diagnostics"]["args"]["embedded_simulator"], true);
    assert_ok_cell(&v, 1, 0);
    assert_eq!(cell(&v, 1, 0)["avg_running_reqs"], 1.0);
    assert!(cell(&v, 1, 0)["server_output_tokens"].as_u64().unwrap() > 0);
    assert!(
        out.stdout.contains("Server check (vllm /metrics"),
        "{}",
        out.stdout
    );
}

/// Finds `http://host:port` in a line.
fn url_in(line: &str) -> Option<String> {
    let start = line.find("http://")?;
    let url: String = line[start..]
        .chars()
        .take_while(|c| !c.is_whitespace() && *c != ')' && *c != '"')
        .collect();
    Some(url)
}

#[cfg(unix)]
#[test]
fn sim_command_prints_the_bound_address() {
    let b = Bench::new();
    let mut child = b.spawn(&["sim", "--port", "0"], &[]);
    let (tx, rx) = mpsc::channel();
    let out = drain(child.stdout.take().unwrap(), None);
    let err = drain(child.stderr.take().unwrap(), Some(tx));

    let first = match rx.recv_timeout(Duration::from_secs(20)) {
        Ok(l) => l,
        Err(_) => {
            let _ = child.kill();
            panic!("servebench sim printed nothing");
        }
    };
    let url = url_in(&first).unwrap_or_else(|| {
        let _ = child.kill();
        panic!("no URL in the first line: {first}")
    });
    let port: u16 = url
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    if port == 0 {
        let _ = child.kill();
        panic!("servebench sim printed port 0 instead of the bound port: {first}");
    }

    let run = b.bench(&url, &["--concurrency", "1", "--contexts", "0"]);
    let pid = child.id() as libc::pid_t;
    // SAFETY: plain kill(2) on our own child's pid.
    unsafe { libc::kill(pid, libc::SIGINT) };
    let sim_out = wait(child, out, err, Duration::from_secs(10));

    run.expect_code(0);
    let v = b.results();
    assert_eq!(v["metadata"]["engine"], "servebench-sim");
    assert_ok_cell(&v, 1, 0);
    sim_out.expect_code(0);
}

#[test]
fn top_level_help_names_registry_serve() {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_servebench"))
        .arg("--help")
        .output()
        .expect("run servebench --help");
    assert!(o.status.success());
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("registry serve"), "{text}");
}

/// `run --help` groups its flags and ends with examples; every example parses (against an
/// unreachable server it fails at startup, exit 1, never on a flag), so the examples cannot rot.
#[test]
fn run_help_has_groups_and_examples_that_parse() {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_servebench"))
        .args(["run", "--help"])
        .output()
        .expect("run servebench run --help");
    assert!(o.status.success());
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    for heading in [
        "Server:",
        "Matrix (concurrency × context cells):",
        "Prefill:",
        "Output and resume:",
        "Timeouts and retries:",
        "Open-loop request rate:",
        "Examples:",
        "Exit codes:",
    ] {
        assert!(
            text.lines().any(|l| l == heading || l.starts_with(heading)),
            "{heading}\n{text}"
        );
    }
    let examples = &text[text.find("Examples:").unwrap()..];
    let joined = examples.replace("\\\n", " ");
    let commands: Vec<Vec<String>> = joined
        .lines()
        .map(str::trim)
        .filter_map(|l| {
            l.find("servebench run")
                .map(|i| &l[i + "servebench run".len()..])
        })
        .map(|rest| rest.split_whitespace().map(str::to_owned).collect())
        .collect();
    assert!(commands.len() >= 5, "{examples}");
    let dir = tempfile::tempdir().unwrap();
    // the simulator example (no --url) is the README's first command, run by its own tests
    for mut args in commands
        .into_iter()
        .filter(|a| a.iter().any(|x| x == "--url"))
    {
        let i = args.iter().position(|a| a == "--url").unwrap();
        args[i + 1] = "http://127.0.0.1:1".into();
        let resume = args.iter().any(|a| a == "--resume");
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_servebench"))
            .current_dir(dir.path())
            .arg("run")
            .args(&args)
            .args(["-q", "--probe-timeout", "5"])
            .env_remove("SERVEBENCH_API_KEY")
            .output()
            .expect("run an example");
        let err = String::from_utf8_lossy(&o.stderr);
        if resume {
            // the file to resume does not exist in the empty directory: refused as a file, not
            // as a flag
            assert!(err.contains("cannot read"), "{args:?}: {err}");
        } else {
            assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
            assert!(err.contains("cannot reach"), "{args:?}: {err}");
        }
    }
}

/// `validate` (and every command that reads a results file) refuses a FIFO or a device at once
/// instead of waiting on it or reading it without end (break-it round 3: `validate FIFO` blocked,
/// `validate /dev/zero` read until out of memory).
#[test]
fn input_files_that_are_no_regular_files_are_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("in.fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .is_ok_and(|s| s.success());
    let mut inputs = vec![
        std::path::PathBuf::from("/dev/zero"),
        dir.path().to_path_buf(),
    ];
    if made {
        inputs.push(fifo);
    }
    for input in inputs {
        for cmd in [
            vec!["validate"],
            vec!["report"],
            vec!["registry", "import", "--registry"],
        ] {
            let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_servebench"));
            c.args(&cmd);
            if cmd[0] == "registry" {
                c.arg(dir.path().join("reg"));
            }
            let child = c
                .arg(&input)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            let e = common::wait_for(child, Duration::from_secs(20));
            let status = e
                .status
                .unwrap_or_else(|| panic!("{cmd:?} {input:?} still running"));
            assert!(!status.success(), "{cmd:?} {input:?}");
            assert!(
                e.stderr.contains("not a regular file"),
                "{cmd:?} {input:?}: {}",
                e.stderr
            );
        }
    }
}
