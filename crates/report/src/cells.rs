//! Shared views of a results file used by every exporter: the decode layers, percentile look-up
//! (stored fields or the request samples), matrix axes and plain-word labels.

use servebench_results::{
    AggregateSource, CellResult, CellStatus, DecodeMode, PrefillMethod, PrefillRow, Results,
};

/// A per-request latency metric with stored percentiles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Metric {
    /// TTFT, s.
    Ttft,
    /// Per-token ITL (each request's mean), s.
    Itl,
    /// Request latency (completed requests), s.
    Latency,
    /// Output tok/s per user (1 / ITL), tok/s.
    TpsPerUser,
    /// TTST (time to second token), s.
    Ttst,
}

impl Metric {
    /// Stored (p50, p90, p99) fields of `c`.
    fn stored(self, c: &CellResult) -> [Option<f64>; 3] {
        match self {
            Metric::Ttft => [c.ttft_p50, c.ttft_p90, c.ttft_p99],
            Metric::Itl => [
                c.inter_token_latency_p50,
                c.inter_token_latency_p90,
                c.inter_token_latency_p99,
            ],
            Metric::Latency => [
                c.request_latency_p50,
                c.request_latency_p90,
                c.request_latency_p99,
            ],
            Metric::TpsPerUser => [
                c.output_tps_per_user_p50,
                c.output_tps_per_user_p90,
                c.output_tps_per_user_p99,
            ],
            Metric::Ttst => [
                c.time_to_second_token_p50,
                c.time_to_second_token_p90,
                c.time_to_second_token_p99,
            ],
        }
    }

    /// This metric's value in each request sample that counts in the cell's statistics (the
    /// same sets as the core's aggregation: requests with output for TTFT / ITL / per-user tok/s,
    /// completed ones for latency).
    pub fn sample_values(self, c: &CellResult) -> Vec<f64> {
        c.request_samples
            .iter()
            .filter(|s| s.output_tokens > 0)
            .filter_map(|s| match self {
                Metric::Ttft => s.ttft,
                Metric::Itl => s.inter_token_latency_avg,
                Metric::Latency => s.latency.filter(|_| s.completed),
                Metric::TpsPerUser => s.output_tps_per_user,
                Metric::Ttst => s.time_to_second_token,
            })
            .filter(|v| v.is_finite())
            .collect()
    }
}

/// Percentile `p` (0–100) of `metric` in cell `c`: the stored field for 50, 90 and 99, else
/// computed from the request samples with the same NumPy-linear definition as the stored ones;
/// `None` when neither exists.
pub fn percentile(c: &CellResult, metric: Metric, p: f64) -> Option<f64> {
    let stored = metric.stored(c);
    let idx = [50.0, 90.0, 99.0].iter().position(|&q| q == p);
    if let Some(i) = idx {
        if stored[i].is_some() {
            return stored[i];
        }
    }
    servebench_stats::percentile(&metric.sample_values(c), p)
}

/// Parses `--percentiles 50,90,99`: numbers in 0–100, at least one, duplicates removed.
///
/// # Errors
/// A one-line message naming the bad value.
pub fn parse_percentiles(s: &str) -> Result<Vec<f64>, String> {
    let mut out: Vec<f64> = Vec::new();
    for item in s.split(',') {
        let t = item.trim().trim_start_matches(['p', 'P']);
        let v: f64 = t.parse().map_err(|_| {
            format!(
                "invalid percentile {:?} (expected numbers from 0 to 100, e.g. 50,90,99)",
                item.trim()
            )
        })?;
        if !(0.0..=100.0).contains(&v) {
            return Err(format!("percentile {v} is outside 0–100"));
        }
        if !out.contains(&v) {
            out.push(v);
        }
    }
    if out.is_empty() {
        return Err("give at least one percentile, e.g. 50,90,99".into());
    }
    Ok(out)
}

/// `p50`, `p99.9`.
pub fn pct_label(p: f64) -> String {
    format!("p{}", fmt_num(p))
}

