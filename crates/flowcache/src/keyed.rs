//! A flow cache that answers only for its exact key: [`KeyedCache`], a 2-4 BLP cache with PBLRU
//! (§4.4, §5) whose 16-bit values index an array of recent entries holding the full key and the
//! answer — the "index into a per-worker array of recent entries" of the crate doc, packaged.
//!
//! A lookup finds the key's candidates by fingerprint and checks each candidate entry's full key,
//! so a fingerprint collision is a miss, never a wrong answer. The entries array is a ring: a new
//! key takes the next slot, and the cache entry of the key that held it is removed first, so the
//! cache never points at a reused slot (and the check would reject it anyway). The cache holds at
//! most 65 536 entries (16-bit values).
//!
//! Whoever owns the big table owns the cache and keeps them in step: every write of a key's
//! answer goes through [`KeyedCache::put`] (or [`KeyedCache::remove`]) as well, every removal from
//! the big table through [`KeyedCache::remove`]; a change it cannot name key by key (another
//! thread's writes, a configuration change) calls [`KeyedCache::clear`]. The cache itself never
//! invents an answer: what it returns is the last value `put` for that exact key since its last
//! `remove` or `clear`, or nothing.
//!
//! ```
//! use fp_flowcache::KeyedCache;
//!
//! let mut c: KeyedCache<u64, u16> = KeyedCache::new(1024, 7).unwrap();
//! let (key, hash) = (0x0200_0000_0001u64, fp_hash::hash_u64(3, 0x0200_0000_0001));
//! assert_eq!(c.get(hash, &key), None);
//! c.put(hash, key, 5);
//! assert_eq!(c.get(hash, &key), Some(5));
//! c.remove(hash, &key);
//! assert_eq!(c.get(hash, &key), None);
//! ```

use crate::{Blp, Config, Error, FlowCache, Pblru, Stats};

/// The largest number of entries a [`KeyedCache`] can hold (its values are 16-bit indices).
pub const MAX_ENTRIES: usize = 1 << 16;

/// A ring slot: the key's hash (to remove its cache entry when the slot is reused), the key, the
/// answer.
type Slot<K, V> = Option<(u64, K, V)>;

/// An exact-match cache in front of a bigger table: BLP + PBLRU on fingerprints, full keys in a
/// ring of recent entries (see the module doc).
pub struct KeyedCache<K, V> {
    cache: FlowCache<Blp, Pblru>,
    slots: Box<[Slot<K, V>]>,
    hand: usize,
}

impl<K: Copy + Eq, V: Copy> KeyedCache<K, V> {
    /// A cache of `entries` entries (1 to [`MAX_ENTRIES`]; the fingerprint table is rounded up to
    /// whole buckets), its eviction policy seeded with `seed`.
    pub fn new(entries: usize, seed: u64) -> Result<Self, Error> {
        if entries == 0 {
            return Err(Error::Empty);
        }
        let entries = entries.min(MAX_ENTRIES);
        let cache =
            FlowCache::with_policy(&Config::with_entries(entries).seed(seed), Pblru::default())?;
        let slots = vec![None; entries].into_boxed_slice();
        Ok(KeyedCache {
            cache,
            slots,
            hand: 0,
        })
    }

    /// The answer cached for `key` (whose hash is `hash`), if any.
    #[inline]
    pub fn get(&mut self, hash: u64, key: &K) -> Option<V> {
        let slots = &self.slots;
        let i = self.cache.lookup(
            hash,
            |v| matches!(&slots[v as usize], Some((_, k, _)) if k == key),
        )?;
        self.slots[i as usize].map(|(_, _, v)| v)
    }

    /// The answers for `keys[i]` (hash `hashes[i]`) into `out[i]`, for every `i`: the candidate
    /// buckets of the whole batch are computed and prefetched first (§6).
    ///
    /// # Panics
    /// If `keys` or `out` is shorter than `hashes`.
    #[inline]
    pub fn get_batch(&mut self, hashes: &[u64], keys: &[K], out: &mut [Option<V>]) {
        let n = hashes.len();
        assert!(
            keys.len() >= n && out.len() >= n,
            "get_batch: short keys or out"
        );
        let mut idx = [None; crate::BATCH];
        let slots = &self.slots;
        for (c, base) in hashes.chunks(crate::BATCH).zip((0..).step_by(crate::BATCH)) {
            let k = c.len();
            self.cache.lookup_batch(
                c,
                |i, v| matches!(&slots[v as usize], Some((_, key, _)) if *key == keys[base + i]),
                &mut idx[..k],
            );
            for (o, i) in out[base..base + k].iter_mut().zip(&idx[..k]) {
                *o = i.and_then(|i| slots[i as usize].map(|(_, _, v)| v));
            }
        }
    }

