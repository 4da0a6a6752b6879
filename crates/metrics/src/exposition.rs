//! Prometheus text exposition format (version 0.0.4) parsing.
//!
//! The grammar work is done by the `prom_text_format_parser` crate (a winnow grammar: metric and
//! label names with `:`, quoted label values with `\"`, `\\`, `\n` escapes and any other
//! character including `,` and `}`, `NaN`, `+Inf`/`-Inf`, exponent notation, integer values,
//! optional millisecond timestamps, `# HELP` / `# TYPE`, histograms, summaries, untyped samples,
//! blank lines). This module wraps it in servebench's own types and adds the leniency a benchmark
//! needs against real servers:
//!
//! * a line the grammar rejects is dropped and counted ([`Scrape::rejected_lines`]) instead of
//!   failing the whole scrape (Prometheus itself would reject the scrape; a benchmark would then
//!   lose every server-side number because of one odd line);
//! * `\r\n` line endings and leading indentation are accepted;
//! * label values are unescaped (the underlying crate returns them raw);
//! * every `*_created` series is set apart ([`Scrape::created_samples`]): vLLM V1 and SGLang export
//!   a `_created` sample (process epoch seconds, ~1.7e9) beside each counter and histogram, and
//!   reading it as a count is pitfall 38 (`shared/reference/pitfalls.md`).
//!
//! Histogram and summary samples keep their real series names (`x_bucket`, `x_sum`, `x_count`),
//! so a histogram without a `# TYPE` line (e.g. the vLLM issue-8115 excerpt) is still usable.

use std::collections::BTreeMap;
use std::fmt;

use prom_text_format_parser::{parse_scrape, ScrapeParseError, Type, ValueType};

/// The type a family declares in its `# TYPE` line (`Untyped` when there is none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum MetricType {
    /// Monotonic counter (`# TYPE x counter`).
    Counter,
    /// Gauge (`# TYPE x gauge`).
    Gauge,
    /// Histogram: `x_bucket{le=...}`, `x_sum`, `x_count` series.
    Histogram,
    /// Summary: `x{quantile=...}`, `x_sum`, `x_count` series.
    Summary,
    /// No `# TYPE` line, or `# TYPE x untyped`.
    Untyped,
}

impl From<Type> for MetricType {
    fn from(t: Type) -> Self {
        match t {
            Type::Counter => MetricType::Counter,
            Type::Gauge => MetricType::Gauge,
            Type::Histogram => MetricType::Histogram,
            Type::Summary => MetricType::Summary,
            Type::Untyped => MetricType::Untyped,
        }
    }
}

/// One sample line: series name, labels, value (and the optional exposition timestamp).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Sample {
    /// Full series name as exposed, e.g. `vllm:prompt_tokens_total` or
    /// `sglang:time_to_first_token_seconds_bucket`.
    pub name: String,
    /// Labels with unescaped values. Values are always strings (`"None"`, `"True"`, `"[]"`, a
    /// stringified Python dict...), exactly as the server printed them.
    pub labels: BTreeMap<String, String>,
    /// Sample value (may be `NaN` or `±inf`: the exposition format allows them).
    pub value: f64,
    /// Optional timestamp in milliseconds since the Unix epoch, as written on the line.
    pub timestamp_ms: Option<i64>,
}

impl Sample {
    /// Value of label `key`, if the sample has it.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.get(key).map(String::as_str)
    }
}

/// Why a `/metrics` body could not be used at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    /// The body had non-comment lines but not one of them is a valid exposition sample (for
    /// example an HTML error page or JSON from a proxy).
    NotExposition {
        /// Number of non-blank lines the grammar rejected.
        rejected_lines: usize,
        /// The first rejected line (truncated to 120 characters) for diagnostics.
        first_rejected: String,
    },
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::NotExposition {
                rejected_lines,
                first_rejected,
            } => write!(
                f,
                "not a Prometheus text exposition: {rejected_lines} line(s) rejected, first: {first_rejected:?}"
            ),
        }
    }
}

impl std::error::Error for ParseError {}

/// One parsed `/metrics` scrape.
///
/// Pure data: no clock is read; the caller stamps the scrape with its own `Instant` if needed.
#[derive(Debug, Clone, Default)]
pub struct Scrape {
    samples: Vec<Sample>,
    created: Vec<Sample>,
    by_name: BTreeMap<String, Vec<usize>>,
    families: BTreeMap<String, MetricType>,
    rejected_lines: usize,
}

/// Label that identifies tensor-parallel replicas of the same series (spec §3.14: only
/// `tp_rank="0"` is kept).
pub(crate) const REPLICA_LABEL: &str = "tp_rank";

