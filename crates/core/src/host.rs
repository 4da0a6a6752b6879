//! Host evidence around a run (crate `servebench-host`): startup diagnostics, the NVIDIA P2P
//! check, the hardware monitor with a summary per measured window, the engine's launch, and the
//! secret filter applied to everything the run writes about the host.
//!
//! The monitor runs on its own thread; the runner only asks it for a summary after a cell has
//! finished, so sampling never touches the measurement path.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{Map, Value};
use servebench_host::diag::DiagInput;
use servebench_host::launch::LaunchQuery;
use servebench_host::{HwMonitor, MonitorConfig, P2pPaths, Scrubber};
use servebench_results::{CellResult, JsonObject};
use servebench_sse::RequestRecord;

use crate::events::EventSink;
use crate::run::config::RunConfig;

/// What the runner collects about the host (see [`crate::run::run_with_host`]).
#[derive(Clone, Debug)]
pub struct HostOptions {
    /// The hardware monitor (`None`: off, `hardware_summary` stays `{}`).
    pub monitor: Option<MonitorConfig>,
    /// Where the P2P check reads (`/proc/driver/nvidia/params`, `/etc/modprobe.d`).
    pub p2p: P2pPaths,
    /// Root of `/proc` and `/sys` (`/`; a fixture tree in tests).
    pub root: PathBuf,
    /// The client's command line (argv), written redacted to `startup_diagnostics.command_line`.
    pub command_line: Vec<String>,
    /// Look up the engine's launch when the target is on this host.
    pub engine_launch: bool,
}

impl Default for HostOptions {
    /// Diagnostics, P2P check and engine launch on; the hardware monitor off (the CLI turns it
    /// on unless the user turns it off).
    fn default() -> Self {
        HostOptions {
            monitor: None,
            p2p: P2pPaths::default(),
            root: "/".into(),
            command_line: Vec::new(),
            engine_launch: true,
        }
    }
}

/// The host side of one run.
pub struct HostRun {
    /// `startup_diagnostics` (secrets filtered).
    pub startup: JsonObject,
    /// `nvidia_p2p_override`.
    pub p2p: JsonObject,
    /// `engine_launch` (secrets filtered).
    pub launch: JsonObject,
    monitor: Option<HwMonitor>,
    scrubber: Scrubber,
}

impl HostRun {
    /// Collects the diagnostics, runs the P2P check and starts the monitor (blocking: helper
    /// programs run with timeouts; call it off the async threads). Logs one line per finding and
    /// at most one warning line when GPU telemetry is unavailable.
    pub fn start(cfg: &RunConfig, opts: &HostOptions, events: &EventSink) -> HostRun {
        let scrubber = Scrubber::from_env(cfg.target.api_key.clone());
        let p2p = servebench_host::p2p::check(&opts.p2p);
        let startup = servebench_host::diag::collect(
            &DiagInput {
                version: env!("CARGO_PKG_VERSION").into(),
                server_url: cfg.target.base_url.clone(),
                args: cfg.args_snapshot.clone(),
                command_line: opts.command_line.clone(),
                root: opts.root.clone(),
            },
            &p2p,
            &scrubber,
        );
        events.log(format!(
            "startup NVIDIA P2P override: {}",
            p2p.get("summary").and_then(Value::as_str).unwrap_or("")
        ));
        let monitor = opts.monitor.clone().map(HwMonitor::start);
        match &monitor {
            None => events.log("startup hardware monitor disabled"),
            Some(m) => match (m.source(), m.warning()) {
                (Some(src), _) => events.log(format!(
                    "startup hardware monitor: {src} every {:.1}s",
                    m.interval().as_secs_f64()
                )),
                (None, Some(w)) => events.log(format!("startup warning: {w}")),
                (None, None) => {}
            },
        }
        let launch = if opts.engine_launch {
            let host = cfg
                .target
                .base_url
                .split_once("://")
                .map(|(_, r)| r)
                .unwrap_or(&cfg.target.base_url)
                .split('/')
                .next()
                .unwrap_or("")
                .to_string();
            servebench_host::launch::discover(
                &LaunchQuery {
                    loopback: cfg.target.is_loopback(),
                    host,
                    port: cfg.target.port(),
                    root: opts.root.clone(),
                },
                &scrubber,
            )
        } else {
            let mut m = Map::new();
            m.insert("status".into(), "not_run".into());
            m.insert("reason".into(), "engine launch lookup disabled".into());
            m
        };
        let status = launch.get("status").and_then(Value::as_str).unwrap_or("");
        if status == "found" {
            events.log(format!(
                "startup engine launch: pid {} {}",
                launch.get("pid").cloned().unwrap_or(Value::Null),
                launch
                    .get("cmdline_text")
                    .and_then(Value::as_str)
                    .unwrap_or("")
            ));
        } else {
            events.log(format!(
                "startup engine launch: {status} ({})",
                launch.get("reason").and_then(Value::as_str).unwrap_or("")
            ));
        }
        HostRun {
            startup,
            p2p,
            launch,
            monitor,
            scrubber,
        }
    }

