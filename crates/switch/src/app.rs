//! `flowplane switch --ports IF1,IF2,...`: the CuckooSwitch Ethernet switch on live interfaces
//! (CuckooSwitch §3.1, Fig 3), with MAC learning, aging, static entries, flooding, metrics and a
//! packet tracer — the switch worker ([`crate::worker`]) as a stage of the engine's driver, and the
//! FIB's writer ([`crate::fib`]) on the control thread.
//!
//! # Data path
//!
//! ```text
//!  worker w (pinned to CPU w), for each port i in turn:
//!    rx_burst(port i, socket w)  ──►  SwitchWorker::process(i, burst)  ──►  tx[j] per output port
//!                                      (all destination MACs of the burst
//!                                       looked up at once in the shared
//!                                       cuckoo FIB, two-round prefetching)
//!    tx_burst(port j, socket w) for every j with frames
//!  nothing on any port: poll(2) on all the worker's sockets, so an idle switch sleeps
//! ```
//!
//! As in the paper's Fig 3, every worker has one receive queue *on every port* and sends through
//! its own transmit queue of every port, so workers share nothing but the FIB:
//!
//! The ports are opened by the engine's port driver (`--driver`) capturing every frame
//! (`fp_engine::live::Capture::All`):
//!
//! * **AF_PACKET**: worker w owns socket w of a `PACKET_FANOUT_HASH` group on each port (the
//!   kernel's flow hash plays RSS); the same socket transmits (`sendmmsg`).
//! * **AF_XDP**: worker w owns the socket of queue w of each port, and the XDP program steers
//!   *every* frame to it (a switch port belongs to the dataplane; ARP, broadcast and frames for
//!   any MAC must reach it). The worker count is capped by the smallest number of queues among
//!   the ports (a veth has one unless created with more), since a worker must be able to
//!   transmit on every port.
//!
//! Both put the interfaces in promiscuous mode while the switch runs (a NIC filters unicast frames
//! for other MACs otherwise): AF_PACKET through the socket option (the kernel reverts it when the
//! socket closes, also after a crash), AF_XDP with `ip link set IF promisc on`, reverted on exit
//! if it was off before.
//!
//! # Learning and the single writer
//!
//! Workers only read the FIB. What they learn (source MAC on a port it is not recorded on, or a
//! refresh due) goes to the control thread — this process's main thread — through a bounded queue
//! ([`crate::fib::learn_queue`]); a full queue drops the *event* and counts it, the frame is
//! forwarded (flooded, if its destination is unknown). The control thread is the FIB's single
//! writer: every millisecond it applies queued events (learn, move, refresh), and every
//! `min(aging/10, 1 s)` it removes learned entries not refreshed for the aging time. Static entries
//! (`--static`) are never overridden by learning and never age; preloaded entries (`--fib FILE`,
//! for the paper's big-FIB experiments) never age but do move when their MAC is seen elsewhere.
//!
//! # Checksums
//!
//! The switch forwards frames unchanged, except that the AF_PACKET port completes the partial
//! TCP/UDP checksums that a kernel sender on a veth leaves (`TP_STATUS_CSUMNOTREADY`, see
//! docs/afpacket.md), so TCP across the AF_PACKET switch works whatever the hosts' offload
//! settings. AF_XDP frames carry no checksum metadata: with `--driver af_xdp` on veth, the hosts
//! must run with `ethtool -K IF tx off` (docs/live-ports.md); frames from a NIC are complete.
//!
//! # Operating it
//!
//! `--admin ADDR` serves `GET /metrics` (Prometheus text: per-port rx/tx/flooded/drops, frames by
//! outcome, learn events and learn-queue drops, FIB entries, learned/moved/aged entries),
//! `GET /trace` (the tracer's records as JSON lines) and `GET /status` (ports, FIB, statics).
//! `POST /reload` answers 400: the switch has no configuration file to re-read.
//!
//! The tracer: a frame whose TCP/UDP payload starts with `FLOWPLANE-TRACE1` and an 8-byte id
//! (`fp_control::trace`) is switched as usual, and the worker records what it did with it: ingress
//! port, MACs, the FIB entry of the destination, and the ports the frame was actually handed to
//! (found by looking for the probe in the transmit bursts after switching). 10 records/s per
//! worker at most; the rest are counted as suppressed.

