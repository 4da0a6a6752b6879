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
//! 4. every file is staged as an unnamed temporary file in its target's directory, then all
//!    are renamed into place, every step through directory handles opened from the root's (a
//!    link is followed only while it stays under the root, so swapping a directory for a link
//!    during the write changes nothing); when a rename fails, the files already renamed get their old content back (or are
//!    removed when they were new), so a refused or failed write leaves every file as it was.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use cap_std::fs::Dir;

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
    /// Staging or renaming failed (files already renamed were put back).
    #[error("cannot write {path}: {source} (the registry was left as it was)")]
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
    // (path, canonical text, read by the load, collection directory, file name)
    let mut targets: Vec<(PathBuf, String, bool, &'static str, String)> = Vec::new();
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
            let loaded = reg.was_loaded(*c, id);
            targets.push((
                path,
                crate::canonical::to_canonical_string(&rec.raw),
                loaded,
                c.dir_name(),
                format!("{id}.json"),
            ));
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
    // Stage. Every file is written and renamed through directory handles opened from the
    // root's (cap-std: a link is followed only while it stays under the root), so a collection
    // directory swapped for a link out of the registry after the checks above receives nothing
    // (break-it round 9: a swap during `publish` wrote sweeps outside). A staged file has no
    // name until it is renamed into place (`O_TMPFILE` where the system has it), so a kill
    // leaves no temporary files behind.
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| WriteError::Io { path, source }
    };
    let root_dir =
        Dir::open_ambient_dir(&reg.root, cap_std::ambient_authority()).map_err(io(&reg.root))?;
    let mut cols: Vec<(String, Dir)> = Vec::new();
    // (directory handle index, file name) of each target.
    let mut placed = Vec::with_capacity(targets.len());
    for (path, _, _, dname, fname) in &targets {
        let dir = path.parent().expect("<root>/<dir>/<id>.json");
        let k = open_col(&root_dir, &mut cols, dname, dir, true, guard.root())?;
        placed.push((k, fname));
    }
    let mut staged = Vec::with_capacity(targets.len());
    for ((path, text, loaded, _, _), (k, fname)) in targets.iter().zip(&placed) {
        let col = &cols[*k].1;
        // A file this load did not read (it could not be read, or it appeared since) is not
        // replaced by a record drafted in its absence (break-it round 11: a recipe whose
        // directory could not be read during a swap was overwritten by a fresh draft, and 13
        // sweeps lost their links).
        if !loaded && col.symlink_metadata(fname).is_ok() {
            return Err(WriteError::Io {
                path: path.clone(),
                source: std::io::Error::new(
                    std::io::ErrorKind::AlreadyExists,
                    "the file exists but was not read when the registry was loaded (unreadable, or written since: `servebench registry validate` reports it)",
                ),
            });
        }
        let existing = col.symlink_metadata(fname).ok().filter(|m| m.is_file());
        let mut tmp = cap_tempfile::TempFile::new(col).map_err(io(path))?;
        // A new file gets the mode a plain `File::create` gives (0666 less the umask); a
        // replaced file keeps its own: a registry is read by its web server and by others.
        if let Some(m) = &existing {
            tmp.as_file()
                .set_permissions(m.permissions())
                .map_err(io(path))?;
        }
        std::io::Write::write_all(&mut tmp, text.as_bytes()).map_err(io(path))?;
        tmp.as_file().sync_all().map_err(io(path))?;
        // Old content, to restore when a later rename fails.
        let old = match existing {
            Some(_) => Some(col.read(fname).map_err(io(path))?),
            None => None,
        };
        staged.push((tmp, *k, (*fname).clone(), path.clone(), old));
    }
    // Commit: rename every staged file into place, with Ctrl-C, SIGTERM and SIGHUP held
    // until the last rename and the removals are done (break-it round 9: a SIGTERM between two
    // renames left a recipe listing a sweep that was never written). The held signal is
    // delivered when `_held` drops. SIGKILL cannot be held.
    let _held = HeldSignals::hold();
    let mut done: Vec<(usize, String, PathBuf, Option<Vec<u8>>)> = Vec::new();
    for (tmp, k, fname, path, old) in staged {
        if let Err(e) = tmp.replace(&fname) {
            for (k, f, _, old) in done.into_iter().rev() {
                let col = &cols[k].1;
                let _ = match old {
                    Some(bytes) => col.write(&f, bytes),
                    None => col.remove_file(&f),
                };
            }
            return Err(WriteError::Io { path, source: e });
        }
        done.push((k, fname, path, old));
    }
    for r in removals {
        let p = reg.root.join(r);
        let Some((dname, fname)) = r.split_once('/') else {
            continue;
        };
        let dir = p.parent().unwrap_or(&reg.root);
        if std::fs::symlink_metadata(&p).is_err() {
            continue;
        }
        let k = open_col(&root_dir, &mut cols, dname, dir, false, guard.root())?;
        let col = &cols[k].1;
        if col.symlink_metadata(fname).is_ok() {
            col.remove_file(fname).map_err(io(&p))?;
        }
    }
    Ok(done.into_iter().map(|(_, _, p, _)| p).collect())
}

