//! Transport checksums of a parsed frame: verify them, and complete the ones the kernel left
//! partial.
//!
//! Frames that a Linux veth (or any device with TX checksum offload) hands to AF_PACKET / AF_XDP
//! are often `CHECKSUM_PARTIAL`: the TCP/UDP checksum field holds only the folded pseudo-header sum,
//! and the NIC was supposed to finish it. A balancer that encapsulates such a frame would deliver a
//! bad checksum to the backend, so it must finish the job: [`fill_l4_checksum`] recomputes the
//! whole L4 checksum from the summary (it does not rely on the partial value, so it also repairs
//! any wrong checksum). [`looks_partial`] tells whether the field holds exactly what Linux leaves in
//! a partial packet (a heuristic: a correct checksum collides with probability 2⁻¹⁶), for counting.
//!
//! Fragments are refused (`Fragmented`): the checksum covers the whole datagram. A transport the
//! parser did not read, or one without a checksum of this kind, gives `NoL4Checksum`.

use crate::error::{Error, Result};
use crate::icmp::{Icmpv4Packet, Icmpv6Packet};
use crate::ip::IpProtocol;
use crate::summary::{L4Kind, PacketSummary};
use crate::tcp::TcpPacket;
use crate::udp::UdpPacket;

#[inline]
fn l4_range(s: &PacketSummary, len: usize) -> Result<core::ops::Range<usize>> {
    if s.is_fragment() {
        return Err(Error::Fragmented);
    }
    let start = s.l4_offset as usize;
    let end = start + s.l4_len as usize;
    if end > len {
        return Err(Error::BufferTooSmall);
    }
    Ok(start..end)
}

/// Compute and store the full transport checksum (TCP, UDP, ICMP, ICMPv6) of the frame `s` was
/// parsed from. This is how the balancer completes a `CHECKSUM_PARTIAL` frame from veth.
#[doc(alias = "complete_partial_checksum")]
#[inline]
pub fn fill_l4_checksum(frame: &mut [u8], s: &PacketSummary) -> Result<()> {
    let r = l4_range(s, frame.len())?;
    let seg = &mut frame[r];
    match s.l4 {
        L4Kind::Tcp => TcpPacket::new_checked(seg)?.fill_checksum(&s.addrs),
        L4Kind::Udp => UdpPacket::new_checked(seg)?.fill_checksum(&s.addrs),
        L4Kind::Icmpv4 => Icmpv4Packet::new_checked(seg)?.fill_checksum(),
        L4Kind::Icmpv6 => Icmpv6Packet::new_checked(seg)?.fill_checksum(&s.addrs),
        L4Kind::None => return Err(Error::NoL4Checksum),
    }
    Ok(())
}

/// Whether the transport checksum of the frame `s` was parsed from verifies (a zero UDP checksum
/// over IPv4 means "none" and verifies).
#[inline]
pub fn verify_l4_checksum(frame: &[u8], s: &PacketSummary) -> Result<bool> {
    let r = l4_range(s, frame.len())?;
    let seg = &frame[r];
    Ok(match s.l4 {
        L4Kind::Tcp => TcpPacket::new_checked(seg)?.verify_checksum(&s.addrs),
        L4Kind::Udp => UdpPacket::new_checked(seg)?.verify_checksum(&s.addrs),
        L4Kind::Icmpv4 => Icmpv4Packet::new_checked(seg)?.verify_checksum(),
        L4Kind::Icmpv6 => Icmpv6Packet::new_checked(seg)?.verify_checksum(&s.addrs),
        L4Kind::None => return Err(Error::NoL4Checksum),
    })
}

/// Whether a TCP/UDP checksum field holds exactly the folded pseudo-header sum, as Linux leaves it
/// in a `CHECKSUM_PARTIAL` packet. ICMP has no pseudo-header: `NoL4Checksum`.
#[inline]
pub fn looks_partial(frame: &[u8], s: &PacketSummary) -> Result<bool> {
    let r = l4_range(s, frame.len())?;
    let (proto, field) = match s.l4 {
        L4Kind::Tcp => (IpProtocol::TCP, 16),
        L4Kind::Udp => (IpProtocol::UDP, 6),
        _ => return Err(Error::NoL4Checksum),
    };
    let seg = &frame[r];
    let Some(v) = seg.get(field..field + 2) else {
        return Err(Error::BufferTooSmall);
    };
    let ph = s.addrs.pseudo_header_sum(proto, seg.len() as u32);
    Ok(u16::from_be_bytes([v[0], v[1]]) == ph)
}

/// Write into the checksum field what Linux leaves in a `CHECKSUM_PARTIAL` TCP/UDP packet: the
/// folded pseudo-header sum. For tests and the traffic generator (to imitate veth traffic).
pub fn make_partial(frame: &mut [u8], s: &PacketSummary) -> Result<()> {
    let r = l4_range(s, frame.len())?;
    let (proto, field) = match s.l4 {
        L4Kind::Tcp => (IpProtocol::TCP, 16),
        L4Kind::Udp => (IpProtocol::UDP, 6),
        _ => return Err(Error::NoL4Checksum),
    };
    let seg = &mut frame[r];
    if seg.len() < field + 2 {
        return Err(Error::BufferTooSmall);
    }
    let ph = s.addrs.pseudo_header_sum(proto, seg.len() as u32);
    seg[field..field + 2].copy_from_slice(&ph.to_be_bytes());
    Ok(())
}
