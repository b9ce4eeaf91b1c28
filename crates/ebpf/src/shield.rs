//! The AF_PACKET port's VIP shield: a tc ingress program that keeps frames addressed to a VIP
//! away from the host's own network stack, and lets everything else through.
//!
//! Why: an AF_PACKET socket receives a *copy* of every frame; the kernel's stack gets the
//! original. For a VIP the host does not own, the stack answers in its own way — for an IPv6 VIP
//! with no route covering it, an ICMPv6 "unreachable route" per client packet, which resets the
//! client's connection; with `ip_forward=1` an IPv4 host forwards the frames; with the VIP on the
//! host's loopback it answers a SYN with a RST. The AF_XDP port has no such problem: its XDP
//! program ([`crate::xsk`]) takes VIP frames away from the stack.
//!
//! Why tc ingress works: packet sockets bound with `ETH_P_ALL` are taps (`ptype_all`), which
//! `__netif_receive_skb_core` serves *before* it runs tc ingress. Dropping a frame at tc ingress
//! therefore hides it from the stack (IP input, forwarding, ICMP errors) but not from the
//! balancer's AF_PACKET sockets.
//!
//! ```text
//!  parse Ethernet, up to two in-band 802.1Q / 802.1ad tags   truncated → pull once, else NEXT
//!                                                              (count "malformed")
//!  ethertype IPv4 → key = ::ffff:dst (20-byte header)        other ethertype → NEXT ("not IP")
//!  ethertype IPv6 → key = dst        (40-byte header)
//!  lookup key in the destination hash map                     absent → NEXT ("not VIP")
//!  present → DROP ("dropped")
//! ```
//!
//! The key layout is the XDP program's ([`crate::xsk::vip_key`]: IPv4 as `::ffff:a.b.c.d`). The
//! return codes are tcx's ([`crate::helper::tcx`]): `NEXT` (-1) lets later tc programs and filters
//! run and the frame continue, `DROP` (2) drops it. They equal `TC_ACT_UNSPEC` and `TC_ACT_SHOT`,
//! so the same program works as a direct-action `cls_bpf` filter. The stack has usually moved an
//! outer VLAN tag into the skb's metadata before tc runs; in-band tags are parsed anyway. Headers
//! outside the skb's linear area are pulled in once (`bpf_skb_pull_data`), as the decapsulation
//! program does.
//!
//! # Attachment
//!
//! [`VipShield::attach`] prefers a tcx link ([`TcxLink`], Linux ≥ 6.6): it belongs to the
//! process, so a crashed balancer leaves nothing behind dropping VIP traffic. If the kernel
//! refuses tcx, it falls back to a direct-action `cls_bpf` filter on the `clsact` qdisc at
//! [`TC_PRIO`] / [`TC_HANDLE`] (replacing a stale flowplane shield left there by a crashed run,
//! refusing to replace anyone else's filter), removed again when the shield is dropped (with
//! the qdisc, if the shield created it). Dropping the [`VipShield`] detaches in both cases.

use crate::asm::{Asm, AsmError, Cond, Insn, Size, R0, R1, R10, R2, R3, R6, R7, R8, R9};
use crate::map::{Map, MapType};
use crate::netlink::{Netlink, TcFilter};
use crate::prog::{ProgType, Program, TcxLink};
use crate::{helper, sys, xsk, Error, Result};
use std::net::IpAddr;
use std::sync::Mutex;

/// Outcome counters, indices into the program's per-CPU stats map.
pub mod counter {
    /// Passed: not IPv4 or IPv6.
    pub const NOT_IP: u32 = 0;
    /// Passed: IP, but the destination is not in the map.
    pub const NOT_VIP: u32 = 1;
    /// Dropped: addressed to a destination in the map.
    pub const DROPPED: u32 = 2;
    /// Passed: headers truncated.
    pub const MALFORMED: u32 = 3;
    /// Number of counters.
    pub const COUNT: u32 = 4;
}

