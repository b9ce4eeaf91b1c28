//! Flow caches for packet processing: Bounded Linear Probing (BLP) with Probabilistic Bubble LRU
//! (PBLRU), and the designs the paper measures it against.
//!
//! Layer: **tables** (pure: no I/O, no clock, no allocation after construction).
//!
//! This crate implements *Fast Software Cache Design for Network Appliances* (Zhou, Yu, Kaminsky,
//! Andersen; USENIX ATC 2020):
//!
//! * **§4, the designs**, as types implementing [`Design`]: [`SetAssoc4`] and [`SetAssoc8`]
//!   (set-associative, §4.2), [`CuckooLite`] (2-4 cuckoo-lite, §4.3) and [`Blp`] (2-4 BLP, §4.4: a key
//!   lives in its bucket or the next one and is never relocated; a buffer bucket after the last one
//!   replaces wrap-around, §6).
//! * **§5, eviction**, as types implementing [`Policy`]: [`Random`], [`Pblru`] (bubble a hit key one
//!   slot up with probability 1/N, evict the last slot; for two-bucket designs the victim bucket is
//!   picked at random) and [`DcBubble`] (the comparison of §5.3).
//! * **§6, implementation**: 16-bit fingerprints packed together, then 16-bit values; SIMD
//!   fingerprint matching (4 or 8 at once; BLP loads both buckets as one 256-bit register and masks
//!   off the values) with a portable scalar fallback, chosen at run time ([`Isa`]); batched lookup
//!   with prefetching ([`FlowCache::lookup_batch`]).
//! * **§4 and appendices A, B: analysis** ([`analysis`]): expected hit rates computed from the
//!   formulas, and **§7.1/appendix D: the hit-rate simulator** ([`sim`]).
//!
//! # How a flow cache is used
//!
//! A flow cache sits in front of a larger, slower table (in flowplane: the connection table or the
//! FIB, in Open vSwitch: the megaflow classifier). It is keyed by a 64-bit *flow hash* the caller
//! computes (e.g. `fp_hash::hash_bytes(secret_seed, five_tuple)`; the same hash that steers the
//! packet to its worker is fine). A slot stores the hash's 16-bit fingerprint and a 16-bit *value*
//! that indexes or names the full entry. Because fingerprints collide (about one lookup of an
//! uncached key in 8000 finds a matching fingerprint in an 8-slot candidate set), every lookup takes
//! a *check*: given a candidate value, the caller confirms that the entry it designates belongs to
//! the packet's full key. Only a value that passes the check is returned, so a fingerprint collision
//! costs a wasted check, never a wrong answer. Typical values:
//!
//! * an index into a per-worker array of up to 65 536 recent entries holding the full key (a 5-tuple
//!   and the backend it was assigned); the check compares the 5-tuple;
//! * an index of a rule (OvS's megaflow, a VIP's service entry) whose match the check evaluates
//!   against the packet: any flow matching the rule gets a correct answer.
//!
//! On a miss the caller computes the answer the slow way and calls [`FlowCache::insert`], which
//! replaces an entry with the same fingerprint if one exists (§4.4), else fills an empty slot, else
//! evicts according to the policy. The cache never grows: sizes are fixed at construction.
//!
//! Inserting a key that is present replaces its value: an insert leaves exactly one entry with the
//! key's fingerprint among its candidate slots (other same-fingerprint entries are emptied), so an
//! older value of a key can never resurface. A value stays valid as long as the caller's check
//! accepts it: when the entry a value designates is freed or reused, the check must reject it
//! (e.g. compare the full key, or a generation number), or the caller removes the cache entry.
//!
//! # Guarantees
//!
//! * A lookup returns only a value for which the caller's check returned true.
//! * A key inserted and looked up with no insert in between is found (every design stores the key in
//!   one of the slots its lookup searches).
//! * No allocation, lock, system call or clock read on `lookup`, `lookup_batch`, `insert` or
//!   `remove` (tested with a counting allocator). The table is allocated once, in huge pages when the
//!   system allows it (`fp_mem`).
//! * Every instruction set gives identical results (the scalar matcher is the oracle of the tests).
//! * Deterministic: the same seed and operations give the same evictions and results.
//!
//! A cache belongs to one worker: every operation that can change it takes `&mut self` (hits move
//! entries under PBLRU), so there is nothing to synchronise.
//!
//! # Example
//!
//! ```
//! use fp_flowcache::{Blp, Config, FlowCache, Pblru};
//!
//! // The full entries that cache values point to: here a small array of (flow key, backend).
//! let mut entries: Vec<(u64, u32)> = Vec::new();
//! let mut cache: FlowCache<Blp, Pblru> = FlowCache::new(&Config::with_entries(1 << 12)).unwrap();
//!
//! let flow: u64 = 0x0a00_0001_0050_c350; // stands for a 5-tuple
//! let hash = fp_hash::hash_u64(0x5ec2e7, flow);
//! let check = |v: u16, entries: &Vec<(u64, u32)>| entries[v as usize].0 == flow;
//!
//! assert_eq!(cache.lookup(hash, |v| check(v, &entries)), None); // miss: take the slow path
//! entries.push((flow, 7)); // the slow path's answer, stored at index 0
//! cache.insert(hash, 0);
//! let v = cache.lookup(hash, |v| check(v, &entries)).unwrap();
//! assert_eq!(entries[v as usize].1, 7);
//!
//! // Batched lookups prefetch every key's buckets before reading any.
//! let hashes = [hash, fp_hash::hash_u64(0x5ec2e7, 99)];
//! let mut out = [None; 2];
//! cache.lookup_batch(&hashes, |i, v| i == 0 && check(v, &entries), &mut out);
//! assert_eq!(out, [Some(0), None]);
//! println!("{} on {}, {}", cache.describe(), cache.isa(), cache.stats());
//! ```
#![deny(unsafe_code)]

