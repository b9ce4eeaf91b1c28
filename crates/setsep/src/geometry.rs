//! The table format: block geometry, the pinned hashes that place a key, and bit-level access to a
//! block. Everything here is part of the format two nodes must agree on (golden vectors in the tests).
//!
//! # Layout
//!
//! The table is an array of *blocks*, each `lines` cache lines (64 bytes) long. A block holds
//!
//! * `bins` two-bit *bin choices* at bit 0 (level 1: a bin's keys go to candidate group
//!   `cand[bin][choice]`), then
//! * `groups × value_bits` *records* of `x + y` bits: a hash-function index `i` (`x` bits, low) and
//!   an array `A` of `y` bits. Record `(g, v)` starts at bit `2·bins + (g·value_bits + v)·(x + y)`.
//!
//! The paper's layout keeps the bin choices of a "block" of a few hundred bins apart from its
//! few dozen groups (as DPDK's EFD does with its 256-bin, 64-group chunks), so a lookup reads two
//! cache lines. Here a block is sized to the cache line instead: for 1- and 2-bit values one block is
//! one line (64 bins and 16 groups at "16+8" 1-bit, 40 bins and 9 groups at 2-bit), so a lookup
//! costs one memory access, which on this project's VM (random DRAM lines are the bottleneck, see
//! docs/platform.md) nearly doubles the batched lookup rate. The price is a coarser level 1:
//! about 128–256 keys per block rather than ~1000, so the number of keys per block varies more
//! (±6–9 %) and the balancing has fewer bins to work with; the fallback ratio and the construction
//! rate the benchmark reports include that cost. Wider values use more lines per block so that a
//! block still holds at least ~128 keys (3-bit: 2 lines), or ~256 keys for 4+ bits (4-bit: 4 lines),
//! where every one of the v searches of a group must succeed.
//!
//! # Hashes (pinned)
//!
//! * `h = fp_hash::hash_u64(seed, key)`;
//! * block `= reduce(h, blocks)` (high bits), bin `= ((h mod 2^32) · bins) >> 32` (low bits);
//! * `g = mum(h, L2)`, `a = g mod 2^32`, `b = (g >> 32) | 1`;
//! * position of the key in `A` for index `i`: `((a ^ i·0x9E3779B9) · b) mod 2^32 >> (32 − log2 y)`.
//!
//! The position family costs one 32-bit multiply per key and try; measured against a truly random
//! family (a full `hash_u64(i, key)` per try) it needs the same number of tries on average
//! (584 vs 584 for 16 keys in 8 cells), see `search.rs`.

use crate::{Config, Error};

/// Multiplier deriving the level-2 hash from `h`.
const L2: u64 = 0x9E37_79B9_7F4A_7C15;
/// Multiplier spreading the index `i` over 32 bits before it is mixed into `a`.
pub(crate) const IDX_MUL: u32 = 0x9E37_79B9;
/// Seed of the candidate-group table.
const CAND_SEED: u64 = 0x5E75_E9CA_0D1D_A7E5;
/// Bits per cache line.
const LINE_BITS: u32 = 512;
/// Level 1 spends 2 bits per bin; a bin holds this many keys on average (0.5 bit per key).
const KEYS_PER_BIN: f64 = 4.0;
/// Largest group the search handles; bigger groups (never seen in practice) go to the fallback.
pub(crate) const MAX_GROUP: usize = 64;
/// Most bins per block (bin ids are bytes).
const MAX_BINS: u32 = 255;
/// Most groups per block (group ids are bytes).
const MAX_GROUPS: u32 = 255;

/// Where a key lives and its level-2 hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct KeyHash {
    pub blk: usize,
    pub bin: u32,
    pub a: u32,
    pub b: u32,
}

/// Position of a key (level-2 hash `a`, `b`) in an array of `2^ly` bits, for hash index `i`.
#[inline(always)]
pub(crate) fn position(a: u32, b: u32, i: u32, ly: u32) -> u32 {
    (a ^ i.wrapping_mul(IDX_MUL)).wrapping_mul(b) >> (32 - ly)
}

/// The settings with a specialised lookup copy (the paper's Table 1 rows).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Spec {
    V1x16y8,
    V2x16y8,
    V3x16y8,
    V4x16y8,
    V1x8y16,
    V1x16y16,
    Generic,
}

