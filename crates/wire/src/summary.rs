//! The pipeline's single entry point: parse a raw Ethernet frame once into a small `Copy`
//! [`PacketSummary`], or an [`Error`] naming why it was rejected.
//!
//! One pass, no allocation, no panic on any input, bounded work (at most two VLAN tags, one IPv4
//! AH, [`crate::ipv6ext::MAX_EXT_HEADERS`] IPv6 extension headers). The checks, in order:
//!
//! 1. Ethernet header (`EthernetTruncated`), up to two VLAN tags (`VlanTruncated`,
//!    `TooManyVlanTags`), ethertype IPv4 or IPv6 (`UnknownEthertype`, ARP included: see
//!    [`L2Header::parse`] for the switch's L2-only parse).
//! 2. IPv4: length ≥ 20 (`Ipv4Truncated`), version (`Ipv4BadVersion`), IHL (`Ipv4BadIhl`,
//!    `Ipv4Truncated`), total length within the frame (`Ipv4BadTotalLen`), header checksum
//!    (`Ipv4BadChecksum`, unless [`ParseOptions::verify_ipv4_checksum`] is off), fragment extent
//!    (`Ipv4BadFragment`), one authentication header if present. IPv6: length ≥ 40
//!    (`Ipv6Truncated`), version (`Ipv6BadVersion`), payload length within the frame
//!    (`Ipv6BadPayloadLen`), extension headers ([`crate::ipv6ext::walk`]). Then the TTL / hop limit
//!    against [`ParseOptions::min_ttl`] (`TtlExpired`).
//! 3. Transport, unless the packet is a non-first fragment: TCP (`TcpTruncated`,
//!    `TcpBadDataOffset`), UDP (`UdpTruncated`, `UdpBadLength` — the length check is skipped for a
//!    first fragment, whose UDP length covers the whole datagram), ICMP / ICMPv6 (`IcmpTruncated`,
//!    `Icmpv6Truncated`). Other protocols (GRE, IPIP, ESP, SCTP...) are accepted with
//!    [`L4Kind::None`] and ports 0.
//!
//! Trailing bytes after the IP datagram (Ethernet padding) are ignored. Offsets are `u16`: a
//! datagram must end within the first 65535 bytes of the buffer (any Ethernet frame does; larger
//! inputs get `Ipv4BadTotalLen` / `Ipv6BadPayloadLen`). The L4 checksum is not
//! verified (a forwarder does not need to; [`crate::offload`] can).

use core::net::IpAddr;

use crate::bytes::be16;
use crate::error::{Error, Result};
use crate::ethernet::{self, EtherType, EthernetFrame, MacAddr};
use crate::flow::{FlowKey, FragmentKey, ThreeTuple};
use crate::icmp::{Icmpv4Packet, Icmpv6Packet};
use crate::ip::{IpPair, IpProtocol, IpVersion};
use crate::ipv4::{self, Ipv4Packet};
use crate::ipv6::{self, Ipv6Packet};
use crate::ipv6ext::{self, AuthHeader};
use crate::tcp::{TcpFlags, TcpPacket};
use crate::udp::{self, UdpPacket};
use crate::vlan::{VlanHeader, VlanTag};

/// Knobs of the summary parser.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParseOptions {
    /// Reject IPv4 packets whose header checksum does not verify (`Ipv4BadChecksum`). Default on:
    /// it costs ten 16-bit additions and no NIC or veth offloads the IPv4 header checksum on receive.
    pub verify_ipv4_checksum: bool,
    /// Reject packets whose TTL / hop limit is below this (`TtlExpired`). Default 0: no check (TTL
    /// policy is the caller's; the balancer, like Maglev, does not route and does not decrement).
    pub min_ttl: u8,
}

impl ParseOptions {
    /// Checksum verified, no TTL check.
    pub const DEFAULT: ParseOptions = ParseOptions {
        verify_ipv4_checksum: true,
        min_ttl: 0,
    };
}

impl Default for ParseOptions {
    fn default() -> Self {
        ParseOptions::DEFAULT
    }
}

/// Which transport header the parser read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum L4Kind {
    /// None: a non-first fragment, or a protocol the parser does not look into.
    None,
    /// TCP: ports and flags are filled.
    Tcp,
    /// UDP: ports are filled.
    Udp,
    /// ICMP for IPv4: type and code are filled.
    Icmpv4,
    /// ICMPv6: type and code are filled.
    Icmpv6,
}

