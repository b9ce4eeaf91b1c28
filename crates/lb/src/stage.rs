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

use crate::config::EncapKind;
use crate::frag::{Decision, FragAction, FragTable, Piece};
use crate::snapshot::{Cached, Published, QuicMiss, Snapshot};
use crate::stats::{Outcome, WorkerStats};
use fp_cuckoo::{Config as TableConfig, GeneralMap, InsertError, Layout, Placed, Writer};
use fp_flowcache::KeyedCache;
use fp_pipeline::packet::{Packet, Pool, MAX_BURST};
use fp_pipeline::stage::{Outputs, Stage};
use fp_pipeline::trace::TokenBucket;
use fp_wire::ip::IpProtocol;
use fp_wire::tcp::TcpFlags;
use fp_wire::{FlowKey, FragmentKey, L4Kind, PacketSummary};
use std::sync::Arc;

type Conn4 = Writer<GeneralMap<[u8; 13], u64>>;
type Conn6 = Writer<GeneralMap<[u8; 37], u64>>;
type Cache4 = KeyedCache<[u8; 13], u64>;
type Cache6 = KeyedCache<[u8; 37], u64>;

/// The expiry sweep runs on the clock, not per burst: at most once per this many ms of burst time
/// (a burst-paced sweep reads a few cold buckets per burst, a cache miss per few packets, at any
/// packet rate; the sweep only needs to keep pace with time).
const SWEEP_EVERY_MS: u32 = 1;
/// One pass of the connection-expiry sweep over a table takes at most a quarter of the idle
/// timeout, and at most [`SWEEP_PASS_MAX_MS`]: an entry outlives its timeout by at most that much.
const SWEEP_PASS_MAX_MS: u32 = 10_000;
/// Milliseconds of sweep work caught up in one burst after a pause (the driver's periodic
/// `maintain` covers idle periods).
const SWEEP_CATCH_UP_MS: u32 = 16;
/// Fragment-table entries the expiry sweep visits per ms of burst time.
const SWEEP_FRAGS_PER_MS: usize = 16;
/// A connection's last-seen time is rewritten at most this often (ms).
const TOUCH_MS: u32 = 1000;

/// Marks an entry made by a SYN and not yet confirmed by a later packet of its flow (backend ids
/// stay below 2^24, see the configuration's `max_backends`).
const EMBRYONIC: u64 = 1 << 31;
/// A connection table is under pressure from this share of its slots on.
pub const PRESSURE: f64 = 0.9;
/// Under pressure, an insert's cuckoo path search visits at most this many buckets: the key's
/// two and their eight alternates (one level of moves, each a cache line).
pub const PRESSURE_SEARCH_NODES: usize = 10;
/// New entries are counted against `balancer.new_conn_rate` over windows of this many ms.
const RATE_WINDOW_MS: u32 = 100;

fn entry(backend: u32, now_ms: u32) -> u64 {
    backend as u64 | (now_ms as u64) << 32
}
fn entry_backend(v: u64) -> u32 {
    (v & (EMBRYONIC - 1)) as u32
}
fn is_embryonic(v: u64) -> bool {
    v & EMBRYONIC != 0
}
fn entry_seen(v: u64) -> u32 {
    (v >> 32) as u32
}

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

/// What the SYN-flood guard is doing (the `flowplane_syn_guard_mode` gauge).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum GuardMode {
    /// SYNs that miss are recorded as embryonic entries.
    Normal = 0,
    /// The worker recorded `new_conn_rate` new entries in the current window: SYNs that miss are
    /// balanced without an entry.
    RateLimit = 1,
    /// A connection table is under pressure: SYNs that miss are balanced without an entry and
    /// other new entries may replace embryonic ones.
    Pressure = 2,
}

impl GuardMode {
    /// From the gauge's value.
    pub fn from_gauge(v: u64) -> GuardMode {
        match v {
            1 => GuardMode::RateLimit,
            2 => GuardMode::Pressure,
            _ => GuardMode::Normal,
        }
    }

    /// Name on the status page.
    pub fn name(self) -> &'static str {
        match self {
            GuardMode::Normal => "normal",
            GuardMode::RateLimit => "rate limit",
            GuardMode::Pressure => "table pressure",
        }
    }
}

/// The SYN-flood guard's state in one worker.
struct Guard {
    /// New entries per rate window before SYNs bypass the table (0: no limit).
    per_window: u32,
    /// Start of the current rate window, and new entries recorded in it.
    window_ms: u32,
    recorded: u32,
    /// Entries (IPv4, IPv6) from which a table is under pressure.
    pressure: (usize, usize),
    /// Lifetime of embryonic entries.
    syn_ms: u32,
}

impl Guard {
    fn new(b: &crate::config::BalancerSpec, slots: (usize, usize)) -> Guard {
        let mut g = Guard {
            per_window: 0,
            window_ms: 0,
            recorded: 0,
            pressure: (
                (slots.0 as f64 * PRESSURE) as usize,
                (slots.1 as f64 * PRESSURE) as usize,
            ),
            syn_ms: 0,
        };
        g.configure(b);
        g
    }

