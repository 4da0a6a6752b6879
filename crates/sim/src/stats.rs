//! Engine counters shared between the scheduler and readers (`Sim::stats`, the `/metrics`
//! page).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// A point-in-time copy of the engine counters. Gauges describe the state after the most recent
/// scheduler step; counters are totals since start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct EngineStats {
    /// Gauge: requests in the running batch (admitted, not finished).
    pub running: u64,
    /// Gauge: requests queued waiting for a batch slot.
    pub waiting: u64,
    /// Gauge: context tokens (prompt + generated) summed over the running batch.
    pub kv_tokens: u64,
    /// Gauge: KV-cache blocks held by the running batch (including the slots reserved for the
    /// tokens of the step in progress), in blocks of `block_size` tokens.
    pub kv_blocks_used: u64,
    /// Constant: KV-cache size in blocks ([`crate::SimConfig::kv_blocks_total`]).
    pub kv_blocks_total: u64,
    /// Counter: completion requests accepted by the HTTP layer (after validation).
    pub requests_received_total: u64,
    /// Counter: requests finished with finish_reason `length`.
    pub requests_finished_length_total: u64,
    /// Counter: requests finished with finish_reason `stop` (simulated EOS).
    pub requests_finished_stop_total: u64,
    /// Counter: requests ended by an injected mid-stream error.
    pub requests_finished_error_total: u64,
    /// Counter: requests cancelled because the client disconnected.
    pub requests_cancelled_total: u64,
    /// Counter: requests rejected by an injected HTTP fault.
    pub requests_faulted_total: u64,
    /// Counter: prompt tokens of admitted requests (cached ones included), in tokens.
    pub prompt_tokens_total: u64,
    /// Counter: prompt tokens actually prefilled (prompt minus cached) at each request's first
    /// admission, in tokens.
    pub prefill_tokens_total: u64,
    /// Counter: tokens prefilled again when preempted requests resume (prompt + generated minus
    /// prefix-cache hits), in tokens. Not included in `prefill_tokens_total`.
    pub recompute_tokens_total: u64,
    /// Counter: generated tokens, in tokens.
    pub generation_tokens_total: u64,
    /// Counter: prefix-cache queries in tokens (prompt tokens looked up; vLLM V1 convention).
    pub prefix_cache_queries_total: u64,
    /// Counter: prefix-cache hits in tokens (cached prompt tokens).
    pub prefix_cache_hits_total: u64,
    /// Counter: preemptions (a running request sent back to the waiting queue because the KV
    /// cache ran out), in events.
    pub preemptions_total: u64,
    /// Counter: speculative-decoding steps with at least one draft token (vLLM `num_drafts`),
    /// summed over requests.
    pub spec_drafts_total: u64,
    /// Counter: draft tokens proposed, in tokens.
    pub spec_draft_tokens_total: u64,
    /// Counter: draft tokens accepted, in tokens (the bonus token is not a draft token).
    pub spec_accepted_tokens_total: u64,
    /// Counter: scheduler steps executed.
    pub steps_total: u64,
    /// Counter: nominal busy time of the engine (sum of step durations), in microseconds.
    pub busy_micros_total: u64,
}

impl EngineStats {
    /// Requests that left the engine for any reason (finished, errored or cancelled).
    pub fn requests_done_total(&self) -> u64 {
        self.requests_finished_length_total
            + self.requests_finished_stop_total
            + self.requests_finished_error_total
            + self.requests_cancelled_total
    }
}

/// Lock-free counters behind [`EngineStats`].
#[derive(Debug, Default)]
pub(crate) struct StatsCounters {
    pub(crate) running: AtomicU64,
    pub(crate) waiting: AtomicU64,
    pub(crate) kv_tokens: AtomicU64,
    pub(crate) kv_blocks_used: AtomicU64,
    pub(crate) kv_blocks_total: AtomicU64,
    pub(crate) preemptions: AtomicU64,
    pub(crate) spec_drafts: AtomicU64,
    pub(crate) spec_draft_tokens: AtomicU64,
    pub(crate) spec_accepted: AtomicU64,
    pub(crate) requests_received: AtomicU64,
    pub(crate) finished_length: AtomicU64,
    pub(crate) finished_stop: AtomicU64,
    pub(crate) finished_error: AtomicU64,
    pub(crate) cancelled: AtomicU64,
    pub(crate) faulted: AtomicU64,
    pub(crate) prompt_tokens: AtomicU64,
    pub(crate) prefill_tokens: AtomicU64,
    pub(crate) recompute_tokens: AtomicU64,
    pub(crate) generation_tokens: AtomicU64,
    pub(crate) prefix_queries: AtomicU64,
    pub(crate) prefix_hits: AtomicU64,
    pub(crate) steps: AtomicU64,
    pub(crate) busy_micros: AtomicU64,
}

impl StatsCounters {
    pub(crate) fn get(c: &AtomicU64) -> u64 {
        c.load(Relaxed)
    }

    pub(crate) fn add(c: &AtomicU64, v: u64) {
        c.fetch_add(v, Relaxed);
    }

    pub(crate) fn set(c: &AtomicU64, v: u64) {
        c.store(v, Relaxed);
    }

    pub(crate) fn snapshot(&self) -> EngineStats {
        EngineStats {
            running: self.running.load(Relaxed),
            waiting: self.waiting.load(Relaxed),
            kv_tokens: self.kv_tokens.load(Relaxed),
            kv_blocks_used: self.kv_blocks_used.load(Relaxed),
            kv_blocks_total: self.kv_blocks_total.load(Relaxed),
            preemptions_total: self.preemptions.load(Relaxed),
            spec_drafts_total: self.spec_drafts.load(Relaxed),
            spec_draft_tokens_total: self.spec_draft_tokens.load(Relaxed),
            spec_accepted_tokens_total: self.spec_accepted.load(Relaxed),
            requests_received_total: self.requests_received.load(Relaxed),
            requests_finished_length_total: self.finished_length.load(Relaxed),
            requests_finished_stop_total: self.finished_stop.load(Relaxed),
            requests_finished_error_total: self.finished_error.load(Relaxed),
            requests_cancelled_total: self.cancelled.load(Relaxed),
            requests_faulted_total: self.faulted.load(Relaxed),
            prompt_tokens_total: self.prompt_tokens.load(Relaxed),
            prefill_tokens_total: self.prefill_tokens.load(Relaxed),
            recompute_tokens_total: self.recompute_tokens.load(Relaxed),
            generation_tokens_total: self.generation_tokens.load(Relaxed),
            prefix_cache_queries_total: self.prefix_queries.load(Relaxed),
            prefix_cache_hits_total: self.prefix_hits.load(Relaxed),
            steps_total: self.steps.load(Relaxed),
            busy_micros_total: self.busy_micros.load(Relaxed),
        }
    }
}
