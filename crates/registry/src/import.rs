//! `servebench registry import`: API envelopes (`{data, meta}`, detail or list) and bare
//! records of any collection → canonical files (§6.6).
//!
//! * The collection is recognised from the record's keys (a sweep has `recipe_id` + `rows`, a
//!   recipe `recipe_source` or `launch`, a model-instance `model_id` + `repository`, hardware
//!   `memory` + `accelerator_backend`/`vendor`, a model `params` + `family`).
//! * API-derived fields are dropped: `relationships` everywhere, and a recipe's `registry` /
//!   `huggingface`, a model-instance's `hugging_face_url` / `credits` (§5.1 derived payloads).
//!   Everything else is kept as is (legacy field names normalised), so import → write → read
//!   gives the same content.
//! * A sweep whose recipe is missing gets a drafted `candidate` recipe (reference launch,
//!   unknown facts with reasons, provenance `registry-import`), with the model-instance, model
//!   and hardware stubs it needs; a recipe that exists but does not list the sweep gets it
//!   appended. Imported sweeps are never acceptance evidence (their source is not a
//!   servebench run), so trust keeps drafted recipes `candidate`.

use chrono::{DateTime, Utc};
use serde_json::{json, Map, Value};

use crate::draft::{self, DraftSource, HardwareFacts, RecipeDraft};
use crate::write::{self, WriteError};
use crate::{Collection, Problem, Registry};

/// A file that cannot be imported.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// Not JSON, or not a record.
    #[error("{0}")]
    Bad(String),
    /// Writing failed.
    #[error("cannot write {0}: {1}")]
    Io(String, std::io::Error),
    /// The write was refused (a bad id, a path out of the registry, records that would not
    /// validate) or failed; nothing was written.
    #[error(transparent)]
    Write(#[from] WriteError),
}

/// What one import wrote.
#[derive(Clone, Debug, Default)]
pub struct ImportOutcome {
    /// Imported records `(collection, id)`.
    pub imported: Vec<(Collection, String)>,
    /// Stubs drafted so every link resolves.
    pub drafted: Vec<(Collection, String)>,
    /// Existing records changed (a recipe that now lists an imported sweep).
    pub updated: Vec<(Collection, String)>,
}

/// Recognises the collection of a bare record from its keys.
pub fn detect_collection(v: &Value) -> Option<Collection> {
    let has = |k: &str| v.get(k).is_some();
    if has("recipe_id") && has("rows") {
        Some(Collection::SpeedSweep)
    } else if has("recipe_source") || has("launch") {
        Some(Collection::Recipe)
    } else if has("model_id") && has("repository") {
        Some(Collection::ModelInstance)
    } else if has("memory") && (has("accelerator_backend") || has("vendor")) {
        Some(Collection::Hardware)
    } else if has("params") && has("family") {
        Some(Collection::Model)
    } else {
        None
    }
}

/// The records of a file: an envelope's `data` (object or list) or the bare record(s).
pub fn records_of(v: Value) -> Vec<Value> {
    let data = match v {
        Value::Object(mut m)
            if m.contains_key("data") && (m.contains_key("meta") || m.len() == 1) =>
        {
            m.remove("data").unwrap_or(Value::Null)
        }
        other => other,
    };
    match data {
        Value::Array(a) => a,
        other => vec![other],
    }
}

/// Drops API-derived fields from a record of `c`.
pub fn strip_derived(c: Collection, v: &mut Value) {
    if let Some(m) = v.as_object_mut() {
        m.remove("relationships");
        match c {
            Collection::Recipe => {
                m.remove("registry");
                m.remove("huggingface");
            }
            Collection::ModelInstance => {
                m.remove("hugging_face_url");
                m.remove("credits");
            }
            _ => {}
        }
    }
}

