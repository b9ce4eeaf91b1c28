//! The algorithm, shared by both layouts: 2 candidate buckets per key, 4 slots per bucket, striped
//! version counters, one writer, many optimistic readers (CuckooSwitch §2.2, §3.2-3.4).
//!
//! # The version protocol (§3.2), with Rust atomics
//!
//! Each bucket maps to one of `STRIPES` version counters (`bucket & (STRIPES - 1)`). The writer, before
//! changing any slot of a bucket, makes its counter odd, and after the change makes it even again:
//!
//! ```text
//! writer: v = ver.load(Relaxed); ver.store(v + 1, Relaxed); fence(Release);
//!         slot stores (Relaxed) ...;
//!         ver.store(v + 2, Release);
//! reader: v1 = ver.load(Acquire); if odd: retry;
//!         slot loads (Relaxed) ...;
//!         fence(Acquire); v2 = ver.load(Relaxed); if v1 != v2: retry
//! ```
//!
//! If the reader's slot loads observed any store made after the writer's release fence, its acquire
//! fence makes the odd counter store visible to the second counter load, so `v1 != v2` and the reader
//! retries; if the first counter load saw the even value published by a `Release` store, every slot
//! store before it is visible. On x86 all of this compiles to plain loads and stores with compiler
//! barriers, exactly the paper's Algorithm 2; on weakly ordered CPUs (ARM) the same code emits the
//! barriers the paper's x86-only version lacks. `tests/loom_version.rs` model-checks it.
//!
//! A reader of key K snapshots both of K's buckets' counters before reading either bucket and checks
//! both after, so an entry moved between K's two buckets while the reader looked is never missed.
//!
//! # Inserts (§2.2)
//!
//! A key goes into a free slot of one of its two buckets. If both are full, a breadth-first search
//! from both buckets finds the shortest *cuckoo path* to a bucket with a free slot (bounded depth,
//! bounded nodes), and the entries along it are moved from the end of the path backwards: each move
//! first copies an entry into the free slot, then clears its old slot, both inside one odd-version
//! window over the two buckets involved. Between moves the table is always complete (no key is ever
//! absent to a concurrent reader), and the search happens before any move, so an insert that finds
//! no path changes nothing and reports [`InsertError::Full`].

use crate::layout::{Layout, MAX_WORDS};
use crate::sync::{self, fence, AtomicU32, AtomicU64, AtomicUsize, Counters, Ordering, Words};
use crate::{Config, InsertError, Stats};

/// Slots per bucket (the "4" of 2,4 cuckoo hashing).
pub const SLOTS: usize = 4;
/// Keys looked up together in one two-round prefetching pass; longer batches are processed in chunks.
pub const CHUNK: usize = 32;

/// Lookup strategy for [`RawTable::get_batch`]; the factor analysis of the benchmark compares them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Prefetch {
    /// Two-round prefetching (Algorithm 3): first buckets of the whole batch, then second buckets of
    /// the keys that missed.
    #[default]
    TwoRound,
    /// Batched reads with no prefetch instructions.
    Off,
}

pub(crate) struct RawTable<L: Layout> {
    pub(crate) layout: L,
    words: Words,
    versions: Counters,
    stripe_mask: usize,
    n_buckets: u64,
    stride: usize,
    seed: u64,
    len: AtomicUsize,
    max_depth: usize,
    max_nodes: usize,
}

#[derive(Clone, Copy)]
struct Node {
    bucket: u64,
    parent: u32,
    slot_in_parent: u8,
    depth: u8,
}

/// The writer's scratch space for the cuckoo path search, allocated once.
pub(crate) struct Search {
    queue: Vec<Node>,
    path: Vec<(u64, usize)>,
    /// Entries moved along cuckoo paths so far (writer-local statistic).
    pub(crate) moves: u64,
    /// Longest cuckoo path executed so far.
    pub(crate) longest: usize,
}

impl Search {
    pub(crate) fn new(max_nodes: usize, max_depth: usize) -> Self {
        Search {
            queue: Vec::with_capacity(max_nodes),
            path: Vec::with_capacity(max_depth + 2),
            moves: 0,
            longest: 0,
        }
    }
}

