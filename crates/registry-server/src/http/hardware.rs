//! `GET /api/v1/hardware` and the hardware detail payload.

use axum::response::Response;
use serde_json::{json, Value};

use super::error::ApiError;
use super::query::{at_path, eq_path, in_range};
use super::{detail_list, distinct_of_recipes, named_links, recipe_links, Ctx};
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
    let recipe_pos = snap
        .recipes_by_hardware
        .get(&rec.id)
        .map_or(&[][..], Vec::as_slice);
    let model_pos = distinct_of_recipes(snap, recipe_pos, |r| r.model);
    let mut v = rec.value.clone();
    if let Value::Object(m) = &mut v {
        m.insert("recipe_count".into(), recipe_pos.len().into());
        m.insert(
            "relationships".into(),
            json!({
                "models": named_links(snap, Collection::Model, &model_pos),
                "recipes": recipe_links(snap, recipe_pos),
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
    let priced_only = p.boolean("priced_only")?.unwrap_or(false);
    let has_recipes = p.boolean("has_recipes")?;
    let (min, max) = (p.number("min_vram_gb"), p.number("max_vram_gb"));
    let (vendor, backend, kind, family) = (
        p.get("vendor"),
        p.get("backend"),
        p.get("kind"),
        p.get("family"),
    );
    detail_list(snap, ctx, p, Collection::Hardware, None, |r| {
        let v = &r.value;
        eq_path(v, &["vendor"], vendor)
            && eq_path(v, &["accelerator_backend"], backend)
            && eq_path(v, &["kind"], kind)
            && eq_path(v, &["family"], family)
            && ((min.is_none() && max.is_none())
                || in_range(
                    at_path(v, &["memory", "vram_gb"]).and_then(Value::as_f64),
                    min,
                    max,
                ))
            && (!priced_only || priced(v))
            && has_recipes.is_none_or(|h| h == snap.recipes_by_hardware.contains_key(&r.id))
    })
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
