//! `flowplane flowlet`: the Flowlet load balancer (Switcharoo's driving network function, on
//! `fp-flowstate`) over a pcap file or generated traffic, with per-outcome counters — a stage of
//! the engine, fed by the engine's software dispatcher.
//!
//! ```text
//!   input port ─► dispatcher: 5-tuple hash (3-tuple for fragments), batching window
//!                   ─► worker 0: parse, drop malformed by reason, FlowletLb (IPv4) + (IPv6) ─┐
//!                   ─► worker 1: ...                                                        ─┼─► output port
//!                   ─► ...                                                                  ─┘
//! ```
//!
//! * **Parsing and malformed input.** Each worker parses every frame it gets once with
//!   [`PacketSummary::parse`] (IPv4 header checksum verified). A frame that does not parse — not
//!   IP, truncated, bad checksum, ... — is counted under the parser's reason
//!   ([`fp_wire::Error::name`]) and dropped; it never reaches the balancer.
//! * **Flow key and steering.** The key is the 5-tuple (`FiveTuple` / `FiveTuple6`; ports 0 for
//!   protocols without ports). Fragments (first or not) are keyed with ports 0, so every fragment of
//!   a datagram — the later ones carry no ports — belongs to one flow and leaves on one output, in
//!   order. The dispatcher steers by the 5-tuple hash (3-tuple for fragments): every packet of a
//!   flow meets the same worker, which owns its tables (per-worker state is never shared).
//! * **Workers.** One `FlowletLb` per address family per worker (the IPv6 one is created at the
//!   first IPv6 packet). Each balances its own traffic over the outputs (least-loaded by bytes, or
//!   random); the sum of balanced shares is balanced.
//! * **Buffers and recirculation.** A packet's buffer is parked in the worker's slab and its index is
//!   the `token` handed to `FlowletLb::process`; a packet that recirculates keeps its buffer there
//!   until its decision comes in a later pass. Decisions come in transmit order and are applied in
//!   that order: `Forward(o)` rewrites the destination MAC to output `o`'s next hop and sends the
//!   frame, leaving every other byte unchanged; `Drop(reason)` frees the buffer (counted by reason).
//!   At the end of the input every worker flushes (the stage's `finish`), so every packet gets a
//!   decision.
//! * **Next hops.** Output `o` is the MAC `02:66:6c:00:HH:LL` (`HH:LL` = `o` big-endian; 02 =
//!   locally administered unicast, 66:6c = "fl"), or the `o`-th address of `--next-hops`.
//!
//! # Time: trace time with a batching window
//!
//! Time comes from the packets (pcap timestamps, generator time), so a capture replays the same way
//! however fast the machine is. A pass runs at the latest timestamp of its burst, and the table's
//! expiry is measured at that time, so a burst must not span much trace time: a flowlet packet
//! processed long after it arrived could find its flowlet expired. Two rules bound the delay, like a
//! NIC's interrupt-moderation window on a live port:
//!
//! * the dispatcher closes a worker's burst at 32 packets *or* when the next packet for that worker
//!   arrived more than `window` after the burst's first one (the engine's batching window);
//! * a worker whose next burst starts more than `window` after its last pass first finishes its
//!   recirculating packets (`flush`) at the time of that last pass.
//!
//! So a packet's passes run within `window` of its arrival plus `2 * window` per recirculation.
//! The default window is a tenth of the flowlet gap (5 us for 50 us). A worker that gets no burst for
//! 5 ms of wall time (input stalled) also flushes (the stage's `idle`), so held buffers always come
//! back.
//!
//! Trade-off: the dispatcher (steering) runs on the calling thread and can limit the rate on
//! small machines; the report therefore also gives the workers' own time per packet.

use anyhow::{bail, Context, Result};
use fp_engine::dispatch::{self, Steering};
use fp_engine::driver::{Clock, Options};
use fp_engine::generator::{GenConfig, Generator, Mix, Target};
use fp_engine::memory::NullPort;
use fp_engine::pcap::{PcapReader, PcapWriter};
use fp_engine::port::{Port, PortStats};
use fp_flowstate::workload::{TrafficGen, Workload};
use fp_flowstate::{
    Action, Config, Decision, FiveTuple, FiveTuple6, FlowletConfig, FlowletCounters, FlowletLb,
    Mode, PacketIn, Policy, Stats,
};
use fp_pipeline::craft::{self, Endpoints};
use fp_pipeline::packet::{Packet, Pool, MAX_BURST};
use fp_pipeline::stage::{Outputs, Stage};
use fp_wire::ethernet::MacAddr;
use fp_wire::ip::{IpPair, IpProtocol};
use fp_wire::PacketSummary;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

/// Workloads of `fp_flowstate::workload` (the paper's §5 traffic) accepted by `--generate`.
const WORKLOADS: &[&str] = &["1-pkt", "2-pkt", "8-pkt", "zipf-flows"];

