//! Command-line flags and their translation into a [`RunConfig`].

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, Context as _};
use clap::{Args, Parser, Subcommand, ValueEnum};
use serde_json::json;
use servebench_client::{Endpoint, Target, TargetError};
use servebench_core::plan::{parse_concurrency, parse_contexts};
use servebench_core::prompt::CalibrationCache;
use servebench_core::{RunConfig, TargetingMode};
use servebench_sim::{Sim, SimConfig};

/// A bad flag or flag value. `main` exits with code 2 for it, as clap does for flags it cannot
/// parse, so scripts can tell "bad flags" (2) from "the server or the machine failed" (1).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// Marks `e` as a [`UsageError`] (its causes joined into one line).
pub fn usage(e: impl Into<anyhow::Error>) -> anyhow::Error {
    UsageError(crate::one_line_error(&e.into())).into()
}

/// `bail!` for bad flags: returns a [`UsageError`].
macro_rules! usage_bail {
    ($($t:tt)*) => {
        return Err($crate::args::usage(anyhow::anyhow!($($t)*)))
    };
}
pub(crate) use usage_bail;

/// Fails before any measurement when `path` cannot receive the results file: it is a
/// directory, something that is not a regular file (a device such as `/dev/full`, a FIFO, a
/// socket, a symbolic link: every output is replaced atomically by renaming a new file over it,
/// which would replace the node or the link itself, and a previous file is kept by renaming it),
/// or its folder cannot be created or written. Hours of measurements must not end in "cannot
/// write".
pub fn check_output_path(path: &std::path::Path, flag: &str) -> anyhow::Result<()> {
    if let Ok(m) = std::fs::symlink_metadata(path) {
        let ft = m.file_type();
        if ft.is_dir() {
            usage_bail!("{flag} {} is a directory; give a file name", path.display());
        }
        if ft.is_symlink() {
            usage_bail!(
                "{flag} {} is a symbolic link; give the path of a regular file (outputs are replaced by renaming a new file over them, which would replace the link)",
                path.display()
            );
        }
        if !ft.is_file() {
            usage_bail!(
                "{flag} {} is not a regular file (a device, FIFO or socket); servebench writes its outputs only to regular files",
                path.display()
            );
        }
    }
    let dir = folder_of(path);
    // The folder is created at the first write, not here: a command that fails first (a
    // missing input, an unreachable server) leaves no empty folder behind. What must hold
    // now is that its nearest existing ancestor is a folder this process can write in.
    let (existing, _) = existing_ancestor(&dir);
    let why = match std::fs::metadata(&existing) {
        Ok(m) if !m.is_dir() => Some(format!("{} is not a folder", existing.display())),
        Ok(_) => tempfile::NamedTempFile::new_in(&existing)
            .map(drop)
            .err()
            .map(|e| e.to_string()),
        Err(e) => Some(e.to_string()),
    };
    match why {
        Some(e) => Err(usage(anyhow!(
            "{flag} {}: cannot write to {}: {e}",
            path.display(),
            dir.display()
        ))),
        None => Ok(()),
    }
}

/// The folder `path` is written in (`.` for a bare file name).
fn folder_of(path: &std::path::Path) -> PathBuf {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// The nearest ancestor of `dir` that exists (itself when it does), and the components below
/// it that do not.
fn existing_ancestor(dir: &std::path::Path) -> (PathBuf, PathBuf) {
    let mut at = dir.to_path_buf();
    let mut rest = PathBuf::new();
    while std::fs::symlink_metadata(&at).is_err() {
        match (at.parent(), at.file_name()) {
            (Some(p), Some(name)) => {
                rest = PathBuf::from(name).join(&rest);
                at = if p.as_os_str().is_empty() {
                    PathBuf::from(".")
                } else {
                    p.to_path_buf()
                };
            }
            _ => break,
        }
    }
    (at, rest)
}

/// Fails when two output flags name one file (`-o res.json --export-md res.json`): one would
/// overwrite the other, or keep it as NAME.1.EXT. `outputs`: (path, flag) pairs; paths are
/// compared after resolving the existing part of their folders (`x`, `./x` and `d/../x` are
/// one file, whether `d` exists yet or not).
pub fn check_distinct_outputs(outputs: &[(&std::path::Path, &str)]) -> anyhow::Result<()> {
    let key = |p: &std::path::Path| {
        let (existing, rest) = existing_ancestor(&folder_of(p));
        let base = std::fs::canonicalize(&existing).unwrap_or(existing);
        base.join(rest).join(p.file_name().unwrap_or_default())
    };
    for (i, (a, fa)) in outputs.iter().enumerate() {
        for (b, fb) in &outputs[..i] {
            if key(a) == key(b) {
                usage_bail!(
                    "{fb} and {fa} both name {}; give each output its own file, apart from the inputs",
                    a.display()
                );
            }
        }
    }
    Ok(())
}

/// Measure how fast an LLM inference server really is: sustained decode tok/s over a
/// concurrency × context matrix, with TTFT, ITL and exact token accounting.
#[derive(Debug, Parser)]
#[command(name = "servebench", version, about, long_about = None, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the sustained-decode matrix against a server (or the built-in simulator when no target is given).
    #[command(after_long_help = RUN_EXAMPLES)]
    Run(Box<RunArgs>),
    /// Serve the built-in OpenAI-compatible simulator (continuous batching model) until Ctrl-C.
    Sim(Box<SimConfig>),
    /// Turn a results JSON file (servebench's or llm_decode_bench.py's) into a report: text,
    /// Markdown, CSV or a self-contained HTML page with plots.
    Report(crate::reports::ReportArgs),
    /// Compare runs cell by cell: is B faster than A beyond the noise? (95 % intervals,
    /// --fail-if-slower for CI gates).
    Compare(crate::reports::CompareArgs),
    /// Check a results JSON file against servebench's JSON Schema.
    Validate(FileArgs),
    /// Measure the client's own CPU and memory cost against a simulator process.
    Selftest(crate::selftest::SelftestArgs),
    /// Task profile: a prompt or JSONL dataset with expected answers; completion-token stats,
    /// correctness and the concurrency with the highest system throughput.
    Task(Box<crate::task::TaskArgs>),
    /// local-ai-registry/v1 records: validate a registry, import records, recompute trust, and
    /// `registry serve` it (JSON API and site pages).
    Registry(crate::registry_cmd::RegistryArgs),
    /// Turn a results JSON into a local-ai-registry/v1 speed sweep inside a registry (with a
    /// verdict per row), then validate the registry.
    Publish(Box<crate::publish::PublishArgs>),
}

