//! The one-pass parser on hand-made frames: every field, every rejection reason, fragments, ICMP
//! quotes and checksum completion. Frames are built by tests/common's naive builder.

mod common;

use common::*;
use core::net::{Ipv4Addr, Ipv6Addr};
use fp_wire::ethernet::{EtherType, MacAddr};
use fp_wire::flow::{FlowKey, FragmentKey, ThreeTuple};
use fp_wire::tcp::TcpFlags;
use fp_wire::{offload, Error, IpPair, IpProtocol, L4Kind, PacketSummary, ParseOptions};

fn v4(l4: L4Spec) -> Spec {
    Spec {
        dst_mac: [2, 0, 0, 0, 0, 2],
        src_mac: [2, 0, 0, 0, 0, 1],
        vlans: vec![],
        ip: IpSpec::V4 {
            src: [198, 51, 100, 7],
            dst: [203, 0, 113, 10],
            tos: 0,
            ident: 0x1234,
            df: true,
            mf: false,
            offset_units: 0,
            ttl: 64,
            options: vec![],
            ah: None,
        },
        l4,
        payload: b"hello".to_vec(),
        padding: 0,
    }
}

fn v6(l4: L4Spec, exts: Vec<Ext>) -> Spec {
    Spec {
        ip: IpSpec::V6 {
            src: "2001:db8::7".parse::<Ipv6Addr>().unwrap().octets(),
            dst: "2001:db8::10".parse::<Ipv6Addr>().unwrap().octets(),
            tc: 0,
            flow: 0,
            hop: 64,
            exts,
        },
        ..v4(l4)
    }
}

fn syn() -> L4Spec {
    L4Spec::Tcp {
        sport: 40000,
        dport: 443,
        seq: 1,
        ack: 0,
        flags: 0x002,
        window: 65535,
        urg: 0,
        options: vec![2, 4, 5, 0xb4],
    }
}

fn udp() -> L4Spec {
    L4Spec::Udp {
        sport: 5353,
        dport: 53,
    }
}

#[test]
fn qinq_ipv6_hop_by_hop_tcp() {
    let mut s = v6(
        syn(),
        vec![
            Ext::HopByHop(vec![5, 2, 0, 0, 1, 0]),
            Ext::DestOpts(vec![1, 4, 0, 0, 0, 0]),
        ],
    );
    s.vlans = vec![(0x88A8, 0x0064), (0x8100, 0x2FFE)];
    s.padding = 10;
    let (f, lay) = s.build();
    let p = PacketSummary::parse(&f).unwrap();
    assert_eq!(p.l2.dst_mac, MacAddr([2, 0, 0, 0, 0, 2]));
    assert_eq!(p.l2.outer_vlan.unwrap().tpid, EtherType::QINQ);
    assert_eq!(p.l2.vlan_id(), Some(100));
    let inner = p.l2.inner_vlan.unwrap();
    assert_eq!(
        (inner.tci.pcp(), inner.tci.dei(), inner.tci.vid()),
        (1, false, 0xFFE)
    );
    assert_eq!(p.l2.ethertype, EtherType::IPV6);
    assert_eq!(p.l3_offset, 22);
    assert_eq!(p.l4_offset as usize, 22 + 40 + 16);
    assert_eq!(p.l3_end(), lay.end);
    assert_eq!(p.l3_end() + 10, f.len());
    assert_eq!(p.protocol, IpProtocol::TCP);
    assert_eq!(p.l4, L4Kind::Tcp);
    assert!(p.tcp_flags.is_syn_only());
    assert_eq!((p.src_port, p.dst_port), (40000, 443));
    assert!(!p.is_fragment() && p.has_ports());
    let FlowKey::V6(k) = p.flow_key() else {
        panic!("not v6")
    };
    assert_eq!(k.src, "2001:db8::7".parse::<Ipv6Addr>().unwrap());
    assert_eq!(k.to_bytes()[32..], [0x9c, 0x40, 0x01, 0xbb, 6]);
    assert_eq!(offload::verify_l4_checksum(&f, &p), Ok(true));
}