impl<L: Layout> RawTable<L> {
    pub(crate) fn new(layout: L, cfg: &Config) -> Result<Self, crate::Error> {
        let stride = layout.stride();
        let slots_wanted = (cfg.capacity as f64 / cfg.load_factor).ceil() as u64;
        let n_buckets = slots_wanted.div_ceil(SLOTS as u64).max(2);
        let n_words =
            (n_buckets as usize)
                .checked_mul(SLOTS * stride)
                .ok_or(crate::Error::TooLarge {
                    capacity: cfg.capacity,
                })?;
        let words = sync::alloc_words(n_words, cfg.pages)?;
        // More counters than buckets would only cost memory.
        let stripes = cfg
            .stripes
            .next_power_of_two()
            .min(prev_power_of_two(n_buckets as usize));
        let versions = sync::alloc_counters(stripes);
        Ok(RawTable {
            layout,
            words,
            versions,
            stripe_mask: stripes - 1,
            n_buckets,
            stride,
            seed: cfg.seed,
            len: AtomicUsize::new(0),
            max_depth: cfg.max_search_depth,
            max_nodes: cfg.max_search_nodes,
        })
    }

    #[inline(always)]
    fn buckets(&self, hash: u64) -> (u64, u64) {
        let b1 = fp_hash::reduce(hash, self.n_buckets);
        let mut b2 = fp_hash::reduce(hash.rotate_left(32), self.n_buckets);
        if b2 == b1 {
            b2 = if b1 + 1 == self.n_buckets { 0 } else { b1 + 1 };
        }
        (b1, b2)
    }

    #[inline(always)]
    fn slot(&self, bucket: u64, s: usize) -> &[AtomicU64] {
        let start = (bucket as usize * SLOTS + s) * self.stride;
        &self.words[start..start + self.stride]
    }

    #[inline(always)]
    fn version(&self, bucket: u64) -> &AtomicU32 {
        &self.versions[bucket as usize & self.stripe_mask]
    }

    #[inline(always)]
    fn prefetch_bucket(&self, bucket: u64) {
        let bytes = SLOTS * self.stride * 8;
        let start = bucket as usize * SLOTS * self.stride;
        let p = self.words.as_ptr().wrapping_add(start) as *const u8;
        fp_hash::prefetch_read(p);
        // A general-layout bucket may span two or three cache lines.
        let mut off = 64 - (p as usize & 63);
        while off < bytes {
            fp_hash::prefetch_read(p.wrapping_add(off));
            off += 64;
        }
    }

    #[inline(always)]
    fn find_in(&self, bucket: u64, p: &L::Probe) -> Option<L::Raw> {
        for s in 0..SLOTS {
            if let Some(raw) = self.layout.matches(self.slot(bucket, s), p) {
                return Some(raw);
            }
        }
        None
    }

    pub(crate) fn probe(&self, key: &L::Key) -> Option<L::Probe> {
        self.layout.probe(self.seed, key)
    }

    /// Optimistic single-key lookup (Algorithm 2's OptimizedLookup).
    #[inline]
    pub(crate) fn get_probe(&self, p: &L::Probe) -> Option<L::Value> {
        let (b1, b2) = self.buckets(L::probe_hash(p));
        let (c1, c2) = (self.version(b1), self.version(b2));
        loop {
            let v1 = c1.load(Ordering::Acquire);
            let v2 = c2.load(Ordering::Acquire);
            if (v1 | v2) & 1 != 0 {
                sync::spin();
                continue;
            }
            let r = self.find_in(b1, p).or_else(|| self.find_in(b2, p));
            fence(Ordering::Acquire);
            if c1.load(Ordering::Relaxed) == v1 && c2.load(Ordering::Relaxed) == v2 {
                return r.map(|raw| self.layout.decode(raw));
            }
        }
    }

    pub(crate) fn get(&self, key: &L::Key) -> Option<L::Value> {
        let p = self.probe(key)?;
        self.get_probe(&p)
    }

    /// Batched lookup with two-round prefetching (Algorithm 3), any number of keys (dynamic
    /// batching, §4.3). `out[i]` receives the value of `keys[i]`.
    pub(crate) fn get_batch(&self, keys: &[L::Key], out: &mut [Option<L::Value>], mode: Prefetch) {
        assert_eq!(
            keys.len(),
            out.len(),
            "get_batch: keys and out differ in length"
        );
        for (k, o) in keys.chunks(CHUNK).zip(out.chunks_mut(CHUNK)) {
            self.get_chunk(k, o, mode);
        }
    }

