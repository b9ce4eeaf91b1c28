//! Eviction policies (§5 of the paper): what happens on a hit and which slot a new key takes when
//! all its candidate slots are full.
//!
//! * [`Random`]: evict a uniformly random candidate slot (§4, the policy of every design's analysis).
//!   Hits write nothing. The generator is PCG-32 (§7.1: a poor generator skews hit rates).
//! * [`Pblru`], Probabilistic Bubble LRU (§5.2): slot 0 of a bucket has the highest priority. On a
//!   hit, with probability `1/N`, the key is *bubbled*: swapped with the key one slot above it. A new
//!   key replaces the last (lowest-priority) slot. For designs with two candidate buckets (BLP,
//!   cuckoo-lite) the victim bucket is one of the two chosen at random (§5.2 "Applying Bubble LRU to
//!   BLP"); a hit bubbles within the bucket the key is in (a key cannot move between buckets: in BLP
//!   the previous bucket may not be one of its candidates). No extra space per entry or bucket.
//! * [`DcBubble`], Zhang & Xue's DC-Bubble (ICS 2009) as §5.3 describes it: bubble on *every* hit,
//!   and keep one bit per bucket recording whether the last access to it was a hit. On a miss, if the
//!   last access was a hit, the last entry is replaced; otherwise the first entry is evicted, the
//!   others move up one slot, and the new entry goes into the last slot. The bit array lives beside
//!   the table (one more cache line per access: the software cost §5.3 points out).
//!
//! A miss is signalled by the `insert` that follows it (that is how a cache is used: look up, on a
//! miss compute the answer and insert it). DC-Bubble consults the bucket's bit in that insert, so
//! the bit still describes the access *before* this miss, as in the hardware original.
//!
//! Policies never allocate after construction; DC-Bubble allocates its bit array once.

use crate::design::{Design, Table};
use rand::RngCore;
use rand_pcg::Pcg32;
use std::fmt;

/// A uniform random integer in `0..n` from 32 random bits (Lemire's multiply-shift; the bias of at
/// most `n / 2^32` is irrelevant for `n <= 8`).
#[inline(always)]
pub(crate) fn below(rng: &mut Pcg32, n: usize) -> usize {
    ((rng.next_u32() as u64 * n as u64) >> 32) as usize
}

pub(crate) mod sealed {
    use crate::design::{Design, Table};
    use rand_pcg::Pcg32;

    /// Policy internals; sealed.
    pub trait Hooks {
        /// Called once by the cache constructor with the number of buckets (including buffers).
        fn init(&mut self, buckets: usize);
        /// A hit on slot `s` of bucket `b`. Returns true if entries moved.
        fn on_hit<D: Design>(&mut self, t: &Table<D>, rng: &mut Pcg32, b: usize, s: usize) -> bool;
        /// Every candidate slot of `c` is occupied: store `(fp, value)` in place of a victim.
        fn place_full<D: Design>(
            &mut self,
            t: &Table<D>,
            rng: &mut Pcg32,
            c: [usize; 2],
            fp: u16,
            value: u16,
        );
        /// An insert into candidates `c` happened (the access was a miss).
        fn on_insert<D: Design>(&mut self, c: [usize; 2]);
        /// The table was cleared.
        fn reset(&mut self);
    }
}

/// An eviction policy: [`Random`], [`Pblru`] or [`DcBubble`]; sealed.
pub trait Policy: sealed::Hooks + Clone + fmt::Debug + Send + Sync + 'static {
    /// Name for reports, e.g. `"PBLRU"`.
    const NAME: &'static str;
    /// Short identifier for file names and JSON, e.g. `"pblru"`.
    const ID: &'static str;
}

/// Random eviction among all candidate slots; hits change nothing.
#[derive(Clone, Copy, Debug, Default)]
pub struct Random;

impl sealed::Hooks for Random {
    fn init(&mut self, _buckets: usize) {}

    #[inline(always)]
    fn on_hit<D: Design>(&mut self, _t: &Table<D>, _rng: &mut Pcg32, _b: usize, _s: usize) -> bool {
        false
    }

    #[inline]
    fn place_full<D: Design>(
        &mut self,
        t: &Table<D>,
        rng: &mut Pcg32,
        c: [usize; 2],
        fp: u16,
        value: u16,
    ) {
        let i = below(rng, D::CHOICES * D::WAYS);
        t.set(c[i / D::WAYS], i % D::WAYS, fp, value);
    }

    #[inline(always)]
    fn on_insert<D: Design>(&mut self, _c: [usize; 2]) {}

    fn reset(&mut self) {}
}

impl Policy for Random {
    const NAME: &'static str = "random";
    const ID: &'static str = "random";
}

/// Probabilistic Bubble LRU: bubble a hit key up one slot with probability `1/N`; evict the last
/// slot (of a randomly chosen candidate bucket).
#[derive(Clone, Copy, Debug)]
pub struct Pblru {
    one_in: u32,
    /// Promote when a 32-bit random number is below this (`2^32 / N`, as u64 so N = 1 always promotes).
    threshold: u64,
}

impl Pblru {
    /// The default promotion rate: one hit in 8 bubbles.
    pub const DEFAULT_ONE_IN: u32 = 8;