/// Examples printed after `servebench run --help` (the long help; `-h` leaves them out).
const RUN_EXAMPLES: &str = "\
Examples:
  # the built-in simulator (no server needed): C = 1,8,64 × contexts 0,8k, about a minute
  servebench run

  # a local vLLM / SGLang / llama.cpp / TGI server: the decode matrix, report and results JSON
  servebench run --url http://127.0.0.1:8000 --concurrency 1,4,16,64 --contexts 0,16k,32k \\
      -o vllm.json

  # a hosted API: key from the environment, completions endpoint, reproducible prompts
  SERVEBENCH_API_KEY=sk-... servebench run --url https://api.example.com/v1 --model my-model \\
      --endpoint completions --seed 1

  # open loop: Poisson arrivals at 5, 10 and 20 req/s for 60 s each, goodput under SLOs
  servebench run --url http://127.0.0.1:8000 --request-rate 5,10,20 --duration 60 --contexts 0 \\
      --slo ttft_p99=500ms,itl_p99=50ms

  # the sustained matrix, then a Burst / E2E layer, with CSV and HTML exports
  servebench run --url http://127.0.0.1:8000 --run-burst --export-csv cells.csv \\
      --export-html report.html

  # finish a run that was interrupted or had failed cells (same flags as the first run)
  servebench run --url http://127.0.0.1:8000 --concurrency 1,4,16,64 --resume vllm.json

Exit codes: 0 all cells measured or skipped, 1 startup error (server unreachable, rejected key,
unknown model), 2 bad flags or flag values, 3 some cells error / invalid (results still written),
130 interrupted by Ctrl-C, SIGTERM or SIGHUP (partial results written).
More: README.md, docs/metrics.md (every number), docs/exports.md (files).";

/// A results file argument.
#[derive(Debug, Args)]
pub struct FileArgs {
    /// Path of the results JSON file.
    pub file: PathBuf,
}

/// API endpoint used for benchmark requests.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum EndpointArg {
    /// /v1/chat/completions with messages.
    Chat,
    /// /v1/completions with a prompt string.
    Completions,
}

/// How prompts are sized to each context.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum TargetingArg {
    /// /tokenize when the server has it, else a calibrated chars/token estimate.
    Auto,
    /// Only /tokenize (falls back to the estimate with a warning when missing).
    Exact,
    /// Calibrated chars/token estimate.
    Estimate,
}

/// How `servebench run` shows its progress.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum DisplayArg {
    /// Full-screen live dashboard (keys: q stops and keeps the results, s skips the cell).
    Screen,
    /// A few live lines at the bottom of the terminal, the event log scrolling above them.
    Inline,
    /// Plain lines on stderr: the event log and one progress line per phase change.
    Plain,
}

/// How prompts are built with respect to the server's prefix cache (`--prompt-cache`).
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum PromptCacheArg {
    /// A unique prefix per request: no prefix-cache reuse between requests.
    Cold,
    /// One prompt per cell (the seed's sustained matrix: the scout primes the cache).
    Shared,
}

/// Which number heads a prefill row.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum PrefillMetricArg {
    /// Client prompt_tokens / TTFT (aliases: ttft, aiperf).
    #[value(alias = "ttft", alias = "aiperf")]
    Client,
    /// Client headline plus server-side validation from Prometheus counters.
    Auto,
    /// Server Prometheus prefill counters as the headline.
    Prometheus,
}

/// GPU telemetry source of the hardware monitor.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum HwSourceArg {
    /// NVML when libnvidia-ml loads, else nvidia-smi.
    Auto,
    /// NVML only.
    Nvml,
    /// nvidia-smi only (--query-gpu and dmon).
    NvidiaSmi,
}

/// Where the server is (shared by `run` and `task`). Without `--url`/`--host`/`--port` the
/// built-in simulator is started in-process.
#[derive(Debug, Clone, Args)]
pub struct TargetArgs {
    /// Full base URL of the server (scheme, host, port, optional path), e.g. http://127.0.0.1:8000.
    #[arg(help_heading = "Server", long, conflicts_with_all = ["host", "port"])]
    pub url: Option<String>,
    /// Server host (or a URL); used with --port. Without --url/--host/--port the built-in simulator runs.
    #[arg(help_heading = "Server", long)]
    pub host: Option<String>,
    /// Server port (default 8000 when --host is given).
    #[arg(help_heading = "Server", long)]
    pub port: Option<u16>,
    /// API key sent as `Authorization: Bearer <key>` on every request.
    #[arg(
        help_heading = "Server",
        long,
        env = "SERVEBENCH_API_KEY",
        hide_env_values = true
    )]
    pub api_key: Option<String>,
    /// Model name (default: the first id listed by /v1/models).
    #[arg(help_heading = "Server", long)]
    pub model: Option<String>,
    /// API used for the benchmark requests.
    #[arg(help_heading = "Server", long, value_enum, default_value_t = EndpointArg::Chat)]
    pub endpoint: EndpointArg,
}