/// The derived shape of a table.
#[derive(Clone, Debug)]
pub(crate) struct Geometry {
    pub seed: u64,
    /// Value bits `v`.
    pub vbits: u32,
    /// Index bits `x`.
    pub xbits: u32,
    /// log2 of the array bits `y`.
    pub ly: u32,
    /// `x + y`.
    pub rec_bits: u32,
    /// Cache lines per block.
    pub lines: u32,
    /// 64-bit words per block.
    pub wpb: usize,
    pub groups: u32,
    pub bins: u32,
    pub blocks: usize,
    /// Index value of bit 0 that marks a group whose keys are in the fallback table.
    pub sentinel: u32,
    /// Candidate groups of each bin.
    pub cand: Box<[[u8; 4]]>,
}

impl Geometry {
    /// Shape for `cfg` and room for `capacity` keys.
    pub(crate) fn new(cfg: &Config, capacity: usize) -> Result<Self, Error> {
        cfg.validate()?;
        let v = cfg.value_bits as u32;
        let x = cfg.index_bits as u32;
        let y = cfg.array_bits as u32;
        let ly = y.trailing_zeros();
        let kpg = cfg.keys_per_group;
        let rec = x + y;
        // Level 1 costs 0.5 bit per key; level 2 costs v(x+y) bits per group of `kpg` keys.
        let bits_per_key = 2.0 / KEYS_PER_BIN + (v * rec) as f64 / kpg;
        // At least ~128 keys per block, so that the number of keys per block does not vary much;
        // 256 for values of 4+ bits, where a group fails if any of its v searches fails and the
        // ±8 % load spread of 128-key blocks sent 0.16 % of the keys to the fallback table
        // (measured; 0 % with 256-key blocks, and a 2.3x faster construction).
        let min_keys = if v >= 4 { 256.0 } else { 128.0 };
        let lines = ((bits_per_key * min_keys / LINE_BITS as f64).ceil() as u32).clamp(1, 16);
        let block_bits = lines * LINE_BITS;
        let bin_bits_per_group = (kpg / KEYS_PER_BIN * 2.0).round().max(1.0) as u32;
        let groups = (block_bits / (v * rec + bin_bits_per_group)).clamp(1, MAX_GROUPS);
        let bins = ((block_bits - groups * v * rec) / 2).min(MAX_BINS);
        if bins == 0 || groups * v * rec + 2 * bins > block_bits {
            return Err(Error::Config {
                field: "array_bits",
                value: y.to_string(),
                why: "a group's records do not fit a block",
            });
        }
        let keys_per_block = block_bits as f64 / bits_per_key;
        let blocks = ((capacity as f64 / keys_per_block).ceil() as usize).max(1);
        let mut g = Geometry {
            seed: cfg.seed,
            vbits: v,
            xbits: x,
            ly,
            rec_bits: rec,
            lines,
            wpb: (lines as usize) * 8,
            groups,
            bins,
            blocks,
            sentinel: (1u32 << x) - 1,
            cand: Box::new([]),
        };
        g.cand = candidates(bins, groups);
        Ok(g)
    }

    /// Place a key.
    #[inline(always)]
    pub(crate) fn hash(&self, key: u64) -> KeyHash {
        self.place_h(self.h(key))
    }

    /// The first-stage hash of a key (all of its placement derives from it).
    #[inline(always)]
    pub(crate) fn h(&self, key: u64) -> u64 {
        fp_hash::hash_u64(self.seed, key)
    }

    /// Block of a first-stage hash.
    #[inline(always)]
    pub(crate) fn block_of_h(&self, h: u64) -> usize {
        fp_hash::reduce(h, self.blocks as u64) as usize
    }

    /// Placement from the first-stage hash.
    #[inline(always)]
    pub(crate) fn place_h(&self, h: u64) -> KeyHash {
        let g = fp_hash::mum(h, L2);
        KeyHash {
            blk: fp_hash::reduce(h, self.blocks as u64) as usize,
            bin: (((h & 0xFFFF_FFFF) * self.bins as u64) >> 32) as u32,
            a: g as u32,
            b: (g >> 32) as u32 | 1,
        }
    }

    /// Bit offset of record `(group, v)` inside a block.
    #[inline(always)]
    pub(crate) fn rec_off(&self, group: u32, v: u32) -> u32 {
        2 * self.bins + (group * self.vbits + v) * self.rec_bits
    }

    /// Mask of the `x` index bits.
    #[inline(always)]
    pub(crate) fn xmask(&self) -> u64 {
        (1u64 << self.xbits) - 1
    }

