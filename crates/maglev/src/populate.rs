//! Maglev hashing: permutations and Pseudocode 1 (NSDI'16 §3.4), with weighted turns.
//!
//! # Permutations
//!
//! Backend `i` prefers the slots `permutation[i][j] = (offset + j·skip) mod M` for `j = 0, 1, …`
//! with `offset = h1(name) mod M` and `skip = h2(name) mod (M−1) + 1`. Because `M` is prime every
//! `skip` is coprime to `M` and the sequence visits each slot exactly once. The full `N × M`
//! permutation matrix (the paper's `permutation[i][next[i]]`) is never stored: each backend keeps a
//! cursor — its current candidate slot — and advances it by `skip` (one add, one conditional
//! subtract). State is 8 bytes per backend instead of `4·M`.
//!
//! `h1` and `h2` are [`fp_hash::hash_bytes`] over the UTF-8 name with two seeds derived from the
//! cluster seed (`hash_u64(seed, 1)` and `hash_u64(seed, 2)`); both are pinned by golden vectors,
//! so the permutations are the same on every machine and version.
//!
//! # Turns (Pseudocode 1) and weights
//!
//! With equal weights the backends take turns in canonical order, each filling its most preferred
//! still-empty slot, until all `M` slots are full — exactly Pseudocode 1; every backend gets
//! `⌊M/N⌋` or `⌈M/N⌉` entries.
//!
//! The paper says only that "heterogeneous backend weights can be achieved by altering the relative
//! frequency of the backends' turns". flowplane's scheme is **virtual-time turns**: backend `i`'s
//! `k`-th turn (`k = 0, 1, …`) happens at virtual time `k / w_i`; turns are taken in order of time,
//! ties in canonical order. Consequences:
//!
//! * Equal weights give times `0, 1, 2, …` for everyone: round robin, i.e. Pseudocode 1 unchanged
//!   (the code takes a plain round-robin fast path then; a test checks both paths agree).
//! * Every backend takes its first turn at time 0, so with `M ≥ N` each one gets at least one entry.
//! * A backend's turn times depend on its own weight only. Removing a backend deletes its turns
//!   from the merged schedule and leaves everyone else's turns in the same relative order — the
//!   same property that makes unweighted Maglev resilient.
//! * Balance bound: if the last turn happens at time `T`, backend `i` has taken either `⌈T·w_i⌉`
//!   or `⌊T·w_i⌋ + 1` turns, so `|c_i − T·w_i| ≤ 1`, and summing gives
//!   `M·w_i/W − N·w_i/W ≤ c_i ≤ M·w_i/W + 1` (with `W = Σ w`). In words: each backend's entry count
//!   is its exact proportional share, minus at most its share of `N` entries, plus at most one.
//!   With `M ≥ 100·N` this is the paper's 1 % rule generalised to weights; tests assert it exactly.
//!
//! The weighted schedule needs no floating point (times are compared as `k_i·w_j < k_j·w_i` in
//! integers), so it is portable. Because backend `i` has exactly `w_i` turns in every unit of
//! virtual time (after dividing weights by their gcd), the order of turns within a unit repeats:
//! it is sorted once and replayed, `O(1)` per turn (a heap covers extreme weight ratios; see
//! `fill_weighted`).
//! Alternative considered: per-round weighted credits (each round every backend earns `w_i` and
//! spends `max w` per turn). It has the same balance, but its interleaving depends on the largest
//! weight in the set, so removing the heaviest backend reshuffles everyone's turns.

use crate::backend::{Canonical, MAX_BACKENDS};
use crate::method::{Method, Prepared};
use crate::{Backend, Config, Error};

/// Tags that derive the two independent name-hash seeds from the cluster seed.
const TAG_OFFSET: u64 = 0x6d61_676c_6576_6f66; // "maglevof"
const TAG_SKIP: u64 = 0x6d61_676c_6576_736b; // "maglevsk"

/// One backend's preference list in closed form: slot `j` of the list is `(offset + j·skip) mod M`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Permutation {
    pub offset: u32,
    pub skip: u32,
}

