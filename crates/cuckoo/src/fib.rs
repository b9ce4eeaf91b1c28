//! One FIB handle over the two layouts for MAC-keyed tables: the 2,4 compact layout
//! ([`CompactMap`](crate::CompactMap), CuckooSwitch's) and the quotiented one
//! ([`QuotientMap`]). Both take the same keys (48 bits, or up to `64 - value_bits` with a
//! narrower value, for a FIB keyed by VLAN and MAC) and values, the same single-writer,
//! lock-free-reader protocol and the same batched lookups, so an application picks the layout
//! when it builds the table ([`FibLayout::auto`] by size) and reads and writes it the same way.
//!
//! ```
//! use fp_cuckoo::{Config, FibLayout, FibMap};
//!
//! let layout = FibLayout::auto(1 << 20); // the 2,4 layout below 256 Mi entries
//! assert_eq!(layout, FibLayout::Compact);
//! for layout in [FibLayout::Compact, FibLayout::Quotient] {
//!     let (mut w, r) = FibMap::new(&Config::with_capacity(1000), layout, 16).unwrap();
//!     w.insert(0x0200_0000_000a, 3).unwrap();
//!     let mut out = [None; 2];
//!     r.get_batch(&[0x0200_0000_000a, 7], &mut out);
//!     assert_eq!(out, [Some(3), None]);
//!     assert_eq!(r.stats().layout, layout.name());
//! }
//! ```

use std::fmt;
use std::str::FromStr;

use crate::quotient::{QuotientMap, QuotientReader, QuotientStats, QuotientWriter};
use crate::{
    CompactMap, CompactReader, CompactWriter, Config, Error, InsertError, Placement, Prefetch,
    Stats, STRIPES,
};

/// Which layout a FIB uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FibLayout {
    /// The 2,4 layout: four whole 64-bit (key, value) words in a 32-byte bucket, about 8.4 bytes
    /// per entry at 95 % load, 1.28 lines per successful lookup.
    Compact,
    /// The quotiented layout: 10 to 13 slots of the key's quotient in a 64-byte bucket, 5.2 to
    /// 6.8 bytes per entry, about 1.1 lines per successful lookup; fewer instructions per lookup for
    /// 48-bit keys, more for wider ones.
    Quotient,
}

impl FibLayout {
    /// Entries from which [`FibLayout::auto`] picks the quotiented layout: from there its
    /// lookups read fewer lines where lines cost the most, and it needs a third less memory.
    /// Below, its extra instructions cost about what its fewer lines save (docs/quotient.md).
    pub const QUOTIENT_FROM: usize = 256 << 20;

    /// The layout for a FIB of `capacity` entries: quotiented from [`Self::QUOTIENT_FROM`].
    pub fn auto(capacity: usize) -> FibLayout {
        if capacity >= Self::QUOTIENT_FROM {
            FibLayout::Quotient
        } else {
            FibLayout::Compact
        }
    }

    /// The name [`Stats::layout`] and the parser use: `"2,4"` or `"quotient"`.
    pub fn name(self) -> &'static str {
        match self {
            FibLayout::Compact => "2,4",
            FibLayout::Quotient => "quotient",
        }
    }
}

impl fmt::Display for FibLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FibLayout::Compact => "compact",
            FibLayout::Quotient => "quotient",
        })
    }
}

impl FromStr for FibLayout {
    type Err = String;

    /// `compact` (or `2,4`) or `quotient`.
    fn from_str(s: &str) -> Result<FibLayout, String> {
        match s {
            "compact" | "2,4" => Ok(FibLayout::Compact),
            "quotient" => Ok(FibLayout::Quotient),
            _ => Err(format!("{s:?}: expected compact or quotient")),
        }
    }
}

/// Builds FIBs: [`FibMap::new`].
pub struct FibMap;

impl FibMap {
    /// An empty FIB of `layout` for `cfg.capacity` entries whose values take `value_bits`
    /// (2..=16) bits and keys `64 - value_bits` (48 bits with 16-bit values): its single writer
    /// and a reader (clone it for more).
    #[allow(clippy::new_ret_no_self)]
    pub fn new(
        cfg: &Config,
        layout: FibLayout,
        value_bits: u32,
    ) -> Result<(FibWriter, FibReader), Error> {
        Ok(match layout {
            FibLayout::Compact => {
                let (w, r) = CompactMap::with_value_bits(cfg, value_bits)?;
                (FibWriter(W::Compact(w)), FibReader(R::Compact(r)))
            }
            FibLayout::Quotient => {
                let (w, r) = QuotientMap::with_value_bits(cfg, value_bits)?;
                (FibWriter(W::Quotient(w)), FibReader(R::Quotient(r)))
            }
        })
    }
}

