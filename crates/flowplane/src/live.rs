//! `flowplane run --interface IF`: the load balancer on a live interface, and its control loop.
//!
//! The data path is `fp_io::live` (one worker per AF_PACKET fan-out socket or AF_XDP queue). This
//! module is the control side that Maglev §2.2 and §4.4 describe, on one thread plus the health
//! checkers and the admin server of `fp-control`:
//!
//! * **Snapshots.** Every change — a health event, a reload, a backend's MAC learnt from the
//!   kernel's neighbour table — builds a new immutable snapshot and publishes it; workers switch
//!   between two bursts. Backend ids are stable, so connections survive; a connection whose
//!   backend went down or left is re-selected by Maglev on its next packet.
//! * **Reload** (`SIGHUP` or `POST /reload`): parse and validate the file, check its health plan,
//!   build a trial snapshot on a copy of the builder; only if all of that succeeds is it
//!   committed (health monitor updated, snapshot published, AF_XDP VIP map updated, generation
//!   increased). Otherwise the running configuration stays and the error names the field.
//! * **Neighbours.** Tunnelled and L2-DSR packets go to on-link backends' own MACs, read from the
//!   kernel (`/proc/net/arp`, `ip -6 neigh`) every second; an unresolved backend is poked with an
//!   empty UDP datagram so the kernel resolves it (health checks from this namespace do the same).
//!   Until then its packets go to `balancer.gateway_mac`.
//! * **BGP** (`[bgp]`, Maglev §2.1, §4.1.1): once the workers run, BIRD is started
//!   (`fp_control::announce`) and told to announce exactly the exact-address VIPs that have at
//!   least one healthy backend; every published snapshot re-evaluates that set, so a VIP that
//!   loses its last backend is withdrawn and announced again when one comes back.
//! * **Shutdown** (`SIGTERM`/`SIGINT`): withdraw every VIP, keep forwarding for `bgp.drain_ms` while
//!   the router moves traffic away, stop BIRD, then the admin server and the workers; close the
//!   sockets (the XDP program is detached), exit 0. A worker that dies stops the balancer with an
//!   error after withdrawing at once (no drain: nothing forwards); if flowplane itself is killed,
//!   BIRD dies with it (parent-death signal) and the router drops the session.

use anyhow::{bail, Context, Result};
use fp_control::admin::{AdminHandler, AdminServer};
use fp_control::announce::Announcer;
use fp_control::health::{self, HealthEvent, HealthMonitor, HealthOptions};
use fp_control::metrics::{self, MaglevChanges, MetricsView, ReloadCounts, WorkerGauges};
use fp_control::signal::{ReloadSignal, TerminateSignal};
use fp_control::trace::{TraceLog, TracerConfig, DEFAULT_CAPACITY};
use fp_io::afxdp::{ModeChoice, VipControl};
use fp_io::live::{self, Driver, LiveSpec, WorkerOptions};
use fp_pipeline::config::{LbConfig, VipMatch};
use fp_pipeline::lb::Tracer;
use fp_pipeline::snapshot::{Builder, Published, Snapshot};
use fp_pipeline::stats::{Totals, WorkerStats};
use fp_wire::ethernet::MacAddr;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How a live run is set up (from `flowplane run`'s arguments).
#[derive(Clone, Debug)]
pub struct LiveOptions {
    /// The configuration file (re-read on reload).
    pub config: PathBuf,
    /// Interface to balance on (one-armed: packets leave where they came in).
    pub interface: String,
    /// Socket kind.
    pub driver: Driver,
    /// Where the XDP program runs (AF_XDP).
    pub xdp_mode: ModeChoice,
    /// Worker threads.
    pub workers: usize,
    /// Admin HTTP server address (metrics, reload, trace, status).
    pub admin: Option<SocketAddr>,
    /// Pin worker `i` to CPU `i`.
    pub pin: bool,
}

/// How often the kernel's neighbour table is read.
const NEIGHBOR_EVERY: Duration = Duration::from_secs(1);

fn log(msg: impl std::fmt::Display) {
    eprintln!("flowplane: {msg}");
}

fn read_config(path: &Path) -> Result<LbConfig, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    LbConfig::from_toml(&text).map_err(|e| e.to_string())
}

