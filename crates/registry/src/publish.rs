//! `servebench publish`: one results JSON → one speed sweep (plus the recipe link, and drafted
//! `candidate` records when the recipe is new).
//!
//! # Rows
//! One row per sustained-decode cell (`results[]`), cold prefill row (`prefill`), warm-prefix
//! prefill row (`prefill_warm`), Burst / E2E cell (`burst_results[]`) and request-rate cell
//! (`rate_results[]`, when the results have it). Failed and skipped cells are rows too. Each
//! row carries `layer` (`sustained_decode`, `prefill`, `prefill_warm`, `burst_e2e`,
//! `request_rate`), `context_label_tokens` (the planned context) and the cell's status.
//!
//! # Verdict rules (first that applies wins; the rule id is stored in `verdict.rule`)
//! | rule | condition | verdict |
//! |---|---|---|
//! | `not-run` | cell status `skipped_*` | `not-run` |
//! | `infra-invalid` | cell status `error` | `infra-invalid` |
//! | `cell-invalid` | cell status `invalid`, or no headline number | `measurement-invalid` |
//! | `implausible` | a number outside physical bounds ([`crate::validate::bounds`]: TTFT < 1 ms, per-stream decode > 5,000 tok/s, …), or a cell warning `single_write` / `implausible_speed` / `usage_implausible` from the run | `measurement-invalid` |
//! | `client-lag` | `client_max_tick_lag_ms` > [`CLIENT_LAG_MAX_MS`] | `measurement-invalid` |
//! | `server-disagrees` | the server's counter delta differs from the client's rate × the server's window by more than [`SERVER_AGREE_REL`] + [`SERVER_AGREE_TOKENS_PER_STREAM`] × C tokens, or a counter reset | `measurement-invalid` |
//! | `cold-cache-hit` | a cold prefill row whose server reports cached prompt tokens | `measurement-invalid` |
//! | `capacity-limited` | `capacity_limited`, `underfilled` or `warmup_timed_out` | `candidate` |
//! | `regression` | `--baseline` has an accepted row of the same (layer, C, context) and this row's rate (decode: `decode_tok_s`, prefill: `prefill_tok_s`) is lower by more than [`REGRESSION_NOISE`] | `rejected-…-regression` |
//! | `accepted` | otherwise | `accepted` |
//!
//! Tags: profile `c1` (sustained C = 1), `concurrency-sweep` (sustained C > 1), `prefill`,
//! `burst-e2e`, `request-rate`; cache `cold` when every request that reports cached tokens
//! reports 0, `warm-prefix` when some are cached — and, when the server reports nothing,
//! `warm-prefix` for decode layers (servebench primes each context's shared prefix with a scout
//! on purpose, `core::prompt`) and `cold` for the cold prefill layer.
//!
//! # Metrics and provenance
//! `metrics` by [`crate::metrics::METRIC_RULE`]; `measured_at` = `metadata.started_at` (else
//! `metadata.timestamp`, as written by the run), never the publishing time; `accepted_at` = the
//! publishing time when at least one row is accepted, else null. `source` names the tool and
//! version, the publish command line, the results file's sha256, engine and version, model,
//! host identity (hostname, hardware id and count), run id, metric rule and rate kind.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde_json::{json, Map, Value};
use servebench_results::{CellResult, CellStatus, PrefillRow, RateRow, RateSummary, Results};

use crate::draft::{self, DraftSource, HardwareFacts, RecipeDraft};
use crate::metrics;
use crate::records::SweepRow;
use crate::verdict::{profile, CacheTag, RowVerdict, Verdict};
use crate::{is_valid_id, Collection, Registry, SCHEMA_VERSION};

/// `source.tool.name` of sweeps servebench publishes.
pub const TOOL_NAME: &str = "servebench";
/// `source.kind` of sweeps servebench publishes.
pub const SOURCE_KIND: &str = "servebench-run";
/// Client monitor-tick lag above which the client may have limited the cell, ms (the same
/// threshold as the cell's own warning, `core::cell`).
pub const CLIENT_LAG_MAX_MS: f64 = 50.0;
/// Relative tolerance between the server's generated-token counter and the client's count.
pub const SERVER_AGREE_REL: f64 = 0.10;
/// Absolute slack per stream for the counter comparison (tokens in flight at the edges).
pub const SERVER_AGREE_TOKENS_PER_STREAM: f64 = 4.0;
/// Relative slowdown against a baseline row treated as noise (5 %).
pub const REGRESSION_NOISE: f64 = 0.05;

/// What `publish` needs besides the results.
#[derive(Clone, Debug)]
pub struct PublishOptions {
    /// Recipe id (existing, or drafted).
    pub recipe_id: String,
    /// Sweep id; default `<recipe-id>-<YYYYMMDD>-<run id>`.
    pub sweep_id: Option<String>,
    /// Baseline sweep id for regression verdicts.
    pub baseline: Option<String>,
    /// Existing hardware record for a drafted recipe.
    pub hardware_id: Option<String>,
    /// Existing model-instance record for a drafted recipe.
    pub model_instance_id: Option<String>,
    /// sha256 of the results file's bytes (lowercase hex).
    pub results_sha256: String,
    /// Name of the results file (recorded in `source.paths`).
    pub results_file: String,
    /// The publish command line.
    pub command: Vec<String>,
    /// The publishing time (`accepted_at`, `captured_at`).
    pub now: DateTime<Utc>,
    /// servebench version.
    pub tool_version: String,
}

/// A publish that could not be done (nothing is written).
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// Bad option value (exit 2).
    #[error("{0}")]
    Usage(String),
    /// The results or registry do not allow it.
    #[error("{0}")]
    Refused(String),
    /// Writing failed.
    #[error("cannot write {0}")]
    Io(String, #[source] std::io::Error),
    /// The write was refused (the registry-to-be has new problems, a path out of the
    /// registry) or failed; nothing was written.
    #[error(transparent)]
    Write(#[from] crate::WriteError),
}

/// What was written.
#[derive(Clone, Debug, Default)]
pub struct PublishOutcome {
    /// The new sweep id.
    pub sweep_id: String,
    /// Records written, `(collection, id)`.
    pub written: Vec<(Collection, String)>,
    /// Of those, drafted as new `candidate` stubs.
    pub drafted: Vec<(Collection, String)>,
    /// Rows per status string.
    pub statuses: BTreeMap<String, usize>,
}

/// sha256 of `bytes`, lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, bytes);
    d.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// Accepted baseline rows keyed by (layer, C, context label) → headline rate, tok/s.
pub type BaselineRates = BTreeMap<(String, u64, u64), f64>;

/// Which measurement layer a row came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Layer {
    /// `results[]`.
    SustainedDecode,
    /// `prefill{}` (cold).
    Prefill,
    /// `prefill_warm{}`.
    PrefillWarm,
    /// `burst_results[]`.
    BurstE2e,
    /// `rate_results[]`.
    RequestRate,
}

impl Layer {
    /// The row's `layer` value.
    pub fn as_str(self) -> &'static str {
        match self {
            Layer::SustainedDecode => "sustained_decode",
            Layer::Prefill => "prefill",
            Layer::PrefillWarm => "prefill_warm",
            Layer::BurstE2e => "burst_e2e",
            Layer::RequestRate => "request_rate",
        }
    }
}

