//! Encapsulation the balancer emits with, and decapsulation: GRE (Maglev §3.1), IPIP /
//! IPv6-in-IPv6 and VXLAN, over an outer Ethernet (optionally 802.1Q-tagged) + IPv4 or IPv6 header.
//! L2 direct server return needs no encapsulation: see [`crate::ethernet::rewrite_macs`].
//!
//! Zero-copy: the inner IP packet stays where it is; [`Encap::encapsulate`] writes the outer headers
//! into the headroom in front of it (the old Ethernet header and VLAN tags are overwritten) and
//! returns where the new frame starts. Ports must leave headroom: at least [`MAX_OVERHEAD`] bytes
//! minus the inner packet's original L3 offset (e.g. 88 − 14 = 74), or exactly
//! [`Encap::overhead`] for a known configuration.
//!
//! Outer header policy:
//!
//! * **IPv4 ID / DF.** DF is copied from an IPv4 inner packet (RFC 2003 §3.1) and set for an IPv6
//!   inner packet (IPv6 is never fragmented by routers, so neither should its tunnel be). So a
//!   datagram its sender allowed to fragment may be fragmented as a tunnel packet, and nothing else
//!   is. The ID is the caller's `ipv4_ident`, which must come from a per-worker counter (include
//!   the worker id in its high bits if workers share an outer source address), so that outer
//!   fragments of different packets never share an ID within the reassembly timeout (RFC 6864
//!   §4.2); for DF packets the value is irrelevant (atomic datagrams, RFC 6864 §4.1).
//! * **TOS / traffic class** (DSCP and ECN) are copied from the inner header (RFC 6040 normal mode
//!   for ECN; DSCP copied so QoS survives the tunnel).
//! * **TTL / hop limit** come from the configuration ([`OuterIp`]).
//! * **Entropy** from the caller's `flow_hash` (a hash of the inner flow): the IPv6 flow label (its
//!   low 20 bits, RFC 6438) and the VXLAN UDP source port (49152 + hash mod 16384, RFC 7348 §5).
//! * **Checksums.** The IPv4 header checksum is always filled. The outer UDP checksum of VXLAN is 0
//!   over IPv4 unless requested (RFC 7348 allows it) and always computed over IPv6 (RFC 8200 §8.1;
//!   Linux accepts zero-checksum UDP over IPv6 only with `udp6zerocsumrx`). The GRE checksum is
//!   optional ([`Tunnel::Gre`]). Inner checksums are not touched: complete `CHECKSUM_PARTIAL`
//!   packets first with [`crate::offload::fill_l4_checksum`].

use core::net::{Ipv4Addr, Ipv6Addr};
use core::ops::Range;

use crate::bytes::put16;
use crate::checksum;
use crate::error::{Error, Result};
use crate::ethernet::{self, EtherType, EthernetRepr, MacAddr};
use crate::gre::{GrePacket, GreRepr};
use crate::ip::{IpPair, IpProtocol, IpVersion};
use crate::ipv4;
use crate::ipv6::{self, Ipv6Repr};
use crate::summary::PacketSummary;
use crate::udp::{self, UdpPacket, UdpRepr};
use crate::vlan::{Tci, VlanRepr};
use crate::vxlan::{self, VxlanPacket, VxlanRepr};

/// Largest overhead any [`Encap`] adds: tagged Ethernet (18) + IPv6 (40) + UDP (8) + VXLAN (8) +
/// inner Ethernet (14).
pub const MAX_OVERHEAD: usize = 18 + 40 + 8 + 8 + 14;

/// The outer Ethernet header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OuterL2 {
    /// Source MAC (the balancer's interface).
    pub src: MacAddr,
    /// Destination MAC (the next hop's or the backend's).
    pub dst: MacAddr,
    /// An 802.1Q tag (TPID 0x8100) to add, if any.
    pub vlan: Option<Tci>,
}

