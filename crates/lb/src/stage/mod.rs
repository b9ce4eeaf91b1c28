//! The load balancer's per-worker data path (Maglev §3): parse → match VIP → connection table
//! (batched, prefetched) → Maglev selection on a miss → encapsulate toward the backend → emit.
//!
//! One [`LbStage`] per core, fed by 5-tuple steering (3-tuple for fragments), owns its connection
//! tables (IPv4 and IPv6, CuckooSwitch tables in the general layout, the worker being their single
//! writer and reader), its fragment table and its counters; it shares nothing writable with other
//! workers. Each burst runs against one [`Snapshot`]: a configuration or health change published
//! while a burst is in flight applies from the next burst on.
//!
//! Connection entries map the 5-tuple to (backend id, last-seen time in ms). A hit whose backend
//! is still a healthy member of the VIP is reused; a hit on a backend that went down or left the
//! VIP is re-selected (and the entry rewritten); a miss selects with Maglev and records the choice.
//! A full table is counted and the packet still forwarded by Maglev (§3.3). Entries idle longer
//! than the configured timeout are removed by a sweep paced by the clock (a pass over each table
//! per quarter of the timeout, at most 10 s), run in bursts and, when idle, by maintenance.
//!
//! The worker is a [`Stage`]: the engine's driver hands it bursts from its port (an AF_PACKET
//! socket of a fan-out group, an AF_XDP queue, or the software dispatcher's lane) and sends what
//! it emits back out of the same port (a one-armed balancer, as Maglev is deployed) or, offline,
//! to the output port ([`LbStage::set_output`]).
//!
//! SYN-flood guard. A SYN that misses makes an *embryonic* entry, which lives only
//! `balancer.syn_timeout_ms` until a later packet of its flow confirms it (a spoofed SYN never
//! gets one). When a table is under pressure (entries at [`PRESSURE`] of its slots), SYNs that
//! miss are balanced by the Maglev hash without an entry (their handshake's ACK, which hashes to
//! the same backend, records the connection), and other new entries may take the place of an
//! embryonic entry in their two buckets, never of an established one, with the cuckoo search
//! bounded to [`PRESSURE_SEARCH_NODES`] buckets: an insert into a full table costs about what one
//! into a table with room costs. Above `balancer.new_conn_rate` new entries per second per worker
//! SYNs are balanced without an entry as well. The mode and every decision are counted.
//!
//! Path MTU. A packet that would exceed the VIP's path MTU once encapsulated is not sent as is:
//! an IPv4 datagram without DF is cut into fragments that fit (each encapsulated whole), anything
//! else is dropped and answered — at most `balancer.icmp_rate` times per second per worker — with
//! an ICMP "fragmentation needed" / "packet too big" from the VIP carrying the MTU minus the
//! encapsulation, so the client's path MTU discovery adapts ([`fp_wire::pmtu`]).
//!
//! QUIC. On a VIP with `quic = true`, a short-header packet whose destination connection ID
//! carries a configured server id goes to that backend in step 1, without a connection lookup
//! ([`crate::snapshot::QuicRoute`]): a client whose address or port changed keeps its server.
//!
//! ICMP errors addressed to a VIP (e.g. "fragmentation needed" about a backend's direct-return
//! packets) are forwarded along the connection they quote, so path MTU discovery works through the
//! balancer.
//!
//! The code follows a burst's steps ([`LbStage::process`]), a file for each:
//!
//! * `mod.rs`: the worker ([`LbStage`]), its tables and per-burst scratch space, the burst loop,
//!   the driver's `maintain` and the [`Stage`] implementation;
//! * `classify.rs`: step 1, per packet: parse, match a VIP, QUIC routing, fragments (held,
//!   forwarded, redirected to their owner in a cluster, unwrapped when redirected here), and the
//!   connection key queued for step 2;
//! * `lookup.rs`: step 2, the burst's connection lookups at once, batched and prefetched, through
//!   the flow cache;
//! * `decide.rs`: step 3, per packet: reuse the connection's backend or select one with Maglev,
//!   record it, trace, emit, release the fragments that waited for the decision;
//! * `conn.rs`: connection entries (backend, last-seen time, embryonic mark) and the table writes
//!   that keep the flow cache in step;
//! * `emit.rs`: the `Emitter`, which encapsulates and queues packets, answers or fragments those
//!   too big for the path MTU, and redirects fragments;
//! * `guard.rs`: the SYN-flood guard ([`GuardMode`], [`PRESSURE`]);
//! * `sweep.rs`: step 4, housekeeping: the expiry sweeps paced by the clock, and the gauges;
//! * `carry.rs`: the connection entries out of and into the tables across a restart.

