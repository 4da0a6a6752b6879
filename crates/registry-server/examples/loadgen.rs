//! Load test of the registry server: generates a registry (10,000 records by default), times
//! its load, serves it on 127.0.0.1 and drives list queries at a fixed open-loop rate over
//! keep-alive HTTP/1.1 connections (hyper client), then prints the latency percentiles.
//!
//! Latency is measured from each request's *scheduled* send time, so a server (or client) that
//! falls behind is charged for the queueing it causes (no coordinated omission).
//!
//! ```sh
//! cargo run -p servebench-registry-server --example loadgen -- \
//!     [--records 10000] [--rate 5000] [--seconds 10] [--connections 32]
//! ```
//! Bounded: at most 60 s and 1,000,000 requests; loopback only.
//!
//! `--generate DIR` only writes the registry into DIR (for `scripts/bench-registry-vs-nginx.sh`);
//! `--target HOST:PORT` drives an already running server instead of one started here, with
//! `--path P` (repeatable) instead of the list queries.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Empty};
use servebench_registry_server::testgen::{generate, GenCounts};
use servebench_registry_server::{load, start, ServeOptions};

/// The list queries, sent round-robin.
const QUERIES: [&str; 8] = [
    "/api/v1/recipes",
    "/api/v1/recipes?status=validated&engine=vllm",
    "/api/v1/recipes?vendor=nvidia&min_vram_gb=24&chat=true&limit=50",
    "/api/v1/recipes?q=sglang%20validated&sort_by=model",
    "/api/v1/hardware?vendor=amd",
    "/api/v1/models?family=genfam3",
    "/api/v1/model-instances?precision=fp8&offset=50",
    "/api/v1/speed-sweeps?recipe_id=gen-recipe-7",
];

struct Args {
    generate: Option<std::path::PathBuf>,
    target: Option<std::net::SocketAddr>,
    paths: Vec<String>,
    records: usize,
    rate: f64,
    seconds: f64,
    connections: usize,
}

