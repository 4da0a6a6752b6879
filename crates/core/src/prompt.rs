//! Prompts: padding text sized to each context, run nonces, and request payloads.
//!
//! Method (seed spec §3.5, with its bugs fixed):
//! * A context of `ctx` tokens is the **total** prompt (chat template and wrapper included): a
//!   reference document made of padding sentences, then a fixed generation prompt. Context 0 is
//!   the generation prompt alone.
//! * Every prompt starts with a nonce prefix `[BENCH_<run>_CTX_<ctx>]`, so runs and contexts
//!   never share a prefix cache, while the C streams of one context share it on purpose (the
//!   scout primes it, so decode is measured without re-prefilling). Warmups use their own
//!   prefixes. `--seed` makes the run id, and therefore every prompt, reproducible.
//! * Sizing is **exact** through the server's `POST /tokenize` when it exists (vLLM, SGLang,
//!   llama.cpp), else an **estimate** from a calibration (two non-streaming `max_tokens: 1`
//!   requests: the fixed overhead and the characters per padding token), cached per (engine,
//!   model, template, endpoint) in the user cache directory. A failed calibration is reported,
//!   never silently replaced by a guess.

use std::collections::BTreeMap;
use std::path::PathBuf;

use bytes::Bytes;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use servebench_client::target::{Endpoint, HttpClient};
use servebench_client::HttpError;

/// Padding sentences (our own text): cycled and joined with spaces to build reference documents.
pub const PADDING_SENTENCES: [&str; 20] = [
    "The harbour district was rebuilt after the flood, with raised quays and wide public stairs leading down to the water.",
    "Engineers compared three bridge designs and chose the cable-stayed option because its towers needed the fewest river piers.",
    "A new tram line connects the railway station with the university campus, the hospital and the western housing estates.",
    "The old textile mill now holds a library, a market hall and workshops rented by furniture makers and bicycle mechanics.",
    "Street trees were planted every twelve metres so that their crowns would shade the pavement within fifteen years.",
    "The council limited building heights near the cathedral to keep the view from the northern hill unobstructed.",
    "Rainwater from the roofs is collected in underground tanks and used to irrigate the parks during dry summers.",
    "Each residential block surrounds a shared courtyard with playgrounds, bicycle sheds and small vegetable gardens.",
    "The architects used local limestone for the facades and timber frames for the upper floors to reduce embodied carbon.",
    "A survey of pedestrian routes showed that most residents walked less than ten minutes to reach a grocery store.",
    "The concert hall has a vineyard-style seating plan, which places every listener within thirty metres of the stage.",
    "Traffic engineers narrowed the avenue from six lanes to four and added protected cycle tracks on both sides.",
    "The municipal archive keeps the original drawings of the city wall, including the gates that were demolished long ago.",
    "Ventilation towers on the school roof draw warm air out of the classrooms without mechanical fans on most days.",
    "Ferry terminals on both banks were redesigned so that passengers can change to buses without crossing a road.",
    "The housing cooperative financed its building with member shares and a long-term loan from a regional bank.",
    "Planners mapped flood risk street by street and moved the electrical substations to higher ground.",
    "The museum extension is partly buried in the slope, so its green roof continues the public park above it.",
    "Market stalls are arranged along a covered arcade that protects shoppers from rain and afternoon sun.",
    "After the renovation the railway station handled twice as many passengers with the same number of platforms.",
];

/// Opening of the reference-document message.
pub const DOC_INTRO: &str =
    "Below is a long reference document. Read it carefully, then answer the request that follows.";
/// Assistant acknowledgement between the document and the request.
pub const DOC_ACK: &str =
    "I have read the whole reference document. What would you like me to write?";
/// The generation prompt: asks for a very long answer so that decode runs to `max_tokens`.
pub const GENERATION_PROMPT: &str = "Write an exhaustive, encyclopedia-style history of astronomy from the earliest \
Babylonian star catalogues to the space telescopes of the present day. Cover every period, every major observatory, \
instrument and astronomer, with dates and explanations of each discovery. Be as detailed and as long as possible; \
do not summarise and do not stop early.";

/// A 12-letter lowercase run nonce; reproducible when `seed` is given.
pub fn make_run_id(seed: Option<u64>) -> String {
    let mut rng: rand::rngs::StdRng = match seed {
        Some(s) => rand::rngs::StdRng::seed_from_u64(s),
        None => rand::rngs::StdRng::from_entropy(),
    };
    (0..12)
        .map(|_| rng.gen_range(b'a'..=b'z') as char)
        .collect()
}