use crate::export::Tap;
use crate::frag::{FragTable, Piece};
use crate::snapshot::{Cached, Published, Snapshot};
use crate::stats::{Outcome, WorkerStats};
pub use carry::{
    checkpoint, export_workers, export_workers_since, import_workers, Checkpoint, ConnReaders,
    Exported, ImportReport, ImportSlot, Imported,
};
use classify::classify;
use decide::{decide, Decide};
use emit::{icmp_limit, Emitter};
use fp_cuckoo::{Config as TableConfig, GeneralMap, Writer};
use fp_flowcache::KeyedCache;
use fp_pipeline::packet::{Packet, Pool, MAX_BURST};
use fp_pipeline::stage::{Outputs, Stage};
use fp_pipeline::trace::TokenBucket;
use fp_wire::FlowKey;
use guard::Guard;
pub use guard::{GuardMode, PRESSURE, PRESSURE_SEARCH_NODES};
use lookup::lookup;
use std::sync::Arc;

mod carry;
mod classify;
mod conn;
mod decide;
mod emit;
mod guard;
mod lookup;
mod sweep;

type Conn4 = Writer<GeneralMap<[u8; 13], u64>>;
type Conn6 = Writer<GeneralMap<[u8; 37], u64>>;
type Cache4 = KeyedCache<[u8; 13], u64>;
type Cache6 = KeyedCache<[u8; 37], u64>;

/// What step 1 learnt about a packet of the current burst that waits for its connection lookup
/// (the packet itself waits beside it, in `Scratch::pkts`). Kept small: it is written and read
/// once per packet, and read in place — moving it through the stack cost a store-forwarding stall
/// per packet.
#[derive(Clone, Copy)]
struct Pending {
    key: FlowKey,
    vip: u32,
    /// Index into the burst's IPv4 or IPv6 key array.
    slot: u16,
    /// Where the IP packet lies in the frame: offset and end.
    l3: (u16, u16),
    /// For first fragments: the IP identification and the fragment's place in the datagram.
    frag: Option<(u32, Piece)>,
}

/// What a traced packet went through (Maglev §4.4's packet tracer).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceRecord {
    /// Worker id.
    pub worker: usize,
    /// Config generation.
    pub generation: u64,
    /// Flow.
    pub flow: FlowKey,
    /// VIP name.
    pub vip: String,
    /// Connection-table outcome: "hit", "miss", "reselect", "fragment".
    pub conn: &'static str,
    /// Maglev slot, for a new selection.
    pub maglev_slot: Option<u32>,
    /// Backend address.
    pub backend: Option<std::net::IpAddr>,
    /// Encapsulation.
    pub encap: String,
}

/// Tells the worker which packets to trace and takes the records.
pub trait Tracer: Send {
    /// Whether to trace this packet, received at `now_ns` (called for every packet matched to a
    /// VIP; keep it cheap).
    fn wants(&mut self, frame: &[u8], flow: &FlowKey, now_ns: u64) -> bool;
    /// Take a record (rate limiting is the tracer's business).
    fn record(&mut self, r: TraceRecord);
}

/// Per-burst scratch space, allocated once (no allocation per packet or per burst).
struct Scratch {
    /// The packets waiting for their connection lookup, and what step 1 learnt about each.
    pkts: Vec<Packet>,
    pending: Vec<Pending>,
    keys4: Vec<[u8; 13]>,
    keys6: Vec<[u8; 37]>,
    vals4: Vec<Option<u64>>,
    vals6: Vec<Option<u64>>,
    /// Flow hashes of the burst's SYNs (by index in `pending`, bit set in `syns`), computed in
    /// step 1 to prefetch their Maglev entries.
    hashes: [u64; MAX_BURST],
    syns: u64,
    /// Flow-cache hashes of `keys4` / `keys6`, and the cache misses being looked up in the tables.
    hash4: [u64; MAX_BURST],
    hash6: [u64; MAX_BURST],
    miss4: Vec<[u8; 13]>,
    miss6: Vec<[u8; 37]>,
    miss_at: Vec<u8>,
    miss_vals: [Option<u64>; MAX_BURST],
    /// Fragments released by a first fragment's decision.
    release: Vec<Packet>,
    /// Fragments whose entry expired.
    expired: Vec<Packet>,
}

