//! One node's data path, a stage of the engine: its ports are the external ports `0..k` and the
//! interconnect port `k`; one burst at a time, every table lookup batched (the partition table and
//! the FIB are each looked up once per burst with prefetching, CuckooSwitch's dynamic batching). No
//! allocation, lock or system call per packet; counters are plain fields (one thread owns the
//! node). Frames move between ports in their packet buffers: the interconnect header is written in
//! the headroom in front of a forwarded frame and stripped by moving the frame's start.
//!
//! What a node does with a frame depends on the cluster's [`Mode`]:
//!
//! | frame | ScaleBricks | full duplication | hash partitioning |
//! |---|---|---|---|
//! | external, key owned here | FIB → emit | FIB → emit | hash-owner here: FIB → emit or → egress |
//! | external, other key | partition table → owner (hop 1) | FIB → egress node (hop 1) | → hash-owner (hop 1) |
//! | interconnect `ToOwner` | FIB → emit (miss: redirect once, see below) | — | — |
//! | interconnect `ToLookup` | — | — | FIB → emit, or → egress (hop 2) |
//! | interconnect `ToEgress` | — | emit on the port in the shim | emit on the port in the shim |
//! | external, broadcast/multicast | all other local ports + one `Flood` to all nodes | same | same |
//! | interconnect `Flood` | emit on every external port, never forward | same | same |
//!
//! **Flooding.** A frame to a group address (broadcast, multicast: ARP requests, IPv6 neighbour
//! discovery) has no owner. The ingress node emits it on each of its external ports except the one
//! it came in on and sends *one* `Flood` frame to [`ALL_NODES`](crate::interconnect::ALL_NODES) (on
//! a real interconnect one transmission to a group MAC that the bridge or switch replicates; on the
//! in-memory fabric one copy per queue); each receiving node emits it on all its external ports and
//! never forwards it. So a flood reaches every external port of the cluster but its ingress port
//! exactly once, crossing the interconnect once. Unknown *unicast* is not flooded: every node's
//! partition table names an owner for any key, and that owner drops what its FIB does not hold
//! (`drop_unknown`); the control plane knows every entry (static entries, no learning).
//!
//! **Redirect.** While an entry moves from node A to node B the control plane first installs it at
//! B, then points every partition table at B, then removes it from A. A frame that left its ingress
//! before the partition tables changed may reach A after the removal; A then consults its own
//! (already updated) partition table and forwards it once more to B (a second hop, counted as
//! `redirected`). Frames that enter after the update completed go straight to B: one hop.
//!
//! **Congestion.** A node takes a new external burst only while nothing waits for the interconnect
//! and it has room for a whole burst, and an interconnect burst only while what waits leaves room
//! for one more burst of forwards ([`Stage::admit`]); so a full interconnect queue delays frames
//! (in the engine's backlog, sent first) instead of dropping them.
//!
//! **Hops.** A frame a node emits on an external port carries the interconnect hops it took in the
//! packet's `tag` (0: it entered here), for ports and tests that count them.
//!
//! **Tracer.** With a [`Tracer`] set, a frame carrying the packet tracer's probe
//! (`fp_pipeline::trace`; inside the interconnect header when it comes from another node) is
//! forwarded as usual and recorded: where it came from, its destination and the node the
//! partition table names for it, and where it went (external ports, another node, all nodes) —
//! rate-limited per node, queued for the control side. Looking for probes costs a length test for
//! short frames and a parse for long ones.
//!
//! **Counters for other threads.** At every maintenance the node stores its counters into a
//! [`PublishedCounters`] (single-writer atomics, no lock); readers load them at any time.

