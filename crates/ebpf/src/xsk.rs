//! The XDP program in front of AF_XDP sockets: frames addressed to a VIP go to the socket of the
//! queue they arrived on; everything else (ARP, neighbour discovery, the host's own traffic,
//! health-check replies to the balancer's address) goes to the kernel.
//!
//! ```text
//!  parse Ethernet, up to two 802.1Q / 802.1ad tags       truncated → PASS (count "malformed")
//!  ethertype IPv4 → key = ::ffff:dst  (20-byte header)    other ethertype → PASS ("not IP")
//!  ethertype IPv6 → key = dst         (40-byte header)
//!  lookup key in the VIP hash map                         absent → PASS ("not VIP")
//!  stamp: bpf_ktime_get_ns() into 8 bytes of metadata     (bpf_xdp_adjust_meta(ctx, -8); skipped
//!         in front of the frame                            if the driver has no metadata room)
//!  bpf_redirect_map(xsks, rx_queue_index, XDP_PASS)       → REDIRECT ("to socket"), or PASS when
//!                                                           the queue has no socket ("no socket")
//! ```
//!
//! Every path ends in one counting block: a per-CPU array of u64 counters indexed by the outcome
//! ([`XskStats`]), so the counters cost no atomic operation. Keys are 16 bytes: IPv6 addresses
//! as they are, IPv4 addresses mapped (`::ffff:a.b.c.d`), so one map holds both families.
//!
//! Every packet access is preceded by a bounds check against `data_end`, the form the verifier
//! needs (`r4 = r2 + N; if r4 > data_end goto ...`).
//!
//! # Receive stamps
//!
//! Before the redirect, the program reads `bpf_ktime_get_ns()` (`CLOCK_MONOTONIC`, the clock the
//! engine's ports stamp packets with) and stores it as a native-endian u64 in [`META_LEN`] bytes
//! of XDP metadata it opens in front of the frame (`bpf_xdp_adjust_meta(ctx, -8)`, then a bounds
//! check `data_meta + 8 <= data` on freshly loaded pointers: the helper invalidates the old
//! ones). An AF_XDP socket in copy mode copies the metadata with the frame (`__xsk_rcv` copies
//! from `data_meta`), so the stamp lies in the 8 bytes of the UMEM right before the descriptor's
//! address; in zero-copy mode the program writes it there itself. The frame is received at
//! `XDP_PACKET_HEADROOM` (256 bytes) past its chunk's start (plus the UMEM's own headroom), so
//! those 8 bytes are always inside the frame's chunk. A frame the helper refused to stamp
//! carries no metadata; user space zeroes the slot before giving a chunk back to the fill ring,
//! so it reads 0 ("no stamp") rather than a stale time. Frames that go to the kernel (PASS) were
//! not stamped, except VIP frames of a queue with no socket, whose skb then carries 8 bytes of
//! metadata nobody reads.
//!
//! [`XskRedirect`] owns the maps, the program and the attachment: several AF_XDP sockets of one
//! interface (one per queue) share one `XskRedirect`.
//!
//! # Steering every frame (switch ports)
//!
//! A switch port belongs to the dataplane entirely: ARP, broadcast, multicast and every unicast
//! frame must reach the switch, whatever its addresses. [`Steering::All`] assembles a second,
//! shorter program ([`program_all`], named [`PROG_NAME_ALL`]) that skips the parsing and the VIP
//! map:
//!
//! ```text
//!  data + 14 > data_end                                   → PASS (count "malformed")
//!  stamp (as above)
//!  bpf_redirect_map(xsks, rx_queue_index, XDP_PASS)       → REDIRECT ("to socket"), or PASS when
//!                                                           the queue has no socket ("no socket")
//! ```
//!
//! The same counters and maps are used (the VIP map exists but is not consulted), so the AF_XDP
//! port code is the same for both.

