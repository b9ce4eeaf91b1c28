//! Quick throughput probe for the Flowlet load balancer on the Switcharoo table (one core, trace time).
//! `cargo run --profile dev-bench -p fp-flowstate --example speed [packets]` — the real benchmark is
//! `flowplane-bench flowstate`.

use fp_flowstate::workload::{TrafficGen, Workload};
use fp_flowstate::{FlowletConfig, FlowletLb, PacketIn};
use std::time::Instant;

/// On-CPU time of this thread in ns (excludes time spent descheduled on a loaded machine).
fn cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(2_000_000);
    let only = std::env::args().nth(2);
    for (w, name) in [
        (Workload::ONE, "1-pkt"),
        (Workload::TWO, "2-pkt"),
        (Workload::EIGHT, "8-pkt"),
        (Workload::ZIPF, "zipf"),
    ] {
        if only.as_deref().is_some_and(|o| o != name) {
            continue;
        }
        let tr: Vec<PacketIn> = TrafficGen::new(w, 100.0, 1000, 1)
            .take(n)
            .enumerate()
            .map(|(i, p)| PacketIn {
                key: p.key,
                ts_ns: p.at,
                len: p.len,
                token: i as u32,
            })
            .collect();
        let reps: usize = std::env::var("REPS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(2);
        let mut best = f64::MAX;
        for _ in 0..reps {
            let env = |k: &str, d: usize| {
                std::env::var(k)
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(d)
            };
            let mut cfg = FlowletConfig::default();
            cfg.table.slots_per_array = env("SLOTS", cfg.table.slots_per_array);
            cfg.table.transient_cells = env("AUX", cfg.table.transient_cells);
            cfg.table.ordering_cells = env("AUX", cfg.table.ordering_cells);
            let mut lb: FlowletLb = FlowletLb::new(cfg).unwrap();
            let mut out = Vec::with_capacity(4096);
            let mut sent = 0usize;
            let t0 = Instant::now();
            let c0 = cpu_ns();
            let mut now = 0;
            for c in tr.chunks(32) {
                now = c[c.len() - 1].ts_ns;
                lb.process(now, c, &mut out);
                sent += out.len();
                out.clear();
            }
            lb.flush(now, &mut out);
            sent += out.len();
            let s = t0.elapsed().as_secs_f64();
            let cpu = (cpu_ns() - c0) as f64 / 1e9;
            best = best.min(cpu);
            let st = lb.table_stats();
            if reps > 2 {
                continue;
            }
            println!(
                "{name:6} {:6.2} Mpps {:6.2} Minsert/s ({:.1} ns/pkt) passes/pkt {:.3} swaps {} sent {sent}",
                n as f64 / s / 1e6,
                st.inserts as f64 / s / 1e6,
                s * 1e9 / n as f64,
                st.passes as f64 / n as f64,
                st.swaps
            );
        }
        println!("{name:6} best {:.1} ns/pkt on-CPU", best * 1e9 / n as f64);
    }
}
