//! An immutable, in-memory snapshot of a registry directory: every record parsed once, indexed by
//! id, with its search text, the reverse relationships and a content hash (the ETag).
//!
//! Requests never touch the file system: they read a snapshot (spec §7.2 item 13: the anchor
//! re-read ~3,000 files per sweep-list request). A reload builds a new snapshot and swaps it in
//! atomically; a reload that fails keeps the old one.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::Value;

use crate::collection::{Collection, CollectionExt as _};

/// Why a registry directory could not be loaded. Every variant names the file or directory.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The directory is missing or has none of the collection directories.
    #[error("{0}: not a registry directory (expected at least one of hardware/, model/, model-instance/, recipe/, speed-sweep/, directly or under registry/)")]
    NotARegistry(PathBuf),
    /// A directory or file could not be read.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A record file is not valid JSON, or not an object.
    #[error("{path}: invalid record: {message}")]
    Invalid { path: PathBuf, message: String },
}

/// One record of a collection.
#[derive(Debug)]
pub struct Record {
    /// The record id (= its file stem, checked at load).
    pub id: String,
    /// The record as stored.
    pub value: Value,
    /// Lowercased, space-joined primitive values of the whole record (strings, numbers, bools;
    /// walked recursively): what `q` searches.
    pub search: String,
    /// The API detail `data` (record + derived fields + relationships), serialized on first use.
    pub(crate) detail: OnceLock<Bytes>,
    /// The API list item (recipes: the compatibility result), serialized on first use.
    pub(crate) item: OnceLock<Bytes>,
}

/// One collection: records sorted by id (the "index order").
#[derive(Debug, Default)]
pub struct CollectionIndex {
    /// Records in ascending id order.
    pub records: Vec<Record>,
    by_id: HashMap<String, usize>,
}

impl CollectionIndex {
    /// The position of `id` in [`CollectionIndex::records`].
    pub fn position(&self, id: &str) -> Option<usize> {
        self.by_id.get(id).copied()
    }

    /// The record with this id.
    pub fn get(&self, id: &str) -> Option<&Record> {
        self.position(id).map(|i| &self.records[i])
    }

    /// Number of records.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// True when the collection has no record.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }
}

/// The loaded registry. Built by [`load`]; shared read-only by every request.
#[derive(Debug)]
pub struct Snapshot {
    /// The registry root that was read (the directory holding `hardware/`, `recipe/`, ...).
    pub root: PathBuf,
    /// Hex SHA-256 over the per-record SHA-256 of (collection, id, serialized record), in
    /// collection and id order: changes whenever any served record changes.
    pub hash: String,
    /// The ETag header value: `"sb-<first 20 hex digits of hash>"`.
    pub etag: String,
    /// Wall time of the load.
    pub loaded_in: Duration,
    /// Files the loader skipped, one line each (`<path>: <message> (<rule>)`).
    pub problems: Vec<String>,
    /// Files that failed to load on a reload whose previous version is still served
    /// ([`load_keeping`]), one line each.
    pub kept: Vec<String>,
    cols: [CollectionIndex; 5],
    /// Recipe positions per `hardware_id`.
    pub recipes_by_hardware: HashMap<String, Vec<usize>>,
    /// Recipe positions per `model_instance_id`.
    pub recipes_by_instance: HashMap<String, Vec<usize>>,
    /// Model-instance positions per `model_id`.
    pub instances_by_model: HashMap<String, Vec<usize>>,
    /// Speed-sweep positions per `recipe_id` (the backward link; see [`Snapshot::recipe_sweeps`]).
    pub sweeps_by_recipe: HashMap<String, Vec<usize>>,
    pub(crate) cache: Caches,
}

/// Lazily computed, snapshot-wide bodies and orders.
#[derive(Debug, Default)]
pub(crate) struct Caches {
    pub discovery: OnceLock<Bytes>,
    pub index: OnceLock<Bytes>,
    pub facets: OnceLock<Bytes>,
    /// Recipe positions sorted for `sort_by=hardware` and `sort_by=model`.
    pub recipe_order_hardware: OnceLock<Vec<usize>>,
    pub recipe_order_model: OnceLock<Vec<usize>>,
    /// Model positions in the models-list order.
    pub model_order: OnceLock<Vec<usize>>,
    /// Speed-sweep positions (ascending) per lowercased `recipe_id` (the `recipe_id` filter).
    pub sweeps_by_recipe_lc: OnceLock<HashMap<String, Vec<usize>>>,
    /// What each recipe points at, by recipe position.
    pub recipe_rel: OnceLock<Vec<crate::http::recipes::RecipeRel>>,
    /// The home page's filter options (engine, precision, vendor, hardware count).
    pub home_options: OnceLock<crate::site::home::Options>,
    /// Prepared 200s per request target.
    pub responses: crate::http::prepared::ResponseCache,
}

