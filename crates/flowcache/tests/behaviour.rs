//! Behaviour of every design and policy: fingerprint collisions, SIMD/scalar equivalence, placement
//! rules, the eviction policies' defining properties.

mod common;

use common::{colliding, hash_in_bucket, Gen};
use fp_flowcache::{
    Blp, Config, DcBubble, Design, FlowCache, Insert, Isa, Pblru, Policy, Random, SetAssoc4,
};

fn small<D: Design, P: Policy + Default>(entries: usize, isa: Isa) -> FlowCache<D, P> {
    FlowCache::new(&Config::with_entries(entries).isa(isa).seed(11)).unwrap()
}

/// Forced collisions: many keys with the same fingerprint and the same candidate buckets. Values
/// index a table of full keys; the check compares the full key. A lookup must return either nothing
/// or the looked-up key's own value, on every instruction set.
fn collisions_never_return_another_keys_value<D: Design, P: Policy + Default>() {
    for isa in Isa::available() {
        let mut cache: FlowCache<D, P> = small(256, isa);
        let keys = colliding(&cache, 5, 0x1234, 24);
        // entries[v] is the full key that value v stands for.
        let entries: Vec<u64> = keys.iter().map(|&h| h ^ 0xdead_0000_0000).collect();
        let full = |h: u64| h ^ 0xdead_0000_0000;

        let (a, b) = (keys[0], keys[1]);
        assert_eq!(cache.insert(a, 0), Insert::Filled);
        assert_eq!(cache.lookup(a, |v| entries[v as usize] == full(a)), Some(0));
        // b has a's fingerprint and buckets: the fingerprint matches, the check rejects.
        assert_eq!(cache.lookup(b, |v| entries[v as usize] == full(b)), None);
        assert!(cache.stats().rejected >= 1);
        // Inserting b takes over the slot with the same fingerprint (§4.4); a is now a miss.
        assert_eq!(cache.insert(b, 1), Insert::Updated);
        assert_eq!(cache.lookup(a, |v| entries[v as usize] == full(a)), None);
        assert_eq!(cache.lookup(b, |v| entries[v as usize] == full(b)), Some(1));

        // Random interleaving of all colliding keys.
        let mut g = Gen(isa.name().len() as u64);
        for _ in 0..5_000 {
            let i = g.below(keys.len() as u64) as usize;
            let h = keys[i];
            match cache.lookup(h, |v| entries[v as usize] == full(h)) {
                Some(v) => assert_eq!(v as usize, i, "{} / {} on {isa}", D::NAME, P::NAME),
                None => {
                    cache.insert(h, i as u16);
                }
            }
            // peek and remove obey the check too.
            let j = g.below(keys.len() as u64) as usize;
            if let Some(v) = cache.peek(keys[j], |v| entries[v as usize] == full(keys[j])) {
                assert_eq!(v as usize, j);
            }
        }
        let victim = keys[3];
        if let Some(v) = cache.remove(victim, |v| entries[v as usize] == full(victim)) {
            assert_eq!(v, 3);
        }
        assert_eq!(
            cache.peek(victim, |v| entries[v as usize] == full(victim)),
            None
        );
    }
}

#[test]
fn forced_fingerprint_collisions() {
    for_every_cache!(collisions_never_return_another_keys_value);
}

