//! Typed records of `local-ai-registry/v1` (§2.2–§2.7).
//!
//! Where the v1 schema is **closed** the struct uses `deny_unknown_fields` (unknown keys are
//! refused). Where it is **open** (hardware, hardware memory, sweep rows and source, recipe
//! engine, serving, launch, metadata, weights) the struct keeps the keys it knows typed and the
//! rest in an `extra` map, so nothing read is lost.
//!
//! Resolved v1 contradictions (documented in `docs/registry.md`):
//! * A fact **may** carry `value` but never must (one v1 validator required it, the schema text
//!   forbade it).
//! * A field that v1 requires but a drafted record cannot know (hardware `vendor`, `kind`,
//!   `accelerator_backend`, `memory.vram_gb`; model `params`; model-instance `repository`,
//!   `kind`) may
//!   be `null` **only** when `facts.<path>` marks it `unknown`/`unavailable` with a reason. The
//!   validator enforces this (`unknown-needs-fact`).
//! * Launch kinds: the union of the v1 vocabularies; `compose` is read as `docker-compose`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A JSON object.
pub type JsonObject = Map<String, Value>;

/// `schema_version` of every record.
pub const SCHEMA_VERSION: &str = "local-ai-registry/v1";

// ---------------------------------------------------------------------------------------------
// Shared sub-objects (common.schema.json)

/// Where a fact or record came from (§2.2 `source`, closed).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Source {
    /// Non-empty kind (`vendor`, `huggingface-api`, `servebench-run`, …).
    pub kind: String,
    /// URI (a scheme is required: `https:`, `file:`, `urn:`).
    pub url: String,
    /// Repository, when the source is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    /// Commit of the repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// Paths inside the repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paths: Option<Vec<String>>,
    /// RFC3339 time (`Z`) when captured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub captured_at: Option<String>,
    /// Publisher name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub publisher: Option<String>,
    /// URI it was retrieved from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retrieved_from: Option<String>,
}

/// `{sources: source[≥1], captured_at}` (closed).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Provenance {
    /// At least one source.
    pub sources: Vec<Source>,
    /// RFC3339 time with `Z`.
    pub captured_at: String,
}

/// Knowledge state of a fact.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FactState {
    /// The value at the record path is known.
    Known,
    /// Not known (yet).
    Unknown,
    /// Does not exist or cannot be obtained.
    Unavailable,
    /// Does not apply.
    NotApplicable,
}

/// Per-field knowledge state (§2.2 `fact`, closed). The value lives at the record path named
/// by the facts key; `value` is tolerated, never required.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fact {
    /// Knowledge state.
    pub state: FactState,
    /// Where the knowledge came from.
    pub provenance: Provenance,
    /// Required unless `known`: a non-empty string or `{code, detail}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<Value>,
    /// Free note.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Scope of the fact.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// Unit of the value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
    /// Date or time the fact holds at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub as_of: Option<String>,
    /// Tolerated copy of the value (early hardware records).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
}

/// Map from a dotted record path (`weights.size_gb`) to a fact.
pub type Facts = BTreeMap<String, Fact>;

/// Status of a Hugging Face identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HfStatus {
    /// Verified.
    Known,
    /// Not verified.
    Unknown,
    /// No HF repository exists.
    Unavailable,
}

/// Link type of a Hugging Face identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HfLinkType {
    /// `https://huggingface.co/<owner>/<name>`.
    Repository,
    /// `https://huggingface.co/models?search=…`; `repository` is null.
    Search,
}

/// §2.2 `huggingface_identity` (closed; every field required).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HuggingfaceIdentity {
    /// `owner/name`, or null for a search link.
    pub repository: Option<String>,
    /// Repository or search URL.
    pub url: String,
    /// Verification state.
    pub status: HfStatus,
    /// Link type.
    pub link_type: HfLinkType,
    /// Why the status is what it is (always required).
    pub reason: String,
    /// Where the identity came from.
    pub provenance: Provenance,
}

/// State of a launch's container provenance.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ContainerState {
    /// Image pinned by `@sha256:` digest.
    DigestPinned,
    /// A tag that can move.
    Mutable,
    /// Through a compose file.
    Indirect,
    /// No container (reference, native, script).
    None,
}

/// Container runtime.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ContainerRuntime {
    /// `docker run`.
    Docker,
    /// `docker compose`.
    DockerCompose,
}

