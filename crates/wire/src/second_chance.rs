//! Second chance: an outer-header option by which a balancer names, in a tunnel packet, the
//! backend a flow most likely lived on before the backend set changed. The receiving backend
//! (`flowplane backend`'s decapsulation program) delivers the packet locally when it has a socket
//! for the flow or the packet opens one (a TCP SYN), and otherwise forwards it, with the option
//! removed, to the named backend instead of answering it with a reset. This is the "second chance"
//! of GitHub's GLB Director and Cloudflare's Unimog (Beamer's daisy chaining), carried in the
//! outer IP header so that it works the same under GRE and IP-in-IP.
//!
//! ```text
//! IPv4 outer (IHL 5 → 7, total length + 8): an option right after the fixed header
//!   0      1      2        3       4            8
//!   | 0x9E | 8    | ver 1  | 0     | backend IPv4 address |
//!   type 0x9E: copy 1, class 0, number 30 (RFC 4727's experimental option)
//!
//! IPv6 outer (payload length + 24): a Destination Options header (next header 60) between the
//! fixed header and the tunnel header
//!   0       1        2      3      4       5       6 ........ 21    22     23
//!   | next  | len 2  | 0x1E | 18   | ver 1 | 0     | backend IPv6  | 0x01 | 0x00 |
//!   option 0x1E: action 00 (skip if unknown), may not change en route, RFC 4727's experimental
//!   type; PadN of two bytes fills the header to 24
//! ```
//!
//! Overhead: 8 bytes per packet over IPv4, 24 over IPv6, only on the packets of flows the
//! balancer has no connection entry for and whose backend moved; the option names a backend of
//! the outer header's family only (a flow whose previous backend has the other family gets none).

use crate::checksum;
use crate::error::{Error, Result};
use crate::ipv4;
use crate::ipv6;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The IPv4 option type (copied on fragmentation, class 0, number 30).
pub const IPV4_OPTION: u8 = 0x9E;
/// Bytes the option adds to an IPv4 outer header.
pub const IPV4_LEN: usize = 8;
/// The IPv6 destination option type.
pub const IPV6_OPTION: u8 = 0x1E;
/// Bytes the Destination Options header adds after an IPv6 outer header.
pub const IPV6_LEN: usize = 24;
/// Layout version written in the option.
pub const VERSION: u8 = 1;
/// IPv6 next-header value of a Destination Options header.
const DEST_OPTS: u8 = 60;

/// Bytes the option adds to an outer header of the given family.
#[inline]
pub const fn overhead(outer_v6: bool) -> usize {
    if outer_v6 {
        IPV6_LEN
    } else {
        IPV4_LEN
    }
}

/// Add the option naming `backend` to the encapsulated frame `buf[start..end]`, whose outer IP
/// header (IPv4 with IHL 5, or IPv6 whose next header is the tunnel) begins `l2_len` bytes into
/// the frame. The Ethernet and IP headers move [`overhead`] bytes toward the buffer's start;
/// returns the frame's new start. Errors (the buffer unchanged): `NoHeadroom`, `BufferTooSmall`,
/// `Ipv4BadIhl` (an outer header that already has options), `UnknownEthertype` (`backend` of the
/// other family than the outer header), `PacketTooBig`.
pub fn insert(
    buf: &mut [u8],
    start: usize,
    end: usize,
    l2_len: usize,
    backend: IpAddr,
) -> Result<usize> {
    let ip = start + l2_len;
    let first = *buf.get(ip).ok_or(Error::BufferTooSmall)?;
    match (first >> 4, backend) {
        (4, IpAddr::V4(b)) => insert_v4(buf, start, end, l2_len, b),
        (6, IpAddr::V6(b)) => insert_v6(buf, start, end, l2_len, b),
        (4 | 6, _) => Err(Error::UnknownEthertype),
        _ => Err(Error::Ipv4BadVersion),
    }
}

