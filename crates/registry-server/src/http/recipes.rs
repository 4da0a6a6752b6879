//! `GET /api/v1/recipes` (≡ `/api/v1/compatibility`): compatibility results with the derived
//! `launchable`, `runtime` and `speed_evidence`; the recipe detail payload.

use axum::response::Response;
use bytes::Bytes;
use serde_json::{json, Map, Value};

use super::error::ApiError;
use super::query::{eq_ci, in_range, matches_terms, natural_cmp, str_at, text_matches, value_str};
use super::{display_name, link, list_response, Ctx};
use crate::collection::Collection;
use crate::snapshot::Snapshot;

/// Query parameters of the recipes list (spec §5.1).
pub const PARAMS: &[&str] = &[
    "q",
    "model",
    "hardware",
    "model_id",
    "model_instance_id",
    "hardware_id",
    "status",
    "engine",
    "launch_kind",
    "precision",
    "instance_kind",
    "vendor",
    "backend",
    "hardware_count",
    "min_vram_gb",
    "max_vram_gb",
    "chat",
    "reasoning",
    "tools",
    "vision",
    "evidence",
    "launchable",
    "runtime",
    "sort_by",
    "limit",
    "offset",
];

/// The records a recipe points at, resolved once per snapshot (positions in their collections).
#[derive(Debug, Clone, Default)]
pub struct RecipeRel {
    pub instance: Option<usize>,
    pub model: Option<usize>,
    pub hardware: Option<usize>,
    /// Speed-sweep positions ([`Snapshot::recipe_sweeps`]).
    pub sweeps: Vec<usize>,
    /// `status` lowercased (as [`eq_ci`] compares it), kept beside the relations so the
    /// commonest filters read one small, contiguous row instead of walking the record.
    pub status_lc: Option<Box<str>>,
    /// [`engine_key`] of `engine.name`.
    pub engine_key: Option<Box<str>>,
}

/// Resolved relations of every recipe, by recipe position.
pub fn relations(snap: &Snapshot) -> &[RecipeRel] {
    snap.cache.recipe_rel.get_or_init(|| {
        let inst = snap.col(Collection::ModelInstance);
        let models = snap.col(Collection::Model);
        let hw = snap.col(Collection::Hardware);
        snap.col(Collection::Recipe)
            .records
            .iter()
            .map(|r| {
                let instance =
                    str_at(&r.value, "/model_instance_id").and_then(|i| inst.position(i));
                let model = instance
                    .and_then(|i| str_at(&inst.records[i].value, "/model_id"))
                    .and_then(|m| models.position(m));
                RecipeRel {
                    instance,
                    model,
                    hardware: str_at(&r.value, "/hardware_id").and_then(|h| hw.position(h)),
                    sweeps: snap.recipe_sweeps(&r.value),
                    status_lc: value_str(r.value.get("status")).map(|s| s.to_lowercase().into()),
                    engine_key: str_at(&r.value, "/engine/name").map(|n| engine_key(n).into()),
                }
            })
            .collect()
    })
}

/// `launch.kind` of a recipe.
pub fn launch_kind(recipe: &Value) -> Option<&str> {
    str_at(recipe, "/launch/kind")
}

/// The runtime group of a launch kind: `docker` (docker, docker-compose, compose),
/// `reference`, `native` (script, native, controller, host), or `unknown` for a missing or
/// unrecognised kind (the anchor counted anything unknown as native, spec §7.2 item 2).
pub fn runtime(kind: Option<&str>) -> &'static str {
    match kind {
        Some("docker" | "docker-compose" | "compose") => "docker",
        Some("reference") => "reference",
        Some("script" | "native" | "controller" | "host") => "native",
        _ => "unknown",
    }
}

/// `launchable` = status is `validated` and the launch kind is known and not `reference`.
pub fn launchable(recipe: &Value) -> bool {
    str_at(recipe, "/status") == Some("validated")
        && launch_kind(recipe).is_some_and(|k| k != "reference")
}

/// `{available, count, speed_sweep_ids, detail_urls}` over the recipe's resolved sweeps.
pub fn speed_evidence(snap: &Snapshot, rel: &RecipeRel) -> Value {
    let sweeps = snap.col(Collection::SpeedSweep);
    let ids: Vec<&str> = rel
        .sweeps
        .iter()
        .map(|&i| sweeps.records[i].id.as_str())
        .collect();
    json!({
        "available": !ids.is_empty(),
        "count": ids.len(),
        "detail_urls": ids.iter().map(|id| format!("/api/v1/speed-sweep/{id}")).collect::<Vec<_>>(),
        "speed_sweep_ids": ids,
    })
}

