//! Per-worker counters, for every application's stage and for the engine's driver.
//!
//! Every counter has exactly one writer, the worker that owns it, so an increment is a relaxed load
//! and a relaxed store (two plain `mov`s on x86, no locked read-modify-write). A metrics reader may
//! read them at any time from another thread and sums the workers' values; it sees each counter at
//! some recent value, which is all metrics need. The struct is cache-line aligned so that no two
//! workers' counters share a line.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// A single-writer counter.
#[derive(Default, Debug)]
#[repr(transparent)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Add `n` (only the owning worker calls this).
    #[inline(always)]
    pub fn add(&self, n: u64) {
        self.0.store(self.0.load(Relaxed).wrapping_add(n), Relaxed);
    }

    /// Add one.
    #[inline(always)]
    pub fn inc(&self) {
        self.add(1)
    }

    /// Set the value (gauges; only the owning worker calls this).
    #[inline(always)]
    pub fn set(&self, v: u64) {
        self.0.store(v, Relaxed);
    }

    /// Current value.
    #[inline]
    pub fn get(&self) -> u64 {
        self.0.load(Relaxed)
    }
}
