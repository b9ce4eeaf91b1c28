//! Construction: partition the keys by block, build every block, collect the fallback keys.
//!
//! Blocks are independent, so `threads` workers each take a contiguous range of blocks. Each worker
//! scans all keys twice (count, then scatter the keys of its range into a local array in block order)
//! rather than sharing one scatter array: hashing a key costs ~2 ns, far less than synchronising
//! writes into a shared buffer, and it needs no unsafe code. Every block's result depends only on
//! its keys, so the table is the same for any number of threads (a test checks it).

use crate::block::{SolveStats, Solver};
use crate::geometry::Geometry;
use crate::sync::Ordering;
use crate::table::Shared;
use crate::Error;

pub(crate) struct Built {
    pub shared: Shared,
    pub fallback: Vec<(u64, u16)>,
    pub stats: SolveStats,
    /// The keys of each block, if asked for (the updater keeps them).
    pub keys_by_block: Option<Vec<Vec<(u64, u16)>>>,
}

/// Check that values fit `value_bits`.
pub(crate) fn check_values(geo: &Geometry, keys: &[u64], values: &[u16]) -> Result<(), Error> {
    if keys.len() != values.len() {
        return Err(Error::Lengths {
            keys: keys.len(),
            values: values.len(),
        });
    }
    let limit = 1u32 << geo.vbits;
    if let Some(i) = values.iter().position(|&v| v as u32 >= limit) {
        return Err(Error::ValueTooWide {
            key: keys[i],
            value: values[i],
            bits: geo.vbits,
        });
    }
    Ok(())
}

pub(crate) fn build_blocks(
    geo: &Geometry,
    keys: &[u64],
    values: &[u16],
    threads: usize,
    pages: fp_mem::PagePolicy,
    keep_keys: bool,
) -> Result<Built, Error> {
    check_values(geo, keys, values)?;
    let mut shared = Shared::new(geo.clone(), pages)?;
    // A table built for the updater is written later; a static one never is.
    shared.is_static = !keep_keys;
    let threads = threads.clamp(1, geo.blocks);
    let per = geo.blocks.div_ceil(threads);
    let ranges: Vec<(usize, usize)> = (0..threads)
        .map(|t| (t * per, ((t + 1) * per).min(geo.blocks)))
        .filter(|(lo, hi)| lo < hi)
        .collect();
    let work = |(lo, hi): (usize, usize)| -> Part {
        build_range(geo, keys, values, lo, hi, &shared, keep_keys)
    };
    let parts: Vec<Part> = if ranges.len() == 1 {
        vec![work(ranges[0])]
    } else {
        std::thread::scope(|s| {
            let hs: Vec<_> = ranges.iter().map(|&r| s.spawn(move || work(r))).collect();
            hs.into_iter()
                .map(|h| h.join().expect("setsep build worker panicked"))
                .collect()
        })
    };
    let mut stats = SolveStats::default();
    let mut fallback = Vec::new();
    let mut by_block = keep_keys.then(Vec::new);
    for p in parts {
        stats.add(&p.stats);
        fallback.extend(p.fallback);
        if let (Some(all), Some(mine)) = (&mut by_block, p.keys_by_block) {
            all.extend(mine);
        }
    }
    shared.len.store(keys.len(), Ordering::Relaxed);
    Ok(Built {
        shared,
        fallback,
        stats,
        keys_by_block: by_block,
    })
}

struct Part {
    stats: SolveStats,
    fallback: Vec<(u64, u16)>,
    keys_by_block: Option<Vec<Vec<(u64, u16)>>>,
}

fn build_range(
    geo: &Geometry,
    keys: &[u64],
    values: &[u16],
    lo: usize,
    hi: usize,
    shared: &Shared,
    keep_keys: bool,
) -> Part {
    let nb = hi - lo;
    let block_of =
        |k: u64| fp_hash::reduce(fp_hash::hash_u64(geo.seed, k), geo.blocks as u64) as usize;
    // Pass 1: count the keys of each block of the range.
    let mut start = vec![0u32; nb + 1];
    for &k in keys {
        let b = block_of(k);
        if (lo..hi).contains(&b) {
            start[b - lo + 1] += 1;
        }
    }
    for i in 0..nb {
        start[i + 1] += start[i];
    }
    // Pass 2: scatter.
    let mut next = start.clone();
    let mut local = vec![(0u64, 0u16); start[nb] as usize];
    for (&k, &v) in keys.iter().zip(values) {
        let b = block_of(k);
        if (lo..hi).contains(&b) {
            local[next[b - lo] as usize] = (k, v);
            next[b - lo] += 1;
        }
    }
    drop(next);
    let mut solver = Solver::default();
    let mut fallback = Vec::new();
    let mut buf = vec![0u64; geo.wpb];
    for i in 0..nb {
        let ks = &local[start[i] as usize..start[i + 1] as usize];
        solver.build_block(geo, ks, &mut buf, &mut fallback);
        let base = (lo + i) * geo.wpb;
        for (j, &w) in buf.iter().enumerate() {
            shared.words[base + j].store(w, Ordering::Relaxed);
        }
    }
    let keys_by_block = keep_keys.then(|| {
        (0..nb)
            .map(|i| local[start[i] as usize..start[i + 1] as usize].to_vec())
            .collect()
    });
    Part {
        stats: solver.stats,
        fallback,
        keys_by_block,
    }
}
