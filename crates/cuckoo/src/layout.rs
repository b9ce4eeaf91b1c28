//! How an entry is laid out in a slot: the two layouts share one algorithm (`table.rs`).
//!
//! * [`Compact`]: CuckooSwitch's layout. Key (up to 48 bits, e.g. a MAC address) and value (16 bits,
//!   e.g. a port) pack into one 64-bit word: `key << 16 | (value + 1)`. A word whose low 16 bits are
//!   zero is empty, so freshly mapped (zeroed) memory is an empty table and the value `u16::MAX` is
//!   reserved. A bucket is 4 words = 32 bytes, half a cache line.
//! * [`General`]: any fixed-size key and value (a 13-byte IPv4 5-tuple or a 37-byte IPv6 5-tuple with
//!   an 8-byte value). An entry is `W = ceil((1 + K + V) / 8)` words holding
//!   `[tag: 1 byte][key: K bytes][value: V bytes]`; the tag is 7 bits of the key's hash with the top
//!   bit set, so it is never zero and zero means empty. A lookup compares the tag and key bytes of a
//!   slot against a pre-encoded probe, word by word, and only then reads the value.
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

/// CuckooSwitch's one-word layout: 48-bit keys, 16-bit values (`u16::MAX` reserved).
#[derive(Clone, Copy, Debug, Default)]
pub struct Compact;

/// Largest key the compact layout stores (48 bits).
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
        if *key > COMPACT_MAX_KEY {
            return None;
        }
        Some(CompactProbe {
            hash: fp_hash::hash_u64(seed, *key),
            key_hi: key << 16,
        })
    }

    #[inline(always)]
    fn probe_hash(p: &CompactProbe) -> u64 {
        p.hash
    }

    #[inline(always)]
    fn matches(&self, slot: &[AtomicU64], p: &CompactProbe) -> Option<u64> {
        let w = slot[0].load(Relaxed);
        // Same key bits and a non-zero (occupied) low half: d in 1..=0xFFFF.
        let d = w ^ p.key_hi;
        (d.wrapping_sub(1) < 0xFFFF).then_some(d)
    }

    #[inline(always)]
    fn scan(&self, bucket: &[AtomicU64], p: &CompactProbe) -> (bool, u64) {
        // All four slots, no early exit. A slot holds the key iff `w ^ key_hi` is in 1..=0xFFFF
        // (same key bits, occupied), i.e. iff `(w ^ key_hi) - 1 < 0xFFFF`; the unsigned minimum of
        // that over the bucket is below 0xFFFF iff some slot matches, and then it is that slot's
        // value (at most one slot holds the key in a consistent read; an inconsistent one is
        // discarded by validation). Compiles to loads, xors and conditional moves.
        let b = &bucket[..crate::table::SLOTS];
        let m = |w: &AtomicU64| (w.load(Relaxed) ^ p.key_hi).wrapping_sub(1);
        let best = m(&b[0]).min(m(&b[1])).min(m(&b[2]).min(m(&b[3])));
        (best < 0xFFFF, best.wrapping_add(1))
    }

    #[inline(always)]
    fn decode(&self, raw: u64) -> u16 {
        (raw as u16).wrapping_sub(1)
    }

    #[inline(always)]
    fn is_empty(&self, slot: &[AtomicU64]) -> bool {
        slot[0].load(Relaxed) & 0xFFFF == 0
    }

    #[inline(always)]
    fn slot_hash(&self, seed: u64, slot: &[AtomicU64]) -> u64 {
        fp_hash::hash_u64(seed, slot[0].load(Relaxed) >> 16)
    }

    fn slot_key(&self, slot: &[AtomicU64]) -> u64 {
        slot[0].load(Relaxed) >> 16
    }

    #[inline(always)]
    fn slot_raw(&self, slot: &[AtomicU64]) -> u64 {
        slot[0].load(Relaxed) & 0xFFFF
    }

    #[inline(always)]
    fn encode(
        &self,
        p: &CompactProbe,
        _key: &u64,
        value: &u16,
        out: &mut [u64; MAX_WORDS],
    ) -> Result<(), crate::InsertError> {
        if *value == u16::MAX {
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
/// `put` wrote (reads are validated before decoding).
pub trait FixedBytes: Copy + Send + Sync + 'static {
    /// Encoded length in bytes.
    const LEN: usize;
    /// Write the encoding into `out[..LEN]`.
    fn put(&self, out: &mut [u8]);
    /// Read a value back from `b[..LEN]`.
    fn get(b: &[u8]) -> Self;
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
        }
    )* };
}
fixed_int!(u8, u16, u32, u64, u128, i32, i64);

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
pub struct General<K, V> {
    words: usize,
    key_words: usize,
    key_mask: [u64; MAX_WORDS],
    _kv: PhantomData<fn() -> (K, V)>,
}

impl<K, V> Clone for General<K, V> {
    fn clone(&self) -> Self {
        General { ..*self }
    }
}

