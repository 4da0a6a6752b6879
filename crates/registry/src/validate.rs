//! `servebench registry validate`: the JSON Schemas plus every cross-record rule of §4.1, the
//! trust derivation (§6.4) and unit plausibility (§7.2.5), in one place (§7.2.14).
//!
//! Each problem is `path: rule: message`. Rules (ids as printed):
//!
//! | rule | what |
//! |---|---|
//! | `invalid-json`, `not-an-object`, `id-matches-file`, `duplicate-id` | loading (§4.1) |
//! | `unreadable`, `invalid-utf8`, `not-a-file`, `symlink-outside` | loading: a file that cannot be read, is not UTF-8, is no regular file, or is a symbolic link out of the registry (never followed) |
//! | `schema` | the collection's JSON Schema (`schema/registry/`) |
//! | `typed` | the record does not map onto the typed record (should not happen after `schema`) |
//! | `canonical-format` | the file is not canonically formatted (2-space, sorted keys, newline) |
//! | `id-grammar` | the id breaks its collection's grammar |
//! | `reference-resolves` | a `*_id` / `*_ids` field names a record that does not exist |
//! | `sweep-recipe-link` | a sweep's recipe does not list it, or a listed sweep names another recipe |
//! | `unknown-needs-fact` | a required field is null without an `unknown`/`unavailable` fact |
//! | `timestamp` | `captured_at` not RFC3339 with `Z`; `measured_at`/`accepted_at` not a date or time |
//! | `accepted-after-measured` | `accepted_at` < `measured_at` |
//! | `hf-identity` | repository link URL ≠ `https://huggingface.co/<repository>`; a `known` link without a `huggingface-api` source |
//! | `positive-vram` | `memory.vram_gb` ≤ 0 |
//! | `model-params` | `params` ≤ 0 |
//! | `recipe-source` | localmaxxing/exo-postgres/mlxfast must be candidate reference launches; `omlx` is refused |
//! | `launch-tokens` | `command_snippet` in a launch, a token containing `&&` |
//! | `reference-launch` | a reference launch carries contract fields |
//! | `container` | `launch.container` missing or inconsistent with the launch kind / image |
//! | `validated-launch` | validated-only rules (pinned image, commit-pinned script, no forbidden flag, relative mounts exist, max context stated, sweep ids present) |
//! | `draft-launch` | `draft_launch` on a validated recipe or not digest-pinned |
//! | `trust-status` | stored recipe status ≠ the trust derivation |
//! | `row-status` | a row status outside the verdict grammar, or ≠ its structured `verdict` |
//! | `metrics-rule` | a servebench sweep's `metrics` ≠ the metrics its rows give by its rule |
//! | `plausibility` | TTFT, prefill / decode rates, VRAM or context outside physical bounds |

use std::path::Path;

use serde_json::Value;

use crate::load::{references, Problem};
use crate::records::RecipeStatus;
use crate::schema::Schemas;
use crate::trust::{self, image_digest, is_hex64};
use crate::{is_valid_id, metrics, Collection, Record, Registry, RowVerdict};

/// Physical bounds used by the `plausibility` rule.
pub mod bounds {
    /// Fastest plausible TTFT, ms: below this a value is a unit slip (s stored as ms) or a
    /// wrong proxy (§7.2.5 lists 0.2 ms and 0.83 ms).
    pub const MIN_TTFT_MS: f64 = 1.0;
    /// Slowest plausible TTFT, ms (1 h).
    pub const MAX_TTFT_MS: f64 = 3_600_000.0;
    /// Largest plausible cold prefill rate, tok/s.
    pub const MAX_COLD_PREFILL_TOK_S: f64 = 500_000.0;
    /// Largest plausible prefill rate of any row (warm rows count cached tokens), tok/s.
    pub const MAX_PREFILL_TOK_S: f64 = 1_000_000.0;
    /// Largest plausible aggregate decode rate of one cell, tok/s.
    pub const MAX_DECODE_TOK_S: f64 = 200_000.0;
    /// Largest plausible per-stream decode rate, tok/s.
    pub const MAX_DECODE_TOK_S_PER_STREAM: f64 = 5_000.0;
    /// Aggregate decode may exceed per-stream × C by at most this factor (median vs mean).
    pub const AGGREGATE_OVER_STREAMS: f64 = 1.5;
    /// Peak VRAM may exceed the hardware's `vram_gb` × count by this factor (GB vs GiB).
    pub const VRAM_SLACK: f64 = 1.1;
    /// Peak VRAM of a row without known hardware memory, GB (catches MiB stored as GB).
    pub const MAX_VRAM_GB: f64 = 2_048.0;
    /// Largest plausible context, tokens (§7.2.5 lists 40,960,000).
    pub const MAX_CONTEXT_TOKENS: u64 = 10_000_000;
    /// Slowest plausible latency of any percentile of any family (TTFT tails, ITL, TPOT, E2E,
    /// request latency), ms (1 day: no client waits that long for one request).
    pub const MAX_LATENCY_MS: f64 = 86_400_000.0;
}

