//! Second chance: an outer-header option by which a balancer names, in a tunnel packet, the
//! backends a flow may have lived on before the backend set changed (newest change first). The
//! receiving backend (`flowplane backend`'s decapsulation program) delivers the packet locally
//! when it has a socket for the flow or the packet opens one (a TCP SYN); otherwise it sends the
//! packet on to the next named backend, which does the same, until the list is used up (the last
//! one delivers, or resets). This is the "second chance" of GitHub's GLB Director and
//! Cloudflare's Unimog, as a chain (Beamer's daisy chaining over several changes), carried in the
//! outer IP header so that it works the same under GRE and IP-in-IP.
//!
//! ```text
//! IPv4 outer (IHL 5 → 6 + n, total length + 4 + 4n): an option right after the fixed header
//!   0      1          2       3      4 ............ 4 + 4n
//!   | 0x9E | 4 + 4n   | ver 1 | next | n IPv4 addresses |
//!   type 0x9E: copy 1, class 0, number 30 (RFC 4727's experimental option); n = 1..=4;
//!   next: index of the address the next backend without a socket forwards to (each forward
//!   advances it; next = n: used up)
//!
//! IPv6 outer (payload length + 8 + 16n): a Destination Options header (next header 60) between
//! the fixed header and the tunnel header
//!   0       1        2      3        4       5      6 ............ 6 + 16n    +2
//!   | next  | 2n     | 0x1E | 2+16n  | ver 1 | next | n IPv6 addresses | PadN 0x01 0x00 |
//!   option 0x1E: action 00 (skip if unknown), may not change en route, RFC 4727's experimental
//!   type
//! ```
//!
//! Overhead: 4 + 4n bytes per packet over IPv4 (8 for one name), 8 + 16n over IPv6, only on the
//! packets of flows the balancer has no connection entry for and whose backend moved; the option
//! names backends of the outer header's family only.

use crate::checksum;
use crate::error::{Error, Result};
use crate::ipv4;
use crate::ipv6;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The IPv4 option type (copied on fragmentation, class 0, number 30).
pub const IPV4_OPTION: u8 = 0x9E;
/// The IPv6 destination option type.
pub const IPV6_OPTION: u8 = 0x1E;
/// Layout version written in the option.
pub const VERSION: u8 = 1;
/// Most backends one option names.
pub const MAX_NAMED: usize = 4;
/// IPv6 next-header value of a Destination Options header.
const DEST_OPTS: u8 = 60;

/// Bytes the option adds to an outer header of the given family when it names `n` backends.
#[inline]
pub const fn overhead(outer_v6: bool, n: usize) -> usize {
    if outer_v6 {
        8 + 16 * n
    } else {
        4 + 4 * n
    }
}

/// Add the option naming `named` (1 to [`MAX_NAMED`] backends, first the one to try first) to
/// the encapsulated frame `buf[start..end]`, whose outer IP header (IPv4 with IHL 5, or IPv6
/// whose next header is the tunnel) begins `l2_len` bytes into the frame. The Ethernet and IP
/// headers move [`overhead`] bytes toward the buffer's start; returns the frame's new start.
/// Errors (the buffer unchanged): `NoHeadroom`, `BufferTooSmall` (also: no name, or more than
/// [`MAX_NAMED`]), `Ipv4BadIhl` (an outer header that already has options), `UnknownEthertype`
/// (a name of the other family than the outer header), `PacketTooBig`.
pub fn insert(
    buf: &mut [u8],
    start: usize,
    end: usize,
    l2_len: usize,
    named: &[IpAddr],
) -> Result<usize> {
    if named.is_empty() || named.len() > MAX_NAMED {
        return Err(Error::BufferTooSmall);
    }
    let first = *buf.get(start + l2_len).ok_or(Error::BufferTooSmall)?;
    let v6 = match first >> 4 {
        4 => false,
        6 => true,
        _ => return Err(Error::Ipv4BadVersion),
    };
    if named.iter().any(|a| a.is_ipv6() != v6) {
        return Err(Error::UnknownEthertype);
    }
    if v6 {
        insert_v6(buf, start, end, l2_len, named)
    } else {
        insert_v4(buf, start, end, l2_len, named)
    }
}

