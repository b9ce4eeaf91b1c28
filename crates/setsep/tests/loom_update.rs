//! Model check of the block version protocol with loom: one writer changes a key's value (which
//! rewrites its block) while a reader looks up that key and an unchanged key of the same block. In
//! every interleaving loom explores, the changed key reads its old or its new value — never a value
//! mixed from two versions of the block — and the unchanged key reads its value.
//!
//! Run with: `RUSTFLAGS="--cfg loom" cargo test -p fp-setsep --test loom_update --release`
#![cfg(loom)]

use fp_setsep::{Config, Updater};

#[test]
fn reader_sees_old_or_new_block() {
    // 60 keys in one block (2-bit values, 9 groups of ~7 keys). The changed key flips both value
    // bits, so a read mixing the two versions of its group (one bit's record from each) gives a
    // third value, which the assertion catches.
    let keys: Vec<u64> = (1..=60u64)
        .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .collect();
    let vals: Vec<u16> = keys.iter().map(|&k| (k >> 7) as u16 & 3).collect();
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(2);
    b.check(move || {
        let cfg = Config::new(2).capacity(60).seed(3);
        let (mut up, t) = Updater::build(&cfg, &keys, &vals).unwrap();
        let (changed, other) = (keys[0], keys[1]);
        let (old, new) = (vals[0], vals[0] ^ 3);
        let reader = loom::thread::spawn({
            let t = t.clone();
            move || (t.get(changed), t.get(other))
        });
        up.insert(changed, new).unwrap();
        let (c, o) = reader.join().unwrap();
        assert!(c == old || c == new, "torn read: {c}");
        assert_eq!(o, vals[1]);
        assert_eq!(t.get(changed), new);
    });
}