/// Row fields that are latencies, by prefix, and their unit in ms (the row builders of
/// `publish` and the seed's rows: `ttft_ms_p90`, `itl_ms_p50`, `tpot_ms_p50`, `e2e_s_p99`,
/// `request_latency_s_p50`, ...).
const LATENCY_FIELDS: [(&str, f64); 14] = [
    ("ttft_ms_", 1.0),
    ("ttft_from_intended_ms_", 1.0),
    ("itl_ms_", 1.0),
    ("tpot_ms_", 1.0),
    ("e2e_ms_", 1.0),
    ("latency_ms_", 1.0),
    ("request_latency_ms_", 1.0),
    ("ttft_s_", 1000.0),
    ("itl_s_", 1000.0),
    ("tpot_s_", 1000.0),
    ("e2e_s_", 1000.0),
    ("latency_s_", 1000.0),
    ("request_latency_s_", 1000.0),
    ("ttst_ms_", 1.0),
];

/// The percentile suffixes whose order is checked (`p50` ≤ `p90` ≤ `p95` ≤ `p99`).
const PERCENTILES: [&str; 4] = ["p50", "p90", "p95", "p99"];

/// Validates a loaded registry. Problems are sorted by path.
pub fn validate(reg: &Registry) -> Vec<Problem> {
    let schemas = Schemas::new();
    let mut out: Vec<Problem> = reg.problems.clone();
    for rec in reg.all() {
        let mut named: Vec<Problem> = Vec::new();
        check_record(reg, rec, &mut named);
        // Schema errors at a pointer a named rule already reported are dropped (one line per
        // problem).
        let covered: Vec<String> = named.iter().map(|p| p.path.clone()).collect();
        let file = rec.rel_path.clone();
        let schema_errors = schemas.check(rec.collection, &rec.raw);
        let schema_ok = schema_errors.is_empty();
        for (ptr, msg) in schema_errors {
            let path = format!("{file}#{ptr}");
            if ptr == "/id" || covered.iter().any(|c| c == &path) {
                continue;
            }
            out.push(Problem::new(path, "schema", msg));
        }
        if schema_ok {
            if let Some(e) = &rec.parse_error {
                out.push(Problem::new(&file, "typed", e.clone()));
            }
        }
        out.extend(named);
    }
    out.sort();
    out.dedup();
    out
}

/// Loads `dir` and validates it. Errors: the directory cannot be read.
pub fn validate_dir(dir: &Path) -> Result<Vec<Problem>, crate::RegistryError> {
    Ok(validate(&Registry::load(dir)?))
}

fn p(rec: &Record, ptr: &str, rule: &str, msg: impl Into<String>) -> Problem {
    let path = if ptr.is_empty() {
        rec.rel_path.clone()
    } else {
        format!("{}#{ptr}", rec.rel_path)
    };
    Problem::new(path, rule, msg)
}

fn s<'a>(v: &'a Value, ptr: &str) -> Option<&'a str> {
    v.pointer(ptr).and_then(Value::as_str)
}

fn check_record(reg: &Registry, rec: &Record, out: &mut Vec<Problem>) {
    let raw = &rec.raw;
    if !rec.canonical {
        out.push(p(
            rec,
            "",
            "canonical-format",
            "not canonically formatted (2-space indent, sorted keys, raw UTF-8, trailing newline); `servebench registry import` rewrites it",
        ));
    }
    if !is_valid_id(rec.collection, &rec.id) {
        out.push(p(
            rec,
            "/id",
            "id-grammar",
            format!(
                "{:?} is not a {} id ({})",
                rec.id,
                rec.collection,
                rec.collection.id_grammar()
            ),
        ));
    }
    for r in references(raw) {
        if reg.get(r.collection, &r.id).is_none() {
            out.push(p(
                rec,
                &r.pointer,
                "reference-resolves",
                format!(
                    "{} {:?} does not exist ({}/{}.json)",
                    r.collection,
                    r.id,
                    r.collection.dir_name(),
                    r.id
                ),
            ));
        }
    }
    check_timestamps(rec, raw, "", out);
    check_unknown_facts(rec, out);
    match rec.collection {
        Collection::Hardware => {
            if let Some(v) = raw.pointer("/memory/vram_gb").and_then(Value::as_f64) {
                if v <= 0.0 {
                    out.push(p(
                        rec,
                        "/memory/vram_gb",
                        "positive-vram",
                        format!("vram_gb {v} must be > 0"),
                    ));
                }
            }
        }
        Collection::Model => {
            if let Some(v) = raw.get("params").and_then(Value::as_f64) {
                if v <= 0.0 {
                    out.push(p(
                        rec,
                        "/params",
                        "model-params",
                        format!("params {v} (billions) must be > 0"),
                    ));
                }
            }
            check_hf(rec, out);
        }
        Collection::ModelInstance => check_hf(rec, out),
        Collection::Recipe => check_recipe(reg, rec, out),
        Collection::SpeedSweep => check_sweep(reg, rec, out),
    }
}

