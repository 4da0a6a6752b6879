//! Engine telemetry against the simulator's personalities (issue 3): servebench must report the
//! simulator's configured and realised truth.
//!
//! Every test drives the whole run (`servebench_core::run`) against
//! [`servebench_sim::Sim`] with one personality (`vllm`, `sglang`, `llamacpp`, or the neutral one
//! without `/metrics`) and checks, where the personality has it:
//!
//! * engine detection (`metadata.engine`, `engine_version`), `metrics_available` and the warning
//!   of a server without `/metrics`;
//! * the KV budget (`max_total_tokens`, `kv_budget_source`, the event line): vLLM blocks × block
//!   size (× `--dcp-size`), SGLang `max_total_num_tokens`, llama.cpp slots × per-slot context; cells
//!   over it (or over SGLang's `max_running_requests`) are `skipped_capacity` with the deficit in
//!   `timeout_reason`;
//! * readiness from the server's scheduler (`ready_reason` = `running_reqs=C/C, queue_reqs=0,
//!   active_streams=C/C, stable=…`) or its timeout (`timeout_reason` = the failing condition);
//! * the server fields of a window against the simulator's own counters ([`Sim::stats`]) sampled
//!   every 2 ms by a thread of the test: speculative acceptance rate Δaccepted/Δdraft tokens and
//!   length 1 + Δaccepted/Δdrafts, generated tokens, prefix-cache hit rate, preemptions and KV
//!   usage; effective concurrency ≈ C when the server can run C requests, and < C with
//!   `capacity_limited` and a queue when `--max-batch` or `--kv-blocks` is smaller than C.
//!
//! The window of each cell is located from the run's own progress events (`window_elapsed_s`
//! stamped on arrival), so the truth is taken over the same interval as servebench's two edge
//! scrapes. Tolerances: a scrape lands a few ms after a window edge, i.e. at most one scheduler
//! step (10 ms) away from the truth sample, which moves a ratio over ~100 steps by about 1 %:
//! rates within 0.02, lengths within 0.05, token counts within 2 steps' tokens.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use servebench_client::{Endpoint, Target};
use servebench_core::events::{Phase, RunEvent};
use servebench_core::prompt::CalibrationCache;
use servebench_core::run::{BurstConfig, PrefillConfig, RunConfig, TargetingMode};
use servebench_core::{run, EventSink};
use servebench_results::{CellResult, CellStatus, Results};
use servebench_sim::{EngineStats, Personality, Sim, SimConfig};
use tokio_util::sync::CancellationToken;

/// The tests share two cores with the simulator thread: one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const MODEL: &str = "servebench-sim";

fn sim(cfg: SimConfig) -> Arc<Sim> {
    Arc::new(
        Sim::spawn_thread(SimConfig {
            port: 0,
            // The test reads counters, not per-request truth.
            record_truth: false,
            ..cfg
        })
        .expect("simulator starts"),
    )
}

fn config(sim: &Sim) -> RunConfig {
    RunConfig {
        target: Target::from_url(&sim.base_url(), None, Endpoint::Chat).unwrap(),
        model: None,
        concurrency: vec![1],
        contexts: vec![0],
        duration: Duration::from_millis(1500),
        max_tokens: 256,
        ignore_eos: true,
        temperature: None,
        decode_warmup: Duration::ZERO,
        cell_timeout: Some(Duration::from_secs(20)),
        stable_window: Duration::from_millis(500),
        cell_pause: Duration::ZERO,
        kv_budget: 0,
        dcp_size: 0,
        show_capacity_limited_values: false,
        seed: Some(3),
        targeting: TargetingMode::Auto,
        calibration_context: 1024,
        calibration_cache: CalibrationCache::at(None),
        prefill: PrefillConfig {
            contexts: vec![],
            ..PrefillConfig::default()
        },
        burst: BurstConfig::default(),
        args_snapshot: serde_json::Value::Null,
        policy: Default::default(),
        open_loop: None,
        export: None,
    }
}

// ------------------------------------------------------------------------------------------
// Truth: the simulator's counters every 2 ms, and where each cell's window was

/// Samples [`Sim::stats`] every 2 ms on its own thread until dropped.
struct Recorder {
    samples: Arc<Mutex<Vec<(Instant, EngineStats)>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Recorder {
    fn start(sim: &Arc<Sim>) -> Recorder {
        let samples: Arc<Mutex<Vec<(Instant, EngineStats)>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st, sim) = (samples.clone(), stop.clone(), sim.clone());
        let thread = std::thread::spawn(move || {
            while !st.load(Ordering::Relaxed) {
                let v = sim.stats();
                s.lock().unwrap().push((Instant::now(), v));
                std::thread::sleep(Duration::from_millis(2));
            }
        });
        Recorder {
            samples,
            stop,
            thread: Some(thread),
        }
    }

    /// Counters at `t`: the first sample taken at or after it (servebench's edge scrapes follow
    /// the window edges by the scrape's round trip).
    fn at(&self, t: Instant) -> EngineStats {
        let s = self.samples.lock().unwrap();
        s.iter()
            .find(|(at, _)| *at >= t)
            .or(s.last())
            .map(|(_, v)| *v)
            .expect("truth samples")
    }