impl OuterL2 {
    /// Bytes this header occupies.
    #[inline]
    pub const fn len(&self) -> usize {
        if self.vlan.is_some() {
            18
        } else {
            14
        }
    }

    /// Never empty (present for clippy's `len_without_is_empty`).
    #[inline]
    pub const fn is_empty(&self) -> bool {
        false
    }

    fn emit(&self, buf: &mut [u8], ethertype: EtherType) -> Result<usize> {
        match self.vlan {
            None => {
                EthernetRepr {
                    src_addr: self.src,
                    dst_addr: self.dst,
                    ethertype,
                }
                .emit(buf)?;
                Ok(14)
            }
            Some(tci) => {
                EthernetRepr {
                    src_addr: self.src,
                    dst_addr: self.dst,
                    ethertype: EtherType::VLAN,
                }
                .emit(buf)?;
                VlanRepr { tci, ethertype }.emit(&mut buf[14..])?;
                Ok(18)
            }
        }
    }
}

/// The outer IP header's configured fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OuterIp {
    /// IPv4 outer header.
    V4 {
        /// Source (the balancer's address).
        src: Ipv4Addr,
        /// Destination (the backend, or the next balancer).
        dst: Ipv4Addr,
        /// TTL.
        ttl: u8,
    },
    /// IPv6 outer header.
    V6 {
        /// Source (the balancer's address).
        src: Ipv6Addr,
        /// Destination (the backend, or the next balancer).
        dst: Ipv6Addr,
        /// Hop limit.
        hop_limit: u8,
    },
}

impl OuterIp {
    /// Header length (20 or 40).
    #[inline]
    pub const fn header_len(&self) -> usize {
        match self {
            OuterIp::V4 { .. } => ipv4::HEADER_LEN,
            OuterIp::V6 { .. } => ipv6::HEADER_LEN,
        }
    }

    /// The outer address pair.
    #[inline]
    pub const fn addrs(&self) -> IpPair {
        match *self {
            OuterIp::V4 { src, dst, .. } => IpPair::V4(src, dst),
            OuterIp::V6 { src, dst, .. } => IpPair::V6(src, dst),
        }
    }
}

/// The tunnel between the outer IP header and the inner packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Tunnel {
    /// GRE (IP protocol 47); the GRE protocol type is the inner packet's ethertype.
    Gre {
        /// RFC 2890 key, if any.
        key: Option<u32>,
        /// RFC 2890 sequence number, if any.
        sequence: Option<u32>,
        /// Whether to add a GRE checksum (covers the whole inner packet: costs a pass over it).
        checksum: bool,
        /// Recursion control: 0 normally, 1 for a fragment redirected to its owner balancer
        /// (Maglev §4.3; see [`crate::gre`]).
        recursion: u8,
    },
    /// IP-in-IP: IP protocol 4 for an IPv4 inner packet, 41 for IPv6. No tunnel header.
    Ipip,
    /// VXLAN over UDP; the inner packet gets an Ethernet header.
    Vxlan {
        /// VXLAN network identifier (24 bits).
        vni: u32,
        /// UDP destination port (normally [`vxlan::UDP_PORT`], 4789).
        dst_port: u16,
        /// Inner Ethernet source MAC.
        inner_src: MacAddr,
        /// Inner Ethernet destination MAC (the backend's VXLAN device, or Linux drops the frame as
        /// "other host").
        inner_dst: MacAddr,
        /// Fill the outer UDP checksum over IPv4 (it is always filled over IPv6).
        udp_checksum: bool,
    },
}

impl Tunnel {
    /// A plain GRE tunnel: no key, sequence or checksum, recursion 0.
    pub const GRE: Tunnel = Tunnel::Gre {
        key: None,
        sequence: None,
        checksum: false,
        recursion: 0,
    };

