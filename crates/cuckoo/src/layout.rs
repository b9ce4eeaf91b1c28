//! How an entry is laid out in a slot: the two layouts share one algorithm (`table.rs`).
//!
//! * [`Compact`]: CuckooSwitch's layout. Key (up to 48 bits, e.g. a MAC address) and value (16 bits,
//!   e.g. a port) pack into one 64-bit word: `key << 16 | (value + 1)`. A word whose low 16 bits are
//!   zero is empty, so freshly mapped (zeroed) memory is an empty table and the value `u16::MAX` is
//!   reserved. A bucket is 4 words = 32 bytes, half a cache line. The split is adjustable
//!   ([`Compact::with_value_bits`]): a table whose values need fewer bits (a switch with few
//!   ports) gives the rest to the key — 4-bit values leave 60 key bits, a 12-bit VLAN and a MAC.
//! * [`General`]: any fixed-size key and value (a 13-byte IPv4 5-tuple or a 37-byte IPv6 5-tuple with
//!   an 8-byte value). An entry is `W = ceil((1 + K + V) / 8)` words holding
//!   `[key: K bytes][tag: 1 byte][value: V bytes]`, the value moved up to the next word boundary when
//!   that costs no extra word (13 + 1 + 8 → 3 words, 37 + 1 + 8 → 6 words, value word-aligned); the
//!   tag is 7 bits of the key's hash with the top bit set, so it is never zero and zero means empty.
//!   A lookup builds the probe's words straight from the key (no byte staging: a wide load of bytes
//!   just stored one by one stalls store forwarding), skips a bucket none of whose tag words
//!   match, otherwise compares the key and tag words of all four slots without branches, and
//!   decodes the value only after the read validated.
//!
//! All slot reads are `Relaxed` atomic loads; they are made consistent by the version protocol in
//! `table.rs`, which decodes a value only after the versions validated.

use crate::sync::{AtomicU64, Ordering::Relaxed};
use std::marker::PhantomData;

/// Maximum entry size in words for the general layout (64 bytes: tag + key + value).
pub const MAX_WORDS: usize = 8;

/// A slot layout. Sealed: implemented by [`Compact`] and [`General`] only.
pub trait Layout: sealed::Sealed + Send + Sync + 'static {
    /// The key type.
    type Key: Copy;
    /// The value type.
    type Value: Copy;
    /// A key prepared for lookups: its hash and encoded form.
    #[doc(hidden)]
    type Probe: Copy + Default;
    /// A slot's value words as read (decoded only after the read validated).
    #[doc(hidden)]
    type Raw: Copy + Default;

    /// Words per slot.
    #[doc(hidden)]
    fn stride(&self) -> usize;
    /// Prepare a key. `None` if the key cannot be stored in this layout (never present).
    #[doc(hidden)]
    fn probe(&self, seed: u64, key: &Self::Key) -> Option<Self::Probe>;
    #[doc(hidden)]
    fn probe_hash(p: &Self::Probe) -> u64;
    /// If `slot` holds the probe's key, its raw value.
    #[doc(hidden)]
    fn matches(&self, slot: &[AtomicU64], p: &Self::Probe) -> Option<Self::Raw>;
    /// Search a whole bucket (`SLOTS * stride` words): whether the key is there and its raw value.
    /// Layouts override this with a branch-free version where they can: on the lookup path a
    /// data-dependent early exit mispredicts about half the time, right after a cache miss.
    #[doc(hidden)]
    #[inline(always)]
    fn scan(&self, bucket: &[AtomicU64], p: &Self::Probe) -> (bool, Self::Raw) {
        let stride = self.stride();
        for slot in bucket.chunks_exact(stride) {
            if let Some(raw) = self.matches(slot, p) {
                return (true, raw);
            }
        }
        (false, Self::Raw::default())
    }
    #[doc(hidden)]
    fn decode(&self, raw: Self::Raw) -> Self::Value;
    #[doc(hidden)]
    fn is_empty(&self, slot: &[AtomicU64]) -> bool;
    /// For the writer's insert: bit `i` of the first mask set when slot `i` of `bucket` may hold
    /// the probe's key (a superset of the slots that do: confirm with [`Layout::matches`]), of
    /// the second when slot `i` is empty. Layouts with tags override it to read only those.
    #[doc(hidden)]
    #[inline(always)]
    fn masks(&self, bucket: &[AtomicU64], p: &Self::Probe) -> (u32, u32) {
        let (mut cand, mut empty) = (0u32, 0u32);
        for (i, slot) in bucket
            .chunks_exact(self.stride())
            .take(crate::table::SLOTS)
            .enumerate()
        {
            cand |= (self.matches(slot, p).is_some() as u32) << i;
            empty |= (self.is_empty(slot) as u32) << i;
        }
        (cand, empty)
    }
    /// Hash of the key stored in an occupied slot (writer side only).
    #[doc(hidden)]
    fn slot_hash(&self, seed: u64, slot: &[AtomicU64]) -> u64;
    /// Key stored in an occupied slot (writer side only).
    #[doc(hidden)]
    fn slot_key(&self, slot: &[AtomicU64]) -> Self::Key;
    /// Raw value words of an occupied slot (writer side only), decodable with [`Layout::decode`].
    #[doc(hidden)]
    fn slot_raw(&self, slot: &[AtomicU64]) -> Self::Raw;
    /// Encode key and value into `out[..stride]`. `Err` if the value cannot be stored.
    #[doc(hidden)]
    fn encode(
        &self,
        p: &Self::Probe,
        key: &Self::Key,
        value: &Self::Value,
        out: &mut [u64; MAX_WORDS],
    ) -> Result<(), crate::InsertError>;
    /// Bytes of payload (key + value) an entry carries, for reports.
    #[doc(hidden)]
    fn payload_bytes(&self) -> usize;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::Compact {}
    impl<K: super::FixedBytes, V: super::FixedBytes> Sealed for super::General<K, V> {}
}

