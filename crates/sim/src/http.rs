//! The OpenAI-compatible HTTP surface (axum).

use std::convert::Infallible;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use bytes::Bytes;
use serde::Deserialize;
use tokio::sync::{mpsc, oneshot};

use crate::config::Personality;
use crate::engine::{NewRequest, Sink};
use crate::format::Endpoint;
use crate::personality;
use crate::stats::StatsCounters as S;
use crate::tokenizer::{self, PromptSink, TemplateMessage, TokenSink};
use crate::Shared;

/// Largest request body accepted, in bytes.
const MAX_BODY_BYTES: usize = 256 << 20;

type AppState = Arc<Shared>;

pub(crate) fn router(shared: AppState) -> Router {
    let p = shared.cfg.personality;
    let mut r = Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/completions", post(completions))
        .route("/v1/models", get(models))
        .route("/health", get(health));
    match p {
        Personality::Neutral | Personality::Vllm => {
            r = r.route("/version", get(version));
            if shared.cfg.tokenize_endpoint {
                r = r.route("/tokenize", post(tokenize));
            }
        }
        Personality::Sglang => {
            r = r
                .route("/get_server_info", get(sglang_server_info))
                .route("/get_model_info", get(sglang_model_info));
        }
        Personality::Llamacpp => {
            r = r
                .route("/props", get(llamacpp_props))
                .route("/slots", get(llamacpp_slots));
            if shared.cfg.tokenize_endpoint {
                r = r.route("/tokenize", post(llamacpp_tokenize));
            }
        }
    }
    if p.has_metrics() {
        r = r.route("/metrics", get(metrics));
    }
    let r = match p {
        Personality::Llamacpp => r.fallback(llamacpp_not_found),
        _ => r.fallback(not_found),
    };
    r.layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(shared)
}

// ---------------------------------------------------------------------------------------------
// Error bodies

fn json_response(status: StatusCode, body: String) -> Response {
    let mut resp = Response::new(Body::from(body));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// An error answer: status and JSON body.
struct ApiError {
    status: StatusCode,
    body: String,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        json_response(self.status, self.body)
    }
}

/// vLLM's flat error shape: `{"object":"error","message":..,"type":..,"param":null,"code":N}`.
fn vllm_error(status: StatusCode, kind: &str, message: &str) -> ApiError {
    let body = serde_json::json!({
        "object": "error",
        "message": message,
        "type": kind,
        "param": null,
        "code": status.as_u16(),
    });
    ApiError {
        status,
        body: body.to_string(),
    }
}

/// OpenAI's nested error shape: `{"error":{"message":..,"type":..,"param":null,"code":N}}`.
fn openai_error(status: StatusCode, kind: &str, message: &str) -> ApiError {
    let body = serde_json::json!({
        "error": {"message": message, "type": kind, "param": null, "code": status.as_u16()},
    });
    ApiError {
        status,
        body: body.to_string(),
    }
}

fn bad_request(message: &str) -> ApiError {
    vllm_error(StatusCode::BAD_REQUEST, "BadRequestError", message)
}

fn error_type(status: u16) -> &'static str {
    match status {
        400 => "BadRequestError",
        401 => "AuthenticationError",
        403 => "PermissionDeniedError",
        404 => "NotFoundError",
        408 => "TimeoutError",
        409 => "ConflictError",
        422 => "UnprocessableEntityError",
        429 => "RateLimitError",
        500 => "InternalServerError",
        502 => "BadGatewayError",
        503 => "ServiceUnavailableError",
        504 => "GatewayTimeoutError",
        _ => "APIError",
    }
}

fn check_auth(s: &Shared, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(key) = &s.cfg.api_key else {
        return Ok(());
    };
    let ok = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|v| v.trim() == key);
    if ok {
        Ok(())
    } else {
        Err(openai_error(
            StatusCode::UNAUTHORIZED,
            "AuthenticationError",
            "Unauthorized",
        ))
    }
}

fn check_model(s: &Shared, model: Option<&str>) -> Result<(), ApiError> {
    if s.cfg.personality == Personality::Llamacpp {
        // llama-server serves its one model under any requested name.
        return Ok(());
    }
    match model {
        Some(m) if m != s.cfg.model => Err(vllm_error(
            StatusCode::NOT_FOUND,
            "NotFoundError",
            &format!("The model `{m}` does not exist."),
        )),
        _ => Ok(()),
    }
}

