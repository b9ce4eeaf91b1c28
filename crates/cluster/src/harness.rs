//! Cluster nodes on real interfaces without etcd, for tests and benchmarks (`flowplane cluster run`
//! is [`crate::service`]): a node's external ports and its interconnect port opened by
//! one of the engine's port drivers (`fp_engine::live`: AF_PACKET or AF_XDP, every frame captured,
//! promiscuous), and the node's stage run by the engine's driver — the same [`NodeStage`] as in
//! the in-process cluster. Each node can run in its own network namespace (or on its own machine)
//! with its external ports on veths or NICs and its interconnect port on a Linux bridge or an
//! Ethernet switch (ScaleBricks §6.2's cluster: external ports plus one interconnect port per
//! node). A frame entering any node is looked up in the partition table and crosses the
//! interconnect at most once, straight to its owner.
//!
//! * The interconnect port carries frames whose outer Ethernet header the node wrote: destination
//!   `node_mac(to)`, or `FLOOD_MAC` for a flood, which the bridge delivers to every node in one
//!   transmission. The node keeps only interconnect frames addressed to it or to all nodes
//!   (ethertype 0x88B5, destination MAC) and counts the rest as ignored: a bridge floods unicast
//!   to MACs it has not learned yet, and other protocols may share the segment.
//! * External port `i` is the `i`-th external interface.
//! * [`start`] runs the node on a pinned thread; an idle node sleeps in `poll(2)` on its sockets,
//!   so it costs no CPU and a frame wakes it at once. Asked to stop ([`LiveNode::stop`]), it
//!   drains first (it returns after an idle moment with nothing received). It publishes its
//!   counters about every 10 ms ([`LiveNode::stats`] adds the sockets' counters).
//!
//! Sockets belong to the network namespace of the thread that opens them: call [`open`] on a
//! thread inside the node's namespace (fp-testnet's `Netns::enter`, or `setns(2)`); the node may
//! then run on any thread.
//!
//! Trade-offs: the ports copy each frame into a packet buffer on receive and out of it on send
//! (at most 2 KiB each); a frame waits up to the AF_PACKET ring's block-retire timeout (1 ms)
//! before user space sees it. The interconnect MTU must carry the external MTU plus
//! [`ENCAP`](crate::interconnect::ENCAP) (22) bytes; a frame that does not fit is refused by the
//! kernel and counted in [`LinkStats::tx_dropped`].
//!
//! ```no_run
//! use fp_cluster::harness;
//! use fp_cluster::{build_tables, ClusterConfig, Mode};
//!
//! // Two nodes with two external ports each; host MACs → (owner node, port), static.
//! let cfg = ClusterConfig::new(2, Mode::ScaleBricks, 2, 1024);
//! let hosts = [(0x0200_0000_0a01, 0, 0), (0x0200_0000_0a02, 1, 0)];
//! let (mut tables, _control) = build_tables(&cfg, &hosts)?;
//! // In node 1's namespace (here: this thread's), node 1's ports, then the node on its thread.
//! let ports = harness::open(&["p0", "p1"], "ic0", "af_packet")?;
//! let node = harness::start(cfg.node_config(1), tables.remove(1), ports)?;
//! println!("{:?}", node.stats());
//! node.stop()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::stage::{
    Counters, NodeConfig, NodeStage, Published, PublishedCounters, Tables, Tracer, DEFER,
};
use fp_engine::driver::{self, EngineError, Options, Running, Worker, WorkerCounters};
use fp_engine::live::{Capture, LiveControl, LiveError, LiveSpec};
use fp_engine::port::Port;
use fp_pipeline::packet::MAX_BURST;
use std::sync::Arc;
use std::time::Duration;

/// Receive ring memory per AF_PACKET socket: 2 MiB (a node has a socket per external port and one
/// on the interconnect).
pub const RING_BYTES: usize = 2 << 20;

/// A node's opened ports: the external ports, then the interconnect.
pub struct NodePorts {
    ports: Vec<Box<dyn Port>>,
    /// Undoes interface changes (promiscuous mode) when the node stops.
    control: LiveControl,
}

/// Open a node's ports in the calling thread's network namespace with port driver `driver`:
/// `external[i]` becomes external port `i`, `interconnect` the interconnect port (last).
pub fn open(external: &[&str], interconnect: &str, driver: &str) -> Result<NodePorts, LiveError> {
    let d = fp_engine::live::driver(driver)?;
    let mut names: Vec<&str> = external.to_vec();
    names.push(interconnect);
    let spec = LiveSpec {
        ring_bytes: Some(RING_BYTES),
        hold: false,
        ..LiveSpec::new(&names, 1, Capture::All)
    };
    let mut opened = d.open(&spec)?;
    Ok(NodePorts {
        ports: opened.ports.remove(0),
        control: opened.control,
    })
}

/// Counters of the interconnect port.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Interconnect frames received for this node (or for all nodes).
    pub rx: u64,
    /// Frames on the interface that were not for this node (another ethertype or node), ignored.
    pub rx_ignored: u64,
    /// Frames lost on receive (ring full, too large).
    pub rx_dropped: u64,
    /// Frames transmitted.
    pub tx: u64,
    /// Frames not transmitted: refused by the kernel (e.g. larger than the MTU), send buffer full.
    pub tx_dropped: u64,
}

/// Counters of one external port.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortCounters {
    /// Frames received and handed to the node.
    pub rx: u64,
    /// Frames transmitted.
    pub tx: u64,
    /// Frames lost on receive (ring full, too large).
    pub rx_dropped: u64,
    /// Frames not transmitted (kernel refused, send buffer full).
    pub tx_dropped: u64,
}

/// Counters of the external ports.
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

