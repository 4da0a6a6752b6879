//! servebench-sim: the built-in OpenAI-compatible streaming simulator.
//!
//! It is both the default target of `servebench run` (started in-process when no target is
//! given) and the ground truth for tests: every token-carrying SSE event it sends is recorded
//! with the [`Instant`](std::time::Instant) at which it was handed to the HTTP body, see
//! [`RequestTruth`].
//!
//! # Engine model
//!
//! One scheduler task emulates a continuous-batching engine. Each **step** first plans the
//! tokens every running request emits at its end, reserves KV-cache blocks for them
//! (preempting if needed, see below), then — only if nothing was preempted — admits waiting
//! requests (FIFO) while fewer than `max_batch` are running and the KV cache has room; the newly
//! admitted ones are prefilled in that step and produce their first tokens at its end. The step
//! lasts
//!
//! ```text
//! Σ uncached prompt tokens of newly admitted / prefill_tps                         (prefill)
//! + decode_base_ms + decode_per_seq_ms × batch + decode_per_kctx_ms × Σctx / 1000   (decode)
//! ```
//!
//! where `batch` is the number of running requests and `Σctx` their prompt + generated tokens;
//! `batch` counts the newly admitted requests too (they decode in the same step, so
//! TTFT = queueing + prefill + one step). At the step's deadline every running request emits
//! one SSE event with its planned tokens: `tokens_per_chunk` (fewer at the end; fixed-k mode),
//! or with speculative decoding 1 + accepted drafts. Requests end at max_tokens (`length`) or,
//! when `eos_after` (or the per-request draw from `eos_after_min..=eos_after_max`) is set and
//! the request did not send `ignore_eos: true`, after that many tokens (`stop`). A client that disconnects is dropped from the batch at the next step. The
//! schedule is absolute (each step starts at the previous deadline unless the scheduler fell
//! more than 20 ms behind), and the truth records when events were really handed to the HTTP
//! body.
//!
//! **KV cache** (`kv_blocks` × `block_size` tokens; by default `max_batch × ceil(max_model_len /
//! block_size)` blocks, which never binds). A running request holds
//! `ceil((prompt + generated) / block_size)` blocks; prefix-cache sharing between running
//! requests is not modelled (each holds its own blocks) and cached blocks do not take budget.
//! * *Admission*: the waiting head is admitted when a batch slot is free and
//!   `ceil((prompt + generated + step tokens) / block_size)` blocks are free (for a new request:
//!   its prompt + 1 token); otherwise it and everything behind it waits (head-of-line, like
//!   vLLM).
//! * *Preemption* (vLLM V1 recompute): when the running batch's blocks for this step's tokens
//!   exceed the budget, the newest running request is preempted, repeatedly, never the last
//!   one. A preempted request goes back to the HEAD of the waiting queue (older victims first)
//!   and keeps its generated tokens: they were already streamed and are not sent again; when
//!   re-admitted it recomputes prompt + generated tokens (prefix-cache hits on its prompt blocks
//!   reduce that) and continues. No admissions happen in a step that preempted. Counted in
//!   [`EngineStats::preemptions_total`], [`RequestTruth::preemptions`] and the engines'
//!   preemption counters. Configuration validation guarantees one request alone always fits
//!   (`kv_blocks × block_size ≥ max_model_len`).
//!
//! **Speculative decoding** (`spec_tokens` K > 0, `spec_accept_rate` P, `seed`): the prefill
//! step emits 1 token; every later step proposes `min(K, remaining − 1)` drafts and accepts a
//! prefix of them — draft *i* is accepted with probability P if drafts 0..i were (stop at the
//! first rejection) — plus one bonus token, all in ONE SSE event (as vLLM streams it). The
//! draw for a draft depends only on (seed, request number, tokens generated so far, position),
//! so runs are reproducible. Counters: drafting steps, draft tokens, accepted tokens and
//! accepted per position ([`Sim::spec_truth`]); the expected accepted/draft ratio is
//! (P + … + P^K)/K. Drafting and verification cost nothing extra in the step-time formula.
//!
//! **Text and answers.** Token `i` of a response is [`WORDS`]`[i % 19]`. The first
//! `reasoning_tokens` tokens of a chat response are its reasoning phase, streamed as
//! `delta.reasoning_content` (or, with `reasoning_inline`, inside `content` between `<think>`
//! and `</think>`). With `answer` set, the reasoning ends with `So the answer is <answer>.` and
//! the content's last line — the two tokens before the request's natural end (its EOS point, or
//! max_tokens) — is `Final answer: <value>`, where `<value>` is the answer for a fraction
//! `answer_accuracy` of requests (deterministic per request number) and a wrong value for the
//! others. A request cut by max_tokens before its natural end states no answer. The truth
//! records each request's stop point, stated answer and correctness
//! ([`RequestTruth::eos_after`], [`RequestTruth::answer`], [`RequestTruth::answer_correct`]).
//!
//! **Prefix cache**: prompts are hashed in chained blocks of 16 tokens; a prompt's cached
//! tokens are the longest run of leading whole blocks seen in earlier steps, limited to the first
//! `prompt_tokens - 1` tokens (the last token is always computed, as in vLLM); LRU of
//! [`PREFIX_CACHE_BLOCKS`] blocks. Queries and hits are counted in tokens at a request's first
//! admission only (a resumed request is not counted again, like vLLM's separate
//! preempted-request stats). See [`SimConfig`] for all knobs.
//!
//! Tokenization and the chat template are described in [`tokenizer`].
//!
//! # Personalities
//!
//! [`Personality`] (`--personality`) chooses which engine the simulator impersonates; the engine
//! model is the same for all of them.
//!
//! * `neutral` (default, engine name `servebench-sim`): today's behaviour, no `/metrics`.
//! * `vllm`: `/version` → `{"version":"0.32.0+sim"}`, `/v1/models` (`owned_by` `vllm`,
//!   `max_model_len`), `/tokenize`, `/metrics` with vLLM 0.32 V1 names labelled
//!   `engine="0",model_name="<model>"`, counter TYPE lines with `_total`, a `*_created` gauge
//!   beside every counter and histogram, and `vllm:cache_config_info` (`num_gpu_blocks` =
//!   KV blocks, `block_size`, `kv_cache_size_tokens` = their product).
//! * `sglang`: `/get_server_info` (`max_total_num_tokens` = KV tokens, `max_running_requests`
//!   = `max_batch`, `context_length`, `version`), `/get_model_info`, `/v1/models`; `/metrics`
//!   with `sglang:` (or, with `--sglang-underscore-prefix`, `sglang_`) names labelled
//!   `engine_type="unified",model_name,pp_rank="0",tp_rank="0"`; no `/version`, no `/tokenize`.
//! * `llamacpp`: `/props` (`n_ctx` per slot = `max_model_len`, `total_slots` = `max_batch`;
//!   KV = slots × per-slot context), `/slots`, `/health` → `{"status":"ok"}`, `/v1/models`
//!   with `models` and `data`, llama.cpp `/tokenize` (`content` → `tokens`), `/metrics` with
//!   the 15 unlabelled `llamacpp:` families (integers for counts); `/version` is 404; any
//!   `model` name is accepted; streams in llama.cpp's shape (role chunk `content: null` sent
//!   with the first token, separate finish chunk, `timings` on the final chunk, completions'
//!   usage on the last choice chunk, no continuous usage). `tokens_predicted_total` grows when
//!   a request leaves its slot, as in llama-server; the `*_tokens_seconds` gauges cover the
//!   window since the previous scrape.
//!
//! Every `/metrics` number comes from the engine's own counters, so the difference between two
//! scrapes is exactly what the engine did in between. Latency histograms use the engine's
//! clock (admission, step deadlines), not the HTTP hand-off times of the truth.
//!
//! # Endpoints
//!
//! `POST /v1/chat/completions`, `POST /v1/completions` (streaming and not), `GET /v1/models`,
//! `GET /health`; `POST /tokenize` (vLLM shape) and `GET /version` for neutral and vLLM;
//! `GET /metrics` (no API key needed) and the info endpoints listed above per personality.

