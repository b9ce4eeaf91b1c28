//! Path MTU: for any IP packet and any MTU, the fragments `Fragmenter` cuts fit the MTU, carry
//! the datagram's identification and reassemble to exactly its payload; the ICMP "too big" error
//! `too_big_in_place` writes has a valid checksum, comes from the packet's destination and quotes
//! the packet's first bytes unchanged. Input: two bytes of MTU, then the IP packet.
#![no_main]

use fp_wire::icmp::{Icmpv4Packet, Icmpv6Packet};
use fp_wire::ipv4::Ipv4Packet;
use fp_wire::ipv6::Ipv6Packet;
use fp_wire::pmtu::{too_big_in_place, Fragmenter};
use fp_wire::IpPair;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 3 {
        return;
    }
    let mtu = 68 + u16::from_be_bytes([data[0], data[1]]) as usize % 2000;
    let ip = &data[2..];

    if let Ok(f) = Fragmenter::new(ip, mtu) {
        let orig = Ipv4Packet::new_checked(ip).expect("planned from a valid header");
        let payload = orig.payload();
        let mut seen = vec![0u8; payload.len()];
        let mut covered = 0;
        let mut first = ip.to_vec();
        let n = f.first_in_place(&mut first).expect("the datagram it planned");
        let mut pieces = vec![first[..n].to_vec()];
        for i in 1..f.count() {
            let mut out = vec![0u8; mtu];
            let n = f.emit(ip, i, &mut out).expect("a piece fits the MTU");
            pieces.push(out[..n].to_vec());
        }
        for (i, p) in pieces.iter().enumerate() {
            assert!(p.len() <= mtu.max(orig.header_len() + 8), "piece {i}: {} > {mtu}", p.len());
            let v = Ipv4Packet::new_checked(&p[..]).expect("a piece is a valid header");
            assert!(v.verify_checksum());
            assert_eq!(v.ident(), orig.ident());
            assert_eq!((v.src_addr(), v.dst_addr()), (orig.src_addr(), orig.dst_addr()));
            let last = i + 1 == pieces.len();
            assert_eq!(v.more_frags(), !last || orig.more_frags());
            let off = (v.frag_offset() - orig.frag_offset()) as usize;
            assert!(i + 1 == pieces.len() || v.payload().len() % 8 == 0);
            seen[off..off + v.payload().len()].copy_from_slice(v.payload());
            covered += v.payload().len();
        }
        assert_eq!(covered, payload.len());
        assert_eq!(&seen[..], payload);
    }

    // The error, written in front of the packet in a frame with 64 bytes of headroom.
    let mut buf = vec![0u8; 64 + 14 + ip.len()];
    buf[64..70].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    buf[70..76].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    buf[78..].copy_from_slice(ip);
    let end = buf.len();
    if let Ok(r) = too_big_in_place(&mut buf, 64..end, 78..end, mtu as u16, 1) {
        let f = &buf[r];
        assert_eq!(&f[0..6], &[2, 0, 0, 0, 0, 2]);
        match f[14] >> 4 {
            4 => {
                let o = Ipv4Packet::new_checked(ip).unwrap();
                let e = Ipv4Packet::new_checked(&f[14..]).expect("a valid IPv4 header");
                assert!(e.verify_checksum());
                assert_eq!((e.src_addr(), e.dst_addr()), (o.dst_addr(), o.src_addr()));
                let m = Icmpv4Packet::new_checked(e.payload()).unwrap();
                assert!(m.verify_checksum());
                assert_eq!(m.next_hop_mtu() as usize, mtu);
                assert_eq!(m.body(), &ip[..m.body().len()]);
                assert!(f.len() - 14 <= 576);
            }
            6 => {
                let o = Ipv6Packet::new_checked(&ip[..]).ok();
                let e = Ipv6Packet::new_checked(&f[14..]).expect("a valid IPv6 header");
                if let Some(o) = o {
                    assert_eq!((e.src_addr(), e.dst_addr()), (o.dst_addr(), o.src_addr()));
                }
                let m = Icmpv6Packet::new_checked(e.payload()).unwrap();
                assert!(m.verify_checksum(&IpPair::V6(e.src_addr(), e.dst_addr())));
                assert!(m.mtu() >= 1280);
                assert_eq!(m.body(), &ip[..m.body().len()]);
                assert!(f.len() - 14 <= 1280);
            }
            v => panic!("error of IP version {v}"),
        }
    }
});