impl<K: FixedBytes, V: FixedBytes> General<K, V> {
    /// Entry size in bytes (tag + key + value), before rounding to words.
    pub const ENTRY_BYTES: usize = 1 + K::LEN + V::LEN;

    pub(crate) fn new_layout() -> Self {
        assert!(
            Self::ENTRY_BYTES <= MAX_WORDS * 8,
            "general layout: 1 + key ({}) + value ({}) bytes exceeds {} bytes",
            K::LEN,
            V::LEN,
            MAX_WORDS * 8
        );
        let tag_key = 1 + K::LEN;
        let mut key_mask = [0u64; MAX_WORDS];
        for byte in 0..tag_key {
            key_mask[byte / 8] |= 0xFF << ((byte % 8) * 8);
        }
        General {
            words: Self::ENTRY_BYTES.div_ceil(8),
            key_words: tag_key.div_ceil(8),
            key_mask,
            _kv: PhantomData,
        }
    }

    fn tag(hash: u64) -> u8 {
        (hash >> 57) as u8 | 0x80
    }

    fn load_bytes(&self, slot: &[AtomicU64]) -> [u8; MAX_WORDS * 8] {
        let mut b = [0u8; MAX_WORDS * 8];
        for (i, w) in slot[..self.words].iter().enumerate() {
            b[i * 8..i * 8 + 8].copy_from_slice(&w.load(Relaxed).to_le_bytes());
        }
        b
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
        self.words
    }

    #[inline(always)]
    fn probe(&self, seed: u64, key: &K) -> Option<GeneralProbe> {
        let mut b = [0u8; MAX_WORDS * 8];
        key.put(&mut b[1..1 + K::LEN]);
        let hash = fp_hash::hash_bytes(seed, &b[1..1 + K::LEN]);
        b[0] = Self::tag(hash);
        let mut words = [0u64; MAX_WORDS];
        for (i, w) in words[..self.key_words].iter_mut().enumerate() {
            *w = u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        }
        Some(GeneralProbe { hash, words })
    }

    #[inline(always)]
    fn probe_hash(p: &GeneralProbe) -> u64 {
        p.hash
    }

    #[inline(always)]
    fn matches(&self, slot: &[AtomicU64], p: &GeneralProbe) -> Option<[u64; MAX_WORDS]> {
        // First word holds the tag: most non-matching slots are rejected here.
        let w0 = slot[0].load(Relaxed);
        if (w0 ^ p.words[0]) & self.key_mask[0] != 0 {
            return None;
        }
        let mut raw = [0u64; MAX_WORDS];
        raw[0] = w0;
        for (r, w) in raw.iter_mut().zip(slot).take(self.words).skip(1) {
            *r = w.load(Relaxed);
        }
        let key_ok = raw[1..self.key_words]
            .iter()
            .zip(&p.words[1..self.key_words])
            .zip(&self.key_mask[1..self.key_words])
            .all(|((r, w), m)| (r ^ w) & m == 0);
        if !key_ok {
            return None;
        }
        Some(raw)
    }

    #[inline(always)]
    fn decode(&self, raw: [u64; MAX_WORDS]) -> V {
        let mut b = [0u8; MAX_WORDS * 8];
        for (i, w) in raw[..self.words].iter().enumerate() {
            b[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
        }
        V::get(&b[1 + K::LEN..1 + K::LEN + V::LEN])
    }

    #[inline(always)]
    fn is_empty(&self, slot: &[AtomicU64]) -> bool {
        slot[0].load(Relaxed) & 0xFF == 0
    }

    fn slot_hash(&self, seed: u64, slot: &[AtomicU64]) -> u64 {
        let b = self.load_bytes(slot);
        fp_hash::hash_bytes(seed, &b[1..1 + K::LEN])
    }

    fn slot_key(&self, slot: &[AtomicU64]) -> K {
        let b = self.load_bytes(slot);
        K::get(&b[1..1 + K::LEN])
    }

    #[inline]
    fn slot_raw(&self, slot: &[AtomicU64]) -> [u64; MAX_WORDS] {
        let mut raw = [0u64; MAX_WORDS];
        for (r, w) in raw.iter_mut().zip(&slot[..self.words]) {
            *r = w.load(Relaxed);
        }
        raw
    }

    fn encode(
        &self,
        p: &GeneralProbe,
        key: &K,
        value: &V,
        out: &mut [u64; MAX_WORDS],
    ) -> Result<(), crate::InsertError> {
        let mut b = [0u8; MAX_WORDS * 8];
        b[0] = Self::tag(p.hash);
        key.put(&mut b[1..1 + K::LEN]);
        value.put(&mut b[1 + K::LEN..1 + K::LEN + V::LEN]);
        for (i, w) in out[..self.words].iter_mut().enumerate() {
            *w = u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        }
        Ok(())
    }

    fn payload_bytes(&self) -> usize {
        K::LEN + V::LEN
    }
}
