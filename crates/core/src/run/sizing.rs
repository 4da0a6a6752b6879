//! Prompt sizing: one prompt per planned context, by `/tokenize` when the server has it, else by
//! the calibrated (or cached) chars/token estimate, with a startup warning for a prompt whose
//! size is off its context; and the context checks of a finished cell (requested vs real
//! context, prompt truncation).

use std::collections::BTreeMap;

use servebench_client::timeouts::format_secs;
use servebench_client::{Endpoint, HttpClient};
use servebench_results::{format_context, CellResult, FailureKind};
use servebench_stats::thousands;

use super::config::{RunConfig, TargetingMode};
use super::RunError;
use crate::events::EventSink;
use crate::plausibility::{apply_findings, check_context, SentPrompt};
use crate::probe::ServerInfo;
use crate::prompt::{
    build_input, calibrate, calibration_prefix, decode_prefix, size_estimate, size_exact,
    template_id, tokenize_count, CalibrationCache, CalibrationEntry, SizedPrompt, Targeting,
};

/// Sizes one prompt per context; returns the targeting used: `/tokenize` exact when the server
/// has it (unless the estimate is asked for), else the calibrated (or cached) estimate. Fails
/// only when the calibration's first (tiny) request times out: the server does not answer
/// completions.
pub(super) async fn size_prompts(
    client: &HttpClient,
    cfg: &RunConfig,
    info: &ServerInfo,
    run_id: &str,
    contexts: &[u64],
    events: &EventSink,
) -> Result<(Targeting, BTreeMap<u64, SizedPrompt>), RunError> {
    let endpoint = cfg.target.endpoint;
    let mut out = BTreeMap::new();
    for &ctx in contexts.iter().filter(|&&c| c == 0) {
        let input = build_input(endpoint, &decode_prefix(run_id, ctx), 0, false);
        let p = SizedPrompt {
            context: 0,
            input,
            exact_tokens: None,
            estimated_tokens: None,
        };
        out.insert(ctx, p);
    }
    let nonzero: Vec<u64> = contexts.iter().copied().filter(|&c| c > 0).collect();
    if nonzero.is_empty() {
        let none = Targeting::Estimate {
            chars_per_token: 0.0,
            overhead_tokens: 0.0,
            source: "none",
        };
        return Ok((none, out));
    }
    let tokenize_ok = cfg.targeting != TargetingMode::Estimate
        && tokenize_available(client, &info.model, endpoint, run_id, events).await;
    if tokenize_ok {
        events.log("startup token targeting: /tokenize exact");
        if size_all_exact(client, info, endpoint, run_id, &nonzero, events, &mut out).await {
            return Ok((Targeting::Exact, out));
        }
    } else if cfg.targeting == TargetingMode::Exact {
        events.log("startup warning: exact token targeting was requested but /tokenize is not available; using the estimate");
    }
    let max_ctx = nonzero.iter().copied().max().unwrap_or(0);
    let cal_ctx = cfg.calibration_context.min(max_ctx).max(256);
    let targeting = estimate_targeting(client, cfg, info, run_id, cal_ctx, events).await?;
    if let Targeting::Estimate {
        chars_per_token,
        overhead_tokens,
        ..
    } = targeting
    {
        for &ctx in &nonzero {
            let prefix = decode_prefix(run_id, ctx);
            let p = size_estimate(endpoint, &prefix, ctx, chars_per_token, overhead_tokens);
            events.log(format!(
                "startup context {}: {} chars (~{} tokens)",
                format_context(ctx),
                thousands(p.input.padding_chars as u64),
                thousands(p.estimated_tokens.unwrap_or(0.0).round() as u64)
            ));
            if let Some(w) = sizing_warning(ctx, &p) {
                events.log(w);
            }
            out.insert(ctx, p);
        }
    }
    Ok((targeting, out))
}

/// Whether `/tokenize` answers a small probe (a timeout is logged as a warning).
async fn tokenize_available(
    client: &HttpClient,
    model: &str,
    endpoint: Endpoint,
    run_id: &str,
    events: &EventSink,
) -> bool {
    let probe = build_input(endpoint, &decode_prefix(run_id, 0), 16, true);
    match tokenize_count(client, model, endpoint, &probe).await {
        Ok(_) => true,
        Err(e) => {
            if servebench_client::failure::of_http(&e) == FailureKind::RequestTimeout {
                events.log(format!(
                    "startup warning: /tokenize did not answer within {} (the probe timeout); sizing prompts by the estimate",
                    format_secs(client.policy().probe.as_secs_f64())
                ));
            }
            false
        }
    }
}

/// Sizes every context in `nonzero` through `/tokenize` into `out`; false (after a log line)
/// at the first failure: the caller falls back to the estimate.
async fn size_all_exact(
    client: &HttpClient,
    info: &ServerInfo,
    endpoint: Endpoint,
    run_id: &str,
    nonzero: &[u64],
    events: &EventSink,
    out: &mut BTreeMap<u64, SizedPrompt>,
) -> bool {
    for &ctx in nonzero {
        let prefix = decode_prefix(run_id, ctx);
        match size_exact(client, &info.model, endpoint, &prefix, ctx).await {
            Ok(p) => {
                events.log(format!(
                    "startup context {}: {} chars ({} prompt tokens via /tokenize)",
                    format_context(ctx),
                    thousands(p.input.padding_chars as u64),
                    thousands(p.exact_tokens.unwrap_or(0))
                ));
                if let Some(w) = sizing_warning(ctx, &p) {
                    events.log(w);
                }
                out.insert(ctx, p);
            }
            Err(e) => {
                events.log(format!(
                    "startup /tokenize sizing failed for {}: {e}; falling back to the estimate",
                    format_context(ctx)
                ));
                return false;
            }
        }
    }
    true
}

