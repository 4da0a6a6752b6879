//! CSV export: one row per cell (decode cells of every layer, then prefill rows), with stable
//! columns in a fixed order. The columns are [`columns`], documented in `docs/exports.md`; new
//! columns are only ever appended. Empty field = not measured (`null` in the JSON). Numbers are
//! written with 12 significant digits; times are in seconds (`_s`), rates in tok/s (`_tps`).

use servebench_results::{format_context, CellResult, PrefillRow, RateRow, RateSummary, Results};

use crate::cells::{by_context, layers};
use crate::export::Exporter;
use crate::ReportOptions;

/// A CSV row: a decode cell, a prefill row or an open-loop rate row.
enum Row<'a> {
    Cell(&'static str, &'a CellResult),
    Prefill(&'static str, u64, &'a PrefillRow),
    Rate(&'a RateRow),
}

type Getter = fn(&Row<'_>) -> String;

/// A CSV field value.
trait Field {
    fn field(&self) -> String;
}

impl Field for u64 {
    fn field(&self) -> String {
        self.to_string()
    }
}

impl Field for f64 {
    /// 12 significant digits, shortest form (`121.442122731`, `0.185205365007`, `5`): more
    /// than any measurement here resolves, and the same text whichever float parser read the
    /// results file (serde_json's fast parser can differ in the last binary digit).
    fn field(&self) -> String {
        if !self.is_finite() {
            return String::new();
        }
        let rounded: f64 = format!("{self:.11e}").parse().unwrap_or(*self);
        format!("{rounded}")
    }
}

fn opt<T: Field>(v: Option<T>) -> String {
    v.map(|x| x.field()).unwrap_or_default()
}

fn cell<'a>(r: &'a Row<'_>) -> Option<&'a CellResult> {
    match r {
        Row::Cell(_, c) => Some(c),
        _ => None,
    }
}

fn pre<'a>(r: &'a Row<'_>) -> Option<&'a PrefillRow> {
    match r {
        Row::Prefill(_, _, p) => Some(p),
        _ => None,
    }
}

macro_rules! cellf {
    ($f:ident) => {
        |r: &Row<'_>| cell(r).map(|c| opt(c.$f)).unwrap_or_default()
    };
}

/// The CSV columns, in order: (name, meaning, value). Stable: columns are only appended.
const COLUMNS: &[(&str, &str, Getter)] = &[
    (
        "layer",
        "sustained, request_count, burst, prefill or prefill_warm (rate for open-loop rows)",
        |r| match r {
            Row::Cell(l, _) | Row::Prefill(l, _, _) => l.to_string(),
            Row::Rate(_) => "rate".into(),
        },
    ),
    (
        "context_tokens",
        "context of the cell, prompt tokens",
        |r| match r {
            Row::Cell(_, c) => c.context_tokens.to_string(),
            Row::Prefill(_, x, _) => x.to_string(),
            Row::Rate(x) => x.context_tokens.to_string(),
        },
    ),
    (
        "context",
        "the same as a label (16k = 16384)",
        |r| match r {
            Row::Cell(_, c) => format_context(c.context_tokens),
            Row::Prefill(_, x, _) => format_context(*x),
            Row::Rate(x) => format_context(x.context_tokens),
        },
    ),
    (
        "concurrency",
        "C, streams in flight (1 for prefill rows)",
        |r| match r {
            Row::Cell(_, c) => c.concurrency.to_string(),
            Row::Prefill(..) => "1".into(),
            Row::Rate(x) => x.max_concurrency.map(|c| c.to_string()).unwrap_or_default(),
        },
    ),
    (
        "status",
        "ok, skipped_capacity, skipped_context, skipped_user, error, invalid",
        |r| match r {
            Row::Cell(_, c) => c.status.as_str().to_string(),
            Row::Prefill(_, _, p) => p.status.map(|s| s.as_str()).unwrap_or("ok").to_string(),
            Row::Rate(x) => x.status.map(|s| s.as_str()).unwrap_or("ok").to_string(),
        },
    ),
    (
        "status_reason",
        "why the cell is not ok (empty when ok)",
        |r| match r {
            Row::Cell(_, c) => c.status_reason.clone(),
            Row::Prefill(_, _, p) => p.status_reason.clone().unwrap_or_default(),
            Row::Rate(x) => x.status_reason.clone().unwrap_or_default(),
        },
    ),
    (
        "aggregate_tps",
        "decode: output tokens in the window / window length, tok/s",
        cellf!(aggregate_tps),
    ),
    (
        "per_request_avg_tps",
        "aggregate_tps / C, tok/s",
        cellf!(per_request_avg_tps),
    ),
    ("aggregate_source", "where the token count came from", |r| {
        cell(r)
            .map(|c| c.aggregate_source.to_string())
            .unwrap_or_default()
    }),
    (
        "measurement_seconds",
        "window length, s",
        cellf!(measurement_seconds),
    ),
    (
        "client_output_tokens",
        "tokens credited to the window by the client",
        cellf!(client_output_tokens),
    ),
    (
        "server_output_tokens",
        "tokens the server counted over the window",
        cellf!(server_output_tokens),
    ),
    ("request_count", "requests in the statistics", |r| {
        cell(r)
            .map(|c| c.request_count.to_string())
            .unwrap_or_default()
    }),
    ("completed_request_count", "of those, completed", |r| {
        cell(r)
            .map(|c| c.completed_request_count.to_string())
            .unwrap_or_default()
    }),
    ("num_errors", "requests that failed", |r| {
        cell(r)
            .map(|c| c.num_errors.to_string())
            .unwrap_or_default()
    }),
    ("ttft_avg_s", "TTFT mean, s", cellf!(ttft_avg)),
    ("ttft_p50_s", "TTFT p50, s", cellf!(ttft_p50)),
    ("ttft_p90_s", "TTFT p90, s", cellf!(ttft_p90)),
    ("ttft_p99_s", "TTFT p99, s", cellf!(ttft_p99)),
    (
        "itl_avg_s",
        "per-token ITL mean, s",
        cellf!(inter_token_latency_avg),
    ),
    (
        "itl_p50_s",
        "per-token ITL p50, s",
        cellf!(inter_token_latency_p50),
    ),
    (
        "itl_p90_s",
        "per-token ITL p90, s",
        cellf!(inter_token_latency_p90),
    ),
    (
        "itl_p99_s",
        "per-token ITL p99, s",
        cellf!(inter_token_latency_p99),
    ),
    (
        "chunk_itl_p50_s",
        "chunk ITL p50 (time between token events), s",
        cellf!(chunk_inter_token_latency_p50),
    ),
    (
        "ttst_p50_s",
        "time to second token p50, s",
        cellf!(time_to_second_token_p50),
    ),
    (
        "request_latency_p50_s",
        "request latency p50 (completed requests), s",
        cellf!(request_latency_p50),
    ),
    (
        "request_latency_p99_s",
        "request latency p99, s",
        cellf!(request_latency_p99),
    ),
    (
        "output_tps_per_user_p50",
        "per-user decode speed (1 / ITL) p50, tok/s",
        cellf!(output_tps_per_user_p50),
    ),
    (
        "e2e_output_tps_per_user_p50",
        "output tokens / request latency p50, tok/s",
        cellf!(e2e_output_tps_per_user_p50),
    ),
    (
        "output_seq_len_avg",
        "output tokens per request, mean",
        cellf!(output_seq_len_avg),
    ),
    (
        "prompt_tokens",
        "measured prompt tokens of the context's prompt",
        |r| match r {
            Row::Cell(_, c) => opt(c.prompt_tokens),
            Row::Prefill(_, _, p) => opt(p.prompt_tokens),
            Row::Rate(_) => String::new(),
        },
    ),
    (
        "capacity_limited",
        "true when the server could not run all C requests",
        |r| {
            cell(r)
                .map(|c| c.capacity_limited.to_string())
                .unwrap_or_default()
        },
    ),
    (
        "effective_concurrency",
        "mean requests running on the server",
        cellf!(effective_concurrency),
    ),
    (
        "avg_queue_reqs",
        "mean requests queued on the server",
        cellf!(avg_queue_reqs),
    ),
    (
        "server_gen_throughput",
        "server's generated tok/s over the window",
        cellf!(server_gen_throughput),
    ),
    (
        "server_kv_usage_max",
        "largest KV-cache use, 0-1",
        cellf!(server_kv_usage_max),
    ),
    (
        "server_spec_accept_rate",
        "speculative acceptance rate, 0-1",
        cellf!(server_spec_accept_rate),
    ),
    (
        "server_spec_accept_length",
        "speculative acceptance length, tokens per step",
        cellf!(server_spec_accept_length),
    ),
    (
        "client_cpu_util",
        "client CPU time / window (1 = one core)",
        cellf!(client_cpu_util),
    ),
    (
        "client_max_tick_lag_ms",
        "worst lateness of the client's 10 ms monitor tick, ms",
        cellf!(client_max_tick_lag_ms),
    ),
    (
        "prefill_tps",
        "prefill rows: headline prefill speed, tok/s",
        |r| pre(r).map(|p| opt(p.tok_per_sec)).unwrap_or_default(),
    ),
    ("prefill_ttft_s", "prefill rows: TTFT, s", |r| {
        pre(r).map(|p| opt(p.ttft_seconds)).unwrap_or_default()
    }),
    (
        "prefill_method",
        "prefill rows: how the row was measured",
        |r| pre(r).map(|p| p.method.to_string()).unwrap_or_default(),
    ),
    (
        "cached_tokens",
        "prefill_warm rows: prompt tokens served from the prefix cache",
        |r| pre(r).map(|p| opt(p.cached_tokens)).unwrap_or_default(),
    ),
    (
        "warnings",
        "the cell's warnings, joined with \" | \"",
        |r| cell(r).map(|c| c.warnings.join(" | ")).unwrap_or_default(),
    ),
];

fn rate<'a>(r: &'a Row<'_>) -> Option<&'a RateRow> {
    match r {
        Row::Rate(x) => Some(x),
        _ => None,
    }
}

macro_rules! ratef {
    ($f:ident) => {
        |r: &Row<'_>| rate(r).map(|x| opt(x.$f)).unwrap_or_default()
    };
    ($f:ident, $p:ident) => {
        |r: &Row<'_>| {
            rate(r)
                .and_then(|x| x.$f.as_ref().map(|s: &RateSummary| s.$p.field()))
                .unwrap_or_default()
        }
    };
}

