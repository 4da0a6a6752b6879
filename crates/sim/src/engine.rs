//! The continuous-batching scheduler: one task owns the queue, the batch, the KV-cache block
//! budget and the prefix cache.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

use crate::config::{Personality, SimConfig};
use crate::format::{self, Dialect, Endpoint, Frame, Script, Timings, TokenEvent, UnaryResponse};
use crate::metrics::{MetricsState, SlotView};
use crate::prefix_cache::{PrefixCache, PREFIX_CACHE_BLOCKS};
use crate::stats::StatsCounters as S;
use crate::truth::{RequestTruth, TruthLog};
use crate::Shared;

/// If the scheduler falls further behind its nominal schedule than this (CPU starvation), the
/// schedule restarts from "now" instead of bursting to catch up.
const MAX_LAG: Duration = Duration::from_millis(20);

/// Upper bound of one step (guards against absurd configurations such as a prefill rate of
/// 1e-300 tokens/s).
const MAX_STEP: Duration = Duration::from_secs(24 * 3600);

/// SGLang recomputes `gen_throughput` every this many decode steps (its `decode_log_interval`).
const GEN_THROUGHPUT_STEPS: u32 = 40;

/// Where a request's output goes.
pub(crate) enum Sink {
    /// Streaming: frames for the HTTP body, (bytes, tokens in them). The body records the truth
    /// emission time of token frames when it hands them to the connection for writing.
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
    /// `--answer-key`: the expected answer of this request's prompt (it overrides `--answer`).
    pub answer: Option<String>,
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

/// A request inside the engine: waiting (never admitted, or preempted) or running.
struct Active {
    req: NewRequest,
    /// Fixed parts of streamed events (`None` for unary requests).
    frame: Option<Frame>,
    cached: u64,
    generated: u64,
    /// Tokens after which the request ends (max_tokens, or the simulated EOS).
    limit: u64,
    /// Text and reasoning split of every token.
    script: format::Script,
    /// The answer plan: (token at which the `Final answer:` line is complete, stated value,
    /// value is correct). `None` without `--answer` or when the line does not fit.
    answer: Option<(u64, String, bool)>,
    reasoning: String,
    content: String,
    /// The client went away.
    dead: bool,
    /// Set once the request has sent its last event.
    finish: Option<&'static str>,
    /// First admission into the running batch.
    admitted: Option<Instant>,
    /// Engine time of the first token event.
    first_token: Option<Instant>,
    /// Engine time of the latest token event.
    last_emit: Option<Instant>,
    /// The current step (re)computes its prompt: no speculative drafts in it.
    prefilling: bool,
    /// Tokens this request emits at the end of the current step.
    planned: u64,
    /// Draft tokens proposed / accepted in the current step.
    planned_drafts: u32,
    planned_accepted: u32,
    preemptions: u32,
    draft_tokens: u64,
    accepted_tokens: u64,
    /// llama.cpp slot index while running.
    slot: Option<usize>,
}

impl Active {
    /// Tokens in its KV: prompt + generated.
    fn ctx(&self) -> u64 {
        self.req.prompt_tokens + self.generated
    }
}

/// splitmix64 finaliser.
pub(crate) fn mix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Uniform draw in `[0, 1)` for draft position `pos` of request `seq` after `generated`
/// tokens: a pure function of its arguments, so acceptance does not depend on scheduling.
pub(crate) fn spec_draw(seed: u64, seq: u64, generated: u64, pos: u32) -> f64 {
    let h = mix64(mix64(mix64(mix64(seed) ^ seq) ^ generated) ^ u64::from(pos));
    (h >> 11) as f64 / (1u64 << 53) as f64
}

pub(crate) struct Engine {
    shared: Arc<Shared>,
    rx: mpsc::UnboundedReceiver<NewRequest>,
    waiting: VecDeque<Active>,
    running: Vec<Active>,
    cache: Option<PrefixCache>,
    kv_total: u64,
    dialect: Dialect,
    /// Keep histograms and per-engine accumulators (every personality with a `/metrics` page).
    track: bool,
    /// llama.cpp free slots (true = free).
    slot_free: Vec<bool>,
    /// SGLang gen_throughput window: (start, generation tokens at start, steps since).
    tp_mark: (Instant, u64, u32),
}

impl Engine {
    pub(crate) fn new(shared: Arc<Shared>, rx: mpsc::UnboundedReceiver<NewRequest>) -> Self {
        let cfg = &shared.cfg;
        let cache = cfg
            .prefix_cache
            .then(|| PrefixCache::new(PREFIX_CACHE_BLOCKS));
        let kv_total = cfg.kv_blocks_total();
        S::set(&shared.stats.kv_blocks_total, kv_total);
        let llama = cfg.personality == Personality::Llamacpp;
        Engine {
            dialect: if llama {
                Dialect::Llamacpp
            } else {
                Dialect::Vllm
            },
            track: cfg.personality.has_metrics(),
            slot_free: if llama {
                vec![true; cfg.max_batch]
            } else {
                Vec::new()
            },
            tp_mark: (Instant::now(), 0, 0),
            shared,
            rx,
            waiting: VecDeque::new(),
            running: Vec::new(),
            cache,
            kv_total,
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
            let prefill_tokens = self.schedule(now);
            if self.running.is_empty() {
                schedule = None;
                continue;
            }
            let cfg = &self.shared.cfg;
            let batch = self.running.len();
            let ctx: u64 = self.running.iter().map(Active::ctx).sum();
            let ms = cfg.prefill_ms(prefill_tokens) + cfg.decode_step_ms(batch, ctx);
            let dur = Duration::try_from_secs_f64(ms.max(0.0) / 1000.0)
                .unwrap_or(MAX_STEP)
                .min(MAX_STEP);
            let deadline = start + dur;
            let st = &self.shared.stats;
            S::add(&st.steps, 1);
            S::add(&st.busy_micros, dur.as_micros() as u64);
            S::set(&st.kv_tokens, ctx);
            if self.track {
                self.shared.metrics_state().busy_slots_total += batch as u64;
            }
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
            S::set(&st.kv_blocks_used, 0);
        }
        if !self.slot_free.is_empty() {
            let mut m = self.shared.metrics_state();
            m.slots.fill(SlotView::default());
            for a in &self.running {
                if let Some(i) = a.slot {
                    m.slots[i] = SlotView {
                        task: Some(a.req.seq),
                        n_decoded: a.generated,
                    };
                }
            }
        }
    }

