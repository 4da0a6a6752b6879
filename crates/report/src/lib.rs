//! Sinks for a finished run: the final plain-text report and the JSON writer.
//!
//! Everything here is a pure function of [`servebench_results::Results`]: presentation never
//! measures. The text report is the screenshot block users post: a matrix of aggregate decode
//! tok/s (rows = context, columns = concurrency C) with compact TTFT / ITL p50, capacity-limited
//! and skipped cells marked, the prefill rows, and every non-ok cell's reason.
//!
//! Other formats ([`export`]): CSV ([`csv_export`]), Markdown ([`markdown`]), a self-contained
//! HTML report with inline SVG plots ([`html`]), and the comparison of several runs
//! ([`compare`]).

pub mod cells;
pub mod compare;
pub mod compare_metrics;
pub mod compare_rate;
pub mod csv_export;
pub mod export;
pub mod hardware;
pub mod html;
pub mod markdown;
mod plot;
pub mod rate;

use std::fmt::Write as _;
use std::path::Path;

use cells::{by_context, pct_label, percentile, Metric};
use servebench_results::{
    format_context, BenchmarkMode, CellResult, CellStatus, DecodeMode, PrefillRow, Results,
};

/// Options of the text report.
#[derive(Clone, Debug, Default)]
pub struct ReportOptions {
    /// Print raw tok/s in capacity-limited cells (otherwise `∅`), like the seed's
    /// `--show-capacity-limited-values`.
    pub show_capacity_limited_values: bool,
    /// Path of the JSON results, printed at the end.
    pub json_path: Option<String>,
    /// Percentiles (0–100) of TTFT and ITL shown under each matrix value (`--percentiles`);
    /// empty = p50 only.
    pub percentiles: Vec<f64>,
}

impl ReportOptions {
    /// The percentiles to show (p50 when none were chosen).
    pub fn percentiles(&self) -> Vec<f64> {
        if self.percentiles.is_empty() {
            vec![50.0]
        } else {
            self.percentiles.clone()
        }
    }
}

/// Milliseconds, compact: `0.42`, `8.04`, `185`, `1.9k` (≥ 1000 ms with one decimal).
pub fn fmt_ms(seconds: Option<f64>) -> String {
    match seconds {
        None => "-".into(),
        Some(s) => {
            let ms = s * 1e3;
            if ms >= 10_000.0 {
                format!("{:.0}k", ms / 1e3)
            } else if ms >= 1000.0 {
                format!("{:.1}k", ms / 1e3)
            } else if ms >= 100.0 {
                format!("{ms:.0}")
            } else if ms >= 10.0 {
                format!("{ms:.1}")
            } else {
                format!("{ms:.2}")
            }
        }
    }
}

/// tok/s with one decimal (`-` when absent).
pub fn fmt_tps(v: Option<f64>) -> String {
    v.map(|x| format!("{x:.1}")).unwrap_or_else(|| "-".into())
}

/// The text shown in one matrix cell.
pub fn cell_text(r: &CellResult, show_capacity_limited: bool) -> String {
    match r.status {
        CellStatus::Ok => {
            let mut s = if r.capacity_limited && !show_capacity_limited {
                "∅".to_string()
            } else {
                fmt_tps(r.aggregate_tps)
            };
            if r.capacity_limited {
                if let Some(eff) = r.effective_concurrency.or(r.avg_running_reqs) {
                    let _ = write!(s, " ({:.1}/{})", eff, r.concurrency);
                }
                s.push('*');
            }
            s
        }
        CellStatus::SkippedCapacity => "∅".into(),
        CellStatus::SkippedContext => "ctx".into(),
        CellStatus::SkippedUser => "skip".into(),
        CellStatus::Error => "ERROR".into(),
        CellStatus::Invalid => "INVALID".into(),
    }
}

/// `TTFT/ITL` at percentile `p`, ms (empty for cells that were not measured).
fn detail_text(r: &CellResult, p: f64) -> String {
    if r.status != CellStatus::Ok {
        return String::new();
    }
    format!(
        "{}/{}",
        fmt_ms(percentile(r, Metric::Ttft, p)),
        fmt_ms(percentile(r, Metric::Itl, p))
    )
}

