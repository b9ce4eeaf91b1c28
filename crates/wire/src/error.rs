//! The data-path error: one small `Copy` enum naming why a packet was rejected.
//!
//! Every view's `new_checked`, every `Repr::parse`, the one-pass [`crate::PacketSummary`] parser and
//! the encapsulation helpers return this type. It is designed to be a counter index: the
//! discriminants are dense (`0..Error::COUNT`), [`Error::index`] (or `as usize`) picks a slot in a
//! per-worker `[u64; Error::COUNT]`, and [`Error::name`] gives a stable `snake_case` label for
//! metrics. New reasons are appended at the end so existing indices keep their meaning.

use core::fmt;

macro_rules! errors {
    ($( $(#[$doc:meta])* $variant:ident => $name:literal, )+) => {
        /// Why a packet (or a buffer handed to a builder) was rejected.
        ///
        /// `#[repr(u8)]` with dense discriminants: `err as usize < Error::COUNT`.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u8)]
        #[non_exhaustive]
        pub enum Error {
            $( $(#[$doc])* $variant, )+
        }

        impl Error {
            /// Every reason, in discriminant order (`Error::ALL[e as usize] == e`).
            pub const ALL: &'static [Error] = &[ $( Error::$variant, )+ ];
            /// Number of reasons: the length of a counter array indexed by [`Error::index`].
            pub const COUNT: usize = Error::ALL.len();

            /// Stable `snake_case` name for metrics labels and logs.
            pub const fn name(self) -> &'static str {
                match self { $( Error::$variant => $name, )+ }
            }
        }
    };
}

errors! {
    /// Fewer than 14 bytes: no complete Ethernet II header.
    EthernetTruncated => "ethernet_truncated",
    /// An 802.1Q / 802.1ad tag was announced but its 4 bytes are not there.
    VlanTruncated => "vlan_truncated",
    /// More than two stacked VLAN tags (only single tags and QinQ are accepted).
    TooManyVlanTags => "too_many_vlan_tags",
    /// The ethertype (after any VLAN tags) is not one the parser handles (the summary parser accepts
    /// only IPv4 and IPv6; ARP frames are reported with this reason too).
    UnknownEthertype => "unknown_ethertype",
    /// ARP packet shorter than its header or than its announced address lengths.
    ArpTruncated => "arp_truncated",
    /// ARP for something other than Ethernet hardware and IPv4 protocol addresses.
    ArpUnsupported => "arp_unsupported",
    /// Fewer than 20 bytes, or fewer than the IHL announces.
    Ipv4Truncated => "ipv4_truncated",
    /// The version nibble of a packet carried as IPv4 is not 4.
    Ipv4BadVersion => "ipv4_bad_version",
    /// IHL below 5 (a header shorter than 20 bytes).
    Ipv4BadIhl => "ipv4_bad_ihl",
    /// Total length shorter than the header, or longer than the bytes present.
    Ipv4BadTotalLen => "ipv4_bad_total_len",
    /// The IPv4 header checksum does not verify.
    Ipv4BadChecksum => "ipv4_bad_checksum",
    /// A fragment whose offset plus length exceeds 65535 bytes (the "ping of death").
    Ipv4BadFragment => "ipv4_bad_fragment",
    /// Fewer than 40 bytes.
    Ipv6Truncated => "ipv6_truncated",
    /// The version nibble of a packet carried as IPv6 is not 6.
    Ipv6BadVersion => "ipv6_bad_version",
    /// Payload length longer than the bytes present (jumbograms, payload length 0 with a
    /// Jumbo Payload option, are not supported: they cannot occur on Ethernet).
    Ipv6BadPayloadLen => "ipv6_bad_payload_len",
    /// A hop-by-hop options header somewhere other than directly after the IPv6 header (RFC 8200 §4.1).
    Ipv6HopByHopNotFirst => "ipv6_hop_by_hop_not_first",
    /// More extension headers than the parser walks (see `ipv6::MAX_EXT_HEADERS`).
    Ipv6TooManyExtHeaders => "ipv6_too_many_ext_headers",
    /// An IPv6 extension header or an authentication header (IPv4 or IPv6) runs past the packet.
    ExtHeaderTruncated => "ext_header_truncated",
    /// An authentication header whose length field is 0 (shorter than its fixed part).
    AhBadLength => "ah_bad_length",
    /// TTL / hop limit below the caller's `ParseOptions::min_ttl`.
    TtlExpired => "ttl_expired",
    /// Fewer than 20 bytes of TCP header, or fewer than its data offset announces.
    TcpTruncated => "tcp_truncated",
    /// TCP data offset below 5.
    TcpBadDataOffset => "tcp_bad_data_offset",
    /// Fewer than 8 bytes of UDP header.
    UdpTruncated => "udp_truncated",
    /// UDP length below 8 or longer than the IP payload (checked only on unfragmented datagrams).
    UdpBadLength => "udp_bad_length",
    /// Fewer than 8 bytes of ICMP header.
    IcmpTruncated => "icmp_truncated",
    /// Fewer than 8 bytes of ICMPv6 header.
    Icmpv6Truncated => "icmpv6_truncated",
    /// Asked for the quoted packet of an ICMP message that is not an error message, or whose quote
    /// is too short to hold an IP header.
    IcmpNoQuote => "icmp_no_quote",
    /// GRE header shorter than its flags announce.
    GreTruncated => "gre_truncated",
    /// GRE version other than 0 (version 1 is PPTP's enhanced GRE).
    GreBadVersion => "gre_bad_version",
    /// GRE with the routing-present or strict-source-route bit (RFC 1701 source routing).
    GreUnsupported => "gre_unsupported",
    /// Fewer than 8 bytes of VXLAN header.
    VxlanTruncated => "vxlan_truncated",
    /// VXLAN header without the I (valid VNI) flag.
    VxlanBadFlags => "vxlan_bad_flags",
    /// Decapsulation was asked of a packet that is not GRE, IPIP / IPv6-in-IPv6 or VXLAN.
    NotTunnel => "not_tunnel",
    /// Not enough headroom in front of the inner packet for the outer headers.
    NoHeadroom => "no_headroom",
    /// A builder was given a buffer shorter than what it has to write.
    BufferTooSmall => "buffer_too_small",
    /// The operation needs a whole datagram (e.g. an L4 checksum) but the packet is a fragment.
    Fragmented => "fragmented",
    /// The packet is not TCP, UDP or ICMPv6 (there is no pseudo-header L4 checksum to fill), or its
    /// transport header was not parsed.
    NoL4Checksum => "no_l4_checksum",
    /// Encapsulation would make the outer IP packet longer than 65535 bytes.
    PacketTooBig => "packet_too_big",
    /// A GRE packet carries a checksum that does not verify (checked on decapsulation).
    GreBadChecksum => "gre_bad_checksum",
}

impl Error {
    /// The counter index of this reason, `< Error::COUNT`.
    #[inline]
    pub const fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl core::error::Error for Error {}

/// Result alias used throughout the crate.
pub type Result<T> = core::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indices_are_dense_and_names_unique() {
        for (i, e) in Error::ALL.iter().enumerate() {
            assert_eq!(e.index(), i);
            assert_eq!(*e as usize, i);
        }
        let mut names: std::vec::Vec<&str> = Error::ALL.iter().map(|e| e.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Error::COUNT);
        for n in names {
            assert!(n
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'));
        }
        assert_eq!(
            std::format!("{}", Error::Ipv4BadChecksum),
            "ipv4_bad_checksum"
        );
    }
}