use crate::interconnect::{
    node_mac, strip, Encap, Interconnect, Kind, ALL_NODES, ENCAP, ETHERTYPE_INTERCONNECT, FLOOD_MAC,
};
use crate::Mode;
use fp_cuckoo::FibReader;
pub use fp_pipeline::packet::MAX_BURST;
use fp_pipeline::packet::{Packet, Pool};
use fp_pipeline::stage::{Outputs, Stage};
use fp_pipeline::stats::Counter;
use fp_pipeline::trace::{probe_id, ProbeSender};
use fp_setsep::SetSep;
use fp_wire::ethernet::MacAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Most interconnect hops a frame may take. ScaleBricks takes one; each redirect (a move that
/// overtook the frame) adds one, and a frame overtaken by several moves of its entry follows them
/// up to this bound (a bound, not a loop guard: every redirect follows a newer partition table).
pub const MAX_HOPS: u8 = 8;

/// Frames that may wait for the interconnect (a switch port's small buffer).
pub const DEFER: usize = 2 * MAX_BURST;

/// A node's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Frames received on external ports.
    pub ext_rx: u64,
    /// Frames emitted on external ports.
    pub emitted: u64,
    /// Frames received from the interconnect (for this node).
    pub ic_rx: u64,
    /// Frames sent to the interconnect.
    pub ic_tx: u64,
    /// Partition-table lookups.
    pub gpt_lookups: u64,
    /// FIB lookups.
    pub fib_lookups: u64,
    /// Frames forwarded again because this node no longer held the entry (ScaleBricks moves).
    pub redirected: u64,
    /// Frames for keys no table knows.
    pub drop_unknown: u64,
    /// Malformed frames (too short, bad interconnect header, misaddressed).
    pub drop_malformed: u64,
    /// Frames the interconnect port refused (no room; on live ports, the kernel refused them).
    pub drop_link_full: u64,
    /// Frames too large for the interconnect after encapsulation.
    pub drop_oversize: u64,
    /// Flood copies not made: no packet buffer.
    pub drop_no_buffer: u64,
    /// Frames for a node the control plane marks down (its lease expired): dropped where they
    /// are, never flooded or sent elsewhere.
    pub drop_owner_down: u64,
    /// Broadcast/multicast frames that entered at this node's external ports (flooded).
    pub flooded: u64,
    /// Flood frames received from the interconnect.
    pub flood_ic_rx: u64,
    /// Copies of flooded frames emitted on this node's external ports (not in `emitted`).
    pub flood_emitted: u64,
}

impl Counters {
    /// Sum of two nodes' counters.
    pub fn add(&mut self, o: &Counters) {
        self.ext_rx += o.ext_rx;
        self.emitted += o.emitted;
        self.ic_rx += o.ic_rx;
        self.ic_tx += o.ic_tx;
        self.gpt_lookups += o.gpt_lookups;
        self.fib_lookups += o.fib_lookups;
        self.redirected += o.redirected;
        self.drop_unknown += o.drop_unknown;
        self.drop_malformed += o.drop_malformed;
        self.drop_link_full += o.drop_link_full;
        self.drop_oversize += o.drop_oversize;
        self.drop_no_buffer += o.drop_no_buffer;
        self.drop_owner_down += o.drop_owner_down;
        self.flooded += o.flooded;
        self.flood_ic_rx += o.flood_ic_rx;
        self.flood_emitted += o.flood_emitted;
    }

    /// All drops.
    pub fn drops(&self) -> u64 {
        self.drop_unknown
            + self.drop_malformed
            + self.drop_link_full
            + self.drop_oversize
            + self.drop_no_buffer
            + self.drop_owner_down
    }
}

/// What a node publishes for readers on other threads, at every maintenance (about every 10 ms).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Published {
    /// Publications so far (a reader can tell a fresh one).
    pub seq: u64,
    /// The node's counters.
    pub counters: Counters,
    /// Frames emitted on external ports by the interconnect hops they took: 0 (entered here), 1,
    /// 2 or more (a redirect after a move). Flood copies included.
    pub by_hops: [u64; 3],
    /// Frames the node asked to emit on a port that does not exist.
    pub tx_no_port: u64,
    /// Frames on the interconnect port that were not for this node (another ethertype or node),
    /// ignored: a bridge floods unicast to MACs it has not learned yet, and other protocols may
    /// share the segment.
    pub ic_ignored: u64,
}

/// Where a node publishes its counters for readers on other threads: one single-writer atomic
/// per figure (the node writes, at every maintenance; readers load at any time and see each
/// figure at some recent value). No lock on the node's side.
#[derive(Debug, Default)]
pub struct PublishedCounters {
    seq: Counter,
    figures: [Counter; FIGURES],
}

