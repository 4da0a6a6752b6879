//! `servebench selftest`: how much the client itself costs.
//!
//! Starts the simulator as a **separate process** (so this process's CPU time is the client's
//! alone), runs one sustained cell against it with many concurrent streams, and reports the
//! client's CPU per 10,000 tokens/s ingested and its resident memory over the run. The figures
//! go into `docs/performance.md`.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use clap::Args;
use servebench_client::{Endpoint, HttpClient, Target};
use servebench_core::cell::{run_sustained_cell, CellJob, CellSettings};
use servebench_core::plan::CellSpec;
use servebench_core::procstat::{process_cpu_seconds, resident_bytes};
use servebench_core::prompt::{build_input, streaming_payload, RequestOptions};
use servebench_core::EventSink;
use tokio_util::sync::CancellationToken;

/// Flags of `servebench selftest`.
#[derive(Debug, Args)]
pub struct SelftestArgs {
    /// Concurrent streams.
    #[arg(long, default_value_t = 1024)]
    pub concurrency: u64,
    /// Measured window, s.
    #[arg(long, default_value_t = 20.0)]
    pub duration: f64,
    /// max_tokens per request (requests restart when they end).
    #[arg(long, default_value_t = 2048)]
    pub max_tokens: u64,
    /// Tokens per SSE event sent by the simulator (1 = one token per event, the worst case).
    #[arg(long, default_value_t = 1)]
    pub tokens_per_chunk: u32,
    /// Simulator decode step, ms (sets the event rate: C / step events per second).
    #[arg(long, default_value_t = 60.0)]
    pub decode_base_ms: f64,
    /// Also measure the transport floor: the same streams read by a client that only reads the
    /// HTTP bodies (no SSE framing, decoding or accounting), for comparison.
    #[arg(long)]
    pub baseline: bool,
    /// Also write every request of the cell to this JSONL file, as `run --export-requests`
    /// does (to measure the export's cost in CPU and memory).
    #[arg(long, value_name = "FILE")]
    pub export_requests: Option<std::path::PathBuf>,
}

/// CPU per SSE event of a client that reads the same streams through servebench's HTTP/1.1
/// transport and throws the bytes away: the floor set by the kernel and the async runtime.
async fn transport_floor(
    client: &HttpClient,
    body: bytes::Bytes,
    c: u64,
    secs: f64,
) -> anyhow::Result<(f64, f64)> {
    use std::sync::atomic::{AtomicU64, Ordering};
    let ep = client
        .h1_endpoint()
        .context("plain-HTTP target expected")?
        .clone();
    let bytes_read = Arc::new(AtomicU64::new(0));
    let stop = CancellationToken::new();
    let mut tasks = Vec::new();
    for _ in 0..c {
        let (ep, body, stop, bytes_read) =
            (ep.clone(), body.clone(), stop.clone(), bytes_read.clone());
        tasks.push(tokio::spawn(async move {
            let mut buf = Vec::with_capacity(16 * 1024);
            while !stop.is_cancelled() {
                let Ok(conn) = servebench_client::h1::H1Conn::connect(&ep).await else {
                    return;
                };
                let Ok((mut s, _)) =
                    servebench_client::h1::start(&ep, conn, Endpoint::Chat.path(), &body, false)
                        .await
                else {
                    return;
                };
                loop {
                    buf.clear();
                    let r = tokio::select! {
                        _ = stop.cancelled() => return,
                        r = s.next(&mut buf) => r,
                    };
                    match r {
                        Ok(Some(_)) => {
                            bytes_read.fetch_add(buf.len() as u64, Ordering::Relaxed);
                        }
                        _ => break,
                    }
                }
            }
        }));
    }
    // Let every stream get going, then measure.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (b0, cpu0, t0) = (
        bytes_read.load(Ordering::Relaxed),
        process_cpu_seconds(),
        Instant::now(),
    );
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    let (b1, cpu1, dt) = (
        bytes_read.load(Ordering::Relaxed),
        process_cpu_seconds(),
        t0.elapsed().as_secs_f64(),
    );
    stop.cancel();
    for t in tasks {
        let _ = t.await;
    }
    let cpu = cpu1
        .zip(cpu0)
        .map(|(b, a)| (b - a) / dt)
        .unwrap_or(f64::NAN);
    Ok((cpu, (b1 - b0) as f64 / dt))
}

struct SimChild(Child);

