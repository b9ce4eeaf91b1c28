//! Quick throughput probe for the Flowlet load balancer on the Switcharoo table (one core, trace time).
//! `cargo run --profile dev-bench -p fp-flowstate --example speed [packets]` — the real benchmark is
//! `flowplane bench flowstate`.

use fp_flowstate::workload::{TrafficGen, Workload};
use fp_flowstate::{FlowletConfig, FlowletLb, PacketIn};
use std::time::Instant;

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
            let mut lb: FlowletLb = FlowletLb::new(FlowletConfig::default()).unwrap();
            let mut out = Vec::with_capacity(4096);
            let mut sent = 0usize;
            let t0 = Instant::now();
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
            best = best.min(s);
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
        println!("{name:6} best {:.1} ns/pkt", best * 1e9 / n as f64);
    }
}