/// Identifies the prompt template (padding, wrapper, generation prompt, endpoint) for the
/// calibration cache: 12 hex digits of FNV-1a 64 over the texts.
pub fn template_id(endpoint: Endpoint) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut feed = |s: &str| {
        for b in s.bytes().chain(std::iter::once(0u8)) {
            h ^= b as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    };
    for s in PADDING_SENTENCES {
        feed(s);
    }
    feed(DOC_INTRO);
    feed(DOC_ACK);
    feed(GENERATION_PROMPT);
    feed(endpoint.as_str());
    format!("{:016x}", h)[..12].to_string()
}

/// Deterministic padding text of at least `chars` characters (ASCII), cycling the sentences.
pub fn padding_text(chars: usize) -> String {
    let mut s = String::with_capacity(chars + 200);
    let mut i = 0;
    while s.len() < chars {
        if !s.is_empty() {
            s.push(' ');
        }
        s.push_str(PADDING_SENTENCES[i % PADDING_SENTENCES.len()]);
        i += 1;
    }
    s.truncate(chars);
    s
}

/// The input of one request: chat messages or a completions prompt, ready to embed in a payload.
#[derive(Clone, Debug, PartialEq)]
pub struct PromptInput {
    /// `messages` array (chat) or `prompt` string (completions).
    pub value: Value,
    /// Characters of padding after the nonce prefix.
    pub padding_chars: usize,
}

/// Builds the request input for `prefix` (the nonce tag, e.g. `[BENCH_abc_CTX_16384]`) and
/// `padding_chars` characters of padding. With `padding_chars == 0` and `with_document == false`
/// the prompt is the generation prompt alone (context 0), still carrying the prefix.
pub fn build_input(
    endpoint: Endpoint,
    prefix: &str,
    padding_chars: usize,
    with_document: bool,
) -> PromptInput {
    let value = if with_document {
        let doc = format!(
            "{prefix} {DOC_INTRO}\n--- BEGIN REFERENCE DOCUMENT ---\n{}\n--- END REFERENCE DOCUMENT ---",
            padding_text(padding_chars)
        );
        match endpoint {
            Endpoint::Chat => json!([
                {"role": "user", "content": doc},
                {"role": "assistant", "content": DOC_ACK},
                {"role": "user", "content": GENERATION_PROMPT},
            ]),
            Endpoint::Completions => {
                Value::String(format!("{doc}\n\n{DOC_ACK}\n\n{GENERATION_PROMPT}\n\n"))
            }
        }
    } else {
        let text = format!("{prefix} {GENERATION_PROMPT}");
        match endpoint {
            Endpoint::Chat => json!([{"role": "user", "content": text}]),
            Endpoint::Completions => Value::String(format!("{text}\n\n")),
        }
    };
    PromptInput {
        value,
        padding_chars,
    }
}

/// Request options shared by every request of a layer.
#[derive(Clone, Debug, PartialEq)]
pub struct RequestOptions {
    /// Model name sent in every request.
    pub model: String,
    /// Chat or completions.
    pub endpoint: Endpoint,
    /// `max_tokens` (0 = omit the field).
    pub max_tokens: u64,
    /// Send `ignore_eos: true`.
    pub ignore_eos: bool,
    /// Sampling temperature; `None` = server default.
    pub temperature: Option<f64>,
    /// Ask for usage on every chunk (`stream_options.continuous_usage_stats`).
    pub continuous_usage: bool,
}

/// Serialises a streaming request body once, so every stream of a cell reuses the same bytes.
pub fn streaming_payload(opts: &RequestOptions, input: &PromptInput) -> Bytes {
    let mut body = serde_json::Map::new();
    body.insert("model".into(), Value::String(opts.model.clone()));
    match opts.endpoint {
        Endpoint::Chat => body.insert("messages".into(), input.value.clone()),
        Endpoint::Completions => body.insert("prompt".into(), input.value.clone()),
    };
    body.insert("stream".into(), Value::Bool(true));
    if opts.max_tokens > 0 {
        body.insert("max_tokens".into(), json!(opts.max_tokens));
    }
    if opts.ignore_eos {
        body.insert("ignore_eos".into(), Value::Bool(true));
    }
    if let Some(t) = opts.temperature {
        body.insert("temperature".into(), json!(t));
    }
    let mut so = serde_json::Map::new();
    so.insert("include_usage".into(), Value::Bool(true));
    if opts.continuous_usage {
        so.insert("continuous_usage_stats".into(), Value::Bool(true));
    }
    body.insert("stream_options".into(), Value::Object(so));
    Bytes::from(serde_json::to_vec(&Value::Object(body)).unwrap_or_default())
}

