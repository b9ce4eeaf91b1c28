//! Property tests: random sequences of insert / update / remove / get / get_batch against std's
//! HashMap, for both layouts, on small tables so cuckoo moves and "table full" happen often.

use fp_cuckoo::{CompactMap, Config, GeneralMap, InsertError, Prefetch};
use proptest::prelude::*;
use std::collections::HashMap;

#[derive(Clone, Debug)]
enum Op {
    Insert(u64, u16),
    Update(u64, u16),
    Remove(u64),
    Get(u64),
    Batch(Vec<u64>),
}

fn op(keys: u64) -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..keys, 0u16..u16::MAX).prop_map(|(k, v)| Op::Insert(k, v)),
        1 => (0..keys, 0u16..u16::MAX).prop_map(|(k, v)| Op::Update(k, v)),
        2 => (0..keys).prop_map(Op::Remove),
        2 => (0..keys).prop_map(Op::Get),
        1 => proptest::collection::vec(0..keys, 0..70).prop_map(Op::Batch),
    ]
}

/// Spread small indices over the 48-bit key space (and keep some tiny keys, including 0).
fn key(i: u64) -> u64 {
    if i < 4 {
        i
    } else {
        fp_hash::splitmix64(i) & fp_cuckoo::COMPACT_MAX_KEY
    }
}

