//! Flow identities with a fixed, portable byte encoding: the 5-tuple [`FlowKey`] (Maglev's
//! connection-tracking key, footnote 1 of §3.1), the 3-tuple [`ThreeTuple`] that a non-first
//! fragment still carries (§4.3), and the [`FragmentKey`] that names one datagram (RFC 791: source,
//! destination, protocol, identification).
//!
//! Encodings (all integers big-endian, no padding, no version tag — the length tells the family):
//!
//! | key | IPv4 | IPv6 |
//! |---|---|---|
//! | [`FlowKey`] | 13 B: src 4, dst 4, sport 2, dport 2, proto 1 | 37 B: src 16, dst 16, sport 2, dport 2, proto 1 |
//! | [`ThreeTuple`] | 9 B: src 4, dst 4, proto 1 | 33 B: src 16, dst 16, proto 1 |
//! | [`FragmentKey`] | 13 B: 3-tuple 9, ident 4 (the 16-bit IPv4 id zero-extended) | 37 B: 3-tuple 33, ident 4 |
//!
//! The `hash` methods feed these bytes to [`fp_hash::hash_bytes`], which is pinned: two balancers
//! with the same seed compute the same hash for the same packet (tests below pin golden values).
//! Protocols without ports (ICMP, ESP, GRE...) have ports 0 in their 5-tuple.

use core::net::{Ipv4Addr, Ipv6Addr};

use crate::ip::{IpPair, IpProtocol, IpVersion};

/// Largest encoding of any key in this module (the IPv6 5-tuple and fragment key).
pub const MAX_KEY_LEN: usize = 37;

/// An IPv4 5-tuple.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FlowKeyV4 {
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// Source port (0 when the protocol has none).
    pub src_port: u16,
    /// Destination port (0 when the protocol has none).
    pub dst_port: u16,
    /// IP protocol.
    pub protocol: IpProtocol,
}

impl FlowKeyV4 {
    /// Encoded length.
    pub const LEN: usize = 13;

    /// The 13-byte encoding.
    #[inline]
    pub fn to_bytes(&self) -> [u8; 13] {
        let mut b = [0u8; 13];
        b[0..4].copy_from_slice(&self.src.octets());
        b[4..8].copy_from_slice(&self.dst.octets());
        b[8..10].copy_from_slice(&self.src_port.to_be_bytes());
        b[10..12].copy_from_slice(&self.dst_port.to_be_bytes());
        b[12] = self.protocol.0;
        b
    }

    /// Decode [`FlowKeyV4::to_bytes`].
    #[inline]
    pub fn from_bytes(b: &[u8; 13]) -> Self {
        FlowKeyV4 {
            src: Ipv4Addr::new(b[0], b[1], b[2], b[3]),
            dst: Ipv4Addr::new(b[4], b[5], b[6], b[7]),
            src_port: u16::from_be_bytes([b[8], b[9]]),
            dst_port: u16::from_be_bytes([b[10], b[11]]),
            protocol: IpProtocol(b[12]),
        }
    }

    /// The key of the reverse direction.
    #[inline]
    pub fn reversed(&self) -> Self {
        FlowKeyV4 {
            src: self.dst,
            dst: self.src,
            src_port: self.dst_port,
            dst_port: self.src_port,
            protocol: self.protocol,
        }
    }
}

/// An IPv6 5-tuple.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FlowKeyV6 {
    /// Source address.
    pub src: Ipv6Addr,
    /// Destination address.
    pub dst: Ipv6Addr,
    /// Source port (0 when the protocol has none).
    pub src_port: u16,
    /// Destination port (0 when the protocol has none).
    pub dst_port: u16,
    /// Upper-layer protocol (after extension headers).
    pub protocol: IpProtocol,
}

impl FlowKeyV6 {
    /// Encoded length.
    pub const LEN: usize = 37;

