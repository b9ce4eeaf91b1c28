//! The cache table layout and the four designs (§4 of the paper).
//!
//! All designs share one layout: `n` buckets of `m` slots; a bucket stores its `m` 16-bit
//! fingerprints packed together, then its `m` 16-bit values, as 64-bit words (4 lanes each). A
//! 4-slot bucket is 16 bytes (four per 64-byte cache line), an 8-slot bucket 32 bytes (two per line).
//! A slot whose fingerprint is 0 is empty; [`fingerprint`] never returns 0.
//!
//! | design | buckets a key may use | lookup reads | paper |
//! |---|---|---|---|
//! | [`SetAssoc4`] | `h(k)` | one 16-byte bucket | §4.2, OvS's SMC |
//! | [`SetAssoc8`] | `h(k)` | one 32-byte bucket | §4.2 |
//! | [`CuckooLite`] | `h1(k)`, `h2(k)` (unrelated) | two buckets, two cache lines | §4.3 |
//! | [`Blp`] | `h(k)`, `h(k) + 1` (consecutive) | 32 contiguous bytes, one or two lines | §4.4 |
//!
//! Trade-offs recorded here:
//! * Bucket indices use Lemire's multiply-shift reduction of the hash's high bits, so any bucket
//!   count works (no power-of-two rounding that would change the oversubscription factor); the
//!   fingerprint is the hash's low 16 bits, independent of the index.
//! * BLP appends one *buffer bucket* after the last one instead of wrapping around (§6): a key of the
//!   last bucket spills into it, so the pair `h, h+1` is always 32 contiguous bytes and the lookup
//!   has no wrap-around branch. No key ever spills into bucket 0. The other designs need no buffer.
//! * 2-4 BLP with 16-byte buckets crosses a cache line for one bucket in four (`h mod 4 == 3`), so a
//!   lookup reads 1.25 lines on average (the paper counts 1.5 for its layout).
//! * Cuckoo-lite's second index comes from a multiply-fold of the hash, not from the fingerprint
//!   (partial-key cuckoo hashing needs that only to relocate keys, which cuckoo-lite never does).

use crate::matcher::Matcher;
use fp_mem::{HugeArray, PageKind, PagePolicy};
use std::fmt;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// The 16-bit fingerprint stored for a key with flow hash `hash`: its low 16 bits, with 0 (the
/// empty-slot marker) mapped to 1.
#[inline(always)]
pub const fn fingerprint(hash: u64) -> u16 {
    let f = hash as u16;
    f + (f == 0) as u16
}

/// Which of the paper's designs a [`Design`] type is (for analysis and reporting).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DesignKind {
    /// `m`-way set-associative (§4.2).
    SetAssociative,
    /// `2-m` cuckoo-lite: two unrelated buckets, no relocation (§4.3).
    CuckooLite,
    /// `2-m` bounded linear probing: two consecutive buckets, no relocation (§4.4).
    Blp,
}

pub(crate) mod sealed {
    use crate::matcher::Matcher;
    use std::sync::atomic::AtomicU64;

    /// Layout internals of a design; sealed so the slot arithmetic stays inside the crate.
    pub trait Layout: Sized {
        /// The (up to) two candidate buckets of a hash; designs with one choice repeat it.
        fn candidates(hash: u64, n: usize) -> [usize; 2];
        /// Candidate mask of `fp` over the candidate buckets (see `crate::matcher`).
        fn mask<M: Matcher>(m: M, words: &[AtomicU64], c: [usize; 2], fp: u16) -> u32;
        /// Prefetch the cache lines a lookup of these candidates will read.
        fn prefetch(words: &[AtomicU64], c: [usize; 2]);
    }
}

/// A cache design: where a key may be stored. Implemented by [`SetAssoc4`], [`SetAssoc8`],
/// [`CuckooLite`] and [`Blp`]; sealed.
pub trait Design: sealed::Layout + Copy + Default + fmt::Debug + Send + Sync + 'static {
    /// The paper's name, e.g. `"2-4 BLP"`.
    const NAME: &'static str;
    /// A short identifier for file names and JSON, e.g. `"blp"`.
    const ID: &'static str;
    /// Which design this is.
    const KIND: DesignKind;
    /// Slots per bucket (`m`).
    const WAYS: usize;
    /// Buckets a key may be stored in (`H`): 1 or 2.
    const CHOICES: usize;
    /// Extra buckets after the `n` addressed ones (BLP's buffer bucket).
    const BUFFER: usize;
    /// 64-bit words per bucket.
    const WORDS: usize = Self::WAYS / 2;
}

