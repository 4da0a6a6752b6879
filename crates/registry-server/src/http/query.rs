//! Query-string parsing, pagination and the filter predicates shared by every list route
//! (spec §5.1).
//!
//! Parsing is bounded and total: any byte string gives `Ok` or an [`ApiError`], never a panic
//! (property-tested in `tests/query_props.rs`).

use std::borrow::Cow;
use std::cmp::Ordering;

use bytes::Bytes;
use serde_json::{json, Value};

use super::error::ApiError;

/// Longest accepted raw query string (bytes); longer is 414.
pub const MAX_QUERY_BYTES: usize = 2048;
/// Most query parameters accepted in one request; more is 400.
pub const MAX_PARAMS: usize = 32;
/// Longest accepted decoded parameter value (chars); longer is 400.
pub const MAX_VALUE_CHARS: usize = 256;
/// Most whitespace-separated `q` terms; more is 400.
pub const MAX_TERMS: usize = 16;
/// Default page size.
pub const DEFAULT_LIMIT: usize = 25;
/// Largest page size (`limit` is clamped to 1..=100).
pub const MAX_LIMIT: usize = 100;

/// The decoded query parameters of one request, in order, each name once.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Params {
    pairs: Vec<(String, String)>,
}

/// A page: `offset` records skipped, at most `limit` returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Page {
    /// Page size, 1..=100 (default 25).
    pub limit: usize,
    /// Records skipped, ≥ 0 (default 0).
    pub offset: usize,
}

/// A tri-state filter value: `true`, `false` or `unknown` (= null or absent).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tri {
    True,
    False,
    Unknown,
}

impl Tri {
    /// True when `v` is in this state: `Bool(true)`, `Bool(false)`, or null/absent.
    pub fn matches(self, v: Option<&Value>) -> bool {
        matches!(
            (self, v),
            (Tri::True, Some(Value::Bool(true)))
                | (Tri::False, Some(Value::Bool(false)))
                | (Tri::Unknown, None | Some(Value::Null))
        )
    }
}

impl Params {
    /// Parses a raw (still percent-encoded) query string.
    ///
    /// Errors: over [`MAX_QUERY_BYTES`] → 414; over [`MAX_PARAMS`] parameters, a name given
    /// twice, or a value over [`MAX_VALUE_CHARS`] → 400. Empty pairs (`a=1&&b=2`) are skipped.
    pub fn parse(raw: Option<&str>) -> Result<Params, ApiError> {
        let raw = raw.unwrap_or("");
        if raw.len() > MAX_QUERY_BYTES {
            return Err(ApiError::UriTooLong(format!(
                "query string of {} bytes; at most {MAX_QUERY_BYTES} are accepted",
                raw.len()
            )));
        }
        let mut pairs: Vec<(String, String)> = Vec::new();
        for (k, v) in form_urlencoded::parse(raw.as_bytes()) {
            if k.is_empty() && v.is_empty() {
                continue;
            }
            if pairs.len() == MAX_PARAMS {
                return Err(ApiError::BadRequest(format!(
                    "more than {MAX_PARAMS} query parameters"
                )));
            }
            if v.chars().count() > MAX_VALUE_CHARS {
                return Err(ApiError::BadRequest(format!(
                    "parameter {}: value longer than {MAX_VALUE_CHARS} characters",
                    short(&k)
                )));
            }
            if pairs.iter().any(|(pk, _)| *pk == k) {
                return Err(ApiError::BadRequest(format!(
                    "parameter {} given more than once",
                    short(&k)
                )));
            }
            pairs.push((k.into_owned(), v.into_owned()));
        }
        Ok(Params { pairs })
    }

    /// Fails with 400 naming the first parameter not in `allowed` (and listing those).
    pub fn check_allowed(&self, allowed: &[&str]) -> Result<(), ApiError> {
        if let Some((k, _)) = self
            .pairs
            .iter()
            .find(|(k, _)| !allowed.contains(&k.as_str()))
        {
            let list = if allowed.is_empty() {
                "none".to_string()
            } else {
                allowed.join(", ")
            };
            return Err(ApiError::BadRequest(format!(
                "unknown query parameter {}; this route accepts: {list}",
                short(k)
            )));
        }
        Ok(())
    }