/// §2.2 `container` (launch provenance, closed; every field required).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Container {
    /// Pinning state.
    pub state: ContainerState,
    /// Runtime (null unless docker / compose).
    pub runtime: Option<ContainerRuntime>,
    /// Image reference.
    pub image: Option<String>,
    /// `sha256:` + 64 lowercase hex, or null.
    pub digest: Option<String>,
    /// Compose file.
    pub compose_file: Option<String>,
    /// Sources (≥ 1).
    pub source: Vec<Source>,
    /// RFC3339 time with `Z`.
    pub captured_at: String,
    /// Non-empty reason.
    pub reason: String,
}

// ---------------------------------------------------------------------------------------------
// hardware (§2.3, open)

/// Hardware vendor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Vendor {
    /// NVIDIA.
    Nvidia,
    /// AMD.
    Amd,
    /// Intel.
    Intel,
    /// Apple.
    Apple,
}

/// Hardware kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HardwareKind {
    /// A discrete card.
    Discrete,
    /// An integrated GPU.
    Integrated,
    /// Unified memory (Apple, Strix Halo).
    Unified,
}

/// Accelerator backend of a hardware record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AcceleratorBackend {
    /// CUDA.
    Nvidia,
    /// ROCm.
    AmdRocm,
    /// Intel XPU.
    IntelXpu,
    /// Metal.
    Metal,
}

/// `hardware.memory` (open).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HardwareMemory {
    /// Accelerator memory per device, GB (> 0); null only with an `unknown` fact.
    pub vram_gb: Option<f64>,
    /// Memory type (`GDDR7`).
    #[serde(default)]
    pub vram_type: Option<String>,
    /// Host memory, GB (> 0 or null).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_memory_gb: Option<f64>,
    /// Bandwidth, GB/s: a number, `{min, max}` or null.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth_gb_per_s: Option<Value>,
    /// Other keys.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// A hardware record (§2.3, open).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Hardware {
    /// [`SCHEMA_VERSION`].
    pub schema_version: String,
    /// Kebab id `<chip>-<memory>gb`.
    pub id: String,
    /// Vendor; null only with an `unknown` fact (drafts).
    pub vendor: Option<Vendor>,
    /// Product name.
    pub name: String,
    /// Kind; null only with an `unknown` fact.
    pub kind: Option<HardwareKind>,
    /// Backend; null only with an `unknown` fact.
    pub accelerator_backend: Option<AcceleratorBackend>,
    /// Memory.
    pub memory: HardwareMemory,
    /// Sources (`{kind, url, …}`).
    pub sources: Vec<Source>,
    /// Family label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub family: Option<String>,
    /// Product names that map to this id (unique).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aliases: Option<Vec<String>>,
    /// Provenance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provenance: Option<Provenance>,
    /// Facts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub facts: Option<Facts>,
    /// Other keys (commercial, compute, products, …).
    #[serde(flatten)]
    pub extra: JsonObject,
}

// ---------------------------------------------------------------------------------------------
// model (§2.4, closed)

/// A canonical model (§2.4, closed).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Model {
    /// [`SCHEMA_VERSION`].
    pub schema_version: String,
    /// Kebab id without dots.
    pub id: String,
    /// Family.
    pub family: String,
    /// Non-empty name.
    pub name: String,
    /// Parameters, **billions** (> 0); null only with an `unknown` fact.
    pub params: Option<f64>,
    /// Active parameters (MoE), billions (≥ 0 or null).
    pub active_params: Option<f64>,
    /// Architecture (`moe`, `dense`) or null.
    pub architecture: Option<String>,
    /// URL or null.
    pub url: Option<String>,
    /// HF identity.
    pub huggingface: HuggingfaceIdentity,
    /// Provenance.
    pub provenance: Provenance,
    /// Facts.
    pub facts: Facts,
    /// HF download counts (TS type; drives the models page sort).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub downloads: Option<Value>,
}

// ---------------------------------------------------------------------------------------------
// model-instance (§2.5, closed)

/// Artifact kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum InstanceKind {
    /// The original weights.
    Base,
    /// A quantisation.
    Quant,
    /// A fine-tune.
    FineTune,
}