    #[inline]
    fn get_chunk(&self, keys: &[L::Key], out: &mut [Option<L::Value>], mode: Prefetch) {
        let n = keys.len();
        debug_assert!(n <= CHUNK);
        let mut probes: [Option<L::Probe>; CHUNK] = [None; CHUNK];
        let mut bk = [(0u64, 0u64); CHUNK];
        // Round 0: hash everything, prefetch every first bucket.
        for i in 0..n {
            probes[i] = self.probe(&keys[i]);
            if let Some(p) = &probes[i] {
                bk[i] = self.buckets(L::probe_hash(p));
                if mode == Prefetch::TwoRound {
                    self.prefetch_bucket(bk[i].0);
                }
            }
        }
        // Snapshot versions; round 1: read first buckets, prefetch second buckets of the misses.
        let mut vers = [(0u32, 0u32); CHUNK];
        let mut raw: [Option<L::Raw>; CHUNK] = [None; CHUNK];
        let mut retry = 0u64; // keys to redo one by one (odd version seen)
        let mut second = 0u64; // keys that must read their second bucket
        for i in 0..n {
            if probes[i].is_none() {
                continue;
            }
            let (b1, b2) = bk[i];
            let v1 = self.version(b1).load(Ordering::Acquire);
            let v2 = self.version(b2).load(Ordering::Acquire);
            vers[i] = (v1, v2);
            if (v1 | v2) & 1 != 0 {
                retry |= 1 << i;
                continue;
            }
            let p = probes[i].as_ref().expect("checked");
            raw[i] = self.find_in(b1, p);
            if raw[i].is_none() {
                second |= 1 << i;
                if mode == Prefetch::TwoRound {
                    self.prefetch_bucket(b2);
                }
            }
        }
        // Round 2: second buckets.
        let mut m = second;
        while m != 0 {
            let i = m.trailing_zeros() as usize;
            m &= m - 1;
            let p = probes[i].as_ref().expect("checked");
            raw[i] = self.find_in(bk[i].1, p);
        }
        // Validate: any key whose bucket versions moved is looked up again alone.
        fence(Ordering::Acquire);
        for i in 0..n {
            let Some(p) = probes[i].as_ref() else {
                out[i] = None;
                continue;
            };
            let (b1, b2) = bk[i];
            let ok = retry & (1 << i) == 0
                && self.version(b1).load(Ordering::Relaxed) == vers[i].0
                && self.version(b2).load(Ordering::Relaxed) == vers[i].1;
            out[i] = if ok {
                raw[i].map(|r| self.layout.decode(r))
            } else {
                self.get_probe(p)
            };
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    pub(crate) fn stats(&self) -> Stats {
        let table_bytes = self.words.len() * 8;
        let version_bytes = self.versions.len() * 4;
        Stats {
            len: self.len(),
            slots: self.n_buckets as usize * SLOTS,
            buckets: self.n_buckets as usize,
            table_bytes,
            version_bytes,
            stripes: self.versions.len(),
            slot_bytes: self.stride * 8,
            payload_bytes: self.layout.payload_bytes(),
            pages: sync::page_kind(&self.words),
        }
    }

    // ---------------------------------------------------------------------------------------------
    // Writer side. Only `Writer` calls these (it is the single writer: `&mut self` on every method).

    /// Make the counters of `a` and `b` odd (once if they share a stripe). Returns the old values.
    #[inline]
    fn lock(&self, a: u64, b: u64) -> (u32, Option<u32>) {
        let (ca, cb) = (self.version(a), self.version(b));
        let va = ca.load(Ordering::Relaxed);
        ca.store(va.wrapping_add(1), Ordering::Relaxed);
        let vb = if std::ptr::eq(ca, cb) {
            None
        } else {
            let vb = cb.load(Ordering::Relaxed);
            cb.store(vb.wrapping_add(1), Ordering::Relaxed);
            Some(vb)
        };
        fence(Ordering::Release);
        (va, vb)
    }

    #[inline]
    fn unlock(&self, a: u64, b: u64, old: (u32, Option<u32>)) {
        self.version(a)
            .store(old.0.wrapping_add(2), Ordering::Release);
        if let Some(vb) = old.1 {
            self.version(b).store(vb.wrapping_add(2), Ordering::Release);
        }
    }

    fn store_slot(&self, bucket: u64, s: usize, words: &[u64]) {
        for (w, &x) in self.slot(bucket, s).iter().zip(words) {
            w.store(x, Ordering::Relaxed);
        }
    }

    fn writer_find(&self, p: &L::Probe) -> Option<(u64, usize, L::Raw)> {
        let (b1, b2) = self.buckets(L::probe_hash(p));
        for b in [b1, b2] {
            for s in 0..SLOTS {
                if let Some(raw) = self.layout.matches(self.slot(b, s), p) {
                    return Some((b, s, raw));
                }
            }
        }
        None
    }

    fn free_slot(&self, b: u64) -> Option<usize> {
        (0..SLOTS).find(|&s| self.layout.is_empty(self.slot(b, s)))
    }

    /// Insert or overwrite. Returns the previous value if the key was present.
    pub(crate) fn insert(
        &self,
        search: &mut Search,
        key: &L::Key,
        value: &L::Value,
    ) -> Result<Option<L::Value>, InsertError> {
        let p = self.probe(key).ok_or(InsertError::KeyOutOfRange)?;
        let mut enc = [0u64; MAX_WORDS];
        self.layout.encode(&p, key, value, &mut enc)?;
        let enc = &enc[..self.stride];
        // In-place update of an existing key.
        if let Some((b, s, raw)) = self.writer_find(&p) {
            let old = self.lock(b, b);
            self.store_slot(b, s, enc);
            self.unlock(b, b, old);
            return Ok(Some(self.layout.decode(raw)));
        }
        let (b1, b2) = self.buckets(L::probe_hash(&p));
        let (b, s) = match (self.free_slot(b1), self.free_slot(b2)) {
            (Some(s), _) => (b1, s),
            (None, Some(s)) => (b2, s),
            (None, None) => self.make_room(search, b1, b2)?,
        };
        let old = self.lock(b, b);
        self.store_slot(b, s, enc);
        self.unlock(b, b, old);
        self.len
            .store(self.len.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        Ok(None)
    }

    /// Overwrite the value of a present key. Returns the previous value, or `None` if absent.
    pub(crate) fn update(
        &self,
        key: &L::Key,
        value: &L::Value,
    ) -> Result<Option<L::Value>, InsertError> {
        let Some(p) = self.probe(key) else {
            return Ok(None);
        };
        let mut enc = [0u64; MAX_WORDS];
        self.layout.encode(&p, key, value, &mut enc)?;
        let Some((b, s, raw)) = self.writer_find(&p) else {
            return Ok(None);
        };
        let old = self.lock(b, b);
        self.store_slot(b, s, &enc[..self.stride]);
        self.unlock(b, b, old);
        Ok(Some(self.layout.decode(raw)))
    }

    /// Remove a key. Returns its value if it was present.
    pub(crate) fn remove(&self, key: &L::Key) -> Option<L::Value> {
        let p = self.probe(key)?;
        let (b, s, raw) = self.writer_find(&p)?;
        let old = self.lock(b, b);
        self.store_slot(b, s, &[0u64; MAX_WORDS][..self.stride]);
        self.unlock(b, b, old);
        self.len
            .store(self.len.load(Ordering::Relaxed) - 1, Ordering::Relaxed);
        Some(self.layout.decode(raw))
    }

    /// Find a cuckoo path from `b1`/`b2` to a free slot and shift entries along it, from the end
    /// backwards. Returns the slot it freed in `b1` or `b2`.
    #[cold]
    #[inline(never)]
    fn make_room(
        &self,
        search: &mut Search,
        b1: u64,
        b2: u64,
    ) -> Result<(u64, usize), InsertError> {
        let (found, free_slot) = self.bfs(search, b1, b2).ok_or(InsertError::Full)?;
        // Path as (bucket, slot) pairs from the root slot to the free slot.
        let q = &search.queue;
        search.path.clear();
        search.path.push((q[found].bucket, free_slot));
        let mut n = found;
        while q[n].parent != u32::MAX {
            let parent = q[n].parent as usize;
            search
                .path
                .push((q[parent].bucket, q[n].slot_in_parent as usize));
            n = parent;
        }
        // path[0] is the free slot at the end, path[last] the root slot to free. Move backwards.
        let mut buf = [0u64; MAX_WORDS];
        for i in 0..search.path.len() - 1 {
            let (to_b, to_s) = search.path[i];
            let (from_b, from_s) = search.path[i + 1];
            for (d, w) in buf.iter_mut().zip(self.slot(from_b, from_s)) {
                *d = w.load(Ordering::Relaxed);
            }
            let old = self.lock(from_b, to_b);
            self.store_slot(to_b, to_s, &buf[..self.stride]);
            self.store_slot(from_b, from_s, &[0u64; MAX_WORDS][..self.stride]);
            self.unlock(from_b, to_b, old);
        }
        let moved = search.path.len() - 1;
        search.moves += moved as u64;
        search.longest = search.longest.max(moved);
        Ok(*search.path.last().expect("path has a root"))
    }

    /// Breadth-first search over buckets. Returns the queue index of the first bucket with a free
    /// slot and that slot. Shortest paths never visit a bucket twice, so the path is valid.
    fn bfs(&self, search: &mut Search, b1: u64, b2: u64) -> Option<(usize, usize)> {
        let q = &mut search.queue;
        q.clear();
        q.push(Node {
            bucket: b1,
            parent: u32::MAX,
            slot_in_parent: 0,
            depth: 0,
        });
        q.push(Node {
            bucket: b2,
            parent: u32::MAX,
            slot_in_parent: 0,
            depth: 0,
        });
        let mut head = 0;
        while head < q.len() {
            let node = q[head];
            if head >= 2 {
                if let Some(s) = self.free_slot(node.bucket) {
                    return Some((head, s));
                }
            }
            if (node.depth as usize) < self.max_depth {
                for s in 0..SLOTS {
                    if q.len() >= self.max_nodes {
                        break;
                    }
                    let h = self.layout.slot_hash(self.seed, self.slot(node.bucket, s));
                    let (x1, x2) = self.buckets(h);
                    let alt = if x1 == node.bucket { x2 } else { x1 };
                    self.prefetch_bucket(alt);
                    q.push(Node {
                        bucket: alt,
                        parent: head as u32,
                        slot_in_parent: s as u8,
                        depth: node.depth + 1,
                    });
                }
            }
            head += 1;
        }
        None
    }

    /// Visit the entries of buckets `start..start + count` (wrapping), removing those for which `f`
    /// returns false. Returns the next bucket to continue from. Writer side: used for expiry and aging.
    pub(crate) fn retain_range(
        &self,
        start: usize,
        count: usize,
        mut f: impl FnMut(&L::Key, &L::Value) -> bool,
    ) -> usize {
        let n = self.n_buckets as usize;
        let mut b = start % n.max(1);
        for _ in 0..count.min(n) {
            for s in 0..SLOTS {
                let slot = self.slot(b as u64, s);
                if self.layout.is_empty(slot) {
                    continue;
                }
                let key = self.layout.slot_key(slot);
                let p = self.probe(&key).expect("stored keys are valid");
                let raw = self
                    .layout
                    .matches(slot, &p)
                    .expect("slot holds its own key");
                if !f(&key, &self.layout.decode(raw)) {
                    let old = self.lock(b as u64, b as u64);
                    self.store_slot(b as u64, s, &[0u64; MAX_WORDS][..self.stride]);
                    self.unlock(b as u64, b as u64, old);
                    self.len
                        .store(self.len.load(Ordering::Relaxed) - 1, Ordering::Relaxed);
                }
            }
            b += 1;
            if b == n {
                b = 0;
            }
        }
        b
    }

    pub(crate) fn candidate_buckets(&self, key: &L::Key) -> Option<(usize, usize)> {
        let p = self.probe(key)?;
        let (b1, b2) = self.buckets(L::probe_hash(&p));
        Some((b1 as usize, b2 as usize))
    }

    pub(crate) fn n_buckets(&self) -> usize {
        self.n_buckets as usize
    }
}

fn prev_power_of_two(n: usize) -> usize {
    1 << (usize::BITS - 1 - n.max(1).leading_zeros())
}

pub(crate) type Shared<L> = sync::Arc<RawTable<L>>;
