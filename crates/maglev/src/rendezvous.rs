//! Rendezvous (highest random weight) hashing, the second baseline of §5.3.
//!
//! Slot `j` goes to the backend with the highest score `hash_u64(key_i, j)`, where
//! `key_i = hash_bytes(seed', name_i)`. With weights, the score is the standard logarithmic
//! weighted-HRW score `w_i / −ln(u)` with `u ∈ (0, 1)` taken from the same hash, which makes
//! backend `i` win a slot with probability `w_i / W`. (Floating point: fine for a baseline; the
//! unweighted score is pure integer.) Ties, practically impossible, go to the lower canonical index.
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

impl RendezvousPrepared {
    /// Owner of slot `j` among the backends listed in `live`.
    #[inline]
    fn owner(&self, j: u64, live: &[u16]) -> u16 {
        match &self.weights {
            None => {
                let mut best = (0u64, live[0]);
                for &i in live {
                    let s = fp_hash::hash_u64(self.keys[i as usize], j);
                    if s > best.0 {
                        best = (s, i);
                    }
                }
                best.1
            }
            Some(w) => {
                let mut best = (f64::NEG_INFINITY, live[0]);
                for &i in live {
                    let h = fp_hash::hash_u64(self.keys[i as usize], j);
                    // u in (0, 1): 53 bits plus a half step, never 0 or 1.
                    let u = ((h >> 11) as f64 + 0.5) * (1.0 / (1u64 << 53) as f64);
                    let s = w[i as usize] / -u.ln();
                    if s > best.0 {
                        best = (s, i);
                    }
                }
                best.1
            }
        }
    }

    fn live(&self, alive: &[bool]) -> Result<Vec<u16>, Error> {
        assert_eq!(alive.len(), self.keys.len(), "one flag per backend");
        let live: Vec<u16> = (0..self.keys.len() as u16)
            .filter(|&i| alive[i as usize])
            .collect();
        if live.is_empty() {
            return Err(Error::NoBackends);
        }
        Ok(live)
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