/// Two caches, one per instruction set, fed the same operations from the same seed, must return the
/// same results and end with identical bucket contents.
fn isas_evolve_identically<D: Design, P: Policy + Default>() {
    let isas = Isa::available();
    let entries = 512;
    let mut caches: Vec<FlowCache<D, P>> = isas.iter().map(|&i| small(entries, i)).collect();
    let mut g = Gen(99);
    // Keys from a small universe, fingerprints from a small alphabet: many collisions and hits.
    let universe: Vec<u64> = (0..600)
        .map(|_| {
            let h = g.next();
            (h & !0xffff) | (h % 40 + 1)
        })
        .collect();
    let mut hashes = [0u64; 40];
    let mut outs: Vec<[Option<u16>; 40]> = vec![[None; 40]; caches.len()];
    for round in 0..400 {
        for h in hashes.iter_mut() {
            *h = universe[g.below(universe.len() as u64) as usize];
        }
        for (c, out) in caches.iter_mut().zip(outs.iter_mut()) {
            c.lookup_batch(&hashes, |i, v| v == (hashes[i] >> 32) as u16, out);
        }
        for w in outs.windows(2) {
            assert_eq!(w[0], w[1], "{} / {} round {round}", D::NAME, P::NAME);
        }
        for (i, &h) in hashes.iter().enumerate() {
            if outs[0][i].is_none() {
                let r: Vec<Insert> = caches
                    .iter_mut()
                    .map(|c| c.insert(h, (h >> 32) as u16))
                    .collect();
                assert!(r.windows(2).all(|w| w[0] == w[1]));
            }
        }
        let h = universe[g.below(universe.len() as u64) as usize];
        let r: Vec<Option<u16>> = caches.iter_mut().map(|c| c.lookup(h, |_| true)).collect();
        assert!(r.windows(2).all(|w| w[0] == w[1]));
        if round % 7 == 0 {
            let r: Vec<Option<u16>> = caches
                .iter_mut()
                .map(|c| c.remove(h, |v| v == (h >> 32) as u16))
                .collect();
            assert!(r.windows(2).all(|w| w[0] == w[1]));
        }
    }
    for b in 0..caches[0].buckets() + D::BUFFER {
        let want = caches[0].bucket(b);
        for c in &caches[1..] {
            assert_eq!(c.bucket(b), want, "{} / {} bucket {b}", D::NAME, P::NAME);
        }
    }
    let s: Vec<_> = caches.iter().map(|c| c.stats()).collect();
    assert!(s.windows(2).all(|w| w[0] == w[1]));
    assert!(
        s[0].hits > 1000 && s[0].rejected > 0 && s[0].evicted > 0,
        "{:?}",
        s[0]
    );
}

#[test]
fn simd_and_scalar_paths_agree() {
    assert!(Isa::available().len() >= 2 || !cfg!(target_arch = "x86_64"));
    for_every_cache!(isas_evolve_identically);
}

/// A key just inserted is found by the next lookup, and never more keys are stored than slots.
fn insert_then_lookup<D: Design, P: Policy + Default>() {
    let mut cache: FlowCache<D, P> = small(1024, Isa::best());
    let mut g = Gen(5);
    for i in 0..20_000u64 {
        let h = g.next();
        cache.insert(h, i as u16);
        assert_eq!(
            cache.lookup(h, |v| v == i as u16),
            Some(i as u16),
            "{}",
            D::NAME
        );
    }
    assert!(cache.occupancy() <= cache.capacity() + D::BUFFER * D::WAYS);
    assert!(
        cache.occupancy() >= cache.capacity() * 9 / 10,
        "{}",
        cache.occupancy()
    );
    cache.clear();
    assert_eq!(cache.occupancy(), 0);
}

#[test]
fn inserted_key_is_found() {
    for_every_cache!(insert_then_lookup);
}

