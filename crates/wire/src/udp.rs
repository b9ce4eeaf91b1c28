//! UDP (RFC 768): [`UdpPacket`], [`UdpRepr`].
//!
//! The view covers one datagram as delimited by the IP layer. [`UdpPacket::new_checked`] validates:
//! ≥ 8 bytes (`UdpTruncated`) and `8 ≤ length field ≤ buffer length` (`UdpBadLength`). A length
//! field of 0 is rejected as Linux does (`udp_rcv`); it is only meaningful for IPv6 jumbograms,
//! which are not supported. [`UdpPacket::payload`] is bounded by the length field.
//!
//! A first fragment carries the UDP header but not the whole datagram, so its length field
//! legitimately exceeds the bytes present: the summary parser then reads only the 8-byte header.
//!
//! Checksums: 0 on the wire means "no checksum" (allowed for IPv4 only; RFC 8200 §8.1 makes it
//! invalid for IPv6 except for tunnels under RFC 6935). A computed checksum of 0 is sent as 0xFFFF.

use crate::bytes::{be16, put16, Field, Rest};
use crate::checksum;
use crate::error::{Error, Result};
use crate::ip::{IpPair, IpProtocol};

mod field {
    use super::{Field, Rest};
    pub const SRC_PORT: Field = 0..2;
    pub const DST_PORT: Field = 2..4;
    pub const LENGTH: Field = 4..6;
    pub const CHECKSUM: Field = 6..8;
    pub const PAYLOAD: Rest = 8..;
}

/// Length of the UDP header.
pub const HEADER_LEN: usize = field::PAYLOAD.start;

/// A read/write view of a UDP datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    /// Wrap without checking.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        UdpPacket { buffer }
    }

    /// Wrap and validate (see the module doc).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// `UdpTruncated` or `UdpBadLength`.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Error::UdpTruncated);
        }
        let l = self.len() as usize;
        if l < HEADER_LEN || l > len {
            return Err(Error::UdpBadLength);
        }
        Ok(())
    }

    /// The wrapped buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Source port.
    #[inline]
    pub fn src_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::SRC_PORT.start)
    }
    /// Destination port.
    #[inline]
    pub fn dst_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::DST_PORT.start)
    }
    /// Length field (header + payload).
    #[inline]
    pub fn len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::LENGTH.start)
    }
    /// Whether the length field says there is no payload.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() as usize <= HEADER_LEN
    }
    /// Checksum field (0: none).
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM.start)
    }

    #[inline]
    fn end(&self) -> usize {
        (self.len() as usize).min(self.buffer.as_ref().len())
    }

    /// Whether the checksum verifies with `addrs`' pseudo-header. A zero checksum verifies for IPv4
    /// (none was computed) and fails for IPv6.
    #[inline]
    pub fn verify_checksum(&self, addrs: &IpPair) -> bool {
        if self.checksum() == 0 {
            return matches!(addrs, IpPair::V4(..));
        }
        let b = &self.buffer.as_ref()[..self.end()];
        let ph = addrs.pseudo_header_sum(IpProtocol::UDP, b.len() as u32);
        checksum::add(ph, checksum::sum(b)) == 0xFFFF
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> UdpPacket<&'a T> {
    /// Payload, bounded by the length field.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        let e = self.end();
        &self.buffer.as_ref()[HEADER_LEN.min(e)..e]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpPacket<T> {
    /// Set the source port (checksum not updated).
    #[inline]
    pub fn set_src_port(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::SRC_PORT.start, v);
    }
    /// Set the destination port (checksum not updated).
    #[inline]
    pub fn set_dst_port(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::DST_PORT.start, v);
    }
    /// Set the length field.
    #[inline]
    pub fn set_len(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::LENGTH.start, v);
    }
    /// Set the checksum field.
    #[inline]
    pub fn set_checksum(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::CHECKSUM.start, v);
    }
    /// Compute and store the checksum (over the length field's extent) with `addrs`' pseudo-header;
    /// a computed 0 is stored as 0xFFFF.
    #[inline]
    pub fn fill_checksum(&mut self, addrs: &IpPair) {
        self.set_checksum(0);
        let b = &self.buffer.as_ref()[..self.end()];
        let ph = addrs.pseudo_header_sum(IpProtocol::UDP, b.len() as u32);
        let c = checksum::finish(checksum::add(ph, checksum::sum(b)));
        self.set_checksum(if c == 0 { 0xFFFF } else { c });
    }
    /// RFC 1624 update after a covered field changed (see [`crate::tcp::TcpPacket::update_checksum`]).
    /// A zero checksum (none) is left alone. Returns `false` if nothing was updated.
    #[inline]
    pub fn update_checksum(&mut self, old: &[u8], new: &[u8]) -> bool {
        let c = self.checksum();
        if c == 0 {
            return false;
        }
        match checksum::update_bytes(c, old, new) {
            Some(c) => {
                self.set_checksum(if c == 0 { 0xFFFF } else { c });
                true
            }
            None => false,
        }
    }
    /// Mutable payload.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let e = self.end();
        &mut self.buffer.as_mut()[HEADER_LEN.min(e)..e]
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for UdpPacket<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// The fields of a UDP header that are not derived from the payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdpRepr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
}

