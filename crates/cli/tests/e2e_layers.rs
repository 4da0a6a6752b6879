//! End to end against a real engine: the prefill layer (standalone cold profile with Prometheus
//! validation, warm-prefix rows) and the Burst / E2E layer in one run (issue "prefill and
//! burst"). Ignored by default; CI runs it with `--ignored` against the CPU vLLM:
//!
//! ```sh
//! SERVEBENCH_E2E_URL=http://127.0.0.1:8000 SERVEBENCH_E2E_ENGINE=vllm \
//!   cargo test -p servebench --test e2e_layers -- --ignored --nocapture
//! ```
//!
//! It checks structure and plausibility, not speed.

use std::process::Command;

use serde_json::Value;

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: this test needs a real engine (see the module docs)")
    })
}

fn f(v: &Value, k: &str) -> Option<f64> {
    v.get(k).and_then(Value::as_f64)
}

#[test]
#[ignore = "needs a real engine: set SERVEBENCH_E2E_URL and SERVEBENCH_E2E_ENGINE, run with --ignored"]
fn burst_and_standalone_prefill_against_real_engine() {
    let url = env("SERVEBENCH_E2E_URL");
    let engine = env("SERVEBENCH_E2E_ENGINE");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("layers.json");
    let max_tokens = 96u64;
    let o = Command::new(env!("CARGO_BIN_EXE_servebench"))
        .args([
            "run",
            "--url",
            &url,
            "--concurrency",
            "1,2",
            "--contexts",
            "0,512",
            "--duration",
            "3",
        ])
        .args([
            "--max-tokens",
            &max_tokens.to_string(),
            "--decode-warmup-seconds",
            "1",
            "--stable-seconds",
            "1",
        ])
        .args(["--run-burst", "--burst-requests-per-concurrency", "2"])
        .args([
            "--standalone-prefill",
            "--prefill-contexts",
            "512,1k",
            "--prefill-duration",
            "2",
            "--prefill-metric",
            "auto",
        ])
        .args(["--temperature", "0", "-o"])
        .arg(&out)
        .env("HOME", dir.path())
        .env("XDG_CACHE_HOME", dir.path())
        .output()
        .expect("servebench runs");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.success(),
        "servebench failed ({:?}):\n{stderr}",
        o.status.code()
    );
    let text = std::fs::read_to_string(&out).unwrap();
    let r: Value = serde_json::from_str(&text).unwrap();

    // Schema.
    let schema: Value = serde_json::from_str(servebench_results::SCHEMA_JSON).unwrap();
    let errs: Vec<String> = jsonschema::validator_for(&schema)
        .unwrap()
        .iter_errors(&r)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect();
    assert!(errs.is_empty(), "schema: {errs:?}");
    let m = &r["metadata"];
    assert_eq!(m["engine"], engine.as_str());
    assert_eq!(m["prefill_mode"], "standalone_cold");
    assert_eq!(m["burst_e2e_status"], "enabled");
    assert_eq!(m["prefill_metric"], "auto");

    // Cold prefill rows: client headline, prompt tokens ≈ context, server validation attempted.
    for ctx in [512u64, 1024] {
        let row = &r["prefill"][ctx.to_string()];
        assert_eq!(row["status"], "ok", "prefill {ctx}: {row}");
        assert_eq!(row["method"], "client");
        let p = row["prompt_tokens"].as_u64().unwrap();
        assert!(p.abs_diff(ctx) <= 8, "prefill {ctx}: prompt tokens {p}");
        let tps = f(row, "tok_per_sec").unwrap();
        let ttft = f(row, "ttft_seconds").unwrap();
        assert!(tps > 0.0 && ttft > 0.0);
        assert!(
            (tps - p as f64 / ttft).abs() / tps < 0.02,
            "tok/s = prompt tokens / TTFT"
        );
        assert!(row["samples"].as_u64().unwrap() >= 1);
        let sv = &row["server_validation"];
        if engine == "vllm" {
            // vLLM exports request_prefill_time_seconds: either a valid server figure or a reason.
            let valid = f(sv, "tok_per_sec").is_some_and(|t| t > 0.0);
            let reason = sv["invalid_reason"].as_str().unwrap_or("");
            assert!(
                valid || !reason.is_empty(),
                "prefill {ctx}: server validation {sv}"
            );
            if valid {
                assert!(sv["method"].as_str().unwrap().starts_with("prometheus:"));
            }
        }
        // Warm prefix: the same prompt again is served (mostly) from the prefix cache.
        let warm = &r["prefill_warm"][ctx.to_string()];
        assert_eq!(warm["method"], "warm_prefix", "{warm}");
        let src = warm["cached_tokens_source"].as_str().unwrap();
        assert!(
            ["usage", "prefix_cache_counters", "unknown"].contains(&src),
            "{src}"
        );
        if src != "unknown" {
            let cached = warm["cached_tokens"].as_u64().unwrap();
            assert!(
                cached > 0 && cached <= warm["prompt_tokens"].as_u64().unwrap(),
                "{warm}"
            );
        } else {
            assert!(
                warm["cached_tokens"].is_null(),
                "unknown cached tokens are null, never 0"
            );
        }
    }

    // Sustained cells still ran.
    let results = r["results"].as_array().unwrap();
    assert_eq!(results.len(), 4);
    assert!(results.iter().all(|c| c["status"] == "ok"), "{results:?}");

    // Burst / E2E: every request completes with max_tokens tokens (ignore_eos), aggregate =
    // Σ completion tokens / wall time.
    let burst = r["burst_results"].as_array().unwrap();
    assert_eq!(burst.len(), 4);
    for b in burst {
        assert_eq!(b["status"], "ok", "{b}");
        assert_eq!(b["benchmark_mode"], "burst-e2e");
        assert_eq!(b["aggregate_source"], "openai_completed_usage");
        let c = b["concurrency"].as_u64().unwrap();
        let n = b["request_count_target"].as_u64().unwrap();
        assert_eq!(n, 2 * c);
        assert_eq!(b["num_completed"].as_u64().unwrap(), n);
        assert_eq!(b["client_output_tokens"].as_u64().unwrap(), n * max_tokens);
        let tps = f(b, "aggregate_tps").unwrap();
        let secs = f(b, "measurement_seconds").unwrap();
        assert!((tps - (n * max_tokens) as f64 / secs).abs() < 1e-6 * tps.max(1.0));
        let table = r["burst_summary_table"][b["context_tokens"].as_u64().unwrap().to_string()]
            [c.to_string()]
        .as_f64();
        assert_eq!(table, Some(tps));
        assert!(f(b, "ttft_p50").unwrap() > 0.0 && f(b, "request_latency_p50").unwrap() > 0.0);
    }
    assert_eq!(r["methodology"]["burst_e2e_decode"]["present"], true);
    assert_eq!(r["methodology"]["prefill"]["present"], true);
    eprintln!(
        "prefill 512: {} tok/s, 1k: {} tok/s",
        r["prefill"]["512"]["tok_per_sec"], r["prefill"]["1024"]["tok_per_sec"]
    );
    for b in burst {
        eprintln!(
            "burst C={} ctx={}: {} tok/s",
            b["concurrency"], b["context_tokens"], b["aggregate_tps"]
        );
    }
}
