//! Prefill: how fast the engine ingests a prompt (seed spec §3.6, §3.8, §3.12–3.13, bugs fixed).
//!
//! * **Client headline**: `prompt_tokens / TTFT` of a cold `max_tokens: 1` streaming request
//!   (prompt tokens from the server's usage). A failed request is a failed sample — never a
//!   made-up TTFT (the seed returned the elapsed time with `ctx` tokens).
//! * **Server validation** (`--prefill-metric auto|prometheus`, metrics available): wait until the
//!   server is idle (running = queued = 0 for 1 s), snapshot the counters, send the request, wait
//!   for idle again, take the deltas. Server tok/s = Δ computed prompt tokens / Δ prefill time.
//!   Contamination guards: exactly one prefill observed (Δcount and Δsuccess in [0.5, 1.5]),
//!   tokens and seconds > 0, and — when the server counts all prompt tokens rather than the
//!   computed ones — the server's tokens equal the request's usage within 1.
//! * **Warm prefix**: the same prompt sent again. Cached tokens come from
//!   `usage.prompt_tokens_details.cached_tokens`, else from prefix-cache counter deltas; unknown
//!   when neither exists (never 0). Reported as its own row kind with the hit rate and the
//!   prefill speed of the computed part, so nobody compares it with cold prefill.

use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::{json, Value};
use servebench_metrics::{counter_delta, Concept, Engine, Scrape};
use servebench_results::{CellStatus, JsonObject, PrefillMethod, PrefillRow};
use servebench_sse::RequestRecord;
use tokio_util::sync::CancellationToken;

use crate::telemetry::Telemetry;
use servebench_client::target::HttpClient;

/// Which number heads a prefill row.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PrefillMetric {
    /// Client `prompt_tokens / TTFT` only.
    #[default]
    Client,
    /// Client headline plus server-side validation when metrics allow it.
    Auto,
    /// Server counters as the headline (client kept for comparison).
    Prometheus,
}

impl PrefillMetric {
    /// Whether server validation is attempted.
    pub fn validates(self) -> bool {
        self != PrefillMetric::Client
    }
}

/// Server-side view of one prefill request.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServerPrefill {
    /// Server tok/s (Δ tokens / Δ seconds), when the sample is valid.
    pub tok_per_sec: Option<f64>,
    /// Δ prefill seconds.
    pub prefill_seconds: Option<f64>,
    /// Δ prompt tokens used (computed ones when the server distinguishes them).
    pub prompt_tokens: Option<f64>,
    /// Δ prompt tokens of the request as a whole (cache hits included).
    pub request_prompt_tokens: Option<f64>,
    /// Δ cached prompt tokens.
    pub cached_tokens: Option<f64>,
    /// `computed` or `request_total`.
    pub token_source: &'static str,
    /// Why the sample is not valid (empty when valid).
    pub invalid_reason: String,
}

/// One prefill measurement.
#[derive(Clone, Debug)]
pub struct PrefillSample {
    /// The client's record (TTFT, usage).
    pub record: RequestRecord,
    /// The server's view, when validation ran.
    pub server: Option<ServerPrefill>,
    /// Cached tokens from prefix-cache counter deltas (when validation ran and usage had none).
    pub counter_cached_tokens: Option<f64>,
}

impl PrefillSample {
    /// Client TTFT of the sample, s: the first token event; for a one-token answer whose token
    /// had no text (no token event; vLLM sends it as a `"content": ""` chunk with the
    /// `finish_reason`), the arrival of that finish chunk — the only token's delivery. `None`
    /// without either.
    pub fn ttft_s(&self) -> Option<f64> {
        let r = &self.record;
        r.ttft_s().or_else(|| {
            let at = r
                .finish_at
                .filter(|_| r.token_events == 0 && r.output_tokens == 1)?;
            Some(at.saturating_duration_since(r.sent_at).as_secs_f64())
        })
    }

    /// Client tok/s: prompt tokens / [`Self::ttft_s`].
    pub fn client_tps(&self) -> Option<f64> {
        match (self.record.prompt_tokens, self.ttft_s()) {
            (Some(p), Some(t)) if t > 0.0 => Some(p as f64 / t),
            _ => None,
        }
    }
}

