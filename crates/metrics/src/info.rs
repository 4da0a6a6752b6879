//! Engine info endpoints (JSON bodies already fetched by the caller): `/v1/models`,
//! SGLang `/get_server_info` and `/get_model_info`, llama.cpp `/props` and `/slots`, TGI `/info`,
//! vLLM `/version`, Ollama `/api/version`. Seed spec §3.2 / §3.3; fixture index §B.
//!
//! Every parser is total: malformed input gives `Err(String)`, never a panic; a missing or
//! malformed field is `None`, never 0.

use serde_json::Value;

use crate::catalog::Engine;

/// A positive integer from JSON: an unsigned integer, an integral float, or a numeric string.
/// 0, negative, fractional, `null` and anything else → `None`.
fn as_pos_u64(v: &Value) -> Option<u64> {
    match v {
        Value::Number(n) => n.as_u64().or_else(|| {
            let f = n.as_f64()?;
            (f.is_finite() && f >= 1.0 && f.fract() == 0.0 && f <= 9_007_199_254_740_992.0)
                .then_some(f as u64)
        }),
        Value::String(s) => crate::kv::label_u64(s),
        _ => None,
    }
    .filter(|&n| n > 0)
}

fn as_string(v: &Value) -> Option<String> {
    match v {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        _ => None,
    }
}

fn parse_object(body: &str, what: &str) -> Result<serde_json::Map<String, Value>, String> {
    match serde_json::from_str::<Value>(body) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(format!("{what}: expected a JSON object")),
        Err(e) => Err(format!("{what}: invalid JSON: {e}")),
    }
}

/// One entry of `/v1/models` `data[]`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ModelEntry {
    /// `id` (the name to send as `model`).
    pub id: String,
    /// vLLM / SGLang `max_model_len` (served context, tokens); for a LoRA adapter without its
    /// own value, the parent's.
    pub max_model_len: Option<u64>,
    /// `parent`: base model of a LoRA adapter (vLLM).
    pub parent: Option<String>,
    /// `owned_by` (`"vllm"`, `"sglang"`, `"llamacpp"`, ...): a weak engine hint.
    pub owned_by: Option<String>,
    /// llama.cpp `meta.n_ctx`: the SERVED context when present.
    pub n_ctx: Option<u64>,
    /// llama.cpp `meta.n_ctx_train`: the TRAINED context; never use it as the served limit.
    pub n_ctx_train: Option<u64>,
}

impl ModelEntry {
    /// Context the server actually accepts: `max_model_len`, else llama.cpp `meta.n_ctx`.
    /// Never `n_ctx_train`.
    pub fn served_context(&self) -> Option<u64> {
        self.max_model_len.or(self.n_ctx)
    }
}

/// Parsed `/v1/models`.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
pub struct ModelsInfo {
    /// `data[]` entries with a string `id`, in server order: the first [`MAX_KEPT_MODELS`], and
    /// the requested one ([`parse_v1_models_keeping`]) wherever it is.
    pub models: Vec<ModelEntry>,
    /// `data[]` entries with a string `id`, all of them (kept or not).
    pub total: usize,
}

/// Entries of `/v1/models` kept in [`ModelsInfo::models`] (the rest are counted): a hostile
/// list of 1,000,000 ids in a 15 MB body took 1 GB of memory kept whole (break-it round 9).
pub const MAX_KEPT_MODELS: usize = 10_000;

impl ModelsInfo {
    /// All model ids in server order.
    pub fn model_ids(&self) -> Vec<String> {
        self.models.iter().map(|m| m.id.clone()).collect()
    }

    /// Entry with this id.
    pub fn get(&self, id: &str) -> Option<&ModelEntry> {
        self.models.iter().find(|m| m.id == id)
    }
}

/// Parse `/v1/models`: `data[].id`, `max_model_len` (vLLM), `parent` (vLLM LoRA adapters
/// inherit the parent's `max_model_len`), llama.cpp `meta.n_ctx` / `meta.n_ctx_train`.
/// [`parse_v1_models_keeping`] without a model to keep.
pub fn parse_v1_models(body: &str) -> Result<ModelsInfo, String> {
    parse_v1_models_keeping(body, None)
}

