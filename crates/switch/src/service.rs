//! The switch as a service of the runner (`fp_service`): the FIB and its single writer built from
//! the checked settings, one [`SwitchStage`] per worker, the writer's tick (learn events every
//! millisecond, aging on a clock); what the admin server reads is in `metrics.rs`.
//!
//! Ports: every interface of `--ports`, every frame captured (promiscuous). AF_PACKET: worker w
//! owns socket w of a `PACKET_FANOUT_HASH` group on each port; AF_XDP: the socket of queue w of
//! each port, the XDP program steering every frame to it (the worker count is capped by the
//! smallest queue count among the ports, since a worker must be able to transmit on every port).

use crate::carry::{self, Learned, Restored};
use crate::config::SwitchConfig;
use crate::controller::{learn_queue, ControlStats, Pinned, Static, SwitchControl};
use crate::metrics::SwitchView;
use crate::stage::{
    BpduFrame, Learn, SwitchRecord, SwitchStage, SwitchStats, SwitchWorker, VlanCounters,
};
use crate::stp::{Flush, PortConfig, PortStatus, Stp, StpConfig};
use crate::vlan::PortVlans;
use anyhow::{Context as _, Result};
use fp_control::log;
use fp_cuckoo::{Config, FibMap, FibReader};
use fp_engine::driver::{Finished, Options};
use fp_engine::live::Capture;
use fp_pipeline::stats::Counter;
use fp_pipeline::trace::ProbeSender;
use fp_service::{Context, LiveOptions, Ports, Service, Setup};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Receive ring per AF_PACKET socket (workers × ports sockets): 4 MiB.
const RING_BYTES: usize = 4 << 20;

/// How often the FIB writer applies the workers' learn events.
const LEARN_EVERY: Duration = Duration::from_millis(1);

/// The FIB's table settings, with a secret seed drawn for this start: a public seed would let
/// hosts choose MACs that pile into one bucket pair and make learning fail (hash flooding).
fn fib_config(capacity: usize) -> Config {
    Config::with_capacity(capacity).seed(fp_control::seed::random_seed())
}

/// What the FIB writer publishes for the admin server after each tick and reload.
#[derive(Clone, Debug)]
pub(crate) struct Published {
    pub(crate) writer: ControlStats,
    pub(crate) fib: fp_cuckoo::Stats,
    /// The static entries in force, each with what the FIB says for it.
    pub(crate) statics: Vec<(Static, Option<u16>)>,
    /// Each port's VLANs (none: VLAN-unaware).
    pub(crate) vlans: Option<Vec<PortVlans>>,
    /// Learned entries per VLAN.
    pub(crate) learned_per_vlan: Vec<(u16, u64)>,
    /// The aging time in force.
    pub(crate) aging: Duration,
    /// Configuration generation: 1 at start, one more per reload applied.
    pub(crate) generation: u64,
    /// Learned MACs per port, and each port's limit.
    pub(crate) per_port: Vec<(u32, Option<u32>)>,
    /// MACs pinned for moving too often.
    pub(crate) pinned: Vec<Pinned>,
    /// The spanning tree, if it runs.
    pub(crate) stp: Option<StpView>,
}

/// What the admin server shows of the spanning tree.
#[derive(Clone, Debug)]
pub(crate) struct StpView {
    pub(crate) bridge: u64,
    pub(crate) root: u64,
    pub(crate) root_cost: u32,
    pub(crate) root_port: Option<u16>,
    pub(crate) topology_changes: u64,
    pub(crate) ports: Vec<PortStatus>,
}

/// The spanning tree on the control side: the protocol, the queue of BPDUs from the workers and
/// the one to the worker that sends for it.
struct Tree {
    stp: Stp,
    rx: Receiver<BpduFrame>,
    tx: SyncSender<BpduFrame>,
    /// Given to worker 0's stage.
    inject: Option<Receiver<BpduFrame>>,
    /// The workers' sender of BPDUs.
    to_control: SyncSender<BpduFrame>,
    /// Links as last read, and when.
    links: Vec<bool>,
    links_read: Instant,
}

/// How often the ports' links are read for the spanning tree.
const LINK_EVERY: Duration = Duration::from_millis(50);

/// Whether `iface` has a carrier (its link is up): /sys/class/net/IF/carrier; an interface that
/// is administratively down has none.
fn carrier(iface: &str) -> bool {
    std::fs::read_to_string(format!("/sys/class/net/{iface}/carrier"))
        .map(|s| s.trim() == "1")
        .unwrap_or(false)
}

