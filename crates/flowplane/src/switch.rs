//! `flowplane switch --ports IF1,IF2,...`: the CuckooSwitch Ethernet switch on live interfaces
//! (CuckooSwitch §3.1, Fig 3), with MAC learning, aging, static entries, flooding, metrics and a
//! packet tracer.
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
//!  nothing on any port: poll(2) on all the worker's sockets (≤ 5 ms), so an idle switch sleeps
//! ```
//!
//! As in the paper's Fig 3, every worker has one receive queue *on every port* and sends through
//! its own transmit queue of every port, so workers share nothing but the FIB:
//!
//! * **AF_PACKET**: worker w owns socket w of a `PACKET_FANOUT_HASH` group on each port (the
//!   kernel's flow hash plays RSS); the same socket transmits (`sendmmsg`).
//! * **AF_XDP**: worker w owns the socket of queue w of each port, and the XDP program steers
//!   *every* frame to it (`Steering::All`: a switch port belongs to the dataplane; ARP, broadcast
//!   and frames for any MAC must reach it). The worker count is capped by the smallest number of
//!   queues among the ports (a veth has one unless created with more), since a worker must be able
//!   to transmit on every port.
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
//! (`fp_pipeline::switch::learn_queue`); a full queue drops the *event* and counts it, the frame is
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
//! must run with `ethtool -K IF tx off` (PLATFORM.md pitfall 1); frames from a NIC are complete.
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

use anyhow::{bail, Context, Result};
use fp_control::admin::{AdminHandler, AdminServer};
use fp_control::signal::TerminateSignal;
use fp_control::trace::{hostname, probe_id, TokenBucket};
use fp_cuckoo::{CompactMap, CompactReader, Config};
use fp_io::afpacket::{AfPacketConfig, AfPacketPort};
use fp_io::afxdp::{AfXdpConfig, AfXdpPort, ModeChoice, Steering};
use fp_io::live::{Driver, LivePort};
use fp_pipeline::packet::{burst, Packet, Pool, MAX_BURST};
use fp_pipeline::port::{Port, PortStats};
use fp_pipeline::stats::Counter;
use fp_pipeline::switch::{
    is_group, learn_queue, mac_of, parse_fib_binary, parse_fib_text, Mac, SwitchControl,
    SwitchStats, SwitchWorker,
};
use std::collections::VecDeque;
use std::fmt::Write as _;
use std::io::Read;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

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
    /// Socket kind: af_packet (TPACKET_V3 + fan-out) or af_xdp.
    #[arg(long, default_value = "af_packet")]
    pub driver: Driver,
    /// AF_XDP: where the XDP program runs: auto, native or generic.
    #[arg(long, default_value = "auto", value_parser = parse_xdp_mode)]
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

fn parse_xdp_mode(s: &str) -> Result<ModeChoice, String> {
    match s {
        "auto" => Ok(ModeChoice::Auto),
        "native" | "drv" => Ok(ModeChoice::Native),
        "generic" | "skb" => Ok(ModeChoice::Generic),
        _ => Err(format!("{s:?}: use auto, native or generic")),
    }
}

fn log(msg: impl std::fmt::Display) {
    eprintln!("flowplane: {msg}");
}

/// `aa:bb:cc:dd:ee:ff` → 48-bit integer.
fn parse_mac(s: &str) -> Option<Mac> {
    s.parse::<fp_wire::ethernet::MacAddr>()
        .ok()
        .map(|m| m.to_u64())
}

/// A JSON string literal.
fn json_str(v: &str) -> String {
    let mut s = String::with_capacity(v.len() + 2);
    s.push('"');
    for c in v.chars() {
        match c {
            '"' => s.push_str("\\\""),
            '\\' => s.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(s, "\\u{:04x}", c as u32);
            }
            c => s.push(c),
        }
    }
    s.push('"');
    s
}

fn mac_text(m: Mac) -> String {
    fp_wire::ethernet::MacAddr::from_u64(m).to_string()
}

