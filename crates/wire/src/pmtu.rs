//! Path MTU support for a tunnelling forwarder: the ICMP "fragmentation needed" (RFC 792, RFC
//! 1191) and ICMPv6 "packet too big" (RFC 4443 §3.2) errors it answers an oversized packet with,
//! and IPv4 fragmentation (RFC 791 §3.2) for datagrams whose sender allowed it.
//!
//! A balancer that encapsulates adds 20–70 bytes to every packet. A client packet that fits the
//! client's path but not the tunnel has two fates: with DF set (always, for IPv6) the client must
//! learn a smaller MTU, which [`too_big_in_place`] tells it; with DF clear the inner datagram is
//! cut into fragments that each fit ([`Fragmenter`]), and the backend reassembles them (fragmenting
//! the inner datagram rather than the tunnel packet keeps every tunnel packet whole, so a
//! decapsulator that sees packets before IP reassembly — tc or XDP — still sees whole headers).
//!
//! Both work on the received frame where it lies: the error message is written into the headroom
//! in front of the offending packet, whose first bytes become the quoted packet without a copy;
//! the first fragment is the datagram itself with its header rewritten. Errors are values
//! (`BufferTooSmall`, `NoHeadroom`, `Ipv4Truncated`, `Ipv6Truncated`, `UnknownEthertype`,
//! `Fragmented`); nothing panics on any input.

use core::net::Ipv6Addr;
use core::ops::Range;

use crate::error::{Error, Result};
use crate::icmp::{self, IcmpRepr};
use crate::ip::{IpPair, IpProtocol};
use crate::ipv4::{self, Ipv4Packet, Ipv4Repr};
use crate::ipv6::{self, Ipv6Repr};

/// Largest ICMPv4 error datagram (RFC 1812 §4.3.2.3: as much of the original as fits in 576
/// bytes).
pub const ICMPV4_ERROR_MAX: usize = 576;
/// Largest ICMPv6 error datagram (RFC 4443 §2.4(c): as much as fits in the minimum MTU).
pub const ICMPV6_ERROR_MAX: usize = 1280;
/// The IPv6 minimum link MTU (RFC 8200 §5): a "packet too big" never reports less.
pub const IPV6_MIN_MTU: u16 = 1280;
/// Longest link-layer header [`too_big_in_place`] copies (Ethernet with two VLAN tags).
pub const MAX_L2: usize = 22;

/// TTL / hop limit of the errors this module builds.
const ERROR_TTL: u8 = 64;

/// Whether an IP source address may receive an ICMP error (RFC 1812 §4.3.2.7, RFC 4443 §2.4(e)):
/// not unspecified, multicast, broadcast or loopback.
pub fn may_receive_error(src: core::net::IpAddr) -> bool {
    match src {
        core::net::IpAddr::V4(a) => {
            !(a.is_unspecified() || a.is_multicast() || a.is_broadcast() || a.is_loopback())
        }
        core::net::IpAddr::V6(a) => !(a.is_unspecified() || a.is_multicast() || a.is_loopback()),
    }
}

/// The source address of the IP packet `ip` (IPv4 or IPv6, by its version nibble), if it holds
/// that much.
pub fn source_of(ip: &[u8]) -> Option<core::net::IpAddr> {
    match ip.first().map(|b| b >> 4) {
        Some(4) if ip.len() >= ipv4::HEADER_LEN => {
            let a: [u8; 4] = ip[12..16].try_into().ok()?;
            Some(core::net::IpAddr::from(a))
        }
        Some(6) if ip.len() >= ipv6::HEADER_LEN => {
            let a: [u8; 16] = ip[8..24].try_into().ok()?;
            Some(core::net::IpAddr::from(a))
        }
        _ => None,
    }
}

