//! Drafted `candidate` records (recipe, model-instance, model, hardware) for evidence whose
//! recipe is not in the registry yet: built only from what the run or the imported record
//! knows. Everything else is `null` with a fact saying it is `unknown` and why — never a guess.
//! A drafted recipe has a `reference` launch (not runnable), so trust keeps it `candidate`.

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{json, Map, Value};

use crate::SCHEMA_VERSION;

/// RFC3339 UTC with `Z`, millisecond precision.
pub fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// Where a draft's knowledge came from: one provenance source.
#[derive(Clone, Debug)]
pub struct DraftSource {
    /// Source kind (`servebench-run`, `registry-import`).
    pub kind: String,
    /// URI (`urn:servebench:run:<run id>`, `file:…`, or the imported record's URL).
    pub url: String,
    /// When the draft was made.
    pub captured_at: String,
}

impl DraftSource {
    /// `{kind, url, captured_at}`.
    pub fn source(&self) -> Value {
        json!({"kind": self.kind, "url": self.url, "captured_at": self.captured_at})
    }

    /// `{sources: [source], captured_at}`.
    pub fn provenance(&self) -> Value {
        json!({"sources": [self.source()], "captured_at": self.captured_at})
    }

    /// A fact with `state` (`unknown`, `known`, …) and an optional reason.
    pub fn fact(&self, state: &str, reason: Option<&str>) -> Value {
        let mut f = json!({"state": state, "provenance": self.provenance()});
        if let Some(r) = reason {
            f["reason"] = json!({"code": "not-captured", "detail": r});
        }
        f
    }
}

/// Lowercase kebab slug: ASCII alphanumerics kept, everything else one `-`.
pub fn slug(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
    }
    let out = out.trim_end_matches('-').to_string();
    if out.is_empty() {
        "unknown".into()
    } else {
        out.chars()
            .take(120)
            .collect::<String>()
            .trim_end_matches('-')
            .to_string()
    }
}

/// `owner/name` when `s` is shaped like a Hugging Face repository.
pub fn hf_repository(s: &str) -> Option<&str> {
    let (o, n) = s.split_once('/')?;
    let ok = |p: &str| !p.is_empty() && !p.contains(char::is_whitespace) && !p.contains('/');
    (ok(o) && ok(n)).then_some(s)
}

fn hf_identity(src: &DraftSource, model: &str) -> Value {
    match hf_repository(model) {
        Some(repo) => json!({
            "repository": repo,
            "url": format!("https://huggingface.co/{repo}"),
            "status": "unknown",
            "link_type": "repository",
            "reason": "drafted from the served model name; not verified with the Hugging Face API",
            "provenance": src.provenance(),
        }),
        None => {
            let q: String = model
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                        c
                    } else {
                        '+'
                    }
                })
                .collect();
            json!({
                "repository": null,
                "url": format!("https://huggingface.co/models?search={q}"),
                "status": "unknown",
                "link_type": "search",
                "reason": "the served model name is not a Hugging Face repository; no repository link is derived",
                "provenance": src.provenance(),
            })
        }
    }
}

/// Model id for a served model name: the repository part, kebab (dots become hyphens).
pub fn model_id_for(model: &str) -> String {
    let name = model.rsplit('/').next().unwrap_or(model);
    slug(name)
}

/// Model-instance id for a served model name: `<owner>-<name>--unpinned` (no revision known).
pub fn instance_id_for(model: &str) -> String {
    format!("{}--unpinned", slug(model))
}

/// A drafted model record for `model` (a served name or HF repository).
pub fn model(src: &DraftSource, id: &str, model: &str) -> Value {
    let unknown = |why: &str| src.fact("unknown", Some(why));
    json!({
        "schema_version": SCHEMA_VERSION,
        "id": id,
        "family": id,
        "name": model,
        "params": null,
        "active_params": null,
        "architecture": null,
        "url": null,
        "huggingface": hf_identity(src, model),
        "provenance": src.provenance(),
        "facts": {
            "family": unknown("the family is not known to the run; the id stands in"),
            "params": unknown("the parameter count is not known to the run"),
            "active_params": unknown("not known to the run"),
            "architecture": unknown("not known to the run"),
        },
    })
}

