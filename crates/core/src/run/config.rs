//! What a run is asked to do: [`RunConfig`] and its parts ([`TargetingMode`],
//! [`PrefillConfig`], [`BurstConfig`]). The bottom of `run`: it imports nothing from the rest of
//! it, so the lower modules (`host`, `resume`, `rate`) take their settings from here.

use std::time::Duration;

use serde_json::Value;
use servebench_client::timeouts::RequestPolicy;
use servebench_client::Target;

use crate::prefill::PrefillMetric;
use crate::prompt::CalibrationCache;

/// How prompts are sized.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TargetingMode {
    /// `/tokenize` when the server has it, else the calibrated estimate.
    #[default]
    Auto,
    /// `/tokenize` only (error when the server lacks it).
    Exact,
    /// Calibrated chars/token estimate even when `/tokenize` exists.
    Estimate,
}

/// The prefill layer's settings (seed spec §2.4).
#[derive(Clone, Debug)]
pub struct PrefillConfig {
    /// `--prefill-contexts`: extra scout-only contexts (integrated mode) or the profile contexts
    /// (standalone mode), tokens. Contexts that do not fit the model are reported as skipped rows.
    pub contexts: Vec<u64>,
    /// `--standalone-prefill`: repeated cold samples per context before decode.
    pub standalone: bool,
    /// `--prefill-only`: the standalone profile, then stop.
    pub only: bool,
    /// `--skip-prefill`: no prefill rows at all.
    pub skip: bool,
    /// `--prefill-duration`: sampling time per standalone context (at least one sample).
    pub duration: Duration,
    /// `--prefill-metric`.
    pub metric: PrefillMetric,
}

impl Default for PrefillConfig {
    fn default() -> Self {
        PrefillConfig {
            contexts: vec![8192, 65536, 131072],
            standalone: false,
            only: false,
            skip: false,
            duration: Duration::from_secs(10),
            metric: PrefillMetric::Client,
        }
    }
}

/// The Burst / E2E layer's settings (seed spec §2.2).
#[derive(Clone, Debug)]
pub struct BurstConfig {
    /// `--request-count N`: request-count cells replace the sustained matrix (0 = sustained).
    pub request_count: u64,
    /// `--warmup-request-count W` for request-count cells.
    pub warmup_request_count: u64,
    /// `--run-burst`: a Burst / E2E matrix after the sustained one.
    pub run_burst: bool,
    /// `--burst-request-count` (0 = max(C, C × per-concurrency)).
    pub burst_request_count: u64,
    /// `--burst-warmup-request-count` (0 = C).
    pub burst_warmup_request_count: u64,
    /// `--burst-requests-per-concurrency` (≥ 1).
    pub burst_requests_per_concurrency: u64,
    /// `--prompt-cache cold|shared`; `None` = the defaults: cold for request-count and Burst /
    /// E2E cells, shared for the sustained matrix (see [`crate::cache`]).
    pub prompt_cache: Option<crate::cache::PromptCache>,
    /// `--batch-timeout`: wall-clock deadline of each request-count or Burst / E2E cell's
    /// batches (warmup and measured, from the end of its scout); `None` = no deadline beyond
    /// the per-request ones. At the deadline the requests in flight are cut and the cell is
    /// `invalid` with `batch_timeout` ([`crate::burst`]).
    pub batch_timeout: Option<std::time::Duration>,
}

/// Default of [`BurstConfig::batch_timeout`], s: a server that trickles tokens just inside
/// the stream idle timeout (and ignores `max_tokens` up to the cut at 2 × max_tokens + 16)
/// would otherwise hold a batch for hours.
pub const DEFAULT_BATCH_TIMEOUT_S: f64 = 1800.0;

impl Default for BurstConfig {
    fn default() -> Self {
        BurstConfig {
            request_count: 0,
            warmup_request_count: 0,
            run_burst: false,
            burst_request_count: 0,
            burst_warmup_request_count: 0,
            burst_requests_per_concurrency: 5,
            prompt_cache: None,
            batch_timeout: Some(std::time::Duration::from_secs_f64(DEFAULT_BATCH_TIMEOUT_S)),
        }
    }
}