/// 4-way set-associative: a key lives in one bucket of 4 slots (Open vSwitch's SMC layout).
#[derive(Clone, Copy, Debug, Default)]
pub struct SetAssoc4;

/// 8-way set-associative: a key lives in one bucket of 8 slots (32 bytes).
#[derive(Clone, Copy, Debug, Default)]
pub struct SetAssoc8;

/// 2-4 cuckoo-lite: a key lives in one of two unrelated 4-slot buckets; never relocated.
#[derive(Clone, Copy, Debug, Default)]
pub struct CuckooLite;

/// 2-4 bounded linear probing: a key lives in its 4-slot bucket or the next one; never relocated.
#[derive(Clone, Copy, Debug, Default)]
pub struct Blp;

/// Multiplier for cuckoo-lite's second bucket (odd, the golden ratio's 64-bit expansion).
const ALT: u64 = 0x9E37_79B9_7F4A_7C15;

impl sealed::Layout for SetAssoc4 {
    #[inline(always)]
    fn candidates(hash: u64, n: usize) -> [usize; 2] {
        let b = fp_hash::reduce(hash, n as u64) as usize;
        [b, b]
    }
    #[inline(always)]
    fn mask<M: Matcher>(m: M, w: &[AtomicU64], c: [usize; 2], fp: u16) -> u32 {
        m.one4(&w[2 * c[0]], fp)
    }
    #[inline(always)]
    fn prefetch(w: &[AtomicU64], c: [usize; 2]) {
        fp_hash::prefetch_read(w[2 * c[0]].as_ptr());
    }
}

impl Design for SetAssoc4 {
    const NAME: &'static str = "4-way";
    const ID: &'static str = "4way";
    const KIND: DesignKind = DesignKind::SetAssociative;
    const WAYS: usize = 4;
    const CHOICES: usize = 1;
    const BUFFER: usize = 0;
}

impl sealed::Layout for SetAssoc8 {
    #[inline(always)]
    fn candidates(hash: u64, n: usize) -> [usize; 2] {
        let b = fp_hash::reduce(hash, n as u64) as usize;
        [b, b]
    }
    #[inline(always)]
    fn mask<M: Matcher>(m: M, w: &[AtomicU64], c: [usize; 2], fp: u16) -> u32 {
        let i = 4 * c[0];
        m.one8(w[i..i + 2].try_into().expect("2 words"), fp)
    }
    #[inline(always)]
    fn prefetch(w: &[AtomicU64], c: [usize; 2]) {
        fp_hash::prefetch_read(w[4 * c[0]].as_ptr());
    }
}

impl Design for SetAssoc8 {
    const NAME: &'static str = "8-way";
    const ID: &'static str = "8way";
    const KIND: DesignKind = DesignKind::SetAssociative;
    const WAYS: usize = 8;
    const CHOICES: usize = 1;
    const BUFFER: usize = 0;
}

impl sealed::Layout for CuckooLite {
    #[inline(always)]
    fn candidates(hash: u64, n: usize) -> [usize; 2] {
        let n = n as u64;
        [
            fp_hash::reduce(hash, n) as usize,
            fp_hash::reduce(fp_hash::mum(hash, ALT), n) as usize,
        ]
    }
    #[inline(always)]
    fn mask<M: Matcher>(m: M, w: &[AtomicU64], c: [usize; 2], fp: u16) -> u32 {
        m.two4(&w[2 * c[0]], &w[2 * c[1]], fp)
    }
    #[inline(always)]
    fn prefetch(w: &[AtomicU64], c: [usize; 2]) {
        fp_hash::prefetch_read(w[2 * c[0]].as_ptr());
        fp_hash::prefetch_read(w[2 * c[1]].as_ptr());
    }
}