/// CuckooSwitch's one-word layout: by default 48-bit keys and 16-bit values (`u16::MAX`
/// reserved); [`Compact::with_value_bits`] moves the split.
#[derive(Clone, Copy, Debug)]
pub struct Compact {
    /// Bits of the word that hold `value + 1` (the rest hold the key).
    vbits: u32,
    /// `(1 << vbits) - 1`: the value field, and the one value it cannot hold.
    vmask: u64,
}

impl Default for Compact {
    fn default() -> Compact {
        Compact::split(16)
    }
}

impl Compact {
    /// The layout with `bits` (2..=16) of each word for the value and `64 - bits` for the key:
    /// values up to `2^bits - 2`, keys up to `2^(64 - bits) - 1`.
    pub fn split(bits: u32) -> Compact {
        let vbits = bits.clamp(2, 16);
        Compact {
            vbits,
            vmask: (1u64 << vbits) - 1,
        }
    }

    /// Bits of the value.
    pub fn value_bits(&self) -> u32 {
        self.vbits
    }

    /// Largest key the layout stores.
    pub fn max_key(&self) -> u64 {
        u64::MAX >> self.vbits
    }

    /// Largest value the layout stores.
    pub fn max_value(&self) -> u16 {
        (self.vmask - 1) as u16
    }
}

/// Largest key the default compact layout stores (48 bits).
pub const COMPACT_MAX_KEY: u64 = (1 << 48) - 1;

#[derive(Clone, Copy, Default)]
#[doc(hidden)]
pub struct CompactProbe {
    hash: u64,
    key_hi: u64,
}

impl Layout for Compact {
    type Key = u64;
    type Value = u16;
    type Probe = CompactProbe;
    type Raw = u64;

    #[inline(always)]
    fn stride(&self) -> usize {
        1
    }

    #[inline(always)]
    fn probe(&self, seed: u64, key: &u64) -> Option<CompactProbe> {
        if *key > self.max_key() {
            return None;
        }
        Some(CompactProbe {
            hash: fp_hash::hash_u64(seed, *key),
            key_hi: key << self.vbits,
        })
    }

    #[inline(always)]
    fn probe_hash(p: &CompactProbe) -> u64 {
        p.hash
    }

    #[inline(always)]
    fn matches(&self, slot: &[AtomicU64], p: &CompactProbe) -> Option<u64> {
        let w = slot[0].load(Relaxed);
        // Same key bits and a non-zero (occupied) value field: d in 1..=vmask.
        let d = w ^ p.key_hi;
        (d.wrapping_sub(1) < self.vmask).then_some(d)
    }

