//! The backend's tc ingress program: strips the GRE or IP-in-IP header a flowplane balancer put
//! in front of a packet, so that the kernel delivers the inner packet (addressed to a VIP on the
//! backend's loopback) as if it had arrived unencapsulated. This kernel has no GRE or IPIP
//! devices; a `cls_bpf` direct-action filter with `bpf_skb_adjust_room` does the same job with no
//! device at all.
//!
//! ```text
//!  pkt_type != PACKET_HOST                          → OK untouched
//!  Ethernet (no in-band tag: the stack has already moved a VLAN tag to skb->vlan_tci)
//!  outer IPv4: version 4, IHL 5, not a fragment     → outer length 20, protocol at byte 9
//!  outer IPv6: fixed header (no extension headers)  → outer length 40, next header at byte 6
//!  protocol 4  (IPv4 in IP)       → strip outer,        inner IPv4
//!  protocol 41 (IPv6 in IP)       → strip outer,        inner IPv6
//!  protocol 47 (GRE), version 0, no checksum/routing bits, any recursion-control value
//!    (flowplane marks redirected fragments with recursion 1, see fp-wire's gre module),
//!    optional key and sequence number; protocol type 0x0800 or 0x86DD
//!                                 → strip outer + 4/8/12, inner per protocol type
//!  anything else                                    → OK untouched
//!  bpf_skb_adjust_room(skb, -strip, BPF_ADJ_ROOM_MAC, FIXED_GSO | DECAP_L3_IPV4/6)
//!    (removes the bytes right after the Ethernet header; the DECAP_L3 flag sets skb->protocol
//!    to the inner family), then the Ethernet type field is rewritten to the inner family.
//! ```
//!
//! **Second chance.** An outer IPv4 header whose options are flowplane's second-chance option
//! (IHL 7 to 10), or an outer IPv6 header followed by a Destination Options header holding it
//! (the layouts in fp-wire's `second_chance` module), names backends the flow may live on. Before stripping, the program looks for a socket of the inner flow; a SYN, a flow with a
//! socket, or a used-up option is stripped as above; anything else is sent on to the next named
//! backend (the `second_chance` function's diagram), counted as [`counter::SECOND_CHANCE_FORWARDED`].
//!
//! A GRE checksum (C bit) is not verified here, so such packets are left alone rather than
//! decapsulated unchecked. Fragmented tunnel packets are also left alone (they would have to be
//! reassembled first; the kernel then drops them as an unknown protocol): flowplane's balancer
//! copies the inner DF bit to the outer header, so its TCP tunnel packets are not fragmented.
//!
//! If the headers are not in the skb's linear area (possible with some NIC drivers), the program
//! calls `bpf_skb_pull_data` once and parses again.
//!
//! The filter is installed with rtnetlink ([`crate::netlink`]) on the `clsact` qdisc of the
//! interface at priority [`TC_PRIO`], handle [`TC_HANDLE`]; it holds the program, so it stays
//! after the process that installed it exits, until [`detach`].

use crate::asm::{Asm, AsmError, Cond, Insn, Size, R0, R1, R10, R2, R3, R4, R5, R6, R7, R8, R9};
use crate::helper::{self, adjust_room};
use crate::map::{Map, MapType};
use crate::netlink::{Netlink, TcFilter};
use crate::prog::{ProgType, Program};
use crate::{sys, Error, Result};

/// The second-chance option's layout (fp-wire's `second_chance` module writes it; a test holds
/// the two together).
mod sc {
    /// IPv4 option type.
    pub const IPV4_OPTION: u8 = 0x9E;
    /// Layout version.
    pub const VERSION: u8 = 1;
    /// Most backends one option names.
    pub const MAX_NAMED: i32 = 4;
    /// IPv6 destination option type.
    pub const IPV6_OPTION: u8 = 0x1E;
}

/// Which tunnels to strip.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DecapConfig {
    /// GRE (IP protocol 47).
    pub gre: bool,
    /// IPv4-in-IP (protocol 4) and IPv6-in-IP (protocol 41).
    pub ipip: bool,
}

impl DecapConfig {
    /// Both GRE and IP-in-IP.
    pub const ALL: DecapConfig = DecapConfig {
        gre: true,
        ipip: true,
    };
}

