//! Sinks for a finished run: the final plain-text report and the JSON writer.
//!
//! Everything here is a pure function of [`servebench_results::Results`]: presentation never
//! measures. The text report is the screenshot block users post: a matrix of aggregate decode
//! tok/s (rows = context, columns = concurrency C) with compact TTFT / ITL p50, capacity-limited
//! and skipped cells marked, the prefill rows, and every non-ok cell's reason.

use std::fmt::Write as _;
use std::path::Path;

pub mod hardware;

use servebench_results::{format_context, CellResult, CellStatus, Results};

/// Options of the text report.
#[derive(Clone, Debug, Default)]
pub struct ReportOptions {
    /// Print raw tok/s in capacity-limited cells (otherwise `∅`), like the seed's
    /// `--show-capacity-limited-values`.
    pub show_capacity_limited_values: bool,
    /// Path of the JSON results, printed at the end.
    pub json_path: Option<String>,
}

/// Milliseconds, compact: `0.42`, `8.04`, `185`, `1.9k` (≥ 1000 ms with one decimal).
pub fn fmt_ms(seconds: Option<f64>) -> String {
    match seconds {
        None => "-".into(),
        Some(s) => {
            let ms = s * 1e3;
            if ms >= 10_000.0 {
                format!("{:.0}k", ms / 1e3)
            } else if ms >= 1000.0 {
                format!("{:.1}k", ms / 1e3)
            } else if ms >= 100.0 {
                format!("{ms:.0}")
            } else if ms >= 10.0 {
                format!("{ms:.1}")
            } else {
                format!("{ms:.2}")
            }
        }
    }
}

/// tok/s with one decimal (`-` when absent).
pub fn fmt_tps(v: Option<f64>) -> String {
    v.map(|x| format!("{x:.1}")).unwrap_or_else(|| "-".into())
}

/// The text shown in one matrix cell.
pub fn cell_text(r: &CellResult, show_capacity_limited: bool) -> String {
    match r.status {
        CellStatus::Ok => {
            let mut s = if r.capacity_limited && !show_capacity_limited {
                "∅".to_string()
            } else {
                fmt_tps(r.aggregate_tps)
            };
            if r.capacity_limited {
                if let Some(eff) = r.effective_concurrency.or(r.avg_running_reqs) {
                    let _ = write!(s, " ({:.1}/{})", eff, r.concurrency);
                }
                s.push('*');
            }
            s
        }
        CellStatus::SkippedCapacity => "∅".into(),
        CellStatus::SkippedContext => "ctx".into(),
        CellStatus::SkippedUser => "skip".into(),
        CellStatus::Error => "ERROR".into(),
        CellStatus::Invalid => "INVALID".into(),
    }
}

fn detail_text(r: &CellResult) -> String {
    if r.status != CellStatus::Ok {
        return String::new();
    }
    format!(
        "{}/{}",
        fmt_ms(r.ttft_p50),
        fmt_ms(r.inter_token_latency_p50)
    )
}

fn pad(s: &str, w: usize) -> String {
    let n = s.chars().count();
    if n >= w {
        s.to_string()
    } else {
        format!("{}{s}", " ".repeat(w - n))
    }
}

fn pad_right(s: &str, w: usize) -> String {
    let n = s.chars().count();
    if n >= w {
        s.to_string()
    } else {
        format!("{s}{}", " ".repeat(w - n))
    }
}

/// Renders a matrix (rows = contexts, columns = C) from `cells` with a value and a detail line.
fn matrix(
    out: &mut String,
    cells: &[CellResult],
    value: &dyn Fn(&CellResult) -> String,
    detail: Option<&dyn Fn(&CellResult) -> String>,
) {
    let mut cs: Vec<u64> = cells.iter().map(|c| c.concurrency).collect();
    cs.sort_unstable();
    cs.dedup();
    let mut xs: Vec<u64> = Vec::new();
    for c in cells {
        if !xs.contains(&c.context_tokens) {
            xs.push(c.context_tokens);
        }
    }
    xs.sort_unstable();
    let find = |x: u64, c: u64| {
        cells
            .iter()
            .find(|r| r.context_tokens == x && r.concurrency == c)
    };
    let mut width = 8usize;
    for r in cells {
        width = width.max(value(r).chars().count() + 2);
        if let Some(d) = detail {
            width = width.max(d(r).chars().count() + 2);
        }
    }
    let _ = write!(out, "  {}", pad_right("ctx \\ C", 9));
    for c in &cs {
        let _ = write!(out, "{}", pad(&c.to_string(), width));
    }
    out.push('\n');
    for &x in &xs {
        let _ = write!(out, "  {}", pad_right(&format_context(x), 9));
        for &c in &cs {
            let v = find(x, c).map(value).unwrap_or_else(|| "".into());
            let _ = write!(out, "{}", pad(&v, width));
        }
        out.push('\n');
        if let Some(d) = detail {
            let line: Vec<String> = cs
                .iter()
                .map(|&c| find(x, c).map(d).unwrap_or_default())
                .collect();
            if line.iter().any(|s| !s.is_empty()) {
                let _ = write!(out, "  {}", pad_right("", 9));
                for s in line {
                    let _ = write!(out, "{}", pad(&s, width));
                }
                out.push('\n');
            }
        }
    }
}

