//! Issue 17 item 4: a canary planted in every form a secret takes on an engine's command line
//! and environment never reaches a file servebench writes: host evidence → results JSON
//! (`engine_launch.cmdline`, `cmdline_text`, the event log) → `publish` (the drafted recipe's
//! `metadata.servebench.engine_launch`, the sweep's `source`).
//!
//! The engine is this test binary run again as a child (`canary_engine_process`, ignored in
//! normal runs): it serves the simulator in-process, and its command line carries the canary as
//! extra test-name filters, which the test harness accepts and matches against nothing.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_servebench");
const CANARY: &str = "CANARYx71q";

/// The canary in every form: flags in any spelling, short `-k`, URL credentials, a query
/// parameter, an `env`-style assignment, headers, a whole command in one argument, a value that
/// starts with a dash, odd spacing.
fn planted_args() -> Vec<String> {
    let c = CANARY;
    [
        "--api-key",
        c,
        &format!("--api-key={c}"),
        "--api_key",
        c,
        "--apiKey",
        c,
        "--bearer",
        c,
        "-k",
        c,
        &format!("--token={c}"),
        "--hf-token",
        c,
        "--password",
        c,
        &format!("HF_TOKEN={c}"),
        &format!("https://user:{c}@models.example.com/m"),
        &format!("https://example.com/m?token={c}"),
        &format!("Authorization: Bearer {c}"),
        &format!("vllm serve m --api-key {c} --port 8000"),
        // issue 17 break-it round: a value that starts with a dash, headers, `-pw`, odd spacing
        "--api-key",
        &format!("-{c}"),
        "--header",
        &format!("X-Api-Key:{c}"),
        "-H",
        &format!("x-api-key: {c}"),
        "--admin-pw",
        c,
        &format!("--api-key  {c}"),
        // second break-it round: JSON header maps, nested and glued assignments, abbreviations
        "--headers",
        &format!(r#"{{"X-Api-Key": "{c}"}}"#),
        &format!("--env=HF_TOKEN={c}"),
        &format!("-k{c}"),
        &format!("--auth-token:{c}"),
        "--api",
        c,
        &format!("https://hub.example.com/m?sig={c}"),
        // break-it round 9: an Azure SAS, a personal access token, `-p` as a password
        "--sas",
        &format!("sv=2020&sig={c}"),
        "--github-pat",
        c,
        "-p",
        c,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

#[test]
#[ignore = "the engine process of canary_never_reaches_a_written_file, started by it"]
fn canary_engine_process() {
    if std::env::var_os("SB_CANARY_ENGINE").is_none() {
        return;
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let cfg = servebench_sim::SimConfig {
            port: 0,
            ..Default::default()
        };
        let sim = servebench_sim::Sim::start(cfg).await.unwrap();
        println!("CANARY-ENGINE-PORT {}", sim.addr().port());
        // Serve until the parent closes stdin.
        let _ = tokio::task::spawn_blocking(|| {
            let mut s = String::new();
            let _ = std::io::stdin().read_to_string(&mut s);
        })
        .await;
        sim.shutdown();
    });
}

struct Engine(Child);

impl Drop for Engine {
    fn drop(&mut self) {
        drop(self.0.stdin.take());
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn sb(args: &[&str], cwd: &Path) -> Output {
    let out = Command::new(BIN)
        .args(args)
        .current_dir(cwd)
        .env_remove("HF_TOKEN")
        .output()
        .expect("run servebench");
    eprintln!(
        "$ servebench {}\n--- stdout\n{}--- stderr\n{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn all_files(d: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(d).unwrap().flatten() {
        let p = e.path();
        if e.file_type().unwrap().is_dir() {
            all_files(&p, out);
        } else {
            out.push(p);
        }
    }
}

#[test]
fn canary_never_reaches_a_written_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "canary_engine_process",
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
        "--",
    ])
    .args(planted_args())
    .env("SB_CANARY_ENGINE", "1")
    .env("HF_TOKEN", CANARY)
    .env("VLLM_API_KEY", CANARY)
    .env("HF_ENDPOINT", format!("https://u:{CANARY}@hf.example.com"))
    .env("VLLM_EXTRA", format!("--api-key {CANARY}"))
    .env("HF_HUB_HEADERS", format!("X-Api-Key: {CANARY}"))
    .env(
        "HF_HUB_EXTRA_HEADERS",
        format!(r#"{{"X-Api-Key":"{CANARY}"}}"#),
    )
    .env("HF_MIRROR", format!("https://hub.example.com?sig={CANARY}"))
    .stdin(Stdio::piped())
    .stdout(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn the engine process");
    let stdout = child.stdout.take().unwrap();
    let engine = Engine(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(stdout).lines().map_while(Result::ok) {
            // The harness prints `test canary_engine_process ... ` before it on the same line.
            if let Some(i) = l.find("CANARY-ENGINE-PORT ") {
                let p: String = l[i + 19..]
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .collect();
                let _ = tx.send(p.parse::<u16>().ok());
            }
        }
    });
    let port = rx
        .recv_timeout(Duration::from_secs(60))
        .ok()
        .flatten()
        .expect("the engine printed its port");
    let url = format!("http://127.0.0.1:{port}");
    let run = sb(
        &[
            "run",
            "--url",
            &url,
            "--concurrency",
            "1",
            "--contexts",
            "0",
            "--duration",
            "1",
            "--stable-seconds",
            "0.5",
            "--decode-warmup-seconds",
            "0",
            "--cell-pause-seconds",
            "0",
            "--max-tokens",
            "32",
            "--skip-prefill",
            "--no-calibration-cache",
            "--no-hw-monitor",
            "-o",
            "run.json",
        ],
        d,
    );
    assert!(run.status.success());
    let publish = sb(
        &[
            "publish",
            "run.json",
            "--registry",
            "reg",
            "--recipe",
            "canary-recipe",
        ],
        d,
    );
    assert!(publish.status.success());
    drop(engine);

    // The evidence is there (the test cannot pass by recording nothing) …
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("run.json")).unwrap()).unwrap();
    let el = &v["engine_launch"];
    assert_eq!(el["status"], "found", "{el}");
    let cmdline = el["cmdline"].to_string();
    for kept in [
        "--bearer",
        "-k",
        "--apiKey",
        "--hf-token",
        "models.example.com",
    ] {
        assert!(cmdline.contains(kept), "{kept}: {cmdline}");
    }
    assert_eq!(el["env"]["HF_TOKEN"], "<redacted>");
    let recipe = std::fs::read_to_string(d.join("reg/recipe/canary-recipe.json")).unwrap();
    assert!(
        recipe.contains("--bearer"),
        "the drafted recipe keeps the launch"
    );
    // … and the canary is in no file written, nor on any output.
    let mut files = Vec::new();
    all_files(d, &mut files);
    assert!(files.len() >= 6, "{files:?}");
    for f in &files {
        let bytes = std::fs::read(f).unwrap();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(CANARY),
            "the canary is in {}",
            f.display()
        );
    }
    for out in [&run, &publish] {
        assert!(!String::from_utf8_lossy(&out.stdout).contains(CANARY));
        assert!(!String::from_utf8_lossy(&out.stderr).contains(CANARY));
    }
}

