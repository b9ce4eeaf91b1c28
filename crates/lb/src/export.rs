//! Flow records of the balancer, exported as IPFIX (RFC 7011) to the collectors of `[ipfix]`.
//!
//! What is exported:
//!
//! * **Connection created**: when a worker records a connection entry — the client's 5-tuple (the
//!   destination is the VIP), the backend (`ipNextHopIPv4Address`/`ipNextHopIPv6Address`: the
//!   tunnel's far end), the time, and why that backend ([`Why`]: a new Maglev selection, a
//!   re-selection because the recorded backend went down or left, or a flow picked up mid-way
//!   under second chance). `firewallEvent` = 1 (flow created).
//! * **Connection ended**: when the entry leaves the table — idle or embryonic timeout
//!   (`flowEndReason` 1), or an embryonic entry taken by a new connection in a table under
//!   pressure (5, lack of resources) — with the last-seen time, the start time when the exporter
//!   saw the entry created, and `firewallEvent` = 2 (flow deleted). Entries carried across a
//!   restart end with a record whose template has no start time.
//! * **Sampled packets**: one packet in each `sample_one_in` of those matched to a VIP and
//!   forwarded, chosen at random within each window of that many packets (random n-out-of-N,
//!   RFC 5475; n = 1): its 5-tuple, backend, length, time and why that backend (the above, or a
//!   connection-table hit, a QUIC connection ID, or a Maglev choice made without an entry: the
//!   table was full or the SYN guard bypassed it). An options record describes the selector.
//! * **Exporter statistics**: an options record with the messages and records sent and the events
//!   the workers could not queue (RFC 7011 §4.3's reliability statistics).
//!
//! Packets and bytes per connection are not counted: the connection entry is one 8-byte word
//! (backend, last-seen time, flags), and counters would double it and add a write to every
//! packet's entry (modelled in `flowplane-bench lb`, `conn_counters`: about 15 % of the
//! rate of established connections' packets); the sampled records estimate volumes instead.
//!
//! The workers never wait for the export. Each has a bounded queue of fixed-size [`FlowEvent`]s
//! ([`Tap`]); an event that does not fit is dropped and counted (`ipfix_event_dropped`). The
//! exporter thread ([`FlowExporter`]) drains the queues every [`DRAIN_EVERY`] (at once again while
//! a queue stays a quarter full), taking at most `max_records_per_second` events a second, encodes,
//! and sends messages of at most `max_message_bytes` over UDP; templates and options records go
//! out at start and every `template_refresh_s`. The rate limit is for floods of new connections:
//! an exporter working flat out on the other core slows the worker beside it (measured in
//! `flowplane-bench lb`, `ipfix_syn`), and what it would send is more than collectors take.
//!
//! flowplane's own elements are enterprise-specific, under `ipfix.enterprise_number` (by default
//! 32473, the number RFC 5612 reserves for documentation):
//!
//! | id | name | type | values |
//! |---|---|---|---|
//! | 1 | `flowplaneBackendReason` | unsigned8 | 1 new, 2 reselected, 3 second chance, 4 connection-table hit, 5 QUIC connection ID, 6 Maglev without an entry |
//! | 2 | `flowplaneWorker` | unsigned16 | the worker that saw it |

use crate::snapshot::{Cached, Published, Snapshot};
use fp_export::config::IpfixSpec;
use fp_export::ipfix::{end_reason, ie, Field, MessageBuilder, Record, Template};
use fp_export::rate::RateLimit;
use fp_export::ring::{Consumer, Producer};
use fp_export::udp::Exporter;
use fp_wire::FlowKey;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Why a packet or connection went to its backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Why {
    /// A new connection: Maglev selected the backend and the entry was recorded.
    New = 1,
    /// The recorded backend went down or left the VIP: selected again.
    Reselected = 2,
    /// A flow picked up mid-way whose earlier backend set chose other backends (second chance).
    SecondChance = 3,
    /// The connection entry's backend.
    Hit = 4,
    /// A QUIC short-header packet routed by the server id in its connection ID.
    ConnectionId = 5,
    /// Maglev's choice without a connection entry (table full, or the SYN guard's bypass).
    NoEntry = 6,
}

/// What happened to a flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A connection entry was recorded.
    Created(Why),
    /// The entry left the table (`flowEndReason`).
    Ended(u8),
    /// A sampled packet of `bytes` bytes (as received, Ethernet header included).
    Sampled(Why, u16),
}

