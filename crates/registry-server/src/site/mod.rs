//! Server-rendered site pages (HTML, no JavaScript, no external resource): home with search and
//! filters, a list and a record sheet per collection, a hardware compare page, and a page that
//! overlays two speed sweeps. Charts are inline SVG.

pub mod charts;
pub mod compare;
pub mod home;
pub mod overlay;
pub mod sheet;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use maud::{html, Markup, PreEscaped, DOCTYPE};
use serde_json::Value;

use crate::collection::{Collection, CollectionExt as _};
use crate::http::error::ApiError;
use crate::http::query::matches_terms;
use crate::http::{clip, display_name, Ctx};
use crate::snapshot::Snapshot;

const CSS: &str = r#"
:root{--fg:#1f2328;--muted:#656d76;--line:#d0d7de;--bg:#fff;--accent:#0969da;--soft:#f6f8fa}
*{box-sizing:border-box}body{margin:0;font:15px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;color:var(--fg);background:var(--bg)}
header{background:#24292f;color:#fff;padding:.6rem 1rem}header a{color:#fff;margin-right:1rem;text-decoration:none}header a.brand{font-weight:700}
main{max-width:1180px;margin:0 auto;padding:1rem}a{color:var(--accent)}
nav.crumbs{font-size:.9rem;color:var(--muted);margin-bottom:.5rem}nav.crumbs a{color:var(--muted)}
h1{font-size:1.5rem;margin:.2rem 0 .6rem}h2{font-size:1.15rem;margin:1.4rem 0 .5rem;border-bottom:1px solid var(--line);padding-bottom:.2rem}
.links a{margin-right:1rem}.muted{color:var(--muted)}
form.filters{display:grid;grid-template-columns:repeat(auto-fill,minmax(170px,1fr));gap:.5rem;background:var(--soft);padding:.8rem;border:1px solid var(--line);border-radius:6px}
form.filters label{display:flex;flex-direction:column;font-size:.8rem;color:var(--muted)}form.filters input,form.filters select{font:inherit;padding:.25rem}
form.filters .wide{grid-column:1/-1}button{font:inherit;padding:.3rem .9rem}
.card{border:1px solid var(--line);border-radius:6px;padding:.6rem .8rem;margin:.6rem 0}.card h3{margin:0 0 .3rem;font-size:1rem}
.badge{display:inline-block;font-size:.75rem;padding:0 .45rem;border-radius:1rem;border:1px solid var(--line);margin-right:.3rem;background:var(--soft)}
.badge.ok{background:#dafbe1;border-color:#1a7f37}.badge.no{background:#ffebe9;border-color:#cf222e}
table{border-collapse:collapse;width:100%;font-size:.9rem}th,td{border-bottom:1px solid var(--line);padding:.25rem .5rem;text-align:left;vertical-align:top}th{background:var(--soft)}td.num{text-align:right;font-variant-numeric:tabular-nums}
.unknown{color:var(--muted);font-style:italic}
dl.tree{margin:0;display:grid;grid-template-columns:max-content 1fr;gap:.1rem .8rem}dl.tree>dt{font-weight:600;color:#57606a}dl.tree>dd{margin:0;min-width:0;overflow-wrap:anywhere}
ol.tree{margin:0;padding-left:1.4rem}.tree .str{color:#0a3069}.tree .num,.tree .bool{color:#953800}
.charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(520px,1fr));gap:1rem}figure{margin:0}figcaption{font-size:.85rem;color:var(--muted)}
svg{width:100%;height:auto;background:#fff;border:1px solid var(--line);border-radius:6px}
.legend span{margin-right:.8rem;font-size:.8rem}.dot{display:inline-block;width:.7rem;height:.7rem;border-radius:50%;margin-right:.25rem;vertical-align:middle}
.pager a{margin-right:1rem}footer{max-width:1180px;margin:2rem auto;padding:0 1rem;color:var(--muted);font-size:.8rem}
"#;

/// One breadcrumb: label and optional link.
pub type Crumb = (String, Option<String>);

/// The page frame: head (inline CSS, an empty inline favicon so the browser fetches nothing),
/// the top navigation, breadcrumbs and `body`.
pub fn layout(title: &str, crumbs: &[Crumb], body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · servebench registry" }
                link rel="icon" href="data:,";
                style { (PreEscaped(CSS)) }
            }
            body {
                header {
                    nav {
                        a.brand href="/" { "servebench registry" }
                        @for c in Collection::ALL {
                            a href={ "/" (c.plural()) } { (c.title()) }
                        }
                        a href="/compare" { "Compare hardware" }
                        a href="/overlay" { "Overlay sweeps" }
                        a href="/api/v1" { "API" }
                    }
                }
                main {
                    @if !crumbs.is_empty() {
                        nav.crumbs aria-label="breadcrumb" {
                            @for (i, (label, href)) in crumbs.iter().enumerate() {
                                @if i > 0 { " › " }
                                @if let Some(h) = href { a href=(h) { (label) } } @else { span { (label) } }
                            }
                        }
                    }
                    (body)
                }
                footer { "Read-only view of a local-ai-registry/v1 directory, served by servebench. Nulls are shown as unknown." }
            }
        }
    }
}

/// A complete HTML response.
pub fn html_response(status: StatusCode, m: Markup) -> Response {
    (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/html; charset=utf-8"),
        )],
        m.into_string(),
    )
        .into_response()
}