/// (record path, fact keys that may stand for a null) for fields drafts may not know.
fn nullable_with_fact(c: Collection) -> &'static [(&'static str, &'static str)] {
    match c {
        Collection::Hardware => &[
            ("/vendor", "vendor"),
            ("/kind", "kind"),
            ("/accelerator_backend", "accelerator_backend"),
            ("/memory/vram_gb", "memory.vram_gb"),
        ],
        Collection::Model => &[("/params", "params")],
        Collection::ModelInstance => &[("/repository", "repository"), ("/kind", "kind")],
        _ => &[],
    }
}

fn check_unknown_facts(rec: &Record, out: &mut Vec<Problem>) {
    for (ptr, key) in nullable_with_fact(rec.collection) {
        if rec.raw.pointer(ptr).is_some_and(Value::is_null) {
            let state = rec
                .raw
                .get("facts")
                .and_then(|f| f.get(*key))
                .and_then(|f| f.get("state"))
                .and_then(Value::as_str);
            if !matches!(state, Some("unknown" | "unavailable" | "not_applicable")) {
                out.push(p(
                    rec,
                    ptr,
                    "unknown-needs-fact",
                    format!(
                        "{key} is null but facts.{key:?} does not mark it unknown with a reason"
                    ),
                ));
            }
        }
    }
}

fn is_rfc3339_z(t: &str) -> bool {
    t.ends_with('Z') && chrono::DateTime::parse_from_rfc3339(t).is_ok()
}

/// A date (`2026-08-27`), an RFC3339 time, or a local time without offset (older servebench
/// results); returns (UTC-comparable key, whether the offset is known).
fn parse_when(t: &str) -> Option<(chrono::NaiveDateTime, bool)> {
    if let Ok(d) = chrono::DateTime::parse_from_rfc3339(t) {
        return Some((d.naive_utc(), true));
    }
    if let Ok(d) = chrono::NaiveDate::parse_from_str(t, "%Y-%m-%d") {
        return Some((d.and_hms_opt(0, 0, 0)?, false));
    }
    for f in [
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%dT%H:%M:%S",
        "%Y-%m-%dT%H:%M",
    ] {
        if let Ok(d) = chrono::NaiveDateTime::parse_from_str(t, f) {
            return Some((d, false));
        }
    }
    None
}

fn check_timestamps(rec: &Record, v: &Value, ptr: &str, out: &mut Vec<Problem>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let here = format!("{ptr}/{}", k.replace('~', "~0").replace('/', "~1"));
                if k == "captured_at" {
                    if let Some(t) = x.as_str() {
                        if !is_rfc3339_z(t) {
                            out.push(p(
                                rec,
                                &here,
                                "timestamp",
                                format!("captured_at {t:?} is not RFC3339 with Z"),
                            ));
                        }
                    }
                    continue;
                }
                // Free-form parts of a record are not ours to police.
                if ptr.is_empty() && matches!(k.as_str(), "metadata" | "rows") {
                    continue;
                }
                check_timestamps(rec, x, &here, out);
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                check_timestamps(rec, x, &format!("{ptr}/{i}"), out);
            }
        }
        _ => {}
    }
}

fn check_hf(rec: &Record, out: &mut Vec<Problem>) {
    let Some(hf) = rec.raw.get("huggingface") else {
        return;
    };
    if s(hf, "/link_type") == Some("repository") {
        if let (Some(repo), Some(url)) = (s(hf, "/repository"), s(hf, "/url")) {
            if url.trim_end_matches('/') != format!("https://huggingface.co/{repo}") {
                out.push(p(
                    rec,
                    "/huggingface/url",
                    "hf-identity",
                    format!("{url:?} is not https://huggingface.co/{repo}"),
                ));
            }
        }
        if s(hf, "/status") == Some("known") {
            let api = hf
                .pointer("/provenance/sources")
                .and_then(Value::as_array)
                .is_some_and(|a| {
                    a.iter()
                        .any(|s| s.get("kind").and_then(Value::as_str) == Some("huggingface-api"))
                });
            if !api {
                out.push(p(
                    rec,
                    "/huggingface/status",
                    "hf-identity",
                    "a known repository link needs a provenance source of kind huggingface-api",
                ));
            }
        }
    }
}

