//! The live view of `servebench run`: the ratatui dashboard (`--display screen|inline`) or plain
//! lines on stderr (`--display plain`: the event log as it happens, one progress line per phase
//! change, and on a terminal a status line redrawn in place). It only shows what the runner
//! sends on the event channel.

use std::io::{IsTerminal, Write};

use servebench_core::events::{CellProgress, Phase, SkipControl};
use servebench_core::RunEvent;
use servebench_results::format_context;
use servebench_tui::terminal::{self, Controls, Mode};
use servebench_tui::PlainProgress;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_util::sync::CancellationToken;

use crate::args::DisplayArg;

/// The view a run gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Display {
    /// The dashboard in `Mode`.
    Dashboard(Mode),
    /// Plain lines (`quiet`: none at all).
    Plain {
        /// `-q`: only the final report.
        quiet: bool,
    },
}

/// Picks the view: plain with `-q`, when stdout is not a terminal, or (unless asked for
/// explicitly) when `CI` is set; otherwise the requested one (default: screen). Returns a note
/// to print when a requested dashboard cannot be had.
pub fn choose(display: Option<DisplayArg>, quiet: bool) -> (Display, Option<String>) {
    if quiet {
        return (Display::Plain { quiet: true }, None);
    }
    let ci = std::env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "0" && v != "false");
    let mode = match display {
        Some(DisplayArg::Plain) => return (Display::Plain { quiet: false }, None),
        Some(DisplayArg::Screen) => Mode::Screen,
        Some(DisplayArg::Inline) => Mode::Inline,
        None if ci => return (Display::Plain { quiet: false }, None),
        None => Mode::Screen,
    };
    let plain = (Display::Plain { quiet: false }, None);
    if !std::io::stdout().is_terminal() {
        return match display {
            Some(_) => (
                plain.0,
                Some("--display needs a terminal on stdout; showing plain progress lines".into()),
            ),
            None => plain,
        };
    }
    if !terminal::terminal_usable() {
        return (
            plain.0,
            Some("the terminal cannot be put in raw mode; showing plain progress lines".into()),
        );
    }
    (Display::Dashboard(mode), None)
}

/// A running live view.
pub enum Live {
    /// The dashboard thread.
    Dashboard(std::thread::JoinHandle<std::io::Result<()>>),
    /// The plain printer task.
    Plain(tokio::task::JoinHandle<()>),
}

/// Starts the view on `rx`. `stop` is the run's cancel token (key `q`), `skip` the runner's skip
/// control (key `s`).
pub fn start(
    display: Display,
    rx: UnboundedReceiver<RunEvent>,
    stop: CancellationToken,
    skip: SkipControl,
) -> Live {
    match display {
        Display::Dashboard(mode) => Live::Dashboard(std::thread::spawn(move || {
            terminal::run(mode, rx, Controls { stop, skip }).map(drop)
        })),
        Display::Plain { quiet } => Live::Plain(tokio::spawn(print_events(rx, quiet))),
    }
}

impl Live {
    /// Waits until the view has shown the last event (the channel closed) and, for the
    /// dashboard, the terminal is restored. A dashboard error is printed as one line.
    pub async fn finish(self) {
        match self {
            Live::Plain(h) => {
                let _ = h.await;
            }
            Live::Dashboard(h) => {
                let r = tokio::task::spawn_blocking(move || h.join()).await;
                terminal::restore_terminal();
                // Not eprintln!: after a lost terminal stderr may fail (EIO), and a panic here
                // would lose the final results write.
                let mut err = std::io::stderr();
                let _ = match r {
                    Ok(Ok(Ok(()))) => Ok(()),
                    Ok(Ok(Err(e))) => writeln!(err, "servebench: the live dashboard failed: {e}"),
                    _ => writeln!(err, "servebench: the live dashboard stopped unexpectedly"),
                };
            }
        }
    }
}

fn status_line(p: &CellProgress, index: usize, total: usize) -> String {
    let phase = match p.phase {
        Phase::Scout => "scout (prefill)".to_string(),
        Phase::RampUp | Phase::Readiness => format!(
            "{}: {}/{} streams producing",
            p.phase.label(),
            p.active_streams,
            p.concurrency
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

/// Plain view: consumes run events until the channel closes.
pub async fn print_events(mut rx: UnboundedReceiver<RunEvent>, quiet: bool) {
    let tty = std::io::stderr().is_terminal();
    let mut index = 0usize;
    let mut total = 0usize;
    let mut status_shown = false;
    let mut progress = PlainProgress::new();
    while let Some(ev) = rx.recv().await {
        if quiet {
            continue;
        }
        let line = progress.on_event(&ev);
        let mut err = std::io::stderr().lock();
        let clear = |err: &mut std::io::StderrLock<'_>, shown: &mut bool| {
            if *shown {
                let _ = write!(err, "\r\x1b[2K");
                *shown = false;
            }
        };
        if let Some(line) = line {
            clear(&mut err, &mut status_shown);
            let _ = writeln!(err, "{line}");
        }
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
            RunEvent::Progress(p) if tty => {
                clear(&mut err, &mut status_shown);
                let _ = write!(err, "{}", status_line(&p, index, total));
                status_shown = true;
            }
            _ => {}
        }
        let _ = err.flush();
    }
    if status_shown {
        let _ = write!(std::io::stderr(), "\r\x1b[2K");
    }
}