/// The facts about one cell that the verdict rules read (a pure input, table-tested).
#[derive(Clone, Debug, Default)]
pub struct CellFacts {
    /// Cell status.
    pub status: CellStatus,
    /// Why not ok.
    pub status_reason: String,
    /// Headline rate (decode aggregate or prefill tok/s); None = not measured.
    pub rate: Option<f64>,
    /// Capacity-limited flag.
    pub capacity_limited: bool,
    /// Underfilled flag.
    pub underfilled: bool,
    /// Readiness timed out.
    pub warmup_timed_out: bool,
    /// Client monitor lag, ms.
    pub client_max_tick_lag_ms: Option<f64>,
    /// Client's aggregate rate, tok/s (decode layers).
    pub client_tps: Option<f64>,
    /// Server's generated tokens over its window.
    pub server_output_tokens: Option<f64>,
    /// The server's window, s.
    pub server_window_seconds: Option<f64>,
    /// A server counter went down.
    pub server_counter_reset: bool,
    /// Concurrency.
    pub concurrency: u64,
    /// Cold prefill row with cached prompt tokens reported by the server.
    pub cold_cached_tokens: Option<u64>,
    /// Why the row's numbers are physically implausible ([`crate::validate::implausible`]).
    pub implausible: Option<String>,
}

/// Decides a row's verdict from its cell facts, tags and the baseline's rate (the table in
/// the module docs).
pub fn decide(
    f: &CellFacts,
    cache: CacheTag,
    profile: &str,
    baseline: Option<(&str, f64)>,
) -> RowVerdict {
    let tagged = |verdict: Verdict, rule: &str, reason: String| {
        let mut v = RowVerdict::new(verdict);
        if !verdict.stands_alone() {
            v.cache = Some(cache);
            v.profile = Some(profile.to_string());
        }
        v.rule = Some(rule.to_string());
        v.reason = (!reason.is_empty()).then_some(reason);
        v
    };
    let reason = |default: &str| {
        if f.status_reason.is_empty() {
            format!("cell status {}: {default}", f.status.as_str())
        } else {
            f.status_reason.clone()
        }
    };
    if f.status.is_skipped() {
        return tagged(Verdict::NotRun, "not-run", reason("not run"));
    }
    if f.status == CellStatus::Error {
        return tagged(
            Verdict::InfraInvalid,
            "infra-invalid",
            reason("the cell could not run"),
        );
    }
    if f.status == CellStatus::Invalid || f.rate.is_none() {
        let why = if f.status_reason.is_empty() {
            "no headline number was measured".to_string()
        } else {
            f.status_reason.clone()
        };
        return tagged(Verdict::MeasurementInvalid, "cell-invalid", why);
    }
    if let Some(why) = &f.implausible {
        return tagged(Verdict::MeasurementInvalid, "implausible", why.clone());
    }
    if let Some(lag) = f.client_max_tick_lag_ms.filter(|l| *l > CLIENT_LAG_MAX_MS) {
        return tagged(
            Verdict::MeasurementInvalid,
            "client-lag",
            format!("the client's monitor tick ran {lag:.0} ms late (> {CLIENT_LAG_MAX_MS} ms): the client may have limited the cell"),
        );
    }
    if f.server_counter_reset {
        return tagged(
            Verdict::MeasurementInvalid,
            "server-disagrees",
            "a server counter went down during the window (restart)".into(),
        );
    }
    if let (Some(tps), Some(server), Some(win)) = (
        f.client_tps,
        f.server_output_tokens,
        f.server_window_seconds,
    ) {
        let expected = tps * win;
        let slack =
            SERVER_AGREE_REL * expected + SERVER_AGREE_TOKENS_PER_STREAM * f.concurrency as f64;
        if (server - expected).abs() > slack {
            return tagged(
                Verdict::MeasurementInvalid,
                "server-disagrees",
                format!("the server counted {server:.0} generated tokens over {win:.3} s, the client's rate gives {expected:.0} (± {slack:.0})"),
            );
        }
    }
    if let Some(c) = f.cold_cached_tokens.filter(|c| *c > 0) {
        return tagged(
            Verdict::MeasurementInvalid,
            "cold-cache-hit",
            format!("a cold prefill row, but the server reports {c} cached prompt tokens"),
        );
    }
    if f.capacity_limited || f.underfilled || f.warmup_timed_out {
        let what: Vec<&str> = [
            (f.capacity_limited, "capacity-limited"),
            (f.underfilled, "underfilled"),
            (f.warmup_timed_out, "readiness timed out"),
        ]
        .into_iter()
        .filter_map(|(b, s)| b.then_some(s))
        .collect();
        return tagged(
            Verdict::Candidate,
            "capacity-limited",
            format!(
                "{}: the server did not run all C = {} streams",
                what.join(", "),
                f.concurrency
            ),
        );
    }
    if let (Some((base_id, base_rate)), Some(rate)) = (baseline, f.rate) {
        if rate < base_rate * (1.0 - REGRESSION_NOISE) {
            let mut v = tagged(
                Verdict::Rejected,
                "regression",
                format!(
                    "{rate:.2} tok/s is {:.1} % below the baseline's {base_rate:.2} tok/s (noise {:.0} %)",
                    100.0 * (1.0 - rate / base_rate),
                    REGRESSION_NOISE * 100.0
                ),
            );
            v.regression = true;
            v.compared_to = Some(base_id.to_string());
            return v;
        }
        let mut v = tagged(Verdict::Accepted, "accepted", String::new());
        v.compared_to = Some(base_id.to_string());
        return v;
    }
    tagged(Verdict::Accepted, "accepted", String::new())
}

fn round(x: f64, dp: i32) -> f64 {
    let m = 10f64.powi(dp);
    (x * m).round() / m
}

fn ms(s: Option<f64>) -> Option<f64> {
    s.map(|s| round(s * 1000.0, 3))
}

/// Peak VRAM of a hardware summary, GB (`vram_used_max_mb` MiB / 1024); None without data.
pub fn peak_vram_gb(summary: &Map<String, Value>) -> Option<f64> {
    summary
        .get("vram_used_max_mb")
        .and_then(Value::as_f64)
        .filter(|v| *v > 0.0)
        .map(|mb| round(mb / 1024.0, 3))
}

/// Cache tag and evidence from per-request cached tokens: (tag if known, hit rate, cached
/// tokens, computed tokens).
fn cache_evidence(c: &CellResult) -> (Option<CacheTag>, Option<f64>, Option<u64>, Option<u64>) {
    let known: Vec<(u64, Option<u64>)> = c
        .request_samples
        .iter()
        .filter_map(|s| s.cached_tokens.map(|k| (k, s.input_tokens)))
        .collect();
    if known.is_empty() {
        return (None, c.server_prefix_cache_hit_rate, None, None);
    }
    let cached: u64 = known.iter().map(|k| k.0).sum();
    let prompt: Option<u64> = known.iter().map(|k| k.1).sum();
    let tag = if cached == 0 {
        CacheTag::Cold
    } else {
        CacheTag::WarmPrefix
    };
    let rate = prompt
        .filter(|p| *p > 0)
        .map(|p| cached as f64 / p as f64)
        // More cached than prompt tokens is not a rate; leave it to the server's own figure.
        .filter(|r| *r <= 1.0)
        .map(|r| round(r, 4))
        .or(c.server_prefix_cache_hit_rate);
    (
        Some(tag),
        rate,
        Some(cached),
        prompt.map(|p| p.saturating_sub(cached)),
    )
}

