//! The few packet formats the cluster needs, as zero-copy views (the shape of smoltcp's
//! `wire::udp`): an Ethernet header, and the interconnect encapsulation a node puts around a frame it
//! forwards to another node.
//!
//! ```text
//! interconnect frame = outer Ethernet (14) | shim (8) | inner frame (the external frame, unchanged)
//! outer Ethernet: dst = node_mac(to), src = node_mac(from), ethertype 0x88B5 (IEEE local experimental)
//! shim: [0] version << 4 | kind   [1] hops   [2] ingress node   [3] destination node
//!       [4..6] egress port (big endian, meaningful for kind ToEgress)   [6..8] zero
//! ```
//!
//! A broadcast or multicast external frame is flooded: kind [`Kind::Flood`], destination node
//! [`ALL_NODES`], outer destination [`FLOOD_MAC`] (a locally administered group address, so a
//! switch or Linux bridge on the interconnect delivers one transmission to every node), and the
//! egress-port field holds the port it entered on (information only).
//!
//! The receiving node checks the frame with [`Interconnect::new_checked`], handles it, and emits
//! [`Interconnect::inner`] — the external frame byte for byte — on its external port: the
//! interconnect header is stripped by taking a sub-slice, no copy.
//!
//! Contract: after `new_checked` succeeds no accessor panics; malformed input is a [`WireError`]
//! value, never a panic.

/// Ethernet header length.
pub const ETH_HDR: usize = 14;
/// Shim length.
pub const SHIM: usize = 8;
/// Bytes an interconnect hop adds to a frame.
pub const ENCAP: usize = ETH_HDR + SHIM;
/// Ethertype of interconnect frames (IEEE 802 "local experimental ethertype 1").
pub const ETHERTYPE_INTERCONNECT: u16 = 0x88B5;
/// Shim version.
pub const VERSION: u8 = 1;
/// Destination node of a frame for every node ([`Kind::Flood`]).
pub const ALL_NODES: u8 = 0xFF;
/// Outer destination MAC of frames for every node: locally administered, group bit set.
pub const FLOOD_MAC: [u8; 6] = [0x03, 0x66, 0x70, 0x6c, 0xff, 0xff];

/// Why bytes are not a valid frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Shorter than the headers it must carry.
    #[error("frame truncated")]
    Truncated,
    /// Not an interconnect frame (other ethertype).
    #[error("not an interconnect frame")]
    NotInterconnect,
    /// Unknown shim version.
    #[error("unknown interconnect version")]
    BadVersion,
    /// Unknown shim kind.
    #[error("unknown interconnect kind")]
    BadKind,
    /// The output buffer is too small for the encapsulated frame.
    #[error("frame too large for the buffer")]
    TooLarge,
}

mod field {
    use core::ops::Range;
    pub const DST: Range<usize> = 0..6;
    pub const SRC: Range<usize> = 6..12;
    pub const ETHERTYPE: Range<usize> = 12..14;
    // Shim fields, relative to the frame start.
    pub const VER_KIND: usize = 14;
    pub const HOPS: usize = 15;
    pub const INGRESS: usize = 16;
    pub const DST_NODE: usize = 17;
    pub const PORT: Range<usize> = 18..20;
    pub const RESERVED: Range<usize> = 20..22;
    pub const INNER: usize = 22;
}

/// A view of an Ethernet frame.
#[derive(Debug, Clone, Copy)]
pub struct EthFrame<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> EthFrame<T> {
    /// Wrap without checking; accessors may panic on a short buffer.
    pub const fn new_unchecked(buf: T) -> Self {
        EthFrame { buf }
    }