/// A results file written by an older version or edited by hand may carry secrets in the
/// server URL, the client's arguments, the engine launch and the event log: `report` (every
/// format) and `compare` show them redacted (break-it round 9: they were shown as written).
#[test]
fn report_redacts_a_results_file_that_carries_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let src = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/data/results/llm-decode-bench-0.4.18-vllm-cpu-tiny.json"
    );
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(src).unwrap()).unwrap();
    let c = CANARY;
    v["metadata"]["server"] = Value::from(format!("http://u:{c}@127.0.0.1:8000?token={c}"));
    v["metadata"]["base_url"] = Value::from(format!("http://u:{c}@127.0.0.1:8000/v1?api_key={c}"));
    v["startup_diagnostics"]["args"] = serde_json::json!({"api_key": c, "model": "m"});
    v["engine_launch"] = serde_json::json!({
        "status": "found",
        "cmdline": ["vllm", "serve", "m", "--api-key", c, "-p", c],
        "cmdline_text": format!("vllm serve m --password={c}"),
        "env": {"HF_TOKEN": c},
    });
    v["event_log"] = serde_json::json!([format!(
        "10:00:00 launched with --api-key {c} Authorization: Bearer {c}"
    )]);
    std::fs::write(d.join("hand.json"), v.to_string()).unwrap();
    for format in ["text", "md", "html", "csv"] {
        let out = sb(&["report", "hand.json", "--format", format, "-o", "out"], d);
        assert!(out.status.success(), "{format}");
        let text = std::fs::read_to_string(d.join("out")).unwrap();
        assert!(!text.contains(c), "{format} report shows the canary");
        assert!(
            !String::from_utf8_lossy(&out.stderr).contains(c),
            "{format}"
        );
    }
    let out = sb(&["compare", "hand.json", "hand.json"], d);
    assert!(!String::from_utf8_lossy(&out.stdout).contains(c));
    assert!(!String::from_utf8_lossy(&out.stderr).contains(c));
}