/// An HTML error page with the status and message of `e`.
pub fn error_page(e: &ApiError) -> Response {
    let title = match e.status() {
        StatusCode::NOT_FOUND => "Not found",
        StatusCode::BAD_REQUEST => "Bad request",
        _ => "Error",
    };
    html_response(
        e.status(),
        layout(
            title,
            &[("Home".into(), Some("/".into()))],
            html! { h1 { (title) } p { (e.to_string()) } p { a href="/" { "Back to the search" } } },
        ),
    )
}

/// A 404 page.
pub fn not_found(msg: &str) -> Response {
    error_page(&ApiError::NotFound(msg.into()))
}

/// Dispatches a site path.
pub fn page(snap: &Snapshot, ctx: &Ctx) -> Response {
    let s: Vec<&str> = ctx.segments.iter().map(String::as_str).collect();
    let r = match s.as_slice() {
        [] => home::page(snap, ctx),
        ["compare"] => compare::page(snap, ctx),
        ["overlay"] => overlay::page(snap, ctx),
        [name] => match Collection::from_path_segment(name) {
            Some(c) => list_page(snap, ctx, c),
            None => Err(ApiError::NotFound(format!("no page /{}", clip(name)))),
        },
        [name, id] => sheet::page(snap, ctx, name, id),
        _ => Err(ApiError::NotFound("no such page".into())),
    };
    r.unwrap_or_else(|e| error_page(&e))
}

/// The data tree of a JSON value: objects as definition lists, arrays as ordered lists, nulls
/// as an explicit "unknown", http(s) strings as links (never fetched by the page).
pub fn tree(v: &Value) -> Markup {
    match v {
        Value::Null => {
            html! { span.unknown title="null: not known or not recorded" { "unknown" } }
        }
        Value::Bool(b) => html! { span.bool { (b) } },
        Value::Number(n) => html! { span.num { (n.to_string()) } },
        Value::String(s) if s.starts_with("https://") || s.starts_with("http://") => {
            html! { a.str href=(s) rel="nofollow noreferrer" { (s) } }
        }
        Value::String(s) => html! { span.str { (s) } },
        Value::Array(a) if a.is_empty() => html! { span.unknown { "(empty list)" } },
        Value::Array(a) => {
            let list = html! { ol.tree start="0" { @for x in a { li { (tree(x)) } } } };
            if a.len() > 8 {
                html! { details { summary { (a.len()) " items" } (list) } }
            } else {
                list
            }
        }
        Value::Object(o) if o.is_empty() => html! { span.unknown { "(empty object)" } },
        Value::Object(o) => html! {
            dl.tree { @for (k, x) in o { dt { (k) } dd { (tree(x)) } } }
        },
    }
}

/// A number cell: the value with up to `dp` decimals, or an explicit unknown.
pub fn num_cell(v: Option<&Value>, dp: usize) -> Markup {
    match v.and_then(Value::as_f64) {
        Some(x) => html! { td.num { (fmt_num(x, dp)) } },
        None => html! { td.num { span.unknown title="null: not measured" { "—" } } },
    }
}

/// `x` with at most `dp` decimals, trailing zeros dropped.
pub fn fmt_num(x: f64, dp: usize) -> String {
    let s = format!("{x:.dp$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// `/{collection}`: the records of one collection, searchable with `q`, 50 a page.
fn list_page(snap: &Snapshot, ctx: &Ctx, c: Collection) -> Result<Response, ApiError> {
    let p = ctx.params(&["q", "limit", "offset"])?;
    let terms = p.terms("q")?;
    let recs = &snap.col(c).records;
    let matched: Vec<usize> = (0..recs.len())
        .filter(|&i| matches_terms(&recs[i].search, &terms))
        .collect();
    let page = p.page();
    let (next, prev) = crate::http::query::links("", &ctx.path, p, page, matched.len());
    let body = html! {
        h1 { (c.title()) " " span.muted { "(" (matched.len()) ")" } }
        form.filters method="get" action={ "/" (c.plural()) } {
            label.wide { "Search" input type="search" name="q" value=(p.get("q").unwrap_or("")) placeholder="every word must appear"; }
            div { button type="submit" { "Search" } }
        }
        p.links { a href={ "/api/v1/" (c.plural()) } { "JSON API" } }
        table {
            thead { tr { th { "id" } th { "name" } } }
            tbody {
                @for &i in matched.iter().skip(page.offset).take(page.limit) {
                    @let r = &recs[i];
                    tr { td { a href={ "/" (c.plural()) "/" (r.id) } { (r.id) } } td { (display_name(&r.value)) } }
                }
            }
        }
        (pager(prev, next))
    };
    Ok(html_response(
        StatusCode::OK,
        layout(
            c.title(),
            &[("Home".into(), Some("/".into())), (c.title().into(), None)],
            body,
        ),
    ))
}

/// Previous/next links.
pub fn pager(prev: Option<String>, next: Option<String>) -> Markup {
    html! {
        p.pager {
            @if let Some(p) = prev { a href=(p) rel="prev" { "← previous" } }
            @if let Some(n) = next { a href=(n) rel="next" { "next →" } }
        }
    }
}