struct RowBuild {
    layer: Layer,
    concurrency: u64,
    context_label: u64,
    row: SweepRow,
    facts: CellFacts,
    cache: CacheTag,
    profile: &'static str,
}

fn cell_row(c: &CellResult, layer: Layer, max_tokens: u64) -> RowBuild {
    let (cache_known, hit_rate, cached, computed) = cache_evidence(c);
    let cache = cache_known.unwrap_or(CacheTag::WarmPrefix);
    let profile = match layer {
        Layer::BurstE2e => profile::BURST_E2E,
        Layer::RequestRate => profile::REQUEST_RATE,
        _ if c.concurrency <= 1 => profile::C1,
        _ => profile::CONCURRENCY_SWEEP,
    };
    let ok = c.status == CellStatus::Ok;
    let rate = if ok { c.aggregate_tps } else { None };
    let window = c.measurement_seconds.filter(|w| *w > 0.0);
    // Prompt + output tokens of the requests sent inside the window, per minute.
    let total_tpm = (|| {
        let w = window?;
        let out = c.client_output_tokens? as f64;
        let prompt: u64 = c
            .request_samples
            .iter()
            .filter(|s| s.sent_at_window_s.is_some_and(|t| t >= 0.0 && t < w))
            .map(|s| s.input_tokens)
            .sum::<Option<u64>>()?;
        Some(round((out + prompt as f64) / w * 60.0, 3))
    })();
    let mut extra = Map::new();
    extra.insert("layer".into(), json!(layer.as_str()));
    extra.insert("context_label_tokens".into(), json!(c.context_tokens));
    extra.insert("cell_status".into(), json!(c.status.as_str()));
    if !c.status_reason.is_empty() {
        extra.insert("cell_status_reason".into(), json!(c.status_reason));
    }
    for (k, v) in [
        ("capacity_limited", json!(c.capacity_limited)),
        ("underfilled", json!(c.underfilled)),
        ("benchmark_mode", json!(c.benchmark_mode)),
        ("aggregate_source", json!(c.aggregate_source)),
        ("client_output_tokens", json!(c.client_output_tokens)),
        ("server_output_tokens", json!(c.server_output_tokens)),
        ("client_max_tick_lag_ms", json!(c.client_max_tick_lag_ms)),
        ("ttft_ms_p90", json!(ms(c.ttft_p90))),
        ("ttft_ms_p99", json!(ms(c.ttft_p99))),
        ("itl_ms_p50", json!(ms(c.inter_token_latency_p50))),
        ("request_latency_s_p50", json!(c.request_latency_p50)),
        (
            "e2e_tok_s_per_stream_p50",
            json!(c.e2e_output_tps_per_user_p50),
        ),
        ("output_tokens_observed_avg", json!(c.output_seq_len_avg)),
        (
            "speculative_acceptance_rate",
            json!(c.server_spec_accept_rate),
        ),
        (
            "speculative_acceptance_length",
            json!(c.server_spec_accept_length),
        ),
        ("avg_running_requests", json!(c.avg_running_reqs)),
    ] {
        if !v.is_null() && v != json!("") {
            extra.insert(k.into(), v);
        }
    }
    if cache_known.is_none() {
        extra.insert(
            "cache_evidence".into(),
            json!("server reported no cached tokens; warm-prefix by design (the scout primes each context's shared prefix)"),
        );
    }
    let row = SweepRow {
        status: String::new(),
        concurrency: Some(c.concurrency.max(1)),
        context_tokens: c
            .prompt_tokens
            .or(c.input_seq_len_avg.map(|x| x.round() as u64))
            .or(Some(c.context_tokens)),
        output_tokens: Some(max_tokens).filter(|m| *m > 0),
        prefill_tok_s: None,
        decode_tok_s: rate.map(|r| round(r, 4)),
        ttft_ms_p50: ms(c.ttft_p50),
        peak_vram_gb: peak_vram_gb(&c.hardware_summary),
        samples: Some(c.request_count).filter(|n| *n > 0),
        decode_tok_s_per_stream: if ok {
            c.output_tps_per_user_p50.map(|r| round(r, 4))
        } else {
            None
        },
        engine_decode_tok_s: c.server_gen_throughput.map(|r| round(r, 4)),
        elapsed_s: c.measurement_seconds.or(c.wall_time).map(|s| round(s, 6)),
        ttft_ms_p95: None,
        cache_hit_rate: hit_rate,
        device_cache_hit_tokens: cached,
        prefill_compute_tokens: computed,
        output_tokens_per_minute: rate.map(|r| round(r * 60.0, 3)),
        total_api_tokens_per_minute: if ok { total_tpm } else { None },
        verdict: None,
        extra,
    };
    let facts = CellFacts {
        status: c.status,
        status_reason: c.status_reason.clone(),
        rate,
        capacity_limited: c.capacity_limited,
        underfilled: c.underfilled,
        warmup_timed_out: c.warmup_timed_out,
        client_max_tick_lag_ms: c.client_max_tick_lag_ms,
        client_tps: c.aggregate_tps,
        server_output_tokens: c.server_output_tokens.map(|t| t as f64),
        server_window_seconds: c.server_window_seconds.or(c.measurement_seconds),
        server_counter_reset: c.server_counter_reset == Some(true),
        concurrency: c.concurrency,
        cold_cached_tokens: None,
        implausible: measured_implausible(c),
    };
    RowBuild {
        layer,
        concurrency: c.concurrency,
        context_label: c.context_tokens,
        row,
        facts,
        cache,
        profile,
    }
}