    /// Cache `value` as the answer for `key`: replaces the key's entry, or takes the next slot of
    /// the ring (dropping the key that held it).
    #[inline]
    pub fn put(&mut self, hash: u64, key: K, value: V) {
        let slots = &self.slots;
        let found = self.cache.peek(
            hash,
            |v| matches!(&slots[v as usize], Some((_, k, _)) if *k == key),
        );
        if let Some(i) = found {
            self.slots[i as usize] = Some((hash, key, value));
            return;
        }
        self.put_absent(hash, key, value);
    }

    /// [`put`](Self::put) for a key a lookup just missed: skips the search for its entry. Should
    /// the key be cached after all (put twice from one batch of misses), the new entry takes the
    /// old one's place in the fingerprint table (an insert leaves one entry per fingerprint among
    /// a key's candidates) and the old ring slot is never reached again: still correct.
    #[inline]
    pub fn put_absent(&mut self, hash: u64, key: K, value: V) {
        let i = self.hand;
        self.hand = if i + 1 == self.slots.len() { 0 } else { i + 1 };
        if let Some((old, _, _)) = self.slots[i] {
            self.cache.remove(old, |v| v as usize == i);
        }
        self.slots[i] = Some((hash, key, value));
        self.cache.insert(hash, i as u16);
    }

    /// Forget `key`; returns the answer that was cached.
    #[inline]
    pub fn remove(&mut self, hash: u64, key: &K) -> Option<V> {
        let slots = &self.slots;
        let i = self.cache.remove(
            hash,
            |v| matches!(&slots[v as usize], Some((_, k, _)) if k == key),
        )?;
        self.slots[i as usize].take().map(|(_, _, v)| v)
    }

    /// Forget everything.
    pub fn clear(&mut self) {
        self.cache.clear();
        self.slots.fill(None);
        self.hand = 0;
    }

    /// Entries (the ring's size).
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Bytes of memory: the fingerprint table and the ring.
    pub fn bytes(&self) -> usize {
        self.cache.table_bytes() + std::mem::size_of_val(&*self.slots)
    }

    /// Hits, misses, inserts and evictions of the fingerprint table.
    pub fn stats(&self) -> Stats {
        self.cache.stats()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn h(k: u64) -> u64 {
        fp_hash::hash_u64(0xfeed, k)
    }

    /// Against a model (a map of the last value put per key, minus removals): every answer the
    /// cache gives is the model's; it may forget (a miss), never invent.
    #[test]
    fn answers_only_what_was_put_for_that_exact_key() {
        let mut c: KeyedCache<u64, u32> = KeyedCache::new(512, 1).unwrap();
        let mut model: HashMap<u64, u32> = HashMap::new();
        let mut x = 0x1234_5678u64;
        let (mut hits, mut gets) = (0, 0);
        for step in 0..200_000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let key = x % 2000;
            match x >> 60 {
                0..=7 => {
                    gets += 1;
                    if let Some(v) = c.get(h(key), &key) {
                        hits += 1;
                        assert_eq!(Some(&v), model.get(&key), "step {step}: key {key}");
                    }
                }
                8..=13 => {
                    c.put(h(key), key, step);
                    model.insert(key, step);
                }
                _ => {
                    let got = c.remove(h(key), &key);
                    let want = model.remove(&key);
                    if let Some(v) = got {
                        assert_eq!(Some(v), want, "step {step}: removed key {key}");
                    }
                }
            }
        }
        assert!(hits > gets / 10, "{hits} hits of {gets}");
    }

    #[test]
    fn colliding_hashes_never_answer_for_each_other() {
        // Every key has the same hash: same fingerprint, same buckets.
        let mut c: KeyedCache<u64, u32> = KeyedCache::new(64, 1).unwrap();
        c.put(42, 1, 10);
        assert_eq!(c.get(42, &2), None);
        c.put(42, 2, 20);
        assert_eq!(c.get(42, &2), Some(20));
        assert_ne!(c.get(42, &1), Some(20));
        c.remove(42, &2);
        assert_eq!(c.get(42, &2), None);
    }

    #[test]
    fn a_recycled_slot_drops_its_old_key() {
        let mut c: KeyedCache<u64, u32> = KeyedCache::new(4, 1).unwrap();
        let n = c.capacity() as u64;
        for k in 0..n {
            c.put(h(k), k, k as u32);
        }
        c.put(h(1000), 1000, 7); // takes key 0's slot
        assert_eq!(c.get(h(0), &0), None);
        assert_eq!(c.get(h(1000), &1000), Some(7));
        c.clear();
        assert_eq!(c.get(h(1000), &1000), None);
        assert!(KeyedCache::<u64, u32>::new(0, 1).is_err());
        assert_eq!(
            KeyedCache::<u64, u32>::new(1 << 20, 1).unwrap().capacity(),
            MAX_ENTRIES
        );
    }
}