/// Outcome counters, indices into the program's per-CPU stats map.
pub mod counter {
    /// Not a tunnel packet this program handles (left untouched).
    pub const PASS: u32 = 0;
    /// IP-in-IP packets decapsulated.
    pub const IPIP: u32 = 1;
    /// GRE packets decapsulated.
    pub const GRE: u32 = 2;
    /// GRE with unsupported flags (checksum, routing) or protocol type (left untouched).
    pub const UNSUPPORTED: u32 = 3;
    /// `bpf_skb_adjust_room` failed (left as it was).
    pub const ERROR: u32 = 4;
    /// Packets carrying a second-chance option delivered here: a SYN, a flow with a socket on
    /// this host, or a packet the program could not look up (decapsulated like any other).
    pub const SECOND_CHANCE_LOCAL: u32 = 5;
    /// Packets carrying a second-chance option forwarded to the backend the option names, since
    /// this host has no socket for their flow.
    pub const SECOND_CHANCE_FORWARDED: u32 = 6;
    /// Number of counters.
    pub const COUNT: u32 = 7;
}

/// The program's counters, summed over CPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DecapStats {
    /// See [`counter::PASS`].
    pub pass: u64,
    /// See [`counter::IPIP`].
    pub ipip: u64,
    /// See [`counter::GRE`].
    pub gre: u64,
    /// See [`counter::UNSUPPORTED`].
    pub unsupported: u64,
    /// See [`counter::ERROR`].
    pub error: u64,
    /// See [`counter::SECOND_CHANCE_LOCAL`].
    pub second_chance_local: u64,
    /// See [`counter::SECOND_CHANCE_FORWARDED`].
    pub second_chance_forwarded: u64,
}

/// Program name as the kernel shows it.
pub const PROG_NAME: &str = "fp_tc_decap";
/// Name of its stats map.
pub const STATS_MAP_NAME: &str = "fp_decap_stats";
/// Priority of the tc filter.
pub const TC_PRIO: u16 = 0xf10;
/// Handle of the tc filter.
pub const TC_HANDLE: u32 = 0xf10;

/// What the program pulls into the linear area when the headers are not there: Ethernet 14 +
/// IPv6 40 + the longest second-chance options header 72 + the GRE base header 4.
const PULL_LEN: i32 = 14 + 40 + 72 + 4;

const ETH_IPV4_LE: i32 = 0x0008;
const ETH_IPV6_LE: i32 = 0xDD86;
const ETH_P_IP: i32 = 0x0800;
const ETH_P_IPV6: i32 = 0x86DD;