    /// Take the reloadable settings.
    fn configure(&mut self, b: &crate::config::BalancerSpec) {
        self.syn_ms = b.syn_timeout_ms;
        self.per_window = if b.new_conn_rate == 0 {
            0
        } else {
            (b.new_conn_rate * RATE_WINDOW_MS as u64 / 1000).clamp(1, u32::MAX as u64) as u32
        };
    }

    /// Whether the current window's allowance of new entries is used up.
    #[inline]
    fn over_rate(&mut self, now_ms: u32) -> bool {
        if self.per_window == 0 {
            return false;
        }
        if now_ms.wrapping_sub(self.window_ms) >= RATE_WINDOW_MS {
            self.window_ms = now_ms;
            self.recorded = 0;
        }
        self.recorded >= self.per_window
    }
}

/// The worker's ICMP "too big" rate limit: `balancer.icmp_rate` per second with bursts of up to
/// [`ICMP_BURST`] (the shape of the kernel's own ICMP limits); `None` when the rate is 0.
fn icmp_limit(rate: u32) -> Option<TokenBucket> {
    (rate > 0).then(|| TokenBucket::new(rate as f64, rate.min(ICMP_BURST)))
}

/// Most ICMP errors a worker sends back to back.
const ICMP_BURST: u32 = 50;

/// Most fragments one datagram is cut into for the path MTU (a 2 KiB frame at the smallest MTU
/// needs 5).
const MAX_PIECES: usize = 8;

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
    /// when off), keyed by [`cache_hash`] of the connection key with `cache_seed`. Every write and
    /// removal of a connection entry goes through them too (see [`record_cached`]).
    cache4: Option<Cache4>,
    cache6: Option<Cache6>,
    cache_seed: u64,
    /// The caches while switched off ([`LbStage::set_flow_cache`]).
    parked: Option<(Cache4, Cache6)>,
}

/// The flow cache's hash of a connection key.
#[inline(always)]
fn cache_hash(seed: u64, key: &[u8]) -> u64 {
    fp_hash::hash_bytes(seed, key)
}

/// Step 2 for one address family: connection lookups for the burst's keys, through the flow
/// cache when there is one (hits answered from it, misses looked up in the table in one batch and
/// the entries found cached).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn lookup_family<L, const N: usize>(
    table: &Writer<L>,
    cache: &mut Option<KeyedCache<[u8; N], u64>>,
    seed: u64,
    keys: &[[u8; N]],
    vals: &mut [Option<u64>],
    hashes: &mut [u64; MAX_BURST],
    miss: &mut Vec<[u8; N]>,
    miss_at: &mut Vec<u8>,
    miss_vals: &mut [Option<u64>; MAX_BURST],
) -> (u64, u64)
where
    L: Layout<Key = [u8; N], Value = u64>,
{
    let n = keys.len();
    let Some(c) = cache else {
        table.get_batch(keys, &mut vals[..n]);
        return (0, 0);
    };
    miss.clear();
    miss_at.clear();
    for (h, k) in hashes.iter_mut().zip(keys) {
        *h = cache_hash(seed, k);
    }
    c.get_batch(&hashes[..n], keys, &mut vals[..n]);
    for (i, k) in keys.iter().enumerate() {
        if vals[i].is_none() {
            miss.push(*k);
            miss_at.push(i as u8);
        }
    }
    let m = miss.len();
    if m > 0 {
        table.get_batch(miss, &mut miss_vals[..m]);
        for (j, &i) in miss_at.iter().enumerate() {
            let i = i as usize;
            vals[i] = miss_vals[j];
            if let Some(v) = miss_vals[j] {
                c.put_absent(hashes[i], keys[i], v);
            }
        }
    }
    ((n - m) as u64, m as u64)
}

/// Rewrite an entry's value in the table and the cache.
#[inline(always)]
fn update_cached<L, const N: usize>(
    table: &mut Writer<L>,
    cache: &mut Option<KeyedCache<[u8; N], u64>>,
    key: [u8; N],
    hash: u64,
    e: u64,
) -> Result<Option<u64>, InsertError>
where
    L: Layout<Key = [u8; N], Value = u64>,
{
    let r = table.update(key, e);
    if let Some(c) = cache {
        match r {
            Ok(Some(_)) => c.put(hash, key, e),
            _ => drop(c.remove(hash, &key)),
        }
    }
    r
}