/// A prompt sized for one context.
#[derive(Clone, Debug, PartialEq)]
pub struct SizedPrompt {
    /// Target context, tokens.
    pub context: u64,
    /// The request input.
    pub input: PromptInput,
    /// Prompt tokens as counted by the server's `/tokenize` (exact targeting only).
    pub exact_tokens: Option<u64>,
    /// Estimated prompt tokens (estimate targeting).
    pub estimated_tokens: Option<f64>,
}

/// How prompts are sized for this run.
#[derive(Clone, Debug, PartialEq)]
pub enum Targeting {
    /// Binary search through the server's `POST /tokenize`.
    Exact,
    /// Linear estimate: tokens ≈ overhead + padding chars / chars_per_token.
    Estimate {
        /// Characters per padding token.
        chars_per_token: f64,
        /// Tokens of the wrapper, template and generation prompt with an empty document.
        overhead_tokens: f64,
        /// `calibrated_estimate`, `cached_estimate` or `uncalibrated_estimate`.
        source: &'static str,
    },
}

impl Targeting {
    /// Name recorded in `metadata.prompt_targeting`.
    pub fn label(&self) -> &'static str {
        match self {
            Targeting::Exact => "tokenize_exact",
            Targeting::Estimate { source, .. } => source,
        }
    }
}

/// Counts the prompt tokens of `input` with the server's `/tokenize`.
///
/// vLLM and SGLang accept `messages` (chat template applied) or `prompt` and answer `count`.
/// llama.cpp's `/tokenize` only takes raw `content` (it answers an empty list for `messages`), so
/// for chat prompts an empty answer is retried through llama.cpp's `/apply-template` and then
/// `/tokenize` of the templated text with special tokens parsed. A count of 0 for a non-empty
/// prompt is an error, never a size.
pub async fn tokenize_count(
    client: &HttpClient,
    model: &str,
    endpoint: Endpoint,
    input: &PromptInput,
) -> Result<u64, HttpError> {
    let body = match endpoint {
        Endpoint::Chat => json!({"model": model, "messages": input.value}),
        Endpoint::Completions => {
            json!({"model": model, "prompt": input.value, "content": input.value, "add_special": true, "parse_special": true})
        }
    };
    let url = client.target().url("/tokenize");
    let count_of = |v: &Value| -> Option<u64> {
        v.get("count").and_then(Value::as_u64).or_else(|| {
            v.get("tokens")
                .and_then(Value::as_array)
                .map(|t| t.len() as u64)
        })
    };
    let v = client
        .post_json("/tokenize", &body, Some(client.policy().probe))
        .await?;
    match count_of(&v) {
        Some(c) if c > 0 => return Ok(c),
        None => {
            return Err(HttpError::Body {
                url,
                detail: "no `count` or `tokens` in the answer".into(),
            });
        }
        Some(_) => {}
    }
    if endpoint == Endpoint::Chat {
        // llama.cpp: template first, then tokenize the text.
        let templated = client
            .post_json(
                "/apply-template",
                &json!({"messages": input.value}),
                Some(client.policy().probe),
            )
            .await?;
        if let Some(text) = templated.get("prompt").and_then(Value::as_str) {
            let v = client
                .post_json(
                    "/tokenize",
                    &json!({"content": text, "add_special": true, "parse_special": true}),
                    Some(client.policy().probe),
                )
                .await?;
            if let Some(c) = count_of(&v).filter(|&c| c > 0) {
                return Ok(c);
            }
        }
    }
    Err(HttpError::Body {
        url,
        detail: "the server counted 0 tokens for a non-empty prompt".into(),
    })
}