/// Assemble the program with the given stats map (per-CPU array of [`counter::COUNT`] u64).
///
/// Registers: r6 = skb; during parsing r7 = data, r8 = data_end, r9 = "already pulled";
/// r4 = tunnel protocol, r5 = outer IP header length; for the strip r7 = bytes to strip,
/// r8 = inner ethertype, r9 = counter index.
pub fn program(cfg: DecapConfig, stats: i32) -> std::result::Result<Vec<Insn>, AsmError> {
    let mut a = Asm::new();
    let parse = a.label();
    let need_pull = a.label();
    let pass = a.label();
    let v4 = a.label();
    let v6 = a.label();
    let tunnel = a.label();
    let ipip4 = a.label();
    let ipip6 = a.label();
    let gre = a.label();
    let strip = a.label();
    let have_flags = a.label();
    let unsupported = a.label();
    let error = a.label();
    let out = a.label();
    let ret = a.label();
    let pull = a.label();
    let v4_frag = a.label();
    let v4_sc = a.label();
    let sc = a.label();
    let do_strip = a.label();
    let sc_udp = a.label();
    let sc_local = a.label();
    let sc_forward = a.label();
    let v6_sc = a.label();
    let tunnels = cfg.gre || cfg.ipip;

    a.mov64(R6, R1);
    a.mov64(R9, 0);
    a.store_imm(Size::W, R10, stack::VERDICT, helper::tc::OK);
    a.store_imm(Size::W, R10, stack::MARKED, 0);
    a.store_imm(Size::W, R10, stack::OUTER_V6, 0);
    // The names are read on paths the verifier cannot tell apart from the others: initialized.
    a.store_imm(Size::W, R10, stack::NAMED, 0);
    for w in 0..4 {
        a.store_imm(Size::W, R10, stack::NAMED6 + 4 * w, 0);
    }
    a.load(Size::W, R2, R6, 4); // skb->pkt_type
    a.jmp(Cond::Ne, R2, 0, pass); // PACKET_HOST only

    a.bind(parse);
    a.load(Size::W, R7, R6, 76); // skb->data
    a.load(Size::W, R8, R6, 80); // skb->data_end
    a.mov64(R2, R7);
    a.add64(R2, 14);
    a.jmp(Cond::Gt, R2, R8, need_pull);
    a.load(Size::H, R3, R7, 12);
    a.jmp(Cond::Eq, R3, ETH_IPV4_LE, v4);
    a.jmp(Cond::Eq, R3, ETH_IPV6_LE, v6);
    a.ja(pass);

    a.bind(v4);
    a.mov64(R2, R7);
    a.add64(R2, 34);
    a.jmp(Cond::Gt, R2, R8, need_pull);
    a.load(Size::B, R3, R7, 14);
    if tunnels {
        a.jmp(Cond::Gt, R3, 0x46, v4_sc); // IHL 7 to 10: a second-chance option?
    }
    a.jmp(Cond::Ne, R3, 0x45, pass); // version 4, IHL 5
    a.mov64(R5, 20);
    a.bind(v4_frag);
    a.load(Size::H, R3, R7, 20);
    a.and64(R3, 0xFF3F); // MF and fragment offset (0x3FFF as a little-endian load sees it)
    a.jmp(Cond::Ne, R3, 0, pass);
    a.load(Size::B, R4, R7, 23);
    a.ja(tunnel);

    if tunnels {
        // The second-chance option right after the fixed header: remember the next backend it
        // names; a used-up option is decapsulated like any tunnel packet.
        a.bind(v4_sc);
        a.store_imm(Size::W, R10, stack::MARKED, 0);
        a.jmp(Cond::Gt, R3, 0x45 + 1 + sc::MAX_NAMED, pass);
        a.and64(R3, 0x0F);
        a.lsh64(R3, 2);
        a.mov64(R5, R3); // outer header length: 20 + 4 + 4n
        a.mov64(R2, R7);
        a.add64(R2, 14 + 20 + 4 + 4 * sc::MAX_NAMED);
        a.jmp(Cond::Gt, R2, R8, need_pull);
        a.load(Size::B, R3, R7, 34);
        a.jmp(Cond::Ne, R3, sc::IPV4_OPTION as i32, pass);
        a.load(Size::B, R3, R7, 35);
        a.mov64(R4, R5);
        a.sub64(R4, 20);
        a.jmp(Cond::Ne, R3, R4, pass); // the option fills the header's options
        a.load(Size::B, R3, R7, 36);
        a.jmp(Cond::Ne, R3, sc::VERSION as i32, pass);
        a.load(Size::B, R3, R7, 37); // next
        a.mov64(R4, R5);
        a.sub64(R4, 24);
        a.rsh64(R4, 2); // names
        a.jmp(Cond::Ge, R3, R4, v4_frag); // used up
        a.jmp(Cond::Ge, R3, sc::MAX_NAMED, pass);
        a.lsh64(R3, 2);
        a.mov64(R2, R7);
        a.add64(R2, R3);
        a.mov64(R4, R2);
        a.add64(R4, 42);
        a.jmp(Cond::Gt, R4, R8, pass); // (inside the bytes checked above; for the verifier)
        a.load(Size::W, R3, R2, 38);
        a.store(Size::W, R10, stack::NAMED, R3);
        a.store_imm(Size::W, R10, stack::MARKED, 1);
        a.ja(v4_frag);
    }

    a.bind(v6);
    a.mov64(R2, R7);
    a.add64(R2, 54);
    a.jmp(Cond::Gt, R2, R8, need_pull);
    a.load(Size::B, R4, R7, 20);
    a.mov64(R5, 40);
    if tunnels {
        a.jmp(Cond::Eq, R4, 60, v6_sc); // a Destination Options header: second chance?
    }

    if tunnels {
        a.ja(tunnel);
        // The second-chance destination option: remember the next backend it names; a used-up
        // option is decapsulated with its header like any tunnel packet.
        a.bind(v6_sc);
        a.store_imm(Size::W, R10, stack::MARKED, 0);
        a.mov64(R2, R7);
        a.add64(R2, 14 + 40 + 8);
        a.jmp(Cond::Gt, R2, R8, need_pull);
        a.load(Size::B, R3, R7, 56);
        a.jmp(Cond::Ne, R3, sc::IPV6_OPTION as i32, pass);
        a.load(Size::B, R3, R7, 55); // header length in 8-byte units beyond the first: 2n
        a.jmp(Cond::Eq, R3, 0, pass);
        a.jmp(Cond::Gt, R3, 2 * sc::MAX_NAMED, pass);
        a.mov64(R4, R3);
        a.and64(R4, 1);
        a.jmp(Cond::Ne, R4, 0, pass);
        a.mov64(R5, R3);
        a.add64(R5, 1);
        a.lsh64(R5, 3);
        a.add64(R5, 40); // outer header length: 40 + 8 + 16n
        a.load(Size::B, R4, R7, 57); // option length: 2 + 16n
        a.lsh64(R3, 3);
        a.add64(R3, 2);
        a.jmp(Cond::Ne, R4, R3, pass);
        a.load(Size::B, R3, R7, 58);
        a.jmp(Cond::Ne, R3, sc::VERSION as i32, pass);
        a.load(Size::B, R4, R7, 54); // the tunnel protocol
        a.load(Size::B, R3, R7, 59); // next
        a.mov64(R2, R5);
        a.sub64(R2, 48);
        a.rsh64(R2, 4); // names
        a.jmp(Cond::Ge, R3, R2, tunnel); // used up
        a.jmp(Cond::Ge, R3, sc::MAX_NAMED, pass);
        a.lsh64(R3, 4);
        a.mov64(R2, R7);
        a.add64(R2, R3);
        a.mov64(R3, R2);
        a.add64(R3, 76);
        a.jmp(Cond::Gt, R3, R8, pass);
        for w in 0..4 {
            a.load(Size::W, R3, R2, 60 + 4 * w);
            a.store(Size::W, R10, stack::NAMED6 + 4 * w, R3);
        }
        a.store_imm(Size::W, R10, stack::MARKED, 1);
        a.store_imm(Size::W, R10, stack::OUTER_V6, 1);
    }

    a.bind(tunnel);
    if cfg.ipip {
        a.jmp(Cond::Eq, R4, 4, ipip4);
        a.jmp(Cond::Eq, R4, 41, ipip6);
    }
    if cfg.gre {
        a.jmp(Cond::Eq, R4, 47, gre);
    }
    a.ja(pass);

    if cfg.ipip {
        a.bind(ipip4);
        a.mov64(R7, R5);
        a.mov64(R8, ETH_P_IP);
        a.mov64(R9, counter::IPIP as i32);
        a.ja(strip);

        a.bind(ipip6);
        a.mov64(R7, R5);
        a.mov64(R8, ETH_P_IPV6);
        a.mov64(R9, counter::IPIP as i32);
        a.ja(strip);
    }
    if cfg.gre {
        a.bind(gre);
        a.mov64(R2, R7);
        a.add64(R2, 14);
        a.add64(R2, R5); // r2 = GRE header
        a.mov64(R3, R2);
        a.add64(R3, 4);
        a.jmp(Cond::Gt, R3, R8, need_pull);
        a.load(Size::H, R3, R2, 0);
        a.to_be(R3, 16); // flags and version, host order
        a.mov64(R4, R3);
        a.and64(R4, 0xC8FF); // C, R, s, flags, version must be 0 (K, S, recursion allowed)
        a.jmp(Cond::Ne, R4, 0, unsupported);
        a.mov64(R0, 4);
        a.mov64(R1, R3);
        a.and64(R1, 0x2000); // K: 4-byte key
        a.rsh64(R1, 11);
        a.add64(R0, R1);
        a.mov64(R1, R3);
        a.and64(R1, 0x1000); // S: 4-byte sequence number
        a.rsh64(R1, 10);
        a.add64(R0, R1);
        a.load(Size::H, R4, R2, 2);
        a.to_be(R4, 16); // protocol type
        a.mov64(R7, R5);
        a.add64(R7, R0);
        a.mov64(R9, counter::GRE as i32);
        a.mov64(R8, ETH_P_IP);
        a.jmp(Cond::Eq, R4, ETH_P_IP, strip);
        a.mov64(R8, ETH_P_IPV6);
        a.jmp(Cond::Eq, R4, ETH_P_IPV6, strip);
        a.ja(unsupported);
    }
    if tunnels {
        a.bind(strip);
        a.load(Size::W, R1, R10, stack::MARKED);
        a.jmp(Cond::Eq, R1, 1, sc);
        a.bind(do_strip);
        a.mov64(R4, adjust_room::F_FIXED_GSO | adjust_room::F_DECAP_L3_IPV4);
        a.jmp(Cond::Eq, R8, ETH_P_IP, have_flags);
        a.mov64(R4, adjust_room::F_FIXED_GSO | adjust_room::F_DECAP_L3_IPV6);
        a.bind(have_flags);
        a.mov64(R1, R6);
        a.mov64(R2, 0);
        a.sub64(R2, R7);
        a.mov64(R3, adjust_room::MODE_MAC);
        a.call(helper::SKB_ADJUST_ROOM);
        a.jmp(Cond::Ne, R0, 0, error);
        // The Ethernet header moved in front of the inner packet: give it the inner ethertype.
        a.load(Size::W, R2, R6, 76);
        a.load(Size::W, R3, R6, 80);
        a.mov64(R4, R2);
        a.add64(R4, 14);
        a.jmp(Cond::Gt, R4, R3, out);
        a.mov64(R4, R8);
        a.to_be(R4, 16);
        a.store(Size::H, R2, 12, R4);
        a.ja(out);

        second_chance(
            &mut a,
            [sc, sc_udp, sc_local, sc_forward, do_strip, error, out],
        );
    }
    a.bind(need_pull);
    a.jmp(Cond::Ne, R9, 0, pass);
    a.mov64(R9, 1);
    a.load(Size::W, R2, R6, 0); // skb->len
    a.jmp(Cond::Le, R2, PULL_LEN, pull);
    a.mov64(R2, PULL_LEN);
    a.bind(pull);
    a.mov64(R1, R6);
    a.call(helper::SKB_PULL_DATA);
    a.jmp(Cond::Ne, R0, 0, pass);
    a.ja(parse);

    // Blocks are emitted only when reachable: the verifier rejects unreachable instructions.
    if cfg.gre {
        a.bind(unsupported);
        a.mov64(R9, counter::UNSUPPORTED as i32);
        a.ja(out);
    }
    if tunnels {
        a.bind(error);
        a.mov64(R9, counter::ERROR as i32);
        a.ja(out);
    }
    a.bind(pass);
    a.mov64(R9, counter::PASS as i32);

    a.bind(out);
    a.store(Size::W, R10, stack::COUNTER, R9);
    a.ld_map_fd(R1, stats);
    a.mov64(R2, R10);
    a.add64(R2, stack::COUNTER as i32);
    a.call(helper::MAP_LOOKUP_ELEM);
    a.jmp(Cond::Eq, R0, 0, ret);
    a.load(Size::DW, R1, R0, 0);
    a.add64(R1, 1);
    a.store(Size::DW, R0, 0, R1);
    a.bind(ret);
    a.load(Size::W, R0, R10, stack::VERDICT);
    a.exit();
    a.finish()
}