/// [`record`] an entry in the table and keep the cache in step: the entry written is cached, an
/// embryonic entry evicted for it is forgotten.
#[inline(always)]
fn record_cached<L, const N: usize>(
    table: &mut Writer<L>,
    cache: &mut Option<KeyedCache<[u8; N], u64>>,
    seed: u64,
    key: [u8; N],
    hash: u64,
    e: u64,
    under_pressure: bool,
) -> Result<Placed<(), u64>, InsertError>
where
    L: Layout<Key = [u8; N], Value = u64>,
{
    let r = record(table, key, e, under_pressure);
    if let Some(c) = cache {
        match &r {
            Ok(Placed::Evicted(k, _)) => {
                c.remove(cache_hash(seed, k), k);
                c.put(hash, key, e);
            }
            Ok(_) => c.put(hash, key, e),
            Err(_) => drop(c.remove(hash, &key)),
        }
    }
    r.map(|p| match p {
        Placed::New => Placed::New,
        Placed::Updated(old) => Placed::Updated(old),
        Placed::Evicted(_, old) => Placed::Evicted((), old),
    })
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
    }

    /// Step 4: the expiry sweeps, paced by the clock, and the occupancy gauges.
    #[inline]
    fn housekeeping(&mut self, now_ns: u64, pool: &mut Pool) {
        let now_ms = (now_ns / 1_000_000) as u32;
        let due = now_ms.wrapping_sub(self.swept_ms);
        if due >= SWEEP_EVERY_MS {
            self.swept_ms = now_ms;
            let due = due.min(SWEEP_CATCH_UP_MS) as usize;
            self.tables
                .frags
                .sweep(now_ns, SWEEP_FRAGS_PER_MS * due, &mut self.scratch.expired);
            self.expire(now_ms, due);
        }
        if !self.scratch.expired.is_empty() {
            self.stats
                .count(Outcome::FragExpired, self.scratch.expired.len() as u64);
            pool.put_all(&mut self.scratch.expired);
        }
        self.publish_gauges(now_ms);
    }

    /// Occupancy and the guard's mode, for the metrics reader.
    #[inline]
    fn publish_gauges(&mut self, now_ms: u32) {
        let conns = self.connections();
        self.stats.set_occupancy(conns, self.slots);
        let g = &mut self.guard;
        let mode = if conns.0 >= g.pressure.0 || conns.1 >= g.pressure.1 {
            GuardMode::Pressure
        } else if g.over_rate(now_ms) {
            GuardMode::RateLimit
        } else {
            GuardMode::Normal
        };
        self.stats.set_guard_mode(mode as u64);
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
        self.expire_buckets(now_ms, 4096);
        self.tables
            .frags
            .sweep(now_ns, 1024, &mut self.scratch.expired);
        self.stats
            .count(Outcome::FragExpired, self.scratch.expired.len() as u64);
        pool.put_all(&mut self.scratch.expired);
        self.publish_gauges(now_ms);
        self.stats
            .set_state(self.tables.frags.held(), self.snap.get().generation);
    }

    /// `ms` milliseconds' worth of the connection-expiry sweep: enough buckets of each table that
    /// a pass over it takes a quarter of the idle timeout or the embryonic timeout, whichever is
    /// shorter (at most [`SWEEP_PASS_MAX_MS`]).
    fn expire(&mut self, now_ms: u32, ms: usize) {
        let pass_ms = (self.idle_ms / 4)
            .min(self.guard.syn_ms)
            .clamp(1, SWEEP_PASS_MAX_MS) as usize;
        let buckets =
            (self.tables.conn4.buckets().max(self.tables.conn6.buckets()) * ms).div_ceil(pass_ms);
        self.expire_buckets(now_ms, buckets);
    }

    /// Visit `buckets` buckets of each connection table, removing idle entries (embryonic ones
    /// after the shorter embryonic timeout).
    fn expire_buckets(&mut self, now_ms: u32, buckets: usize) {
        let (idle, syn) = (self.idle_ms, self.guard.syn_ms);
        // (established, embryonic) entries removed.
        let mut n = (0u64, 0u64);
        let mut keep = |v: u64| {
            let embryonic = is_embryonic(v);
            let live = now_ms.wrapping_sub(entry_seen(v)) < if embryonic { syn } else { idle };
            if !live {
                if embryonic {
                    n.1 += 1;
                } else {
                    n.0 += 1;
                }
            }
            live
        };
        let t = &mut self.tables;
        let seed = t.cache_seed;
        let (c4, c6) = (&mut t.cache4, &mut t.cache6);
        // An expired entry leaves the cache with the table.
        self.sweep4 = t.conn4.retain_range(self.sweep4, buckets, |k, v| {
            let live = keep(*v);
            if let (false, Some(c)) = (live, c4.as_mut()) {
                c.remove(cache_hash(seed, k), k);
            }
            live
        });
        self.sweep6 = t.conn6.retain_range(self.sweep6, buckets, |k, v| {
            let live = keep(*v);
            if let (false, Some(c)) = (live, c6.as_mut()) {
                c.remove(cache_hash(seed, k), k);
            }
            live
        });
        self.stats.count(Outcome::ConnExpired, n.0);
        self.stats.count(Outcome::ConnEmbryonicExpired, n.1);
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
        LbStage::maintain(self, now_ns, pool);
    }
}

/// Where a burst's packets go out: the snapshot they are forwarded with, the counters, the
/// transmit burst and the buffer pool, and the outer IPv4 identification counter.
struct Emitter<'a> {
    snap: &'a Snapshot,
    stats: &'a WorkerStats,
    tx: &'a mut Vec<Packet>,
    pool: &'a mut Pool,
    ident: &'a mut u16,
    seed: u64,
    icmp: &'a mut Option<TokenBucket>,
    now_ns: u64,
}