/// One event a worker hands to the exporter (fixed size, no allocation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowEvent {
    /// What happened.
    pub event: Event,
    /// The client's 5-tuple (destination: the VIP).
    pub flow: FlowKey,
    /// The backend, if the VIP had one.
    pub backend: Option<IpAddr>,
    /// When (`CLOCK_MONOTONIC` ns): created, last seen, or received.
    pub at_ns: u64,
    /// The worker.
    pub worker: u16,
}

/// Events each worker queued, and dropped because its queue was full, and events the exporter
/// took from it: shared between a worker (the first two, single writer, stored once per burst)
/// and the exporter.
#[derive(Debug, Default)]
pub struct TapCounters {
    /// Events put into the queue.
    pub queued: AtomicU64,
    /// Events dropped: the queue was full.
    pub dropped: AtomicU64,
    /// Events the exporter took out.
    pub taken: AtomicU64,
}

/// Words of an event in the ring.
const WORDS: usize = 9;

impl FlowEvent {
    /// The event as ring words: kind, why/reason, length, worker and families; the time; the
    /// flow key's encoding (13 or 37 bytes); the backend's address.
    fn encode(&self) -> [u64; WORDS] {
        let (kind, arg, bytes) = match self.event {
            Event::Created(w) => (1u64, w as u64, 0u64),
            Event::Ended(r) => (2, r as u64, 0),
            Event::Sampled(w, b) => (3, w as u64, b as u64),
        };
        let mut key = [0u8; fp_wire::flow::MAX_KEY_LEN];
        let klen = self.flow.encode(&mut key).len() as u64;
        let (bfam, b) = match self.backend {
            None => (0u64, [0u8; 16]),
            Some(IpAddr::V4(a)) => {
                let mut b = [0u8; 16];
                b[..4].copy_from_slice(&a.octets());
                (4, b)
            }
            Some(IpAddr::V6(a)) => (6, a.octets()),
        };
        let mut w = [0u64; WORDS];
        w[0] = kind | arg << 8 | bytes << 16 | (self.worker as u64) << 32 | klen << 48 | bfam << 56;
        w[1] = self.at_ns;
        let mut k = [0u8; 40];
        k[..key.len()].copy_from_slice(&key);
        for i in 0..5 {
            w[2 + i] = u64::from_le_bytes(k[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        }
        w[7] = u64::from_le_bytes(b[..8].try_into().expect("8 bytes"));
        w[8] = u64::from_le_bytes(b[8..].try_into().expect("8 bytes"));
        w
    }

    /// [`FlowEvent::encode`] back; `None` for words no event makes.
    fn decode(w: &[u64; WORDS]) -> Option<FlowEvent> {
        let arg = (w[0] >> 8) as u8;
        let event = match w[0] & 0xff {
            1 => Event::Created(Why::from_u8(arg)?),
            2 => Event::Ended(arg),
            3 => Event::Sampled(Why::from_u8(arg)?, (w[0] >> 16) as u16),
            _ => return None,
        };
        let mut k = [0u8; 40];
        for i in 0..5 {
            k[i * 8..i * 8 + 8].copy_from_slice(&w[2 + i].to_le_bytes());
        }
        let klen = ((w[0] >> 48) & 0xff) as usize;
        let flow = FlowKey::from_bytes(k.get(..klen)?)?;
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&w[7].to_le_bytes());
        b[8..].copy_from_slice(&w[8].to_le_bytes());
        let backend = match w[0] >> 56 {
            4 => Some(IpAddr::from([b[0], b[1], b[2], b[3]])),
            6 => Some(IpAddr::from(b)),
            _ => None,
        };
        Some(FlowEvent {
            event,
            flow,
            backend,
            at_ns: w[1],
            worker: (w[0] >> 32) as u16,
        })
    }
}

impl Why {
    fn from_u8(v: u8) -> Option<Why> {
        Some(match v {
            1 => Why::New,
            2 => Why::Reselected,
            3 => Why::SecondChance,
            4 => Why::Hit,
            5 => Why::ConnectionId,
            6 => Why::NoEntry,
            _ => return None,
        })
    }
}

/// A worker's end of the export: its queue (a ring, see [`fp_export::ring`]) and the sampler.
#[derive(Debug)]
pub struct Tap {
    ring: Producer,
    counters: Arc<TapCounters>,
    /// Events queued and dropped, counted here and stored for readers at each publish.
    queued: u64,
    dropped: u64,
    /// The queue was full during this burst.
    full: bool,
    worker: u16,
    /// Connection records on.
    conns: bool,
    /// 1 in `one_in` packets sampled (0: none).
    one_in: u32,
    /// Position in the current window of `one_in` packets, and the one sampled in it.
    pos: u32,
    chosen: u32,
    rng: u64,
}

/// The exporter's end of a worker's queue.
#[derive(Debug)]
pub struct FlowEvents {
    ring: Consumer,
    counters: Arc<TapCounters>,
}

impl FlowEvents {
    /// Whether the worker published events not taken yet.
    fn waiting(&self) -> bool {
        self.ring.waiting() > 0
    }

