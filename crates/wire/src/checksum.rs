//! The Internet checksum (RFC 1071), pseudo-header sums and incremental updates (RFC 1624).
//!
//! Vocabulary used throughout the crate:
//!
//! * a **sum** is the ones'-complement sum of big-endian 16-bit words, folded to 16 bits and *not*
//!   complemented ([`sum`], [`pseudo_header_v4`], [`pseudo_header_v6`]); sums combine with [`add`];
//! * a **checksum** is the complement of a sum, the value stored in a header ([`checksum`],
//!   [`finish`]);
//! * a region *verifies* when the sum over it, checksum field included, is `0xFFFF` ([`verify`]).
//!
//! `sum(a ++ b) == add(sum(a), sum(b))` holds when `a` has even length (an odd-length `a` shifts
//! every byte of `b` to the other half of its word). All headers start at even offsets of the
//! region they are summed with, so the crate only combines sums at even boundaries.
//!
//! Speed: [`sum`] adds 32-bit words into four independent 64-bit accumulators (deferred carries,
//! RFC 1071 §2(C)), in native byte order, and swaps once at the end (the ones'-complement sum is
//! byte-order independent, RFC 1071 §2(B)). The portable
//! word-by-word definition is the oracle in the tests below and in the fuzz target.
//!
//! Incremental update ([`update_u16`], [`update_u32`], [`update_bytes`]) uses RFC 1624 equation 3,
//! `HC' = ~(~HC + ~m + m')`, which unlike RFC 1141's form never produces a `-0` checksum from a
//! non-zero header. A UDP checksum of 0 means "no checksum": callers must not update it (the view
//! helpers in this crate don't).

use core::net::{Ipv4Addr, Ipv6Addr};

use crate::ip::IpProtocol;

#[inline(always)]
fn fold64(acc: u64) -> u16 {
    let s = (acc & 0xFFFF_FFFF) + (acc >> 32); // < 2^33
    let s = (s & 0xFFFF) + (s >> 16); // < 2^17 + 2^16
    let s = (s & 0xFFFF) + (s >> 16); // <= 0x1FFFE -> one more carry at most
    let s = (s & 0xFFFF) + (s >> 16);
    s as u16
}

#[inline(always)]
fn ne32(c: &[u8], i: usize) -> u64 {
    u32::from_ne_bytes([c[i], c[i + 1], c[i + 2], c[i + 3]]) as u64
}

/// Ones'-complement sum of `data` as big-endian 16-bit words (a trailing odd byte is padded with a
/// zero low byte), folded to 16 bits, not complemented.
///
/// 32-bit words are added into four independent 64-bit accumulators, so no carry needs handling
/// inside the loop (a `u64` holds 2³² additions of 32-bit words: inputs up to 16 GiB) and the
/// four add chains run in parallel (the compiler may also vectorise the loop).
#[inline]
pub fn sum(data: &[u8]) -> u16 {
    let (mut a0, mut a1, mut a2, mut a3) = (0u64, 0u64, 0u64, 0u64);
    let mut chunks = data.chunks_exact(16);
    for c in &mut chunks {
        a0 += ne32(c, 0);
        a1 += ne32(c, 4);
        a2 += ne32(c, 8);
        a3 += ne32(c, 12);
    }
    let mut acc = a0 + a1 + a2 + a3;
    let mut rest = chunks.remainder();
    while rest.len() >= 4 {
        acc += ne32(rest, 0);
        rest = &rest[4..];
    }
    if rest.len() >= 2 {
        acc += u16::from_ne_bytes([rest[0], rest[1]]) as u64;
        rest = &rest[2..];
    }
    if let [b] = rest {
        // The lone byte is the high byte of a big-endian word, i.e. the first byte in memory.
        acc += u16::from_ne_bytes([*b, 0]) as u64;
    }
    // Summing native-endian words gives the byte-swapped big-endian sum on little-endian hosts
    // (RFC 1071 §2(B)); `from_be` swaps it back there and is the identity on big-endian hosts.
    // A native 32-bit word is two 16-bit words, the second weighted by 2^16 = 1 (mod 0xFFFF).
    u16::from_be(fold64(acc))
}

/// [`sum`] of a 20-byte header (an IPv4 header without options), always inlined: the per-packet
/// IPv4 header checksum is five 32-bit additions.
#[inline(always)]
pub fn sum20(h: &[u8; 20]) -> u16 {
    let acc = ne32(h, 0) + ne32(h, 4) + ne32(h, 8) + ne32(h, 12) + ne32(h, 16);
    u16::from_be(fold64(acc))
}

/// Ones'-complement addition of two folded sums.
#[inline(always)]
pub const fn add(a: u16, b: u16) -> u16 {
    let s = a as u32 + b as u32;
    ((s & 0xFFFF) + (s >> 16)) as u16
}

/// Ones'-complement sum of several folded sums.
#[inline]
pub fn combine(sums: &[u16]) -> u16 {
    let mut acc = 0u16;
    for &s in sums {
        acc = add(acc, s);
    }
    acc
}