impl Emitter<'_> {
    /// Drop `p`, counted under `why`.
    #[inline]
    fn drop(&mut self, p: Packet, why: Outcome) {
        self.stats.count(why, 1);
        self.pool.put(p);
    }

    /// Encapsulate `p` (whose IP packet lies at `l3` in the frame) toward `backend` of `vip` and
    /// queue it for transmission (or drop it, counted).
    #[inline]
    fn packet(&mut self, mut p: Packet, l3: (u16, u16), vip: u32, backend: u32, key: &FlowKey) {
        let snap = self.snap;
        let stats = self.stats;
        let Some(pre) = snap.encap(vip, backend) else {
            self.drop(p, Outcome::NoBackend);
            return;
        };
        let inner_len = (l3.1 - l3.0) as u64;
        if inner_len > pre.max_inner as u64 {
            self.too_big(p, l3, vip, backend, key, pre.max_inner);
            return;
        }
        let start = p.start();
        let inner = start + l3.0 as usize..start + l3.1 as usize;
        *self.ident = self.ident.wrapping_add(1);
        let r = if let Some(t) = &pre.template {
            t.encapsulate(p.buffer(), inner.clone(), *self.ident)
        } else if snap.vips[vip as usize].encap == EncapKind::L2Dsr {
            fp_wire::ethernet::rewrite_macs(p.data_mut(), pre.encap.l2.dst, pre.encap.l2.src)
                .map(|_| start)
        } else {
            let needs_hash = matches!(pre.encap.ip, fp_wire::encap::OuterIp::V6 { .. })
                || matches!(pre.encap.tunnel, fp_wire::encap::Tunnel::Vxlan { .. });
            let flow_hash = if needs_hash { key.hash(self.seed) } else { 0 };
            pre.encap
                .encapsulate(p.buffer(), inner.clone(), flow_hash, *self.ident)
        };
        match r {
            Ok(new_start) if new_start != start => p.set_frame(new_start, inner.end - new_start),
            Ok(_) => {}
            Err(_) => {
                self.drop(p, Outcome::EncapFailed);
                return;
            }
        }
        stats.count(Outcome::Tx, 1);
        stats.count(Outcome::TxBytes, p.len() as u64);
        if let Some(c) = stats.vip(vip as usize) {
            c.packets.inc();
            c.bytes.add(inner_len);
        }
        if let Some(c) = stats.backend(backend as usize) {
            c.packets.inc();
            c.bytes.add(inner_len);
        }
        self.tx.push(p);
    }

    /// A packet that would exceed the path MTU once encapsulated: an IPv4 datagram without DF is
    /// cut into fragments that fit, each sent on like any packet; anything else is dropped and
    /// answered (rate-limited) with an ICMP "fragmentation needed" / "packet too big" carrying
    /// `max_inner`, the MTU the client should use toward the VIP.
    #[cold]
    #[inline(never)]
    fn too_big(
        &mut self,
        mut p: Packet,
        l3: (u16, u16),
        vip: u32,
        backend: u32,
        key: &FlowKey,
        max_inner: u16,
    ) {
        let start = p.start();
        let inner = start + l3.0 as usize..start + l3.1 as usize;
        let ip = &p.data()[l3.0 as usize..l3.1 as usize];
        let may_fragment = ip.first().map(|b| b >> 4) == Some(4)
            && ip.len() >= fp_wire::ipv4::HEADER_LEN
            && ip[6] & 0x40 == 0;
        if may_fragment {
            self.fragment(p, l3, vip, backend, key, max_inner);
            return;
        }
        let to = fp_wire::pmtu::source_of(ip);
        self.stats.count(Outcome::TooBig, 1);
        if !to.is_some_and(fp_wire::pmtu::may_receive_error) {
            self.pool.put(p);
            return;
        }
        let now_ns = self.now_ns;
        if !self.icmp.as_mut().is_some_and(|b| b.take(now_ns)) {
            self.stats.count(Outcome::MtuIcmpLimited, 1);
            self.pool.put(p);
            return;
        }
        *self.ident = self.ident.wrapping_add(1);
        let frame = start..start + p.len();
        match fp_wire::pmtu::too_big_in_place(p.buffer(), frame, inner, max_inner, *self.ident) {
            Ok(r) => {
                p.set_frame(r.start, r.len());
                self.stats.count(Outcome::MtuIcmpSent, 1);
                self.stats.count(Outcome::Tx, 1);
                self.stats.count(Outcome::TxBytes, p.len() as u64);
                self.tx.push(p);
            }
            Err(_) => self.pool.put(p),
        }
    }

    /// Cut the IPv4 datagram at `l3` (DF clear) into fragments of at most `max_inner` bytes, each
    /// encapsulated and sent like any packet, in order.
    #[cold]
    fn fragment(
        &mut self,
        mut p: Packet,
        l3: (u16, u16),
        vip: u32,
        backend: u32,
        key: &FlowKey,
        max_inner: u16,
    ) {
        let (l2, end) = (l3.0 as usize, l3.1 as usize);
        let plan = match fp_wire::pmtu::Fragmenter::new(&p.data()[l2..end], max_inner as usize) {
            Ok(f) if f.count() <= MAX_PIECES => f,
            _ => {
                self.drop(p, Outcome::TooBig);
                return;
            }
        };
        let mut rest: [Option<(Packet, u16)>; MAX_PIECES] = std::array::from_fn(|_| None);
        for (i, slot) in rest.iter_mut().enumerate().take(plan.count()).skip(1) {
            let Some(mut q) = self.pool.get() else { break };
            let qs = q.start();
            let src = p.data();
            let out = &mut q.buffer()[qs..];
            out[..l2].copy_from_slice(&src[..l2]);
            match plan.emit(&src[l2..end], i, &mut out[l2..]) {
                Ok(n) => {
                    q.set_frame(qs, l2 + n);
                    *slot = Some((q, (l2 + n) as u16));
                }
                Err(_) => self.pool.put(q),
            }
        }
        if rest
            .iter()
            .skip(1)
            .take(plan.count() - 1)
            .any(Option::is_none)
        {
            for (q, _) in rest.iter_mut().filter_map(Option::take) {
                self.pool.put(q);
            }
            self.drop(p, Outcome::TooBig);
            return;
        }
        let Ok(n) = plan.first_in_place(&mut p.data_mut()[l2..end]) else {
            self.drop(p, Outcome::TooBig);
            return;
        };
        self.stats.count(Outcome::MtuFragmented, 1);
        let start = p.start();
        p.set_frame(start, l2 + n);
        self.packet(p, (l3.0, (l2 + n) as u16), vip, backend, key);
        for (q, e) in rest.iter_mut().filter_map(Option::take) {
            self.packet(q, (l3.0, e), vip, backend, key);
        }
    }

    /// Send a fragment to the balancer that owns its datagram, GRE-encapsulated with recursion
    /// control 1 (see [`crate::snapshot::ClusterState::redirect`]).
    #[cold]
    fn redirect(
        &mut self,
        c: &crate::snapshot::ClusterState,
        owner: usize,
        mut p: Packet,
        s: &PacketSummary,
    ) {
        let Some(e) = c.redirect(owner, s.dst()) else {
            self.drop(p, Outcome::EncapFailed);
            return;
        };
        let start = p.start();
        let inner = start + s.l3_offset as usize..start + s.l3_end();
        *self.ident = self.ident.wrapping_add(1);
        match e.encapsulate(p.buffer(), inner.clone(), 0, *self.ident) {
            Ok(new_start) => {
                p.set_frame(new_start, inner.end - new_start);
                self.stats.count(Outcome::FragRedirected, 1);
                self.stats.count(Outcome::Tx, 1);
                self.stats.count(Outcome::TxBytes, p.len() as u64);
                self.tx.push(p);
            }
            Err(_) => self.drop(p, Outcome::EncapFailed),
        }
    }
}

