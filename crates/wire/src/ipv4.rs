//! IPv4 (RFC 791): [`Ipv4Packet`], [`Ipv4Repr`], [`Ipv4Options`].
//!
//! [`Ipv4Packet::new_checked`] validates, once: at least 20 bytes, IHL ≥ 5, the header (options
//! included) present, and `header_len ≤ total_len ≤ buffer length`. After that no accessor panics,
//! and the variable-length accessors ([`Ipv4Packet::options`], [`Ipv4Packet::payload`]) clamp to the
//! buffer so that even setters rewriting IHL or the total length cannot make them panic. The
//! payload is bounded by the total length: Ethernet padding after the datagram is not payload.
//!
//! The version nibble and the header checksum are content, not structure: [`Ipv4Repr::parse`]
//! checks both ([`Ipv4Repr::parse_unverified`] skips the checksum), as does the summary parser.
//!
//! Fragment offsets are in **bytes** everywhere in this crate (the wire field is in 8-byte units).
//!
//! In-place rewrites keep the header checksum valid incrementally (RFC 1624):
//! [`Ipv4Packet::decrement_ttl`], [`Ipv4Packet::rewrite_src_addr`], [`Ipv4Packet::rewrite_dst_addr`].
//! A rewritten address also changes the TCP/UDP pseudo-header: fix the L4 checksum with
//! [`crate::tcp::TcpPacket::update_checksum`] / [`crate::udp::UdpPacket::update_checksum`].

use core::net::Ipv4Addr;

use crate::bytes::{arr4, be16, put16, Field};
use crate::checksum;
use crate::error::{Error, Result};
use crate::ip::IpProtocol;

mod field {
    use super::Field;
    pub const VER_IHL: usize = 0;
    pub const TOS: usize = 1;
    pub const LENGTH: Field = 2..4;
    pub const IDENT: Field = 4..6;
    pub const FLG_OFF: Field = 6..8;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: Field = 10..12;
    pub const SRC_ADDR: Field = 12..16;
    pub const DST_ADDR: Field = 16..20;
}

/// Length of the IPv4 header without options.
pub const HEADER_LEN: usize = field::DST_ADDR.end;
/// Longest IPv4 header (IHL 15).
pub const MAX_HEADER_LEN: usize = 60;
/// Don't-fragment flag in the flags/offset word.
const DF: u16 = 0x4000;
/// More-fragments flag in the flags/offset word.
const MF: u16 = 0x2000;
/// Reserved ("evil") bit.
const RESERVED: u16 = 0x8000;

