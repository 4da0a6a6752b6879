//! Host CPU samples from `/proc` and `/sys`: utilisation, frequency, temperatures.
//!
//! Utilisation is the whole machine's (the client's own share included; the per-cell
//! `client_cpu_util` separates the client), from two readings of the `cpu` line of
//! `/proc/stat`: busy = total − idle − iowait.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// hwmon chip names that carry CPU temperatures (seed spec §3.15).
pub const CPU_HWMON_CHIPS: [&str; 4] = ["k10temp", "coretemp", "cpu", "zenpower"];

/// At most this many CPU temperature labels are kept.
pub const MAX_CPU_TEMPS: usize = 8;

/// Reads CPU counters; keeps the previous `/proc/stat` reading for the next delta.
#[derive(Debug)]
pub struct CpuReader {
    root: PathBuf,
    prev: Option<(u64, u64)>,
}

/// One CPU sample.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CpuSample {
    /// Machine-wide CPU utilisation since the previous sample, % (None on the first call).
    pub util_pct: Option<f64>,
    /// Mean current frequency over the CPUs, MHz.
    pub freq_mhz: Option<f64>,
    /// CPU temperatures by label (`CPU0`, `CPU1`, …), °C.
    pub temps_c: BTreeMap<String, f64>,
}

impl CpuSample {
    /// The hottest CPU temperature, °C.
    pub fn temp_max_c(&self) -> Option<f64> {
        self.temps_c.values().copied().reduce(f64::max)
    }
}

/// `(total, idle)` jiffies of the aggregate `cpu` line of `/proc/stat`.
pub fn parse_stat(text: &str) -> Option<(u64, u64)> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    if v.len() < 4 {
        return None;
    }
    // user nice system idle iowait irq softirq steal (guest counted inside user).
    let total: u64 = v.iter().take(8).sum();
    let idle = v[3] + v.get(4).copied().unwrap_or(0);
    Some((total, idle))
}

