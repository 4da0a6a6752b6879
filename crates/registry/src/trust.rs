//! Trust derivation (§6.4 `scripts/trust.py`, adapted): a recipe is `validated` exactly when
//! [`failures`] is empty, else `candidate`. The status is derived, never typed by hand;
//! `registry validate` refuses a stored status that differs (rule `trust-status`), and
//! `registry trust` rewrites it.
//!
//! Criteria (v1 numbering):
//! 1. `launch.kind` ∈ {docker, docker-compose, script, host}.
//! 2. The model-instance `revision` is exactly 40 lowercase hex.
//! 3. Docker images end in `@sha256:<64hex>`; a compose launch has a digest-pinned container;
//!    a script file path contains `/<40hex>/`; a `host` launch needs engine `flm`, no image, an
//!    integer `container_port`, backend `amd-npu` and a stated max context.
//! 4. **Adapted:** at least one attached sweep is acceptance evidence ([`is_acceptance_evidence`]):
//!    it points back at the recipe, has a non-empty `accepted_at`, at least one `accepted` row,
//!    and a *verifiable* servebench source: `source.tool.name == "servebench"` with a version,
//!    a 64-hex `source.results_sha256`, a `source.run_id` and `source.command`. v1's URL-prefix
//!    rule (`acceptance-run` kind or a `0xSero` repository) is not evidence here: it named no
//!    commit, log hash or host (§7.2.8). Imported observations never count.
//! 5. The lowercased launch JSON contains no forbidden flag ([`FORBIDDEN_FLAGS`]).
//! 6. A docker launch is materialisable: an entrypoint or arguments, integer `host_port` and
//!    `container_port`, `accelerator_backend`, and `serving.max_context_tokens` stated.

use serde_json::Value;

use crate::records::RecipeStatus;
use crate::{Collection, Registry};

/// Flags that disable CUDA graphs or force eager mode (forbidden in trusted launches).
pub const FORBIDDEN_FLAGS: [&str; 3] = [
    "--enforce-eager",
    "disable-cuda-graph",
    "disable-prefill-cuda-graph",
];

/// `true` for exactly 40 lowercase hex digits (a git commit).
pub fn is_hex40(s: &str) -> bool {
    s.len() == 40
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// `true` for exactly 64 lowercase hex digits (a sha256).
pub fn is_hex64(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The digest of an image reference pinned as `…@sha256:<64hex>`.
pub fn image_digest(image: &str) -> Option<&str> {
    let (_, d) = image.rsplit_once("@sha256:")?;
    is_hex64(d).then_some(d)
}

fn str_at<'a>(v: &'a Value, ptr: &str) -> Option<&'a str> {
    v.pointer(ptr)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// Whether a sweep (raw JSON) counts as acceptance evidence for `recipe_id` (criterion 4).
pub fn is_acceptance_evidence(sweep: &Value, recipe_id: &str) -> bool {
    sweep.get("recipe_id").and_then(Value::as_str) == Some(recipe_id)
        && str_at(sweep, "/accepted_at").is_some()
        && str_at(sweep, "/source/tool/name") == Some(crate::publish::TOOL_NAME)
        && str_at(sweep, "/source/tool/version").is_some()
        && str_at(sweep, "/source/results_sha256").is_some_and(is_hex64)
        && str_at(sweep, "/source/run_id").is_some()
        && sweep
            .pointer("/source/command")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty())
        && sweep
            .get("rows")
            .and_then(Value::as_array)
            .is_some_and(|rows| {
                rows.iter().any(|r| {
                    r.get("status")
                        .and_then(Value::as_str)
                        .and_then(crate::RowVerdict::parse)
                        .is_some_and(|v| v.verdict == crate::Verdict::Accepted)
                })
            })
}

