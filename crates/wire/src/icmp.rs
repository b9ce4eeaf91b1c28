//! ICMP for IPv4 (RFC 792) and ICMPv6 (RFC 4443): [`Icmpv4Packet`], [`Icmpv6Packet`], [`IcmpRepr`].
//!
//! Both share one layout: type, code, checksum, four "rest of header" bytes, then the body. The
//! views validate the 8 header bytes (`IcmpTruncated` / `Icmpv6Truncated`) and interpret only what
//! the load balancer needs: echo identifier/sequence, the MTU of "fragmentation needed" /
//! "packet too big", and — for error messages — the quoted packet ([`Icmpv4Packet::quoted`]), whose
//! IP and transport headers name the flow the error is about; [`crate::summary::QuotedSummary`]
//! parses it. The ICMPv4 checksum covers the message; the ICMPv6 checksum also covers the IPv6
//! pseudo-header, so its methods take an [`IpPair`].

use crate::bytes::{be16, be32, put16, put32, Field, Rest};
use crate::checksum;
use crate::error::{Error, Result};
use crate::ip::{IpPair, IpProtocol};

mod field {
    use super::{Field, Rest};
    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: Field = 2..4;
    pub const REST: Field = 4..8;
    pub const BODY: Rest = 8..;
}

/// Length of the ICMP / ICMPv6 header (type, code, checksum, rest of header).
pub const HEADER_LEN: usize = field::BODY.start;

/// ICMPv4 message types used by the data path.
pub mod v4 {
    /// Echo reply.
    pub const ECHO_REPLY: u8 = 0;
    /// Destination unreachable (code 4: fragmentation needed, with the next-hop MTU).
    pub const DEST_UNREACHABLE: u8 = 3;
    /// Source quench (deprecated, still an error message).
    pub const SOURCE_QUENCH: u8 = 4;
    /// Redirect.
    pub const REDIRECT: u8 = 5;
    /// Echo request.
    pub const ECHO_REQUEST: u8 = 8;
    /// Time exceeded.
    pub const TIME_EXCEEDED: u8 = 11;
    /// Parameter problem.
    pub const PARAMETER_PROBLEM: u8 = 12;
    /// Destination unreachable code: fragmentation needed and DF set.
    pub const CODE_FRAG_NEEDED: u8 = 4;
}

/// ICMPv6 message types used by the data path.
pub mod v6 {
    /// Destination unreachable.
    pub const DEST_UNREACHABLE: u8 = 1;
    /// Packet too big (with the MTU).
    pub const PACKET_TOO_BIG: u8 = 2;
    /// Time exceeded.
    pub const TIME_EXCEEDED: u8 = 3;
    /// Parameter problem.
    pub const PARAMETER_PROBLEM: u8 = 4;
    /// Echo request.
    pub const ECHO_REQUEST: u8 = 128;
    /// Echo reply.
    pub const ECHO_REPLY: u8 = 129;
    /// Neighbor solicitation.
    pub const NEIGHBOR_SOLICIT: u8 = 135;
    /// Neighbor advertisement.
    pub const NEIGHBOR_ADVERT: u8 = 136;
}