/// `model-instance.weights` (open).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Weights {
    /// `safetensors`, `gguf`, `exl3`, …
    pub format: Option<String>,
    /// `bf16`, `q4_k_m`, …
    pub precision: Option<String>,
    /// Size, **GiB** (the plugin multiplies by 2^30).
    pub size_gb: Option<f64>,
    /// Other keys.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// A downloadable artifact (§2.5, closed).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelInstance {
    /// [`SCHEMA_VERSION`].
    pub schema_version: String,
    /// `<hf-owner>-<repo-slug>--<variant-slug>`.
    pub id: String,
    /// The canonical model.
    pub model_id: String,
    /// HF `owner/name`; null only with an `unknown` fact.
    pub repository: Option<String>,
    /// 40-hex commit (validated use) or null.
    pub revision: Option<String>,
    /// Name the engine serves it as.
    pub served_name: Option<String>,
    /// Weights.
    pub weights: Weights,
    /// Kind; null only with an `unknown` fact.
    pub kind: Option<InstanceKind>,
    /// URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// HF identity.
    pub huggingface: HuggingfaceIdentity,
    /// Provenance.
    pub provenance: Provenance,
    /// Facts.
    pub facts: Facts,
}

// ---------------------------------------------------------------------------------------------
// recipe (§2.6, closed)

/// Recipe status: **derived** by trust (§6.4), never authoritative when read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RecipeStatus {
    /// Not (yet) replayable evidence.
    Candidate,
    /// Passed every trust criterion.
    Validated,
}

impl RecipeStatus {
    /// `candidate` / `validated`.
    pub fn as_str(self) -> &'static str {
        match self {
            RecipeStatus::Candidate => "candidate",
            RecipeStatus::Validated => "validated",
        }
    }
}

/// Launch kind: the union of the v1 vocabularies (schema, trust.py, docs; §7.2.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LaunchKind {
    /// Points at where a run was observed; not runnable.
    Reference,
    /// `docker run`.
    Docker,
    /// `docker compose` (`compose` is read as this).
    #[serde(alias = "compose")]
    DockerCompose,
    /// A controller launch.
    Controller,
    /// A commit-pinned script.
    Script,
    /// A native process.
    Native,
    /// A host launch (FLM on AMD NPU).
    Host,
}

impl LaunchKind {
    /// The canonical name.
    pub fn as_str(self) -> &'static str {
        match self {
            LaunchKind::Reference => "reference",
            LaunchKind::Docker => "docker",
            LaunchKind::DockerCompose => "docker-compose",
            LaunchKind::Controller => "controller",
            LaunchKind::Script => "script",
            LaunchKind::Native => "native",
            LaunchKind::Host => "host",
        }
    }
}

/// `recipe.engine` (open).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Engine {
    /// Engine name (`vllm`, `sglang`, `llama.cpp`, …).
    pub name: String,
    /// Version or null.
    #[serde(default)]
    pub version: Option<String>,
    /// Graph mode (free text) or null.
    #[serde(default)]
    pub graph_mode: Option<String>,
    /// Other keys.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// `recipe.launch` (open; the kind-specific rules are checked by the validator).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Launch {
    /// Kind.
    pub kind: LaunchKind,
    /// Container provenance (required by the validator on every recipe).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<Container>,
    /// Image reference (docker).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Argument vector (never a shell string).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Vec<String>>,
    /// Other keys (entrypoint, environment, mounts, ports, compose, script, steps, source, url, …).
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// `recipe.capabilities` (closed): true, false or null (= unknown).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Capabilities {
    /// Chat completions.
    pub chat: Option<bool>,
    /// Reasoning output.
    pub reasoning: Option<bool>,
    /// Tool calls.
    pub tools: Option<bool>,
    /// Image input.
    pub vision: Option<bool>,
}

