//! ARP (RFC 826): [`ArpPacket`] for any hardware/protocol address sizes, [`ArpRepr`] for the only
//! combination the switch meets, Ethernet + IPv4.
//!
//! `new_checked` validates the fixed 8-byte part and the four variable-length addresses against the
//! buffer, so the address slices never panic. Trailing bytes (Ethernet padding) are ignored.

use core::net::Ipv4Addr;

use crate::bytes::{arr4, arr6, be16, put16, Field};
use crate::error::{Error, Result};
use crate::ethernet::{EtherType, MacAddr};

/// ARP operation code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ArpOperation(pub u16);

impl ArpOperation {
    /// Request (1).
    pub const REQUEST: ArpOperation = ArpOperation(1);
    /// Reply (2).
    pub const REPLY: ArpOperation = ArpOperation(2);
}

/// ARP hardware type for Ethernet.
pub const HTYPE_ETHERNET: u16 = 1;

mod field {
    use super::Field;
    pub const HTYPE: Field = 0..2;
    pub const PTYPE: Field = 2..4;
    pub const HLEN: usize = 4;
    pub const PLEN: usize = 5;
    pub const OPER: Field = 6..8;
    pub const ADDRS: usize = 8;
}

/// Length of the fixed part (before the addresses).
pub const FIXED_LEN: usize = field::ADDRS;
/// Length of an Ethernet/IPv4 ARP packet.
pub const ETHERNET_IPV4_LEN: usize = FIXED_LEN + 2 * (6 + 4);

/// A view of an ARP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ArpPacket<T> {
    /// Wrap without checking.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        ArpPacket { buffer }
    }

    /// Wrap, checking the fixed part and the announced address lengths.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// `Err(ArpTruncated)` unless the fixed part and all four addresses are present.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < FIXED_LEN || b.len() < self.packet_len() {
            Err(Error::ArpTruncated)
        } else {
            Ok(())
        }
    }

    /// The wrapped buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Hardware type (1 = Ethernet).
    #[inline]
    pub fn hardware_type(&self) -> u16 {
        be16(self.buffer.as_ref(), field::HTYPE.start)
    }
    /// Protocol type (an ethertype; 0x0800 for IPv4).
    #[inline]
    pub fn protocol_type(&self) -> EtherType {
        EtherType(be16(self.buffer.as_ref(), field::PTYPE.start))
    }
    /// Hardware address length.
    #[inline]
    pub fn hardware_len(&self) -> u8 {
        self.buffer.as_ref()[field::HLEN]
    }
    /// Protocol address length.
    #[inline]
    pub fn protocol_len(&self) -> u8 {
        self.buffer.as_ref()[field::PLEN]
    }
    /// Operation.
    #[inline]
    pub fn operation(&self) -> ArpOperation {
        ArpOperation(be16(self.buffer.as_ref(), field::OPER.start))
    }

    /// Bytes the packet occupies according to its address lengths.
    #[inline]
    pub fn packet_len(&self) -> usize {
        FIXED_LEN + 2 * (self.hardware_len() as usize + self.protocol_len() as usize)
    }

    fn sha(&self) -> Field {
        let h = self.hardware_len() as usize;
        field::ADDRS..field::ADDRS + h
    }
    fn spa(&self) -> Field {
        let s = self.sha().end;
        s..s + self.protocol_len() as usize
    }
    fn tha(&self) -> Field {
        let s = self.spa().end;
        s..s + self.hardware_len() as usize
    }
    fn tpa(&self) -> Field {
        let s = self.tha().end;
        s..s + self.protocol_len() as usize
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> ArpPacket<&'a T> {
    /// Sender hardware address.
    #[inline]
    pub fn sender_hardware_addr(&self) -> &'a [u8] {
        &self.buffer.as_ref()[self.sha()]
    }
    /// Sender protocol address.
    #[inline]
    pub fn sender_protocol_addr(&self) -> &'a [u8] {
        &self.buffer.as_ref()[self.spa()]
    }
    /// Target hardware address.
    #[inline]
    pub fn target_hardware_addr(&self) -> &'a [u8] {
        &self.buffer.as_ref()[self.tha()]
    }
    /// Target protocol address.
    #[inline]
    pub fn target_protocol_addr(&self) -> &'a [u8] {
        &self.buffer.as_ref()[self.tpa()]
    }
}

/// An Ethernet/IPv4 ARP message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ArpRepr {
    /// Request or reply (other codes round-trip too).
    pub operation: ArpOperation,
    /// Sender MAC.
    pub sender_mac: MacAddr,
    /// Sender IPv4 address.
    pub sender_ip: Ipv4Addr,
    /// Target MAC (zero in a request).
    pub target_mac: MacAddr,
    /// Target IPv4 address.
    pub target_ip: Ipv4Addr,
}