/// `MAC=PORT` with PORT an index or one of `ports`.
fn parse_static(s: &str, ports: &[String]) -> Result<(Mac, u16)> {
    let (m, p) = s
        .split_once('=')
        .with_context(|| format!("--static {s:?}: expected MAC=PORT"))?;
    let mac = parse_mac(m.trim())
        .with_context(|| format!("--static {s:?}: {m:?} is not a MAC address"))?;
    if is_group(mac) {
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
fn read_fib(path: &std::path::Path, nports: usize) -> Result<Vec<(Mac, u16)>> {
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
        if is_group(m) {
            bail!(
                "{}: entry {} is a group address {}",
                path.display(),
                i + 1,
                mac_text(m)
            );
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Per-worker counters and the tracer

/// One worker's counters for one port. Single writer (the worker); the metrics reader sums.
#[repr(C, align(64))]
#[derive(Debug, Default)]
struct PortCounters {
    /// Frames received on the port.
    rx: Counter,
    /// Frames handed to the port's transmit (accepted by the socket).
    tx: Counter,
    /// Frames received on the port that were flooded.
    flooded: Counter,
    /// Frames the port's transmit refused (ring or socket buffer full, too big).
    tx_dropped: Counter,
    /// Gauge: the socket's receive drops (kernel ring full), copied from the port every 100 ms.
    rx_dropped: Counter,
}
const _: () = assert!(std::mem::size_of::<PortCounters>() == 64);

/// What a worker shares with the metrics reader.
struct WorkerShared {
    switch: Arc<SwitchStats>,
    ports: Vec<PortCounters>,
}

/// The tracer's records (JSON lines) and counts.
struct SwitchTrace {
    node: String,
    entries: Mutex<VecDeque<String>>,
    capacity: usize,
    seq: AtomicU64,
    recorded: AtomicU64,
    suppressed: AtomicU64,
}

impl SwitchTrace {
    fn new(capacity: usize) -> SwitchTrace {
        SwitchTrace {
            node: hostname(),
            entries: Mutex::new(VecDeque::new()),
            capacity,
            seq: AtomicU64::new(0),
            recorded: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
        }
    }

    fn push(&self, line: String) {
        log(format_args!("trace: {line}"));
        self.recorded.fetch_add(1, Ordering::Relaxed);
        let mut q = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if q.len() == self.capacity {
            q.pop_front();
        }
        q.push_back(line);
    }

    fn json_lines(&self) -> String {
        let q = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let mut s = String::new();
        for l in q.iter() {
            s.push_str(l);
            s.push('\n');
        }
        s
    }
}

/// Probes seen in one burst (rare; a fixed array, no allocation).
const MAX_PROBES: usize = 4;

/// A worker's view of the tracer.
struct WorkerTracer {
    log: Arc<SwitchTrace>,
    bucket: TokenBucket,
    fib: CompactReader,
    names: Arc<Vec<String>>,
    /// (probe id, destination MAC, source MAC, FIB entry of the destination) of the current burst.
    found: [(u64, Mac, Mac, Option<u16>); MAX_PROBES],
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
            let dst = mac_of(&d[0..6]);
            let fib = if is_group(dst) {
                None
            } else {
                self.fib.get(dst)
            };
            self.found[self.n] = (id, dst, mac_of(&d[6..12]), fib);
            self.n += 1;
        }
    }

    /// After switching: find where each probe went and record it.
    #[cold]
    #[inline(never)]
    fn record(&mut self, worker: usize, in_port: usize, tx: &[Vec<Packet>], now_ns: u64) {
        for k in 0..self.n {
            let (id, dst, src, fib) = self.found[k];
            if !self.bucket.take(now_ns) {
                self.log.suppressed.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let out: Vec<usize> = tx
                .iter()
                .enumerate()
                .filter(|(_, b)| b.iter().any(|p| probe_id(p.data()) == Some(id)))
                .map(|(j, _)| j)
                .collect();
            let decision = match (out.len(), fib) {
                (0, Some(p)) if p as usize == in_port => "filtered_same_port",
                (0, _) => "dropped",
                (1, Some(_)) if !is_group(dst) => "forwarded",
                _ => "flooded",
            };
            let unix_ms = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64);
            let seq = self.log.seq.fetch_add(1, Ordering::Relaxed) + 1;
            let mut s = String::with_capacity(256);
            let _ = write!(
                s,
                "{{\"seq\":{seq},\"unix_ms\":{unix_ms},\"node\":{},\"probe_id\":{id},\
                 \"worker\":{worker},\"in_port\":{in_port},\"in_interface\":{},\
                 \"src\":\"{}\",\"dst\":\"{}\",\"fib\":{},\"decision\":\"{decision}\",\"out_ports\":{:?},\
                 \"out_interfaces\":[{}]}}",
                json_str(&self.log.node),
                json_str(&self.names[in_port]),
                mac_text(src),
                mac_text(dst),
                fib.map_or("null".to_string(), |p| p.to_string()),
                out,
                out.iter()
                    .map(|&j| json_str(&self.names[j]))
                    .collect::<Vec<_>>()
                    .join(",")
            );
            self.log.push(s);
        }
        self.n = 0;
    }
}

// ---------------------------------------------------------------------------------------------
// Ports and workers

/// How long an idle worker sleeps in poll(2) at most (bounds the stop and publish latency).
const IDLE_POLL: Duration = Duration::from_millis(5);
/// Empty passes over all ports before an idle worker sleeps.
const SPIN_PASSES: u32 = 8;
/// How often a worker copies its ports' kernel drop counters into its gauges.
const PUBLISH_EVERY_NS: u64 = 100_000_000;

/// AF_PACKET ring per socket: 16 blocks of 256 KiB (4 MiB; workers × ports sockets).
fn afpacket_config(port_id: u16) -> AfPacketConfig {
    AfPacketConfig {
        block_size: 1 << 18,
        block_count: 16,
        promisc: true,
        port_id,
        ..AfPacketConfig::default()
    }
}

/// Opened ports: `by_worker[w][i]` is worker w's queue of port i.
struct Opened {
    by_worker: Vec<Vec<LivePort>>,
    description: String,
    /// Interfaces this process put in promiscuous mode (to revert).
    promisc_set: Vec<String>,
}

fn interface_flags(ifname: &str) -> Result<u32> {
    let path = format!("/sys/class/net/{ifname}/flags");
    let t = std::fs::read_to_string(&path)
        .with_context(|| format!("interface {ifname:?}: reading {path}"))?;
    u32::from_str_radix(t.trim().trim_start_matches("0x"), 16)
        .with_context(|| format!("interface {ifname:?}: bad flags {t:?}"))
}

fn set_promisc(ifname: &str, on: bool) -> Result<()> {
    let st = std::process::Command::new("ip")
        .args([
            "link",
            "set",
            "dev",
            ifname,
            "promisc",
            if on { "on" } else { "off" },
        ])
        .status()
        .context("running `ip link set ... promisc`")?;
    if !st.success() {
        bail!("`ip link set dev {ifname} promisc` failed: {st}");
    }
    Ok(())
}

fn open_ports(a: &SwitchArgs, workers: usize) -> Result<Opened> {
    let n = a.ports.len();
    match a.driver {
        Driver::AfPacket => {
            let mut per_port = Vec::with_capacity(n);
            for (i, ifname) in a.ports.iter().enumerate() {
                let socks = AfPacketPort::open_fanout(ifname, &afpacket_config(i as u16), workers)
                    .with_context(|| format!("port {i} ({ifname}): opening AF_PACKET sockets"))?;
                per_port.push(socks);
            }
            let mut by_worker: Vec<Vec<LivePort>> = (0..workers).map(|_| Vec::new()).collect();
            for socks in per_port {
                for (w, s) in socks.into_iter().enumerate() {
                    by_worker[w].push(LivePort::Packet(Box::new(s)));
                }
            }
            Ok(Opened {
                by_worker,
                description: format!(
                    "AF_PACKET: {n} ports × {workers} sockets (fan-out by flow hash), promiscuous"
                ),
                promisc_set: Vec::new(),
            })
        }
        Driver::AfXdp => {
            let mut queues = u32::MAX;
            for ifname in &a.ports {
                let q = fp_io::afxdp::rx_queue_count(ifname)
                    .with_context(|| format!("interface {ifname:?}: reading its queue count"))?;
                queues = queues.min(q.max(1));
            }
            let workers = workers.min(queues as usize).max(1);
            let qs: Vec<u32> = (0..workers as u32).collect();
            let cfg = AfXdpConfig {
                steering: Steering::All,
                mode: a.xdp_mode,
                ..AfXdpConfig::default()
            };
            let mut promisc_set = Vec::new();
            let mut by_worker: Vec<Vec<LivePort>> = (0..workers).map(|_| Vec::new()).collect();
            let mut info = String::new();
            for (i, ifname) in a.ports.iter().enumerate() {
                let socks = AfXdpPort::open_queues(ifname, &qs, &cfg)
                    .with_context(|| format!("port {i} ({ifname}): opening AF_XDP sockets"))?;
                if i == 0 {
                    info = socks[0].info().to_string();
                }
                for (w, s) in socks.into_iter().enumerate() {
                    by_worker[w].push(LivePort::Xdp(Box::new(s)));
                }
                // IFF_PROMISC = 0x100.
                if interface_flags(ifname)? & 0x100 == 0 {
                    set_promisc(ifname, true)?;
                    promisc_set.push(ifname.clone());
                }
            }
            Ok(Opened {
                by_worker,
                description: format!(
                    "AF_XDP: {n} ports × {workers} queue(s) (every frame steered to the sockets); \
                     port 0: {info}"
                ),
                promisc_set,
            })
        }
    }
}

fn raw_fd(p: &LivePort) -> RawFd {
    match p {
        LivePort::Packet(s) => s.as_raw_fd(),
        LivePort::Xdp(s) => s.as_fd().as_raw_fd(),
    }
}

struct Worker {
    index: usize,
    sw: SwitchWorker,
    ports: Vec<LivePort>,
    shared: Arc<WorkerShared>,
    tracer: Option<WorkerTracer>,
    pin: bool,
    stop: Arc<AtomicBool>,
}

fn worker_loop(mut w: Worker) -> Vec<PortStats> {
    if w.pin {
        fp_io::sys::pin_to_cpu(w.index);
    }
    let n = w.ports.len();
    let mut pool = Pool::new(MAX_BURST * (n + 4));
    let mut rx = burst();
    let mut tx: Vec<Vec<Packet>> = (0..n).map(|_| burst()).collect();
    let fds: Vec<RawFd> = w.ports.iter().map(raw_fd).collect();
    let mut idle = 0u32;
    let mut last_publish = 0u64;
    while !w.stop.load(Ordering::Relaxed) {
        let mut got = 0usize;
        for i in 0..n {
            let k = w.ports[i].rx_burst(&mut pool, &mut rx, MAX_BURST);
            if k == 0 {
                continue;
            }
            got += k;
            let now = rx.iter().map(|p| p.ts_ns).max().unwrap_or(0);
            let c = &w.shared.ports[i];
            c.rx.add(k as u64);
            if let Some(t) = &mut w.tracer {
                t.scan(&rx);
            }
            let flooded = w.shared.switch.flooded.get();
            w.sw.process(i as u16, &mut rx, &mut tx, &mut pool, now);
            c.flooded.add(w.shared.switch.flooded.get() - flooded);
            if let Some(t) = &mut w.tracer {
                if t.n > 0 {
                    t.record(w.index, i, &tx, now);
                }
            }
            for (j, out) in tx.iter_mut().enumerate() {
                let len = out.len();
                if len == 0 {
                    continue;
                }
                let sent = w.ports[j].tx_burst(out, &mut pool);
                pool.put_all(out);
                let pc = &w.shared.ports[j];
                pc.tx.add(sent as u64);
                pc.tx_dropped.add((len - sent) as u64);
            }
        }
        if got == 0 {
            idle += 1;
            if idle >= SPIN_PASSES {
                sys::poll_readable(&fds, IDLE_POLL);
            }
        } else {
            idle = 0;
        }
        let now = fp_io::sys::monotonic_ns();
        if now.saturating_sub(last_publish) >= PUBLISH_EVERY_NS {
            last_publish = now;
            for (p, c) in w.ports.iter().zip(&w.shared.ports) {
                c.rx_dropped.set(p.stats().rx_dropped);
            }
        }
    }
    w.ports
        .iter_mut()
        .map(|p| {
            let _ = p.flush();
            p.stats()
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Control side: admin handler

struct Shared {
    ctl: Mutex<SwitchControl>,
    names: Arc<Vec<String>>,
    workers: Vec<Arc<WorkerShared>>,
    statics: Vec<(Mac, u16)>,
    preloaded: usize,
    fib_capacity: usize,
    aging: Duration,
    learn_queue: usize,
    trace: Arc<SwitchTrace>,
    started: Instant,
    description: String,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, SwitchControl> {
        self.ctl.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

impl AdminHandler for Shared {
    fn metrics(&self) -> String {
        let esc = fp_control::metrics::escape_label;
        let mut s = String::with_capacity(8192);
        let nports = self.names.len();
        let sum = |f: &dyn Fn(&PortCounters) -> u64, i: usize| -> u64 {
            self.workers.iter().map(|w| f(&w.ports[i])).sum()
        };
        type Field = fn(&PortCounters) -> u64;
        let per_port: [(&str, &str, &str, Field); 5] = [
            (
                "flowplane_switch_port_rx_frames_total",
                "counter",
                "Frames received on the port.",
                |c| c.rx.get(),
            ),
            (
                "flowplane_switch_port_tx_frames_total",
                "counter",
                "Frames sent out of the port (a flooded frame counts once per port).",
                |c| c.tx.get(),
            ),
            (
                "flowplane_switch_port_flooded_frames_total",
                "counter",
                "Frames received on the port and flooded (unknown unicast, broadcast, multicast).",
                |c| c.flooded.get(),
            ),
            (
                "flowplane_switch_port_tx_dropped_frames_total",
                "counter",
                "Frames the port's transmit queue refused (full ring or socket buffer).",
                |c| c.tx_dropped.get(),
            ),
            (
                "flowplane_switch_port_rx_dropped_frames_total",
                "counter",
                "Frames the kernel dropped before the switch read them (receive ring full).",
                |c| c.rx_dropped.get(),
            ),
        ];
        for (name, kind, help, f) in per_port {
            family(&mut s, name, kind, help);
            for i in 0..nports {
                let _ = writeln!(
                    s,
                    "{name}{{port=\"{i}\",interface=\"{}\"}} {}",
                    esc(&self.names[i]),
                    sum(&|c| f(c), i)
                );
            }
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
        family(
            &mut s,
            "flowplane_switch_frames_total",
            "counter",
            "Frames by what the switch did with them (rx, tx copies, forwarded, flooded, \
             unknown_unicast among flooded, drop_* by reason).",
        );
        for (k, v) in &totals {
            if k.starts_with("learn_") {
                continue;
            }
            let _ = writeln!(s, "flowplane_switch_frames_total{{outcome=\"{k}\"}} {v}");
        }
        family(
            &mut s,
            "flowplane_switch_learn_events_total",
            "counter",
            "Learn events (new, moved or refreshed source MACs) the workers queued for the FIB writer.",
        );
        let _ = writeln!(
            s,
            "flowplane_switch_learn_events_total {}",
            get("learn_sent")
        );
        family(
            &mut s,
            "flowplane_switch_learn_queue_drops_total",
            "counter",
            "Learn events dropped because the queue was full (the frames were still forwarded).",
        );
        let _ = writeln!(
            s,
            "flowplane_switch_learn_queue_drops_total {}",
            get("learn_dropped")
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
            family(&mut s, name, "counter", help);
            let _ = writeln!(s, "{name} {v}");
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
            family(&mut s, name, "gauge", help);
            let _ = writeln!(s, "{name} {v}");
        }
        family(
            &mut s,
            "flowplane_switch_trace_records_total",
            "counter",
            "Tracer probes recorded, and suppressed by the rate limit.",
        );
        let _ = writeln!(
            s,
            "flowplane_switch_trace_records_total{{result=\"recorded\"}} {}",
            self.trace.recorded.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            s,
            "flowplane_switch_trace_records_total{{result=\"suppressed\"}} {}",
            self.trace.suppressed.load(Ordering::Relaxed)
        );
        family(
            &mut s,
            "flowplane_switch_uptime_seconds",
            "gauge",
            "Seconds since the switch started.",
        );
        let _ = writeln!(
            s,
            "flowplane_switch_uptime_seconds {}",
            self.started.elapsed().as_secs_f64()
        );
        s
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
                "static {} -> port {p} ({}); fib says {:?}",
                mac_text(m),
                self.names[p as usize],
                c.lookup(m)
            );
        }
        let _ = writeln!(s, "up {} s", self.started.elapsed().as_secs());
        s
    }
}

// ---------------------------------------------------------------------------------------------

/// Run the switch until SIGTERM/SIGINT.
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
    let statics: Vec<(Mac, u16)> = a
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

    // The FIB and its single writer.
    let (fw, fr) = CompactMap::new(&Config::with_capacity(capacity))
        .with_context(|| format!("building a FIB of {capacity} entries"))?;
    let (ltx, lrx) = learn_queue(a.learn_queue);
    let aging_ns = aging.as_nanos().min(u64::MAX as u128) as u64;
    let mut ctl = SwitchControl::new(fw, lrx, aging_ns);
    let t = Instant::now();
    for (i, &(m, p)) in preload.iter().enumerate() {
        ctl.preload(m, p).map_err(|e| {
            anyhow::anyhow!(
                "preloading entry {} ({}) of {}: {e:?} (raise --fib-capacity)",
                i + 1,
                mac_text(m),
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
            .map_err(|e| anyhow::anyhow!("static entry {}: {e:?}", mac_text(m)))?;
    }
    log(format_args!("fib: {}", ctl.fib_stats()));

    let workers_wanted = a
        .workers
        .unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        })
        .max(1);
    let opened = open_ports(&a, workers_wanted)?;
    let workers = opened.by_worker.len();
    log(&opened.description);

    let names = Arc::new(a.ports.clone());
    let trace = Arc::new(SwitchTrace::new(1024));
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads: Vec<JoinHandle<Vec<PortStats>>> = Vec::new();
    let mut shared_w = Vec::new();
    for (w, ports) in opened.by_worker.into_iter().enumerate() {
        let sw = SwitchWorker::new(fr.clone(), nports as u16, ltx.clone(), aging_ns);
        let shared = Arc::new(WorkerShared {
            switch: sw.stats().clone(),
            ports: (0..nports).map(|_| PortCounters::default()).collect(),
        });
        shared_w.push(shared.clone());
        let tracer = (!a.no_trace).then(|| WorkerTracer {
            log: trace.clone(),
            bucket: TokenBucket::new(10.0, 10),
            fib: fr.clone(),
            names: names.clone(),
            found: [(0, 0, 0, None); MAX_PROBES],
            n: 0,
        });
        let worker = Worker {
            index: w,
            sw,
            ports,
            shared,
            tracer,
            pin: !a.no_pin,
            stop: stop.clone(),
        };
        threads.push(
            std::thread::Builder::new()
                .name(format!("fp-switch-{w}"))
                .spawn(move || worker_loop(worker))
                .context("spawning a worker thread")?,
        );
    }
    drop(ltx);

    let shared = Arc::new(Shared {
        ctl: Mutex::new(ctl),
        names: names.clone(),
        workers: shared_w,
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

    let result = control_loop(&shared, &term, &threads, aging);
    log("shutting down");
    if let Some(s) = admin {
        s.shutdown();
    }
    stop.store(true, Ordering::Relaxed);
    let mut port_totals = vec![PortStats::default(); nports];
    for t in threads {
        if let Ok(v) = t.join() {
            for (tot, p) in port_totals.iter_mut().zip(v) {
                tot.rx += p.rx;
                tot.tx += p.tx;
                tot.rx_dropped += p.rx_dropped;
                tot.tx_dropped += p.tx_dropped;
            }
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
    for ifname in &opened.promisc_set {
        if let Err(e) = set_promisc(ifname, false) {
            log(format_args!("could not turn promiscuous mode off: {e:#}"));
        }
    }
    result
}

/// The FIB writer: apply learn events every millisecond, age on a clock, until SIGTERM.
fn control_loop(
    shared: &Shared,
    term: &TerminateSignal,
    threads: &[JoinHandle<Vec<PortStats>>],
    aging: Duration,
) -> Result<()> {
    let age_every = (aging / 10).clamp(Duration::from_millis(50), Duration::from_secs(1));
    let mut last_age = Instant::now();
    loop {
        if term.is_set() {
            return Ok(());
        }
        if threads.iter().any(|t| t.is_finished()) {
            bail!("a worker thread stopped unexpectedly");
        }
        {
            let mut c = shared.lock();
            c.drain();
            if last_age.elapsed() >= age_every {
                last_age = Instant::now();
                let aged = c.age(fp_io::sys::monotonic_ns());
                if aged > 0 {
                    log(format_args!("aged out {aged} FIB entries"));
                }
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// poll(2) on several sockets: the only system call of this module outside the ports.
#[allow(unsafe_code)]
mod sys {
    use std::os::fd::RawFd;
    use std::time::Duration;

    /// The most sockets one poll waits on (ports per worker); beyond, the rest are not waited on
    /// (they are still read on the next pass, at most `timeout` later).
    const MAX_FDS: usize = 64;

    /// Wait until one of `fds` is readable or `timeout` passes.
    pub fn poll_readable(fds: &[RawFd], timeout: Duration) {
        let mut p = [libc::pollfd {
            fd: -1,
            events: 0,
            revents: 0,
        }; MAX_FDS];
        let n = fds.len().min(MAX_FDS);
        for (slot, &fd) in p.iter_mut().zip(fds) {
            slot.fd = fd;
            slot.events = libc::POLLIN;
        }
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: `p` is a live array of MAX_FDS initialised pollfd structs and n <= MAX_FDS, so
        // the kernel reads and writes only inside it. The descriptors belong to ports the caller
        // holds for the duration of the call; a closed one would only yield POLLNVAL.
        unsafe {
            libc::poll(p.as_mut_ptr(), n as libc::nfds_t, ms);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statics_parse_by_index_or_name() {
        let ports: Vec<String> = ["p1", "p2", "p3"].iter().map(|s| s.to_string()).collect();
        assert_eq!(
            parse_static("02:00:00:00:00:99=2", &ports).unwrap(),
            (0x0200_0000_0099, 2)
        );
        assert_eq!(
            parse_static("02:00:00:00:00:99=p2", &ports).unwrap(),
            (0x0200_0000_0099, 1)
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
            assert_eq!(parse_mac(&mac_text(m)), Some(m));
        }
        assert_eq!(parse_mac("2:0:0:0:0:a"), Some(0x0200_0000_000a));
        assert_eq!(parse_mac("02:00:00:00:00:100"), None);
    }

    #[test]
    fn fib_files_are_checked_against_the_ports() {
        let dir = std::env::temp_dir().join(format!("fp-switch-fib-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let txt = dir.join("fib.txt");
        std::fs::write(&txt, "02:00:00:00:00:0a 1\n02:00:00:00:00:0b 0\n").unwrap();
        assert_eq!(
            read_fib(&txt, 2).unwrap(),
            vec![(0x0200_0000_000a, 1), (0x0200_0000_000b, 0)]
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
            (0x0200_0000_0000 + 299_999, (299_999u64 % 3) as u16)
        );
        std::fs::write(&bin, &b[..13]).unwrap();
        assert!(read_fib(&bin, 3).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