/// Stack slots (offsets from r10).
mod stack {
    /// The counter index for the stats map.
    pub const COUNTER: i16 = -4;
    /// The program's verdict (`TC_ACT_OK` unless the packet was redirected).
    pub const VERDICT: i16 = -8;
    /// The IPv4 address a second-chance option names next.
    pub const NAMED: i16 = -12;
    /// 1 when the outer header carries a second-chance option.
    pub const MARKED: i16 = -16;
    /// The strip length and inner ethertype, kept across the socket lookup.
    pub const STRIP: i16 = -24;
    pub const ETHERTYPE: i16 = -32;
    /// 1 when the outer header is IPv6.
    pub const OUTER_V6: i16 = -36;
    /// The IPv6 address a second-chance option names next (16 bytes).
    pub const NAMED6: i16 = -56;
    /// The socket-lookup tuple, `struct bpf_sock_tuple`: IPv4 source, destination, ports (12
    /// bytes) or IPv6 ones (36 bytes).
    pub const TUPLE: i16 = -96;
}

/// The second-chance decision for a packet whose outer header names other backends, entered
/// with r7 = bytes to strip and r8 = inner ethertype (see [`fp_wire::second_chance`]):
///
/// ```text
///  inner IPv4 with options, a fragment, inner IPv6 with an extension header, not TCP/UDP
///                                                       → local
///  TCP SYN                                              → local (a new connection is ours)
///  TCP: bpf_skc_lookup_tcp on the inner tuple finds an established, request or time-wait
///       socket (anything but a listener)                → local
///  UDP: bpf_sk_lookup_udp finds a socket                → local
///  otherwise → forward: the outer destination rewritten to the option's next backend, the
///       option's `next` advanced (an IPv4 header's checksum updated with bpf_l3_csum_replace),
///       then bpf_redirect_neigh out of the interface it came in on (the route and the
///       neighbour table give the next hop)
///  local → stripped like any tunnel packet
/// ```
///
/// The forwarded packet keeps the balancer's outer source address and TTL / hop limit. The next
/// backend does the same with the rest of the list; once `next` reaches the end, the option is
/// used up and the packet is decapsulated like any other (delivered, or answered with a reset),
/// so a packet is forwarded at most as many times as the option names backends.
fn second_chance(a: &mut Asm, labels: [crate::asm::Label; 7]) {
    let [sc, sc_udp, sc_local, sc_forward, do_strip, error, out] = labels;
    let inner6 = a.label();
    let have_tuple = a.label();
    let tcp6 = a.label();
    let lookup_tcp = a.label();
    let call_udp = a.label();
    let fwd6 = a.label();
    let redirect = a.label();
    a.bind(sc);
    a.store(Size::DW, R10, stack::STRIP, R7);
    a.store(Size::DW, R10, stack::ETHERTYPE, R8);
    a.load(Size::W, R2, R6, 76); // skb->data
    a.load(Size::W, R3, R6, 80); // skb->data_end
    a.mov64(R1, R2);
    a.add64(R1, 14);
    a.add64(R1, R7); // r1 = inner IP header
    a.jmp(Cond::Eq, R8, ETH_P_IPV6, inner6);
    a.mov64(R4, R1);
    a.add64(R4, 34); // IPv4 20 + TCP up to its flags byte (UDP needs 8)
    a.jmp(Cond::Gt, R4, R3, sc_local);
    a.load(Size::B, R4, R1, 0);
    a.jmp(Cond::Ne, R4, 0x45, sc_local);
    a.load(Size::H, R4, R1, 6);
    a.and64(R4, 0xFF3F);
    a.jmp(Cond::Ne, R4, 0, sc_local);
    a.load(Size::B, R5, R1, 9);
    for (from, to) in [(12, 0), (16, 4), (20, 8)] {
        a.load(Size::W, R4, R1, from);
        a.store(Size::W, R10, stack::TUPLE + to, R4);
    }
    a.load(Size::B, R4, R1, 33); // TCP flags
    a.ja(have_tuple);

    a.bind(inner6);
    a.mov64(R4, R1);
    a.add64(R4, 54); // IPv6 40 + TCP up to its flags byte
    a.jmp(Cond::Gt, R4, R3, sc_local);
    a.load(Size::B, R5, R1, 6);
    for w in 0..9 {
        a.load(Size::W, R4, R1, 8 + 4 * w);
        a.store(Size::W, R10, stack::TUPLE + 4 * w, R4);
    }
    a.load(Size::B, R4, R1, 53); // TCP flags

    a.bind(have_tuple);
    a.jmp(Cond::Eq, R5, 17, sc_udp);
    a.jmp(Cond::Ne, R5, 6, sc_local);
    a.and64(R4, 0x02); // SYN
    a.jmp(Cond::Ne, R4, 0, sc_local);
    a.load(Size::DW, R1, R10, stack::ETHERTYPE);
    a.jmp(Cond::Eq, R1, ETH_P_IPV6, tcp6);
    lookup_args(a, 12);
    a.ja(lookup_tcp);
    a.bind(tcp6);
    lookup_args(a, 36);
    a.bind(lookup_tcp);
    a.call(helper::SKC_LOOKUP_TCP);
    a.jmp(Cond::Eq, R0, 0, sc_forward);
    a.load(Size::W, R7, R0, 72); // bpf_sock.state
    a.mov64(R1, R0);
    a.call(helper::SK_RELEASE);
    a.jmp(Cond::Eq, R7, 10, sc_forward); // TCP_LISTEN: no connection here
    a.ja(sc_local);

    a.bind(sc_udp);
    let udp6 = a.label();
    a.load(Size::DW, R1, R10, stack::ETHERTYPE);
    a.jmp(Cond::Eq, R1, ETH_P_IPV6, udp6);
    lookup_args(a, 12);
    a.ja(call_udp);
    a.bind(udp6);
    lookup_args(a, 36);
    a.bind(call_udp);
    a.call(helper::SK_LOOKUP_UDP);
    a.jmp(Cond::Eq, R0, 0, sc_forward);
    a.mov64(R1, R0);
    a.call(helper::SK_RELEASE);

    a.bind(sc_local);
    a.load(Size::DW, R7, R10, stack::STRIP);
    a.load(Size::DW, R8, R10, stack::ETHERTYPE);
    a.mov64(R9, counter::SECOND_CHANCE_LOCAL as i32);
    a.ja(do_strip);

    a.bind(sc_forward);
    a.load(Size::W, R1, R10, stack::OUTER_V6);
    a.jmp(Cond::Eq, R1, 1, fwd6);
    // IPv4: the checksum first (the helper may move the packet's data: pointers are read again
    // after it), for the new destination and the advanced `next`, then the fields themselves.
    packet_bytes(a, 38, error);
    a.load(Size::W, R3, R2, 30); // old destination
    a.load(Size::W, R4, R10, stack::NAMED);
    a.mov64(R1, R6);
    a.mov64(R2, 24); // the outer header checksum
    a.mov64(R5, 4);
    a.call(helper::L3_CSUM_REPLACE);
    a.jmp(Cond::Ne, R0, 0, error);
    packet_bytes(a, 38, error);
    a.load(Size::H, R3, R2, 36); // version and next (next in the high byte of the load)
    a.mov64(R4, R3);
    a.add64(R4, 0x100);
    a.mov64(R1, R6);
    a.mov64(R2, 24);
    a.mov64(R5, 2);
    a.call(helper::L3_CSUM_REPLACE);
    a.jmp(Cond::Ne, R0, 0, error);
    packet_bytes(a, 38, error);
    a.load(Size::W, R4, R10, stack::NAMED);
    a.store(Size::W, R2, 30, R4); // destination
    a.load(Size::B, R4, R2, 37);
    a.add64(R4, 1);
    a.store(Size::B, R2, 37, R4); // next
    a.ja(redirect);

    // IPv6: no header checksum.
    a.bind(fwd6);
    packet_bytes(a, 60, error);
    for w in 0..4 {
        a.load(Size::W, R4, R10, stack::NAMED6 + 4 * w);
        a.store(Size::W, R2, 38 + 4 * w, R4); // destination
    }
    a.load(Size::B, R4, R2, 59);
    a.add64(R4, 1);
    a.store(Size::B, R2, 59, R4); // next

    a.bind(redirect);
    a.load(Size::W, R1, R6, 40); // skb->ifindex
    a.mov64(R2, 0);
    a.mov64(R3, 0);
    a.mov64(R4, 0);
    a.call(helper::REDIRECT_NEIGH);
    a.store(Size::W, R10, stack::VERDICT, R0);
    a.mov64(R9, counter::SECOND_CHANCE_FORWARDED as i32);
    a.ja(out);
}