#![warn(missing_docs)]

mod answer_key;
mod config;
mod engine;
mod format;
mod http;
mod metrics;
pub mod noise;
mod personality;
mod prefix_cache;
mod stats;
pub mod tokenizer;
mod truth;

use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use anyhow::Context as _;
use axum::serve::ListenerExt as _;
use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::{mpsc, oneshot};

pub use config::{Personality, SimConfig, DEFAULT_BLOCK_SIZE, MAX_SPEC_TOKENS};
pub use format::WORDS;
pub use prefix_cache::PREFIX_CACHE_BLOCKS;
pub use stats::EngineStats;
pub use truth::{
    tokens_emitted_between, RequestTruth, SpecTruth, MAX_TRUTH_EMISSIONS, MAX_TRUTH_REQUESTS,
};

/// Listen backlog of the HTTP socket (connections), large enough for 1,024+ clients connecting
/// at once.
const LISTEN_BACKLOG: u32 = 4096;

/// State shared by the HTTP handlers, the scheduler and the [`Sim`] handle.
pub(crate) struct Shared {
    pub(crate) cfg: SimConfig,
    pub(crate) stats: stats::StatsCounters,
    truth: Mutex<truth::TruthLog>,
    /// Histograms and per-engine accumulators behind `/metrics`.
    metrics: Mutex<metrics::MetricsState>,
    /// Last request sequence number handed out (ids are `...-sim-<seq>`, from 1).
    pub(crate) next_seq: AtomicU64,
    /// Completion requests seen (after auth), for `fault_every`.
    pub(crate) completion_counter: AtomicU64,
    /// Streaming requests accepted, for `fault_midstream_every`.
    pub(crate) stream_counter: AtomicU64,
    /// `/metrics` scrapes answered so far, for `metrics_empty_after` / `metrics_fail_after`.
    pub(crate) scrape_counter: AtomicU64,
    /// Unix time (s) the simulator started, for `/v1/models`.
    pub(crate) started_unix: u64,
    /// JSON-encoded model name, quotes included.
    pub(crate) model_json: String,
    pub(crate) engine: mpsc::UnboundedSender<engine::NewRequest>,
    /// `--answer-key`: prompt (trimmed) → expected answer; empty without it.
    pub(crate) answer_key: std::collections::HashMap<String, String>,
}

