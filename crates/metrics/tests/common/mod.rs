//! Shared helpers for the servebench-metrics integration tests.
#![allow(dead_code)]

use std::path::PathBuf;

use servebench_metrics::Scrape;

/// `tests/data/engines/` at the repository root.
pub fn engines_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/engines")
}

/// Read a fixture relative to `tests/data/engines/`.
pub fn fixture(rel: &str) -> String {
    let p = engines_dir().join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
}

/// Parse a fixture as a Prometheus scrape (must succeed).
pub fn scrape(rel: &str) -> Scrape {
    Scrape::parse(&fixture(rel)).unwrap_or_else(|e| panic!("parse {rel}: {e}"))
}

/// Assert `actual` equals `expected` within 1e-9 relative (absolute for 0).
#[track_caller]
pub fn close(actual: f64, expected: f64) {
    let tol = 1e-9 * expected.abs().max(1e-300);
    assert!(
        (actual - expected).abs() <= tol || actual == expected,
        "expected {expected}, got {actual}"
    );
}

/// Like [`close`] for an `Option`, which must be `Some`.
#[track_caller]
pub fn close_some(actual: Option<f64>, expected: f64) {
    match actual {
        Some(a) => close(a, expected),
        None => panic!("expected Some({expected}), got None"),
    }
}

/// Small deterministic PRNG (xorshift64*) for the garbage-input tests.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}