    #[inline(always)]
    fn scan(&self, bucket: &[AtomicU64], p: &CompactProbe) -> (bool, u64) {
        // All four slots, no early exit. A slot holds the key iff `w ^ key_hi` is in 1..=vmask
        // (same key bits, occupied), i.e. iff `(w ^ key_hi) - 1 < vmask`; the unsigned minimum of
        // that over the bucket is below vmask iff some slot matches, and then it is that slot's
        // value (at most one slot holds the key in a consistent read; an inconsistent one is
        // discarded by validation). Compiles to loads, xors and conditional moves.
        let b = &bucket[..crate::table::SLOTS];
        let m = |w: &AtomicU64| (w.load(Relaxed) ^ p.key_hi).wrapping_sub(1);
        let best = m(&b[0]).min(m(&b[1])).min(m(&b[2]).min(m(&b[3])));
        (best < self.vmask, best.wrapping_add(1))
    }

    #[inline(always)]
    fn decode(&self, raw: u64) -> u16 {
        (raw as u16).wrapping_sub(1)
    }

    #[inline(always)]
    fn is_empty(&self, slot: &[AtomicU64]) -> bool {
        slot[0].load(Relaxed) & self.vmask == 0
    }

    #[inline(always)]
    fn slot_hash(&self, seed: u64, slot: &[AtomicU64]) -> u64 {
        fp_hash::hash_u64(seed, slot[0].load(Relaxed) >> self.vbits)
    }

    fn slot_key(&self, slot: &[AtomicU64]) -> u64 {
        slot[0].load(Relaxed) >> self.vbits
    }

    #[inline(always)]
    fn slot_raw(&self, slot: &[AtomicU64]) -> u64 {
        slot[0].load(Relaxed) & self.vmask
    }

    #[inline(always)]
    fn encode(
        &self,
        p: &CompactProbe,
        _key: &u64,
        value: &u16,
        out: &mut [u64; MAX_WORDS],
    ) -> Result<(), crate::InsertError> {
        if *value as u64 >= self.vmask {
            return Err(crate::InsertError::ReservedValue);
        }
        out[0] = p.key_hi | (*value as u64 + 1);
        Ok(())
    }

    fn payload_bytes(&self) -> usize {
        8
    }
}

/// A fixed-size type stored as bytes in the general layout.
///
/// `put` writes exactly `LEN` bytes; `get` reads them back. `get` is only ever called on bytes that
/// `put` wrote (reads are validated before decoding). The word forms default to going through
/// bytes; types override them where they can read or build their words directly (on the lookup
/// path, a wide load of bytes that were just stored one by one stalls store forwarding).
pub trait FixedBytes: Copy + Send + Sync + 'static {
    /// Encoded length in bytes.
    const LEN: usize;
    /// Write the encoding into `out[..LEN]`.
    fn put(&self, out: &mut [u8]);
    /// Read a value back from `b[..LEN]`.
    fn get(b: &[u8]) -> Self;
    /// Write the encoding as little-endian words into `out[..LEN.div_ceil(8)]`, the last one
    /// zero-padded.
    #[inline(always)]
    fn put_words(&self, out: &mut [u64]) {
        let mut b = [0u8; MAX_WORDS * 8];
        self.put(&mut b[..Self::LEN]);
        for (i, w) in out[..Self::LEN.div_ceil(8)].iter_mut().enumerate() {
            *w = u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        }
    }
    /// Read a value back from words written by [`FixedBytes::put_words`].
    #[inline(always)]
    fn get_words(w: &[u64]) -> Self {
        let mut b = [0u8; MAX_WORDS * 8];
        for (i, x) in w[..Self::LEN.div_ceil(8)].iter().enumerate() {
            b[i * 8..i * 8 + 8].copy_from_slice(&x.to_le_bytes());
        }
        Self::get(&b[..Self::LEN])
    }
}

macro_rules! fixed_int {
    ($($t:ty),*) => { $(
        impl FixedBytes for $t {
            const LEN: usize = std::mem::size_of::<$t>();
            #[inline(always)]
            fn put(&self, out: &mut [u8]) {
                out[..Self::LEN].copy_from_slice(&self.to_le_bytes());
            }
            #[inline(always)]
            fn get(b: &[u8]) -> Self {
                let mut a = [0u8; std::mem::size_of::<$t>()];
                a.copy_from_slice(&b[..Self::LEN]);
                <$t>::from_le_bytes(a)
            }
            #[inline(always)]
            fn put_words(&self, out: &mut [u64]) {
                let mut a = [0u8; 8];
                a[..Self::LEN].copy_from_slice(&self.to_le_bytes());
                out[0] = u64::from_le_bytes(a);
            }
            #[inline(always)]
            fn get_words(w: &[u64]) -> Self {
                let mut a = [0u8; std::mem::size_of::<$t>()];
                a.copy_from_slice(&w[0].to_le_bytes()[..Self::LEN]);
                <$t>::from_le_bytes(a)
            }
        }
    )* };
}
fixed_int!(u8, u16, u32, u64, i32, i64);