impl Caches {
    /// The prepared response of `target` (path and query).
    pub fn prepared(
        &self,
        target: &str,
    ) -> Option<std::sync::Arc<crate::http::prepared::Prepared>> {
        self.responses.prepared(target)
    }

    /// Keeps a prepared response (within the cache's bounds).
    pub fn keep(&self, target: String, p: std::sync::Arc<crate::http::prepared::Prepared>) {
        self.responses.keep(target, p)
    }
}

impl Snapshot {
    /// The records of one collection.
    pub fn col(&self, c: Collection) -> &CollectionIndex {
        &self.cols[c.index()]
    }

    /// The record `id` of collection `c`.
    pub fn get(&self, c: Collection, id: &str) -> Option<&Record> {
        self.col(c).get(id)
    }

    /// Record counts keyed by [`Collection::count_key`].
    pub fn counts(&self) -> serde_json::Map<String, Value> {
        Collection::ALL
            .iter()
            .map(|&c| (c.count_key().to_string(), Value::from(self.col(c).len())))
            .collect()
    }

    /// Total number of records.
    pub fn total_records(&self) -> usize {
        self.cols.iter().map(CollectionIndex::len).sum()
    }

    /// The speed sweeps of a recipe, as positions in the speed-sweep collection: the ids its
    /// `speed_sweep_ids` (and the legacy `speed_sweeps_ids`, spec §7.2 item 1) list that
    /// resolve, in that order, then the sweeps whose `recipe_id` names the recipe but that the
    /// recipe does not list. Each sweep once.
    pub fn recipe_sweeps(&self, recipe: &Value) -> Vec<usize> {
        let sweeps = self.col(Collection::SpeedSweep);
        let mut out: Vec<usize> = Vec::new();
        for key in ["speed_sweep_ids", "speed_sweeps_ids"] {
            if let Some(ids) = recipe.get(key).and_then(Value::as_array) {
                for id in ids.iter().filter_map(Value::as_str) {
                    if let Some(p) = sweeps.position(id) {
                        if !out.contains(&p) {
                            out.push(p);
                        }
                    }
                }
            }
        }
        if let Some(back) = recipe
            .get("id")
            .and_then(Value::as_str)
            .and_then(|id| self.sweeps_by_recipe.get(id))
        {
            for &p in back {
                if !out.contains(&p) {
                    out.push(p);
                }
            }
        }
        out
    }
}

/// Finds the registry root under `dir`: `dir` itself when it holds a collection directory,
/// else `dir/registry` when that does.
pub fn resolve_root(dir: &Path) -> Result<PathBuf, LoadError> {
    let has_collection = |d: &Path| {
        Collection::ALL.iter().any(|c| {
            std::iter::once(c.dir())
                .chain(c.legacy_dirs().iter().copied())
                .any(|name| d.join(name).is_dir())
        })
    };
    if has_collection(dir) {
        return Ok(dir.to_path_buf());
    }
    let nested = dir.join("registry");
    if has_collection(&nested) {
        return Ok(nested);
    }
    Err(LoadError::NotARegistry(dir.to_path_buf()))
}

