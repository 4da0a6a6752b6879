//! Startup diagnostics (seed spec §3.1, §3.20, §6.4), collected before the server is contacted.
//!
//! The seed's keys: `version`, `server_url`, `hostname`, `uname`, `env` (the client's
//! engine-related variables), `args`, `nvidia_p2p_override`, `p2pmark`, `amd_fabric`,
//! `nvidia_smi_query` and `nvidia_smi_topo` (`{cmd, returncode, stdout, stderr}`) or
//! `nvidia_smi_error`. servebench adds `command_line` (the client's argv, secrets redacted),
//! `driver_version`, `cuda_version`, `cpu_model`, `cpu_logical_count`, `memory_total_mb`,
//! `memory_available_mb`, `numa_nodes`, and `rocm_smi` / `amd_smi` where those tools exist.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Map, Value};

use crate::cmd::{self, CmdOutput};
use crate::secrets::{engine_env, redact_args, Scrubber};

/// The seed's startup `nvidia-smi` query fields.
pub const STARTUP_QUERY: &str =
    "--query-gpu=index,name,driver_version,pci.bus_id,pcie.link.gen.current,pcie.link.width.current,power.limit";

/// Timeout of each diagnostic command.
pub const DIAG_TIMEOUT: Duration = Duration::from_secs(10);

/// Largest command output kept, bytes.
const MAX_OUTPUT: usize = 64 * 1024;

/// What the caller knows.
#[derive(Clone, Debug, Default)]
pub struct DiagInput {
    /// Tool version.
    pub version: String,
    /// Resolved server URL.
    pub server_url: String,
    /// Argument snapshot (`args`).
    pub args: Value,
    /// The client's command line (argv); redacted here.
    pub command_line: Vec<String>,
    /// Root of `/proc` and `/sys` (`/`; a fixture tree in tests).
    pub root: PathBuf,
}

fn capped(mut o: CmdOutput) -> CmdOutput {
    for s in [&mut o.stdout, &mut o.stderr] {
        if s.len() > MAX_OUTPUT {
            let mut cut = MAX_OUTPUT;
            while !s.is_char_boundary(cut) {
                cut -= 1;
            }
            s.truncate(cut);
            s.push_str("\n[truncated]");
        }
    }
    o
}

/// `CUDA Version: 12.4` in the plain `nvidia-smi` banner.
pub fn parse_cuda_version(banner: &str) -> Option<String> {
    let i = banner.find("CUDA Version:")?;
    let v = banner[i + "CUDA Version:".len()..]
        .split_whitespace()
        .next()?
        .trim_end_matches('|');
    (!v.is_empty()).then(|| v.to_string())
}

/// `Driver Version: 550.54.15` in the plain `nvidia-smi` banner, or the kernel module version
/// in `/proc/driver/nvidia/version` (`NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15 …`).
pub fn parse_driver_version(text: &str) -> Option<String> {
    if let Some(i) = text.find("Driver Version:") {
        return text[i + "Driver Version:".len()..]
            .split_whitespace()
            .next()
            .map(|s| s.to_string());
    }
    let i = text.find("Kernel Module")?;
    text[i + "Kernel Module".len()..]
        .split_whitespace()
        .next()
        .map(|s| s.to_string())
}

/// Hostname from `/proc/sys/kernel/hostname`, else `/etc/hostname`.
pub fn hostname(root: &Path) -> String {
    std::fs::read_to_string(root.join("proc/sys/kernel/hostname"))
        .or_else(|_| std::fs::read_to_string(root.join("etc/hostname")))
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// `uname -a`-like text: sysname, nodename, release, version, machine.
pub fn uname() -> String {
    #[cfg(unix)]
    {
        // SAFETY: uname fills the zeroed struct we own.
        let mut u: libc::utsname = unsafe { std::mem::zeroed() };
        if unsafe { libc::uname(&mut u) } == 0 {
            let f = |a: &[libc::c_char]| {
                let bytes: Vec<u8> = a
                    .iter()
                    .take_while(|&&c| c != 0)
                    .map(|&c| c as u8)
                    .collect();
                String::from_utf8_lossy(&bytes).into_owned()
            };
            return format!(
                "{} {} {} {} {}",
                f(&u.sysname),
                f(&u.nodename),
                f(&u.release),
                f(&u.version),
                f(&u.machine)
            );
        }
    }
    String::new()
}

/// CPU model name and logical CPU count from `/proc/cpuinfo`.
pub fn cpu_info(root: &Path) -> (Option<String>, Option<usize>) {
    let t = std::fs::read_to_string(root.join("proc/cpuinfo")).unwrap_or_default();
    let model = t.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        matches!(k.trim(), "model name" | "Model" | "cpu model" | "Hardware")
            .then(|| v.trim().to_string())
    });
    let n = t.lines().filter(|l| l.starts_with("processor")).count();
    (model, (n > 0).then_some(n))
}

