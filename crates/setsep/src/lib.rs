//! SetSep: the compact global partition table of *ScaleBricks* (Zhou et al., SIGCOMM 2015, §4–5;
//! evaluated in §6.1, Table 1 and Fig. 7).
//!
//! Layer: **tables** (pure: no I/O, no clock, no allocation on lookups).
//!
//! A SetSep table is a *static function*: it maps every key of a known set to a small value (in
//! ScaleBricks, the id of the node that owns the key, `log2(nodes)` bits) without storing the keys,
//! in about `0.5 + 1.5·v` bits per key for `v`-bit values. A key outside the set gets an arbitrary
//! value. Two levels:
//!
//! * **Level 1, key → group.** A key hashes to a block and to a bin of that block; each bin picks one
//!   of four candidate groups with two stored bits (0.5 bit per key at 4 keys per bin), chosen at
//!   construction so that groups hold about 16 keys each (`balance.rs`).
//! * **Level 2, per group and value bit.** A hash index `i` of `x` bits and an array `A` of `y` bits
//!   such that every key of the group finds its value bit at `A[h_i(key) mod y]` (`search.rs`). The
//!   default is the paper's "16+8" (24 bits per 16 keys = 1.5 bits per key per value bit).
//!   Groups for which no index exists go, whole, to a small exact **fallback** table (a fp-cuckoo
//!   map), marked by a reserved index value; only keys of such groups ever probe it.
//!
//! A lookup hashes once, reads one block — one cache line for 1- and 2-bit values, see
//! `geometry.rs` for this deviation from the paper's layout — and per value bit computes one 32-bit
//! multiply and reads one bit. [`SetSep::get_batch`] hashes a whole batch and prefetches every block
//! first (dynamic batching: any batch length).
//!
//! **Updates** ([`Updater`]): the updater keeps the keys, so adding or changing one key rebuilds only
//! its group (often it only flips one array bit); it applies each change to any number of
//! **replicas** (one per cluster node) while their readers keep reading. Readers never take a lock.
//!
//! **Guarantees.** Every key of the set maps to its value (including keys in the fallback table),
//! before and after any sequence of updates; an update changes the value of no other key of the set;
//! a concurrent reader sees each block either wholly before or wholly after an update. Placement uses
//! fp-hash's pinned hashes, so the same keys, values, seed and settings give the same table bytes
//! on every machine and for any number of construction threads (golden vectors in the tests).
//! Failures are error values: a value wider than `value_bits`, two different values for one key, a
//! full fallback table.
//!
//! # Example
//!
//! ```
//! use fp_setsep::{Config, SetSep, Updater};
//!
//! // 10 000 MAC addresses, each owned by one of 4 nodes (2-bit values).
//! let keys: Vec<u64> = (0..10_000u64).map(|i| 0x0200_0000_0000 | i).collect();
//! let owners: Vec<u16> = keys.iter().map(|k| (k % 4) as u16).collect();
//! let (table, stats) = fp_setsep::build(&Config::new(2), &keys, &owners).unwrap();
//! assert!(keys.iter().zip(&owners).all(|(&k, &o)| table.get(k) == o));
//! println!("{} ({} fallback groups)", table.stats(), stats.fallback_groups);
//!
//! // Batched lookup.
//! let mut out = [0u16; 3];
//! table.get_batch(&keys[..3], &mut out);
//! assert_eq!(out, [0, 1, 2]);
//!
//! // An updatable table with a replica per node; moving one key touches one group.
//! let (mut up, node0) = Updater::build(&Config::new(2).capacity(20_000), &keys, &owners).unwrap();
//! let node1: SetSep = up.replica().unwrap();
//! up.insert(keys[7], 0).unwrap();
//! assert_eq!((node0.get(keys[7]), node1.get(keys[7])), (0, 0));
//! assert_eq!(node1.get(keys[8]), owners[8]);
//! ```
#![deny(unsafe_code)]

mod arch;
mod balance;
mod block;
mod build;
mod geometry;
mod search;
mod sync;
mod table;
mod update;

pub use arch::{isa, Isa};
pub use block::SolveStats;
pub use fp_mem::{PageKind, PagePolicy};
pub use table::{SetSep, Stats, CHUNK};
pub use update::{Change, UpdateStats, Updater};

/// Construction settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// Bits per value `v` (1..=16): a node id of `log2(nodes)` bits in ScaleBricks.
    pub value_bits: u8,
    /// Bits of the hash-function index `x` (1..=16); one index value is reserved to mark fallback
    /// groups. More bits: more tries allowed, fewer fallbacks, slower worst case.
    pub index_bits: u8,
    /// Bits of each group's array `y`: 2, 4, 8, 16 or 32 (a power of two: the position is the top bits
    /// of a 32-bit product). More bits: fewer tries, more space.
    pub array_bits: u8,
    /// Target keys per group (4..=48, default 16): with `x + y` this sets the space,
    /// `0.5 + v·(x+y)/keys_per_group` bits per key.
    pub keys_per_group: f64,
    /// Hash seed (part of the format: every replica must use the same).
    pub seed: u64,
    /// Construction threads (the table is the same for any number).
    pub threads: usize,
    /// Size the table for this many keys (for later inserts); default: the number of keys built.
    pub capacity: Option<usize>,
    /// Page policy of the blocks.
    pub pages: PagePolicy,
}

