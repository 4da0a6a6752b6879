//! servebench's live views, fed only by the run's event channel ([`servebench_events::RunEvent`]):
//!
//! * [`terminal::run`]: the ratatui dashboard (full screen or inline), redrawn at a fixed rate on
//!   its own thread, with the keys `q` (stop, keep partial results) and `s` (skip the cell);
//! * [`plain::PlainProgress`]: one progress line per phase change, for pipes and CI logs.
//!
//! Both fold events into one [`state::Dashboard`]; drawing ([`view`]) is a pure function of it,
//! which the snapshot tests exercise with ratatui's `TestBackend`.

pub mod plain;
pub mod state;
pub mod terminal;
pub mod view;

pub use plain::PlainProgress;
pub use state::Dashboard;
