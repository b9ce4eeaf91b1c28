//! `flowplane run --interface IF`: the load balancer on a live interface — the I/O shell around
//! the controller's state machine ([`crate::controller`]) on the service runner (`fp-service`).
//!
//! * **Data path.** The runner opens the interface with the chosen port driver (AF_PACKET fan-out
//!   sockets or AF_XDP queues, one per worker; the driver steers the VIPs' traffic to the workers
//!   and keeps it from the host's own stack) and runs one [`LbStage`] per worker, pinned,
//!   forwarding what it receives back out of the same interface (one-armed, as Maglev is
//!   deployed).
//! * **Control.** The runner's control thread feeds the state machine: health results from
//!   `fp-control`'s monitor (forwarded as events), `SIGHUP` or `POST /reload` (the file is read
//!   here; the machine validates, the monitor is updated, the machine commits), and every second
//!   the kernel's neighbour table (`/proc/net/arp`, `ip -6 neigh`), the interface's MTU and the
//!   BGP speaker's liveness. It carries out what the machine decides: announce VIPs through BIRD
//!   (`fp_control::announce`, started once the workers run), set the destinations the port driver
//!   steers, make the kernel resolve unknown neighbours (an empty UDP datagram to the discard
//!   port), log. After every change it publishes what the admin server reads
//!   ([`crate::metrics::LbView`]), so `/metrics` never waits for a reload.
//! * **Shutdown** (`SIGTERM`/`SIGINT`): withdraw every VIP, keep forwarding for `bgp.drain_ms`
//!   while the router moves traffic away, stop BIRD, then the admin server and the workers, close
//!   the sockets (the XDP program is detached), exit 0. A worker that dies stops the balancer
//!   with an error after withdrawing at once (no drain: nothing forwards); if flowplane itself is
//!   killed, BIRD dies with it (parent-death signal) and the router drops the session.

use crate::config::LbConfig;
use crate::controller::{Action, Balancer};
use crate::metrics::{ControlState, LbView};
use crate::neighbors;
use crate::stage::{LbStage, TraceRecord};
use crate::stats::{Totals, WorkerStats};
use crate::trace::PacketTracer;
use anyhow::{Context as _, Result};
use fp_control::announce::Announcer;
use fp_control::health::{HealthEvent, HealthMonitor, HealthOptions};
use fp_control::log;
use fp_engine::driver::Finished;
use fp_engine::live::Capture;
use fp_pipeline::trace::ProbeSender;
use fp_service::{Context, Events, LiveOptions, Ports, Service, Setup};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often the kernel's neighbour table, the interface's MTU and the BGP speaker are looked at.
const TICK: Duration = Duration::from_secs(1);

/// Run the balancer with the configuration file `config` on `interface` until SIGTERM/SIGINT.
pub fn run(config: &Path, interface: &str, live: &LiveOptions) -> Result<()> {
    let text = read_config(config)?;
    let mut cfg = LbConfig::from_toml(&text)?;
    match crate::seed::resolve(&mut cfg)? {
        Some((path, crate::seed::Loaded::Created)) => log(format_args!(
            "hash seed drawn and kept in {} (restarts and upgrades read it again)",
            path.display()
        )),
        Some((path, crate::seed::Loaded::Read)) => {
            log(format_args!("hash seed read from {}", path.display()))
        }
        None => {}
    }
    if cfg.balancer.address.is_none() {
        log("warning: balancer.address is not set; IPv4 tunnels have no outer source");
    }
    let mac = fp_engine::live::interface_mac(interface)?;
    let mut machine = Balancer::new(cfg, Some(mac), live.driver.filters_destinations())
        .map_err(|e| anyhow::anyhow!("{}: {e}", config.display()))?;
    // Before the workers start, so their first snapshot has the path MTU (the announcement this
    // publishes waits for the BGP speaker, started once they run).
    match fp_engine::live::interface_mtu(interface) {
        Ok(mtu) => drop(machine.on_interface_mtu(mtu)),
        Err(e) => log(format_args!(
            "warning: {e}; path MTU 1500 unless configured"
        )),
    }
    fp_service::run(live, |events| {
        LbService::new(machine, config.to_path_buf(), interface.to_string(), events)
    })
}

