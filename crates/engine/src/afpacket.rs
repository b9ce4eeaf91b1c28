//! The AF_PACKET port: live frames from a Linux interface through a `TPACKET_V3` memory-mapped
//! receive ring, and batched transmission with `sendmmsg(2)`; the fallback where AF_XDP is not
//! available, and the port the end-to-end tests run on veth.
//!
//! ```text
//!   NIC / veth ──► kernel ──► PACKET_FANOUT (flow hash) ──► socket 0: RX ring ──► worker 0
//!                                                      └──► socket 1: RX ring ──► worker 1
//!   worker i ──► sendmmsg (≤ 32 frames, one syscall, qdisc bypassed) ──► interface
//! ```
//!
//! # Receive: `TPACKET_V3`
//! The ring is `block_count` blocks of `block_size` bytes shared with the kernel (`mmap`). The
//! kernel packs variable-length frames into the current block and hands the whole block to user
//! space when it is full or when `retire_timeout_ms` has passed since the block was opened;
//! [`AfPacketPort::rx_burst`] walks the frames of the oldest user-owned block and gives the block
//! back (status `TP_STATUS_KERNEL`, a release store) as soon as its last frame is copied. Receiving
//! is therefore **no system call at all**: one acquire load of a block status per burst, one copy
//! of each frame into a pipeline [`Packet`] (the price of a port-independent pipeline, see
//! `fp_pipeline::packet`). `rx_burst` never blocks; a thread with nothing to do may sleep in
//! [`AfPacketPort::wait_rx`] (`poll(2)`).
//!
//! Trade-off of V3: at low rates a frame waits until its block is retired, so the retire timeout is
//! the added latency (default 1 ms); the ring then holds `block_count` × timeout of traffic
//! (256 ms by default) before the kernel must drop, however little memory that traffic takes.
//! That is why the default ring is many small blocks (256 × 64 KiB) rather than few large ones,
//! and why a ring given as a byte budget ([`ring_shape`]) is cut into 16–64 KiB blocks (2 MiB:
//! 128 × 16 KiB). When every block is user-owned the kernel freezes the ring and drops; those drops
//! come back from `PACKET_STATISTICS` (which resets on read, so the port accumulates them) into
//! [`PortStats::rx_dropped`].
//!
//! # Receive times
//! Every frame gets its own [`Packet::ts_ns`]: the kernel's software receive stamp of that frame
//! (`tp_sec`/`tp_nsec` of its `tpacket3_hdr`, taken when the frame reached the socket's tap,
//! `CLOCK_REALTIME`), converted to `CLOCK_MONOTONIC` — the clock the engine's driver and the
//! pipeline's timeouts run on — with one offset per burst (`monotonic − realtime`, two vDSO reads,
//! no system call). So a stage sees the gaps between the frames of one burst (a Flowlet balancer
//! needs them), which a single clock reading per burst would erase. Each stamp is clamped to be
//! no earlier than the port's previous one (a realtime clock step must not reorder time) and no
//! later than the burst's monotonic reading; a frame without a stamp gets that reading.
//!
//! # Fan-out
//! With [`AfPacketConfig::fanout_group`] (or [`AfPacketPort::open_fanout`]), N sockets on one
//! interface form a `PACKET_FANOUT` group and the kernel spreads frames over them — by default
//! `PACKET_FANOUT_HASH`, the kernel's flow hash (`skb_get_hash`): every frame of a 5-tuple goes to
//! one socket, both directions of a connection to the same one (the hash is symmetric), and the
//! fragments of a datagram too, since the kernel's dissector hashes every IPv4 fragment (the first
//! included) by its addresses and protocol only. The hash seed is per boot, which is fine for
//! steering to workers inside one machine; placement decisions that must agree across balancers
//! (Maglev) use the project's pinned hashes, not this one.
//!
//! # What the port does not receive
//! `PACKET_IGNORE_OUTGOING` (and the group's `PACKET_FANOUT_FLAG_IGNORE_OUTGOING`) keep frames
//! *leaving* the interface out of the ring: neither the port's own transmissions nor the host
//! stack's. Frames are never seen before the socket is bound to the interface: it is created with
//! protocol 0 (receives nothing) and bound with `ETH_P_ALL` only after the ring exists.
//!
//! # What the host's stack does not receive
//! The socket gets a copy of each frame; the host's stack still gets the original and would
//! answer frames to a VIP it does not hold (ICMPv6 "unreachable route", RSTs) or forward them.
//! [`AfPacketDriver`] therefore attaches a tc ingress program for
//! [`Capture::Destinations`](crate::live::Capture::Destinations) that drops those frames after
//! the sockets (taps, served before tc ingress) have received them ([`fp_ebpf::shield`]). A port
//! opened directly with [`AfPacketPort::open`] attaches nothing.
//!
//! # Checksums: `TP_STATUS_CSUMNOTREADY`
//! A frame the kernel sent on a veth (or any device with TX checksum offload) carries only the
//! pseudo-header sum in its TCP/UDP checksum (`CHECKSUM_PARTIAL`; docs/platform.md, "Partial checksums on veth"). The
//! kernel marks such frames with `TP_STATUS_CSUMNOTREADY` in the ring's per-frame status word — the
//! same flag `PACKET_AUXDATA` delivers as a control message to `recvmsg` users; with a ring the
//! status word is where it arrives, so no auxdata is requested. With
//! [`AfPacketConfig::complete_checksums`] (the default) the port parses such a frame and
//! recomputes its L4 checksum with [`fp_wire::offload::fill_l4_checksum`], so the pipeline — and
//! any backend it forwards to — sees a valid checksum whatever the traffic source's offload
//! settings; frames without the flag are left untouched (no per-packet cost). Frames it cannot
//! complete (not TCP/UDP/ICMP, truncated) are delivered as they are and counted.
//!
//! Oversized frames — GSO/GRO super-frames from a sender with TSO on, larger than
//! [`MAX_FRAME`] — cannot be completed by re-segmenting here; they are dropped and counted
//! (`rx_oversize`). Run `ethtool -K DEV tx off` on kernel senders (it turns TSO off too) or
//! `ethtool -K DEV gro off` on the receiving interface to avoid them.
//!
//! # VLAN tags
//! The kernel strips an 802.1Q tag into the frame's metadata (`TP_STATUS_VLAN_VALID`,
//! `tp_vlan_tci`, `tp_vlan_tpid`); the port puts it back, so the pipeline sees the frame as it was
//! on the wire.
//!
//! # Transmit: `sendmmsg`
//! A burst becomes one `sendmmsg` call over an array of `mmsghdr`/`iovec` on the stack pointing
//! at the packets' frames (no copy in user space; the kernel copies into an skb). The socket is
//! bound, so no address is needed. `PACKET_QDISC_BYPASS` (default on) hands frames straight to the
//! driver, skipping the qdisc layer and the taps (tcpdump on the same interface does not see
//! them). A frame the kernel refuses (too big for the MTU, interface down) is dropped and counted;
//! if the socket's send buffer stays full for [`AfPacketConfig::tx_wait`], the rest of the burst is
//! dropped and counted in [`PortStats::tx_dropped`]. A `TPACKET` TX ring would save nothing here:
//! it still costs one copy and one `send` per batch.
//!
//! # Example
//!
//! ```no_run
//! use fp_engine::afpacket::{AfPacketConfig, AfPacketPort};
//! use fp_pipeline::packet::{burst, Pool};
//! use fp_engine::port::Port;
//!
//! // Two workers sharing eth0 by flow hash; each owns its port.
//! let ports = AfPacketPort::open_fanout("eth0", &AfPacketConfig::default(), 2)?;
//! for mut port in ports {
//!     std::thread::spawn(move || {
//!         let (mut pool, mut rx) = (Pool::new(1024), burst());
//!         loop {
//!             if port.rx_burst(&mut pool, &mut rx, 32) == 0 {
//!                 let _ = port.wait_rx(std::time::Duration::from_millis(10));
//!                 continue;
//!             }
//!             // ... process `rx` ...
//!             port.tx_burst(&mut rx, &mut pool); // send back out (drains `rx`)
//!         }
//!     });
//! }
//! # Ok::<(), fp_engine::afpacket::AfPacketError>(())
//! ```