    /// The next event the worker published.
    fn take(&mut self) -> Option<FlowEvent> {
        let mut w = [0u64; WORDS];
        while self.ring.pop(&mut w) {
            if let Some(e) = FlowEvent::decode(&w) {
                return Some(e);
            }
        }
        None
    }
}

/// Make a worker's tap with a queue of `queue` events, and the exporter's end of it.
pub fn tap(worker: usize, queue: usize) -> (Tap, FlowEvents) {
    let (p, c) = fp_export::ring::ring(queue, WORDS);
    let counters = Arc::new(TapCounters::default());
    let t = Tap {
        ring: p,
        counters: counters.clone(),
        queued: 0,
        dropped: 0,
        full: false,
        worker: worker as u16,
        conns: false,
        one_in: 0,
        pos: 0,
        chosen: 0,
        rng: 0x9E37_79B9_7F4A_7C15 ^ (worker as u64).wrapping_mul(0xD1B5_4A32_D192_ED03) | 1,
    };
    (t, FlowEvents { ring: c, counters })
}

impl Tap {
    /// Follow `[ipfix]` (none: export off).
    pub fn configure(&mut self, spec: Option<&IpfixSpec>) {
        self.conns = spec.is_some_and(|s| s.connections);
        let one_in = spec.map_or(0, |s| s.sample_one_in);
        if one_in != self.one_in {
            self.one_in = one_in;
            self.pos = 0;
            self.chosen = self.draw();
        }
    }

    /// Whether connection records are on.
    #[inline]
    pub fn connections(&self) -> bool {
        self.conns
    }

    /// Whether this packet is the sampled one of its window (call once per packet matched to a
    /// VIP and forwarded).
    #[inline]
    pub fn sample_this(&mut self) -> bool {
        if self.one_in == 0 {
            return false;
        }
        let hit = self.pos == self.chosen;
        self.pos += 1;
        if self.pos == self.one_in {
            self.pos = 0;
            self.chosen = self.draw();
        }
        hit
    }

    /// A position in a window of `one_in` packets, uniformly (xorshift64*, then Lemire's
    /// reduction).
    fn draw(&mut self) -> u32 {
        if self.one_in <= 1 {
            return 0;
        }
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        let r = self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 32;
        ((r * self.one_in as u64) >> 32) as u32
    }

    /// Queue an event; a full queue drops it (counted). The exporter sees it after
    /// [`Tap::publish`].
    #[inline]
    /// The backend is looked up (`backend()`) only for an event that fits: a saturated export
    /// costs the worker no lookup.
    pub fn send(
        &mut self,
        event: Event,
        flow: FlowKey,
        backend: impl FnOnce() -> Option<IpAddr>,
        at_ns: u64,
    ) {
        // A queue found full stays full for the rest of the burst (the exporter's progress is
        // looked at again after the next publish): a saturated export costs a branch per event.
        if self.full || !self.ring.has_room() {
            self.full = true;
            self.dropped += 1;
            return;
        }
        let e = FlowEvent {
            event,
            flow,
            backend: backend(),
            at_ns,
            worker: self.worker,
        };
        if self.ring.push(&e.encode()) {
            self.queued += 1;
        } else {
            self.dropped += 1;
        }
    }

    /// Hand the events queued so far to the exporter (once per burst), and publish the counts.
    #[inline]
    pub fn publish(&mut self) {
        self.ring.publish();
        self.full = false;
        let c = &self.counters;
        if c.queued.load(Relaxed) != self.queued {
            c.queued.store(self.queued, Relaxed);
        }
        if c.dropped.load(Relaxed) != self.dropped {
            c.dropped.store(self.dropped, Relaxed);
        }
    }

