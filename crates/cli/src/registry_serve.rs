//! `servebench registry serve DIR`: flags and printing around
//! [`servebench_registry_server::start`].

use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use servebench_registry_server::{LoadError, ServeOptions, DEFAULT_PORT};

/// `servebench registry serve` flags.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Registry root (holds hardware/, model/, model-instance/, recipe/, speed-sweep/, directly
    /// or under registry/).
    pub dir: PathBuf,
    /// Address to bind. The default serves this machine only; give 0.0.0.0 to serve others.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: IpAddr,
    /// Port to bind (0: any free port, printed at start).
    #[arg(long, default_value_t = DEFAULT_PORT)]
    pub port: u16,
    /// Reload when a record file is added, removed or changed (inotify; a burst of changes is
    /// one reload, 300 ms after the last). SIGHUP reloads with or without it.
    #[arg(long)]
    pub watch: bool,
    /// Public base URL of absolute links in API responses (e.g. https://registry.example.org);
    /// default http://HOST:PORT as bound. The request's Host header is never used.
    #[arg(long, value_name = "URL")]
    pub public_url: Option<String>,
    /// Seconds a client may take to send a request's headers before its connection closes.
    #[arg(long, value_name = "S", default_value_t = 10.0)]
    pub header_timeout: f64,
    /// Seconds an idle keep-alive connection stays open.
    #[arg(long, value_name = "S", default_value_t = 30.0)]
    pub idle_timeout: f64,
    /// Most open connections (default: 3/4 of the open-file limit minus 64). At the limit the
    /// longest-idle connection is closed for a new one.
    #[arg(long, value_name = "N")]
    pub max_connections: Option<usize>,
}

fn seconds(flag: &str, s: f64) -> anyhow::Result<Duration> {
    if !(s.is_finite() && s > 0.0 && s <= 86_400.0) {
        return Err(crate::args::usage(anyhow::anyhow!(
            "{flag} must be a number of seconds in (0, 86400], got {s}"
        )));
    }
    Ok(Duration::from_secs_f64(s))
}

/// Ctrl-C or SIGTERM (not SIGHUP, which reloads).
async fn stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

/// Loads the registry, serves it until Ctrl-C or SIGTERM; SIGHUP reloads. Logs (reloads,
/// refused connections) go to stderr through `tracing` (`RUST_LOG` filters; default `info`).
pub fn cmd_serve(a: ServeArgs) -> anyhow::Result<ExitCode> {
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        // colours only on a terminal: a log file or journald gets plain text
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .try_init();
    if let Some(u) = &a.public_url {
        if !(u.starts_with("http://") || u.starts_with("https://")) || u.len() > 200 {
            return Err(crate::args::usage(anyhow::anyhow!(
                "--public-url must be an http:// or https:// URL (at most 200 bytes), got {u:?}"
            )));
        }
    }
    if a.max_connections == Some(0) {
        return Err(crate::args::usage(anyhow::anyhow!(
            "--max-connections must be at least 1"
        )));
    }
    let limits = servebench_registry_server::server::Limits {
        header_read_timeout: seconds("--header-timeout", a.header_timeout)?,
        idle_timeout: seconds("--idle-timeout", a.idle_timeout)?,
        max_connections: a
            .max_connections
            .unwrap_or_else(servebench_registry_server::server::default_max_connections),
    };
    let opts = ServeOptions {
        dir: a.dir.clone(),
        host: a.host,
        port: a.port,
        watch: a.watch,
        watch_interval: Duration::from_millis(300),
        public_url: a.public_url.clone(),
        limits,
    };
    tokio::task::block_in_place(|| {
        tokio::runtime::Handle::current().block_on(async move {
            let running = match servebench_registry_server::start(opts, stop_signal())
            .await
            {
                Ok(r) => r,
                Err(e) if e.downcast_ref::<LoadError>().is_some() => {
                    return Err(crate::args::usage(e))
                }
                Err(e) => return Err(e),
            };
            let snap = running.state.current();
            for p in &snap.problems {
                eprintln!("warning: {p}");
            }
            let base = format!("http://{}", running.addr);
            eprintln!(
                "servebench registry serve: {} records from {} (snapshot {}, loaded in {:.0} ms)",
                snap.total_records(),
                crate::shown(&snap.root),
                &snap.hash[..12],
                snap.loaded_in.as_secs_f64() * 1000.0
            );
            if !a.host.is_loopback() {
                eprintln!(
                    "servebench registry serve: bound to {} — reachable from other machines",
                    a.host
                );
            }
            eprintln!(
                "servebench registry serve: site {base}/  API {base}/api/v1  ({}; Ctrl-C stops)",
                if a.watch {
                    "reloads on file changes and SIGHUP"
                } else {
                    "SIGHUP reloads"
                }
            );
            eprintln!(
                "servebench registry serve: limits: headers within {} s, idle connections closed after {} s, at most {} connections",
                limits.header_read_timeout.as_secs_f64(),
                limits.idle_timeout.as_secs_f64(),
                limits.max_connections
            );
            drop(snap);
            running.task.await??;
            Ok(ExitCode::SUCCESS)
        })
    })
}
