//! One node's data path: a poll loop over its interconnect link and its external ports, one burst at a
//! time, every table lookup batched (the partition table and the FIB are each looked up once per
//! burst with prefetching, CuckooSwitch's dynamic batching). No allocation, lock or system call per
//! packet; counters are plain fields of the node (one thread owns it).
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
//! it came in on and sends *one* `Flood` frame to [`ALL_NODES`](crate::wire::ALL_NODES) (on a real
//! interconnect one transmission to a group MAC that the bridge or switch replicates; on the
//! in-memory fabric one copy per queue); each receiving node emits it on all its external ports and
//! never forwards it. So a flood reaches every external port of the cluster but its ingress port
//! exactly once, crossing the interconnect once. Unknown *unicast* is not flooded: every node's
//! partition table names an owner for any key, and that owner drops what its FIB does not hold
//! (`drop_unknown`); the control plane knows every entry (static entries, no learning).
//!
//! **Redirect.** While an entry moves from node A to node B the control plane first installs it at B,
//! then points every partition table at B, then removes it from A. A frame that left its ingress
//! before the partition tables changed may reach A after the removal; A then consults its own
//! (already updated) partition table and forwards it once more to B (a second hop, counted as
//! `redirected`). Frames that enter after the update completed go straight to B: one hop.

use crate::link::{Link, LinkError};
use crate::port::{Burst, ExternalPort};
use crate::wire::{is_group, Encap, EthFrame, Interconnect, Kind, ALL_NODES, ENCAP};
use crate::Mode;
use fp_cuckoo::CompactReader;
use fp_setsep::SetSep;

/// Largest burst a node processes at once (the table crates' lookup chunk).
pub const MAX_BURST: usize = 32;
/// Most interconnect hops a frame may take. ScaleBricks takes one; each redirect (a move that
/// overtook the frame) adds one, and a frame overtaken by several moves of its entry follows them
/// up to this bound (a bound, not a loop guard: every redirect follows a newer partition table).
pub const MAX_HOPS: u8 = 8;

/// A node's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Frames received on external ports.
    pub ext_rx: u64,
    /// Frames emitted on external ports.
    pub emitted: u64,
    /// Frames received from the interconnect.
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
    /// Frames refused by a full interconnect queue.
    pub drop_link_full: u64,
    /// Frames too large for the interconnect after encapsulation.
    pub drop_oversize: u64,
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
        self.flooded += o.flooded;
        self.flood_ic_rx += o.flood_ic_rx;
        self.flood_emitted += o.flood_emitted;
    }

    /// All drops.
    pub fn drops(&self) -> u64 {
        self.drop_unknown + self.drop_malformed + self.drop_link_full + self.drop_oversize
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
    /// Frames per burst (1..=32).
    pub burst: usize,
    /// Longest external frame.
    pub max_frame: usize,
}

/// The tables a node reads.
pub struct Tables {
    /// This node's share of the FIB (all of it under full duplication).
    pub fib: CompactReader,
    /// The partition table replica (ScaleBricks only).
    pub gpt: Option<SetSep>,
    /// Seed of the hash that picks a key's home under hash partitioning.
    pub hash_seed: u64,
}

/// One cluster node.
pub struct Node<L: Link, P: ExternalPort> {
    id: u8,
    nodes: u8,
    mode: Mode,
    tables: Tables,
    /// The interconnect port.
    pub link: L,
    /// The external ports.
    pub port: P,
    rx: Burst,
    deferred: Deferred,
    out: Box<[u8]>,
    burst: usize,
    /// Counters.
    pub counters: Counters,
    keys: [u64; MAX_BURST],
    owner: [u16; MAX_BURST],
    ok: [bool; MAX_BURST],
    flood: [bool; MAX_BURST],
    sub: [u64; MAX_BURST],
    subi: [u8; MAX_BURST],
    fibv: [Option<u16>; MAX_BURST],
}

/// Home node of `key` under hash partitioning.
#[inline]
pub fn hash_home(seed: u64, key: u64, nodes: u8) -> u8 {
    fp_hash::reduce(fp_hash::hash_u64(seed, key), nodes as u64) as u8
}

/// Frames waiting for room on the interconnect (a switch port's small buffer): a full queue delays a
/// frame instead of dropping it, so traffic overtaken by moves is not lost when queues are busy.
struct Deferred {
    frames: Burst,
    to: [u8; 2 * MAX_BURST],
}