/// A link to a recipe for relationship lists: `{api, href, id, engine, hardware_count, status}`.
pub fn recipe_link(recipe: &Value) -> Value {
    let id = str_at(recipe, "/id").unwrap_or("");
    let mut l = link(Collection::Recipe, id, None);
    if let Value::Object(m) = &mut l {
        m.insert(
            "engine".into(),
            recipe
                .pointer("/engine/name")
                .cloned()
                .unwrap_or(Value::Null),
        );
        m.insert(
            "hardware_count".into(),
            recipe.get("hardware_count").cloned().unwrap_or(Value::Null),
        );
        m.insert(
            "status".into(),
            recipe.get("status").cloned().unwrap_or(Value::Null),
        );
    }
    l
}

fn pick(v: &Value, keys: &[&str]) -> Value {
    let mut m = Map::new();
    for k in keys {
        m.insert((*k).into(), v.get(*k).cloned().unwrap_or(Value::Null));
    }
    Value::Object(m)
}

/// The compatibility result of recipe `i`: `{id, launchable, runtime, model, model_instance,
/// hardware, recipe, speed_evidence, links {api, detail, hardware, model, model_instance}}`.
/// `model`, `model_instance` and `hardware` are short summaries (null when unresolved).
pub fn compat_item(snap: &Snapshot, i: usize) -> Value {
    let r = &snap.col(Collection::Recipe).records[i].value;
    let rel = &relations(snap)[i];
    let model = rel
        .model
        .map(|p| &snap.col(Collection::Model).records[p].value);
    let inst = rel
        .instance
        .map(|p| &snap.col(Collection::ModelInstance).records[p].value);
    let hw = rel
        .hardware
        .map(|p| &snap.col(Collection::Hardware).records[p].value);
    let id = str_at(r, "/id").unwrap_or("");
    let api = |c: Collection, v: Option<&Value>| {
        v.and_then(|v| str_at(v, "/id"))
            .map(|id| Value::from(format!("/api/v1/{}/{id}", c.plural())))
            .unwrap_or(Value::Null)
    };
    let kind = launch_kind(r);
    json!({
        "id": id,
        "launchable": launchable(r),
        "runtime": runtime(kind),
        "model": model.map(|m| pick(m, &["id", "name", "family", "params", "active_params", "architecture"])),
        "model_instance": inst.map(|m| {
            let mut v = pick(m, &["id", "model_id", "repository", "revision", "kind", "served_name"]);
            v["weights"] = m.get("weights").cloned().unwrap_or(Value::Null);
            v
        }),
        "hardware": hw.map(|h| {
            let mut v = pick(h, &["id", "name", "vendor", "kind", "accelerator_backend", "family"]);
            v["vram_gb"] = h.pointer("/memory/vram_gb").cloned().unwrap_or(Value::Null);
            v
        }),
        "recipe": {
            "id": id,
            "status": r.get("status").cloned().unwrap_or(Value::Null),
            "recipe_source": r.get("recipe_source").cloned().unwrap_or(Value::Null),
            "engine": r.get("engine").cloned().unwrap_or(Value::Null),
            "hardware_count": r.get("hardware_count").cloned().unwrap_or(Value::Null),
            "launch_kind": kind,
            "capabilities": r.get("capabilities").cloned().unwrap_or(Value::Null),
            "serving": r.get("serving").cloned().unwrap_or(Value::Null),
        },
        "speed_evidence": speed_evidence(snap, rel),
        "links": {
            "api": format!("/api/v1/recipes/{id}"),
            "detail": format!("/recipes/{id}"),
            "hardware": api(Collection::Hardware, hw),
            "model": api(Collection::Model, model),
            "model_instance": api(Collection::ModelInstance, inst),
        },
    })
}

