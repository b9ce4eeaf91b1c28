//! The Flowlet balancer's stage: what one worker does with a burst. It parses every frame once
//! ([`PacketSummary::parse`], IPv4 header checksum verified; a frame that does not parse is
//! counted under the parser's reason and dropped), keys it by its 5-tuple, parks its buffer in the
//! worker's slab under a token, runs one pass of each address family's `FlowletLb`
//! (`fp-flowstate`), and applies the decisions in transmit order: `Forward(o)` rewrites the
//! destination MAC to output `o`'s next hop (live: the source MAC to the path's own) and sends the
//! frame; `Drop(reason)` frees the buffer, counted.
//!
//! * **Flow key.** The 5-tuple (`FiveTuple` / `FiveTuple6`; ports 0 for protocols without ports).
//!   Fragments (first or not) are keyed with ports 0, so every fragment of a datagram — the later
//!   ones carry no ports — belongs to one flow and leaves on one output, in order. Steering (the
//!   dispatcher's hash, the kernel's fan-out or the NIC's queues) sends every packet of a flow to
//!   the same worker, which owns its tables.
//! * **Recirculation.** A packet that recirculates keeps its buffer in the slab until its
//!   decision comes in a later pass. A burst that starts more than the batching window after the
//!   last pass first finishes the packets still recirculating (`flush`), at the time of that last
//!   pass; an idle input (the stage's `idle`) and the end of input (`finish`) flush too, so every
//!   packet gets a decision and held buffers always come back.
//! * **Time** is the packets' (the `ts_ns` a port stamps, or a capture's): the stage reads no
//!   clock, takes no lock and makes no system call. Live, the hooks (`Hooks`) count per path, per drop
//!   reason and per flowlet event for the metrics, and the tracer's records go into the worker's
//!   queue (`fp_pipeline::trace`).

use fp_flowstate::{
    Action, Decision, DropReason, FiveTuple, FiveTuple6, FlowKey, FlowletConfig, FlowletCounters,
    FlowletEvent, FlowletLb, PacketIn, Stats,
};
use fp_pipeline::packet::{Packet, Pool, MAX_BURST};
use fp_pipeline::stage::{Outputs, Stage};
use fp_pipeline::stats::Counter;
use fp_pipeline::trace::{probe_in, ProbeSender};
use fp_wire::ethernet::MacAddr;
use fp_wire::ip::IpPair;
use fp_wire::PacketSummary;
use std::sync::Arc;

// ---- flow keys ----------------------------------------------------------------------------------

/// A packet's flow key, by address family.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Key {
    V4(FiveTuple),
    V6(FiveTuple6),
}

impl Key {
    /// The key of a parsed frame (ports 0 for fragments: see the module doc).
    /// The flow's hash for the live path memory (any fixed seed: it stays in this worker).
    #[inline]
    pub(crate) fn hash(&self) -> u64 {
        const SEED: u64 = 0x666c_6f77_6c65_7473;
        match self {
            Key::V4(k) => k.hash64(SEED),
            Key::V6(k) => k.hash64(SEED),
        }
    }