#[test]
fn ipv4_fragments() {
    // First fragment of a big UDP datagram: the UDP length covers the datagram, not the fragment.
    let mut first = v4(udp());
    if let IpSpec::V4 { df, mf, .. } = &mut first.ip {
        *df = false;
        *mf = true;
    }
    let (mut f, lay) = first.build();
    let udp_len = (lay.l4_len as u16 + 1480).to_be_bytes();
    f[lay.l4 + 4..lay.l4 + 6].copy_from_slice(&udp_len);
    let p = PacketSummary::parse(&f).unwrap();
    let fi = p.fragment.unwrap();
    assert!(fi.is_first() && fi.more && fi.ident == 0x1234);
    assert!(!p.is_non_first_fragment());
    assert_eq!(p.l4, L4Kind::Udp);
    assert_eq!((p.src_port, p.dst_port), (5353, 53));
    assert_eq!(
        offload::fill_l4_checksum(&mut f.clone(), &p),
        Err(Error::Fragmented)
    );

    // A later fragment: no ports; the 3-tuple and the fragment key name the datagram.
    let mut later = v4(udp());
    if let IpSpec::V4 {
        df, offset_units, ..
    } = &mut later.ip
    {
        *df = false;
        *offset_units = 185;
    }
    let (f2, _) = later.build();
    let q = PacketSummary::parse(&f2).unwrap();
    assert!(q.is_non_first_fragment());
    assert_eq!(q.fragment.unwrap().offset, 1480);
    assert_eq!(q.l4, L4Kind::None);
    assert!(!q.has_ports());
    assert_eq!(q.protocol, IpProtocol::UDP);
    assert_eq!(q.l4_offset, 34);
    let t = ThreeTuple::new(
        IpPair::V4(
            Ipv4Addr::new(198, 51, 100, 7),
            Ipv4Addr::new(203, 0, 113, 10),
        ),
        IpProtocol::UDP,
    );
    assert_eq!(q.three_tuple(), t);
    assert_eq!(
        q.fragment_key(),
        Some(FragmentKey {
            tuple: t,
            ident: 0x1234
        })
    );
    assert_eq!(p.fragment_key(), q.fragment_key());
    assert_eq!(p.three_tuple().hash(9), q.three_tuple().hash(9));
}

#[test]
fn ipv6_fragments_and_atomic_fragments() {
    let (f, _) = v6(
        udp(),
        vec![Ext::Fragment {
            offset_units: 0,
            more: true,
            ident: 0xCAFE_F00D,
        }],
    )
    .build();
    let p = PacketSummary::parse(&f).unwrap();
    assert_eq!(
        p.fragment.map(|x| (x.ident, x.offset, x.more)),
        Some((0xCAFE_F00D, 0, true))
    );
    assert_eq!((p.l4, p.src_port), (L4Kind::Udp, 5353));

    let (f, _) = v6(
        udp(),
        vec![
            Ext::DestOpts(vec![0; 6]),
            Ext::Fragment {
                offset_units: 100,
                more: false,
                ident: 7,
            },
        ],
    )
    .build();
    let p = PacketSummary::parse(&f).unwrap();
    assert!(p.is_non_first_fragment());
    assert_eq!((p.l4, p.protocol), (L4Kind::None, IpProtocol::UDP));
    assert_eq!(p.l4_offset as usize, 14 + 40 + 8 + 8);

    // Atomic fragment (RFC 6946): a whole datagram; ports read, not a fragment.
    let (f, _) = v6(
        udp(),
        vec![Ext::Fragment {
            offset_units: 0,
            more: false,
            ident: 7,
        }],
    )
    .build();
    let p = PacketSummary::parse(&f).unwrap();
    assert!(!p.is_fragment());
    assert_eq!(p.l4, L4Kind::Udp);
    assert_eq!(offload::verify_l4_checksum(&f, &p), Ok(true));
}

