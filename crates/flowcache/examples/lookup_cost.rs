//! Cost of batched lookups on a warm cache, per design and policy (a profiling aid).
//!
//! `cargo run --profile dev-bench -p fp-flowcache --example lookup_cost -- [entries] [alpha]`

use fp_flowcache::sim::{self, Popularity, WarmUp, Workload, BATCH};
use fp_flowcache::{Blp, Config, DcBubble, Design, FlowCache, Pblru, Policy, Random, SetAssoc4};
use rand::SeedableRng;
use rand_pcg::Pcg64Mcg;
use std::time::Instant;

fn go<D: Design, P: Policy>(name: &str, policy: P, entries: usize, alpha: f64) {
    let mut cache = FlowCache::<D, P>::with_policy(&Config::with_entries(entries), policy).unwrap();
    let keys = (alpha * entries as f64) as u64;
    let wl = Workload::new(keys, Popularity::Uniform, 1);
    let mut rng = Pcg64Mcg::seed_from_u64(2);
    sim::warm_up(&mut cache, &wl, &mut rng, &WarmUp::until_stable(keys, 16));
    let trace: Vec<u64> = (0..1 << 18).map(|_| wl.next_hash(&mut rng)).collect();
    let mut out = [None; BATCH];
    let mut best = f64::INFINITY;
    for _ in 0..20 {
        let t = Instant::now();
        let mut hits = 0;
        for c in trace.chunks(BATCH) {
            cache.lookup_batch(c, |i, v| v == Workload::tag(c[i]), &mut out[..c.len()]);
            hits += out.iter().filter(|o| o.is_some()).count();
        }
        std::hint::black_box(hits);
        best = best.min(t.elapsed().as_secs_f64() * 1e9 / trace.len() as f64);
    }
    println!("{name:<24} {best:6.2} ns/lookup  {}", cache.stats());
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let entries: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(1 << 18);
    let alpha: f64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(0.5);
    go::<SetAssoc4, _>("4-way random", Random, entries, alpha);
    go::<Blp, _>("BLP random", Random, entries, alpha);
    go::<Blp, _>("BLP PBLRU never", Pblru::new(u32::MAX), entries, alpha);
    go::<Blp, _>("BLP PBLRU 1/8", Pblru::new(8), entries, alpha);
    go::<Blp, _>("BLP PBLRU 1/1", Pblru::new(1), entries, alpha);
    go::<Blp, _>("BLP DC-Bubble", DcBubble::default(), entries, alpha);
}
