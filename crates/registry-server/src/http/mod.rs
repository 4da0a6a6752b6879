//! The HTTP layer: one dispatcher for the API (`/api/v1/...`) and the site pages, the shared
//! response headers (CORS, Cache-Control, ETag/304), and one module per API resource.
//!
//! Routing is done here on decoded path segments rather than by a path router, so that every
//! request, whatever its method or shape, goes through the same checks: GET and HEAD only, the
//! path and query bounds, id grammars before lookups.

pub mod detail;
pub mod discovery;
pub mod error;
pub mod facets;
pub mod hardware;
pub mod index;
pub mod model_instances;
pub mod models;
pub mod query;
pub mod recipes;
pub mod speed_sweeps;

use std::sync::{Arc, RwLock};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use bytes::Bytes;
use percent_encoding::percent_decode_str;
use serde_json::Value;

use crate::collection::{Collection, CollectionExt as _};
use crate::snapshot::Snapshot;
use error::ApiError;
use query::Params;

/// Longest accepted request path (bytes); longer is 414.
pub const MAX_PATH_BYTES: usize = 1024;
/// `Cache-Control` of every response.
pub const CACHE_CONTROL: &str = "public, max-age=300, stale-while-revalidate=3600";

/// What the server shares between requests: the current snapshot (swapped on reload).
#[derive(Debug)]
pub struct AppState {
    snap: RwLock<Arc<Snapshot>>,
    /// `host:port` used in absolute links when a request has no usable `Host` header.
    pub fallback_host: String,
}

impl AppState {
    /// State serving `snap`.
    pub fn new(snap: Snapshot, fallback_host: impl Into<String>) -> Arc<AppState> {
        Arc::new(AppState {
            snap: RwLock::new(Arc::new(snap)),
            fallback_host: fallback_host.into(),
        })
    }

    /// The snapshot requests read now.
    pub fn current(&self) -> Arc<Snapshot> {
        match self.snap.read() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    /// Swaps in a new snapshot (requests in flight finish on the old one).
    pub fn replace(&self, snap: Snapshot) {
        let snap = Arc::new(snap);
        match self.snap.write() {
            Ok(mut g) => *g = snap,
            Err(p) => *p.into_inner() = snap,
        }
    }
}

/// The application: API and pages, gzip when the client accepts it.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .fallback(dispatch)
        .with_state(state)
        .layer(tower_http::compression::CompressionLayer::new())
}

/// One request as the handlers see it.
#[derive(Debug)]
pub struct Ctx {
    /// The raw request path (`/api/v1/hardware`).
    pub path: String,
    /// The decoded path segments, without the leading empty one or one trailing slash.
    pub segments: Vec<String>,
    /// The query parameters (or the error parsing them gave).
    pub params: Result<Params, ApiError>,
    /// `http://host[:port]` for absolute links.
    pub base: String,
}

impl Ctx {
    /// The parsed parameters, with only `allowed` names accepted.
    pub fn params(&self, allowed: &[&str]) -> Result<&Params, ApiError> {
        let p = self.params.as_ref().map_err(Clone::clone)?;
        p.check_allowed(allowed)?;
        Ok(p)
    }

    /// Fails unless the request has no query parameter.
    pub fn no_params(&self) -> Result<(), ApiError> {
        self.params(&[]).map(drop)
    }
}

/// Splits and percent-decodes a path; `None` when a segment is not UTF-8 after decoding or an
/// inner segment is empty (`//`).
pub fn segments(path: &str) -> Option<Vec<String>> {
    let p = path.strip_prefix('/')?;
    let p = p.strip_suffix('/').unwrap_or(p);
    if p.is_empty() {
        return Some(Vec::new());
    }
    p.split('/')
        .map(|s| {
            if s.is_empty() {
                return None;
            }
            percent_decode_str(s)
                .decode_utf8()
                .ok()
                .map(|c| c.into_owned())
        })
        .collect()
}

fn valid_host(h: &str) -> bool {
    !h.is_empty()
        && h.len() <= 255
        && h.bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'-' | b':' | b'[' | b']'))
}

async fn dispatch(State(state): State<Arc<AppState>>, req: Request) -> Response {
    let snap = state.current();
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let is_api = path == "/api" || path.starts_with("/api/");
    let headers = req.headers().clone();
    let mut resp = if method != Method::GET && method != Method::HEAD {
        ApiError::MethodNotAllowed(method.to_string()).into_response()
    } else if path.len() > MAX_PATH_BYTES {
        ApiError::UriTooLong(format!(
            "path of {} bytes; at most {MAX_PATH_BYTES} are accepted",
            path.len()
        ))
        .into_response()
    } else {
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .filter(|h| valid_host(h))
            .unwrap_or(&state.fallback_host);
        let segs = segments(&path);
        let ctx = Ctx {
            base: format!("http://{host}"),
            params: Params::parse(req.uri().query()),
            segments: segs.clone().unwrap_or_default(),
            path,
        };
        if is_api {
            match segs {
                Some(_) => api(&snap, &ctx).unwrap_or_else(IntoResponse::into_response),
                None => ApiError::NotFound("no such route".into()).into_response(),
            }
        } else {
            match segs {
                Some(_) => crate::site::page(&snap, &ctx),
                None => crate::site::not_found("no such page"),
            }
        }
    };
    finish(&snap, &method, &headers, &mut resp);
    resp
}

