//! Encapsulation: exact bytes out for bytes in (golden frames written out by hand here), decoding
//! of the output by etherparse, decapsulation round trips over random inner packets, and errors.

mod common;

use common::*;
use core::net::{Ipv4Addr, Ipv6Addr};
use etherparse::{NetSlice, SlicedPacket, TransportSlice};
use fp_wire::encap::{
    self, decapsulate, Encap, EncapKind, InnerKind, OuterIp, OuterL2, Tunnel, MAX_OVERHEAD,
};
use fp_wire::ethernet::{rewrite_macs, MacAddr};
use fp_wire::gre::GreRepr;
use fp_wire::vlan::Tci;
use fp_wire::{offload, Error, IpPair, IpProtocol, PacketSummary, ParseOptions};
use rand::Rng;

const LB_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x10]);
const GW_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x20]);
const LB4: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const BE4: Ipv4Addr = Ipv4Addr::new(10, 0, 1, 5);

fn lb6() -> Ipv6Addr {
    "fd00::1".parse().unwrap()
}
fn be6() -> Ipv6Addr {
    "fd00::1:5".parse().unwrap()
}

/// A TCP SYN from a client to a VIP, built by the naive writer, as an IP packet.
fn inner_v4() -> Vec<u8> {
    let s = Spec {
        dst_mac: [0; 6],
        src_mac: [0; 6],
        vlans: vec![],
        ip: IpSpec::V4 {
            src: [198, 51, 100, 7],
            dst: [203, 0, 113, 10],
            tos: 0x2e,
            ident: 99,
            df: true,
            mf: false,
            offset_units: 0,
            ttl: 60,
            options: vec![],
            ah: None,
        },
        l4: L4Spec::Tcp {
            sport: 40000,
            dport: 443,
            seq: 1,
            ack: 0,
            flags: 2,
            window: 1000,
            urg: 0,
            options: vec![],
        },
        payload: vec![],
        padding: 0,
    };
    s.build().0[14..].to_vec()
}

/// Place `inner` at offset `at` of a zeroed buffer of `at + inner.len()` bytes.
fn with_headroom(inner: &[u8], at: usize) -> Vec<u8> {
    let mut b = vec![0u8; at + inner.len()];
    b[at..].copy_from_slice(inner);
    b
}

fn ipv4_header(
    total: usize,
    ident: u16,
    df: bool,
    tos: u8,
    proto: u8,
    src: Ipv4Addr,
    dst: Ipv4Addr,
) -> Vec<u8> {
    let mut h = vec![
        0x45,
        tos,
        (total >> 8) as u8,
        total as u8,
        (ident >> 8) as u8,
        ident as u8,
        if df { 0x40 } else { 0 },
        0,
        64,
        proto,
        0,
        0,
    ];
    h.extend_from_slice(&src.octets());
    h.extend_from_slice(&dst.octets());
    let c = naive_checksum(&[&h]);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    h
}

#[test]
fn golden_gre_over_ipv4() {
    let inner = inner_v4();
    let e = Encap {
        l2: OuterL2 {
            src: LB_MAC,
            dst: GW_MAC,
            vlan: None,
        },
        ip: OuterIp::V4 {
            src: LB4,
            dst: BE4,
            ttl: 64,
        },
        tunnel: Tunnel::GRE,
    };
    assert_eq!(e.overhead(), 38);
    let mut buf = with_headroom(&inner, 64);
    let start = e
        .encapsulate(&mut buf, 64..64 + inner.len(), 0xABCD, 7)
        .unwrap();
    assert_eq!(start, 64 - 38);

    let mut want = Vec::new();
    want.extend_from_slice(&GW_MAC.0);
    want.extend_from_slice(&LB_MAC.0);
    want.extend_from_slice(&[0x08, 0x00]);
    // Outer: TOS copied (0x2e), ID 7, DF copied from the inner packet, protocol 47.
    want.extend_from_slice(&ipv4_header(
        20 + 4 + inner.len(),
        7,
        true,
        0x2e,
        47,
        LB4,
        BE4,
    ));
    want.extend_from_slice(&[0x00, 0x00, 0x08, 0x00]);
    want.extend_from_slice(&inner);
    assert_eq!(&buf[start..], &want[..]);

    // Decapsulate: exactly the inner packet.
    let s = PacketSummary::parse(&buf[start..]).unwrap();
    let d = decapsulate(&buf[start..], &s, fp_wire::vxlan::UDP_PORT).unwrap();
    assert_eq!((d.tunnel, d.inner), (EncapKind::Gre, InnerKind::Ipv4));
    assert_eq!(&buf[start..][d.inner_range()], &inner[..]);
    assert_eq!(
        d.gre,
        Some(GreRepr::new(fp_wire::ethernet::EtherType::IPV4))
    );
}