const IDLE_HOLD: Duration = Duration::from_secs(1);
const IDLE_POLL: Duration = Duration::from_millis(200);
const IDLE_TIMEOUT: Duration = Duration::from_secs(120);

/// Waits until the server reports no running and no queued request for [`IDLE_HOLD`]; returns
/// the last scrape, or `None` after [`IDLE_TIMEOUT`] / on cancellation.
async fn wait_idle(t: &Telemetry, cancel: &CancellationToken) -> Option<Scrape> {
    let deadline = Instant::now() + IDLE_TIMEOUT;
    let mut idle_since: Option<Instant> = None;
    while Instant::now() < deadline && !cancel.is_cancelled() {
        if let Some(ts) = t.scrape().await {
            let s = t.sample_of(&ts);
            let idle = s.running.unwrap_or(1.0) <= 0.0 && s.waiting.unwrap_or(1.0) <= 0.0;
            if idle {
                let since = *idle_since.get_or_insert(ts.at);
                if ts.at.duration_since(since) >= IDLE_HOLD {
                    return Some(ts.scrape);
                }
            } else {
                idle_since = None;
            }
        }
        tokio::time::sleep(IDLE_POLL).await;
    }
    None
}

fn delta(before: &Scrape, after: &Scrape, engine: Engine, c: Concept) -> Option<f64> {
    let d = counter_delta(before, after, engine, c);
    if d.reset {
        None
    } else {
        d.value
    }
}

/// Server validation from two idle scrapes around one request with `usage_prompt` tokens.
pub fn server_prefill(
    before: &Scrape,
    after: &Scrape,
    engine: Engine,
    usage_prompt: Option<u64>,
) -> ServerPrefill {
    let d = |c| delta(before, after, engine, c);
    let count = d(Concept::PrefillTimeCount);
    let success = d(Concept::RequestSuccess);
    let computed = d(Concept::PromptTokensComputed);
    let total = d(Concept::PromptTokens);
    let cached = d(Concept::PromptTokensCached);
    let seconds = d(Concept::PrefillTimeSum).or_else(|| d(Concept::PrefillSeconds));
    let (tokens, source) = match computed {
        Some(c) => (Some(c), "computed"),
        None => (total, "request_total"),
    };
    let mut out = ServerPrefill {
        prefill_seconds: seconds,
        prompt_tokens: tokens,
        request_prompt_tokens: total,
        cached_tokens: cached,
        token_source: source,
        ..Default::default()
    };
    let in_range = |v: Option<f64>| v.is_none_or(|x| (0.5..=1.5).contains(&x));
    out.invalid_reason = if !in_range(count) {
        format!(
            "{} prefills observed during the sample (contaminated)",
            count.unwrap_or(0.0)
        )
    } else if !in_range(success) {
        format!(
            "{} requests finished during the sample (contaminated)",
            success.unwrap_or(0.0)
        )
    } else if tokens.is_none_or(|t| t <= 0.0) {
        "no prompt-token counter delta".into()
    } else if seconds.is_none_or(|s| s <= 0.0) {
        "no prefill-time counter delta".into()
    } else if source == "request_total"
        && usage_prompt.is_some_and(|u| (tokens.unwrap_or(0.0) - u as f64).abs() > 1.0)
    {
        format!(
            "server counted {:.0} prompt tokens, the request had {} (contaminated)",
            tokens.unwrap_or(0.0),
            usage_prompt.unwrap_or(0)
        )
    } else {
        String::new()
    };
    if out.invalid_reason.is_empty() {
        out.tok_per_sec = Some(tokens.unwrap_or(0.0) / seconds.unwrap_or(1.0));
    }
    out
}

