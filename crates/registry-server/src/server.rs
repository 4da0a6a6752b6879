//! The connection loop of `registry serve`: HTTP/1.1 over hyper with the limits that keep the
//! server answering under hostile or careless clients (issue 17 item 8, issue 25 item 4):
//!
//! - a **header-read timeout**: a request whose head has not fully arrived within
//!   [`Limits::header_read_timeout`] closes its connection (hyper's own timer);
//! - an **idle timeout**: a connection with no request in flight and no byte read or written for
//!   [`Limits::idle_timeout`] is closed;
//! - a **connection cap** ([`Limits::max_connections`], by default below the soft
//!   `RLIMIT_NOFILE`): at the cap, a new connection evicts the connection that has been idle the
//!   longest (no request in flight); when every connection is busy the new one is refused
//!   (closed at once). Refusals, evictions and `accept` errors (EMFILE) are logged with
//!   `tracing` at most once a second, with counts.
//!
//! Shutdown: when the `shutdown` future resolves the listener closes, idle connections close and
//! busy ones finish their response (at most [`SHUTDOWN_GRACE`]).

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tower::ServiceExt as _;

/// How long busy connections may take to finish after shutdown begins.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Connection limits. See the module documentation.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Longest time a request head may take to arrive, from its first poll (s).
    pub header_read_timeout: Duration,
    /// Longest time a connection may sit with no request in flight and no byte moved (s).
    pub idle_timeout: Duration,
    /// Most open client connections; see [`default_max_connections`].
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(30),
            max_connections: default_max_connections(),
        }
    }
}

/// The default connection cap: 3/4 of the soft `RLIMIT_NOFILE` minus 64 descriptors for the
/// listener, record files read by reloads, inotify and the runtime; at least 16, at most 10,000.
/// (A 1,024-descriptor limit gives 704.)
pub fn default_max_connections() -> usize {
    let soft = nofile_soft_limit().unwrap_or(1024);
    (soft.saturating_mul(3) / 4)
        .saturating_sub(64)
        .clamp(16, 10_000) as usize
}

fn nofile_soft_limit() -> Option<u64> {
    #[cfg(unix)]
    {
        let mut r = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes into the struct we pass and has no other effect.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } == 0 {
            // `rlim_t` is u64 on Linux but not on every Unix.
            #[allow(clippy::unnecessary_cast)]
            return Some(r.rlim_cur as u64);
        }
    }
    None
}

/// Milliseconds since the first call (a monotonic clock shared by all connections).
fn now_ms() -> u64 {
    static T0: OnceLock<Instant> = OnceLock::new();
    T0.get_or_init(Instant::now).elapsed().as_millis() as u64
}

/// What the accept loop knows about one connection.
#[derive(Debug)]
struct Conn {
    /// [`now_ms`] of the last byte read or written (or of the accept).
    last_activity: AtomicU64,
    /// Requests whose response head is not yet produced.
    in_flight: AtomicUsize,
    /// Tells the connection task to close now (eviction).
    evict: tokio::sync::Notify,
}

impl Conn {
    fn touch(&self) {
        self.last_activity.store(now_ms(), Ordering::Relaxed);
    }
}

/// A TCP stream that records activity on its [`Conn`].
struct Tracked {
    inner: TcpStream,
    conn: Arc<Conn>,
}

impl AsyncRead for Tracked {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.conn.touch();
        }
        r
    }
}

impl AsyncWrite for Tracked {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.conn.touch();
        }
        r
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.conn.touch();
        }
        r
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Decrements a connection's in-flight count when dropped.
struct InFlight(Arc<Conn>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
        self.0.touch();
    }
}

/// Counts of refused/evicted connections and accept errors, logged at most once a second.
#[derive(Default)]
struct RefusalLog {
    last: Option<Instant>,
    refused: u64,
    evicted: u64,
    accept_errors: u64,
    last_error: String,
}

impl RefusalLog {
    fn flush(&mut self, open: usize, limit: usize, force: bool) {
        let due = force
            || self
                .last
                .is_none_or(|t| t.elapsed() >= Duration::from_secs(1));
        if !due || (self.refused == 0 && self.evicted == 0 && self.accept_errors == 0) {
            return;
        }
        if self.refused > 0 || self.evicted > 0 {
            tracing::warn!(
                refused = self.refused,
                evicted_idle = self.evicted,
                open,
                limit,
                "connection limit reached: closed the longest-idle connections and refused new ones while every connection was busy"
            );
        }
        if self.accept_errors > 0 {
            tracing::warn!(
                errors = self.accept_errors,
                last = %self.last_error,
                open,
                "accept failed (out of file descriptors?); retrying"
            );
        }
        *self = RefusalLog {
            last: Some(Instant::now()),
            ..RefusalLog::default()
        };
    }
}