    /// Promote on one hit in `one_in` on average (`one_in = 1` is plain bubble LRU). Values below 1
    /// are treated as 1.
    pub fn new(one_in: u32) -> Self {
        let one_in = one_in.max(1);
        Pblru {
            one_in,
            threshold: (1u64 << 32).div_ceil(one_in as u64),
        }
    }

    /// The `N` of "one hit in N".
    pub fn one_in(&self) -> u32 {
        self.one_in
    }
}

impl Default for Pblru {
    fn default() -> Self {
        Pblru::new(Self::DEFAULT_ONE_IN)
    }
}

impl sealed::Hooks for Pblru {
    fn init(&mut self, _buckets: usize) {}

    #[inline(always)]
    fn on_hit<D: Design>(&mut self, t: &Table<D>, rng: &mut Pcg32, b: usize, s: usize) -> bool {
        // Draw on every hit and fold "slot 0 cannot move up" into the number (bit 32 set for slot 0
        // puts it above any threshold), so the only branch is the one taken on about one hit in N:
        // a branch on `s > 0` would be mispredicted on a large share of hits.
        let x = rng.next_u32() as u64 | ((s == 0) as u64) << 32;
        if x < self.threshold {
            t.swap(b, s, s - 1);
            true
        } else {
            false
        }
    }

    #[inline]
    fn place_full<D: Design>(
        &mut self,
        t: &Table<D>,
        rng: &mut Pcg32,
        c: [usize; 2],
        fp: u16,
        value: u16,
    ) {
        let b = if D::CHOICES == 2 {
            c[(rng.next_u32() >> 31) as usize]
        } else {
            c[0]
        };
        t.set(b, D::WAYS - 1, fp, value);
    }

    #[inline(always)]
    fn on_insert<D: Design>(&mut self, _c: [usize; 2]) {}

    fn reset(&mut self) {}
}

impl Policy for Pblru {
    const NAME: &'static str = "PBLRU";
    const ID: &'static str = "pblru";
}

/// DC-Bubble: bubble on every hit; one bit per bucket ("last access was a hit") chooses between
/// replacing the last entry and evicting the first one with a shift.
#[derive(Clone, Debug, Default)]
pub struct DcBubble {
    last_hit: Vec<u64>,
}

impl DcBubble {
    #[inline(always)]
    fn bit(&self, b: usize) -> bool {
        self.last_hit[b / 64] >> (b % 64) & 1 != 0
    }
}

impl sealed::Hooks for DcBubble {
    fn init(&mut self, buckets: usize) {
        self.last_hit = vec![0; buckets.div_ceil(64)];
    }

    #[inline(always)]
    fn on_hit<D: Design>(&mut self, t: &Table<D>, _rng: &mut Pcg32, b: usize, s: usize) -> bool {
        let w = &mut self.last_hit[b / 64];
        let m = 1u64 << (b % 64);
        if *w & m == 0 {
            *w |= m;
        }
        // Branch-free: slot 0 "swaps" with itself (a write that changes nothing), because a branch
        // on `s > 0` would be mispredicted on a large share of hits.
        t.swap(b, s, s.saturating_sub(1));
        s > 0
    }

    #[inline]
    fn place_full<D: Design>(
        &mut self,
        t: &Table<D>,
        rng: &mut Pcg32,
        c: [usize; 2],
        fp: u16,
        value: u16,
    ) {
        let b = if D::CHOICES == 2 {
            c[(rng.next_u32() >> 31) as usize]
        } else {
            c[0]
        };
        if self.bit(b) {
            t.set(b, D::WAYS - 1, fp, value);
        } else {
            t.shift_in_last(b, fp, value);
        }
    }

    #[inline(always)]
    fn on_insert<D: Design>(&mut self, c: [usize; 2]) {
        for b in c {
            self.last_hit[b / 64] &= !(1u64 << (b % 64));
        }
    }

    fn reset(&mut self) {
        self.last_hit.fill(0);
    }
}

impl Policy for DcBubble {
    const NAME: &'static str = "DC-Bubble";
    const ID: &'static str = "dc-bubble";
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn below_is_in_range_and_covers() {
        let mut rng = Pcg32::seed_from_u64(1);
        let mut seen = [0u32; 8];
        for _ in 0..8000 {
            seen[below(&mut rng, 8)] += 1;
        }
        assert!(seen.iter().all(|&c| (800..1200).contains(&c)), "{seen:?}");
    }

    #[test]
    fn pblru_rate() {
        let t: Table<crate::SetAssoc4> = Table::new(1, fp_mem::PagePolicy::Auto).unwrap();
        for s in 0..4 {
            t.set(0, s, 1 + s as u16, 0);
        }
        let mut rng = Pcg32::seed_from_u64(2);
        for (n, lo, hi) in [(1u32, 10_000, 10_000), (8, 1_100, 1_400), (64, 100, 220)] {
            let mut p = Pblru::new(n);
            let moved = (0..10_000)
                .filter(|_| sealed::Hooks::on_hit(&mut p, &t, &mut rng, 0, 2))
                .count();
            assert!((lo..=hi).contains(&moved), "N={n}: {moved}");
        }
        // Slot 0 never moves.
        let mut p = Pblru::new(1);
        assert!(!sealed::Hooks::on_hit(&mut p, &t, &mut rng, 0, 0));
    }
}