use crate::asm::{
    Asm, AsmError, Cond, Insn, Label, Size, R0, R1, R10, R2, R3, R4, R5, R6, R7, R8, R9,
};
use crate::map::{Map, MapType, Update};
use crate::prog::{ProgType, Program, XdpLink, XdpMode};
use crate::{helper, Error, Result};
use std::net::{IpAddr, Ipv6Addr};
use std::os::fd::{AsFd as _, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// Outcome counters of the program, indices into its per-CPU stats map.
pub mod counter {
    /// Passed: not IPv4 or IPv6 (ARP, LLDP...).
    pub const NOT_IP: u32 = 0;
    /// Passed: IP, but the destination is not a VIP.
    pub const NOT_VIP: u32 = 1;
    /// Redirected to the AF_XDP socket of the arrival queue.
    pub const TO_SOCKET: u32 = 2;
    /// Passed: a VIP, but no socket is bound to the arrival queue.
    pub const NO_SOCKET: u32 = 3;
    /// Passed: headers truncated.
    pub const MALFORMED: u32 = 4;
    /// Number of counters.
    pub const COUNT: u32 = 5;
}

/// The program's counters, summed over CPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XskStats {
    /// See [`counter::NOT_IP`].
    pub not_ip: u64,
    /// See [`counter::NOT_VIP`].
    pub not_vip: u64,
    /// See [`counter::TO_SOCKET`].
    pub to_socket: u64,
    /// See [`counter::NO_SOCKET`].
    pub no_socket: u64,
    /// See [`counter::MALFORMED`].
    pub malformed: u64,
}

/// The 16-byte VIP map key of an address (IPv4 as `::ffff:a.b.c.d`).
pub fn vip_key(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// The address of a VIP map key.
pub fn key_vip(key: [u8; 16]) -> IpAddr {
    let v6 = Ipv6Addr::from(key);
    match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    }
}

/// Bytes of XDP metadata the programs put in front of a steered frame: the receive stamp, a
/// native-endian u64 of `CLOCK_MONOTONIC` ns (see the module docs).
pub const META_LEN: usize = 8;

/// Ethertypes as a little-endian 16-bit load of the wire bytes sees them.
const ETH_IPV4_LE: i32 = 0x0008;
const ETH_IPV6_LE: i32 = 0xDD86;
const ETH_VLAN_LE: i32 = 0x0081;
const ETH_QINQ_LE: i32 = 0xA888;

/// Assemble the program for the given map descriptors: `vips` (hash, 16-byte key), `xsks`
/// (XSKMAP), `stats` (per-CPU array of [`counter::COUNT`] u64).
///
/// Registers: r6 = ctx, r2 = cursor (packet pointer), r3 = data_end, r5 = ethertype,
/// r8 = verdict, r9 = counter index.
pub fn program(vips: i32, xsks: i32, stats: i32) -> std::result::Result<Vec<Insn>, AsmError> {
    let mut a = Asm::new();
    let (malformed, out, ret) = (a.label(), a.label(), a.label());
    a.mov64(R6, R1);
    a.mov64(R8, helper::xdp::PASS);
    a.mov64(R9, counter::NOT_IP as i32);
    a.load(Size::W, R2, R6, 0); // data
    a.load(Size::W, R3, R6, 4); // data_end
    vip_lookup(&mut a, vips, malformed, out, counter::NOT_VIP);
    redirect_and_count(&mut a, xsks, stats, [malformed, out, ret], -20);
    a.finish()
}