/// Figures of a [`Published`]: 16 counters, 3 hop counts, `tx_no_port`, `ic_ignored`.
const FIGURES: usize = 21;

impl PublishedCounters {
    /// Store `p` (the node, at maintenance).
    pub fn store(&self, p: &Published) {
        let c = &p.counters;
        let v: [u64; FIGURES] = [
            c.ext_rx,
            c.emitted,
            c.ic_rx,
            c.ic_tx,
            c.gpt_lookups,
            c.fib_lookups,
            c.redirected,
            c.drop_unknown,
            c.drop_malformed,
            c.drop_link_full,
            c.drop_oversize,
            c.drop_no_buffer,
            c.drop_owner_down,
            c.flooded,
            c.flood_ic_rx,
            c.flood_emitted,
            p.by_hops[0],
            p.by_hops[1],
            p.by_hops[2],
            p.tx_no_port,
            p.ic_ignored,
        ];
        for (f, x) in self.figures.iter().zip(v) {
            f.set(x);
        }
        self.seq.set(p.seq);
    }

    /// The figures last stored.
    pub fn load(&self) -> Published {
        let v: Vec<u64> = self.figures.iter().map(Counter::get).collect();
        Published {
            seq: self.seq.get(),
            counters: Counters {
                ext_rx: v[0],
                emitted: v[1],
                ic_rx: v[2],
                ic_tx: v[3],
                gpt_lookups: v[4],
                fib_lookups: v[5],
                redirected: v[6],
                drop_unknown: v[7],
                drop_malformed: v[8],
                drop_link_full: v[9],
                drop_oversize: v[10],
                drop_no_buffer: v[11],
                drop_owner_down: v[12],
                flooded: v[13],
                flood_ic_rx: v[14],
                flood_emitted: v[15],
            },
            by_hops: [v[16], v[17], v[18]],
            tx_no_port: v[19],
            ic_ignored: v[20],
        }
    }
}

/// A node's identity and sizes.
#[derive(Clone, Copy, Debug)]
pub struct NodeConfig {
    /// This node's id (0..nodes).
    pub id: u8,
    /// Nodes in the cluster.
    pub nodes: u8,
    /// How the FIB is spread.
    pub mode: Mode,
    /// External ports (the interconnect is port `ports`).
    pub ports: u16,
    /// Frames per burst (1..=32).
    pub burst: usize,
    /// Longest external frame.
    pub max_frame: usize,
}

/// The tables a node reads (cloning shares them: handles on the same tables).
#[derive(Clone)]
pub struct Tables {
    /// This node's share of the FIB (all of it under full duplication).
    pub fib: FibReader,
    /// The partition table replica (ScaleBricks only).
    pub gpt: Option<SetSep>,
    /// Seed of the hash that picks a key's home under hash partitioning.
    pub hash_seed: u64,
    /// Nodes marked down, bit `i` for node `i`, written by the control plane and read once per
    /// burst: frames for a down node are dropped (`drop_owner_down`).
    pub down: Arc<AtomicU64>,
}

/// Home node of `key` under hash partitioning.
#[inline]
pub fn hash_home(seed: u64, key: u64, nodes: u8) -> u8 {
    fp_hash::reduce(fp_hash::hash_u64(seed, key), nodes as u64) as u8
}

/// What happens to one frame of a burst, decided before any frame moves.
#[derive(Clone, Copy, Debug)]
enum Act {
    /// Dropped (counted when decided).
    Drop,
    /// Emitted on an external port; `strip`: remove the interconnect header first.
    Emit { port: u16, hops: u8, strip: bool },
    /// Encapsulated toward another node.
    Forward(Encap),
    /// Re-addressed in place for another hop.
    Readdress {
        to: u8,
        kind: Kind,
        hops: u8,
        port: u16,
    },
    /// A group-addressed external frame: every other local port, and one flood to all nodes.
    FloodOut,
    /// A flood from another node: every local port.
    FloodIn { hops: u8 },
}

