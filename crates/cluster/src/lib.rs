//! The ScaleBricks cluster: one forwarding table spread over `n` nodes, one interconnect hop per
//! packet (ScaleBricks, SIGCOMM 2015, §6.2–6.3; CuckooSwitch, CoNEXT 2013, §1 and §6 for the
//! motivation: FIBs of flat addresses too large for one switch). An application on flowplane's
//! engine: each node is a stage ([`NodeStage`]) whose ports are its external ports and its
//! interconnect port.
//!
//! Every entry (a MAC address → an external port) has an *owner* node that holds it in its
//! [`fp_cuckoo`] FIB (`FibMap`: the 2,4 layout, or the quotiented one from 256 Mi entries or
//! with `cluster.fib_layout`); every node holds a replica of the [`fp_setsep`] partition table (key →
//! owner, `log2 n` bits per value). A frame entering any node is looked up in the partition table
//! and sent over the interconnect, encapsulated ([`interconnect`]), straight to its owner, which
//! strips the header, looks the key up in its share of the FIB and emits the frame on the port. Two
//! baselines run on the same machinery ([`Mode`]): full duplication (every node the whole FIB) and
//! hash partitioning (the entry lives on the key's hash-home node: two hops). Keys are MAC
//! addresses as 48-bit integers (`MacAddr::to_u64`), the tables' key type.
//!
//! The node logic sees ports only through the engine's `Port`: [`mod@fabric`] links the nodes of an
//! in-process [`Cluster`] with lock-free rings of frame bytes, and [`GenPort`] replays test
//! traffic; [`harness`] puts a node's external and interconnect
//! ports on Linux interfaces through the engine's port drivers, each node in its own network
//! namespace or machine, the interconnect on a Linux bridge or switch ([`build_tables`] builds the
//! tables for such nodes; `docs/cluster-live.md`). The [`Controller`] is the single writer of
//! every table of an in-process cluster; a node that runs as its own process has its own
//! [`Member`] (`member.rs`), the single writer of that node's FIB share and partition-table
//! replica, fed the cluster's changes in one order. `flowplane cluster` is [`cli`]: node
//! processes ([`service`], on the service runner) whose entries and membership live in etcd
//! ([`store`], through `fp_control::etcd`), the entry commands ([`entries`]), metrics and status
//! ([`metrics`]); `docs/cluster.md`.
//!
//! Broadcast and multicast frames (ARP requests) have no owner: the ingress node floods them to its
//! other external ports and, in one interconnect frame, to every other node, which emits them on
//! all its external ports (see `stage.rs`).
//!
//! **Guarantees** (tested in `tests/cluster.rs`): every frame for a known key leaves its owner's
//! external port exactly once; under ScaleBricks with at most one interconnect hop (zero if it
//! entered at the owner) — before updates, after updates, and for frames entering after an update
//! completed while traffic flows; frames that were in flight during a move take at most one extra
//! (redirect) hop. No frame is lost by the data path (drops are counted by reason). A broadcast or
//! multicast frame leaves every external port of the cluster except its ingress port exactly once.
//! On real interfaces (`tests/live.rs`): hosts on different nodes reach each other (ARP, ping, UDP,
//! TCP) and every frame crosses the interconnect at most once.
//!
//! # Example
//!
//! ```
//! use fp_cluster::{build, ClusterConfig, Frames, GenPort, Mode};
//! use fp_wire::ethernet::MacAddr;
//! use std::sync::{atomic::AtomicU64, Arc};
//!
//! // 4 nodes with 3 external ports each, 1000 MACs, owner = key % 4, external port = key % 3.
//! let entries: Vec<(u64, u8, u16)> =
//!     (0..1000u64).map(|i| (0x0200_0000_0000 | i, (i % 4) as u8, (i % 3) as u16)).collect();
//! let keys: Vec<u64> = entries.iter().map(|e| e.0).collect();
//! let stamps = Arc::new(AtomicU64::new(0));
//! let frames = Frames::to_keys(&keys, 64, MacAddr([2, 0, 0, 0, 0, 1]));
//! let ports = (0..4).map(|_| GenPort::node(3, frames.clone(), 1000, &stamps, false)).collect();
//! let cfg = ClusterConfig::new(4, Mode::ScaleBricks, 3, 2000);
//! let (mut cluster, mut control) = build(&cfg, &entries, ports).unwrap();
//! cluster.run_until_idle(1_000_000);
//! let c = cluster.counters();
//! assert_eq!((c.emitted, c.drops()), (4000, 0));
//! // One interconnect hop for the 3/4 of frames that entered at a node other than the owner.
//! assert_eq!(cluster.hops(), 3000);
//! // Move an entry while the cluster runs: the control plane updates every node.
//! control.set(keys[5], 0, 2).unwrap();
//! ```
#![deny(unsafe_code)]