    /// The 37-byte encoding.
    #[inline]
    pub fn to_bytes(&self) -> [u8; 37] {
        let mut b = [0u8; 37];
        b[0..16].copy_from_slice(&self.src.octets());
        b[16..32].copy_from_slice(&self.dst.octets());
        b[32..34].copy_from_slice(&self.src_port.to_be_bytes());
        b[34..36].copy_from_slice(&self.dst_port.to_be_bytes());
        b[36] = self.protocol.0;
        b
    }

    /// Decode [`FlowKeyV6::to_bytes`].
    #[inline]
    pub fn from_bytes(b: &[u8; 37]) -> Self {
        let mut s = [0u8; 16];
        let mut d = [0u8; 16];
        s.copy_from_slice(&b[0..16]);
        d.copy_from_slice(&b[16..32]);
        FlowKeyV6 {
            src: Ipv6Addr::from(s),
            dst: Ipv6Addr::from(d),
            src_port: u16::from_be_bytes([b[32], b[33]]),
            dst_port: u16::from_be_bytes([b[34], b[35]]),
            protocol: IpProtocol(b[36]),
        }
    }

    /// The key of the reverse direction.
    #[inline]
    pub fn reversed(&self) -> Self {
        FlowKeyV6 {
            src: self.dst,
            dst: self.src,
            src_port: self.dst_port,
            dst_port: self.src_port,
            protocol: self.protocol,
        }
    }
}

/// A 5-tuple of either family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FlowKey {
    /// IPv4.
    V4(FlowKeyV4),
    /// IPv6.
    V6(FlowKeyV6),
}

impl FlowKey {
    /// Build from an address pair, protocol and ports.
    #[inline]
    pub fn new(addrs: IpPair, protocol: IpProtocol, src_port: u16, dst_port: u16) -> FlowKey {
        match addrs {
            IpPair::V4(src, dst) => FlowKey::V4(FlowKeyV4 {
                src,
                dst,
                src_port,
                dst_port,
                protocol,
            }),
            IpPair::V6(src, dst) => FlowKey::V6(FlowKeyV6 {
                src,
                dst,
                src_port,
                dst_port,
                protocol,
            }),
        }
    }

    /// IP version.
    #[inline]
    pub const fn version(&self) -> IpVersion {
        match self {
            FlowKey::V4(_) => IpVersion::V4,
            FlowKey::V6(_) => IpVersion::V6,
        }
    }

    /// Write the encoding (13 or 37 bytes) into `out` and return it as a slice.
    #[inline]
    pub fn encode<'a>(&self, out: &'a mut [u8; MAX_KEY_LEN]) -> &'a [u8] {
        match self {
            FlowKey::V4(k) => {
                out[..13].copy_from_slice(&k.to_bytes());
                &out[..13]
            }
            FlowKey::V6(k) => {
                *out = k.to_bytes();
                &out[..]
            }
        }
    }

    /// Decode a 13- or 37-byte encoding; `None` for any other length.
    #[inline]
    pub fn from_bytes(b: &[u8]) -> Option<FlowKey> {
        match b.len() {
            13 => b
                .try_into()
                .ok()
                .map(|a| FlowKey::V4(FlowKeyV4::from_bytes(a))),
            37 => b
                .try_into()
                .ok()
                .map(|a| FlowKey::V6(FlowKeyV6::from_bytes(a))),
            _ => None,
        }
    }

    /// Pinned, seeded 64-bit hash of the encoding.
    #[inline]
    pub fn hash(&self, seed: u64) -> u64 {
        let mut b = [0u8; MAX_KEY_LEN];
        fp_hash::hash_bytes(seed, self.encode(&mut b))
    }

    /// The key of the reverse direction.
    #[inline]
    pub fn reversed(&self) -> FlowKey {
        match self {
            FlowKey::V4(k) => FlowKey::V4(k.reversed()),
            FlowKey::V6(k) => FlowKey::V6(k.reversed()),
        }
    }

    /// The 3-tuple of this flow.
    #[inline]
    pub fn three_tuple(&self) -> ThreeTuple {
        match *self {
            FlowKey::V4(k) => ThreeTuple::new(IpPair::V4(k.src, k.dst), k.protocol),
            FlowKey::V6(k) => ThreeTuple::new(IpPair::V6(k.src, k.dst), k.protocol),
        }
    }
}

