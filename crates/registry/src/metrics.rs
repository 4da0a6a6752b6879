//! Sweep `metrics` by one rule (§3, §7.2.3): [`METRIC_RULE`].
//!
//! v1 had two rules (A: every row whatever its status; B: accepted rows only) and never said
//! which one a record used, so "peak generation" was sometimes a C=256 aggregate and sometimes a
//! single-user median. servebench uses rule B, names it in `source.metric_rule`, and names the
//! rate kind of `peak_generation_tps` in `source.peak_generation_rate_kind`:
//!
//! * only rows whose verdict is `accepted` count;
//! * `point_count` = number of accepted rows;
//! * `concurrency` = largest accepted row `concurrency`; `max_context_tokens` = largest
//!   accepted row `context_tokens`; `max_prompt_tokens` = the same over accepted prefill rows;
//! * `peak_generation_tps` = largest `decode_tok_s` of accepted **sustained-decode** rows
//!   (profiles `c1` / `concurrency-sweep`): an *aggregate* rate over all C streams
//!   ([`PEAK_GENERATION_RATE_KIND`]); the C = 1 row stays in `rows` for single-user speed;
//! * `peak_prompt_tps` = largest `prefill_tok_s` of accepted **cold prefill** rows only (warm
//!   rows inflate prefill by orders of magnitude);
//! * `latest_point_at` = the sweep's `measured_at` (never the publishing time);
//! * a key with no qualifying row is null.

use crate::records::{SweepMetrics, SweepRow};
use crate::verdict::{profile, CacheTag, RowVerdict, Verdict};

/// Name of the metric rule, stored in `source.metric_rule`.
pub const METRIC_RULE: &str = "servebench-accepted-rows/v1";

/// Rate kind of `peak_generation_tps` under [`METRIC_RULE`].
pub const PEAK_GENERATION_RATE_KIND: &str = "aggregate";

fn verdict_of(r: &SweepRow) -> Option<RowVerdict> {
    r.verdict.clone().or_else(|| RowVerdict::parse(&r.status))
}

fn max_f(it: impl Iterator<Item = f64>) -> Option<f64> {
    it.fold(None, |m, x| Some(m.map_or(x, |m: f64| m.max(x))))
}

/// Derives `metrics` from `rows` by [`METRIC_RULE`].
pub fn derive(rows: &[SweepRow], measured_at: Option<&str>) -> SweepMetrics {
    let accepted: Vec<(&SweepRow, RowVerdict)> = rows
        .iter()
        .filter_map(|r| verdict_of(r).map(|v| (r, v)))
        .filter(|(_, v)| v.verdict == Verdict::Accepted)
        .collect();
    let is_profile =
        |v: &RowVerdict, p: &[&str]| v.profile.as_deref().is_some_and(|x| p.contains(&x));
    SweepMetrics {
        concurrency: accepted.iter().filter_map(|(r, _)| r.concurrency).max(),
        point_count: Some(accepted.len() as u64),
        max_context_tokens: accepted.iter().filter_map(|(r, _)| r.context_tokens).max(),
        max_prompt_tokens: accepted
            .iter()
            .filter(|(_, v)| is_profile(v, &[profile::PREFILL]))
            .filter_map(|(r, _)| r.context_tokens)
            .max(),
        peak_generation_tps: max_f(
            accepted
                .iter()
                .filter(|(_, v)| is_profile(v, &[profile::C1, profile::CONCURRENCY_SWEEP]))
                .filter_map(|(r, _)| r.decode_tok_s),
        ),
        peak_prompt_tps: max_f(
            accepted
                .iter()
                .filter(|(_, v)| {
                    is_profile(v, &[profile::PREFILL]) && v.cache == Some(CacheTag::Cold)
                })
                .filter_map(|(r, _)| r.prefill_tok_s),
        ),
        latest_point_at: measured_at.map(str::to_string),
        ..Default::default()
    }
}