    /// The pairs, in request order.
    pub fn pairs(&self) -> &[(String, String)] {
        &self.pairs
    }

    /// The value of `name`, trimmed; `None` when absent or empty (an empty filter matches
    /// everything).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.trim())
            .filter(|v| !v.is_empty())
    }

    /// `limit` (truncated, clamped to 1..=100; non-numeric or non-finite → 25) and `offset`
    /// (truncated, ≥ 0; non-numeric → 0).
    pub fn page(&self) -> Page {
        let num = |name| {
            self.get(name)
                .and_then(|v| v.parse::<f64>().ok())
                .filter(|x| x.is_finite())
        };
        let limit = num("limit")
            .map(|x| x.trunc().clamp(1.0, MAX_LIMIT as f64) as usize)
            .unwrap_or(DEFAULT_LIMIT);
        let offset = num("offset")
            .map(|x| x.trunc().clamp(0.0, usize::MAX as f64) as usize)
            .unwrap_or(0);
        Page { limit, offset }
    }

    /// A finite number, or `None` (absent, empty, not a number or not finite: ignored).
    pub fn number(&self, name: &str) -> Option<f64> {
        self.get(name)
            .and_then(|v| v.parse::<f64>().ok())
            .filter(|x| x.is_finite())
    }

    /// A tri-state filter (`true|false|unknown`, case-insensitive); 400 for another value.
    pub fn tri(&self, name: &str) -> Result<Option<Tri>, ApiError> {
        match self.get(name).map(str::to_ascii_lowercase).as_deref() {
            None => Ok(None),
            Some("true") => Ok(Some(Tri::True)),
            Some("false") => Ok(Some(Tri::False)),
            Some("unknown") => Ok(Some(Tri::Unknown)),
            Some(_) => Err(ApiError::BadRequest(format!(
                "parameter {name}: expected true, false or unknown"
            ))),
        }
    }

    /// A boolean filter (`true|false`, case-insensitive); 400 for another value.
    pub fn boolean(&self, name: &str) -> Result<Option<bool>, ApiError> {
        match self.get(name).map(str::to_ascii_lowercase).as_deref() {
            None => Ok(None),
            Some("true") => Ok(Some(true)),
            Some("false") => Ok(Some(false)),
            Some(_) => Err(ApiError::BadRequest(format!(
                "parameter {name}: expected true or false"
            ))),
        }
    }

    /// One of `choices` (case-insensitive, returned lowercased); 400 for another value.
    pub fn choice(&self, name: &str, choices: &[&str]) -> Result<Option<String>, ApiError> {
        match self.get(name).map(str::to_ascii_lowercase) {
            None => Ok(None),
            Some(v) if choices.contains(&v.as_str()) => Ok(Some(v)),
            Some(_) => Err(ApiError::BadRequest(format!(
                "parameter {name}: expected one of {}",
                choices.join(", ")
            ))),
        }
    }

    /// The lowercased whitespace-separated terms of `name` (usually `q`); 400 over
    /// [`MAX_TERMS`].
    pub fn terms(&self, name: &str) -> Result<Vec<String>, ApiError> {
        let Some(v) = self.get(name) else {
            return Ok(Vec::new());
        };
        let terms: Vec<String> = v
            .split_whitespace()
            .map(|t| t.chars().flat_map(char::to_lowercase).collect())
            .collect();
        if terms.len() > MAX_TERMS {
            return Err(ApiError::BadRequest(format!(
                "parameter {name}: more than {MAX_TERMS} terms"
            )));
        }
        Ok(terms)
    }

    /// The query string with `offset` and `limit` set to `page` (other parameters kept in
    /// order), percent-encoded.
    pub fn with_page(&self, page: Page) -> String {
        let mut s = form_urlencoded::Serializer::new(String::new());
        let (mut saw_limit, mut saw_offset) = (false, false);
        for (k, v) in &self.pairs {
            match k.as_str() {
                "limit" => {
                    saw_limit = true;
                    s.append_pair(k, &page.limit.to_string());
                }
                "offset" => {
                    saw_offset = true;
                    s.append_pair(k, &page.offset.to_string());
                }
                _ => {
                    s.append_pair(k, v);
                }
            }
        }
        if !saw_limit {
            s.append_pair("limit", &page.limit.to_string());
        }
        if !saw_offset {
            s.append_pair("offset", &page.offset.to_string());
        }
        s.finish()
    }
}

