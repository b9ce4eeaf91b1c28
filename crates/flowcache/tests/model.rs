//! Property tests against a model: a `HashMap` of the last value inserted for every key.
//!
//! A flow cache may forget anything, but it must never invent: every value a lookup returns is the
//! latest value inserted for that key (the check compares the full key, as a caller's check would),
//! also when keys are inserted again while present (an update) and other keys share their
//! fingerprint and buckets.
//! A key just inserted is found. The cache never holds more entries than slots, and the number of
//! occupied slots never decreases except by a remove or an insert that updates (and empties other
//! same-fingerprint entries).

use fp_flowcache::{Blp, Config, CuckooLite, Design, FlowCache, Isa, Policy, SetAssoc4, SetAssoc8};
use fp_flowcache::{DcBubble, Insert, Pblru, Random};
use proptest::prelude::*;
use std::collections::HashMap;

#[derive(Clone, Debug)]
enum Op {
    Lookup(u16),
    Insert(u16, u16),
    Batch(Vec<u16>),
    Remove(u16),
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    // Keys from a universe of 300 in a cache of 64 slots: plenty of evictions.
    let key = 0u16..300;
    let op = prop_oneof![
        4 => key.clone().prop_map(Op::Lookup),
        4 => (key.clone(), any::<u16>()).prop_map(|(k, v)| Op::Insert(k, v)),
        1 => proptest::collection::vec(key.clone(), 0..70).prop_map(Op::Batch),
        1 => key.prop_map(Op::Remove),
    ];
    proptest::collection::vec(op, 1..400)
}

/// Key k's hash: few distinct fingerprints (k % 7) so that collisions happen constantly.
fn hash(k: u16) -> u64 {
    let h = fp_hash::hash_u64(9, k as u64);
    (h & !0xffff) | (k % 7 + 1) as u64
}

/// Entries: value slot v of the "entry table" holds (key, payload). The cache value is the index;
/// here, to keep the model simple, the value stored in the cache packs the key (9 bits) and 7 bits
/// of payload, and the check compares the key bits.
fn pack(k: u16, v: u16) -> u16 {
    (k << 7) | (v & 0x7f)
}

fn check<D: Design, P: Policy + Default>(ops: &[Op], isa: Isa) -> Result<(), TestCaseError> {
    let mut cache: FlowCache<D, P> = FlowCache::new(&Config::with_entries(64).isa(isa)).unwrap();
    let mut model: HashMap<u16, u16> = HashMap::new();
    let mut occupied = 0;
    for op in ops {
        match op {
            Op::Lookup(k) => {
                if let Some(v) = cache.lookup(hash(*k), |v| v >> 7 == *k) {
                    prop_assert_eq!(Some(&v), model.get(k), "{} invented a value", D::NAME);
                }
            }
            Op::Insert(k, v) => {
                let p = pack(*k, *v);
                if cache.insert(hash(*k), p) == Insert::Updated {
                    // Other entries with the key's fingerprint may have been emptied.
                    occupied = 0;
                }
                model.insert(*k, p);
                prop_assert_eq!(cache.peek(hash(*k), |x| x >> 7 == *k), Some(p));
            }
            Op::Batch(keys) => {
                let hs: Vec<u64> = keys.iter().map(|&k| hash(k)).collect();
                let mut out = vec![None; hs.len()];
                cache.lookup_batch(&hs, |i, v| v >> 7 == keys[i], &mut out);
                for (k, o) in keys.iter().zip(&out) {
                    if let Some(v) = o {
                        prop_assert_eq!(Some(v), model.get(k));
                    }
                }
            }
            Op::Remove(k) => {
                if let Some(v) = cache.remove(hash(*k), |v| v >> 7 == *k) {
                    prop_assert_eq!(Some(&v), model.get(k));
                }
                prop_assert_eq!(cache.peek(hash(*k), |v| v >> 7 == *k), None);
                occupied = cache.occupancy();
            }
        }
        let now = cache.occupancy();
        prop_assert!(
            now >= occupied,
            "occupancy fell from {} to {}",
            occupied,
            now
        );
        prop_assert!(now <= cache.capacity() + D::BUFFER * D::WAYS);
        occupied = now;
    }
    Ok(())
}

fn all(ops: &[Op]) -> Result<(), TestCaseError> {
    for isa in [Isa::scalar(), Isa::best()] {
        check::<SetAssoc4, Random>(ops, isa)?;
        check::<SetAssoc4, Pblru>(ops, isa)?;
        check::<SetAssoc4, DcBubble>(ops, isa)?;
        check::<SetAssoc8, Random>(ops, isa)?;
        check::<SetAssoc8, Pblru>(ops, isa)?;
        check::<CuckooLite, Random>(ops, isa)?;
        check::<CuckooLite, DcBubble>(ops, isa)?;
        check::<Blp, Random>(ops, isa)?;
        check::<Blp, Pblru>(ops, isa)?;
        check::<Blp, DcBubble>(ops, isa)?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn cache_never_invents_values(ops in ops()) {
        all(&ops)?;
    }
}
