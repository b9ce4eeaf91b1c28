//! TCP (RFC 9293): [`TcpPacket`], [`TcpRepr`], [`TcpFlags`], [`TcpOptions`].
//!
//! The view covers one segment, header and payload, as delimited by the IP layer (pass the IP
//! payload, not the rest of the frame, or the checksum covers Ethernet padding).
//! [`TcpPacket::new_checked`] validates: ≥ 20 bytes (`TcpTruncated`), data offset ≥ 5
//! (`TcpBadDataOffset`), and the whole header present (`TcpTruncated`); no accessor panics after it.
//! Options are kept as bytes and not interpreted (the load balancer only forwards them).
//!
//! Checksums take the segment's [`IpPair`] for the pseudo-header: [`TcpPacket::verify_checksum`],
//! [`TcpPacket::fill_checksum`]; after an in-place rewrite of a covered field (a port, or an address
//! of the pseudo-header) use [`TcpPacket::update_checksum`] (RFC 1624).

use core::fmt;

use crate::bytes::{be16, be32, put16, put32, Field};
use crate::checksum;
use crate::error::{Error, Result};
use crate::ip::{IpPair, IpProtocol};

mod field {
    use super::Field;
    pub const SRC_PORT: Field = 0..2;
    pub const DST_PORT: Field = 2..4;
    pub const SEQ_NUM: Field = 4..8;
    pub const ACK_NUM: Field = 8..12;
    pub const FLAGS: Field = 12..14;
    pub const WIN_SIZE: Field = 14..16;
    pub const CHECKSUM: Field = 16..18;
    pub const URGENT: Field = 18..20;
}

/// Length of the TCP header without options.
pub const HEADER_LEN: usize = field::URGENT.end;
/// Longest TCP header (data offset 15).
pub const MAX_HEADER_LEN: usize = 60;

/// The 12 bits after the data offset: 3 reserved bits, the historic NS bit (RFC 3540) and the eight
/// flags CWR ECE URG ACK PSH RST SYN FIN.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TcpFlags(pub u16);

impl TcpFlags {
    /// FIN.
    pub const FIN: TcpFlags = TcpFlags(0x001);
    /// SYN.
    pub const SYN: TcpFlags = TcpFlags(0x002);
    /// RST.
    pub const RST: TcpFlags = TcpFlags(0x004);
    /// PSH.
    pub const PSH: TcpFlags = TcpFlags(0x008);
    /// ACK.
    pub const ACK: TcpFlags = TcpFlags(0x010);
    /// URG.
    pub const URG: TcpFlags = TcpFlags(0x020);
    /// ECE.
    pub const ECE: TcpFlags = TcpFlags(0x040);
    /// CWR.
    pub const CWR: TcpFlags = TcpFlags(0x080);
    /// NS (historic, RFC 3540; now reserved / AccECN's AE).
    pub const NS: TcpFlags = TcpFlags(0x100);
    /// No flags.
    pub const NONE: TcpFlags = TcpFlags(0);

    /// Whether every flag of `other` is set.
    #[inline]
    pub const fn contains(self, other: TcpFlags) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether any flag of `other` is set.
    #[inline]
    pub const fn intersects(self, other: TcpFlags) -> bool {
        self.0 & other.0 != 0
    }

    /// SYN without ACK: the first packet of a connection (the load balancer's "new flow" signal).
    #[inline]
    pub const fn is_syn_only(self) -> bool {
        self.0 & (Self::SYN.0 | Self::ACK.0 | Self::RST.0) == Self::SYN.0
    }

    /// The low eight flag bits (CWR..FIN) as a byte.
    #[inline]
    pub const fn bits8(self) -> u8 {
        self.0 as u8
    }
}

impl core::ops::BitOr for TcpFlags {
    type Output = TcpFlags;
    #[inline]
    fn bitor(self, o: TcpFlags) -> TcpFlags {
        TcpFlags(self.0 | o.0)
    }
}