fn pad(s: &str, w: usize) -> String {
    let n = s.chars().count();
    if n >= w {
        s.to_string()
    } else {
        format!("{}{s}", " ".repeat(w - n))
    }
}

fn pad_right(s: &str, w: usize) -> String {
    let n = s.chars().count();
    if n >= w {
        s.to_string()
    } else {
        format!("{s}{}", " ".repeat(w - n))
    }
}

/// Text of one cell.
type CellFn = Box<dyn Fn(&CellResult) -> String>;

/// A detail line of a matrix: its label (shown in the context column) and its text per cell.
type Detail<'a> = (String, &'a dyn Fn(&CellResult) -> String);

/// Renders a matrix (rows = contexts, columns = C) from `cells` with a value and detail lines.
fn matrix(
    out: &mut String,
    cells: &[CellResult],
    value: &dyn Fn(&CellResult) -> String,
    details: &[Detail<'_>],
) {
    let mut cs: Vec<u64> = cells.iter().map(|c| c.concurrency).collect();
    cs.sort_unstable();
    cs.dedup();
    let mut xs: Vec<u64> = Vec::new();
    for c in cells {
        if !xs.contains(&c.context_tokens) {
            xs.push(c.context_tokens);
        }
    }
    xs.sort_unstable();
    let find = |x: u64, c: u64| {
        cells
            .iter()
            .find(|r| r.context_tokens == x && r.concurrency == c)
    };
    let mut width = 8usize;
    for r in cells {
        width = width.max(value(r).chars().count() + 2);
        for (_, d) in details {
            width = width.max(d(r).chars().count() + 2);
        }
    }
    let _ = write!(out, "  {}", pad_right("ctx \\ C", 9));
    for c in &cs {
        let _ = write!(out, "{}", pad(&c.to_string(), width));
    }
    out.push('\n');
    for &x in &xs {
        let _ = write!(out, "  {}", pad_right(&format_context(x), 9));
        for &c in &cs {
            let v = find(x, c).map(value).unwrap_or_else(|| "".into());
            let _ = write!(out, "{}", pad(&v, width));
        }
        out.push('\n');
        for (label, d) in details {
            let line: Vec<String> = cs
                .iter()
                .map(|&c| find(x, c).map(d).unwrap_or_default())
                .collect();
            if line.iter().any(|s| !s.is_empty()) {
                let _ = write!(out, "  {}", pad_right(&format!("  {label}"), 9));
                for s in line {
                    let _ = write!(out, "{}", pad(&s, width));
                }
                out.push('\n');
            }
        }
    }
}

/// The marks a matrix of `cells` uses, with their meaning in plain words (only marks that
/// appear, so the legend never lists a symbol the reader cannot find).
pub fn legend(cells: &[CellResult], show_capacity_limited: bool) -> Vec<String> {
    let has = |f: &dyn Fn(&CellResult) -> bool| cells.iter().any(f);
    let mut v = Vec::new();
    if has(&|c| c.status == CellStatus::SkippedCapacity) {
        v.push(
            "∅ = not run: C × (context + max_tokens) is over the server's KV-cache budget".into(),
        );
    }
    if has(&|c| c.status == CellStatus::Ok && c.capacity_limited) {
        if !show_capacity_limited {
            v.push(
                "∅ (r/C)* = capacity-limited: only r of C requests ran at once on average, so the value is hidden (--show-capacity-limited-values shows it)"
                    .into(),
            );
        } else {
            v.push("(r/C)* = capacity-limited: only r of C requests ran at once on average".into());
        }
    }
    if has(&|c| c.status == CellStatus::SkippedContext) {
        v.push("ctx = not run: context + max_tokens is over the model's maximum length".into());
    }
    if has(&|c| c.status == CellStatus::SkippedUser) {
        v.push("skip = not run: skipped or interrupted by the user".into());
    }
    if has(&|c| matches!(c.status, CellStatus::Error | CellStatus::Invalid)) {
        v.push("ERROR / INVALID = the cell failed; the reason is listed below".into());
    }
    v
}

fn opt_text(v: Option<String>) -> String {
    v.unwrap_or_else(|| "-".into())
}

/// The run's header: tool, model, server, engine and the main settings (two lines).
fn header(out: &mut String, r: &Results) {
    let m = &r.metadata;
    let api = if m.endpoint.is_empty() {
        String::new()
    } else {
        format!(", {} API", m.endpoint)
    };
    let _ = writeln!(
        out,
        "{} — {} @ {} ({}{api})",
        cells::tool_label(r),
        export::one_line(&m.model),
        export::one_line(&m.server),
        export::one_line(&cells::engine_label(r))
    );
    let mut facts = vec![
        format!("max_tokens {}", m.max_tokens),
        format!("window {:.0}s", m.duration_per_test),
        format!("ignore_eos {}", m.ignore_eos),
    ];
    if !m.prompt_targeting.is_empty() {
        facts.push(format!(
            "prompts {}",
            cells::prompt_targeting_words(&m.prompt_targeting)
        ));
    }
    if m.max_total_tokens > 0 {
        facts.push(format!("KV budget {} tokens", m.max_total_tokens));
    }
    if m.interrupted {
        facts.push("INTERRUPTED (partial results)".into());
    }
    if r.run_state == Some(servebench_results::RunState::Running) {
        facts.push(
            "RUN NOT COMPLETE (a checkpoint written while the run was going: if it is not still running, it was killed; `servebench run --resume` finishes it)"
                .into(),
        );
    }
    if let Some(f) = &r.resumed_from {
        facts.push(format!(
            "resumed from {} ({} cells, {} prefill rows kept from run {})",
            f.file,
            f.kept_cells.len(),
            f.kept_prefill.len(),
            f.run_id
        ));
    }
    let _ = writeln!(out, "{}", facts.join(" · "));
}

/// The per-gap ITL matrix (every per-token gap of a cell, not per-request means): p99 in ms,
/// then p99.9 / max and the peak 1 s output rate. Nothing when no ok cell has gaps.
/// `layer`: what the cells are, before the title (`""` for the sustained matrix).
fn gap_matrix(out: &mut String, cells: &[CellResult], show: bool, layer: &str) {
    if !cells
        .iter()
        .any(|c| c.status == CellStatus::Ok && c.itl_gaps.is_some())
    {
        return;
    }
    let _ = writeln!(
        out,
        "{layer}Per-gap ITL p99 in ms (every token gap, chunk-aware; lines below: p99.9 / max in ms, peak tok/s over 1 s)"
    );
    let ok = |c: &CellResult| c.status == CellStatus::Ok && (show || !c.capacity_limited);
    let tail = |c: &CellResult| match (&c.itl_gaps, ok(c)) {
        (Some(g), true) => format!("{}/{}", fmt_ms(Some(g.p99_9)), fmt_ms(Some(g.max))),
        _ => String::new(),
    };
    let peak = |c: &CellResult| match ok(c) {
        true => fmt_tps(c.peak_output_tps_1s),
        false => String::new(),
    };
    matrix(
        out,
        cells,
        &|c| match (&c.itl_gaps, ok(c)) {
            (Some(g), true) => fmt_ms(Some(g.p99)),
            (None, true) => "-".to_string(),
            _ => cell_text(c, show),
        },
        &[
            ("p99.9/max".to_string(), &tail),
            ("peak tok/s".to_string(), &peak),
        ],
    );
    out.push('\n');
}

/// What every section of the text report needs: the run, the value switch, the percentile
/// detail lines and the Burst / E2E cells that are shown.
struct TextCtx<'a> {
    r: &'a Results,
    /// Raw tok/s in capacity-limited cells.
    show: bool,
    /// The chosen percentiles' labels, comma-separated.
    pct_names: String,
    /// One TTFT / ITL detail line per chosen percentile.
    details: Vec<(String, CellFn)>,
    /// The Burst / E2E cells (none for a request-count run).
    burst: &'a [CellResult],
}