pub mod cli;
pub mod config;
mod controller;
pub mod entries;
pub mod fabric;
mod gen;
pub mod harness;
pub mod interconnect;
mod member;
mod membership;
pub mod metrics;
pub mod service;
mod stage;
pub mod store;

pub use controller::{Controller, Update};
pub use fabric::{fabric, FabricPort};
pub use gen::{Delivery, Frames, GenPort, Sink};
pub use member::{Member, MemberStats};
pub use stage::{
    hash_home, Counters, NodeConfig, NodeStage, NodeTrace, Published, PublishedCounters, Tables,
    Tracer, DEFER, MAX_BURST, MAX_HOPS,
};

use fp_cuckoo::InsertError;
use fp_engine::driver::{self, Core, Options};
use fp_engine::port::{Port, PortStats, Wait};
use fp_pipeline::packet::{Packet, Pool};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;

/// Seed tweaks that keep the cluster's tables' hashes independent of each other.
const HOME_SEED: u64 = 0x4A5B_0E00_0000_0001;
const FIB_SEED: u64 = 0x9E37_79B9_7F4A_7C15;
const GPT_SEED: u64 = 0x6E75_5E75_0000_0002;

/// How the FIB is spread over the nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// ScaleBricks: each entry on its owner, a SetSep partition table on every node; one hop.
    ScaleBricks,
    /// Every node holds the whole FIB (key → egress node and port); one hop.
    Duplicate,
    /// Each entry on its key's hash-home node; ingress → home → egress: up to two hops.
    HashPartition,
}

impl Mode {
    /// Short name.
    pub fn name(self) -> &'static str {
        match self {
            Mode::ScaleBricks => "scalebricks",
            Mode::Duplicate => "duplication",
            Mode::HashPartition => "hash-partition",
        }
    }
}

/// Cluster settings.
#[derive(Clone, Debug)]
pub struct ClusterConfig {
    /// Nodes (1..=64).
    pub nodes: u8,
    /// How the FIB is spread.
    pub mode: Mode,
    /// External ports per node (1..=255).
    pub ports: u16,
    /// Entries the cluster is sized for (total).
    pub capacity: usize,
    /// Per-node FIB capacity under partitioned modes: `capacity / nodes × fib_slack`.
    pub fib_slack: f64,
    /// Seed of the tables and of the hash-partitioning home function.
    pub seed: u64,
    /// Frames per burst (1..=32).
    pub burst: usize,
    /// Frames each interconnect queue holds.
    pub ring_slots: usize,
    /// Longest external frame carried (the interconnect adds [`interconnect::ENCAP`] bytes).
    pub max_frame: usize,
    /// SetSep setting `(x, y)` of the partition table.
    pub gpt_setting: (u8, u8),
    /// Threads building the partition table.
    pub build_threads: usize,
    /// Page policy of the tables.
    pub pages: fp_cuckoo::PagePolicy,
    /// Each node's FIB layout (none: by the node's share of the capacity,
    /// [`fp_cuckoo::FibLayout::auto`]).
    pub fib_layout: Option<fp_cuckoo::FibLayout>,
}

impl ClusterConfig {
    /// Defaults for `nodes` nodes with `ports` external ports each, sized for `capacity` entries.
    pub fn new(nodes: u8, mode: Mode, ports: u16, capacity: usize) -> Self {
        ClusterConfig {
            nodes,
            mode,
            ports,
            capacity,
            fib_slack: 1.15,
            seed: 0x5CA1_EB71_C45E_ED00,
            burst: 32,
            ring_slots: 1024,
            max_frame: 1518,
            gpt_setting: (16, 8),
            build_threads: 1,
            pages: fp_cuckoo::PagePolicy::Auto,
            fib_layout: None,
        }
    }

    /// Value bits of the partition table: `ceil(log2 nodes)`, at least 1.
    pub fn owner_bits(&self) -> u8 {
        (u8::BITS - (self.nodes.max(2) - 1).leading_zeros()) as u8
    }

