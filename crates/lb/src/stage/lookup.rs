//! Step 2: the connection lookups of the whole burst at once, hashed and prefetched in a batch
//! before any key is compared (CuckooSwitch Algorithm 3), answered first by the flow cache when
//! the worker has one.

use super::conn::cache_hash;
use super::{Scratch, Tables};
use crate::stats::{Outcome, WorkerStats};
use fp_cuckoo::{Layout, Writer};
use fp_flowcache::KeyedCache;
use fp_pipeline::packet::MAX_BURST;

/// Step 2 for one address family: connection lookups for the burst's keys, through the flow
/// cache when there is one (hits answered from it, misses looked up in the table in one batch and
/// the entries found cached).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn lookup_family<L, const N: usize>(
    table: &Writer<L>,
    cache: &mut Option<KeyedCache<[u8; N], u64>>,
    seed: u64,
    keys: &[[u8; N]],
    vals: &mut [Option<u64>],
    hashes: &mut [u64; MAX_BURST],
    miss: &mut Vec<[u8; N]>,
    miss_at: &mut Vec<u8>,
    miss_vals: &mut [Option<u64>; MAX_BURST],
) -> (u64, u64)
where
    L: Layout<Key = [u8; N], Value = u64>,
{
    let n = keys.len();
    let Some(c) = cache else {
        table.get_batch(keys, &mut vals[..n]);
        return (0, 0);
    };
    miss.clear();
    miss_at.clear();
    for (h, k) in hashes.iter_mut().zip(keys) {
        *h = cache_hash(seed, k);
    }
    c.get_batch(&hashes[..n], keys, &mut vals[..n]);
    for (i, k) in keys.iter().enumerate() {
        if vals[i].is_none() {
            miss.push(*k);
            miss_at.push(i as u8);
        }
    }
    let m = miss.len();
    if m > 0 {
        table.get_batch(miss, &mut miss_vals[..m]);
        for (j, &i) in miss_at.iter().enumerate() {
            let i = i as usize;
            vals[i] = miss_vals[j];
            if let Some(v) = miss_vals[j] {
                c.put_absent(hashes[i], keys[i], v);
            }
        }
    }
    ((n - m) as u64, m as u64)
}

/// Step 2: batched, prefetched connection lookups (CuckooSwitch Algorithm 3).
#[inline(always)]
pub(super) fn lookup(tables: &mut Tables, scratch: &mut Scratch, stats: &WorkerStats) {
    let s = scratch;
    let a = lookup_family(
        &tables.conn4,
        &mut tables.cache4,
        tables.cache_seed,
        &s.keys4,
        &mut s.vals4,
        &mut s.hash4,
        &mut s.miss4,
        &mut s.miss_at,
        &mut s.miss_vals,
    );
    let b = lookup_family(
        &tables.conn6,
        &mut tables.cache6,
        tables.cache_seed,
        &s.keys6,
        &mut s.vals6,
        &mut s.hash6,
        &mut s.miss6,
        &mut s.miss_at,
        &mut s.miss_vals,
    );
    if tables.cache4.is_some() {
        stats.count(Outcome::ConnCacheHit, a.0 + b.0);
        stats.count(Outcome::ConnCacheMiss, a.1 + b.1);
    }
}