/// Source, destination and protocol: what every fragment of a datagram carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ThreeTuple {
    /// Addresses.
    pub addrs: IpPair,
    /// Upper-layer protocol.
    pub protocol: IpProtocol,
}

impl ThreeTuple {
    /// Encoded length for IPv4.
    pub const V4_LEN: usize = 9;
    /// Encoded length for IPv6.
    pub const V6_LEN: usize = 33;

    /// Build one.
    #[inline]
    pub const fn new(addrs: IpPair, protocol: IpProtocol) -> ThreeTuple {
        ThreeTuple { addrs, protocol }
    }

    /// Write the encoding (9 or 33 bytes) into `out` and return it as a slice.
    #[inline]
    pub fn encode<'a>(&self, out: &'a mut [u8; MAX_KEY_LEN]) -> &'a [u8] {
        match self.addrs {
            IpPair::V4(s, d) => {
                out[0..4].copy_from_slice(&s.octets());
                out[4..8].copy_from_slice(&d.octets());
                out[8] = self.protocol.0;
                &out[..9]
            }
            IpPair::V6(s, d) => {
                out[0..16].copy_from_slice(&s.octets());
                out[16..32].copy_from_slice(&d.octets());
                out[32] = self.protocol.0;
                &out[..33]
            }
        }
    }

    /// Decode a 9- or 33-byte encoding; `None` for any other length.
    pub fn from_bytes(b: &[u8]) -> Option<ThreeTuple> {
        match b.len() {
            9 => Some(ThreeTuple::new(
                IpPair::V4(
                    Ipv4Addr::new(b[0], b[1], b[2], b[3]),
                    Ipv4Addr::new(b[4], b[5], b[6], b[7]),
                ),
                IpProtocol(b[8]),
            )),
            33 => {
                let s: [u8; 16] = b[0..16].try_into().ok()?;
                let d: [u8; 16] = b[16..32].try_into().ok()?;
                Some(ThreeTuple::new(
                    IpPair::V6(s.into(), d.into()),
                    IpProtocol(b[32]),
                ))
            }
            _ => None,
        }
    }

    /// Pinned, seeded 64-bit hash of the encoding (the fragment-redirect hash of Maglev §4.3).
    #[inline]
    pub fn hash(&self, seed: u64) -> u64 {
        let mut b = [0u8; MAX_KEY_LEN];
        fp_hash::hash_bytes(seed, self.encode(&mut b))
    }
}

/// One datagram's identity: its 3-tuple and IP identification. All fragments of a datagram share
/// it; the fragment table is keyed by it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FragmentKey {
    /// The datagram's 3-tuple.
    pub tuple: ThreeTuple,
    /// The identification (IPv4's 16 bits zero-extended, or IPv6's 32).
    pub ident: u32,
}