/// Sends one `max_tokens: 1` request (`body`, alone, through the load driver) and measures it;
/// with `validate`, waits for an idle server around it and computes the server's view. `Err` =
/// the request failed (reason).
pub async fn measure_prefill_once(
    client: &HttpClient,
    path: &'static str,
    body: Bytes,
    telemetry: Option<&Telemetry>,
    validate: bool,
    cancel: &CancellationToken,
) -> Result<PrefillSample, String> {
    let before = match (telemetry, validate) {
        (Some(t), true) => wait_idle(t, cancel).await,
        _ => None,
    };
    let out = crate::load::scout::single(client, path, body, false, cancel).await;
    if cancel.is_cancelled() {
        return Err("interrupted".into());
    }
    if let Some(e) = out.record.error {
        return Err(e);
    }
    let mut sample = PrefillSample {
        record: out.record,
        server: None,
        counter_cached_tokens: None,
    };
    if let (Some(t), Some(b)) = (telemetry, before.as_ref()) {
        match wait_idle(t, cancel).await {
            Some(a) => {
                let sp = server_prefill(b, &a, t.engine(), sample.record.prompt_tokens);
                let hits = delta(b, &a, t.engine(), Concept::PrefixCacheHits);
                sample.counter_cached_tokens = sp.cached_tokens.or(hits);
                sample.server = Some(sp);
            }
            None => {
                sample.server = Some(ServerPrefill {
                    invalid_reason: "the server did not become idle after the request".into(),
                    ..Default::default()
                });
            }
        }
    } else if validate && telemetry.is_some() {
        sample.server = Some(ServerPrefill {
            invalid_reason: "the server did not become idle before the request".into(),
            ..Default::default()
        });
    }
    Ok(sample)
}

fn median(v: &mut [f64]) -> Option<f64> {
    servebench_stats::median(v)
}

fn server_validation_json(samples: &[&PrefillSample], validate: bool) -> JsonObject {
    let mut m = JsonObject::new();
    if !validate {
        return m;
    }
    let valid: Vec<&ServerPrefill> = samples
        .iter()
        .filter_map(|s| s.server.as_ref())
        .filter(|s| s.tok_per_sec.is_some())
        .collect();
    let first_invalid = samples
        .iter()
        .filter_map(|s| s.server.as_ref())
        .find(|s| !s.invalid_reason.is_empty())
        .map(|s| s.invalid_reason.clone())
        .or_else(|| {
            samples
                .iter()
                .all(|s| s.server.is_none())
                .then(|| "server metrics unavailable".to_string())
        })
        .unwrap_or_default();
    let col = |f: &dyn Fn(&ServerPrefill) -> Option<f64>| -> Option<f64> {
        let mut v: Vec<f64> = valid.iter().filter_map(|s| f(s)).collect();
        median(&mut v)
    };
    let source = valid.first().map(|s| s.token_source).unwrap_or("");
    m.insert(
        "method".into(),
        Value::String(if valid.is_empty() {
            String::new()
        } else {
            format!("prometheus:{source}")
        }),
    );
    m.insert("tok_per_sec".into(), json!(col(&|s| s.tok_per_sec)));
    m.insert("prefill_seconds".into(), json!(col(&|s| s.prefill_seconds)));
    m.insert("prompt_tokens".into(), json!(col(&|s| s.prompt_tokens)));
    m.insert(
        "request_prompt_tokens".into(),
        json!(col(&|s| s.request_prompt_tokens)),
    );
    m.insert("cached_tokens".into(), json!(col(&|s| s.cached_tokens)));
    m.insert("token_source".into(), Value::String(source.into()));
    m.insert("samples".into(), json!(valid.len()));
    m.insert(
        "invalid_reason".into(),
        Value::String(if valid.is_empty() {
            first_invalid
        } else {
            String::new()
        }),
    );
    m
}

