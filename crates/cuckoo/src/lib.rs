//! CuckooSwitch's concurrent cuckoo hash table: the FIB and connection table of flowplane.
//!
//! Layer: **tables** (pure: no I/O after construction, no logging, no allocation on lookup or insert).
//!
//! This crate implements the forwarding table of *CuckooSwitch* (Zhou et al., CoNEXT 2013):
//! "2,4 optimistic concurrent cuckoo hashing" (§2.2) — every key has two candidate buckets of four
//! slots, so a lookup reads at most two cache lines and the table fills past 95 % — with the paper's
//! optimisations:
//!
//! * **§3.2, memory ordering**: readers take no lock and execute no atomic read-modify-write; striped
//!   version counters ([`STRIPES`] = 4096), odd while the single writer changes a bucket, let them detect
//!   a concurrent change and retry. Written with `Acquire`/`Release` atomics and fences, so it is
//!   correct on any CPU and compiles to plain loads and stores on x86 (see `table.rs` for the
//!   argument, `tests/loom_version.rs` for the model check).
//! * **§3.3-3.4, batching and two-round prefetching**: [`Reader::get_batch`] hashes a whole batch,
//!   prefetches every first bucket, reads them, prefetches second buckets only for the keys that
//!   missed, reads those, and re-validates versions (Algorithm 3); any number of keys (dynamic
//!   batching, §4.3), in chunks of [`CHUNK`]. A call with more than one chunk is pipelined: the
//!   next chunk is hashed and its first buckets prefetched before this chunk's second buckets are
//!   read, so the memory pipeline does not drain at every chunk boundary (a caller with several
//!   bursts of keys at hand gains by passing them in one call). [`Writer::get_batch`] is the same without the version protocol: while the
//!   single writer reads its own table no write can run, which is how the load balancer's
//!   per-worker connection tables are read.
//! * **§3.5, huge pages**: the table is one mapping from [`fp_mem`]: explicit huge pages, else
//!   transparent huge pages, else normal pages; [`Stats::pages`] says which.
//! * **In-place updates**: inserts, updates and deletes change the one and only copy of the table
//!   (no RCU, no second copy); an insert that needs room moves entries along a cuckoo path found by
//!   breadth-first search, from the end backwards, so a present key is never missing to a reader.
//! * **Where entries sit**: [`Writer::placement`] counts the entries in their first and in their
//!   second bucket; `1 +` the second share is the buckets (for the compact layout: cache lines) a
//!   successful lookup reads — about 1.29 at 95 % load, where §3.4 estimates 1.5.
//!
//! Two layouts, one algorithm:
//!
//! * [`CompactMap`]: key up to 48 bits (a MAC address), value 16 bits (a port; `u16::MAX` is
//!   reserved), packed into one 64-bit slot: 32-byte buckets, about 8.4 bytes per entry at 95 % load
//!   (the paper's 8.5, Table 3).
//! * [`GeneralMap`]: any fixed-size key and value implementing [`FixedBytes`], up to 63 bytes
//!   together (a 13-byte IPv4 or 37-byte IPv6 5-tuple with an 8-byte value), with a 1-byte hash tag.
//!
//! And a third layout for the same keys as [`CompactMap`], beyond the paper: [`QuotientMap`]
//! stores only the part of a mixed key its bucket's position does not imply (the quotient), in
//! 64-byte buckets of 10 to 13 slots (more in larger tables, whose quotients are shorter): at
//! 95 % load an entry costs `64 / (0.95 · slots)` bytes, and a successful lookup reads one line
//! for most keys (see `quotient.rs`; the same protocol, its own implementation). Its lookups
//! read fewer lines than the compact layout's, and for 48-bit keys execute fewer instructions
//! (more for keys wider than 48 bits; `flowplane-bench fib --cases quotient` compares them).
//! [`FibMap`] builds either layout behind one handle ([`FibReader`], [`FibWriter`]), chosen by
//! size with [`FibLayout::auto`]: the switch and the cluster node use it.
//!
//! ```
//! use fp_cuckoo::{Config, QuotientMap};
//!
//! let (mut writer, reader) = QuotientMap::new(&Config::with_capacity(1000)).unwrap();
//! writer.insert(0x0002_b3aa_bbcc, 3).unwrap();
//! let mut out = [None; 2];
//! reader.get_batch(&[0x0002_b3aa_bbcc, 1], &mut out);
//! assert_eq!(out, [Some(3), None]);
//! let mut keys = Vec::new();
//! writer.for_each(|k, v| keys.push((k, v))); // keys come back whole from their quotients
//! assert_eq!(keys, [(0x0002_b3aa_bbcc, 3)]);
//! ```
//!
//! # Example
//!
//! ```
//! use fp_cuckoo::{CompactMap, Config, InsertError};
//!
//! // A FIB sized for 1000 MACs; one writer handle, any number of reader handles.
//! let (mut writer, reader) = CompactMap::new(&Config::with_capacity(1000)).unwrap();
//! writer.insert(0x0002_b3aa_bbcc, 3).unwrap();
//! let r2 = reader.clone();
//! let t = std::thread::spawn(move || r2.get(0x0002_b3aa_bbcc));
//! assert_eq!(t.join().unwrap(), Some(3));
//!
//! // Batched lookup with two-round prefetching.
//! let keys = [0x0002_b3aa_bbcc, 0x0000_0000_0001];
//! let mut out = [None; 2];
//! reader.get_batch(&keys, &mut out);
//! assert_eq!(out, [Some(3), None]);
//!
//! // Values are 16 bits; u16::MAX is reserved for "empty".
//! assert_eq!(writer.insert(7, u16::MAX), Err(InsertError::ReservedValue));
//! println!("{}", reader.stats());
//! ```
#![deny(unsafe_code)]

