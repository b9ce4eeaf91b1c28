//! sFlow version 5 from the switch: packet samples and interface counters, to the collectors of
//! `[sflow]`.
//!
//! **Packet samples.** Each port samples the frames it receives, one in `sample_one_in` on
//! average: a worker keeps a skip count per port, drawn uniformly from 1..=2N-1 after each sample
//! (mean N, as the sFlow specification's agents do), and counts a burst down at once (a burst
//! comes from one port), so a frame that is not sampled costs nothing. A sampled frame's first
//! 128 bytes (as received), its length, its input port, where it went (one port, flooded to
//! several, or dropped) and its VLANs are handed to the exporter thread through a bounded
//! per-worker ring ([`fp_export::ring`], published once per switched batch); a full ring drops
//! the sample (counted in `drops` of later samples and in the metrics). The exporter numbers the samples per port, keeps each port's sample pool (frames
//! the port's samplers saw), and sends flow samples with a raw-header record and an
//! extended-switch record.
//!
//! **Counters.** Every `counters_interval_s` the exporter sends a generic interface counter
//! record per port: frames received and sent as the switch's ports counted them (in the unicast
//! fields; the broadcast and multicast split is not kept and is reported unknown, all ones, as
//! the specification asks), octets, errors and operational state from the kernel's interface
//! statistics, discards from the switch's ports.
//!
//! Data sources are the ports' kernel interface indexes (`ifindex`), so a collector can name
//! them by SNMP or `ip link`.

use fp_export::config::SflowSpec;
use fp_export::rate::RateLimit;
use fp_export::ring::{Consumer, Producer};
use fp_export::sflow::{Agent, CounterSample, DatagramBuilder, FlowSample, IfCounters, Output};
use fp_export::udp::Exporter;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Bytes of a sampled frame kept (the specification's customary header size).
pub const HEADER_BYTES: usize = 128;

/// Where a sampled frame went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Went {
    /// To one port.
    Port(u16),
    /// Flooded to this many ports.
    Flooded(u16),
    /// Dropped.
    Dropped,
    /// To the switch itself (a BPDU for the spanning tree).
    Internal,
}

/// One sampled frame, as a worker hands it over (fixed size, no allocation).
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    /// Input port.
    pub port: u16,
    /// Where it went.
    pub went: Went,
    /// VLAN in and out (none in a VLAN-unaware switch).
    pub vlans: Option<(u16, u16)>,
    /// Frames this worker's sampler of `port` saw since its previous sample (the sample pool's
    /// growth).
    pub pool: u32,
    /// Samples of `port` this worker dropped since its previous sample (its queue was full).
    pub drops: u32,
    /// Frame length.
    pub len: u16,
    /// Bytes of `header` in use.
    pub header_len: u8,
    /// The frame's first bytes.
    pub header: [u8; HEADER_BYTES],
}

/// Words of a sample in the ring.
const WORDS: usize = 3 + HEADER_BYTES / 8;

impl Sample {
    /// The sample as ring words: port, where it went and VLANs; pool, length, header length;
    /// the header.
    fn encode(&self) -> [u64; WORDS] {
        let (kind, arg) = match self.went {
            Went::Port(p) => (1u64, p as u64),
            Went::Flooded(n) => (2, n as u64),
            Went::Dropped => (3, 0),
            Went::Internal => (4, 0),
        };
        let (vlan, (vin, vout)) = match self.vlans {
            Some(v) => (1u64, v),
            None => (0, (0, 0)),
        };
        let mut w = [0u64; WORDS];
        w[0] = self.port as u64
            | kind << 16
            | arg << 19
            | (vin as u64 & 0xfff) << 35
            | (vout as u64 & 0xfff) << 47
            | vlan << 59;
        w[1] = self.pool as u64 | (self.len as u64) << 32 | (self.header_len as u64) << 48;
        w[2] = self.drops as u64;
        for (i, c) in self.header.chunks_exact(8).enumerate() {
            w[3 + i] = u64::from_le_bytes(c.try_into().expect("8 bytes"));
        }
        w
    }

