//! GRE (RFC 2784 with the key and sequence number extensions of RFC 2890, and RFC 1701's recursion
//! control field): [`GrePacket`], [`GreRepr`].
//!
//! Header: a 16-bit flags/version word — C (checksum present, 0x8000), R (routing, 0x4000),
//! K (key, 0x2000), S (sequence, 0x1000), s (strict source route, 0x0800), Recur (3 bits, 0x0700),
//! flags (0x00F8), version (0x0007) — and the protocol type (an ethertype), then optionally the
//! checksum with 16 reserved bits (C), the key (K) and the sequence number (S), in that order.
//!
//! [`GrePacket::new_checked`] validates the header against the buffer (`GreTruncated`) and rejects
//! version ≠ 0 (`GreBadVersion`: version 1 is PPTP's enhanced GRE, another layout) and the routing
//! or strict-source-route bits (`GreUnsupported`: RFC 1701 source routing, deprecated, of variable
//! length). After it no accessor panics.
//!
//! **Recursion control** (Maglev §4.3: "we use the GRE recursion control field to ensure that
//! fragments are only redirected once"): RFC 2784 folded the field into its reserved bits, which a
//! receiver must ignore except bits 1–5. Recur occupies bits 5–7, so values 0–3 only touch bits 6–7
//! and pass any RFC 2784 receiver (and Linux, which only rejects the version and routing bits);
//! flowplane marks a packet that one balancer redirected to another with `recursion = 1`
//! ([`GreRepr::recursion`], [`GrePacket::recursion`]) and never redirects a packet whose recursion
//! is non-zero. Values 4–7 set bit 5 and are parsed but should not be sent.
//!
//! The GRE checksum (if present) covers the GRE header and its payload.

use crate::bytes::{be16, be32, put16, put32, Field};
use crate::checksum;
use crate::error::{Error, Result};
use crate::ethernet::EtherType;

mod field {
    use super::Field;
    pub const FLAGS: Field = 0..2;
    pub const PROTOCOL: Field = 2..4;
}

/// Checksum-present bit.
pub const FLAG_C: u16 = 0x8000;
/// Routing-present bit (RFC 1701; rejected).
pub const FLAG_R: u16 = 0x4000;
/// Key-present bit (RFC 2890).
pub const FLAG_K: u16 = 0x2000;
/// Sequence-number-present bit (RFC 2890).
pub const FLAG_S: u16 = 0x1000;
/// Strict-source-route bit (RFC 1701; rejected).
pub const FLAG_SSR: u16 = 0x0800;
const RECUR_MASK: u16 = 0x0700;
const VERSION_MASK: u16 = 0x0007;

/// Length of the base GRE header (flags and protocol).
pub const BASE_HEADER_LEN: usize = 4;
/// Longest header this crate handles (checksum, key and sequence present).
pub const MAX_HEADER_LEN: usize = 16;

