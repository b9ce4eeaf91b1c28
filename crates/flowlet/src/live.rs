//! `flowplane flowlet --interface IN --paths IF1,IF2,... --next-hops MAC1,MAC2,...`: the Flowlet
//! balancer on live interfaces — Switcharoo's driving network function between one input and N
//! output paths, each worker the same stage as offline ([`crate::app`]) run by the engine's driver.
//!
//! ```text
//!  worker w: rx_burst(IN, queue w) ─► parse (malformed frames dropped by reason)
//!              ─► FlowletLb (IPv4, IPv6): the flow-state table decides, inserting in the data path,
//!                 recirculating what needs more passes
//!              ─► decision Forward(o): destination MAC := next hop o, source MAC := path o's MAC
//!                 ─► tx_burst(path o, queue w)
//!  frames arriving on a path port are dropped (counted): the paths carry traffic away only
//! ```
//!
//! Time is the ports' receive time (the driver's clock), so a flowlet is a run of a flow's packets
//! whose gaps, as this host received them, stay under `--gap-us`; an entry expires that long
//! after its flow's last packet, as in the paper. The gap must exceed the largest difference in
//! delay between the paths (plus the time a packet may wait in this host), or a moved flowlet can
//! overtake its predecessor; with a gap shorter than any pause (`--gap-us 0.001`) every packet
//! is a flowlet of its own: per-packet spraying, the usual negative control.
//!
//! Ports, as for the switch: the driver opens every interface with one receive and one transmit
//! queue per worker (AF_PACKET fan-out or AF_XDP queues) capturing every frame; an AF_XDP worker
//! count is capped by the smallest number of queues among the interfaces.
//!
//! `--admin ADDR` serves `GET /metrics` (frames by path, flowlet events, drops by reason, passes,
//! table counters), `GET /status` and `GET /trace`: a frame carrying the tracer's probe
//! (`fp_control::trace`) is balanced as usual and recorded with its flow, the output and next hop
//! it was given and the passes it took (10 records/s per worker at most). SIGTERM or SIGINT: the
//! workers finish the packets in flight and stop, exit 0.