/// The final plain-text report.
pub fn render_text(r: &Results, opts: &ReportOptions) -> String {
    let m = &r.metadata;
    let mut out = String::new();
    let engine = match &m.engine_version {
        Some(v) if v.starts_with(&m.engine) => v.clone(),
        Some(v) => format!("{} {v}", m.engine),
        None => m.engine.clone(),
    };
    let tool = if m.tool.is_empty() {
        "llm_decode_bench"
    } else {
        m.tool.as_str()
    };
    let api = if m.endpoint.is_empty() {
        String::new()
    } else {
        format!(", {} API", m.endpoint)
    };
    let _ = writeln!(
        out,
        "{tool} {} — {} @ {} ({engine}{api})",
        m.version, m.model, m.server
    );
    let mut facts = vec![
        format!("max_tokens {}", m.max_tokens),
        format!("window {:.0}s", m.duration_per_test),
        format!("ignore_eos {}", m.ignore_eos),
    ];
    if !m.prompt_targeting.is_empty() {
        facts.push(format!("prompts: {}", m.prompt_targeting));
    }
    if m.max_total_tokens > 0 {
        facts.push(format!("KV budget {} tokens", m.max_total_tokens));
    }
    if m.interrupted {
        facts.push("INTERRUPTED (partial results)".into());
    }
    let _ = writeln!(out, "{}", facts.join(" · "));
    out.push('\n');

    if !r.prefill.is_empty() {
        let _ = writeln!(
            out,
            "Prefill (client: prompt_tokens / TTFT of a cold max_tokens=1 request)"
        );
        let _ = writeln!(
            out,
            "  {}{}{}{}  method",
            pad_right("context", 9),
            pad("tokens", 9),
            pad("TTFT s", 10),
            pad("tok/s", 11)
        );
        for (ctx_label, row) in by_context(&r.prefill) {
            let _ = writeln!(
                out,
                "  {}{}{}{}  {}",
                pad_right(&ctx_label, 9),
                pad(
                    &row.prompt_tokens
                        .map(|t| t.to_string())
                        .unwrap_or_else(|| "-".into()),
                    9
                ),
                pad(
                    &row.ttft_seconds
                        .map(|t| format!("{t:.3}"))
                        .unwrap_or_else(|| "-".into()),
                    10
                ),
                pad(
                    &row.tok_per_sec
                        .map(|t| format!("{t:.0}"))
                        .unwrap_or_else(|| "-".into()),
                    11
                ),
                row.method
            );
        }
        out.push('\n');
    }

    if !r.results.is_empty() {
        let layer = if m.decode_mode == "request-count" {
            "request-count: Σ completion tokens / wall time"
        } else {
            "sustained"
        };
        let _ = writeln!(
            out,
            "Aggregate decode tok/s ({layer}; second line: TTFT p50 / ITL p50, ms)"
        );
        let show = opts.show_capacity_limited_values || m.show_capacity_limited_values;
        matrix(
            &mut out,
            &r.results,
            &|c| cell_text(c, show),
            Some(&detail_text),
        );
        out.push('\n');
        let _ = writeln!(out, "Per-request tok/s (aggregate / C)");
        matrix(
            &mut out,
            &r.results,
            &|c| {
                if c.status == CellStatus::Ok && (show || !c.capacity_limited) {
                    fmt_tps(c.per_request_avg_tps)
                } else {
                    cell_text(c, show)
                }
            },
            None,
        );
        out.push('\n');
        let sources: Vec<&str> = {
            let mut v: Vec<&str> = r
                .results
                .iter()
                .filter(|c| c.status == CellStatus::Ok)
                .map(|c| c.aggregate_source.as_str())
                .collect();
            v.sort_unstable();
            v.dedup();
            v
        };
        if !sources.is_empty() {
            let _ = writeln!(out, "Aggregate source(s): {}", sources.join(", "));
        }
        let _ = writeln!(
            out,
            "Legend: ∅ = over KV capacity (or capacity-limited: value hidden), * = capacity-limited (avg running/C), \
             ctx = context + max_tokens > max_model_len, skip = not run, ERROR/INVALID = see below"
        );
    }

    if !r.prefill_warm.is_empty() {
        out.push('\n');
        let _ = writeln!(
            out,
            "Warm-prefix prefill (same prompt again; NOT comparable with cold prefill)"
        );
        let _ = writeln!(
            out,
            "  {}{}{}{}{}  cached from",
            pad_right("context", 9),
            pad("tokens", 9),
            pad("cached", 16),
            pad("TTFT s", 10),
            pad("comp. tok/s", 13)
        );
        for (ctx_label, row) in by_context(&r.prefill_warm) {
            let cached = match (row.cached_tokens, row.cache_hit_rate) {
                (Some(c), Some(h)) => format!("{c} ({:.0}%)", h * 100.0),
                (Some(c), None) => c.to_string(),
                _ => "unknown".into(),
            };
            let _ = writeln!(
                out,
                "  {}{}{}{}{}  {}",
                pad_right(&ctx_label, 9),
                pad(
                    &row.prompt_tokens
                        .map(|t| t.to_string())
                        .unwrap_or_else(|| "-".into()),
                    9
                ),
                pad(&cached, 16),
                pad(
                    &row.ttft_seconds
                        .map(|t| format!("{t:.3}"))
                        .unwrap_or_else(|| "-".into()),
                    10
                ),
                pad(
                    &row.tok_per_sec
                        .map(|t| format!("{t:.0}"))
                        .unwrap_or_else(|| "-".into()),
                    13
                ),
                row.cached_tokens_source.as_deref().unwrap_or("-")
            );
        }
    }

    let burst: &[CellResult] = if m.decode_mode == "request-count" {
        &[]
    } else {
        &r.burst_results
    };
    if !burst.is_empty() {
        out.push('\n');
        let _ = writeln!(
            out,
            "Burst / E2E tok/s (completed/target; finite batches — a different question from sustained decode)"
        );
        let show = opts.show_capacity_limited_values || m.show_capacity_limited_values;
        matrix(
            &mut out,
            burst,
            &|c| {
                if c.status == CellStatus::Ok {
                    format!(
                        "{} ({}/{})",
                        fmt_tps(c.aggregate_tps),
                        c.num_completed,
                        c.request_count_target
                    )
                } else {
                    cell_text(c, show)
                }
            },
            Some(&detail_text),
        );
    }

    out.push_str(&hardware::gpu_panel(r));

    let problems: Vec<&CellResult> = r
        .results
        .iter()
        .chain(r.burst_results.iter())
        .filter(|c| c.status != CellStatus::Ok)
        .collect();
    if !problems.is_empty() {
        out.push('\n');
        let _ = writeln!(out, "Cells not measured:");
        for c in problems {
            let layer = if c.benchmark_mode == "burst-e2e" {
                "[burst] "
            } else {
                ""
            };
            let _ = writeln!(
                out,
                "  {layer}C={} ctx={}: {} — {}",
                c.concurrency,
                format_context(c.context_tokens),
                c.status.as_str(),
                c.status_reason
            );
        }
    }
    let warned: Vec<&CellResult> = r
        .results
        .iter()
        .filter(|c| !c.warnings.is_empty())
        .collect();
    if !warned.is_empty() {
        out.push('\n');
        let _ = writeln!(out, "Warnings:");
        for c in warned {
            for w in &c.warnings {
                let _ = writeln!(
                    out,
                    "  C={} ctx={}: {w}",
                    c.concurrency,
                    format_context(c.context_tokens)
                );
            }
        }
    }
    if let Some(p) = &opts.json_path {
        out.push('\n');
        let _ = writeln!(out, "Results saved to {p}");
    }
    out
}

