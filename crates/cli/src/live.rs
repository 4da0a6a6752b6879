//! Plain live view on stderr: event-log lines as they happen, plus a one-line status of the
//! running cell that is redrawn in place on a terminal. It only formats what the runner sends.

use std::io::{IsTerminal, Write};

use servebench_core::events::{CellProgress, Phase};
use servebench_core::RunEvent;
use servebench_results::format_context;
use tokio::sync::mpsc::UnboundedReceiver;

fn status_line(p: &CellProgress, index: usize, total: usize) -> String {
    let phase = match p.phase {
        Phase::Scout => "scout (prefill)".to_string(),
        Phase::RampUp => format!(
            "ramp-up: {}/{} streams producing",
            p.active_streams, p.concurrency
        ),
        Phase::Measuring => format!(
            "measuring {:.0}/{:.0}s",
            p.window_elapsed_s.unwrap_or(0.0).min(p.window_s),
            p.window_s
        ),
    };
    let tps = p
        .live_tps
        .map(|v| format!("  {v:.0} tok/s"))
        .unwrap_or_default();
    let which = if p.warmup {
        "warmup".to_string()
    } else {
        format!("{index}/{total}")
    };
    format!(
        "[{which}] C={} ctx={}  {phase}{tps}",
        p.concurrency,
        format_context(p.context)
    )
}

/// Consumes run events until the channel closes.
pub async fn print_events(mut rx: UnboundedReceiver<RunEvent>, quiet: bool) {
    let tty = std::io::stderr().is_terminal();
    let mut index = 0usize;
    let mut total = 0usize;
    let mut status_shown = false;
    while let Some(ev) = rx.recv().await {
        if quiet {
            continue;
        }
        let mut err = std::io::stderr().lock();
        let clear = |err: &mut std::io::StderrLock<'_>, shown: &mut bool| {
            if *shown {
                let _ = write!(err, "\r\x1b[2K");
                *shown = false;
            }
        };
        match ev {
            RunEvent::Log { time, message } => {
                clear(&mut err, &mut status_shown);
                let _ = writeln!(err, "{time} {message}");
            }
            RunEvent::CellStarted {
                index: i, total: t, ..
            } => {
                if i > 0 {
                    index = i;
                }
                total = t;
            }
            RunEvent::Progress(p) => {
                if tty {
                    clear(&mut err, &mut status_shown);
                    let _ = write!(err, "{}", status_line(&p, index, total));
                    status_shown = true;
                }
            }
            RunEvent::CellFinished { .. } | RunEvent::Prefill { .. } => {}
        }
        let _ = err.flush();
    }
    if status_shown {
        let _ = write!(std::io::stderr(), "\r\x1b[2K");
    }
}