/// A parameter name shortened for an error message.
fn short(s: &str) -> String {
    let t: String = s.chars().take(40).collect();
    format!("{t:?}")
}

/// The `next` and `previous` links of a page over `total` records: absolute URLs
/// (`base` = `http://host`, `path` = the request path). `next` exists when
/// offset + limit < total; `previous` when offset > 0, pointing at max(0, offset − limit).
pub fn links(
    base: &str,
    path: &str,
    params: &Params,
    page: Page,
    total: usize,
) -> (Option<String>, Option<String>) {
    let url = |p: Page| format!("{base}{path}?{}", params.with_page(p));
    let next = (page.offset.saturating_add(page.limit) < total).then(|| {
        url(Page {
            limit: page.limit,
            offset: page.offset + page.limit,
        })
    });
    let previous = (page.offset > 0).then(|| {
        url(Page {
            limit: page.limit,
            offset: page.offset.saturating_sub(page.limit),
        })
    });
    (next, previous)
}

/// The list envelope `{data: [...], links: {next, previous}, meta: {limit, offset, returned,
/// source, total}}` around the already-serialized items of one page.
pub fn list_body(
    items: &[Bytes],
    page: Page,
    total: usize,
    links: (Option<String>, Option<String>),
) -> Bytes {
    let tail = json!({
        "links": {"next": links.0, "previous": links.1},
        "meta": {
            "limit": page.limit,
            "offset": page.offset,
            "returned": items.len(),
            "source": "registry",
            "total": total,
        },
    })
    .to_string();
    let mut out = Vec::with_capacity(items.iter().map(|b| b.len() + 1).sum::<usize>() + 200);
    out.extend_from_slice(b"{\"data\":[");
    for (i, b) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b);
    }
    out.extend_from_slice(b"],");
    // `tail` is `{"links":...,"meta":...}`: splice its members after `data`.
    out.extend_from_slice(&tail.as_bytes()[1..]);
    Bytes::from(out)
}

/// A primitive JSON value as a string (strings as is, numbers and booleans formatted);
/// `None` for null, arrays, objects and absence.
pub fn value_str(v: Option<&Value>) -> Option<Cow<'_, str>> {
    match v? {
        Value::String(s) => Some(Cow::Borrowed(s)),
        Value::Number(n) => Some(Cow::Owned(n.to_string())),
        Value::Bool(b) => Some(Cow::Borrowed(if *b { "true" } else { "false" })),
        _ => None,
    }
}

/// Case-insensitive string equality of a primitive value with `want`; `None` (no filter)
/// matches everything. A number matches its decimal form (`hardware_count=2`). ASCII is
/// compared without allocating; other text by its lowercase form.
pub fn eq_ci(v: Option<&Value>, want: Option<&str>) -> bool {
    match want {
        None => true,
        Some(w) => value_str(v).is_some_and(|s| {
            if s.is_ascii() && w.is_ascii() {
                s.eq_ignore_ascii_case(w)
            } else {
                s.to_lowercase() == w.to_lowercase()
            }
        }),
    }
}

/// Like [`eq_ci`], but `unknown` matches null or absent (models' `architecture`).
pub fn eq_ci_or_unknown(v: Option<&Value>, want: Option<&str>) -> bool {
    match want {
        Some(w) if w.eq_ignore_ascii_case("unknown") => matches!(v, None | Some(Value::Null)),
        _ => eq_ci(v, want),
    }
}

