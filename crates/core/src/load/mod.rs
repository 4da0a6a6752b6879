//! The one load driver: every layer (sustained cells, Burst / E2E, request-count, prefill
//! samples, task mode, open-loop rates) sends its requests through [`Load`].
//!
//! A [`LoadPattern`] says *when* requests go out:
//! * [`LoadPattern::ClosedLoop`]: C workers, each restarts its request the moment the previous
//!   one ends, until the load is stopped (sustained decode cells);
//! * [`LoadPattern::Batch`]: N requests with at most C in flight (Burst / E2E, request-count,
//!   task batches, prefill samples at C = 1);
//! * [`LoadPattern::OpenLoop`]: request k is due at `start + schedule[k]` whatever the server
//!   does (arrival-rate load). With a concurrency cap, an arrival that finds every slot busy
//!   waits for one (counted in [`LoadCounters::waiting`] and [`LoadReport::waited`]) and keeps
//!   its intended time; no arrival is dropped: an arrival the load never sent (stopped first)
//!   is counted in [`LoadReport::not_sent`].
//!
//! Each request's outcome ([`RequestOutcome`]: index, intended and actual send times, the
//! [`StreamOutcome`]) goes out on a channel in completion order; the caller folds it (readiness,
//! windows, progress and result building stay outside the pool). Latency from the intended time
//! ([`RequestOutcome::intended_at`]) is what makes open-loop numbers coordinated-omission safe.
//!
//! Every worker (closed loop, batch) keeps its own keep-alive connection; open-loop requests
//! take an idle connection from a shared pool and give it back when they end.

pub mod readiness;
pub mod scout;
pub mod window;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::{mpsc, Semaphore};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use servebench_client::h1::H1Conn;
use servebench_client::stream::{run_stream, StreamHooks, StreamOutcome, WindowClock};
use servebench_client::HttpClient;
use servebench_results::FailureKind;

/// The first failure of a cell's requests: its text and kind.
pub type FirstFailure = Option<(String, Option<FailureKind>)>;

/// When the requests of a load go out.
#[derive(Clone, Debug, PartialEq)]
pub enum LoadPattern {
    /// `concurrency` workers, each sending its next request the moment its previous one ends,
    /// until the load is stopped ([`Load::stop`], the caller's token, or a failure with
    /// [`LoadSpec::stop_on_failure`]).
    ClosedLoop {
        /// Workers (C).
        concurrency: u64,
    },
    /// `count` requests, at most `concurrency` in flight (min(C, N) workers claim indexes
    /// `0..count` in order).
    Batch {
        /// Requests (N).
        count: u64,
        /// Most requests in flight (C).
        concurrency: u64,
    },
    /// Request k is intended at `start + schedule[k]` (sorted offsets). With
    /// `max_concurrency`, at most that many are in flight; later arrivals wait in order.
    OpenLoop {
        /// Intended send offsets from the start of the load, ascending.
        schedule: Vec<Duration>,
        /// Most requests in flight; `None` = unbounded.
        max_concurrency: Option<u64>,
    },
}

impl LoadPattern {
    /// Requests the pattern plans (None = until stopped).
    pub fn planned(&self) -> Option<u64> {
        match self {
            LoadPattern::ClosedLoop { .. } => None,
            LoadPattern::Batch { count, .. } => Some(*count),
            LoadPattern::OpenLoop { schedule, .. } => Some(schedule.len() as u64),
        }
    }
}

/// Builds the body of request `index` (0-based, in send order within one load).
pub type BodyFn = Arc<dyn Fn(u64) -> Bytes + Send + Sync>;

/// A body closure that sends the same bytes every time.
pub fn same_body(body: Bytes) -> BodyFn {
    Arc::new(move |_| body.clone())
}

/// What to send and how.
#[derive(Clone)]
pub struct LoadSpec {
    /// Streaming API path.
    pub path: &'static str,
    /// When requests go out.
    pub pattern: LoadPattern,
    /// Body of request `index`.
    pub body: BodyFn,
    /// Stop the whole load (cut every stream) at the first failed request. Cut (cancelled)
    /// requests are never failures.
    pub stop_on_failure: bool,
    /// Keep each response's text (task mode).
    pub capture_text: bool,
    /// Requests of the same prompt in flight at once, for the first-token deadline
    /// ([`StreamHooks::in_flight`]; 0 counts as 1).
    pub deadline_in_flight: u64,
    /// The measured window the streams credit their tokens to, when there is one.
    pub window: Option<Arc<WindowClock>>,
    /// Where each finished request's row goes (`--export-requests`), when exported.
    pub export: Option<crate::export::ExportSink>,
}