fn is_created_name(name: &str) -> bool {
    name.ends_with("_created")
}

fn unescape_label_value(raw: &str) -> String {
    if !raw.contains('\\') {
        return raw.to_string();
    }
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('\\') => out.push('\\'),
            Some('"') => out.push('"'),
            Some(other) => {
                out.push('\\');
                out.push(other);
            }
            None => out.push('\\'),
        }
    }
    out
}

fn truncate_for_message(line: &str) -> String {
    line.chars().take(120).collect()
}

impl Scrape {
    /// Parse a Prometheus text exposition body (`GET /metrics`).
    ///
    /// Returns `Ok` with an empty scrape for an empty or comment-only body, and
    /// [`ParseError::NotExposition`] when the body has sample-like lines but none of them parses.
    /// Individual bad lines are skipped and counted in [`Scrape::rejected_lines`].
    pub fn parse(text: &str) -> Result<Scrape, ParseError> {
        // Pass 1: validate each line on its own with the real grammar; keep the good ones.
        let mut kept = String::with_capacity(text.len() + 1);
        let mut rejected = 0usize;
        let mut first_rejected: Option<String> = None;
        let mut one = String::new();
        for raw in text.split('\n') {
            let line = raw.strip_suffix('\r').unwrap_or(raw).trim_start();
            if line.trim_end().is_empty() {
                continue;
            }
            one.clear();
            one.push_str(line);
            one.push('\n');
            let (_, err) = parse_scrape(&one);
            match err {
                Some(ScrapeParseError::Parse(_)) => {
                    if !line.starts_with('#') {
                        rejected += 1;
                        if first_rejected.is_none() {
                            first_rejected = Some(truncate_for_message(line));
                        }
                    }
                }
                // `Collect` errors on a single line only mean "TYPE/HELP without samples yet".
                _ => kept.push_str(&one),
            }
        }

        if kept.is_empty() {
            return match first_rejected {
                Some(first_rejected) => Err(ParseError::NotExposition {
                    rejected_lines: rejected,
                    first_rejected,
                }),
                None => Ok(Scrape::default()),
            };
        }

        // Pass 2: assemble families from the surviving lines. Per-family assembly errors (a TYPE
        // line without samples, as in truncated excerpts) leave the other families intact.
        let (metrics, whole_err) = parse_scrape(&kept);
        if let Some(ScrapeParseError::Parse(msg)) = whole_err {
            // Every kept line parsed alone, so this is not expected; report it rather than panic.
            return Err(ParseError::NotExposition {
                rejected_lines: rejected,
                first_rejected: truncate_for_message(&msg),
            });
        }

        let mut scrape = Scrape {
            rejected_lines: rejected,
            ..Scrape::default()
        };
        for metric in metrics {
            let kind = MetricType::from(metric.kind);
            if !is_created_name(&metric.name) {
                scrape.families.entry(metric.name.clone()).or_insert(kind);
            }
            for s in metric.samples {
                let value: f64 = match s.value.value.as_str().parse() {
                    Ok(v) => v,
                    Err(_) => {
                        scrape.rejected_lines += 1;
                        continue;
                    }
                };
                let labels: BTreeMap<String, String> = s
                    .labels
                    .iter()
                    .map(|l| (l.key.clone(), unescape_label_value(&l.value)))
                    .collect();
                let name = match (kind, s.value.value_type) {
                    (MetricType::Histogram, ValueType::Sample) if labels.contains_key("le") => {
                        format!("{}_bucket", metric.name)
                    }
                    (_, ValueType::Sum) => format!("{}_sum", metric.name),
                    (_, ValueType::Count) => format!("{}_count", metric.name),
                    _ => metric.name.clone(),
                };
                let sample = Sample {
                    name,
                    labels,
                    value,
                    timestamp_ms: s.value.timestamp,
                };
                scrape.push(sample);
            }
        }

        if scrape.samples.is_empty() && scrape.created.is_empty() && rejected > 0 {
            return Err(ParseError::NotExposition {
                rejected_lines: rejected,
                first_rejected: first_rejected.unwrap_or_default(),
            });
        }
        Ok(scrape)
    }

    fn push(&mut self, sample: Sample) {
        if is_created_name(&sample.name) {
            self.created.push(sample);
        } else {
            self.by_name
                .entry(sample.name.clone())
                .or_default()
                .push(self.samples.len());
            self.samples.push(sample);
        }
    }

    /// Every sample except the `*_created` ones, in exposition order.
    pub fn samples(&self) -> impl Iterator<Item = &Sample> {
        self.samples.iter()
    }