/// A `request-rate` row from one open-loop row (`rate_results[]`, docs/registry.md "Rows"):
/// `decode_tok_s` = the row's output tok/s, `ttft_ms_p50` from the send time, `samples` =
/// completed requests, `elapsed_s` = the arrival schedule's length, `decode_tok_s_per_stream`
/// = 1 / median per-request ITL; `concurrency` = the client's `--max-concurrency` cap (null
/// when uncapped: an open-loop row has no fixed C). The offered rate, arrival process, achieved
/// rate, goodput, SLO attainment and the request counts go into the row's extra fields.
fn rate_row(r: &RateRow, max_tokens: u64) -> RowBuild {
    let status = r.status.unwrap_or(if r.requests_completed > 0 {
        CellStatus::Ok
    } else {
        CellStatus::Error
    });
    let ok = status == CellStatus::Ok;
    let rate = if ok { r.output_tps } else { None };
    let p = |s: Option<RateSummary>, f: fn(&RateSummary) -> f64| s.map(|s| f(&s));
    let mut extra = Map::new();
    extra.insert("layer".into(), json!(Layer::RequestRate.as_str()));
    extra.insert("context_label_tokens".into(), json!(r.context_tokens));
    extra.insert("cell_status".into(), json!(status.as_str()));
    if let Some(why) = r.status_reason.as_deref().filter(|s| !s.is_empty()) {
        extra.insert("cell_status_reason".into(), json!(why));
    }
    for (k, v) in [
        ("request_rate_per_s", json!(r.offered_rate)),
        ("arrival", json!(r.arrival.as_str())),
        ("burstiness", json!(r.burstiness)),
        ("max_concurrency", json!(r.max_concurrency)),
        ("seed", json!(r.seed)),
        ("schedule_rate_per_s", json!(r.schedule_rate)),
        ("achieved_rate_per_s", json!(r.achieved_rate)),
        ("completed_rate_per_s", json!(r.completed_rate)),
        ("goodput_req_per_s", json!(r.goodput)),
        ("slo_attainment", json!(r.slo_attainment)),
        ("slo_met", json!(r.slo_met)),
        ("requests_scheduled", json!(r.requests_scheduled)),
        ("requests_sent", json!(r.requests_sent)),
        ("requests_completed", json!(r.requests_completed)),
        ("requests_failed", json!(r.requests_failed)),
        ("requests_cut", json!(r.requests_cut)),
        ("requests_not_sent", json!(r.requests_not_sent)),
        ("ttft_ms_p90", json!(ms(p(r.ttft, |s| s.p90)))),
        ("ttft_ms_p99", json!(ms(p(r.ttft, |s| s.p99)))),
        (
            "ttft_from_intended_ms_p99",
            json!(ms(p(r.ttft_from_intended, |s| s.p99))),
        ),
        ("itl_ms_p50", json!(ms(p(r.itl, |s| s.p50)))),
        ("tpot_ms_p50", json!(ms(p(r.tpot, |s| s.p50)))),
        ("e2e_s_p99", json!(p(r.e2e, |s| s.p99))),
        ("search_step", json!(r.search_step)),
    ] {
        if !v.is_null() {
            extra.insert(k.into(), v);
        }
    }
    extra.insert(
        "cache_evidence".into(),
        json!("rate rows keep no per-request cached-token counts; warm-prefix as for the decode layers (shared prefix per context)"),
    );
    let itl_p50 = p(r.itl, |s| s.p50).filter(|x| *x > 0.0);
    let row = SweepRow {
        status: String::new(),
        concurrency: r.max_concurrency,
        context_tokens: Some(r.context_tokens),
        output_tokens: Some(max_tokens).filter(|m| *m > 0),
        prefill_tok_s: None,
        decode_tok_s: rate.map(|x| round(x, 4)),
        ttft_ms_p50: ms(p(r.ttft, |s| s.p50)),
        peak_vram_gb: None,
        samples: Some(r.requests_completed).filter(|n| *n > 0),
        decode_tok_s_per_stream: if ok {
            itl_p50.map(|x| round(1.0 / x, 4))
        } else {
            None
        },
        engine_decode_tok_s: None,
        elapsed_s: Some(round(r.duration, 6)).filter(|d| *d > 0.0),
        ttft_ms_p95: None,
        cache_hit_rate: None,
        device_cache_hit_tokens: None,
        prefill_compute_tokens: None,
        output_tokens_per_minute: rate.map(|x| round(x * 60.0, 3)),
        total_api_tokens_per_minute: None,
        verdict: None,
        extra,
    };
    let facts = CellFacts {
        status,
        status_reason: r.status_reason.clone().unwrap_or_default(),
        rate,
        concurrency: r.max_concurrency.unwrap_or(0),
        implausible: flagged_implausible(&r.warnings, &r.warning_kinds),
        ..CellFacts::default()
    };
    RowBuild {
        layer: Layer::RequestRate,
        concurrency: r.max_concurrency.unwrap_or(0),
        context_label: r.context_tokens,
        row,
        facts,
        cache: CacheTag::WarmPrefix,
        profile: profile::REQUEST_RATE,
    }
}

/// The cell's own plausibility warnings that make its numbers untrustworthy (issue 17: flagged
/// at measurement time by servebench-core's `plausibility`): `single_write`,
/// `implausible_speed`, `usage_implausible` (a count its stream's text cannot have carried).
/// Their texts, joined.
fn measured_implausible(c: &CellResult) -> Option<String> {
    flagged_implausible(&c.warnings, &c.warning_kinds)
}

/// [`measured_implausible`] of any row's warnings and kinds (cells and request-rate rows).
fn flagged_implausible(
    warnings: &[String],
    kinds: &[servebench_results::FailureKind],
) -> Option<String> {
    use servebench_results::FailureKind as K;
    let flagged = |k: K| kinds.contains(&k);
    if !flagged(K::SingleWrite) && !flagged(K::ImplausibleSpeed) && !flagged(K::UsageImplausible) {
        return None;
    }
    let texts: Vec<&str> = warnings
        .iter()
        .map(String::as_str)
        .filter(|w| {
            w.starts_with("single_write:")
                || w.starts_with("implausible_speed:")
                || w.starts_with("usage_implausible:")
        })
        .collect();
    Some(if texts.is_empty() {
        "the cell carries a single_write / implausible_speed / usage_implausible warning"
            .to_string()
    } else {
        texts.join("; ")
    })
}

fn prefill_row(label: &str, p: &PrefillRow, warm: bool) -> RowBuild {
    let ctx_label: u64 = label.trim().parse().unwrap_or(0);
    let status = p.status.unwrap_or(if p.tok_per_sec.is_some() {
        CellStatus::Ok
    } else {
        CellStatus::Invalid
    });
    let ok = status == CellStatus::Ok;
    let server_cached = p
        .server_validation
        .get("cached_tokens")
        .and_then(Value::as_u64);
    // A cold row stays tagged cold (the intent) even when the server reports cached tokens;
    // the rule `cold-cache-hit` then refuses it.
    let cache = if warm {
        CacheTag::WarmPrefix
    } else {
        CacheTag::Cold
    };
    let layer = if warm {
        Layer::PrefillWarm
    } else {
        Layer::Prefill
    };
    let mut extra = Map::new();
    extra.insert("layer".into(), json!(layer.as_str()));
    extra.insert("context_label_tokens".into(), json!(ctx_label));
    extra.insert("cell_status".into(), json!(status.as_str()));
    if p.method != servebench_results::PrefillMethod::Unspecified {
        extra.insert("prefill_method".into(), json!(p.method));
    }
    if let Some(r) = p.status_reason.as_deref().filter(|r| !r.is_empty()) {
        extra.insert("cell_status_reason".into(), json!(r));
    }
    if let Some(t) = p.client_tok_per_sec {
        extra.insert("client_prefill_tok_s".into(), json!(round(t, 4)));
    }
    if let Some(t) = p
        .server_validation
        .get("tok_per_sec")
        .and_then(Value::as_f64)
    {
        extra.insert("server_prefill_tok_s".into(), json!(round(t, 4)));
    }
    if let Some(s) = &p.cached_tokens_source {
        extra.insert("cached_tokens_source".into(), json!(s));
    }
    let row = SweepRow {
        status: String::new(),
        concurrency: Some(1),
        context_tokens: p.prompt_tokens.or(Some(ctx_label)),
        output_tokens: None,
        prefill_tok_s: if ok {
            p.tok_per_sec.map(|r| round(r, 4))
        } else {
            None
        },
        decode_tok_s: None,
        ttft_ms_p50: ms(p.ttft_seconds),
        peak_vram_gb: peak_vram_gb(&p.hardware_summary),
        samples: Some(p.samples).filter(|n| *n > 0),
        elapsed_s: p.prefill_seconds.or(p.ttft_seconds).map(|s| round(s, 6)),
        cache_hit_rate: if warm {
            p.cache_hit_rate
        } else {
            server_cached
                .and_then(|c| {
                    p.prompt_tokens
                        .filter(|t| *t > 0)
                        .map(|t| round(c as f64 / t as f64, 4))
                })
                .or(Some(0.0).filter(|_| server_cached == Some(0)))
        },
        device_cache_hit_tokens: if warm { p.cached_tokens } else { server_cached },
        prefill_compute_tokens: if warm { p.computed_tokens } else { None },
        extra,
        ..Default::default()
    };
    let facts = CellFacts {
        status,
        status_reason: p.status_reason.clone().unwrap_or_default(),
        rate: if ok { p.tok_per_sec } else { None },
        concurrency: 1,
        cold_cached_tokens: if warm { None } else { server_cached },
        ..Default::default()
    };
    RowBuild {
        layer,
        concurrency: 1,
        context_label: ctx_label,
        row,
        facts,
        cache,
        profile: profile::PREFILL,
    }
}