/// Emit the destination lookup both of flowplane's VIP programs make (the XDP steering program
/// here and the tc shield, `crate::shield`): Ethernet with up to two in-band VLAN tags (802.1ad
/// outer, 802.1Q inner), then IPv4 or IPv6, the destination address as the 16-byte map key at
/// r10-16 (IPv4 as `::ffff:a.b.c.d`), looked up in the map `vips`.
///
/// On entry r2 = the frame's first byte, r3 = its end (from the program's context), r9 = the
/// "not IP" counter index. A header that runs past r3 jumps to `short`; a frame that is not IP,
/// or whose destination is not in the map (r9 = `not_vip` then), jumps to `out`; a hit falls
/// through with r0 = the map value. Clobbers r0-r5.
pub(crate) fn vip_lookup(a: &mut Asm, vips: i32, short: Label, out: Label, not_vip: u32) {
    let (l3, ip4, ip6, lookup) = (a.label(), a.label(), a.label(), a.label());
    a.mov64(R4, R2);
    a.add64(R4, 14);
    a.jmp(Cond::Gt, R4, R3, short);
    a.load(Size::H, R5, R2, 12);
    a.add64(R2, 14);
    // Up to two VLAN tags (802.1ad outer, 802.1Q inner), unrolled.
    for _ in 0..2 {
        let tagged = a.label();
        a.jmp(Cond::Eq, R5, ETH_VLAN_LE, tagged);
        a.jmp(Cond::Eq, R5, ETH_QINQ_LE, tagged);
        a.ja(l3);
        a.bind(tagged);
        a.mov64(R4, R2);
        a.add64(R4, 4);
        a.jmp(Cond::Gt, R4, R3, short);
        a.load(Size::H, R5, R2, 2);
        a.add64(R2, 4);
    }
    a.bind(l3);
    a.jmp(Cond::Eq, R5, ETH_IPV4_LE, ip4);
    a.jmp(Cond::Eq, R5, ETH_IPV6_LE, ip6);
    a.ja(out);

    a.bind(ip4);
    a.mov64(R4, R2);
    a.add64(R4, 20);
    a.jmp(Cond::Gt, R4, R3, short);
    a.store_imm(Size::DW, R10, -16, 0);
    a.store_imm(Size::W, R10, -8, 0xFFFF_0000u32 as i32); // bytes 00 00 ff ff
    a.load(Size::W, R5, R2, 16);
    a.store(Size::W, R10, -4, R5);
    a.ja(lookup);

    a.bind(ip6);
    a.mov64(R4, R2);
    a.add64(R4, 40);
    a.jmp(Cond::Gt, R4, R3, short);
    a.load(Size::DW, R5, R2, 24);
    a.store(Size::DW, R10, -16, R5);
    a.load(Size::DW, R5, R2, 32);
    a.store(Size::DW, R10, -8, R5);

    a.bind(lookup);
    a.mov64(R9, not_vip as i32);
    a.ld_map_fd(R1, vips);
    a.mov64(R2, R10);
    a.add64(R2, -16);
    a.call(helper::MAP_LOOKUP_ELEM);
    a.jmp(Cond::Eq, R0, 0, out);
}

/// The program [`Steering::All`] loads: every frame of at least an Ethernet header goes to the
/// socket of its queue. Same map arguments as [`program`] minus the VIP map.
pub fn program_all(xsks: i32, stats: i32) -> std::result::Result<Vec<Insn>, AsmError> {
    let mut a = Asm::new();
    let (malformed, out, ret) = (a.label(), a.label(), a.label());
    a.mov64(R6, R1);
    a.mov64(R8, helper::xdp::PASS);
    a.load(Size::W, R2, R6, 0); // data
    a.load(Size::W, R3, R6, 4); // data_end
    a.mov64(R4, R2);
    a.add64(R4, 14);
    a.jmp(Cond::Gt, R4, R3, malformed);
    redirect_and_count(&mut a, xsks, stats, [malformed, out, ret], -4);
    a.finish()
}

/// Store `bpf_ktime_get_ns()` in [`META_LEN`] bytes of metadata in front of the frame (R6 = ctx;
/// clobbers R0-R5 and R7; every packet pointer the caller held is invalid afterwards). If the
/// driver has no room for metadata the frame goes on unstamped.
fn stamp(a: &mut Asm) {
    let done = a.label();
    a.call(helper::KTIME_GET_NS);
    a.mov64(R7, R0);
    a.mov64(R1, R6);
    a.mov64(R2, -(META_LEN as i32));
    a.call(helper::XDP_ADJUST_META);
    a.jmp(Cond::Ne, R0, 0, done);
    a.load(Size::W, R2, R6, 8); // data_meta, after the adjustment
    a.load(Size::W, R3, R6, 0); // data
    a.mov64(R4, R2);
    a.add64(R4, META_LEN as i32);
    a.jmp(Cond::Gt, R4, R3, done);
    a.store(Size::DW, R2, 0, R7);
    a.bind(done);
}