#[derive(clap::Args, Debug)]
pub struct FlowletArgs {
    /// Input capture (pcap, Ethernet or raw IP).
    #[arg(long = "in", value_name = "IN.pcap", conflicts_with = "generate")]
    pub input: Option<PathBuf>,
    /// Output capture: every forwarded frame, its destination MAC set to its output's next hop.
    /// Required with --in; optional with --generate (default: count and discard).
    #[arg(long = "out", value_name = "OUT.pcap")]
    pub output: Option<PathBuf>,
    /// Generated traffic instead of a capture: a Switcharoo workload (1-pkt, 2-pkt, 8-pkt: flows of
    /// k packets within 50 us; zipf-flows: 1M flows, Zipf(1)) or a traffic-generator mix (syn,
    /// established, zipf, constant, v4v6, fragmented, malformed, demo).
    #[arg(
        long,
        value_name = "NAME",
        required_unless_present_any = ["input", "interface"]
    )]
    pub generate: Option<String>,
    /// Live: the input interface (frames to balance arrive here); needs --paths and --next-hops.
    #[arg(long, value_name = "IF", conflicts_with_all = ["input", "generate", "output"], requires = "paths")]
    pub interface: Option<String>,
    /// Live: the output paths, one interface each, comma-separated; path o's frames leave on the
    /// o-th interface with destination MAC the o-th of --next-hops and source MAC the interface's.
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "IF1,IF2,...",
        requires = "interface"
    )]
    pub paths: Vec<String>,
    /// Live: port driver, af_packet (TPACKET_V3 + fan-out) or af_xdp.
    #[arg(long, default_value = "af_packet")]
    pub driver: fp_engine::live::Driver,
    /// Live, AF_XDP: where the XDP program runs: auto, native or generic.
    #[arg(long, default_value = "auto")]
    pub xdp_mode: fp_engine::afxdp::ModeChoice,
    /// Live: serve metrics, status and trace over HTTP on this address.
    #[arg(long, value_name = "ADDR")]
    pub admin: Option<std::net::SocketAddr>,
    /// Live: do not look for tracer probes.
    #[arg(long)]
    pub no_trace: bool,
    /// Generated packets.
    #[arg(long, default_value_t = 4_000_000)]
    pub packets: u64,
    /// Generated packet rate in Mpps: it spaces the timestamps (12.5 = 100 Gbit/s of 1000-byte
    /// packets, the paper's setting).
    #[arg(long, default_value_t = 12.5)]
    pub mpps: f64,
    /// Frame size of the Switcharoo workloads (UDP frames).
    #[arg(long, default_value_t = 1000)]
    pub frame_bytes: usize,
    /// Connections of the traffic-generator mixes.
    #[arg(long, default_value_t = 200_000)]
    pub conns: u64,
    /// Number of outputs (paths or next hops).
    #[arg(long, default_value_t = 4)]
    pub outputs: u16,
    /// Next-hop MAC of each output, comma-separated (sets the number of outputs). Default:
    /// 02:66:6c:00:HH:LL for output HHLL.
    #[arg(long, value_name = "MAC,MAC,...", value_delimiter = ',')]
    pub next_hops: Vec<String>,
    /// Flowlet gap in microseconds: a longer pause lets the flow's next packet move (also the
    /// table's expiry, from the last packet).
    #[arg(long, default_value_t = 50.0)]
    pub gap_us: f64,
    /// Batching window in microseconds (see the module doc; default: gap / 10).
    #[arg(long)]
    pub window_us: Option<f64>,
    /// Worker threads (default: one per CPU).
    #[arg(long)]
    pub workers: Option<usize>,
    /// Cuckoo slots per array of each worker's table (the table holds twice as many flows).
    #[arg(long, default_value_t = 32 * 1024)]
    pub slots: usize,
    /// Consistency mode: strict (default), weak (the paper's Tofino code) or unordered.
    #[arg(long, default_value = "strict", value_parser = parse_mode)]
    pub mode: Mode,
    /// Output choice for a new flowlet: least-loaded (bytes) or random.
    #[arg(long, default_value = "least-loaded", value_parser = parse_policy)]
    pub policy: Policy,
    /// Seed of the steering and table hashes and the generators (default: random, printed).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Do not pin worker i to CPU i.
    #[arg(long)]
    pub no_pin: bool,
    /// Write the summary (counters, rates) as one JSON object to this file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

fn parse_mode(s: &str) -> Result<Mode, String> {
    match s {
        "strict" => Ok(Mode::Strict),
        "weak" => Ok(Mode::Weak),
        "unordered" => Ok(Mode::Unordered),
        _ => Err(format!("{s:?}: use strict, weak or unordered")),
    }
}

fn parse_policy(s: &str) -> Result<Policy, String> {
    match s {
        "least-loaded" => Ok(Policy::LeastLoaded),
        "random" => Ok(Policy::Random),
        _ => Err(format!("{s:?}: use least-loaded or random")),
    }
}

/// The default next hop of output `o`: 02:66:6c:00:HH:LL.
pub fn default_next_hop(o: u16) -> MacAddr {
    let [h, l] = o.to_be_bytes();
    MacAddr([0x02, 0x66, 0x6c, 0x00, h, l])
}

fn parse_mac(s: &str) -> Result<MacAddr> {
    // '-' separators (Windows style) are accepted too.
    s.trim()
        .replace('-', ":")
        .parse::<MacAddr>()
        .with_context(|| {
            format!("--next-hops: {s:?} is not a MAC address (six hex bytes separated by ':')")
        })
}

// ---- flow keys ----------------------------------------------------------------------------------

/// A packet's flow key, by address family.
#[derive(Clone, Copy, Debug)]
enum Key {
    V4(FiveTuple),
    V6(FiveTuple6),
}