    /// The counters the exporter and the metrics read.
    pub fn counters(&self) -> &Arc<TapCounters> {
        &self.counters
    }
}

// ---------------------------------------------------------------------------------------------
// Templates

/// Template ids.
const CREATED4: u16 = 256;
const CREATED6: u16 = 257;
const ENDED4: u16 = 258;
const ENDED6: u16 = 259;
const ENDED_NO_START4: u16 = 260;
const ENDED_NO_START6: u16 = 261;
const SAMPLED4: u16 = 262;
const SAMPLED6: u16 = 263;
const SELECTOR: u16 = 264;
const STATISTICS: u16 = 265;

/// Enterprise element ids.
const REASON: u16 = 1;
const WORKER: u16 = 2;

/// The selector id of the packet sampler.
const SELECTOR_ID: u64 = 1;
/// `selectorAlgorithm` 3: random n-out-of-N.
const RANDOM_N_OUT_OF_N: u16 = 3;
/// samplingSize / samplingPopulation (RFC 5477).
const SAMPLING_SIZE: u16 = 309;
const SAMPLING_POPULATION: u16 = 310;

/// The 5-tuple and backend fields of one family.
fn tuple(v6: bool) -> Vec<Field> {
    let a = if v6 { 16 } else { 4 };
    let (src, dst, nh) = if v6 {
        (
            ie::SOURCE_IPV6_ADDRESS,
            ie::DESTINATION_IPV6_ADDRESS,
            ie::IP_NEXT_HOP_IPV6_ADDRESS,
        )
    } else {
        (
            ie::SOURCE_IPV4_ADDRESS,
            ie::DESTINATION_IPV4_ADDRESS,
            ie::IP_NEXT_HOP_IPV4_ADDRESS,
        )
    };
    vec![
        Field::iana(src, a),
        Field::iana(dst, a),
        Field::iana(ie::SOURCE_TRANSPORT_PORT, 2),
        Field::iana(ie::DESTINATION_TRANSPORT_PORT, 2),
        Field::iana(ie::PROTOCOL_IDENTIFIER, 1),
        Field::iana(nh, a),
    ]
}

/// Every template of the export, for enterprise number `pen`.
fn templates(pen: u32) -> Vec<Template> {
    let mut t = Vec::new();
    for v6 in [false, true] {
        let mut f = tuple(v6);
        f.extend([
            Field::iana(ie::FLOW_START_MILLISECONDS, 8),
            Field::iana(ie::FLOW_END_MILLISECONDS, 8),
            Field::iana(ie::FIREWALL_EVENT, 1),
            Field::enterprise(pen, REASON, 1),
            Field::enterprise(pen, WORKER, 2),
        ]);
        t.push(Template::data(if v6 { CREATED6 } else { CREATED4 }, f));
        let mut f = tuple(v6);
        f.extend([
            Field::iana(ie::FLOW_START_MILLISECONDS, 8),
            Field::iana(ie::FLOW_END_MILLISECONDS, 8),
            Field::iana(ie::FLOW_END_REASON, 1),
            Field::iana(ie::FIREWALL_EVENT, 1),
            Field::enterprise(pen, WORKER, 2),
        ]);
        t.push(Template::data(if v6 { ENDED6 } else { ENDED4 }, f));
        let mut f = tuple(v6);
        f.extend([
            Field::iana(ie::FLOW_END_MILLISECONDS, 8),
            Field::iana(ie::FLOW_END_REASON, 1),
            Field::iana(ie::FIREWALL_EVENT, 1),
            Field::enterprise(pen, WORKER, 2),
        ]);
        t.push(Template::data(
            if v6 { ENDED_NO_START6 } else { ENDED_NO_START4 },
            f,
        ));
        let mut f = tuple(v6);
        f.extend([
            Field::iana(ie::OBSERVATION_TIME_MILLISECONDS, 8),
            Field::iana(ie::OCTET_DELTA_COUNT, 8),
            Field::iana(ie::PACKET_DELTA_COUNT, 8),
            Field::iana(ie::SELECTOR_ID, 8),
            Field::enterprise(pen, REASON, 1),
            Field::enterprise(pen, WORKER, 2),
        ]);
        t.push(Template::data(if v6 { SAMPLED6 } else { SAMPLED4 }, f));
    }
    t.push(Template::options(
        SELECTOR,
        1,
        vec![
            Field::iana(ie::SELECTOR_ID, 8),
            Field::iana(ie::SELECTOR_ALGORITHM, 2),
            Field::iana(SAMPLING_SIZE, 4),
            Field::iana(SAMPLING_POPULATION, 4),
        ],
    ));
    t.push(Template::options(
        STATISTICS,
        1,
        vec![
            Field::iana(ie::EXPORTING_PROCESS_ID, 4),
            Field::iana(ie::EXPORTED_MESSAGE_TOTAL_COUNT, 8),
            Field::iana(ie::EXPORTED_FLOW_RECORD_TOTAL_COUNT, 8),
            Field::iana(ie::NOT_SENT_FLOW_TOTAL_COUNT, 8),
        ],
    ));
    // In id order: `Session::template` indexes by id.
    t.sort_by_key(|t| t.id);
    t
}

// ---------------------------------------------------------------------------------------------
// The exporter

/// How often the exporter thread drains the workers' queues.
pub const DRAIN_EVERY: Duration = Duration::from_millis(20);
/// The start times of the connections whose creation the exporter saw, for their end records:
/// a direct-mapped table of `ipfix.connection_starts` slots of (24-bit tag, start in ms since
/// 2020 in 40 bits) indexed by a hash of the flow, so its memory is fixed and each event touches
/// one slot. A connection whose slot a later one took (or one carried across a restart) ends
/// without a start time (counted). Direct mapping rather than a map of every live connection:
/// the exporter runs beside the workers, and the larger its table, the more of the workers'
/// tables its random writes push out of the caches they share (measured: `bench lb`, docs).
struct Starts {
    slots: Box<[u64]>,
    used: usize,
}

/// 2020-01-01T00:00:00Z in ms since the epoch: start times are kept relative to it.
const START_EPOCH_MS: u64 = 1_577_836_800_000;

impl Starts {
    fn new(slots: usize) -> Starts {
        Starts {
            slots: vec![0u64; slots].into_boxed_slice(),
            used: 0,
        }
    }