/// Everything a run needs. Built by the CLI from flags.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// The server.
    pub target: Target,
    /// Model to request; `None` = the first id of `/v1/models`.
    pub model: Option<String>,
    /// Concurrency levels C.
    pub concurrency: Vec<u64>,
    /// Contexts, tokens.
    pub contexts: Vec<u64>,
    /// Measured window per cell.
    pub duration: Duration,
    /// `max_tokens` of decode requests.
    pub max_tokens: u64,
    /// Send `ignore_eos: true`.
    pub ignore_eos: bool,
    /// Sampling temperature (None = server default).
    pub temperature: Option<f64>,
    /// Hidden C=1 warmup length (zero = none).
    pub decode_warmup: Duration,
    /// Readiness timeout override (None = 60/120/180 s policy).
    pub cell_timeout: Option<Duration>,
    /// Readiness must hold this long before the window opens.
    pub stable_window: Duration,
    /// Pause between cells (lets the server drain).
    pub cell_pause: Duration,
    /// `--kv-budget`: KV budget, tokens (0 = detect from the server).
    pub kv_budget: u64,
    /// `--dcp-size`: context-parallel multiplier for a per-rank KV budget (0 = detect).
    pub dcp_size: u64,
    /// Show raw values of capacity-limited cells in reports.
    pub show_capacity_limited_values: bool,
    /// `--seed`: reproducible run id and prompts.
    pub seed: Option<u64>,
    /// Prompt sizing mode.
    pub targeting: TargetingMode,
    /// Size of the calibration probe, tokens (capped at the largest context).
    pub calibration_context: u64,
    /// Chars/token cache.
    pub calibration_cache: CalibrationCache,
    /// Prefill layer.
    pub prefill: PrefillConfig,
    /// Burst / request-count layer.
    pub burst: BurstConfig,
    /// Snapshot of the arguments for `startup_diagnostics.args`.
    pub args_snapshot: Value,
    /// Timeouts on every wait and the HTTP 429 retry policy ([`servebench_client::timeouts`]).
    pub policy: RequestPolicy,
    /// `--request-rate` / `--rate-search`: open-loop rows ([`crate::rate`]) instead of the
    /// concurrency matrix; `None` = the matrix.
    pub open_loop: Option<crate::rate::RateConfig>,
    /// `--export-requests`: every measured request's row goes here ([`crate::export`]);
    /// `None` = no export.
    pub export: Option<crate::export::RequestExport>,
}

impl RunConfig {
    /// A run of `target` with the command line's defaults (without the embedded simulator):
    /// concurrency 1,2,4,8,16,32,64,128, contexts 0,16k,32k,64k,128k, a 30 s window,
    /// `max_tokens` 2048 with `ignore_eos`, a 3 s decode warmup, a 3 s stable window, a 1 s pause
    /// between cells, detected KV budget and context-parallel size, sizing by `/tokenize` when
    /// the server has it (8k calibration probe), the default prefill and Burst / E2E layers
    /// ([`PrefillConfig::default`], [`BurstConfig::default`]), the default timeouts, no open-loop
    /// rows and no request export.
    ///
    /// Unlike the CLI, the calibration cache is disabled (a library run writes no user files;
    /// set [`RunConfig::calibration_cache`] to [`CalibrationCache::user_default`] for the
    /// CLI's), and `args_snapshot` is `null`.
    pub fn new(target: Target) -> Self {
        RunConfig {
            target,
            model: None,
            concurrency: vec![1, 2, 4, 8, 16, 32, 64, 128],
            contexts: vec![0, 16 * 1024, 32 * 1024, 64 * 1024, 128 * 1024],
            duration: Duration::from_secs(30),
            max_tokens: 2048,
            ignore_eos: true,
            temperature: None,
            decode_warmup: Duration::from_secs(3),
            cell_timeout: None,
            stable_window: Duration::from_secs(3),
            cell_pause: Duration::from_secs(1),
            kv_budget: 0,
            dcp_size: 0,
            show_capacity_limited_values: false,
            seed: None,
            targeting: TargetingMode::Auto,
            calibration_context: 8192,
            calibration_cache: CalibrationCache::at(None),
            prefill: PrefillConfig::default(),
            burst: BurstConfig::default(),
            args_snapshot: Value::Null,
            policy: RequestPolicy::default(),
            open_loop: None,
            export: None,
        }
    }
}

/// The `metadata.prefill_metric` name of a prefill metric.
pub(crate) fn prefill_metric_name(m: PrefillMetric) -> &'static str {
    match m {
        PrefillMetric::Client => "client",
        PrefillMetric::Auto => "auto",
        PrefillMetric::Prometheus => "prometheus",
    }
}
