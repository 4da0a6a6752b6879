//! `rate_results` / `rate_search` (open-loop request-rate mode) validate against the committed
//! schema, round-trip through the types, and a file without them still reads (additive fields).

use serde_json::Value;
use servebench_results::{
    RateProbe, RateRow, RateSearch, RateSummary, Results, SloCheck, SCHEMA_JSON,
};

fn validator() -> jsonschema::Validator {
    let schema: Value = serde_json::from_str(SCHEMA_JSON).expect("schema is JSON");
    jsonschema::validator_for(&schema).expect("schema compiles")
}

fn errors(v: &Value) -> Vec<String> {
    validator()
        .iter_errors(v)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect()
}

fn summary(x: f64) -> Option<RateSummary> {
    Some(RateSummary {
        count: 10,
        avg: x,
        p50: x,
        p90: x * 1.5,
        p95: x * 1.7,
        p99: x * 2.0,
        max: x * 2.5,
    })
}

/// A row with every field set.
fn full_row() -> RateRow {
    RateRow {
        context_tokens: 0,
        offered_rate: 10.0,
        arrival: servebench_results::ArrivalProcess::Gamma,
        burstiness: Some(0.5),
        max_concurrency: Some(32),
        duration: 5.0,
        seed: 7,
        requests_scheduled: 50,
        requests_sent: 49,
        requests_completed: 48,
        requests_failed: 1,
        requests_cut: 0,
        requests_not_sent: 1,
        schedule_rate: Some(9.8),
        achieved_rate: Some(9.7),
        shortfall: Some(0.03),
        completed_rate: Some(9.1),
        schedule_lag_p50: Some(0.0001),
        schedule_lag_p99: Some(0.002),
        schedule_lag_max: Some(0.004),
        ttft: summary(0.05),
        ttft_from_intended: summary(0.051),
        itl: summary(0.01),
        tpot: summary(0.011),
        e2e: summary(1.0),
        e2e_from_intended: summary(1.01),
        itl_gaps: Some(servebench_results::ItlGaps {
            gaps: 4700,
            mean: 0.0102,
            p50: 0.010,
            p90: 0.0105,
            p99: 0.012,
            p99_9: 0.25,
            max: 0.301,
            histogram: vec![
                servebench_results::GapBucket {
                    le_s: 0.016384,
                    count: 4699,
                },
                servebench_results::GapBucket {
                    le_s: 0.524288,
                    count: 1,
                },
            ],
        }),
        peak_output_tps_1s: Some(812.0),
        output_tokens: 4800,
        output_tps: Some(900.0),
        slo: vec![SloCheck {
            metric: servebench_results::SloMetric::Ttft,
            percentile: 99.0,
            threshold: 0.5,
            measured: Some(0.1),
            met: true,
        }],
        goodput: Some(8.5),
        drain_s: Some(1.2),
        slo_attainment: Some(0.9),
        slo_met: Some(true),
        search_step: Some(2),
        status: Some(servebench_results::CellStatus::Ok),
        status_reason: None,
        warnings: vec!["single_write: 3 of 4 requests received all their tokens …".into()],
        warning_kinds: vec![servebench_results::FailureKind::SingleWrite],
        steady_state: Some(servebench_results::SteadyState {
            target_in_flight: 32,
            min_in_flight: 31,
            start_s: 0.4,
            end_s: 4.6,
            duration_s: 4.2,
            fraction: 0.84,
            mean_in_flight: 31.6,
            requests: 40,
            output_tokens: 9000,
            output_tps: Some(2142.9),
            ttft_p50: Some(0.05),
            ttft_p99: Some(0.2),
            itl_p50: Some(0.01),
            itl_p99: Some(0.02),
            short: false,
        }),
    }
}

fn file_with_rows() -> Results {
    let mut r = Results {
        schema_version: servebench_results::SCHEMA_VERSION.into(),
        ..Default::default()
    };
    r.metadata.tool = "servebench".into();
    r.metadata.endpoint = "chat".into();
    r.metadata.decode_mode = servebench_results::DecodeMode::Duration;
    r.metadata.primary_decode_layer = servebench_results::DecodeLayer::SustainedDecode;
    r.methodology.prefill.name = "Prefill".into();
    r.rate_results.push(full_row());
    r.rate_results.push(RateRow {
        offered_rate: 20.0,
        arrival: servebench_results::ArrivalProcess::Poisson,
        ..Default::default()
    });
    r.rate_search.push(RateSearch {
        context_tokens: 0,
        start_rate: 1.0,
        resolution: 0.05,
        max_probes: 20,
        rule: "double, then bisect".into(),
        best_rate: Some(10.0),
        lowest_failing_rate: Some(10.4),
        stopped: servebench_results::SearchStop::Resolution,
        probes: vec![
            RateProbe {
                rate: 1.0,
                met: true,
            },
            RateProbe {
                rate: 2.0,
                met: false,
            },
        ],
    });
    r
}

#[test]
fn rate_rows_validate_and_round_trip() {
    let r = file_with_rows();
    let v = serde_json::to_value(&r).unwrap();
    let e = errors(&v);
    assert!(
        e.is_empty(),
        "rate rows violate the schema:\n{}",
        e.join("\n")
    );
    let back: Results = serde_json::from_value(v).unwrap();
    assert_eq!(back.rate_results, r.rate_results);
    assert_eq!(back.rate_search, r.rate_search);
}

#[test]
fn schema_rejects_unknown_or_mistyped_rate_fields() {
    let mut v = serde_json::to_value(file_with_rows()).unwrap();
    v["rate_results"][0]["goodput_typo"] = Value::from(1.0);
    assert!(!errors(&v).is_empty(), "an unknown field must be rejected");
    let mut v = serde_json::to_value(file_with_rows()).unwrap();
    v["rate_results"][0]["arrival"] = Value::from("uniform");
    assert!(
        !errors(&v).is_empty(),
        "an unknown arrival must be rejected"
    );
    let mut v = serde_json::to_value(file_with_rows()).unwrap();
    v["rate_results"][0]["slo"][0]["metric"] = Value::from("latency");
    assert!(
        !errors(&v).is_empty(),
        "an unknown SLO metric must be rejected"
    );
}

#[test]
fn files_without_rate_rows_omit_and_read_them() {
    let v = serde_json::to_value(Results::default()).unwrap();
    assert!(v.get("rate_results").is_none() && v.get("rate_search").is_none());
    let back: Results = serde_json::from_value(v).unwrap();
    assert!(back.rate_results.is_empty());
}
