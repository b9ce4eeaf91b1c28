//! IPv6 extension headers (RFC 8200 §4) and the IP authentication header (RFC 4302), and the walk
//! that finds the upper-layer header behind them: [`walk`].
//!
//! Views: [`Ipv6ExtHeader`] (hop-by-hop options, routing, destination options: the generic
//! "next header, length in 8-byte units − 1, data" layout), [`Ipv6FragHeader`] and [`AuthHeader`]
//! (length in 4-byte units − 2). Each `new_checked` validates that the whole header is present.
//!
//! What [`walk`] accepts — the same set Linux's `ipv6_skip_exthdr` skips:
//! hop-by-hop (only directly after the fixed header, else `Ipv6HopByHopNotFirst`), routing,
//! destination options, fragment and AH, at most [`MAX_EXT_HEADERS`] of them
//! (`Ipv6TooManyExtHeaders`). Anything else ends the walk and is the upper-layer protocol: TCP, UDP,
//! ICMPv6, but also ESP (50, opaque: nothing behind it can be read), "no next header" (59) and
//! unknown values. Mobility, HIP and Shim6 headers (135, 139, 140) end the walk too, as in Linux;
//! they carry no transport header in practice. A fragment header with a non-zero offset also ends
//! it: what follows is the middle of a datagram, not a header, so the upper-layer protocol is the
//! fragment header's next-header value and there is nothing to parse behind it.
//!
//! Builders pad header data with zero bytes to the 8-byte multiple; for options headers zeros are
//! Pad1 options (at most 7, which Linux accepts).

use crate::bytes::{be16, be32, put16, put32, Field, Rest};
use crate::error::{Error, Result};
use crate::ip::IpProtocol;

/// Extension headers [`walk`] follows before giving up with `Ipv6TooManyExtHeaders`. Real traffic
/// carries at most a handful (RFC 8200 §4.1 recommends each type at most once, destination options
/// at most twice); the bound keeps the per-packet cost fixed.
pub const MAX_EXT_HEADERS: usize = 8;

mod field {
    use super::{Field, Rest};
    pub const NXT_HDR: usize = 0;
    pub const LENGTH: usize = 1;
    pub const DATA: Rest = 2..;
    // fragment header
    pub const FRAG_OFF_M: Field = 2..4;
    pub const FRAG_IDENT: Field = 4..8;
    // authentication header
    pub const AH_SPI: Field = 4..8;
    pub const AH_SEQ: Field = 8..12;
    pub const AH_ICV: Rest = 12..;
}

// ---------------------------------------------------------------------------------------------
// Generic options / routing header

/// A view of a hop-by-hop, routing or destination options header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6ExtHeader<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6ExtHeader<T> {
    /// Wrap without checking.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        Ipv6ExtHeader { buffer }
    }

    /// Wrap, checking that the whole header (as its length byte announces) is present.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let h = Self::new_unchecked(buffer);
        h.check_len()?;
        Ok(h)
    }

    /// `Err(ExtHeaderTruncated)` below 8 bytes or below the announced length.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < 8 || len < self.header_len() {
            Err(Error::ExtHeaderTruncated)
        } else {
            Ok(())
        }
    }

    /// The wrapped buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Next header.
    #[inline]
    pub fn next_header(&self) -> IpProtocol {
        IpProtocol(self.buffer.as_ref()[field::NXT_HDR])
    }

    /// Header length in bytes: `(length byte + 1) × 8`.
    #[inline]
    pub fn header_len(&self) -> usize {
        (self.buffer.as_ref()[field::LENGTH] as usize + 1) * 8
    }

    /// Routing type (meaningful for a routing header only).
    #[inline]
    pub fn routing_type(&self) -> u8 {
        self.buffer.as_ref()[2]
    }

    /// Segments left (meaningful for a routing header only).
    #[inline]
    pub fn segments_left(&self) -> u8 {
        self.buffer.as_ref()[3]
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Ipv6ExtHeader<&'a T> {
    /// The header's data: bytes 2 to the header length (options, or routing type onwards).
    #[inline]
    pub fn data(&self) -> &'a [u8] {
        let b = self.buffer.as_ref();
        &b[field::DATA.start.min(b.len())..self.header_len().min(b.len())]
    }
}