/// Fragmentation state of a datagram that is a fragment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FragmentInfo {
    /// Identification (IPv4's 16 bits zero-extended; IPv6's 32 bits).
    pub ident: u32,
    /// Offset of this fragment's data in the datagram, in bytes.
    pub offset: u16,
    /// More fragments follow.
    pub more: bool,
}

impl FragmentInfo {
    /// The first fragment (offset 0): it carries the transport header.
    #[inline]
    pub const fn is_first(&self) -> bool {
        self.offset == 0
    }
}

/// The link-layer part of a frame: MACs, up to two VLAN tags, the ethertype after them and where
/// the network header starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct L2Header {
    /// Destination MAC.
    pub dst_mac: MacAddr,
    /// Source MAC.
    pub src_mac: MacAddr,
    /// The first (outer) VLAN tag, if any.
    pub outer_vlan: Option<VlanTag>,
    /// The second tag of a QinQ frame, if any.
    pub inner_vlan: Option<VlanTag>,
    /// The ethertype after the tags.
    pub ethertype: EtherType,
    /// Offset of the network header: 14, 18 or 22.
    pub l3_offset: u16,
}

impl L2Header {
    /// Parse the Ethernet header and up to two VLAN tags. Any ethertype is accepted here.
    #[inline]
    pub fn parse(frame: &[u8]) -> Result<L2Header> {
        let eth = EthernetFrame::new_checked(frame)?;
        let mut l2 = L2Header {
            dst_mac: eth.dst_addr(),
            src_mac: eth.src_addr(),
            outer_vlan: None,
            inner_vlan: None,
            ethertype: eth.ethertype(),
            l3_offset: ethernet::HEADER_LEN as u16,
        };
        let mut off = ethernet::HEADER_LEN;
        for depth in 0..3 {
            if !l2.ethertype.is_vlan() {
                break;
            }
            if depth == 2 {
                return Err(Error::TooManyVlanTags);
            }
            let tag = VlanHeader::new_checked(&frame[off..])?;
            let t = Some(VlanTag {
                tpid: l2.ethertype,
                tci: tag.tci(),
            });
            if depth == 0 {
                l2.outer_vlan = t;
            } else {
                l2.inner_vlan = t;
            }
            l2.ethertype = tag.ethertype();
            off += 4;
        }
        l2.l3_offset = off as u16;
        Ok(l2)
    }

    /// The VLAN id of the outer tag, if the frame is tagged.
    #[inline]
    pub fn vlan_id(&self) -> Option<u16> {
        self.outer_vlan.map(|t| t.tci.vid())
    }
}

/// Everything the balancer's data path needs from one frame, in one `Copy` value (92 bytes).
///
/// Offsets are from the start of the buffer given to [`PacketSummary::parse`] (or
/// [`PacketSummary::parse_ip`]); `l3_offset + l3_len` is where the IP datagram ends (Ethernet
/// padding excluded).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PacketSummary {
    /// Link-layer header (zeroed MACs and `l3_offset` 0 for [`PacketSummary::parse_ip`]).
    pub l2: L2Header,
    /// Offset of the IP header.
    pub l3_offset: u16,
    /// Length of the IP datagram: IPv4 total length, or 40 + IPv6 payload length.
    pub l3_len: u16,
    /// Offset of the transport header (after IPv4 options, AH, IPv6 extension headers). For a
    /// non-first fragment, the offset of the fragment's data.
    pub l4_offset: u16,
    /// Transport length: the UDP length field for an unfragmented UDP datagram; otherwise the bytes
    /// from `l4_offset` to the end of the datagram.
    pub l4_len: u16,
    /// Source and destination address (the IP version is implied).
    pub addrs: IpPair,
    /// Upper-layer protocol (after AH / extension headers; ESP is reported as ESP).
    pub protocol: IpProtocol,
    /// TTL or hop limit.
    pub ttl: u8,
    /// IPv4 TOS byte or IPv6 traffic class.
    pub tos: u8,
    /// IPv4 don't-fragment flag (always `false` for IPv6, whose routers never fragment).
    pub dont_frag: bool,
    /// `Some` if the datagram is a fragment (IPv6 atomic fragments are not).
    pub fragment: Option<FragmentInfo>,
    /// The transport header the parser read.
    pub l4: L4Kind,
    /// TCP/UDP source port, else 0.
    pub src_port: u16,
    /// TCP/UDP destination port, else 0.
    pub dst_port: u16,
    /// TCP flags, else empty.
    pub tcp_flags: TcpFlags,
    /// ICMP/ICMPv6 type, else 0.
    pub icmp_type: u8,
    /// ICMP/ICMPv6 code, else 0.
    pub icmp_code: u8,
}