    /// Bytes between the outer IP header and the inner IP packet.
    #[inline]
    pub const fn len(&self) -> usize {
        match self {
            Tunnel::Gre {
                key,
                sequence,
                checksum,
                ..
            } => {
                4 + if *checksum { 4 } else { 0 }
                    + if key.is_some() { 4 } else { 0 }
                    + if sequence.is_some() { 4 } else { 0 }
            }
            Tunnel::Ipip => 0,
            Tunnel::Vxlan { .. } => udp::HEADER_LEN + vxlan::HEADER_LEN + ethernet::HEADER_LEN,
        }
    }

    /// Whether the tunnel adds no header (IPIP).
    #[inline]
    pub const fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A complete encapsulation recipe: outer Ethernet, outer IP, tunnel. Build one per backend (or per
/// redirect target) off the data path and reuse it for every packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Encap {
    /// Outer Ethernet header.
    pub l2: OuterL2,
    /// Outer IP header.
    pub ip: OuterIp,
    /// Tunnel header.
    pub tunnel: Tunnel,
}

/// The VXLAN UDP source port for a flow hash: 49152 + hash mod 16384 (RFC 7348 §5).
#[inline]
pub const fn vxlan_src_port(flow_hash: u64) -> u16 {
    0xC000 | (flow_hash as u16 & 0x3FFF)
}

/// The IPv6 flow label for a flow hash: its low 20 bits, never 0 (RFC 6437 reserves 0 for
/// "no label").
#[inline]
pub const fn flow_label(flow_hash: u64) -> u32 {
    let l = (flow_hash as u32) & 0xF_FFFF;
    if l == 0 {
        1
    } else {
        l
    }
}

impl Encap {
    /// Bytes added in front of the inner IP packet.
    #[inline]
    pub const fn overhead(&self) -> usize {
        self.l2.len() + self.ip.header_len() + self.tunnel.len()
    }

