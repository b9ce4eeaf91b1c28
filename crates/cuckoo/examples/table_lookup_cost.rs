//! Instruction cost of lookups, for profiling under `valgrind --tool=callgrind` (instruction counts
//! do not drift with machine load the way timings do):
//!
//! ```text
//! cargo build --profile dev-bench -p fp-cuckoo --example table_lookup_cost
//! valgrind --tool=callgrind target/dev-bench/examples/table_lookup_cost batch 1000000
//! ```
//! Prints lookups done; divide callgrind's instruction total (minus the `build` run's) by it.
//! `LAYOUT=quotient` runs the quotiented layout instead of the 2,4 compact layout (`single` and
//! `batch` modes; `BATCH` sets the keys per call, 16 by default); with `VALUE_BITS=5` (say) its
//! keys are 59 bits wide (a VLAN-keyed FIB: the same MACs in FIDs 0 to 7) and values 5 bits.

use fp_cuckoo::{CompactMap, Config, Prefetch, QuotientMap};

fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "batch".into());
    let lookups: u64 = args
        .next()
        .map_or(1_000_000, |s| s.parse().expect("lookup count"));
    let n: u64 = std::env::var("ENTRIES")
        .ok()
        .map_or(1 << 16, |s| s.parse().expect("ENTRIES"));
    let batch: usize = std::env::var("BATCH")
        .ok()
        .map_or(16, |s| s.parse().expect("BATCH"));
    let key = |i: u64| fp_hash::splitmix64(i) & fp_cuckoo::COMPACT_MAX_KEY;
    let keys: Vec<u64> = (0..lookups)
        .map(|i| key(fp_hash::splitmix64(i) % n))
        .collect();
    if std::env::var("LAYOUT").as_deref() == Ok("quotient") {
        return quotient(&mode, n, batch, &keys, key);
    }
    let (mut w, r) = CompactMap::new(&Config::with_capacity(n as usize)).expect("table");
    for i in 0..n {
        w.insert(key(i), (i % 1000) as u16).expect("insert");
    }
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
            hits = compact_batches(&r, &keys, batch, m);
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

/// The same lookups on the quotiented layout.
fn quotient(mode: &str, n: u64, batch: usize, keys: &[u64], key: impl Fn(u64) -> u64) {
    let vbits: u32 = std::env::var("VALUE_BITS")
        .ok()
        .map_or(16, |s| s.parse().expect("VALUE_BITS"));
    let cfg = Config::with_capacity(n as usize);
    let (mut w, r) = QuotientMap::with_value_bits(&cfg, vbits).expect("table");
    // 48-bit keys as they are; wider ones in eight FIDs above bit 48.
    let fid = |i: u64| if vbits < 16 { (i % 8) << 48 } else { 0 };
    let value = |i: u64| (i % ((1 << vbits.min(10)) - 1)) as u16;
    for i in 0..n {
        w.insert(key(i) | fid(i), value(i)).expect("insert");
    }
    // The same picks as `main`'s (entry `splitmix64(i) % n` for lookup `i`), with their FIDs.
    let keys: Vec<u64> = (0..keys.len() as u64)
        .map(|i| fp_hash::splitmix64(i) % n)
        .map(|j| key(j) | fid(j))
        .collect();
    let keys = &keys[..];
    let mut hits = 0u64;
    match mode {
        "build" => {}
        "single" => hits = keys.iter().filter(|&&k| r.get(k).is_some()).count() as u64,
        "batch" => hits = quotient_batches(&r, keys, batch),
        other => panic!("mode {other}: build, single or batch"),
    }
    let (first, second) = w.placement();
    println!(
        "quotient {mode}: {} lookups, {hits} hits, {:.2} % of entries in second buckets \
         ({} slots per bucket, {:.1} % load)",
        if mode == "build" { 0 } else { keys.len() },
        100.0 * second as f64 / (first + second).max(1) as f64,
        w.stats().slots_per_bucket,
        100.0 * w.stats().load()
    );
}

/// The batched lookups alone, in a function of their own: `--toggle-collect='*quotient_batches*'`
/// counts only them.
#[inline(never)]
fn quotient_batches(r: &fp_cuckoo::QuotientReader, keys: &[u64], batch: usize) -> u64 {
    let mut out = vec![None; batch];
    let mut hits = 0;
    for c in keys.chunks(batch) {
        r.get_batch(c, &mut out[..c.len()]);
        hits += out[..c.len()].iter().filter(|v| v.is_some()).count() as u64;
    }
    hits
}

/// The 2,4 layout's batched lookups alone (`--toggle-collect='*compact_batches*'`).
#[inline(never)]
fn compact_batches(r: &fp_cuckoo::CompactReader, keys: &[u64], batch: usize, m: Prefetch) -> u64 {
    let mut out = vec![None; batch];
    let mut hits = 0;
    for c in keys.chunks(batch) {
        r.get_batch_with(c, &mut out[..c.len()], m);
        hits += out[..c.len()].iter().filter(|v| v.is_some()).count() as u64;
    }
    hits
}