impl Scratch {
    fn new() -> Scratch {
        Scratch {
            pkts: Vec::with_capacity(MAX_BURST),
            pending: Vec::with_capacity(MAX_BURST),
            keys4: Vec::with_capacity(MAX_BURST),
            keys6: Vec::with_capacity(MAX_BURST),
            vals4: vec![None; MAX_BURST],
            vals6: vec![None; MAX_BURST],
            hashes: [0; MAX_BURST],
            syns: 0,
            hash4: [0; MAX_BURST],
            hash6: [0; MAX_BURST],
            miss4: Vec::with_capacity(MAX_BURST),
            miss6: Vec::with_capacity(MAX_BURST),
            miss_at: Vec::with_capacity(MAX_BURST),
            miss_vals: [None; MAX_BURST],
            release: Vec::with_capacity(16),
            expired: Vec::with_capacity(16),
        }
    }
}

/// The worker's tables: connections (IPv4, IPv6) and held fragments.
struct Tables {
    conn4: Conn4,
    conn6: Conn6,
    frags: FragTable,
    /// The BLP flow caches in front of the connection tables (`balancer.conn_cache_entries`; `None`
    /// when off), keyed by [`cache_hash`](conn::cache_hash) of the connection key with
    /// `cache_seed`. Every write and removal of a connection entry goes through them too (see
    /// [`record_cached`](conn::record_cached)).
    cache4: Option<Cache4>,
    cache6: Option<Cache6>,
    cache_seed: u64,
    /// The caches while switched off ([`LbStage::set_flow_cache`]).
    parked: Option<(Cache4, Cache6)>,
}

/// One load-balancer worker: a [`Stage`] of the engine.
pub struct LbStage {
    id: usize,
    snap: Cached<Snapshot>,
    tables: Tables,
    scratch: Scratch,
    stats: Arc<WorkerStats>,
    seed: u64,
    idle_ms: u32,
    ident: u16,
    sweep4: usize,
    sweep6: usize,
    /// Burst time (ms) of the last expiry sweep step.
    swept_ms: u32,
    /// Connection-table slots (IPv4, IPv6), fixed at construction.
    slots: (usize, usize),
    guard: Guard,
    icmp: Option<TokenBucket>,
    tracer: Option<Box<dyn Tracer>>,
    /// Where forwarded packets leave, as a [`Stage`]: the port they came in on (`None`, a
    /// one-armed balancer) or a fixed port.
    output: Option<usize>,
    /// Carried entries to put into the tables on the worker's own thread before its first
    /// receive ([`LbStage::defer_import`]).
    deferred: Option<carry::Deferred>,
    /// Flow export: the queue to the exporter thread and the packet sampler
    /// ([`LbStage::set_export`]).
    export: Option<Tap>,
}