/// A drafted model-instance record (`revision` given when the source pins one).
pub fn instance(
    src: &DraftSource,
    id: &str,
    model_id: &str,
    served: &str,
    repository: Option<&str>,
    revision: Option<&str>,
) -> Value {
    let unknown = |why: &str| src.fact("unknown", Some(why));
    let repo = repository.or_else(|| hf_repository(served));
    let mut facts = Map::new();
    if repo.is_none() {
        facts.insert(
            "repository".into(),
            unknown("the served model name is not an owner/name repository"),
        );
    }
    if revision.is_none() {
        facts.insert(
            "revision".into(),
            unknown("the served revision is not known"),
        );
    }
    facts.insert(
        "kind".into(),
        unknown("base, quant or fine-tune is not known"),
    );
    facts.insert("weights.format".into(), unknown("not known"));
    facts.insert("weights.precision".into(), unknown("not known"));
    facts.insert("weights.size_gb".into(), unknown("not known"));
    json!({
        "schema_version": SCHEMA_VERSION,
        "id": id,
        "model_id": model_id,
        "repository": repo,
        "revision": revision,
        "served_name": served,
        "weights": {"format": null, "precision": null, "size_gb": null},
        "kind": null,
        "huggingface": hf_identity(src, repo.unwrap_or(served)),
        "provenance": src.provenance(),
        "facts": facts,
    })
}

/// Hardware facts a run may know (from `hardware_run_summary`, read defensively).
#[derive(Clone, Debug, Default)]
pub struct HardwareFacts {
    /// GPU product name (`NVIDIA RTX PRO 6000 Blackwell`), when recorded.
    pub gpu_name: Option<String>,
    /// Devices.
    pub gpu_count: Option<u64>,
    /// Memory per device, GB (MiB / 1024).
    pub vram_gb_per_device: Option<f64>,
    /// Host name of the machine that ran the client.
    pub hostname: Option<String>,
}

impl HardwareFacts {
    /// Vendor guessed from the product name only when it says so (`nvidia`, `amd`/`radeon`,
    /// `intel`/`arc`, `apple`).
    pub fn vendor(&self) -> Option<(&'static str, &'static str)> {
        let n = self.gpu_name.as_deref()?.to_lowercase();
        if n.contains("nvidia") || n.contains("geforce") || n.contains("rtx") || n.contains("tesla")
        {
            Some(("nvidia", "nvidia"))
        } else if n.contains("amd") || n.contains("radeon") || n.contains("instinct") {
            Some(("amd", "amd-rocm"))
        } else if n.contains("intel") {
            Some(("intel", "intel-xpu"))
        } else if n.contains("apple") {
            Some(("apple", "metal"))
        } else {
            None
        }
    }

    /// The hardware id: `<chip>-<memory>gb` when the GPU name and memory are known, else
    /// `unknown-host-<hostname>` (or `unknown-hardware`).
    pub fn id(&self) -> String {
        match (&self.gpu_name, self.vram_gb_per_device) {
            (Some(name), Some(gb)) => {
                let chip = slug(
                    &name
                        .to_lowercase()
                        .replace("nvidia", "")
                        .replace("geforce", "")
                        .replace("amd", ""),
                );
                format!("{chip}-{}gb", gb.round() as u64)
            }
            _ => match self.hostname.as_deref().filter(|h| !h.is_empty()) {
                Some(h) => format!("unknown-host-{}", slug(h)),
                None => "unknown-hardware".into(),
            },
        }
    }
}

/// A drafted hardware record; fields the facts do not give are null with `unknown` facts.
pub fn hardware(src: &DraftSource, id: &str, hw: &HardwareFacts) -> Value {
    let unknown = |why: &str| src.fact("unknown", Some(why));
    let mut facts = Map::new();
    let vendor = hw.vendor();
    if vendor.is_none() {
        facts.insert(
            "vendor".into(),
            unknown("the run recorded no accelerator vendor"),
        );
        facts.insert(
            "accelerator_backend".into(),
            unknown("the run recorded no accelerator backend"),
        );
    }
    facts.insert(
        "kind".into(),
        unknown("discrete, integrated or unified is not recorded"),
    );
    if hw.vram_gb_per_device.is_none() {
        facts.insert(
            "memory.vram_gb".into(),
            unknown("the run recorded no accelerator memory"),
        );
    }
    let name = hw.gpu_name.clone().unwrap_or_else(|| match &hw.hostname {
        Some(h) if !h.is_empty() => format!("Unknown accelerator of host {h}"),
        _ => "Unknown accelerator".into(),
    });
    json!({
        "schema_version": SCHEMA_VERSION,
        "id": id,
        "vendor": vendor.map(|v| v.0),
        "name": name,
        "kind": null,
        "accelerator_backend": vendor.map(|v| v.1),
        "memory": {"vram_gb": hw.vram_gb_per_device, "vram_type": null},
        "sources": [src.source()],
        "provenance": src.provenance(),
        "facts": facts,
    })
}