use crate::fib::{learn_queue, parse_fib_binary, parse_fib_text, SwitchControl};
use crate::worker::{SwitchStats, SwitchWorker};
use anyhow::{bail, Context, Result};
use fp_control::admin::{AdminHandler, AdminServer};
use fp_control::json;
use fp_control::metrics::{self, Exposition, Kind};
use fp_control::signal::TerminateSignal;
use fp_control::systemd::Notifier;
use fp_control::trace::{probe_id, Limiter, Record, TraceLog, TracerConfig};
use fp_cuckoo::{CompactMap, CompactReader, Config};
use fp_engine::afxdp::ModeChoice;
use fp_engine::driver::{self, Options, Running, Worker, WorkerCounters};
use fp_engine::live::{Capture, Driver, LiveSpec};
use fp_pipeline::packet::{Packet, Pool};
use fp_pipeline::stage::{Outputs, Stage};
use fp_pipeline::stats::Counter;
use fp_wire::ethernet::MacAddr;
use std::fmt::Write as _;
use std::io::Read;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct SwitchArgs {
    /// The switch ports: interfaces, comma-separated; port index = position (0, 1, ...).
    #[arg(
        long,
        value_delimiter = ',',
        required = true,
        value_name = "IF1,IF2,..."
    )]
    pub ports: Vec<String>,
    /// Port driver: af_packet (TPACKET_V3 + fan-out) or af_xdp.
    #[arg(long, default_value = "af_packet")]
    pub driver: Driver,
    /// AF_XDP: where the XDP program runs: auto, native or generic.
    #[arg(long, default_value = "auto")]
    pub xdp_mode: ModeChoice,
    /// Worker threads (default: one per CPU). AF_XDP: at most the smallest queue count of the ports.
    #[arg(long)]
    pub workers: Option<usize>,
    /// Learned entries not refreshed for this long are removed (seconds; fractions allowed).
    #[arg(long, default_value_t = 300.0)]
    pub aging_secs: f64,
    /// A static entry, MAC=PORT (PORT: index or interface name); learning never changes it and it
    /// never ages. Repeatable.
    #[arg(long = "static", value_name = "MAC=PORT")]
    pub statics: Vec<String>,
    /// Preload the FIB: text (`aa:bb:cc:dd:ee:ff PORT` per line) or, for names ending in `.bin`,
    /// little-endian u64 records `mac << 16 | port`.
    #[arg(long, value_name = "FILE")]
    pub fib: Option<PathBuf>,
    /// FIB capacity in entries (grown to fit a preload).
    #[arg(long, default_value_t = 1 << 20)]
    pub fib_capacity: usize,
    /// Capacity of the learn-event queue from the workers to the FIB writer.
    #[arg(long, default_value_t = 4096)]
    pub learn_queue: usize,
    /// Entries of each worker's flow cache in front of the FIB (BLP 2-4 with PBLRU, at most
    /// 65536); 0: no cache (the default: see docs/flowcache.md for when it pays).
    #[arg(long, default_value_t = 0)]
    pub fib_cache: usize,
    /// Serve metrics, trace and status over HTTP on this address.
    #[arg(long, value_name = "ADDR")]
    pub admin: Option<SocketAddr>,
    /// Do not pin worker i to CPU i.
    #[arg(long)]
    pub no_pin: bool,
    /// Do not look for tracer probes.
    #[arg(long)]
    pub no_trace: bool,
}

fn log(msg: impl std::fmt::Display) {
    eprintln!("flowplane: {msg}");
}

