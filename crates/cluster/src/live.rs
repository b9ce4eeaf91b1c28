//! Cluster nodes on real interfaces (feature `live`): the interconnect and the external ports of a
//! [`Node`] over fp-engine's AF_PACKET port ([`AfPacketPort`]: a `TPACKET_V3` receive ring and
//! `sendmmsg` batches), so that each node can run in its own network namespace (or on its own
//! machine) with its external ports on veths or NICs and its interconnect port on a Linux bridge or
//! an Ethernet switch (ScaleBricks §6.2's cluster: external ports plus one interconnect port per
//! node). The node logic is the in-memory cluster's: a frame entering any node is looked up in the
//! partition table and crosses the interconnect at most once, straight to its owner.
//!
//! * [`AfPacketLink`] ([`Link`]): one socket on the interconnect interface. `send` encapsulates
//!   nothing itself (the node already wrote the outer Ethernet header: destination
//!   [`node_mac`]`(to)`, or [`FLOOD_MAC`] for a flood, which the bridge delivers to every node in one
//!   transmission) and queues the frame; the node's end-of-round `flush` sends the queue with one
//!   `sendmmsg`. `recv` keeps only interconnect frames addressed to this node or to all nodes
//!   (ethertype 0x88B5, destination MAC) and counts the rest as ignored: a bridge floods unicast
//!   to MACs it has not learned yet, and other protocols may share the segment.
//! * [`AfPacketPorts`] ([`ExternalPort`]): one socket per external interface; port `i` is the
//!   `i`-th interface. Receive is round robin over the interfaces (one burst in all), each frame
//!   tagged with its ingress port; transmit queues per port and flushes by `sendmmsg` per port.
//! * [`run`]: the node's poll loop; when a round finds no work it sleeps in `poll(2)` on all its
//!   sockets (at most `idle`), so an idle node costs no CPU and a frame wakes it at once. Asked to
//!   stop, it drains first (returns after an idle period with nothing received). It publishes the
//!   node's counters ([`NodeStats`]) at idle moments for metrics readers on other threads.
//!
//! Sockets belong to the network namespace of the thread that creates them: open the ports on a
//! thread inside the node's namespace (fp-testnet's `Netns::enter`, or `setns(2)`), then run the
//! node on any thread.
//!
//! Trade-offs: the AF_PACKET port copies each frame into a pipeline buffer and the node copies it
//! into its burst (two copies per direction, at most 2 KiB each) — the price of reusing the
//! in-memory node unchanged; a frame waits up to the ring's block-retire timeout (1 ms) before user
//! space sees it. Sockets are promiscuous (a switch port must accept frames for any MAC). The
//! interconnect MTU must carry the external MTU plus [`ENCAP`](crate::wire::ENCAP) (22) bytes; a
//! frame that does not fit is refused by the kernel and counted in [`LinkStats::tx_dropped`].
//!
//! ```no_run
//! use fp_cluster::live::{self, AfPacketLink, AfPacketPorts};
//! use fp_cluster::{build_tables, ClusterConfig, Mode, Node};
//! use std::sync::atomic::AtomicBool;
//! use std::time::Duration;
//!
//! // Two nodes with two external ports each; host MACs → (owner node, port), static.
//! let cfg = ClusterConfig::new(2, Mode::ScaleBricks, 2, 1024);
//! let hosts = [(0x0200_0000_0a01, 0, 0), (0x0200_0000_0a02, 1, 0)];
//! let (mut tables, _control) = build_tables(&cfg, &hosts)?;
//! // In node 1's namespace (here: this thread's), node 1's sockets:
//! let afp = live::afpacket_config();
//! let link = AfPacketLink::open("ic0", 1, 2, &afp)?;
//! let ports = AfPacketPorts::open(&["p0", "p1"], &afp)?;
//! let mut node = Node::new(cfg.node_config(1), tables.remove(1), link, ports);
//! let stop = AtomicBool::new(false);
//! // Until `stop` is set (then it drains); counters published when idle, for other threads.
//! let stats = std::sync::Mutex::new(live::NodeStats::default());
//! live::run(&mut node, &stop, Duration::from_millis(10), Some(&stats))?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod sys;

use crate::link::{Link, LinkError};
use crate::port::{Burst, ExternalPort};
use crate::wire::{node_mac, ALL_NODES, ETHERTYPE_INTERCONNECT, ETH_HDR, FLOOD_MAC};
use crate::{Counters, Node};
use fp_engine::afpacket::{AfPacketConfig, AfPacketError, AfPacketPort};
use fp_engine::port::Port;
use fp_pipeline::packet::{Packet, Pool, MAX_BURST};
use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// A node whose interconnect and external ports are AF_PACKET sockets.
pub type LiveNode = Node<AfPacketLink, AfPacketPorts>;

