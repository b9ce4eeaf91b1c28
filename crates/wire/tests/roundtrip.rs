//! Per-format round trips over random bytes: whatever `new_checked` + `Repr::parse` accept, the
//! `Repr` re-emits into bytes that parse to the same `Repr`; and nothing panics on the way.

use fp_wire::arp::{ArpPacket, ArpRepr};
use fp_wire::ethernet::{EthernetFrame, EthernetRepr};
use fp_wire::gre::{GrePacket, GreRepr};
use fp_wire::icmp::{IcmpRepr, Icmpv4Packet, Icmpv6Packet};
use fp_wire::ipv4::{Ipv4Packet, Ipv4Repr};
use fp_wire::ipv6::{Ipv6Packet, Ipv6Repr};
use fp_wire::ipv6ext::{
    AuthHeader, AuthHeaderRepr, Ipv6ExtHeader, Ipv6ExtHeaderRepr, Ipv6FragHeader, Ipv6FragRepr,
};
use fp_wire::tcp::{TcpPacket, TcpRepr};
use fp_wire::udp::{UdpPacket, UdpRepr};
use fp_wire::vlan::{VlanHeader, VlanRepr};
use fp_wire::vxlan::{VxlanPacket, VxlanRepr};
use fp_wire::IpPair;
use proptest::prelude::*;

fn bytes() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..120)
}

/// Random bytes whose first bytes are biased toward a plausible header for `kind`.
fn biased(kind: u8) -> impl Strategy<Value = Vec<u8>> {
    bytes().prop_map(move |mut b| {
        if b.len() >= 8 {
            match kind {
                4 => {
                    b[0] = 0x40 | (b[0] & 0x0F).max(5);
                    let tl = b.len().min(u16::MAX as usize) as u16;
                    if b[1] & 1 == 0 {
                        b[2..4].copy_from_slice(&tl.to_be_bytes());
                    }
                }
                6 => {
                    b[0] = 0x60 | (b[0] & 0x0F);
                    if b.len() >= 40 && b[1] & 1 == 0 {
                        let pl = ((b.len() - 40) as u16).to_be_bytes();
                        b[4..6].copy_from_slice(&pl);
                    }
                }
                b'T' if b.len() > 12 => b[12] = (b[12] & 0xF0).max(0x50),
                b'U' if b[0] & 1 == 0 => {
                    let l = (b.len() as u16).to_be_bytes();
                    b[4..6].copy_from_slice(&l);
                }
                b'G' => b[1] &= 0xF8,
                _ => {}
            }
        }
        b
    })
}

