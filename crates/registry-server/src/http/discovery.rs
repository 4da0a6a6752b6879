//! `GET /api/v1`: the discovery document.

use axum::response::Response;
use bytes::Bytes;
use serde_json::json;

use super::error::ApiError;
use super::{json_bytes, Ctx};
use crate::collection::Collection;
use crate::snapshot::Snapshot;

/// `{data: {name, read_only: true, version: "v1", routes: {<route>: "/api/v1/..."}},
/// meta: {counts, source: "registry"}}`. Every advertised route answers (spec §7.2 item 1: the
/// anchor advertised a singular sweep path that 404s and a `recommendations` route with no
/// handler). Detail routes are `<route>/{id}`.
pub fn get(snap: &Snapshot, ctx: &Ctx) -> Result<Response, ApiError> {
    ctx.no_params()?;
    let body = snap.cache.discovery.get_or_init(|| {
        let mut routes = serde_json::Map::new();
        routes.insert("compatibility".into(), "/api/v1/compatibility".into());
        routes.insert("facets".into(), "/api/v1/facets".into());
        routes.insert("index".into(), "/api/v1/index".into());
        for c in Collection::ALL {
            let key = match c {
                Collection::Hardware => "hardware",
                Collection::Model => "models",
                Collection::ModelInstance => "model_instances",
                Collection::Recipe => "recipes",
                Collection::SpeedSweep => "speed_sweeps",
            };
            routes.insert(key.into(), format!("/api/v1/{}", c.plural()).into());
        }
        Bytes::from(
            json!({
                "data": {
                    "name": "Local AI Registry API",
                    "read_only": true,
                    "version": "v1",
                    "routes": routes,
                    "snapshot": snap.hash,
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
    fn discovery_snapshot() {
        let s = example();
        let mut b = body(super::get(&s, &ctx("/api/v1")));
        b = b.replace(&s.hash, "<hash>");
        insta::assert_snapshot!(b);
    }
}