impl fmt::Debug for TcpFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const NAMES: [(u16, char); 9] = [
            (0x100, 'N'),
            (0x80, 'C'),
            (0x40, 'E'),
            (0x20, 'U'),
            (0x10, 'A'),
            (0x08, 'P'),
            (0x04, 'R'),
            (0x02, 'S'),
            (0x01, 'F'),
        ];
        f.write_str("TcpFlags(")?;
        for (bit, c) in NAMES {
            if self.0 & bit != 0 {
                fmt::Write::write_char(f, c)?;
            }
        }
        if self.0 & 0xE00 != 0 {
            write!(f, "+rsv{:#x}", self.0 & 0xE00)?;
        }
        f.write_str(")")
    }
}

/// TCP options, stored inline (no allocation): up to 40 bytes, a multiple of 4 long.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct TcpOptions {
    len: u8,
    bytes: [u8; 40],
}

impl TcpOptions {
    /// No options.
    pub const NONE: TcpOptions = TcpOptions {
        len: 0,
        bytes: [0; 40],
    };

    /// Copy option bytes; `None` if longer than 40 or not a multiple of 4 (pad with NOP / EOL).
    #[inline]
    pub fn from_slice(b: &[u8]) -> Option<TcpOptions> {
        if b.len() > 40 || !b.len().is_multiple_of(4) {
            return None;
        }
        let mut o = TcpOptions::NONE;
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

impl Default for TcpOptions {
    fn default() -> Self {
        TcpOptions::NONE
    }
}

impl fmt::Debug for TcpOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TcpOptions({:02x?})", self.as_slice())
    }
}

/// A read/write view of a TCP segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> TcpPacket<T> {
    /// Wrap without checking.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        TcpPacket { buffer }
    }

    /// Wrap and validate (see the module doc).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// `TcpTruncated` or `TcpBadDataOffset`.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Error::TcpTruncated);
        }
        let hl = self.header_len();
        if hl < HEADER_LEN {
            return Err(Error::TcpBadDataOffset);
        }
        if hl > len {
            return Err(Error::TcpTruncated);
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
    /// Sequence number.
    #[inline]
    pub fn seq_number(&self) -> u32 {
        be32(self.buffer.as_ref(), field::SEQ_NUM.start)
    }
    /// Acknowledgment number.
    #[inline]
    pub fn ack_number(&self) -> u32 {
        be32(self.buffer.as_ref(), field::ACK_NUM.start)
    }
    /// Header length in bytes (data offset × 4).
    #[inline]
    pub fn header_len(&self) -> usize {
        ((self.buffer.as_ref()[field::FLAGS.start] >> 4) as usize) * 4
    }
    /// Flags (and reserved bits).
    #[inline]
    pub fn flags(&self) -> TcpFlags {
        TcpFlags(be16(self.buffer.as_ref(), field::FLAGS.start) & 0x0FFF)
    }
    /// Window size.
    #[inline]
    pub fn window_len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::WIN_SIZE.start)
    }
    /// Checksum field.
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM.start)
    }
    /// Urgent pointer.
    #[inline]
    pub fn urgent_at(&self) -> u16 {
        be16(self.buffer.as_ref(), field::URGENT.start)
    }

    /// Whether the checksum over the whole segment verifies with `addrs`' pseudo-header.
    #[inline]
    pub fn verify_checksum(&self, addrs: &IpPair) -> bool {
        let b = self.buffer.as_ref();
        let ph = addrs.pseudo_header_sum(IpProtocol::TCP, b.len() as u32);
        checksum::add(ph, checksum::sum(b)) == 0xFFFF
    }

    #[inline]
    fn hl_clamped(&self) -> usize {
        self.header_len()
            .clamp(HEADER_LEN, self.buffer.as_ref().len())
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> TcpPacket<&'a T> {
    /// Option bytes.
    #[inline]
    pub fn options(&self) -> &'a [u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.hl_clamped()]
    }
    /// Payload after the header.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[self.hl_clamped()..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> TcpPacket<T> {
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
    /// Set the sequence number.
    #[inline]
    pub fn set_seq_number(&mut self, v: u32) {
        put32(self.buffer.as_mut(), field::SEQ_NUM.start, v);
    }
    /// Set the acknowledgment number.
    #[inline]
    pub fn set_ack_number(&mut self, v: u32) {
        put32(self.buffer.as_mut(), field::ACK_NUM.start, v);
    }
    /// Set the header length in bytes (a multiple of 4, 20..=60) and the flags.
    #[inline]
    pub fn set_header_len_and_flags(&mut self, header_len: usize, flags: TcpFlags) {
        let v = (((header_len / 4) as u16 & 0xF) << 12) | (flags.0 & 0x0FFF);
        put16(self.buffer.as_mut(), field::FLAGS.start, v);
    }
    /// Set the window size.
    #[inline]
    pub fn set_window_len(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::WIN_SIZE.start, v);
    }
    /// Set the checksum field.
    #[inline]
    pub fn set_checksum(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::CHECKSUM.start, v);
    }
    /// Set the urgent pointer.
    #[inline]
    pub fn set_urgent_at(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::URGENT.start, v);
    }
    /// Compute and store the checksum over the whole segment with `addrs`' pseudo-header.
    #[inline]
    pub fn fill_checksum(&mut self, addrs: &IpPair) {
        self.set_checksum(0);
        let b = self.buffer.as_ref();
        let ph = addrs.pseudo_header_sum(IpProtocol::TCP, b.len() as u32);
        let c = checksum::finish(checksum::add(ph, checksum::sum(b)));
        self.set_checksum(c);
    }
    /// RFC 1624 update after a covered field (even offset, even length) changed from `old` to `new`
    /// (e.g. a rewritten IP address: pass its old and new octets). Returns `false`, leaving the
    /// checksum alone, if the lengths differ or are odd.
    #[inline]
    pub fn update_checksum(&mut self, old: &[u8], new: &[u8]) -> bool {
        match checksum::update_bytes(self.checksum(), old, new) {
            Some(c) => {
                self.set_checksum(c);
                true
            }
            None => false,
        }
    }
    /// Mutable options.
    #[inline]
    pub fn options_mut(&mut self) -> &mut [u8] {
        let e = self.hl_clamped();
        &mut self.buffer.as_mut()[HEADER_LEN..e]
    }
    /// Mutable payload.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let s = self.hl_clamped();
        &mut self.buffer.as_mut()[s..]
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for TcpPacket<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// The fields of a TCP header (the payload stays in the buffer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TcpRepr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Sequence number.
    pub seq_number: u32,
    /// Acknowledgment number.
    pub ack_number: u32,
    /// Flags (reserved bits included, so they round-trip).
    pub flags: TcpFlags,
    /// Window size.
    pub window_len: u16,
    /// Urgent pointer.
    pub urgent_at: u16,
    /// Options, uninterpreted.
    pub options: TcpOptions,
}