/// A recipe (§2.6, closed).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Recipe {
    /// [`SCHEMA_VERSION`].
    pub schema_version: String,
    /// `[a-z0-9][a-z0-9.-]*`.
    pub id: String,
    /// Free text (`0xsero`, `servebench`, `localmaxxing`, …).
    pub recipe_source: String,
    /// Stored status; must equal the trust derivation.
    pub status: RecipeStatus,
    /// The artifact.
    pub model_instance_id: String,
    /// The hardware kind.
    pub hardware_id: String,
    /// Devices (≥ 1).
    pub hardware_count: u64,
    /// Engine.
    pub engine: Engine,
    /// Launch.
    pub launch: Launch,
    /// Serving facts (open: max_context_tokens, max_concurrency, tensor_parallel, …).
    pub serving: JsonObject,
    /// Capabilities.
    pub capabilities: Capabilities,
    /// Attached sweeps (unique). `speed_sweeps_ids` is read as this.
    #[serde(alias = "speed_sweeps_ids")]
    pub speed_sweep_ids: Vec<String>,
    /// Open metadata.
    pub metadata: JsonObject,
    /// Provenance.
    pub provenance: Provenance,
    /// Facts.
    pub facts: Facts,
    /// Description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Synthesised, unverified launch (candidates only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draft_launch: Option<Value>,
    /// Recommended flag (docs only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recommended: Option<bool>,
}

// ---------------------------------------------------------------------------------------------
// speed-sweep (§2.7)

/// `speed-sweep.metrics` (closed; every key nullable; numbers ≥ 0).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SweepMetrics {
    /// Largest row concurrency.
    pub concurrency: Option<u64>,
    /// Number of rows counted (servebench: accepted rows).
    pub point_count: Option<u64>,
    /// Largest row `context_tokens`.
    pub max_context_tokens: Option<u64>,
    /// Largest prompt size, tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_prompt_tokens: Option<u64>,
    /// Largest decode rate, tok/s (the rate kind is in `source.peak_generation_rate_kind`).
    pub peak_generation_tps: Option<f64>,
    /// Largest prefill rate, tok/s (servebench: cold prefill rows only).
    pub peak_prompt_tps: Option<f64>,
    /// = `measured_at`.
    pub latest_point_at: Option<String>,
    /// Engine version (the API copies it from the recipe).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inference_engine_version: Option<String>,
    /// Decode mode label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_mode: Option<String>,
    /// Peak memory, bytes as a decimal-digit string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_memory_bytes: Option<String>,
    /// Base memory, bytes as a decimal-digit string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_memory_bytes: Option<String>,
    /// Memory at 8k, bytes as a decimal-digit string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory8k_bytes: Option<String>,
    /// Memory at the max context, bytes as a decimal-digit string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_max_context_bytes: Option<String>,
    /// Context of the base-memory reading, tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_memory_context_tokens: Option<u64>,
    /// Decode at 8k, tok/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode8k_tps: Option<f64>,
    /// Its context, tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode8k_context_tokens: Option<u64>,
    /// Decode at 32k, tok/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode32k_tps: Option<f64>,
    /// Its context, tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode32k_context_tokens: Option<u64>,
    /// Decode at the max context, tok/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_max_context_tps: Option<f64>,
    /// That context, tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_max_context_tokens: Option<u64>,
    /// TTFT at 32k, **seconds**.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft32k_seconds: Option<f64>,
    /// Its context, tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft32k_context_tokens: Option<u64>,
    /// Cached prompt tokens of that TTFT.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft32k_cached_prompt_tokens: Option<u64>,
    /// Context of the 8k memory reading.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory8k_context_tokens: Option<u64>,
    /// Context of the max-context memory reading.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_max_context_tokens: Option<u64>,
}

