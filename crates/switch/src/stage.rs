//! The CuckooSwitch Ethernet switch (CoNEXT 2013, §3.1, Fig 3): forwarding by destination MAC in a
//! shared concurrent cuckoo FIB, with MAC learning, aging, flooding and static entries.
//!
//! Every worker reads its receive queue of every port and, for each burst, looks up the destination
//! and source MACs of all its packets at once in the FIB (dynamic batching, two-round prefetching:
//! CuckooSwitch §3.3-3.4, §4.3), then hands each packet to the transmit burst of its output port.
//! While bursts come full (more frames waiting), it gathers several (up to
//! [`SwitchWorker::set_gather`]) for one lookup call, whose reads stay in flight from one chunk
//! of keys into the next.
//! Unknown unicast, broadcast and multicast destinations are flooded to every other port; a frame
//! never leaves through the port it came in on.
//!
//! The FIB has one writer, [`crate::controller::SwitchControl`], usually on the control thread. Workers only read it;
//! what they learn (a source MAC seen on a port it is not recorded on, or a known MAC that needs its
//! age refreshed) travels to the writer as a [`Learn`] event over a bounded queue. When the queue is
//! full the event is dropped and counted — never the packet. To keep the event rate bounded, a
//! worker refreshes a MAC it has recently reported at most once per quarter of the aging time (a
//! small direct-mapped cache per worker). Static entries from the configuration are never changed
//! by learning and never age.

use crate::controller::FibEpoch;
use crate::guard::{Kind, PortLocks, StormBuckets};
use crate::sflow::{Sample, Sampler, Went};
use crate::vlan::{self, PortPlan, VlanDrop};
use fp_cuckoo::{FibReader, Prefetch};
use fp_flowcache::KeyedCache;
use fp_pipeline::packet::{Packet, Pool, MAX_BURST};
use fp_pipeline::published::{Cached, Published};
use fp_pipeline::stage::{Outputs, Stage};
use fp_pipeline::stats::Counter;
use fp_pipeline::trace::{probe_id, ProbeSender};
use fp_wire::ethernet::MacAddr;
use std::sync::mpsc::{SyncSender, TrySendError};
use std::sync::Arc;

/// The FIB key of a MAC address in a VLAN: its 48 bits as an integer (`MacAddr::to_u64`), read
/// straight from the frame with one 8-byte load, and the VLAN's FID above them
/// ([`crate::vlan::key`]; 0 in a VLAN-unaware switch).
type Key = u64;

/// Group (multicast or broadcast) bit of a MAC key.
#[inline(always)]
fn is_group(m: Key) -> bool {
    m >> 40 & 1 == 1
}

/// Whether a (group) MAC key is one of the 802.1D reserved link-local addresses
/// 01:80:C2:00:00:00-0F (spanning tree, pause, LACP, LLDP, 802.1X): a bridge never forwards them.
#[inline(always)]
fn is_link_local(m: Key) -> bool {
    m & 0xffff_ffff_fff0 == 0x0180_c200_0000
}

/// The MAC at `at` (0: destination, 6: source) of a frame, from one 8-byte load (its top 48
/// bits); a runt (shorter than an Ethernet header) gets MAC 0 and is dropped when switched.
#[inline(always)]
fn mac_at(d: &[u8], at: usize) -> u64 {
    match d.get(..14) {
        Some(h) => u64::from_be_bytes(h[at..at + 8].try_into().expect("8 bytes")) >> 16,
        None => 0,
    }
}

/// A held frame's VLAN word: the VLAN id, [`TAGGED`] if the frame carries a tag, or [`DROPPED`]
/// with the reason it has no VLAN on its port.
const TAGGED: u16 = 0x8000;
const DROPPED: u16 = 0x4000;

fn drop_word(why: VlanDrop) -> u16 {
    DROPPED
        | match why {
            VlanDrop::Untagged => 0,
            VlanDrop::NotMember => 1,
            VlanDrop::Truncated => 2,
        }
}

/// A spanning-tree BPDU a worker received, for the control side (a fixed buffer: nothing is
/// allocated in the data path).
#[derive(Clone, Copy, Debug)]
pub struct BpduFrame {
    /// The port it came in on.
    pub port: u16,
    /// Bytes used of `bytes`.
    pub len: u8,
    /// The frame (BPDUs are 60 bytes on the wire; longer frames are cut, and refused by the
    /// parser only if the BPDU itself is cut).
    pub bytes: [u8; 64],
}

/// The spanning tree group address as a FIB key.
const BPDU_KEY: Key = 0x0180_c200_0000;

/// A learning event from a worker to the FIB writer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Learn {
    /// Source MAC seen.
    pub mac: MacAddr,
    /// Its VLAN (0 in a VLAN-unaware switch).
    pub vlan: u16,
    /// Port it was seen on.
    pub port: u16,
    /// When (ns).
    pub now_ns: u64,
}

/// How a worker looks up MACs (the factor analysis of CuckooSwitch Fig 5 and Fig 8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LookupMode {
    /// One lookup at a time.
    Single,
    /// The whole burst at once, without prefetching.
    Batched,
    /// The whole burst at once with two-round prefetching (the default).
    Prefetched,
}