/// Step 1 for one packet: parse, match a VIP, route fragments; a packet that needs its
/// connection looked up is queued in `scratch.pending` with its key.
#[inline(always)]
fn classify(
    mut p: Packet,
    out: &mut Emitter<'_>,
    tables: &mut Tables,
    scratch: &mut Scratch,
    now_ns: u64,
) {
    let snap = out.snap;
    let stats = out.stats;
    // On a live interface, a unicast frame to another MAC reaches us only when a bridge floods it
    // (e.g. to a failed balancer's address): forwarding it would duplicate it.
    if let (Some(m), Some(dst)) = (snap.local_mac, p.data().get(..6)) {
        if dst[0] & 1 == 0 && dst != m.0 {
            out.drop(p, Outcome::OtherHost);
            return;
        }
    }
    // Used in place: copying the summary out of the result would re-read, as wide loads, fields
    // the parser has just stored one by one (a store-forwarding stall per packet).
    let mut parsed = PacketSummary::parse(p.data());
    let s = match &mut parsed {
        Ok(s) => s,
        Err(e) => {
            stats.parse_error(*e);
            out.pool.put(p);
            return;
        }
    };
    // Scale-out (Maglev §4.3): fragments meet on the balancer that owns their datagram.
    if let Some(c) = &snap.cluster {
        let mut redirected = false;
        if s.protocol == IpProtocol::GRE {
            if let Some(inner) = unwrap_redirect(&mut p, s, snap) {
                stats.count(Outcome::FragRedirectIn, 1);
                *s = inner;
                redirected = true;
            }
        }
        if s.is_fragment() && !redirected && snap.match_vip(s.dst(), None, s.protocol).is_some() {
            // An owner whose MAC is not yet resolved (e.g. just after start) cannot be reached:
            // the fragment is balanced here, where a router hashing by addresses sends its
            // datagram's other fragments too.
            let owner = c.owner(&s.three_tuple());
            if owner != c.me && c.reachable(owner) {
                out.redirect(c, owner, p, s);
                return;
            }
        }
    }
    if s.is_non_first_fragment() {
        non_first_fragment(p, s, out, tables, scratch, now_ns);
        return;
    }
    // The flow this packet belongs to: its own 5-tuple, or for an ICMP error the connection it
    // quotes, seen from the client's side.
    let icmp_error = s.is_icmp_error();
    let key = if icmp_error {
        match s.icmp_quoted(p.data()) {
            Ok(q) => q.flow_key().reversed(),
            Err(_) => s.flow_key(),
        }
    } else {
        s.flow_key()
    };
    let (dst, port, proto) = key_target(&key);
    let vip = if s.has_ports() || icmp_error {
        snap.match_vip(dst, Some(port), proto)
    } else {
        None
    };
    let Some(vip) = vip else {
        out.drop(p, Outcome::NonVip);
        return;
    };
    // QUIC VIPs: a short-header packet goes to the server its connection ID names, whatever its
    // addresses and ports (a client that moved keeps its server), with no connection entry.
    if let Some(q) = &snap.vips[vip as usize].quic {
        if s.l4 == L4Kind::Udp && s.fragment.is_none() {
            let l4 = s.l4_offset as usize;
            let payload = p.data().get(l4 + 8..l4 + s.l4_len as usize).unwrap_or(&[]);
            match q.backend(payload) {
                Ok(b) if snap.vips[vip as usize].serves(b) => {
                    stats.count(Outcome::QuicRouted, 1);
                    out.packet(p, l3_of(s), vip, b, &key);
                    return;
                }
                Ok(_) | Err(QuicMiss::UnknownId) => stats.count(Outcome::QuicUnknownId, 1),
                Err(QuicMiss::NotShort) => {}
            }
        }
    }
    let slot = match &key {
        FlowKey::V4(k) => {
            scratch.keys4.push(k.to_bytes());
            scratch.keys4.len() - 1
        }
        FlowKey::V6(k) => {
            scratch.keys6.push(k.to_bytes());
            scratch.keys6.len() - 1
        }
    };
    // A SYN opens a connection and will need a Maglev selection in step 3: hash it now and
    // prefetch its table entry, which the burst's connection lookups would otherwise evict
    // before step 3 reads it.
    let i = scratch.pending.len();
    if s.tcp_flags.contains(TcpFlags::SYN) && !s.tcp_flags.intersects(TcpFlags::ACK) {
        let h = key.hash(out.seed);
        scratch.hashes[i] = h;
        scratch.syns |= 1 << i;
        snap.vips[vip as usize].prefetch_select(h);
    }
    let frag = s.fragment.map(|f| (f.ident, piece(s)));
    scratch.pkts.push(p);
    scratch.pending.push(Pending {
        key,
        vip,
        slot: slot as u16,
        l3: l3_of(s),
        frag,
    });
}

