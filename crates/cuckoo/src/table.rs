//! The algorithm, shared by both layouts: 2 candidate buckets per key, 4 slots per bucket, striped
//! version counters, one writer, many optimistic readers (CuckooSwitch §2.2, §3.2-3.4).
//!
//! # The version protocol (§3.2), with Rust atomics
//!
//! Each bucket maps to one of [`STRIPES`] version counters (`bucket % STRIPES`). The writer, before
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
use crate::sync::{self, fence, AtomicU32, AtomicU64, Ordering, Words};
use crate::{Config, InsertError, Placed, Stats};

/// Slots per bucket (the "4" of 2,4 cuckoo hashing).
pub const SLOTS: usize = 4;
/// Keys looked up together in one two-round prefetching pass; longer batches are processed in
/// chunks, pipelined one into the next. Tiny under loom, so a short batch there spans chunks.
#[cfg(not(loom))]
pub const CHUNK: usize = 32;
#[cfg(loom)]
pub const CHUNK: usize = 2;
/// Number of striped version counters: "a few thousand" (§2.2), 16 KiB, fits in L1/L2. A constant, so
/// the masked index needs no bounds check. Tiny under loom to keep the model small.
#[cfg(not(loom))]
pub const STRIPES: usize = 4096;
#[cfg(loom)]
pub const STRIPES: usize = 8;

/// Lookup strategy for [`Reader::get_batch_with`](crate::Reader::get_batch_with); the factor analysis
/// of the benchmark compares them.
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
    versions: Box<[AtomicU32; STRIPES]>,
    n_buckets: u64,
    seed: u64,
    /// Entries stored, and entries moved along cuckoo paths ever (written by the writer only;
    /// `moved` is read by [`scan_range`](Self::scan_range)'s callers to tell whether a scan may
    /// have missed one).
    counts: sync::WriterCounts,
    max_depth: usize,
    max_nodes: usize,
}

/// A borrowed view of the table for one operation: the slices and constants the hot loops need, held
/// in registers instead of re-derived from `RawTable`'s owners on every access.
struct View<'a, L: Layout> {
    layout: &'a L,
    words: &'a [AtomicU64],
    versions: &'a [AtomicU32; STRIPES],
    n_buckets: u64,
    seed: u64,
}

impl<L: Layout> Clone for View<'_, L> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<L: Layout> Copy for View<'_, L> {}

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

impl<'a, L: Layout> View<'a, L> {
    /// The two candidate buckets: `b1` uniform over all buckets, `b2` uniform over the others (drawn
    /// from the other half of the hash over `n - 1` buckets, then shifted past `b1`), so they always
    /// differ, without a branch.
    #[inline(always)]
    fn buckets(&self, hash: u64) -> (u64, u64) {
        let b1 = fp_hash::reduce(hash, self.n_buckets);
        let b2 = fp_hash::reduce(hash.rotate_left(32), self.n_buckets - 1);
        (b1, b2 + (b2 >= b1) as u64)
    }