impl TargetArgs {
    /// No server given: the built-in simulator will run.
    pub fn is_embedded(&self) -> bool {
        self.url.is_none() && self.host.is_none() && self.port.is_none()
    }

    /// The API endpoint.
    pub fn endpoint(&self) -> Endpoint {
        match self.endpoint {
            EndpointArg::Chat => Endpoint::Chat,
            EndpointArg::Completions => Endpoint::Completions,
        }
    }

    /// The API key, when a non-empty one was given.
    pub fn key(&self) -> Option<String> {
        self.api_key.clone().filter(|k| !k.is_empty())
    }

    /// The target. When none was given, starts the built-in simulator configured by `sim`
    /// (on its own thread, ephemeral port, the API key applied) and returns it too: keep it alive
    /// for the whole run.
    pub fn resolve(
        &self,
        sim: impl FnOnce() -> SimConfig,
    ) -> anyhow::Result<(Target, Option<Sim>)> {
        let (key, endpoint) = (self.key(), self.endpoint());
        if let Some(url) = &self.url {
            let t = Target::from_url(url, key, endpoint)
                .map_err(|e| usage(anyhow!(target_message(&e, "--url"))))?;
            return Ok((t, None));
        }
        if !self.is_embedded() {
            let host = self.host.clone().unwrap_or_else(|| "127.0.0.1".into());
            return Ok((
                Target::from_host_port(&host, self.port.unwrap_or(8000), key, endpoint)
                    .map_err(|e| usage(anyhow!(target_message(&e, "--host"))))?,
                None,
            ));
        }
        let cfg = SimConfig {
            port: 0,
            record_truth: false,
            api_key: key.clone(),
            ..sim()
        };
        let sim = Sim::spawn_thread(cfg).context("cannot start the built-in simulator")?;
        Ok((Target::from_url(&sim.base_url(), key, endpoint)?, Some(sim)))
    }
}

