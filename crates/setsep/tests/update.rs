//! Updates: group-local changes leave every other key's value unchanged; a random sequence of
//! inserts, value changes and removals against a `HashMap` model, on several replicas; readers
//! running concurrently with updates never see a wrong value.

use fp_setsep::{Change, Config, SetSep, Updater};
use proptest::prelude::*;
use std::collections::HashMap;

fn keys_values(seed: u64, n: usize, vbits: u8) -> (Vec<u64>, Vec<u16>) {
    let keys: Vec<u64> = (0..n as u64)
        .map(|i| fp_hash::splitmix64(seed.wrapping_add(i)))
        .collect();
    let vals = keys
        .iter()
        .map(|&k| (fp_hash::splitmix64(k ^ 0x77) % (1u64 << vbits)) as u16)
        .collect();
    (keys, vals)
}

#[test]
fn an_update_changes_no_other_key() {
    for (x, y) in [(16u8, 8u8), (8, 16), (6, 8)] {
        let (keys, mut vals) = keys_values(1, 4000, 2);
        let cfg = Config::new(2).setting(x, y).capacity(6000);
        let (mut up, t) = Updater::build(&cfg, &keys, &vals).unwrap();
        let (new_keys, new_vals) = keys_values(99, 1500, 2);
        let mut all_keys = keys.clone();
        let mut kinds: HashMap<String, u32> = HashMap::new();
        for step in 0..1500 {
            // Alternate: change an existing key's value, add a new key.
            let (k, v) = if step % 2 == 0 {
                let i = (fp_hash::splitmix64(step) % keys.len() as u64) as usize;
                vals[i] = (vals[i] + 1) % 4;
                (keys[i], vals[i])
            } else {
                all_keys.push(new_keys[step as usize]);
                (new_keys[step as usize], new_vals[step as usize])
            };
            let before: Vec<u16> = all_keys.iter().map(|&k| t.get(k)).collect();
            let c = up.insert(k, v).unwrap();
            *kinds.entry(format!("{c:?}")).or_default() += 1;
            assert_eq!(
                t.get(k),
                v,
                "{x}+{y} step {step}: updated key wrong after {c:?}"
            );
            for (i, &ok) in all_keys.iter().enumerate() {
                if ok != k {
                    assert_eq!(
                        t.get(ok),
                        before[i],
                        "{x}+{y} step {step}: key {ok:#x} changed by {c:?}"
                    );
                }
            }
        }
        assert!(
            kinds.contains_key("Absorbed") && kinds.contains_key("Rebuilt"),
            "{x}+{y}: {kinds:?}"
        );
    }
}

#[derive(Clone, Debug)]
enum Op {
    Set(u16, u16),
    Remove(u16),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (any::<u16>(), any::<u16>()).prop_map(|(k, v)| Op::Set(k, v)),
        1 => any::<u16>().prop_map(Op::Remove),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn matches_a_model_on_every_replica(seed: u64, n0 in 0usize..3000, vbits in 1u8..=3,
                                        setting in 0usize..3, ops in prop::collection::vec(op(), 1..400)) {
        let (x, y) = [(16u8, 8u8), (8, 16), (5, 8)][setting];
        let (keys, vals) = keys_values(seed, n0, vbits);
        let cfg = Config::new(vbits).setting(x, y).capacity(n0 + 2000).seed(seed);
        let (mut up, r0) = Updater::build(&cfg, &keys, &vals).unwrap();
        let r1 = up.replica().unwrap();
        let mut model: HashMap<u64, u16> = keys.iter().copied().zip(vals.iter().copied()).collect();
        // Op keys index a pool mixing existing and new keys.
        let pool = |i: u16| -> u64 {
            if n0 > 0 && i.is_multiple_of(2) { keys[i as usize % n0] } else { fp_hash::splitmix64(i as u64 ^ seed ^ 0xBEEF) }
        };
        let mask = (1u16 << vbits) - 1;
        for o in &ops {
            match *o {
                Op::Set(i, v) => {
                    let (k, v) = (pool(i), v & mask);
                    let c = up.insert(k, v).unwrap();
                    if model.insert(k, v) == Some(v) { prop_assert_eq!(c, Change::Unchanged); }
                }
                Op::Remove(i) => {
                    let k = pool(i);
                    prop_assert_eq!(up.remove(k).unwrap(), model.remove(&k));
                }
            }
        }
        prop_assert_eq!(up.len(), model.len());
        let r2 = up.replica().unwrap(); // a replica made after the updates
        for t in [&r0, &r1, &r2] {
            prop_assert_eq!(t.len(), model.len());
            for (&k, &v) in &model {
                prop_assert_eq!(t.get(k), v);
                prop_assert_eq!(up.get(k), Some(v));
            }
        }
    }
}

#[test]
fn groups_leave_the_fallback_when_they_shrink() {
    let (keys, vals) = keys_values(4, 8000, 2);
    let cfg = Config::new(2).setting(6, 8).capacity(8000);
    let (mut up, t) = Updater::build(&cfg, &keys, &vals).unwrap();
    let fb0 = up.fallback_len();
    assert!(fb0 > 500);
    for &k in &keys[..4000] {
        up.remove(k).unwrap();
    }
    assert!(
        up.fallback_len() < fb0 / 3,
        "{} of {fb0}",
        up.fallback_len()
    );
    for (&k, &v) in keys[4000..].iter().zip(&vals[4000..]) {
        assert_eq!(t.get(k), v);
    }
}

#[test]
fn value_too_wide_changes_nothing() {
    let (keys, vals) = keys_values(2, 100, 1);
    let (mut up, t) = Updater::build(&Config::new(1), &keys, &vals).unwrap();
    assert!(up.insert(keys[0], 2).is_err());
    assert_eq!(up.get(keys[0]), Some(vals[0]));
    assert_eq!(t.get(keys[0]), vals[0]);
}

/// Readers on other threads while the writer changes values: every unchanged key always reads its
/// value, every changed key reads either its old or its new value.
#[test]
fn concurrent_readers_see_old_or_new() {
    let (keys, vals) = keys_values(8, 20_000, 2);
    let cfg = Config::new(2).setting(8, 16).capacity(25_000);
    let (mut up, t) = Updater::build(&cfg, &keys, &vals).unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    // The writer flips the values of the first 2000 keys between two values (v and v^1).
    std::thread::scope(|s| {
        let reader = |t: SetSep| {
            let (keys, vals, stop) = (&keys, &vals, &stop);
            move || {
                let mut rounds = 0u64;
                let mut out = [0u16; 32];
                while !stop.load(std::sync::atomic::Ordering::Relaxed) || rounds == 0 {
                    for (c, (ck, cv)) in keys.chunks(32).zip(vals.chunks(32)).enumerate() {
                        let o = &mut out[..ck.len()];
                        t.get_batch(ck, o);
                        for j in 0..ck.len() {
                            let i = c * 32 + j;
                            if i < 2000 {
                                assert!(o[j] == cv[j] || o[j] == cv[j] ^ 1, "key {i}: {}", o[j]);
                            } else {
                                assert_eq!(o[j], cv[j], "unchanged key {i}");
                            }
                        }
                    }
                    rounds += 1;
                }
                rounds
            }
        };
        let h1 = s.spawn(reader(t.clone()));
        let h2 = s.spawn(reader(up.replica().unwrap()));
        for round in 0..6 {
            for i in 0..2000 {
                let v = if round % 2 == 0 { vals[i] ^ 1 } else { vals[i] };
                up.insert(keys[i], v).unwrap();
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(h1.join().unwrap() > 0);
        assert!(h2.join().unwrap() > 0);
    });
}