/// Columns appended after [`COLUMNS`] only when the file has open-loop rows (`rate_results`);
/// empty for cells and prefill rows. Times in s, rates in req/s.
const RATE_COLUMNS: &[(&str, &str, Getter)] = &[
    ("offered_rate", "rate rows: offered rate, req/s", |r| {
        rate(r).map(|x| x.offered_rate.field()).unwrap_or_default()
    }),
    ("arrival", "rate rows: constant, poisson or gamma", |r| {
        rate(r)
            .map(|x| x.arrival.as_str().to_string())
            .unwrap_or_default()
    }),
    ("burstiness", "rate rows: gamma shape K", ratef!(burstiness)),
    ("duration_s", "rate rows: schedule length, s", |r| {
        rate(r).map(|x| x.duration.field()).unwrap_or_default()
    }),
    (
        "requests_scheduled",
        "rate rows: arrivals in the schedule",
        |r| {
            rate(r)
                .map(|x| x.requests_scheduled.field())
                .unwrap_or_default()
        },
    ),
    ("requests_sent", "rate rows: requests sent", |r| {
        rate(r).map(|x| x.requests_sent.field()).unwrap_or_default()
    }),
    ("requests_completed", "rate rows: requests completed", |r| {
        rate(r)
            .map(|x| x.requests_completed.field())
            .unwrap_or_default()
    }),
    ("requests_failed", "rate rows: requests failed", |r| {
        rate(r)
            .map(|x| x.requests_failed.field())
            .unwrap_or_default()
    }),
    (
        "requests_cut",
        "rate rows: requests cut at the deadline",
        |r| rate(r).map(|x| x.requests_cut.field()).unwrap_or_default(),
    ),
    ("requests_not_sent", "rate rows: arrivals never sent", |r| {
        rate(r)
            .map(|x| x.requests_not_sent.field())
            .unwrap_or_default()
    }),
    (
        "schedule_rate",
        "rate rows: realised rate of the schedule, req/s",
        ratef!(schedule_rate),
    ),
    (
        "achieved_rate",
        "rate rows: rate requests left the client, req/s",
        ratef!(achieved_rate),
    ),
    (
        "shortfall",
        "rate rows: 1 - achieved / schedule rate",
        ratef!(shortfall),
    ),
    (
        "completed_rate",
        "rate rows: completed requests / span, req/s",
        ratef!(completed_rate),
    ),
    (
        "schedule_lag_p50_s",
        "rate rows: sent - intended p50, s",
        ratef!(schedule_lag_p50),
    ),
    (
        "schedule_lag_p99_s",
        "rate rows: sent - intended p99, s",
        ratef!(schedule_lag_p99),
    ),
    (
        "rate_ttft_p50_s",
        "rate rows: TTFT from the send p50, s",
        ratef!(ttft, p50),
    ),
    (
        "rate_ttft_p99_s",
        "rate rows: TTFT from the send p99, s",
        ratef!(ttft, p99),
    ),
    (
        "ttft_intended_p50_s",
        "rate rows: TTFT from the intended send p50, s",
        ratef!(ttft_from_intended, p50),
    ),
    (
        "ttft_intended_p99_s",
        "rate rows: TTFT from the intended send p99, s",
        ratef!(ttft_from_intended, p99),
    ),
    (
        "rate_itl_p50_s",
        "rate rows: per-request ITL p50, s",
        ratef!(itl, p50),
    ),
    (
        "rate_itl_p99_s",
        "rate rows: per-request ITL p99, s",
        ratef!(itl, p99),
    ),
    ("tpot_p50_s", "rate rows: TPOT p50, s", ratef!(tpot, p50)),
    ("tpot_p99_s", "rate rows: TPOT p99, s", ratef!(tpot, p99)),
    (
        "e2e_p50_s",
        "rate rows: E2E from the send p50, s",
        ratef!(e2e, p50),
    ),
    (
        "e2e_p99_s",
        "rate rows: E2E from the send p99, s",
        ratef!(e2e, p99),
    ),
    (
        "e2e_intended_p50_s",
        "rate rows: E2E from the intended send p50, s",
        ratef!(e2e_from_intended, p50),
    ),
    (
        "e2e_intended_p99_s",
        "rate rows: E2E from the intended send p99, s",
        ratef!(e2e_from_intended, p99),
    ),
    (
        "output_tps",
        "rate rows: output tokens / span, tok/s",
        ratef!(output_tps),
    ),
    (
        "goodput",
        "rate rows: requests meeting every SLO / span, req/s",
        ratef!(goodput),
    ),
    (
        "slo_attainment",
        "rate rows: share of arrivals meeting every SLO, 0-1",
        ratef!(slo_attainment),
    ),
    (
        "slo_met",
        "rate rows: every SLO percentile within its threshold",
        |r| {
            rate(r)
                .and_then(|x| x.slo_met)
                .map(|b| b.to_string())
                .unwrap_or_default()
        },
    ),
    (
        "search_step",
        "rate rows: rate-search probe number",
        ratef!(search_step),
    ),
];