const CONTRACT_FIELDS: [&str; 14] = [
    "arguments",
    "container_port",
    "endpoint",
    "entrypoint",
    "environment",
    "host_port",
    "image",
    "ipc",
    "mounts",
    "network_mode",
    "notes",
    "served_model_name",
    "shm_size",
    "steps",
];

fn check_recipe(reg: &Registry, rec: &Record, out: &mut Vec<Problem>) {
    let raw = &rec.raw;
    let launch = raw.get("launch").cloned().unwrap_or(Value::Null);
    let kind = s(&launch, "/kind").unwrap_or("");
    let kind = if kind == "compose" {
        "docker-compose"
    } else {
        kind
    };
    let r = RecipeFacts {
        reg,
        rec,
        status: s(raw, "/status").unwrap_or(""),
        launch: &launch,
        kind,
        source: s(raw, "/recipe_source").unwrap_or(""),
        text: launch.to_string().to_lowercase(),
    };
    check_sweep_links(&r, out);
    check_recipe_source(&r, out);
    check_launch_tokens(&r, out);
    check_reference_launch(&r, out);
    check_container(rec, &launch, kind, out);
    if r.status == "validated" {
        check_validated_recipe(&r, out);
    }
    check_draft_launch(&r, out);
    check_context_plausibility(&r, out);
    check_trust_status(&r, out);
}

/// A recipe record and the fields its checks read, each `""` when absent.
struct RecipeFacts<'a> {
    reg: &'a Registry,
    rec: &'a Record,
    /// `status`.
    status: &'a str,
    /// `launch` (null when absent).
    launch: &'a Value,
    /// `launch.kind`, `compose` read as `docker-compose`.
    kind: &'a str,
    /// `recipe_source`.
    source: &'a str,
    /// The launch as JSON text, lowercased (for substring rules).
    text: String,
}

/// Sweep links, both ways: each sweep in `speed_sweep_ids` names this recipe back; the legacy
/// `speed_sweeps_ids` list is not present beside it.
fn check_sweep_links(r: &RecipeFacts<'_>, out: &mut Vec<Problem>) {
    let (rec, raw) = (r.rec, &r.rec.raw);
    if let Some(ids) = raw.get("speed_sweep_ids").and_then(Value::as_array) {
        for (i, id) in ids.iter().enumerate() {
            if let Some(sw) = id
                .as_str()
                .and_then(|id| r.reg.get(Collection::SpeedSweep, id))
            {
                let back = s(&sw.raw, "/recipe_id");
                if back != Some(rec.id.as_str()) {
                    out.push(p(
                        rec,
                        &format!("/speed_sweep_ids/{i}"),
                        "sweep-recipe-link",
                        format!(
                            "sweep {} belongs to recipe {:?}, not this one",
                            sw.id,
                            back.unwrap_or("")
                        ),
                    ));
                }
            }
        }
    }
    if raw.get("speed_sweeps_ids").is_some() {
        out.push(p(
            rec,
            "/speed_sweeps_ids",
            "sweep-recipe-link",
            "both speed_sweep_ids and the legacy speed_sweeps_ids are present with different lists",
        ));
    }
}

/// `recipe_source` rules: no oMLX; localmaxxing / exo-postgres / mlxfast recipes are
/// candidates with a reference launch; mlxfast is on `apple-m5-max-128gb`.
fn check_recipe_source(r: &RecipeFacts<'_>, out: &mut Vec<Problem>) {
    let (rec, source) = (r.rec, r.source);
    if source == "omlx" {
        out.push(p(
            rec,
            "/recipe_source",
            "recipe-source",
            "speculative oMLX recipes are outside the registry contract",
        ));
    }
    if matches!(source, "localmaxxing" | "exo-postgres" | "mlxfast")
        && (r.status != "candidate" || r.kind != "reference")
    {
        out.push(p(
            rec,
            "/recipe_source",
            "recipe-source",
            format!("a {source} recipe must be a candidate with a reference launch"),
        ));
    }
    if source == "mlxfast" && s(&rec.raw, "/hardware_id") != Some("apple-m5-max-128gb") {
        out.push(p(
            rec,
            "/hardware_id",
            "recipe-source",
            "an mlxfast recipe must be on apple-m5-max-128gb",
        ));
    }
}