#[test]
fn blp_spills_into_next_bucket_and_buffer_bucket() {
    let mut cache: FlowCache<Blp> = small(64, Isa::best());
    let n = cache.buckets();
    assert_eq!(n, 16);
    // Six keys of bucket 3: four in bucket 3, two spill into bucket 4.
    let keys: Vec<u64> = (0..6).map(|i| hash_in_bucket(3, n, i, 100 + i)).collect();
    for (i, &h) in keys.iter().enumerate() {
        assert_eq!(cache.insert(h, i as u16), Insert::Filled);
    }
    assert_eq!(cache.bucket(3).iter().flatten().count(), 4);
    assert_eq!(cache.bucket(4).iter().flatten().count(), 2);
    for (i, &h) in keys.iter().enumerate() {
        assert_eq!(cache.lookup(h, |v| v == i as u16), Some(i as u16));
    }
    // The last bucket spills into the buffer bucket n, never into bucket 0.
    let last: Vec<u64> = (0..8)
        .map(|i| hash_in_bucket(n - 1, n, i, 200 + i))
        .collect();
    for (i, &h) in last.iter().enumerate() {
        assert_eq!(cache.candidate_buckets(h), vec![n - 1, n]);
        cache.insert(h, i as u16);
    }
    assert_eq!(cache.bucket(n).iter().flatten().count(), 4);
    assert_eq!(cache.bucket(0).iter().flatten().count(), 0);
    for (i, &h) in last.iter().enumerate() {
        assert_eq!(cache.lookup(h, |v| v == i as u16), Some(i as u16));
    }
    // A ninth key evicts one of the eight.
    assert_eq!(
        cache.insert(hash_in_bucket(n - 1, n, 9, 300), 9),
        Insert::Evicted
    );
    let found = last
        .iter()
        .enumerate()
        .filter(|&(i, &h)| cache.peek(h, |v| v == i as u16).is_some())
        .count();
    assert_eq!(found, 7);
}

#[test]
fn pblru_bubbles_up_and_evicts_the_last_slot() {
    let mut cache: FlowCache<SetAssoc4, Pblru> =
        FlowCache::with_policy(&Config::with_entries(64), Pblru::new(1)).unwrap();
    let n = cache.buckets();
    let k: Vec<u64> = (0..6).map(|i| hash_in_bucket(2, n, i, 10 + i)).collect();
    for (i, &h) in k[..4].iter().enumerate() {
        cache.insert(h, i as u16);
    }
    let fps = |c: &FlowCache<SetAssoc4, Pblru>| -> Vec<u16> {
        c.bucket(2)
            .iter()
            .map(|s| s.map_or(0, |(f, _)| f))
            .collect()
    };
    assert_eq!(fps(&cache), [10, 11, 12, 13]);
    // With N = 1 every hit bubbles: key 13 climbs one slot per hit.
    cache.lookup(k[3], |_| true);
    assert_eq!(fps(&cache), [10, 11, 13, 12]);
    cache.lookup(k[3], |_| true);
    assert_eq!(fps(&cache), [10, 13, 11, 12]);
    // A new key replaces the last slot.
    assert_eq!(cache.insert(k[4], 4), Insert::Evicted);
    assert_eq!(fps(&cache), [10, 13, 11, 14]);
    assert_eq!(cache.stats().promotions, 2);
}

#[test]
fn dc_bubble_follows_section_5_3() {
    let mut cache: FlowCache<SetAssoc4, DcBubble> = small(64, Isa::best());
    let n = cache.buckets();
    let k: Vec<u64> = (0..8).map(|i| hash_in_bucket(1, n, i, 20 + i)).collect();
    for (i, &h) in k[..4].iter().enumerate() {
        cache.insert(h, i as u16);
    }
    let fps = |c: &FlowCache<SetAssoc4, DcBubble>| -> Vec<u16> {
        c.bucket(1)
            .iter()
            .map(|s| s.map_or(0, |(f, _)| f))
            .collect()
    };
    assert_eq!(fps(&cache), [20, 21, 22, 23]);
    // Every hit bubbles (no probability); the bucket's last access is now a hit.
    cache.lookup(k[2], |_| true);
    assert_eq!(fps(&cache), [20, 22, 21, 23]);
    // Miss after a hit: replace the last entry.
    cache.insert(k[4], 4);
    assert_eq!(fps(&cache), [20, 22, 21, 24]);
    // Miss after a miss: evict the first, move the rest up, new entry last.
    cache.insert(k[5], 5);
    assert_eq!(fps(&cache), [22, 21, 24, 25]);
}

