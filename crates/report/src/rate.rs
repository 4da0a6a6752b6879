//! Open-loop request-rate rows (`rate_results`, `rate_search`) in the text report, Markdown,
//! HTML and CSV. One table definition ([`columns`]) serves every format; nothing is printed for
//! files without rate rows.

use std::fmt::Write as _;

use servebench_results::{format_context, RateRow, RateSummary, Results};

use crate::html::esc;
use crate::markdown::md_escape;

type Get = fn(&RateRow) -> String;

fn ms(v: Option<f64>) -> String {
    v.map(|s| format!("{:.1}", s * 1e3))
        .unwrap_or_else(|| "-".into())
}

fn p(s: &Option<RateSummary>, f: fn(&RateSummary) -> f64) -> Option<f64> {
    s.as_ref().map(f)
}

fn num(v: Option<f64>, digits: usize) -> String {
    v.map(|x| format!("{x:.digits$}"))
        .unwrap_or_else(|| "-".into())
}

/// The table columns: (header, value as shown). Times in ms, rates in req/s.
pub fn columns() -> Vec<(&'static str, Get)> {
    vec![
        ("ctx", |r| format_context(r.context_tokens)),
        ("rate req/s", |r| format!("{}", r.offered_rate)),
        ("arrival", |r| match (r.arrival.as_str(), r.burstiness) {
            ("gamma", Some(k)) => format!("gamma K={k}"),
            (a, _) => a.to_string(),
        }),
        ("cap", |r| {
            r.max_concurrency
                .map(|c| c.to_string())
                .unwrap_or_else(|| "-".into())
        }),
        ("sent/sched", |r| {
            format!("{}/{}", r.requests_sent, r.requests_scheduled)
        }),
        ("done", |r| r.requests_completed.to_string()),
        ("failed", |r| r.requests_failed.to_string()),
        ("cut", |r| r.requests_cut.to_string()),
        ("not sent", |r| r.requests_not_sent.to_string()),
        ("achieved req/s", |r| num(r.achieved_rate, 2)),
        ("lag p50 ms", |r| ms(r.schedule_lag_p50)),
        ("lag p99 ms", |r| ms(r.schedule_lag_p99)),
        ("TTFT p50 ms", |r| ms(p(&r.ttft, |s| s.p50))),
        ("TTFT p99 ms", |r| ms(p(&r.ttft, |s| s.p99))),
        ("TTFT* p50 ms", |r| ms(p(&r.ttft_from_intended, |s| s.p50))),
        ("TTFT* p99 ms", |r| ms(p(&r.ttft_from_intended, |s| s.p99))),
        ("ITL p50 ms", |r| ms(p(&r.itl, |s| s.p50))),
        ("E2E* p50 ms", |r| ms(p(&r.e2e_from_intended, |s| s.p50))),
        ("E2E* p99 ms", |r| ms(p(&r.e2e_from_intended, |s| s.p99))),
        ("out tok/s", |r| num(r.output_tps, 0)),
        ("goodput req/s", |r| num(r.goodput, 2)),
        ("SLO attain", |r| {
            r.slo_attainment
                .map(|a| format!("{:.0} %", a * 100.0))
                .unwrap_or_else(|| "-".into())
        }),
        ("SLOs p-met", |r| match r.slo_met {
            Some(true) => "yes".into(),
            Some(false) => "no".into(),
            None => "-".into(),
        }),
        ("status", |r| {
            r.status.map(|s| s.as_str()).unwrap_or("ok").to_string()
        }),
    ]
}

/// [`columns`] without the SLO columns when no row was judged against SLOs.
fn shown_columns(r: &Results) -> Vec<(&'static str, Get)> {
    let slo = r.rate_results.iter().any(|x| !x.slo.is_empty());
    columns()
        .into_iter()
        .filter(|(h, _)| slo || !matches!(*h, "goodput req/s" | "SLO attain" | "SLOs p-met"))
        .collect()
}

const NOTE: &str = "TTFT* and E2E* are measured from each request's intended send time (coordinated-omission safe); TTFT from the actual send. lag = sent - intended. goodput = completed requests meeting every SLO per request / row span; SLO attain = their share of scheduled arrivals; SLOs p-met = every SLO's percentile over the row (unsent/failed as +inf) is within its threshold.";

fn search_lines(r: &Results) -> Vec<String> {
    r.rate_search
        .iter()
        .map(|s| {
            format!(
                "rate search ctx={}: best {} req/s, lowest failing {} req/s, {} probes ({}), stopped: {}",
                format_context(s.context_tokens),
                num(s.best_rate, 3),
                num(s.lowest_failing_rate, 3),
                s.probes.len(),
                s.probes
                    .iter()
                    .map(|p| format!("{}{}", trim(p.rate), if p.met { "✓" } else { "✗" }))
                    .collect::<Vec<_>>()
                    .join(" "),
                s.stopped.as_str()
            )
        })
        .collect()
}

