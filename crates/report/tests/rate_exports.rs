//! Open-loop rate rows in every export: text, Markdown, HTML and CSV (rows with layer `rate`
//! and the appended rate columns, documented in docs/exports.md); files without rate rows are
//! unchanged (the golden tests in exports.rs cover those).

mod common;

use servebench_report::{csv_export, html, markdown, render_text, ReportOptions};
use servebench_results::{
    CellStatus, RateProbe, RateRow, RateSearch, RateSummary, Results, SloCheck,
};

fn summary(x: f64) -> Option<RateSummary> {
    Some(RateSummary {
        count: 50,
        avg: x,
        p50: x,
        p90: x * 1.5,
        p95: x * 1.7,
        p99: x * 2.0,
        max: x * 3.0,
    })
}

fn with_rates() -> Results {
    let mut r = common::full();
    let row = |rate: f64, good: f64, met: bool| RateRow {
        context_tokens: 0,
        offered_rate: rate,
        arrival: servebench_results::ArrivalProcess::Gamma,
        burstiness: Some(0.5),
        max_concurrency: Some(16),
        duration: 10.0,
        seed: 1,
        requests_scheduled: 100,
        requests_sent: 99,
        requests_completed: 98,
        requests_failed: 1,
        requests_not_sent: 1,
        achieved_rate: Some(rate * 0.99),
        schedule_lag_p50: Some(0.0004),
        schedule_lag_p99: Some(0.0123),
        ttft: summary(0.040),
        ttft_from_intended: summary(0.250),
        itl: summary(0.010),
        e2e_from_intended: summary(1.5),
        output_tps: Some(1234.0),
        slo: vec![SloCheck {
            metric: servebench_results::SloMetric::Ttft,
            percentile: 99.0,
            threshold: 0.5,
            measured: Some(0.5),
            met,
        }],
        goodput: Some(good),
        slo_attainment: Some(0.9),
        slo_met: Some(met),
        search_step: Some(1),
        status: Some(CellStatus::Ok),
        status_reason: Some("1 of 99 sent requests failed; first error: HTTP 500 <boom>".into()),
        ..Default::default()
    };
    r.rate_results = vec![row(5.0, 4.5, true), row(10.0, 6.25, false)];
    r.rate_search = vec![RateSearch {
        best_rate: Some(5.0),
        lowest_failing_rate: Some(10.0),
        stopped: servebench_results::SearchStop::MaxProbes,
        probes: vec![
            RateProbe {
                rate: 5.0,
                met: true,
            },
            RateProbe {
                rate: 10.0,
                met: false,
            },
        ],
        ..Default::default()
    }];
    r
}

#[test]
fn text_report_has_the_rate_table() {
    let t = render_text(&with_rates(), &ReportOptions::default());
    assert!(t.contains("Open-loop request rate"), "{t}");
    for needle in [
        "gamma K=0.5",
        "99/100",
        "250.0",
        "6.25",
        "90 %",
        "rate search ctx=0: best 5.000",
        "5✓ 10✗",
        "SLOs: ttft_p99 <= 500 ms",
        "HTTP 500",
    ] {
        assert!(t.contains(needle), "missing {needle:?} in\n{t}");
    }
    // Every sent request is accounted for: done, failed and cut columns side by side.
    let header = t.lines().find(|l| l.contains("sent/sched")).unwrap();
    let cols: Vec<&str> = header
        .split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    let at = |h: &str| cols.iter().position(|c| *c == h);
    assert!(
        at("done").is_some()
            && at("failed") == at("done").map(|i| i + 1)
            && at("cut") == at("done").map(|i| i + 2),
        "{header}"
    );
    let plain = render_text(&common::full(), &ReportOptions::default());
    assert!(!plain.contains("Open-loop"));
    // Without SLOs the SLO columns are left out.
    let mut no_slo = with_rates();
    for row in &mut no_slo.rate_results {
        row.slo.clear();
    }
    let t = render_text(&no_slo, &ReportOptions::default());
    assert!(
        t.contains("TTFT* p50 ms") && !t.contains("goodput req/s"),
        "{t}"
    );
}