impl<'a> TextCtx<'a> {
    fn new(r: &'a Results, opts: &ReportOptions) -> Self {
        let m = &r.metadata;
        let pcts = opts.percentiles();
        let pct_names = pcts
            .iter()
            .map(|&p| pct_label(p))
            .collect::<Vec<_>>()
            .join(", ");
        let details: Vec<(String, CellFn)> = pcts
            .iter()
            .map(|&p| {
                let f: CellFn = Box::new(move |c| detail_text(c, p));
                (pct_label(p), f)
            })
            .collect();
        let burst: &[CellResult] = if m.decode_mode == DecodeMode::RequestCount {
            &[]
        } else {
            &r.burst_results
        };
        TextCtx {
            r,
            show: opts.show_capacity_limited_values || m.show_capacity_limited_values,
            pct_names,
            details,
            burst,
        }
    }

    /// The detail lines as `matrix` takes them.
    fn details(&self) -> Vec<Detail<'_>> {
        self.details
            .iter()
            .map(|(l, f)| (l.clone(), f.as_ref()))
            .collect()
    }
}

/// The final plain-text report.
pub fn render_text(r: &Results, opts: &ReportOptions) -> String {
    let mut out = String::new();
    header(&mut out, r);
    out.push('\n');
    let cx = TextCtx::new(r, opts);
    text_cold_prefill(&mut out, r);
    if !r.results.is_empty() {
        text_decode(&mut out, &cx);
    }
    text_warm_prefill(&mut out, r);
    text_burst(&mut out, &cx);
    out.push_str(&hardware::gpu_panel(r));
    text_problems(&mut out, &cx);
    text_warnings(&mut out, &cx);
    fault_sections(r, &mut out);
    steady_section(r, &mut out);
    let rate = rate::text(r);
    if !rate.is_empty() {
        out.push('\n');
        out.push_str(&rate);
    }
    if let Some(p) = &opts.json_path {
        out.push('\n');
        let _ = writeln!(out, "Results saved to {p}");
    }
    out
}

