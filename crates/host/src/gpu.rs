//! Per-GPU samples: NVML (loaded at run time) or `nvidia-smi` as a fallback.
//!
//! NVML is reached through `nvml-wrapper`, which opens `libnvidia-ml.so.1` with `libloading`
//! when the monitor starts, so the binary starts (and runs) on machines without an NVIDIA
//! driver. Without NVML, `nvidia-smi --query-gpu=… --format=csv,noheader,nounits` gives the
//! same fields and `nvidia-smi dmon -s t -c 1` the PCIe rx/tx throughput.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use crate::cmd;

/// One GPU at one moment. `None` = not reported by the driver (`[N/A]`, not supported).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct GpuSample {
    /// GPU index as the driver numbers it.
    pub index: u32,
    /// Product name.
    pub name: Option<String>,
    /// GPU UUID.
    pub uuid: Option<String>,
    /// GPU (SM) utilisation, %.
    pub util_pct: Option<f64>,
    /// Memory-controller utilisation, %.
    pub mem_util_pct: Option<f64>,
    /// VRAM used, MiB.
    pub vram_used_mb: Option<f64>,
    /// VRAM total, MiB.
    pub vram_total_mb: Option<f64>,
    /// Power draw, W.
    pub power_w: Option<f64>,
    /// Enforced power limit, W.
    pub power_limit_w: Option<f64>,
    /// SM clock, MHz.
    pub sm_clock_mhz: Option<f64>,
    /// Memory clock, MHz.
    pub mem_clock_mhz: Option<f64>,
    /// GPU temperature, °C.
    pub temp_c: Option<f64>,
    /// Current PCIe link generation.
    pub pcie_gen: Option<f64>,
    /// Current PCIe link width (lanes).
    pub pcie_width: Option<f64>,
    /// PCIe receive throughput, MB/s.
    pub pcie_rx_mb_s: Option<f64>,
    /// PCIe transmit throughput, MB/s.
    pub pcie_tx_mb_s: Option<f64>,
    /// Active clock throttle (clock event) reasons, names as in [`THROTTLE_REASONS`]; `None`
    /// when the driver does not report them.
    pub throttle_reasons: Option<Vec<String>>,
}

/// NVML / nvidia-smi clock throttle reason bits and their names (`nvmlClocksThrottleReason*`).
pub const THROTTLE_REASONS: [(u64, &str); 9] = [
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
];

/// Names of the reasons set in `mask` (unknown bits as `0x…`).
pub fn throttle_names(mask: u64) -> Vec<String> {
    let mut out: Vec<String> = THROTTLE_REASONS
        .iter()
        .filter(|(b, _)| mask & b != 0)
        .map(|(_, n)| n.to_string())
        .collect();
    let known: u64 = THROTTLE_REASONS.iter().map(|(b, _)| b).sum();
    if mask & !known != 0 {
        out.push(format!("0x{:x}", mask & !known));
    }
    out
}

/// The monitor's `--query-gpu` fields, in order. `name` is last because it may contain commas.
pub const QUERY_FIELDS: [&str; 16] = [
    "index",
    "uuid",
    "temperature.gpu",
    "utilization.gpu",
    "utilization.memory",
    "memory.used",
    "memory.total",
    "power.draw",
    "power.limit",
    "clocks.sm",
    "clocks.mem",
    "pcie.link.gen.current",
    "pcie.link.width.current",
    "clocks_event_reasons.active",
    "clocks_throttle_reasons.active",
    "name",
];

fn num(s: &str) -> Option<f64> {
    let t = s.trim();
    if t.is_empty() || t.starts_with('[') || t.eq_ignore_ascii_case("n/a") {
        return None;
    }
    if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        return u64::from_str_radix(h, 16).ok().map(|v| v as f64);
    }
    t.parse::<f64>().ok().filter(|v| v.is_finite())
}

fn text(s: &str) -> Option<String> {
    let t = s.trim();
    (!t.is_empty() && !t.starts_with('[') && !t.eq_ignore_ascii_case("n/a")).then(|| t.to_string())
}