impl Shared {
    pub(crate) fn truth_log(&self) -> MutexGuard<'_, truth::TruthLog> {
        self.truth.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn metrics_state(&self) -> MutexGuard<'_, metrics::MetricsState> {
        self.metrics.lock().unwrap_or_else(|e| e.into_inner())
    }
}

enum Runner {
    /// Tasks on the caller's runtime.
    Local {
        stop: Option<oneshot::Sender<()>>,
        engine: tokio::task::JoinHandle<()>,
    },
    /// A dedicated thread with its own current-thread runtime.
    Thread {
        stop: Option<oneshot::Sender<()>>,
        thread: Option<std::thread::JoinHandle<()>>,
    },
}

/// A running simulator. Dropping it (or [`Sim::shutdown`]) stops it: open streams end without
/// `[DONE]` and the listener closes.
pub struct Sim {
    addr: SocketAddr,
    shared: Arc<Shared>,
    runner: Runner,
}

impl std::fmt::Debug for Sim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sim")
            .field("addr", &self.addr)
            .field("model", &self.shared.cfg.model)
            .finish_non_exhaustive()
    }
}

fn bind_one(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let sock = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    sock.set_reuseaddr(true)?;
    sock.bind(addr)?;
    sock.listen(LISTEN_BACKLOG)
}

async fn bind(cfg: &SimConfig) -> anyhow::Result<TcpListener> {
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((cfg.host.as_str(), cfg.port))
        .await
        .with_context(|| format!("resolving simulator host {:?}", cfg.host))?
        .collect();
    let mut last_err = None;
    for addr in &addrs {
        match bind_one(*addr) {
            Ok(l) => return Ok(l),
            Err(e) => last_err = Some(e),
        }
    }
    match last_err {
        Some(e) => {
            Err(e).with_context(|| format!("binding simulator to {}:{}", cfg.host, cfg.port))
        }
        None => anyhow::bail!("simulator host {:?} resolved to no address", cfg.host),
    }
}

impl Sim {
    /// Start on the current tokio runtime; binds `host:port` (port 0 → ephemeral). Returns once
    /// the listener is bound and serving.
    pub async fn start(cfg: SimConfig) -> anyhow::Result<Sim> {
        cfg.validate()?;
        let listener = bind(&cfg).await?;
        let addr = listener.local_addr().context("simulator local address")?;
        let (tx, rx) = mpsc::unbounded_channel();
        let model_json = serde_json::to_string(&cfg.model).context("encoding model name")?;
        let started = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let answer_key = match &cfg.answer_key {
            Some(p) => answer_key::load(p)?,
            None => Default::default(),
        };
        let shared = Arc::new(Shared {
            answer_key,
            metrics: Mutex::new(metrics::MetricsState::new(&cfg, started.as_secs_f64())),
            cfg,
            stats: Default::default(),
            truth: Mutex::new(Default::default()),
            next_seq: AtomicU64::new(0),
            completion_counter: AtomicU64::new(0),
            stream_counter: AtomicU64::new(0),
            scrape_counter: AtomicU64::new(0),
            started_unix: started.as_secs(),
            model_json,
            engine: tx,
        });
        let engine = tokio::spawn(engine::Engine::new(shared.clone(), rx).run());
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let listener = listener.tap_io(|tcp| {
            if let Err(e) = tcp.set_nodelay(true) {
                tracing::trace!("set_nodelay failed: {e}");
            }
        });
        let server = axum::serve(listener, http::router(shared.clone())).with_graceful_shutdown(
            async move {
                let _ = stop_rx.await;
            },
        );
        tokio::spawn(async move {
            if let Err(e) = server.await {
                tracing::error!("simulator HTTP server failed: {e}");
            }
        });
        tracing::debug!(%addr, "servebench-sim started");
        Ok(Sim {
            addr,
            shared,
            runner: Runner::Local {
                stop: Some(stop_tx),
                engine,
            },
        })
    }