/// r2 = `skb->data`, r3 = `skb->data_end`, and a jump to `fail` unless `len` bytes are there.
fn packet_bytes(a: &mut Asm, len: i32, fail: crate::asm::Label) {
    a.load(Size::W, R2, R6, 76);
    a.load(Size::W, R3, R6, 80);
    a.mov64(R4, R2);
    a.add64(R4, len);
    a.jmp(Cond::Gt, R4, R3, fail);
}

/// r1..r5 for a socket lookup of the tuple on the stack (`size` bytes: 12 for IPv4, 36 for
/// IPv6), in the packet's network namespace.
fn lookup_args(a: &mut Asm, size: i32) {
    a.mov64(R1, R6);
    a.mov64(R2, R10);
    a.add64(R2, stack::TUPLE as i32);
    a.mov64(R3, size);
    a.mov64(R4, -1); // BPF_F_CURRENT_NETNS
    a.mov64(R5, 0);
}

/// The decapsulation program and its counters, loaded but not attached.
#[derive(Debug)]
pub struct TcDecap {
    prog: Program,
    stats: Map,
}

/// The filter position for `ifindex`.
pub fn filter(ifindex: u32) -> TcFilter {
    TcFilter {
        ifindex,
        ingress: true,
        prio: TC_PRIO,
        handle: TC_HANDLE,
    }
}

