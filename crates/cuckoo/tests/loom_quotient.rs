//! Model check of the quotiented layout's version protocol with loom: one writer moves a key along
//! a cuckoo path (to make room for a new key), or trades one home (two moves), while a reader looks
//! the moved keys up, alone or in a batch. In every interleaving loom explores, the reader finds
//! each key with its value.
//!
//! Run with: `LOOM_MAX_PREEMPTIONS=1 RUSTFLAGS="--cfg loom" cargo test -p fp-cuckoo --test
//! loom_quotient --release` (30 s; each further preemption multiplies the time many-fold: a bucket
//! is eight loads and a slot write three fields).
#![cfg(loom)]

use fp_cuckoo::{Config, QuotientMap, QuotientReader, QuotientWriter};

/// Three buckets of 8 slots (tiny tables have long quotients: 63-bit slots), distinct counters
/// (STRIPES is 8 under loom). Buckets 0 and 1 are full; `moved` (in bucket 0, slot 0) has bucket 2
/// as its other bucket; inserting `new` (buckets 0 and 1) moves it there.
struct Setup {
    moved: u64,
    new: u64,
    other: u64,
}

fn loaded() -> (QuotientWriter, QuotientReader, Setup) {
    let mut c = Config::with_capacity(24);
    c.load_factor = 1.0;
    let (mut w, r) = QuotientMap::new(&c).unwrap();
    assert_eq!((r.stats().buckets, r.stats().slots_per_bucket), (3, 8));
    let pick = |w: &QuotientWriter, pair: (usize, usize), n: usize, from: u64| -> Vec<u64> {
        (from..from + 100_000)
            .filter(|&k| w.candidate_buckets(k) == Some(pair))
            .take(n)
            .collect()
    };
    let moved = pick(&w, (0, 2), 1, 1)[0];
    let zero = pick(&w, (0, 1), 7, 1);
    let one = pick(&w, (1, 0), 8, 1);
    let new = pick(&w, (0, 1), 8, 1)[7];
    w.insert(moved, 41).unwrap();
    for &k in zero.iter().chain(&one) {
        w.insert(k, 7).unwrap();
    }
    (
        w,
        r,
        Setup {
            moved,
            new,
            other: zero[0],
        },
    )
}

/// loom's model with room for the writer's reads: a 64-byte bucket is eight atomic loads, and
/// the insert reads several buckets before it moves anything.
fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.max_branches = 20_000;
    b.check(f);
}

#[test]
fn reader_never_misses_a_key_being_displaced() {
    model(|| {
        let (mut w, r, s) = loaded();
        let reader = loom::thread::spawn({
            let r = r.clone();
            move || r.get(s.moved)
        });
        w.insert(s.new, 99).unwrap();
        assert_eq!(reader.join().unwrap(), Some(41));
        assert_eq!(w.moves(), 1);
        assert_eq!(r.get(s.new), Some(99));
    });
}

/// Three keys span two chunks (CHUNK is 2 under loom): the pipelined path.
#[test]
fn batched_reader_never_misses_a_key_being_displaced() {
    model(|| {
        let (mut w, r, s) = loaded();
        let reader = loom::thread::spawn({
            let r = r.clone();
            let keys = [s.other, s.other, s.moved];
            move || {
                let mut out = [None; 3];
                r.get_batch(&keys, &mut out);
                out
            }
        });
        w.insert(s.new, 99).unwrap();
        assert_eq!(reader.join().unwrap(), [Some(7), Some(7), Some(41)]);
    });
}

/// Keys arranged for a trade (see below): the writer, a reader, and `(away, one, new)`.
fn before_a_trade() -> (QuotientWriter, QuotientReader, (u64, u64, u64)) {
    let mut c = Config::with_capacity(24);
    c.load_factor = 1.0;
    let (mut w, r) = QuotientMap::new(&c).unwrap();
    let pick = |w: &QuotientWriter, pair: (usize, usize), n: usize| -> Vec<u64> {
        (1..100_000u64)
            .filter(|&k| w.candidate_buckets(k) == Some(pair))
            .take(n)
            .collect()
    };
    let one = pick(&w, (1, 2), 8);
    let away = pick(&w, (1, 0), 1)[0];
    let zero = pick(&w, (0, 1), 7);
    let new = pick(&w, (0, 2), 1)[0];
    for &k in &one {
        w.insert(k, 5).unwrap();
    }
    w.insert(away, 41).unwrap();
    for &k in &zero {
        w.insert(k, 7).unwrap();
    }
    assert_eq!(w.moves(), 0);
    (w, r, (away, one[0], new))
}

/// A trade: bucket 0 is full and holds `away` in its second bucket (its first, bucket 1, full of
/// keys whose other bucket is 2, which is empty). Inserting `new` (first bucket 0) sends one of
/// bucket 1's keys to bucket 2 and `away` home to bucket 1, and `new` takes its slot: two moves.
/// A reader looking up both moved keys finds them.
#[test]
fn reader_never_misses_a_key_being_traded_home() {
    model(|| {
        let (mut w, r, (away, one, new)) = before_a_trade();
        let reader = loom::thread::spawn({
            let r = r.clone();
            move || (r.get(away), r.get(one))
        });
        w.insert(new, 99).unwrap();
        assert_eq!(reader.join().unwrap(), (Some(41), Some(5)));
        assert_eq!(w.moves(), 2);
        assert_eq!(r.get(new), Some(99));
    });
}

/// The same trade under a batched lookup of `away` (one chunk), which reads a key's second bucket (and
/// snapshots its counter) only after missing it in the first: `away` may go home to its first
/// bucket after that bucket was read and before its second is, and the first bucket's counter,
/// taken before either read and changed by the move, must send the key to a lookup again.
#[test]
fn batched_reader_never_misses_a_key_being_traded_home() {
    model(|| {
        let (mut w, r, (away, one, new)) = before_a_trade();
        let reader = loom::thread::spawn({
            let r = r.clone();
            move || {
                let mut out = [None];
                r.get_batch(&[away], &mut out);
                out
            }
        });
        w.insert(new, 99).unwrap();
        assert_eq!(reader.join().unwrap(), [Some(41)]);
        assert_eq!(w.moves(), 2);
        assert_eq!(r.get(one), Some(5));
    });
}