enum W {
    Compact(CompactWriter),
    Quotient(QuotientWriter),
}

#[derive(Clone)]
enum R {
    Compact(CompactReader),
    Quotient(QuotientReader),
}

/// A lock-free reading handle of a FIB of either layout (cheap to clone, `Send + Sync`).
#[derive(Clone)]
pub struct FibReader(R);

/// The single writer of a FIB of either layout.
pub struct FibWriter(W);

impl From<CompactWriter> for FibWriter {
    fn from(w: CompactWriter) -> FibWriter {
        FibWriter(W::Compact(w))
    }
}

impl From<QuotientWriter> for FibWriter {
    fn from(w: QuotientWriter) -> FibWriter {
        FibWriter(W::Quotient(w))
    }
}

impl From<CompactReader> for FibReader {
    fn from(r: CompactReader) -> FibReader {
        FibReader(R::Compact(r))
    }
}

impl From<QuotientReader> for FibReader {
    fn from(r: QuotientReader) -> FibReader {
        FibReader(R::Quotient(r))
    }
}

impl From<QuotientStats> for Stats {
    fn from(q: QuotientStats) -> Stats {
        Stats {
            len: q.len,
            slots: q.slots(),
            buckets: q.buckets,
            table_bytes: q.table_bytes,
            version_bytes: q.version_bytes,
            stripes: STRIPES,
            slot_bytes: q.slot_bits.div_ceil(8) as usize,
            payload_bytes: 8,
            pages: q.pages,
            layout: FibLayout::Quotient.name(),
        }
    }
}

impl FibReader {
    /// The value of `key`.
    #[inline]
    pub fn get(&self, key: u64) -> Option<u16> {
        match &self.0 {
            R::Compact(r) => r.get(key),
            R::Quotient(r) => r.get(key),
        }
    }

    /// Look up `keys` (any number) into `out` (same length) with two-round prefetching, in
    /// chunks pipelined one into the next.
    #[inline]
    pub fn get_batch(&self, keys: &[u64], out: &mut [Option<u16>]) {
        self.get_batch_with(keys, out, Prefetch::TwoRound)
    }

    /// [`get_batch`](Self::get_batch) with an explicit prefetch strategy (for comparisons; the
    /// quotiented layout always prefetches).
    #[inline]
    pub fn get_batch_with(&self, keys: &[u64], out: &mut [Option<u16>], mode: Prefetch) {
        match &self.0 {
            R::Compact(r) => r.get_batch_with(keys, out, mode),
            R::Quotient(r) => r.get_batch(keys, out),
        }
    }

    /// Entries stored.
    pub fn len(&self) -> usize {
        match &self.0 {
            R::Compact(r) => r.len(),
            R::Quotient(r) => r.len(),
        }
    }

    /// Whether no entry is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Size, occupancy and layout.
    pub fn stats(&self) -> Stats {
        match &self.0 {
            R::Compact(r) => r.stats(),
            R::Quotient(r) => r.stats().into(),
        }
    }

    /// The layout.
    pub fn layout(&self) -> FibLayout {
        match &self.0 {
            R::Compact(_) => FibLayout::Compact,
            R::Quotient(_) => FibLayout::Quotient,
        }
    }
}

impl FibWriter {
    /// The value of `key` (the writer's own view: no version protocol).
    pub fn get(&self, key: u64) -> Option<u16> {
        match &self.0 {
            W::Compact(w) => w.get(key),
            W::Quotient(w) => w.get(key),
        }
    }

    /// [`FibReader::get_batch`] for the writer's own lookups.
    pub fn get_batch(&self, keys: &[u64], out: &mut [Option<u16>]) {
        match &self.0 {
            W::Compact(w) => w.get_batch(keys, out),
            W::Quotient(w) => w.get_batch(keys, out),
        }
    }

