//! Hash functions and memory hints shared by every flowplane table.
//!
//! Layer: **tables** (pure, no I/O, no allocation).
//!
//! Hashes that decide where traffic or state goes (flow steering, Maglev permutations, SetSep groups,
//! cuckoo buckets) must give the same answer on every node, every CPU and every version of flowplane,
//! so two balancers with the same seed build identical tables. Everything here is therefore fixed and
//! portable, and pinned by golden test vectors (`tests` below):
//!
//! * [`crc32c`]: CRC-32C (Castagnoli), as CuckooSwitch §4 uses for its FIB. The SSE4.2 `crc32`
//!   instruction is used when the CPU has it (chosen once at run time), with a table-driven portable
//!   version that is the oracle in tests.
//! * [`hash_u64`] / [`hash_bytes`] (= [`hash_padded`]) / [`hash_words`]: a seeded 64-bit hash built on the folded 64x64→128
//!   multiply ("mum"), the core of the wyhash family. It is as strong as CRC32C for table indexing,
//!   gives 64 bits (two independent bucket indices even for billion-entry tables) and costs two
//!   multiplies per word on any 64-bit CPU, with no feature detection on the hot path.
//! * [`reduce`]: Lemire's multiply-shift range reduction, so tables need not have a power-of-two size
//!   (a table sized for exactly N entries at 95 % load stays at 95 % load).
//!
//! The seed of a table is an argument. Callers that face untrusted traffic should pass a secret seed
//! (see `flowplane`'s config): predictable hashing invites hash flooding.
//!
//! ```
//! let h = fp_hash::hash_u64(0x1234, 0x0002_0000_0001);
//! let bucket = fp_hash::reduce(h, 1_000_003);
//! assert!(bucket < 1_000_003);
//! // CRC32C check value from RFC 3720.
//! assert_eq!(fp_hash::crc32c(0, b"123456789"), 0xE306_9283);
//! ```
#![no_std]
#![deny(unsafe_code)]

mod arch;
mod crc;

pub use arch::{prefetch_read, prefetch_write};
pub use crc::{crc32c, crc32c_portable};

/// Multiplicative constants (odd, high-entropy 64-bit values, the first digits of pi's hex expansion
/// and of e's, chosen only so that they carry no structure).
const P0: u64 = 0x243F_6A88_85A3_08D3;
const P1: u64 = 0x1319_8A2E_0370_7344 | 1;
const P2: u64 = 0xA409_3822_299F_31D0 | 1;
const P3: u64 = 0xB7E1_5162_8AED_2A6B;

/// Folded multiply: the 128-bit product of `a` and `b`, its halves xored together.
#[inline(always)]
pub const fn mum(a: u64, b: u64) -> u64 {
    let r = (a as u128).wrapping_mul(b as u128);
    (r as u64) ^ ((r >> 64) as u64)
}

/// Hash one 64-bit word with a seed. All 64 output bits depend on all input bits.
#[inline(always)]
pub const fn hash_u64(seed: u64, x: u64) -> u64 {
    // Two rounds with fixed odd multipliers: no seed value can zero a multiplier.
    mum(mum(x ^ seed ^ P0, P1) ^ seed.rotate_left(29), P2)
}

/// Hash a sequence of 64-bit words with a seed (the general cuckoo layout hashes its key words).
#[inline]
pub fn hash_words(seed: u64, words: &[u64]) -> u64 {
    let mut h = seed ^ P3 ^ (words.len() as u64).wrapping_mul(P0);
    for &w in words {
        h = mum(h ^ w, P1);
    }
    mum(h, P2)
}

/// Hash a byte string with a seed. Equal to [`hash_words`] over the bytes read as little-endian
/// 64-bit words (the last one zero-padded), with the byte length mixed in.
#[inline]
pub fn hash_bytes(seed: u64, bytes: &[u8]) -> u64 {
    let mut h = seed ^ P3 ^ (bytes.len() as u64).wrapping_mul(P0);
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        h = mum(h ^ w, P1);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut buf = [0u8; 8];
        buf[..rest.len()].copy_from_slice(rest);
        h = mum(h ^ u64::from_le_bytes(buf), P1);
    }
    mum(h, P2)
}