    /// `metadata.nvidia_p2p_override_effective`: null when the params were not readable.
    pub fn p2p_effective(&self) -> Option<bool> {
        if self.p2p.get("params_available") == Some(&Value::Bool(true)) {
            self.p2p.get("effective").and_then(Value::as_bool)
        } else {
            None
        }
    }

    /// Fills `r.hardware_summary` over the measured window `(start, end)` with energy per
    /// output token from `r.client_output_tokens` (sustained cells) or `r.total_tokens`.
    /// Logs one line with GPU utilisation, power and J/token (shown live and kept in the event
    /// log) when GPUs were sampled.
    pub fn attach(
        &self,
        r: &mut CellResult,
        window: Option<(Instant, Instant)>,
        events: &EventSink,
    ) {
        let (Some(m), Some((start, end))) = (&self.monitor, window) else {
            return;
        };
        let tokens = r.client_output_tokens.or(r.total_tokens);
        r.hardware_summary = m.summary(start, end, tokens);
        let h = &r.hardware_summary;
        if h.get("gpu_count").and_then(Value::as_u64).unwrap_or(0) > 0 {
            let f = |k: &str, d: usize| {
                h.get(k)
                    .and_then(Value::as_f64)
                    .map(|v| format!("{v:.d$}"))
                    .unwrap_or_else(|| "-".into())
            };
            events.log(format!(
                "hardware C={} ctx={}: GPU util {} % · power {} W · {} J/token · GPU temp max {} °C{}",
                r.concurrency,
                servebench_results::format_context(r.context_tokens),
                f("gpu_util_avg_pct", 0),
                f("power_total_avg_w", 1),
                f("energy_per_output_token_j", 4),
                f("temp_max_c", 0),
                match h.get("throttle_limiting_reasons").and_then(Value::as_array) {
                    Some(a) if !a.is_empty() => format!(
                        " · throttled: {}",
                        a.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(",")
                    ),
                    _ => String::new(),
                }
            ));
        }
    }

    /// [`HostRun::attach`] for request-count / burst cells: the window spans the measured
    /// requests (first sent → last ended).
    pub fn attach_records(
        &self,
        r: &mut CellResult,
        records: &[RequestRecord],
        events: &EventSink,
    ) {
        let start = records.iter().map(|x| x.sent_at).min();
        let end = records.iter().map(|x| x.end_at).max();
        if let (Some(s), Some(e)) = (start, end) {
            self.attach(r, Some((s, e)), events);
        }
    }

    /// Stops the monitor; returns `hardware_run_summary` (`{}` without a monitor).
    pub fn finish(&mut self) -> JsonObject {
        self.monitor
            .take()
            .map(HwMonitor::finish)
            .unwrap_or_default()
    }

    /// The event log with known secret values removed.
    pub fn scrub_lines(&self, lines: Vec<String>) -> Vec<String> {
        lines
            .into_iter()
            .map(|l| self.scrubber.scrub_str(&l))
            .collect()
    }
}

/// The hardware monitor's sampling interval from seconds: [`MIN_MONITOR_INTERVAL_S`] to 3600.
///
/// Errors: the bounds, with the value (the CLI names its flag).
pub fn monitor_interval(secs: f64) -> Result<Duration, String> {
    if secs.is_finite() && (MIN_MONITOR_INTERVAL_S..=3600.0).contains(&secs) {
        Ok(Duration::from_secs_f64(secs))
    } else {
        Err(format!(
            "must be between {MIN_MONITOR_INTERVAL_S} and 3600 seconds (got {secs:?})"
        ))
    }
}

/// Shortest hardware-monitor period, s: below it the sampler (an NVML or `nvidia-smi` read
/// per GPU, `/proc` reads) would spin and take the CPU the client measures with (break-it
/// round 8: 1e-300 s gave 40,470 samples in 3.5 s at 87 % of a core).
pub const MIN_MONITOR_INTERVAL_S: f64 = 0.05;
