//! The continuous-batching scheduler: one task owns the queue, the batch and the prefix cache.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

use crate::format::{self, Endpoint, TokenEvent, UnaryResponse};
use crate::prefix_cache::{PrefixCache, PREFIX_CACHE_BLOCKS};
use crate::stats::StatsCounters as S;
use crate::truth::RequestTruth;
use crate::Shared;

/// If the scheduler falls further behind its nominal schedule than this (CPU starvation), the
/// schedule restarts from "now" instead of bursting to catch up.
const MAX_LAG: Duration = Duration::from_millis(20);

/// Upper bound of one step (guards against absurd configurations such as a prefill rate of
/// 1e-300 tokens/s).
const MAX_STEP: Duration = Duration::from_secs(24 * 3600);

/// Where a request's output goes.
pub(crate) enum Sink {
    /// Streaming: one `Bytes` per SSE event, straight into the HTTP body.
    /// Frames for the HTTP body: (bytes, tokens in them). The body records the truth emission
    /// time of token frames when it hands them to the connection for writing.
    Stream(mpsc::UnboundedSender<(Bytes, u32)>),
    /// Non-streaming: the whole JSON body once finished.
    Unary(Option<oneshot::Sender<Bytes>>),
}

impl Sink {
    fn is_closed(&self) -> bool {
        match self {
            Sink::Stream(tx) => tx.is_closed(),
            Sink::Unary(Some(tx)) => tx.is_closed(),
            Sink::Unary(None) => true,
        }
    }
}

/// A validated, tokenized request handed from the HTTP layer to the scheduler.
pub(crate) struct NewRequest {
    pub seq: u64,
    pub endpoint: Endpoint,
    pub created: u64,
    pub received_at: Instant,
    pub prompt_tokens: u64,
    /// Chained hashes of the prompt's whole 16-token blocks (prefix-cache keys).
    pub blocks: Vec<u64>,
    pub max_tokens: u64,
    pub ignore_eos: bool,
    pub include_usage: bool,
    pub continuous_usage: bool,
    pub midstream_fault: bool,
    pub sink: Sink,
}

/// A request in the running batch.
struct Active {
    req: NewRequest,
    /// Chunk prefix for streamed events (empty for unary requests).
    prefix: String,
    cached: u64,
    generated: u64,
    /// Tokens after which the request ends (max_tokens, or the simulated EOS).
    limit: u64,
    reasoning_tokens: u64,
    reasoning: String,
    content: String,
    /// The client went away.
    dead: bool,
    /// Set once the request has sent its last event.
    finish: Option<&'static str>,
}

pub(crate) struct Engine {
    shared: Arc<Shared>,
    rx: mpsc::UnboundedReceiver<NewRequest>,
    waiting: VecDeque<NewRequest>,
    running: Vec<Active>,
    cache: Option<PrefixCache>,
}

impl Engine {
    pub(crate) fn new(shared: Arc<Shared>, rx: mpsc::UnboundedReceiver<NewRequest>) -> Self {
        let cache = shared
            .cfg
            .prefix_cache
            .then(|| PrefixCache::new(PREFIX_CACHE_BLOCKS));
        Engine {
            shared,
            rx,
            waiting: VecDeque::new(),
            running: Vec::new(),
            cache,
        }
    }

    /// Run until the submission channel closes (or the task is aborted).
    pub(crate) async fn run(mut self) {
        let mut schedule: Option<Instant> = None;
        loop {
            if self.waiting.is_empty() && self.running.is_empty() {
                self.publish_gauges();
                match self.rx.recv().await {
                    Some(r) => self.enqueue(r),
                    None => return,
                }
                schedule = None;
            }
            while let Ok(r) = self.rx.try_recv() {
                self.enqueue(r);
            }
            let now = Instant::now();
            self.reap(now);
            let start = match schedule {
                Some(t) if now.saturating_duration_since(t) <= MAX_LAG => t,
                _ => now,
            };
            let prefill_tokens = self.admit(now);
            if self.running.is_empty() {
                schedule = None;
                continue;
            }
            let cfg = &self.shared.cfg;
            let batch = self.running.len();
            let ctx: u64 = self
                .running
                .iter()
                .map(|a| a.req.prompt_tokens + a.generated)
                .sum();
            let ms = cfg.prefill_ms(prefill_tokens) + cfg.decode_step_ms(batch, ctx);
            let dur = Duration::try_from_secs_f64(ms.max(0.0) / 1000.0)
                .unwrap_or(MAX_STEP)
                .min(MAX_STEP);
            let deadline = start + dur;
            let st = &self.shared.stats;
            S::add(&st.steps, 1);
            S::add(&st.busy_micros, dur.as_micros() as u64);
            S::set(&st.kv_tokens, ctx);
            self.publish_gauges();
            tokio::time::sleep_until(deadline.into()).await;
            self.emit();
            schedule = Some(deadline);
        }
    }