/// Turn the frame `buf[frame]`, whose IP packet lies at `buf[l3]` (`frame.start <= l3.start`,
/// `l3.end <= frame.end`), into the ICMP error that tells its sender the packet was too big for a
/// path of `mtu` bytes: "fragmentation needed" (type 3 code 4, RFC 1191) for IPv4, "packet too
/// big" (type 2, MTU at least 1280) for IPv6. Returns the new frame's range.
///
/// The error goes back where the frame came from: the link-layer header is kept (VLAN tags
/// included) with its source and destination MACs swapped; the IP source is the original
/// destination (the address the sender tried to reach), the destination the original source. The
/// quoted packet is the original's first bytes, up to 576 (IPv4) or 1280 (IPv6) bytes of error
/// datagram. `ident` is the IPv4 identification of the error.
///
/// Errors: `BufferTooSmall` (ranges outside `buf`, or a link-layer header shorter than 14 bytes or
/// longer than [`MAX_L2`]), `NoHeadroom` (fewer than 28 / 48 bytes in front of the frame),
/// `Ipv4Truncated` / `Ipv6Truncated`, `UnknownEthertype` (not IP), `Fragmented` (a non-first
/// IPv4 fragment: no error is sent about those, RFC 1812 §4.3.2.7). On error `buf` is unchanged.
pub fn too_big_in_place(
    buf: &mut [u8],
    frame: Range<usize>,
    l3: Range<usize>,
    mtu: u16,
    ident: u16,
) -> Result<Range<usize>> {
    if frame.start > l3.start || l3.start > l3.end || l3.end > frame.end || frame.end > buf.len() {
        return Err(Error::BufferTooSmall);
    }
    let l2_len = l3.start - frame.start;
    if !(14..=MAX_L2).contains(&l2_len) {
        return Err(Error::BufferTooSmall);
    }
    let mut l2 = [0u8; MAX_L2];
    l2[..l2_len].copy_from_slice(&buf[frame.start..l3.start]);
    let (dst_mac, src_mac) = (
        <[u8; 6]>::try_from(&l2[0..6]).unwrap_or_default(),
        <[u8; 6]>::try_from(&l2[6..12]).unwrap_or_default(),
    );
    l2[0..6].copy_from_slice(&src_mac);
    l2[6..12].copy_from_slice(&dst_mac);

    let ip = &buf[l3.clone()];
    match ip.first().map(|b| b >> 4) {
        Some(4) => {
            let p = Ipv4Packet::new_checked(ip)?;
            if p.frag_offset() != 0 {
                return Err(Error::Fragmented);
            }
            let (src, dst) = (p.src_addr(), p.dst_addr());
            let quote = ip
                .len()
                .min(ICMPV4_ERROR_MAX - ipv4::HEADER_LEN - icmp::HEADER_LEN);
            let hdr = l2_len + ipv4::HEADER_LEN + icmp::HEADER_LEN;
            let start = l3.start.checked_sub(hdr).ok_or(Error::NoHeadroom)?;
            let end = l3.start + quote;
            let out = &mut buf[start..end];
            out[..l2_len].copy_from_slice(&l2[..l2_len]);
            let mut repr = Ipv4Repr::new(
                dst,
                src,
                IpProtocol::ICMP,
                (icmp::HEADER_LEN + quote) as u16,
                ERROR_TTL,
            );
            // Internetwork control, as hosts and routers send their ICMP errors.
            repr.tos = 0xC0;
            repr.ident = ident;
            repr.dont_frag = false;
            repr.emit(&mut out[l2_len..])?;
            IcmpRepr {
                msg_type: icmp::v4::DEST_UNREACHABLE,
                code: icmp::v4::CODE_FRAG_NEEDED,
                rest_of_header: mtu as u32,
            }
            .emit_v4(&mut out[l2_len + ipv4::HEADER_LEN..])?;
            Ok(start..end)
        }
        Some(6) => {
            if ip.len() < ipv6::HEADER_LEN {
                return Err(Error::Ipv6Truncated);
            }
            let src = Ipv6Addr::from(<[u8; 16]>::try_from(&ip[8..24]).unwrap_or_default());
            let dst = Ipv6Addr::from(<[u8; 16]>::try_from(&ip[24..40]).unwrap_or_default());
            let quote = ip
                .len()
                .min(ICMPV6_ERROR_MAX - ipv6::HEADER_LEN - icmp::HEADER_LEN);
            let hdr = l2_len + ipv6::HEADER_LEN + icmp::HEADER_LEN;
            let start = l3.start.checked_sub(hdr).ok_or(Error::NoHeadroom)?;
            let end = l3.start + quote;
            let out = &mut buf[start..end];
            out[..l2_len].copy_from_slice(&l2[..l2_len]);
            let len = (icmp::HEADER_LEN + quote) as u16;
            Ipv6Repr::new(dst, src, IpProtocol::ICMPV6, len, ERROR_TTL).emit(&mut out[l2_len..])?;
            IcmpRepr {
                msg_type: icmp::v6::PACKET_TOO_BIG,
                code: 0,
                rest_of_header: mtu.max(IPV6_MIN_MTU) as u32,
            }
            .emit_v6(&mut out[l2_len + ipv6::HEADER_LEN..], &IpPair::V6(dst, src))?;
            Ok(start..end)
        }
        Some(_) => Err(Error::UnknownEthertype),
        None => Err(Error::Ipv4Truncated),
    }
}

