//! `/{collection}/{id}`: the record sheet — breadcrumb, title, JSON API and compatibility
//! links, the Hugging Face link of instances, related records, a Measured speed table and
//! charts for recipes and sweeps, and the whole record (with derived fields) as a data tree.

use axum::http::StatusCode;
use axum::response::Response;
use maud::{html, Markup};
use serde_json::Value;

use super::charts::{
    chart, decode_vs_c, per_user_vs_aggregate, prefill_vs_context, verdict_legend,
};
use super::{html_response, layout, num_cell, tree};
use crate::collection::{Collection, CollectionExt as _};
use crate::http::detail::{data, resolve};
use crate::http::error::ApiError;
use crate::http::query::str_at;
use crate::http::{display_name, Ctx};
use crate::snapshot::Snapshot;
use crate::verdict::Verdict;

/// A measured row with the sweep it came from.
pub struct SpeedRow<'a> {
    pub sweep_id: &'a str,
    pub row: &'a Value,
}

/// The rows of a sweep record.
pub fn rows(sweep: &Value) -> &[Value] {
    sweep
        .get("rows")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// The Measured speed table: C, context, prefill, decode per stream, decode aggregate, TTFT
/// p50, verdict (and the sweep, when `with_sweep`).
pub fn speed_table(rows: &[SpeedRow<'_>], with_sweep: bool) -> Markup {
    html! {
        table.speed {
            thead { tr {
                th { "C" } th { "context tokens" } th { "prefill tok/s" }
                th { "decode tok/s per stream" } th { "decode tok/s aggregate" } th { "TTFT p50 ms" }
                th { "verdict" } @if with_sweep { th { "sweep" } }
            } }
            tbody {
                @for r in rows {
                    @let status = r.row.get("status").and_then(Value::as_str);
                    @let v = Verdict::of(status);
                    tr {
                        (num_cell(r.row.get("concurrency"), 0))
                        (num_cell(r.row.get("context_tokens"), 0))
                        (num_cell(r.row.get("prefill_tok_s"), 1))
                        (num_cell(r.row.get("decode_tok_s_per_stream"), 2))
                        (num_cell(r.row.get("decode_tok_s"), 2))
                        (num_cell(r.row.get("ttft_ms_p50"), 1))
                        td {
                            span.badge style={ "border-color:" (v.color()) } { span.dot style={ "background:" (v.color()) } {} (v.name()) }
                            @if let Some(s) = status { " " span.muted { (s) } } @else { " " span.unknown { "no status" } }
                        }
                        @if with_sweep { td { a href={ "/speed-sweeps/" (r.sweep_id) } { (r.sweep_id) } } }
                    }
                }
            }
        }
    }
}

/// Table and the three charts for `rows`.
pub fn measured_speed(rows: &[SpeedRow<'_>], with_sweep: bool) -> Markup {
    let values: Vec<Value> = rows.iter().map(|r| r.row.clone()).collect();
    html! {
        h2 { "Measured speed" }
        @if rows.is_empty() {
            p.unknown { "No speed sweep is attached: speed is unknown." }
        } @else {
            (speed_table(rows, with_sweep))
            (verdict_legend(&values))
            div.charts {
                (chart("Decode tok/s (aggregate) vs concurrency, per context", "concurrency C", "decode tok/s", &decode_vs_c(&values, "", false, 0)))
                (chart("Per-user vs aggregate decode tok/s", "concurrency C", "decode tok/s", &per_user_vs_aggregate(&values)))
                (chart("Prefill tok/s vs context", "context tokens", "prefill tok/s", &prefill_vs_context(&values)))
            }
        }
    }
}

fn links_list(v: Option<&Value>) -> Markup {
    let items: Vec<&Value> = match v {
        Some(Value::Array(a)) => a.iter().collect(),
        Some(o @ Value::Object(_)) => vec![o],
        _ => vec![],
    };
    html! {
        @if items.is_empty() { span.unknown { "none" } }
        @for (i, l) in items.iter().enumerate() {
            @if i > 0 { ", " }
            @let href = str_at(l, "/href").unwrap_or("#");
            a href=(href) { (str_at(l, "/name").or_else(|| str_at(l, "/id")).unwrap_or("?")) }
        }
    }
}

fn hf_block(rec: &Value) -> Markup {
    let hf = rec.get("huggingface").filter(|h| h.is_object());
    html! {
        p {
            @match hf {
                None => { "Non Hugging Face artifact (no Hugging Face identity recorded)." }
                Some(h) => {
                    @match (str_at(h, "/link_type"), str_at(h, "/url")) {
                        (Some("repository"), Some(u)) => { "Hugging Face: " a href=(u) rel="nofollow noreferrer" { (u) } }
                        (Some("search"), Some(u)) => { "No canonical Hugging Face URL; search: " a href=(u) rel="nofollow noreferrer" { (u) } }
                        _ => { span.unknown { "No canonical Hugging Face URL." } }
                    }
                }
            }
        }
    }
}

/// `/{collection}/{id}` (singular or plural collection name).
pub fn page(snap: &Snapshot, ctx: &Ctx, name: &str, id: &str) -> Result<Response, ApiError> {
    let (c, i) = resolve(snap, name, id)?;
    ctx.no_params()?;
    let rec = &snap.col(c).records[i];
    let d = data(snap, c, i);
    let title = display_name(&rec.value).to_string();
    let compat = match c {
        Collection::Hardware => Some(format!("/?hardware_id={}", rec.id)),
        Collection::Model => Some(format!("/?model_id={}", rec.id)),
        Collection::ModelInstance => Some(format!("/?model_instance_id={}", rec.id)),
        _ => None,
    };
    let rel = d.get("relationships");
    let speed = match c {
        Collection::Recipe => {
            let sweeps = snap.col(Collection::SpeedSweep);
            let positions = crate::http::recipes::relations(snap)[i].sweeps.clone();
            let rows: Vec<SpeedRow> = positions
                .iter()
                .flat_map(|&p| {
                    let s = &sweeps.records[p];
                    rows(&s.value).iter().map(|row| SpeedRow {
                        sweep_id: &s.id,
                        row,
                    })
                })
                .collect();
            Some(measured_speed(&rows, true))
        }
        Collection::SpeedSweep => {
            let rows: Vec<SpeedRow> = rows(&rec.value)
                .iter()
                .map(|row| SpeedRow {
                    sweep_id: &rec.id,
                    row,
                })
                .collect();
            Some(measured_speed(&rows, false))
        }
        _ => None,
    };
    let body = html! {
        h1 { (title) }
        p.links {
            a href={ "/api/v1/" (c.plural()) "/" (rec.id) } { "JSON API" }
            @if let Some(u) = &compat { a href=(u) { "Find compatibility" } }
            @if c == Collection::SpeedSweep {
                a href={ "/overlay?a=" (rec.id) } { "Overlay with another sweep" }
            }
        }
        p.muted { (c.dir()) " · " code { (rec.id) } }
        @if c == Collection::ModelInstance { (hf_block(&rec.value)) }
        @if c == Collection::Recipe {
            p {
                @let launchable = d.pointer("/registry/launchable") == Some(&Value::Bool(true));
                span.badge { "status: " (str_at(&d, "/status").unwrap_or("unknown")) }
                span.badge.ok[launchable].no[!launchable] { @if launchable { "launchable" } @else { "not launchable" } }
                span.badge { "runtime: " (str_at(&d, "/registry/runtime").unwrap_or("unknown")) }
            }
        }
        @if let Some(Value::Object(m)) = rel {
            h2 { "Related" }
            dl.tree { @for (k, v) in m { dt { (k) } dd { (links_list(Some(v))) } } }
        }
        @if let Some(s) = speed { (s) }
        h2 { "Record" }
        (tree(&d))
    };
    Ok(html_response(
        StatusCode::OK,
        layout(
            &title,
            &[
                ("Home".into(), Some("/".into())),
                (c.title().into(), Some(format!("/{}", c.plural()))),
                (title.clone(), None),
            ],
            body,
        ),
    ))
}
