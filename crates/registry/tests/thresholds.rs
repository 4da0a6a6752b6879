//! Issue 18: every documented threshold of the verdict rules and the plausibility bounds
//! (docs/registry.md) at both sides: just below, at, just above. The values are the documented
//! numbers written out, not the constants, so a changed constant fails here.

use serde_json::json;
use servebench_registry::publish::{decide, CellFacts};
use servebench_registry::CacheTag;
use servebench_results::CellStatus;

fn ok_facts() -> CellFacts {
    CellFacts {
        status: CellStatus::Ok,
        rate: Some(100.0),
        client_tps: Some(100.0),
        server_output_tokens: Some(1000.0),
        server_window_seconds: Some(10.0),
        client_max_tick_lag_ms: Some(3.0),
        concurrency: 4,
        ..Default::default()
    }
}

fn rule(f: &CellFacts, baseline: Option<f64>) -> String {
    decide(
        f,
        CacheTag::WarmPrefix,
        "concurrency-sweep",
        baseline.map(|b| ("base", b)),
    )
    .rule
    .unwrap_or_default()
}

/// `client-lag`: `client_max_tick_lag_ms` > 50 ms (docs/registry.md).
#[test]
fn client_lag_rule_is_above_50_ms() {
    for (lag, want) in [
        (49.999, "accepted"),
        (50.0, "accepted"),
        (50.001, "client-lag"),
        (51.0, "client-lag"),
    ] {
        let f = CellFacts {
            client_max_tick_lag_ms: Some(lag),
            ..ok_facts()
        };
        assert_eq!(rule(&f, None), want, "lag {lag} ms");
    }
}

/// `regression`: rate below the baseline by more than the 5 % noise.
#[test]
fn regression_rule_is_below_95_percent_of_the_baseline() {
    // baseline 100: a regression below 95 tok/s.
    for (rate, want) in [
        (94.99, "regression"),
        (95.0, "accepted"),
        (95.01, "accepted"),
    ] {
        let f = CellFacts {
            rate: Some(rate),
            client_tps: Some(rate),
            server_output_tokens: Some(rate * 10.0),
            ..ok_facts()
        };
        assert_eq!(rule(&f, Some(100.0)), want, "rate {rate}");
    }
}

/// `server-disagrees`: |server − client × window| > 10 % of it + 4 tokens per stream.
#[test]
fn server_agreement_slack_is_10_percent_plus_4_tokens_per_stream() {
    // expected 1000 tokens, C = 4: slack 100 + 16 = 116.
    for (server, want) in [
        (1115.99, "accepted"),
        (1116.0, "accepted"),
        (1116.01, "server-disagrees"),
        (884.01, "accepted"),
        (884.0, "accepted"),
        (883.99, "server-disagrees"),
    ] {
        let f = CellFacts {
            server_output_tokens: Some(server),
            ..ok_facts()
        };
        assert_eq!(rule(&f, None), want, "server {server} tokens");
    }
}

fn bad_fields(row: serde_json::Value, cap: Option<f64>) -> Vec<String> {
    servebench_registry::validate::implausible(&row, cap)
        .into_iter()
        .map(|(k, _)| k)
        .collect()
}