fn insert_v4(buf: &mut [u8], start: usize, end: usize, l2: usize, b: Ipv4Addr) -> Result<usize> {
    let hdr = l2 + ipv4::HEADER_LEN;
    if end > buf.len() || start + hdr > end {
        return Err(Error::BufferTooSmall);
    }
    if buf[start + l2] != 0x45 {
        return Err(Error::Ipv4BadIhl);
    }
    let new = start.checked_sub(IPV4_LEN).ok_or(Error::NoHeadroom)?;
    let total = u16::from_be_bytes([buf[start + l2 + 2], buf[start + l2 + 3]]) as usize + IPV4_LEN;
    if total > 0xFFFF {
        return Err(Error::PacketTooBig);
    }
    buf.copy_within(start..start + hdr, new);
    let h = &mut buf[new + l2..new + hdr + IPV4_LEN];
    h[0] = 0x47;
    h[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    h[10..12].fill(0);
    h[20] = IPV4_OPTION;
    h[21] = IPV4_LEN as u8;
    h[22] = VERSION;
    h[23] = 0;
    h[24..28].copy_from_slice(&b.octets());
    let c = checksum::checksum(h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    Ok(new)
}

fn insert_v6(buf: &mut [u8], start: usize, end: usize, l2: usize, b: Ipv6Addr) -> Result<usize> {
    let hdr = l2 + ipv6::HEADER_LEN;
    if end > buf.len() || start + hdr > end {
        return Err(Error::BufferTooSmall);
    }
    let new = start.checked_sub(IPV6_LEN).ok_or(Error::NoHeadroom)?;
    let payload =
        u16::from_be_bytes([buf[start + l2 + 4], buf[start + l2 + 5]]) as usize + IPV6_LEN;
    if payload > 0xFFFF {
        return Err(Error::PacketTooBig);
    }
    buf.copy_within(start..start + hdr, new);
    let h = &mut buf[new + l2..new + hdr + IPV6_LEN];
    let next = h[6];
    h[4..6].copy_from_slice(&(payload as u16).to_be_bytes());
    h[6] = DEST_OPTS;
    let o = &mut h[ipv6::HEADER_LEN..];
    o[0] = next;
    o[1] = (IPV6_LEN / 8 - 1) as u8;
    o[2] = IPV6_OPTION;
    o[3] = 18;
    o[4] = VERSION;
    o[5] = 0;
    o[6..22].copy_from_slice(&b.octets());
    o[22] = 1; // PadN
    o[23] = 0;
    Ok(new)
}

/// The backend named by the option in the outer IP packet `ip` (starting at its IP header), if
/// the packet carries one of this layout's version.
pub fn find(ip: &[u8]) -> Option<IpAddr> {
    match ip.first()? >> 4 {
        4 => {
            let o = ip.get(ipv4::HEADER_LEN..ipv4::HEADER_LEN + IPV4_LEN)?;
            let ok = ip[0] & 0x0F >= 7 && o[0] == IPV4_OPTION && o[1] == IPV4_LEN as u8;
            (ok && o[2] == VERSION).then(|| IpAddr::V4(Ipv4Addr::new(o[4], o[5], o[6], o[7])))
        }
        6 => {
            let o = ip.get(ipv6::HEADER_LEN..ipv6::HEADER_LEN + IPV6_LEN)?;
            let ok = ip[6] == DEST_OPTS && o[1] == 2 && o[2] == IPV6_OPTION && o[3] == 18;
            let mut a = [0u8; 16];
            a.copy_from_slice(&o[6..22]);
            (ok && o[4] == VERSION).then(|| IpAddr::V6(Ipv6Addr::from(a)))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encap::{Encap, OuterIp, OuterL2, Tunnel};
    use crate::ethernet::MacAddr;
    use crate::summary::PacketSummary;

    fn inner_v4() -> [u8; 40] {
        let mut p = [0u8; 40];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&40u16.to_be_bytes());
        p[8] = 64;
        p[9] = 6;
        p[12..16].copy_from_slice(&[192, 0, 2, 7]);
        p[16..20].copy_from_slice(&[203, 0, 113, 10]);
        p[32] = 0x50;
        p[33] = 0x10; // ACK
        let c = checksum::checksum(&p[..20]);
        p[10..12].copy_from_slice(&c.to_be_bytes());
        p
    }

    fn encapsulated(ip: OuterIp, tunnel: Tunnel) -> (std::vec::Vec<u8>, usize) {
        let mut buf = std::vec![0u8; 256];
        buf[128..168].copy_from_slice(&inner_v4());
        let e = Encap {
            l2: OuterL2 {
                src: MacAddr([2, 0, 0, 0, 0, 1]),
                dst: MacAddr([2, 0, 0, 0, 0, 2]),
                vlan: None,
            },
            ip,
            tunnel,
        };
        let s = e.encapsulate(&mut buf, 128..168, 7, 9).unwrap();
        (buf, s)
    }

    #[test]
    fn ipv4_option_round_trips_and_the_header_stays_valid() {
        for tunnel in [Tunnel::GRE, Tunnel::Ipip] {
            let ip = OuterIp::V4 {
                src: Ipv4Addr::new(10, 0, 0, 1),
                dst: Ipv4Addr::new(10, 0, 0, 2),
                ttl: 64,
            };
            let (mut buf, s) = encapsulated(ip, tunnel);
            let named = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 3));
            let n = insert(&mut buf, s, 168, 14, named).unwrap();
            assert_eq!(n, s - IPV4_LEN);
            let frame = &buf[n..168];
            assert_eq!(find(&frame[14..]), Some(named));
            let sum = PacketSummary::parse(frame).unwrap();
            assert_eq!(sum.l3_len as usize, 28 + tunnel.len() + 40);
            assert!(checksum::verify(&frame[14..42]), "outer checksum");
            // The inner packet did not move.
            assert_eq!(&buf[128..168], &inner_v4());
        }
    }

    #[test]
    fn ipv6_destination_option_round_trips() {
        let ip = OuterIp::V6 {
            src: "fd00::1".parse().unwrap(),
            dst: "fd00::2".parse().unwrap(),
            hop_limit: 64,
        };
        let (mut buf, s) = encapsulated(ip, Tunnel::GRE);
        let named: IpAddr = "fd00::3".parse().unwrap();
        let n = insert(&mut buf, s, 168, 14, named).unwrap();
        let frame = &buf[n..168];
        assert_eq!(find(&frame[14..]), Some(named));
        assert_eq!(u16::from_be_bytes([frame[18], frame[19]]), 24 + 4 + 40);
        assert_eq!(frame[14 + 40], 47, "the tunnel follows the options header");
    }

    #[test]
    fn refusals_leave_the_buffer_alone() {
        let ip = OuterIp::V4 {
            src: Ipv4Addr::new(10, 0, 0, 1),
            dst: Ipv4Addr::new(10, 0, 0, 2),
            ttl: 64,
        };
        let (mut buf, s) = encapsulated(ip, Tunnel::GRE);
        let before = buf.clone();
        let v6: IpAddr = "fd00::3".parse().unwrap();
        assert_eq!(
            insert(&mut buf, s, 168, 14, v6),
            Err(Error::UnknownEthertype)
        );
        assert_eq!(
            insert(
                &mut buf[s - 4..],
                4,
                168 - (s - 4),
                14,
                Ipv4Addr::LOCALHOST.into()
            ),
            Err(Error::NoHeadroom)
        );
        assert_eq!(buf, before);
        assert_eq!(find(&buf[s + 14..]), None);
    }
}