/// The end both programs share: stamp the frame, redirect it to the socket of its queue
/// (`XDP_PASS` if it has none), bump the per-CPU counter in R9 (`counter_slot`: a free 4-byte
/// stack slot for its key), return R8. Binds the `malformed`, `out` and `ret` labels the caller
/// jumps to.
fn redirect_and_count(
    a: &mut Asm,
    xsks: i32,
    stats: i32,
    [malformed, out, ret]: [Label; 3],
    counter_slot: i16,
) {
    stamp(a);
    a.ld_map_fd(R1, xsks);
    a.load(Size::W, R2, R6, 16); // rx_queue_index
    a.mov64(R3, helper::xdp::PASS); // fallback when the queue has no socket
    a.call(helper::REDIRECT_MAP);
    a.mov64(R8, R0);
    a.mov64(R9, counter::TO_SOCKET as i32);
    a.jmp(Cond::Eq, R0, helper::xdp::REDIRECT, out);
    a.mov64(R9, counter::NO_SOCKET as i32);
    a.ja(out);

    a.bind(malformed);
    a.mov64(R9, counter::MALFORMED as i32);

    a.bind(out);
    a.store(Size::W, R10, counter_slot, R9);
    a.ld_map_fd(R1, stats);
    a.mov64(R2, R10);
    a.add64(R2, counter_slot as i32);
    a.call(helper::MAP_LOOKUP_ELEM);
    a.jmp(Cond::Eq, R0, 0, ret);
    a.load(Size::DW, R1, R0, 0);
    a.add64(R1, 1);
    a.store(Size::DW, R0, 0, R1);
    a.bind(ret);
    a.mov64(R0, R8);
    a.exit();
}

/// Which frames the program sends to the AF_XDP sockets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Steering {
    /// Frames addressed to a VIP (the load balancer); the rest goes to the kernel.
    #[default]
    Vips,
    /// Every frame (a switch port): nothing reaches the kernel's stack on this interface.
    All,
}

/// How to attach: a fixed mode, or native with a fallback to generic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum ModeChoice {
    /// Native if the driver supports it, else generic.
    #[default]
    Auto,
    /// Native only.
    Native,
    /// Generic only.
    Generic,
}

/// A mode name that is none of `auto`, `native` (`drv`), `generic` (`skb`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0:?}: use auto, native or generic")]
pub struct UnknownMode(pub String);

impl std::str::FromStr for ModeChoice {
    type Err = UnknownMode;
    fn from_str(s: &str) -> std::result::Result<ModeChoice, UnknownMode> {
        match s {
            "auto" => Ok(ModeChoice::Auto),
            "native" | "drv" => Ok(ModeChoice::Native),
            "generic" | "skb" => Ok(ModeChoice::Generic),
            _ => Err(UnknownMode(s.to_string())),
        }
    }
}

/// The redirect program with its maps, optionally attached to an interface.
pub struct XskRedirect {
    prog: Program,
    vips: Map,
    xsks: Map,
    stats: Map,
    link: Option<XdpLink>,
    update: Mutex<()>,
    steering: Steering,
    /// Set once another process took the program over ([`XskRedirect::leave_attached`]).
    kept: AtomicBool,
}

impl Drop for XskRedirect {
    fn drop(&mut self) {
        if self.kept.load(Ordering::Acquire) {
            if let Some(l) = self.link.take() {
                l.leave_attached();
            }
        }
    }
}

impl std::fmt::Debug for XskRedirect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XskRedirect")
            .field("prog", &self.prog.name())
            .field("link", &self.link)
            .finish()
    }
}

