//! Ground truth: what the engine actually emitted, per request.

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

/// Most requests kept in the truth log; older ones are dropped first.
pub const MAX_TRUTH_REQUESTS: usize = 100_000;
/// Most emissions kept in the truth log (over all kept requests); whole old requests are dropped
/// first when it is exceeded.
pub const MAX_TRUTH_EMISSIONS: usize = 1_000_000;

/// What the simulator really did with one completion request.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestTruth {
    /// Response id as sent to the client: `chatcmpl-sim-<n>` or `cmpl-sim-<n>`.
    pub id: String,
    /// When the HTTP handler had parsed the request (before queueing).
    pub received_at: Instant,
    /// When the scheduler first admitted it into the running batch (start of its prefill
    /// step; a later re-admission after preemption does not change it).
    pub admitted_at: Option<Instant>,
    /// Prompt tokens (template included), as in `usage.prompt_tokens`.
    pub prompt_tokens: u64,
    /// Prompt tokens served from the prefix cache (not prefilled).
    pub cached_tokens: u64,
    /// Effective max_tokens (requested, or `max_model_len - prompt_tokens` when absent).
    pub max_tokens: u64,
    /// One entry per token-carrying SSE event: (time the event left the engine, i.e. was handed
    /// to the HTTP body channel; tokens in it). The first entry is the first token(s). For
    /// non-streaming requests: when each step's tokens were generated.
    pub emissions: Vec<(Instant, u32)>,
    /// When the request left the engine (last event sent, error sent, or cancellation seen).
    /// For a finished streamed request: when its final `[DONE]` frame was handed to the
    /// connection (never before its last emission).
    pub finished_at: Option<Instant>,
    /// True when the client went away before the request finished.
    pub cancelled: bool,
    /// `length`, `stop`, or `error` (mid-stream fault); `None` while running or if cancelled.
    pub finish_reason: Option<String>,
    /// Times the request was preempted (KV cache full) and went back to the waiting queue.
    pub preemptions: u32,
    /// Speculative draft tokens proposed for this request (tokens).
    pub draft_tokens: u64,
    /// Speculative draft tokens accepted for this request (tokens). Tokens emitted =
    /// decode steps that emitted + accepted draft tokens.
    pub accepted_draft_tokens: u64,
    /// Where this request would stop on its own, generated tokens (`--eos-after` or its
    /// `--eos-after-min/max` draw); `None` when only max_tokens ends it (no EOS configured, or the
    /// request sent `ignore_eos: true`). It ended with `stop` iff this is below its max_tokens.
    pub eos_after: Option<u64>,
    /// The value of the `Final answer: <value>` line the request's content ended with; `None`
    /// without `--answer`, or when the request never generated that line (cut by max_tokens
    /// before its natural end, failed, cancelled, or still running).
    pub answer: Option<String>,
    /// With `--answer`, once finished: whether the content's final line states the correct
    /// answer (`false` when no answer line was generated). `None` without `--answer`, while
    /// running, or when cancelled. The reasoning phase never counts.
    pub answer_correct: Option<bool>,
}

/// Speculative-decoding ground truth: the configuration and what the engine realised.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SpecTruth {
    /// Configured draft tokens per step (`--spec-tokens`, K); 0 = speculative decoding off.
    pub spec_tokens: u32,
    /// Configured per-draft-token acceptance probability (`--spec-accept-rate`, P), given the
    /// earlier drafts of the step were accepted.
    pub accept_rate: f64,
    /// Decode steps (summed over requests) that proposed at least one draft.
    pub drafts: u64,
    /// Draft tokens proposed (tokens).
    pub draft_tokens: u64,
    /// Draft tokens accepted (tokens).
    pub accepted_tokens: u64,
    /// Accepted draft tokens per draft position (index 0 = first draft); length K.
    pub accepted_per_position: Vec<u64>,
}

impl SpecTruth {
    /// Expected accepted / draft-token ratio for full K-token drafts:
    /// (P + P² + … + P^K) / K (0 when K = 0).
    pub fn expected_acceptance_rate(&self) -> f64 {
        if self.spec_tokens == 0 {
            return 0.0;
        }
        let p = self.accept_rate;
        (1..=self.spec_tokens)
            .map(|i| p.powi(i as i32))
            .sum::<f64>()
            / f64::from(self.spec_tokens)
    }

    /// Realised accepted / draft-token ratio (`None` before any draft).
    pub fn acceptance_rate(&self) -> Option<f64> {
        (self.draft_tokens > 0).then(|| self.accepted_tokens as f64 / self.draft_tokens as f64)
    }

    /// Realised mean tokens per drafting step: 1 (bonus) + accepted / drafts (`None` before any
    /// draft). SGLang calls this the acceptance length.
    pub fn mean_acceptance_length(&self) -> Option<f64> {
        (self.drafts > 0).then(|| 1.0 + self.accepted_tokens as f64 / self.drafts as f64)
    }
}

impl RequestTruth {
    /// Total tokens emitted to the client.
    pub fn tokens(&self) -> u64 {
        self.emissions.iter().map(|&(_, n)| u64::from(n)).sum()
    }