/// `MAC=PORT` with PORT an index or one of `ports`.
fn parse_static(s: &str, ports: &[String]) -> Result<(MacAddr, u16)> {
    let (m, p) = s
        .split_once('=')
        .with_context(|| format!("--static {s:?}: expected MAC=PORT"))?;
    let mac: MacAddr = m
        .trim()
        .parse()
        .map_err(|_| anyhow::anyhow!("--static {s:?}: {m:?} is not a MAC address"))?;
    if mac.is_multicast() {
        bail!("--static {s:?}: {m} is a group (multicast) address; those are always flooded");
    }
    let p = p.trim();
    let port = match ports.iter().position(|x| x == p) {
        Some(i) => i,
        None => p.parse::<usize>().with_context(|| {
            format!("--static {s:?}: {p:?} is neither a port index nor one of the ports")
        })?,
    };
    if port >= ports.len() {
        bail!(
            "--static {s:?}: port {port} does not exist (the switch has {} ports)",
            ports.len()
        );
    }
    Ok((mac, port as u16))
}

/// The entries of a FIB file, checked against the port count.
fn read_fib(path: &std::path::Path, nports: usize) -> Result<Vec<(MacAddr, u16)>> {
    let bad_port = |i: usize, p: u16| {
        anyhow::anyhow!(
            "{}: entry {} names port {p}, but the switch has {nports} ports",
            path.display(),
            i + 1
        )
    };
    let mut out = Vec::new();
    if path.extension().is_some_and(|e| e == "bin") {
        let mut f =
            std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
        let len = f.metadata()?.len();
        if len % 8 != 0 {
            bail!(
                "{}: {len} bytes is not a whole number of 8-byte records",
                path.display()
            );
        }
        out.reserve((len / 8) as usize);
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let mut filled = 0;
            while filled < buf.len() {
                let n = f.read(&mut buf[filled..])?;
                if n == 0 {
                    break;
                }
                filled += n;
            }
            if filled == 0 {
                break;
            }
            let recs = parse_fib_binary(&buf[..filled]).map_err(|e| anyhow::anyhow!(e))?;
            out.extend(recs);
            if filled < buf.len() {
                break;
            }
        }
    } else {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        out = parse_fib_text(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    }
    for (i, &(m, p)) in out.iter().enumerate() {
        if p as usize >= nports {
            return Err(bad_port(i, p));
        }
        if m.is_multicast() {
            bail!("{}: entry {} is a group address {m}", path.display(), i + 1,);
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// The stage: the switch worker, per-port flood counters and the tracer

/// What the tracer records about a probe: where it came in, what the FIB said, where it went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SwitchRecord {
    /// Worker id.
    pub worker: usize,
    /// Ingress port and interface.
    pub in_port: usize,
    /// Ingress interface.
    pub in_interface: String,
    /// Source MAC.
    pub src: MacAddr,
    /// Destination MAC.
    pub dst: MacAddr,
    /// The destination's FIB entry before switching (none for group addresses).
    pub fib: Option<u16>,
    /// `forwarded`, `flooded`, `filtered_same_port` or `dropped`.
    pub decision: &'static str,
    /// Ports (and interfaces) the frame was handed to.
    pub out: Vec<(usize, String)>,
}

impl Record for SwitchRecord {
    fn write_json(&self, s: &mut String) {
        let _ = write!(
            s,
            "\"worker\":{},\"in_port\":{},\"in_interface\":",
            self.worker, self.in_port
        );
        json::push_str(s, &self.in_interface);
        let _ = write!(
            s,
            ",\"src\":\"{}\",\"dst\":\"{}\",\"fib\":{},\"decision\":\"{}\",\"out_ports\":{:?},\"out_interfaces\":[",
            self.src,
            self.dst,
            self.fib.map_or("null".to_string(), |p| p.to_string()),
            self.decision,
            self.out.iter().map(|o| o.0).collect::<Vec<_>>()
        );
        for (i, (_, name)) in self.out.iter().enumerate() {
            if i > 0 {
                s.push(',');
            }
            json::push_str(s, name);
        }
        s.push(']');
    }
}

/// Probes seen in one burst (rare; a fixed array, no allocation).
const MAX_PROBES: usize = 4;

/// A worker's view of the tracer.
struct WorkerTracer {
    log: Arc<TraceLog<SwitchRecord>>,
    limiter: Limiter,
    fib: CompactReader,
    names: Arc<Vec<String>>,
    /// (probe id, destination MAC, source MAC, FIB entry of the destination) of the current burst.
    found: [(u64, MacAddr, MacAddr, Option<u16>); MAX_PROBES],
    n: usize,
}

impl WorkerTracer {
    /// Look for probes in a received burst (cheap per frame: a length test for short frames, a
    /// few header bytes and a 16-byte compare for long ones).
    #[inline]
    fn scan(&mut self, rx: &[Packet]) {
        self.n = 0;
        for p in rx {
            if let Some(id) = probe_id(p.data()) {
                self.found_probe(id, p.data());
            }
        }
    }

    #[cold]
    #[inline(never)]
    fn found_probe(&mut self, id: u64, d: &[u8]) {
        if self.n < MAX_PROBES {
            let dst = MacAddr(
                d[0..6]
                    .try_into()
                    .expect("a probe frame has an Ethernet header"),
            );
            let fib = if dst.is_multicast() {
                None
            } else {
                self.fib.get(dst.to_u64())
            };
            self.found[self.n] = (
                id,
                dst,
                MacAddr(
                    d[6..12]
                        .try_into()
                        .expect("a probe frame has an Ethernet header"),
                ),
                fib,
            );
            self.n += 1;
        }
    }

    /// After switching: find where each probe went and record it.
    #[cold]
    #[inline(never)]
    fn record(&mut self, worker: usize, in_port: usize, out: &Outputs) {
        for k in 0..self.n {
            let (id, dst, src, fib) = self.found[k];
            if !self.limiter.take() {
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
                fib,
                decision,
                out: ports.iter().map(|&j| (j, self.names[j].clone())).collect(),
            };
            self.log.push(id, r);
        }
        self.n = 0;
    }
}

/// One switch worker as a stage of the engine: the CuckooSwitch worker, the frames it flooded per
/// ingress port, and the tracer.
struct SwitchStage {
    index: usize,
    sw: SwitchWorker,
    flooded: Arc<[Counter]>,
    tracer: Option<WorkerTracer>,
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
            t.scan(rx);
        }
        let flooded = self.sw.stats().flooded.get();
        self.sw
            .process(port as u16, rx, out.bursts_mut(), pool, now_ns);
        self.flooded[port].add(self.sw.stats().flooded.get() - flooded);
        if let Some(t) = &mut self.tracer {
            if t.n > 0 {
                t.record(self.index, port, out);
            }
        }
    }
}