/// What a node recorded about a probe frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeTrace {
    /// This node.
    pub node: u8,
    /// The external port it entered on, or `None` if it came over the interconnect.
    pub in_port: Option<u16>,
    /// The node that sent it over the interconnect, and the hops it had taken.
    pub from_node: Option<(u8, u8)>,
    /// Its destination MAC.
    pub dst: MacAddr,
    /// The owner the partition table names (ScaleBricks; arbitrary for unknown keys).
    pub owner: Option<u16>,
    /// Where copies went: `port N` (external) or `node N` / `all nodes` (interconnect).
    pub out: Vec<String>,
    /// `emitted`, `to_node`, `flooded` or `dropped`.
    pub decision: &'static str,
}

/// A node's tracer: its queue of records to the control side (with the rate limit).
pub type Tracer = ProbeSender<NodeTrace>;

/// A probe seen in a burst: its id, its destination, the node that sent it and the hops it took.
type Probe = (u64, MacAddr, Option<(u8, u8)>);

/// Probes looked at per burst (rare; a fixed array).
const MAX_PROBES: usize = 4;

/// One cluster node: a [`Stage`] with external ports `0..k` and the interconnect port `k`.
pub struct NodeStage {
    id: u8,
    nodes: u8,
    mode: Mode,
    tables: Tables,
    ports: u16,
    burst: usize,
    max_ic_frame: usize,
    /// Counters.
    pub counters: Counters,
    by_hops: [u64; 3],
    tx_no_port: u64,
    ic_ignored: u64,
    publish: Option<Arc<PublishedCounters>>,
    seq: u64,
    keys: [u64; MAX_BURST],
    owner: [u16; MAX_BURST],
    ok: [bool; MAX_BURST],
    sub: [u64; MAX_BURST],
    subi: [u8; MAX_BURST],
    fibv: [Option<u16>; MAX_BURST],
    act: [Act; MAX_BURST],
    /// `tables.down` as loaded for the current burst.
    down_now: u64,
    tracer: Option<Tracer>,
    /// Probes of the current burst: (probe id, destination, sender node and hops).
    probes: [Probe; MAX_PROBES],
    n_probes: usize,
}

impl NodeStage {
    /// A node reading `tables`. Panics if a ScaleBricks node has no partition table.
    pub fn new(cfg: NodeConfig, tables: Tables) -> NodeStage {
        assert!(cfg.mode != Mode::ScaleBricks || tables.gpt.is_some());
        NodeStage {
            id: cfg.id,
            nodes: cfg.nodes,
            mode: cfg.mode,
            tables,
            ports: cfg.ports,
            burst: cfg.burst.clamp(1, MAX_BURST),
            max_ic_frame: cfg.max_frame + ENCAP,
            counters: Counters::default(),
            by_hops: [0; 3],
            tx_no_port: 0,
            ic_ignored: 0,
            publish: None,
            seq: 0,
            keys: [0; MAX_BURST],
            owner: [0; MAX_BURST],
            ok: [false; MAX_BURST],
            sub: [0; MAX_BURST],
            subi: [0; MAX_BURST],
            fibv: [None; MAX_BURST],
            act: [Act::Drop; MAX_BURST],
            down_now: 0,
            tracer: None,
            probes: [(0, MacAddr([0; 6]), None); MAX_PROBES],
            n_probes: 0,
        }
    }

    /// Record the probe frames this node forwards into `tracer`.
    pub fn trace_to(&mut self, tracer: Tracer) {
        self.tracer = Some(tracer);
    }

    /// Look for probes in a received burst (external or interconnect frames).
    #[inline]
    fn scan_probes(&mut self, interconnect: bool, rx: &[Packet]) {
        self.n_probes = 0;
        for p in rx {
            let d = p.data();
            let inner = if interconnect {
                d.get(ENCAP..).unwrap_or(&[])
            } else {
                d
            };
            if let Some(id) = probe_id(inner) {
                self.found_probe(id, interconnect, d);
            }
        }
    }

    #[cold]
    #[inline(never)]
    fn found_probe(&mut self, id: u64, interconnect: bool, d: &[u8]) {
        if self.n_probes == MAX_PROBES {
            return;
        }
        let (dst, from) = if interconnect {
            let ic = Interconnect::new_unchecked(d);
            let inner = ic.inner();
            (
                MacAddr(
                    inner[..6]
                        .try_into()
                        .expect("a probe has an Ethernet header"),
                ),
                Some((ic.src_node(), ic.hops())),
            )
        } else {
            (
                MacAddr(d[..6].try_into().expect("a probe has an Ethernet header")),
                None,
            )
        };
        self.probes[self.n_probes] = (id, dst, from);
        self.n_probes += 1;
    }