    /// Wrap after checking the length.
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        let f = Self::new_unchecked(buf);
        f.check_len()?;
        Ok(f)
    }

    /// Whether the buffer holds a whole header.
    pub fn check_len(&self) -> Result<(), WireError> {
        if self.buf.as_ref().len() < ETH_HDR {
            Err(WireError::Truncated)
        } else {
            Ok(())
        }
    }

    /// Destination MAC.
    #[inline]
    pub fn dst(&self) -> [u8; 6] {
        let mut m = [0; 6];
        m.copy_from_slice(&self.buf.as_ref()[field::DST]);
        m
    }

    /// Source MAC.
    #[inline]
    pub fn src(&self) -> [u8; 6] {
        let mut m = [0; 6];
        m.copy_from_slice(&self.buf.as_ref()[field::SRC]);
        m
    }

    /// Ethertype.
    #[inline]
    pub fn ethertype(&self) -> u16 {
        let b = &self.buf.as_ref()[field::ETHERTYPE];
        u16::from_be_bytes([b[0], b[1]])
    }

    /// The destination MAC as a 48-bit key (big-endian: `02:00:00:00:00:01` is `0x0200_0000_0001`).
    #[inline]
    pub fn dst_key(&self) -> u64 {
        mac_to_key(self.dst())
    }

    /// The bytes after the header.
    pub fn payload(&self) -> &[u8] {
        &self.buf.as_ref()[ETH_HDR..]
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buf
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthFrame<T> {
    /// Set the destination MAC.
    pub fn set_dst(&mut self, m: [u8; 6]) {
        self.buf.as_mut()[field::DST].copy_from_slice(&m);
    }

    /// Set the source MAC.
    pub fn set_src(&mut self, m: [u8; 6]) {
        self.buf.as_mut()[field::SRC].copy_from_slice(&m);
    }

    /// Set the ethertype.
    pub fn set_ethertype(&mut self, t: u16) {
        self.buf.as_mut()[field::ETHERTYPE].copy_from_slice(&t.to_be_bytes());
    }

    /// The bytes after the header, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buf.as_mut()[ETH_HDR..]
    }
}

/// What the receiving node must do with an interconnect frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// ScaleBricks: the sender's partition table says the receiver owns the key; look it up in the
    /// local FIB and emit.
    ToOwner = 1,
    /// Hash partitioning, first hop: the receiver holds the key's FIB entry; look it up, then emit or
    /// forward to the egress node.
    ToLookup = 2,
    /// The egress port is resolved (in the shim): emit without a lookup.
    ToEgress = 3,
    /// A broadcast or multicast frame: every node emits it on all its external ports and never
    /// forwards it again (destination node [`ALL_NODES`]).
    Flood = 4,
}

impl Kind {
    fn from_u8(x: u8) -> Result<Kind, WireError> {
        match x {
            1 => Ok(Kind::ToOwner),
            2 => Ok(Kind::ToLookup),
            3 => Ok(Kind::ToEgress),
            4 => Ok(Kind::Flood),
            _ => Err(WireError::BadKind),
        }
    }
}

/// A view of an interconnect frame.
#[derive(Debug, Clone, Copy)]
pub struct Interconnect<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> Interconnect<T> {
    /// Wrap without checking; accessors may panic or return garbage on bad input.
    pub const fn new_unchecked(buf: T) -> Self {
        Interconnect { buf }
    }