fn addrs() -> IpPair {
    IpPair::V6(
        "2001:db8::a".parse().unwrap(),
        "2001:db8::b".parse().unwrap(),
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1500, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn ethernet(b in bytes()) {
        if let Ok(p) = EthernetFrame::new_checked(&b[..]) {
            let r = EthernetRepr::parse(&p).unwrap();
            let mut out = b.clone();
            r.emit(&mut out).unwrap();
            prop_assert_eq!(&out, &b);
        }
    }

    #[test]
    fn vlan(b in bytes()) {
        if let Ok(p) = VlanHeader::new_checked(&b[..]) {
            let r = VlanRepr::parse(&p).unwrap();
            let mut out = vec![0u8; 4];
            r.emit(&mut out).unwrap();
            prop_assert_eq!(&out[..], &b[..4]);
        }
    }

    #[test]
    fn arp(b in bytes().prop_map(|mut b| { if b.len() >= 8 { b[0..6].copy_from_slice(&[0, 1, 8, 0, 6, 4]); } b })) {
        if let Ok(p) = ArpPacket::new_checked(&b[..]) {
            let _ = (p.sender_hardware_addr(), p.target_protocol_addr());
            if let Ok(r) = ArpRepr::parse(&p) {
                let mut out = vec![0u8; 28];
                r.emit(&mut out).unwrap();
                prop_assert_eq!(ArpRepr::parse(&ArpPacket::new_checked(&out[..]).unwrap()).unwrap(), r);
                // Opcode is the only field besides addresses; the fixed types are Ethernet/IPv4.
                prop_assert_eq!(&out[..], &b[..28]);
            }
        }
    }

    #[test]
    fn ipv4(b in biased(4)) {
        if let Ok(p) = Ipv4Packet::new_checked(&b[..]) {
            let _ = (p.options(), p.payload(), p.verify_checksum());
            if let Ok(r) = Ipv4Repr::parse_unverified(&p) {
                let mut out = b[..p.total_len() as usize].to_vec();
                r.emit(&mut out).unwrap();
                let q = Ipv4Packet::new_checked(&out[..]).unwrap();
                prop_assert_eq!(Ipv4Repr::parse(&q), Ok(r)); // emitted checksum verifies
                prop_assert_eq!(q.payload(), p.payload());
                // Everything but the checksum and the reserved flag bit (not in the Repr) is kept.
                let mut a = b[..p.header_len()].to_vec();
                let mut c = out[..p.header_len()].to_vec();
                for v in [&mut a, &mut c] { v[10] = 0; v[11] = 0; v[6] &= 0x7F; }
                prop_assert_eq!(a, c);
            }
        }
    }

    #[test]
    fn ipv6(b in biased(6)) {
        if let Ok(p) = Ipv6Packet::new_checked(&b[..]) {
            let _ = p.payload();
            if let Ok(r) = Ipv6Repr::parse(&p) {
                let mut out = [0u8; 40];
                r.emit(&mut out).unwrap();
                prop_assert_eq!(&out[..], &b[..40]);
            }
        }
    }

    #[test]
    fn ipv6_ext_headers(b in bytes()) {
        if let Ok(h) = Ipv6ExtHeader::new_checked(&b[..]) {
            let r = Ipv6ExtHeaderRepr::parse(&h).unwrap();
            let mut out = vec![0u8; r.header_len().unwrap()];
            prop_assert_eq!(r.emit(&mut out), Ok(h.header_len()));
            prop_assert_eq!(&out[..], &b[..h.header_len()]);
        }
        if let Ok(h) = Ipv6FragHeader::new_checked(&b[..]) {
            let r = Ipv6FragRepr::parse(&h).unwrap();
            let mut out = [0u8; 8];
            r.emit(&mut out).unwrap();
            prop_assert_eq!(Ipv6FragRepr::parse(&Ipv6FragHeader::new_checked(&out[..]).unwrap()), Ok(r));
        }
        if let Ok(h) = AuthHeader::new_checked(&b[..]) {
            let r = AuthHeaderRepr::parse(&h).unwrap();
            let mut out = vec![0u8; r.header_len()];
            prop_assert_eq!(r.emit(&mut out), Ok(h.header_len()));
            prop_assert_eq!(AuthHeaderRepr::parse(&AuthHeader::new_checked(&out[..]).unwrap()), Ok(r));
        }
        let _ = fp_wire::ipv6ext::walk(fp_wire::IpProtocol(b.first().copied().unwrap_or(0)), &b);
    }

    #[test]
    fn tcp(b in biased(b'T')) {
        if let Ok(p) = TcpPacket::new_checked(&b[..]) {
            let _ = (p.options(), p.payload());
            let r = TcpRepr::parse(&p).unwrap();
            let mut out = b.clone();
            r.emit(&mut out, &addrs()).unwrap();
            let q = TcpPacket::new_checked(&out[..]).unwrap();
            prop_assert!(q.verify_checksum(&addrs()));
            prop_assert_eq!(TcpRepr::parse(&q), Ok(r));
            prop_assert_eq!(&out[..16], &b[..16]);
            prop_assert_eq!(&out[18..], &b[18..]);
        }
    }

    #[test]
    fn udp(b in biased(b'U')) {
        if let Ok(p) = UdpPacket::new_checked(&b[..]) {
            let _ = p.payload();
            let r = UdpRepr::parse(&p).unwrap();
            let mut out = b[..p.len() as usize].to_vec();
            r.emit(&mut out, Some(&addrs())).unwrap();
            let q = UdpPacket::new_checked(&out[..]).unwrap();
            prop_assert!(q.verify_checksum(&addrs()));
            prop_assert_eq!(UdpRepr::parse(&q), Ok(r));
            prop_assert_eq!(&out[..6], &b[..6]);
        }
    }

    #[test]
    fn icmp(b in bytes()) {
        if let Ok(p) = Icmpv4Packet::new_checked(&b[..]) {
            let r = IcmpRepr::parse_v4(&p).unwrap();
            let mut out = b.clone();
            r.emit_v4(&mut out).unwrap();
            let q = Icmpv4Packet::new_checked(&out[..]).unwrap();
            prop_assert!(q.verify_checksum());
            prop_assert_eq!(IcmpRepr::parse_v4(&q), Ok(r));
            let _ = (p.quoted(), p.next_hop_mtu());
        }
        if let Ok(p) = Icmpv6Packet::new_checked(&b[..]) {
            let r = IcmpRepr::parse_v6(&p).unwrap();
            let mut out = b.clone();
            r.emit_v6(&mut out, &addrs()).unwrap();
            let q = Icmpv6Packet::new_checked(&out[..]).unwrap();
            prop_assert!(q.verify_checksum(&addrs()));
            prop_assert_eq!(IcmpRepr::parse_v6(&q), Ok(r));
            let _ = (p.quoted(), p.mtu());
        }
    }

    #[test]
    fn gre(b in biased(b'G')) {
        if let Ok(p) = GrePacket::new_checked(&b[..]) {
            let r = GreRepr::parse(&p).unwrap();
            let mut out = b.clone();
            prop_assert_eq!(r.emit(&mut out), Ok(p.header_len()));
            let q = GrePacket::new_checked(&out[..]).unwrap();
            prop_assert!(q.verify_checksum());
            prop_assert_eq!(GreRepr::parse(&q), Ok(r));
            prop_assert_eq!(q.payload(), p.payload());
        }
    }

    #[test]
    fn vxlan(b in bytes()) {
        if let Ok(p) = VxlanPacket::new_checked(&b[..]) {
            if let Ok(r) = VxlanRepr::parse(&p) {
                let mut out = [0u8; 8];
                r.emit(&mut out).unwrap();
                let q = VxlanPacket::new_checked(&out[..]).unwrap();
                prop_assert!(q.is_canonical());
                prop_assert_eq!(VxlanRepr::parse(&q), Ok(r));
                prop_assert_eq!(p.is_canonical(), out[..] == b[..8]);
            }
        }
    }
}
