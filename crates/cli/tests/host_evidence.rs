//! Host evidence end to end: the `servebench` binary against the simulator with
//!
//! * a fake `nvidia-smi` on `PATH` (two GPUs, constant power draw) driving the hardware monitor:
//!   startup query and topology, per-cell `hardware_summary`, `hardware_run_summary`, energy per
//!   output token from the fake power, the GPU panel of the report;
//! * no GPU at all: one warning line, everything else as before;
//! * secrets in the environment and on the command line: never written to the results file,
//!   stdout or stderr;
//! * a simulator started as a separate process: `engine_launch` records its command line.
//!
//! Every results file is validated against the schema, with and without hardware data.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::Duration;

use serde_json::Value;

mod common;

use common::assert_schema_valid;

/// Short cells: 2 s windows, 0.5 s readiness, no warmup, no pauses.
const SHORT: &[&str] = &[
    "--duration",
    "2",
    "--stable-seconds",
    "0.5",
    "--decode-warmup-seconds",
    "0",
    "--cell-pause-seconds",
    "0",
    "--max-tokens",
    "64",
    "--skip-prefill",
    "--no-calibration-cache",
];

/// Power draw of the two fake GPUs, W (constant, so the energy integral is exact).
const FAKE_POWER_W: [f64; 2] = [100.5, 150.25];

/// A POSIX-shell `nvidia-smi` for two GPUs: any `--query-gpu` field list (unknown fields are
/// `[N/A]`), `topo -m`, `dmon -s t -c 1` and the plain banner.
const FAKE_NVIDIA_SMI: &str = r#"#!/bin/sh
val() {
  case "$2" in
    index) echo "$1" ;;
    name) echo "NVIDIA Fake H100 $1" ;;
    uuid) echo "GPU-fake-000$1" ;;
    driver_version) echo "550.54.15" ;;
    pci.bus_id) echo "00000000:0$1:00.0" ;;
    temperature.gpu) echo $((40 + $1 * 5)) ;;
    utilization.gpu) echo $((70 + $1 * 10)) ;;
    utilization.memory) echo $((30 + $1)) ;;
    memory.used) echo $((20000 + $1 * 1000)) ;;
    memory.total) echo 81559 ;;
    power.draw) if [ "$1" = 0 ]; then echo 100.50; else echo 150.25; fi ;;
    power.limit) echo 350.00 ;;
    clocks.sm) echo 1980 ;;
    clocks.mem) echo 2619 ;;
    pcie.link.gen.current) echo 5 ;;
    pcie.link.width.current) echo 16 ;;
    clocks_event_reasons.active|clocks_throttle_reasons.active)
      if [ "$1" = 0 ]; then echo 0x0000000000000000; else echo 0x0000000000000004; fi ;;
    *) echo "[N/A]" ;;
  esac
}
case "$1" in
  --query-gpu=*)
    fields="${1#--query-gpu=}"
    for i in 0 1; do
      line=""; sep=""
      oldifs="$IFS"; IFS=,
      for f in $fields; do line="$line$sep$(val $i $f)"; sep=", "; done
      IFS="$oldifs"
      echo "$line"
    done ;;
  topo)
    printf 'GPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tNV18\t0-15\t0\nGPU1\tNV18\t X \t0-15\t0\n' ;;
  dmon)
    printf '# gpu  rxpci  txpci\n# Idx   MB/s   MB/s\n    0    120     80\n    1    200     40\n' ;;
  "")
    echo "| NVIDIA-SMI 550.54.15    Driver Version: 550.54.15    CUDA Version: 12.4 |" ;;
  *) echo "fake nvidia-smi: unsupported $*" >&2; exit 2 ;;
