//! `GET /api/v1/models` and the model detail payload.

use std::cmp::Ordering;

use axum::response::Response;
use serde_json::{json, Value};

use super::error::ApiError;
use super::query::{eq_ci, eq_ci_or_unknown, matches_terms, natural_cmp, num_at};
use super::recipes::{recipe_link, relations};
use super::{display_name, link, list_response, Ctx};
use crate::collection::Collection;
use crate::snapshot::Snapshot;

/// Query parameters of the models list.
pub const PARAMS: &[&str] = &["q", "family", "architecture", "limit", "offset"];

/// Model positions in list order: `downloads.last_30d` descending (models without it last),
/// then name (numeric collation), then id.
pub fn order(snap: &Snapshot) -> &[usize] {
    snap.cache.model_order.get_or_init(|| {
        let recs = &snap.col(Collection::Model).records;
        let mut o: Vec<usize> = (0..recs.len()).collect();
        o.sort_by(|&a, &b| {
            let (va, vb) = (&recs[a].value, &recs[b].value);
            let da = num_at(va, "/downloads/last_30d");
            let db = num_at(vb, "/downloads/last_30d");
            let d = match (da, db) {
                (Some(x), Some(y)) => y.partial_cmp(&x).unwrap_or(Ordering::Equal),
                (Some(_), None) => Ordering::Less,
                (None, Some(_)) => Ordering::Greater,
                (None, None) => Ordering::Equal,
            };
            d.then_with(|| natural_cmp(display_name(va), display_name(vb)))
                .then_with(|| recs[a].id.cmp(&recs[b].id))
        });
        o
    })
}

/// The model detail `data`: the record plus `relationships {hardware[], model_instances[],
/// recipes[]}` (hardware: the distinct hardware of its recipes).
pub fn detail(snap: &Snapshot, i: usize) -> Value {
    let rec = &snap.col(Collection::Model).records[i];
    let insts = snap.col(Collection::ModelInstance);
    let recipes = snap.col(Collection::Recipe);
    let hw = snap.col(Collection::Hardware);
    let inst_pos = snap
        .instances_by_model
        .get(&rec.id)
        .cloned()
        .unwrap_or_default();
    let rels = relations(snap);
    let mut recipe_pos: Vec<usize> = inst_pos
        .iter()
        .filter_map(|&p| snap.recipes_by_instance.get(&insts.records[p].id))
        .flatten()
        .copied()
        .collect();
    recipe_pos.sort_unstable();
    let mut hw_pos: Vec<usize> = recipe_pos
        .iter()
        .filter_map(|&r| rels[r].hardware)
        .collect();
    hw_pos.sort_unstable();
    hw_pos.dedup();
    let mut v = rec.value.clone();
    if let Value::Object(m) = &mut v {
        m.insert(
            "relationships".into(),
            json!({
                "hardware": hw_pos.iter().map(|&p| {
                    let r = &hw.records[p];
                    link(Collection::Hardware, &r.id, Some(display_name(&r.value)))
                }).collect::<Vec<_>>(),
                "model_instances": inst_pos.iter().map(|&p| {
                    let r = &insts.records[p];
                    link(Collection::ModelInstance, &r.id, Some(display_name(&r.value)))
                }).collect::<Vec<_>>(),
                "recipes": recipe_pos.iter().map(|&p| recipe_link(&recipes.records[p].value)).collect::<Vec<_>>(),
            }),
        );
    }
    v
}

/// `GET /api/v1/models`: filters `q`, `family`, `architecture` (`unknown` = null).
pub fn list(snap: &Snapshot, ctx: &Ctx) -> Result<Response, ApiError> {
    let p = ctx.params(PARAMS)?;
    let terms = p.terms("q")?;
    let recs = &snap.col(Collection::Model).records;
    let matched: Vec<usize> = order(snap)
        .iter()
        .copied()
        .filter(|&i| {
            let r = &recs[i];
            matches_terms(&r.search, &terms)
                && eq_ci(r.value.get("family"), p.get("family"))
                && eq_ci_or_unknown(r.value.get("architecture"), p.get("architecture"))
        })
        .collect();
    Ok(list_response(ctx, p, &matched, |i| {
        super::detail::cached(snap, Collection::Model, i)
    }))
}

#[cfg(test)]
mod tests {
    use crate::http::testutil::{body, ctx, example};

    #[test]
    fn list_snapshot() {
        let s = example();
        insta::assert_snapshot!(body(super::list(&s, &ctx("/api/v1/models"))));
    }
}
