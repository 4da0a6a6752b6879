//! The hardware monitor: a background thread that samples the GPUs and the CPU every interval,
//! off the measurement path (a slow `nvidia-smi` only delays the next sample, never a stream),
//! and the summaries over a cell's measured window or the whole run (seed spec §3.15, §6.6).
//!
//! Every sample carries the [`Instant`] at which it was read (the midpoint of the GPU query), so
//! a summary over the window `[start, end]` uses exactly the samples taken inside it.
//!
//! **Energy** (`energy_joules`): the integral of the total GPU power draw over the window,
//! power taken as piecewise linear between samples and held constant before the first and after
//! the last sample (trapezoid rule; exact for a piecewise-linear signal). **Energy per output
//! token** (`energy_per_output_token_j`) = `energy_joules` / output tokens credited to the
//! window. It is null when no power is reported, or when samples are too sparse around the
//! window (a gap larger than [`HwMonitor::max_gap`]).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use crate::cpu::{CpuReader, CpuSample};
use crate::gpu::{GpuBackend, GpuSample, GpuSource};

/// Default sampling interval (`--hw-monitor-interval`), s.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(1);

/// Samples kept at most; beyond this the oldest half is dropped (the run summary says so).
pub const MAX_SAMPLES: usize = 50_000;

/// Throttle reasons that lower clocks for power or heat (the others — idle, application
/// clocks, sync boost, display — are not a performance limit of the benchmark).
pub const LIMITING_REASONS: [&str; 5] = [
    "sw_power_cap",
    "hw_slowdown",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
];

/// Monitor settings.
#[derive(Clone, Debug)]
pub struct MonitorConfig {
    /// Time between the end of one sample and the start of the next.
    pub interval: Duration,
    /// GPU source choice.
    pub backend: GpuBackend,
    /// Root of `/proc` and `/sys` for the CPU readings (`/`; a fixture tree in tests).
    pub root: PathBuf,
}

impl Default for MonitorConfig {
    fn default() -> Self {
        MonitorConfig {
            interval: DEFAULT_INTERVAL,
            backend: GpuBackend::Auto,
            root: "/".into(),
        }
    }
}

/// One monitor sample.
#[derive(Clone, Debug)]
pub struct Snapshot {
    /// When it was read (monotonic).
    pub at: Instant,
    /// Host CPU.
    pub cpu: CpuSample,
    /// Every GPU (empty without a GPU source).
    pub gpus: Vec<GpuSample>,
}

impl Snapshot {
    /// Total power draw over the GPUs, W; None unless every GPU reports it.
    pub fn power_total_w(&self) -> Option<f64> {
        if self.gpus.is_empty() {
            return None;
        }
        self.gpus.iter().map(|g| g.power_w).sum()
    }
}

#[derive(Default)]
struct Shared {
    samples: Vec<Snapshot>,
    dropped: u64,
    stop: bool,
}

/// A running hardware monitor. Dropping it stops the thread.
pub struct HwMonitor {
    shared: Arc<(Mutex<Shared>, Condvar)>,
    handle: Option<JoinHandle<()>>,
    source: Option<&'static str>,
    warning: Option<String>,
    interval: Duration,
    started: Instant,
}

impl HwMonitor {
    /// Starts the sampler thread. Never fails: without a GPU source only the CPU is sampled and
    /// [`HwMonitor::warning`] says why (one line).
    pub fn start(cfg: MonitorConfig) -> HwMonitor {
        let (gpu, warning) = match GpuSource::open(cfg.backend) {
            Ok(s) => (Some(s), None),
            Err(why) => (
                None,
                Some(format!(
                    "no GPU telemetry ({why}); hardware monitor samples the CPU only, GPU panel disabled"
                )),
            ),
        };
        let source = gpu.as_ref().map(|g| g.name());
        let shared: Arc<(Mutex<Shared>, Condvar)> = Arc::default();
        let sh = shared.clone();
        let interval = cfg.interval;
        let root = cfg.root.clone();
        let handle = std::thread::Builder::new()
            .name("servebench-hwmon".into())
            .spawn(move || sampler(sh, gpu, root, interval))
            .ok();
        HwMonitor {
            shared,
            handle,
            source,
            warning,
            interval,
            started: Instant::now(),
        }
    }

