//! AF_XDP port: one socket per (interface, receive queue), frames steered to it by flowplane's
//! XDP program ([`fp_ebpf::xsk`]) when they are addressed to a VIP; everything else stays with the
//! kernel (ARP, the host's own traffic, health-check replies). A switch port instead steers every
//! frame to the sockets ([`AfXdpConfig::steering`] = [`Steering::All`]).
//!
//! ```text
//!            NIC / veth queue q
//!                  │ XDP program: dst ∈ VIPs? ──no──► kernel stack
//!                  │ yes: bpf_redirect_map(xsks, q)
//!                  ▼
//!   fill ring ──► [ UMEM: 4096 frames × 2048 B ] ──► rx ring ──► rx_burst: copy into Packet
//!   (rx frames        (huge pages when available)                 buffers, frame back to fill
//!    given back)                                                   ring at once
//!   tx_burst: copy Packet into a free UMEM frame ──► tx ring ──► kernel sends ──► completion ring
//!                                                                 (frame back to the free list)
//! ```
//!
//! **Design.** The UMEM is split in two halves: rx frames, which live in the fill ring, the rx
//! ring, or (briefly) in `rx_burst`; and tx frames, on a free list, in the tx ring, or awaiting
//! completion. Because every received frame is copied into a pipeline [`Packet`] (the pipeline is
//! port-independent, see `fp_pipeline::packet`), an rx frame goes back to the fill ring in the same
//! burst it arrived in, so the fill ring never runs dry while the pipeline holds packets. The copy
//! is at most 2 KiB per packet; the rings, descriptors and UMEM are touched with no system call.
//!
//! **Rings.** Each ring is a single-producer single-consumer queue shared with the kernel: a
//! producer index, a consumer index and an array of descriptors in memory mapped from the socket.
//! User space reads the kernel's index with `Acquire` (so the descriptors the kernel wrote before
//! publishing the index are visible) and publishes its own with `Release` (so the descriptors it
//! wrote, or finished reading, are complete before the kernel sees the index) — the same protocol
//! as libxdp's `xsk_ring_*` functions, written with Rust atomics. Indices are cached; the shared
//! index is read only when the cached one says the ring is empty (or full).
//!
//! **Modes.** The program is attached natively (in the driver) when the driver supports it, else in
//! generic (skb) mode: see [`fp_ebpf::xsk::ModeChoice`]. The socket binds with `XDP_ZEROCOPY`
//! first (when the program runs natively) and falls back to `XDP_COPY`, reporting which
//! ([`AfXdpInfo::zero_copy`]). On veth, zero-copy is refused (`EOPNOTSUPP`) and copy mode works in
//! both attach modes. In copy mode the kernel transmits only inside `sendto`, so `tx_burst` kicks
//! the socket whenever descriptors are outstanding; in zero-copy mode only when the kernel asks
//! (`XDP_RING_NEED_WAKEUP`).
//!
//! **Receive times.** Every frame gets its own [`Packet::ts_ns`]: flowplane's XDP program reads
//! `bpf_ktime_get_ns()` (`CLOCK_MONOTONIC`, the engine's clock) for each frame it steers and puts
//! it in 8 bytes of XDP metadata in front of the frame ([`fp_ebpf::xsk::META_LEN`]); the kernel
//! copies the metadata with the frame into the UMEM (copy mode) or the program writes it there
//! (zero-copy), so it is the u64 right before the descriptor's address. The socket is registered
//! with no UMEM headroom and the kernel puts a frame `XDP_PACKET_HEADROOM` (256) bytes into its
//! chunk, so that u64 always lies inside the frame's own chunk (checked per frame anyway).
//! `rx_burst` reads it, zeroes it before the chunk goes back to the fill ring (a frame that
//! arrives without metadata then reads 0, "no stamp", never a stale time), and clamps it to be no
//! earlier than the port's previous stamp and no later than one clock reading per burst, which is
//! also what a frame without a stamp gets. So a stage sees the gaps between the frames of one
//! burst (a Flowlet balancer needs them).
//!
//! **Checksums.** AF_XDP frames carry no checksum metadata. Frames a *kernel* sends over a veth
//! carry only the pseudo-header part of their TCP/UDP checksum (`CHECKSUM_PARTIAL`), which an
//! AF_XDP port cannot tell from a corrupt checksum. This port therefore does not fix checksums: on
//! veth, traffic sources must run with tx checksum offload off (`ethtool -K IF tx off`). Frames
//! from a real NIC are complete. (The AF_PACKET port can fix them: it sees `TP_STATUS_CSUMNOTREADY`.)
//!
//! **Fewer workers than queues.** An AF_XDP socket receives only from the queue it is bound to,
//! so every receive queue needs one, or the frames the NIC (or the sending veth) hashes to it are
//! not seen. When there are fewer workers than queues, a worker's port on an interface is an
//! [`AfXdpQueues`]: the sockets of queues `w, w + workers, …` polled in turn (one `epoll`
//! descriptor to sleep on), transmitting on each in turn.
//!
//! **Namespaces.** [`AfXdpPort::open`] works on the interface of the calling thread's network
//! namespace (run the process with `ip netns exec`, or call it from a thread that entered the
//! namespace with `setns`). The port may then be moved to any thread.
//!
//! # Example
//!
//! ```no_run
//! use fp_engine::afxdp::{AfXdpConfig, AfXdpPort};
//! use fp_pipeline::packet::{burst, Pool};
//! use fp_engine::port::Port;
//!
//! let cfg = AfXdpConfig { vips: vec!["203.0.113.10".parse().unwrap()], ..Default::default() };
//! let mut port = AfXdpPort::open("eth0", 0, &cfg)?;
//! println!("{}", port.info());
//! let (mut pool, mut pkts) = (Pool::new(4096), burst());
//! loop {
//!     if port.rx_burst(&mut pool, &mut pkts, 32) > 0 {
//!         port.tx_burst(&mut pkts, &mut pool); // a reflector
//!     }
//! }
//! # Ok::<(), fp_engine::afxdp::AfXdpError>(())
//! ```