/// A non-first fragment: forwarded with its datagram's decision if the first fragment came
/// already, else held until it does.
#[inline]
fn non_first_fragment(
    p: Packet,
    s: &PacketSummary,
    out: &mut Emitter<'_>,
    tables: &mut Tables,
    scratch: &mut Scratch,
    now_ns: u64,
) {
    let (Some(fk), true) = (
        s.fragment_key(),
        out.snap.match_vip(s.dst(), None, s.protocol).is_some(),
    ) else {
        out.drop(p, Outcome::NonVip);
        return;
    };
    match tables
        .frags
        .non_first(&fk, p, piece(s), now_ns, &mut scratch.expired)
    {
        FragAction::Forward(d, p) => {
            out.stats.count(Outcome::FragForwarded, 1);
            out.packet(p, l3_of(s), d.vip, d.backend, &s.flow_key());
        }
        FragAction::Held => out.stats.count(Outcome::FragHeld, 1),
        FragAction::TableFull(p) => out.drop(p, Outcome::FragTableFull),
        FragAction::HoldFull(p) => out.drop(p, Outcome::FragHoldFull),
    }
}

/// Step 2: batched, prefetched connection lookups (CuckooSwitch Algorithm 3).
#[inline(always)]
fn lookup(tables: &mut Tables, scratch: &mut Scratch, stats: &WorkerStats) {
    let s = scratch;
    let a = lookup_family(
        &tables.conn4,
        &mut tables.cache4,
        tables.cache_seed,
        &s.keys4,
        &mut s.vals4,
        &mut s.hash4,
        &mut s.miss4,
        &mut s.miss_at,
        &mut s.miss_vals,
    );
    let b = lookup_family(
        &tables.conn6,
        &mut tables.cache6,
        tables.cache_seed,
        &s.keys6,
        &mut s.vals6,
        &mut s.hash6,
        &mut s.miss6,
        &mut s.miss_at,
        &mut s.miss_vals,
    );
    if tables.cache4.is_some() {
        stats.count(Outcome::ConnCacheHit, a.0 + b.0);
        stats.count(Outcome::ConnCacheMiss, a.1 + b.1);
    }
}

/// What step 3 needs besides the tables: the burst's time, the tracer, the SYN-flood guard.
struct Decide<'a> {
    worker: usize,
    now_ns: u64,
    now_ms: u32,
    tracer: Option<&'a mut (dyn Tracer + 'static)>,
    guard: &'a mut Guard,
}

