//! `/overlay?a=<sweep>&b=<sweep>`: two speed sweeps on the same charts (A solid, B dashed),
//! with both Measured speed tables.

use axum::http::StatusCode;
use axum::response::Response;
use maud::html;
use serde_json::Value;

use super::charts::{chart, decode_vs_c, per_user_vs_aggregate, prefill_vs_context, Series};
use super::sheet::{rows, speed_table, SpeedRow};
use super::{html_response, layout};
use crate::collection::{Collection, CollectionExt as _};
use crate::http::error::ApiError;
use crate::http::Ctx;
use crate::snapshot::{Record, Snapshot};

/// Most sweeps offered in the pickers (beyond that, type the id).
const MAX_OPTIONS: usize = 500;

fn pick<'a>(snap: &'a Snapshot, id: Option<&str>) -> Result<Option<&'a Record>, ApiError> {
    let Some(id) = id else { return Ok(None) };
    let c = Collection::SpeedSweep;
    if !c.id_is_valid(id) {
        return Err(ApiError::NotFound(format!(
            "{:?} is not a valid speed-sweep id",
            crate::http::clip(id)
        )));
    }
    snap.get(c, id)
        .map(Some)
        .ok_or_else(|| ApiError::NotFound(format!("no speed-sweep with id {id:?}")))
}

fn renamed(mut s: Vec<Series>, prefix: &str, dashed: bool) -> Vec<Series> {
    for x in &mut s {
        x.name = format!("{prefix}{}", x.name);
        x.dashed = dashed;
    }
    s
}

/// The overlay page.
pub fn page(snap: &Snapshot, ctx: &Ctx) -> Result<Response, ApiError> {
    let p = ctx.params(&["a", "b"])?;
    let a = pick(snap, p.get("a"))?;
    let b = pick(snap, p.get("b"))?;
    let sweeps = &snap.col(Collection::SpeedSweep).records;
    let picker = |name: &str, cur: Option<&Record>| {
        let cur_id = cur.map(|r| r.id.as_str()).unwrap_or("");
        html! {
            label { "Sweep " (name.to_uppercase())
                @if sweeps.len() <= MAX_OPTIONS {
                    select name=(name) {
                        option value="" { "choose…" }
                        @for s in sweeps { option value=(s.id) selected[s.id == cur_id] { (s.id) } }
                    }
                } @else {
                    input type="text" name=(name) value=(cur_id) placeholder="speed-sweep id";
                }
            }
        }
    };
    let body = html! {
        h1 { "Overlay two speed sweeps" }
        form.filters method="get" action="/overlay" {
            (picker("a", a)) (picker("b", b))
            div { button type="submit" { "Overlay" } }
        }
        @match (a, b) {
            (Some(a), Some(b)) => {
                @let ra: Vec<Value> = rows(&a.value).to_vec();
                @let rb: Vec<Value> = rows(&b.value).to_vec();
                @let decode = [renamed(decode_vs_c(&ra, "", false, 0), "A ", false), renamed(decode_vs_c(&rb, "", true, 4), "B ", true)].concat();
                @let users = [renamed(per_user_vs_aggregate(&ra), "A ", false), renamed(per_user_vs_aggregate(&rb), "B ", true)].concat();
                @let prefill = {
                    let mut pb = renamed(prefill_vs_context(&rb), "B ", true);
                    if let Some(s) = pb.first_mut() { s.color = super::charts::PALETTE[5]; }
                    [renamed(prefill_vs_context(&ra), "A ", false), pb].concat()
                };
                p { "A = " a href={ "/speed-sweeps/" (a.id) } { (a.id) } " (solid), B = " a href={ "/speed-sweeps/" (b.id) } { (b.id) } " (dashed)." }
                div.charts {
                    (chart("Decode tok/s (aggregate) vs concurrency, per context", "concurrency C", "decode tok/s", &decode))
                    (chart("Per-user vs aggregate decode tok/s", "concurrency C", "decode tok/s", &users))
                    (chart("Prefill tok/s vs context", "context tokens", "prefill tok/s", &prefill))
                }
                h2 { "A: " (a.id) }
                (speed_table(&rows(&a.value).iter().map(|row| SpeedRow { sweep_id: &a.id, row }).collect::<Vec<_>>(), false))
                h2 { "B: " (b.id) }
                (speed_table(&rows(&b.value).iter().map(|row| SpeedRow { sweep_id: &b.id, row }).collect::<Vec<_>>(), false))
            }
            _ => { p.muted { "Choose two sweeps to overlay their measured speed." } }
        }
    };
    Ok(html_response(
        StatusCode::OK,
        layout(
            "Overlay sweeps",
            &[
                ("Home".into(), Some("/".into())),
                ("Overlay sweeps".into(), None),
            ],
            body,
        ),
    ))
}