/// What a running node reports: its counters as of its last publication, and its sockets'.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeStats {
    /// How many times the node has published (a reader can tell a fresh snapshot).
    pub seq: u64,
    /// The node's data-path counters.
    pub counters: Counters,
    /// The interconnect port's counters.
    pub link: LinkStats,
    /// The external ports' counters.
    pub ports: PortsStats,
}

/// A node running on its thread.
pub struct LiveNode {
    running: Running<NodeStage>,
    engine: Arc<WorkerCounters>,
    published: Arc<PublishedCounters>,
    _control: LiveControl,
}

/// Run a node of the cluster (`cfg`, reading `tables`) on `ports` (from [`open`]: the external
/// ports, then the interconnect) on its own thread, pinned to CPU `cfg.id` (modulo the CPUs).
pub fn start(cfg: NodeConfig, tables: Tables, ports: NodePorts) -> Result<LiveNode, EngineError> {
    start_on(cfg, tables, ports, Some(cfg.id as usize))
}

/// [`start`] with the node's thread pinned to CPU `cpu` (modulo the CPUs), or not pinned.
pub fn start_on(
    cfg: NodeConfig,
    tables: Tables,
    ports: NodePorts,
    cpu: Option<usize>,
) -> Result<LiveNode, EngineError> {
    start_traced(cfg, tables, ports, cpu, None)
}

/// [`start_on`], recording probe frames into `tracer`.
pub fn start_traced(
    cfg: NodeConfig,
    tables: Tables,
    ports: NodePorts,
    cpu: Option<usize>,
    tracer: Option<Tracer>,
) -> Result<LiveNode, EngineError> {
    let NodePorts { ports, control } = ports;
    let published = Arc::new(PublishedCounters::default());
    let mut stage = NodeStage::new(cfg, tables);
    stage.publish_to(published.clone());
    if let Some(t) = tracer {
        stage.trace_to(t);
    }
    let mut opts = Options {
        name: format!("fp-node{}", cfg.id),
        pin: cpu.is_some(),
        first_cpu: cpu.unwrap_or(0),
        ..Options::default()
    };
    driver_options(&cfg, &mut opts);
    let running = driver::start(vec![Worker { stage, ports }], &opts)?;
    let engine = running.counters().remove(0);
    Ok(LiveNode {
        running,
        engine,
        published,
        _control: control,
    })
}

/// The driver's settings for a node's worker.
pub(crate) fn driver_options(cfg: &NodeConfig, o: &mut Options) {
    o.burst = cfg.burst;
    o.buffers = (cfg.ports as usize + 2) * MAX_BURST + 2 * DEFER;
    o.max_backlog = 2 * DEFER;
    // Frames in flight toward the node when it is stopped are still forwarded.
    o.drain = Duration::from_secs(1);
}

/// A node's statistics from its engine counters and its last publication.
pub(crate) fn stats_of(engine: &WorkerCounters, p: &Published) -> NodeStats {
    let (ic, ext) = engine
        .ports
        .split_last()
        .expect("a node has an interconnect port");
    // The stage does not see what the interconnect port refuses; the driver counts it.
    let mut counters = p.counters;
    counters.drop_link_full += ic.tx_dropped.get();
    NodeStats {
        seq: p.seq,
        counters,
        link: LinkStats {
            rx: ic.rx.get().saturating_sub(p.ic_ignored),
            rx_ignored: p.ic_ignored,
            rx_dropped: ic.rx_dropped.get(),
            tx: ic.tx.get(),
            tx_dropped: ic.tx_dropped.get(),
        },
        ports: PortsStats {
            ports: ext
                .iter()
                .map(|c| PortCounters {
                    rx: c.rx.get(),
                    tx: c.tx.get(),
                    rx_dropped: c.rx_dropped.get(),
                    tx_dropped: c.tx_dropped.get(),
                })
                .collect(),
            by_hops: p.by_hops,
            tx_no_port: p.tx_no_port,
        },
    }
}

/// Reads a running node's statistics from any thread ([`LiveNode::reader`]).
#[derive(Clone)]
pub struct StatsReader {
    engine: Arc<WorkerCounters>,
    published: Arc<PublishedCounters>,
}

impl StatsReader {
    /// A reader of the node whose driver counters are `engine` and whose stage publishes into
    /// `published` ([`NodeStage::publish_to`]).
    pub fn new(engine: Arc<WorkerCounters>, published: Arc<PublishedCounters>) -> StatsReader {
        StatsReader { engine, published }
    }

    /// The node's counters (as of its last publication, about every 10 ms) and its sockets'.
    pub fn stats(&self) -> NodeStats {
        stats_of(&self.engine, &self.published.load())
    }

    /// The engine's per-port counters of the node's worker (external ports, then the
    /// interconnect).
    pub fn engine(&self) -> &Arc<WorkerCounters> {
        &self.engine
    }
}

impl LiveNode {
    /// The node's counters (as of its last publication, about every 10 ms) and its sockets'.
    pub fn stats(&self) -> NodeStats {
        self.reader().stats()
    }

    /// A handle that reads the node's statistics from other threads.
    pub fn reader(&self) -> StatsReader {
        StatsReader {
            engine: self.engine.clone(),
            published: self.published.clone(),
        }
    }

    /// Whether the node's thread is still running (an error if it died).
    pub fn check(&self) -> Result<(), EngineError> {
        self.running.check()
    }

    /// Stop the node (after it drained what was on its way to it); its final counters.
    pub fn stop(self) -> Result<NodeStats, EngineError> {
        let done = self.running.stop()?;
        let p = done
            .first()
            .map(|f| f.stage.published())
            .unwrap_or_default();
        Ok(stats_of(&self.engine, &p))
    }
}
