//! Model check of the worker-to-exporter ring with loom: a producer writes records of two words
//! (publishing after each, and once with two records behind one publish) into a ring of two
//! slots while the consumer pops and releases; the ring wraps, so slots are reused. In every
//! interleaving loom explores, the consumer must read each record whole (never half of one and
//! half of the next) and in order, and a push refused as full must not overwrite a slot not yet
//! released.
//!
//! Run with: `RUSTFLAGS="--cfg loom" cargo test -p fp-export --test loom_ring --release`
#![cfg(loom)]

use fp_export::ring::ring;

#[test]
fn records_arrive_whole_and_in_order() {
    loom::model(|| {
        let (mut p, mut c) = ring(2, 2);
        let t = loom::thread::spawn(move || {
            let mut sent = 0u64;
            // Three records through two slots; the first two behind one publish.
            for i in 1..=3u64 {
                while !p.push(&[i, i * 100]) {
                    p.publish();
                    loom::thread::yield_now();
                }
                sent = i;
                if i != 1 {
                    p.publish();
                }
            }
            sent
        });
        let mut next = 1u64;
        let mut out = [0u64; 2];
        while next <= 3 {
            if c.pop(&mut out) {
                assert_eq!(out, [next, next * 100], "a torn or reordered record");
                next += 1;
                c.release();
            } else {
                loom::thread::yield_now();
            }
        }
        assert_eq!(t.join().unwrap(), 3);
    });
}
