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
    /// Number of counters.
    pub const COUNT: u32 = 5;
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
}

/// Program name as the kernel shows it.
pub const PROG_NAME: &str = "fp_tc_decap";
/// Name of its stats map.
pub const STATS_MAP_NAME: &str = "fp_decap_stats";
/// Priority of the tc filter.
pub const TC_PRIO: u16 = 0xf10;
/// Handle of the tc filter.
pub const TC_HANDLE: u32 = 0xf10;

/// Longest outer header the program strips: Ethernet 14 + IPv6 40 + GRE with key and sequence
/// 12 (what it pulls into the linear area when needed is Ethernet + IPv6 + 4).
const PULL_LEN: i32 = 14 + 40 + 4;

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

    a.mov64(R6, R1);
    a.mov64(R9, 0);
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
    a.jmp(Cond::Ne, R3, 0x45, pass); // version 4, IHL 5
    a.load(Size::H, R3, R7, 20);
    a.and64(R3, 0xFF3F); // MF and fragment offset (0x3FFF as a little-endian load sees it)
    a.jmp(Cond::Ne, R3, 0, pass);
    a.load(Size::B, R4, R7, 23);
    a.mov64(R5, 20);
    a.ja(tunnel);

    a.bind(v6);
    a.mov64(R2, R7);
    a.add64(R2, 54);
    a.jmp(Cond::Gt, R2, R8, need_pull);
    a.load(Size::B, R4, R7, 20);
    a.mov64(R5, 40);

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
    if cfg.gre || cfg.ipip {
        a.bind(strip);
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
    if cfg.gre || cfg.ipip {
        a.bind(error);
        a.mov64(R9, counter::ERROR as i32);
        a.ja(out);
    }
    a.bind(pass);
    a.mov64(R9, counter::PASS as i32);

    a.bind(out);
    a.store(Size::W, R10, -4, R9);
    a.ld_map_fd(R1, stats);
    a.mov64(R2, R10);
    a.add64(R2, -4);
    a.call(helper::MAP_LOOKUP_ELEM);
    a.jmp(Cond::Eq, R0, 0, ret);
    a.load(Size::DW, R1, R0, 0);
    a.add64(R1, 1);
    a.store(Size::DW, R0, 0, R1);
    a.bind(ret);
    a.mov64(R0, helper::tc::OK);
    a.exit();
    a.finish()
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
    fn variants_assemble() {
        for (gre, ipip) in [(true, true), (true, false), (false, true), (false, false)] {
            let p = program(DecapConfig { gre, ipip }, 3).unwrap();
            assert!(p.len() < 128, "{} slots", p.len());
            let d = crate::asm::disassemble(&p);
            assert_eq!(d.contains("if r4 == 47"), gre);
            assert_eq!(d.contains("if r4 == 41"), ipip);
        }
    }
}