impl Key {
    /// The key of a parsed frame (ports 0 for fragments: see the module doc).
    fn of(s: &PacketSummary) -> Key {
        let (sport, dport) = if s.is_fragment() {
            (0, 0)
        } else {
            (s.src_port, s.dst_port)
        };
        let proto = s.protocol.0;
        match s.addrs {
            IpPair::V4(a, b) => Key::V4(FiveTuple::new(a.into(), b.into(), sport, dport, proto)),
            IpPair::V6(a, b) => Key::V6(FiveTuple6 {
                src: a.octets(),
                dst: b.octets(),
                sport,
                dport,
                proto,
            }),
        }
    }
}

/// A parsed packet on its way into the balancer.
struct Item {
    pkt: Packet,
    key: Key,
    /// Live: the tracer probe id the frame carries.
    probe: Option<u64>,
}

// ---- workers ------------------------------------------------------------------------------------

/// What one worker did.
#[derive(Clone, Debug, Default)]
struct WorkerReport {
    counters: FlowletCounters,
    stats: Stats,
    /// Forwarded packets by passes taken: 1, 2, 3, 4, 5 or more.
    passes: [u64; 5],
    max_passes: u16,
    packets: u64,
    busy: Duration,
    in_flight_end: usize,
    /// Frames dropped because they do not parse, by [`fp_wire::Error`] index.
    parse_drops: Vec<u64>,
}

pub(crate) struct Worker {
    cfg: FlowletConfig,
    v4: FlowletLb<FiveTuple>,
    v6: Option<FlowletLb<FiveTuple6>>,
    /// Buffers of the packets inside the balancer, indexed by token.
    slab: Vec<Option<Packet>>,
    free_tokens: Vec<u32>,
    in4: Vec<PacketIn<FiveTuple>>,
    in6: Vec<PacketIn<FiveTuple6>>,
    dec: Vec<Decision>,
    macs: Vec<MacAddr>,
    window_ns: u64,
    now: u64,
    started: bool,
    report: WorkerReport,
    /// The burst being parsed, with the packets' keys (reused).
    items: Vec<Item>,
    /// Where forwarded packets leave: port `output`, or (live, one port per path) port
    /// `output + o` for output `o`.
    output: usize,
    per_path: bool,
    /// Live: each path's own MAC, written as the source of the frames sent on it.
    src_macs: Vec<MacAddr>,
    /// Live: counters a metrics reader sees, and the tracer.
    pub(crate) live: Option<crate::live::Hooks>,
}

impl Worker {
    pub(crate) fn new(
        cfg: FlowletConfig,
        macs: Vec<MacAddr>,
        window_ns: u64,
        output: usize,
    ) -> Result<Worker> {
        let v4 = FlowletLb::new(cfg.clone())?;
        let cap = cfg.engine.recirc_capacity + 2 * MAX_BURST;
        Ok(Worker {
            cfg,
            v4,
            v6: None,
            slab: Vec::with_capacity(cap),
            free_tokens: Vec::with_capacity(cap),
            in4: Vec::with_capacity(MAX_BURST),
            in6: Vec::with_capacity(MAX_BURST),
            dec: Vec::with_capacity(cap),
            macs,
            window_ns,
            now: 0,
            started: false,
            report: WorkerReport {
                parse_drops: vec![0; fp_wire::Error::COUNT],
                ..WorkerReport::default()
            },
            items: Vec::with_capacity(MAX_BURST),
            output,
            per_path: false,
            src_macs: Vec::new(),
            live: None,
        })
    }

    /// Live: output `o` leaves on port `first_port + o` with source MAC `src_macs[o]`.
    pub(crate) fn per_path(mut self, first_port: usize, src_macs: Vec<MacAddr>) -> Worker {
        self.output = first_port;
        self.per_path = true;
        self.src_macs = src_macs;
        self
    }

    /// The balancers' flowlet events (new, after a gap, moved, same flowlet), both families.
    pub(crate) fn events(&self) -> [u64; 4] {
        let mut e = self.v4.events();
        if let Some(v6) = &self.v6 {
            for (a, b) in e.iter_mut().zip(v6.events()) {
                *a += b;
            }
        }
        e
    }

    fn in_flight(&self) -> usize {
        self.v4.in_flight() + self.v6.as_ref().map_or(0, |l| l.in_flight())
    }

    /// One burst: park the buffers, run one pass of each family's balancer, apply the decisions.
    fn burst(&mut self, items: &mut Vec<Item>, tx: &mut Outputs, dropped: &mut Pool) {
        if items.is_empty() {
            return;
        }
        let t0 = Instant::now();
        let (mut lo, mut hi) = (u64::MAX, 0);
        for it in items.iter() {
            lo = lo.min(it.pkt.ts_ns);
            hi = hi.max(it.pkt.ts_ns);
        }
        if self.started && lo > self.now.saturating_add(self.window_ns) && self.in_flight() > 0 {
            // Trace time jumps: finish the recirculating packets at the time of the last pass.
            self.flush_at(self.now, tx, dropped);
        }
        self.started = true;
        self.now = self.now.max(hi);
        for it in items.drain(..) {
            let token = match self.free_tokens.pop() {
                Some(t) => t,
                None => {
                    self.slab.push(None);
                    (self.slab.len() - 1) as u32
                }
            };
            let (ts_ns, len) = (it.pkt.ts_ns, it.pkt.len() as u32);
            if let (Some(id), Some(h)) = (it.probe, &mut self.live) {
                h.probe(token, id, it.pkt.data());
            }
            self.slab[token as usize] = Some(it.pkt);
            match it.key {
                Key::V4(key) => self.in4.push(PacketIn {
                    key,
                    ts_ns,
                    len,
                    token,
                }),
                Key::V6(key) => self.in6.push(PacketIn {
                    key,
                    ts_ns,
                    len,
                    token,
                }),
            }
        }
        self.report.packets += (self.in4.len() + self.in6.len()) as u64;
        let now = self.now;
        if !self.in4.is_empty() || self.v4.in_flight() > 0 {
            self.v4.process(now, &self.in4, &mut self.dec);
        }
        if !self.in6.is_empty() && self.v6.is_none() {
            self.v6 = Some(self.new_v6());
        }
        if let Some(v6) = &mut self.v6 {
            if !self.in6.is_empty() || v6.in_flight() > 0 {
                v6.process(now, &self.in6, &mut self.dec);
            }
        }
        self.in4.clear();
        self.in6.clear();
        self.apply(tx, dropped);
        self.report.busy += t0.elapsed();
    }

