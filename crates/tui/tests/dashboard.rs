//! The dashboard drawn from a scripted event sequence with ratatui's `TestBackend`, at three
//! terminal sizes (full layouts and the compact fallback) plus the inline view, and the plain
//! progress lines of the same sequence.

use ratatui::backend::TestBackend;
use ratatui::Terminal;
use servebench_events::RunEvent;
use servebench_events::{
    CellProgress, ClientHealth, Phase, PlannedCell, RequestDone, RunPlan, ServerLive,
};
use servebench_results::{CellResult, CellStatus};
use servebench_tui::view::{draw, draw_compact, ViewInfo, INLINE_HEIGHT};
use servebench_tui::{Dashboard, PlainProgress};

const CELLS: [(u64, u64); 6] = [(1, 0), (1, 16384), (8, 0), (64, 0), (8, 16384), (64, 16384)];

fn log(t: &str, m: &str) -> RunEvent {
    RunEvent::Log {
        time: t.into(),
        message: m.into(),
    }
}

fn plan() -> RunEvent {
    RunEvent::Plan(Box::new(RunPlan {
        engine: "vllm".into(),
        engine_version: Some("0.11.0".into()),
        model: "Qwen/Qwen3-8B".into(),
        url: "http://10.0.0.5:8000".into(),
        kv_budget_tokens: 601_344,
        kv_budget_source: "metrics".into(),
        max_model_len: Some(40_960),
        window_s: 30.0,
        pause_s: 1.0,
        layer: servebench_results::DecodeMode::Duration,
        warmup_s: Some(3.0),
        burst_layer: false,
        cells: CELLS
            .iter()
            .enumerate()
            .map(|(i, &(c, x))| PlannedCell {
                index: i + 1,
                concurrency: c,
                context: x,
                skip_reason: (i == 5).then(|| "over the KV budget".to_string()),
                expected_s: (i != 5).then_some(34.0),
            })
            .collect(),
    }))
}

fn started(index: usize) -> RunEvent {
    let (c, x) = CELLS[index - 1];
    RunEvent::CellStarted {
        index,
        total: CELLS.len(),
        concurrency: c,
        context: x,
        warmup: false,
    }
}

fn finished(index: usize, status: CellStatus, tps: Option<f64>, reason: &str) -> RunEvent {
    let (c, x) = CELLS[index - 1];
    RunEvent::CellFinished {
        index,
        result: Box::new(CellResult {
            concurrency: c,
            context_tokens: x,
            status,
            status_reason: reason.into(),
            aggregate_tps: tps,
            wall_time: Some(33.0),
            benchmark_mode: servebench_results::BenchmarkMode::Duration,
            ..Default::default()
        }),
    }
}

fn progress(index: usize, phase: Phase, elapsed: f64, window: Option<f64>, tps: f64) -> RunEvent {
    let (c, x) = CELLS[index - 1];
    RunEvent::Progress(CellProgress {
        concurrency: c,
        context: x,
        phase,
        // Ramp-up: one more stream producing per progress tick.
        active_streams: match phase {
            Phase::Scout => 0,
            Phase::RampUp => ((elapsed - 1.5) / 0.25) as u64 + 1,
            _ => c,
        }
        .min(c),
        elapsed_s: elapsed,
        live_tps: Some(tps),
        window_elapsed_s: window,
        window_s: 30.0,
        warmup: false,
    })
}

fn phase(index: usize, phase: Phase, at_s: f64, limit_s: Option<f64>) -> RunEvent {
    RunEvent::PhaseChanged {
        index,
        warmup: false,
        phase,
        at_s,
        limit_s,
    }
}

/// Four cells done (one invalid), cell 5 (C=8 ctx=16k) 12 s into its 30 s window.
fn script() -> Vec<RunEvent> {
    let mut ev = vec![
        log("10:00:00", "startup server=http://10.0.0.5:8000 run_id=abc"),
        log("10:00:01", "startup engine vllm 0.11.0"),
        plan(),
        RunEvent::Warning {
            message: "startup warning: prefix caching is on".into(),
        },
        log("10:00:01", "startup warning: prefix caching is on"),
    ];
    for (i, tps) in [(1, 61.2), (2, 58.9), (3, 432.7)] {
        ev.push(started(i));
        ev.push(finished(i, CellStatus::Ok, Some(tps), ""));
        ev.push(log("10:01:00", &format!("cell done {i}")));
    }
    ev.push(started(4));
    ev.push(finished(
        4,
        CellStatus::Invalid,
        None,
        "a stream failed: HTTP 500",
    ));
    ev.push(log("10:03:00", "cell invalid C=64 ctx=0: a stream failed"));
    ev.push(started(5));
    ev.push(log("10:03:01", "cell start C=8 ctx=16k"));
    ev.push(phase(5, Phase::Scout, 0.0, None));
    ev.push(progress(5, Phase::Scout, 0.1, None, 0.0));
    ev.push(phase(5, Phase::RampUp, 1.2, Some(60.0)));
    for k in 0..8 {
        ev.push(progress(
            5,
            Phase::RampUp,
            1.5 + k as f64 * 0.25,
            None,
            50.0 * k as f64,
        ));
    }
    ev.push(phase(5, Phase::Readiness, 3.5, Some(3.0)));
    ev.push(phase(5, Phase::Measuring, 6.5, Some(30.0)));
    ev.push(log("10:03:07", "ready C=8 ctx=16k running=8 waiting=0"));
    for k in 0..48 {
        let w = 0.25 * (k + 1) as f64;
        ev.push(progress(
            5,
            Phase::Measuring,
            6.5 + w,
            Some(w),
            400.0 + (k % 7) as f64 * 5.0,
        ));
    }
    for k in 0..12 {
        ev.push(RunEvent::RequestDone(RequestDone {
            ttft_s: Some(0.180 + k as f64 * 0.01),
            itl_s: Some(0.0185 + k as f64 * 0.0001),
            output_tokens: 512,
            failed: false,
        }));
    }
    ev.push(RunEvent::ServerSample(ServerLive {
        running: Some(8.0),
        waiting: Some(0.0),
        kv_usage: Some(0.372),
    }));
    ev.push(RunEvent::ClientHealth(ClientHealth {
        cpu_util: Some(0.23),
        tick_lag_ms: 3.0,
        read_delay_ms: Some(0.21),
    }));
    ev
}

