//! Encapsulation: for any inner bytes and any tunnel configuration (taken from the first 24 input
//! bytes), `encapsulate` either fails with one of its documented errors, or produces a frame that
//! the summary parser accepts (IPv4 header checksum verified), whose outer addresses are the
//! configured ones, whose UDP checksum verifies when present, and that decapsulates to exactly the
//! inner bytes.
#![no_main]

use fp_wire::encap::{decapsulate, Encap, InnerKind, OuterIp, OuterL2, Tunnel};
use fp_wire::ethernet::MacAddr;
use fp_wire::vlan::Tci;
use fp_wire::{offload, Error, PacketSummary};
use libfuzzer_sys::fuzz_target;

fn u32_at(p: &[u8], i: usize) -> u32 {
    u32::from_be_bytes([p[i], p[i + 1], p[i + 2], p[i + 3]])
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 24 {
        return;
    }
    let (p, inner) = data.split_at(24);
    let mut a16 = [0u8; 16];
    a16.copy_from_slice(&p[1..17]);
    let mut b16 = a16;
    b16.reverse();
    let ip = if p[0] & 1 == 0 {
        OuterIp::V4 { src: u32_at(p, 1).into(), dst: u32_at(p, 5).into(), ttl: p[9] }
    } else {
        OuterIp::V6 { src: a16.into(), dst: b16.into(), hop_limit: p[9] }
    };
    let f = p[18];
    let tunnel = match p[17] % 3 {
        0 => Tunnel::Gre {
            key: (f & 1 != 0).then(|| u32_at(p, 19)),
            sequence: (f & 2 != 0).then(|| u32_at(p, 10)),
            checksum: f & 4 != 0,
            recursion: (f >> 5) & 7,
        },
        1 => Tunnel::Ipip,
        _ => Tunnel::Vxlan {
            vni: u32_at(p, 19) & 0xFF_FFFF,
            dst_port: 4789,
            inner_src: MacAddr([2, 0, 0, 0, 0, 1]),
            inner_dst: MacAddr([2, 0, 0, 0, 0, 2]),
            udp_checksum: f & 8 != 0,
        },
    };
    let vlan = (p[23] & 1 != 0).then(|| Tci(u16::from_be_bytes([p[21], p[22]])));
    let e = Encap { l2: OuterL2 { src: MacAddr([2, 0, 0, 0, 0, 3]), dst: MacAddr([2, 0, 0, 0, 0, 4]), vlan }, ip, tunnel };
    let at = e.overhead() + ((p[23] >> 1) & 15) as usize;
    let mut buf = vec![0u8; at + inner.len()];
    buf[at..].copy_from_slice(inner);
    let before = buf.clone();
    match e.encapsulate(&mut buf, at..at + inner.len(), u32_at(p, 10) as u64, p[20] as u16) {
        Err(err) => {
            assert!(matches!(err, Error::UnknownEthertype | Error::Ipv4Truncated | Error::Ipv6Truncated | Error::PacketTooBig), "{err:?}");
            assert_eq!(buf, before, "buffer changed on error");
        }
        Ok(start) => {
            assert_eq!(start, at - e.overhead());
            let frame = &buf[start..];
            let s = PacketSummary::parse(frame).expect("encapsulated frame rejected");
            assert_eq!(s.addrs, ip.addrs());
            if matches!(tunnel, Tunnel::Vxlan { .. }) {
                assert_eq!(offload::verify_l4_checksum(frame, &s), Ok(true));
            }
            let d = decapsulate(frame, &s, 4789).expect("own tunnel not decapsulated");
            let got = &frame[d.inner_range()];
            match d.inner {
                InnerKind::Ethernet => assert_eq!(&got[14..], inner),
                _ => assert_eq!(got, inner),
            }
            if let Tunnel::Gre { recursion, key, .. } = tunnel {
                let g = d.gre.unwrap();
                assert_eq!((g.recursion, g.key), (recursion, key));
            }
        }
    }
});
