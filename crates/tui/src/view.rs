//! Drawing the dashboard: a pure function of [`Dashboard`] and the run's elapsed time.

use std::collections::BTreeSet;

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Cell, Paragraph, Row, Sparkline, Table, Wrap};
use ratatui::Frame;
use servebench_events::Phase;
use servebench_results::{format_context, CellStatus};

use crate::plain::{phase_text, secs};
use crate::state::{human_duration, percentile, thousands, Current, Dashboard};

/// What the view needs besides the state.
#[derive(Clone, Copy, Debug, Default)]
pub struct ViewInfo {
    /// Seconds since the run started.
    pub elapsed_s: f64,
}

/// Height of the inline view (lines under the scrolling log).
pub const INLINE_HEIGHT: u16 = 5;

/// Smallest area the full screen layout is drawn in; smaller ones get the compact view.
const MIN_FULL: (u16, u16) = (60, 18);

const KEYS: &str = "q stop and keep the results · s skip this cell";

/// Draws the full-screen dashboard (the compact one when the terminal is very small).
pub fn draw(frame: &mut Frame, d: &Dashboard, v: &ViewInfo) {
    let area = frame.area();
    if area.width < MIN_FULL.0 || area.height < MIN_FULL.1 {
        draw_compact(frame, d, v);
        return;
    }
    let contexts = matrix_axes(d).1.len() as u16;
    let [header, current, middle, log, footer] = Layout::vertical([
        Constraint::Length(5),
        Constraint::Length(6),
        // Matrix rows + header + two legend lines + borders; taller screens get a taller
        // sparkline.
        Constraint::Length((contexts + 5).max(if area.height >= 36 { 10 } else { 7 })),
        Constraint::Min(3),
        Constraint::Length(1),
    ])
    .areas(area);
    frame.render_widget(
        Paragraph::new(header_lines(d, v)).block(Block::bordered().title(" servebench ")),
        header,
    );
    frame.render_widget(
        Paragraph::new(current_lines(d, current.width.saturating_sub(2)))
            .block(Block::bordered().title(current_title(d))),
        current,
    );
    let [matrix, side] =
        Layout::horizontal([Constraint::Min(30), Constraint::Length(36)]).areas(middle);
    draw_matrix(frame, d, matrix);
    draw_side(frame, d, side);
    let inner = log.height.saturating_sub(2) as usize;
    let lines: Vec<Line> = d
        .log
        .iter()
        .skip(d.log.len().saturating_sub(inner))
        .map(|l| Line::raw(l.as_str()))
        .collect();
    frame.render_widget(
        Paragraph::new(lines).block(Block::bordered().title(" event log ")),
        log,
    );
    frame.render_widget(Paragraph::new(footer_line(d)), footer);
}

/// Draws the compact view: a few lines (inline mode, or a very small terminal).
pub fn draw_compact(frame: &mut Frame, d: &Dashboard, v: &ViewInfo) {
    let area = frame.area();
    let mut lines = vec![Line::from(vec![
        Span::styled("servebench ", Style::new().add_modifier(Modifier::BOLD)),
        Span::raw(format!(
            "{} · {} · {}",
            engine_label(d),
            d.plan.as_ref().map(|p| p.model.as_str()).unwrap_or("-"),
            plan_progress(d, v)
        )),
    ])];
    match &d.current {
        Some(c) => {
            let bar_w = (area.width / 4).clamp(8, 30) as usize;
            lines.push(Line::raw(format!(
                "{} · {}",
                cell_label(d, c),
                phase_with_bar(c, bar_w)
            )));
            lines.push(Line::raw(format!(
                "{} · {}",
                streams_text(c),
                latency_text(c)
            )));
            lines.push(Line::raw(format!(
                "{} · {}",
                server_text(c),
                health_text(d)
            )));
        }
        None => {
            lines.push(Line::raw(idle_text(d)));
            lines.push(Line::raw(health_text(d)));
            lines.push(Line::raw(""));
        }
    }
    lines.push(footer_line(d));
    frame.render_widget(Paragraph::new(lines), area);
}

fn engine_label(d: &Dashboard) -> String {
    match &d.plan {
        Some(p) => match &p.engine_version {
            // Some servers report the version with the name (`servebench-sim 0.1.0`).
            Some(v) if v.starts_with(&p.engine) => v.clone(),
            Some(v) => format!("{} {v}", p.engine),
            None => p.engine.clone(),
        },
        None => "connecting to the server…".into(),
    }
}

