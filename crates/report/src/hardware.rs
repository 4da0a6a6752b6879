//! The GPU panel of the text report: per-GPU figures over the whole run
//! (`hardware_run_summary.gpus`) and, per measured cell, GPU utilisation, power and energy per
//! output token (`hardware_summary`). Empty when the run has no GPU samples.

use std::fmt::Write as _;

use serde_json::Value;
use servebench_results::{format_context, CellStatus, Results};

fn num(v: Option<&Value>) -> Option<f64> {
    v.and_then(Value::as_f64)
}

fn n0(v: Option<f64>) -> String {
    v.map(|x| format!("{x:.0}")).unwrap_or_else(|| "-".into())
}

fn n1(v: Option<f64>) -> String {
    v.map(|x| format!("{x:.1}")).unwrap_or_else(|| "-".into())
}

/// The panel text (ends with a newline), or an empty string without GPU samples.
pub fn gpu_panel(r: &Results) -> String {
    let run = &r.hardware_run_summary;
    let gpus = match run.get("gpus").and_then(Value::as_array) {
        Some(g) if !g.is_empty() => g,
        _ => return String::new(),
    };
    let sd = &r.startup_diagnostics;
    let mut out = String::new();
    out.push('\n');
    let _ = writeln!(
        out,
        "GPU / hardware (whole run: {} GPUs via {}, {} samples; driver {}, CUDA {})",
        gpus.len(),
        run.get("source").and_then(Value::as_str).unwrap_or("?"),
        run.get("samples").and_then(Value::as_u64).unwrap_or(0),
        sd.get("driver_version")
            .and_then(Value::as_str)
            .unwrap_or("-"),
        sd.get("cuda_version")
            .and_then(Value::as_str)
            .unwrap_or("-"),
    );
    let _ = writeln!(
        out,
        "  {:<3} {:<28} {:>11} {:>15} {:>14} {:>8} {:>18} {:>9}  throttle (share of samples)",
        "GPU",
        "name",
        "util avg/max",
        "power avg/limit",
        "SM MHz avg/min",
        "temp max",
        "VRAM max/total MiB",
        "PCIe"
    );
    for g in gpus {
        let reasons = match g.get("throttle_reasons") {
            Some(Value::Object(m)) if !m.is_empty() => m
                .iter()
                .map(|(k, v)| format!("{k} {:.0}%", v.as_f64().unwrap_or(0.0) * 100.0))
                .collect::<Vec<_>>()
                .join(", "),
            Some(Value::Object(_)) => "none".into(),
            _ => "-".into(),
        };
        let name: String = g
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("-")
            .chars()
            .take(28)
            .collect();
        let _ = writeln!(
            out,
            "  {:<3} {:<28} {:>11} {:>15} {:>14} {:>8} {:>18} {:>9}  {}",
            g.get("index").and_then(Value::as_u64).unwrap_or(0),
            name,
            format!(
                "{}/{} %",
                n0(num(g.get("util_avg_pct"))),
                n0(num(g.get("util_max_pct")))
            ),
            format!(
                "{}/{} W",
                n1(num(g.get("power_avg_w"))),
                n0(num(g.get("power_limit_w")))
            ),
            format!(
                "{}/{}",
                n0(num(g.get("sm_clock_avg_mhz"))),
                n0(num(g.get("sm_clock_min_mhz")))
            ),
            format!("{} °C", n0(num(g.get("temp_max_c")))),
            format!(
                "{}/{}",
                n0(num(g.get("vram_used_max_mb"))),
                n0(num(g.get("vram_total_mb")))
            ),
            format!(
                "Gen{} x{}",
                n0(num(g.get("pcie_gen_min"))),
                n0(num(g.get("pcie_width_min")))
            ),
            reasons
        );
    }
    let _ = writeln!(
        out,
        "  total power avg {} W (max {} W, limit {} W) · PCIe rx {} MB/s, tx {} MB/s · energy {} J",
        n1(num(run.get("power_total_avg_w"))),
        n1(num(run.get("power_total_max_w"))),
        n0(num(run.get("power_limit_total_w"))),
        n0(num(run.get("pcie_rx_avg_mb_s"))),
        n0(num(run.get("pcie_tx_avg_mb_s"))),
        n0(num(run.get("energy_joules"))),
    );
    let cells: Vec<_> = r
        .results
        .iter()
        .chain(r.burst_results.iter())
        .filter(|c| c.status == CellStatus::Ok && !c.hardware_summary.is_empty())
        .collect();
    if !cells.is_empty() {
        let _ = writeln!(
            out,
            "  per cell (measured window): GPU util avg · power avg · J/token"
        );
        for c in cells {
            let h = &c.hardware_summary;
            let jpt = num(h.get("energy_per_output_token_j"))
                .map(|x| format!("{x:.4} J/token"))
                .unwrap_or_else(|| "- J/token".into());
            let layer = if c.benchmark_mode == servebench_results::BenchmarkMode::BurstE2e {
                "[burst] "
            } else {
                ""
            };
            let _ = writeln!(
                out,
                "    {layer}C={} ctx={}: {} % · {} W · {}",
                c.concurrency,
                format_context(c.context_tokens),
                n0(num(h.get("gpu_util_avg_pct"))),
                n1(num(h.get("power_total_avg_w"))),
                jpt
            );
        }
    }
    out
}
