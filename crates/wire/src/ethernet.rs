//! Ethernet II frames (IEEE 802.3 with an ethertype, no FCS): [`EthernetFrame`], [`EthernetRepr`].
//!
//! Contract (as for every view in this crate): [`EthernetFrame::new_checked`] validates the length
//! once; afterwards no accessor panics. The view covers the whole frame; [`EthernetFrame::payload`]
//! is everything after the 14-byte header (VLAN tags, if any, are part of the payload: see
//! [`crate::vlan`]). Frames as read from a socket carry no FCS and may carry trailing padding up to
//! 60 bytes, which the IP layer trims with its own length field.

use core::fmt;

use crate::bytes::{arr6, be16, put16, Field, Rest};
use crate::error::{Error, Result};

/// A 48-bit IEEE MAC address.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    /// ff:ff:ff:ff:ff:ff.
    pub const BROADCAST: MacAddr = MacAddr([0xFF; 6]);
    /// 00:00:00:00:00:00.
    pub const ZERO: MacAddr = MacAddr([0; 6]);

    /// The address's bytes.
    #[inline]
    pub const fn octets(self) -> [u8; 6] {
        self.0
    }

    /// Group bit set (multicast, broadcast included).
    #[inline]
    pub const fn is_multicast(self) -> bool {
        self.0[0] & 1 == 1
    }

    /// All ones.
    #[inline]
    pub const fn is_broadcast(self) -> bool {
        u64::from_be_bytes([
            0, 0, self.0[0], self.0[1], self.0[2], self.0[3], self.0[4], self.0[5],
        ]) == 0xFFFF_FFFF_FFFF
    }

    /// Neither multicast nor broadcast.
    #[inline]
    pub const fn is_unicast(self) -> bool {
        !self.is_multicast()
    }

    /// Locally administered bit set.
    #[inline]
    pub const fn is_local(self) -> bool {
        self.0[0] & 2 == 2
    }

    /// The address as the low 48 bits of a `u64` (big-endian order), the key format of the switch's
    /// compact MAC table.
    #[inline]
    pub const fn to_u64(self) -> u64 {
        u64::from_be_bytes([
            0, 0, self.0[0], self.0[1], self.0[2], self.0[3], self.0[4], self.0[5],
        ])
    }

    /// Inverse of [`MacAddr::to_u64`] (the high 16 bits are ignored).
    #[inline]
    pub const fn from_u64(v: u64) -> MacAddr {
        let b = v.to_be_bytes();
        MacAddr([b[2], b[3], b[4], b[5], b[6], b[7]])
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

/// The text was not a MAC address: six groups of one or two hex digits separated by `:`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParseMacError;

impl fmt::Display for ParseMacError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("not a MAC address (aa:bb:cc:dd:ee:ff)")
    }
}

impl core::error::Error for ParseMacError {}

impl core::str::FromStr for MacAddr {
    type Err = ParseMacError;

    /// Parse `aa:bb:cc:dd:ee:ff` (one or two hex digits per byte, either case).
    fn from_str(s: &str) -> core::result::Result<MacAddr, ParseMacError> {
        let mut m = [0u8; 6];
        let mut parts = s.split(':');
        for b in &mut m {
            let p = parts.next().ok_or(ParseMacError)?;
            if p.is_empty() || p.len() > 2 {
                return Err(ParseMacError);
            }
            *b = u8::from_str_radix(p, 16).map_err(|_| ParseMacError)?;
        }
        match parts.next() {
            Some(_) => Err(ParseMacError),
            None => Ok(MacAddr(m)),
        }
    }
}

impl fmt::Debug for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl From<[u8; 6]> for MacAddr {
    #[inline]
    fn from(b: [u8; 6]) -> Self {
        MacAddr(b)
    }
}

/// An ethertype. A newtype so any value round-trips.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct EtherType(pub u16);

impl EtherType {
    /// IPv4 (0x0800).
    pub const IPV4: EtherType = EtherType(0x0800);
    /// ARP (0x0806).
    pub const ARP: EtherType = EtherType(0x0806);
    /// Transparent Ethernet bridging (0x6558): an Ethernet frame inside GRE.
    pub const TEB: EtherType = EtherType(0x6558);
    /// 802.1Q customer VLAN tag (0x8100).
    pub const VLAN: EtherType = EtherType(0x8100);
    /// IPv6 (0x86DD).
    pub const IPV6: EtherType = EtherType(0x86DD);
    /// 802.1ad service VLAN tag, the outer tag of QinQ (0x88A8).
    pub const QINQ: EtherType = EtherType(0x88A8);
    /// Pre-standard QinQ outer tag still used by some switches (0x9100).
    pub const QINQ_LEGACY: EtherType = EtherType(0x9100);