/// The MAC address of `iface` (zeros if it cannot be read).
fn iface_mac(iface: &str) -> [u8; 6] {
    std::fs::read_to_string(format!("/sys/class/net/{iface}/address"))
        .ok()
        .and_then(|s| s.trim().parse::<fp_wire::ethernet::MacAddr>().ok())
        .map_or([0; 6], |m| m.0)
}

impl Tree {
    fn new(cfg: &SwitchConfig) -> Option<Tree> {
        let t = cfg.stp.as_ref()?;
        let macs: Vec<[u8; 6]> = cfg.ports.iter().map(|p| iface_mac(p)).collect();
        // The bridge's MAC: the lowest of its ports', as a Linux bridge takes.
        let mac = macs
            .iter()
            .copied()
            .filter(|m| *m != [0; 6])
            .min()
            .unwrap_or([2, 0, 0, 0, 0, 1]);
        let stp = Stp::new(StpConfig {
            priority: t.priority,
            mac,
            max_age: t.max_age,
            hello: t.hello,
            forward_delay: t.forward_delay,
            force_stp: t.force_stp,
            ports: t
                .ports
                .iter()
                .zip(&macs)
                .map(|(&(cost, priority, edge), &mac)| PortConfig {
                    cost,
                    priority,
                    edge,
                    mac,
                })
                .collect(),
        });
        let (to_control, rx) = std::sync::mpsc::sync_channel(1024);
        let (tx, inject) = std::sync::mpsc::sync_channel(1024);
        Some(Tree {
            stp,
            rx,
            tx,
            inject: Some(inject),
            to_control,
            links: vec![false; cfg.ports.len()],
            links_read: Instant::now() - LINK_EVERY,
        })
    }

    fn view(&self) -> StpView {
        let (root, root_cost, root_port) = self.stp.root();
        StpView {
            bridge: self.stp.id(),
            root,
            root_cost,
            root_port,
            topology_changes: self.stp.topology_changes,
            ports: self.stp.status(),
        }
    }
}

/// What a worker shares with the metrics reader.
#[derive(Clone)]
pub(crate) struct WorkerCounters {
    pub(crate) switch: Arc<SwitchStats>,
    pub(crate) flooded: Arc<[Counter]>,
    pub(crate) vlans: Arc<VlanCounters>,
}

/// The switch on the runner.
pub struct SwitchService {
    cfg: SwitchConfig,
    ctl: SwitchControl,
    fib: FibReader,
    learn: SyncSender<Learn>,
    names: Arc<Vec<String>>,
    workers: Vec<WorkerCounters>,
    published: Arc<Mutex<Published>>,
    age_every: Duration,
    last_age: Instant,
    /// How this start went: learned entries of the previous run restored, or why not.
    restored: Restored,
    generation: u64,
    tree: Option<Tree>,
    sflow: Sflow,
}