#[test]
fn golden_vxlan_over_ipv6_with_vlan() {
    let inner = inner_v4();
    let inner_dst = MacAddr([0x02, 0, 0, 0, 0, 0x55]);
    let e = Encap {
        l2: OuterL2 {
            src: LB_MAC,
            dst: GW_MAC,
            vlan: Some(Tci::new(3, false, 42)),
        },
        ip: OuterIp::V6 {
            src: lb6(),
            dst: be6(),
            hop_limit: 32,
        },
        tunnel: Tunnel::Vxlan {
            vni: 0x00BEEF,
            dst_port: 4789,
            inner_src: LB_MAC,
            inner_dst,
            udp_checksum: false,
        },
    };
    assert_eq!(e.overhead(), 18 + 40 + 8 + 8 + 14);
    assert_eq!(e.overhead(), MAX_OVERHEAD);
    let at = 100;
    let mut buf = with_headroom(&inner, at);
    let hash = 0x1234_5678_9ABC_DEF0u64;
    let start = e
        .encapsulate(&mut buf, at..at + inner.len(), hash, 0)
        .unwrap();
    assert_eq!(start, at - MAX_OVERHEAD);

    let udp_len = 8 + 8 + 14 + inner.len();
    let sport = 0xC000 | (0xDEF0 & 0x3FFF);
    let mut udp = Vec::new();
    udp.extend_from_slice(&(sport as u16).to_be_bytes());
    udp.extend_from_slice(&4789u16.to_be_bytes());
    udp.extend_from_slice(&(udp_len as u16).to_be_bytes());
    udp.extend_from_slice(&[0, 0]);
    udp.extend_from_slice(&[0x08, 0, 0, 0, 0x00, 0xBE, 0xEF, 0]);
    udp.extend_from_slice(&inner_dst.0);
    udp.extend_from_slice(&LB_MAC.0);
    udp.extend_from_slice(&[0x08, 0x00]);
    udp.extend_from_slice(&inner);
    let mut ph = Vec::new();
    ph.extend_from_slice(&lb6().octets());
    ph.extend_from_slice(&be6().octets());
    ph.extend_from_slice(&(udp_len as u32).to_be_bytes());
    ph.extend_from_slice(&[0, 0, 0, 17]);
    let c = naive_checksum(&[&ph, &udp]);
    udp[6..8].copy_from_slice(&c.to_be_bytes());

    let mut want = Vec::new();
    want.extend_from_slice(&GW_MAC.0);
    want.extend_from_slice(&LB_MAC.0);
    want.extend_from_slice(&[0x81, 0x00, 0x60, 42, 0x86, 0xdd]);
    // Version 6, traffic class 0x2e (copied), flow label = low 20 bits of the hash (0xCDEF0).
    let w0: u32 = (6 << 28) | (0x2e << 20) | 0xCDEF0;
    want.extend_from_slice(&w0.to_be_bytes());
    want.extend_from_slice(&(udp_len as u16).to_be_bytes());
    want.extend_from_slice(&[17, 32]);
    want.extend_from_slice(&lb6().octets());
    want.extend_from_slice(&be6().octets());
    want.extend_from_slice(&udp);
    assert_eq!(&buf[start..], &want[..]);

    let s = PacketSummary::parse(&buf[start..]).unwrap();
    assert_eq!(offload::verify_l4_checksum(&buf[start..], &s), Ok(true));
    let d = decapsulate(&buf[start..], &s, 4789).unwrap();
    assert_eq!(
        (d.tunnel, d.inner),
        (EncapKind::Vxlan { vni: 0xBEEF }, InnerKind::Ethernet)
    );
    let inner_frame = &buf[start..][d.inner_range()];
    let is = PacketSummary::parse(inner_frame).unwrap();
    assert_eq!(is.l2.dst_mac, inner_dst);
    assert_eq!(is.ip_bytes(inner_frame), &inner[..]);
    assert_eq!(decapsulate(&buf[start..], &s, 8472), Err(Error::NotTunnel));
}