use crate::port::{Port, PortStats, Wait};
use fp_ebpf::xsk::{XskRedirect, XskStats};
use fp_pipeline::packet::{Packet, Pool, MAX_FRAME};
use std::fmt;
use std::io;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use fp_ebpf::xsk::{ModeChoice, Steering};
pub use fp_ebpf::XdpMode;

/// How the socket binds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum BindMode {
    /// Zero-copy if the driver supports it (only with a natively attached program), else copy.
    #[default]
    Auto,
    /// Copy mode only (`XDP_COPY`).
    Copy,
    /// Zero-copy only (`XDP_ZEROCOPY`): fails where the driver has none.
    ZeroCopy,
}

/// Settings of an AF_XDP port.
#[derive(Clone, Debug)]
pub struct AfXdpConfig {
    /// Destinations to steer to the socket; the rest goes to the kernel. Must be empty with
    /// [`Steering::All`].
    pub vips: Vec<IpAddr>,
    /// Which frames go to the sockets: VIP traffic (default, the load balancer) or every frame
    /// (a switch port, which owns the interface).
    pub steering: Steering,
    /// Where the XDP program runs.
    pub mode: ModeChoice,
    /// Copy or zero-copy.
    pub bind: BindMode,
    /// UMEM frames (half for receiving, half for sending); a power of two.
    pub frames: u32,
    /// Bytes per frame: 2048 or 4096.
    pub frame_size: u32,
    /// Entries of each of the four rings; a power of two, at most `frames / 2`.
    pub ring_size: u32,
    /// Put the UMEM in 2 MiB pages when the system has them (else advise transparent huge
    /// pages, which its shared memory gets where `shmem_enabled` allows them).
    pub huge_pages: bool,
    /// Capacity of the VIP map.
    pub max_vips: u32,
    /// Capacity of the socket map (queue indices `0..max_queues`).
    pub max_queues: u32,
}

impl Default for AfXdpConfig {
    fn default() -> Self {
        AfXdpConfig {
            vips: Vec::new(),
            steering: Steering::Vips,
            mode: ModeChoice::Auto,
            bind: BindMode::Auto,
            frames: 4096,
            frame_size: 2048,
            ring_size: 2048,
            huge_pages: true,
            max_vips: 1024,
            max_queues: 64,
        }
    }
}

/// Why a port could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum AfXdpError {
    /// The interface does not exist in this network namespace.
    #[error("interface {name:?}: {source}")]
    Interface {
        /// Interface name.
        name: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// Loading or attaching the XDP program, or updating its maps.
    #[error(transparent)]
    Ebpf(#[from] fp_ebpf::Error),
    /// A socket operation failed.
    #[error("AF_XDP socket on {ifname} queue {queue}: {op}: {source}")]
    Socket {
        /// Interface name.
        ifname: String,
        /// Queue.
        queue: u32,
        /// What was being done.
        op: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// Inconsistent settings.
    #[error("AF_XDP configuration: {0}")]
    Config(String),
}

/// Which pages back the UMEM.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UmemPages {
    /// Explicit 2 MiB pages (`MAP_HUGETLB`).
    HugeTlb,
    /// Shared memory advised for transparent huge pages (the system's `shmem_enabled` allows
    /// them).
    Transparent,
    /// 4 KiB pages.
    Normal,
}

/// What a port got: attach mode, bind mode, memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AfXdpInfo {
    /// Interface name.
    pub ifname: String,
    /// Interface index.
    pub ifindex: u32,
    /// Receive queue.
    pub queue: u32,
    /// Where the XDP program runs.
    pub xdp_mode: XdpMode,
    /// Whether the socket is bound in zero-copy mode.
    pub zero_copy: bool,
    /// Why zero-copy was not used, if it was tried and refused.
    pub zero_copy_refused: Option<String>,
    /// UMEM pages.
    pub umem_pages: UmemPages,
    /// UMEM frames.
    pub frames: u32,
    /// Frame size.
    pub frame_size: u32,
}