/// Tokenised launch: no `command_snippet`, and no argument or step token holding `&&`.
fn check_launch_tokens(r: &RecipeFacts<'_>, out: &mut Vec<Problem>) {
    let (rec, launch) = (r.rec, r.launch);
    if r.text.contains("command_snippet") {
        out.push(p(
            rec,
            "/launch",
            "launch-tokens",
            "a launch carries no command_snippet (tokenise it into arguments)",
        ));
    }
    let mut tokens: Vec<(String, &str)> = Vec::new();
    if let Some(a) = launch.get("arguments").and_then(Value::as_array) {
        tokens.extend(
            a.iter()
                .enumerate()
                .filter_map(|(i, t)| t.as_str().map(|t| (format!("/launch/arguments/{i}"), t))),
        );
    }
    if let Some(steps) = launch.get("steps").and_then(Value::as_array) {
        for (i, st) in steps.iter().enumerate() {
            if let Some(a) = st.as_array() {
                tokens.extend(a.iter().enumerate().filter_map(|(j, t)| {
                    t.as_str().map(|t| (format!("/launch/steps/{i}/{j}"), t))
                }));
            }
        }
    }
    for (ptr, t) in tokens {
        if t.contains("&&") {
            out.push(p(
                rec,
                &ptr,
                "launch-tokens",
                format!("token {t:?} contains && (a shell string, not argv)"),
            ));
        }
    }
}

/// Reference launches (and launches of reference-only sources) carry no contract fields.
fn check_reference_launch(r: &RecipeFacts<'_>, out: &mut Vec<Problem>) {
    if r.kind == "reference" || matches!(r.source, "localmaxxing" | "exo-postgres" | "mlxfast") {
        for f in CONTRACT_FIELDS {
            if r.launch.get(f).is_some() {
                out.push(p(
                    r.rec,
                    &format!("/launch/{f}"),
                    "reference-launch",
                    format!("a reference launch carries no {f}"),
                ));
            }
        }
    }
}

/// Rules for a `validated` recipe: a real launch, a pinned model revision, speed evidence, a
/// pinned docker image or script commit, no forbidden flags, relative docker mounts inside the
/// registry, and a stated `serving.max_context_tokens`.
fn check_validated_recipe(r: &RecipeFacts<'_>, out: &mut Vec<Problem>) {
    let (reg, rec, raw, launch, kind) = (r.reg, r.rec, &r.rec.raw, r.launch, r.kind);
    let v = |ptr: &str, msg: &str| p(rec, ptr, "validated-launch", msg.to_string());
    if kind == "reference" {
        out.push(v(
            "/launch/kind",
            "a validated recipe cannot have a reference launch",
        ));
    }
    let inst = s(raw, "/model_instance_id").and_then(|i| reg.get(Collection::ModelInstance, i));
    if inst.is_some_and(|i| s(&i.raw, "/revision").is_none_or(str::is_empty)) {
        out.push(v(
            "/model_instance_id",
            "a validated recipe's model-instance must pin a revision",
        ));
    }
    if raw
        .get("speed_sweep_ids")
        .and_then(Value::as_array)
        .is_none_or(|a| a.is_empty())
    {
        out.push(v("/speed_sweep_ids", "no speed evidence"));
    }
    if kind == "docker" && s(launch, "/image").is_none_or(|i| image_digest(i).is_none()) {
        out.push(v(
            "/launch/image",
            "a validated docker image ends in @sha256:<64 hex>",
        ));
    }
    if kind == "script"
        && !s(launch, "/script/file").is_some_and(|f| f.split('/').any(trust::is_hex40))
    {
        out.push(v(
            "/launch/script/file",
            "a validated script path has a /<40-hex commit>/ segment",
        ));
    }
    for f in trust::FORBIDDEN_FLAGS {
        if r.text.contains(f) {
            out.push(v(
                "/launch",
                &format!("forbidden flag {f:?} (eager / CUDA graphs disabled)"),
            ));
        }
    }
    if kind == "docker" {
        if let Some(mounts) = launch.get("mounts").and_then(Value::as_array) {
            for (i, m) in mounts.iter().enumerate() {
                if let Some(src) = s(m, "/source") {
                    let relative =
                        !(src.starts_with('/') || src.starts_with("~/") || src.starts_with("${"));
                    if relative && (src.contains("..") || !reg.root.join(src).is_file()) {
                        out.push(v(
                            &format!("/launch/mounts/{i}/source"),
                            &format!("relative mount {src:?} is not a file inside the registry"),
                        ));
                    }
                }
            }
        }
    }
    if raw
        .pointer("/serving/max_context_tokens")
        .and_then(Value::as_u64)
        .is_none()
    {
        out.push(v(
            "/serving/max_context_tokens",
            "a validated recipe states serving.max_context_tokens",
        ));
    }
}

/// `draft_launch`: on candidates only, with an image pinned by digest.
fn check_draft_launch(r: &RecipeFacts<'_>, out: &mut Vec<Problem>) {
    let rec = r.rec;
    if let Some(d) = rec.raw.get("draft_launch") {
        if r.status == "validated" {
            out.push(p(
                rec,
                "/draft_launch",
                "draft-launch",
                "draft_launch is allowed on candidates only",
            ));
        }
        if s(d, "/image").is_none_or(|i| image_digest(i).is_none()) {
            out.push(p(
                rec,
                "/draft_launch/image",
                "draft-launch",
                "a draft launch image must end in @sha256:<64 hex>",
            ));
        }
    }
}