#[test]
fn ipv4_options_and_ah() {
    let mut s = v4(syn());
    if let IpSpec::V4 { options, ah, .. } = &mut s.ip {
        *options = vec![0x94, 0x04, 0, 0, 1, 1, 1, 0];
        *ah = Some((0x100, 1, vec![0xAA; 12]));
    }
    let (f, lay) = s.build();
    let p = PacketSummary::parse(&f).unwrap();
    assert_eq!(p.l4_offset as usize, lay.l4);
    assert_eq!(p.l4_offset, 14 + 28 + 24);
    assert_eq!(p.protocol, IpProtocol::TCP);
    assert_eq!(p.dst_port, 443);
}

#[test]
fn other_protocols_are_accepted_without_ports() {
    for proto in [47u8, 4, 41, 50, 132, 59] {
        let (f, _) = v4(L4Spec::Other(proto)).build();
        let p = PacketSummary::parse(&f).unwrap();
        assert_eq!((p.protocol.0, p.l4, p.src_port), (proto, L4Kind::None, 0));
        assert_eq!(
            offload::fill_l4_checksum(&mut f.clone(), &p),
            Err(Error::NoL4Checksum)
        );
    }
}

#[test]
fn every_rejection_reason() {
    let ok4 = v4(syn()).build().0;
    let ok6 = v6(udp(), vec![]).build().0;
    let fix_v4_checksum = |f: &mut Vec<u8>| {
        f[24] = 0;
        f[25] = 0;
        let c = naive_checksum(&[&f[14..14 + (f[14] as usize & 15) * 4]]);
        f[24..26].copy_from_slice(&c.to_be_bytes());
    };
    type Case<'a> = (&'static str, Box<dyn Fn() -> Vec<u8> + 'a>, Error);
    let cases: Vec<Case> = vec![
        (
            "short ethernet",
            Box::new(|| vec![0u8; 13]),
            Error::EthernetTruncated,
        ),
        (
            "short vlan",
            Box::new(|| {
                let mut f = ok4[..16].to_vec();
                f[12..14].copy_from_slice(&[0x81, 0]);
                f
            }),
            Error::VlanTruncated,
        ),
        (
            "three tags",
            Box::new(|| {
                let mut f = ok4[..12].to_vec();
                for _ in 0..3 {
                    f.extend_from_slice(&[0x81, 0, 0, 1]);
                }
                f.extend_from_slice(&ok4[12..]);
                f
            }),
            Error::TooManyVlanTags,
        ),
        (
            "arp",
            Box::new(|| {
                let mut f = ok4.clone();
                f[12..14].copy_from_slice(&[0x08, 0x06]);
                f
            }),
            Error::UnknownEthertype,
        ),
        (
            "ipv4 short",
            Box::new(|| ok4[..33].to_vec()),
            Error::Ipv4Truncated,
        ),
        (
            "ipv4 version",
            Box::new(|| {
                let mut f = ok4.clone();
                f[14] = 0x55;
                f
            }),
            Error::Ipv4BadVersion,
        ),
        (
            "ipv4 ihl",
            Box::new(|| {
                let mut f = ok4.clone();
                f[14] = 0x44;
                f
            }),
            Error::Ipv4BadIhl,
        ),
        (
            "ipv4 ihl past end",
            Box::new(|| {
                let mut f = ok4[..40].to_vec();
                f[14] = 0x47;
                f
            }),
            Error::Ipv4Truncated,
        ),
        (
            "ipv4 total too long",
            Box::new(|| {
                let mut f = ok4.clone();
                f[17] += 1;
                fix_v4_checksum(&mut f);
                f
            }),
            Error::Ipv4BadTotalLen,
        ),
        (
            "ipv4 total too short",
            Box::new(|| {
                let mut f = ok4.clone();
                f[16] = 0;
                f[17] = 19;
                fix_v4_checksum(&mut f);
                f
            }),
            Error::Ipv4BadTotalLen,
        ),
        (
            "ipv4 checksum",
            Box::new(|| {
                let mut f = ok4.clone();
                f[22] -= 1;
                f
            }),
            Error::Ipv4BadChecksum,
        ),
        (
            "ping of death",
            Box::new(|| {
                let mut f = ok4.clone();
                f[20] = 0x1F;
                f[21] = 0xFF;
                fix_v4_checksum(&mut f);
                f
            }),
            Error::Ipv4BadFragment,
        ),
        (
            "ipv4 AH length 0",
            Box::new(|| {
                let mut f = ok4.clone();
                f[23] = 51;
                f[35] = 0;
                fix_v4_checksum(&mut f);
                f
            }),
            Error::AhBadLength,
        ),
        (
            "ipv4 AH truncated",
            Box::new(|| {
                let mut f = ok4.clone();
                f[23] = 51;
                f[35] = 200;
                fix_v4_checksum(&mut f);
                f
            }),
            Error::ExtHeaderTruncated,
        ),
        (
            "tcp short",
            Box::new(|| {
                let mut f = ok4[..14 + 20 + 19].to_vec();
                f[16] = 0;
                f[17] = 39;
                fix_v4_checksum(&mut f);
                f
            }),
            Error::TcpTruncated,
        ),
        (
            "tcp data offset",
            Box::new(|| {
                let mut f = ok4.clone();
                f[46] = 0x40;
                f
            }),
            Error::TcpBadDataOffset,
        ),
        (
            "tcp options past end",
            Box::new(|| {
                let mut f = ok4.clone();
                f[46] = 0xF0;
                f
            }),
            Error::TcpTruncated,
        ),
        (
            "ipv6 short",
            Box::new(|| ok6[..53].to_vec()),
            Error::Ipv6Truncated,
        ),
        (
            "ipv6 version",
            Box::new(|| {
                let mut f = ok6.clone();
                f[14] = 0x40 | (f[14] & 0xF);
                f[12..14].copy_from_slice(&[0x86, 0xdd]);
                f
            }),
            Error::Ipv6BadVersion,
        ),
        (
            "ipv6 payload len",
            Box::new(|| {
                let mut f = ok6.clone();
                f[19] += 1;
                f
            }),
            Error::Ipv6BadPayloadLen,
        ),
        (
            "udp short",
            Box::new(|| {
                let mut f = ok6[..54 + 7].to_vec();
                f[18] = 0;
                f[19] = 7;
                f
            }),
            Error::UdpTruncated,
        ),
        (
            "udp length 0",
            Box::new(|| {
                let mut f = ok6.clone();
                f[58] = 0;
                f[59] = 0;
                f
            }),
            Error::UdpBadLength,
        ),
        (
            "udp length past ip",
            Box::new(|| {
                let mut f = ok6.clone();
                f[59] += 1;
                f
            }),
            Error::UdpBadLength,
        ),
        (
            "hop-by-hop second",
            Box::new(|| {
                v6(
                    udp(),
                    vec![Ext::DestOpts(vec![0; 6]), Ext::HopByHop(vec![0; 6])],
                )
                .build()
                .0
            }),
            Error::Ipv6HopByHopNotFirst,
        ),
        (
            "ten ext headers",
            Box::new(|| {
                v6(
                    udp(),
                    (0..10)
                        .map(|_| Ext::DestOpts(vec![1, 4, 0, 0, 0, 0]))
                        .collect(),
                )
                .build()
                .0
            }),
            Error::Ipv6TooManyExtHeaders,
        ),
        (
            "ext header past end",
            Box::new(|| {
                let mut f = v6(udp(), vec![Ext::Routing(vec![0; 6])]).build().0;
                f[55] = 50; // routing header now claims 408 bytes
                f
            }),
            Error::ExtHeaderTruncated,
        ),
        (
            "icmp short",
            Box::new(|| {
                let (mut f, _) = v4(L4Spec::Icmp4 {
                    ty: 8,
                    code: 0,
                    rest: 0,
                })
                .build();
                f.truncate(14 + 20 + 7);
                f[16] = 0;
                f[17] = 27;
                fix_v4_checksum(&mut f);
                f
            }),
            Error::IcmpTruncated,
        ),
        (
            "icmpv6 short",
            Box::new(|| {
                let mut s = v6(
                    L4Spec::Icmp6 {
                        ty: 128,
                        code: 0,
                        rest: 0,
                    },
                    vec![],
                );
                s.payload.clear();
                let (mut f, _) = s.build();
                f.truncate(54 + 7);
                f[19] = 7;
                f
            }),
            Error::Icmpv6Truncated,
        ),
    ];
    let mut seen = std::collections::BTreeSet::new();
    for (name, make, want) in &cases {
        let f = make();
        assert_eq!(
            PacketSummary::parse(&f).map(|_| ()),
            Err(*want),
            "case {name}"
        );
        seen.insert(*want);
    }
    // TTL policy is the caller's, through ParseOptions.
    let opts = ParseOptions {
        min_ttl: 65,
        ..ParseOptions::DEFAULT
    };
    assert_eq!(
        PacketSummary::parse_with(&ok4, &opts).map(|_| ()),
        Err(Error::TtlExpired)
    );
    assert_eq!(
        PacketSummary::parse_with(&ok6, &opts).map(|_| ()),
        Err(Error::TtlExpired)
    );
    seen.insert(Error::TtlExpired);
    // Every reason the summary parser can produce is covered above.
    let parser_reasons = [
        Error::EthernetTruncated,
        Error::VlanTruncated,
        Error::TooManyVlanTags,
        Error::UnknownEthertype,
        Error::Ipv4Truncated,
        Error::Ipv4BadVersion,
        Error::Ipv4BadIhl,
        Error::Ipv4BadTotalLen,
        Error::Ipv4BadChecksum,
        Error::Ipv4BadFragment,
        Error::Ipv6Truncated,
        Error::Ipv6BadVersion,
        Error::Ipv6BadPayloadLen,
        Error::Ipv6HopByHopNotFirst,
        Error::Ipv6TooManyExtHeaders,
        Error::ExtHeaderTruncated,
        Error::AhBadLength,
        Error::TtlExpired,
        Error::TcpTruncated,
        Error::TcpBadDataOffset,
        Error::UdpTruncated,
        Error::UdpBadLength,
        Error::IcmpTruncated,
        Error::Icmpv6Truncated,
    ];
    for r in parser_reasons {
        assert!(seen.contains(&r), "no case for {r:?}");
    }
}