impl PacketSummary {
    /// Parse an Ethernet frame with [`ParseOptions::DEFAULT`].
    #[inline]
    pub fn parse(frame: &[u8]) -> Result<PacketSummary> {
        Self::parse_with(frame, &ParseOptions::DEFAULT)
    }

    /// Parse an Ethernet frame.
    #[inline]
    pub fn parse_with(frame: &[u8], opts: &ParseOptions) -> Result<PacketSummary> {
        let l2 = L2Header::parse(frame)?;
        match l2.ethertype {
            EtherType::IPV4 => parse_v4(frame, l2, opts),
            EtherType::IPV6 => parse_v6(frame, l2, opts),
            _ => Err(Error::UnknownEthertype),
        }
    }

    /// Parse a bare IP packet (pcap `LINKTYPE_RAW`, or a decapsulated inner packet), choosing the
    /// version by its first nibble (`UnknownEthertype` if neither 4 nor 6, `Ipv4Truncated` if empty).
    #[inline]
    pub fn parse_ip(packet: &[u8], opts: &ParseOptions) -> Result<PacketSummary> {
        let mut l2 = L2Header {
            dst_mac: MacAddr::ZERO,
            src_mac: MacAddr::ZERO,
            outer_vlan: None,
            inner_vlan: None,
            ethertype: EtherType(0),
            l3_offset: 0,
        };
        match packet.first().map(|b| b >> 4) {
            Some(4) => {
                l2.ethertype = EtherType::IPV4;
                parse_v4(packet, l2, opts)
            }
            Some(6) => {
                l2.ethertype = EtherType::IPV6;
                parse_v6(packet, l2, opts)
            }
            Some(_) => Err(Error::UnknownEthertype),
            None => Err(Error::Ipv4Truncated),
        }
    }

    /// IP version.
    #[inline]
    pub const fn version(&self) -> IpVersion {
        self.addrs.version()
    }
    /// Source address.
    #[inline]
    pub fn src(&self) -> IpAddr {
        self.addrs.src()
    }
    /// Destination address.
    #[inline]
    pub fn dst(&self) -> IpAddr {
        self.addrs.dst()
    }
    /// Offset one past the end of the IP datagram.
    #[inline]
    pub const fn l3_end(&self) -> usize {
        self.l3_offset as usize + self.l3_len as usize
    }
    /// Whether this is a fragment.
    #[inline]
    pub const fn is_fragment(&self) -> bool {
        self.fragment.is_some()
    }
    /// Whether this is a fragment other than the first (no transport header: hash by 3-tuple).
    #[inline]
    pub const fn is_non_first_fragment(&self) -> bool {
        matches!(self.fragment, Some(f) if f.offset != 0)
    }
    /// Whether ports were read (TCP or UDP, not a non-first fragment).
    #[inline]
    pub const fn has_ports(&self) -> bool {
        matches!(self.l4, L4Kind::Tcp | L4Kind::Udp)
    }
    /// Whether this is an ICMP / ICMPv6 error message (which quotes the packet it is about).
    #[inline]
    pub const fn is_icmp_error(&self) -> bool {
        match self.l4 {
            L4Kind::Icmpv4 => matches!(self.icmp_type, 3 | 4 | 5 | 11 | 12),
            L4Kind::Icmpv6 => self.icmp_type < 128,
            _ => false,
        }
    }

    /// The 5-tuple (ports 0 when [`PacketSummary::has_ports`] is false).
    #[inline]
    pub fn flow_key(&self) -> FlowKey {
        FlowKey::new(self.addrs, self.protocol, self.src_port, self.dst_port)
    }
    /// The 3-tuple (source, destination, protocol).
    #[inline]
    pub fn three_tuple(&self) -> ThreeTuple {
        ThreeTuple::new(self.addrs, self.protocol)
    }
    /// The datagram identity, if this is a fragment.
    #[inline]
    pub fn fragment_key(&self) -> Option<FragmentKey> {
        self.fragment.map(|f| FragmentKey {
            tuple: self.three_tuple(),
            ident: f.ident,
        })
    }