use crate::port::{Port, PortStats, Wait};
use fp_pipeline::packet::{Packet, Pool, MAX_BURST, MAX_FRAME};
use fp_wire::{offload, PacketSummary};
use std::cell::Cell;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::time::Duration;

/// How the kernel spreads frames over the sockets of a fan-out group.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FanoutMode {
    /// `PACKET_FANOUT_HASH`: by the kernel's symmetric flow hash (all frames of a connection on
    /// one socket). What a balancer or switch with per-worker flow state needs.
    #[default]
    Hash,
    /// `PACKET_FANOUT_CPU`: by the CPU that received the frame.
    Cpu,
    /// `PACKET_FANOUT_LB`: round robin (no flow affinity).
    RoundRobin,
    /// `PACKET_FANOUT_QM`: by the receive queue the NIC recorded.
    QueueMapping,
}

impl FanoutMode {
    fn kernel_type(self) -> u32 {
        match self {
            FanoutMode::Hash => libc::PACKET_FANOUT_HASH,
            FanoutMode::Cpu => libc::PACKET_FANOUT_CPU,
            FanoutMode::RoundRobin => libc::PACKET_FANOUT_LB,
            FanoutMode::QueueMapping => libc::PACKET_FANOUT_QM,
        }
    }
}

/// Settings of an [`AfPacketPort`].
#[derive(Clone, Debug)]
pub struct AfPacketConfig {
    /// Join (or create) fan-out group `id` on the interface. Group ids are per network namespace;
    /// every member must use the same mode and flags. `None`: a socket of its own (but see
    /// [`AfPacketPort::open_fanout`], which picks a free id when this is `None`).
    pub fanout_group: Option<u16>,
    /// How the group spreads frames.
    pub fanout_mode: FanoutMode,
    /// Bytes per ring block: a power of two, a multiple of the page size.
    pub block_size: u32,
    /// Blocks in the ring (ring memory = `block_size × block_count`, per socket).
    pub block_count: u32,
    /// Nominal frame slot (multiple of 16); V3 packs frames by their real size, this only sizes
    /// the kernel's frame count.
    pub frame_size: u32,
    /// A block is handed to user space at the latest this long after it was opened (ms, ≥ 1).
    pub retire_timeout_ms: u32,
    /// Put the interface in promiscuous mode while the socket is open (the kernel counts
    /// requests: it reverts when the last socket asking for it closes, also on a crash).
    pub promisc: bool,
    /// Do not receive frames leaving the interface (own transmissions and the host's).
    pub ignore_outgoing: bool,
    /// Transmit straight to the driver (`PACKET_QDISC_BYPASS`).
    pub qdisc_bypass: bool,
    /// Complete partial TCP/UDP checksums (`TP_STATUS_CSUMNOTREADY`) on receive.
    pub complete_checksums: bool,
    /// Stamped into [`Packet::port`] of every received packet (the ingress port index).
    pub port_id: u16,
    /// How long a transmit may wait for socket buffer space before the rest of its burst is
    /// dropped (`SO_SNDTIMEO`; zero: never wait).
    pub tx_wait: Duration,
    /// Socket send buffer in bytes (`SO_SNDBUFFORCE`, else `SO_SNDBUF`); `None`: the system's.
    pub sndbuf: Option<u32>,
    /// Open the socket holding: a socket filter that drops every frame is attached before the
    /// socket binds, so it receives nothing (and its ring stays empty) until
    /// [`AfPacketPort::release_handle`]'s release removes it. A process taking over from another
    /// opens its sockets this way while the other still forwards.
    pub held: bool,
}

/// Block size and count for a receive ring of about `bytes`: at low rates every block is retired
/// after the retire timeout holding a few frames, so the ring's reach in time is its block count
/// × the timeout, not its size. The block size aims at 256 blocks within 16–64 KiB (16 KiB still
/// holds a 9000-byte jumbo frame): a 2 MiB ring is 128 × 16 KiB (128 ms at 1 ms), where 256 KiB
/// blocks would have made it 8 blocks, 8 ms; 16 MiB is 256 × 64 KiB; more is more 64 KiB blocks.
pub fn ring_shape(bytes: usize) -> (u32, u32) {
    let per_block = (bytes / 256).max(1);
    let size = (1usize << (usize::BITS - 1 - per_block.leading_zeros())).clamp(16 << 10, 64 << 10);
    (size as u32, (bytes / size).max(1) as u32)
}

impl Default for AfPacketConfig {
    fn default() -> Self {
        AfPacketConfig {
            fanout_group: None,
            fanout_mode: FanoutMode::Hash,
            block_size: 1 << 16,
            block_count: 256,
            frame_size: 2048,
            retire_timeout_ms: 1,
            promisc: false,
            ignore_outgoing: true,
            qdisc_bypass: true,
            complete_checksums: true,
            held: false,
            port_id: 0,
            tx_wait: Duration::from_millis(1),
            sndbuf: None,
        }
    }
}

/// Why a port could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum AfPacketError {
    /// No interface of that name in the calling thread's network namespace.
    #[error("AF_PACKET: no interface `{0}` in this network namespace")]
    NoSuchInterface(String),
    /// A system call failed (EPERM: AF_PACKET needs CAP_NET_RAW).
    #[error("AF_PACKET on `{ifname}`: {op}: {source}")]
    Sys {
        /// Interface.
        ifname: String,
        /// What was being done.
        op: &'static str,
        /// The error.
        source: io::Error,
    },
    /// A bad setting.
    #[error("AF_PACKET config: {0}")]
    Config(String),
}