macro_rules! icmp_view {
    ($(#[$doc:meta])* $name:ident, $trunc:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $name<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $name<T> {
            /// Wrap without checking.
            #[inline]
            pub const fn new_unchecked(buffer: T) -> Self {
                $name { buffer }
            }

            /// Wrap, checking that the 8-byte header is present.
            #[inline]
            pub fn new_checked(buffer: T) -> Result<Self> {
                let p = Self::new_unchecked(buffer);
                p.check_len()?;
                Ok(p)
            }

            /// Truncation error below 8 bytes.
            #[inline]
            pub fn check_len(&self) -> Result<()> {
                if self.buffer.as_ref().len() < HEADER_LEN {
                    Err($trunc)
                } else {
                    Ok(())
                }
            }

            /// The wrapped buffer.
            #[inline]
            pub fn into_inner(self) -> T {
                self.buffer
            }

            /// Message type.
            #[inline]
            pub fn msg_type(&self) -> u8 {
                self.buffer.as_ref()[field::TYPE]
            }
            /// Message code.
            #[inline]
            pub fn code(&self) -> u8 {
                self.buffer.as_ref()[field::CODE]
            }
            /// Checksum field.
            #[inline]
            pub fn checksum(&self) -> u16 {
                be16(self.buffer.as_ref(), field::CHECKSUM.start)
            }
            /// The four bytes after the checksum, as a big-endian word.
            #[inline]
            pub fn rest_of_header(&self) -> u32 {
                be32(self.buffer.as_ref(), field::REST.start)
            }
            /// Echo identifier (echo request/reply).
            #[inline]
            pub fn echo_ident(&self) -> u16 {
                be16(self.buffer.as_ref(), field::REST.start)
            }
            /// Echo sequence number (echo request/reply).
            #[inline]
            pub fn echo_seq(&self) -> u16 {
                be16(self.buffer.as_ref(), field::REST.start + 2)
            }
        }

        impl<'a, T: AsRef<[u8]> + ?Sized> $name<&'a T> {
            /// The message body after the 8-byte header.
            #[inline]
            pub fn body(&self) -> &'a [u8] {
                &self.buffer.as_ref()[field::BODY]
            }

            /// For an error message, the quoted packet (starting with its IP header); otherwise
            /// `Err(IcmpNoQuote)`.
            #[inline]
            pub fn quoted(&self) -> Result<&'a [u8]> {
                if self.is_error() {
                    Ok(self.body())
                } else {
                    Err(Error::IcmpNoQuote)
                }
            }
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> $name<T> {
            /// Set the message type.
            #[inline]
            pub fn set_msg_type(&mut self, v: u8) {
                self.buffer.as_mut()[field::TYPE] = v;
            }
            /// Set the code.
            #[inline]
            pub fn set_code(&mut self, v: u8) {
                self.buffer.as_mut()[field::CODE] = v;
            }
            /// Set the checksum field.
            #[inline]
            pub fn set_checksum(&mut self, v: u16) {
                put16(self.buffer.as_mut(), field::CHECKSUM.start, v);
            }
            /// Set the rest-of-header word.
            #[inline]
            pub fn set_rest_of_header(&mut self, v: u32) {
                put32(self.buffer.as_mut(), field::REST.start, v);
            }
            /// Mutable body.
            #[inline]
            pub fn body_mut(&mut self) -> &mut [u8] {
                &mut self.buffer.as_mut()[field::BODY]
            }
        }

        impl<T: AsRef<[u8]>> AsRef<[u8]> for $name<T> {
            fn as_ref(&self) -> &[u8] {
                self.buffer.as_ref()
            }
        }
    };
}

icmp_view!(
    /// A read/write view of an ICMPv4 message.
    Icmpv4Packet,
    Error::IcmpTruncated
);
icmp_view!(
    /// A read/write view of an ICMPv6 message.
    Icmpv6Packet,
    Error::Icmpv6Truncated
);

impl<T: AsRef<[u8]>> Icmpv4Packet<T> {
    /// Error messages (unreachable, source quench, redirect, time exceeded, parameter problem)
    /// quote the offending packet.
    #[inline]
    pub fn is_error(&self) -> bool {
        matches!(self.msg_type(), 3 | 4 | 5 | 11 | 12)
    }
    /// Next-hop MTU of a "fragmentation needed" message (RFC 1191), else 0.
    #[inline]
    pub fn next_hop_mtu(&self) -> u16 {
        if self.msg_type() == v4::DEST_UNREACHABLE && self.code() == v4::CODE_FRAG_NEEDED {
            be16(self.buffer.as_ref(), field::REST.start + 2)
        } else {
            0
        }
    }
    /// Whether the checksum over the message verifies.
    #[inline]
    pub fn verify_checksum(&self) -> bool {
        checksum::verify(self.buffer.as_ref())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Icmpv4Packet<T> {
    /// Compute and store the checksum over the whole message.
    #[inline]
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let c = checksum::checksum(self.buffer.as_ref());
        self.set_checksum(c);
    }
}

impl<T: AsRef<[u8]>> Icmpv6Packet<T> {
    /// Error messages are types 0..=127 (RFC 4443 §2.1).
    #[inline]
    pub fn is_error(&self) -> bool {
        self.msg_type() < 128
    }
    /// MTU of a "packet too big" message, else 0.
    #[inline]
    pub fn mtu(&self) -> u32 {
        if self.msg_type() == v6::PACKET_TOO_BIG {
            self.rest_of_header()
        } else {
            0
        }
    }
    /// Whether the checksum (with the pseudo-header of `addrs`) verifies.
    #[inline]
    pub fn verify_checksum(&self, addrs: &IpPair) -> bool {
        let b = self.buffer.as_ref();
        let ph = addrs.pseudo_header_sum(IpProtocol::ICMPV6, b.len() as u32);
        checksum::add(ph, checksum::sum(b)) == 0xFFFF
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Icmpv6Packet<T> {
    /// Compute and store the checksum (pseudo-header of `addrs` included).
    #[inline]
    pub fn fill_checksum(&mut self, addrs: &IpPair) {
        self.set_checksum(0);
        let b = self.buffer.as_ref();
        let ph = addrs.pseudo_header_sum(IpProtocol::ICMPV6, b.len() as u32);
        let c = checksum::finish(checksum::add(ph, checksum::sum(b)));
        self.set_checksum(c);
    }
}

/// The header fields of an ICMPv4 or ICMPv6 message (the body stays in the buffer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IcmpRepr {
    /// Message type.
    pub msg_type: u8,
    /// Code.
    pub code: u8,
    /// The rest-of-header word (echo id/seq, MTU, pointer, unused...).
    pub rest_of_header: u32,
}

impl IcmpRepr {
    /// Read an ICMPv4 header.
    #[inline]
    pub fn parse_v4<T: AsRef<[u8]>>(p: &Icmpv4Packet<T>) -> Result<IcmpRepr> {
        p.check_len()?;
        Ok(IcmpRepr {
            msg_type: p.msg_type(),
            code: p.code(),
            rest_of_header: p.rest_of_header(),
        })
    }

