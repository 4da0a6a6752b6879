//! Running helper programs (`nvidia-smi`, `rocm-smi`, …) with a timeout.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// What a helper program did.
#[derive(Clone, Debug, PartialEq)]
pub struct CmdOutput {
    /// The command line (program name as given, then the arguments).
    pub cmd: Vec<String>,
    /// Exit code; `None` when it could not start, timed out or died from a signal.
    pub returncode: Option<i32>,
    /// Standard output (trailing newline removed).
    pub stdout: String,
    /// Standard error, or why the program could not run.
    pub stderr: String,
    /// True when it was killed after the timeout.
    pub timed_out: bool,
}

impl CmdOutput {
    /// Exited with code 0.
    pub fn ok(&self) -> bool {
        self.returncode == Some(0)
    }

    /// The seed's shape: `{cmd, returncode, stdout, stderr}` (plus `timed_out` when it did).
    pub fn to_json(&self) -> Value {
        let mut v = json!({
            "cmd": self.cmd,
            "returncode": self.returncode,
            "stdout": self.stdout,
            "stderr": self.stderr,
        });
        if self.timed_out {
            v["timed_out"] = Value::Bool(true);
        }
        v
    }
}

/// Finds `name` in `PATH` (like `which`); `None` when absent.
pub fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        p.metadata()
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    }
    #[cfg(not(unix))]
    {
        p.is_file()
    }
}

/// Runs `program args…` with stdin closed; kills it after `timeout`. Never panics: a program
/// that cannot start gives `returncode: None` and the reason in `stderr`.
pub fn run(program: &Path, args: &[&str], timeout: Duration) -> CmdOutput {
    let mut cmd_line = vec![program
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_else(|| program.display().to_string())];
    cmd_line.extend(args.iter().map(|a| a.to_string()));
    let mut out = CmdOutput {
        cmd: cmd_line,
        returncode: None,
        stdout: String::new(),
        stderr: String::new(),
        timed_out: false,
    };
    let mut child = match Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            out.stderr = format!("cannot run {}: {e}", program.display());
            return out;
        }
    };
    // Read both pipes on their own threads so a chatty program never blocks on a full pipe.
    let mut so = child.stdout.take();
    let mut se = child.stderr.take();
    let t_out = std::thread::spawn(move || {
        let mut b = Vec::new();
        if let Some(s) = so.as_mut() {
            let _ = s.read_to_end(&mut b);
        }
        b
    });
    let t_err = std::thread::spawn(move || {
        let mut b = Vec::new();
        if let Some(s) = se.as_mut() {
            let _ = s.read_to_end(&mut b);
        }
        b
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break Some(st),
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                out.timed_out = true;
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(_) => break None,
        }
    };
    out.returncode = status.and_then(|s| s.code());
    let text = |b: Vec<u8>| {
        String::from_utf8_lossy(&b)
            .trim_end_matches(['\n', '\r'])
            .to_string()
    };
    out.stdout = text(t_out.join().unwrap_or_default());
    out.stderr = text(t_err.join().unwrap_or_default());
    if out.timed_out {
        out.stderr = format!(
            "{}{}timed out after {:.1} s",
            out.stderr,
            if out.stderr.is_empty() { "" } else { "; " },
            timeout.as_secs_f64()
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_and_times_out() {
        let sh = which("sh").expect("sh");
        let o = run(
            &sh,
            &["-c", "echo hi; echo err >&2; exit 3"],
            Duration::from_secs(5),
        );
        assert_eq!(
            (o.returncode, o.stdout.as_str(), o.stderr.as_str()),
            (Some(3), "hi", "err")
        );
        let o = run(&sh, &["-c", "sleep 5"], Duration::from_millis(200));
        assert!(o.timed_out && o.returncode.is_none(), "{o:?}");
        let o = run(Path::new("/nonexistent/prog"), &[], Duration::from_secs(1));
        assert!(o.returncode.is_none() && o.stderr.contains("cannot run"));
    }
}