/// Name of the program as the kernel shows it (`bpftool prog`, `ip link`).
pub const PROG_NAME: &str = "fp_xsk_redirect";
/// Name of the [`Steering::All`] program.
pub const PROG_NAME_ALL: &str = "fp_xsk_all";

impl XskRedirect {
    /// Create the maps (room for `max_vips` VIPs and queues `0..max_queues`) and load the program,
    /// not attached yet.
    pub fn load(max_vips: u32, max_queues: u32) -> Result<XskRedirect> {
        XskRedirect::load_steering(Steering::Vips, max_vips, max_queues)
    }

    /// Like [`XskRedirect::load`], choosing which frames go to the sockets. With
    /// [`Steering::All`] the VIP map is created (so the API stays the same) but never consulted.
    pub fn load_steering(
        steering: Steering,
        max_vips: u32,
        max_queues: u32,
    ) -> Result<XskRedirect> {
        let vips = Map::create(MapType::Hash, 16, 4, max_vips.max(1), "fp_vips")?;
        let xsks = Map::create(MapType::XskMap, 4, 4, max_queues.max(1), "fp_xsks")?;
        let stats = Map::create(MapType::PerCpuArray, 4, 8, counter::COUNT, "fp_xsk_stats")?;
        let (name, insns) = match steering {
            Steering::Vips => (
                PROG_NAME,
                program(vips.raw_fd(), xsks.raw_fd(), stats.raw_fd()),
            ),
            Steering::All => (PROG_NAME_ALL, program_all(xsks.raw_fd(), stats.raw_fd())),
        };
        let insns = insns.map_err(|e| Error::Asm {
            name: name.into(),
            source: e,
        })?;
        let prog = Program::load(ProgType::Xdp, name, &insns)?;
        Ok(XskRedirect {
            prog,
            vips,
            xsks,
            stats,
            link: None,
            update: Mutex::new(()),
            steering,
            kept: AtomicBool::new(false),
        })
    }

