//! Row verdicts as a type (§2.7 "Row status vocabulary", §7.2.3).
//!
//! v1 stored a free string (`accepted-cold-prefill`, `rejected-ep4-saturation-regression`) that
//! nothing parsed, and headline metrics ignored it. Here a verdict is a [`Verdict`] plus tags
//! (cache state, workload profile, tested variant), a regression flag and `compared_to`, and
//! the v1 string is *written from* it ([`RowVerdict::status`]) and *read into* it
//! ([`RowVerdict::parse`]).
//!
//! Grammar (`<verdict>[-<qualifier>]*`): `accepted|rejected|observed|reported|candidate|blocked`
//! followed by `[-<cache>][-<profile>][-<variant>][-regression]`; `not-run`,
//! `measurement-invalid` and `infra-invalid` stand alone.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The verdict word of a row status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// Counts as evidence and in headline metrics.
    Accepted,
    /// Measured correctly but refused (a regression against a baseline).
    Rejected,
    /// Third-party observation (imports).
    Observed,
    /// Self-reported number (Discord).
    Reported,
    /// Measured, but not verified enough to accept.
    Candidate,
    /// Could not run for a known external reason.
    Blocked,
    /// Planned but not run (skipped cells).
    NotRun,
    /// Ran, but the numbers cannot be trusted (client lag, counters disagree, capacity).
    MeasurementInvalid,
    /// The server or infrastructure failed the cell.
    InfraInvalid,
}

impl Verdict {
    /// Every verdict.
    pub const ALL: [Verdict; 9] = [
        Verdict::Accepted,
        Verdict::Rejected,
        Verdict::Observed,
        Verdict::Reported,
        Verdict::Candidate,
        Verdict::Blocked,
        Verdict::NotRun,
        Verdict::MeasurementInvalid,
        Verdict::InfraInvalid,
    ];

    /// The word in the status grammar.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Accepted => "accepted",
            Verdict::Rejected => "rejected",
            Verdict::Observed => "observed",
            Verdict::Reported => "reported",
            Verdict::Candidate => "candidate",
            Verdict::Blocked => "blocked",
            Verdict::NotRun => "not-run",
            Verdict::MeasurementInvalid => "measurement-invalid",
            Verdict::InfraInvalid => "infra-invalid",
        }
    }

    /// Whether the status is the verdict alone (no qualifiers).
    pub fn stands_alone(self) -> bool {
        matches!(
            self,
            Verdict::NotRun | Verdict::MeasurementInvalid | Verdict::InfraInvalid
        )
    }
}

/// Cache state of the prompts of a row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CacheTag {
    /// No prompt token was served from a prefix cache.
    Cold,
    /// The prompt (or a shared prefix) was primed and served from the prefix cache.
    WarmPrefix,
    /// Warm (v1 `warm`, unqualified).
    Warm,
}

impl CacheTag {
    /// The qualifier text.
    pub fn as_str(self) -> &'static str {
        match self {
            CacheTag::Cold => "cold",
            CacheTag::WarmPrefix => "warm-prefix",
            CacheTag::Warm => "warm",
        }
    }
}

/// Workload profiles servebench writes (others are read as free text).
pub mod profile {
    /// Sustained decode at C = 1.
    pub const C1: &str = "c1";
    /// Sustained decode at C > 1.
    pub const CONCURRENCY_SWEEP: &str = "concurrency-sweep";
    /// Prefill (TTFT of one long prompt).
    pub const PREFILL: &str = "prefill";
    /// Burst / E2E cells (C requests started together, request latency end to end).
    pub const BURST_E2E: &str = "burst-e2e";
    /// Open-loop request-rate cells.
    pub const REQUEST_RATE: &str = "request-rate";
}

