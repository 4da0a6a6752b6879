//! Host evidence for a benchmark run: what hardware, driver and engine launch produced the
//! numbers.
//!
//! * [`diag`]: startup diagnostics (host, kernel, client environment and arguments,
//!   `nvidia-smi` query and topology or `rocm-smi`/`amd-smi`, driver and CUDA versions, CPU,
//!   memory, NUMA nodes), seed spec §3.1, §3.20, §6.4;
//! * [`p2p`]: the NVIDIA P2P override check (§3.18, §6.5);
//! * [`monitor`]: the GPU/CPU hardware monitor on its own thread and the per-window summaries
//!   with energy per output token (§3.15, §6.6);
//! * [`launch`]: the engine's launch (command line, working directory, environment, container
//!   hints) found through the listening socket in `/proc` (§7.2);
//! * [`secrets`]: secret filtering applied to all of the above.
//!
//! Nothing here prints: problems come back as values (a warning string, a `reason` field).

pub mod cmd;
pub mod cpu;
pub mod diag;
pub mod gpu;
pub mod launch;
pub mod monitor;
pub mod p2p;
pub mod secrets;

pub use gpu::GpuBackend;
pub use monitor::{HwMonitor, MonitorConfig};
pub use p2p::P2pPaths;
pub use secrets::{Scrubber, REDACTED};