/// Serialises `r` as pretty JSON (2-space indent, trailing newline).
pub fn to_json(r: &Results) -> Result<Vec<u8>, serde_json::Error> {
    let mut v = serde_json::to_vec_pretty(r)?;
    v.push(b'\n');
    Ok(v)
}

/// Writes `r` to `path` atomically (temporary file in the same directory, then rename), so an
/// interrupted write never leaves a truncated results file.
pub fn write_json(r: &Results, path: &Path) -> anyhow::Result<()> {
    let bytes = to_json(r)?;
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(
        ".{}.tmp{}",
        path.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("results"),
        std::process::id()
    ));
    std::fs::write(&tmp, bytes)?;
    if let Err(e) = std::fs::rename(&tmp, path) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e.into());
    }
    Ok(())
}

/// Rows keyed by context tokens (`"8192"`) with their labels (`8k`), in ascending numeric
/// order (keys that are not numbers last, shown as they are); the JSON keeps the run's order.
fn by_context<V>(m: &indexmap::IndexMap<String, V>) -> Vec<(String, &V)> {
    let mut v: Vec<(Option<u64>, &String, &V)> =
        m.iter().map(|(k, row)| (k.parse().ok(), k, row)).collect();
    v.sort_by_key(|(n, _, _)| n.unwrap_or(u64::MAX));
    v.into_iter()
        .map(|(n, k, row)| (n.map_or_else(|| k.clone(), format_context), row))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ms_format() {
        assert_eq!(fmt_ms(Some(0.00042)), "0.42");
        assert_eq!(fmt_ms(Some(0.0123)), "12.3");
        assert_eq!(fmt_ms(Some(0.185)), "185");
        assert_eq!(fmt_ms(Some(1.5)), "1.5k");
        assert_eq!(fmt_ms(Some(12.0)), "12k");
        assert_eq!(fmt_ms(None), "-");
    }
}
