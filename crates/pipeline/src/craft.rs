//! Building well-formed frames: TCP and UDP over IPv4 and IPv6, and fragmented UDP datagrams.
//!
//! Used by the traffic generator (`fp-engine`), by tests and by examples. Every frame carries valid
//! checksums. Addresses are given as text for readability at call sites; [`Endpoints`] takes parsed
//! addresses for generators that make millions of frames.

use fp_wire::ethernet::{EtherType, EthernetRepr, MacAddr};
use fp_wire::ip::{IpPair, IpProtocol};
use fp_wire::ipv4::Ipv4Repr;
use fp_wire::ipv6::Ipv6Repr;
use fp_wire::ipv6ext::Ipv6FragRepr;
use fp_wire::tcp::{TcpFlags, TcpOptions, TcpRepr};
use fp_wire::udp::UdpRepr;
use std::net::IpAddr;

/// Source MAC of crafted frames (a client-side router).
pub const CLIENT_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x0c]);
/// Destination MAC of crafted frames (the balancer).
pub const BALANCER_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x01]);

/// Source and destination of a flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Endpoints {
    /// Source address.
    pub src: IpAddr,
    /// Source port.
    pub sport: u16,
    /// Destination address (both addresses must be of one family).
    pub dst: IpAddr,
    /// Destination port.
    pub dport: u16,
}

impl Endpoints {
    /// Parse textual addresses. Panics on bad text (a programming error at the call site).
    pub fn new(src: &str, sport: u16, dst: &str, dport: u16) -> Endpoints {
        Endpoints {
            src: src.parse().expect("source address"),
            sport,
            dst: dst.parse().expect("destination address"),
            dport,
        }
    }

    /// The address pair. Panics if the families differ (a programming error).
    pub fn pair(&self) -> IpPair {
        match (self.src, self.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => IpPair::V4(s, d),
            (IpAddr::V6(s), IpAddr::V6(d)) => IpPair::V6(s, d),
            _ => panic!("craft: source and destination differ in address family"),
        }
    }
}

/// Write Ethernet + IP headers in front of an L4 segment of `l4_len` bytes into `f`; returns the
/// offset of the L4 segment. `f` must hold the whole frame.
fn ip_headers(f: &mut [u8], pair: &IpPair, proto: IpProtocol, l4_len: usize, ident: u16) -> usize {
    let (ethertype, ip_len) = match pair {
        IpPair::V4(..) => (EtherType::IPV4, 20),
        IpPair::V6(..) => (EtherType::IPV6, 40),
    };
    EthernetRepr {
        src_addr: CLIENT_MAC,
        dst_addr: BALANCER_MAC,
        ethertype,
    }
    .emit(f)
    .expect("ethernet header fits");
    match *pair {
        IpPair::V4(s, d) => {
            let mut r = Ipv4Repr::new(s, d, proto, l4_len as u16, 64);
            r.ident = ident;
            r.emit(&mut f[14..]).expect("ipv4 header fits");
        }
        IpPair::V6(s, d) => Ipv6Repr {
            src_addr: s,
            dst_addr: d,
            next_header: proto,
            payload_len: l4_len as u16,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
        }
        .emit(&mut f[14..])
        .expect("ipv6 header fits"),
    }
    14 + ip_len
}

fn ip_overhead(pair: &IpPair) -> usize {
    match pair {
        IpPair::V4(..) => 34,
        IpPair::V6(..) => 54,
    }
}

fn tcp_repr(e: &Endpoints, syn: bool) -> TcpRepr {
    TcpRepr {
        src_port: e.sport,
        dst_port: e.dport,
        seq_number: 1,
        ack_number: if syn { 0 } else { 1 },
        flags: if syn {
            TcpFlags::SYN
        } else {
            TcpFlags::ACK | TcpFlags::PSH
        },
        window_len: 65535,
        urgent_at: 0,
        options: TcpOptions::NONE,
    }
}

