//! Maglev consistent hashing: the load balancer's backend-selection table.
//!
//! Layer: **tables** (pure: no I/O, no clock, no logging; allocation only when a table is built).
//!
//! This crate implements *Maglev hashing* from Eisenbud et al., "Maglev: A Fast and Reliable
//! Software Network Load Balancer", NSDI 2016, §3.4 and Pseudocode 1, and the two methods §5.3
//! compares it with — Karger ring hashing ([`Karger`]) and rendezvous hashing ([`Rendezvous`]) —
//! behind one small trait ([`Method`]) so `flowplane-bench maglev` can reproduce Fig 11 (balance),
//! Fig 12 (disruption) and the population times.
//!
//! # How a table is built
//!
//! 1. The backends are validated and sorted by name ([`Canonical`]): the table depends on the *set*
//!    of backends, never on the order a config listed them in.
//! 2. Each name is hashed with two independent pinned hashes into `offset = h1 mod M` and
//!    `skip = h2 mod (M−1) + 1` ([`Permutation`]); `M` is prime ([`Config`] checks), so
//!    `offset + j·skip mod M` is a permutation of the slots — a preference list, generated on the
//!    fly, never stored.
//! 3. Backends take turns filling their most preferred empty slot until all `M` slots are full
//!    (Pseudocode 1). Weights change how often a backend gets a turn: turn `k` of a backend of
//!    weight `w` happens at virtual time `k/w` (see the [`populate`] module doc for the scheme,
//!    why, and its proven balance bound).
//!
//! A packet's flow hash `h` selects slot `fold(h) mod M` ([`Table::slot`]) and the slot names the
//! backend ([`Table::lookup`]): one multiply-based modulo and one `u16` load.
//!
//! # Guarantees
//!
//! * **Balance.** With equal weights every backend owns `⌊M/N⌋` or `⌈M/N⌉` slots, so with
//!   `M > 100·N` shares differ by less than 1 % of the average. With weights, backend `i` owns
//!   between `(M−N)·w_i/W` and `M·w_i/W + 1` slots (`W = Σ w`). Every backend owns at least one slot.
//! * **Determinism.** The same [`Config`] (size, seed) and the same set of names and weights give a
//!   byte-identical table on every machine and every version: the hashes are [`fp_hash`]'s pinned
//!   portable ones, and golden vectors in the tests pin permutations, tables and the
//!   [`Table::digest`] that balancers export so operators can check they agree.
//! * **Limited disruption.** Removing backends reassigns their slots and, unlike Karger and
//!   rendezvous hashing, moves a small share of other slots too (§5.3, Fig 12);
//!   [`Table::diff`] measures both parts. Connection tracking covers the rest (§3.3).
//! * **Immutable tables.** A [`Table`] never changes after it is built: rebuild off the data path
//!   and publish the new `Arc<Table>` with an atomic pointer swap.
//!
//! Errors are values ([`Error`]) that name the offending field or backend: a non-prime size, a
//! duplicate name, a zero weight, more backends than slots.
//!
//! # Example
//!
//! ```
//! use fp_maglev::{Backend, Config, Table};
//! use std::sync::Arc;
//!
//! let cfg = Config::new(65_537, 0x5eed)?; // M must be prime
//! let backends = vec![
//!     Backend::new("10.0.0.1:80"),
//!     Backend::new("10.0.0.2:80"),
//!     Backend::weighted("10.0.0.3:80", 2), // twice the share of the others
//! ];
//! let table = Arc::new(Table::build(&cfg, &backends)?);
//!
//! // Data path: flow hash → backend.
//! let flow_hash = fp_hash::hash_u64(1, 0x0a00_0001_1f90);
//! let b = table.lookup(flow_hash);
//! println!("flow goes to {}", table.backends()[b as usize].name);
//! assert_eq!(table.backends()[b as usize].name, backends[table.input_index(b)].name);
//!
//! // Shares: 1/4, 1/4, 1/2 of the slots, each within one slot of exact.
//! let counts = table.counts();
//! assert!(counts.iter().all(|&c| c >= 16_383 && c <= 32_770));
//!
//! // Order does not matter; the digest lets balancers compare tables.
//! let mut shuffled = backends.clone();
//! shuffled.reverse();
//! let same = Table::build(&cfg, &shuffled)?;
//! assert_eq!(same.entries(), table.entries());
//! assert_eq!(same.digest(), table.digest());
//!
//! // A backend fails: rebuild off the data path, measure the change, publish.
//! let fewer = Table::build(&cfg, &backends[1..])?;
//! let d = table.diff(&fewer)?;
//! assert_eq!(d.from_removed, counts[table.index_of("10.0.0.1:80").unwrap() as usize]);
//! println!("{} of {} slots changed ({} collateral)", d.changed(), d.size, d.from_kept);
//! # Ok::<(), fp_maglev::Error>(())
//! ```
//!
//! The paper's Table 1 (M = 7, three backends with (offset, skip) = (3, 4), (0, 2), (3, 1)), run
//! through Pseudocode 1 with [`populate::populate`]:
//!
//! ```
//! use fp_maglev::populate::{populate, Permutation};
//! let p = |offset, skip| Permutation { offset, skip };
//! let (b0, b1, b2) = (p(3, 4), p(0, 2), p(3, 1));
//! assert_eq!(populate(7, &[b0, b1, b2])?, [1, 0, 1, 0, 2, 2, 0]); // B1 B0 B1 B0 B2 B2 B0
//! assert_eq!(populate(7, &[b0, b2])?, [0, 0, 0, 0, 1, 1, 1]); // B1 removed: only row 6 also moves
//! # Ok::<(), fp_maglev::Error>(())
//! ```
#![deny(unsafe_code)]

