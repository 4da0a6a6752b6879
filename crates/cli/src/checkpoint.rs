//! Checkpointed results: every [`RunEvent::Checkpoint`] the runner sends (after each finished
//! cell and prefill row) replaces the results file atomically, so a run killed by SIGKILL, an
//! OOM kill or a power cut keeps every cell it finished. The other events go on to the live view.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use servebench_core::RunEvent;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

/// A results file of a measuring command (`run`, `task`): a file already at its path is kept
/// (renamed to NAME.1.json or the next free number, said on stderr) just before the first write,
/// so a run that never writes (its probe failed, a bad flag found late) leaves it where it was.
#[derive(Debug)]
pub struct OutputFile {
    path: PathBuf,
    kept: std::sync::Once,
}

impl OutputFile {
    /// The results file at `path`; nothing is touched until [`OutputFile::write`].
    pub fn new(path: PathBuf) -> Self {
        OutputFile {
            path,
            kept: std::sync::Once::new(),
        }
    }

    /// Where the results go.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Keeps a previous file (first call only), then writes `results` atomically
    /// ([`write_results`]).
    ///
    /// # Errors
    /// Those of [`write_results`].
    pub fn write<T>(&self, results: &T) -> anyhow::Result<()>
    where
        T: serde::Serialize + serde::de::DeserializeOwned + Clone,
    {
        self.kept
            .call_once(|| crate::reports::keep_previous(&self.path));
        write_results(results, &self.path)
    }
}

/// Consumes `rx` until it closes: writes each checkpoint to `file` (in order, off the async
/// threads) and forwards every other event to `live`. A failed write is reported once on stderr
/// and the run goes on (the final write reports the error again).
pub async fn pump(
    mut rx: UnboundedReceiver<RunEvent>,
    live: UnboundedSender<RunEvent>,
    file: std::sync::Arc<OutputFile>,
) {
    let path = file.path().to_path_buf();
    let mut warned = false;
    while let Some(ev) = rx.recv().await {
        match ev {
            RunEvent::Checkpoint(results) => {
                let f = file.clone();
                let written = tokio::task::spawn_blocking(move || f.write(&*results)).await;
                let err = match written {
                    Ok(Ok(())) => None,
                    Ok(Err(e)) => Some(e.to_string()),
                    Err(e) => Some(e.to_string()),
                };
                if let (Some(e), false) = (err, warned) {
                    warned = true;
                    let _ = writeln!(
                        std::io::stderr(),
                        "servebench: warning: cannot write the checkpoint {}: {e}",
                        path.display()
                    );
                }
            }
            other => {
                let _ = live.send(other);
            }
        }
    }
}

/// Writes any results value (`servebench run`'s [`servebench_results::Results`], a task's
/// results) as pretty JSON with a final newline, atomically: a temporary file in the same
/// folder, `fsync`, rename ([`servebench_report::write_atomic`]). Every results file of the CLI
/// is written here: checkpoints, final results, task results.
///
/// The registered secrets ([`servebench_client::secrets`]: the API key, which a server may echo
/// in an error body) are redacted from every string first ([`scrubbed`]).
pub fn write_results<T>(results: &T, path: &Path) -> anyhow::Result<()>
where
    T: serde::Serialize + serde::de::DeserializeOwned + Clone,
{
    let results = scrubbed(results);
    let mut bytes = serde_json::to_vec_pretty(&*results)?;
    bytes.push(b'\n');
    servebench_report::write_atomic(path, &bytes)?;
    Ok(())
}

/// `value` with every registered secret ([`servebench_client::secrets`]) redacted from its
/// strings: borrowed when no secret is registered or none occurs (the common case costs one
/// `any()` check), else rebuilt from its scrubbed JSON value, so the type and its field order are
/// kept. Applied to everything a run writes or prints from its results.
pub fn scrubbed<T>(value: &T) -> std::borrow::Cow<'_, T>
where
    T: serde::Serialize + serde::de::DeserializeOwned + Clone,
{
    use std::borrow::Cow;
    if !servebench_client::secrets::any() {
        return Cow::Borrowed(value);
    }
    let Ok(mut v) = serde_json::to_value(value) else {
        return Cow::Borrowed(value);
    };
    if !servebench_client::secrets::scrub_json(&mut v) {
        return Cow::Borrowed(value);
    }
    match serde_json::from_value(v) {
        Ok(t) => Cow::Owned(t),
        // A type that does not read back its own JSON: nothing is better than a leak, but no
        // results type of servebench is one (they are all read back by --resume / report).
        Err(_) => Cow::Borrowed(value),
    }
}