/// A read/write view of a GRE packet (header and payload).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrePacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> GrePacket<T> {
    /// Wrap without checking.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        GrePacket { buffer }
    }

    /// Wrap and validate (see the module doc).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// `GreTruncated`, `GreBadVersion` or `GreUnsupported`.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < BASE_HEADER_LEN {
            return Err(Error::GreTruncated);
        }
        let f = self.flags();
        if f & VERSION_MASK != 0 {
            return Err(Error::GreBadVersion);
        }
        if f & (FLAG_R | FLAG_SSR) != 0 {
            return Err(Error::GreUnsupported);
        }
        if b.len() < self.header_len() {
            return Err(Error::GreTruncated);
        }
        Ok(())
    }

    /// The wrapped buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The raw flags/version word.
    #[inline]
    pub fn flags(&self) -> u16 {
        be16(self.buffer.as_ref(), field::FLAGS.start)
    }
    /// Checksum present (C).
    #[inline]
    pub fn checksum_present(&self) -> bool {
        self.flags() & FLAG_C != 0
    }
    /// Key present (K).
    #[inline]
    pub fn key_present(&self) -> bool {
        self.flags() & FLAG_K != 0
    }
    /// Sequence number present (S).
    #[inline]
    pub fn sequence_present(&self) -> bool {
        self.flags() & FLAG_S != 0
    }
    /// Recursion control, 0..=7.
    #[inline]
    pub fn recursion(&self) -> u8 {
        ((self.flags() & RECUR_MASK) >> 8) as u8
    }
    /// Version (0 after `new_checked`).
    #[inline]
    pub fn version(&self) -> u8 {
        (self.flags() & VERSION_MASK) as u8
    }
    /// Protocol type of the payload (0x0800 IPv4, 0x86DD IPv6, 0x6558 Ethernet).
    #[inline]
    pub fn protocol(&self) -> EtherType {
        EtherType(be16(self.buffer.as_ref(), field::PROTOCOL.start))
    }

    /// Header length implied by the C, K and S bits.
    #[inline]
    pub fn header_len(&self) -> usize {
        let f = self.flags();
        BASE_HEADER_LEN
            + if f & FLAG_C != 0 { 4 } else { 0 }
            + if f & FLAG_K != 0 { 4 } else { 0 }
            + if f & FLAG_S != 0 { 4 } else { 0 }
    }

    #[inline]
    fn key_offset(&self) -> usize {
        BASE_HEADER_LEN + if self.checksum_present() { 4 } else { 0 }
    }

    #[inline]
    fn seq_offset(&self) -> usize {
        self.key_offset() + if self.key_present() { 4 } else { 0 }
    }

    /// Checksum field, if present.
    #[inline]
    pub fn checksum(&self) -> Option<u16> {
        let b = self.buffer.as_ref();
        if self.checksum_present() && b.len() >= 8 {
            Some(be16(b, 4))
        } else {
            None
        }
    }
    /// Key, if present.
    #[inline]
    pub fn key(&self) -> Option<u32> {
        let b = self.buffer.as_ref();
        let o = self.key_offset();
        if self.key_present() && b.len() >= o + 4 {
            Some(be32(b, o))
        } else {
            None
        }
    }
    /// Sequence number, if present.
    #[inline]
    pub fn sequence(&self) -> Option<u32> {
        let b = self.buffer.as_ref();
        let o = self.seq_offset();
        if self.sequence_present() && b.len() >= o + 4 {
            Some(be32(b, o))
        } else {
            None
        }
    }

    /// Whether the checksum verifies (`true` when no checksum is present).
    #[inline]
    pub fn verify_checksum(&self) -> bool {
        !self.checksum_present() || checksum::verify(self.buffer.as_ref())
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> GrePacket<&'a T> {
    /// The encapsulated packet.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        let b = self.buffer.as_ref();
        &b[self.header_len().min(b.len())..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> GrePacket<T> {
    /// Set the recursion control field (masked to 3 bits), keeping the other flags. Does not update
    /// a GRE checksum: call [`GrePacket::fill_checksum`] if one is present.
    #[inline]
    pub fn set_recursion(&mut self, r: u8) {
        let f = (self.flags() & !RECUR_MASK) | (((r & 7) as u16) << 8);
        put16(self.buffer.as_mut(), field::FLAGS.start, f);
    }
    /// Set the protocol type.
    #[inline]
    pub fn set_protocol(&mut self, p: EtherType) {
        put16(self.buffer.as_mut(), field::PROTOCOL.start, p.0);
    }
    /// Overwrite the key if the K bit is set; returns whether it was.
    #[inline]
    pub fn set_key(&mut self, key: u32) -> bool {
        let o = self.key_offset();
        if self.key_present() && self.buffer.as_ref().len() >= o + 4 {
            put32(self.buffer.as_mut(), o, key);
            true
        } else {
            false
        }
    }
    /// Overwrite the sequence number if the S bit is set; returns whether it was.
    #[inline]
    pub fn set_sequence(&mut self, seq: u32) -> bool {
        let o = self.seq_offset();
        if self.sequence_present() && self.buffer.as_ref().len() >= o + 4 {
            put32(self.buffer.as_mut(), o, seq);
            true
        } else {
            false
        }
    }
    /// Recompute the checksum over header and payload if the C bit is set.
    #[inline]
    pub fn fill_checksum(&mut self) {
        if !self.checksum_present() || self.buffer.as_ref().len() < 8 {
            return;
        }
        put16(self.buffer.as_mut(), 4, 0);
        let c = checksum::checksum(self.buffer.as_ref());
        put16(self.buffer.as_mut(), 4, c);
    }
    /// Mutable payload.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let s = self.header_len().min(self.buffer.as_ref().len());
        &mut self.buffer.as_mut()[s..]
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for GrePacket<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// The fields of a GRE header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GreRepr {
    /// Protocol type of the payload.
    pub protocol: EtherType,
    /// Whether to carry a checksum (over header and payload).
    pub checksum: bool,
    /// Key (RFC 2890), if any.
    pub key: Option<u32>,
    /// Sequence number (RFC 2890), if any.
    pub sequence: Option<u32>,
    /// Recursion control (0..=7; flowplane sends 0, or 1 for a once-redirected fragment).
    pub recursion: u8,
}

impl GreRepr {
    /// A plain header: no checksum, key or sequence, recursion 0.
    pub const fn new(protocol: EtherType) -> GreRepr {
        GreRepr {
            protocol,
            checksum: false,
            key: None,
            sequence: None,
            recursion: 0,
        }
    }

    /// Read a checked header. The checksum is not verified (see [`GrePacket::verify_checksum`]).
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(p: &GrePacket<T>) -> Result<GreRepr> {
        p.check_len()?;
        Ok(GreRepr {
            protocol: p.protocol(),
            checksum: p.checksum_present(),
            key: p.key(),
            sequence: p.sequence(),
            recursion: p.recursion(),
        })
    }

    /// Header length this repr emits: 4, plus 4 for each of checksum, key, sequence.
    #[inline]
    pub const fn header_len(&self) -> usize {
        BASE_HEADER_LEN
            + if self.checksum { 4 } else { 0 }
            + if self.key.is_some() { 4 } else { 0 }
            + if self.sequence.is_some() { 4 } else { 0 }
    }

    /// Write the header at the start of `buf` with a zero checksum field (if any); returns the
    /// header length.
    pub fn emit_header(&self, buf: &mut [u8]) -> Result<usize> {
        let hl = self.header_len();
        if buf.len() < hl {
            return Err(Error::BufferTooSmall);
        }
        let mut f = ((self.recursion & 7) as u16) << 8;
        if self.checksum {
            f |= FLAG_C;
        }
        if self.key.is_some() {
            f |= FLAG_K;
        }
        if self.sequence.is_some() {
            f |= FLAG_S;
        }
        put16(buf, 0, f);
        put16(buf, 2, self.protocol.0);
        let mut o = BASE_HEADER_LEN;
        if self.checksum {
            put32(buf, o, 0);
            o += 4;
        }
        if let Some(k) = self.key {
            put32(buf, o, k);
            o += 4;
        }
        if let Some(s) = self.sequence {
            put32(buf, o, s);
        }
        Ok(hl)
    }

    /// Write the header at the start of `packet` (which already holds the payload after the header
    /// and ends where the GRE packet ends) and fill the checksum if requested.
    pub fn emit(&self, packet: &mut [u8]) -> Result<usize> {
        let hl = self.emit_header(packet)?;
        if self.checksum {
            GrePacket::new_unchecked(packet).fill_checksum();
        }
        Ok(hl)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_fixture() {
        let b = [0x00, 0x00, 0x08, 0x00, 0x45, 0x00];
        let p = GrePacket::new_checked(&b[..]).unwrap();
        assert_eq!(p.header_len(), 4);
        assert_eq!(p.protocol(), EtherType::IPV4);
        assert_eq!((p.key(), p.sequence(), p.checksum()), (None, None, None));
        assert_eq!(p.payload(), &[0x45, 0x00]);
        assert_eq!(GreRepr::parse(&p).unwrap(), GreRepr::new(EtherType::IPV4));
    }

    #[test]
    fn all_options_and_recursion() {
        let r = GreRepr {
            protocol: EtherType::IPV6,
            checksum: true,
            key: Some(0x0102_0304),
            sequence: Some(7),
            recursion: 1,
        };
        let mut b = [0u8; 20];
        b[16..].copy_from_slice(&[0x60, 0, 0, 0]);
        assert_eq!(r.emit(&mut b).unwrap(), 16);
        // C|K|S = 0xb000, recursion 1 = 0x0100.
        assert_eq!(&b[..4], &[0xb1, 0x00, 0x86, 0xdd]);
        assert_eq!(&b[8..16], &[1, 2, 3, 4, 0, 0, 0, 7]);
        let p = GrePacket::new_checked(&b[..]).unwrap();
        assert!(p.verify_checksum());
        assert_eq!(GreRepr::parse(&p).unwrap(), r);
        assert_eq!(p.payload(), &[0x60, 0, 0, 0]);

        let mut p = GrePacket::new_checked(&mut b[..]).unwrap();
        p.set_recursion(0);
        assert!(!p.verify_checksum());
        p.fill_checksum();
        assert!(p.verify_checksum());
        assert!(p.set_key(9) && p.set_sequence(10));
        assert_eq!(
            (p.key(), p.sequence(), p.recursion()),
            (Some(9), Some(10), 0)
        );
    }

    #[test]
    fn key_only_layout() {
        let r = GreRepr {
            key: Some(0xAABBCCDD),
            ..GreRepr::new(EtherType::IPV4)
        };
        let mut b = [0u8; 8];
        r.emit(&mut b).unwrap();
        assert_eq!(b, [0x20, 0x00, 0x08, 0x00, 0xAA, 0xBB, 0xCC, 0xDD]);
    }

    #[test]
    fn errors() {
        assert_eq!(
            GrePacket::new_checked(&[0u8, 0, 8][..]).unwrap_err(),
            Error::GreTruncated
        );
        assert_eq!(
            GrePacket::new_checked(&[0x20u8, 0, 8, 0, 1][..]).unwrap_err(),
            Error::GreTruncated
        );
        assert_eq!(
            GrePacket::new_checked(&[0x00u8, 1, 8, 0][..]).unwrap_err(),
            Error::GreBadVersion
        );
        assert_eq!(
            GrePacket::new_checked(&[0x40u8, 0, 8, 0, 0, 0, 0, 0][..]).unwrap_err(),
            Error::GreUnsupported
        );
        assert_eq!(
            GrePacket::new_checked(&[0x08u8, 0, 8, 0][..]).unwrap_err(),
            Error::GreUnsupported
        );
        let mut small = [0u8; 7];
        assert_eq!(
            GreRepr {
                checksum: true,
                key: Some(1),
                ..GreRepr::new(EtherType::IPV4)
            }
            .emit(&mut small),
            Err(Error::BufferTooSmall)
        );
    }
}