/// Move the Ethernet and fixed IP headers (`hdr` bytes from `start`) `len` bytes toward the
/// buffer's start, once the checks pass: the frame fits the buffer, there is headroom, and the
/// IP length field at `len_at` (from the IP header) stays below 64 KiB once `len` bytes longer.
/// Returns the new start.
fn make_room(
    buf: &mut [u8],
    (start, end): (usize, usize),
    l2: usize,
    hdr: usize,
    len: usize,
    len_at: usize,
) -> Result<usize> {
    if end > buf.len() || start + hdr > end {
        return Err(Error::BufferTooSmall);
    }
    let new = start.checked_sub(len).ok_or(Error::NoHeadroom)?;
    let at = start + l2 + len_at;
    if u16::from_be_bytes([buf[at], buf[at + 1]]) as usize + len > 0xFFFF {
        return Err(Error::PacketTooBig);
    }
    buf.copy_within(start..start + hdr, new);
    Ok(new)
}

fn insert_v4(
    buf: &mut [u8],
    start: usize,
    end: usize,
    l2: usize,
    named: &[IpAddr],
) -> Result<usize> {
    let hdr = l2 + ipv4::HEADER_LEN;
    let len = overhead(false, named.len());
    if end <= buf.len() && start + hdr <= end && buf[start + l2] != 0x45 {
        return Err(Error::Ipv4BadIhl);
    }
    let new = make_room(buf, (start, end), l2, hdr, len, 2)?;
    let h = &mut buf[new + l2..new + hdr + len];
    let total = u16::from_be_bytes([h[2], h[3]]) as usize + len;
    h[0] = 0x40 | ((ipv4::HEADER_LEN + len) / 4) as u8;
    h[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    h[10..12].fill(0);
    let o = &mut h[ipv4::HEADER_LEN..];
    o[0] = IPV4_OPTION;
    o[1] = len as u8;
    o[2] = VERSION;
    o[3] = 0;
    for (k, a) in named.iter().enumerate() {
        if let IpAddr::V4(a) = a {
            o[4 + 4 * k..8 + 4 * k].copy_from_slice(&a.octets());
        }
    }
    let c = checksum::checksum(h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    Ok(new)
}

fn insert_v6(
    buf: &mut [u8],
    start: usize,
    end: usize,
    l2: usize,
    named: &[IpAddr],
) -> Result<usize> {
    let hdr = l2 + ipv6::HEADER_LEN;
    let len = overhead(true, named.len());
    let new = make_room(buf, (start, end), l2, hdr, len, 4)?;
    let h = &mut buf[new + l2..new + hdr + len];
    let payload = u16::from_be_bytes([h[4], h[5]]) as usize + len;
    let next = h[6];
    h[4..6].copy_from_slice(&(payload as u16).to_be_bytes());
    h[6] = DEST_OPTS;
    let o = &mut h[ipv6::HEADER_LEN..];
    o[0] = next;
    o[1] = (len / 8 - 1) as u8;
    o[2] = IPV6_OPTION;
    o[3] = (2 + 16 * named.len()) as u8;
    o[4] = VERSION;
    o[5] = 0;
    for (k, a) in named.iter().enumerate() {
        if let IpAddr::V6(a) = a {
            o[6 + 16 * k..22 + 16 * k].copy_from_slice(&a.octets());
        }
    }
    o[len - 2] = 1; // PadN
    o[len - 1] = 0;
    Ok(new)
}

/// What an option says: the backends it names and which one is next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Named {
    addrs: [IpAddr; MAX_NAMED],
    len: u8,
    next: u8,
}

impl Named {
    /// Every backend named, in order.
    pub fn addrs(&self) -> &[IpAddr] {
        &self.addrs[..self.len as usize]
    }

    /// The backend a host without a socket for the flow forwards to, if any is left.
    pub fn next(&self) -> Option<IpAddr> {
        self.addrs().get(self.next as usize).copied()
    }
}

/// The option in the outer IP packet `ip` (starting at its IP header), if it carries one of this
/// layout's version.
pub fn find(ip: &[u8]) -> Option<Named> {
    let mut named = Named {
        addrs: [IpAddr::V4(Ipv4Addr::UNSPECIFIED); MAX_NAMED],
        len: 0,
        next: 0,
    };
    match ip.first()? >> 4 {
        4 => {
            let ihl = (ip[0] & 0x0F) as usize * 4;
            let o = ip.get(ipv4::HEADER_LEN..ihl)?;
            let len = *o.get(1)? as usize;
            let ok = o.first() == Some(&IPV4_OPTION) && len <= o.len() && len >= 8;
            if !ok || !len.is_multiple_of(4) || o[2] != VERSION {
                return None;
            }
            let n = (len - 4) / 4;
            if n > MAX_NAMED {
                return None;
            }
            for k in 0..n {
                let b = &o[4 + 4 * k..8 + 4 * k];
                named.addrs[k] = IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3]));
            }
            named.len = n as u8;
            named.next = o[3];
        }
        6 => {
            if *ip.get(6)? != DEST_OPTS {
                return None;
            }
            let o = ip.get(ipv6::HEADER_LEN..)?;
            let len = (*o.get(1)? as usize + 1) * 8;
            let o = o.get(..len)?;
            let n = (o[3] as usize).checked_sub(2)? / 16;
            if o[2] != IPV6_OPTION || o[4] != VERSION || n == 0 || n > MAX_NAMED {
                return None;
            }
            for k in 0..n {
                let mut a = [0u8; 16];
                a.copy_from_slice(o.get(6 + 16 * k..22 + 16 * k)?);
                named.addrs[k] = IpAddr::V6(Ipv6Addr::from(a));
            }
            named.len = n as u8;
            named.next = o[5];
        }
        _ => return None,
    }
    Some(named)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encap::{Encap, OuterIp, OuterL2, Tunnel};
    use crate::ethernet::MacAddr;
    use crate::summary::PacketSummary;

    /// Where the inner packet lies in the test buffer.
    const AT: usize = 256;
    const END: usize = AT + 40;

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
        let mut buf = std::vec![0u8; END + 16];
        buf[AT..END].copy_from_slice(&inner_v4());
        let e = Encap {
            l2: OuterL2 {
                src: MacAddr([2, 0, 0, 0, 0, 1]),
                dst: MacAddr([2, 0, 0, 0, 0, 2]),
                vlan: None,
            },
            ip,
            tunnel,
        };
        let s = e.encapsulate(&mut buf, AT..END, 7, 9).unwrap();
        (buf, s)
    }

    fn v4(last: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, last))
    }

    #[test]
    fn ipv4_option_round_trips_and_the_header_stays_valid() {
        for tunnel in [Tunnel::GRE, Tunnel::Ipip] {
            for n in 1..=MAX_NAMED {
                let ip = OuterIp::V4 {
                    src: Ipv4Addr::new(10, 0, 0, 1),
                    dst: Ipv4Addr::new(10, 0, 0, 2),
                    ttl: 64,
                };
                let (mut buf, s) = encapsulated(ip, tunnel);
                let named: std::vec::Vec<IpAddr> = (0..n).map(|k| v4(3 + k as u8)).collect();
                let at = insert(&mut buf, s, END, 14, &named).unwrap();
                assert_eq!(at, s - overhead(false, n));
                let frame = &buf[at..END];
                let found = find(&frame[14..]).unwrap();
                assert_eq!(found.addrs(), &named[..]);
                assert_eq!(found.next(), Some(named[0]));
                let sum = PacketSummary::parse(frame).unwrap();
                assert_eq!(
                    sum.l3_len as usize,
                    20 + overhead(false, n) + tunnel.len() + 40
                );
                let ihl = (frame[14] & 0xF) as usize * 4;
                assert!(checksum::verify(&frame[14..14 + ihl]), "outer checksum");
                // The inner packet did not move.
                assert_eq!(&buf[AT..END], &inner_v4());
            }
        }
    }

    #[test]
    fn ipv6_destination_option_round_trips() {
        for n in 1..=MAX_NAMED {
            let ip = OuterIp::V6 {
                src: "fd00::1".parse().unwrap(),
                dst: "fd00::2".parse().unwrap(),
                hop_limit: 64,
            };
            let (mut buf, s) = encapsulated(ip, Tunnel::GRE);
            let named: std::vec::Vec<IpAddr> = (0..n)
                .map(|k| IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 3 + k as u16)))
                .collect();
            let at = insert(&mut buf, s, END, 14, &named).unwrap();
            let frame = &buf[at..END];
            assert_eq!(find(&frame[14..]).unwrap().addrs(), &named[..]);
            let len = overhead(true, n);
            assert_eq!(len % 8, 0);
            assert_eq!(
                u16::from_be_bytes([frame[18], frame[19]]) as usize,
                len + 4 + 40
            );
            assert_eq!(&frame[14 + 40 + len - 2..14 + 40 + len], &[1, 0], "PadN");
            assert_eq!(
                frame[14 + 40],
                47,
                "the tunnel protocol is the options header's next"
            );
        }
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
            insert(&mut buf, s, END, 14, &[v6]),
            Err(Error::UnknownEthertype)
        );
        assert_eq!(
            insert(&mut buf, s, END, 14, &[]),
            Err(Error::BufferTooSmall)
        );
        assert_eq!(
            insert(&mut buf, s, END, 14, &[v4(3); 5]),
            Err(Error::BufferTooSmall)
        );
        assert_eq!(
            insert(&mut buf[s - 4..], 4, END - (s - 4), 14, &[v4(3)]),
            Err(Error::NoHeadroom)
        );
        assert_eq!(buf, before);
        assert_eq!(find(&buf[s + 14..]), None);
    }
}