#[test]
fn golden_ipip_and_ipv6_in_ipv4() {
    let inner = inner_v4();
    let e = Encap {
        l2: OuterL2 {
            src: LB_MAC,
            dst: GW_MAC,
            vlan: None,
        },
        ip: OuterIp::V4 {
            src: LB4,
            dst: BE4,
            ttl: 64,
        },
        tunnel: Tunnel::Ipip,
    };
    let mut buf = with_headroom(&inner, 34);
    let start = e
        .encapsulate(&mut buf, 34..34 + inner.len(), 0, 0x0102)
        .unwrap();
    assert_eq!(start, 0);
    let mut want = Vec::new();
    want.extend_from_slice(&GW_MAC.0);
    want.extend_from_slice(&LB_MAC.0);
    want.extend_from_slice(&[0x08, 0x00]);
    want.extend_from_slice(&ipv4_header(
        20 + inner.len(),
        0x0102,
        true,
        0x2e,
        4,
        LB4,
        BE4,
    ));
    want.extend_from_slice(&inner);
    assert_eq!(buf, want);

    // IPv6 inner: protocol 41, DF set, traffic class copied.
    let six = Spec {
        dst_mac: [0; 6],
        src_mac: [0; 6],
        vlans: vec![],
        ip: IpSpec::V6 {
            src: be6().octets(),
            dst: lb6().octets(),
            tc: 0xb8,
            flow: 5,
            hop: 9,
            exts: vec![],
        },
        l4: L4Spec::Udp { sport: 1, dport: 2 },
        payload: vec![1, 2, 3],
        padding: 0,
    }
    .build()
    .0[14..]
        .to_vec();
    let mut buf = with_headroom(&six, 40);
    let start = e
        .encapsulate(&mut buf, 40..40 + six.len(), 0, 0x0304)
        .unwrap();
    let frame = &buf[start..];
    assert_eq!(
        &frame[14..34],
        &ipv4_header(20 + six.len(), 0x0304, true, 0xb8, 41, LB4, BE4)[..]
    );
    let s = PacketSummary::parse(frame).unwrap();
    let d = decapsulate(frame, &s, 4789).unwrap();
    assert_eq!((d.tunnel, d.inner), (EncapKind::Ipip, InnerKind::Ipv6));
    assert_eq!(&frame[d.inner_range()], &six[..]);
}