/// Parses `nvidia-smi --query-gpu=<fields> --format=csv,noheader,nounits` output. Lines with
/// fewer values than fields are skipped; the last field takes the rest of the line.
pub fn parse_query(fields: &[&str], stdout: &str) -> Vec<GpuSample> {
    let mut out = Vec::new();
    for line in stdout.lines().filter(|l| !l.trim().is_empty()) {
        let parts: Vec<&str> = line.splitn(fields.len(), ',').collect();
        if parts.len() < fields.len() {
            continue;
        }
        let mut g = GpuSample::default();
        let mut have_index = false;
        for (f, v) in fields.iter().zip(parts.iter()) {
            match *f {
                "index" => {
                    if let Some(i) = num(v) {
                        g.index = i as u32;
                        have_index = true;
                    }
                }
                "name" => g.name = text(v),
                "uuid" => g.uuid = text(v),
                "temperature.gpu" => g.temp_c = num(v),
                "utilization.gpu" => g.util_pct = num(v),
                "utilization.memory" => g.mem_util_pct = num(v),
                "memory.used" => g.vram_used_mb = num(v),
                "memory.total" => g.vram_total_mb = num(v),
                "power.draw" => g.power_w = num(v),
                "power.limit" => g.power_limit_w = num(v),
                "clocks.sm" => g.sm_clock_mhz = num(v),
                "clocks.mem" => g.mem_clock_mhz = num(v),
                "pcie.link.gen.current" => g.pcie_gen = num(v),
                "pcie.link.width.current" => g.pcie_width = num(v),
                "clocks_event_reasons.active" | "clocks_throttle_reasons.active" => {
                    if let Some(m) = num(v) {
                        g.throttle_reasons = Some(throttle_names(m as u64));
                    }
                }
                _ => {}
            }
        }
        if have_index {
            out.push(g);
        }
    }
    out
}

/// Parses `nvidia-smi dmon -s t` output: `(gpu index, rx MB/s, tx MB/s)` per data line.
pub fn parse_dmon(stdout: &str) -> Vec<(u32, Option<f64>, Option<f64>)> {
    let mut out = Vec::new();
    let mut cols: Option<(usize, usize, usize)> = None;
    for line in stdout.lines() {
        let t = line.trim();
        if let Some(h) = t.strip_prefix('#') {
            let names: Vec<&str> = h.split_whitespace().collect();
            if let (Some(g), Some(r), Some(x)) = (
                names.iter().position(|n| *n == "gpu"),
                names.iter().position(|n| *n == "rxpci"),
                names.iter().position(|n| *n == "txpci"),
            ) {
                cols = Some((g, r, x));
            }
            continue;
        }
        let v: Vec<&str> = t.split_whitespace().collect();
        let (g, r, x) = cols.unwrap_or((0, 1, 2));
        if v.len() <= g.max(r).max(x) {
            continue;
        }
        if let Some(i) = num(v[g]) {
            out.push((i as u32, num(v[r]), num(v[x])));
        }
    }
    out
}

/// Where GPU samples come from.
pub enum GpuSource {
    /// NVML through `nvml-wrapper`.
    Nvml(Box<nvml_wrapper::Nvml>),
    /// `nvidia-smi` at this path; `fields` is the query list that works with this driver.
    NvidiaSmi {
        /// The program.
        path: PathBuf,
        /// Query fields accepted by this driver.
        fields: Vec<&'static str>,
        /// Whether `dmon` answered last time (skipped after a failure).
        dmon: bool,
    },
}

/// Which GPU source to use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GpuBackend {
    /// NVML, else `nvidia-smi`.
    #[default]
    Auto,
    /// NVML only.
    Nvml,
    /// `nvidia-smi` only.
    NvidiaSmi,
}

/// Timeout of one `nvidia-smi` call (the seed used 3 s for the query and 4 s for `dmon`).
pub const SMI_TIMEOUT: Duration = Duration::from_secs(4);