/// Flags of `servebench run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub target: TargetArgs,

    /// Concurrency levels C (streams kept in flight), comma-separated
    /// [default: 1,2,4,8,16,32,64,128; simulator: 1,8,64].
    #[arg(
        help_heading = "Matrix (concurrency × context cells)",
        long,
        allow_hyphen_values = true
    )]
    pub concurrency: Option<String>,
    /// Context lengths in prompt tokens, comma-separated, `k` = ×1024
    /// [default: 0,16k,32k,64k,128k; simulator: 0,8k].
    #[arg(
        help_heading = "Matrix (concurrency × context cells)",
        long,
        allow_hyphen_values = true
    )]
    pub contexts: Option<String>,
    /// Measured window per cell, s [default: 30; simulator: 5].
    #[arg(
        help_heading = "Matrix (concurrency × context cells)",
        long,
        allow_negative_numbers = true
    )]
    pub duration: Option<f64>,
    /// max_tokens of every decode request.
    #[arg(
        help_heading = "Matrix (concurrency × context cells)",
        long,
        default_value_t = 2048
    )]
    pub max_tokens: u64,
    /// Do not send `ignore_eos: true` (let the model stop on EOS).
    #[arg(help_heading = "Matrix (concurrency × context cells)", long)]
    pub respect_eos: bool,
    /// Sampling temperature sent with every request (default: the server's).
    #[arg(
        help_heading = "Matrix (concurrency × context cells)",
        long,
        allow_negative_numbers = true
    )]
    pub temperature: Option<f64>,
    /// Hidden C=1 decode warmup at the largest runnable context, s (0 disables it).
    #[arg(
        help_heading = "Matrix (concurrency × context cells)",
        long,
        default_value_t = 3.0,
        allow_negative_numbers = true
    )]
    pub decode_warmup_seconds: f64,
    /// Readiness timeout per cell, s, counted after the cell's first request (sent alone to fill the prefix cache) (0 = auto: 60 s, 120 s at ≥64k, 180 s at ≥128k).
    #[arg(
        help_heading = "Matrix (concurrency × context cells)",
        long,
        default_value_t = 0.0,
        allow_negative_numbers = true
    )]
    pub cell_warmup_timeout_seconds: f64,
    /// How long readiness (every stream producing) must hold before the window opens, s.
    #[arg(
        help_heading = "Matrix (concurrency × context cells)",
        long,
        default_value_t = 3.0,
        allow_negative_numbers = true
    )]
    pub stable_seconds: f64,
    /// Pause between cells, s (lets the server drain).
    #[arg(
        help_heading = "Matrix (concurrency × context cells)",
        long,
        default_value_t = 1.0,
        allow_negative_numbers = true
    )]
    pub cell_pause_seconds: f64,
    /// KV cache budget in tokens (overrides detection; "set the KV cache budget explicitly" in a warning means this flag): cells with C × (ctx + max_tokens) above it are skipped (skipped_capacity).
    #[arg(help_heading = "KV cache budget", long, default_value_t = 0)]
    pub kv_budget: u64,
    /// Decode context-parallel (DCP/CP) size to multiply a per-rank KV budget reported by the server (0 = detect; "set the decode context-parallel size" in a warning means this flag).
    #[arg(
        help_heading = "KV cache budget",
        long,
        env = "SERVEBENCH_DCP_SIZE",
        hide_env_values = true,
        default_value_t = 0
    )]
    pub dcp_size: u64,
    /// Print raw tok/s of capacity-limited cells instead of ∅.
    #[arg(help_heading = "Matrix (concurrency × context cells)", long)]
    pub show_capacity_limited_values: bool,
    /// Make the run nonce and therefore every prompt reproducible (prompts then share the prefix cache across runs).
    #[arg(help_heading = "Prompts", long)]
    pub seed: Option<u64>,
    /// How prompts are sized to each context.
    #[arg(help_heading = "Prompts", long, value_enum, default_value_t = TargetingArg::Auto)]
    pub token_targeting: TargetingArg,
    /// Size of the calibration probe used by the estimate (`k` suffix allowed).
    #[arg(help_heading = "Prompts", long, default_value = "8k")]
    pub calibration_context: String,
    /// Always calibrate afresh and do not write the calibration cache.
    #[arg(help_heading = "Prompts", long)]
    pub no_calibration_cache: bool,
    /// Do not record prefill rows (each cell's first request, sent alone to fill the prefix cache, still runs).
    #[arg(help_heading = "Prefill", long)]
    pub skip_prefill: bool,
    /// Prefill contexts, `k` = ×1024: extra contexts measured by one cold request each, with no
    /// decode cell (default mode), or the profile contexts (--standalone-prefill); contexts that
    /// do not fit the model are reported as skipped
    /// [default: 8k,64k,128k; simulator: 16k; with --request-rate / --rate-search: none unless
    /// given].
    #[arg(help_heading = "Prefill", long, allow_hyphen_values = true)]
    pub prefill_contexts: Option<String>,
    /// Repeated cold prefill samples per context before decode (median reported).
    #[arg(help_heading = "Prefill", long)]
    pub standalone_prefill: bool,
    /// Run the standalone prefill profile, then stop (no decode).
    #[arg(help_heading = "Prefill", long, conflicts_with = "skip_prefill")]
    pub prefill_only: bool,
    /// Sampling time per standalone prefill context, s (at least one sample is always taken).
    #[arg(
        help_heading = "Prefill",
        long,
        default_value_t = 10.0,
        allow_negative_numbers = true
    )]
    pub prefill_duration: f64,
    /// Prefill headline: client (prompt_tokens / TTFT), auto (client plus Prometheus validation), prometheus (server counters).
    #[arg(help_heading = "Prefill", long, value_enum, default_value_t = PrefillMetricArg::Client)]
    pub prefill_metric: PrefillMetricArg,
    /// Request-count mode: N measured requests per cell replace the sustained window (Burst / E2E as the primary layer).
    #[arg(
        help_heading = "Request-count and Burst / E2E layers",
        long,
        default_value_t = 0
    )]
    pub request_count: u64,
    /// Discarded requests before each request-count cell (needs --request-count).
    #[arg(
        help_heading = "Request-count and Burst / E2E layers",
        long,
        default_value_t = 0,
        requires = "request_count"
    )]
    pub warmup_request_count: u64,
    /// After the sustained matrix, run a Burst / E2E matrix (finite batches, final usage only).
    /// Not with --request-count, whose cells already are that layer.
    #[arg(
        help_heading = "Request-count and Burst / E2E layers",
        long,
        conflicts_with = "request_count"
    )]
    pub run_burst: bool,
    /// Measured requests per burst cell (0 = max(C, C × --burst-requests-per-concurrency)).
    #[arg(
        help_heading = "Request-count and Burst / E2E layers",
        long,
        default_value_t = 0
    )]
    pub burst_request_count: u64,
    /// Discarded warmup requests per burst cell (0 = C).
    #[arg(
        help_heading = "Request-count and Burst / E2E layers",
        long,
        default_value_t = 0
    )]
    pub burst_warmup_request_count: u64,
    /// Multiplier for the automatic burst size (≥ 1).
    #[arg(
        help_heading = "Request-count and Burst / E2E layers",
        long,
        default_value_t = 5
    )]
    pub burst_requests_per_concurrency: u64,
    /// Wall-clock deadline of each request-count or Burst / E2E cell's batches (warmup and
    /// measured), s; 0 = none. At the deadline the requests in flight are cut and the cell is
    /// invalid (`batch_timeout`).
    #[arg(
        help_heading = "Request-count and Burst / E2E layers",
        long,
        value_name = "SECONDS",
        default_value_t = servebench_core::run::DEFAULT_BATCH_TIMEOUT_S,
        allow_negative_numbers = true
    )]
    pub batch_timeout: f64,
    /// Hardware monitor period, s: GPU (NVML, else nvidia-smi) and CPU samples for the per-cell
    /// hardware_summary, the run's hardware_run_summary and energy per output token.
    #[arg(
        help_heading = "Hardware monitor",
        long,
        default_value_t = 1.0,
        allow_negative_numbers = true
    )]
    pub hw_monitor_interval: f64,
    /// Do not run the hardware monitor (hardware_summary stays {}).
    #[arg(help_heading = "Hardware monitor", long)]
    pub no_hw_monitor: bool,
    /// Where GPU samples come from: NVML (loaded at run time), else nvidia-smi.
    #[arg(help_heading = "Hardware monitor", long, value_enum, default_value_t = HwSourceArg::Auto)]
    pub hw_monitor_source: HwSourceArg,
    /// Prompt-cache state to measure: cold (a unique prefix per request) or shared (one prompt per
    /// cell). Default: cold for request-count and Burst / E2E cells, shared for the sustained
    /// matrix. Each cell records the state the server reported as `cache_state`.
    #[arg(help_heading = "Prompts", long, value_enum)]
    pub prompt_cache: Option<PromptCacheArg>,
    /// Results JSON path, rewritten atomically after every finished cell and prefill row. A file
    /// already there is kept: renamed to NAME.1.json (or the next free number) before the run
    /// starts [default: benchmark_results.json; with --resume: the resumed FILE, updated in place
    /// after a copy of it is kept the same way].
    #[arg(help_heading = "Output and resume", long, short)]
    pub output: Option<PathBuf>,
    /// Resume the run whose results are in FILE: run only its missing and failed cells
    /// (error, invalid, not run) and prefill rows, keep the others unchanged. The target, model
    /// and matrix settings must match the file's (give the same flags); the model defaults to
    /// the file's.
    #[arg(help_heading = "Output and resume", long, value_name = "FILE")]
    pub resume: Option<PathBuf>,
    /// Also write the results as CSV (one row per cell; columns in docs/exports.md).
    #[arg(help_heading = "Output and resume", long, value_name = "FILE")]
    pub export_csv: Option<PathBuf>,
    /// Also write the report as Markdown tables.
    #[arg(help_heading = "Output and resume", long, value_name = "FILE")]
    pub export_md: Option<PathBuf>,
    /// Also write one JSON line per measured request (cell / row keys, send times, every token
    /// event's arrival and tokens, usage, finish reason, error kind), as each request ends
    /// (format in docs/exports.md). Scouts and warmups are not exported.
    #[arg(help_heading = "Output and resume", long, value_name = "FILE.jsonl")]
    pub export_requests: Option<PathBuf>,
    /// Also write a self-contained HTML report with plots (readable offline).
    #[arg(help_heading = "Output and resume", long, value_name = "FILE")]
    pub export_html: Option<PathBuf>,
    /// Percentiles of TTFT and ITL shown in the report tables, comma-separated (0-100), e.g.
    /// 50,90,99.
    #[arg(help_heading = "Output and resume", long, default_value = "50")]
    pub percentiles: String,
    /// Only the final report (no progress lines on stderr).
    #[arg(help_heading = "Output and resume", long, short)]
    pub quiet: bool,
    /// Live view: screen, inline or plain [default: screen when stdout is a terminal, else
    /// plain; always plain with -q or when the CI environment variable is set].
    #[arg(help_heading = "Output and resume", long, value_enum)]
    pub display: Option<DisplayArg>,
    #[command(flatten)]
    pub faults: crate::fault_args::FaultArgs,
    #[command(flatten)]
    pub rate: crate::rate_args::RateArgs,
}