    /// Every sample inside `[from, to]`.
    fn between(&self, from: Instant, to: Instant) -> Vec<EngineStats> {
        self.samples
            .lock()
            .unwrap()
            .iter()
            .filter(|(at, _)| *at >= from && *at <= to)
            .map(|(_, v)| *v)
            .collect()
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A run's results plus, per measured cell, its window located from the progress events.
struct Observed {
    results: Results,
    /// (C, context) → window start (the earliest arrival − window_elapsed_s).
    window_starts: Vec<((u64, u64), Instant)>,
}

impl Observed {
    fn cell(&self, c: u64, ctx: u64) -> &CellResult {
        self.results
            .results
            .iter()
            .find(|r| r.concurrency == c && r.context_tokens == ctx)
            .unwrap_or_else(|| panic!("no cell C={c} ctx={ctx}"))
    }

    /// The measured window of a cell: (start, end).
    fn window(&self, c: u64, ctx: u64) -> (Instant, Instant) {
        let start = self
            .window_starts
            .iter()
            .find(|(k, _)| *k == (c, ctx))
            .map(|(_, t)| *t)
            .unwrap_or_else(|| panic!("no progress event inside the window of C={c} ctx={ctx}"));
        let len = self
            .cell(c, ctx)
            .measurement_seconds
            .expect("window length");
        (start, start + Duration::from_secs_f64(len))
    }

    fn log_has(&self, needle: &str) -> bool {
        self.results.event_log.iter().any(|l| l.contains(needle))
    }
}

async fn go(cfg: RunConfig) -> Observed {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<RunEvent>();
    let collector = tokio::spawn(async move {
        let mut starts: Vec<((u64, u64), Instant)> = Vec::new();
        while let Some(ev) = rx.recv().await {
            let now = Instant::now();
            if let RunEvent::Progress(p) = ev {
                if let (Phase::Measuring, false, Some(el)) = (p.phase, p.warmup, p.window_elapsed_s)
                {
                    let est = now - Duration::from_secs_f64(el);
                    let key = (p.concurrency, p.context);
                    match starts.iter_mut().find(|(k, _)| *k == key) {
                        // Arrival is never before the emission: the earliest estimate is best.
                        Some((_, t)) => *t = (*t).min(est),
                        None => starts.push((key, est)),
                    }
                }
            }
        }
        starts
    });
    let results = run(
        cfg,
        Arc::new(EventSink::new(Some(tx))),
        CancellationToken::new(),
    )
    .await
    .expect("run starts");
    let window_starts = collector.await.expect("event collector");
    let schema: serde_json::Value = serde_json::from_str(servebench_results::SCHEMA_JSON).unwrap();
    let v = serde_json::to_value(&results).unwrap();
    let val = jsonschema::validator_for(&schema).unwrap();
    let errs: Vec<String> = val
        .iter_errors(&v)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect();
    assert!(errs.is_empty(), "results violate the schema: {errs:?}");
    Observed {
        results,
        window_starts,
    }
}

fn brief(c: &CellResult) -> String {
    format!(
        "C={} ctx={} prompt={:?} status={} ({}) ready={:?} timeout={:?} client={:?} server={:?} \
         spec rate={:?} len={:?} avg_run={:?} max_run={:?} eff={:?} avg_q={:?} qfrac={:?} \
         kv={:?}/{:?} hit={:?} preempt={:?} underfilled={} cap_limited={} samples={:?} warnings={:?}",
        c.concurrency,
        c.context_tokens,
        c.prompt_tokens,
        c.status.as_str(),
        c.status_reason,
        c.ready_reason,
        c.timeout_reason,
        c.client_output_tokens,
        c.server_output_tokens,
        c.server_spec_accept_rate,
        c.server_spec_accept_length,
        c.avg_running_reqs,
        c.max_running_reqs,
        c.effective_concurrency,
        c.avg_queue_reqs,
        c.queue_fraction,
        c.server_kv_usage_avg,
        c.server_kv_usage_max,
        c.server_prefix_cache_hit_rate,
        c.server_preemptions,
        c.underfilled,
        c.capacity_limited,
        c.server_samples,
        c.warnings,
    )
}

fn assert_close(what: &str, got: Option<f64>, want: f64, tol: f64, c: &CellResult) {
    let g = got.unwrap_or_else(|| panic!("{what}: None, want {want:.4}\n{}", brief(c)));
    assert!(
        (g - want).abs() <= tol,
        "{what}: {g:.4}, want {want:.4} ± {tol}\n{}",
        brief(c)
    );
}

/// Realised speculative acceptance over `[a, b]`: (Δaccepted/Δdraft tokens, 1 + Δaccepted/Δdrafts).
fn spec_delta(a: &EngineStats, b: &EngineStats) -> (f64, f64) {
    let acc = (b.spec_accepted_tokens_total - a.spec_accepted_tokens_total) as f64;
    let dt = (b.spec_draft_tokens_total - a.spec_draft_tokens_total) as f64;
    let d = (b.spec_drafts_total - a.spec_drafts_total) as f64;
    assert!(dt > 0.0 && d > 0.0, "no drafts in the window");
    (acc / dt, 1.0 + acc / d)
}

/// Expected acceptance for K full drafts at per-token probability P: rate (P + … + P^K) / K,
/// length 1 + P + … + P^K.
fn expected_spec(k: u32, p: f64) -> (f64, f64) {
    let s: f64 = (1..=k).map(|i| p.powi(i as i32)).sum();
    (s / f64::from(k), 1.0 + s)
}

/// How an engine reports speculative acceptance.
#[derive(Clone, Copy, PartialEq)]
enum SpecSource {
    /// Draft counters (vLLM, llama.cpp): servebench's values are the window's deltas.
    Counters,
    /// Gauges only (SGLang): servebench averages the gauges sampled in the window; the
    /// simulator's gauges are lifetime ratios.
    LifetimeGauges,
}

/// Checks a window's speculative fields against the simulator's counters over the same window
/// and against the configured K and P.
fn check_spec_window(
    o: &Observed,
    rec: &Recorder,
    (c, ctx): (u64, u64),
    (k, p): (u32, f64),
    src: SpecSource,
) {
    let cell = o.cell(c, ctx);
    let (ws, we) = o.window(c, ctx);
    let (rate, len) = spec_delta(&rec.at(ws), &rec.at(we));
    let (exp_rate, exp_len) = expected_spec(k, p);
    eprintln!(
        "spec C={c} ctx={ctx}: reported rate {:?} length {:?}; simulator window rate {rate:.4} \
         length {len:.4}; configured K={k} P={p}: expected rate {exp_rate:.4} length {exp_len:.4}",
        cell.server_spec_accept_rate, cell.server_spec_accept_length
    );
    match src {
        SpecSource::Counters => {
            assert_close(
                "server_spec_accept_rate",
                cell.server_spec_accept_rate,
                rate,
                0.02,
                cell,
            );
            assert_close(
                "server_spec_accept_length",
                cell.server_spec_accept_length,
                len,
                0.05,
                cell,
            );
        }
        SpecSource::LifetimeGauges => {
            let (life_rate, life_len) = spec_delta(&EngineStats::default(), &rec.at(we));
            eprintln!(
                "spec C={c} ctx={ctx}: simulator lifetime rate {life_rate:.4} length {life_len:.4}"
            );
            assert_close(
                "server_spec_accept_rate (lifetime gauge)",
                cell.server_spec_accept_rate,
                life_rate,
                0.02,
                cell,
            );
            assert_close(
                "server_spec_accept_length (lifetime gauge)",
                cell.server_spec_accept_length,
                life_len,
                0.05,
                cell,
            );
            assert_close(
                "server_spec_accept_rate",
                cell.server_spec_accept_rate,
                rate,
                0.04,
                cell,
            );
            assert_close(
                "server_spec_accept_length",
                cell.server_spec_accept_length,
                len,
                0.1,
                cell,
            );
        }
    }
    // Draws are i.i.d. per draft position: the realised values are near the configuration.
    assert_close(
        "server_spec_accept_rate (configured)",
        cell.server_spec_accept_rate,
        exp_rate,
        0.05,
        cell,
    );
    assert_close(
        "server_spec_accept_length (configured)",
        cell.server_spec_accept_length,
        exp_len,
        0.15,
        cell,
    );
}

/// A window where the server ran all C requests: readiness from the scheduler, effective
/// concurrency ≈ C, no queue, not capacity-limited.
fn check_full_window(cell: &CellResult) {
    let c = cell.concurrency;
    assert_eq!(cell.status, CellStatus::Ok, "{}", brief(cell));
    assert!(!cell.warmup_timed_out, "{}", brief(cell));
    let want = format!("running_reqs={c}/{c}, queue_reqs=0, active_streams={c}/{c}, stable=0.5s");
    assert_eq!(cell.ready_reason, want, "{}", brief(cell));
    assert_eq!(cell.max_running_reqs, Some(c as f64), "{}", brief(cell));
    // max_tokens outlasts the cell, so no request ends (and is replaced a scheduler step
    // later) inside the window: every sample sees exactly C.
    assert_eq!(cell.avg_running_reqs, Some(c as f64), "{}", brief(cell));
    assert_eq!(
        cell.effective_concurrency,
        Some(c as f64),
        "{}",
        brief(cell)
    );
    assert!(!cell.underfilled, "{}", brief(cell));
    assert_eq!(cell.max_queue_reqs, Some(0.0), "{}", brief(cell));
    assert_eq!(cell.queue_fraction, Some(0.0), "{}", brief(cell));
    assert!(!cell.capacity_limited, "{}", brief(cell));
    assert!(cell.server_samples.unwrap_or(0) >= 3, "{}", brief(cell));
}

/// Generated tokens of the window: server delta ≈ the simulator's counter delta ≈ client tokens,
/// and no client-vs-server warning.
fn check_server_tokens(o: &Observed, rec: &Recorder, c: u64, ctx: u64, tokens_per_step: f64) {
    let cell = o.cell(c, ctx);
    let (ws, we) = o.window(c, ctx);
    let truth = rec.at(we).generation_tokens_total - rec.at(ws).generation_tokens_total;
    let server = cell.server_output_tokens.expect("server_output_tokens") as f64;
    let client = cell.client_output_tokens.expect("client_output_tokens") as f64;
    eprintln!("tokens C={c} ctx={ctx}: server {server}, simulator {truth}, client {client}");
    let tol = 2.0 * c as f64 * tokens_per_step;
    assert!(
        (server - truth as f64).abs() <= tol,
        "server_output_tokens {server} vs simulator {truth} (± {tol}): {}",
        brief(cell)
    );
    assert!(
        (server - client).abs() <= tol.max(0.03 * client),
        "server_output_tokens {server} vs client {client}: {}",
        brief(cell)
    );
    let tps = cell.server_gen_throughput.expect("server_gen_throughput");
    let agg = cell.aggregate_tps.unwrap();
    assert!(
        (tps - agg).abs() <= 0.05 * agg,
        "server_gen_throughput {tps} vs aggregate_tps {agg}: {}",
        brief(cell)
    );
    assert!(
        !cell.warnings.iter().any(|w| w.contains("client counted")),
        "client-vs-server token warning on an exact simulator: {}",
        brief(cell)
    );
}

/// Mean KV usage of the simulator over the window (blocks used / total).
fn kv_truth(rec: &Recorder, ws: Instant, we: Instant) -> (f64, f64) {
    let v: Vec<f64> = rec
        .between(ws, we)
        .iter()
        .map(|s| s.kv_blocks_used as f64 / s.kv_blocks_total as f64)
        .collect();
    assert!(!v.is_empty());
    (
        v.iter().sum::<f64>() / v.len() as f64,
        v.iter().copied().fold(0.0, f64::max),
    )
}

// ------------------------------------------------------------------------------------------
// vLLM

/// vLLM personality: detection, the KV budget from `cache_config_info`, a skipped cell, scheduler
/// readiness, speculative acceptance and the other server fields against the simulator.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vllm_personality_reports_the_simulators_truth() {
    let _s = SERIAL.lock().await;
    let (k, p) = (3, 0.6);
    let s = sim(SimConfig {
        personality: Personality::Vllm,
        max_model_len: 4096,
        kv_blocks: Some(1024), // × 16 = 16,384 tokens
        spec_tokens: k,
        spec_accept_rate: p,
        seed: 11,
        ..SimConfig::default()
    });
    let rec = Recorder::start(&s);
    let mut cfg = config(&s);
    cfg.concurrency = vec![4, 8];
    cfg.contexts = vec![0, 2048];
    // Longer than a cell lasts: no request ends inside a window.
    cfg.max_tokens = 1024;
    let o = go(cfg).await;
    let m = &o.results.metadata;
    assert_eq!(m.engine, "vllm");
    assert_eq!(m.engine_version.as_deref(), Some("0.32.0+sim"));
    assert!(m.metrics_available, "{}", m.metrics_warning);
    assert_eq!(m.metrics_warning, "");
    assert_eq!(m.max_model_len, Some(4096));
    assert_eq!(m.max_total_tokens, 16384, "blocks × block size");
    assert_eq!(m.kv_budget_source.as_deref(), Some("vllm_metrics"));
    assert!(
        o.log_has("KV cache budget from vLLM metrics: 16,384 tokens"),
        "{:#?}",
        o.results.event_log
    );
    assert!(o.log_has("startup metrics: vllm /metrics in use"));

    // 8 × (2048 + 1024) = 24,576 > 16,384 by 8,192.
    let skip = o.cell(8, 2048);
    assert_eq!(skip.status, CellStatus::SkippedCapacity, "{}", brief(skip));
    assert_eq!(skip.timeout_reason, "8k");
    assert!(
        skip.status_reason
            .contains("exceeds the KV budget 16384 by 8k"),
        "{}",
        skip.status_reason
    );
    assert!(skip.capacity_limited);
    assert_eq!(skip.total_tokens, Some(24576));

    for (c, ctx) in [(4, 0), (4, 2048), (8, 0)] {
        let cell = o.cell(c, ctx);
        eprintln!("{}", brief(cell));
        check_full_window(cell);
        check_spec_window(&o, &rec, (c, ctx), (k, p), SpecSource::Counters);
        check_server_tokens(&o, &rec, c, ctx, 1.0 + f64::from(k));
        assert_eq!(cell.server_preemptions, Some(0), "{}", brief(cell));
        assert_eq!(cell.server_counter_reset, Some(false));
        let (ws, we) = o.window(c, ctx);
        let (kv_avg, kv_max) = kv_truth(&rec, ws, we);
        assert_close(
            "server_kv_usage_avg",
            cell.server_kv_usage_avg,
            kv_avg,
            0.03,
            cell,
        );
        assert!(
            cell.server_kv_usage_max.unwrap() <= kv_max + 0.03,
            "{}",
            brief(cell)
        );
        // Prefix cache: Δhits / Δqueries of the simulator over the window; unknown (not 0)
        // when no request was admitted inside it.
        let (a, b) = (rec.at(ws), rec.at(we));
        let q = b.prefix_cache_queries_total - a.prefix_cache_queries_total;
        let h = b.prefix_cache_hits_total - a.prefix_cache_hits_total;
        if q > 0 {
            let want = h as f64 / q as f64;
            assert_close(
                "server_prefix_cache_hit_rate",
                cell.server_prefix_cache_hit_rate,
                want,
                0.05,
                cell,
            );
        } else {
            assert_eq!(cell.server_prefix_cache_hit_rate, None, "{}", brief(cell));
        }
    }
}

/// `--dcp-size 2` doubles vLLM's per-rank budget, says so in the event line, and the capacity
/// check uses the doubled budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vllm_dcp_size_multiplies_the_budget() {
    let _s = SERIAL.lock().await;
    let s = sim(SimConfig {
        personality: Personality::Vllm,
        max_model_len: 4096,
        kv_blocks: Some(512),
        ..SimConfig::default()
    });
    let mut cfg = config(&s);
    cfg.dcp_size = 2;
    // 16 × (1024 + 128) = 18,432 > 16,384 by 2,048: skipped without any decode request.
    cfg.concurrency = vec![16];
    cfg.contexts = vec![1024];
    cfg.max_tokens = 128;
    let o = go(cfg).await;
    let m = &o.results.metadata;
    assert_eq!(m.engine, "vllm");
    assert_eq!(m.max_total_tokens, 16384, "8,192 × CP 2");
    assert_eq!(m.dcp_size, 2);
    assert_eq!(m.kv_budget_source.as_deref(), Some("vllm_metrics"));
    let line = o
        .results
        .event_log
        .iter()
        .find(|l| l.contains("KV cache budget from vLLM metrics:"))
        .unwrap_or_else(|| panic!("no KV budget line: {:#?}", o.results.event_log));
    assert!(line.contains("16,384 tokens"), "{line}");
    assert!(line.contains("CP source: argument"), "{line}");
    let cell = o.cell(16, 1024);
    assert_eq!(cell.status, CellStatus::SkippedCapacity, "{}", brief(cell));
    assert_eq!(cell.timeout_reason, "2k");
}