    /// After a burst: where each probe went.
    #[cold]
    #[inline(never)]
    fn record_probes(&mut self, in_port: Option<u16>, out: &Outputs, now_ns: u64) {
        let n = std::mem::take(&mut self.n_probes);
        let ic = self.ports as usize;
        for k in 0..n {
            let (id, dst, from) = self.probes[k];
            let owner = match (&self.tables.gpt, dst.is_multicast()) {
                (Some(g), false) => Some(g.get(dst.to_u64())),
                _ => None,
            };
            let mut outs = Vec::new();
            for j in 0..out.ports() {
                for p in out.burst(j) {
                    let d = p.data();
                    if j == ic {
                        if probe_id(d.get(ENCAP..).unwrap_or(&[])) == Some(id) {
                            let to = Interconnect::new_unchecked(d).dst_node();
                            outs.push(if to == ALL_NODES {
                                "all nodes".to_string()
                            } else {
                                format!("node {to}")
                            });
                        }
                    } else if probe_id(d) == Some(id) {
                        outs.push(format!("port {j}"));
                    }
                }
            }
            let decision = match (outs.len(), outs.first().map(String::as_str)) {
                (0, _) => "dropped",
                (1, Some(o)) if o.starts_with("port") => "emitted",
                (1, Some(o)) if o.starts_with("node") => "to_node",
                _ => "flooded",
            };
            let Some(t) = self.tracer.as_mut() else {
                return;
            };
            if !t.admit(now_ns) {
                continue;
            }
            t.send(
                id,
                now_ns,
                NodeTrace {
                    node: self.id,
                    in_port,
                    from_node: from,
                    dst,
                    owner,
                    out: outs,
                    decision,
                },
            );
        }
    }

    /// Publish the counters into `to` at every maintenance (for readers on other threads).
    pub fn publish_to(&mut self, to: Arc<PublishedCounters>) {
        self.publish = Some(to);
    }

    /// What the node would publish now.
    pub fn published(&self) -> Published {
        Published {
            seq: self.seq,
            counters: self.counters,
            by_hops: self.by_hops,
            tx_no_port: self.tx_no_port,
            ic_ignored: self.ic_ignored,
        }
    }

    /// This node's id.
    pub fn id(&self) -> u8 {
        self.id
    }

    /// The interconnect's port index (after the external ports).
    pub fn interconnect_port(&self) -> usize {
        self.ports as usize
    }

    /// The tables this node reads.
    pub fn tables(&self) -> &Tables {
        &self.tables
    }

    fn gpt(&self) -> &SetSep {
        self.tables
            .gpt
            .as_ref()
            .expect("a ScaleBricks node has a partition table")
    }