/// Inclusive numeric range: true when no bound is given; otherwise `v` must be a number with
/// min ≤ v ≤ max.
pub fn in_range(v: Option<f64>, min: Option<f64>, max: Option<f64>) -> bool {
    if min.is_none() && max.is_none() {
        return true;
    }
    let Some(x) = v else { return false };
    min.is_none_or(|m| x >= m) && max.is_none_or(|m| x <= m)
}

/// True when every term is a substring of `search` (already lowercased); no terms → true.
pub fn matches_terms(search: &str, terms: &[String]) -> bool {
    terms.iter().all(|t| search.contains(t.as_str()))
}

/// True when `needle` (already lowercased) is a case-insensitive substring of any of `hay`;
/// `None` (no filter) matches everything. ASCII text is searched without allocating.
pub fn text_matches(needle: Option<&str>, hay: &[Option<&str>]) -> bool {
    let Some(n) = needle else { return true };
    hay.iter().flatten().any(|h| contains_ci(h, n))
}

/// Case-insensitive substring test; `needle_lower` must be lowercase.
pub fn contains_ci(hay: &str, needle_lower: &str) -> bool {
    if hay.is_ascii() && needle_lower.is_ascii() {
        let (h, n) = (hay.as_bytes(), needle_lower.as_bytes());
        n.is_empty() || h.windows(n.len()).any(|w| w.eq_ignore_ascii_case(n))
    } else {
        hay.to_lowercase().contains(needle_lower)
    }
}

/// Numeric ("natural") collation, case-insensitive: digit runs compare by value, so
/// `rtx-4090` < `rtx-10000` and `Qwen3-8B` < `Qwen3-14B`.
pub fn natural_cmp(a: &str, b: &str) -> Ordering {
    let (mut x, mut y) = (a.as_bytes(), b.as_bytes());
    loop {
        match (x.first(), y.first()) {
            (None, None) => return a.cmp(b),
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(c), Some(d)) if c.is_ascii_digit() && d.is_ascii_digit() => {
                let nx = x.iter().take_while(|c| c.is_ascii_digit()).count();
                let ny = y.iter().take_while(|c| c.is_ascii_digit()).count();
                let (dx, dy) = (&x[..nx], &y[..ny]);
                let tx = trim_zeros(dx);
                let ty = trim_zeros(dy);
                let o = tx.len().cmp(&ty.len()).then_with(|| tx.cmp(ty));
                if o != Ordering::Equal {
                    return o;
                }
                x = &x[nx..];
                y = &y[ny..];
            }
            (Some(c), Some(d)) => {
                let o = c.to_ascii_lowercase().cmp(&d.to_ascii_lowercase());
                if o != Ordering::Equal {
                    return o;
                }
                x = &x[1..];
                y = &y[1..];
            }
        }
    }
}

fn trim_zeros(d: &[u8]) -> &[u8] {
    let z = d.iter().take_while(|&&c| c == b'0').count();
    &d[z..]
}

/// The value at a key path (`&["weights", "precision"]`): like a JSON pointer over object keys,
/// without parsing or allocating.
pub fn at_path<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(v, |v, k| v.get(*k))
}

/// An equality filter ([`eq_ci`]) on the value at `path`; no filter (`want` = `None`) matches
/// without reading the record.
pub fn eq_path(v: &Value, path: &[&str], want: Option<&str>) -> bool {
    want.is_none() || eq_ci(at_path(v, path), want)
}

/// A number at a JSON pointer, if it is one.
pub fn num_at(v: &Value, pointer: &str) -> Option<f64> {
    v.pointer(pointer).and_then(Value::as_f64)
}