/// Prompt tokens the server reports for one non-streaming `max_tokens: 1` request, within
/// `--probe-timeout` plus the first-token scaling for its size ([`servebench_client::timeouts`]).
pub async fn usage_prompt_tokens(
    client: &HttpClient,
    model: &str,
    endpoint: Endpoint,
    input: &PromptInput,
) -> Result<u64, HttpError> {
    let mut body = json!({"model": model, "max_tokens": 1, "stream": false});
    match endpoint {
        Endpoint::Chat => body["messages"] = input.value.clone(),
        Endpoint::Completions => body["prompt"] = input.value.clone(),
    }
    let v =
        client
            .post_json(
                endpoint.path(),
                &body,
                Some(client.policy().probe_for(
                    servebench_client::timeouts::estimate_prompt_tokens(input.padding_chars),
                )),
            )
            .await?;
    v.pointer("/usage/prompt_tokens")
        .and_then(Value::as_u64)
        .ok_or_else(|| HttpError::Body {
            url: client.target().url(endpoint.path()),
            detail: "no usage.prompt_tokens in the non-streaming answer".into(),
        })
}

/// Finds the largest padding size whose `/tokenize` count is ≤ `ctx` (exact targeting).
///
/// A secant estimate on chars/token followed by bisection; at most ~24 `/tokenize` calls.
/// Returns the prompt and its exact token count (which can exceed `ctx` only when the fixed
/// overhead alone is larger than `ctx`).
pub async fn size_exact(
    client: &HttpClient,
    model: &str,
    endpoint: Endpoint,
    prefix: &str,
    ctx: u64,
) -> Result<SizedPrompt, HttpError> {
    let count = |n: usize| {
        let input = build_input(endpoint, prefix, n, true);
        async move {
            let c = tokenize_count(client, model, endpoint, &input).await?;
            Ok::<_, HttpError>((c, input))
        }
    };
    let (c0, in0) = count(0).await?;
    if c0 >= ctx {
        return Ok(SizedPrompt {
            context: ctx,
            input: in0,
            exact_tokens: Some(c0),
            estimated_tokens: None,
        });
    }
    // lo: largest n known with count ≤ ctx; hi: smallest n known with count > ctx.
    let mut lo: (usize, u64, PromptInput) = (0, c0, in0);
    let mut hi: Option<usize> = None;
    let mut cpt = 4.0f64;
    for _ in 0..10 {
        let want = (ctx - c0) as f64 * cpt;
        let mut n = want.max(1.0) as usize;
        if let Some(h) = hi {
            if n >= h || n <= lo.0 {
                n = lo.0 + (h - lo.0) / 2;
            }
        } else if n <= lo.0 {
            n = lo.0 * 2 + 1;
        }
        if hi.is_some_and(|h| h - lo.0 <= 1) {
            break;
        }
        let (c, input) = count(n).await?;
        if c == ctx {
            return Ok(SizedPrompt {
                context: ctx,
                input,
                exact_tokens: Some(c),
                estimated_tokens: None,
            });
        }
        if c < ctx {
            if n > lo.0 {
                lo = (n, c, input);
            }
        } else if hi.is_none_or(|h| n < h) {
            hi = Some(n);
        }
        if c > c0 {
            cpt = n as f64 / (c - c0) as f64;
        }
    }
    // Bisection between lo and hi.
    let mut guard = 0;
    while let Some(h) = hi {
        if h - lo.0 <= 1 || guard > 16 {
            break;
        }
        guard += 1;
        let n = lo.0 + (h - lo.0) / 2;
        let (c, input) = count(n).await?;
        if c <= ctx {
            lo = (n, c, input);
            if c == ctx {
                break;
            }
        } else {
            hi = Some(n);
        }
    }
    Ok(SizedPrompt {
        context: ctx,
        input: lo.2,
        exact_tokens: Some(lo.1),
        estimated_tokens: None,
    })
}

/// Sizes a context with the estimate: padding chars = (ctx − overhead) × chars_per_token.
pub fn size_estimate(
    endpoint: Endpoint,
    prefix: &str,
    ctx: u64,
    chars_per_token: f64,
    overhead_tokens: f64,
) -> SizedPrompt {
    let pad_tokens = (ctx as f64 - overhead_tokens).max(0.0);
    let n = (pad_tokens * chars_per_token).round() as usize;
    let input = build_input(endpoint, prefix, n, true);
    let est = overhead_tokens + n as f64 / chars_per_token;
    SizedPrompt {
        context: ctx,
        input,
        exact_tokens: None,
        estimated_tokens: Some(est),
    }
}

