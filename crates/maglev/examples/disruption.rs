//! Print how many slots move when backends are removed from a Maglev table, split into the
//! unavoidable part (slots of removed backends) and the collateral part (slots of survivors).
//!
//! `cargo run --release -p fp-maglev --example disruption -- [BACKENDS] [SIZE] [REMOVE] [TRIALS]`

use fp_maglev::{Backend, Config, Table};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .map(|a| a.parse())
        .collect::<Result<_, _>>()?;
    let n = *args.first().unwrap_or(&1000) as usize;
    let m = *args.get(1).unwrap_or(&65_537);
    let k = *args.get(2).unwrap_or(&1) as usize;
    let trials = *args.get(3).unwrap_or(&20) as usize;
    let cfg = Config::new(m, 0)?;
    let all: Vec<Backend> = (0..n)
        .map(|i| Backend::new(format!("backend-{i}")))
        .collect();
    let base = Table::build(&cfg, &all)?;
    let mut state = 0x5eedu64;
    let (mut sum_removed, mut sum_kept, mut max_kept) = (0.0, 0.0, 0.0f64);
    for _ in 0..trials {
        let mut dead = vec![false; n];
        let mut left = k;
        while left > 0 {
            state = fp_hash::splitmix64(state);
            let i = fp_hash::reduce(state, n as u64) as usize;
            if !dead[i] {
                dead[i] = true;
                left -= 1;
            }
        }
        let survivors: Vec<Backend> = all
            .iter()
            .zip(&dead)
            .filter(|(_, &d)| !d)
            .map(|(b, _)| b.clone())
            .collect();
        let d = base.diff(&Table::build(&cfg, &survivors)?)?;
        let (r, kept) = (
            d.from_removed as f64 / m as f64,
            d.from_kept as f64 / m as f64,
        );
        sum_removed += r;
        sum_kept += kept;
        max_kept = max_kept.max(kept);
    }
    let t = trials as f64;
    println!(
        "N={n} M={m} removed={k}: removed-slots {:.4}%  collateral mean {:.4}% max {:.4}%  (ideal {:.4}%)",
        100.0 * sum_removed / t,
        100.0 * sum_kept / t,
        100.0 * max_kept,
        100.0 * k as f64 / n as f64
    );
    Ok(())
}