/// What a drafted recipe knows.
#[derive(Clone, Debug, Default)]
pub struct RecipeDraft {
    /// Recipe id.
    pub id: String,
    /// Model-instance id.
    pub model_instance_id: String,
    /// Hardware id.
    pub hardware_id: String,
    /// Devices, when known.
    pub hardware_count: Option<u64>,
    /// Engine name (`unknown` when not known).
    pub engine: Option<String>,
    /// Engine version.
    pub engine_version: Option<String>,
    /// Serving window, tokens.
    pub max_context_tokens: Option<u64>,
    /// Server concurrency cap.
    pub max_concurrency: Option<u64>,
    /// `recipe_source` (`servebench`, `registry-import`).
    pub recipe_source: String,
    /// Reference URL for the launch (`urn:servebench:run:<id>`).
    pub reference_url: String,
    /// Run id behind the reference.
    pub run_id: Option<String>,
    /// Extra metadata (engine_launch as observed, …) under `metadata.servebench`.
    pub metadata: Map<String, Value>,
    /// Human description.
    pub description: String,
}

/// Normalises engine names to the registry's spelling (`llamacpp` → `llama.cpp`).
pub fn engine_name(e: &str) -> String {
    match e {
        "llamacpp" | "llama-cpp" | "llama_cpp" => "llama.cpp".into(),
        "" => "unknown".into(),
        other => other.to_string(),
    }
}

/// A drafted `candidate` recipe with a `reference` launch.
pub fn recipe(src: &DraftSource, d: &RecipeDraft, sweep_ids: &[String]) -> Value {
    let unknown = |why: &str| src.fact("unknown", Some(why));
    let mut facts = Map::new();
    facts.insert(
        "launch".into(),
        unknown("the exact launch (image, arguments) was not captured; reference only"),
    );
    facts.insert("capabilities".into(), unknown("no acceptance probes ran"));
    facts.insert("engine.graph_mode".into(), unknown("not recorded"));
    if d.hardware_count.is_none() {
        facts.insert(
            "hardware_count".into(),
            unknown("the device count was not recorded; 1 stands in"),
        );
    }
    if d.engine.is_none() {
        facts.insert("engine.name".into(), unknown("the engine was not recorded"));
    }
    if d.engine_version.is_none() {
        facts.insert(
            "engine.version".into(),
            unknown("the engine reported no version"),
        );
    }
    if d.max_context_tokens.is_none() {
        facts.insert(
            "serving.max_context_tokens".into(),
            unknown("the serving window was not reported"),
        );
    }
    let mut serving = Map::new();
    if let Some(c) = d.max_context_tokens {
        serving.insert("max_context_tokens".into(), json!(c));
    }
    if let Some(c) = d.max_concurrency {
        serving.insert("max_concurrency".into(), json!(c));
    }
    let mut launch = json!({
        "kind": "reference",
        "url": d.reference_url,
        "source": src.kind,
        "container": {
            "state": "none", "runtime": null, "image": null, "digest": null,
            "compose_file": null, "source": [src.source()], "captured_at": src.captured_at,
            "reason": "reference-launch-drafted-from-evidence",
        },
    });
    if let Some(r) = &d.run_id {
        launch["run_id"] = json!(r);
    }
    let mut metadata = Map::new();
    if !d.metadata.is_empty() {
        metadata.insert("servebench".into(), Value::Object(d.metadata.clone()));
    }
    json!({
        "schema_version": SCHEMA_VERSION,
        "id": d.id,
        "recipe_source": d.recipe_source,
        "status": "candidate",
        "model_instance_id": d.model_instance_id,
        "hardware_id": d.hardware_id,
        "hardware_count": d.hardware_count.unwrap_or(1),
        "engine": {
            "name": d.engine.as_deref().map(engine_name).unwrap_or_else(|| "unknown".into()),
            "version": d.engine_version,
            "graph_mode": null,
        },
        "launch": launch,
        "serving": serving,
        "capabilities": {"chat": null, "reasoning": null, "tools": null, "vision": null},
        "speed_sweep_ids": sweep_ids,
        "metadata": metadata,
        "provenance": src.provenance(),
        "facts": facts,
        "description": d.description,
    })
}