/// Cuts one IPv4 datagram into fragments of at most `mtu` bytes each (RFC 791 §3.2).
///
/// Every fragment keeps the datagram's identification, TOS, TTL, protocol and addresses; the
/// first keeps all options, the others only the options whose "copied" flag is set. Offsets
/// continue the datagram's own (a fragment may be fragmented again) and the last fragment keeps
/// its more-fragments flag. Write fragments `1..count()` with [`Fragmenter::emit`] first, then
/// rewrite the datagram into fragment 0 with [`Fragmenter::first_in_place`] (which changes only
/// its header).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fragmenter {
    header: Ipv4Repr,
    /// Header length of the original (and of fragment 0).
    first_hl: usize,
    /// Header of the other fragments: 20 bytes + copied options, padded.
    rest_options: [u8; 40],
    rest_options_len: usize,
    /// Payload bytes per fragment (a multiple of 8) for fragment 0 and for the others.
    first_chunk: usize,
    rest_chunk: usize,
    payload_len: usize,
}

impl Fragmenter {
    /// Plan the fragmentation of the datagram `ip` (its bytes from the IPv4 header on) for a path
    /// of `mtu` bytes. Errors: `Ipv4Truncated` / `Ipv4BadIhl` / `Ipv4BadTotalLen` (as
    /// [`Ipv4Packet::new_checked`]), `PacketTooBig` (`mtu` leaves no room for 8 payload bytes
    /// after the header).
    pub fn new(ip: &[u8], mtu: usize) -> Result<Fragmenter> {
        let p = Ipv4Packet::new_checked(ip)?;
        let header = Ipv4Repr::parse_unverified(&p)?;
        let first_hl = p.header_len();
        let mut rest_options = [0u8; 40];
        let mut n = 0;
        let opts = p.options();
        let mut i = 0;
        while i < opts.len() {
            let t = opts[i];
            if t == 0 {
                break;
            }
            if t == 1 {
                i += 1;
                continue;
            }
            let Some(&len) = opts.get(i + 1) else { break };
            let len = len as usize;
            if len < 2 || i + len > opts.len() {
                break;
            }
            if t & 0x80 != 0 {
                rest_options[n..n + len].copy_from_slice(&opts[i..i + len]);
                n += len;
            }
            i += len;
        }
        let rest_options_len = n.div_ceil(4) * 4;
        let rest_hl = ipv4::HEADER_LEN + rest_options_len;
        let chunk = |hl: usize| mtu.saturating_sub(hl) / 8 * 8;
        let (first_chunk, rest_chunk) = (chunk(first_hl), chunk(rest_hl));
        if first_chunk == 0 || rest_chunk == 0 {
            return Err(Error::PacketTooBig);
        }
        Ok(Fragmenter {
            header,
            first_hl,
            rest_options,
            rest_options_len,
            first_chunk,
            rest_chunk,
            payload_len: p.total_len() as usize - first_hl,
        })
    }

    /// Number of fragments (1 when the datagram already fits).
    pub fn count(&self) -> usize {
        if self.payload_len <= self.first_chunk {
            1
        } else {
            1 + (self.payload_len - self.first_chunk).div_ceil(self.rest_chunk)
        }
    }

    /// Payload range of fragment `i` within the datagram's payload.
    fn range(&self, i: usize) -> Range<usize> {
        let start = if i == 0 {
            0
        } else {
            self.first_chunk + (i - 1) * self.rest_chunk
        };
        let len = if i == 0 {
            self.first_chunk
        } else {
            self.rest_chunk
        };
        start.min(self.payload_len)..(start + len).min(self.payload_len)
    }