    /// Duplicates of the descriptors another process needs to go on with this program where it
    /// is attached, in the order [`XskRedirect::adopt`] takes them: program, VIP map, socket
    /// map, counters, link. Nothing changes here until [`XskRedirect::leave_attached`].
    pub fn hand_off(&self) -> Result<Vec<OwnedFd>> {
        let link = self
            .link
            .as_ref()
            .ok_or_else(|| Error::Invalid("handing off an XDP program not attached".into()))?;
        let dup = |fd: BorrowedFd<'_>| {
            fd.try_clone_to_owned()
                .map_err(|e| Error::sys("duplicating a descriptor of the XDP program", e))
        };
        Ok(vec![
            dup(self.prog.as_fd())?,
            dup(self.vips.as_fd())?,
            dup(self.xsks.as_fd())?,
            dup(self.stats.as_fd())?,
            dup(link.as_fd())?,
        ])
    }

    /// Another process holds the program now (it got [`XskRedirect::hand_off`]'s descriptors):
    /// dropping this value leaves the program attached and the maps as they are.
    pub fn leave_attached(&self) {
        self.kept.store(true, Ordering::Release);
    }

    /// Go on with a program another process attached to `ifindex` in `mode` and handed off
    /// ([`XskRedirect::hand_off`]'s descriptors, in that order); `steering` is what it said
    /// the program does. From now on this value detaches it when dropped.
    pub fn adopt(
        fds: Vec<OwnedFd>,
        steering: Steering,
        ifindex: u32,
        mode: XdpMode,
    ) -> Result<XskRedirect> {
        let Ok::<[OwnedFd; 5], _>([prog, vips, xsks, stats, link]) = fds.try_into() else {
            return Err(Error::Invalid(
                "an XDP program handed off takes five descriptors".into(),
            ));
        };
        let name = match steering {
            Steering::Vips => PROG_NAME,
            Steering::All => PROG_NAME_ALL,
        };
        let link = XdpLink::from_fd(link, ifindex, mode);
        let prog = Program::from_fd(prog, ProgType::Xdp, name);
        let (vips, xsks, stats) = (
            Map::from_fd(vips)?,
            Map::from_fd(xsks)?,
            Map::from_fd(stats)?,
        );
        if xsks.map_type() != MapType::XskMap || vips.map_type() != MapType::Hash {
            return Err(Error::Invalid(
                "the descriptors handed off are not an AF_XDP redirect program's maps".into(),
            ));
        }
        Ok(XskRedirect {
            prog,
            vips,
            xsks,
            stats,
            link: Some(link),
            update: Mutex::new(()),
            steering,
            kept: AtomicBool::new(false),
        })
    }

    /// Which frames the loaded program steers to the sockets.
    pub fn steering(&self) -> Steering {
        self.steering
    }

    /// Attach to `ifindex` (in the calling thread's network namespace). Returns the mode used.
    /// Attaching again first detaches.
    pub fn attach(&mut self, ifindex: u32, mode: ModeChoice) -> Result<XdpMode> {
        self.link = None;
        let link = match mode {
            ModeChoice::Native => XdpLink::attach(&self.prog, ifindex, XdpMode::Native)?,
            ModeChoice::Generic => XdpLink::attach(&self.prog, ifindex, XdpMode::Generic)?,
            ModeChoice::Auto => match XdpLink::attach(&self.prog, ifindex, XdpMode::Native) {
                Ok(l) => l,
                Err(e) if e.errno() == Some(libc::EBUSY) || e.errno() == Some(libc::EEXIST) => {
                    return Err(e)
                }
                Err(_) => XdpLink::attach(&self.prog, ifindex, XdpMode::Generic)?,
            },
        };
        let m = link.mode();
        self.link = Some(link);
        Ok(m)
    }

    /// Detach (also done on drop).
    pub fn detach(&mut self) {
        self.link = None;
    }

    /// The attachment, if attached.
    pub fn link(&self) -> Option<&XdpLink> {
        self.link.as_ref()
    }

    /// The loaded program.
    pub fn program(&self) -> &Program {
        &self.prog
    }

    /// Direct frames of queue `queue` to the AF_XDP socket `fd`.
    pub fn set_socket(&self, queue: u32, fd: i32) -> Result<()> {
        self.xsks
            .update(&queue.to_ne_bytes(), &fd.to_ne_bytes(), Update::Any)
            .map_err(|e| e.context(format!("inserting the AF_XDP socket of queue {queue}")))
    }

    /// Stop directing frames of `queue` to a socket (they go to the kernel).
    pub fn clear_socket(&self, queue: u32) -> Result<()> {
        self.xsks.delete(&queue.to_ne_bytes()).map(drop)
    }

    /// Add a VIP. Returns false if it was already there.
    pub fn add_vip(&self, ip: IpAddr) -> Result<bool> {
        let _g = self.update.lock().unwrap_or_else(|p| p.into_inner());
        let k = vip_key(ip);
        if self.vips.lookup(&k)?.is_some() {
            return Ok(false);
        }
        self.vips
            .update(&k, &1u32.to_ne_bytes(), Update::Any)
            .map_err(|e| e.context(format!("adding VIP {ip}")))?;
        Ok(true)
    }

    /// Remove a VIP. Returns false if it was not there.
    pub fn remove_vip(&self, ip: IpAddr) -> Result<bool> {
        let _g = self.update.lock().unwrap_or_else(|p| p.into_inner());
        self.vips.delete(&vip_key(ip))
    }

    /// Make the VIP set exactly `vips`: adds the new ones first, then removes the old ones, so a
    /// VIP present before and after is never missing in between. Returns (added, removed).
    pub fn set_vips(&self, vips: &[IpAddr]) -> Result<(usize, usize)> {
        let _g = self.update.lock().unwrap_or_else(|p| p.into_inner());
        replace_vips(&self.vips, vips)
    }

    /// The current VIPs.
    pub fn vips(&self) -> Result<Vec<IpAddr>> {
        list_vips(&self.vips)
    }

    /// The program's counters, summed over CPUs.
    pub fn stats(&self) -> Result<XskStats> {
        let c = |i| self.stats.percpu_u64_sum(i);
        Ok(XskStats {
            not_ip: c(counter::NOT_IP)?,
            not_vip: c(counter::NOT_VIP)?,
            to_socket: c(counter::TO_SOCKET)?,
            no_socket: c(counter::NO_SOCKET)?,
            malformed: c(counter::MALFORMED)?,
        })
    }
}