pub mod analysis;
mod arch;
mod design;
pub mod keyed;
mod matcher;
mod policy;
pub mod sim;

use std::fmt;

pub use arch::Isa;
pub use design::{fingerprint, Blp, CuckooLite, Design, DesignKind, SetAssoc4, SetAssoc8};
pub use fp_mem::{PageKind, PagePolicy};
pub use keyed::KeyedCache;
pub use policy::{DcBubble, Pblru, Policy, Random};

use arch::{dispatch, Kernel};
use design::Table;
use matcher::Matcher;
use rand::SeedableRng;
use rand_pcg::Pcg32;

/// Bytes of table per cache entry (a 16-bit fingerprint and a 16-bit value).
pub const ENTRY_BYTES: usize = 4;

/// Keys per internal batch of [`FlowCache::lookup_batch`] (hash and prefetch 32, then read 32).
pub const BATCH: usize = 32;

/// Cache construction parameters.
#[derive(Clone, Debug)]
pub struct Config {
    /// Number of entries (slots); rounded up to a whole number of buckets.
    pub entries: usize,
    /// Matching instruction set; `None` picks [`Isa::best`].
    pub isa: Option<Isa>,
    /// Page policy for the table memory.
    pub pages: PagePolicy,
    /// Seed of the eviction policy's random generator (PCG-32).
    pub seed: u64,
}

impl Config {
    /// A cache of `entries` slots with the default instruction set, pages and seed.
    pub fn with_entries(entries: usize) -> Config {
        Config {
            entries,
            isa: None,
            pages: PagePolicy::Auto,
            seed: 0x5eed_f10c,
        }
    }

    /// A cache whose table is `bytes` large (`bytes / 4` entries): 4 MiB is OvS's default SMC.
    pub fn with_bytes(bytes: usize) -> Config {
        Config::with_entries(bytes / ENTRY_BYTES)
    }

    /// Use instruction set `isa` for fingerprint matching.
    pub fn isa(mut self, isa: Isa) -> Config {
        self.isa = Some(isa);
        self
    }

    /// Seed the eviction policy's generator.
    pub fn seed(mut self, seed: u64) -> Config {
        self.seed = seed;
        self
    }

    /// Use page policy `pages` for the table.
    pub fn pages(mut self, pages: PagePolicy) -> Config {
        self.pages = pages;
        self
    }
}

/// Why a cache could not be built.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `entries` is zero.
    #[error("flow cache config: entries = 0: a cache needs at least one bucket")]
    Empty,
    /// The table would not fit the address space.
    #[error("flow cache config: entries = {entries}: too large for this machine")]
    TooLarge {
        /// The requested entries.
        entries: usize,
    },
    /// The table memory could not be mapped.
    #[error("flow cache memory: {0}")]
    Mem(#[from] fp_mem::MemError),
}