/// A failed calibration: which request failed and why.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{error}")]
pub struct CalibrationError {
    /// The first request (empty document, a few dozen tokens) failed: the server does not answer
    /// completions at all, as opposed to a slow prefill of the large one.
    pub overhead_request: bool,
    /// The HTTP failure.
    pub error: HttpError,
}

/// One calibration measurement: (chars per padding token, overhead tokens).
///
/// Sends two non-streaming `max_tokens: 1` requests: an empty document (the fixed overhead) and
/// a document of `cal_ctx × 4` characters.
pub async fn calibrate(
    client: &HttpClient,
    model: &str,
    endpoint: Endpoint,
    prefix: &str,
    cal_ctx: u64,
) -> Result<(f64, f64), CalibrationError> {
    let empty = build_input(endpoint, prefix, 0, true);
    let p0 = usage_prompt_tokens(client, model, endpoint, &empty)
        .await
        .map_err(|error| CalibrationError {
            overhead_request: true,
            error,
        })?;
    let chars = (cal_ctx.max(256) * 4) as usize;
    let full = build_input(endpoint, prefix, chars, true);
    let fail = |error| CalibrationError {
        overhead_request: false,
        error,
    };
    let p1 = usage_prompt_tokens(client, model, endpoint, &full)
        .await
        .map_err(fail)?;
    if p1 <= p0 {
        return Err(fail(HttpError::Body {
            url: client.target().url(endpoint.path()),
            detail: format!("calibration prompt_tokens did not grow ({p0} → {p1})"),
        }));
    }
    let cpt = chars as f64 / (p1 - p0) as f64;
    if cpt < MIN_CHARS_PER_TOKEN {
        return Err(fail(HttpError::Body {
            url: client.target().url(endpoint.path()),
            detail: format!(
                "calibration implausible: the server counted {} prompt tokens for {chars} characters of ASCII padding ({cpt:.2} characters per token; a token is at least one): usage.prompt_tokens is no count of what was sent",
                p1 - p0
            ),
        }));
    }
    Ok((cpt, p0 as f64))
}

/// Fewest characters of the ASCII padding per token a calibration may find: a byte-level
/// tokenizer's token is at least one byte (break-it round 7: a server counting 10 × the prompt
/// calibrated to 0.40 and sized every context to a tenth, with prefill rows `ok` at 10 × the
/// true rate). A calibration below it fails, and the run falls back to the uncalibrated guess.
pub const MIN_CHARS_PER_TOKEN: f64 = 1.0;

/// One entry of the calibration cache file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CalibrationEntry {
    /// Characters per padding token.
    pub chars_per_token: f64,
    /// Tokens of the prompt with an empty document.
    pub overhead_tokens: f64,
    /// Engine name.
    pub engine: String,
    /// Model name.
    pub model: String,
    /// [`template_id`].
    pub template_id: String,
    /// Context of the calibration probe, tokens.
    pub source_context: u64,
    /// ISO time of the calibration.
    pub updated_at: String,
}

/// Chars/token calibration cache (`<user cache dir>/servebench/token-calibration.json`), keyed by
/// `engine:model:template_id`.
#[derive(Clone, Debug)]
pub struct CalibrationCache {
    path: Option<PathBuf>,
}

impl CalibrationCache {
    /// The cache in the user cache directory (`None` path when there is none: caching disabled).
    pub fn user_default() -> Self {
        CalibrationCache {
            path: dirs::cache_dir().map(|d| d.join("servebench").join("token-calibration.json")),
        }
    }

    /// A cache at an explicit path (tests), or disabled with `None`.
    pub fn at(path: Option<PathBuf>) -> Self {
        CalibrationCache { path }
    }

    /// Cache key for (engine, model, template).
    pub fn key(engine: &str, model: &str, template: &str) -> String {
        format!("{engine}:{model}:{template}")
    }

    fn load_all(&self) -> BTreeMap<String, CalibrationEntry> {
        self.path
            .as_ref()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .and_then(|s| serde_json::from_str(&s).ok())
            .unwrap_or_default()
    }

    /// The cached entry for `key`, if any and plausible.
    pub fn get(&self, key: &str) -> Option<CalibrationEntry> {
        self.load_all()
            .remove(key)
            .filter(|e| e.chars_per_token.is_finite() && e.chars_per_token >= MIN_CHARS_PER_TOKEN)
    }