/// The exact VIP addresses (what the AF_XDP program steers to the sockets). Prefix/suffix VIPs
/// cannot be steered by that program: with AF_XDP they are an error naming the VIP.
fn steered_vips(cfg: &LbConfig, driver: Driver) -> Result<Vec<IpAddr>, String> {
    let mut out = Vec::new();
    for (i, v) in cfg.vips.iter().enumerate() {
        match v.matcher {
            VipMatch::Exact(a) => {
                if !out.contains(&a) {
                    out.push(a)
                }
            }
            VipMatch::Suffix { .. } if driver == Driver::AfXdp => {
                return Err(format!(
                    "vip[{i}] ({:?}): prefix/suffix VIPs are not steered by the AF_XDP program; \
                     use --driver af_packet",
                    v.name
                ))
            }
            VipMatch::Suffix { .. } => {}
        }
    }
    Ok(out)
}

/// The interface's MAC address.
fn interface_mac(ifname: &str) -> Result<MacAddr> {
    let path = format!("/sys/class/net/{ifname}/address");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("interface {ifname:?}: reading {path}"))?;
    parse_mac(text.trim()).with_context(|| format!("interface {ifname:?}: bad address {text:?}"))
}

/// A neighbour's MAC; the kernel shows an incomplete entry as all zeros.
fn parse_mac(s: &str) -> Option<MacAddr> {
    s.parse().ok().filter(|m: &MacAddr| m.0 != [0; 6])
}

/// Complete IPv4 neighbour entries of `ifname` from `/proc/net/arp` (flag ATF_COM).
fn neighbors_v4(ifname: &str, out: &mut HashMap<IpAddr, MacAddr>) {
    let Ok(text) = std::fs::read_to_string("/proc/net/arp") else {
        return;
    };
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 6 || f[5] != ifname {
            continue;
        }
        let complete = u32::from_str_radix(f[2].trim_start_matches("0x"), 16).unwrap_or(0) & 2;
        if let (Ok(ip), Some(mac), true) = (f[0].parse::<IpAddr>(), parse_mac(f[3]), complete != 0)
        {
            out.insert(ip, mac);
        }
    }
}

/// IPv6 neighbour entries with a link-layer address (`ip -6 neigh show dev IF`); there is no
/// procfs file for them.
fn neighbors_v6(ifname: &str, out: &mut HashMap<IpAddr, MacAddr>) {
    let Ok(o) = std::process::Command::new("ip")
        .args(["-6", "neigh", "show", "dev", ifname])
        .output()
    else {
        return;
    };
    for line in String::from_utf8_lossy(&o.stdout).lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let Some(i) = f.iter().position(|w| *w == "lladdr") else {
            continue;
        };
        if f.last() == Some(&"FAILED") || f.last() == Some(&"INCOMPLETE") {
            continue;
        }
        if let (Ok(ip), Some(mac)) = (
            f[0].parse::<IpAddr>(),
            f.get(i + 1).and_then(|m| parse_mac(m)),
        ) {
            out.insert(ip, mac);
        }
    }
}

/// Reject a reload that changes a setting fixed at start: table sizes and timeouts the workers
/// allocated, the flow-hash seed the workers hash with (a balancer that reloaded a new seed would
/// disagree with one that restarted), the counter slots, and the BGP speaker's settings.
fn restart_only(old: &LbConfig, new: &LbConfig) -> Result<(), String> {
    let (a, b) = (&old.balancer, &new.balancer);
    let fixed: [(&str, bool); 8] = [
        ("balancer.seed", a.seed != b.seed),
        (
            "balancer.conn_table_capacity",
            a.conn_capacity != b.conn_capacity,
        ),
        (
            "balancer.conn_table_capacity_v6",
            a.conn_capacity_v6 != b.conn_capacity_v6,
        ),
        (
            "balancer.fragment_table_capacity",
            a.frag_capacity != b.frag_capacity,
        ),
        (
            "balancer.fragment_timeout_ms",
            a.frag_timeout_ms != b.frag_timeout_ms,
        ),
        ("balancer.max_vips", a.max_vips != b.max_vips),
        ("balancer.max_backends", a.max_backends != b.max_backends),
        ("bgp", old.bgp != new.bgp),
    ];
    match fixed.iter().find(|(_, changed)| *changed) {
        Some((field, _)) => Err(format!(
            "{field}: cannot change by reload (it is fixed when the balancer starts); restart it"
        )),
        None => Ok(()),
    }
}