#[test]
fn raw_ip_entry_point() {
    let (f, _) = v4(syn()).build();
    let p = PacketSummary::parse_ip(&f[14..], &ParseOptions::DEFAULT).unwrap();
    assert_eq!((p.l3_offset, p.l4_offset, p.dst_port), (0, 20, 443));
    assert_eq!(
        PacketSummary::parse_ip(&[], &ParseOptions::DEFAULT),
        Err(Error::Ipv4Truncated)
    );
    assert_eq!(
        PacketSummary::parse_ip(&[0x20; 30], &ParseOptions::DEFAULT),
        Err(Error::UnknownEthertype)
    );
}

#[test]
fn icmp_errors_name_the_flow_they_are_about() {
    // The VIP's SYN-ACK toward the client met a router with a smaller MTU: the router quotes
    // the IP header and the first 8 bytes of TCP. The quoted flow, reversed, is the client's.
    let (synack, _) = Spec {
        ip: IpSpec::V4 {
            src: [203, 0, 113, 10],
            dst: [198, 51, 100, 7],
            tos: 0,
            ident: 1,
            df: true,
            mf: false,
            offset_units: 0,
            ttl: 64,
            options: vec![],
            ah: None,
        },
        ..v4(L4Spec::Tcp {
            sport: 443,
            dport: 40000,
            seq: 5,
            ack: 2,
            flags: 0x12,
            window: 100,
            urg: 0,
            options: vec![],
        })
    }
    .build();
    let mut quote = synack[14..14 + 28].to_vec();
    let mut body = vec![3, 4, 0, 0, 0, 0, 0x05, 0x78]; // frag needed, MTU 1400
    body.append(&mut quote);
    let c = naive_checksum(&[&body]);
    body[2..4].copy_from_slice(&c.to_be_bytes());
    let mut s = v4(L4Spec::Other(1));
    s.payload = body;
    if let IpSpec::V4 { src, dst, .. } = &mut s.ip {
        *src = [192, 0, 2, 1];
        *dst = [203, 0, 113, 10];
    }
    let (f, _) = s.build();
    let p = PacketSummary::parse(&f).unwrap();
    assert_eq!((p.l4, p.icmp_type, p.icmp_code), (L4Kind::Icmpv4, 3, 4));
    assert!(p.is_icmp_error());
    let q = p.icmp_quoted(&f).unwrap();
    assert!(q.has_ports);
    let client = PacketSummary::parse(&v4(syn()).build().0).unwrap();
    assert_eq!(q.flow_key().reversed(), client.flow_key());
    // Not an error message: no quote.
    let (echo, _) = v4(L4Spec::Icmp4 {
        ty: 8,
        code: 0,
        rest: 0,
    })
    .build();
    let e = PacketSummary::parse(&echo).unwrap();
    assert_eq!(e.icmp_quoted(&echo), Err(Error::IcmpNoQuote));
    assert_eq!(client.icmp_quoted(&echo), Err(Error::IcmpNoQuote));
}

