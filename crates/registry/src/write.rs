//! Every registry write goes through [`commit`]: ids checked against their grammar before a
//! path is built, every path under the registry root, the registry-to-be validated, then all
//! files written or none (issue 17 items 1 and 2).
//!
//! Steps of [`commit`]:
//! 1. each written record's id matches its collection's grammar ([`crate::is_valid_id`]);
//! 2. each target directory (`<root>/<dir>`) resolves under the root (a collection directory
//!    that is a symbolic link out of the registry is refused);
//! 3. the in-memory registry-to-be is validated ([`crate::validate::validate`]); a problem on a
//!    file this write touches that was not there before the write refuses it;
//! 4. every file is staged as a temporary file next to its target, then all are renamed into
//!    place; when a rename fails, the files already renamed get their old content back (or are
//!    removed when they were new), so a refused or failed write leaves every file as it was.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::load::{rel_path_for, Problem, RootGuard};
use crate::{is_valid_id, Collection, Registry};

/// A registry write that was refused or failed; nothing was written.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// An id that breaks its collection's grammar (it would name a path outside the
    /// collection's directory, or a bad file name).
    #[error("{collection} id {id:?} is not valid ({grammar}); nothing was written")]
    BadId {
        /// The collection.
        collection: Collection,
        /// The id as given.
        id: String,
        /// The grammar, as text.
        grammar: &'static str,
    },
    /// A path that does not resolve under the registry root.
    #[error("{path} is not inside the registry {root} (a symbolic link out of it?); nothing was written")]
    Outside {
        /// The path that would have been written.
        path: PathBuf,
        /// The registry root (links resolved).
        root: PathBuf,
    },
    /// The registry-to-be has new problems on the files the write touches.
    #[error("the write would leave the registry invalid ({} problem{}); nothing was written", .0.len(), if .0.len() == 1 { "" } else { "s" })]
    Invalid(Vec<Problem>),
    /// Staging or renaming failed (files already renamed were restored).
    #[error("cannot write {path}: {source} (files already renamed were restored)")]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

/// `Ok` when `id` matches `c`'s grammar.
///
/// Errors: [`WriteError::BadId`].
pub fn check_id(c: Collection, id: &str) -> Result<(), WriteError> {
    if is_valid_id(c, id) {
        Ok(())
    } else {
        Err(WriteError::BadId {
            collection: c,
            id: id.to_string(),
            grammar: c.id_grammar(),
        })
    }
}

/// The path of record `id` of `c` under `root` after checking the id's grammar and that the
/// collection directory, when it exists, resolves under the root.
///
/// Errors: [`WriteError::BadId`], [`WriteError::Outside`].
pub fn safe_path(root: &Path, c: Collection, id: &str) -> Result<PathBuf, WriteError> {
    check_id(c, id)?;
    let guard = RootGuard::new(root);
    let dir = root.join(c.dir_name());
    inside(&guard, &dir)?;
    Ok(root.join(rel_path_for(c, id)))
}

fn inside(guard: &RootGuard, dir: &Path) -> Result<(), WriteError> {
    if std::fs::symlink_metadata(dir).is_ok() && guard.check(dir).is_err() {
        return Err(WriteError::Outside {
            path: dir.to_path_buf(),
            root: guard.root().to_path_buf(),
        });
    }
    Ok(())
}

/// Problems of `after` that are not in `before`, anywhere in the registry: on the files in
/// `touched` (registry-relative paths) every problem not there before, and on the other files
/// every problem whose file and rule had none before (break-it round 8: importing a recipe
/// with no sweep ids, or a hardware record with 0.001 GB of VRAM, broke an untouched sweep's
/// link or plausibility and was accepted). A problem an untouched file already had keeps
/// counting as old when only its message changed.
pub fn new_problems(
    before: &[Problem],
    after: &[Problem],
    touched: &BTreeSet<String>,
) -> Vec<Problem> {
    let old: BTreeSet<&Problem> = before.iter().collect();
    let file_of = |p: &Problem| p.path.split('#').next().unwrap_or("").to_string();
    let old_rules: BTreeSet<(String, &str)> = before
        .iter()
        .map(|p| (file_of(p), p.rule.as_str()))
        .collect();
    after
        .iter()
        .filter(|p| {
            let file = file_of(p);
            if touched.contains(&file) {
                !old.contains(p)
            } else {
                !old.contains(p) && !old_rules.contains(&(file, p.rule.as_str()))
            }
        })
        .cloned()
        .collect()
}