fn check_all(r: &fp_cuckoo::CompactReader, model: &HashMap<u64, u16>, universe: u64) {
    assert_eq!(r.len(), model.len());
    let keys: Vec<u64> = (0..universe).map(key).collect();
    let mut out = vec![None; keys.len()];
    r.get_batch(&keys, &mut out);
    for (k, o) in keys.iter().zip(&out) {
        assert_eq!(*o, model.get(k).copied(), "key {k:#x}");
        assert_eq!(r.get(*k), model.get(k).copied(), "key {k:#x}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn compact_matches_hashmap(ops in proptest::collection::vec(op(160), 1..400), cap in 8usize..120, seed: u64) {
        let cfg = Config::with_capacity(cap).seed(seed);
        let (mut w, r) = CompactMap::new(&cfg).unwrap();
        let mut model: HashMap<u64, u16> = HashMap::new();
        for op in ops {
            match op {
                Op::Insert(i, v) => {
                    let k = key(i);
                    match w.insert(k, v) {
                        Ok(prev) => {
                            prop_assert_eq!(prev, model.insert(k, v));
                        }
                        Err(InsertError::Full) => {
                            // Nothing may change on a failed insert.
                            prop_assert!(!model.contains_key(&k));
                            check_all(&r, &model, 160);
                        }
                        Err(e) => prop_assert!(false, "unexpected {e:?}"),
                    }
                }
                Op::Update(i, v) => {
                    let k = key(i);
                    let prev = w.update(k, v).unwrap();
                    let expect = model.get_mut(&k).map(|x| std::mem::replace(x, v));
                    prop_assert_eq!(prev, expect);
                }
                Op::Remove(i) => {
                    let k = key(i);
                    prop_assert_eq!(w.remove(k), model.remove(&k));
                }
                Op::Get(i) => {
                    let k = key(i);
                    prop_assert_eq!(r.get(k), model.get(&k).copied());
                    prop_assert_eq!(w.get(k), model.get(&k).copied());
                }
                Op::Batch(is) => {
                    let ks: Vec<u64> = is.into_iter().map(key).collect();
                    let mut out = vec![Some(0u16); ks.len()];
                    let mode = if ks.len().is_multiple_of(2) { Prefetch::TwoRound } else { Prefetch::Off };
                    r.get_batch_with(&ks, &mut out, mode);
                    for (k, o) in ks.iter().zip(out) {
                        prop_assert_eq!(o, model.get(k).copied());
                    }
                    // The writer's own batched lookup (no version protocol) agrees.
                    let mut out = vec![Some(0u16); ks.len()];
                    w.get_batch_with(&ks, &mut out, mode);
                    for (k, o) in ks.iter().zip(out) {
                        prop_assert_eq!(o, model.get(k).copied());
                    }
                }
            }
            prop_assert_eq!(r.len(), model.len());
        }
        check_all(&r, &model, 160);
    }

    #[test]
    fn general_matches_hashmap(ops in proptest::collection::vec(op(120), 1..300), cap in 8usize..100, seed: u64) {
        // An IPv4 5-tuple shaped key (13 bytes) with an 8-byte value: 3 words per slot.
        type K = [u8; 13];
        let mk = |i: u64| -> K {
            let mut k = [0u8; 13];
            k[..8].copy_from_slice(&fp_hash::splitmix64(i).to_le_bytes());
            k[8..12].copy_from_slice(&(i as u32).to_be_bytes());
            k[12] = (i % 3) as u8;
            k
        };
        let cfg = Config::with_capacity(cap).seed(seed);
        let (mut w, r) = GeneralMap::<K, u64>::new(&cfg).unwrap();
        let mut model: HashMap<K, u64> = HashMap::new();
        for op in ops {
            match op {
                Op::Insert(i, v) => {
                    let k = mk(i);
                    let v = (v as u64) << 40 | i;
                    match w.insert(k, v) {
                        Ok(prev) => prop_assert_eq!(prev, model.insert(k, v)),
                        Err(InsertError::Full) => prop_assert!(!model.contains_key(&k)),
                        Err(e) => prop_assert!(false, "unexpected {e:?}"),
                    }
                }
                Op::Update(i, v) => {
                    let k = mk(i);
                    let prev = w.update(k, v as u64).unwrap();
                    let expect = model.get_mut(&k).map(|x| std::mem::replace(x, v as u64));
                    prop_assert_eq!(prev, expect);
                }
                Op::Remove(i) => {
                    let k = mk(i);
                    prop_assert_eq!(w.remove(k), model.remove(&k));
                }
                Op::Get(i) => {
                    let k = mk(i);
                    prop_assert_eq!(r.get(k), model.get(&k).copied());
                }
                Op::Batch(is) => {
                    let ks: Vec<K> = is.into_iter().map(mk).collect();
                    let mut out = vec![None; ks.len()];
                    r.get_batch(&ks, &mut out);
                    for (k, o) in ks.iter().zip(out) {
                        prop_assert_eq!(o, model.get(k).copied());
                    }
                    let mut out = vec![Some(7); ks.len()];
                    w.get_batch(&ks, &mut out);
                    for (k, o) in ks.iter().zip(out) {
                        prop_assert_eq!(o, model.get(k).copied());
                    }
                }
            }
        }
        prop_assert_eq!(r.len(), model.len());
        for i in 0..120 {
            let k = mk(i);
            prop_assert_eq!(r.get(k), model.get(&k).copied());
        }
    }
}

#[test]
fn compact_rejects_what_it_cannot_store() {
    let (mut w, r) = CompactMap::new(&Config::with_capacity(100)).unwrap();
    assert_eq!(w.insert(1 << 48, 1), Err(InsertError::KeyOutOfRange));
    assert_eq!(w.insert(5, u16::MAX), Err(InsertError::ReservedValue));
    assert_eq!(r.get(1 << 48), None);
    assert_eq!(w.insert(fp_cuckoo::COMPACT_MAX_KEY, u16::MAX - 1), Ok(None));
    assert_eq!(r.get(fp_cuckoo::COMPACT_MAX_KEY), Some(u16::MAX - 1));
    assert_eq!(w.insert(0, 0), Ok(None));
    assert_eq!(r.get(0), Some(0));
    assert_eq!(r.len(), 2);
}

#[test]
fn ipv6_sized_entries() {
    // A 37-byte IPv6 5-tuple with an 8-byte value: 46 bytes, 6 words per slot.
    let (mut w, r) = GeneralMap::<[u8; 37], u64>::new(&Config::with_capacity(1000)).unwrap();
    for i in 0..900u64 {
        let mut k = [0u8; 37];
        k[..8].copy_from_slice(&i.to_le_bytes());
        k[36] = 6;
        w.insert(k, i * 3).unwrap();
    }
    for i in 0..900u64 {
        let mut k = [0u8; 37];
        k[..8].copy_from_slice(&i.to_le_bytes());
        k[36] = 6;
        assert_eq!(r.get(k), Some(i * 3));
        k[36] = 17;
        assert_eq!(r.get(k), None);
    }
    assert_eq!(r.stats().slot_bytes, 48);
}

#[test]
fn retain_range_walks_the_table() {
    let (mut w, r) = CompactMap::new(&Config::with_capacity(5000)).unwrap();
    for k in 0..4000u64 {
        w.insert(k, (k % 7) as u16).unwrap();
    }
    // Remove every key whose value is 0, a slice of buckets at a time.
    let n = w.buckets();
    let mut at = 0;
    let mut visited = 0;
    while visited < n {
        at = w.retain_range(at, 100, |_, v| *v != 0);
        visited += 100;
    }
    for k in 0..4000u64 {
        assert_eq!(
            r.get(k),
            if k.is_multiple_of(7) {
                None
            } else {
                Some((k % 7) as u16)
            }
        );
    }
    assert_eq!(r.len(), 4000 - 4000usize.div_ceil(7));
}

/// Every shape of the general layout: value word-aligned after the tag (13+8), packed right after
/// the tag (8+2: aligning would cost a word), a key of whole words (16+8: the tag opens a word),
/// keys shorter than a word (5+4, 3+1), each filled to cuckoo-move depth, read back singly and in
/// batches, updated, and swept with `retain_range` (which decodes keys and values of stored slots).
#[test]
fn general_layout_shapes() {
    fn shape<K, V>(mk: impl Fn(u64) -> K, val: impl Fn(u64) -> V, words: usize)
    where
        K: fp_cuckoo::FixedBytes + Eq + std::hash::Hash + std::fmt::Debug,
        V: fp_cuckoo::FixedBytes + Eq + std::fmt::Debug,
    {
        let n = 3000u64;
        let (mut w, r) =
            GeneralMap::<K, V>::new(&Config::with_capacity(n as usize).seed(9)).unwrap();
        assert_eq!(r.stats().slot_bytes, words * 8);
        for i in 0..n {
            assert_eq!(w.insert(mk(i), val(i)), Ok(None), "insert {i}");
        }
        let keys: Vec<K> = (0..n + 100).map(&mk).collect();
        // At 95 % load, about 1 bucket in 25 holds two keys with equal 7-bit tags: the scan's
        // several-candidates path runs here too.
        let mut out = vec![None; keys.len()];
        r.get_batch(&keys, &mut out);
        let mut owner = vec![None; keys.len()];
        w.get_batch(&keys, &mut owner);
        assert_eq!(
            owner, out,
            "the writer's batched lookup differs from the reader's"
        );
        for (i, o) in out.iter().enumerate() {
            let want = (i as u64) < n;
            assert_eq!(o.is_some(), want, "batch {i}");
            if want {
                assert_eq!(*o, Some(val(i as u64)));
                assert_eq!(r.get(mk(i as u64)), Some(val(i as u64)));
            }
        }
        assert_eq!(w.update(mk(7), val(8)), Ok(Some(val(7))));
        assert_eq!(r.get(mk(7)), Some(val(8)));
        // Remove the odd keys by their recovered key; the even ones stay with their values.
        let mut at = 0;
        loop {
            at = w.retain_range(at, 64, |k: &K, _: &V| {
                (0..n).find(|&i| mk(i) == *k).expect("a stored key") % 2 == 0
            });
            if at == 0 {
                break;
            }
        }
        for i in 0..n {
            let want = (i % 2 == 0).then(|| val(if i == 7 { 8 } else { i }));
            assert_eq!(r.get(mk(i)), want, "after retain {i}");
        }
    }
    let k13 = |i: u64| {
        let mut k = [0u8; 13];
        k[..8].copy_from_slice(&fp_hash::splitmix64(i).to_le_bytes());
        k[12] = i as u8;
        k
    };
    shape(k13, |i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15), 3);
    shape(fp_hash::splitmix64, |i| (i % 60_000) as u16, 2);
    shape(
        |i| fp_hash::splitmix64(i) as u128 | (i as u128) << 64,
        |i| i ^ 0xFF00,
        4,
    );
    shape(
        |i| {
            let x = fp_hash::splitmix64(i).to_le_bytes();
            [x[0], x[1], x[2], (i >> 8) as u8, i as u8]
        },
        |i| i as u32 | 0x8000_0000,
        2,
    );
    shape(
        |i| [(i >> 16) as u8, (i >> 8) as u8, i as u8],
        |i| (i % 251) as u8,
        1,
    );
}