    #[cold]
    #[inline(never)]
    fn new_v6(&self) -> FlowletLb<FiveTuple6> {
        FlowletLb::new(self.cfg.clone()).expect("the same configuration built the IPv4 balancer")
    }

    /// Decide every packet in flight (end of input, idle input, or a jump in trace time).
    fn flush_at(&mut self, now: u64, tx: &mut Outputs, dropped: &mut Pool) {
        self.v4.flush(now, &mut self.dec);
        if let Some(v6) = &mut self.v6 {
            v6.flush(now, &mut self.dec);
        }
        self.apply(tx, dropped);
    }

    fn flush(&mut self, tx: &mut Outputs, dropped: &mut Pool) {
        let t0 = Instant::now();
        self.flush_at(self.now, tx, dropped);
        self.report.busy += t0.elapsed();
    }

    /// Apply the decisions, in transmit order.
    #[inline]
    fn apply(&mut self, tx: &mut Outputs, dropped: &mut Pool) {
        for d in self.dec.drain(..) {
            let Some(mut p) = self.slab[d.token as usize].take() else {
                // A token is handed out once and comes back once: this cannot happen.
                unreachable!("decision for token {} without a parked buffer", d.token);
            };
            self.free_tokens.push(d.token);
            if let Some(h) = &mut self.live {
                h.decided(&d, p.len(), &self.macs);
            }
            match d.action {
                Action::Forward(o) => {
                    p.data_mut()[..6].copy_from_slice(&self.macs[o as usize].0);
                    if let Some(src) = self.src_macs.get(o as usize) {
                        p.data_mut()[6..12].copy_from_slice(&src.0);
                    }
                    let port = if self.per_path {
                        self.output + o as usize
                    } else {
                        self.output
                    };
                    tx.to(port).push(p);
                    let i = (d.passes as usize).clamp(1, 5) - 1;
                    self.report.passes[i] += 1;
                    self.report.max_passes = self.report.max_passes.max(d.passes);
                }
                Action::Drop(_) => dropped.put(p),
            }
        }
    }

    fn report(mut self) -> WorkerReport {
        let mut c = self.v4.counters();
        let mut s = *self.v4.table_stats();
        if let Some(v6) = &self.v6 {
            add_counters(&mut c, &v6.counters());
            add_stats(&mut s, v6.table_stats());
        }
        self.report.counters = c;
        self.report.stats = s;
        self.report.in_flight_end = self.in_flight();
        self.report
    }
}

impl Stage for Worker {
    /// Parse the burst (malformed frames dropped here, counted by reason), then one pass of the
    /// balancers; forwarded frames go to the output port.
    fn process(
        &mut self,
        _port: usize,
        rx: &mut Vec<Packet>,
        out: &mut Outputs,
        pool: &mut Pool,
        _now_ns: u64,
    ) {
        if let Some(h) = &mut self.live {
            // Live: frames arriving on a path port are not the balancer's input.
            if !h.input(_port, rx, pool) {
                return;
            }
        }
        let mut items = std::mem::take(&mut self.items);
        for p in rx.drain(..) {
            match PacketSummary::parse(p.data()) {
                Ok(s) => items.push(Item {
                    key: Key::of(&s),
                    probe: match &self.live {
                        Some(h) if h.tracing() => fp_control::trace::probe_id(p.data()),
                        _ => None,
                    },
                    pkt: p,
                }),
                Err(e) => {
                    self.report.parse_drops[e as usize] += 1;
                    if let Some(h) = &self.live {
                        h.parse_error(e);
                    }
                    pool.put(p);
                }
            }
        }
        self.burst(&mut items, out, pool);
        self.items = items;
    }

    /// No input for a while (the input stalled): decide the held packets.
    fn idle(&mut self, _now_ns: u64, out: &mut Outputs, pool: &mut Pool) {
        if self.in_flight() > 0 {
            self.flush(out, pool);
        }
    }

    /// Live: publish the flowlet events for the metrics reader.
    fn maintain(&mut self, _now_ns: u64, _out: &mut Outputs, _pool: &mut Pool) {
        let e = self.events();
        if let Some(h) = &self.live {
            h.publish_events(e);
        }
    }

    /// End of input: every packet gets its decision.
    fn finish(&mut self, _now_ns: u64, out: &mut Outputs, pool: &mut Pool) {
        self.flush(out, pool);
    }
}