    /// The IP datagram's bytes in `frame` (the buffer this summary was parsed from).
    #[inline]
    pub fn ip_bytes<'a>(&self, frame: &'a [u8]) -> &'a [u8] {
        frame
            .get(self.l3_offset as usize..self.l3_end())
            .unwrap_or(&[])
    }
    /// The transport bytes (`l4_offset .. l4_offset + l4_len`) in `frame`.
    #[inline]
    pub fn l4_bytes<'a>(&self, frame: &'a [u8]) -> &'a [u8] {
        let s = self.l4_offset as usize;
        frame.get(s..s + self.l4_len as usize).unwrap_or(&[])
    }

    /// The TCP or UDP payload in `frame` (the buffer this summary was parsed from): from after the
    /// transport header (TCP's data offset, UDP's 8 bytes) to the end of the IP datagram, or to the
    /// end of `frame` if that comes first. Empty for other protocols and for non-first fragments.
    #[inline]
    pub fn payload<'a>(&self, frame: &'a [u8]) -> &'a [u8] {
        let l4 = self.l4_offset as usize;
        let start = match self.l4 {
            L4Kind::Tcp => match frame.get(l4..).map(TcpPacket::new_checked) {
                Some(Ok(t)) => l4 + t.header_len(),
                _ => return &[],
            },
            L4Kind::Udp => l4 + udp::HEADER_LEN,
            _ => return &[],
        };
        let end = self.l3_end().min(frame.len());
        frame.get(start..end).unwrap_or(&[])
    }

    /// For an ICMP / ICMPv6 error, parse the quoted packet (`IcmpNoQuote` otherwise).
    #[inline]
    pub fn icmp_quoted(&self, frame: &[u8]) -> Result<QuotedSummary> {
        if !self.is_icmp_error() {
            return Err(Error::IcmpNoQuote);
        }
        let l4 = self.l4_bytes(frame);
        QuotedSummary::parse(l4.get(8..).unwrap_or(&[]))
    }
}

#[inline]
fn ttl_check(ttl: u8, opts: &ParseOptions) -> Result<()> {
    if ttl < opts.min_ttl {
        Err(Error::TtlExpired)
    } else {
        Ok(())
    }
}

#[inline(always)]
fn parse_v4(frame: &[u8], l2: L2Header, opts: &ParseOptions) -> Result<PacketSummary> {
    let l3 = l2.l3_offset as usize;
    let bytes = frame.get(l3..).unwrap_or(&[]);
    if bytes.len() < ipv4::HEADER_LEN {
        return Err(Error::Ipv4Truncated);
    }
    let p = Ipv4Packet::new_unchecked(bytes);
    if p.version() != 4 {
        return Err(Error::Ipv4BadVersion);
    }
    p.check_len()?;
    if l3 + p.total_len() as usize > 0xFFFF {
        // Offsets are u16: the datagram must end within the first 64 KiB of the buffer.
        return Err(Error::Ipv4BadTotalLen);
    }
    if opts.verify_ipv4_checksum && !p.verify_checksum() {
        return Err(Error::Ipv4BadChecksum);
    }
    let hl = p.header_len();
    let total = p.total_len();
    let payload_len = total - hl as u16;
    let offset = p.frag_offset();
    if offset as u32 + payload_len as u32 > 0xFFFF {
        return Err(Error::Ipv4BadFragment);
    }
    let ttl = p.ttl();
    ttl_check(ttl, opts)?;
    let fragment = if p.is_fragment() {
        Some(FragmentInfo {
            ident: p.ident() as u32,
            offset,
            more: p.more_frags(),
        })
    } else {
        None
    };
    let mut protocol = p.protocol();
    let mut l4 = hl;
    let payload = &bytes[hl..total as usize];
    if protocol == IpProtocol::AH && offset == 0 {
        let ah = AuthHeader::new_checked(payload)?;
        protocol = ah.next_header();
        l4 += ah.header_len();
    }
    let l4i = if offset == 0 {
        parse_l4(protocol, fragment.is_some(), &bytes[l4..total as usize])?
    } else {
        L4Info::NONE
    };
    Ok(PacketSummary {
        l2,
        l3_offset: l3 as u16,
        l3_len: total,
        l4_offset: (l3 + l4) as u16,
        l4_len: l4i.udp_len.unwrap_or(total - l4 as u16),
        addrs: IpPair::V4(p.src_addr(), p.dst_addr()),
        protocol,
        ttl,
        tos: p.tos(),
        dont_frag: p.dont_frag(),
        fragment,
        l4: l4i.kind,
        src_port: l4i.src_port,
        dst_port: l4i.dst_port,
        tcp_flags: l4i.tcp_flags,
        icmp_type: l4i.icmp_type,
        icmp_code: l4i.icmp_code,
    })
}