/// The estimate's chars/token ratio: from the calibration cache, else calibrated at `cal_ctx`
/// tokens (and cached), else the uncalibrated 4.0 guess. Fails when the calibration's first
/// request times out.
async fn estimate_targeting(
    client: &HttpClient,
    cfg: &RunConfig,
    info: &ServerInfo,
    run_id: &str,
    cal_ctx: u64,
    events: &EventSink,
) -> Result<Targeting, RunError> {
    let endpoint = cfg.target.endpoint;
    let tid = template_id(endpoint);
    let key = CalibrationCache::key(&info.engine_name, &info.model, &tid);
    if let Some(e) = cfg.calibration_cache.get(&key) {
        events.log(format!(
            "startup calibrated: {:.2} chars/token, overhead {:.0} tokens (cached, source={})",
            e.chars_per_token,
            e.overhead_tokens,
            format_context(e.source_context)
        ));
        return Ok(Targeting::Estimate {
            chars_per_token: e.chars_per_token,
            overhead_tokens: e.overhead_tokens,
            source: "cached_estimate",
        });
    }
    events.log(format!(
        "startup calibrating padding text run={run_id} probe={}",
        format_context(cal_ctx)
    ));
    let prefix = calibration_prefix(run_id);
    match calibrate(client, &info.model, endpoint, &prefix, cal_ctx).await {
        Ok((cpt, overhead)) => {
            events.log(format!("startup calibrated: {cpt:.2} chars/token, overhead {overhead:.0} tokens (source={})", format_context(cal_ctx)));
            let entry = CalibrationEntry {
                chars_per_token: cpt,
                overhead_tokens: overhead,
                engine: info.engine_name.clone(),
                model: info.model.clone(),
                template_id: tid.clone(),
                source_context: cal_ctx,
                updated_at: chrono::Local::now().to_rfc3339(),
            };
            if let Err(e) = cfg.calibration_cache.put(&key, entry) {
                events.log(format!(
                    "startup warning: could not write the calibration cache: {e}"
                ));
            }
            Ok(Targeting::Estimate {
                chars_per_token: cpt,
                overhead_tokens: overhead,
                source: "calibrated_estimate",
            })
        }
        Err(e)
            if e.overhead_request
                && servebench_client::failure::of_http(&e.error) == FailureKind::RequestTimeout =>
        {
            events.log(format!("startup calibration failed: {e}"));
            Err(RunError::ProbeTimeout {
                what: "calibration request (a max_tokens=1 completion of the empty document)"
                    .into(),
                limit: client.policy().probe,
                detail: e.error.to_string(),
            })
        }
        Err(e) => {
            events.log(format!(
                "startup WARNING: calibration failed ({e}); prompts use an uncalibrated 4.0 chars/token guess, \
                 so context sizes are approximate (measured prompt tokens are still recorded per cell)"
            ));
            Ok(Targeting::Estimate {
                chars_per_token: 4.0,
                overhead_tokens: 0.0,
                source: "uncalibrated_estimate",
            })
        }
    }
}

/// The startup warning for a sized prompt whose size differs from its context by more than
/// the tolerance of [`crate::plausibility::CONTEXT_TOLERANCE`].
fn sizing_warning(ctx: u64, p: &SizedPrompt) -> Option<String> {
    let tokens = p.exact_tokens.map(|t| t as f64).or(p.estimated_tokens)?;
    let diff = (tokens - ctx as f64) / ctx.max(1) as f64;
    if ctx == 0 || diff.abs() <= crate::plausibility::CONTEXT_TOLERANCE {
        return None;
    }
    let how = if p.exact_tokens.is_some() { "" } else { "~" };
    Some(if p.input.padding_chars == 0 && diff > 0.0 {
        format!(
            "startup warning: context {}: the base prompt alone has {how}{} tokens, more than the requested context; cells labelled {} measure {how}{}-token prompts",
            format_context(ctx),
            tokens.round(),
            format_context(ctx),
            tokens.round()
        )
    } else {
        format!(
            "startup warning: context {}: the prompt has {how}{} tokens ({:+.0} % of the requested context)",
            format_context(ctx),
            tokens.round(),
            diff * 100.0
        )
    })
}

/// Requested vs real context and prompt truncation of a finished cell
/// ([`crate::plausibility::check_context`]); a failed cell keeps its reason, the findings become
/// warnings.
pub(super) fn context_checks(
    r: &mut CellResult,
    ctx: u64,
    p: &SizedPrompt,
    targeting: &Targeting,
    cold_prompt_tokens: Option<u64>,
    events: &EventSink,
) {
    if r.status.is_skipped() {
        return;
    }
    let sent = p
        .exact_tokens
        .or(p.estimated_tokens.map(|e| e.round() as u64))
        .map(|tokens| SentPrompt {
            tokens,
            reliable: p.exact_tokens.is_some()
                || !matches!(
                    targeting,
                    Targeting::Estimate {
                        source: "uncalibrated_estimate",
                        ..
                    }
                ),
            base_only: p.input.padding_chars == 0,
            bytes: p.input.value.to_string().len() as u64,
        });
    let findings = check_context(r, ctx, sent, cold_prompt_tokens);
    for f in &findings {
        events.log(format!(
            "cell {} C={} ctx={}: {}",
            if f.invalid { "invalid" } else { "warning" },
            r.concurrency,
            format_context(ctx),
            f.message
        ));
    }
    apply_findings(r, findings);
}