impl Design for CuckooLite {
    const NAME: &'static str = "2-4 cuckoo-lite";
    const ID: &'static str = "cuckoo-lite";
    const KIND: DesignKind = DesignKind::CuckooLite;
    const WAYS: usize = 4;
    const CHOICES: usize = 2;
    const BUFFER: usize = 0;
}

impl sealed::Layout for Blp {
    #[inline(always)]
    fn candidates(hash: u64, n: usize) -> [usize; 2] {
        // Bucket n is the buffer bucket: h + 1 never wraps around.
        let b = fp_hash::reduce(hash, n as u64) as usize;
        [b, b + 1]
    }
    #[inline(always)]
    fn mask<M: Matcher>(m: M, w: &[AtomicU64], c: [usize; 2], fp: u16) -> u32 {
        let i = 2 * c[0];
        m.pair4(w[i..i + 4].try_into().expect("4 words"), fp)
    }
    #[inline(always)]
    fn prefetch(w: &[AtomicU64], c: [usize; 2]) {
        // The 32-byte pair spans two cache lines when it starts in the last 16 bytes of one.
        let i = 2 * c[0];
        fp_hash::prefetch_read(w[i].as_ptr());
        fp_hash::prefetch_read(w[i + 3].as_ptr());
    }
}

impl Design for Blp {
    const NAME: &'static str = "2-4 BLP";
    const ID: &'static str = "blp";
    const KIND: DesignKind = DesignKind::Blp;
    const WAYS: usize = 4;
    const CHOICES: usize = 2;
    const BUFFER: usize = 1;
}

/// The bucket array of a design: `(n + BUFFER) * WORDS` 64-bit words in (possibly huge) pages.
///
/// Words are atomics only to get safe shared mutability: the cache is single-writer (`&mut self`),
/// every access is `Relaxed` (a plain `mov` on x86) and no read-modify-write instruction is used.
pub struct Table<D: Design> {
    pub(crate) words: HugeArray<AtomicU64>,
    /// Addressed buckets (excluding the buffer bucket).
    pub(crate) n: usize,
    _d: PhantomData<D>,
}

impl<D: Design> Table<D> {
    pub(crate) fn new(n: usize, pages: PagePolicy) -> Result<Self, fp_mem::MemError> {
        let words = HugeArray::new((n + D::BUFFER) * D::WORDS, pages)?;
        Ok(Table {
            words,
            n,
            _d: PhantomData,
        })
    }

    /// Buckets including the buffer bucket.
    pub(crate) fn total_buckets(&self) -> usize {
        self.n + D::BUFFER
    }

    pub(crate) fn pages(&self) -> PageKind {
        self.words.pages()
    }

    pub(crate) fn bytes(&self) -> usize {
        self.words.len() * 8
    }

    #[inline(always)]
    fn fp_word(&self, b: usize, s: usize) -> &AtomicU64 {
        &self.words[b * D::WORDS + s / 4]
    }

    #[inline(always)]
    fn val_word(&self, b: usize, s: usize) -> &AtomicU64 {
        &self.words[b * D::WORDS + D::WAYS / 4 + s / 4]
    }

    /// Fingerprint of slot `s` of bucket `b`.
    #[inline(always)]
    pub(crate) fn fp(&self, b: usize, s: usize) -> u16 {
        (self.fp_word(b, s).load(Relaxed) >> (16 * (s % 4))) as u16
    }

    /// Value of slot `s` of bucket `b`.
    #[inline(always)]
    pub(crate) fn value(&self, b: usize, s: usize) -> u16 {
        (self.val_word(b, s).load(Relaxed) >> (16 * (s % 4))) as u16
    }

    #[inline(always)]
    fn put_lane(w: &AtomicU64, s: usize, x: u16) {
        let sh = 16 * (s % 4);
        let old = w.load(Relaxed);
        w.store((old & !(0xffff << sh)) | (x as u64) << sh, Relaxed);
    }

    /// Write slot `s` of bucket `b`.
    #[inline(always)]
    pub(crate) fn set(&self, b: usize, s: usize, fp: u16, value: u16) {
        Self::put_lane(self.fp_word(b, s), s, fp);
        Self::put_lane(self.val_word(b, s), s, value);
    }