#[test]
fn ipv4_id_df_policy() {
    // An IPv4 inner packet that may be fragmented gives an outer packet that may be fragmented,
    // with the caller's ID; a DF one gives DF.
    let mut inner = inner_v4();
    inner[6] = 0; // clear DF
    inner[10] = 0;
    inner[11] = 0;
    let c = naive_checksum(&[&inner[..20]]);
    inner[10..12].copy_from_slice(&c.to_be_bytes());
    let e = Encap {
        l2: OuterL2 {
            src: LB_MAC,
            dst: GW_MAC,
            vlan: None,
        },
        ip: OuterIp::V4 {
            src: LB4,
            dst: BE4,
            ttl: 64,
        },
        tunnel: Tunnel::GRE,
    };
    let mut buf = with_headroom(&inner, 38);
    let start = e
        .encapsulate(&mut buf, 38..38 + inner.len(), 0, 0xBEEF)
        .unwrap();
    let s = PacketSummary::parse(&buf[start..]).unwrap();
    assert!(!s.dont_frag);
    assert_eq!(&buf[start + 18..start + 20], &[0xBE, 0xEF]);
    let mut buf = with_headroom(&inner_v4(), 38);
    let start = e.encapsulate(&mut buf, 38..38 + inner.len(), 0, 1).unwrap();
    assert!(PacketSummary::parse(&buf[start..]).unwrap().dont_frag);
}

#[test]
fn gre_options_recursion_and_checksum() {
    let inner = inner_v4();
    let e = Encap {
        l2: OuterL2 {
            src: LB_MAC,
            dst: GW_MAC,
            vlan: None,
        },
        ip: OuterIp::V6 {
            src: lb6(),
            dst: be6(),
            hop_limit: 64,
        },
        tunnel: Tunnel::Gre {
            key: Some(0x11223344),
            sequence: Some(9),
            checksum: true,
            recursion: 1,
        },
    };
    let mut buf = with_headroom(&inner, 80);
    let start = e.encapsulate(&mut buf, 80..80 + inner.len(), 0, 0).unwrap();
    let frame = buf[start..].to_vec();
    assert_eq!(&frame[54..58], &[0xB1, 0x00, 0x08, 0x00]); // C|K|S, recursion 1, IPv4
    let s = PacketSummary::parse(&frame).unwrap();
    let d = decapsulate(&frame, &s, 4789).unwrap();
    let g = d.gre.unwrap();
    assert_eq!(
        (g.key, g.sequence, g.checksum, g.recursion),
        (Some(0x11223344), Some(9), true, 1)
    );
    assert_eq!(&frame[d.inner_range()], &inner[..]);
    // A damaged payload no longer matches the GRE checksum.
    let mut bad = frame.clone();
    *bad.last_mut().unwrap() ^= 1;
    assert_eq!(decapsulate(&bad, &s, 4789), Err(Error::GreBadChecksum));
    // An unknown GRE protocol type (no checksum this time, so the type is what fails).
    let plain = Encap {
        tunnel: Tunnel::Gre {
            key: Some(1),
            sequence: None,
            checksum: false,
            recursion: 0,
        },
        ..e
    };
    let mut buf = with_headroom(&inner, 80);
    let start = plain
        .encapsulate(&mut buf, 80..80 + inner.len(), 0, 0)
        .unwrap();
    let mut odd = buf[start..].to_vec();
    odd[56..58].copy_from_slice(&[0x12, 0x34]);
    let s2 = PacketSummary::parse(&odd).unwrap();
    assert_eq!(decapsulate(&odd, &s2, 4789), Err(Error::UnknownEthertype));
    odd[56..58].copy_from_slice(&[0x65, 0x58]); // transparent Ethernet bridging
    assert_eq!(
        decapsulate(&odd, &s2, 4789).unwrap().inner,
        InnerKind::Ethernet
    );
}

