//! Golden tests of the text report: the seed file of the old tool and a servebench file with every
//! kind of cell status. Review changes with `cargo insta review` (or `INSTA_UPDATE=always`).

use servebench_report::{render_text, ReportOptions};
use servebench_results::{extract_json_object, CellResult, CellStatus, Results};

fn seed() -> Results {
    let p = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/data/results/seed-000-llm-decode-bench-0.4.29.txt"
    );
    let text = std::fs::read_to_string(p).unwrap();
    serde_json::from_value(extract_json_object(&text).unwrap()).unwrap()
}

#[test]
fn seed_file_report() {
    insta::assert_snapshot!(render_text(&seed(), &ReportOptions::default()));
}

fn cell(c: u64, ctx: u64, status: CellStatus, tps: Option<f64>) -> CellResult {
    CellResult {
        concurrency: c,
        context_tokens: ctx,
        status,
        benchmark_mode: servebench_results::BenchmarkMode::Duration,
        aggregate_source: servebench_results::AggregateSource::OpenaiContinuousUsage,
        aggregate_tps: tps,
        per_request_avg_tps: tps.map(|t| t / c as f64),
        ttft_p50: tps.map(|_| 0.0123),
        inter_token_latency_p50: tps.map(|_| 0.0081),
        ..Default::default()
    }
}

#[test]
fn every_cell_status() {
    let mut r = seed();
    r.metadata.tool = "servebench".into();
    r.metadata.version = "0.1.0".into();
    r.metadata.endpoint = "chat".into();
    r.metadata.prompt_targeting = "tokenize_exact".into();
    r.prefill.clear();
    let mut limited = cell(8, 0, CellStatus::Ok, Some(900.0));
    limited.capacity_limited = true;
    limited.effective_concurrency = Some(6.4);
    let mut invalid = cell(8, 16384, CellStatus::Invalid, None);
    invalid.status_reason =
        "a stream failed: POST http://x/v1/chat/completions returned HTTP 500: boom".into();
    let mut cap = cell(64, 16384, CellStatus::SkippedCapacity, None);
    cap.status_reason = "C=64 × (ctx 16384 + max_tokens 4096) = 1310720 tokens exceeds the KV budget 601344 by 709k".into();
    let mut ctxs = cell(1, 131072, CellStatus::SkippedContext, None);
    ctxs.status_reason =
        "context 131072 + max_tokens 4096 = 135168 exceeds the model's max_model_len 131072".into();
    let mut user = cell(64, 0, CellStatus::SkippedUser, None);
    user.status_reason = "not run: the run was interrupted by the user (Ctrl-C)".into();
    let mut warn = cell(1, 0, CellStatus::Ok, Some(121.4));
    warn.warnings
        .push("the server preempted 3 requests during the window (KV cache full)".into());
    r.results = vec![
        warn,
        cell(1, 16384, CellStatus::Ok, Some(120.8)),
        limited,
        invalid,
        cap,
        ctxs,
        user,
    ];
    insta::assert_snapshot!(render_text(
        &r,
        &ReportOptions {
            show_capacity_limited_values: false,
            json_path: Some("out.json".into()),
            percentiles: vec![],
        }
    ));
    insta::assert_snapshot!(
        "show_capacity_limited_values",
        render_text(
            &r,
            &ReportOptions {
                show_capacity_limited_values: true,
                json_path: None,
                percentiles: vec![],
            }
        )
    );
}