mod backend;
pub mod karger;
pub mod method;
pub mod populate;
mod prime;
pub mod rendezvous;
mod table;

pub use backend::{Backend, Canonical, Config, MAX_BACKENDS};
pub use karger::Karger;
pub use method::{Method, Prepared};
pub use populate::{Maglev, Permutation};
pub use prime::{is_prime, next_prime, prev_prime};
pub use rendezvous::Rendezvous;
pub use table::{Table, TableDiff};

/// What can go wrong when configuring or building a table. Messages name the field or backend.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error(
        "maglev table `size` = {size} is not prime (Maglev's permutations need a prime size; \
         nearest primes: {below:?} below, {above:?} above)"
    )]
    SizeNotPrime {
        size: u64,
        below: Option<u64>,
        above: Option<u64>,
    },
    #[error("maglev table `size` = {size} is out of range (2..={max})")]
    SizeOutOfRange { size: u64, max: u32 },
    #[error(
        "maglev table `size` = {size} is smaller than the number of backends ({backends}): \
         some backends would get no entry (use a prime above 100 × backends)"
    )]
    SizeTooSmall { size: u32, backends: usize },
    #[error("no backends: a table needs at least one")]
    NoBackends,
    #[error("{count} backends exceed the maximum of {max} per table")]
    TooManyBackends { count: usize, max: usize },
    #[error("backend #{index}: `name` is empty (names are hashed and must be unique)")]
    EmptyName { index: usize },
    #[error("backend `name` {name:?} appears twice (backends #{first} and #{second}); names must be unique")]
    DuplicateName {
        name: String,
        first: usize,
        second: usize,
    },
    #[error(
        "backend {name:?}: `weight` must be at least 1 (leave a drained backend out of the set)"
    )]
    ZeroWeight { name: String },
    #[error("permutation #{index} (offset {offset}, skip {skip}) is invalid for size {size}: need offset < size and 1 <= skip < size")]
    BadPermutation {
        index: usize,
        offset: u32,
        skip: u32,
        size: u32,
    },
    #[error("karger `vnodes` = {vnodes} gives {points} ring points (need 1..={max})")]
    BadVnodes { vnodes: u32, points: u64, max: u64 },
    #[error("cannot compare tables of different sizes ({a} and {b} slots)")]
    SizeMismatch { a: u32, b: u32 },
}