    /// Whether this value announces a VLAN tag (0x8100, 0x88A8 or 0x9100).
    #[inline]
    pub const fn is_vlan(self) -> bool {
        matches!(self.0, 0x8100 | 0x88A8 | 0x9100)
    }
}

impl fmt::Debug for EtherType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = match self.0 {
            0x0800 => "ipv4",
            0x0806 => "arp",
            0x6558 => "teb",
            0x8100 => "vlan",
            0x86DD => "ipv6",
            0x88A8 => "qinq",
            0x9100 => "qinq-legacy",
            _ => return write!(f, "EtherType({:#06x})", self.0),
        };
        write!(f, "{n}({:#06x})", self.0)
    }
}

impl From<u16> for EtherType {
    #[inline]
    fn from(v: u16) -> Self {
        EtherType(v)
    }
}

mod field {
    use super::{Field, Rest};
    pub const DESTINATION: Field = 0..6;
    pub const SOURCE: Field = 6..12;
    pub const ETHERTYPE: Field = 12..14;
    pub const PAYLOAD: Rest = 14..;
}

/// Length of the Ethernet II header.
pub const HEADER_LEN: usize = field::PAYLOAD.start;

/// A read/write view of an Ethernet II frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Wrap a buffer without checking its length (accessors may then panic).
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        EthernetFrame { buffer }
    }

    /// Wrap a buffer, checking that it holds the 14-byte header.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let f = Self::new_unchecked(buffer);
        f.check_len()?;
        Ok(f)
    }

    /// `Err(EthernetTruncated)` if the buffer is shorter than the header.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Error::EthernetTruncated)
        } else {
            Ok(())
        }
    }

    /// The wrapped buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Header length plus `payload_len`.
    #[inline]
    pub const fn buffer_len(payload_len: usize) -> usize {
        HEADER_LEN + payload_len
    }

    /// Destination MAC address.
    #[inline]
    pub fn dst_addr(&self) -> MacAddr {
        MacAddr(arr6(self.buffer.as_ref(), field::DESTINATION.start))
    }

    /// Source MAC address.
    #[inline]
    pub fn src_addr(&self) -> MacAddr {
        MacAddr(arr6(self.buffer.as_ref(), field::SOURCE.start))
    }

    /// The ethertype field (a VLAN TPID when the frame is tagged).
    #[inline]
    pub fn ethertype(&self) -> EtherType {
        EtherType(be16(self.buffer.as_ref(), field::ETHERTYPE.start))
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> EthernetFrame<&'a T> {
    /// Everything after the 14-byte header.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[field::PAYLOAD]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    /// Set the destination MAC address.
    #[inline]
    pub fn set_dst_addr(&mut self, a: MacAddr) {
        self.buffer.as_mut()[field::DESTINATION].copy_from_slice(&a.0);
    }

    /// Set the source MAC address.
    #[inline]
    pub fn set_src_addr(&mut self, a: MacAddr) {
        self.buffer.as_mut()[field::SOURCE].copy_from_slice(&a.0);
    }

    /// Set the ethertype field.
    #[inline]
    pub fn set_ethertype(&mut self, t: EtherType) {
        put16(self.buffer.as_mut(), field::ETHERTYPE.start, t.0);
    }

    /// Mutable payload.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PAYLOAD]
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for EthernetFrame<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// The fields of an Ethernet II header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EthernetRepr {
    /// Source MAC.
    pub src_addr: MacAddr,
    /// Destination MAC.
    pub dst_addr: MacAddr,
    /// Ethertype (a VLAN TPID for tagged frames).
    pub ethertype: EtherType,
}

impl EthernetRepr {
    /// Read the header of a checked frame.
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(frame: &EthernetFrame<T>) -> Result<EthernetRepr> {
        frame.check_len()?;
        Ok(EthernetRepr {
            src_addr: frame.src_addr(),
            dst_addr: frame.dst_addr(),
            ethertype: frame.ethertype(),
        })
    }