/// The sFlow export: the rate the workers sample at, the settings the exporter follows, the
/// workers' queues until the exporter thread takes them, the engine's port counters, the thread.
#[derive(Default)]
struct Sflow {
    rate: crate::sflow::Rate,
    spec: Arc<Mutex<Option<fp_export::config::SflowSpec>>>,
    queues: Vec<crate::sflow::Samples>,
    engine: Arc<Mutex<Vec<Arc<fp_engine::driver::WorkerCounters>>>>,
    stats: Arc<crate::sflow::SflowStats>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Sflow {
    /// Follow `[sflow]`: the workers' rate and the exporter's settings.
    fn configure(&self, spec: Option<&fp_export::config::SflowSpec>) {
        self.rate.store(
            spec.map_or(0, |s| s.sample_one_in),
            std::sync::atomic::Ordering::Relaxed,
        );
        *self.spec.lock().unwrap_or_else(|p| p.into_inner()) = spec.cloned();
    }

    /// Start the exporter thread on the workers' queues.
    fn start(&mut self, names: &[String]) -> Result<()> {
        let ports = names
            .iter()
            .map(|n| crate::sflow::PortInfo {
                name: n.clone(),
                ifindex: crate::sflow::ifindex(n),
            })
            .collect();
        let engine = self.engine.clone();
        let nports = names.len();
        let totals: crate::sflow::PortTotals = Box::new(move || {
            let e = engine.lock().unwrap_or_else(|p| p.into_inner());
            (0..nports)
                .map(|p| {
                    let mut t = crate::sflow::PortTraffic::default();
                    for w in e.iter() {
                        if let Some(c) = w.ports.get(p) {
                            t.rx += c.rx.get();
                            t.tx += c.tx.get();
                            t.rx_dropped += c.rx_dropped.get();
                            t.tx_dropped += c.tx_dropped.get();
                        }
                    }
                    t
                })
                .collect()
        });
        let x = crate::sflow::SflowExporter::new(
            std::mem::take(&mut self.queues),
            self.spec.clone(),
            ports,
            totals,
            self.stats.clone(),
        );
        let stop = self.stop.clone();
        self.thread = Some(
            std::thread::Builder::new()
                .name("fp-sw-sflow".into())
                .spawn(move || x.run(stop))
                .context("starting the sFlow export thread")?,
        );
        Ok(())
    }

    /// Send what the workers queued last and stop the thread.
    fn stop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Put back the learned entries the previous run left in the state directory (`crate::carry`),
/// after the statics and the preload; says how it went.
fn restore_learned(ctl: &mut SwitchControl, cfg: &SwitchConfig) -> Restored {
    let path = carry::path_in(&cfg.state_dir);
    let found = carry::take(&path).and_then(|l| {
        l.ok_or_else(|| format!("no learned entries of a previous run in {}", path.display()))
    });
    let learned = match found {
        Ok(l) => l,
        Err(why) => {
            log(format_args!("cold start: {why}"));
            return Restored {
                cold_reason: Some(why),
                ..Restored::default()
            };
        }
    };
    let gap_ms = carry::wall_ms().saturating_sub(learned.stopped_ms);
    let (entries, port_gone) = learned.onto(&cfg.ports, gap_ms);
    let (restored, aged, full, vlan_gone) = ctl.restore(&entries, fp_engine::sys::monotonic_ns());
    let r = Restored {
        cold_reason: None,
        read: learned.entries.len() as u64,
        restored,
        port_gone: port_gone + vlan_gone,
        aged,
        full,
    };
    log(format_args!(
        "warm start: {} learned FIB entries of the previous run restored (of {} read: port gone \
         {}, aged out {}, FIB full {}); the switch was down {gap_ms} ms",
        r.restored, r.read, r.port_gone, r.aged, r.full
    ));
    r
}

/// Learned MACs per port with each port's limit.
fn per_port(ctl: &SwitchControl, cfg: &SwitchConfig) -> Vec<(u32, Option<u32>)> {
    (0..cfg.ports.len())
        .map(|p| {
            let n = ctl.learned_per_port().get(p).copied().unwrap_or(0);
            (n, cfg.max_macs.get(p).copied().flatten())
        })
        .collect()
}

/// The static entries with what the FIB says for each (for the status page).
fn statics_in_fib(ctl: &SwitchControl) -> Vec<(Static, Option<u16>)> {
    ctl.statics()
        .into_iter()
        .map(|s| (s, ctl.lookup_in(s.vlan, s.mac)))
        .collect()
}

/// Run the switch with `cfg` on live interfaces until SIGTERM/SIGINT.
pub fn run(cfg: SwitchConfig, live: &LiveOptions) -> Result<()> {
    fp_service::run(live, |_events| SwitchService::new(cfg))
}

impl SwitchService {
    /// Build the FIB (preload and statics) and its writer.
    pub fn new(cfg: SwitchConfig) -> Result<SwitchService> {
        let capacity = cfg.fib_capacity;
        let nports = cfg.ports.len();
        // The port takes the value bits it needs; the rest of the word holds (FID, MAC).
        let layout = cfg.fib_layout();
        let (fw, fr) = FibMap::new(
            &fib_config(capacity),
            layout,
            crate::vlan::value_bits(nports),
        )
        .with_context(|| format!("building a FIB of {capacity} entries ({layout} layout)"))?;
        let (ltx, lrx) = learn_queue(cfg.learn_queue);
        let mut ctl = SwitchControl::new(fw, lrx, cfg.aging_ns());
        ctl.set_vlans(nports, cfg.vlans.clone())
            .map_err(|e| anyhow::anyhow!("port VLANs: {e}"))?;
        ctl.set_guards(cfg.storm.clone(), cfg.max_macs.clone(), cfg.damping);
        let tree = Tree::new(&cfg);
        if let Some(t) = &tree {
            // Every port discards until the spanning tree says otherwise.
            ctl.set_stp_states(Some(t.stp.states()));
        }
        let t = Instant::now();
        ctl.load(&cfg.preload, &cfg.statics)?;
        let restored = restore_learned(&mut ctl, &cfg);
        if !cfg.preload.is_empty() {
            log(format_args!(
                "preloaded {} FIB entries in {:.1} s",
                cfg.preload.len(),
                t.elapsed().as_secs_f64()
            ));
        }
        log(format_args!("fib: {}", ctl.fib_stats()));
        let published = Arc::new(Mutex::new(Published {
            writer: ctl.stats(),
            fib: ctl.fib_stats(),
            statics: statics_in_fib(&ctl),
            vlans: cfg.vlans.clone(),
            learned_per_vlan: ctl.learned_per_vlan(),
            aging: cfg.aging,
            generation: 1,
            per_port: per_port(&ctl, &cfg),
            pinned: Vec::new(),
            stp: tree.as_ref().map(Tree::view),
        }));
        let age_every = (cfg.aging / 10).clamp(Duration::from_millis(50), Duration::from_secs(1));
        Ok(SwitchService {
            names: Arc::new(cfg.ports.clone()),
            cfg,
            ctl,
            fib: fr,
            learn: ltx,
            workers: Vec::new(),
            published,
            age_every,
            last_age: Instant::now(),
            restored,
            generation: 1,
            tree,
            sflow: Sflow::default(),
        })
    }

    /// The spanning tree's turn: BPDUs from the workers in, links, timers, BPDUs out through
    /// worker 0, flushes and port states applied. Returns whether anything changed.
    fn run_tree(&mut self) -> bool {
        let Some(t) = &mut self.tree else {
            return false;
        };
        let now = fp_engine::sys::monotonic_ns();
        let mut changed = false;
        while let Ok(f) = t.rx.try_recv() {
            t.stp.receive(f.port, &f.bytes[..f.len as usize], now);
            changed = true;
        }
        if t.links_read.elapsed() >= LINK_EVERY {
            t.links_read = Instant::now();
            for (i, name) in self.cfg.ports.iter().enumerate() {
                let up = carrier(name);
                if up != t.links[i] {
                    t.links[i] = up;
                    log(format_args!(
                        "spanning tree: port {name} link {}",
                        if up { "up" } else { "down" }
                    ));
                    t.stp.link(i as u16, up, now);
                }
            }
        }
        t.stp.tick(now);
        // Port states first, so no worker forwards on a port the tree has just blocked after
        // the BPDUs saying so (an agreement after a sync) have gone out; then the flushes, in
        // one pass; then the BPDUs.
        if t.stp.take_changed() {
            let states = t.stp.states();
            let st = t.stp.status();
            let desc: Vec<String> = self
                .cfg
                .ports
                .iter()
                .zip(&st)
                .map(|(n, p)| format!("{n} {} {}", p.role, p.state))
                .collect();
            log(format_args!("spanning tree: {}", desc.join(", ")));
            self.ctl.set_stp_states(Some(states));
            changed = true;
        }
        let flushes = t.stp.take_flush();
        if !flushes.is_empty() {
            changed = true;
            let mut keep: Option<Option<u16>> = None;
            let mut all = false;
            for f in &flushes {
                if let Flush::AllBut(k) = *f {
                    match keep {
                        None => keep = Some(k),
                        Some(prev) if prev != k => all = true,
                        Some(_) => {}
                    }
                }
            }
            match (all, keep) {
                (true, _) => {
                    self.ctl.flush_except(None);
                }
                (false, Some(k)) => {
                    self.ctl.flush_except(k);
                }
                (false, None) => {}
            }
            if !all && keep != Some(None) {
                for f in flushes {
                    if let Flush::Only(p) = f {
                        self.ctl.flush_port(p);
                    }
                }
            }
        }
        for (port, frame) in t.stp.take_tx() {
            changed = true;
            let mut b = BpduFrame {
                port,
                len: frame.len().min(64) as u8,
                bytes: [0; 64],
            };
            b.bytes[..b.len as usize].copy_from_slice(&frame[..b.len as usize]);
            let _ = t.tx.try_send(b);
        }
        changed
    }

    fn publish(&self) {
        let p = Published {
            writer: self.ctl.stats(),
            fib: self.ctl.fib_stats(),
            statics: statics_in_fib(&self.ctl),
            vlans: self.cfg.vlans.clone(),
            learned_per_vlan: self.ctl.learned_per_vlan(),
            aging: self.cfg.aging,
            generation: self.generation,
            per_port: per_port(&self.ctl, &self.cfg),
            pinned: self.ctl.pinned(fp_engine::sys::monotonic_ns()),
            stp: self.tree.as_ref().map(Tree::view),
        };
        *self.published.lock().unwrap_or_else(|e| e.into_inner()) = p;
    }

    /// Apply a new configuration: VLANs (learned entries that stay valid are kept), static
    /// entries, aging. What shapes the FIB and the workers at start may not change. Nothing is
    /// applied when it fails.
    fn apply(&mut self, new: SwitchConfig) -> Result<usize> {
        if let Some(field) = self.cfg.fixed_differs(&new) {
            anyhow::bail!("{field}: changes only with a restart");
        }
        // The file was validated as a whole (every VLAN and static resolved, the VLAN count
        // checked against the FIB key's room), so setting the VLANs cannot fail here; only a
        // full FIB can refuse a static entry, and then the rest of the file is in force.
        let flushed = self
            .ctl
            .set_vlans(new.ports.len(), new.vlans.clone())
            .map_err(|e| anyhow::anyhow!("port: {e}"))?;
        self.ctl.set_aging(new.aging_ns());
        self.ctl
            .set_guards(new.storm.clone(), new.max_macs.clone(), new.damping);
        self.age_every = (new.aging / 10).clamp(Duration::from_millis(50), Duration::from_secs(1));
        let statics = self.ctl.set_statics(&new.statics);
        self.sflow.configure(new.sflow.as_ref());
        self.cfg = new;
        if let Err(e) = statics {
            anyhow::bail!(
                "static: {e}; the rest of the new configuration is in force, the static entries \
                 before this one too"
            );
        }
        Ok(flushed)
    }
}

impl Service for SwitchService {
    type Stage = SwitchStage;
    type Probe = SwitchRecord;
    type Event = ();
    type View = SwitchView;

    fn name(&self) -> &'static str {
        "switch"
    }

    fn ports(&self) -> Ports {
        Ports {
            interfaces: self.cfg.ports.clone(),
            capture: Capture::All,
            ring_bytes: Some(RING_BYTES),
        }
    }

    fn driver_options(&self, o: &mut Options) {
        // Receive and flood bursts, plus what a worker may hold while gathering and the flood
        // copies of all of it (every held frame flooded to every other port).
        let ports = self.cfg.ports.len();
        o.buffers = fp_pipeline::packet::MAX_BURST * (ports + 4) + self.cfg.gather * (ports - 1);
    }

    fn stage(
        &mut self,
        setup: Setup<'_>,
        probes: ProbeSender<SwitchRecord>,
    ) -> Result<SwitchStage> {
        let w = setup.worker;
        let nports = self.cfg.ports.len() as u16;
        let mut sw = SwitchWorker::new(
            self.fib.clone(),
            nports,
            self.learn.clone(),
            self.cfg.aging_ns(),
        );
        sw.set_gather(self.cfg.gather);
        sw.set_workers(setup.workers);
        sw.set_locks(self.ctl.port_locks());
        if let Some(t) = &self.tree {
            sw.set_bpdu_queue(t.to_control.clone());
        }
        sw.set_plan(self.ctl.port_plan());
        if self.cfg.fib_cache > 0 {
            sw.set_cache(self.cfg.fib_cache, self.ctl.epoch(), 0x5eed ^ w as u64)
                .context("the FIB cache")?;
        }
        let tracer = self
            .cfg
            .trace
            .then(|| (probes, self.fib.clone(), self.names.clone()));
        // Every worker samples for sFlow at the shared rate (0 until `[sflow]` says otherwise).
        let (sampler, samples) = crate::sflow::sampler(
            w,
            nports as usize,
            self.cfg.sflow_queue(),
            self.sflow.rate.clone(),
        );
        sw.set_sampler(sampler);
        self.sflow.queues.push(samples);
        let mut stage = SwitchStage::new(w, sw, tracer);
        if let Some(inject) = self.tree.as_mut().and_then(|t| t.inject.take()) {
            stage.set_inject(inject);
        }
        self.workers.push(WorkerCounters {
            switch: stage.stats().clone(),
            flooded: stage.flooded(),
            vlans: stage.vlan_counters(),
        });
        Ok(stage)
    }

    fn view(&self, engine: &[Arc<fp_engine::driver::WorkerCounters>]) -> Arc<SwitchView> {
        // The ports' frame counts, for sFlow's interface counters.
        *self.sflow.engine.lock().unwrap_or_else(|p| p.into_inner()) = engine.to_vec();
        Arc::new(SwitchView {
            sflow: self.sflow.stats.clone(),
            names: self.names.clone(),
            workers: self.workers.clone(),
            published: self.published.clone(),
            preloaded: self.cfg.preload.len(),
            fib_capacity: self.cfg.fib_capacity,
            learn_queue: self.cfg.learn_queue,
            restored: self.restored.clone(),
        })
    }

    fn started(&mut self, _cx: &mut Context<'_>) -> Result<()> {
        // The preload is in the FIB now; its list is no longer needed.
        self.cfg.preload = Vec::new();
        self.sflow.configure(self.cfg.sflow.as_ref());
        self.sflow.start(&self.cfg.ports)?;
        Ok(())
    }

    /// Read the configuration file again and apply what a reload may change.
    fn reload(&mut self, _cx: &mut Context<'_>) -> Result<u64> {
        let Some(path) = self.cfg.file.clone() else {
            anyhow::bail!(
                "the switch runs with command-line settings; start it with --config FILE to reload"
            );
        };
        let r = SwitchConfig::from_file_for_reload(&path)
            .map_err(anyhow::Error::from)
            .and_then(|new| self.apply(new));
        match r {
            Ok(flushed) => {
                self.generation += 1;
                log(format_args!(
                    "reload of {}: committed, generation {}; {flushed} learned entries no longer                      valid removed",
                    path.display(),
                    self.generation
                ));
                self.publish();
                Ok(self.generation)
            }
            Err(e) => {
                log(format_args!(
                    "reload of {} rejected, the running configuration stays: {e:#}",
                    path.display()
                ));
                Err(e)
            }
        }
    }

    fn ready_status(&self) -> String {
        format!(
            "switching {} ports ({}), aging {:?}, {} static entries",
            self.cfg.ports.len(),
            self.cfg.ports.join(","),
            self.cfg.aging,
            self.cfg.statics.len()
        )
    }

    fn tick_every(&self) -> Duration {
        LEARN_EVERY
    }

    /// The FIB writer: apply learn events, age on a clock, publish for the admin server.
    fn tick(&mut self, _cx: &mut Context<'_>) -> Result<()> {
        let mut changed = self.ctl.drain() > 0;
        changed |= self.run_tree();
        if self.last_age.elapsed() >= self.age_every {
            self.last_age = Instant::now();
            let aged = self.ctl.age(fp_engine::sys::monotonic_ns());
            if aged > 0 {
                log(format_args!("aged out {aged} FIB entries"));
                changed = true;
            }
        }
        for p in self.ctl.take_pinned() {
            let vlan = match p.vlan {
                0 => String::new(),
                v => format!(" in VLAN {v}"),
            };
            log(format_args!(
                "MAC {}{vlan} moves between ports {} and {} too often: pinned to {} for {:?}",
                p.mac,
                self.cfg.ports[p.port as usize],
                self.cfg.ports[p.other as usize],
                self.cfg.ports[p.port as usize],
                Duration::from_nanos(self.cfg.damping.hold_ns)
            ));
            changed = true;
        }
        if changed {
            self.publish();
        }
        Ok(())
    }

    fn finished(&mut self, _stages: Vec<Finished<SwitchStage>>) {
        self.sflow.stop();
        // The workers stopped: what they queued last is applied, then the learned entries are
        // kept for the next start.
        self.ctl.drain();
        let learned = Learned {
            ports: self.cfg.ports.clone(),
            entries: self
                .ctl
                .learned(fp_engine::sys::monotonic_ns())
                .into_iter()
                .map(|(m, v, p, idle)| (m, v, p, (idle / 1_000_000).min(u32::MAX as u64) as u32))
                .collect(),
            stopped_ms: carry::wall_ms(),
        };
        let path = carry::path_in(&self.cfg.state_dir);
        match carry::write(&path, &learned) {
            Ok(()) => log(format_args!(
                "{} learned FIB entries kept for the next start in {}",
                learned.entries.len(),
                path.display()
            )),
            Err(e) => log(format_args!(
                "warning: learned FIB entries not kept in {}: {e}",
                path.display()
            )),
        }
        let st = self.ctl.stats();
        log(format_args!(
            "fib writer: learned {} moved {} aged {} static_kept {} fib_full {}",
            st.learned, st.moved, st.aged, st.static_kept, st.fib_full
        ));
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
}