    /// [`Sample::encode`] back; `None` for words no sample makes.
    fn decode(w: &[u64; WORDS]) -> Option<Sample> {
        let arg = ((w[0] >> 19) & 0xffff) as u16;
        let went = match (w[0] >> 16) & 7 {
            1 => Went::Port(arg),
            2 => Went::Flooded(arg),
            3 => Went::Dropped,
            4 => Went::Internal,
            _ => return None,
        };
        let mut header = [0u8; HEADER_BYTES];
        for (i, c) in header.chunks_exact_mut(8).enumerate() {
            c.copy_from_slice(&w[3 + i].to_le_bytes());
        }
        let vlans = (w[0] >> 59 & 1 == 1)
            .then(|| (((w[0] >> 35) & 0xfff) as u16, ((w[0] >> 47) & 0xfff) as u16));
        Some(Sample {
            port: w[0] as u16,
            went,
            vlans,
            pool: w[1] as u32,
            drops: w[2] as u32,
            len: (w[1] >> 32) as u16,
            header_len: ((w[1] >> 48) as u8).min(HEADER_BYTES as u8),
            header,
        })
    }

    /// A sample of `frame`, received on `port` (dropped until the switch says where it went).
    #[cold]
    pub fn of(port: u16, frame: &[u8]) -> Sample {
        let n = frame.len().min(HEADER_BYTES);
        let mut s = Sample {
            port,
            went: Went::Dropped,
            vlans: None,
            pool: 0,
            drops: 0,
            len: frame.len().min(u16::MAX as usize) as u16,
            header_len: n as u8,
            header: [0; HEADER_BYTES],
        };
        s.header[..n].copy_from_slice(&frame[..n]);
        s
    }
}

/// A worker's sampling state: per port the frames left to skip and the frames seen since the
/// last sample; the queue to the exporter.
#[derive(Debug)]
pub struct Sampler {
    ring: Producer,
    counters: Arc<SamplerCounters>,
    /// Samples queued and dropped, stored for readers at each publish.
    queued: u64,
    dropped: u64,
    one_in: Arc<AtomicU32>,
    /// The rate the skips were drawn for.
    rate: u32,
    skip: Vec<u32>,
    seen: Vec<u32>,
    /// Per port: samples dropped since the port's last sample went out.
    lost: Vec<u32>,
    rng: u64,
    /// Indexes (in the frames held) of the frames picked in the current bursts.
    picked: Vec<u32>,
}

/// A worker's sampling counters (written by the worker, read by the exporter and metrics).
#[derive(Debug, Default)]
pub struct SamplerCounters {
    /// Samples queued.
    pub queued: AtomicU64,
    /// Samples dropped: the queue was full.
    pub dropped: AtomicU64,
    /// Samples the exporter took.
    pub taken: AtomicU64,
}

/// The shared sampling rate (`sflow.sample_one_in`, 0: off), read by the workers between bursts.
pub type Rate = Arc<AtomicU32>;

/// The exporter's end of a worker's queue of samples.
#[derive(Debug)]
pub struct Samples {
    ring: Consumer,
    counters: Arc<SamplerCounters>,
}

impl Samples {
    /// The next sample the worker published.
    pub fn take(&mut self) -> Option<Sample> {
        let mut w = [0u64; WORDS];
        while self.ring.pop(&mut w) {
            if let Some(s) = Sample::decode(&w) {
                return Some(s);
            }
        }
        None
    }

    /// Whether the worker published samples not taken yet.
    pub fn waiting(&self) -> bool {
        self.ring.waiting() > 0
    }

    /// Give the slots of the samples taken back to the worker.
    pub fn release(&mut self) {
        self.ring.release();
    }

    /// The worker's counters.
    pub fn counters(&self) -> &Arc<SamplerCounters> {
        &self.counters
    }
}

/// A sampler for worker `worker` of a switch of `ports` ports with a queue of `queue` samples,
/// following `rate`, and the exporter's end of its queue.
pub fn sampler(worker: usize, ports: usize, queue: usize, rate: Rate) -> (Sampler, Samples) {
    let (p, c) = fp_export::ring::ring(queue, WORDS);
    let counters = Arc::new(SamplerCounters::default());
    let s = Sampler {
        ring: p,
        queued: 0,
        dropped: 0,
        counters: counters.clone(),
        one_in: rate,
        rate: 0,
        skip: vec![0; ports],
        seen: vec![0; ports],
        lost: vec![0; ports],
        rng: 0x2545_F491_4F6C_DD1D ^ (worker as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15),
        picked: Vec::with_capacity(64),
    };
    (s, Samples { ring: c, counters })
}

impl Sampler {
    /// A skip count, uniform over 1..=2N-1 (mean N).
    fn draw(&mut self) -> u32 {
        if self.rate <= 1 {
            return 1;
        }
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        let r = self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 32;
        1 + ((r * (2 * self.rate as u64 - 1)) >> 32) as u32
    }