    /// Wrap after checking length, ethertype, version and kind.
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        let f = Self::new_unchecked(buf);
        f.check()?;
        Ok(f)
    }

    /// Check length, ethertype, version and kind.
    pub fn check(&self) -> Result<(), WireError> {
        let b = self.buf.as_ref();
        if b.len() < ENCAP + ETH_HDR {
            return Err(WireError::Truncated);
        }
        if u16::from_be_bytes([b[12], b[13]]) != ETHERTYPE_INTERCONNECT {
            return Err(WireError::NotInterconnect);
        }
        if b[field::VER_KIND] >> 4 != VERSION {
            return Err(WireError::BadVersion);
        }
        Kind::from_u8(b[field::VER_KIND] & 0xF)?;
        Ok(())
    }

    /// The action.
    #[inline]
    pub fn kind(&self) -> Kind {
        Kind::from_u8(self.buf.as_ref()[field::VER_KIND] & 0xF).unwrap_or(Kind::ToOwner)
    }

    /// Interconnect hops taken so far, this one included.
    #[inline]
    pub fn hops(&self) -> u8 {
        self.buf.as_ref()[field::HOPS]
    }

    /// The node where the frame entered the cluster.
    #[inline]
    pub fn ingress(&self) -> u8 {
        self.buf.as_ref()[field::INGRESS]
    }

    /// The node this hop is addressed to.
    #[inline]
    pub fn dst_node(&self) -> u8 {
        self.buf.as_ref()[field::DST_NODE]
    }

    /// The node that sent this hop (from the outer source MAC).
    #[inline]
    pub fn src_node(&self) -> u8 {
        self.buf.as_ref()[field::SRC.end - 1]
    }

    /// The resolved egress port (kind [`Kind::ToEgress`]).
    #[inline]
    pub fn egress_port(&self) -> u16 {
        let b = &self.buf.as_ref()[field::PORT];
        u16::from_be_bytes([b[0], b[1]])
    }

    /// The encapsulated external frame.
    #[inline]
    pub fn inner(&self) -> &[u8] {
        &self.buf.as_ref()[field::INNER..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Interconnect<T> {
    /// Re-address the frame for another hop: new kind, next node, hop count and egress port.
    pub fn readdress(&mut self, from: u8, to: u8, kind: Kind, hops: u8, port: u16) {
        let b = self.buf.as_mut();
        b[field::DST].copy_from_slice(&hop_mac(to));
        b[field::SRC].copy_from_slice(&node_mac(from));
        b[field::VER_KIND] = (VERSION << 4) | kind as u8;
        b[field::HOPS] = hops;
        b[field::DST_NODE] = to;
        b[field::PORT].copy_from_slice(&port.to_be_bytes());
    }
}

/// The fields of an interconnect header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Encap {
    pub from: u8,
    pub to: u8,
    pub kind: Kind,
    pub hops: u8,
    pub ingress: u8,
    pub port: u16,
}

impl Encap {
    /// Write the interconnect headers followed by `inner` into `out`; returns the frame length.
    pub fn emit(&self, inner: &[u8], out: &mut [u8]) -> Result<usize, WireError> {
        let len = ENCAP + inner.len();
        if out.len() < len {
            return Err(WireError::TooLarge);
        }
        out[field::DST].copy_from_slice(&hop_mac(self.to));
        out[field::SRC].copy_from_slice(&node_mac(self.from));
        out[field::ETHERTYPE].copy_from_slice(&ETHERTYPE_INTERCONNECT.to_be_bytes());
        out[field::VER_KIND] = (VERSION << 4) | self.kind as u8;
        out[field::HOPS] = self.hops;
        out[field::INGRESS] = self.ingress;
        out[field::DST_NODE] = self.to;
        out[field::PORT].copy_from_slice(&self.port.to_be_bytes());
        out[field::RESERVED].copy_from_slice(&[0, 0]);
        out[field::INNER..len].copy_from_slice(inner);
        Ok(len)
    }
}

/// The interconnect MAC address of a node (locally administered, unicast).
pub const fn node_mac(node: u8) -> [u8; 6] {
    [0x02, 0x66, 0x70, 0x6c, 0x00, node]
}

/// The outer destination MAC of a hop to `to`: [`node_mac`], or [`FLOOD_MAC`] for [`ALL_NODES`].
pub const fn hop_mac(to: u8) -> [u8; 6] {
    if to == ALL_NODES {
        FLOOD_MAC
    } else {
        node_mac(to)
    }
}

/// Whether a MAC address is a group (broadcast or multicast) address: the frame is flooded.
#[inline]
pub const fn is_group(mac: [u8; 6]) -> bool {
    mac[0] & 1 != 0
}

/// A MAC address as a 48-bit key.
#[inline]
pub fn mac_to_key(m: [u8; 6]) -> u64 {
    u64::from_be_bytes([0, 0, m[0], m[1], m[2], m[3], m[4], m[5]])
}

/// A 48-bit key as a MAC address.
#[inline]
pub fn key_to_mac(k: u64) -> [u8; 6] {
    let b = k.to_be_bytes();
    [b[2], b[3], b[4], b[5], b[6], b[7]]
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn encap_roundtrip_and_strip() {
        let mut inner = [0u8; 60];
        {
            let mut f = EthFrame::new_checked(&mut inner[..]).unwrap();
            f.set_dst(key_to_mac(0x0200_0000_0042));
            f.set_src([2, 0, 0, 0, 0, 9]);
            f.set_ethertype(0x0800);
        }
        let mut out = [0u8; 128];
        let e = Encap {
            from: 1,
            to: 3,
            kind: Kind::ToOwner,
            hops: 1,
            ingress: 1,
            port: 0,
        };
        let n = e.emit(&inner, &mut out).unwrap();
        assert_eq!(n, 82);
        let ic = Interconnect::new_checked(&out[..n]).unwrap();
        assert_eq!(
            (
                ic.kind(),
                ic.hops(),
                ic.ingress(),
                ic.dst_node(),
                ic.src_node()
            ),
            (Kind::ToOwner, 1, 1, 3, 1)
        );
        assert_eq!(ic.inner(), &inner[..]);
        let f = EthFrame::new_checked(ic.inner()).unwrap();
        assert_eq!(f.dst_key(), 0x0200_0000_0042);
        // Independent decoder: etherparse sees the outer Ethernet header with our ethertype.
        let (eth, rest) = etherparse::Ethernet2Header::from_slice(&out[..n]).unwrap();
        assert_eq!(eth.ether_type.0, ETHERTYPE_INTERCONNECT);
        assert_eq!(eth.destination, node_mac(3));
        assert_eq!(&rest[SHIM..], &inner[..]);
        let (ieth, _) = etherparse::Ethernet2Header::from_slice(&rest[SHIM..]).unwrap();
        assert_eq!(ieth.destination, key_to_mac(0x0200_0000_0042));
    }

    #[test]
    fn readdress_for_a_second_hop() {
        let inner = [7u8; 20];
        let mut out = [0u8; 64];
        let n = Encap {
            from: 0,
            to: 1,
            kind: Kind::ToLookup,
            hops: 1,
            ingress: 0,
            port: 0,
        }
        .emit(&inner, &mut out)
        .unwrap();
        let mut ic = Interconnect::new_checked(&mut out[..n]).unwrap();
        ic.readdress(1, 2, Kind::ToEgress, 2, 513);
        let ic = Interconnect::new_checked(&out[..n]).unwrap();
        assert_eq!(
            (
                ic.kind(),
                ic.hops(),
                ic.ingress(),
                ic.dst_node(),
                ic.src_node(),
                ic.egress_port()
            ),
            (Kind::ToEgress, 2, 0, 2, 1, 513)
        );
        assert_eq!(ic.inner(), &inner[..]);
    }

    #[test]
    fn flood_frames_go_to_the_group_address() {
        let mut inner = [0u8; 42];
        inner[..6].copy_from_slice(&[0xff; 6]);
        let mut out = [0u8; 64];
        let n = Encap {
            from: 2,
            to: ALL_NODES,
            kind: Kind::Flood,
            hops: 1,
            ingress: 2,
            port: 1,
        }
        .emit(&inner, &mut out)
        .unwrap();
        let ic = Interconnect::new_checked(&out[..n]).unwrap();
        assert_eq!(
            (ic.kind(), ic.dst_node(), ic.src_node(), ic.egress_port()),
            (Kind::Flood, ALL_NODES, 2, 1)
        );
        assert_eq!(&out[..6], &FLOOD_MAC);
        assert!(is_group(FLOOD_MAC) && is_group([0xff; 6]) && !is_group(node_mac(3)));
        assert_eq!(ic.inner(), &inner[..]);
    }

    #[test]
    fn malformed_is_an_error() {
        assert_eq!(
            EthFrame::new_checked(&[0u8; 13][..]).err(),
            Some(WireError::Truncated)
        );
        let mut out = [0u8; 64];
        let n = Encap {
            from: 0,
            to: 1,
            kind: Kind::ToOwner,
            hops: 1,
            ingress: 0,
            port: 0,
        }
        .emit(&[1u8; 14], &mut out)
        .unwrap();
        assert!(Interconnect::new_checked(&out[..n]).is_ok());
        assert_eq!(
            Interconnect::new_checked(&out[..n - 1]).err(),
            Some(WireError::Truncated)
        );
        let mut bad = out;
        bad[12] = 0x08;
        assert_eq!(
            Interconnect::new_checked(&bad[..n]).err(),
            Some(WireError::NotInterconnect)
        );
        let mut bad = out;
        bad[14] = 0x21;
        assert_eq!(
            Interconnect::new_checked(&bad[..n]).err(),
            Some(WireError::BadVersion)
        );
        let mut bad = out;
        bad[14] = 0x17;
        assert_eq!(
            Interconnect::new_checked(&bad[..n]).err(),
            Some(WireError::BadKind)
        );
        assert_eq!(
            Encap {
                from: 0,
                to: 1,
                kind: Kind::ToOwner,
                hops: 1,
                ingress: 0,
                port: 0
            }
            .emit(&[0u8; 50], &mut [0u8; 60]),
            Err(WireError::TooLarge)
        );
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..100)) {
            if let Ok(ic) = Interconnect::new_checked(&bytes[..]) {
                let _ = (ic.kind(), ic.hops(), ic.ingress(), ic.dst_node(), ic.src_node(), ic.egress_port());
                prop_assert!(ic.inner().len() >= ETH_HDR);
                prop_assert!(EthFrame::new_checked(ic.inner()).is_ok());
            }
            if let Ok(f) = EthFrame::new_checked(&bytes[..]) {
                let _ = (f.dst_key(), f.src(), f.ethertype(), f.payload().len());
            }
        }

        #[test]
        fn mac_key_roundtrip(k in 0u64..(1 << 48)) {
            prop_assert_eq!(mac_to_key(key_to_mac(k)), k);
        }
    }
}