impl fmt::Display for AfXdpInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "AF_XDP {} (ifindex {}) queue {}: XDP {}, {} mode, UMEM {} x {} B in {:?} pages",
            self.ifname,
            self.ifindex,
            self.queue,
            self.xdp_mode,
            if self.zero_copy { "zero-copy" } else { "copy" },
            self.frames,
            self.frame_size,
            self.umem_pages
        )?;
        if let Some(why) = &self.zero_copy_refused {
            write!(f, " (zero-copy refused: {why})")?;
        }
        Ok(())
    }
}

/// The kernel's counters of one socket (`XDP_STATISTICS`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XskSocketStats {
    /// Frames dropped for lack of a fill-ring frame or for being too large.
    pub rx_dropped: u64,
    /// Invalid descriptors on the fill ring.
    pub rx_invalid_descs: u64,
    /// Invalid descriptors on the tx ring.
    pub tx_invalid_descs: u64,
    /// Frames dropped because the rx ring was full.
    pub rx_ring_full: u64,
    /// Times the kernel found the fill ring empty.
    pub rx_fill_ring_empty_descs: u64,
    /// Times the kernel found the tx ring empty.
    pub tx_ring_empty_descs: u64,
}

/// Control of the VIP set and the program counters of one interface, shared by its ports. Clone
/// it for the control thread.
#[derive(Clone, Debug)]
pub struct VipControl(Arc<XskRedirect>);

impl VipControl {
    /// Make the VIP set exactly `vips` (new ones are added before old ones are removed). Returns
    /// (added, removed).
    pub fn set(&self, vips: &[IpAddr]) -> Result<(usize, usize), AfXdpError> {
        Ok(self.0.set_vips(vips)?)
    }

    /// Add one VIP; false if it was there.
    pub fn add(&self, vip: IpAddr) -> Result<bool, AfXdpError> {
        Ok(self.0.add_vip(vip)?)
    }

    /// Remove one VIP; false if it was not there.
    pub fn remove(&self, vip: IpAddr) -> Result<bool, AfXdpError> {
        Ok(self.0.remove_vip(vip)?)
    }

    /// The current VIPs, sorted.
    pub fn list(&self) -> Result<Vec<IpAddr>, AfXdpError> {
        Ok(self.0.vips()?)
    }

    /// The XDP program's counters (summed over CPUs and the interface's queues).
    pub fn program_stats(&self) -> Result<XskStats, AfXdpError> {
        Ok(self.0.stats()?)
    }

    /// Kernel id of the XDP program.
    pub fn program_id(&self) -> Result<u32, AfXdpError> {
        Ok(self.0.program().info()?.id)
    }
}

/// Number of receive queues of `ifname` (in the calling thread's network namespace), from the
/// driver's channel counts (`ethtool -l`): one AF_XDP port per queue covers all traffic.
pub fn rx_queue_count(ifname: &str) -> io::Result<u32> {
    sys::rx_queue_count(ifname)
}

/// Most frames taken from the completion ring per call.
const COMPLETION_BATCH: u32 = 256;

/// An AF_XDP socket on one queue, as a [`Port`].
pub struct AfXdpPort {
    name: String,
    info: AfXdpInfo,
    xsk: sys::Xsk,
    redirect: Arc<XskRedirect>,
    /// Free tx frames (UMEM offsets).
    tx_free: Vec<u64>,
    /// Received frames to give back to the fill ring.
    refill: Vec<u64>,
    frame_mask: u64,
    stats: PortStats,
    /// The last receive stamp handed out: stamps never go back.
    last_ts: u64,
    /// Handed to another process: dropping leaves the socket in the program's map.
    handed: bool,
}

impl fmt::Debug for AfXdpPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AfXdpPort")
            .field("info", &self.info)
            .field("stats", &self.stats)
            .finish()
    }
}

impl AfXdpPort {
    /// Open a port on queue `queue` of `ifname`: load the XDP program, create its maps, fill the
    /// VIP map, attach the program, bind the socket and insert it in the socket map. Dropping the
    /// port undoes all of it.
    pub fn open(ifname: &str, queue: u32, cfg: &AfXdpConfig) -> Result<AfXdpPort, AfXdpError> {
        let mut v = Self::open_queues(ifname, &[queue], cfg)?;
        Ok(v.pop().expect("one port per queue"))
    }

