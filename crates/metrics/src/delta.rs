//! Counter deltas between two scrapes, with Prometheus `increase()` reset semantics.
//!
//! Per series (same labels, `tp_rank` replicas collapsed), `delta = after - before`; when the
//! series was reset in between (value went down, or its `_created` timestamp changed) the
//! post-reset value `after` is used instead and the result is flagged (pitfall 36). A series
//! that appears only in `after` contributes its whole value (its count was 0 before: lazily
//! created label children such as a new `finished_reason`); a series that vanished flags a reset.
//! Per-series deltas are then summed, so a restart of one data-parallel engine is not hidden by
//! the others' growth. A delta is never negative; absent in either scrape → `None`.

use std::collections::BTreeMap;

use crate::catalog::{Candidate, Catalog, Concept, Engine, Kind, LabelFilter};
use crate::exposition::{Sample, Scrape, REPLICA_LABEL};

/// Increase of one counter concept between two scrapes.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize)]
pub struct Delta {
    /// Increase (≥ 0) in the concept's unit; `None` when the counter is absent from either
    /// scrape or the concept is not a counter for this engine.
    pub value: Option<f64>,
    /// A counter reset (server restart) happened between the scrapes; `value` then counts only
    /// from the reset on.
    pub reset: bool,
}

fn series_key(s: &Sample) -> Vec<(&str, &str)> {
    s.labels
        .iter()
        .filter(|(k, _)| k.as_str() != REPLICA_LABEL)
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

/// Per-series increases of `metric` (filtered) between `before` and `after`: one entry per
/// series of `after`, plus whether a reset was seen. `None` when absent from either scrape.
pub(crate) fn series_increases<'a>(
    before: &Scrape,
    after: &'a Scrape,
    metric: &str,
    filters: &[LabelFilter],
) -> Option<(Vec<(&'a Sample, f64)>, bool)> {
    let a = after.select(metric, filters);
    let b = before.select(metric, filters);
    if a.is_empty() || b.is_empty() {
        return None;
    }
    let before_by_key: BTreeMap<Vec<(&str, &str)>, &Sample> =
        b.iter().map(|s| (series_key(s), *s)).collect();
    let mut out = Vec::with_capacity(a.len());
    let mut reset = false;
    let mut matched = 0usize;
    for sa in a {
        let key = series_key(sa);
        let after_v = sa.value.max(0.0);
        let inc = match before_by_key.get(&key) {
            Some(sb) => {
                matched += 1;
                let created_changed = match (after.created_for(sa), before.created_for(sb)) {
                    (Some(x), Some(y)) => x != y,
                    _ => false,
                };
                if created_changed || sa.value < sb.value {
                    reset = true;
                    after_v
                } else {
                    (sa.value - sb.value).max(0.0)
                }
            }
            None => after_v,
        };
        out.push((sa, inc));
    }
    if matched < before_by_key.len() {
        reset = true;
    }
    Some((out, reset))
}

/// Summed increase of series `metric` (filtered) between `before` and `after`; `None` when
/// absent from either scrape or not finite. Returns `(increase, reset_seen)`.
pub(crate) fn metric_increase(
    before: &Scrape,
    after: &Scrape,
    metric: &str,
    filters: &[LabelFilter],
) -> Option<(f64, bool)> {
    let (incs, reset) = series_increases(before, after, metric, filters)?;
    let total: f64 = incs.iter().map(|(_, d)| d).sum();
    total.is_finite().then_some((total, reset))
}

fn candidate_increase(before: &Scrape, after: &Scrape, c: &Candidate) -> Option<(f64, bool)> {
    let mut total = 0.0;
    let mut reset = false;
    for m in c.metrics() {
        let (d, r) = metric_increase(before, after, m, c.filters)?;
        total += d;
        reset |= r;
    }
    Some((total, reset))
}

/// Increase of counter concept `c` between two scrapes of the same server.
///
/// The first catalog candidate present in BOTH scrapes is used (so a rename between versions is
/// not mistaken for a reset). Gauge concepts give `Delta { value: None, reset: false }`.
pub fn counter_delta(before: &Scrape, after: &Scrape, engine: Engine, c: Concept) -> Delta {
    for cand in Catalog::candidates(engine, c) {
        if cand.kind != Kind::Counter {
            continue;
        }
        if let Some((v, reset)) = candidate_increase(before, after, cand) {
            return Delta {
                value: Some(v),
                reset,
            };
        }
    }
    Delta::default()
}

/// Server-side numbers for one measurement window (two scrapes). All values are increases over
/// the window in the concept's unit; every field is `None` when its inputs are absent.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize)]
pub struct WindowStats {
    /// Δ generated tokens.
    pub generation_tokens: Option<f64>,
    /// Δ prompt tokens, cache hits included.
    pub prompt_tokens: Option<f64>,
    /// Δ prompt tokens actually computed (cache hits excluded).
    pub prompt_tokens_computed: Option<f64>,
    /// Δ prompt tokens served from the prefix cache.
    pub prompt_tokens_cached: Option<f64>,
    /// Δ prefix-cache queries.
    pub prefix_cache_queries: Option<f64>,
    /// Δ prefix-cache hits.
    pub prefix_cache_hits: Option<f64>,
    /// Δhits / Δqueries (pitfall 27); for SGLang, which has no query/hit counters,
    /// Δcached_tokens / Δprompt_tokens. `None` when the denominator's Δ is 0 or a counter was
    /// reset.
    pub prefix_cache_hit_rate: Option<f64>,
    /// Δqueries − Δhits: prompt tokens the prefix cache did not serve (pitfall 27); `None` on
    /// reset.
    pub prefix_cache_misses: Option<f64>,
    /// Δ speculative verification steps (drafts).
    pub spec_drafts: Option<f64>,
    /// Δ draft tokens proposed.
    pub spec_draft_tokens: Option<f64>,
    /// Δ draft tokens accepted.
    pub spec_accepted_tokens: Option<f64>,
    /// Δaccepted / Δdraft_tokens (spec §3.9; pitfall 38); `None` when Δdraft_tokens is 0 or a
    /// counter was reset. Not clamped: a value above 1 would expose a server bug.
    pub spec_accept_rate: Option<f64>,
    /// 1 + Δaccepted / Δdrafts: mean tokens emitted per verification step, the definition vLLM
    /// logs as "mean acceptance length" (pitfall 38); `None` when Δdrafts is 0 or on reset.
    pub spec_accept_length: Option<f64>,
    /// Δ preemptions.
    pub preemptions: Option<f64>,
    /// Δ requests finished normally.
    pub requests_succeeded: Option<f64>,
    /// Δ requests aborted.
    pub requests_aborted: Option<f64>,
    /// Δ prefill busy seconds (llama.cpp).
    pub prefill_seconds: Option<f64>,
    /// Δ decode busy seconds (llama.cpp).
    pub decode_seconds: Option<f64>,
    /// Δgeneration_tokens / Δdecode_seconds (tokens/s; llama.cpp
    /// `tokens_predicted_total / tokens_predicted_seconds_total`, pitfall 35). This is the
    /// server's busy-time decode rate, not wall-clock throughput.
    pub decode_rate: Option<f64>,
    /// Δprompt_tokens_computed / Δprefill_seconds (tokens/s; llama.cpp
    /// `prompt_tokens_total / prompt_seconds_total`).
    pub prefill_rate: Option<f64>,
    /// ΔPrefillTimeSum / ΔPrefillTimeCount: mean per-request prefill time (seconds).
    pub mean_prefill_time: Option<f64>,
    /// At least one counter used above was reset during the window.
    pub any_reset: bool,
    /// `process_start_time_seconds` differs between the scrapes (informational: a router or
    /// front-end restart does not necessarily reset engine counters, so it is not used to
    /// compute deltas).
    pub process_restarted: bool,
}

fn ratio(num: Delta, den: Delta) -> Option<f64> {
    if num.reset || den.reset {
        return None;
    }
    match (num.value, den.value) {
        (Some(n), Some(d)) if d > 0.0 => Some(n / d),
        _ => None,
    }
}

/// Derived window metrics from two scrapes of the same server (`before` taken first).
pub fn window_stats(before: &Scrape, after: &Scrape, engine: Engine) -> WindowStats {
    let d = |c| counter_delta(before, after, engine, c);
    let gen = d(Concept::GenerationTokens);
    let prompt = d(Concept::PromptTokens);
    let computed = d(Concept::PromptTokensComputed);
    let cached = d(Concept::PromptTokensCached);
    let queries = d(Concept::PrefixCacheQueries);
    let hits = d(Concept::PrefixCacheHits);
    let drafts = d(Concept::SpecDrafts);
    let draft_tokens = d(Concept::SpecDraftTokens);
    let accepted = d(Concept::SpecAcceptedTokens);
    let preempt = d(Concept::Preemptions);
    let success = d(Concept::RequestSuccess);
    let aborted = d(Concept::RequestAborted);
    let prefill_s = d(Concept::PrefillSeconds);
    let decode_s = d(Concept::DecodeSeconds);
    let pt_sum = d(Concept::PrefillTimeSum);
    let pt_count = d(Concept::PrefillTimeCount);

    let all = [
        gen,
        prompt,
        computed,
        cached,
        queries,
        hits,
        drafts,
        draft_tokens,
        accepted,
        preempt,
        success,
        aborted,
        prefill_s,
        decode_s,
        pt_sum,
        pt_count,
    ];
    let misses = match (queries.value, hits.value) {
        (Some(q), Some(h)) if !queries.reset && !hits.reset => Some((q - h).max(0.0)),
        _ => None,
    };
    let process_restarted = match (before.process_start_time(), after.process_start_time()) {
        (Some(a), Some(b)) => a != b,
        _ => false,
    };
    WindowStats {
        generation_tokens: gen.value,
        prompt_tokens: prompt.value,
        prompt_tokens_computed: computed.value,
        prompt_tokens_cached: cached.value,
        prefix_cache_queries: queries.value,
        prefix_cache_hits: hits.value,
        // SGLang has no query/hit counters, and its `cache_hit_rate` gauge covers only the
        // latest prefill batch (0 again once decoding runs): Δcached / Δprompt tokens instead.
        prefix_cache_hit_rate: ratio(hits, queries).or_else(|| {
            (engine == Engine::Sglang)
                .then(|| ratio(cached, prompt))
                .flatten()
        }),
        prefix_cache_misses: misses,
        spec_drafts: drafts.value,
        spec_draft_tokens: draft_tokens.value,
        spec_accepted_tokens: accepted.value,
        spec_accept_rate: ratio(accepted, draft_tokens),
        spec_accept_length: ratio(accepted, drafts).map(|r| 1.0 + r),
        preemptions: preempt.value,
        requests_succeeded: success.value,
        requests_aborted: aborted.value,
        prefill_seconds: prefill_s.value,
        decode_seconds: decode_s.value,
        decode_rate: ratio(gen, decode_s),
        prefill_rate: ratio(computed, prefill_s),
        mean_prefill_time: ratio(pt_sum, pt_count),
        any_reset: all.iter().any(|x| x.reset),
        process_restarted,
    }
}

/// [`window_stats`] from server start to `s`: every counter is taken as its cumulative value
/// (as if `before` were an all-zero scrape with the same series). Lifetime ratios, e.g.
/// acceptance 328/432 in the vLLM spec-decode capture, or hit rate 500/2000 in pitfall 32.
pub fn window_stats_since_start(s: &Scrape, engine: Engine) -> WindowStats {
    let zero = s.zeroed();
    window_stats(&zero, s, engine)
}

impl Scrape {
    /// Copy with every sample value set to 0 and `_created` / process start kept, used as the
    /// "server start" baseline of [`window_stats_since_start`].
    fn zeroed(&self) -> Scrape {
        let mut z = self.clone();
        z.zero_values();
        z
    }
}
