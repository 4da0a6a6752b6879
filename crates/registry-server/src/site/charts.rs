//! Inline SVG charts of speed-sweep rows: decode tok/s vs concurrency per context, per-user vs
//! aggregate decode, prefill tok/s vs context. Points are coloured by row verdict.

use std::collections::BTreeMap;

use maud::{html, Markup};
use serde_json::Value;

use super::fmt_num;
use crate::verdict::Verdict;

const W: f64 = 640.0;
const H: f64 = 320.0;
const ML: f64 = 64.0;
const MR: f64 = 16.0;
const MT: f64 = 16.0;
const MB: f64 = 48.0;

/// Line colours of successive series.
pub const PALETTE: [&str; 8] = [
    "#0969da", "#bf3989", "#1a7f37", "#bc4c00", "#8250df", "#0a7f8c", "#6e7781", "#cf222e",
];

/// One plotted point.
#[derive(Debug, Clone)]
pub struct Point {
    pub x: f64,
    pub y: f64,
    /// Row verdict (point fill).
    pub verdict: Verdict,
    /// Tooltip text.
    pub label: String,
}

/// One series: a polyline through its points (sorted by x), in `color`.
#[derive(Debug, Clone)]
pub struct Series {
    pub name: String,
    pub color: &'static str,
    pub dashed: bool,
    pub points: Vec<Point>,
}

/// A row's number at `key`, when finite.
fn num(row: &Value, key: &str) -> Option<f64> {
    row.get(key)
        .and_then(Value::as_f64)
        .filter(|x| x.is_finite())
}

fn point(row: &Value, x: f64, y: f64, what: &str) -> Point {
    let status = row.get("status").and_then(Value::as_str);
    Point {
        x,
        y,
        verdict: Verdict::of(status),
        label: format!(
            "C={} ctx={} {what}={} ({})",
            num(row, "concurrency").map_or("?".into(), |v| fmt_num(v, 0)),
            num(row, "context_tokens").map_or("?".into(), |v| fmt_num(v, 0)),
            fmt_num(y, 2),
            status.unwrap_or("no status")
        ),
    }
}

/// Decode tok/s (aggregate, `decode_tok_s`) vs C, one series per `context_tokens`.
/// `prefix` names the series (overlay: the sweep), `dashed` draws them dashed.
pub fn decode_vs_c(rows: &[Value], prefix: &str, dashed: bool, color_offset: usize) -> Vec<Series> {
    let mut by_ctx: BTreeMap<i64, Vec<Point>> = BTreeMap::new();
    for r in rows {
        if let (Some(c), Some(d)) = (num(r, "concurrency"), num(r, "decode_tok_s")) {
            let ctx = num(r, "context_tokens").map_or(-1, |x| x as i64);
            by_ctx
                .entry(ctx)
                .or_default()
                .push(point(r, c, d, "decode tok/s"));
        }
    }
    by_ctx
        .into_iter()
        .enumerate()
        .map(|(i, (ctx, points))| Series {
            name: format!(
                "{prefix}ctx {}",
                if ctx < 0 {
                    "unknown".into()
                } else {
                    ctx.to_string()
                }
            ),
            color: PALETTE[(i + color_offset) % PALETTE.len()],
            dashed,
            points,
        })
        .collect()
}

/// Per-stream (`decode_tok_s_per_stream`) and aggregate (`decode_tok_s`) decode vs C.
pub fn per_user_vs_aggregate(rows: &[Value]) -> Vec<Series> {
    let mut agg = Vec::new();
    let mut per = Vec::new();
    for r in rows {
        let Some(c) = num(r, "concurrency") else {
            continue;
        };
        if let Some(d) = num(r, "decode_tok_s") {
            agg.push(point(r, c, d, "aggregate tok/s"));
        }
        if let Some(d) = num(r, "decode_tok_s_per_stream") {
            per.push(point(r, c, d, "per-stream tok/s"));
        }
    }
    vec![
        Series {
            name: "aggregate (all streams)".into(),
            color: PALETTE[0],
            dashed: false,
            points: agg,
        },
        Series {
            name: "per stream (one user)".into(),
            color: PALETTE[1],
            dashed: true,
            points: per,
        },
    ]
}

/// Prefill tok/s vs context tokens.
pub fn prefill_vs_context(rows: &[Value]) -> Vec<Series> {
    let points = rows
        .iter()
        .filter_map(|r| {
            Some(point(
                r,
                num(r, "context_tokens")?,
                num(r, "prefill_tok_s")?,
                "prefill tok/s",
            ))
        })
        .collect();
    vec![Series {
        name: "prefill".into(),
        color: PALETTE[3],
        dashed: false,
        points,
    }]
}

/// "Nice" ticks covering 0..=max.
fn linear_ticks(max: f64) -> Vec<f64> {
    if max <= 0.0 {
        return vec![0.0, 1.0];
    }
    let raw = max / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    let n = (max / step).ceil() as usize;
    (0..=n.min(50)).map(|i| i as f64 * step).collect()
}

fn sorted(p: &[Point]) -> Vec<Point> {
    let mut v = p.to_vec();
    v.sort_by(|a, b| a.x.total_cmp(&b.x).then(a.y.total_cmp(&b.y)));
    v
}