impl Drop for SimChild {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> anyhow::Result<u16> {
    let l = TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

/// Runs the self-test and prints a report to stdout.
pub async fn run(a: SelftestArgs) -> anyhow::Result<()> {
    if a.concurrency == 0 || a.duration.is_nan() || a.duration <= 0.0 {
        bail!("--concurrency and --duration must be > 0");
    }
    let (_guard, client) = start_sim(&a).await?;
    let opts = RequestOptions {
        model: "servebench-sim".into(),
        endpoint: Endpoint::Chat,
        max_tokens: a.max_tokens,
        ignore_eos: true,
        temperature: None,
        continuous_usage: true,
    };
    let input = build_input(Endpoint::Chat, "[SELFTEST]", 0, false);
    let (settings, mut job) = cell_job(&a, streaming_payload(&opts, &input));
    let mut writer = None;
    if let Some(p) = &a.export_requests {
        crate::args::check_output_path(p, "--export-requests")?;
        let (tx, w) = crate::export_requests::start(p)?;
        job.export = Some(tx.sink(servebench_core::export::ExportKey {
            layer: "sustained",
            context_tokens: 0,
            concurrency: Some(a.concurrency),
            request_rate: None,
        }));
        writer = Some(w);
    }
    let rss_start = resident_bytes();
    let stop = CancellationToken::new();
    let rss_task = sample_rss(stop.clone());
    let events = Arc::new(EventSink::new(None));
    let cpu0 = process_cpu_seconds();
    let t0 = Instant::now();
    let out = run_sustained_cell(
        &client,
        &settings,
        job,
        &events,
        None,
        &CancellationToken::new(),
    )
    .await;
    let cpu_total = process_cpu_seconds().zip(cpu0).map(|(b, a)| b - a);
    let wall = t0.elapsed().as_secs_f64();
    stop.cancel();
    let rss = rss_task.await.unwrap_or_default();
    let r = &out.result;
    if r.status != servebench_results::CellStatus::Ok {
        bail!(
            "self-test cell failed: {} {}",
            r.status.as_str(),
            r.status_reason
        );
    }
    let events_in_window = print_cell_report(&a, r, cpu_total, wall);
    if a.baseline {
        // The simulator emits C events per decode step whoever reads them, so the event rate of
        // the measured cell applies to the floor run too.
        let body = streaming_payload(&opts, &input);
        let (cpu_floor, bytes_s) =
            transport_floor(&client, body, a.concurrency, a.duration.min(15.0)).await?;
        println!(
            "  transport floor (read only)  {:.1} % of one core, {:.2} MB/s ≈ {:.1} µs per event",
            cpu_floor * 100.0,
            bytes_s / 1e6,
            cpu_floor * 1e6 / events_in_window.max(1.0)
        );
    }
    print_rss(rss_start, &rss);
    if let Some(w) = writer {
        let n = w.finish(true)?;
        println!("  --export-requests: {n} request rows written");
    }
    Ok(())
}

/// Starts the simulator as a separate process on a free port (batch 2 × C, a flat decode step
/// of `--decode-base-ms`) and waits up to 20 s for its `/health`; the guard kills it on drop.
async fn start_sim(a: &SelftestArgs) -> anyhow::Result<(SimChild, HttpClient)> {
    let port = free_port()?;
    let exe = std::env::current_exe().context("cannot find the servebench executable")?;
    let child = Command::new(exe)
        .args([
            "sim",
            "--port",
            &port.to_string(),
            "--max-batch",
            &(a.concurrency * 2).to_string(),
            "--tokens-per-chunk",
            &a.tokens_per_chunk.to_string(),
            "--decode-base-ms",
            &a.decode_base_ms.to_string(),
            "--decode-per-seq-ms",
            "0",
            "--decode-per-kctx-ms",
            "0",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("cannot start the simulator process")?;
    let guard = SimChild(child);
    let url = format!("http://127.0.0.1:{port}");
    let target = Target::from_url(&url, None, Endpoint::Chat)?;
    let client = HttpClient::new(target)?;
    let deadline = Instant::now() + Duration::from_secs(20);
    while client
        .get_text("/health", Duration::from_secs(1))
        .await
        .is_err()
    {
        if Instant::now() > deadline {
            bail!("the simulator process did not start on {url}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok((guard, client))
}

/// The one sustained cell of the self-test: C streams, context 0, `--duration` seconds
/// measured (2 s stable window), requests restarting after `--max-tokens`.
fn cell_job(a: &SelftestArgs, decode_body: bytes::Bytes) -> (CellSettings, CellJob) {
    let settings = CellSettings {
        path: Endpoint::Chat.path(),
        duration: Duration::from_secs_f64(a.duration),
        stable_window: Duration::from_secs(2),
        max_tokens: a.max_tokens,
        ignore_eos: true,
    };
    let job = CellJob {
        spec: CellSpec {
            concurrency: a.concurrency,
            context: 0,
        },
        decode_body,
        scout_body: None,
        ready_timeout: Duration::from_secs(120),
        index: 1,
        total: 1,
        warmup: false,
        cold_run_id: None,
        export: None,
    };
    (settings, job)
}

/// Samples this process's resident memory once a second until `stop`: (seconds since start,
/// bytes).
fn sample_rss(stop: CancellationToken) -> tokio::task::JoinHandle<Vec<(f64, u64)>> {
    tokio::spawn(async move {
        let t0 = Instant::now();
        let mut samples: Vec<(f64, u64)> = Vec::new();
        loop {
            if let Some(r) = resident_bytes() {
                samples.push((t0.elapsed().as_secs_f64(), r));
            }
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
        }
        samples
    })
}

/// Prints the cell's figures: window (s), ingest rate (tok/s, events/s), client CPU (% of one
/// core, per 10k tok/s, µs per event), whole-cell CPU (`cpu_total` s over `wall` s), tick lag
/// and read delay (ms). Returns the SSE events per second in the window.
fn print_cell_report(
    a: &SelftestArgs,
    r: &servebench_results::CellResult,
    cpu_total: Option<f64>,
    wall: f64,
) -> f64 {
    let tps = r.aggregate_tps.unwrap_or(0.0);
    let events_in_window =
        r.client_token_events.unwrap_or(0) as f64 / r.measurement_seconds.unwrap_or(1.0);
    let cpu = r.client_cpu_util.unwrap_or(f64::NAN);
    println!("servebench selftest (client in this process, simulator in a separate process)");
    println!("  streams (C)                  {}", a.concurrency);
    println!("  tokens per SSE event         {}", a.tokens_per_chunk);
    println!(
        "  window                       {:.1} s",
        r.measurement_seconds.unwrap_or(0.0)
    );
    println!("  ingested                     {tps:.0} tok/s, {events_in_window:.0} events/s");
    println!(
        "  client CPU in the window     {:.1} % of one core",
        cpu * 100.0
    );
    if tps > 0.0 {
        println!(
            "  client CPU per 10k tok/s     {:.1} % of one core",
            cpu * 100.0 * 10_000.0 / tps
        );
        println!(
            "  client CPU per event         {:.1} µs",
            cpu * 1e6 / events_in_window.max(1.0)
        );
    }
    if let Some(c) = cpu_total {
        println!("  client CPU, whole cell       {c:.2} s over {wall:.1} s (ramp-up included)");
    }
    println!(
        "  worst monitor tick lag       {:.1} ms",
        r.client_max_tick_lag_ms.unwrap_or(0.0)
    );
    println!("  requests in window           {}", r.request_count);
    if let (Some(avg), Some(max)) = (r.client_read_delay_avg_ms, r.client_read_delay_max_ms) {
        println!(
            "  kernel → client read delay   avg {avg:.2} ms, max {max:.2} ms (timing uses kernel arrival times)"
        );
    }
    events_in_window
}

/// Prints resident memory (MiB): at the start (`rss_start` bytes, else the first sample),
/// after ramp-up (the 5th sample), at the end and the max, and about ten samples over time.
fn print_rss(rss_start: Option<u64>, rss: &[(f64, u64)]) {
    let mb = |b: u64| b as f64 / (1024.0 * 1024.0);
    if let (Some(first), Some(last)) = (rss.first(), rss.last()) {
        let max = rss.iter().map(|s| s.1).max().unwrap_or(0);
        println!(
            "  resident memory              start {:.1} MiB, after ramp-up {:.1} MiB, end {:.1} MiB, max {:.1} MiB",
            mb(rss_start.unwrap_or(first.1)),
            mb(rss.get(rss.len().min(5).saturating_sub(1)).map(|s| s.1).unwrap_or(first.1)),
            mb(last.1),
            mb(max)
        );
        let series: Vec<String> = rss
            .iter()
            .step_by((rss.len() / 10).max(1))
            .map(|(t, b)| format!("{t:.0}s:{:.1}", mb(*b)))
            .collect();
        println!("  RSS over time (MiB)          {}", series.join(" "));
    }
}
