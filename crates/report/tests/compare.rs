//! `compare` on fixture results: the three interval methods, the verdicts, the comparability
//! warnings and the text / Markdown forms (golden).

mod common;

use servebench_report::compare::{
    compare, render_markdown, render_text, CompareOptions, IntervalMethod, Verdict,
};
use servebench_results::Results;

/// `r` with every decode cell's throughput and per-request speed scaled by `f` (ITL / f).
fn scaled(r: &Results, f: f64) -> Results {
    let mut r = r.clone();
    for c in r.results.iter_mut().chain(r.burst_results.iter_mut()) {
        c.aggregate_tps = c.aggregate_tps.map(|v| v * f);
        c.per_request_avg_tps = c.per_request_avg_tps.map(|v| v * f);
        c.inter_token_latency_p50 = c.inter_token_latency_p50.map(|v| v / f);
        c.inter_token_latency_p90 = c.inter_token_latency_p90.map(|v| v / f);
        for s in &mut c.request_samples {
            s.inter_token_latency_avg = s.inter_token_latency_avg.map(|v| v / f);
            s.output_tps_per_user = s.output_tps_per_user.map(|v| v * f);
        }
    }
    r
}

fn sustained(
    cmp: &servebench_report::compare::Comparison,
    c: u64,
    ctx: u64,
) -> &servebench_report::compare::CellDiff {
    cmp.cells
        .iter()
        .find(|d| d.layer == "sustained" && d.concurrency == c && d.context == ctx)
        .unwrap()
}

#[test]
fn identical_files_show_no_difference() {
    let a = common::full();
    let cmp = compare(("a", &a), ("b", &a), &CompareOptions::default());
    assert!(cmp.warnings.is_empty(), "{:?}", cmp.warnings);
    let d = sustained(&cmp, 4, 0);
    assert_eq!(d.tps.pct, Some(0.0));
    assert_eq!(d.tps.method, IntervalMethod::RequestBootstrap);
    let (lo, hi) = d.tps.ci_pct.unwrap();
    assert!(lo <= 0.0 && hi >= 0.0, "[{lo}, {hi}]");
    assert_eq!(d.tps.verdict, Verdict::Same);
    assert!(cmp.slower_than(0.0).is_empty());
}

#[test]
fn a_slower_run_is_a_regression_with_an_interval_below_zero() {
    let a = common::full();
    let b = scaled(&a, 0.8);
    let cmp = compare(("a", &a), ("b", &b), &CompareOptions::default());
    let d = sustained(&cmp, 4, 0);
    assert!((d.tps.pct.unwrap() + 20.0).abs() < 1e-9);
    let (lo, hi) = d.tps.ci_pct.unwrap();
    assert!(lo < -20.0 && hi < 0.0 && hi > -20.0, "[{lo}, {hi}]");
    assert_eq!(d.tps.verdict, Verdict::Slower);
    assert_eq!(d.itl_p50.verdict, Verdict::Slower);
    // The failed and skipped cells are not compared; the capacity-limited one is hidden.
    assert_eq!(sustained(&cmp, 4, 8192).tps.verdict, Verdict::Missing);
    assert_eq!(sustained(&cmp, 16, 0).status.0, "capacity-limited");
    // 3 measured sustained cells + 2 burst cells.
    assert_eq!(cmp.slower_than(10.0).len(), 5);
    assert!(cmp.slower_than(25.0).is_empty());
    // The other way round it is faster.
    let rev = compare(("b", &b), ("a", &a), &CompareOptions::default());
    assert_eq!(sustained(&rev, 4, 0).tps.verdict, Verdict::Faster);
    // Below the noise threshold nothing is marked.
    let tiny = scaled(&a, 0.99);
    let cmp = compare(("a", &a), ("b", &tiny), &CompareOptions::default());
    assert_eq!(sustained(&cmp, 4, 0).tps.verdict, Verdict::Same);
}