impl FragmentKey {
    /// Write the encoding (13 or 37 bytes) into `out` and return it as a slice.
    #[inline]
    pub fn encode<'a>(&self, out: &'a mut [u8; MAX_KEY_LEN]) -> &'a [u8] {
        let n = self.tuple.encode(out).len();
        out[n..n + 4].copy_from_slice(&self.ident.to_be_bytes());
        &out[..n + 4]
    }

    /// Decode a 13- or 37-byte encoding; `None` for any other length.
    pub fn from_bytes(b: &[u8]) -> Option<FragmentKey> {
        if b.len() != 13 && b.len() != 37 {
            return None;
        }
        let n = b.len() - 4;
        Some(FragmentKey {
            tuple: ThreeTuple::from_bytes(&b[..n])?,
            ident: u32::from_be_bytes([b[n], b[n + 1], b[n + 2], b[n + 3]]),
        })
    }

    /// Pinned, seeded 64-bit hash of the encoding.
    #[inline]
    pub fn hash(&self, seed: u64) -> u64 {
        let mut b = [0u8; MAX_KEY_LEN];
        fp_hash::hash_bytes(seed, self.encode(&mut b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k4() -> FlowKey {
        FlowKey::new(
            IpPair::V4(Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2)),
            IpProtocol::TCP,
            40000,
            80,
        )
    }

    #[test]
    fn v4_layout() {
        let mut b = [0u8; MAX_KEY_LEN];
        let e = k4().encode(&mut b);
        assert_eq!(e, &[10, 0, 0, 1, 10, 0, 0, 2, 0x9c, 0x40, 0, 80, 6]);
        assert_eq!(FlowKey::from_bytes(e), Some(k4()));
        assert_eq!(k4().reversed().reversed(), k4());
        let FlowKey::V4(r) = k4().reversed() else {
            panic!()
        };
        assert_eq!((r.src_port, r.dst_port), (80, 40000));
    }

    #[test]
    fn v6_layout() {
        let k = FlowKey::new(
            IpPair::V6(
                "2001:db8::1".parse().unwrap(),
                "2001:db8::2".parse().unwrap(),
            ),
            IpProtocol::UDP,
            1,
            0xFFFF,
        );
        let mut b = [0u8; MAX_KEY_LEN];
        let e = k.encode(&mut b).to_vec();
        assert_eq!(e.len(), 37);
        assert_eq!(&e[0..4], &[0x20, 0x01, 0x0d, 0xb8]);
        assert_eq!(e[15], 1);
        assert_eq!(e[31], 2);
        assert_eq!(&e[32..], &[0, 1, 0xFF, 0xFF, 17]);
        assert_eq!(FlowKey::from_bytes(&e), Some(k));
        assert_eq!(FlowKey::from_bytes(&e[..36]), None);
    }

    #[test]
    fn three_tuple_and_fragment_key() {
        let t = k4().three_tuple();
        let mut b = [0u8; MAX_KEY_LEN];
        assert_eq!(t.encode(&mut b), &[10, 0, 0, 1, 10, 0, 0, 2, 6]);
        assert_eq!(
            ThreeTuple::from_bytes(&[10, 0, 0, 1, 10, 0, 0, 2, 6]),
            Some(t)
        );
        let f = FragmentKey {
            tuple: t,
            ident: 0xBEEF,
        };
        let e = f.encode(&mut b).to_vec();
        assert_eq!(e, [10, 0, 0, 1, 10, 0, 0, 2, 6, 0, 0, 0xBE, 0xEF]);
        assert_eq!(FragmentKey::from_bytes(&e), Some(f));
        let t6 = ThreeTuple::new(
            IpPair::V6(Ipv6Addr::LOCALHOST, Ipv6Addr::UNSPECIFIED),
            IpProtocol::UDP,
        );
        let f6 = FragmentKey {
            tuple: t6,
            ident: 7,
        };
        let e6 = f6.encode(&mut b).to_vec();
        assert_eq!(e6.len(), 37);
        assert_eq!(FragmentKey::from_bytes(&e6), Some(f6));
    }

    #[test]
    fn hashes_are_pinned() {
        // Golden values: they change only if the encoding or fp-hash changes, which would make two
        // balancer versions disagree on where a flow goes. Update deliberately, never casually.
        assert_eq!(
            k4().hash(0),
            fp_hash::hash_bytes(0, &[10, 0, 0, 1, 10, 0, 0, 2, 0x9c, 0x40, 0, 80, 6])
        );
        assert_eq!(k4().hash(0x5eed), 0xef4f_d7eb_d13f_adb8);
        assert_eq!(k4().three_tuple().hash(0x5eed), 0x076d_11fe_6e2f_c71b);
        assert_ne!(k4().hash(1), k4().hash(2));
    }
}