    /// Write the outer headers in front of the inner IP packet at `buf[inner]` and return the
    /// offset where the new frame starts: the frame is `buf[start..inner.end]`.
    ///
    /// `flow_hash` supplies entropy (IPv6 flow label, VXLAN source port) and `ipv4_ident` the outer
    /// IPv4 ID (see the module doc for the policy). Errors: `BufferTooSmall` (range outside `buf`),
    /// `UnknownEthertype` (the inner packet is not IPv4/IPv6), `Ipv4Truncated` / `Ipv6Truncated`
    /// (shorter than its fixed header), `NoHeadroom`, `PacketTooBig`. On error `buf` is unchanged.
    pub fn encapsulate(
        &self,
        buf: &mut [u8],
        inner: Range<usize>,
        flow_hash: u64,
        ipv4_ident: u16,
    ) -> Result<usize> {
        if inner.start > inner.end || inner.end > buf.len() {
            return Err(Error::BufferTooSmall);
        }
        let ib = &buf[inner.clone()];
        let (version, tos, inner_df) = match ib.first().map(|b| b >> 4) {
            Some(4) => {
                if ib.len() < ipv4::HEADER_LEN {
                    return Err(Error::Ipv4Truncated);
                }
                (IpVersion::V4, ib[1], ib[6] & 0x40 != 0)
            }
            Some(6) => {
                if ib.len() < ipv6::HEADER_LEN {
                    return Err(Error::Ipv6Truncated);
                }
                (
                    IpVersion::V6,
                    ((u16::from_be_bytes([ib[0], ib[1]]) >> 4) & 0xFF) as u8,
                    true,
                )
            }
            Some(_) => return Err(Error::UnknownEthertype),
            None => return Err(Error::Ipv4Truncated),
        };
        let inner_ethertype = match version {
            IpVersion::V4 => EtherType::IPV4,
            IpVersion::V6 => EtherType::IPV6,
        };
        let overhead = self.overhead();
        if inner.start < overhead {
            return Err(Error::NoHeadroom);
        }
        let inner_len = inner.len();
        let ip_payload = self.tunnel.len() + inner_len;
        let too_big = match self.ip {
            OuterIp::V4 { .. } => ipv4::HEADER_LEN + ip_payload > 0xFFFF,
            OuterIp::V6 { .. } => ip_payload > 0xFFFF,
        };
        if too_big {
            return Err(Error::PacketTooBig);
        }

        let start = inner.start - overhead;
        let frame = &mut buf[start..inner.end];
        let (outer_ethertype, protocol) = match (self.ip, self.tunnel) {
            (OuterIp::V4 { .. }, t) => (EtherType::IPV4, tunnel_protocol(t, version)),
            (OuterIp::V6 { .. }, t) => (EtherType::IPV6, tunnel_protocol(t, version)),
        };
        let mut o = self.l2.emit(frame, outer_ethertype)?;
        match self.ip {
            OuterIp::V4 { src, dst, ttl } => {
                // Written field by field, not through Ipv4Repr (whose inline options array would be
                // copied per packet), and the checksum is summed from the values, not read back from
                // the bytes just stored (that read would stall on store forwarding).
                let total = (ipv4::HEADER_LEN + ip_payload) as u16;
                let flags: u16 = if inner_df { 0x4000 } else { 0 };
                let (s4, d4) = (src.to_bits(), dst.to_bits());
                let acc = (0x4500u32 | tos as u32)
                    + total as u32
                    + ipv4_ident as u32
                    + flags as u32
                    + ((ttl as u32) << 8 | protocol.0 as u32)
                    + (s4 >> 16)
                    + (s4 & 0xFFFF)
                    + (d4 >> 16)
                    + (d4 & 0xFFFF);
                let c = checksum::finish(checksum::add((acc >> 16) as u16, acc as u16));
                let h = &mut frame[o..o + ipv4::HEADER_LEN];
                h[0] = 0x45;
                h[1] = tos;
                put16(h, 2, total);
                put16(h, 4, ipv4_ident);
                put16(h, 6, flags);
                h[8] = ttl;
                h[9] = protocol.0;
                put16(h, 10, c);
                h[12..16].copy_from_slice(&src.octets());
                h[16..20].copy_from_slice(&dst.octets());
                o += ipv4::HEADER_LEN;
            }
            OuterIp::V6 {
                src,
                dst,
                hop_limit,
            } => {
                Ipv6Repr {
                    src_addr: src,
                    dst_addr: dst,
                    next_header: protocol,
                    payload_len: ip_payload as u16,
                    hop_limit,
                    traffic_class: tos,
                    flow_label: flow_label(flow_hash),
                }
                .emit(&mut frame[o..])?;
                o += ipv6::HEADER_LEN;
            }
        }
        match self.tunnel {
            Tunnel::Gre {
                key,
                sequence,
                checksum,
                recursion,
            } => {
                GreRepr {
                    protocol: inner_ethertype,
                    checksum,
                    key,
                    sequence,
                    recursion,
                }
                .emit(&mut frame[o..])?;
            }
            Tunnel::Ipip => {}
            Tunnel::Vxlan {
                vni,
                dst_port,
                inner_src,
                inner_dst,
                udp_checksum,
            } => {
                let dgram = &mut frame[o..];
                UdpRepr {
                    src_port: vxlan_src_port(flow_hash),
                    dst_port,
                }
                .emit_header(dgram, ip_payload)?;
                VxlanRepr { vni }.emit(&mut dgram[udp::HEADER_LEN..])?;
                EthernetRepr {
                    src_addr: inner_src,
                    dst_addr: inner_dst,
                    ethertype: inner_ethertype,
                }
                .emit(&mut dgram[udp::HEADER_LEN + vxlan::HEADER_LEN..])?;
                if udp_checksum || matches!(self.ip, OuterIp::V6 { .. }) {
                    UdpPacket::new_unchecked(dgram).fill_checksum(&self.ip.addrs());
                }
            }
        }
        Ok(start)
    }
}

/// A precomputed encapsulation for the common case of an IPv4 outer header with plain GRE (no
/// key, sequence or checksum) or IPIP: the outer header bytes are built once, and each packet only
/// copies them in front of the inner packet and patches TOS, total length, identification, DF, the
/// protocol (IPIP) or GRE protocol type, and the header checksum, which is finished from a partial
/// sum of the constant fields. The output is byte-for-byte that of [`Encap::encapsulate`] (a
/// property test holds the two together); other encapsulations have no template.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EncapTemplate {
    hdr: [u8; 48],
    len: u8,
    ip: u8,
    gre: bool,
    ttl: u8,
    /// One's-complement partial sum of the constant IPv4 words (version/IHL, addresses).
    partial: u32,
}