#[test]
fn markdown_and_html_have_the_rate_table() {
    let md = markdown::render_markdown(&with_rates(), &ReportOptions::default());
    assert!(
        md.contains("## Open-loop request rate") && md.contains("| 0 | 10 | gamma K=0.5 |"),
        "{md}"
    );
    let h = html::render_html(&with_rates(), &ReportOptions::default()).unwrap();
    assert!(h.contains("<h2 id=\"rate\">Open-loop request rate</h2>"));
    assert!(h.contains("HTTP 500 &lt;boom&gt;"), "reasons are escaped");
    // A rate-only file does not claim that every planned cell was measured.
    let mut ro = with_rates();
    ro.results.clear();
    ro.burst_results.clear();
    ro.prefill.clear();
    ro.prefill_warm.clear();
    let h = html::render_html(&ro, &ReportOptions::default()).unwrap();
    assert!(
        h.contains("No matrix cells: this is an open-loop run")
            && !h.contains("Every planned cell"),
        "{h}"
    );
    assert!(
        !markdown::render_markdown(&common::full(), &ReportOptions::default())
            .contains("Open-loop")
    );
}

#[test]
fn csv_appends_rate_rows_and_columns() {
    let text = csv_export::render_csv(&with_rates()).unwrap();
    let mut rdr = csv::Reader::from_reader(text.as_bytes());
    let header: Vec<String> = rdr.headers().unwrap().iter().map(String::from).collect();
    let mut want: Vec<&str> = csv_export::columns().iter().map(|c| c.0).collect();
    want.extend(csv_export::rate_columns().iter().map(|c| c.0));
    assert_eq!(header, want);
    let col = |n: &str| header.iter().position(|h| h == n).unwrap();
    let rows: Vec<csv::StringRecord> = rdr.records().map(|r| r.unwrap()).collect();
    let rate: Vec<&csv::StringRecord> = rows.iter().filter(|r| &r[0] == "rate").collect();
    assert_eq!(rate.len(), 2);
    assert_eq!(&rate[1][col("offered_rate")], "10");
    assert_eq!(&rate[1][col("goodput")], "6.25");
    assert_eq!(&rate[1][col("slo_met")], "false");
    assert_eq!(&rate[0][col("concurrency")], "16");
    assert_eq!(&rate[0][col("ttft_intended_p50_s")], "0.25");
    assert_eq!(&rate[0][col("tpot_p50_s")], "", "not measured = empty");
    let cell = rows.iter().find(|r| &r[0] == "sustained").unwrap();
    assert_eq!(
        &cell[col("offered_rate")],
        "",
        "cells leave the rate columns empty"
    );
    // Without rate rows the header is exactly the stable columns.
    let plain = csv_export::render_csv(&common::full()).unwrap();
    assert!(!plain.lines().next().unwrap().contains("offered_rate"));
}

#[test]
fn rate_csv_columns_are_documented() {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/exports.md"
    ))
    .unwrap();
    for (name, _) in csv_export::rate_columns() {
        assert!(
            doc.contains(&format!("| `{name}` |")),
            "docs/exports.md does not document {name}"
        );
    }
}