    /// `nvml`, `nvidia-smi`, or None (CPU only).
    pub fn source(&self) -> Option<&'static str> {
        self.source
    }

    /// Why GPU telemetry is unavailable, when it is.
    pub fn warning(&self) -> Option<&str> {
        self.warning.as_deref()
    }

    /// The sampling interval.
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// Largest gap between samples (or between the window edge and a sample) for which energy
    /// is still integrated: 3 intervals + 3 s (an `nvidia-smi` call can take 1–2 s).
    pub fn max_gap(&self) -> Duration {
        self.interval * 3 + Duration::from_secs(3)
    }

    /// A copy of the samples so far.
    pub fn samples(&self) -> Vec<Snapshot> {
        self.shared
            .0
            .lock()
            .map(|s| s.samples.clone())
            .unwrap_or_default()
    }

    /// Summary over the window `[start, end]` (a cell's measured window); `output_tokens` are
    /// the tokens credited to the window, for `energy_per_output_token_j`.
    pub fn summary(
        &self,
        start: Instant,
        end: Instant,
        output_tokens: Option<u64>,
    ) -> Map<String, Value> {
        let s = self.shared.0.lock();
        let Ok(s) = s else {
            return Map::new();
        };
        summarize(&s.samples, start, end, output_tokens, self.max_gap())
    }

    /// Stops the thread and returns the run summary (every sample since the start) plus
    /// `source`, `interval_seconds` and `samples_dropped`.
    pub fn finish(mut self) -> Map<String, Value> {
        self.stop_thread();
        let end = Instant::now();
        let (samples, dropped) = self
            .shared
            .0
            .lock()
            .map(|s| (s.samples.clone(), s.dropped))
            .unwrap_or_default();
        let mut m = summarize(&samples, self.started, end, None, self.max_gap());
        if !m.is_empty() {
            m.insert("source".into(), json!(self.source));
            m.insert(
                "interval_seconds".into(),
                json!(round(self.interval.as_secs_f64(), 3)),
            );
            m.insert("samples_dropped".into(), json!(dropped));
        }
        m
    }

    fn stop_thread(&mut self) {
        if let Ok(mut s) = self.shared.0.lock() {
            s.stop = true;
        }
        self.shared.1.notify_all();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

impl Drop for HwMonitor {
    fn drop(&mut self) {
        self.stop_thread();
    }
}

fn sampler(
    shared: Arc<(Mutex<Shared>, Condvar)>,
    mut gpu: Option<GpuSource>,
    root: PathBuf,
    interval: Duration,
) {
    let mut cpu = CpuReader::new(root);
    loop {
        let t0 = Instant::now();
        let gpus = gpu.as_mut().map(|g| g.sample()).unwrap_or_default();
        let t1 = Instant::now();
        let at = t0 + (t1 - t0) / 2;
        let c = cpu.sample();
        let (lock, cv) = &*shared;
        let Ok(mut s) = lock.lock() else {
            return;
        };
        if s.stop {
            return;
        }
        s.samples.push(Snapshot { at, cpu: c, gpus });
        if s.samples.len() > MAX_SAMPLES {
            let n = s.samples.len() / 2;
            s.samples.drain(..n);
            s.dropped += n as u64;
        }
        let Ok((s, _)) = cv.wait_timeout_while(s, interval, |s| !s.stop) else {
            return;
        };
        if s.stop {
            return;
        }
    }
}

/// Rounds to `d` decimals.
pub fn round(v: f64, d: i32) -> f64 {
    let f = 10f64.powi(d);
    (v * f).round() / f
}

fn r2(v: f64) -> Value {
    json!(round(v, 2))
}

fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

fn max(v: &[f64]) -> Option<f64> {
    v.iter().copied().reduce(f64::max)
}

fn min(v: &[f64]) -> Option<f64> {
    v.iter().copied().reduce(f64::min)
}

fn put(m: &mut Map<String, Value>, k: &str, v: Option<f64>) {
    m.insert(k.into(), v.map(r2).unwrap_or(Value::Null));
}

/// Integral of the total GPU power over `[start, end]`, J, or why it cannot be computed.
/// Power is piecewise linear between samples and constant beyond the first/last one.
pub fn energy_joules(
    samples: &[Snapshot],
    start: Instant,
    end: Instant,
    max_gap: Duration,
) -> Result<f64, String> {
    let pts: Vec<(Instant, f64)> = samples
        .iter()
        .filter_map(|s| s.power_total_w().map(|p| (s.at, p)))
        .collect();
    if pts.is_empty() {
        return Err("no GPU power samples".into());
    }
    if end <= start {
        return Err("empty window".into());
    }
    // Coverage: the samples used (those inside plus the nearest outside on each side, or the
    // window edge itself when there is none) must leave no gap inside the window longer than
    // max_gap.
    let before = pts.iter().rev().find(|(t, _)| *t <= start).copied();
    let after = pts.iter().find(|(t, _)| *t >= end).copied();
    let mut used: Vec<Instant> = Vec::new();
    used.push(before.map_or(start, |b| b.0));
    used.extend(
        pts.iter()
            .filter(|(t, _)| *t > start && *t < end)
            .map(|p| p.0),
    );
    used.push(after.map_or(end, |a| a.0));
    let mut edges = vec![start];
    edges.extend(used.iter().copied().filter(|t| *t > start && *t < end));
    edges.push(end);
    for w in used.windows(2) {
        // A gap matters where it lies inside the window.
        let (a, b) = (w[0].max(start), w[1].min(end));
        if b > a && b.duration_since(a) > max_gap {
            return Err(format!(
                "a {:.1} s gap between GPU power samples inside the window",
                w[1].duration_since(w[0]).as_secs_f64()
            ));
        }
    }
    let p_at = |t: Instant| -> f64 {
        match pts.iter().position(|(x, _)| *x >= t) {
            None => pts[pts.len() - 1].1,
            Some(0) => pts[0].1,
            Some(i) => {
                let (t0, p0) = pts[i - 1];
                let (t1, p1) = pts[i];
                let span = t1.duration_since(t0).as_secs_f64();
                if span <= 0.0 {
                    p1
                } else {
                    p0 + (p1 - p0) * t.duration_since(t0).as_secs_f64() / span
                }
            }
        }
    };
    let mut e = 0.0;
    for w in edges.windows(2) {
        let dt = w[1].duration_since(w[0]).as_secs_f64();
        e += dt * (p_at(w[0]) + p_at(w[1])) / 2.0;
    }
    Ok(e)
}

/// The seed's hardware summary (§6.6) over the samples taken inside `[start, end]`, plus
/// per-GPU details (`gpus`), CPU frequency, throttle reasons and energy. `{}` when no sample
/// lies inside the window and no energy can be computed.
pub fn summarize(
    all: &[Snapshot],
    start: Instant,
    end: Instant,
    output_tokens: Option<u64>,
    max_gap: Duration,
) -> Map<String, Value> {
    let inside: Vec<&Snapshot> = all
        .iter()
        .filter(|s| s.at >= start && s.at <= end)
        .collect();
    let energy = energy_joules(all, start, end, max_gap);
    let mut m = Map::new();
    if inside.is_empty() && energy.is_err() {
        return m;
    }
    m.insert("samples".into(), json!(inside.len()));
    let dur = match (inside.first(), inside.last()) {
        (Some(a), Some(b)) => b.at.duration_since(a.at).as_secs_f64(),
        _ => 0.0,
    };
    m.insert("duration_seconds".into(), r2(dur));
    m.insert(
        "window_seconds".into(),
        r2(end.duration_since(start).as_secs_f64()),
    );
    let gpu_count = inside.iter().map(|s| s.gpus.len()).max().unwrap_or(0);
    m.insert("gpu_count".into(), json!(gpu_count));
    put_cpu(&mut m, &inside);
    if gpu_count > 0 {
        put_gpu_aggregates(&mut m, &inside);
        put_per_gpu(&mut m, &inside);
    }
    put_energy(&mut m, energy, output_tokens, gpu_count);
    m
}

/// CPU: utilisation average and max (%), average frequency (MHz), the hottest sensor (°C) and
/// each sensor's max (`cpu_temps_max_c`).
fn put_cpu(m: &mut Map<String, Value>, inside: &[&Snapshot]) {
    let cpu_util: Vec<f64> = inside.iter().filter_map(|s| s.cpu.util_pct).collect();
    let cpu_freq: Vec<f64> = inside.iter().filter_map(|s| s.cpu.freq_mhz).collect();
    let cpu_temp: Vec<f64> = inside.iter().filter_map(|s| s.cpu.temp_max_c()).collect();
    put(m, "cpu_util_avg_pct", mean(&cpu_util));
    put(m, "cpu_util_max_pct", max(&cpu_util));
    put(m, "cpu_freq_avg_mhz", mean(&cpu_freq));
    put(m, "cpu_temp_max_c", max(&cpu_temp));
    let mut cpu_temps: BTreeMap<String, f64> = BTreeMap::new();
    for s in inside {
        for (k, v) in &s.cpu.temps_c {
            let e = cpu_temps.entry(k.clone()).or_insert(*v);
            *e = e.max(*v);
        }
    }
    m.insert(
        "cpu_temps_max_c".into(),
        Value::Object(cpu_temps.into_iter().map(|(k, v)| (k, r2(v))).collect()),
    );
}

/// One GPU field per snapshot: the values of the snapshot's GPUs that report it, snapshots
/// where none does left out.
fn per_snapshot(inside: &[&Snapshot], f: fn(&GpuSample) -> Option<f64>) -> Vec<Vec<f64>> {
    inside
        .iter()
        .map(|s| s.gpus.iter().filter_map(f).collect::<Vec<f64>>())
        .filter(|v| !v.is_empty())
        .collect()
}

/// Mean over snapshots of the mean over GPUs.
fn avg_of(v: &[Vec<f64>]) -> Option<f64> {
    mean(&v.iter().filter_map(|x| mean(x)).collect::<Vec<_>>())
}

/// Max over snapshots of the max over GPUs.
fn max_of(v: &[Vec<f64>]) -> Option<f64> {
    max(&v.iter().filter_map(|x| max(x)).collect::<Vec<_>>())
}

/// Per snapshot, the sum over GPUs.
fn totals(v: &[Vec<f64>]) -> Vec<f64> {
    v.iter()
        .map(|x| x.iter().sum::<f64>())
        .collect::<Vec<f64>>()
}

/// Aggregates over GPUs per snapshot (seed: avg and max over GPUs, totals summed):
/// utilisation (%), temperature (°C), power and its limit (W), VRAM (MB and %), PCIe
/// throughput (MB/s) and SM clock (MHz).
fn put_gpu_aggregates(m: &mut Map<String, Value>, inside: &[&Snapshot]) {
    let per = |f: fn(&GpuSample) -> Option<f64>| per_snapshot(inside, f);
    let util = per(|g| g.util_pct);
    let mem = per(|g| g.mem_util_pct);
    let temp = per(|g| g.temp_c);
    put(m, "gpu_util_avg_pct", avg_of(&util));
    put(m, "gpu_util_max_pct", max_of(&util));
    put(m, "mem_util_avg_pct", avg_of(&mem));
    put(m, "mem_util_max_pct", max_of(&mem));
    put(m, "temp_avg_c", avg_of(&temp));
    put(m, "temp_max_c", max_of(&temp));
    let power: Vec<f64> = inside.iter().filter_map(|s| s.power_total_w()).collect();
    put(m, "power_total_avg_w", mean(&power));
    put(m, "power_total_max_w", max(&power));
    let limit = totals(&per(|g| g.power_limit_w));
    put(m, "power_limit_total_w", max(&limit));
    let used = totals(&per(|g| g.vram_used_mb));
    let total = totals(&per(|g| g.vram_total_mb));
    put(m, "vram_used_avg_mb", mean(&used));
    put(m, "vram_used_max_mb", max(&used));
    put(m, "vram_total_mb", max(&total));
    let pct: Vec<f64> = inside
        .iter()
        .filter_map(|s| {
            let u: Option<f64> = s.gpus.iter().map(|g| g.vram_used_mb).sum();
            let t: Option<f64> = s.gpus.iter().map(|g| g.vram_total_mb).sum();
            match (u, t) {
                (Some(u), Some(t)) if t > 0.0 => Some(u / t * 100.0),
                _ => None,
            }
        })
        .collect();
    put(m, "vram_used_avg_pct", mean(&pct));
    put(m, "vram_used_max_pct", max(&pct));
    let rx = totals(&per(|g| g.pcie_rx_mb_s));
    let tx = totals(&per(|g| g.pcie_tx_mb_s));
    put(m, "pcie_rx_avg_mb_s", mean(&rx));
    put(m, "pcie_rx_max_mb_s", max(&rx));
    put(m, "pcie_tx_avg_mb_s", mean(&tx));
    put(m, "pcie_tx_max_mb_s", max(&tx));
    let sm = per(|g| g.sm_clock_mhz);
    put(m, "sm_clock_avg_mhz", avg_of(&sm));
    put(
        m,
        "sm_clock_min_mhz",
        min(&sm.iter().filter_map(|x| min(x)).collect::<Vec<_>>()),
    );
}

/// `gpus` (one summary per GPU index, in index order) and `throttle_limiting_reasons` (the
/// [`LIMITING_REASONS`] any GPU reported, sorted).
fn put_per_gpu(m: &mut Map<String, Value>, inside: &[&Snapshot]) {
    let mut indices: Vec<u32> = inside
        .iter()
        .flat_map(|s| s.gpus.iter().map(|g| g.index))
        .collect();
    indices.sort_unstable();
    indices.dedup();
    let mut gpus = Vec::new();
    let mut limiting: Vec<String> = Vec::new();
    for i in indices {
        let gs: Vec<&GpuSample> = inside
            .iter()
            .filter_map(|s| s.gpus.iter().find(|g| g.index == i))
            .collect();
        gpus.push(gpu_summary(i, &gs, &mut limiting));
    }
    limiting.sort();
    m.insert("throttle_limiting_reasons".into(), json!(limiting));
    m.insert("gpus".into(), Value::Array(gpus));
}

/// One GPU's summary over its samples `gs`: identity, utilisation (%), VRAM (MB), power (W),
/// clocks (MHz), temperature (°C), PCIe link and throughput (MB/s) and throttle-reason shares;
/// limiting reasons it reported are added to `limiting` (once each).
fn gpu_summary(i: u32, gs: &[&GpuSample], limiting: &mut Vec<String>) -> Value {
    let col =
        |f: fn(&GpuSample) -> Option<f64>| gs.iter().filter_map(|g| f(g)).collect::<Vec<f64>>();
    let mut g = Map::new();
    g.insert("index".into(), json!(i));
    g.insert("name".into(), json!(gs.iter().find_map(|g| g.name.clone())));
    g.insert("uuid".into(), json!(gs.iter().find_map(|g| g.uuid.clone())));
    g.insert("samples".into(), json!(gs.len()));
    put(&mut g, "util_avg_pct", mean(&col(|g| g.util_pct)));
    put(&mut g, "util_max_pct", max(&col(|g| g.util_pct)));
    put(&mut g, "mem_util_avg_pct", mean(&col(|g| g.mem_util_pct)));
    put(&mut g, "vram_used_max_mb", max(&col(|g| g.vram_used_mb)));
    put(&mut g, "vram_total_mb", max(&col(|g| g.vram_total_mb)));
    put(&mut g, "power_avg_w", mean(&col(|g| g.power_w)));
    put(&mut g, "power_max_w", max(&col(|g| g.power_w)));
    put(&mut g, "power_limit_w", max(&col(|g| g.power_limit_w)));
    put(&mut g, "sm_clock_avg_mhz", mean(&col(|g| g.sm_clock_mhz)));
    put(&mut g, "sm_clock_min_mhz", min(&col(|g| g.sm_clock_mhz)));
    put(&mut g, "sm_clock_max_mhz", max(&col(|g| g.sm_clock_mhz)));
    put(&mut g, "mem_clock_avg_mhz", mean(&col(|g| g.mem_clock_mhz)));
    put(&mut g, "temp_avg_c", mean(&col(|g| g.temp_c)));
    put(&mut g, "temp_max_c", max(&col(|g| g.temp_c)));
    put(&mut g, "pcie_gen_min", min(&col(|g| g.pcie_gen)));
    put(&mut g, "pcie_gen_max", max(&col(|g| g.pcie_gen)));
    put(&mut g, "pcie_width_min", min(&col(|g| g.pcie_width)));
    put(&mut g, "pcie_width_max", max(&col(|g| g.pcie_width)));
    put(&mut g, "pcie_rx_avg_mb_s", mean(&col(|g| g.pcie_rx_mb_s)));
    put(&mut g, "pcie_tx_avg_mb_s", mean(&col(|g| g.pcie_tx_mb_s)));
    g.insert("throttle_reasons".into(), throttle_shares(gs, limiting));
    Value::Object(g)
}

/// Throttle reasons: share (0–1, 3 decimals) of this GPU's samples (with reasons reported) in
/// which each reason was active; null when no sample reported reasons. Limiting reasons seen
/// are added to `limiting`.
fn throttle_shares(gs: &[&GpuSample], limiting: &mut Vec<String>) -> Value {
    let reported: Vec<&Vec<String>> = gs
        .iter()
        .filter_map(|g| g.throttle_reasons.as_ref())
        .collect();
    if reported.is_empty() {
        return Value::Null;
    }
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for r in &reported {
        for x in r.iter() {
            *counts.entry(x.as_str()).or_default() += 1;
        }
    }
    let n = reported.len() as f64;
    for k in counts.keys() {
        if LIMITING_REASONS.contains(k) && !limiting.iter().any(|l| l == k) {
            limiting.push(k.to_string());
        }
    }
    Value::Object(
        counts
            .into_iter()
            .map(|(k, c)| (k.to_string(), json!(round(c as f64 / n, 3))))
            .collect(),
    )
}

/// Energy: joules over the window and per output token (J), or nulls with the reason
/// (`energy_note`, when there are GPUs); `energy_output_tokens` when the count is known.
fn put_energy(
    m: &mut Map<String, Value>,
    energy: Result<f64, String>,
    output_tokens: Option<u64>,
    gpu_count: usize,
) {
    match energy {
        Ok(e) => {
            m.insert("energy_joules".into(), json!(round(e, 3)));
            m.insert(
                "energy_per_output_token_j".into(),
                match output_tokens {
                    Some(t) if t > 0 => json!(round(e / t as f64, 6)),
                    _ => Value::Null,
                },
            );
        }
        Err(why) => {
            m.insert("energy_joules".into(), Value::Null);
            m.insert("energy_per_output_token_j".into(), Value::Null);
            if gpu_count > 0 {
                m.insert("energy_note".into(), json!(why));
            }
        }
    }
    if let Some(t) = output_tokens {
        m.insert("energy_output_tokens".into(), json!(t));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(at: Instant, powers: &[f64]) -> Snapshot {
        Snapshot {
            at,
            cpu: CpuSample::default(),
            gpus: powers
                .iter()
                .enumerate()
                .map(|(i, p)| GpuSample {
                    index: i as u32,
                    power_w: Some(*p),
                    util_pct: Some(50.0 + i as f64),
                    vram_used_mb: Some(1000.0),
                    vram_total_mb: Some(4000.0),
                    throttle_reasons: Some(if i == 0 {
                        vec!["sw_power_cap".into()]
                    } else {
                        vec![]
                    }),
                    ..Default::default()
                })
                .collect(),
        }
    }

    #[test]
    fn energy_constant_and_linear() {
        let t0 = Instant::now();
        let s = |x: f64| t0 + Duration::from_secs_f64(x);
        let gap = Duration::from_secs(5);
        // Constant 300 W (100 + 200) sampled every second from 0 to 10 s: window 2.5–7.5 s.
        let v: Vec<Snapshot> = (0..=10)
            .map(|i| snap(s(i as f64), &[100.0, 200.0]))
            .collect();
        let e = energy_joules(&v, s(2.5), s(7.5), gap).unwrap();
        assert!((e - 1500.0).abs() < 1e-6, "{e}");
        // Linear ramp 0 → 100 W over 0..10 s: ∫ over 0..10 = 500 J.
        let v: Vec<Snapshot> = (0..=10)
            .map(|i| snap(s(i as f64), &[i as f64 * 10.0]))
            .collect();
        let e = energy_joules(&v, s(0.0), s(10.0), gap).unwrap();
        assert!((e - 500.0).abs() < 1e-6, "{e}");
        // Over 2.5..7.5: mean power 50 W × 5 s.
        let e = energy_joules(&v, s(2.5), s(7.5), gap).unwrap();
        assert!((e - 250.0).abs() < 1e-6, "{e}");
        // A 20 s hole inside the window: refused.
        let v = vec![snap(s(0.0), &[10.0]), snap(s(20.0), &[10.0])];
        assert!(energy_joules(&v, s(1.0), s(19.0), gap).is_err());
        // No power at all.
        assert!(energy_joules(&[], s(0.0), s(1.0), gap).is_err());
    }

    #[test]
    fn summary_fields() {
        let t0 = Instant::now();
        let s = |x: f64| t0 + Duration::from_secs_f64(x);
        let v: Vec<Snapshot> = (0..=4)
            .map(|i| snap(s(i as f64), &[100.0, 150.0]))
            .collect();
        let m = summarize(&v, s(0.5), s(3.5), Some(750), Duration::from_secs(5));
        assert_eq!(m["samples"], 3);
        assert_eq!(m["gpu_count"], 2);
        assert_eq!(m["power_total_avg_w"], 250.0);
        assert_eq!(m["gpu_util_avg_pct"], 50.5);
        assert_eq!(m["gpu_util_max_pct"], 51.0);
        assert_eq!(m["vram_used_avg_mb"], 2000.0);
        assert_eq!(m["vram_used_max_pct"], 25.0);
        assert_eq!(m["energy_joules"], 750.0);
        assert_eq!(m["energy_per_output_token_j"], 1.0);
        assert_eq!(m["gpus"].as_array().unwrap().len(), 2);
        assert_eq!(m["gpus"][0]["throttle_reasons"]["sw_power_cap"], 1.0);
        assert_eq!(m["throttle_limiting_reasons"], json!(["sw_power_cap"]));
        // Window with no sample and nothing to integrate: {}.
        assert!(summarize(&[], s(0.0), s(1.0), None, Duration::from_secs(1)).is_empty());
    }
}
