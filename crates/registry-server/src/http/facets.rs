//! `GET /api/v1/facets`: the distinct values of the filterable fields of each collection.

use std::cmp::Ordering;

use axum::response::Response;
use bytes::Bytes;
use serde_json::{json, Map, Value};

use super::error::ApiError;
use super::query::natural_cmp;
use super::recipes::{launch_kind, runtime};
use super::{json_bytes, Ctx};
use crate::collection::Collection;
use crate::snapshot::Snapshot;

/// Distinct non-null primitive values, numbers before strings, numbers by value, strings by
/// numeric collation.
pub fn distinct(values: impl Iterator<Item = Value>) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    for v in values {
        if matches!(v, Value::Null | Value::Array(_) | Value::Object(_)) {
            continue;
        }
        if !out.contains(&v) {
            out.push(v);
        }
    }
    out.sort_by(|a, b| match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x.partial_cmp(&y).unwrap_or(Ordering::Equal),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => natural_cmp(&a.to_string(), &b.to_string()),
    });
    out
}

fn facet(snap: &Snapshot, c: Collection, fields: &[(&str, &str)]) -> Value {
    let recs = &snap.col(c).records;
    let mut m = Map::new();
    for (name, ptr) in fields {
        m.insert(
            (*name).into(),
            distinct(recs.iter().filter_map(|r| r.value.pointer(ptr).cloned())).into(),
        );
    }
    Value::Object(m)
}

/// `{data: {hardware, model_instances, models, recipes}, meta: {counts, source}}`; each
/// collection maps a filter name to its sorted distinct values.
pub fn get(snap: &Snapshot, ctx: &Ctx) -> Result<Response, ApiError> {
    ctx.no_params()?;
    let body = snap.cache.facets.get_or_init(|| {
        let mut recipes = facet(
            snap,
            Collection::Recipe,
            &[
                ("engine", "/engine/name"),
                ("hardware_count", "/hardware_count"),
                ("launch_kind", "/launch/kind"),
                ("status", "/status"),
            ],
        );
        recipes["runtime"] = distinct(
            snap.col(Collection::Recipe)
                .records
                .iter()
                .map(|r| Value::from(runtime(launch_kind(&r.value)))),
        )
        .into();
        Bytes::from(
            json!({
                "data": {
                    "models": facet(snap, Collection::Model, &[("architecture", "/architecture"), ("family", "/family")]),
                    "model_instances": facet(snap, Collection::ModelInstance, &[
                        ("format", "/weights/format"),
                        ("huggingface_link_type", "/huggingface/link_type"),
                        ("huggingface_status", "/huggingface/status"),
                        ("kind", "/kind"),
                        ("precision", "/weights/precision"),
                    ]),
                    "hardware": facet(snap, Collection::Hardware, &[
                        ("backend", "/accelerator_backend"),
                        ("family", "/family"),
                        ("kind", "/kind"),
                        ("vendor", "/vendor"),
                        ("vram_gb", "/memory/vram_gb"),
                    ]),
                    "recipes": recipes,
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
    fn facets_snapshot() {
        let s = example();
        insta::assert_snapshot!(body(super::get(&s, &ctx("/api/v1/facets"))));
    }
}
