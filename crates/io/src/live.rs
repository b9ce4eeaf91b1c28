//! The load balancer on a live interface: one worker thread per port queue (Maglev §3.1, Fig 4).
//!
//! Steering is done by the kernel or the NIC, not by a dispatcher thread: with AF_PACKET, the
//! workers' sockets form a `PACKET_FANOUT_HASH` group, so all frames of a connection reach one
//! socket; with AF_XDP, each worker owns one receive queue (RSS spreads flows over queues) and the
//! XDP program redirects only VIP traffic to the sockets, the rest (ARP, the host's own traffic,
//! health-check replies) going on to the kernel. Each worker transmits its encapsulated packets
//! back out of the same interface (a one-armed balancer, as Maglev is deployed).
//!
//! A worker loop: receive a burst, process it at the burst's time (the ports stamp
//! `CLOCK_MONOTONIC`), send, repeat; when nothing arrives it waits on the port (poll) for up to a
//! millisecond and runs the expiry sweep, so an idle balancer uses no CPU and still ages entries.

use crate::afpacket::{AfPacketConfig, AfPacketError, AfPacketPort};
use crate::afxdp::{AfXdpConfig, AfXdpError, AfXdpPort, ModeChoice, VipControl};
use fp_pipeline::lb::{LbWorker, Tracer};
use fp_pipeline::packet::{burst, Packet, Pool, MAX_BURST};
use fp_pipeline::port::{Port, PortStats};
use fp_pipeline::snapshot::{Published, Snapshot};
use fp_pipeline::stats::WorkerStats;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Which kind of socket to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Driver {
    /// AF_PACKET with TPACKET_V3 and fan-out.
    AfPacket,
    /// AF_XDP (copy mode on drivers without zero-copy, such as veth).
    AfXdp,
}

impl std::str::FromStr for Driver {
    type Err = String;
    fn from_str(s: &str) -> Result<Driver, String> {
        match s {
            "af_packet" | "afpacket" | "packet" => Ok(Driver::AfPacket),
            "af_xdp" | "afxdp" | "xdp" => Ok(Driver::AfXdp),
            _ => Err(format!("{s:?}: use \"af_packet\" or \"af_xdp\"")),
        }
    }
}

/// Where and how to receive.
#[derive(Clone, Debug)]
pub struct LiveSpec {
    /// Interface name.
    pub interface: String,
    /// Socket kind.
    pub driver: Driver,
    /// Workers wanted (AF_XDP uses at most one per receive queue).
    pub workers: usize,
    /// AF_XDP: where the XDP program runs.
    pub xdp_mode: ModeChoice,
}

