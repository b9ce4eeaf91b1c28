//! The per-packet operations never allocate: a counting global allocator sees no allocation from
//! this thread during lookups, batched lookups, inserts, removes and peeks, for every design and
//! policy, after construction.

mod common;

use common::Gen;
use fp_flowcache::{Config, Design, FlowCache, Policy};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: delegates to the system allocator unchanged; the counter is a const-initialised
// thread-local `Cell`, whose access does not allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        ALLOCS.with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static A: Counting = Counting;

fn allocs() -> u64 {
    ALLOCS.with(|c| c.get())
}

fn no_alloc<D: Design, P: Policy + Default>() {
    for isa in fp_flowcache::Isa::available() {
        let mut cache: FlowCache<D, P> =
            FlowCache::new(&Config::with_entries(4096).isa(isa)).unwrap();
        let mut g = Gen(1);
        let mut hashes = [0u64; 77];
        let mut out = [None; 77];
        let before = allocs();
        for round in 0..200u64 {
            for h in hashes.iter_mut() {
                *h = g.below(6000).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            }
            cache.lookup_batch(&hashes, |i, v| v == (hashes[i] >> 48) as u16, &mut out);
            for (i, &h) in hashes.iter().enumerate() {
                if out[i].is_none() {
                    cache.insert(h, (h >> 48) as u16);
                }
                let _ = cache.lookup(h, |v| v == (h >> 48) as u16);
            }
            if round % 3 == 0 {
                let h = hashes[5];
                let _ = cache.remove(h, |_| true);
                let _ = cache.peek(hashes[6], |_| true);
            }
        }
        let after = allocs();
        assert_eq!(
            after - before,
            0,
            "{} / {} allocated on {isa}",
            D::NAME,
            P::NAME
        );
        assert!(cache.stats().hits > 0 && cache.stats().evicted > 0);
    }
}

#[test]
fn lookups_and_inserts_do_not_allocate() {
    for_every_cache!(no_alloc);
}
