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

use crate::carry::{Carried, Takeover};
use crate::config::LbConfig;
use crate::controller::{Action, Balancer};
use crate::export::{ExportStats, FlowEvents, FlowExporter};
use crate::metrics::{ControlState, LbView};
use crate::neighbors;
use crate::speaker::Speaker;
use crate::stage::{ConnReaders, ImportSlot, LbStage, TraceRecord};
use crate::stats::{Totals, WorkerStats};
use crate::trace::PacketTracer;
use anyhow::{Context as _, Result};
use fp_control::health::{HealthEvent, HealthMonitor, HealthOptions};
use fp_control::log;
use fp_engine::driver::Finished;
use fp_engine::live::Capture;
use fp_pipeline::trace::ProbeSender;
use fp_service::handover::{Checkpointer, Delta};
use fp_service::{Context, Events, LiveOptions, Ports, Service, Setup};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often the kernel's neighbour table, the interface's MTU and the BGP speaker are looked at.
const TICK: Duration = Duration::from_secs(1);

/// How long a start waits for its workers to fill their tables with the carried entries before
/// it reports ready anyway (about 5 s per 10 million entries on this project's test machine).
const IMPORT_WAIT: Duration = Duration::from_secs(300);

/// Run the balancer with the configuration file `config` on `interface` until SIGTERM/SIGINT.
pub fn run(config: &Path, interface: &str, live: &LiveOptions) -> Result<()> {
    let text = read_config(config)?;
    let mut cfg = LbConfig::from_toml(&text)?;
    if let Some((path, how)) = crate::seed::resolve(&mut cfg)? {
        log(format_args!("hash seed {how} {}", path.display()));
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
    // The backends' MACs before the workers start: a start that takes over forwards at once.
    let table = neighbors::read(interface, machine.wants_ipv6_neighbors());
    for a in machine.on_neighbors(&table) {
        match a {
            Action::Log(l) => log(l),
            Action::Resolve(addrs) => neighbors::resolve(&addrs),
            // Announcements and destinations follow once the workers run (`started`).
            Action::Announce(_) | Action::SetDestinations(_) => {}
        }
    }
    restore_sets(&mut machine);
    let carried = take_carried(&machine);
    fp_service::run(live, |events| {
        let mut s = LbService::new(machine, config.to_path_buf(), interface.to_string(), events)?;
        s.carried = carried;
        Ok(s)
    })
}

/// The connection entries the previous run left (`crate::carry`), or why there are none.
fn take_carried(machine: &Balancer) -> Result<Arc<Carried>, String> {
    let path = crate::carry::path_of(machine.config());
    match crate::carry::take(&path) {
        Ok(Some(c)) => Ok(Arc::new(c)),
        Ok(None) => Err(format!(
            "no connection entries of a previous run in {}",
            path.display()
        )),
        Err(e) => Err(e.to_string()),
    }
}

/// `CLOCK_MONOTONIC` in ms, as the workers' clock counts.
fn monotonic_ms() -> u32 {
    (fp_engine::sys::monotonic_ns() / 1_000_000) as u32
}

/// Second chance after a restart: the backend sets the previous run left in the state directory.
fn restore_sets(machine: &mut Balancer) {
    let path = crate::sets::path_of(machine.config());
    match crate::sets::read(&path, machine.config()) {
        Ok(Some(sets)) => {
            let (n, actions) = machine.restore_sets(&sets);
            for a in actions {
                if let Action::Log(l) = a {
                    log(l);
                }
            }
            log(format_args!(
                "backend sets of the previous run read from {}: {n} VIP(s) give second chance",
                path.display()
            ));
        }
        Ok(None) => log(format_args!(
            "no backend sets of a previous run in {}",
            path.display()
        )),
        Err(e) => log(format_args!("warning: {e}")),
    }
}

fn read_config(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

/// The balancer on the runner: the state machine and the I/O components its actions act on.
pub struct LbService {
    machine: Balancer,
    monitor: HealthMonitor,
    /// The BGP speaker (`[bgp]`), started once the workers run.
    speaker: Speaker,
    path: PathBuf,
    interface: String,
    stats: Vec<Arc<WorkerStats>>,
    /// What the admin server reads from the control side.
    control: Arc<Mutex<ControlState>>,
    /// The backend sets last written to the state file (`crate::sets`).
    sets_written: Option<crate::sets::Saved>,
    /// The previous run's connection entries, until every worker was given them (or why there
    /// are none: a cold start).
    carried: Result<Arc<Carried>, String>,
    /// Where the workers report filling their tables with them (on their own threads, in
    /// parallel, before their first receive).
    imports: Vec<ImportSlot>,
    /// How this start went (warm or cold), for the log, metrics and status.
    takeover: Takeover,
    /// Read handles on every worker's connection tables: the overlapped handover's checkpoint.
    readers: Vec<ConnReaders>,
    /// The workers' clock (ms) from which the last checkpoint's delta counts ([`NO_CHECKPOINT`]:
    /// every entry): the entries written (inserted, or their last-seen time rewritten) since.
    checkpoint_ms: Arc<AtomicU64>,
    /// The flow export: the workers' queues until the exporter thread takes them, its counters,
    /// its stop flag and the thread.
    export_queues: Vec<FlowEvents>,
    export_stats: Arc<ExportStats>,
    export_stop: Arc<AtomicBool>,
    exporter: Option<std::thread::JoinHandle<()>>,
}

/// No checkpoint was taken, or one that may have missed entries ([`LbService::checkpoint_ms`]):
/// the delta is every entry.
const NO_CHECKPOINT: u64 = u64::MAX;

/// The delta starts this long before its checkpoint: a frame waits in its port's ring before its
/// worker inserts its entry with the frame's receive time.
const DELTA_MARGIN_MS: u32 = 250;

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
            speaker: Speaker::default(),
            path,
            interface,
            stats: Vec::new(),
            control: Arc::new(Mutex::new(ControlState::default())),
            sets_written: None,
            carried: Err("not read".into()),
            imports: Vec::new(),
            takeover: Takeover::default(),
            readers: Vec::new(),
            checkpoint_ms: Arc::new(AtomicU64::new(NO_CHECKPOINT)),
            export_queues: Vec::new(),
            export_stats: Arc::new(ExportStats::default()),
            export_stop: Arc::new(AtomicBool::new(false)),
            exporter: None,
        };
        s.publish();
        Ok(s)
    }

    /// Write the workers' connection entries for the next start (`crate::carry`), now that they
    /// stopped.
    fn keep_connections(&mut self, mut stages: Vec<Finished<LbStage>>) {
        let t0 = std::time::Instant::now();
        let stopped_ms = crate::carry::wall_ms();
        let mut workers: Vec<&mut LbStage> = stages.iter_mut().map(|f| &mut f.stage).collect();
        let (mut c, exported) = crate::stage::export_workers(&mut workers, monotonic_ms());
        c.stopped_ms = stopped_ms;
        let picked = exported.picked;
        let path = crate::carry::path_of(self.machine.config());
        match crate::carry::write(&path, &c) {
            Ok(()) => log(format_args!(
                "{} connection entries kept for the next start in {} ({} ms; {picked} entries of \
                 flows picked up under second chance left to it)",
                c.len(),
                path.display(),
                t0.elapsed().as_millis()
            )),
            Err(e) => log(format_args!("warning: connection entries not kept: {e}")),
        }
    }

    /// Wait until every worker has put the carried entries into its tables (each on its own
    /// thread, before its first receive) and sum up what they did: the start is ready once they
    /// forward with them.
    fn await_imports(&mut self, c: &Carried) {
        let workers = self.stats.len();
        let t0 = std::time::Instant::now();
        let reports: Vec<crate::stage::ImportReport> = loop {
            let done: Vec<_> = self
                .imports
                .iter()
                .filter_map(|s| s.get())
                .copied()
                .collect();
            if done.len() == workers || t0.elapsed() > IMPORT_WAIT {
                break done;
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        if reports.len() < workers {
            log(format_args!(
                "warning: {} of {workers} worker(s) filled their tables with the carried entries \
                 within {IMPORT_WAIT:?}",
                reports.len()
            ));
        }
        let t = &mut self.takeover;
        // Every worker takes the same entries: count them once, the full ones per worker.
        if let Some(r) = reports.first() {
            t.carried = r.imported.carried;
            t.removed_backend = r.imported.removed_backend;
            t.expired = r.imported.expired;
        }
        t.full = reports.iter().map(|r| r.imported.full).sum();
        t.load_ms = reports.iter().map(|r| r.load_ms).max().unwrap_or(0);
        let done = reports.iter().map(|r| r.done_wall_ms).max();
        t.gap_ms = Some(
            done.unwrap_or_else(crate::carry::wall_ms)
                .saturating_sub(c.stopped_ms),
        );
    }

    /// Start the exporter thread on the workers' queues (it follows `[ipfix]` of the snapshots,
    /// idle while there is none).
    fn start_exporter(&mut self) -> Result<()> {
        let queues = std::mem::take(&mut self.export_queues);
        let e = FlowExporter::new(
            queues,
            self.machine.snapshots().clone(),
            self.export_stats.clone(),
        );
        let stop = self.export_stop.clone();
        self.exporter = Some(
            std::thread::Builder::new()
                .name("fp-lb-export".into())
                .spawn(move || e.run(stop))
                .context("starting the flow-export thread")?,
        );
        Ok(())
    }

    /// Send what the workers left in their queues and stop the exporter thread (the workers have
    /// stopped).
    fn stop_exporter(&mut self) {
        self.export_stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.exporter.take() {
            let _ = t.join();
        }
    }

    /// Keep the backend sets for a successor, when they changed since last written.
    fn save_sets(&mut self) {
        let cfg = self.machine.config();
        let s = crate::sets::saved(cfg, self.machine.backend_sets());
        if self.sets_written.as_ref() == Some(&s) {
            return;
        }
        match crate::sets::write(&crate::sets::path_of(cfg), &s) {
            Ok(()) => self.sets_written = Some(s),
            Err(e) => {
                // Said once per change, not every tick.
                log(format_args!("warning: {e}"));
                self.sets_written = Some(s);
            }
        }
    }

    /// Publish what the admin server reads (after every change on the control thread).
    fn publish(&self) {
        let m = &self.machine;
        let state = ControlState {
            config_path: self.path.display().to_string(),
            generation: m.generation(),
            reloads: m.reloads(),
            health: self.monitor.states(),
            maglev: m.maglev().clone(),
            neighbors: m.neighbors().clone(),
            bgp: self.speaker.status(),
            takeover: self.takeover.clone(),
        };
        *self.control.lock().unwrap_or_else(|p| p.into_inner()) = state;
    }

    /// Carry out the machine's decisions.
    fn apply(&mut self, actions: Vec<Action>, cx: &Context<'_>) {
        for a in actions {
            match a {
                Action::Log(l) => log(l),
                Action::Announce(vips) => self.speaker.announce(&vips),
                Action::SetDestinations(d) => {
                    if let Err(e) = cx.live().set_destinations(&d) {
                        log(format_args!("could not steer the new VIPs: {e}"));
                    }
                }
                Action::Resolve(addrs) => neighbors::resolve(&addrs),
            }
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

    /// A BGP speaker that died on its own is started again and told what to announce.
    fn keep_speaker_alive(&mut self, cx: &Context<'_>) {
        let Some(spec) = self.machine.config().bgp.clone() else {
            return;
        };
        if !self.machine.draining() && self.speaker.revive(&spec) {
            let actions = self.machine.on_speaker_started();
            self.apply(actions, cx);
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
        // Every worker gets its queue to the exporter, used when `[ipfix]` is configured (now
        // or by a later reload); its size is fixed here.
        let queue = self
            .machine
            .config()
            .ipfix
            .as_ref()
            .map_or(fp_export::config::DEFAULT_QUEUE, |x| x.queue);
        let (tap, events) = crate::export::tap(setup.worker, queue);
        w.set_export(tap);
        self.export_queues.push(events);
        if let Ok(c) = &self.carried {
            let slot = ImportSlot::default();
            self.imports.push(slot.clone());
            w.defer_import(c.clone(), slot);
            self.takeover.warm = true;
            self.takeover.read = c.len() as u64;
        }
        self.stats.push(w.stats().clone());
        self.readers.push(w.conn_readers());
        Ok(w)
    }

    fn view(&self, _: &[Arc<fp_engine::driver::WorkerCounters>]) -> Arc<LbView> {
        Arc::new(LbView {
            stats: self.stats.clone(),
            snapshots: self.machine.snapshots().clone(),
            control: self.control.clone(),
            export: self.export_stats.clone(),
        })
    }

    fn started(&mut self, cx: &mut Context<'_>) -> Result<()> {
        match std::mem::replace(&mut self.carried, Err("taken".into())) {
            _ if self.takeover.handover => {
                let t = &self.takeover;
                log(format_args!(
                    "warm start, handed over by the running process: {} connection entries of \
                     its checkpoint carried into each of {} worker(s) in {} ms (of {} read: {}) \
                     while it forwarded, then {} written since; {} ms without forwarding",
                    t.carried,
                    self.stats.len(),
                    t.load_ms,
                    t.read,
                    t.dropped(),
                    t.delta,
                    t.gap_ms.unwrap_or(0)
                ));
            }
            Ok(c) => {
                self.await_imports(&c);
                let t = &self.takeover;
                log(format_args!(
                    "warm start: {} connection entries of the previous run carried into each of \
                     {} worker(s) in {} ms (of {} read: {}); {} ms without forwarding since the \
                     previous run's workers stopped",
                    t.carried,
                    self.stats.len(),
                    t.load_ms,
                    t.read,
                    t.dropped(),
                    t.gap_ms.unwrap_or(0)
                ));
            }
            Err(why) => {
                log(format_args!("cold start: {why}"));
                self.takeover.cold_reason = Some(why);
            }
        }
        self.start_exporter()?;
        self.save_sets();
        self.refresh_neighbors(cx);
        // Announce only once the forwarder runs (and only VIPs with a healthy backend).
        if let Some(spec) = self.machine.config().bgp.clone() {
            self.speaker.start(&spec)?;
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
        let actions = self.machine.on_clock(std::time::Instant::now());
        self.apply(actions, cx);
        self.save_sets();
        self.publish();
        Ok(())
    }

    fn event(&mut self, e: HealthEvent, cx: &mut Context<'_>) -> Result<()> {
        let actions = self.machine.on_health(&[e]);
        self.apply(actions, cx);
        // A backend that just passed a check from this namespace has a fresh neighbour entry:
        // read it now, so its first packets do not go to the gateway MAC.
        self.refresh_neighbors(cx);
        self.save_sets();
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
        self.save_sets();
        self.publish();
        result
    }

    /// Drain (Maglev §4.1.1 via BGP): withdraw, keep forwarding while the router moves traffic
    /// to the other balancers. Not after a forwarder failure: nothing forwards then.
    fn drain(&mut self, cx: &mut Context<'_>, clean: bool) -> Duration {
        let drain = match &self.machine.config().bgp {
            Some(spec) if clean && self.speaker.started() => Duration::from_millis(spec.drain_ms),
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
        self.speaker.stop();
    }

    fn finished(&mut self, stages: Vec<Finished<LbStage>>) {
        self.stop_exporter();
        let totals = Totals::sum(self.stats.iter().map(|s| &**s));
        log(format_args!("drops: {}", totals.drops_line()));
        self.keep_connections(stages);
    }

    /// The overlapped handover ([`fp_service::handover`]) through `handover.sock` in the state
    /// directory. Not with `[bgp]`: the BGP speaker belongs to the process, and two speakers of
    /// one address cannot peer with the router at once; behind ECMP a restart drains instead
    /// (the peers and second chance keep the connections).
    fn handover_socket(&self) -> Option<PathBuf> {
        let cfg = self.machine.config();
        if cfg.bgp.is_some() {
            return None;
        }
        Some(crate::seed::state_dir_of(cfg).join("handover.sock"))
    }

    /// Every worker's connection entries, read while the workers forward.
    fn checkpointer(&self) -> Option<Checkpointer> {
        let readers = self.readers.clone();
        let snapshots = self.machine.snapshots().clone();
        let at = self.checkpoint_ms.clone();
        Some(Box::new(move || {
            let now = monotonic_ms();
            let (mut c, cp) = crate::stage::checkpoint(&readers, &snapshots.load(), now);
            c.stopped_ms = crate::carry::wall_ms();
            // The delta: entries written since a little before the scan began (an entry's time
            // is its frame's receive stamp, which may precede its insert); after a scan that
            // may have missed entries (moves in every try), all of them.
            let since = if cp.unsure > 0 {
                NO_CHECKPOINT
            } else {
                u64::from(now.wrapping_sub(DELTA_MARGIN_MS))
            };
            at.store(since, Ordering::Release);
            log(format_args!(
                "handover checkpoint: {} connection entries ({} of flows picked up under second \
                 chance left out; {} table(s) scanned again, {} with moves during the scan)",
                c.len(),
                cp.exported.picked,
                cp.rescans,
                cp.unsure
            ));
            Ok(crate::carry::encode(&c))
        }))
    }

    /// The entries written since the checkpoint (every entry without one).
    fn delta(&mut self, stages: &mut [Finished<LbStage>]) -> Vec<u8> {
        let t0 = std::time::Instant::now();
        let since = match self.checkpoint_ms.load(Ordering::Acquire) {
            NO_CHECKPOINT => None,
            ms => Some(ms as u32),
        };
        let mut workers: Vec<&mut LbStage> = stages.iter_mut().map(|f| &mut f.stage).collect();
        let (mut c, _) = crate::stage::export_workers_since(&mut workers, monotonic_ms(), since);
        c.stopped_ms = crate::carry::wall_ms();
        let bytes = crate::carry::encode(&c);
        log(format_args!(
            "handover delta: {} connection entries written since the checkpoint ({} ms)",
            c.len(),
            t0.elapsed().as_millis()
        ));
        bytes
    }

    fn handed_over(&mut self, stages: Vec<Finished<LbStage>>) {
        self.stop_exporter();
        let totals = Totals::sum(self.stats.iter().map(|s| &**s));
        log(format_args!("drops: {}", totals.drops_line()));
        log("handed over: the successor forwards with this process's connection entries");
        // Also the other way, for a start after a crash of the successor (its own stop
        // overwrites the file).
        self.keep_connections(stages);
    }

    fn take_checkpoint(&mut self, bytes: &[u8], stages: &mut [LbStage]) -> Result<()> {
        let c = crate::carry::decode(bytes)
            .map_err(|why| anyhow::anyhow!("the predecessor's checkpoint: {why}"))?;
        let t0 = std::time::Instant::now();
        let gap = crate::carry::wall_ms().saturating_sub(c.stopped_ms);
        let r = crate::stage::import_workers(stages, &c, monotonic_ms(), gap);
        let t = &mut self.takeover;
        t.warm = true;
        t.handover = true;
        t.cold_reason = None;
        t.read = c.len() as u64;
        if let Some(first) = r.first() {
            t.carried = first.carried;
            t.removed_backend = first.removed_backend;
            t.expired = first.expired;
        }
        t.full = r.iter().map(|r| r.full).sum();
        t.load_ms = t0.elapsed().as_millis() as u64;
        Ok(())
    }

    fn take_delta(&mut self, delta: &Delta, stages: &mut [LbStage]) -> Result<()> {
        let c = crate::carry::decode(&delta.bytes)
            .map_err(|why| anyhow::anyhow!("the predecessor's delta: {why}"))?;
        let gap = crate::carry::wall_ms().saturating_sub(c.stopped_ms);
        let r = crate::stage::import_workers(stages, &c, monotonic_ms(), gap);
        let t = &mut self.takeover;
        t.delta = c.len() as u64;
        t.full += r.iter().map(|r| r.full).sum::<u64>();
        Ok(())
    }

    fn took_over(&mut self, gap_ms: u64) {
        self.takeover.gap_ms = Some(gap_ms);
    }
}