fn read_stats(m: &Map) -> Result<DecapStats> {
    let c = |i| m.percpu_u64_sum(i);
    Ok(DecapStats {
        pass: c(counter::PASS)?,
        ipip: c(counter::IPIP)?,
        gre: c(counter::GRE)?,
        unsupported: c(counter::UNSUPPORTED)?,
        error: c(counter::ERROR)?,
        second_chance_local: c(counter::SECOND_CHANCE_LOCAL)?,
        second_chance_forwarded: c(counter::SECOND_CHANCE_FORWARDED)?,
    })
}

impl TcDecap {
    /// Create the stats map and load the program.
    pub fn load(cfg: DecapConfig) -> Result<TcDecap> {
        let stats = Map::create(MapType::PerCpuArray, 4, 8, counter::COUNT, STATS_MAP_NAME)?;
        let insns = program(cfg, stats.raw_fd()).map_err(|e| Error::Asm {
            name: PROG_NAME.into(),
            source: e,
        })?;
        let prog = Program::load(ProgType::SchedCls, PROG_NAME, &insns)?;
        Ok(TcDecap { prog, stats })
    }

    /// The loaded program.
    pub fn program(&self) -> &Program {
        &self.prog
    }

    /// Counters of this program instance.
    pub fn stats(&self) -> Result<DecapStats> {
        read_stats(&self.stats)
    }