/// What an insert did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Insert {
    /// An entry with the same fingerprint was there; its value was replaced (§4.4), and any other
    /// entry with that fingerprint among the key's candidates was emptied.
    Updated,
    /// An empty candidate slot was filled.
    Filled,
    /// The candidate slots were full; the policy evicted one entry.
    Evicted,
}

/// Operation counters of one cache (one worker). Summed by whoever reports metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Lookups that returned a value.
    pub hits: u64,
    /// Lookups that returned nothing.
    pub misses: u64,
    /// Candidate values rejected by the check (fingerprint collisions or stale entries).
    pub rejected: u64,
    /// Entries moved by the policy on hits (bubbling).
    pub promotions: u64,
    /// Inserts that replaced the value of a same-fingerprint entry.
    pub updated: u64,
    /// Inserts into empty slots.
    pub filled: u64,
    /// Inserts that evicted an entry.
    pub evicted: u64,
}

impl Stats {
    /// Hits / lookups.
    pub fn hit_rate(&self) -> f64 {
        let n = self.hits + self.misses;
        if n == 0 {
            0.0
        } else {
            self.hits as f64 / n as f64
        }
    }
}

impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} hits, {} misses ({:.2} % hit), {} rejected, {} promotions, {} inserts ({} filled, {} updated, {} evicted)",
            self.hits,
            self.misses,
            100.0 * self.hit_rate(),
            self.rejected,
            self.promotions,
            self.filled + self.updated + self.evicted,
            self.filled,
            self.updated,
            self.evicted
        )
    }
}

/// A flow cache of design `D` with eviction policy `P`.
///
/// `D` is one of [`SetAssoc4`], [`SetAssoc8`], [`CuckooLite`], [`Blp`]; `P` one of [`Random`],
/// [`Pblru`], [`DcBubble`]. All share this one interface.
pub struct FlowCache<D: Design, P: Policy = Random> {
    table: Table<D>,
    policy: P,
    rng: Pcg32,
    isa: Isa,
    stats: Stats,
}

impl<D: Design, P: Policy + Default> FlowCache<D, P> {
    /// Build a cache with the policy's default parameters.
    pub fn new(cfg: &Config) -> Result<Self, Error> {
        Self::with_policy(cfg, P::default())
    }
}

impl<D: Design, P: Policy> FlowCache<D, P> {
    /// Build a cache with a configured policy (e.g. `Pblru::new(16)`).
    pub fn with_policy(cfg: &Config, mut policy: P) -> Result<Self, Error> {
        if cfg.entries == 0 {
            return Err(Error::Empty);
        }
        let n = cfg.entries.div_ceil(D::WAYS);
        if n.checked_add(D::BUFFER)
            .and_then(|b| b.checked_mul(D::WAYS * ENTRY_BYTES))
            .is_none_or(|bytes| bytes > isize::MAX as usize)
        {
            return Err(Error::TooLarge {
                entries: cfg.entries,
            });
        }
        let table = Table::new(n, cfg.pages)?;
        policy.init(table.total_buckets());
        Ok(FlowCache {
            table,
            policy,
            rng: Pcg32::seed_from_u64(cfg.seed),
            isa: cfg.isa.unwrap_or_else(Isa::best),
            stats: Stats::default(),
        })
    }

    /// Look up the flow with hash `hash`; `check(value)` confirms a candidate (see the crate doc).
    /// On a hit the policy may move the entry (PBLRU, DC-Bubble).
    #[inline]
    pub fn lookup(&mut self, hash: u64, check: impl FnMut(u16) -> bool) -> Option<u16> {
        dispatch(
            self.isa,
            LookupK {
                c: self,
                hash,
                check,
            },
        )
    }

    /// Look up `hashes[i]` into `out[i]` for every `i`, in batches of [`BATCH`]: compute all candidate
    /// buckets of a batch and prefetch them, then match and check (§6 "Batched Lookup with
    /// Prefetching"). `check(i, value)` confirms a candidate for `hashes[i]`.
    ///
    /// # Panics
    /// If `out` is shorter than `hashes`.
    #[inline]
    pub fn lookup_batch(
        &mut self,
        hashes: &[u64],
        check: impl FnMut(usize, u16) -> bool,
        out: &mut [Option<u16>],
    ) {
        assert!(
            out.len() >= hashes.len(),
            "lookup_batch: {} outputs for {} hashes",
            out.len(),
            hashes.len()
        );
        dispatch(
            self.isa,
            BatchK {
                c: self,
                hashes,
                check,
                out,
            },
        )
    }