    fn publish_gauges(&self) {
        let st = &self.shared.stats;
        S::set(&st.running, self.running.len() as u64);
        S::set(&st.waiting, self.waiting.len() as u64);
        if self.running.is_empty() {
            S::set(&st.kv_tokens, 0);
        }
    }

    fn enqueue(&mut self, r: NewRequest) {
        if self.shared.cfg.record_truth {
            let t = RequestTruth {
                id: format!("{}{}", r.endpoint.id_prefix(), r.seq),
                received_at: r.received_at,
                admitted_at: None,
                prompt_tokens: r.prompt_tokens,
                cached_tokens: 0,
                max_tokens: r.max_tokens,
                emissions: Vec::new(),
                finished_at: None,
                cancelled: false,
                finish_reason: None,
            };
            self.shared.truth_log().insert(r.seq, t);
        }
        self.waiting.push_back(r);
    }

    /// Drop requests whose client went away (waiting or running).
    fn reap(&mut self, now: Instant) {
        let shared = &self.shared;
        let mut cancelled = Vec::new();
        self.waiting.retain(|r| {
            let closed = r.sink.is_closed();
            if closed {
                cancelled.push(r.seq);
            }
            !closed
        });
        self.running.retain(|a| {
            let gone = a.dead || a.req.sink.is_closed();
            if gone {
                cancelled.push(a.req.seq);
            }
            !gone
        });
        if cancelled.is_empty() {
            return;
        }
        S::add(&shared.stats.cancelled, cancelled.len() as u64);
        if shared.cfg.record_truth {
            let mut log = shared.truth_log();
            for seq in cancelled {
                if let Some(t) = log.get_mut(seq) {
                    t.cancelled = true;
                    t.finished_at = Some(now);
                }
            }
        }
    }

    /// Admit waiting requests FIFO into free batch slots; returns the tokens to prefill.
    fn admit(&mut self, now: Instant) -> u64 {
        let cfg = &self.shared.cfg;
        let st = &self.shared.stats;
        let mut prefill = 0u64;
        let mut new_blocks: Vec<Vec<u64>> = Vec::new();
        while self.running.len() < cfg.max_batch {
            let Some(mut r) = self.waiting.pop_front() else {
                break;
            };
            let blocks = std::mem::take(&mut r.blocks);
            let cached = match &mut self.cache {
                Some(cache) => {
                    let c = cache.lookup(&blocks, r.prompt_tokens);
                    S::add(&st.prefix_queries, r.prompt_tokens);
                    S::add(&st.prefix_hits, c);
                    new_blocks.push(blocks);
                    c
                }
                None => 0,
            };
            prefill += r.prompt_tokens - cached;
            S::add(&st.prompt_tokens, r.prompt_tokens);
            S::add(&st.prefill_tokens, r.prompt_tokens - cached);
            if cfg.record_truth {
                if let Some(t) = self.shared.truth_log().get_mut(r.seq) {
                    t.admitted_at = Some(now);
                    t.cached_tokens = cached;
                }
            }
            let limit = match cfg.eos_after {
                Some(e) if !r.ignore_eos => r.max_tokens.min(e.max(1)),
                _ => r.max_tokens,
            };
            let streaming = matches!(r.sink, Sink::Stream(_));
            let prefix = if streaming {
                let id = format!("{}{}", r.endpoint.id_prefix(), r.seq);
                format::chunk_prefix(r.endpoint, &id, r.created, &self.shared.model_json)
            } else {
                String::new()
            };
            let reasoning_tokens = match r.endpoint {
                Endpoint::Chat => cfg.reasoning_tokens,
                Endpoint::Completion => 0,
            };
            let mut a = Active {
                req: r,
                prefix,
                cached,
                generated: 0,
                limit,
                reasoning_tokens,
                reasoning: String::new(),
                content: String::new(),
                dead: false,
                finish: None,
            };
            if cfg.role_chunk && a.req.endpoint == Endpoint::Chat {
                if let Sink::Stream(tx) = &a.req.sink {
                    let usage = a.req.continuous_usage.then_some((a.req.prompt_tokens, 0));
                    if tx.send((format::role_event(&a.prefix, usage), 0)).is_err() {
                        a.dead = true;
                    }
                }
            }
            self.running.push(a);
        }
        if let Some(cache) = &mut self.cache {
            // Blocks become reusable once this step's prefill has run, so requests admitted in
            // the same step do not hit each other.
            for b in &new_blocks {
                cache.insert(b);
            }
        }
        prefill
    }

