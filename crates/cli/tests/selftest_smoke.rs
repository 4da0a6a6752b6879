//! Smoke test of `servebench selftest` (docs/performance.md §2): the client's own CPU and memory
//! stay within stated bounds.
//!
//! Configuration: C = 64 streams, one token per SSE event, the simulator's default 60 ms step
//! (≈ 1,070 events/s), a 4 s window — the "C = 64, default step" row of §2 (39 µs per event,
//! 4.2 % of a core, release build, quiet machine). Measured with this test's build on the 2-vCPU
//! reference machine: 16 µs per event, 1.7 % of a core, RSS 12 → 14 MiB, flat after ramp-up.
//! Bounds (2× the documented figure for the CPU, which other processes on a loaded machine can
//! only raise — best of two runs):
//! * client CPU per SSE event < 80 µs, and < 10 % of one core in the window;
//! * resident memory < 48 MiB at its maximum, and no growth after ramp-up beyond 2 MiB.

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_servebench");

/// The first number after `label` on its line of the selftest report.
fn number_after(out: &str, label: &str) -> f64 {
    let line = out
        .lines()
        .find(|l| l.trim_start().starts_with(label))
        .unwrap_or_else(|| panic!("no {label:?} line in:\n{out}"));
    let rest = &line.trim_start()[label.len()..];
    rest.split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .find(|s| !s.is_empty())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no number in {line:?}"))
}

/// `(start, after ramp-up, end, max)` MiB from the resident-memory line.
fn rss(out: &str) -> (f64, f64, f64, f64) {
    let line = out
        .lines()
        .find(|l| l.trim_start().starts_with("resident memory"))
        .unwrap_or_else(|| panic!("no resident memory line in:\n{out}"));
    let v: Vec<f64> = line
        .split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .filter_map(|s| s.parse().ok())
        .collect();
    assert_eq!(v.len(), 4, "{line}");
    (v[0], v[1], v[2], v[3])
}

#[test]
fn selftest_client_cpu_and_memory_within_bounds() {
    let mut tries = Vec::new();
    for _ in 0..2 {
        let o = Command::new(BIN)
            .args([
                "selftest",
                "--concurrency",
                "64",
                "--duration",
                "4",
                "--max-tokens",
                "512",
            ])
            .output()
            .expect("servebench selftest runs");
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        assert!(
            o.status.success(),
            "selftest failed: {out}\n{}",
            String::from_utf8_lossy(&o.stderr)
        );
        let per_event_us = number_after(&out, "client CPU per event");
        let cpu_pct = number_after(&out, "client CPU in the window");
        let tps = number_after(&out, "ingested");
        let (start, ramp, end, max) = rss(&out);
        eprintln!(
            "selftest C=64: {tps:.0} tok/s, {cpu_pct:.1} % of a core, {per_event_us:.1} µs/event, \
             RSS {start:.1} → {ramp:.1} → {end:.1} MiB (max {max:.1})"
        );
        // Memory does not depend on noise: every run must hold it.
        assert!(max < 48.0, "RSS max {max} MiB");
        assert!(
            end - ramp <= 2.0,
            "RSS grew {ramp} → {end} MiB after ramp-up"
        );
        assert!(
            tps > 500.0,
            "the simulator's 64 streams ingested only {tps} tok/s"
        );
        tries.push((per_event_us, cpu_pct));
        if per_event_us < 80.0 && cpu_pct < 10.0 {
            return;
        }
    }
    panic!("client CPU over the bounds (< 80 µs per event, < 10 % of a core) twice: {tries:?}");
}
