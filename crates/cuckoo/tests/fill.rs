//! Fill tests: the table reaches at least 95 % occupancy before the first "table full", loses no
//! key on the way, and a failed insert leaves the table exactly as it was.

use fp_cuckoo::{CompactMap, Config, GeneralMap, InsertError, Placed};

fn k(i: u64) -> u64 {
    fp_hash::splitmix64(i ^ 0xABCD) & fp_cuckoo::COMPACT_MAX_KEY
}

#[test]
fn compact_fills_past_95_percent_without_loss() {
    for (cap, seed) in [(10_000usize, 1u64), (100_000, 2), (1_000_000, 3)] {
        let (mut w, r) = CompactMap::new(&Config::with_capacity(cap).seed(seed)).unwrap();
        let slots = r.stats().slots;
        let mut n = 0u64;
        let err = loop {
            match w.insert(k(n), (n % 65_000) as u16) {
                Ok(None) => n += 1,
                Ok(Some(_)) => panic!("duplicate generated key"),
                Err(e) => break e,
            }
            assert!(n as usize <= slots, "more entries than slots");
        };
        assert_eq!(err, InsertError::Full);
        let load = n as f64 / slots as f64;
        assert!(
            load >= 0.95,
            "first full at {:.4} load ({n} of {slots})",
            load
        );
        assert_eq!(r.len(), n as usize);
        // The failed insert changed nothing: every key is present with its value.
        let keys: Vec<u64> = (0..n).map(k).collect();
        let mut out = vec![None; keys.len()];
        r.get_batch(&keys, &mut out);
        for (i, o) in out.iter().enumerate() {
            assert_eq!(*o, Some((i as u64 % 65_000) as u16), "key #{i} lost");
        }
        assert_eq!(r.get(k(n)), None, "the rejected key must not be present");
        // Still full for the same key, and updates of present keys still work when full.
        assert_eq!(w.insert(k(n), 1), Err(InsertError::Full));
        assert_eq!(w.insert(k(0), 7), Ok(Some(0)));
        assert_eq!(r.get(k(0)), Some(7));
        // Bytes per entry: slots alone are 8 / load; with the version counters the paper's 8.5 holds
        // once the table is large enough for the counters not to matter.
        let s = r.stats();
        assert!((s.table_bytes as f64 / n as f64) < 8.5, "{}", s);
        if cap >= 1_000_000 {
            assert!(s.bytes_per_entry() < 8.5, "{}", s);
        }
        eprintln!(
            "compact cap {cap}: first full at {:.2}% ({s})",
            100.0 * load
        );
    }
}

#[test]
fn general_fills_past_95_percent_without_loss() {
    type K = [u8; 13];
    let mk = |i: u64| -> K {
        let mut b = [0u8; 13];
        b[..8].copy_from_slice(&fp_hash::splitmix64(i).to_le_bytes());
        b[12] = 6;
        b
    };
    let (mut w, r) = GeneralMap::<K, u64>::new(&Config::with_capacity(50_000)).unwrap();
    let slots = r.stats().slots;
    let mut n = 0u64;
    while w.insert(mk(n), n).is_ok() {
        n += 1;
    }
    let load = n as f64 / slots as f64;
    assert!(load >= 0.95, "first full at {load:.4}");
    for i in 0..n {
        assert_eq!(r.get(mk(i)), Some(i));
    }
    assert_eq!(r.len(), n as usize);
}

#[test]
fn delete_then_refill() {
    let (mut w, r) = CompactMap::new(&Config::with_capacity(20_000)).unwrap();
    let mut n = 0u64;
    while w.insert(k(n), 1).is_ok() {
        n += 1;
    }
    // Free 10 % and refill with new keys: all must fit again.
    for i in (0..n).step_by(10) {
        assert_eq!(w.remove(k(i)), Some(1));
    }
    let freed = n.div_ceil(10);
    for j in 0..freed {
        w.insert(k(n + 1 + j), 2)
            .expect("freed room must be reusable");
    }
    for i in 0..n {
        let expect = if i.is_multiple_of(10) { None } else { Some(1) };
        assert_eq!(r.get(k(i)), expect);
    }
    for j in 0..freed {
        assert_eq!(r.get(k(n + 1 + j)), Some(2));
    }
}

