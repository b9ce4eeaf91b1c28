//! The quotiented compact map against a `HashMap` model (random operations on a small table, so
//! inserts fill it, move entries along cuckoo paths and meet a full table), and under concurrent
//! readers while the writer churns a nearly full table.

use fp_cuckoo::{Config, InsertError, QuotientMap};
use proptest::prelude::*;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

const MASK48: u64 = (1 << 48) - 1;

fn key(i: u64) -> u64 {
    fp_hash::splitmix64(i) & MASK48
}

#[derive(Clone, Debug)]
enum Op {
    Insert(u64, u16),
    Remove(u64),
    Get(u64),
}

fn op() -> impl Strategy<Value = Op> {
    // Keys from a pool a little larger than the table, so the table fills and keys recur.
    let k = (0u64..400).prop_map(key);
    prop_oneof![
        4 => (k.clone(), 0u16..u16::MAX).prop_map(|(k, v)| Op::Insert(k, v)),
        1 => k.clone().prop_map(Op::Remove),
        2 => k.prop_map(Op::Get),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn behaves_like_a_map(ops in proptest::collection::vec(op(), 1..1500), seed in any::<u64>()) {
        let mut c = Config::with_capacity(300).seed(seed);
        c.load_factor = 1.0;
        let (mut w, r) = QuotientMap::new(&c).unwrap();
        let mut model: HashMap<u64, u16> = HashMap::new();
        for op in ops {
            match op {
                Op::Insert(k, v) => match w.insert(k, v) {
                    Ok(old) => prop_assert_eq!(old, model.insert(k, v)),
                    Err(InsertError::Full) => prop_assert!(!model.contains_key(&k)),
                    Err(e) => prop_assert!(false, "{e}"),
                },
                Op::Remove(k) => prop_assert_eq!(w.remove(k), model.remove(&k)),
                Op::Get(k) => {
                    prop_assert_eq!(r.get(k), model.get(&k).copied());
                    prop_assert_eq!(w.get(k), model.get(&k).copied());
                }
            }
            prop_assert_eq!(w.len(), model.len());
        }
        // Every entry comes back whole, with its key.
        let mut all = HashMap::new();
        w.for_each(|k, v| { all.insert(k, v); });
        prop_assert_eq!(&all, &model);
        let keys: Vec<u64> = (0..400).map(key).collect();
        let mut out = vec![None; keys.len()];
        r.get_batch(&keys, &mut out);
        for (k, o) in keys.iter().zip(&out) {
            prop_assert_eq!(*o, model.get(k).copied());
        }
        let (first, second) = w.placement();
        prop_assert_eq!(first + second, model.len());
    }
}

#[test]
fn readers_never_miss_stable_keys_during_cuckoo_churn() {
    const CAP: usize = 40_000;
    let (mut w, r) = QuotientMap::new(&Config::with_capacity(CAP).seed(5)).unwrap();
    let slots = r.stats().slots() as u64;
    let stable = slots * 86 / 100;
    let churn = slots * 9 / 100;
    let value = |k: u64| (k % 65_000) as u16;
    for i in 0..stable + churn {
        w.insert(key(i), value(key(i))).unwrap();
    }
    let done = Arc::new(AtomicBool::new(false));
    let lookups = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = (0..2)
        .map(|t| {
            let (r, done, lookups) = (r.clone(), done.clone(), lookups.clone());
            std::thread::spawn(move || {
                let mut i = t as u64;
                let mut keys = [0u64; 80];
                let mut out = [None; 80];
                let mut n = 0;
                while !done.load(Ordering::Relaxed) {
                    let k = key(i % stable);
                    assert_eq!(r.get(k), Some(value(k)), "single lookup lost {k:#x}");
                    let len = if i.is_multiple_of(4) { 16 } else { 80 };
                    for (x, kk) in keys[..len].iter_mut().enumerate() {
                        *kk = key((i * 7 + x as u64 * 1013) % stable);
                    }
                    r.get_batch(&keys[..len], &mut out[..len]);
                    for (kk, o) in keys[..len].iter().zip(&out[..len]) {
                        assert_eq!(*o, Some(value(*kk)), "batched lookup lost {kk:#x}");
                    }
                    i += 2;
                    n += 1 + len as u64;
                }
                lookups.fetch_add(n, Ordering::Relaxed);
            })
        })
        .collect();
    let (mut next, mut oldest) = (stable + churn, stable);
    for _ in 0..300_000 {
        let k = key(next);
        if w.insert(k, value(k)).unwrap().is_none() {
            next += 1;
        }
        assert!(w.remove(key(oldest)).is_some());
        oldest += 1;
    }
    done.store(true, Ordering::Relaxed);
    for h in readers {
        h.join().unwrap();
    }
    assert!(w.moves() > 1000, "the churn moved entries: {}", w.moves());
    assert!(lookups.load(Ordering::Relaxed) > 0);
}