/// The balancer's control state: one lock, taken by the control loop and the admin handlers.
struct Control {
    path: PathBuf,
    interface: String,
    driver: Driver,
    config: Arc<LbConfig>,
    builder: Builder,
    monitor: HealthMonitor,
    snaps: Arc<Published<Snapshot>>,
    generation: u64,
    reloads: ReloadCounts,
    maglev: MaglevChanges,
    vips: Option<VipControl>,
    neighbors: HashMap<IpAddr, MacAddr>,
    /// The BGP announcer (`[bgp]`), started once the workers run.
    announcer: Option<Announcer>,
    /// Set when the balancer is shutting down or its forwarder failed: announce nothing.
    draining: bool,
}

impl Control {
    /// The VIP addresses this balancer should announce now (Maglev §2.1, §4.1.1): exact VIPs of
    /// the next hop's family with at least one healthy backend (an address serving several
    /// VIPs is announced while any of them has one), nothing while draining.
    fn wanted_announcements(&self) -> Vec<IpAddr> {
        let Some(bgp) = &self.config.bgp else {
            return Vec::new();
        };
        if self.draining {
            return Vec::new();
        }
        let snap = self.snaps.load();
        let mut out: Vec<IpAddr> = snap
            .vips
            .iter()
            .filter(|v| v.table.is_some())
            .filter_map(|v| match v.matcher {
                VipMatch::Exact(a) if a.is_ipv4() == bgp.next_hop.is_ipv4() => Some(a),
                _ => None,
            })
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// A BGP speaker that died on its own (not through us) is started again and told what to
    /// announce: while it is down the router has withdrawn this balancer, so it receives nothing.
    fn keep_speaker_alive(&mut self) {
        let Some(spec) = self.config.bgp.clone() else {
            return;
        };
        if self.draining {
            return;
        }
        match &self.announcer {
            Some(a) if a.is_running() => return,
            Some(a) => {
                log(format_args!(
                    "BGP speaker {} exited unexpectedly; its log:\n{}",
                    spec.speaker,
                    a.log_tail(20)
                ));
                self.announcer = None; // Dropping it removes its state files first.
            }
            None => {}
        }
        match Announcer::start(&spec) {
            Ok(a) => {
                log(format_args!("BGP speaker restarted (pid {})", a.pid()));
                self.announcer = Some(a);
                self.update_announcements();
            }
            Err(e) => log(format_args!("BGP speaker restart failed, will retry: {e}")),
        }
    }

    /// Tell the BGP speaker what to announce, if that changed.
    fn update_announcements(&mut self) {
        let want = self.wanted_announcements();
        let Some(a) = self.announcer.as_mut() else {
            return;
        };
        match a.set(&want) {
            Ok(true) => log(format_args!(
                "announcing {} VIP(s) over BGP: {}",
                want.len(),
                want.iter()
                    .map(|v| v.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
            Ok(false) => {}
            Err(e) => log(format_args!("BGP announcement update failed: {e}")),
        }
    }

    /// Build a snapshot of the current config and state and publish it.
    fn publish(&mut self, why: &str) -> Result<(), String> {
        let new = self
            .builder
            .build(self.config.clone())
            .map_err(|e| e.to_string())?;
        let old = self.snaps.load();
        let moved = self.maglev.record(Some(&old), &new);
        self.snaps.publish(Arc::new(new));
        self.update_announcements();
        let moved: Vec<String> = moved.iter().map(|(v, n)| format!("{v}: {n}")).collect();
        log(format_args!(
            "snapshot {} published ({why}){}",
            self.snaps.generation(),
            if moved.is_empty() {
                String::new()
            } else {
                format!("; Maglev entries moved: {}", moved.join(", "))
            }
        ));
        Ok(())
    }

    fn reload(&mut self) -> Result<u64, String> {
        let r = self.try_reload();
        match &r {
            Ok(g) => {
                self.reloads.ok += 1;
                log(format_args!(
                    "reload of {}: committed, generation {g}",
                    self.path.display()
                ));
            }
            Err(e) => {
                self.reloads.failed += 1;
                log(format_args!(
                    "reload of {} rejected, the running configuration stays: {e}",
                    self.path.display()
                ));
            }
        }
        r
    }

    fn try_reload(&mut self) -> Result<u64, String> {
        // Validate everything first; nothing below the trial build can fail on this config.
        let cfg = read_config(&self.path)?;
        restart_only(&self.config, &cfg)?;
        health::plan(&cfg).map_err(|e| e.to_string())?;
        let vips = steered_vips(&cfg, self.driver)?;
        let cfg = Arc::new(cfg);
        self.builder
            .clone()
            .build(cfg.clone())
            .map_err(|e| e.to_string())?;
        // Commit.
        let events = self.monitor.update(&cfg).map_err(|e| e.to_string())?;
        for e in events {
            self.builder.set_health(e.address, e.healthy);
        }
        self.config = cfg;
        self.generation += 1;
        let g = self.generation;
        self.publish(&format!("configuration generation {g}"))?;
        if let Some(vc) = &self.vips {
            vc.set(&vips)
                .map_err(|e| format!("updating the XDP VIP map: {e}"))?;
        }
        self.poke_unresolved();
        Ok(g)
    }

    fn health_event(&mut self, e: &HealthEvent) -> bool {
        log(format_args!(
            "backend {} is {}: {}",
            e.address,
            if e.healthy { "up" } else { "down" },
            e.reason
        ));
        self.builder.set_health(e.address, e.healthy)
    }

    /// Addresses whose MACs the data path needs: backends, and the other balancers of a
    /// `[cluster]` (fragments are redirected to them).
    fn on_link(&self) -> Vec<IpAddr> {
        let mut v = self.config.backend_addresses();
        if let Some(c) = &self.config.cluster {
            v.extend(
                c.balancers
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| *i != c.me)
                    .map(|(_, a)| IpAddr::V4(*a)),
            );
        }
        v
    }

    /// Read the kernel's neighbour table; returns whether a backend's (or peer balancer's) MAC
    /// changed.
    fn refresh_neighbors(&mut self) -> bool {
        let mut now = HashMap::new();
        let wanted = self.on_link();
        neighbors_v4(&self.interface, &mut now);
        if wanted.iter().any(|a| a.is_ipv6()) {
            neighbors_v6(&self.interface, &mut now);
        }
        let mut changed = false;
        for a in wanted {
            let mac = now.get(&a).copied();
            if self.neighbors.get(&a).copied() != mac {
                match mac {
                    Some(m) => log(format_args!("{a} is at {m}")),
                    None => log(format_args!("{a}: neighbour entry gone")),
                }
                changed |= self.builder.set_neighbor(a, mac);
            }
        }
        self.neighbors = now;
        changed
    }

    /// Make the kernel resolve backends it has no neighbour entry for: an empty datagram to the
    /// discard port (a health check would do the same, but not every pool has one).
    fn poke_unresolved(&self) {
        for a in self.on_link() {
            if self.neighbors.contains_key(&a) {
                continue;
            }
            let bind: SocketAddr = if a.is_ipv4() {
                "0.0.0.0:0".parse().expect("literal")
            } else {
                "[::]:0".parse().expect("literal")
            };
            if let Ok(s) = UdpSocket::bind(bind) {
                let _ = s.send_to(&[], SocketAddr::new(a, 9));
            }
        }
    }
}

struct Shared {
    ctl: Mutex<Control>,
    stats: Vec<Arc<WorkerStats>>,
    gauges: Vec<Arc<WorkerGauges>>,
    trace: Arc<TraceLog>,
    started: Instant,
    description: String,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Control> {
        self.ctl.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl AdminHandler for Shared {
    fn metrics(&self) -> String {
        let totals = Totals::sum(self.stats.iter().map(|s| &**s));
        let workers: Vec<_> = self
            .gauges
            .iter()
            .zip(&self.stats)
            .enumerate()
            .map(|(i, (g, s))| g.metrics(i, s))
            .collect();
        let c = self.lock();
        let health = c.monitor.states();
        let snap = c.snaps.load();
        metrics::render(&MetricsView {
            totals: &totals,
            workers: &workers,
            snapshot: &snap,
            config_generation: c.generation,
            reloads: c.reloads,
            health: &health,
            maglev: &c.maglev,
            trace: self.trace.counts(),
            uptime: self.started.elapsed(),
        })
    }

    fn reload(&self) -> Result<u64, String> {
        self.lock().reload()
    }

    fn traces(&self) -> String {
        self.trace.json_lines()
    }

    fn status(&self) -> String {
        use std::fmt::Write;
        let c = self.lock();
        let snap = c.snaps.load();
        let mut s = String::new();
        let _ = writeln!(s, "flowplane {}", env!("CARGO_PKG_VERSION"));
        let _ = writeln!(s, "{}", self.description);
        let _ = writeln!(
            s,
            "config {} generation {} (reloads: {} ok, {} rejected); snapshot {}; up {} s",
            c.path.display(),
            c.generation,
            c.reloads.ok,
            c.reloads.failed,
            c.snaps.generation(),
            self.started.elapsed().as_secs()
        );
        for v in &snap.vips {
            let _ = writeln!(
                s,
                "vip {:?}: {} backends, table {}",
                v.name,
                v.members.len(),
                v.table
                    .as_ref()
                    .map_or("none (no healthy backend)".to_string(), |t| format!(
                        "{} slots, digest {:016x}",
                        t.size(),
                        t.digest()
                    ))
            );
        }
        if let Some(a) = &c.announcer {
            let _ = writeln!(
                s,
                "bgp: session {}; announcing {}",
                a.session_state().unwrap_or_else(|e| e.to_string()),
                if a.announced().is_empty() {
                    "nothing".to_string()
                } else {
                    a.announced()
                        .iter()
                        .map(|v| v.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            );
        }
        for h in c.monitor.states() {
            let mac = c
                .neighbors
                .get(&h.address)
                .map_or("unresolved".to_string(), |m| m.to_string());
            let _ = writeln!(s, "backend {h}; mac {mac}");
        }
        s
    }
}

/// Run the balancer until SIGTERM/SIGINT.
pub fn run(o: &LiveOptions) -> Result<()> {
    let cfg = read_config(&o.config).map_err(|e| anyhow::anyhow!("{e}"))?;
    let vips = steered_vips(&cfg, o.driver).map_err(|e| anyhow::anyhow!("{e}"))?;
    if cfg.balancer.address.is_none() {
        log("warning: balancer.address is not set; IPv4 tunnels have no outer source");
    }
    let term = TerminateSignal::install().context("installing SIGTERM/SIGINT handlers")?;
    let hup = ReloadSignal::try_install().context("installing the SIGHUP handler")?;

    let mut builder = Builder::new();
    builder.set_local_mac(interface_mac(&o.interface)?);
    let (monitor, health_rx) = HealthMonitor::start(&cfg, HealthOptions::default())
        .map_err(|e| anyhow::anyhow!("{}: {e}", o.config.display()))?;
    let cfg = Arc::new(cfg);
    let first = builder.build(cfg.clone())?;
    let snaps = Arc::new(Published::new(Arc::new(first)));

    let spec = LiveSpec {
        interface: o.interface.clone(),
        driver: o.driver,
        workers: o.workers.max(1),
        xdp_mode: o.xdp_mode,
    };
    let ports = live::open(&spec, &vips).with_context(|| format!("opening {}", o.interface))?;
    let n = ports.ports.len();
    let description = ports.description.clone();
    log(&description);

    let trace = TraceLog::new(DEFAULT_CAPACITY);
    let gauges: Vec<Arc<WorkerGauges>> = (0..n).map(|_| Arc::new(WorkerGauges::new())).collect();
    let tracer_log = trace.clone();
    let hook_gauges = gauges.clone();
    let workers = live::spawn_workers(
        snaps.clone(),
        ports.ports,
        &WorkerOptions {
            table_seed: cfg.balancer.seed,
            pin: o.pin,
            tracer: Some(Box::new(move |_| {
                Box::new(tracer_log.tracer(TracerConfig::default())) as Box<dyn Tracer>
            })),
            hook: Some(Arc::new(move |i, w| hook_gauges[i].publish(w))),
        },
    )?;

    let shared = Arc::new(Shared {
        ctl: Mutex::new(Control {
            path: o.config.clone(),
            interface: o.interface.clone(),
            driver: o.driver,
            config: cfg,
            builder,
            monitor,
            snaps,
            generation: 1,
            reloads: ReloadCounts::default(),
            maglev: MaglevChanges::new(),
            vips: ports.vips,
            neighbors: HashMap::new(),
            announcer: None,
            draining: false,
        }),
        stats: workers.stats.clone(),
        gauges,
        trace,
        started: Instant::now(),
        description,
    });
    {
        let mut c = shared.lock();
        if c.refresh_neighbors() {
            c.publish("neighbours").map_err(|e| anyhow::anyhow!(e))?;
        }
        c.poke_unresolved();
    }
    let admin = match o.admin {
        Some(addr) => {
            let s = AdminServer::start(addr, shared.clone())
                .with_context(|| format!("admin server on {addr}"))?;
            log(format_args!("admin server on http://{}", s.local_addr()));
            Some(s)
        }
        None => None,
    };
    // Announce only once the forwarder runs (and only VIPs with a healthy backend).
    let bgp = shared.lock().config.bgp.clone();
    if let Some(spec) = &bgp {
        let a =
            Announcer::start(spec).with_context(|| format!("bgp: starting {}", spec.speaker))?;
        log(format_args!(
            "BGP speaker {} started (pid {}), peer {} AS {}",
            spec.speaker,
            a.pid(),
            spec.peer,
            spec.peer_as
        ));
        let mut c = shared.lock();
        c.announcer = Some(a);
        c.update_announcements();
    }
    log(format_args!("ready: {n} worker(s) on {}", o.interface));

    let result = control_loop(&shared, &health_rx, &term, &hup, &workers);
    log("shutting down");
    // Drain (Maglev §4.1.1 via BGP): withdraw, keep forwarding while the router moves traffic
    // to the other balancers, then stop. Not after a forwarder failure: nothing forwards then.
    let announcer = {
        let mut c = shared.lock();
        c.draining = true;
        c.update_announcements();
        c.announcer.take()
    };
    if let (Some(spec), true) = (&bgp, result.is_ok() && announcer.is_some()) {
        log(format_args!(
            "VIPs withdrawn; draining for {} ms",
            spec.drain_ms
        ));
        std::thread::sleep(Duration::from_millis(spec.drain_ms));
    }
    if let Some(a) = announcer {
        a.stop();
    }
    if let Some(a) = admin {
        a.shutdown();
    }
    let port_stats = workers.stop();
    let totals = Totals::sum(shared.stats.iter().map(|s| &**s));
    let (rx, tx): (u64, u64) = port_stats
        .iter()
        .fold((0, 0), |(r, t), p| (r + p.rx, t + p.tx));
    let drops: Vec<String> = totals
        .drops()
        .iter()
        .map(|(r, n)| format!("{r} {n}"))
        .collect();
    log(format_args!(
        "received {rx} frames, sent {tx}; drops: {}",
        if drops.is_empty() {
            "none".into()
        } else {
            drops.join(", ")
        }
    ));
    // Dropping the control state closes the VIP map handle; the XDP program went with the sockets.
    drop(shared);
    result
}

fn control_loop(
    shared: &Shared,
    health_rx: &Receiver<HealthEvent>,
    term: &TerminateSignal,
    hup: &ReloadSignal,
    workers: &live::LiveWorkers,
) -> Result<()> {
    let mut last_neighbors = Instant::now();
    loop {
        if term.is_set() {
            return Ok(());
        }
        if !workers.alive() {
            bail!("a worker thread stopped unexpectedly; VIPs withdrawn");
        }
        let mut dirty = false;
        match health_rx.recv_timeout(Duration::from_millis(100)) {
            Ok(e) => {
                let mut c = shared.lock();
                dirty |= c.health_event(&e);
                while let Ok(e) = health_rx.try_recv() {
                    dirty |= c.health_event(&e);
                }
                // A backend that just passed a check from this namespace has a fresh neighbour
                // entry: read it now, so its first packets do not go to the gateway MAC.
                dirty |= c.refresh_neighbors();
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => std::thread::sleep(Duration::from_millis(100)),
        }
        if hup.take() {
            let _ = shared.lock().reload();
        }
        if last_neighbors.elapsed() >= NEIGHBOR_EVERY {
            last_neighbors = Instant::now();
            let mut c = shared.lock();
            dirty |= c.refresh_neighbors();
            c.poke_unresolved();
            c.keep_speaker_alive();
        }
        if dirty {
            let mut c = shared.lock();
            if let Err(e) = c.publish("health or neighbours changed") {
                log(format_args!("could not build a snapshot: {e}"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CFG: &str = r#"
        [balancer]
        address = "10.0.0.2"
        seed = 7
        conn_table_capacity = 1000
        [[vip]]
        name = "web"
        address = "203.0.113.10"
        port = 80
        protocol = "tcp"
        pools = ["p"]
        [[pool]]
        name = "p"
        backends = [{ address = "10.0.1.1" }]
    "#;

    fn cfg(text: &str) -> LbConfig {
        LbConfig::from_toml(text).unwrap()
    }

    #[test]
    fn reload_rejects_start_time_settings_naming_the_field() {
        let old = cfg(CFG);
        assert!(restart_only(&old, &cfg(&CFG.replace("10.0.1.1", "10.0.1.9"))).is_ok());
        for (from, to, field) in [
            ("seed = 7", "seed = 8", "balancer.seed"),
            (
                "capacity = 1000",
                "capacity = 2000",
                "balancer.conn_table_capacity",
            ),
            (
                "seed = 7",
                "seed = 7\n        max_backends = 10",
                "balancer.max_backends",
            ),
        ] {
            let e = restart_only(&old, &cfg(&CFG.replace(from, to))).unwrap_err();
            assert!(e.starts_with(field), "{e}");
        }
        let bgp = format!("{CFG}\n[bgp]\nlocal_as = 65001\npeer = \"10.0.0.1\"\npeer_as = 65000\n");
        assert!(restart_only(&old, &cfg(&bgp))
            .unwrap_err()
            .starts_with("bgp"));
    }

    #[test]
    fn steering_rejects_suffix_vips_only_for_af_xdp() {
        let text = CFG.replace(
            "address = \"203.0.113.10\"",
            "prefix_group = \"g\"\n        suffix = \"0.0.0.10\"\n        suffix_len = 8",
        ) + "\n[[prefix_group]]\nname = \"g\"\nprefixes = [\"203.0.113.0/24\"]\n";
        let c = cfg(&text);
        assert!(steered_vips(&c, Driver::AfPacket).unwrap().is_empty());
        let e = steered_vips(&c, Driver::AfXdp).unwrap_err();
        assert!(e.starts_with("vip[0]"), "{e}");
    }

    #[test]
    fn mac_parsing() {
        assert_eq!(
            parse_mac("02:66:70:00:00:01"),
            Some(MacAddr([2, 0x66, 0x70, 0, 0, 1]))
        );
        assert_eq!(
            parse_mac("00:00:00:00:00:00"),
            None,
            "incomplete ARP entries"
        );
        assert_eq!(parse_mac("02:66:70:00:00"), None);
        assert_eq!(parse_mac("02:66:70:00:00:01:02"), None);
    }
}