    /// The `*_created` samples (epoch seconds at which a counter/histogram series was created).
    /// Never counts; used only to detect counter resets (pitfall 36).
    pub fn created_samples(&self) -> impl Iterator<Item = &Sample> {
        self.created.iter()
    }

    /// Family names (from `# TYPE` lines, or the sample name for untyped samples), sorted,
    /// `*_created` families excluded.
    pub fn family_names(&self) -> impl Iterator<Item = &str> {
        self.families.keys().map(String::as_str)
    }

    /// Declared type of family `name` (`None` if no such family).
    pub fn family_type(&self, name: &str) -> Option<MetricType> {
        self.families.get(name).copied()
    }

    /// All samples whose series name is exactly `name` (no prefix matching).
    pub fn series<'a>(&'a self, name: &str) -> impl Iterator<Item = &'a Sample> + 'a {
        self.by_name
            .get(name)
            .map(|v| v.as_slice())
            .unwrap_or(&[])
            .iter()
            .map(move |&i| &self.samples[i])
    }

    /// Whether at least one sample named exactly `name` exists.
    pub fn has_series(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
    }

    /// Sum over every series named exactly `name`, after keeping only `tp_rank="0"` among
    /// tensor-parallel replicas. `None` when no such series exists (absent is never 0).
    pub fn sum(&self, name: &str) -> Option<f64> {
        let selected = self.select(name, &[]);
        if selected.is_empty() {
            None
        } else {
            Some(selected.iter().map(|s| s.value).sum())
        }
    }

    /// Number of sample lines the grammar rejected (and that were skipped).
    pub fn rejected_lines(&self) -> usize {
        self.rejected_lines
    }

    /// Whether the scrape holds no sample at all (created samples included).
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty() && self.created.is_empty()
    }

    /// `process_start_time_seconds` (epoch seconds) when the server exports it.
    pub fn process_start_time(&self) -> Option<f64> {
        self.sum("process_start_time_seconds")
    }

    /// Set every sample value to 0 (keeping `process_start_time_seconds` and `_created`), for
    /// the "since server start" baseline.
    pub(crate) fn zero_values(&mut self) {
        for s in &mut self.samples {
            if s.name != "process_start_time_seconds" {
                s.value = 0.0;
            }
        }
    }

    /// The `_created` value that belongs to series `sample` (same labels, name with its
    /// `_total` / `_sum` / `_count` / `_bucket` suffix replaced by `_created`).
    pub(crate) fn created_for(&self, sample: &Sample) -> Option<f64> {
        let base = ["_total", "_sum", "_count", "_bucket"]
            .iter()
            .find_map(|suf| sample.name.strip_suffix(suf))
            .unwrap_or(&sample.name);
        let created_name = format!("{base}_created");
        self.created
            .iter()
            .find(|c| {
                c.name == created_name
                    && c.labels.len() + usize::from(sample.labels.contains_key("le"))
                        == sample.labels.len()
                    && c.labels
                        .iter()
                        .all(|(k, v)| sample.labels.get(k).is_some_and(|sv| sv == v))
            })
            .map(|c| c.value)
    }

    /// Samples named `name` that pass `filters`, with tensor-parallel replicas collapsed: among
    /// series whose labels differ only in `tp_rank`, keep `tp_rank="0"` (or the lowest rank when
    /// rank 0 is missing). Spec §3.14 / brief §1.
    pub(crate) fn select<'a>(
        &'a self,
        name: &str,
        filters: &[crate::catalog::LabelFilter],
    ) -> Vec<&'a Sample> {
        let mut groups: BTreeMap<Vec<(&str, &str)>, &Sample> = BTreeMap::new();
        for s in self.series(name) {
            if !filters.iter().all(|f| f.matches(s)) {
                continue;
            }
            let key: Vec<(&str, &str)> = s
                .labels
                .iter()
                .filter(|(k, _)| k.as_str() != REPLICA_LABEL)
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            match groups.get(&key) {
                Some(existing) if replica_rank(existing) <= replica_rank(s) => {}
                _ => {
                    groups.insert(key, s);
                }
            }
        }
        groups.into_values().collect()
    }
}

/// Sort key for a replica: `tp_rank` parsed as an integer (no label = rank 0, unparsable = last).
fn replica_rank(s: &Sample) -> u64 {
    match s.label(REPLICA_LABEL) {
        None => 0,
        Some(v) => v.trim().parse().unwrap_or(u64::MAX),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unescape() {
        assert_eq!(unescape_label_value(r#"a\"b\\c\nd"#), "a\"b\\c\nd");
        assert_eq!(unescape_label_value(r"a\x"), r"a\x");
        assert_eq!(unescape_label_value("a\\"), "a\\");
    }
}