/// A read/write view of an IPv4 packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Wrap without checking (fixed-field accessors may then panic).
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        Ipv4Packet { buffer }
    }

    /// Wrap and validate lengths (see the module doc).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// The structural checks of [`Ipv4Packet::new_checked`]: `Ipv4Truncated`, `Ipv4BadIhl`,
    /// `Ipv4BadTotalLen`.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Error::Ipv4Truncated);
        }
        let hl = self.header_len();
        if hl < HEADER_LEN {
            return Err(Error::Ipv4BadIhl);
        }
        if len < hl {
            return Err(Error::Ipv4Truncated);
        }
        let tl = self.total_len() as usize;
        if tl < hl || tl > len {
            return Err(Error::Ipv4BadTotalLen);
        }
        Ok(())
    }

    /// The wrapped buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Version nibble (4 for a real IPv4 packet).
    #[inline]
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }

    /// Header length in bytes (IHL × 4), options included.
    #[inline]
    pub fn header_len(&self) -> usize {
        ((self.buffer.as_ref()[field::VER_IHL] & 0x0F) as usize) * 4
    }

    /// The whole type-of-service byte (DSCP << 2 | ECN).
    #[inline]
    pub fn tos(&self) -> u8 {
        self.buffer.as_ref()[field::TOS]
    }

    /// Differentiated services code point.
    #[inline]
    pub fn dscp(&self) -> u8 {
        self.tos() >> 2
    }

    /// Explicit congestion notification bits.
    #[inline]
    pub fn ecn(&self) -> u8 {
        self.tos() & 3
    }

    /// Total length of the datagram (header + payload) in bytes.
    #[inline]
    pub fn total_len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::LENGTH.start)
    }

    /// Identification.
    #[inline]
    pub fn ident(&self) -> u16 {
        be16(self.buffer.as_ref(), field::IDENT.start)
    }

    #[inline]
    fn flg_off(&self) -> u16 {
        be16(self.buffer.as_ref(), field::FLG_OFF.start)
    }

    /// Reserved flag bit (must be zero; not checked).
    #[inline]
    pub fn reserved_flag(&self) -> bool {
        self.flg_off() & RESERVED != 0
    }

    /// Don't-fragment flag.
    #[inline]
    pub fn dont_frag(&self) -> bool {
        self.flg_off() & DF != 0
    }

    /// More-fragments flag.
    #[inline]
    pub fn more_frags(&self) -> bool {
        self.flg_off() & MF != 0
    }

    /// Fragment offset in **bytes** (the 13-bit field × 8).
    #[inline]
    pub fn frag_offset(&self) -> u16 {
        (self.flg_off() & 0x1FFF) << 3
    }

    /// Whether this datagram is a fragment (MF set or a non-zero offset).
    #[inline]
    pub fn is_fragment(&self) -> bool {
        self.flg_off() & (MF | 0x1FFF) != 0
    }

    /// Time to live.
    #[inline]
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }

    /// Protocol of the payload.
    #[inline]
    pub fn protocol(&self) -> IpProtocol {
        IpProtocol(self.buffer.as_ref()[field::PROTOCOL])
    }

    /// Header checksum field.
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM.start)
    }

    /// Source address.
    #[inline]
    pub fn src_addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(arr4(self.buffer.as_ref(), field::SRC_ADDR.start))
    }

    /// Destination address.
    #[inline]
    pub fn dst_addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(arr4(self.buffer.as_ref(), field::DST_ADDR.start))
    }

    /// Whether the header checksum verifies.
    #[inline]
    pub fn verify_checksum(&self) -> bool {
        let b = self.buffer.as_ref();
        let hl = self.header_len();
        if hl == HEADER_LEN {
            if let Some(h) = b.first_chunk::<HEADER_LEN>() {
                return checksum::sum20(h) == 0xFFFF;
            }
        }
        checksum::verify(&b[..hl.clamp(HEADER_LEN, b.len())])
    }

    #[inline]
    fn payload_range(&self) -> Field {
        let len = self.buffer.as_ref().len();
        let end = (self.total_len() as usize).min(len);
        let start = self.header_len().min(end);
        start..end
    }

    #[inline]
    fn options_range(&self) -> Field {
        let len = self.buffer.as_ref().len();
        HEADER_LEN..self.header_len().clamp(HEADER_LEN, len)
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Ipv4Packet<&'a T> {
    /// The option bytes (between byte 20 and the header length).
    #[inline]
    pub fn options(&self) -> &'a [u8] {
        &self.buffer.as_ref()[self.options_range()]
    }

    /// The payload: from the header length to the total length.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[self.payload_range()]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    /// Set version 4 and the header length in bytes (a multiple of 4, 20..=60).
    #[inline]
    pub fn set_version_and_header_len(&mut self, header_len: usize) {
        self.buffer.as_mut()[field::VER_IHL] = 0x40 | ((header_len / 4) as u8 & 0x0F);
    }

    /// Set the type-of-service byte.
    #[inline]
    pub fn set_tos(&mut self, tos: u8) {
        self.buffer.as_mut()[field::TOS] = tos;
    }

    /// Set the total length.
    #[inline]
    pub fn set_total_len(&mut self, len: u16) {
        put16(self.buffer.as_mut(), field::LENGTH.start, len);
    }

    /// Set the identification.
    #[inline]
    pub fn set_ident(&mut self, id: u16) {
        put16(self.buffer.as_mut(), field::IDENT.start, id);
    }

    /// Set the flags and the fragment offset (in bytes; the low 3 bits are dropped).
    #[inline]
    pub fn set_frag(&mut self, dont_frag: bool, more_frags: bool, offset_bytes: u16) {
        let v =
            if dont_frag { DF } else { 0 } | if more_frags { MF } else { 0 } | (offset_bytes >> 3);
        put16(self.buffer.as_mut(), field::FLG_OFF.start, v);
    }

    /// Set the TTL (the checksum is not updated; see [`Ipv4Packet::decrement_ttl`]).
    #[inline]
    pub fn set_ttl(&mut self, ttl: u8) {
        self.buffer.as_mut()[field::TTL] = ttl;
    }

    /// Set the protocol.
    #[inline]
    pub fn set_protocol(&mut self, p: IpProtocol) {
        self.buffer.as_mut()[field::PROTOCOL] = p.0;
    }

    /// Set the checksum field.
    #[inline]
    pub fn set_checksum(&mut self, c: u16) {
        put16(self.buffer.as_mut(), field::CHECKSUM.start, c);
    }

    /// Set the source address (checksum not updated).
    #[inline]
    pub fn set_src_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&a.octets());
    }

    /// Set the destination address (checksum not updated).
    #[inline]
    pub fn set_dst_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&a.octets());
    }

    /// Recompute and store the header checksum.
    #[inline]
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let hl = self.options_range().end;
        let c = checksum::checksum(&self.buffer.as_ref()[..hl]);
        self.set_checksum(c);
    }

    /// Decrement the TTL (saturating at 0) and update the checksum incrementally. Returns the new TTL.
    #[inline]
    pub fn decrement_ttl(&mut self) -> u8 {
        let b = self.buffer.as_ref();
        let old = be16(b, field::TTL);
        let ttl = b[field::TTL].saturating_sub(1);
        let new = u16::from_be_bytes([ttl, b[field::PROTOCOL]]);
        let c = checksum::update_u16(self.checksum(), old, new);
        self.set_ttl(ttl);
        self.set_checksum(c);
        ttl
    }

    /// Replace the source address, updating the header checksum incrementally. Returns the old one.
    #[inline]
    pub fn rewrite_src_addr(&mut self, a: Ipv4Addr) -> Ipv4Addr {
        let old = self.src_addr();
        let c = checksum::update_u32(self.checksum(), old.to_bits(), a.to_bits());
        self.set_src_addr(a);
        self.set_checksum(c);
        old
    }

    /// Replace the destination address, updating the header checksum incrementally. Returns the old one.
    #[inline]
    pub fn rewrite_dst_addr(&mut self, a: Ipv4Addr) -> Ipv4Addr {
        let old = self.dst_addr();
        let c = checksum::update_u32(self.checksum(), old.to_bits(), a.to_bits());
        self.set_dst_addr(a);
        self.set_checksum(c);
        old
    }

    /// Mutable option bytes.
    #[inline]
    pub fn options_mut(&mut self) -> &mut [u8] {
        let r = self.options_range();
        &mut self.buffer.as_mut()[r]
    }

    /// Mutable payload (header length to total length).
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let r = self.payload_range();
        &mut self.buffer.as_mut()[r]
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for Ipv4Packet<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// IPv4 options, stored inline (no allocation): up to 40 bytes, a multiple of 4 long.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv4Options {
    len: u8,
    bytes: [u8; 40],
}

