//! Flow keys: what the table is indexed by.
//!
//! The paper keys its table by the IPv4 4-tuple (§4) and says a 5-tuple works as well; flowplane uses
//! the full 5-tuple ([`FiveTuple`], 13 bytes of information in a 16-byte value) and offers
//! [`FiveTuple6`] for IPv6 and plain `u64` keys for tests and synthetic traffic. Any type can be a key
//! by implementing [`FlowKey`]: a pinned, seeded 64-bit hash from `fp-hash` from which the table
//! derives every array index (so two nodes with the same seed place a flow identically).

use core::fmt::Debug;

/// A key the flow-state table can index by.
pub trait FlowKey: Copy + Eq + Debug {
    /// A 64-bit hash of the key under `seed`. Must be built from `fp-hash`'s pinned functions so that
    /// placement is identical on every machine and every version.
    fn hash64(&self, seed: u64) -> u64;
}

/// An IPv4 transport 5-tuple.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default, PartialOrd, Ord)]
pub struct FiveTuple {
    /// Source address (host order).
    pub src: u32,
    /// Destination address (host order).
    pub dst: u32,
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// IP protocol number (6 TCP, 17 UDP, ...).
    pub proto: u8,
}

impl FiveTuple {
    /// Construct from parts.
    pub const fn new(src: u32, dst: u32, sport: u16, dport: u16, proto: u8) -> Self {
        FiveTuple {
            src,
            dst,
            sport,
            dport,
            proto,
        }
    }

    /// The tuple as two 64-bit words (the hash input).
    #[inline(always)]
    pub const fn words(&self) -> [u64; 2] {
        [
            ((self.src as u64) << 32) | self.dst as u64,
            ((self.sport as u64) << 24) | ((self.dport as u64) << 8) | self.proto as u64,
        ]
    }
}

impl FlowKey for FiveTuple {
    #[inline(always)]
    fn hash64(&self, seed: u64) -> u64 {
        fp_hash::hash_words(seed, &self.words())
    }
}

/// An IPv6 transport 5-tuple.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default, PartialOrd, Ord)]
pub struct FiveTuple6 {
    /// Source address (network byte order).
    pub src: [u8; 16],
    /// Destination address (network byte order).
    pub dst: [u8; 16],
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// Next header (transport protocol).
    pub proto: u8,
}

impl FlowKey for FiveTuple6 {
    #[inline]
    fn hash64(&self, seed: u64) -> u64 {
        let w = |b: &[u8; 16], i: usize| {
            u64::from_le_bytes([
                b[i],
                b[i + 1],
                b[i + 2],
                b[i + 3],
                b[i + 4],
                b[i + 5],
                b[i + 6],
                b[i + 7],
            ])
        };
        let tail = ((self.sport as u64) << 24) | ((self.dport as u64) << 8) | self.proto as u64;
        fp_hash::hash_words(
            seed,
            &[
                w(&self.src, 0),
                w(&self.src, 8),
                w(&self.dst, 0),
                w(&self.dst, 8),
                tail,
            ],
        )
    }
}

impl FlowKey for u64 {
    #[inline(always)]
    fn hash64(&self, seed: u64) -> u64 {
        fp_hash::hash_u64(seed, *self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn five_tuple_words_are_injective_on_fields() {
        let a = FiveTuple::new(1, 2, 3, 4, 6);
        let fields = [
            FiveTuple::new(2, 2, 3, 4, 6),
            FiveTuple::new(1, 3, 3, 4, 6),
            FiveTuple::new(1, 2, 4, 4, 6),
            FiveTuple::new(1, 2, 3, 5, 6),
            FiveTuple::new(1, 2, 3, 4, 17),
        ];
        for b in fields {
            assert_ne!(a.words(), b.words());
            assert_ne!(a.hash64(9), b.hash64(9));
        }
        assert_ne!(a.hash64(1), a.hash64(2), "seed must matter");
    }

    #[test]
    fn pinned_hash_values() {
        // Placement is part of the wire contract between nodes sharing a seed: pin it.
        let k = FiveTuple::new(0x0a00_0001, 0x0a00_0002, 1234, 80, 6);
        assert_eq!(k.hash64(0), fp_hash::hash_words(0, &k.words()));
        assert_eq!(k.hash64(0), 0xF907_F5AD_38ED_FDAF);
        let k6 = FiveTuple6 {
            src: [1; 16],
            dst: [2; 16],
            sport: 1,
            dport: 2,
            proto: 17,
        };
        assert_ne!(k6.hash64(0), k6.hash64(1));
        assert_eq!(7u64.hash64(3), fp_hash::hash_u64(3, 7));
    }
}
