//! `PacketTracer::wants` runs for every packet matched to a VIP while a tracer is installed: it must
//! not allocate for ordinary packets. A counting global allocator (this test binary only) checks it.

use fp_lb::stage::Tracer;
use fp_lb::trace::PacketTracer;
use fp_pipeline::craft::{self, Endpoints};
use fp_pipeline::trace::{probe_payload, probe_queue, TracerConfig};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
}

fn note() {
    if COUNTING.with(Cell::get) {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so `System`'s
// guarantees are ours; the added counting touches only a const-initialised thread-local `Cell`
// and an atomic, neither of which allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, which is `System`'s.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` via `alloc`/`realloc` with this `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note();
        // SAFETY: `ptr`/`layout` describe a live `System` block; `new_size` obeys the caller's
        // contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn wants_does_not_allocate_for_ordinary_packets() {
    let (probes, queue) = probe_queue(16, TracerConfig::default());
    let mut tracer = PacketTracer::new(probes);
    let e4 = Endpoints::new("198.51.100.7", 40000, "203.0.113.10", 80);
    let e6 = Endpoints::new("2001:db8::7", 40000, "2001:db8::10", 53);
    let frames = [
        craft::tcp(&e4, true),
        craft::tcp(&e6, false),
        craft::udp(&e4, 1400),
        craft::udp(&e6, 32),
    ];
    let keys: Vec<_> = frames
        .iter()
        .map(|f| fp_wire::PacketSummary::parse(f).unwrap().flow_key())
        .collect();
    COUNTING.with(|c| c.set(true));
    let mut wanted = 0;
    for _ in 0..10_000 {
        for (f, k) in frames.iter().zip(&keys) {
            wanted += tracer.wants(f, k, 0) as u32;
        }
    }
    COUNTING.with(|c| c.set(false));
    assert_eq!(wanted, 0);
    assert_eq!(ALLOCS.load(Ordering::Relaxed), 0, "wants allocated");

    // The counter works: a probe's record does allocate (that path is rate-limited).
    let mut probe = craft::udp(&e4, 24);
    let n = probe.len();
    probe[n - 24..].copy_from_slice(&probe_payload(1));
    COUNTING.with(|c| c.set(true));
    assert!(tracer.wants(&probe, &keys[0], 0));
    tracer.record(fp_lb::stage::TraceRecord {
        worker: 0,
        generation: 1,
        flow: keys[0],
        vip: "v".into(),
        conn: "miss",
        maglev_slot: None,
        backend: None,
        encap: "gre".into(),
    });
    COUNTING.with(|c| c.set(false));
    assert!(ALLOCS.load(Ordering::Relaxed) > 0);
    assert_eq!(
        queue.try_recv().map(|p| p.id),
        Some(1),
        "the record was queued"
    );
}