impl Ipv4Options {
    /// No options.
    pub const NONE: Ipv4Options = Ipv4Options {
        len: 0,
        bytes: [0; 40],
    };

    /// Copy option bytes; `None` if longer than 40 bytes or not a multiple of 4 (pad with
    /// end-of-list / no-op options first).
    #[inline]
    pub fn from_slice(b: &[u8]) -> Option<Ipv4Options> {
        if b.len() > 40 || !b.len().is_multiple_of(4) {
            return None;
        }
        let mut o = Ipv4Options::NONE;
        o.bytes[..b.len()].copy_from_slice(b);
        o.len = b.len() as u8;
        Some(o)
    }

    /// The option bytes.
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }

    /// Length in bytes.
    #[inline]
    pub const fn len(&self) -> usize {
        self.len as usize
    }

    /// No options.
    #[inline]
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Default for Ipv4Options {
    fn default() -> Self {
        Ipv4Options::NONE
    }
}

impl core::fmt::Debug for Ipv4Options {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Ipv4Options({:02x?})", self.as_slice())
    }
}

/// The fields of an IPv4 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv4Repr {
    /// Source address.
    pub src_addr: Ipv4Addr,
    /// Destination address.
    pub dst_addr: Ipv4Addr,
    /// Payload protocol.
    pub protocol: IpProtocol,
    /// Payload length in bytes (total length minus header length).
    pub payload_len: u16,
    /// Time to live.
    pub ttl: u8,
    /// Type of service byte (DSCP << 2 | ECN).
    pub tos: u8,
    /// Identification.
    pub ident: u16,
    /// Don't-fragment flag.
    pub dont_frag: bool,
    /// More-fragments flag.
    pub more_frags: bool,
    /// Fragment offset in bytes (a multiple of 8).
    pub frag_offset: u16,
    /// Options.
    pub options: Ipv4Options,
}