/// The per-gap ITL summary of a cell or rate row.
fn gaps<'a>(r: &'a Row<'_>) -> Option<&'a servebench_results::ItlGaps> {
    match r {
        Row::Cell(_, c) => c.itl_gaps.as_ref(),
        Row::Rate(x) => x.itl_gaps.as_ref(),
        _ => None,
    }
}

macro_rules! gapf {
    ($f:ident) => {
        |r: &Row<'_>| gaps(r).map(|g| g.$f.field()).unwrap_or_default()
    };
}

/// Columns appended last (after [`RATE_COLUMNS`] when those are there) only when a cell or
/// rate row has a per-gap ITL distribution (files written before it keep their columns).
const GAP_COLUMNS: &[(&str, &str, Getter)] = &[
    (
        "itl_gap_p50_s",
        "per-gap ITL p50 (every per-token gap, chunk-aware), s",
        gapf!(p50),
    ),
    ("itl_gap_p90_s", "per-gap ITL p90, s", gapf!(p90)),
    ("itl_gap_p99_s", "per-gap ITL p99, s", gapf!(p99)),
    ("itl_gap_p99_9_s", "per-gap ITL p99.9, s", gapf!(p99_9)),
    ("itl_gap_max_s", "longest per-token gap, s", gapf!(max)),
    ("itl_gap_count", "per-token gaps counted", gapf!(gaps)),
    (
        "peak_output_tps_1s",
        "peak output tok/s over 1 s buckets of token arrivals",
        |r| match r {
            Row::Cell(_, c) => opt(c.peak_output_tps_1s),
            Row::Rate(x) => opt(x.peak_output_tps_1s),
            _ => String::new(),
        },
    ),
];