    /// Open one port per queue in `queues`, sharing one XDP program and VIP map. The program is
    /// detached when the last of them is dropped.
    pub fn open_queues(
        ifname: &str,
        queues: &[u32],
        cfg: &AfXdpConfig,
    ) -> Result<Vec<AfXdpPort>, AfXdpError> {
        check_config(cfg, queues)?;
        let ifindex = fp_ebpf::ifindex(ifname).map_err(|e| AfXdpError::Interface {
            name: ifname.into(),
            source: io::Error::from_raw_os_error(e.errno().unwrap_or(libc::ENODEV)),
        })?;
        let mut redirect = XskRedirect::load_steering(cfg.steering, cfg.max_vips, cfg.max_queues)?;
        redirect.set_vips(&cfg.vips)?;
        let xdp_mode = redirect.attach(ifindex, cfg.mode)?;
        let redirect = Arc::new(redirect);
        let mut ports = Vec::with_capacity(queues.len());
        for &q in queues {
            ports.push(Self::bind_one(
                ifname,
                ifindex,
                q,
                cfg,
                xdp_mode,
                redirect.clone(),
            )?);
        }
        Ok(ports)
    }

    fn bind_one(
        ifname: &str,
        ifindex: u32,
        queue: u32,
        cfg: &AfXdpConfig,
        xdp_mode: XdpMode,
        redirect: Arc<XskRedirect>,
    ) -> Result<AfXdpPort, AfXdpError> {
        let sock_err = |op: &str, source: io::Error| AfXdpError::Socket {
            ifname: ifname.into(),
            queue,
            op: op.into(),
            source,
        };
        let umem_len = cfg.frames as usize * cfg.frame_size as usize;
        let umem = sys::Umem::new(umem_len, cfg.huge_pages)
            .map_err(|e| sock_err("mapping the UMEM", e))?;
        let try_zc = match cfg.bind {
            BindMode::Copy => false,
            BindMode::ZeroCopy => true,
            BindMode::Auto => xdp_mode == XdpMode::Native,
        };
        let rx_frames = cfg.frames / 2;
        let geometry = sys::Geometry {
            frame_size: cfg.frame_size,
            ring_size: cfg.ring_size,
            ifindex,
            queue,
        };
        // A queue whose previous socket was closed just now is released by the kernel a moment
        // later (after an RCU grace period): `bind` answers EBUSY meanwhile, so try again briefly.
        let open = |mut umem, zero_copy| {
            let deadline = Instant::now() + Duration::from_secs(2);
            loop {
                match sys::Xsk::open(umem, &geometry, zero_copy, rx_frames) {
                    Err((u, e))
                        if e.raw_os_error() == Some(libc::EBUSY) && Instant::now() < deadline =>
                    {
                        umem = u;
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    r => return r,
                }
            }
        };
        let mut zero_copy_refused = None;
        let (umem, xsk) = if try_zc {
            match open(umem, true) {
                Ok(x) => x,
                Err((umem, e)) if cfg.bind == BindMode::Auto => {
                    zero_copy_refused = Some(e.to_string());
                    open(umem, false).map_err(|(_, e)| sock_err("binding in copy mode", e))?
                }
                Err((_, e)) => return Err(sock_err("binding in zero-copy mode", e)),
            }
        } else {
            open(umem, false).map_err(|(_, e)| sock_err("binding in copy mode", e))?
        };
        let xsk = xsk.with_umem(umem);
        redirect
            .set_socket(queue, xsk.raw_fd())
            .map_err(AfXdpError::Ebpf)?;
        let info = AfXdpInfo {
            ifname: ifname.into(),
            ifindex,
            queue,
            xdp_mode,
            zero_copy: xsk.zero_copy(),
            zero_copy_refused,
            umem_pages: xsk.umem_pages(),
            frames: cfg.frames,
            frame_size: cfg.frame_size,
        };
        let tx_free = (rx_frames..cfg.frames)
            .map(|i| i as u64 * cfg.frame_size as u64)
            .collect();
        Ok(AfXdpPort {
            name: format!("afxdp:{ifname}:{queue}"),
            info,
            xsk,
            redirect,
            tx_free,
            refill: Vec::with_capacity(cfg.ring_size as usize),
            frame_mask: !(cfg.frame_size as u64 - 1),
            stats: PortStats::default(),
            last_ts: 0,
            handed: false,
        })
    }

    /// What the port got (modes, memory).
    pub fn info(&self) -> &AfXdpInfo {
        &self.info
    }

    /// Control of the VIP set (shared by all ports of the interface).
    pub fn vip_control(&self) -> VipControl {
        VipControl(self.redirect.clone())
    }

    /// The kernel's counters for this socket.
    pub fn socket_stats(&self) -> XskSocketStats {
        self.xsk.statistics().unwrap_or_default()
    }

    /// Block until a frame is ready to receive or `timeout` passes (for idle workers; a busy
    /// worker just calls `rx_burst`). Returns whether a frame is ready.
    pub fn wait_rx(&self, timeout: Duration) -> bool {
        crate::sys::poll_readable(&[self.xsk.raw_fd()], timeout).unwrap_or(false)
    }

    /// The receive stamp the XDP program left in the [`fp_ebpf::xsk::META_LEN`] bytes before the
    /// frame at UMEM address `addr` (in chunk `chunk`), 0 if none; the slot is zeroed, so that
    /// the chunk's next frame never shows this stamp.
    #[inline]
    fn take_stamp(&mut self, addr: u64, chunk: u64) -> u64 {
        const META: u64 = fp_ebpf::xsk::META_LEN as u64;
        if addr - chunk < META {
            return 0; // no room in front of the frame inside its chunk: never stamped
        }
        let umem = self.xsk.umem_mut();
        let stamp = umem.read_u64(addr - META).unwrap_or(0);
        if stamp != 0 {
            umem.write_u64(addr - META, 0);
        }
        stamp
    }

    /// Give received frames back to the fill ring.
    fn refill(&mut self) {
        if self.refill.is_empty() {
            return;
        }
        let n = self.xsk.fill.free(self.refill.len() as u32) as usize;
        let n = n.min(self.refill.len());
        for (i, &a) in self.refill[..n].iter().enumerate() {
            self.xsk.fill.write_addr(i as u32, a);
        }
        self.xsk.fill.submit(n as u32);
        self.refill.drain(..n);
        if self.xsk.fill.needs_wakeup() {
            self.xsk.kick_rx();
        }
    }

    /// Take finished tx frames back from the completion ring.
    fn reclaim(&mut self) {
        let n = self.xsk.comp.available(COMPLETION_BATCH);
        for i in 0..n {
            let a = self.xsk.comp.read_addr(i);
            self.tx_free.push(a & self.frame_mask);
        }
        self.xsk.comp.release(n);
    }

    /// Have the kernel transmit outstanding descriptors (copy mode transmits only in `sendto`).
    fn kick_tx_if_needed(&mut self) {
        if self.xsk.tx.outstanding() > 0 && (!self.info.zero_copy || self.xsk.tx.needs_wakeup()) {
            self.xsk.kick_tx();
        }
    }
}

impl Port for AfXdpPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn rx_burst(&mut self, pool: &mut Pool, out: &mut Vec<Packet>, max: usize) -> usize {
        let avail = self.xsk.rx.available(max as u32);
        if avail == 0 {
            // Descriptors left on the tx ring by an earlier burst (copy mode transmits only
            // inside sendto, a limited number per call) are pushed out while idle.
            self.kick_tx_if_needed();
            return 0;
        }
        // After `available` (an acquire load of the kernel's index): every stamp of this burst's
        // frames was taken before this reading.
        let now = crate::sys::monotonic_ns();
        let mut taken = 0u32;
        let mut delivered = 0usize;
        while taken < avail {
            let (addr, len) = self.xsk.rx.read_desc(taken);
            let len = len as usize;
            let chunk = addr & self.frame_mask;
            if len > MAX_FRAME {
                // Still take its stamp out of the chunk.
                self.take_stamp(addr, chunk);
                self.stats.rx_dropped += 1;
            } else {
                let Some(mut p) = pool.get() else { break };
                let stamp = self.take_stamp(addr, chunk);
                self.xsk.umem().copy_out(addr, &mut p.rx_area()[..len]);
                p.set_len(len);
                p.ts_ns = clamp_stamp(stamp, self.last_ts, now);
                self.last_ts = p.ts_ns;
                out.push(p);
                delivered += 1;
            }
            self.refill.push(chunk);
            taken += 1;
        }
        self.xsk.rx.release(taken);
        self.refill();
        self.stats.rx += delivered as u64;
        delivered
    }

