//! The one-pass parser on arbitrary frames. Invariants, not just "no crash":
//! * offsets of an accepted frame are ordered and inside the frame, TTL policy is honoured;
//! * the per-layer views agree with the summary (addresses, protocol, ports);
//! * after `fill_l4_checksum` the L4 checksum verifies, and filling again changes nothing;
//! * the same datagram without its link layer (`parse_ip`) gives the same summary;
//! * decapsulation, ICMP quotes and L2 parsing never panic, and a decapsulated range is in bounds.
#![no_main]

use fp_wire::encap::decapsulate;
use fp_wire::ipv4::Ipv4Packet;
use fp_wire::ipv6::Ipv6Packet;
use fp_wire::{offload, IpPair, L2Header, L4Kind, PacketSummary, ParseOptions};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&knob, frame)) = data.split_first() else { return };
    let opts = ParseOptions { verify_ipv4_checksum: knob & 1 == 0, min_ttl: if knob & 2 != 0 { knob >> 2 } else { 0 } };
    let _ = L2Header::parse(frame);
    let Ok(s) = PacketSummary::parse_with(frame, &opts) else {
        let _ = PacketSummary::parse_ip(frame, &opts);
        return;
    };
    assert!(s.l2.l3_offset == s.l3_offset);
    assert!(s.l3_offset <= s.l4_offset);
    assert!(s.l4_offset as usize + s.l4_len as usize <= s.l3_end());
    assert!(s.l3_end() <= frame.len());
    assert!(s.ttl >= opts.min_ttl);
    assert!(!(s.has_ports() && s.is_non_first_fragment()));

    let ip = s.ip_bytes(frame);
    match s.addrs {
        IpPair::V4(a, b) => {
            let p = Ipv4Packet::new_checked(ip).expect("summary accepted what the view rejects");
            assert_eq!((p.src_addr(), p.dst_addr(), p.ttl()), (a, b, s.ttl));
            assert_eq!(p.total_len(), s.l3_len);
            if opts.verify_ipv4_checksum {
                assert!(p.verify_checksum());
            }
        }
        IpPair::V6(a, b) => {
            let p = Ipv6Packet::new_checked(ip).expect("summary accepted what the view rejects");
            assert_eq!((p.src_addr(), p.dst_addr(), p.hop_limit()), (a, b, s.ttl));
        }
    }
    if s.has_ports() {
        let l4 = s.l4_bytes(frame);
        assert_eq!(u16::from_be_bytes([l4[0], l4[1]]), s.src_port);
        assert_eq!(u16::from_be_bytes([l4[2], l4[3]]), s.dst_port);
    }

    let raw = PacketSummary::parse_ip(ip, &opts).expect("datagram alone rejected");
    assert_eq!((raw.addrs, raw.protocol, raw.l4, raw.src_port, raw.dst_port, raw.fragment), (s.addrs, s.protocol, s.l4, s.src_port, s.dst_port, s.fragment));
    assert_eq!(raw.l4_offset - raw.l3_offset, s.l4_offset - s.l3_offset);

    let mut g = frame.to_vec();
    if offload::fill_l4_checksum(&mut g, &s).is_ok() {
        assert_eq!(offload::verify_l4_checksum(&g, &s), Ok(true));
        let h = g.clone();
        offload::fill_l4_checksum(&mut g, &s).unwrap();
        assert_eq!(g, h, "filling a valid checksum changed it");
        assert!(s.l4 != L4Kind::None && !s.is_fragment());
    }
    let _ = s.icmp_quoted(frame);
    if let Ok(d) = decapsulate(frame, &s, 4789) {
        assert!(d.inner_range().end <= s.l3_end());
        assert!(d.inner_offset >= s.l4_offset as usize);
        let inner = &frame[d.inner_range()];
        let _ = PacketSummary::parse(inner);
        let _ = PacketSummary::parse_ip(inner, &opts);
    }
});
