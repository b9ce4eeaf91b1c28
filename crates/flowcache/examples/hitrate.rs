//! Hit-rate simulation of one design against its analysis, printing the warm-up curve.
//!
//! `cargo run --release -p fp-flowcache --example hitrate -- [design] [alpha] [entries] [windows] [uniform|theta] [policy]`
//! (windows 0: the benchmark's rule, until stable over 4 windows, at most 64 working sets)
//! with design one of 4way, 8way, cuckoo-lite, blp and policy one of random, pblru, dc-bubble.

use fp_flowcache::analysis;
use fp_flowcache::sim::{self, Popularity, WarmUp, Workload};
use fp_flowcache::{
    Blp, Config, CuckooLite, DcBubble, Design, FlowCache, Pblru, Policy, Random, SetAssoc4,
    SetAssoc8,
};
use rand::SeedableRng;
use rand_pcg::Pcg64Mcg;

fn go<D: Design, P: Policy + Default>(alpha: f64, entries: usize, windows: u32, pop: Popularity) {
    let mut cache: FlowCache<D, P> = FlowCache::new(&Config::with_entries(entries)).unwrap();
    let keys = (alpha * cache.capacity() as f64).round() as u64;
    let wl = Workload::new(keys, pop, 1);
    let mut rng = Pcg64Mcg::seed_from_u64(1);
    let rule = if windows == 0 {
        WarmUp::until_stable(keys, 64)
    } else {
        WarmUp::fixed(keys, windows)
    };
    let rep = sim::warm_up(&mut cache, &wl, &mut rng, &rule);
    let m = sim::run(&mut cache, &wl, &mut rng, 4 * keys).hit_rate();
    println!(
        "after warm-up ({} lookups, converged {}): {:.4} %",
        rep.lookups,
        rep.converged,
        100.0 * m
    );
    for (i, &h) in rep.window_hit_rates.iter().enumerate() {
        if i < 10 || i % 10 == 9 {
            println!("window {:4}: {:.4} %", i + 1, 100.0 * h);
        }
    }
    let a = analysis::hit_rate::<D>(alpha);
    println!(
        "{} / {} alpha {alpha}: occupancy {:.4} of capacity, occupancy/keys {:.4} %, analysis {:.4} % ({:?})",
        D::NAME,
        P::NAME,
        cache.occupancy() as f64 / cache.capacity() as f64,
        100.0 * cache.occupancy() as f64 / keys as f64,
        100.0 * a.hit_rate,
        a.estimate
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let design = args.get(1).map(String::as_str).unwrap_or("blp");
    let alpha: f64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(0.95);
    let entries: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(1 << 20);
    let windows: u32 = args.get(4).and_then(|s| s.parse().ok()).unwrap_or(40);
    let pop = match args.get(5).map(String::as_str) {
        Some("uniform") | None => Popularity::Uniform,
        Some(t) => Popularity::Zipf(t.parse().expect("zipf theta")),
    };
    macro_rules! policy {
        ($d:ty) => {
            match args.get(6).map(String::as_str).unwrap_or("random") {
                "random" => go::<$d, Random>(alpha, entries, windows, pop),
                "pblru" => go::<$d, Pblru>(alpha, entries, windows, pop),
                "dc-bubble" => go::<$d, DcBubble>(alpha, entries, windows, pop),
                other => panic!("unknown policy {other}"),
            }
        };
    }
    match design {
        "4way" => policy!(SetAssoc4),
        "8way" => policy!(SetAssoc8),
        "cuckoo-lite" => policy!(CuckooLite),
        "blp" => policy!(Blp),
        other => panic!("unknown design {other}"),
    }
}