/// Write a TCP segment without payload (SYN, or ACK+PSH) into `out`; returns the frame length.
/// `out` needs 74 bytes (IPv6) or 54 (IPv4).
pub fn tcp_into(e: &Endpoints, syn: bool, out: &mut [u8]) -> usize {
    let pair = e.pair();
    let repr = tcp_repr(e, syn);
    let len = ip_overhead(&pair) + repr.header_len();
    let l4 = ip_headers(
        &mut out[..len],
        &pair,
        IpProtocol::TCP,
        repr.header_len(),
        0,
    );
    repr.emit(&mut out[l4..len], &pair)
        .expect("tcp header fits");
    len
}

/// Write a UDP datagram with `payload` bytes (a repeating pattern) into `out`; returns the frame
/// length.
pub fn udp_into(e: &Endpoints, payload: usize, out: &mut [u8]) -> usize {
    let pair = e.pair();
    let len = ip_overhead(&pair) + 8 + payload;
    let l4 = ip_headers(&mut out[..len], &pair, IpProtocol::UDP, 8 + payload, 0);
    for (i, b) in out[l4 + 8..len].iter_mut().enumerate() {
        *b = i as u8;
    }
    UdpRepr {
        src_port: e.sport,
        dst_port: e.dport,
    }
    .emit(&mut out[l4..len], Some(&pair))
    .expect("udp header fits");
    len
}

/// A TCP segment without payload: SYN, or ACK+PSH for an established connection.
pub fn tcp(e: &Endpoints, syn: bool) -> Vec<u8> {
    let mut f = vec![0u8; 128];
    let n = tcp_into(e, syn, &mut f);
    f.truncate(n);
    f
}

/// A UDP datagram with `payload` bytes of payload (a repeating pattern).
pub fn udp(e: &Endpoints, payload: usize) -> Vec<u8> {
    let mut f = vec![0u8; 54 + 8 + payload];
    let n = udp_into(e, payload, &mut f);
    f.truncate(n);
    f
}

/// A UDP datagram whose payload is `payload` (checksums correct).
pub fn udp_with(e: &Endpoints, payload: &[u8]) -> Vec<u8> {
    let mut f = udp(e, payload.len());
    let n = f.len();
    f[n - payload.len()..].copy_from_slice(payload);
    let pair = e.pair();
    let l4 = ip_overhead(&pair);
    UdpRepr {
        src_port: e.sport,
        dst_port: e.dport,
    }
    .emit(&mut f[l4..], Some(&pair))
    .expect("udp header fits");
    f
}

/// A TCP ACK+PSH segment carrying `payload` (IPv4 or IPv6; IP lengths and the IPv4 header
/// checksum are right, the TCP checksum is the one of the segment without payload: fine for
/// anything that does not verify it).
pub fn tcp_with(e: &Endpoints, payload: &[u8]) -> Vec<u8> {
    let mut f = tcp(e, false);
    f.extend_from_slice(payload);
    let pair = e.pair();
    let seg = f.len() - ip_overhead(&pair);
    let l4 = ip_headers(&mut f, &pair, IpProtocol::TCP, seg, 0);
    debug_assert_eq!(l4, ip_overhead(&pair));
    f
}

/// A TCP SYN (or ACK) over IPv4, from textual addresses.
pub fn tcp_v4(src: &str, sport: u16, dst: &str, dport: u16, syn: bool) -> Vec<u8> {
    tcp(&Endpoints::new(src, sport, dst, dport), syn)
}