use crate::app::Worker;
use anyhow::{bail, Context, Result};
use fp_control::admin::{AdminHandler, AdminServer};
use fp_control::json;
use fp_control::metrics::{self, Exposition, Kind};
use fp_control::signal::TerminateSignal;
use fp_control::systemd::Notifier;
use fp_control::trace::{Limiter, Record, TraceLog, TracerConfig};
use fp_engine::driver::{self, Options, WorkerCounters};
use fp_engine::live::{Capture, LiveSpec};
use fp_flowstate::{Action, Decision, DropReason, FlowletConfig};
use fp_pipeline::packet::{Packet, Pool, MAX_BURST};
use fp_pipeline::stats::Counter;
use fp_wire::ethernet::MacAddr;
use fp_wire::PacketSummary;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How the live balancer runs (from `flowplane flowlet`'s arguments).
pub struct LiveOptions {
    /// The input interface.
    pub input: String,
    /// The output paths' interfaces; output `o` is `paths[o]`.
    pub paths: Vec<String>,
    /// Next-hop MAC per path.
    pub next_hops: Vec<MacAddr>,
    /// Port driver.
    pub driver: fp_engine::live::Driver,
    /// AF_XDP program placement.
    pub xdp_mode: fp_engine::afxdp::ModeChoice,
    /// Worker threads.
    pub workers: usize,
    /// Pin worker i to CPU i.
    pub pin: bool,
    /// The balancer's settings (outputs = paths).
    pub lb: FlowletConfig,
    /// Admin HTTP server address.
    pub admin: Option<SocketAddr>,
    /// Look for tracer probes.
    pub trace: bool,
}

/// Drop reasons of the flow-state table, in metrics order.
const DROPS: [(DropReason, &str); 5] = [
    (DropReason::PassLimit, "pass_limit"),
    (DropReason::Late, "late"),
    (DropReason::RecircOverflow, "recirc_overflow"),
    (DropReason::OrderingFull, "ordering_full"),
    (DropReason::Anomaly, "anomaly"),
];

/// One worker's counters, written by that worker only and summed by the metrics reader.
pub(crate) struct LiveStats {
    /// Frames received on the input.
    rx: Counter,
    /// Frames received on a path port (dropped).
    from_path: Counter,
    /// Frames that did not parse, by [`fp_wire::Error`] index.
    parse: Vec<Counter>,
    /// Frames and bytes sent per output.
    packets: Vec<Counter>,
    bytes: Vec<Counter>,
    /// Frames dropped by the table, by [`DROPS`] index.
    drops: [Counter; 5],
    /// Forwarded frames by passes taken: 1, 2, 3, 4, 5 or more.
    passes: [Counter; 5],
    /// Flowlet events (new, gap, moved, same), published by maintenance.
    events: [Counter; 4],
}

impl LiveStats {
    fn new(outputs: usize) -> LiveStats {
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

impl Record for FlowletRecord {
    fn write_json(&self, s: &mut String) {
        let _ = write!(s, "\"worker\":{},\"flow\":", self.worker);
        json::push_str(s, &self.flow);
        let _ = write!(
            s,
            ",\"decision\":\"{}\",\"passes\":{}",
            self.decision, self.passes
        );
        if let Some((o, name, mac)) = &self.output {
            let _ = write!(s, ",\"output\":{o},\"interface\":");
            json::push_str(s, name);
            let _ = write!(s, ",\"next_hop\":\"{mac}\"");
        }
        if let Some(r) = self.drop_reason {
            let _ = write!(s, ",\"drop_reason\":\"{r}\"");
        }
    }
}

/// Probes waiting for their decision in one worker.
const MAX_PROBES: usize = 8;

/// What a live worker adds to the stage: its counters and its tracer.
pub(crate) struct Hooks {
    worker: usize,
    stats: Arc<LiveStats>,
    trace: Option<(Arc<TraceLog<FlowletRecord>>, Limiter)>,
    paths: Arc<Vec<String>>,
    /// (token, probe id, flow text) of probes inside the balancer.
    probes: Vec<(u32, u64, String)>,
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
    pub(crate) fn decided(&mut self, d: &Decision, len: usize, next_hops: &[MacAddr]) {
        match d.action {
            Action::Forward(o) => {
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
            self.record_probe(d, next_hops);
        }
    }

    #[cold]
    #[inline(never)]
    fn record_probe(&mut self, d: &Decision, next_hops: &[MacAddr]) {
        let Some(k) = self.probes.iter().position(|p| p.0 == d.token) else {
            return;
        };
        let (_, id, flow) = self.probes.swap_remove(k);
        let Some((log, limiter)) = &mut self.trace else {
            return;
        };
        if !limiter.take() {
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
        log.push(
            id,
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

    /// Maintenance: the flowlet events so far.
    pub(crate) fn publish_events(&self, e: [u64; 4]) {
        for (c, v) in self.stats.events.iter().zip(e) {
            c.set(v);
        }
    }
}

/// What the admin server reads.
struct Shared {
    names: Arc<Vec<String>>,
    next_hops: Vec<MacAddr>,
    workers: Vec<Arc<LiveStats>>,
    engine: Vec<Arc<WorkerCounters>>,
    trace: Arc<TraceLog<FlowletRecord>>,
    gap_ns: u64,
    started: Instant,
    description: String,
}

impl Shared {
    fn sum(&self, f: impl Fn(&LiveStats) -> &Counter) -> u64 {
        self.workers.iter().map(|w| f(w).get()).sum()
    }
}

impl AdminHandler for Shared {
    fn metrics(&self) -> String {
        let mut e = Exposition::new();
        metrics::ports(&mut e, "flowplane_flowlet", &self.names, &self.engine);
        e.single(
            "flowplane_flowlet_rx_frames_total",
            Kind::Counter,
            "Frames the workers received on the input.",
            self.sum(|w| &w.rx),
        );
        for (name, help, f) in [
            (
                "flowplane_flowlet_path_packets_total",
                "Frames sent on each output path.",
                (|w: &LiveStats, o: usize| w.packets[o].get()) as fn(&LiveStats, usize) -> u64,
            ),
            (
                "flowplane_flowlet_path_bytes_total",
                "Bytes sent on each output path.",
                |w: &LiveStats, o: usize| w.bytes[o].get(),
            ),
        ] {
            e.family(name, Kind::Counter, help);
            for o in 0..self.next_hops.len() {
                let v: u64 = self.workers.iter().map(|w| f(w, o)).sum();
                e.sample(
                    name,
                    &[("path", &o.to_string()), ("interface", &self.names[1 + o])],
                    v,
                );
            }
        }
        e.family(
            "flowplane_flowlet_events_total",
            Kind::Counter,
            "Packets by what the flow-state table made of them: new (a flow without state starts a \
             flowlet), gap (a flowlet starts after a pause longer than the gap), moved (of those, \
             the ones that took another path), same (the packet continues its flowlet).",
        );
        for (i, ev) in ["new", "gap", "moved", "same"].iter().enumerate() {
            let v = self.sum(|w| &w.events[i]);
            e.sample("flowplane_flowlet_events_total", &[("event", ev)], v);
        }
        e.family(
            "flowplane_flowlet_drops_total",
            Kind::Counter,
            "Frames dropped, by reason: the flow-state table's (pass_limit, late, recirc_overflow, \
             ordering_full, anomaly), from_path (received on an output path), and the parser's for \
             frames that do not parse.",
        );
        for (i, (_, reason)) in DROPS.iter().enumerate() {
            let v = self.sum(|w| &w.drops[i]);
            e.sample("flowplane_flowlet_drops_total", &[("reason", reason)], v);
        }
        e.sample(
            "flowplane_flowlet_drops_total",
            &[("reason", "from_path")],
            self.sum(|w| &w.from_path),
        );
        for (k, err) in fp_wire::Error::ALL.iter().enumerate() {
            let v = self.sum(|w| &w.parse[k]);
            e.sample(
                "flowplane_flowlet_drops_total",
                &[("reason", err.name())],
                v,
            );
        }
        e.family(
            "flowplane_flowlet_passes_total",
            Kind::Counter,
            "Forwarded frames by passes through the table (recirculations + 1): 1, 2, 3, 4, 5+.",
        );
        for (i, label) in ["1", "2", "3", "4", "5+"].iter().enumerate() {
            let v = self.sum(|w| &w.passes[i]);
            e.sample("flowplane_flowlet_passes_total", &[("passes", label)], v);
        }
        e.single(
            "flowplane_flowlet_gap_seconds",
            Kind::Gauge,
            "The flowlet gap (also each entry's expiry after its flow's last packet).",
            self.gap_ns as f64 / 1e9,
        );
        e.single(
            "flowplane_uptime_seconds",
            Kind::Gauge,
            "Seconds since start.",
            self.started.elapsed().as_secs_f64(),
        );
        e.finish()
    }

    fn reload(&self) -> Result<u64, String> {
        Err(
            "the flowlet balancer has no configuration file to reload (its settings are \
             command-line arguments)"
                .into(),
        )
    }

    fn traces(&self) -> String {
        self.trace.json_lines()
    }

    fn status(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "flowplane {} flowlet", env!("CARGO_PKG_VERSION"));
        let _ = writeln!(s, "{}", self.description);
        let _ = writeln!(
            s,
            "input {}; gap {} us; up {} s",
            self.names[0],
            self.gap_ns as f64 / 1e3,
            self.started.elapsed().as_secs()
        );
        let total: u64 = (0..self.next_hops.len())
            .map(|o| self.workers.iter().map(|w| w.packets[o].get()).sum::<u64>())
            .sum();
        for (o, mac) in self.next_hops.iter().enumerate() {
            let n: u64 = self.workers.iter().map(|w| w.packets[o].get()).sum();
            let _ = writeln!(
                s,
                "path {o}: {} next hop {mac}: {n} frames ({:.1} %)",
                self.names[1 + o],
                if total == 0 {
                    0.0
                } else {
                    100.0 * n as f64 / total as f64
                }
            );
        }
        let ev: Vec<u64> = (0..4).map(|i| self.sum(|w| &w.events[i])).collect();
        let _ = writeln!(
            s,
            "flowlets: {} new, {} after a gap ({} moved), {} packets continued their flowlet",
            ev[0], ev[1], ev[2], ev[3]
        );
        s
    }
}

fn log(msg: impl std::fmt::Display) {
    eprintln!("flowplane flowlet: {msg}");
}

/// Run until SIGTERM/SIGINT.
pub fn run(o: LiveOptions) -> Result<()> {
    let n = o.paths.len();
    if n == 0 {
        bail!("--paths: at least one output path is needed");
    }
    if o.next_hops.len() != n {
        bail!(
            "--next-hops: {} MAC(s) for {n} path(s); give one next hop per path",
            o.next_hops.len()
        );
    }
    let mut all = vec![o.input.clone()];
    all.extend(o.paths.iter().cloned());
    for (i, p) in all.iter().enumerate() {
        if all[..i].contains(p) {
            bail!("--interface/--paths: {p:?} is listed twice");
        }
    }
    let src_macs: Vec<MacAddr> = o
        .paths
        .iter()
        .map(|p| fp_engine::live::interface_mac(p).map_err(|e| anyhow::anyhow!("{p}: {e}")))
        .collect::<Result<_>>()?;
    let term = TerminateSignal::install().context("installing SIGTERM/SIGINT handlers")?;
    let mut notify = Notifier::from_env().context("NOTIFY_SOCKET")?;

    let spec = LiveSpec {
        interfaces: all.clone(),
        workers: o.workers,
        capture: Capture::All,
        xdp_mode: o.xdp_mode,
        ring_bytes: None,
    };
    let opened = o
        .driver
        .open(&spec)
        .context("opening the input and the paths")?;
    log(&opened.description);
    let workers = opened.ports.len();
    let names = Arc::new(all);
    let trace = TraceLog::new(1024);
    let mut stages = Vec::with_capacity(workers);
    let mut stats = Vec::with_capacity(workers);
    // The batching window as offline (a tenth of the gap): a burst arriving later than that after
    // the last pass first finishes the packets still recirculating.
    let window_ns = o.lb.flowlet_timeout_ns / 10;
    for (w, ports) in opened.ports.into_iter().enumerate() {
        let st = Arc::new(LiveStats::new(n));
        let mut stage = Worker::new(o.lb.clone(), o.next_hops.clone(), window_ns, 1)?
            .per_path(1, src_macs.clone());
        stage.live = Some(Hooks {
            worker: w,
            stats: st.clone(),
            trace: o
                .trace
                .then(|| (trace.clone(), trace.limiter(TracerConfig::default()))),
            paths: Arc::new(o.paths.clone()),
            probes: Vec::with_capacity(MAX_PROBES),
        });
        stats.push(st);
        stages.push(driver::Worker { stage, ports });
    }
    let running = driver::start(
        stages,
        &Options {
            name: "fp-flowlet".into(),
            pin: o.pin,
            idle_after: Duration::from_millis(1),
            maintain_every: Duration::from_millis(100),
            buffers: o.lb.engine.recirc_capacity + MAX_BURST * (n + 8),
            ..Options::default()
        },
    )?;
    let shared = Arc::new(Shared {
        names: names.clone(),
        next_hops: o.next_hops.clone(),
        workers: stats,
        engine: running.counters(),
        trace,
        gap_ns: o.lb.flowlet_timeout_ns,
        started: Instant::now(),
        description: opened.description.clone(),
    });
    let admin = match o.admin {
        Some(addr) => {
            let s = AdminServer::start(addr, shared.clone())
                .with_context(|| format!("admin server on {addr}"))?;
            log(format_args!("admin server on http://{}", s.local_addr()));
            Some(s)
        }
        None => None,
    };
    log(format_args!(
        "ready: {} -> {n} path(s) ({}), {workers} worker(s), gap {} us",
        o.input,
        o.paths.join(","),
        o.lb.flowlet_timeout_ns as f64 / 1e3
    ));
    notify.ready(&format!(
        "balancing flowlets from {} over {n} path(s) with {workers} worker(s)",
        o.input
    ));
    let result = loop {
        if term.is_set() {
            break Ok(());
        }
        if let Err(e) = running.check() {
            break Err(anyhow::Error::from(e));
        }
        notify.watchdog(true);
        std::thread::sleep(Duration::from_millis(50));
    };
    notify.stopping(None);
    log("shutting down");
    if let Some(s) = admin {
        s.shutdown();
    }
    let stopped = running.stop().unwrap_or_default();
    let mut per_path = vec![0u64; n];
    for w in &shared.workers {
        for (t, c) in per_path.iter_mut().zip(&w.packets) {
            *t += c.get();
        }
    }
    log(format_args!(
        "{} worker(s) stopped; frames per path: {per_path:?}",
        stopped.len()
    ));
    drop(opened.control);
    result
}