/// Imports the text of one file into `reg` and writes every record it touched, through
/// [`write::commit`] (all or nothing). `origin` names the file in drafted provenance.
///
/// Errors: as [`stage_text`], and [`ImportError::Write`] when the registry-to-be has new
/// problems on the files it touches (a schema-invalid record, a link that does not resolve),
/// or a file cannot be written; then no file changed (the in-memory `reg` may hold the staged
/// records: reload it).
pub fn import_text(
    reg: &mut Registry,
    text: &str,
    origin: &str,
    now: DateTime<Utc>,
) -> Result<ImportOutcome, ImportError> {
    let before = crate::validate::validate(reg);
    let out = stage_text(reg, text, origin, now)?;
    commit(reg, &before, std::slice::from_ref(&out))?;
    Ok(out)
}

/// Writes what [`stage_text`] staged in `reg` for `outcomes` (one per imported file), all files
/// or none ([`write::commit`]), and removes legacy-directory copies of the imported records.
/// `before` is [`crate::validate::validate`] of `reg` before staging.
///
/// Errors: [`ImportError::Write`]; then no file changed.
pub fn commit(
    reg: &Registry,
    before: &[Problem],
    outcomes: &[ImportOutcome],
) -> Result<(), ImportError> {
    let mut all: Vec<(Collection, String)> = Vec::new();
    let mut removals = Vec::new();
    for out in outcomes {
        all.extend(out.imported.iter().cloned());
        all.extend(out.drafted.iter().cloned());
        all.extend(out.updated.iter().cloned());
        // A legacy-directory copy of an imported record would now be a duplicate.
        for (c, id) in &out.imported {
            for d in c.legacy_dir_names() {
                let rel = format!("{d}/{id}.json");
                if crate::is_valid_id(*c, id) && reg.root.join(&rel).is_file() {
                    removals.push(rel);
                }
            }
        }
    }
    write::commit(reg, before, &all, &removals)?;
    Ok(())
}

/// Reads the text of one file into `reg` in memory (nothing is written): every record, the
/// links of imported sweeps, and drafted records for a sweep whose recipe is missing.
///
/// Errors: the text is not JSON, a record's collection cannot be recognised or it has no id,
/// an id (a record's, or a sweep's `recipe_id`, which names the recipe to draft) breaks its
/// grammar ([`ImportError::Write`] with [`WriteError::BadId`]). On error `reg` may hold part
/// of the file.
pub fn stage_text(
    reg: &mut Registry,
    text: &str,
    origin: &str,
    now: DateTime<Utc>,
) -> Result<ImportOutcome, ImportError> {
    let v: Value = serde_json::from_str(text)
        .map_err(|e| ImportError::Bad(format!("{origin}: not JSON ({e})")))?;
    if let Some(at) = servebench_results::check::duplicate_keys(text).first() {
        return Err(ImportError::Bad(format!(
            "{origin}: the key at {at} appears more than once in its object (readers disagree on which one counts); nothing was written"
        )));
    }
    let sha = crate::publish::sha256_hex(text.as_bytes());
    let src = DraftSource {
        kind: "registry-import".into(),
        url: format!("urn:servebench:import:sha256:{sha}"),
        captured_at: draft::rfc3339(now),
    };
    let mut out = ImportOutcome::default();
    let records = records_of(v);
    if records.is_empty() {
        return Err(ImportError::Bad(format!("{origin}: no records")));
    }
    for mut rec in records {
        let c = detect_collection(&rec).ok_or_else(|| {
            ImportError::Bad(format!(
                "{origin}: cannot tell which collection a record belongs to (no recipe_id+rows, recipe_source/launch, model_id+repository, memory+vendor, params+family)"
            ))
        })?;
        strip_derived(c, &mut rec);
        let id = rec
            .get("id")
            .and_then(Value::as_str)
            .ok_or_else(|| ImportError::Bad(format!("{origin}: a {c} record has no string id")))?
            .to_string();
        write::check_id(c, &id)?;
        if c == Collection::SpeedSweep {
            if let Some(rid) = rec.get("recipe_id").and_then(Value::as_str) {
                write::check_id(Collection::Recipe, rid)?;
            }
        }
        reg.insert(c, rec).map_err(ImportError::Bad)?;
        out.imported.push((c, id));
    }
    // Links of imported sweeps.
    for (c, id) in out.imported.clone() {
        if c != Collection::SpeedSweep {
            continue;
        }
        let sweep = reg.get(c, &id).expect("inserted").raw.clone();
        let Some(rid) = sweep
            .get("recipe_id")
            .and_then(Value::as_str)
            .map(str::to_string)
        else {
            continue;
        };
        match reg.get(Collection::Recipe, &rid).map(|r| r.raw.clone()) {
            Some(mut recipe) => {
                let ids = recipe
                    .as_object_mut()
                    .ok_or_else(|| ImportError::Bad(format!("recipe {rid} is not an object")))?
                    .entry("speed_sweep_ids")
                    .or_insert_with(|| json!([]));
                if let Some(a) = ids.as_array_mut() {
                    if !a.iter().any(|x| x.as_str() == Some(id.as_str())) {
                        a.push(json!(id));
                        reg.insert(Collection::Recipe, recipe)
                            .map_err(ImportError::Bad)?;
                        if !out.imported.contains(&(Collection::Recipe, rid.clone())) {
                            out.updated.push((Collection::Recipe, rid.clone()));
                        }
                    }
                }
            }
            None => draft_for_sweep(reg, &src, &sweep, &rid, &id, &mut out)?,
        }
    }
    Ok(out)
}

