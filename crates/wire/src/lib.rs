//! flowplane's packet formats: zero-copy views and builders for the headers a Maglev-style load
//! balancer and a CuckooSwitch-style switch meet, checksums, and one fast parse of a whole frame.
//!
//! Layer: **wire** (docs/architecture.md). No I/O, no allocation, no `unsafe`, `no_std`; depends only on
//! `fp-hash` (for the pinned flow-key hashes). It implements what the Maglev paper (NSDI '16) needs
//! from packets: the 5-tuple of §3.1 (footnote 1) and §3.3, GRE encapsulation toward backends
//! (§3.1) with the recursion control field used to redirect fragments at most once (§4.3), and the
//! 3-tuple of non-first fragments (§4.3); plus what live traffic needs (IPIP, VXLAN,
//! L2 direct server return, completing `CHECKSUM_PARTIAL` frames from veth).
//!
//! # Guarantees
//!
//! * **No panic on any input.** Untrusted bytes go through `new_checked` (every view), a
//!   `Repr::parse`, or [`PacketSummary::parse`]. After `new_checked` succeeds no accessor of that
//!   view panics, and variable-length accessors clamp to the buffer, so even setters that rewrite
//!   length fields cannot make them panic. Fuzzed (`fuzz/`) and property-tested over random bytes.
//! * **Errors are values.** One `Copy` enum, [`Error`], names the reason; `Error::COUNT` and
//!   [`Error::index`] make it a counter index, [`Error::name`] a metrics label.
//! * **Round trip.** For every format, a packet that parses, emitted from its `Repr`, parses to the
//!   same `Repr` (property tests; etherparse 0.21 is the independent oracle).
//! * **Pinned keys.** [`FlowKey`] / [`ThreeTuple`] / [`FragmentKey`] have a fixed byte encoding and
//!   a pinned hash, so balancers agree on where a flow goes.
//!
//! # Layout
//!
//! | module | what |
//! |---|---|
//! | [`ethernet`], [`vlan`], [`arp`] | Ethernet II, 802.1Q / QinQ tags, ARP; MAC rewrite for L2 DSR |
//! | [`ipv4`], [`ipv6`], [`ipv6ext`] | IPv4 (options, fragments, header checksum), IPv6, its extension headers and AH |
//! | [`tcp`], [`udp`], [`icmp`] | transports; ICMP error quotes |
//! | [`gre`], [`vxlan`], [`encap`] | tunnels: GRE (RFC 2784/2890 + recursion), VXLAN, IPIP; encapsulate / decapsulate |
//! | [`checksum`], [`offload`] | Internet checksum, pseudo-headers, RFC 1624 updates; L4 checksum completion |
//! | [`summary`], [`flow`] | the one-pass frame parser and the flow keys |
//!
//! # Example: the balancer's path for one frame
//!
//! ```
//! use core::net::Ipv4Addr;
//! use fp_wire::{
//!     encap::{Encap, OuterIp, OuterL2, Tunnel},
//!     ethernet::{EtherType, EthernetRepr, MacAddr},
//!     ip::{IpPair, IpProtocol},
//!     ipv4::Ipv4Repr,
//!     tcp::{TcpFlags, TcpOptions, TcpRepr},
//!     Error, L4Kind, PacketSummary,
//! };
//!
//! // Build a TCP SYN to a VIP, with 64 bytes of headroom in front of the frame.
//! const HEADROOM: usize = 64;
//! let client = Ipv4Addr::new(198, 51, 100, 7);
//! let vip = Ipv4Addr::new(203, 0, 113, 10);
//! let mut buf = [0u8; HEADROOM + 14 + 20 + 20];
//! let frame = &mut buf[HEADROOM..];
//! EthernetRepr { src_addr: MacAddr([2, 0, 0, 0, 0, 1]), dst_addr: MacAddr([2, 0, 0, 0, 0, 2]),
//!                ethertype: EtherType::IPV4 }.emit(frame)?;
//! Ipv4Repr::new(client, vip, IpProtocol::TCP, 20, 64).emit(&mut frame[14..])?;
//! let syn = TcpRepr { src_port: 40000, dst_port: 443, seq_number: 1, ack_number: 0,
//!                     flags: TcpFlags::SYN, window_len: 65535, urgent_at: 0,
//!                     options: TcpOptions::NONE };
//! syn.emit(&mut frame[34..], &IpPair::V4(client, vip))?;
//!
//! // Parse once; errors are counter indices.
//! let mut drops = [0u64; Error::COUNT];
//! let s = match PacketSummary::parse(&buf[HEADROOM..]) {
//!     Ok(s) => s,
//!     Err(e) => { drops[e.index()] += 1; return Ok(()); }
//! };
//! assert_eq!(s.l4, L4Kind::Tcp);
//! assert!(s.tcp_flags.is_syn_only());
//! let key = s.flow_key();                  // 5-tuple for the connection table
//! let _bucket_hash = key.hash(0x5eed);     // pinned hash
//!
//! // GRE-encapsulate toward the chosen backend (Maglev §3.1).
//! let to_backend = Encap {
//!     l2: OuterL2 { src: MacAddr([2, 0, 0, 0, 0, 2]), dst: MacAddr([2, 0, 0, 0, 0, 3]), vlan: None },
//!     ip: OuterIp::V4 { src: Ipv4Addr::new(10, 0, 0, 1), dst: Ipv4Addr::new(10, 0, 1, 5), ttl: 64 },
//!     tunnel: Tunnel::GRE,
//! };
//! let inner = HEADROOM + s.l3_offset as usize..HEADROOM + s.l3_end();
//! let start = to_backend.encapsulate(&mut buf, inner, key.hash(1), 1)?;
//! let out = PacketSummary::parse(&buf[start..])?;
//! assert_eq!(out.protocol, IpProtocol::GRE);
//! assert_eq!(out.l3_len as usize, 20 + 4 + 40);
//! # Ok::<(), Error>(())
//! ```
#![no_std]
#![deny(unsafe_code)]
#![warn(missing_docs)]

#[cfg(test)]
extern crate std;

mod bytes;

pub mod arp;
pub mod checksum;
pub mod encap;
pub mod error;
pub mod ethernet;
pub mod flow;
pub mod gre;
pub mod icmp;
pub mod ip;
pub mod ipv4;
pub mod ipv6;
pub mod ipv6ext;
pub mod offload;
pub mod pmtu;
pub mod second_chance;
pub mod summary;
pub mod tcp;
pub mod udp;
pub mod vlan;
pub mod vxlan;

pub use error::{Error, Result};
pub use flow::{FlowKey, FlowKeyV4, FlowKeyV6, FragmentKey, ThreeTuple};
pub use ip::{IpPair, IpProtocol, IpVersion};
pub use summary::{FragmentInfo, L2Header, L4Kind, PacketSummary, ParseOptions, QuotedSummary};