macro_rules! counters {
    ($( $(#[$m:meta])* $name:ident => $label:literal, )*) => {
        /// A switch worker's counters.
        #[repr(align(64))]
        #[derive(Debug, Default)]
        pub struct SwitchStats { $( $(#[$m])* pub $name: Counter, )* }
        impl SwitchStats {
            /// (metrics label, value) of every counter.
            pub fn values(&self) -> Vec<(&'static str, u64)> {
                vec![$( ($label, self.$name.get()), )*]
            }
        }
    };
}

counters! {
    /// Frames received.
    rx => "rx",
    /// Frames sent (a flooded frame counts once per copy).
    tx => "tx",
    /// Frames forwarded to a known unicast destination.
    forwarded => "forwarded",
    /// Frames flooded (unknown unicast, broadcast, multicast).
    flooded => "flooded",
    /// Unknown unicast destinations among the flooded frames.
    unknown_unicast => "unknown_unicast",
    /// Frames dropped because their destination is on the port they came in on.
    filtered => "drop_same_port",
    /// Frames dropped: shorter than an Ethernet header.
    runt => "drop_runt",
    /// Frames dropped: the source MAC is a group address.
    bad_source => "drop_group_source",
    /// Frames dropped: addressed to an 802.1D reserved link-local group (01:80:C2:00:00:0X),
    /// which a bridge never forwards.
    link_local => "drop_link_local",
    /// Frames dropped: untagged on a port without an untagged VLAN.
    vlan_untagged => "drop_vlan_untagged",
    /// Frames dropped: tagged with a VLAN the port is not a member of.
    vlan_not_member => "drop_vlan_not_member",
    /// Frames dropped: too short for their VLAN tag.
    vlan_truncated => "drop_vlan_truncated",
    /// Frames dropped: their FIB entry names a port outside their VLAN (changed by a reload).
    vlan_egress => "drop_vlan_egress",
    /// Broadcast frames dropped by their port's storm control.
    storm_broadcast => "drop_storm_broadcast",
    /// Multicast frames dropped by their port's storm control.
    storm_multicast => "drop_storm_multicast",
    /// Unknown-unicast frames dropped by their port's storm control.
    storm_unknown_unicast => "drop_storm_unknown_unicast",
    /// Frames dropped: a source MAC new to a port that has its limit of learned MACs.
    port_security => "drop_port_security",
    /// Frames dropped: received on, or bound for, a port the spanning tree does not let forward.
    stp_blocked => "drop_stp_blocked",
    /// BPDUs handed to the spanning tree on the control side.
    bpdu_rx => "bpdu",
    /// BPDUs dropped because the queue to the control side was full.
    bpdu_dropped => "drop_bpdu_queue_full",
    /// Control frames (BPDUs) sent for the control side.
    control_tx => "control_tx",
    /// Control frames the control side queued that could not be sent (no buffer, no room).
    control_dropped => "drop_control_tx",
    /// Flood copies dropped: no packet buffer for the copy.
    no_buffer => "drop_no_buffer",
    /// Learn events sent to the FIB writer.
    learn_sent => "learn_sent",
    /// Learn events dropped because the queue was full (the frames were forwarded).
    learn_dropped => "learn_dropped",
    /// Destination lookups answered by the worker's FIB cache.
    cache_hit => "cache_hit",
    /// Destination lookups the FIB cache could not answer (looked up in the FIB).
    cache_miss => "cache_miss",
}

/// A worker's BLP cache in front of the FIB (CuckooSwitch's table, cached as *Fast Software Cache
/// Design*, §4.4-§5, proposes): MAC → (port, the FIB's change count when cached). An answer cached
/// under an older count is a miss ([`crate::controller::FibEpoch`]).
struct FibCache {
    cache: KeyedCache<Key, (u16, u64)>,
    epoch: FibEpoch,
    seed: u64,
    on: bool,
    hashes: Vec<u64>,
    hits: Vec<Option<(u16, u64)>>,
    miss: Vec<Key>,
    miss_at: Vec<u16>,
    miss_out: Vec<Option<u16>>,
}

impl FibCache {
    /// Room for `n` lookups per call, so the data path grows nothing.
    fn reserve(&mut self, n: usize) {
        self.hashes.reserve(n);
        self.hits.reserve(n);
        self.miss.reserve(n);
        self.miss_at.reserve(n);
        self.miss_out.reserve(n);
    }
}

/// Per-worker cache of recently reported source MACs: (mac, port, time reported).
const REFRESH_SLOTS: usize = 4096;

/// A new or moved source is reported again from the same port at most this often (ns).
const MOVE_REPORT_NS: u64 = 1_000_000_000;

/// Most frames a worker gathers for one lookup ([`SwitchWorker::set_gather`]).
pub const MAX_GATHER: usize = 1024;

/// The VLAN cases of a [`SwitchWorker::flush`] call, each with its own frame loop: a
/// VLAN-unaware switch, held frames all untagged in one VLAN, a VLAN word per held frame.
const UNAWARE: u8 = 0;
const ONE_VLAN: u8 = 1;
const PER_FRAME: u8 = 2;

/// What [`SwitchWorker::switch`] returns for a flooded frame: the ports it reached are counted
/// ([`SwitchWorker::flood_width`]) only if sFlow sampled it.
const FLOODED: Went = Went::Flooded(u16::MAX);

/// What [`SwitchWorker::flush`] knows of the frames it switches: their keys, the lookups'
/// answers, the call's plans, and what it counts and samples on the way.
struct Held<'a> {
    dst: &'a [u64],
    src: &'a [u64],
    held_in: &'a [u16],
    out: &'a [Option<u16>],
    seen: &'a [Option<u16>],
    /// VLAN words per frame ([`PER_FRAME`]), or the one word of every frame ([`ONE_VLAN`]).
    vl: &'a [u16],
    run: u16,
    /// With one VLAN ([`ONE_VLAN`], a switch of at most 64 ports): the ports that send it
    /// untagged.
    plain: u64,
    ports: u16,
    /// The port plan when the switch is VLAN-aware.
    plan: Option<&'a PortPlan>,
    /// The port plan (storm control, the spanning tree) whether or not VLAN-aware.
    ports_plan: Option<&'a PortPlan>,
    /// The port plan when the spanning tree runs.
    stp: Option<&'a PortPlan>,
    /// Indices of the frames picked for sFlow samples, ascending, and how many are passed.
    picks: &'a [u32],
    picked_at: usize,
    forwarded: u64,
    filtered: u64,
    now_ns: u64,
}

/// One switch worker.
pub struct SwitchWorker {
    fib: FibReader,
    ports: u16,
    learn: SyncSender<Learn>,
    refresh: Box<[(Key, u16, u64)]>,
    refresh_ns: u64,
    mode: LookupMode,
    learning: bool,
    stats: Arc<SwitchStats>,
    dst: Vec<u64>,
    src: Vec<u64>,
    out: Vec<Option<u16>>,
    seen: Vec<Option<u16>>,
    cache: Option<Box<FibCache>>,
    /// Frames received and not switched yet, with their ingress ports (`dst`, `src` hold their
    /// MACs): one burst, or several gathered while more were waiting.
    held: Vec<Packet>,
    held_in: Vec<u16>,
    /// Most frames held before they are switched (1: each burst as it comes).
    gather: usize,
    /// Frames flooded per ingress port.
    flooded: Arc<[Counter]>,
    /// The VLAN settings (none: VLAN-unaware), picked up between bursts when a reload changes
    /// them.
    vlans: Option<Cached<PortPlan>>,
    /// VLAN word of every held frame (VLAN-aware only): id, [`TAGGED`], or [`DROPPED`]; empty
    /// while `vl_run` stands for all of them.
    vl: Vec<u16>,
    /// The one (untagged) VLAN word of every held frame when they all came untagged into ports
    /// of one VLAN (an access port's traffic): switched without a word per frame.
    vl_run: Option<u16>,
    /// Frames received and flooded per VLAN id (VLAN-aware only).
    per_vlan: Arc<VlanCounters>,
    /// Storm control's token buckets.
    storm: StormBuckets,
    /// Ports that take no new source MAC (port security), if set.
    locks: Option<PortLocks>,
    /// Where BPDUs go when the spanning tree runs.
    bpdus: Option<SyncSender<BpduFrame>>,
    /// sFlow's packet sampler, if the switch exports.
    sampler: Option<Sampler>,
}

/// Frames received and flooded per VLAN id, written by one worker.
#[derive(Debug)]
pub struct VlanCounters {
    /// Frames received, by VLAN id.
    pub rx: Box<[Counter]>,
    /// Frames flooded, by VLAN id.
    pub flooded: Box<[Counter]>,
}

impl Default for VlanCounters {
    fn default() -> VlanCounters {
        let row = || (0..4096).map(|_| Counter::default()).collect();
        VlanCounters {
            rx: row(),
            flooded: row(),
        }
    }
}

impl SwitchWorker {
    /// A worker for a switch of `ports` ports reading `fib`, reporting to `learn`. Learned entries
    /// age after `aging_ns`.
    pub fn new(
        fib: impl Into<FibReader>,
        ports: u16,
        learn: SyncSender<Learn>,
        aging_ns: u64,
    ) -> SwitchWorker {
        SwitchWorker {
            fib: fib.into(),
            ports,
            learn,
            refresh: vec![(u64::MAX, 0, 0); REFRESH_SLOTS].into_boxed_slice(),
            refresh_ns: (aging_ns / 4).max(1),
            mode: LookupMode::Prefetched,
            learning: true,
            stats: Arc::new(SwitchStats::default()),
            dst: Vec::with_capacity(64),
            src: Vec::with_capacity(64),
            out: Vec::with_capacity(64),
            seen: Vec::with_capacity(64),
            cache: None,
            held: Vec::with_capacity(MAX_BURST),
            held_in: Vec::with_capacity(MAX_BURST),
            gather: 1,
            flooded: (0..ports).map(|_| Counter::default()).collect(),
            vlans: None,
            vl: Vec::with_capacity(64),
            vl_run: None,
            per_vlan: Arc::new(VlanCounters::default()),
            storm: StormBuckets::new(ports as usize, 1),
            locks: None,
            bpdus: None,
            sampler: None,
        }
    }

    /// Sample received frames for sFlow with `s` (at the rate it follows).
    pub fn set_sampler(&mut self, s: Sampler) {
        self.sampler = Some(s);
    }

    /// Hand received BPDUs to `queue` (the spanning tree on the control side) when the port
    /// plan says the spanning tree runs; a full queue drops them, counted.
    pub fn set_bpdu_queue(&mut self, queue: SyncSender<BpduFrame>) {
        self.bpdus = Some(queue);
    }

    #[cold]
    #[inline(never)]
    fn to_control(&self, port: u16, frame: &[u8]) {
        let mut b = BpduFrame {
            port,
            len: frame.len().min(64) as u8,
            bytes: [0; 64],
        };
        b.bytes[..b.len as usize].copy_from_slice(&frame[..b.len as usize]);
        match self.bpdus.as_ref().map(|q| q.try_send(b)) {
            Some(Ok(())) => self.stats.bpdu_rx.inc(),
            _ => self.stats.bpdu_dropped.inc(),
        }
    }

    /// Share the ports' storm-control rates with `workers` workers in all (each admits its
    /// share).
    pub fn set_workers(&mut self, workers: usize) {
        self.storm = StormBuckets::new(self.ports as usize, workers);
    }

    /// Drop frames from source MACs new to a port that `locks` says is full (port security;
    /// the FIB writer's [`crate::controller::SwitchControl::port_locks`]).
    pub fn set_locks(&mut self, locks: PortLocks) {
        self.locks = Some(locks);
    }

    /// Follow `plan` for VLANs ([`crate::vlan`]): the worker picks up a new plan between the
    /// frames it holds, so no frame is classified by one plan and sent by another.
    pub fn set_plan(&mut self, plan: Arc<Published<PortPlan>>) {
        self.vlans = Some(Cached::new(plan));
    }

    /// The VLAN settings in force, if VLAN-aware.
    pub fn vlans(&self) -> Option<&PortPlan> {
        self.vlans
            .as_ref()
            .map(|c| &**c.get())
            .filter(|p| p.aware())
    }

    /// Frames received and flooded per VLAN.
    pub fn vlan_counters(&self) -> &Arc<VlanCounters> {
        &self.per_vlan
    }

    /// Gather up to `frames` frames (at most [`MAX_GATHER`]) before looking them up and switching
    /// them: [`SwitchWorker::process`] holds a burst while the next one would still fit, and
    /// [`SwitchWorker::flush`] switches what is held. One lookup call over several bursts keeps
    /// the FIB's reads in flight from one chunk of keys into the next (CuckooSwitch's dynamic
    /// batching, §4.3) instead of draining them at every burst. 1 (the default) switches each
    /// burst as it comes. The caller decides when holding is worth it: the engine stage holds
    /// only bursts that filled the receive burst (more frames waiting) and flushes at the end of
    /// every polling pass that found none, so light traffic waits for nothing.
    pub fn set_gather(&mut self, frames: usize) {
        self.gather = frames.clamp(1, MAX_GATHER);
        let room = self.room();
        for v in [&mut self.dst, &mut self.src] {
            v.reserve(room);
        }
        for v in [&mut self.out, &mut self.seen] {
            v.reserve(room);
        }
        self.held.reserve(room);
        self.held_in.reserve(room);
        self.vl.reserve(room);
        if let Some(c) = &mut self.cache {
            c.reserve(room);
        }
    }

    /// The most frames one lookup call handles: the gather, plus the burst that ends it.
    fn room(&self) -> usize {
        self.gather.max(MAX_BURST) + MAX_BURST
    }

    /// Frames held, waiting to be switched.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// Frames flooded per ingress port.
    pub fn flooded(&self) -> &Arc<[Counter]> {
        &self.flooded
    }

    /// Put a flow cache of `entries` entries (at most 65 536) in front of the FIB for destination
    /// lookups, invalidated by `epoch` (the FIB writer's [`SwitchControl::epoch`]).
    ///
    /// [`SwitchControl::epoch`]: crate::controller::SwitchControl::epoch
    pub fn set_cache(
        &mut self,
        entries: usize,
        epoch: FibEpoch,
        seed: u64,
    ) -> Result<(), fp_flowcache::Error> {
        let mut c = Box::new(FibCache {
            cache: KeyedCache::new(entries, seed)?,
            epoch,
            seed,
            on: true,
            hashes: Vec::new(),
            hits: Vec::new(),
            miss: Vec::new(),
            miss_at: Vec::new(),
            miss_out: Vec::new(),
        });
        c.reserve(self.room());
        self.cache = Some(c);
        Ok(())
    }

    /// The switch's port count.
    pub fn ports(&self) -> u16 {
        self.ports
    }

    /// Switch the cache off or back on (for measurements; a cache switched on starts empty).
    pub fn set_cache_on(&mut self, on: bool) {
        if let Some(c) = &mut self.cache {
            if on && !c.on {
                c.cache.clear();
            }
            c.on = on;
        }
    }

    /// Entries and bytes of the cache, if there is one.
    pub fn cache_size(&self) -> Option<(usize, usize)> {
        self.cache
            .as_ref()
            .map(|c| (c.cache.capacity(), c.cache.bytes()))
    }

    /// Destination lookups through the cache: hits under the current change count answered from
    /// it, the rest looked up in the FIB as a batch and cached.
    fn lookup_cached(&mut self, keys: &[u64], out: &mut [Option<u16>]) {
        let Some(c) = self.cache.as_deref_mut().filter(|c| c.on) else {
            self.lookup(keys, out);
            return;
        };
        let n = keys.len();
        let now = c.epoch.get();
        c.hashes.clear();
        c.hashes
            .extend(keys.iter().map(|&k| fp_hash::hash_u64(c.seed, k)));
        c.hits.clear();
        c.hits.resize(n, None);
        c.cache.get_batch(&c.hashes, keys, &mut c.hits);
        c.miss.clear();
        c.miss_at.clear();
        for (i, h) in c.hits.iter().enumerate() {
            match h {
                Some((port, e)) if *e == now => out[i] = Some(*port),
                _ => {
                    c.miss.push(keys[i]);
                    c.miss_at.push(i as u16);
                }
            }
        }
        let m = c.miss.len();
        self.stats.cache_hit.add((n - m) as u64);
        self.stats.cache_miss.add(m as u64);
        if m == 0 {
            return;
        }
        c.miss_out.clear();
        c.miss_out.resize(m, None);
        self.fib
            .get_batch_with(&c.miss, &mut c.miss_out, Prefetch::TwoRound);
        for (j, &i) in c.miss_at.iter().enumerate() {
            let i = i as usize;
            out[i] = c.miss_out[j];
            if let Some(port) = c.miss_out[j] {
                if c.hits[i].is_some() {
                    c.cache.put(c.hashes[i], keys[i], (port, now));
                } else {
                    c.cache.put_absent(c.hashes[i], keys[i], (port, now));
                }
            }
        }
    }

    /// Choose the lookup strategy (for comparisons).
    pub fn set_mode(&mut self, mode: LookupMode) {
        self.mode = mode;
    }

    /// Turn source-MAC learning on (default) or off. Off, the worker looks up destinations only,
    /// as in CuckooSwitch's evaluation (a FIB preloaded and managed from outside).
    pub fn set_learning(&mut self, on: bool) {
        self.learning = on;
    }

    /// The worker's counters.
    pub fn stats(&self) -> &Arc<SwitchStats> {
        &self.stats
    }

    fn lookup(&self, keys: &[u64], out: &mut [Option<u16>]) {
        match self.mode {
            LookupMode::Single => {
                for (k, o) in keys.iter().zip(out.iter_mut()) {
                    *o = self.fib.get(*k);
                }
            }
            LookupMode::Batched => self.fib.get_batch_with(keys, out, Prefetch::Off),
            LookupMode::Prefetched => self.fib.get_batch_with(keys, out, Prefetch::TwoRound),
        }
    }

    /// Switch a burst received on `in_port`: every packet ends up in `tx[p]` for its output port(s)
    /// or back in `pool` (dropped, counted). `tx` has one burst per port. With
    /// [`SwitchWorker::set_gather`] above one burst, the burst may be held instead (and switched
    /// with later ones by a later call or [`SwitchWorker::flush`]).
    pub fn process(
        &mut self,
        in_port: u16,
        rx: &mut Vec<Packet>,
        tx: &mut [Vec<Packet>],
        pool: &mut Pool,
        now_ns: u64,
    ) {
        self.take(in_port, rx);
        if self.held.len() + MAX_BURST > self.gather {
            self.flush(tx, pool, now_ns);
        }
    }

    /// Hold the frames of `rx` with their MACs (and VLANs).
    fn take(&mut self, in_port: u16, rx: &mut Vec<Packet>) {
        if self.held.is_empty() {
            if let Some(c) = &mut self.vlans {
                if c.refresh() {
                    if let Some(r) = c.get().refresh_ns() {
                        self.refresh_ns = r;
                    }
                }
            }
        }
        if let Some(s) = &mut self.sampler {
            s.burst(in_port, self.held.len(), rx.len());
        }
        // Out of `self` while in use (no reference count touched per burst).
        let vlans = self.vlans.take();
        if let Some(plan) = vlans.as_ref().map(|c| &**c.get()).filter(|p| p.aware()) {
            self.take_vlan(in_port, rx, plan);
        } else {
            self.take_macs(in_port, rx);
        }
        self.vlans = vlans;
    }

    /// Hold the frames of `rx` with their VLANs and (FID, MAC) keys: the VLAN's FID goes above
    /// the MACs. Untagged frames (the common case on access ports) take the port's VLAN without
    /// the full classification; frames are counted per VLAN in runs (a burst is usually one
    /// VLAN).
    #[inline(always)]
    fn take_vlan(&mut self, in_port: u16, rx: &mut Vec<Packet>, plan: &PortPlan) {
        self.stats.rx.add(rx.len() as u64);
        let pvid = plan.untagged_vid(in_port);
        let pfid = (plan.fid(pvid) as u64) << 48;
        if pvid != 0 && self.take_untagged(in_port, rx, pvid, pfid) {
            return;
        }
        if self.held.is_empty() {
            self.vl_run = None;
            self.vl.clear();
        } else {
            self.spill_run();
        }
        let (mut run_vid, mut run) = (0u16, 0u64);
        for p in rx.iter() {
            let d = p.data();
            let Some(h) = d.get(..14) else {
                // A runt: dropped when switched.
                self.dst.push(0);
                self.src.push(0);
                self.held_in.push(in_port);
                self.vl.push(0);
                continue;
            };
            let (w, fid) = if h[12..14] != vlan::TPID.to_be_bytes() && pvid != 0 {
                (pvid, pfid)
            } else {
                match plan.classify(in_port, d) {
                    Ok(i) => (
                        i.vid | if i.tagged { TAGGED } else { 0 },
                        (i.fid as u64) << 48,
                    ),
                    Err(why) => (drop_word(why), 0),
                }
            };
            if w & DROPPED == 0 {
                let vid = w & 0xfff;
                if vid != run_vid {
                    if run != 0 {
                        self.per_vlan.rx[run_vid as usize].add(run);
                    }
                    (run_vid, run) = (vid, 0);
                }
                run += 1;
            }
            self.dst
                .push(u64::from_be_bytes(h[0..8].try_into().expect("8 bytes")) >> 16 | fid);
            self.src
                .push(u64::from_be_bytes(h[6..14].try_into().expect("8 bytes")) >> 16 | fid);
            self.held_in.push(in_port);
            self.vl.push(w);
        }
        if run != 0 {
            self.per_vlan.rx[run_vid as usize].add(run);
        }
        self.hold(rx);
    }

    /// [`SwitchWorker::take_vlan`] for a burst of untagged frames on a port with an untagged
    /// VLAN (an access port's traffic): the keys as a VLAN-unaware switch takes them with the
    /// VLAN's FID above, the VLAN word and the per-VLAN count once for the burst (and, while every
    /// held frame is in that VLAN, no word per frame: `vl_run`). `false`, with nothing taken,
    /// when a frame is tagged or a runt (the general path takes that burst).
    #[inline(always)]
    fn take_untagged(&mut self, in_port: u16, rx: &mut Vec<Packet>, pvid: u16, pfid: u64) -> bool {
        let start = self.src.len();
        // One pass for both MACs and the test (the 8 bytes read for the source end with the
        // EtherType): a tagged frame or a runt undoes it.
        let mut other = false;
        for p in rx.iter() {
            let Some(h) = p.data().get(..14) else {
                other = true;
                break;
            };
            let d = u64::from_be_bytes(h[0..8].try_into().expect("8 bytes"));
            let w = u64::from_be_bytes(h[6..14].try_into().expect("8 bytes"));
            other |= w as u16 == vlan::TPID;
            self.dst.push(d >> 16 | pfid);
            self.src.push(w >> 16 | pfid);
        }
        if other {
            self.dst.truncate(start);
            self.src.truncate(start);
            return false;
        }
        let n = rx.len();
        self.held_in.resize(self.held_in.len() + n, in_port);
        match self.vl_run {
            // The one-VLAN loop tests untagged egress in a 64-bit port mask.
            _ if self.held.is_empty() && self.ports <= 64 => self.vl_run = Some(pvid),
            Some(w) if w == pvid => {}
            _ => {
                self.spill_run();
                self.vl.resize(self.vl.len() + n, pvid);
            }
        }
        self.per_vlan.rx[pvid as usize].add(n as u64);
        self.hold(rx);
        true
    }

    /// Give every held frame its own VLAN word again (a burst not of the held frames' one VLAN
    /// joins them).
    #[inline]
    fn spill_run(&mut self) {
        if let Some(w) = self.vl_run.take() {
            self.vl.clear();
            self.vl.resize(self.held.len(), w);
        }
    }

    /// Move the frames of `rx` behind those held.
    #[inline(always)]
    fn hold(&mut self, rx: &mut Vec<Packet>) {
        if self.held.is_empty() && self.gather <= MAX_BURST {
            // Each burst alone: the buffers trade places, nothing is copied.
            std::mem::swap(&mut self.held, rx);
        } else {
            // Into the room `set_gather` reserved: nothing is allocated.
            self.held.append(rx);
        }
    }

    /// Hold the frames of `rx` with their MACs.
    #[inline(always)]
    fn take_macs(&mut self, in_port: u16, rx: &mut Vec<Packet>) {
        self.stats.rx.add(rx.len() as u64);
        // Extended from the burst rather than pushed frame by frame: one capacity check each.
        self.dst.extend(rx.iter().map(|p| mac_at(p.data(), 0)));
        self.src.extend(rx.iter().map(|p| mac_at(p.data(), 6)));
        self.held_in.resize(self.held_in.len() + rx.len(), in_port);
        self.hold(rx);
    }

    /// Look up and switch every held frame.
    pub fn flush(&mut self, tx: &mut [Vec<Packet>], pool: &mut Pool, now_ns: u64) {
        let n = self.held.len();
        if n == 0 {
            return;
        }
        // Destination (and, learning, source) MACs of every held frame, looked up together.
        self.out.clear();
        self.out.resize(n, None);
        let (dst, src) = (std::mem::take(&mut self.dst), std::mem::take(&mut self.src));
        let mut out = std::mem::take(&mut self.out);
        let mut seen = std::mem::take(&mut self.seen);
        let (mut held, mut held_in) = (
            std::mem::take(&mut self.held),
            std::mem::take(&mut self.held_in),
        );
        self.lookup_cached(&dst, &mut out);
        if self.learning {
            seen.clear();
            seen.resize(n, None);
            self.lookup(&src, &mut seen);
        }
        let vlans = self.vlans.take();
        let ports_plan = vlans.as_ref().map(|c| &**c.get());
        let plan = ports_plan.filter(|p| p.aware());
        let vl = std::mem::take(&mut self.vl);
        let run = self.vl_run.take();
        // sFlow: the frames picked for samples.
        let picks = self.sampler.as_mut().map(Sampler::take_picked);
        // The held frames' keys, ports and destinations, sliced to the held count: with indices
        // from a range of it, no bounds test per frame on these.
        let mut f = Held {
            dst: &dst[..n],
            src: &src[..n],
            held_in: &held_in[..n],
            out: &out[..n],
            seen: &seen,
            vl: &vl,
            run: run.unwrap_or(0),
            plain: match (plan, run) {
                (Some(plan), Some(w)) => (0..self.ports.min(64))
                    .filter(|&port| plan.untagged_vid(port) == w & 0xfff)
                    .fold(0, |m, port| m | 1 << port),
                _ => 0,
            },
            ports: self.ports,
            plan,
            ports_plan,
            stp: ports_plan.filter(|pp| pp.stp_on()),
            picks: picks.as_deref().unwrap_or(&[]),
            picked_at: 0,
            forwarded: 0,
            filtered: 0,
            now_ns,
        };
        // The frame loop made once for each VLAN case, so that what holds for every frame of
        // the call is no test per frame: a VLAN-unaware switch, held frames all of one VLAN
        // (untagged on access ports: `vl_run`), or a VLAN word per frame.
        let frames = (0..n).zip(held.drain(..));
        match (plan, run) {
            (None, _) => {
                frames.for_each(|(i, p)| self.switch_sampled::<UNAWARE>(&mut f, i, p, tx, pool))
            }
            (Some(_), Some(_)) => {
                frames.for_each(|(i, p)| self.switch_sampled::<ONE_VLAN>(&mut f, i, p, tx, pool))
            }
            (Some(_), None) => {
                frames.for_each(|(i, p)| self.switch_sampled::<PER_FRAME>(&mut f, i, p, tx, pool))
            }
        }
        // Counted locally and published once per call: the counters are shared with the metrics
        // reader, so per-frame updates would be a load and a store to memory each.
        let (forwarded, filtered) = (f.forwarded, f.filtered);
        if let (Some(s), Some(v)) = (&mut self.sampler, picks) {
            s.put_picked(v);
            s.publish();
        }
        let mut vl = vl;
        vl.clear();
        self.vl = vl;
        self.vlans = vlans;
        if forwarded != 0 {
            self.stats.forwarded.add(forwarded);
            self.stats.tx.add(forwarded);
        }
        if filtered != 0 {
            self.stats.filtered.add(filtered);
        }
        let (mut dst, mut src) = (dst, src);
        dst.clear();
        src.clear();
        held_in.clear();
        (self.dst, self.src, self.out, self.seen) = (dst, src, out, seen);
        (self.held, self.held_in) = (held, held_in);
    }

    /// [`SwitchWorker::switch`] held frame `i` (`p`), and, if sFlow picked it, hand over its
    /// sample with where it went.
    #[inline(always)]
    fn switch_sampled<const M: u8>(
        &mut self,
        f: &mut Held<'_>,
        i: usize,
        p: Packet,
        tx: &mut [Vec<Packet>],
        pool: &mut Pool,
    ) {
        if f.picks.get(f.picked_at) != Some(&(i as u32)) {
            // What the frame's fate says is unused (and not computed) when it is not sampled.
            self.switch::<M>(f, i, p, tx, pool);
            return;
        }
        f.picked_at += 1;
        let in_port = f.held_in[i];
        let sample = self.sampler.as_mut().and_then(|s| {
            if s.room() {
                Some(Sample::of(in_port, p.data()))
            } else {
                s.missed(in_port);
                None
            }
        });
        let (went, vid) = self.switch::<M>(f, i, p, tx, pool);
        if let Some(mut smp) = sample {
            smp.went = match went {
                // How many ports a flood reached, worked out for sampled frames only.
                FLOODED => self.flood_width(f.ports_plan, in_port, vid.unwrap_or(0)),
                went => went,
            };
            // The switch does not translate VLANs: a frame leaves in the VLAN it came in.
            smp.vlans = vid.map(|v| (v, v));
            self.queue_sample(smp);
        }
    }

    /// Switch held frame `i` (`p`): into `tx` for its output port(s), or dropped (counted) into
    /// `pool`. `M` is the call's VLAN case ([`UNAWARE`], [`ONE_VLAN`], [`PER_FRAME`]). Returns
    /// where the frame went ([`FLOODED`] for a flood) and, in a VLAN-aware switch, its VLAN once
    /// it has one.
    #[inline(always)]
    fn switch<const M: u8>(
        &mut self,
        f: &mut Held<'_>,
        i: usize,
        mut p: Packet,
        tx: &mut [Vec<Packet>],
        pool: &mut Pool,
    ) -> (Went, Option<u16>) {
        let (d, s, in_port) = (f.dst[i], f.src[i], f.held_in[i]);
        // Frames of one VLAN ([`ONE_VLAN`]) all passed `take_untagged`, which takes no runt.
        if M != ONE_VLAN && p.len() < 14 {
            self.stats.runt.inc();
            pool.put(p);
            return (Went::Dropped, None);
        }
        let (plan, stp) = (f.plan.filter(|_| M != UNAWARE), f.stp);
        // Spanning tree: BPDUs go to the control side, whatever the port's state or VLANs.
        if stp.is_some() && d & fp_cuckoo::COMPACT_MAX_KEY == BPDU_KEY {
            self.to_control(in_port, p.data());
            pool.put(p);
            return (Went::Internal, None);
        }
        // VLAN id and tag (VLAN-aware), or why the frame has no VLAN on its port.
        let (vid, tagged) = match M {
            UNAWARE => (0, false),
            // The held frames' one word: untagged, never a drop.
            ONE_VLAN => (f.run & 0xfff, false),
            _ => {
                let w = f.vl[i];
                if w & DROPPED != 0 {
                    match w & 3 {
                        0 => self.stats.vlan_untagged.inc(),
                        1 => self.stats.vlan_not_member.inc(),
                        _ => self.stats.vlan_truncated.inc(),
                    }
                    pool.put(p);
                    return (Went::Dropped, None);
                }
                (w & 0xfff, w & TAGGED != 0)
            }
        };
        let vlan = plan.map(|_| vid);
        let dropped = (Went::Dropped, vlan);
        if is_group(s) {
            self.stats.bad_source.inc();
            pool.put(p);
            return dropped;
        }
        // Spanning tree: a discarding port neither learns nor forwards; a learning one
        // learns only.
        let (learn, forward) = match stp {
            None => (self.learning, true),
            Some(pp) => (self.learning && pp.learns(in_port), pp.forwards(in_port)),
        };
        // Port security: a port with its limit of learned MACs takes no new source.
        if learn
            && f.seen[i] != Some(in_port)
            && self.locks.as_ref().is_some_and(|l| l.locked(in_port))
        {
            self.stats.port_security.inc();
            pool.put(p);
            return dropped;
        }
        // Learning: a new source, a moved one, or one whose age needs refreshing.
        if learn {
            let due = match f.seen[i] {
                Some(p) if p == in_port => self.refresh_due(s, in_port, f.now_ns),
                _ => !self.reported_recently(s, in_port, f.now_ns),
            };
            if due {
                self.report(s, vid, in_port, f.now_ns);
            }
        }
        if is_group(d) && is_link_local(d) {
            self.stats.link_local.inc();
            pool.put(p);
            return dropped;
        }
        if !forward {
            self.stats.stp_blocked.inc();
            pool.put(p);
            return dropped;
        }
        let ports = f.ports;
        match (is_group(d), f.out[i]) {
            (false, Some(port)) if port == in_port => {
                f.filtered += 1;
                pool.put(p);
                dropped
            }
            (false, Some(port)) if stp.is_some_and(|pp| !pp.forwards(port)) && port < ports => {
                self.stats.stp_blocked.inc();
                pool.put(p);
                dropped
            }
            (false, Some(port)) if port < ports => {
                // Nothing to change on the way out: a VLAN-unaware switch, or untagged in and
                // untagged out (access to access).
                let plain = match M {
                    UNAWARE => true,
                    // `port < ports <= 64` (`take_untagged` holds one-VLAN runs only then): the
                    // mask has its bit.
                    ONE_VLAN => f.plain >> (port & 63) & 1 == 1,
                    _ => !tagged && plan.is_some_and(|plan| plan.untagged_vid(port) == vid),
                };
                if plain {
                    f.forwarded += 1;
                    tx[port as usize].push(p);
                    return (Went::Port(port), vlan);
                }
                match plan {
                    Some(plan) if plan.is_member(port, vid) => {
                        f.forwarded += 1;
                        shape(plan, port, vid, tagged, &mut p);
                        tx[port as usize].push(p);
                        (Went::Port(port), vlan)
                    }
                    _ => {
                        self.stats.vlan_egress.inc();
                        pool.put(p);
                        dropped
                    }
                }
            }
            (true, _) if is_link_local(d) => {
                self.stats.link_local.inc();
                pool.put(p);
                dropped
            }
            (group, _) => {
                // Broadcast, multicast, unknown unicast (or a port beyond this switch's).
                if let Some(limits) = f.ports_plan.and_then(|pp| pp.storm(in_port)) {
                    let kind = match (group, d & fp_cuckoo::COMPACT_MAX_KEY) {
                        (false, _) => Kind::UnknownUnicast,
                        (true, 0xffff_ffff_ffff) => Kind::Broadcast,
                        (true, _) => Kind::Multicast,
                    };
                    if !self.storm.admit(limits, in_port, kind, f.now_ns) {
                        match kind {
                            Kind::Broadcast => self.stats.storm_broadcast.inc(),
                            Kind::Multicast => self.stats.storm_multicast.inc(),
                            Kind::UnknownUnicast => self.stats.storm_unknown_unicast.inc(),
                        }
                        pool.put(p);
                        return dropped;
                    }
                }
                if !group {
                    self.stats.unknown_unicast.inc();
                }
                self.stats.flooded.inc();
                self.flooded[in_port as usize].inc();
                match plan {
                    None if stp.is_some() => {
                        self.flood_vlan(stp.expect("checked"), in_port, 0, false, p, tx, pool)
                    }
                    None => self.flood(in_port, p, tx, pool),
                    Some(plan) => {
                        self.per_vlan.flooded[vid as usize].inc();
                        self.flood_vlan(plan, in_port, vid, tagged, p, tx, pool);
                    }
                }
                (FLOODED, vlan)
            }
        }
    }

    /// Hand a finished sample to the sFlow exporter.
    #[cold]
    fn queue_sample(&mut self, s: Sample) {
        if let Some(q) = &mut self.sampler {
            q.send(s);
        }
    }

    /// The ports a frame of VLAN `vid` from `in_port` is flooded to (for sFlow's output field).
    #[cold]
    fn flood_width(&self, plan: Option<&PortPlan>, in_port: u16, vid: u16) -> Went {
        let all = &ALL_PORTS[..(self.ports as usize).min(ALL_PORTS.len())];
        let members = match plan {
            Some(pp) if pp.aware() => pp.ports_of(vid),
            _ => all,
        };
        let mut targets = members
            .iter()
            .filter(|&&q| q != in_port && plan.is_none_or(|pp| pp.forwards(q)));
        match (targets.next(), targets.count()) {
            (None, _) => Went::Dropped,
            (Some(&q), 0) => Went::Port(q),
            (Some(_), more) => Went::Flooded(1 + more as u16),
        }
    }

    /// Copies of `p` to every port but `in_port` (the last one gets the original).
    fn flood(&self, in_port: u16, p: Packet, tx: &mut [Vec<Packet>], pool: &mut Pool) {
        let targets: u16 = self.ports.saturating_sub(1);
        if targets == 0 {
            pool.put(p);
            return;
        }
        let mut sent = 0;
        let last = if in_port == self.ports - 1 {
            self.ports - 2
        } else {
            self.ports - 1
        };
        for port in 0..self.ports {
            if port == in_port || port == last {
                continue;
            }
            match pool.get() {
                Some(mut c) => {
                    c.fill(p.data());
                    c.ts_ns = p.ts_ns;
                    c.port = p.port;
                    tx[port as usize].push(c);
                    sent += 1;
                }
                None => self.stats.no_buffer.inc(),
            }
        }
        tx[last as usize].push(p);
        self.stats.tx.add(sent + 1);
    }

    /// Copies of `p` (VLAN `vid`) to every other member port of its VLAN, each in the form its
    /// port sends (the last one gets the original).
    #[allow(clippy::too_many_arguments)]
    fn flood_vlan(
        &self,
        plan: &PortPlan,
        in_port: u16,
        vid: u16,
        tagged: bool,
        mut p: Packet,
        tx: &mut [Vec<Packet>],
        pool: &mut Pool,
    ) {
        // VLAN-aware: the VLAN's member ports; unaware (here with a spanning tree): every port.
        let all: &[u16] = &ALL_PORTS[..(self.ports as usize).min(ALL_PORTS.len())];
        let members = if plan.aware() {
            plan.ports_of(vid)
        } else {
            all
        };
        let target = |q: u16| q != in_port && plan.forwards(q);
        let Some(&last) = members.iter().rev().find(|&&q| target(q)) else {
            pool.put(p);
            return;
        };
        let mut sent = 0;
        for &port in members {
            if !target(port) || port == last {
                continue;
            }
            match pool.get() {
                Some(mut c) => {
                    c.fill(p.data());
                    c.ts_ns = p.ts_ns;
                    c.port = p.port;
                    shape(plan, port, vid, tagged, &mut c);
                    tx[port as usize].push(c);
                    sent += 1;
                }
                None => self.stats.no_buffer.inc(),
            }
        }
        shape(plan, last, vid, tagged, &mut p);
        tx[last as usize].push(p);
        self.stats.tx.add(sent + 1);
    }

    fn slot(mac: Key) -> usize {
        fp_hash::reduce(fp_hash::splitmix64(mac), REFRESH_SLOTS as u64) as usize
    }

    fn refresh_due(&self, mac: Key, port: u16, now: u64) -> bool {
        let (m, p, t) = self.refresh[Self::slot(mac)];
        !(m == mac && p == port && now.saturating_sub(t) < self.refresh_ns)
    }

    /// Whether a source seen on `port` though the FIB says otherwise was reported from there
    /// within the last second: a move the writer holds back (a pinned MAC) is not reported
    /// for every frame.
    fn reported_recently(&self, mac: Key, port: u16, now: u64) -> bool {
        let (m, p, t) = self.refresh[Self::slot(mac)];
        m == mac && p == port && now.saturating_sub(t) < MOVE_REPORT_NS.min(self.refresh_ns)
    }

    fn report(&mut self, mac: Key, vlan: u16, port: u16, now: u64) {
        match self.learn.try_send(Learn {
            mac: MacAddr::from_u64(mac & fp_cuckoo::COMPACT_MAX_KEY),
            vlan,
            port,
            now_ns: now,
        }) {
            Ok(()) => {
                self.stats.learn_sent.inc();
                self.refresh[Self::slot(mac)] = (mac, port, now);
            }
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.stats.learn_dropped.inc()
            }
        }
    }
}

/// Port numbers 0, 1, 2, …: the member list of an unaware switch's one flooding domain.
static ALL_PORTS: [u16; 4096] = {
    let mut a = [0u16; 4096];
    let mut i = 0;
    while i < 4096 {
        a[i] = i as u16;
        i += 1;
    }
    a
};

/// Give `p` (VLAN `vid`, `tagged` as received) the form `port` sends it in.
#[inline]
fn shape(plan: &PortPlan, port: u16, vid: u16, tagged: bool, p: &mut Packet) {
    let (start, len) = (p.start(), p.len());
    let (s, l) = plan.egress(port, vid, tagged, p.buffer(), start, len);
    if (s, l) != (start, len) {
        p.set_frame(s, l);
    }
}

// ---------------------------------------------------------------------------------------------
// The stage: the switch worker, per-port flood counters and the tracer

/// What the tracer records about a probe: where it came in, what the FIB said, where it went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SwitchRecord {
    /// Worker id.
    pub worker: usize,
    /// Ingress port.
    pub in_port: usize,
    /// Ingress interface.
    pub in_interface: String,
    /// Source MAC.
    pub src: MacAddr,
    /// Destination MAC.
    pub dst: MacAddr,
    /// The frame's VLAN (none in a VLAN-unaware switch, or when the port has no VLAN for it).
    pub vlan: Option<u16>,
    /// The destination's FIB entry before switching (none for group addresses).
    pub fib: Option<u16>,
    /// `forwarded`, `flooded`, `filtered_same_port` or `dropped`.
    pub decision: &'static str,
    /// Ports (and interfaces) the frame was handed to.
    pub out: Vec<(usize, String)>,
}

/// Probes seen in one burst (rare; a fixed array, no allocation).
const MAX_PROBES: usize = 4;

/// A probe found in a burst: (probe id, destination MAC, source MAC, VLAN, FIB entry of the
/// destination).
type Found = (u64, MacAddr, MacAddr, Option<u16>, Option<u16>);

/// A worker's view of the tracer: its queue to the control side, the FIB, the port names.
struct Tracer {
    probes: ProbeSender<SwitchRecord>,
    fib: FibReader,
    names: Arc<Vec<String>>,
    /// The probes of the current burst.
    found: [Found; MAX_PROBES],
    n: usize,
}

impl Tracer {
    /// Look for probes in a received burst (cheap per frame: a length test for short frames, the
    /// parser and a 16-byte compare for long ones).
    #[inline]
    fn scan(&mut self, rx: &[Packet], port: u16, vlans: Option<&PortPlan>) {
        self.n = 0;
        for p in rx {
            if let Some(id) = probe_id(p.data()) {
                self.found_probe(id, p.data(), port, vlans);
            }
        }
    }

    #[cold]
    #[inline(never)]
    fn found_probe(&mut self, id: u64, d: &[u8], port: u16, vlans: Option<&PortPlan>) {
        if self.n < MAX_PROBES {
            let mac = |r: std::ops::Range<usize>| {
                MacAddr(
                    d[r].try_into()
                        .expect("a probe frame has an Ethernet header"),
                )
            };
            let dst = mac(0..6);
            let (vlan, fid) = match vlans.map(|v| v.classify(port, d)) {
                None => (None, Some(0)),
                Some(Ok(i)) => (Some(i.vid), Some(i.fid)),
                Some(Err(_)) => (None, None),
            };
            let fib = match fid {
                Some(f) if !dst.is_multicast() => self.fib.get(vlan::key(f, dst.to_u64())),
                _ => None,
            };
            self.found[self.n] = (id, dst, mac(6..12), vlan, fib);
            self.n += 1;
        }
    }

    /// After switching: find where each probe went and record it.
    #[cold]
    #[inline(never)]
    fn record(&mut self, worker: usize, in_port: usize, out: &Outputs, now_ns: u64) {
        for k in 0..self.n {
            let (id, dst, src, vlan, fib) = self.found[k];
            if !self.probes.admit(now_ns) {
                continue;
            }
            let ports: Vec<usize> = (0..out.ports())
                .filter(|&j| out.burst(j).iter().any(|p| probe_id(p.data()) == Some(id)))
                .collect();
            let decision = match (ports.len(), fib) {
                (0, Some(p)) if p as usize == in_port => "filtered_same_port",
                (0, _) => "dropped",
                (1, Some(_)) if !dst.is_multicast() => "forwarded",
                _ => "flooded",
            };
            let r = SwitchRecord {
                worker,
                in_port,
                in_interface: self.names[in_port].clone(),
                src,
                dst,
                vlan,
                fib,
                decision,
                out: ports.iter().map(|&j| (j, self.names[j].clone())).collect(),
            };
            self.probes.send(id, now_ns, r);
        }
        self.n = 0;
    }
}

/// One switch worker as a stage of the engine: the CuckooSwitch worker, the frames it flooded per
/// ingress port, and the tracer.
pub struct SwitchStage {
    index: usize,
    sw: SwitchWorker,
    tracer: Option<Tracer>,
    /// Frames the control side sends through this worker (spanning-tree BPDUs).
    inject: Option<std::sync::mpsc::Receiver<BpduFrame>>,
    /// Control frames waiting for room in their port's transmit burst.
    pending: Vec<BpduFrame>,
}

/// Control frames a stage keeps while their port's burst is full.
const PENDING: usize = 64;

impl SwitchStage {
    /// Worker `index`'s stage around `sw`; with `tracer`, probes are recorded into its queue
    /// (`names` are the ports' interfaces, `fib` reads the destinations' entries).
    pub fn new(
        index: usize,
        sw: SwitchWorker,
        tracer: Option<(ProbeSender<SwitchRecord>, FibReader, Arc<Vec<String>>)>,
    ) -> SwitchStage {
        SwitchStage {
            index,
            sw,
            inject: None,
            pending: Vec::with_capacity(PENDING),
            tracer: tracer.map(|(probes, fib, names)| Tracer {
                probes,
                fib,
                names,
                found: [(0, MacAddr([0; 6]), MacAddr([0; 6]), None, None); MAX_PROBES],
                n: 0,
            }),
        }
    }

    /// The worker's counters.
    pub fn stats(&self) -> &Arc<SwitchStats> {
        self.sw.stats()
    }

    /// Frames flooded per ingress port (read by the metrics).
    pub fn flooded(&self) -> Arc<[Counter]> {
        self.sw.flooded().clone()
    }

    /// Frames received and flooded per VLAN (read by the metrics).
    pub fn vlan_counters(&self) -> Arc<VlanCounters> {
        self.sw.vlan_counters().clone()
    }

    /// Send the frames the control side queues on `queue` (spanning-tree BPDUs) through this
    /// worker's ports, between bursts.
    pub fn set_inject(&mut self, queue: std::sync::mpsc::Receiver<BpduFrame>) {
        self.inject = Some(queue);
    }

    /// Move queued control frames into the transmit bursts, ahead of switched traffic (a copy
    /// into a pool buffer each). A frame whose port's burst is full waits (up to [`PENDING`]
    /// frames) for the next pass; what cannot wait is dropped and counted.
    #[inline]
    fn inject(&mut self, out: &mut Outputs, pool: &mut Pool) {
        let Some(q) = &self.inject else {
            return;
        };
        // The common case, nothing to send: one queue poll.
        let mut first = None;
        if self.pending.is_empty() {
            match q.try_recv() {
                Ok(f) => first = Some(f),
                Err(_) => return,
            }
        }
        let stats: &SwitchStats = &self.sw.stats;
        let mut send = |f: BpduFrame, pending: &mut Vec<BpduFrame>| {
            let port = f.port as usize;
            if port >= out.ports() {
                stats.control_dropped.inc();
                return;
            }
            if out.burst(port).len() >= MAX_BURST {
                if pending.len() < PENDING {
                    pending.push(f);
                } else {
                    stats.control_dropped.inc();
                }
                return;
            }
            match pool.get() {
                Some(mut p) => {
                    p.fill(&f.bytes[..f.len as usize]);
                    out.bursts_mut()[port].push(p);
                    stats.control_tx.inc();
                }
                None => stats.control_dropped.inc(),
            }
        };
        let waiting = self.pending.len();
        for k in 0..waiting {
            let f = self.pending[k];
            send(f, &mut self.pending);
        }
        self.pending.drain(..waiting);
        if let Some(f) = first {
            send(f, &mut self.pending);
        }
        for _ in 0..MAX_BURST {
            let Ok(f) = q.try_recv() else {
                return;
            };
            send(f, &mut self.pending);
        }
    }
}

impl Stage for SwitchStage {
    #[inline]
    fn process(
        &mut self,
        port: usize,
        rx: &mut Vec<Packet>,
        out: &mut Outputs,
        pool: &mut Pool,
        now_ns: u64,
    ) {
        if let Some(t) = &mut self.tracer {
            t.scan(rx, port as u16, self.sw.vlans());
        }
        // A burst that filled the receive burst may be held (more frames are probably waiting);
        // a shorter one means the queue is drained: everything held goes now.
        let drained = rx.len() < MAX_BURST;
        self.sw
            .process(port as u16, rx, out.bursts_mut(), pool, now_ns);
        let probes = self.tracer.as_ref().is_some_and(|t| t.n > 0);
        // Holding more must leave buffers for the next burst and for flooding all that is held
        // (the service sizes the pool for it; this keeps a smaller pool from losing copies).
        let flood_copies = (self.sw.held() + MAX_BURST) * (self.sw.ports() as usize - 1);
        if drained || probes || pool.available() < flood_copies + MAX_BURST {
            self.sw.flush(out.bursts_mut(), pool, now_ns);
        }
        if let Some(t) = &mut self.tracer {
            if t.n > 0 {
                t.record(self.index, port, out, now_ns);
            }
        }
    }

    #[inline]
    fn pass_done(&mut self, more_waiting: bool, now_ns: u64, out: &mut Outputs, pool: &mut Pool) {
        self.inject(out, pool);
        if !more_waiting {
            self.sw.flush(out.bursts_mut(), pool, now_ns);
        }
    }

    fn idle(&mut self, now_ns: u64, out: &mut Outputs, pool: &mut Pool) {
        self.inject(out, pool);
        self.sw.flush(out.bursts_mut(), pool, now_ns);
    }

    fn finish(&mut self, now_ns: u64, out: &mut Outputs, pool: &mut Pool) {
        self.sw.flush(out.bursts_mut(), pool, now_ns);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::{learn_queue, SwitchControl};
    use fp_cuckoo::{CompactMap, Config};
    use fp_pipeline::packet::burst;

    fn frame(dst: MacAddr, src: MacAddr) -> Vec<u8> {
        let mut f = vec![0u8; 60];
        f[0..6].copy_from_slice(&dst.0);
        f[6..12].copy_from_slice(&src.0);
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f
    }

    const A: MacAddr = MacAddr::from_u64(0x0200_0000_000a);
    const B: MacAddr = MacAddr::from_u64(0x0200_0000_000b);
    const C: MacAddr = MacAddr::from_u64(0x0200_0000_000c);
    const BCAST: MacAddr = MacAddr::from_u64(0xffff_ffff_ffff);

    /// `m` plus `i` in its low bits.
    fn plus(m: MacAddr, i: u64) -> MacAddr {
        MacAddr::from_u64(m.to_u64() + i)
    }

    struct Sw {
        w: SwitchWorker,
        c: SwitchControl,
        pool: Pool,
        tx: Vec<Vec<Packet>>,
    }

    impl Sw {
        fn new(ports: u16) -> Sw {
            let (fw, fr) = CompactMap::new(&Config::with_capacity(1000)).unwrap();
            let (ltx, lrx) = learn_queue(64);
            let aging = 300 * 1_000_000_000;
            Sw {
                w: SwitchWorker::new(fr, ports, ltx, aging),
                c: SwitchControl::new(fw, lrx, aging),
                pool: Pool::new(256),
                tx: (0..ports).map(|_| burst()).collect(),
            }
        }

        /// Send one frame into `port` at `now`; returns the ports it went out of.
        fn send(&mut self, port: u16, f: Vec<u8>, now: u64) -> Vec<u16> {
            let mut rx = burst();
            let mut p = self.pool.get().unwrap();
            p.fill(&f);
            rx.push(p);
            self.w
                .process(port, &mut rx, &mut self.tx, &mut self.pool, now);
            self.c.drain();
            let mut outs = Vec::new();
            for (i, t) in self.tx.iter_mut().enumerate() {
                if !t.is_empty() {
                    outs.push(i as u16);
                }
                self.pool.put_all(t);
            }
            outs
        }
    }

    #[test]
    fn sflow_samples_one_frame_in_n_per_port_with_where_it_went() {
        let mut sw = Sw::new(3);
        let rate: crate::sflow::Rate = Arc::new(std::sync::atomic::AtomicU32::new(10));
        let (sampler, mut rx) = crate::sflow::sampler(0, 3, 4096, rate.clone());
        let counters = rx.counters().clone();
        sw.w.set_sampler(sampler);
        let (a, b) = (MacAddr([2, 0, 0, 0, 0, 1]), MacAddr([2, 0, 0, 0, 0, 2]));
        // b learnt on port 2; then 10000 frames a -> b on port 0 in bursts of 32.
        sw.send(2, frame(a, b), 1);
        let mut burst_rx = burst();
        for k in 0..10_000 / 32 + 1 {
            for _ in 0..32 {
                let mut p = sw.pool.get().unwrap();
                p.fill(&frame(b, a));
                burst_rx.push(p);
            }
            sw.w.process(0, &mut burst_rx, &mut sw.tx, &mut sw.pool, 10 + k);
            for t in sw.tx.iter_mut() {
                sw.pool.put_all(t);
            }
        }
        let frames = (10_000 / 32 + 1) * 32;
        let samples: Vec<crate::sflow::Sample> = std::iter::from_fn(|| rx.take()).collect();
        // Frames to b (learnt on port 2) from port 0.
        let on0: Vec<_> = samples.iter().filter(|s| s.port == 0).collect();
        // One in 10 on average: within 5 standard deviations of a skip count's spread.
        let n = on0.len() as f64;
        let mean = frames as f64 / 10.0;
        assert!(
            (n - mean).abs() < 5.0 * (mean * 0.9).sqrt() + 5.0,
            "{n} samples of {frames}"
        );
        assert!(on0.iter().all(|s| s.went == Went::Port(2) && s.len == 60));
        assert!(on0.iter().all(|s| s.header[..12] == frame(b, a)[..12]));
        // The pools add up to the frames the port received up to its last sample.
        let pooled: u64 = on0.iter().map(|s| s.pool as u64).sum();
        assert!(pooled <= frames as u64 && pooled + 2 * 10 * 10 > frames as u64);
        assert_eq!(
            counters.queued.load(std::sync::atomic::Ordering::Relaxed),
            samples.len() as u64
        );
        // Every frame: one to an unknown MAC is flooded to the two other ports.
        rate.store(1, std::sync::atomic::Ordering::Relaxed);
        sw.send(0, frame(MacAddr([2, 0, 0, 0, 0, 9]), a), 19_000);
        let flooded: Vec<_> = std::iter::from_fn(|| rx.take()).collect();
        assert_eq!(flooded.len(), 1);
        assert_eq!(
            (flooded[0].went, flooded[0].vlans),
            (Went::Flooded(2), None)
        );
        // Rate 0: no more samples.
        rate.store(0, std::sync::atomic::Ordering::Relaxed);
        sw.send(0, frame(b, a), 20_000);
        sw.send(0, frame(b, a), 20_001);
        assert!(rx.take().is_none());
    }

    /// The frames of each port's transmit bursts (bytes), recycling the buffers.
    fn drain_tx(tx: &mut [Vec<Packet>], pool: &mut Pool) -> Vec<Vec<Vec<u8>>> {
        tx.iter_mut()
            .map(|t| {
                let v = t.iter().map(|p| p.data().to_vec()).collect();
                pool.put_all(t);
                v
            })
            .collect()
    }

    /// A worker gathering up to 96 frames (three full bursts) and one switching each burst alone
    /// see the same full bursts from random ports (known destinations on any port, unknown ones,
    /// broadcasts, destinations on the ingress port): every port sends the same frames in the
    /// same order, and the counters agree, per ingress port too.
    #[test]
    fn gathered_bursts_go_out_as_each_alone_would() {
        let mk = |gather: usize| {
            let (fw, fr) = CompactMap::new(&Config::with_capacity(4096)).unwrap();
            let (ltx, lrx) = learn_queue(4096);
            let mut c = SwitchControl::new(fw, lrx, u64::MAX);
            for h in 0..200u64 {
                c.preload(plus(A, h), (h % 4) as u16).unwrap();
            }
            let mut w = SwitchWorker::new(fr, 4, ltx, u64::MAX);
            w.set_learning(false);
            w.set_gather(gather);
            Sw {
                w,
                c,
                pool: Pool::new(1024),
                tx: (0..4).map(|_| burst()).collect(),
            }
        };
        let (mut a, mut b) = (mk(1), mk(96));
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let (mut sent_a, mut sent_b) = (vec![Vec::new(); 4], vec![Vec::new(); 4]);
        let mut held_seen = 0;
        for _ in 0..40 {
            let port = rnd(4) as u16;
            let frames: Vec<Vec<u8>> = (0..MAX_BURST)
                .map(|_| match rnd(10) {
                    0 => frame(BCAST, plus(B, rnd(50))),
                    1 => frame(plus(C, 1 << 20 | rnd(50)), plus(B, rnd(50))),
                    _ => frame(plus(A, rnd(200)), plus(B, rnd(50))),
                })
                .collect();
            for (s, sent) in [(&mut a, &mut sent_a), (&mut b, &mut sent_b)] {
                let mut rx = burst();
                for f in &frames {
                    let mut p = s.pool.get().unwrap();
                    p.fill(f);
                    rx.push(p);
                }
                s.w.process(port, &mut rx, &mut s.tx, &mut s.pool, 1);
                assert!(rx.is_empty(), "every frame is taken");
                for (j, o) in drain_tx(&mut s.tx, &mut s.pool).into_iter().enumerate() {
                    sent[j].extend(o);
                }
            }
            assert_eq!(a.w.held(), 0);
            assert!(b.w.held() <= 96 - MAX_BURST, "{} held", b.w.held());
            held_seen = held_seen.max(b.w.held());
        }
        assert_eq!(
            held_seen, 64,
            "the gathering worker held two bursts at times"
        );
        b.w.flush(&mut b.tx, &mut b.pool, 1);
        assert_eq!(b.w.held(), 0);
        for (j, o) in drain_tx(&mut b.tx, &mut b.pool).into_iter().enumerate() {
            sent_b[j].extend(o);
        }
        assert_eq!(sent_a, sent_b);
        let (sa, sb) = (a.w.stats(), b.w.stats());
        for (x, y) in sa.values().into_iter().zip(sb.values()) {
            assert_eq!(x, y);
        }
        assert!(sa.forwarded.get() > 500 && sa.flooded.get() > 100 && sa.filtered.get() > 100);
        let per_port = |w: &SwitchWorker| w.flooded().iter().map(|c| c.get()).collect::<Vec<_>>();
        assert_eq!(per_port(&a.w), per_port(&b.w));
        assert_eq!(per_port(&a.w).iter().sum::<u64>(), sa.flooded.get());
        let _ = (&a.c, &b.c);
    }

    /// In the engine, a gathering stage holds only full bursts, and only while a polling pass says
    /// more frames are waiting: a short burst, a pass without a full burst, the idle hook and the
    /// end of input each send everything held.
    #[test]
    fn the_stage_holds_full_bursts_only_while_more_are_waiting() {
        let (fw, fr) = CompactMap::new(&Config::with_capacity(1000)).unwrap();
        let (ltx, lrx) = learn_queue(64);
        let mut c = SwitchControl::new(fw, lrx, u64::MAX);
        c.preload(B, 1).unwrap();
        let mut w = SwitchWorker::new(fr, 2, ltx, u64::MAX);
        w.set_learning(false);
        w.set_gather(256);
        let mut st = SwitchStage::new(0, w, None);
        let mut pool = Pool::new(1024);
        let mut out = Outputs::new(2);
        let recv = |st: &mut SwitchStage, out: &mut Outputs, pool: &mut Pool, n: usize| {
            let mut rx = burst();
            for _ in 0..n {
                let mut p = pool.get().unwrap();
                p.fill(&frame(B, A));
                rx.push(p);
            }
            st.process(0, &mut rx, out, pool, 1);
        };
        let sent = |out: &mut Outputs, pool: &mut Pool| {
            let n = out.burst(1).len();
            pool.put_all(out.to(1));
            n
        };
        // Full bursts wait while more are waiting ...
        recv(&mut st, &mut out, &mut pool, MAX_BURST);
        recv(&mut st, &mut out, &mut pool, MAX_BURST);
        st.pass_done(true, 1, &mut out, &mut pool);
        assert_eq!(sent(&mut out, &mut pool), 0);
        // ... and go with the next short burst,
        recv(&mut st, &mut out, &mut pool, 5);
        assert_eq!(sent(&mut out, &mut pool), 2 * MAX_BURST + 5);
        // or at the end of a pass that found no full burst,
        recv(&mut st, &mut out, &mut pool, MAX_BURST);
        assert_eq!(sent(&mut out, &mut pool), 0);
        st.pass_done(false, 1, &mut out, &mut pool);
        assert_eq!(sent(&mut out, &mut pool), MAX_BURST);
        // or when the worker goes idle, or the input ends,
        recv(&mut st, &mut out, &mut pool, MAX_BURST);
        st.idle(1, &mut out, &mut pool);
        assert_eq!(sent(&mut out, &mut pool), MAX_BURST);
        recv(&mut st, &mut out, &mut pool, MAX_BURST);
        st.finish(1, &mut out, &mut pool);
        assert_eq!(sent(&mut out, &mut pool), MAX_BURST);
        // or when the gather is full: eight full bursts.
        for k in 0..8 {
            recv(&mut st, &mut out, &mut pool, MAX_BURST);
            let expect = if k == 7 { 8 * MAX_BURST } else { 0 };
            assert_eq!(sent(&mut out, &mut pool), expect, "after burst {k}");
        }
        assert_eq!(st.stats().forwarded.get(), st.stats().rx.get());
        let _ = c;
    }

    /// A stage whose pool could not flood everything it would hold switches at once instead:
    /// broadcasts gathered on a 4-port switch with a small pool lose no copy.
    #[test]
    fn gathering_never_holds_more_than_the_pool_can_flood() {
        let (_fw, fr) = CompactMap::new(&Config::with_capacity(1000)).unwrap();
        let (ltx, _lrx) = learn_queue(64);
        let mut w = SwitchWorker::new(fr, 4, ltx, u64::MAX);
        w.set_learning(false);
        w.set_gather(256);
        let mut st = SwitchStage::new(0, w, None);
        let mut pool = Pool::new(4 * MAX_BURST);
        let mut out = Outputs::new(4);
        for _ in 0..6 {
            let mut rx = burst();
            for _ in 0..MAX_BURST {
                let mut p = pool.get().unwrap();
                p.fill(&frame(BCAST, A));
                rx.push(p);
            }
            st.process(0, &mut rx, &mut out, &mut pool, 1);
            assert_eq!(
                st.sw.held(),
                0,
                "a full burst held with room for its copies only"
            );
            for j in 0..4 {
                pool.put_all(out.to(j));
            }
        }
        let s = st.stats();
        assert_eq!(s.no_buffer.get(), 0);
        assert_eq!(s.flooded.get(), 6 * MAX_BURST as u64);
        assert_eq!(s.tx.get(), 3 * 6 * MAX_BURST as u64);
    }

    /// Two switches see the same frames, moves and aging, one with a small FIB cache (its ring
    /// recycles), one without: every frame leaves by the same ports. An answer that outlived a
    /// move or an aged-out entry would send a frame to the old port instead of flooding or
    /// following the move.
    #[test]
    fn the_fib_cache_never_changes_a_decision() {
        let aging = 50_000_000; // 50 ms
        let mk = |cache: bool| {
            let (fw, fr) = CompactMap::new(&Config::with_capacity(4096)).unwrap();
            let (ltx, lrx) = learn_queue(4096);
            let c = SwitchControl::new(fw, lrx, aging);
            let mut w = SwitchWorker::new(fr, 4, ltx, aging);
            if cache {
                w.set_cache(64, c.epoch(), 9).unwrap();
            }
            Sw {
                w,
                c,
                pool: Pool::new(1024),
                tx: (0..4).map(|_| burst()).collect(),
            }
        };
        let (mut a, mut b) = (mk(true), mk(false));
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut rnd = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        // 300 hosts, each on a home port that changes now and then (a move).
        let mut home: Vec<u16> = (0..300).map(|i| (i % 4) as u16).collect();
        let mut now = 1u64;
        for burst_no in 0..4000 {
            now += rnd(2_000_000);
            if rnd(20) == 0 {
                let h = rnd(300) as usize;
                home[h] = rnd(4) as u16;
            }
            let port = rnd(4) as u16;
            let frames: Vec<Vec<u8>> = (0..16)
                .map(|_| {
                    let src = rnd(300);
                    let dst = rnd(300);
                    frame(plus(A, dst), plus(A, src))
                })
                .filter(|f| {
                    home[(MacAddr(f[6..12].try_into().unwrap()).to_u64() - A.to_u64()) as usize]
                        == port
                })
                .collect();
            let mut outs = Vec::new();
            for s in [&mut a, &mut b] {
                let mut rx = burst();
                for f in &frames {
                    let mut p = s.pool.get().unwrap();
                    p.fill(f);
                    rx.push(p);
                }
                s.w.process(port, &mut rx, &mut s.tx, &mut s.pool, now);
                s.c.drain();
                if burst_no % 10 == 0 {
                    s.c.age(now);
                }
                let o: Vec<Vec<Vec<u8>>> =
                    s.tx.iter_mut()
                        .map(|t| {
                            let v = t.iter().map(|p| p.data().to_vec()).collect();
                            s.pool.put_all(t);
                            v
                        })
                        .collect();
                outs.push(o);
            }
            assert_eq!(
                outs[0], outs[1],
                "burst {burst_no}: the cached switch forwarded differently"
            );
        }
        let (sa, sb) = (a.w.stats(), b.w.stats());
        assert_eq!(sa.forwarded.get(), sb.forwarded.get());
        assert_eq!(sa.flooded.get(), sb.flooded.get());
        // Most bursts come after a change (a move or an aging pass): the cache is tested far more
        // on invalidation than it would be in a real switch.
        assert!(
            sa.cache_hit.get() > 200 && sa.cache_miss.get() > 1000,
            "{} hits, {} misses",
            sa.cache_hit.get(),
            sa.cache_miss.get()
        );
        assert!(
            a.c.stats().moved > 10 && a.c.stats().aged > 50,
            "{:?}",
            a.c.stats()
        );
        assert_eq!(sb.cache_hit.get() + sb.cache_miss.get(), 0);
    }

    #[test]
    fn learn_then_forward_without_flooding() {
        let mut s = Sw::new(4);
        // A (port 0) -> B unknown: flooded to 1, 2, 3; A learned on 0.
        assert_eq!(s.send(0, frame(B, A), 1), vec![1, 2, 3]);
        assert_eq!(s.c.lookup(A), Some(0));
        // B (port 2) replies to A: forwarded to port 0 only; B learned on 2.
        assert_eq!(s.send(2, frame(A, B), 2), vec![0]);
        // Now A -> B goes to port 2 only.
        assert_eq!(s.send(0, frame(B, A), 3), vec![2]);
        let st = s.w.stats();
        assert_eq!(st.flooded.get(), 1);
        assert_eq!(st.unknown_unicast.get(), 1);
        assert_eq!(st.forwarded.get(), 2);
    }

    #[test]
    fn broadcast_floods_and_never_returns_to_ingress() {
        let mut s = Sw::new(4);
        for port in 0..4 {
            let outs = s.send(port, frame(BCAST, plus(A, port as u64)), 1);
            assert_eq!(outs.len(), 3);
            assert!(!outs.contains(&port));
        }
        // Destination on the ingress port: filtered.
        s.send(1, frame(BCAST, C), 2);
        assert!(s.send(1, frame(C, plus(A, 1)), 3).is_empty());
        assert_eq!(s.w.stats().filtered.get(), 1);
    }

    /// A frame from `src` to `dst`, tagged with `vid` if given.
    fn tagged(dst: MacAddr, src: MacAddr, vid: Option<u16>) -> Vec<u8> {
        let f = frame(dst, src);
        match vid {
            None => f,
            Some(v) => {
                let mut t = f[..12].to_vec();
                t.extend_from_slice(&[0x81, 0x00]);
                t.extend_from_slice(&v.to_be_bytes());
                t.extend_from_slice(&f[12..]);
                t
            }
        }
    }

    /// A 4-port switch: port 0 access VLAN 10, port 1 access VLAN 20, port 2 trunk of 10 and 20,
    /// port 3 trunk of 20 with native VLAN 10.
    fn vlan_switch() -> Sw {
        let (fw, fr) =
            CompactMap::with_value_bits(&Config::with_capacity(1000), crate::vlan::value_bits(4))
                .unwrap();
        let (ltx, lrx) = learn_queue(64);
        let aging = 300 * 1_000_000_000;
        let mut c = SwitchControl::new(fw, lrx, aging);
        let modes = crate::vlan::tests::four_ports();
        c.set_vlans(4, Some(modes)).unwrap();
        let mut w = SwitchWorker::new(fr, 4, ltx, aging);
        w.set_plan(c.port_plan());
        Sw {
            w,
            c,
            pool: Pool::new(256),
            tx: (0..4).map(|_| burst()).collect(),
        }
    }

    impl Sw {
        /// Send one frame into `port`; returns (port, frame bytes) of every copy sent.
        fn exchange(&mut self, port: u16, f: Vec<u8>, now: u64) -> Vec<(u16, Vec<u8>)> {
            let mut rx = burst();
            let mut p = self.pool.get().unwrap();
            p.fill(&f);
            rx.push(p);
            self.w
                .process(port, &mut rx, &mut self.tx, &mut self.pool, now);
            self.c.drain();
            let mut out = Vec::new();
            for (i, frames) in drain_tx(&mut self.tx, &mut self.pool)
                .into_iter()
                .enumerate()
            {
                out.extend(frames.into_iter().map(|f| (i as u16, f)));
            }
            out
        }
    }

    #[test]
    fn a_burst_on_an_access_port_is_taken_whole_or_frame_by_frame_alike() {
        // The same frames into access port 0 (VLAN 10) of two switches, as bursts and one by one:
        // an all-untagged burst (taken in one pass) with a broadcast and a unicast to a MAC
        // learned on port 3 (untagged there: its native VLAN 10), then a burst with a tagged
        // frame of a VLAN the port does not carry and a runt among untagged ones (taken frame by
        // frame).
        let bursts = vec![
            vec![frame(BCAST, A), frame(B, A), frame(B, C)],
            vec![
                frame(BCAST, C),
                tagged(BCAST, A, Some(20)),
                vec![0xff; 10],
                frame(A, C),
                frame(B, A),
            ],
        ];
        let (mut whole, mut single) = (vlan_switch(), vlan_switch());
        for s in [&mut whole, &mut single] {
            assert_eq!(s.exchange(3, frame(BCAST, B), 1).len(), 2);
        }
        let send = |s: &mut Sw, frames: &[Vec<u8>]| {
            let mut rx = burst();
            for f in frames {
                let mut p = s.pool.get().unwrap();
                p.fill(f);
                rx.push(p);
            }
            s.w.process(0, &mut rx, &mut s.tx, &mut s.pool, 2);
            s.c.drain();
            drain_tx(&mut s.tx, &mut s.pool)
        };
        let mut outs = (Vec::new(), Vec::new());
        for b in &bursts {
            outs.0.push(send(&mut whole, b));
            outs.1.push(
                b.iter()
                    .map(|f| send(&mut single, std::slice::from_ref(f)))
                    .fold(vec![Vec::new(); 4], |mut acc, o| {
                        for (a, f) in acc.iter_mut().zip(o) {
                            a.extend(f);
                        }
                        acc
                    }),
            );
        }
        assert_eq!(outs.0, outs.1);
        // What the first burst did: flooded in VLAN 10 (tagged on trunk 2, untagged on 3), the
        // unicasts to B to port 3 only.
        assert_eq!(
            outs.0[0][3],
            vec![frame(BCAST, A), frame(B, A), frame(B, C)]
        );
        assert_eq!(outs.0[0][2], vec![tagged(BCAST, A, Some(10))]);
        assert!(outs.0[0][1].is_empty());
        let counts = |s: &Sw| {
            let v = s.w.vlan_counters();
            (v.rx[10].get(), v.rx[20].get(), s.w.stats().values())
        };
        assert_eq!(counts(&whole), counts(&single));
        assert_eq!(whole.w.vlan_counters().rx[10].get(), 1 + 6);
        let st = whole.w.stats();
        assert_eq!(
            (st.runt.get(), st.vlan_not_member.get(), st.filtered.get()),
            (1, 1, 1)
        );
        for m in [A, B, C] {
            assert_eq!(whole.c.lookup_in(10, m), single.c.lookup_in(10, m));
        }
        assert_eq!(whole.c.lookup_in(10, C), Some(0));
    }

    #[test]
    fn untagged_egress_is_right_on_ports_beyond_64() {
        // 70 ports: 0, 1 and 66 access ports of VLAN 10, 65 a trunk of it (65 and 1 share their
        // low six bits), 69 a trunk with native VLAN 10, the rest access ports of VLAN 20. A
        // burst of untagged frames from port 0 to hosts learned behind 66, 65 and 69 leaves
        // untagged, tagged, untagged; its broadcast reaches 1, 66 and 69 untagged and 65 tagged
        // only.
        let ports = 70u16;
        let (fw, fr) = CompactMap::with_value_bits(
            &Config::with_capacity(1000),
            crate::vlan::value_bits(ports as usize),
        )
        .unwrap();
        let (ltx, lrx) = learn_queue(64);
        let aging = 300 * 1_000_000_000;
        let mut c = SwitchControl::new(fw, lrx, aging);
        use crate::vlan::PortVlans;
        let mut modes = vec![PortVlans::Access(20); ports as usize];
        for p in [0, 1, 66] {
            modes[p] = PortVlans::Access(10);
        }
        modes[65] = PortVlans::Trunk {
            allowed: vec![10],
            native: None,
        };
        modes[69] = PortVlans::Trunk {
            allowed: vec![10, 20],
            native: Some(10),
        };
        c.set_vlans(ports as usize, Some(modes)).unwrap();
        let mut w = SwitchWorker::new(fr, ports, ltx, aging);
        w.set_plan(c.port_plan());
        let mut pool = Pool::new(1024);
        let mut tx: Vec<_> = (0..ports).map(|_| burst()).collect();
        let mut send = |w: &mut SwitchWorker, port: u16, frames: &[Vec<u8>]| {
            let mut rx = burst();
            for f in frames {
                let mut p = pool.get().unwrap();
                p.fill(f);
                rx.push(p);
            }
            w.process(port, &mut rx, &mut tx, &mut pool, 1);
            c.drain();
            drain_tx(&mut tx, &mut pool)
        };
        let d = MacAddr::from_u64(0x0200_0000_000d);
        send(&mut w, 66, &[frame(BCAST, B)]);
        send(&mut w, 65, &[tagged(BCAST, C, Some(10))]);
        send(&mut w, 69, &[frame(BCAST, d)]);
        let out = send(
            &mut w,
            0,
            &[frame(B, A), frame(C, A), frame(d, A), frame(BCAST, A)],
        );
        for (port, frames) in out.iter().enumerate() {
            let want = match port {
                1 => vec![frame(BCAST, A)],
                65 => vec![tagged(C, A, Some(10)), tagged(BCAST, A, Some(10))],
                66 => vec![frame(B, A), frame(BCAST, A)],
                69 => vec![frame(d, A), frame(BCAST, A)],
                _ => vec![],
            };
            assert_eq!(frames, &want, "port {port}");
        }
    }

    #[test]
    fn gathered_bursts_of_several_vlans_go_out_as_each_alone_would() {
        let d = MacAddr::from_u64(0x0200_0000_000d);
        let runs: Vec<Vec<(u16, Vec<Vec<u8>>)>> = vec![
            // Untagged bursts of one VLAN (held without a word per frame), then one of another
            // VLAN (every held frame gets its word), a tagged one from a trunk, a runt among
            // untagged frames of the first VLAN, and a mixed burst on trunk 3 (native VLAN 10).
            vec![
                (0, vec![frame(BCAST, A), frame(B, A)]),
                (0, vec![frame(C, A), frame(BCAST, A)]),
                (1, vec![frame(BCAST, C), frame(A, C)]),
                (2, vec![tagged(BCAST, d, Some(20)), tagged(A, d, Some(10))]),
                (0, vec![vec![0xff; 10], frame(d, A)]),
                (3, vec![frame(A, B), tagged(C, B, Some(20))]),
            ],
            // Only untagged frames of VLAN 10, on access port 0 and on trunk 3's native VLAN:
            // switched together without a word per frame.
            vec![
                (0, vec![frame(BCAST, A), frame(B, A), frame(C, A)]),
                (3, vec![frame(A, B), frame(BCAST, B)]),
                (0, vec![frame(d, A), frame(B, A)]),
            ],
            // A tagged burst first (a word per frame), then untagged ones join it.
            vec![
                (2, vec![tagged(A, d, Some(10)), tagged(BCAST, d, Some(20))]),
                (0, vec![frame(d, A), frame(BCAST, A)]),
                (1, vec![frame(d, C)]),
            ],
        ];
        for bursts in &runs {
            let (mut gathering, mut alone) = (vlan_switch(), vlan_switch());
            for s in [&mut gathering, &mut alone] {
                assert_eq!(s.exchange(3, frame(BCAST, B), 1).len(), 2);
                assert_eq!(s.exchange(1, frame(BCAST, C), 1).len(), 2);
            }
            gathering.w.set_gather(256);
            let mut outs = (vec![Vec::new(); 4], vec![Vec::new(); 4]);
            for (s, out) in [(&mut gathering, &mut outs.0), (&mut alone, &mut outs.1)] {
                for (port, frames) in bursts {
                    let mut rx = burst();
                    for f in frames {
                        let mut p = s.pool.get().unwrap();
                        p.fill(f);
                        rx.push(p);
                    }
                    s.w.process(*port, &mut rx, &mut s.tx, &mut s.pool, 2);
                }
                assert_eq!(s.w.held() > 0, s.w.gather > 1);
                s.w.flush(&mut s.tx, &mut s.pool, 2);
                for (o, f) in out.iter_mut().zip(drain_tx(&mut s.tx, &mut s.pool)) {
                    o.extend(f);
                }
                s.c.drain();
            }
            assert_eq!(outs.0, outs.1);
            let counts = |s: &Sw| {
                let v = s.w.vlan_counters();
                (v.rx[10].get(), v.rx[20].get(), s.w.stats().values())
            };
            assert_eq!(counts(&gathering), counts(&alone));
            for vid in [10, 20] {
                for m in [A, B, C, d] {
                    assert_eq!(gathering.c.lookup_in(vid, m), alone.c.lookup_in(vid, m));
                }
            }
        }
        // What the first run did, to be sure the comparison is not of two wrong answers: VLAN
        // 10's broadcast from A left tagged on trunk 2 and untagged on port 3 (its native VLAN),
        // never on port 1 (VLAN 20); d was learnt in VLAN 20 on trunk 2.
        let mut s = vlan_switch();
        assert_eq!(s.exchange(1, frame(BCAST, C), 1).len(), 2);
        let out = s.exchange(0, frame(BCAST, A), 2);
        assert_eq!(
            out,
            vec![(2, tagged(BCAST, A, Some(10))), (3, frame(BCAST, A))]
        );
        assert_eq!(s.exchange(2, tagged(BCAST, d, Some(20)), 3).len(), 2);
        s.c.drain();
        assert_eq!(s.c.lookup_in(20, d), Some(2));
        assert_eq!(s.c.lookup_in(10, d), None);
    }

    #[test]
    fn sflow_samples_say_the_vlan_and_where_a_frame_went() {
        let mut s = vlan_switch();
        let rate: crate::sflow::Rate = Arc::new(std::sync::atomic::AtomicU32::new(1));
        let (sampler, mut rx) = crate::sflow::sampler(0, 4, 4096, rate);
        s.w.set_sampler(sampler);
        // B learnt on trunk 3 in its native VLAN 10; then from access port 0 (VLAN 10): a
        // unicast to B, a broadcast (trunk 2 tagged and trunk 3), and a frame tagged for VLAN
        // 20, which port 0 does not carry.
        s.exchange(3, frame(BCAST, B), 1);
        let _ = std::iter::from_fn(|| rx.take()).count();
        s.exchange(0, frame(B, A), 2);
        s.exchange(0, frame(BCAST, A), 3);
        s.exchange(0, tagged(B, A, Some(20)), 4);
        let got: Vec<_> = std::iter::from_fn(|| rx.take())
            .map(|x| (x.port, x.went, x.vlans))
            .collect();
        assert_eq!(
            got,
            vec![
                (0, Went::Port(3), Some((10, 10))),
                (0, Went::Flooded(2), Some((10, 10))),
                (0, Went::Dropped, None),
            ]
        );
    }

    #[test]
    fn vlans_keep_their_traffic_apart_and_tag_it_per_port() {
        let mut s = vlan_switch();
        // A broadcast from A on access port 0 (VLAN 10) floods VLAN 10 only: tagged on trunk 2,
        // untagged on trunk 3 (its native VLAN); never to port 1 (VLAN 20).
        let out = s.exchange(0, frame(BCAST, A), 1);
        assert_eq!(
            out,
            vec![(2, tagged(BCAST, A, Some(10))), (3, frame(BCAST, A)),]
        );
        assert_eq!(s.c.lookup_in(10, A), Some(0));
        // The same MAC A in VLAN 20, on port 1: a second entry, the first stays.
        let out = s.exchange(1, frame(BCAST, A), 2);
        assert_eq!(
            out,
            vec![
                (2, tagged(BCAST, A, Some(20))),
                (3, tagged(BCAST, A, Some(20)))
            ]
        );
        assert_eq!(
            (s.c.lookup_in(10, A), s.c.lookup_in(20, A)),
            (Some(0), Some(1))
        );
        // Unicast to A: by VLAN. Tagged 20 on the trunk goes to port 1, popped; tagged 10 to
        // port 0, popped; untagged on port 3 (native 10) to port 0.
        assert_eq!(
            s.exchange(2, tagged(A, B, Some(20)), 3),
            vec![(1, frame(A, B))]
        );
        assert_eq!(
            s.exchange(2, tagged(A, C, Some(10)), 4),
            vec![(0, frame(A, C))]
        );
        assert_eq!(s.exchange(3, frame(A, C), 5), vec![(0, frame(A, C))]);
        assert_eq!(s.c.lookup_in(20, B), Some(2));
        // C is in VLAN 10 twice now: moved from port 2 to port 3.
        assert_eq!(s.c.lookup_in(10, C), Some(3));
        // Back to B (VLAN 20, on the trunk): pushed with tag 20.
        assert_eq!(
            s.exchange(1, frame(B, A), 6),
            vec![(2, tagged(B, A, Some(20)))]
        );
        // Dropped: a tag the port does not carry, untagged on a trunk without a native VLAN, a
        // spanning-tree BPDU's link-local group.
        assert!(s.exchange(0, tagged(A, B, Some(20)), 7).is_empty());
        assert!(s.exchange(2, frame(A, B), 8).is_empty());
        let bpdu = MacAddr::from_u64(0x0180_c200_0000);
        assert!(s.exchange(0, frame(bpdu, B), 9).is_empty());
        let st = s.w.stats();
        assert_eq!(
            (
                st.vlan_not_member.get(),
                st.vlan_untagged.get(),
                st.link_local.get()
            ),
            (1, 1, 1)
        );
        let v = s.w.vlan_counters();
        assert_eq!((v.rx[10].get(), v.rx[20].get()), (4, 3));
        assert_eq!((v.flooded[10].get(), v.flooded[20].get()), (1, 1));
    }

    #[test]
    fn a_reload_keeps_the_learned_entries_that_stay_valid() {
        use crate::controller::Static;
        use crate::vlan::PortVlans;
        let mut s = vlan_switch();
        s.exchange(0, frame(BCAST, A), 1);
        s.exchange(1, frame(BCAST, B), 2);
        s.exchange(2, tagged(BCAST, C, Some(20)), 3);
        s.exchange(3, frame(BCAST, plus(C, 1)), 4);
        s.c.set_statics(&[Static {
            mac: plus(A, 9),
            vlan: 20,
            port: 2,
        }])
        .unwrap();
        // Port 2 leaves VLAN 20; VLAN 30 appears on port 1 (VLAN 20 moves to port 3 only).
        let modes = vec![
            PortVlans::Access(10),
            PortVlans::Access(30),
            PortVlans::Trunk {
                allowed: vec![10],
                native: None,
            },
            PortVlans::Trunk {
                allowed: vec![20, 30],
                native: Some(10),
            },
        ];
        // B (VLAN 20 on port 1) and C (VLAN 20 on port 2) are no longer valid; A and C+1 stay.
        assert_eq!(s.c.set_vlans(4, Some(modes)).unwrap(), 2);
        assert_eq!(s.c.lookup_in(10, A), Some(0));
        assert_eq!(s.c.lookup_in(10, plus(C, 1)), Some(3));
        assert_eq!((s.c.lookup_in(20, B), s.c.lookup_in(20, C)), (None, None));
        assert_eq!(s.c.stats().flushed, 2);
        // Statics are set again by the reload: the old one goes, the new one comes.
        s.c.set_statics(&[Static {
            mac: plus(A, 9),
            vlan: 30,
            port: 3,
        }])
        .unwrap();
        assert_eq!(
            (s.c.lookup_in(20, plus(A, 9)), s.c.lookup_in(30, plus(A, 9))),
            (None, Some(3))
        );
        // The workers follow the new plan at their next burst: port 1 is in VLAN 30 now.
        let out = s.exchange(1, frame(plus(A, 9), B), 5);
        assert_eq!(out, vec![(3, tagged(plus(A, 9), B, Some(30)))]);
        assert_eq!(s.c.lookup_in(30, B), Some(1));
        // A VLAN count beyond the FIB key's room is refused and changes nothing: 20 000 ports
        // take 15 bits of the word, leaving one FID bit, room for one VLAN.
        let (fw, _) = CompactMap::with_value_bits(&Config::with_capacity(64), 16).unwrap();
        let (_, lrx) = learn_queue(1);
        let mut big = SwitchControl::new(fw, lrx, 1);
        let ports = 20_000;
        let two = (0..ports)
            .map(|i| PortVlans::Access(1 + i as u16 % 2))
            .collect();
        let e = big.set_vlans(ports, Some(two)).unwrap_err();
        assert!(e.contains("room for"), "{e}");
        assert!(big.vlan_modes().is_none());
    }

    #[test]
    fn statics_of_a_removed_vlan_leave_the_fib_and_no_new_vlan_inherits_them() {
        use crate::controller::Static;
        use crate::vlan::PortVlans;
        let mut s = vlan_switch();
        let m = plus(A, 0x55);
        s.c.set_statics(&[Static {
            mac: m,
            vlan: 20,
            port: 1,
        }])
        .unwrap();
        let before = s.c.fib_stats().len;
        // VLAN 20 goes; VLAN 40 comes on port 1.
        let modes = vec![
            PortVlans::Access(10),
            PortVlans::Access(40),
            PortVlans::Trunk {
                allowed: vec![10, 40],
                native: None,
            },
            PortVlans::Access(10),
        ];
        s.c.set_vlans(4, Some(modes)).unwrap();
        s.c.set_statics(&[]).unwrap();
        assert_eq!(s.c.fib_stats().len, before - 1, "the static left the FIB");
        assert_eq!((s.c.lookup_in(20, m), s.c.lookup_in(40, m)), (None, None));
        assert!(s.c.statics().is_empty());
        // A frame to it in VLAN 40 is flooded (unknown), not sent to the old static's port only.
        assert_eq!(s.exchange(2, tagged(m, B, Some(40)), 1).len(), 1);
        assert_eq!(s.w.stats().unknown_unicast.get(), 1);
        // A carried entry with a VLAN id out of range (a damaged file) is left out.
        assert_eq!(s.c.restore(&[(m, 5000, 1, 0)], 2), (0, 0, 0, 1));
    }

    #[test]
    fn port_security_stops_a_mac_flood_at_the_port_limit() {
        use crate::guard::{Damping, Storm};
        let mut s = Sw::new(3);
        s.c.set_vlans(3, None).unwrap();
        s.c.set_guards(
            vec![Storm::default(); 3],
            vec![Some(3), None, None],
            Damping::default(),
        );
        s.w.set_locks(s.c.port_locks());
        // Host B on port 1 is known; a flood of new sources on port 0.
        s.send(1, frame(BCAST, B), 1);
        let mut delivered = 0;
        // Sources far from A, B and C.
        let src = |i: u64| plus(A, 0x1000 + i);
        for i in 0..20 {
            delivered += s.send(0, frame(B, src(i)), 2 + i).len();
        }
        assert_eq!(delivered, 3, "only the first 3 sources got through");
        assert_eq!(s.c.learned_per_port()[0], 3);
        assert_eq!(s.w.stats().port_security.get(), 17);
        // The sources learned before the limit still talk; B still reaches them; other ports
        // learn as before.
        assert_eq!(s.send(0, frame(B, src(1)), 30), vec![1]);
        assert_eq!(s.send(1, frame(src(2), B), 31), vec![0]);
        assert_eq!(s.send(2, frame(B, C), 32), vec![1]);
        assert_eq!(s.c.lookup(C), Some(2));
        // They age out: the port takes new sources again.
        s.c.set_aging(10);
        assert_eq!(s.c.age(1_005), 5);
        assert_eq!(s.c.learned_per_port(), [0, 0, 0]);
        // (B aged out too: flooded.)
        assert_eq!(s.send(0, frame(B, src(7)), 1_006), vec![1, 2]);
        assert_eq!(s.c.lookup(src(7)), Some(0));
    }

    #[test]
    fn a_flapping_mac_is_pinned_and_reported() {
        use crate::guard::{Damping, Storm};
        let mut s = Sw::new(3);
        s.c.set_vlans(3, None).unwrap();
        let damping = Damping {
            moves: 5,
            window_ns: 1_000_000_000,
            hold_ns: 30_000_000_000,
        };
        s.c.set_guards(vec![Storm::default(); 3], vec![None; 3], damping);
        s.send(0, frame(BCAST, A), 1);
        // A moves between ports 0 and 1 every millisecond.
        for i in 1..=20u64 {
            s.send((i % 2) as u16, frame(BCAST, A), 1 + i * 1_000_000);
        }
        let st = s.c.stats();
        assert_eq!(st.moved, 5, "5 moves allowed within the window");
        assert_eq!(st.pinned, 1);
        // Every later move is held back: the frames on port 0 (on port 1, A is where the FIB
        // says, so no event).
        assert_eq!(st.move_damped, 8);
        // Pinned where it was after its 5th move (port 1), and reported once.
        assert_eq!(s.c.lookup(A), Some(1));
        let p = s.c.take_pinned();
        assert_eq!((p.len(), p[0].mac, p[0].port, p[0].other), (1, A, 1, 0));
        assert!(s.c.take_pinned().is_empty());
        assert_eq!(s.c.pinned(2_000_000_000).len(), 1);
        // A pinned MAC that keeps talking from the other port is reported at most once a
        // second, not per frame: the learn queue stays free for the others.
        let sent = s.w.stats().learn_sent.get();
        for i in 0..100u64 {
            s.send(0, frame(BCAST, A), 2_000_000_000 + i * 1_000_000);
        }
        assert!(s.w.stats().learn_sent.get() - sent <= 1);
        // After the hold, A may move again.
        s.send(0, frame(BCAST, A), 40_000_000_000);
        assert_eq!(s.c.lookup(A), Some(0));
        assert!(s.c.pinned(40_000_000_000).is_empty());
    }

    #[test]
    fn storm_control_cuts_floods_per_port_and_kind() {
        use crate::guard::{Damping, Storm};
        let mut s = Sw::new(3);
        s.c.set_vlans(3, None).unwrap();
        let limit = Storm {
            broadcast: 100,
            multicast: 0,
            unknown_unicast: 50,
        };
        s.c.set_guards(
            vec![limit, Storm::default(), Storm::default()],
            vec![None; 3],
            Damping::default(),
        );
        s.w.set_plan(s.c.port_plan());
        let mcast = MacAddr::from_u64(0x0100_5e00_0001);
        let unknown = plus(C, 1 << 20);
        let (mut b, mut m, mut u) = (0, 0, 0);
        // 200 frames of each kind in 100 ms: 10 + 10 broadcasts and 5 + 5 unknown unicasts pass
        // (a tenth of a second's burst plus the rate), every multicast.
        for i in 0..200u64 {
            let t = 1 + i * 500_000;
            b += !s.send(0, frame(BCAST, A), t).is_empty() as u32;
            m += !s.send(0, frame(mcast, A), t).is_empty() as u32;
            u += !s.send(0, frame(unknown, A), t).is_empty() as u32;
        }
        assert!((19..=21).contains(&b), "{b} broadcasts passed");
        assert_eq!(m, 200);
        assert!((9..=11).contains(&u), "{u} unknown unicasts passed");
        let st = s.w.stats();
        assert_eq!(st.storm_broadcast.get(), 200 - b as u64);
        assert_eq!(st.storm_unknown_unicast.get(), 200 - u as u64);
        // Another port has no limit.
        let passed = (0..200u64)
            .filter(|&i| !s.send(1, frame(BCAST, B), 1 + i).is_empty())
            .count();
        assert_eq!(passed, 200);
    }

    #[test]
    fn the_spanning_tree_states_gate_learning_and_forwarding() {
        use crate::stp::{Bpdu, State, Times, Vector};
        let mut s = Sw::new(3);
        s.c.set_vlans(3, None).unwrap();
        let (btx, brx) = std::sync::mpsc::sync_channel(8);
        s.w.set_bpdu_queue(btx);
        s.w.set_plan(s.c.port_plan());
        let set = |s: &mut Sw, st: [State; 3]| s.c.set_stp_states(Some(st.to_vec()));
        use State::{Discarding as D, Forwarding as F, Learning as L};
        set(&mut s, [F, F, D]);
        // A BPDU goes to the control side, whatever the port's state; nothing is forwarded.
        let bpdu = Bpdu::Config {
            rst: true,
            flags: 0,
            vector: Vector::default(),
            times: Times::secs(20, 2, 15),
        }
        .frame([2, 0, 0, 0, 0, 0x77]);
        assert!(s.send(2, bpdu.clone(), 1).is_empty());
        let got = brx.try_recv().unwrap();
        assert_eq!((got.port, &got.bytes[..got.len as usize]), (2, &bpdu[..]));
        // A discarding port: its frames are dropped unlearned, and nothing is sent to it.
        assert!(s.send(2, frame(BCAST, C), 2).is_empty());
        assert_eq!(s.c.lookup(C), None);
        assert_eq!(
            s.send(0, frame(BCAST, A), 3),
            vec![1],
            "flooded to port 1 only"
        );
        // Learning: learned, not forwarded.
        set(&mut s, [F, F, L]);
        assert!(s.send(2, frame(BCAST, C), 4).is_empty());
        assert_eq!(s.c.lookup(C), Some(2));
        // A known destination behind a port that does not forward: dropped.
        assert!(s.send(0, frame(C, A), 5).is_empty());
        assert_eq!(s.w.stats().stp_blocked.get(), 3);
        // Forwarding: as without a tree.
        set(&mut s, [F, F, F]);
        assert_eq!(s.send(0, frame(C, A), 6), vec![2]);
        assert_eq!(s.send(0, frame(BCAST, A), 7), vec![1, 2]);
        // Without a spanning tree, BPDUs are link-local frames: dropped, never flooded.
        s.c.set_stp_states(None);
        assert!(s.send(0, bpdu, 8).is_empty());
        assert!(brx.try_recv().is_err());
        assert_eq!(s.w.stats().link_local.get(), 1);
    }

    #[test]
    fn the_stage_sends_what_the_control_side_queues() {
        use fp_pipeline::stage::Outputs;
        let (fw, fr) = CompactMap::new(&Config::with_capacity(100)).unwrap();
        let (ltx, lrx) = learn_queue(8);
        let _c = SwitchControl::new(fw, lrx, 1);
        let mut st = SwitchStage::new(0, SwitchWorker::new(fr, 3, ltx, 1), None);
        let (tx, rx) = std::sync::mpsc::sync_channel(8);
        st.set_inject(rx);
        for port in [2u16, 0, 9] {
            let mut b = BpduFrame {
                port,
                len: 60,
                bytes: [0; 64],
            };
            b.bytes[0] = port as u8 + 1;
            tx.send(b).unwrap();
        }
        let mut out = Outputs::new(3);
        let mut pool = Pool::new(16);
        st.pass_done(false, 1, &mut out, &mut pool);
        assert_eq!(out.burst(2).len(), 1);
        assert_eq!(out.burst(0).len(), 1);
        assert_eq!(out.burst(2)[0].data()[0], 3);
        assert_eq!(out.burst(2)[0].len(), 60);
        assert!(out.burst(1).is_empty(), "port 9 does not exist: dropped");
    }

    #[test]
    fn moves_aging_and_statics() {
        let mut s = Sw::new(3);
        s.send(0, frame(BCAST, A), 1);
        assert_eq!(s.c.lookup(A), Some(0));
        // A moves to port 2.
        s.send(2, frame(BCAST, A), 2);
        assert_eq!(s.c.lookup(A), Some(2));
        assert_eq!(s.c.stats().moved, 1);
        // Static entry for C on port 1: learning C elsewhere does not change it.
        s.c.add_static(C, 1).unwrap();
        s.send(0, frame(BCAST, C), 3);
        assert_eq!(s.c.lookup(C), Some(1));
        assert_eq!(s.c.stats().static_kept, 1);
        // Aging: A is removed after 300 s without traffic; the static entry stays.
        assert_eq!(s.c.age(2 + 299 * 1_000_000_000), 0);
        assert_eq!(s.c.age(2 + 300 * 1_000_000_000), 1);
        assert_eq!(s.c.lookup(A), None);
        assert_eq!(s.c.lookup(C), Some(1));
    }

    #[test]
    fn refresh_keeps_a_talking_host_alive() {
        let mut s = Sw::new(2);
        let sec = 1_000_000_000u64;
        // A talks every 100 s for 1000 s: it must never age out (refresh every aging/4 = 75 s).
        for t in 0..=10 {
            s.send(0, frame(B, A), t * 100 * sec);
            s.c.age(t * 100 * sec);
            assert_eq!(s.c.lookup(A), Some(0), "aged out at {t}");
        }
        // Refresh events are rate-limited: far fewer than packets when talking fast.
        let sent_before = s.w.stats().learn_sent.get();
        for i in 0..100 {
            s.send(0, frame(B, A), 1000 * sec + i * 1000);
        }
        assert!(s.w.stats().learn_sent.get() - sent_before <= 1);
    }

    #[test]
    fn full_learn_queue_drops_events_not_frames() {
        let (fw, fr) = CompactMap::new(&Config::with_capacity(1000)).unwrap();
        let (ltx, _lrx) = learn_queue(2);
        let _ = fw;
        let mut w = SwitchWorker::new(fr, 2, ltx, 300 * 1_000_000_000);
        let mut pool = Pool::new(64);
        let mut tx = vec![burst(), burst()];
        let mut rx = burst();
        for i in 0..10u64 {
            let mut p = pool.get().unwrap();
            p.fill(&frame(BCAST, plus(A, i)));
            rx.push(p);
        }
        w.process(0, &mut rx, &mut tx, &mut pool, 1);
        assert_eq!(tx[1].len(), 10, "every frame forwarded");
        assert_eq!(w.stats().learn_sent.get(), 2);
        assert_eq!(w.stats().learn_dropped.get(), 8);
    }
}