/// The cold prefill rows (nothing when there are none).
fn text_cold_prefill(out: &mut String, r: &Results) {
    if r.prefill.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "Prefill (prompt tokens / TTFT of one cold request with max_tokens=1)"
    );
    let _ = writeln!(
        out,
        "  {}{}{}{}  measured by",
        pad_right("context", 9),
        pad("tokens", 9),
        pad("TTFT s", 10),
        pad("tok/s", 11)
    );
    for (ctx_label, _, row) in by_context(&r.prefill) {
        let _ = writeln!(
            out,
            "  {}{}{}{}  {}{}",
            pad_right(&ctx_label, 9),
            pad(
                &opt_text(cells::prefill_tokens_shown(row).map(|t| t.to_string())),
                9
            ),
            pad(&opt_text(row.ttft_seconds.map(|t| format!("{t:.3}"))), 10),
            pad(&opt_text(row.tok_per_sec.map(|t| format!("{t:.0}"))), 11),
            cells::prefill_method_words(row.method),
            prefill_mark(row)
        );
    }
    out.push('\n');
}

/// The mark after a prefill row that is not ok: `  INVALID: <reason>` (nothing for an ok row).
fn prefill_mark(row: &PrefillRow) -> String {
    match row.status {
        None | Some(CellStatus::Ok) => String::new(),
        Some(s) => {
            // `invalid: <reason>` on one line, with the status in capitals
            let text = cells::prefill_status_text(row);
            let rest = text.strip_prefix(s.as_str()).unwrap_or(&text);
            format!("  {}{rest}", s.as_str().to_uppercase())
        }
    }
}

/// The decode matrices (aggregate, per-request, per-gap ITL, server check), where the tokens
/// were counted from and the legend of the marks.
fn text_decode(out: &mut String, cx: &TextCtx<'_>) {
    let (r, show) = (cx.r, cx.show);
    let layer = if r.metadata.decode_mode == DecodeMode::RequestCount {
        "request-count: Σ completion tokens / wall time"
    } else {
        "sustained"
    };
    let _ = writeln!(
        out,
        "Aggregate decode tok/s ({layer}; lines below each value: TTFT / ITL in ms at {})",
        cx.pct_names
    );
    matrix(out, &r.results, &|c| cell_text(c, show), &cx.details());
    out.push('\n');
    let _ = writeln!(out, "Per-request tok/s (aggregate / C)");
    matrix(
        out,
        &r.results,
        &|c| {
            if c.status == CellStatus::Ok && (show || !c.capacity_limited) {
                fmt_tps(c.per_request_avg_tps)
            } else {
                cell_text(c, show)
            }
        },
        &[],
    );
    out.push('\n');
    gap_matrix(out, &r.results, show, "");
    text_server_check(out, cx);
    let sources = cells::ok_sources(&r.results);
    if !sources.is_empty() {
        let words: Vec<String> = sources
            .iter()
            .map(|&s| format!("{s} ({})", cells::aggregate_source_words(s)))
            .collect();
        let _ = writeln!(out, "Tokens counted from: {}", words.join("; "));
    }
    let all: Vec<CellResult> = r.results.iter().chain(cx.burst).cloned().collect();
    let legend = legend(&all, show);
    if !legend.is_empty() {
        let _ = writeln!(out, "Legend:");
        for l in legend {
            let _ = writeln!(out, "  {l}");
        }
    }
}