/// Adds the shared headers; turns a 200 whose ETag the client has into a 304; empties HEAD
/// bodies (keeping their `Content-Length`).
fn finish(snap: &Snapshot, method: &Method, req_headers: &HeaderMap, resp: &mut Response) {
    let h = resp.headers_mut();
    h.insert(
        header::ACCESS_CONTROL_ALLOW_ORIGIN,
        HeaderValue::from_static("*"),
    );
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static(CACHE_CONTROL),
    );
    if resp.status() != StatusCode::OK {
        return;
    }
    if let Ok(v) = HeaderValue::from_str(&snap.etag) {
        resp.headers_mut().insert(header::ETAG, v);
    }
    let inm = req_headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| etag_matches(v, &snap.etag));
    if inm {
        *resp.status_mut() = StatusCode::NOT_MODIFIED;
        resp.headers_mut().remove(header::CONTENT_TYPE);
        resp.headers_mut().remove(header::CONTENT_LENGTH);
        *resp.body_mut() = Body::empty();
        return;
    }
    if *method == Method::HEAD {
        let body = std::mem::take(resp.body_mut());
        // Every body here is a complete buffer; its exact size is known.
        use axum::body::HttpBody as _;
        if let Some(n) = body.size_hint().exact() {
            resp.headers_mut()
                .insert(header::CONTENT_LENGTH, HeaderValue::from(n));
        }
    }
}

/// `If-None-Match` (a list, `*`, weak or strong tags) against our ETag, by weak comparison.
pub fn etag_matches(if_none_match: &str, etag: &str) -> bool {
    let ours = etag.trim_start_matches("W/");
    if_none_match
        .split(',')
        .map(str::trim)
        .any(|t| t == "*" || t.trim_start_matches("W/") == ours)
}

/// A JSON response of already-serialized bytes.
pub fn json_bytes(b: Bytes) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        b,
    )
        .into_response()
}

/// A JSON response of a value.
pub fn json_value(v: &Value) -> Response {
    json_bytes(Bytes::from(v.to_string()))
}

/// Detail envelope around serialized `data`: `{"data": <data>, "meta": {"source": "registry"}}`.
pub fn detail_envelope(data: &Bytes) -> Bytes {
    let mut out = Vec::with_capacity(data.len() + 48);
    out.extend_from_slice(b"{\"data\":");
    out.extend_from_slice(data);
    out.extend_from_slice(b",\"meta\":{\"source\":\"registry\"}}");
    Bytes::from(out)
}

fn api(snap: &Snapshot, ctx: &Ctx) -> Result<Response, ApiError> {
    let s: Vec<&str> = ctx.segments.iter().map(String::as_str).collect();
    match s.as_slice() {
        ["api", "v1"] => discovery::get(snap, ctx),
        ["api", "v1", "index"] => index::get(snap, ctx),
        ["api", "v1", "facets"] => facets::get(snap, ctx),
        ["api", "v1", name] => match Collection::from_path_segment(name) {
            Some(Collection::Model) => models::list(snap, ctx),
            Some(Collection::ModelInstance) => model_instances::list(snap, ctx),
            Some(Collection::Hardware) => hardware::list(snap, ctx),
            Some(Collection::Recipe) => recipes::list(snap, ctx),
            Some(Collection::SpeedSweep) => speed_sweeps::list(snap, ctx),
            None => Err(ApiError::NotFound(format!(
                "no route /api/v1/{}; GET /api/v1 lists the routes",
                clip(name)
            ))),
        },
        ["api", "v1", name, id] => detail::get(snap, ctx, name, id),
        _ => Err(ApiError::NotFound(
            "no such route; GET /api/v1 lists the routes".into(),
        )),
    }
}

/// The list response for the records at positions `matched` (already filtered and ordered):
/// one page of `item(position)`, with the envelope, meta and absolute links.
pub fn list_response(
    ctx: &Ctx,
    params: &Params,
    matched: &[usize],
    item: impl Fn(usize) -> Bytes,
) -> Response {
    let page = params.page();
    let items: Vec<Bytes> = matched
        .iter()
        .skip(page.offset)
        .take(page.limit)
        .map(|&i| item(i))
        .collect();
    let links = query::links(&ctx.base, &ctx.path, params, page, matched.len());
    json_bytes(query::list_body(&items, page, matched.len(), links))
}