impl Permutation {
    /// The permutation of a backend named `name` in a table of `size` slots (§3.4):
    /// `offset = h1(name) mod M`, `skip = h2(name) mod (M−1) + 1`.
    pub fn for_name(cfg: &Config, name: &str) -> Permutation {
        let m = cfg.size() as u64;
        let h1 = fp_hash::hash_bytes(fp_hash::hash_u64(cfg.seed(), TAG_OFFSET), name.as_bytes());
        let h2 = fp_hash::hash_bytes(fp_hash::hash_u64(cfg.seed(), TAG_SKIP), name.as_bytes());
        Permutation {
            offset: (h1 % m) as u32,
            skip: (h2 % (m - 1)) as u32 + 1,
        }
    }

    /// Entry `j` of the preference list: `(offset + j·skip) mod size`.
    pub fn nth(&self, j: u64, size: u32) -> u32 {
        ((self.offset as u64 + (j % size as u64) * self.skip as u64) % size as u64) as u32
    }
}

/// A backend's cursor while populating: its next candidate slot and step. `id` is what is written
/// into the table.
#[derive(Clone, Copy)]
struct Cursor {
    pos: u32,
    skip: u32,
    id: u16,
}

/// The table being populated, with a bitmap of filled slots.
///
/// The search for a backend's next empty slot reads the bitmap (M/8 bytes: 8 KiB for M = 65537,
/// 80 KiB for 655373, so it stays in L1/L2) instead of the `u16` entries (128 KiB / 1.3 MiB); the
/// entries are only written. This is the hot loop of population: about `M·ln M` probes in all.
struct Filler {
    m: u32,
    entry: Vec<u16>,
    filled: Vec<u64>,
}

impl Filler {
    fn new(m: u32) -> Filler {
        Filler {
            m,
            entry: vec![0; m as usize],
            filled: vec![0; (m as usize).div_ceil(64)],
        }
    }

    /// Take one turn for `c`: find its most preferred empty slot, fill it, advance past it.
    #[inline(always)]
    fn take_turn(&mut self, c: &mut Cursor) {
        let m = self.m;
        let mut pos = c.pos;
        // Terminates: `m` is prime, so the cursor walks a full cycle of all slots, and the caller
        // only takes a turn while at least one slot is empty.
        while self.filled[(pos >> 6) as usize] & (1 << (pos & 63)) != 0 {
            pos += c.skip;
            if pos >= m {
                pos -= m;
            }
        }
        self.filled[(pos >> 6) as usize] |= 1 << (pos & 63);
        self.entry[pos as usize] = c.id;
        pos += c.skip;
        if pos >= m {
            pos -= m;
        }
        c.pos = pos;
    }
}

/// Pseudocode 1 with equal weights: round robin over `cursors` until `m` slots are filled.
fn fill_round_robin(m: u32, cursors: &mut [Cursor]) -> Vec<u16> {
    let mut f = Filler::new(m);
    let mut n = 0u32;
    'rounds: loop {
        for c in cursors.iter_mut() {
            f.take_turn(c);
            n += 1;
            if n == m {
                break 'rounds;
            }
        }
    }
    f.entry
}

/// Weighted turns: turn `k` of cursor `i` at virtual time `k / w_i`, ties by position in `cursors`.
///
/// Two exact implementations of the same schedule:
///
/// * **Repeating pattern** (the usual case). Divide the weights by their gcd (all times scale by the
///   same factor, so the order is unchanged). In every unit interval `[r, r+1)` backend `i` then
///   has exactly `w_i` turns, at `r + j/w_i` for `j < w_i`, so the order of turns inside an interval
///   is the same for every `r`: sort the `W = Σ w_i` pairs `(j/w_i, i)` once and repeat that
///   pattern. `O(W log W)` once, then `O(1)` per turn. Used when `W ≤ M`.
/// * **Heap** keyed by each backend's next turn time (`O(log N)` per turn, branchy: about 5× the
///   pattern's cost). Used for extreme weight ratios where the pattern would exceed the table.
fn fill_weighted(m: u32, cursors: &mut [Cursor], weights: &[u32]) -> Vec<u16> {
    debug_assert_eq!(cursors.len(), weights.len());
    let g = weights.iter().fold(0u32, |a, &b| gcd(a, b));
    let w: Vec<u64> = weights.iter().map(|&x| (x / g) as u64).collect();
    let total: u64 = w.iter().sum();
    if total <= m as u64 {
        let pattern = turn_pattern(&w);
        let mut f = Filler::new(m);
        let mut n = 0u32;
        'rounds: loop {
            for &i in &pattern {
                f.take_turn(&mut cursors[i as usize]);
                n += 1;
                if n == m {
                    break 'rounds;
                }
            }
        }
        f.entry
    } else {
        fill_weighted_heap(m, cursors, &w)
    }
}