/// The steady-state block of a cell or rate row (issue 19: request-count, Burst / E2E and rate
/// rows).
fn steady<'a>(r: &'a Row<'_>) -> Option<&'a servebench_results::SteadyState> {
    match r {
        Row::Cell(_, c) => c.steady_state.as_ref(),
        Row::Rate(x) => x.steady_state.as_ref(),
        _ => None,
    }
}

macro_rules! steadyf {
    ($f:ident) => {
        |r: &Row<'_>| steady(r).map(|s| s.$f.field()).unwrap_or_default()
    };
}

macro_rules! steady_opt {
    ($f:ident) => {
        |r: &Row<'_>| steady(r).map(|s| opt(s.$f)).unwrap_or_default()
    };
}

/// Columns appended last (after the per-gap columns when those are there) only when a cell or
/// rate row has a steady-state block (files without one keep their columns).
const STEADY_COLUMNS: &[(&str, &str, Getter)] = &[
    (
        "steady_duration_s",
        "steady state: length of the longest span with at least 95 % of the target in flight, s",
        steadyf!(duration_s),
    ),
    (
        "steady_fraction",
        "steady state: that span / the measured load, 0-1",
        steadyf!(fraction),
    ),
    (
        "steady_mean_in_flight",
        "steady state: mean requests in flight over the span",
        steadyf!(mean_in_flight),
    ),
    (
        "steady_requests",
        "steady state: requests sent inside the span",
        steadyf!(requests),
    ),
    (
        "steady_output_tokens",
        "steady state: output tokens that arrived inside the span",
        steadyf!(output_tokens),
    ),
    (
        "steady_output_tps",
        "steady state: output tokens / span length, tok/s",
        steady_opt!(output_tps),
    ),
    (
        "steady_ttft_p50_s",
        "steady state: TTFT p50 of the requests sent inside the span, s",
        steady_opt!(ttft_p50),
    ),
    (
        "steady_ttft_p99_s",
        "steady state: TTFT p99 of those requests, s",
        steady_opt!(ttft_p99),
    ),
    (
        "steady_itl_p50_s",
        "steady state: per-token ITL p50 of those requests, s",
        steady_opt!(itl_p50),
    ),
    (
        "steady_itl_p99_s",
        "steady state: per-token ITL p99 of those requests, s",
        steady_opt!(itl_p99),
    ),
    (
        "steady_short",
        "steady state: true when the span is under 1 s or under a quarter of the load",
        |r| steady(r).map(|s| s.short.to_string()).unwrap_or_default(),
    ),
];