/// `MemTotal` and `MemAvailable` of `/proc/meminfo`, MiB.
pub fn memory_mb(root: &Path) -> (Option<f64>, Option<f64>) {
    let t = std::fs::read_to_string(root.join("proc/meminfo")).unwrap_or_default();
    let get = |k: &str| {
        t.lines().find_map(|l| {
            let v = l.strip_prefix(k)?.trim().trim_end_matches("kB").trim();
            v.parse::<f64>().ok().map(|kb| (kb / 1024.0).round())
        })
    };
    (get("MemTotal:"), get("MemAvailable:"))
}

/// NUMA nodes from `/sys/devices/system/node/node*`: `[{node, cpulist, distance}]`.
pub fn numa_nodes(root: &Path) -> Vec<Value> {
    let Ok(d) = std::fs::read_dir(root.join("sys/devices/system/node")) else {
        return Vec::new();
    };
    let mut nodes: Vec<(u32, PathBuf)> = d
        .flatten()
        .filter_map(|e| {
            let n = e.file_name().to_str()?.strip_prefix("node")?.parse().ok()?;
            Some((n, e.path()))
        })
        .collect();
    nodes.sort();
    nodes
        .into_iter()
        .map(|(n, p)| {
            let read = |f: &str| {
                std::fs::read_to_string(p.join(f))
                    .ok()
                    .map(|s| s.trim().to_string())
            };
            let distance: Option<Vec<u64>> = read("distance").map(|s| {
                s.split_whitespace()
                    .filter_map(|x| x.parse().ok())
                    .collect()
            });
            json!({"node": n, "cpulist": read("cpulist"), "distance": distance})
        })
        .collect()
}