/// Results path of `servebench run` without `-o` or `--resume`.
pub const DEFAULT_OUTPUT: &str = "benchmark_results.json";

fn positive_secs(name: &str, v: f64) -> anyhow::Result<Duration> {
    if !v.is_finite() || !(0.0..=86_400.0).contains(&v) {
        usage_bail!("--{name} must be between 0 and 86400 seconds (got {v})");
    }
    Ok(Duration::from_secs_f64(v))
}

impl RunArgs {
    /// Host-evidence settings: the hardware monitor per `--hw-monitor-*` / `--no-hw-monitor`,
    /// and the client's command line for `startup_diagnostics` (redacted there).
    pub fn host_options(&self) -> anyhow::Result<servebench_core::HostOptions> {
        let interval =
            servebench_core::host::monitor_interval(self.hw_monitor_interval).map_err(|e| {
                usage(anyhow!(
                    "--hw-monitor-interval {e}; use --no-hw-monitor to disable it"
                ))
            })?;
        Ok(servebench_core::HostOptions {
            monitor: (!self.no_hw_monitor).then(|| servebench_host::MonitorConfig {
                interval,
                backend: match self.hw_monitor_source {
                    HwSourceArg::Auto => servebench_host::GpuBackend::Auto,
                    HwSourceArg::Nvml => servebench_host::GpuBackend::Nvml,
                    HwSourceArg::NvidiaSmi => servebench_host::GpuBackend::NvidiaSmi,
                },
                ..Default::default()
            }),
            command_line: std::env::args().collect(),
            ..Default::default()
        })
    }

    /// The prefill layer's settings. `open_loop`: open-loop rows measure latency under a rate,
    /// so the prefill layer (minutes at long contexts) runs there only when asked for with
    /// --prefill-contexts / --standalone-prefill.
    fn prefill_config(
        &self,
        contexts: Vec<u64>,
        open_loop: bool,
    ) -> anyhow::Result<servebench_core::run::PrefillConfig> {
        Ok(servebench_core::run::PrefillConfig {
            contexts,
            standalone: self.standalone_prefill || self.prefill_only,
            only: self.prefill_only,
            skip: self.skip_prefill
                || (open_loop && self.prefill_contexts.is_none() && !self.standalone_prefill),
            duration: positive_secs("prefill-duration", self.prefill_duration)?,
            metric: match self.prefill_metric {
                PrefillMetricArg::Client => servebench_core::prefill::PrefillMetric::Client,
                PrefillMetricArg::Auto => servebench_core::prefill::PrefillMetric::Auto,
                PrefillMetricArg::Prometheus => servebench_core::prefill::PrefillMetric::Prometheus,
            },
        })
    }