/// Counters of an [`AfPacketPort`] ([`Port::stats`] folds them into [`PortStats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AfPacketStats {
    /// Frames delivered to the pipeline.
    pub rx: u64,
    /// Frames the kernel dropped because the ring was full (`tp_drops`).
    pub rx_ring_drops: u64,
    /// Times the kernel found the ring full and froze it (`tp_freeze_q_cnt`).
    pub rx_ring_freezes: u64,
    /// Frames dropped because they were larger than [`MAX_FRAME`] or truncated by the ring.
    pub rx_oversize: u64,
    /// Ring entries that did not make sense (bad offsets): the rest of their block was skipped.
    pub rx_ring_errors: u64,
    /// Frames that arrived with a partial L4 checksum (`TP_STATUS_CSUMNOTREADY`).
    pub rx_csum_partial: u64,
    /// ... of which the port completed the checksum.
    pub rx_csum_completed: u64,
    /// Frames whose stripped VLAN tag was put back.
    pub rx_vlan_restored: u64,
    /// Frames sent.
    pub tx: u64,
    /// Frames not sent (refused by the kernel, or the send buffer stayed full).
    pub tx_dropped: u64,
    /// The last transmit error (errno), 0 if none.
    pub tx_last_errno: i32,
}

/// Where the receive side stands in the ring.
#[derive(Clone, Copy, Debug, Default)]
struct Cursor {
    /// Block being read (or to be read next).
    block: usize,
    /// Frames of that block not yet read; 0 when the block has not been entered.
    left: u32,
    /// Offset of the next frame in the block.
    off: usize,
}

/// An AF_PACKET socket on one interface with a `TPACKET_V3` receive ring. See the
/// [module docs](self).
pub struct AfPacketPort {
    name: String,
    ifname: String,
    ifindex: u32,
    fanout: Option<u16>,
    cfg: AfPacketConfig,
    ring: sys::RxRing,
    sock: sys::Socket,
    cur: Cursor,
    st: AfPacketStats,
    /// Kernel drop/freeze counters accumulated by `stats()` (which takes `&self`).
    kernel: Cell<(u64, u64)>,
    /// The last receive stamp handed out: stamps never go back.
    last_ts: u64,
}

fn cfg_err(s: String) -> AfPacketError {
    AfPacketError::Config(s)
}

impl AfPacketPort {
    /// Open a port on interface `ifname` of the calling thread's network namespace.
    pub fn open(ifname: &str, cfg: &AfPacketConfig) -> Result<AfPacketPort, AfPacketError> {
        Self::open_inner(ifname, cfg, cfg.fanout_group.map(Join::Id))
    }

    /// Open `n` ports on `ifname` in one fan-out group (one per worker): the group
    /// `cfg.fanout_group`, or, when that is `None`, a group id the kernel picks unused
    /// (`PACKET_FANOUT_FLAG_UNIQUEID`), reported by [`AfPacketPort::fanout_group`].
    pub fn open_fanout(
        ifname: &str,
        cfg: &AfPacketConfig,
        n: usize,
    ) -> Result<Vec<AfPacketPort>, AfPacketError> {
        if n == 0 {
            return Err(cfg_err("open_fanout: zero sockets".into()));
        }
        let first = Self::open_inner(
            ifname,
            cfg,
            Some(cfg.fanout_group.map(Join::Id).unwrap_or(Join::Unique)),
        )?;
        let id = first.fanout.expect("fan-out member");
        let mut v = vec![first];
        for _ in 1..n {
            v.push(Self::open_inner(ifname, cfg, Some(Join::Id(id)))?);
        }
        Ok(v)
    }

    fn open_inner(
        ifname: &str,
        cfg: &AfPacketConfig,
        join: Option<Join>,
    ) -> Result<AfPacketPort, AfPacketError> {
        let page = sys::page_size();
        if !cfg.block_size.is_power_of_two() || !(cfg.block_size as usize).is_multiple_of(page) {
            return Err(cfg_err(format!(
                "block_size {} must be a power of two and a multiple of the page size {page}",
                cfg.block_size
            )));
        }
        if cfg.block_count == 0 {
            return Err(cfg_err("block_count must be at least 1".into()));
        }
        if cfg.frame_size < 128
            || !cfg.frame_size.is_multiple_of(16)
            || cfg.frame_size > cfg.block_size
        {
            return Err(cfg_err(format!(
                "frame_size {} must be a multiple of 16 in 128..=block_size",
                cfg.frame_size
            )));
        }
        let sys_err = |op: &'static str| {
            let ifname = ifname.to_string();
            move |source: io::Error| AfPacketError::Sys { ifname, op, source }
        };
        let ifindex = sys::if_index(ifname)
            .map_err(|_| AfPacketError::NoSuchInterface(ifname.to_string()))?;
        let sock = sys::Socket::new().map_err(sys_err("socket(AF_PACKET, SOCK_RAW)"))?;
        sock.set_int(
            libc::PACKET_VERSION,
            libc::tpacket_versions::TPACKET_V3 as i32,
        )
        .map_err(sys_err("PACKET_VERSION TPACKET_V3"))?;
        let frames_per_block = cfg.block_size / cfg.frame_size;
        let req = libc::tpacket_req3 {
            tp_block_size: cfg.block_size,
            tp_block_nr: cfg.block_count,
            tp_frame_size: cfg.frame_size,
            tp_frame_nr: frames_per_block * cfg.block_count,
            tp_retire_blk_tov: cfg.retire_timeout_ms.max(1),
            tp_sizeof_priv: 0,
            tp_feature_req_word: 0,
        };
        let ring = sys::RxRing::new(&sock, &req).map_err(sys_err("PACKET_RX_RING / mmap"))?;
        if cfg.ignore_outgoing {
            sock.set_int(libc::PACKET_IGNORE_OUTGOING, 1)
                .map_err(sys_err("PACKET_IGNORE_OUTGOING"))?;
        }
        if cfg.qdisc_bypass {
            sock.set_int(libc::PACKET_QDISC_BYPASS, 1)
                .map_err(sys_err("PACKET_QDISC_BYPASS"))?;
        }
        sock.set_send_timeout(cfg.tx_wait)
            .map_err(sys_err("SO_SNDTIMEO"))?;
        if let Some(b) = cfg.sndbuf {
            let b = b.min(i32::MAX as u32) as i32;
            if sock.set_sol_socket(libc::SO_SNDBUFFORCE, b).is_err() {
                sock.set_sol_socket(libc::SO_SNDBUF, b)
                    .map_err(sys_err("SO_SNDBUF"))?;
            }
        }
        if cfg.held {
            sock.drop_all()
                .map_err(sys_err("SO_ATTACH_FILTER (hold)"))?;
        }
        sock.bind(ifindex).map_err(sys_err("bind"))?;
        if cfg.promisc {
            sock.promisc(ifindex)
                .map_err(sys_err("PACKET_ADD_MEMBERSHIP promisc"))?;
        }
        let fanout = match join {
            None => None,
            Some(join) => {
                let mut flags = 0u32;
                if cfg.ignore_outgoing {
                    flags |= libc::PACKET_FANOUT_FLAG_IGNORE_OUTGOING;
                }
                let id = match join {
                    Join::Id(id) => id,
                    Join::Unique => {
                        flags |= libc::PACKET_FANOUT_FLAG_UNIQUEID;
                        0
                    }
                };
                let arg = u32::from(id) | ((cfg.fanout_mode.kernel_type() | flags) << 16);
                sock.set_int(libc::PACKET_FANOUT, arg as i32)
                    .map_err(sys_err(
                        "PACKET_FANOUT (mode and flags must match the group's)",
                    ))?;
                let got = sock
                    .get_int(libc::PACKET_FANOUT)
                    .map_err(sys_err("getsockopt PACKET_FANOUT"))?;
                Some((got as u32 & 0xffff) as u16)
            }
        };
        Ok(AfPacketPort {
            name: format!("afpacket:{ifname}"),
            ifname: ifname.to_string(),
            ifindex,
            fanout,
            cfg: cfg.clone(),
            ring,
            sock,
            cur: Cursor::default(),
            st: AfPacketStats::default(),
            kernel: Cell::new((0, 0)),
            last_ts: 0,
        })
    }

    /// What releases a socket opened with [`AfPacketConfig::held`]: removes its drop-everything
    /// filter (from any thread, while a worker owns the port). Releasing a socket that does not
    /// hold is harmless.
    pub fn release_handle(&self) -> io::Result<Release> {
        Ok(Release(self.sock.duplicate()?))
    }

    /// The interface.
    pub fn ifname(&self) -> &str {
        &self.ifname
    }

    /// The interface's index (in the namespace the port was opened in).
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// The fan-out group this socket belongs to.
    pub fn fanout_group(&self) -> Option<u16> {
        self.fanout
    }

    /// The settings it was opened with.
    pub fn config(&self) -> &AfPacketConfig {
        &self.cfg
    }

    /// Detailed counters (reads and accumulates the kernel's ring statistics).
    pub fn afp_stats(&self) -> AfPacketStats {
        let (mut drops, mut freezes) = self.kernel.get();
        if let Ok(k) = self.sock.packet_stats() {
            drops += u64::from(k.tp_drops);
            freezes += u64::from(k.tp_freeze_q_cnt);
            self.kernel.set((drops, freezes));
        }
        AfPacketStats {
            rx_ring_drops: drops,
            rx_ring_freezes: freezes,
            ..self.st
        }
    }

    /// True if a received frame is waiting (no system call).
    pub fn rx_ready(&self) -> bool {
        self.cur.left > 0 || self.ring.block(self.cur.block).is_some()
    }

    /// Sleep until a frame is waiting or `timeout` passes (`poll(2)`); returns whether one is.
    pub fn wait_rx(&self, timeout: Duration) -> io::Result<bool> {
        if self.rx_ready() {
            return Ok(true);
        }
        crate::sys::poll_readable(&[self.as_raw_fd()], timeout)?;
        Ok(self.rx_ready())
    }

    /// Give the current block back to the kernel and move to the next.
    #[inline]
    fn next_block(&mut self) {
        self.ring.release(self.cur.block);
        self.cur = Cursor {
            block: (self.cur.block + 1) % self.ring.blocks(),
            left: 0,
            off: 0,
        };
    }
}

