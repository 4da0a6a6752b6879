//! Markdown export: the run summary, the decode matrices (aggregate tok/s, per-request tok/s,
//! TTFT and ITL at the chosen percentiles), prefill rows, cells not measured and warnings, as
//! GitHub-flavoured Markdown tables.

use std::fmt::Write as _;

use servebench_results::{format_context, CellResult, CellStatus, Results};

use crate::cells::{self, axes, by_context, find, layers, pct_label, percentile, shown, Metric};
use crate::export::Exporter;
use crate::{cell_text, fmt_ms, fmt_tps, ReportOptions};

/// Escapes `|`, line breaks (every control and bidirectional formatting character) and `<`,
/// `>`, `&` (GitHub renders inline HTML: a server's text must not become a tag), so a value
/// stays text in its table cell.
pub fn md_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in crate::export::one_line(s).chars() {
        match c {
            '|' => out.push_str("\\|"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            c => out.push(c),
        }
    }
    out
}

/// One Markdown matrix: rows = contexts, columns = C.
fn md_matrix(out: &mut String, cells: &[CellResult], value: &dyn Fn(&CellResult) -> String) {
    let (cs, xs) = axes(cells);
    let _ = write!(out, "| ctx \\ C |");
    for c in &cs {
        let _ = write!(out, " {c} |");
    }
    out.push('\n');
    let _ = write!(out, "|---|");
    for _ in &cs {
        out.push_str("---:|");
    }
    out.push('\n');
    for &x in &xs {
        let _ = write!(out, "| {} |", format_context(x));
        for &c in &cs {
            let v = find(cells, x, c).map(value).unwrap_or_default();
            let _ = write!(out, " {} |", md_escape(&v));
        }
        out.push('\n');
    }
    out.push('\n');
}

/// The Markdown report.
pub fn render_markdown(r: &Results, opts: &ReportOptions) -> String {
    let mut out = String::new();
    md_summary(&mut out, r);
    let show = opts.show_capacity_limited_values || r.metadata.show_capacity_limited_values;
    md_layers(&mut out, r, show, &opts.percentiles());
    md_prefill(&mut out, r);
    out.push_str(&crate::rate::markdown(r));
    md_problems(&mut out, r);
    md_warnings(&mut out, r);
    out
}

/// The title and the run summary table.
fn md_summary(out: &mut String, r: &Results) {
    let m = &r.metadata;
    let _ = writeln!(out, "# servebench report: {}\n", md_escape(&m.model));
    let host = r
        .startup_diagnostics
        .get("hostname")
        .and_then(|v| v.as_str())
        .unwrap_or("");
    let rows: Vec<(&str, String)> = vec![
        ("tool", cells::tool_label(r)),
        ("engine", cells::engine_label(r)),
        ("model", m.model.clone()),
        ("server", m.server.clone()),
        ("client host", host.to_string()),
        ("API", m.endpoint.clone()),
        ("written", m.timestamp.clone()),
        ("max_tokens", m.max_tokens.to_string()),
        ("ignore_eos", m.ignore_eos.to_string()),
        (
            "window per cell",
            format!("{} s", cells::fmt_num(m.duration_per_test)),
        ),
        (
            "prompt sizing",
            cells::prompt_targeting_words(&m.prompt_targeting),
        ),
        (
            "KV budget",
            if m.max_total_tokens > 0 {
                format!("{} tokens", m.max_total_tokens)
            } else {
                "unknown".into()
            },
        ),
    ];
    let _ = writeln!(out, "| | |\n|---|---|");
    for (k, v) in rows {
        if !v.is_empty() {
            let _ = writeln!(out, "| {k} | {} |", md_escape(&v));
        }
    }
    if m.interrupted {
        let _ = writeln!(out, "\n**Interrupted: partial results.**");
    }
    out.push('\n');
}