    /// The settings of node `id`.
    pub fn node_config(&self, id: u8) -> NodeConfig {
        NodeConfig {
            id,
            nodes: self.nodes,
            mode: self.mode,
            ports: self.ports,
            burst: self.burst,
            max_frame: self.max_frame,
        }
    }

    fn validate(&self) -> Result<(), Error> {
        let bad = |field: &'static str, value: String, why: &'static str| {
            Err(Error::Config { field, value, why })
        };
        if !(1..=64).contains(&self.nodes) {
            return bad("nodes", self.nodes.to_string(), "must be in 1..=64");
        }
        if !(1..=255).contains(&self.ports) {
            return bad("ports", self.ports.to_string(), "must be in 1..=255");
        }
        if !(1..=MAX_BURST).contains(&self.burst) {
            return bad("burst", self.burst.to_string(), "must be in 1..=32");
        }
        if self.ring_slots < 2 * self.burst {
            return bad(
                "ring_slots",
                self.ring_slots.to_string(),
                "must hold at least two bursts",
            );
        }
        // A packet buffer holds the frame and its interconnect header.
        let most = fp_pipeline::packet::MAX_FRAME - interconnect::ENCAP;
        const _: () = assert!(fp_pipeline::packet::MAX_FRAME - interconnect::ENCAP == 2026);
        if !(interconnect::ETH_HDR + 8..=most).contains(&self.max_frame) {
            return bad(
                "max_frame",
                self.max_frame.to_string(),
                "must be in 22..=2026 (a packet buffer holds the frame and the interconnect header)",
            );
        }
        if self.fib_slack.is_nan() || self.fib_slack < 1.0 {
            return bad(
                "fib_slack",
                self.fib_slack.to_string(),
                "must be at least 1",
            );
        }
        Ok(())
    }
}