/// A KV cache too small for C requests: the server preempts and queues, servebench reports the
/// preemptions (equal to the simulator's), effective concurrency below C and a capacity limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vllm_tiny_kv_cache_preempts_and_limits_concurrency() {
    let _s = SERIAL.lock().await;
    let s = sim(SimConfig {
        personality: Personality::Vllm,
        max_model_len: 256,
        kv_blocks: Some(20), // 320 tokens
        ..SimConfig::default()
    });
    let rec = Recorder::start(&s);
    let mut cfg = config(&s);
    // 4 × (0 + 48) = 192 ≤ 256, so the cell runs; but each request holds its prompt (~30
    // tokens of chat template and prefix) too: 4 × ~80 tokens does not fit.
    cfg.concurrency = vec![4];
    cfg.max_tokens = 48;
    cfg.cell_timeout = Some(Duration::from_secs(3));
    let o = go(cfg).await;
    assert_eq!(o.results.metadata.max_total_tokens, 320);
    let cell = o.cell(4, 0);
    eprintln!("{}", brief(cell));
    assert_eq!(cell.status, CellStatus::Ok, "{}", brief(cell));
    let (ws, we) = o.window(4, 0);
    let truth = rec.at(we).preemptions_total - rec.at(ws).preemptions_total;
    let got = cell.server_preemptions.expect("server_preemptions");
    assert!(got > 0, "{}", brief(cell));
    assert!(
        got.abs_diff(truth) <= 2,
        "server_preemptions {got} vs simulator {truth}: {}",
        brief(cell)
    );
    assert!(
        cell.warnings.iter().any(|w| w.contains("preempted")),
        "{}",
        brief(cell)
    );
    let eff = cell.effective_concurrency.unwrap();
    assert!(eff < 4.0, "{}", brief(cell));
    assert!(cell.capacity_limited, "{}", brief(cell));
    assert!(cell.underfilled, "{}", brief(cell));
    assert!(cell.queue_fraction.unwrap() > 0.0, "{}", brief(cell));
    assert!(cell.server_kv_usage_max.unwrap() > 0.8, "{}", brief(cell));
    // Short requests restart all the time: the window's prefix-cache hit rate is the
    // simulator's Δhits / Δqueries (the shared chat template and prefix are cached).
    let (a, b) = (rec.at(ws), rec.at(we));
    let q = b.prefix_cache_queries_total - a.prefix_cache_queries_total;
    let h = b.prefix_cache_hits_total - a.prefix_cache_hits_total;
    assert!(q > 0, "no admissions in the window");
    assert_close(
        "server_prefix_cache_hit_rate",
        cell.server_prefix_cache_hit_rate,
        h as f64 / q as f64,
        0.05,
        cell,
    );
}

