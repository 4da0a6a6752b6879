//! `GET /api/v1/{collection}/{id}`: the detail envelope of any record, under the singular or
//! the plural collection name.

use axum::response::Response;
use bytes::Bytes;
use serde_json::Value;

use super::error::ApiError;
use super::{clip, detail_envelope, json_bytes, Ctx};
use crate::collection::{Collection, CollectionExt as _};
use crate::snapshot::Snapshot;

/// The detail `data` of record `i` of `c`, derived fields included.
pub fn data(snap: &Snapshot, c: Collection, i: usize) -> Value {
    match c {
        Collection::Hardware => super::hardware::detail(snap, i),
        Collection::Model => super::models::detail(snap, i),
        Collection::ModelInstance => super::model_instances::detail(snap, i),
        Collection::Recipe => super::recipes::detail(snap, i),
        Collection::SpeedSweep => super::speed_sweeps::detail(snap, i),
    }
}

/// [`data`] serialized, computed once per snapshot and record.
pub fn cached(snap: &Snapshot, c: Collection, i: usize) -> Bytes {
    snap.col(c).records[i]
        .detail
        .get_or_init(|| Bytes::from(data(snap, c, i).to_string()))
        .clone()
}

/// Resolves `name`/`id` of a request: the collection by any of its names, the id checked
/// against the collection's grammar before the lookup. Errors are 404 `not_found`.
pub fn resolve(snap: &Snapshot, name: &str, id: &str) -> Result<(Collection, usize), ApiError> {
    let c = Collection::from_path_segment(name)
        .ok_or_else(|| ApiError::NotFound(format!("no collection {:?}", clip(name))))?;
    if !c.id_is_valid(id) {
        return Err(ApiError::NotFound(format!(
            "{:?} is not a valid {} id",
            clip(id),
            c.dir()
        )));
    }
    let i = snap
        .col(c)
        .position(id)
        .ok_or_else(|| ApiError::NotFound(format!("no {} with id {id:?}", c.dir())))?;
    Ok((c, i))
}

/// `{data: <detail>, meta: {source: "registry"}}`.
pub fn get(snap: &Snapshot, ctx: &Ctx, name: &str, id: &str) -> Result<Response, ApiError> {
    let (c, i) = resolve(snap, name, id)?;
    ctx.no_params()?;
    Ok(json_bytes(detail_envelope(&cached(snap, c, i))))
}

#[cfg(test)]
mod tests {
    use crate::http::testutil::{body, ctx, example};

    #[test]
    fn details_snapshot() {
        let s = example();
        for c in crate::collection::Collection::ALL {
            for r in &s.col(c).records {
                let path = format!("/api/v1/{}/{}", c.plural(), r.id);
                let b = body(super::get(&s, &ctx(&path), c.plural(), &r.id));
                insta::assert_snapshot!(format!("{}__{}", c.dir_name(), r.id), b);
            }
        }
    }
}
