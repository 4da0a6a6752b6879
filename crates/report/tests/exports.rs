//! Golden tests of the CSV and Markdown exports (the old tool's files and a servebench file with
//! every kind of row), the CSV columns' documentation, and the HTML report's self-containment.
//! Review snapshot changes with `cargo insta review` (or `INSTA_UPDATE=always`).

mod common;

use servebench_report::export::ExportFormat;
use servebench_report::{csv_export, html, markdown, render_text, ReportOptions};

fn pcts(p: &[f64]) -> ReportOptions {
    ReportOptions {
        percentiles: p.to_vec(),
        ..Default::default()
    }
}

#[test]
fn csv_golden() {
    insta::assert_snapshot!("csv_seed", csv_export::render_csv(&common::seed()).unwrap());
    insta::assert_snapshot!(
        "csv_old_tool",
        csv_export::render_csv(&common::old_tool()).unwrap()
    );
    insta::assert_snapshot!("csv_full", csv_export::render_csv(&common::full()).unwrap());
}

#[test]
fn csv_rows_and_columns_are_stable() {
    let text = csv_export::render_csv(&common::full()).unwrap();
    let mut rdr = csv::Reader::from_reader(text.as_bytes());
    let header: Vec<String> = rdr.headers().unwrap().iter().map(String::from).collect();
    let names: Vec<&str> = csv_export::columns().iter().map(|c| c.0).collect();
    assert_eq!(header, names);
    let rows: Vec<csv::StringRecord> = rdr.records().map(|r| r.unwrap()).collect();
    // 6 sustained + 2 burst cells + 2 cold + 1 warm prefill rows.
    assert_eq!(rows.len(), 11);
    // A reason with a comma, quotes and a bar survives quoting.
    let invalid = rows.iter().find(|r| &r[4] == "invalid").unwrap();
    assert_eq!(&invalid[5], "a stream failed: HTTP 500, \"boom\" | retry");
    // Not measured = empty field, never 0.
    let cap = rows.iter().find(|r| &r[4] == "skipped_capacity").unwrap();
    assert_eq!(&cap[6], "");
}

#[test]
fn csv_columns_are_documented() {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/exports.md"
    ))
    .unwrap();
    for (name, _) in csv_export::columns() {
        assert!(
            doc.contains(&format!("| `{name}` |")),
            "docs/exports.md does not document the CSV column {name}"
        );
    }
}

#[test]
fn markdown_golden() {
    insta::assert_snapshot!(
        "md_seed",
        markdown::render_markdown(&common::seed(), &ReportOptions::default())
    );
    insta::assert_snapshot!(
        "md_old_tool",
        markdown::render_markdown(&common::old_tool(), &ReportOptions::default())
    );
    insta::assert_snapshot!(
        "md_full_p50_p90_p99",
        markdown::render_markdown(&common::full(), &pcts(&[50.0, 90.0, 99.0]))
    );
}

#[test]
fn text_report_percentiles() {
    let text = render_text(&common::full(), &pcts(&[50.0, 95.0]));
    insta::assert_snapshot!("text_full_p50_p95", text);
    // p95 is not stored: it comes from the request samples, so it differs from p50.
    let r = common::full();
    let c = &r.results[1];
    let p50 = servebench_report::cells::percentile(c, servebench_report::cells::Metric::Ttft, 50.0);
    let p95 = servebench_report::cells::percentile(c, servebench_report::cells::Metric::Ttft, 95.0);
    assert!(p95.unwrap() > p50.unwrap(), "{p50:?} {p95:?}");
}

#[test]
fn legend_lists_only_marks_that_appear() {
    // The old tool's file has capacity-limited cells only: no ∅-over-budget, ctx, skip, ERROR.
    let text = render_text(&common::old_tool(), &ReportOptions::default());
    let legend: String = text
        .lines()
        .skip_while(|l| !l.starts_with("Legend:"))
        .take_while(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("\n");
    assert!(legend.contains("capacity-limited"), "{legend}");
    for absent in ["ctx =", "skip =", "ERROR", "KV-cache budget"] {
        assert!(
            !legend.contains(absent),
            "legend lists {absent:?}:\n{legend}"
        );
    }
    // The seed has only ok cells: no legend at all.
    let seed = render_text(&common::seed(), &ReportOptions::default());
    assert!(!seed.contains("Legend"), "{seed}");
}

/// Every `http(s)://` in markup (outside text) is an XML namespace, which browsers never fetch;
/// addresses in the text (the server's URL, the event log) are only text.
pub fn assert_no_external_urls(page: &str) {
    let mut in_tag = false;
    let bytes = page.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'<' => in_tag = true,
            b'>' => in_tag = false,
            b'h' if in_tag => {
                let rest = &page[i..];
                if rest.starts_with("http://") || rest.starts_with("https://") {
                    assert!(
                        rest.starts_with("http://www.w3.org/2000/svg")
                            || rest.starts_with("http://www.w3.org/1999/xlink"),
                        "the page's markup refers to an external URL: {}",
                        &rest[..rest.len().min(80)]
                    );
                }
            }
            _ => {}
        }
    }
}

