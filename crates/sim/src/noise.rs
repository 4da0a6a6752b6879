//! The machine's own scheduling noise, measured next to a timing test (issue 18).
//!
//! A timing test compares what servebench measured with the simulator's truth; where a bound
//! on wall time is unavoidable (a send schedule, a client-side excess over the truth), a loaded
//! machine can break it without any defect in servebench. [`PauseWitness`] is the test's own,
//! independent evidence of such load: a thread that sleeps 10 ms at a time and keeps the
//! longest overshoot. A test retries (or widens a bound) only when the witness saw a pause that
//! can explain the miss ([`PauseWitness::explains`]), never blindly; when every attempt was
//! disturbed it says that it could not judge.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Sleep step of the witness thread.
const STEP: Duration = Duration::from_millis(10);

/// A sleeper thread that records the longest time it woke late (see the module docs).
#[derive(Debug)]
pub struct PauseWitness {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Duration>,
}

impl PauseWitness {
    /// Starts the sleeper thread.
    pub fn start() -> PauseWitness {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut worst = Duration::ZERO;
            let mut prev = Instant::now();
            while !flag.load(Ordering::Relaxed) {
                std::thread::sleep(STEP);
                let now = Instant::now();
                worst = worst.max(now.saturating_duration_since(prev).saturating_sub(STEP));
                prev = now;
            }
            worst
        });
        PauseWitness { stop, thread }
    }

    /// Stops the thread; the longest pause it saw (how late a 10 ms sleep woke at worst).
    pub fn finish(self) -> Duration {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }

    /// The longest pause, ms (see [`PauseWitness::finish`]).
    pub fn finish_ms(self) -> f64 {
        self.finish().as_secs_f64() * 1e3
    }

    /// Whether a pause of `pause` can explain a timing check that missed `bound`: the witness
    /// stood still for at least half the bound. The witness is one thread on a shared machine
    /// and sees at most the pauses of its own core, so half the bound is the evidence asked for
    /// (a quiet machine wakes it < 1 ms late).
    pub fn explains(pause: Duration, bound: Duration) -> bool {
        pause * 2 >= bound
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_witness_stops_and_explains_is_half_the_bound() {
        let w = PauseWitness::start();
        std::thread::sleep(Duration::from_millis(50));
        let pause = w.finish();
        // It measures itself: a quiet or busy machine, never the 50 ms the test slept.
        assert!(pause < Duration::from_secs(5), "{pause:?}");
        let ms = Duration::from_millis;
        assert!(PauseWitness::explains(ms(25), ms(50)));
        assert!(!PauseWitness::explains(ms(24), ms(50)));
    }
}
