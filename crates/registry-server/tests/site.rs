//! The site pages of the example registry: rendered HTML (every page type, the §5.2 filters,
//! breadcrumbs, JSON API links, explicit unknowns, the Measured speed table and SVG charts),
//! and headless Chromium opening each page type: no console message, no request leaving the
//! server, a non-blank screenshot. Without `chromium` on PATH the browser test prints
//! SKIPPED and passes, and fails where `SERVEBENCH_REQUIRE_TOOLS=1` (`.ci/run`).

use std::io::{BufRead as _, BufReader, Write as _};
use std::net::TcpListener;
use std::path::Path;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use http_body_util::BodyExt as _;
use servebench_registry_server::{load, router, AppState, ServeOptions};
use tower::ServiceExt as _;

const SWEEP: &str = "glm53-flash-exl3-q4-rtxpro6000-sglang-tp4-sweep";
const RECIPE: &str = "glm53-flash-exl3-q4-rtxpro6000-sglang-tp4";
const HW: &str = "rtx-pro-6000-blackwell-96gb";
const MODEL: &str = "glm-5-3-flash";
const INST: &str = "0xsero-glm-5-3-flash-exl3-q4--selective-exl3-q4";

fn example_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/registry")
}

async fn page(uri: &str) -> (StatusCode, String) {
    let s = AppState::new(load(&example_dir()).unwrap(), "localhost");
    let r = router(s)
        .oneshot(Request::get(uri).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = r.status();
    if status == StatusCode::OK {
        assert_eq!(
            r.headers().get(header::CONTENT_TYPE).unwrap(),
            "text/html; charset=utf-8"
        );
    }
    let b = r.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(b.to_vec()).unwrap())
}

fn count(hay: &str, needle: &str) -> usize {
    hay.matches(needle).count()
}

