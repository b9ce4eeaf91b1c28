//! Workload generation and the hit-rate simulator (§4.1 framework, §7.1 "Cache Warming",
//! appendix D).
//!
//! A [`Workload`] is a working set of `keys` flows with uniform or Zipf popularity. Key `r` (its
//! popularity rank for Zipf) has flow hash `hash_u64(seed, r)`, so popular keys land in random
//! buckets and no key table is needed (a table of 32 M keys read at random would add a DRAM miss per
//! lookup that is not the cache's). Zipf ranks are drawn with the algorithm of Gray et al.
//! (SIGMOD 1994, the generator the paper cites for its θ = 0.99 workload, also YCSB's), one `powf`
//! per draw. Random numbers come from PCG (§7.1 and its footnote 5: a poor generator introduces
//! locality that inflates hit rates).
//!
//! The simulator drives a real [`FlowCache`]: look up a batch of 32 keys, and for each miss, in
//! order, insert the key (the slow path's answer). The stored value is [`Workload::tag`], 16 bits of
//! the key's hash that are independent of its fingerprint and bucket, and the check compares it:
//! the stand-in for "fetch the entry the value points to and compare the full key".
//! A key that occurs twice in one batch is looked up again before its second insert, so batching
//! gives the same hit/miss sequence as one-at-a-time lookups.
//!
//! [`warm_up`] runs windows of lookups until the hit rate stops increasing, as §7.1 prescribes;
//! appendix D estimates `r = r_max (1 - exp(-L / W))` after `L` lookups on a working set of `W`, and
//! the paper warms for about 20 `W`. Measured here, BLP and cuckoo-lite approach their final hit
//! rate much more slowly than that estimate (the remaining gap shrinks roughly like `1 / L`), so the
//! default rule looks for an increase over several windows, and stops at a cap; the number of
//! working sets used is reported with every result.

use crate::{Design, FlowCache, Policy};
use rand::RngCore;
use rand_pcg::Pcg64Mcg;

/// Lookups per batch in the simulator.
pub const BATCH: usize = 32;

/// Key popularity.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Popularity {
    /// Every key equally likely.
    Uniform,
    /// Zipf with skew `theta` (the paper uses 0.99); `theta` must not be 1.
    Zipf(f64),
}

/// `sum_{i=1}^{n} i^-theta`: exact up to 2^16 terms, then Euler–Maclaurin for the tail (error far
/// below 1e-9 relative).
pub fn zeta(n: u64, theta: f64) -> f64 {
    const K: u64 = 1 << 16;
    let f = |x: f64| x.powf(-theta);
    if n <= K {
        return (1..=n).map(|i| f(i as f64)).sum();
    }
    let head: f64 = (1..K).map(|i| f(i as f64)).sum();
    let (k, n) = (K as f64, n as f64);
    let integral = (n.powf(1.0 - theta) - k.powf(1.0 - theta)) / (1.0 - theta);
    let df = |x: f64| -theta * x.powf(-theta - 1.0);
    head + integral + (f(k) + f(n)) / 2.0 + (df(n) - df(k)) / 12.0
}

/// Zipf ranks in `0..n` by Gray et al.'s method.
#[derive(Clone, Debug)]
pub struct Zipf {
    n: u64,
    zetan: f64,
    eta: f64,
    alpha: f64,
    half_pow: f64,
}

impl Zipf {
    /// Zipf over `n >= 2` ranks with skew `theta` (`0 < theta`, `theta != 1`).
    pub fn new(n: u64, theta: f64) -> Zipf {
        assert!(n >= 2 && theta > 0.0 && (theta - 1.0).abs() > 1e-9);
        let zetan = zeta(n, theta);
        let zeta2 = 1.0 + 0.5f64.powf(theta);
        Zipf {
            n,
            zetan,
            eta: (1.0 - (2.0 / n as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan),
            alpha: 1.0 / (1.0 - theta),
            half_pow: 0.5f64.powf(theta),
        }
    }

    /// Rank for a uniform `u` in `[0, 1)`.
    #[inline]
    pub fn rank(&self, u: f64) -> u64 {
        let uz = u * self.zetan;
        if uz < 1.0 {
            0
        } else if uz < 1.0 + self.half_pow {
            1
        } else {
            let r = self.n as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha);
            (r as u64).min(self.n - 1)
        }
    }

    /// Probability of rank 0 (the hottest key).
    pub fn p_top(&self) -> f64 {
        1.0 / self.zetan
    }
}