    /// Decide the frames of an external burst from port `ingress`.
    fn decide_external(&mut self, rx: &[Packet]) {
        let n = rx.len();
        let me = self.id;
        let c = &mut self.counters;
        c.ext_rx += n as u64;
        for (i, p) in rx.iter().enumerate() {
            self.ok[i] = false;
            self.act[i] = Act::Drop;
            match p.data().get(..6) {
                Some(d) if p.len() >= 14 => {
                    let dst = MacAddr(d.try_into().expect("6 bytes"));
                    if dst.is_multicast() {
                        // Broadcast/multicast: no owner, flooded.
                        self.act[i] = Act::FloodOut;
                    } else {
                        self.keys[i] = dst.to_u64();
                        self.ok[i] = true;
                    }
                }
                _ => c.drop_malformed += 1,
            }
        }
        // 1. Who handles each frame: here (`owner == me`) or another node, and with which kind.
        let fwd_kind = match self.mode {
            Mode::ScaleBricks => {
                let gpt = self
                    .tables
                    .gpt
                    .as_ref()
                    .expect("a ScaleBricks node has a partition table");
                gpt.get_batch(&self.keys[..n], &mut self.owner[..n]);
                c.gpt_lookups += n as u64;
                Kind::ToOwner
            }
            Mode::HashPartition => {
                for i in 0..n {
                    self.owner[i] =
                        hash_home(self.tables.hash_seed, self.keys[i], self.nodes) as u16;
                }
                Kind::ToLookup
            }
            Mode::Duplicate => {
                self.owner[..n].iter_mut().for_each(|o| *o = me as u16);
                Kind::ToEgress
            }
        };
        // 2. Batched FIB lookup of the frames handled here.
        let mut m = 0;
        for i in 0..n {
            if self.ok[i] && self.owner[i] == me as u16 {
                self.sub[m] = self.keys[i];
                self.subi[m] = i as u8;
                m += 1;
            }
        }
        if m > 0 {
            self.tables
                .fib
                .get_batch(&self.sub[..m], &mut self.fibv[..m]);
            self.counters.fib_lookups += m as u64;
        }
        let encap = |to: u8, kind: Kind, port: u16| Encap {
            from: me,
            to,
            kind,
            hops: 1,
            ingress: me,
            port,
        };
        // 3. Frames handled here.
        for j in 0..m {
            let i = self.subi[j] as usize;
            self.act[i] = match (self.mode, self.fibv[j]) {
                (Mode::ScaleBricks, None) => {
                    // The entry may have moved away between the partition-table lookup and the
                    // FIB lookup (the partition table changes before the old FIB entry goes):
                    // ask the partition table again.
                    self.counters.gpt_lookups += 1;
                    let to = self.gpt().get(self.keys[i]);
                    if to == me as u16 || to >= self.nodes as u16 {
                        self.counters.drop_unknown += 1;
                        Act::Drop
                    } else {
                        Act::Forward(encap(to as u8, Kind::ToOwner, 0))
                    }
                }
                (_, None) => {
                    self.counters.drop_unknown += 1;
                    Act::Drop
                }
                (Mode::ScaleBricks, Some(port)) => Act::Emit {
                    port,
                    hops: 0,
                    strip: false,
                },
                (_, Some(v)) => {
                    let (egress, port) = ((v >> 8) as u8, v & 0xFF);
                    if egress == me {
                        Act::Emit {
                            port,
                            hops: 0,
                            strip: false,
                        }
                    } else {
                        Act::Forward(encap(egress, Kind::ToEgress, port))
                    }
                }
            };
        }
        // 4. Frames handled elsewhere.
        for i in 0..n {
            let o = self.owner[i];
            if !self.ok[i] || o == me as u16 {
                continue;
            }
            self.act[i] = if o >= self.nodes as u16 {
                // A partition table maps unknown keys to arbitrary values, possibly no node.
                self.counters.drop_unknown += 1;
                Act::Drop
            } else {
                Act::Forward(encap(o as u8, fwd_kind, 0))
            };
        }
    }