    fn tx_burst(&mut self, batch: &mut Vec<Packet>, pool: &mut Pool) -> usize {
        self.reclaim();
        let room = self.xsk.tx.free(batch.len() as u32) as usize;
        let frame_size = self.info.frame_size as usize;
        let mut sent = 0usize;
        for p in batch.drain(..) {
            let ok = sent < room && p.len() <= frame_size && !p.is_empty();
            match (ok, if ok { self.tx_free.pop() } else { None }) {
                (true, Some(addr)) => {
                    self.xsk.umem_mut().copy_in(addr, p.data());
                    self.xsk.tx.write_desc(sent as u32, addr, p.len() as u32);
                    sent += 1;
                }
                _ => self.stats.tx_dropped += 1,
            }
            pool.put(p);
        }
        self.xsk.tx.submit(sent as u32);
        self.kick_tx_if_needed();
        self.stats.tx += sent as u64;
        sent
    }

    fn flush(&mut self) -> io::Result<()> {
        // Wait (briefly) until the kernel has taken every descriptor.
        for _ in 0..2000 {
            self.reclaim();
            if self.xsk.tx.outstanding() == 0 {
                return Ok(());
            }
            self.xsk.kick_tx();
            std::thread::sleep(Duration::from_micros(50));
        }
        Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("{}: the kernel did not drain the tx ring", self.name),
        ))
    }

    fn stats(&self) -> PortStats {
        let k = self.socket_stats();
        PortStats {
            rx: self.stats.rx,
            tx: self.stats.tx,
            rx_dropped: self.stats.rx_dropped + k.rx_dropped + k.rx_ring_full,
            tx_dropped: self.stats.tx_dropped + k.tx_invalid_descs,
        }
    }

    fn wait(&self) -> Wait {
        Wait::Readable(self.xsk.raw_fd())
    }

    fn hand_off(&self, to: &mut crate::live::Handoff) -> io::Result<()> {
        handoff::put_port(self, to)
    }

    fn handed_over(&mut self) {
        self.handed = true;
        self.redirect.leave_attached();
    }
}

