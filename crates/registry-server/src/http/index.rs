//! `GET /api/v1/index`: the collections index with the recipe rows merged in.

use axum::response::Response;
use bytes::Bytes;
use serde_json::{json, Map, Value};

use super::error::ApiError;
use super::recipes::{launch_kind, relations};
use super::{json_bytes, Ctx};
use crate::collection::{Collection, CollectionExt as _};
use crate::snapshot::Snapshot;

/// The resolver rule stored in the registry index (spec §2.1).
pub const RESOLVER_RULE: &str = "<field>_id resolves to <field>/<id>.json and <field>_ids to an array of those; underscores in the field name become hyphens in the directory (model_instance_id -> model-instance/)";

/// `{data: {schema_version, resolver_rule, collections {<dir>: sorted ids}, counts,
/// recipes: [row]}, meta: {counts, source}}`; a row is `{id, model_instance_id, hardware_id,
/// hardware_count, engine, status, recipe_source, launch_kind, has_evidence, capabilities}`,
/// with `has_evidence` true when one of the recipe's sweeps resolves (either link field, or a
/// sweep naming the recipe).
pub fn get(snap: &Snapshot, ctx: &Ctx) -> Result<Response, ApiError> {
    ctx.no_params()?;
    let body = snap.cache.index.get_or_init(|| {
        let mut collections = Map::new();
        for c in Collection::ALL {
            collections.insert(
                c.dir().into(),
                snap.col(c)
                    .records
                    .iter()
                    .map(|r| r.id.as_str())
                    .collect::<Vec<_>>()
                    .into(),
            );
        }
        let rels = relations(snap);
        let rows: Vec<Value> = snap
            .col(Collection::Recipe)
            .records
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let v = &r.value;
                let g = |k: &str| v.get(k).cloned().unwrap_or(Value::Null);
                json!({
                    "id": r.id,
                    "model_instance_id": g("model_instance_id"),
                    "hardware_id": g("hardware_id"),
                    "hardware_count": g("hardware_count"),
                    "engine": v.pointer("/engine/name").cloned().unwrap_or(Value::Null),
                    "status": g("status"),
                    "recipe_source": g("recipe_source"),
                    "launch_kind": launch_kind(v),
                    "has_evidence": !rels[i].sweeps.is_empty(),
                    "capabilities": g("capabilities"),
                })
            })
            .collect();
        Bytes::from(
            json!({
                "data": {
                    "schema_version": "local-ai-registry/v1",
                    "resolver_rule": RESOLVER_RULE,
                    "collections": collections,
                    "counts": snap.counts(),
                    "recipes": rows,
                },
                "meta": {"counts": snap.counts(), "source": "registry"},
            })
            .to_string(),
        )
    });
    Ok(json_bytes(body.clone()))
}

#[cfg(test)]
mod tests {
    use crate::http::testutil::{body, ctx, example};

    #[test]
    fn index_snapshot() {
        let s = example();
        insta::assert_snapshot!(body(super::get(&s, &ctx("/api/v1/index"))));
    }
}