    fn repr(&self, i: usize) -> Ipv4Repr {
        let r = self.range(i);
        let mut h = self.header;
        h.payload_len = r.len() as u16;
        h.frag_offset = self.header.frag_offset + r.start as u16;
        h.more_frags = i + 1 < self.count() || self.header.more_frags;
        h
    }

    /// Write fragment `i` (`1 <= i < count()`) of the datagram `ip` into `out` and return its
    /// length. Errors: `BufferTooSmall` (`out` too short, `ip` not the planned datagram, or `i`
    /// out of range).
    pub fn emit(&self, ip: &[u8], i: usize, out: &mut [u8]) -> Result<usize> {
        if i == 0 || i >= self.count() || ip.len() < self.first_hl + self.payload_len {
            return Err(Error::BufferTooSmall);
        }
        let r = self.range(i);
        let mut h = self.repr(i);
        h.options = ipv4::Ipv4Options::from_slice(&self.rest_options[..self.rest_options_len])
            .unwrap_or_default();
        let hl = h.header_len();
        let total = hl + r.len();
        if out.len() < total {
            return Err(Error::BufferTooSmall);
        }
        h.emit(out)?;
        out[hl..total].copy_from_slice(&ip[self.first_hl + r.start..self.first_hl + r.end]);
        Ok(total)
    }