/// The columns appended for files with a steady-state block, as (name, meaning).
pub fn steady_columns() -> Vec<(&'static str, &'static str)> {
    STEADY_COLUMNS.iter().map(|(n, m, _)| (*n, *m)).collect()
}

/// The columns appended for files with per-gap ITL, as (name, meaning).
pub fn gap_columns() -> Vec<(&'static str, &'static str)> {
    GAP_COLUMNS.iter().map(|(n, m, _)| (*n, *m)).collect()
}

/// The columns appended for files with open-loop rows, as (name, meaning).
pub fn rate_columns() -> Vec<(&'static str, &'static str)> {
    RATE_COLUMNS.iter().map(|(n, m, _)| (*n, *m)).collect()
}

/// The CSV columns in order, as (name, meaning); `docs/exports.md` lists the same.
pub fn columns() -> Vec<(&'static str, &'static str)> {
    COLUMNS.iter().map(|(n, m, _)| (*n, *m)).collect()
}

/// The CSV text of `r` (header line, then one line per cell).
///
/// # Errors
/// Only from the CSV writer (never for in-memory output in practice).
pub fn render_csv(r: &Results) -> anyhow::Result<String> {
    let mut rows: Vec<Row<'_>> = Vec::new();
    for l in layers(r) {
        for c in l.cells {
            rows.push(Row::Cell(l.id, c));
        }
    }
    for (layer, map) in [("prefill", &r.prefill), ("prefill_warm", &r.prefill_warm)] {
        for (_, n, row) in by_context(map) {
            rows.push(Row::Prefill(layer, n.unwrap_or(0), row));
        }
    }
    for x in &r.rate_results {
        rows.push(Row::Rate(x));
    }
    let mut cols: Vec<&(&str, &str, Getter)> = if r.rate_results.is_empty() {
        COLUMNS.iter().collect()
    } else {
        COLUMNS.iter().chain(RATE_COLUMNS).collect()
    };
    if rows.iter().any(|row| gaps(row).is_some()) {
        cols.extend(GAP_COLUMNS);
    }
    if rows.iter().any(|row| steady(row).is_some()) {
        cols.extend(STEADY_COLUMNS);
    }
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record(cols.iter().map(|(n, _, _)| *n))?;
    for row in &rows {
        w.write_record(cols.iter().map(|(_, _, f)| defuse(f(row))))?;
    }
    Ok(String::from_utf8(w.into_inner()?)?)
}

