//! Every format: bytes that `new_checked` and `Repr::parse` accept, re-emitted from the `Repr`,
//! parse to the same `Repr` (and emitted checksums verify). The first byte picks the format.
#![no_main]

use fp_wire::arp::{ArpPacket, ArpRepr};
use fp_wire::ethernet::{EthernetFrame, EthernetRepr};
use fp_wire::gre::{GrePacket, GreRepr};
use fp_wire::icmp::{IcmpRepr, Icmpv4Packet, Icmpv6Packet};
use fp_wire::ipv4::{Ipv4Packet, Ipv4Repr};
use fp_wire::ipv6::{Ipv6Packet, Ipv6Repr};
use fp_wire::ipv6ext::{self, AuthHeader, AuthHeaderRepr, Ipv6ExtHeader, Ipv6ExtHeaderRepr, Ipv6FragHeader, Ipv6FragRepr};
use fp_wire::tcp::{TcpPacket, TcpRepr};
use fp_wire::udp::{UdpPacket, UdpRepr};
use fp_wire::vlan::{VlanHeader, VlanRepr};
use fp_wire::vxlan::{VxlanPacket, VxlanRepr};
use fp_wire::{IpPair, IpProtocol};
use libfuzzer_sys::fuzz_target;

fn addrs(b: &[u8]) -> IpPair {
    let mut a = [0u8; 16];
    for (i, x) in b.iter().take(16).enumerate() {
        a[i] = *x;
    }
    IpPair::V6(a.into(), [0x20, 1, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1].into())
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, b)) = data.split_first() else { return };
    match sel % 12 {
        0 => {
            if let Ok(p) = EthernetFrame::new_checked(b) {
                let r = EthernetRepr::parse(&p).unwrap();
                let mut out = b.to_vec();
                r.emit(&mut out).unwrap();
                assert_eq!(out, b);
            }
        }
        1 => {
            if let Ok(p) = VlanHeader::new_checked(b) {
                let r = VlanRepr::parse(&p).unwrap();
                let mut out = [0u8; 4];
                r.emit(&mut out).unwrap();
                assert_eq!(&out[..], &b[..4]);
            }
        }
        2 => {
            if let Ok(p) = ArpPacket::new_checked(b) {
                let _ = (p.sender_hardware_addr(), p.sender_protocol_addr(), p.target_hardware_addr(), p.target_protocol_addr());
                if let Ok(r) = ArpRepr::parse(&p) {
                    let mut out = [0u8; 28];
                    r.emit(&mut out).unwrap();
                    assert_eq!(&out[..], &b[..28]);
                }
            }
        }
        3 => {
            if let Ok(p) = Ipv4Packet::new_checked(b) {
                let _ = (p.options(), p.payload());
                if let Ok(r) = Ipv4Repr::parse_unverified(&p) {
                    let mut out = b[..p.total_len() as usize].to_vec();
                    r.emit(&mut out).unwrap();
                    let q = Ipv4Packet::new_checked(&out[..]).unwrap();
                    assert_eq!(Ipv4Repr::parse(&q), Ok(r));
                    assert_eq!(q.payload(), p.payload());
                    // Setters that break length fields must not make accessors panic.
                    let mut m = Ipv4Packet::new_checked(&mut out[..]).unwrap();
                    m.set_version_and_header_len(60);
                    m.set_total_len(0xFFFF);
                    let _ = (m.options_mut().len(), m.payload_mut().len(), m.verify_checksum());
                    m.fill_checksum();
                    m.decrement_ttl();
                }
            }
        }
        4 => {
            if let Ok(p) = Ipv6Packet::new_checked(b) {
                let _ = p.payload();
                if let Ok(r) = Ipv6Repr::parse(&p) {
                    let mut out = [0u8; 40];
                    r.emit(&mut out).unwrap();
                    assert_eq!(&out[..], &b[..40]);
                }
            }
        }
        5 => {
            if let Ok(h) = Ipv6ExtHeader::new_checked(b) {
                let r = Ipv6ExtHeaderRepr::parse(&h).unwrap();
                let mut out = vec![0u8; r.header_len().unwrap()];
                assert_eq!(r.emit(&mut out), Ok(h.header_len()));
                assert_eq!(&out[..], &b[..h.header_len()]);
            }
            if let Ok(h) = Ipv6FragHeader::new_checked(b) {
                let r = Ipv6FragRepr::parse(&h).unwrap();
                let mut out = [0u8; 8];
                r.emit(&mut out).unwrap();
                assert_eq!(Ipv6FragRepr::parse(&Ipv6FragHeader::new_checked(&out[..]).unwrap()), Ok(r));
            }
            if let Ok(h) = AuthHeader::new_checked(b) {
                let r = AuthHeaderRepr::parse(&h).unwrap();
                let mut out = vec![0u8; r.header_len()];
                assert_eq!(r.emit(&mut out), Ok(h.header_len()));
                assert_eq!(AuthHeaderRepr::parse(&AuthHeader::new_checked(&out[..]).unwrap()), Ok(r));
                // All but the reserved bytes 2..4 (not in the Repr; emitted as zero).
                assert_eq!((&out[..2], &out[4..]), (&b[..2], &b[4..h.header_len()]));
            }
            if let Some((&first, rest)) = b.split_first() {
                if let Ok(c) = ipv6ext::walk(IpProtocol(first), rest) {
                    assert!(c.offset <= rest.len());
                    assert!(c.count as usize <= ipv6ext::MAX_EXT_HEADERS + 1);
                }
            }
        }
        6 => {
            if let Ok(p) = TcpPacket::new_checked(b) {
                let _ = (p.options(), p.payload());
                let r = TcpRepr::parse(&p).unwrap();
                let a = addrs(b);
                let mut out = b.to_vec();
                r.emit(&mut out, &a).unwrap();
                let q = TcpPacket::new_checked(&out[..]).unwrap();
                assert!(q.verify_checksum(&a));
                assert_eq!(TcpRepr::parse(&q), Ok(r));
                assert_eq!(&out[..16], &b[..16]);
                assert_eq!(&out[18..], &b[18..]);
            }
        }
        7 => {
            if let Ok(p) = UdpPacket::new_checked(b) {
                let r = UdpRepr::parse(&p).unwrap();
                let a = addrs(b);
                let mut out = b[..p.len() as usize].to_vec();
                r.emit(&mut out, Some(&a)).unwrap();
                let q = UdpPacket::new_checked(&out[..]).unwrap();
                assert!(q.verify_checksum(&a));
                assert_eq!(UdpRepr::parse(&q), Ok(r));
                assert_eq!(q.payload(), p.payload());
            }
        }
        8 => {
            if let Ok(p) = Icmpv4Packet::new_checked(b) {
                let r = IcmpRepr::parse_v4(&p).unwrap();
                let mut out = b.to_vec();
                r.emit_v4(&mut out).unwrap();
                let q = Icmpv4Packet::new_checked(&out[..]).unwrap();
                assert!(q.verify_checksum());
                assert_eq!(IcmpRepr::parse_v4(&q), Ok(r));
                let _ = (p.quoted(), p.next_hop_mtu());
            }
        }
        9 => {
            if let Ok(p) = Icmpv6Packet::new_checked(b) {
                let r = IcmpRepr::parse_v6(&p).unwrap();
                let a = addrs(b);
                let mut out = b.to_vec();
                r.emit_v6(&mut out, &a).unwrap();
                let q = Icmpv6Packet::new_checked(&out[..]).unwrap();
                assert!(q.verify_checksum(&a));
                assert_eq!(IcmpRepr::parse_v6(&q), Ok(r));
                let _ = (p.quoted(), p.mtu());
            }
        }
        10 => {
            if let Ok(p) = GrePacket::new_checked(b) {
                let r = GreRepr::parse(&p).unwrap();
                let mut out = b.to_vec();
                assert_eq!(r.emit(&mut out), Ok(p.header_len()));
                let q = GrePacket::new_checked(&out[..]).unwrap();
                assert!(q.verify_checksum());
                assert_eq!(GreRepr::parse(&q), Ok(r));
                assert_eq!(q.payload(), p.payload());
            }
        }
        _ => {
            if let Ok(p) = VxlanPacket::new_checked(b) {
                if let Ok(r) = VxlanRepr::parse(&p) {
                    let mut out = [0u8; 8];
                    r.emit(&mut out).unwrap();
                    let q = VxlanPacket::new_checked(&out[..]).unwrap();
                    assert!(q.is_canonical());
                    assert_eq!(VxlanRepr::parse(&q), Ok(r));
                }
            }
        }
    }
});