/// A number without a trailing `.0`.
pub fn fmt_num(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

/// One decode layer of a results file.
pub struct Layer<'a> {
    /// Stable id used in CSV and `compare`: `sustained`, `request_count` or `burst`.
    pub id: &'static str,
    /// Title for people.
    pub title: &'static str,
    /// Its cells, in run order.
    pub cells: &'a [CellResult],
}

/// The decode layers present in `r`: the primary matrix (`sustained`, or `request_count` in
/// request-count mode) and the Burst / E2E matrix when it ran. In request-count mode the old
/// tool copied the primary cells into `burst_results`; they are not listed twice.
pub fn layers(r: &Results) -> Vec<Layer<'_>> {
    let mut v = Vec::new();
    let request_count = r.metadata.decode_mode == DecodeMode::RequestCount;
    if !r.results.is_empty() {
        v.push(if request_count {
            Layer {
                id: "request_count",
                title: "Request-count decode (Σ completion tokens / wall time)",
                cells: &r.results,
            }
        } else {
            Layer {
                id: "sustained",
                title: "Sustained decode",
                cells: &r.results,
            }
        });
    }
    if !request_count && !r.burst_results.is_empty() {
        v.push(Layer {
            id: "burst",
            title: "Burst / E2E decode (finite batches)",
            cells: &r.burst_results,
        });
    }
    v
}

/// Sorted distinct concurrencies and contexts of `cells`.
pub fn axes(cells: &[CellResult]) -> (Vec<u64>, Vec<u64>) {
    let mut cs: Vec<u64> = cells.iter().map(|c| c.concurrency).collect();
    cs.sort_unstable();
    cs.dedup();
    let mut xs: Vec<u64> = cells.iter().map(|c| c.context_tokens).collect();
    xs.sort_unstable();
    xs.dedup();
    (cs, xs)
}

/// The cell at (`ctx`, `c`).
pub fn find(cells: &[CellResult], ctx: u64, c: u64) -> Option<&CellResult> {
    cells
        .iter()
        .find(|r| r.context_tokens == ctx && r.concurrency == c)
}

/// Whether a cell's numbers are shown (status `ok`, and not capacity-limited unless `show`).
pub fn shown(c: &CellResult, show_capacity_limited: bool) -> bool {
    c.status == CellStatus::Ok && (show_capacity_limited || !c.capacity_limited)
}

/// Plain words for a prefill row's `method` value (the JSON keeps the value itself).
pub fn prefill_method_words(method: PrefillMethod) -> String {
    match method {
        PrefillMethod::IntegratedScout => "cold request before the first decode cell",
        PrefillMethod::ScoutOnly => "cold request, no decode cell at this context",
        PrefillMethod::Client => "standalone cold requests (median)",
        PrefillMethod::Prometheus => "server prefill counters",
        PrefillMethod::WarmPrefix => "same prompt sent again (prefix cache)",
        PrefillMethod::Skipped => "not run",
        PrefillMethod::Unspecified => "-",
    }
    .into()
}

/// Plain words for `metadata.prompt_targeting`.
pub fn prompt_targeting_words(v: &str) -> String {
    match v {
        "tokenize_exact" => "sized exactly (server /tokenize)".into(),
        "calibrated_estimate" => "sized by a calibrated chars-per-token estimate".into(),
        "cached_estimate" => "sized by a cached chars-per-token estimate".into(),
        "none" => "no prompt (context 0 only)".into(),
        other => other.to_string(),
    }
}

/// Plain words for an `aggregate_source` value.
pub fn aggregate_source_words(source: AggregateSource) -> String {
    match source {
        AggregateSource::OpenaiContinuousUsage => {
            "exact: the token count streamed in every chunk's usage"
        }
        AggregateSource::OpenaiStreamChunksFallback => {
            "estimate: one token per streamed chunk, the server sent no per-chunk usage"
        }
        AggregateSource::OpenaiCompletedUsage => "final usage of completed requests",
        AggregateSource::PrometheusFallback => "the server's own token counter (Prometheus)",
        AggregateSource::None | AggregateSource::Unset => "none",
    }
    .into()
}