mod fib;
mod layout;
mod quotient;
mod sync;
mod table;

use std::fmt;

pub use fib::{FibLayout, FibMap, FibReader, FibWriter};
pub use fp_mem::{PageKind, PagePolicy};
pub use layout::{Compact, FixedBytes, General, Layout, COMPACT_MAX_KEY};
pub use quotient::{
    QuotientMap, QuotientReader, QuotientStats, QuotientWriter, QUOTIENT_MAX_SLOTS,
};
pub use table::{Prefetch, CHUNK, SLOTS, STRIPES};

use table::{RawTable, Search, Shared};

/// Table construction parameters.
#[derive(Clone, Debug)]
pub struct Config {
    /// Number of entries the table is sized for: the slot count is `capacity / load_factor`.
    pub capacity: usize,
    /// Target occupancy at `capacity` entries (default 0.95; the table accepts more until a cuckoo
    /// path can no longer be found).
    pub load_factor: f64,
    /// Hash seed. Tables facing untrusted keys should use a secret one.
    pub seed: u64,
    /// Page policy for the table memory.
    pub pages: PagePolicy,
    /// Longest cuckoo path the insert search considers (moves per insert).
    pub max_search_depth: usize,
    /// Most buckets the insert search visits.
    pub max_search_nodes: usize,
}

impl Config {
    /// Defaults for a table of `capacity` entries.
    pub fn with_capacity(capacity: usize) -> Self {
        Config {
            capacity,
            load_factor: 0.95,
            seed: 0x6a09_e667_f3bc_c908,
            pages: PagePolicy::Auto,
            max_search_depth: 5,
            max_search_nodes: 4096,
        }
    }

    /// Set the seed.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Set the page policy.
    pub fn pages(mut self, pages: PagePolicy) -> Self {
        self.pages = pages;
        self
    }
}

/// Why a table could not be built.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The configuration is not usable.
    #[error("cuckoo table config: {field} = {value}: {why}")]
    Config {
        field: &'static str,
        value: String,
        why: &'static str,
    },
    /// Capacity overflows the address space.
    #[error("cuckoo table of {capacity} entries is too large for this machine")]
    TooLarge { capacity: usize },
    /// Memory could not be mapped.
    #[error("cuckoo table memory: {0}")]
    Memory(#[from] fp_mem::MemError),
}

/// Why an insert failed. Nothing was changed when an insert fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InsertError {
    /// No cuckoo path to a free slot within the search bounds: the table is full.
    #[error("table full: no cuckoo path to a free slot")]
    Full,
    /// The key does not fit the layout (compact keys are 48 bits).
    #[error("key wider than the layout stores")]
    KeyOutOfRange,
    /// The value is reserved by the layout or beyond its width (compact: `u16::MAX`, or
    /// `2^bits - 1` and above with [`Compact::with_value_bits`]).
    #[error("value reserved by the layout")]
    ReservedValue,
}