    /// A burst of `n` frames from `port` is held from index `first` on: pick the frames to sample
    /// (their indexes go into [`Sampler::picked`]). O(1) unless one is picked.
    #[inline]
    pub fn burst(&mut self, port: u16, first: usize, n: usize) {
        let rate = self.one_in.load(Relaxed);
        if rate != self.rate {
            self.rate = rate;
            for p in 0..self.skip.len() {
                self.skip[p] = self.draw();
            }
        }
        if rate == 0 || n == 0 {
            return;
        }
        let p = port as usize;
        let (Some(skip), Some(_)) = (self.skip.get(p).copied(), self.seen.get(p)) else {
            return;
        };
        let mut left = skip as usize;
        let mut at = 0usize;
        let before = self.picked.len();
        while left <= n - at {
            at += left;
            self.picked.push((first + at - 1) as u32);
            left = self.draw() as usize;
        }
        self.skip[p] = (left - (n - at)) as u32;
        self.seen[p] = self.seen[p].wrapping_add(n as u32);
        // A full queue takes none of this burst's samples: counted as dropped here, so that a
        // saturated exporter costs the frames nothing more.
        if self.picked.len() > before && !self.ring.has_room() {
            let n = self.picked.len() - before;
            self.dropped += n as u64;
            self.lost[p] = self.lost[p].wrapping_add(n as u32);
            self.picked.truncate(before);
        }
    }

    /// Indexes of the held frames picked, in order.
    #[inline]
    pub fn picked(&self) -> &[u32] {
        &self.picked
    }

    /// Take the picks out (the caller switches the frames, then gives them back with
    /// [`Sampler::put_picked`]; nothing is allocated).
    #[inline]
    pub fn take_picked(&mut self) -> Vec<u32> {
        std::mem::take(&mut self.picked)
    }

    /// Give the picks' buffer back, emptied.
    #[inline]
    pub fn put_picked(&mut self, mut v: Vec<u32>) {
        v.clear();
        self.picked = v;
    }

    /// Whether a sample fits in the queue now: a picked frame whose sample would not fit is not
    /// copied ([`Sampler::missed`]).
    #[inline]
    pub fn room(&mut self) -> bool {
        self.ring.has_room()
    }

    /// A picked frame not sampled for lack of room: counted as dropped (its port's frames stay
    /// in the pool of its next sample).
    #[cold]
    pub fn missed(&mut self, port: u16) {
        self.dropped += 1;
        if let Some(l) = self.lost.get_mut(port as usize) {
            *l = l.wrapping_add(1);
        }
    }

    /// Queue a sample (its pool: the frames its port's sampler saw since the last one); the
    /// exporter sees it after [`Sampler::publish`].
    #[cold]
    pub fn send(&mut self, mut s: Sample) {
        let p = s.port as usize;
        s.pool = self.seen.get_mut(p).map_or(0, std::mem::take);
        s.drops = self.lost.get_mut(p).map_or(0, std::mem::take);
        if self.ring.push(&s.encode()) {
            self.queued += 1;
        } else {
            // The frames it stood for stay in the pool of the next sample, and it counts among
            // the next one's drops.
            if let (Some(seen), Some(lost)) = (self.seen.get_mut(p), self.lost.get_mut(p)) {
                *seen = seen.wrapping_add(s.pool);
                *lost = lost.wrapping_add(s.drops).wrapping_add(1);
            }
            self.dropped += 1;
        }
    }