/// Builds every row of a run with its verdict (`baseline`: the accepted rows of a baseline
/// sweep keyed by (layer, C, context label) → rate, and its id).
pub fn build_rows(
    results: &Results,
    _raw: &Value,
    baseline: Option<(&str, &BaselineRates)>,
) -> Vec<SweepRow> {
    let max_tokens = results.metadata.max_tokens;
    let mut builds: Vec<RowBuild> = Vec::new();
    for (k, p) in &results.prefill {
        builds.push(prefill_row(k, p, false));
    }
    for (k, p) in &results.prefill_warm {
        builds.push(prefill_row(k, p, true));
    }
    for c in &results.results {
        builds.push(cell_row(c, Layer::SustainedDecode, max_tokens));
    }
    for c in &results.burst_results {
        builds.push(cell_row(c, Layer::BurstE2e, max_tokens));
    }
    for r in &results.rate_results {
        builds.push(rate_row(r, max_tokens));
    }
    builds
        .into_iter()
        .map(|mut b| {
            if b.facts.rate.is_some() {
                let mut probe = serde_json::to_value(&b.row).expect("rows serialise");
                // Checked as the row would be accepted (cold rows get the cold prefill cap).
                let mut v = RowVerdict::new(Verdict::Accepted);
                v.cache = Some(b.cache);
                v.profile = Some(b.profile.to_string());
                probe["status"] = json!(v.status());
                let found = crate::validate::implausible(&probe, None);
                if !found.is_empty() {
                    b.facts.implausible = Some(
                        found
                            .into_iter()
                            .map(|(_, m)| m)
                            .collect::<Vec<_>>()
                            .join("; "),
                    );
                }
            }
            let base = baseline.and_then(|(id, m)| {
                m.get(&(b.layer.as_str().to_string(), b.concurrency, b.context_label))
                    .map(|r| (id, *r))
            });
            let v = decide(&b.facts, b.cache, b.profile, base);
            b.row.status = v.status();
            b.row.verdict = Some(v);
            b.row
        })
        .collect()
}

/// Accepted rows of a sweep keyed by (layer, C, context label) → headline rate.
pub fn baseline_rates(reg: &Registry, sweep_id: &str) -> Option<BaselineRates> {
    let s = reg.sweep(sweep_id)?;
    let mut m = BTreeMap::new();
    for r in &s.rows {
        let v = r.verdict.clone().or_else(|| RowVerdict::parse(&r.status));
        if v.is_none_or(|v| v.verdict != Verdict::Accepted) {
            continue;
        }
        let layer = r.extra.get("layer").and_then(Value::as_str).unwrap_or("");
        let ctx = r
            .extra
            .get("context_label_tokens")
            .and_then(Value::as_u64)
            .or(r.context_tokens)
            .unwrap_or(0);
        let rate = if layer.starts_with("prefill") {
            r.prefill_tok_s
        } else {
            r.decode_tok_s
        };
        if let (Some(rate), Some(c)) = (rate, r.concurrency) {
            m.insert((layer.to_string(), c, ctx), rate);
        }
    }
    Some(m)
}

/// The run's measurement time: `metadata.started_at`, else `metadata.timestamp` (converted to
/// UTC when it has an offset, verbatim when it is a local time without one).
pub fn measured_at(results: &Results) -> Option<String> {
    if let Some(s) = results
        .metadata
        .started_at
        .as_deref()
        .filter(|s| !s.is_empty())
    {
        return Some(match DateTime::parse_from_rfc3339(s) {
            Ok(t) => draft::rfc3339(t.with_timezone(&Utc)),
            Err(_) => s.to_string(),
        });
    }
    let ts = results.metadata.timestamp.trim();
    if ts.is_empty() {
        return None;
    }
    Some(match DateTime::parse_from_rfc3339(ts) {
        Ok(t) => draft::rfc3339(t.with_timezone(&Utc)),
        Err(_) => ts.to_string(),
    })
}

/// Hardware facts from the run (read defensively: `hardware_run_summary`, first cell summary,
/// `startup_diagnostics.hostname`).
pub fn hardware_facts(results: &Results, raw: &Value) -> HardwareFacts {
    let summary = &results.hardware_run_summary;
    let mut hw = HardwareFacts {
        hostname: results
            .startup_diagnostics
            .get("hostname")
            .and_then(Value::as_str)
            .map(str::to_string)
            .filter(|h| !h.is_empty()),
        ..Default::default()
    };
    let first_cell = results
        .results
        .iter()
        .map(|c| &c.hardware_summary)
        .find(|s| !s.is_empty());
    let pick = |k: &str| {
        summary
            .get(k)
            .or_else(|| first_cell.and_then(|s| s.get(k)))
            .cloned()
    };
    hw.gpu_count = pick("gpu_count")
        .and_then(|v| v.as_u64())
        .filter(|n| *n > 0);
    let name = pick("gpu_name")
        .or_else(|| pick("gpu_names").and_then(|v| v.get(0).cloned()))
        .or_else(|| pick("gpus").and_then(|v| v.get(0).and_then(|g| g.get("name")).cloned()))
        .or_else(|| raw.pointer("/metadata/gpu_name").cloned());
    hw.gpu_name = name
        .and_then(|v| v.as_str().map(str::to_string))
        .filter(|s| !s.is_empty());
    // Memory per device: the first GPU's own total, else the summary total / count (MiB).
    let first_gpu_total = pick("gpus")
        .and_then(|v| {
            v.get(0)
                .and_then(|g| g.get("vram_total_mb"))
                .and_then(Value::as_f64)
        })
        .filter(|v| *v > 0.0);
    let summary_total = pick("vram_total_mb")
        .and_then(|v| v.as_f64())
        .filter(|v| *v > 0.0)
        .map(|t| t / hw.gpu_count.unwrap_or(1) as f64);
    if let Some(per) = first_gpu_total.or(summary_total) {
        hw.vram_gb_per_device = Some(round(per / 1024.0, 1));
    }
    hw
}