    /// Slot and tag of `flow` (none without a table).
    fn slot(&self, flow: &FlowKey) -> Option<(usize, u64)> {
        if self.slots.is_empty() {
            return None;
        }
        let h = flow.hash(0x1f1f_5eed);
        Some(((h as usize) & (self.slots.len() - 1), (h >> 40) | 1))
    }

    /// Remember `flow` started at `at_ms` (wall clock); a connection already there keeps its
    /// first start (a re-selection).
    fn insert(&mut self, flow: &FlowKey, at_ms: u64) {
        let Some((i, tag)) = self.slot(flow) else {
            return;
        };
        if self.slots[i] & 0xff_ffff == tag {
            return;
        }
        if self.slots[i] == 0 {
            self.used += 1;
        }
        let rel = at_ms.saturating_sub(START_EPOCH_MS).min((1 << 40) - 1);
        self.slots[i] = tag | rel << 24;
    }

    /// `flow`'s start (wall-clock ms), forgotten.
    fn remove(&mut self, flow: &FlowKey) -> Option<u64> {
        let (i, tag) = self.slot(flow)?;
        let v = self.slots[i];
        if v & 0xff_ffff != tag {
            return None;
        }
        self.slots[i] = 0;
        self.used -= 1;
        Some(START_EPOCH_MS + (v >> 24))
    }

    fn clear(&mut self) {
        self.slots.fill(0);
        self.used = 0;
    }
}

/// What the exporter did, for the metrics reader.
#[derive(Debug, Default)]
pub struct ExportStats {
    /// Records sent: created, ended, sampled, options.
    pub created: AtomicU64,
    /// Connection-ended records sent.
    pub ended: AtomicU64,
    /// Sampled-packet records sent.
    pub sampled: AtomicU64,
    /// Options and template records sent.
    pub options: AtomicU64,
    /// Messages sent (one per collector).
    pub messages: AtomicU64,
    /// Messages the socket refused.
    pub failed: AtomicU64,
    /// Start times the exporter holds.
    pub starts: AtomicU64,
    /// End records sent without a start time.
    pub no_start: AtomicU64,
    /// Drains that stopped at `ipfix.max_records_per_second` with events waiting (once per drain,
    /// however many queues were left waiting).
    pub limited: AtomicU64,
    /// Each worker's queue counters.
    pub taps: Mutex<Vec<Arc<TapCounters>>>,
}

impl ExportStats {
    /// Events waiting in the workers' queues, and events the workers dropped.
    pub fn queues(&self) -> (u64, u64) {
        let taps = self.taps.lock().unwrap_or_else(|p| p.into_inner());
        taps.iter().fold((0, 0), |(w, d), t| {
            let q = t.queued.load(Relaxed);
            (
                w + q.saturating_sub(t.taken.load(Relaxed)),
                d + t.dropped.load(Relaxed),
            )
        })
    }
}

/// The encoder and socket of one `[ipfix]` setting.
struct Session {
    spec: IpfixSpec,
    socket: Exporter,
    msg: MessageBuilder,
    /// The templates, in id order from [`CREATED4`].
    templates: Vec<Template>,
    /// When the templates were last sent.
    refreshed: Option<Instant>,
    /// Messages the socket took (all collectors), and the data records of the messages sent.
    sent_messages: u64,
    sent_records: u64,
}

impl Session {
    fn template(&self, id: u16) -> &Template {
        &self.templates[(id - CREATED4) as usize]
    }