impl CpuReader {
    /// A reader of `root`/proc and `root`/sys (`/` on a real host; a fixture tree in tests).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        let mut r = CpuReader {
            root: root.into(),
            prev: None,
        };
        r.prev = r.read_stat();
        r
    }

    fn path(&self, p: &str) -> PathBuf {
        self.root.join(p.trim_start_matches('/'))
    }

    fn read_stat(&self) -> Option<(u64, u64)> {
        parse_stat(&std::fs::read_to_string(self.path("/proc/stat")).ok()?)
    }

    /// One sample (utilisation over the time since the previous call).
    pub fn sample(&mut self) -> CpuSample {
        let now = self.read_stat();
        let util_pct = match (self.prev, now) {
            (Some((t0, i0)), Some((t1, i1))) if t1 > t0 => {
                let dt = (t1 - t0) as f64;
                let busy = dt - (i1.saturating_sub(i0)) as f64;
                Some((busy / dt * 100.0).clamp(0.0, 100.0))
            }
            _ => None,
        };
        if now.is_some() {
            self.prev = now;
        }
        CpuSample {
            util_pct,
            freq_mhz: self.freq_mhz(),
            temps_c: self.temps(),
        }
    }

    /// Mean of `scaling_cur_freq` over the CPUs (kHz → MHz), else of `cpu MHz` in
    /// `/proc/cpuinfo`.
    pub fn freq_mhz(&self) -> Option<f64> {
        let mut v = Vec::new();
        if let Ok(d) = std::fs::read_dir(self.path("/sys/devices/system/cpu")) {
            for e in d.flatten() {
                let n = e.file_name().to_string_lossy().into_owned();
                if !(n.starts_with("cpu")
                    && n[3..].chars().all(|c| c.is_ascii_digit())
                    && n.len() > 3)
                {
                    continue;
                }
                if let Some(k) = read_num(&e.path().join("cpufreq/scaling_cur_freq")) {
                    v.push(k / 1000.0);
                }
            }
        }
        if v.is_empty() {
            if let Ok(t) = std::fs::read_to_string(self.path("/proc/cpuinfo")) {
                v = t
                    .lines()
                    .filter(|l| l.starts_with("cpu MHz"))
                    .filter_map(|l| l.split(':').nth(1)?.trim().parse().ok())
                    .collect();
            }
        }
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    }

    /// CPU temperatures from `/sys/class/hwmon/*` chips named k10temp, coretemp, cpu or
    /// zenpower (`tempN_input`, millidegrees). Labels are normalised to `CPU<n>` per chip,
    /// duplicates keep the maximum, at most [`MAX_CPU_TEMPS`].
    pub fn temps(&self) -> BTreeMap<String, f64> {
        let mut out: BTreeMap<String, f64> = BTreeMap::new();
        let Ok(d) = std::fs::read_dir(self.path("/sys/class/hwmon")) else {
            return out;
        };
        let mut chips: Vec<PathBuf> = d.flatten().map(|e| e.path()).collect();
        chips.sort();
        let mut n = 0usize;
        for chip in chips {
            let name = std::fs::read_to_string(chip.join("name")).unwrap_or_default();
            if !CPU_HWMON_CHIPS.contains(&name.trim()) {
                continue;
            }
            // The package / Tctl reading is temp1 on k10temp and coretemp; take the hottest
            // input of the chip as that chip's CPU temperature.
            let mut best: Option<f64> = None;
            if let Ok(files) = std::fs::read_dir(&chip) {
                for f in files.flatten() {
                    let fname = f.file_name().to_string_lossy().into_owned();
                    if fname.starts_with("temp") && fname.ends_with("_input") {
                        if let Some(m) = read_num(&f.path()) {
                            let c = m / 1000.0;
                            best = Some(best.map_or(c, |b: f64| b.max(c)));
                        }
                    }
                }
            }
            if let Some(c) = best {
                let label = format!("CPU{n}");
                let e = out.entry(label).or_insert(c);
                *e = e.max(c);
                n += 1;
                if out.len() >= MAX_CPU_TEMPS {
                    break;
                }
            }
        }
        out
    }
}

fn read_num(p: &Path) -> Option<f64> {
    std::fs::read_to_string(p).ok()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_and_fixture_tree() {
        assert_eq!(
            parse_stat("cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 1 2 3 4\n"),
            Some((1000, 850))
        );
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        std::fs::create_dir_all(r.join("proc")).unwrap();
        std::fs::write(r.join("proc/stat"), "cpu  100 0 50 800 50 0 0 0\n").unwrap();
        let mut rd = CpuReader::new(r);
        std::fs::write(r.join("proc/stat"), "cpu  200 0 100 850 50 0 0 0\n").unwrap();
        std::fs::create_dir_all(r.join("sys/devices/system/cpu/cpu0/cpufreq")).unwrap();
        std::fs::write(
            r.join("sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq"),
            "3000000\n",
        )
        .unwrap();
        let h = r.join("sys/class/hwmon/hwmon0");
        std::fs::create_dir_all(&h).unwrap();
        std::fs::write(h.join("name"), "k10temp\n").unwrap();
        std::fs::write(h.join("temp1_input"), "61250\n").unwrap();
        std::fs::write(h.join("temp3_input"), "55000\n").unwrap();
        let h2 = r.join("sys/class/hwmon/hwmon1");
        std::fs::create_dir_all(&h2).unwrap();
        std::fs::write(h2.join("name"), "nvme\n").unwrap();
        std::fs::write(h2.join("temp1_input"), "99000\n").unwrap();
        let s = rd.sample();
        // Δtotal = 200, Δidle = 50 → 75 % busy.
        assert_eq!(s.util_pct, Some(75.0));
        assert_eq!(s.freq_mhz, Some(3000.0));
        assert_eq!(s.temps_c.get("CPU0"), Some(&61.25));
        assert_eq!(s.temps_c.len(), 1);
    }
}