/// Serves `app` on `listener` with `limits` until `shutdown` resolves.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let conns: Arc<Mutex<HashMap<u64, Arc<Conn>>>> = Arc::default();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut tasks = tokio::task::JoinSet::new();
    let mut log = RefusalLog::default();
    let mut next_id = 0u64;
    tokio::pin!(shutdown);
    loop {
        while tasks.try_join_next().is_some() {}
        let accepted = tokio::select! {
            _ = &mut shutdown => break,
            a = listener.accept() => a,
        };
        let (stream, peer) = match accepted {
            Ok(x) => x,
            Err(e) => {
                log.accept_errors += 1;
                log.last_error = e.to_string();
                let open = conns.lock().map_or(0, |m| m.len());
                log.flush(open, limits.max_connections, false);
                // EMFILE/ENFILE: free descriptors first (idle connections), then retry.
                evict_idle(&conns, 1);
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let open = conns.lock().map_or(0, |m| m.len());
        if open >= limits.max_connections {
            if evict_idle(&conns, 1) == 0 {
                log.refused += 1;
                log.flush(open, limits.max_connections, false);
                tracing::debug!(%peer, "refused: every connection is busy");
                drop(stream);
                continue;
            }
            log.evicted += 1;
        }
        log.flush(open, limits.max_connections, false);
        let _ = stream.set_nodelay(true);
        let conn = Arc::new(Conn {
            last_activity: AtomicU64::new(now_ms()),
            in_flight: AtomicUsize::new(0),
            evict: tokio::sync::Notify::new(),
        });
        let id = next_id;
        next_id += 1;
        if let Ok(mut m) = conns.lock() {
            m.insert(id, conn.clone());
        }
        let app = app.clone();
        let conns = conns.clone();
        let mut stop = stop_rx.clone();
        tasks.spawn(async move {
            serve_one(stream, conn, app, limits, &mut stop).await;
            if let Ok(mut m) = conns.lock() {
                m.remove(&id);
            }
        });
    }
    drop(listener);
    let _ = stop_tx.send(true);
    let _ = tokio::time::timeout(SHUTDOWN_GRACE, async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    tasks.abort_all();
    Ok(())
}

/// Tells up to `n` idle connections (no request in flight), longest idle first, to close;
/// returns how many were told.
fn evict_idle(conns: &Mutex<HashMap<u64, Arc<Conn>>>, n: usize) -> usize {
    let Ok(mut m) = conns.lock() else {
        return 0;
    };
    let mut idle: Vec<(u64, u64)> = m
        .iter()
        .filter(|(_, c)| c.in_flight.load(Ordering::Relaxed) == 0)
        .map(|(&id, c)| (c.last_activity.load(Ordering::Relaxed), id))
        .collect();
    idle.sort_unstable();
    let mut told = 0;
    for (_, id) in idle.into_iter().take(n) {
        if let Some(c) = m.remove(&id) {
            c.evict.notify_one();
            told += 1;
        }
    }
    told
}

async fn serve_one(
    stream: TcpStream,
    conn: Arc<Conn>,
    app: Router,
    limits: Limits,
    stop: &mut tokio::sync::watch::Receiver<bool>,
) {
    let io = TokioIo::new(Tracked {
        inner: stream,
        conn: conn.clone(),
    });
    let c2 = conn.clone();
    let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        c2.in_flight.fetch_add(1, Ordering::Relaxed);
        let guard = InFlight(c2.clone());
        let app = app.clone();
        async move {
            let r = app.oneshot(req.map(axum::body::Body::new)).await;
            drop(guard);
            r
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(true);
    let served = builder.serve_connection(io, svc);
    tokio::pin!(served);
    let idle = limits.idle_timeout.as_millis() as u64;
    let mut shutting_down = false;
    loop {
        let last = conn.last_activity.load(Ordering::Relaxed);
        let wake = Duration::from_millis((last + idle).saturating_sub(now_ms()).max(10));
        tokio::select! {
            _ = served.as_mut() => return,
            _ = conn.evict.notified() => return,
            r = stop.changed(), if !shutting_down => {
                shutting_down = true;
                if r.is_ok() {
                    served.as_mut().graceful_shutdown();
                }
            }
            _ = tokio::time::sleep(wake) => {
                let quiet = now_ms().saturating_sub(conn.last_activity.load(Ordering::Relaxed));
                if quiet >= idle && conn.in_flight.load(Ordering::Relaxed) == 0 {
                    tracing::debug!("closed a connection idle for {quiet} ms");
                    return;
                }
            }
        }
    }
}
