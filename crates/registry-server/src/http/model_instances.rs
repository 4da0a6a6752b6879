//! `GET /api/v1/model-instances` and the model-instance detail payload.

use axum::response::Response;
use serde_json::{json, Value};

use super::error::ApiError;
use super::query::{eq_path, str_at};
use super::{detail_list, display_name, distinct_of_recipes, link, named_links, recipe_links, Ctx};
use crate::collection::Collection;
use crate::snapshot::Snapshot;

/// Query parameters of the model-instances list.
pub const PARAMS: &[&str] = &[
    "q",
    "model_id",
    "kind",
    "precision",
    "format",
    "huggingface_status",
    "huggingface_link_type",
    "limit",
    "offset",
];

/// A credit identity from a `huggingface` object: `{link_type, publisher (the owner part of
/// the repository), repository, status, url}`; null when there is no identity.
pub fn credit(hf: Option<&Value>) -> Value {
    let Some(hf) = hf.filter(|h| h.is_object()) else {
        return Value::Null;
    };
    let repo = str_at(hf, "/repository");
    json!({
        "link_type": hf.get("link_type").cloned().unwrap_or(Value::Null),
        "publisher": repo.and_then(|r| r.split_once('/')).map(|(o, _)| o),
        "repository": repo,
        "status": hf.get("status").cloned().unwrap_or(Value::Null),
        "url": hf.get("url").cloned().unwrap_or(Value::Null),
    })
}

/// The detail `data`: the record, plus `hugging_face_url` (= `huggingface.url`, null when
/// empty or absent), `credits {artifact, base_model, provenance}` and `relationships
/// {hardware[], model, recipes[]}`.
pub fn detail(snap: &Snapshot, i: usize) -> Value {
    let rec = &snap.col(Collection::ModelInstance).records[i];
    let models = snap.col(Collection::Model);
    let model = str_at(&rec.value, "/model_id").and_then(|m| models.get(m));
    let recipe_pos = snap
        .recipes_by_instance
        .get(&rec.id)
        .map_or(&[][..], Vec::as_slice);
    let hw_pos = distinct_of_recipes(snap, recipe_pos, |r| r.hardware);
    let mut v = rec.value.clone();
    if let Value::Object(m) = &mut v {
        m.insert(
            "hugging_face_url".into(),
            str_at(&rec.value, "/huggingface/url")
                .filter(|u| !u.is_empty())
                .map(Value::from)
                .unwrap_or(Value::Null),
        );
        m.insert(
            "credits".into(),
            json!({
                "artifact": credit(rec.value.get("huggingface")),
                "base_model": credit(model.and_then(|m| m.value.get("huggingface"))),
                "provenance": rec.value.get("provenance").cloned().unwrap_or(Value::Null),
            }),
        );
        m.insert(
            "relationships".into(),
            json!({
                "hardware": named_links(snap, Collection::Hardware, &hw_pos),
                "model": model.map(|r| link(Collection::Model, &r.id, Some(display_name(&r.value)))),
                "recipes": recipe_links(snap, recipe_pos),
            }),
        );
    }
    v
}

/// `GET /api/v1/model-instances`: filters `q`, `model_id`, `kind`, `precision`
/// (`weights.precision`), `format` (`weights.format`), `huggingface_status`,
/// `huggingface_link_type`; index (id) order.
pub fn list(snap: &Snapshot, ctx: &Ctx) -> Result<Response, ApiError> {
    let p = ctx.params(PARAMS)?;
    let filters: [(&[&str], Option<&str>); 6] = [
        (&["model_id"], p.get("model_id")),
        (&["kind"], p.get("kind")),
        (&["weights", "precision"], p.get("precision")),
        (&["weights", "format"], p.get("format")),
        (&["huggingface", "status"], p.get("huggingface_status")),
        (
            &["huggingface", "link_type"],
            p.get("huggingface_link_type"),
        ),
    ];
    let filters: Vec<_> = filters.into_iter().filter(|(_, w)| w.is_some()).collect();
    detail_list(snap, ctx, p, Collection::ModelInstance, None, |r| {
        filters.iter().all(|(path, w)| eq_path(&r.value, path, *w))
    })
}

#[cfg(test)]
mod tests {
    use crate::http::testutil::{body, ctx, example};

    #[test]
    fn list_snapshot() {
        let s = example();
        insta::assert_snapshot!(body(super::list(&s, &ctx("/api/v1/model-instances"))));
    }
}
