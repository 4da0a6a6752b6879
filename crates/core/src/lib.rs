//! servebench's measurement core: target and HTTP client, prompts, run plan, runner.
//!
//! It never prints. Progress goes out as [`events::RunEvent`]s on a channel; the result is one
//! [`servebench_results::Results`]. See `docs/architecture.md` for the data flow.

pub mod aggregate;
pub mod burst;
pub mod cache;
pub mod cell;
pub mod error;
pub mod events;
pub mod failure;
pub mod h1;
pub mod host;
pub mod load;
pub mod measure;
pub mod plan;
pub mod plausibility;
pub mod prefill;
pub mod probe;
pub mod procstat;
pub mod prompt;
pub mod rate;
pub mod resume;
pub mod runner;
pub mod stream;
pub mod target;
pub mod task;
pub mod telemetry;
pub mod timeouts;

pub use error::{ConfigError, HttpError};
pub use events::{EventSink, RunEvent};
pub use host::HostOptions;
pub use runner::{run, run_resuming, run_with_host, RunConfig, RunError, TargetingMode};
pub use target::{Endpoint, HttpClient, Target};