/// Collects the startup diagnostics. `p2p` is the P2P check's object (also written at the top
/// level of the results). Every string passes through `scrubber`.
pub fn collect(
    input: &DiagInput,
    p2p: &Map<String, Value>,
    scrubber: &Scrubber,
) -> Map<String, Value> {
    let root = &input.root;
    let mut m = Map::new();
    m.insert("version".into(), json!(input.version));
    m.insert("tool".into(), json!("servebench"));
    m.insert("server_url".into(), json!(input.server_url));
    m.insert("hostname".into(), json!(hostname(root)));
    m.insert("uname".into(), json!(uname()));
    m.insert("os".into(), json!(std::env::consts::OS));
    m.insert("arch".into(), json!(std::env::consts::ARCH));
    m.insert(
        "client_cpus".into(),
        json!(std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)),
    );
    m.insert("env".into(), Value::Object(engine_env(std::env::vars())));
    m.insert("args".into(), input.args.clone());
    m.insert(
        "command_line".into(),
        json!(redact_args(&input.command_line)),
    );
    m.insert("nvidia_p2p_override".into(), Value::Object(p2p.clone()));
    m.insert(
        "p2pmark".into(),
        json!({"status": "not_run", "reason": "servebench has no GPU interconnect micro-benchmark yet (docs/interconnect-check.md)"}),
    );
    m.insert(
        "amd_fabric".into(),
        json!({"status": "not_run", "reason": "servebench has no NUMA fabric micro-benchmark yet (docs/interconnect-check.md)"}),
    );

    let mut driver: Option<String> = None;
    let mut cuda: Option<String> = None;
    match cmd::which("nvidia-smi") {
        Some(smi) => {
            let q = capped(cmd::run(
                &smi,
                &[STARTUP_QUERY, "--format=csv,noheader,nounits"],
                DIAG_TIMEOUT,
            ));
            if q.ok() {
                driver = q
                    .stdout
                    .lines()
                    .next()
                    .and_then(|l| l.split(',').nth(2))
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty() && !s.starts_with('['));
            }
            m.insert("nvidia_smi_query".into(), q.to_json());
            let t = capped(cmd::run(&smi, &["topo", "-m"], DIAG_TIMEOUT));
            m.insert("nvidia_smi_topo".into(), t.to_json());
            let banner = cmd::run(&smi, &[], DIAG_TIMEOUT);
            if banner.ok() {
                cuda = parse_cuda_version(&banner.stdout);
                driver = driver.or_else(|| parse_driver_version(&banner.stdout));
            }
        }
        None => {
            m.insert(
                "nvidia_smi_error".into(),
                json!("nvidia-smi not found in PATH"),
            );
        }
    }
    if driver.is_none() {
        driver = std::fs::read_to_string(root.join("proc/driver/nvidia/version"))
            .ok()
            .and_then(|t| parse_driver_version(&t));
    }
    if driver.is_none() || cuda.is_none() {
        if let Some((d, c)) = crate::gpu::nvml_versions() {
            driver = driver.or(d);
            cuda = cuda.or(c);
        }
    }
    m.insert("driver_version".into(), json!(driver));
    m.insert("cuda_version".into(), json!(cuda));
    for (tool, args) in [
        (
            "rocm-smi",
            &["--showproductname", "--showdriverversion"][..],
        ),
        ("amd-smi", &["static"][..]),
    ] {
        if let Some(p) = cmd::which(tool) {
            let o = capped(cmd::run(&p, args, DIAG_TIMEOUT));
            m.insert(tool.replace('-', "_"), o.to_json());
        }
    }
    let (model, n) = cpu_info(root);
    m.insert("cpu_model".into(), json!(model));
    m.insert("cpu_logical_count".into(), json!(n));
    let (total, avail) = memory_mb(root);
    m.insert("memory_total_mb".into(), json!(total));
    m.insert("memory_available_mb".into(), json!(avail));
    m.insert("numa_nodes".into(), json!(numa_nodes(root)));

    let mut v = Value::Object(m);
    scrubber.scrub_value(&mut v);
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn banner() {
        let b = "| NVIDIA-SMI 550.54.15   Driver Version: 550.54.15      CUDA Version: 12.4     |";
        assert_eq!(parse_cuda_version(b).as_deref(), Some("12.4"));
        assert_eq!(parse_driver_version(b).as_deref(), Some("550.54.15"));
        assert_eq!(
            parse_driver_version("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023").as_deref(),
            Some("535.104.05")
        );
    }

    #[test]
    fn fixture_tree() {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        std::fs::create_dir_all(r.join("proc")).unwrap();
        std::fs::write(r.join("proc/cpuinfo"), "processor\t: 0\nmodel name\t: AMD EPYC 9554\nprocessor\t: 1\nmodel name\t: AMD EPYC 9554\n").unwrap();
        std::fs::write(
            r.join("proc/meminfo"),
            "MemTotal:       2048000 kB\nMemAvailable:   1024000 kB\n",
        )
        .unwrap();
        let n0 = r.join("sys/devices/system/node/node0");
        std::fs::create_dir_all(&n0).unwrap();
        std::fs::write(n0.join("cpulist"), "0-1\n").unwrap();
        std::fs::write(n0.join("distance"), "10 32\n").unwrap();
        assert_eq!(cpu_info(r), (Some("AMD EPYC 9554".into()), Some(2)));
        assert_eq!(memory_mb(r), (Some(2000.0), Some(1000.0)));
        assert_eq!(
            numa_nodes(r),
            vec![json!({"node": 0, "cpulist": "0-1", "distance": [10, 32]})]
        );
    }
}