    /// Append template `id` (`record` none) or a record of it, sending the message first when it
    /// is full.
    fn push(&mut self, stats: &ExportStats, id: u16, record: Option<&Record>) {
        if !self.msg.begun() {
            self.msg.begin();
        }
        let Session { msg, templates, .. } = self;
        let t = &templates[(id - CREATED4) as usize];
        let fits = |msg: &mut MessageBuilder| match record {
            None => msg.push_template(t),
            Some(r) => msg.push_record(t, r),
        };
        if !fits(msg) {
            self.flush(stats);
            self.msg.begin();
            let t = self.template(id).clone();
            // Templates and records are far below the smallest `max_message_bytes`: an empty
            // message always takes one.
            let fitted = match record {
                None => self.msg.push_template(&t),
                Some(r) => self.msg.push_record(&t, r),
            };
            debug_assert!(fitted);
        }
    }

    /// Send the message being written, if it holds anything.
    fn flush(&mut self, stats: &ExportStats) {
        if self.msg.is_empty() {
            return;
        }
        let before = self.socket.sent();
        let records = self.msg.records() as u64;
        let bytes = self.msg.finish(export_time_s());
        self.socket.send(bytes);
        let after = self.socket.sent();
        self.sent_messages += after.messages - before.messages;
        if after.messages > before.messages {
            self.sent_records += records;
        }
        stats
            .messages
            .fetch_add(after.messages - before.messages, Relaxed);
        stats
            .failed
            .fetch_add(after.failed - before.failed, Relaxed);
    }
}

/// The exporter thread's state: the workers' queues, the session, the connections' start times.
pub struct FlowExporter {
    queues: Vec<FlowEvents>,
    /// The smallest queue's slots.
    capacity: usize,
    snap: Cached<Snapshot>,
    session: Option<Session>,
    /// Start times (wall-clock ms) of the connections whose creation the exporter saw.
    starts: Starts,
    stats: Arc<ExportStats>,
    rec: Record,
    process_id: u32,
    /// Settings whose socket could not be opened (not tried again until they change).
    failed: Option<IpfixSpec>,
    /// `ipfix.max_records_per_second`.
    budget: RateLimit,
}

/// Wall-clock ms of a `CLOCK_MONOTONIC` time, by the offset between the clocks.
fn wall_ms(mono_ns: u64, offset_ns: i128) -> u64 {
    ((mono_ns as i128 + offset_ns).max(0) / 1_000_000) as u64
}

/// Wall-clock minus `CLOCK_MONOTONIC`, now (ns).
fn clock_offset_ns() -> i128 {
    let wall = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128);
    wall - fp_engine::sys::monotonic_ns() as i128
}

impl FlowExporter {
    /// An exporter of the events of `queues`, following `[ipfix]` of the published snapshots.
    pub fn new(
        queues: Vec<FlowEvents>,
        snapshots: Arc<Published<Snapshot>>,
        stats: Arc<ExportStats>,
    ) -> FlowExporter {
        *stats.taps.lock().unwrap_or_else(|p| p.into_inner()) =
            queues.iter().map(|q| q.counters.clone()).collect();
        FlowExporter {
            capacity: queues.iter().map(|q| q.ring.capacity()).min().unwrap_or(0),
            queues,
            snap: Cached::new(snapshots),
            session: None,
            starts: Starts::new(0),
            stats,
            rec: Record::new(),
            process_id: std::process::id(),
            failed: None,
            budget: RateLimit::new(),
        }
    }

    /// Drain every [`DRAIN_EVERY`] (at once again while the workers keep a queue at least a
    /// quarter full and the rate limit allows) until `stop` is set; then drain once more, without
    /// the rate limit (the workers have stopped), and send what is left.
    pub fn run(mut self, stop: Arc<AtomicBool>) {
        loop {
            let stopping = stop.load(Relaxed);
            let busiest = self.drain_within(!stopping);
            if stopping {
                return;
            }
            if busiest < self.capacity / 4 || self.budget.limited() {
                std::thread::sleep(DRAIN_EVERY);
            }
        }
    }

    /// Take the events the workers published, as many as `ipfix.max_records_per_second`
    /// allows, encode and send; returns the most events taken from one queue.
    pub fn drain(&mut self) -> usize {
        self.drain_within(true)
    }