// ---------------------------------------------------------------------------------------------
// Request bodies

#[derive(Deserialize)]
struct StreamOptions {
    include_usage: Option<bool>,
    continuous_usage_stats: Option<bool>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
}

#[derive(Deserialize)]
struct ContentPart {
    text: Option<String>,
}

#[derive(Deserialize)]
struct Message {
    role: String,
    content: Option<Content>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum PromptInput {
    Text(String),
    Tokens(Vec<u32>),
    Texts(Vec<String>),
    TokenLists(Vec<Vec<u32>>),
}

#[derive(Deserialize)]
struct CompletionBody {
    model: Option<String>,
    /// `messages` for chat, `prompt` for completions.
    messages: Option<Vec<Message>>,
    prompt: Option<PromptInput>,
    stream: Option<bool>,
    max_tokens: Option<u64>,
    max_completion_tokens: Option<u64>,
    ignore_eos: Option<bool>,
    stream_options: Option<StreamOptions>,
    add_generation_prompt: Option<bool>,
}

#[derive(Deserialize)]
struct TokenizeBody {
    model: Option<String>,
    messages: Option<Vec<Message>>,
    prompt: Option<PromptInput>,
    add_generation_prompt: Option<bool>,
}

fn parse_json<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(bad_request(
            "Request body is missing or empty; expected JSON.",
        ));
    }
    serde_json::from_slice(body).map_err(|e| bad_request(&format!("Invalid JSON body: {e}")))
}

fn template_messages(messages: &[Message]) -> Vec<TemplateMessage<'_>> {
    messages
        .iter()
        .map(|m| TemplateMessage {
            role: &m.role,
            content: match &m.content {
                None => Vec::new(),
                Some(Content::Text(t)) => vec![t.as_str()],
                Some(Content::Parts(parts)) => {
                    parts.iter().filter_map(|p| p.text.as_deref()).collect()
                }
            },
        })
        .collect()
}

/// The text `--answer-key` looks up: the last user message (its text parts joined) of a chat
/// request, or the single prompt string of a completion request.
fn prompt_text(messages: Option<&[Message]>, prompt: Option<&PromptInput>) -> Option<String> {
    if let Some(m) = messages {
        let last = m.iter().rev().find(|m| m.role == "user")?;
        return match last.content.as_ref()? {
            Content::Text(t) => Some(t.clone()),
            Content::Parts(p) => Some(p.iter().filter_map(|p| p.text.as_deref()).collect()),
        };
    }
    match prompt? {
        PromptInput::Text(t) => Some(t.clone()),
        PromptInput::Texts(t) if t.len() == 1 => Some(t[0].clone()),
        _ => None,
    }
}

