//! Exporters behind one trait (the shape of hyperfine's `src/export/mod.rs`): each format turns
//! a finished [`Results`] into bytes; an [`ExportManager`] fans one run out to several files.
//!
//! Formats: JSON (the results file itself), plain text (the final report), CSV (one row per
//! cell, columns documented in `docs/exports.md`), Markdown and a self-contained HTML report.

use std::path::{Path, PathBuf};

use servebench_results::Results;

use crate::ReportOptions;

/// An output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExportFormat {
    /// The results JSON (pretty, the same bytes as `-o`).
    Json,
    /// The plain-text report printed at the end of a run.
    Text,
    /// One row per cell, stable columns.
    Csv,
    /// Markdown tables.
    Markdown,
    /// One self-contained HTML file with inline SVG plots.
    Html,
}

impl ExportFormat {
    /// The exporter of this format.
    pub fn exporter(self) -> Box<dyn Exporter> {
        match self {
            ExportFormat::Json => Box::new(JsonExporter),
            ExportFormat::Text => Box::new(TextExporter),
            ExportFormat::Csv => Box::new(crate::csv_export::CsvExporter),
            ExportFormat::Markdown => Box::new(crate::markdown::MarkdownExporter),
            ExportFormat::Html => Box::new(crate::html::HtmlExporter),
        }
    }

    /// The bytes of `results` in this format ([`Exporter::serialize`]); the text formats (text,
    /// CSV, Markdown, HTML) without control characters ([`without_controls`]): a model id or an
    /// error message from a hostile server must not recolour or retitle the terminal of whoever
    /// `cat`s the file. JSON escapes them itself.
    ///
    /// # Errors
    /// Those of the exporter.
    pub fn render(self, results: &Results, opts: &ReportOptions) -> anyhow::Result<Vec<u8>> {
        let bytes = self.exporter().serialize(results, opts)?;
        Ok(match self {
            ExportFormat::Json => bytes,
            _ => match String::from_utf8(bytes) {
                Ok(text) => without_controls(text).into_bytes(),
                Err(e) => e.into_bytes(),
            },
        })
    }
}

pub use servebench_results::is_invisible;

/// `text` with every control character but line feed and tab (C0 with ESC and carriage
/// return, DEL, C1) and every invisible character ([`is_invisible`]) replaced by a space;
/// unchanged (no copy) when it has none. A carriage return goes too: the reports end lines
/// with a line feed alone, and a lone CR from a file would overwrite the line on a terminal
/// (break-it round 8).
pub fn without_controls(text: String) -> String {
    let bad = |c: char| (c.is_control() && !matches!(c, '\n' | '\t')) || is_invisible(c);
    if !text.chars().any(bad) {
        return text;
    }
    text.chars().map(|c| if bad(c) { ' ' } else { c }).collect()
}

/// `s` (a server's model id, engine version, error text) fit for one line of a report: every
/// control character, line breaks included, and every bidirectional formatting character
/// replaced by a space; borrowed when it has none. A model id with a line feed must not add a
/// line to a header or a table row.
pub fn one_line(s: &str) -> std::borrow::Cow<'_, str> {
    let bad = |c: char| c.is_control() || is_invisible(c);
    if !s.chars().any(bad) {
        return std::borrow::Cow::Borrowed(s);
    }
    std::borrow::Cow::Owned(s.chars().map(|c| if bad(c) { ' ' } else { c }).collect())
}

/// One export format.
pub trait Exporter {
    /// The bytes of `results` in this format.
    ///
    /// # Errors
    /// Serialisation failures (for example a CSV writer error).
    fn serialize(&self, results: &Results, opts: &ReportOptions) -> anyhow::Result<Vec<u8>>;
}

/// The results JSON.
pub struct JsonExporter;

impl Exporter for JsonExporter {
    fn serialize(&self, results: &Results, _opts: &ReportOptions) -> anyhow::Result<Vec<u8>> {
        Ok(crate::to_json(results)?)
    }
}

/// The plain-text report.
pub struct TextExporter;

impl Exporter for TextExporter {
    fn serialize(&self, results: &Results, opts: &ReportOptions) -> anyhow::Result<Vec<u8>> {
        Ok(crate::render_text(results, opts).into_bytes())
    }
}

/// Fans one run out to several files, each written atomically.
#[derive(Default)]
pub struct ExportManager {
    targets: Vec<(ExportFormat, PathBuf)>,
}

impl ExportManager {
    /// An empty manager.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `format` written to `path`.
    pub fn add(&mut self, format: ExportFormat, path: PathBuf) {
        self.targets.push((format, path));
    }

    /// The files this manager writes.
    pub fn paths(&self) -> impl Iterator<Item = &Path> {
        self.targets.iter().map(|(_, p)| p.as_path())
    }

    /// Writes every export; keeps going after a failure and returns every error as
    /// `(path, error)`.
    pub fn write_all(
        &self,
        results: &Results,
        opts: &ReportOptions,
    ) -> Vec<(PathBuf, anyhow::Error)> {
        let mut errors = Vec::new();
        for (format, path) in &self.targets {
            let r = format
                .render(results, opts)
                .and_then(|bytes| crate::write_atomic(path, &bytes));
            if let Err(e) = r {
                errors.push((path.clone(), e));
            }
        }
        errors
    }
}