impl FixedBytes for u128 {
    const LEN: usize = 16;
    #[inline(always)]
    fn put(&self, out: &mut [u8]) {
        out[..16].copy_from_slice(&self.to_le_bytes());
    }
    #[inline(always)]
    fn get(b: &[u8]) -> Self {
        u128::from_le_bytes(b[..16].try_into().expect("16 bytes"))
    }
    #[inline(always)]
    fn put_words(&self, out: &mut [u64]) {
        out[0] = *self as u64;
        out[1] = (*self >> 64) as u64;
    }
    #[inline(always)]
    fn get_words(w: &[u64]) -> Self {
        w[0] as u128 | (w[1] as u128) << 64
    }
}

impl<const N: usize> FixedBytes for [u8; N] {
    const LEN: usize = N;
    #[inline(always)]
    fn put(&self, out: &mut [u8]) {
        out[..N].copy_from_slice(self);
    }
    #[inline(always)]
    fn get(b: &[u8]) -> Self {
        let mut a = [0u8; N];
        a.copy_from_slice(&b[..N]);
        a
    }
    #[inline(always)]
    fn put_words(&self, out: &mut [u64]) {
        // Whole words are loaded straight from the array; a partial last word is the 8 bytes
        // ending at N shifted down (for N >= 8), so no byte is staged through the stack.
        let full = N / 8;
        for (j, w) in out[..full].iter_mut().enumerate() {
            *w = u64::from_le_bytes(self[j * 8..j * 8 + 8].try_into().expect("8 bytes"));
        }
        let rest = N % 8;
        if rest != 0 {
            out[full] = if N >= 8 {
                u64::from_le_bytes(self[N - 8..N].try_into().expect("8 bytes")) >> ((8 - rest) * 8)
            } else {
                let mut a = [0u8; 8];
                a[..N].copy_from_slice(self);
                u64::from_le_bytes(a)
            };
        }
    }
}

impl<A: FixedBytes, B: FixedBytes> FixedBytes for (A, B) {
    const LEN: usize = A::LEN + B::LEN;
    #[inline(always)]
    fn put(&self, out: &mut [u8]) {
        self.0.put(&mut out[..A::LEN]);
        self.1.put(&mut out[A::LEN..A::LEN + B::LEN]);
    }
    #[inline(always)]
    fn get(b: &[u8]) -> Self {
        (A::get(&b[..A::LEN]), B::get(&b[A::LEN..A::LEN + B::LEN]))
    }
}

/// The general layout for fixed-size keys and values (`1 + K::LEN + V::LEN <= 64` bytes).
///
/// A slot is `WORDS` little-endian words: the key's bytes from byte 0, the tag in the byte right
/// after the key, and the value either word-aligned after the key's last word (when that costs no
/// extra word, as for a 13-byte IPv4 5-tuple or a 37-byte IPv6 5-tuple with an 8-byte value: 3 and
/// 6 words) or packed right after the tag. Every count and offset is a constant of `K` and `V`, so
/// lookups compile to straight-line code.
pub struct General<K, V> {
    _kv: PhantomData<fn() -> (K, V)>,
}

impl<K, V> Clone for General<K, V> {
    fn clone(&self) -> Self {
        General { _kv: PhantomData }
    }
}

impl<K: FixedBytes, V: FixedBytes> General<K, V> {
    /// Entry size in bytes (tag + key + value), before rounding to words.
    pub const ENTRY_BYTES: usize = 1 + K::LEN + V::LEN;
    /// Words per slot.
    const WORDS: usize = Self::ENTRY_BYTES.div_ceil(8);
    /// Words holding the key and the tag (compared on lookup).
    const KEY_WORDS: usize = (K::LEN + 1).div_ceil(8);
    /// Words holding key bytes only (hashed).
    const HASH_WORDS: usize = K::LEN.div_ceil(8);
    /// The tag's word and bit offset in it.
    const TAG_WORD: usize = K::LEN / 8;
    const TAG_SHIFT: usize = (K::LEN % 8) * 8;
    /// Whether the value starts on its own word (at `KEY_WORDS`) without costing a word.
    const ALIGNED: bool = Self::KEY_WORDS + V::LEN.div_ceil(8) == Self::WORDS;