    /// Insert (or update) the flow with hash `hash` and value `value`, normally after a miss.
    #[inline]
    pub fn insert(&mut self, hash: u64, value: u16) -> Insert {
        dispatch(
            self.isa,
            InsertK {
                c: self,
                hash,
                value,
            },
        )
    }

    /// Remove the entry of `hash` whose value passes `check`; returns its value.
    pub fn remove(&mut self, hash: u64, check: impl FnMut(u16) -> bool) -> Option<u16> {
        dispatch(
            self.isa,
            RemoveK {
                c: self,
                hash,
                check,
            },
        )
    }

    /// Look up without side effects: no policy update, no counters.
    pub fn peek(&self, hash: u64, check: impl FnMut(u16) -> bool) -> Option<u16> {
        dispatch(
            self.isa,
            PeekK {
                c: self,
                hash,
                check,
            },
        )
    }

    /// Empty the cache (counters are kept).
    pub fn clear(&mut self) {
        self.table.clear();
        self.policy.reset();
    }

    /// Occupied slots (scans the whole table: for tests and reports, not the packet path).
    pub fn occupancy(&self) -> usize {
        self.table.occupied()
    }

    /// Entries (slots) in the addressed buckets: `buckets() * D::WAYS`.
    pub fn capacity(&self) -> usize {
        self.table.n * D::WAYS
    }

    /// Addressed buckets (BLP has one more, its buffer bucket).
    pub fn buckets(&self) -> usize {
        self.table.n
    }

    /// Bytes of table memory (including BLP's buffer bucket).
    pub fn table_bytes(&self) -> usize {
        self.table.bytes()
    }

    /// Which pages back the table.
    pub fn pages(&self) -> PageKind {
        self.table.pages()
    }

    /// The matching instruction set in use.
    pub fn isa(&self) -> Isa {
        self.isa
    }

    /// A copy of this cache (table, policy state, generator, counters) in newly allocated memory:
    /// measure two things from one warm state.
    pub fn try_clone(&self) -> Result<Self, Error> {
        // The copy lives on the same kind of pages as the original, so the two measure alike.
        let pages = match self.table.words.pages() {
            fp_mem::PageKind::HugeTlb => PagePolicy::Auto,
            fp_mem::PageKind::Transparent => PagePolicy::Transparent,
            fp_mem::PageKind::Normal | fp_mem::PageKind::Heap => PagePolicy::Normal,
        };
        let table = Table::new(self.table.n, pages)?;
        for (d, s) in table.words.iter().zip(self.table.words.iter()) {
            d.store(
                s.load(std::sync::atomic::Ordering::Relaxed),
                std::sync::atomic::Ordering::Relaxed,
            );
        }
        Ok(FlowCache {
            table,
            policy: self.policy.clone(),
            rng: self.rng.clone(),
            isa: self.isa,
            stats: self.stats,
        })
    }

    /// Switch the matching instruction set (the table is unchanged: every instruction set gives the
    /// same results, so a warmed cache can be measured with each).
    pub fn set_isa(&mut self, isa: Isa) {
        self.isa = isa;
    }

    /// The policy (and its parameters).
    pub fn policy(&self) -> &P {
        &self.policy
    }

    /// Operation counters since construction or [`FlowCache::reset_stats`].
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Zero the counters.
    pub fn reset_stats(&mut self) {
        self.stats = Stats::default();
    }

    /// E.g. `"2-4 BLP / PBLRU, 1048576 entries (4.0 MiB, thp)"`.
    pub fn describe(&self) -> String {
        format!(
            "{} / {}, {} entries ({:.1} MiB, {})",
            D::NAME,
            P::NAME,
            self.capacity(),
            self.table_bytes() as f64 / (1u64 << 20) as f64,
            self.pages()
        )
    }

    /// Fingerprint and value of every occupied slot of bucket `b` (`None` for empty slots), for
    /// tests and debugging.
    pub fn bucket(&self, b: usize) -> Vec<Option<(u16, u16)>> {
        (0..D::WAYS)
            .map(|s| {
                let fp = self.table.fp(b, s);
                (fp != 0).then(|| (fp, self.table.value(b, s)))
            })
            .collect()
    }