/// The index in `cols` of the handle of collection directory `name` (opened from `root_dir`,
/// created first when `create`); `dir` is its path, for errors.
///
/// Errors: [`WriteError::Outside`] when it leads out of the root, else [`WriteError::Io`].
fn open_col(
    root_dir: &Dir,
    cols: &mut Vec<(String, Dir)>,
    name: &str,
    dir: &Path,
    create: bool,
    root: &Path,
) -> Result<usize, WriteError> {
    if let Some(k) = cols.iter().position(|(n, _)| n == name) {
        return Ok(k);
    }
    let fail = |e: std::io::Error| {
        if is_escape(&e) {
            WriteError::Outside {
                path: dir.to_path_buf(),
                root: root.to_path_buf(),
            }
        } else if matches!(
            e.kind(),
            std::io::ErrorKind::AlreadyExists | std::io::ErrorKind::NotADirectory
        ) {
            WriteError::Io {
                path: dir.to_path_buf(),
                source: std::io::Error::new(
                    e.kind(),
                    "something that is not a directory takes this collection's place (`servebench registry validate` reports it)",
                ),
            }
        } else {
            WriteError::Io {
                path: dir.to_path_buf(),
                source: e,
            }
        }
    };
    if create {
        root_dir.create_dir_all(name).map_err(fail)?;
    }
    let col = root_dir.open_dir(name).map_err(fail)?;
    cols.push((name.to_string(), col));
    Ok(cols.len() - 1)
}

/// Whether a cap-std error says a path led out of the root (a symbolic link out, or `..`).
/// cap-std has no error kind of its own for it, so its message is read; if that wording ever
/// changes, an escape is reported as an I/O error instead: still refused, nothing written.
fn is_escape(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::PermissionDenied && e.to_string().contains("outside")
}

/// Ctrl-C (SIGINT), SIGTERM and SIGHUP caught and remembered while this lives, then the
/// previous dispositions restored and the first remembered signal raised again, so it has its
/// usual effect once the files are consistent. Process-wide (`sigaction`), so it holds whichever
/// thread the signal is delivered to.
#[cfg(unix)]
struct HeldSignals {
    old: Vec<(libc::c_int, libc::sigaction)>,
}

#[cfg(unix)]
static HELD: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

#[cfg(unix)]
extern "C" fn remember(sig: libc::c_int) {
    // async-signal-safe: one atomic store
    let _ = HELD.compare_exchange(
        0,
        sig,
        std::sync::atomic::Ordering::SeqCst,
        std::sync::atomic::Ordering::SeqCst,
    );
}

#[cfg(unix)]
impl HeldSignals {
    fn hold() -> HeldSignals {
        HELD.store(0, std::sync::atomic::Ordering::SeqCst);
        let mut old = Vec::new();
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            // SAFETY: a zeroed sigaction is a valid value to fill; `remember` only stores an
            // atomic (async-signal-safe); the previous action is kept and restored on drop.
            unsafe {
                let mut act: libc::sigaction = std::mem::zeroed();
                act.sa_sigaction = remember as *const () as libc::sighandler_t;
                libc::sigemptyset(&mut act.sa_mask);
                let mut prev: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, &act, &mut prev) == 0 {
                    old.push((sig, prev));
                }
            }
        }
        HeldSignals { old }
    }
}

#[cfg(unix)]
impl Drop for HeldSignals {
    fn drop(&mut self) {
        for (sig, prev) in &self.old {
            // SAFETY: restores the action saved by `hold` for the same signal.
            unsafe {
                libc::sigaction(*sig, prev, std::ptr::null_mut());
            }
        }
        let sig = HELD.swap(0, std::sync::atomic::Ordering::SeqCst);
        if sig != 0 {
            // SAFETY: raising a signal is always allowed; its restored disposition applies.
            unsafe {
                libc::raise(sig);
            }
        }
    }
}

#[cfg(not(unix))]
struct HeldSignals;

#[cfg(not(unix))]
impl HeldSignals {
    fn hold() -> HeldSignals {
        HeldSignals
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicI32, Ordering};

    static DELIVERED: AtomicI32 = AtomicI32::new(0);

    extern "C" fn count(_: libc::c_int) {
        DELIVERED.fetch_add(1, Ordering::SeqCst);
    }

    /// A SIGTERM that arrives while a commit holds signals reaches the process's own handler
    /// only once the hold ends, exactly once; the handler in place before is back after.
    #[test]
    fn a_signal_during_the_commit_is_delivered_after_it() {
        // SAFETY: installs a handler that only bumps an atomic, for SIGTERM in this test binary
        // (no other test of the library touches signals).
        unsafe {
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = count as *const () as libc::sighandler_t;
            libc::sigemptyset(&mut act.sa_mask);
            assert_eq!(
                libc::sigaction(libc::SIGTERM, &act, std::ptr::null_mut()),
                0
            );
        }
        {
            let _held = HeldSignals::hold();
            // SAFETY: raising SIGTERM at this thread; it is caught by `remember`.
            unsafe { libc::raise(libc::SIGTERM) };
            assert_eq!(
                DELIVERED.load(Ordering::SeqCst),
                0,
                "held during the commit"
            );
        }
        assert_eq!(
            DELIVERED.load(Ordering::SeqCst),
            1,
            "delivered once after it"
        );
        // SAFETY: as above; the restored handler counts again.
        unsafe { libc::raise(libc::SIGTERM) };
        assert_eq!(
            DELIVERED.load(Ordering::SeqCst),
            2,
            "the old handler is back"
        );
    }
}
