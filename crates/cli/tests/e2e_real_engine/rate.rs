//! The open-loop request-rate mode (`servebench run --request-rate … --slo …`, issue 9) against
//! the real engine: two Poisson rows with SLOs, checked for the row accounting (every scheduled
//! arrival sent, every sent request completed, failed or cut), coordinated-omission-safe latency
//! (from the intended send time, never below the one from the send time), client health
//! (schedule lag, shortfall against the drawn schedule), goodput and attainment against the
//! row's own counts, and the output tokens against the engine's generated-token counter.
//!
//! The rates are low (1 and 2 req/s, 32 tokens each) so that even a CPU engine on 2 cores serves
//! them without queueing much; the SLO thresholds are loose (60 s, 120 s) so they hold there, and
//! the test checks the goodput arithmetic, not the engine's speed.

use super::*;

/// Tokens per request (`--max-tokens`; `ignore_eos` is servebench's default, so each completed
/// request generates exactly this many).
const RATE_MAX_TOKENS: u64 = 32;
/// Requests servebench sends outside the rate rows (startup probe, model check, calibration)
/// generate at most this many tokens in all; the counter delta may exceed the rows' tokens by it.
const RATE_SIDE_TOKENS: f64 = 256.0;

fn rate_args(env: &E2eEnv, json_path: &std::path::Path) -> Vec<String> {
    [
        "run",
        "--url",
        &env.url,
        "--request-rate",
        "1,2",
        "--arrival",
        "poisson",
        "--duration",
        "8",
        "--slo",
        "ttft_p99=60s,e2e_p90=120s",
        "--contexts",
        "0",
        "--skip-prefill",
        "--decode-warmup-seconds",
        "0",
        "--max-tokens",
        &RATE_MAX_TOKENS.to_string(),
        "--seed",
        "7",
        "--no-calibration-cache",
        "--no-hw-monitor",
        "-o",
        &json_path.display().to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// Runs servebench with `args`, its stdout and stderr saved next to the results; killed (and
/// the test failed) after [`RUN_TIMEOUT`].
fn run_rate(env: &E2eEnv, name: &str, args: &[String]) -> (ExitStatus, String) {
    let stdout_path = env.out_dir.join(format!("{name}.stdout.txt"));
    let stderr_path = env.out_dir.join(format!("{name}.stderr.txt"));
    eprintln!("e2e: {BIN} {}", args.join(" "));
    let mut child = Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&stdout_path).expect("create stdout file"))
        .stderr(std::fs::File::create(&stderr_path).expect("create stderr file"))
        .spawn()
        .expect("spawn servebench");
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait for servebench") {
            break s;
        }
        if t0.elapsed() > RUN_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("servebench ran longer than {RUN_TIMEOUT:?} and was killed");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let stderr = std::fs::read_to_string(&stderr_path).unwrap_or_default();
    (status, stderr)
}

