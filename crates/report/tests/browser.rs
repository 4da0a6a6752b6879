//! The HTML reports opened by headless Chromium (Debian's `chromium`): for fixture results (the
//! seed, the old tool's file, a servebench file with every kind of row) and a comparison page,
//! the page loads with no console message at all (no error, and no request blocked by the page's
//! `default-src 'none'` policy — any attempted network request is logged as a console message),
//! the rendered DOM has no element or attribute that loads anything, and the screenshot is not blank.
//!
//! Without `chromium` on the PATH the test prints `SKIPPED` and passes; `.ci/run` installs it and
//! sets `SERVEBENCH_REQUIRE_TOOLS=1`, which turns a missing browser into a failure.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use servebench_report::compare::{compare, render_html as compare_html, CompareOptions};
use servebench_report::{html, ReportOptions};

fn chromium() -> Option<PathBuf> {
    for name in ["chromium", "chromium-browser"] {
        if let Ok(out) = Command::new("sh")
            .args(["-c", &format!("command -v {name}")])
            .output()
        {
            let p = String::from_utf8_lossy(&out.stdout).trim().to_string();
            if out.status.success() && !p.is_empty() {
                return Some(PathBuf::from(p));
            }
        }
    }
    None
}

/// Runs Chromium headless on `page` with `extra` flags; returns (stdout, stderr).
fn run_chromium(bin: &Path, dir: &Path, page: &Path, extra: &[&str]) -> (String, String) {
    let profile = tempfile::tempdir_in(dir).unwrap();
    let out = Command::new("timeout")
        .arg("120")
        .arg(bin)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-extensions",
            "--enable-logging=stderr",
            "--v=0",
            "--window-size=1280,2000",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(extra)
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("run chromium");
    assert!(
        out.status.success(),
        "chromium failed on {}: {}",
        page.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Console messages Chromium logged (`INFO:CONSOLE…] "message", source: …`).
fn console_lines(stderr: &str) -> Vec<&str> {
    stderr.lines().filter(|l| l.contains(":CONSOLE")).collect()
}

/// Share of pixels that differ from the most common colour, and the number of distinct colours.
fn png_variety(path: &Path) -> (f64, usize) {
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(path).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    let bytes = &buf[..info.buffer_size()];
    let step = info.color_type.samples()
        * if info.bit_depth == png::BitDepth::Sixteen {
            2
        } else {
            1
        };
    let mut counts = std::collections::HashMap::<&[u8], usize>::new();
    for px in bytes.chunks_exact(step) {
        *counts.entry(px).or_default() += 1;
    }
    let total = bytes.len() / step;
    let most = counts.values().copied().max().unwrap_or(0);
    (1.0 - most as f64 / total as f64, counts.len())
}

/// The rendered DOM asks for nothing outside the page: no element that loads a resource and no
/// attribute or CSS `url()` naming an http(s) address (server URLs in the text are only text).
fn assert_no_external_resources(dom: &str, what: &str) {
    let lower = dom.to_lowercase();
    for tag in [
        "<script", "<link", "<img", "<iframe", "<object", "<embed", "<video", "<audio", "<source",
    ] {
        assert!(
            !lower.contains(tag),
            "{what}: the page has a {tag}> element"
        );
    }
    for attr in [
        "src=\"http",
        "href=\"http",
        "srcset=",
        "url(http",
        "url(\"http",
        "url('http",
        "action=\"http",
        "@import",
    ] {
        assert!(
            !lower.contains(attr),
            "{what}: the page refers to an external resource ({attr})"
        );
    }
}

/// Opens `page` and checks it loads cleanly and renders something.
fn check_page(bin: &Path, dir: &Path, page: &Path) {
    let shot = page.with_extension("png");
    let (_, stderr) = run_chromium(
        bin,
        dir,
        page,
        &[&format!("--screenshot={}", shot.display())],
    );
    let console = console_lines(&stderr);
    assert!(
        console.is_empty(),
        "{}: console messages (errors or blocked requests):\n{}",
        page.display(),
        console.join("\n")
    );
    let (non_bg, colours) = png_variety(&shot);
    assert!(
        non_bg > 0.02 && colours > 20,
        "{}: the screenshot looks blank ({:.3} of pixels differ from the background, {colours} colours)",
        page.display(),
        non_bg
    );
    let (dom, stderr) = run_chromium(bin, dir, page, &["--dump-dom"]);
    assert!(console_lines(&stderr).is_empty(), "{}", stderr);
    assert!(
        dom.contains("<svg"),
        "{}: no SVG in the rendered DOM",
        page.display()
    );
    assert_no_external_resources(&dom, &page.display().to_string());
}

#[test]
fn html_reports_load_offline_in_headless_chromium() {
    let Some(bin) = chromium() else {
        servebench_testkit::missing_tool(
            "html_reports_load_offline_in_headless_chromium",
            "chromium",
            "apt-get install chromium; .ci/run installs it",
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut pages = Vec::new();
    for (name, r) in [
        ("seed", common::seed()),
        ("old-tool", common::old_tool()),
        ("full", common::full()),
    ] {
        let p = dir.path().join(format!("{name}.html"));
        let opts = ReportOptions {
            percentiles: vec![50.0, 99.0],
            ..Default::default()
        };
        std::fs::write(&p, html::render_html(&r, &opts).unwrap()).unwrap();
        pages.push(p);
    }
    let (a, mut b) = (common::full(), common::full());
    for c in &mut b.results {
        c.aggregate_tps = c.aggregate_tps.map(|v| v * 0.8);
    }
    let opts = CompareOptions::default();
    let cmp = compare(("a.json", &a), ("b.json", &b), &opts);
    let p = dir.path().join("compare.html");
    std::fs::write(
        &p,
        compare_html(&[("a.json", &a), ("b.json", &b)], &[cmp], &opts).unwrap(),
    )
    .unwrap();
    pages.push(p);
    for p in &pages {
        check_page(&bin, dir.path(), p);
    }
}

/// The checks can fail: a page that loads an external image and runs a script is caught.
#[test]
fn the_browser_check_catches_a_network_request() {
    let Some(bin) = chromium() else {
        servebench_testkit::missing_tool(
            "the_browser_check_catches_a_network_request",
            "chromium",
            "apt-get install chromium; .ci/run installs it",
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bad.html");
    let page = html::render_html(&common::full(), &ReportOptions::default())
        .unwrap()
        .replace("</body>", "<img src=\"http://192.0.2.1/x.png\"></body>");
    std::fs::write(&p, page).unwrap();
    let (dom, stderr) = run_chromium(&bin, dir.path(), &p, &["--dump-dom"]);
    let caught = std::panic::catch_unwind(|| assert_no_external_resources(&dom, "bad.html"));
    assert!(caught.is_err(), "the DOM check missed the external image");
    assert!(
        console_lines(&stderr)
            .iter()
            .any(|l| l.contains("192.0.2.1")),
        "the blocked request was not logged:\n{stderr}"
    );
}