impl Ipv4Repr {
    /// A plain header: no options, not a fragment, DF set, ident 0, TOS 0.
    pub const fn new(
        src_addr: Ipv4Addr,
        dst_addr: Ipv4Addr,
        protocol: IpProtocol,
        payload_len: u16,
        ttl: u8,
    ) -> Self {
        Ipv4Repr {
            src_addr,
            dst_addr,
            protocol,
            payload_len,
            ttl,
            tos: 0,
            ident: 0,
            dont_frag: true,
            more_frags: false,
            frag_offset: 0,
            options: Ipv4Options::NONE,
        }
    }

    /// Parse a packet: lengths (as `new_checked`), version (`Ipv4BadVersion`), header checksum
    /// (`Ipv4BadChecksum`) and fragment extent (`Ipv4BadFragment`: offset + payload > 65535).
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(p: &Ipv4Packet<T>) -> Result<Ipv4Repr> {
        let r = Self::parse_unverified(p)?;
        if !p.verify_checksum() {
            return Err(Error::Ipv4BadChecksum);
        }
        Ok(r)
    }

    /// [`Ipv4Repr::parse`] without the header checksum check.
    pub fn parse_unverified<T: AsRef<[u8]>>(p: &Ipv4Packet<T>) -> Result<Ipv4Repr> {
        if p.buffer.as_ref().len() < HEADER_LEN {
            return Err(Error::Ipv4Truncated);
        }
        if p.version() != 4 {
            return Err(Error::Ipv4BadVersion);
        }
        p.check_len()?;
        let payload_len = p.total_len() - p.header_len() as u16;
        if p.frag_offset() as u32 + payload_len as u32 > 0xFFFF {
            return Err(Error::Ipv4BadFragment);
        }
        let b = p.buffer.as_ref();
        Ok(Ipv4Repr {
            src_addr: p.src_addr(),
            dst_addr: p.dst_addr(),
            protocol: p.protocol(),
            payload_len,
            ttl: p.ttl(),
            tos: p.tos(),
            ident: p.ident(),
            dont_frag: p.dont_frag(),
            more_frags: p.more_frags(),
            frag_offset: p.frag_offset(),
            // check_len guarantees 20 <= header_len <= 60 bytes, a multiple of 4.
            options: Ipv4Options::from_slice(&b[HEADER_LEN..p.header_len()]).unwrap_or_default(),
        })
    }