/// Where [`Writer::insert_bounded`] put an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placed<K, V> {
    /// The key was new and took a free slot (possibly after moving others along a cuckoo path).
    New,
    /// The key was present: its value was overwritten (this is the old value).
    Updated(V),
    /// The key was new and took the slot of an entry the caller allowed to be evicted (its key
    /// and value; the table's length is unchanged).
    Evicted(K, V),
}

/// Size and occupancy figures.
#[derive(Clone, Copy, Debug)]
pub struct Stats {
    /// Entries stored.
    pub len: usize,
    /// Slots (4 per bucket in the 2,4 layouts).
    pub slots: usize,
    /// Buckets.
    pub buckets: usize,
    /// Bytes of the slot array.
    pub table_bytes: usize,
    /// Bytes of the version counters.
    pub version_bytes: usize,
    /// Version counters.
    pub stripes: usize,
    /// Bytes per slot.
    pub slot_bytes: usize,
    /// Bytes of key + value an entry carries.
    pub payload_bytes: usize,
    /// Pages backing the slot array.
    pub pages: PageKind,
    /// The layout: `"2,4"` (four slots in a bucket, whole keys) or `"quotient"` ([`QuotientMap`]:
    /// 64-byte buckets, `slot_bytes` rounded up from its slot's bits).
    pub layout: &'static str,
}

impl Stats {
    /// Occupied fraction of the slots.
    pub fn load(&self) -> f64 {
        self.len as f64 / self.slots as f64
    }

    /// Total bytes (slots + version counters).
    pub fn bytes(&self) -> usize {
        self.table_bytes + self.version_bytes
    }

    /// Total bytes divided by stored entries.
    pub fn bytes_per_entry(&self) -> f64 {
        self.bytes() as f64 / self.len.max(1) as f64
    }
}

/// Where a table's entries sit among their two candidate buckets ([`Writer::placement`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    /// Entries in their first bucket: a positive lookup of one reads one bucket.
    pub first: usize,
    /// Entries in their second bucket: a positive lookup of one reads both.
    pub second: usize,
}

impl Placement {
    /// Share of the entries stored in their second bucket.
    pub fn second_share(&self) -> f64 {
        self.second as f64 / (self.first + self.second).max(1) as f64
    }

    /// Buckets a positive lookup of a uniformly chosen stored key reads: `1 + second_share`.
    pub fn buckets_per_hit(&self) -> f64 {
        1.0 + self.second_share()
    }
}

impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} entries in {} slots ({:.1}% load), {:.1} MiB on {} pages, {:.2} bytes/entry, \
             {} layout",
            self.len,
            self.slots,
            100.0 * self.load(),
            self.bytes() as f64 / (1 << 20) as f64,
            self.pages,
            self.bytes_per_entry(),
            self.layout
        )
    }
}

/// The single writer of a table. Not `Clone`: there is exactly one per table, and every mutating
/// method takes `&mut self`, so the type system enforces the single-writer rule. It can be sent to
/// another thread (e.g. a control thread), or wrapped in a mutex if several threads must write.
pub struct Writer<L: Layout> {
    table: Shared<L>,
    search: Search,
}

/// A reader handle: cheap to clone, `Send + Sync`; lookups never block the writer or each other.
pub struct Reader<L: Layout> {
    table: Shared<L>,
}

impl<L: Layout> Clone for Reader<L> {
    fn clone(&self) -> Self {
        Reader {
            table: self.table.clone(),
        }
    }
}

/// CuckooSwitch's compact FIB layout: 48-bit keys, 16-bit values.
pub type CompactMap = Compact;
/// Writer of a [`CompactMap`].
pub type CompactWriter = Writer<Compact>;
/// Reader of a [`CompactMap`].
pub type CompactReader = Reader<Compact>;
/// The general layout for wider keys and values.
pub type GeneralMap<K, V> = General<K, V>;