/// Make the keys of a VIP map (16-byte keys, see [`vip_key`]; u32 values) exactly `vips`: adds
/// the new ones first, then removes the old ones, so a VIP present before and after is never
/// missing in between. Returns (added, removed). The caller serialises updates.
pub(crate) fn replace_vips(map: &Map, vips: &[IpAddr]) -> Result<(usize, usize)> {
    let want: std::collections::HashSet<[u8; 16]> = vips.iter().map(|&v| vip_key(v)).collect();
    let have: std::collections::HashSet<[u8; 16]> = map
        .keys()?
        .into_iter()
        .filter_map(|k| <[u8; 16]>::try_from(k.as_slice()).ok())
        .collect();
    let mut added = 0;
    for k in want.difference(&have) {
        map.update(k, &1u32.to_ne_bytes(), Update::Any)
            .map_err(|e| {
                e.context(format!(
                    "adding VIP {} (the map holds {} VIPs at most)",
                    key_vip(*k),
                    map.max_entries()
                ))
            })?;
        added += 1;
    }
    let mut removed = 0;
    for k in have.difference(&want) {
        if map.delete(k)? {
            removed += 1;
        }
    }
    Ok((added, removed))
}

/// The addresses in a VIP map, sorted.
pub(crate) fn list_vips(map: &Map) -> Result<Vec<IpAddr>> {
    let mut v: Vec<IpAddr> = map
        .keys()?
        .into_iter()
        .filter_map(|k| <[u8; 16]>::try_from(k.as_slice()).ok())
        .map(key_vip)
        .collect();
    v.sort();
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_map_both_families() {
        let v4: IpAddr = "203.0.113.10".parse().unwrap();
        let k = vip_key(v4);
        assert_eq!(&k[..12], &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff]);
        assert_eq!(&k[12..], &[203, 0, 113, 10]);
        assert_eq!(key_vip(k), v4);
        let v6: IpAddr = "2001:db8::10".parse().unwrap();
        assert_eq!(key_vip(vip_key(v6)), v6);
    }

    /// The stamp comes before the redirect, and its store is guarded by the metadata bounds check.
    fn check_stamp(d: &str) {
        let at = |needle: &str| d.find(needle).unwrap_or_else(|| panic!("{needle} in\n{d}"));
        assert!(at("call bpf_ktime_get_ns") < at("call bpf_xdp_adjust_meta"));
        assert!(at("call bpf_xdp_adjust_meta") < at("r2 = *(u32 *)(r6 +8)"));
        assert!(at("r2 = *(u32 *)(r6 +8)") < at("*(u64 *)(r2 +0) = r7"));
        assert!(at("*(u64 *)(r2 +0) = r7") < at("call bpf_redirect_map"));
        assert!(d.contains("r2 = -8"), "{d}");
    }

    #[test]
    fn program_assembles() {
        let p = program(3, 4, 5).unwrap();
        assert!(p.len() < 100, "{} slots", p.len());
        let d = crate::asm::disassemble(&p);
        assert!(d.contains("call bpf_redirect_map"));
        assert_eq!(d.matches("map_fd(").count(), 3);
        check_stamp(&d);
    }

    #[test]
    fn all_program_assembles_without_the_vip_map() {
        let p = program_all(4, 5).unwrap();
        assert!(p.len() < 48, "{} slots", p.len());
        let d = crate::asm::disassemble(&p);
        assert!(d.contains("call bpf_redirect_map"));
        assert!(!d.contains("map_fd(3)"));
        assert_eq!(d.matches("map_fd(").count(), 2);
        check_stamp(&d);
    }
}