esac
"#;

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

    /// Writes the fake `nvidia-smi` into `<dir>/bin` and returns a PATH with it first.
    fn fake_gpu_path(&self) -> String {
        let bin = self.path("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let p = bin.join("nvidia-smi");
        std::fs::write(&p, FAKE_NVIDIA_SMI).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        )
    }

    /// A PATH with the system tools but no `nvidia-smi` (this machine has none; a GPU test
    /// host may, so it is filtered out).
    fn no_gpu_path(&self) -> String {
        std::env::var("PATH")
            .unwrap_or_default()
            .split(':')
            .filter(|d| !Path::new(d).join("nvidia-smi").exists())
            .collect::<Vec<_>>()
            .join(":")
    }

    fn command(&self, args: &[&str], env: &[(&str, &str)]) -> Command {
        let mut c = common::isolated(self.dir.path());
        c.args(args);
        for (k, v) in env {
            c.env(k, v);
        }
        c
    }

    /// `servebench run <SHORT> -o results.json <extra>` (embedded simulator unless `extra` has
    /// a target); returns the output and the results file text.
    fn run(&self, extra: &[&str], env: &[(&str, &str)]) -> (Output, String) {
        let out_path = self.path("results.json");
        let mut args: Vec<&str> = vec!["run"];
        args.extend_from_slice(SHORT);
        args.extend_from_slice(&["-o", out_path.to_str().unwrap()]);
        args.extend_from_slice(extra);
        let out = self.command(&args, env).output().expect("run servebench");
        let text = std::fs::read_to_string(&out_path).unwrap_or_else(|e| {
            panic!(
                "no results file ({e})\n--- stdout ---\n{}\n--- stderr ---\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        });
        assert!(
            out.status.success(),
            "exit {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out, text)
    }
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn fake_nvidia_smi_drives_the_monitor_end_to_end() {
    let b = Bench::new();
    let path = b.fake_gpu_path();
    let (out, text) = b.run(
        &[
            "--concurrency",
            "1,4",
            "--contexts",
            "0",
            "--hw-monitor-source",
            "nvidia-smi",
            "--hw-monitor-interval",
            "0.25",
        ],
        &[("PATH", &path)],
    );
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_schema_valid(&v);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("GPU telemetry"), "{stderr}");
    assert!(stderr.contains("hardware monitor: nvidia-smi"), "{stderr}");
    // The live view shows one hardware line per measured cell.
    assert_eq!(
        stderr
            .lines()
            .filter(|l| l.contains("hardware C=")
                && l.contains("J/token")
                && l.contains("throttled: sw_power_cap"))
            .count(),
        2,
        "{stderr}"
    );

    // Startup diagnostics in the seed's shape.
    let sd = &v["startup_diagnostics"];
    let q = &sd["nvidia_smi_query"];
    assert_eq!(q["returncode"], 0);
    assert_eq!(q["cmd"][1], servebench_host::diag::STARTUP_QUERY);
    assert_eq!(q["stdout"].as_str().unwrap().lines().count(), 2);
    assert!(q["stdout"]
        .as_str()
        .unwrap()
        .starts_with("0, NVIDIA Fake H100 0, 550.54.15"));
    assert!(sd["nvidia_smi_topo"]["stdout"]
        .as_str()
        .unwrap()
        .contains("NV18"));
    assert!(sd.get("nvidia_smi_error").is_none());
    assert_eq!(sd["driver_version"], "550.54.15");
    assert_eq!(sd["cuda_version"], "12.4");

    // Run summary: two GPUs, seed field names, the fake values.
    let run = &v["hardware_run_summary"];
    assert_eq!(run["gpu_count"], 2);
    assert_eq!(run["source"], "nvidia-smi");
    assert_eq!(run["gpus"].as_array().unwrap().len(), 2);
    let total_w = FAKE_POWER_W[0] + FAKE_POWER_W[1];
    assert_eq!(f(&run["power_total_avg_w"]), total_w);
    assert_eq!(f(&run["power_limit_total_w"]), 700.0);
    assert_eq!(f(&run["gpu_util_avg_pct"]), 75.0);
    assert_eq!(f(&run["gpu_util_max_pct"]), 80.0);
    assert_eq!(f(&run["vram_used_max_mb"]), 41000.0);
    assert_eq!(f(&run["vram_total_mb"]), 2.0 * 81559.0);
    assert_eq!(f(&run["pcie_rx_avg_mb_s"]), 320.0);
    assert_eq!(f(&run["pcie_tx_avg_mb_s"]), 120.0);
    assert_eq!(f(&run["temp_max_c"]), 45.0);
    assert_eq!(run["gpus"][1]["name"], "NVIDIA Fake H100 1");
    assert_eq!(f(&run["gpus"][1]["sm_clock_avg_mhz"]), 1980.0);
    assert_eq!(f(&run["gpus"][0]["pcie_gen_min"]), 5.0);
    assert_eq!(f(&run["gpus"][1]["throttle_reasons"]["sw_power_cap"]), 1.0);
    assert_eq!(run["gpus"][0]["throttle_reasons"], serde_json::json!({}));
    assert_eq!(
        run["throttle_limiting_reasons"],
        serde_json::json!(["sw_power_cap"])
    );
    assert!(run["samples"].as_u64().unwrap() >= 4, "{run}");

    // Per cell: summary over the measured window and energy per output token.
    let cells = v["results"].as_array().unwrap();
    assert_eq!(cells.len(), 2);
    for c in cells {
        assert_eq!(c["status"], "ok", "{c}");
        let hs = &c["hardware_summary"];
        assert_eq!(hs["gpu_count"], 2, "{hs}");
        assert_eq!(hs["gpus"].as_array().unwrap().len(), 2);
        assert!(hs["samples"].as_u64().unwrap() >= 2, "{hs}");
        assert_eq!(f(&hs["power_total_avg_w"]), total_w);
        // Energy = ∫ P dt over the window = constant power × window length; J/token =
        // energy / output tokens credited to the window.
        let window_s = f(&c["measurement_seconds"]);
        let tokens = c["client_output_tokens"].as_u64().unwrap();
        assert!(tokens > 0);
        let energy = f(&hs["energy_joules"]);
        assert!(
            (energy - total_w * window_s).abs() < 0.01,
            "{energy} vs {}",
            total_w * window_s
        );
        assert_eq!(hs["energy_output_tokens"], tokens);
        let jpt = f(&hs["energy_per_output_token_j"]);
        let want = total_w * window_s / tokens as f64;
        assert!((jpt - want).abs() < 2e-6 + want * 1e-5, "{jpt} vs {want}");
    }

    // The schema really describes the hardware data: a malformed summary is rejected.
    let schema: Value = serde_json::from_str(servebench_results::SCHEMA_JSON).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    for (ptr, bad) in [
        (
            "/results/0/hardware_summary/gpus/0/index",
            Value::from("zero"),
        ),
        ("/hardware_run_summary/energy_joules", Value::from("a lot")),
        ("/engine_launch/status", Value::from("maybe")),
        ("/nvidia_p2p_override/missing", Value::from(3)),
    ] {
        let mut w = v.clone();
        *w.pointer_mut(ptr).unwrap_or_else(|| panic!("{ptr}")) = bad;
        assert!(!validator.is_valid(&w), "{ptr} accepted");
    }

    // The text report has a GPU panel.
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("GPU / hardware"), "{stdout}");
    assert!(stdout.contains("NVIDIA Fake H100 1"), "{stdout}");
    assert!(stdout.contains("J/token"), "{stdout}");
    assert!(stdout.contains("sw_power_cap"), "{stdout}");
}

#[test]
fn without_a_gpu_one_warning_and_valid_results() {
    let b = Bench::new();
    let path = b.no_gpu_path();
    let (out, text) = b.run(
        &[
            "--concurrency",
            "1",
            "--contexts",
            "0",
            "--hw-monitor-source",
            "nvidia-smi",
        ],
        &[("PATH", &path)],
    );
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_schema_valid(&v);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("GPU telemetry"))
        .collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(
        warnings[0].contains("nvidia-smi not found"),
        "{}",
        warnings[0]
    );
    assert_eq!(
        v["startup_diagnostics"]["nvidia_smi_error"],
        "nvidia-smi not found in PATH"
    );
    assert_eq!(v["hardware_run_summary"]["gpu_count"], 0);
    assert_eq!(v["results"][0]["status"], "ok");
    assert_eq!(
        v["results"][0]["hardware_summary"]["energy_joules"],
        Value::Null
    );
    assert_eq!(v["p2pmark"]["status"], "not_run");
    assert_eq!(v["amd_fabric"]["status"], "not_run");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("GPU / hardware"));

    // A bad interval is a usage error (exit 2) naming the flag, before anything runs.
    let bad = b
        .command(&["run", "--hw-monitor-interval", "0"], &[])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("--hw-monitor-interval") && err.contains("--no-hw-monitor"),
        "{err}"
    );

    // --no-hw-monitor: empty summaries, still valid.
    let (_, text) = b.run(
        &["--concurrency", "1", "--contexts", "0", "--no-hw-monitor"],
        &[],
    );
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_schema_valid(&v);
    assert_eq!(v["hardware_run_summary"], serde_json::json!({}));
    assert_eq!(v["results"][0]["hardware_summary"], serde_json::json!({}));
}