// ------------------------------------------------------------------------------------------
// SGLang

/// SGLang personality: `/get_server_info` budget and `max_running_requests` (cells over either
/// are skipped), scheduler readiness, speculative acceptance from SGLang's gauges.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sglang_personality_reports_the_simulators_truth() {
    let _s = SERIAL.lock().await;
    let (k, p) = (3, 0.7);
    let s = sim(SimConfig {
        personality: Personality::Sglang,
        max_model_len: 4096,
        max_batch: 8,
        kv_blocks: Some(512), // 8,192 tokens
        spec_tokens: k,
        spec_accept_rate: p,
        seed: 5,
        ..SimConfig::default()
    });
    let rec = Recorder::start(&s);
    let mut cfg = config(&s);
    cfg.concurrency = vec![4, 16];
    cfg.contexts = vec![0, 2048];
    // Longer than a cell lasts: no request ends inside a window.
    cfg.max_tokens = 1024;
    let o = go(cfg).await;
    let m = &o.results.metadata;
    assert_eq!(m.engine, "sglang");
    assert_eq!(m.engine_version.as_deref(), Some("0.5.1+sim"));
    assert!(m.metrics_available, "{}", m.metrics_warning);
    assert_eq!(m.max_total_tokens, 8192);
    assert_eq!(m.kv_budget_source.as_deref(), Some("sglang_server_info"));
    assert_eq!(m.max_running_requests, Some(8));
    // context_length 4096, max_req_input_len 4095: the smaller one limits a request.
    assert_eq!(m.max_model_len, Some(4095));
    assert!(o.log_has("startup max running requests: 8"));

    // C = 16 > max_running_requests 8, at any context.
    for ctx in [0, 2048] {
        let cell = o.cell(16, ctx);
        assert_eq!(cell.status, CellStatus::SkippedCapacity, "{}", brief(cell));
        assert_eq!(cell.timeout_reason, "8 requests", "{}", brief(cell));
        assert!(
            cell.status_reason.contains("max_running_requests 8"),
            "{}",
            brief(cell)
        );
    }
    // 4 × (2048 + 1024) = 12,288 > 8,192 by 4,096.
    let cell = o.cell(4, 2048);
    assert_eq!(cell.status, CellStatus::SkippedCapacity, "{}", brief(cell));
    assert_eq!(cell.timeout_reason, "4k");

    let cell = o.cell(4, 0);
    eprintln!("{}", brief(cell));
    check_full_window(cell);
    check_server_tokens(&o, &rec, 4, 0, 1.0 + f64::from(k));
    assert_eq!(cell.server_preemptions, Some(0), "{}", brief(cell));
    let (ws, we) = o.window(4, 0);
    let (kv_avg, _) = kv_truth(&rec, ws, we);
    assert_close(
        "server_kv_usage_avg",
        cell.server_kv_usage_avg,
        kv_avg,
        0.03,
        cell,
    );
    // SGLang exports acceptance only as gauges (no draft counters): the values at the window's
    // end. The simulator's gauges average over its lifetime; with i.i.d. draws that is the
    // window's value within the sampling noise.
    check_spec_window(&o, &rec, (4, 0), (k, p), SpecSource::LifetimeGauges);
}