fn parse_v6(frame: &[u8], l2: L2Header, opts: &ParseOptions) -> Result<PacketSummary> {
    let l3 = l2.l3_offset as usize;
    let bytes = frame.get(l3..).unwrap_or(&[]);
    if bytes.len() < ipv6::HEADER_LEN {
        return Err(Error::Ipv6Truncated);
    }
    let p = Ipv6Packet::new_unchecked(bytes);
    if p.version() != 6 {
        return Err(Error::Ipv6BadVersion);
    }
    p.check_len()?;
    let total = ipv6::HEADER_LEN + p.payload_len() as usize;
    if l3 + total > 0xFFFF {
        // Offsets are u16: the datagram must end within the first 64 KiB of the buffer.
        return Err(Error::Ipv6BadPayloadLen);
    }
    let chain = ipv6ext::walk(p.next_header(), &bytes[ipv6::HEADER_LEN..total])?;
    let ttl = p.hop_limit();
    ttl_check(ttl, opts)?;
    let fragment = chain
        .fragment
        .filter(|f| f.is_fragment())
        .map(|f| FragmentInfo {
            ident: f.ident,
            offset: f.frag_offset,
            more: f.more_frags,
        });
    let l4 = ipv6::HEADER_LEN + chain.offset;
    let l4i = if fragment.is_none_or(|f| f.offset == 0) {
        parse_l4(chain.protocol, fragment.is_some(), &bytes[l4..total])?
    } else {
        L4Info::NONE
    };
    Ok(PacketSummary {
        l2,
        l3_offset: l3 as u16,
        l3_len: total as u16,
        l4_offset: (l3 + l4) as u16,
        l4_len: l4i.udp_len.unwrap_or((total - l4) as u16),
        addrs: IpPair::V6(p.src_addr(), p.dst_addr()),
        protocol: chain.protocol,
        ttl,
        tos: p.traffic_class(),
        dont_frag: false,
        fragment,
        l4: l4i.kind,
        src_port: l4i.src_port,
        dst_port: l4i.dst_port,
        tcp_flags: l4i.tcp_flags,
        icmp_type: l4i.icmp_type,
        icmp_code: l4i.icmp_code,
    })
}

/// What the transport parse found (small, so the summary is built once, in place).
#[derive(Clone, Copy)]
struct L4Info {
    kind: L4Kind,
    src_port: u16,
    dst_port: u16,
    tcp_flags: TcpFlags,
    icmp_type: u8,
    icmp_code: u8,
    /// The UDP length field of a whole datagram (it bounds the transport bytes).
    udp_len: Option<u16>,
}

impl L4Info {
    const NONE: L4Info = L4Info {
        kind: L4Kind::None,
        src_port: 0,
        dst_port: 0,
        tcp_flags: TcpFlags::NONE,
        icmp_type: 0,
        icmp_code: 0,
        udp_len: None,
    };
}