/// Turn a sum into the checksum stored in a header (its complement).
#[inline(always)]
pub const fn finish(sum: u16) -> u16 {
    !sum
}

/// The Internet checksum of `data`: `!sum(data)`. Over a header whose checksum field is zero, this
/// is the value to store there.
#[inline]
pub fn checksum(data: &[u8]) -> u16 {
    finish(sum(data))
}

/// Whether `data` (checksum field included) verifies: its sum is `0xFFFF` (negative zero).
#[inline]
pub fn verify(data: &[u8]) -> bool {
    sum(data) == 0xFFFF
}

/// Sum of the IPv4 pseudo-header (RFC 793 / RFC 768): source, destination, zero, protocol and the
/// upper-layer length (TCP or UDP header plus payload).
#[inline]
pub fn pseudo_header_v4(src: Ipv4Addr, dst: Ipv4Addr, protocol: IpProtocol, length: u16) -> u16 {
    let s = src.octets();
    let d = dst.octets();
    let acc = u16::from_be_bytes([s[0], s[1]]) as u32
        + u16::from_be_bytes([s[2], s[3]]) as u32
        + u16::from_be_bytes([d[0], d[1]]) as u32
        + u16::from_be_bytes([d[2], d[3]]) as u32
        + protocol.0 as u32
        + length as u32;
    fold64(acc as u64)
}

/// Sum of the IPv6 pseudo-header (RFC 8200 §8.1): source, destination, the 32-bit upper-layer
/// length and the next-header value of the upper-layer protocol (not of any extension header).
#[inline]
pub fn pseudo_header_v6(src: Ipv6Addr, dst: Ipv6Addr, next_header: IpProtocol, length: u32) -> u16 {
    let mut acc: u64 = 0;
    for a in [src.octets(), dst.octets()] {
        for w in a.chunks_exact(2) {
            acc += u16::from_be_bytes([w[0], w[1]]) as u64;
        }
    }
    acc += (length >> 16) as u64 + (length & 0xFFFF) as u64 + next_header.0 as u64;
    fold64(acc)
}

/// RFC 1624 eqn. 3: the checksum after one 16-bit word of the covered data changed from `old` to
/// `new`. The word must sit at an even offset of the covered region.
#[inline(always)]
pub const fn update_u16(checksum: u16, old: u16, new: u16) -> u16 {
    !add(add(!checksum, !old), new)
}

/// [`update_u16`] for a 32-bit field at an even offset (e.g. an IPv4 address, a TCP sequence number).
#[inline(always)]
pub const fn update_u32(checksum: u16, old: u32, new: u32) -> u16 {
    let c = update_u16(checksum, (old >> 16) as u16, (new >> 16) as u16);
    update_u16(c, old as u16, new as u16)
}

/// [`update_u16`] for a run of bytes at an even offset (e.g. an IPv6 address) that changed from
/// `old` to `new`. Both must have the same even length; otherwise the checksum is returned unchanged
/// and `None` tells the caller to recompute instead.
#[inline]
pub fn update_bytes(checksum: u16, old: &[u8], new: &[u8]) -> Option<u16> {
    if old.len() != new.len() || !old.len().is_multiple_of(2) {
        return None;
    }
    // ~HC + ~m + m' == ~HC + ~sum(m) + sum(m') in ones' complement.
    Some(!add(add(!checksum, !sum(old)), sum(new)))
}

#[cfg(test)]
pub(crate) mod reference {
    //! The textbook definition, word by word: the oracle for [`super::sum`].