/// Server-side validation from the engine's own /metrics over the same windows (nothing when
/// no ok cell has it).
fn text_server_check(out: &mut String, cx: &TextCtx<'_>) {
    let (r, show) = (cx.r, cx.show);
    if !r
        .results
        .iter()
        .any(|c| c.status == CellStatus::Ok && c.server_gen_throughput.is_some())
    {
        return;
    }
    let m = &r.metadata;
    let engine = if m.engine.is_empty() {
        "server"
    } else {
        m.engine.as_str()
    };
    let _ = writeln!(
        out,
        "Server check ({engine} /metrics over each window: server generation tok/s; second line: avg running requests / C)"
    );
    let running = |c: &CellResult| match (c.status, c.avg_running_reqs) {
        (CellStatus::Ok, Some(a)) => format!("{a:.1}/{}", c.concurrency),
        _ => String::new(),
    };
    matrix(
        out,
        &r.results,
        &|c| {
            if c.status == CellStatus::Ok {
                fmt_tps(c.server_gen_throughput)
            } else {
                cell_text(c, show)
            }
        },
        &[("running".to_string(), &running)],
    );
    out.push('\n');
}

/// The warm-prefix prefill rows (nothing when there are none).
fn text_warm_prefill(out: &mut String, r: &Results) {
    if r.prefill_warm.is_empty() {
        return;
    }
    out.push('\n');
    let _ = writeln!(
        out,
        "Warm-prefix prefill (the same prompt sent again; NOT comparable with cold prefill)"
    );
    let _ = writeln!(
        out,
        "  {}{}{}{}{}  cached count from",
        pad_right("context", 9),
        pad("tokens", 9),
        pad("cached", 16),
        pad("TTFT s", 10),
        pad("uncached tok/s", 16)
    );
    for (ctx_label, _, row) in by_context(&r.prefill_warm) {
        let ok = cells::prefill_tokens_shown(row).is_some() || row.prompt_tokens.is_none();
        let cached = match (row.cached_tokens, row.cache_hit_rate) {
            _ if !ok => "-".into(),
            (Some(c), Some(h)) => format!("{c} ({:.0}%)", h * 100.0),
            (Some(c), None) => c.to_string(),
            _ => "unknown".into(),
        };
        let _ = writeln!(
            out,
            "  {}{}{}{}{}  {}{}",
            pad_right(&ctx_label, 9),
            pad(
                &opt_text(cells::prefill_tokens_shown(row).map(|t| t.to_string())),
                9
            ),
            pad(&cached, 16),
            pad(&opt_text(row.ttft_seconds.map(|t| format!("{t:.3}"))), 10),
            pad(&opt_text(row.tok_per_sec.map(|t| format!("{t:.0}"))), 16),
            export::one_line(row.cached_tokens_source.as_deref().unwrap_or("-")),
            prefill_mark(row)
        );
    }
    let _ = writeln!(
        out,
        "  uncached tok/s = prompt tokens not served from the prefix cache / TTFT"
    );
}