fn draft_for_sweep(
    reg: &mut Registry,
    src: &DraftSource,
    sweep: &Value,
    rid: &str,
    sweep_id: &str,
    out: &mut ImportOutcome,
) -> Result<(), ImportError> {
    let s = |p: &str| sweep.pointer(p).and_then(Value::as_str);
    // The artifact, when the sweep names one (`source.artifact` = an HF URL).
    let repo = s("/source/artifact")
        .and_then(|u| u.strip_prefix("https://huggingface.co/"))
        .map(|r| r.trim_end_matches('/'))
        .and_then(draft::hf_repository)
        .map(str::to_string);
    let revision = s("/source/artifact_revision")
        .filter(|r| crate::trust::is_hex40(r))
        .map(str::to_string);
    let served = repo
        .clone()
        .unwrap_or_else(|| format!("unknown-model-of-{rid}"));
    let instance_id = match &revision {
        Some(r) => format!("{}--{}", draft::slug(&served), &r[..8]),
        None => draft::instance_id_for(&served),
    };
    let mut ins = |reg: &mut Registry, c: Collection, v: Value| -> Result<(), ImportError> {
        let id = v["id"].as_str().unwrap_or_default().to_string();
        if reg.get(c, &id).is_none() {
            reg.insert(c, v).map_err(ImportError::Bad)?;
            out.drafted.push((c, id));
        }
        Ok(())
    };
    let model_id = draft::model_id_for(&served);
    ins(
        reg,
        Collection::Model,
        draft::model(src, &model_id, &served),
    )?;
    ins(
        reg,
        Collection::ModelInstance,
        draft::instance(
            src,
            &instance_id,
            &model_id,
            &served,
            repo.as_deref(),
            revision.as_deref(),
        ),
    )?;
    let hw = HardwareFacts::default();
    let hardware_id = hw.id();
    ins(
        reg,
        Collection::Hardware,
        draft::hardware(src, &hardware_id, &hw),
    )?;
    let mut meta = Map::new();
    meta.insert("drafted_from".into(), json!("servebench registry import"));
    meta.insert("imported_sweep_id".into(), json!(sweep_id));
    if let Some(img) = s("/source/runtime_image") {
        meta.insert("observed_runtime_image".into(), json!(img));
    }
    let d = RecipeDraft {
        id: rid.to_string(),
        model_instance_id: instance_id,
        hardware_id,
        hardware_count: None,
        engine: None,
        engine_version: s("/metrics/inference_engine_version").map(str::to_string),
        recipe_source: "registry-import".into(),
        reference_url: src.url.clone(),
        metadata: meta,
        description: format!(
            "Candidate drafted by servebench registry import so that imported sweep {sweep_id} resolves; engine, hardware and launch are not known from the sweep."
        ),
        ..Default::default()
    };
    ins(
        reg,
        Collection::Recipe,
        draft::recipe(src, &d, &[sweep_id.to_string()]),
    )?;
    Ok(())
}