/// The program's counters, summed over CPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShieldStats {
    /// See [`counter::NOT_IP`].
    pub not_ip: u64,
    /// See [`counter::NOT_VIP`].
    pub not_vip: u64,
    /// See [`counter::DROPPED`].
    pub dropped: u64,
    /// See [`counter::MALFORMED`].
    pub malformed: u64,
}

/// Program name as the kernel shows it.
pub const PROG_NAME: &str = "fp_vip_shield";
/// Priority of the fallback tc filter.
pub const TC_PRIO: u16 = 0xf11;
/// Handle of the fallback tc filter.
pub const TC_HANDLE: u32 = 0xf11;

/// Ethernet + two tags + IPv6: what the program pulls into the linear area when needed.
const PULL_LEN: i32 = 14 + 8 + 40;

/// Assemble the program for the given map descriptors: `vips` (hash, 16-byte key) and `stats`
/// (per-CPU array of [`counter::COUNT`] u64).
///
/// Registers: r6 = skb, r7 = "already pulled", r8 = verdict, r9 = counter index; while parsing
/// r2 = cursor, r3 = data_end, r5 = ethertype.
pub fn program(vips: i32, stats: i32) -> std::result::Result<Vec<Insn>, AsmError> {
    let mut a = Asm::new();
    let (parse, short, pull, malformed, out, ret) = (
        a.label(),
        a.label(),
        a.label(),
        a.label(),
        a.label(),
        a.label(),
    );
    a.mov64(R6, R1);
    a.mov64(R7, 0);
    a.mov64(R8, helper::tcx::NEXT);

    a.bind(parse);
    a.mov64(R9, counter::NOT_IP as i32);
    a.load(Size::W, R2, R6, 76); // skb->data
    a.load(Size::W, R3, R6, 80); // skb->data_end
    xsk::vip_lookup(&mut a, vips, short, out, counter::NOT_VIP);
    a.mov64(R9, counter::DROPPED as i32);
    a.mov64(R8, helper::tcx::DROP);
    a.ja(out);

    // Headers beyond the linear area: pull them in once and parse again.
    a.bind(short);
    a.jmp(Cond::Ne, R7, 0, malformed);
    a.mov64(R7, 1);
    a.load(Size::W, R2, R6, 0); // skb->len
    a.jmp(Cond::Le, R2, PULL_LEN, pull);
    a.mov64(R2, PULL_LEN);
    a.bind(pull);
    a.mov64(R1, R6);
    a.call(helper::SKB_PULL_DATA);
    a.jmp(Cond::Eq, R0, 0, parse);

    a.bind(malformed);
    a.mov64(R9, counter::MALFORMED as i32);

    a.bind(out);
    a.store(Size::W, R10, -20, R9);
    a.ld_map_fd(R1, stats);
    a.mov64(R2, R10);
    a.add64(R2, -20);
    a.call(helper::MAP_LOOKUP_ELEM);
    a.jmp(Cond::Eq, R0, 0, ret);
    a.load(Size::DW, R1, R0, 0);
    a.add64(R1, 1);
    a.store(Size::DW, R0, 0, R1);
    a.bind(ret);
    a.mov64(R0, R8);
    a.exit();
    a.finish()
}

/// How to attach.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum AttachChoice {
    /// A tcx link, or the `cls_bpf` filter if the kernel refuses tcx.
    #[default]
    Auto,
    /// A tcx link only.
    Tcx,
    /// The `cls_bpf` filter only.
    Filter,
}

/// How the shield is attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Attachment {
    /// Through a tcx link (released with the process).
    Tcx,
    /// Through a direct-action `cls_bpf` filter on the `clsact` qdisc (removed on drop).
    Filter,
}

impl std::fmt::Display for Attachment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Attachment::Tcx => "tcx link",
            Attachment::Filter => "clsact cls_bpf filter",
        })
    }
}

enum Attached {
    Tcx(TcxLink),
    Filter {
        nl: Netlink,
        filter: TcFilter,
        created_qdisc: bool,
    },
}

