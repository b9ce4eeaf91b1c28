//! VXLAN (RFC 7348): [`VxlanPacket`], [`VxlanRepr`]. Carried in UDP to port [`UDP_PORT`] (4789);
//! the payload is an inner Ethernet frame.
//!
//! Header: flags (8 bits; I = 0x08 means the VNI is valid), 24 reserved bits, the 24-bit VNI,
//! 8 reserved bits. RFC 7348 says reserved bits "MUST be set to zero on transmission and ignored on
//! receipt"; Linux's VXLAN driver is stricter and drops a packet with any flag other than I set (or
//! reserved VNI bits), so [`VxlanRepr::emit`] always writes exactly `08 00 00 00 | VNI | 00`.
//! [`VxlanRepr::parse`] follows the RFC (requires I, ignores the rest: `VxlanBadFlags` without I);
//! [`VxlanPacket::is_canonical`] tells whether Linux would accept the header too.

use crate::bytes::{be32, put32, Field, Rest};
use crate::error::{Error, Result};

/// IANA-assigned VXLAN UDP destination port.
pub const UDP_PORT: u16 = 4789;
/// The I flag (valid VNI).
pub const FLAG_I: u8 = 0x08;

mod field {
    use super::{Field, Rest};
    pub const FLAGS: usize = 0;
    pub const WORD0: Field = 0..4;
    pub const WORD1: Field = 4..8;
    pub const PAYLOAD: Rest = 8..;
}

/// Length of the VXLAN header.
pub const HEADER_LEN: usize = field::PAYLOAD.start;

/// A read/write view of a VXLAN header and the inner frame after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VxlanPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> VxlanPacket<T> {
    /// Wrap without checking.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        VxlanPacket { buffer }
    }

    /// Wrap, checking that the 8-byte header is present.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// `Err(VxlanTruncated)` below 8 bytes.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Error::VxlanTruncated)
        } else {
            Ok(())
        }
    }

    /// The wrapped buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The flags byte.
    #[inline]
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }

    /// The VXLAN network identifier (24 bits).
    #[inline]
    pub fn vni(&self) -> u32 {
        be32(self.buffer.as_ref(), field::WORD1.start) >> 8
    }

    /// Whether the header is exactly what Linux accepts: flags 0x08 and every reserved bit zero.
    #[inline]
    pub fn is_canonical(&self) -> bool {
        let b = self.buffer.as_ref();
        be32(b, field::WORD0.start) == 0x0800_0000 && b[7] == 0
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> VxlanPacket<&'a T> {
    /// The inner Ethernet frame.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[field::PAYLOAD]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> VxlanPacket<T> {
    /// Write the canonical header for `vni` (masked to 24 bits).
    #[inline]
    pub fn set_canonical(&mut self, vni: u32) {
        let b = self.buffer.as_mut();
        put32(b, field::WORD0.start, 0x0800_0000);
        put32(b, field::WORD1.start, (vni & 0x00FF_FFFF) << 8);
    }

    /// Mutable inner frame.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PAYLOAD]
    }
}

/// The fields of a VXLAN header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct VxlanRepr {
    /// VXLAN network identifier (24 bits).
    pub vni: u32,
}

impl VxlanRepr {
    /// Read a checked header: `VxlanBadFlags` unless the I flag is set; reserved bits are ignored.
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(p: &VxlanPacket<T>) -> Result<VxlanRepr> {
        p.check_len()?;
        if p.flags() & FLAG_I == 0 {
            return Err(Error::VxlanBadFlags);
        }
        Ok(VxlanRepr { vni: p.vni() })
    }

    /// 8.
    #[inline]
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Write the canonical header (flags exactly 0x08) at the start of `buf`.
    #[inline]
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        if buf.len() < HEADER_LEN {
            return Err(Error::BufferTooSmall);
        }
        VxlanPacket::new_unchecked(buf).set_canonical(self.vni);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixture() {
        let b = [0x08, 0, 0, 0, 0x12, 0x34, 0x56, 0, 0xde, 0xad];
        let p = VxlanPacket::new_checked(&b[..]).unwrap();
        assert!(p.is_canonical());
        assert_eq!(p.vni(), 0x123456);
        assert_eq!(p.payload(), &[0xde, 0xad]);
        let r = VxlanRepr::parse(&p).unwrap();
        let mut out = [0u8; 8];
        r.emit(&mut out).unwrap();
        assert_eq!(out, b[..8]);
    }

    #[test]
    fn flags_policy() {
        let no_i = [0x00u8, 0, 0, 0, 0, 0, 1, 0];
        let p = VxlanPacket::new_checked(&no_i[..]).unwrap();
        assert_eq!(VxlanRepr::parse(&p), Err(Error::VxlanBadFlags));
        let extra = [0x0Cu8, 0, 0, 0, 0, 0, 1, 0x77];
        let p = VxlanPacket::new_checked(&extra[..]).unwrap();
        assert_eq!(VxlanRepr::parse(&p).unwrap().vni, 1);
        assert!(!p.is_canonical());
        assert_eq!(
            VxlanPacket::new_checked(&extra[..7]).unwrap_err(),
            Error::VxlanTruncated
        );
        let mut out = [0xFFu8; 8];
        VxlanRepr { vni: 0xFFFF_FFFF }.emit(&mut out).unwrap();
        assert_eq!(out, [8, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0]);
    }
}