impl EncapTemplate {
    /// The template of `e`, if it is an IPv4-outer plain-GRE or IPIP encapsulation.
    pub fn new(e: &Encap) -> Option<EncapTemplate> {
        let OuterIp::V4 { src, dst, ttl } = e.ip else {
            return None;
        };
        let gre = match e.tunnel {
            Tunnel::Gre {
                key: None,
                sequence: None,
                checksum: false,
                recursion: 0,
            } => true,
            Tunnel::Ipip => false,
            _ => return None,
        };
        let mut hdr = [0u8; 48];
        let ip = e.l2.emit(&mut hdr, EtherType::IPV4).ok()?;
        hdr[ip] = 0x45;
        hdr[ip + 8] = ttl;
        hdr[ip + 12..ip + 16].copy_from_slice(&src.octets());
        hdr[ip + 16..ip + 20].copy_from_slice(&dst.octets());
        let mut len = ip + ipv4::HEADER_LEN;
        if gre {
            hdr[ip + 9] = IpProtocol::GRE.0;
            len += 4; // flags and version 0; protocol type patched per packet
        }
        let (s4, d4) = (src.to_bits(), dst.to_bits());
        let partial = 0x4500u32 + (s4 >> 16) + (s4 & 0xFFFF) + (d4 >> 16) + (d4 & 0xFFFF);
        Some(EncapTemplate {
            hdr,
            len: len as u8,
            ip: ip as u8,
            gre,
            ttl,
            partial,
        })
    }

    /// Bytes added in front of the inner packet.
    #[inline]
    pub const fn overhead(&self) -> usize {
        self.len as usize
    }

    /// Like [`Encap::encapsulate`] (same result, same errors) for this template's encapsulation.
    #[inline]
    pub fn encapsulate(
        &self,
        buf: &mut [u8],
        inner: Range<usize>,
        ipv4_ident: u16,
    ) -> Result<usize> {
        if inner.start > inner.end || inner.end > buf.len() {
            return Err(Error::BufferTooSmall);
        }
        let ib = &buf[inner.clone()];
        let (v6, tos, df) = match ib.first().map(|b| b >> 4) {
            Some(4) if ib.len() >= ipv4::HEADER_LEN => (false, ib[1], ib[6] & 0x40 != 0),
            Some(4) => return Err(Error::Ipv4Truncated),
            Some(6) if ib.len() >= ipv6::HEADER_LEN => (
                true,
                ((u16::from_be_bytes([ib[0], ib[1]]) >> 4) & 0xFF) as u8,
                true,
            ),
            Some(6) => return Err(Error::Ipv6Truncated),
            Some(_) => return Err(Error::UnknownEthertype),
            None => return Err(Error::Ipv4Truncated),
        };
        let len = self.len as usize;
        if inner.start < len {
            return Err(Error::NoHeadroom);
        }
        let total = ipv4::HEADER_LEN + if self.gre { 4 } else { 0 } + inner.len();
        if total > 0xFFFF {
            return Err(Error::PacketTooBig);
        }
        let start = inner.start - len;
        let h = &mut buf[start..inner.start];
        h.copy_from_slice(&self.hdr[..len]);
        let ip = self.ip as usize;
        let protocol = if self.gre {
            IpProtocol::GRE.0
        } else if v6 {
            IpProtocol::IPV6.0
        } else {
            IpProtocol::IPIP.0
        };
        let flags: u16 = if df { 0x4000 } else { 0 };
        let acc = self.partial
            + tos as u32
            + total as u32
            + ipv4_ident as u32
            + flags as u32
            + ((self.ttl as u32) << 8 | protocol as u32);
        let c = checksum::finish(checksum::add((acc >> 16) as u16, acc as u16));
        h[ip + 1] = tos;
        put16(h, ip + 2, total as u16);
        put16(h, ip + 4, ipv4_ident);
        put16(h, ip + 6, flags);
        h[ip + 9] = protocol;
        put16(h, ip + 10, c);
        if self.gre {
            put16(
                h,
                ip + 22,
                if v6 {
                    EtherType::IPV6.0
                } else {
                    EtherType::IPV4.0
                },
            );
        }
        Ok(start)
    }
}