/// Builds a cold prefill row from its samples (medians over the successful ones).
///
/// `method`: `integrated_scout`, `scout_only`, `client` (standalone) — with
/// [`PrefillMetric::Prometheus`] the headline becomes the server value and the method
/// `prometheus`. `failures`: reasons of failed samples.
pub fn cold_row(
    samples: &[PrefillSample],
    failures: &[String],
    method: PrefillMethod,
    metric: PrefillMetric,
) -> PrefillRow {
    let ok: Vec<&PrefillSample> = samples
        .iter()
        .filter(|s| s.client_tps().is_some())
        .collect();
    let mut ttft: Vec<f64> = ok.iter().filter_map(|s| s.ttft_s()).collect();
    let mut tps: Vec<f64> = ok.iter().filter_map(|s| s.client_tps()).collect();
    let mut prompt: Vec<f64> = ok
        .iter()
        .filter_map(|s| s.record.prompt_tokens.map(|p| p as f64))
        .collect();
    let client_ttft = median(&mut ttft);
    let client_tps = median(&mut tps);
    let sv = server_validation_json(&ok, metric.validates());
    let server_tps = sv.get("tok_per_sec").and_then(Value::as_f64);
    let server_secs = sv.get("prefill_seconds").and_then(Value::as_f64);
    let (tok_per_sec, prefill_seconds, method) = if metric == PrefillMetric::Prometheus {
        (server_tps, server_secs, PrefillMethod::Prometheus)
    } else {
        (client_tps, client_ttft, method)
    };
    let (status, reason) = if ok.is_empty() {
        (
            CellStatus::Error,
            Some(format!(
                "no successful sample: {}",
                failures
                    .first()
                    .cloned()
                    .unwrap_or_else(|| "no usage.prompt_tokens in the answer".into())
            )),
        )
    } else if metric == PrefillMetric::Prometheus && server_tps.is_none() {
        (
            CellStatus::Invalid,
            Some(format!(
                "no valid server sample: {}",
                sv.get("invalid_reason")
                    .and_then(Value::as_str)
                    .unwrap_or("")
            )),
        )
    } else {
        (
            CellStatus::Ok,
            (!failures.is_empty()).then(|| {
                format!(
                    "{} of {} samples failed: {}",
                    failures.len(),
                    failures.len() + samples.len(),
                    failures[0]
                )
            }),
        )
    };
    PrefillRow {
        ttft_seconds: client_ttft,
        prefill_seconds,
        tok_per_sec,
        client_ttft_seconds: client_ttft,
        client_tok_per_sec: client_tps,
        prompt_tokens: median(&mut prompt).map(|p| p.round() as u64),
        samples: ok.len() as u64,
        method,
        server_validation: sv,
        hardware_summary: JsonObject::new(),
        status: Some(status),
        status_reason: reason,
        ..Default::default()
    }
}

/// How many times the prompt's size a server's `usage.prompt_tokens` may be before it is no
/// count of that prompt: prompts are sized to their context (within a few percent once
/// calibrated, within a chat template's tokens otherwise), so 4x plus
/// [`PROMPT_INFLATION_SLACK`] tokens is far beyond any tokenizer or template difference.
pub const PROMPT_INFLATION_RATIO: f64 = servebench_results::check::PROMPT_RATIO;

/// Tokens a reported prompt may exceed [`PROMPT_INFLATION_RATIO`] × its context by (a chat
/// template and a system prompt around a short prompt).
pub const PROMPT_INFLATION_SLACK: u64 = servebench_results::check::PROMPT_SLACK_TOKENS as u64;

/// Marks `row` (cold or warm, of context `ctx` tokens) `invalid` (its tok/s null) with a `usage_implausible`
/// reason when the server's `usage.prompt_tokens` cannot count the prompt that was sent: above
/// the model's `max_model_len` (the server could not have accepted it) or above
/// [`PROMPT_INFLATION_RATIO`] × `ctx` + [`PROMPT_INFLATION_SLACK`]. A prefill speed of
/// 8e14 tok/s from a claimed 1e12-token prompt is no measurement (issue 17). Rows that are not
/// `ok` are left as they are.
///
/// `sent_bytes`: the bytes of the request's input as sent (the JSON of its `messages` or
/// `prompt`), when known: more prompt tokens than those bytes plus
/// [`crate::plausibility::PROMPT_TEMPLATE_SLACK_TOKENS`] is no tokenizer's count either (the
/// bound of the decode cells, break-it round 7).
pub fn check_prompt_tokens(
    row: &mut PrefillRow,
    ctx: u64,
    max_model_len: Option<u64>,
    sent_bytes: Option<u64>,
) {
    let (Some(p), Some(CellStatus::Ok)) = (row.prompt_tokens, row.status) else {
        return;
    };
    let limit = PROMPT_INFLATION_RATIO * ctx as f64 + PROMPT_INFLATION_SLACK as f64;
    let slack = crate::plausibility::PROMPT_TEMPLATE_SLACK_TOKENS;
    let why = match max_model_len {
        Some(m) if p > m => format!("above the model's max_model_len {m}"),
        _ if sent_bytes.is_some_and(|b| b > 0 && p > b + slack) => format!(
            "more than one per byte of the {}-byte input sent plus {slack} for the template",
            sent_bytes.unwrap_or_default()
        ),
        _ if p as f64 > limit => {
            format!("more than {PROMPT_INFLATION_RATIO:.0}x the ~{ctx}-token prompt that was sent")
        }
        _ => return,
    };
    row.status = Some(CellStatus::Invalid);
    row.status_reason = Some(format!(
        "usage_implausible: the server reported {p} prompt tokens, {why}: the count is no count of this prompt, so neither is its tok/s"
    ));
    // A speed computed from that count is no measurement: null, not 7.6e14 tok/s in a table.
    row.tok_per_sec = None;
    row.client_tok_per_sec = None;
    // so is what is derived from it (computed = prompt − cached, hit rate = cached / prompt)
    row.computed_tokens = None;
    row.cache_hit_rate = None;
}

