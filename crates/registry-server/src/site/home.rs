//! `/`: search and browse recipes with the registry's filters (trust status, launchability,
//! engine, precision, vendor, VRAM, hardware count, capability states, evidence); each result
//! card expands to the full record.

use axum::http::StatusCode;
use axum::response::Response;
use maud::{html, Markup};
use serde_json::Value;

use super::{html_response, layout, pager, tree};
use crate::collection::{Collection, CollectionExt as _};
use crate::http::error::ApiError;
use crate::http::facets::distinct;
use crate::http::query::{links, str_at, Params};
use crate::http::recipes::{compat_item, detail, filter, PARAMS};
use crate::http::{display_name, Ctx};
use crate::snapshot::Snapshot;

fn select(p: &Params, name: &str, label: &str, options: &[String]) -> Markup {
    let cur = p.get(name).unwrap_or("");
    html! {
        label { (label)
            select name=(name) {
                option value="" { "any" }
                @for o in options { option value=(o) selected[cur.eq_ignore_ascii_case(o)] { (o) } }
            }
        }
    }
}

fn values(snap: &Snapshot, c: Collection, ptr: &str) -> Vec<String> {
    distinct(
        snap.col(c)
            .records
            .iter()
            .filter_map(|r| r.value.pointer(ptr).cloned()),
    )
    .iter()
    .map(|v| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    })
    .collect()
}

/// The filter options of the home page, computed once per snapshot (they scan every recipe,
/// model instance and hardware record).
#[derive(Debug)]
pub struct Options {
    engine: Vec<String>,
    precision: Vec<String>,
    vendor: Vec<String>,
    hardware_count: Vec<String>,
}

/// The snapshot's [`Options`].
pub fn options(snap: &Snapshot) -> &Options {
    snap.cache.home_options.get_or_init(|| Options {
        engine: values(snap, Collection::Recipe, "/engine/name"),
        precision: values(snap, Collection::ModelInstance, "/weights/precision"),
        vendor: values(snap, Collection::Hardware, "/vendor"),
        hardware_count: values(snap, Collection::Recipe, "/hardware_count"),
    })
}

/// The home page.
pub fn page(snap: &Snapshot, ctx: &Ctx) -> Result<Response, ApiError> {
    let p = ctx.params(PARAMS)?;
    let matched = filter(snap, p)?;
    let page = p.page();
    let (next, prev) = links("", "/", p, page, matched.len());
    let tri = ["true".to_string(), "false".into(), "unknown".into()];
    let yn = ["true".to_string(), "false".into()];
    let recs = &snap.col(Collection::Recipe).records;
    let counts = snap.counts();
    let opts = options(snap);
    let body = html! {
        h1 { "Which local-LLM recipe runs on which hardware, with what evidence?" }
        p.muted {
            @for c in Collection::ALL {
                a href={ "/" (c.plural()) } { (counts.get(c.count_key()).cloned().unwrap_or_default()) " " (c.title().to_lowercase()) } " · "
            }
            "snapshot " code { (&snap.hash[..12]) }
        }
        form.filters method="get" action="/" {
            label.wide { "Search (every word must appear in the recipe)"
                input type="search" name="q" value=(p.get("q").unwrap_or("")) placeholder="e.g. sglang glm"; }
            label { "Model (name or repository)" input type="text" name="model" value=(p.get("model").unwrap_or("")); }
            label { "Hardware (name or alias)" input type="text" name="hardware" value=(p.get("hardware").unwrap_or("")); }
            (select(p, "status", "Trust status", &["candidate".into(), "validated".into()]))
            (select(p, "launchable", "Launchable", &yn))
            (select(p, "runtime", "Runtime", &["docker".into(), "native".into(), "reference".into(), "unknown".into()]))
            (select(p, "engine", "Engine", &opts.engine))
            (select(p, "precision", "Precision", &opts.precision))
            (select(p, "vendor", "Vendor", &opts.vendor))
            label { "Min VRAM GB" input type="number" name="min_vram_gb" min="0" step="any" value=(p.get("min_vram_gb").unwrap_or("")); }
            label { "Max VRAM GB" input type="number" name="max_vram_gb" min="0" step="any" value=(p.get("max_vram_gb").unwrap_or("")); }
            (select(p, "hardware_count", "Hardware count", &opts.hardware_count))
            (select(p, "chat", "Chat", &tri))
            (select(p, "reasoning", "Reasoning", &tri))
            (select(p, "tools", "Tools", &tri))
            (select(p, "vision", "Vision", &tri))
            (select(p, "evidence", "Speed evidence", &yn))
            (select(p, "sort_by", "Sort by", &["hardware".into(), "model".into()]))
            div { button type="submit" { "Search" } " " a href="/" { "reset" } }
        }
        p { (matched.len()) " matching recipes. "
            a href={ "/api/v1/recipes" @if let Some(q) = ctx_query(p) { "?" (q) } } { "Same query as JSON" } }
        @for &i in matched.iter().skip(page.offset).take(page.limit) {
            @let item = compat_item(snap, i);
            @let id = &recs[i].id;
            @let model = item.get("model").filter(|m| m.is_object()).map(display_name).unwrap_or("unknown model");
            @let hw = item.get("hardware").filter(|m| m.is_object()).map(display_name).unwrap_or("unknown hardware");
            @let launchable = item.get("launchable") == Some(&Value::Bool(true));
            div.card {
                h3 { a href={ "/recipes/" (id) } { (model) " on " (hw) } }
                p {
                    span.badge { (str_at(&item, "/recipe/engine/name").unwrap_or("unknown engine")) }
                    span.badge { "×" (item.pointer("/recipe/hardware_count").map(|v| v.to_string()).unwrap_or("?".into())) }
                    span.badge { (str_at(&item, "/recipe/status").unwrap_or("unknown status")) }
                    span.badge.ok[launchable].no[!launchable] { @if launchable { "launchable" } @else { "not launchable" } }
                    span.badge { "runtime " (str_at(&item, "/runtime").unwrap_or("unknown")) }
                    span.badge { (item.pointer("/speed_evidence/count").map(|v| v.to_string()).unwrap_or("0".into())) " sweeps" }
                    " " code.muted { (id) }
                }
                details { summary { "Full record" } (tree(&detail(snap, i))) }
            }
        }
        (pager(prev, next))
    };
    Ok(html_response(StatusCode::OK, layout("Search", &[], body)))
}

fn ctx_query(p: &Params) -> Option<String> {
    if p.pairs().is_empty() {
        return None;
    }
    let mut s = form_urlencoded::Serializer::new(String::new());
    for (k, v) in p.pairs() {
        s.append_pair(k, v);
    }
    Some(s.finish())
}