fn check(cfg: &Config) -> Result<(), Error> {
    if !(cfg.load_factor > 0.05 && cfg.load_factor <= 1.0) {
        return Err(Error::Config {
            field: "load_factor",
            value: cfg.load_factor.to_string(),
            why: "must be in (0.05, 1]",
        });
    }
    if cfg.max_search_depth == 0 || cfg.max_search_depth > 64 {
        return Err(Error::Config {
            field: "max_search_depth",
            value: cfg.max_search_depth.to_string(),
            why: "must be in 1..=64",
        });
    }
    if cfg.max_search_nodes < 2 || cfg.max_search_nodes > u32::MAX as usize {
        return Err(Error::Config {
            field: "max_search_nodes",
            value: cfg.max_search_nodes.to_string(),
            why: "must be at least 2",
        });
    }
    Ok(())
}

fn build<L: Layout>(layout: L, cfg: &Config) -> Result<(Writer<L>, Reader<L>), Error> {
    check(cfg)?;
    let table = sync::Arc::new(RawTable::new(layout, cfg)?);
    let search = Search::new(cfg.max_search_nodes, cfg.max_search_depth);
    Ok((
        Writer {
            table: table.clone(),
            search,
        },
        Reader { table },
    ))
}

impl Compact {
    /// Build an empty compact table.
    pub fn new(cfg: &Config) -> Result<(CompactWriter, CompactReader), Error> {
        build(Compact::default(), cfg)
    }

    /// Build an empty compact table whose words hold `value_bits` (2..=16) bits of value and
    /// `64 - value_bits` of key ([`Compact::split`]).
    pub fn with_value_bits(
        cfg: &Config,
        value_bits: u32,
    ) -> Result<(CompactWriter, CompactReader), Error> {
        build(Compact::split(value_bits), cfg)
    }
}

impl<K: FixedBytes, V: FixedBytes> General<K, V> {
    /// Build an empty general table. Panics if `1 + K::LEN + V::LEN > 64`.
    #[allow(clippy::new_ret_no_self)]
    pub fn new(cfg: &Config) -> Result<(Writer<Self>, Reader<Self>), Error> {
        build(General::<K, V>::layout(), cfg)
    }

    fn layout() -> Self {
        Self::new_layout()
    }
}

/// The lookup methods of [`Reader`] and [`Writer`]; `$batch` is the table's batched lookup for that
/// side (the writer's skips the version protocol: no write can run while it reads).
macro_rules! read_methods {
    ($batch:ident) => {
        /// Look up one key.
        #[inline]
        pub fn get(&self, key: L::Key) -> Option<L::Value> {
            self.table.get(&key)
        }

        /// Look up `keys` (any number) with two-round prefetching; `out[i]` gets `keys[i]`'s value.
        /// More than [`CHUNK`] keys are looked up in chunks pipelined one into the next.
        /// Panics if the slices differ in length.
        #[inline]
        pub fn get_batch(&self, keys: &[L::Key], out: &mut [Option<L::Value>]) {
            self.table.$batch(keys, out, Prefetch::TwoRound)
        }

        /// [`get_batch`](Self::get_batch) with an explicit prefetch strategy (for comparisons).
        #[inline]
        pub fn get_batch_with(
            &self,
            keys: &[L::Key],
            out: &mut [Option<L::Value>],
            mode: Prefetch,
        ) {
            self.table.$batch(keys, out, mode)
        }

        /// Entries stored.
        pub fn len(&self) -> usize {
            self.table.len()
        }

        /// True when no entry is stored.
        pub fn is_empty(&self) -> bool {
            self.table.len() == 0
        }

        /// Size and occupancy figures.
        pub fn stats(&self) -> Stats {
            self.table.stats()
        }
    };
}

impl<L: Layout> Reader<L> {
    read_methods!(get_batch);

    /// Visit the entries of `count` buckets from bucket `start` (wrapping) while the writer keeps
    /// writing: a copy of the table for a checkpoint, taken without stopping its owner. Every
    /// entry visited is one some bucket held at some instant (each bucket is read under the
    /// version protocol), but the scan as a whole is not one instant: an entry written after its
    /// bucket was visited is not seen, and an entry a cuckoo path moves backwards across the
    /// scan position can be missed (or seen twice when moved forwards) — compare
    /// [`moved`](Self::moved) before and after to know that none was. Returns the bucket to
    /// continue from.
    pub fn scan_range(
        &self,
        start: usize,
        count: usize,
        f: impl FnMut(&L::Key, &L::Value),
    ) -> usize {
        self.table.scan_range(start, count, f)
    }