impl GpuSource {
    /// Opens a source, or says why none is available (one line).
    pub fn open(backend: GpuBackend) -> Result<GpuSource, String> {
        let mut why = Vec::new();
        if backend != GpuBackend::NvidiaSmi {
            match nvml_wrapper::Nvml::init() {
                Ok(n) => match n.device_count() {
                    Ok(c) if c > 0 => return Ok(GpuSource::Nvml(Box::new(n))),
                    Ok(_) => why.push("NVML reports no GPU".to_string()),
                    Err(e) => why.push(format!("NVML device count failed: {e}")),
                },
                Err(nvml_wrapper::error::NvmlError::LibloadingError(_)) => {
                    why.push("libnvidia-ml.so.1 not found".into())
                }
                Err(e) => why.push(format!("NVML init failed: {e}")),
            }
        }
        if backend != GpuBackend::Nvml {
            match cmd::which("nvidia-smi") {
                Some(path) => return GpuSource::open_smi(&path),
                None => why.push("nvidia-smi not found in PATH".into()),
            }
        }
        Err(why.join("; "))
    }

    fn open_smi(path: &Path) -> Result<GpuSource, String> {
        // Drivers before 535 lack clocks_event_reasons, newer ones may drop the throttle name:
        // try the full list, then without one and the other, then without both.
        let full: Vec<&'static str> = QUERY_FIELDS.to_vec();
        let without = |drop: &[&str]| -> Vec<&'static str> {
            full.iter().copied().filter(|f| !drop.contains(f)).collect()
        };
        let candidates = [
            without(&["clocks_throttle_reasons.active"]),
            without(&["clocks_event_reasons.active"]),
            without(&[
                "clocks_event_reasons.active",
                "clocks_throttle_reasons.active",
            ]),
        ];
        let mut last = String::new();
        for fields in candidates {
            let o = smi_query(path, &fields);
            if o.ok() && !parse_query(&fields, &o.stdout).is_empty() {
                return Ok(GpuSource::NvidiaSmi {
                    path: path.to_path_buf(),
                    fields,
                    dmon: true,
                });
            }
            last = if o.stderr.is_empty() {
                o.stdout.lines().next().unwrap_or("").to_string()
            } else {
                o.stderr.lines().next().unwrap_or("").to_string()
            };
        }
        Err(format!("nvidia-smi found but reports no GPU ({last})"))
    }

    /// `nvml` or `nvidia-smi`.
    pub fn name(&self) -> &'static str {
        match self {
            GpuSource::Nvml(_) => "nvml",
            GpuSource::NvidiaSmi { .. } => "nvidia-smi",
        }
    }

    /// One sample of every GPU (empty on failure).
    pub fn sample(&mut self) -> Vec<GpuSample> {
        match self {
            GpuSource::Nvml(n) => nvml_sample(n),
            GpuSource::NvidiaSmi { path, fields, dmon } => {
                let o = smi_query(path, fields);
                let mut gpus = if o.ok() {
                    parse_query(fields, &o.stdout)
                } else {
                    Vec::new()
                };
                if *dmon && !gpus.is_empty() {
                    let d = cmd::run(path, &["dmon", "-s", "t", "-c", "1"], SMI_TIMEOUT);
                    let rows = if d.ok() {
                        parse_dmon(&d.stdout)
                    } else {
                        Vec::new()
                    };
                    if rows.is_empty() {
                        *dmon = false;
                    }
                    for (i, rx, tx) in rows {
                        if let Some(g) = gpus.iter_mut().find(|g| g.index == i) {
                            g.pcie_rx_mb_s = rx;
                            g.pcie_tx_mb_s = tx;
                        }
                    }
                }
                gpus
            }
        }
    }
}

fn smi_query(path: &Path, fields: &[&str]) -> cmd::CmdOutput {
    let q = format!("--query-gpu={}", fields.join(","));
    cmd::run(path, &[&q, "--format=csv,noheader,nounits"], SMI_TIMEOUT)
}