#[test]
fn without_samples_the_interval_comes_from_the_stored_spread() {
    let mut a = common::full();
    for c in &mut a.results {
        c.request_samples.clear();
    }
    let b = scaled(&a, 0.8);
    let cmp = compare(("a", &a), ("b", &b), &CompareOptions::default());
    let d = sustained(&cmp, 4, 0);
    assert_eq!(d.tps.method, IntervalMethod::SpreadEstimate);
    let (lo, hi) = d.tps.ci_pct.unwrap();
    assert!(lo < hi && hi < 0.0, "[{lo}, {hi}]");
    // The seed has one request per cell: no interval, no verdict.
    let s = common::seed();
    let cmp = compare(
        ("a", &s),
        ("b", &scaled(&s, 0.5)),
        &CompareOptions::default(),
    );
    let d = sustained(&cmp, 1, 0);
    assert_eq!(d.tps.method, IntervalMethod::None);
    assert_eq!(d.tps.verdict, Verdict::Unknown);
    assert!(cmp.slower_than(1.0).is_empty());
}

#[test]
fn warnings_name_what_differs() {
    let a = common::full();
    let mut b = a.clone();
    b.metadata.model = "other".into();
    b.metadata.max_tokens = 128;
    b.metadata.ignore_eos = false;
    b.metadata.engine_version = Some("0.33.0".into());
    for c in b.results.iter_mut().filter(|c| c.context_tokens == 0) {
        c.prompt_tokens = Some(500);
    }
    let w = compare(("a", &a), ("b", &b), &CompareOptions::default()).warnings;
    for want in [
        "model differs",
        "max_tokens differs",
        "ignore_eos differs",
        "engine version differs",
        "prompt size at context 0 differs",
    ] {
        assert!(w.iter().any(|x| x.contains(want)), "{want}: {w:?}");
    }
}

#[test]
fn text_and_markdown_golden() {
    let a = common::old_tool();
    let b = scaled(&a, 0.8);
    let opts = CompareOptions::default();
    let cmps = [compare(("old.json", &a), ("slower.json", &b), &opts)];
    insta::assert_snapshot!("compare_text", render_text(&cmps, &opts));
    insta::assert_snapshot!("compare_md", render_markdown(&cmps, &opts));
}

#[test]
fn run_to_run_noise_does_not_fail_the_gate() {
    // Two runs of the same build: B 5 % (and 2.4 %) lower with a tight within-run interval, as
    // happens a minute apart on a loaded machine. The within-run interval cannot see that
    // noise; `--fail-if-slower 5` (and 2 for the 2.4 % case) must not fire.
    let a = common::full();
    for (f, gate) in [(0.95, 5.0), (0.976, 2.0)] {
        let b = scaled(&a, f);
        let cmp = compare(("a", &a), ("b", &b), &CompareOptions::default());
        assert!(
            cmp.slower_than(gate).is_empty(),
            "x{f} fails --fail-if-slower {gate}: {:?}",
            cmp.slower_than(gate)
                .iter()
                .map(|d| (d.concurrency, d.context, d.tps.pct, d.tps.ci_pct))
                .collect::<Vec<_>>()
        );
    }
    // A real 20 % regression still fails a 5 % gate.
    let b = scaled(&a, 0.8);
    let cmp = compare(("a", &a), ("b", &b), &CompareOptions::default());
    assert!(!cmp.slower_than(5.0).is_empty());
}

#[test]
fn a_busy_machine_needs_repeats_instead_of_a_verdict() {
    let a = common::full();
    let mut b = scaled(&a, 0.8);
    for c in b.results.iter_mut().chain(b.burst_results.iter_mut()) {
        c.client_max_tick_lag_ms = Some(180.0);
    }
    let cmp = compare(("a", &a), ("b", &b), &CompareOptions::default());
    let d = sustained(&cmp, 4, 0);
    assert_eq!(d.tps.verdict, Verdict::NeedsRepeats);
    assert_eq!(d.tps.verdict.as_str(), "needs repeats (busy machine)");
    assert!(cmp.slower_than(5.0).is_empty());
}

#[test]
fn words_agree_with_signs() {
    use servebench_report::compare::{verdict_for, Better};
    // "-38.9 % (same)": a large change whose interval spans 0 is unclear, not the same.
    let v = verdict_for(Some(-38.9), Some((-70.0, 12.0)), Better::Lower, 2.0, false);
    assert_eq!(v, Verdict::Unclear);
    assert_eq!(v.short(), "unclear");
    assert_eq!(
        verdict_for(Some(-8.7), Some((-12.0, -5.0)), Better::Lower, 2.0, false),
        Verdict::Faster
    );
    assert_eq!(
        verdict_for(Some(1.0), Some((-3.0, 5.0)), Better::Lower, 2.0, false),
        Verdict::Same
    );
}