fn state() -> Dashboard {
    let mut d = Dashboard::default();
    for e in script() {
        d.apply(&e);
    }
    d
}

fn render(w: u16, h: u16, compact: bool) -> Terminal<TestBackend> {
    let d = state();
    let mut t = Terminal::new(TestBackend::new(w, h)).expect("test terminal");
    let info = ViewInfo { elapsed_s: 250.0 };
    t.draw(|f| {
        if compact {
            draw_compact(f, &d, &info)
        } else {
            draw(f, &d, &info)
        }
    })
    .expect("draw");
    t
}

fn screen_text(t: &Terminal<TestBackend>) -> String {
    let buf = t.backend().buffer();
    let mut s = String::new();
    for y in 0..buf.area.height {
        for x in 0..buf.area.width {
            s.push_str(buf[(x, y)].symbol());
        }
        s.push('\n');
    }
    s
}

#[test]
fn dashboard_80x24() {
    let t = render(80, 24, false);
    let s = screen_text(&t);
    assert!(s.contains("cell 5/6 C=8 ctx=16k"), "{s}");
    insta::assert_snapshot!("dashboard_80x24", s);
}

#[test]
fn dashboard_120x40() {
    let t = render(120, 40, false);
    let s = screen_text(&t);
    for want in [
        "vllm 0.11.0",
        "Qwen/Qwen3-8B",
        "http://10.0.0.5:8000",
        "KV budget 601,344 tokens (metrics)",
        "plan 6 cells (1 skipped up front)",
        "done 4/6",
        "run ETA 19 s",
        "window [",
        "12/30 s",
        "streams 8/8 producing",
        "433",
        "invalid",
        "KV cache 37 %",
        "CPU 23 %",
    ] {
        assert!(s.contains(want), "missing {want:?} in\n{s}");
    }
    insta::assert_snapshot!("dashboard_120x40", s);
}

#[test]
fn dashboard_small_terminal_falls_back_to_compact() {
    let t = render(50, 12, false);
    let s = screen_text(&t);
    assert!(s.contains("cell 5/6"), "{s}");
    insta::assert_snapshot!("dashboard_50x12", s);
}

#[test]
fn inline_view() {
    let t = render(100, INLINE_HEIGHT, true);
    insta::assert_snapshot!("inline_100x5", screen_text(&t));
}

#[test]
fn plain_lines_one_per_phase_change() {
    let mut p = PlainProgress::new();
    let lines: Vec<String> = script().iter().filter_map(|e| p.on_event(e)).collect();
    assert_eq!(
        lines,
        vec![
            // Cells 1-4 of the script have no phase events: nothing to print.
            // Cell 5: pace 1 (cells took their 34 s), so 34 s for it, cell 6 is skipped.
            "cell 5/6 C=8 ctx=16k scout (first prefill of the prompt) 0.0 s, run ETA 34 s".to_string(),
            "cell 5/6 C=8 ctx=16k ramp-up 0/8 streams producing, 0.0 s, times out at 60 s, run ETA 34 s".into(),
            "cell 5/6 C=8 ctx=16k readiness held 0.0/3.0 s, run ETA 31 s".into(),
            // Window: what is left of it plus the 1 s pause.
            "cell 5/6 C=8 ctx=16k window 0.0/30 s, run ETA 31 s".into(),
            // Heartbeat 10 s after the window opened.
            "cell 5/6 C=8 ctx=16k window 10/30 s (420 tok/s), run ETA 21 s".into(),
        ]
    );
}

#[test]
fn skipped_and_stopped_runs_read_plainly() {
    let mut d = state();
    d.apply(&finished(
        5,
        CellStatus::SkippedUser,
        None,
        "skipped by the user (key s in the live view)",
    ));
    d.stopping = true;
    let mut t = Terminal::new(TestBackend::new(120, 40)).expect("test terminal");
    t.draw(|f| draw(f, &d, &ViewInfo { elapsed_s: 260.0 }))
        .expect("draw");
    let s = screen_text(&t);
    assert!(s.contains("skip skipped by the user"), "{s}");
    assert!(s.contains("stopping"), "{s}");
    assert!(!s.contains("run ETA"), "{s}");
}