/// `done 3/12 · elapsed 4 min · run ETA 14 min`.
fn plan_progress(d: &Dashboard, v: &ViewInfo) -> String {
    let layer = match &d.plan {
        Some(p) if p.layer == servebench_results::DecodeMode::RequestCount => {
            " · request-count cells".to_string()
        }
        Some(p) => format!(" · {} s windows", secs(p.window_s)),
        None => String::new(),
    };
    let mut s = format!(
        "done {}/{}{layer} · elapsed {}",
        d.done(),
        d.total(),
        human_duration(v.elapsed_s)
    );
    if d.ended {
        s.push_str(" · run over");
    } else if d.stopping {
        s.push_str(" · stopping");
    } else if let Some(eta) = d.eta_s() {
        s.push_str(&format!(" · run ETA {}", human_duration(eta)));
        if d.plan.as_ref().is_some_and(|p| p.burst_layer) {
            s.push_str(" + burst layer");
        }
    } else if d.plan.is_some() {
        s.push_str(" · run ETA unknown (request-count cells)");
    }
    s
}

fn header_lines(d: &Dashboard, v: &ViewInfo) -> Vec<Line<'static>> {
    let Some(p) = &d.plan else {
        return vec![
            Line::raw(engine_label(d)),
            Line::raw(""),
            Line::raw(format!("elapsed {}", human_duration(v.elapsed_s))),
        ];
    };
    let kv = if p.kv_budget_tokens > 0 {
        format!(
            "KV budget {} tokens ({})",
            thousands(p.kv_budget_tokens as f64),
            p.kv_budget_source
        )
    } else {
        "KV budget unknown".to_string()
    };
    let skips = d.planned_skips();
    let skipped = if skips > 0 {
        format!(" ({skips} skipped up front)")
    } else {
        String::new()
    };

    vec![
        Line::from(vec![
            Span::styled(engine_label(d), Style::new().add_modifier(Modifier::BOLD)),
            Span::raw(format!(" · model {} · {}", p.model, p.url)),
        ]),
        Line::raw(format!("{kv} · plan {} cells{skipped}", p.cells.len())),
        Line::raw(plan_progress(d, v)),
    ]
}

fn cell_label(d: &Dashboard, c: &Current) -> String {
    let which = if c.warmup {
        "warmup".to_string()
    } else {
        format!("cell {}/{}", c.index, c.total.max(d.total()))
    };
    format!(
        "{which} C={} ctx={}",
        c.concurrency,
        format_context(c.context)
    )
}

fn current_title(d: &Dashboard) -> String {
    match &d.current {
        Some(c) => format!(" {} ", cell_label(d, c)),
        None => " now ".to_string(),
    }
}

/// `window [█████░░░░░] 12/30 s · 18 s left`.
fn phase_with_bar(c: &Current, width: usize) -> String {
    let (done, limit) = c.phase_progress();
    match (c.phase, limit) {
        (Some(phase), Some(l)) if l > 0.0 => {
            let frac = (done / l).clamp(0.0, 1.0);
            let full = (frac * width as f64).round() as usize;
            let bar = format!("{}{}", "█".repeat(full), "░".repeat(width - full));
            let left = (l - done).max(0.0);
            let name = match phase {
                Phase::RampUp => "ramp-up (timeout)",
                Phase::Readiness => "readiness",
                p => p.label(),
            };
            format!(
                "{name} [{bar}] {}/{} s · {} s left",
                secs(done.min(l)),
                secs(l),
                secs(left)
            )
        }
        _ => phase_text(c),
    }
}

fn streams_text(c: &Current) -> String {
    let p = c.progress.as_ref();
    let active = p.map(|p| p.active_streams).unwrap_or(0);
    let mut s = format!("streams {active}/{} producing", c.concurrency);
    if let Some(t) = p.and_then(|p| p.live_tps) {
        s.push_str(&format!(" · {} tok/s", thousands(t)));
        if active > 0 {
            s.push_str(&format!(" ({} per stream)", thousands(t / active as f64)));
        }
    }
    s
}

fn ms(v: Option<f64>) -> String {
    match v {
        Some(s) if s * 1e3 >= 100.0 => format!("{:.0} ms", s * 1e3),
        Some(s) => format!("{:.1} ms", s * 1e3),
        None => "-".into(),
    }
}