/// `servebench compare` joins the open-loop rows by (context, offered rate): values A→B with the
/// change, rows only one file has marked absent, and differing schedules named in the warnings.
#[test]
fn compare_joins_rate_rows() {
    use servebench_report::compare::{compare, render_markdown, render_text, CompareOptions};
    let a = with_rates();
    let mut b = with_rates();
    b.rate_results[0].ttft_from_intended = summary(0.125);
    b.rate_results[0].goodput = Some(5.0);
    b.rate_results[1].seed = 2;
    let mut extra = b.rate_results[1].clone();
    extra.offered_rate = 20.0;
    b.rate_results.push(extra);
    let opts = CompareOptions::default();
    let cmp = compare(("a.json", &a), ("b.json", &b), &opts);
    let got: Vec<(f64, (String, String))> = cmp
        .rates
        .iter()
        .map(|d| (d.offered_rate, d.status.clone()))
        .collect();
    assert_eq!(
        got,
        [
            (5.0, ("ok".into(), "ok".into())),
            (10.0, ("ok".into(), "ok".into())),
            (20.0, ("absent".into(), "ok".into())),
        ]
    );
    assert_eq!(cmp.rates[0].ttft_p99, (Some(0.5), Some(0.25)));
    assert_eq!(cmp.rates[0].goodput, (Some(4.5), Some(5.0)));
    assert!(
        cmp.warnings
            .iter()
            .any(|w| w.starts_with("rate row ctx=0 λ=10 req/s: seed 1 vs 2")),
        "{:?}",
        cmp.warnings
    );
    assert!(
        !cmp.warnings.iter().any(|w| w.contains("λ=5 ")),
        "same schedule at 5 req/s: {:?}",
        cmp.warnings
    );
    let t = render_text(std::slice::from_ref(&cmp), &opts);
    for needle in [
        "Open-loop request rate:",
        "TTFT* p99 ms",
        "500.0→250.0 (-50.0%)",
        "4.50→5.00 (+11.1%)",
        "absent / ok",
        "yes / yes",
    ] {
        assert!(t.contains(needle), "missing {needle:?} in\n{t}");
    }
    let md = render_markdown(&[cmp], &opts);
    assert!(
        md.contains("### Open-loop request rate") && md.contains("| 0 | 5 | ok / ok |"),
        "{md}"
    );
    // A row that is not ok on one side shows its values, never a change; the search's best
    // rate is compared; different SLOs give one warning naming both.
    let mut c = with_rates();
    c.rate_results[1].status = Some(CellStatus::SkippedUser);
    c.rate_results[0].slo[0].threshold = 0.25;
    c.rate_search[0].best_rate = Some(10.0);
    let cmp = compare(("a.json", &a), ("c.json", &c), &opts);
    let t = render_text(std::slice::from_ref(&cmp), &opts);
    let line = t
        .lines()
        .find(|l| l.contains("ok / skipped_user"))
        .expect(&t);
    assert!(
        !line.contains('%'),
        "no change against a skipped row: {line}"
    );
    assert!(
        t.contains("rate search ctx=0: best req/s 5.000→10.000 (+100.0%)"),
        "{t}"
    );
    let slo: Vec<&String> = cmp.warnings.iter().filter(|w| w.contains("SLOs")).collect();
    assert_eq!(slo.len(), 1, "{:?}", cmp.warnings);
    assert!(
        slo[0].contains("A: ttft_p99=500ms, B: ttft_p99=250ms"),
        "{}",
        slo[0]
    );
    // Rate-only files: no matrix table, summary or interval legend.
    let only_rates = |mut r: Results| {
        r.results.clear();
        r.burst_results.clear();
        r.prefill.clear();
        r.prefill_warm.clear();
        r
    };
    let cmp = compare(
        ("a", &only_rates(with_rates())),
        ("b", &only_rates(with_rates())),
        &opts,
    );
    assert!(cmp.cells.is_empty(), "{:?}", cmp.cells);
    let t = render_text(std::slice::from_ref(&cmp), &opts);
    assert!(t.contains("Open-loop request rate:"), "{t}");
    for absent in ["Summary:", "Interval methods used", "A tok/s"] {
        assert!(
            !t.contains(absent),
            "{absent:?} in a rate-only comparison:\n{t}"
        );
    }
    let h = servebench_report::compare::render_html(
        &[
            ("a", &only_rates(with_rates())),
            ("b", &only_rates(with_rates())),
        ],
        &[cmp],
        &opts,
    )
    .unwrap();
    assert!(h.contains("Open-loop request rate") && !h.contains("A tok/s"));
    // Files without rate rows compare as before: no rate table.
    let plain = compare(("a", &common::full()), ("b", &common::full()), &opts);
    assert!(plain.rates.is_empty());
    assert!(!render_text(&[plain], &opts).contains("Open-loop"));
}