/// Record a connection entry: a plain insert, or under pressure a bounded one that may replace an
/// embryonic entry.
#[inline(always)]
fn record<L: Layout<Value = u64>>(
    t: &mut Writer<L>,
    key: L::Key,
    e: u64,
    under_pressure: bool,
) -> Result<Placed<L::Key, u64>, InsertError> {
    if under_pressure {
        t.insert_bounded(key, e, PRESSURE_SEARCH_NODES, |_, v| is_embryonic(*v))
    } else {
        t.insert(key, e)
            .map(|old| old.map_or(Placed::New, Placed::Updated))
    }
}

/// Step 3 for the `i`-th pending packet: reuse the connection's backend or select one with
/// Maglev, record it, trace, encapsulate, emit (and release fragments that waited for it).
#[inline(always)]
fn decide(
    d: &mut Decide<'_>,
    i: usize,
    pkt: Packet,
    pending: &Pending,
    out: &mut Emitter<'_>,
    tables: &mut Tables,
    scratch: &mut Scratch,
) {
    let Pending {
        key,
        vip,
        slot,
        l3,
        frag,
    } = *pending;
    let snap = out.snap;
    let stats = out.stats;
    let slot = slot as usize;
    let vs = &snap.vips[vip as usize];
    let found = match key {
        FlowKey::V4(_) => scratch.vals4[slot],
        FlowKey::V6(_) => scratch.vals6[slot],
    };
    // A SYN without ACK: opens a connection (and was hashed in step 1).
    let syn = scratch.syns >> i & 1 != 0;
    // A SYN that finds a confirmed entry opens a new connection on reused ports: one whose entry
    // names a draining backend is balanced anew (the entry is overwritten).
    let (backend, outcome, maglev_slot) = match found {
        Some(v)
            if vs.serves(entry_backend(v))
                && !(syn && !is_embryonic(v) && vs.drains(entry_backend(v))) =>
        {
            stats.count(Outcome::ConnHit, 1);
            // A later packet of the flow confirms an embryonic entry; the last-seen time is
            // rewritten at most every TOUCH_MS.
            let confirm = is_embryonic(v) && !syn;
            if confirm || d.now_ms.wrapping_sub(entry_seen(v)) >= TOUCH_MS {
                let e = entry(entry_backend(v), d.now_ms) | if confirm { 0 } else { v & EMBRYONIC };
                let old = match key {
                    FlowKey::V4(_) => update_cached(
                        &mut tables.conn4,
                        &mut tables.cache4,
                        scratch.keys4[slot],
                        scratch.hash4[slot],
                        e,
                    ),
                    FlowKey::V6(_) => update_cached(
                        &mut tables.conn6,
                        &mut tables.cache6,
                        scratch.keys6[slot],
                        scratch.hash6[slot],
                        e,
                    ),
                };
                // Counted once per entry: a burst may hold the ACK and the first request of a
                // connection, both looked up before either was decided.
                if confirm && matches!(old, Ok(Some(o)) if is_embryonic(o)) {
                    stats.count(Outcome::ConnConfirmed, 1);
                }
            }
            (entry_backend(v), "hit", None)
        }
        other => {
            let (outcome, label) = if other.is_some() {
                (Outcome::ConnReselect, "reselect")
            } else {
                (Outcome::ConnMiss, "miss")
            };
            stats.count(outcome, 1);
            let h = if syn {
                scratch.hashes[i]
            } else {
                key.hash(out.seed)
            };
            let Some((b, mslot)) = vs.select(h) else {
                out.drop(pkt, Outcome::NoBackend);
                return;
            };
            let under_pressure = match key {
                FlowKey::V4(_) => tables.conn4.len() >= d.guard.pressure.0,
                FlowKey::V6(_) => tables.conn6.len() >= d.guard.pressure.1,
            };
            // A SYN that opens a new connection under pressure or above the rate limit is
            // balanced without an entry: its handshake's ACK records the connection.
            let bypass = if !syn || other.is_some() {
                None
            } else if under_pressure {
                Some(Outcome::SynBypassPressure)
            } else if d.guard.over_rate(d.now_ms) {
                Some(Outcome::SynBypassRate)
            } else {
                None
            };
            if let Some(why) = bypass {
                stats.count(why, 1);
            } else {
                let e = entry(b, d.now_ms) | if syn { EMBRYONIC } else { 0 };
                let seed = tables.cache_seed;
                let r = match key {
                    FlowKey::V4(_) => record_cached(
                        &mut tables.conn4,
                        &mut tables.cache4,
                        seed,
                        scratch.keys4[slot],
                        scratch.hash4[slot],
                        e,
                        under_pressure,
                    ),
                    FlowKey::V6(_) => record_cached(
                        &mut tables.conn6,
                        &mut tables.cache6,
                        seed,
                        scratch.keys6[slot],
                        scratch.hash6[slot],
                        e,
                        under_pressure,
                    ),
                };
                // A new assignment: a new entry, or an entry whose backend changed. An entry that
                // already holds this choice was written by an earlier packet of the same burst
                // (looked up before it was decided) and is not counted again.
                let (assigned, evicted, new) = match r {
                    Ok(Placed::New) => (true, false, true),
                    Ok(Placed::Evicted(..)) => (true, true, true),
                    Ok(Placed::Updated(old)) => (entry_backend(old) != b, false, false),
                    Err(_) => {
                        stats.count(Outcome::ConnFull, 1);
                        (false, false, false)
                    }
                };
                if evicted {
                    stats.count(Outcome::ConnEvicted, 1);
                }
                d.guard.recorded += new as u32;
                if assigned {
                    stats.count(Outcome::ConnInsert, 1);
                    if let Some(c) = stats.vip(vip as usize) {
                        c.connections.inc();
                    }
                    if let Some(c) = stats.backend(b as usize) {
                        c.connections.inc();
                    }
                }
            }
            (b, label, Some(mslot))
        }
    };
    if let Some(t) = d.tracer.as_deref_mut() {
        if t.wants(pkt.data(), &key, d.now_ns) {
            stats.count(Outcome::Traced, 1);
            t.record(TraceRecord {
                worker: d.worker,
                generation: snap.generation,
                flow: key,
                vip: vs.name.clone(),
                conn: if frag.is_some() { "fragment" } else { outcome },
                maglev_slot,
                backend: snap.backend(backend).map(|b| b.address),
                encap: vs.encap.to_string(),
            });
        }
    }
    let Some((ident_no, pc)) = frag else {
        out.packet(pkt, l3, vip, backend, &key);
        return;
    };
    let fk = FragmentKey {
        tuple: key.three_tuple(),
        ident: ident_no,
    };
    scratch.release.clear();
    tables.frags.decide(
        &fk,
        Decision { vip, backend },
        pc,
        d.now_ns,
        &mut scratch.release,
        &mut scratch.expired,
    );
    out.packet(pkt, l3, vip, backend, &key);
    // Fragments that overtook their first fragment follow it now.
    for held in scratch.release.drain(..) {
        match PacketSummary::parse(held.data()) {
            Ok(hs) => {
                stats.count(Outcome::FragForwarded, 1);
                out.packet(held, l3_of(&hs), vip, backend, &key);
            }
            Err(e) => {
                stats.parse_error(e);
                out.pool.put(held);
            }
        }
    }
}

