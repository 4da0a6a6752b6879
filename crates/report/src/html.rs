//! The HTML report: one self-contained file (inline CSS and inline SVG plots, no script, no
//! external resource of any kind) that reads offline. A Content-Security-Policy of
//! `default-src 'none'` in the page makes a browser refuse any network request, should one ever
//! slip in.
//!
//! Sections: run summary (engine, model, host, flags), per decode layer a colour-scaled matrix
//! and plots (aggregate tok/s vs C per context, per-user tok/s vs aggregate tok/s labelled by C,
//! TTFT and ITL p50/p99 vs C), prefill tok/s vs context, per-cell TTFT and ITL distributions
//! (from the request samples, when the file has them), every cell not measured with its reason,
//! warnings and the methodology.

use std::fmt::Write as _;

use servebench_results::{format_context, CellResult, CellStatus, Results};

use crate::cells::{
    self, axes, by_context, find, layers, pct_label, percentile, prefill_ok, shown, Metric,
};
use crate::export::Exporter;
use crate::plot::{line_chart, Chart, Series, XScale};
use crate::{cell_text, fmt_ms, ReportOptions};

/// HTML-escapes `s` (text and attribute values).
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// The page's stylesheet (inline).
pub(crate) const CSS: &str = "
body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:24px auto;max-width:1240px;padding:0 16px;color:#1d1d1f;background:#fff;line-height:1.4}
h1{font-size:1.6em;margin-bottom:4px}h2{margin-top:2em;border-bottom:1px solid #ddd;padding-bottom:4px}h3{margin-top:1.4em}
table{border-collapse:collapse;margin:8px 0 16px}td,th{border:1px solid #d0d0d0;padding:4px 8px;vertical-align:top}
th{background:#f4f4f6;text-align:left}td.num{text-align:right;font-variant-numeric:tabular-nums}
table.matrix td{text-align:right;min-width:84px;font-variant-numeric:tabular-nums}
table.matrix small{display:block;color:#333;font-size:.78em}
td.na{background:#eee;color:#555}td.bad{background:#f8d7da;color:#7a1020;font-weight:600}
.plots{display:flex;flex-wrap:wrap;gap:12px}.plots figure{margin:0;border:1px solid #e4e4e4}
.note{color:#555;font-size:.92em}code{background:#f4f4f6;padding:0 3px}
.warn{color:#7a4b00}ul.toc{columns:2}
";

/// Background colour of a matrix cell with `v` of `max`: white → green.
fn heat(v: f64, max: f64) -> String {
    let f = if max > 0.0 {
        (v / max).clamp(0.0, 1.0)
    } else {
        0.0
    };
    // Lightness 97 % (lowest) to 62 % (highest), green hue.
    let l = 97.0 - 35.0 * f;
    format!("hsl(130,55%,{l:.0}%)")
}

/// Page head with the CSP, title and style.
pub(crate) fn head(title: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{}</title>\n<style>{CSS}</style>\n</head>\n<body>\n",
        esc(title)
    )
}

/// Appends a group of plots (skipping empty ones).
pub(crate) fn plots(out: &mut String, charts: &[Chart<'_>]) -> anyhow::Result<()> {
    let mut svgs = Vec::new();
    for c in charts {
        if let Some(svg) = line_chart(c)? {
            svgs.push(svg);
        }
    }
    if svgs.is_empty() {
        return Ok(());
    }
    out.push_str("<div class=\"plots\">\n");
    for s in svgs {
        let _ = writeln!(out, "<figure>{s}</figure>");
    }
    out.push_str("</div>\n");
    Ok(())
}

/// Per-context series of `y(cell)` against C over the cells shown.
pub(crate) fn series_vs_c(
    cells: &[CellResult],
    show: bool,
    y: &dyn Fn(&CellResult) -> Option<f64>,
    name: &dyn Fn(u64) -> String,
    color_offset: usize,
    dashed: bool,
) -> Vec<Series> {
    let (cs, xs) = axes(cells);
    xs.iter()
        .enumerate()
        .map(|(i, &x)| Series {
            name: name(x),
            points: cs
                .iter()
                .filter_map(|&c| find(cells, x, c))
                .filter(|c| shown(c, show))
                .filter_map(|c| y(c).map(|v| (c.concurrency as f64, v)))
                .collect(),
            point_labels: None,
            color: i + color_offset,
            dashed,
        })
        .filter(|s| !s.points.is_empty())
        .collect()
}

/// Per-user tok/s of a cell: the p50 of 1/ITL over its requests, else aggregate / C.
pub(crate) fn per_user_tps(c: &CellResult) -> Option<f64> {
    c.output_tps_per_user_p50.or(c.per_request_avg_tps)
}

fn ms(v: Option<f64>) -> Option<f64> {
    v.map(|s| s * 1e3)
}

/// Most points drawn per distribution line (larger cells are thinned evenly, keeping both ends).
const CDF_POINTS: usize = 300;

/// Empirical CDF points of `values` (x sorted, y = share ≤ x in %).
fn cdf(values: &[f64]) -> Vec<(f64, f64)> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let step = n.div_ceil(CDF_POINTS).max(1);
    v.iter()
        .enumerate()
        .filter(|(i, _)| i % step == 0 || *i + 1 == n)
        .map(|(i, &x)| (x, (i + 1) as f64 / n as f64 * 100.0))
        .collect()
}

fn matrix_table(out: &mut String, cells: &[CellResult], show: bool, pcts: &[f64]) {
    let (cs, xs) = axes(cells);
    let max = cells
        .iter()
        .filter(|c| shown(c, show))
        .filter_map(|c| c.aggregate_tps)
        .fold(0.0f64, f64::max);
    out.push_str("<table class=\"matrix\"><tr><th>context \\ C</th>");
    for c in &cs {
        let _ = write!(out, "<th>{c}</th>");
    }
    out.push_str("</tr>\n");
    for &x in &xs {
        let _ = write!(out, "<tr><th>{}</th>", format_context(x));
        for &c in &cs {
            match find(cells, x, c) {
                None => out.push_str("<td class=\"na\"></td>"),
                Some(cell) => {
                    let text = cell_text(cell, show);
                    let title = if cell.status_reason.is_empty() {
                        String::new()
                    } else {
                        format!(" title=\"{}\"", esc(&cell.status_reason))
                    };
                    if shown(cell, show) && cell.aggregate_tps.is_some() {
                        let v = cell.aggregate_tps.unwrap_or(0.0);
                        let _ = write!(
                            out,
                            "<td style=\"background:{}\"{title}><b>{}</b>",
                            heat(v, max),
                            esc(&text)
                        );
                        for &p in pcts {
                            let _ = write!(
                                out,
                                "<small>{} TTFT {} · ITL {} ms</small>",
                                pct_label(p),
                                fmt_ms(percentile(cell, Metric::Ttft, p)),
                                fmt_ms(percentile(cell, Metric::Itl, p))
                            );
                        }
                        out.push_str("</td>");
                    } else if matches!(cell.status, CellStatus::Error | CellStatus::Invalid) {
                        let _ = write!(out, "<td class=\"bad\"{title}>{}</td>", esc(&text));
                    } else {
                        let _ = write!(out, "<td class=\"na\"{title}>{}</td>", esc(&text));
                    }
                }
            }
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
}

/// What the decode layers of the HTML report share: the value switch and the percentiles.
struct HtmlCtx {
    /// Raw tok/s in capacity-limited cells.
    show: bool,
    /// The TTFT / ITL percentiles shown in the matrices.
    pcts: Vec<f64>,
}

/// The HTML report of `r`.
///
/// # Errors
/// A drawing error from the plotting library.
pub fn render_html(r: &Results, opts: &ReportOptions) -> anyhow::Result<String> {
    let m = &r.metadata;
    let cx = HtmlCtx {
        show: opts.show_capacity_limited_values || m.show_capacity_limited_values,
        pcts: opts.percentiles(),
    };
    let title = format!("servebench report — {}", m.model);
    let mut out = head(&title);
    html_intro(&mut out, r, &title);
    html_summary(&mut out, r);
    for (li, layer) in layers(r).into_iter().enumerate() {
        html_layer(&mut out, &cx, li, &layer)?;
    }
    html_gaps(&mut out, r);
    html_steady(&mut out, r);
    html_prefill(&mut out, r)?;
    out.push_str(&crate::rate::html(r));
    html_problems(&mut out, r);
    html_warnings(&mut out, r);
    html_methodology(&mut out, r);
    if !r.event_log.is_empty() {
        let _ = writeln!(
            out,
            "<h2 id=\"event-log\">Event log</h2>\n<details><summary>{} lines (click to open)</summary><pre>{}</pre></details>",
            r.event_log.len(),
            esc(&r.event_log.join("\n"))
        );
    }
    out.push_str("</body>\n</html>\n");
    Ok(out)
}

/// The per-gap ITL distribution of every measured cell and rate row (issue 19: every token
/// gap, chunk-aware, from the HDR histogram): gaps, p50 / p90 / p99 / p99.9 / max in ms, peak
/// output tok/s over 1 s, and the gap histogram as a small bar chart (log-spaced buckets, bar
/// height ∝ count, each bar's title gives its edge and count). Nothing for files without it.
fn html_gaps(out: &mut String, r: &Results) {
    let mut rows: Vec<(String, &servebench_results::ItlGaps, Option<f64>)> = Vec::new();
    for c in r.results.iter().chain(r.burst_results.iter()) {
        if let Some(g) = c.itl_gaps.as_ref().filter(|_| c.status == CellStatus::Ok) {
            let tag = if c.benchmark_mode == servebench_results::BenchmarkMode::BurstE2e {
                "[burst] "
            } else {
                ""
            };
            rows.push((
                format!(
                    "{tag}C={} ctx={}",
                    c.concurrency,
                    servebench_results::format_context(c.context_tokens)
                ),
                g,
                c.peak_output_tps_1s,
            ));
        }
    }
    for row in &r.rate_results {
        if let Some(g) = &row.itl_gaps {
            rows.push((
                format!(
                    "rate {} req/s ctx={}",
                    row.offered_rate,
                    servebench_results::format_context(row.context_tokens)
                ),
                g,
                row.peak_output_tps_1s,
            ));
        }
    }
    if rows.is_empty() {
        return;
    }
    out.push_str("<h2 id=\"itl-gaps\">Per-gap ITL</h2>\n<p class=\"note\">Every token gap of the cell's requests, chunk-aware (a chunk of k tokens counts k gaps of its gap / k): the tail a user sees as a stutter, which the per-request mean ITL hides. The histogram's buckets double from 1 µs; hover a bar for its edge and count.</p>\n<table><tr><th>row</th><th>gaps</th><th>p50, ms</th><th>p90, ms</th><th>p99, ms</th><th>p99.9, ms</th><th>max, ms</th><th>peak tok/s (1 s)</th><th>histogram</th></tr>\n");
    for (label, g, peak) in rows {
        let ms = |v: f64| crate::fmt_ms(Some(v));
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
            esc(&label),
            g.gaps,
            esc(&ms(g.p50)),
            esc(&ms(g.p90)),
            esc(&ms(g.p99)),
            esc(&ms(g.p99_9)),
            esc(&ms(g.max)),
            esc(&crate::fmt_tps(peak)),
            gap_bars(&g.histogram)
        );
    }
    out.push_str("</table>\n");
}

/// A gap histogram as an inline SVG bar chart: one 6-px bar per non-empty bucket, in bucket
/// order, height ∝ count (the tallest 28 px, every non-empty bucket at least 1 px so a single
/// stall shows), `<title>` = upper edge and count.
fn gap_bars(h: &[servebench_results::GapBucket]) -> String {
    let most = h.iter().map(|b| b.count).max().unwrap_or(0);
    if most == 0 {
        return String::new();
    }
    let mut svg = format!(
        "<svg width=\"{}\" height=\"30\" role=\"img\" aria-label=\"gap histogram\">",
        h.len() * 7
    );
    for (i, b) in h.iter().enumerate() {
        let bh = ((b.count as f64 / most as f64) * 28.0).max(1.0);
        let _ = write!(
            svg,
            "<rect x=\"{}\" y=\"{:.1}\" width=\"6\" height=\"{bh:.1}\" fill=\"#4e79a7\"><title>≤ {} ms: {} gaps</title></rect>",
            i * 7,
            29.0 - bh,
            esc(&crate::fmt_ms(Some(b.le_s))),
            b.count
        );
    }
    svg.push_str("</svg>");
    svg
}

/// The steady-state blocks (request-count, Burst / E2E cells and rate rows), one table row each;
/// nothing for files without them.
fn html_steady(out: &mut String, r: &Results) {
    let blocks = cells::steady_blocks(r);
    if blocks.is_empty() {
        return;
    }
    out.push_str("<h2 id=\"steady-state\">Steady state</h2>\n<p class=\"note\">The longest span with at least 95 % of the in-flight target in flight (ramp-up and drain left out), and the throughput and latency of the requests sent inside it. A short span (under 1 s or under a quarter of the load) is marked.</p>\n<table><tr><th>row</th><th>span, s</th><th>% of load</th><th>in flight ≥ / target</th><th>mean in flight</th><th>requests</th><th>output tok/s</th><th>TTFT p50 / p99, ms</th><th>ITL p50 / p99, ms</th><th></th></tr>\n");
    for (label, s) in blocks {
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td class=\"num\">{:.2}</td><td class=\"num\">{:.0}</td><td class=\"num\">{} / {}</td><td class=\"num\">{:.1}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{} / {}</td><td class=\"num\">{} / {}</td><td>{}</td></tr>",
            esc(&label),
            s.duration_s,
            s.fraction * 100.0,
            s.min_in_flight,
            s.target_in_flight,
            s.mean_in_flight,
            s.requests,
            esc(&crate::fmt_tps(s.output_tps)),
            esc(&crate::fmt_ms(s.ttft_p50)),
            esc(&crate::fmt_ms(s.ttft_p99)),
            esc(&crate::fmt_ms(s.itl_p50)),
            esc(&crate::fmt_ms(s.itl_p99)),
            if s.short { "short" } else { "" }
        );
    }
    out.push_str("</table>\n");
}

/// The page title, who wrote it when, and the interrupted notice.
fn html_intro(out: &mut String, r: &Results, title: &str) {
    let m = &r.metadata;
    let _ = writeln!(out, "<h1>{}</h1>", esc(title));
    let _ = writeln!(
        out,
        "<p class=\"note\">Written by {} on {}. This page is self-contained: it loads nothing from the network.</p>",
        esc(&cells::tool_label(r)),
        esc(if m.timestamp.is_empty() { "an unknown date" } else { &m.timestamp })
    );
    if m.interrupted {
        out.push_str(
            "<p class=\"warn\"><b>The run was interrupted: these are partial results.</b></p>\n",
        );
    }
}

/// The rows of the run summary table (empty values are left out when written).
fn summary_facts(r: &Results) -> Vec<(&'static str, String)> {
    let m = &r.metadata;
    let host = r
        .startup_diagnostics
        .get("hostname")
        .and_then(|v| v.as_str())
        .unwrap_or("");
    let kv = if m.max_total_tokens > 0 {
        format!(
            "{} tokens ({})",
            m.max_total_tokens,
            m.kv_budget_source.as_deref().unwrap_or("source unknown")
        )
    } else {
        "unknown".into()
    };
    vec![
        ("engine", cells::engine_label(r)),
        ("model", m.model.clone()),
        (
            "server",
            format!(
                "{} {}",
                m.server,
                if m.base_url.is_empty() {
                    ""
                } else {
                    &m.base_url
                }
            ),
        ),
        ("API", m.endpoint.clone()),
        ("client host", host.to_string()),
        ("max_tokens per request", m.max_tokens.to_string()),
        ("ignore_eos", m.ignore_eos.to_string()),
        (
            "measured window per cell",
            format!("{} s", cells::fmt_num(m.duration_per_test)),
        ),
        (
            "prompt sizing",
            cells::prompt_targeting_words(&m.prompt_targeting),
        ),
        ("KV-cache budget", kv),
        (
            "server metrics",
            if m.metrics_available {
                "available".into()
            } else if m.metrics_warning.is_empty() {
                "not available".into()
            } else {
                format!("not available: {}", m.metrics_warning)
            },
        ),
    ]
}

/// The run summary table, with the run's flags when the file has them.
fn html_summary(out: &mut String, r: &Results) {
    out.push_str("<h2 id=\"summary\">Run summary</h2>\n<table>\n");
    for (k, v) in summary_facts(r) {
        if !v.trim().is_empty() {
            let _ = writeln!(
                out,
                "<tr><th>{}</th><td>{}</td></tr>",
                esc(k),
                esc(v.trim())
            );
        }
    }
    if let Some(args) = r
        .startup_diagnostics
        .get("args")
        .and_then(|a| a.as_object())
    {
        let flags: Vec<String> = args
            .iter()
            .map(|(k, v)| {
                let v = match v {
                    serde_json::Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                format!("<code>{}={}</code>", esc(k), esc(&v))
            })
            .collect();
        let _ = writeln!(out, "<tr><th>flags</th><td>{}</td></tr>", flags.join(" "));
    }
    out.push_str("</table>\n");
}

/// One decode layer (`li`: its index): heading, matrix, legend, plots and distributions.
fn html_layer(
    out: &mut String,
    cx: &HtmlCtx,
    li: usize,
    layer: &cells::Layer<'_>,
) -> anyhow::Result<()> {
    let show = cx.show;
    let _ = writeln!(
        out,
        "<h2 id=\"layer-{}\">{}</h2>",
        layer.id,
        esc(layer.title)
    );
    let _ = writeln!(
        out,
        "<p class=\"note\">Aggregate decode tok/s per cell (rows: context in prompt tokens, columns: concurrency C); the greener, the faster. Under each value: TTFT and per-token ITL at {}.</p>",
        cx.pcts.iter().map(|&p| pct_label(p)).collect::<Vec<_>>().join(", ")
    );
    matrix_table(out, layer.cells, show, &cx.pcts);
    let legend = crate::legend(layer.cells, show);
    if !legend.is_empty() {
        out.push_str("<ul class=\"note\">");
        for l in legend {
            let _ = write!(out, "<li>{}</li>", esc(&l));
        }
        out.push_str("</ul>\n");
    }
    plots(out, &layer_charts(layer, show))?;
    html_distributions(out, layer, li == 0)
}

/// Per-context p50 (solid) then p99 (dashed) series of a latency against C.
fn p50_p99_vs_c(
    cells: &[CellResult],
    show: bool,
    p50: &dyn Fn(&CellResult) -> Option<f64>,
    p99: &dyn Fn(&CellResult) -> Option<f64>,
) -> Vec<Series> {
    let mut s = series_vs_c(
        cells,
        show,
        p50,
        &|x| format!("ctx {} p50", format_context(x)),
        0,
        false,
    );
    s.extend(series_vs_c(
        cells,
        show,
        p99,
        &|x| format!("ctx {} p99", format_context(x)),
        0,
        true,
    ));
    s
}

/// Per-context series of per-user tok/s against aggregate tok/s, each point labelled by C.
fn frontier_series(cells: &[CellResult], show: bool) -> Vec<Series> {
    let (_, xs) = axes(cells);
    xs.iter()
        .enumerate()
        .map(|(i, &x)| {
            let pts: Vec<&CellResult> = cells
                .iter()
                .filter(|c| c.context_tokens == x && shown(c, show))
                .filter(|c| c.aggregate_tps.is_some() && per_user_tps(c).is_some())
                .collect();
            let mut pts = pts;
            pts.sort_by_key(|c| c.concurrency);
            Series {
                name: format!("ctx {}", format_context(x)),
                points: pts
                    .iter()
                    .map(|c| {
                        (
                            c.aggregate_tps.unwrap_or(0.0),
                            per_user_tps(c).unwrap_or(0.0),
                        )
                    })
                    .collect(),
                point_labels: Some(pts.iter().map(|c| format!("C={}", c.concurrency)).collect()),
                color: i,
                dashed: false,
            }
        })
        .filter(|s| !s.points.is_empty())
        .collect()
}

/// A layer's plots: aggregate tok/s, the per-user frontier, TTFT and ITL against C, and the
/// request latency for the finite layers.
fn layer_charts(layer: &cells::Layer<'_>, show: bool) -> Vec<Chart<'static>> {
    let cells = layer.cells;
    let ctx_name = |x: u64| format!("ctx {}", format_context(x));
    let mut charts = vec![
        Chart {
            title: "Aggregate decode tok/s vs concurrency",
            x_desc: "concurrency C (streams in flight)",
            y_desc: "aggregate tok/s",
            x_scale: XScale::Log2,
            series: series_vs_c(cells, show, &|c| c.aggregate_tps, &ctx_name, 0, false),
        },
        Chart {
            title: "Per-user speed vs server throughput (labels: C)",
            x_desc: "aggregate tok/s",
            y_desc: "per-user tok/s (p50 of 1/ITL)",
            x_scale: XScale::Linear,
            series: frontier_series(cells, show),
        },
        Chart {
            title: "TTFT vs concurrency (solid p50, dashed p99)",
            x_desc: "concurrency C",
            y_desc: "TTFT, ms",
            x_scale: XScale::Log2,
            series: p50_p99_vs_c(cells, show, &|c| ms(c.ttft_p50), &|c| ms(c.ttft_p99)),
        },
        Chart {
            title: "ITL per token vs concurrency (solid p50, dashed p99)",
            x_desc: "concurrency C",
            y_desc: "ITL, ms",
            x_scale: XScale::Log2,
            series: p50_p99_vs_c(cells, show, &|c| ms(c.inter_token_latency_p50), &|c| {
                ms(c.inter_token_latency_p99)
            }),
        },
    ];
    if layer.id != "sustained" {
        charts.push(Chart {
            title: "Request latency (E2E) vs concurrency (solid p50, dashed p99)",
            x_desc: "concurrency C",
            y_desc: "request latency, s",
            x_scale: XScale::Log2,
            series: p50_p99_vs_c(cells, show, &|c| c.request_latency_p50, &|c| {
                c.request_latency_p99
            }),
        });
    }
    charts
}

/// Per-concurrency CDF series of `metric` (ms) over the cells of one context.
fn cdf_series(at_x: &[&&CellResult], metric: Metric) -> Vec<Series> {
    at_x.iter()
        .enumerate()
        .map(|(i, c)| Series {
            name: format!("C={}", c.concurrency),
            points: cdf(&metric.sample_values(c))
                .into_iter()
                .map(|(v, y)| (v * 1e3, y))
                .collect(),
            point_labels: None,
            color: i,
            dashed: false,
        })
        .filter(|s| !s.points.is_empty())
        .collect()
}

/// A layer's per-cell TTFT and ITL distributions from the request samples; for the `first`
/// layer, a note when the file has none.
fn html_distributions(
    out: &mut String,
    layer: &cells::Layer<'_>,
    first: bool,
) -> anyhow::Result<()> {
    let cells = layer.cells;
    let with_samples: Vec<&CellResult> = cells
        .iter()
        .filter(|c| c.status == CellStatus::Ok && !c.request_samples.is_empty())
        .collect();
    if with_samples.is_empty() {
        if first {
            out.push_str("<p class=\"note\">This file has no per-request samples, so no per-cell distributions are shown.</p>\n");
        }
        return Ok(());
    }
    let _ = writeln!(
        out,
        "<h3>Distributions per cell ({})</h3>\n<p class=\"note\">Share of a cell's requests (y) whose TTFT or per-token ITL is at most x, from the per-request samples in the file; one line per concurrency C.</p>",
        esc(layer.title)
    );
    let (_, xs) = axes(cells);
    let mut charts_owned: Vec<(String, String, Vec<Series>, Vec<Series>)> = Vec::new();
    for &x in &xs {
        let mut at_x: Vec<&&CellResult> = with_samples
            .iter()
            .filter(|c| c.context_tokens == x)
            .collect();
        if at_x.is_empty() {
            continue;
        }
        at_x.sort_by_key(|c| c.concurrency);
        charts_owned.push((
            format!("TTFT distribution, ctx {}", format_context(x)),
            format!("ITL distribution, ctx {}", format_context(x)),
            cdf_series(&at_x, Metric::Ttft),
            cdf_series(&at_x, Metric::Itl),
        ));
    }
    let charts: Vec<Chart<'_>> = charts_owned
        .iter()
        .flat_map(|(t1, t2, s1, s2)| {
            [
                Chart {
                    title: t1,
                    x_desc: "TTFT, ms",
                    y_desc: "requests, % (cumulative)",
                    x_scale: XScale::Linear,
                    series: s1.clone(),
                },
                Chart {
                    title: t2,
                    x_desc: "per-token ITL of a request, ms",
                    y_desc: "requests, % (cumulative)",
                    x_scale: XScale::Linear,
                    series: s2.clone(),
                },
            ]
        })
        .collect();
    plots(out, &charts)
}

/// The cold and warm-prefix prefill table and its plot (nothing when there are no rows).
fn html_prefill(out: &mut String, r: &Results) -> anyhow::Result<()> {
    if r.prefill.is_empty() && r.prefill_warm.is_empty() {
        return Ok(());
    }
    out.push_str("<h2 id=\"prefill\">Prefill</h2>\n<p class=\"note\">Prefill speed = prompt tokens / TTFT of a cold request with max_tokens=1. Warm-prefix rows send the same prompt again: most of it is then served from the prefix cache, so they are not comparable with cold rows (their speed counts only the uncached prompt tokens).</p>\n");
    out.push_str("<table><tr><th>kind</th><th>context</th><th>prompt tokens</th><th>TTFT, s</th><th>tok/s</th><th>cached tokens</th><th>measured by</th><th>status</th></tr>\n");
    for (kind, map) in [("cold", &r.prefill), ("warm prefix", &r.prefill_warm)] {
        for (label, _, row) in by_context(map) {
            let _ = writeln!(
                out,
                "<tr><td>{kind}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td><td>{}</td></tr>",
                esc(&label),
                cells::prefill_tokens_shown(row).map(|t| t.to_string()).unwrap_or_else(|| "-".into()),
                row.ttft_seconds.map(|t| format!("{t:.3}")).unwrap_or_else(|| "-".into()),
                row.tok_per_sec.map(|t| format!("{t:.0}")).unwrap_or_else(|| "-".into()),
                row.cached_tokens.map(|t| t.to_string()).unwrap_or_else(|| "-".into()),
                esc(&cells::prefill_method_words(row.method)),
                esc(&cells::prefill_status_text(row))
            );
        }
    }
    out.push_str("</table>\n");
    let series: Vec<Series> = [
        ("cold", &r.prefill, false),
        ("warm prefix (uncached part)", &r.prefill_warm, true),
    ]
    .into_iter()
    .map(|(name, map, dashed)| Series {
        name: name.into(),
        points: by_context(map)
            .into_iter()
            .filter(|(_, n, row)| n.is_some() && prefill_ok(row))
            .map(|(_, n, row)| (n.unwrap_or(0) as f64, row.tok_per_sec.unwrap_or(0.0)))
            .collect(),
        point_labels: None,
        color: 0,
        dashed,
    })
    .filter(|s| !s.points.is_empty())
    .collect();
    plots(
        out,
        &[Chart {
            title: "Prefill tok/s vs context",
            x_desc: "context, prompt tokens",
            y_desc: "prefill tok/s",
            x_scale: XScale::Linear,
            series,
        }],
    )
}

/// The "Cells not measured" section (always present).
fn html_problems(out: &mut String, r: &Results) {
    let problems: Vec<(&str, &CellResult)> = layers(r)
        .into_iter()
        .flat_map(|l| l.cells.iter().map(move |c| (l.id, c)))
        .filter(|(_, c)| c.status != CellStatus::Ok)
        .collect();
    out.push_str("<h2 id=\"not-measured\">Cells not measured</h2>\n");
    let matrix_cells: usize = layers(r).iter().map(|l| l.cells.len()).sum();
    if problems.is_empty() && matrix_cells == 0 && !r.rate_results.is_empty() {
        out.push_str("<p>No matrix cells: this is an open-loop run. Each rate row's status and reason are in the Open-loop request rate section above.</p>\n");
    } else if problems.is_empty() {
        out.push_str("<p>Every planned cell was measured.</p>\n");
    } else {
        out.push_str("<table><tr><th>layer</th><th>C</th><th>context</th><th>status</th><th>reason</th></tr>\n");
        for (l, c) in problems {
            let _ = writeln!(
                out,
                "<tr><td>{l}</td><td class=\"num\">{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                c.concurrency,
                format_context(c.context_tokens),
                c.status.as_str(),
                esc(&c.status_reason)
            );
        }
        out.push_str("</table>\n");
    }
}

/// The "Warnings" section (always present): server metrics, run-level warnings from the event
/// log and every cell warning.
fn html_warnings(out: &mut String, r: &Results) {
    let m = &r.metadata;
    let mut warnings: Vec<String> = Vec::new();
    if !m.metrics_warning.is_empty() {
        warnings.push(format!("server metrics: {}", m.metrics_warning));
    }
    // Run-level warnings from the event log (`HH:MM:SS startup warning: …`).
    for line in &r.event_log {
        if line.to_lowercase().contains("warning")
            && !warnings.iter().any(|w| line.contains(w.as_str()))
        {
            warnings.push(line.clone());
        }
    }
    for l in layers(r) {
        for c in l.cells {
            for w in &c.warnings {
                warnings.push(format!(
                    "{} C={} ctx={}: {w}",
                    l.id,
                    c.concurrency,
                    format_context(c.context_tokens)
                ));
            }
        }
    }
    out.push_str("<h2 id=\"warnings\">Warnings</h2>\n");
    if warnings.is_empty() {
        out.push_str("<p>None.</p>\n");
    } else {
        out.push_str("<ul>");
        for w in warnings {
            let _ = write!(out, "<li class=\"warn\">{}</li>", esc(&w));
        }
        out.push_str("</ul>\n");
    }
}

/// The "Methodology" section: token sources, each layer's formula and the definitions.
fn html_methodology(out: &mut String, r: &Results) {
    out.push_str("<h2 id=\"methodology\">Methodology</h2>\n");
    let sources: Vec<String> = {
        cells::ok_sources(&r.results)
            .into_iter()
            .map(|s| {
                format!(
                    "<code>{}</code>: {}",
                    esc(s.as_str()),
                    esc(&cells::aggregate_source_words(s))
                )
            })
            .collect()
    };
    if !sources.is_empty() {
        let _ = writeln!(out, "<p>Tokens counted from: {}.</p>", sources.join("; "));
    }
    out.push_str("<table><tr><th>layer</th><th>formula</th><th>notes</th></tr>\n");
    for lm in [
        &r.methodology.sustained_decode,
        &r.methodology.burst_e2e_decode,
        &r.methodology.prefill,
    ] {
        if lm.name.is_empty() && lm.formula.is_empty() {
            continue;
        }
        let _ = writeln!(
            out,
            "<tr><td>{}{}</td><td>{}</td><td>{}</td></tr>",
            esc(&lm.name),
            if lm.present { "" } else { " (not run)" },
            esc(&lm.formula),
            esc(&lm.notes)
        );
    }
    out.push_str("</table>\n<ul class=\"note\">\n\
        <li><b>C</b> (concurrency): requests kept in flight at once.</li>\n\
        <li><b>Aggregate tok/s</b>: output tokens that arrived inside the measured window, over all streams, / window length.</li>\n\
        <li><b>TTFT</b>: time from sending a request to its first output token. <b>ITL</b>: a request's (last − first token time) / (output tokens − 1); per-user tok/s = 1 / ITL.</li>\n\
        <li>Percentiles use NumPy's default (linear) definition over the cell's requests.</li>\n\
        </ul>\n");
}

/// HTML exporter.
pub struct HtmlExporter;

impl Exporter for HtmlExporter {
    fn serialize(&self, results: &Results, opts: &ReportOptions) -> anyhow::Result<Vec<u8>> {
        Ok(render_html(results, opts)?.into_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 19: the steady-state block reached the text report only.
    #[test]
    fn steady_state_blocks_get_a_table() {
        let mut r = Results::default();
        r.burst_results.push(servebench_results::CellResult {
            concurrency: 8,
            context_tokens: 1024,
            benchmark_mode: servebench_results::BenchmarkMode::BurstE2e,
            steady_state: Some(servebench_results::SteadyState {
                target_in_flight: 8,
                min_in_flight: 8,
                duration_s: 0.8,
                fraction: 0.2,
                mean_in_flight: 7.96,
                requests: 12,
                output_tps: Some(412.0),
                ttft_p50: Some(0.05),
                short: true,
                ..Default::default()
            }),
            ..Default::default()
        });
        let mut out = String::new();
        html_steady(&mut out, &r);
        assert!(out.contains("<h2 id=\"steady-state\">"), "{out}");
        assert!(out.contains("<td>[burst] C=8 ctx=1k</td>"), "{out}");
        assert!(
            out.contains(">0.80<") && out.contains(">8 / 8<") && out.contains(">short<"),
            "{out}"
        );
        let mut none = String::new();
        html_steady(&mut none, &Results::default());
        assert!(none.is_empty());
    }

    #[test]
    fn cdf_keeps_ends_and_thins_large_cells() {
        let small = cdf(&[3.0, 1.0, 2.0]);
        let xs: Vec<f64> = small.iter().map(|p| p.0).collect();
        assert_eq!(xs, vec![1.0, 2.0, 3.0]);
        assert!((small[0].1 - 100.0 / 3.0).abs() < 1e-9 && small[2].1 == 100.0);
        let big: Vec<f64> = (0..10_000).map(f64::from).collect();
        let c = cdf(&big);
        assert!(c.len() <= CDF_POINTS + 1, "{}", c.len());
        assert_eq!(c.first(), Some(&(0.0, 0.01)));
        assert_eq!(c.last(), Some(&(9999.0, 100.0)));
    }

    #[test]
    fn escapes_markup() {
        assert_eq!(
            esc("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
    }
}
