//! The live loop: on its own thread, drain the event channel, redraw at a fixed rate, read keys.
//! It never blocks the measurement (events are sent on an unbounded channel and drained here;
//! the runner never waits for the view). The terminal is restored on every way out: normal end,
//! error (a guard), panic (a hook) and a second Ctrl-C (restored before the exit). Keys are read
//! with poll(2)/read(2) rather than crossterm's reader, so that a terminal that goes away (end of
//! file, EIO, hang-up) stops the run instead of leaving the reader spinning.

use std::io::{self, Stdout, Write};
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::terminal::{
    disable_raw_mode, enable_raw_mode, EnterAlternateScreen, LeaveAlternateScreen,
};
use ratatui::crossterm::{cursor, execute};
use ratatui::text::Line;
use ratatui::widgets::{Paragraph, Widget};
use ratatui::{Terminal, TerminalOptions, Viewport};
use servebench_events::RunEvent;
use servebench_events::{SkipControl, StopCause};
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
///
/// When the terminal goes away (end of file, EIO or a hang-up on it: a killed tmux session, a
/// lost SSH link, a dead parent pty) the dashboard stops the run the way `q` does (recording
/// [`StopCause::TerminalLost`]), stops drawing and waits for the run's last event, so the
/// results are written with their final state even when no SIGHUP reached the process.
pub fn run(
    mode: Mode,
    mut rx: UnboundedReceiver<RunEvent>,
    controls: Controls,
) -> io::Result<Dashboard> {
    let mut input = Input::open()?;
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
        let info = ViewInfo {
            elapsed_s: started.elapsed().as_secs_f64(),
        };
        let drawn = new_lines
            .iter()
            .try_for_each(|l| {
                let l = l.clone();
                term.insert_before(1, |buf| {
                    Paragraph::new(Line::raw(l)).render(buf.area, buf);
                })
            })
            .and_then(|()| {
                term.draw(|f| match mode {
                    Mode::Screen => draw(f, &d, &info),
                    Mode::Inline => draw_compact(f, &d, &info),
                })
                .map(drop)
            });
        if let Err(e) = drawn {
            terminal_lost(&controls, &mut rx, &mut d);
            return Err(e);
        }
        if closed {
            break;
        }
        // Keys until the next frame.
        let next = Instant::now() + FRAME;
        loop {
            let left = next.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let keys = match input.wait(left) {
                Read::Nothing => continue,
                Read::Keys(k) => k,
                Read::Lost(why) => {
                    d.note = Some(format!("the terminal went away ({why})"));
                    terminal_lost(&controls, &mut rx, &mut d);
                    return Ok(d);
                }
            };
            for k in keys {
                match k {
                    Key::CtrlC => {
                        ctrl_c += 1;
                        if ctrl_c >= 2 {
                            restore_terminal();
                            let _ = writeln!(io::stderr(), "servebench: aborted");
                            std::process::exit(EXIT_ABORTED);
                        }
                        controls.skip.record_stop(StopCause::CtrlC);
                        controls.stop.cancel();
                    }
                    Key::Quit => {
                        controls.skip.record_stop(StopCause::QuitKey);
                        controls.stop.cancel();
                    }
                    Key::Skip => {
                        d.note = Some(if d.stopping {
                            "the run is stopping".into()
                        } else if controls.skip.skip_current() {
                            "skipping the current cell".into()
                        } else {
                            "no cell is running: nothing to skip".into()
                        });
                    }
                }
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

/// The terminal is gone: stop the run as `q` does (the cause recorded as
/// [`StopCause::TerminalLost`] unless a signal came first), put back what can be put back, and
/// take the run's remaining events without drawing until the channel closes (the run is over,
/// its results written by the caller).
fn terminal_lost(controls: &Controls, rx: &mut UnboundedReceiver<RunEvent>, d: &mut Dashboard) {
    controls.skip.record_stop(StopCause::TerminalLost);
    controls.stop.cancel();
    restore_terminal();
    while let Some(ev) = rx.blocking_recv() {
        d.apply(&ev);
    }
    d.ended = true;
}

/// A key the dashboard acts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Key {
    /// `q` or `Q`: stop the run and keep the results.
    Quit,
    /// `s` or `S`: skip the running cell.
    Skip,
    /// Ctrl-C (byte 0x03 in raw mode): like `q`; a second one aborts.
    CtrlC,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Esc {
    #[default]
    None,
    /// After ESC.
    Start,
    /// Inside `ESC [ …` until its final byte (0x40..=0x7E).
    Csi,
    /// After `ESC O`: one more byte.
    Ss3,
}

/// Raw-mode terminal bytes to [`Key`]s. Escape sequences (arrow and function keys `ESC [ … final`,
/// `ESC O x`, Alt+key `ESC x`) are skipped whole, also when split across reads, so their bytes
/// never read as `q` or `s`. Pure: bytes in, keys out.
#[derive(Clone, Debug, Default)]
pub struct KeyParser {
    esc: Esc,
}

impl KeyParser {
    /// The keys in `bytes` (the next bytes read from the terminal), in order.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<Key> {
        let mut keys = Vec::new();
        for &b in bytes {
            self.esc = match (self.esc, b) {
                (_, 0x1b) => Esc::Start,
                (Esc::Start, b'[') => Esc::Csi,
                (Esc::Start, b'O') => Esc::Ss3,
                (Esc::Start | Esc::Ss3, _) => Esc::None,
                (Esc::Csi, 0x40..=0x7e) => Esc::None,
                (Esc::Csi, _) => Esc::Csi,
                (Esc::None, _) => {
                    match b {
                        b'q' | b'Q' => keys.push(Key::Quit),
                        b's' | b'S' => keys.push(Key::Skip),
                        0x03 => keys.push(Key::CtrlC),
                        _ => {}
                    }
                    Esc::None
                }
            };
        }
        keys
    }
}

/// What waiting for keys gave.
enum Read {
    /// Nothing arrived in time (or the wait was interrupted).
    Nothing,
    /// Keys (possibly none, for bytes the dashboard ignores).
    Keys(Vec<Key>),
    /// The terminal is gone; why, in words.
    Lost(String),
}

/// The dashboard's keyboard: the terminal crossterm would read (stdin when it is a terminal,
/// else `/dev/tty`), read with poll(2)/read(2) so that end of file, EIO and a hang-up end the
/// wait instead of spinning (crossterm 0.28's reader loops forever on them).
#[cfg(unix)]
struct Input {
    fd: std::os::fd::RawFd,
    _tty: Option<std::fs::File>,
    parser: KeyParser,
}

#[cfg(unix)]
impl Input {
    fn open() -> io::Result<Input> {
        use std::os::fd::AsRawFd;
        // SAFETY: isatty only inspects the descriptor.
        if unsafe { libc::isatty(0) } == 1 {
            return Ok(Input {
                fd: 0,
                _tty: None,
                parser: KeyParser::default(),
            });
        }
        let tty = std::fs::File::open("/dev/tty")?;
        Ok(Input {
            fd: tty.as_raw_fd(),
            _tty: Some(tty),
            parser: KeyParser::default(),
        })
    }

    /// Waits up to `timeout` for input.
    fn wait(&mut self, timeout: Duration) -> Read {
        let mut p = libc::pollfd {
            fd: self.fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as libc::c_int;
        // SAFETY: one pollfd we own, count 1.
        let rc = unsafe { libc::poll(&mut p, 1, ms) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted {
                Read::Nothing
            } else {
                Read::Lost(format!("poll on the terminal failed: {e}"))
            };
        }
        if rc == 0 {
            return Read::Nothing;
        }
        if p.revents & (libc::POLLERR | libc::POLLNVAL) != 0 {
            return Read::Lost("error on the terminal".into());
        }
        if p.revents & libc::POLLIN == 0 {
            // POLLHUP without data left to read.
            return Read::Lost("the terminal hung up".into());
        }
        let mut buf = [0u8; 1024];
        // SAFETY: reads at most buf.len() bytes into buf.
        let n = unsafe { libc::read(self.fd, buf.as_mut_ptr().cast(), buf.len()) };
        match n {
            0 => Read::Lost("end of file on the terminal".into()),
            n if n < 0 => {
                let e = io::Error::last_os_error();
                match e.kind() {
                    io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock => Read::Nothing,
                    _ => Read::Lost(format!("reading the terminal failed: {e}")),
                }
            }
            n => Read::Keys(self.parser.feed(&buf[..n as usize])),
        }
    }
}

/// Elsewhere: crossterm's event reader.
#[cfg(not(unix))]
struct Input;

#[cfg(not(unix))]
impl Input {
    fn open() -> io::Result<Input> {
        Ok(Input)
    }

    fn wait(&mut self, timeout: Duration) -> Read {
        match event::poll(timeout).and_then(|ready| ready.then(event::read).transpose()) {
            Ok(None) => Read::Nothing,
            Err(e) => Read::Lost(e.to_string()),
            Ok(Some(Event::Key(k))) if k.kind == KeyEventKind::Press => {
                let ctrl = k.modifiers.contains(KeyModifiers::CONTROL);
                Read::Keys(match k.code {
                    KeyCode::Char('c') if ctrl => vec![Key::CtrlC],
                    KeyCode::Char('q') | KeyCode::Char('Q') => vec![Key::Quit],
                    KeyCode::Char('s') | KeyCode::Char('S') => vec![Key::Skip],
                    _ => vec![],
                })
            }
            Ok(Some(_)) => Read::Keys(vec![]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_from_bytes() {
        let mut p = KeyParser::default();
        assert_eq!(p.feed(b"xq"), vec![Key::Quit]);
        assert_eq!(p.feed(b"S\x03"), vec![Key::Skip, Key::CtrlC]);
        // Arrow keys, F5 and Alt+q carry no key; a sequence split across reads neither.
        assert_eq!(p.feed(b"\x1b[A\x1bOQ\x1b[15~\x1bq"), vec![]);
        assert_eq!(p.feed(b"\x1b[1;5"), vec![]);
        assert_eq!(p.feed(b"~q"), vec![Key::Quit]);
    }
}
