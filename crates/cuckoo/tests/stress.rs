//! Multi-threaded stress test: one writer churns inserts and deletes on a nearly full table, so most
//! inserts move entries along cuckoo paths (including the stable keys), while reader threads look up
//! a set of stable keys that never leave the table. No reader may ever see "not found" or a wrong
//! value for them: that would be a torn read the version protocol failed to catch.

use fp_cuckoo::{CompactMap, Config, GeneralMap, Prefetch};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

fn key(i: u64) -> u64 {
    fp_hash::splitmix64(i) & fp_cuckoo::COMPACT_MAX_KEY
}

fn value(k: u64) -> u16 {
    (k % 65_000) as u16
}

#[test]
fn readers_never_miss_stable_keys_during_cuckoo_churn() {
    const CAP: usize = 40_000;
    let (mut w, r) = CompactMap::new(&Config::with_capacity(CAP).seed(11)).unwrap();
    let slots = r.stats().slots as u64;
    let stable = slots * 86 / 100; // stable keys: 86 % of the slots
    let churn = slots * 9 / 100; // churn keys keep the table at ~95 %
    for i in 0..stable {
        w.insert(key(i), value(key(i))).unwrap();
    }
    for j in 0..churn {
        let k = key(stable + j);
        w.insert(k, value(k)).unwrap();
    }
    let done = Arc::new(AtomicBool::new(false));
    let lookups = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = (0..2)
        .map(|t| {
            let r = r.clone();
            let done = done.clone();
            let lookups = lookups.clone();
            std::thread::spawn(move || {
                let mut i = t as u64;
                // Batches of 16 (one chunk) and of 80 (three chunks, pipelined across chunks).
                let mut keys = [0u64; 80];
                let mut out = [None; 80];
                let mut n = 0u64;
                while !done.load(Ordering::Relaxed) {
                    // Alternate single and batched lookups.
                    let k = key(i % stable);
                    assert_eq!(r.get(k), Some(value(k)), "single lookup lost key {k:#x}");
                    let len = if i.is_multiple_of(4) { 16 } else { 80 };
                    let (keys, out) = (&mut keys[..len], &mut out[..len]);
                    for (x, kk) in keys.iter_mut().enumerate() {
                        *kk = key((i * 7 + x as u64 * 1013) % stable);
                    }
                    let mode = if i.is_multiple_of(2) {
                        Prefetch::TwoRound
                    } else {
                        Prefetch::Off
                    };
                    r.get_batch_with(keys, out, mode);
                    for (kk, o) in keys.iter().zip(out.iter()) {
                        assert_eq!(*o, Some(value(*kk)), "batched lookup lost key {kk:#x}");
                    }
                    i += 2;
                    n += 1 + len as u64;
                }
                lookups.fetch_add(n, Ordering::Relaxed);
            })
        })
        .collect();

    // Churn: remove the oldest churn key, insert a fresh one; keeps ~95 % occupancy.
    let mut next = stable + churn;
    let mut oldest = stable;
    let mut full = 0u64;
    for _ in 0..400_000 {
        let k = key(next);
        match w.insert(k, value(k)) {
            Ok(None) => next += 1,
            Ok(Some(_)) => panic!("duplicate key"),
            Err(_) => full += 1,
        }
        w.remove(key(oldest));
        oldest += 1;
        // Keep the table at its high-water mark: insert again after a delete.
        let k = key(next);
        if w.insert(k, value(k)).is_ok() {
            next += 1;
        }
        w.remove(key(oldest));
        oldest += 1;
    }
    done.store(true, Ordering::Relaxed);
    for h in readers {
        h.join().expect("reader saw a missing or wrong value");
    }
    let (moves, longest) = w.displacements();
    eprintln!(
        "churn: {} inserts, {full} full, {moves} moves, longest path {longest}, {} lookups, load {:.1}%",
        next - stable - churn,
        lookups.load(Ordering::Relaxed),
        100.0 * r.stats().load()
    );
    // The test is only meaningful if the writer really displaced entries, with multi-step paths.
    assert!(moves > 50_000, "only {moves} displacements");
    assert!(longest >= 2, "longest cuckoo path {longest}");
    assert!(lookups.load(Ordering::Relaxed) > 0);
    for i in 0..stable {
        assert_eq!(r.get(key(i)), Some(value(key(i))));
    }
}

#[test]
fn general_layout_readers_never_see_torn_entries() {
    // Multi-word entries: a torn read would show a key with another key's value. Values encode
    // their key, so any mix-up is detected.
    type K = [u8; 13];
    let mk = |i: u64| -> K {
        let mut b = [0u8; 13];
        b[..8].copy_from_slice(&fp_hash::splitmix64(i).to_le_bytes());
        b[8..12].copy_from_slice(&(i as u32).to_le_bytes());
        b
    };
    let val = |i: u64| -> (u64, u64) { (i, !i) };
    let (mut w, r) = GeneralMap::<K, (u64, u64)>::new(&Config::with_capacity(20_000)).unwrap();
    let slots = r.stats().slots as u64;
    let stable = slots * 85 / 100;
    for i in 0..stable {
        w.insert(mk(i), val(i)).unwrap();
    }
    let done = Arc::new(AtomicBool::new(false));
    let reader = {
        let r = r.clone();
        let done = done.clone();
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !done.load(Ordering::Relaxed) {
                let k = i % stable;
                assert_eq!(r.get(mk(k)), Some(val(k)));
                i += 1;
            }
        })
    };
    let mut next = stable;
    for round in 0..150_000u64 {
        let _ = w.insert(mk(next), val(next));
        next += 1;
        // Update stable values in place with the same (key-derived) value: rewrites all words.
        let s = round % stable;
        w.update(mk(s), val(s)).unwrap();
        if next - stable > slots / 10 {
            w.remove(mk(next - slots / 10));
        }
    }
    done.store(true, Ordering::Relaxed);
    reader.join().expect("reader saw a torn or missing entry");
    assert!(w.displacements().0 > 10_000);
}