/// A warm-prefix row: the same prompt sent again.
///
/// Cached tokens: `usage.prompt_tokens_details.cached_tokens`, else the prefix-cache counter delta
/// (validation runs only), else unknown. Computed tokens = prompt − cached; `tok_per_sec` is the
/// prefill speed of the computed part (computed / TTFT), `cache_hit_rate` = cached / prompt.
pub fn warm_row(sample: Result<&PrefillSample, &String>) -> PrefillRow {
    let s = match sample {
        Ok(s) => s,
        Err(e) => {
            return PrefillRow {
                method: PrefillMethod::WarmPrefix,
                status: Some(CellStatus::Error),
                status_reason: Some(format!("warm request failed: {e}")),
                ..Default::default()
            }
        }
    };
    let ttft = s.ttft_s();
    let prompt = s.record.prompt_tokens;
    let (cached, source) = match (s.record.cached_tokens, s.counter_cached_tokens) {
        (Some(c), _) => (Some(c), "usage"),
        (None, Some(c)) => (Some(c.round().max(0.0) as u64), "prefix_cache_counters"),
        (None, None) => (None, "unknown"),
    };
    let computed = match (prompt, cached) {
        (Some(p), Some(c)) => Some(p.saturating_sub(c)),
        _ => None,
    };
    let tps = match (computed, ttft) {
        (Some(c), Some(t)) if t > 0.0 => Some(c as f64 / t),
        _ => None,
    };
    if let (Some(p), Some(c)) = (prompt, cached) {
        if c > p {
            // A cache cannot hold more of the prompt than the prompt: the count is no
            // measurement, and a hit rate above 1 would be written as one.
            return PrefillRow {
                ttft_seconds: ttft,
                prompt_tokens: prompt,
                cached_tokens: cached,
                cached_tokens_source: Some(source.into()),
                method: PrefillMethod::WarmPrefix,
                status: Some(CellStatus::Invalid),
                status_reason: Some(format!(
                    "usage_implausible: the server reported {c} cached tokens of a {p}-token prompt"
                )),
                ..Default::default()
            };
        }
    }
    PrefillRow {
        ttft_seconds: ttft,
        prefill_seconds: ttft,
        tok_per_sec: tps,
        client_ttft_seconds: ttft,
        client_tok_per_sec: tps,
        prompt_tokens: prompt,
        samples: 1,
        method: PrefillMethod::WarmPrefix,
        cached_tokens: cached,
        computed_tokens: computed,
        cache_hit_rate: match (prompt, cached) {
            (Some(p), Some(c)) if p > 0 => Some(c as f64 / p as f64),
            _ => None,
        },
        cached_tokens_source: Some(source.into()),
        status: Some(CellStatus::Ok),
        status_reason: cached.is_none().then(|| "the server reports no cached-token count and no prefix-cache counters: hit rate unknown".to_string()),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scrape(text: &str) -> Scrape {
        Scrape::parse(text).unwrap()
    }

    /// A prefill request (max_tokens 1) against a greedy random-weight model on vLLM: the one
    /// token has no text, so it comes as `"content": ""` with the finish_reason (as in
    /// tests/data/engines/local-captures/vllm-chat-stream-empty-content-tokens.sse). The sample
    /// times it at that finish chunk; a token event, when there is one, wins.
    #[test]
    fn a_text_less_single_token_is_timed_at_its_finish_chunk() {
        let base = Instant::now();
        let at = |ms: u64| base + Duration::from_millis(ms);
        let sample = |payloads: &[(u64, &str)]| {
            let mut t = servebench_sse::RequestTracker::new(base);
            for (ms, data) in payloads {
                t.apply_event(&servebench_sse::SseEvent {
                    event: None,
                    data,
                    at: at(*ms),
                });
            }
            PrefillSample {
                record: t.finish(at(60), true, false),
                server: None,
                counter_cached_tokens: None,
            }
        };
        let role = r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#;
        let usage = r#"{"choices":[],"usage":{"prompt_tokens":512,"completion_tokens":1}}"#;
        let empty_finish =
            r#"{"choices":[{"index":0,"delta":{"content":""},"finish_reason":"length"}]}"#;
        let s = sample(&[(5, role), (40, empty_finish), (41, usage), (42, "[DONE]")]);
        assert_eq!(s.record.token_events, 0);
        assert_eq!(s.record.ttft_s(), None, "no token event, no token time");
        assert_eq!(s.ttft_s(), Some(0.040));
        assert_eq!(s.client_tps(), Some(512.0 / 0.040));
        let text_finish =
            r#"{"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":"length"}]}"#;
        let s = sample(&[(5, role), (30, text_finish), (41, usage), (42, "[DONE]")]);
        assert_eq!(s.ttft_s(), Some(0.030), "the token event");
        // Two untimed tokens: the finish chunk is not the first token's time.
        let usage2 = r#"{"choices":[],"usage":{"prompt_tokens":512,"completion_tokens":2}}"#;
        let s = sample(&[(5, role), (40, empty_finish), (41, usage2), (42, "[DONE]")]);
        assert_eq!(s.ttft_s(), None);
        // No finish chunk at all: nothing to time.
        let s = sample(&[(5, role), (41, usage), (42, "[DONE]")]);
        assert_eq!(s.ttft_s(), None);
    }

    /// Issue 17 break-it round 3: a server that reported more cached tokens than the prompt
    /// held gave an `ok` warm row with a hit rate of 19,999.8 (and `validate` passed it).
    #[test]
    fn more_cached_tokens_than_the_prompt_is_an_invalid_warm_row() {
        let base = Instant::now();
        let mut t = servebench_sse::RequestTracker::new(base);
        for (ms, data) in [
            (
                30,
                r#"{"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":"length"}]}"#,
            ),
            (
                31,
                r#"{"choices":[],"usage":{"prompt_tokens":50,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":999990}}}"#,
            ),
            (32, "[DONE]"),
        ] {
            t.apply_event(&servebench_sse::SseEvent {
                event: None,
                data,
                at: base + Duration::from_millis(ms),
            });
        }
        let s = PrefillSample {
            record: t.finish(base + Duration::from_millis(40), true, false),
            server: None,
            counter_cached_tokens: None,
        };
        let row = warm_row(Ok(&s));
        assert_eq!(row.status, Some(CellStatus::Invalid), "{row:?}");
        assert_eq!(row.cache_hit_rate, None);
        assert_eq!(row.tok_per_sec, None);
        assert!(row
            .status_reason
            .as_deref()
            .is_some_and(|r| r.starts_with("usage_implausible") && r.contains("999990")));
    }

    /// Issue 17 break-it round 4: `usage.prompt_tokens` = 1e12 gave an ok row at 8e14 tok/s.
    #[test]
    fn a_prompt_count_the_server_could_not_have_seen_is_an_invalid_row() {
        let ok = |p: u64| PrefillRow {
            prompt_tokens: Some(p),
            tok_per_sec: Some(1e3),
            status: Some(CellStatus::Ok),
            cached_tokens: Some(1000),
            computed_tokens: Some(p.saturating_sub(1000)),
            cache_hit_rate: Some(1000.0 / p as f64),
            ..Default::default()
        };
        let judged = |p: u64, max: Option<u64>| {
            let mut r = ok(p);
            check_prompt_tokens(&mut r, 16_384, max, None);
            r
        };
        // a tokenizer or template difference stays ok, up to the limit itself
        assert_eq!(judged(17_000, None).status, Some(CellStatus::Ok));
        assert_eq!(judged(4 * 16_384 + 4096, None).status, Some(CellStatus::Ok));
        let r = judged(4 * 16_384 + 4097, None);
        assert_eq!(r.status, Some(CellStatus::Invalid));
        assert_eq!((r.tok_per_sec, r.client_tok_per_sec), (None, None));
        assert_eq!((r.computed_tokens, r.cache_hit_rate), (None, None));
        assert!(r
            .status_reason
            .unwrap()
            .starts_with("usage_implausible: the server reported 69633 prompt tokens"));
        let r = judged(1_000_000_000_000, Some(32_768));
        assert!(r
            .status_reason
            .unwrap()
            .contains("above the model's max_model_len 32768"));
        assert_eq!(
            judged(32_769, Some(32_768)).status,
            Some(CellStatus::Invalid)
        );
        assert_eq!(judged(32_768, Some(32_768)).status, Some(CellStatus::Ok));
        // more tokens than bytes sent (+ the template's slack): a 20,000-byte input cannot be
        // 30,000 tokens although that is within 4 × the context (break-it round 7)
        let bytes = |p: u64, b: u64| {
            let mut r = ok(p);
            check_prompt_tokens(&mut r, 16_384, None, Some(b));
            r
        };
        assert_eq!(bytes(21_024, 20_000).status, Some(CellStatus::Ok));
        let r = bytes(21_025, 20_000);
        assert_eq!(r.status, Some(CellStatus::Invalid));
        assert!(r
            .status_reason
            .unwrap()
            .contains("more than one per byte of the 20000-byte input sent"));
        // a failed row keeps its own reason
        let mut failed = PrefillRow {
            prompt_tokens: Some(u64::MAX),
            status: Some(CellStatus::Error),
            status_reason: Some("no successful sample".into()),
            ..Default::default()
        };
        check_prompt_tokens(&mut failed, 0, None, None);
        assert_eq!(
            failed.status_reason.as_deref(),
            Some("no successful sample")
        );
    }

    #[test]
    fn server_validation_guards() {
        let b = scrape("vllm:prompt_tokens_total{engine=\"0\"} 100\nvllm:request_prefill_time_seconds_sum{engine=\"0\"} 1.0\nvllm:request_prefill_time_seconds_count{engine=\"0\"} 3\n");
        let a = scrape("vllm:prompt_tokens_total{engine=\"0\"} 1124\nvllm:request_prefill_time_seconds_sum{engine=\"0\"} 1.5\nvllm:request_prefill_time_seconds_count{engine=\"0\"} 4\n");
        let sp = server_prefill(&b, &a, Engine::Vllm, Some(1024));
        assert_eq!(sp.invalid_reason, "");
        assert_eq!(sp.tok_per_sec, Some(2048.0));
        assert_eq!(sp.token_source, "request_total");
        // a second request sneaked in: two prefills observed
        let a2 = scrape("vllm:prompt_tokens_total{engine=\"0\"} 2148\nvllm:request_prefill_time_seconds_sum{engine=\"0\"} 2.0\nvllm:request_prefill_time_seconds_count{engine=\"0\"} 5\n");
        let sp = server_prefill(&b, &a2, Engine::Vllm, Some(1024));
        assert!(
            sp.invalid_reason.contains("contaminated"),
            "{}",
            sp.invalid_reason
        );
        assert_eq!(sp.tok_per_sec, None);
        // token count disagrees with usage
        let sp = server_prefill(&b, &a, Engine::Vllm, Some(900));
        assert!(sp.invalid_reason.contains("900"), "{}", sp.invalid_reason);
    }
}