impl std::os::fd::AsFd for AfXdpPort {
    /// The socket, for `poll`/`epoll` across several ports (readable: frames on the rx ring).
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.xsk.as_fd()
    }
}

impl Drop for AfXdpPort {
    fn drop(&mut self) {
        // Stop steering frames to this socket before it closes; the program itself is detached
        // when the last port of the interface drops its `Arc<XskRedirect>`. A socket handed to
        // another process stays in the map: that process receives on it now.
        if !self.handed {
            let _ = self.redirect.clear_socket(self.info.queue);
        }
    }
}

/// The sockets of several receive queues of one interface as one [`Port`], for a worker that
/// serves more than one queue. Receives from each socket in turn (starting one further every
/// burst, so no queue is favoured), transmits whole bursts on each socket in turn, and sleeps on
/// one `epoll` descriptor that is readable when any socket is.
pub struct AfXdpQueues {
    name: String,
    ports: Vec<AfXdpPort>,
    next_rx: usize,
    next_tx: usize,
    epoll: std::os::fd::OwnedFd,
}

impl fmt::Debug for AfXdpQueues {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AfXdpQueues")
            .field("name", &self.name)
            .field("ports", &self.ports)
            .finish()
    }
}

impl AfXdpQueues {
    /// Group `ports` (sockets of one interface, at least one).
    pub fn new(ports: Vec<AfXdpPort>) -> io::Result<AfXdpQueues> {
        let Some(first) = ports.first() else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "an AF_XDP queue group needs at least one socket",
            ));
        };
        let fds: Vec<i32> = ports.iter().map(|p| p.xsk.raw_fd()).collect();
        let queues: Vec<String> = ports.iter().map(|p| p.info.queue.to_string()).collect();
        let name = format!("afxdp:{}:{}", first.info.ifname, queues.join("+"));
        Ok(AfXdpQueues {
            name,
            epoll: sys::epoll_over(&fds)?,
            ports,
            next_rx: 0,
            next_tx: 0,
        })
    }

    /// The sockets, one per queue.
    pub fn queues(&self) -> &[AfXdpPort] {
        &self.ports
    }
}

impl Port for AfXdpQueues {
    fn name(&self) -> &str {
        &self.name
    }

    fn rx_burst(&mut self, pool: &mut Pool, out: &mut Vec<Packet>, max: usize) -> usize {
        let k = self.ports.len();
        let mut got = 0;
        for j in 0..k {
            if got >= max {
                break;
            }
            got += self.ports[(self.next_rx + j) % k].rx_burst(pool, out, max - got);
        }
        self.next_rx = (self.next_rx + 1) % k;
        got
    }

    fn tx_burst(&mut self, batch: &mut Vec<Packet>, pool: &mut Pool) -> usize {
        let i = self.next_tx;
        self.next_tx = (i + 1) % self.ports.len();
        self.ports[i].tx_burst(batch, pool)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.ports.iter_mut().try_for_each(|p| p.flush())
    }

    fn stats(&self) -> PortStats {
        let mut s = PortStats::default();
        for p in &self.ports {
            s.add(&p.stats());
        }
        s
    }

    fn wait(&self) -> Wait {
        use std::os::fd::AsRawFd;
        Wait::Readable(self.epoll.as_raw_fd())
    }

    fn hand_off(&self, to: &mut crate::live::Handoff) -> io::Result<()> {
        self.ports.iter().try_for_each(|p| p.hand_off(to))
    }

    fn handed_over(&mut self) {
        self.ports.iter_mut().for_each(|p| p.handed_over());
    }
}

/// A frame's receive time: its stamp (0: none, then the burst's clock reading `now`), no earlier
/// than the port's previous stamp `last` and no later than `now`.
#[inline]
fn clamp_stamp(stamp: u64, last: u64, now: u64) -> u64 {
    let t = if stamp == 0 { now } else { stamp };
    t.max(last).min(now)
}

fn check_config(cfg: &AfXdpConfig, queues: &[u32]) -> Result<(), AfXdpError> {
    let bad = |s: String| Err(AfXdpError::Config(s));
    if queues.is_empty() {
        return bad("no queues given".into());
    }
    if cfg.steering == Steering::All && !cfg.vips.is_empty() {
        return bad(format!(
            "vips ({} given) and steering = All exclude each other: All steers every frame",
            cfg.vips.len()
        ));
    }
    if !cfg.frames.is_power_of_two() || cfg.frames < 16 {
        return bad(format!(
            "frames = {} must be a power of two >= 16",
            cfg.frames
        ));
    }
    if cfg.frame_size != 2048 && cfg.frame_size != 4096 {
        return bad(format!(
            "frame_size = {} must be 2048 or 4096",
            cfg.frame_size
        ));
    }
    if !cfg.ring_size.is_power_of_two() || cfg.ring_size > cfg.frames / 2 {
        return bad(format!(
            "ring_size = {} must be a power of two <= frames / 2 = {}",
            cfg.ring_size,
            cfg.frames / 2
        ));
    }
    if let Some(q) = queues.iter().find(|&&q| q >= cfg.max_queues) {
        return bad(format!(
            "queue {q} is beyond max_queues = {}",
            cfg.max_queues
        ));
    }
    Ok(())
}