/// Each plausibility bound (docs/registry.md): a value just inside, at, and just outside.
#[test]
fn plausibility_bounds_at_both_sides() {
    let none: Vec<String> = Vec::new();
    let one = |k: &str| vec![k.to_string()];
    // TTFT within [1 ms, 1 h], both ends inclusive.
    for (t, ok) in [
        (0.999, false),
        (1.0, true),
        (1.001, true),
        (3_599_999.0, true),
        (3_600_000.0, true),
        (3_600_001.0, false),
    ] {
        let got = bad_fields(json!({"ttft_ms_p50": t, "ttft_ms_p95": 4e6}), None);
        assert_eq!(
            got,
            if ok { none.clone() } else { one("ttft_ms_p50") },
            "TTFT {t}"
        );
    }
    // p95 ≥ p50
    for (p95, ok) in [(9.999, false), (10.0, true), (10.001, true)] {
        let got = bad_fields(json!({"ttft_ms_p50": 10.0, "ttft_ms_p95": p95}), None);
        assert_eq!(
            got,
            if ok { none.clone() } else { one("ttft_ms_p95") },
            "p95 {p95}"
        );
    }
    // Every latency percentile: ≥ 0, ≤ 1 day (ms fields as ms, s fields as s), in order
    // (break-it round 9: ttft_ms_p99 1e303 and itl_ms_p50 −3 were accepted).
    let day_ms = servebench_registry::validate::bounds::MAX_LATENCY_MS;
    for (row, bad) in [
        (
            json!({"ttft_ms_p50": 10.0, "ttft_ms_p99": day_ms}),
            none.clone(),
        ),
        (
            json!({"ttft_ms_p50": 10.0, "ttft_ms_p99": day_ms + 1.0}),
            one("ttft_ms_p99"),
        ),
        (
            json!({"ttft_ms_p50": 10.0, "ttft_ms_p99": 1e303}),
            one("ttft_ms_p99"),
        ),
        (json!({"itl_ms_p50": -0.001}), one("itl_ms_p50")),
        (json!({"itl_ms_p50": 0.0}), none.clone()),
        (
            json!({"ttft_ms_p50": 10.0, "ttft_ms_p90": -1.0}),
            one("ttft_ms_p90"),
        ),
        (json!({"e2e_s_p99": day_ms / 1000.0}), none.clone()),
        (
            json!({"e2e_s_p99": day_ms / 1000.0 + 0.001}),
            one("e2e_s_p99"),
        ),
        (
            json!({"tpot_ms_p50": 5.0, "tpot_ms_p99": 4.999}),
            one("tpot_ms_p99"),
        ),
        (
            json!({"tpot_ms_p50": 5.0, "tpot_ms_p99": 5.0}),
            none.clone(),
        ),
        // round 10: seconds and other spellings, and a number written as text
        (json!({"ttft_s_p99": 1e300}), one("ttft_s_p99")),
        (json!({"tpot_s_p99": 86_400.5}), one("tpot_s_p99")),
        (json!({"latency_s_p99": 1e300}), one("latency_s_p99")),
        (
            json!({"request_latency_ms_p99": -1.0}),
            one("request_latency_ms_p99"),
        ),
        (
            json!({"ttft_ms_p50": 10.0, "ttft_ms_p99": "1e300"}),
            one("ttft_ms_p99"),
        ),
        (
            json!({"ttft_ms_p50": 10.0, "ttft_ms_p99": null}),
            none.clone(),
        ),
        (
            json!({"ttft_ms_p50": 10.0, "ttft_ms_p90": 30.0, "ttft_ms_p99": 20.0}),
            one("ttft_ms_p99"),
        ),
    ] {
        assert_eq!(bad_fields(row.clone(), None), bad, "{row}");
    }
    // prefill ≤ 500k tok/s cold, ≤ 1M any
    for (status, cap) in [
        ("accepted-cold-prefill", 500_000.0),
        ("accepted-warm-prefix-prefill", 1_000_000.0),
    ] {
        for (d, ok) in [(-1.0, true), (0.0, true), (1.0, false)] {
            let got = bad_fields(json!({"status": status, "prefill_tok_s": cap + d}), None);
            assert_eq!(
                got,
                if ok {
                    none.clone()
                } else {
                    one("prefill_tok_s")
                },
                "{status} {d}"
            );
        }
    }
    // aggregate decode ≤ 200k tok/s
    for (d, ok) in [(-1.0, true), (0.0, true), (1.0, false)] {
        let got = bad_fields(json!({"decode_tok_s": 200_000.0 + d}), None);
        assert_eq!(
            got,
            if ok {
                none.clone()
            } else {
                one("decode_tok_s")
            },
            "decode {d}"
        );
    }
    // per-stream decode ≤ 5,000 tok/s
    for (d, ok) in [(-1.0, true), (0.0, true), (1.0, false)] {
        let got = bad_fields(json!({"decode_tok_s_per_stream": 5_000.0 + d}), None);
        assert_eq!(
            got,
            if ok {
                none.clone()
            } else {
                one("decode_tok_s_per_stream")
            },
            "per-stream {d}"
        );
    }
    // aggregate ≤ 1.5 × C × per-stream (C = 4, per-stream 100: 600)
    for (agg, ok) in [(599.0, true), (600.0, true), (601.0, false)] {
        let got = bad_fields(
            json!({"decode_tok_s": agg, "decode_tok_s_per_stream": 100.0, "concurrency": 4}),
            None,
        );
        assert_eq!(
            got,
            if ok {
                none.clone()
            } else {
                one("decode_tok_s")
            },
            "aggregate {agg}"
        );
    }
    // peak VRAM ≤ the cap (2,048 GB when the hardware is unknown)
    for (cap, v) in [(Some(88.0), 88.0), (None, 2_048.0)] {
        for (d, ok) in [(-0.01, true), (0.0, true), (0.01, false)] {
            let got = bad_fields(json!({"peak_vram_gb": v + d}), cap);
            assert_eq!(
                got,
                if ok {
                    none.clone()
                } else {
                    one("peak_vram_gb")
                },
                "VRAM {v} {d}"
            );
        }
    }
    // context ≤ 10M tokens
    for (c, ok) in [
        (9_999_999u64, true),
        (10_000_000, true),
        (10_000_001, false),
    ] {
        let got = bad_fields(json!({"context_tokens": c}), None);
        assert_eq!(
            got,
            if ok {
                none.clone()
            } else {
                one("context_tokens")
            },
            "context {c}"
        );
    }
}

/// `cell-invalid`: an `invalid` cell, or one without a headline number, each alone (found by
/// `cargo mutants`: `||` → `&&` in `decide` survived the table of `publish_rules.rs`, whose
/// invalid cells have both).
#[test]
fn an_invalid_cell_or_a_missing_rate_alone_is_cell_invalid() {
    let invalid_with_rate = CellFacts {
        status: CellStatus::Invalid,
        ..ok_facts()
    };
    assert_eq!(rule(&invalid_with_rate, None), "cell-invalid");
    let ok_without_rate = CellFacts {
        rate: None,
        ..ok_facts()
    };
    assert_eq!(rule(&ok_without_rate, None), "cell-invalid");
}