/// A string at a JSON pointer, if it is one.
pub fn str_at<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer).and_then(Value::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_defaults_and_clamps() {
        let p = |q: &str| Params::parse(Some(q)).unwrap().page();
        assert_eq!(
            p(""),
            Page {
                limit: 25,
                offset: 0
            }
        );
        assert_eq!(p("limit=0").limit, 1);
        assert_eq!(p("limit=1000").limit, 100);
        assert_eq!(p("limit=7.9").limit, 7);
        assert_eq!(p("limit=NaN").limit, 25);
        assert_eq!(p("limit=inf").limit, 25);
        assert_eq!(p("limit=abc").limit, 25);
        assert_eq!(p("offset=-5").offset, 0);
        assert_eq!(p("offset=12").offset, 12);
        assert_eq!(p("offset=1e300").offset, usize::MAX);
    }

    #[test]
    fn bounds_and_duplicates() {
        assert!(matches!(
            Params::parse(Some(&"a".repeat(MAX_QUERY_BYTES + 1))),
            Err(ApiError::UriTooLong(_))
        ));
        let many: Vec<String> = (0..=MAX_PARAMS).map(|i| format!("p{i}=1")).collect();
        assert!(Params::parse(Some(&many.join("&"))).is_err());
        assert!(Params::parse(Some("q=a&q=b")).is_err());
        assert!(Params::parse(Some("a=1&&b=2")).is_ok());
        let p = Params::parse(Some("vendor=NVIDIA&x=1")).unwrap();
        assert!(p.check_allowed(&["vendor"]).is_err());
        assert!(p.check_allowed(&["vendor", "x"]).is_ok());
    }

    #[test]
    fn links_follow_the_spec() {
        let params = Params::parse(Some("vendor=nvidia&limit=10&offset=10")).unwrap();
        let page = params.page();
        let (next, prev) = links("http://h", "/api/v1/hardware", &params, page, 25);
        assert_eq!(
            next.as_deref(),
            Some("http://h/api/v1/hardware?vendor=nvidia&limit=10&offset=20")
        );
        assert_eq!(
            prev.as_deref(),
            Some("http://h/api/v1/hardware?vendor=nvidia&limit=10&offset=0")
        );
        let (next, _) = links(
            "http://h",
            "/x",
            &params,
            Page {
                limit: 10,
                offset: 15,
            },
            25,
        );
        assert!(next.is_none());
        let (_, prev) = links(
            "http://h",
            "/x",
            &params,
            Page {
                limit: 10,
                offset: 3,
            },
            25,
        );
        assert!(prev.unwrap().ends_with("offset=0"));
    }

    #[test]
    fn filters() {
        assert!(eq_ci(Some(&json!("NVIDIA")), Some("nvidia")));
        assert!(eq_ci(Some(&json!(2)), Some("2")));
        assert!(!eq_ci(Some(&Value::Null), Some("x")));
        assert!(eq_ci(None, None));
        let v = json!({"weights": {"precision": "FP8"}, "n": 2});
        assert!(eq_path(&v, &["weights", "precision"], Some("fp8")));
        assert!(!eq_path(&v, &["weights", "format"], Some("fp8")));
        assert!(eq_path(&v, &["missing", "x"], None));
        assert!(eq_path(&v, &["n"], Some("2")));
        assert!(eq_ci_or_unknown(Some(&Value::Null), Some("unknown")));
        assert!(in_range(Some(96.0), Some(96.0), Some(96.0)));
        assert!(!in_range(None, Some(1.0), None));
        assert!(in_range(None, None, None));
        assert!(Tri::Unknown.matches(None));
        assert!(!Tri::False.matches(Some(&Value::Null)));
        assert!(matches_terms(
            "glm sglang rtx",
            &["sgl".into(), "glm".into()]
        ));
        assert!(!matches_terms("glm sglang", &["vllm".into()]));
    }

    #[test]
    fn natural_collation() {
        let mut v = vec!["rtx-10000", "rtx-4090", "RTX-5090", "a", "rtx-04090"];
        v.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(v, ["a", "rtx-04090", "rtx-4090", "RTX-5090", "rtx-10000"]);
    }

    #[test]
    fn list_body_is_valid_json() {
        let b = Bytes::from_static(b"{\"id\":\"b\"}");
        let body = list_body(
            &[b],
            Page {
                limit: 1,
                offset: 1,
            },
            2,
            (None, None),
        );
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["data"], json!([{"id": "b"}]));
        assert_eq!(v["meta"]["total"], 2);
        assert_eq!(v["meta"]["returned"], 1);
    }
}