#[test]
fn errors() {
    let inner = inner_v4();
    let e = Encap {
        l2: OuterL2 {
            src: LB_MAC,
            dst: GW_MAC,
            vlan: None,
        },
        ip: OuterIp::V4 {
            src: LB4,
            dst: BE4,
            ttl: 64,
        },
        tunnel: Tunnel::GRE,
    };
    let mut buf = with_headroom(&inner, 37);
    let before = buf.clone();
    assert_eq!(
        e.encapsulate(&mut buf, 37..37 + inner.len(), 0, 0),
        Err(Error::NoHeadroom)
    );
    assert_eq!(buf, before, "unchanged on error");
    assert_eq!(
        e.encapsulate(&mut buf, 37..37 + inner.len() + 1, 0, 0),
        Err(Error::BufferTooSmall)
    );
    let mut junk = with_headroom(&[0x50; 30], 40);
    assert_eq!(
        e.encapsulate(&mut junk, 40..70, 0, 0),
        Err(Error::UnknownEthertype)
    );
    let mut short = with_headroom(&[0x45; 19], 40);
    assert_eq!(
        e.encapsulate(&mut short, 40..59, 0, 0),
        Err(Error::Ipv4Truncated)
    );
    let mut short6 = with_headroom(&[0x60; 39], 40);
    assert_eq!(
        e.encapsulate(&mut short6, 40..79, 0, 0),
        Err(Error::Ipv6Truncated)
    );
    let mut huge = vec![0u8; 40 + 65_520];
    huge[40] = 0x45;
    assert_eq!(
        e.encapsulate(&mut huge, 40..40 + 65_520, 0, 0),
        Err(Error::PacketTooBig)
    );

    // Decapsulating what is not a tunnel, or a fragment of one.
    let (plain, _) = Spec {
        ip: IpSpec::V4 {
            src: [1; 4],
            dst: [2; 4],
            tos: 0,
            ident: 5,
            df: false,
            mf: true,
            offset_units: 0,
            ttl: 9,
            options: vec![],
            ah: None,
        },
        ..spec_udp()
    }
    .build();
    let s = PacketSummary::parse(&plain).unwrap();
    assert_eq!(decapsulate(&plain, &s, 4789), Err(Error::Fragmented));
    let (plain, _) = spec_udp().build();
    let s = PacketSummary::parse(&plain).unwrap();
    assert_eq!(decapsulate(&plain, &s, 4789), Err(Error::NotTunnel));
}

fn spec_udp() -> Spec {
    Spec {
        dst_mac: [2; 6],
        src_mac: [4; 6],
        vlans: vec![],
        ip: IpSpec::V4 {
            src: [1; 4],
            dst: [2; 4],
            tos: 0,
            ident: 5,
            df: true,
            mf: false,
            offset_units: 0,
            ttl: 9,
            options: vec![],
            ah: None,
        },
        l4: L4Spec::Udp { sport: 7, dport: 8 },
        payload: vec![0; 10],
        padding: 0,
    }
}

#[test]
fn l2_dsr_rewrite_keeps_everything_else() {
    let (f, _) = spec_udp().build();
    let mut g = f.clone();
    rewrite_macs(&mut g, MacAddr([2, 0, 0, 0, 0, 7]), LB_MAC).unwrap();
    assert_eq!(&g[12..], &f[12..]);
    let s = PacketSummary::parse(&g).unwrap();
    assert_eq!(s.l2.dst_mac, MacAddr([2, 0, 0, 0, 0, 7]));
    assert_eq!(offload::verify_l4_checksum(&g, &s), Ok(true));
}