/// A list route over one collection whose items are the records' detail payloads (hardware,
/// models, model instances, speed sweeps): the records, in `order` (index order when `None`),
/// that `keep` accepts and whose search text holds every `q` term, paged with
/// [`list_response`]. `keep` runs first, so cheap equality filters spare the text search.
///
/// Errors: a `q` with too many terms (400).
pub fn detail_list(
    snap: &Snapshot,
    ctx: &Ctx,
    params: &Params,
    c: Collection,
    order: Option<&[usize]>,
    keep: impl Fn(&crate::snapshot::Record) -> bool,
) -> Result<Response, ApiError> {
    let terms = params.terms("q")?;
    let recs = &snap.col(c).records;
    let accept = |&i: &usize| keep(&recs[i]) && query::matches_terms(&recs[i].search, &terms);
    let matched: Vec<usize> = match order {
        Some(o) => o.iter().copied().filter(accept).collect(),
        None => (0..recs.len()).filter(accept).collect(),
    };
    Ok(list_response(ctx, params, &matched, |i| {
        detail::cached(snap, c, i)
    }))
}

/// Named links (`{api, href, id, name}`) to the records of `c` at `positions`, in that order.
pub fn named_links(snap: &Snapshot, c: Collection, positions: &[usize]) -> Vec<Value> {
    let col = snap.col(c);
    positions
        .iter()
        .map(|&p| {
            let r = &col.records[p];
            link(c, &r.id, Some(display_name(&r.value)))
        })
        .collect()
}

/// The distinct positions, ascending, that `pick` gives for the recipes at `recipe_positions`
/// (e.g. the hardware or the models those recipes run on).
pub fn distinct_of_recipes(
    snap: &Snapshot,
    recipe_positions: &[usize],
    pick: impl Fn(&recipes::RecipeRel) -> Option<usize>,
) -> Vec<usize> {
    let rels = recipes::relations(snap);
    let mut out: Vec<usize> = recipe_positions
        .iter()
        .filter_map(|&r| pick(&rels[r]))
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// Recipe links ([`recipes::recipe_link`]) for the recipes at `positions`, in that order.
pub fn recipe_links(snap: &Snapshot, positions: &[usize]) -> Vec<Value> {
    let col = snap.col(Collection::Recipe);
    positions
        .iter()
        .map(|&p| recipes::recipe_link(&col.records[p].value))
        .collect()
}

/// A request-supplied string shortened for a message.
pub fn clip(s: &str) -> String {
    let t: String = s.chars().take(60).collect();
    if t.len() < s.len() {
        format!("{t}…")
    } else {
        t
    }
}

/// The link object `{api, href, id}` of a record, plus `name` when the record has one.
pub fn link(c: Collection, id: &str, name: Option<&str>) -> Value {
    let mut m = serde_json::Map::new();
    m.insert("api".into(), format!("/api/v1/{}/{id}", c.plural()).into());
    m.insert("href".into(), format!("/{}/{id}", c.plural()).into());
    m.insert("id".into(), id.into());
    if let Some(n) = name {
        m.insert("name".into(), n.into());
    }
    Value::Object(m)
}

/// A record's display name: `name`, else `repository`, else its id.
pub fn display_name(v: &Value) -> &str {
    v.get("name")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .or_else(|| v.get("repository").and_then(Value::as_str))
        .or_else(|| v.get("id").and_then(Value::as_str))
        .unwrap_or("")
}

#[cfg(test)]
pub(crate) mod testutil {
    //! Loads the repository's example registry for handler snapshot tests.
    use super::*;
    use std::sync::OnceLock;

    pub fn example() -> Arc<Snapshot> {
        static S: OnceLock<Arc<Snapshot>> = OnceLock::new();
        S.get_or_init(|| {
            let dir =
                std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/registry");
            Arc::new(crate::snapshot::load(&dir).expect("examples/registry loads"))
        })
        .clone()
    }

    pub fn ctx(path_and_query: &str) -> Ctx {
        let (path, q) = match path_and_query.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (path_and_query, None),
        };
        Ctx {
            path: path.into(),
            segments: segments(path).unwrap(),
            params: Params::parse(q),
            base: "http://localhost".into(),
        }
    }

    /// The JSON body of a handler's response, pretty-printed.
    pub fn body(r: Result<Response, ApiError>) -> String {
        let r = r.unwrap_or_else(IntoResponse::into_response);
        let bytes = futures_body(r);
        let v: Value = serde_json::from_slice(&bytes).expect("JSON body");
        serde_json::to_string_pretty(&v).unwrap()
    }

    fn futures_body(r: Response) -> Bytes {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            use http_body_util::BodyExt as _;
            r.into_body().collect().await.unwrap().to_bytes()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_parsing() {
        assert_eq!(segments("/").unwrap(), Vec::<String>::new());
        assert_eq!(segments("/api/v1/").unwrap(), ["api", "v1"]);
        assert_eq!(segments("/a%20b/c").unwrap(), ["a b", "c"]);
        assert!(segments("/a//b").is_none());
        assert!(segments("/%ff").is_none());
        assert!(segments("no-slash").is_none());
    }

    #[test]
    fn etags() {
        let e = "\"sb-abc\"";
        assert!(etag_matches("\"sb-abc\"", e));
        assert!(etag_matches("W/\"sb-abc\"", e));
        assert!(etag_matches("\"x\", \"sb-abc\"", e));
        assert!(etag_matches("*", e));
        assert!(!etag_matches("\"sb-abd\"", e));
    }
}