/// A UDP datagram split into IP fragments carrying at most `frag_payload` bytes of the IP payload
/// each (rounded down to a multiple of 8). IPv4 uses the header's fragment fields, IPv6 a fragment
/// extension header. The first fragment holds the UDP header.
pub fn udp_fragments(
    e: &Endpoints,
    payload: usize,
    frag_payload: usize,
    ident: u32,
) -> Vec<Vec<u8>> {
    let pair = e.pair();
    // The whole UDP datagram, checksum over the complete payload.
    let whole = udp(e, payload);
    let datagram = &whole[ip_overhead(&pair)..];
    let step = (frag_payload / 8 * 8).max(8);
    let mut out = Vec::new();
    let mut off = 0;
    while off < datagram.len() {
        let end = (off + step).min(datagram.len());
        let more = end < datagram.len();
        let chunk = &datagram[off..end];
        let f = match pair {
            IpPair::V4(s, d) => {
                let mut f = vec![0u8; 34 + chunk.len()];
                EthernetRepr {
                    src_addr: CLIENT_MAC,
                    dst_addr: BALANCER_MAC,
                    ethertype: EtherType::IPV4,
                }
                .emit(&mut f)
                .expect("ethernet");
                let mut r = Ipv4Repr::new(s, d, IpProtocol::UDP, chunk.len() as u16, 64);
                r.ident = ident as u16;
                r.dont_frag = false;
                r.more_frags = more;
                r.frag_offset = off as u16;
                r.emit(&mut f[14..]).expect("ipv4");
                f[34..].copy_from_slice(chunk);
                f
            }
            IpPair::V6(s, d) => {
                let mut f = vec![0u8; 62 + chunk.len()];
                EthernetRepr {
                    src_addr: CLIENT_MAC,
                    dst_addr: BALANCER_MAC,
                    ethertype: EtherType::IPV6,
                }
                .emit(&mut f)
                .expect("ethernet");
                Ipv6Repr {
                    src_addr: s,
                    dst_addr: d,
                    next_header: IpProtocol::IPV6_FRAG,
                    payload_len: (8 + chunk.len()) as u16,
                    hop_limit: 64,
                    traffic_class: 0,
                    flow_label: 0,
                }
                .emit(&mut f[14..])
                .expect("ipv6");
                Ipv6FragRepr {
                    next_header: IpProtocol::UDP,
                    frag_offset: off as u16,
                    more_frags: more,
                    ident,
                }
                .emit(&mut f[54..])
                .expect("fragment header");
                f[62..].copy_from_slice(chunk);
                f
            }
        };
        out.push(f);
        off = end;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use fp_wire::{L4Kind, PacketSummary};

    #[test]
    fn crafted_frames_parse() {
        let s = PacketSummary::parse(&tcp_v4("1.2.3.4", 1000, "5.6.7.8", 80, true)).unwrap();
        assert!(s.tcp_flags.is_syn_only());
        assert_eq!((s.src_port, s.dst_port), (1000, 80));
        let e6 = Endpoints::new("2001:db8::1", 5, "2001:db8::2", 53);
        let s = PacketSummary::parse(&udp(&e6, 100)).unwrap();
        assert_eq!(s.l4, L4Kind::Udp);
        assert_eq!(s.l4_len, 108);
        assert!(fp_wire::offload::verify_l4_checksum(&udp(&e6, 100), &s).unwrap());
    }

    #[test]
    fn fragments_reassemble_by_offset() {
        for e in [
            Endpoints::new("1.2.3.4", 7, "5.6.7.8", 9),
            Endpoints::new("2001:db8::1", 7, "2001:db8::2", 9),
        ] {
            let frags = udp_fragments(&e, 3000, 1000, 77);
            assert_eq!(frags.len(), 4);
            let mut total = 0;
            for (i, f) in frags.iter().enumerate() {
                let s = PacketSummary::parse(f).unwrap();
                let fi = s.fragment.expect("is a fragment");
                assert_eq!(fi.more, i + 1 < frags.len());
                assert_eq!(fi.offset as usize, total);
                assert_eq!(s.is_non_first_fragment(), i > 0);
                assert_eq!(fi.ident, 77);
                total += s.l3_end() - s.l4_offset as usize;
            }
            assert_eq!(total, 8 + 3000);
        }
    }
}