#[tokio::test]
async fn home_has_search_and_the_registry_filters() {
    let (st, h) = page("/").await;
    assert_eq!(st, StatusCode::OK);
    for name in [
        "q",
        "model",
        "hardware",
        "status",
        "launchable",
        "runtime",
        "engine",
        "precision",
        "vendor",
        "min_vram_gb",
        "max_vram_gb",
        "hardware_count",
        "chat",
        "reasoning",
        "tools",
        "vision",
        "evidence",
        "sort_by",
    ] {
        assert!(h.contains(&format!("name=\"{name}\"")), "filter {name}");
    }
    assert!(h.contains(&format!("href=\"/recipes/{RECIPE}\"")));
    assert!(h.contains("<details><summary>Full record</summary>"));
    // Filters apply: a validated-only search finds nothing in the example.
    let (_, h) = page("/?status=validated").await;
    assert!(h.contains("0 matching recipes"));
    let (_, h) = page("/?status=candidate&chat=unknown&engine=sglang&min_vram_gb=96").await;
    assert!(h.contains("1 matching recipes"));
    assert!(h.contains("<option value=\"candidate\" selected>"));
    let (st, _) = page("/?chat=maybe").await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn record_sheets() {
    for (path, title) in [
        (format!("/hardware/{HW}"), "NVIDIA RTX PRO 6000 Blackwell"),
        (format!("/models/{MODEL}"), "GLM-5.3-Flash"),
        (format!("/model/{MODEL}"), "GLM-5.3-Flash"),
        (
            format!("/model-instances/{INST}"),
            "0xSero/GLM-5.3-Flash-EXL3-Q4",
        ),
        (format!("/recipes/{RECIPE}"), RECIPE),
        (format!("/speed-sweeps/{SWEEP}"), SWEEP),
        (format!("/speed-sweep/{SWEEP}"), SWEEP),
    ] {
        let (st, h) = page(&path).await;
        assert_eq!(st, StatusCode::OK, "{path}");
        assert!(h.contains(&format!("<h1>{title}</h1>")), "{path} title");
        assert!(
            h.contains("<nav class=\"crumbs\" aria-label=\"breadcrumb\">"),
            "{path}"
        );
        assert!(h.contains("href=\"/api/v1/"), "{path} JSON API link");
        assert!(h.contains(">JSON API</a>"), "{path}");
        assert!(h.contains("<dl class=\"tree\">"), "{path} data tree");
        assert!(
            h.contains("class=\"unknown\""),
            "{path} nulls shown as unknown"
        );
        assert!(!h.contains(">null<"), "{path} no bare null");
    }
    let (_, h) = page(&format!("/model-instances/{INST}")).await;
    assert!(
        h.contains("Hugging Face: <a href=\"https://huggingface.co/0xSero/GLM-5.3-Flash-EXL3-Q4\"")
    );
    let (_, h) = page(&format!("/hardware/{HW}")).await;
    assert!(h.contains(&format!("href=\"/?hardware_id={HW}\">Find compatibility")));
    for path in [
        format!("/speed-sweeps/{SWEEP}"),
        format!("/recipes/{RECIPE}"),
    ] {
        let (_, h) = page(&path).await;
        assert!(h.contains("<h2>Measured speed</h2>"), "{path}");
        let table = &h[h.find("<table class=\"speed\">").unwrap()..];
        let table = &table[..table.find("</table>").unwrap()];
        assert_eq!(
            count(table, "<tr>") - 1,
            19,
            "{path}: one row per sweep row"
        );
        for col in [
            "C",
            "context tokens",
            "prefill tok/s",
            "decode tok/s per stream",
            "decode tok/s aggregate",
            "TTFT p50 ms",
            "verdict",
        ] {
            assert!(
                table.contains(&format!("<th>{col}</th>")),
                "{path} column {col}"
            );
        }
        assert!(table.contains("rejected-ep4-saturation-regression"));
        assert_eq!(count(&h, "<svg"), 3, "{path}: three charts");
        assert!(h.contains("<polyline"), "{path}");
        assert!(
            h.contains("fill=\"#cf222e\""),
            "{path}: rejected points in red"
        );
        assert!(
            h.contains("fill=\"#1a7f37\""),
            "{path}: accepted points in green"
        );
    }
    let (_, h) = page(&format!("/recipes/{RECIPE}")).await;
    assert!(
        h.contains(&format!("href=\"/speed-sweeps/{SWEEP}\"")),
        "sweep link per row"
    );
    assert!(h.contains("not launchable"));
}

#[tokio::test]
async fn pages_load_nothing_from_elsewhere() {
    for uri in [
        "/".to_string(),
        format!("/recipes/{RECIPE}"),
        format!("/speed-sweeps/{SWEEP}"),
        format!("/model-instances/{INST}"),
        "/compare".into(),
        format!("/overlay?a={SWEEP}&b={SWEEP}"),
    ] {
        let (_, h) = page(&uri).await;
        assert!(!h.contains("<script"), "{uri}: no JavaScript");
        assert!(!h.contains(" src="), "{uri}: no embedded resource");
        assert_eq!(count(&h, "<link"), 1, "{uri}: only the inline favicon");
        assert!(h.contains("<link rel=\"icon\" href=\"data:,\">"));
        assert!(
            !h.contains("@import") && !h.contains("url("),
            "{uri}: CSS loads nothing"
        );
    }
}

#[tokio::test]
async fn lists_compare_overlay_and_errors() {
    for c in [
        "hardware",
        "models",
        "model-instances",
        "recipes",
        "speed-sweeps",
    ] {
        let (st, h) = page(&format!("/{c}")).await;
        assert_eq!(st, StatusCode::OK, "{c}");
        assert!(h.contains("<table>"), "{c}");
    }
    let (st, h) = page("/compare").await;
    assert_eq!(st, StatusCode::OK);
    assert!(
        h.contains("FP16 TFLOPS</a> ▼"),
        "default sort FP16 descending"
    );
    assert!(h.contains(&format!("href=\"/hardware/{HW}\"")));
    let (_, h) = page("/compare?sort=vram&dir=asc&vendor=nvidia").await;
    assert!(h.contains("VRAM GB</a> ▲"));
    assert_eq!(
        page("/compare?sort=colour").await.0,
        StatusCode::BAD_REQUEST
    );
    let (st, h) = page(&format!("/overlay?a={SWEEP}&b={SWEEP}")).await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(count(&h, "<svg"), 3);
    assert!(h.contains("stroke-dasharray=\"6 4\""), "B dashed");
    assert!(h.contains("A ctx 128"));
    assert!(h.contains("B ctx 128"));
    let (st, h) = page("/overlay").await;
    assert_eq!(st, StatusCode::OK);
    assert!(h.contains("Choose two sweeps"));
    for (uri, st) in [
        ("/nope", StatusCode::NOT_FOUND),
        ("/recipes/UPPER", StatusCode::NOT_FOUND),
        ("/recipes/no-such-recipe", StatusCode::NOT_FOUND),
        ("/a/b/c", StatusCode::NOT_FOUND),
        ("/overlay?a=..%2F..", StatusCode::NOT_FOUND),
        ("/examples", StatusCode::NOT_FOUND),
        ("/recipe", StatusCode::OK),
    ] {
        let (got, h) = page(uri).await;
        assert_eq!(got, st, "{uri}");
        assert!(h.starts_with("<!DOCTYPE html>"), "{uri}");
    }
}

/// A proxy that refuses everything and records what reached it: any request Chromium sends to
/// a host other than the loopback server.
fn trap_proxy() -> (u16, Arc<Mutex<Vec<String>>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    std::thread::spawn(move || {
        for c in l.incoming().flatten() {
            let mut line = String::new();
            let _ = BufReader::new(&c).read_line(&mut line);
            // A connection that sends no request line (Chromium pre-connects to its proxy)
            // carries no URL: nothing was requested. Every request line is recorded.
            if !line.trim().is_empty() {
                s.lock().unwrap().push(line.trim().to_string());
            }
            let _ = (&c).write_all(b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n");
        }
    });
    (port, seen)
}

/// Chromium's own background services (component updater, network clock, account, autofill
/// and safe-browsing services, connectivity checks against `www.google.com`): they reach the
/// trap proxy whatever the page is, and which of them a build calls changes from one Chromium
/// release to the next, so every Google service host counts — except the hosts a page would use
/// as a CDN (`fonts.googleapis.com`, `fonts.gstatic.com`, `ajax.googleapis.com`, any
/// `*.gstatic.com`), which stay failures. That a page loads nothing from outside is also
/// checked on the HTML itself (`pages_load_nothing_from_elsewhere`). Any other host is a failure.
fn is_browser_housekeeping(request_line: &str) -> bool {
    const CDN_HOSTS: [&str; 2] = ["fonts.googleapis.com", "ajax.googleapis.com"];
    let target = request_line.split_whitespace().nth(1).unwrap_or("");
    let host = target
        .trim_start_matches("http://")
        .trim_start_matches("https://")
        .split(['/', ':'])
        .next()
        .unwrap_or("")
        .to_ascii_lowercase();
    if CDN_HOSTS.contains(&host.as_str()) || host.ends_with("gstatic.com") {
        return false;
    }
    host == "google.com"
        || [".google.com", ".googleapis.com", ".gvt1.com"]
            .iter()
            .any(|d| host.ends_with(d))
}

#[test]
fn housekeeping_hosts() {
    for l in [
        "CONNECT www.google.com:443 HTTP/1.1",
        "CONNECT clients2.google.com:443 HTTP/1.1",
        "CONNECT update.googleapis.com:443 HTTP/1.1",
        "GET http://redirector.gvt1.com/x HTTP/1.1",
    ] {
        assert!(is_browser_housekeeping(l), "{l}");
    }
    for l in [
        "CONNECT fonts.googleapis.com:443 HTTP/1.1",
        "CONNECT fonts.gstatic.com:443 HTTP/1.1",
        "CONNECT cdn.jsdelivr.net:443 HTTP/1.1",
        "CONNECT google.com.evil.example:443 HTTP/1.1",
        "GET http://unpkg.com/x HTTP/1.1",
    ] {
        assert!(!is_browser_housekeeping(l), "{l}");
    }
}

/// Share of pixels that differ from the most common colour, and the number of colours.
fn ink(png_path: &Path) -> (f64, usize) {
    let dec = png::Decoder::new(std::fs::File::open(png_path).unwrap());
    let mut reader = dec.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    let bpp = info.color_type.samples();
    let px: Vec<&[u8]> = buf[..info.buffer_size()].chunks(bpp).collect();
    let mut counts = std::collections::HashMap::new();
    for p in &px {
        *counts.entry(p.to_vec()).or_insert(0usize) += 1;
    }
    let most = counts.values().max().copied().unwrap_or(0);
    (1.0 - most as f64 / px.len() as f64, counts.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_opens_every_page_type() {
    let chromium = ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|b| {
            std::process::Command::new("sh")
                .args(["-c", &format!("command -v {b}")])
                .output()
                .is_ok_and(|o| o.status.success())
        });
    let Some(chromium) = chromium else {
        servebench_testkit::missing_tool(
            "chromium_opens_every_page_type",
            "chromium",
            "apt-get install chromium",
        );
        return;
    };
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let running = servebench_registry_server::start(
        ServeOptions {
            port: 0,
            ..ServeOptions::new(example_dir())
        },
        async {
            let _ = rx.await;
        },
    )
    .await
    .unwrap();
    let base = format!("http://{}", running.addr);
    let (trap, seen) = trap_proxy();
    let tmp = tempfile::tempdir().unwrap();
    let pages = [
        "/".to_string(),
        "/?status=candidate&chat=unknown".into(),
        "/recipes".into(),
        format!("/hardware/{HW}"),
        format!("/models/{MODEL}"),
        format!("/model-instances/{INST}"),
        format!("/recipes/{RECIPE}"),
        format!("/speed-sweeps/{SWEEP}"),
        "/compare".into(),
        format!("/overlay?a={SWEEP}&b={SWEEP}"),
    ];
    let mut failures = Vec::new();
    for (i, p) in pages.iter().enumerate() {
        let shot = tmp.path().join(format!("page{i}.png"));
        let url = format!("{base}{p}");
        let args = vec![
            "60".to_string(),
            chromium.to_string(),
            "--headless".into(),
            "--no-sandbox".into(),
            "--disable-gpu".into(),
            "--no-first-run".into(),
            "--disable-background-networking".into(),
            "--disable-component-update".into(),
            "--disable-sync".into(),
            "--hide-scrollbars".into(),
            "--no-default-browser-check".into(),
            "--disable-domain-reliability".into(),
            "--disable-client-side-phishing-detection".into(),
            "--disable-features=NetworkTimeServiceQuerying,AutofillServerCommunication,OptimizationHints,MediaRouter".into(),
            format!("--user-data-dir={}", tmp.path().join("profile").display()),
            "--enable-logging=stderr".into(),
            "--v=1".into(),
            format!("--proxy-server=http://127.0.0.1:{trap}"),
            format!("--screenshot={}", shot.display()),
            "--window-size=1280,1600".into(),
            url.clone(),
        ];
        let out = tokio::task::spawn_blocking(move || {
            std::process::Command::new("timeout").args(&args).output()
        })
        .await
        .unwrap()
        .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        for l in stderr.lines().filter(|l| l.contains(":CONSOLE")) {
            failures.push(format!("{p}: console: {l}"));
        }
        if !shot.exists() {
            failures.push(format!("{p}: no screenshot (exit {:?})", out.status.code()));
            continue;
        }
        let (ink, colours) = ink(&shot);
        eprintln!("{p}: screenshot ink {:.1}%, {colours} colours", ink * 100.0);
        if ink < 0.01 || colours < 8 {
            failures.push(format!(
                "{p}: blank screenshot (ink {ink:.4}, {colours} colours)"
            ));
        }
    }
    let leaked = seen.lock().unwrap().clone();
    let (browser, page_reqs): (Vec<&String>, Vec<&String>) =
        leaked.iter().partition(|l| is_browser_housekeeping(l));
    eprintln!(
        "{} requests of Chromium's own services (updater, clock, accounts, connectivity) went to the trap proxy",
        browser.len()
    );
    for l in page_reqs {
        failures.push(format!("request left the server: {l}"));
    }
    let _ = tx.send(());
    let _ = running.task.await;
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