/// A fragment another balancer redirected to this one (Maglev §4.3): GRE with recursion control
/// set, whose inner packet is a fragment to a VIP, addressed (outer and inner) to that VIP. The
/// outer IP and GRE headers are stripped in place (the Ethernet header moves up to the inner
/// packet) and the inner packet's summary is returned; anything else is left untouched (`None`).
fn unwrap_redirect(p: &mut Packet, s: &PacketSummary, snap: &Snapshot) -> Option<PacketSummary> {
    use fp_wire::encap::{decapsulate, InnerKind};
    if s.is_fragment() {
        return None;
    }
    let d = decapsulate(p.data(), s, 0).ok()?;
    if d.gre.is_none_or(|g| g.recursion == 0) || d.inner == InnerKind::Ethernet {
        return None;
    }
    let inner = PacketSummary::parse_ip(
        &p.data()[d.inner_range()],
        &fp_wire::summary::ParseOptions::DEFAULT,
    )
    .ok()?;
    if !inner.is_fragment()
        || inner.dst() != s.dst()
        || snap.match_vip(inner.dst(), None, inner.protocol).is_none()
    {
        return None;
    }
    let l2 = s.l3_offset as usize;
    let start = p.start();
    let new_start = start + d.inner_offset - l2;
    let ethertype: u16 = if d.inner == InnerKind::Ipv4 {
        0x0800
    } else {
        0x86DD
    };
    let buf = p.buffer();
    buf.copy_within(start..start + l2, new_start);
    buf[new_start + l2 - 2..new_start + l2].copy_from_slice(&ethertype.to_be_bytes());
    p.set_frame(new_start, l2 + d.inner_len);
    PacketSummary::parse(p.data()).ok()
}

/// Where a fragment's data lies in its datagram.
fn piece(s: &PacketSummary) -> Piece {
    let f = s.fragment.unwrap_or(fp_wire::FragmentInfo {
        ident: 0,
        offset: 0,
        more: false,
    });
    Piece {
        offset: f.offset as u32,
        len: (s.l3_end() as u32).saturating_sub(s.l4_offset as u32),
        more: f.more,
    }
}

/// Destination address, port and protocol of a flow key (what VIPs match on).
fn key_target(k: &FlowKey) -> (std::net::IpAddr, u16, fp_wire::ip::IpProtocol) {
    match k {
        FlowKey::V4(k) => (k.dst.into(), k.dst_port, k.protocol),
        FlowKey::V6(k) => (k.dst.into(), k.dst_port, k.protocol),
    }
}

/// The IP packet's place in a frame: (offset, end).
#[inline(always)]
fn l3_of(s: &PacketSummary) -> (u16, u16) {
    (s.l3_offset, s.l3_end() as u16)
}