    /// Array bits `y`.
    pub(crate) fn ybits(&self) -> u32 {
        1 << self.ly
    }

    /// Evaluate a key against a block whose words `word(i)` returns; `None`: the key's group is in
    /// the fallback table. The value bits `V`, index bits `X` and log2 array bits `LY` are fixed at
    /// compile time (0: read from the geometry). The lookup path dispatches once per batch to a
    /// copy specialised for the common settings, so shifts and masks are immediates and the
    /// value-bit loop is unrolled (measured ~1.5x faster than the generic copy).
    #[inline(always)]
    pub(crate) fn eval_spec<const V: u32, const X: u32, const LY: u32>(
        &self,
        kh: &KeyHash,
        word: impl Fn(usize) -> u64,
    ) -> Option<u16> {
        let vbits = if V == 0 { self.vbits } else { V };
        let xbits = if X == 0 { self.xbits } else { X };
        let ly = if LY == 0 { self.ly } else { LY };
        let rec_bits = xbits + (1 << ly);
        let wpb = self.wpb;
        // Bin choices are 2-bit fields at even offsets: never across a word.
        let choice = ((word(kh.bin as usize / 32) >> (2 * (kh.bin % 32))) & 3) as usize;
        let group = self.cand[kh.bin as usize][choice] as u32;
        let xmask = (1u64 << xbits) - 1;
        let base = 2 * self.bins + group * vbits * rec_bits;
        let mut val = 0u16;
        for v in 0..vbits {
            let rec = read_bits_with(&word, wpb, base + v * rec_bits, rec_bits);
            let idx = (rec & xmask) as u32;
            if v == 0 && idx == self.sentinel {
                return None;
            }
            let arr = rec >> xbits;
            let p = position(kh.a, kh.b, idx, ly);
            val |= (((arr >> p) & 1) as u16) << v;
        }
        Some(val)
    }

    /// Which specialised lookup copy serves this geometry.
    pub(crate) fn spec(&self) -> Spec {
        match (self.vbits, self.xbits, self.ly) {
            (1, 16, 3) => Spec::V1x16y8,
            (2, 16, 3) => Spec::V2x16y8,
            (3, 16, 3) => Spec::V3x16y8,
            (4, 16, 3) => Spec::V4x16y8,
            (1, 8, 4) => Spec::V1x8y16,
            (1, 16, 4) => Spec::V1x16y16,
            _ => Spec::Generic,
        }
    }

    /// Group of `bin` in a block given as plain words.
    #[inline]
    pub(crate) fn group_of(&self, words: &[u64], bin: u32) -> u32 {
        let choice = read_bits(words, 2 * bin, 2) as usize;
        self.cand[bin as usize][choice] as u32
    }

    /// Whether group `g` of a block (plain words) is in the fallback table.
    #[inline]
    pub(crate) fn is_fallback(&self, words: &[u64], g: u32) -> bool {
        read_bits(words, self.rec_off(g, 0), self.xbits) as u32 == self.sentinel
    }
}

/// The candidate groups of each bin: four distinct groups (fewer if the block has fewer than four),
/// drawn with the pinned hash from a fixed seed. The same table serves every block.
fn candidates(bins: u32, groups: u32) -> Box<[[u8; 4]]> {
    (0..bins)
        .map(|bin| {
            let mut c = [0u8; 4];
            let mut r = fp_hash::hash_u64(CAND_SEED ^ ((groups as u64) << 32), bin as u64);
            let mut n = 0;
            let mut tries = 0;
            while n < 4 {
                let g = fp_hash::reduce(r, groups as u64) as u8;
                // Distinct candidates while there are enough groups; repeats otherwise.
                if !c[..n].contains(&g)
                    || tries >= 64
                    || (groups as usize) < 4 && n >= groups as usize
                {
                    c[n] = g;
                    n += 1;
                }
                r = fp_hash::splitmix64(r);
                tries += 1;
            }
            c
        })
        .collect()
}

/// Read `len` ≤ 58 bits at bit offset `off` of a block of `wpb` words given by a word accessor.
///
/// Branch-free: whether a field crosses a word boundary depends on the key's group, so a branch
/// on it mispredicts often on the lookup path; instead the next word (clamped to the block) is
/// always read and the two are shifted as one 128-bit value.
#[inline(always)]
pub(crate) fn read_bits_with(word: &impl Fn(usize) -> u64, wpb: usize, off: u32, len: u32) -> u64 {
    let w = (off / 64) as usize;
    let sh = off % 64;
    let lo = word(w) as u128;
    let hi = word((w + 1).min(wpb - 1)) as u128;
    let x = ((hi << 64) | lo) >> sh;
    (x as u64) & ((1u64 << len) - 1)
}