/// `serving.max_context_tokens` at most [`bounds::MAX_CONTEXT_TOKENS`] tokens.
fn check_context_plausibility(r: &RecipeFacts<'_>, out: &mut Vec<Problem>) {
    if let Some(c) = r
        .rec
        .raw
        .pointer("/serving/max_context_tokens")
        .and_then(Value::as_u64)
    {
        if c > bounds::MAX_CONTEXT_TOKENS {
            out.push(p(
                r.rec,
                "/serving/max_context_tokens",
                "plausibility",
                format!("{c} tokens exceeds {}", bounds::MAX_CONTEXT_TOKENS),
            ));
        }
    }
}

/// Trust: a stored `candidate` / `validated` status agrees with the derived one
/// ([`trust::derive_status`]); a mismatch lists why the recipe derives `candidate`.
fn check_trust_status(r: &RecipeFacts<'_>, out: &mut Vec<Problem>) {
    let (reg, raw, status) = (r.reg, &r.rec.raw, r.status);
    let derived = trust::derive_status(reg, raw);
    if matches!(status, "candidate" | "validated") && status != derived.as_str() {
        let why = if derived == RecipeStatus::Candidate {
            format!(": {}", trust::failures(reg, raw).join("; "))
        } else {
            String::new()
        };
        out.push(p(r.rec, "/status", "trust-status", format!("stored {status:?} but trust derives {:?}{why} (`servebench registry trust` rewrites it)", derived.as_str())));
    }
}

fn check_container(rec: &Record, launch: &Value, kind: &str, out: &mut Vec<Problem>) {
    let c = |ptr: &str, msg: String| p(rec, ptr, "container", msg);
    let Some(ct) = launch.get("container").filter(|c| c.is_object()) else {
        out.push(c(
            "/launch",
            "launch.container (container provenance) is required".into(),
        ));
        return;
    };
    let state = s(ct, "/state").unwrap_or("");
    let image = s(launch, "/image");
    match kind {
        "reference" => {
            if state != "none" {
                out.push(c(
                    "/launch/container/state",
                    format!("a reference launch has container state none, not {state:?}"),
                ));
            }
        }
        "docker" => match image {
            None => out.push(c("/launch/image", "a docker launch needs an image".into())),
            Some(img) => {
                let pinned = image_digest(img);
                match (pinned, state) {
                    (Some(d), "digest-pinned") => {
                        let want = format!("sha256:{d}");
                        match s(ct, "/digest") {
                            Some(x) if x == want => {}
                            Some(x) => out.push(c("/launch/container/digest", format!("{x:?} differs from the image's digest {want}"))),
                            None => out.push(c("/launch/container/digest", "a digest-pinned container needs its digest".into())),
                        }
                    }
                    (Some(_), other) => out.push(c("/launch/container/state", format!("the image is pinned by digest, so the state is digest-pinned, not {other:?}"))),
                    (None, "mutable") => {
                        if ct.get("digest").is_some_and(|d| !d.is_null()) {
                            out.push(c("/launch/container/digest", "a mutable image cannot claim a digest".into()));
                        }
                    }
                    (None, other) => out.push(c("/launch/container/state", format!("the image has no @sha256 digest, so the state is mutable, not {other:?}"))),
                }
            }
        },
        "docker-compose" => {
            let file = s(launch, "/compose/file");
            if file.is_none() {
                out.push(c(
                    "/launch/compose",
                    "a compose launch needs compose.file".into(),
                ));
            }
            if !matches!(state, "indirect" | "digest-pinned") {
                out.push(c(
                    "/launch/container/state",
                    format!("a compose launch is indirect or digest-pinned, not {state:?}"),
                ));
            }
            if file.is_some() && s(ct, "/compose_file") != file {
                out.push(c(
                    "/launch/container/compose_file",
                    "container.compose_file must equal compose.file".into(),
                ));
            }
        }
        _ => {
            if state != "none" {
                out.push(c(
                    "/launch/container/state",
                    format!("a {kind} launch has container state none, not {state:?}"),
                ));
            }
        }
    }
    if let Some(d) = s(ct, "/digest") {
        if !d.strip_prefix("sha256:").is_some_and(is_hex64) {
            out.push(c(
                "/launch/container/digest",
                format!("{d:?} is not sha256:<64 lowercase hex>"),
            ));
        }
    }
}

