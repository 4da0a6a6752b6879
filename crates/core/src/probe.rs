//! Startup checks against the server: reachability, the API key, which model, which engine,
//! how long a sequence may be, whether `/metrics` is usable, and the KV-cache budget.
//!
//! Engine detection uses the server's own endpoints (seed spec §3.2, extended): `/v1/models`
//! (required), SGLang `/get_server_info` + `/get_model_info`, vLLM `/version`, llama.cpp `/props`,
//! TGI `/info`, Ollama `/api/version`, and the families present on `/metrics`
//! ([`servebench_metrics::detect_engine_from_metrics`]). Anything else is a generic
//! OpenAI-compatible proxy: metrics off, with a visible warning. Every failure of a required step
//! becomes one clear line.

use std::time::Duration;

use servebench_metrics::{
    detect_engine_from_metrics, format_kv_event, format_sglang_kv_event, format_thousands,
    parse_llamacpp_props, parse_ollama_version, parse_sglang_model_info, parse_sglang_server_info,
    parse_tgi_info, parse_v1_models_keeping, parse_vllm_version, resolve_vllm_kv_budget,
    sglang_kv_budget, Engine, EngineInfo, KvBudget, LlamaCppProps, ModelEntry, ModelsInfo, Scrape,
    SglangServerInfo, TgiInfo,
};

use servebench_client::target::{HttpClient, PROBE_TIMEOUT};
use servebench_client::HttpError;

/// Timeout of the optional info endpoints (a proxy may hang on unknown paths).
const INFO_TIMEOUT: Duration = Duration::from_secs(5);

/// What the server told us at startup.
#[derive(Clone, Debug)]
pub struct ServerInfo {
    /// Engine family; [`Engine::OpenAiProxy`] when nothing identified it.
    pub engine: Engine,
    /// Name for `metadata.engine` (`vllm`, `sglang`, `llamacpp`, `tgi`, `ollama`, `openai_proxy`,
    /// or `servebench-sim` for the built-in simulator's neutral personality).
    pub engine_name: String,
    /// Engine version, when reported.
    pub engine_version: Option<String>,
    /// Model ids from `/v1/models`, in server order (the first
    /// [`servebench_metrics::MAX_KEPT_MODELS`] and the requested one).
    pub models: Vec<String>,
    /// Entries `/v1/models` listed, kept in `models` or not.
    pub models_total: usize,
    /// The model the benchmark uses.
    pub model: String,
    /// Maximum sequence length (prompt + output) of that model, tokens, when reported.
    pub max_model_len: Option<u64>,
    /// Largest prompt a request may carry, tokens (SGLang `max_req_input_len`, TGI).
    pub max_input_tokens: Option<u64>,
    /// Server's concurrency cap (SGLang `max_running_requests`, TGI `max_concurrent_requests`).
    pub max_running_requests: Option<u64>,
    /// llama.cpp slots and per-slot context.
    pub slots: Option<(u64, u64)>,
    /// SGLang `max_total_num_tokens` (KV capacity in tokens).
    pub sglang_kv_tokens: Option<u64>,
    /// `/metrics` parsed and usable for this engine.
    pub metrics_available: bool,
    /// Why metrics are not used (empty when they are).
    pub metrics_warning: String,
    /// The startup scrape (for the KV budget).
    pub startup_scrape: Option<Scrape>,
    /// Warnings for the event log.
    pub warnings: Vec<String>,
}

/// What the user can do about a failed startup check or a missing KV budget. Displayed in
/// plain words; the CLI names its own flag instead ([`Hint::words`] is the neutral text).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hint {
    /// Give the API key the server requires.
    ApiKey,
    /// Check the server's address (host, port, URL).
    Address,
    /// Check the URL and its path.
    UrlPath,
    /// Give the KV cache budget explicitly.
    KvBudget,
}

impl Hint {
    /// The hint in plain words, without any flag name.
    pub fn words(self) -> &'static str {
        match self {
            Hint::ApiKey => "give an API key",
            Hint::Address => "is it running, and is the server address right?",
            Hint::UrlPath => "check the URL and its path",
            Hint::KvBudget => "set the KV cache budget explicitly",
        }
    }
}