    /// Decide the frames of an interconnect burst.
    fn decide_interconnect(&mut self, rx: &[Packet]) {
        let me = self.id;
        let mut m = 0;
        for (i, p) in rx.iter().enumerate() {
            self.ok[i] = false;
            self.act[i] = Act::Drop;
            let d = p.data();
            // Frames for other nodes or of other protocols share a real interconnect: ignored.
            let for_me = d.len() >= 14
                && (d[..6] == node_mac(me).0 || d[..6] == FLOOD_MAC.0)
                && d[12..14] == ETHERTYPE_INTERCONNECT.to_be_bytes();
            if !for_me {
                self.ic_ignored += 1;
                continue;
            }
            self.counters.ic_rx += 1;
            let Ok(ic) = Interconnect::new_checked(d) else {
                self.counters.drop_malformed += 1;
                continue;
            };
            let to_me = match ic.kind() {
                Kind::Flood => ic.dst_node() == ALL_NODES && ic.src_node() != me,
                _ => ic.dst_node() == me,
            };
            if !to_me {
                self.counters.drop_malformed += 1;
                continue;
            }
            self.ok[i] = true;
            if !matches!(ic.kind(), Kind::ToEgress | Kind::Flood) {
                // The shim check guarantees an inner Ethernet header.
                let inner = ic.inner();
                self.keys[i] =
                    MacAddr(inner[..6].try_into().expect("an inner Ethernet header")).to_u64();
                self.sub[m] = self.keys[i];
                self.subi[m] = i as u8;
                self.owner[i] = m as u16;
                m += 1;
            }
        }
        if m > 0 {
            self.tables
                .fib
                .get_batch(&self.sub[..m], &mut self.fibv[..m]);
            self.counters.fib_lookups += m as u64;
        }
        for (i, p) in rx.iter().enumerate() {
            if !self.ok[i] {
                continue;
            }
            let ic = Interconnect::new_unchecked(p.data());
            let (kind, hops) = (ic.kind(), ic.hops());
            let emit = |port| Act::Emit {
                port,
                hops,
                strip: true,
            };
            self.act[i] = match kind {
                Kind::Flood => {
                    self.counters.flood_ic_rx += 1;
                    Act::FloodIn { hops }
                }
                Kind::ToEgress => emit(ic.egress_port()),
                Kind::ToOwner => match self.fibv[self.owner[i] as usize] {
                    Some(port) => emit(port),
                    None => {
                        let to = match (&self.tables.gpt, hops < MAX_HOPS) {
                            (Some(g), true) => g.get(self.keys[i]),
                            _ => me as u16,
                        };
                        if to == me as u16 {
                            // The entry moved away and back while the frame travelled: the FIB
                            // insert precedes the partition-table update, so look again.
                            self.counters.fib_lookups += 1;
                            match self.tables.fib.get(self.keys[i]) {
                                Some(port) => emit(port),
                                None => {
                                    self.counters.drop_unknown += 1;
                                    Act::Drop
                                }
                            }
                        } else if to >= self.nodes as u16 {
                            self.counters.drop_unknown += 1;
                            Act::Drop
                        } else {
                            self.counters.redirected += 1;
                            Act::Readdress {
                                to: to as u8,
                                kind: Kind::ToOwner,
                                hops: hops + 1,
                                port: 0,
                            }
                        }
                    }
                },
                Kind::ToLookup => match self.fibv[self.owner[i] as usize] {
                    None => {
                        self.counters.drop_unknown += 1;
                        Act::Drop
                    }
                    Some(v) => {
                        let (egress, port) = ((v >> 8) as u8, v & 0xFF);
                        if egress == me {
                            emit(port)
                        } else {
                            Act::Readdress {
                                to: egress,
                                kind: Kind::ToEgress,
                                hops: hops + 1,
                                port,
                            }
                        }
                    }
                },
            };
        }
    }

    /// Hand `p` to external port `port`, with the hops it took.
    #[inline]
    fn emit(&mut self, mut p: Packet, port: u16, hops: u8, out: &mut Outputs, pool: &mut Pool) {
        if port >= self.ports {
            self.tx_no_port += 1;
            pool.put(p);
            return;
        }
        p.tag = hops as u16;
        self.by_hops[(hops as usize).min(2)] += 1;
        out.to(port as usize).push(p);
    }

    /// Queue `p` (an interconnect frame) for the interconnect.
    #[inline]
    fn send_over_interconnect(&mut self, p: Packet, out: &mut Outputs) {
        self.counters.ic_tx += 1;
        out.to(self.ports as usize).push(p);
    }

    /// Whether node `to` is marked down (never the all-nodes address).
    #[inline]
    fn is_down(&self, to: u8) -> bool {
        to < 64 && self.down_now & (1u64 << to) != 0
    }

    /// Encapsulate `p` toward another node.
    #[inline]
    fn forward(&mut self, mut p: Packet, e: Encap, out: &mut Outputs, pool: &mut Pool) {
        if self.is_down(e.to) {
            self.counters.drop_owner_down += 1;
            pool.put(p);
            return;
        }
        if p.len() + ENCAP > self.max_ic_frame || e.prepend(&mut p).is_err() {
            self.counters.drop_oversize += 1;
            pool.put(p);
            return;
        }
        self.send_over_interconnect(p, out);
    }

    /// A copy of `p` from the pool; `None` (counted) when the pool is empty (the worker's pool is
    /// sized so this does not happen).
    fn copy(&mut self, p: &Packet, pool: &mut Pool) -> Option<Packet> {
        let Some(mut c) = pool.get() else {
            self.counters.drop_no_buffer += 1;
            return None;
        };
        c.fill(p.data());
        c.ts_ns = p.ts_ns;
        Some(c)
    }