/// Each layer's decode matrices (aggregate, per-request, TTFT and ITL at `pcts`) and legend.
fn md_layers(out: &mut String, r: &Results, show: bool, pcts: &[f64]) {
    for layer in layers(r) {
        let _ = writeln!(out, "## {}\n", layer.title);
        let _ = writeln!(out, "Aggregate decode tok/s:\n");
        md_matrix(out, layer.cells, &|c| cell_text(c, show));
        let _ = writeln!(out, "Per-request tok/s (aggregate / C):\n");
        md_matrix(out, layer.cells, &|c| {
            if shown(c, show) {
                fmt_tps(c.per_request_avg_tps)
            } else {
                cell_text(c, show)
            }
        });
        for (metric, name) in [(Metric::Ttft, "TTFT"), (Metric::Itl, "ITL (per token)")] {
            let labels: Vec<String> = pcts.iter().map(|&p| pct_label(p)).collect();
            let _ = writeln!(out, "{name}, ms ({}):\n", labels.join(" / "));
            md_matrix(out, layer.cells, &|c| {
                if c.status != CellStatus::Ok {
                    return String::new();
                }
                pcts.iter()
                    .map(|&p| fmt_ms(percentile(c, metric, p)))
                    .collect::<Vec<_>>()
                    .join(" / ")
            });
        }
        let legend = crate::legend(layer.cells, show);
        if !legend.is_empty() {
            for l in legend {
                let _ = writeln!(out, "- {}", md_escape(&l));
            }
            out.push('\n');
        }
    }
}

/// The cold and warm-prefix prefill tables (each only when it has rows).
fn md_prefill(out: &mut String, r: &Results) {
    for (title, map, warm) in [
        ("Prefill (cold)", &r.prefill, false),
        (
            "Warm-prefix prefill (the same prompt again; not comparable with cold prefill)",
            &r.prefill_warm,
            true,
        ),
    ] {
        if map.is_empty() {
            continue;
        }
        let _ = writeln!(out, "## {title}\n");
        let _ = writeln!(
            out,
            "| context | prompt tokens | TTFT s | {} | measured by | status |\n|---|---:|---:|---:|---|---|",
            if warm { "uncached tok/s" } else { "tok/s" }
        );
        for (label, _, row) in by_context(map) {
            let _ = writeln!(
                out,
                "| {label} | {} | {} | {} | {} | {} |",
                cells::prefill_tokens_shown(row)
                    .map(|t| t.to_string())
                    .unwrap_or_default(),
                row.ttft_seconds
                    .map(|t| format!("{t:.3}"))
                    .unwrap_or_default(),
                row.tok_per_sec
                    .map(|t| format!("{t:.0}"))
                    .unwrap_or_default(),
                md_escape(&cells::prefill_method_words(row.method)),
                md_escape(&cells::prefill_status_text(row))
            );
        }
        out.push('\n');
    }
}

/// The "Cells not measured" table (nothing when every cell is ok).
fn md_problems(out: &mut String, r: &Results) {
    let problems: Vec<(&str, &CellResult)> = layers(r)
        .into_iter()
        .flat_map(|l| l.cells.iter().map(move |c| (l.id, c)))
        .filter(|(_, c)| c.status != CellStatus::Ok)
        .collect();
    if problems.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "## Cells not measured\n\n| layer | C | context | status | reason |\n|---|---:|---|---|---|"
    );
    for (l, c) in problems {
        let _ = writeln!(
            out,
            "| {l} | {} | {} | {} | {} |",
            c.concurrency,
            format_context(c.context_tokens),
            c.status.as_str(),
            md_escape(&c.status_reason)
        );
    }
    out.push('\n');
}

/// Every cell warning, one bullet each (nothing when there are none).
fn md_warnings(out: &mut String, r: &Results) {
    let warned: Vec<(&str, &CellResult)> = layers(r)
        .into_iter()
        .flat_map(|l| l.cells.iter().map(move |c| (l.id, c)))
        .filter(|(_, c)| !c.warnings.is_empty())
        .collect();
    if warned.is_empty() {
        return;
    }
    let _ = writeln!(out, "## Warnings\n");
    for (l, c) in warned {
        for w in &c.warnings {
            let _ = writeln!(
                out,
                "- {l} C={} ctx={}: {}",
                c.concurrency,
                format_context(c.context_tokens),
                md_escape(w)
            );
        }
    }
    out.push('\n');
}

/// Markdown exporter.
pub struct MarkdownExporter;

impl Exporter for MarkdownExporter {
    fn serialize(&self, results: &Results, opts: &ReportOptions) -> anyhow::Result<Vec<u8>> {
        Ok(render_markdown(results, opts).into_bytes())
    }
}