enum Join {
    Id(u16),
    Unique,
}

// Offsets in `struct tpacket_block_desc` (`version`, `offset_to_priv`, then `tpacket_hdr_v1`).
const BD_NUM_PKTS: usize = 12;
const BD_FIRST: usize = 16;
// Offsets in `struct tpacket3_hdr`.
const H_NEXT: usize = 0;
const H_SEC: usize = 4;
const H_NSEC: usize = 8;
const H_SNAPLEN: usize = 12;
const H_LEN: usize = 16;
const H_STATUS: usize = 20;
const H_MAC: usize = 24;
const H_VLAN_TCI: usize = 32;
const H_VLAN_TPID: usize = 36;
const H_SIZE: usize = 48;

#[inline]
fn rd32(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

#[inline]
fn rd16(b: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([b[at], b[at + 1]])
}

/// One frame's place in its block, read from its `tpacket3_hdr`.
struct FrameRef {
    next: usize,
    data: std::ops::Range<usize>,
    wire_len: usize,
    status: u32,
    vlan: Option<(u16, u16)>,
    ts_ns: u64,
}

/// Read the frame header at `off` of `block`; `None` if it points outside the block.
#[inline]
fn frame_at(block: &[u8], off: usize) -> Option<FrameRef> {
    let h = block.get(off..off.checked_add(H_SIZE)?)?;
    let snap = rd32(h, H_SNAPLEN) as usize;
    let mac = off + rd16(h, H_MAC) as usize;
    let end = mac.checked_add(snap)?;
    if end > block.len() {
        return None;
    }
    let status = rd32(h, H_STATUS);
    let tci = rd32(h, H_VLAN_TCI) as u16;
    let vlan = if status & libc::TP_STATUS_VLAN_VALID != 0 || tci != 0 {
        let tpid = if status & libc::TP_STATUS_VLAN_TPID_VALID != 0 {
            rd16(h, H_VLAN_TPID)
        } else {
            0x8100
        };
        Some((tpid, tci))
    } else {
        None
    };
    Some(FrameRef {
        next: rd32(h, H_NEXT) as usize,
        data: mac..end,
        wire_len: rd32(h, H_LEN) as usize,
        status,
        vlan,
        ts_ns: u64::from(rd32(h, H_SEC)) * 1_000_000_000 + u64::from(rd32(h, H_NSEC)),
    })
}

/// The receive stamp of a frame on the monotonic clock: the kernel's realtime stamp `frame_real`
/// (0: none) moved by `offset` (`monotonic − realtime`, read once per burst), clamped to
/// `last..=now` so stamps never go back and never pass the burst's clock reading `now`.
#[inline]
fn receive_stamp(frame_real: u64, offset: i64, last: u64, now: u64) -> u64 {
    let t = i64::try_from(frame_real)
        .ok()
        .filter(|&r| r > 0)
        .and_then(|r| u64::try_from(r.saturating_add(offset)).ok())
        .filter(|&t| t > 0)
        .unwrap_or(now);
    t.max(last).min(now)
}

/// Complete the L4 checksum of a `CHECKSUM_PARTIAL` frame. Returns whether it was completed.
#[inline(never)]
fn complete_checksum(frame: &mut [u8]) -> bool {
    match PacketSummary::parse(frame) {
        Ok(s) => offload::fill_l4_checksum(frame, &s).is_ok(),
        Err(_) => false,
    }
}

impl Port for AfPacketPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn rx_burst(&mut self, pool: &mut Pool, out: &mut Vec<Packet>, max: usize) -> usize {
        // (monotonic now, monotonic − realtime): read once per burst, and only when a frame is
        // there (an idle worker polls often).
        let mut clock: Option<(u64, i64)> = None;
        let mut n = 0;
        // Bounded: each pass either delivers a frame, drops one, or leaves a block.
        while n < max {
            let Some(block) = self.ring.block(self.cur.block) else {
                break; // the kernel still owns it: nothing more to read
            };
            if self.cur.left == 0 {
                // Entering a block the kernel has just handed over.
                let num = rd32(block, BD_NUM_PKTS);
                if num == 0 {
                    self.next_block();
                    continue;
                }
                self.cur.left = num;
                self.cur.off = rd32(block, BD_FIRST) as usize;
            }
            let Some(f) = frame_at(block, self.cur.off) else {
                self.st.rx_ring_errors += 1;
                self.next_block();
                continue;
            };
            let extra = if f.vlan.is_some() { 4 } else { 0 };
            let len = f.data.len() + extra;
            if len > MAX_FRAME || f.wire_len > f.data.len() || f.data.len() < 14 {
                self.st.rx_oversize += 1;
            } else {
                let Some(mut p) = pool.get() else {
                    break; // no buffer: leave the frame in the ring for the next burst
                };
                let src = &block[f.data.clone()];
                let area = p.rx_area();
                match f.vlan {
                    None => area[..len].copy_from_slice(src),
                    Some((tpid, tci)) => {
                        area[..12].copy_from_slice(&src[..12]);
                        area[12..14].copy_from_slice(&tpid.to_be_bytes());
                        area[14..16].copy_from_slice(&tci.to_be_bytes());
                        area[16..len].copy_from_slice(&src[12..]);
                        self.st.rx_vlan_restored += 1;
                    }
                }
                p.set_len(len);
                let (now, offset) = *clock.get_or_insert_with(|| {
                    let real = crate::sys::realtime_ns();
                    let mono = crate::sys::monotonic_ns();
                    (mono, (mono as i64).wrapping_sub(real as i64))
                });
                p.ts_ns = receive_stamp(f.ts_ns, offset, self.last_ts, now);
                self.last_ts = p.ts_ns;
                p.port = self.cfg.port_id;
                if f.status & libc::TP_STATUS_CSUMNOTREADY != 0 {
                    self.st.rx_csum_partial += 1;
                    if self.cfg.complete_checksums && complete_checksum(p.data_mut()) {
                        self.st.rx_csum_completed += 1;
                    }
                }
                out.push(p);
                n += 1;
            }
            self.cur.left -= 1;
            self.cur.off += f.next;
            if self.cur.left == 0 || (f.next == 0 && self.cur.left > 0) {
                // Last frame (or a chain that ends early): the block goes back at once.
                if self.cur.left > 0 {
                    self.st.rx_ring_errors += 1;
                }
                self.next_block();
            }
        }
        self.st.rx += n as u64;
        n
    }

    fn tx_burst(&mut self, batch: &mut Vec<Packet>, pool: &mut Pool) -> usize {
        let mut sent = 0;
        for chunk in batch.chunks(MAX_BURST) {
            let r = self.sock.send_batch(chunk);
            sent += r.sent;
            self.st.tx_dropped += (chunk.len() - r.sent) as u64;
            if r.errno != 0 {
                self.st.tx_last_errno = r.errno;
            }
        }
        self.st.tx += sent as u64;
        pool.put_all(batch);
        sent
    }

    fn stats(&self) -> PortStats {
        let a = self.afp_stats();
        PortStats {
            rx: a.rx,
            tx: a.tx,
            rx_dropped: a.rx_ring_drops + a.rx_oversize,
            tx_dropped: a.tx_dropped,
        }
    }

    fn wait(&self) -> Wait {
        Wait::Readable(self.sock.as_fd().as_raw_fd())
    }

    fn rx_ready(&self) -> bool {
        AfPacketPort::rx_ready(self)
    }
}