/// The AF_XDP port driver ([`crate::live::DRIVERS`]): per interface, one socket per receive
/// queue, and flowplane's XDP program steering either the frames to the wanted destinations (the
/// rest stays with the kernel) or every frame. Workers are capped by the interface with the
/// fewest queues (a worker must be able to send on every interface); a worker with more than one
/// queue of an interface gets them as one [`AfXdpQueues`] port (queue `q` to worker
/// `q % workers`), so no queue is left without a socket.
pub struct AfXdpDriver;

impl crate::live::PortDriver for AfXdpDriver {
    fn name(&self) -> &'static str {
        "af_xdp"
    }

    fn aliases(&self) -> &'static [&'static str] {
        &["afxdp", "xdp"]
    }

    fn filters_destinations(&self) -> bool {
        true
    }

    fn hands_off(&self) -> bool {
        true
    }

    fn adopt(
        &self,
        spec: &crate::live::LiveSpec,
        handoff: crate::live::Handoff,
    ) -> Result<crate::live::Opened, crate::live::LiveError> {
        handoff::adopt(spec, handoff)
    }

    fn workers(&self, spec: &crate::live::LiveSpec) -> Result<usize, crate::live::LiveError> {
        let mut queues = u32::MAX;
        for ifname in &spec.interfaces {
            let q = rx_queue_count(ifname).map_err(|e| crate::live::LiveError::Open {
                interface: ifname.clone(),
                message: format!("reading its queue count: {e}"),
            })?;
            queues = queues.min(q.max(1));
        }
        Ok((spec.workers.max(1) as u32).min(queues) as usize)
    }

    fn open(
        &self,
        spec: &crate::live::LiveSpec,
    ) -> Result<crate::live::Opened, crate::live::LiveError> {
        use crate::live::{is_promisc, set_promisc, Capture, LiveControl, LiveError, Opened};
        let open_err = |ifname: &str, message: String| LiveError::Open {
            interface: ifname.to_string(),
            message,
        };
        let mut counts = Vec::with_capacity(spec.interfaces.len());
        for ifname in &spec.interfaces {
            let q = rx_queue_count(ifname)
                .map_err(|e| open_err(ifname, format!("reading its queue count: {e}")))?;
            counts.push(q.max(1));
        }
        let queues = counts.iter().copied().min().unwrap_or(1);
        let workers = (spec.workers.max(1) as u32).min(queues);
        let cfg = match &spec.capture {
            Capture::Destinations(d) => AfXdpConfig {
                vips: d.clone(),
                mode: spec.xdp_mode,
                ..AfXdpConfig::default()
            },
            Capture::All => AfXdpConfig {
                steering: Steering::All,
                mode: spec.xdp_mode,
                ..AfXdpConfig::default()
            },
        };
        let mut ports: Vec<Vec<Box<dyn Port>>> = (0..workers).map(|_| Vec::new()).collect();
        // Dropped on any error below, `control` takes the interfaces set promiscuous so far out
        // of promiscuous mode again.
        let mut control = LiveControl::new(Vec::new(), Vec::new());
        let mut info = String::new();
        for (ifname, &count) in spec.interfaces.iter().zip(&counts) {
            let qs: Vec<u32> = (0..count).collect();
            let socks = AfXdpPort::open_queues(ifname, &qs, &cfg)
                .map_err(|e| open_err(ifname, format!("opening AF_XDP sockets: {e}")))?;
            if info.is_empty() {
                info = socks[0].info().to_string();
            }
            assign(spec, ifname, socks, &mut ports, &mut control)?;
            // A NIC filters unicast frames for other MACs unless promiscuous.
            if spec.capture == Capture::All && !is_promisc(ifname)? {
                set_promisc(ifname, true)?;
                control.promisc_set.push(ifname.clone());
            }
        }
        let description = format!(
            "AF_XDP on {}: {workers} worker(s) over {} queue(s){}; {info}",
            spec.interfaces.join(","),
            counts
                .iter()
                .map(|c| c.to_string())
                .collect::<Vec<_>>()
                .join("/"),
            if spec.capture == Capture::All {
                ", every frame steered to the sockets, promiscuous"
            } else {
                ""
            }
        );
        Ok(Opened {
            ports,
            control,
            description,
        })
    }
}

