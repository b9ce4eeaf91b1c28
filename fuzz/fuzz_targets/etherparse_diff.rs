//! Differential fuzzing against etherparse 0.21: on any frame, fp-wire's summary parser (IPv4
//! checksum check off, as etherparse has none) and etherparse's `SlicedPacket` accept and reject
//! together, and agree on addresses, TTL, fragment state and ports — except for the documented
//! differences of docs/wire.md, each recognised here explicitly.
#![no_main]

use etherparse::{LinkExtSlice, NetSlice, SlicedPacket, TransportSlice};
use fp_wire::{Error, IpPair, L4Kind, PacketSummary, ParseOptions};
use libfuzzer_sys::fuzz_target;

const NO_CSUM: ParseOptions = ParseOptions { verify_ipv4_checksum: false, min_ttl: 0 };

fn vlan_count(f: &[u8]) -> usize {
    let mut off = 12;
    let mut n = 0;
    while f.len() >= off + 2 && matches!(u16::from_be_bytes([f[off], f[off + 1]]), 0x8100 | 0x88A8 | 0x9100) {
        n += 1;
        off += 4;
    }
    n
}

fuzz_target!(|frame: &[u8]| {
    if vlan_count(frame) > 2 {
        return; // documented: fp-wire accepts at most two tags
    }
    let l3 = 14 + 4 * vlan_count(frame);
    let v6_zero_len = frame.len() > l3 + 40 && frame[l3] >> 4 == 6 && frame[l3 + 4] == 0 && frame[l3 + 5] == 0;
    let ours = PacketSummary::parse_with(frame, &NO_CSUM);
    let ep = SlicedPacket::from_ethernet(frame);
    match (&ours, &ep) {
        (Err(_), Err(_)) => {}
        (Ok(s), Ok(e)) => {
            match (e.net.as_ref(), s.addrs) {
                (Some(NetSlice::Ipv4(ip)), IpPair::V4(a, b)) => {
                    let h = ip.header();
                    assert_eq!((h.source_addr(), h.destination_addr(), h.ttl()), (a, b, s.ttl));
                    assert_eq!(ip.is_payload_fragmented(), s.is_fragment());
                }
                (Some(NetSlice::Ipv6(ip)), IpPair::V6(a, b)) => {
                    let h = ip.header();
                    assert_eq!((h.source_addr(), h.destination_addr(), h.hop_limit()), (a, b, s.ttl));
                    if h.payload_length() == 0 {
                        return; // documented: etherparse takes the rest of the slice
                    }
                    assert_eq!(ip.is_payload_fragmented(), s.is_fragment());
                    if !s.is_non_first_fragment() {
                        assert_eq!(ip.payload().ip_number.0, s.protocol.0);
                    }
                }
                (n, _) => panic!("network layer differs: {n:?} vs {s:?}"),
            }
            match (&e.transport, s.l4) {
                (Some(TransportSlice::Tcp(t)), L4Kind::Tcp) => {
                    assert_eq!((t.source_port(), t.destination_port()), (s.src_port, s.dst_port))
                }
                (Some(TransportSlice::Udp(u)), L4Kind::Udp) => {
                    assert_eq!((u.source_port(), u.destination_port()), (s.src_port, s.dst_port))
                }
                _ => {}
            }
        }
        (Err(err), Ok(e)) => {
            let fragmented = match e.net.as_ref() {
                Some(NetSlice::Ipv4(ip)) => ip.is_payload_fragmented(),
                Some(NetSlice::Ipv6(ip)) => ip.is_payload_fragmented(),
                _ => false,
            };
            let documented = match err {
                // Non-IP ethertypes, and MACsec (0x88E5), whose unencrypted payload etherparse reads.
                Error::UnknownEthertype => {
                    !matches!(e.net, Some(NetSlice::Ipv4(_)) | Some(NetSlice::Ipv6(_)))
                        || e.link_exts.iter().any(|x| matches!(x, LinkExtSlice::Macsec(_)))
                }
                Error::UdpBadLength => matches!(&e.transport, Some(TransportSlice::Udp(u)) if u.length() == 0),
                Error::Ipv4BadFragment | Error::Ipv6TooManyExtHeaders => true,
                Error::TcpTruncated | Error::TcpBadDataOffset | Error::UdpTruncated | Error::IcmpTruncated | Error::Icmpv6Truncated => fragmented,
                Error::Ipv4BadTotalLen | Error::Ipv6BadPayloadLen => frame.len() > 0xFFFF,
                _ => false,
            } || v6_zero_len;
            assert!(documented, "fp-wire rejects ({err:?}), etherparse accepts: {e:?}");
        }
        (Ok(s), Err(err)) => {
            // etherparse also requires ICMP timestamp messages (type 13/14, code 0) to be exactly
            // 20 bytes; fp-wire checks only the 8-byte ICMP header.
            let timestamp = s.l4 == L4Kind::Icmpv4 && matches!(s.icmp_type, 13 | 14) && s.icmp_code == 0;
            let documented = s.protocol.0 == 2 || s.is_non_first_fragment() || v6_zero_len || timestamp;
            assert!(documented, "fp-wire accepts ({s:?}), etherparse rejects: {err:?}");
        }
    }
});