    /// Start on a dedicated OS thread with its own current-thread runtime (so the simulator does
    /// not share a scheduler with the client under test). Returns once the listener is bound;
    /// it blocks the calling thread only for that long, so it may be called from async code.
    pub fn spawn_thread(cfg: SimConfig) -> anyhow::Result<Sim> {
        cfg.validate()?;
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<anyhow::Result<Sim>>();
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("servebench-sim".to_string())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e).context("building simulator runtime"));
                        return;
                    }
                };
                rt.block_on(async move {
                    match Sim::start(cfg).await {
                        Ok(sim) => {
                            let handle = Sim {
                                addr: sim.addr,
                                shared: sim.shared.clone(),
                                runner: Runner::Thread {
                                    stop: None,
                                    thread: None,
                                },
                            };
                            if ready_tx.send(Ok(handle)).is_ok() {
                                let _ = stop_rx.await;
                            }
                            sim.shutdown();
                        }
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                        }
                    }
                });
                rt.shutdown_timeout(Duration::from_millis(200));
            })
            .context("spawning simulator thread")?;
        match ready_rx.recv() {
            Ok(Ok(mut sim)) => {
                sim.runner = Runner::Thread {
                    stop: Some(stop_tx),
                    thread: Some(thread),
                };
                Ok(sim)
            }
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => {
                let _ = thread.join();
                anyhow::bail!("simulator thread exited before binding")
            }
        }
    }

    /// The bound socket address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://<addr>` — e.g. `http://127.0.0.1:8000`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The configuration it runs with.
    pub fn config(&self) -> &SimConfig {
        &self.shared.cfg
    }

    /// Ground truth of every recorded request (oldest first; empty when `record_truth` is off).
    /// Running requests appear with the emissions so far.
    pub fn truth(&self) -> Vec<RequestTruth> {
        self.shared.truth_log().snapshot()
    }

    /// Forget all recorded truth (requests in flight keep running but are no longer recorded).
    pub fn clear_truth(&self) {
        self.shared.truth_log().clear();
    }

    /// Current engine counters (the numbers behind `/metrics`).
    pub fn stats(&self) -> EngineStats {
        self.shared.stats.snapshot()
    }

    /// The body `GET /metrics` would return now (`None` for the neutral personality, which has
    /// no metrics page). Like a real scrape, it resets llama.cpp's per-scrape throughput window.
    pub fn metrics_text(&self) -> Option<String> {
        metrics::render(&self.shared)
    }

    /// Speculative-decoding truth: configured K and P, and the realised counts so far.
    pub fn spec_truth(&self) -> SpecTruth {
        let st = self.shared.stats.snapshot();
        SpecTruth {
            spec_tokens: self.shared.cfg.spec_tokens,
            accept_rate: self.shared.cfg.spec_accept_rate,
            drafts: st.spec_drafts_total,
            draft_tokens: st.spec_draft_tokens_total,
            accepted_tokens: st.spec_accepted_tokens_total,
            accepted_per_position: self.shared.metrics_state().accepted_per_pos.clone(),
        }
    }

    /// Stop the simulator (same as dropping it). For [`Sim::spawn_thread`] it waits for the
    /// thread to exit (at most ~0.2 s after the streams are cut).
    pub fn shutdown(self) {
        drop(self);
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        match &mut self.runner {
            Runner::Local { stop, engine } => {
                engine.abort();
                if let Some(s) = stop.take() {
                    let _ = s.send(());
                }
            }
            Runner::Thread { stop, thread } => {
                if let Some(s) = stop.take() {
                    let _ = s.send(());
                }
                if let Some(t) = thread.take() {
                    let _ = t.join();
                }
            }
        }
    }
}

/// Run until Ctrl-C (used by `servebench sim`): prints nothing itself except via tracing.
/// Truth recording is forced off (nobody can read it), so memory stays flat.
pub async fn serve_forever(cfg: SimConfig) -> anyhow::Result<()> {
    let sim = Sim::start(SimConfig {
        record_truth: false,
        ..cfg
    })
    .await?;
    tracing::info!(
        url = %sim.base_url(),
        model = %sim.config().model,
        "servebench-sim listening"
    );
    tokio::signal::ctrl_c()
        .await
        .context("waiting for Ctrl-C")?;
    tracing::info!("servebench-sim shutting down");
    sim.shutdown();
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn handle_types_are_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<super::Sim>();
        check::<super::SimConfig>();
        check::<super::RequestTruth>();
        check::<super::EngineStats>();
    }
}
