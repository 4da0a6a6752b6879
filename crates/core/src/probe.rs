//! Startup checks against the server: is it reachable, does the key work, which model, how long
//! may a sequence be. Every failure becomes one clear line.

use serde_json::Value;

use crate::error::HttpError;
use crate::target::{HttpClient, PROBE_TIMEOUT};

/// What the server told us at startup.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServerInfo {
    /// Engine name for `metadata.engine`.
    pub engine: String,
    /// Engine version, when reported.
    pub engine_version: Option<String>,
    /// Model ids from `/v1/models`, in server order.
    pub models: Vec<String>,
    /// The model the benchmark uses.
    pub model: String,
    /// Maximum sequence length (prompt + output) of that model, tokens, when reported.
    pub max_model_len: Option<u64>,
    /// Warnings for the event log.
    pub warnings: Vec<String>,
}

/// A startup failure, phrased for the user.
#[derive(Clone, Debug, thiserror::Error, PartialEq)]
#[error("{0}")]
pub struct ProbeError(pub String);

/// Parsed `/v1/models` entry.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelEntry {
    /// Model id.
    pub id: String,
    /// `max_model_len` (vLLM), `meta.n_ctx` (llama.cpp serving context), or the parent's for LoRA.
    pub max_model_len: Option<u64>,
    /// `owned_by`.
    pub owned_by: Option<String>,
}

/// Parses an OpenAI `/v1/models` body (`data[]`). LoRA adapters (vLLM lists them with a
/// `parent`) inherit their parent's `max_model_len`. llama.cpp's `meta.n_ctx_train` is the
/// *trained* context and is ignored; its served context is `meta.n_ctx` when present.
pub fn parse_models(v: &Value) -> Vec<ModelEntry> {
    let Some(data) = v.get("data").and_then(Value::as_array) else {
        return Vec::new();
    };
    let mut out: Vec<(ModelEntry, Option<String>)> = data
        .iter()
        .filter_map(|m| {
            let id = m.get("id")?.as_str()?.to_string();
            let len = m
                .get("max_model_len")
                .and_then(Value::as_u64)
                .or_else(|| m.pointer("/meta/n_ctx").and_then(Value::as_u64))
                .filter(|&n| n > 0);
            let parent = m.get("parent").and_then(Value::as_str).map(str::to_string);
            let owned_by = m
                .get("owned_by")
                .and_then(Value::as_str)
                .map(str::to_string);
            Some((
                ModelEntry {
                    id,
                    max_model_len: len,
                    owned_by,
                },
                parent,
            ))
        })
        .collect();
    let lens: Vec<(String, Option<u64>)> = out
        .iter()
        .map(|(m, _)| (m.id.clone(), m.max_model_len))
        .collect();
    for (m, parent) in &mut out {
        if m.max_model_len.is_none() {
            if let Some(p) = parent {
                m.max_model_len = lens.iter().find(|(id, _)| id == p).and_then(|(_, l)| *l);
            }
        }
    }
    out.into_iter().map(|(m, _)| m).collect()
}

/// Explains a failed `/v1/models` call in one line.
pub fn explain_models_error(e: &HttpError, has_key: bool) -> String {
    match e {
        HttpError::Connect { url, detail } => {
            format!("cannot reach the server at {url} ({detail}); is it running, and are --url/--host/--port right?")
        }
        HttpError::Status {
            status: 401 | 403,
            url,
            body,
            ..
        } => {
            if has_key {
                format!(
                    "the server rejected the API key (HTTP {} from {url}: {body})",
                    e.status().unwrap_or(0)
                )
            } else {
                format!(
                    "the server requires an API key (HTTP {} from {url}: {body}); pass --api-key",
                    e.status().unwrap_or(0)
                )
            }
        }
        HttpError::Status {
            status: 404, url, ..
        } => {
            format!("{url} returned HTTP 404: this does not look like an OpenAI-compatible server (check --url and its path)")
        }
        other => format!("cannot list models: {other}"),
    }
}

/// Lists models, picks the model (the requested one must be served; default: the first), and
/// identifies the engine from `/version` and the model list.
pub async fn probe_server(
    client: &HttpClient,
    requested_model: Option<&str>,
) -> Result<ServerInfo, ProbeError> {
    let has_key = client
        .target()
        .api_key
        .as_deref()
        .is_some_and(|k| !k.is_empty());
    let models_v = client
        .get_json("/v1/models", PROBE_TIMEOUT)
        .await
        .map_err(|e| ProbeError(explain_models_error(&e, has_key)))?;
    let models = parse_models(&models_v);
    if models.is_empty() {
        return Err(ProbeError(format!(
            "{} lists no models (expected an OpenAI `data` list)",
            client.target().url("/v1/models")
        )));
    }
    let chosen = match requested_model {
        Some(m) => models.iter().find(|e| e.id == m).cloned().ok_or_else(|| {
            let ids: Vec<&str> = models.iter().map(|e| e.id.as_str()).take(10).collect();
            ProbeError(format!(
                "model {m:?} is not served by {}; available: {}",
                client.target().server_label,
                ids.join(", ")
            ))
        })?,
        None => models[0].clone(),
    };
    let mut info = ServerInfo {
        engine: "openai_proxy".into(),
        engine_version: None,
        models: models.iter().map(|m| m.id.clone()).collect(),
        model: chosen.id.clone(),
        max_model_len: chosen.max_model_len,
        warnings: Vec::new(),
    };
    if chosen.owned_by.as_deref() == Some("servebench-sim") {
        info.engine = "servebench-sim".into();
    }
    if let Ok(v) = client.get_json("/version", PROBE_TIMEOUT).await {
        if let Some(ver) = v.get("version").and_then(Value::as_str) {
            info.engine_version = Some(ver.to_string());
            if info.engine == "openai_proxy" {
                info.engine = "vllm".into();
            }
        }
    }
    if info.max_model_len.is_none() {
        info.warnings.push("the server does not report max_model_len; cells are not checked against the model length".into());
    }
    Ok(info)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn models_with_lora_parent() {
        let v = json!({"data": [
            {"id": "base", "max_model_len": 2048, "owned_by": "vllm"},
            {"id": "lora1", "parent": "base", "max_model_len": null},
        ]});
        let m = parse_models(&v);
        assert_eq!(m[1].max_model_len, Some(2048));
    }

    #[test]
    fn llamacpp_models_use_served_context() {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/data/engines/llamacpp-v1-models-readme.json"
        ))
        .unwrap();
        let v: Value = serde_json::from_str(&text).unwrap();
        let m = parse_models(&v);
        assert!(!m.is_empty());
        // The README example carries only n_ctx_train (the trained context), which must not be used.
        assert_ne!(m[0].max_model_len, Some(131072));
    }
}