// ------------------------------------------------------------------------------------------
// llama.cpp

/// llama.cpp personality: `/props` slots × per-slot context, speculative counters, no server
/// token count (llama-server credits tokens only when a request ends), and C > slots queues.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llamacpp_personality_reports_the_simulators_truth() {
    let _s = SERIAL.lock().await;
    let (k, p) = (2, 0.8);
    let s = sim(SimConfig {
        personality: Personality::Llamacpp,
        max_model_len: 2048, // per-slot context
        max_batch: 4,        // slots
        spec_tokens: k,
        spec_accept_rate: p,
        seed: 9,
        ..SimConfig::default()
    });
    let rec = Recorder::start(&s);
    let mut cfg = config(&s);
    cfg.concurrency = vec![2, 8];
    // Longer than a cell lasts: no request ends inside a window.
    cfg.max_tokens = 1024;
    cfg.cell_timeout = Some(Duration::from_secs(3));
    let o = go(cfg).await;
    let m = &o.results.metadata;
    assert_eq!(m.engine, "llamacpp");
    assert!(m.metrics_available, "{}", m.metrics_warning);
    assert_eq!(m.max_model_len, Some(2048));
    assert_eq!(m.max_total_tokens, 8192, "4 slots × 2,048");
    assert_eq!(m.kv_budget_source.as_deref(), Some("llamacpp_slots"));
    assert!(
        o.log_has("KV cache budget from llama.cpp /props: 8,192 tokens (4 slots x 2,048 per slot)"),
        "{:#?}",
        o.results.event_log
    );

    let cell = o.cell(2, 0);
    eprintln!("{}", brief(cell));
    check_full_window(cell);
    check_spec_window(&o, &rec, (2, 0), (k, p), SpecSource::Counters);
    // tokens_predicted_total grows only when a request leaves its slot: no window count.
    assert_eq!(cell.server_output_tokens, None, "{}", brief(cell));
    assert_eq!(cell.server_gen_throughput, None, "{}", brief(cell));
    assert_eq!(
        cell.server_kv_usage_avg, None,
        "no KV gauge in current llama-server"
    );

    // C = 8 on 4 slots: 4 run, 4 wait ("deferred"); readiness never holds.
    let cell = o.cell(8, 0);
    eprintln!("{}", brief(cell));
    assert_eq!(cell.status, CellStatus::Ok, "{}", brief(cell));
    assert!(cell.warmup_timed_out, "{}", brief(cell));
    assert_eq!(cell.ready_reason, "warmup_timeout");
    assert_eq!(cell.timeout_reason, "queue_reqs=4", "{}", brief(cell));
    assert_eq!(cell.max_running_reqs, Some(4.0), "{}", brief(cell));
    assert_close(
        "effective_concurrency",
        cell.effective_concurrency,
        4.0,
        0.3,
        cell,
    );
    assert_close("avg_queue_reqs", cell.avg_queue_reqs, 4.0, 0.5, cell);
    assert!(cell.queue_fraction.unwrap() > 0.8, "{}", brief(cell));
    assert!(cell.capacity_limited && cell.underfilled, "{}", brief(cell));
}