/// Publishes `raw` (a results JSON) into `reg` and writes the changed records. See the module
/// docs for every rule.
///
/// Errors: bad ids ([`PublishError::Usage`]), impossible values in the results
/// ([`servebench_results::check::impossible_values`]), a sweep id that exists, an unknown
/// baseline, `--hardware`/`--model-instance` naming records that do not exist or contradict the
/// recipe ([`PublishError::Refused`]), a registry-to-be with new problems on the records it
/// writes, or a file that cannot be written ([`PublishError::Write`]). Whatever the error, no
/// file was changed (`reg` in memory may hold the staged records).
pub fn publish(
    reg: &mut Registry,
    raw: &Value,
    opts: &PublishOptions,
) -> Result<PublishOutcome, PublishError> {
    let results = read_results(raw)?;
    check_option_ids(opts)?;
    refuse_impossible_values(raw)?;
    // What the registry reports before this write: the write may add no problem to the files
    // it touches ([`crate::write::commit`]).
    let before = crate::validate::validate(reg);
    let md = &results.metadata;
    let measured = measured_at(&results);
    let run_id = run_id_of(&results, opts);
    let sweep_id = new_sweep_id(reg, opts, measured.as_deref(), &run_id)?;
    let base = baseline_for(reg, opts)?;
    check_named_records_exist(reg, opts)?;

    let rows = build_rows(&results, raw, base.as_ref().map(|(id, m)| (*id, m)));
    if rows.is_empty() {
        return Err(PublishError::Refused(
            "the results have no cells or prefill rows to publish".into(),
        ));
    }
    let any_accepted = rows.iter().any(|r| {
        r.verdict
            .as_ref()
            .is_some_and(|v| v.verdict == Verdict::Accepted)
    });
    let now = draft::rfc3339(opts.now);
    let mut m = metrics::derive(&rows, measured.as_deref());
    m.inference_engine_version = md.engine_version.clone();
    m.decode_mode = Some(md.decode_mode.to_string());
    let hw = hardware_facts(&results, raw);

    // Recipe, and drafts it needs.
    let src = DraftSource {
        kind: SOURCE_KIND.into(),
        url: format!("urn:servebench:run:{run_id}"),
        captured_at: now.clone(),
    };
    let mut out = PublishOutcome {
        sweep_id: sweep_id.clone(),
        ..Default::default()
    };
    let ctx = PublishCtx {
        opts,
        results: &results,
        raw,
        run_id: &run_id,
        src: &src,
        hw: &hw,
    };
    let (hardware_id, hardware_count) = resolve_recipe(reg, &ctx, &mut out.drafted)?;

    let host = host_block(&ctx, &hardware_id, hardware_count);
    let source = source_block(&ctx, host, &now);
    let sweep = json!({
        "schema_version": SCHEMA_VERSION,
        "id": sweep_id,
        "recipe_id": opts.recipe_id,
        "measured_at": measured,
        "accepted_at": if any_accepted { Value::String(now.clone()) } else { Value::Null },
        "source": source,
        "metrics": serde_json::to_value(&m).expect("metrics serialise"),
        "rows": serde_json::to_value(&rows).expect("rows serialise"),
    });
    for r in &rows {
        *out.statuses.entry(r.status.clone()).or_default() += 1;
    }
    reg.insert(Collection::SpeedSweep, sweep)
        .map_err(PublishError::Refused)?;
    link_sweep_to_recipe(reg, &opts.recipe_id, &sweep_id)?;

    out.written = out.drafted.clone();
    out.written
        .push((Collection::Recipe, opts.recipe_id.clone()));
    out.written.push((Collection::SpeedSweep, sweep_id.clone()));
    out.written.dedup();
    crate::write::commit(reg, &before, &out.written, &[])?;
    Ok(out)
}

/// What the drafting and `source` helpers of [`publish`] read: the options, the results (typed
/// and raw), the run id, the draft source and the run's hardware facts.
struct PublishCtx<'a> {
    opts: &'a PublishOptions,
    results: &'a Results,
    raw: &'a Value,
    run_id: &'a str,
    src: &'a DraftSource,
    hw: &'a HardwareFacts,
}

/// Parses `raw` as a results file, refusing one without a `metadata` object and a `results`
/// list.
fn read_results(raw: &Value) -> Result<Results, PublishError> {
    let results: Results = serde_json::from_value(raw.clone())
        .map_err(|e| PublishError::Refused(format!("not a servebench results file: {e}")))?;
    if !raw.get("metadata").is_some_and(Value::is_object)
        || !raw.get("results").is_some_and(Value::is_array)
    {
        return Err(PublishError::Refused(
            "not a servebench results file: no `metadata` object and `results` list".into(),
        ));
    }
    Ok(results)
}

/// Checks the grammar of every id given in `opts` (recipe, sweep, baseline, hardware, model
/// instance); a bad one is a [`PublishError::Usage`].
fn check_option_ids(opts: &PublishOptions) -> Result<(), PublishError> {
    for (flag, c, id) in [
        ("--recipe", Collection::Recipe, Some(&opts.recipe_id)),
        ("--sweep-id", Collection::SpeedSweep, opts.sweep_id.as_ref()),
        ("--baseline", Collection::SpeedSweep, opts.baseline.as_ref()),
        (
            "--hardware",
            Collection::Hardware,
            opts.hardware_id.as_ref(),
        ),
        (
            "--model-instance",
            Collection::ModelInstance,
            opts.model_instance_id.as_ref(),
        ),
    ] {
        if let Some(id) = id.filter(|id| !is_valid_id(c, id)) {
            return Err(PublishError::Usage(format!(
                "{flag} {id:?} is not a {c} id ({})",
                c.id_grammar()
            )));
        }
    }
    Ok(())
}

/// Refuses a results file holding numbers no server can have produced, or timestamps that do
/// not parse, before anything is built (`servebench validate` reports the same list; the
/// message names the first 5).
fn refuse_impossible_values(raw: &Value) -> Result<(), PublishError> {
    let impossible = servebench_results::check::impossible_values(raw);
    if impossible.is_empty() {
        return Ok(());
    }
    let n = impossible.len();
    Err(PublishError::Refused(format!(
        "the results file has {n} impossible value{} (`servebench validate` lists them): {}",
        if n == 1 { "" } else { "s" },
        impossible
            .iter()
            .take(5)
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join("; ")
    )))
}

/// The run id: `metadata.run_id`, else the first 12 hex digits of the results file's sha256.
fn run_id_of(results: &Results, opts: &PublishOptions) -> String {
    if results.metadata.run_id.is_empty() {
        opts.results_sha256.chars().take(12).collect()
    } else {
        results.metadata.run_id.clone()
    }
}

/// The new sweep's id (`--sweep-id`, else `<recipe-id>-<YYYYMMDD of measured>-<run id>`, or
/// `undated`), refused when it is not a valid id or a sweep of that id exists (in `reg` or on
/// disk).
fn new_sweep_id(
    reg: &Registry,
    opts: &PublishOptions,
    measured: Option<&str>,
    run_id: &str,
) -> Result<String, PublishError> {
    let date: String = measured
        .map(|m| m.chars().filter(char::is_ascii_digit).take(8).collect())
        .filter(|d: &String| d.len() == 8)
        .unwrap_or_else(|| "undated".into());
    let sweep_id = opts
        .sweep_id
        .clone()
        .unwrap_or_else(|| format!("{}-{date}-{run_id}", opts.recipe_id));
    if !is_valid_id(Collection::SpeedSweep, &sweep_id) {
        return Err(PublishError::Usage(format!(
            "sweep id {sweep_id:?} is not valid ({})",
            Collection::SpeedSweep.id_grammar()
        )));
    }
    if reg.get(Collection::SpeedSweep, &sweep_id).is_some()
        || reg.path_for(Collection::SpeedSweep, &sweep_id).exists()
    {
        return Err(PublishError::Refused(format!(
            "speed sweep {sweep_id} already exists; evidence is never overwritten (give another --sweep-id)"
        )));
    }
    Ok(sweep_id)
}