fn latency_text(c: &Current) -> String {
    if c.ttft_s.is_empty() && c.itl_s.is_empty() {
        let failed = if c.requests_failed > 0 {
            format!(" ({} failed)", c.requests_failed)
        } else {
            String::new()
        };
        return format!("TTFT/ITL: no request has ended in this cell yet{failed}");
    }
    let failed = if c.requests_failed > 0 {
        format!(", {} failed", c.requests_failed)
    } else {
        String::new()
    };
    format!(
        "TTFT p50 {} p99 {} · ITL p50 {} p99 {} ({} requests ended{failed})",
        ms(percentile(&c.ttft_s, 50.0)),
        ms(percentile(&c.ttft_s, 99.0)),
        ms(percentile(&c.itl_s, 50.0)),
        ms(percentile(&c.itl_s, 99.0)),
        c.requests_done
    )
}

fn server_text(c: &Current) -> String {
    match &c.server {
        Some(s) => {
            let n = |v: Option<f64>| v.map(|x| format!("{x:.0}")).unwrap_or_else(|| "-".into());
            let kv = s
                .kv_usage
                .map(|k| format!("{:.0} %", k * 100.0))
                .unwrap_or_else(|| "-".into());
            format!(
                "server {} running · {} queued · KV cache {kv}",
                n(s.running),
                n(s.waiting)
            )
        }
        None => "server: no metrics sample".into(),
    }
}

fn health_text(d: &Dashboard) -> String {
    match &d.health {
        Some(h) => {
            let cpu = h
                .cpu_util
                .map(|c| format!("{:.0} %", c * 100.0))
                .unwrap_or_else(|| "-".into());
            let read = h
                .read_delay_ms
                .map(|r| format!(" · read delay {r:.2} ms"))
                .unwrap_or_default();
            format!("client CPU {cpu} · tick lag {:.0} ms{read}", h.tick_lag_ms)
        }
        None => "client: no sample yet".into(),
    }
}

fn idle_text(d: &Dashboard) -> String {
    if d.stopping {
        return "stopping: the current cell ends as skipped; partial results are being written"
            .into();
    }
    if d.ended || (d.plan.is_some() && d.total() > 0 && d.done() >= d.total()) {
        return "matrix done; writing the results".into();
    }
    match d.log.back() {
        Some(l) => format!(
            "preparing: {}",
            l.split_once(' ').map(|(_, m)| m).unwrap_or(l)
        ),
        None => "preparing".into(),
    }
}

fn current_lines(d: &Dashboard, width: u16) -> Vec<Line<'static>> {
    let Some(c) = &d.current else {
        return vec![Line::raw(idle_text(d))];
    };
    let bar_w = (width as usize / 3).clamp(10, 40);
    vec![
        Line::raw(phase_with_bar(c, bar_w)),
        Line::raw(streams_text(c)),
        Line::raw(latency_text(c)),
        Line::raw(server_text(c)),
    ]
}

/// Concurrencies and contexts of the plan, ascending.
fn matrix_axes(d: &Dashboard) -> (Vec<u64>, Vec<u64>) {
    let Some(p) = &d.plan else {
        return (Vec::new(), Vec::new());
    };
    let cs: BTreeSet<u64> = p.cells.iter().map(|c| c.concurrency).collect();
    let xs: BTreeSet<u64> = p.cells.iter().map(|c| c.context).collect();
    (cs.into_iter().collect(), xs.into_iter().collect())
}

/// Text and style of one matrix cell, and the legend entry its mark needs.
fn matrix_cell(d: &Dashboard, c: u64, x: u64) -> (String, Style, Option<&'static str>) {
    let Some(p) = &d.plan else {
        return (String::new(), Style::new(), None);
    };
    let Some(pc) = p
        .cells
        .iter()
        .find(|pc| pc.concurrency == c && pc.context == x)
    else {
        return (String::new(), Style::new(), None);
    };
    if let Some(f) = d.finished.get(&pc.index) {
        let dim = Style::new().fg(Color::DarkGray);
        return match f.status {
            CellStatus::Ok => {
                let v = f.aggregate_tps.map(thousands).unwrap_or_else(|| "-".into());
                if f.capacity_limited {
                    (
                        format!("{v}*"),
                        Style::new().fg(Color::Yellow),
                        Some("* readiness timed out"),
                    )
                } else {
                    (v, Style::new().fg(Color::Green), None)
                }
            }
            CellStatus::SkippedCapacity => ("kv".into(), dim, Some("kv over the KV budget")),
            CellStatus::SkippedContext => {
                ("len".into(), dim, Some("len longer than the model allows"))
            }
            CellStatus::SkippedUser => ("skip".into(), dim, Some("skip skipped by the user")),
            CellStatus::Error => (
                "error".into(),
                Style::new().fg(Color::Red),
                Some("error could not run"),
            ),
            CellStatus::Invalid => (
                "invalid".into(),
                Style::new().fg(Color::Red),
                Some("invalid numbers not trusted"),
            ),
        };
    }
    if d.current
        .as_ref()
        .is_some_and(|cur| !cur.warmup && cur.index == pc.index)
    {
        return (
            "▶".into(),
            Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD),
            Some("▶ running"),
        );
    }
    if pc.skip_reason.is_some() {
        return (
            "(skip)".into(),
            Style::new().fg(Color::DarkGray),
            Some("(skip) will be skipped"),
        );
    }
    (
        "·".into(),
        Style::new().fg(Color::DarkGray),
        Some("· to do"),
    )
}

