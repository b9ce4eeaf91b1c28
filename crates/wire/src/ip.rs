//! Types shared by IPv4 and IPv6: protocol numbers and the IP version.

use core::fmt;

/// An IP protocol number / IPv6 next-header value (IANA "Assigned Internet Protocol Numbers").
///
/// A newtype rather than an enum so any byte round-trips and matching on the constants costs nothing.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct IpProtocol(pub u8);

impl IpProtocol {
    /// IPv6 hop-by-hop options (0).
    pub const HOPOPT: IpProtocol = IpProtocol(0);
    /// ICMP for IPv4 (1).
    pub const ICMP: IpProtocol = IpProtocol(1);
    /// IGMP (2).
    pub const IGMP: IpProtocol = IpProtocol(2);
    /// IPv4 encapsulated in IP ("IPIP", RFC 2003) (4).
    pub const IPIP: IpProtocol = IpProtocol(4);
    /// TCP (6).
    pub const TCP: IpProtocol = IpProtocol(6);
    /// UDP (17).
    pub const UDP: IpProtocol = IpProtocol(17);
    /// IPv6 encapsulated in IP (RFC 2473 / RFC 4213) (41).
    pub const IPV6: IpProtocol = IpProtocol(41);
    /// IPv6 routing header (43).
    pub const IPV6_ROUTE: IpProtocol = IpProtocol(43);
    /// IPv6 fragment header (44).
    pub const IPV6_FRAG: IpProtocol = IpProtocol(44);
    /// GRE (47).
    pub const GRE: IpProtocol = IpProtocol(47);
    /// IPsec ESP (50). Opaque: the transport header behind it is encrypted.
    pub const ESP: IpProtocol = IpProtocol(50);
    /// IPsec authentication header (51).
    pub const AH: IpProtocol = IpProtocol(51);
    /// ICMPv6 (58).
    pub const ICMPV6: IpProtocol = IpProtocol(58);
    /// IPv6 "no next header" (59).
    pub const IPV6_NONXT: IpProtocol = IpProtocol(59);
    /// IPv6 destination options (60).
    pub const IPV6_OPTS: IpProtocol = IpProtocol(60);
    /// SCTP (132).
    pub const SCTP: IpProtocol = IpProtocol(132);

    /// Whether the transport header starts with a 16-bit source and destination port (TCP, UDP).
    #[inline]
    pub const fn has_ports(self) -> bool {
        matches!(self.0, 6 | 17)
    }

    /// A short name for the well-known values, `None` otherwise.
    pub const fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            0 => "hopopt",
            1 => "icmp",
            2 => "igmp",
            4 => "ipip",
            6 => "tcp",
            17 => "udp",
            41 => "ipv6",
            43 => "ipv6-route",
            44 => "ipv6-frag",
            47 => "gre",
            50 => "esp",
            51 => "ah",
            58 => "icmpv6",
            59 => "ipv6-nonxt",
            60 => "ipv6-opts",
            132 => "sctp",
            _ => return None,
        })
    }
}

impl fmt::Debug for IpProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => write!(f, "{n}({})", self.0),
            None => write!(f, "IpProtocol({})", self.0),
        }
    }
}

impl fmt::Display for IpProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "{}", self.0),
        }
    }
}

impl From<u8> for IpProtocol {
    #[inline]
    fn from(v: u8) -> Self {
        IpProtocol(v)
    }
}

impl From<IpProtocol> for u8 {
    #[inline]
    fn from(v: IpProtocol) -> u8 {
        v.0
    }
}

/// IP version of a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IpVersion {
    /// IPv4.
    V4,
    /// IPv6.
    V6,
}

/// Source and destination addresses of one IP packet, the input of pseudo-header checksums.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IpPair {
    /// IPv4 source, destination.
    V4(core::net::Ipv4Addr, core::net::Ipv4Addr),
    /// IPv6 source, destination.
    V6(core::net::Ipv6Addr, core::net::Ipv6Addr),
}

impl IpPair {
    /// Sum of the TCP/UDP/ICMPv6 pseudo-header for an upper-layer packet of `protocol` and
    /// `length` bytes. (An IPv4 length above 65535 cannot occur; it is truncated to 16 bits.)
    #[inline]
    pub fn pseudo_header_sum(&self, protocol: IpProtocol, length: u32) -> u16 {
        match *self {
            IpPair::V4(s, d) => crate::checksum::pseudo_header_v4(s, d, protocol, length as u16),
            IpPair::V6(s, d) => crate::checksum::pseudo_header_v6(s, d, protocol, length),
        }
    }

    /// The IP version.
    #[inline]
    pub const fn version(&self) -> IpVersion {
        match self {
            IpPair::V4(..) => IpVersion::V4,
            IpPair::V6(..) => IpVersion::V6,
        }
    }

    /// Source address.
    #[inline]
    pub fn src(&self) -> core::net::IpAddr {
        match *self {
            IpPair::V4(s, _) => s.into(),
            IpPair::V6(s, _) => s.into(),
        }
    }

    /// Destination address.
    #[inline]
    pub fn dst(&self) -> core::net::IpAddr {
        match *self {
            IpPair::V4(_, d) => d.into(),
            IpPair::V6(_, d) => d.into(),
        }
    }
}