    /// Rewrite the datagram `ip` into fragment 0 (total length, more-fragments flag, checksum)
    /// and return its length; the bytes after it are left as they are.
    pub fn first_in_place(&self, ip: &mut [u8]) -> Result<usize> {
        if ip.len() < self.first_hl + self.payload_len {
            return Err(Error::BufferTooSmall);
        }
        let h = self.repr(0);
        let total = self.first_hl + h.payload_len as usize;
        let mut p = Ipv4Packet::new_unchecked(&mut ip[..self.first_hl]);
        p.set_total_len(total as u16);
        p.set_frag(h.dont_frag, h.more_frags, h.frag_offset);
        p.fill_checksum();
        Ok(total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checksum;
    use crate::icmp::{Icmpv4Packet, Icmpv6Packet};
    use crate::ipv6::Ipv6Packet;
    use core::net::Ipv4Addr;
    use std::vec;
    use std::vec::Vec;

    const HEADROOM: usize = 128;

    fn v4_frame(payload: usize, df: bool, options: &[u8]) -> (Vec<u8>, Range<usize>, Range<usize>) {
        let mut repr = Ipv4Repr::new(
            Ipv4Addr::new(198, 51, 100, 7),
            Ipv4Addr::new(203, 0, 113, 10),
            IpProtocol::TCP,
            payload as u16,
            60,
        );
        repr.dont_frag = df;
        repr.ident = 0x1234;
        repr.tos = 0x28;
        repr.options = ipv4::Ipv4Options::from_slice(options).unwrap();
        let hl = repr.header_len();
        let mut buf = vec![0u8; HEADROOM + 14 + hl + payload + 16];
        let l3 = HEADROOM + 14..HEADROOM + 14 + hl + payload;
        buf[HEADROOM..HEADROOM + 6].copy_from_slice(&[2, 0, 0, 0, 0, 1]); // dst (us)
        buf[HEADROOM + 6..HEADROOM + 12].copy_from_slice(&[2, 0, 0, 0, 0, 2]); // src (router)
        buf[HEADROOM + 12..HEADROOM + 14].copy_from_slice(&[0x08, 0x00]);
        repr.emit(&mut buf[l3.clone()]).unwrap();
        for (k, b) in buf[l3.start + hl..l3.end].iter_mut().enumerate() {
            *b = (k % 251) as u8;
        }
        (buf, HEADROOM..l3.end, l3)
    }

    #[test]
    fn ipv4_frag_needed_quotes_the_packet_and_goes_back_to_the_sender() {
        let (mut buf, frame, l3) = v4_frame(1480, true, &[]);
        let original = buf[l3.clone()].to_vec();
        let out = too_big_in_place(&mut buf, frame, l3.clone(), 1476, 7).unwrap();
        let f = &buf[out.clone()];
        assert_eq!(&f[0..6], &[2, 0, 0, 0, 0, 2]);
        assert_eq!(&f[6..12], &[2, 0, 0, 0, 0, 1]);
        assert_eq!(f.len(), 14 + ICMPV4_ERROR_MAX);
        let ip = Ipv4Packet::new_checked(&f[14..]).unwrap();
        assert!(ip.verify_checksum());
        assert_eq!(ip.src_addr(), Ipv4Addr::new(203, 0, 113, 10));
        assert_eq!(ip.dst_addr(), Ipv4Addr::new(198, 51, 100, 7));
        assert_eq!(ip.protocol(), IpProtocol::ICMP);
        assert_eq!(ip.total_len() as usize, ICMPV4_ERROR_MAX);
        let m = Icmpv4Packet::new_checked(ip.payload()).unwrap();
        assert_eq!((m.msg_type(), m.code(), m.next_hop_mtu()), (3, 4, 1476));
        assert!(m.verify_checksum());
        assert_eq!(m.body(), &original[..ICMPV4_ERROR_MAX - 28]);
    }

    #[test]
    fn a_short_packet_is_quoted_whole_and_non_first_fragments_get_no_error() {
        let (mut buf, frame, l3) = v4_frame(100, true, &[]);
        let out = too_big_in_place(&mut buf, frame, l3.clone(), 100, 7).unwrap();
        assert_eq!(out.len(), 14 + 28 + l3.len());
        let (mut buf, frame, l3) = v4_frame(100, true, &[]);
        buf[l3.start + 6] |= 0x01; // offset 256 bytes
        let before = buf.clone();
        assert_eq!(
            too_big_in_place(&mut buf, frame.clone(), l3.clone(), 100, 7),
            Err(Error::Fragmented)
        );
        assert_eq!(buf, before);
        // No room in front of the frame.
        let (mut buf, _, l3) = v4_frame(100, true, &[]);
        let frame = HEADROOM..l3.end;
        let mut tight = buf.split_off(HEADROOM - 10);
        let shift = HEADROOM - 10;
        let r = too_big_in_place(
            &mut tight,
            frame.start - shift..frame.end - shift,
            l3.start - shift..l3.end - shift,
            100,
            7,
        );
        assert_eq!(r, Err(Error::NoHeadroom));
    }

    #[test]
    fn ipv6_packet_too_big_never_reports_less_than_1280() {
        let (src, dst) = (
            "2001:db8::7".parse::<Ipv6Addr>().unwrap(),
            "2001:db8:1::10".parse::<Ipv6Addr>().unwrap(),
        );
        let payload = 1460;
        let mut buf = vec![0u8; HEADROOM + 14 + 40 + payload];
        let l3 = HEADROOM + 14..buf.len();
        buf[HEADROOM..HEADROOM + 6].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
        buf[HEADROOM + 6..HEADROOM + 12].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
        buf[HEADROOM + 12..HEADROOM + 14].copy_from_slice(&[0x86, 0xdd]);
        Ipv6Repr::new(src, dst, IpProtocol::TCP, payload as u16, 64)
            .emit(&mut buf[l3.clone()])
            .unwrap();
        let original = buf[l3.clone()].to_vec();
        let out = too_big_in_place(&mut buf, HEADROOM..l3.end, l3.clone(), 1000, 0).unwrap();
        let f = &buf[out];
        assert_eq!(f.len(), 14 + ICMPV6_ERROR_MAX);
        let ip = Ipv6Packet::new_checked(&f[14..]).unwrap();
        assert_eq!((ip.src_addr(), ip.dst_addr()), (dst, src));
        assert_eq!(ip.next_header(), IpProtocol::ICMPV6);
        let m = Icmpv6Packet::new_checked(ip.payload()).unwrap();
        assert_eq!((m.msg_type(), m.mtu()), (2, 1280));
        assert!(m.verify_checksum(&IpPair::V6(dst, src)));
        assert_eq!(m.body(), &original[..ICMPV6_ERROR_MAX - 48]);
    }

    /// Reassemble fragments by offset and check every header.
    fn reassemble(frags: &[Vec<u8>], original: &[u8]) {
        let orig = Ipv4Packet::new_checked(original).unwrap();
        let mut payload = vec![0u8; orig.total_len() as usize - orig.header_len()];
        let mut covered = 0;
        for (k, f) in frags.iter().enumerate() {
            let p = Ipv4Packet::new_checked(&f[..]).unwrap();
            assert!(p.verify_checksum(), "fragment {k}: header checksum");
            assert_eq!(p.ident(), orig.ident());
            assert_eq!((p.tos(), p.ttl()), (orig.tos(), orig.ttl()));
            assert_eq!(p.more_frags(), k + 1 < frags.len(), "fragment {k}: MF");
            assert_eq!(p.frag_offset() % 8, 0);
            let off = p.frag_offset() as usize;
            payload[off..off + p.payload().len()].copy_from_slice(p.payload());
            covered += p.payload().len();
            assert!(f.len() <= 576, "fragment {k} is {} bytes", f.len());
        }
        assert_eq!(covered, payload.len());
        assert_eq!(&payload[..], orig.payload());
    }

    #[test]
    fn fragments_fit_the_mtu_and_reassemble_to_the_datagram() {
        for (len, options) in [
            (1480usize, &[][..]),
            (1000, &[][..]),
            (1481, &[][..]),
            // A copied option (0x83, loose source route, 7 bytes) and one that is not (0x07,
            // record route): only the first is repeated in later fragments.
            (
                1400,
                &[0x83, 7, 4, 10, 0, 0, 1, 0x07, 7, 4, 0, 0, 0, 0, 0, 0, 0][..],
            ),
        ] {
            let mut opts = options.to_vec();
            while opts.len() % 4 != 0 {
                opts.push(0);
            }
            let (buf, _, l3) = v4_frame(len, false, &opts);
            let original = buf[l3.clone()].to_vec();
            let f = Fragmenter::new(&original, 576).unwrap();
            let mut frags = vec![Vec::new(); f.count()];
            for (i, out) in frags.iter_mut().enumerate().skip(1) {
                let mut b = vec![0u8; 600];
                let n = f.emit(&original, i, &mut b).unwrap();
                b.truncate(n);
                if !options.is_empty() {
                    assert_eq!(&b[20..27], &options[..7], "copied option repeated");
                    assert_eq!(Ipv4Packet::new_checked(&b[..]).unwrap().header_len(), 28);
                }
                *out = b;
            }
            let mut first = original.clone();
            let n = f.first_in_place(&mut first).unwrap();
            first.truncate(n);
            frags[0] = first;
            reassemble(&frags, &original);
        }
    }

    #[test]
    fn fragmenting_a_fragment_keeps_its_offset_and_more_fragments_flag() {
        let (mut buf, _, l3) = v4_frame(1200, false, &[]);
        // A middle fragment: offset 800 bytes, MF set.
        buf[l3.start + 6] = 0x20 | (100 >> 8) as u8;
        buf[l3.start + 7] = 100;
        let mut ip = buf[l3.clone()].to_vec();
        Ipv4Packet::new_unchecked(&mut ip[..]).fill_checksum();
        let f = Fragmenter::new(&ip, 576).unwrap();
        assert_eq!(f.count(), 3);
        let mut last = vec![0u8; 600];
        let n = f.emit(&ip, 2, &mut last).unwrap();
        let p = Ipv4Packet::new_checked(&last[..n]).unwrap();
        assert!(p.more_frags());
        assert_eq!(p.frag_offset() as usize, 800 + 2 * 552);
        let mut first = ip.clone();
        f.first_in_place(&mut first).unwrap();
        assert_eq!(Ipv4Packet::new_unchecked(&first[..]).frag_offset(), 800);
        assert!(checksum::verify(&first[..20]));
    }

    #[test]
    fn nothing_panics_on_arbitrary_bytes() {
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..2000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let len = (seed % 200) as usize;
            let mut buf: Vec<u8> = (0..len + 65)
                .map(|k| (seed.rotate_left(k as u32) & 0xFF) as u8)
                .collect();
            buf[64] = if seed & 1 == 0 { 0x45 } else { 0x60 };
            let end = buf.len();
            let _ = too_big_in_place(&mut buf, 50..end, 64..end, 576, 1);
            if let Ok(f) = Fragmenter::new(&buf[64..], 68 + (seed % 100) as usize) {
                let mut out = [0u8; 300];
                for i in 0..f.count() + 1 {
                    let _ = f.emit(&buf[64..], i, &mut out);
                }
            }
        }
    }
}