fn draw_matrix(frame: &mut Frame, d: &Dashboard, area: Rect) {
    let (cs, xs) = matrix_axes(d);
    let block = Block::bordered().title(" decode tok/s (aggregate), ctx × C ");
    if cs.is_empty() {
        frame.render_widget(Paragraph::new("waiting for the plan").block(block), area);
        return;
    }
    let mut legend: Vec<&'static str> = Vec::new();
    let mut rows: Vec<Row> = Vec::new();
    for &x in &xs {
        let mut cells = vec![Cell::from(format_context(x))];
        for &c in &cs {
            let (text, style, mark) = matrix_cell(d, c, x);
            if let Some(m) = mark.filter(|m| !legend.contains(m)) {
                legend.push(m);
            }
            cells.push(Cell::from(Line::raw(text).right_aligned()).style(style));
        }
        rows.push(Row::new(cells));
    }
    let header = Row::new(
        std::iter::once(Cell::from("ctx\\C"))
            .chain(
                cs.iter()
                    .map(|c| Cell::from(Line::raw(c.to_string()).right_aligned())),
            )
            .collect::<Vec<_>>(),
    )
    .style(Style::new().add_modifier(Modifier::BOLD));
    let mut widths = vec![Constraint::Length(6)];
    widths.extend(cs.iter().map(|_| Constraint::Length(8)));
    let [table_area, legend_area] =
        Layout::vertical([Constraint::Length(xs.len() as u16 + 1), Constraint::Min(1)])
            .areas(block.inner(area));
    frame.render_widget(block, area);
    frame.render_widget(Table::new(rows, widths).header(header), table_area);
    frame.render_widget(
        Paragraph::new(Line::raw(legend.join("  ")).style(Style::new().fg(Color::DarkGray)))
            .wrap(Wrap { trim: true }),
        legend_area,
    );
}

fn draw_side(frame: &mut Frame, d: &Dashboard, area: Rect) {
    let block = Block::bordered().title(" client and throughput ");
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let [text, spark] = Layout::vertical([Constraint::Length(4), Constraint::Min(1)]).areas(inner);
    let (cpu, lag, read) = match &d.health {
        Some(h) => (
            h.cpu_util
                .map(|c| format!("{:.0} % of one core", c * 100.0))
                .unwrap_or_else(|| "-".into()),
            format!("{:.0} ms", h.tick_lag_ms),
            h.read_delay_ms
                .map(|r| format!("{r:.2} ms"))
                .unwrap_or_else(|| "-".into()),
        ),
        None => ("-".into(), "-".into(), "-".into()),
    };
    frame.render_widget(
        Paragraph::new(vec![
            Line::raw(format!("CPU {cpu}")),
            Line::raw(format!("monitor tick lag {lag}")),
            Line::raw(format!("socket read delay {read}")),
            Line::raw(match d.tps_history.iter().max() {
                Some(m) => format!("tok/s, last minute (max {})", thousands(*m as f64)),
                None => "tok/s: no data yet".to_string(),
            }),
        ]),
        text,
    );
    let w = spark.width as usize;
    let data: Vec<u64> = d
        .tps_history
        .iter()
        .skip(d.tps_history.len().saturating_sub(w))
        .copied()
        .collect();
    frame.render_widget(
        Sparkline::default()
            .data(&data)
            .style(Style::new().fg(Color::Cyan)),
        spark,
    );
}

fn footer_line(d: &Dashboard) -> Line<'static> {
    let keys = if d.ended {
        "run over: writing the results and the report"
    } else {
        KEYS
    };
    let mut spans = vec![Span::styled(
        keys,
        Style::new().add_modifier(Modifier::REVERSED),
    )];
    if let Some(n) = &d.note {
        spans.push(Span::raw(format!(" · {n}")));
    }
    if let Some(w) = d.warnings.last() {
        spans.push(Span::styled(
            format!(" · warnings {}: {w}", d.warnings.len()),
            Style::new().fg(Color::Yellow),
        ));
    }
    Line::from(spans)
}
