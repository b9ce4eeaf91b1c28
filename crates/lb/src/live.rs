//! `flowplane run --interface IF`: the load balancer on a live interface — the I/O shell around
//! the controller's state machine ([`crate::controller`]) and the engine's driver.
//!
//! * **Data path.** The interface is opened by a port driver of the engine (`--driver`: AF_PACKET
//!   fan-out sockets or AF_XDP queues, one per worker; the driver steers the VIPs' traffic to the
//!   workers), and the engine's driver runs one [`LbWorker`] per socket, pinned, forwarding what
//!   it receives back out of the same interface (one-armed, as Maglev is deployed).
//! * **Control.** One thread (this one) waits for health events, signals and the clock and
//!   feeds the state machine: health results from `fp-control`'s monitor, `SIGHUP` or
//!   `POST /reload` (the file is read here; the machine validates, the monitor is updated, the
//!   machine commits), the kernel's neighbour table every second (`/proc/net/arp`,
//!   `ip -6 neigh`). It carries out what the machine decides: announce VIPs through BIRD
//!   (`fp_control::announce`, started once the workers run), set the destinations the port driver
//!   steers, make the kernel resolve unknown neighbours (an empty UDP datagram to the discard
//!   port), log.
//! * **Operations.** With `--admin`, `fp-control`'s admin server serves `GET /metrics`,
//!   `POST /reload`, `GET /trace` and `GET /status`.
//! * **Shutdown** (`SIGTERM`/`SIGINT`): withdraw every VIP, keep forwarding for `bgp.drain_ms`
//!   while the router moves traffic away, stop BIRD, then the admin server and the workers, close
//!   the sockets (the XDP program is detached), exit 0. A worker that dies stops the balancer
//!   with an error after withdrawing at once (no drain: nothing forwards); if flowplane itself is
//!   killed, BIRD dies with it (parent-death signal) and the router drops the session.

use crate::config::LbConfig;
use crate::controller::{Action, Balancer};
use crate::metrics::{self, MetricsView, WorkerMetrics};
use crate::stats::{Totals, WorkerStats};
use crate::trace::{PacketTracer, TraceLog};
use crate::worker::{LbWorker, TraceRecord};
use anyhow::{bail, Context, Result};
use fp_control::admin::{AdminHandler, AdminServer};
use fp_control::announce::Announcer;
use fp_control::health::{HealthEvent, HealthMonitor, HealthOptions};
use fp_control::signal::{ReloadSignal, TerminateSignal};
use fp_control::systemd::Notifier;
use fp_control::trace::{TracerConfig, DEFAULT_CAPACITY};
use fp_engine::afxdp::ModeChoice;
use fp_engine::driver::{self, Options, Running, Worker, WorkerCounters};
use fp_engine::live::{Capture, Driver, LiveControl, LiveSpec};
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
    /// Port driver.
    pub driver: Driver,
    /// Where the XDP program runs (drivers that attach one).
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

fn read_config(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))
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

/// What the shell owns besides the state machine: the I/O components the actions act on.
struct State {
    machine: Balancer,
    monitor: HealthMonitor,
    /// The BGP announcer (`[bgp]`), started once the workers run.
    announcer: Option<Announcer>,
    capture: LiveControl,
    path: PathBuf,
    interface: String,
    /// The service manager (systemd `Type=notify`), when one started us.
    notify: Notifier,
    /// What `READY=1` says in its status line.
    ready_status: String,
    /// Whether start-up is over (the first `READY=1` was sent): a reload before that (a
    /// `POST /reload` while BIRD starts) must not tell systemd the service is ready.
    ready: bool,
}

impl State {
    /// Carry out the machine's decisions.
    fn apply(&mut self, actions: Vec<Action>) {
        for a in actions {
            match a {
                Action::Log(l) => log(l),
                Action::Announce(vips) => self.announce(&vips),
                Action::SetDestinations(d) => {
                    if let Err(e) = self.capture.set_destinations(&d) {
                        log(format_args!("could not steer the new VIPs: {e}"));
                    }
                }
                Action::Resolve(addrs) => resolve(&addrs),
            }
        }
    }

