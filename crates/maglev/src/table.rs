//! The immutable lookup table: lookup, digest, diff.
//!
//! A [`Table`] is built once, off the data path, and never changes. The pipeline publishes a new
//! one by swapping an `Arc<Table>` pointer, so a packet sees either the old table or the new one,
//! never a half-built one. Lookup is one multiply-based modulo and one `u16` load.
//!
//! # Slot of a hash
//!
//! `slot(h) = fold(h) mod M` with `fold(h) = (h ^ (h >> 32)) as u32`. Folding first makes every one
//! of the 64 hash bits count (a 32-bit hash such as CRC32C zero-extended works as well as a full
//! 64-bit one), and the modulo is exact, computed without a division by Lemire's "fastmod"
//! (`c = ⌈2^64 / M⌉`, `slot = ((c·x mod 2^64) · M) >> 64`, exact for every 32-bit `x` and `M`).
//! Alternative considered: Lemire's multiply-shift reduction (`fp_hash::reduce`), one multiply
//! cheaper but it uses only the high bits, so a weak or narrow hash would collapse onto few slots,
//! and it would correlate with steering that also uses the high bits. The slot function is part
//! of the cross-balancer contract and pinned by a golden test.
//!
//! # Digest
//!
//! [`Table::digest`] is a stable 64-bit fingerprint of everything that decides forwarding: the
//! size, the canonical backends (names and weights) and every entry. Balancers that agree on the
//! digest send every hash to the same backend name. It is computed once at build time with the
//! pinned [`fp_hash`] functions over a fixed little-endian encoding (see [`Table::digest`]); it is
//! a consistency check, not a MAC.
//!
//! # Diff
//!
//! [`Table::diff`] compares two tables of the same size slot by slot *by backend name* (canonical
//! indices shift when the backend set changes), and splits the changed slots by whether their old
//! backend is gone (unavoidable moves) or still present (Maglev's extra disruption).

use crate::backend::Canonical;
use crate::{Backend, Config, Error};

/// An immutable Maglev (or baseline) lookup table: `M` slots, each naming a backend.
///
/// Cheap to share: wrap it in an `Arc` and swap the pointer to publish a rebuild. `Send + Sync`.
/// `Debug` prints a summary (size, backends, digest), not the `M` entries.
#[derive(Clone)]
pub struct Table {
    size: u32,
    /// `⌈2^64 / size⌉` for the division-free modulo.
    fastmod: u64,
    entries: Box<[u16]>,
    backends: Box<[Backend]>,
    input_index: Box<[u32]>,
    digest: u64,
}

const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Table>();
};

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table")
            .field("size", &self.size)
            .field("backends", &self.backends.len())
            .field("digest", &format_args!("{:#018x}", self.digest))
            .finish()
    }
}

/// Seed of the table digest ("fpdigest" in ASCII). Part of the cross-balancer contract.
const DIGEST_SEED: u64 = 0x6670_6469_6765_7374;
/// Entries are digested in chunks of this many 64-bit words (4 entries per word).
const DIGEST_CHUNK_WORDS: usize = 256;

impl Table {
    /// Build a Maglev table: validate, sort backends by name, hash names to permutations, and run
    /// Pseudocode 1 with weighted turns. The result depends only on `cfg` and the *set* of
    /// backends (names and weights), not on their order in `backends`.
    pub fn build(cfg: &Config, backends: &[Backend]) -> Result<Table, Error> {
        crate::Method::build(&crate::Maglev, cfg, backends)
    }

    /// Assemble a table from populated entries (used by every [`crate::Method`]).
    pub(crate) fn from_parts(size: u32, canonical: Canonical, entries: Vec<u16>) -> Table {
        assert_eq!(entries.len(), size as usize);
        debug_assert!(entries
            .iter()
            .all(|&e| (e as usize) < canonical.backends.len()));
        let Canonical {
            backends,
            input_index,
        } = canonical;
        let digest = digest(size, &backends, &entries);
        Table {
            size,
            fastmod: u64::MAX / size as u64 + 1,
            entries: entries.into_boxed_slice(),
            backends: backends.into_boxed_slice(),
            input_index: input_index.into_boxed_slice(),
            digest,
        }
    }

