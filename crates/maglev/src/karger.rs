//! Karger consistent hashing (a ring with virtual nodes), the first baseline of §5.3.
//!
//! Each backend places `vnodes` points on a 64-bit ring; a position belongs to the first point at
//! or after it (wrapping). The paper sets "the number of views to be 1000"; we read that as 1000
//! virtual nodes per backend (the knob of a ring that trades memory for balance) and default to it.
//! With weights, backend `i` gets `vnodes · w_i` points (a backend's point count depends on its own
//! weight only, so removing a backend never moves the others' points; weights are meant to be small
//! integers here, and the ring is capped at 2^28 points).
//!
//! The ring is turned into the same kind of `M`-slot table as Maglev's: slot `j` is the ring owner
//! of position `⌊j · 2^64 / M⌋`, i.e. the table is the ring sampled at `M` evenly spaced points, so
//! lookups cost the same as Maglev's and the comparison is of placement only. (Sampling at hashed
//! positions instead would add multinomial noise on top of the ring's own imbalance.)
//!
//! Points are `hash_u64(hash_bytes(seed', name), v)` for `v < vnodes`; equal points are ordered by
//! canonical backend index, so the table is deterministic.

use crate::backend::Canonical;
use crate::method::{Method, Prepared};
use crate::{Backend, Config, Error};

const TAG_RING: u64 = 0x6b61_7267_6572_7269; // "kargerri"

/// Ring consistent hashing with `vnodes` virtual nodes per unit of weight.
#[derive(Clone, Copy, Debug)]
pub struct Karger {
    pub vnodes: u32,
}

impl Default for Karger {
    /// 1000 virtual nodes per backend, as in §5.3.
    fn default() -> Self {
        Karger { vnodes: 1000 }
    }
}

/// Most ring points accepted (memory guard: 12 bytes each).
const MAX_POINTS: u64 = 1 << 28;

/// A built ring.
#[derive(Clone, Debug)]
pub struct KargerPrepared {
    size: u32,
    canonical: Canonical,
    /// Ring positions, sorted ascending (ties by owner).
    points: Vec<u64>,
    /// Owner (canonical index) of each point.
    owners: Vec<u16>,
}

impl KargerPrepared {
    /// Number of points on the ring.
    pub fn ring_len(&self) -> usize {
        self.points.len()
    }

    /// Look a 64-bit position up on the ring directly (binary search, no table): the canonical
    /// index of the first point at or after `pos`, wrapping. This is how a ring is used without a
    /// lookup table; the benchmark compares its cost with a Maglev table lookup.
    #[inline]
    pub fn ring_lookup(&self, pos: u64) -> u16 {
        let r = self.points.partition_point(|&p| p < pos);
        self.owners[if r == self.points.len() { 0 } else { r }]
    }
}

impl Method for Karger {
    type Prepared = KargerPrepared;

    fn name(&self) -> &'static str {
        "karger"
    }

    fn prepare(&self, cfg: &Config, backends: &[Backend]) -> Result<KargerPrepared, Error> {
        let canonical = Canonical::new(cfg, backends)?;
        let per: Vec<u64> = canonical
            .backends()
            .iter()
            .map(|b| self.vnodes as u64 * b.weight as u64)
            .collect();
        let total: u64 = per.iter().sum();
        if self.vnodes == 0 || total > MAX_POINTS {
            return Err(Error::BadVnodes {
                vnodes: self.vnodes,
                points: total,
                max: MAX_POINTS,
            });
        }
        let seed = fp_hash::hash_u64(cfg.seed(), TAG_RING);
        let mut ring: Vec<(u64, u16)> = Vec::with_capacity(total as usize);
        for (i, b) in canonical.backends().iter().enumerate() {
            let key = fp_hash::hash_bytes(seed, b.name.as_bytes());
            ring.extend((0..per[i]).map(|v| (fp_hash::hash_u64(key, v), i as u16)));
        }
        ring.sort_unstable();
        let (points, owners) = ring.into_iter().unzip();
        Ok(KargerPrepared {
            size: cfg.size(),
            canonical,
            points,
            owners,
        })
    }
}

impl Prepared for KargerPrepared {
    fn canonical(&self) -> &Canonical {
        &self.canonical
    }

    fn size(&self) -> u32 {
        self.size
    }

    fn populate(&self, alive: &[bool]) -> Result<Vec<u16>, Error> {
        assert_eq!(alive.len(), self.canonical.len(), "one flag per backend");
        // The ring of the alive backends is the full ring with dead owners' points left out.
        let first_alive = self
            .owners
            .iter()
            .copied()
            .find(|&o| alive[o as usize])
            .ok_or(Error::NoBackends)?;
        let m = self.size as u64;
        let mut out = Vec::with_capacity(self.size as usize);
        let mut r = 0usize;
        // pos_j = ⌊j·2^64/M⌋, stepped without a 128-bit division per slot.
        let (step, rem) = ((1u128 << 64) / m as u128, (1u128 << 64) % m as u128);
        let (step, rem) = (step as u64, rem as u64);
        let (mut pos, mut frac) = (0u64, 0u64);
        for _ in 0..m {
            // First alive point at or after `pos`.
            while r < self.points.len() && (self.points[r] < pos || !alive[self.owners[r] as usize])
            {
                r += 1;
            }
            out.push(if r < self.points.len() {
                self.owners[r]
            } else {
                first_alive
            });
            pos = pos.wrapping_add(step);
            frac += rem;
            if frac >= m {
                frac -= m;
                pos = pos.wrapping_add(1);
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_owner_is_ring_successor() {
        let cfg = Config::new(101, 3).unwrap();
        let bs: Vec<Backend> = (0..5).map(|i| Backend::new(format!("k{i}"))).collect();
        let k = Karger { vnodes: 7 };
        let p = k.prepare(&cfg, &bs).unwrap();
        assert_eq!(p.ring_len(), 35);
        let t = p.populate(&[true; 5]).unwrap();
        for (j, &e) in t.iter().enumerate() {
            let pos = (((j as u128) << 64) / 101) as u64;
            assert_eq!(e, p.ring_lookup(pos), "slot {j}");
            let succ = p
                .points
                .iter()
                .position(|&x| x >= pos)
                .map(|r| p.owners[r])
                .unwrap_or(p.owners[0]);
            assert_eq!(e, succ, "slot {j}");
        }
    }

    #[test]
    fn weights_scale_vnodes() {
        let cfg = Config::new(101, 3).unwrap();
        let bs = [Backend::weighted("a", 4), Backend::weighted("b", 1)];
        let p = Karger { vnodes: 10 }.prepare(&cfg, &bs).unwrap();
        assert_eq!(p.ring_len(), 40 + 10);
    }
}