    /// Time of the first token-carrying event.
    pub fn first_token_at(&self) -> Option<Instant> {
        self.emissions.first().map(|&(t, _)| t)
    }
}

/// Tokens emitted with emission time in `[from, to]` (both inclusive) across all requests — the
/// truth for aggregate tokens per second over a window.
pub fn tokens_emitted_between(truth: &[RequestTruth], from: Instant, to: Instant) -> u64 {
    truth
        .iter()
        .flat_map(|r| r.emissions.iter())
        .filter(|&&(t, _)| t >= from && t <= to)
        .map(|&(_, n)| u64::from(n))
        .sum()
}

/// Bounded store of [`RequestTruth`] keyed by request sequence number.
#[derive(Debug, Default)]
pub(crate) struct TruthLog {
    by_seq: HashMap<u64, RequestTruth>,
    order: VecDeque<u64>,
    emissions: usize,
}

impl TruthLog {
    pub(crate) fn insert(&mut self, seq: u64, t: RequestTruth) {
        self.emissions += t.emissions.len();
        if self.by_seq.insert(seq, t).is_none() {
            self.order.push_back(seq);
        }
        self.trim();
    }

    pub(crate) fn get_mut(&mut self, seq: u64) -> Option<&mut RequestTruth> {
        self.by_seq.get_mut(&seq)
    }

    pub(crate) fn record_emission(&mut self, seq: u64, at: Instant, tokens: u32) {
        if let Some(t) = self.by_seq.get_mut(&seq) {
            t.emissions.push((at, tokens));
            self.emissions += 1;
            if self.emissions > MAX_TRUTH_EMISSIONS {
                self.trim();
            }
        }
    }

    /// A streamed request's final frame (`[DONE]`) was handed to the connection at `at`: its
    /// `finished_at` becomes the later of that and the engine's retire time.
    pub(crate) fn record_stream_end(&mut self, seq: u64, at: Instant) {
        if let Some(t) = self.by_seq.get_mut(&seq) {
            t.finished_at = Some(t.finished_at.map_or(at, |f| f.max(at)));
        }
    }

    fn trim(&mut self) {
        while self.order.len() > MAX_TRUTH_REQUESTS || self.emissions > MAX_TRUTH_EMISSIONS {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            if let Some(t) = self.by_seq.remove(&old) {
                self.emissions -= t.emissions.len();
            }
        }
    }

    pub(crate) fn snapshot(&self) -> Vec<RequestTruth> {
        self.order
            .iter()
            .filter_map(|s| self.by_seq.get(s).cloned())
            .collect()
    }

    pub(crate) fn clear(&mut self) {
        self.by_seq.clear();
        self.order.clear();
        self.emissions = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn t(id: &str, base: Instant, em: &[(u64, u32)]) -> RequestTruth {
        RequestTruth {
            id: id.to_string(),
            received_at: base,
            admitted_at: None,
            prompt_tokens: 1,
            cached_tokens: 0,
            max_tokens: 10,
            emissions: em
                .iter()
                .map(|&(ms, n)| (base + Duration::from_millis(ms), n))
                .collect(),
            finished_at: None,
            cancelled: false,
            finish_reason: None,
            preemptions: 0,
            draft_tokens: 0,
            accepted_draft_tokens: 0,
            eos_after: None,
            answer: None,
            answer_correct: None,
        }
    }

    #[test]
    fn window_sum_is_inclusive() {
        let b = Instant::now();
        let v = vec![
            t("a", b, &[(10, 1), (20, 2), (30, 3)]),
            t("b", b, &[(20, 4), (40, 5)]),
        ];
        let ms = |x| b + Duration::from_millis(x);
        assert_eq!(tokens_emitted_between(&v, ms(20), ms(30)), 2 + 3 + 4);
        assert_eq!(tokens_emitted_between(&v, ms(0), ms(100)), 15);
        assert_eq!(tokens_emitted_between(&v, ms(31), ms(39)), 0);
        assert_eq!(v[0].tokens(), 6);
        assert_eq!(v[1].first_token_at(), Some(ms(20)));
    }

    #[test]
    fn log_is_bounded_and_ordered() {
        let b = Instant::now();
        let mut log = TruthLog::default();
        for s in 0..(MAX_TRUTH_REQUESTS as u64 + 5) {
            log.insert(s, t(&s.to_string(), b, &[]));
        }
        let snap = log.snapshot();
        assert_eq!(snap.len(), MAX_TRUTH_REQUESTS);
        assert_eq!(snap[0].id, "5");
        log.clear();
        log.insert(1, t("x", b, &[]));
        for _ in 0..MAX_TRUTH_EMISSIONS {
            log.record_emission(1, b, 1);
        }
        log.insert(2, t("y", b, &[]));
        log.record_emission(2, b, 1);
        // request 1 held all the budget and is dropped whole
        let snap = log.snapshot();
        assert_eq!(snap.len(), 1);
        assert_eq!(snap[0].id, "y");
        assert!(log.get_mut(1).is_none());
    }
}