fn nvml_sample(n: &nvml_wrapper::Nvml) -> Vec<GpuSample> {
    use nvml_wrapper::enum_wrappers::device::{Clock, PcieUtilCounter, TemperatureSensor};
    let count = n.device_count().unwrap_or(0);
    let mut out = Vec::with_capacity(count as usize);
    for i in 0..count {
        let Ok(d) = n.device_by_index(i) else {
            continue;
        };
        let util = d.utilization_rates().ok();
        let mem = d.memory_info().ok();
        let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
        out.push(GpuSample {
            index: d.index().unwrap_or(i),
            name: d.name().ok(),
            uuid: d.uuid().ok(),
            util_pct: util.as_ref().map(|u| u.gpu as f64),
            mem_util_pct: util.as_ref().map(|u| u.memory as f64),
            vram_used_mb: mem.as_ref().map(|m| mib(m.used)),
            vram_total_mb: mem.as_ref().map(|m| mib(m.total)),
            power_w: d.power_usage().ok().map(|mw| mw as f64 / 1000.0),
            power_limit_w: d.enforced_power_limit().ok().map(|mw| mw as f64 / 1000.0),
            sm_clock_mhz: d.clock_info(Clock::SM).ok().map(f64::from),
            mem_clock_mhz: d.clock_info(Clock::Memory).ok().map(f64::from),
            temp_c: d.temperature(TemperatureSensor::Gpu).ok().map(f64::from),
            pcie_gen: d.current_pcie_link_gen().ok().map(f64::from),
            pcie_width: d.current_pcie_link_width().ok().map(f64::from),
            // NVML reports KB/s over a 20 ms sample.
            pcie_rx_mb_s: d
                .pcie_throughput(PcieUtilCounter::Receive)
                .ok()
                .map(|k| k as f64 / 1000.0),
            pcie_tx_mb_s: d
                .pcie_throughput(PcieUtilCounter::Send)
                .ok()
                .map(|k| k as f64 / 1000.0),
            throttle_reasons: d
                .current_throttle_reasons()
                .ok()
                .map(|r| throttle_names(r.bits())),
        });
    }
    out
}

/// Driver and CUDA versions from NVML, when it loads: `(driver, cuda)`.
pub fn nvml_versions() -> Option<(Option<String>, Option<String>)> {
    let n = nvml_wrapper::Nvml::init().ok()?;
    let driver = n.sys_driver_version().ok();
    let cuda = n.sys_cuda_driver_version().ok().map(|v| {
        format!(
            "{}.{}",
            nvml_wrapper::cuda_driver_version_major(v),
            nvml_wrapper::cuda_driver_version_minor(v)
        )
    });
    Some((driver, cuda))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_parsing() {
        let f = [
            "index",
            "temperature.gpu",
            "power.draw",
            "clocks_event_reasons.active",
            "name",
        ];
        let g = parse_query(
            &f,
            "0, 45, 120.50, 0x0000000000000004, NVIDIA H100, 80GB\n1, [N/A], [Not Supported], 0x0, X\n",
        );
        assert_eq!(g.len(), 2);
        assert_eq!(g[0].temp_c, Some(45.0));
        assert_eq!(g[0].power_w, Some(120.5));
        assert_eq!(g[0].name.as_deref(), Some("NVIDIA H100, 80GB"));
        assert_eq!(
            g[0].throttle_reasons.as_deref(),
            Some(&["sw_power_cap".to_string()][..])
        );
        assert_eq!((g[1].index, g[1].temp_c, g[1].power_w), (1, None, None));
        assert_eq!(g[1].throttle_reasons.as_deref(), Some(&[][..]));
    }

    #[test]
    fn dmon_parsing() {
        let r = parse_dmon(
            "# gpu  rxpci  txpci\n# Idx   MB/s   MB/s\n    0     12     34\n    1      -      5\n",
        );
        assert_eq!(r, vec![(0, Some(12.0), Some(34.0)), (1, None, Some(5.0))]);
    }

    #[test]
    fn throttle() {
        assert_eq!(
            throttle_names(0x44),
            vec!["sw_power_cap", "hw_thermal_slowdown"]
        );
        assert_eq!(throttle_names(0x1000), vec!["0x1000"]);
    }
}