/// `insert_bounded` on a full table: it evicts only what the predicate allows, from the key's own
/// two buckets, never searches further than asked, and changes nothing when it fails.
#[test]
fn bounded_insert_evicts_only_what_it_may() {
    let (mut w, r) = CompactMap::new(&Config::with_capacity(20_000).seed(9)).unwrap();
    // Fill to the first "full": odd values mark entries that may be evicted.
    let mut n = 0u64;
    while w.insert(k(n), (n % 2) as u16).is_ok() {
        n += 1;
    }
    assert_eq!(r.len() as u64, n);
    // With nothing evictable and no search beyond the key's buckets: a key whose buckets still
    // have a free slot gets it, any other is refused and nothing changes.
    let mut placed = 0;
    for i in n..n + 200 {
        match w.insert_bounded(k(i), 4, 2, |_, _| false) {
            Ok(Placed::New) => placed += 1,
            Err(InsertError::Full) => assert_eq!(r.get(k(i)), None),
            other => panic!("{other:?}"),
        }
    }
    assert!(placed < 150, "{placed} of 200 placed in a full table");
    assert_eq!(r.len(), n as usize + placed);
    // Present keys are updated in place, whatever the predicate says.
    assert_eq!(
        w.insert_bounded(k(0), 0, 2, |_, _| true),
        Ok(Placed::Updated(0))
    );
    // Evictable (odd) entries make room for new keys; even ones never go.
    let mut evicted = 0;
    for i in n + 1000..n + 3000 {
        match w.insert_bounded(k(i), 2, 2, |_, v| v % 2 == 1) {
            Ok(Placed::Evicted(old, v)) => {
                assert_eq!(v % 2, 1, "only evictable entries go");
                assert_eq!(r.get(old), None, "the evicted key is gone");
                let (a, b) = w.candidate_buckets(k(i)).unwrap();
                let (c, d) = w.candidate_buckets(old).unwrap();
                assert!(
                    [c, d].contains(&a) || [c, d].contains(&b),
                    "the victim shared a bucket with the new key"
                );
                evicted += 1;
            }
            Ok(Placed::New) => placed += 1,
            Ok(Placed::Updated(_)) => panic!("new key reported as present"),
            Err(InsertError::Full) => {}
            Err(e) => panic!("{e}"),
        }
    }
    assert!(evicted > 1000, "only {evicted} evictions into a full table");
    assert_eq!(r.len(), n as usize + placed, "evictions keep the length");
    // Every even (non-evictable) entry of the fill is still there.
    for i in (0..n).filter(|i| i % 2 == 0) {
        assert_eq!(r.get(k(i)), Some(0), "key #{i} lost");
    }
}

/// `placement` counts every entry once, in the bucket it really sits in: keys that all share one
/// first bucket overflow into their second buckets exactly by the excess over that bucket's slots,
/// and a near-empty table keeps every key in its first bucket.
#[test]
fn placement_counts_entries_where_they_sit() {
    let (mut w, _r) = CompactMap::new(&Config::with_capacity(4_096).seed(7)).unwrap();
    // Collect keys whose first bucket is bucket 0.
    let same: Vec<u64> = (0..)
        .map(k)
        .filter(|&key| w.candidate_buckets(key).unwrap().0 == 0)
        .take(fp_cuckoo::SLOTS + 3)
        .collect();
    for (i, &key) in same.iter().enumerate() {
        w.insert(key, i as u16).unwrap();
    }
    let p = w.placement();
    assert_eq!(p.first + p.second, same.len());
    // Bucket 0 holds at most SLOTS of them; no path search moves a key out of its first bucket
    // while its second has room, so exactly the excess lives in second buckets.
    assert_eq!(p.first, fp_cuckoo::SLOTS);
    assert_eq!(p.second, 3);
    assert!((p.buckets_per_hit() - (1.0 + 3.0 / same.len() as f64)).abs() < 1e-12);

    // A sparsely filled table: every key finds room in its first bucket.
    let (mut w, _r) = CompactMap::new(&Config::with_capacity(100_000).seed(8)).unwrap();
    let mut firsts = std::collections::HashMap::new();
    let mut n = 0;
    for i in 0.. {
        let key = k(i);
        let b1 = w.candidate_buckets(key).unwrap().0;
        if firsts.insert(b1, ()).is_none() {
            w.insert(key, 1).unwrap();
            n += 1;
            if n == 1_000 {
                break;
            }
        }
    }
    assert_eq!(
        w.placement(),
        fp_cuckoo::Placement {
            first: 1_000,
            second: 0
        }
    );
}

#[test]
fn compact_value_bits_move_the_split_between_key_and_value() {
    // 4-bit values, 60-bit keys: a 12-bit VLAN above a 48-bit MAC.
    let (mut w, r) =
        CompactMap::with_value_bits(&Config::with_capacity(50_000).seed(9), 4).unwrap();
    let key = |i: u64| (i % 4095 + 1) << 48 | fp_hash::splitmix64(i) & fp_cuckoo::COMPACT_MAX_KEY;
    let mut n = 0u64;
    while n < 47_000 {
        assert_eq!(w.insert(key(n), (n % 15) as u16), Ok(None), "key #{n}");
        n += 1;
    }
    // The same MAC under two VLANs is two entries.
    let mac = 0x0200_0000_0001u64;
    assert_eq!(w.insert(1 << 48 | mac, 3), Ok(None));
    assert_eq!(w.insert(2 << 48 | mac, 4), Ok(None));
    assert_eq!(
        (r.get(1 << 48 | mac), r.get(2 << 48 | mac), r.get(mac)),
        (Some(3), Some(4), None)
    );
    let keys: Vec<u64> = (0..n).map(key).collect();
    let mut out = vec![None; keys.len()];
    r.get_batch(&keys, &mut out);
    for (i, o) in out.iter().enumerate() {
        assert_eq!(*o, Some((i as u64 % 15) as u16), "key #{i}");
    }
    // 15 = 2^4 - 1 does not fit the value field; a 61-bit key does not fit the key field.
    assert_eq!(w.insert(7, 15), Err(InsertError::ReservedValue));
    assert_eq!(w.insert(1 << 60, 1), Err(InsertError::KeyOutOfRange));
    assert_eq!(r.get(1 << 60), None);
    // Removals and updates see whole keys, not their low 48 bits.
    assert_eq!(w.remove(1 << 48 | mac), Some(3));
    assert_eq!(
        (r.get(1 << 48 | mac), r.get(2 << 48 | mac)),
        (None, Some(4))
    );
    let mut v: Vec<(u64, u16)> = Vec::new();
    w.retain_range(0, w.buckets(), |&k, &val| {
        v.push((k, val));
        true
    });
    assert_eq!(v.len(), n as usize + 1);
    assert!(v.contains(&(2 << 48 | mac, 4)));
}