    /// The candidate buckets of `hash` (one or two), for tests and debugging.
    pub fn candidate_buckets(&self, hash: u64) -> Vec<usize> {
        let c = <D as design::sealed::Layout>::candidates(hash, self.table.n);
        c[..D::CHOICES].to_vec()
    }

    // ---- kernels (generic over the matcher) ----------------------------------------------------

    #[inline(always)]
    fn lookup_m<M: Matcher>(
        &mut self,
        m: M,
        hash: u64,
        check: impl FnMut(u16) -> bool,
    ) -> Option<u16> {
        let c = <D as design::sealed::Layout>::candidates(hash, self.table.n);
        probe(
            &self.table,
            &mut self.policy,
            &mut self.rng,
            &mut self.stats,
            m,
            c,
            fingerprint(hash),
            check,
        )
    }

    #[inline(always)]
    fn batch_m<M: Matcher>(
        &mut self,
        m: M,
        hashes: &[u64],
        mut check: impl FnMut(usize, u16) -> bool,
        out: &mut [Option<u16>],
    ) {
        // The generator and the counters live in locals for the whole batch, so they stay in
        // registers instead of making every hit a load and store through `self`.
        let FlowCache {
            table,
            policy,
            rng,
            stats,
            ..
        } = self;
        let mut r = rng.clone();
        let mut st = *stats;
        let n = table.n;
        for (k, (hs, os)) in hashes.chunks(BATCH).zip(out.chunks_mut(BATCH)).enumerate() {
            let mut cand = [[0usize; 2]; BATCH];
            for (c, &h) in cand.iter_mut().zip(hs) {
                *c = <D as design::sealed::Layout>::candidates(h, n);
                <D as design::sealed::Layout>::prefetch(&table.words, *c);
            }
            for (j, ((o, &h), &c)) in os.iter_mut().zip(hs).zip(&cand).enumerate() {
                let idx = k * BATCH + j;
                *o = probe(table, policy, &mut r, &mut st, m, c, fingerprint(h), |v| {
                    check(idx, v)
                });
            }
        }
        *rng = r;
        *stats = st;
    }

    #[inline(always)]
    fn insert_m<M: Matcher>(&mut self, m: M, hash: u64, value: u16) -> Insert {
        let fp = fingerprint(hash);
        let c = <D as design::sealed::Layout>::candidates(hash, self.table.n);
        let w = &self.table.words;
        let same = <D as design::sealed::Layout>::mask(m, w, c, fp);
        let r = if same != 0 {
            let i = same.trailing_zeros() as usize;
            let (b, s) = (c[i / D::WAYS], i % D::WAYS);
            self.table.set_value(b, s, value);
            // Any other entry with this fingerprint among the candidates is emptied: it is either
            // an older copy of this key (inserted again while present) that must not outlive this
            // one, or another key that collides on the fingerprint (rare: ~m/2^16 per insert).
            let mut rest = same & (same - 1);
            while rest != 0 {
                let j = rest.trailing_zeros() as usize;
                rest &= rest - 1;
                let (bj, sj) = (c[j / D::WAYS], j % D::WAYS);
                if (bj, sj) != (b, s) {
                    self.table.set(bj, sj, 0, 0);
                }
            }
            self.stats.updated += 1;
            Insert::Updated
        } else {
            let empty = <D as design::sealed::Layout>::mask(m, w, c, 0);
            if empty != 0 {
                let i = empty.trailing_zeros() as usize;
                self.table.set(c[i / D::WAYS], i % D::WAYS, fp, value);
                self.stats.filled += 1;
                Insert::Filled
            } else {
                self.policy
                    .place_full(&self.table, &mut self.rng, c, fp, value);
                self.stats.evicted += 1;
                Insert::Evicted
            }
        };
        self.policy.on_insert::<D>(c);
        r
    }

    #[inline(always)]
    fn remove_m<M: Matcher>(
        &mut self,
        m: M,
        hash: u64,
        mut check: impl FnMut(u16) -> bool,
    ) -> Option<u16> {
        let c = <D as design::sealed::Layout>::candidates(hash, self.table.n);
        let mut mask =
            <D as design::sealed::Layout>::mask(m, &self.table.words, c, fingerprint(hash));
        while mask != 0 {
            let i = mask.trailing_zeros() as usize;
            mask &= mask - 1;
            let (b, s) = (c[i / D::WAYS], i % D::WAYS);
            let v = self.table.value(b, s);
            if check(v) {
                self.table.set(b, s, 0, 0);
                return Some(v);
            }
        }
        None
    }