    fn enqueue(&mut self, r: NewRequest) {
        let cfg = &self.shared.cfg;
        let eos = if r.ignore_eos && !cfg.ignore_eos_unsupported {
            None
        } else {
            cfg.eos_after_for(r.seq)
        };
        if cfg.record_truth {
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
                preemptions: 0,
                draft_tokens: 0,
                accepted_draft_tokens: 0,
                eos_after: eos,
                answer: None,
                answer_correct: None,
            };
            self.shared.truth_log().insert(r.seq, t);
        }
        // The natural end: where the request would stop on its own (EOS), else max_tokens.
        let natural_end = eos.unwrap_or(r.max_tokens);
        let limit = r.max_tokens.min(natural_end);
        let frame = matches!(r.sink, Sink::Stream(_)).then(|| {
            let id = format!("{}{}", r.endpoint.id_prefix(), r.seq);
            Frame::new(
                self.dialect,
                r.endpoint,
                &id,
                r.created,
                &self.shared.model_json,
            )
        });
        let reasoning_tokens = match r.endpoint {
            Endpoint::Chat => cfg.reasoning_tokens,
            Endpoint::Completion => 0,
        };
        let mut script = Script::new(reasoning_tokens, cfg.reasoning_inline);
        let answer = r
            .answer
            .as_deref()
            .or(cfg.answer.as_deref())
            .and_then(|correct| {
                script.mention_in_reasoning(correct);
                let ok = cfg.answer_correct_for(r.seq);
                let value = if ok {
                    correct.to_string()
                } else {
                    SimConfig::wrong_answer_for(correct)
                };
                script
                    .final_answer_at(natural_end, &value)
                    .then_some((natural_end, value, ok))
            });
        self.waiting.push_back(Active {
            req: r,
            frame,
            cached: 0,
            generated: 0,
            limit,
            script,
            answer,
            reasoning: String::new(),
            content: String::new(),
            dead: false,
            finish: None,
            admitted: None,
            first_token: None,
            last_emit: None,
            prefilling: true,
            planned: 0,
            planned_drafts: 0,
            planned_accepted: 0,
            preemptions: 0,
            draft_tokens: 0,
            accepted_tokens: 0,
            slot: None,
        });
    }