    /// The slot a 64-bit flow hash maps to: `fold(hash) mod M` (see the module doc).
    #[inline(always)]
    pub fn slot(&self, hash: u64) -> usize {
        let x = (hash ^ (hash >> 32)) as u32 as u64;
        let low = self.fastmod.wrapping_mul(x);
        ((low as u128 * self.size as u128) >> 64) as usize
    }

    /// The canonical index of the backend for a flow hash. Index [`Table::backends`] with it (or
    /// map it back to the caller's order with [`Table::input_index`]).
    #[inline(always)]
    pub fn lookup(&self, hash: u64) -> u16 {
        self.entries[self.slot(hash)]
    }

    /// The backend for a flow hash.
    #[inline]
    pub fn lookup_backend(&self, hash: u64) -> &Backend {
        &self.backends[self.lookup(hash) as usize]
    }

    /// The backend for a flow hash as a position in the slice given to the builder (one more
    /// load from a small array than [`Table::lookup`]), so a caller can keep its own per-backend
    /// data (addresses, counters) in its own order.
    #[inline(always)]
    pub fn lookup_input(&self, hash: u64) -> usize {
        self.input_index[self.lookup(hash) as usize] as usize
    }

    /// Hint the CPU to fetch the entry for `hash` (for batched lookups: prefetch the whole batch,
    /// then look up). A no-op where the platform has no prefetch.
    #[inline(always)]
    pub fn prefetch(&self, hash: u64) {
        fp_hash::prefetch_read(self.entries[self.slot(hash)..].as_ptr());
    }

    /// Look up a batch: `out[i] = lookup(hashes[i])`. Slots are computed for the whole batch
    /// before any entry is read, so the loads overlap.
    #[inline]
    pub fn lookup_batch(&self, hashes: &[u64], out: &mut [u16]) {
        assert_eq!(hashes.len(), out.len(), "one output per hash");
        const CHUNK: usize = 32;
        let mut slots = [0usize; CHUNK];
        for (hs, os) in hashes.chunks(CHUNK).zip(out.chunks_mut(CHUNK)) {
            for (s, &h) in slots.iter_mut().zip(hs) {
                *s = self.slot(h);
            }
            for (o, &s) in os.iter_mut().zip(&slots) {
                *o = self.entries[s];
            }
        }
    }

    /// The table size `M`.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// All `M` entries (canonical backend indices).
    pub fn entries(&self) -> &[u16] {
        &self.entries
    }

    /// The backends in canonical order (sorted by name); entries index this slice.
    pub fn backends(&self) -> &[Backend] {
        &self.backends
    }

    /// Position, in the slice given to the builder, of canonical backend `idx`.
    pub fn input_index(&self, idx: u16) -> usize {
        self.input_index[idx as usize] as usize
    }

    /// Canonical index of the backend called `name`, if it is in the table.
    pub fn index_of(&self, name: &str) -> Option<u16> {
        self.backends
            .binary_search_by(|b| b.name.as_bytes().cmp(name.as_bytes()))
            .ok()
            .map(|i| i as u16)
    }

    /// Number of entries owned by each canonical backend.
    pub fn counts(&self) -> Vec<u32> {
        counts(&self.entries, self.backends.len())
    }

    /// The table's stable 64-bit digest (computed at build time).
    ///
    /// Definition (pinned by a golden test): with `H = fp_hash::hash_u64`,
    /// `h = H(H(0x6670646967657374, M), N)`; then for each canonical backend
    /// `h = H(h ^ hash_bytes(0x6670646967657374, name), weight)`; then the entries, packed four to a
    /// little-endian `u64` (the last word zero-padded), in chunks of 256 words:
    /// `h = hash_words(h, chunk)`.
    pub fn digest(&self) -> u64 {
        self.digest
    }

