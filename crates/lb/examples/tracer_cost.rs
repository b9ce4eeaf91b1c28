//! What an installed packet tracer costs a worker per ordinary packet: `PacketTracer::wants` on a
//! mix of frames that are not probes, against the same loop calling a tracer that answers `false`
//! without looking (through the same `dyn Tracer` call).
//!
//! `cargo run --profile dev-bench -p fp-lb --example tracer_cost`

use fp_lb::stage::{TraceRecord, Tracer};
use fp_lb::trace::PacketTracer;
use fp_pipeline::craft::{self, Endpoints};
use fp_pipeline::trace::{probe_queue, TracerConfig};
use fp_wire::FlowKey;
use std::hint::black_box;
use std::time::Instant;

struct Never;

impl Tracer for Never {
    fn wants(&mut self, frame: &[u8], _: &FlowKey, _: u64) -> bool {
        black_box(frame);
        false
    }
    fn record(&mut self, _: TraceRecord) {}
}

fn run(t: &mut dyn Tracer, frames: &[(Vec<u8>, FlowKey)], rounds: usize) -> f64 {
    let t0 = Instant::now();
    let mut n = 0u64;
    for _ in 0..rounds {
        for (f, k) in frames {
            n += t.wants(black_box(f), black_box(k), 0) as u64;
        }
    }
    assert_eq!(n, 0);
    t0.elapsed().as_nanos() as f64 / (rounds * frames.len()) as f64
}

fn main() {
    let e4 = Endpoints::new("198.51.100.7", 40000, "203.0.113.10", 80);
    let e6 = Endpoints::new("2001:db8::7", 40000, "2001:db8::10", 80);
    let frames: Vec<(Vec<u8>, FlowKey)> = [
        craft::tcp(&e4, true),
        craft::tcp(&e4, false),
        craft::tcp(&e6, false),
        craft::udp(&e4, 1400),
        craft::udp(&e6, 64),
        craft::udp(&e4, 24),
    ]
    .into_iter()
    .map(|f| {
        let k = fp_wire::PacketSummary::parse(&f).unwrap().flow_key();
        (f, k)
    })
    .collect();
    let names = [
        "tcp4 syn (54 B)",
        "tcp4 ack (54 B)",
        "tcp6 ack (74 B)",
        "udp4 1400 B payload",
        "udp6 64 B payload",
        "udp4 24 B payload",
    ];
    let (probes, _queue) = probe_queue(16, TracerConfig::default());
    let mut tracer = PacketTracer::new(probes);
    let mut never = Never;
    let rounds = 2_000_000;
    // Warm up, then alternate three times and keep the best of each.
    run(&mut tracer, &frames, rounds / 10);
    let best = |t: &mut dyn Tracer, f: &[(Vec<u8>, FlowKey)], r: usize| {
        (0..3).map(|_| run(t, f, r)).fold(f64::MAX, f64::min)
    };
    println!(
        "{:<22} {:>12} {:>14} {:>8}",
        "frames", "wants ns", "always-no ns", "diff"
    );
    let ours = best(&mut tracer, &frames, rounds);
    let base = best(&mut never, &frames, rounds);
    println!(
        "{:<22} {ours:>12.2} {base:>14.2} {:>8.2}",
        "mix of all six",
        ours - base
    );
    for (name, f) in names.iter().zip(frames.chunks(1)) {
        let ours = best(&mut tracer, f, rounds * 6);
        let base = best(&mut never, f, rounds * 6);
        println!("{name:<22} {ours:>12.2} {base:>14.2} {:>8.2}", ours - base);
    }
}
