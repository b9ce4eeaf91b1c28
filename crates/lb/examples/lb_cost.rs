//! Where a load-balancer worker spends its time: a loop to run under `perf record` (or
//! `valgrind --tool=callgrind`), separate from `flowplane-bench lb`, which measures.
//!
//! ```sh
//! cargo build --release --example lb_cost -p fp-lb
//! perf record -g target/release/examples/lb_cost constant 1000000 20000000
//! perf record -g target/release/examples/lb_cost established 1000000 20000000
//! ```
//!
//! Arguments: traffic (`constant`: one 5-tuple; `established`: uniformly random tracked
//! connections; `syn`: a new connection per packet), tracked connections, packets to process.
//! Prints ns per packet.

use fp_lb::config::LbConfig;
use fp_lb::snapshot::{Builder, Published};
use fp_lb::stage::LbStage;
use fp_pipeline::craft::{self, Endpoints};
use fp_pipeline::packet::{burst, Pool, MAX_BURST};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Instant;

/// Ethernet + IPv4 + TCP without payload.
const FRAME: usize = 54;

fn flow(i: u64) -> Endpoints {
    Endpoints {
        src: IpAddr::V4(Ipv4Addr::from(
            0xC612_0000u32.wrapping_add((i >> 14) as u32),
        )),
        sport: 1024 + (i & 0x3FFF) as u16,
        dst: "203.0.113.10".parse().expect("literal"),
        dport: 80,
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mode = args.get(1).map_or("constant", |s| s.as_str()).to_string();
    let conns: u64 = args
        .get(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let packets: u64 = args
        .get(3)
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000_000);
    let cfg = LbConfig::from_toml(&format!(
        r#"
        [balancer]
        address = "10.0.0.2"
        seed = 1
        conn_table_capacity = {}
        conn_table_capacity_v6 = 1024
        conn_idle_timeout_ms = 3600000
        [[vip]]
        name = "web"
        address = "203.0.113.10"
        port = 80
        protocol = "tcp"
        pools = ["web"]
        [[pool]]
        name = "web"
        backends = [{{ address = "10.0.1.1" }}, {{ address = "10.0.1.2" }}, {{ address = "10.0.1.3" }}]
        "#,
        if mode == "syn" {
            // Room for every new connection at a low load, as in `bench lb`'s best SYN round.
            (conns + packets) * 4 + 64
        } else {
            conns + conns / 4 + 64
        }
    ))
    .expect("config");
    let snaps = Arc::new(Published::new(Arc::new(
        Builder::new().build(Arc::new(cfg)).expect("snapshot"),
    )));
    let mut w = LbStage::new(0, snaps, 1).expect("worker");
    let mut pool = Pool::new(4 * MAX_BURST);
    let (mut rx, mut tx) = (burst(), burst());
    // Frames are crafted before the clock starts: the loop copies them in, as a port's receive would.
    let craft = |pick: &mut dyn FnMut(u64) -> u64, n: u64, syn: bool| -> Vec<[u8; 64]> {
        (0..n)
            .map(|i| {
                let mut f = [0u8; 64];
                let len = craft::tcp_into(&flow(pick(i)), syn, &mut f);
                assert_eq!(len, FRAME);
                f
            })
            .collect()
    };
    let mut run = |w: &mut LbStage, frames: &[[u8; 64]], n: u64| {
        let mut i = 0;
        while i < n {
            for _ in 0..MAX_BURST.min((n - i) as usize) {
                let mut p = pool.get().expect("pool");
                p.fill(&frames[i as usize % frames.len()][..FRAME]);
                rx.push(p);
                i += 1;
            }
            w.process(&mut rx, &mut tx, &mut pool, 1_000_000_000);
            pool.put_all(&mut tx);
            pool.put_all(&mut rx);
        }
    };
    let setup = craft(&mut |i| i, conns, true);
    run(&mut w, &setup, conns);
    drop(setup);
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let frames = match mode.as_str() {
        "constant" => craft(&mut |_| conns / 2, 1, false),
        // A new connection per packet, none seen before (the table grows by `packets`).
        "syn" => craft(&mut |i| conns + i, packets, true),
        _ => craft(
            &mut |_| {
                x = fp_hash::splitmix64(x);
                fp_hash::reduce(x, conns)
            },
            conns.min(1 << 20),
            false,
        ),
    };
    let t = Instant::now();
    run(&mut w, &frames, packets);
    let ns = t.elapsed().as_nanos() as f64 / packets as f64;
    println!("{mode}: {conns} connections, {packets} packets: {ns:.1} ns/packet");
}
