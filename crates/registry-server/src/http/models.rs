//! `GET /api/v1/models` and the model detail payload.

use std::cmp::Ordering;

use axum::response::Response;
use serde_json::{json, Value};

use super::error::ApiError;
use super::query::{eq_ci_or_unknown, eq_path, natural_cmp, num_at};
use super::{detail_list, display_name, distinct_of_recipes, named_links, recipe_links, Ctx};
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
    let inst_pos = snap
        .instances_by_model
        .get(&rec.id)
        .map_or(&[][..], Vec::as_slice);
    let mut recipe_pos: Vec<usize> = inst_pos
        .iter()
        .filter_map(|&p| snap.recipes_by_instance.get(&insts.records[p].id))
        .flatten()
        .copied()
        .collect();
    recipe_pos.sort_unstable();
    let hw_pos = distinct_of_recipes(snap, &recipe_pos, |r| r.hardware);
    let mut v = rec.value.clone();
    if let Value::Object(m) = &mut v {
        m.insert(
            "relationships".into(),
            json!({
                "hardware": named_links(snap, Collection::Hardware, &hw_pos),
                "model_instances": named_links(snap, Collection::ModelInstance, inst_pos),
                "recipes": recipe_links(snap, &recipe_pos),
            }),
        );
    }
    v
}

/// `GET /api/v1/models`: filters `q`, `family`, `architecture` (`unknown` = null).
pub fn list(snap: &Snapshot, ctx: &Ctx) -> Result<Response, ApiError> {
    let p = ctx.params(PARAMS)?;
    let (family, architecture) = (p.get("family"), p.get("architecture"));
    detail_list(snap, ctx, p, Collection::Model, Some(order(snap)), |r| {
        eq_path(&r.value, &["family"], family)
            && eq_ci_or_unknown(r.value.get("architecture"), architecture)
    })
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