    pub(crate) fn new_layout() -> Self {
        assert!(
            Self::ENTRY_BYTES <= MAX_WORDS * 8,
            "general layout: 1 + key ({}) + value ({}) bytes exceeds {} bytes",
            K::LEN,
            V::LEN,
            MAX_WORDS * 8
        );
        General { _kv: PhantomData }
    }

    fn tag(hash: u64) -> u64 {
        ((hash >> 57) | 0x80) << Self::TAG_SHIFT
    }

    /// Mask of the bytes of word `j` that hold key bytes (`tag` false) or key and tag bytes.
    #[inline(always)]
    const fn mask(j: usize, tag: bool) -> u64 {
        let end = K::LEN + tag as usize;
        if end >= j * 8 + 8 {
            u64::MAX
        } else if end <= j * 8 {
            0
        } else {
            (1u64 << ((end - j * 8) * 8)) - 1
        }
    }

    #[inline(always)]
    fn load_words(slot: &[AtomicU64]) -> [u64; MAX_WORDS] {
        let mut w = [0u64; MAX_WORDS];
        for (x, a) in w[..Self::WORDS].iter_mut().zip(slot) {
            *x = a.load(Relaxed);
        }
        w
    }

    fn to_bytes(w: &[u64; MAX_WORDS]) -> [u8; MAX_WORDS * 8] {
        let mut b = [0u8; MAX_WORDS * 8];
        for (i, x) in w.iter().enumerate() {
            b[i * 8..i * 8 + 8].copy_from_slice(&x.to_le_bytes());
        }
        b
    }

    /// Zero when the key words of `slot` equal the probe's (tag included), compared in place.
    // Index loops over constant bounds: LLVM unrolls them, while it kept the zip/take/enumerate
    // chain as a loop (callgrind: 11 instructions of loop control per slot compared).
    #[allow(clippy::needless_range_loop)]
    #[inline(always)]
    fn key_diff(slot: &[AtomicU64], p: &GeneralProbe) -> u64 {
        let mut d = 0;
        for j in 0..Self::KEY_WORDS {
            d |= (slot[j].load(Relaxed) ^ p.words[j]) & Self::mask(j, true);
        }
        d
    }

    /// From the tag word of each slot of `bucket` only: the slots whose tag equals the probe's
    /// (bit `i` for slot `i`), and the empty slots (tag zero). Lookups use the first, inserts both;
    /// the unused one compiles away.
    #[inline(always)]
    fn tag_masks(bucket: &[AtomicU64], p: &GeneralProbe) -> (u32, u32) {
        let tw = Self::mask(Self::TAG_WORD, true);
        let (mut cand, mut empty) = (0u32, 0u32);
        for (i, slot) in bucket
            .chunks_exact(Self::WORDS)
            .take(crate::table::SLOTS)
            .enumerate()
        {
            let t = slot[Self::TAG_WORD].load(Relaxed);
            cand |= (((t ^ p.words[Self::TAG_WORD]) & tw == 0) as u32) << i;
            empty |= (((t >> Self::TAG_SHIFT) & 0xFF == 0) as u32) << i;
        }
        (cand, empty)
    }
}

#[derive(Clone, Copy, Default)]
#[doc(hidden)]
pub struct GeneralProbe {
    hash: u64,
    words: [u64; MAX_WORDS],
}

impl<K: FixedBytes, V: FixedBytes> Layout for General<K, V> {
    type Key = K;
    type Value = V;
    type Probe = GeneralProbe;
    type Raw = [u64; MAX_WORDS];

    #[inline(always)]
    fn stride(&self) -> usize {
        Self::WORDS
    }

    #[inline(always)]
    fn probe(&self, seed: u64, key: &K) -> Option<GeneralProbe> {
        let mut words = [0u64; MAX_WORDS];
        key.put_words(&mut words);
        let hash = fp_hash::hash_padded(seed, K::LEN, &words[..Self::HASH_WORDS]);
        words[Self::TAG_WORD] |= Self::tag(hash);
        Some(GeneralProbe { hash, words })
    }

    #[inline(always)]
    fn probe_hash(p: &GeneralProbe) -> u64 {
        p.hash
    }