/// Tokenize the prompt of a chat (`messages`) or completion (`prompt`) request into `sink`.
fn tokenize_prompt(
    endpoint: Endpoint,
    messages: Option<&[Message]>,
    prompt: Option<&PromptInput>,
    add_generation_prompt: bool,
    sink: &mut impl TokenSink,
) -> Result<(), ApiError> {
    match endpoint {
        Endpoint::Chat => {
            let Some(messages) = messages else {
                return Err(bad_request("Field `messages` is required."));
            };
            if messages.is_empty() {
                return Err(bad_request("Field `messages` must not be empty."));
            }
            tokenizer::apply_chat_template(
                &template_messages(messages),
                add_generation_prompt,
                sink,
            );
        }
        Endpoint::Completion => {
            let Some(prompt) = prompt else {
                return Err(bad_request("Field `prompt` is required."));
            };
            let one_text = |t: &str, sink: &mut _| tokenizer::tokenize_into(t, sink);
            match prompt {
                PromptInput::Text(t) => one_text(t, sink),
                PromptInput::Tokens(ids) => ids.iter().for_each(|&i| sink.push(i)),
                PromptInput::Texts(v) if v.len() == 1 => one_text(&v[0], sink),
                PromptInput::TokenLists(v) if v.len() == 1 => {
                    v[0].iter().for_each(|&i| sink.push(i))
                }
                _ => {
                    return Err(bad_request(
                        "Batched prompts (a list of several prompts) are not supported by servebench-sim.",
                    ))
                }
            }
        }
    }
    Ok(())
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

// ---------------------------------------------------------------------------------------------
// Handlers

async fn chat_completions(State(s): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    completion_common(s, headers, body, Endpoint::Chat).await
}

async fn completions(State(s): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    completion_common(s, headers, body, Endpoint::Completion).await
}

async fn completion_common(
    s: AppState,
    headers: HeaderMap,
    body: Bytes,
    endpoint: Endpoint,
) -> Response {
    let received_at = Instant::now();
    if let Err(r) = check_auth(&s, &headers) {
        return r.into_response();
    }
    if let Some(resp) = injected_fault(&s) {
        return resp;
    }
    let (req, prompt_tokens, blocks) = match read_completion(&s, &body, endpoint) {
        Ok(r) => r,
        Err(r) => return r.into_response(),
    };
    let max_tokens = match completion_budget(&s, &req, endpoint, prompt_tokens) {
        Ok(m) => m,
        Err(r) => return r.into_response(),
    };
    let stream = req.stream.unwrap_or(false);
    let (include_usage, continuous) = usage_options(&s, &req, stream);
    let midstream_fault = stream && {
        let every = u64::from(s.cfg.fault_midstream_every);
        every > 0 && (s.stream_counter.fetch_add(1, Relaxed) + 1) % every == 0
    };
    let seq = s.next_seq.fetch_add(1, Relaxed) + 1;
    let answer = if s.answer_key.is_empty() {
        None
    } else {
        prompt_text(req.messages.as_deref(), req.prompt.as_ref())
            .and_then(|p| s.answer_key.get(p.trim()).cloned())
    };
    let new = NewRequest {
        answer,
        seq,
        endpoint,
        created: unix_now(),
        received_at,
        prompt_tokens,
        blocks,
        max_tokens,
        ignore_eos: req.ignore_eos.unwrap_or(false),
        include_usage,
        continuous_usage: continuous,
        midstream_fault,
        sink: Sink::Unary(None),
    };
    S::add(&s.stats.requests_received, 1);
    tracing::debug!(seq, prompt_tokens, max_tokens, stream, "request accepted");
    if stream {
        stream_response(s, new)
    } else {
        unary_response(&s, new).await
    }
}

/// `--fault-http-status` every `--fault-every`-th completion request: counts the request and,
/// when its turn has come, the simulated error response (with `Retry-After: 1` on a 429).
fn injected_fault(s: &AppState) -> Option<Response> {
    let nth = s.completion_counter.fetch_add(1, Relaxed) + 1;
    let status = s.cfg.fault_http_status?;
    let every = u64::from(s.cfg.fault_every);
    if every == 0 || nth % every != 0 {
        return None;
    }
    S::add(&s.stats.faulted, 1);
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut resp = openai_error(
        status,
        error_type(status.as_u16()),
        &format!("simulated fault (HTTP {})", status.as_u16()),
    )
    .into_response();
    if status == StatusCode::TOO_MANY_REQUESTS {
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    Some(resp)
}

/// Parses a completion body, checks its model and tokenizes its prompt: the body, the prompt's
/// tokens and its prefix-cache block hashes. An empty prompt is a 400.
fn read_completion(
    s: &AppState,
    body: &[u8],
    endpoint: Endpoint,
) -> Result<(CompletionBody, u64, Vec<u64>), ApiError> {
    let req: CompletionBody = parse_json(body)?;
    check_model(s, req.model.as_deref())?;
    let mut sink = PromptSink::new();
    tokenize_prompt(
        endpoint,
        req.messages.as_deref(),
        req.prompt.as_ref(),
        req.add_generation_prompt.unwrap_or(true),
        &mut sink,
    )?;
    let (prompt_tokens, blocks, _) = sink.finish();
    if prompt_tokens == 0 {
        return Err(bad_request("The prompt must contain at least one token."));
    }
    Ok((req, prompt_tokens, blocks))
}

/// The request's output budget (tokens): `max_completion_tokens` / `max_tokens` when it fits
/// the context with the prompt, else the rest of the context; 0, or a request over
/// `--max-model-len`, is vLLM's 400.
fn completion_budget(
    s: &AppState,
    req: &CompletionBody,
    endpoint: Endpoint,
    prompt_tokens: u64,
) -> Result<u64, ApiError> {
    let max_len = s.cfg.max_model_len;
    let what = match endpoint {
        Endpoint::Chat => "messages",
        Endpoint::Completion => "prompt",
    };
    match req.max_completion_tokens.or(req.max_tokens) {
        Some(0) => Err(bad_request("max_tokens must be at least 1, got 0.")),
        Some(m) => {
            if prompt_tokens.saturating_add(m) > max_len {
                return Err(bad_request(&format!(
                    "This model's maximum context length is {max_len} tokens. However, you requested {} tokens ({prompt_tokens} in the {what}, {m} in the completion). Please reduce the length of the {what} or completion.",
                    prompt_tokens.saturating_add(m)
                )));
            }
            Ok(m)
        }
        None => {
            if prompt_tokens >= max_len {
                return Err(bad_request(&format!(
                    "This model's maximum context length is {max_len} tokens. However, your request has {prompt_tokens} input tokens. Please reduce the length of the input {what}."
                )));
            }
            Ok(max_len - prompt_tokens)
        }
    }
}

/// `stream_options` of a streamed request: (`include_usage`, continuous usage stats), the
/// latter only where `--continuous-usage` allows it and never for llama.cpp.
fn usage_options(s: &AppState, req: &CompletionBody, stream: bool) -> (bool, bool) {
    match &req.stream_options {
        Some(o) if stream => {
            let inc = o.include_usage.unwrap_or(false);
            (
                inc,
                // llama.cpp has no continuous usage stats.
                inc && s.cfg.continuous_usage
                    && s.cfg.personality != Personality::Llamacpp
                    && o.continuous_usage_stats.unwrap_or(false),
            )
        }
        _ => (false, false),
    }
}

/// Hands a streamed request to the engine and returns the SSE response whose body forwards
/// the engine's frames, recording each token frame's ground-truth emission time (and the
/// stream's end) as hyper takes it for writing.
fn stream_response(s: AppState, mut new: NewRequest) -> Response {
    let seq = new.seq;
    let (tx, mut rx) = mpsc::unbounded_channel::<(Bytes, u32)>();
    new.sink = Sink::Stream(tx);
    if s.engine.send(new).is_err() {
        return engine_gone();
    }
    let shared = s;
    let body = futures_util::stream::poll_fn(move |cx| {
        rx.poll_recv(cx).map(|o| {
            o.map(|(bytes, tokens)| {
                // hyper writes a frame right after taking it from the body, so this is the
                // moment the tokens leave the simulator: the ground-truth emission time.
                if tokens > 0 && shared.cfg.record_truth {
                    shared
                        .truth_log()
                        .record_emission(seq, Instant::now(), tokens);
                } else if shared.cfg.record_truth && bytes.as_ref() == crate::format::DONE {
                    shared.truth_log().record_stream_end(seq, Instant::now());
                }
                Ok::<Bytes, Infallible>(bytes)
            })
        })
    });
    let mut resp = Response::new(Body::from_stream(body));
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream; charset=utf-8"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}

/// Hands a unary request to the engine and waits for its whole JSON body.
async fn unary_response(s: &AppState, mut new: NewRequest) -> Response {
    let (tx, rx) = oneshot::channel::<Bytes>();
    new.sink = Sink::Unary(Some(tx));
    if s.engine.send(new).is_err() {
        return engine_gone();
    }
    match rx.await {
        Ok(body) => {
            let mut resp = Response::new(Body::from(body));
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            resp
        }
        Err(_) => engine_gone(),
    }
}

fn engine_gone() -> Response {
    vllm_error(
        StatusCode::SERVICE_UNAVAILABLE,
        "ServiceUnavailableError",
        "The simulator engine is shutting down.",
    )
    .into_response()
}

async fn tokenize(State(s): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    if let Err(r) = check_auth(&s, &headers) {
        return r.into_response();
    }
    let req: TokenizeBody = match parse_json(&body) {
        Ok(r) => r,
        Err(r) => return r.into_response(),
    };
    if let Err(r) = check_model(&s, req.model.as_deref()) {
        return r.into_response();
    }
    let endpoint = if req.messages.is_some() {
        Endpoint::Chat
    } else if req.prompt.is_some() {
        Endpoint::Completion
    } else {
        return bad_request("Either `prompt` or `messages` is required.").into_response();
    };
    let mut ids: Vec<u32> = Vec::new();
    if let Err(r) = tokenize_prompt(
        endpoint,
        req.messages.as_deref(),
        req.prompt.as_ref(),
        req.add_generation_prompt.unwrap_or(true),
        &mut ids,
    ) {
        return r.into_response();
    }
    let body = serde_json::json!({
        "count": ids.len(),
        "max_model_len": s.cfg.max_model_len,
        "tokens": ids,
        "token_strs": null,
    });
    json_response(StatusCode::OK, body.to_string())
}

async fn models(State(s): State<AppState>, headers: HeaderMap) -> Response {
    if let Err(r) = check_auth(&s, &headers) {
        return r.into_response();
    }
    json_response(StatusCode::OK, personality::models(&s).to_string())
}

async fn health(State(s): State<AppState>) -> Response {
    match s.cfg.personality {
        Personality::Llamacpp => json_response(StatusCode::OK, "{\"status\":\"ok\"}".into()),
        _ => StatusCode::OK.into_response(),
    }
}

async fn version(State(s): State<AppState>, headers: HeaderMap) -> Response {
    if let Err(r) = check_auth(&s, &headers) {
        return r.into_response();
    }
    json_response(
        StatusCode::OK,
        personality::version(s.cfg.personality).to_string(),
    )
}

/// `GET /metrics` (every personality but the neutral one). Like vLLM's, it needs no API key.
async fn metrics(State(s): State<AppState>) -> Response {
    let n = s
        .scrape_counter
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    if s.cfg.metrics_fail_after.is_some_and(|k| n >= k) && s.cfg.personality.has_metrics() {
        return (StatusCode::SERVICE_UNAVAILABLE, "metrics unavailable\n").into_response();
    }
    if s.cfg.metrics_empty_after.is_some_and(|k| n >= k) && s.cfg.personality.has_metrics() {
        let mut resp = Response::new(Body::empty());
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
        );
        return resp;
    }
    match crate::metrics::render(&s) {
        Some(body) => {
            let mut resp = Response::new(Body::from(body));
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            );
            resp
        }
        None => not_found().await,
    }
}

async fn sglang_server_info(State(s): State<AppState>, headers: HeaderMap) -> Response {
    if let Err(r) = check_auth(&s, &headers) {
        return r.into_response();
    }
    json_response(
        StatusCode::OK,
        personality::sglang_server_info(&s).to_string(),
    )
}

async fn sglang_model_info(State(s): State<AppState>, headers: HeaderMap) -> Response {
    if let Err(r) = check_auth(&s, &headers) {
        return r.into_response();
    }
    json_response(
        StatusCode::OK,
        personality::sglang_model_info(&s).to_string(),
    )
}

async fn llamacpp_props(State(s): State<AppState>, headers: HeaderMap) -> Response {
    if let Err(r) = check_auth(&s, &headers) {
        return r.into_response();
    }
    json_response(StatusCode::OK, personality::llamacpp_props(&s).to_string())
}

async fn llamacpp_slots(State(s): State<AppState>, headers: HeaderMap) -> Response {
    if let Err(r) = check_auth(&s, &headers) {
        return r.into_response();
    }
    json_response(StatusCode::OK, personality::llamacpp_slots(&s).to_string())
}

#[derive(Deserialize)]
#[serde(untagged)]
enum LlamaContent {
    Text(String),
    Tokens(Vec<u32>),
}

#[derive(Deserialize)]
struct LlamaTokenizeBody {
    content: Option<LlamaContent>,
}

/// llama.cpp `POST /tokenize`: `{"content": "..."}` → `{"tokens": [...]}`.
async fn llamacpp_tokenize(State(s): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    if let Err(r) = check_auth(&s, &headers) {
        return r.into_response();
    }
    let req: LlamaTokenizeBody = match parse_json(&body) {
        Ok(r) => r,
        Err(r) => return r.into_response(),
    };
    let mut ids: Vec<u32> = Vec::new();
    match &req.content {
        Some(LlamaContent::Text(t)) => tokenizer::tokenize_into(t, &mut ids),
        Some(LlamaContent::Tokens(t)) => ids.extend_from_slice(t),
        None => {}
    }
    json_response(
        StatusCode::OK,
        serde_json::json!({ "tokens": ids }).to_string(),
    )
}

async fn not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        [(header::CONTENT_TYPE, "application/json")],
        "{\"detail\":\"Not Found\"}",
    )
        .into_response()
}

/// llama-server's 404 body.
async fn llamacpp_not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        [(header::CONTENT_TYPE, "application/json; charset=utf-8")],
        "{\"error\":{\"code\":404,\"message\":\"File Not Found\",\"type\":\"not_found_error\"}}",
    )
        .into_response()
}
