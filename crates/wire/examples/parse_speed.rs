//! Rough per-frame cost of the data-path helpers, next to etherparse doing the same parse.
//! Not a test (tests never assert speed) and not the project benchmark (`flowplane-bench lb` is);
//! a quick check for the pipeline's budget. Run on an idle machine:
//!
//! ```text
//! cargo build --release -p fp-wire --example parse_speed
//! flock /tmp/flowplane-bench.lock target/release/examples/parse_speed
//! ```

use std::hint::black_box;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Instant;

use fp_wire::encap::{Encap, OuterIp, OuterL2, Tunnel};
use fp_wire::ethernet::{EtherType, EthernetRepr, MacAddr};
use fp_wire::ipv4::Ipv4Repr;
use fp_wire::ipv6::Ipv6Repr;
use fp_wire::ipv6ext::Ipv6FragRepr;
use fp_wire::tcp::{TcpFlags, TcpOptions, TcpRepr};
use fp_wire::udp::UdpRepr;
use fp_wire::{offload, IpPair, IpProtocol, PacketSummary};

const HEADROOM: usize = 128;

fn frame_v4_tcp(i: u32, payload: usize) -> Vec<u8> {
    let mut f = vec![0u8; 14 + 20 + 20 + payload];
    let (s, d) = (
        Ipv4Addr::from(0x0A00_0000 | i),
        Ipv4Addr::new(203, 0, 113, 10),
    );
    EthernetRepr {
        src_addr: MacAddr([2, 0, 0, 0, 0, 1]),
        dst_addr: MacAddr([2, 0, 0, 0, 0, 2]),
        ethertype: EtherType::IPV4,
    }
    .emit(&mut f)
    .unwrap();
    Ipv4Repr::new(s, d, IpProtocol::TCP, (20 + payload) as u16, 64)
        .emit(&mut f[14..])
        .unwrap();
    let t = TcpRepr {
        src_port: 1024 + (i % 60000) as u16,
        dst_port: 443,
        seq_number: i,
        ack_number: 1,
        flags: TcpFlags::ACK,
        window_len: 500,
        urgent_at: 0,
        options: TcpOptions::NONE,
    };
    t.emit(&mut f[34..], &IpPair::V4(s, d)).unwrap();
    f
}

fn frame_v6_frag_udp(i: u32) -> Vec<u8> {
    let payload = 64;
    let mut f = vec![0u8; 14 + 40 + 8 + 8 + payload];
    let (s, d) = (
        Ipv6Addr::from(0x2001_0db8_u128 << 96 | i as u128),
        "2001:db8::10".parse().unwrap(),
    );
    EthernetRepr {
        src_addr: MacAddr([2, 0, 0, 0, 0, 1]),
        dst_addr: MacAddr([2, 0, 0, 0, 0, 2]),
        ethertype: EtherType::IPV6,
    }
    .emit(&mut f)
    .unwrap();
    Ipv6Repr::new(s, d, IpProtocol::IPV6_FRAG, (8 + 8 + payload) as u16, 64)
        .emit(&mut f[14..])
        .unwrap();
    Ipv6FragRepr {
        next_header: IpProtocol::UDP,
        frag_offset: 0,
        more_frags: false,
        ident: i,
    }
    .emit(&mut f[54..])
    .unwrap();
    UdpRepr {
        src_port: 5000,
        dst_port: 53,
    }
    .emit(&mut f[62..], Some(&IpPair::V6(s, d)))
    .unwrap();
    f
}

fn time<F: FnMut() -> u64>(name: &str, frames: usize, rounds: usize, mut f: F) -> f64 {
    let mut best = f64::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        let mut acc = 0u64;
        for _ in 0..rounds {
            acc = acc.wrapping_add(f());
        }
        black_box(acc);
        let ns = t.elapsed().as_nanos() as f64 / (frames * rounds) as f64;
        best = best.min(ns);
    }
    println!("{name:<44} {best:>8.1} ns/frame (best of 5)");
    best
}