/// [`parse_v1_models`], keeping the first [`MAX_KEPT_MODELS`] entries and the one whose id is
/// `keep` wherever it is; every entry with a string id is counted ([`ModelsInfo::total`]). The
/// list is read one entry at a time (no JSON tree of the whole body: memory follows the kept
/// entries, not the body). A LoRA adapter's parent is looked up among the kept entries.
///
/// Errors: not a JSON object, invalid JSON, or no `data` array (one line each).
pub fn parse_v1_models_keeping(body: &str, keep: Option<&str>) -> Result<ModelsInfo, String> {
    use serde::de::{DeserializeSeed, SeqAccess, Visitor};
    #[derive(serde::Deserialize)]
    struct Raw {
        id: Option<Value>,
        max_model_len: Option<Value>,
        parent: Option<Value>,
        owned_by: Option<Value>,
        meta: Option<Value>,
    }
    /// An entry that is not an object is skipped.
    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum Item {
        Entry(Raw),
        Other(serde::de::IgnoredAny),
    }
    fn entry(e: Raw) -> Option<ModelEntry> {
        let id = as_string(e.id.as_ref()?)?;
        let meta_u64 = |k: &str| e.meta.as_ref().and_then(|m| m.get(k)).and_then(as_pos_u64);
        Some(ModelEntry {
            id,
            max_model_len: e.max_model_len.as_ref().and_then(as_pos_u64),
            parent: e.parent.as_ref().and_then(as_string),
            owned_by: e.owned_by.as_ref().and_then(as_string),
            n_ctx: meta_u64("n_ctx"),
            n_ctx_train: meta_u64("n_ctx_train"),
        })
    }
    /// `data[]`, folded entry by entry.
    struct List<'k>(Option<&'k str>);
    impl<'de> Visitor<'de> for List<'_> {
        type Value = ModelsInfo;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a data[] array")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ModelsInfo, A::Error> {
            let mut out = ModelsInfo::default();
            while let Some(item) = seq.next_element::<Item>()? {
                let Item::Entry(raw) = item else { continue };
                let Some(e) = entry(raw) else { continue };
                out.total += 1;
                if out.models.len() < MAX_KEPT_MODELS || self.0 == Some(e.id.as_str()) {
                    out.models.push(e);
                }
            }
            Ok(out)
        }
    }
    impl<'de> DeserializeSeed<'de> for List<'_> {
        type Value = ModelsInfo;
        fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<ModelsInfo, D::Error> {
            d.deserialize_seq(self)
        }
    }
    /// The top object: `data` read with [`List`], every other key skipped.
    struct Top<'k>(Option<&'k str>);
    impl<'de> Visitor<'de> for Top<'_> {
        type Value = Option<ModelsInfo>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut map: A,
        ) -> Result<Option<ModelsInfo>, A::Error> {
            let mut found = None;
            while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                if key == "data" && found.is_none() {
                    found = Some(map.next_value_seed(List(self.0))?);
                } else {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
            Ok(found)
        }
    }
    if !body.trim_start().starts_with('{') {
        return match serde_json::from_str::<serde::de::IgnoredAny>(body) {
            Ok(_) => Err("/v1/models: expected a JSON object".to_string()),
            Err(e) => Err(format!("/v1/models: invalid JSON: {e}")),
        };
    }
    let mut de = serde_json::Deserializer::from_str(body);
    let parsed = serde::Deserializer::deserialize_map(&mut de, Top(keep)).and_then(|v| {
        de.end()?;
        Ok(v)
    });
    let mut info = match parsed {
        Ok(Some(info)) => info,
        Ok(None) => return Err("/v1/models: no data[] array".to_string()),
        Err(e) if e.is_data() => return Err("/v1/models: no data[] array".to_string()),
        Err(e) => return Err(format!("/v1/models: invalid JSON: {e}")),
    };
    // A LoRA adapter without its own max_model_len inherits its parent's (the first kept entry
    // with that id): one map, not a scan per entry.
    if info
        .models
        .iter()
        .any(|m| m.parent.is_some() && m.max_model_len.is_none())
    {
        let mut own: std::collections::HashMap<String, Option<u64>> =
            std::collections::HashMap::new();
        for m in &info.models {
            own.entry(m.id.clone()).or_insert(m.max_model_len);
        }
        for m in info.models.iter_mut() {
            if m.max_model_len.is_none() {
                if let Some(p) = &m.parent {
                    m.max_model_len = own.get(p).copied().flatten();
                }
            }
        }
    }
    Ok(info)
}