/// A startup failure, phrased for the user: the problem and, when there is one, what to do.
/// Displayed as `message; hint` with the hint's neutral words ([`Hint::words`]).
#[derive(Clone, Debug, PartialEq)]
pub struct ProbeError {
    /// What went wrong.
    pub message: String,
    /// What to do about it.
    pub hint: Option<Hint>,
}

impl ProbeError {
    /// A failure without a hint.
    pub fn new(message: impl Into<String>) -> ProbeError {
        ProbeError {
            message: message.into(),
            hint: None,
        }
    }

    /// A failure with a hint.
    pub fn hinted(message: impl Into<String>, hint: Hint) -> ProbeError {
        ProbeError {
            message: message.into(),
            hint: Some(hint),
        }
    }
}

impl std::fmt::Display for ProbeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.hint {
            Some(h) => write!(f, "{}; {}", self.message, h.words()),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for ProbeError {}

/// Explains a failed `/v1/models` call in one line, with what to do about it.
pub fn explain_models_error(e: &HttpError, has_key: bool) -> ProbeError {
    match e {
        HttpError::Connect { url, detail } => ProbeError::hinted(
            format!("cannot reach the server at {url} ({detail})"),
            Hint::Address,
        ),
        HttpError::Status {
            status: s @ (401 | 403),
            url,
            body,
            ..
        } => {
            if has_key {
                ProbeError::new(format!(
                    "the server rejected the API key (HTTP {s} from {url}: {body})"
                ))
            } else {
                ProbeError::hinted(
                    format!("the server requires an API key (HTTP {s} from {url}: {body})"),
                    Hint::ApiKey,
                )
            }
        }
        HttpError::Status {
            status: 404, url, ..
        } => ProbeError::hinted(
            format!("{url} returned HTTP 404: this does not look like an OpenAI-compatible server"),
            Hint::UrlPath,
        ),
        other => ProbeError::new(format!("cannot list models: {other}")),
    }
}

/// A list of server-supplied ids for a message: the first `show` (each without control
/// characters, cut at 80 characters), then `… (N in all)` when there are more — 200,000 model
/// ids are never printed on one line (issue 17).
pub fn summarize_ids(ids: &[String], show: usize) -> String {
    summarize_ids_of(ids, ids.len(), show)
}

/// [`summarize_ids`] of a list of which `ids` are the kept part of `total` entries (a parsed
/// `/v1/models` keeps [`servebench_metrics::MAX_KEPT_MODELS`]).
pub fn summarize_ids_of(ids: &[String], total: usize, show: usize) -> String {
    let total = total.max(ids.len());
    let mut out: Vec<String> = ids
        .iter()
        .take(show)
        .map(|i| servebench_client::error::one_line(i, 80))
        .collect();
    if total > show {
        out.push(format!("… ({total} in all)"));
    }
    out.join(", ")
}

/// Parses `/v1/models` and picks the model: the requested one must be served; default the first.
pub fn choose_model(
    models: &ModelsInfo,
    requested: Option<&str>,
    server: &str,
) -> Result<String, ProbeError> {
    if models.models.is_empty() {
        return Err(ProbeError::new(format!(
            "{server} lists no models (expected an OpenAI `data` list in /v1/models)"
        )));
    }
    match requested {
        Some(m) => {
            if models.get(m).is_some() {
                Ok(m.to_string())
            } else {
                Err(ProbeError::new(format!(
                    "model {:?} is not served by {server}; available: {}",
                    servebench_client::error::one_line(m, 200),
                    summarize_ids_of(&models.model_ids(), models.total, 10)
                )))
            }
        }
        None => Ok(models.models[0].id.clone()),
    }
}

async fn get_text_opt(client: &HttpClient, path: &str) -> Option<String> {
    client.get_text(path, INFO_TIMEOUT).await.ok()
}

/// Why a `/metrics` scrape gave nothing.
#[derive(Clone, Debug, PartialEq)]
pub struct ScrapeError {
    /// One-line reason.
    pub message: String,
    /// The page overran its size cap ([`servebench_client::target::MAX_BODY_BYTES`]) or its
    /// time cap while it was arriving ([`servebench_client::HttpError::is_overrun`]): scraping it again would cost the client the same (telemetry disables the
    /// source).
    pub overrun: bool,
}

impl std::fmt::Display for ScrapeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// Fetches and parses `/metrics` (at most [`servebench_client::target::MAX_BODY_BYTES`], within
/// `timeout`); `Err` carries why it is unusable. An empty page (no sample at all) is an error,
/// never a sample of zeros.
pub async fn scrape_metrics_typed(
    client: &HttpClient,
    timeout: Duration,
) -> Result<Scrape, ScrapeError> {
    let text = client
        .get_text("/metrics", timeout)
        .await
        .map_err(|e| ScrapeError {
            message: e.to_string(),
            overrun: e.is_overrun(),
        })?;
    let scrape = Scrape::parse(&text).map_err(|e| ScrapeError {
        message: format!("/metrics is not Prometheus text: {e}"),
        overrun: false,
    })?;
    if scrape.is_empty() {
        return Err(ScrapeError {
            message: "/metrics answered an empty page (no samples)".into(),
            overrun: false,
        });
    }
    Ok(scrape)
}

/// [`scrape_metrics_typed`] with the reason as text.
pub async fn scrape_metrics(client: &HttpClient, timeout: Duration) -> Result<Scrape, String> {
    scrape_metrics_typed(client, timeout)
        .await
        .map_err(|e| e.message)
}

/// Lists models, picks the model, identifies the engine and its limits, checks `/metrics`.
/// Phases: [`list_models`], [`fetch_info`], [`identify`], [`engine_info`], [`judge_metrics`].
pub async fn probe_server(
    client: &HttpClient,
    requested_model: Option<&str>,
) -> Result<ServerInfo, ProbeError> {
    let (models, model) = list_models(client, requested_model).await?;
    let entry = models.get(&model).cloned();
    let sim_neutral = entry.as_ref().and_then(|e| e.owned_by.as_deref()) == Some("servebench-sim");
    let answers = fetch_info(client).await;
    let engine = identify(&answers, sim_neutral);
    let mut info = engine_info(engine, &answers, &models, entry.as_ref());
    let engine_name = if sim_neutral && engine == Engine::OpenAiProxy {
        info.version = answers.vllm_version.clone();
        "servebench-sim".to_string()
    } else {
        engine.as_str().to_string()
    };
    let (metrics_available, metrics_warning, startup_scrape) =
        judge_metrics(answers.metrics, answers.metrics_engine, engine, sim_neutral);
    let mut warnings = Vec::new();
    if engine == Engine::OpenAiProxy && !sim_neutral {
        warnings.push("engine not identified: treating the server as a generic OpenAI-compatible proxy (no server metrics)".into());
    }
    if info.max_model_len.is_none() {
        warnings.push(
            "the server does not report its maximum model length; cells are not checked against it"
                .into(),
        );
    }
    let max_model_len = match (info.max_model_len, info.max_input_tokens) {
        (Some(a), Some(b)) if engine == Engine::Sglang => Some(a.min(b)),
        (a, _) => a,
    };
    Ok(ServerInfo {
        engine,
        engine_name,
        engine_version: info.version.clone(),
        models: info.model_ids.clone(),
        models_total: models.total,
        model,
        max_model_len,
        max_input_tokens: info.max_input_tokens,
        max_running_requests: info.max_running_requests,
        slots: info.slots.zip(info.per_slot_ctx),
        sglang_kv_tokens: info.kv_budget_tokens,
        metrics_available,
        metrics_warning,
        startup_scrape,
        warnings,
    })
}

/// Phase 1: `/v1/models` (required), parsed, and the model chosen from it.
async fn list_models(
    client: &HttpClient,
    requested_model: Option<&str>,
) -> Result<(ModelsInfo, String), ProbeError> {
    let has_key = client
        .target()
        .api_key
        .as_deref()
        .is_some_and(|k| !k.is_empty());
    let models_text = client
        .get_text("/v1/models", PROBE_TIMEOUT)
        .await
        .map_err(|e| explain_models_error(&e, has_key))?;
    let models = parse_v1_models_keeping(&models_text, requested_model).map_err(|e| {
        ProbeError::new(format!(
            "{} is not an OpenAI model list: {e}",
            client.target().url("/v1/models")
        ))
    })?;
    let model = choose_model(&models, requested_model, &client.target().server_label)?;
    Ok((models, model))
}

/// What the optional info endpoints and `/metrics` answered (parsed; `None` = no such engine).
struct InfoAnswers {
    sglang: Option<SglangServerInfo>,
    sglang_model: Option<String>,
    llama: Option<LlamaCppProps>,
    tgi: Option<TgiInfo>,
    vllm_version: Option<String>,
    ollama_version: Option<String>,
    metrics: Result<Scrape, String>,
    metrics_engine: Option<Engine>,
}

/// Phase 2: the optional info endpoints and `/metrics`, concurrently, each parsed and kept only
/// when it identifies its engine.
async fn fetch_info(client: &HttpClient) -> InfoAnswers {
    let (server_info, model_info, version, props, tgi, ollama, metrics) = tokio::join!(
        get_text_opt(client, "/get_server_info"),
        get_text_opt(client, "/get_model_info"),
        get_text_opt(client, "/version"),
        get_text_opt(client, "/props"),
        get_text_opt(client, "/info"),
        get_text_opt(client, "/api/version"),
        scrape_metrics(client, INFO_TIMEOUT),
    );
    let metrics_engine = metrics.as_ref().ok().and_then(detect_engine_from_metrics);
    InfoAnswers {
        sglang: server_info
            .as_deref()
            .and_then(|b| parse_sglang_server_info(b).ok())
            .filter(|i| i.is_sglang()),
        sglang_model: model_info,
        llama: props
            .as_deref()
            .and_then(|b| parse_llamacpp_props(b).ok())
            .filter(|p| p.total_slots.is_some() || p.per_slot_ctx.is_some()),
        tgi: tgi
            .as_deref()
            .and_then(|b| parse_tgi_info(b).ok())
            .filter(|t| t.model_id.is_some() && t.max_total_tokens.is_some()),
        vllm_version: version.as_deref().and_then(|b| parse_vllm_version(b).ok()),
        ollama_version: ollama.as_deref().and_then(|b| parse_ollama_version(b).ok()),
        metrics,
        metrics_engine,
    }
}

/// Phase 3: the engine, in order of evidence: SGLang, llama.cpp and TGI info, the `/metrics`
/// families, vLLM `/version` (not for the simulator's neutral personality), Ollama, else a
/// generic OpenAI-compatible proxy.
fn identify(a: &InfoAnswers, sim_neutral: bool) -> Engine {
    if a.sglang.is_some() {
        Engine::Sglang
    } else if a.llama.is_some() {
        Engine::LlamaCpp
    } else if a.tgi.is_some() {
        Engine::Tgi
    } else if let Some(e) = a.metrics_engine {
        e
    } else if a.vllm_version.is_some() && !sim_neutral {
        Engine::Vllm
    } else if a.ollama_version.is_some() {
        Engine::Ollama
    } else {
        Engine::OpenAiProxy
    }
}

/// Phase 4: the engine's limits and version from `/v1/models` (the model's `entry` first)
/// and then its own info endpoints.
fn engine_info(
    engine: Engine,
    a: &InfoAnswers,
    models: &ModelsInfo,
    entry: Option<&ModelEntry>,
) -> EngineInfo {
    let mut info = EngineInfo::new(engine);
    info.apply_models(models);
    if let Some(e) = entry {
        info.max_model_len = e.served_context().or(info.max_model_len);
    }
    match engine {
        Engine::Sglang => {
            if let Some(i) = &a.sglang {
                info.apply_sglang_server_info(i);
            }
            if let Some(mi) = a
                .sglang_model
                .as_deref()
                .and_then(|b| parse_sglang_model_info(b).ok())
            {
                info.apply_sglang_model_info(&mi);
            }
        }
        Engine::LlamaCpp => {
            if let Some(p) = &a.llama {
                info.apply_llamacpp_props(p);
            }
        }
        Engine::Tgi => {
            if let Some(t) = &a.tgi {
                info.apply_tgi_info(t);
            }
        }
        Engine::Vllm => info.version = a.vllm_version.clone(),
        Engine::Ollama => info.version = a.ollama_version.clone(),
        Engine::OpenAiProxy => {}
    }
    info
}

/// Phase 5: `/metrics` is usable when it parses and belongs to the detected engine. Returns
/// (usable, why not, the startup scrape).
fn judge_metrics(
    metrics: Result<Scrape, String>,
    metrics_engine: Option<Engine>,
    engine: Engine,
    sim_neutral: bool,
) -> (bool, String, Option<Scrape>) {
    match metrics {
        Ok(s) => match (metrics_engine, engine) {
            (Some(m), e) if m == e => (true, String::new(), Some(s)),
            (Some(m), e) => (
                false,
                format!("/metrics looks like {} but the server was identified as {}; server metrics ignored", m.as_str(), e.as_str()),
                None,
            ),
            (None, _) => (false, "/metrics has no known engine metrics; readiness and throughput use the OpenAI stream only".into(), None),
        },
        Err(e) => {
            let why = match engine {
                Engine::OpenAiProxy if sim_neutral => {
                    "the built-in simulator's default personality has no /metrics (see servebench sim --personality)".to_string()
                }
                Engine::OpenAiProxy => format!(
                    "only the OpenAI /v1 endpoints respond (generic proxy?); server metrics are disabled ({e})"
                ),
                Engine::Sglang => format!("SGLang /metrics unavailable ({e}); restart the server with --enable-metrics"),
                Engine::LlamaCpp => format!("llama.cpp /metrics unavailable ({e}); start llama-server with --metrics"),
                _ => format!("/metrics unavailable ({e})"),
            };
            (false, why, None)
        }
    }
}

/// The KV budget decision: tokens (0 = unknown) and the event-log line.
#[derive(Clone, Debug, PartialEq)]
pub struct KvDecision {
    /// Budget in tokens (0 = unknown: no capacity skipping).
    pub tokens: u64,
    /// Event line (seed format) or warning.
    pub event: String,
    /// Where it came from (`argument`, `vllm_metrics`, `sglang_server_info`, `llamacpp_slots`, `none`).
    pub source: &'static str,
    /// Details when resolved from vLLM / SGLang.
    pub budget: Option<KvBudget>,
}

/// Resolves the KV budget (spec §3.3): the explicit budget (`kv_budget_arg` > 0) wins; else vLLM `cache_config_info`
/// (`kv_cache_size_tokens`, else `num_gpu_blocks × block_size`) × CP size (`dcp_size_arg`, info
/// labels, or the local vLLM process's `--decode-context-parallel-size`), SGLang
/// `max_total_num_tokens` × DCP, llama.cpp slots × per-slot context.
pub fn resolve_kv_budget(
    info: &ServerInfo,
    kv_budget_arg: u64,
    dcp_size_arg: u64,
    local_process_cp: Option<u64>,
) -> KvDecision {
    if kv_budget_arg > 0 {
        return KvDecision {
            tokens: kv_budget_arg,
            event: format!(
                "KV cache budget manual: {} tokens",
                format_thousands(kv_budget_arg)
            ),
            source: "argument",
            budget: None,
        };
    }
    let dcp = (dcp_size_arg > 0).then_some(dcp_size_arg);
    match info.engine {
        Engine::Vllm => match &info.startup_scrape {
            Some(s) => match resolve_vllm_kv_budget(s, dcp, local_process_cp, info.max_model_len) {
                Ok(b) => KvDecision {
                    tokens: b.tokens,
                    event: format_kv_event(&b),
                    source: "vllm_metrics",
                    budget: Some(b),
                },
                Err(e) => KvDecision {
                    tokens: 0,
                    event: e.warning(),
                    source: "none",
                    budget: None,
                },
            },
            None => KvDecision {
                tokens: 0,
                event: format!(
                    "KV cache budget not available (no vLLM metrics); {}",
                    Hint::KvBudget.words()
                ),
                source: "none",
                budget: None,
            },
        },
        Engine::Sglang => match info.sglang_kv_tokens {
            Some(t) => {
                let b = sglang_kv_budget(t, dcp);
                KvDecision {
                    tokens: b.tokens,
                    event: format_sglang_kv_event(&b),
                    source: "sglang_server_info",
                    budget: Some(b),
                }
            }
            None => KvDecision {
                tokens: 0,
                event: format!(
                    "KV cache budget not reported by SGLang; {}",
                    Hint::KvBudget.words()
                ),
                source: "none",
                budget: None,
            },
        },
        Engine::LlamaCpp => match info.slots {
            Some((slots, per_slot)) => {
                let t = slots * per_slot;
                KvDecision {
                    tokens: t,
                    event: format!(
                        "KV cache budget from llama.cpp /props: {} tokens ({slots} slots x {} per slot)",
                        format_thousands(t),
                        format_thousands(per_slot)
                    ),
                    source: "llamacpp_slots",
                    budget: None,
                }
            }
            None => KvDecision {
                tokens: 0,
                event: format!(
                    "KV cache budget not reported by llama.cpp; {}",
                    Hint::KvBudget.words()
                ),
                source: "none",
                budget: None,
            },
        },
        _ => KvDecision {
            tokens: 0,
            event: format!(
                "KV cache budget unknown for this server; {}",
                Hint::KvBudget.words()
            ),
            source: "none",
            budget: None,
        },
    }
}

/// CP size of a local vLLM serving on `port`, read from its command line
/// (`--decode-context-parallel-size N` / `-dcp N`) in `/proc/*/cmdline` (spec §3.3 step 3).
pub fn local_vllm_cp_size(port: u16) -> Option<u64> {
    let dir = std::fs::read_dir("/proc").ok()?;
    for entry in dir.flatten() {
        let Ok(raw) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = raw
            .split(|&b| b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if !args.iter().any(|a| a.contains("vllm")) {
            continue;
        }
        let port_s = port.to_string();
        let has_port = args.windows(2).any(|w| w[0] == "--port" && w[1] == port_s)
            || args.iter().any(|a| *a == format!("--port={port}"));
        if !has_port {
            continue;
        }
        for w in args.windows(2) {
            if w[0] == "--decode-context-parallel-size" || w[0] == "-dcp" {
                if let Ok(n) = w[1].parse() {
                    return Some(n);
                }
            }
        }
        for a in &args {
            if let Some(v) = a.strip_prefix("--decode-context-parallel-size=") {
                if let Ok(n) = v.parse() {
                    return Some(n);
                }
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_choice() {
        let m = servebench_metrics::parse_v1_models(
            r#"{"data":[{"id":"a","max_model_len":2048},{"id":"b"}]}"#,
        )
        .unwrap();
        assert_eq!(choose_model(&m, None, "s").unwrap(), "a");
        assert_eq!(choose_model(&m, Some("b"), "s").unwrap(), "b");
        let e = choose_model(&m, Some("c"), "s").unwrap_err().message;
        assert!(e.contains("available: a, b"), "{e}");
        assert!(choose_model(&ModelsInfo::default(), None, "s").is_err());
    }

    fn info(engine: Engine) -> ServerInfo {
        ServerInfo {
            engine,
            engine_name: engine.as_str().into(),
            engine_version: None,
            models: vec![],
            models_total: 0,
            model: "m".into(),
            max_model_len: Some(2048),
            max_input_tokens: None,
            max_running_requests: None,
            slots: None,
            sglang_kv_tokens: None,
            metrics_available: true,
            metrics_warning: String::new(),
            startup_scrape: None,
            warnings: vec![],
        }
    }

    #[test]
    fn kv_budget_sources() {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/data/engines/local-captures/vllm-metrics.txt"
        ))
        .unwrap();
        let mut i = info(Engine::Vllm);
        i.startup_scrape = Some(Scrape::parse(&text).unwrap());
        let d = resolve_kv_budget(&i, 0, 0, None);
        assert_eq!(d.tokens, 524_288);
        assert!(
            d.event
                .starts_with("KV cache budget from vLLM metrics: 524,288 tokens"),
            "{}",
            d.event
        );
        let d = resolve_kv_budget(&i, 0, 2, None);
        assert_eq!(d.tokens, 1_048_576);
        assert!(
            d.event.ends_with("× CP 2; CP source: argument)"),
            "{}",
            d.event
        );
        assert_eq!(resolve_kv_budget(&i, 1000, 2, None).tokens, 1000);
        let mut s = info(Engine::Sglang);
        s.sglang_kv_tokens = Some(570_979);
        assert_eq!(resolve_kv_budget(&s, 0, 0, None).tokens, 570_979);
        let mut l = info(Engine::LlamaCpp);
        l.slots = Some((8, 2048));
        let d = resolve_kv_budget(&l, 0, 0, None);
        assert_eq!(d.tokens, 16384);
        assert_eq!(
            resolve_kv_budget(&info(Engine::OpenAiProxy), 0, 0, None).tokens,
            0
        );
    }
}