impl UdpRepr {
    /// Parse a checked datagram's header (checksum not verified).
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(p: &UdpPacket<T>) -> Result<UdpRepr> {
        p.check_len()?;
        Ok(UdpRepr {
            src_port: p.src_port(),
            dst_port: p.dst_port(),
        })
    }

    /// 8.
    #[inline]
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Write the header for a datagram of `datagram_len` bytes (header included) at the start of
    /// `buf`, with a zero checksum.
    pub fn emit_header(&self, buf: &mut [u8], datagram_len: usize) -> Result<()> {
        if buf.len() < HEADER_LEN {
            return Err(Error::BufferTooSmall);
        }
        if !(HEADER_LEN..=0xFFFF).contains(&datagram_len) {
            return Err(Error::PacketTooBig);
        }
        let mut p = UdpPacket::new_unchecked(buf);
        p.set_src_port(self.src_port);
        p.set_dst_port(self.dst_port);
        p.set_len(datagram_len as u16);
        p.set_checksum(0);
        Ok(())
    }

    /// Write the header at the start of `datagram` (which holds the payload after the header and
    /// ends where the datagram ends) and, with `Some(addrs)`, fill the checksum; `None` leaves it 0
    /// (IPv4 only).
    pub fn emit(&self, datagram: &mut [u8], addrs: Option<&IpPair>) -> Result<()> {
        self.emit_header(datagram, datagram.len())?;
        if let Some(a) = addrs {
            UdpPacket::new_unchecked(datagram).fill_checksum(a);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::{Ipv4Addr, Ipv6Addr};

    /// 10.0.0.1:53 -> 10.0.0.2:33000, payload "hi"; checksum computed independently (Python RFC 1071).
    const DGRAM: [u8; 10] = [0x00, 0x35, 0x80, 0xe8, 0x00, 0x0a, 0x02, 0x51, b'h', b'i'];

    fn v4() -> IpPair {
        IpPair::V4(Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2))
    }

    #[test]
    fn parse_fixture() {
        let p = UdpPacket::new_checked(&DGRAM[..]).unwrap();
        assert_eq!((p.src_port(), p.dst_port(), p.len()), (53, 33000, 10));
        assert!(p.verify_checksum(&v4()));
        assert_eq!(p.payload(), b"hi");
        let r = UdpRepr::parse(&p).unwrap();
        let mut out = [0u8; 10];
        out[8..].copy_from_slice(b"hi");
        r.emit(&mut out, Some(&v4())).unwrap();
        assert_eq!(out, DGRAM);
    }

    #[test]
    fn errors_and_zero_checksum() {
        assert_eq!(
            UdpPacket::new_checked(&DGRAM[..7]).unwrap_err(),
            Error::UdpTruncated
        );
        assert_eq!(
            UdpPacket::new_checked(&DGRAM[..9]).unwrap_err(),
            Error::UdpBadLength
        );
        let mut b = DGRAM;
        b[5] = 0;
        assert_eq!(
            UdpPacket::new_checked(&b[..]).unwrap_err(),
            Error::UdpBadLength
        );
        b[5] = 9; // shorter than the buffer: trailing byte is not payload
        assert_eq!(UdpPacket::new_checked(&b[..]).unwrap().payload(), b"h");

        let mut z = DGRAM;
        z[6] = 0;
        z[7] = 0;
        let mut p = UdpPacket::new_checked(&mut z[..]).unwrap();
        assert!(p.verify_checksum(&v4()));
        let v6 = IpPair::V6(Ipv6Addr::LOCALHOST, Ipv6Addr::LOCALHOST);
        assert!(!p.verify_checksum(&v6));
        assert!(!p.update_checksum(&[0, 0], &[1, 1]));
        p.fill_checksum(&v6);
        assert!(p.verify_checksum(&v6));
    }

    #[test]
    fn computed_zero_is_sent_as_ffff() {
        // Choose a payload word that makes the complemented sum zero.
        let a = v4();
        let mut d = [0u8; 10];
        UdpRepr {
            src_port: 1,
            dst_port: 2,
        }
        .emit_header(&mut d, 10)
        .unwrap();
        let s = checksum::add(a.pseudo_header_sum(IpProtocol::UDP, 10), checksum::sum(&d));
        // Need sum + w == 0xFFFF  ->  w = !s.
        d[8..10].copy_from_slice(&(!s).to_be_bytes());
        let mut p = UdpPacket::new_checked(&mut d[..]).unwrap();
        p.fill_checksum(&a);
        assert_eq!(p.checksum(), 0xFFFF);
        assert!(p.verify_checksum(&a));
    }
}
