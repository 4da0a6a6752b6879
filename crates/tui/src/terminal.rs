//! The live loop: on its own thread, drain the event channel, redraw at a fixed rate, read keys.
//! It never blocks the measurement (events are sent on an unbounded channel and drained here;
//! the runner never waits for the view). The terminal is restored on every way out: normal end,
//! error (a guard), panic (a hook) and a second Ctrl-C (restored before the exit).

use std::io::{self, Stdout, Write};
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::crossterm::terminal::{
    disable_raw_mode, enable_raw_mode, EnterAlternateScreen, LeaveAlternateScreen,
};
use ratatui::crossterm::{cursor, execute};
use ratatui::text::Line;
use ratatui::widgets::{Paragraph, Widget};
use ratatui::{Terminal, TerminalOptions, Viewport};
use servebench_core::events::{SkipControl, StopCause};
use servebench_core::RunEvent;
use tokio::sync::mpsc::error::TryRecvError;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_util::sync::CancellationToken;

use crate::state::Dashboard;
use crate::view::{draw, draw_compact, ViewInfo, INLINE_HEIGHT};

/// Redraw period.
pub const FRAME: Duration = Duration::from_millis(200);

/// Exit code after a second Ctrl-C (same as the CLI's).
const EXIT_ABORTED: i32 = 130;

/// How the dashboard uses the terminal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The alternate screen, full layout.
    Screen,
    /// A few lines at the bottom of the normal screen; event-log lines scroll above them.
    Inline,
}

/// What the keys act on.
#[derive(Clone, Debug)]
pub struct Controls {
    /// `q` / Ctrl-C: stop the run and write partial results (the run's cancel token).
    pub stop: CancellationToken,
    /// `s`: skip the running cell.
    pub skip: SkipControl,
}

/// 0 = nothing to restore, 1 = raw mode (inline), 2 = raw mode and alternate screen.
static ACTIVE: AtomicU8 = AtomicU8::new(0);

/// Puts the terminal back (raw mode off, main screen, cursor shown). Safe to call twice.
pub fn restore_terminal() {
    let was = ACTIVE.swap(0, Ordering::SeqCst);
    if was == 0 {
        return;
    }
    let _ = disable_raw_mode();
    let mut out = io::stdout();
    if was == 2 {
        let _ = execute!(out, LeaveAlternateScreen);
    }
    let _ = execute!(out, cursor::Show);
    let _ = out.flush();
}

/// Restores the terminal when dropped (errors and early returns).
struct Guard;

impl Drop for Guard {
    fn drop(&mut self) {
        restore_terminal();
    }
}

fn install_panic_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore_terminal();
            prev(info);
        }));
    });
}

/// Sets the terminal up for `mode`. Errors (no terminal, raw mode refused) leave it untouched.
fn setup(mode: Mode) -> io::Result<(Terminal<CrosstermBackend<Stdout>>, Guard)> {
    install_panic_hook();
    enable_raw_mode()?;
    ACTIVE.store(1, Ordering::SeqCst);
    let guard = Guard;
    let mut out = io::stdout();
    let term = match mode {
        Mode::Screen => {
            execute!(out, EnterAlternateScreen, cursor::Hide)?;
            ACTIVE.store(2, Ordering::SeqCst);
            Terminal::new(CrosstermBackend::new(out))?
        }
        Mode::Inline => {
            execute!(out, cursor::Hide)?;
            Terminal::with_options(
                CrosstermBackend::new(out),
                TerminalOptions {
                    viewport: Viewport::Inline(INLINE_HEIGHT),
                },
            )?
        }
    };
    Ok((term, guard))
}

/// Whether the dashboard can take the terminal (raw mode works); checked before the run so a
/// failure falls back to plain lines.
pub fn terminal_usable() -> bool {
    match enable_raw_mode() {
        Ok(()) => disable_raw_mode().is_ok(),
        Err(_) => false,
    }
}

/// Runs the dashboard until the channel closes (the run is over). Blocking: call it on its own
/// thread. On return the terminal is restored. Returns the final state.
pub fn run(
    mode: Mode,
    mut rx: UnboundedReceiver<RunEvent>,
    controls: Controls,
) -> io::Result<Dashboard> {
    let (mut term, _guard) = setup(mode)?;
    let started = Instant::now();
    let mut d = Dashboard::default();
    let mut ctrl_c = 0u32;
    loop {
        let mut closed = false;
        let mut new_lines: Vec<String> = Vec::new();
        loop {
            match rx.try_recv() {
                Ok(ev) => {
                    if let (Mode::Inline, RunEvent::Log { time, message }) = (mode, &ev) {
                        new_lines.push(format!("{time} {message}"));
                    }
                    d.apply(&ev);
                }
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    closed = true;
                    break;
                }
            }
        }
        d.ended = closed;
        if controls.stop.is_cancelled() && !d.stopping {
            d.stopping = true;
            d.note = Some(
                "stopping: the current cell ends as skipped; partial results are written".into(),
            );
        }
        for l in &new_lines {
            let l = l.clone();
            term.insert_before(1, |buf| {
                Paragraph::new(Line::raw(l)).render(buf.area, buf);
            })?;
        }
        let info = ViewInfo {
            elapsed_s: started.elapsed().as_secs_f64(),
        };
        term.draw(|f| match mode {
            Mode::Screen => draw(f, &d, &info),
            Mode::Inline => draw_compact(f, &d, &info),
        })?;
        if closed {
            break;
        }
        // Keys until the next frame.
        let next = Instant::now() + FRAME;
        loop {
            let left = next.saturating_duration_since(Instant::now());
            if left.is_zero() || !event::poll(left)? {
                break;
            }
            let Event::Key(k) = event::read()? else {
                continue;
            };
            if k.kind != KeyEventKind::Press {
                continue;
            }
            let ctrl_c_key =
                k.code == KeyCode::Char('c') && k.modifiers.contains(KeyModifiers::CONTROL);
            match k.code {
                _ if ctrl_c_key => {
                    ctrl_c += 1;
                    if ctrl_c >= 2 {
                        restore_terminal();
                        eprintln!("servebench: aborted");
                        std::process::exit(EXIT_ABORTED);
                    }
                    controls.skip.record_stop(StopCause::CtrlC);
                    controls.stop.cancel();
                }
                KeyCode::Char('q') | KeyCode::Char('Q') => {
                    controls.skip.record_stop(StopCause::QuitKey);
                    controls.stop.cancel();
                }
                KeyCode::Char('s') | KeyCode::Char('S') => {
                    d.note = Some(if d.stopping {
                        "the run is stopping".into()
                    } else if controls.skip.skip_current() {
                        "skipping the current cell".into()
                    } else {
                        "no cell is running: nothing to skip".into()
                    });
                }
                _ => {}
            }
        }
    }
    if mode == Mode::Inline {
        // Leave the last frame on screen and put the cursor below it.
        let a = term.get_frame().area();
        let _ = term.set_cursor_position((0, a.bottom().saturating_sub(1)));
        let _ = write!(term.backend_mut(), "\r\n");
        let _ = term.backend_mut().flush();
    }
    drop(term);
    restore_terminal();
    Ok(d)
}
