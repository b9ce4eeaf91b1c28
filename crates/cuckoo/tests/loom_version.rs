//! Model check of the version protocol with loom: one writer moves a key along a cuckoo path (to make
//! room for a new key) while a reader looks the moved key up. In every interleaving loom explores,
//! the reader must find the key with its value — never "not found", never a torn value.
//!
//! Run with: `RUSTFLAGS="--cfg loom" cargo test -p fp-cuckoo --test loom_version --release`
#![cfg(loom)]

use fp_cuckoo::{CompactMap, Config};

/// A 3-bucket table (12 slots) with distinct version counters per bucket (STRIPES is 8 under loom), and keys chosen so that
/// buckets 0 and 1 are full and inserting `new` forces one displacement from bucket 0 to bucket 2.
struct Setup {
    moved: u64,
    new: u64,
    others: Vec<u64>,
}

fn cfg() -> Config {
    let mut c = Config::with_capacity(12);
    c.load_factor = 1.0;
    c
}

fn setup(w: &fp_cuckoo::CompactWriter) -> Setup {
    let pair = |k: u64| w.candidate_buckets(k).unwrap();
    // Keys whose first choice is bucket 0 and whose alternate is bucket 2 (movable).
    let first0: Vec<u64> = (1..5000u64)
        .filter(|&k| pair(k) == (0, 2))
        .take(4)
        .collect();
    // Keys whose first choice is bucket 1 and alternate bucket 0 (they stay put: 0 is full).
    let first1: Vec<u64> = (1..5000u64)
        .filter(|&k| pair(k) == (1, 0))
        .take(4)
        .collect();
    // The new key wants buckets 0 and 1, both full.
    let new = (1..5000u64).find(|&k| pair(k) == (0, 1)).unwrap();
    assert_eq!(first0.len(), 4);
    assert_eq!(first1.len(), 4);
    Setup {
        moved: first0[0],
        new,
        others: first0[1..].iter().chain(&first1).copied().collect(),
    }
}

/// The table with `moved` (value 41) and the others (value 7) in place, before the insert of `new`.
fn loaded() -> (fp_cuckoo::CompactWriter, fp_cuckoo::CompactReader, Setup) {
    let (mut w, r) = CompactMap::new(&cfg()).unwrap();
    let s = setup(&w);
    w.insert(s.moved, 41).unwrap();
    for &k in &s.others {
        w.insert(k, 7).unwrap();
    }
    (w, r, s)
}

#[test]
fn reader_never_misses_a_key_being_displaced() {
    loom::model(|| {
        let (mut w, r, s) = loaded();
        let reader = loom::thread::spawn({
            let r = r.clone();
            let moved = s.moved;
            move || r.get(moved)
        });
        // The insert must move `moved` (the first slot of bucket 0) to bucket 2.
        w.insert(s.new, 99).unwrap();
        assert_eq!(reader.join().unwrap(), Some(41));
        assert_eq!(r.get(s.new), Some(99));
        assert_eq!(r.get(s.moved), Some(41));
    });
}

#[test]
fn batched_reader_never_misses_a_key_being_displaced() {
    loom::model(|| {
        let (mut w, r, s) = loaded();
        let reader = loom::thread::spawn({
            let r = r.clone();
            let keys = [s.moved, s.others[0]];
            move || {
                let mut out = [None; 2];
                r.get_batch(&keys, &mut out);
                out
            }
        });
        w.insert(s.new, 99).unwrap();
        assert_eq!(reader.join().unwrap(), [Some(41), Some(7)]);
    });
}

/// A batch of three keys spans two chunks (CHUNK is 2 under loom), so the moved key is hashed and
/// its versions taken while the first chunk is between its rounds: the pipelined path.
#[test]
fn pipelined_batch_never_misses_a_key_being_displaced() {
    loom::model(|| {
        let (mut w, r, s) = loaded();
        let reader = loom::thread::spawn({
            let r = r.clone();
            let keys = [s.others[0], s.others[3], s.moved];
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

#[test]
fn reader_sees_old_or_new_value_of_an_update() {
    loom::model(|| {
        let (mut w, r) = CompactMap::new(&cfg()).unwrap();
        w.insert(5, 1).unwrap();
        let reader = loom::thread::spawn({
            let r = r.clone();
            move || r.get(5)
        });
        w.insert(5, 2).unwrap();
        let seen = reader.join().unwrap();
        assert!(seen == Some(1) || seen == Some(2), "{seen:?}");
    });
}

/// A reader scanning the whole table while the writer displaces an entry: every entry it visits
/// is whole (its key with its own value), the entries that do not move are visited exactly once,
/// and when the writer's move counter did not change across the scan, the moved entry was
/// visited too.
#[test]
fn scan_sees_whole_entries_and_reports_a_move_it_may_have_missed() {
    loom::model(|| {
        let (mut w, r, s) = loaded();
        let reader = loom::thread::spawn({
            let r = r.clone();
            move || {
                let before = r.moved();
                let mut seen = Vec::new();
                r.scan_range(0, r.buckets(), |k, v| seen.push((*k, *v)));
                (seen, r.moved() != before)
            }
        });
        w.insert(s.new, 99).unwrap();
        let (seen, moved_during) = reader.join().unwrap();
        for &(k, v) in &seen {
            let want = if k == s.moved {
                41
            } else if k == s.new {
                99
            } else {
                7
            };
            assert_eq!(v, want, "key {k} with another key's value");
        }
        for k in &s.others {
            assert_eq!(seen.iter().filter(|(x, _)| x == k).count(), 1, "key {k}");
        }
        if !moved_during {
            assert!(seen.iter().any(|(k, _)| *k == s.moved));
        }
    });
}