/// A hop-by-hop / routing / destination options header as data bytes (borrowed; no allocation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6ExtHeaderRepr<'a> {
    /// Next header.
    pub next_header: IpProtocol,
    /// Bytes 2.. of the header (options TLVs, or routing type, segments left and type data).
    /// Emitted zero-padded to `header_len`.
    pub data: &'a [u8],
}

impl<'a> Ipv6ExtHeaderRepr<'a> {
    /// Parse a checked header (padding stays part of `data`).
    #[inline]
    pub fn parse<T: AsRef<[u8]> + ?Sized>(h: &Ipv6ExtHeader<&'a T>) -> Result<Self> {
        h.check_len()?;
        Ok(Ipv6ExtHeaderRepr {
            next_header: h.next_header(),
            data: h.data(),
        })
    }

    /// Emitted length: `2 + data` rounded up to 8. `None` if longer than 2048 bytes.
    #[inline]
    pub const fn header_len(&self) -> Option<usize> {
        let l = (self.data.len() + 2).div_ceil(8) * 8;
        if l > 2048 {
            None
        } else {
            Some(l)
        }
    }

    /// Write the header at the start of `buf`, returning its length.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let hl = self.header_len().ok_or(Error::BufferTooSmall)?;
        if buf.len() < hl {
            return Err(Error::BufferTooSmall);
        }
        buf[field::NXT_HDR] = self.next_header.0;
        buf[field::LENGTH] = (hl / 8 - 1) as u8;
        buf[2..2 + self.data.len()].copy_from_slice(self.data);
        buf[2 + self.data.len()..hl].fill(0);
        Ok(hl)
    }
}

// ---------------------------------------------------------------------------------------------
// Fragment header

/// Length of the IPv6 fragment header.
pub const FRAG_HEADER_LEN: usize = 8;

/// A view of an IPv6 fragment header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6FragHeader<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6FragHeader<T> {
    /// Wrap without checking.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        Ipv6FragHeader { buffer }
    }

    /// Wrap, checking that 8 bytes are present.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let h = Self::new_unchecked(buffer);
        h.check_len()?;
        Ok(h)
    }

    /// `Err(ExtHeaderTruncated)` below 8 bytes.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < FRAG_HEADER_LEN {
            Err(Error::ExtHeaderTruncated)
        } else {
            Ok(())
        }
    }

    /// Next header (of the fragmentable part).
    #[inline]
    pub fn next_header(&self) -> IpProtocol {
        IpProtocol(self.buffer.as_ref()[field::NXT_HDR])
    }

    /// Fragment offset in bytes.
    #[inline]
    pub fn frag_offset(&self) -> u16 {
        be16(self.buffer.as_ref(), field::FRAG_OFF_M.start) & !7
    }

    /// More-fragments flag.
    #[inline]
    pub fn more_frags(&self) -> bool {
        be16(self.buffer.as_ref(), field::FRAG_OFF_M.start) & 1 != 0
    }

    /// Identification.
    #[inline]
    pub fn ident(&self) -> u32 {
        be32(self.buffer.as_ref(), field::FRAG_IDENT.start)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6FragHeader<T> {
    /// Set the next header.
    #[inline]
    pub fn set_next_header(&mut self, p: IpProtocol) {
        self.buffer.as_mut()[field::NXT_HDR] = p.0;
    }
    /// Set offset (bytes; low 3 bits dropped) and the M flag; reserved bits are zeroed.
    #[inline]
    pub fn set_frag(&mut self, offset_bytes: u16, more_frags: bool) {
        let b = self.buffer.as_mut();
        b[1] = 0;
        put16(
            b,
            field::FRAG_OFF_M.start,
            (offset_bytes & !7) | more_frags as u16,
        );
    }
    /// Set the identification.
    #[inline]
    pub fn set_ident(&mut self, id: u32) {
        put32(self.buffer.as_mut(), field::FRAG_IDENT.start, id);
    }
}

/// The fields of an IPv6 fragment header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv6FragRepr {
    /// Next header of the fragmentable part.
    pub next_header: IpProtocol,
    /// Offset in bytes (multiple of 8).
    pub frag_offset: u16,
    /// More fragments follow.
    pub more_frags: bool,
    /// Identification.
    pub ident: u32,
}

impl Ipv6FragRepr {
    /// Parse a checked header.
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(h: &Ipv6FragHeader<T>) -> Result<Self> {
        h.check_len()?;
        Ok(Ipv6FragRepr {
            next_header: h.next_header(),
            frag_offset: h.frag_offset(),
            more_frags: h.more_frags(),
            ident: h.ident(),
        })
    }