/// llama.cpp budget: C × (ctx + max_tokens) over slots × per-slot context is skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llamacpp_cells_over_the_slot_budget_are_skipped() {
    let _s = SERIAL.lock().await;
    let s = sim(SimConfig {
        personality: Personality::Llamacpp,
        max_model_len: 1024,
        max_batch: 4,
        ..SimConfig::default()
    });
    let mut cfg = config(&s);
    // 8 × (512 + 128) = 5,120 > 4,096 by 1,024.
    cfg.concurrency = vec![8];
    cfg.contexts = vec![512];
    cfg.max_tokens = 128;
    let o = go(cfg).await;
    let cell = o.cell(8, 512);
    assert_eq!(cell.status, CellStatus::SkippedCapacity, "{}", brief(cell));
    assert_eq!(cell.timeout_reason, "1k");
    assert!(
        cell.status_reason.contains("KV budget 4096"),
        "{}",
        cell.status_reason
    );
}

// ------------------------------------------------------------------------------------------
// No /metrics

/// The neutral simulator has no `/metrics`: the run still measures, with a clear warning, no
/// server fields and client-only readiness.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_without_metrics_runs_with_a_clear_warning() {
    let _s = SERIAL.lock().await;
    let s = sim(SimConfig::default());
    let mut cfg = config(&s);
    cfg.concurrency = vec![2];
    cfg.duration = Duration::from_secs(1);
    cfg.max_tokens = 64;
    let o = go(cfg).await;
    let m = &o.results.metadata;
    assert_eq!(m.engine, "servebench-sim");
    assert_eq!(m.model, MODEL);
    assert!(!m.metrics_available);
    assert!(
        m.metrics_warning.contains("/metrics"),
        "{}",
        m.metrics_warning
    );
    assert!(
        o.log_has("startup warning: metrics disabled: "),
        "{:#?}",
        o.results.event_log
    );
    assert_eq!(m.max_total_tokens, 0);
    assert_eq!(m.kv_budget_source.as_deref(), Some("none"));
    let cell = o.cell(2, 0);
    assert_eq!(cell.status, CellStatus::Ok, "{}", brief(cell));
    assert!(cell.aggregate_tps.unwrap() > 0.0);
    assert_eq!(
        cell.ready_reason,
        "metrics_unavailable, active_streams=2/2, stable=0.5s"
    );
    for v in [
        cell.server_spec_accept_rate,
        cell.server_gen_throughput,
        cell.avg_running_reqs,
        cell.effective_concurrency,
        cell.queue_fraction,
        cell.server_kv_usage_avg,
    ] {
        assert_eq!(v, None, "{}", brief(cell));
    }
    assert_eq!(cell.server_output_tokens, None);
    assert_eq!(cell.server_preemptions, None);
    assert!(!cell.capacity_limited);
}