/// Why a worker could not be built.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// A connection table could not be allocated.
    #[error("connection table: {0}")]
    Table(#[from] fp_cuckoo::Error),
    /// A flow cache could not be allocated.
    #[error("flow cache: {0}")]
    Cache(#[from] fp_flowcache::Error),
}

impl LbStage {
    /// A worker following `snapshots`. Table sizes come from the snapshot's configuration; the
    /// connection tables use `table_seed` (keep it secret: it decides bucket placement).
    pub fn new(
        id: usize,
        snapshots: Arc<Published<Snapshot>>,
        table_seed: u64,
    ) -> Result<LbStage, WorkerError> {
        let snap = Cached::new(snapshots);
        let b = &snap.get().config.balancer;
        let seed = b.seed;
        let (conn4, _) = GeneralMap::<[u8; 13], u64>::new(
            &TableConfig::with_capacity(b.conn_capacity).seed(table_seed),
        )?;
        let (conn6, _) = GeneralMap::<[u8; 37], u64>::new(
            &TableConfig::with_capacity(b.conn_capacity_v6).seed(table_seed ^ 1),
        )?;
        let frags = FragTable::new(
            b.frag_capacity,
            b.frag_timeout_ms as u64 * 1_000_000,
            table_seed ^ 2,
        );
        let stats = Arc::new(WorkerStats::new(b.max_vips, b.max_backends));
        let idle_ms = b.conn_idle_timeout_ms;
        let slots = (conn4.stats().slots, conn6.stats().slots);
        let guard = Guard::new(b, slots);
        let icmp = icmp_limit(b.icmp_rate);
        let entries = b.conn_cache_entries;
        let (cache4, cache6) = if entries == 0 {
            (None, None)
        } else {
            (
                Some(KeyedCache::new(entries, table_seed ^ 4)?),
                Some(KeyedCache::new((entries / 4).max(1), table_seed ^ 5)?),
            )
        };
        stats.set_occupancy((0, 0), slots);
        stats.set_state(0, snap.get().generation);
        Ok(LbStage {
            id,
            snap,
            tables: Tables {
                conn4,
                conn6,
                frags,
                cache4,
                cache6,
                cache_seed: table_seed ^ 3,
                parked: None,
            },
            scratch: Scratch::new(),
            stats,
            seed,
            idle_ms,
            ident: 0,
            sweep4: 0,
            sweep6: 0,
            swept_ms: 0,
            slots,
            guard,
            icmp,
            tracer: None,
            output: None,
            deferred: None,
            export: None,
        })
    }

    /// The worker's counters (share the `Arc` with a metrics reader).
    pub fn stats(&self) -> &Arc<WorkerStats> {
        &self.stats
    }

    /// Install a packet tracer.
    pub fn set_tracer(&mut self, t: Box<dyn Tracer>) {
        self.tracer = Some(t);
    }

    /// Hand flow events (connections created and ended, sampled packets) to the exporter through
    /// `tap`, as `[ipfix]` of the snapshot in force asks (nothing without it).
    pub fn set_export(&mut self, mut tap: Tap) {
        tap.configure(self.snap.get().config.ipfix.as_ref());
        self.export = Some(tap);
    }

    /// As a [`Stage`], send forwarded packets to port `port` instead of back out of the port they
    /// came in on (an offline run: capture in on port 0, encapsulated packets out on port 1).
    pub fn set_output(&mut self, port: usize) {
        self.output = Some(port);
    }

    /// Tracked connections (IPv4, IPv6).
    pub fn connections(&self) -> (usize, usize) {
        (self.tables.conn4.len(), self.tables.conn6.len())
    }

    /// Connection-table sizes in slots (IPv4, IPv6).
    pub fn connection_slots(&self) -> (usize, usize) {
        self.slots
    }

    /// Switch the flow cache off or back on (for measurements: the same worker and tables with and
    /// without it). A cache switched back on starts empty. No effect without a cache
    /// (`balancer.conn_cache_entries = 0`).
    pub fn set_flow_cache(&mut self, on: bool) {
        let t = &mut self.tables;
        match (on, t.cache4.is_some()) {
            (false, true) => {
                if let (Some(a), Some(b)) = (t.cache4.take(), t.cache6.take()) {
                    t.parked = Some((a, b));
                }
            }
            (true, false) => {
                if let Some((mut a, mut b)) = t.parked.take() {
                    a.clear();
                    b.clear();
                    t.cache4 = Some(a);
                    t.cache6 = Some(b);
                }
            }
            _ => {}
        }
    }

    /// Entries and bytes of the flow caches (IPv4 + IPv6), if the worker has them.
    pub fn flow_cache(&self) -> Option<(usize, usize)> {
        let t = &self.tables;
        match (&t.cache4, &t.cache6, &t.parked) {
            (Some(a), Some(b), _) | (_, _, Some((a, b))) => {
                Some((a.capacity() + b.capacity(), a.bytes() + b.bytes()))
            }
            _ => None,
        }
    }

    /// Fragments currently held waiting for their first fragment.
    pub fn held_fragments(&self) -> usize {
        self.tables.frags.held()
    }

    /// The generation of the snapshot the worker forwards with.
    pub fn generation(&self) -> u64 {
        self.snap.get().generation
    }

    /// Process one burst: every packet of `rx` ends up in `tx` (forwarded) or back in `pool`
    /// (dropped, counted), or held in the fragment table. `now_ns` is the burst's time.
    ///
    /// Four steps over the burst: (1) parse, match VIPs, route fragments and collect connection
    /// keys; (2) look all keys up at once, batched and prefetched; (3) decide, record and emit
    /// each packet; (4) housekeeping paced by the clock.
    pub fn process(
        &mut self,
        rx: &mut Vec<Packet>,
        tx: &mut Vec<Packet>,
        pool: &mut Pool,
        now_ns: u64,
    ) {
        // The driver runs a deferred import before the first receive (`admit`); a caller that
        // feeds bursts directly gets it here.
        if self.deferred.is_some() {
            self.run_deferred_import(now_ns);
        }
        self.follow_snapshot();
        let Self {
            id,
            snap,
            tables,
            scratch,
            stats,
            seed,
            ident,
            tracer,
            guard,
            icmp,
            export,
            ..
        } = self;
        let snap: &Snapshot = snap.get();
        let mut out = Emitter {
            snap,
            stats,
            tx,
            pool,
            ident,
            seed: *seed,
            icmp,
            now_ns,
            export: export.as_mut(),
        };
        out.stats.burst(rx.len());
        scratch.pkts.clear();
        scratch.pending.clear();
        scratch.keys4.clear();
        scratch.keys6.clear();
        scratch.syns = 0;
        let mut rx_bytes = 0u64;
        let rx_packets = rx.len() as u64;
        for p in rx.drain(..) {
            rx_bytes += p.len() as u64;
            classify(p, &mut out, tables, scratch, now_ns);
        }
        stats.count(Outcome::Rx, rx_packets);
        stats.count(Outcome::RxBytes, rx_bytes);
        lookup(tables, scratch, stats);
        let mut d = Decide {
            worker: *id,
            now_ns,
            now_ms: (now_ns / 1_000_000) as u32,
            tracer: tracer.as_deref_mut(),
            guard,
        };
        // Taken out (and put back, with their capacity) so `decide` can borrow the rest of
        // `scratch`.
        let mut pkts = std::mem::take(&mut scratch.pkts);
        let pending = std::mem::take(&mut scratch.pending);
        for (i, pkt) in pkts.drain(..).enumerate() {
            decide(&mut d, i, pkt, &pending[i], &mut out, tables, scratch);
        }
        scratch.pkts = pkts;
        scratch.pending = pending;
        self.housekeeping(now_ns, pool);
        if let Some(t) = &mut self.export {
            t.publish();
        }
    }

    /// The SYN-flood guard's current mode, as last published.
    pub fn guard_mode(&self) -> GuardMode {
        GuardMode::from_gauge(self.stats.guard_mode())
    }

    /// Take the published snapshot if it changed (one atomic load when it did not). A reload may
    /// change the timeouts and the rate limits (table sizes stay until a restart).
    #[inline]
    fn follow_snapshot(&mut self) {
        if self.snap.refresh() {
            self.idle_ms = self.snap.get().config.balancer.conn_idle_timeout_ms;
            self.guard.configure(&self.snap.get().config.balancer);
            self.icmp = icmp_limit(self.snap.get().config.balancer.icmp_rate);
            if let Some(t) = &mut self.export {
                t.configure(self.snap.get().config.ipfix.as_ref());
            }
            self.stats
                .set_state(self.tables.frags.held(), self.snap.get().generation);
        }
    }

    /// Advance the connection-expiry sweep by `buckets` buckets of each table and publish the
    /// worker's gauges. The driver calls this on its clock, so entries expire even without
    /// traffic.
    pub fn maintain(&mut self, now_ns: u64, pool: &mut Pool) {
        // An idle worker takes a new snapshot here too: it reports the generation in force, and
        // its first packet after a quiet time meets the new tables without a stale burst.
        self.follow_snapshot();
        let now_ms = (now_ns / 1_000_000) as u32;
        self.expire_buckets(now_ns, 4096);
        self.tables
            .frags
            .sweep(now_ns, 1024, &mut self.scratch.expired);
        self.stats
            .count(Outcome::FragExpired, self.scratch.expired.len() as u64);
        pool.put_all(&mut self.scratch.expired);
        self.publish_gauges(now_ms);
        self.stats
            .set_state(self.tables.frags.held(), self.snap.get().generation);
        if let Some(t) = &mut self.export {
            t.publish();
        }
    }
}

impl Stage for LbStage {
    #[inline]
    fn process(
        &mut self,
        port: usize,
        rx: &mut Vec<Packet>,
        out: &mut Outputs,
        pool: &mut Pool,
        now_ns: u64,
    ) {
        let to = self.output.unwrap_or(port);
        LbStage::process(self, rx, out.to(to), pool, now_ns);
    }

    fn maintain(&mut self, now_ns: u64, _out: &mut Outputs, pool: &mut Pool) {
        // The driver's first call comes before the worker's first receive.
        if self.deferred.is_some() {
            self.run_deferred_import(now_ns);
        }
        LbStage::maintain(self, now_ns, pool);
    }
}
