//! One session path for the commands that measure a target (`run`, `task`): the note about the
//! built-in simulator, Ctrl-C / SIGTERM / SIGHUP handling (with the cause recorded for the
//! runner's cell reasons), the event channel, the results file (a previous file kept as
//! NAME.1.json at the first write, then every write atomic through
//! [`crate::checkpoint::write_results`]) and the exit codes.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use servebench_core::events::{SkipControl, StopCause};
use servebench_core::{EventSink, RunEvent};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_util::sync::CancellationToken;

/// Exit code for bad flags or flag values (clap uses the same for flags it cannot parse).
pub const EXIT_USAGE: u8 = 2;
/// Exit code when some cells or requests failed (results are still written).
pub const EXIT_FAILED: u8 = 3;
/// Exit code after Ctrl-C, SIGTERM, SIGHUP or the live view's `q` (partial results written).
pub const EXIT_INTERRUPTED: u8 = 130;

/// A measuring command's session: the run's cancel token, its event sink and where the
/// results go.
pub struct Session {
    /// Fires on the first Ctrl-C / SIGTERM / SIGHUP (or the live view's `q`).
    pub cancel: CancellationToken,
    /// The runner's event sink (its skip control carries the stop cause).
    pub events: Arc<EventSink>,
    /// The results file (a previous one is kept at the first write).
    pub output: Arc<crate::checkpoint::OutputFile>,
}

impl Session {
    /// Starts a session writing to `output`: a file already there is kept as NAME.1.json (or
    /// the next free number) at the first write (a run that fails to start leaves it as it
    /// was); signal handlers are installed, and
    /// `what` (the action on the first signal, e.g. "writing partial results") is printed on
    /// the first signal unless `None` (a dashboard shows it). Returns the receiving end of the
    /// event channel.
    pub fn start(
        output: PathBuf,
        what: Option<&'static str>,
    ) -> (Session, UnboundedReceiver<RunEvent>) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<RunEvent>();
        let events = Arc::new(EventSink::new(Some(tx)));
        let cancel = CancellationToken::new();
        on_interrupt(cancel.clone(), events.skip_control(), what);
        (
            Session {
                cancel,
                events,
                output: Arc::new(crate::checkpoint::OutputFile::new(output)),
            },
            rx,
        )
    }
}

/// The exit code of a finished session: [`EXIT_INTERRUPTED`] when it was stopped, else
/// [`EXIT_FAILED`] when `failed` says what failed (printed on stderr), else success.
pub fn exit_code(interrupted: bool, failed: Option<String>) -> ExitCode {
    if interrupted {
        return ExitCode::from(EXIT_INTERRUPTED);
    }
    match failed {
        Some(what) => {
            let _ = writeln!(
                std::io::stderr(),
                "servebench: {what}; see the report and the JSON"
            );
            ExitCode::from(EXIT_FAILED)
        }
        None => ExitCode::SUCCESS,
    }
}

/// The line printed when no target was given and the built-in simulator is measured
/// (`what`: what is done with it, and where it runs).
pub fn announce_sim(what: &str) {
    let _ = writeln!(
        std::io::stderr(),
        "servebench: no --url/--host given; {what}"
    );
}

/// First signal: record its cause in `skip` and cancel `cancel` (saying `what` happens, when
/// given); a second Ctrl-C or SIGTERM: exit at once with [`EXIT_INTERRUPTED`] (a second SIGHUP
/// is ignored). SIGTERM (`timeout`, `docker
/// stop`, systemd, Slurm) and SIGHUP (the SSH session or terminal went away) are handled like
/// Ctrl-C. The messages go to stderr with errors ignored: after a hang-up the terminal is gone,
/// and a failed print must not stop the partial results.
pub fn on_interrupt(cancel: CancellationToken, skip: SkipControl, what: Option<&'static str>) {
    tokio::spawn(async move {
        if let Some(cause) = interrupt().await {
            skip.record_stop(cause);
            if let Some(what) = what {
                let _ = writeln!(
                    std::io::stderr(),
                    "\nservebench: interrupted ({}) — {what} (Ctrl-C again to abort)",
                    cause.words()
                );
            }
            cancel.cancel();
            // A hang-up comes more than once (the shell and the kernel both send it when a
            // terminal closes) and nobody is there to mean "abort": only a second Ctrl-C or
            // SIGTERM aborts.
            while let Some(again) = interrupt().await {
                if again != StopCause::Sighup {
                    servebench_tui::terminal::restore_terminal();
                    let _ = writeln!(std::io::stderr(), "servebench: aborted");
                    std::process::exit(EXIT_INTERRUPTED as i32);
                }
            }
        }
    });
}

/// Waits for Ctrl-C (SIGINT) or, on Unix, SIGTERM or SIGHUP (unless SIGHUP was ignored when
/// servebench started, as under `nohup`: then a hang-up does not stop the run); `None` when no
/// handler could be installed.
pub(crate) async fn interrupt() -> Option<StopCause> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            let mut hup = if sighup_ignored_at_start() {
                None
            } else {
                signal(SignalKind::hangup()).ok()
            };
            let hangup = async {
                match hup.as_mut() {
                    Some(h) => h.recv().await,
                    None => std::future::pending().await,
                }
            };
            return tokio::select! {
                r = tokio::signal::ctrl_c() => r.ok().map(|()| StopCause::CtrlC),
                r = term.recv() => r.map(|()| StopCause::Sigterm),
                r = hangup => r.map(|()| StopCause::Sighup),
            };
        }
    }
    tokio::signal::ctrl_c()
        .await
        .ok()
        .map(|()| StopCause::CtrlC)
}

/// Whether SIGHUP was ignored when the process started (`nohup servebench run ...`). Read once,
/// before any handler is installed (installing one replaces the disposition).
#[cfg(unix)]
pub fn sighup_ignored_at_start() -> bool {
    static IGNORED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *IGNORED.get_or_init(|| {
        // SAFETY: sigaction with a null new action only reads the current disposition into
        // `old`, a zeroed struct we own.
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            libc::sigaction(libc::SIGHUP, std::ptr::null(), &mut old) == 0
                && old.sa_sigaction == libc::SIG_IGN
        }
    })
}