/// The Burst / E2E matrix (nothing when there are no burst cells).
fn text_burst(out: &mut String, cx: &TextCtx<'_>) {
    if cx.burst.is_empty() {
        return;
    }
    let show = cx.show;
    out.push('\n');
    let _ = writeln!(
        out,
        "Burst / E2E tok/s (completed/target; finite batches — a different question from sustained decode)"
    );
    matrix(
        out,
        cx.burst,
        &|c| {
            if c.status == CellStatus::Ok {
                format!(
                    "{} ({}/{})",
                    fmt_tps(c.aggregate_tps),
                    c.num_completed,
                    c.request_count_target
                )
            } else {
                cell_text(c, show)
            }
        },
        &cx.details(),
    );
    if cx.burst.iter().any(|c| c.itl_gaps.is_some()) {
        out.push('\n');
        gap_matrix(out, cx.burst, show, "Burst / E2E: ");
    }
}

/// `[burst] ` for a Burst / E2E cell, nothing for a sustained one.
fn burst_tag(c: &CellResult) -> &'static str {
    if c.benchmark_mode == BenchmarkMode::BurstE2e {
        "[burst] "
    } else {
        ""
    }
}

/// Every decode and burst cell that was not measured, with its reason.
fn text_problems(out: &mut String, cx: &TextCtx<'_>) {
    let problems: Vec<&CellResult> =
        cx.r.results
            .iter()
            .chain(cx.burst.iter())
            .filter(|c| c.status != CellStatus::Ok)
            .collect();
    if problems.is_empty() {
        return;
    }
    out.push('\n');
    let _ = writeln!(out, "Cells not measured:");
    for c in problems {
        let _ = writeln!(
            out,
            "  {}C={} ctx={}: {} — {}",
            burst_tag(c),
            c.concurrency,
            format_context(c.context_tokens),
            c.status.as_str(),
            export::one_line(&c.status_reason)
        );
    }
}

/// Every warning of a decode or burst cell.
fn text_warnings(out: &mut String, cx: &TextCtx<'_>) {
    let warned: Vec<&CellResult> =
        cx.r.results
            .iter()
            .chain(cx.burst.iter())
            .filter(|c| !c.warnings.is_empty())
            .collect();
    if warned.is_empty() {
        return;
    }
    out.push('\n');
    let _ = writeln!(out, "Warnings:");
    for c in warned {
        let layer = burst_tag(c);
        for w in &c.warnings {
            let _ = writeln!(
                out,
                "  {layer}C={} ctx={}: {}",
                c.concurrency,
                format_context(c.context_tokens),
                export::one_line(w)
            );
        }
    }
}

/// The steady state of request-count and Burst / E2E cells and of capped rate rows (the span
/// with at least 95 % of the in-flight target in flight; docs/metrics.md). Prints nothing for
/// files without it.
fn steady_section(r: &Results, out: &mut String) {
    let line = |label: String, s: &servebench_results::SteadyState| {
        format!(
            "  {label}: {:.2} s ({:.0} % of the load, ≥ {} of {} in flight), {} tok/s, TTFT p50 {} ms, ITL p50 {} ms{}",
            s.duration_s,
            s.fraction * 100.0,
            s.min_in_flight,
            s.target_in_flight,
            fmt_tps(s.output_tps),
            fmt_ms(s.ttft_p50),
            fmt_ms(s.itl_p50),
            if s.short { " (short)" } else { "" }
        )
    };
    let lines: Vec<String> = cells::steady_blocks(r)
        .into_iter()
        .map(|(label, s)| line(label, s))
        .collect();
    if lines.is_empty() {
        return;
    }
    out.push('\n');
    let _ = writeln!(
        out,
        "Steady state (the longest span with ≥ 95 % of the in-flight target in flight; ramp-up and drain left out):"
    );
    for l in lines {
        let _ = writeln!(out, "{l}");
    }
}

