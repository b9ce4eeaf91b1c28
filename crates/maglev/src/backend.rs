//! Backends, table configuration and the canonical (order-independent) backend list.
//!
//! Pseudocode 1 *does* depend on the order in which backends take turns: whoever comes first wins a
//! contested slot, so the same set given in two orders yields two different tables (the test
//! `turn_order_matters_for_raw_populate` shows it). Two balancers fed the same config by different
//! paths (a config file, an RPC, a health-check event) must nevertheless build byte-identical tables
//! (scale-out: every balancer of a cluster must pick the same backend for a flow). Every method in this crate therefore first puts the backends into a
//! *canonical order* — sorted by the bytes of their names — and the table indexes that order. The
//! caller's order is remembered only so that [`crate::Table::input_index`] can map back.

use crate::Error;

/// One backend as the caller describes it: a unique name and a weight.
///
/// The name is what is hashed (§3.4: "each backend is assigned a unique name"), so it must be the
/// same on every balancer; the backend's address rendered as text (`"10.0.0.7:80"`) or a configured
/// name both work. Weights are relative: a backend of weight 2 gets twice the table entries of a
/// backend of weight 1.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Backend {
    pub name: String,
    pub weight: u32,
}

impl Backend {
    /// A backend of weight 1.
    pub fn new(name: impl Into<String>) -> Self {
        Backend {
            name: name.into(),
            weight: 1,
        }
    }

    /// A backend with the given weight (must be at least 1 when a table is built).
    pub fn weighted(name: impl Into<String>, weight: u32) -> Self {
        Backend {
            name: name.into(),
            weight,
        }
    }
}

/// A validated table configuration: the table size `M` (prime) and the cluster seed.
///
/// Every balancer of a cluster must use the same `size` and `seed` to build the same tables. The
/// seed defaults to 0: Maglev placement is not a hash-flooding surface (a client picks the 5-tuple,
/// not the backend names), and a random per-process default would silently break cross-balancer
/// consistency. Set it explicitly to decorrelate clusters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Config {
    size: u32,
    seed: u64,
}

impl Config {
    /// The paper's default table size (§5.3: "we use 65537 as the default table size").
    pub const DEFAULT_SIZE: u32 = 65_537;
    /// Largest accepted table size: 2^28 entries (512 MiB of `u16`), far beyond any sensible VIP
    /// (the paper stops at 655373 because population time grows as `M log M`).
    pub const MAX_SIZE: u32 = 1 << 28;

    /// Validate a size and seed. The size must be a prime in `2..=MAX_SIZE`; the error names the
    /// field and the nearest primes.
    pub fn new(size: u64, seed: u64) -> Result<Config, Error> {
        if !(2..=Self::MAX_SIZE as u64).contains(&size) {
            return Err(Error::SizeOutOfRange {
                size,
                max: Self::MAX_SIZE,
            });
        }
        if !crate::is_prime(size) {
            return Err(Error::SizeNotPrime {
                size,
                below: crate::prime::prev_prime(size),
                above: crate::next_prime(size).filter(|&p| p <= Self::MAX_SIZE as u64),
            });
        }
        Ok(Config {
            size: size as u32,
            seed,
        })
    }

    /// The table size `M`.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// The cluster seed mixed into every placement hash.
    pub fn seed(&self) -> u64 {
        self.seed
    }
}

impl Default for Config {
    /// `M = 65537`, seed 0.
    fn default() -> Self {
        Config {
            size: Self::DEFAULT_SIZE,
            seed: 0,
        }
    }
}

/// Most backends one table can hold: entries are `u16`, and `u16::MAX` is never a backend index, so
/// callers can use it as a "no backend" marker (e.g. in a connection table).
pub const MAX_BACKENDS: usize = u16::MAX as usize;

/// Backends in canonical order (sorted by name bytes) with their positions in the caller's list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Canonical {
    pub(crate) backends: Vec<Backend>,
    pub(crate) input_index: Vec<u32>,
}

impl Canonical {
    /// Validate `backends` for a table of `cfg.size()` entries and sort them by name.
    ///
    /// Errors: no backends, more than [`MAX_BACKENDS`], an empty or duplicate name, a zero weight,
    /// or fewer table entries than backends (some backend would get no entry).
    pub fn new(cfg: &Config, backends: &[Backend]) -> Result<Canonical, Error> {
        if backends.is_empty() {
            return Err(Error::NoBackends);
        }
        if backends.len() > MAX_BACKENDS {
            return Err(Error::TooManyBackends {
                count: backends.len(),
                max: MAX_BACKENDS,
            });
        }
        if (cfg.size() as usize) < backends.len() {
            return Err(Error::SizeTooSmall {
                size: cfg.size(),
                backends: backends.len(),
            });
        }
        for (i, b) in backends.iter().enumerate() {
            if b.name.is_empty() {
                return Err(Error::EmptyName { index: i });
            }
            if b.weight == 0 {
                return Err(Error::ZeroWeight {
                    name: b.name.clone(),
                });
            }
        }
        let mut order: Vec<u32> = (0..backends.len() as u32).collect();
        order.sort_unstable_by(|&a, &b| {
            backends[a as usize]
                .name
                .as_bytes()
                .cmp(backends[b as usize].name.as_bytes())
        });
        for w in order.windows(2) {
            if backends[w[0] as usize].name == backends[w[1] as usize].name {
                let (first, second) = (w[0].min(w[1]) as usize, w[0].max(w[1]) as usize);
                return Err(Error::DuplicateName {
                    name: backends[first].name.clone(),
                    first,
                    second,
                });
            }
        }
        Ok(Canonical {
            backends: order
                .iter()
                .map(|&i| backends[i as usize].clone())
                .collect(),
            input_index: order,
        })
    }

    /// The backends, sorted by name.
    pub fn backends(&self) -> &[Backend] {
        &self.backends
    }

    /// `input_index()[i]` is the position in the caller's slice of canonical backend `i`.
    pub fn input_index(&self) -> &[u32] {
        &self.input_index
    }

    /// Number of backends.
    pub fn len(&self) -> usize {
        self.backends.len()
    }

    /// Never true for a validated list (kept for clippy's `len_without_is_empty`).
    pub fn is_empty(&self) -> bool {
        self.backends.is_empty()
    }

    /// Whether all weights are equal (then weighted turns reduce to plain round robin).
    pub(crate) fn uniform_weights(&self) -> bool {
        let w0 = self.backends[0].weight;
        self.backends.iter().all(|b| b.weight == w0)
    }
}