    /// Insert `key` with `value`, or overwrite its value in place (returning the old one). On an
    /// error nothing changed: [`InsertError::Full`] when no room can be made,
    /// [`InsertError::KeyOutOfRange`] or [`InsertError::ReservedValue`] beyond the split.
    pub fn insert(&mut self, key: u64, value: u16) -> Result<Option<u16>, InsertError> {
        match &mut self.0 {
            W::Compact(w) => w.insert(key, value),
            W::Quotient(w) => w.insert(key, value),
        }
    }

    /// Overwrite the value of a present key in place; `Ok(None)` if the key is absent.
    pub fn update(&mut self, key: u64, value: u16) -> Result<Option<u16>, InsertError> {
        match &mut self.0 {
            W::Compact(w) => w.update(key, value),
            W::Quotient(w) => w.update(key, value),
        }
    }

    /// Remove `key`; its value if it was there.
    pub fn remove(&mut self, key: u64) -> Option<u16> {
        match &mut self.0 {
            W::Compact(w) => w.remove(key),
            W::Quotient(w) => w.remove(key),
        }
    }

    /// Entries stored.
    pub fn len(&self) -> usize {
        match &self.0 {
            W::Compact(w) => w.len(),
            W::Quotient(w) => w.len(),
        }
    }

    /// Whether no entry is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Size, occupancy and layout.
    pub fn stats(&self) -> Stats {
        match &self.0 {
            W::Compact(w) => w.stats(),
            W::Quotient(w) => w.stats().into(),
        }
    }

    /// Where the entries sit (a scan of the whole table: for operators and benchmarks).
    pub fn placement(&self) -> Placement {
        match &self.0 {
            W::Compact(w) => w.placement(),
            W::Quotient(w) => {
                let (first, second) = w.placement();
                Placement { first, second }
            }
        }
    }

    /// The layout.
    pub fn layout(&self) -> FibLayout {
        match &self.0 {
            W::Compact(_) => FibLayout::Compact,
            W::Quotient(_) => FibLayout::Quotient,
        }
    }

    /// A new reader handle.
    pub fn reader(&self) -> FibReader {
        FibReader(match &self.0 {
            W::Compact(w) => R::Compact(w.reader()),
            W::Quotient(w) => R::Quotient(w.reader()),
        })
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn both_layouts_answer_alike_through_one_handle() {
        let keys: Vec<u64> = (0..5_000u64)
            .map(|i| (i % 7) << 50 | fp_hash::splitmix64(i) & ((1 << 48) - 1))
            .collect();
        for layout in [FibLayout::Compact, FibLayout::Quotient] {
            let (mut w, r) = FibMap::new(&Config::with_capacity(6_000), layout, 6).unwrap();
            assert_eq!((w.layout(), r.layout()), (layout, layout));
            for (i, &k) in keys.iter().enumerate() {
                assert_eq!(w.insert(k, (i % 60) as u16), Ok(None), "{layout}");
            }
            let mut out = vec![None; keys.len()];
            r.get_batch(&keys, &mut out);
            for (i, (&k, o)) in keys.iter().zip(&out).enumerate() {
                assert_eq!(*o, Some((i % 60) as u16));
                assert_eq!(w.get(k), *o);
                assert_eq!(w.reader().get(k), *o);
            }
            assert_eq!(w.update(keys[1], 9), Ok(Some(1)));
            assert_eq!(w.update(1 << 49, 9), Ok(None));
            assert_eq!(w.remove(keys[1]), Some(9));
            assert_eq!(w.insert(1 << 58, 1), Err(InsertError::KeyOutOfRange));
            assert_eq!(w.insert(1, 63), Err(InsertError::ReservedValue));
            let s = r.stats();
            assert_eq!((s.len, s.layout), (keys.len() - 1, layout.name()));
            let p = w.placement();
            assert_eq!(p.first + p.second, keys.len() - 1);
        }
    }

    #[test]
    fn the_layout_follows_the_size_and_parses() {
        assert_eq!(FibLayout::auto(1 << 20), FibLayout::Compact);
        assert_eq!(FibLayout::auto((256 << 20) - 1), FibLayout::Compact);
        assert_eq!(FibLayout::auto(256 << 20), FibLayout::Quotient);
        assert_eq!(FibLayout::auto(1 << 30), FibLayout::Quotient);
        for l in [FibLayout::Compact, FibLayout::Quotient] {
            assert_eq!(l.to_string().parse::<FibLayout>(), Ok(l));
        }
        assert!("2,5"
            .parse::<FibLayout>()
            .unwrap_err()
            .contains("compact or quotient"));
    }
}