/// Why a cluster could not be built or updated.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A setting is out of range.
    #[error("cluster config: {field} = {value}: {why}")]
    Config {
        field: &'static str,
        value: String,
        why: &'static str,
    },
    /// A key wider than 48 bits (FIB keys are MAC addresses).
    #[error("key {key:#x} is wider than 48 bits")]
    KeyTooWide { key: u64 },
    /// An owner that is not a node of the cluster.
    #[error("node {node} does not exist (cluster of {nodes})")]
    NoSuchNode { node: u8, nodes: u8 },
    /// An external port number too large for the FIB encoding.
    #[error("external port {port} out of range (0..=254)")]
    PortTooLarge { port: u16 },
    /// A node's FIB refused an entry.
    #[error("FIB of node {node}: {error}")]
    Fib { node: u8, error: InsertError },
    /// A FIB could not be created.
    #[error("FIB: {0}")]
    FibTable(#[from] fp_cuckoo::Error),
    /// The partition table could not be built or updated.
    #[error("partition table: {0}")]
    Partition(#[from] fp_setsep::Error),
}

/// Memory a node spends on its tables.
#[derive(Clone, Copy, Debug, Default)]
pub struct NodeMemory {
    /// Bytes of the node's FIB share (cuckoo table slots and version counters).
    pub fib_bytes: usize,
    /// Entries in the node's FIB share.
    pub fib_entries: usize,
    /// Bytes of the node's partition table replica (blocks and fallback table).
    pub gpt_bytes: usize,
    /// The FIB's layout ([`fp_cuckoo::Stats::layout`]).
    pub fib_layout: &'static str,
}

impl NodeMemory {
    /// Total bytes.
    pub fn bytes(&self) -> usize {
        self.fib_bytes + self.gpt_bytes
    }
}

/// A port of an in-process node: one of its external ports, or its end of the fabric.
pub enum NodePort<P> {
    /// External port.
    External(P),
    /// The interconnect.
    Interconnect(FabricPort),
}

impl<P: Port> Port for NodePort<P> {
    fn name(&self) -> &str {
        match self {
            NodePort::External(p) => p.name(),
            NodePort::Interconnect(p) => p.name(),
        }
    }
    fn rx_burst(&mut self, pool: &mut Pool, out: &mut Vec<Packet>, max: usize) -> usize {
        match self {
            NodePort::External(p) => p.rx_burst(pool, out, max),
            NodePort::Interconnect(p) => p.rx_burst(pool, out, max),
        }
    }
    fn tx_burst(&mut self, batch: &mut Vec<Packet>, pool: &mut Pool) -> usize {
        match self {
            NodePort::External(p) => p.tx_burst(batch, pool),
            NodePort::Interconnect(p) => p.tx_burst(batch, pool),
        }
    }
    fn tx_room(&self) -> usize {
        match self {
            NodePort::External(p) => p.tx_room(),
            NodePort::Interconnect(p) => p.tx_room(),
        }
    }
    fn exhausted(&self) -> bool {
        match self {
            NodePort::External(p) => p.exhausted(),
            // Other nodes may always send more.
            NodePort::Interconnect(_) => false,
        }
    }
    fn stats(&self) -> PortStats {
        match self {
            NodePort::External(p) => p.stats(),
            NodePort::Interconnect(p) => p.stats(),
        }
    }
    fn wait(&self) -> Wait {
        match self {
            NodePort::External(p) => p.wait(),
            NodePort::Interconnect(p) => p.wait(),
        }
    }
    fn rx_ready(&self) -> bool {
        match self {
            NodePort::External(p) => p.rx_ready(),
            NodePort::Interconnect(p) => p.rx_ready(),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            NodePort::External(p) => p.flush(),
            NodePort::Interconnect(p) => p.flush(),
        }
    }
    fn hand_off(&self, to: &mut fp_engine::live::Handoff) -> std::io::Result<()> {
        match self {
            NodePort::External(p) => p.hand_off(to),
            NodePort::Interconnect(p) => p.hand_off(to),
        }
    }
    fn handed_over(&mut self) {
        match self {
            NodePort::External(p) => p.handed_over(),
            NodePort::Interconnect(p) => p.handed_over(),
        }
    }
}

/// `n` nodes connected by an in-memory fabric, each a worker core of the engine (its stage and
/// ports), stepped round-robin on one thread ([`Cluster::step`]) or run on a thread each
/// ([`Cluster::run_threaded`]).
pub struct Cluster<P> {
    /// The nodes, by id.
    pub nodes: Vec<Core<NodeStage, NodePort<P>>>,
}

/// Build a cluster of `cfg.nodes` nodes over an in-memory [`fabric()`](fabric::fabric), with `ports[i]` as node
/// `i`'s external ports (`cfg.ports` of them), holding `entries` (key, owner, port). Returns the
/// cluster and its control plane.
pub fn build<P: Port>(
    cfg: &ClusterConfig,
    entries: &[(u64, u8, u16)],
    ports: Vec<Vec<P>>,
) -> Result<(Cluster<P>, Controller), Error> {
    let (tables, control) = build_tables(cfg, entries)?;
    Ok((assemble(cfg, tables, ports)?, control))
}

/// A cluster of `cfg.nodes` nodes over an in-memory [`fabric()`](fabric::fabric) reading `tables[i]` (from
/// [`build_tables`], or each node's own [`Member`]), with `ports[i]` as node `i`'s external ports.
pub fn assemble<P: Port>(
    cfg: &ClusterConfig,
    tables: Vec<Tables>,
    ports: Vec<Vec<P>>,
) -> Result<Cluster<P>, Error> {
    cfg.validate()?;
    let n = cfg.nodes as usize;
    if ports.len() != n || ports.iter().any(|p| p.len() != cfg.ports as usize) {
        return Err(Error::Config {
            field: "ports",
            value: ports.len().to_string(),
            why: "need `ports` external ports per node",
        });
    }
    if tables.len() != n {
        return Err(Error::Config {
            field: "nodes",
            value: tables.len().to_string(),
            why: "need the tables of every node",
        });
    }
    let links = fabric(n, cfg.ring_slots, cfg.max_frame + interconnect::ENCAP);
    let nodes = links
        .into_iter()
        .zip(ports)
        .zip(tables)
        .enumerate()
        .map(|(i, ((link, ext), tables))| {
            let stage = NodeStage::new(cfg.node_config(i as u8), tables);
            let mut all: Vec<NodePort<P>> = ext.into_iter().map(NodePort::External).collect();
            all.push(NodePort::Interconnect(link));
            // Buffers: a burst in, flood copies of a burst to every port, what waits for the
            // interconnect.
            let buffers = (cfg.ports as usize + 2) * MAX_BURST + 2 * DEFER;
            let mut core = Core::new(stage, all, buffers);
            core.set_burst(cfg.burst);
            core.set_max_backlog(2 * DEFER);
            core
        })
        .collect();
    Ok(Cluster { nodes })
}

/// Build the tables of a cluster of `cfg.nodes` nodes holding `entries` (key, owner, port): element
/// `i` is what node `i` reads (its FIB share and its partition-table replica), and the control
/// plane writes them all. For nodes on other links and ports than [`build`]'s in-memory ones, e.g.
/// [`harness`]: `harness::start(cfg.node_config(i), tables[i], ports)`.
pub fn build_tables(
    cfg: &ClusterConfig,
    entries: &[(u64, u8, u16)],
) -> Result<(Vec<Tables>, Controller), Error> {
    cfg.validate()?;
    let n = cfg.nodes as usize;
    let capacity = cfg.capacity.max(entries.len()).max(1);
    let home_seed = home_seed(cfg.seed);
    let down = Arc::new(AtomicU64::new(0));
    let mut fibs = Vec::with_capacity(n);
    let mut readers = Vec::with_capacity(n);
    for i in 0..n {
        let (w, r) = node_fib(cfg, i as u8, capacity)?;
        fibs.push(w);
        readers.push(r);
    }
    let mut control = Controller {
        mode: cfg.mode,
        nodes: cfg.nodes,
        hash_seed: home_seed,
        entries: HashMap::with_capacity(entries.len()),
        fibs,
        gpt: None,
        down: down.clone(),
    };
    // Validate and deduplicate (the last setting of a key wins), then fill the FIBs.
    for &(k, o, p) in entries {
        control.check(k, o, p)?;
        control.entries.insert(k, (o, p));
    }
    let mut sorted: Vec<(u64, u8, u16)> = control
        .entries
        .iter()
        .map(|(&k, &(o, p))| (k, o, p))
        .collect();
    sorted.sort_unstable_by_key(|e| e.0);
    for &(k, o, p) in &sorted {
        match cfg.mode {
            Mode::ScaleBricks => control.fibs[o as usize]
                .insert(k, p)
                .map(|_| ())
                .map_err(|e| Error::Fib { node: o, error: e })?,
            Mode::Duplicate => {
                let v = ((o as u16) << 8) | p;
                for (i, f) in control.fibs.iter_mut().enumerate() {
                    f.insert(k, v).map_err(|e| Error::Fib {
                        node: i as u8,
                        error: e,
                    })?;
                }
            }
            Mode::HashPartition => {
                let h = hash_home(home_seed, k, cfg.nodes);
                control.fibs[h as usize]
                    .insert(k, ((o as u16) << 8) | p)
                    .map_err(|e| Error::Fib { node: h, error: e })?;
            }
        }
    }
    let mut gpts: Vec<Option<fp_setsep::SetSep>> = (0..n).map(|_| None).collect();
    if cfg.mode == Mode::ScaleBricks {
        let keys: Vec<u64> = sorted.iter().map(|e| e.0).collect();
        let owners: Vec<u16> = sorted.iter().map(|e| e.1 as u16).collect();
        drop(sorted);
        let (mut up, first) =
            fp_setsep::Updater::build(&gpt_config(cfg, capacity), &keys, &owners)?;
        gpts[0] = Some(first);
        for g in gpts.iter_mut().skip(1) {
            *g = Some(up.replica()?);
        }
        control.gpt = Some(up);
    }
    let tables = readers
        .into_iter()
        .zip(gpts)
        .map(|(fib, gpt)| Tables {
            fib,
            gpt,
            hash_seed: home_seed,
            down: down.clone(),
        })
        .collect();
    Ok((tables, control))
}

/// Node `id`'s FIB, sized for its share of `capacity` entries (all of them under full
/// duplication).
pub(crate) fn node_fib(
    cfg: &ClusterConfig,
    id: u8,
    capacity: usize,
) -> Result<(fp_cuckoo::FibWriter, fp_cuckoo::FibReader), Error> {
    let per_node = match cfg.mode {
        Mode::Duplicate => capacity,
        _ => ((capacity as f64 / cfg.nodes as f64) * cfg.fib_slack).ceil() as usize + 64,
    };
    // Every table gets its own seed: a FIB whose bucket hash equals the hash that chose its keys
    // (hash partitioning sends node 0 the keys whose hash is small) would fill a fraction of its
    // buckets and overflow.
    let c = fp_cuckoo::Config::with_capacity(per_node)
        .seed(fp_hash::splitmix64(
            cfg.seed ^ (id as u64 + 1).wrapping_mul(FIB_SEED),
        ))
        .pages(cfg.pages);
    let layout = cfg
        .fib_layout
        .unwrap_or_else(|| fp_cuckoo::FibLayout::auto(per_node));
    Ok(fp_cuckoo::FibMap::new(&c, layout, 16)?)
}

/// The partition table's settings for a cluster sized for `capacity` entries.
pub(crate) fn gpt_config(cfg: &ClusterConfig, capacity: usize) -> fp_setsep::Config {
    let mut sc = fp_setsep::Config::new(cfg.owner_bits())
        .setting(cfg.gpt_setting.0, cfg.gpt_setting.1)
        .seed(cfg.seed ^ GPT_SEED)
        .threads(cfg.build_threads)
        .capacity(capacity);
    sc.pages = cfg.pages;
    sc
}

/// Seed of the hash-partitioning home function of a cluster seeded `seed`.
pub(crate) fn home_seed(seed: u64) -> u64 {
    seed ^ HOME_SEED
}

impl<P: Port> Cluster<P> {
    /// Node `i`'s stage.
    pub fn node(&self, i: usize) -> &NodeStage {
        self.nodes[i].stage()
    }

    /// Node `i`'s external ports.
    pub fn externals(&self, i: usize) -> impl Iterator<Item = &P> {
        self.nodes[i].ports().iter().filter_map(|p| match p {
            NodePort::External(p) => Some(p),
            NodePort::Interconnect(_) => None,
        })
    }

    /// Node `i`'s external port `port`, writable.
    pub fn external_mut(&mut self, i: usize, port: usize) -> &mut P {
        match self.nodes[i].port_mut(port) {
            NodePort::External(p) => p,
            NodePort::Interconnect(_) => panic!("port {port} of node {i} is the interconnect"),
        }
    }

    /// One pass of every node, in id order. Returns the frames received.
    pub fn step(&mut self) -> usize {
        self.nodes.iter_mut().map(|n| n.pass()).sum()
    }

    /// Step until a round receives nothing and nothing waits to be sent (or `max_rounds`). Returns
    /// the rounds run.
    pub fn run_until_idle(&mut self, max_rounds: usize) -> usize {
        for r in 0..max_rounds {
            if self.step() == 0 && self.nodes.iter().all(|n| n.outputs().is_empty()) {
                return r + 1;
            }
        }
        max_rounds
    }

    /// Run every node on its own thread (the engine's worker loop) while `control` runs on the
    /// calling thread; when it returns, the nodes finish their traffic and stop, and the rest is
    /// drained here. Returns what `control` returned.
    pub fn run_threaded<R>(&mut self, control: impl FnOnce() -> R) -> R {
        let stop = AtomicBool::new(false);
        let opts = Options {
            name: "fp-cluster".into(),
            spin: 256,
            drain: std::time::Duration::from_secs(3600),
            ..Options::default()
        };
        let r = std::thread::scope(|s| {
            for (i, node) in self.nodes.iter_mut().enumerate() {
                let (stop, opts) = (&stop, &opts);
                s.spawn(move || driver::run(node, i, opts, stop));
            }
            let r = control();
            stop.store(true, std::sync::atomic::Ordering::Release);
            r
        });
        self.run_until_idle(usize::MAX);
        r
    }

    /// Counters summed over the nodes (frames the interconnect refused included).
    pub fn counters(&self) -> Counters {
        let mut c = Counters::default();
        for n in &self.nodes {
            c.add(&n.stage().counters);
            let ic = n.stage().interconnect_port();
            c.drop_link_full += n.counters().ports[ic].tx_dropped.get();
        }
        c
    }

    /// Interconnect hops taken by the frames emitted so far (from the sinks' point of view: the
    /// hop count each frame carried).
    pub fn hops(&self) -> u64
    where
        P: HopCount,
    {
        (0..self.nodes.len())
            .map(|i| self.externals(i).map(|p| p.hops()).sum::<u64>())
            .sum()
    }

    /// Memory node `i` spends on its tables.
    pub fn memory(&self, i: usize) -> NodeMemory {
        let t = self.nodes[i].stage().tables();
        let fs = t.fib.stats();
        NodeMemory {
            fib_bytes: fs.bytes(),
            fib_entries: fs.len,
            gpt_bytes: t.gpt.as_ref().map_or(0, |g| g.stats().bytes()),
            fib_layout: fs.layout,
        }
    }
}

/// Ports that count the interconnect hops of what they emit.
pub trait HopCount {
    /// Total hops of the frames emitted.
    fn hops(&self) -> u64;
}

impl HopCount for GenPort {
    fn hops(&self) -> u64 {
        self.sink.hops()
    }
}
