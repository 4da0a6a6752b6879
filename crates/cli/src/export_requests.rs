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
///
/// Each line goes to the buffer in one piece and the buffer is flushed whenever no further row
/// is waiting, so the file only ever holds whole lines: a run killed with SIGKILL leaves every
/// row written before the last quiet moment readable (break-it round 7: a torn last line made
/// `pandas.read_json(lines=True)` fail).
fn write_rows(rx: Receiver<RequestRow>, path: &Path) -> std::io::Result<u64> {
    let Ok(first) = rx.recv() else {
        return Ok(0);
    };
    let mut out = open(path)?;
    let mut n = 0;
    let mut next = Some(first);
    while let Some(row) = next.take() {
        out.write_all(&line_of(&row)?)?;
        n += 1;
        next = match rx.try_recv() {
            Ok(r) => Some(r),
            Err(_) => {
                out.flush()?;
                rx.recv().ok()
            }
        };
    }
    out.flush()?;
    Ok(n)
}

/// One row as its JSONL line (with the `\n`). A registered secret (the API key) echoed by the
/// server in an error text is redacted first.
fn line_of(row: &RequestRow) -> std::io::Result<Vec<u8>> {
    let mut line = if servebench_client::secrets::any() {
        let mut v = serde_json::to_value(row)?;
        servebench_client::secrets::scrub_json(&mut v);
        serde_json::to_vec(&v)?
    } else {
        serde_json::to_vec(row)?
    };
    line.push(b'\n');
    Ok(line)
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