/// A row verdict: what the v1 `status` string means, as a type.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RowVerdict {
    /// The verdict.
    pub verdict: Verdict,
    /// Cache state tag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<CacheTag>,
    /// Workload profile tag ([`profile`]; free text when read from v1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// Tested variant tag (`ep4`, `speculation`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
    /// A regression against `compared_to` (only with `rejected`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub regression: bool,
    /// What the row was compared with: `<sweep-id>` of the baseline (servebench), or null.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compared_to: Option<String>,
    /// Id of the rule that decided the verdict (`docs/registry.md`, [`crate::publish`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// Human-readable reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl RowVerdict {
    /// A verdict with no tags.
    pub fn new(verdict: Verdict) -> RowVerdict {
        RowVerdict {
            verdict,
            cache: None,
            profile: None,
            variant: None,
            regression: false,
            compared_to: None,
            rule: None,
            reason: None,
        }
    }

    /// The v1 status string: `<verdict>[-<cache>][-<profile>][-<variant>][-regression]`
    /// (`not-run`, `measurement-invalid` and `infra-invalid` alone).
    pub fn status(&self) -> String {
        let mut s = self.verdict.as_str().to_string();
        if self.verdict.stands_alone() {
            return s;
        }
        for part in [
            self.cache.map(|c| c.as_str().to_string()),
            self.profile.clone(),
            self.variant.clone(),
            self.regression.then(|| "regression".to_string()),
        ]
        .into_iter()
        .flatten()
        {
            s.push('-');
            s.push_str(&part);
        }
        s
    }

    /// Reads a v1 status string. The verdict is the longest matching word; a leading `cold`,
    /// `warm-prefix` or `warm` qualifier is the cache tag; a trailing `-regression` sets the
    /// flag; the rest is the profile (free text). `variant`, `compared_to`, `rule` and
    /// `reason` are not in the string. None when the verdict word is unknown or a standalone
    /// verdict carries qualifiers.
    pub fn parse(status: &str) -> Option<RowVerdict> {
        let mut verdicts = Verdict::ALL;
        verdicts.sort_by_key(|v| std::cmp::Reverse(v.as_str().len()));
        let verdict = verdicts.into_iter().find(|v| {
            status == v.as_str()
                || status
                    .strip_prefix(v.as_str())
                    .is_some_and(|r| r.starts_with('-'))
        })?;
        let mut out = RowVerdict::new(verdict);
        let rest = status[verdict.as_str().len()..].trim_start_matches('-');
        if rest.is_empty() {
            return Some(out);
        }
        if verdict.stands_alone() {
            return None;
        }
        let mut rest = rest.to_string();
        if rest == "regression" {
            out.regression = true;
            return Some(out);
        }
        if let Some(r) = rest.strip_suffix("-regression") {
            out.regression = true;
            rest = r.to_string();
        }
        for tag in [CacheTag::WarmPrefix, CacheTag::Warm, CacheTag::Cold] {
            let t = tag.as_str();
            if rest == t {
                out.cache = Some(tag);
                rest.clear();
                break;
            }
            if let Some(r) = rest.strip_prefix(&format!("{t}-")) {
                out.cache = Some(tag);
                rest = r.to_string();
                break;
            }
        }
        if !rest.is_empty() {
            out.profile = Some(rest);
        }
        Some(out)
    }
}

impl fmt::Display for RowVerdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.status())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v1_statuses_round_trip() {
        for s in [
            "accepted",
            "accepted-matched-screen",
            "accepted-cold-prefill",
            "accepted-warm-prefix-prefill",
            "accepted-cold-c1",
            "accepted-cold-concurrency-sweep",
            "accepted-balanced-latency-profile",
            "accepted-sustained-warm-prefix",
            "rejected-matched-regression",
            "rejected-ep4-saturation-regression",
            "observed-earlier-tp4-ep1-baseline",
            "not-run",
            "measurement-invalid",
            "infra-invalid",
            "candidate",
            "observed",
            "reported",
        ] {
            let v = RowVerdict::parse(s).unwrap_or_else(|| panic!("{s}"));
            assert_eq!(v.status(), s);
        }
        let v = RowVerdict::parse("accepted-warm-prefix-prefill").unwrap();
        assert_eq!(v.cache, Some(CacheTag::WarmPrefix));
        assert_eq!(v.profile.as_deref(), Some("prefill"));
        let v = RowVerdict::parse("rejected-cold-c1-regression").unwrap();
        assert_eq!(v.verdict, Verdict::Rejected);
        assert!(v.regression);
        assert_eq!(v.cache, Some(CacheTag::Cold));
        assert_eq!(v.profile.as_deref(), Some("c1"));
        assert!(RowVerdict::parse("acceptedx").is_none());
        assert!(RowVerdict::parse("not-run-cold").is_none());
        assert!(RowVerdict::parse("").is_none());
    }
}