impl Deferred {
    /// Send `frame` to `to`, or queue it behind earlier deferred frames; counts the outcome.
    #[inline]
    fn send<L: Link>(&mut self, link: &mut L, c: &mut Counters, to: u8, frame: &[u8]) {
        let r = if self.frames.is_empty() {
            link.send(to, frame)
        } else {
            Err(LinkError::Full)
        };
        match r {
            Ok(()) => c.ic_tx += 1,
            Err(LinkError::Full) => {
                let i = self.frames.len();
                if self.frames.push(frame) {
                    self.to[i] = to;
                } else {
                    c.drop_link_full += 1;
                }
            }
            Err(LinkError::TooLarge) => c.drop_oversize += 1,
            Err(LinkError::NoRoute) => c.drop_unknown += 1,
        }
    }

    /// Retry the queued frames in order; returns how many left.
    fn flush<L: Link>(&mut self, link: &mut L, c: &mut Counters) -> usize {
        if self.frames.is_empty() {
            return 0;
        }
        let before = self.frames.len();
        let to = self.to;
        let mut w = 0;
        let mut blocked = false;
        self.frames.retain(|i, f| {
            let keep = blocked || link.send(to[i], f).is_err();
            if keep {
                // Keep the order: once one frame waits, the rest wait behind it.
                blocked = true;
                self.to[w] = to[i];
                w += 1;
            } else {
                c.ic_tx += 1;
            }
            keep
        });
        before - self.frames.len()
    }

    fn free(&self) -> usize {
        self.frames.capacity() - self.frames.len()
    }
}

/// Encapsulate `inner` and send it (or defer it); counts the outcome.
#[inline]
fn forward<L: Link>(
    link: &mut L,
    deferred: &mut Deferred,
    out: &mut [u8],
    c: &mut Counters,
    e: Encap,
    inner: &[u8],
) {
    match e.emit(inner, out) {
        Ok(len) => deferred.send(link, c, e.to, &out[..len]),
        Err(_) => c.drop_oversize += 1,
    }
}

impl<L: Link, P: ExternalPort> Node<L, P> {
    /// A node reading `tables`, connected by `link` and `port`. Panics if a ScaleBricks node has no
    /// partition table.
    pub fn new(cfg: NodeConfig, tables: Tables, link: L, port: P) -> Self {
        let NodeConfig {
            id,
            nodes,
            mode,
            burst,
            max_frame,
        } = cfg;
        assert!(mode != Mode::ScaleBricks || tables.gpt.is_some());
        let burst = burst.clamp(1, MAX_BURST);
        Node {
            id,
            nodes,
            mode,
            tables,
            link,
            port,
            rx: Burst::new(burst, max_frame + ENCAP),
            deferred: Deferred {
                frames: Burst::new(2 * MAX_BURST, max_frame + ENCAP),
                to: [0; 2 * MAX_BURST],
            },
            out: vec![0; max_frame + 2 * ENCAP].into_boxed_slice(),
            burst,
            counters: Counters::default(),
            keys: [0; MAX_BURST],
            owner: [0; MAX_BURST],
            ok: [false; MAX_BURST],
            flood: [false; MAX_BURST],
            sub: [0; MAX_BURST],
            subi: [0; MAX_BURST],
            fibv: [None; MAX_BURST],
        }
    }

    /// This node's id.
    pub fn id(&self) -> u8 {
        self.id
    }

    /// One round: retry deferred frames, drain a burst from the interconnect, then — if nothing waits
    /// and the interconnect has room — take a burst from the external ports; finally flush the
    /// link's and the ports' transmit queues. Returns the frames handled (0: idle).
    pub fn poll(&mut self) -> usize {
        let mut work = self.deferred.flush(&mut self.link, &mut self.counters);
        work += self.poll_interconnect();
        if self.deferred.frames.is_empty() && self.link.room(self.burst) {
            work += self.poll_external();
        }
        self.link.flush();
        self.port.flush();
        work
    }