/// A chart of `series`; x on a log2 axis when every x is > 0 and they span ≥ 4×.
/// Empty series give a "no measured points" note instead.
pub fn chart(title: &str, x_label: &str, y_label: &str, series: &[Series]) -> Markup {
    let pts: Vec<&Point> = series.iter().flat_map(|s| &s.points).collect();
    if pts.is_empty() {
        return html! { figure { figcaption { (title) } p.unknown { "No measured points for this chart." } } };
    }
    let xmin = pts.iter().map(|p| p.x).fold(f64::INFINITY, f64::min);
    let xmax = pts.iter().map(|p| p.x).fold(f64::NEG_INFINITY, f64::max);
    let ymax = pts.iter().map(|p| p.y).fold(0.0, f64::max);
    let log = xmin > 0.0 && xmax / xmin >= 4.0;
    let (x0, x1, xticks): (f64, f64, Vec<f64>) = if log {
        let (a, b) = (xmin.log2().floor(), xmax.log2().ceil());
        let step = ((b - a) / 10.0).ceil().max(1.0);
        let mut t = Vec::new();
        let mut e = a;
        while e <= b {
            t.push(2f64.powf(e));
            e += step;
        }
        (a, b, t)
    } else {
        let t = linear_ticks(xmax);
        (0.0, *t.last().unwrap_or(&1.0), t)
    };
    let yticks = linear_ticks(ymax);
    let y1 = *yticks.last().unwrap_or(&1.0);
    let span = |a: f64, b: f64| if b > a { b - a } else { 1.0 };
    let sx = |x: f64| {
        let v = if log { x.log2() } else { x };
        ML + (v - x0) / span(x0, x1) * (W - ML - MR)
    };
    let sy = |y: f64| H - MB - y / span(0.0, y1) * (H - MT - MB);
    html! {
        figure {
            svg xmlns="http://www.w3.org/2000/svg" viewBox={ "0 0 " (W) " " (H) } role="img" aria-label=(title) {
                @for t in &yticks {
                    line x1=(ML) x2=(W - MR) y1=(sy(*t)) y2=(sy(*t)) stroke="#eaeef2" {}
                    text x=(ML - 6.0) y=(sy(*t) + 4.0) text-anchor="end" font-size="11" fill="#57606a" { (fmt_num(*t, 1)) }
                }
                @for t in &xticks {
                    line x1=(sx(*t)) x2=(sx(*t)) y1=(MT) y2=(H - MB) stroke="#f3f4f6" {}
                    text x=(sx(*t)) y=(H - MB + 16.0) text-anchor="middle" font-size="11" fill="#57606a" { (fmt_num(*t, 0)) }
                }
                line x1=(ML) x2=(W - MR) y1=(H - MB) y2=(H - MB) stroke="#57606a" {}
                line x1=(ML) x2=(ML) y1=(MT) y2=(H - MB) stroke="#57606a" {}
                text x=((ML + W - MR) / 2.0) y=(H - 10.0) text-anchor="middle" font-size="12" fill="#1f2328" {
                    (x_label) @if log { " (log scale)" }
                }
                text x="14" y=((MT + H - MB) / 2.0) text-anchor="middle" font-size="12" fill="#1f2328"
                    transform={ "rotate(-90 14 " ((MT + H - MB) / 2.0) ")" } { (y_label) }
                @for s in series {
                    @let ps = sorted(&s.points);
                    @if ps.len() > 1 {
                        polyline fill="none" stroke=(s.color) stroke-width="2"
                            stroke-dasharray=(if s.dashed { "6 4" } else { "none" })
                            points=(ps.iter().map(|p| format!("{:.1},{:.1}", sx(p.x), sy(p.y))).collect::<Vec<_>>().join(" ")) {}
                    }
                    @for p in &ps {
                        circle cx=(format!("{:.1}", sx(p.x))) cy=(format!("{:.1}", sy(p.y))) r="4.5"
                            fill=(p.verdict.color()) stroke=(s.color) stroke-width="1.5" {
                            title { (s.name) ": " (p.label) }
                        }
                    }
                }
            }
            figcaption {
                (title) " — "
                span.legend {
                    @for s in series {
                        @if !s.points.is_empty() {
                            span { span.dot style={ "background:" (s.color) } {} (s.name) @if s.dashed { " (dashed)" } }
                        }
                    }
                }
            }
        }
    }
}

/// The verdict colour key of the points in `rows`.
pub fn verdict_legend(rows: &[Value]) -> Markup {
    let mut seen: Vec<Verdict> = Vec::new();
    for r in rows {
        let v = Verdict::of(r.get("status").and_then(Value::as_str));
        if !seen.contains(&v) {
            seen.push(v);
        }
    }
    html! {
        p.legend { "Point colour = row verdict: "
            @for v in seen { span { span.dot style={ "background:" (v.color()) } {} (v.name()) } }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ticks_cover_the_max() {
        let t = linear_ticks(1710.16);
        assert!(*t.last().unwrap() >= 1710.16);
        assert!(t.len() <= 12);
        assert_eq!(linear_ticks(0.0), vec![0.0, 1.0]);
    }

    #[test]
    fn series_group_by_context() {
        let rows = vec![
            json!({"concurrency": 1, "context_tokens": 0, "decode_tok_s": 10.0, "status": "accepted"}),
            json!({"concurrency": 4, "context_tokens": 0, "decode_tok_s": 30.0, "status": "rejected-x"}),
            json!({"concurrency": 1, "context_tokens": 1024, "decode_tok_s": 9.0}),
            json!({"concurrency": 1, "context_tokens": 1024, "decode_tok_s": null}),
        ];
        let s = decode_vs_c(&rows, "", false, 0);
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].points.len(), 2);
        assert_eq!(s[0].points[1].verdict.name(), "rejected");
        let svg = chart("t", "C", "tok/s", &s).into_string();
        assert!(svg.contains("<polyline"));
        assert!(svg.contains("(log scale)"));
        assert!(chart("t", "x", "y", &[])
            .into_string()
            .contains("No measured points"));
    }
}