    /// Install as the ingress filter of `ifindex` (in the calling thread's network namespace),
    /// adding the `clsact` qdisc if needed and replacing an earlier flowplane decap filter.
    /// Returns whether the qdisc was created (so that a later [`detach`] knows whether to remove
    /// it). The filter stays after this value is dropped.
    pub fn attach(&self, ifindex: u32) -> Result<bool> {
        let mut nl = Netlink::open()?;
        let created = nl.clsact_add(ifindex)?;
        if let Err(e) = nl.filter_add(&filter(ifindex), self.prog.raw_fd(), PROG_NAME) {
            if created {
                let _ = nl.clsact_del(ifindex);
            }
            return Err(e);
        }
        Ok(created)
    }
}

/// Remove flowplane's decap filter from `ifindex`, and the `clsact` qdisc too if `remove_qdisc`
/// (only when flowplane created it: other filters may live there). Returns whether a filter was
/// removed.
pub fn detach(ifindex: u32, remove_qdisc: bool) -> Result<bool> {
    let mut nl = Netlink::open()?;
    let removed = nl.filter_del(&filter(ifindex))?;
    if remove_qdisc {
        nl.clsact_del(ifindex)?;
    }
    Ok(removed)
}

/// What is installed on an interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Installed {
    /// Kernel id of the program in flowplane's filter position.
    pub prog_id: u32,
    /// Its name.
    pub name: String,
    /// Its counters, if it is flowplane's decap program.
    pub stats: Option<DecapStats>,
}