#[inline(always)]
fn parse_l4(protocol: IpProtocol, fragment: bool, l4: &[u8]) -> Result<L4Info> {
    let mut i = L4Info::NONE;
    match protocol {
        IpProtocol::TCP => {
            let t = TcpPacket::new_checked(l4)?;
            i.kind = L4Kind::Tcp;
            i.src_port = t.src_port();
            i.dst_port = t.dst_port();
            i.tcp_flags = t.flags();
        }
        IpProtocol::UDP => {
            if fragment {
                // First fragment: the length field covers the whole datagram.
                if l4.len() < udp::HEADER_LEN {
                    return Err(Error::UdpTruncated);
                }
            } else {
                i.udp_len = Some(UdpPacket::new_checked(l4)?.len());
            }
            i.kind = L4Kind::Udp;
            i.src_port = be16(l4, 0);
            i.dst_port = be16(l4, 2);
        }
        IpProtocol::ICMP => {
            let p = Icmpv4Packet::new_checked(l4)?;
            i.kind = L4Kind::Icmpv4;
            i.icmp_type = p.msg_type();
            i.icmp_code = p.code();
        }
        IpProtocol::ICMPV6 => {
            let p = Icmpv6Packet::new_checked(l4)?;
            i.kind = L4Kind::Icmpv6;
            i.icmp_type = p.msg_type();
            i.icmp_code = p.code();
        }
        _ => {}
    }
    Ok(i)
}

/// The flow an ICMP error is about, read leniently from the quoted packet (which is usually
/// truncated: RFC 792 quotes the IP header and 8 bytes, RFC 4443 as much as fits in 1280 bytes).
///
/// The quoted IP header must be complete (IPv4: IHL × 4 bytes; IPv6: 40 bytes and the extension
/// headers); its length fields and checksum are not checked against the quote. Ports are read when
/// the quote holds at least 4 transport bytes of a TCP/UDP first fragment or whole datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct QuotedSummary {
    /// Addresses of the quoted packet (i.e. as *sent*, usually by the VIP: reversed with respect to
    /// the traffic the balancer receives from clients).
    pub addrs: IpPair,
    /// Upper-layer protocol of the quoted packet.
    pub protocol: IpProtocol,
    /// Source port of the quoted packet, if read.
    pub src_port: u16,
    /// Destination port of the quoted packet, if read.
    pub dst_port: u16,
    /// Whether ports were read.
    pub has_ports: bool,
}

impl QuotedSummary {
    /// Parse a quoted packet (the ICMP body after the 8-byte header).
    pub fn parse(quote: &[u8]) -> Result<QuotedSummary> {
        let (addrs, protocol, l4, non_first) = match quote.first().map(|b| b >> 4) {
            Some(4) => {
                if quote.len() < ipv4::HEADER_LEN {
                    return Err(Error::Ipv4Truncated);
                }
                let p = Ipv4Packet::new_unchecked(quote);
                let hl = p.header_len();
                if hl < ipv4::HEADER_LEN {
                    return Err(Error::Ipv4BadIhl);
                }
                if hl > quote.len() {
                    return Err(Error::Ipv4Truncated);
                }
                (
                    IpPair::V4(p.src_addr(), p.dst_addr()),
                    p.protocol(),
                    hl,
                    p.frag_offset() != 0,
                )
            }
            Some(6) => {
                if quote.len() < ipv6::HEADER_LEN {
                    return Err(Error::Ipv6Truncated);
                }
                let p = Ipv6Packet::new_unchecked(quote);
                let c = ipv6ext::walk(p.next_header(), &quote[ipv6::HEADER_LEN..])?;
                let non_first = c.fragment.is_some_and(|f| f.frag_offset != 0);
                (
                    IpPair::V6(p.src_addr(), p.dst_addr()),
                    c.protocol,
                    ipv6::HEADER_LEN + c.offset,
                    non_first,
                )
            }
            _ => return Err(Error::IcmpNoQuote),
        };
        let mut q = QuotedSummary {
            addrs,
            protocol,
            src_port: 0,
            dst_port: 0,
            has_ports: false,
        };
        if protocol.has_ports() && !non_first && quote.len() >= l4 + 4 {
            q.src_port = be16(quote, l4);
            q.dst_port = be16(quote, l4 + 2);
            q.has_ports = true;
        }
        Ok(q)
    }

    /// The quoted packet's 5-tuple.
    #[inline]
    pub fn flow_key(&self) -> FlowKey {
        FlowKey::new(self.addrs, self.protocol, self.src_port, self.dst_port)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_stays_small() {
        // A batch of 32 summaries is under 3 KiB: it stays in L1 next to the frames' headers.
        assert!(
            core::mem::size_of::<PacketSummary>() <= 96,
            "{}",
            core::mem::size_of::<PacketSummary>()
        );
    }
}