/// Parsed SGLang `/get_server_info` (flat HTTP shape, or the gRPC shape with a nested
/// `server_args` object).
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
pub struct SglangServerInfo {
    /// `version`.
    pub version: Option<String>,
    /// `max_total_num_tokens`: KV capacity in tokens (its presence identifies SGLang, spec §3.2).
    pub max_total_num_tokens: Option<u64>,
    /// `max_running_requests`. Note: echoes the CLI value, which can exceed the effective one.
    pub max_running_requests: Option<u64>,
    /// `context_length` (CLI override; `null` = model default).
    pub context_length: Option<u64>,
    /// `max_req_input_len` (tokens).
    pub max_req_input_len: Option<u64>,
    /// `chunked_prefill_size` (tokens).
    pub chunked_prefill_size: Option<u64>,
    /// `model_path`.
    pub model_path: Option<String>,
}

impl SglangServerInfo {
    /// Spec §3.2 step 2: a `/get_server_info` answer with `max_total_num_tokens` is SGLang.
    pub fn is_sglang(&self) -> bool {
        self.max_total_num_tokens.is_some()
    }
}

/// Parse SGLang `/get_server_info`. Fields are looked up at the top level first, then in
/// `server_args`, then in the first `internal_states[]` entry.
pub fn parse_sglang_server_info(body: &str) -> Result<SglangServerInfo, String> {
    let obj = parse_object(body, "/get_server_info")?;
    let server_args = obj.get("server_args").and_then(Value::as_object);
    let internal = obj
        .get("internal_states")
        .and_then(Value::as_array)
        .and_then(|a| a.first())
        .and_then(Value::as_object);
    let field = |k: &str| -> Option<&Value> {
        [Some(&obj), server_args, internal]
            .into_iter()
            .flatten()
            .find_map(|m| m.get(k).filter(|v| !v.is_null()))
    };
    Ok(SglangServerInfo {
        version: field("version").and_then(as_string),
        max_total_num_tokens: field("max_total_num_tokens").and_then(as_pos_u64),
        max_running_requests: field("max_running_requests").and_then(as_pos_u64),
        context_length: field("context_length").and_then(as_pos_u64),
        max_req_input_len: field("max_req_input_len").and_then(as_pos_u64),
        chunked_prefill_size: field("chunked_prefill_size").and_then(as_pos_u64),
        model_path: field("model_path").and_then(as_string),
    })
}

/// Parsed SGLang `/get_model_info`.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
pub struct SglangModelInfo {
    /// `max_context_length` (tokens).
    pub max_context_length: Option<u64>,
    /// `max_req_input_len` (tokens): the largest prompt a request may carry.
    pub max_req_input_len: Option<u64>,
    /// `served_model_name`.
    pub served_model_name: Option<String>,
    /// `model_path`.
    pub model_path: Option<String>,
}

