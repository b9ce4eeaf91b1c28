//! Instruction cost of lookups, for profiling under `valgrind --tool=callgrind` (instruction counts
//! do not drift with machine load the way timings do):
//!
//! ```text
//! cargo build --profile dev-bench -p fp-cuckoo --example table_lookup_cost
//! valgrind --tool=callgrind target/dev-bench/examples/table_lookup_cost batch 1000000
//! ```
//! Prints lookups done; divide callgrind's instruction total (minus the `build` run's) by it.

use fp_cuckoo::{CompactMap, Config, Prefetch};

fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "batch".into());
    let lookups: u64 = args
        .next()
        .map_or(1_000_000, |s| s.parse().expect("lookup count"));
    let n: u64 = std::env::var("ENTRIES")
        .ok()
        .map_or(1 << 16, |s| s.parse().expect("ENTRIES"));
    let (mut w, r) = CompactMap::new(&Config::with_capacity(n as usize)).expect("table");
    let key = |i: u64| fp_hash::splitmix64(i) & fp_cuckoo::COMPACT_MAX_KEY;
    for i in 0..n {
        w.insert(key(i), (i % 1000) as u16).expect("insert");
    }
    let keys: Vec<u64> = (0..lookups)
        .map(|i| key(fp_hash::splitmix64(i) % n))
        .collect();
    let mut hits = 0u64;
    let t = std::time::Instant::now();
    match mode.as_str() {
        "build" => {}
        "single" => hits = keys.iter().filter(|&&k| r.get(k).is_some()).count() as u64,
        "batch" | "nopf" => {
            let m = if mode == "batch" {
                Prefetch::TwoRound
            } else {
                Prefetch::Off
            };
            let mut out = [None; 16];
            for c in keys.chunks(16) {
                r.get_batch_with(c, &mut out[..c.len()], m);
                hits += out[..c.len()].iter().filter(|v| v.is_some()).count() as u64;
            }
        }
        "lines" => {
            // The memory system alone: 1.5 random 32-byte bucket reads per "lookup" over an array
            // the size of the table, prefetched 16 at a time (the bound for two-round prefetching).
            // Every word is written first: memory that is only read maps the kernel's zero page,
            // and reading that would measure one cached page instead of the memory system.
            use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
            let words = r.stats().table_bytes / 8;
            let cells: fp_mem::HugeArray<AtomicU64> =
                fp_mem::HugeArray::new(words, fp_mem::PagePolicy::Auto).expect("array");
            for (i, w) in cells.iter().enumerate() {
                w.store(i as u64, Relaxed);
            }
            let arr = |i: usize| cells[i].load(Relaxed);
            let buckets = (words / 4) as u64;
            let mut acc = 0u64;
            for c in keys.chunks(16) {
                let idx: [usize; 16] = std::array::from_fn(|i| {
                    fp_hash::reduce(fp_hash::hash_u64(1, c[i % c.len()]), buckets) as usize * 4
                });
                for &i in &idx {
                    fp_hash::prefetch_read(&cells[i]);
                }
                for &i in &idx {
                    acc = acc.wrapping_add(arr(i) | arr(i + 3));
                }
                for &i in &idx[..8] {
                    let j = (i * 7 + 4096) % (words - 4);
                    fp_hash::prefetch_read(&cells[j]);
                }
                for &i in &idx[..8] {
                    let j = (i * 7 + 4096) % (words - 4);
                    acc = acc.wrapping_add(arr(j));
                }
            }
            std::hint::black_box(acc);
            hits = lookups;
        }
        other => panic!("mode {other}: build, single, batch, nopf or lines"),
    }
    let dt = t.elapsed().as_secs_f64();
    println!(
        "{mode}: {} lookups, {hits} hits, {:.1} ns/lookup",
        if mode == "build" { 0 } else { lookups },
        dt * 1e9 / lookups as f64
    );
    if let Ok(s) = std::fs::read_to_string("/proc/self/smaps_rollup") {
        for l in s
            .lines()
            .filter(|l| l.starts_with("AnonHugePages") || l.starts_with("Rss"))
        {
            println!("{l}");
        }
    }
}
