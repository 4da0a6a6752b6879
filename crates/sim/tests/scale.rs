//! 1,024+ concurrent streams on loopback (its own test binary, so it does not disturb the
//! timing tests).

mod common;

use common::*;
use servebench_sim::SimConfig;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_streams() {
    let n = 1100;
    let sim = sim(SimConfig {
        max_batch: 2048,
        decode_base_ms: 5.0,
        decode_per_seq_ms: 0.001,
        ..SimConfig::default()
    });
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let addr = sim.addr();
            tokio::spawn(async move {
                let body = chat_body(&format!("many {i}"), 8, stream_opts(true));
                let s = stream(addr, "/v1/chat/completions", &body).await;
                (
                    s.status,
                    s.token_events().len(),
                    s.events.last().map(|e| e.1.clone()),
                )
            })
        })
        .collect();
    for t in tasks {
        let (status, toks, last) = t.await.expect("task");
        assert_eq!(status, 200);
        assert_eq!(toks, 8);
        assert_eq!(last.as_deref(), Some("[DONE]"));
    }
    let st = sim.stats();
    assert_eq!(st.requests_finished_length_total, n);
    assert_eq!(st.generation_tokens_total, 8 * n);
    assert_eq!(sim.truth().len(), n as usize);
}

/// CPU time (s) of the simulator thread, from /proc (Linux only).
fn sim_thread_cpu_seconds() -> Option<f64> {
    let tasks = std::fs::read_dir("/proc/self/task").ok()?;
    for t in tasks.flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).ok()?;
        if comm.trim() == "servebench-sim" {
            let stat = std::fs::read_to_string(t.path().join("stat")).ok()?;
            let after = stat.rsplit_once(')')?.1;
            let f: Vec<&str> = after.split_whitespace().collect();
            let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
            return Some(ticks / 100.0);
        }
    }
    None
}

/// Manual check: `cargo test --release -p servebench-sim --test scale -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn cpu_of_1024_streams() {
    let n = 1024;
    let tokens = 300;
    let sim = sim(SimConfig {
        max_batch: 2048,
        decode_base_ms: 10.0,
        decode_per_seq_ms: 0.0,
        decode_per_kctx_ms: 0.0,
        record_truth: false,
        ..SimConfig::default()
    });
    let start = std::time::Instant::now();
    let cpu0 = sim_thread_cpu_seconds().unwrap_or(0.0);
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let addr = sim.addr();
            tokio::spawn(async move {
                let body = chat_body(&format!("cpu {i}"), tokens, stream_opts(true));
                stream(addr, "/v1/chat/completions", &body)
                    .await
                    .token_events()
                    .len()
            })
        })
        .collect();
    for t in tasks {
        assert_eq!(t.await.expect("task"), tokens as usize);
    }
    let wall = start.elapsed().as_secs_f64();
    let cpu = sim_thread_cpu_seconds().unwrap_or(0.0) - cpu0;
    let st = sim.stats();
    eprintln!(
        "{n} streams x {tokens} tokens: wall {wall:.2} s, sim thread CPU {cpu:.2} s ({:.0}%), {} steps, {:.0} events/s",
        100.0 * cpu / wall,
        st.steps_total,
        (n as f64 * tokens as f64) / wall
    );
}