    /// Stores `entry` under `key` (atomic temp-file rename). Errors are returned, not hidden.
    pub fn put(&self, key: &str, entry: CalibrationEntry) -> std::io::Result<()> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        let mut all = self.load_all();
        all.insert(key.to_string(), entry);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let tmp = path.with_extension(format!("json.tmp{}", std::process::id()));
        std::fs::write(&tmp, serde_json::to_vec_pretty(&all).unwrap_or_default())?;
        std::fs::rename(&tmp, path)
    }
}

/// Nonce prefix of the measured decode prompt of a context.
pub fn decode_prefix(run_id: &str, ctx: u64) -> String {
    format!("[BENCH_{run_id}_CTX_{ctx}]")
}

/// Nonce prefix of the hidden decode warmup.
pub fn warmup_prefix(run_id: &str, ctx: u64) -> String {
    format!("[WARMUP_{run_id}_DECODE_CTX_{ctx}]")
}

/// Nonce prefix of the calibration probe.
pub fn calibration_prefix(run_id: &str) -> String {
    format!("[BENCH_{run_id}_CAL]")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids() {
        let a = make_run_id(Some(7));
        assert_eq!(a, make_run_id(Some(7)));
        assert_eq!(a.len(), 12);
        assert!(a.bytes().all(|b| b.is_ascii_lowercase()));
        assert_ne!(make_run_id(None), make_run_id(None));
    }

    #[test]
    fn padding_is_exact_length_and_deterministic() {
        assert_eq!(padding_text(0), "");
        assert_eq!(padding_text(10_000).len(), 10_000);
        assert_eq!(padding_text(5000), padding_text(5000));
        assert!(padding_text(300).starts_with(PADDING_SENTENCES[0]));
    }

    #[test]
    fn payload_fields() {
        let opts = RequestOptions {
            model: "m".into(),
            endpoint: Endpoint::Chat,
            max_tokens: 16,
            ignore_eos: true,
            temperature: None,
            continuous_usage: true,
        };
        let input = build_input(Endpoint::Chat, "[BENCH_x_CTX_0]", 0, false);
        let v: Value = serde_json::from_slice(&streaming_payload(&opts, &input)).unwrap();
        assert_eq!(v["stream"], true);
        assert_eq!(v["max_tokens"], 16);
        assert_eq!(v["ignore_eos"], true);
        assert_eq!(v["stream_options"]["continuous_usage_stats"], true);
        assert_eq!(v["stream_options"]["include_usage"], true);
        assert!(v.get("temperature").is_none());
        assert!(v["messages"][0]["content"]
            .as_str()
            .unwrap()
            .starts_with("[BENCH_x_CTX_0] "));
        let opts = RequestOptions {
            endpoint: Endpoint::Completions,
            ignore_eos: false,
            continuous_usage: false,
            temperature: Some(0.0),
            ..opts
        };
        let input = build_input(Endpoint::Completions, "[P]", 100, true);
        let v: Value = serde_json::from_slice(&streaming_payload(&opts, &input)).unwrap();
        assert!(v["prompt"].as_str().unwrap().starts_with("[P] Below"));
        assert!(v["prompt"].as_str().unwrap().contains("---\nThe harbour"));
        assert!(v.get("ignore_eos").is_none());
        assert_eq!(v["temperature"], 0.0);
        assert!(v["stream_options"].get("continuous_usage_stats").is_none());
    }

    #[test]
    fn template_id_is_stable_per_endpoint() {
        assert_eq!(template_id(Endpoint::Chat), template_id(Endpoint::Chat));
        assert_ne!(
            template_id(Endpoint::Chat),
            template_id(Endpoint::Completions)
        );
        assert_eq!(template_id(Endpoint::Chat).len(), 12);
    }

    #[test]
    fn calibration_cache_roundtrip() {
        let dir = tempfile::tempdir().unwrap();
        let cache = CalibrationCache::at(Some(dir.path().join("c.json")));
        let key = CalibrationCache::key("vllm", "m", "t");
        assert!(cache.get(&key).is_none());
        let e = CalibrationEntry {
            chars_per_token: 4.5,
            overhead_tokens: 80.0,
            engine: "vllm".into(),
            model: "m".into(),
            template_id: "t".into(),
            source_context: 8192,
            updated_at: "now".into(),
        };
        cache.put(&key, e.clone()).unwrap();
        assert_eq!(cache.get(&key), Some(e));
    }
}
