//! servebench's measurement core: probes, prompts, run plan, load driver, cells, the run. Its
//! requests go through `servebench-client` (target, HTTP client, one stream).
//!
//! It never prints. Progress goes out as [`events::RunEvent`]s on a channel; the result is one
//! [`servebench_results::Results`]. See `docs/architecture.md` for the data flow.

pub(crate) mod aggregate;
pub mod burst;
pub mod cache;
pub mod cell;
pub(crate) mod error;
pub mod events;
pub mod export;
pub mod gaps;
pub mod host;
pub mod load;
pub mod measure;
pub mod plan;
pub(crate) mod plausibility;
pub mod prefill;
pub mod probe;
pub mod procstat;
pub mod prompt;
pub mod rate;
pub mod resume;
pub mod run;
pub mod steady;
pub mod task;
pub(crate) mod telemetry;
#[cfg(test)]
mod thresholds_tests;

pub use error::ConfigError;
pub use events::{EventSink, RunEvent};
pub use host::HostOptions;
pub use run::{run, run_resuming, run_with_host, RunConfig, RunError, TargetingMode};