impl LoadSpec {
    /// A spec with no window, no text capture, stop on failure, and the pattern's concurrency
    /// as the deadline's in-flight count.
    pub fn new(path: &'static str, pattern: LoadPattern, body: BodyFn) -> Self {
        let in_flight = match &pattern {
            LoadPattern::ClosedLoop { concurrency } => *concurrency,
            LoadPattern::Batch { concurrency, .. } => *concurrency,
            LoadPattern::OpenLoop {
                max_concurrency, ..
            } => max_concurrency.unwrap_or(0),
        };
        LoadSpec {
            path,
            pattern,
            body,
            stop_on_failure: true,
            capture_text: false,
            deadline_in_flight: in_flight,
            window: None,
            export: None,
        }
    }
}

/// Live counters of a running load (read by progress and readiness while it runs).
#[derive(Debug, Default)]
pub struct LoadCounters {
    /// Worker slots that have produced at least one token (closed loop and batch: per worker;
    /// open loop: per request). Readiness needs all C.
    pub producing: AtomicU64,
    /// Output tokens so far (live tok/s).
    pub live_tokens: AtomicU64,
    /// Requests that completed normally.
    pub completed: AtomicU64,
    /// Requests in flight now.
    pub in_flight: AtomicU64,
    /// Most requests ever in flight at once.
    pub max_in_flight: AtomicU64,
    /// Requests sent.
    pub sent: AtomicU64,
    /// Open loop: arrivals due now but waiting for a slot under the cap.
    pub waiting: AtomicU64,
}

/// One finished request.
#[derive(Debug)]
pub struct RequestOutcome {
    /// Position in send order within the load, from 0 (the body closure's index).
    pub index: u64,
    /// When the request was due: the open-loop schedule time, else the moment its worker took
    /// it. Latency from here is coordinated-omission safe.
    pub intended_at: Instant,
    /// When the driver handed it to the client (≥ `intended_at`).
    pub sent_at: Instant,
    /// Open loop: it had to wait for a free slot under the concurrency cap (every slot taken,
    /// or queued behind an earlier arrival that was waiting; see [`LoadReport::waited`]).
    pub waited: bool,
    /// The request's record, window credit, text and fault facts.
    pub stream: StreamOutcome,
}

impl RequestOutcome {
    /// The request failed (error, not a cut by the load or the caller).
    pub fn failed(&self) -> bool {
        self.stream.record.error.is_some() && !self.stream.record.cancelled
    }

    /// How late it went out against its intended time, s.
    pub fn schedule_lag_s(&self) -> f64 {
        self.sent_at
            .saturating_duration_since(self.intended_at)
            .as_secs_f64()
    }

    /// TTFT measured from the intended send time, s (None without a first token).
    pub fn ttft_from_intended_s(&self) -> Option<f64> {
        let r = &self.stream.record;
        r.first_token_at
            .map(|t| t.saturating_duration_since(self.intended_at).as_secs_f64())
    }

    /// End-to-end latency from the intended send time to the request's end, s.
    pub fn e2e_from_intended_s(&self) -> f64 {
        self.stream
            .record
            .end_at
            .saturating_duration_since(self.intended_at)
            .as_secs_f64()
    }
}

/// What is left when a load ends.
#[derive(Debug, Default)]
pub struct LoadReport {
    /// Outcomes not yet taken with [`Load::next`] / [`Load::drain`], completion order.
    pub outcomes: Vec<RequestOutcome>,
    /// The first failed request's error and kind.
    pub first_failure: FirstFailure,
    /// Requests sent.
    pub sent: u64,
    /// Planned requests never sent (the load was stopped first; 0 for a closed loop).
    pub not_sent: u64,
    /// Open loop: arrivals that waited for a slot under the cap (found every slot taken at their
    /// intended time, or were intended before an earlier waiting arrival got its slot).
    pub waited: u64,
    /// Most requests in flight at once.
    pub max_in_flight: u64,
}

struct Shared {
    client: HttpClient,
    spec: LoadSpec,
    stop: CancellationToken,
    counters: LoadCounters,
    failure: Mutex<FirstFailure>,
    failed: AtomicBool,
    waited: AtomicU64,
}

/// The sending side of the outcome channel: held only by the workers (and the open-loop
/// dispatcher), so the channel closes once every request has ended.
type Tx = mpsc::UnboundedSender<RequestOutcome>;