/// The distinct `aggregate_source` values of the `ok` cells of `cells`, sorted by name.
pub fn ok_sources(cells: &[CellResult]) -> Vec<AggregateSource> {
    let mut v: Vec<AggregateSource> = cells
        .iter()
        .filter(|c| c.status == CellStatus::Ok)
        .map(|c| c.aggregate_source)
        .collect();
    v.sort_unstable_by_key(|s| s.as_str());
    v.dedup();
    v
}

/// Rows keyed by context tokens (`"8192"`) with their labels (`8k`), in ascending numeric
/// order (keys that are not numbers last, shown as they are); the JSON keeps the run's order.
pub fn by_context<V>(m: &indexmap::IndexMap<String, V>) -> Vec<(String, Option<u64>, &V)> {
    let mut v: Vec<(Option<u64>, &String, &V)> =
        m.iter().map(|(k, row)| (k.parse().ok(), k, row)).collect();
    v.sort_by_key(|(n, _, _)| n.unwrap_or(u64::MAX));
    v.into_iter()
        .map(|(n, k, row)| {
            (
                n.map_or_else(|| k.clone(), servebench_results::format_context),
                n,
                row,
            )
        })
        .collect()
}

/// Whether a prefill row holds a measurement.
pub fn prefill_ok(row: &PrefillRow) -> bool {
    matches!(row.status, None | Some(CellStatus::Ok)) && row.tok_per_sec.is_some()
}

/// The prompt tokens a prefill table shows: the row's count when the row is ok (or has no
/// status, old files), none for a row that is not (an `invalid` row's count is the server's
/// claim that made it invalid, 1e12 say; its status text quotes it).
pub fn prefill_tokens_shown(row: &PrefillRow) -> Option<u64> {
    match row.status {
        None | Some(CellStatus::Ok) => row.prompt_tokens,
        Some(_) => None,
    }
}

/// The status text of a prefill row: `ok`, `invalid`, or `invalid: <reason>` on one line
/// (control and bidi characters blanked).
pub fn prefill_status_text(row: &PrefillRow) -> String {
    let s = match (&row.status, &row.status_reason) {
        (Some(s), Some(why)) if !why.is_empty() => format!("{}: {why}", s.as_str()),
        (Some(s), _) => s.as_str().to_string(),
        (None, _) => "ok".into(),
    };
    crate::export::one_line(&s).into_owned()
}

/// The engine as one label: `vllm 0.32.1`.
pub fn engine_label(r: &Results) -> String {
    let m = &r.metadata;
    match &m.engine_version {
        Some(v) if v.starts_with(&m.engine) => v.clone(),
        Some(v) => format!("{} {v}", m.engine),
        None => m.engine.clone(),
    }
}

/// The tool that wrote the file: `servebench 0.1.0`, `llm_decode_bench 0.4.29`.
pub fn tool_label(r: &Results) -> String {
    let m = &r.metadata;
    let tool = if m.tool.is_empty() {
        "llm_decode_bench"
    } else {
        m.tool.as_str()
    };
    format!("{tool} {}", m.version).trim().to_string()
}

/// Every steady-state block of a file with its row label, in report order: decode and Burst /
/// E2E cells (`C=8 ctx=1k`, `[burst] C=8 ctx=1k`), then rate rows (`[rate] 4 req/s ctx=1k`).
pub fn steady_blocks(r: &Results) -> Vec<(String, &servebench_results::SteadyState)> {
    let mut out = Vec::new();
    for c in r.results.iter().chain(r.burst_results.iter()) {
        if let Some(s) = &c.steady_state {
            let layer = if c.benchmark_mode == servebench_results::BenchmarkMode::BurstE2e {
                "[burst] "
            } else {
                ""
            };
            let label = format!(
                "{layer}C={} ctx={}",
                c.concurrency,
                servebench_results::format_context(c.context_tokens)
            );
            out.push((label, s));
        }
    }
    for row in &r.rate_results {
        if let Some(s) = &row.steady_state {
            let label = format!(
                "[rate] {} req/s ctx={}",
                row.offered_rate,
                servebench_results::format_context(row.context_tokens)
            );
            out.push((label, s));
        }
    }
    out
}