fn gcd(mut a: u32, mut b: u32) -> u32 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// The order of turns within one unit of virtual time: all `(j/w_i, i)` for `j < w_i`, sorted by
/// time then index. `j·w` products stay below 2^64 since `j < w ≤ 2^32`.
fn turn_pattern(w: &[u64]) -> Vec<u16> {
    let mut turns: Vec<(u32, u16)> = w
        .iter()
        .enumerate()
        .flat_map(|(i, &wi)| (0..wi as u32).map(move |j| (j, i as u16)))
        .collect();
    turns.sort_unstable_by(|&(ja, a), &(jb, b)| {
        (ja as u64 * w[b as usize])
            .cmp(&(jb as u64 * w[a as usize]))
            .then(a.cmp(&b))
    });
    turns.into_iter().map(|(_, i)| i).collect()
}

/// The same schedule with a binary heap of next-turn times (for `Σ w > M`).
fn fill_weighted_heap(m: u32, cursors: &mut [Cursor], w: &[u64]) -> Vec<u16> {
    let n_b = cursors.len();
    let mut f = Filler::new(m);
    let mut turns = vec![0u64; n_b];
    // `before(a, b)`: a's next turn comes before b's. Products stay below 2^28 · 2^32 = 2^60.
    let before = |turns: &[u64], a: usize, b: usize| -> bool {
        let (ta, tb) = (turns[a] * w[b], turns[b] * w[a]);
        ta < tb || (ta == tb && a < b)
    };
    // All next-turn times are 0 at the start, so the identity order is already a valid heap.
    let mut heap: Vec<usize> = (0..n_b).collect();
    for _ in 0..m {
        let i = heap[0];
        f.take_turn(&mut cursors[i]);
        turns[i] += 1;
        // Sift the root down.
        let mut p = 0;
        loop {
            let l = 2 * p + 1;
            if l >= n_b {
                break;
            }
            let r = l + 1;
            let c = if r < n_b && before(&turns, heap[r], heap[l]) {
                r
            } else {
                l
            };
            if before(&turns, heap[c], heap[p]) {
                heap.swap(c, p);
                p = c;
            } else {
                break;
            }
        }
    }
    f.entry
}

fn check_permutations(size: u32, perms: &[Permutation]) -> Result<(), Error> {
    if size > Config::MAX_SIZE || !crate::is_prime(size as u64) {
        return Err(Error::SizeNotPrime {
            size: size as u64,
            below: crate::prime::prev_prime(size as u64),
            above: crate::next_prime(size as u64),
        });
    }
    if perms.is_empty() {
        return Err(Error::NoBackends);
    }
    if perms.len() > MAX_BACKENDS {
        return Err(Error::TooManyBackends {
            count: perms.len(),
            max: MAX_BACKENDS,
        });
    }
    for (i, p) in perms.iter().enumerate() {
        if p.offset >= size || p.skip == 0 || p.skip >= size {
            return Err(Error::BadPermutation {
                index: i,
                offset: p.offset,
                skip: p.skip,
                size,
            });
        }
    }
    Ok(())
}

/// Pseudocode 1 on explicit permutations, in the given turn order: entry `j` of the result is the
/// index (into `perms`) of the backend owning slot `j`.
///
/// This is the algorithm without the name hashing, for checking it by hand (the paper's Table 1 is
/// a doc test in the crate root) or for callers with their own hash. [`crate::Table::build`] is the
/// normal entry point.
pub fn populate(size: u32, perms: &[Permutation]) -> Result<Vec<u16>, Error> {
    check_permutations(size, perms)?;
    let mut cursors = cursors_for(perms.iter().copied().enumerate());
    Ok(fill_round_robin(size, &mut cursors))
}

/// [`populate`] with weighted turns (see the module doc: virtual-time turns). Equal weights give
/// exactly [`populate`]'s result.
///
/// # Panics
///
/// If `weights` and `perms` differ in length (a caller bug, not bad input).
pub fn populate_weighted(
    size: u32,
    perms: &[Permutation],
    weights: &[u32],
) -> Result<Vec<u16>, Error> {
    check_permutations(size, perms)?;
    assert_eq!(perms.len(), weights.len(), "one weight per permutation");
    if let Some(i) = weights.iter().position(|&w| w == 0) {
        return Err(Error::ZeroWeight {
            name: format!("#{i}"),
        });
    }
    let mut cursors = cursors_for(perms.iter().copied().enumerate());
    if weights.iter().all(|&w| w == weights[0]) {
        Ok(fill_round_robin(size, &mut cursors))
    } else {
        Ok(fill_weighted(size, &mut cursors, weights))
    }
}