/// A working set of flows and their popularity.
#[derive(Clone, Debug)]
pub struct Workload {
    keys: u64,
    seed: u64,
    zipf: Option<Zipf>,
}

impl Workload {
    /// `keys >= 2` flows with popularity `pop`; `seed` picks the flows' hashes.
    pub fn new(keys: u64, pop: Popularity, seed: u64) -> Workload {
        assert!(keys >= 2, "a working set needs at least two keys");
        let zipf = match pop {
            Popularity::Uniform => None,
            Popularity::Zipf(theta) => Some(Zipf::new(keys, theta)),
        };
        Workload { keys, seed, zipf }
    }

    /// Size of the working set.
    pub fn keys(&self) -> u64 {
        self.keys
    }

    /// Draw a key (its rank).
    #[inline]
    pub fn next_rank(&self, rng: &mut Pcg64Mcg) -> u64 {
        let x = rng.next_u64();
        match &self.zipf {
            None => fp_hash::reduce(x, self.keys),
            Some(z) => z.rank((x >> 11) as f64 * (1.0 / (1u64 << 53) as f64)),
        }
    }

    /// The flow hash of key `rank`.
    #[inline]
    pub fn flow_hash(&self, rank: u64) -> u64 {
        fp_hash::hash_u64(self.seed, rank)
    }

    /// Draw a key and return its flow hash.
    #[inline]
    pub fn next_hash(&self, rng: &mut Pcg64Mcg) -> u64 {
        self.flow_hash(self.next_rank(rng))
    }

    /// The value the simulator stores for a key, which its check compares: bits 16..32 of the hash
    /// (the fingerprint is bits 0..16; the bucket index comes from the high bits).
    #[inline]
    pub fn tag(hash: u64) -> u16 {
        (hash >> 16) as u16
    }
}

/// Lookups and hits counted by the simulator.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Lookups made.
    pub lookups: u64,
    /// Lookups that hit.
    pub hits: u64,
}

impl Counts {
    /// Hits / lookups (0 if none).
    pub fn hit_rate(&self) -> f64 {
        if self.lookups == 0 {
            0.0
        } else {
            self.hits as f64 / self.lookups as f64
        }
    }
}

/// Run `ops` lookups from `wl` against `cache` in batches of [`BATCH`], inserting on every miss.
pub fn run<D: Design, P: Policy>(
    cache: &mut FlowCache<D, P>,
    wl: &Workload,
    rng: &mut Pcg64Mcg,
    ops: u64,
) -> Counts {
    let mut hashes = [0u64; BATCH];
    let mut out = [None; BATCH];
    let mut c = Counts::default();
    let mut left = ops;
    while left > 0 {
        let k = left.min(BATCH as u64) as usize;
        for h in &mut hashes[..k] {
            *h = wl.next_hash(rng);
        }
        let hs = &hashes[..k];
        cache.lookup_batch(hs, |i, v| v == Workload::tag(hs[i]), &mut out[..k]);
        c.hits += settle_misses(cache, hs, &out[..k], |_| {});
        c.lookups += k as u64;
        left -= k as u64;
    }
    c
}

/// After a batched lookup: count the hits and insert each missed key in order. A key missed earlier
/// in the same batch is looked up again first (it may have been inserted by then); `on_miss` runs
/// for every real miss before its insert (the benchmark charges its miss penalty there). Returns
/// the number of hits.
#[inline]
pub fn settle_misses<D: Design, P: Policy>(
    cache: &mut FlowCache<D, P>,
    hashes: &[u64],
    out: &[Option<u16>],
    mut on_miss: impl FnMut(u64),
) -> u64 {
    let mut hits = 0;
    let mut missed = [0u64; BATCH];
    let mut nmissed = 0;
    for (&h, o) in hashes.iter().zip(out) {
        if o.is_some() {
            hits += 1;
            continue;
        }
        if missed[..nmissed].contains(&h) && cache.lookup(h, |v| v == Workload::tag(h)).is_some() {
            hits += 1;
            continue;
        }
        if nmissed < BATCH {
            missed[nmissed] = h;
            nmissed += 1;
        }
        on_miss(h);
        cache.insert(h, Workload::tag(h));
    }
    hits
}