#[test]
fn html_is_self_contained() {
    for (name, r) in [
        ("seed", common::seed()),
        ("old", common::old_tool()),
        ("full", common::full()),
    ] {
        let page = html::render_html(&r, &ReportOptions::default()).unwrap();
        assert!(page.starts_with("<!DOCTYPE html>"), "{name}");
        assert!(page.contains("default-src 'none'"), "{name}: no CSP");
        assert!(!page.contains("<script"), "{name}: has a script");
        assert!(!page.contains(" src="), "{name}: loads a resource");
        assert!(!page.contains("<link"), "{name}: links a resource");
        assert_no_external_urls(&page);
        assert!(page.contains("<svg"), "{name}: no plot");
        // The same bytes through the exporter trait.
        let via = ExportFormat::Html
            .exporter()
            .serialize(&r, &ReportOptions::default())
            .unwrap();
        assert_eq!(via, page.as_bytes());
    }
    let page = html::render_html(&common::full(), &ReportOptions::default()).unwrap();
    for want in [
        "Run summary",
        "bench-host",
        "vllm 0.32.1",
        "Per-user speed vs server throughput",
        "TTFT vs concurrency",
        "ITL per token vs concurrency",
        "Prefill tok/s vs context",
        "Burst / E2E decode",
        "Request latency (E2E)",
        "TTFT distribution, ctx 0",
        "ITL distribution, ctx 8k",
        "Cells not measured",
        "skipped_capacity",
        "a stream failed: HTTP 500, &quot;boom&quot; | retry",
        "the server preempted 3 requests",
        "Methodology",
        "hsl(",
        "startup warning: the server reports no KV-cache budget &lt;none&gt;",
        "Event log",
    ] {
        assert!(page.contains(want), "the HTML report lacks {want:?}");
    }
}

/// Issue 17 break-it round 5: a dangling symbolic link at NAME.1.json was renamed over (and
/// destroyed); it is a taken name like any other.
#[cfg(unix)]
#[test]
fn rotate_never_renames_over_a_dangling_link() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("r.json");
    std::fs::write(&p, "OLD").unwrap();
    let link = dir.path().join("r.1.json");
    std::os::unix::fs::symlink(dir.path().join("nowhere"), &link).unwrap();
    let kept = servebench_report::rotate_existing(&p).unwrap().unwrap();
    assert_eq!(kept, dir.path().join("r.2.json"));
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(std::fs::read_to_string(kept).unwrap(), "OLD");
}

#[test]
fn rotate_keeps_previous_files() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("results.json");
    assert_eq!(servebench_report::rotate_existing(&p).unwrap(), None);
    std::fs::write(&p, "first").unwrap();
    let kept = servebench_report::rotate_existing(&p).unwrap().unwrap();
    assert_eq!(kept, dir.path().join("results.1.json"));
    std::fs::write(&p, "second").unwrap();
    let kept = servebench_report::rotate_existing(&p).unwrap().unwrap();
    assert_eq!(kept, dir.path().join("results.2.json"));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("results.1.json")).unwrap(),
        "first"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("results.2.json")).unwrap(),
        "second"
    );
    assert!(!p.exists());
}

/// Issue 17 break-it round 4: a model id with a line feed, a carriage return and U+202E (which
/// reverses what follows on a terminal) was printed raw in the report's header, and the
/// Markdown export passed `<`, `>`, `&` through (GitHub renders them as HTML).
#[test]
fn a_hostile_model_id_stays_one_line_of_text_everywhere() {
    let mut r = common::full();
    r.metadata.model = "evil\nINJECTED LINE\r<img src=x onerror=alert(1)> & \u{202E}txt.exe".into();
    let text = render_text(&r, &pcts(&[50.0]));
    let header = text.lines().next().unwrap();
    assert!(header.contains("evil INJECTED LINE"), "{header}");
    assert!(!text.lines().any(|l| l.starts_with("INJECTED LINE")));
    for out in [
        text.clone(),
        String::from_utf8(ExportFormat::Markdown.render(&r, &pcts(&[50.0])).unwrap()).unwrap(),
        String::from_utf8(ExportFormat::Text.render(&r, &pcts(&[50.0])).unwrap()).unwrap(),
    ] {
        assert!(!out.contains('\u{202E}') && !out.contains('\r'), "{out}");
    }
    let md = markdown::render_markdown(&r, &pcts(&[50.0]));
    assert!(!md.contains("<img"), "{md}");
    assert!(
        md.contains("&lt;img src=x onerror=alert(1)&gt; &amp;"),
        "{md}"
    );
    assert!(!md.lines().any(|l| l.starts_with("INJECTED LINE")));
}

/// Break-it round 8: a status reason or warning with CR / LF (a file that `validate` accepts)
/// overwrote a line or forged one in the text report's "Cells not measured" and "Warnings".
#[test]
fn reasons_and_warnings_stay_one_line_in_the_text_report() {
    let mut r = common::full();
    r.results[0].status = servebench_results::CellStatus::Invalid;
    r.results[0].status_reason = "X\rOVERWRITE\nFAKE LINE".into();
    r.results[0].warnings = vec!["W\r\nFORGED WARNING".into()];
    let text = String::from_utf8(ExportFormat::Text.render(&r, &pcts(&[50.0])).unwrap()).unwrap();
    assert!(!text.contains('\r'), "{text}");
    assert!(
        !text
            .lines()
            .any(|l| l.starts_with("FAKE LINE") || l.starts_with("FORGED WARNING")),
        "{text}"
    );
    assert!(text.contains("X OVERWRITE FAKE LINE"), "{text}");
}
