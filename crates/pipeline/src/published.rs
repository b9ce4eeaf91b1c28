//! The newest value of a whole immutable structure (a configuration's plan, a snapshot of tables),
//! handed from the control thread to the workers: the writer publishes a new `Arc`, a worker
//! picks it up at its next [`Cached::refresh`] — one atomic load per burst when nothing changed,
//! a short lock only when something did — so no burst ever sees half of a change.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The newest value of `T`, handed from one writer to many readers.
#[derive(Debug)]
pub struct Published<T> {
    generation: AtomicU64,
    current: Mutex<Arc<T>>,
}

impl<T> Published<T> {
    /// Start with `value`.
    pub fn new(value: Arc<T>) -> Published<T> {
        Published {
            generation: AtomicU64::new(1),
            current: Mutex::new(value),
        }
    }

    /// Replace the value. Readers pick it up at their next [`Cached::refresh`].
    pub fn publish(&self, value: Arc<T>) {
        let mut g = self.current.lock().unwrap_or_else(|p| p.into_inner());
        *g = value;
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// The current value.
    pub fn load(&self) -> Arc<T> {
        self.current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The publication counter (cheap; changes whenever the value does).
    #[inline(always)]
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }
}

/// A reader's copy of a [`Published`] value.
#[derive(Debug)]
pub struct Cached<T> {
    source: Arc<Published<T>>,
    generation: u64,
    value: Arc<T>,
}

impl<T> Cached<T> {
    /// Follow `source`.
    pub fn new(source: Arc<Published<T>>) -> Cached<T> {
        let generation = source.generation();
        let value = source.load();
        Cached {
            source,
            generation,
            value,
        }
    }

    /// Pick up a newer value if one was published. One atomic load when nothing changed.
    #[inline(always)]
    pub fn refresh(&mut self) -> bool {
        let g = self.source.generation();
        if g == self.generation {
            return false;
        }
        self.generation = g;
        self.value = self.source.load();
        true
    }

    /// The value this reader works with.
    #[inline(always)]
    pub fn get(&self) -> &Arc<T> {
        &self.value
    }
}