/// Requested vs real context (cells whose measured prompt differs from the label by more than
/// 5 %) and HTTP 429 counts. Prints nothing for files without these fields.
fn fault_sections(r: &Results, out: &mut String) {
    let cells = || r.results.iter().chain(r.burst_results.iter());
    let mut ctx_lines: Vec<String> = Vec::new();
    for c in cells() {
        let (Some(req), Some(m)) = (c.requested_context_tokens, c.measured_prompt_tokens) else {
            continue;
        };
        // a count the run judged impossible (usage_implausible) is no real context: the cell's
        // own reason quotes it, and +97656249900 % here would read as a measurement
        if c.status == CellStatus::Invalid
            && c.error_kind == Some(servebench_results::FailureKind::UsageImplausible)
        {
            continue;
        }
        if req == 0 || ((m as f64 - req as f64) / req as f64).abs() <= 0.05 {
            continue;
        }
        let line = format!(
            "  context {}: requested {req} tokens, the server counted {m} ({:+.0} %)",
            format_context(req),
            (m as f64 - req as f64) / req as f64 * 100.0
        );
        if !ctx_lines.contains(&line) {
            ctx_lines.push(line);
        }
    }
    if !ctx_lines.is_empty() {
        out.push('\n');
        let _ = writeln!(
            out,
            "Requested vs real context (cells are labelled with the requested context):"
        );
        for l in ctx_lines {
            let _ = writeln!(out, "{l}");
        }
    }
    let limited: Vec<&CellResult> = cells()
        .filter(|c| c.rejected_requests.unwrap_or(0) > 0)
        .collect();
    if !limited.is_empty() {
        out.push('\n');
        let _ = writeln!(out, "HTTP 429 (rate limited) answers:");
        for c in limited {
            let _ = writeln!(
                out,
                "  C={} ctx={}: {} rejected, {} retried",
                c.concurrency,
                format_context(c.context_tokens),
                c.rejected_requests.unwrap_or(0),
                c.retried_requests.unwrap_or(0)
            );
        }
    }
}

/// Serialises `r` as pretty JSON (2-space indent, trailing newline).
pub fn to_json(r: &Results) -> Result<Vec<u8>, serde_json::Error> {
    let mut v = serde_json::to_vec_pretty(r)?;
    v.push(b'\n');
    Ok(v)
}

/// Writes `r` to `path` atomically ([`write_atomic`]), so an interrupted or killed write never
/// leaves a truncated results file.
pub fn write_json(r: &Results, path: &Path) -> anyhow::Result<()> {
    let bytes = to_json(r)?;
    write_atomic(path, &bytes)?;
    Ok(())
}

/// Replaces `path` with `bytes` atomically: a temporary file in the same directory is written,
/// flushed to disk (`fsync`), then renamed over `path`, and the directory is synced, so a reader
/// (or the disk after a crash or SIGKILL) sees either the old file or the new one, never a
/// partial one. The folder is created when missing.
///
/// Errors: the folder cannot be created or written, or the disk is full.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write as _;
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(
        ".{}.tmp{}",
        path.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("results"),
        std::process::id()
    ));
    let res = (|| -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, path)?;
        // The rename itself is durable only once the directory entry is on disk.
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if res.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    Ok(res?)
}

/// Keeps a previous file at `path` instead of overwriting it: renames it to the first free
/// `NAME.1.EXT`, `NAME.2.EXT`, … beside it (`results.json` → `results.1.json`). Returns the new
/// name of the previous file, or `None` when there was none. `servebench run` calls this for its
/// results file and every export, so a second run with the same `-o` never loses the first.
///
/// # Errors
/// The rename failed (the previous file is then left where it was).
pub fn rotate_existing(path: &Path) -> std::io::Result<Option<std::path::PathBuf>> {
    if !path.exists() {
        return Ok(None);
    }
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "results".into());
    let ext = path
        .extension()
        .map(|e| format!(".{}", e.to_string_lossy()))
        .unwrap_or_default();
    let mut n = 1u64;
    loop {
        let candidate = path.with_file_name(format!("{stem}.{n}{ext}"));
        // `symlink_metadata`, not `exists`: a dangling symbolic link is a taken name, never
        // renamed over.
        if std::fs::symlink_metadata(&candidate).is_err() {
            std::fs::rename(path, &candidate)?;
            return Ok(Some(candidate));
        }
        n += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ms_format() {
        assert_eq!(fmt_ms(Some(0.00042)), "0.42");
        assert_eq!(fmt_ms(Some(0.0123)), "12.3");
        assert_eq!(fmt_ms(Some(0.185)), "185");
        assert_eq!(fmt_ms(Some(1.5)), "1.5k");
        assert_eq!(fmt_ms(Some(12.0)), "12k");
        assert_eq!(fmt_ms(None), "-");
    }
}