    /// Length of the header this repr emits.
    #[inline]
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Write the header into the first 14 bytes of `buf`.
    #[inline]
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        if buf.len() < HEADER_LEN {
            return Err(Error::BufferTooSmall);
        }
        let mut f = EthernetFrame::new_unchecked(buf);
        f.set_dst_addr(self.dst_addr);
        f.set_src_addr(self.src_addr);
        f.set_ethertype(self.ethertype);
        Ok(())
    }
}

/// Rewrite the MAC addresses of a frame in place: the L2 direct-server-return rewrite (the payload,
/// VLAN tags included, is untouched, so no checksum changes).
#[inline]
pub fn rewrite_macs(frame: &mut [u8], dst: MacAddr, src: MacAddr) -> Result<()> {
    let mut f = EthernetFrame::new_checked(frame)?;
    f.set_dst_addr(dst);
    f.set_src_addr(src);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const FRAME: [u8; 18] = [
        0x00, 0x11, 0x22, 0x33, 0x44, 0x55, // dst
        0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, // src
        0x08, 0x00, // IPv4
        0xde, 0xad, 0xbe, 0xef,
    ];

    #[test]
    fn mac_text_parses_and_round_trips() {
        let m: MacAddr = "02:66:70:0:0:1".parse().unwrap();
        assert_eq!(m, MacAddr([2, 0x66, 0x70, 0, 0, 1]));
        assert_eq!(
            std::string::ToString::to_string(&m).parse::<MacAddr>(),
            Ok(m)
        );
        for bad in [
            "",
            "02:66:70:00:00",
            "02:66:70:00:00:01:02",
            "02:66:70:00:00:1g",
            "002:66:70:00:00:01",
            "02::70:00:00:01",
        ] {
            assert_eq!(bad.parse::<MacAddr>(), Err(ParseMacError), "{bad:?}");
        }
    }

    #[test]
    fn parse_fixture() {
        let f = EthernetFrame::new_checked(&FRAME[..]).unwrap();
        assert_eq!(f.dst_addr(), MacAddr([0x00, 0x11, 0x22, 0x33, 0x44, 0x55]));
        assert_eq!(std::format!("{}", f.src_addr()), "02:aa:bb:cc:dd:ee");
        assert!(f.src_addr().is_local() && f.src_addr().is_unicast());
        assert_eq!(f.ethertype(), EtherType::IPV4);
        assert_eq!(f.payload(), &[0xde, 0xad, 0xbe, 0xef]);
        let r = EthernetRepr::parse(&f).unwrap();
        let mut out = [0u8; 18];
        r.emit(&mut out).unwrap();
        out[14..].copy_from_slice(f.payload());
        assert_eq!(out, FRAME);
    }

    #[test]
    fn truncated() {
        assert_eq!(
            EthernetFrame::new_checked(&FRAME[..13]).unwrap_err(),
            Error::EthernetTruncated
        );
        assert!(EthernetFrame::new_checked(&FRAME[..14])
            .unwrap()
            .payload()
            .is_empty());
        let r = EthernetRepr {
            src_addr: MacAddr::ZERO,
            dst_addr: MacAddr::BROADCAST,
            ethertype: EtherType::ARP,
        };
        assert_eq!(r.emit(&mut [0u8; 13]), Err(Error::BufferTooSmall));
    }

    #[test]
    fn mac_helpers() {
        assert!(MacAddr::BROADCAST.is_broadcast() && MacAddr::BROADCAST.is_multicast());
        let m = MacAddr([1, 0, 0x5e, 0, 0, 1]);
        assert!(m.is_multicast() && !m.is_broadcast());
        assert_eq!(MacAddr::from_u64(m.to_u64()), m);
        assert_eq!(m.to_u64(), 0x0100_5e00_0001);
    }

    #[test]
    fn dsr_rewrite() {
        let mut f = FRAME;
        let d = MacAddr([2, 0, 0, 0, 0, 9]);
        let s = MacAddr([2, 0, 0, 0, 0, 1]);
        rewrite_macs(&mut f, d, s).unwrap();
        assert_eq!(&f[0..6], &d.0);
        assert_eq!(&f[6..12], &s.0);
        assert_eq!(&f[12..], &FRAME[12..]);
        assert_eq!(
            rewrite_macs(&mut [0u8; 4], d, s),
            Err(Error::EthernetTruncated)
        );
    }
}