    pub fn sum(data: &[u8]) -> u16 {
        let mut acc: u32 = 0;
        let mut i = 0;
        while i + 1 < data.len() {
            acc += u16::from_be_bytes([data[i], data[i + 1]]) as u32;
            acc = (acc & 0xFFFF) + (acc >> 16);
            i += 2;
        }
        if i < data.len() {
            acc += (data[i] as u32) << 8;
            acc = (acc & 0xFFFF) + (acc >> 16);
        }
        acc as u16
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Ones'-complement equality: 0x0000 and 0xFFFF are both zero.
    fn oc_eq(a: u16, b: u16) -> bool {
        a == b || (a == 0 || a == 0xFFFF) && (b == 0 || b == 0xFFFF)
    }

    #[test]
    fn rfc1071_example() {
        // RFC 1071 §3: bytes 00 01 f2 03 f4 f5 f6 f7 sum to 0xddf2.
        let d = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(sum(&d), 0xddf2);
        assert_eq!(checksum(&d), !0xddf2);
    }

    #[test]
    fn known_ipv4_header() {
        // A classic example header (Wikipedia "IPv4 header checksum"): checksum 0xb861.
        let mut h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(checksum(&h), 0xb861);
        h[10..12].copy_from_slice(&0xb861u16.to_be_bytes());
        assert!(verify(&h));
        h[8] = 0x3f; // TTL 64 -> 63
        assert!(!verify(&h));
        let c = update_u16(0xb861, 0x4011, 0x3f11);
        h[10..12].copy_from_slice(&c.to_be_bytes());
        assert!(verify(&h));
        assert_eq!(c, 0xb961);
    }

    #[test]
    fn odd_lengths_and_empty() {
        assert_eq!(sum(&[]), 0);
        assert_eq!(sum(&[0xab]), 0xab00);
        assert_eq!(
            sum(&[0xab, 0xcd, 0xef]),
            (0xabcd_u32 + 0xef00 - 0xFFFF) as u16
        );
        let big = [0xFFu8; 1001];
        assert_eq!(sum(&big), reference::sum(&big));
    }

    #[test]
    fn pseudo_headers_match_byte_layout() {
        let s = Ipv4Addr::new(10, 0, 0, 1);
        let d = Ipv4Addr::new(192, 168, 7, 254);
        let mut b = [0u8; 12];
        b[0..4].copy_from_slice(&s.octets());
        b[4..8].copy_from_slice(&d.octets());
        b[9] = 6;
        b[10..12].copy_from_slice(&1234u16.to_be_bytes());
        assert_eq!(
            pseudo_header_v4(s, d, IpProtocol::TCP, 1234),
            reference::sum(&b)
        );

        let s6: Ipv6Addr = "2001:db8::1".parse().unwrap();
        let d6: Ipv6Addr = "fe80::ffff:1:2:3".parse().unwrap();
        let mut b6 = [0u8; 40];
        b6[0..16].copy_from_slice(&s6.octets());
        b6[16..32].copy_from_slice(&d6.octets());
        b6[32..36].copy_from_slice(&70000u32.to_be_bytes());
        b6[39] = 58;
        assert_eq!(
            pseudo_header_v6(s6, d6, IpProtocol::ICMPV6, 70000),
            reference::sum(&b6)
        );
    }

    proptest! {
        #[test]
        fn fast_sum_matches_reference(data in proptest::collection::vec(any::<u8>(), 0..2000),
                                      skip in 0usize..8) {
            let d = &data[skip.min(data.len())..];
            prop_assert_eq!(sum(d), reference::sum(d));
        }

        #[test]
        fn sums_combine_at_even_boundaries(a in proptest::collection::vec(any::<u8>(), 0..300),
                                           b in proptest::collection::vec(any::<u8>(), 0..300)) {
            let mut a = a;
            if a.len() % 2 == 1 { a.pop(); }
            let mut ab = a.clone();
            ab.extend_from_slice(&b);
            prop_assert!(oc_eq(sum(&ab), add(sum(&a), sum(&b))));
        }

        #[test]
        fn incremental_update_equals_recompute(
            data in proptest::collection::vec(any::<u8>(), 4..200),
            pos in any::<usize>(), new16 in any::<u16>(), new32 in any::<u32>(),
        ) {
            let mut data = data;
            if data.len() % 2 == 1 { data.push(0); }
            // Put a valid checksum in the first word.
            data[0] = 0; data[1] = 0;
            let ck = checksum(&data);
            data[0..2].copy_from_slice(&ck.to_be_bytes());
            prop_assert!(verify(&data));
            let words = data.len() / 2;
            let p = 1 + pos % (words - 1); // a word other than the checksum

            let old = u16::from_be_bytes([data[2 * p], data[2 * p + 1]]);
            data[2 * p..2 * p + 2].copy_from_slice(&new16.to_be_bytes());
            let ck2 = update_u16(ck, old, new16);
            data[0..2].copy_from_slice(&ck2.to_be_bytes());
            prop_assert!(verify(&data) || data[2..].iter().all(|&b| b == 0));

            if words >= 3 {
                let p = 1 + pos % (words - 2);
                let o = [data[2*p], data[2*p+1], data[2*p+2], data[2*p+3]];
                let old32 = u32::from_be_bytes(o);
                data[2*p..2*p+4].copy_from_slice(&new32.to_be_bytes());
                let ck3 = update_u32(ck2, old32, new32);
                let ck3b = update_bytes(ck2, &o, &new32.to_be_bytes()).unwrap();
                prop_assert!(oc_eq(ck3, ck3b));
                data[0..2].copy_from_slice(&ck3.to_be_bytes());
                let mut z = data.clone(); z[0] = 0; z[1] = 0;
                prop_assert!(oc_eq(ck3, checksum(&z)));
            }
        }
    }

    #[test]
    fn sum20_matches_sum() {
        let h: [u8; 20] = core::array::from_fn(|i| (i as u8).wrapping_mul(37).wrapping_add(0xF1));
        assert_eq!(sum20(&h), sum(&h));
        assert_eq!(sum20(&[0xFF; 20]), reference::sum(&[0xFF; 20]));
    }

    #[test]
    fn update_bytes_rejects_mismatched_lengths() {
        assert_eq!(update_bytes(0x1234, &[1, 2], &[1, 2, 3, 4]), None);
        assert_eq!(update_bytes(0x1234, &[1], &[2]), None);
    }
}
