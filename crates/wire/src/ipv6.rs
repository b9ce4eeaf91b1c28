//! IPv6 fixed header (RFC 8200 §3): [`Ipv6Packet`], [`Ipv6Repr`]. Extension headers are in
//! [`crate::ipv6ext`].
//!
//! [`Ipv6Packet::new_checked`] validates: at least 40 bytes (`Ipv6Truncated`) and
//! `40 + payload_len ≤ buffer length` (`Ipv6BadPayloadLen`). Afterwards no accessor panics;
//! [`Ipv6Packet::payload`] is bounded by the payload length (Ethernet padding excluded) and clamps
//! to the buffer. The version nibble is checked by [`Ipv6Repr::parse`] and the summary parser.
//!
//! Jumbograms (payload length 0 plus a Jumbo Payload hop-by-hop option, RFC 2675) are not
//! supported: they cannot occur on Ethernet, and a zero payload length is read literally.

use core::net::Ipv6Addr;

use crate::bytes::{arr16, be16, be32, put16, put32, Field, Rest};
use crate::checksum;
use crate::error::{Error, Result};
use crate::ip::IpProtocol;

mod field {
    use super::{Field, Rest};
    pub const VER_TC_FLOW: Field = 0..4;
    pub const LENGTH: Field = 4..6;
    pub const NXT_HDR: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC_ADDR: Field = 8..24;
    pub const DST_ADDR: Field = 24..40;
    pub const PAYLOAD: Rest = 40..;
}

/// Length of the fixed IPv6 header.
pub const HEADER_LEN: usize = field::PAYLOAD.start;

/// A read/write view of an IPv6 packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// Wrap without checking.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        Ipv6Packet { buffer }
    }

    /// Wrap and validate lengths.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// `Ipv6Truncated` below 40 bytes, `Ipv6BadPayloadLen` if the payload length runs past the buffer.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Error::Ipv6Truncated);
        }
        if HEADER_LEN + self.payload_len() as usize > len {
            return Err(Error::Ipv6BadPayloadLen);
        }
        Ok(())
    }

    /// The wrapped buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    #[inline]
    fn word0(&self) -> u32 {
        be32(self.buffer.as_ref(), field::VER_TC_FLOW.start)
    }

    /// Version nibble (6 for a real IPv6 packet).
    #[inline]
    pub fn version(&self) -> u8 {
        (self.word0() >> 28) as u8
    }

    /// Traffic class (DSCP << 2 | ECN).
    #[inline]
    pub fn traffic_class(&self) -> u8 {
        (self.word0() >> 20) as u8
    }

    /// Flow label (20 bits).
    #[inline]
    pub fn flow_label(&self) -> u32 {
        self.word0() & 0x000F_FFFF
    }

    /// Payload length (extension headers included).
    #[inline]
    pub fn payload_len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::LENGTH.start)
    }

    /// Next header: the first extension header or the upper-layer protocol.
    #[inline]
    pub fn next_header(&self) -> IpProtocol {
        IpProtocol(self.buffer.as_ref()[field::NXT_HDR])
    }

    /// Hop limit.
    #[inline]
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }

    /// Source address.
    #[inline]
    pub fn src_addr(&self) -> Ipv6Addr {
        Ipv6Addr::from(arr16(self.buffer.as_ref(), field::SRC_ADDR.start))
    }

    /// Destination address.
    #[inline]
    pub fn dst_addr(&self) -> Ipv6Addr {
        Ipv6Addr::from(arr16(self.buffer.as_ref(), field::DST_ADDR.start))
    }

    /// Header length plus payload length, clamped to the buffer.
    #[inline]
    pub fn total_len(&self) -> usize {
        (HEADER_LEN + self.payload_len() as usize).min(self.buffer.as_ref().len())
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Ipv6Packet<&'a T> {
    /// Payload (extension headers included), bounded by the payload length.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        let end = self.total_len();
        &self.buffer.as_ref()[HEADER_LEN.min(end)..end]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    /// Set version 6, traffic class and flow label (masked to 20 bits).
    #[inline]
    pub fn set_version_tc_flow(&mut self, traffic_class: u8, flow_label: u32) {
        let w = (6u32 << 28) | ((traffic_class as u32) << 20) | (flow_label & 0x000F_FFFF);
        put32(self.buffer.as_mut(), field::VER_TC_FLOW.start, w);
    }

    /// Set the payload length.
    #[inline]
    pub fn set_payload_len(&mut self, len: u16) {
        put16(self.buffer.as_mut(), field::LENGTH.start, len);
    }

    /// Set the next header.
    #[inline]
    pub fn set_next_header(&mut self, p: IpProtocol) {
        self.buffer.as_mut()[field::NXT_HDR] = p.0;
    }

    /// Set the hop limit.
    #[inline]
    pub fn set_hop_limit(&mut self, h: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = h;
    }

    /// Set the source address.
    #[inline]
    pub fn set_src_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&a.octets());
    }

    /// Set the destination address.
    #[inline]
    pub fn set_dst_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&a.octets());
    }

    /// Mutable payload.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = self.total_len();
        &mut self.buffer.as_mut()[HEADER_LEN.min(end)..end]
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for Ipv6Packet<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// The fields of the fixed IPv6 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv6Repr {
    /// Source address.
    pub src_addr: Ipv6Addr,
    /// Destination address.
    pub dst_addr: Ipv6Addr,
    /// Next header (first extension header or upper-layer protocol).
    pub next_header: IpProtocol,
    /// Payload length (extension headers included).
    pub payload_len: u16,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
}