    /// Hand the samples queued so far to the exporter (once per switched batch), and publish
    /// the counts.
    #[inline]
    pub fn publish(&mut self) {
        self.ring.publish();
        let c = &self.counters;
        if c.queued.load(Relaxed) != self.queued {
            c.queued.store(self.queued, Relaxed);
        }
        if c.dropped.load(Relaxed) != self.dropped {
            c.dropped.store(self.dropped, Relaxed);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The exporter

/// How often the exporter thread drains the workers' queues.
pub const DRAIN_EVERY: Duration = Duration::from_millis(20);

/// A port as the exporter reports it.
#[derive(Clone, Debug)]
pub struct PortInfo {
    /// Interface name.
    pub name: String,
    /// Kernel interface index (the sFlow data source and the ports' ifIndex).
    pub ifindex: u32,
}

/// The kernel index of interface `name` (0 if unknown).
pub fn ifindex(name: &str) -> u32 {
    std::fs::read_to_string(format!("/sys/class/net/{name}/ifindex"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

/// Frames each port received and sent and refused, summed over the workers (the engine's port
/// counters); the exporter asks for them when it sends counters.
pub type PortTotals = Box<dyn Fn() -> Vec<PortTraffic> + Send>;

/// One port's traffic as the switch counted it.
#[derive(Clone, Copy, Debug, Default)]
pub struct PortTraffic {
    /// Frames received.
    pub rx: u64,
    /// Frames sent.
    pub tx: u64,
    /// Frames the port dropped on receive.
    pub rx_dropped: u64,
    /// Frames the port could not send.
    pub tx_dropped: u64,
}

/// What the exporter did, for the metrics.
#[derive(Debug, Default)]
pub struct SflowStats {
    /// Flow samples sent.
    pub flow_samples: AtomicU64,
    /// Counter samples sent.
    pub counter_samples: AtomicU64,
    /// Datagrams sent (one per collector).
    pub datagrams: AtomicU64,
    /// Datagrams the socket refused.
    pub failed: AtomicU64,
    /// Every worker's sampler counters.
    pub samplers: Mutex<Vec<Arc<SamplerCounters>>>,
}

impl SflowStats {
    /// Samples waiting in the workers' queues, and samples the workers dropped.
    pub fn queues(&self) -> (u64, u64) {
        let s = self.samplers.lock().unwrap_or_else(|p| p.into_inner());
        s.iter().fold((0, 0), |(w, d), c| {
            let q = c.queued.load(Relaxed);
            (
                w + q.saturating_sub(c.taken.load(Relaxed)),
                d + c.dropped.load(Relaxed),
            )
        })
    }
}

/// Per port: sequence numbers and sample pool.
#[derive(Clone, Copy, Debug, Default)]
struct Source {
    flow_seq: u32,
    counter_seq: u32,
    pool: u32,
    drops: u32,
}

/// The sFlow exporter thread's state.
pub struct SflowExporter {
    queues: Vec<Samples>,
    spec: Arc<Mutex<Option<SflowSpec>>>,
    current: Option<(SflowSpec, Exporter, DatagramBuilder)>,
    ports: Vec<PortInfo>,
    sources: Vec<Source>,
    totals: PortTotals,
    stats: Arc<SflowStats>,
    started: Instant,
    counters_sent: Option<Instant>,
    /// Settings whose socket could not be opened (not tried again until they change).
    failed: Option<SflowSpec>,
    /// `sflow.max_samples_per_second`.
    limit: RateLimit,
}

impl SflowExporter {
    /// An exporter of the samplers' queues for `ports`, following `spec` (none: off).
    pub fn new(
        queues: Vec<Samples>,
        spec: Arc<Mutex<Option<SflowSpec>>>,
        ports: Vec<PortInfo>,
        totals: PortTotals,
        stats: Arc<SflowStats>,
    ) -> SflowExporter {
        *stats.samplers.lock().unwrap_or_else(|p| p.into_inner()) =
            queues.iter().map(|q| q.counters.clone()).collect();
        SflowExporter {
            queues,
            spec,
            current: None,
            sources: vec![Source::default(); ports.len()],
            ports,
            totals,
            stats,
            started: Instant::now(),
            counters_sent: None,
            failed: None,
            limit: RateLimit::new(),
        }
    }

    /// Drain every [`DRAIN_EVERY`] (at once again while a worker keeps its queue at least a
    /// quarter full and the rate limit allows) until `stop` is set (then once more, without the
    /// limit).
    pub fn run(mut self, stop: Arc<AtomicBool>) {
        let capacity = self
            .queues
            .iter()
            .map(|q| q.ring.capacity())
            .min()
            .unwrap_or(0);
        loop {
            let stopping = stop.load(Relaxed);
            let busiest = self.drain_within(!stopping);
            if stopping {
                return;
            }
            if busiest < capacity / 4 || self.limit.limited() {
                std::thread::sleep(DRAIN_EVERY);
            }
        }
    }

    fn uptime_ms(&self) -> u32 {
        self.started.elapsed().as_millis() as u32
    }

    /// Follow the settings: a change opens a new socket; none stops the export.
    fn follow(&mut self) {
        let spec = self.spec.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if self.current.as_ref().map(|c| &c.0) == spec.as_ref() || self.failed == spec {
            return;
        }
        // Only the rate limit changed: followed in place (the same socket and sequence).
        if let (Some((cur, ..)), Some(new)) = (&mut self.current, &spec) {
            let rate = new.max_samples_per_second;
            if *cur
                == (SflowSpec {
                    max_samples_per_second: cur.max_samples_per_second,
                    ..new.clone()
                })
            {
                cur.max_samples_per_second = rate;
                return;
            }
        }
        self.failed = None;
        self.send();
        let old = self.current.take();
        self.current = spec.and_then(|s| match Exporter::new(&s.collectors) {
            Ok(e) => {
                let agent = Agent {
                    address: s.agent,
                    sub_agent_id: s.sub_agent_id,
                };
                // The same agent keeps its datagram sequence numbers across a reload (a
                // collector reads a sequence going back as the agent restarting).
                let b = match old {
                    Some((o, _, b))
                        if o.agent == s.agent
                            && o.sub_agent_id == s.sub_agent_id
                            && o.max_datagram_bytes == s.max_datagram_bytes =>
                    {
                        b
                    }
                    _ => DatagramBuilder::new(agent, s.max_datagram_bytes),
                };
                Some((s, e, b))
            }
            Err(e) => {
                // Said once: the same settings are not tried again until a reload changes them.
                fp_control::log(format_args!(
                    "warning: sFlow export off until the configuration changes: {e}"
                ));
                self.failed = Some(s);
                None
            }
        });
        self.counters_sent = None;
    }

    /// Take the waiting samples (as many as `sflow.max_samples_per_second` allows), send them,
    /// and the counters when due; returns the most samples taken from one queue.
    pub fn drain(&mut self) -> usize {
        self.drain_within(true)
    }

    /// [`SflowExporter::drain`], within the rate limit ([`fp_export::rate`]) or not.
    fn drain_within(&mut self, limit: bool) -> usize {
        self.follow();
        let rate = match &self.current {
            Some((s, ..)) if limit => s.max_samples_per_second,
            _ => 0,
        };
        let mut queues = std::mem::take(&mut self.queues);
        let mut budget = std::mem::take(&mut self.limit);
        let taken = budget.take(
            rate,
            &mut queues,
            |q| match q.take() {
                Some(s) => {
                    self.flow(&s);
                    true
                }
                None => false,
            },
            Samples::waiting,
        );
        self.limit = budget;
        let mut busiest = 0;
        for (q, t) in queues.iter_mut().zip(taken) {
            q.release();
            q.counters.taken.fetch_add(t, Relaxed);
            busiest = busiest.max(t as usize);
        }
        self.queues = queues;
        if let Some((s, ..)) = &self.current {
            let every = Duration::from_secs(s.counters_interval_s as u64);
            if s.counters_interval_s > 0 && self.counters_sent.is_none_or(|t| t.elapsed() >= every)
            {
                self.counters_sent = Some(Instant::now());
                self.counters();
            }
        }
        self.send();
        busiest
    }

    /// Append a sample, sending the datagram first when it is full.
    fn push(&mut self, add: impl Fn(&mut DatagramBuilder) -> bool) {
        let up = self.uptime_ms();
        let Some((_, _, b)) = &mut self.current else {
            return;
        };
        if !b.is_open() {
            b.begin(up);
        }
        if add(b) {
            return;
        }
        self.send();
        let Some((_, _, b)) = &mut self.current else {
            return;
        };
        b.begin(up);
        let fitted = add(b);
        debug_assert!(fitted, "a sample larger than a datagram");
    }

    /// Send the datagram being written, if it holds samples.
    fn send(&mut self) {
        let Some((_, e, b)) = &mut self.current else {
            return;
        };
        if !b.is_open() || b.samples() == 0 {
            return;
        }
        let before = e.sent();
        e.send(b.finish());
        let after = e.sent();
        self.stats
            .datagrams
            .fetch_add(after.messages - before.messages, Relaxed);
        self.stats
            .failed
            .fetch_add(after.failed - before.failed, Relaxed);
    }

    fn flow(&mut self, s: &Sample) {
        let Some((spec, ..)) = &self.current else {
            return;
        };
        let rate = spec.sample_one_in;
        let p = s.port as usize;
        let (Some(info), Some(src)) = (self.ports.get(p).cloned(), self.sources.get_mut(p)) else {
            return;
        };
        src.flow_seq = src.flow_seq.wrapping_add(1);
        src.pool = src.pool.wrapping_add(s.pool);
        src.drops = src.drops.wrapping_add(s.drops);
        let output = match s.went {
            Went::Port(q) => Output::Port(self.ports.get(q as usize).map_or(0, |i| i.ifindex)),
            Went::Flooded(n) => Output::Multiple(n as u32),
            Went::Dropped => Output::Dropped,
            // The specification's "internal" interface (the agent itself).
            Went::Internal => Output::Port(0x3FFF_FFFF),
        };
        let f = FlowSample {
            sequence: src.flow_seq,
            source_index: info.ifindex,
            sampling_rate: rate,
            sample_pool: src.pool,
            drops: src.drops,
            input: info.ifindex,
            output,
            frame_length: s.len as u32,
            header: &s.header[..s.header_len as usize],
            vlans: s.vlans,
        };
        self.push(|b| b.push_flow(&f));
        self.stats.flow_samples.fetch_add(1, Relaxed);
    }

    /// A generic interface counter record per port.
    fn counters(&mut self) {
        let traffic = (self.totals)();
        for p in 0..self.ports.len() {
            let info = self.ports[p].clone();
            let t = traffic.get(p).copied().unwrap_or_default();
            let k = Kernel::read(&info.name);
            self.sources[p].counter_seq = self.sources[p].counter_seq.wrapping_add(1);
            let c = CounterSample {
                sequence: self.sources[p].counter_seq,
                source_index: info.ifindex,
                counters: IfCounters {
                    index: info.ifindex,
                    if_type: fp_export::sflow::IF_TYPE_ETHERNET_CSMACD,
                    speed: k.speed_bps,
                    direction: fp_export::sflow::IF_DIRECTION_FULL_DUPLEX,
                    status: fp_export::sflow::IF_STATUS_ADMIN_UP
                        | if k.up {
                            fp_export::sflow::IF_STATUS_OPER_UP
                        } else {
                            0
                        },
                    in_octets: k.rx_bytes,
                    in_ucast: t.rx as u32,
                    in_multicast: u32::MAX,
                    in_broadcast: u32::MAX,
                    in_discards: t.rx_dropped as u32,
                    in_errors: k.rx_errors as u32,
                    in_unknown_protos: u32::MAX,
                    out_octets: k.tx_bytes,
                    out_ucast: t.tx as u32,
                    out_multicast: u32::MAX,
                    out_broadcast: u32::MAX,
                    out_discards: t.tx_dropped as u32,
                    out_errors: k.tx_errors as u32,
                    promiscuous: 1,
                },
            };
            self.push(|b| b.push_counters(&c));
            self.stats.counter_samples.fetch_add(1, Relaxed);
        }
    }
}

/// What the kernel says about an interface.
#[derive(Debug, Default)]
struct Kernel {
    rx_bytes: u64,
    tx_bytes: u64,
    rx_errors: u64,
    tx_errors: u64,
    speed_bps: u64,
    up: bool,
}

impl Kernel {
    fn read(name: &str) -> Kernel {
        let num = |f: &str| -> u64 {
            std::fs::read_to_string(format!("/sys/class/net/{name}/{f}"))
                .ok()
                .and_then(|s| s.trim().parse::<i64>().ok())
                .map_or(0, |v| v.max(0) as u64)
        };
        Kernel {
            rx_bytes: num("statistics/rx_bytes"),
            tx_bytes: num("statistics/tx_bytes"),
            rx_errors: num("statistics/rx_errors"),
            tx_errors: num("statistics/tx_errors"),
            // Mb/s in sysfs (-1, read as 0, when the driver does not know: veth).
            speed_bps: num("speed") * 1_000_000,
            up: num("carrier") == 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_cross_the_ring_unchanged() {
        let rate: Rate = Arc::new(AtomicU32::new(0));
        let (mut s, mut q) = sampler(0, 4, 8, rate);
        let frame: Vec<u8> = (0..200u32).map(|i| i as u8).collect();
        let mut a = Sample::of(3, &frame);
        a.went = Went::Flooded(7);
        a.vlans = Some((4094, 4094));
        let mut b = Sample::of(1, &frame[..61]);
        b.went = Went::Internal;
        s.seen[3] = 1000;
        s.lost[3] = 2;
        s.send(a);
        s.send(b);
        s.publish();
        let x = q.take().expect("first");
        assert_eq!(
            (x.port, x.went, x.vlans),
            (3, Went::Flooded(7), Some((4094, 4094)))
        );
        assert_eq!((x.pool, x.drops, x.len, x.header_len), (1000, 2, 200, 128));
        assert_eq!(&x.header[..], &frame[..128]);
        let y = q.take().expect("second");
        assert_eq!(
            (y.port, y.went, y.vlans, y.len),
            (1, Went::Internal, None, 61)
        );
        assert_eq!(&y.header[..61], &frame[..61]);
        assert!(q.take().is_none());
    }
}