/// The recipe detail `data`: the record, plus the instance's `huggingface` identity, plus
/// `registry {launchable, runtime, speed_evidence}`, plus `relationships {hardware, model,
/// model_instance, speed_sweep[]}` (links, null when unresolved).
pub fn detail(snap: &Snapshot, i: usize) -> Value {
    let rec = &snap.col(Collection::Recipe).records[i];
    let rel = &relations(snap)[i];
    let mut v = rec.value.clone();
    let inst = rel
        .instance
        .map(|p| &snap.col(Collection::ModelInstance).records[p]);
    let model = rel.model.map(|p| &snap.col(Collection::Model).records[p]);
    let hw = rel
        .hardware
        .map(|p| &snap.col(Collection::Hardware).records[p]);
    let sweeps = snap.col(Collection::SpeedSweep);
    let to_link = |c: Collection, r: Option<&crate::snapshot::Record>| {
        r.map(|r| link(c, &r.id, Some(display_name(&r.value))))
            .unwrap_or(Value::Null)
    };
    if let Value::Object(m) = &mut v {
        m.insert(
            "huggingface".into(),
            inst.and_then(|r| r.value.get("huggingface").cloned())
                .unwrap_or(Value::Null),
        );
        m.insert(
            "registry".into(),
            json!({
                "launchable": launchable(&rec.value),
                "runtime": runtime(launch_kind(&rec.value)),
                "speed_evidence": speed_evidence(snap, rel),
            }),
        );
        m.insert(
            "relationships".into(),
            json!({
                "hardware": to_link(Collection::Hardware, hw),
                "model": to_link(Collection::Model, model),
                "model_instance": to_link(Collection::ModelInstance, inst),
                "speed_sweep": rel.sweeps.iter()
                    .map(|&p| link(Collection::SpeedSweep, &sweeps.records[p].id, None))
                    .collect::<Vec<_>>(),
            }),
        );
    }
    v
}

/// Engine names compared without `.`, `-`, `_` and case (`llama.cpp` = `llama-cpp`).
fn engine_key(s: &str) -> String {
    s.chars()
        .filter(|c| !matches!(c, '.' | '-' | '_'))
        .flat_map(char::to_lowercase)
        .collect()
}

/// An equality filter evaluated lazily: no filter matches without reading the value.
fn eqf<'a>(want: Option<&str>, v: impl FnOnce() -> Option<&'a Value>) -> bool {
    want.is_none() || eq_ci(v(), want)
}

/// Recipe positions in list order: hardware name, model name, engine, id (`sort_by=hardware`,
/// the default) or model name first (`sort_by=model`); names by numeric collation.
pub fn order(snap: &Snapshot, by_model: bool) -> &[usize] {
    let cell = if by_model {
        &snap.cache.recipe_order_model
    } else {
        &snap.cache.recipe_order_hardware
    };
    cell.get_or_init(|| {
        let recs = &snap.col(Collection::Recipe).records;
        let rels = relations(snap);
        let name = |c: Collection, p: Option<usize>| {
            p.map(|p| display_name(&snap.col(c).records[p].value))
                .unwrap_or("")
        };
        let mut o: Vec<usize> = (0..recs.len()).collect();
        o.sort_by(|&a, &b| {
            let (ra, rb) = (&rels[a], &rels[b]);
            let hw = natural_cmp(
                name(Collection::Hardware, ra.hardware),
                name(Collection::Hardware, rb.hardware),
            );
            let md = natural_cmp(
                name(Collection::Model, ra.model),
                name(Collection::Model, rb.model),
            );
            let first = if by_model { md.then(hw) } else { hw.then(md) };
            first
                .then_with(|| {
                    natural_cmp(
                        str_at(&recs[a].value, "/engine/name").unwrap_or(""),
                        str_at(&recs[b].value, "/engine/name").unwrap_or(""),
                    )
                })
                .then_with(|| recs[a].id.cmp(&recs[b].id))
        });
        o
    })
}