    /// [`FlowExporter::drain`], within the rate limit ([`fp_export::rate`]) or not.
    fn drain_within(&mut self, limit: bool) -> usize {
        self.follow_config();
        // Templates before the records that use them.
        self.refresh_templates();
        let offset = clock_offset_ns();
        let rate = match &self.session {
            Some(s) if limit => s.spec.max_records_per_second,
            _ => 0,
        };
        let mut queues = std::mem::take(&mut self.queues);
        let mut budget = std::mem::take(&mut self.budget);
        let taken = budget.take(
            rate,
            &mut queues,
            |q| match q.take() {
                Some(e) => {
                    self.event(&e, offset);
                    true
                }
                None => false,
            },
            FlowEvents::waiting,
        );
        if budget.limited() {
            self.stats.limited.fetch_add(1, Relaxed);
        }
        self.budget = budget;
        let mut busiest = 0;
        for (q, t) in queues.iter_mut().zip(taken) {
            q.ring.release();
            q.counters.taken.fetch_add(t, Relaxed);
            busiest = busiest.max(t as usize);
        }
        self.queues = queues;
        if let Some(s) = &mut self.session {
            s.flush(&self.stats);
        }
        self.stats.starts.store(self.starts.used as u64, Relaxed);
        busiest
    }

    /// A changed `[ipfix]` starts a new session (new socket, templates sent again); none stops
    /// the export.
    fn follow_config(&mut self) {
        self.snap.refresh();
        let spec = self.snap.get().config.ipfix.clone();
        if self.session.as_ref().map(|s| &s.spec) == spec.as_ref() || self.failed == spec {
            return;
        }
        // Only the rate limit changed: the exporter's own setting, followed in place (the
        // collectors see the same session).
        if let (Some(s), Some(new)) = (&mut self.session, &spec) {
            let rate = new.max_records_per_second;
            if s.spec
                == (IpfixSpec {
                    max_records_per_second: s.spec.max_records_per_second,
                    ..new.clone()
                })
            {
                s.spec.max_records_per_second = rate;
                return;
            }
        }
        self.failed = None;
        if let Some(s) = &mut self.session {
            s.flush(&self.stats);
        }
        self.session = spec.and_then(|spec| match Exporter::new(&spec.collectors) {
            Ok(socket) => Some(Session {
                msg: MessageBuilder::new(spec.observation_domain, spec.max_message_bytes),
                templates: templates(spec.enterprise_number),
                socket,
                spec,
                refreshed: None,
                sent_messages: 0,
                sent_records: 0,
            }),
            Err(e) => {
                // Said once: the same settings are not tried again until a reload changes them.
                fp_control::log(format_args!(
                    "warning: IPFIX export off until the configuration changes: {e}"
                ));
                self.failed = Some(spec);
                None
            }
        });
        // The start times carry over into a new session of the same table size (a reload that
        // changes the collectors); export off, or another size, starts from an empty table.
        let slots = self
            .session
            .as_ref()
            .map_or(0, |s| s.spec.connection_starts);
        if self.starts.slots.len() != slots {
            self.starts = Starts::new(slots);
        } else if self.session.is_none() {
            self.starts.clear();
        }
    }

    /// Templates and options records at the start of a session and every
    /// `template_refresh_s` (RFC 7011 §8.4).
    fn refresh_templates(&mut self) {
        let Some(s) = &mut self.session else { return };
        let every = Duration::from_secs(s.spec.template_refresh_s as u64);
        if s.refreshed.is_some_and(|t| t.elapsed() < every) {
            return;
        }
        s.refreshed = Some(Instant::now());
        let st = &self.stats;
        for id in CREATED4..=STATISTICS {
            s.push(st, id, None);
        }
        let r = &mut self.rec;
        r.clear()
            .u64(SELECTOR_ID)
            .u16(RANDOM_N_OUT_OF_N)
            .u32(1)
            .u32(s.spec.sample_one_in);
        s.push(st, SELECTOR, Some(r));
        let (_, dropped) = st.queues();
        // Per collector: the messages each was sent, the data records in the messages sent.
        let collectors = s.spec.collectors.len().max(1) as u64;
        r.clear()
            .u32(self.process_id)
            .u64(s.sent_messages / collectors)
            .u64(s.sent_records)
            .u64(dropped);
        s.push(st, STATISTICS, Some(r));
        st.options.fetch_add(2, Relaxed);
    }

