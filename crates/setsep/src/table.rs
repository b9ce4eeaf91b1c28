//! The shared table and its reader handle: single and batched lookups, optimistic reads against a
//! single writer.
//!
//! # Concurrency
//!
//! A table may be changed in place by its [`Updater`](crate::Updater) while other threads read it.
//! Each block maps to one of `stripes` version counters; the writer makes it odd, rewrites the block's
//! words, and makes it even again (the protocol of fp-cuckoo, CuckooSwitch §3.2):
//!
//! ```text
//! writer: v = ver.load(Relaxed); ver.store(v + 1, Relaxed); fence(Release);
//!         word stores (Relaxed) ...; ver.store(v + 2, Release);
//! reader: v1 = ver.load(Acquire); if odd: retry;
//!         word loads (Relaxed) ...; fence(Acquire); if ver.load(Relaxed) != v1: retry
//! ```
//!
//! A reader therefore never combines a hash index from one version of a group with an array from
//! another. Groups in the fallback table: the writer fills the fallback before it publishes the
//! sentinel, and empties it only after publishing a block without the sentinel; a reader that saw the
//! sentinel but missed in the fallback re-checks the block version and retries if it moved, so a key
//! being moved out of the fallback is never reported absent. `tests/loom_update.rs` model-checks a
//! reader against a concurrent update.

use crate::geometry::{Geometry, KeyHash, Spec};
use crate::sync::{self, fence, Arc, AtomicU32, AtomicUsize, Ordering, Words};
use fp_cuckoo::{GeneralMap, PageKind};
use std::fmt;

/// Keys looked up together in one prefetching pass; longer batches are processed in chunks.
pub const CHUNK: usize = 32;

pub(crate) type FallbackReader = fp_cuckoo::Reader<GeneralMap<u64, u16>>;
pub(crate) type FallbackWriter = fp_cuckoo::Writer<GeneralMap<u64, u16>>;

pub(crate) struct Shared {
    pub geo: Geometry,
    pub words: Words,
    pub versions: Box<[AtomicU32]>,
    pub vmask: usize,
    /// Which specialised lookup copy to use.
    pub spec: Spec,
    /// Built once and never written (no version checks on lookups).
    pub is_static: bool,
    /// Keys in the set (maintained by the updater).
    pub len: AtomicUsize,
}

impl Shared {
    pub(crate) fn new(geo: Geometry, pages: fp_mem::PagePolicy) -> Result<Self, crate::Error> {
        let words = sync::alloc_words(geo.blocks * geo.wpb, pages)?;
        let stripes = geo.blocks.next_power_of_two().clamp(1, 4096);
        Ok(Shared {
            versions: (0..stripes).map(|_| AtomicU32::new(0)).collect(),
            vmask: stripes - 1,
            spec: geo.spec(),
            is_static: false,
            words,
            geo,
            len: AtomicUsize::new(0),
        })
    }

    #[inline(always)]
    fn version(&self, blk: usize) -> &AtomicU32 {
        &self.versions[blk & self.vmask]
    }

    /// Replace the words of block `blk` under its version counter (the single writer only).
    pub(crate) fn write_block(&self, blk: usize, new: &[u64]) {
        let ver = self.version(blk);
        let v = ver.load(Ordering::Relaxed);
        ver.store(v.wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::Release);
        let base = blk * self.geo.wpb;
        for (i, &w) in new.iter().enumerate() {
            self.words[base + i].store(w, Ordering::Relaxed);
        }
        ver.store(v.wrapping_add(2), Ordering::Release);
    }

    /// Copy of the words of block `blk` (writer side, no concurrent writer exists).
    pub(crate) fn read_block_plain(&self, blk: usize, out: &mut [u64]) {
        let base = blk * self.geo.wpb;
        for (i, o) in out.iter_mut().enumerate() {
            *o = self.words[base + i].load(Ordering::Relaxed);
        }
    }

    #[inline(always)]
    fn prefetch(&self, blk: usize) {
        let base = blk * self.geo.wpb;
        for l in 0..self.geo.lines as usize {
            fp_hash::prefetch_read(&self.words[base + 8 * l] as *const _);
        }
    }