    /// Read an ICMPv6 header.
    #[inline]
    pub fn parse_v6<T: AsRef<[u8]>>(p: &Icmpv6Packet<T>) -> Result<IcmpRepr> {
        p.check_len()?;
        Ok(IcmpRepr {
            msg_type: p.msg_type(),
            code: p.code(),
            rest_of_header: p.rest_of_header(),
        })
    }

    /// 8.
    #[inline]
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Write the header at the start of `message` (which already holds the body and ends where the
    /// message ends) and fill the ICMPv4 checksum.
    pub fn emit_v4(&self, message: &mut [u8]) -> Result<()> {
        if message.len() < HEADER_LEN {
            return Err(Error::BufferTooSmall);
        }
        let mut p = Icmpv4Packet::new_unchecked(message);
        p.set_msg_type(self.msg_type);
        p.set_code(self.code);
        p.set_rest_of_header(self.rest_of_header);
        p.fill_checksum();
        Ok(())
    }

    /// As [`IcmpRepr::emit_v4`], with the ICMPv6 checksum over `addrs`' pseudo-header.
    pub fn emit_v6(&self, message: &mut [u8], addrs: &IpPair) -> Result<()> {
        if message.len() < HEADER_LEN {
            return Err(Error::BufferTooSmall);
        }
        let mut p = Icmpv6Packet::new_unchecked(message);
        p.set_msg_type(self.msg_type);
        p.set_code(self.code);
        p.set_rest_of_header(self.rest_of_header);
        p.fill_checksum(addrs);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::Ipv6Addr;

    /// Echo request id 0x1234 seq 1, payload "abcd"; checksum computed independently (Python RFC 1071).
    const PING: [u8; 12] = [
        8, 0, 0x21, 0x04, 0x12, 0x34, 0x00, 0x01, b'a', b'b', b'c', b'd',
    ];

    #[test]
    fn echo_fixture() {
        let p = Icmpv4Packet::new_checked(&PING[..]).unwrap();
        assert!(p.verify_checksum());
        assert!(!p.is_error());
        assert_eq!((p.echo_ident(), p.echo_seq()), (0x1234, 1));
        assert_eq!(p.quoted(), Err(Error::IcmpNoQuote));
        let r = IcmpRepr::parse_v4(&p).unwrap();
        let mut out = [0u8; 12];
        out[8..].copy_from_slice(b"abcd");
        r.emit_v4(&mut out).unwrap();
        assert_eq!(out, PING);
        assert_eq!(
            Icmpv4Packet::new_checked(&PING[..7]).unwrap_err(),
            Error::IcmpTruncated
        );
        assert_eq!(
            Icmpv6Packet::new_checked(&PING[..7]).unwrap_err(),
            Error::Icmpv6Truncated
        );
    }

    #[test]
    fn frag_needed_quotes() {
        let mut m = [0u8; 36];
        m[8] = 0x45; // quoted IPv4 header starts here
        IcmpRepr {
            msg_type: v4::DEST_UNREACHABLE,
            code: v4::CODE_FRAG_NEEDED,
            rest_of_header: 1400,
        }
        .emit_v4(&mut m)
        .unwrap();
        let p = Icmpv4Packet::new_checked(&m[..]).unwrap();
        assert!(p.is_error() && p.verify_checksum());
        assert_eq!(p.next_hop_mtu(), 1400);
        assert_eq!(p.quoted().unwrap()[0], 0x45);
    }

    #[test]
    fn icmpv6_packet_too_big() {
        let a = IpPair::V6(
            "2001:db8::1".parse::<Ipv6Addr>().unwrap(),
            "2001:db8::2".parse().unwrap(),
        );
        let mut m = [0u8; 48];
        m[8] = 0x60;
        IcmpRepr {
            msg_type: v6::PACKET_TOO_BIG,
            code: 0,
            rest_of_header: 1280,
        }
        .emit_v6(&mut m, &a)
        .unwrap();
        let p = Icmpv6Packet::new_checked(&m[..]).unwrap();
        assert!(p.verify_checksum(&a));
        assert!(p.is_error());
        assert_eq!(p.mtu(), 1280);
        assert_eq!(p.quoted().unwrap().len(), 40);
        let other = IpPair::V6(Ipv6Addr::LOCALHOST, Ipv6Addr::LOCALHOST);
        assert!(!p.verify_checksum(&other));
    }
}