    #[inline(always)]
    fn matches(&self, slot: &[AtomicU64], p: &GeneralProbe) -> Option<[u64; MAX_WORDS]> {
        // The tag's word first: most non-matching slots are rejected there.
        let t = slot[Self::TAG_WORD].load(Relaxed);
        if (t ^ p.words[Self::TAG_WORD]) & Self::mask(Self::TAG_WORD, true) != 0 {
            return None;
        }
        (Self::key_diff(slot, p) == 0).then(|| Self::load_words(slot))
    }

    #[allow(clippy::needless_range_loop)] // see `key_diff`
    #[inline(always)]
    fn scan(&self, bucket: &[AtomicU64], p: &GeneralProbe) -> (bool, [u64; MAX_WORDS]) {
        // The tag's word of each slot first: a mask of the slots whose tag equals the probe's.
        // None (a miss, e.g. every new flow's first bucket): done after four loads. One (nearly
        // always, with 7-bit tags): its key compared and its value read, at an address computed
        // from the mask instead of a data-dependent branch per slot. More (about 3 % of full
        // buckets): every slot compared. The two branches are predictable: established flows
        // find a candidate, new ones none, and tag collisions are rare.
        let mut raw = [0u64; MAX_WORDS];
        let (cand, _) = Self::tag_masks(bucket, p);
        if cand == 0 {
            return (false, raw);
        }
        // Only the words a decode reads: the value's, or all when it is packed after the key.
        let value_from = if Self::ALIGNED { Self::KEY_WORDS } else { 0 };
        if cand & (cand - 1) == 0 {
            let at = cand.trailing_zeros() as usize * Self::WORDS;
            let slot = &bucket[at..at + Self::WORDS];
            let hit = Self::key_diff(slot, p) == 0;
            for j in value_from..Self::WORDS {
                raw[j] = slot[j].load(Relaxed);
            }
            return (hit, raw);
        }
        let mut any = 0u64;
        for slot in bucket.chunks_exact(Self::WORDS).take(crate::table::SLOTS) {
            let m = ((Self::key_diff(slot, p) == 0) as u64).wrapping_neg();
            any |= m;
            for j in value_from..Self::WORDS {
                raw[j] |= slot[j].load(Relaxed) & m;
            }
        }
        (any != 0, raw)
    }

    #[inline(always)]
    fn decode(&self, raw: [u64; MAX_WORDS]) -> V {
        if Self::ALIGNED {
            V::get_words(&raw[Self::KEY_WORDS..])
        } else {
            let b = Self::to_bytes(&raw);
            V::get(&b[1 + K::LEN..1 + K::LEN + V::LEN])
        }
    }

    #[inline(always)]
    fn is_empty(&self, slot: &[AtomicU64]) -> bool {
        (slot[Self::TAG_WORD].load(Relaxed) >> Self::TAG_SHIFT) & 0xFF == 0
    }

    #[inline(always)]
    fn masks(&self, bucket: &[AtomicU64], p: &GeneralProbe) -> (u32, u32) {
        Self::tag_masks(bucket, p)
    }

    fn slot_hash(&self, seed: u64, slot: &[AtomicU64]) -> u64 {
        let mut w = Self::load_words(slot);
        for (j, x) in w[..Self::HASH_WORDS].iter_mut().enumerate() {
            *x &= Self::mask(j, false);
        }
        fp_hash::hash_padded(seed, K::LEN, &w[..Self::HASH_WORDS])
    }

    fn slot_key(&self, slot: &[AtomicU64]) -> K {
        let b = Self::to_bytes(&Self::load_words(slot));
        K::get(&b[..K::LEN])
    }

    #[inline]
    fn slot_raw(&self, slot: &[AtomicU64]) -> [u64; MAX_WORDS] {
        Self::load_words(slot)
    }

    fn encode(
        &self,
        p: &GeneralProbe,
        _key: &K,
        value: &V,
        out: &mut [u64; MAX_WORDS],
    ) -> Result<(), crate::InsertError> {
        *out = [0; MAX_WORDS];
        // The probe's words are the key's, tag included.
        out[..Self::KEY_WORDS].copy_from_slice(&p.words[..Self::KEY_WORDS]);
        if Self::ALIGNED {
            value.put_words(&mut out[Self::KEY_WORDS..]);
        } else {
            let mut b = Self::to_bytes(out);
            value.put(&mut b[1 + K::LEN..1 + K::LEN + V::LEN]);
            <[u8; MAX_WORDS * 8]>::put_words(&b, out);
        }
        Ok(())
    }

    fn payload_bytes(&self) -> usize {
        K::LEN + V::LEN
    }
}