    /// All slots of a bucket (one bounds check).
    #[inline(always)]
    fn bucket(&self, bucket: u64) -> &'a [AtomicU64] {
        let len = SLOTS * self.layout.stride();
        let start = bucket as usize * len;
        &self.words[start..start + len]
    }

    #[inline(always)]
    fn slot(&self, bucket: u64, s: usize) -> &'a [AtomicU64] {
        let stride = self.layout.stride();
        &self.bucket(bucket)[s * stride..s * stride + stride]
    }

    #[inline(always)]
    fn version(&self, bucket: u64) -> &'a AtomicU32 {
        &self.versions[bucket as usize % STRIPES]
    }

    #[inline(always)]
    fn prefetch_bucket(&self, bucket: u64) {
        let bytes = SLOTS * self.layout.stride() * 8;
        let p = self
            .words
            .as_ptr()
            .wrapping_add(bucket as usize * SLOTS * self.layout.stride())
            as *const u8;
        fp_hash::prefetch_read(p);
        // Compact buckets are 32 bytes at 32-byte aligned offsets: one line. A general-layout bucket
        // may span two or three lines.
        if bytes > 32 {
            let mut off = 64 - (p as usize & 63);
            while off < bytes {
                fp_hash::prefetch_read(p.wrapping_add(off));
                off += 64;
            }
        }
    }

    #[inline(always)]
    fn find_in(&self, bucket: u64, p: &L::Probe) -> (bool, L::Raw) {
        self.layout.scan(self.bucket(bucket), p)
    }

    #[inline(always)]
    fn probe(&self, key: &L::Key) -> Option<L::Probe> {
        self.layout.probe(self.seed, key)
    }

    /// Optimistic single-key lookup (Algorithm 2's OptimizedLookup).
    #[inline]
    fn get_probe(&self, p: &L::Probe) -> Option<L::Value> {
        let (b1, b2) = self.buckets(L::probe_hash(p));
        let (c1, c2) = (self.version(b1), self.version(b2));
        loop {
            let v1 = c1.load(Ordering::Acquire);
            let v2 = c2.load(Ordering::Acquire);
            if (v1 | v2) & 1 != 0 {
                sync::spin();
                continue;
            }
            let (mut hit, mut raw) = self.find_in(b1, p);
            if !hit {
                (hit, raw) = self.find_in(b2, p);
            }
            fence(Ordering::Acquire);
            if c1.load(Ordering::Relaxed) == v1 && c2.load(Ordering::Relaxed) == v2 {
                return hit.then(|| self.layout.decode(raw));
            }
        }
    }

    /// One chunk of a batched lookup: Algorithm 3 with per-key re-validation (a key whose versions
    /// moved is looked up again alone, instead of retrying the whole batch). Per-lane state is plain
    /// data plus bitmasks (no `Option` arrays), so initialising it costs a few vector stores; the
    /// hot loops are free of data-dependent branches, which would mispredict right after a miss.
    /// Values are decoded as they are read (decoding is pure and any bits decode to some value); a
    /// lane whose read did not validate is overwritten by its lookup alone.
    ///
    /// `OWNER`: the caller is the table's single writer (it holds the `Writer`, so no write can
    /// run while it reads), and the version protocol is skipped: no counter snapshot, fence or
    /// re-check.
    #[inline]
    fn get_chunk<const OWNER: bool>(
        &self,
        keys: &[L::Key],
        out: &mut [Option<L::Value>],
        mode: Prefetch,
    ) {
        let mut lanes = Lanes::<L>::default();
        lanes.hash::<OWNER>(self, keys, mode);
        lanes.first(self, out, mode);
        lanes.finish::<OWNER>(self, out);
    }

    /// A batch longer than one chunk, pipelined across chunks (the paper's batching carried one
    /// step further): the next chunk's keys are hashed and their first buckets prefetched before
    /// this chunk's second buckets are read, so those misses overlap instead of draining the
    /// memory pipeline at every chunk boundary.
    #[inline]
    fn get_pipelined<const OWNER: bool>(
        &self,
        keys: &[L::Key],
        out: &mut [Option<L::Value>],
        mode: Prefetch,
    ) {
        let mut lanes = [Lanes::<L>::default(), Lanes::<L>::default()];
        let mut chunks = keys.chunks(CHUNK).zip(out.chunks_mut(CHUNK));
        let Some((k, mut o)) = chunks.next() else {
            return;
        };
        lanes[0].hash::<OWNER>(self, k, mode);
        let mut cur = 0;
        loop {
            lanes[cur].first(self, o, mode);
            let next = chunks.next();
            if let Some((k, _)) = &next {
                lanes[cur ^ 1].hash::<OWNER>(self, k, mode);
            }
            lanes[cur].finish::<OWNER>(self, o);
            match next {
                Some((_, no)) => {
                    o = no;
                    cur ^= 1;
                }
                None => return,
            }
        }
    }

    /// Both buckets' version counters in one word (`v1 | v2 << 32`), `Acquire` loads.
    #[inline(always)]
    fn versions_of(&self, b1: u64, b2: u64) -> u64 {
        let v1 = self.version(b1).load(Ordering::Acquire);
        let v2 = self.version(b2).load(Ordering::Acquire);
        v1 as u64 | (v2 as u64) << 32
    }
}