fn trim(v: f64) -> String {
    let s = format!("{v:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// One line per row reason and per row warning (`ctx=… rate=…: …`).
fn reasons(r: &Results) -> Vec<String> {
    r.rate_results
        .iter()
        .flat_map(|row| {
            let at = format!(
                "ctx={} rate={}",
                format_context(row.context_tokens),
                row.offered_rate
            );
            let why = row.status_reason.iter().map(move |w| (w, ""));
            let warn = row.warnings.iter().map(|w| (w, "warning: "));
            why.chain(warn)
                .map(|(w, tag)| format!("{at}: {tag}{w}"))
                .collect::<Vec<_>>()
        })
        .collect()
}

fn slo_line(r: &Results) -> Option<String> {
    let row = r.rate_results.iter().find(|x| !x.slo.is_empty())?;
    Some(format!(
        "SLOs: {}",
        row.slo
            .iter()
            .map(|c| format!(
                "{}_p{} <= {} ms",
                c.metric.as_str(),
                c.percentile,
                c.threshold * 1e3
            ))
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

/// The text report's section (aligned columns); empty without rate rows.
pub fn text(r: &Results) -> String {
    if r.rate_results.is_empty() {
        return String::new();
    }
    let cols = shown_columns(r);
    let cells: Vec<Vec<String>> = r
        .rate_results
        .iter()
        .map(|row| cols.iter().map(|(_, f)| f(row)).collect())
        .collect();
    let widths: Vec<usize> = cols
        .iter()
        .enumerate()
        .map(|(i, (h, _))| {
            cells
                .iter()
                .map(|c| c[i].chars().count())
                .chain([h.chars().count()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    let _ = writeln!(out, "Open-loop request rate (one row per offered rate)");
    let line = |vals: Vec<String>| {
        vals.iter()
            .zip(&widths)
            .map(|(v, w)| format!("{v:>w$}"))
            .collect::<Vec<_>>()
            .join("  ")
    };
    let _ = writeln!(
        out,
        "{}",
        line(cols.iter().map(|(h, _)| h.to_string()).collect())
    );
    for c in cells {
        let _ = writeln!(out, "{}", line(c));
    }
    if let Some(s) = slo_line(r) {
        let _ = writeln!(out, "{s}");
    }
    for l in search_lines(r) {
        let _ = writeln!(out, "{l}");
    }
    for l in reasons(r) {
        let _ = writeln!(out, "  {l}");
    }
    let _ = writeln!(out, "{NOTE}");
    out
}

/// The Markdown section; empty without rate rows.
pub fn markdown(r: &Results) -> String {
    if r.rate_results.is_empty() {
        return String::new();
    }
    let cols = shown_columns(r);
    let mut out = String::from("## Open-loop request rate\n\n");
    let _ = writeln!(
        out,
        "| {} |\n|{}|",
        cols.iter().map(|(h, _)| *h).collect::<Vec<_>>().join(" | "),
        cols.iter()
            .enumerate()
            .map(|(i, _)| if i < 3 { "---" } else { "---:" })
            .collect::<Vec<_>>()
            .join("|")
    );
    for row in &r.rate_results {
        let _ = writeln!(
            out,
            "| {} |",
            cols.iter()
                .map(|(_, f)| md_escape(&f(row)))
                .collect::<Vec<_>>()
                .join(" | ")
        );
    }
    out.push('\n');
    for l in slo_line(r)
        .into_iter()
        .chain(search_lines(r))
        .chain(reasons(r))
    {
        let _ = writeln!(out, "- {}", md_escape(&l));
    }
    let _ = writeln!(out, "\n{NOTE}\n");
    out
}

/// The HTML section (`<h2 id="rate">` and a table); empty without rate rows.
pub fn html(r: &Results) -> String {
    if r.rate_results.is_empty() {
        return String::new();
    }
    let cols = shown_columns(r);
    // The table is wider than the page column: it scrolls on its own.
    let mut out = String::from(
        "<h2 id=\"rate\">Open-loop request rate</h2>\n<div style=\"overflow-x:auto\">\n<table>\n<tr>",
    );
    for (h, _) in &cols {
        let _ = write!(out, "<th>{}</th>", esc(h));
    }
    out.push_str("</tr>\n");
    for row in &r.rate_results {
        out.push_str("<tr>");
        for (_, f) in &cols {
            let _ = write!(out, "<td>{}</td>", esc(&f(row)));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n</div>\n");
    let lines: Vec<String> = slo_line(r)
        .into_iter()
        .chain(search_lines(r))
        .chain(reasons(r))
        .collect();
    if !lines.is_empty() {
        out.push_str("<ul>\n");
        for l in lines {
            let _ = writeln!(out, "<li>{}</li>", esc(&l));
        }
        out.push_str("</ul>\n");
    }
    let _ = writeln!(out, "<p class=\"note\">{}</p>", esc(NOTE));
    out
}