// ------------------------------------------------------------------------------------------
// Missing server evidence (issue 8): never a capacity limit, never a hidden value

/// A cell measured without server evidence: status ok with a value, not capacity-limited, no
/// readiness timeout, and a warning that says readiness came from the client's streams.
fn check_measured_without_evidence(cell: &CellResult, why: &str) {
    let c = cell.concurrency;
    assert_eq!(cell.status, CellStatus::Ok, "{}", brief(cell));
    assert!(cell.aggregate_tps.unwrap_or(0.0) > 0.0, "{}", brief(cell));
    assert!(!cell.warmup_timed_out, "{}", brief(cell));
    assert!(!cell.capacity_limited, "{}", brief(cell));
    assert_eq!(
        cell.ready_reason,
        format!("metrics_unavailable, active_streams={c}/{c}, stable=0.5s"),
        "{}",
        brief(cell)
    );
    assert!(
        cell.warnings
            .iter()
            .any(|w| w.contains("server readiness unavailable")
                && w.contains(why)
                && w.contains("readiness from the client's streams only")),
        "{}",
        brief(cell)
    );
}

/// vLLM personality whose `/metrics` lacks the running and waiting gauges: the cell is measured
/// at once on client readiness (it used to wait out the 20 s timeout and be capacity-limited).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn known_engine_without_running_gauge_is_measured_with_a_warning() {
    let _s = SERIAL.lock().await;
    let s = sim(SimConfig {
        personality: Personality::Vllm,
        metrics_without_running: true,
        ..SimConfig::default()
    });
    let mut cfg = config(&s);
    cfg.concurrency = vec![2];
    cfg.duration = Duration::from_secs(1);
    let o = go(cfg).await;
    assert!(o.results.metadata.metrics_available);
    assert_eq!(o.results.metadata.engine, "vllm");
    let cell = o.cell(2, 0);
    check_measured_without_evidence(cell, "no running-requests gauge");
    assert!(cell.warmup_duration.unwrap() < 5.0, "{}", brief(cell));
    assert_eq!(cell.avg_running_reqs, None);
    assert!(!cell.underfilled);
    // counters still come from the server
    assert!(cell.server_output_tokens.is_some(), "{}", brief(cell));
}

/// SGLang personality whose `/metrics` starts answering an empty page after three scrapes (the
/// startup probe and two ramp-up samples of the first cell): both cells stay measured.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_answering_empty_mid_run_falls_back_to_client_readiness() {
    let _s = SERIAL.lock().await;
    let s = sim(SimConfig {
        personality: Personality::Sglang,
        metrics_empty_after: Some(3),
        ..SimConfig::default()
    });
    let mut cfg = config(&s);
    cfg.concurrency = vec![2, 4];
    cfg.duration = Duration::from_secs(1);
    let o = go(cfg).await;
    assert!(o.results.metadata.metrics_available);
    for c in [2, 4] {
        let cell = o.cell(c, 0);
        assert_eq!(cell.status, CellStatus::Ok, "{}", brief(cell));
        assert!(cell.aggregate_tps.unwrap_or(0.0) > 0.0, "{}", brief(cell));
        assert!(!cell.warmup_timed_out, "{}", brief(cell));
        assert!(!cell.capacity_limited, "{}", brief(cell));
        assert_eq!(cell.server_output_tokens, None, "empty pages: no delta");
    }
    // The second cell got no sample: an empty page is not a sample (issue 17), so readiness
    // says that no scrape succeeded (it used to count empty pages as samples without gauges).
    check_measured_without_evidence(o.cell(4, 0), "no /metrics scrape succeeded");
    assert_eq!(
        o.cell(4, 0).server_samples,
        Some(0),
        "{}",
        brief(o.cell(4, 0))
    );
}

/// SGLang personality whose `/metrics` fails (HTTP 503) after three scrapes: cells are measured;
/// the second one, whose sampler never gets an answer, falls back after 5 s without one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_failing_mid_run_falls_back_to_client_readiness() {
    let _s = SERIAL.lock().await;
    let s = sim(SimConfig {
        personality: Personality::Sglang,
        metrics_fail_after: Some(3),
        ..SimConfig::default()
    });
    let mut cfg = config(&s);
    cfg.concurrency = vec![2, 4];
    cfg.duration = Duration::from_secs(1);
    let o = go(cfg).await;
    assert!(o.results.metadata.metrics_available);
    for c in [2, 4] {
        let cell = o.cell(c, 0);
        assert_eq!(cell.status, CellStatus::Ok, "{}", brief(cell));
        assert!(!cell.warmup_timed_out, "{}", brief(cell));
        assert!(!cell.capacity_limited, "{}", brief(cell));
        assert_eq!(cell.server_output_tokens, None);
        assert_eq!(cell.avg_running_reqs, None);
    }
    check_measured_without_evidence(o.cell(4, 0), "no /metrics scrape succeeded within 5 s");
}