/// The program in flowplane's decap filter position of `ifindex`, with its counters.
pub fn installed(ifindex: u32) -> Result<Option<Installed>> {
    let mut nl = Netlink::open()?;
    let Some(id) = nl.filter_prog_id(&filter(ifindex))? else {
        return Ok(None);
    };
    let fd =
        sys::prog_fd_by_id(id).map_err(|e| Error::sys(format!("opening program id {id}"), e))?;
    let info = sys::prog_info(std::os::fd::AsFd::as_fd(&fd))
        .map_err(|e| Error::sys(format!("reading program id {id}"), e))?;
    let mut stats = None;
    for mid in &info.map_ids {
        let m = Map::from_id(*mid)?;
        if m.info()?.name == STATS_MAP_NAME {
            stats = Some(read_stats(&m)?);
        }
    }
    Ok(Some(Installed {
        prog_id: id,
        name: info.name,
        stats,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_chance_layout_matches_the_wire_crate() {
        use fp_wire::second_chance as w;
        assert_eq!(sc::IPV4_OPTION, w::IPV4_OPTION);
        assert_eq!(sc::IPV6_OPTION, w::IPV6_OPTION);
        assert_eq!(sc::VERSION, w::VERSION);
        assert_eq!(sc::MAX_NAMED as usize, w::MAX_NAMED);
    }

    #[test]
    fn variants_assemble() {
        for (gre, ipip) in [(true, true), (true, false), (false, true), (false, false)] {
            let p = program(DecapConfig { gre, ipip }, 3).unwrap();
            assert!(p.len() < 512, "{} slots", p.len());
            let d = crate::asm::disassemble(&p);
            assert_eq!(d.contains("if r4 == 47"), gre);
            assert_eq!(d.contains("if r4 == 41"), ipip);
        }
    }
}