/// The checks of one rate row (`offered` req/s).
fn check_rate_row(row: &Value, offered: f64, c: &mut Checks) {
    let label = format!("rate {offered}");
    let n = |k: &str| u(row, k).unwrap_or(u64::MAX);
    c.check(f(row, "offered_rate") == Some(offered), || {
        format!("{label}: offered_rate {:?}", row["offered_rate"])
    });
    c.check(s(row, "arrival") == "poisson", || {
        format!("{label}: arrival {:?}", row["arrival"])
    });
    c.check(s(row, "status") == "ok", || {
        format!(
            "{label}: status {:?} ({:?})",
            row["status"], row["status_reason"]
        )
    });
    let (scheduled, sent, not_sent) = (
        n("requests_scheduled"),
        n("requests_sent"),
        n("requests_not_sent"),
    );
    let (completed, failed, cut) = (
        n("requests_completed"),
        n("requests_failed"),
        n("requests_cut"),
    );
    c.check((1..100).contains(&scheduled), || {
        format!("{label}: requests_scheduled {scheduled} for 8 s at {offered} req/s")
    });
    c.check(sent + not_sent == scheduled, || {
        format!("{label}: sent {sent} + not_sent {not_sent} != scheduled {scheduled}")
    });
    // No concurrency cap and a low rate: every arrival is sent.
    c.check(not_sent == 0, || {
        format!("{label}: {not_sent} arrivals not sent without a concurrency cap")
    });
    c.check(completed + failed + cut == sent, || {
        format!("{label}: completed {completed} + failed {failed} + cut {cut} != sent {sent}")
    });
    c.check(failed == 0 && completed >= 1, || {
        format!("{label}: {failed} failed, {completed} completed")
    });
    let out = n("output_tokens");
    c.check(out >= RATE_MAX_TOKENS * completed, || {
        format!("{label}: output_tokens {out} < {RATE_MAX_TOKENS} × {completed} completed")
    });
    if cut == 0 {
        c.check(out == RATE_MAX_TOKENS * completed, || {
            format!("{label}: output_tokens {out} != {RATE_MAX_TOKENS} × {completed} (ignore_eos)")
        });
    }
    // Coordinated-omission safety: from the intended time is never shorter.
    for (from_sent, from_intended) in [("ttft", "ttft_from_intended"), ("e2e", "e2e_from_intended")]
    {
        for stat in ["avg", "p50", "p99", "max"] {
            let a = row[from_sent][stat].as_f64();
            let b = row[from_intended][stat].as_f64();
            c.check(
                matches!((a, b), (Some(a), Some(b)) if a > 0.0 && b >= a - 1e-9),
                || format!("{label}: {from_intended}.{stat} {b:?} < {from_sent}.{stat} {a:?}"),
            );
        }
    }
    for k in ["itl", "tpot"] {
        c.check(row[k]["p50"].as_f64().is_some_and(|v| v > 0.0), || {
            format!("{label}: {k}.p50 {:?}", row[k]["p50"])
        });
    }
    // Client health: a client that keeps up at 1-2 req/s sends on time.
    let lag = f(row, "schedule_lag_p99");
    c.check(lag.is_some_and(|l| (0.0..0.5).contains(&l)), || {
        format!("{label}: schedule_lag_p99 {lag:?} s (client behind its schedule)")
    });
    if sent >= 3 {
        let short = f(row, "shortfall");
        c.check(short.is_some_and(|x| x.abs() < 0.1), || {
            format!("{label}: shortfall {short:?} against the drawn schedule")
        });
    }
    // SLOs: loose thresholds, so every completed request meets them; goodput and attainment
    // follow from the row's own counts.
    let slo = row["slo"].as_array().map(Vec::len);
    c.check(slo == Some(2), || {
        format!("{label}: {slo:?} SLO checks, want 2")
    });
    c.check(row["slo_met"] == true, || {
        format!("{label}: slo_met {}", row["slo_met"])
    });
    let att = f(row, "slo_attainment");
    let want = completed as f64 / scheduled as f64;
    c.check(att.is_some_and(|a| (a - want).abs() < 1e-9), || {
        format!("{label}: slo_attainment {att:?}, want completed/scheduled {want}")
    });
    // goodput = slo_attainment × schedule_rate (docs/metrics.md, "SLOs and goodput"): over the
    // schedule's span, so the drain after the last arrival does not lower it.
    let (good, sched_rate) = (f(row, "goodput"), f(row, "schedule_rate"));
    c.check(
        matches!((good, sched_rate), (Some(g), Some(r)) if r > 0.0 && (g - want * r).abs() <= 1e-9 * r),
        || format!("{label}: goodput {good:?} != slo_attainment {want} × schedule_rate {sched_rate:?} (all requests met the SLOs)"),
    );
}