/// One measured point of a sweep (§2.7 row, open). Units: tok/s, ms (TTFT), s (elapsed), GB.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SweepRow {
    /// Row verdict in the status grammar (`accepted-cold-prefill`); see [`crate::verdict`].
    pub status: String,
    /// Simultaneous requests (≥ 1).
    pub concurrency: Option<u64>,
    /// Prompt tokens of the cell.
    pub context_tokens: Option<u64>,
    /// Output tokens per request (requested or observed).
    pub output_tokens: Option<u64>,
    /// Prompt-processing rate, tok/s.
    pub prefill_tok_s: Option<f64>,
    /// **Aggregate** output rate of the cell, tok/s.
    pub decode_tok_s: Option<f64>,
    /// Median TTFT, ms.
    pub ttft_ms_p50: Option<f64>,
    /// Peak accelerator memory, GB.
    pub peak_vram_gb: Option<f64>,
    /// Requests / samples in the cell (≥ 1).
    pub samples: Option<u64>,
    /// Per-stream decode rate, tok/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_tok_s_per_stream: Option<f64>,
    /// Engine-reported generation rate, tok/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_decode_tok_s: Option<f64>,
    /// Wall time of the cell's measurement, s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elapsed_s: Option<f64>,
    /// p95 TTFT, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_ms_p95: Option<f64>,
    /// Prefix-cache hit rate, 0–1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_hit_rate: Option<f64>,
    /// Prompt tokens served from the device cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_cache_hit_tokens: Option<u64>,
    /// Prompt tokens actually computed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill_compute_tokens: Option<u64>,
    /// Client output tok/s × 60.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens_per_minute: Option<f64>,
    /// (prompt + output) tok/s × 60.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_api_tokens_per_minute: Option<f64>,
    /// Structured verdict that `status` was written from (servebench rows).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<crate::verdict::RowVerdict>,
    /// Other keys (speculation, measurements, cache_state, layer, …).
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// A speed sweep (§2.7, closed at top level).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpeedSweep {
    /// [`SCHEMA_VERSION`].
    pub schema_version: String,
    /// = file stem.
    pub id: String,
    /// The owning recipe.
    pub recipe_id: String,
    /// When measured (date or RFC3339).
    pub measured_at: Option<String>,
    /// When accepted as evidence (null for imports).
    pub accepted_at: Option<String>,
    /// Evidence origin (loose shape; servebench's fields in [`crate::publish`]).
    pub source: Option<JsonObject>,
    /// Summary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<SweepMetrics>,
    /// Measured points (≥ 1).
    pub rows: Vec<SweepRow>,
    /// Provenance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provenance: Option<Provenance>,
    /// Facts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub facts: Option<Facts>,
}

/// A parsed record of any collection.
#[derive(Clone, Debug, PartialEq)]
pub enum TypedRecord {
    /// hardware/
    Hardware(Box<Hardware>),
    /// model/
    Model(Box<Model>),
    /// model-instance/
    ModelInstance(Box<ModelInstance>),
    /// recipe/
    Recipe(Box<Recipe>),
    /// speed-sweep/
    SpeedSweep(Box<SpeedSweep>),
}

impl TypedRecord {
    /// Parses `v` as a record of `collection`. Errors: serde's message (missing field, unknown
    /// field where closed, wrong type).
    pub fn parse(
        collection: crate::Collection,
        v: &Value,
    ) -> Result<TypedRecord, serde_json::Error> {
        use crate::Collection as C;
        use serde::Deserialize;
        // Deserialized from the borrowed tree (no copy of `v`; strings are copied as needed).
        Ok(match collection {
            C::Hardware => TypedRecord::Hardware(Box::new(Deserialize::deserialize(v)?)),
            C::Model => TypedRecord::Model(Box::new(Deserialize::deserialize(v)?)),
            C::ModelInstance => TypedRecord::ModelInstance(Box::new(Deserialize::deserialize(v)?)),
            C::Recipe => TypedRecord::Recipe(Box::new(Deserialize::deserialize(v)?)),
            C::SpeedSweep => TypedRecord::SpeedSweep(Box::new(Deserialize::deserialize(v)?)),
        })
    }

    /// The record as JSON.
    pub fn to_value(&self) -> Value {
        let r = match self {
            TypedRecord::Hardware(r) => serde_json::to_value(r),
            TypedRecord::Model(r) => serde_json::to_value(r),
            TypedRecord::ModelInstance(r) => serde_json::to_value(r),
            TypedRecord::Recipe(r) => serde_json::to_value(r),
            TypedRecord::SpeedSweep(r) => serde_json::to_value(r),
        };
        r.expect("records always serialise")
    }

    /// Its collection.
    pub fn collection(&self) -> crate::Collection {
        use crate::Collection as C;
        match self {
            TypedRecord::Hardware(_) => C::Hardware,
            TypedRecord::Model(_) => C::Model,
            TypedRecord::ModelInstance(_) => C::ModelInstance,
            TypedRecord::Recipe(_) => C::Recipe,
            TypedRecord::SpeedSweep(_) => C::SpeedSweep,
        }
    }

    /// Its id.
    pub fn id(&self) -> &str {
        match self {
            TypedRecord::Hardware(r) => &r.id,
            TypedRecord::Model(r) => &r.id,
            TypedRecord::ModelInstance(r) => &r.id,
            TypedRecord::Recipe(r) => &r.id,
            TypedRecord::SpeedSweep(r) => &r.id,
        }
    }
}