impl SglangModelInfo {
    /// Prompt-size limit: the SMALLER of `max_context_length` and `max_req_input_len`
    /// (fixture: 414382 vs 131066 → 131066).
    pub fn prompt_limit(&self) -> Option<u64> {
        match (self.max_context_length, self.max_req_input_len) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// Parse SGLang `/get_model_info`.
pub fn parse_sglang_model_info(body: &str) -> Result<SglangModelInfo, String> {
    let obj = parse_object(body, "/get_model_info")?;
    Ok(SglangModelInfo {
        max_context_length: obj.get("max_context_length").and_then(as_pos_u64),
        max_req_input_len: obj.get("max_req_input_len").and_then(as_pos_u64),
        served_model_name: obj.get("served_model_name").and_then(as_string),
        model_path: obj.get("model_path").and_then(as_string),
    })
}

/// Parsed llama.cpp `/props`.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
pub struct LlamaCppProps {
    /// `default_generation_settings.n_ctx`: context PER SLOT (tokens); `None` for the router
    /// placeholder `0`.
    pub per_slot_ctx: Option<u64>,
    /// `total_slots` (parallel sequences).
    pub total_slots: Option<u64>,
    /// `build_info`, e.g. `"b6925-<commit>"`.
    pub build_info: Option<String>,
    /// `model_path`.
    pub model_path: Option<String>,
}

impl LlamaCppProps {
    /// Whole server context = per-slot context × slots.
    pub fn total_ctx(&self) -> Option<u64> {
        self.per_slot_ctx?.checked_mul(self.total_slots?)
    }
}

/// Parse llama.cpp `/props`. `n_ctx` 0 (router placeholder) is unknown, not 0.
pub fn parse_llamacpp_props(body: &str) -> Result<LlamaCppProps, String> {
    let obj = parse_object(body, "/props")?;
    let per_slot_ctx = obj
        .get("default_generation_settings")
        .and_then(|d| d.get("n_ctx"))
        .or_else(|| obj.get("n_ctx"))
        .and_then(as_pos_u64);
    Ok(LlamaCppProps {
        per_slot_ctx,
        total_slots: obj.get("total_slots").and_then(as_pos_u64),
        build_info: obj.get("build_info").and_then(as_string),
        model_path: obj.get("model_path").and_then(as_string),
    })
}

/// One llama.cpp `/slots` entry.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LlamaCppSlot {
    /// Slot id.
    pub id: u64,
    /// Context of this slot (tokens).
    pub n_ctx: Option<u64>,
    /// Whether the slot is serving a request.
    pub is_processing: bool,
    /// `next_token.n_decoded`: tokens decoded so far for the current request.
    pub n_decoded: Option<u64>,
}

/// Parse llama.cpp `/slots` (a JSON array).
pub fn parse_llamacpp_slots(body: &str) -> Result<Vec<LlamaCppSlot>, String> {
    let v: Value = serde_json::from_str(body).map_err(|e| format!("/slots: invalid JSON: {e}"))?;
    let arr = v
        .as_array()
        .ok_or_else(|| "/slots: expected a JSON array".to_string())?;
    Ok(arr
        .iter()
        .filter_map(|s| {
            Some(LlamaCppSlot {
                id: s.get("id")?.as_u64()?,
                n_ctx: s.get("n_ctx").and_then(as_pos_u64),
                is_processing: s
                    .get("is_processing")
                    .and_then(Value::as_bool)
                    .unwrap_or(false),
                n_decoded: s
                    .get("next_token")
                    .and_then(|n| n.get("n_decoded"))
                    .and_then(Value::as_u64),
            })
        })
        .collect())
}

/// Parsed TGI `/info`.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
pub struct TgiInfo {
    /// `model_id`.
    pub model_id: Option<String>,
    /// `version`.
    pub version: Option<String>,
    /// `max_input_tokens` (TGI ≥ 2; older: `max_input_length`).
    pub max_input_tokens: Option<u64>,
    /// `max_total_tokens`: prompt + generation limit per request.
    pub max_total_tokens: Option<u64>,
    /// `max_concurrent_requests` (beyond it TGI answers 429).
    pub max_concurrent_requests: Option<u64>,
    /// `max_batch_total_tokens`: KV-style token budget of a batch.
    pub max_batch_total_tokens: Option<u64>,
}

/// Parse TGI `/info`.
pub fn parse_tgi_info(body: &str) -> Result<TgiInfo, String> {
    let obj = parse_object(body, "/info")?;
    let u = |k: &str| obj.get(k).and_then(as_pos_u64);
    Ok(TgiInfo {
        model_id: obj.get("model_id").and_then(as_string),
        version: obj.get("version").and_then(as_string),
        max_input_tokens: u("max_input_tokens").or_else(|| u("max_input_length")),
        max_total_tokens: u("max_total_tokens"),
        max_concurrent_requests: u("max_concurrent_requests"),
        max_batch_total_tokens: u("max_batch_total_tokens"),
    })
}

fn parse_version_object(body: &str, what: &str) -> Result<String, String> {
    let obj = parse_object(body, what)?;
    obj.get("version")
        .and_then(as_string)
        .ok_or_else(|| format!("{what}: no string \"version\""))
}

/// vLLM `GET /version` → `{"version":"0.32.0"}` (spec §3.2 step 3: a JSON with `version` = vLLM).
pub fn parse_vllm_version(body: &str) -> Result<String, String> {
    parse_version_object(body, "/version")
}

/// Ollama `GET /api/version` → `{"version":"0.5.7"}`.
pub fn parse_ollama_version(body: &str) -> Result<String, String> {
    parse_version_object(body, "/api/version")
}

/// What the info endpoints say about a server, merged.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct EngineInfo {
    /// Engine family.
    pub engine: Engine,
    /// Engine version or llama.cpp build.
    pub version: Option<String>,
    /// Served model ids (`/v1/models`).
    pub model_ids: Vec<String>,
    /// Context length the server accepts per request (tokens).
    pub max_model_len: Option<u64>,
    /// Largest prompt a request may carry (tokens; SGLang `max_req_input_len`, TGI
    /// `max_input_tokens`).
    pub max_input_tokens: Option<u64>,
    /// KV capacity in tokens when an info endpoint states it (SGLang `max_total_num_tokens`).
    pub kv_budget_tokens: Option<u64>,
    /// Concurrency cap (SGLang `max_running_requests`, TGI `max_concurrent_requests`).
    pub max_running_requests: Option<u64>,
    /// llama.cpp parallel slots.
    pub slots: Option<u64>,
    /// llama.cpp per-slot context (tokens).
    pub per_slot_ctx: Option<u64>,
}