/// A field that a spreadsheet would run as a formula (text from a server or a results file
/// that starts with `=`, `+`, `@`, a tab or a carriage return, or `-` without being a number)
/// gets a leading `'` (OWASP's CSV-injection advice); numbers and every other field are kept.
fn defuse(field: String) -> String {
    let risky = match field.chars().next() {
        Some('=' | '+' | '@' | '\t' | '\r') => true,
        Some('-') => field.parse::<f64>().is_err(),
        _ => false,
    };
    if risky {
        format!("'{field}")
    } else {
        field
    }
}

/// CSV exporter.
pub struct CsvExporter;

impl Exporter for CsvExporter {
    fn serialize(&self, results: &Results, _opts: &ReportOptions) -> anyhow::Result<Vec<u8>> {
        Ok(render_csv(results)?.into_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use servebench_results::CellStatus;

    /// Break-it round 6: a server's error text `=HYPERLINK(…)` reached the CSV as a formula.
    #[test]
    fn text_that_a_spreadsheet_would_run_is_defused() {
        assert_eq!(defuse("=1+1".into()), "'=1+1");
        assert_eq!(defuse("+SUM(A1)".into()), "'+SUM(A1)");
        assert_eq!(defuse("@cmd".into()), "'@cmd");
        assert_eq!(defuse("\tx".into()), "'\tx");
        assert_eq!(defuse("-2+3".into()), "'-2+3");
        for kept in ["-1.5", "-3e-7", "12", "", "error: 500", "ok"] {
            assert_eq!(defuse(kept.into()), kept);
        }
        let r = Results {
            results: vec![CellResult {
                context_tokens: 1024,
                concurrency: 1,
                status: CellStatus::Error,
                status_reason: r#"=HYPERLINK("http://x","y")"#.into(),
                ..CellResult::default()
            }],
            ..Results::default()
        };
        let csv = render_csv(&r).unwrap();
        assert!(
            csv.contains(r#""'=HYPERLINK(""http://x"",""y"")""#),
            "{csv}"
        );
        assert!(!csv.contains(",=HYPERLINK"), "{csv}");
    }

    #[test]
    fn steady_state_columns_come_last_when_a_cell_has_the_block() {
        let steady = servebench_results::SteadyState {
            target_in_flight: 8,
            min_in_flight: 8,
            duration_s: 4.5,
            fraction: 0.75,
            mean_in_flight: 7.9,
            requests: 40,
            output_tokens: 2560,
            output_tps: Some(568.9),
            ttft_p50: Some(0.12),
            short: false,
            ..Default::default()
        };
        let r = Results {
            results: vec![CellResult {
                context_tokens: 0,
                concurrency: 8,
                steady_state: Some(steady),
                ..CellResult::default()
            }],
            ..Results::default()
        };
        let text = render_csv(&r).unwrap();
        let mut rdr = csv::Reader::from_reader(text.as_bytes());
        let header: Vec<String> = rdr.headers().unwrap().iter().map(String::from).collect();
        let mut want: Vec<&str> = columns().iter().map(|c| c.0).collect();
        want.extend(steady_columns().iter().map(|c| c.0));
        assert_eq!(header, want);
        let row = rdr.records().next().unwrap().unwrap();
        let col = |n: &str| header.iter().position(|h| h == n).unwrap();
        assert_eq!(&row[col("steady_duration_s")], "4.5");
        assert_eq!(&row[col("steady_output_tps")], "568.9");
        assert_eq!(&row[col("steady_ttft_p99_s")], "");
        assert_eq!(&row[col("steady_short")], "false");
        let plain = render_csv(&Results::default()).unwrap();
        assert!(!plain.contains("steady_"), "no block, no columns");
        let doc = include_str!("../../../docs/exports.md");
        for (name, _) in steady_columns() {
            assert!(
                doc.contains(&format!("| `{name}` |")),
                "docs/exports.md does not document {name}"
            );
        }
    }
}