/// The fallback filter's position on `ifindex`.
pub fn filter(ifindex: u32) -> TcFilter {
    TcFilter {
        ifindex,
        ingress: true,
        prio: TC_PRIO,
        handle: TC_HANDLE,
    }
}

/// The shield program with its maps, optionally attached to an interface's ingress; dropping it
/// detaches.
pub struct VipShield {
    prog: Program,
    vips: Map,
    stats: Map,
    update: Mutex<()>,
    attached: Option<Attached>,
    ifindex: u32,
    tcx_refused: Option<String>,
}

impl std::fmt::Debug for VipShield {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VipShield")
            .field("prog", &self.prog.name())
            .field("attachment", &self.attachment())
            .field("ifindex", &self.ifindex)
            .finish()
    }
}

impl VipShield {
    /// Create the maps (room for `max_vips` destinations) and load the program, not attached yet.
    pub fn load(max_vips: u32) -> Result<VipShield> {
        let vips = Map::create(MapType::Hash, 16, 4, max_vips.max(1), "fp_shield_vips")?;
        let stats = Map::create(
            MapType::PerCpuArray,
            4,
            8,
            counter::COUNT,
            "fp_shield_stats",
        )?;
        let insns = program(vips.raw_fd(), stats.raw_fd()).map_err(|e| Error::Asm {
            name: PROG_NAME.into(),
            source: e,
        })?;
        let prog = Program::load(ProgType::SchedCls, PROG_NAME, &insns)?;
        Ok(VipShield {
            prog,
            vips,
            stats,
            update: Mutex::new(()),
            attached: None,
            ifindex: 0,
            tcx_refused: None,
        })
    }

    /// Attach to the ingress of `ifindex` (in the calling thread's network namespace). Attaching
    /// again first detaches. Returns how it is attached.
    pub fn attach(&mut self, ifindex: u32, how: AttachChoice) -> Result<Attachment> {
        self.detach()?;
        self.tcx_refused = None;
        if how != AttachChoice::Filter {
            match TcxLink::attach(&self.prog, ifindex, true) {
                Ok(link) => {
                    self.attached = Some(Attached::Tcx(link));
                    self.ifindex = ifindex;
                    return Ok(Attachment::Tcx);
                }
                Err(e) if how == AttachChoice::Tcx => return Err(e),
                Err(e) => self.tcx_refused = Some(e.to_string()),
            }
        }
        match self.attach_filter(ifindex) {
            Ok(a) => {
                self.attached = Some(a);
                self.ifindex = ifindex;
                Ok(Attachment::Filter)
            }
            Err(e) => match &self.tcx_refused {
                Some(t) => Err(e.context(format!("after the tcx link was refused ({t})"))),
                None => Err(e),
            },
        }
    }

    fn attach_filter(&self, ifindex: u32) -> Result<Attached> {
        let mut nl = Netlink::open()?;
        let f = filter(ifindex);
        let created_qdisc = nl.clsact_add(ifindex)?;
        if let Some(id) = nl.filter_prog_id(&f)? {
            // A filter at our position: a stale shield of a crashed run is replaced below; anyone
            // else's is left alone.
            let name = sys::prog_fd_by_id(id)
                .and_then(|fd| sys::prog_info(std::os::fd::AsFd::as_fd(&fd)))
                .map(|i| i.name)
                .unwrap_or_default();
            if name != PROG_NAME {
                return Err(Error::Invalid(format!(
                    "ifindex {ifindex}: the tc ingress filter at priority {TC_PRIO:#x} handle \
                     {TC_HANDLE:#x} is program {id} ({name:?}), not flowplane's VIP shield; \
                     remove it first"
                )));
            }
        }
        if let Err(e) = nl.filter_add(&f, self.prog.raw_fd(), PROG_NAME) {
            if created_qdisc {
                let _ = nl.clsact_del(ifindex);
            }
            return Err(e);
        }
        Ok(Attached::Filter {
            nl,
            filter: f,
            created_qdisc,
        })
    }