    /// Encode one event.
    fn event(&mut self, e: &FlowEvent, offset: i128) {
        let Some(s) = &mut self.session else { return };
        let v6 = matches!(e.flow, FlowKey::V6(_));
        let at = wall_ms(e.at_ns, offset);
        let pick = |a: u16, b: u16| if v6 { b } else { a };
        let r = &mut self.rec;
        r.clear();
        match e.flow {
            FlowKey::V4(k) => r
                .ip(k.src.into())
                .ip(k.dst.into())
                .u16(k.src_port)
                .u16(k.dst_port)
                .u8(k.protocol.0),
            FlowKey::V6(k) => r
                .ip(k.src.into())
                .ip(k.dst.into())
                .u16(k.src_port)
                .u16(k.dst_port)
                .u8(k.protocol.0),
        };
        // A backend of the other family than the flow (an IPv4 VIP with IPv6 backends) cannot go
        // into this template's next-hop field: left unspecified.
        let unspecified = if v6 {
            IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED)
        } else {
            IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED)
        };
        r.ip(e
            .backend
            .filter(|b| b.is_ipv6() == v6)
            .unwrap_or(unspecified));
        let st = &self.stats;
        let id = match e.event {
            Event::Created(why) => {
                r.u64(at).u64(at).u8(1).u8(why as u8).u16(e.worker);
                // A re-selection or a flow picked up keeps the connection's first start; a new
                // connection (a SYN, also on the ports of an ended one) starts afresh.
                if why == Why::New {
                    self.starts.remove(&e.flow);
                }
                self.starts.insert(&e.flow, at);
                st.created.fetch_add(1, Relaxed);
                pick(CREATED4, CREATED6)
            }
            Event::Ended(reason) => {
                let start = self.starts.remove(&e.flow);
                if let Some(start) = start {
                    r.u64(start);
                } else {
                    st.no_start.fetch_add(1, Relaxed);
                }
                r.u64(at).u8(reason).u8(2).u16(e.worker);
                st.ended.fetch_add(1, Relaxed);
                match start {
                    Some(_) => pick(ENDED4, ENDED6),
                    None => pick(ENDED_NO_START4, ENDED_NO_START6),
                }
            }
            Event::Sampled(why, bytes) => {
                r.u64(at)
                    .u64(bytes as u64)
                    .u64(1)
                    .u64(SELECTOR_ID)
                    .u8(why as u8)
                    .u16(e.worker);
                st.sampled.fetch_add(1, Relaxed);
                pick(SAMPLED4, SAMPLED6)
            }
        };
        s.push(st, id, Some(r));
    }
}

/// Seconds since the epoch, for the message header.
fn export_time_s() -> u32 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as u32)
}

/// The exporter's reasons an entry ended, re-exported for the workers.
pub(crate) use end_reason::{END_OF_FLOW, IDLE_TIMEOUT, LACK_OF_RESOURCES};

#[cfg(test)]
mod tests {
    use super::*;
    use fp_wire::flow::{FlowKeyV4, FlowKeyV6};
    use fp_wire::ip::IpProtocol;

    #[test]
    fn events_cross_the_ring_unchanged() {
        let v4 = FlowKey::V4(FlowKeyV4 {
            src: [198, 51, 100, 7].into(),
            dst: [203, 0, 113, 10].into(),
            src_port: 40000,
            dst_port: 80,
            protocol: IpProtocol(6),
        });
        let v6 = FlowKey::V6(FlowKeyV6 {
            src: "2001:db8::7".parse().unwrap(),
            dst: "2001:db8::10".parse().unwrap(),
            src_port: 1,
            dst_port: 443,
            protocol: IpProtocol(17),
        });
        let events = [
            FlowEvent {
                event: Event::Created(Why::SecondChance),
                flow: v4,
                backend: Some("10.0.1.2".parse().unwrap()),
                at_ns: u64::MAX - 3,
                worker: 3,
            },
            FlowEvent {
                event: Event::Ended(IDLE_TIMEOUT),
                flow: v6,
                backend: Some("fd00::2".parse().unwrap()),
                at_ns: 1,
                worker: 65535,
            },
            FlowEvent {
                event: Event::Sampled(Why::NoEntry, 1514),
                flow: v6,
                backend: None,
                at_ns: 7,
                worker: 0,
            },
        ];
        let (mut t, mut q) = tap(0, 4);
        for e in &events {
            assert!(t.ring.push(&e.encode()));
        }
        assert_eq!(q.take(), None, "nothing before the burst's publish");
        t.publish();
        for e in &events {
            assert_eq!(q.take().as_ref(), Some(e));
        }
        assert_eq!(q.take(), None);
    }
}
