//! `--export-requests`: the per-request JSON Lines file reproduces the cell's summaries exactly
//! (TTFT, ITL per token, tokens, per-gap ITL), so a dataframe built from it tells the same
//! story as the results JSON (issue 19).

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use servebench_stats::percentile_sorted;

const BIN: &str = env!("CARGO_BIN_EXE_servebench");

fn run(dir: &Path, args: &[&str]) {
    let out = Command::new("timeout")
        .arg("300")
        .arg(BIN)
        .args(args)
        .current_dir(dir)
        .env_remove("SERVEBENCH_API_KEY")
        .env("XDG_CACHE_HOME", dir.join("cache"))
        .env("HOME", dir)
        .output()
        .expect("run servebench");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "servebench failed: {stderr}");
}

/// Mean (summed in sorted order, as the cell's statistics are) and p50 / p90 / p99.
fn four(mut v: Vec<f64>) -> [f64; 4] {
    v.sort_by(f64::total_cmp);
    let avg = v.iter().sum::<f64>() / v.len() as f64;
    [
        avg,
        percentile_sorted(&v, 50.0),
        percentile_sorted(&v, 90.0),
        percentile_sorted(&v, 99.0),
    ]
}

fn cell_four(cell: &Value, name: &str) -> [f64; 4] {
    ["avg", "p50", "p90", "p99"].map(|s| {
        cell[format!("{name}_{s}")]
            .as_f64()
            .unwrap_or_else(|| panic!("{name}_{s} missing"))
    })
}

#[test]
fn exported_requests_reproduce_the_cells_summaries() {
    let dir = tempfile::tempdir().unwrap();
    run(
        dir.path(),
        &[
            "run",
            "--concurrency",
            "4",
            "--contexts",
            "0",
            "--request-count",
            "16",
            "--max-tokens",
            "24",
            "--skip-prefill",
            "--quiet",
            "--export-requests",
            "requests.jsonl",
            "-o",
            "results.json",
        ],
    );
    let results: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("results.json")).unwrap())
            .unwrap();
    let cell = &results["results"][0];
    assert_eq!(cell["status"], "ok", "{cell}");
    let text = std::fs::read_to_string(dir.path().join("requests.jsonl")).unwrap();
    let rows: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    let rows: Vec<&Value> = rows
        .iter()
        .filter(|r| r["layer"] == "request_count" && r["concurrency"] == 4)
        .collect();
    // Only the measured requests are exported (no scout, no warmup).
    assert_eq!(rows.len(), 16, "{text}");
    assert!(rows.iter().all(|r| r["context_tokens"] == 0));

    let ns = |r: &Value| -> Vec<u64> {
        r["event_ns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect()
    };
    let secs = |ns: u64| Duration::from_nanos(ns).as_secs_f64();
    let mut ttft = Vec::new();
    let mut itl = Vec::new();
    let mut gaps: Vec<u64> = Vec::new();
    let mut tokens = 0;
    for r in &rows {
        let ev = ns(r);
        let toks: Vec<u64> = r["event_tokens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        assert_eq!(ev.len(), toks.len());
        let n = r["output_tokens"].as_u64().unwrap();
        tokens += n;
        // TTFT from the first event's time, ITL per token from the first and last events.
        let t = secs(ev[0]);
        assert_eq!(Some(t), r["ttft_s"].as_f64());
        // the request's longest silence between timed events
        let max_gap = ev
            .windows(2)
            .map(|w| w[1] - w[0])
            .max()
            .map(|g| g as f64 / 1e9);
        assert_eq!(max_gap, r["max_gap_s"].as_f64(), "{r}");
        ttft.push(t);
        itl.push(secs(ev[ev.len() - 1] - ev[0]) / (n - 1) as f64);
        for i in 1..ev.len() {
            for _ in 0..toks[i] {
                gaps.push((ev[i] - ev[i - 1]) / toks[i]);
            }
        }
        assert!(r["sent_s"].as_f64().unwrap() >= r["intended_s"].as_f64().unwrap());
        assert!(r["first_byte_s"].as_f64().unwrap() <= t);
        assert_eq!(r["completed"], true);
        assert_eq!(r["finish_reason"], "length");
        assert!(r["prompt_tokens"].as_u64().unwrap() > 0);
        // a request-count cell has no measured window: no window credit (null, never 0)
        assert!(r["window_tokens"].is_null(), "{r}");
    }
    assert_eq!(four(ttft), cell_four(cell, "ttft"));
    assert_eq!(four(itl), cell_four(cell, "inter_token_latency"));
    assert_eq!(Some(tokens), cell["client_output_tokens"].as_u64());
    // Per-gap ITL: the same count; max within one histogram bucket (3 significant digits).
    let g = &cell["itl_gaps"];
    assert_eq!(Some(gaps.len() as u64), g["gaps"].as_u64(), "{g}");
    let max = secs(*gaps.iter().max().unwrap());
    let got = g["max"].as_f64().unwrap();
    assert!(got >= max && got <= max * 1.001, "max {got} vs {max}");
}

/// A sustained cell's rows carry their window credit: the simulator streams usage on every
/// chunk, so the rows' `window_tokens` sum to the cell's `client_output_tokens` exactly, and the
/// ramp-up requests that ended before the window opened have 0 (docs/exports.md).
#[test]
fn sustained_rows_sum_to_the_cells_window_tokens() {
    let dir = tempfile::tempdir().unwrap();
    run(
        dir.path(),
        &[
            "run",
            "--concurrency",
            "2",
            "--contexts",
            "0",
            "--duration",
            "1",
            "--max-tokens",
            "16",
            "--skip-prefill",
            "--quiet",
            "--export-requests",
            "requests.jsonl",
            "-o",
            "results.json",
        ],
    );
    let results: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("results.json")).unwrap())
            .unwrap();
    let cell = &results["results"][0];
    assert_eq!(cell["status"], "ok", "{cell}");
    let text = std::fs::read_to_string(dir.path().join("requests.jsonl")).unwrap();
    let rows: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .filter(|r: &Value| r["layer"] == "sustained" && r["concurrency"] == 2)
        .collect();
    assert!(rows.len() > 2, "{text}");
    let credit: Vec<u64> = rows
        .iter()
        .map(|r| {
            r["window_tokens"]
                .as_u64()
                .unwrap_or_else(|| panic!("a number in a sustained row: {r}"))
        })
        .collect();
    assert_eq!(
        Some(credit.iter().sum::<u64>()),
        cell["client_output_tokens"].as_u64(),
        "{credit:?}"
    );
}