fn cursors_for(perms: impl Iterator<Item = (usize, Permutation)>) -> Vec<Cursor> {
    perms
        .map(|(id, p)| Cursor {
            pos: p.offset,
            skip: p.skip,
            id: id as u16,
        })
        .collect()
}

/// Maglev hashing as a [`Method`]: canonical order, name-hashed permutations, weighted turns.
#[derive(Clone, Copy, Debug, Default)]
pub struct Maglev;

/// Backends hashed to their permutations, ready to populate any subset.
#[derive(Clone, Debug)]
pub struct MaglevPrepared {
    size: u32,
    canonical: Canonical,
    perms: Vec<Permutation>,
}

impl MaglevPrepared {
    /// The permutation of each canonical backend.
    pub fn permutations(&self) -> &[Permutation] {
        &self.perms
    }
}

impl Method for Maglev {
    type Prepared = MaglevPrepared;

    fn name(&self) -> &'static str {
        "maglev"
    }

    fn prepare(&self, cfg: &Config, backends: &[Backend]) -> Result<MaglevPrepared, Error> {
        let canonical = Canonical::new(cfg, backends)?;
        let perms = canonical
            .backends()
            .iter()
            .map(|b| Permutation::for_name(cfg, &b.name))
            .collect();
        Ok(MaglevPrepared {
            size: cfg.size(),
            canonical,
            perms,
        })
    }
}

impl Prepared for MaglevPrepared {
    fn canonical(&self) -> &Canonical {
        &self.canonical
    }

    fn size(&self) -> u32 {
        self.size
    }