    /// Whether the packet really is a fragment. An "atomic fragment" (offset 0, M clear; RFC 6946)
    /// is a whole datagram.
    #[inline]
    pub const fn is_fragment(&self) -> bool {
        self.more_frags || self.frag_offset != 0
    }

    /// 8.
    #[inline]
    pub const fn header_len(&self) -> usize {
        FRAG_HEADER_LEN
    }

    /// Write the 8 bytes at the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        if buf.len() < FRAG_HEADER_LEN {
            return Err(Error::BufferTooSmall);
        }
        let mut h = Ipv6FragHeader::new_unchecked(&mut buf[..FRAG_HEADER_LEN]);
        h.set_next_header(self.next_header);
        h.set_frag(self.frag_offset, self.more_frags);
        h.set_ident(self.ident);
        Ok(FRAG_HEADER_LEN)
    }
}

// ---------------------------------------------------------------------------------------------
// Authentication header

/// Minimum AH length (fixed part, no ICV).
pub const AH_MIN_LEN: usize = 12;

/// A view of an IP authentication header (RFC 4302), in IPv4 or IPv6.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuthHeader<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> AuthHeader<T> {
    /// Wrap without checking.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        AuthHeader { buffer }
    }

    /// Wrap, checking length: `ExtHeaderTruncated` or `AhBadLength` (length byte 0).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let h = Self::new_unchecked(buffer);
        h.check_len()?;
        Ok(h)
    }

    /// See [`AuthHeader::new_checked`].
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < AH_MIN_LEN {
            return Err(Error::ExtHeaderTruncated);
        }
        if b[field::LENGTH] == 0 {
            return Err(Error::AhBadLength);
        }
        if b.len() < self.header_len() {
            return Err(Error::ExtHeaderTruncated);
        }
        Ok(())
    }

    /// Next header.
    #[inline]
    pub fn next_header(&self) -> IpProtocol {
        IpProtocol(self.buffer.as_ref()[field::NXT_HDR])
    }

    /// Header length in bytes: `(length byte + 2) × 4`.
    #[inline]
    pub fn header_len(&self) -> usize {
        (self.buffer.as_ref()[field::LENGTH] as usize + 2) * 4
    }

    /// Security parameters index.
    #[inline]
    pub fn spi(&self) -> u32 {
        be32(self.buffer.as_ref(), field::AH_SPI.start)
    }

    /// Sequence number.
    #[inline]
    pub fn sequence(&self) -> u32 {
        be32(self.buffer.as_ref(), field::AH_SEQ.start)
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> AuthHeader<&'a T> {
    /// Integrity check value.
    #[inline]
    pub fn icv(&self) -> &'a [u8] {
        let b = self.buffer.as_ref();
        let end = self.header_len().min(b.len());
        &b[field::AH_ICV.start.min(end)..end]
    }
}

/// The fields of an authentication header (borrowed ICV).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuthHeaderRepr<'a> {
    /// Next header.
    pub next_header: IpProtocol,
    /// Security parameters index.
    pub spi: u32,
    /// Sequence number.
    pub sequence: u32,
    /// Integrity check value; its length must be a multiple of 4 (`emit` fails otherwise).
    pub icv: &'a [u8],
}

impl<'a> AuthHeaderRepr<'a> {
    /// Parse a checked header.
    #[inline]
    pub fn parse<T: AsRef<[u8]> + ?Sized>(h: &AuthHeader<&'a T>) -> Result<Self> {
        h.check_len()?;
        Ok(AuthHeaderRepr {
            next_header: h.next_header(),
            spi: h.spi(),
            sequence: h.sequence(),
            icv: h.icv(),
        })
    }

    /// 12 + ICV length.
    #[inline]
    pub const fn header_len(&self) -> usize {
        AH_MIN_LEN + self.icv.len()
    }

    /// Write the header at the start of `buf`, returning its length.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let hl = self.header_len();
        if buf.len() < hl || !self.icv.len().is_multiple_of(4) || hl / 4 - 2 > 255 {
            return Err(Error::BufferTooSmall);
        }
        buf[field::NXT_HDR] = self.next_header.0;
        buf[field::LENGTH] = (hl / 4 - 2) as u8;
        buf[2] = 0;
        buf[3] = 0;
        put32(buf, field::AH_SPI.start, self.spi);
        put32(buf, field::AH_SEQ.start, self.sequence);
        buf[AH_MIN_LEN..hl].copy_from_slice(self.icv);
        Ok(hl)
    }
}