    /// Overwrite the value of slot `s` of bucket `b`, keeping its fingerprint.
    #[inline(always)]
    pub(crate) fn set_value(&self, b: usize, s: usize, value: u16) {
        Self::put_lane(self.val_word(b, s), s, value);
    }

    /// Exchange slots `s` and `t` of bucket `b`.
    #[inline(always)]
    pub(crate) fn swap(&self, b: usize, s: usize, t: usize) {
        let (fs, vs) = (self.fp(b, s), self.value(b, s));
        let (ft, vt) = (self.fp(b, t), self.value(b, t));
        self.set(b, s, ft, vt);
        self.set(b, t, fs, vs);
    }

    /// Drop slot 0 of bucket `b`, move slots `1..m` up by one and put `(fp, value)` in the last slot
    /// (DC-Bubble's replacement after a miss).
    pub(crate) fn shift_in_last(&self, b: usize, fp: u16, value: u16) {
        for s in 0..D::WAYS - 1 {
            self.set(b, s, self.fp(b, s + 1), self.value(b, s + 1));
        }
        self.set(b, D::WAYS - 1, fp, value);
    }

    /// Empty every slot.
    pub(crate) fn clear(&self) {
        for w in self.words.iter() {
            w.store(0, Relaxed);
        }
    }

    /// Occupied slots (a full scan).
    pub(crate) fn occupied(&self) -> usize {
        (0..self.total_buckets())
            .map(|b| (0..D::WAYS).filter(|&s| self.fp(b, s) != 0).count())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprint_never_zero() {
        assert_eq!(fingerprint(0), 1);
        assert_eq!(fingerprint(0x1_0000), 1);
        assert_eq!(fingerprint(0xabcd), 0xabcd);
        assert_eq!(fingerprint(u64::MAX), 0xffff);
    }

    #[test]
    fn slot_ops() {
        let t: Table<SetAssoc8> = Table::new(3, PagePolicy::Auto).unwrap();
        for s in 0..8 {
            t.set(1, s, 100 + s as u16, 200 + s as u16);
        }
        assert_eq!(t.fp(1, 5), 105);
        assert_eq!(t.value(1, 7), 207);
        t.swap(1, 3, 4);
        assert_eq!((t.fp(1, 3), t.value(1, 3)), (104, 204));
        assert_eq!((t.fp(1, 4), t.value(1, 4)), (103, 203));
        t.shift_in_last(1, 999, 998);
        assert_eq!(t.fp(1, 0), 101);
        assert_eq!(t.fp(1, 2), 104);
        assert_eq!((t.fp(1, 7), t.value(1, 7)), (999, 998));
        assert_eq!(t.occupied(), 8);
        t.set_value(1, 0, 5);
        assert_eq!((t.fp(1, 0), t.value(1, 0)), (101, 5));
        t.clear();
        assert_eq!(t.occupied(), 0);
    }

    #[test]
    fn blp_buffer_bucket_is_last_and_never_wraps() {
        let n = 1000;
        for h in [0u64, u64::MAX, u64::MAX / 3, 1 << 63] {
            let [a, b] = <Blp as sealed::Layout>::candidates(h, n);
            assert!(a < n);
            assert_eq!(b, a + 1);
        }
        assert_eq!(<Blp as sealed::Layout>::candidates(u64::MAX, n), [n - 1, n]);
        let t: Table<Blp> = Table::new(n, PagePolicy::Auto).unwrap();
        assert_eq!(t.total_buckets(), n + 1);
        assert_eq!(t.bytes(), (n + 1) * 16);
    }

    #[test]
    fn cuckoo_candidates_are_independent() {
        let n = 1 << 16;
        let same = (0..100_000u64)
            .map(|i| fp_hash::hash_u64(1, i))
            .filter(|&h| {
                let [a, b] = <CuckooLite as sealed::Layout>::candidates(h, n);
                a == b
            })
            .count();
        // Expect about 100_000 / 65_536 ≈ 1.5.
        assert!(same < 10, "{same}");
    }
}