/// The `--baseline` sweep's id and accepted rates, when one is given; refused when the registry
/// has no such sweep.
fn baseline_for<'o>(
    reg: &Registry,
    opts: &'o PublishOptions,
) -> Result<Option<(&'o str, BaselineRates)>, PublishError> {
    let Some(b) = &opts.baseline else {
        return Ok(None);
    };
    let rates = baseline_rates(reg, b).ok_or_else(|| {
        PublishError::Refused(format!(
            "--baseline {b}: no such speed sweep in the registry"
        ))
    })?;
    Ok(Some((b.as_str(), rates)))
}

/// Refuses `--hardware` / `--model-instance` naming a record the registry does not have.
fn check_named_records_exist(reg: &Registry, opts: &PublishOptions) -> Result<(), PublishError> {
    for (flag, c, id) in [
        ("--hardware", Collection::Hardware, &opts.hardware_id),
        (
            "--model-instance",
            Collection::ModelInstance,
            &opts.model_instance_id,
        ),
    ] {
        if let Some(id) = id {
            if reg.get(c, id).is_none() {
                return Err(PublishError::Refused(format!(
                    "{flag} {id}: no such {c} record in the registry"
                )));
            }
        }
    }
    Ok(())
}

/// The recipe's hardware id and device count: from the existing recipe (refusing
/// `--hardware` / `--model-instance` that contradict it, or a recipe that does not parse), or
/// from a `candidate` recipe drafted now (with the hardware, model and model-instance drafts it
/// needs, each pushed to `drafted`).
fn resolve_recipe(
    reg: &mut Registry,
    ctx: &PublishCtx<'_>,
    drafted: &mut Vec<(Collection, String)>,
) -> Result<(String, Option<u64>), PublishError> {
    let opts = ctx.opts;
    match reg.recipe(&opts.recipe_id) {
        Some(r) => {
            for (flag, want, have) in [
                ("--hardware", &opts.hardware_id, &r.hardware_id),
                (
                    "--model-instance",
                    &opts.model_instance_id,
                    &r.model_instance_id,
                ),
            ] {
                if let Some(w) = want.as_ref().filter(|w| *w != have) {
                    return Err(PublishError::Refused(format!(
                        "{flag} {w} contradicts recipe {} ({have})",
                        opts.recipe_id
                    )));
                }
            }
            Ok((r.hardware_id.clone(), Some(r.hardware_count)))
        }
        None if reg.get(Collection::Recipe, &opts.recipe_id).is_some() => {
            Err(PublishError::Refused(format!(
                "recipe {} exists but does not parse; run `servebench registry validate`",
                opts.recipe_id
            )))
        }
        None => {
            let hardware_id = draft_hardware(reg, ctx, drafted)?;
            let instance_id = draft_model_instance(reg, ctx, drafted)?;
            draft_recipe(reg, ctx, &hardware_id, instance_id)?;
            drafted.push((Collection::Recipe, opts.recipe_id.clone()));
            Ok((hardware_id, ctx.hw.gpu_count))
        }
    }
}

/// The drafted recipe's hardware id: `--hardware`, else the run's hardware id, drafted as a
/// `candidate` hardware record when the registry lacks it.
fn draft_hardware(
    reg: &mut Registry,
    ctx: &PublishCtx<'_>,
    drafted: &mut Vec<(Collection, String)>,
) -> Result<String, PublishError> {
    if let Some(h) = &ctx.opts.hardware_id {
        return Ok(h.clone());
    }
    let id = ctx.hw.id();
    if reg.get(Collection::Hardware, &id).is_none() {
        reg.insert(Collection::Hardware, draft::hardware(ctx.src, &id, ctx.hw))
            .map_err(PublishError::Refused)?;
        drafted.push((Collection::Hardware, id.clone()));
    }
    Ok(id)
}

/// The drafted recipe's model-instance id: `--model-instance`, else one named after the run's
/// model, drafted (with its model record when missing) when the registry lacks it.
fn draft_model_instance(
    reg: &mut Registry,
    ctx: &PublishCtx<'_>,
    drafted: &mut Vec<(Collection, String)>,
) -> Result<String, PublishError> {
    if let Some(i) = &ctx.opts.model_instance_id {
        return Ok(i.clone());
    }
    let md = &ctx.results.metadata;
    let model_name = if md.model.is_empty() {
        "unknown-model"
    } else {
        &md.model
    };
    let id = draft::instance_id_for(model_name);
    if reg.get(Collection::ModelInstance, &id).is_none() {
        let model_id = draft::model_id_for(model_name);
        if reg.get(Collection::Model, &model_id).is_none() {
            reg.insert(
                Collection::Model,
                draft::model(ctx.src, &model_id, model_name),
            )
            .map_err(PublishError::Refused)?;
            drafted.push((Collection::Model, model_id.clone()));
        }
        reg.insert(
            Collection::ModelInstance,
            draft::instance(ctx.src, &id, &model_id, model_name, None, None),
        )
        .map_err(PublishError::Refused)?;
        drafted.push((Collection::ModelInstance, id.clone()));
    }
    Ok(id)
}

/// Drafts and stages the `candidate` recipe `opts.recipe_id` for this run (engine, context and
/// concurrency limits, the redacted engine launch in its metadata).
fn draft_recipe(
    reg: &mut Registry,
    ctx: &PublishCtx<'_>,
    hardware_id: &str,
    instance_id: String,
) -> Result<(), PublishError> {
    let (opts, md, raw, run_id) = (ctx.opts, &ctx.results.metadata, ctx.raw, ctx.run_id);
    let mut meta = Map::new();
    meta.insert("drafted_from".into(), json!("servebench publish"));
    meta.insert("run_id".into(), json!(run_id));
    meta.insert("results_sha256".into(), json!(opts.results_sha256));
    for k in ["engine_launch"] {
        if let Some(v) = raw
            .get(k)
            .or_else(|| raw.pointer(&format!("/metadata/{k}")))
        {
            if !v.is_null() {
                // Redacted again: a file written before the current rules (or by
                // another tool) may carry credentials.
                let mut v = v.clone();
                servebench_host::secrets::redact_json(&mut v);
                meta.insert(k.into(), v);
            }
        }
    }
    let d = RecipeDraft {
        id: opts.recipe_id.clone(),
        model_instance_id: instance_id,
        hardware_id: hardware_id.to_string(),
        hardware_count: ctx.hw.gpu_count,
        engine: Some(md.engine.clone()).filter(|e| !e.is_empty()),
        engine_version: md.engine_version.clone(),
        max_context_tokens: md.max_model_len,
        max_concurrency: md.max_running_requests,
        recipe_source: TOOL_NAME.into(),
        reference_url: ctx.src.url.clone(),
        run_id: Some(run_id.to_string()),
        metadata: meta,
        description: format!(
            "Candidate drafted by servebench publish from run {run_id} ({} {} serving {}); the exact launch was not captured, so it is a reference only.",
            draft::engine_name(&md.engine),
            md.engine_version.as_deref().unwrap_or("(version unknown)"),
            md.model
        ),
    };
    reg.insert(Collection::Recipe, draft::recipe(ctx.src, &d, &[]))
        .map_err(PublishError::Refused)?;
    Ok(())
}

