//! Prepared responses: the bytes of a 200 (and, on first demand, their gzip) kept per snapshot
//! and request target (path and query), so a repeated request costs a hash lookup and a copy of
//! reference-counted bytes, and a conditional request (`If-None-Match`) is answered before any
//! body work. A snapshot swap drops them all (each snapshot holds its own).
//!
//! Bounds: at most [`CACHE_BYTES`] of bodies (plain + gzip) and [`CACHE_ENTRIES`] entries per
//! snapshot; a body over [`ENTRY_MAX_BYTES`] is answered but not kept. When full, new targets are
//! built per request (still correct, only slower).

use std::collections::HashMap;
use std::io::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::Response;
use bytes::Bytes;

use super::{etag_matches, shared_headers, AppState};
use crate::snapshot::Snapshot;

/// Most body bytes (plain + gzip) kept per snapshot: 512 MiB.
pub const CACHE_BYTES: usize = 512 << 20;
/// Most prepared targets kept per snapshot.
pub const CACHE_ENTRIES: usize = 200_000;
/// Largest body kept: 128 MiB.
pub const ENTRY_MAX_BYTES: usize = 128 << 20;
/// Bodies shorter than this are never gzipped (bytes).
pub const GZIP_MIN_BYTES: usize = 1024;
/// Bodies at least this long are gzipped on a blocking thread under the page-worker limit.
const GZIP_BLOCKING_BYTES: usize = 256 << 10;

/// One prepared 200.
#[derive(Debug)]
pub struct Prepared {
    content_type: Option<HeaderValue>,
    body: Bytes,
    gz: tokio::sync::OnceCell<Bytes>,
}

impl Prepared {
    /// Takes the body and content type of a 200 built by a handler.
    pub async fn from_response(r: Response) -> Prepared {
        let content_type = r.headers().get(header::CONTENT_TYPE).cloned();
        // Handler bodies are complete buffers; collecting moves them.
        let body = axum::body::to_bytes(r.into_body(), usize::MAX)
            .await
            .unwrap_or_default();
        Prepared {
            content_type,
            body,
            gz: tokio::sync::OnceCell::new(),
        }
    }

    /// The uncompressed body.
    pub fn body(&self) -> &Bytes {
        &self.body
    }

    async fn gzip(&self, state: &AppState) -> Bytes {
        self.gz
            .get_or_init(|| async {
                if self.body.len() < GZIP_BLOCKING_BYTES {
                    return gzip(&self.body);
                }
                let body = self.body.clone();
                let permit = state.pages.clone().acquire_owned().await;
                tokio::task::spawn_blocking(move || {
                    let _permit = permit;
                    gzip(&body)
                })
                .await
                .unwrap_or_default()
            })
            .await
            .clone()
    }
}

fn gzip(b: &[u8]) -> Bytes {
    let mut e = flate2::write::GzEncoder::new(
        Vec::with_capacity(b.len() / 4 + 64),
        flate2::Compression::new(6),
    );
    let _ = e.write_all(b);
    Bytes::from(e.finish().unwrap_or_default())
}

/// The prepared responses of one snapshot.
#[derive(Debug, Default)]
pub struct ResponseCache {
    map: RwLock<HashMap<String, Arc<Prepared>>>,
    bytes: AtomicUsize,
}

impl ResponseCache {
    /// The prepared response of `target` (path and query, as requested).
    pub fn prepared(&self, target: &str) -> Option<Arc<Prepared>> {
        self.map.read().ok()?.get(target).cloned()
    }

    /// Keeps `p` for `target` when the bounds allow.
    pub fn keep(&self, target: String, p: Arc<Prepared>) {
        let n = p.body.len();
        if n > ENTRY_MAX_BYTES || self.bytes.load(Ordering::Relaxed) + n > CACHE_BYTES {
            return;
        }
        let Ok(mut m) = self.map.write() else {
            return;
        };
        if m.len() >= CACHE_ENTRIES {
            return;
        }
        if m.insert(target, p).is_none() {
            self.bytes.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Number of prepared targets.
    pub fn len(&self) -> usize {
        self.map.read().map_or(0, |m| m.len())
    }

    /// True when nothing is prepared.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// True when `Accept-Encoding` accepts gzip (`gzip`, `x-gzip` or `*`, with a non-zero `q`).
pub fn accepts_gzip(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|item| {
            let mut parts = item.split(';');
            let coding = parts.next().unwrap_or("").trim();
            let q_zero = parts.any(|p| {
                p.trim()
                    .strip_prefix("q=")
                    .and_then(|q| q.trim().parse::<f64>().ok())
                    .is_some_and(|q| q <= 0.0)
            });
            !q_zero
                && (coding.eq_ignore_ascii_case("gzip")
                    || coding.eq_ignore_ascii_case("x-gzip")
                    || coding == "*")
        })
}

/// Answers a request from a prepared 200: a 304 when `If-None-Match` matches the snapshot's
/// ETag, else the body (gzip when accepted and at least [`GZIP_MIN_BYTES`]). HEAD gets the
/// headers GET would get, `Content-Length` included, and no body.
pub async fn respond(
    state: &AppState,
    snap: &Snapshot,
    p: &Prepared,
    method: &Method,
    req: &HeaderMap,
) -> Response {
    let mut r = Response::new(Body::empty());
    let h = r.headers_mut();
    shared_headers(h);
    if let Ok(v) = HeaderValue::from_str(&snap.etag) {
        h.insert(header::ETAG, v);
    }
    let inm = req
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| etag_matches(v, &snap.etag));
    if inm {
        *r.status_mut() = StatusCode::NOT_MODIFIED;
        return r;
    }
    let body = if p.body.len() >= GZIP_MIN_BYTES && accepts_gzip(req) {
        let gz = p.gzip(state).await;
        let h = r.headers_mut();
        h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        gz
    } else {
        p.body.clone()
    };
    let h = r.headers_mut();
    if let Some(ct) = &p.content_type {
        h.insert(header::CONTENT_TYPE, ct.clone());
    }
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
    if *method != Method::HEAD {
        *r.body_mut() = Body::from(body);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_encoding() {
        let h = |v: &str| {
            let mut m = HeaderMap::new();
            m.insert(header::ACCEPT_ENCODING, HeaderValue::from_str(v).unwrap());
            accepts_gzip(&m)
        };
        assert!(h("gzip"));
        assert!(h("br, gzip;q=0.5"));
        assert!(h("*"));
        assert!(!h("gzip;q=0"));
        assert!(!h("br, deflate"));
        assert!(!h("identity"));
        assert!(!accepts_gzip(&HeaderMap::new()));
    }
}
