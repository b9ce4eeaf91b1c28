//! Rendezvous (highest random weight) hashing, the second baseline of §5.3.
//!
//! Slot `j` goes to the backend with the highest score `hash_u64(key_i, j)`, where
//! `key_i = hash_bytes(seed', name_i)`. With weights, the score is the standard logarithmic
//! weighted-HRW score `w_i / −ln(u)` with `u ∈ (0, 1)` taken from the same hash, which makes
//! backend `i` win a slot with probability `w_i / W`. (Floating point: fine for a baseline; the
//! unweighted score is pure integer: the top 53 bits of the hash.) Ties, practically impossible, go
//! to the lower canonical index.
//!
//! Populating costs `M · N` hashes, so a 655373-slot table over 1000 backends takes 655 M hashes.
//! When backends fail, only slots whose owner died change (the maximum over a subset that still
//! contains the old maximum is unchanged), so [`Prepared::populate_after_failure`] recomputes just
//! those slots; a test checks it equals a full repopulation.

use crate::backend::Canonical;
use crate::method::{Method, Prepared};
use crate::{Backend, Config, Error};

const TAG_HRW: u64 = 0x7265_6e64_657a_766f; // "rendezvo"

/// Rendezvous / highest-random-weight hashing.
#[derive(Clone, Copy, Debug, Default)]
pub struct Rendezvous;

/// Per-backend keys.
#[derive(Clone, Debug)]
pub struct RendezvousPrepared {
    size: u32,
    canonical: Canonical,
    keys: Vec<u64>,
    /// `Some(weights)` when weights differ.
    weights: Option<Vec<f64>>,
}

impl Method for Rendezvous {
    type Prepared = RendezvousPrepared;

    fn name(&self) -> &'static str {
        "rendezvous"
    }

    fn prepare(&self, cfg: &Config, backends: &[Backend]) -> Result<RendezvousPrepared, Error> {
        let canonical = Canonical::new(cfg, backends)?;
        let seed = fp_hash::hash_u64(cfg.seed(), TAG_HRW);
        let keys = canonical
            .backends()
            .iter()
            .map(|b| fp_hash::hash_bytes(seed, b.name.as_bytes()))
            .collect();
        let weights = (!canonical.uniform_weights()).then(|| {
            canonical
                .backends()
                .iter()
                .map(|b| b.weight as f64)
                .collect()
        });
        Ok(RendezvousPrepared {
            size: cfg.size(),
            canonical,
            keys,
            weights,
        })
    }
}

/// The alive backends grouped by weight (one group when weights are equal), members ascending.
struct Live {
    classes: Vec<(f64, Vec<u16>)>,
}

impl RendezvousPrepared {
    /// Owner of slot `j` among the `live` backends.
    ///
    /// Within a weight class the weighted score `w / −ln(u)` increases with `u`, i.e. with the
    /// hash, so each class's best member is found with integer compares and `ln` is evaluated once
    /// per class, not once per backend (the weighted benchmark has 4 classes and 1000 backends).
    #[inline]
    fn owner(&self, j: u64, live: &Live) -> u16 {
        let class_best = |members: &[u16]| {
            let mut best = (0u64, members[0]);
            for &i in members {
                // 53 bits: the part of the hash that becomes `u`.
                let s = fp_hash::hash_u64(self.keys[i as usize], j) >> 11;
                if s > best.0 {
                    best = (s, i);
                }
            }
            best
        };
        if let [(_, members)] = &live.classes[..] {
            return class_best(members).1;
        }
        let mut best = (f64::NEG_INFINITY, u16::MAX);
        for (w, members) in &live.classes {
            let (h, i) = class_best(members);
            // u in (0, 1): 53 bits plus a half step, never 0 or 1.
            let u = (h as f64 + 0.5) * (1.0 / (1u64 << 53) as f64);
            let score = w / -u.ln();
            if score > best.0 || (score == best.0 && i < best.1) {
                best = (score, i);
            }
        }
        best.1
    }

    fn live(&self, alive: &[bool]) -> Result<Live, Error> {
        assert_eq!(alive.len(), self.keys.len(), "one flag per backend");
        let mut classes: Vec<(f64, Vec<u16>)> = Vec::new();
        for i in (0..self.keys.len() as u16).filter(|&i| alive[i as usize]) {
            let w = self.weights.as_ref().map_or(1.0, |w| w[i as usize]);
            match classes.iter_mut().find(|(cw, _)| *cw == w) {
                Some((_, m)) => m.push(i),
                None => classes.push((w, vec![i])),
            }
        }
        if classes.is_empty() {
            return Err(Error::NoBackends);
        }
        Ok(Live { classes })
    }
}

impl Prepared for RendezvousPrepared {
    fn canonical(&self) -> &Canonical {
        &self.canonical
    }

    fn size(&self) -> u32 {
        self.size
    }

    fn populate(&self, alive: &[bool]) -> Result<Vec<u16>, Error> {
        let live = self.live(alive)?;
        Ok((0..self.size as u64)
            .map(|j| self.owner(j, &live))
            .collect())
    }

    fn populate_after_failure(&self, base: &[u16], alive: &[bool]) -> Result<Vec<u16>, Error> {
        assert_eq!(base.len(), self.size as usize);
        let live = self.live(alive)?;
        Ok(base
            .iter()
            .enumerate()
            .map(|(j, &e)| {
                if alive[e as usize] {
                    e
                } else {
                    self.owner(j as u64, &live)
                }
            })
            .collect())
    }
}
