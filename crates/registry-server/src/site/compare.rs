//! `/compare`: the hardware comparison table (name, VRAM, bandwidth, FP16/FP8/INT8 compute,
//! MSRP, recipe count), sortable by column with links (no JavaScript), filterable by vendor.

use std::cmp::Ordering;

use axum::http::StatusCode;
use axum::response::Response;
use maud::html;
use serde_json::Value;

use super::{fmt_num, html_response, layout};
use crate::collection::Collection;
use crate::http::error::ApiError;
use crate::http::query::{eq_ci, natural_cmp, num_at};
use crate::http::{display_name, Ctx};
use crate::snapshot::Snapshot;

const COLUMNS: [(&str, &str); 8] = [
    ("name", "Name"),
    ("vram", "VRAM GB"),
    ("bandwidth", "Bandwidth GB/s"),
    ("fp16", "FP16 TFLOPS"),
    ("fp8", "FP8 TFLOPS"),
    ("int8", "INT8 TOPS"),
    ("price", "MSRP"),
    ("recipes", "Recipes"),
];

/// A compute figure: the dense value, else the structured-sparsity one (flagged `*`).
fn compute(h: &Value, precision: &str) -> Option<(f64, bool)> {
    let base = format!("/compute/stats/{precision}");
    num_at(h, &format!("{base}/dense/value"))
        .map(|v| (v, false))
        .or_else(|| num_at(h, &format!("{base}/structured_2_4/value")).map(|v| (v, true)))
}

/// Memory bandwidth: a number, or the lower end of a `{min, max}` range (shown as the range).
fn bandwidth(h: &Value) -> (Option<f64>, String) {
    match h.pointer("/memory/bandwidth_gb_per_s") {
        Some(Value::Number(n)) => (n.as_f64(), fmt_num(n.as_f64().unwrap_or(0.0), 0)),
        Some(o @ Value::Object(_)) => {
            let (a, b) = (num_at(o, "/min"), num_at(o, "/max"));
            let show = |x: Option<f64>| x.map_or("?".into(), |x| fmt_num(x, 0));
            (a.or(b), format!("{}–{}", show(a), show(b)))
        }
        _ => (None, String::new()),
    }
}

fn key(snap: &Snapshot, h: &Value, col: &str) -> Option<f64> {
    match col {
        "vram" => num_at(h, "/memory/vram_gb"),
        "bandwidth" => bandwidth(h).0,
        "fp16" | "fp8" | "int8" => compute(h, col).map(|c| c.0),
        "price" => num_at(h, "/commercial/msrp/amount"),
        "recipes" => Some(
            h.get("id")
                .and_then(Value::as_str)
                .and_then(|id| snap.recipes_by_hardware.get(id))
                .map_or(0, Vec::len) as f64,
        ),
        _ => None,
    }
}

/// `/compare?sort=<column>&dir=asc|desc&vendor=<vendor>`; default FP16 descending, nulls last.
pub fn page(snap: &Snapshot, ctx: &Ctx) -> Result<Response, ApiError> {
    let p = ctx.params(&["sort", "dir", "vendor"])?;
    let names: Vec<&str> = COLUMNS.iter().map(|c| c.0).collect();
    let sort = p.choice("sort", &names)?.unwrap_or_else(|| "fp16".into());
    let default_dir = if sort == "name" { "asc" } else { "desc" };
    let dir = p
        .choice("dir", &["asc", "desc"])?
        .unwrap_or_else(|| default_dir.into());
    let vendor = p.get("vendor");
    let recs = &snap.col(Collection::Hardware).records;
    let mut rows: Vec<&Value> = recs
        .iter()
        .map(|r| &r.value)
        .filter(|h| eq_ci(h.get("vendor"), vendor))
        .collect();
    rows.sort_by(|a, b| {
        let o = if sort == "name" {
            natural_cmp(display_name(a), display_name(b))
        } else {
            match (key(snap, a, &sort), key(snap, b, &sort)) {
                (Some(x), Some(y)) => x.partial_cmp(&y).unwrap_or(Ordering::Equal),
                // Nulls last whatever the direction.
                (Some(_), None) => return Ordering::Less,
                (None, Some(_)) => return Ordering::Greater,
                (None, None) => Ordering::Equal,
            }
        };
        let o = if dir == "desc" { o.reverse() } else { o };
        o.then_with(|| natural_cmp(display_name(a), display_name(b)))
    });
    let vendors =
        crate::http::facets::distinct(recs.iter().filter_map(|r| r.value.get("vendor").cloned()));
    let href = |col: &str| {
        let d = if col == sort && dir == "desc" {
            "asc"
        } else if col == sort {
            "desc"
        } else if col == "name" {
            "asc"
        } else {
            "desc"
        };
        let mut s = form_urlencoded::Serializer::new(String::new());
        s.append_pair("sort", col).append_pair("dir", d);
        if let Some(v) = vendor {
            s.append_pair("vendor", v);
        }
        format!("/compare?{}", s.finish())
    };
    let cell = |v: Option<f64>, dp: usize| {
        html! {
            @match v { Some(x) => td.num { (fmt_num(x, dp)) }, None => td.num { span.unknown title="null: not published" { "—" } } }
        }
    };
    let body = html! {
        h1 { "Compare hardware" }
        form.filters method="get" action="/compare" {
            label { "Vendor" select name="vendor" {
                option value="" { "any" }
                @for v in &vendors { @let s = v.as_str().unwrap_or(""); option value=(s) selected[vendor == Some(s)] { (s) } }
            } }
            input type="hidden" name="sort" value=(sort);
            input type="hidden" name="dir" value=(dir);
            div { button type="submit" { "Filter" } }
        }
        p.muted { (rows.len()) " hardware records. Click a column to sort; unknown values sort last. "
            "* = structured-sparsity figure where no dense figure is published." }
        table {
            thead { tr { @for (col, label) in COLUMNS {
                th { a href=(href(col)) { (label) } @if col == sort { @if dir == "desc" { " ▼" } @else { " ▲" } } }
            } } }
            tbody {
                @for h in &rows {
                    @let id = h.get("id").and_then(Value::as_str).unwrap_or("");
                    @let (_, bw) = bandwidth(h);
                    tr {
                        td { a href={ "/hardware/" (id) } { (display_name(h)) } }
                        (cell(num_at(h, "/memory/vram_gb"), 0))
                        @if bw.is_empty() { (cell(None, 0)) } @else { td.num { (bw) } }
                        @for prec in ["fp16", "fp8", "int8"] {
                            @match compute(h, prec) {
                                Some((v, sparse)) => td.num { (fmt_num(v, 1)) @if sparse { "*" } },
                                None => (cell(None, 0)),
                            }
                        }
                        @match (num_at(h, "/commercial/msrp/amount"), h.pointer("/commercial/msrp/currency").and_then(Value::as_str)) {
                            (Some(a), c) => td.num { (fmt_num(a, 0)) " " (c.unwrap_or("")) },
                            (None, _) => (cell(None, 0)),
                        }
                        (cell(key(snap, h, "recipes"), 0))
                    }
                }
            }
        }
    };
    Ok(html_response(
        StatusCode::OK,
        layout(
            "Compare hardware",
            &[
                ("Home".into(), Some("/".into())),
                ("Compare hardware".into(), None),
            ],
            body,
        ),
    ))
}
