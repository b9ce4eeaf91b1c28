//! Quick look at one SetSep setting: construction rate, fallback, space, lookup rate.
//!
//! `cargo run --profile dev-bench -p fp-setsep --example explore -- KEYS VALUE_BITS X Y [THREADS]`
//! (hold /tmp/flowplane-bench.lock while timing). The full measurements are `flowplane-bench setsep`.

use std::time::Instant;

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("numeric arguments"))
        .collect();
    let n = *args.first().unwrap_or(&1_000_000) as usize;
    let v = *args.get(1).unwrap_or(&1) as u8;
    let x = *args.get(2).unwrap_or(&16) as u8;
    let y = *args.get(3).unwrap_or(&8) as u8;
    let threads = *args.get(4).unwrap_or(&1) as usize;
    let keys: Vec<u64> = (0..n as u64).map(fp_hash::splitmix64).collect();
    let vals: Vec<u16> = keys
        .iter()
        .map(|&k| (fp_hash::splitmix64(k) % (1 << v)) as u16)
        .collect();
    let cfg = fp_setsep::Config::new(v).setting(x, y).threads(threads);
    let t = Instant::now();
    let (table, st) = fp_setsep::build(&cfg, &keys, &vals).expect("build");
    let dt = t.elapsed().as_secs_f64();
    println!(
        "isa {:?}; build {:.2} s = {:.3} Mkeys/s ({} threads); {:?}",
        fp_setsep::isa(),
        dt,
        n as f64 / dt / 1e6,
        threads,
        st
    );
    println!(
        "mean tries per (group, bit): {:.1}",
        st.tries as f64 / (st.groups as f64 * v as f64)
    );
    println!("{}", table.stats());
    let probe: Vec<u64> = (0..2_000_000u64)
        .map(|i| keys[(fp_hash::splitmix64(i ^ 99) % n as u64) as usize])
        .collect();
    for batch in [1usize, 4, 8, 16, 32] {
        let mut out = vec![0u16; batch];
        let mut best = 0f64;
        let mut sum = 0u64;
        // Best of 5: the machine is shared.
        for _ in 0..5 {
            let t = Instant::now();
            if batch == 1 {
                for &k in &probe {
                    sum += table.get(k) as u64;
                }
            } else {
                for c in probe.chunks_exact(batch) {
                    table.get_batch(c, &mut out);
                    sum += out[0] as u64;
                }
            }
            best = best.max(probe.len() as f64 / t.elapsed().as_secs_f64() / 1e6);
        }
        println!("batch {batch:>2}: {best:.1} Mops (chk {sum})");
    }
}