/// A running load. Dropping it does not stop the requests; call [`Load::finish`].
pub struct Load {
    shared: Arc<Shared>,
    rx: mpsc::UnboundedReceiver<RequestOutcome>,
    tasks: Vec<JoinHandle<()>>,
}

impl Load {
    /// Starts `spec` on `client`. `cancel` (the caller's token) cuts every stream and stops the
    /// load; [`Load::stop`] does the same for this load only.
    pub fn start(client: &HttpClient, spec: LoadSpec, cancel: &CancellationToken) -> Load {
        let (tx, rx) = mpsc::unbounded_channel();
        let pattern = spec.pattern.clone();
        let shared = Arc::new(Shared {
            client: client.clone(),
            spec,
            stop: cancel.child_token(),
            counters: LoadCounters::default(),
            failure: Mutex::new(None),
            failed: AtomicBool::new(false),
            waited: AtomicU64::new(0),
        });
        let next = Arc::new(AtomicU64::new(0));
        let workers = |n: u64, count: u64| -> Vec<JoinHandle<()>> {
            (0..n)
                .map(|_| tokio::spawn(worker(shared.clone(), tx.clone(), next.clone(), count)))
                .collect()
        };
        let tasks = match pattern {
            LoadPattern::ClosedLoop { concurrency } => workers(concurrency, u64::MAX),
            LoadPattern::Batch { count, concurrency } => workers(concurrency.min(count), count),
            LoadPattern::OpenLoop {
                schedule,
                max_concurrency,
            } => vec![tokio::spawn(open_loop(
                shared.clone(),
                tx.clone(),
                schedule,
                max_concurrency,
            ))],
        };
        drop(tx);
        Load { shared, rx, tasks }
    }

    /// The next finished request; `None` once every request has ended and been taken.
    pub async fn next(&mut self) -> Option<RequestOutcome> {
        self.rx.recv().await
    }

    /// Moves every outcome already finished into `into` (never waits).
    pub fn drain(&mut self, into: &mut Vec<RequestOutcome>) {
        while let Ok(o) = self.rx.try_recv() {
            into.push(o);
        }
    }

    /// Live counters.
    pub fn counters(&self) -> &LoadCounters {
        &self.shared.counters
    }

    /// A request has failed.
    pub fn failed(&self) -> bool {
        self.shared.failed.load(Ordering::SeqCst)
    }

    /// Stops the load: no new request goes out and every stream is cut.
    pub fn stop(&self) {
        self.shared.stop.cancel();
    }

    /// Waits until every request has ended (call [`Load::stop`] first to cut a closed loop)
    /// and returns what was not yet taken.
    pub async fn finish(mut self) -> LoadReport {
        for t in std::mem::take(&mut self.tasks) {
            let _ = t.await;
        }
        let mut outcomes = Vec::new();
        self.drain(&mut outcomes);
        let c = &self.shared.counters;
        let sent = c.sent.load(Ordering::SeqCst);
        LoadReport {
            outcomes,
            first_failure: self
                .shared
                .failure
                .lock()
                .map(|f| f.clone())
                .unwrap_or_default(),
            sent,
            not_sent: self
                .shared
                .spec
                .pattern
                .planned()
                .map_or(0, |p| p.saturating_sub(sent)),
            waited: self.shared.waited.load(Ordering::SeqCst),
            max_in_flight: c.max_in_flight.load(Ordering::SeqCst),
        }
    }

    /// Runs the load to its end and returns every outcome (completion order).
    pub async fn run(
        client: &HttpClient,
        spec: LoadSpec,
        cancel: &CancellationToken,
    ) -> LoadReport {
        Load::start(client, spec, cancel).finish().await
    }
}

impl Shared {
    /// Sends request `index` on `conn` and publishes its outcome. Returns false when the load
    /// must stop (this request failed under stop-on-failure).
    async fn request(
        &self,
        tx: &Tx,
        conn: &mut Option<H1Conn>,
        index: u64,
        intended_at: Instant,
        waited: bool,
        produced: &AtomicBool,
    ) -> bool {
        let body = (self.spec.body)(index);
        let c = &self.counters;
        let now_in_flight = c.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        c.max_in_flight.fetch_max(now_in_flight, Ordering::SeqCst);
        c.sent.fetch_add(1, Ordering::SeqCst);
        let sent_at = Instant::now();
        let stream = run_stream(
            &self.client,
            conn,
            self.spec.path,
            body,
            StreamHooks {
                window: self.spec.window.as_deref(),
                cancel: Some(&self.stop),
                live_tokens: Some(&c.live_tokens),
                first_token: Some((produced, &c.producing)),
                capture_text: self.spec.capture_text,
                in_flight: self.spec.deadline_in_flight,
                ..Default::default()
            },
        )
        .await;
        c.in_flight.fetch_sub(1, Ordering::SeqCst);
        if stream.record.completed {
            c.completed.fetch_add(1, Ordering::SeqCst);
        }
        let out = RequestOutcome {
            index,
            intended_at,
            sent_at,
            waited,
            stream,
        };
        if let Some(x) = &self.spec.export {
            x.send(&out);
        }
        let failed = out.failed();
        if failed {
            if let Ok(mut f) = self.failure.lock() {
                f.get_or_insert((
                    out.stream.record.error.clone().unwrap_or_default(),
                    out.stream.facts.kind,
                ));
            }
            self.failed.store(true, Ordering::SeqCst);
        }
        let _ = tx.send(out);
        if failed && self.spec.stop_on_failure {
            self.stop.cancel();
            return false;
        }
        true
    }
}

