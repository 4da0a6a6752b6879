//! Loading a registry directory into memory (§2.1, §4.1 "Loading").
//!
//! Layout: `<root>/<collection dir>/<id>.json`, one record per file, `id` = file stem. Legacy
//! directory names (`speed-sweeps/`) and legacy link fields (`speed_sweeps_ids`) are read and
//! normalised; problems found while loading (invalid JSON, id ≠ file stem, duplicate ids) are
//! collected in [`Registry::problems`], never fatal, so `validate` can list them all.

use cap_std::fs::Dir;
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::collection::{canonical_field, is_legacy_field, Cardinality, Collection};
use crate::records::{Recipe, SpeedSweep, TypedRecord};

/// One problem, printed as `path: rule: message` (one line).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Problem {
    /// Registry-relative file path (`recipe/x.json`), optionally with a JSON pointer
    /// (`speed-sweep/x.json#/rows/3/ttft_ms_p50`).
    pub path: String,
    /// Rule id (kebab case, listed in `docs/registry.md`).
    pub rule: String,
    /// What is wrong, one line.
    pub message: String,
}

impl Problem {
    /// A problem.
    pub fn new(
        path: impl Into<String>,
        rule: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Problem {
            path: path.into(),
            rule: rule.into(),
            message: message.into().replace('\n', " "),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // a file name or a record's value with control or invisible characters must not
        // reach the terminal raw (break-it round 8)
        use servebench_results::escape_for_terminal as safe;
        write!(
            f,
            "{}: {}: {}",
            safe(&self.path),
            safe(&self.rule),
            safe(&self.message)
        )
    }
}

/// A registry that cannot be read at all.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The root is missing or not a directory.
    #[error("{} is not a registry directory ({})", .0.display(), .1)]
    NotADirectory(PathBuf, &'static str),
    /// An I/O error on a path.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

/// One loaded record.
#[derive(Clone, Debug)]
pub struct Record {
    /// Its collection.
    pub collection: Collection,
    /// Its id (= file stem).
    pub id: String,
    /// Registry-relative path as read (`speed-sweeps/x.json` for a legacy directory).
    pub rel_path: String,
    /// The JSON as read, with legacy link fields renamed to their canonical spelling.
    pub raw: Value,
    /// The typed record, when `raw` parses as one.
    pub typed: Option<TypedRecord>,
    /// Why `raw` does not parse as the typed record (missing or unknown field, wrong type).
    pub parse_error: Option<String>,
    /// Normalisations applied while reading (`speed_sweeps_ids → speed_sweep_ids`,
    /// `directory speed-sweeps → speed-sweep`).
    pub normalised: Vec<String>,
    /// Whether the file's text was already canonical ([`crate::canonical`]).
    pub canonical: bool,
}

impl Record {
    /// Builds a record from JSON (normalising legacy fields and parsing the typed record).
    pub fn from_value(collection: Collection, id: &str, rel_path: String, mut raw: Value) -> Self {
        let normalised = normalise(&mut raw);
        let (typed, parse_error) = match TypedRecord::parse(collection, &raw) {
            Ok(t) => (Some(t), None),
            Err(e) => (None, Some(e.to_string())),
        };
        Record {
            collection,
            id: id.to_string(),
            rel_path,
            raw,
            typed,
            parse_error,
            normalised,
            canonical: true,
        }
    }

    /// Like [`Record::from_value`] without the typed parse (`typed` and `parse_error` stay
    /// `None`).
    pub fn untyped(collection: Collection, id: &str, rel_path: String, mut raw: Value) -> Self {
        let normalised = normalise(&mut raw);
        Record {
            collection,
            id: id.to_string(),
            rel_path,
            raw,
            typed: None,
            parse_error: None,
            normalised,
            canonical: true,
        }
    }

    /// The canonical registry-relative path: `<dir>/<id>.json`.
    pub fn canonical_rel_path(&self) -> String {
        rel_path_for(self.collection, &self.id)
    }

    /// The typed recipe, when this is one that parsed.
    pub fn recipe(&self) -> Option<&Recipe> {
        match &self.typed {
            Some(TypedRecord::Recipe(r)) => Some(r),
            _ => None,
        }
    }

    /// The typed sweep, when this is one that parsed.
    pub fn sweep(&self) -> Option<&SpeedSweep> {
        match &self.typed {
            Some(TypedRecord::SpeedSweep(r)) => Some(r),
            _ => None,
        }
    }
}

/// Renames legacy reference fields at the top level of a record (`speed_sweeps_ids` →
/// `speed_sweep_ids`). When both spellings are present with the same value the legacy one is
/// dropped; with different values both stay (the typed parse then fails with "duplicate
/// field", which `validate` reports). Returns what was done.
pub fn normalise(raw: &mut Value) -> Vec<String> {
    let mut notes = Vec::new();
    let Some(obj) = raw.as_object_mut() else {
        return notes;
    };
    let legacy: Vec<String> = obj.keys().filter(|k| is_legacy_field(k)).cloned().collect();
    for old in legacy {
        let new = canonical_field(&old);
        let v = obj.remove(&old).expect("key listed above");
        match obj.get(&new) {
            None => {
                obj.insert(new.clone(), v);
                notes.push(format!("{old} → {new}"));
            }
            Some(existing) if *existing == v => {
                notes.push(format!("{old} dropped (same as {new})"))
            }
            Some(_) => {
                obj.insert(old.clone(), v);
            }
        }
    }
    notes
}

/// `<dir>/<id>.json` for a record.
pub fn rel_path_for(collection: Collection, id: &str) -> String {
    format!("{}/{id}.json", collection.dir_name())
}

/// A reference from one record to another, found by the resolver rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reference {
    /// The field (`model_instance_id`, `speed_sweep_ids`).
    pub field: String,
    /// JSON pointer of the value (`/speed_sweep_ids/0`).
    pub pointer: String,
    /// Target collection.
    pub collection: Collection,
    /// Target id.
    pub id: String,
}

/// Top-level references of a record by the resolver rule (§2.1): every `<field>_id` string
/// and every string of a `<field>_ids` array whose field names a known collection. Nested
/// objects are not walked (their `*_id` keys belong to foreign systems: `launch.run_id`,
/// `metadata.acceptance.served_model_id`). A null `*_id` is no reference.
pub fn references(raw: &Value) -> Vec<Reference> {
    let mut out = Vec::new();
    let Some(obj) = raw.as_object() else {
        return out;
    };
    for (field, v) in obj {
        let Some((collection, card)) = Collection::from_reference_field(field) else {
            continue;
        };
        match (card, v) {
            (Cardinality::One, Value::String(id)) => out.push(Reference {
                field: field.clone(),
                pointer: format!("/{field}"),
                collection,
                id: id.clone(),
            }),
            (Cardinality::Many, Value::Array(ids)) => {
                for (i, id) in ids.iter().enumerate() {
                    if let Value::String(id) = id {
                        out.push(Reference {
                            field: field.clone(),
                            pointer: format!("/{field}/{i}"),
                            collection,
                            id: id.clone(),
                        });
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// Whether a path resolves inside the registry root (symbolic links resolved).
#[derive(Clone, Debug)]
pub struct RootGuard {
    /// The root with every link resolved (the root as given when that fails).
    root: PathBuf,
}

impl RootGuard {
    /// A guard for `root`.
    pub fn new(root: &Path) -> RootGuard {
        RootGuard {
            root: root.canonicalize().unwrap_or_else(|_| root.to_path_buf()),
        }
    }

    /// The resolved root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where `path` (which exists) resolves under the root, relative to it (`""` for the root
    /// itself); otherwise why not (a dangling link, or one that leads outside).
    pub fn resolve(&self, path: &Path) -> Result<PathBuf, String> {
        self.check(path)?;
        let real = path.canonicalize().map_err(|e| e.to_string())?;
        real.strip_prefix(&self.root)
            .map(Path::to_path_buf)
            .map_err(|_| "a symbolic link out of the registry; not followed".to_string())
    }

    /// `Ok` when `path` (which exists) resolves to a place under the root; otherwise why not
    /// (a dangling link, or one that leads outside).
    pub fn check(&self, path: &Path) -> Result<(), String> {
        match path.canonicalize() {
            Ok(real) if real.starts_with(&self.root) => Ok(()),
            Ok(real) => Err(format!(
                "a symbolic link to {} (outside the registry); not followed",
                real.display()
            )),
            Err(e) => Err(format!(
                "a symbolic link that does not resolve ({e}); not followed"
            )),
        }
    }
}

/// The largest record file read, bytes (64 MiB): a sweep of a thousand rows is under 2 MB; a
/// bigger file is reported (rule `too-large`), never read whole (break-it round 9: a 2 GB
/// sparse file took 2 GB of memory on every load).
pub const MAX_RECORD_BYTES: u64 = 64 << 20;

/// Reads `name` in the directory `col`, opened through the directory handle (a
/// symbolic link is followed only while it stays inside the registry root the handle came from,
/// so swapping a directory for a link during the load reads nothing outside), non-blocking (a
/// FIFO put in place after the listing does not hang the load), regular files only, at most
/// [`MAX_RECORD_BYTES`]. Errors: the rule and message of the problem.
fn read_capped(col: &Dir, name: &Path) -> Result<Vec<u8>, (&'static str, String)> {
    use std::io::Read as _;
    let mut open = cap_std::fs::OpenOptions::new();
    open.read(true);
    #[cfg(unix)]
    cap_std::fs::OpenOptionsExt::custom_flags(&mut open, O_NONBLOCK);
    let file = col
        .open_with(name, &open)
        .map_err(|e| ("unreadable", format!("cannot read: {e}")))?;
    let meta = file
        .metadata()
        .map_err(|e| ("unreadable", format!("cannot read: {e}")))?;
    if !meta.is_file() {
        return Err((
            "not-a-file",
            "a `.json` entry that is not a regular file; not read".into(),
        ));
    }
    if meta.len() > MAX_RECORD_BYTES {
        return Err((
            "too-large",
            format!(
                "{} bytes, over the {} MiB a record may have; not read",
                meta.len(),
                MAX_RECORD_BYTES >> 20
            ),
        ));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(MAX_RECORD_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| ("unreadable", format!("cannot read: {e}")))?;
    if bytes.len() as u64 > MAX_RECORD_BYTES {
        return Err((
            "too-large",
            format!(
                "over the {} MiB a record may have (it grew while read); not read",
                MAX_RECORD_BYTES >> 20
            ),
        ));
    }
    Ok(bytes)
}

/// `O_NONBLOCK` (Linux and the BSDs differ; only the open of a FIFO is affected, regular files
/// read as usual).
#[cfg(target_os = "linux")]
const O_NONBLOCK: i32 = 0o4000;
#[cfg(all(unix, not(target_os = "linux")))]
const O_NONBLOCK: i32 = 0x0004;

/// A listed record file: its collection, directory name, the index of that directory's
/// handle, the file name, and for a link that stays inside, where it resolves (root-relative).
type Listed = (Collection, &'static str, usize, String, Option<PathBuf>);

/// What reading one record file gave.
enum Read {
    Record(Box<Record>),
    Problem(Problem),
}

/// Reads and parses one record file of collection `c` found in directory `dir`. Never fails:
/// a file that cannot be read (rule `unreadable`) or is not UTF-8 (`invalid-utf8`) is a
/// problem like any other.
fn read_file(c: Collection, dir: &str, name: &str, from: (&Dir, &Path), opts: LoadOptions) -> Read {
    let stem = name.strip_suffix(".json").unwrap_or(name).to_string();
    let rel = format!("{dir}/{name}");
    let bytes = match read_capped(from.0, from.1) {
        Ok(b) => b,
        Err((rule, why)) => return Read::Problem(Problem::new(&rel, rule, why)),
    };
    let text = match String::from_utf8(bytes) {
        Ok(t) => t,
        Err(e) => {
            return Read::Problem(Problem::new(
                &rel,
                "invalid-utf8",
                format!(
                    "not UTF-8 text (invalid byte at offset {}); a record is a UTF-8 JSON file",
                    e.utf8_error().valid_up_to()
                ),
            ))
        }
    };
    let raw: Value = match serde_json::from_str(&text) {
        Ok(v) => v,
        Err(e) => return Read::Problem(Problem::new(&rel, "invalid-json", e.to_string())),
    };
    if !raw.is_object() {
        return Read::Problem(Problem::new(
            &rel,
            "not-an-object",
            "a record is a JSON object",
        ));
    }
    // (a second parse of the text: done where the file is judged, not by a read-only server
    // loading `raw`, which serves what `registry validate` reports)
    let duplicate = if opts.canonical_check {
        servebench_results::check::duplicate_keys(&text)
    } else {
        Vec::new()
    };
    if let Some(at) = duplicate.first() {
        return Read::Problem(Problem::new(
            &rel,
            "duplicate-key",
            format!("the key at {at} appears more than once in its object (readers disagree on which one counts); not read"),
        ));
    }
    match raw.get("id").and_then(Value::as_str) {
        Some(id) if id == stem => {}
        Some(id) => {
            return Read::Problem(Problem::new(
                &rel,
                "id-matches-file",
                format!("id {id:?} differs from the file stem {stem:?}"),
            ))
        }
        None => return Read::Problem(Problem::new(&rel, "id-matches-file", "no string `id`")),
    }
    // Checked on the tree as read, before legacy fields are renamed.
    let canonical = !opts.canonical_check || crate::canonical::is_canonical_text_of(&raw, &text);
    drop(text);
    let mut rec = if opts.typed {
        Record::from_value(c, &stem, rel, raw)
    } else {
        Record::untyped(c, &stem, rel, raw)
    };
    rec.canonical = canonical;
    if dir != c.dir_name() {
        rec.normalised
            .push(format!("directory {dir} → {}", c.dir_name()));
    }
    Read::Record(Box::new(rec))
}

/// What [`Registry::load_with`] does per record besides parsing its JSON.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadOptions {
    /// Parse the typed record ([`Record::typed`], [`Record::parse_error`]); when false both
    /// stay `None`.
    pub typed: bool,
    /// Check the file's text is canonical ([`Record::canonical`]); when false it is `true`.
    pub canonical_check: bool,
}

impl Default for LoadOptions {
    /// Everything (what `validate` needs).
    fn default() -> Self {
        LoadOptions {
            typed: true,
            canonical_check: true,
        }
    }
}

impl LoadOptions {
    /// JSON only: no typed parse, no canonical check (a read-only server of `raw`).
    pub fn raw_only() -> Self {
        LoadOptions {
            typed: false,
            canonical_check: false,
        }
    }
}

/// The whole registry in memory.
#[derive(Clone, Debug, Default)]
pub struct Registry {
    /// The root directory it was read from.
    pub root: PathBuf,
    records: BTreeMap<Collection, BTreeMap<String, Record>>,
    /// Problems found while loading (rules `invalid-json`, `id-matches-file`, `duplicate-id`,
    /// `not-an-object`).
    pub problems: Vec<Problem>,
    /// The records read from disk by the load (a write may replace only these files: a file
    /// that exists but was not read is refused, see [`crate::write::commit`]).
    loaded: std::collections::BTreeSet<(Collection, String)>,
}

impl Registry {
    /// An empty registry rooted at `root` (nothing is read).
    pub fn empty(root: impl Into<PathBuf>) -> Registry {
        Registry {
            root: root.into(),
            ..Default::default()
        }
    }

    /// Reads every `<root>/<collection dir>/*.json` (canonical and legacy directory names).
    /// Files that cannot be parsed or whose id does not match the stem are reported in
    /// [`Registry::problems`] and skipped; other files under the root are ignored.
    ///
    /// Each file is read once and parsed once (into `raw`; the typed record is deserialized
    /// from that tree and the canonical-text check compares while serializing it). Files are
    /// read and parsed on up to two threads; the result (records, problems and their order)
    /// does not depend on that.
    ///
    /// Errors: the root is not a directory, or a collection directory cannot be listed.
    pub fn load(dir: impl AsRef<Path>) -> Result<Registry, RegistryError> {
        Registry::load_with(dir, LoadOptions::default())
    }

    /// [`Registry::load`] with the per-record work chosen by `opts` (a reader that serves
    /// `raw` only, like `servebench registry serve`, skips the typed parse and the canonical
    /// check).
    ///
    /// Errors: as [`Registry::load`].
    pub fn load_with(dir: impl AsRef<Path>, opts: LoadOptions) -> Result<Registry, RegistryError> {
        let root = dir.as_ref().to_path_buf();
        if !root.is_dir() {
            let why = if root.exists() {
                "it is not a directory"
            } else {
                "no such directory"
            };
            return Err(RegistryError::NotADirectory(root, why));
        }
        // Symbolic links are followed only when they stay inside the registry (rule
        // `symlink-outside` otherwise): nothing outside the root is read or served.
        let inside = RootGuard::new(&root);
        // Every directory and file below is opened through the root's handle (cap-std: a link
        // is followed only while it stays under the root), so a directory swapped for a link
        // between the checks below and the reads is never read through (break-it round 9).
        let root_dir = Dir::open_ambient_dir(&root, cap_std::ambient_authority())
            .map_err(|_| RegistryError::NotADirectory(root.clone(), "it cannot be opened"))?;
        let mut early: Vec<Problem> = Vec::new();
        let mut cols: Vec<Dir> = Vec::new();
        let mut files: Vec<Listed> = Vec::new();
        for c in Collection::ALL {
            let mut dirs = vec![c.dir_name()];
            dirs.extend_from_slice(c.legacy_dir_names());
            for d in dirs {
                let path = root.join(d);
                let Ok(meta) = std::fs::symlink_metadata(&path) else {
                    continue;
                };
                if meta.file_type().is_symlink() {
                    if let Err(why) = inside.check(&path) {
                        early.push(Problem::new(d, "symlink-outside", why));
                        continue;
                    }
                }
                if !path.is_dir() {
                    if !meta.file_type().is_symlink() {
                        early.push(Problem::new(
                            d,
                            "not-a-directory",
                            format!("a collection's place ({d}/) taken by something that is not a directory; its records are not read"),
                        ));
                    }
                    continue;
                }
                let col = match root_dir.open_dir(d) {
                    Ok(col) => col,
                    Err(e) => {
                        early.push(Problem::new(d, "unreadable", format!("cannot open: {e}")));
                        continue;
                    }
                };
                let entries = match col.entries() {
                    Ok(e) => e,
                    Err(e) => {
                        early.push(Problem::new(d, "unreadable", format!("cannot list: {e}")));
                        continue;
                    }
                };
                let mut in_dir: Vec<(String, Option<PathBuf>)> = Vec::new();
                for e in entries {
                    let Ok(e) = e else { continue };
                    let file_name = e.file_name();
                    let name = file_name.to_string_lossy().into_owned();
                    if !name.ends_with(".json") || name.len() <= ".json".len() {
                        continue;
                    }
                    let p = path.join(&file_name);
                    let rel = || format!("{d}/{name}");
                    // The directory entry's type needs no `stat` on most file systems.
                    // A link that stays inside is read at the place it resolves to, from the
                    // root's handle (the link's own text may be an absolute path).
                    let mut via: Option<PathBuf> = None;
                    let is_file = match e.file_type() {
                        Ok(t) if t.is_symlink() => match inside.resolve(&p) {
                            Ok(real) => {
                                via = Some(real);
                                p.is_file()
                            }
                            Err(why) => {
                                early.push(Problem::new(rel(), "symlink-outside", why));
                                continue;
                            }
                        },
                        Ok(t) => t.is_file(),
                        Err(_) => false,
                    };
                    if is_file {
                        in_dir.push((name, via));
                    } else {
                        early.push(Problem::new(
                            rel(),
                            "not-a-file",
                            "a `.json` entry that is not a regular file; not read",
                        ));
                    }
                }
                in_dir.sort();
                let k = cols.len();
                cols.push(col);
                files.extend(in_dir.into_iter().map(|(n, via)| (c, d, k, n, via)));
            }
        }
        let (cols, root_dir) = (&cols, &root_dir);
        let read_all = |chunk: &[Listed]| -> Vec<Read> {
            chunk
                .iter()
                .map(|(c, d, k, n, via)| match via {
                    Some(real) => read_file(*c, d, n, (root_dir, real), opts),
                    None => read_file(*c, d, n, (&cols[*k], Path::new(n)), opts),
                })
                .collect()
        };
        // Two threads when there is enough work to pay for the second one.
        let read: Vec<Read> = if files.len() >= 256 {
            let half = files.len() / 2;
            std::thread::scope(|s| {
                let b = s.spawn(|| read_all(&files[half..]));
                let mut a = read_all(&files[..half]);
                match b.join() {
                    Ok(b) => a.extend(b),
                    Err(_) => a.extend(read_all(&files[half..])),
                }
                a
            })
        } else {
            read_all(&files)
        };
        let mut reg = Registry::empty(&root);
        reg.problems = early;
        for r in read {
            match r {
                Read::Problem(p) => reg.problems.push(p),
                Read::Record(rec) => {
                    if reg.get(rec.collection, &rec.id).is_some() {
                        reg.problems.push(Problem::new(
                            &rec.rel_path,
                            "duplicate-id",
                            format!(
                                "{} {:?} is also in another file (legacy directory?)",
                                rec.collection, rec.id
                            ),
                        ));
                        continue;
                    }
                    let rec = *rec;
                    reg.loaded.insert((rec.collection, rec.id.clone()));
                    reg.records
                        .entry(rec.collection)
                        .or_default()
                        .insert(rec.id.clone(), rec);
                }
            }
        }
        Ok(reg)
    }

    /// Whether record `id` of `c` was read from disk by the load that made this registry.
    pub fn was_loaded(&self, c: Collection, id: &str) -> bool {
        self.loaded.contains(&(c, id.to_string()))
    }

    /// Every record, in [`Registry::all`] order, by value (the registry is consumed).
    pub fn into_records(self) -> impl Iterator<Item = Record> {
        let mut records = self.records;
        Collection::ALL.into_iter().flat_map(move |c| {
            records
                .remove(&c)
                .into_iter()
                .flat_map(BTreeMap::into_values)
        })
    }

    /// Inserts (or replaces) a record from JSON; its id comes from `raw.id`. Returns the
    /// replaced record, if any. Used by import and publish before writing.
    ///
    /// Errors: `raw` has no string `id`.
    pub fn insert(&mut self, collection: Collection, raw: Value) -> Result<Option<Record>, String> {
        let id = raw
            .get("id")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("a {collection} record needs a string `id`"))?
            .to_string();
        let rec = Record::from_value(collection, &id, rel_path_for(collection, &id), raw);
        Ok(self.records.entry(collection).or_default().insert(id, rec))
    }

    /// The record `id` of `collection`.
    pub fn get(&self, collection: Collection, id: &str) -> Option<&Record> {
        self.records.get(&collection)?.get(id)
    }

    /// Every record of `collection`, by id.
    pub fn records(&self, collection: Collection) -> impl Iterator<Item = &Record> {
        self.records
            .get(&collection)
            .into_iter()
            .flat_map(|m| m.values())
    }

    /// Every record, collection by collection ([`Collection::ALL`] order), then by id.
    pub fn all(&self) -> impl Iterator<Item = &Record> {
        Collection::ALL.into_iter().flat_map(|c| self.records(c))
    }

    /// Sorted ids of `collection`.
    pub fn ids(&self, collection: Collection) -> Vec<&str> {
        self.records(collection).map(|r| r.id.as_str()).collect()
    }

    /// Number of records of `collection`.
    pub fn count(&self, collection: Collection) -> usize {
        self.records.get(&collection).map_or(0, |m| m.len())
    }

    /// Resolves a reference field's value (`resolve("model_instance_id", "x")`); None when the
    /// field names no collection or the record does not exist.
    pub fn resolve(&self, field: &str, id: &str) -> Option<&Record> {
        let (c, _) = Collection::from_reference_field(field)?;
        self.get(c, id)
    }

    /// The typed recipe `id`.
    pub fn recipe(&self, id: &str) -> Option<&Recipe> {
        self.get(Collection::Recipe, id)?.recipe()
    }

    /// The typed sweep `id`.
    pub fn sweep(&self, id: &str) -> Option<&SpeedSweep> {
        self.get(Collection::SpeedSweep, id)?.sweep()
    }

    /// Sweeps whose `recipe_id` is `recipe_id` (the backward link), by id.
    pub fn sweeps_of_recipe(&self, recipe_id: &str) -> Vec<&Record> {
        self.records(Collection::SpeedSweep)
            .filter(|r| r.raw.get("recipe_id").and_then(Value::as_str) == Some(recipe_id))
            .collect()
    }

    /// `<root>/<dir>/<id>.json`.
    pub fn path_for(&self, collection: Collection, id: &str) -> PathBuf {
        self.root.join(rel_path_for(collection, id))
    }

    /// Writes one record canonically to its canonical path (`<root>/<dir>/<id>.json`), after
    /// checking its id's grammar and that the path stays under the root
    /// ([`crate::write::safe_path`]). No registry validation: import, publish and trust write
    /// through [`crate::write::commit`].
    ///
    /// Errors: a bad id or a path out of the registry (`InvalidInput`), no such record, or the
    /// file cannot be written.
    pub fn write_record(&self, collection: Collection, id: &str) -> std::io::Result<PathBuf> {
        let path = crate::write::safe_path(&self.root, collection, id)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()))?;
        let rec = self.get(collection, id).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("no {collection} {id}"),
            )
        })?;
        crate::canonical::write_canonical(&path, &rec.raw)?;
        Ok(path)
    }
}
