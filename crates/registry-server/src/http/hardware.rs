//! `GET /api/v1/hardware` and the hardware detail payload.

use axum::response::Response;
use serde_json::{json, Value};

use super::error::ApiError;
use super::query::{eq_ci, in_range, matches_terms, num_at};
use super::recipes::{recipe_link, relations};
use super::{display_name, link, list_response, Ctx};
use crate::collection::Collection;
use crate::snapshot::Snapshot;

/// Query parameters of the hardware list.
pub const PARAMS: &[&str] = &[
    "q",
    "vendor",
    "backend",
    "kind",
    "family",
    "min_vram_gb",
    "max_vram_gb",
    "priced_only",
    "has_recipes",
    "limit",
    "offset",
];

/// True when the record states a price: a non-empty `commercial.prices`, or an `amount` in
/// `commercial.msrp`, `current_street_price`, `exact_configuration_price` or
/// `current_system_price`. (The price collection itself is not served.)
pub fn priced(h: &Value) -> bool {
    let c = h.get("commercial");
    c.and_then(|c| c.get("prices"))
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty())
        || [
            "msrp",
            "current_street_price",
            "exact_configuration_price",
            "current_system_price",
        ]
        .iter()
        .any(|k| {
            c.and_then(|c| c.get(*k))
                .and_then(|p| p.get("amount"))
                .and_then(Value::as_f64)
                .is_some()
        })
}

/// The detail `data`: the record plus `recipe_count` and `relationships {models[],
/// recipes[]}` (models: the distinct models of its recipes).
pub fn detail(snap: &Snapshot, i: usize) -> Value {
    let rec = &snap.col(Collection::Hardware).records[i];
    let recipes = snap.col(Collection::Recipe);
    let models = snap.col(Collection::Model);
    let recipe_pos = snap
        .recipes_by_hardware
        .get(&rec.id)
        .cloned()
        .unwrap_or_default();
    let rels = relations(snap);
    let mut model_pos: Vec<usize> = recipe_pos.iter().filter_map(|&r| rels[r].model).collect();
    model_pos.sort_unstable();
    model_pos.dedup();
    let mut v = rec.value.clone();
    if let Value::Object(m) = &mut v {
        m.insert("recipe_count".into(), recipe_pos.len().into());
        m.insert(
            "relationships".into(),
            json!({
                "models": model_pos.iter().map(|&p| {
                    let r = &models.records[p];
                    link(Collection::Model, &r.id, Some(display_name(&r.value)))
                }).collect::<Vec<_>>(),
                "recipes": recipe_pos.iter().map(|&p| recipe_link(&recipes.records[p].value)).collect::<Vec<_>>(),
            }),
        );
    }
    v
}

/// `GET /api/v1/hardware`: filters `q`, `vendor`, `backend` (`accelerator_backend`), `kind`,
/// `family`, `min_vram_gb`/`max_vram_gb` (`memory.vram_gb`, inclusive), `priced_only`
/// (true: only [`priced`] records), `has_recipes` (true|false); index (id) order.
pub fn list(snap: &Snapshot, ctx: &Ctx) -> Result<Response, ApiError> {
    let p = ctx.params(PARAMS)?;
    let terms = p.terms("q")?;
    let priced_only = p.boolean("priced_only")?.unwrap_or(false);
    let has_recipes = p.boolean("has_recipes")?;
    let (min, max) = (p.number("min_vram_gb"), p.number("max_vram_gb"));
    let recs = &snap.col(Collection::Hardware).records;
    let matched: Vec<usize> = (0..recs.len())
        .filter(|&i| {
            let r = &recs[i];
            let v = &r.value;
            matches_terms(&r.search, &terms)
                && eq_ci(v.get("vendor"), p.get("vendor"))
                && eq_ci(v.get("accelerator_backend"), p.get("backend"))
                && eq_ci(v.get("kind"), p.get("kind"))
                && eq_ci(v.get("family"), p.get("family"))
                && in_range(num_at(v, "/memory/vram_gb"), min, max)
                && (!priced_only || priced(v))
                && has_recipes.is_none_or(|h| h == snap.recipes_by_hardware.contains_key(&r.id))
        })
        .collect();
    Ok(list_response(ctx, p, &matched, |i| {
        super::detail::cached(snap, Collection::Hardware, i)
    }))
}

#[cfg(test)]
mod tests {
    use crate::http::testutil::{body, ctx, example};

    #[test]
    fn list_snapshot() {
        let s = example();
        insta::assert_snapshot!(body(super::list(&s, &ctx("/api/v1/hardware"))));
    }
}