/// The odd bits of both halves of a [`View::versions_of`] word.
pub(crate) const ODD: u64 = 1 | 1 << 32;

/// A mask of the low `n` bits (`n <= 64`).
#[inline(always)]
pub(crate) fn low_bits(n: usize) -> u64 {
    if n >= 64 {
        u64::MAX
    } else {
        (1u64 << n) - 1
    }
}

/// The per-lane state of one chunk of a batched lookup, between its rounds.
struct Lanes<L: Layout> {
    n: usize,
    probes: [L::Probe; CHUNK],
    bk: [(u64, u64); CHUNK],
    vers: [u64; CHUNK],
    /// Keys the layout can hold at all.
    valid: u64,
    /// Keys found in their first bucket.
    found: u64,
}

impl<L: Layout> Default for Lanes<L> {
    fn default() -> Self {
        Lanes {
            n: 0,
            probes: [L::Probe::default(); CHUNK],
            bk: [(0, 0); CHUNK],
            vers: [0; CHUNK],
            valid: 0,
            found: 0,
        }
    }
}

impl<L: Layout> Lanes<L> {
    /// Round 0: hash every key, prefetch every first bucket, snapshot both versions (before any
    /// bucket of the key is read, as the protocol requires).
    #[inline(always)]
    fn hash<const OWNER: bool>(&mut self, v: &View<'_, L>, keys: &[L::Key], mode: Prefetch) {
        let n = keys.len().min(CHUNK);
        self.n = n;
        self.valid = 0;
        self.found = 0;
        for (i, k) in keys[..n].iter().enumerate() {
            if let Some(p) = v.probe(k) {
                self.valid |= 1 << i;
                let (b1, b2) = v.buckets(L::probe_hash(&p));
                if mode == Prefetch::TwoRound {
                    v.prefetch_bucket(b1);
                }
                if !OWNER {
                    self.vers[i] = v.versions_of(b1, b2);
                }
                self.bk[i] = (b1, b2);
                self.probes[i] = p;
            }
        }
    }

    /// Round 1: read first buckets; prefetch second buckets of the misses.
    #[inline(always)]
    fn first(&mut self, v: &View<'_, L>, out: &mut [Option<L::Value>], mode: Prefetch) {
        for (i, o) in out[..self.n].iter_mut().enumerate() {
            let (b1, b2) = self.bk[i];
            let (hit, r) = v.find_in(b1, &self.probes[i]);
            let hit = hit && self.valid >> i & 1 != 0;
            *o = hit.then(|| v.layout.decode(r));
            self.found |= (hit as u64) << i;
            if mode == Prefetch::TwoRound {
                // Chosen without a branch: re-prefetching the first bucket (in L1) costs nothing.
                v.prefetch_bucket(if hit { b1 } else { b2 });
            }
        }
    }

    /// Round 2: second buckets of the misses; then validate every lane.
    #[inline(always)]
    fn finish<const OWNER: bool>(&self, v: &View<'_, L>, out: &mut [Option<L::Value>]) {
        let n = self.n;
        let mut m = self.valid & !self.found & low_bits(n);
        while m != 0 {
            let i = m.trailing_zeros() as usize % CHUNK;
            m &= m - 1;
            let (hit, r) = v.find_in(self.bk[i].1, &self.probes[i]);
            out[i] = hit.then(|| v.layout.decode(r));
        }
        if OWNER {
            return;
        }
        // Validate: versions even and unchanged since round 0.
        fence(Ordering::Acquire);
        let mut bad = 0u64;
        for (i, &(b1, b2)) in self.bk[..n].iter().enumerate() {
            let stable = self.vers[i] == v.versions_of(b1, b2) && self.vers[i] & ODD == 0;
            bad |= (!stable as u64) << i;
        }
        // Rare: a writer touched the key's buckets while we read them. Look it up again alone.
        let mut m = bad & self.valid;
        while m != 0 {
            let i = m.trailing_zeros() as usize % CHUNK;
            m &= m - 1;
            out[i] = v.get_probe(&self.probes[i]);
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
        let versions = Box::new(std::array::from_fn(|_| AtomicU32::new(0)));
        Ok(RawTable {
            layout,
            words,
            versions,
            n_buckets,
            seed: cfg.seed,
            counts: sync::WriterCounts::new(),
            max_depth: cfg.max_search_depth,
            max_nodes: cfg.max_search_nodes,
        })
    }

    #[inline(always)]
    fn view(&self) -> View<'_, L> {
        View {
            layout: &self.layout,
            words: &self.words,
            versions: &self.versions,
            n_buckets: self.n_buckets,
            seed: self.seed,
        }
    }