/// The hot key is looked up once every `gap` cold keys; the cold keys all map to the hot key's
/// bucket(s) and are never seen again (a scan). Returns how often the hot key missed.
fn hot_key_misses<D: Design, P: Policy>(mut cache: FlowCache<D, P>, gap: usize) -> (usize, usize) {
    let n = cache.buckets();
    let b = 7;
    let hot = hash_in_bucket(b, n, 0, 0x4000);
    let mut g = Gen(3);
    // Fill the candidate buckets, then make the key hot.
    for i in 1..=2 * D::WAYS as u16 {
        cache.insert(hash_in_bucket(b, n, i, 0x5000 + i), i);
    }
    cache.insert(hot, 0);
    for _ in 0..200 {
        if cache.lookup(hot, |v| v == 0).is_none() {
            cache.insert(hot, 0);
        }
    }
    let (mut lookups, mut misses) = (0, 0);
    for i in 0..4000u32 {
        // Cold keys: bucket b, fingerprints never equal to the hot key's, values unique within any
        // 4096 consecutive keys (so a fingerprint collision between cold keys is not a hit).
        let cold = hash_in_bucket(
            b,
            n,
            100 + g.below(60000) as u16,
            0x6000 + (i % 0x1000) as u16,
        );
        let v = (i % 0x1000) as u16 + 1;
        if cache.lookup(cold, |x| x == v).is_none() {
            cache.insert(cold, v);
        }
        if (i as usize).is_multiple_of(gap) {
            lookups += 1;
            if cache.lookup(hot, |v| v == 0).is_none() {
                misses += 1;
                cache.insert(hot, 0);
            }
        }
    }
    (misses, lookups)
}

#[test]
fn pblru_keeps_a_hot_key_under_a_scan_that_random_eviction_loses() {
    let cfg = Config::with_entries(256).seed(21);
    for gap in [4, 8] {
        let (pm, pl) = hot_key_misses(FlowCache::<SetAssoc4, Pblru>::new(&cfg).unwrap(), gap);
        let (rm, rl) = hot_key_misses(FlowCache::<SetAssoc4, Random>::new(&cfg).unwrap(), gap);
        assert_eq!(
            pm, 0,
            "PBLRU 4-way lost the hot key {pm} of {pl} times (gap {gap})"
        );
        // Random eviction: the hot key survives `gap` evictions with probability (3/4)^gap.
        assert!(
            rm * 4 > rl,
            "random 4-way lost the hot key only {rm} of {rl} times (gap {gap})"
        );

        let (pm, pl) = hot_key_misses(FlowCache::<Blp, Pblru>::new(&cfg).unwrap(), gap);
        let (rm, rl) = hot_key_misses(FlowCache::<Blp, Random>::new(&cfg).unwrap(), gap);
        assert_eq!(
            pm, 0,
            "PBLRU BLP lost the hot key {pm} of {pl} times (gap {gap})"
        );
        assert!(
            rm * 5 > rl,
            "random BLP lost the hot key only {rm} of {rl} times (gap {gap})"
        );
    }
}

#[test]
fn config_errors_and_sizes() {
    assert!(matches!(
        FlowCache::<Blp>::new(&Config::with_entries(0)),
        Err(fp_flowcache::Error::Empty)
    ));
    assert!(FlowCache::<Blp>::new(&Config::with_entries(usize::MAX)).is_err());
    let c = FlowCache::<Blp>::new(&Config::with_bytes(4 << 20)).unwrap();
    assert_eq!(c.capacity(), 1 << 20);
    assert_eq!(c.table_bytes(), (4 << 20) + 16);
    let c = FlowCache::<fp_flowcache::SetAssoc8>::new(&Config::with_entries(10)).unwrap();
    assert_eq!(c.capacity(), 16); // rounded up to whole buckets
    let e = FlowCache::<Blp>::new(&Config::with_entries(0))
        .unwrap_err()
        .to_string();
    assert!(e.contains("entries = 0"), "{e}");
}