/// Random inner packets through random tunnels: etherparse reads the outer headers as configured,
/// checksums verify, decapsulation returns the inner packet byte for byte, and the inner packet
/// parses to the same flow.
#[test]
fn random_encapsulation_round_trips() {
    let mut r = rng(0xE9CA);
    for _ in 0..3000 {
        let spec = random_spec(&mut r);
        let (frame, _) = spec.build();
        let orig = PacketSummary::parse(&frame).unwrap();
        let inner = orig.ip_bytes(&frame).to_vec();
        let vlan = if r.gen_bool(0.3) {
            Some(Tci(r.gen()))
        } else {
            None
        };
        let ip = if r.gen_bool(0.5) {
            OuterIp::V4 {
                src: Ipv4Addr::from(r.gen::<u32>()),
                dst: Ipv4Addr::from(r.gen::<u32>()),
                ttl: r.gen(),
            }
        } else {
            OuterIp::V6 {
                src: Ipv6Addr::from(r.gen::<u128>()),
                dst: Ipv6Addr::from(r.gen::<u128>()),
                hop_limit: r.gen(),
            }
        };
        let tunnel = match r.gen_range(0..3) {
            0 => Tunnel::Gre {
                key: r.gen_bool(0.5).then(|| r.gen()),
                sequence: r.gen_bool(0.3).then(|| r.gen()),
                checksum: r.gen_bool(0.3),
                recursion: r.gen_range(0..2),
            },
            1 => Tunnel::Ipip,
            _ => Tunnel::Vxlan {
                vni: r.gen::<u32>() & 0xFF_FFFF,
                dst_port: 4789,
                inner_src: MacAddr(r.gen()),
                inner_dst: MacAddr(r.gen()),
                udp_checksum: r.gen(),
            },
        };
        let e = Encap {
            l2: OuterL2 {
                src: MacAddr(r.gen()),
                dst: MacAddr(r.gen()),
                vlan,
            },
            ip,
            tunnel,
        };
        let at = e.overhead() + r.gen_range(0..16);
        let mut buf = with_headroom(&inner, at);
        let hash: u64 = r.gen();
        let start = e
            .encapsulate(&mut buf, at..at + inner.len(), hash, r.gen())
            .unwrap();
        assert_eq!(start, at - e.overhead());
        let out = &buf[start..];

        // fp-wire's reading of the outer headers.
        let s = PacketSummary::parse(out).unwrap();
        assert_eq!(s.addrs, e.ip.addrs());
        assert_eq!(s.l2.vlan_id(), vlan.map(|t| t.vid()));
        assert_eq!(s.tos, orig.tos);
        if let Tunnel::Vxlan { udp_checksum, .. } = tunnel {
            let verified = offload::verify_l4_checksum(out, &s).unwrap();
            assert!(verified);
            let zero = out[s.l4_offset as usize + 6..s.l4_offset as usize + 8] == [0, 0];
            assert_eq!(zero, matches!(ip, OuterIp::V4 { .. }) && !udp_checksum);
            assert_eq!(s.src_port, encap::vxlan_src_port(hash));
        }

        // etherparse's reading of the outer headers.
        let ep = SlicedPacket::from_ethernet(out).unwrap();
        match (ep.net.as_ref().unwrap(), ip) {
            (NetSlice::Ipv4(v), OuterIp::V4 { src, dst, ttl }) => {
                let h = v.header();
                assert_eq!(
                    (h.source_addr(), h.destination_addr(), h.ttl()),
                    (src, dst, ttl)
                );
                assert_eq!(h.header_checksum(), h.to_header().calc_header_checksum());
                assert_eq!(
                    h.dont_fragment(),
                    orig.dont_frag || orig.version() == fp_wire::IpVersion::V6
                );
            }
            (
                NetSlice::Ipv6(v),
                OuterIp::V6 {
                    src,
                    dst,
                    hop_limit,
                },
            ) => {
                let h = v.header();
                assert_eq!(
                    (h.source_addr(), h.destination_addr(), h.hop_limit()),
                    (src, dst, hop_limit)
                );
                assert_eq!(h.flow_label().value(), encap::flow_label(hash));
            }
            (n, _) => panic!("outer mismatch {n:?}"),
        }
        let want_proto = match tunnel {
            Tunnel::Gre { .. } => IpProtocol::GRE,
            Tunnel::Vxlan { .. } => IpProtocol::UDP,
            Tunnel::Ipip => match orig.addrs {
                IpPair::V4(..) => IpProtocol::IPIP,
                IpPair::V6(..) => IpProtocol::IPV6,
            },
        };
        assert_eq!(s.protocol, want_proto);
        if let Tunnel::Vxlan { dst_port, .. } = tunnel {
            let Some(TransportSlice::Udp(u)) = ep.transport else {
                panic!("no udp")
            };
            assert_eq!(u.destination_port(), dst_port);
        }

        // Decapsulation gives back the inner packet, which parses to the same flow.
        let d = decapsulate(out, &s, 4789).unwrap();
        let (inner_back, inner_sum) = match d.inner {
            InnerKind::Ethernet => {
                let f = &out[d.inner_range()];
                let is = PacketSummary::parse(f).unwrap();
                (is.ip_bytes(f).to_vec(), is)
            }
            _ => {
                let p = &out[d.inner_range()];
                (
                    p.to_vec(),
                    PacketSummary::parse_ip(p, &ParseOptions::DEFAULT).unwrap(),
                )
            }
        };
        assert_eq!(inner_back, inner);
        assert_eq!(inner_sum.flow_key(), orig.flow_key());
        assert_eq!(inner_sum.fragment, orig.fragment);
        if let Tunnel::Gre { recursion, key, .. } = tunnel {
            let g = d.gre.unwrap();
            assert_eq!((g.recursion, g.key), (recursion, key));
        }
    }
}