impl Ipv6Repr {
    /// A plain header with traffic class and flow label 0.
    pub const fn new(
        src_addr: Ipv6Addr,
        dst_addr: Ipv6Addr,
        next_header: IpProtocol,
        payload_len: u16,
        hop_limit: u8,
    ) -> Self {
        Ipv6Repr {
            src_addr,
            dst_addr,
            next_header,
            payload_len,
            hop_limit,
            traffic_class: 0,
            flow_label: 0,
        }
    }

    /// Parse the fixed header: lengths (as `new_checked`) and version (`Ipv6BadVersion`).
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(p: &Ipv6Packet<T>) -> Result<Ipv6Repr> {
        if p.buffer.as_ref().len() < HEADER_LEN {
            return Err(Error::Ipv6Truncated);
        }
        if p.version() != 6 {
            return Err(Error::Ipv6BadVersion);
        }
        p.check_len()?;
        Ok(Ipv6Repr {
            src_addr: p.src_addr(),
            dst_addr: p.dst_addr(),
            next_header: p.next_header(),
            payload_len: p.payload_len(),
            hop_limit: p.hop_limit(),
            traffic_class: p.traffic_class(),
            flow_label: p.flow_label(),
        })
    }

    /// 40.
    #[inline]
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Write the 40-byte header at the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        if buf.len() < HEADER_LEN {
            return Err(Error::BufferTooSmall);
        }
        let mut p = Ipv6Packet::new_unchecked(&mut buf[..HEADER_LEN]);
        p.set_version_tc_flow(self.traffic_class, self.flow_label);
        p.set_payload_len(self.payload_len);
        p.set_next_header(self.next_header);
        p.set_hop_limit(self.hop_limit);
        p.set_src_addr(self.src_addr);
        p.set_dst_addr(self.dst_addr);
        Ok(())
    }

    /// Sum of the pseudo-header for an upper-layer packet of `protocol` and `length` bytes carried
    /// in this datagram (after any extension headers).
    #[inline]
    pub fn pseudo_header_sum(&self, protocol: IpProtocol, length: u32) -> u16 {
        checksum::pseudo_header_v6(self.src_addr, self.dst_addr, protocol, length)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2001:db8::1 -> 2001:db8::2, tc 0xb8 (EF), flow 0x12345, payload 4, next UDP, hop limit 64.
    const PKT: [u8; 44] = [
        0x6b, 0x81, 0x23, 0x45, 0x00, 0x04, 17, 64, //
        0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, //
        0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, //
        9, 8, 7, 6,
    ];

    #[test]
    fn parse_emit_fixture() {
        let p = Ipv6Packet::new_checked(&PKT[..]).unwrap();
        let r = Ipv6Repr::parse(&p).unwrap();
        assert_eq!(r.traffic_class, 0xb8);
        assert_eq!(r.flow_label, 0x12345);
        assert_eq!(r.src_addr, "2001:db8::1".parse::<Ipv6Addr>().unwrap());
        assert_eq!(r.next_header, IpProtocol::UDP);
        assert_eq!(p.payload(), &[9, 8, 7, 6]);
        let mut out = [0u8; 44];
        r.emit(&mut out).unwrap();
        out[40..].copy_from_slice(p.payload());
        assert_eq!(out, PKT);
    }

    #[test]
    fn errors() {
        assert_eq!(
            Ipv6Packet::new_checked(&PKT[..39]).unwrap_err(),
            Error::Ipv6Truncated
        );
        assert_eq!(
            Ipv6Packet::new_checked(&PKT[..43]).unwrap_err(),
            Error::Ipv6BadPayloadLen
        );
        let mut v = PKT;
        v[0] = 0x4b;
        let p = Ipv6Packet::new_checked(&v[..]).unwrap();
        assert_eq!(Ipv6Repr::parse(&p), Err(Error::Ipv6BadVersion));
        let mut padded = [0u8; 60];
        padded[..44].copy_from_slice(&PKT);
        assert_eq!(
            Ipv6Packet::new_checked(&padded[..])
                .unwrap()
                .payload()
                .len(),
            4
        );
    }
}