/// Reasons why `recipe` (raw JSON) is not `validated`; empty = validated. Reads the recipe's
/// model-instance and attached sweeps from `reg`.
pub fn failures(reg: &Registry, recipe: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let id = recipe.get("id").and_then(Value::as_str).unwrap_or("");
    let launch = recipe.get("launch").cloned().unwrap_or(Value::Null);
    let kind = str_at(&launch, "/kind").unwrap_or("");
    let kind = if kind == "compose" {
        "docker-compose"
    } else {
        kind
    };
    // 1
    if !matches!(kind, "docker" | "docker-compose" | "script" | "host") {
        out.push(format!(
            "launch kind {kind:?} is not runnable (docker, docker-compose, script, host)"
        ));
    }
    // 2
    let instance = recipe
        .get("model_instance_id")
        .and_then(Value::as_str)
        .and_then(|i| reg.get(Collection::ModelInstance, i));
    match instance
        .and_then(|i| i.raw.get("revision"))
        .and_then(Value::as_str)
    {
        Some(r) if is_hex40(r) => {}
        Some(r) => out.push(format!(
            "model-instance revision {r:?} is not a 40-hex commit"
        )),
        None if instance.is_none() => out.push("model-instance does not resolve".into()),
        None => out.push("model-instance revision is not pinned".into()),
    }
    // 3
    let image = str_at(&launch, "/image");
    let max_ctx = recipe
        .pointer("/serving/max_context_tokens")
        .and_then(Value::as_u64)
        .is_some();
    match kind {
        "docker" if image.is_none_or(|i| image_digest(i).is_none()) => {
            out.push("docker image is not pinned by @sha256 digest".into());
        }
        "docker-compose" if str_at(&launch, "/container/state") != Some("digest-pinned") => {
            out.push("compose launch is not digest-pinned".into());
        }
        "script" => {
            let file = str_at(&launch, "/script/file").unwrap_or("");
            if !file.split('/').any(is_hex40) {
                out.push("script file path has no /<40-hex commit>/ segment".into());
            }
        }
        "host" => {
            let engine = str_at(recipe, "/engine/name").unwrap_or("");
            if engine != "flm"
                || image.is_some()
                || !launch
                    .get("container_port")
                    .is_some_and(|p| p.is_i64() || p.is_u64())
                || str_at(&launch, "/accelerator_backend") != Some("amd-npu")
                || !max_ctx
            {
                out.push("host launch needs engine flm, no image, an integer container_port, backend amd-npu and a stated max context".into());
            }
        }
        _ => {}
    }
    // 4
    let sweep_ids: Vec<&str> = recipe
        .get("speed_sweep_ids")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let evidence = sweep_ids.iter().any(|s| {
        reg.get(Collection::SpeedSweep, s)
            .is_some_and(|r| is_acceptance_evidence(&r.raw, id))
    });
    if !evidence {
        out.push("no attached sweep is acceptance evidence (servebench-published, accepted_at, accepted rows, verifiable source)".into());
    }
    // 5
    let text = launch.to_string().to_lowercase();
    for f in FORBIDDEN_FLAGS {
        if text.contains(f) {
            out.push(format!("launch contains the forbidden flag {f:?}"));
        }
    }
    // 6
    if kind == "docker" {
        let int = |k: &str| launch.get(k).is_some_and(|p| p.is_i64() || p.is_u64());
        let has_cmd = str_at(&launch, "/entrypoint").is_some()
            || launch
                .get("arguments")
                .and_then(Value::as_array)
                .is_some_and(|a| !a.is_empty());
        if !(has_cmd
            && int("host_port")
            && int("container_port")
            && str_at(&launch, "/accelerator_backend").is_some()
            && max_ctx)
        {
            out.push("docker launch is not materialisable (entrypoint or arguments, integer host_port and container_port, accelerator_backend, serving.max_context_tokens)".into());
        }
    }
    out
}

/// The derived status of `recipe` (raw JSON).
pub fn derive_status(reg: &Registry, recipe: &Value) -> RecipeStatus {
    if failures(reg, recipe).is_empty() {
        RecipeStatus::Validated
    } else {
        RecipeStatus::Candidate
    }
}

/// One recipe whose stored status differs from the derived one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatusChange {
    /// Recipe id.
    pub recipe_id: String,
    /// Stored status text (may be invalid).
    pub stored: String,
    /// Derived status.
    pub derived: RecipeStatus,
    /// The failures behind a `candidate` derivation.
    pub failures: Vec<String>,
}

/// Every recipe whose stored status differs from its derivation.
pub fn status_changes(reg: &Registry) -> Vec<StatusChange> {
    reg.records(Collection::Recipe)
        .filter_map(|r| {
            let f = failures(reg, &r.raw);
            let derived = if f.is_empty() {
                RecipeStatus::Validated
            } else {
                RecipeStatus::Candidate
            };
            let stored = r.raw.get("status").and_then(Value::as_str).unwrap_or("");
            (stored != derived.as_str()).then(|| StatusChange {
                recipe_id: r.id.clone(),
                stored: stored.to_string(),
                derived,
                failures: f,
            })
        })
        .collect()
}

/// What [`apply`] did: the recipes it rewrote, and those it left alone because their id breaks
/// the recipe grammar (a file placed by hand, `recipe/Evil Id.json`: no safe path can be built
/// for it, and `registry validate` reports it) — one such file never blocks the others.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TrustApplied {
    /// Recipes whose status was rewritten.
    pub rewritten: Vec<StatusChange>,
    /// Recipes whose status differs but were not rewritten, with the one-line reason.
    pub refused: Vec<(StatusChange, String)>,
}

/// Recomputes every recipe status in `reg` and writes the recipes that changed (canonical),
/// through [`crate::write::commit`]: all of them or none. A recipe whose id breaks its grammar
/// is not rewritten and is listed in [`TrustApplied::refused`].
///
/// Errors: a recipe directory out of the registry, a rewritten recipe with a new problem, or a
/// file that cannot be written ([`crate::WriteError`]); then no file changed.
pub fn apply(reg: &mut Registry) -> Result<TrustApplied, crate::WriteError> {
    let before = crate::validate::validate(reg);
    let mut out = TrustApplied::default();
    let mut writes = Vec::new();
    for c in status_changes(reg) {
        if let Err(e) = crate::write::check_id(Collection::Recipe, &c.recipe_id) {
            out.refused.push((c, e.to_string()));
            continue;
        }
        let mut raw = reg
            .get(Collection::Recipe, &c.recipe_id)
            .expect("listed above")
            .raw
            .clone();
        raw["status"] = Value::String(c.derived.as_str().into());
        reg.insert(Collection::Recipe, raw)
            .expect("a loaded record has a string id");
        writes.push((Collection::Recipe, c.recipe_id.clone()));
        out.rewritten.push(c);
    }
    crate::write::commit(reg, &before, &writes, &[])?;
    Ok(out)
}