/// Writes the records `writes` of `reg` (canonically, to `<root>/<dir>/<id>.json`) and removes
/// the files `removals` (registry-relative paths: legacy-directory copies of written records),
/// by the steps in the module docs. `before` is what [`crate::validate::validate`] reported
/// before the records were changed in memory. Returns the written paths.
///
/// Errors: [`WriteError`]; in every case no file was changed.
pub fn commit(
    reg: &Registry,
    before: &[Problem],
    writes: &[(Collection, String)],
    removals: &[String],
) -> Result<Vec<PathBuf>, WriteError> {
    let guard = RootGuard::new(&reg.root);
    let mut targets: Vec<(PathBuf, String)> = Vec::new();
    let mut touched = BTreeSet::new();
    for (c, id) in writes {
        let path = safe_path(&reg.root, *c, id)?;
        let rec = reg.get(*c, id).ok_or_else(|| WriteError::Io {
            path: path.clone(),
            source: std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("no {c} {id} in memory"),
            ),
        })?;
        let rel = rel_path_for(*c, id);
        if touched.insert(rel) {
            targets.push((path, crate::canonical::to_canonical_string(&rec.raw)));
        }
    }
    for r in removals {
        let p = reg.root.join(r);
        if let Some(d) = p.parent() {
            inside(&guard, d)?;
        }
    }
    let after = crate::validate::validate(reg);
    let fresh = new_problems(before, &after, &touched);
    if !fresh.is_empty() {
        return Err(WriteError::Invalid(fresh));
    }
    // Stage.
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| WriteError::Io { path, source }
    };
    let mut staged = Vec::with_capacity(targets.len());
    for (path, text) in &targets {
        let dir = path.parent().expect("<root>/<dir>/<id>.json");
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        inside(&guard, dir)?;
        let existing = std::fs::symlink_metadata(path).ok().filter(|m| m.is_file());
        // The mode a plain `File::create` gives (0666 less the umask; a temporary file is
        // 0600), or the replaced file's own: a registry is read by its web server and by others.
        let mut builder = tempfile::Builder::new();
        #[cfg(unix)]
        builder.permissions(match &existing {
            Some(m) => m.permissions(),
            None => std::os::unix::fs::PermissionsExt::from_mode(0o666),
        });
        let mut tmp = builder.tempfile_in(dir).map_err(io(dir))?;
        std::io::Write::write_all(&mut tmp, text.as_bytes()).map_err(io(path))?;
        tmp.as_file().sync_all().map_err(io(path))?;
        // Old content, to restore when a later rename fails.
        let old = match existing {
            Some(_) => Some(std::fs::read(path).map_err(io(path))?),
            None => None,
        };
        staged.push((tmp, path.clone(), old));
    }
    // Commit: rename every staged file into place.
    let mut done: Vec<(PathBuf, Option<Vec<u8>>)> = Vec::new();
    for (tmp, path, old) in staged {
        if let Err(e) = tmp.persist(&path) {
            for (p, old) in done.into_iter().rev() {
                let _ = match old {
                    Some(bytes) => std::fs::write(&p, bytes),
                    None => std::fs::remove_file(&p),
                };
            }
            return Err(WriteError::Io {
                path,
                source: e.error,
            });
        }
        done.push((path, old));
    }
    for r in removals {
        let p = reg.root.join(r);
        if std::fs::symlink_metadata(&p).is_ok() {
            std::fs::remove_file(&p).map_err(io(&p))?;
        }
    }
    Ok(done.into_iter().map(|(p, _)| p).collect())
}