    /// Handle one burst from the external ports.
    pub fn poll_external(&mut self) -> usize {
        self.rx.clear();
        let n = self.port.rx_burst(&mut self.rx);
        if n == 0 {
            return 0;
        }
        let c = &mut self.counters;
        c.ext_rx += n as u64;
        let mut floods = 0;
        for i in 0..n {
            self.flood[i] = false;
            match EthFrame::new_checked(self.rx.get(i)) {
                Ok(f) if is_group(f.dst()) => {
                    // Broadcast/multicast: no owner, flooded below.
                    self.keys[i] = 0;
                    self.ok[i] = false;
                    self.flood[i] = true;
                    floods += 1;
                }
                Ok(f) => {
                    self.keys[i] = f.dst_key();
                    self.ok[i] = true;
                }
                Err(_) => {
                    self.keys[i] = 0;
                    self.ok[i] = false;
                    c.drop_malformed += 1;
                }
            }
        }
        if floods > 0 {
            self.flood_external(n);
        }
        let c = &mut self.counters;
        let me = self.id;
        // 1. Who handles each frame: here (`owner == me`) or another node, and with which kind.
        let fwd_kind = match self.mode {
            Mode::ScaleBricks => {
                let gpt = self
                    .tables
                    .gpt
                    .as_ref()
                    .expect("ScaleBricks node has a partition table");
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
            c.fib_lookups += m as u64;
        }
        // 3. Act.
        for j in 0..m {
            let i = self.subi[j] as usize;
            let frame = self.rx.get(i);
            match (self.mode, self.fibv[j]) {
                (Mode::ScaleBricks, None) => {
                    // The entry may have moved away between the partition-table lookup and the
                    // FIB lookup (the partition table changes before the old FIB entry goes): ask
                    // the partition table again.
                    let gpt = self
                        .tables
                        .gpt
                        .as_ref()
                        .expect("ScaleBricks node has a partition table");
                    c.gpt_lookups += 1;
                    let to = gpt.get(self.keys[i]);
                    if to == me as u16 || to >= self.nodes as u16 {
                        c.drop_unknown += 1;
                    } else {
                        let e = Encap {
                            from: me,
                            to: to as u8,
                            kind: Kind::ToOwner,
                            hops: 1,
                            ingress: me,
                            port: 0,
                        };
                        forward(
                            &mut self.link,
                            &mut self.deferred,
                            &mut self.out,
                            c,
                            e,
                            frame,
                        );
                    }
                }
                (_, None) => c.drop_unknown += 1,
                (Mode::ScaleBricks, Some(port)) => {
                    self.port.tx(port, frame, 0);
                    c.emitted += 1;
                }
                (_, Some(v)) => {
                    let (egress, port) = ((v >> 8) as u8, v & 0xFF);
                    if egress == me {
                        self.port.tx(port, frame, 0);
                        c.emitted += 1;
                    } else {
                        let e = Encap {
                            from: me,
                            to: egress,
                            kind: Kind::ToEgress,
                            hops: 1,
                            ingress: me,
                            port,
                        };
                        forward(
                            &mut self.link,
                            &mut self.deferred,
                            &mut self.out,
                            c,
                            e,
                            frame,
                        );
                    }
                }
            }
        }
        for i in 0..n {
            let o = self.owner[i];
            if !self.ok[i] || o == me as u16 {
                continue;
            }
            if o >= self.nodes as u16 {
                // A partition table maps unknown keys to arbitrary values, possibly no node.
                c.drop_unknown += 1;
                continue;
            }
            let e = Encap {
                from: me,
                to: o as u8,
                kind: fwd_kind,
                hops: 1,
                ingress: me,
                port: 0,
            };
            forward(
                &mut self.link,
                &mut self.deferred,
                &mut self.out,
                c,
                e,
                self.rx.get(i),
            );
        }
        n
    }

    /// Flood the group-addressed frames of the external burst: every local port but the ingress
    /// port, and one `Flood` frame to all other nodes.
    #[cold]
    #[inline(never)]
    fn flood_external(&mut self, n: usize) {
        let me = self.id;
        let ports = self.port.ports();
        let c = &mut self.counters;
        for i in 0..n {
            if !self.flood[i] {
                continue;
            }
            let frame = self.rx.get(i);
            let ingress = self.rx.port(i);
            c.flooded += 1;
            for p in (0..ports).filter(|&p| p != ingress) {
                self.port.tx(p, frame, 0);
                c.flood_emitted += 1;
            }
            if self.nodes > 1 {
                let e = Encap {
                    from: me,
                    to: ALL_NODES,
                    kind: Kind::Flood,
                    hops: 1,
                    ingress: me,
                    port: ingress,
                };
                forward(
                    &mut self.link,
                    &mut self.deferred,
                    &mut self.out,
                    c,
                    e,
                    frame,
                );
            }
        }
    }

    /// Handle one burst from the interconnect (only when the deferral buffer could take a whole
    /// burst of forwards, so forwarding does not have to drop).
    pub fn poll_interconnect(&mut self) -> usize {
        self.rx.clear();
        if self.deferred.free() < self.burst {
            return 0;
        }
        let n = self.link.recv(&mut self.rx);
        if n == 0 {
            return 0;
        }
        let me = self.id;
        let c = &mut self.counters;
        c.ic_rx += n as u64;
        // Parse; collect the keys that need a FIB lookup.
        let mut m = 0;
        for i in 0..n {
            self.ok[i] = false;
            let Ok(ic) = Interconnect::new_checked(self.rx.get(i)) else {
                c.drop_malformed += 1;
                continue;
            };
            let to_me = match ic.kind() {
                Kind::Flood => ic.dst_node() == ALL_NODES && ic.src_node() != me,
                _ => ic.dst_node() == me,
            };
            if !to_me {
                c.drop_malformed += 1;
                continue;
            }
            self.ok[i] = true;
            if !matches!(ic.kind(), Kind::ToEgress | Kind::Flood) {
                // The shim check guarantees an inner Ethernet header.
                self.keys[i] = EthFrame::new_unchecked(ic.inner()).dst_key();
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
            c.fib_lookups += m as u64;
        }
        for i in 0..n {
            if !self.ok[i] {
                continue;
            }
            let ic = Interconnect::new_unchecked(self.rx.get(i));
            let (kind, hops) = (ic.kind(), ic.hops());
            match kind {
                Kind::Flood => {
                    c.flood_ic_rx += 1;
                    for p in 0..self.port.ports() {
                        self.port.tx(p, ic.inner(), hops);
                        c.flood_emitted += 1;
                    }
                }
                Kind::ToEgress => {
                    self.port.tx(ic.egress_port(), ic.inner(), hops);
                    c.emitted += 1;
                }
                Kind::ToOwner => match self.fibv[self.owner[i] as usize] {
                    Some(port) => {
                        self.port.tx(port, ic.inner(), hops);
                        c.emitted += 1;
                    }
                    None => {
                        let to = match (&self.tables.gpt, hops < MAX_HOPS) {
                            (Some(g), true) => g.get(self.keys[i]),
                            _ => me as u16,
                        };
                        if to == me as u16 {
                            // The entry moved away and back while the frame travelled: the FIB
                            // insert precedes the partition-table update, so look again.
                            c.fib_lookups += 1;
                            match self.tables.fib.get(self.keys[i]) {
                                Some(port) => {
                                    self.port.tx(port, ic.inner(), hops);
                                    c.emitted += 1;
                                }
                                None => c.drop_unknown += 1,
                            }
                        } else if to >= self.nodes as u16 {
                            c.drop_unknown += 1;
                        } else {
                            let f = self.rx.get_mut(i);
                            Interconnect::new_unchecked(&mut *f).readdress(
                                me,
                                to as u8,
                                Kind::ToOwner,
                                hops + 1,
                                0,
                            );
                            c.redirected += 1;
                            self.deferred
                                .send(&mut self.link, c, to as u8, self.rx.get(i));
                        }
                    }
                },
                Kind::ToLookup => match self.fibv[self.owner[i] as usize] {
                    None => c.drop_unknown += 1,
                    Some(v) => {
                        let (egress, port) = ((v >> 8) as u8, v & 0xFF);
                        if egress == me {
                            self.port.tx(port, ic.inner(), hops);
                            c.emitted += 1;
                        } else {
                            let f = self.rx.get_mut(i);
                            Interconnect::new_unchecked(&mut *f).readdress(
                                me,
                                egress,
                                Kind::ToEgress,
                                hops + 1,
                                port,
                            );
                            self.deferred
                                .send(&mut self.link, c, egress, self.rx.get(i));
                        }
                    }
                },
            }
        }
        n
    }

    /// Frames waiting on this node's interconnect port.
    pub fn pending(&self) -> usize {
        self.link.pending()
    }

    /// The tables this node reads.
    pub fn tables(&self) -> &Tables {
        &self.tables
    }
}