/// When to stop warming up.
///
/// Windows of `window` lookups are run until the hit rate of the last window exceeds that of the
/// window `lookback` windows earlier by no more than `epsilon` (or by twice the sampling noise of
/// the two windows, whichever is larger): the hit rate "stopped increasing" over `lookback` windows,
/// not just from one window to the next. BLP and cuckoo-lite keep creeping up long after two
/// consecutive windows look alike (`docs/flowcache.md`), so a single-window comparison would stop
/// them early.
#[derive(Clone, Copy, Debug)]
pub struct WarmUp {
    /// Lookups per window (the paper's unit is the working-set size).
    pub window: u64,
    /// Compare each window with the one this many windows before it.
    pub lookback: u32,
    /// Always run at least this many windows.
    pub min_windows: u32,
    /// Never run more than this many windows.
    pub max_windows: u32,
    /// Smallest hit-rate increase (absolute) over `lookback` windows that counts as "increasing".
    pub epsilon: f64,
}

impl WarmUp {
    /// Windows of one working set; stop when the hit rate rose by less than 0.05 percentage point
    /// over the last 4 windows; at least 8 and at most `cap` windows.
    pub fn until_stable(keys: u64, cap: u32) -> WarmUp {
        WarmUp {
            window: keys,
            lookback: 4,
            min_windows: 8.min(cap),
            max_windows: cap,
            epsilon: 5e-4,
        }
    }

    /// Exactly `windows` windows of one working set each.
    pub fn fixed(keys: u64, windows: u32) -> WarmUp {
        WarmUp {
            window: keys,
            lookback: 1,
            min_windows: windows,
            max_windows: windows,
            epsilon: f64::INFINITY,
        }
    }
}

/// What a warm-up did.
#[derive(Clone, Debug, Default)]
pub struct WarmReport {
    /// Windows run.
    pub windows: u32,
    /// Lookups run.
    pub lookups: u64,
    /// Hit rate of each window.
    pub window_hit_rates: Vec<f64>,
    /// True if it stopped because the hit rate stopped increasing (not at `max_windows`).
    pub converged: bool,
}

/// Warm `cache` with `wl` until its hit rate stops increasing (see [`WarmUp`]).
pub fn warm_up<D: Design, P: Policy>(
    cache: &mut FlowCache<D, P>,
    wl: &Workload,
    rng: &mut Pcg64Mcg,
    w: &WarmUp,
) -> WarmReport {
    let mut rep = WarmReport::default();
    let len = w.window.max(1);
    let back = w.lookback.max(1) as usize;
    while rep.windows < w.max_windows {
        let h = run(cache, wl, rng, len).hit_rate();
        rep.windows += 1;
        rep.lookups += len;
        rep.window_hit_rates.push(h);
        let k = rep.window_hit_rates.len();
        if rep.windows >= w.min_windows && k > back {
            let prev = rep.window_hit_rates[k - 1 - back];
            let noise = 2.0 * (2.0 * h * (1.0 - h) / len as f64).sqrt();
            if h <= prev + w.epsilon.max(noise) {
                rep.converged = rep.windows < w.max_windows || w.epsilon.is_finite();
                break;
            }
        }
    }
    rep
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn zeta_tail_matches_exact_sum() {
        for &(n, theta) in &[(100_000u64, 0.99), (1_000_000, 0.99), (300_000, 0.5)] {
            let exact: f64 = (1..=n).map(|i| (i as f64).powf(-theta)).sum();
            let got = zeta(n, theta);
            assert!(
                (got - exact).abs() / exact < 1e-10,
                "{n} {theta}: {got} {exact}"
            );
        }
    }

    #[test]
    fn zipf_frequencies() {
        let n = 10_000u64;
        let z = Zipf::new(n, 0.99);
        let mut rng = Pcg64Mcg::seed_from_u64(7);
        let draws = 1_000_000;
        let mut counts = vec![0u32; n as usize];
        for _ in 0..draws {
            let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
            counts[z.rank(u) as usize] += 1;
        }
        let zn = zeta(n, 0.99);
        // The two exactly-sampled head ranks, and the approximate ones beyond, within 5 %.
        for r in [0usize, 1, 9, 99] {
            let want = draws as f64 * ((r + 1) as f64).powf(-0.99) / zn;
            let got = counts[r] as f64;
            assert!(
                (got - want).abs() / want < 0.05 + 3.0 / want.sqrt(),
                "rank {r}: {got} vs {want}"
            );
        }
        assert!((z.p_top() - 1.0 / zn).abs() < 1e-12);
    }

    #[test]
    fn uniform_ranks_cover() {
        let wl = Workload::new(100, Popularity::Uniform, 1);
        let mut rng = Pcg64Mcg::seed_from_u64(3);
        let mut seen = [false; 100];
        for _ in 0..10_000 {
            seen[wl.next_rank(&mut rng) as usize] = true;
        }
        assert!(seen.iter().all(|&s| s));
    }
}