    /// Builds the run configuration; starts the embedded simulator when no target was given.
    pub fn to_config(&self) -> anyhow::Result<(RunConfig, Option<Sim>)> {
        let endpoint = self.target.endpoint();
        let embedded = self.target.is_embedded();

        let concurrency = parse_concurrency(self.concurrency.as_deref().unwrap_or(if embedded {
            "1,8,64"
        } else {
            "1,2,4,8,16,32,64,128"
        }))
        .context("--concurrency")
        .map_err(usage)?;
        let contexts = parse_contexts(self.contexts.as_deref().unwrap_or(if embedded {
            "0,8k"
        } else {
            "0,16k,32k,64k,128k"
        }))
        .context("--contexts")
        .map_err(usage)?;
        let duration = self.duration.unwrap_or(if embedded { 5.0 } else { 30.0 });
        if !(duration.is_finite() && duration > 0.0 && duration <= 86_400.0) {
            usage_bail!("--duration must be > 0 and ≤ 86400 seconds (got {duration})");
        }
        if self.max_tokens == 0 {
            usage_bail!("--max-tokens must be ≥ 1");
        }
        if let Some(t) = self.temperature {
            if !(t.is_finite() && t >= 0.0) {
                usage_bail!("--temperature must be ≥ 0 (got {t})");
            }
        }
        let stable = positive_secs("stable-seconds", self.stable_seconds)?;
        if !(self.batch_timeout.is_finite() && (0.0..=604_800.0).contains(&self.batch_timeout)) {
            usage_bail!(
                "--batch-timeout must be between 0 (none) and 604800 s (got {})",
                self.batch_timeout
            );
        }
        if self.burst_requests_per_concurrency == 0 {
            usage_bail!("--burst-requests-per-concurrency must be ≥ 1");
        }
        let prefill_contexts =
            parse_contexts(self.prefill_contexts.as_deref().unwrap_or(if embedded {
                "16k"
            } else {
                "8k,64k,128k"
            }))
            .context("--prefill-contexts")
            .map_err(usage)?;
        let calibration_context = servebench_core::plan::parse_context(&self.calibration_context)
            .context("--calibration-context")
            .map_err(usage)?;

        let policy = self.faults.to_policy()?;
        let open_loop = self.rate.to_config(duration)?;
        if open_loop.is_some() {
            crate::rate_args::check_exclusive(self, duration)?;
        }
        // The embedded simulator impersonates vLLM, so the first run shows the server-side
        // evidence a real server gives: /metrics, the KV budget, readiness and validation.
        let (target, sim) = self.target.resolve(|| SimConfig {
            personality: servebench_sim::Personality::Vllm,
            ..SimConfig::default()
        })?;

        let args_snapshot = json!({
            "concurrency": concurrency,
            "contexts": contexts,
            "max_tokens": self.max_tokens,
            "duration": duration,
            "endpoint": endpoint.as_str(),
            "ignore_eos": !self.respect_eos,
            "temperature": self.temperature,
            "decode_warmup_seconds": self.decode_warmup_seconds,
            "cell_warmup_timeout_seconds": self.cell_warmup_timeout_seconds,
            "stable_seconds": self.stable_seconds,
            "kv_budget": self.kv_budget,
            "dcp_size": self.dcp_size,
            "seed": self.seed,
            "token_targeting": format!("{:?}", self.token_targeting).to_lowercase(),
            "skip_prefill": self.skip_prefill,
            "prefill_contexts": prefill_contexts,
            "standalone_prefill": self.standalone_prefill,
            "prefill_only": self.prefill_only,
            "prefill_metric": format!("{:?}", self.prefill_metric).to_lowercase(),
            "prefill_duration": self.prefill_duration,
            "request_count": self.request_count,
            "run_burst": self.run_burst,
            "batch_timeout": self.batch_timeout,
            "hw_monitor_interval": self.hw_monitor_interval,
            "no_hw_monitor": self.no_hw_monitor,
            "prompt_cache": self.prompt_cache.map(|p| format!("{p:?}").to_lowercase()),
            "embedded_simulator": sim.is_some(),
            "timeouts": self.faults.snapshot(),
            "open_loop": self.rate.snapshot(),
        });
        let cfg = RunConfig {
            target,
            model: self.target.model.clone(),
            concurrency,
            contexts,
            duration: Duration::from_secs_f64(duration),
            max_tokens: self.max_tokens,
            ignore_eos: !self.respect_eos,
            temperature: self.temperature,
            decode_warmup: positive_secs("decode-warmup-seconds", self.decode_warmup_seconds)?,
            cell_timeout: match positive_secs(
                "cell-warmup-timeout-seconds",
                self.cell_warmup_timeout_seconds,
            )? {
                d if d.is_zero() => None,
                d => Some(d),
            },
            stable_window: stable,
            cell_pause: positive_secs("cell-pause-seconds", self.cell_pause_seconds)?,
            kv_budget: self.kv_budget,
            dcp_size: self.dcp_size,
            show_capacity_limited_values: self.show_capacity_limited_values,
            seed: self.seed,
            targeting: match self.token_targeting {
                TargetingArg::Auto => TargetingMode::Auto,
                TargetingArg::Exact => TargetingMode::Exact,
                TargetingArg::Estimate => TargetingMode::Estimate,
            },
            calibration_context,
            calibration_cache: if self.no_calibration_cache {
                CalibrationCache::at(None)
            } else {
                CalibrationCache::user_default()
            },
            prefill: self.prefill_config(prefill_contexts.clone(), open_loop.is_some())?,
            burst: servebench_core::run::BurstConfig {
                request_count: self.request_count,
                warmup_request_count: self.warmup_request_count,
                run_burst: self.run_burst,
                burst_request_count: self.burst_request_count,
                burst_warmup_request_count: self.burst_warmup_request_count,
                burst_requests_per_concurrency: self.burst_requests_per_concurrency,
                batch_timeout: (self.batch_timeout > 0.0)
                    .then(|| std::time::Duration::from_secs_f64(self.batch_timeout)),
                prompt_cache: self.prompt_cache.map(|p| match p {
                    PromptCacheArg::Cold => servebench_core::cache::PromptCache::Cold,
                    PromptCacheArg::Shared => servebench_core::cache::PromptCache::Shared,
                }),
            },
            args_snapshot,
            policy,
            open_loop,
            export: None,
        };
        Ok((cfg, sim))
    }
}