#[inline]
const fn tunnel_protocol(t: Tunnel, inner: IpVersion) -> IpProtocol {
    match t {
        Tunnel::Gre { .. } => IpProtocol::GRE,
        Tunnel::Vxlan { .. } => IpProtocol::UDP,
        Tunnel::Ipip => match inner {
            IpVersion::V4 => IpProtocol::IPIP,
            IpVersion::V6 => IpProtocol::IPV6,
        },
    }
}

/// How packets are carried to a backend: the one name for an encapsulation, used by the
/// balancer's configuration (which to add), by [`decapsulate`] (which a packet arrived in) and by
/// the backend setup (which to strip).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EncapKind {
    /// GRE (Maglev's choice, §2.1).
    Gre,
    /// IP-in-IP: IPv4-in-IP (protocol 4) or IPv6-in-IP (protocol 41).
    Ipip,
    /// VXLAN with the given VNI (backends terminate it with a kernel VXLAN device).
    Vxlan {
        /// VXLAN network identifier.
        vni: u32,
    },
    /// L2 direct server return: no tunnel, only the destination MAC is rewritten to the
    /// backend's.
    L2Dsr,
}

impl core::fmt::Display for EncapKind {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            EncapKind::Gre => f.write_str("gre"),
            EncapKind::Ipip => f.write_str("ipip"),
            EncapKind::Vxlan { vni } => write!(f, "vxlan(vni {vni})"),
            EncapKind::L2Dsr => f.write_str("l2dsr"),
        }
    }
}

impl core::str::FromStr for EncapKind {
    type Err = &'static str;

    /// `gre`, `ipip`, `vxlan` (VNI 0), `vxlan:VNI`, or `l2dsr` (alias `none`: nothing to
    /// decapsulate).
    fn from_str(s: &str) -> core::result::Result<EncapKind, &'static str> {
        const USE: &str = "use gre, ipip, vxlan, vxlan:VNI or l2dsr (none)";
        Ok(match s {
            "gre" => EncapKind::Gre,
            "ipip" => EncapKind::Ipip,
            "vxlan" => EncapKind::Vxlan { vni: 0 },
            "l2dsr" | "none" => EncapKind::L2Dsr,
            _ => match s.strip_prefix("vxlan:").map(str::parse::<u32>) {
                Some(Ok(vni)) if vni < 1 << 24 => EncapKind::Vxlan { vni },
                _ => return Err(USE),
            },
        })
    }
}

impl EncapKind {
    /// Whether this is VXLAN (with any VNI).
    pub const fn is_vxlan(&self) -> bool {
        matches!(self, EncapKind::Vxlan { .. })
    }
}