// ---------------------------------------------------------------------------------------------
// The walk

/// Where the upper-layer header is, as found by [`walk`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ExtChain {
    /// The upper-layer protocol (for a non-first fragment: the fragment header's next header).
    pub protocol: IpProtocol,
    /// Offset of the upper-layer header from the start of the walked bytes.
    pub offset: usize,
    /// The fragment header, if one was walked (including atomic fragments, see
    /// [`Ipv6FragRepr::is_fragment`]). With several: a non-first one if any, else the first that
    /// fragments, else the first atomic one.
    pub fragment: Option<Ipv6FragRepr>,
    /// Number of extension headers walked.
    pub count: u8,
}

/// Walk the extension headers starting with `first` (an IPv6 next-header value, or an IPv4
/// protocol to skip AH in IPv4) over `bytes` (the IP payload). See the module doc for the rules.
#[inline]
pub fn walk(first: IpProtocol, bytes: &[u8]) -> Result<ExtChain> {
    let mut nh = first;
    let mut off = 0usize;
    let mut count = 0usize;
    let mut fragment = None;
    loop {
        match nh {
            IpProtocol::HOPOPT | IpProtocol::IPV6_ROUTE | IpProtocol::IPV6_OPTS => {
                if nh == IpProtocol::HOPOPT && count != 0 {
                    return Err(Error::Ipv6HopByHopNotFirst);
                }
                let h = Ipv6ExtHeader::new_checked(&bytes[off..])?;
                nh = h.next_header();
                off += h.header_len();
            }
            IpProtocol::IPV6_FRAG => {
                let h = Ipv6FragHeader::new_checked(&bytes[off..])?;
                let f = Ipv6FragRepr::parse(&h)?;
                off += FRAG_HEADER_LEN;
                nh = f.next_header;
                // With several fragment headers (pathological), keep the strongest claim:
                // non-first fragment > first fragment > atomic. A later atomic header does not make
                // a fragment whole again, and a non-first one means there is no transport header.
                let rank = |f: &Ipv6FragRepr| {
                    if f.frag_offset != 0 {
                        2
                    } else {
                        f.more_frags as u8
                    }
                };
                if fragment.as_ref().is_none_or(|old| rank(&f) > rank(old)) {
                    fragment = Some(f);
                }
                if f.frag_offset != 0 {
                    count += 1;
                    break;
                }
            }
            IpProtocol::AH => {
                let h = AuthHeader::new_checked(&bytes[off..])?;
                nh = h.next_header();
                off += h.header_len();
            }
            _ => break,
        }
        count += 1;
        if count > MAX_EXT_HEADERS {
            return Err(Error::Ipv6TooManyExtHeaders);
        }
    }
    Ok(ExtChain {
        protocol: nh,
        offset: off,
        fragment,
        count: count as u8,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chain_hbh_dst_frag_tcp() {
        let mut b = [0u8; 64];
        let hbh = Ipv6ExtHeaderRepr {
            next_header: IpProtocol::IPV6_OPTS,
            data: &[5, 2, 0, 0],
        };
        let n1 = hbh.emit(&mut b).unwrap();
        assert_eq!(n1, 8);
        let dst = Ipv6ExtHeaderRepr {
            next_header: IpProtocol::IPV6_FRAG,
            data: &[1, 10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        };
        let n2 = dst.emit(&mut b[n1..]).unwrap();
        assert_eq!(n2, 16);
        let frag = Ipv6FragRepr {
            next_header: IpProtocol::TCP,
            frag_offset: 0,
            more_frags: true,
            ident: 0xdeadbeef,
        };
        frag.emit(&mut b[n1 + n2..]).unwrap();
        let c = walk(IpProtocol::HOPOPT, &b).unwrap();
        assert_eq!(c.protocol, IpProtocol::TCP);
        assert_eq!(c.offset, 32);
        assert_eq!(c.count, 3);
        assert_eq!(c.fragment, Some(frag));
        assert!(frag.is_fragment());

        // Re-parse each header through its view.
        let h = Ipv6ExtHeader::new_checked(&b[8..]).unwrap();
        assert_eq!(Ipv6ExtHeaderRepr::parse(&h).unwrap().data.len(), 14);
        let f = Ipv6FragHeader::new_checked(&b[24..]).unwrap();
        assert_eq!(Ipv6FragRepr::parse(&f).unwrap(), frag);
        assert_eq!(&b[24..32], &[6, 0, 0, 1, 0xde, 0xad, 0xbe, 0xef]);
    }

    #[test]
    fn a_later_atomic_fragment_header_does_not_unfragment() {
        // Found by the etherparse_diff fuzz target: first fragment header M=1, then an atomic one.
        let mut b = [0u8; 16];
        Ipv6FragRepr {
            next_header: IpProtocol::IPV6_FRAG,
            frag_offset: 0,
            more_frags: true,
            ident: 1,
        }
        .emit(&mut b)
        .unwrap();
        Ipv6FragRepr {
            next_header: IpProtocol::ICMP,
            frag_offset: 0,
            more_frags: false,
            ident: 2,
        }
        .emit(&mut b[8..])
        .unwrap();
        let c = walk(IpProtocol::IPV6_FRAG, &b).unwrap();
        assert_eq!(c.fragment.map(|f| (f.ident, f.more_frags)), Some((1, true)));
        assert_eq!((c.protocol, c.offset, c.count), (IpProtocol::ICMP, 16, 2));
    }

    #[test]
    fn non_first_fragment_stops_the_walk() {
        let mut b = [0u8; 16];
        let frag = Ipv6FragRepr {
            next_header: IpProtocol::IPV6_OPTS,
            frag_offset: 1232,
            more_frags: false,
            ident: 7,
        };
        frag.emit(&mut b).unwrap();
        // Behind it: garbage that would be a truncated options header if walked.
        b[8] = 0;
        b[9] = 200;
        let c = walk(IpProtocol::IPV6_FRAG, &b).unwrap();
        assert_eq!(c.protocol, IpProtocol::IPV6_OPTS);
        assert_eq!(c.offset, 8);
        assert_eq!(c.fragment.unwrap().frag_offset, 1232);
    }

    #[test]
    fn errors() {
        // HBH after a destination options header.
        let mut b = [0u8; 16];
        b[0] = 0; // next: HBH
        assert_eq!(
            walk(IpProtocol::IPV6_OPTS, &b),
            Err(Error::Ipv6HopByHopNotFirst)
        );
        // Truncated: announces 16 bytes, 12 present.
        let b = [6u8, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(
            walk(IpProtocol::IPV6_ROUTE, &b),
            Err(Error::ExtHeaderTruncated)
        );
        assert_eq!(
            walk(IpProtocol::IPV6_FRAG, &b[..7]),
            Err(Error::ExtHeaderTruncated)
        );
        // Too many: a chain of 9 destination options headers.
        let mut b = [0u8; 80];
        for i in 0..10 {
            b[i * 8] = 60;
        }
        assert_eq!(
            walk(IpProtocol::IPV6_OPTS, &b),
            Err(Error::Ipv6TooManyExtHeaders)
        );
        // 8 are fine.
        b[7 * 8] = 17;
        let c = walk(IpProtocol::IPV6_OPTS, &b).unwrap();
        assert_eq!((c.protocol, c.offset, c.count), (IpProtocol::UDP, 64, 8));
        // AH with length 0.
        let ah = [6u8, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1];
        assert_eq!(walk(IpProtocol::AH, &ah), Err(Error::AhBadLength));
        // ESP and unknown values end the walk at once.
        assert_eq!(walk(IpProtocol::ESP, &[]).unwrap().offset, 0);
        assert_eq!(
            walk(IpProtocol(253), &[]).unwrap().protocol,
            IpProtocol(253)
        );
    }

    #[test]
    fn auth_header_round_trip() {
        let icv = [0xAAu8; 12];
        let r = AuthHeaderRepr {
            next_header: IpProtocol::UDP,
            spi: 0x100,
            sequence: 42,
            icv: &icv,
        };
        let mut b = [0u8; 24];
        assert_eq!(r.emit(&mut b).unwrap(), 24);
        assert_eq!(b[1], 4);
        let h = AuthHeader::new_checked(&b[..]).unwrap();
        assert_eq!(AuthHeaderRepr::parse(&h).unwrap(), r);
        let c = walk(IpProtocol::AH, &b).unwrap();
        assert_eq!((c.protocol, c.offset), (IpProtocol::UDP, 24));
        let bad = AuthHeaderRepr {
            icv: &icv[..3],
            ..r
        };
        assert_eq!(bad.emit(&mut b), Err(Error::BufferTooSmall));
    }
}