const HF: &str = "hf_secretvalue1234567";
const OPENAI: &str = "sk-openai-secret-456789";
const CLI_KEY: &str = "sk-cli-secret-key-789";

#[test]
fn secrets_are_never_written() {
    let b = Bench::new();
    let path = b.fake_gpu_path();
    let (out, text) = b.run(
        &[
            "--concurrency",
            "1",
            "--contexts",
            "0",
            "--api-key",
            CLI_KEY,
            "--hw-monitor-source",
            "nvidia-smi",
            "--hw-monitor-interval",
            "0.5",
        ],
        &[
            ("PATH", &path),
            ("HF_TOKEN", HF),
            ("OPENAI_API_KEY", OPENAI),
            ("VLLM_API_KEY", OPENAI),
            ("VLLM_USE_V1", "1"),
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    for secret in [HF, OPENAI, CLI_KEY] {
        assert!(!text.contains(secret), "{secret} in the results file");
        assert!(!stdout.contains(secret), "{secret} on stdout");
        assert!(!stderr.contains(secret), "{secret} on stderr");
    }
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_schema_valid(&v);
    let sd = &v["startup_diagnostics"];
    assert_eq!(sd["env"]["VLLM_API_KEY"], "<redacted>");
    assert_eq!(sd["env"]["HF_TOKEN"], "<redacted>");
    assert_eq!(sd["env"]["VLLM_USE_V1"], "1");
    let cl: Vec<&str> = sd["command_line"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap())
        .collect();
    let i = cl
        .iter()
        .position(|a| *a == "--api-key")
        .expect("--api-key kept");
    assert_eq!(cl[i + 1], "<redacted>");
    // The embedded simulator listens in this process: its launch is this command line, redacted.
    let el = &v["engine_launch"];
    assert_eq!(el["status"], "found", "{el}");
    assert_eq!(el["self"], true);
    assert_eq!(el["env"]["HF_TOKEN"], "<redacted>");
}

/// Reads the simulator's stderr until it prints its address; returns the port.
fn sim_port(child: &mut Child) -> u16 {
    let err = child.stderr.take().unwrap();
    let mut lines = BufReader::new(err).lines();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in lines.by_ref().map_while(Result::ok) {
            if let Some(i) = l.find("http://127.0.0.1:") {
                let port: String = l[i + 17..]
                    .chars()
                    .take_while(|c| c.is_ascii_digit())
                    .collect();
                let _ = tx.send(port.parse::<u16>().ok());
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(60))
        .ok()
        .flatten()
        .expect("the simulator printed its address")
}

struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn engine_launch_of_a_separate_simulator_process() {
    let b = Bench::new();
    let engine_key = "sk-engine-secret-000111";
    let mut child = b
        .command(
            &["sim", "--port", "0", "--api-key", engine_key],
            &[("HF_TOKEN", HF), ("VLLM_LOGGING_LEVEL", "INFO")],
        )
        .spawn()
        .expect("spawn servebench sim");
    let port = sim_port(&mut child);
    let pid = child.id();
    let _guard = Kill(child);
    let url = format!("http://127.0.0.1:{port}");
    let (out, text) = b.run(
        &[
            "--url",
            &url,
            "--api-key",
            engine_key,
            "--concurrency",
            "1",
            "--contexts",
            "0",
            "--no-hw-monitor",
        ],
        &[],
    );
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_schema_valid(&v);
    let el = &v["engine_launch"];
    assert_eq!(el["status"], "found", "{el}");
    assert_eq!(el["pid"], pid);
    assert_eq!(el["self"], false);
    assert_eq!(el["port"], port);
    let cmd: Vec<&str> = el["cmdline"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap())
        .collect();
    assert!(cmd[0].ends_with("servebench"), "{cmd:?}");
    assert_eq!(
        &cmd[1..],
        &["sim", "--port", "0", "--api-key", "<redacted>"]
    );
    assert_eq!(
        el["cwd"],
        b.dir.path().canonicalize().unwrap().display().to_string()
    );
    assert_eq!(el["env"]["HF_TOKEN"], "<redacted>");
    assert_eq!(el["env"]["VLLM_LOGGING_LEVEL"], "INFO");
    for s in [engine_key, HF] {
        assert!(!text.contains(s));
        assert!(!String::from_utf8_lossy(&out.stdout).contains(s));
        assert!(!String::from_utf8_lossy(&out.stderr).contains(s));
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("startup engine launch: pid {pid}")),
        "{stderr}"
    );

    // A remote target: no launch, with the reason.
    let el = servebench_host::launch::discover(
        &servebench_host::launch::LaunchQuery {
            loopback: false,
            host: "api.example.com:443".into(),
            port: Some(443),
            root: "/".into(),
        },
        &servebench_host::Scrubber::default(),
    );
    assert_eq!(el["status"], "remote");
    assert!(el["reason"].as_str().unwrap().contains("not on this host"));
}