impl Tunnel {
    /// The encapsulation this tunnel builds.
    pub const fn kind(&self) -> EncapKind {
        match *self {
            Tunnel::Gre { .. } => EncapKind::Gre,
            Tunnel::Ipip => EncapKind::Ipip,
            Tunnel::Vxlan { vni, .. } => EncapKind::Vxlan { vni },
        }
    }
}

/// What the tunnel carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum InnerKind {
    /// An IPv4 packet: parse it with [`PacketSummary::parse_ip`].
    Ipv4,
    /// An IPv6 packet: parse it with [`PacketSummary::parse_ip`].
    Ipv6,
    /// An Ethernet frame (VXLAN, or GRE with protocol 0x6558): parse it with [`PacketSummary::parse`].
    Ethernet,
}

/// Where the inner packet of a tunnel packet is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Decapsulated {
    /// The tunnel type (never [`EncapKind::L2Dsr`]); for VXLAN, with the packet's VNI.
    pub tunnel: EncapKind,
    /// What it carries.
    pub inner: InnerKind,
    /// Offset of the inner packet in the frame.
    pub inner_offset: usize,
    /// Length of the inner packet.
    pub inner_len: usize,
    /// The GRE header (key, recursion...), for GRE.
    pub gre: Option<GreRepr>,
}

impl Decapsulated {
    /// The inner packet's range in the frame.
    #[inline]
    pub const fn inner_range(&self) -> Range<usize> {
        self.inner_offset..self.inner_offset + self.inner_len
    }
}

/// Find the inner packet of a GRE, IPIP / IPv6-in-IP or VXLAN (UDP to `vxlan_port`) packet that
/// `s` summarises. Errors: `Fragmented` (a fragmented tunnel packet must be reassembled first),
/// `NotTunnel`, the GRE and VXLAN header errors, `GreBadChecksum` (a present GRE checksum is
/// verified), `UnknownEthertype` (GRE protocol type other than IPv4, IPv6, 0x6558).
pub fn decapsulate(frame: &[u8], s: &PacketSummary, vxlan_port: u16) -> Result<Decapsulated> {
    if s.is_fragment() {
        return Err(Error::Fragmented);
    }
    let l4 = s.l4_bytes(frame);
    let base = s.l4_offset as usize;
    match s.protocol {
        IpProtocol::GRE => {
            let g = GrePacket::new_checked(l4)?;
            if !g.verify_checksum() {
                return Err(Error::GreBadChecksum);
            }
            let repr = GreRepr::parse(&g)?;
            let inner = match repr.protocol {
                EtherType::IPV4 => InnerKind::Ipv4,
                EtherType::IPV6 => InnerKind::Ipv6,
                EtherType::TEB => InnerKind::Ethernet,
                _ => return Err(Error::UnknownEthertype),
            };
            let hl = g.header_len();
            Ok(Decapsulated {
                tunnel: EncapKind::Gre,
                inner,
                inner_offset: base + hl,
                inner_len: l4.len() - hl,
                gre: Some(repr),
            })
        }
        IpProtocol::IPIP | IpProtocol::IPV6 => Ok(Decapsulated {
            tunnel: EncapKind::Ipip,
            inner: if s.protocol == IpProtocol::IPIP {
                InnerKind::Ipv4
            } else {
                InnerKind::Ipv6
            },
            inner_offset: base,
            inner_len: l4.len(),
            gre: None,
        }),
        IpProtocol::UDP if s.has_ports() && s.dst_port == vxlan_port => {
            let v = VxlanPacket::new_checked(&l4[udp::HEADER_LEN.min(l4.len())..])?;
            let repr = VxlanRepr::parse(&v)?;
            let off = udp::HEADER_LEN + vxlan::HEADER_LEN;
            Ok(Decapsulated {
                tunnel: EncapKind::Vxlan { vni: repr.vni },
                inner: InnerKind::Ethernet,
                inner_offset: base + off,
                inner_len: l4.len() - off,
                gre: None,
            })
        }
        _ => Err(Error::NotTunnel),
    }
}