fn main() {
    let n = 4096;
    let v4: Vec<Vec<u8>> = (0..n as u32).map(|i| frame_v4_tcp(i, 6)).collect();
    let v6: Vec<Vec<u8>> = (0..n as u32).map(frame_v6_frag_udp).collect();
    let big: Vec<Vec<u8>> = (0..256u32).map(|i| frame_v4_tcp(i, 1460)).collect();
    let rounds = 200;

    println!("frames: {n} IPv4/TCP (60 B), {n} IPv6+frag-hdr/UDP (134 B); 2-core VM, shared");
    let ours4 = time("fp-wire PacketSummary::parse, IPv4 TCP", n, rounds, || {
        v4.iter()
            .map(|f| {
                PacketSummary::parse(black_box(f))
                    .map(|s| s.src_port as u64)
                    .unwrap_or(0)
            })
            .sum()
    });
    let ep4 = time(
        "etherparse SlicedPacket::from_ethernet, IPv4 TCP",
        n,
        rounds,
        || {
            v4.iter()
                .map(
                    |f| match etherparse::SlicedPacket::from_ethernet(black_box(f)) {
                        Ok(p) => match p.transport {
                            Some(etherparse::TransportSlice::Tcp(t)) => t.source_port() as u64,
                            _ => 0,
                        },
                        Err(_) => 0,
                    },
                )
                .sum()
        },
    );
    let ours6 = time(
        "fp-wire PacketSummary::parse, IPv6 frag UDP",
        n,
        rounds,
        || {
            v6.iter()
                .map(|f| {
                    PacketSummary::parse(black_box(f))
                        .map(|s| s.src_port as u64)
                        .unwrap_or(0)
                })
                .sum()
        },
    );
    let ep6 = time(
        "etherparse SlicedPacket::from_ethernet, IPv6",
        n,
        rounds,
        || {
            v6.iter()
                .map(|f| {
                    etherparse::SlicedPacket::from_ethernet(black_box(f))
                        .map(|p| p.link_exts.len() as u64 + 1)
                        .unwrap_or(0)
                })
                .sum()
        },
    );
    println!(
        "ratio (etherparse / fp-wire): IPv4 {:.2}x, IPv6 {:.2}x",
        ep4 / ours4,
        ep6 / ours6
    );

    let sums: Vec<PacketSummary> = v4
        .iter()
        .map(|f| PacketSummary::parse(f).unwrap())
        .collect();
    time("flow_key() + hash(seed)", n, rounds, || {
        sums.iter()
            .map(|s| s.flow_key().hash(7))
            .fold(0, u64::wrapping_add)
    });

    let e = Encap {
        l2: OuterL2 {
            src: MacAddr([2, 0, 0, 0, 0, 2]),
            dst: MacAddr([2, 0, 0, 0, 0, 3]),
            vlan: None,
        },
        ip: OuterIp::V4 {
            src: Ipv4Addr::new(10, 0, 0, 1),
            dst: Ipv4Addr::new(10, 0, 1, 5),
            ttl: 64,
        },
        tunnel: Tunnel::GRE,
    };
    let mut bufs: Vec<Vec<u8>> = v4
        .iter()
        .map(|f| {
            let mut b = vec![0u8; HEADROOM + f.len()];
            b[HEADROOM..].copy_from_slice(f);
            b
        })
        .collect();
    time(
        "Encap::encapsulate GRE/IPv4 (60 B frame)",
        n,
        rounds,
        || {
            let mut acc = 0u64;
            for (b, s) in bufs.iter_mut().zip(&sums) {
                let inner = HEADROOM + s.l3_offset as usize..HEADROOM + s.l3_end();
                acc += e.encapsulate(b, inner, 1, 2).unwrap() as u64;
            }
            acc
        },
    );
    let mut bigm = big.clone();
    let bsums: Vec<PacketSummary> = big
        .iter()
        .map(|f| PacketSummary::parse(f).unwrap())
        .collect();
    time(
        "offload::fill_l4_checksum, 1514 B TCP frame",
        big.len(),
        rounds,
        || {
            bigm.iter_mut()
                .zip(&bsums)
                .map(|(f, s)| offload::fill_l4_checksum(f, s).is_ok() as u64)
                .sum()
        },
    );
}
