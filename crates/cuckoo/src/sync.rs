//! The atomics the table is built from: std's normally, loom's under `cfg(loom)` so the version
//! protocol can be model-checked (tests/loom_version.rs).

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicU32, AtomicU64, AtomicUsize};
#[cfg(loom)]
pub(crate) use loom::sync::Arc;

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicU32, AtomicU64, AtomicUsize};
#[cfg(not(loom))]
pub(crate) use std::sync::Arc;

pub(crate) use std::sync::atomic::Ordering;

/// Busy-wait hint while a writer holds a bucket (odd version).
#[inline(always)]
pub(crate) fn spin() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::hint::spin_loop();
}

/// The counters only the writer changes (entries stored, entries ever moved), on a cache line of
/// their own. Readers read the table's constants (bucket count, seed, the words' address) on every
/// lookup; a counter on the same line would take that line away from every reader's cache at each
/// insert and removal, a miss per batch on the reader's side under a steady stream of updates.
#[repr(align(64))]
pub(crate) struct WriterCounts {
    pub(crate) len: AtomicUsize,
    pub(crate) moved: AtomicU64,
}

impl WriterCounts {
    pub(crate) fn new() -> WriterCounts {
        WriterCounts {
            len: AtomicUsize::new(0),
            moved: AtomicU64::new(0),
        }
    }
}

/// Storage for `n` zeroed atomic words: huge pages normally, a plain vector of loom atomics under loom.
#[cfg(not(loom))]
pub(crate) type Words = fp_mem::HugeArray<AtomicU64>;

#[cfg(loom)]
pub(crate) type Words = Box<[AtomicU64]>;

#[cfg(not(loom))]
pub(crate) fn alloc_words(n: usize, pages: fp_mem::PagePolicy) -> Result<Words, fp_mem::MemError> {
    fp_mem::HugeArray::new(n, pages)
}

#[cfg(loom)]
pub(crate) fn alloc_words(n: usize, _pages: fp_mem::PagePolicy) -> Result<Words, fp_mem::MemError> {
    Ok((0..n).map(|_| AtomicU64::new(0)).collect())
}

/// Which pages back the storage.
#[cfg(not(loom))]
pub(crate) fn page_kind(w: &Words) -> fp_mem::PageKind {
    w.pages()
}

#[cfg(loom)]
pub(crate) fn page_kind(_w: &Words) -> fp_mem::PageKind {
    fp_mem::PageKind::Heap
}
