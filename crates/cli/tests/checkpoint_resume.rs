//! Finished cells survive the end of the process: `servebench run` rewrites its results file
//! atomically after every finished cell, so SIGHUP (an SSH drop) and SIGKILL (an OOM kill) keep
//! them, and `servebench run --resume FILE` completes the matrix, keeping those cells unchanged.
//!
//! The server is the built-in simulator hosted in this test process (port 0). Runs are short:
//! 1 s windows, 0.5 s readiness, no warmup, no pauses, 64-token requests.

#![cfg(unix)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use servebench_sim::Sim;

mod common;

use common::{assert_schema_valid, cell, cells, BIN};

/// The matrix of every run here: 2 × 2 cells of about 1.5 s each.
const MATRIX: &[&str] = &[
    "--concurrency",
    "1,2",
    "--contexts",
    "0,1k",
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
    "--prefill-contexts",
    "1k",
    "--no-calibration-cache",
];

fn sim() -> Sim {
    common::default_sim()
}

struct Bench {
    dir: tempfile::TempDir,
    url: String,
    _sim: Sim,
}

impl Bench {
    fn new() -> Self {
        let sim = sim();
        Bench {
            dir: tempfile::tempdir().expect("tempdir"),
            url: sim.base_url(),
            _sim: sim,
        }
    }

    fn output(&self) -> PathBuf {
        self.dir.path().join("results.json")
    }

    fn command(&self, extra: &[&str]) -> Command {
        let mut c = common::isolated(self.dir.path());
        c.arg("run")
            .args(["--url", &self.url])
            .args(MATRIX)
            .args(extra);
        c
    }

    /// Runs to the end (at most 60 s).
    fn run(&self, extra: &[&str]) -> Output {
        let child = self.command(extra).spawn().expect("spawn servebench");
        wait(child, Duration::from_secs(60))
    }

    /// Starts a run writing to [`Bench::output`], waits until its results file holds one
    /// finished cell, sends `signal`, and returns how the process ended.
    fn kill_after_first_cell(&self, signal: libc::c_int) -> Output {
        use std::os::unix::process::CommandExt as _;
        let out = self.output();
        let mut cmd = self.command(&["-o", out.to_str().unwrap()]);
        // The default disposition, whatever this test inherited: under `nohup` (SIGHUP ignored,
        // which servebench then keeps, see `sighup_under_nohup_does_not_stop_the_run`) a hang-up
        // would otherwise not reach it.
        // SAFETY: signal(2) is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                libc::signal(signal, libc::SIG_DFL);
                Ok(())
            });
        }
        let child = cmd.spawn().expect("spawn servebench");
        wait_for_first_cell(&out);
        // SAFETY: plain kill(2) on our own child's pid.
        assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, signal) }, 0);
        wait(child, Duration::from_secs(30))
    }
}

/// Polls the results file at `out` until it holds one finished cell (at most 40 s).
fn wait_for_first_cell(out: &Path) {
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        if let Some(v) = read_json(out) {
            if v["results"].as_array().is_some_and(|r| !r.is_empty()) {
                return;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no finished cell on disk after 40 s"
        );
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// Waits for `child` at most `timeout` (killing it and panicking when it overruns).
fn wait(child: Child, timeout: Duration) -> Output {
    let e = common::wait_for(child, timeout);
    Output {
        status: e.finished(timeout),
        stdout: e.stdout.into_bytes(),
        stderr: e.stderr.into_bytes(),
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The file as JSON, or None while it does not exist (never a partial file: see the test).
fn read_json(p: &Path) -> Option<Value> {
    let t = std::fs::read_to_string(p).ok()?;
    Some(
        serde_json::from_str(&t)
            .unwrap_or_else(|e| panic!("{} is not complete JSON ({e}): a torn write", p.display())),
    )
}

/// The first cell of the plan (C=1, context 0) is on disk, ok, with its numbers.
#[track_caller]
fn assert_first_cell_kept(v: &Value) {
    let first = cell(v, 1, 0);
    assert_eq!(first["status"], "ok", "{first:#}");
    assert!(first["aggregate_tps"].as_f64().unwrap() > 0.0, "{first:#}");
    assert_eq!(v["summary_table"]["0"]["1"], first["aggregate_tps"]);
}

#[test]
fn sighup_keeps_the_finished_cells() {
    let b = Bench::new();
    let out = b.kill_after_first_cell(libc::SIGHUP);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let v = read_json(&b.output()).expect("results file");
    assert_schema_valid(&v);
    assert_eq!(v["run_complete"], false);
    assert_eq!(v["run_state"], "interrupted");
    assert_eq!(v["metadata"]["interrupted"], true);
    assert_first_cell_kept(&v);
    // Every planned cell is listed; those not finished say why.
    assert_eq!(cells(&v).len(), 4, "{:#}", v["results"]);
    for (c, ctx) in [(2, 0), (2, 1024)] {
        assert_eq!(cell(&v, c, ctx)["status"], "skipped_user");
    }
    // The report of the file says the run did not complete.
    let report = Command::new(BIN)
        .args(["report", b.output().to_str().unwrap()])
        .output()
        .unwrap();
    assert!(text(&report.stdout).contains("INTERRUPTED"));
}

#[test]
fn sighup_under_nohup_does_not_stop_the_run() {
    // `nohup` starts the process with SIGHUP ignored: a hang-up must then not interrupt it.
    use std::os::unix::process::CommandExt as _;
    let b = Bench::new();
    let out = b.output();
    let mut cmd = b.command(&["-o", out.to_str().unwrap()]);
    // SAFETY: only async-signal-safe signal(2) between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGHUP, libc::SIG_IGN);
            Ok(())
        });
    }
    let child = cmd.spawn().expect("spawn servebench");
    wait_for_first_cell(&out);
    // SAFETY: plain kill(2) on our own child's pid.
    assert_eq!(
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGHUP) },
        0
    );
    let done = wait(child, Duration::from_secs(60));
    assert_eq!(done.status.code(), Some(0), "{}", text(&done.stderr));
    let v = read_json(&out).unwrap();
    assert_eq!(v["run_state"], "complete");
    assert_eq!(cells(&v).len(), 4);
}