    /// Drop requests whose client went away (waiting or running).
    fn reap(&mut self, now: Instant) {
        let closed = |a: &Active| a.req.sink.is_closed();
        let mut gone: Vec<Active> = Vec::new();
        if self.waiting.iter().any(closed) {
            let (g, keep): (VecDeque<Active>, VecDeque<Active>) = std::mem::take(&mut self.waiting)
                .into_iter()
                .partition(closed);
            self.waiting = keep;
            gone.extend(g);
        }
        let dead = |a: &Active| a.dead || a.req.sink.is_closed();
        if self.running.iter().any(dead) {
            let (g, keep): (Vec<Active>, Vec<Active>) = std::mem::take(&mut self.running)
                .into_iter()
                .partition(dead);
            self.running = keep;
            gone.extend(g);
        }
        if gone.is_empty() {
            return;
        }
        let shared = &self.shared;
        S::add(&shared.stats.cancelled, gone.len() as u64);
        let mut log = shared.cfg.record_truth.then(|| shared.truth_log());
        for a in &gone {
            if let Some(t) = log.as_mut().and_then(|l| l.get_mut(a.req.seq)) {
                t.cancelled = true;
                t.finished_at = Some(now);
            }
        }
        drop(log);
        for a in gone {
            self.leave(&a, now, false);
        }
    }

    /// Bookkeeping when a request leaves the engine (finished or cancelled): free its slot,
    /// per-request histograms (finished only) and llama.cpp's per-request counters.
    fn leave(&mut self, a: &Active, now: Instant, finished: bool) {
        if let Some(i) = a.slot {
            self.slot_free[i] = true;
        }
        if !self.track {
            return;
        }
        let mut m = self.shared.metrics_state();
        if a.admitted.is_some() {
            m.n_tokens_max = m.n_tokens_max.max(a.ctx());
        }
        let decode_s = a
            .first_token
            .map(|f| now.saturating_duration_since(f).as_secs_f64());
        if let Some(d) = decode_s {
            m.predicted_tokens_total += a.generated;
            m.predicted_seconds_total += d;
            m.window.predicted_tokens += a.generated;
            m.window.predicted_seconds += d;
        }
        if !finished {
            return;
        }
        let h = &mut m.hist;
        h.e2e.observe(
            now.saturating_duration_since(a.req.received_at)
                .as_secs_f64(),
        );
        h.prompt_tokens.observe(a.req.prompt_tokens as f64);
        h.generation_tokens.observe(a.generated as f64);
        if let Some(d) = decode_s {
            h.decode.observe(d);
            if a.generated > 1 {
                h.tpot.observe(d / (a.generated - 1) as f64);
            }
        }
    }

    /// Plan the tokens `a` emits at the end of this step (and draw its speculative drafts).
    fn plan(shared: &Shared, a: &mut Active) {
        let cfg = &shared.cfg;
        let remaining = a.limit.saturating_sub(a.generated);
        a.planned_drafts = 0;
        a.planned_accepted = 0;
        if cfg.spec_tokens == 0 || remaining <= 1 {
            a.planned = u64::from(cfg.tokens_per_chunk).min(remaining);
            return;
        }
        if a.prefilling {
            a.planned = 1;
            return;
        }
        let drafts = u64::from(cfg.spec_tokens).min(remaining - 1) as u32;
        let mut accepted = 0;
        while accepted < drafts
            && spec_draw(cfg.seed, a.req.seq, a.generated, accepted) < cfg.spec_accept_rate
        {
            accepted += 1;
        }
        a.planned_drafts = drafts;
        a.planned_accepted = accepted;
        a.planned = 1 + u64::from(accepted);
    }