/// The recipe positions matching the filters of `p`, in list order. Filter values are read
/// once; the per-recipe test allocates nothing for ASCII data.
pub fn filter<'a>(snap: &'a Snapshot, p: &super::query::Params) -> Result<Vec<usize>, ApiError> {
    let terms = p.terms("q")?;
    let caps: Vec<(&str, super::query::Tri)> = [
        ("chat", p.tri("chat")?),
        ("reasoning", p.tri("reasoning")?),
        ("tools", p.tri("tools")?),
        ("vision", p.tri("vision")?),
    ]
    .into_iter()
    .filter_map(|(k, t)| t.map(|t| (k, t)))
    .collect();
    let evidence = p.boolean("evidence")?;
    let want_launchable = p.boolean("launchable")?;
    let want_runtime = p.choice("runtime", &["docker", "native", "reference", "unknown"])?;
    let by_model = p.choice("sort_by", &["hardware", "model"])?.as_deref() == Some("model");
    let (min_vram, max_vram) = (p.number("min_vram_gb"), p.number("max_vram_gb"));
    let engine = p.get("engine").map(engine_key);
    let status_lc = p.get("status").map(str::to_lowercase);
    let model_text = p.get("model").map(str::to_lowercase);
    let hw_text = p.get("hardware").map(str::to_lowercase);
    let g = |k| p.get(k);
    let (model_id, instance_id, hardware_id) =
        (g("model_id"), g("model_instance_id"), g("hardware_id"));
    let (launch_kind_f, precision, instance_kind, vendor, backend, hardware_count) = (
        g("launch_kind"),
        g("precision"),
        g("instance_kind"),
        g("vendor"),
        g("backend"),
        g("hardware_count"),
    );
    let recs = &snap.col(Collection::Recipe).records;
    let rels = relations(snap);
    let inst_col = snap.col(Collection::ModelInstance);
    let model_col = snap.col(Collection::Model);
    let hw_col = snap.col(Collection::Hardware);
    let matched = order(snap, by_model)
        .iter()
        .copied()
        .filter(|&i| {
            let rec: &'a crate::snapshot::Record = &recs[i];
            let r = &rec.value;
            let rel = &rels[i];
            let inst = rel.instance.map(|x| &inst_col.records[x].value);
            let model = rel.model.map(|x| &model_col.records[x].value);
            let hw = rel.hardware.map(|x| &hw_col.records[x].value);
            let get2 = |v: Option<&'a Value>, a: &str, b: &str| {
                v.and_then(|v| v.get(a)).and_then(|v| v.get(b))
            };
            status_lc
                .as_deref()
                .is_none_or(|w| rel.status_lc.as_deref() == Some(w))
                && eqf(hardware_id, || r.get("hardware_id"))
                && eqf(instance_id, || r.get("model_instance_id"))
                && eqf(model_id, || inst.and_then(|v| v.get("model_id")))
                && engine
                    .as_deref()
                    .is_none_or(|e| rel.engine_key.as_deref() == Some(e))
                && eqf(launch_kind_f, || get2(Some(r), "launch", "kind"))
                && eqf(precision, || get2(inst, "weights", "precision"))
                && eqf(instance_kind, || inst.and_then(|v| v.get("kind")))
                && eqf(vendor, || hw.and_then(|v| v.get("vendor")))
                && eqf(backend, || hw.and_then(|v| v.get("accelerator_backend")))
                && eqf(hardware_count, || r.get("hardware_count"))
                && ((min_vram.is_none() && max_vram.is_none())
                    || in_range(
                        get2(hw, "memory", "vram_gb").and_then(Value::as_f64),
                        min_vram,
                        max_vram,
                    ))
                && caps
                    .iter()
                    .all(|(k, t)| t.matches(r.get("capabilities").and_then(|c| c.get(*k))))
                && evidence.is_none_or(|e| e != rel.sweeps.is_empty())
                && want_launchable.is_none_or(|l| l == launchable(r))
                && want_runtime
                    .as_deref()
                    .is_none_or(|w| w == runtime(launch_kind(r)))
                && (model_text.is_none()
                    || text_matches(
                        model_text.as_deref(),
                        &[
                            model.and_then(|m| str_at(m, "/id")),
                            model.and_then(|m| str_at(m, "/name")),
                            inst.and_then(|m| str_at(m, "/id")),
                            inst.and_then(|m| str_at(m, "/repository")),
                            str_at(r, "/model_instance_id"),
                        ],
                    ))
                && (hw_text.is_none() || {
                    let mut hay = vec![
                        r.get("hardware_id").and_then(Value::as_str),
                        hw.and_then(|h| h.get("name")).and_then(Value::as_str),
                        hw.and_then(|h| h.get("family")).and_then(Value::as_str),
                    ];
                    if let Some(a) = hw.and_then(|h| h.get("aliases")).and_then(Value::as_array) {
                        hay.extend(a.iter().map(Value::as_str));
                    }
                    text_matches(hw_text.as_deref(), &hay)
                })
                && matches_terms(&rec.search, &terms)
        })
        .collect();
    Ok(matched)
}

/// `GET /api/v1/recipes` and `/api/v1/compatibility`.
pub fn list(snap: &Snapshot, ctx: &Ctx) -> Result<Response, ApiError> {
    let p = ctx.params(PARAMS)?;
    let matched = filter(snap, p)?;
    let recs = &snap.col(Collection::Recipe).records;
    Ok(list_response(ctx, p, &matched, |i| {
        recs[i]
            .item
            .get_or_init(|| Bytes::from(compat_item(snap, i).to_string()))
            .clone()
    }))
}

#[cfg(test)]
mod tests {
    use crate::http::testutil::{body, ctx, example};

    #[test]
    fn list_snapshot() {
        let s = example();
        insta::assert_snapshot!(body(super::list(&s, &ctx("/api/v1/recipes"))));
    }

    #[test]
    fn runtime_groups() {
        assert_eq!(super::runtime(Some("docker-compose")), "docker");
        assert_eq!(super::runtime(Some("script")), "native");
        assert_eq!(super::runtime(Some("reference")), "reference");
        assert_eq!(super::runtime(Some("teleport")), "unknown");
        assert_eq!(super::runtime(None), "unknown");
    }
}