    /// Number of buckets (the unit of [`scan_range`](Self::scan_range)).
    pub fn buckets(&self) -> usize {
        self.table.n_buckets()
    }

    /// Entries the writer has moved along cuckoo paths since the table was made: unchanged
    /// across a [`scan_range`](Self::scan_range), the scan missed no entry present throughout.
    pub fn moved(&self) -> u64 {
        self.table.moved()
    }
}

impl<L: Layout> Writer<L> {
    read_methods!(owner_get_batch);

    /// Insert `key` with `value`, or overwrite its value if present (returning the old one).
    /// On error nothing changed: [`InsertError::Full`] when no cuckoo path exists.
    pub fn insert(
        &mut self,
        key: L::Key,
        value: L::Value,
    ) -> Result<Option<L::Value>, InsertError> {
        self.table.insert(&mut self.search, &key, &value)
    }

    /// Insert or overwrite with a bounded cost, for tables that must stay fast when full (a
    /// connection table under a SYN flood: an insert that searches the full 4096-bucket cuckoo
    /// space costs about a hundred times one that finds room). When neither of the key's buckets
    /// has a free slot, the first entry of those two buckets (in bucket, then slot order) that
    /// `evictable` accepts is replaced; otherwise the cuckoo path search visits at most
    /// `max_nodes` buckets (2: the key's own buckets only, no search; the table's own
    /// `max_search_nodes` caps it). On [`InsertError::Full`] nothing changed.
    pub fn insert_bounded(
        &mut self,
        key: L::Key,
        value: L::Value,
        max_nodes: usize,
        mut evictable: impl FnMut(&L::Key, &L::Value) -> bool,
    ) -> Result<Placed<L::Key, L::Value>, InsertError> {
        self.table
            .insert_bounded(&mut self.search, &key, &value, max_nodes, &mut evictable)
    }

    /// Prefetch the two candidate buckets of `key`, to be inserted or updated a little later: a
    /// bulk load that prefetches a few keys ahead of its inserts overlaps their cache misses.
    #[inline]
    pub fn prefetch(&self, key: L::Key) {
        self.table.prefetch_key(&key)
    }

    /// Overwrite the value of a present key in place; `Ok(None)` if the key is absent.
    pub fn update(
        &mut self,
        key: L::Key,
        value: L::Value,
    ) -> Result<Option<L::Value>, InsertError> {
        self.table.update(&key, &value)
    }

    /// Remove `key`, returning its value if it was present.
    pub fn remove(&mut self, key: L::Key) -> Option<L::Value> {
        self.table.remove(&key)
    }

    /// Visit `count` buckets starting at bucket `start` (wrapping), removing entries for which `keep`
    /// returns false. Returns the bucket to continue from, so expiry or aging can walk the table a
    /// slice at a time.
    pub fn retain_range(
        &mut self,
        start: usize,
        count: usize,
        keep: impl FnMut(&L::Key, &L::Value) -> bool,
    ) -> usize {
        self.table.retain_range(start, count, keep)
    }

    /// Entries moved along cuckoo paths by this writer so far, and the longest path executed.
    pub fn displacements(&self) -> (u64, usize) {
        (self.search.moves, self.search.longest)
    }

    /// Where the entries sit: how many in their first candidate bucket and how many in their
    /// second. Scans the whole table (a statistic for operators and benchmarks, not for the data
    /// path).
    pub fn placement(&self) -> Placement {
        let (first, second) = self.table.placement();
        Placement { first, second }
    }

    /// Number of buckets (the unit of [`retain_range`](Self::retain_range)).
    pub fn buckets(&self) -> usize {
        self.table.n_buckets()
    }

    /// The two candidate buckets of `key` (for tests that construct collisions); `None` if the key
    /// does not fit the layout.
    #[doc(hidden)]
    pub fn candidate_buckets(&self, key: L::Key) -> Option<(usize, usize)> {
        self.table.candidate_buckets(&key)
    }

    /// A new reader handle.
    pub fn reader(&self) -> Reader<L> {
        Reader {
            table: self.table.clone(),
        }
    }
}