/// The flag of a task setting (core's errors name the setting, the CLI its flag).
pub fn task_flag(s: servebench_core::task::TaskSetting) -> &'static str {
    use servebench_core::task::TaskSetting as S;
    match s {
        S::Concurrency => "--concurrency",
        S::Runs => "--runs",
        S::MinResults => "--min-results",
        S::ProbeWaves => "--probe-waves",
        S::MinImprovement => "--min-improvement",
        S::Patience => "--patience",
        S::CorrectRegex => "--correct-regex",
    }
}

/// A task setting error worded with the setting's flag (`--runs must be ≥ 1`).
pub fn setting_error(e: &servebench_core::task::SettingError) -> anyhow::Error {
    usage(anyhow::anyhow!("{} {}", task_flag(e.setting), e.problem))
}

/// What a startup hint asks of the user, with the CLI's flags.
pub fn hint_words(h: servebench_core::probe::Hint) -> &'static str {
    use servebench_core::probe::Hint as H;
    match h {
        H::ApiKey => "pass --api-key",
        H::Address => "is it running, and are --url/--host/--port right?",
        H::UrlPath => "check --url and its path",
        H::KvBudget => "use --kv-budget",
    }
}

/// A failed startup probe in one line, its hint worded with the CLI's flags.
pub fn probe_error(e: &servebench_core::probe::ProbeError) -> anyhow::Error {
    match e.hint {
        Some(h) => anyhow::anyhow!("{}; {}", e.message, hint_words(h)),
        None => anyhow::anyhow!("{}", e.message),
    }
}

/// A refused target, worded with the flag its value came from (`--url` or `--host`).
pub fn target_message(e: &TargetError, flag: &str) -> String {
    match e {
        TargetError::Scheme { url } => {
            format!("{flag} {url:?} must start with http:// or https://")
        }
        TargetError::NoHost { url } => format!("{flag} {url:?} has no host"),
        TargetError::InvalidHost { url, host } => {
            format!("{flag} {url:?} has an invalid host {host:?}")
        }
        TargetError::Port { url, port } => {
            format!("{flag} {url:?} has an invalid port {port:?}")
        }
        TargetError::Credentials { url } => format!(
            "{flag} {url:?} contains credentials (user:password@); pass the key with --api-key or SERVEBENCH_API_KEY instead"
        ),
        TargetError::QueryOrFragment { url } => format!(
            "{flag} {url:?} is followed by a query string or fragment (not shown); give the base URL only, and the key with --api-key or SERVEBENCH_API_KEY"
        ),
        TargetError::EmptyHost => format!("{flag} is empty"),
        TargetError::HostWithPath { host } => {
            format!("{flag} {host:?} contains a path; use --url for URLs with paths")
        }
    }
}

/// The flag of a setting a resume compares ([`servebench_core::resume::Setting`]).
pub fn setting_flag(s: servebench_core::resume::Setting) -> &'static str {
    use servebench_core::resume::Setting as S;
    match s {
        S::Endpoint => "--endpoint",
        S::Concurrency => "--concurrency",
        S::Contexts => "--contexts",
        S::Duration => "--duration",
        S::MaxTokens => "--max-tokens",
        S::IgnoreEos => "--respect-eos (ignore_eos)",
        S::Temperature => "--temperature",
        S::StableWindow => "--stable-seconds",
        S::RequestCount => "--request-count",
        S::WarmupRequestCount => "--warmup-request-count",
        S::RunBurst => "--run-burst",
        S::BurstRequestCount => "--burst-request-count",
        S::BurstWarmupRequestCount => "--burst-warmup-request-count",
        S::BurstRequestsPerConcurrency => "--burst-requests-per-concurrency",
        S::DcpSize => "--dcp-size",
        S::SkipPrefill => "--skip-prefill",
        S::StandalonePrefill => "--standalone-prefill",
        S::PrefillOnly => "--prefill-only",
        S::PrefillContexts => "--prefill-contexts",
        S::PrefillMetric => "--prefill-metric",
        S::KvBudget => "--kv-budget",
        S::TokenTargeting => "--token-targeting",
        S::PrefillDuration => "--prefill-duration",
        S::OpenLoop => {
            "--request-rate (or another open-loop flag: --arrival, --burstiness, --max-concurrency, --slo, --rate-search*)"
        }
        S::Model => "--model",
    }
}