/// Frames a link or port set queues for transmit before it sends them without waiting for the
/// node's end-of-round flush.
const TX_QUEUE: usize = 2 * MAX_BURST;

/// AF_PACKET settings for cluster sockets: fp-engine's defaults with promiscuous mode on (a switch
/// port accepts frames for every MAC; on veths it changes nothing) and a 2 MiB ring per socket
/// (64 KiB blocks × 32) instead of 16 MiB.
pub fn afpacket_config() -> AfPacketConfig {
    AfPacketConfig {
        promisc: true,
        block_size: 1 << 16,
        block_count: 32,
        ..AfPacketConfig::default()
    }
}

/// Counters of an [`AfPacketLink`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Interconnect frames received for this node (or for all nodes).
    pub rx: u64,
    /// Frames on the interface that were not for this node (another ethertype or node), ignored.
    pub rx_ignored: u64,
    /// Frames lost on receive: ring full, or too large for a burst slot.
    pub rx_dropped: u64,
    /// Frames transmitted.
    pub tx: u64,
    /// Frames not transmitted: refused by the kernel (e.g. larger than the MTU), send buffer
    /// full, or no packet buffer.
    pub tx_dropped: u64,
}

/// A node's interconnect port on a Linux interface (see the [module docs](self)).
pub struct AfPacketLink {
    me: u8,
    nodes: u8,
    port: AfPacketPort,
    pool: Pool,
    rx: Vec<Packet>,
    tx: Vec<Packet>,
    st: LinkStats,
}

impl AfPacketLink {
    /// Open the interconnect port of node `me` (of `nodes`) on interface `ifname` of the calling
    /// thread's network namespace.
    pub fn open(
        ifname: &str,
        me: u8,
        nodes: u8,
        cfg: &AfPacketConfig,
    ) -> Result<AfPacketLink, AfPacketError> {
        Ok(Self::from_port(AfPacketPort::open(ifname, cfg)?, me, nodes))
    }

    /// Use an open port as node `me`'s interconnect.
    pub fn from_port(port: AfPacketPort, me: u8, nodes: u8) -> AfPacketLink {
        AfPacketLink {
            me,
            nodes,
            port,
            pool: Pool::new(TX_QUEUE + 2 * MAX_BURST),
            rx: Vec::with_capacity(MAX_BURST),
            tx: Vec::with_capacity(TX_QUEUE),
            st: LinkStats::default(),
        }
    }

    /// The socket.
    pub fn port(&self) -> &AfPacketPort {
        &self.port
    }

    /// Counters (reads the kernel's ring statistics: one system call).
    pub fn stats(&self) -> LinkStats {
        let a = self.port.afp_stats();
        LinkStats {
            rx_dropped: self.st.rx_dropped + a.rx_ring_drops + a.rx_oversize,
            tx: a.tx,
            tx_dropped: self.st.tx_dropped + a.tx_dropped,
            ..self.st
        }
    }
}

/// Whether `frame` is an interconnect frame for node `me` (its MAC or the flood group MAC).
#[inline]
fn for_node(me: u8, frame: &[u8]) -> bool {
    frame.len() >= ETH_HDR
        && frame[12..14] == ETHERTYPE_INTERCONNECT.to_be_bytes()
        && (frame[..6] == node_mac(me) || frame[..6] == FLOOD_MAC)
}

impl Link for AfPacketLink {
    #[inline]
    fn send(&mut self, to: u8, frame: &[u8]) -> Result<(), LinkError> {
        if (to >= self.nodes && to != ALL_NODES) || to == self.me {
            return Err(LinkError::NoRoute);
        }
        if frame.len() > fp_pipeline::packet::MAX_FRAME {
            return Err(LinkError::TooLarge);
        }
        if self.tx.len() >= TX_QUEUE {
            self.flush();
        }
        let Some(mut p) = self.pool.get() else {
            return Err(LinkError::Full);
        };
        p.fill(frame);
        self.tx.push(p);
        Ok(())
    }

    /// Always true: the queue flushes itself when full, and the kernel's send buffer absorbs
    /// bursts (a send that finds it full waits up to `tx_wait`, then drops and counts).
    fn room(&self, _frames: usize) -> bool {
        true
    }

