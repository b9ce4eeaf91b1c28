//! Helpers shared by the integration tests.
#![allow(dead_code)]

use fp_flowcache::{Design, FlowCache, Policy};

/// A deterministic 64-bit generator (splitmix64 over a counter).
pub struct Gen(pub u64);

impl Gen {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        fp_hash::splitmix64(self.0)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        fp_hash::reduce(self.next(), n)
    }
}

/// A hash whose first candidate bucket is `b` (of `n`) and whose fingerprint is `fp`; `mid` varies
/// bits 16..32 (which select neither). Works for `n <= 2^24`.
pub fn hash_in_bucket(b: usize, n: usize, mid: u16, fp: u16) -> u64 {
    assert!(b < n && n <= 1 << 24);
    // Middle of bucket b's range of high bits: reduce(h, n) = floor(h n / 2^64) = b.
    let top = ((((b as u128) << 64) + (1u128 << 63)) / n as u128) as u64;
    (top & !0xffff_ffff) | (mid as u64) << 16 | fp as u64
}

/// `count` distinct hashes with fingerprint `fp` and exactly the same candidate buckets as the
/// first one generated for bucket `b`.
pub fn colliding<D: Design, P: Policy>(
    cache: &FlowCache<D, P>,
    b: usize,
    fp: u16,
    count: usize,
) -> Vec<u64> {
    let n = cache.buckets();
    let first = hash_in_bucket(b, n, 0, fp);
    let want = cache.candidate_buckets(first);
    let out: Vec<u64> = (0..=u16::MAX)
        .map(|mid| hash_in_bucket(b, n, mid, fp))
        .filter(|&h| cache.candidate_buckets(h) == want)
        .take(count)
        .collect();
    assert_eq!(
        out.len(),
        count,
        "not enough colliding hashes for {}",
        D::NAME
    );
    out
}

/// Call `$f::<D, P>()` for every design and policy.
#[macro_export]
macro_rules! for_every_cache {
    ($f:ident) => {{
        use fp_flowcache::{Blp, CuckooLite, DcBubble, Pblru, Random, SetAssoc4, SetAssoc8};
        $f::<SetAssoc4, Random>();
        $f::<SetAssoc4, Pblru>();
        $f::<SetAssoc4, DcBubble>();
        $f::<SetAssoc8, Random>();
        $f::<SetAssoc8, Pblru>();
        $f::<SetAssoc8, DcBubble>();
        $f::<CuckooLite, Random>();
        $f::<CuckooLite, Pblru>();
        $f::<CuckooLite, DcBubble>();
        $f::<Blp, Random>();
        $f::<Blp, Pblru>();
        $f::<Blp, DcBubble>();
    }};
}