    #[inline(always)]
    fn peek_m<M: Matcher>(
        &self,
        m: M,
        hash: u64,
        mut check: impl FnMut(u16) -> bool,
    ) -> Option<u16> {
        let c = <D as design::sealed::Layout>::candidates(hash, self.table.n);
        let mut mask =
            <D as design::sealed::Layout>::mask(m, &self.table.words, c, fingerprint(hash));
        while mask != 0 {
            let i = mask.trailing_zeros() as usize;
            mask &= mask - 1;
            let v = self.table.value(c[i / D::WAYS], i % D::WAYS);
            if check(v) {
                return Some(v);
            }
        }
        None
    }
}

/// Match `fp` in candidates `c`, check candidates in slot order, apply the hit policy.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn probe<D: Design, P: Policy, M: Matcher>(
    table: &Table<D>,
    policy: &mut P,
    rng: &mut Pcg32,
    stats: &mut Stats,
    m: M,
    c: [usize; 2],
    fp: u16,
    mut check: impl FnMut(u16) -> bool,
) -> Option<u16> {
    let mut mask = <D as design::sealed::Layout>::mask(m, &table.words, c, fp);
    while mask != 0 {
        let i = mask.trailing_zeros() as usize;
        mask &= mask - 1;
        let (b, s) = (c[i / D::WAYS], i % D::WAYS);
        let v = table.value(b, s);
        if check(v) {
            stats.hits += 1;
            if policy.on_hit(table, rng, b, s) {
                stats.promotions += 1;
            }
            return Some(v);
        }
        stats.rejected += 1;
    }
    stats.misses += 1;
    None
}

impl<D: Design, P: Policy> fmt::Debug for FlowCache<D, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FlowCache")
            .field("design", &D::NAME)
            .field("policy", &self.policy)
            .field("buckets", &self.table.n)
            .field("isa", &self.isa)
            .field("stats", &self.stats)
            .finish()
    }
}

struct LookupK<'a, D: Design, P: Policy, F> {
    c: &'a mut FlowCache<D, P>,
    hash: u64,
    check: F,
}

impl<D: Design, P: Policy, F: FnMut(u16) -> bool> Kernel for LookupK<'_, D, P, F> {
    type Out = Option<u16>;
    #[inline(always)]
    fn run<M: Matcher>(self, m: M) -> Option<u16> {
        self.c.lookup_m(m, self.hash, self.check)
    }
}

struct BatchK<'a, D: Design, P: Policy, F> {
    c: &'a mut FlowCache<D, P>,
    hashes: &'a [u64],
    check: F,
    out: &'a mut [Option<u16>],
}

impl<D: Design, P: Policy, F: FnMut(usize, u16) -> bool> Kernel for BatchK<'_, D, P, F> {
    type Out = ();
    #[inline(always)]
    fn run<M: Matcher>(self, m: M) {
        self.c.batch_m(m, self.hashes, self.check, self.out)
    }
}

struct InsertK<'a, D: Design, P: Policy> {
    c: &'a mut FlowCache<D, P>,
    hash: u64,
    value: u16,
}

impl<D: Design, P: Policy> Kernel for InsertK<'_, D, P> {
    type Out = Insert;
    #[inline(always)]
    fn run<M: Matcher>(self, m: M) -> Insert {
        self.c.insert_m(m, self.hash, self.value)
    }
}

struct RemoveK<'a, D: Design, P: Policy, F> {
    c: &'a mut FlowCache<D, P>,
    hash: u64,
    check: F,
}

impl<D: Design, P: Policy, F: FnMut(u16) -> bool> Kernel for RemoveK<'_, D, P, F> {
    type Out = Option<u16>;
    #[inline(always)]
    fn run<M: Matcher>(self, m: M) -> Option<u16> {
        self.c.remove_m(m, self.hash, self.check)
    }
}

struct PeekK<'a, D: Design, P: Policy, F> {
    c: &'a FlowCache<D, P>,
    hash: u64,
    check: F,
}

impl<D: Design, P: Policy, F: FnMut(u16) -> bool> Kernel for PeekK<'_, D, P, F> {
    type Out = Option<u16>;
    #[inline(always)]
    fn run<M: Matcher>(self, m: M) -> Option<u16> {
        self.c.peek_m(m, self.hash, self.check)
    }
}
