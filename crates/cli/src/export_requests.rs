//! `--export-requests FILE.jsonl`: the JSON Lines writer of the per-request rows
//! (`servebench_core::export`), on its own thread so the run's async threads never write a file.
//! Each row is written when its request ends; memory stays at one row plus the file buffer
//! (format and a pandas snippet in docs/exports.md).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::Receiver;
use std::thread::JoinHandle;

use servebench_core::export::{self, RequestExport, RequestRow};

/// The running writer: join it with [`RowWriter::finish`] once every sender is dropped.
pub struct RowWriter {
    handle: JoinHandle<std::io::Result<u64>>,
    path: PathBuf,
}

/// Starts the writer of `path`; returns the export handle for `RunConfig::export`. The file is
/// opened at the first row (a previous file of that name is kept as NAME.1.jsonl then, like every
/// output of a run), so a run that fails to start leaves an older file where it was.
///
/// # Errors
/// The writer thread could not be started.
pub fn start(path: &Path) -> anyhow::Result<(RequestExport, RowWriter)> {
    let (tx, rx) = export::channel();
    let p = path.to_owned();
    let handle = std::thread::Builder::new()
        .name("export-requests".into())
        .spawn(move || write_rows(rx, &p))?;
    Ok((
        tx,
        RowWriter {
            handle,
            path: path.to_owned(),
        },
    ))
}

/// Opens `path` for the rows, keeping a previous file.
fn open(path: &Path) -> std::io::Result<BufWriter<File>> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?; // created at the first row, not when the flags were read
    }
    crate::reports::keep_previous(path);
    File::create(path).map(BufWriter::new)
}

/// Writes every row that comes to `path` (opened at the first one), one JSON object per line,
/// until the channel closes. Returns the number of rows written.
fn write_rows(rx: Receiver<RequestRow>, path: &Path) -> std::io::Result<u64> {
    let mut rows = rx.into_iter();
    let Some(first) = rows.next() else {
        return Ok(0);
    };
    let mut out = open(path)?;
    let mut n = 0;
    for row in std::iter::once(first).chain(rows) {
        // A registered secret (the API key) echoed by the server in an error text is redacted;
        // the row is written from its scrubbed value only then (other rows keep their order).
        if servebench_client::secrets::any() {
            let mut v = serde_json::to_value(&row)?;
            if servebench_client::secrets::scrub_json(&mut v) {
                serde_json::to_writer(&mut out, &v)?;
                out.write_all(b"\n")?;
                n += 1;
                continue;
            }
        }
        serde_json::to_writer(&mut out, &row)?;
        out.write_all(b"\n")?;
        n += 1;
    }
    out.flush()?;
    Ok(n)
}

impl RowWriter {
    /// Waits for the writer (every [`RequestExport`] must be dropped first) and reports a write
    /// error with the flag's name. A run that measured no request (`ran`: it started and
    /// finished, every cell kept by `--resume`, say) still gets its empty file; one that failed
    /// to start gets none.
    pub fn finish(self, ran: bool) -> anyhow::Result<u64> {
        match self.handle.join() {
            Ok(Ok(0)) if ran => open(&self.path)
                .and_then(|mut f| f.flush())
                .map(|()| 0)
                .map_err(|e| anyhow::anyhow!("--export-requests {}: {e}", self.path.display())),
            Ok(Ok(n)) => Ok(n),
            Ok(Err(e)) => Err(anyhow::anyhow!(
                "--export-requests {}: {e}",
                self.path.display()
            )),
            Err(_) => Err(anyhow::anyhow!(
                "--export-requests {}: the writer thread panicked",
                self.path.display()
            )),
        }
    }
}