    fn populate(&self, alive: &[bool]) -> Result<Vec<u16>, Error> {
        assert_eq!(alive.len(), self.perms.len(), "one flag per backend");
        let live = || (0..self.perms.len()).filter(|&i| alive[i]);
        let mut cursors = cursors_for(live().map(|i| (i, self.perms[i])));
        if cursors.is_empty() {
            return Err(Error::NoBackends);
        }
        let bs = &self.canonical.backends;
        let w0 = bs[live().next().unwrap_or(0)].weight;
        if live().all(|i| bs[i].weight == w0) {
            Ok(fill_round_robin(self.size, &mut cursors))
        } else {
            let weights: Vec<u32> = live().map(|i| bs[i].weight).collect();
            Ok(fill_weighted(self.size, &mut cursors, &weights))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The paper's Table 1: M = 7, (offset, skip) = (3, 4), (0, 2), (3, 1).
    const TABLE1: [Permutation; 3] = [
        Permutation { offset: 3, skip: 4 },
        Permutation { offset: 0, skip: 2 },
        Permutation { offset: 3, skip: 1 },
    ];

    #[test]
    fn paper_table1_permutations() {
        let rows: Vec<Vec<u32>> = TABLE1
            .iter()
            .map(|p| (0..7).map(|j| p.nth(j, 7)).collect())
            .collect();
        assert_eq!(rows[0], [3, 0, 4, 1, 5, 2, 6]);
        assert_eq!(rows[1], [0, 2, 4, 6, 1, 3, 5]);
        assert_eq!(rows[2], [3, 4, 5, 6, 0, 1, 2]);
    }

    #[test]
    fn paper_table1_before_and_after() {
        // Before: B1 B0 B1 B0 B2 B2 B0.
        assert_eq!(populate(7, &TABLE1).unwrap(), [1, 0, 1, 0, 2, 2, 0]);
        // After B1 is removed: B0 B0 B0 B0 B2 B2 B2 (only row 6 changes besides B1's rows).
        assert_eq!(
            populate(7, &[TABLE1[0], TABLE1[2]]).unwrap(),
            [0, 0, 0, 0, 1, 1, 1]
        );
    }

    #[test]
    fn turn_order_matters_for_raw_populate() {
        // Pseudocode 1 itself is order dependent: reversing the turn order changes the table (not
        // only the labels). This is why the named builders sort backends first.
        let fwd = populate(7, &TABLE1).unwrap();
        let rev = populate(7, &[TABLE1[2], TABLE1[1], TABLE1[0]]).unwrap();
        let rev_relabelled: Vec<u16> = rev.iter().map(|&e| 2 - e).collect();
        assert_ne!(fwd, rev_relabelled);
    }

    #[test]
    fn weighted_equal_weights_is_round_robin() {
        // Force the heap path with equal weights and compare with the round-robin fast path.
        let cfg = Config::new(1009, 7).unwrap();
        let perms: Vec<Permutation> = (0..13)
            .map(|i| Permutation::for_name(&cfg, &format!("b{i}")))
            .collect();
        let rr = populate(1009, &perms).unwrap();
        let mut cursors = cursors_for(perms.iter().copied().enumerate());
        let heap = fill_weighted(1009, &mut cursors, &[5; 13]);
        assert_eq!(rr, heap);
    }

    #[test]
    fn pattern_and_heap_agree() {
        let cfg = Config::new(10_007, 1).unwrap();
        let mut x = 99u64;
        for case in 0..40 {
            let n = 1 + case % 37;
            let perms: Vec<Permutation> = (0..n)
                .map(|i| Permutation::for_name(&cfg, &format!("p{case}-{i}")))
                .collect();
            let weights: Vec<u32> = (0..n)
                .map(|_| {
                    x = fp_hash::splitmix64(x);
                    // Mix tiny, equal-ish and large weights, with common factors.
                    [1, 2, 3, 4, 6, 12, 100, 250][(x % 8) as usize] * (1 + (case as u32 % 3))
                })
                .collect();
            let g = weights.iter().fold(0, |a, &b| gcd(a, b));
            let w: Vec<u64> = weights.iter().map(|&v| (v / g) as u64).collect();
            let mut c1 = cursors_for(perms.iter().copied().enumerate());
            let mut c2 = c1.clone();
            let via_api = fill_weighted(10_007, &mut c1, &weights);
            let heap = fill_weighted_heap(10_007, &mut c2, &w);
            assert_eq!(via_api, heap, "case {case} weights {weights:?}");
        }
    }

    #[test]
    fn pattern_by_hand() {
        // Weights 2, 1, 3 (gcd 1): times A 0, ½; B 0; C 0, ⅓, ⅔ → A B C C A C.
        assert_eq!(turn_pattern(&[2, 1, 3]), [0, 1, 2, 2, 0, 2]);
        assert_eq!(gcd(12, 18), 6);
        assert_eq!(gcd(0, 7), 7);
    }

    #[test]
    fn weighted_turn_schedule_by_hand() {
        // M = 7, weights (2, 1): turn times A: 0, .5, 1, 1.5, 2, …  B: 0, 1, 2, …
        // Order: A0 B0 A.5 A1 B1 A1.5 A2 → A takes 5 turns, B 2.
        let perms = [
            Permutation { offset: 0, skip: 1 },
            Permutation { offset: 0, skip: 1 },
        ];
        let t = populate_weighted(7, &perms, &[2, 1]).unwrap();
        // Both walk 0,1,2,…: A fills 0, B 1, A 2, A 3, B 4, A 5, A 6.
        assert_eq!(t, [0, 1, 0, 0, 1, 0, 0]);
    }

    #[test]
    fn rejects_bad_inputs() {
        assert!(matches!(
            populate(8, &TABLE1),
            Err(Error::SizeNotPrime { size: 8, .. })
        ));
        assert!(matches!(populate(7, &[]), Err(Error::NoBackends)));
        assert!(matches!(
            populate(7, &[Permutation { offset: 7, skip: 1 }]),
            Err(Error::BadPermutation { index: 0, .. })
        ));
        assert!(matches!(
            populate(7, &[Permutation { offset: 0, skip: 7 }]),
            Err(Error::BadPermutation { .. })
        ));
        assert!(matches!(
            populate_weighted(7, &TABLE1, &[1, 0, 1]),
            Err(Error::ZeroWeight { .. })
        ));
    }

    #[test]
    fn fewer_slots_than_backends_terminates() {
        // Raw populate allows M < N (the named builders reject it): the first M backends win.
        let perms: Vec<Permutation> = (0..10)
            .map(|i| Permutation {
                offset: i % 5,
                skip: 1,
            })
            .collect();
        let t = populate(5, &perms).unwrap();
        let mut s = t.clone();
        s.sort_unstable();
        assert_eq!(s, [0, 1, 2, 3, 4]);
    }
}