fn args() -> Args {
    let mut a = Args {
        generate: None,
        target: None,
        paths: Vec::new(),
        records: 10_000,
        rate: 5000.0,
        seconds: 10.0,
        connections: 32,
    };
    let v: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i + 1 < v.len() {
        let x = &v[i + 1];
        match v[i].as_str() {
            "--records" => a.records = x.parse().expect("--records N"),
            "--rate" => a.rate = x.parse().expect("--rate R"),
            "--seconds" => a.seconds = x.parse().expect("--seconds S"),
            "--connections" => a.connections = x.parse().expect("--connections N"),
            "--generate" => a.generate = Some(x.into()),
            "--target" => a.target = Some(x.parse().expect("--target HOST:PORT")),
            "--path" => a.paths.push(x.clone()),
            other => panic!("unknown flag {other}"),
        }
        i += 2;
    }
    a.seconds = a.seconds.clamp(1.0, 60.0);
    a.rate = a.rate.clamp(1.0, 1_000_000.0 / a.seconds);
    a.connections = a.connections.clamp(1, 512);
    a
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// CPU time (user + system, all threads) this process has used, in seconds, from
/// `/proc/self/stat` (clock ticks, usually 10 ms): unlike wall time, it does not grow when
/// other processes take the cores.
fn cpu_s() -> f64 {
    let Ok(s) = std::fs::read_to_string("/proc/self/stat") else {
        return f64::NAN;
    };
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = s.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let tick = |i: usize| {
        f.get(i)
            .and_then(|x| x.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    (tick(11) + tick(12)) / 100.0
}

/// One connection's open-loop schedule: requests `k*conns + c` at `start + (k*conns+c)/rate`.
async fn connection(
    paths: std::sync::Arc<Vec<String>>,
    addr: std::net::SocketAddr,
    c: usize,
    conns: usize,
    rate: f64,
    start: Instant,
    (warmup, end): (Duration, Duration),
) -> (Vec<u32>, u64) {
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    stream.set_nodelay(true).ok();
    let (mut sender, conn) = hyper::client::conn::http1::handshake::<_, Empty<Bytes>>(
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .expect("handshake");
    tokio::spawn(conn);
    let mut lat_us = Vec::new();
    let mut errors = 0u64;
    let mut k = 0usize;
    loop {
        let n = k * conns + c;
        let at = Duration::from_secs_f64(n as f64 / rate);
        if at >= end {
            break;
        }
        k += 1;
        let due = start + at;
        tokio::time::sleep_until(due.into()).await;
        let req = hyper::Request::get(paths[n % paths.len()].as_str())
            .header(hyper::header::HOST, addr.to_string())
            .body(Empty::new())
            .expect("request");
        let ok = match sender.send_request(req).await {
            Ok(r) => {
                let status = r.status();
                r.into_body().collect().await.is_ok() && status == 200
            }
            Err(_) => false,
        };
        if at < warmup {
            continue;
        }
        if ok {
            lat_us.push(due.elapsed().as_micros().min(u32::MAX as u128) as u32);
        } else {
            errors += 1;
        }
    }
    (lat_us, errors)
}

fn main() {
    let mut a = args();
    if let Some(d) = &a.generate {
        let counts = GenCounts::about(a.records);
        generate(d, counts).expect("generate");
        println!("generated {} records in {}", counts.total(), d.display());
        return;
    }
    if a.paths.is_empty() {
        a.paths = QUERIES.iter().map(|q| q.to_string()).collect();
    }
    let paths = std::sync::Arc::new(std::mem::take(&mut a.paths));
    if let Some(addr) = a.target {
        drive(&a, paths, addr);
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let counts = GenCounts::about(a.records);
    generate(dir.path(), counts).expect("generate");
    let c0 = cpu_s();
    let first = load(dir.path()).expect("load");
    let c1 = cpu_s();
    let second = load(dir.path()).expect("load");
    let c2 = cpu_s();
    println!(
        "registry: {} records ({} hardware, {} models, {} instances, {} recipes, {} sweeps)",
        counts.total(),
        counts.hardware,
        counts.models,
        counts.instances,
        counts.recipes,
        counts.sweeps
    );
    println!(
        "load: {:.0} ms (first), {:.0} ms (second) wall; CPU time {:.0} ms, {:.0} ms (both threads); loadavg {}",
        first.loaded_in.as_secs_f64() * 1e3,
        second.loaded_in.as_secs_f64() * 1e3,
        (c1 - c0) * 1e3,
        (c2 - c1) * 1e3,
        loadavg()
    );
    drop(first);
    if std::env::var_os("LOADGEN_PROFILE").is_some() {
        // Server-side cost per query, one request at a time, no network.
        let state = servebench_registry_server::AppState::new(second, "127.0.0.1:1");
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("rt");
        for q in QUERIES {
            let mut best = f64::INFINITY;
            let t0 = Instant::now();
            for _ in 0..50 {
                let t = Instant::now();
                let req = hyper::Request::get(q)
                    .body(axum::body::Body::empty())
                    .expect("req");
                let r = rt.block_on(tower::ServiceExt::oneshot(
                    servebench_registry_server::router(state.clone()),
                    req,
                ));
                let _ = rt.block_on(r.expect("resp").into_body().collect());
                best = best.min(t.elapsed().as_secs_f64());
            }
            println!(
                "{q}: mean {:.3} ms, best {:.3} ms",
                t0.elapsed().as_secs_f64() * 1e3 / 50.0,
                best * 1e3
            );
        }
        return;
    }
    drop(second);

    let server_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("server runtime");
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let running = server_rt
        .block_on(start(
            ServeOptions {
                port: 0,
                ..ServeOptions::new(dir.path())
            },
            async {
                let _ = rx.await;
            },
        ))
        .expect("start");
    drive(&a, paths, running.addr);
    let _ = tx.send(());
    let _ = server_rt.block_on(running.task);
}

/// The open-loop load test against `addr`, printed.
fn drive(a: &Args, paths: std::sync::Arc<Vec<String>>, addr: std::net::SocketAddr) {
    let client_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("client runtime");
    let warmup = Duration::from_secs(1);
    let end = warmup + Duration::from_secs_f64(a.seconds);
    println!(
        "load test: {} req/s open loop, {} keep-alive connections, {:.0} s (+1 s warm-up), {} paths round-robin; loadavg before: {}",
        a.rate, a.connections, a.seconds, paths.len(), loadavg()
    );
    let t0 = Instant::now();
    let cpu0 = cpu_s();
    let results = client_rt.block_on(async {
        let start = Instant::now() + Duration::from_millis(100);
        let tasks: Vec<_> = (0..a.connections)
            .map(|c| {
                tokio::spawn(connection(
                    paths.clone(),
                    addr,
                    c,
                    a.connections,
                    a.rate,
                    start,
                    (warmup, end),
                ))
            })
            .collect();
        let mut all = Vec::new();
        let mut errors = 0;
        for t in tasks {
            let (l, e) = t.await.expect("task");
            all.extend(l);
            errors += e;
        }
        (all, errors)
    });
    let cpu = cpu_s() - cpu0;
    let wall = t0.elapsed().as_secs_f64() - 0.1 - warmup.as_secs_f64();
    let (mut lat, errors) = results;
    lat.sort_unstable();
    let pct = |p: f64| {
        if lat.is_empty() {
            return f64::NAN;
        }
        let i = ((p / 100.0) * (lat.len() - 1) as f64).round() as usize;
        lat[i] as f64 / 1000.0
    };
    println!(
        "completed {} (errors {}), achieved {:.0} req/s over {:.1} s; loadavg after: {}",
        lat.len(),
        errors,
        lat.len() as f64 / wall.max(1e-9),
        wall,
        loadavg()
    );
    println!(
        "latency ms: p50 {:.3}  p90 {:.3}  p99 {:.3}  p99.9 {:.3}  max {:.3}",
        pct(50.0),
        pct(90.0),
        pct(99.0),
        pct(99.9),
        pct(100.0)
    );
    let sent = (end.as_secs_f64() * a.rate).floor();
    println!(
        "CPU time: {:.2} s for {sent:.0} requests (warm-up included), {:.0} µs a request, server and client together",
        cpu,
        cpu * 1e6 / sent.max(1.0)
    );
}