    /// End of a step: every live running request emits its next tokens.
    fn emit(&mut self) {
        let shared = &self.shared;
        let cfg = &shared.cfg;
        let k = u64::from(cfg.tokens_per_chunk);
        let mut log = cfg.record_truth.then(|| shared.truth_log());
        let mut generated_total = 0u64;
        for a in self.running.iter_mut() {
            if a.dead {
                continue;
            }
            let from = a.generated;
            let n = k.min(a.limit - a.generated);
            a.generated += n;
            generated_total += n;
            let done = a.generated >= a.limit;
            let fault_now = a.req.midstream_fault && from == 0;
            let reason = if a.generated >= a.req.max_tokens {
                "length"
            } else {
                "stop"
            };
            let seq = a.req.seq;
            let usage = (a.req.prompt_tokens, a.generated);
            match &mut a.req.sink {
                Sink::Stream(tx) => {
                    let ev = TokenEvent {
                        prefix: &a.prefix,
                        endpoint: a.req.endpoint,
                        from,
                        n,
                        reasoning_tokens: a.reasoning_tokens,
                        finish: (done && !fault_now).then_some(reason),
                        usage: a.req.continuous_usage.then_some(usage),
                    }
                    .encode();
                    // The truth emission time is recorded by the HTTP body when the connection
                    // takes this frame for writing (see `http::stream_body`), not here: bytes
                    // still queued behind other connections have not left the simulator.
                    if tx.send((ev, n as u32)).is_err() {
                        a.dead = true;
                        continue;
                    }
                    if fault_now {
                        let _ = tx.send((Bytes::from_static(format::MIDSTREAM_ERROR), 0));
                        let _ = tx.send((Bytes::from_static(format::DONE), 0));
                        a.finish = Some("error");
                    } else if done {
                        if a.req.include_usage {
                            let _ = tx.send((format::usage_event(&a.prefix, usage, a.cached), 0));
                        }
                        let _ = tx.send((Bytes::from_static(format::DONE), 0));
                        a.finish = Some(reason);
                    }
                }
                Sink::Unary(slot) => {
                    let r_end = (from + n).min(a.reasoning_tokens.max(from));
                    if r_end > from {
                        a.reasoning.push_str(&format::words(from, r_end - from));
                    }
                    if from + n > r_end {
                        a.content.push_str(&format::words(r_end, from + n - r_end));
                    }
                    if let Some(log) = &mut log {
                        log.record_emission(seq, Instant::now(), n as u32);
                    }
                    if done {
                        let id = format!("{}{}", a.req.endpoint.id_prefix(), seq);
                        let body = UnaryResponse {
                            endpoint: a.req.endpoint,
                            id: &id,
                            created: a.req.created,
                            model: &cfg.model,
                            reasoning: &a.reasoning,
                            content: &a.content,
                            finish: reason,
                            prompt_tokens: a.req.prompt_tokens,
                            completion_tokens: a.generated,
                            cached_tokens: a.cached,
                        }
                        .encode();
                        let sent = slot.take().is_some_and(|tx| tx.send(body).is_ok());
                        if sent {
                            a.finish = Some(reason);
                        } else {
                            a.dead = true;
                        }
                    }
                }
            }
        }
        S::add(&shared.stats.generation_tokens, generated_total);

        // Retire finished requests; cancelled ones are reaped at the start of the next step.
        let now = Instant::now();
        let st = &shared.stats;
        self.running.retain(|a| {
            let Some(reason) = a.finish else {
                return true;
            };
            match reason {
                "length" => S::add(&st.finished_length, 1),
                "stop" => S::add(&st.finished_stop, 1),
                _ => S::add(&st.finished_error, 1),
            }
            if let Some(t) = log.as_mut().and_then(|l| l.get_mut(a.req.seq)) {
                t.finished_at = Some(now);
                t.finish_reason = Some(reason.to_string());
            }
            false
        });
        drop(log);
        self.publish_gauges();
    }
}