/// The record files of the registry under `root`, as (collection, file stem, path), sorted.
/// Used by `--watch`, which compares their sizes and modification times.
pub fn record_files(root: &Path) -> Result<Vec<(Collection, String, PathBuf)>, LoadError> {
    let mut out = Vec::new();
    for c in Collection::ALL {
        for name in std::iter::once(c.dir()).chain(c.legacy_dirs().iter().copied()) {
            let d = root.join(name);
            if !d.is_dir() {
                continue;
            }
            let io = |source| LoadError::Io {
                path: d.clone(),
                source,
            };
            for entry in std::fs::read_dir(&d).map_err(io)? {
                let entry = entry.map_err(io)?;
                let path = entry.path();
                let Some(stem) = path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .and_then(|n| n.strip_suffix(".json"))
                else {
                    continue;
                };
                if !entry.file_type().map_err(io)?.is_file() {
                    continue;
                }
                out.push((c, stem.to_string(), path));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Loads the registry under `dir` (see [`resolve_root`]) into a [`Snapshot`], through
/// [`servebench_registry::Registry::load_with`] (JSON only; it normalises legacy spellings such as
/// `speed_sweeps_ids` → `speed_sweep_ids`).
///
/// Files the registry loader skips (invalid JSON, `id` ≠ file stem, duplicate ids) are listed
/// in [`Snapshot::problems`]; the rest is served.
///
/// Errors: [`LoadError`] when the directory is not a registry or cannot be read.
pub fn load(dir: &Path) -> Result<Snapshot, LoadError> {
    load_keeping(dir, None)
}

/// [`load`], for a reload while `prev` is served: a record file that fails to load now (a
/// partial write, invalid JSON, an `id` that no longer matches) but whose record `prev` serves
/// keeps its previous version, so a reload never loses a record to a half-written file. Each
/// kept record is listed in [`Snapshot::kept`] (and its problem in [`Snapshot::problems`]).
///
/// Errors: as [`load`].
pub fn load_keeping(dir: &Path, prev: Option<&Snapshot>) -> Result<Snapshot, LoadError> {
    let t0 = Instant::now();
    let root = resolve_root(dir)?;
    // Served as JSON: the typed parse and the canonical check (for `validate`) are skipped.
    let opts = servebench_registry::LoadOptions::raw_only();
    let reg =
        servebench_registry::Registry::load_with(&root, opts).map_err(|e| LoadError::Invalid {
            path: root.clone(),
            message: e.to_string(),
        })?;
    let mut problems: Vec<String> = reg
        .problems
        .iter()
        .map(|p| format!("{}: {} ({})", p.path, p.message, p.rule))
        .collect();
    let mut hasher = ring::digest::Context::new(&ring::digest::SHA256);
    let mut cols: [CollectionIndex; 5] = Default::default();
    // The loader's records are taken, not copied.
    let mut by_col: [Vec<servebench_registry::Record>; 5] = Default::default();
    let failed: Vec<(Collection, String, String)> = reg
        .problems
        .iter()
        .filter_map(|p| {
            let (c, stem) = record_of_path(&p.path)?;
            Some((c, stem, format!("{}: {} ({})", p.path, p.message, p.rule)))
        })
        .collect();
    for r in reg.into_records() {
        by_col[r.collection.index()].push(r);
    }
    let mut kept = Vec::new();
    if let Some(prev) = prev {
        for (c, stem, why) in failed {
            let loaded = by_col[c.index()].iter().any(|r| r.id == stem);
            if let (false, Some(old)) = (loaded, prev.get(c, &stem)) {
                kept.push(format!(
                    "{why}; still serving the previously loaded version of {}/{stem}",
                    c.dir()
                ));
                by_col[c.index()].push(servebench_registry::Record {
                    collection: c,
                    id: old.id.clone(),
                    rel_path: format!("{}/{stem}.json", c.dir()),
                    raw: old.value.clone(),
                    typed: None,
                    parse_error: None,
                    normalised: Vec::new(),
                    canonical: true,
                });
            }
        }
    }
    for c in Collection::ALL {
        let col = &mut cols[c.index()];
        // `into_records` yields each collection in id order.
        let mut served: Vec<servebench_registry::Record> = Vec::new();
        for r in std::mem::take(&mut by_col[c.index()]) {
            if c.id_is_valid(&r.id) {
                served.push(r);
            } else {
                problems.push(format!(
                    "{}: id {:?} is not a valid {} id ({}); not served (id-grammar)",
                    r.rel_path,
                    r.id,
                    c.dir(),
                    c.id_grammar()
                ));
            }
        }
        // Per record: its own digest (collection, id, serialized record) and search text, on
        // two threads; the snapshot hash is the SHA-256 of the digests in id order.
        type Done = (Record, ring::digest::Digest);
        let work = |chunk: Vec<servebench_registry::Record>| -> Vec<Done> {
            let mut bytes = Vec::new();
            chunk
                .into_iter()
                .map(|r| {
                    bytes.clear();
                    let _ = serde_json::to_writer(&mut bytes, &r.raw);
                    let mut h = ring::digest::Context::new(&ring::digest::SHA256);
                    h.update(c.dir().as_bytes());
                    h.update(&[0]);
                    h.update(r.id.as_bytes());
                    h.update(&[0]);
                    h.update(&bytes);
                    let rec = Record {
                        search: search_text(&r.raw),
                        id: r.id,
                        value: r.raw,
                        detail: OnceLock::new(),
                        item: OnceLock::new(),
                    };
                    (rec, h.finish())
                })
                .collect()
        };
        let second = served.split_off(served.len() / 2);
        let (a, b) = std::thread::scope(|s| {
            let hb = s.spawn(|| work(second));
            let a = work(served);
            (a, hb.join().unwrap_or_default())
        });
        for (rec, digest) in a.into_iter().chain(b) {
            hasher.update(digest.as_ref());
            col.records.push(rec);
        }
        col.records.sort_by(|a, b| a.id.cmp(&b.id));
        col.by_id = col
            .records
            .iter()
            .enumerate()
            .map(|(i, r)| (r.id.clone(), i))
            .collect();
    }
    let hash = hex(hasher.finish().as_ref());
    let group = |c: Collection, key: &str| {
        let mut m: HashMap<String, Vec<usize>> = HashMap::new();
        for (i, r) in cols[c.index()].records.iter().enumerate() {
            if let Some(k) = r.value.get(key).and_then(Value::as_str) {
                m.entry(k.to_string()).or_default().push(i);
            }
        }
        m
    };
    let recipes_by_hardware = group(Collection::Recipe, "hardware_id");
    let recipes_by_instance = group(Collection::Recipe, "model_instance_id");
    let instances_by_model = group(Collection::ModelInstance, "model_id");
    let sweeps_by_recipe = group(Collection::SpeedSweep, "recipe_id");
    Ok(Snapshot {
        root,
        etag: format!("\"sb-{}\"", &hash[..20]),
        hash,
        loaded_in: t0.elapsed(),
        problems,
        kept,
        cols,
        recipes_by_hardware,
        recipes_by_instance,
        instances_by_model,
        sweeps_by_recipe,
        cache: Caches::default(),
    })
}

/// The collection and file stem of a registry-relative record path (`model/x.json`, possibly
/// with a `#/pointer`).
fn record_of_path(path: &str) -> Option<(Collection, String)> {
    let path = path.split('#').next()?;
    let (dir, file) = path.rsplit_once('/')?;
    let stem = file.strip_suffix(".json")?;
    let dir = dir.rsplit('/').next()?;
    let c = Collection::ALL
        .into_iter()
        .find(|c| c.dir() == dir || c.legacy_dirs().contains(&dir))?;
    Some((c, stem.to_string()))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Lowercased primitive values of `v` (strings, numbers, booleans; nulls skipped), walked
/// recursively and joined by single spaces.
pub fn search_text(v: &Value) -> String {
    fn walk(v: &Value, out: &mut String) {
        match v {
            Value::Null => {}
            Value::Bool(b) => push(out, if *b { "true" } else { "false" }),
            Value::Number(n) => {
                // Digits, signs, `.` and `e`: already lowercase, written in place.
                use std::fmt::Write as _;
                if !out.is_empty() {
                    out.push(' ');
                }
                let _ = write!(out, "{n}");
            }
            Value::String(s) => push(out, s),
            Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
            Value::Object(o) => o.values().for_each(|x| walk(x, out)),
        }
    }
    fn push(out: &mut String, s: &str) {
        if !out.is_empty() {
            out.push(' ');
        }
        if s.is_ascii() {
            let start = out.len();
            out.push_str(s);
            out[start..].make_ascii_lowercase();
        } else {
            out.extend(s.chars().flat_map(char::to_lowercase));
        }
    }
    let mut out = String::new();
    walk(v, &mut out);
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn search_text_lowercases_and_joins() {
        let v = serde_json::json!({"a": "MiXed Ünïcode É", "b": [1, 2.5, -3e-7, true, null], "c": {"d": "X"}});
        assert_eq!(super::search_text(&v), "mixed ünïcode é 1 2.5 -3e-7 true x");
    }
}