    /// One scheduling decision (vLLM V1 order): reserve KV for the running batch's tokens of
    /// this step, preempting the newest running requests while it does not fit; then, if
    /// nothing was preempted, admit waiting requests FIFO while a batch slot and the KV blocks
    /// for their (re)computed context plus this step's tokens are free. Returns the tokens to
    /// prefill in this step.
    fn schedule(&mut self, now: Instant) -> u64 {
        let shared = self.shared.clone();
        let cfg = &shared.cfg;
        let st = &shared.stats;
        let mut used = 0u64;
        for a in self.running.iter_mut() {
            Self::plan(&shared, a);
            used += cfg.blocks_for(a.ctx() + a.planned);
        }
        let mut preempted = false;
        while used > self.kv_total && self.running.len() > 1 {
            let Some(mut v) = self.running.pop() else {
                break;
            };
            used -= cfg.blocks_for(v.ctx() + v.planned);
            v.planned = 0;
            v.planned_drafts = 0;
            v.planned_accepted = 0;
            v.preemptions += 1;
            if let Some(i) = v.slot.take() {
                self.slot_free[i] = true;
            }
            S::add(&st.preemptions, 1);
            if cfg.record_truth {
                if let Some(t) = shared.truth_log().get_mut(v.req.seq) {
                    t.preemptions = v.preemptions;
                }
            }
            tracing::debug!(seq = v.req.seq, generated = v.generated, "preempted");
            // Recompute: back to the head of the queue (older victims end up first).
            self.waiting.push_front(v);
            preempted = true;
        }

        let mut prefill = 0u64;
        let mut new_blocks: Vec<Vec<u64>> = Vec::new();
        while !preempted && self.running.len() < cfg.max_batch {
            let Some(head) = self.waiting.front_mut() else {
                break;
            };
            head.prefilling = true;
            Self::plan(&shared, head);
            let need = cfg.blocks_for(head.ctx() + head.planned);
            if used + need > self.kv_total {
                break;
            }
            let Some(mut a) = self.waiting.pop_front() else {
                break;
            };
            used += need;
            if a.admitted.is_none() {
                let cached = match &mut self.cache {
                    Some(cache) => {
                        let c = cache.lookup(&a.req.blocks, a.req.prompt_tokens);
                        S::add(&st.prefix_queries, a.req.prompt_tokens);
                        S::add(&st.prefix_hits, c);
                        new_blocks.push(a.req.blocks.clone());
                        c
                    }
                    None => 0,
                };
                prefill += a.req.prompt_tokens - cached;
                S::add(&st.prompt_tokens, a.req.prompt_tokens);
                S::add(&st.prefill_tokens, a.req.prompt_tokens - cached);
                a.cached = cached;
                a.admitted = Some(now);
                if cfg.record_truth {
                    if let Some(t) = shared.truth_log().get_mut(a.req.seq) {
                        t.admitted_at = Some(now);
                        t.cached_tokens = cached;
                    }
                }
                if self.track {
                    shared.metrics_state().hist.queue.observe(
                        now.saturating_duration_since(a.req.received_at)
                            .as_secs_f64(),
                    );
                }
                if cfg.role_chunk
                    && cfg.early_role_chunk
                    && a.req.endpoint == Endpoint::Chat
                    && self.dialect == Dialect::Vllm
                {
                    if let (Sink::Stream(tx), Some(frame)) = (&a.req.sink, &a.frame) {
                        let usage = a.req.continuous_usage.then_some((a.req.prompt_tokens, 0));
                        if tx.send((format::role_event(frame, usage), 0)).is_err() {
                            a.dead = true;
                        }
                    }
                }
            } else {
                // Resumed after preemption: recompute prompt + generated tokens; the prompt's
                // cached blocks are reused (not counted as prefix-cache queries again, like
                // vLLM's separate preempted-request stats).
                let ctx = a.ctx();
                let cached = match &mut self.cache {
                    Some(cache) => cache.lookup(&a.req.blocks, ctx),
                    None => 0,
                };
                prefill += ctx - cached;
                S::add(&st.recompute_tokens, ctx - cached);
            }
            if !self.slot_free.is_empty() {
                if let Some(i) = self.slot_free.iter().position(|&f| f) {
                    self.slot_free[i] = false;
                    a.slot = Some(i);
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
        S::set(&st.kv_blocks_used, used);
        prefill
    }

    /// End of a step: every live running request emits its planned tokens.
    fn emit(&mut self) {
        let shared = self.shared.clone();
        let cfg = &shared.cfg;
        let st = &shared.stats;
        let now = Instant::now();
        let mut log = cfg.record_truth.then(|| shared.truth_log());
        // Per-position acceptance counts are kept for every personality (`Sim::spec_truth`).
        let mut metrics = (self.track || cfg.spec_tokens > 0).then(|| shared.metrics_state());
        let mut totals = StepTotals::default();
        for a in self.running.iter_mut() {
            if a.dead {
                continue;
            }
            let tick = account_step(
                a,
                now,
                &mut totals,
                metrics.as_deref_mut(),
                log.as_deref_mut(),
            );
            match (&a.req.sink, &a.frame) {
                (Sink::Stream(_), Some(_)) => send_stream_step(a, cfg, &tick),
                (Sink::Unary(_), _) => send_unary_step(a, cfg, log.as_deref_mut(), &tick),
                (Sink::Stream(_), None) => a.dead = true,
            }
        }
        S::add(&st.generation_tokens, totals.generated);
        S::add(&st.spec_drafts, totals.drafts);
        S::add(&st.spec_draft_tokens, totals.draft_tokens);
        S::add(&st.spec_accepted, totals.accepted);
        if let Some(m) = &mut metrics {
            self.update_gen_throughput(m, now);
        }
        drop(metrics);

        // Retire finished requests; cancelled ones are reaped at the start of the next step.
        let done = self.take_finished();
        for a in &done {
            count_finish(st, a);
            if let Some(t) = log.as_mut().and_then(|l| l.get_mut(a.req.seq)) {
                record_finish_truth(t, cfg, a, now);
            }
        }
        drop(log);
        for a in done {
            self.leave(&a, now, true);
        }
        let used: u64 = self.running.iter().map(|a| cfg.blocks_for(a.ctx())).sum();
        S::set(&st.kv_blocks_used, used);
        S::set(&st.kv_tokens, self.running.iter().map(Active::ctx).sum());
        self.publish_gauges();
    }

    /// SGLang `gen_throughput` (tokens/s): recomputed every [`GEN_THROUGHPUT_STEPS`] decode
    /// steps from the generation-token counter over the window since the last mark.
    fn update_gen_throughput(&mut self, m: &mut MetricsState, now: Instant) {
        let st = &self.shared.stats;
        let (t0, g0, steps) = self.tp_mark;
        if steps + 1 >= GEN_THROUGHPUT_STEPS {
            let g = S::get(&st.generation_tokens);
            let dt = now.saturating_duration_since(t0).as_secs_f64();
            if dt > 0.0 {
                m.gen_throughput = (g - g0) as f64 / dt;
            }
            self.tp_mark = (now, g, 0);
        } else {
            self.tp_mark.2 = steps + 1;
        }
    }

    /// Removes the requests that sent their last event from the running batch and returns them
    /// (no allocation when none finished).
    fn take_finished(&mut self) -> Vec<Active> {
        let mut done: Vec<Active> = Vec::new();
        if self.running.iter().any(|a| a.finish.is_some()) {
            let (d, keep): (Vec<Active>, Vec<Active>) = std::mem::take(&mut self.running)
                .into_iter()
                .partition(|a| a.finish.is_some());
            self.running = keep;
            done = d;
        }
        done
    }
}

/// Counters one [`Engine::emit`] step adds to the engine stats (tokens; drafts are counted per
/// request that drafted in the step).
#[derive(Default)]
struct StepTotals {
    generated: u64,
    drafts: u64,
    draft_tokens: u64,
    accepted: u64,
}

/// One running request's emission in the current step, as [`account_step`] works it out.
struct Tick {
    /// The engine time of the step.
    now: Instant,
    /// Tokens generated before this step.
    from: u64,
    /// Tokens emitted in this step.
    n: u64,
    /// This step carries the request's first token.
    first: bool,
    /// The request reaches its limit with this step.
    done: bool,
    /// The request's mid-stream fault fires now (its first emission).
    fault_now: bool,
    /// The finish reason should it end now: `length` or `stop`.
    reason: &'static str,
    /// (prompt tokens, generated tokens) after this step.
    usage: (u64, u64),
}

/// Moves a request's planned tokens into its generated count and accounts for them: step
/// totals, speculative drafts (per-position acceptance, truth), the first-token time, and the
/// TTFT / prefill / ITL histograms (seconds) and llama.cpp prompt window.
fn account_step(
    a: &mut Active,
    now: Instant,
    totals: &mut StepTotals,
    mut metrics: Option<&mut MetricsState>,
    log: Option<&mut TruthLog>,
) -> Tick {
    let from = a.generated;
    let n = a.planned;
    a.planned = 0;
    a.prefilling = false;
    a.generated += n;
    totals.generated += n;
    if a.planned_drafts > 0 {
        totals.drafts += 1;
        totals.draft_tokens += u64::from(a.planned_drafts);
        totals.accepted += u64::from(a.planned_accepted);
        a.draft_tokens += u64::from(a.planned_drafts);
        a.accepted_tokens += u64::from(a.planned_accepted);
        if let Some(m) = metrics.as_deref_mut() {
            for p in &mut m.accepted_per_pos[..a.planned_accepted as usize] {
                *p += 1;
            }
        }
        if let Some(t) = log.and_then(|l| l.get_mut(a.req.seq)) {
            t.draft_tokens = a.draft_tokens;
            t.accepted_draft_tokens = a.accepted_tokens;
        }
    }
    let first = a.first_token.is_none();
    if first {
        a.first_token = Some(now);
    }
    if let Some(m) = metrics {
        if first {
            let admitted = a.admitted.unwrap_or(now);
            let prefill_s = now.saturating_duration_since(admitted).as_secs_f64();
            m.hist.ttft.observe(
                now.saturating_duration_since(a.req.received_at)
                    .as_secs_f64(),
            );
            m.hist.prefill.observe(prefill_s);
            m.prompt_seconds_total += prefill_s;
            m.window.prompt_tokens += a.req.prompt_tokens - a.cached;
            m.window.prompt_seconds += prefill_s;
        } else if let Some(last) = a.last_emit {
            m.hist
                .itl
                .observe(now.saturating_duration_since(last).as_secs_f64());
        }
    }
    a.last_emit = Some(now);
    Tick {
        now,
        from,
        n,
        first,
        done: a.generated >= a.limit,
        fault_now: a.req.midstream_fault && from == 0,
        reason: if a.generated >= a.req.max_tokens {
            "length"
        } else {
            "stop"
        },
        usage: (a.req.prompt_tokens, a.generated),
    }
}

/// Sends a streamed request's step: the role chunk with the first token where the dialect
/// does, the token event, and at the end the mid-stream fault or the finish (usage, llama.cpp
/// timings) and `[DONE]`. A closed connection marks the request dead.
fn send_stream_step(a: &mut Active, cfg: &SimConfig, t: &Tick) {
    let (Sink::Stream(tx), Some(frame)) = (&a.req.sink, &a.frame) else {
        return;
    };
    let llama = frame.dialect() == Dialect::Llamacpp;
    if t.first && cfg.role_chunk && a.req.endpoint == Endpoint::Chat {
        if llama {
            // llama-server sends its role chunk together with the first token.
            let _ = tx.send((format::role_event(frame, None), 0));
        } else if !cfg.early_role_chunk {
            // vLLM 0.32 (V1): the role chunk goes out with the first token.
            let usage = a.req.continuous_usage.then_some((a.req.prompt_tokens, 0));
            let _ = tx.send((format::role_event(frame, usage), 0));
        }
    }
    let ev = TokenEvent {
        frame,
        from: t.from,
        n: t.n,
        script: &a.script,
        finish: (t.done && !t.fault_now && !llama).then_some(t.reason),
        usage: a.req.continuous_usage.then_some(t.usage),
    }
    .encode();
    // The truth emission time is recorded by the HTTP body when the connection
    // takes this frame for writing (see `http::stream_body`), not here: bytes
    // still queued behind other connections have not left the simulator.
    if tx.send((ev, t.n as u32)).is_err() {
        a.dead = true;
        return;
    }
    if t.fault_now {
        let _ = tx.send((Bytes::from_static(format::MIDSTREAM_ERROR), 0));
        let _ = tx.send((Bytes::from_static(format::DONE), 0));
        a.finish = Some("error");
    } else if t.done {
        if llama {
            send_llama_finish(a, tx, frame, cfg, t);
        } else if a.req.include_usage {
            let _ = tx.send((format::usage_event(frame, t.usage, a.cached, None), 0));
        }
        let _ = tx.send((Bytes::from_static(format::DONE), 0));
        a.finish = Some(t.reason);
    }
}

/// llama-server's finish for a streamed request: the finish event with its `timings` (ms)
/// inline, or (chat with `include_usage`) followed by a usage event carrying them.
fn send_llama_finish(
    a: &Active,
    tx: &mpsc::UnboundedSender<(Bytes, u32)>,
    frame: &Frame,
    cfg: &SimConfig,
    t: &Tick,
) {
    let now = t.now;
    let ms = |from: Option<Instant>, to: Instant| {
        from.map_or(0.0, |f| to.saturating_duration_since(f).as_secs_f64() * 1e3)
    };
    let first_at = a.first_token.unwrap_or(now);
    let timings = Timings {
        cache_n: a.cached,
        prompt_n: a.req.prompt_tokens - a.cached,
        prompt_ms: ms(a.admitted, first_at),
        predicted_n: a.generated,
        predicted_ms: ms(Some(first_at), now),
        draft: (cfg.spec_tokens > 0).then_some((a.draft_tokens, a.accepted_tokens)),
    };
    match a.req.endpoint {
        Endpoint::Chat => {
            let inline = (!a.req.include_usage).then_some(&timings);
            let _ = tx.send((format::finish_event(frame, t.reason, None, inline), 0));
            if a.req.include_usage {
                let _ = tx.send((
                    format::usage_event(frame, t.usage, a.cached, Some(&timings)),
                    0,
                ));
            }
        }
        Endpoint::Completion => {
            let u = a.req.include_usage.then_some((t.usage, a.cached));
            let _ = tx.send((format::finish_event(frame, t.reason, u, Some(&timings)), 0));
        }
    }
}

/// A unary request's step: appends the step's text to its reasoning / content, records the
/// emission in the truth log, and when done sends the whole JSON body (a client that went
/// away marks it dead).
fn send_unary_step(a: &mut Active, cfg: &SimConfig, log: Option<&mut TruthLog>, t: &Tick) {
    let Sink::Unary(slot) = &mut a.req.sink else {
        return;
    };
    let (from, n, seq) = (t.from, t.n, a.req.seq);
    let r_end = (from + n).min(a.script.reasoning_field_end().max(from));
    if r_end > from {
        a.reasoning.push_str(&a.script.text(from, r_end - from));
    }
    if from + n > r_end {
        a.content.push_str(&a.script.text(r_end, from + n - r_end));
    }
    if let Some(log) = log {
        log.record_emission(seq, t.now, n as u32);
    }
    if t.done {
        let id = format!("{}{}", a.req.endpoint.id_prefix(), seq);
        let body = UnaryResponse {
            endpoint: a.req.endpoint,
            id: &id,
            created: a.req.created,
            model: &cfg.model,
            reasoning: &a.reasoning,
            content: &a.content,
            finish: t.reason,
            prompt_tokens: a.req.prompt_tokens,
            completion_tokens: a.generated,
            cached_tokens: a.cached,
        }
        .encode();
        let sent = slot.take().is_some_and(|tx| tx.send(body).is_ok());
        if sent {
            a.finish = Some(t.reason);
        } else {
            a.dead = true;
        }
    }
}

/// Counts a retired request in the finish-reason counters (`length`, `stop`, else error).
fn count_finish(st: &S, a: &Active) {
    match a.finish {
        Some("length") => S::add(&st.finished_length, 1),
        Some("stop") => S::add(&st.finished_stop, 1),
        _ => S::add(&st.finished_error, 1),
    }
}

/// Records a retired request's end in its truth: finish time (the latest seen), reason, and
/// under `--answer` / an answer key the stated answer and whether it is correct.
fn record_finish_truth(t: &mut RequestTruth, cfg: &SimConfig, a: &Active, now: Instant) {
    t.finished_at = Some(t.finished_at.map_or(now, |f| f.max(now)));
    t.finish_reason = a.finish.map(str::to_string);
    if cfg.answer.is_some() || a.req.answer.is_some() {
        // The line is stated only when the request generated its last token (a
        // max_tokens cut or a mid-stream fault before it leaves no answer).
        let stated = a
            .answer
            .as_ref()
            .filter(|(end, _, _)| a.generated >= *end && a.finish != Some("error"));
        t.answer = stated.map(|(_, v, _)| v.clone());
        t.answer_correct = Some(stated.is_some_and(|(_, _, ok)| *ok));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_draws_are_uniform_and_deterministic() {
        assert_eq!(spec_draw(1, 2, 3, 4), spec_draw(1, 2, 3, 4));
        assert_ne!(spec_draw(1, 2, 3, 4), spec_draw(2, 2, 3, 4));
        let n = 100_000;
        let mut below = 0;
        let mut sum = 0.0;
        for i in 0..n {
            let u = spec_draw(7, i / 100, i % 100, 0);
            assert!((0.0..1.0).contains(&u));
            sum += u;
            if u < 0.3 {
                below += 1;
            }
        }
        let mean = sum / n as f64;
        assert!((mean - 0.5).abs() < 0.01, "mean {mean}");
        let frac = below as f64 / n as f64;
        assert!((frac - 0.3).abs() < 0.01, "P(u<0.3) {frac}");
    }
}
