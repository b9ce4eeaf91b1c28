//! Fingerprint matching: which slots of a key's candidate buckets hold a given 16-bit fingerprint.
//!
//! This is the inner loop of every lookup and insert (§6 of the paper, "SIMD-optimized Lookup"). A
//! bucket of `m` slots stores its `m` fingerprints packed together, then its `m` values, as 16-bit
//! lanes of 64-bit words (lane `i` of a word is bits `16 i .. 16 i + 16`, which on a little-endian
//! CPU is also byte offset `2 i`, so a vector load sees the same lanes). A [`Matcher`] compares all
//! candidate fingerprints with one query and returns a *candidate mask*: bit `c` is set iff candidate
//! slot `c` matches, where the candidates of the first bucket are `0 .. m` and those of the second
//! bucket (cuckoo-lite, BLP) are `m .. 2m`.
//!
//! Four shapes cover the four designs:
//!
//! | shape   | design            | words read                                  |
//! |---------|-------------------|---------------------------------------------|
//! | `one4`  | 4-way             | the bucket's fingerprint word (64 bits)     |
//! | `one8`  | 8-way             | the bucket's two fingerprint words (128 bits)|
//! | `two4`  | 2-4 cuckoo-lite   | two unrelated fingerprint words             |
//! | `pair4` | 2-4 BLP           | two consecutive buckets, 256 bits, values included |
//!
//! [`Scalar`] is the portable implementation: a plain per-slot loop, the shape of stock Open vSwitch's
//! signature-match cache. It is the oracle that the vector implementations in `crate::arch` are
//! tested against, and the fallback on CPUs without them. Which implementation runs is chosen at run
//! time ([`crate::Isa`]).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Compares packed 16-bit fingerprints with a query; see the module documentation for the shapes.
///
/// Implementations are zero-sized tokens. The vector ones can only be constructed after the CPU was
/// found to support their instructions, which is what makes their safe methods sound.
pub trait Matcher: Copy {
    /// Lanes 0..4 of `fps` equal to `fp` (bits 0..4).
    fn one4(self, fps: &AtomicU64, fp: u16) -> u32;
    /// Lanes 0..8 of `fps` (lanes 0..4 in word 0, 4..8 in word 1) equal to `fp` (bits 0..8).
    fn one8(self, fps: &[AtomicU64; 2], fp: u16) -> u32;
    /// Lanes of `a` (bits 0..4) and of `b` (bits 4..8) equal to `fp`.
    fn two4(self, a: &AtomicU64, b: &AtomicU64, fp: u16) -> u32;
    /// Two consecutive 4-slot buckets `[fps_a, vals_a, fps_b, vals_b]`: fingerprint lanes of bucket a
    /// (bits 0..4) and of bucket b (bits 4..8) equal to `fp`. Value lanes never match.
    fn pair4(self, ab: &[AtomicU64; 4], fp: u16) -> u32;
}

/// Lanes of one 64-bit word equal to `fp`, one bit per lane (portable).
#[inline(always)]
pub(crate) fn lanes(word: u64, fp: u16) -> u32 {
    let mut m = 0;
    for i in 0..4 {
        if (word >> (16 * i)) as u16 == fp {
            m |= 1 << i;
        }
    }
    m
}

/// The portable matcher: loads each word and compares lane by lane.
#[derive(Clone, Copy, Debug, Default)]
pub struct Scalar;

impl Matcher for Scalar {
    #[inline(always)]
    fn one4(self, fps: &AtomicU64, fp: u16) -> u32 {
        lanes(fps.load(Relaxed), fp)
    }

    #[inline(always)]
    fn one8(self, fps: &[AtomicU64; 2], fp: u16) -> u32 {
        lanes(fps[0].load(Relaxed), fp) | lanes(fps[1].load(Relaxed), fp) << 4
    }

    #[inline(always)]
    fn two4(self, a: &AtomicU64, b: &AtomicU64, fp: u16) -> u32 {
        lanes(a.load(Relaxed), fp) | lanes(b.load(Relaxed), fp) << 4
    }

    #[inline(always)]
    fn pair4(self, ab: &[AtomicU64; 4], fp: u16) -> u32 {
        lanes(ab[0].load(Relaxed), fp) | lanes(ab[2].load(Relaxed), fp) << 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalar_lanes() {
        let w = 0x0004_0003_0002_0001u64;
        assert_eq!(lanes(w, 1), 0b0001);
        assert_eq!(lanes(w, 4), 0b1000);
        assert_eq!(lanes(w, 5), 0);
        assert_eq!(lanes(0x0007_0000_0007_0000, 7), 0b1010);
        assert_eq!(lanes(0, 0), 0b1111);
        let ab = [
            AtomicU64::new(0x0009_0000_0000_0009),
            AtomicU64::new(0x0009_0009_0009_0009), // values never match
            AtomicU64::new(0x0000_0009_0000_0000),
            AtomicU64::new(0x0009_0009_0009_0009),
        ];
        assert_eq!(Scalar.pair4(&ab, 9), 0b0100_1001);
        assert_eq!(Scalar.two4(&ab[0], &ab[2], 9), 0b0100_1001);
        assert_eq!(
            Scalar.one8(&[AtomicU64::new(0), AtomicU64::new(0x9)], 9),
            0b1_0000
        );
    }
}