    /// Evaluate one key, consistent against a concurrent writer. `S`: the table is static (built
    /// by [`build`](crate::build), never written again), so the version check is skipped.
    #[inline(always)]
    fn resolve<const S: bool, const V: u32, const X: u32, const LY: u32>(
        &self,
        kh: &KeyHash,
        key: u64,
        fallback: Option<&FallbackReader>,
    ) -> u16 {
        let wpb = self.geo.wpb;
        let block = &self.words[kh.blk * wpb..(kh.blk + 1) * wpb];
        let word = |i: usize| block[i].load(Ordering::Relaxed);
        if S {
            return match self.geo.eval_spec::<V, X, LY>(kh, word) {
                Some(v) => v,
                None => fallback.and_then(|f| f.get(key)).unwrap_or(0),
            };
        }
        let ver = self.version(kh.blk);
        loop {
            let v1 = ver.load(Ordering::Acquire);
            // Words read while the version is odd may be half-written; the result is then
            // discarded by the check below (they are atomics: no undefined behaviour).
            let r = self.geo.eval_spec::<V, X, LY>(kh, word);
            fence(Ordering::Acquire);
            let v2 = ver.load(Ordering::Relaxed);
            if v1 == v2 && v1 & 1 == 0 {
                match r {
                    Some(v) => return v,
                    None => {
                        if let Some(v) = Self::from_fallback(ver, v1, key, fallback) {
                            return v;
                        }
                    }
                }
            } else {
                sync::spin();
            }
        }
    }

    /// Look up a chunk of at most [`CHUNK`] keys: hash all and prefetch their blocks, then evaluate.
    #[inline(always)]
    fn chunk<const S: bool, const V: u32, const X: u32, const LY: u32>(
        &self,
        keys: &[u64],
        out: &mut [u16],
        fallback: Option<&FallbackReader>,
    ) {
        // Only the first-stage hash is kept between the passes (8 bytes a key: clearing a larger
        // array per call cost more than re-deriving the rest).
        let mut hs = [0u64; CHUNK];
        for (h, &k) in hs.iter_mut().zip(keys) {
            *h = self.geo.h(k);
            self.prefetch(self.geo.block_of_h(*h));
        }
        for ((&h, &k), o) in hs.iter().zip(keys).zip(out.iter_mut()) {
            let kh = self.geo.place_h(h);
            *o = self.resolve::<S, V, X, LY>(&kh, k, fallback);
        }
    }

    fn batch<const S: bool, const V: u32, const X: u32, const LY: u32>(
        &self,
        keys: &[u64],
        out: &mut [u16],
        fallback: Option<&FallbackReader>,
    ) {
        for (k, o) in keys.chunks(CHUNK).zip(out.chunks_mut(CHUNK)) {
            self.chunk::<S, V, X, LY>(k, o, fallback);
        }
    }

    fn one<const S: bool, const V: u32, const X: u32, const LY: u32>(
        &self,
        key: u64,
        fallback: Option<&FallbackReader>,
    ) -> u16 {
        let kh = self.geo.hash(key);
        self.resolve::<S, V, X, LY>(&kh, key, fallback)
    }

    /// A key of a group in the fallback table. `None`: the block changed meanwhile, retry.
    #[cold]
    #[inline(never)]
    fn from_fallback(
        ver: &AtomicU32,
        v1: u32,
        key: u64,
        fallback: Option<&FallbackReader>,
    ) -> Option<u16> {
        if let Some(v) = fallback.and_then(|f| f.get(key)) {
            return Some(v);
        }
        // A miss is final only if the block did not change meanwhile (the writer empties the
        // fallback only after publishing the group's new records).
        (ver.load(Ordering::Acquire) == v1).then_some(0)
    }
}

/// Call `$s.$f::<static, V, X, LY>($args)` with the constants of the table's specialised copy.
macro_rules! dispatch {
    ($s:expr, $f:ident, ($($arg:expr),*)) => {{
        let s = $s;
        match (s.is_static, s.spec) {
            (true, Spec::V1x16y8) => s.$f::<true, 1, 16, 3>($($arg),*),
            (true, Spec::V2x16y8) => s.$f::<true, 2, 16, 3>($($arg),*),
            (true, Spec::V3x16y8) => s.$f::<true, 3, 16, 3>($($arg),*),
            (true, Spec::V4x16y8) => s.$f::<true, 4, 16, 3>($($arg),*),
            (true, Spec::V1x8y16) => s.$f::<true, 1, 8, 4>($($arg),*),
            (true, Spec::V1x16y16) => s.$f::<true, 1, 16, 4>($($arg),*),
            (true, Spec::Generic) => s.$f::<true, 0, 0, 0>($($arg),*),
            (false, Spec::V1x16y8) => s.$f::<false, 1, 16, 3>($($arg),*),
            (false, Spec::V2x16y8) => s.$f::<false, 2, 16, 3>($($arg),*),
            (false, Spec::V3x16y8) => s.$f::<false, 3, 16, 3>($($arg),*),
            (false, Spec::V4x16y8) => s.$f::<false, 4, 16, 3>($($arg),*),
            (false, Spec::V1x8y16) => s.$f::<false, 1, 8, 4>($($arg),*),
            (false, Spec::V1x16y16) => s.$f::<false, 1, 16, 4>($($arg),*),
            (false, Spec::Generic) => s.$f::<false, 0, 0, 0>($($arg),*),
        }
    }};
}

