//! `servebench registry serve DIR`: the read-only local-ai-registry/v1 API (`/api/v1/...`) and
//! server-rendered site pages over a registry directory.
//!
//! The directory is loaded once into an in-memory [`snapshot::Snapshot`] (reloaded on SIGHUP,
//! or when a record file changes with `--watch`); requests never read the file system and never
//! build a path from request data. Every response carries `Access-Control-Allow-Origin: *`,
//! `Cache-Control: public, max-age=300, stale-while-revalidate=3600`, `Vary: accept-encoding`
//! and, when 200, an ETag equal to the snapshot's content hash (`If-None-Match` → 304). Only GET
//! and HEAD are answered; anything else is 405 with a JSON error.
//!
//! Each 200 is prepared once per snapshot and request target ([`http::prepared`]); the home
//! page, the lists, the index and the facets are prepared before a reloaded snapshot is swapped
//! in. Site pages render on blocking threads, at most [`http::page_workers`] at once, so the API
//! keeps its latency while pages are busy. Connections are bounded by [`server::Limits`].
//!
//! Layout: [`collection`] (names and id grammars), [`snapshot`] (loading, indexes), [`http`]
//! (dispatch, prepared responses, one module per API resource, shared query/pagination/error
//! helpers), [`site`] (HTML pages and SVG charts), [`server`] (connections and their limits).

pub mod collection;
pub mod http;
pub mod server;
pub mod site;
pub mod snapshot;
pub mod testgen;
pub mod verdict;

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;

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
    /// Reload when a record file is added, removed or modified (inotify through `notify`).
    pub watch: bool,
    /// `watch` debounce: a reload starts once no file event has come for this long (and at the
    /// latest 10 times this long after the first event of a burst).
    pub watch_interval: Duration,
    /// `scheme://host[:port]` of absolute links; `None`: `http://<bound address>`.
    pub public_url: Option<String>,
    /// Connection limits.
    pub limits: server::Limits,
}

impl ServeOptions {
    /// Options for `dir` on 127.0.0.1:[`DEFAULT_PORT`], no watching, default limits.
    pub fn new(dir: impl Into<PathBuf>) -> ServeOptions {
        ServeOptions {
            dir: dir.into(),
            host: IpAddr::V4(Ipv4Addr::LOCALHOST),
            port: DEFAULT_PORT,
            watch: false,
            watch_interval: Duration::from_millis(300),
            public_url: None,
            limits: server::Limits::default(),
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
/// logged (`tracing`) and the previous snapshot stays; a file that fails to load keeps its
/// previous version ([`snapshot::load_keeping`]).
///
/// Errors: the registry does not load ([`LoadError`]), the address cannot be bound, or the
/// directory cannot be watched.
pub async fn start(
    opts: ServeOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<Running> {
    // The watcher starts before the load, so a change made while loading triggers a reload
    // rather than being missed.
    let watcher = if opts.watch {
        Some(watch(&opts.dir)?)
    } else {
        None
    };
    let snap = load(&opts.dir)?;
    let listener = tokio::net::TcpListener::bind((opts.host, opts.port))
        .await
        .with_context(|| format!("cannot bind {}:{}", opts.host, opts.port))?;
    let addr = listener.local_addr()?;
    let base = opts
        .public_url
        .clone()
        .unwrap_or_else(|| format!("http://{addr}"));
    let state = AppState::new(snap, base);
    {
        let state = state.clone();
        tokio::spawn(async move { http::warm(&state, state.current()).await });
    }
    spawn_reloaders(&opts, state.clone(), watcher);
    let app = router(state.clone());
    let limits = opts.limits;
    let task = tokio::spawn(server::serve(listener, app, limits, shutdown));
    Ok(Running { addr, state, task })
}

/// Reloads `dir` into `state`: loads (keeping the previous version of files that fail),
/// prepares the common responses of the new snapshot, then swaps it in.
pub async fn reload(dir: &std::path::Path, state: &Arc<AppState>, why: &str) {
    let prev = state.current();
    let d = dir.to_path_buf();
    let loaded = tokio::task::spawn_blocking(move || snapshot::load_keeping(&d, Some(&prev)))
        .await
        .map_err(|e| anyhow::anyhow!("{e}"));
    match loaded {
        Ok(Ok(s)) => {
            for k in &s.kept {
                tracing::warn!("reload ({why}): {k}");
            }
            let s = Arc::new(s);
            http::warm(state, s.clone()).await;
            tracing::info!(
                "reloaded ({why}): {} records, snapshot {}",
                s.total_records(),
                &s.hash[..12]
            );
            state.swap(s);
        }
        Ok(Err(e)) => {
            tracing::warn!("reload ({why}) failed, still serving the previous snapshot: {e}")
        }
        Err(e) => {
            tracing::warn!("reload ({why}) failed, still serving the previous snapshot: {e}")
        }
    }
}

/// File events under the registry root, one `()` per relevant event (not reads).
struct Watch {
    _watcher: notify::RecommendedWatcher,
    events: tokio::sync::mpsc::UnboundedReceiver<()>,
}

fn watch(dir: &std::path::Path) -> anyhow::Result<Watch> {
    use notify::Watcher as _;
    let root = snapshot::resolve_root(dir)?;
    let (tx, events) = tokio::sync::mpsc::unbounded_channel();
    let mut w = notify::recommended_watcher(move |ev: notify::Result<notify::Event>| {
        let relevant = match ev {
            Ok(e) => !matches!(e.kind, notify::EventKind::Access(_)),
            Err(_) => true,
        };
        if relevant {
            let _ = tx.send(());
        }
    })
    .with_context(|| format!("cannot watch {}", root.display()))?;
    w.watch(&root, notify::RecursiveMode::Recursive)
        .with_context(|| format!("cannot watch {}", root.display()))?;
    Ok(Watch {
        _watcher: w,
        events,
    })
}

fn spawn_reloaders(opts: &ServeOptions, state: Arc<AppState>, watcher: Option<Watch>) {
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
                reload(&dir, &state, "SIGHUP").await;
            }
        });
    }
    if let Some(w) = watcher {
        let dir = opts.dir.clone();
        let quiet = opts.watch_interval;
        tokio::spawn(async move {
            // The whole `Watch` moves here: dropping its watcher would end the events.
            let mut w = w;
            while w.events.recv().await.is_some() {
                // Debounce: wait for `quiet` without events (a writer in the middle of a file),
                // at most 10 × `quiet` in all.
                let deadline = tokio::time::Instant::now() + quiet * 10;
                loop {
                    let until = (tokio::time::Instant::now() + quiet).min(deadline);
                    match tokio::time::timeout_at(until, w.events.recv()).await {
                        Ok(Some(())) => continue,
                        Ok(None) => return,
                        Err(_) => break,
                    }
                }
                reload(&dir, &state, "files changed").await;
            }
        });
    }
}