/// [`hash_bytes`] of a `len`-byte string given as its little-endian 64-bit words, the last one
/// zero-padded (`words.len() >= len.div_ceil(8)`). Equal to `hash_bytes` on the same bytes; callers
/// that already hold a key as words (the general cuckoo layout) avoid re-reading it byte-wise.
#[inline(always)]
pub fn hash_padded(seed: u64, len: usize, words: &[u64]) -> u64 {
    let mut h = seed ^ P3 ^ (len as u64).wrapping_mul(P0);
    for &w in &words[..len.div_ceil(8)] {
        h = mum(h ^ w, P1);
    }
    mum(h, P2)
}

/// Map a 64-bit hash uniformly onto `0..n` without division (Lemire, "Fast random integer generation
/// in an interval", 2019). Uses the high bits of `h`.
#[inline(always)]
pub const fn reduce(h: u64, n: u64) -> u64 {
    (((h as u128) * (n as u128)) >> 64) as u64
}

/// A bijective 64-bit mixer (the splitmix64 finalizer). Useful to derive distinct, well-spread keys
/// from a counter in generators and benchmarks; not seeded.
#[inline(always)]
pub const fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Golden vectors: these numbers are part of flowplane's wire contract (two nodes with the same
    // seed must agree). A change here is a breaking change for every deployed cluster.
    #[test]
    fn golden_hash_u64() {
        assert_eq!(hash_u64(0, 0), 0x480F_E496_6428_8F5D);
        assert_eq!(hash_u64(1, 0x0002_0000_0001), 0xE870_AEC2_9690_E268);
        assert_eq!(hash_u64(0xDEAD_BEEF, u64::MAX), 0x9FCC_75C6_067C_C0AA);
    }

    #[test]
    fn golden_hash_bytes() {
        assert_eq!(hash_bytes(0, b""), 0x8757_6A39_9D25_81E4);
        assert_eq!(hash_bytes(7, b"flowplane"), 0x4F56_2B27_4105_EDC9);
    }

    #[test]
    fn bytes_and_words_agree_on_whole_words() {
        let words = [0x0102_0304_0506_0708u64, 0x1112_1314_1516_1718];
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&words[0].to_le_bytes());
        bytes[8..].copy_from_slice(&words[1].to_le_bytes());
        // Lengths are counted differently (words vs bytes), so equality is not expected; both must be
        // deterministic and seed-dependent.
        assert_ne!(hash_words(1, &words), hash_words(2, &words));
        assert_ne!(hash_bytes(1, &bytes), hash_bytes(2, &bytes));
    }

    #[test]
    fn padded_equals_bytes_for_every_length() {
        let mut x = 0x1234_5678u64;
        for len in 0..64usize {
            let mut bytes = [0u8; 64];
            for b in &mut bytes[..len] {
                x = splitmix64(x);
                *b = x as u8;
            }
            let mut words = [0u64; 8];
            for (i, w) in words.iter_mut().enumerate() {
                *w = u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().unwrap());
            }
            for seed in [0, 7, u64::MAX] {
                assert_eq!(
                    hash_padded(seed, len, &words),
                    hash_bytes(seed, &bytes[..len]),
                    "len {len}"
                );
            }
        }
    }

    #[test]
    fn reduce_in_range_and_uniform() {
        let n = 1000u64;
        let mut counts = [0u32; 1000];
        for i in 0..200_000u64 {
            let r = reduce(hash_u64(3, i), n);
            assert!(r < n);
            counts[r as usize] += 1;
        }
        // 200 per cell expected; a crude chi-square bound.
        let chi: f64 = counts
            .iter()
            .map(|&c| (c as f64 - 200.0).powi(2) / 200.0)
            .sum();
        assert!(chi < 1200.0, "chi-square {chi}");
    }

    #[test]
    fn avalanche() {
        // Flipping any input bit flips about half the output bits.
        let mut total = 0u32;
        let mut n = 0u32;
        for i in 0..64 {
            for x in [0u64, 1, 0xFFFF_FFFF, 0x0123_4567_89AB_CDEF] {
                let d = hash_u64(42, x) ^ hash_u64(42, x ^ (1 << i));
                total += d.count_ones();
                n += 1;
            }
        }
        let mean = total as f64 / n as f64;
        assert!((28.0..36.0).contains(&mean), "mean flipped bits {mean}");
    }
}