#[test]
fn sigkill_keeps_the_finished_cells_and_resume_completes_the_matrix() {
    let b = Bench::new();
    let out = b.kill_after_first_cell(libc::SIGKILL);
    assert_eq!(
        out.status.code(),
        None,
        "killed by a signal: {}",
        text(&out.stderr)
    );
    let killed = read_json(&b.output()).expect("results file");
    assert_schema_valid(&killed);
    assert_eq!(killed["run_complete"], false);
    assert_eq!(killed["run_state"], "running");
    assert_first_cell_kept(&killed);
    let kept = cell(&killed, 1, 0).clone();
    assert!(
        cells(&killed).len() < 4,
        "only finished cells are in a checkpoint"
    );
    let report = Command::new(BIN)
        .args(["report", b.output().to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        text(&report.stdout).contains("RUN NOT COMPLETE"),
        "{}",
        text(&report.stdout)
    );

    // A resume with a setting that changes the numbers is refused, naming the setting.
    let path = b.output();
    let file = path.to_str().unwrap();
    let bad = b.run(&["--resume", file, "--max-tokens", "32"]);
    let stderr = text(&bad.stderr);
    assert_eq!(bad.status.code(), Some(2), "{stderr}");
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    assert!(errors[0].contains("--max-tokens"), "{}", errors[0]);
    assert_eq!(
        read_json(&path).unwrap(),
        killed,
        "a refused resume writes nothing"
    );

    // ... and so is one against another server.
    let other = sim();
    let mut c = Command::new(BIN);
    c.arg("run")
        .args(["--url", &other.base_url()])
        .args(MATRIX)
        .args(["--resume", file])
        .current_dir(b.dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let bad = wait(c.spawn().unwrap(), Duration::from_secs(60));
    let stderr = text(&bad.stderr);
    assert_eq!(bad.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("the target differs"), "{stderr}");

    // The resume runs only the missing cells, into the same file.
    let done = b.run(&["--resume", file]);
    let stderr = text(&done.stderr);
    assert_eq!(done.status.code(), Some(0), "{stderr}");
    let v = read_json(&path).expect("results file");
    assert_schema_valid(&v);
    assert_eq!(v["run_complete"], true);
    assert_eq!(v["run_state"], "complete");
    assert_eq!(cells(&v).len(), 4);
    for (c, ctx) in [(1, 0), (1, 1024), (2, 0), (2, 1024)] {
        assert_eq!(cell(&v, c, ctx)["status"], "ok", "C={c} ctx={ctx}");
    }
    assert_eq!(
        cell(&v, 1, 0),
        &kept,
        "the kept cell is carried over unchanged"
    );
    let from = &v["resumed_from"];
    assert_eq!(from["run_id"], killed["metadata"]["run_id"]);
    assert!(from["kept_cells"]
        .as_array()
        .unwrap()
        .contains(&Value::from("C=1 ctx=0")));
    assert!(v["prefill"]["1024"]["tok_per_sec"].as_f64().unwrap() > 0.0);
    assert!(
        v["event_log"]
            .as_array()
            .unwrap()
            .iter()
            .all(|l| !l.as_str().unwrap().contains("cell start C=1 ctx=0")),
        "the kept cell is not run again"
    );
}

/// Issue 17 break-it round 4: `--resume` kept a finished cell that claimed more completed
/// requests than it sent. A kept row with an impossible value runs again, and stderr says so.
#[test]
fn resume_runs_impossible_cells_again() {
    let b = Bench::new();
    let out = b.kill_after_first_cell(libc::SIGKILL);
    assert_eq!(out.status.code(), None, "{}", text(&out.stderr));
    let path = b.output();
    let mut v = read_json(&path).expect("results file");
    let first = v["results"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|c| c["concurrency"] == 1 && c["context_tokens"] == 0)
        .expect("C=1 ctx=0 finished");
    let sent = first["request_count"].as_u64().unwrap();
    first["completed_request_count"] = Value::from(sent + 5);
    std::fs::write(&path, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
    let done = b.run(&["--resume", path.to_str().unwrap()]);
    let stderr = text(&done.stderr);
    assert_eq!(done.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("impossible values in finished rows")
            && stderr.contains("completed_request_count"),
        "{stderr}"
    );
    let v = read_json(&path).expect("results file");
    assert_schema_valid(&v);
    let again = cell(&v, 1, 0);
    assert_eq!(again["status"], "ok");
    assert!(again["completed_request_count"].as_u64() <= again["request_count"].as_u64());
    assert!(!v["resumed_from"]["kept_cells"]
        .as_array()
        .unwrap()
        .contains(&Value::from("C=1 ctx=0")));
}