/// Give the sockets `socks` of interface `ifname` (one per queue, in queue order) to the
/// workers of `ports` (queue `q` to worker `q % workers`, several of a worker as one
/// [`AfXdpQueues`]), and let `control` change the interface's destinations.
fn assign(
    spec: &crate::live::LiveSpec,
    ifname: &str,
    socks: Vec<AfXdpPort>,
    ports: &mut [Vec<Box<dyn Port>>],
    control: &mut crate::live::LiveControl,
) -> Result<(), crate::live::LiveError> {
    use crate::live::{Capture, LiveError};
    if matches!(spec.capture, Capture::Destinations(_)) {
        if let Some(first) = socks.first() {
            let vc = first.vip_control();
            control.setters.push(Box::new(move |d: &[IpAddr]| {
                vc.0.set_vips(d)
                    .map(|_| ())
                    .map_err(|source| LiveError::Destinations {
                        map: "XDP destination map",
                        source,
                    })
            }));
        }
    }
    let workers = ports.len();
    let mut mine: Vec<Vec<AfXdpPort>> = (0..workers).map(|_| Vec::new()).collect();
    for (q, s) in socks.into_iter().enumerate() {
        mine[q % workers].push(s);
    }
    for (w, mut socks) in mine.into_iter().enumerate() {
        if socks.len() == 1 {
            ports[w].push(Box::new(socks.pop().expect("one socket")));
        } else {
            let group = AfXdpQueues::new(socks).map_err(|e| LiveError::Open {
                interface: ifname.to_string(),
                message: format!("grouping its queues' sockets: {e}"),
            })?;
            ports[w].push(Box::new(group));
        }
    }
    Ok(())
}

/// Handing sockets to another process and adopting them.
mod handoff;
/// The socket, its rings and its UMEM: all the `unsafe` of the port.
mod sys;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_is_checked() {
        let ok = AfXdpConfig::default();
        assert!(check_config(&ok, &[0]).is_ok());
        assert!(check_config(&ok, &[]).is_err());
        assert!(check_config(&ok, &[64]).is_err());
        let c = AfXdpConfig {
            frames: 1000,
            ..AfXdpConfig::default()
        };
        assert!(check_config(&c, &[0])
            .unwrap_err()
            .to_string()
            .contains("frames = 1000"));
        let c = AfXdpConfig {
            ring_size: 4096,
            ..AfXdpConfig::default()
        };
        assert!(check_config(&c, &[0]).is_err());
        let c = AfXdpConfig {
            frame_size: 1500,
            ..AfXdpConfig::default()
        };
        assert!(check_config(&c, &[0]).is_err());
        let all = AfXdpConfig {
            steering: Steering::All,
            ..AfXdpConfig::default()
        };
        assert!(check_config(&all, &[0]).is_ok());
        let c = AfXdpConfig {
            vips: vec!["10.0.0.1".parse().unwrap()],
            ..all
        };
        assert!(check_config(&c, &[0])
            .unwrap_err()
            .to_string()
            .contains("steering"));
    }

    #[test]
    fn loopback_has_a_queue_count() {
        // lo has no ethtool channel support: the call fails cleanly rather than panicking.
        let r = rx_queue_count("lo");
        assert!(r.is_err() || r.unwrap() >= 1);
        assert!(rx_queue_count("an-interface-name-too-long").is_err());
    }

    #[test]
    fn stamps_are_clamped() {
        assert_eq!(clamp_stamp(500, 100, 1000), 500);
        assert_eq!(
            clamp_stamp(50, 100, 1000),
            100,
            "never earlier than the last stamp"
        );
        assert_eq!(
            clamp_stamp(5000, 100, 1000),
            1000,
            "never later than the burst's clock"
        );
        assert_eq!(
            clamp_stamp(0, 100, 1000),
            1000,
            "no stamp: the burst's clock"
        );
    }

    #[test]
    fn umem_u64_slots() {
        let mut u = sys::Umem::new(1 << 16, false).unwrap();
        assert_eq!(u.read_u64(248), Some(0), "a fresh UMEM reads as no stamp");
        u.write_u64(248, 0x1122_3344_5566_7788);
        assert_eq!(u.read_u64(248), Some(0x1122_3344_5566_7788));
        assert_eq!(u.read_u64((1 << 16) - 4), None);
        assert_eq!(u.read_u64(u64::MAX - 2), None);
        u.write_u64(u64::MAX - 2, 1);
    }

    #[test]
    fn umem_copies_stay_in_bounds() {
        let mut u = sys::Umem::new(1 << 16, false).unwrap();
        u.copy_in(2048, b"hello");
        let mut out = [0u8; 5];
        u.copy_out(2048, &mut out);
        assert_eq!(&out, b"hello");
        // Out of range: nothing copied, no panic.
        let mut big = [7u8; 16];
        u.copy_out((1 << 16) - 8, &mut big);
        assert_eq!(big, [7u8; 16]);
        u.copy_in(u64::MAX - 2, b"abc");
    }
}