/// Physically implausible values of one sweep row (JSON), as `(field, message)`, by the
/// [`bounds`]: TTFT, prefill and decode rates, per-stream vs aggregate decode, peak VRAM
/// (`vram_cap_gb`: the hardware's memory × count × slack when known) and context size.
/// `publish` uses it to refuse such rows (`implausible`), `validate` to report them.
pub fn implausible(row: &Value, vram_cap_gb: Option<f64>) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let f = |k: &str| row.get(k).and_then(Value::as_f64);
    let status = row.get("status").and_then(Value::as_str).unwrap_or("");
    let cold = RowVerdict::parse(status).and_then(|v| v.cache) == Some(crate::CacheTag::Cold);
    let mut bad = |k: &str, msg: String| out.push((k.to_string(), msg));
    if let Some(t) = f("ttft_ms_p50") {
        if !(bounds::MIN_TTFT_MS..=bounds::MAX_TTFT_MS).contains(&t) {
            bad(
                "ttft_ms_p50",
                format!(
                    "TTFT {t} ms is outside [{}, {}] ms (a unit slip?)",
                    bounds::MIN_TTFT_MS,
                    bounds::MAX_TTFT_MS
                ),
            );
        }
    }
    // Every latency field: not negative, not beyond a day, percentiles in order (break-it
    // round 9: a TTFT p99 of 1e300 s and a negative ITL were published as accepted).
    if let Some(m) = row.as_object() {
        for (k, x) in m {
            let Some((_, unit)) = LATENCY_FIELDS.iter().find(|(p, _)| k.starts_with(p)) else {
                continue;
            };
            let Some(x) = x.as_f64() else {
                if !x.is_null() {
                    bad(k, format!("{k} {x} is not a number (a latency)"));
                }
                continue;
            };
            if x < 0.0 {
                bad(k, format!("{k} {x} is negative (a latency)"));
            } else if x * unit > bounds::MAX_LATENCY_MS && k != "ttft_ms_p50" {
                bad(
                    k,
                    format!(
                        "{k} {x} is beyond a day ({} ms; a unit slip?)",
                        bounds::MAX_LATENCY_MS
                    ),
                );
            }
        }
        for (prefix, _) in LATENCY_FIELDS {
            let present: Vec<(String, f64)> = PERCENTILES
                .iter()
                .filter_map(|q| {
                    let k = format!("{prefix}{q}");
                    m.get(&k).and_then(Value::as_f64).map(|x| (k, x))
                })
                .collect();
            for w in present.windows(2) {
                let ((ka, a), (kb, b)) = (&w[0], &w[1]);
                if *a >= 0.0 && *b >= 0.0 && *b < *a {
                    bad(kb, format!("{kb} {b} is below {ka} {a}"));
                }
            }
        }
    }
    if let Some(x) = f("prefill_tok_s") {
        let cap = if cold {
            bounds::MAX_COLD_PREFILL_TOK_S
        } else {
            bounds::MAX_PREFILL_TOK_S
        };
        if x > cap {
            bad(
                "prefill_tok_s",
                format!(
                    "prefill {x} tok/s exceeds {cap} tok/s{}",
                    if cold { " for a cold row" } else { "" }
                ),
            );
        }
    }
    if let Some(x) = f("decode_tok_s").filter(|x| *x > bounds::MAX_DECODE_TOK_S) {
        bad(
            "decode_tok_s",
            format!(
                "decode {x} tok/s exceeds {} tok/s",
                bounds::MAX_DECODE_TOK_S
            ),
        );
    }
    if let Some(x) = f("decode_tok_s_per_stream") {
        if x > bounds::MAX_DECODE_TOK_S_PER_STREAM {
            bad(
                "decode_tok_s_per_stream",
                format!(
                    "per-stream decode {x} tok/s exceeds {} tok/s",
                    bounds::MAX_DECODE_TOK_S_PER_STREAM
                ),
            );
        }
        if let (Some(agg), Some(c)) = (
            f("decode_tok_s"),
            row.get("concurrency").and_then(Value::as_u64),
        ) {
            if agg > x * c as f64 * bounds::AGGREGATE_OVER_STREAMS {
                bad(
                    "decode_tok_s",
                    format!(
                        "aggregate {agg} tok/s exceeds C={c} × per-stream {x} tok/s × {}",
                        bounds::AGGREGATE_OVER_STREAMS
                    ),
                );
            }
        }
    }
    if let Some(v) = f("peak_vram_gb") {
        let cap = vram_cap_gb.unwrap_or(bounds::MAX_VRAM_GB);
        if v > cap {
            bad(
                "peak_vram_gb",
                format!("{v} GB exceeds the hardware's {cap:.1} GB (MiB stored as GB?)"),
            );
        }
    }
    if let Some(c) = row
        .get("context_tokens")
        .and_then(Value::as_u64)
        .filter(|c| *c > bounds::MAX_CONTEXT_TOKENS)
    {
        bad(
            "context_tokens",
            format!("{c} tokens exceeds {}", bounds::MAX_CONTEXT_TOKENS),
        );
    }
    out
}