    pub(crate) fn of(s: &PacketSummary) -> Key {
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
pub(crate) struct StageReport {
    pub(crate) counters: FlowletCounters,
    pub(crate) stats: Stats,
    /// Forwarded packets by passes taken: 1, 2, 3, 4, 5 or more.
    pub(crate) passes: [u64; 5],
    pub(crate) max_passes: u16,
    pub(crate) packets: u64,
    pub(crate) in_flight_end: usize,
    /// Frames dropped because they do not parse, by [`fp_wire::Error`] index.
    pub(crate) parse_drops: Vec<u64>,
}

/// One worker of the Flowlet balancer: a stage of the engine.
pub struct FlowletStage {
    cfg: FlowletConfig,
    v4: FlowletLb<FiveTuple>,
    v6: Option<FlowletLb<FiveTuple6>>,
    /// Buffers of the packets inside the balancer, indexed by token.
    slab: Vec<Option<Packet>>,
    /// Live: each parked packet's flow hash, indexed by token (for the path memory).
    flow_hash: Vec<u64>,
    free_tokens: Vec<u32>,
    in4: Vec<PacketIn<FiveTuple>>,
    in6: Vec<PacketIn<FiveTuple6>>,
    dec: Vec<Decision>,
    macs: Vec<MacAddr>,
    window_ns: u64,
    now: u64,
    started: bool,
    report: StageReport,
    /// The burst being parsed, with the packets' keys (reused).
    items: Vec<Item>,
    /// Where forwarded packets leave: port `output`, or (live, one port per path) port
    /// `output + o` for output `o`.
    output: usize,
    per_path: bool,
    /// Live: each path's own MAC, written as the source of the frames sent on it.
    src_macs: Vec<MacAddr>,
    /// Live: counters a metrics reader sees, and the tracer.
    pub(crate) live: Option<Hooks>,
}

impl FlowletStage {
    pub(crate) fn new(
        cfg: FlowletConfig,
        macs: Vec<MacAddr>,
        window_ns: u64,
        output: usize,
    ) -> Result<FlowletStage, fp_flowstate::FlowletConfigError> {
        let v4 = FlowletLb::new(cfg.clone())?;
        let cap = cfg.engine.recirc_capacity + 2 * MAX_BURST;
        Ok(FlowletStage {
            cfg,
            v4,
            v6: None,
            slab: Vec::with_capacity(cap),
            flow_hash: Vec::new(),
            free_tokens: Vec::with_capacity(cap),
            in4: Vec::with_capacity(MAX_BURST),
            in6: Vec::with_capacity(MAX_BURST),
            dec: Vec::with_capacity(cap),
            macs,
            window_ns,
            now: 0,
            started: false,
            report: StageReport {
                parse_drops: vec![0; fp_wire::Error::COUNT],
                ..StageReport::default()
            },
            items: Vec::with_capacity(MAX_BURST),
            output,
            per_path: false,
            src_macs: Vec::new(),
            live: None,
        })
    }

    /// Live: output `o` leaves on port `first_port + o` with source MAC `src_macs[o]`.
    pub(crate) fn per_path(mut self, first_port: usize, src_macs: Vec<MacAddr>) -> FlowletStage {
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
            if let Some(h) = &mut self.live {
                if let Some(id) = it.probe {
                    h.probe(token, id, it.pkt.data());
                }
                if self.flow_hash.len() < self.slab.len() {
                    self.flow_hash.resize(self.slab.len(), 0);
                }
                self.flow_hash[token as usize] = it.key.hash();
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
        self.flush_at(self.now, tx, dropped);
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
                let flow = self.flow_hash[d.token as usize];
                h.decided(&d, p.len(), &self.macs, self.now, flow);
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

    pub(crate) fn report(mut self) -> StageReport {
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

impl Stage for FlowletStage {
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
                        Some(h) if h.tracing() => probe_in(&s, p.data()),
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

pub(crate) fn add_counters(a: &mut FlowletCounters, b: &FlowletCounters) {
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

pub(crate) fn add_stats(a: &mut Stats, b: &Stats) {
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

/// Drop reasons of the flow-state table, in metrics order.
pub(crate) const DROPS: [(DropReason, &str); 5] = [
    (DropReason::PassLimit, "pass_limit"),
    (DropReason::Late, "late"),
    (DropReason::RecircOverflow, "recirc_overflow"),
    (DropReason::OrderingFull, "ordering_full"),
    (DropReason::Anomaly, "anomaly"),
];

/// One worker's counters, written by that worker only and summed by the metrics reader.
pub(crate) struct LiveStats {
    /// Frames received on the input.
    pub(crate) rx: Counter,
    /// Frames received on a path port (dropped).
    pub(crate) from_path: Counter,
    /// Frames that did not parse, by [`fp_wire::Error`] index.
    pub(crate) parse: Vec<Counter>,
    /// Frames and bytes sent per output.
    pub(crate) packets: Vec<Counter>,
    pub(crate) bytes: Vec<Counter>,
    /// Frames dropped by the table, by [`DROPS`] index.
    pub(crate) drops: [Counter; 5],
    /// Forwarded frames by passes taken: 1, 2, 3, 4, 5 or more.
    pub(crate) passes: [Counter; 5],
    /// Flowlet events (new, gap, moved, same), published by maintenance.
    pub(crate) events: [Counter; 4],
}

impl LiveStats {
    pub(crate) fn new(outputs: usize) -> LiveStats {
        LiveStats {
            rx: Counter::default(),
            from_path: Counter::default(),
            parse: (0..fp_wire::Error::COUNT)
                .map(|_| Counter::default())
                .collect(),
            packets: (0..outputs).map(|_| Counter::default()).collect(),
            bytes: (0..outputs).map(|_| Counter::default()).collect(),
            drops: Default::default(),
            passes: Default::default(),
            events: Default::default(),
        }
    }
}

/// A traced probe: where the balancer sent it.
#[derive(Clone, Debug)]
pub struct FlowletRecord {
    /// Worker id.
    pub worker: usize,
    /// The frame's flow, as text (`src:port > dst:port proto`).
    pub flow: String,
    /// `forwarded` or `dropped`.
    pub decision: &'static str,
    /// The output (path index) and its interface and next hop, when forwarded.
    pub output: Option<(u16, String, MacAddr)>,
    /// Why it was dropped.
    pub drop_reason: Option<&'static str>,
    /// Passes through the table.
    pub passes: u16,
}

/// Probes waiting for their decision in one worker.
pub(crate) const MAX_PROBES: usize = 8;

/// What a live worker adds to the stage: its counters and its tracer.
pub(crate) struct Hooks {
    pub(crate) worker: usize,
    pub(crate) stats: Arc<LiveStats>,
    pub(crate) trace: Option<ProbeSender<FlowletRecord>>,
    pub(crate) paths: Arc<Vec<String>>,
    /// (token, probe id, flow text) of probes inside the balancer.
    pub(crate) probes: Vec<(u32, u64, String)>,
    /// The path each flow's last flowlet took ([`PathMemory`]).
    pub(crate) last_path: PathMemory,
}

/// The output a flow's previous flowlet took, remembered past the table's expiry (which is the
/// gap: after a pause longer than the gap the table no longer knows the flow), so the metrics can
/// tell flowlets that changed path: a direct-mapped array of `SLOTS` flow fingerprints with their
/// last output, touched once per flowlet (not per packet). Two flows sharing a slot overwrite
/// each other, so a move can go uncounted, never counted twice.
pub(crate) struct PathMemory {
    slots: Box<[u64]>,
    /// Flowlets that took another path than the flow's previous one.
    pub(crate) moved: u64,
}

impl PathMemory {
    /// Slots (16 Ki: 128 KiB per worker).
    const SLOTS: usize = 1 << 14;

    pub(crate) fn new() -> PathMemory {
        PathMemory {
            slots: vec![0; Self::SLOTS].into_boxed_slice(),
            moved: 0,
        }
    }

    /// A flowlet of the flow hashed `flow` started on `output`: count it if it moved.
    #[inline]
    pub(crate) fn flowlet(&mut self, flow: u64, output: u16) {
        let slot = &mut self.slots[(flow as usize) & (Self::SLOTS - 1)];
        let fingerprint = flow & !0xffff;
        let was = *slot;
        if was != 0 && was & !0xffff == fingerprint && (was & 0xffff) as u16 != output + 1 {
            self.moved += 1;
        }
        *slot = fingerprint | (output as u64 + 1);
    }
}

impl Hooks {
    /// A burst from port `port`: `true` to balance it (the input), else it is dropped, counted.
    #[inline]
    pub(crate) fn input(&mut self, port: usize, rx: &mut Vec<Packet>, pool: &mut Pool) -> bool {
        if port == 0 {
            self.stats.rx.add(rx.len() as u64);
            return true;
        }
        self.stats.from_path.add(rx.len() as u64);
        pool.put_all(rx);
        false
    }

    #[inline]
    pub(crate) fn parse_error(&self, e: fp_wire::Error) {
        self.stats.parse[e as usize].inc();
    }

    #[inline]
    pub(crate) fn tracing(&self) -> bool {
        self.trace.is_some()
    }

    /// A probe frame entered the balancer under `token`.
    #[cold]
    #[inline(never)]
    pub(crate) fn probe(&mut self, token: u32, id: u64, frame: &[u8]) {
        if self.probes.len() < MAX_PROBES {
            let flow = PacketSummary::parse(frame)
                .map(|s| {
                    format!(
                        "{}:{} > {}:{} {}",
                        s.src(),
                        s.src_port,
                        s.dst(),
                        s.dst_port,
                        s.protocol.0
                    )
                })
                .unwrap_or_default();
            self.probes.push((token, id, flow));
        }
    }

    /// A decision for a packet of `len` bytes.
    #[inline]
    pub(crate) fn decided(
        &mut self,
        d: &Decision,
        len: usize,
        next_hops: &[MacAddr],
        now_ns: u64,
        flow: u64,
    ) {
        match d.action {
            Action::Forward(o) => {
                if d.event != FlowletEvent::SameFlowlet {
                    self.last_path.flowlet(flow, o);
                }
                self.stats.packets[o as usize].inc();
                self.stats.bytes[o as usize].add(len as u64);
                self.stats.passes[(d.passes as usize).clamp(1, 5) - 1].inc();
            }
            Action::Drop(r) => {
                let i = DROPS.iter().position(|(x, _)| *x == r).unwrap_or(4);
                self.stats.drops[i].inc();
            }
        }
        if !self.probes.is_empty() {
            self.record_probe(d, next_hops, now_ns);
        }
    }

    #[cold]
    #[inline(never)]
    fn record_probe(&mut self, d: &Decision, next_hops: &[MacAddr], now_ns: u64) {
        let Some(k) = self.probes.iter().position(|p| p.0 == d.token) else {
            return;
        };
        let (_, id, flow) = self.probes.swap_remove(k);
        let Some(probes) = &mut self.trace else {
            return;
        };
        if !probes.admit(now_ns) {
            return;
        }
        let (decision, output, drop_reason) = match d.action {
            Action::Forward(o) => (
                "forwarded",
                Some((o, self.paths[o as usize].clone(), next_hops[o as usize])),
                None,
            ),
            Action::Drop(r) => (
                "dropped",
                None,
                DROPS.iter().find(|(x, _)| *x == r).map(|(_, n)| *n),
            ),
        };
        probes.send(
            id,
            now_ns,
            FlowletRecord {
                worker: self.worker,
                flow,
                decision,
                output,
                drop_reason,
                passes: d.passes,
            },
        );
    }

    /// Maintenance: the flowlet events so far (new, gap, moved, same); `moved` is the path
    /// memory's, which also sees flowlets that start after the table forgot their flow.
    pub(crate) fn publish_events(&self, mut e: [u64; 4]) {
        e[2] = self.last_path.moved;
        for (c, v) in self.stats.events.iter().zip(e) {
            c.set(v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fp_pipeline::craft::{self, Endpoints};

    #[test]
    fn the_path_memory_counts_flowlets_that_change_path() {
        let mut m = PathMemory::new();
        let (a, b) = (0x1234_5678_9abc_0001u64, 0x8765_4321_0fed_0001u64);
        m.flowlet(a, 0);
        m.flowlet(a, 0);
        assert_eq!(m.moved, 0, "a first flowlet, then one on the same path");
        m.flowlet(a, 2);
        assert_eq!(m.moved, 1);
        // Another flow in the same slot replaces it: no move counted for either.
        m.flowlet(b, 1);
        m.flowlet(a, 1);
        assert_eq!(m.moved, 1);
        m.flowlet(a, 0);
        assert_eq!(m.moved, 2);
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