fn read_config(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

/// The balancer on the runner: the state machine and the I/O components its actions act on.
pub struct LbService {
    machine: Balancer,
    monitor: HealthMonitor,
    /// The BGP announcer (`[bgp]`), started once the workers run.
    announcer: Option<Announcer>,
    path: PathBuf,
    interface: String,
    stats: Vec<Arc<WorkerStats>>,
    /// What the admin server reads from the control side.
    control: Arc<Mutex<ControlState>>,
}

impl LbService {
    fn new(
        machine: Balancer,
        path: PathBuf,
        interface: String,
        events: Events<HealthEvent>,
    ) -> Result<LbService> {
        let (monitor, health_rx) =
            HealthMonitor::start(machine.health_plan(), HealthOptions::default())
                .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        // Health results reach the control thread as the runner's events.
        std::thread::Builder::new()
            .name("fp-lb-health".into())
            .spawn(move || {
                for e in health_rx {
                    if events.send(e).is_err() {
                        return;
                    }
                }
            })
            .context("starting the health-event thread")?;
        let s = LbService {
            machine,
            monitor,
            announcer: None,
            path,
            interface,
            stats: Vec::new(),
            control: Arc::new(Mutex::new(ControlState::default())),
        };
        s.publish();
        Ok(s)
    }

    /// Publish what the admin server reads (after every change on the control thread).
    fn publish(&self) {
        let m = &self.machine;
        let bgp = self.announcer.as_ref().map(|a| {
            format!(
                "session {}; announcing {}",
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
            )
        });
        let state = ControlState {
            config_path: self.path.display().to_string(),
            generation: m.generation(),
            reloads: m.reloads(),
            health: self.monitor.states(),
            maglev: m.maglev().clone(),
            neighbors: m.neighbors().clone(),
            bgp,
        };
        *self.control.lock().unwrap_or_else(|p| p.into_inner()) = state;
    }

    /// Carry out the machine's decisions.
    fn apply(&mut self, actions: Vec<Action>, cx: &Context<'_>) {
        for a in actions {
            match a {
                Action::Log(l) => log(l),
                Action::Announce(vips) => self.announce(&vips),
                Action::SetDestinations(d) => {
                    if let Err(e) = cx.live().set_destinations(&d) {
                        log(format_args!("could not steer the new VIPs: {e}"));
                    }
                }
                Action::Resolve(addrs) => neighbors::resolve(&addrs),
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

    /// Read the kernel's neighbour table and the interface's MTU into the machine.
    fn refresh_neighbors(&mut self, cx: &Context<'_>) {
        let table = neighbors::read(&self.interface, self.machine.wants_ipv6_neighbors());
        let actions = self.machine.on_neighbors(&table);
        self.apply(actions, cx);
        // The path MTU follows the interface's (`ip link set ... mtu N` takes effect here).
        if let Ok(mtu) = fp_engine::live::interface_mtu(&self.interface) {
            let actions = self.machine.on_interface_mtu(mtu);
            self.apply(actions, cx);
        }
    }

    /// A BGP speaker that died on its own (not through us) is started again and told what to
    /// announce: while it is down the router has withdrawn this balancer, so it receives nothing.
    fn keep_speaker_alive(&mut self, cx: &Context<'_>) {
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
                self.apply(actions, cx);
            }
            Err(e) => log(format_args!("BGP speaker restart failed, will retry: {e}")),
        }
    }
}

impl Service for LbService {
    type Stage = LbStage;
    type Probe = TraceRecord;
    type Event = HealthEvent;
    type View = LbView;

    fn name(&self) -> &'static str {
        "lb"
    }

    fn ports(&self) -> Ports {
        Ports {
            interfaces: vec![self.interface.clone()],
            capture: Capture::Destinations(self.machine.destinations()),
            ring_bytes: None,
        }
    }

    fn stage(&mut self, setup: Setup<'_>, probes: ProbeSender<TraceRecord>) -> Result<LbStage> {
        let seed = self.machine.config().balancer.seed;
        let mut w = LbStage::new(
            setup.worker,
            self.machine.snapshots().clone(),
            seed ^ setup.worker as u64,
        )?;
        w.set_tracer(Box::new(PacketTracer::new(probes)));
        self.stats.push(w.stats().clone());
        Ok(w)
    }

    fn view(&self, _: &[Arc<fp_engine::driver::WorkerCounters>]) -> Arc<LbView> {
        Arc::new(LbView {
            stats: self.stats.clone(),
            snapshots: self.machine.snapshots().clone(),
            control: self.control.clone(),
        })
    }

    fn started(&mut self, cx: &mut Context<'_>) -> Result<()> {
        self.refresh_neighbors(cx);
        // Announce only once the forwarder runs (and only VIPs with a healthy backend).
        if let Some(spec) = self.machine.config().bgp.clone() {
            let a = Announcer::start(&spec)
                .with_context(|| format!("bgp: starting {}", spec.speaker))?;
            log(format_args!(
                "BGP speaker {} started (pid {}), peer {} AS {}",
                spec.speaker,
                a.pid(),
                spec.peer,
                spec.peer_as
            ));
            self.announcer = Some(a);
            let actions = self.machine.on_speaker_started();
            self.apply(actions, cx);
        }
        self.publish();
        Ok(())
    }

    fn ready_status(&self) -> String {
        format!(
            "forwarding on {} with {} worker(s)",
            self.interface,
            self.stats.len()
        )
    }

    fn tick_every(&self) -> Duration {
        TICK
    }

    fn tick(&mut self, cx: &mut Context<'_>) -> Result<()> {
        self.refresh_neighbors(cx);
        self.keep_speaker_alive(cx);
        self.publish();
        Ok(())
    }

    fn event(&mut self, e: HealthEvent, cx: &mut Context<'_>) -> Result<()> {
        let actions = self.machine.on_health(&[e]);
        self.apply(actions, cx);
        // A backend that just passed a check from this namespace has a fresh neighbour entry:
        // read it now, so its first packets do not go to the gateway MAC.
        self.refresh_neighbors(cx);
        self.publish();
        Ok(())
    }

    /// Re-read the configuration file: validate, update the health monitor, commit.
    fn reload(&mut self, cx: &mut Context<'_>) -> Result<u64> {
        let r = read_config(&self.path).and_then(|text| {
            let r = self.machine.prepare_reload(&text)?;
            let events = self.monitor.update(r.plan().clone())?;
            Ok((r, events))
        });
        let result = match r {
            Ok((r, events)) => {
                let (g, actions) = self.machine.commit_reload(r, &events);
                log(format_args!(
                    "reload of {}: committed, generation {g}",
                    self.path.display()
                ));
                self.apply(actions, cx);
                Ok(g)
            }
            Err(e) => {
                self.machine.reject_reload();
                log(format_args!(
                    "reload of {} rejected, the running configuration stays: {e:#}",
                    self.path.display()
                ));
                Err(e)
            }
        };
        self.publish();
        result
    }

    /// Drain (Maglev §4.1.1 via BGP): withdraw, keep forwarding while the router moves traffic
    /// to the other balancers. Not after a forwarder failure: nothing forwards then.
    fn drain(&mut self, cx: &mut Context<'_>, clean: bool) -> Duration {
        let drain = match (&self.machine.config().bgp, &self.announcer) {
            (Some(spec), Some(_)) if clean => Duration::from_millis(spec.drain_ms),
            _ => Duration::ZERO,
        };
        let actions = self.machine.drain();
        self.apply(actions, cx);
        if !drain.is_zero() {
            log("VIPs withdrawn");
        }
        drain
    }

    fn shutdown(&mut self) {
        if let Some(a) = self.announcer.take() {
            a.stop();
        }
    }

    fn finished(&mut self, _stages: Vec<Finished<LbStage>>) {
        let totals = Totals::sum(self.stats.iter().map(|s| &**s));
        let drops: Vec<String> = totals
            .drops()
            .iter()
            .map(|(r, n)| format!("{r} {n}"))
            .collect();
        log(format_args!(
            "drops: {}",
            if drops.is_empty() {
                "none".into()
            } else {
                drops.join(", ")
            }
        ));
    }
}