    fn recv(&mut self, burst: &mut Burst) -> usize {
        let room = burst.capacity() - burst.len();
        if room == 0 {
            return 0;
        }
        self.port.rx_burst(&mut self.pool, &mut self.rx, room);
        let mut got = 0;
        for p in self.rx.drain(..) {
            let f = p.data();
            if !for_node(self.me, f) {
                self.st.rx_ignored += 1;
            } else if burst.push(f) {
                got += 1;
            } else {
                self.st.rx_dropped += 1;
            }
            self.pool.put(p);
        }
        self.st.rx += got as u64;
        got
    }

    fn pending(&self) -> usize {
        self.port.rx_ready() as usize
    }

    fn flush(&mut self) {
        if !self.tx.is_empty() {
            self.port.tx_burst(&mut self.tx, &mut self.pool);
        }
    }
}

/// Counters of one external port of an [`AfPacketPorts`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortCounters {
    /// Frames received and handed to the node.
    pub rx: u64,
    /// Frames transmitted.
    pub tx: u64,
    /// Frames lost on receive (ring full, too large).
    pub rx_dropped: u64,
    /// Frames not transmitted (kernel refused, send buffer full, no buffer).
    pub tx_dropped: u64,
}

/// Counters of an [`AfPacketPorts`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PortsStats {
    /// Per external port.
    pub ports: Vec<PortCounters>,
    /// Frames emitted by the interconnect hops they took: 0 (entered at this node), 1, 2 or more
    /// (a redirect after a move). Flood copies included.
    pub by_hops: [u64; 3],
    /// Frames the node asked to emit on a port that does not exist.
    pub tx_no_port: u64,
}

/// A node's external ports on Linux interfaces (see the [module docs](self)).
pub struct AfPacketPorts {
    ports: Vec<AfPacketPort>,
    pool: Pool,
    rx: Vec<Packet>,
    tx: Vec<Vec<Packet>>,
    next: usize,
    rx_count: Vec<u64>,
    rx_dropped: Vec<u64>,
    tx_dropped: Vec<u64>,
    by_hops: [u64; 3],
    tx_no_port: u64,
}

impl AfPacketPorts {
    /// Open external port `i` on interface `ifnames[i]` of the calling thread's namespace.
    pub fn open(ifnames: &[&str], cfg: &AfPacketConfig) -> Result<AfPacketPorts, AfPacketError> {
        let ports = ifnames
            .iter()
            .enumerate()
            .map(|(i, name)| {
                AfPacketPort::open(
                    name,
                    &AfPacketConfig {
                        port_id: i as u16,
                        ..cfg.clone()
                    },
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self::from_ports(ports))
    }

    /// Use open ports; external port `i` is `ports[i]`. Panics on more than 255 ports (the FIB
    /// encodes a port in 8 bits).
    pub fn from_ports(ports: Vec<AfPacketPort>) -> AfPacketPorts {
        let k = ports.len();
        assert!(k <= 255, "{k} external ports: at most 255");
        AfPacketPorts {
            pool: Pool::new(MAX_BURST + k * (TX_QUEUE + 1)),
            rx: Vec::with_capacity(MAX_BURST),
            tx: (0..k).map(|_| Vec::with_capacity(TX_QUEUE)).collect(),
            next: 0,
            rx_count: vec![0; k],
            rx_dropped: vec![0; k],
            tx_dropped: vec![0; k],
            by_hops: [0; 3],
            tx_no_port: 0,
            ports,
        }
    }

    /// The sockets, by port number.
    pub fn sockets(&self) -> &[AfPacketPort] {
        &self.ports
    }

    /// Counters (reads each socket's kernel ring statistics; allocates: not for the data path).
    pub fn stats(&self) -> PortsStats {
        PortsStats {
            ports: self
                .ports
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    let a = p.afp_stats();
                    PortCounters {
                        rx: self.rx_count[i],
                        tx: a.tx,
                        rx_dropped: self.rx_dropped[i] + a.rx_ring_drops + a.rx_oversize,
                        tx_dropped: self.tx_dropped[i] + a.tx_dropped,
                    }
                })
                .collect(),
            by_hops: self.by_hops,
            tx_no_port: self.tx_no_port,
        }
    }

    fn flush_port(&mut self, i: usize) {
        if !self.tx[i].is_empty() {
            self.ports[i].tx_burst(&mut self.tx[i], &mut self.pool);
        }
    }
}