impl Config {
    /// The paper's default "16+8" setting for `value_bits`-bit values.
    pub fn new(value_bits: u8) -> Self {
        Config {
            value_bits,
            index_bits: 16,
            array_bits: 8,
            keys_per_group: 16.0,
            seed: 0x5ca1_eb71_c4b5_0001,
            threads: 1,
            capacity: None,
            pages: PagePolicy::Auto,
        }
    }

    /// Choose the "x+y" setting: `x`-bit index, `y`-bit array.
    pub fn setting(mut self, x: u8, y: u8) -> Self {
        self.index_bits = x;
        self.array_bits = y;
        self
    }

    /// Set the seed.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Set the number of construction threads.
    pub fn threads(mut self, threads: usize) -> Self {
        self.threads = threads;
        self
    }

    /// Size for `n` keys.
    pub fn capacity(mut self, n: usize) -> Self {
        self.capacity = Some(n);
        self
    }

    pub(crate) fn validate(&self) -> Result<(), Error> {
        let bad = |field: &'static str, value: String, why: &'static str| {
            Err(Error::Config { field, value, why })
        };
        if !(1..=16).contains(&self.value_bits) {
            return bad(
                "value_bits",
                self.value_bits.to_string(),
                "must be in 1..=16",
            );
        }
        if !(1..=16).contains(&self.index_bits) {
            return bad(
                "index_bits",
                self.index_bits.to_string(),
                "must be in 1..=16",
            );
        }
        if ![2, 4, 8, 16, 32].contains(&self.array_bits) {
            return bad(
                "array_bits",
                self.array_bits.to_string(),
                "must be 2, 4, 8, 16 or 32",
            );
        }
        if !(4.0..=48.0).contains(&self.keys_per_group) {
            return bad(
                "keys_per_group",
                self.keys_per_group.to_string(),
                "must be in 4..=48",
            );
        }
        if self.threads == 0 {
            return bad("threads", "0".into(), "must be at least 1");
        }
        Ok(())
    }
}

/// Why a table could not be built or updated.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A setting is out of range.
    #[error("setsep config: {field} = {value}: {why}")]
    Config {
        field: &'static str,
        value: String,
        why: &'static str,
    },
    /// `keys` and `values` differ in length.
    #[error("setsep build: {keys} keys but {values} values")]
    Lengths { keys: usize, values: usize },
    /// A value does not fit `value_bits`.
    #[error("setsep: value {value} of key {key:#x} does not fit {bits} bits")]
    ValueTooWide { key: u64, value: u16, bits: u32 },
    /// The same key was given two different values.
    #[error("setsep build: key {key:#x} given two different values")]
    ConflictingValues { key: u64 },
    /// The fallback table has no room left (too many groups without a solution).
    #[error("setsep: fallback table full ({capacity} entries); use more index or array bits or a larger capacity")]
    FallbackFull { capacity: usize },
    /// Memory for the blocks could not be mapped.
    #[error("setsep memory: {0}")]
    Memory(#[from] fp_mem::MemError),
    /// The fallback table could not be created.
    #[error("setsep fallback table: {0}")]
    Fallback(#[from] fp_cuckoo::Error),
}

/// The fallback table's settings.
pub(crate) fn fallback_config(capacity: usize, seed: u64) -> fp_cuckoo::Config {
    fp_cuckoo::Config::with_capacity(capacity)
        .seed(seed ^ 0xFA11_BAC4)
        .pages(PagePolicy::Normal)
}

/// Build a static table mapping `keys[i]` to `values[i]`; returns a reader (clone it freely) and the
/// construction counters. The keys are not kept: for updates use [`Updater::build`].
pub fn build(cfg: &Config, keys: &[u64], values: &[u16]) -> Result<(SetSep, SolveStats), Error> {
    let capacity = cfg.capacity.unwrap_or(0).max(keys.len());
    let geo = geometry::Geometry::new(cfg, capacity)?;
    let built = build::build_blocks(&geo, keys, values, cfg.threads, cfg.pages, false)?;
    let fallback = if built.fallback.is_empty() {
        None
    } else {
        let fb_cfg = fallback_config(built.fallback.len() * 5 / 4 + 64, cfg.seed);
        let (mut fb, reader) = fp_cuckoo::GeneralMap::<u64, u16>::new(&fb_cfg)?;
        for &(k, v) in &built.fallback {
            match fb.get(k) {
                Some(old) if old != v => return Err(Error::ConflictingValues { key: k }),
                Some(_) => {}
                None => {
                    fb.insert(k, v).map_err(|_| Error::FallbackFull {
                        capacity: fb_cfg.capacity,
                    })?;
                }
            }
        }
        Some(reader)
    };
    Ok((
        SetSep {
            shared: sync::Arc::new(built.shared),
            fallback,
        },
        built.stats,
    ))
}
