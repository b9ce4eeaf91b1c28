//! The interconnect encapsulation a node puts around a frame it forwards to another node, as a
//! zero-copy view (the shape of smoltcp's `wire::udp`); Ethernet itself is `fp-wire`'s.
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
//! The sending node writes the header in front of the frame, in the packet buffer's headroom
//! ([`Encap::prepend`]); the receiving node checks the frame with [`Interconnect::new_checked`],
//! handles it, and emits [`Interconnect::inner`] — the external frame byte for byte — on its
//! external port, the header stripped by moving the frame's start: no copy either way.
//!
//! Contract: after `new_checked` succeeds no accessor panics; malformed input is a [`WireError`]
//! value, never a panic.

/// Ethernet header length.
pub const ETH_HDR: usize = 14;
/// Shim length.
pub const SHIM: usize = 8;
use fp_pipeline::packet::Packet;
use fp_wire::ethernet::MacAddr;

/// Bytes an interconnect hop adds to a frame.
pub const ENCAP: usize = ETH_HDR + SHIM;
/// Ethertype of interconnect frames (IEEE 802 "local experimental ethertype 1").
pub const ETHERTYPE_INTERCONNECT: u16 = 0x88B5;
/// Shim version.
pub const VERSION: u8 = 1;
/// Destination node of a frame for every node ([`Kind::Flood`]).
pub const ALL_NODES: u8 = 0xFF;
/// Outer destination MAC of frames for every node: locally administered, group bit set.
pub const FLOOD_MAC: MacAddr = MacAddr([0x03, 0x66, 0x70, 0x6c, 0xff, 0xff]);

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
        b[field::DST].copy_from_slice(&hop_mac(to).0);
        b[field::SRC].copy_from_slice(&node_mac(from).0);
        b[field::VER_KIND] = (VERSION << 4) | kind as u8;
        b[field::HOPS] = hops;
        b[field::DST_NODE] = to;
        b[field::PORT].copy_from_slice(&port.to_be_bytes());
    }
}

/// The fields of an interconnect header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Encap {
    /// Sending node.
    pub from: u8,
    /// Receiving node, or [`ALL_NODES`].
    pub to: u8,
    /// What the receiver must do.
    pub kind: Kind,
    /// Hops taken, this one included.
    pub hops: u8,
    /// The node where the frame entered the cluster.
    pub ingress: u8,
    /// The egress port ([`Kind::ToEgress`]) or the ingress port ([`Kind::Flood`]).
    pub port: u16,
}

impl Encap {
    /// Write the interconnect header into the first [`ENCAP`] bytes of `out`.
    #[inline]
    pub fn write_header(&self, out: &mut [u8]) -> Result<(), WireError> {
        let Some(out) = out.get_mut(..ENCAP) else {
            return Err(WireError::TooLarge);
        };
        out[field::DST].copy_from_slice(&hop_mac(self.to).0);
        out[field::SRC].copy_from_slice(&node_mac(self.from).0);
        out[field::ETHERTYPE].copy_from_slice(&ETHERTYPE_INTERCONNECT.to_be_bytes());
        out[field::VER_KIND] = (VERSION << 4) | self.kind as u8;
        out[field::HOPS] = self.hops;
        out[field::INGRESS] = self.ingress;
        out[field::DST_NODE] = self.to;
        out[field::PORT].copy_from_slice(&self.port.to_be_bytes());
        out[field::RESERVED].copy_from_slice(&[0, 0]);
        Ok(())
    }

    /// Write the interconnect header followed by `inner` into `out`; returns the frame length.
    pub fn emit(&self, inner: &[u8], out: &mut [u8]) -> Result<usize, WireError> {
        let len = ENCAP + inner.len();
        if out.len() < len {
            return Err(WireError::TooLarge);
        }
        self.write_header(out)?;
        out[field::INNER..len].copy_from_slice(inner);
        Ok(len)
    }

    /// Put the header in front of the packet's frame, in its headroom (no copy of the frame).
    #[inline]
    pub fn prepend(&self, p: &mut Packet) -> Result<(), WireError> {
        let (start, len) = (p.start(), p.len());
        if start < ENCAP {
            return Err(WireError::TooLarge);
        }
        self.write_header(&mut p.buffer()[start - ENCAP..start])?;
        p.set_frame(start - ENCAP, len + ENCAP);
        Ok(())
    }
}

/// Remove the interconnect header of a packet holding an interconnect frame (checked with
/// [`Interconnect::new_checked`]): the frame becomes the inner frame.
#[inline]
pub fn strip(p: &mut Packet) {
    let (start, len) = (p.start(), p.len());
    p.set_frame(start + ENCAP, len.saturating_sub(ENCAP));
}

/// The interconnect MAC address of a node (locally administered, unicast).
pub const fn node_mac(node: u8) -> MacAddr {
    MacAddr([0x02, 0x66, 0x70, 0x6c, 0x00, node])
}

/// The outer destination MAC of a hop to `to`: [`node_mac`], or [`FLOOD_MAC`] for [`ALL_NODES`].
pub const fn hop_mac(to: u8) -> MacAddr {
    if to == ALL_NODES {
        FLOOD_MAC
    } else {
        node_mac(to)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fp_wire::ethernet::EthernetFrame;
    use proptest::prelude::*;

    #[test]
    fn encap_roundtrip_and_strip() {
        let mut inner = [0u8; 60];
        inner[..6].copy_from_slice(&MacAddr::from_u64(0x0200_0000_0042).0);
        inner[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 9]);
        inner[12..14].copy_from_slice(&[0x08, 0x00]);
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
        let f = EthernetFrame::new_checked(ic.inner()).unwrap();
        assert_eq!(f.dst_addr().to_u64(), 0x0200_0000_0042);
        // Independent decoder: etherparse sees the outer Ethernet header with our ethertype.
        let (eth, rest) = etherparse::Ethernet2Header::from_slice(&out[..n]).unwrap();
        assert_eq!(eth.ether_type.0, ETHERTYPE_INTERCONNECT);
        assert_eq!(eth.destination, node_mac(3).0);
        assert_eq!(&rest[SHIM..], &inner[..]);
        let (ieth, _) = etherparse::Ethernet2Header::from_slice(&rest[SHIM..]).unwrap();
        assert_eq!(ieth.destination, MacAddr::from_u64(0x0200_0000_0042).0);
        // In place, in a packet's headroom: the same bytes.
        let mut pool = fp_pipeline::packet::Pool::new(1);
        let mut p = pool.get().unwrap();
        p.fill(&inner);
        e.prepend(&mut p).unwrap();
        assert_eq!(p.data(), &out[..n]);
        strip(&mut p);
        assert_eq!(p.data(), &inner[..]);
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
        assert_eq!(&out[..6], &FLOOD_MAC.0);
        assert!(FLOOD_MAC.is_multicast() && !node_mac(3).is_multicast());
        assert_eq!(ic.inner(), &inner[..]);
    }

    #[test]
    fn malformed_is_an_error() {
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
                prop_assert!(EthernetFrame::new_checked(ic.inner()).is_ok());
            }
        }
    }
}