impl TcpRepr {
    /// Parse a segment's header. The checksum is not verified (the load balancer forwards without
    /// verifying; use [`TcpPacket::verify_checksum`] where policy wants it).
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(p: &TcpPacket<T>) -> Result<TcpRepr> {
        p.check_len()?;
        let b = p.buffer.as_ref();
        Ok(TcpRepr {
            src_port: p.src_port(),
            dst_port: p.dst_port(),
            seq_number: p.seq_number(),
            ack_number: p.ack_number(),
            flags: p.flags(),
            window_len: p.window_len(),
            urgent_at: p.urgent_at(),
            // check_len guarantees 20 <= header_len <= 60, a multiple of 4.
            options: TcpOptions::from_slice(&b[HEADER_LEN..p.header_len()]).unwrap_or_default(),
        })
    }

    /// Header length this repr emits.
    #[inline]
    pub const fn header_len(&self) -> usize {
        HEADER_LEN + self.options.len()
    }

    /// Write the header at the start of `segment` with a zero checksum; returns the header length.
    pub fn emit_header(&self, segment: &mut [u8]) -> Result<usize> {
        let hl = self.header_len();
        if segment.len() < hl {
            return Err(Error::BufferTooSmall);
        }
        let mut p = TcpPacket::new_unchecked(&mut *segment);
        p.set_src_port(self.src_port);
        p.set_dst_port(self.dst_port);
        p.set_seq_number(self.seq_number);
        p.set_ack_number(self.ack_number);
        p.set_header_len_and_flags(hl, self.flags);
        p.set_window_len(self.window_len);
        p.set_checksum(0);
        p.set_urgent_at(self.urgent_at);
        segment[HEADER_LEN..hl].copy_from_slice(self.options.as_slice());
        Ok(hl)
    }