impl ArpRepr {
    /// Parse an Ethernet/IPv4 ARP packet; `Err(ArpUnsupported)` for other address types.
    pub fn parse<T: AsRef<[u8]>>(p: &ArpPacket<T>) -> Result<ArpRepr> {
        p.check_len()?;
        if p.hardware_type() != HTYPE_ETHERNET
            || p.protocol_type() != EtherType::IPV4
            || p.hardware_len() != 6
            || p.protocol_len() != 4
        {
            return Err(Error::ArpUnsupported);
        }
        let b = p.buffer.as_ref();
        Ok(ArpRepr {
            operation: p.operation(),
            sender_mac: MacAddr(arr6(b, 8)),
            sender_ip: Ipv4Addr::from(arr4(b, 14)),
            target_mac: MacAddr(arr6(b, 18)),
            target_ip: Ipv4Addr::from(arr4(b, 24)),
        })
    }

    /// 28.
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        ETHERNET_IPV4_LEN
    }

    /// Write the 28-byte packet at the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        if buf.len() < ETHERNET_IPV4_LEN {
            return Err(Error::BufferTooSmall);
        }
        put16(buf, field::HTYPE.start, HTYPE_ETHERNET);
        put16(buf, field::PTYPE.start, EtherType::IPV4.0);
        buf[field::HLEN] = 6;
        buf[field::PLEN] = 4;
        put16(buf, field::OPER.start, self.operation.0);
        buf[8..14].copy_from_slice(&self.sender_mac.0);
        buf[14..18].copy_from_slice(&self.sender_ip.octets());
        buf[18..24].copy_from_slice(&self.target_mac.0);
        buf[24..28].copy_from_slice(&self.target_ip.octets());
        Ok(())
    }

    /// The reply a host owning `target_ip` with MAC `mac` sends to this request.
    #[inline]
    pub fn reply(&self, mac: MacAddr) -> ArpRepr {
        ArpRepr {
            operation: ArpOperation::REPLY,
            sender_mac: mac,
            sender_ip: self.target_ip,
            target_mac: self.sender_mac,
            target_ip: self.sender_ip,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Who has 10.0.0.2? Tell 10.0.0.1 (from 02:00:00:00:00:01), plus 2 bytes of padding.
    const REQ: [u8; 30] = [
        0x00, 0x01, 0x08, 0x00, 6, 4, 0x00, 0x01, 2, 0, 0, 0, 0, 1, 10, 0, 0, 1, 0, 0, 0, 0, 0, 0,
        10, 0, 0, 2, 0xAA, 0xBB,
    ];

    #[test]
    fn parse_emit_fixture() {
        let p = ArpPacket::new_checked(&REQ[..]).unwrap();
        assert_eq!(p.packet_len(), 28);
        assert_eq!(p.sender_protocol_addr(), &[10, 0, 0, 1]);
        let r = ArpRepr::parse(&p).unwrap();
        assert_eq!(r.operation, ArpOperation::REQUEST);
        assert_eq!(r.sender_mac, MacAddr([2, 0, 0, 0, 0, 1]));
        assert_eq!(r.target_ip, Ipv4Addr::new(10, 0, 0, 2));
        let mut out = [0u8; 28];
        r.emit(&mut out).unwrap();
        assert_eq!(out[..], REQ[..28]);
        let rep = r.reply(MacAddr([2, 0, 0, 0, 0, 2]));
        assert_eq!(rep.target_mac, r.sender_mac);
        assert_eq!(rep.sender_ip, r.target_ip);
    }

    #[test]
    fn errors() {
        assert_eq!(
            ArpPacket::new_checked(&REQ[..27]).unwrap_err(),
            Error::ArpTruncated
        );
        assert_eq!(
            ArpPacket::new_checked(&REQ[..7]).unwrap_err(),
            Error::ArpTruncated
        );
        let mut odd = REQ;
        odd[4] = 8; // hlen 8 -> 8 + 2*12 = 32 > 30
        assert_eq!(
            ArpPacket::new_checked(&odd[..]).unwrap_err(),
            Error::ArpTruncated
        );
        odd[4] = 7; // 30 bytes: fits, but not Ethernet
        let p = ArpPacket::new_checked(&odd[..]).unwrap();
        assert_eq!(p.target_protocol_addr().len(), 4);
        assert_eq!(ArpRepr::parse(&p), Err(Error::ArpUnsupported));
    }
}