impl EngineInfo {
    /// Empty info for `engine`.
    pub fn new(engine: Engine) -> Self {
        EngineInfo {
            engine,
            version: None,
            model_ids: Vec::new(),
            max_model_len: None,
            max_input_tokens: None,
            kv_budget_tokens: None,
            max_running_requests: None,
            slots: None,
            per_slot_ctx: None,
        }
    }

    /// Merge `/v1/models`: model ids, and the first model's served context (spec §3.2 step 1
    /// reads `data[0].max_model_len`).
    pub fn apply_models(&mut self, m: &ModelsInfo) {
        self.model_ids = m.model_ids();
        if let Some(ctx) = m.models.first().and_then(ModelEntry::served_context) {
            self.max_model_len = Some(ctx);
        }
    }

    /// Merge SGLang `/get_server_info` (spec §3.2 step 2: version, KV budget, concurrency cap;
    /// `context_length` replaces the model length).
    pub fn apply_sglang_server_info(&mut self, i: &SglangServerInfo) {
        self.version = i.version.clone().or(self.version.take());
        self.kv_budget_tokens = i.max_total_num_tokens.or(self.kv_budget_tokens);
        self.max_running_requests = i.max_running_requests.or(self.max_running_requests);
        self.max_model_len = i.context_length.or(self.max_model_len);
        self.max_input_tokens = i.max_req_input_len.or(self.max_input_tokens);
    }

    /// Merge SGLang `/get_model_info`: the prompt limit is the smaller of `max_context_length`
    /// and `max_req_input_len`.
    pub fn apply_sglang_model_info(&mut self, i: &SglangModelInfo) {
        if let Some(limit) = i.prompt_limit() {
            self.max_input_tokens = Some(self.max_input_tokens.map_or(limit, |x| x.min(limit)));
        }
        if self.max_model_len.is_none() {
            self.max_model_len = i.max_context_length;
        }
    }

    /// Merge llama.cpp `/props`: slots, per-slot context (which is the per-request limit and so
    /// replaces the model length), build as version.
    pub fn apply_llamacpp_props(&mut self, p: &LlamaCppProps) {
        self.slots = p.total_slots.or(self.slots);
        if let Some(c) = p.per_slot_ctx {
            self.per_slot_ctx = Some(c);
            self.max_model_len = Some(c);
        }
        self.version = p.build_info.clone().or(self.version.take());
    }

    /// Merge TGI `/info`.
    pub fn apply_tgi_info(&mut self, t: &TgiInfo) {
        self.version = t.version.clone().or(self.version.take());
        if self.model_ids.is_empty() {
            if let Some(id) = &t.model_id {
                self.model_ids.push(id.clone());
            }
        }
        self.max_input_tokens = t.max_input_tokens.or(self.max_input_tokens);
        self.max_model_len = t.max_total_tokens.or(self.max_model_len);
        self.max_running_requests = t.max_concurrent_requests.or(self.max_running_requests);
    }
}