    /// Tell the BGP speaker what to announce, if that changed.
    fn announce(&mut self, want: &[IpAddr]) {
        let Some(a) = self.announcer.as_mut() else {
            return;
        };
        match a.set(want) {
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

    /// Read the kernel's neighbour table into the machine.
    fn refresh_neighbors(&mut self) {
        let mut table = HashMap::new();
        neighbors_v4(&self.interface, &mut table);
        if self.machine.wants_ipv6_neighbors() {
            neighbors_v6(&self.interface, &mut table);
        }
        let actions = self.machine.on_neighbors(&table);
        self.apply(actions);
        // The path MTU follows the interface's (`ip link set ... mtu N` takes effect here).
        if let Ok(mtu) = fp_engine::live::interface_mtu(&self.interface) {
            let actions = self.machine.on_interface_mtu(mtu);
            self.apply(actions);
        }
    }

    /// Re-read the configuration file: validate, update the health monitor, commit. The service
    /// manager hears `RELOADING=1` before and `READY=1` after, whatever the outcome.
    fn reload(&mut self) -> Result<u64, String> {
        if self.ready {
            self.notify.reloading();
        }
        let result = self.reload_file();
        let status = match &result {
            Ok(g) => format!("{}; configuration generation {g}", self.ready_status),
            Err(e) => format!("{}; last reload rejected: {e}", self.ready_status),
        };
        if self.ready {
            self.notify.ready(&status);
        } else {
            self.notify.status(&status);
        }
        result
    }

    fn reload_file(&mut self) -> Result<u64, String> {
        let r = self
            .machine
            .prepare_reload(read_config(&self.path))
            .and_then(|r| {
                let events = self
                    .monitor
                    .update(r.plan().clone())
                    .map_err(|e| e.to_string())?;
                Ok((r, events))
            });
        match r {
            Ok((r, events)) => {
                let (g, actions) = self.machine.commit_reload(r, &events);
                log(format_args!(
                    "reload of {}: committed, generation {g}",
                    self.path.display()
                ));
                self.apply(actions);
                Ok(g)
            }
            Err(e) => {
                self.machine.reject_reload();
                log(format_args!(
                    "reload of {} rejected, the running configuration stays: {e}",
                    self.path.display()
                ));
                Err(e)
            }
        }
    }

    /// A BGP speaker that died on its own (not through us) is started again and told what to
    /// announce: while it is down the router has withdrawn this balancer, so it receives nothing.
    fn keep_speaker_alive(&mut self) {
        let Some(spec) = self.machine.config().bgp.clone() else {
            return;
        };
        if self.machine.draining() {
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
                let actions = self.machine.on_speaker_started();
                self.apply(actions);
            }
            Err(e) => log(format_args!("BGP speaker restart failed, will retry: {e}")),
        }
    }
}

/// Make the kernel resolve neighbours it has no entry for: an empty datagram to the discard port
/// (a health check would do the same, but not every pool has one).
fn resolve(addrs: &[IpAddr]) {
    for &a in addrs {
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

/// What the admin server reads.
struct Shared {
    state: Mutex<State>,
    stats: Vec<Arc<WorkerStats>>,
    ports: Vec<Arc<WorkerCounters>>,
    trace: Arc<TraceLog<TraceRecord>>,
    started: Instant,
    description: String,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl AdminHandler for Shared {
    fn metrics(&self) -> String {
        let totals = Totals::sum(self.stats.iter().map(|s| &**s));
        let workers: Vec<_> = self
            .stats
            .iter()
            .enumerate()
            .map(|(i, s)| WorkerMetrics::of(i, s))
            .collect();
        let st = self.lock();
        let health = st.monitor.states();
        let snap = st.machine.snapshots().load();
        metrics::render(&MetricsView {
            totals: &totals,
            workers: &workers,
            snapshot: &snap,
            config_generation: st.machine.generation(),
            reloads: st.machine.reloads(),
            health: &health,
            maglev: st.machine.maglev(),
            trace: self.trace.counts(),
            interfaces: std::slice::from_ref(&st.interface),
            ports: &self.ports,
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
        let st = self.lock();
        let m = &st.machine;
        let snap = m.snapshots().load();
        let mut s = String::new();
        let _ = writeln!(s, "flowplane {}", env!("CARGO_PKG_VERSION"));
        let _ = writeln!(s, "{}", self.description);
        let _ = writeln!(
            s,
            "config {} generation {} (reloads: {} ok, {} rejected); snapshot {}; up {} s",
            st.path.display(),
            m.generation(),
            m.reloads().ok,
            m.reloads().failed,
            m.snapshots().generation(),
            self.started.elapsed().as_secs()
        );
        for v in &snap.vips {
            let _ = writeln!(
                s,
                "vip {:?}: {} backends, table {}; path MTU {}{}",
                v.name,
                v.members.len(),
                v.table
                    .as_ref()
                    .map_or("none (no healthy backend)".to_string(), |t| format!(
                        "{} slots, digest {:016x}",
                        t.size(),
                        t.digest()
                    )),
                v.mtu,
                if v.quic.is_some() {
                    "; QUIC connection-ID routing"
                } else {
                    ""
                }
            );
        }
        if let Some(a) = &st.announcer {
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
        for (i, w) in self.stats.iter().enumerate() {
            let ((c4, c6), (s4, s6)) = w.occupancy();
            let _ = writeln!(
                s,
                "worker {i}: connections {c4} of {s4} slots (IPv4), {c6} of {s6} (IPv6); syn guard {}",
                crate::worker::GuardMode::from_gauge(w.guard_mode()).name()
            );
        }
        for h in st.monitor.states() {
            let mac = m
                .neighbors()
                .get(&h.address)
                .map_or("unresolved".to_string(), |m| m.to_string());
            let draining = snap
                .backends
                .iter()
                .flatten()
                .any(|b| b.address == h.address && b.draining);
            let _ = writeln!(
                s,
                "backend {h}; mac {mac}{}",
                if draining { "; draining" } else { "" }
            );
        }
        s
    }
}

/// Run the balancer until SIGTERM/SIGINT.
pub fn run(o: &LiveOptions) -> Result<()> {
    let text = read_config(&o.config).map_err(|e| anyhow::anyhow!("{e}"))?;
    let cfg = LbConfig::from_toml(&text).map_err(|e| anyhow::anyhow!("{e}"))?;
    if cfg.balancer.address.is_none() {
        log("warning: balancer.address is not set; IPv4 tunnels have no outer source");
    }
    let term = TerminateSignal::install().context("installing SIGTERM/SIGINT handlers")?;
    let hup = ReloadSignal::try_install().context("installing the SIGHUP handler")?;
    let notify = Notifier::from_env().context("NOTIFY_SOCKET")?;

    let mac = fp_engine::live::interface_mac(&o.interface).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut machine = Balancer::new(cfg, Some(mac), o.driver.filters_destinations())
        .map_err(|e| anyhow::anyhow!("{}: {e}", o.config.display()))?;
    // Before the workers start, so their first snapshot has the path MTU (the announcement this
    // publishes waits for the BGP speaker, started below).
    match fp_engine::live::interface_mtu(&o.interface) {
        Ok(mtu) => drop(machine.on_interface_mtu(mtu)),
        Err(e) => log(format_args!(
            "warning: {e}; path MTU 1500 unless configured"
        )),
    }
    let (monitor, health_rx) =
        HealthMonitor::start(machine.health_plan(), HealthOptions::default())
            .map_err(|e| anyhow::anyhow!("{}: {e}", o.config.display()))?;

    let spec = LiveSpec {
        interfaces: vec![o.interface.clone()],
        workers: o.workers.max(1),
        capture: Capture::Destinations(machine.destinations()),
        xdp_mode: o.xdp_mode,
        ring_bytes: None,
    };
    let opened = o
        .driver
        .open(&spec)
        .with_context(|| format!("opening {}", o.interface))?;
    let n = opened.ports.len();
    let description = opened.description.clone();
    log(&description);

    let trace = TraceLog::new(DEFAULT_CAPACITY);
    let seed = machine.config().balancer.seed;
    let mut workers = Vec::with_capacity(n);
    for (i, ports) in opened.ports.into_iter().enumerate() {
        let mut w = LbWorker::new(i, machine.snapshots().clone(), seed ^ i as u64)?;
        w.set_tracer(Box::new(PacketTracer::new(&trace, TracerConfig::default())));
        workers.push(Worker { stage: w, ports });
    }
    let stats: Vec<Arc<WorkerStats>> = workers.iter().map(|w| w.stage.stats().clone()).collect();
    let running = driver::start(
        workers,
        &Options {
            name: "fp-worker".into(),
            pin: o.pin,
            ..Options::default()
        },
    )?;

    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            machine,
            monitor,
            announcer: None,
            capture: opened.control,
            path: o.config.clone(),
            interface: o.interface.clone(),
            notify,
            ready_status: format!("forwarding on {} with {n} worker(s)", o.interface),
            ready: false,
        }),
        stats,
        ports: running.counters(),
        trace,
        started: Instant::now(),
        description,
    });
    shared.lock().refresh_neighbors();
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
    let bgp = shared.lock().machine.config().bgp.clone();
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
        let mut st = shared.lock();
        st.announcer = Some(a);
        let actions = st.machine.on_speaker_started();
        st.apply(actions);
    }
    log(format_args!("ready: {n} worker(s) on {}", o.interface));
    {
        let mut st = shared.lock();
        let status = st.ready_status.clone();
        st.notify.ready(&status);
        st.ready = true;
    }

    let result = control_loop(&shared, &health_rx, &term, &hup, &running);
    log("shutting down");
    // Drain (Maglev §4.1.1 via BGP): withdraw, keep forwarding while the router moves traffic
    // to the other balancers, then stop. Not after a forwarder failure: nothing forwards then.
    let announcer = {
        let mut st = shared.lock();
        let drain = match (&st.machine.config().bgp, &st.announcer) {
            (Some(spec), Some(_)) if result.is_ok() => Some(Duration::from_millis(spec.drain_ms)),
            _ => None,
        };
        st.notify.stopping(drain);
        let actions = st.machine.drain();
        st.apply(actions);
        st.announcer.take()
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
    let (mut rx, mut tx) = (0u64, 0u64);
    if let Ok(done) = running.stop() {
        for w in &done {
            for p in &w.ports {
                rx += p.rx;
                tx += p.tx;
            }
        }
    }
    let totals = Totals::sum(shared.stats.iter().map(|s| &**s));
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
    // Dropping the state closes the destination map handle; the XDP program went with the sockets.
    drop(shared);
    result
}

fn control_loop(
    shared: &Shared,
    health_rx: &Receiver<HealthEvent>,
    term: &TerminateSignal,
    hup: &ReloadSignal,
    workers: &Running<LbWorker>,
) -> Result<()> {
    let mut last_neighbors = Instant::now();
    loop {
        if term.is_set() {
            return Ok(());
        }
        if let Err(e) = workers.check() {
            bail!("{e}; VIPs withdrawn");
        }
        // Every worker is alive: tell systemd's watchdog (when it asked for pings).
        shared.lock().notify.watchdog(true);
        match health_rx.recv_timeout(Duration::from_millis(100)) {
            Ok(e) => {
                let mut events = vec![e];
                events.extend(health_rx.try_iter());
                let mut st = shared.lock();
                let actions = st.machine.on_health(&events);
                st.apply(actions);
                // A backend that just passed a check from this namespace has a fresh neighbour
                // entry: read it now, so its first packets do not go to the gateway MAC.
                st.refresh_neighbors();
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => std::thread::sleep(Duration::from_millis(100)),
        }
        if hup.take() {
            let _ = shared.lock().reload();
        }
        if last_neighbors.elapsed() >= NEIGHBOR_EVERY {
            last_neighbors = Instant::now();
            let mut st = shared.lock();
            st.refresh_neighbors();
            st.keep_speaker_alive();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