fn check_sweep(reg: &Registry, rec: &Record, out: &mut Vec<Problem>) {
    let raw = &rec.raw;
    // Backward link: the recipe lists this sweep.
    if let Some(rid) = s(raw, "/recipe_id") {
        if let Some(r) = reg.get(Collection::Recipe, rid) {
            let listed = r
                .raw
                .get("speed_sweep_ids")
                .and_then(Value::as_array)
                .is_some_and(|a| a.iter().any(|x| x.as_str() == Some(rec.id.as_str())));
            if !listed {
                out.push(p(
                    rec,
                    "/recipe_id",
                    "sweep-recipe-link",
                    format!("recipe {rid} does not list this sweep in speed_sweep_ids"),
                ));
            }
        }
    }
    // Times.
    let when = |k: &str| s(raw, &format!("/{k}")).map(|t| (t, parse_when(t)));
    for k in ["measured_at", "accepted_at"] {
        if let Some((t, None)) = when(k) {
            out.push(p(
                rec,
                &format!("/{k}"),
                "timestamp",
                format!("{k} {t:?} is neither a date nor an RFC3339 time"),
            ));
        }
    }
    if let (Some((_, Some((m, m_exact)))), Some((_, Some((a, a_exact))))) =
        (when("measured_at"), when("accepted_at"))
    {
        // Without a known offset compare by date (±1 day covers every time zone).
        let earlier = if m_exact && a_exact {
            a < m
        } else {
            a.date() < m.date() - chrono::Days::new(1)
        };
        if earlier {
            out.push(p(
                rec,
                "/accepted_at",
                "accepted-after-measured",
                format!(
                    "accepted_at {} is before measured_at {}",
                    s(raw, "/accepted_at").unwrap_or(""),
                    s(raw, "/measured_at").unwrap_or("")
                ),
            ));
        }
    }
    // Hardware memory for VRAM plausibility.
    let recipe = s(raw, "/recipe_id").and_then(|r| reg.get(Collection::Recipe, r));
    let vram_cap = recipe.and_then(|r| {
        let hw = reg.get(Collection::Hardware, s(&r.raw, "/hardware_id")?)?;
        let per = hw.raw.pointer("/memory/vram_gb")?.as_f64()?;
        let n = r
            .raw
            .get("hardware_count")
            .and_then(Value::as_u64)
            .unwrap_or(1) as f64;
        Some(per * n * bounds::VRAM_SLACK)
    });
    let rows = raw
        .get("rows")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for (i, row) in rows.iter().enumerate() {
        let at = |k: &str| format!("/rows/{i}/{k}");
        let status = row.get("status").and_then(Value::as_str).unwrap_or("");
        let parsed = RowVerdict::parse(status);
        match (&parsed, row.get("verdict")) {
            (None, _) if !status.is_empty() => out.push(p(
                rec,
                &at("status"),
                "row-status",
                format!("{status:?} is outside the verdict grammar"),
            )),
            (_, Some(v)) if v.is_object() => {
                match serde_json::from_value::<RowVerdict>(v.clone()) {
                    Ok(v) if v.status() != status => out.push(p(
                        rec,
                        &at("status"),
                        "row-status",
                        format!("{status:?} differs from its verdict {:?}", v.status()),
                    )),
                    Ok(_) => {}
                    Err(e) => out.push(p(rec, &at("verdict"), "row-status", e.to_string())),
                }
            }
            _ => {}
        }
        // Rows declared not evidence keep their (implausible) numbers for the record.
        let not_evidence = parsed.as_ref().is_some_and(|v| {
            matches!(
                v.verdict,
                crate::Verdict::MeasurementInvalid
                    | crate::Verdict::InfraInvalid
                    | crate::Verdict::NotRun
            )
        });
        if !not_evidence {
            for (k, msg) in implausible(row, vram_cap) {
                out.push(p(rec, &at(&k), "plausibility", msg));
            }
        }
    }
    // Metrics of servebench sweeps follow their declared rule.
    if s(raw, "/source/metric_rule") == Some(metrics::METRIC_RULE) {
        if let (Some(sw), Some(stored)) = (rec.sweep(), rec.sweep().and_then(|s| s.metrics.clone()))
        {
            let mut want = metrics::derive(&sw.rows, sw.measured_at.as_deref());
            want.inference_engine_version = stored.inference_engine_version.clone();
            want.decode_mode = stored.decode_mode.clone();
            if want != stored {
                out.push(p(
                    rec,
                    "/metrics",
                    "metrics-rule",
                    format!(
                        "metrics differ from what rule {} gives for the rows",
                        metrics::METRIC_RULE
                    ),
                ));
            }
        }
    }
}
