//! Per-gap ITL (issue 19) in the CSV and the text report: columns appended last only for files
//! that have them, values as stored, documented; a text matrix of p99 and p99.9 / max.

mod common;

use servebench_report::{csv_export, render_text, ReportOptions};
use servebench_results::{CellStatus, GapBucket, ItlGaps};

fn with_gaps() -> servebench_results::Results {
    let mut r = common::full();
    let c = r
        .results
        .iter_mut()
        .find(|c| c.status == CellStatus::Ok)
        .expect("an ok cell");
    c.itl_gaps = Some(ItlGaps {
        gaps: 1000,
        mean: 0.0103,
        p50: 0.01,
        p90: 0.011,
        p99: 0.0125,
        p99_9: 0.25,
        max: 0.3,
        histogram: vec![GapBucket {
            le_s: 0.016384,
            count: 1000,
        }],
    });
    c.peak_output_tps_1s = Some(640.0);
    r
}

#[test]
fn csv_appends_gap_columns_only_when_there_are_gaps() {
    let text = csv_export::render_csv(&with_gaps()).unwrap();
    let mut rdr = csv::Reader::from_reader(text.as_bytes());
    let header: Vec<String> = rdr.headers().unwrap().iter().map(String::from).collect();
    let mut want: Vec<&str> = csv_export::columns().iter().map(|c| c.0).collect();
    want.extend(csv_export::gap_columns().iter().map(|c| c.0));
    assert_eq!(header, want);
    let col = |n: &str| header.iter().position(|h| h == n).unwrap();
    let rows: Vec<csv::StringRecord> = rdr.records().map(|r| r.unwrap()).collect();
    let with: Vec<&csv::StringRecord> = rows
        .iter()
        .filter(|r| !r[col("itl_gap_max_s")].is_empty())
        .collect();
    assert_eq!(with.len(), 1);
    assert_eq!(&with[0][col("itl_gap_p99_9_s")], "0.25");
    assert_eq!(&with[0][col("itl_gap_count")], "1000");
    assert_eq!(&with[0][col("peak_output_tps_1s")], "640");
    let plain = csv_export::render_csv(&common::full()).unwrap();
    assert!(!plain.lines().next().unwrap().contains("itl_gap"));
}

#[test]
fn gap_csv_columns_are_documented() {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/exports.md"
    ))
    .unwrap();
    for (name, _) in csv_export::gap_columns() {
        assert!(
            doc.contains(&format!("| `{name}` |")),
            "docs/exports.md does not document {name}"
        );
    }
}

#[test]
fn text_report_shows_the_gap_tail() {
    let text = render_text(&with_gaps(), &ReportOptions::default());
    assert!(text.contains("Per-gap ITL p99"), "{text}");
    assert!(text.contains("250/300"), "p99.9 / max in ms: {text}");
    let plain = render_text(&common::full(), &ReportOptions::default());
    assert!(!plain.contains("Per-gap ITL"));
}

/// Burst / E2E cells with gaps get their own per-gap matrix after the Burst / E2E matrix
/// (issue 19 leftover: only the sustained matrix had one).
#[test]
fn text_report_shows_the_burst_gap_tail() {
    let mut r = common::full();
    assert!(!r.burst_results.is_empty());
    let b = r
        .burst_results
        .iter_mut()
        .find(|c| c.status == CellStatus::Ok)
        .expect("an ok burst cell");
    b.itl_gaps = Some(ItlGaps {
        gaps: 500,
        mean: 0.02,
        p50: 0.02,
        p90: 0.021,
        p99: 0.0225,
        p99_9: 0.125,
        max: 0.175,
        histogram: vec![],
    });
    let text = render_text(&r, &ReportOptions::default());
    let at = text
        .find("Burst / E2E: Per-gap ITL p99")
        .unwrap_or_else(|| panic!("{text}"));
    assert!(text[at..].contains("125/175"), "p99.9 / max in ms: {text}");
    assert!(
        text.find("Burst / E2E tok/s").unwrap() < at,
        "after the Burst / E2E matrix"
    );
    // the sustained cells have no gaps here: no sustained per-gap matrix
    assert_eq!(text.matches("Per-gap ITL p99").count(), 1, "{text}");
}

/// New-user check of issue 19: the HTML report had no per-gap ITL at all. It now has a
/// table (p50 … max, peak tok/s) with the gap histogram as bars; files without gaps have none.
#[test]
fn html_report_shows_the_gap_tail_and_histogram() {
    let html =
        servebench_report::html::render_html(&with_gaps(), &ReportOptions::default()).unwrap();
    assert!(
        html.contains("<h2 id=\"itl-gaps\">Per-gap ITL</h2>"),
        "{html}"
    );
    assert!(
        html.contains(">250<") || html.contains(">250.0<"),
        "p99.9 in ms"
    );
    assert!(
        html.contains(">300<") || html.contains(">300.0<"),
        "max in ms"
    );
    assert!(
        html.contains("<title>≤ 16.4 ms: 1000 gaps</title>")
            || html.contains(": 1000 gaps</title>")
    );
    let plain =
        servebench_report::html::render_html(&common::full(), &ReportOptions::default()).unwrap();
    assert!(!plain.contains("id=\"itl-gaps\""));
}
