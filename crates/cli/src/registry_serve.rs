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
    /// Reload when a record file is added, removed or changed (polled every second). Without
    /// it, send SIGHUP to reload.
    #[arg(long)]
    pub watch: bool,
}

/// Loads the registry, serves it until Ctrl-C or SIGTERM.
pub fn cmd_serve(a: ServeArgs) -> anyhow::Result<ExitCode> {
    let opts = ServeOptions {
        dir: a.dir.clone(),
        host: a.host,
        port: a.port,
        watch: a.watch,
        watch_interval: Duration::from_secs(1),
    };
    tokio::task::block_in_place(|| {
        tokio::runtime::Handle::current().block_on(async move {
            let running = match servebench_registry_server::start(opts, async {
                crate::session::interrupt().await;
            })
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
                snap.root.display(),
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
            drop(snap);
            running.task.await??;
            Ok(ExitCode::SUCCESS)
        })
    })
}
