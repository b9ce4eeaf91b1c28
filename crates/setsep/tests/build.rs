//! Every key of the set maps to its value: random sets, every setting, with and without fallback;
//! determinism across thread counts; golden output; error values.

use fp_setsep::{build, Config, Error, Updater};
use proptest::prelude::*;

fn keys_values(seed: u64, n: usize, vbits: u8) -> (Vec<u64>, Vec<u16>) {
    let mut keys = Vec::with_capacity(n);
    let mut vals = Vec::with_capacity(n);
    let mut r = seed;
    let mut seen = std::collections::HashSet::new();
    while keys.len() < n {
        r = fp_hash::splitmix64(r);
        if seen.insert(r) {
            keys.push(r);
            vals.push((fp_hash::splitmix64(r ^ 0xABCD) % (1u64 << vbits)) as u16);
        }
    }
    (keys, vals)
}

const SETTINGS: &[(u8, u8)] = &[
    (16, 8),
    (8, 16),
    (16, 16),
    (12, 8),
    (6, 8),
    (12, 4),
    (10, 32),
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]
    #[test]
    fn every_key_maps_to_its_value(seed: u64, n in 0usize..3000, vbits in 1u8..=5, s in 0usize..SETTINGS.len(), threads in 1usize..=3) {
        let (x, y) = SETTINGS[s];
        let (keys, vals) = keys_values(seed, n, vbits);
        let cfg = Config::new(vbits).setting(x, y).seed(seed ^ 1).threads(threads);
        let (t, _) = build(&cfg, &keys, &vals).unwrap();
        for (&k, &v) in keys.iter().zip(&vals) {
            prop_assert_eq!(t.get(k), v);
        }
        let mut out = vec![0u16; keys.len()];
        t.get_batch(&keys, &mut out);
        prop_assert_eq!(&out, &vals);
        // Any key gets a value in range.
        for i in 0..100u64 {
            prop_assert!((t.get(i.wrapping_mul(0x1234_5677)) as u32) < (1 << vbits));
        }
        let st = t.stats();
        prop_assert_eq!(st.keys, n);
        prop_assert!(st.fallback_keys <= n);
    }
}

#[test]
fn fallback_keys_map_correctly() {
    // A 6-bit index (63 tries) and 8-bit array cannot separate most 16-key groups: many fallbacks.
    let (keys, vals) = keys_values(3, 20_000, 2);
    let cfg = Config::new(2).setting(6, 8);
    let (t, st) = build(&cfg, &keys, &vals).unwrap();
    assert!(st.fallback_groups > 100, "{st:?}");
    assert!(t.stats().fallback_keys > 1000);
    assert!(keys.iter().zip(&vals).all(|(&k, &v)| t.get(k) == v));
    let mut out = vec![0; keys.len()];
    t.get_batch(&keys, &mut out);
    assert_eq!(out, vals);
}

#[test]
fn paper_default_has_no_fallback_and_meets_the_space_bound() {
    for vbits in 1..=4u8 {
        let (keys, vals) = keys_values(11, 40_000, vbits);
        let (t, st) = build(&Config::new(vbits), &keys, &vals).unwrap();
        let s = t.stats();
        assert_eq!(st.fallback_groups, 0, "{vbits}-bit: {s}");
        // 0.5 + 1.5 v bits per key, plus the block-packing rounding (< 0.6 bit).
        let bound = 0.5 + 1.5 * vbits as f64;
        assert!(s.bits_per_key() < bound + 0.6, "{vbits}-bit: {s}");
    }
}

#[test]
fn same_table_for_any_thread_count_and_golden() {
    let (keys, vals) = keys_values(5, 10_000, 2);
    let probe: Vec<u64> = (0..20_000u64)
        .map(|i| fp_hash::splitmix64(i ^ 0xF00))
        .collect();
    let sig = |threads: usize| {
        let (t, _) = build(&Config::new(2).seed(9).threads(threads), &keys, &vals).unwrap();
        // Values of keys outside the set depend on every table bit: a fingerprint of the bytes.
        let out: Vec<u64> = probe.iter().map(|&k| t.get(k) as u64).collect();
        fp_hash::hash_words(0, &out)
    };
    let one = sig(1);
    assert_eq!(one, sig(2));
    assert_eq!(one, sig(3));
    // Golden: part of the format shared by every node (changing it breaks mixed-version clusters).
    assert_eq!(one, GOLDEN_SIG);
}

const GOLDEN_SIG: u64 = 9135360885521272612;

#[test]
fn empty_and_tiny_sets() {
    let (t, _) = build(&Config::new(1), &[], &[]).unwrap();
    assert!(t.is_empty());
    let _ = t.get(42);
    let (t, _) = build(&Config::new(4), &[7], &[13]).unwrap();
    assert_eq!(t.get(7), 13);
}

#[test]
fn errors_are_values() {
    assert!(matches!(
        build(&Config::new(2), &[1, 2], &[1, 4]),
        Err(Error::ValueTooWide {
            key: 2,
            value: 4,
            bits: 2
        })
    ));
    assert!(matches!(
        build(&Config::new(2), &[1, 2], &[1]),
        Err(Error::Lengths { .. })
    ));
    assert!(matches!(
        build(&Config::new(2), &[5, 5], &[1, 2]),
        Err(Error::ConflictingValues { key: 5 })
    ));
    // Equal duplicates are fine.
    let (t, _) = build(&Config::new(2), &[5, 5], &[3, 3]).unwrap();
    assert_eq!(t.get(5), 3);
    assert!(matches!(
        Updater::build(&Config::new(2), &[5, 5], &[1, 2]),
        Err(Error::ConflictingValues { key: 5 })
    ));
    for cfg in [
        Config::new(0),
        Config::new(17),
        Config::new(1).setting(0, 8),
        Config::new(1).setting(16, 12),
        Config::new(1).threads(0),
    ] {
        let e = build(&cfg, &[1], &[0]).err().expect("bad config accepted");
        assert!(matches!(e, Error::Config { .. }), "{e}");
        assert!(e.to_string().contains("setsep config"));
    }
}