#[test]
fn templates_match_encapsulate_byte_for_byte() {
    let mut r = rng(0x7E3F);
    let mut checked = 0;
    for _ in 0..3000 {
        let spec = random_spec(&mut r);
        let (frame, _) = spec.build();
        let orig = PacketSummary::parse(&frame).unwrap();
        let inner = orig.ip_bytes(&frame).to_vec();
        let e = Encap {
            l2: OuterL2 {
                src: MacAddr(r.gen()),
                dst: MacAddr(r.gen()),
                vlan: r.gen_bool(0.3).then(|| Tci(r.gen())),
            },
            ip: OuterIp::V4 {
                src: Ipv4Addr::from(r.gen::<u32>()),
                dst: Ipv4Addr::from(r.gen::<u32>()),
                ttl: r.gen(),
            },
            tunnel: if r.gen_bool(0.5) {
                Tunnel::GRE
            } else {
                Tunnel::Ipip
            },
        };
        let t = encap::EncapTemplate::new(&e).expect("IPv4 plain GRE / IPIP have templates");
        assert_eq!(t.overhead(), e.overhead());
        let ident: u16 = r.gen();
        let mut a = with_headroom(&inner, MAX_OVERHEAD);
        let mut b = a.clone();
        let range = MAX_OVERHEAD..MAX_OVERHEAD + inner.len();
        let sa = e.encapsulate(&mut a, range.clone(), r.gen(), ident);
        let sb = t.encapsulate(&mut b, range.clone(), ident);
        assert_eq!(sa, sb);
        assert_eq!(a, b, "template and encapsulate disagree for {e:?}");
        checked += 1;
        // Too little headroom: the same error from both, buffer unchanged.
        let mut c = inner.clone();
        let before = c.clone();
        assert_eq!(
            t.encapsulate(&mut c, 0..inner.len(), 1),
            Err(Error::NoHeadroom)
        );
        assert_eq!(c, before);
    }
    assert_eq!(checked, 3000);
    // Other encapsulations have no template.
    let v6 = Encap {
        l2: OuterL2 {
            src: LB_MAC,
            dst: GW_MAC,
            vlan: None,
        },
        ip: OuterIp::V6 {
            src: lb6(),
            dst: be6(),
            hop_limit: 64,
        },
        tunnel: Tunnel::GRE,
    };
    assert!(encap::EncapTemplate::new(&v6).is_none());
    let keyed = Encap {
        l2: OuterL2 {
            src: LB_MAC,
            dst: GW_MAC,
            vlan: None,
        },
        ip: OuterIp::V4 {
            src: LB4,
            dst: BE4,
            ttl: 64,
        },
        tunnel: Tunnel::Gre {
            key: Some(5),
            sequence: None,
            checksum: false,
            recursion: 0,
        },
    };
    assert!(encap::EncapTemplate::new(&keyed).is_none());
}