    pub(crate) fn get(&self, key: &L::Key) -> Option<L::Value> {
        let v = self.view();
        let p = v.probe(key)?;
        v.get_probe(&p)
    }

    /// Batched lookup with two-round prefetching (Algorithm 3), any number of keys (dynamic
    /// batching, §4.3). `out[i]` receives the value of `keys[i]`.
    pub(crate) fn get_batch(&self, keys: &[L::Key], out: &mut [Option<L::Value>], mode: Prefetch) {
        self.batch::<false>(keys, out, mode)
    }

    /// [`get_batch`](Self::get_batch) for the single writer, which needs no version protocol:
    /// while it reads (through `&Writer`), no write can happen (writes take `&mut Writer`).
    pub(crate) fn owner_get_batch(
        &self,
        keys: &[L::Key],
        out: &mut [Option<L::Value>],
        mode: Prefetch,
    ) {
        self.batch::<true>(keys, out, mode)
    }

    #[inline(always)]
    fn batch<const OWNER: bool>(
        &self,
        keys: &[L::Key],
        out: &mut [Option<L::Value>],
        mode: Prefetch,
    ) {
        assert_eq!(
            keys.len(),
            out.len(),
            "get_batch: keys and out differ in length"
        );
        let v = self.view();
        if keys.len() <= CHUNK {
            v.get_chunk::<OWNER>(keys, out, mode);
        } else {
            v.get_pipelined::<OWNER>(keys, out, mode);
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.counts.len.load(Ordering::Relaxed)
    }

    pub(crate) fn stats(&self) -> Stats {
        Stats {
            len: self.len(),
            slots: self.n_buckets as usize * SLOTS,
            buckets: self.n_buckets as usize,
            table_bytes: self.words.len() * 8,
            version_bytes: STRIPES * 4,
            stripes: STRIPES,
            slot_bytes: self.layout.stride() * 8,
            payload_bytes: self.layout.payload_bytes(),
            pages: sync::page_kind(&self.words),
            layout: "2,4",
        }
    }

    pub(crate) fn candidate_buckets(&self, key: &L::Key) -> Option<(usize, usize)> {
        let v = self.view();
        let p = v.probe(key)?;
        let (b1, b2) = v.buckets(L::probe_hash(&p));
        Some((b1 as usize, b2 as usize))
    }

    /// Prefetch both candidate buckets of `key` (a writer about to insert a run of keys issues
    /// this a few keys ahead, so each insert finds its buckets in cache).
    #[inline]
    pub(crate) fn prefetch_key(&self, key: &L::Key) {
        let v = self.view();
        if let Some(p) = v.probe(key) {
            let (b1, b2) = v.buckets(L::probe_hash(&p));
            v.prefetch_bucket(b1);
            v.prefetch_bucket(b2);
        }
    }

    pub(crate) fn n_buckets(&self) -> usize {
        self.n_buckets as usize
    }

    // ---------------------------------------------------------------------------------------------
    // Writer side. Only `Writer` calls these (it is the single writer: `&mut self` on every method).

    /// Make the counters of buckets `a` and `b` odd (once if they share a stripe). Returns the old
    /// values.
    #[inline]
    fn lock(&self, a: u64, b: u64) -> (u32, Option<u32>) {
        let v = self.view();
        let (ca, cb) = (v.version(a), v.version(b));
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
        let v = self.view();
        v.version(a).store(old.0.wrapping_add(2), Ordering::Release);
        if let Some(vb) = old.1 {
            v.version(b).store(vb.wrapping_add(2), Ordering::Release);
        }
    }

    /// Write one slot inside an odd-version window of its bucket.
    fn write_slot(&self, bucket: u64, s: usize, words: &[u64]) {
        let old = self.lock(bucket, bucket);
        self.store_slot(bucket, s, words);
        self.unlock(bucket, bucket, old);
    }

    fn store_slot(&self, bucket: u64, s: usize, words: &[u64]) {
        for (w, &x) in self.view().slot(bucket, s).iter().zip(words) {
            w.store(x, Ordering::Relaxed);
        }
    }

    fn clear_slot(&self, bucket: u64, s: usize) {
        self.store_slot(bucket, s, &[0u64; MAX_WORDS][..self.layout.stride()]);
    }

    fn writer_find(&self, p: &L::Probe) -> Option<(u64, usize, L::Raw)> {
        let v = self.view();
        let (b1, b2) = v.buckets(L::probe_hash(p));
        for b in [b1, b2] {
            for s in 0..SLOTS {
                if let Some(raw) = self.layout.matches(v.slot(b, s), p) {
                    return Some((b, s, raw));
                }
            }
        }
        None
    }

    fn free_slot(&self, b: u64) -> Option<usize> {
        let v = self.view();
        (0..SLOTS).find(|&s| self.layout.is_empty(v.slot(b, s)))
    }

    fn add_len(&self, d: isize) {
        let n = self.counts.len.load(Ordering::Relaxed);
        self.counts
            .len
            .store(n.wrapping_add_signed(d), Ordering::Relaxed);
    }

    /// Insert or overwrite. Returns the previous value if the key was present.
    pub(crate) fn insert(
        &self,
        search: &mut Search,
        key: &L::Key,
        value: &L::Value,
    ) -> Result<Option<L::Value>, InsertError> {
        match self.place(search, key, value, self.max_nodes, None)? {
            Placed::New => Ok(None),
            Placed::Updated(old) => Ok(Some(old)),
            // Without a predicate nothing is evicted.
            Placed::Evicted(..) => Err(InsertError::Full),
        }
    }

    /// Insert or overwrite with the cuckoo path search limited to `max_nodes` buckets and, when
    /// both of the key's buckets are full, an entry of theirs that `evictable` accepts replaced
    /// before any search (see `Writer::insert_bounded`).
    pub(crate) fn insert_bounded(
        &self,
        search: &mut Search,
        key: &L::Key,
        value: &L::Value,
        max_nodes: usize,
        evictable: &mut Evictable<'_, L>,
    ) -> Result<Placed<L::Key, L::Value>, InsertError> {
        self.place(
            search,
            key,
            value,
            max_nodes.min(self.max_nodes),
            Some(evictable),
        )
    }

    #[inline(always)]
    fn place(
        &self,
        search: &mut Search,
        key: &L::Key,
        value: &L::Value,
        max_nodes: usize,
        evictable: Option<&mut Evictable<'_, L>>,
    ) -> Result<Placed<L::Key, L::Value>, InsertError> {
        let v = self.view();
        let p = v.probe(key).ok_or(InsertError::KeyOutOfRange)?;
        let mut enc = [0u64; MAX_WORDS];
        self.layout.encode(&p, key, value, &mut enc)?;
        let enc = &enc[..self.layout.stride()];
        // One pass over both buckets' tags: candidates for the key, and free slots. A new key
        // (the common case: a connection's first packet) has no candidate and needs no compare.
        let (b1, b2) = v.buckets(L::probe_hash(&p));
        let (c1, e1) = self.layout.masks(v.bucket(b1), &p);
        let (c2, e2) = self.layout.masks(v.bucket(b2), &p);
        // In-place update of an existing key.
        if c1 | c2 != 0 {
            if let Some((b, s, raw)) = self.writer_find(&p) {
                self.write_slot(b, s, enc);
                return Ok(Placed::Updated(self.layout.decode(raw)));
            }
        }
        // The first free slot of the first bucket, else of the second (as `free_slot` would).
        let (b, s) = if e1 != 0 {
            (b1, e1.trailing_zeros() as usize)
        } else if e2 != 0 {
            (b2, e2.trailing_zeros() as usize)
        } else {
            if let Some(f) = evictable {
                if let Some((b, s, k, old)) = self.victim(b1, b2, f) {
                    self.write_slot(b, s, enc);
                    return Ok(Placed::Evicted(k, old));
                }
            }
            self.make_room(search, b1, b2, max_nodes)?
        };
        self.write_slot(b, s, enc);
        self.add_len(1);
        Ok(Placed::New)
    }

    /// The first entry of buckets `b1`, `b2` (in that order) that `evictable` accepts.
    #[cold]
    #[inline(never)]
    fn victim(
        &self,
        b1: u64,
        b2: u64,
        evictable: &mut Evictable<'_, L>,
    ) -> Option<(u64, usize, L::Key, L::Value)> {
        let v = self.view();
        for b in [b1, b2] {
            for s in 0..SLOTS {
                let slot = v.slot(b, s);
                if self.layout.is_empty(slot) {
                    continue;
                }
                let key = self.layout.slot_key(slot);
                let value = self.layout.decode(self.layout.slot_raw(slot));
                if evictable(&key, &value) {
                    return Some((b, s, key, value));
                }
            }
        }
        None
    }

    /// Overwrite the value of a present key. Returns the previous value, or `None` if absent.
    pub(crate) fn update(
        &self,
        key: &L::Key,
        value: &L::Value,
    ) -> Result<Option<L::Value>, InsertError> {
        let Some(p) = self.view().probe(key) else {
            return Ok(None);
        };
        let mut enc = [0u64; MAX_WORDS];
        self.layout.encode(&p, key, value, &mut enc)?;
        let Some((b, s, raw)) = self.writer_find(&p) else {
            return Ok(None);
        };
        self.write_slot(b, s, &enc[..self.layout.stride()]);
        Ok(Some(self.layout.decode(raw)))
    }

    /// Remove a key. Returns its value if it was present.
    pub(crate) fn remove(&self, key: &L::Key) -> Option<L::Value> {
        let p = self.view().probe(key)?;
        let (b, s, raw) = self.writer_find(&p)?;
        let old = self.lock(b, b);
        self.clear_slot(b, s);
        self.unlock(b, b, old);
        self.add_len(-1);
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
        max_nodes: usize,
    ) -> Result<(u64, usize), InsertError> {
        let (found, free_slot) = self
            .bfs(search, b1, b2, max_nodes)
            .ok_or(InsertError::Full)?;
        // Path as (bucket, slot) pairs from the free slot back to the root slot.
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
        // path[0] is the free slot at the end, path[last] the root slot to free. Move backwards:
        // each entry is copied into the free slot, then its old slot is cleared, inside one
        // odd-version window over both buckets.
        let v = self.view();
        let mut buf = [0u64; MAX_WORDS];
        // Counted before the first move: a reader that sees any of them (through the version
        // protocol's fences) sees the count changed.
        let moved = search.path.len() - 1;
        let total = self.counts.moved.load(Ordering::Relaxed);
        self.counts
            .moved
            .store(total + moved as u64, Ordering::Release);
        for i in 0..search.path.len() - 1 {
            let (to_b, to_s) = search.path[i];
            let (from_b, from_s) = search.path[i + 1];
            for (d, w) in buf.iter_mut().zip(v.slot(from_b, from_s)) {
                *d = w.load(Ordering::Relaxed);
            }
            let old = self.lock(from_b, to_b);
            self.store_slot(to_b, to_s, &buf[..self.layout.stride()]);
            self.clear_slot(from_b, from_s);
            self.unlock(from_b, to_b, old);
        }
        search.moves += moved as u64;
        search.longest = search.longest.max(moved);
        Ok(*search.path.last().expect("path has a root"))
    }

    /// Breadth-first search over buckets. Returns the queue index of the first bucket with a free
    /// slot and that slot, visiting at most `max_nodes` buckets. Shortest paths never visit a
    /// bucket twice, so the path is valid.
    fn bfs(
        &self,
        search: &mut Search,
        b1: u64,
        b2: u64,
        max_nodes: usize,
    ) -> Option<(usize, usize)> {
        let v = self.view();
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
                    if q.len() >= max_nodes {
                        break;
                    }
                    let h = self.layout.slot_hash(self.seed, v.slot(node.bucket, s));
                    let (x1, x2) = v.buckets(h);
                    let alt = if x1 == node.bucket { x2 } else { x1 };
                    v.prefetch_bucket(alt);
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

    /// Entries stored in their first candidate bucket and in their second: a scan of every slot
    /// (the writer reads its own table). A positive lookup reads the second bucket only for the
    /// latter, so `1 + second / (first + second)` is the buckets a uniform positive lookup reads.
    pub(crate) fn placement(&self) -> (usize, usize) {
        let v = self.view();
        let (mut first, mut second) = (0, 0);
        for b in 0..self.n_buckets {
            for s in 0..SLOTS {
                let slot = v.slot(b, s);
                if self.layout.is_empty(slot) {
                    continue;
                }
                let (b1, _) = v.buckets(self.layout.slot_hash(self.seed, slot));
                if b1 == b {
                    first += 1;
                } else {
                    second += 1;
                }
            }
        }
        (first, second)
    }

    /// Entries moved along cuckoo paths since the table was made.
    pub(crate) fn moved(&self) -> u64 {
        self.counts.moved.load(Ordering::Acquire)
    }

    /// Reader side: visit the entries of buckets `start..start + count` (wrapping) while the
    /// writer may write. Each bucket is copied under the version protocol (read its counter, copy
    /// its slots, re-check; a bucket being written is read again), so every entry visited is one
    /// the bucket held at some instant, never a torn one. Entries a cuckoo path moves from a
    /// bucket not yet visited to one already visited during the scan are missed, and entries
    /// moved the other way are visited twice: callers that must see every entry compare
    /// [`moved`](Self::moved) before and after. Returns the next bucket.
    pub(crate) fn scan_range(
        &self,
        start: usize,
        count: usize,
        mut f: impl FnMut(&L::Key, &L::Value),
    ) -> usize {
        let v = self.view();
        let n = self.n_buckets as usize;
        let mut b = start % n.max(1);
        let mut copy: [Option<(L::Key, L::Raw)>; SLOTS] = [None; SLOTS];
        for _ in 0..count.min(n) {
            let c = v.version(b as u64);
            loop {
                let before = c.load(Ordering::Acquire);
                if before & 1 != 0 {
                    sync::spin();
                    continue;
                }
                for (s, out) in copy.iter_mut().enumerate() {
                    let slot = v.slot(b as u64, s);
                    *out = (!self.layout.is_empty(slot))
                        .then(|| (self.layout.slot_key(slot), self.layout.slot_raw(slot)));
                }
                fence(Ordering::Acquire);
                if c.load(Ordering::Relaxed) == before {
                    break;
                }
            }
            for (k, raw) in copy.iter().flatten() {
                f(k, &self.layout.decode(*raw));
            }
            b += 1;
            if b == n {
                b = 0;
            }
        }
        b
    }

    /// Visit the entries of buckets `start..start + count` (wrapping), removing those for which `f`
    /// returns false. Returns the next bucket to continue from. Writer side: used for expiry and aging.
    pub(crate) fn retain_range(
        &self,
        start: usize,
        count: usize,
        mut f: impl FnMut(&L::Key, &L::Value) -> bool,
    ) -> usize {
        let v = self.view();
        let n = self.n_buckets as usize;
        let mut b = start % n.max(1);
        for _ in 0..count.min(n) {
            for s in 0..SLOTS {
                let slot = v.slot(b as u64, s);
                if self.layout.is_empty(slot) {
                    continue;
                }
                // The writer reads its own table: no version protocol, and no rehashing.
                let key = self.layout.slot_key(slot);
                let raw = self.layout.slot_raw(slot);
                if !f(&key, &self.layout.decode(raw)) {
                    let old = self.lock(b as u64, b as u64);
                    self.clear_slot(b as u64, s);
                    self.unlock(b as u64, b as u64, old);
                    self.add_len(-1);
                }
            }
            b += 1;
            if b == n {
                b = 0;
            }
        }
        b
    }
}

/// The caller's choice of entries an insert may replace.
type Evictable<'a, L> = dyn FnMut(&<L as Layout>::Key, &<L as Layout>::Value) -> bool + 'a;

pub(crate) type Shared<L> = sync::Arc<RawTable<L>>;
