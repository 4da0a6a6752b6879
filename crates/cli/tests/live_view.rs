//! The live view of `servebench run`, end to end:
//!
//! * plain progress lines when stdout is a pipe (and `--display screen` falling back to them);
//! * the full-screen dashboard inside a real terminal (tmux, 120×40): the header, the running
//!   cell's window phase, `s` skipping the running cell, `q` stopping with partial results, and
//!   the terminal restored afterwards (main screen, cooked mode).
//!
//! The server is the built-in simulator with the vLLM personality (so `/metrics` feeds the
//! server line), hosted in this test process.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use servebench_sim::{Personality, Sim, SimConfig};

const BIN: &str = env!("CARGO_BIN_EXE_servebench");

fn sim() -> Sim {
    Sim::spawn_thread(SimConfig {
        port: 0,
        record_truth: false,
        personality: Personality::Vllm,
        ..SimConfig::default()
    })
    .expect("start the simulator")
}

/// `servebench run` flags of a short run at `url` writing `out`.
fn run_args(url: &str, out: &Path, duration: &str, concurrency: &str) -> Vec<String> {
    [
        "run",
        "--url",
        url,
        "--concurrency",
        concurrency,
        "--contexts",
        "0",
        "--duration",
        duration,
        "--stable-seconds",
        "0.5",
        "--decode-warmup-seconds",
        "0",
        "--cell-pause-seconds",
        "0",
        "--max-tokens",
        "64",
        "--no-calibration-cache",
        "-o",
        out.to_str().expect("utf-8 path"),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn run_piped(dir: &Path, args: &[String], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(BIN);
    c.args(args)
        .current_dir(dir)
        .env_remove("CI")
        .env("HOME", dir)
        .env("XDG_CACHE_HOME", dir.join("cache"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run servebench")
}

fn results(path: &Path) -> Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).expect("results JSON")
}

#[test]
fn plain_progress_lines_when_stdout_is_a_pipe() {
    let s = sim();
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("r.json");
    let o = run_piped(
        dir.path(),
        &run_args(&s.base_url(), &out, "1.5", "1,2"),
        &[],
    );
    let (stdout, stderr) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert_eq!(o.status.code(), Some(0), "{stdout}\n{stderr}");
    // One line per phase change of each cell, with the run's ETA.
    for want in [
        "cell 1/2 C=1 ctx=0 ramp-up ",
        "cell 1/2 C=1 ctx=0 readiness held ",
        "cell 1/2 C=1 ctx=0 window 0.0/1.5 s, run ETA ",
        "cell 2/2 C=2 ctx=0 window 0.0/1.5 s, run ETA ",
    ] {
        assert!(
            stderr.lines().any(|l| l.starts_with(want)),
            "no line starting with {want:?} in\n{stderr}"
        );
    }
    let window_lines = stderr.lines().filter(|l| l.contains(" window ")).count();
    assert_eq!(window_lines, 2, "one window line per cell\n{stderr}");
    // No terminal control sequences anywhere: not the dashboard.
    assert!(!stdout.contains('\x1b') && !stderr.contains('\x1b'));
    assert!(stdout.contains("Aggregate decode tok/s"), "{stdout}");
    assert_eq!(results(&out)["results"].as_array().map(Vec::len), Some(2));
}

#[test]
fn display_screen_without_a_terminal_falls_back_to_plain() {
    let s = sim();
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("r.json");
    let mut args = run_args(&s.base_url(), &out, "0.5", "1");
    args.extend(["--display".to_string(), "screen".to_string()]);
    let o = run_piped(dir.path(), &args, &[]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("--display needs a terminal on stdout; showing plain progress lines"),
        "{stderr}"
    );
    assert!(stderr.contains("cell 1/1 C=1 ctx=0 window"), "{stderr}");
    // -q: no progress lines at all.
    let mut args = run_args(&s.base_url(), &out, "0.5", "1");
    args.push("-q".into());
    let o = run_piped(dir.path(), &args, &[]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("cell 1/1"), "{stderr}");
}

// ------------------------------------------------------------------------------------------
// tmux

/// A private tmux server (its own socket), killed on drop.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn available() -> bool {
        Command::new("tmux")
            .arg("-V")
            .output()
            .is_ok_and(|o| o.status.success())
    }

    fn cmd(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("run tmux")
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.cmd(&["capture-pane", "-p", "-t", "sb"]).stdout).into_owned()
    }

    fn keys(&self, k: &str) {
        let o = self.cmd(&["send-keys", "-t", "sb", k]);
        assert!(o.status.success(), "send-keys {k}");
    }

    /// Waits until `pred` holds for the screen; panics with the screen after `timeout`.
    fn wait_for(&self, what: &str, timeout: Duration, pred: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let s = self.screen();
            if pred(&s) {
                return s;
            }
            if Instant::now() >= deadline {
                panic!("timed out waiting for {what}; the screen:\n{s}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd(&["kill-server"]);
    }
}

fn wait_file(p: &Path, timeout: Duration) -> Option<String> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Ok(s) = std::fs::read_to_string(p) {
            if s.ends_with('\n') {
                return Some(s);
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    None
}

fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// `servebench run` (60 s windows, so keys arrive while a window runs) in a 120×40 tmux pane;
/// the exit code and `stty -a` after it land in files.
struct TermRun {
    tmux: Tmux,
    dir: tempfile::TempDir,
    out: PathBuf,
    _sim: Sim,
    url: String,
}

impl TermRun {
    fn start(name: &str, concurrency: &str) -> TermRun {
        let sim = sim();
        let url = sim.base_url();
        let dir = tempfile::tempdir().expect("tempdir");
        let out = dir.path().join("r.json");
        let args = run_args(&url, &out, "60", concurrency);
        let d = dir.path().to_str().unwrap();
        let cmd = format!(
            "cd {dir}; env -u CI HOME={dir} XDG_CACHE_HOME={dir}/cache {bin} {args} \
             2>{dir}/stderr; echo $? > {dir}/exit; stty -a > {dir}/stty; sleep 120",
            dir = sh_quote(d),
            bin = sh_quote(BIN),
            args = args
                .iter()
                .map(|a| sh_quote(a))
                .collect::<Vec<_>>()
                .join(" "),
        );
        let tmux = Tmux {
            socket: format!("servebench-test-{name}-{}", std::process::id()),
        };
        let o = tmux.cmd(&[
            "new-session",
            "-d",
            "-s",
            "sb",
            "-x",
            "120",
            "-y",
            "40",
            "sh",
            "-c",
            &cmd,
        ]);
        assert!(o.status.success(), "tmux new-session: {o:?}");
        TermRun {
            tmux,
            dir,
            out,
            _sim: sim,
            url,
        }
    }

    fn alternate_screen(&self) -> String {
        let o = self
            .tmux
            .cmd(&["display-message", "-p", "-t", "sb", "#{alternate_on}"]);
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    }

    /// Waits for the exit; checks the code, the report on the main screen and the terminal
    /// modes (cooked again: raw mode is off).
    fn expect_exit(&self, code: &str) {
        let got = wait_file(&self.dir.path().join("exit"), Duration::from_secs(60)).unwrap_or_else(
            || {
                panic!(
                    "servebench did not exit; the screen:\n{}",
                    self.tmux.screen()
                )
            },
        );
        assert_eq!(got.trim(), code, "exit code");
        let screen = self
            .tmux
            .wait_for("the report", Duration::from_secs(10), |s| {
                s.contains("Results saved to")
            });
        assert_eq!(self.alternate_screen(), "0", "main screen:\n{screen}");
        let stty = wait_file(&self.dir.path().join("stty"), Duration::from_secs(10)).expect("stty");
        for mode in ["icanon", "echo", "isig", "opost"] {
            assert!(
                stty.split_whitespace().any(|w| w == mode),
                "terminal mode {mode:?} restored:\n{stty}"
            );
        }
        let stderr = std::fs::read_to_string(self.dir.path().join("stderr")).unwrap_or_default();
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

#[test]
fn dashboard_in_a_real_terminal_skip_and_quit() {
    if !Tmux::available() {
        servebench_testkit::missing_tool(
            "dashboard_in_a_real_terminal_skip_and_quit",
            "tmux",
            "apt-get install tmux",
        );
        return;
    }
    let run = TermRun::start("q", "1,2,4");
    let tmux = &run.tmux;

    // The window of cell 1 runs: header, plan, phase, server line.
    let screen = tmux.wait_for("cell 1's window", Duration::from_secs(60), |s| {
        s.contains("cell 1/3 C=1 ctx=0") && s.contains("window [") && s.contains("running ·")
    });
    for want in [
        "servebench",
        "vllm",
        "model servebench-sim",
        &run.url,
        "plan 3 cells",
        "run ETA",
        "streams 1/1 producing",
        "KV cache",
        "decode tok/s (aggregate)",
        "q stop and keep the results",
    ] {
        assert!(screen.contains(want), "missing {want:?} on\n{screen}");
    }
    assert_eq!(run.alternate_screen(), "1", "alternate screen in use");

    // s: cell 1 ends as skipped, cell 2 starts.
    tmux.keys("s");
    let screen = tmux.wait_for("cell 2's window", Duration::from_secs(60), |s| {
        s.contains("cell 2/3 C=2 ctx=0") && s.contains("window [")
    });
    assert!(screen.contains("skip"), "cell 1 marked skipped:\n{screen}");

    // q: stop, write partial results, restore the terminal.
    tmux.keys("q");
    run.expect_exit("130");
    let v = results(&run.out);
    assert_eq!(v["metadata"]["interrupted"], true);
    let cells = v["results"].as_array().expect("results");
    assert_eq!(cells.len(), 3, "every planned cell is exported");
    let status = |i: usize| cells[i]["status"].as_str().unwrap_or_default().to_string();
    let reason = |i: usize| {
        cells[i]["status_reason"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    assert_eq!(status(0), "skipped_user");
    assert!(
        reason(0).contains("skipped by the user (key s"),
        "{}",
        reason(0)
    );
    assert_eq!(status(1), "skipped_user");
    assert!(reason(1).contains("interrupted"), "{}", reason(1));
    assert_eq!(status(2), "skipped_user");
}

#[test]
fn dashboard_ctrl_c_stops_and_restores_the_terminal() {
    if !Tmux::available() {
        servebench_testkit::missing_tool(
            "dashboard_ctrl_c_stops_and_restores_the_terminal",
            "tmux",
            "apt-get install tmux",
        );
        return;
    }
    let run = TermRun::start("ctrl-c", "1");
    run.tmux
        .wait_for("cell 1's window", Duration::from_secs(60), |s| {
            s.contains("cell 1/1 C=1 ctx=0") && s.contains("window [")
        });
    // Raw mode turns Ctrl-C into a key: the dashboard treats it as `q`.
    run.tmux.keys("C-c");
    run.expect_exit("130");
    let v = results(&run.out);
    assert_eq!(v["metadata"]["interrupted"], true);
    assert_eq!(v["results"][0]["status"], "skipped_user");
}

/// Whether process `pid` is gone (or a zombie nobody reaped yet: it has exited).
fn process_gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(s) => s
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z') || rest.starts_with('X')),
    }
}

/// Starts `servebench run` as the tmux pane's own process (`exec`, after `prelude` in the
/// shell), with the live dashboard on, then kills the whole tmux server while cell 1's window
/// runs, as closing the terminal window or losing the SSH link does. The process must be gone
/// within a few seconds and its results file final (`interrupted`, the cause in the reasons).
fn kill_the_terminal(name: &str, prelude: &str) -> Value {
    let sim = sim();
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("r.json");
    let args = run_args(&sim.base_url(), &out, "60", "1,2");
    let d = dir.path().to_str().unwrap();
    let cmd = format!(
        "{prelude} cd {dir}; echo $$ > {dir}/pid; exec env -u CI HOME={dir} \
         XDG_CACHE_HOME={dir}/cache {bin} {args} 2>{dir}/stderr",
        dir = sh_quote(d),
        bin = sh_quote(BIN),
        args = args
            .iter()
            .map(|a| sh_quote(a))
            .collect::<Vec<_>>()
            .join(" "),
    );
    let tmux = Tmux {
        socket: format!("servebench-test-{name}-{}", std::process::id()),
    };
    let o = tmux.cmd(&[
        "new-session",
        "-d",
        "-s",
        "sb",
        "-x",
        "120",
        "-y",
        "40",
        "sh",
        "-c",
        &cmd,
    ]);
    assert!(o.status.success(), "tmux new-session: {o:?}");
    tmux.wait_for("cell 1's window", Duration::from_secs(60), |s| {
        s.contains("cell 1/2 C=1 ctx=0") && s.contains("window [")
    });
    let pid: i32 = std::fs::read_to_string(dir.path().join("pid"))
        .expect("pid file")
        .trim()
        .parse()
        .expect("pid");
    let _ = tmux.cmd(&["kill-server"]);
    let killed = Instant::now();
    // A few seconds on an idle machine; the bound leaves room for a loaded one.
    while !process_gone(pid) && killed.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let gone = process_gone(pid);
    if !gone {
        // SAFETY: kill(2) on the process this test started.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
    }
    let stderr = std::fs::read_to_string(dir.path().join("stderr")).unwrap_or_default();
    assert!(
        gone,
        "servebench still running 30 s after its terminal was killed; stderr:\n{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    let v = results(&out);
    assert_eq!(v["run_state"], "interrupted", "final state");
    assert_eq!(v["metadata"]["interrupted"], true);
    let cells = v["results"].as_array().expect("results");
    assert_eq!(cells.len(), 2, "every planned cell is exported");
    for c in cells {
        assert_eq!(c["status"], "skipped_user", "{c}");
    }
    v
}

#[test]
fn killing_the_terminal_ends_the_run_with_final_results() {
    if !Tmux::available() {
        servebench_testkit::missing_tool(
            "killing_the_terminal_ends_the_run_with_final_results",
            "tmux",
            "apt-get install tmux",
        );
        return;
    }
    let v = kill_the_terminal("hup", "");
    let reason = v["results"][0]["status_reason"]
        .as_str()
        .unwrap_or_default();
    assert!(
        reason.contains("SIGHUP") || reason.contains("the terminal went away"),
        "{reason}"
    );
}

#[test]
fn a_lost_terminal_ends_the_run_even_when_sighup_is_ignored() {
    if !Tmux::available() {
        servebench_testkit::missing_tool(
            "a_lost_terminal_ends_the_run_even_when_sighup_is_ignored",
            "tmux",
            "apt-get install tmux",
        );
        return;
    }
    // SIGHUP ignored (inherited, as under `trap '' HUP`): only the dead terminal (end of file or
    // EIO on it) can tell the dashboard.
    let v = kill_the_terminal("eof", "trap '' HUP;");
    let reason = v["results"][0]["status_reason"]
        .as_str()
        .unwrap_or_default();
    assert!(reason.contains("the terminal went away"), "{reason}");
}