/// Older SGLang builds name the gauges `num_requests_running` / `num_requests_waiting`:
/// readiness and the window's scheduler fields come from them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sglang_old_gauge_names_are_scheduler_evidence() {
    let _s = SERIAL.lock().await;
    let s = sim(SimConfig {
        personality: Personality::Sglang,
        sglang_old_gauge_names: true,
        ..SimConfig::default()
    });
    let mut cfg = config(&s);
    cfg.concurrency = vec![2];
    cfg.duration = Duration::from_secs(1);
    let o = go(cfg).await;
    assert_eq!(o.results.metadata.engine, "sglang");
    check_full_window(o.cell(2, 0));
}

/// SGLang exports no prefix-cache query/hit counters and its `cache_hit_rate` gauge covers only
/// the latest prefill batch: the window's hit rate is Δcached_tokens / Δprompt_tokens, equal to
/// the simulator's own Δhits / Δqueries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sglang_prefix_cache_hit_rate_from_counter_deltas() {
    let _s = SERIAL.lock().await;
    let s = sim(SimConfig {
        personality: Personality::Sglang,
        ..SimConfig::default()
    });
    let rec = Recorder::start(&s);
    let mut cfg = config(&s);
    cfg.concurrency = vec![4];
    cfg.max_tokens = 24;
    let o = go(cfg).await;
    let cell = o.cell(4, 0);
    assert_eq!(cell.status, CellStatus::Ok, "{}", brief(cell));
    let (ws, we) = o.window(4, 0);
    let (a, b) = (rec.at(ws), rec.at(we));
    let q = b.prefix_cache_queries_total - a.prefix_cache_queries_total;
    let h = b.prefix_cache_hits_total - a.prefix_cache_hits_total;
    assert!(q > 0, "no admissions in the window");
    assert_close(
        "server_prefix_cache_hit_rate",
        cell.server_prefix_cache_hit_rate,
        h as f64 / q as f64,
        0.05,
        cell,
    );
}

/// llama.cpp's final `timings` (prompt_n, cache_n, predicted_n, predicted_per_second, and with
/// speculative decoding draft_n / draft_n_accepted) become per-request and per-cell fields that
/// equal the simulator's own per-request truth (matched by response id).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llamacpp_timings_are_per_request_and_per_cell_fields() {
    let _s = SERIAL.lock().await;
    let s = Arc::new(
        Sim::spawn_thread(SimConfig {
            port: 0,
            personality: Personality::Llamacpp,
            max_model_len: 2048,
            max_batch: 4,
            spec_tokens: 2,
            spec_accept_rate: 0.8,
            seed: 4,
            ..SimConfig::default()
        })
        .expect("simulator starts"),
    );
    let mut cfg = config(&s);
    cfg.concurrency = vec![2];
    cfg.max_tokens = 24; // requests end (and report timings) inside the window
    cfg.duration = Duration::from_secs(1);
    let o = go(cfg).await;
    let cell = o.cell(2, 0);
    assert_eq!(cell.status, CellStatus::Ok, "{}", brief(cell));
    let truth = s.truth();
    let with_timings: Vec<_> = cell
        .request_samples
        .iter()
        .filter(|r| r.timings_predicted_n.is_some())
        .collect();
    assert!(with_timings.len() >= 2, "{}", brief(cell));
    assert_eq!(cell.timings_requests, Some(with_timings.len() as u64));
    let (mut drafted, mut accepted) = (0u64, 0u64);
    for r in &with_timings {
        let id = r.response_id.as_deref().expect("response id");
        let t = truth
            .iter()
            .find(|t| t.id == id)
            .expect("truth of the request");
        assert_eq!(r.timings_predicted_n, Some(t.tokens()), "{id}");
        assert_eq!(r.timings_predicted_n, Some(r.output_tokens), "{id}");
        assert_eq!(r.timings_cache_n, Some(t.cached_tokens), "{id}");
        assert_eq!(
            r.timings_prompt_n,
            Some(t.prompt_tokens - t.cached_tokens),
            "{id}"
        );
        assert_eq!(r.timings_draft_n, Some(t.draft_tokens), "{id}");
        assert_eq!(
            r.timings_draft_n_accepted,
            Some(t.accepted_draft_tokens),
            "{id}"
        );
        let want = t.accepted_draft_tokens as f64 / t.draft_tokens as f64;
        assert!(
            (r.draft_acceptance_rate.unwrap() - want).abs() < 1e-12,
            "{id}"
        );
        assert!(r.timings_predicted_per_second.unwrap() > 0.0);
        drafted += t.draft_tokens;
        accepted += t.accepted_draft_tokens;
    }
    let rate = cell.timings_draft_acceptance_rate.expect("cell acceptance");
    assert!(
        (rate - accepted as f64 / drafted as f64).abs() < 1e-12,
        "{}",
        brief(cell)
    );
    assert!(cell.timings_predicted_per_second_avg.unwrap() > 0.0);
    assert!(cell.timings_prompt_n_avg.is_some() && cell.timings_cache_n_avg.is_some());
}