impl AsFd for AfPacketPort {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }
}

impl AsRawFd for AfPacketPort {
    fn as_raw_fd(&self) -> RawFd {
        self.sock.as_fd().as_raw_fd()
    }
}

impl std::fmt::Debug for AfPacketPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AfPacketPort")
            .field("ifname", &self.ifname)
            .field("ifindex", &self.ifindex)
            .field("fanout", &self.fanout)
            .finish_non_exhaustive()
    }
}

/// Releases an AF_PACKET socket opened holding ([`AfPacketConfig::held`]).
pub struct Release(sys::Socket);

impl Release {
    /// Remove the socket's drop-everything filter: it receives from now on.
    pub fn release(&self) -> io::Result<()> {
        self.0.detach_filter()
    }
}

/// The AF_PACKET port driver ([`crate::live::DRIVERS`]): per interface, one socket per worker in
/// a `PACKET_FANOUT_HASH` group, so the kernel's flow hash spreads flows over the workers. It
/// delivers every frame of the interface to the application (it cannot filter by destination;
/// the application does), promiscuously when every frame is asked for.
///
/// With [`Capture::Destinations`](crate::live::Capture::Destinations) it also shields the host's
/// own stack from those destinations: a tc ingress program ([`fp_ebpf::shield`], attached through
/// a tcx link, else a `clsact` filter) drops frames addressed to them after the sockets — taps,
/// served before tc ingress — have received them, so the host neither answers VIP traffic
/// (ICMPv6 "unreachable route" for an IPv6 VIP it has no route for, RSTs for a VIP on its
/// loopback) nor forwards it. The returned control's destination setter updates the program's
/// map; dropping the control detaches it.
pub struct AfPacketDriver;

impl crate::live::PortDriver for AfPacketDriver {
    fn name(&self) -> &'static str {
        "af_packet"
    }

    fn aliases(&self) -> &'static [&'static str] {
        &["afpacket", "packet"]
    }

    fn filters_destinations(&self) -> bool {
        false
    }

    fn holds(&self) -> bool {
        true
    }

    fn open(
        &self,
        spec: &crate::live::LiveSpec,
    ) -> Result<crate::live::Opened, crate::live::LiveError> {
        use crate::live::{Capture, LiveControl, LiveError, Opened};
        let workers = spec.workers.max(1);
        let mut ports: Vec<Vec<Box<dyn Port>>> = (0..workers).map(|_| Vec::new()).collect();
        let mut groups = Vec::new();
        // Dropped on any error below, `control` detaches the shields attached so far.
        let mut control = LiveControl::default();
        let mut shielded = Vec::new();
        for (i, ifname) in spec.interfaces.iter().enumerate() {
            let mut cfg = AfPacketConfig {
                promisc: spec.capture == Capture::All,
                port_id: i as u16,
                held: spec.hold,
                ..AfPacketConfig::default()
            };
            if let Some(bytes) = spec.ring_bytes {
                (cfg.block_size, cfg.block_count) = ring_shape(bytes);
            }
            let socks =
                AfPacketPort::open_fanout(ifname, &cfg, workers).map_err(|e| LiveError::Open {
                    interface: ifname.clone(),
                    message: format!("opening AF_PACKET sockets: {e}"),
                })?;
            groups.push(socks[0].fanout_group().unwrap_or(0));
            if spec.hold {
                for s in &socks {
                    let r = s.release_handle().map_err(|e| LiveError::Open {
                        interface: ifname.clone(),
                        message: format!("duplicating a socket to release it later: {e}"),
                    })?;
                    control.releases.push(Box::new(move || r.release()));
                }
            }
            for (w, s) in socks.into_iter().enumerate() {
                ports[w].push(Box::new(s));
            }
            if let Capture::Destinations(dsts) = &spec.capture {
                let shield =
                    shield_host_stack(ifname, dsts).map_err(|message| LiveError::Open {
                        interface: ifname.clone(),
                        message,
                    })?;
                let how = shield.attachment().map_or("-".into(), |a| a.to_string());
                shielded.push(match shield.tcx_refused() {
                    None => format!("{ifname}: {how}"),
                    Some(why) => format!("{ifname}: {how}, tcx refused: {why}"),
                });
                let shield = std::sync::Arc::new(shield);
                let setter = shield.clone();
                control
                    .setters
                    .push(Box::new(move |d: &[std::net::IpAddr]| {
                        setter
                            .set_vips(d)
                            .map(|_| ())
                            .map_err(|source| LiveError::Destinations {
                                map: "tc shield's destination map",
                                source,
                            })
                    }));
                control.keep(shield);
            }
        }
        let description = format!(
            "AF_PACKET on {}: {} socket(s) each in fan-out group(s) {:?} (flow hash){}",
            spec.interfaces.join(","),
            workers,
            groups,
            if spec.capture == Capture::All {
                ", promiscuous".to_string()
            } else {
                format!(
                    "; the host's stack shielded from the destinations by tc program {} ({})",
                    fp_ebpf::shield::PROG_NAME,
                    shielded.join(", ")
                )
            }
        );
        Ok(Opened {
            ports,
            control,
            description,
        })
    }
}