    /// Header length this repr emits (20 + options).
    #[inline]
    pub const fn header_len(&self) -> usize {
        HEADER_LEN + self.options.len()
    }

    /// Total length of the datagram.
    #[inline]
    pub const fn total_len(&self) -> usize {
        self.header_len() + self.payload_len as usize
    }

    /// Write the header (options included, checksum filled) at the start of `buf`. The payload is
    /// not touched. `Err(PacketTooBig)` if header + payload exceed 65535 bytes.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        let hl = self.header_len();
        if buf.len() < hl {
            return Err(Error::BufferTooSmall);
        }
        let total = self.total_len();
        if total > 0xFFFF {
            return Err(Error::PacketTooBig);
        }
        let mut p = Ipv4Packet::new_unchecked(&mut buf[..hl]);
        p.set_version_and_header_len(hl);
        p.set_tos(self.tos);
        p.set_total_len(total as u16);
        p.set_ident(self.ident);
        p.set_frag(self.dont_frag, self.more_frags, self.frag_offset);
        p.set_ttl(self.ttl);
        p.set_protocol(self.protocol);
        p.set_src_addr(self.src_addr);
        p.set_dst_addr(self.dst_addr);
        p.options_mut().copy_from_slice(self.options.as_slice());
        p.fill_checksum();
        Ok(())
    }

    /// Sum of the TCP/UDP pseudo-header for this datagram's payload.
    #[inline]
    pub fn pseudo_header_sum(&self) -> u16 {
        checksum::pseudo_header_v4(
            self.src_addr,
            self.dst_addr,
            self.protocol,
            self.payload_len,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 10.0.0.1 -> 10.0.0.2, UDP, ident 0x1c46, DF, TTL 64, 8 bytes of payload; checksum by hand:
    /// 4500+001c+1c46+4000+4011+0a00+0001+0a00+0002 = 0xf576, stored as !0xf576 = 0x0a89.
    const PKT: [u8; 28] = [
        0x45, 0x00, 0x00, 0x1c, 0x1c, 0x46, 0x40, 0x00, 0x40, 0x11, 0x0a, 0x89, 10, 0, 0, 1, 10, 0,
        0, 2, 1, 2, 3, 4, 5, 6, 7, 8,
    ];

    #[test]
    fn parse_fixture() {
        let p = Ipv4Packet::new_checked(&PKT[..]).unwrap();
        assert_eq!(p.checksum(), 0x0a89);
        assert!(p.verify_checksum());
        let r = Ipv4Repr::parse(&p).unwrap();
        assert_eq!(r.src_addr, Ipv4Addr::new(10, 0, 0, 1));
        assert_eq!(r.protocol, IpProtocol::UDP);
        assert_eq!(r.payload_len, 8);
        assert!(r.dont_frag && !r.more_frags && r.frag_offset == 0);
        assert_eq!(p.payload(), &[1, 2, 3, 4, 5, 6, 7, 8]);
        let mut out = [0u8; 28];
        r.emit(&mut out).unwrap();
        out[20..].copy_from_slice(p.payload());
        assert_eq!(out, PKT);
    }

    #[test]
    fn padding_is_not_payload() {
        let mut padded = [0u8; 46];
        padded[..28].copy_from_slice(&PKT);
        let p = Ipv4Packet::new_checked(&padded[..]).unwrap();
        assert_eq!(p.payload().len(), 8);
    }

    #[test]
    fn structural_errors() {
        assert_eq!(
            Ipv4Packet::new_checked(&PKT[..19]).unwrap_err(),
            Error::Ipv4Truncated
        );
        assert_eq!(
            Ipv4Packet::new_checked(&PKT[..27]).unwrap_err(),
            Error::Ipv4BadTotalLen
        );
        let mut b = PKT;
        b[0] = 0x44;
        assert_eq!(
            Ipv4Packet::new_checked(&b[..]).unwrap_err(),
            Error::Ipv4BadIhl
        );
        b[0] = 0x48; // 32-byte header, 28 bytes present
        assert_eq!(
            Ipv4Packet::new_checked(&b[..]).unwrap_err(),
            Error::Ipv4Truncated
        );
        b[0] = 0x46; // 24-byte header, total 28 fine
        assert!(Ipv4Packet::new_checked(&b[..]).is_ok());
        b[3] = 22; // total 22 < header 24
        assert_eq!(
            Ipv4Packet::new_checked(&b[..]).unwrap_err(),
            Error::Ipv4BadTotalLen
        );
        let mut v = PKT;
        v[0] = 0x65;
        let p = Ipv4Packet::new_checked(&v[..]).unwrap();
        assert_eq!(Ipv4Repr::parse(&p), Err(Error::Ipv4BadVersion));
        let mut c = PKT;
        c[11] ^= 1;
        let p = Ipv4Packet::new_checked(&c[..]).unwrap();
        assert_eq!(Ipv4Repr::parse(&p), Err(Error::Ipv4BadChecksum));
        assert!(Ipv4Repr::parse_unverified(&p).is_ok());
    }

    #[test]
    fn fragments() {
        let mut b = PKT;
        // MF + offset 8191*8 = 65528, payload 8 -> 65536 > 65535
        b[6] = 0x3f;
        b[7] = 0xff;
        let mut p = Ipv4Packet::new_checked(&mut b[..]).unwrap();
        p.fill_checksum();
        assert!(p.more_frags() && p.is_fragment());
        assert_eq!(p.frag_offset(), 65528);
        assert_eq!(Ipv4Repr::parse(&p), Err(Error::Ipv4BadFragment));
        p.set_frag(false, false, 1480);
        p.fill_checksum();
        let r = Ipv4Repr::parse(&p).unwrap();
        assert_eq!(
            (r.dont_frag, r.more_frags, r.frag_offset),
            (false, false, 1480)
        );
        assert!(p.is_fragment());
    }

    #[test]
    fn options_round_trip() {
        let opts = Ipv4Options::from_slice(&[0x94, 0x04, 0x00, 0x00]).unwrap(); // router alert
        let mut r = Ipv4Repr::new(
            Ipv4Addr::new(1, 2, 3, 4),
            Ipv4Addr::new(5, 6, 7, 8),
            IpProtocol::IGMP,
            4,
            1,
        );
        r.options = opts;
        let mut buf = [0u8; 28];
        r.emit(&mut buf).unwrap();
        assert_eq!(buf[0], 0x46);
        let p = Ipv4Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(p.options(), &[0x94, 0x04, 0, 0]);
        assert_eq!(Ipv4Repr::parse(&p).unwrap(), r);
        assert!(Ipv4Options::from_slice(&[1, 1, 1]).is_none());
        assert!(Ipv4Options::from_slice(&[1; 44]).is_none());
    }

    #[test]
    fn incremental_rewrites_keep_checksum_valid() {
        let mut b = PKT;
        let mut p = Ipv4Packet::new_checked(&mut b[..]).unwrap();
        assert_eq!(p.decrement_ttl(), 63);
        assert!(p.verify_checksum());
        let old = p.rewrite_dst_addr(Ipv4Addr::new(192, 168, 200, 7));
        assert_eq!(old, Ipv4Addr::new(10, 0, 0, 2));
        p.rewrite_src_addr(Ipv4Addr::new(172, 16, 0, 99));
        assert!(p.verify_checksum());
        let before = p.checksum();
        p.fill_checksum();
        assert_eq!(p.checksum(), before);
    }

    #[test]
    fn setters_cannot_make_accessors_panic() {
        let mut b = PKT;
        let mut p = Ipv4Packet::new_checked(&mut b[..]).unwrap();
        p.set_version_and_header_len(60);
        p.set_total_len(0xFFFF);
        assert_eq!(p.options_mut().len(), 8);
        assert!(p.payload_mut().is_empty());
        let _ = p.verify_checksum();
        p.fill_checksum();
    }
}