/// A reader handle on a SetSep table: cheap to clone, `Send + Sync`. Lookups never block the writer
/// or each other.
///
/// A key of the set gets its value; any other key gets an arbitrary value below
/// `2^value_bits` (SetSep does not store keys).
#[derive(Clone)]
pub struct SetSep {
    pub(crate) shared: Arc<Shared>,
    /// The fallback table; `None` for a static table whose groups all have a solution.
    pub(crate) fallback: Option<FallbackReader>,
}

impl SetSep {
    /// The value of `key` (arbitrary for keys outside the set).
    #[inline]
    pub fn get(&self, key: u64) -> u16 {
        let (s, f) = (&*self.shared, self.fallback.as_ref());
        dispatch!(s, one, (key, f))
    }

    /// Look up `keys` (any number): hash the whole batch and prefetch every block, then evaluate.
    /// `out[i]` gets the value of `keys[i]`. Panics if the slices differ in length.
    pub fn get_batch(&self, keys: &[u64], out: &mut [u16]) {
        assert_eq!(keys.len(), out.len(), "get_batch: keys and out differ");
        let (s, f) = (&*self.shared, self.fallback.as_ref());
        dispatch!(s, batch, (keys, out, f))
    }

    /// Value bits per key.
    pub fn value_bits(&self) -> u32 {
        self.shared.geo.vbits
    }

    /// Keys in the set.
    pub fn len(&self) -> usize {
        self.shared.len.load(Ordering::Relaxed)
    }

    /// True when the set is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Sizes and shape.
    pub fn stats(&self) -> Stats {
        let g = &self.shared.geo;
        let fb = self.fallback.as_ref().map(|f| f.stats());
        Stats {
            keys: self.len(),
            value_bits: g.vbits,
            index_bits: g.xbits,
            array_bits: g.ybits(),
            blocks: g.blocks,
            block_bytes: g.wpb * 8,
            groups_per_block: g.groups,
            bins_per_block: g.bins,
            table_bytes: g.blocks * g.wpb * 8,
            reserved_bytes: sync::reserved_bytes(&self.shared.words),
            fallback_keys: fb.map_or(0, |f| f.len),
            fallback_bytes: fb.map_or(0, |f| f.bytes()),
            version_bytes: self.shared.versions.len() * 4,
            pages: sync::page_kind(&self.shared.words),
        }
    }
}

/// Size and shape of a table.
#[derive(Clone, Copy, Debug)]
pub struct Stats {
    /// Keys in the set.
    pub keys: usize,
    /// Value bits `v`.
    pub value_bits: u32,
    /// Hash index bits `x`.
    pub index_bits: u32,
    /// Array bits `y`.
    pub array_bits: u32,
    /// Blocks.
    pub blocks: usize,
    /// Bytes per block (a multiple of 64).
    pub block_bytes: usize,
    /// Groups per block.
    pub groups_per_block: u32,
    /// Bins per block.
    pub bins_per_block: u32,
    /// Bytes of blocks.
    pub table_bytes: usize,
    /// Bytes reserved from the system for the blocks (rounded to pages).
    pub reserved_bytes: usize,
    /// Keys in the fallback table.
    pub fallback_keys: usize,
    /// Bytes of the fallback table (a static table without fallback keys has none; an updatable
    /// one always has one, sized for growth).
    pub fallback_bytes: usize,
    /// Bytes of version counters.
    pub version_bytes: usize,
    /// Pages backing the blocks.
    pub pages: PageKind,
}

impl Stats {
    /// Bytes of blocks plus fallback table (version counters excluded: a static table needs none).
    pub fn bytes(&self) -> usize {
        self.table_bytes + self.fallback_bytes
    }

    /// Bits per key of the blocks plus fallback table.
    pub fn bits_per_key(&self) -> f64 {
        self.bytes() as f64 * 8.0 / self.keys.max(1) as f64
    }

    /// Fraction of keys in the fallback table.
    pub fn fallback_ratio(&self) -> f64 {
        self.fallback_keys as f64 / self.keys.max(1) as f64
    }
}

impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} keys, {}-bit values, {}+{}: {} blocks of {} B ({} groups, {} bins), {:.2} MiB on {} pages, {:.3} bits/key, fallback {} keys ({:.3}%)",
            self.keys,
            self.value_bits,
            self.index_bits,
            self.array_bits,
            self.blocks,
            self.block_bytes,
            self.groups_per_block,
            self.bins_per_block,
            self.bytes() as f64 / (1 << 20) as f64,
            self.pages,
            self.bits_per_key(),
            self.fallback_keys,
            100.0 * self.fallback_ratio()
        )
    }
}
