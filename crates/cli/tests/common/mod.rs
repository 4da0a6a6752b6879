//! Helpers shared by the CLI's integration tests: the binary, the in-process simulator, an
//! isolated `servebench` command, waiting for a child with a deadline while its output is
//! read, and the results-file checks (schema, cells).
//!
//! Each test file uses only some of them.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;
use servebench_sim::{Sim, SimConfig};

/// The `servebench` binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_servebench");

/// Starts the simulator in this process on an ephemeral port (no truth recording).
pub fn sim(cfg: SimConfig) -> Sim {
    Sim::spawn_thread(SimConfig {
        port: 0,
        record_truth: false,
        ..cfg
    })
    .expect("start the simulator")
}

/// [`sim`] with the default configuration.
pub fn default_sim() -> Sim {
    sim(SimConfig::default())
}

/// A `servebench` command run in `dir`, isolated from the user's environment: no API key, no
/// log filter, cache and home in `dir`, backtraces on (a panic cannot hide), no colours;
/// stdin closed, stdout and stderr piped.
pub fn isolated(dir: &Path) -> Command {
    let mut c = Command::new(BIN);
    c.current_dir(dir)
        .env_remove("SERVEBENCH_API_KEY")
        .env_remove("RUST_LOG")
        .env("XDG_CACHE_HOME", dir.join("cache"))
        .env("HOME", dir)
        .env("RUST_BACKTRACE", "1")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Reads `r` to the end on a thread; each line is also sent on `lines` when given.
pub fn drain<R: Read + Send + 'static>(
    r: R,
    lines: Option<mpsc::Sender<String>>,
) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut all = String::new();
        let mut reader = BufReader::new(r);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match reader.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let line = String::from_utf8_lossy(&buf).into_owned();
                    if let Some(tx) = &lines {
                        let _ = tx.send(line.trim_end().to_string());
                    }
                    all.push_str(&line);
                }
            }
        }
        all
    })
}

/// How a child process ended.
#[derive(Debug)]
pub struct Exit {
    /// Its exit status; `None` when it overran the deadline and was killed.
    pub status: Option<ExitStatus>,
    /// Everything it wrote on stdout.
    pub stdout: String,
    /// Everything it wrote on stderr.
    pub stderr: String,
    /// From the start of the wait to its end.
    pub elapsed: Duration,
}

impl Exit {
    /// The exit status; panics with the output when the child was killed at the deadline.
    #[track_caller]
    pub fn finished(&self, timeout: Duration) -> ExitStatus {
        self.status.unwrap_or_else(|| {
            panic!(
                "servebench did not finish within {timeout:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
                self.stdout, self.stderr
            )
        })
    }
}

/// Waits for `child` at most `timeout` while `stdout` / `stderr` read its output (see
/// [`drain`]); kills it when it overruns.
pub fn wait_drained(
    mut child: Child,
    stdout: JoinHandle<String>,
    stderr: JoinHandle<String>,
    timeout: Duration,
) -> Exit {
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("try_wait") {
            break Some(s);
        }
        if t0.elapsed() >= timeout {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let elapsed = t0.elapsed();
    Exit {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
        elapsed,
    }
}

/// [`wait_drained`] for a child whose stdout and stderr are piped and not read yet.
pub fn wait_for(mut child: Child, timeout: Duration) -> Exit {
    let out = drain(child.stdout.take().expect("piped stdout"), None);
    let err = drain(child.stderr.take().expect("piped stderr"), None);
    wait_drained(child, out, err, timeout)
}

/// Asserts that `v` satisfies `schema/results.schema.json`, listing every violation.
#[track_caller]
pub fn assert_schema_valid(v: &Value) {
    let schema: Value =
        serde_json::from_str(servebench_results::SCHEMA_JSON).expect("schema is JSON");
    let validator = jsonschema::validator_for(&schema).expect("schema compiles");
    let errors: Vec<String> = validator
        .iter_errors(v)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "results violate the schema:\n{}",
        errors.join("\n")
    );
}

/// The `results[]` cells of a results file.
#[track_caller]
pub fn cells(v: &Value) -> &Vec<Value> {
    v["results"].as_array().expect("results[] array")
}

/// The cell at (C, context) of `results[]`.
#[track_caller]
pub fn cell(v: &Value, c: u64, ctx: u64) -> &Value {
    cells(v)
        .iter()
        .find(|r| r["concurrency"] == c && r["context_tokens"] == ctx)
        .unwrap_or_else(|| panic!("no cell C={c} ctx={ctx} in {:#}", v["results"]))
}