fn add_counters(a: &mut FlowletCounters, b: &FlowletCounters) {
    a.new_flowlets += b.new_flowlets;
    a.gap_flowlets += b.gap_flowlets;
    a.moved += b.moved;
    a.same_flowlet += b.same_flowlet;
    for (x, y) in a.packets_per_output.iter_mut().zip(&b.packets_per_output) {
        *x += y;
    }
    for (x, y) in a.bytes_per_output.iter_mut().zip(&b.bytes_per_output) {
        *x += y;
    }
    a.drops_pass_limit += b.drops_pass_limit;
    a.drops_late += b.drops_late;
    a.drops_overflow += b.drops_overflow;
    a.drops_ordering_full += b.drops_ordering_full;
}

fn add_stats(a: &mut Stats, b: &Stats) {
    a.packets += b.packets;
    a.passes += b.passes;
    a.exits += b.exits;
    a.inserts += b.inserts;
    a.hits_t1 += b.hits_t1;
    a.hits_t2 += b.hits_t2;
    a.recirculations += b.recirculations;
    a.transient_waits += b.transient_waits;
    a.order_waits += b.order_waits;
    a.swaps += b.swaps;
    a.swap_passes += b.swap_passes;
    a.evictions += b.evictions;
    a.swaps_late += b.swaps_late;
    a.expired_reclaimed += b.expired_reclaimed;
    a.expired_in_transit += b.expired_in_transit;
    a.transient_resets += b.transient_resets;
    a.order_skips += b.order_skips;
    a.drops_pass_limit += b.drops_pass_limit;
    a.drops_late += b.drops_late;
    a.drops_overflow += b.drops_overflow;
    a.drops_ordering_full += b.drops_ordering_full;
    a.drops_anomaly += b.drops_anomaly;
    a.anomalies += b.anomalies;
}

// ---- a run --------------------------------------------------------------------------------------

/// Settings of one run.
struct RunOpts {
    workers: usize,
    seed: u64,
    window_ns: u64,
    pin: bool,
    lb: FlowletConfig,
    macs: Vec<MacAddr>,
}

/// What a run did.
struct Summary {
    workers: Vec<WorkerReport>,
    parse_drops: [u64; fp_wire::Error::COUNT],
    elapsed: Duration,
    input: PortStats,
    output: PortStats,
}

fn run_flowlet(input: &mut dyn Port, output: &mut dyn Port, o: &RunOpts) -> Result<Summary> {
    let n = o.workers.max(1);
    let mut stages = Vec::with_capacity(n);
    for _ in 0..n {
        stages.push(Worker::new(o.lb.clone(), o.macs.clone(), o.window_ns, 1)?);
    }
    let steering = Steering {
        seed: o.seed,
        window_ns: Some(o.window_ns),
        // What every worker may hold (its recirculation queue, a burst being decided, its queued
        // bursts), plus the output in transit.
        buffers: n * (o.lb.engine.recirc_capacity + 34 * MAX_BURST) + 64 * MAX_BURST,
    };
    let opts = Options {
        name: "fp-flowlet".into(),
        pin: o.pin,
        clock: Clock::Packets,
        idle_after: Duration::from_millis(5),
        buffers: o.lb.engine.recirc_capacity + 4 * MAX_BURST,
        ..Options::default()
    };
    let d = dispatch::run(
        &mut [input, &mut *output],
        stages,
        &steering,
        &opts,
        &AtomicBool::new(false),
    )?;
    output
        .flush()
        .with_context(|| format!("writing {}", output.name()))?;
    let mut parse_drops = [0u64; fp_wire::Error::COUNT];
    let mut workers = Vec::with_capacity(n);
    for f in d.workers {
        let r = f.stage.report();
        for (a, b) in parse_drops.iter_mut().zip(&r.parse_drops) {
            *a += b;
        }
        workers.push(r);
    }
    Ok(Summary {
        workers,
        parse_drops,
        elapsed: d.elapsed,
        input: input.stats(),
        output: output.stats(),
    })
}

// ---- generated traffic --------------------------------------------------------------------------

/// A port that turns a Switcharoo workload (`fp_flowstate::workload`) into IPv4/UDP frames of
/// `frame_bytes` bytes with the workload's 5-tuples and timestamps. Each frame is a copy of one
/// template with the addresses, ports and IPv4 header checksum patched; the UDP checksum is 0 ("not
/// computed", allowed over IPv4), so generating a frame does not cost more than balancing it.
struct WorkloadPort {
    gen: TrafficGen,
    left: u64,
    template: Vec<u8>,
    start_ns: u64,
    stats: PortStats,
}

impl WorkloadPort {
    fn new(gen: TrafficGen, packets: u64, frame_bytes: usize, start_ns: u64) -> WorkloadPort {
        let mut template = vec![0u8; frame_bytes];
        let e = Endpoints::new("192.0.2.1", 1, "192.0.2.2", 2);
        let n = craft::udp_into(&e, frame_bytes - 42, &mut template);
        debug_assert_eq!(n, frame_bytes);
        template[40..42].fill(0);
        WorkloadPort {
            gen,
            left: packets,
            template,
            start_ns,
            stats: PortStats::default(),
        }
    }
}

impl Port for WorkloadPort {
    fn name(&self) -> &str {
        "workload"
    }

