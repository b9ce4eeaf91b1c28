//! IEEE 802.1Q VLAN tags and 802.1ad QinQ stacks: [`VlanHeader`], [`VlanRepr`], [`Tci`], [`VlanTag`].
//!
//! On the wire a tag is the TPID (in the position of the ethertype: 0x8100, or 0x88A8 / 0x9100 for a
//! QinQ outer tag) followed by these 4 bytes: the TCI (PCP 3 bits, DEI 1 bit, VID 12 bits) and the
//! next ethertype. [`VlanHeader`] views the 4 bytes after a TPID, so a tagged frame reads as
//! `EthernetFrame` (ethertype = TPID) → `VlanHeader` (ethertype = next TPID or the payload type) → ….
//! The summary parser accepts at most two tags (single tag and QinQ), see [`crate::summary`].

use crate::bytes::{be16, put16, Field, Rest};
use crate::error::{Error, Result};
use crate::ethernet::EtherType;

/// The tag control information: priority code point, drop-eligible indicator, VLAN id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Tci(pub u16);

impl Tci {
    /// Build a TCI. `pcp` is masked to 3 bits and `vid` to 12 bits.
    #[inline]
    pub const fn new(pcp: u8, dei: bool, vid: u16) -> Tci {
        Tci(((pcp as u16 & 7) << 13) | ((dei as u16) << 12) | (vid & 0x0FFF))
    }
    /// Priority code point (802.1p), 0..=7.
    #[inline]
    pub const fn pcp(self) -> u8 {
        (self.0 >> 13) as u8
    }
    /// Drop-eligible indicator.
    #[inline]
    pub const fn dei(self) -> bool {
        self.0 & 0x1000 != 0
    }
    /// VLAN identifier, 0..=4095.
    #[inline]
    pub const fn vid(self) -> u16 {
        self.0 & 0x0FFF
    }
}

/// One tag of a frame as the summary parser reports it: its TPID and TCI.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct VlanTag {
    /// The ethertype value that announced this tag (0x8100, 0x88A8 or 0x9100).
    pub tpid: EtherType,
    /// The tag's control information.
    pub tci: Tci,
}

mod field {
    use super::{Field, Rest};
    pub const TCI: Field = 0..2;
    pub const ETHERTYPE: Field = 2..4;
    pub const PAYLOAD: Rest = 4..;
}

/// Length of the part of a tag after its TPID.
pub const HEADER_LEN: usize = field::PAYLOAD.start;

/// A view of the 4 bytes of a VLAN tag that follow its TPID, and what comes after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VlanHeader<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> VlanHeader<T> {
    /// Wrap without checking (accessors may panic on a short buffer).
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        VlanHeader { buffer }
    }

    /// Wrap, checking that the 4 bytes are present.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let h = Self::new_unchecked(buffer);
        h.check_len()?;
        Ok(h)
    }

    /// `Err(VlanTruncated)` if the buffer is shorter than 4 bytes.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Error::VlanTruncated)
        } else {
            Ok(())
        }
    }

    /// The wrapped buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Tag control information.
    #[inline]
    pub fn tci(&self) -> Tci {
        Tci(be16(self.buffer.as_ref(), field::TCI.start))
    }

    /// The ethertype after this tag (another TPID for QinQ).
    #[inline]
    pub fn ethertype(&self) -> EtherType {
        EtherType(be16(self.buffer.as_ref(), field::ETHERTYPE.start))
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> VlanHeader<&'a T> {
    /// Bytes after the tag.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[field::PAYLOAD]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> VlanHeader<T> {
    /// Set the TCI.
    #[inline]
    pub fn set_tci(&mut self, tci: Tci) {
        put16(self.buffer.as_mut(), field::TCI.start, tci.0);
    }

    /// Set the ethertype after the tag.
    #[inline]
    pub fn set_ethertype(&mut self, t: EtherType) {
        put16(self.buffer.as_mut(), field::ETHERTYPE.start, t.0);
    }
}

/// The fields of the 4 bytes after a TPID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct VlanRepr {
    /// Tag control information.
    pub tci: Tci,
    /// The ethertype after the tag.
    pub ethertype: EtherType,
}

impl VlanRepr {
    /// Read a checked header.
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(h: &VlanHeader<T>) -> Result<VlanRepr> {
        h.check_len()?;
        Ok(VlanRepr {
            tci: h.tci(),
            ethertype: h.ethertype(),
        })
    }

    /// 4.
    #[inline]
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Write the 4 bytes at the start of `buf`.
    #[inline]
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        if buf.len() < HEADER_LEN {
            return Err(Error::BufferTooSmall);
        }
        let mut h = VlanHeader::new_unchecked(buf);
        h.set_tci(self.tci);
        h.set_ethertype(self.ethertype);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ethernet::EthernetFrame;

    #[test]
    fn qinq_fixture() {
        // dst, src, 88a8 [pcp 5, vid 100], 8100 [dei, vid 4094], 86dd, payload
        let frame = [
            1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 0x88, 0xa8, 0xa0, 0x64, 0x81, 0x00, 0x1f, 0xfe,
            0x86, 0xdd, 0x60, 0x00,
        ];
        let e = EthernetFrame::new_checked(&frame[..]).unwrap();
        assert!(e.ethertype().is_vlan());
        let outer = VlanHeader::new_checked(e.payload()).unwrap();
        assert_eq!(outer.tci(), Tci::new(5, false, 100));
        assert_eq!(outer.tci().pcp(), 5);
        assert_eq!(outer.tci().vid(), 100);
        assert_eq!(outer.ethertype(), EtherType::VLAN);
        let inner = VlanHeader::new_checked(outer.payload()).unwrap();
        assert!(inner.tci().dei());
        assert_eq!(inner.tci().vid(), 4094);
        assert_eq!(inner.ethertype(), EtherType::IPV6);
        assert_eq!(inner.payload(), &[0x60, 0x00]);

        let r = VlanRepr::parse(&inner).unwrap();
        let mut b = [0u8; 4];
        r.emit(&mut b).unwrap();
        assert_eq!(b, frame[18..22]);
    }

    #[test]
    fn truncated_tag() {
        assert_eq!(
            VlanHeader::new_checked(&[0u8, 1, 2][..]).unwrap_err(),
            Error::VlanTruncated
        );
        assert_eq!(Tci::new(9, true, 0xFFFF), Tci(0x3FFF | 0x1000 | 0x2000));
    }
}