    /// Compare with `other` slot by slot, by backend name. Both tables must have the same size.
    pub fn diff(&self, other: &Table) -> Result<TableDiff, Error> {
        if self.size != other.size {
            return Err(Error::SizeMismatch {
                a: self.size,
                b: other.size,
            });
        }
        // Map each of our canonical indices to other's (or NONE if absent). Both lists are sorted
        // by name, so one merge pass does it.
        const NONE: u32 = u32::MAX;
        let mut map = vec![NONE; self.backends.len()];
        let (mut i, mut j) = (0, 0);
        while i < self.backends.len() && j < other.backends.len() {
            match self.backends[i]
                .name
                .as_bytes()
                .cmp(other.backends[j].name.as_bytes())
            {
                std::cmp::Ordering::Less => i += 1,
                std::cmp::Ordering::Greater => j += 1,
                std::cmp::Ordering::Equal => {
                    map[i] = j as u32;
                    i += 1;
                    j += 1;
                }
            }
        }
        let mut d = TableDiff {
            size: self.size,
            ..TableDiff::default()
        };
        for (&a, &b) in self.entries.iter().zip(other.entries.iter()) {
            let m = map[a as usize];
            if m == NONE {
                d.from_removed += 1;
            } else if m != b as u32 {
                d.from_kept += 1;
            }
        }
        Ok(d)
    }
}

/// How two tables of the same size differ.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TableDiff {
    /// Table size `M`.
    pub size: u32,
    /// Slots whose old backend is absent from the new table (they had to move).
    pub from_removed: u32,
    /// Slots whose old backend is still present but which now name another backend: moves to a
    /// new backend, weight changes, and Maglev's collateral disruption.
    pub from_kept: u32,
}

impl TableDiff {
    /// All changed slots (the "Maglev table changes per update" metric).
    pub fn changed(&self) -> u32 {
        self.from_removed + self.from_kept
    }

    /// Changed slots as a fraction of the table.
    pub fn changed_fraction(&self) -> f64 {
        self.changed() as f64 / self.size as f64
    }
}

/// Entries per backend for `n` backends.
pub(crate) fn counts(entries: &[u16], n: usize) -> Vec<u32> {
    let mut c = vec![0u32; n];
    for &e in entries {
        c[e as usize] += 1;
    }
    c
}

fn digest(size: u32, backends: &[Backend], entries: &[u16]) -> u64 {
    use fp_hash::{hash_bytes, hash_u64, hash_words};
    let mut h = hash_u64(hash_u64(DIGEST_SEED, size as u64), backends.len() as u64);
    for b in backends {
        h = hash_u64(
            h ^ hash_bytes(DIGEST_SEED, b.name.as_bytes()),
            b.weight as u64,
        );
    }
    let mut words = [0u64; DIGEST_CHUNK_WORDS];
    for chunk in entries.chunks(4 * DIGEST_CHUNK_WORDS) {
        let mut n = 0;
        for quad in chunk.chunks(4) {
            let mut w = 0u64;
            for (k, &e) in quad.iter().enumerate() {
                w |= (e as u64) << (16 * k);
            }
            words[n] = w;
            n += 1;
        }
        h = hash_words(h, &words[..n]);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_is_fold_mod_m() {
        let mut x = 0x1234_5678_9abc_def0u64;
        for m in [2u32, 3, 7, 65_537, 655_373, 4_294_967_291] {
            let t = Table {
                size: m,
                fastmod: u64::MAX / m as u64 + 1,
                entries: Box::new([]),
                backends: Box::new([]),
                input_index: Box::new([]),
                digest: 0,
            };
            for h in [
                0u64,
                1,
                u64::MAX,
                1 << 32,
                (1 << 32) - 1,
                m as u64,
                m as u64 - 1,
            ] {
                assert_eq!(t.slot(h) as u64, ((h ^ (h >> 32)) as u32 as u64) % m as u64);
            }
            for _ in 0..100_000 {
                x = fp_hash::splitmix64(x);
                assert_eq!(t.slot(x) as u64, ((x ^ (x >> 32)) as u32 as u64) % m as u64);
            }
        }
    }
}