/// Read `len` ≤ 58 bits at bit offset `off` of plain words.
#[inline(always)]
pub(crate) fn read_bits(words: &[u64], off: u32, len: u32) -> u64 {
    read_bits_with(&|i| words[i], words.len(), off, len)
}

/// Write `len` ≤ 58 bits at bit offset `off` of plain words.
#[inline]
pub(crate) fn write_bits(words: &mut [u64], off: u32, len: u32, val: u64) {
    let mask = (1u64 << len) - 1;
    let val = val & mask;
    let w = (off / 64) as usize;
    let sh = off % 64;
    words[w] = (words[w] & !(mask << sh)) | (val << sh);
    if sh + len > 64 {
        let spill = sh + len - 64;
        let m2 = (1u64 << spill) - 1;
        words[w + 1] = (words[w + 1] & !m2) | (val >> (64 - sh));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_roundtrip_across_words() {
        let mut w = [0u64; 4];
        for (off, len, val) in [
            (0u32, 2u32, 3u64),
            (60, 24, 0xAB_CDEF),
            (127, 48, 0xFFFF_0000_1234),
            (200, 10, 0x155),
        ] {
            write_bits(&mut w, off, len, val);
            assert_eq!(read_bits(&w, off, len), val);
        }
        // Neighbours untouched.
        assert_eq!(read_bits(&w, 0, 2), 3);
        assert_eq!(read_bits(&w, 60, 24), 0xAB_CDEF);
    }

    #[test]
    fn paper_settings_fit_one_line_for_narrow_values() {
        let g = Geometry::new(&Config::new(1), 1 << 20).unwrap();
        assert_eq!((g.lines, g.groups, g.bins), (1, 16, 64));
        assert_eq!(g.blocks, 4096); // 256 keys per 64-byte block: 2.0 bits per key
        let g = Geometry::new(&Config::new(2), 1 << 20).unwrap();
        assert_eq!((g.lines, g.groups, g.bins), (1, 9, 40));
        let g = Geometry::new(&Config::new(4), 1 << 20).unwrap();
        assert_eq!((g.lines, g.groups, g.bins), (4, 19, 112));
        let g = Geometry::new(&Config::new(1).setting(8, 16), 1 << 20).unwrap();
        assert_eq!((g.lines, g.groups, g.bins), (1, 16, 64));
        for v in 1..=8 {
            for (x, y) in [(16, 8), (8, 16), (16, 16), (12, 4), (4, 32)] {
                let g = Geometry::new(&Config::new(v).setting(x, y), 1000).unwrap();
                assert!(g.groups * g.vbits * g.rec_bits + 2 * g.bins <= g.lines * 512);
                assert!(g
                    .cand
                    .iter()
                    .all(|c| c.iter().all(|&x| (x as u32) < g.groups)));
            }
        }
    }

    #[test]
    fn candidates_are_distinct() {
        let g = Geometry::new(&Config::new(1), 1000).unwrap();
        for c in g.cand.iter() {
            for i in 0..4 {
                for j in 0..i {
                    assert_ne!(c[i], c[j]);
                }
            }
        }
    }

    // Golden vectors: the placement of keys is part of the format shared by every node of a cluster.
    #[test]
    fn golden_placement() {
        let g = Geometry::new(&Config::new(2).seed(7), 1_000_000).unwrap();
        assert_eq!(g.blocks, 6836);
        let kh = g.hash(0x0002_b3aa_bbcc);
        assert_eq!(
            (kh.blk, kh.bin, kh.a, kh.b),
            (GOLDEN_KH.0, GOLDEN_KH.1, GOLDEN_KH.2, GOLDEN_KH.3)
        );
        assert_eq!(g.cand[0], GOLDEN_CAND0);
        assert_eq!(position(0x1234_5678, 0x9ABC_DEF1, 77, 3), GOLDEN_POS);
    }

    const GOLDEN_KH: (usize, u32, u32, u32) = (3801, 31, 3274515877, 4102508901);
    const GOLDEN_CAND0: [u8; 4] = [3, 0, 2, 1];
    const GOLDEN_POS: u32 = 6;
}