    /// Detach (also done on drop). A no-op when not attached.
    pub fn detach(&mut self) -> Result<()> {
        match self.attached.take() {
            None | Some(Attached::Tcx(_)) => Ok(()), // the link detaches when dropped
            Some(Attached::Filter {
                mut nl,
                filter,
                created_qdisc,
            }) => {
                // Another process may have put its own shield at our position since (one taking
                // over from this one): then the filter and the qdisc are its, and stay.
                let ours = self.prog.info().map(|i| i.id).ok();
                if nl
                    .filter_prog_id(&filter)?
                    .is_some_and(|id| Some(id) != ours)
                {
                    return Ok(());
                }
                nl.filter_del(&filter)?;
                if created_qdisc {
                    nl.clsact_del(filter.ifindex)?;
                }
                Ok(())
            }
        }
    }

    /// How it is attached, if it is.
    pub fn attachment(&self) -> Option<Attachment> {
        match self.attached {
            None => None,
            Some(Attached::Tcx(_)) => Some(Attachment::Tcx),
            Some(Attached::Filter { .. }) => Some(Attachment::Filter),
        }
    }

    /// The tcx link, when attached through one.
    pub fn tcx_link(&self) -> Option<&TcxLink> {
        match &self.attached {
            Some(Attached::Tcx(l)) => Some(l),
            _ => None,
        }
    }

    /// The interface it is attached to (0 when not attached).
    pub fn ifindex(&self) -> u32 {
        if self.attached.is_some() {
            self.ifindex
        } else {
            0
        }
    }

    /// Why the tcx link was refused, when [`VipShield::attach`] fell back to the filter.
    pub fn tcx_refused(&self) -> Option<&str> {
        self.tcx_refused.as_deref()
    }

    /// The loaded program.
    pub fn program(&self) -> &Program {
        &self.prog
    }

    /// Make the destination set exactly `vips`: new ones are added before old ones are removed,
    /// so a destination present before and after is never unshielded in between. Returns (added,
    /// removed).
    pub fn set_vips(&self, vips: &[IpAddr]) -> Result<(usize, usize)> {
        let _g = self.update.lock().unwrap_or_else(|p| p.into_inner());
        xsk::replace_vips(&self.vips, vips)
    }

    /// The current destinations, sorted.
    pub fn vips(&self) -> Result<Vec<IpAddr>> {
        xsk::list_vips(&self.vips)
    }

    /// The program's counters, summed over CPUs.
    pub fn stats(&self) -> Result<ShieldStats> {
        let c = |i| self.stats.percpu_u64_sum(i);
        Ok(ShieldStats {
            not_ip: c(counter::NOT_IP)?,
            not_vip: c(counter::NOT_VIP)?,
            dropped: c(counter::DROPPED)?,
            malformed: c(counter::MALFORMED)?,
        })
    }
}

impl Drop for VipShield {
    fn drop(&mut self) {
        // Fails only if the interface (or its namespace) is already gone, which removed the
        // filter with it.
        let _ = self.detach();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_assembles() {
        let p = program(3, 4).unwrap();
        assert!(p.len() < 100, "{} slots", p.len());
        let d = crate::asm::disassemble(&p);
        assert_eq!(d.matches("map_fd(").count(), 2);
        assert!(d.contains("r2 = *(u32 *)(r6 +76)"), "{d}");
        assert!(d.contains("call bpf_skb_pull_data"), "{d}");
        // Both verdicts: NEXT (-1) by default, DROP (2) for a destination in the map.
        assert!(d.contains("r8 = -1"), "{d}");
        assert!(d.contains("r8 = 2"), "{d}");
    }

    #[test]
    fn fallback_filter_position_differs_from_decap() {
        let (s, d) = (filter(7), crate::decap::filter(7));
        assert!(s.ingress);
        assert_ne!((s.prio, s.handle), (d.prio, d.handle));
    }
}