/// Why the interface could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    /// AF_PACKET failed.
    #[error("{0}")]
    AfPacket(#[from] AfPacketError),
    /// AF_XDP failed.
    #[error("{0}")]
    AfXdp(#[from] AfXdpError),
    /// The interface could not be inspected.
    #[error("interface {0}: {1}")]
    Interface(String, std::io::Error),
}

/// One worker's port. (Boxed: the two sockets differ much in size, and a port is moved once.)
pub enum LivePort {
    /// An AF_PACKET socket of the fan-out group.
    Packet(Box<AfPacketPort>),
    /// An AF_XDP socket on one queue.
    Xdp(Box<AfXdpPort>),
}

impl LivePort {
    /// Wait up to `timeout` for frames to arrive.
    pub fn wait(&self, timeout: Duration) {
        match self {
            LivePort::Packet(p) => {
                let _ = p.wait_rx(timeout);
            }
            LivePort::Xdp(p) => {
                p.wait_rx(timeout);
            }
        }
    }

    fn port(&mut self) -> &mut dyn Port {
        match self {
            LivePort::Packet(p) => &mut **p,
            LivePort::Xdp(p) => &mut **p,
        }
    }
}

impl Port for LivePort {
    fn name(&self) -> &str {
        match self {
            LivePort::Packet(p) => p.name(),
            LivePort::Xdp(p) => p.name(),
        }
    }
    fn rx_burst(&mut self, pool: &mut Pool, out: &mut Vec<Packet>, max: usize) -> usize {
        self.port().rx_burst(pool, out, max)
    }
    fn tx_burst(&mut self, batch: &mut Vec<Packet>, pool: &mut Pool) -> usize {
        self.port().tx_burst(batch, pool)
    }
    fn stats(&self) -> PortStats {
        match self {
            LivePort::Packet(p) => p.stats(),
            LivePort::Xdp(p) => p.stats(),
        }
    }
}

/// The opened interface.
pub struct LivePorts {
    /// One port per worker.
    pub ports: Vec<LivePort>,
    /// AF_XDP: control of the VIP map the XDP program consults (update it on reload).
    pub vips: Option<VipControl>,
    /// A line describing what was opened (for the log).
    pub description: String,
}

/// Open the interface for `spec.workers` workers, steering `vips` to them.
pub fn open(spec: &LiveSpec, vips: &[IpAddr]) -> Result<LivePorts, LiveError> {
    let workers = spec.workers.max(1);
    match spec.driver {
        Driver::AfPacket => {
            let cfg = AfPacketConfig::default();
            let ports = AfPacketPort::open_fanout(&spec.interface, &cfg, workers)?;
            let description = format!(
                "AF_PACKET on {}: {} sockets in fan-out group {:?} (hash)",
                spec.interface,
                ports.len(),
                ports[0].fanout_group()
            );
            Ok(LivePorts {
                ports: ports
                    .into_iter()
                    .map(|p| LivePort::Packet(Box::new(p)))
                    .collect(),
                vips: None,
                description,
            })
        }
        Driver::AfXdp => {
            let queues = crate::afxdp::rx_queue_count(&spec.interface)
                .map_err(|e| LiveError::Interface(spec.interface.clone(), e))?
                .max(1);
            let n = (workers as u32).min(queues);
            let qs: Vec<u32> = (0..n).collect();
            let cfg = AfXdpConfig {
                vips: vips.to_vec(),
                mode: spec.xdp_mode,
                ..AfXdpConfig::default()
            };
            let ports = AfXdpPort::open_queues(&spec.interface, &qs, &cfg)?;
            let vc = ports[0].vip_control();
            let description = format!(
                "AF_XDP on {}: {} queue(s) of {queues}, {}",
                spec.interface,
                ports.len(),
                ports[0].info()
            );
            Ok(LivePorts {
                ports: ports
                    .into_iter()
                    .map(|p| LivePort::Xdp(Box::new(p)))
                    .collect(),
                vips: Some(vc),
                description,
            })
        }
    }
}

/// Makes the tracer of worker `i`.
pub type TracerFactory = Box<dyn Fn(usize) -> Box<dyn Tracer> + Send + Sync>;

/// Called by worker `i`'s own thread about every [`MAINTAIN_EVERY`] with its worker, e.g. to copy
/// connection-table sizes into gauges a metrics reader can see.
pub type WorkerHook = Arc<dyn Fn(usize, &LbWorker) + Send + Sync>;

/// How often a worker runs its expiry sweep and its hook, busy or idle.
pub const MAINTAIN_EVERY: Duration = Duration::from_millis(10);

/// Settings of the worker threads.
pub struct WorkerOptions {
    /// Seed of the connection tables' placement.
    pub table_seed: u64,
    /// Pin worker `i` to CPU `i`.
    pub pin: bool,
    /// Makes a tracer for worker `i`, if tracing is wanted.
    pub tracer: Option<TracerFactory>,
    /// Called periodically on each worker's thread (see [`WorkerHook`]).
    pub hook: Option<WorkerHook>,
}

/// Running workers.
pub struct LiveWorkers {
    /// Each worker's counters.
    pub stats: Vec<Arc<WorkerStats>>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<PortStats>>,
}

impl LiveWorkers {
    /// Stop the workers and wait for them; returns each port's counters.
    pub fn stop(self) -> Vec<PortStats> {
        self.stop.store(true, Ordering::Relaxed);
        self.threads
            .into_iter()
            .map(|t| t.join().unwrap_or_default())
            .collect()
    }

    /// Whether every worker thread is still running.
    pub fn alive(&self) -> bool {
        self.threads.iter().all(|t| !t.is_finished())
    }
}

/// Start one worker per port.
pub fn spawn_workers(
    snapshots: Arc<Published<Snapshot>>,
    ports: Vec<LivePort>,
    opts: &WorkerOptions,
) -> Result<LiveWorkers, fp_pipeline::lb::WorkerError> {
    let stop = Arc::new(AtomicBool::new(false));
    let mut stats = Vec::new();
    let mut threads = Vec::new();
    let mut workers = Vec::new();
    for i in 0..ports.len() {
        let mut w = LbWorker::new(i, snapshots.clone(), opts.table_seed ^ i as u64)?;
        if let Some(make) = &opts.tracer {
            w.set_tracer(make(i));
        }
        stats.push(w.stats().clone());
        workers.push(w);
    }
    for (i, (w, port)) in workers.into_iter().zip(ports).enumerate() {
        let stop = stop.clone();
        let pin = opts.pin;
        let hook = opts.hook.clone();
        threads.push(
            std::thread::Builder::new()
                .name(format!("fp-worker-{i}"))
                .spawn(move || worker_loop(i, w, port, stop, pin, hook))
                .expect("spawn worker thread"),
        );
    }
    Ok(LiveWorkers {
        stats,
        stop,
        threads,
    })
}

fn worker_loop(
    i: usize,
    mut w: LbWorker,
    mut port: LivePort,
    stop: Arc<AtomicBool>,
    pin: bool,
    hook: Option<WorkerHook>,
) -> PortStats {
    if pin {
        crate::sys::pin_to_cpu(i);
    }
    let mut pool = Pool::new(8 * MAX_BURST);
    let (mut rx, mut tx) = (burst(), burst());
    let every = MAINTAIN_EVERY.as_nanos() as u64;
    let mut last_maintain = crate::sys::monotonic_ns();
    if let Some(h) = &hook {
        h(i, &w);
    }
    while !stop.load(Ordering::Relaxed) {
        let n = port.rx_burst(&mut pool, &mut rx, MAX_BURST);
        let now = if n > 0 {
            let now = rx
                .iter()
                .map(|p| p.ts_ns)
                .max()
                .unwrap_or_else(crate::sys::monotonic_ns);
            w.process(&mut rx, &mut tx, &mut pool, now);
            if !tx.is_empty() {
                port.tx_burst(&mut tx, &mut pool);
            }
            now
        } else {
            // Nothing to do: wait for frames (no busy polling on an idle balancer).
            port.wait(Duration::from_millis(1));
            crate::sys::monotonic_ns()
        };
        // Age entries and publish gauges on a clock, so a busy worker does it too. (A burst's
        // time is its newest frame's receive stamp; it can lag the clock slightly, never lead.)
        if now.saturating_sub(last_maintain) >= every {
            last_maintain = now;
            w.maintain(now, &mut pool);
            if let Some(h) = &hook {
                h(i, &w);
            }
        }
    }
    port.stats()
}
