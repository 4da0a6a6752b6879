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
pub mod prepared;
pub mod query;
pub mod recipes;
pub mod speed_sweeps;

use std::sync::{Arc, RwLock};

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

/// What the server shares between requests: the current snapshot (swapped on reload), the
/// public base URL of absolute links and the page-rendering limit.
#[derive(Debug)]
pub struct AppState {
    snap: RwLock<Arc<Snapshot>>,
    /// `scheme://host[:port]` of absolute links (API `links`), without a trailing slash: the
    /// configured public URL, else `http://<bound address>`. The request's `Host` header is
    /// never used, so cached bodies cannot carry a client-chosen host.
    pub public_base: String,
    /// Site pages rendered at once (each on a blocking thread), so that pages never take
    /// every core from the API. See [`page_workers`].
    pages: Arc<tokio::sync::Semaphore>,
}

/// How many site pages render at once: one fewer than the cores (at least 1).
pub fn page_workers() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get().saturating_sub(1))
        .max(1)
}

/// Longest time a page request waits for a rendering slot before a 503 (s).
pub const PAGE_QUEUE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);

impl AppState {
    /// State serving `snap`, with absolute links under `public_base` (`http://` is prepended
    /// when it has no scheme; a trailing `/` is dropped).
    pub fn new(snap: Snapshot, public_base: impl Into<String>) -> Arc<AppState> {
        let b: String = public_base.into();
        let b = b.trim_end_matches('/');
        let public_base = if b.contains("://") {
            b.to_string()
        } else {
            format!("http://{b}")
        };
        Arc::new(AppState {
            snap: RwLock::new(Arc::new(snap)),
            public_base,
            pages: Arc::new(tokio::sync::Semaphore::new(page_workers())),
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
        self.swap(Arc::new(snap))
    }

    /// [`AppState::replace`] with a shared snapshot (one [`warm`] has prepared).
    pub fn swap(&self, snap: Arc<Snapshot>) {
        match self.snap.write() {
            Ok(mut g) => *g = snap,
            Err(p) => *p.into_inner() = snap,
        }
    }
}

/// The application: API and pages. Bodies are gzipped here (prepared once, see
/// [`prepared::Prepared`]), not by a compression layer on the async workers.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new().fallback(dispatch).with_state(state)
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
    /// `scheme://host[:port]` for absolute links ([`AppState::public_base`]).
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

/// Every request: method and path checks, then the snapshot's prepared response for this
/// path and query when there is one (a conditional request is answered from it without any
/// body work), else the response is built (API on the async worker, pages on a blocking thread
/// under the [`page_workers`] limit), kept when 200, and answered.
async fn dispatch(State(state): State<Arc<AppState>>, req: Request) -> Response {
    let snap = state.current();
    let method = req.method().clone();
    let headers = req.headers().clone();
    let path = req.uri().path().to_string();
    if method != Method::GET && method != Method::HEAD {
        return plain(ApiError::MethodNotAllowed(method.to_string()).into_response());
    }
    if path.len() > MAX_PATH_BYTES {
        return plain(
            ApiError::UriTooLong(format!(
                "path of {} bytes; at most {MAX_PATH_BYTES} are accepted",
                path.len()
            ))
            .into_response(),
        );
    }
    let key = req
        .uri()
        .path_and_query()
        .map_or_else(|| path.clone(), |pq| pq.as_str().to_string());
    let p = match snap.cache.prepared(&key) {
        Some(p) => p,
        None => {
            let query = req.uri().query().map(str::to_string);
            let resp = build(&state, snap.clone(), path, query).await;
            if resp.status() != StatusCode::OK {
                return plain(resp);
            }
            let p = Arc::new(prepared::Prepared::from_response(resp).await);
            snap.cache.keep(key, p.clone());
            p
        }
    };
    prepared::respond(&state, &snap, &p, &method, &headers).await
}

/// Builds the response of a GET to `path?query` on `snap`.
pub(crate) async fn build(
    state: &Arc<AppState>,
    snap: Arc<Snapshot>,
    path: String,
    query: Option<String>,
) -> Response {
    let is_api = path == "/api" || path.starts_with("/api/");
    let segs = segments(&path);
    let ctx = Ctx {
        base: state.public_base.clone(),
        params: Params::parse(query.as_deref()),
        segments: segs.clone().unwrap_or_default(),
        path,
    };
    if is_api {
        return match segs {
            Some(_) => api(&snap, &ctx).unwrap_or_else(IntoResponse::into_response),
            None => ApiError::NotFound("no such route".into()).into_response(),
        };
    }
    if segs.is_none() {
        return crate::site::not_found("no such page");
    }
    let permit =
        match tokio::time::timeout(PAGE_QUEUE_TIMEOUT, state.pages.clone().acquire_owned()).await {
            Ok(Ok(p)) => p,
            _ => {
                tracing::warn!(
                    path = %ctx.path,
                    "refused a page: no rendering slot within {} s (every page worker busy)",
                    PAGE_QUEUE_TIMEOUT.as_secs()
                );
                let mut r = crate::site::error_page(&ApiError::Busy(
                    "every page worker is busy; try again shortly".into(),
                ));
                r.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
                return r;
            }
        };
    tokio::task::spawn_blocking(move || {
        let _permit = permit;
        crate::site::page(&snap, &ctx)
    })
    .await
    .unwrap_or_else(|_| {
        crate::site::error_page(&ApiError::Busy("the page could not be rendered".into()))
    })
}

/// The targets prepared before a snapshot serves: the home page, every list page and API list,
/// the discovery document, the index and the facets.
pub fn warm_targets() -> Vec<String> {
    let mut t: Vec<String> = ["/", "/api/v1", "/api/v1/index", "/api/v1/facets"]
        .map(String::from)
        .to_vec();
    for c in Collection::ALL {
        t.push(format!("/api/v1/{}", c.plural()));
        t.push(format!("/{}", c.plural()));
    }
    t
}

/// Prepares the [`warm_targets`] of `snap` (served through `state`'s limits).
pub async fn warm(state: &Arc<AppState>, snap: Arc<Snapshot>) {
    for target in warm_targets() {
        if snap.cache.prepared(&target).is_some() {
            continue;
        }
        let resp = build(state, snap.clone(), target.clone(), None).await;
        if resp.status() == StatusCode::OK {
            let p = Arc::new(prepared::Prepared::from_response(resp).await);
            snap.cache.keep(target, p);
        }
    }
}

/// Adds the shared headers to a response that is not a prepared 200 (errors).
fn plain(mut resp: Response) -> Response {
    shared_headers(resp.headers_mut());
    resp
}

/// `Access-Control-Allow-Origin`, `Cache-Control` and `Vary` (on every response, 304s too).
pub(crate) fn shared_headers(h: &mut HeaderMap) {
    h.insert(
        header::ACCESS_CONTROL_ALLOW_ORIGIN,
        HeaderValue::from_static("*"),
    );
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static(CACHE_CONTROL),
    );
    h.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
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