/// What a worker shares with the metrics reader.
struct WorkerShared {
    switch: Arc<SwitchStats>,
    flooded: Arc<[Counter]>,
}

// ---------------------------------------------------------------------------------------------
// Control side: admin handler

struct Shared {
    ctl: Mutex<SwitchControl>,
    names: Arc<Vec<String>>,
    workers: Vec<WorkerShared>,
    engine: Vec<Arc<WorkerCounters>>,
    statics: Vec<(MacAddr, u16)>,
    preloaded: usize,
    fib_capacity: usize,
    aging: Duration,
    learn_queue: usize,
    trace: Arc<TraceLog<SwitchRecord>>,
    started: Instant,
    description: String,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, SwitchControl> {
        self.ctl.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl AdminHandler for Shared {
    fn metrics(&self) -> String {
        let mut e = Exposition::new();
        metrics::ports(&mut e, "flowplane_switch", &self.names, &self.engine);
        let name = "flowplane_switch_port_flooded_frames_total";
        e.family(
            name,
            Kind::Counter,
            "Frames received on the port and flooded (unknown unicast, broadcast, multicast).",
        );
        for (i, n) in self.names.iter().enumerate() {
            let v: u64 = self.workers.iter().map(|w| w.flooded[i].get()).sum();
            e.sample(name, &[("port", &i.to_string()), ("interface", n)], v);
        }
        // Worker counters by outcome, summed.
        let mut totals: Vec<(&'static str, u64)> = Vec::new();
        for w in &self.workers {
            for (k, v) in w.switch.values() {
                match totals.iter_mut().find(|(n, _)| *n == k) {
                    Some(e) => e.1 += v,
                    None => totals.push((k, v)),
                }
            }
        }
        let get = |k: &str| totals.iter().find(|(n, _)| *n == k).map_or(0, |e| e.1);
        e.family(
            "flowplane_switch_frames_total",
            Kind::Counter,
            "Frames by what the switch did with them (rx, tx copies, forwarded, flooded, \
             unknown_unicast among flooded, drop_* by reason).",
        );
        for (k, v) in &totals {
            if !k.starts_with("learn_") && !k.starts_with("cache_") {
                e.sample("flowplane_switch_frames_total", &[("outcome", k)], *v);
            }
        }
        e.family(
            "flowplane_switch_fib_cache_lookups_total",
            Kind::Counter,
            "Destination lookups through the workers' FIB caches (--fib-cache), by result: hit or \
             miss (looked up in the FIB).",
        );
        for (label, key) in [("hit", "cache_hit"), ("miss", "cache_miss")] {
            e.sample(
                "flowplane_switch_fib_cache_lookups_total",
                &[("result", label)],
                get(key),
            );
        }
        e.single(
            "flowplane_switch_learn_events_total",
            Kind::Counter,
            "Learn events (new, moved or refreshed source MACs) the workers queued for the FIB writer.",
            get("learn_sent"),
        );
        e.single(
            "flowplane_switch_learn_queue_drops_total",
            Kind::Counter,
            "Learn events dropped because the queue was full (the frames were still forwarded).",
            get("learn_dropped"),
        );
        let c = self.lock();
        let st = c.stats();
        let fib = c.fib_stats();
        drop(c);
        for (name, help, v) in [
            (
                "flowplane_switch_fib_learned_total",
                "MACs learned (inserted by the FIB writer).",
                st.learned,
            ),
            (
                "flowplane_switch_fib_moves_total",
                "MACs that moved to another port.",
                st.moved,
            ),
            (
                "flowplane_switch_fib_aged_total",
                "Learned MACs removed by aging.",
                st.aged,
            ),
            (
                "flowplane_switch_fib_static_kept_total",
                "Learn events ignored because the MAC has a static entry.",
                st.static_kept,
            ),
            (
                "flowplane_switch_fib_full_total",
                "Learn events that found the FIB full (the MAC stays unknown and is flooded).",
                st.fib_full,
            ),
        ] {
            e.single(name, Kind::Counter, help, v);
        }
        for (name, help, v) in [
            (
                "flowplane_switch_fib_entries",
                "Entries in the FIB (static, preloaded and learned).",
                fib.len as u64,
            ),
            (
                "flowplane_switch_fib_slots",
                "Slots of the FIB's cuckoo table.",
                fib.slots as u64,
            ),
            (
                "flowplane_switch_fib_bytes",
                "Bytes of the FIB (slots and version counters).",
                (fib.table_bytes + fib.version_bytes) as u64,
            ),
            (
                "flowplane_switch_static_entries",
                "Static entries from --static.",
                self.statics.len() as u64,
            ),
            (
                "flowplane_switch_preloaded_entries",
                "Entries preloaded from --fib.",
                self.preloaded as u64,
            ),
            (
                "flowplane_switch_aging_seconds",
                "Aging time of learned entries.",
                self.aging.as_secs(),
            ),
            (
                "flowplane_switch_learn_queue_capacity",
                "Capacity of the learn-event queue.",
                self.learn_queue as u64,
            ),
            (
                "flowplane_switch_workers",
                "Worker threads.",
                self.workers.len() as u64,
            ),
        ] {
            e.single(name, Kind::Gauge, help, v);
        }
        let counts = self.trace.counts();
        e.family(
            "flowplane_switch_trace_records_total",
            Kind::Counter,
            "Tracer probes recorded, and suppressed by the rate limit.",
        );
        e.sample(
            "flowplane_switch_trace_records_total",
            &[("result", "recorded")],
            counts.recorded,
        );
        e.sample(
            "flowplane_switch_trace_records_total",
            &[("result", "suppressed")],
            counts.suppressed,
        );
        e.single(
            "flowplane_switch_uptime_seconds",
            Kind::Gauge,
            "Seconds since the switch started.",
            self.started.elapsed().as_secs_f64(),
        );
        e.finish()
    }

    fn reload(&self) -> Result<u64, String> {
        Err(
            "the switch has no configuration file to reload (ports, statics and the FIB file \
             are command-line arguments)"
                .into(),
        )
    }

    fn traces(&self) -> String {
        self.trace.json_lines()
    }

    fn status(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "flowplane {} switch", env!("CARGO_PKG_VERSION"));
        let _ = writeln!(s, "{}", self.description);
        for (i, n) in self.names.iter().enumerate() {
            let _ = writeln!(s, "port {i}: {n}");
        }
        let c = self.lock();
        let fib = c.fib_stats();
        let _ = writeln!(
            s,
            "fib: {} entries of {} slots (capacity asked {}), {} pages; aging {:?}; learn queue {}",
            fib.len, fib.slots, self.fib_capacity, fib.pages, self.aging, self.learn_queue
        );
        for &(m, p) in &self.statics {
            let _ = writeln!(
                s,
                "static {m} -> port {p} ({}); fib says {:?}",
                self.names[p as usize],
                c.lookup(m)
            );
        }
        let _ = writeln!(s, "up {} s", self.started.elapsed().as_secs());
        s
    }
}

// ---------------------------------------------------------------------------------------------

/// Receive ring per AF_PACKET socket (workers × ports sockets): 4 MiB.
const RING_BYTES: usize = 4 << 20;

/// The FIB's table settings, with a secret seed drawn for this start: a public seed would let
/// hosts choose MACs that pile into one bucket pair and make learning fail (hash flooding).
fn fib_config(capacity: usize) -> Config {
    Config::with_capacity(capacity).seed(fp_control::seed::random_seed())
}

/// Run the switch until SIGTERM/SIGINT. Under systemd (`Type=notify`) it reports readiness
/// once the ports forward, stopping at shutdown, and pings the watchdog while its workers live.
pub fn run(a: SwitchArgs) -> Result<()> {
    let nports = a.ports.len();
    if nports < 2 {
        bail!("--ports: a switch needs at least 2 ports, got {}", nports);
    }
    if nports > u16::MAX as usize - 1 {
        bail!("--ports: at most {} ports", u16::MAX - 1);
    }
    for (i, p) in a.ports.iter().enumerate() {
        if a.ports[..i].contains(p) {
            bail!("--ports: {p:?} is listed twice");
        }
    }
    if !(a.aging_secs > 0.0 && a.aging_secs.is_finite()) {
        bail!("--aging-secs must be a positive number of seconds");
    }
    if a.learn_queue == 0 {
        bail!("--learn-queue must be at least 1");
    }
    let aging = Duration::from_secs_f64(a.aging_secs);
    let statics: Vec<(MacAddr, u16)> = a
        .statics
        .iter()
        .map(|s| parse_static(s, &a.ports))
        .collect::<Result<_>>()?;
    let preload = match &a.fib {
        Some(p) => read_fib(p, nports)?,
        None => Vec::new(),
    };
    let capacity = a
        .fib_capacity
        .max(preload.len() + preload.len() / 16 + statics.len() + 1024);
    let term = TerminateSignal::install().context("installing SIGTERM/SIGINT handlers")?;
    let mut notify = Notifier::from_env().context("NOTIFY_SOCKET")?;

    // The FIB and its single writer.
    let (fw, fr) = CompactMap::new(&fib_config(capacity))
        .with_context(|| format!("building a FIB of {capacity} entries"))?;
    let (ltx, lrx) = learn_queue(a.learn_queue);
    let aging_ns = aging.as_nanos().min(u64::MAX as u128) as u64;
    let mut ctl = SwitchControl::new(fw, lrx, aging_ns);
    let t = Instant::now();
    for (i, &(m, p)) in preload.iter().enumerate() {
        ctl.preload(m, p).map_err(|e| {
            anyhow::anyhow!(
                "preloading entry {} ({m}) of {}: {e:?} (raise --fib-capacity)",
                i + 1,
                preload.len()
            )
        })?;
    }
    if !preload.is_empty() {
        log(format_args!(
            "preloaded {} FIB entries in {:.1} s",
            preload.len(),
            t.elapsed().as_secs_f64()
        ));
    }
    for &(m, p) in &statics {
        ctl.add_static(m, p)
            .map_err(|e| anyhow::anyhow!("static entry {m}: {e:?}"))?;
    }
    log(format_args!("fib: {}", ctl.fib_stats()));

    let spec = LiveSpec {
        interfaces: a.ports.clone(),
        workers: fp_engine::driver::workers_or_cpus(a.workers),
        capture: Capture::All,
        xdp_mode: a.xdp_mode,
        ring_bytes: Some(RING_BYTES),
    };
    let opened = a.driver.open(&spec).context("opening the switch ports")?;
    let workers = opened.ports.len();
    log(&opened.description);

    let names = Arc::new(a.ports.clone());
    let trace = TraceLog::new(1024);
    let mut stages = Vec::with_capacity(workers);
    let mut shared_w = Vec::with_capacity(workers);
    for (w, ports) in opened.ports.into_iter().enumerate() {
        let mut sw = SwitchWorker::new(fr.clone(), nports as u16, ltx.clone(), aging_ns);
        if a.fib_cache > 0 {
            sw.set_cache(a.fib_cache, ctl.epoch(), 0x5eed ^ w as u64)
                .context("the FIB cache")?;
        }
        let flooded: Arc<[Counter]> = (0..nports).map(|_| Counter::default()).collect();
        shared_w.push(WorkerShared {
            switch: sw.stats().clone(),
            flooded: flooded.clone(),
        });
        let tracer = (!a.no_trace).then(|| WorkerTracer {
            log: trace.clone(),
            limiter: trace.limiter(TracerConfig::default()),
            fib: fr.clone(),
            names: names.clone(),
            found: [(0, MacAddr([0; 6]), MacAddr([0; 6]), None); MAX_PROBES],
            n: 0,
        });
        stages.push(Worker {
            stage: SwitchStage {
                index: w,
                sw,
                flooded,
                tracer,
            },
            ports,
        });
    }
    drop(ltx);
    let running = driver::start(
        stages,
        &Options {
            name: "fp-switch".into(),
            pin: !a.no_pin,
            buffers: fp_pipeline::packet::MAX_BURST * (nports + 4),
            ..Options::default()
        },
    )?;

    let shared = Arc::new(Shared {
        ctl: Mutex::new(ctl),
        names: names.clone(),
        workers: shared_w,
        engine: running.counters(),
        statics: statics.clone(),
        preloaded: preload.len(),
        fib_capacity: capacity,
        aging,
        learn_queue: a.learn_queue,
        trace,
        started: Instant::now(),
        description: opened.description.clone(),
    });
    drop(preload);
    let admin = match a.admin {
        Some(addr) => {
            let s = AdminServer::start(addr, shared.clone())
                .with_context(|| format!("admin server on {addr}"))?;
            log(format_args!("admin server on http://{}", s.local_addr()));
            Some(s)
        }
        None => None,
    };
    log(format_args!(
        "switch ready: {nports} ports ({}), {workers} worker(s), aging {:?}, {} static entries",
        a.ports.join(","),
        aging,
        statics.len()
    ));

    notify.ready(&format!(
        "switching {nports} ports ({}) with {workers} worker(s)",
        a.ports.join(",")
    ));
    let result = control_loop(&shared, &term, &running, aging, &mut notify);
    notify.stopping(None);
    log("shutting down");
    if let Some(s) = admin {
        s.shutdown();
    }
    let mut port_totals = vec![fp_engine::port::PortStats::default(); nports];
    for w in running.stop().unwrap_or_default() {
        for (tot, p) in port_totals.iter_mut().zip(&w.ports) {
            tot.add(p);
        }
    }
    for (i, p) in port_totals.iter().enumerate() {
        log(format_args!(
            "port {i} ({}): rx {} tx {} rx_dropped {} tx_dropped {}",
            names[i], p.rx, p.tx, p.rx_dropped, p.tx_dropped
        ));
    }
    let st = shared.lock().stats();
    log(format_args!(
        "fib writer: learned {} moved {} aged {} static_kept {} fib_full {}",
        st.learned, st.moved, st.aged, st.static_kept, st.fib_full
    ));
    // Dropping the ports' control takes the interfaces out of promiscuous mode where this
    // process put them in it.
    drop(opened.control);
    result
}

/// The FIB writer: apply learn events every millisecond, age on a clock, until SIGTERM.
fn control_loop(
    shared: &Shared,
    term: &TerminateSignal,
    workers: &Running<SwitchStage>,
    aging: Duration,
    notify: &mut Notifier,
) -> Result<()> {
    let age_every = (aging / 10).clamp(Duration::from_millis(50), Duration::from_secs(1));
    let mut last_age = Instant::now();
    loop {
        if term.is_set() {
            return Ok(());
        }
        workers.check()?;
        notify.watchdog(true);
        {
            let mut c = shared.lock();
            c.drain();
            if last_age.elapsed() >= age_every {
                last_age = Instant::now();
                let aged = c.age(fp_engine::sys::monotonic_ns());
                if aged > 0 {
                    log(format_args!("aged out {aged} FIB entries"));
                }
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fib_seed_is_fresh_per_start() {
        let (a, b) = (fib_config(1024), fib_config(1024));
        assert_ne!(a.seed, b.seed);
        assert_ne!(
            a.seed,
            Config::with_capacity(1024).seed,
            "not the library default"
        );
    }

    #[test]
    fn statics_parse_by_index_or_name() {
        let ports: Vec<String> = ["p1", "p2", "p3"].iter().map(|s| s.to_string()).collect();
        assert_eq!(
            parse_static("02:00:00:00:00:99=2", &ports).unwrap(),
            (MacAddr::from_u64(0x0200_0000_0099), 2)
        );
        assert_eq!(
            parse_static("02:00:00:00:00:99=p2", &ports).unwrap(),
            (MacAddr::from_u64(0x0200_0000_0099), 1)
        );
        let e = parse_static("02:00:00:00:00:99=3", &ports).unwrap_err();
        assert!(e.to_string().contains("does not exist"), "{e}");
        let e = parse_static("01:00:5e:00:00:01=1", &ports).unwrap_err();
        assert!(e.to_string().contains("group"), "{e}");
        assert!(parse_static("02:00:00:00:00=1", &ports).is_err());
        assert!(parse_static("02:00:00:00:00:99", &ports).is_err());
        assert!(parse_static("02:00:00:00:00:99=eth9", &ports).is_err());
    }

    #[test]
    fn mac_text_round_trips() {
        for m in [0u64, 0x0200_0000_000a, 0xffff_ffff_ffff] {
            let m = MacAddr::from_u64(m);
            assert_eq!(m.to_string().parse::<MacAddr>().ok(), Some(m));
        }
        assert_eq!(
            "2:0:0:0:0:a".parse::<MacAddr>().ok(),
            Some(MacAddr::from_u64(0x0200_0000_000a))
        );
        assert!("02:00:00:00:00:100".parse::<MacAddr>().is_err());
    }

    #[test]
    fn fib_files_are_checked_against_the_ports() {
        let dir = std::env::temp_dir().join(format!("fp-switch-fib-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let txt = dir.join("fib.txt");
        std::fs::write(&txt, "02:00:00:00:00:0a 1\n02:00:00:00:00:0b 0\n").unwrap();
        assert_eq!(
            read_fib(&txt, 2).unwrap(),
            vec![
                (MacAddr::from_u64(0x0200_0000_000a), 1),
                (MacAddr::from_u64(0x0200_0000_000b), 0)
            ]
        );
        let e = read_fib(&txt, 1).unwrap_err();
        assert!(e.to_string().contains("names port 1"), "{e}");
        let bin = dir.join("fib.bin");
        let mut b = Vec::new();
        for i in 0..300_000u64 {
            b.extend_from_slice(&((0x0200_0000_0000 + i) << 16 | (i % 3)).to_le_bytes());
        }
        std::fs::write(&bin, &b).unwrap();
        let v = read_fib(&bin, 3).unwrap();
        assert_eq!(v.len(), 300_000);
        assert_eq!(
            v[299_999],
            (
                MacAddr::from_u64(0x0200_0000_0000 + 299_999),
                (299_999u64 % 3) as u16
            )
        );
        std::fs::write(&bin, &b[..13]).unwrap();
        assert!(read_fib(&bin, 3).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
