//! The scout: one request sent alone before a cell's C streams (context > 0), to fill the prefix
//! cache so the streams do not compete for prefill; it is also the cell's integrated prefill
//! sample. Shared by sustained and Burst / E2E cells; single requests (prefill samples, task
//! scouts) use [`single`].

use bytes::Bytes;
use tokio_util::sync::CancellationToken;

use super::{same_body, Load, LoadPattern, LoadSpec};
use servebench_client::stream::StreamOutcome;
use servebench_client::target::HttpClient;

/// Status reason of a cell interrupted by the user.
pub const INTERRUPTED_REASON: &str =
    "interrupted by the user (Ctrl-C, SIGTERM or SIGHUP) while the cell was running";

/// How a scout ended.
#[derive(Debug)]
pub enum Scout {
    /// `cancel` fired (Ctrl-C): the cell is interrupted.
    Interrupted,
    /// The request failed; the cell is `error` with [`scout_failure_reason`].
    Failed(StreamOutcome),
    /// The request succeeded.
    Done(StreamOutcome),
}

/// The status reason of a cell whose scout failed with `err`.
pub fn scout_failure_reason(err: &str) -> String {
    format!(
        "the cell's first request (sent alone before the C streams, to fill the prefix cache) failed: {err}"
    )
}

/// Sends one request alone through the load driver (`Batch { count: 1, concurrency: 1 }`, no
/// window, default deadlines) and returns its outcome.
pub async fn single(
    client: &HttpClient,
    path: &'static str,
    body: Bytes,
    capture_text: bool,
    cancel: &CancellationToken,
) -> StreamOutcome {
    let mut spec = LoadSpec::new(
        path,
        LoadPattern::Batch {
            count: 1,
            concurrency: 1,
        },
        same_body(body),
    );
    spec.deadline_in_flight = 0;
    spec.capture_text = capture_text;
    let report = Load::run(client, spec, cancel).await;
    match report.outcomes.into_iter().next() {
        Some(o) => o.stream,
        // Cancelled before the worker took the request.
        None => servebench_client::stream::cancelled_outcome(),
    }
}

/// Runs the scout of a cell.
pub async fn scout(
    client: &HttpClient,
    path: &'static str,
    body: Bytes,
    cancel: &CancellationToken,
) -> Scout {
    let out = single(client, path, body, false, cancel).await;
    if cancel.is_cancelled() {
        Scout::Interrupted
    } else if out.record.error.is_some() {
        Scout::Failed(out)
    } else {
        Scout::Done(out)
    }
}