#[test]
fn icmpv6_packet_too_big_quote() {
    let (orig, _) = v6(syn(), vec![Ext::DestOpts(vec![0; 6])]).build();
    let mut s = v6(
        L4Spec::Icmp6 {
            ty: 2,
            code: 0,
            rest: 1280,
        },
        vec![],
    );
    s.payload = orig[14..].to_vec();
    let (f, _) = s.build();
    let p = PacketSummary::parse(&f).unwrap();
    assert!(p.is_icmp_error());
    let q = p.icmp_quoted(&f).unwrap();
    assert_eq!(q.protocol, IpProtocol::TCP);
    assert_eq!((q.src_port, q.dst_port), (40000, 443));
    assert_eq!(offload::verify_l4_checksum(&f, &p), Ok(true));
}

#[test]
fn checksum_completion_for_partial_frames() {
    for spec in [
        v4(syn()),
        v4(udp()),
        v6(syn(), vec![Ext::HopByHop(vec![0; 6])]),
        v6(udp(), vec![]),
    ] {
        let (good, _) = spec.build();
        let p = PacketSummary::parse(&good).unwrap();
        let mut f = good.clone();
        offload::make_partial(&mut f, &p).unwrap();
        assert_eq!(offload::looks_partial(&f, &p), Ok(true));
        assert_eq!(offload::verify_l4_checksum(&f, &p), Ok(false));
        offload::fill_l4_checksum(&mut f, &p).unwrap();
        assert_eq!(f, good, "completed checksum equals the naive one");
        assert_eq!(offload::looks_partial(&f, &p), Ok(false));
    }
    let (icmp, _) = v4(L4Spec::Icmp4 {
        ty: 8,
        code: 0,
        rest: 9,
    })
    .build();
    let p = PacketSummary::parse(&icmp).unwrap();
    assert_eq!(offload::looks_partial(&icmp, &p), Err(Error::NoL4Checksum));
    let mut broken = icmp.clone();
    broken[14 + 20 + 2] ^= 0xFF;
    assert_eq!(offload::verify_l4_checksum(&broken, &p), Ok(false));
    offload::fill_l4_checksum(&mut broken, &p).unwrap();
    assert_eq!(broken, icmp);
    assert_eq!(TcpFlags::SYN.bits8(), 2);
}