/// Load the VIP shield for `dsts` and attach it to the ingress of `ifname` (in the calling
/// thread's network namespace): a tcx link, else a `clsact` filter.
fn shield_host_stack(
    ifname: &str,
    dsts: &[std::net::IpAddr],
) -> Result<fp_ebpf::shield::VipShield, String> {
    use fp_ebpf::shield::{AttachChoice, VipShield};
    let ifindex = fp_ebpf::ifindex(ifname).map_err(|e| e.to_string())?;
    let capacity = u32::try_from(dsts.len()).unwrap_or(u32::MAX).max(1024);
    let mut shield = VipShield::load(capacity).map_err(|e| {
        format!("loading the tc program that keeps VIP frames from the host's stack: {e}")
    })?;
    shield
        .set_vips(dsts)
        .map_err(|e| format!("filling the tc shield's destination map: {e}"))?;
    shield.attach(ifindex, AttachChoice::Auto).map_err(|e| {
        format!("attaching the tc program that keeps VIP frames from the host's stack: {e}")
    })?;
    Ok(shield)
}

/// The system calls and the shared ring: the only `unsafe` code of the AF_PACKET port.
#[allow(unsafe_code)]
mod sys {
    use fp_pipeline::packet::{Packet, MAX_BURST};
    use std::io;
    use std::mem::{size_of, zeroed};
    use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Duration;

    fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(r)
        }
    }

    pub fn page_size() -> usize {
        // SAFETY: sysconf only reads its integer argument.
        let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if p > 0 {
            p as usize
        } else {
            4096
        }
    }

    /// The index of interface `name` in the calling thread's network namespace.
    pub fn if_index(name: &str) -> io::Result<u32> {
        let c = std::ffi::CString::new(name)
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: `c` is a NUL-terminated string that lives across the call, which only reads it.
        let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
        if i == 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(i)
        }
    }

    /// An AF_PACKET socket.
    pub struct Socket(OwnedFd);

    /// What one `send_batch` did.
    pub struct Sent {
        pub sent: usize,
        pub errno: i32,
    }

    impl Socket {
        /// A raw packet socket with protocol 0: it receives nothing until `bind`.
        pub fn new() -> io::Result<Socket> {
            // SAFETY: socket(2) takes integers; a non-negative result is a new descriptor that we
            // own from here on (OwnedFd closes it).
            unsafe {
                let fd = cvt(libc::socket(
                    libc::AF_PACKET,
                    libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                    0,
                ))?;
                Ok(Socket(OwnedFd::from_raw_fd(fd)))
            }
        }

        fn raw(&self) -> libc::c_int {
            self.0.as_raw_fd()
        }

        fn setopt<T>(&self, level: libc::c_int, opt: libc::c_int, v: &T) -> io::Result<()> {
            // SAFETY: `v` points to a live, initialised T of the size we pass; setsockopt only
            // reads that many bytes, and the kernel validates the option's expected size.
            cvt(unsafe {
                libc::setsockopt(
                    self.raw(),
                    level,
                    opt,
                    (v as *const T).cast(),
                    size_of::<T>() as libc::socklen_t,
                )
            })
            .map(|_| ())
        }

        /// `getsockopt(SOL_PACKET, opt)` into a `T` that is valid for any bit pattern.
        fn getopt<T: Copy>(&self, opt: libc::c_int) -> io::Result<T> {
            // SAFETY: only instantiated with plain C structs / integers (valid when zeroed and for
            // any bytes the kernel writes); `len` tells the kernel the buffer size so it cannot
            // write past `v`.
            unsafe {
                let mut v: T = zeroed();
                let mut len = size_of::<T>() as libc::socklen_t;
                cvt(libc::getsockopt(
                    self.raw(),
                    libc::SOL_PACKET,
                    opt,
                    (&mut v as *mut T).cast(),
                    &mut len,
                ))?;
                Ok(v)
            }
        }

        /// Another descriptor of the same socket (its options are the socket's).
        pub fn duplicate(&self) -> io::Result<Socket> {
            Ok(Socket(self.0.try_clone()?))
        }

        /// Attach a classic BPF socket filter that accepts nothing (`ret #0`): frames are dropped
        /// before they reach the ring or the fan-out group's accounting of this socket.
        pub fn drop_all(&self) -> io::Result<()> {
            let mut code = [libc::sock_filter {
                code: (libc::BPF_RET | libc::BPF_K) as u16,
                jt: 0,
                jf: 0,
                k: 0,
            }];
            let prog = libc::sock_fprog {
                len: 1,
                filter: code.as_mut_ptr(),
            };
            self.setopt(libc::SOL_SOCKET, libc::SO_ATTACH_FILTER, &prog)
        }

        /// Remove the socket filter, if any.
        pub fn detach_filter(&self) -> io::Result<()> {
            match self.setopt(libc::SOL_SOCKET, libc::SO_DETACH_FILTER, &0i32) {
                // ENOENT: no filter attached.
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
                r => r,
            }
        }

        pub fn set_int(&self, opt: libc::c_int, v: libc::c_int) -> io::Result<()> {
            self.setopt(libc::SOL_PACKET, opt, &v)
        }

        pub fn get_int(&self, opt: libc::c_int) -> io::Result<libc::c_int> {
            self.getopt(opt)
        }

        pub fn set_sol_socket(&self, opt: libc::c_int, v: libc::c_int) -> io::Result<()> {
            self.setopt(libc::SOL_SOCKET, opt, &v)
        }

        pub fn set_send_timeout(&self, d: Duration) -> io::Result<()> {
            let tv = libc::timeval {
                tv_sec: d.as_secs() as libc::time_t,
                tv_usec: d.subsec_micros() as libc::suseconds_t,
            };
            self.setopt(libc::SOL_SOCKET, libc::SO_SNDTIMEO, &tv)
        }

        pub fn packet_stats(&self) -> io::Result<libc::tpacket_stats_v3> {
            self.getopt(libc::PACKET_STATISTICS)
        }

        /// Bind to `ifindex`, receiving every protocol.
        pub fn bind(&self, ifindex: u32) -> io::Result<()> {
            // SAFETY: all-zero is a valid sockaddr_ll; we fill the fields bind needs.
            let mut sa: libc::sockaddr_ll = unsafe { zeroed() };
            sa.sll_family = libc::AF_PACKET as u16;
            sa.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
            sa.sll_ifindex = ifindex as i32;
            // SAFETY: `sa` is a live sockaddr_ll and we pass its exact size; bind only reads it.
            cvt(unsafe {
                libc::bind(
                    self.raw(),
                    (&sa as *const libc::sockaddr_ll).cast(),
                    size_of::<libc::sockaddr_ll>() as libc::socklen_t,
                )
            })
            .map(|_| ())
        }

        pub fn promisc(&self, ifindex: u32) -> io::Result<()> {
            // SAFETY: all-zero is a valid packet_mreq.
            let mut m: libc::packet_mreq = unsafe { zeroed() };
            m.mr_ifindex = ifindex as i32;
            m.mr_type = libc::PACKET_MR_PROMISC as u16;
            self.setopt(libc::SOL_PACKET, libc::PACKET_ADD_MEMBERSHIP, &m)
        }

        /// Send up to MAX_BURST frames with `sendmmsg`. A message the kernel refuses is skipped
        /// (dropped); when the send buffer stays full (EAGAIN), the rest is dropped.
        pub fn send_batch(&self, pkts: &[Packet]) -> Sent {
            let k = pkts.len().min(MAX_BURST);
            // SAFETY: all-zero iovec and mmsghdr are valid (null pointers, zero lengths).
            let mut iov: [libc::iovec; MAX_BURST] = unsafe { zeroed() };
            // SAFETY: as above.
            let mut msgs: [libc::mmsghdr; MAX_BURST] = unsafe { zeroed() };
            for i in 0..k {
                let d = pkts[i].data();
                iov[i].iov_base = d.as_ptr() as *mut libc::c_void;
                iov[i].iov_len = d.len();
                msgs[i].msg_hdr.msg_iov = &mut iov[i];
                msgs[i].msg_hdr.msg_iovlen = 1;
            }
            let (mut done, mut sent, mut errno) = (0usize, 0usize, 0i32);
            while done < k {
                // SAFETY: msgs[done..k] are initialised mmsghdrs whose iovecs point into the
                // frames of `pkts`, which are borrowed (alive, unmoved) for this whole call; the
                // kernel only reads the frames and writes msg_len of each mmsghdr, within the
                // `k - done` entries we pass. No msg_name: the socket is bound.
                let r = unsafe {
                    libc::sendmmsg(
                        self.raw(),
                        msgs.as_mut_ptr().add(done),
                        (k - done) as libc::c_uint,
                        0,
                    )
                };
                if r > 0 {
                    done += r as usize;
                    sent += r as usize;
                    continue;
                }
                let e = io::Error::last_os_error().raw_os_error().unwrap_or(0);
                match e {
                    libc::EINTR => continue,
                    libc::EAGAIN => {
                        errno = e;
                        break; // the send buffer stayed full for tx_wait: drop the rest
                    }
                    _ => {
                        errno = e;
                        done += 1; // this frame was refused: drop it, send the others
                    }
                }
            }
            Sent { sent, errno }
        }
    }

    impl AsFd for Socket {
        fn as_fd(&self) -> BorrowedFd<'_> {
            self.0.as_fd()
        }
    }

    /// The mapped `TPACKET_V3` receive ring.
    pub struct RxRing {
        base: *mut u8,
        len: usize,
        block_size: usize,
        blocks: usize,
    }

    // SAFETY: the mapping is owned by this value alone (no other Rust value points into it) and
    // is unmapped only by its Drop; moving it to another thread moves that ownership. The kernel
    // side of the sharing is synchronised through the block status words (see `block`).
    unsafe impl Send for RxRing {}

    impl RxRing {
        /// Ask the kernel for the ring (`PACKET_RX_RING`) and map it.
        pub fn new(sock: &Socket, req: &libc::tpacket_req3) -> io::Result<RxRing> {
            sock.setopt(libc::SOL_PACKET, libc::PACKET_RX_RING, req)?;
            let block_size = req.tp_block_size as usize;
            let blocks = req.tp_block_nr as usize;
            let len = block_size * blocks;
            // SAFETY: a fresh shared mapping of the socket's ring, of exactly the ring's size, at
            // an address the kernel chooses; nothing else is affected.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED | libc::MAP_POPULATE,
                    sock.raw(),
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                return Err(io::Error::last_os_error());
            }
            Ok(RxRing {
                base: p.cast(),
                len,
                block_size,
                blocks,
            })
        }

        pub fn blocks(&self) -> usize {
            self.blocks
        }

        fn status(&self, i: usize) -> &AtomicU32 {
            assert!(i < self.blocks);
            // SAFETY: block i starts at base + i * block_size (page aligned, inside the mapping);
            // its descriptor's `block_status` is the u32 at offset 8 (after `version` and
            // `offset_to_priv`), so the pointer is in bounds and 4-byte aligned. The kernel and we
            // access that word only atomically (the kernel with smp_wmb + store / smp_rmb), and the
            // reference lives no longer than `&self`, i.e. than the mapping.
            unsafe { &*(self.base.add(i * self.block_size + 8) as *const AtomicU32) }
        }

        /// The bytes of block `i` if user space owns it (`TP_STATUS_USER`), else `None`.
        ///
        /// Once the kernel has set a block's status to USER (after writing its frames: the acquire
        /// load pairs with the kernel's write barrier before that store), it does not write the
        /// block again until `release` gives it back. `release` takes `&mut self`, so no slice
        /// returned here can outlive the ownership it relies on.
        #[inline]
        pub fn block(&self, i: usize) -> Option<&[u8]> {
            if self.status(i).load(Ordering::Acquire) & libc::TP_STATUS_USER == 0 {
                return None;
            }
            // SAFETY: block i lies inside the mapping (i < blocks, checked in `status`); user
            // space owns it (above), so the kernel does not write it while the returned shared
            // slice, bounded by `&self`, exists (see the doc comment).
            Some(unsafe {
                std::slice::from_raw_parts(self.base.add(i * self.block_size), self.block_size)
            })
        }

        /// Give block `i` back to the kernel.
        #[inline]
        pub fn release(&mut self, i: usize) {
            // Release: our reads of the block happen before the kernel may overwrite it.
            self.status(i)
                .store(libc::TP_STATUS_KERNEL, Ordering::Release);
        }
    }

    impl Drop for RxRing {
        fn drop(&mut self) {
            // SAFETY: `base`/`len` are exactly the mapping created in `new`, unmapped only here;
            // no slice into it can outlive `self`.
            unsafe {
                libc::munmap(self.base.cast(), self.len);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_shape_keeps_many_blocks_within_the_budget() {
        // Default-sized budget: the default shape.
        let d = AfPacketConfig::default();
        assert_eq!(ring_shape(16 << 20), (d.block_size, d.block_count));
        // 2 MiB: 128 blocks of 16 KiB (not 8 of 256 KiB); 4 MiB: 256 of 16 KiB.
        assert_eq!(ring_shape(2 << 20), (16 << 10, 128));
        assert_eq!(ring_shape(4 << 20), (16 << 10, 256));
        // Large budgets: blocks stop at 64 KiB, the count grows.
        assert_eq!(ring_shape(64 << 20), (64 << 10, 1024));
        // Tiny budgets still give one block that holds a jumbo frame.
        assert_eq!(ring_shape(1000), (16 << 10, 1));
        for bytes in [1usize, 4096, 100_000, 3 << 20, 17 << 20, 1 << 30] {
            let (size, count) = ring_shape(bytes);
            assert!(size.is_power_of_two() && (16 << 10..=64 << 10).contains(&size));
            assert!(count >= 1 && (count as usize * size as usize <= bytes || count == 1));
        }
    }

    fn hdr(next: u32, snap: u32, len: u32, status: u32, mac: u16, tci: u32) -> Vec<u8> {
        let mut h = vec![0u8; H_SIZE];
        h[H_NEXT..H_NEXT + 4].copy_from_slice(&next.to_ne_bytes());
        h[H_SEC..H_SEC + 4].copy_from_slice(&2u32.to_ne_bytes());
        h[H_NSEC..H_NSEC + 4].copy_from_slice(&5u32.to_ne_bytes());
        h[H_SNAPLEN..H_SNAPLEN + 4].copy_from_slice(&snap.to_ne_bytes());
        h[H_LEN..H_LEN + 4].copy_from_slice(&len.to_ne_bytes());
        h[H_STATUS..H_STATUS + 4].copy_from_slice(&status.to_ne_bytes());
        h[H_MAC..H_MAC + 2].copy_from_slice(&mac.to_ne_bytes());
        h[H_VLAN_TCI..H_VLAN_TCI + 4].copy_from_slice(&tci.to_ne_bytes());
        h
    }

    #[test]
    fn header_offsets_match_libc() {
        assert_eq!(std::mem::size_of::<libc::tpacket3_hdr>(), H_SIZE);
        assert_eq!(
            std::mem::offset_of!(libc::tpacket3_hdr, tp_status),
            H_STATUS
        );
        assert_eq!(std::mem::offset_of!(libc::tpacket3_hdr, tp_mac), H_MAC);
        assert_eq!(
            std::mem::offset_of!(libc::tpacket3_hdr, tp_snaplen),
            H_SNAPLEN
        );
        assert_eq!(std::mem::offset_of!(libc::tpacket3_hdr, hv1), 28);
        assert_eq!(
            std::mem::offset_of!(libc::tpacket_hdr_variant1, tp_vlan_tci) + 28,
            H_VLAN_TCI
        );
        assert_eq!(
            std::mem::offset_of!(libc::tpacket_hdr_variant1, tp_vlan_tpid) + 28,
            H_VLAN_TPID
        );
        assert_eq!(std::mem::offset_of!(libc::tpacket_block_desc, hdr), 8);
        assert_eq!(
            std::mem::offset_of!(libc::tpacket_hdr_v1, num_pkts) + 8,
            BD_NUM_PKTS
        );
        assert_eq!(
            std::mem::offset_of!(libc::tpacket_hdr_v1, offset_to_first_pkt) + 8,
            BD_FIRST
        );
    }

    #[test]
    fn frame_headers_are_bounds_checked() {
        let mut block = hdr(0, 60, 60, libc::TP_STATUS_USER, 64, 0);
        block.resize(64 + 60, 0xab);
        let f = frame_at(&block, 0).unwrap();
        assert_eq!(f.data, 64..124);
        assert!(f.vlan.is_none());
        assert_eq!(f.ts_ns, 2_000_000_005);
        // Data running past the block, a header past the end, an overflowing offset.
        let mut short = hdr(0, 61, 61, 0, 64, 0);
        short.resize(64 + 60, 0);
        assert!(frame_at(&short, 0).is_none());
        assert!(frame_at(&block, 100).is_none());
        assert!(frame_at(&block, usize::MAX - 10).is_none());
        // A stripped VLAN tag is reported with the default TPID.
        let mut v = hdr(0, 60, 60, libc::TP_STATUS_VLAN_VALID, 64, 0x0123);
        v.resize(124, 0);
        assert_eq!(frame_at(&v, 0).unwrap().vlan, Some((0x8100, 0x0123)));
    }

    #[test]
    fn receive_stamps_are_converted_and_clamped() {
        // realtime 1_000_000, monotonic 400 at the same instant: offset -999_600.
        let offset = 400 - 1_000_000;
        let now = 1_000;
        // A frame stamped 300 ns before the clock reading keeps its distance.
        assert_eq!(receive_stamp(1_000_000 - 300 + 600, offset, 0, now), 700);
        // Never earlier than the previous stamp, never later than now.
        assert_eq!(receive_stamp(1_000_000 - 300 + 600, offset, 800, now), 800);
        assert_eq!(receive_stamp(2_000_000, offset, 0, now), now);
        // No stamp, or one that converts to nothing sensible: the burst's reading.
        assert_eq!(receive_stamp(0, offset, 0, now), now);
        assert_eq!(receive_stamp(5, offset, 0, now), now);
        assert_eq!(receive_stamp(u64::MAX, offset, 0, now), now);
        assert_eq!(receive_stamp(u64::MAX, i64::MIN, 3, now), now);
        // A stamp older than the previous one (a realtime step back) does not reorder.
        let mut last = 0;
        for real in [999_900, 999_950, 999_700, 999_990] {
            let t = receive_stamp(real, offset, last, now);
            assert!(t >= last && t <= now);
            last = t;
        }
        assert_eq!(last, 390);
    }

    #[test]
    fn bad_configs_are_refused() {
        let bad = |c: AfPacketConfig| {
            matches!(AfPacketPort::open("lo", &c), Err(AfPacketError::Config(_)))
        };
        assert!(bad(AfPacketConfig {
            block_size: 5000,
            ..Default::default()
        }));
        assert!(bad(AfPacketConfig {
            block_count: 0,
            ..Default::default()
        }));
        assert!(bad(AfPacketConfig {
            frame_size: 100,
            ..Default::default()
        }));
        assert!(matches!(
            AfPacketPort::open("fp-no-such-if", &AfPacketConfig::default()),
            Err(AfPacketError::NoSuchInterface(_))
        ));
    }
}