/// A refused resume, worded with the flag that differs.
pub fn resume_mismatch_message(e: &servebench_core::resume::ResumeMismatch) -> String {
    use servebench_core::resume::{ResumeMismatch, Setting};
    match e {
        ResumeMismatch::Target { .. } => e.to_string(),
        ResumeMismatch::Setting {
            setting: Setting::Model,
            file,
            run,
        } => format!("--model differs: the file has {file}, this run {run}"),
        ResumeMismatch::Setting {
            setting: Setting::OpenLoop,
            file,
            run,
        } => open_loop_mismatch(file, run),
        ResumeMismatch::Setting { setting, file, run } => format!(
            "{} differs: the file has {file}, this run {run} (give the same flags as the run being resumed)",
            setting_flag(*setting)
        ),
    }
}

/// A refused resume over the open-loop flags (`file` and `run` are the recorded
/// `startup_diagnostics.args.open_loop` objects as JSON, or `unset`): names the first flag that
/// differs with both values, or which of the two runs is open-loop.
fn open_loop_mismatch(file: &str, run: &str) -> String {
    use serde_json::Value;
    let parse = |s: &str| {
        serde_json::from_str::<Value>(s)
            .ok()
            .and_then(|v| v.as_object().cloned())
    };
    let show = |v: Option<&Value>| match v {
        None | Some(Value::Null) => "unset".to_string(),
        Some(Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
    };
    match (parse(file), parse(run)) {
        (Some(a), Some(b)) => {
            let key = a
                .keys()
                .chain(b.keys())
                .find(|k| a.get(*k) != b.get(*k))
                .cloned()
                .unwrap_or_default();
            format!(
                "--{} differs: the file has {}, this run {} (give the same flags as the run being resumed)",
                key.replace('_', "-"),
                show(a.get(&key)),
                show(b.get(&key))
            )
        }
        (None, Some(_)) => "the file is a concurrency-matrix run and this run is open-loop (--request-rate / --rate-search): resume it without the open-loop flags, or write a new file".to_string(),
        (Some(_), None) => "the file is an open-loop run (--request-rate / --rate-search) and this run is not: give the same open-loop flags as the run being resumed".to_string(),
        (None, None) => format!(
            "{} differs: the file has {file}, this run {run} (give the same flags as the run being resumed)",
            setting_flag(servebench_core::resume::Setting::OpenLoop)
        ),
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;

    /// A resume refused over the open-loop flags names the flag and both values, not the two
    /// recorded objects.
    #[test]
    fn open_loop_resume_mismatch_names_the_flag() {
        use servebench_core::resume::{ResumeMismatch, Setting};
        let obj = |arrival: &str, rates: &str| {
            serde_json::json!({"request_rate": rates, "arrival": arrival, "burstiness": null, "slo": null})
                .to_string()
        };
        let msg = |file: String, run: String| {
            super::resume_mismatch_message(&ResumeMismatch::Setting {
                setting: Setting::OpenLoop,
                file,
                run,
            })
        };
        assert_eq!(
            msg(obj("poisson", "5,10"), obj("constant", "5,10")),
            "--arrival differs: the file has poisson, this run constant (give the same flags as the run being resumed)"
        );
        assert!(msg(obj("poisson", "5,10"), obj("poisson", "5,20"))
            .starts_with("--request-rate differs: the file has 5,10, this run 5,20"));
        assert!(msg("unset".into(), obj("poisson", "5"))
            .starts_with("the file is a concurrency-matrix run and this run is open-loop"));
        assert!(
            msg(obj("poisson", "5"), "unset".into()).starts_with("the file is an open-loop run")
        );
        let m = msg(obj("poisson", "5,10"), obj("constant", "5,10"));
        assert!(!m.contains('{'), "no JSON in {m}");
    }

    /// Every setting a resume compares is named by a flag `servebench run` has.
    #[test]
    fn every_resume_setting_has_a_run_flag() {
        let cmd = super::Cli::command();
        let run = cmd.find_subcommand("run").expect("run subcommand");
        for s in servebench_core::resume::Setting::ALL {
            let flag = super::setting_flag(s);
            let long = flag
                .trim_start_matches("--")
                .split(' ')
                .next()
                .unwrap_or_default();
            assert!(
                run.get_arguments().any(|a| a.get_long() == Some(long)),
                "{s:?}: servebench run has no {flag}"
            );
        }
    }

    /// A refused target names the flag its value came from, and the value.
    #[test]
    fn target_errors_name_the_flag_they_came_from() {
        use servebench_client::{Endpoint, Target};
        let e = Target::from_url("ftp://h", None, Endpoint::Chat).unwrap_err();
        assert_eq!(
            super::target_message(&e, "--url"),
            r#"--url "ftp://h" must start with http:// or https://"#
        );
        // a URL given as --host is worded with --host
        let e = Target::from_host_port("http://h:x", 1, None, Endpoint::Chat).unwrap_err();
        assert_eq!(
            super::target_message(&e, "--host"),
            r#"--host "http://h:x" has an invalid port "x""#
        );
        let e = Target::from_host_port(" ", 1, None, Endpoint::Chat).unwrap_err();
        assert_eq!(super::target_message(&e, "--host"), "--host is empty");
        let e = Target::from_host_port("h/x", 1, None, Endpoint::Chat).unwrap_err();
        assert!(super::target_message(&e, "--host").starts_with(r#"--host "h/x" contains a path"#));
    }
}