/// A closed-loop or batch worker: claims the next index from `next` until `count` (u64::MAX
/// for a closed loop) and sends it on its own keep-alive connection.
async fn worker(shared: Arc<Shared>, tx: Tx, next: Arc<AtomicU64>, count: u64) {
    let produced = AtomicBool::new(false);
    let mut conn = None;
    while !shared.stop.is_cancelled() {
        let index = next.fetch_add(1, Ordering::SeqCst);
        if index >= count {
            break;
        }
        let go_on = shared
            .request(&tx, &mut conn, index, Instant::now(), false, &produced)
            .await;
        // A cut stream means the load (or the caller) is stopping.
        if !go_on || shared.stop.is_cancelled() {
            break;
        }
    }
}

/// The open-loop dispatcher: sends request k at `t0 + schedule[k]`, waiting for a slot when
/// the cap is reached, then waits for every request to end.
async fn open_loop(shared: Arc<Shared>, tx: Tx, schedule: Vec<Duration>, cap: Option<u64>) {
    let t0 = Instant::now();
    let slots = cap.map(|c| Arc::new(Semaphore::new(c.max(1) as usize)));
    let idle: Arc<Mutex<Vec<H1Conn>>> = Arc::new(Mutex::new(Vec::new()));
    let mut running = tokio::task::JoinSet::new();
    // when the last arrival that had to wait got its slot: an arrival intended before then was
    // queued behind it, so it waited for a slot too, even when one is free by the time the
    // dispatcher reaches it (a race between two streams ending close together otherwise decides)
    let mut last_wait_end: Option<Instant> = None;
    for (k, offset) in schedule.iter().enumerate() {
        let intended = t0 + *offset;
        tokio::select! {
            _ = tokio::time::sleep_until(intended.into()) => {}
            _ = shared.stop.cancelled() => break,
        }
        let (permit, waited) = match &slots {
            None => (None, false),
            Some(s) => match s.clone().try_acquire_owned() {
                Ok(p) => {
                    let queued = last_wait_end.is_some_and(|end| intended < end);
                    if queued {
                        shared.waited.fetch_add(1, Ordering::SeqCst);
                    }
                    (Some(p), queued)
                }
                Err(_) => {
                    shared.counters.waiting.fetch_add(1, Ordering::SeqCst);
                    shared.waited.fetch_add(1, Ordering::SeqCst);
                    let got = tokio::select! {
                        biased;
                        _ = shared.stop.cancelled() => None,
                        p = s.clone().acquire_owned() => p.ok(),
                    };
                    shared.counters.waiting.fetch_sub(1, Ordering::SeqCst);
                    last_wait_end = Some(Instant::now());
                    match got {
                        Some(p) => (Some(p), true),
                        None => break,
                    }
                }
            },
        };
        // Stopped while this arrival waited (a cut stream frees its slot at that very moment):
        // it was never sent, so it must not become a sent-and-cut request.
        if shared.stop.is_cancelled() {
            break;
        }
        let (shared, idle, tx) = (shared.clone(), idle.clone(), tx.clone());
        running.spawn(async move {
            let _permit = permit;
            let mut conn = idle.lock().ok().and_then(|mut v| v.pop());
            let produced = AtomicBool::new(false);
            shared
                .request(&tx, &mut conn, k as u64, intended, waited, &produced)
                .await;
            if let (Some(c), Ok(mut v)) = (conn, idle.lock()) {
                v.push(c);
            }
        });
        // Reap finished requests so the set stays small on long schedules.
        while running.try_join_next().is_some() {}
    }
    while running.join_next().await.is_some() {}
}

#[cfg(test)]
mod tests;