    fn rx_burst(&mut self, pool: &mut Pool, out: &mut Vec<Packet>, max: usize) -> usize {
        let mut n = 0;
        while n < max && self.left > 0 {
            let Some(mut p) = pool.get() else { break };
            let g = self.gen.next().expect("the workload generator is endless");
            let len = self.template.len();
            let f = &mut p.rx_area()[..len];
            f.copy_from_slice(&self.template);
            f[26..30].copy_from_slice(&g.key.src.to_be_bytes());
            f[30..34].copy_from_slice(&g.key.dst.to_be_bytes());
            f[34..36].copy_from_slice(&g.key.sport.to_be_bytes());
            f[36..38].copy_from_slice(&g.key.dport.to_be_bytes());
            f[24..26].fill(0);
            let h: &[u8; 20] = f[14..34].try_into().expect("20 bytes");
            let sum = fp_wire::checksum::finish(fp_wire::checksum::sum20(h));
            f[24..26].copy_from_slice(&sum.to_be_bytes());
            p.set_len(len);
            p.ts_ns = self.start_ns + g.at;
            out.push(p);
            self.left -= 1;
            n += 1;
        }
        self.stats.rx += n as u64;
        n
    }

    fn tx_burst(&mut self, batch: &mut Vec<Packet>, pool: &mut Pool) -> usize {
        self.stats.tx_dropped += batch.len() as u64;
        pool.put_all(batch);
        0
    }

    fn exhausted(&self) -> bool {
        self.left == 0
    }

    fn stats(&self) -> PortStats {
        self.stats
    }
}

fn generator(a: &FlowletArgs, name: &str, seed: u64) -> Result<Box<dyn Port>> {
    let start_ns = 1_000_000_000;
    let workload = match name {
        "1-pkt" => Some(Workload::ONE),
        "2-pkt" => Some(Workload::TWO),
        "8-pkt" => Some(Workload::EIGHT),
        "zipf-flows" => Some(Workload::ZIPF),
        _ => None,
    };
    if !(a.mpps > 0.0 && a.mpps.is_finite()) {
        bail!("--mpps {}: must be a positive rate", a.mpps);
    }
    if let Some(w) = workload {
        if !(42 + 18..=fp_pipeline::packet::MAX_FRAME).contains(&a.frame_bytes) {
            bail!(
                "--frame-bytes {}: must be 60 ..= {}",
                a.frame_bytes,
                fp_pipeline::packet::MAX_FRAME
            );
        }
        let gbps = a.mpps * 1e6 * a.frame_bytes as f64 * 8.0 / 1e9;
        let gen = TrafficGen::new(w, gbps, a.frame_bytes as u32, seed);
        return Ok(Box::new(WorkloadPort::new(
            gen,
            a.packets,
            a.frame_bytes,
            start_ns,
        )));
    }
    let Some(mix) = Mix::named(name, a.conns.max(1)) else {
        bail!(
            "--generate {name:?}: use one of {} or {}",
            WORKLOADS.join(", "),
            Mix::NAMES.join(", ")
        );
    };
    let target = |addr: &str, port, protocol| Target {
        addr: addr.parse().expect("literal address"),
        port,
        protocol,
    };
    Ok(Box::new(Generator::new(GenConfig {
        mix,
        targets: vec![
            target("203.0.113.10", 80, IpProtocol::TCP),
            target("203.0.113.53", 53, IpProtocol::UDP),
            target("2001:db8::10", 80, IpProtocol::TCP),
        ],
        packets: Some(a.packets),
        pps: a.mpps * 1e6,
        seed,
        start_ns,
    })))
}

// ---- the command --------------------------------------------------------------------------------