    /// Write the header at the start of `segment`, which must already hold the payload after the
    /// header and end where the segment ends, and fill the checksum over all of it.
    pub fn emit(&self, segment: &mut [u8], addrs: &IpPair) -> Result<usize> {
        let hl = self.emit_header(segment)?;
        TcpPacket::new_unchecked(segment).fill_checksum(addrs);
        Ok(hl)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::Ipv4Addr;

    fn addrs() -> IpPair {
        IpPair::V4(
            Ipv4Addr::new(192, 168, 0, 1),
            Ipv4Addr::new(192, 168, 0, 199),
        )
    }

    /// SYN from 192.168.0.1:40000 to 192.168.0.199:80, seq 1, MSS 1460 option, no payload.
    /// Checksum 0x797c, computed independently (RFC 1071 over pseudo-header + segment in Python):
    /// pseudo-header and segment sum to 0x8683, stored as its complement.
    const SYN: [u8; 24] = [
        0x9c, 0x40, 0x00, 0x50, 0, 0, 0, 1, 0, 0, 0, 0, 0x60, 0x02, 0xff, 0xff, 0x79, 0x7c, 0, 0,
        0x02, 0x04, 0x05, 0xb4,
    ];

    #[test]
    fn parse_fixture() {
        let p = TcpPacket::new_checked(&SYN[..]).unwrap();
        assert!(p.verify_checksum(&addrs()));
        let r = TcpRepr::parse(&p).unwrap();
        assert_eq!((r.src_port, r.dst_port, r.seq_number), (40000, 80, 1));
        assert!(r.flags.is_syn_only());
        assert_eq!(r.options.as_slice(), &[2, 4, 5, 0xb4]);
        assert!(p.payload().is_empty());
        let mut out = [0u8; 24];
        r.emit(&mut out, &addrs()).unwrap();
        assert_eq!(out, SYN);
        assert_eq!(std::format!("{:?}", r.flags), "TcpFlags(S)");
    }

    #[test]
    fn errors() {
        assert_eq!(
            TcpPacket::new_checked(&SYN[..19]).unwrap_err(),
            Error::TcpTruncated
        );
        assert_eq!(
            TcpPacket::new_checked(&SYN[..23]).unwrap_err(),
            Error::TcpTruncated
        );
        let mut b = SYN;
        b[12] = 0x40;
        assert_eq!(
            TcpPacket::new_checked(&b[..]).unwrap_err(),
            Error::TcpBadDataOffset
        );
        b[12] = 0x50;
        let p = TcpPacket::new_checked(&b[..]).unwrap();
        assert_eq!(p.payload(), &[2, 4, 5, 0xb4]);
    }

    #[test]
    fn incremental_update_after_nat() {
        let mut b = SYN;
        let mut p = TcpPacket::new_checked(&mut b[..]).unwrap();
        let new_dst = Ipv4Addr::new(10, 9, 8, 7);
        p.update_checksum(&[192, 168, 0, 199], &new_dst.octets());
        assert!(p.verify_checksum(&IpPair::V4(Ipv4Addr::new(192, 168, 0, 1), new_dst)));
        let old_port = p.dst_port();
        p.set_dst_port(8080);
        p.update_checksum(&old_port.to_be_bytes(), &8080u16.to_be_bytes());
        assert!(p.verify_checksum(&IpPair::V4(Ipv4Addr::new(192, 168, 0, 1), new_dst)));
        assert!(!p.update_checksum(&[1, 2, 3], &[1, 2, 3]));
    }

    #[test]
    fn flags() {
        let f = TcpFlags::SYN | TcpFlags::ACK;
        assert!(f.contains(TcpFlags::SYN) && !f.is_syn_only());
        assert!(f.intersects(TcpFlags::ACK | TcpFlags::FIN));
        assert_eq!(f.bits8(), 0x12);
    }
}