/// `source.host`: host name, hardware id and count, GPU name, the run's OS / CPU / driver
/// facts, and the GPU identities (index, name, uuid) from the host monitor.
fn host_block(
    ctx: &PublishCtx<'_>,
    hardware_id: &str,
    hardware_count: Option<u64>,
) -> Map<String, Value> {
    let (results, hw) = (ctx.results, ctx.hw);
    let mut host = Map::new();
    if let Some(h) = &hw.hostname {
        host.insert("hostname".into(), json!(h));
    }
    host.insert("hardware_id".into(), json!(hardware_id));
    host.insert("hardware_count".into(), json!(hardware_count));
    if let Some(n) = &hw.gpu_name {
        host.insert("gpu_name".into(), json!(n));
    }
    for k in [
        "os",
        "arch",
        "uname",
        "client_cpus",
        "driver_version",
        "cuda_version",
        "cpu_model",
    ] {
        if let Some(v) = results.startup_diagnostics.get(k).filter(|v| !v.is_null()) {
            host.insert(k.into(), v.clone());
        }
    }
    // GPU identities of the run (name, uuid), from the host monitor.
    if let Some(gpus) = results
        .hardware_run_summary
        .get("gpus")
        .and_then(Value::as_array)
    {
        let ids: Vec<Value> = gpus
            .iter()
            .map(|g| json!({"index": g.get("index"), "name": g.get("name"), "uuid": g.get("uuid")}))
            .collect();
        if !ids.is_empty() {
            host.insert("gpus".into(), Value::Array(ids));
        }
    }
    host
}

/// The sweep's `source` block (tool, command, results hash, engine, model, server, `host`, run
/// id, method and rules, the run's own command and arguments, the baseline), with command
/// lines, arguments and the server URL redacted; `now` is the publishing time (RFC 3339).
fn source_block(ctx: &PublishCtx<'_>, host: Map<String, Value>, now: &str) -> Value {
    let (opts, results, run_id) = (ctx.opts, ctx.results, ctx.run_id);
    let md = &results.metadata;
    let method = format!(
        "servebench {} run {run_id}: sustained decode over a C x context matrix (aggregate = output tokens inside the measured window / window), prefill by TTFT (cold and warm-prefix apart), Burst / E2E cells. Metrics rule {}: accepted rows only; peak_generation_tps = largest accepted sustained-decode decode_tok_s, rate kind {} (all C streams together; the C=1 row is single-user speed); peak_prompt_tps from accepted cold prefill rows only; point_count = accepted rows.",
        md.version,
        metrics::METRIC_RULE,
        metrics::PEAK_GENERATION_RATE_KIND
    );
    let mut source = json!({
        "kind": SOURCE_KIND,
        "url": ctx.src.url,
        "captured_at": now,
        "tool": {"name": TOOL_NAME, "version": opts.tool_version},
        "results_tool": {"name": md.tool, "version": md.version},
        "command": opts.command,
        "results_sha256": opts.results_sha256,
        "paths": [opts.results_file],
        "engine": {"name": draft::engine_name(&md.engine), "version": md.engine_version},
        "model": md.model,
        "server": md.base_url,
        "host": host,
        "run_id": run_id,
        "method": method,
        "metric_rule": metrics::METRIC_RULE,
        "peak_generation_rate_kind": metrics::PEAK_GENERATION_RATE_KIND,
        "verdict_rules": "servebench-verdict/v1",
    });
    if let Some(a) = results.startup_diagnostics.get("args") {
        source["run_arguments"] = a.clone();
    }
    if let Some(c) = results
        .startup_diagnostics
        .get("command_line")
        .filter(|c| c.as_array().is_some_and(|a| !a.is_empty()))
    {
        source["run_command"] = c.clone();
    }
    if let Some(b) = &opts.baseline {
        source["baseline_sweep_id"] = json!(b);
    }
    // Command lines, arguments and the server URL as recorded, secrets redacted
    // (`servebench_host::secrets`: flags, URL credentials, environment values).
    for k in ["command", "run_command", "run_arguments", "server", "host"] {
        if let Some(v) = source.get_mut(k) {
            servebench_host::secrets::redact_json(v);
        }
    }
    if md.interrupted {
        // Partial results: the cells not reached are `not-run` rows.
        source["interrupted"] = json!(true);
    }
    source
}

/// Links the sweep from the recipe (`speed_sweep_ids`, once) and stages the recipe with its
/// status derived again ([`crate::trust::derive_status`]).
fn link_sweep_to_recipe(
    reg: &mut Registry,
    recipe_id: &str,
    sweep_id: &str,
) -> Result<(), PublishError> {
    let mut recipe = reg
        .get(Collection::Recipe, recipe_id)
        .expect("present or drafted")
        .raw
        .clone();
    let ids = recipe
        .as_object_mut()
        .expect("a record is an object")
        .entry("speed_sweep_ids")
        .or_insert_with(|| json!([]));
    if let Some(a) = ids.as_array_mut() {
        if !a.iter().any(|x| x == &json!(sweep_id)) {
            a.push(json!(sweep_id));
        }
    }
    reg.insert(Collection::Recipe, recipe.clone())
        .map_err(PublishError::Refused)?;
    recipe["status"] = json!(crate::trust::derive_status(reg, &recipe).as_str());
    reg.insert(Collection::Recipe, recipe)
        .map_err(PublishError::Refused)?;
    Ok(())
}

#[cfg(test)]
mod measured_implausible_tests {
    use super::*;
    use servebench_results::FailureKind;

    /// A cell the run flagged `single_write` / `implausible_speed` is never `accepted`
    /// (issue 17), whatever its numbers look like.
    #[test]
    fn measurement_time_flags_are_not_accepted() {
        let mut c = CellResult {
            concurrency: 1,
            status: CellStatus::Ok,
            aggregate_tps: Some(180.0),
            ..Default::default()
        };
        let b = cell_row(&c, Layer::SustainedDecode, 32);
        assert!(b.facts.implausible.is_none());
        for (kind, text) in [
            (
                FailureKind::SingleWrite,
                "single_write: 3 of 3 requests ...",
            ),
            (
                FailureKind::ImplausibleSpeed,
                "implausible_speed: 1 of 3 ...",
            ),
        ] {
            c.warning_kinds = vec![kind];
            c.warnings = vec!["other".into(), text.into()];
            let b = cell_row(&c, Layer::SustainedDecode, 32);
            assert_eq!(b.facts.implausible.as_deref(), Some(text));
            let v = decide(&b.facts, b.cache, b.profile, None);
            assert_eq!(v.verdict, Verdict::MeasurementInvalid);
            assert_eq!(v.rule.as_deref(), Some("implausible"));
        }
    }

    /// Request-rate rows carry the same warnings since break-it round 3 (they had no
    /// plausibility checks at all); a flagged one is never `accepted` either.
    #[test]
    fn flagged_rate_rows_are_not_accepted() {
        let mut r = RateRow {
            offered_rate: 2.0,
            duration: 10.0,
            requests_scheduled: 20,
            requests_sent: 20,
            requests_completed: 20,
            output_tps: Some(400.0),
            status: Some(CellStatus::Ok),
            ..Default::default()
        };
        assert!(rate_row(&r, 32).facts.implausible.is_none());
        let text = "usage_implausible: 20 of 20 requests streamed a cumulative count ...";
        r.warnings = vec![text.into()];
        r.warning_kinds = vec![FailureKind::UsageImplausible];
        let b = rate_row(&r, 32);
        assert_eq!(b.facts.implausible.as_deref(), Some(text));
        let v = decide(&b.facts, b.cache, b.profile, None);
        assert_eq!(v.verdict, Verdict::MeasurementInvalid);
    }
}