/// `servebench run --request-rate 1,2 --arrival poisson --slo …` against the real engine. A run
/// whose checks fail is run again (at most [`MAX_ATTEMPTS`]) only when the test's own
/// [`PauseWitness`] saw the machine stand still during it: a paused client sends late, which is
/// what the schedule-lag check would then report.
#[test]
#[ignore = "needs a real engine: set SERVEBENCH_E2E_URL and SERVEBENCH_E2E_ENGINE, run with --ignored"]
fn open_loop_rates_with_slo_against_real_engine() {
    let _server = SERVER.lock().unwrap_or_else(|e| e.into_inner());
    let env = E2eEnv::from_env();
    let mut earlier = Vec::new();
    for attempt in 1..=MAX_ATTEMPTS {
        let witness = PauseWitness::start();
        let failures = open_loop_once(&env);
        let pause = witnessed_pause(witness.finish_ms());
        if failures.is_empty() {
            if !earlier.is_empty() {
                eprintln!(
                    "e2e open-loop: passed on attempt {attempt} of {MAX_ATTEMPTS}; earlier attempts failed on a paused machine:\n{}",
                    earlier.join("\n")
                );
            }
            return;
        }
        let Some(pause) = pause.filter(|_| attempt < MAX_ATTEMPTS) else {
            panic!(
                "{} checks failed:\n  {}\n(the machine did not stand still, or every attempt failed){}",
                failures.len(),
                failures.join("\n  "),
                if earlier.is_empty() { String::new() } else { format!("\nearlier attempts:\n{}", earlier.join("\n")) }
            );
        };
        let kept = env.out_dir.join(format!("open-loop.attempt{attempt}.json"));
        let _ = std::fs::rename(env.out_dir.join("open-loop.json"), &kept);
        eprintln!(
            "e2e open-loop: attempt {attempt} of {MAX_ATTEMPTS} failed {} check(s) while {pause}; results kept as {}; running again",
            failures.len(),
            kept.display()
        );
        earlier.push(format!(
            "  attempt {attempt} ({pause}):\n    - {}",
            failures.join("\n    - ")
        ));
    }
}

/// One open-loop run and its checks; the failed checks (empty when all pass).
fn open_loop_once(env: &E2eEnv) -> Vec<String> {
    let json_path = env.out_dir.join("open-loop.json");
    let _ = std::fs::remove_file(&json_path);
    let before = scrape_generated(env);
    let (status, stderr) = run_rate(env, "open-loop", &rate_args(env, &json_path));
    let after = scrape_generated(env);
    if !status.success() {
        return vec![format!(
            "servebench exited {status:?}\n--- stderr ---\n{stderr}"
        )];
    }
    let json: Value = serde_json::from_str(
        &std::fs::read_to_string(&json_path).expect("the results file exists"),
    )
    .expect("the results file is JSON");
    let mut c = Checks::default();
    check_schema(&json, &mut c);
    let rows = json["rate_results"].as_array().cloned().unwrap_or_default();
    c.check(rows.len() == 2, || {
        format!("{} rate rows, want 2", rows.len())
    });
    for (row, offered) in rows.iter().zip([1.0, 2.0]) {
        check_rate_row(row, offered, &mut c);
    }
    c.check(
        json["results"].as_array().is_some_and(Vec::is_empty),
        || "rate mode has no matrix cells".to_string(),
    );
    // The engine's own counter: at least the rows' tokens, at most those plus the side requests.
    let rows_tokens: f64 = rows.iter().filter_map(|r| f(r, "output_tokens")).sum();
    let delta = after - before;
    c.check(
        delta >= rows_tokens && delta <= rows_tokens + RATE_SIDE_TOKENS,
        || format!("{}: generated-token counter delta {delta} vs the rows' output_tokens {rows_tokens} (+ ≤ {RATE_SIDE_TOKENS} for startup requests)", env.engine.generation_counter()),
    );
    for r in &rows {
        eprintln!(
            "e2e open-loop: rate {} scheduled {} completed {} ttft p50 {:?} s (from intended {:?}) e2e p90 {:?} s lag p99 {:?} s goodput {:?}",
            r["offered_rate"], r["requests_scheduled"], r["requests_completed"], r["ttft"]["p50"],
            r["ttft_from_intended"]["p50"], r["e2e"]["p90"], r["schedule_lag_p99"], r["goodput"]
        );
    }
    eprintln!(
        "e2e open-loop: {} checks passed, {} failed, {} skipped",
        c.passed,
        c.failures.len(),
        c.skipped.len()
    );
    c.failures
}