impl ExternalPort for AfPacketPorts {
    fn rx_burst(&mut self, burst: &mut Burst) -> usize {
        let k = self.ports.len();
        let mut got = 0;
        for j in 0..k {
            let room = burst.capacity() - burst.len();
            if room == 0 {
                break;
            }
            let i = (self.next + j) % k;
            self.ports[i].rx_burst(&mut self.pool, &mut self.rx, room);
            for p in self.rx.drain(..) {
                if burst.push_from(p.data(), i as u16) {
                    got += 1;
                    self.rx_count[i] += 1;
                } else {
                    self.rx_dropped[i] += 1;
                }
                self.pool.put(p);
            }
        }
        // The next burst starts at the next port, so a busy port cannot starve the others.
        if k > 0 {
            self.next = (self.next + 1) % k;
        }
        got
    }

    #[inline]
    fn tx(&mut self, port: u16, frame: &[u8], hops: u8) {
        let i = port as usize;
        if i >= self.ports.len() {
            self.tx_no_port += 1;
            return;
        }
        let Some(mut p) = self.pool.get() else {
            self.tx_dropped[i] += 1;
            return;
        };
        if !p.fill(frame) {
            self.pool.put(p);
            self.tx_dropped[i] += 1;
            return;
        }
        self.tx[i].push(p);
        self.by_hops[(hops as usize).min(2)] += 1;
        if self.tx[i].len() >= TX_QUEUE {
            self.flush_port(i);
        }
    }

    fn ports(&self) -> u16 {
        self.ports.len() as u16
    }

    fn flush(&mut self) {
        for i in 0..self.ports.len() {
            self.flush_port(i);
        }
    }
}

/// What a running node publishes for readers on other threads (metrics, tests): its counters and
/// its sockets' counters, as of its last idle moment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeStats {
    /// How many times the node has published (a reader can tell a fresh snapshot).
    pub seq: u64,
    /// The node's data-path counters.
    pub counters: Counters,
    /// The interconnect socket's counters.
    pub link: LinkStats,
    /// The external sockets' counters.
    pub ports: PortsStats,
}

impl Node<AfPacketLink, AfPacketPorts> {
    /// The node's counters and its sockets' (system calls and an allocation: not for the data
    /// path; [`run`] publishes them when the node is idle).
    pub fn stats(&self) -> NodeStats {
        NodeStats {
            seq: 0,
            counters: self.counters,
            link: self.link.stats(),
            ports: self.port.stats(),
        }
    }
}

/// Busy rounds between two publications while the node never goes idle.
const PUBLISH_EVERY: u32 = 4096;

/// Run `node` until `stop` is set and the node has drained: poll rounds back to back while there is
/// work; after a round with none, sleep in `poll(2)` on all of the node's sockets for at most
/// `idle` (rounded up to a millisecond). Once `stop` is set, the node returns after the first such
/// sleep that saw nothing arrive, so frames already on their way to it (in flight on the
/// interconnect, or in a ring block the kernel has not handed over yet — up to its 1 ms retire
/// timeout) are still forwarded; every round ends with a flush, so nothing stays queued.
///
/// With `publish`, the node writes [`Node::stats`] there (incrementing `seq`) whenever it is about
/// to sleep, and every 4096 busy rounds under continuous load: the lock is taken then, never per
/// frame. Errors only if `poll(2)` fails.
pub fn run(
    node: &mut LiveNode,
    stop: &AtomicBool,
    idle: Duration,
    publish: Option<&Mutex<NodeStats>>,
) -> io::Result<()> {
    let mut fds = vec![node.link.port().as_raw_fd()];
    fds.extend(node.port.sockets().iter().map(|p| p.as_raw_fd()));
    let mut set = sys::PollSet::new(&fds);
    let mut seq = 0u64;
    let mut busy = 0u32;
    let mut publish_now = |node: &LiveNode| {
        if let Some(m) = publish {
            seq += 1;
            let st = NodeStats {
                seq,
                ..node.stats()
            };
            *m.lock().unwrap_or_else(|e| e.into_inner()) = st;
        }
    };
    loop {
        if node.poll() > 0 {
            busy += 1;
            if busy == PUBLISH_EVERY {
                busy = 0;
                publish_now(node);
            }
            continue;
        }
        let ready = node.link.port().rx_ready() || node.port.sockets().iter().any(|p| p.rx_ready());
        if ready {
            continue;
        }
        publish_now(node);
        let stopping = stop.load(Ordering::Acquire);
        if !set.wait(idle)? && stopping {
            return Ok(());
        }
    }
}