pub fn run(a: FlowletArgs) -> Result<()> {
    let macs: Vec<MacAddr> = if a.next_hops.is_empty() {
        if a.outputs == 0 {
            bail!("--outputs 0: at least one output is needed");
        }
        (0..a.outputs).map(default_next_hop).collect()
    } else {
        if a.next_hops.len() > u16::MAX as usize {
            bail!("--next-hops: at most 65535 outputs");
        }
        a.next_hops
            .iter()
            .map(|s| parse_mac(s))
            .collect::<Result<_>>()?
    };
    if !(a.gap_us > 0.0 && a.gap_us.is_finite()) {
        bail!("--gap-us {}: must be positive", a.gap_us);
    }
    let gap_ns = (a.gap_us * 1e3).round().max(1.0) as u64;
    let window_ns = match a.window_us {
        Some(w) if w >= 0.0 && w.is_finite() => (w * 1e3).round() as u64,
        Some(w) => bail!("--window-us {w}: must be 0 or more"),
        None => gap_ns / 10,
    };
    let seed = match a.seed {
        Some(s) => s,
        None => {
            let mut b = [0u8; 8];
            getrandom::getrandom(&mut b).context("drawing a random seed")?;
            u64::from_le_bytes(b)
        }
    };
    let lb = FlowletConfig {
        outputs: macs.len() as u16,
        flowlet_timeout_ns: gap_ns,
        policy: a.policy,
        table: Config {
            slots_per_array: a.slots,
            mode: a.mode,
            seed: fp_hash::splitmix64(seed ^ 0x7ab1e),
            ..Config::default()
        },
        engine: Default::default(),
    };
    if let Some(input) = &a.interface {
        if a.next_hops.is_empty() {
            bail!("--interface needs --next-hops: one next-hop MAC per path");
        }
        return crate::live::run(crate::live::LiveOptions {
            input: input.clone(),
            paths: a.paths.clone(),
            next_hops: macs,
            driver: a.driver,
            xdp_mode: a.xdp_mode,
            workers: fp_engine::driver::workers_or_cpus(a.workers),
            pin: !a.no_pin,
            lb,
            admin: a.admin,
            trace: !a.no_trace,
        });
    }
    let opts = RunOpts {
        workers: fp_engine::driver::workers_or_cpus(a.workers),
        seed,
        window_ns,
        pin: !a.no_pin,
        lb,
        macs,
    };

    let (mut input, source): (Box<dyn Port>, String) = match (&a.input, &a.generate) {
        (Some(p), _) => {
            if a.output.is_none() {
                bail!("--in needs --out OUT.pcap");
            }
            (Box::new(PcapReader::open(p)?), p.display().to_string())
        }
        (None, Some(g)) => (
            generator(&a, g, seed)?,
            format!("{} packets of {g:?} at {} Mpps", a.packets, a.mpps),
        ),
        (None, None) => bail!("give --in IN.pcap or --generate NAME"),
    };
    let mut output: Box<dyn Port> = match &a.output {
        Some(p) => Box::new(PcapWriter::create(p)?),
        None => Box::new(NullPort::default()),
    };
    println!(
        "flowplane flowlet: {source} -> {}; {} outputs, flowlet gap {} us, window {} us, {} workers, \
         {} slots per array ({:?}), {:?}, seed {seed:#x}",
        a.output
            .as_ref()
            .map_or("(discarded)".to_string(), |p| p.display().to_string()),
        opts.macs.len(),
        gap_ns as f64 / 1e3,
        window_ns as f64 / 1e3,
        opts.workers,
        a.slots,
        a.mode,
        a.policy,
    );
    let sum = run_flowlet(&mut *input, &mut *output, &opts)?;
    let json = report(&sum, &opts);
    if let Some(p) = &a.json {
        std::fs::write(p, format!("{json}\n"))
            .with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(())
}

/// Print the report; return it as JSON.
fn report(s: &Summary, o: &RunOpts) -> serde_json::Value {
    let mut c = FlowletCounters {
        packets_per_output: vec![0; o.macs.len()],
        bytes_per_output: vec![0; o.macs.len()],
        ..Default::default()
    };
    let mut st = Stats::default();
    let mut passes = [0u64; 5];
    let mut max_passes = 0;
    let (mut busy, mut handled, mut in_flight) = (Duration::ZERO, 0, 0);
    for w in &s.workers {
        add_counters(&mut c, &w.counters);
        add_stats(&mut st, &w.stats);
        for (x, y) in passes.iter_mut().zip(&w.passes) {
            *x += y;
        }
        max_passes = max_passes.max(w.max_passes);
        busy += w.busy;
        handled += w.packets;
        in_flight += w.in_flight_end;
    }
    let parse_total: u64 = s.parse_drops.iter().sum();
    let rx = s.input.rx;
    let fwd: u64 = c.packets_per_output.iter().sum();
    let table_drops = st.drops();
    let secs = s.elapsed.as_secs_f64();
    let busy_ns = if handled > 0 {
        busy.as_nanos() as f64 / handled as f64
    } else {
        0.0
    };
    println!();
    println!(
        "packets in      {rx:>12}   ({:.3} Mpps over {secs:.3} s wall clock, all workers; \
         worker busy {busy_ns:.1} ns per packet)",
        rx as f64 / secs.max(1e-9) / 1e6
    );
    println!(
        "packets out     {:>12}   ({fwd} forwarded by the balancer)",
        s.output.tx
    );
    println!(
        "flowlets        {:>12}   new (no state) / {} after a gap (moved: {}) / {} packets in the same flowlet",
        c.new_flowlets, c.gap_flowlets, c.moved, c.same_flowlet
    );
    println!("per output (next hop, packets, share, bytes):");
    for (i, m) in o.macs.iter().enumerate() {
        let p = c.packets_per_output[i];
        println!(
            "  {i:<4} {}  {p:>12} {:>7.2}% {:>14}",
            m,
            if fwd > 0 {
                100.0 * p as f64 / fwd as f64
            } else {
                0.0
            },
            c.bytes_per_output[i]
        );
    }
    println!(
        "drops by reason ({} in all):",
        parse_total + table_drops + s.input.rx_dropped
    );
    let mut parse_json = serde_json::Map::new();
    for (i, &k) in s.parse_drops.iter().enumerate() {
        if k > 0 {
            let name = fp_wire::Error::ALL[i].name();
            println!("  parse: {name:<28} {k:>10}");
            parse_json.insert(name.to_string(), k.into());
        }
    }
    let table = [
        ("pass_limit", st.drops_pass_limit),
        ("late", st.drops_late),
        ("recirc_overflow", st.drops_overflow),
        ("ordering_full", st.drops_ordering_full),
        ("anomaly", st.drops_anomaly),
    ];
    for (name, k) in table {
        if k > 0 {
            println!("  table: {name:<28} {k:>10}");
        }
    }
    if s.input.rx_dropped > 0 {
        println!("  input: {:<28} {:>10}", "too_large", s.input.rx_dropped);
    }
    if parse_total + table_drops + s.input.rx_dropped == 0 {
        println!("  none");
    }
    let pct = |k: u64| {
        if fwd > 0 {
            100.0 * k as f64 / fwd as f64
        } else {
            0.0
        }
    };
    println!(
        "passes per forwarded packet: 1: {:.3}%  2: {:.3}%  3: {:.3}%  4: {:.3}%  5+: {:.3}%  (max {max_passes})",
        pct(passes[0]),
        pct(passes[1]),
        pct(passes[2]),
        pct(passes[3]),
        pct(passes[4])
    );
    println!(
        "table: {} insertions, {} recirculations ({} waiting for a state in transit, {} for their turn), \
         {} swaps ({} swap passes), {} evictions; {:.4} recirculated passes per insertion",
        st.inserts,
        st.recirculations,
        st.transient_waits,
        st.order_waits,
        st.swaps,
        st.swap_passes,
        st.evictions,
        (st.recirculations + st.swap_passes) as f64 / st.inserts.max(1) as f64
    );
    if in_flight > 0 || st.anomalies > 0 {
        println!(
            "WARNING: {in_flight} packets still in flight at the end, {} anomalies",
            st.anomalies
        );
    }
    serde_json::json!({
        "packets_in": rx,
        "packets_out": s.output.tx,
        "forwarded": fwd,
        "elapsed_s": secs,
        "mpps": rx as f64 / secs.max(1e-9) / 1e6,
        "worker_busy_ns_per_packet": busy_ns,
        "workers": o.workers,
        "seed": o.seed,
        "window_ns": o.window_ns,
        "gap_ns": o.lb.flowlet_timeout_ns,
        "new_flowlets": c.new_flowlets,
        "gap_flowlets": c.gap_flowlets,
        "moved": c.moved,
        "same_flowlet": c.same_flowlet,
        "per_output": o.macs.iter().enumerate().map(|(i, m)| serde_json::json!({
            "next_hop": m.to_string(),
            "packets": c.packets_per_output[i],
            "bytes": c.bytes_per_output[i],
        })).collect::<Vec<_>>(),
        "drops": {
            "parse": parse_json,
            "table": table.iter().map(|(k, v)| ((*k).to_string(), serde_json::Value::from(*v)))
                .collect::<serde_json::Map<_, _>>(),
            "input_too_large": s.input.rx_dropped,
        },
        "passes_hist": passes,
        "max_passes": max_passes,
        "table": {
            "packets": st.packets,
            "passes": st.passes,
            "inserts": st.inserts,
            "recirculations": st.recirculations,
            "transient_waits": st.transient_waits,
            "order_waits": st.order_waits,
            "swaps": st.swaps,
            "swap_passes": st.swap_passes,
            "evictions": st.evictions,
            "anomalies": st.anomalies,
        },
        "in_flight_end": in_flight,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_hops_and_mac_parsing() {
        assert_eq!(default_next_hop(0).0, [0x02, 0x66, 0x6c, 0, 0, 0]);
        assert_eq!(
            default_next_hop(0x1234).0,
            [0x02, 0x66, 0x6c, 0, 0x12, 0x34]
        );
        assert_eq!(
            parse_mac("0a:1B:2c:3d:4e:5f").unwrap().0,
            [0x0a, 0x1b, 0x2c, 0x3d, 0x4e, 0x5f]
        );
        for bad in [
            "0a:1b:2c:3d:4e",
            "0a:1b:2c:3d:4e:5f:60",
            "0a:1b:2c:3d:4e:zz",
            "0a:1b:2c:3d:4e:123",
        ] {
            assert!(parse_mac(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn workload_frames_carry_the_workload_keys_and_parse() {
        let gen = TrafficGen::new(Workload::EIGHT, 100.0, 1000, 3);
        let mut expect = TrafficGen::new(Workload::EIGHT, 100.0, 1000, 3);
        let mut port = WorkloadPort::new(gen, 100, 1000, 5);
        let mut pool = Pool::new(64);
        let mut got = 0;
        while !port.exhausted() {
            let mut b = Vec::new();
            assert!(port.rx_burst(&mut pool, &mut b, MAX_BURST) > 0);
            for p in b {
                let g = expect.next().unwrap();
                let s = PacketSummary::parse(p.data()).expect("a valid frame");
                assert_eq!(p.len(), 1000);
                assert_eq!(p.ts_ns, 5 + g.at);
                let Key::V4(k) = Key::of(&s) else {
                    panic!("IPv4 expected")
                };
                assert_eq!(
                    (k.src, k.dst, k.sport, k.dport),
                    (g.key.src, g.key.dst, g.key.sport, g.key.dport)
                );
                got += 1;
                pool.put(p);
            }
        }
        assert_eq!(got, 100);
    }

    #[test]
    fn fragments_are_keyed_without_ports() {
        let e = Endpoints::new("198.51.100.1", 5000, "203.0.113.1", 6000);
        let frags = craft::udp_fragments(&e, 3000, 1200, 9);
        let keys: Vec<_> = frags
            .iter()
            .map(|f| match Key::of(&PacketSummary::parse(f).unwrap()) {
                Key::V4(k) => k,
                Key::V6(_) => panic!("IPv4 expected"),
            })
            .collect();
        assert!(keys.windows(2).all(|w| w[0] == w[1]));
        assert_eq!((keys[0].sport, keys[0].dport, keys[0].proto), (0, 0, 17));
        let whole = craft::udp(&e, 100);
        let Key::V4(k) = Key::of(&PacketSummary::parse(&whole).unwrap()) else {
            panic!("IPv4 expected")
        };
        assert_eq!((k.sport, k.dport), (5000, 6000));
    }
}
