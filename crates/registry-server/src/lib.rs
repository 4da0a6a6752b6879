//! `servebench registry serve DIR`: the read-only local-ai-registry/v1 API (`/api/v1/...`) and
//! server-rendered site pages over a registry directory.
//!
//! The directory is loaded once into an in-memory [`snapshot::Snapshot`] (reloaded on SIGHUP,
//! or when a record file changes with `--watch`); requests never read the file system and never
//! build a path from request data. Every response carries `Access-Control-Allow-Origin: *`,
//! `Cache-Control: public, max-age=300, stale-while-revalidate=3600` and, when 200, an ETag equal
//! to the snapshot's content hash (`If-None-Match` → 304). Only GET and HEAD are answered;
//! anything else is 405 with a JSON error.
//!
//! Layout: [`collection`] (names and id grammars), [`snapshot`] (loading, indexes), [`http`]
//! (dispatch, one module per API resource, shared query/pagination/error helpers), [`site`]
//! (HTML pages and SVG charts).

pub mod collection;
pub mod http;
pub mod site;
pub mod snapshot;
pub mod testgen;
pub mod verdict;

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::Context as _;

use crate::collection::CollectionExt as _;

pub use http::{router, AppState};
pub use snapshot::{load, LoadError, Snapshot};

/// Default port of `servebench registry serve`.
pub const DEFAULT_PORT: u16 = 8787;

/// How `serve` runs.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// The registry directory (holding `hardware/`, `recipe/`, ..., or a `registry/` that does).
    pub dir: PathBuf,
    /// Address to bind; 127.0.0.1 unless the user asks otherwise.
    pub host: IpAddr,
    /// Port to bind (0: any free port).
    pub port: u16,
    /// Poll the record files every `watch_interval` and reload when one changes.
    pub watch: bool,
    /// Polling interval of `watch`.
    pub watch_interval: Duration,
}

impl ServeOptions {
    /// Options for `dir` on 127.0.0.1:[`DEFAULT_PORT`], no watching.
    pub fn new(dir: impl Into<PathBuf>) -> ServeOptions {
        ServeOptions {
            dir: dir.into(),
            host: IpAddr::V4(Ipv4Addr::LOCALHOST),
            port: DEFAULT_PORT,
            watch: false,
            watch_interval: Duration::from_secs(1),
        }
    }
}

/// A server that is listening.
pub struct Running {
    /// The bound address.
    pub addr: SocketAddr,
    /// The shared state (its snapshot is what requests read).
    pub state: Arc<AppState>,
    /// Finishes when the server stops (after `shutdown` resolves).
    pub task: tokio::task::JoinHandle<std::io::Result<()>>,
}

/// Loads `opts.dir`, binds, and serves until `shutdown` resolves. Reloads on SIGHUP (Unix) and,
/// with `opts.watch`, when a record file is added, removed or modified; a reload that fails is
/// logged to stderr and the previous snapshot stays.
///
/// Errors: the registry does not load ([`LoadError`]), or the address cannot be bound.
pub async fn start(
    opts: ServeOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<Running> {
    // The watcher's first fingerprint is taken before the load, so a change made while loading
    // triggers a reload rather than being missed.
    let first = if opts.watch {
        fingerprint(&opts.dir)
    } else {
        None
    };
    let snap = load(&opts.dir)?;
    let listener = tokio::net::TcpListener::bind((opts.host, opts.port))
        .await
        .with_context(|| format!("cannot bind {}:{}", opts.host, opts.port))?;
    let addr = listener.local_addr()?;
    let state = AppState::new(snap, addr.to_string());
    spawn_reloaders(&opts, state.clone(), first);
    let app = router(state.clone());
    let task = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(shutdown)
            .await
    });
    Ok(Running { addr, state, task })
}

fn reload(dir: &std::path::Path, state: &AppState, why: &str) {
    match load(dir) {
        Ok(s) => {
            eprintln!(
                "servebench registry serve: reloaded ({why}): {} records, snapshot {}",
                s.total_records(),
                &s.hash[..12]
            );
            state.replace(s);
        }
        Err(e) => eprintln!(
            "servebench registry serve: reload ({why}) failed, still serving the previous snapshot: {e}"
        ),
    }
}

/// A cheap fingerprint of the record files: names, sizes and modification times.
fn fingerprint(dir: &std::path::Path) -> Option<Vec<(String, u64, Option<SystemTime>)>> {
    let root = snapshot::resolve_root(dir).ok()?;
    let files = snapshot::record_files(&root).ok()?;
    Some(
        files
            .into_iter()
            .map(|(c, id, p)| {
                let m = std::fs::metadata(&p).ok();
                (
                    format!("{}/{id}", c.dir()),
                    m.as_ref().map_or(0, |m| m.len()),
                    m.and_then(|m| m.modified().ok()),
                )
            })
            .collect(),
    )
}

fn spawn_reloaders(
    opts: &ServeOptions,
    state: Arc<AppState>,
    first: Option<Vec<(String, u64, Option<SystemTime>)>>,
) {
    #[cfg(unix)]
    {
        let dir = opts.dir.clone();
        let state = state.clone();
        tokio::spawn(async move {
            use tokio::signal::unix::{signal, SignalKind};
            let Ok(mut hup) = signal(SignalKind::hangup()) else {
                return;
            };
            while hup.recv().await.is_some() {
                let (d, s) = (dir.clone(), state.clone());
                let _ = tokio::task::spawn_blocking(move || reload(&d, &s, "SIGHUP")).await;
            }
        });
    }
    if opts.watch {
        let dir = opts.dir.clone();
        let every = opts.watch_interval;
        tokio::spawn(async move {
            let mut last = first;
            loop {
                tokio::time::sleep(every).await;
                let d = dir.clone();
                let now = tokio::task::spawn_blocking(move || fingerprint(&d))
                    .await
                    .ok()
                    .flatten();
                if now.is_some() && now != last {
                    let (d, s) = (dir.clone(), state.clone());
                    let _ =
                        tokio::task::spawn_blocking(move || reload(&d, &s, "files changed")).await;
                    last = now;
                }
            }
        });
    }
}