    /// `p` on every external port but `except` (`u16::MAX`: none): copies on all but the last,
    /// `p` itself on the last. Returns how many were emitted.
    fn flood_local(
        &mut self,
        p: Packet,
        except: u16,
        hops: u8,
        out: &mut Outputs,
        pool: &mut Pool,
    ) -> u64 {
        let Some(last) = (0..self.ports).rev().find(|&q| q != except) else {
            pool.put(p);
            return 0;
        };
        let mut n = 0;
        for port in (0..last).filter(|&q| q != except) {
            if let Some(c) = self.copy(&p, pool) {
                self.emit(c, port, hops, out, pool);
                n += 1;
            }
        }
        self.emit(p, last, hops, out, pool);
        n + 1
    }

    /// Carry out the decisions, in the burst's order.
    fn apply(&mut self, ingress: u16, rx: &mut Vec<Packet>, out: &mut Outputs, pool: &mut Pool) {
        for (i, mut p) in rx.drain(..).enumerate() {
            match self.act[i] {
                Act::Drop => pool.put(p),
                Act::Emit {
                    port,
                    hops,
                    strip: s,
                } => {
                    if s {
                        strip(&mut p);
                    }
                    self.counters.emitted += 1;
                    self.emit(p, port, hops, out, pool);
                }
                Act::Forward(e) => self.forward(p, e, out, pool),
                Act::Readdress {
                    to,
                    kind,
                    hops,
                    port,
                } => {
                    if self.is_down(to) {
                        self.counters.drop_owner_down += 1;
                        pool.put(p);
                        continue;
                    }
                    Interconnect::new_unchecked(p.data_mut())
                        .readdress(self.id, to, kind, hops, port);
                    self.send_over_interconnect(p, out);
                }
                Act::FloodOut => {
                    self.counters.flooded += 1;
                    if self.nodes > 1 {
                        // The original goes to the other nodes, a copy floods this node's ports.
                        if let Some(c) = self.copy(&p, pool) {
                            self.counters.flood_emitted +=
                                self.flood_local(c, ingress, 0, out, pool);
                        }
                        let e = Encap {
                            from: self.id,
                            to: ALL_NODES,
                            kind: Kind::Flood,
                            hops: 1,
                            ingress: self.id,
                            port: ingress,
                        };
                        self.forward(p, e, out, pool);
                    } else {
                        self.counters.flood_emitted += self.flood_local(p, ingress, 0, out, pool);
                    }
                }
                Act::FloodIn { hops } => {
                    strip(&mut p);
                    self.counters.flood_emitted += self.flood_local(p, u16::MAX, hops, out, pool);
                }
            }
        }
    }
}

impl Stage for NodeStage {
    fn process(
        &mut self,
        port: usize,
        rx: &mut Vec<Packet>,
        out: &mut Outputs,
        pool: &mut Pool,
        now_ns: u64,
    ) {
        self.down_now = self.tables.down.load(Ordering::Relaxed);
        let interconnect = port == self.ports as usize;
        if self.tracer.is_some() {
            self.scan_probes(interconnect, rx);
        }
        if interconnect {
            self.decide_interconnect(rx);
            self.apply(u16::MAX, rx, out, pool);
        } else {
            self.decide_external(rx);
            self.apply(port as u16, rx, out, pool);
        }
        if self.n_probes > 0 {
            self.record_probes((!interconnect).then_some(port as u16), out, now_ns);
        }
    }

    /// External input only while nothing waits for the interconnect and a whole burst fits;
    /// interconnect input only while a burst of forwards still fits behind what waits.
    #[inline]
    fn admit(&mut self, port: usize, out: &Outputs) -> bool {
        let ic = self.ports as usize;
        if port == ic {
            out.queued(ic) + self.burst <= DEFER
        } else {
            out.queued(ic) == 0 && out.room(ic) >= self.burst
        }
    }

    fn maintain(&mut self, _now_ns: u64, _out: &mut Outputs, _pool: &mut Pool) {
        if let Some(m) = &self.publish {
            self.seq += 1;
            m.store(&self.published());
        }
    }
}
