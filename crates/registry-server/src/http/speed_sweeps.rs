//! `GET /api/v1/speed-sweeps` and the speed-sweep detail payload (the seed record's shape).

use axum::response::Response;
use serde_json::{Map, Value};

use super::error::ApiError;
use std::collections::HashMap;

use super::query::{str_at, value_str};
use super::{detail_list, link, Ctx};
use crate::collection::Collection;
use crate::snapshot::Snapshot;

/// Query parameters of the speed-sweeps list.
pub const PARAMS: &[&str] = &["q", "recipe_id", "limit", "offset"];

/// The detail `data`: the stored record, plus `metrics.inference_engine_version` copied from
/// the recipe's `engine.version` when the sweep's is missing, empty or `unknown` (as the
/// anchor's `fill_derived_fields` does), plus `relationships.recipe` = `{api, href, id}` of
/// its recipe (null when `recipe_id` does not resolve).
pub fn detail(snap: &Snapshot, i: usize) -> Value {
    let rec = &snap.col(Collection::SpeedSweep).records[i];
    let recipe = str_at(&rec.value, "/recipe_id").and_then(|r| snap.get(Collection::Recipe, r));
    let mut v = rec.value.clone();
    if let Some(metrics) = v.get_mut("metrics").and_then(Value::as_object_mut) {
        let missing = match metrics.get("inference_engine_version") {
            None | Some(Value::Null) => true,
            Some(Value::String(s)) => s.is_empty() || s.eq_ignore_ascii_case("unknown"),
            Some(_) => false,
        };
        let engine_version = recipe
            .and_then(|r| str_at(&r.value, "/engine/version"))
            .filter(|s| !s.is_empty());
        if let (true, Some(ver)) = (missing, engine_version) {
            metrics.insert("inference_engine_version".into(), ver.into());
        }
    }
    if let Value::Object(m) = &mut v {
        let mut rel = Map::new();
        rel.insert(
            "recipe".into(),
            recipe
                .map(|r| link(Collection::Recipe, &r.id, None))
                .unwrap_or(Value::Null),
        );
        m.insert("relationships".into(), Value::Object(rel));
    }
    v
}

/// `GET /api/v1/speed-sweeps`: filters `q`, `recipe_id`; index (id) order. Items are the
/// detail payloads.
pub fn list(snap: &Snapshot, ctx: &Ctx) -> Result<Response, ApiError> {
    let p = ctx.params(PARAMS)?;
    // `recipe_id` (case-insensitive, as every equality filter) through a lowercased index:
    // the candidates are already in index order.
    let candidates = p.get("recipe_id").map(|w| {
        snap.cache
            .sweeps_by_recipe_lc
            .get_or_init(|| {
                let mut m: HashMap<String, Vec<usize>> = HashMap::new();
                for (i, r) in snap.col(Collection::SpeedSweep).records.iter().enumerate() {
                    if let Some(k) = value_str(r.value.get("recipe_id")) {
                        m.entry(k.to_lowercase()).or_default().push(i);
                    }
                }
                m
            })
            .get(&w.to_lowercase())
            .map_or(&[][..], Vec::as_slice)
    });
    detail_list(snap, ctx, p, Collection::SpeedSweep, candidates, |_| true)
}

#[cfg(test)]
mod tests {
    use crate::http::testutil::{body, ctx, example};

    #[test]
    fn list_snapshot() {
        let s = example();
        insta::assert_snapshot!(body(super::list(&s, &ctx("/api/v1/speed-sweeps?limit=1"))));
    }
}
