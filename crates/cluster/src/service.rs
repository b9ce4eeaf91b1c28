//! `flowplane cluster run --node i`: one node of a ScaleBricks cluster whose state lives in etcd,
//! on the service runner (`fp-service`).
//!
//! * **Start.** The settings every node must share (mode, node count, capacity, hash seed) are
//!   written to `<prefix>config` by the first node; a node whose file disagrees refuses to start.
//!   A node restarted with the same id waits for its previous lease to expire. It reads every
//!   entry at one revision and builds its [`Member`] (its FIB share and its partition-table
//!   replica).
//! * **Data path.** The runner opens the node's external interfaces and its interconnect (one
//!   worker, every frame captured) and runs the node's stage (`crate::stage::NodeStage`).
//! * **Membership.** Once the node forwards, it registers `<prefix>members/<id>` under a lease it
//!   keeps alive (the runner's tick), and a thread watches the prefix from the next revision: each
//!   entry change reaches the control thread as an event and is applied in revision order, then
//!   the member key is rewritten with the revision applied, the entry digest and any error. A
//!   watch that breaks resumes after the last revision seen; one whose history was compacted reads
//!   the state again and applies the difference. A member key that disappears (its lease expired)
//!   marks that node down: frames for its entries are dropped at the ingress node, not flooded.
//! * **Shutdown** (SIGTERM): the node revokes its lease (the others mark it down at once), the
//!   worker drains and the process exits 0.

use crate::config::{Config, NodeSection};
use crate::harness::{self, StatsReader, RING_BYTES};
use crate::metrics::NodeView;
use crate::stage::{NodeConfig, NodeStage, NodeTrace, PublishedCounters, Tables};
use crate::store::{
    apply_entry, parse_entry, snapshot_events, Input, MemberRecord, SharedSettings,
};
use crate::{ClusterConfig, Member};
use anyhow::{anyhow, bail, Context as _, Result};
use fp_control::etcd::{Etcd, Event, WatchMsg};
use fp_control::log;
use fp_control::signal::TerminateSignal;
use fp_engine::driver::{Finished, Options, WorkerCounters};
use fp_engine::live::Capture;
use fp_pipeline::trace::ProbeSender;
use fp_service::{Context, Events, LiveOptions, Ports, Service, Setup};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the lease and the member record are looked after.
const TICK: Duration = Duration::from_millis(50);

/// Run node `id` of the cluster `cfg` until SIGTERM, its worker pinned to `cpu` if given.
pub fn run(cfg: &Config, id: u8, cpu: Option<usize>, trace: bool) -> Result<()> {
    let Some(me) = cfg.nodes.get(id as usize).cloned() else {
        bail!("--node {id}: the configuration has nodes 0..{}", cfg.n());
    };
    let live = LiveOptions {
        workers: 1,
        cpus: cpu.into_iter().collect(),
        admin: me.admin,
        pin: cpu.is_some(),
        ..LiveOptions::new(cfg.driver)
    };
    fp_service::run(&live, |events| NodeService::new(cfg, id, me, trace, events))
}

/// The node's registration: its lease and member key.
struct Registration {
    lease: i64,
    last_ok: Instant,
}

fn register(etcd: &Etcd, key: &str, ttl: u64, rec: &MemberRecord) -> Result<Registration> {
    let lease = etcd.lease_grant(ttl)?;
    etcd.put(key.as_bytes(), rec.to_json().as_bytes(), Some(lease))?;
    Ok(Registration {
        lease,
        last_ok: Instant::now(),
    })
}

/// The control side's view of etcd: failures are logged once and then every 10 s (not at every
/// retry), the recovery once; after a failure the next try waits half a second.
#[derive(Default)]
struct EtcdHealth {
    failing_since: Option<Instant>,
    last_log: Option<Instant>,
    retry_at: Option<Instant>,
}

impl EtcdHealth {
    fn failed(&mut self, doing: &str, e: &dyn std::fmt::Display) {
        let now = Instant::now();
        let since = *self.failing_since.get_or_insert(now);
        if self
            .last_log
            .is_none_or(|t| now - t >= Duration::from_secs(10))
        {
            log(format_args!(
                "{doing}: {e} (etcd failing for {:.0} s; forwarding continues with the tables \
                 as they are)",
                (now - since).as_secs_f64()
            ));
            self.last_log = Some(now);
        }
        self.retry_at = Some(now + Duration::from_millis(500));
    }

    fn ok(&mut self) {
        if let Some(since) = self.failing_since.take() {
            log(format_args!(
                "etcd answers again (after {:.1} s)",
                since.elapsed().as_secs_f64()
            ));
        }
        self.last_log = None;
        self.retry_at = None;
    }
}

/// A cluster node on the runner.
struct NodeService {
    cfg: Config,
    id: u8,
    me: NodeSection,
    trace: bool,
    etcd: Etcd,
    prefix: String,
    events: Events<Input>,
    node_cfg: NodeConfig,
    tables: Option<Tables>,
    member: Arc<Mutex<Member>>,
    published: Arc<PublishedCounters>,
    applied: Arc<Mutex<i64>>,
    up: Arc<Mutex<Vec<bool>>>,
    /// The revision the node's tables were read at; the watch starts after it.
    rev0: i64,
    applied_rev: i64,
    last_error: Option<(i64, String)>,
    reg: Option<Registration>,
    publish: bool,
    etcd_health: EtcdHealth,
    stopping: bool,
    stop_watch: Arc<AtomicBool>,
    watcher: Option<JoinHandle<()>>,
}

impl NodeService {
    fn new(
        cfg: &Config,
        id: u8,
        me: NodeSection,
        trace: bool,
        events: Events<Input>,
    ) -> Result<NodeService> {
        let etcd = cfg.etcd();
        let prefix = cfg.prefix();
        // 1. The shared settings: create them, or check ours against them.
        let want = SharedSettings {
            mode: cfg.mode,
            nodes: cfg.n(),
            capacity: cfg.cluster.capacity,
            seed: cfg.seed.unwrap_or_else(fp_control::seed::random_seed),
        };
        let config_key = format!("{prefix}config");
        let shared = match etcd
            .create(config_key.as_bytes(), want.to_json().as_bytes())
            .context("etcd")?
        {
            Ok(_) => want,
            Err(kv) => {
                let have = SharedSettings::from_json(&kv.value)
                    .with_context(|| format!("{config_key}: not a cluster configuration"))?;
                for (field, ours, theirs) in [
                    (
                        "cluster.mode",
                        want.mode.name().to_string(),
                        have.mode.name().to_string(),
                    ),
                    (
                        "node (count)",
                        want.nodes.to_string(),
                        have.nodes.to_string(),
                    ),
                    (
                        "cluster.capacity",
                        want.capacity.to_string(),
                        have.capacity.to_string(),
                    ),
                ] {
                    if ours != theirs {
                        bail!(
                            "{field} = {ours}, but cluster {:?} in etcd has {theirs} ({config_key}); \
                             every node must agree",
                            cfg.cluster.name
                        );
                    }
                }
                if cfg.seed.is_some_and(|s| s != have.seed) {
                    bail!(
                        "cluster.seed differs from the seed of cluster {:?} in etcd",
                        cfg.cluster.name
                    );
                }
                have
            }
        };
        // 2. Wait for a previous incarnation's lease to expire.
        let member_key = format!("{prefix}members/{id}");
        let deadline = Instant::now() + Duration::from_secs(cfg.cluster.lease_ttl + 2);
        let term = TerminateSignal::install().context("installing SIGTERM/SIGINT handlers")?;
        while let Some(kv) = etcd.get(member_key.as_bytes())? {
            if Instant::now() > deadline {
                let pid = MemberRecord::parse(&kv.value).map_or(0, |r| r.pid);
                bail!(
                    "node {id} is already a live member (pid {pid}, lease {}): is another process \
                     running as node {id}?",
                    kv.lease
                );
            }
            if term.is_set() {
                bail!("stopped while waiting for node {id}'s previous lease to expire");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        // 3. The state at one revision, and this node's tables.
        let (rev0, kvs) = etcd.get_prefix(prefix.as_bytes())?;
        let mut ccfg = ClusterConfig::new(cfg.n(), cfg.mode, 255, shared.capacity);
        ccfg.seed = shared.seed;
        let mut initial = Vec::new();
        let mut up = vec![false; cfg.n() as usize];
        up[id as usize] = true;
        let mut bad = 0;
        for kv in &kvs {
            if kv.key.starts_with(format!("{prefix}entries/").as_bytes()) {
                match parse_entry(cfg, &prefix, &kv.key, &kv.value) {
                    Ok((mac, n, p)) => initial.push((mac.to_u64(), n, p)),
                    Err(e) => {
                        bad += 1;
                        log(format_args!("skipping an invalid entry: {e:#}"));
                    }
                }
            } else if let Some(r) = kv
                .key
                .starts_with(format!("{prefix}members/").as_bytes())
                .then(|| MemberRecord::parse(&kv.value))
                .flatten()
            {
                if let Some(u) = up.get_mut(r.node as usize) {
                    *u = true;
                }
            }
        }
        let t0 = Instant::now();
        let (member, tables) = Member::build(&ccfg, id, &initial)?;
        for (i, u) in up.iter().enumerate() {
            member.set_down(i as u8, !u);
        }
        log(format_args!(
            "node {id}: {} entries at revision {rev0} ({bad} invalid), tables built in {:.0} ms",
            member.len(),
            t0.elapsed().as_secs_f64() * 1e3
        ));
        let mut node_cfg = ccfg.node_config(id);
        node_cfg.ports = me.external.len() as u16;
        Ok(NodeService {
            cfg: cfg.clone(),
            id,
            me,
            trace,
            etcd,
            prefix,
            events,
            node_cfg,
            tables: Some(tables),
            member: Arc::new(Mutex::new(member)),
            published: Arc::new(PublishedCounters::default()),
            applied: Arc::new(Mutex::new(rev0)),
            up: Arc::new(Mutex::new(up)),
            rev0,
            applied_rev: rev0,
            last_error: None,
            reg: None,
            publish: false,
            etcd_health: EtcdHealth::default(),
            stopping: false,
            stop_watch: Arc::new(AtomicBool::new(false)),
            watcher: None,
        })
    }

    fn member(&self) -> MutexGuard<'_, Member> {
        self.member.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn member_key(&self) -> String {
        format!("{}members/{}", self.prefix, self.id)
    }

    /// This node's record, as it publishes it.
    fn record(&self) -> MemberRecord {
        let m = self.member();
        MemberRecord {
            node: self.id,
            applied: self.applied_rev,
            digest: format!("{:016x}", m.digest()),
            entries: m.len() as u64,
            errors: m.stats().errors,
            last_error: self.last_error.clone(),
            admin: self.me.admin.map(|a| a.to_string()),
            pid: std::process::id(),
        }
    }

    /// Apply changes from the watch, in revision order.
    fn apply(&mut self, input: Input) {
        let entries_prefix = format!("{}entries/", self.prefix);
        let members_prefix = format!("{}members/", self.prefix);
        let member = self.member.clone();
        let mut m = member.lock().unwrap_or_else(|e| e.into_inner());
        let events = match input {
            Input::Events(ev) => ev,
            Input::Snapshot(rev, kvs) => {
                let ev = snapshot_events(&self.cfg, m.entries().map(|e| e.0), rev, kvs);
                // Members absent from the snapshot are down.
                let mut up = self.up.lock().unwrap_or_else(|e| e.into_inner());
                for (i, u) in up.iter_mut().enumerate() {
                    if i != self.id as usize {
                        *u = false;
                        m.set_down(i as u8, true);
                    }
                }
                self.applied_rev = self.applied_rev.max(rev);
                self.publish = true;
                ev
            }
        };
        for ev in &events {
            let key = ev.key();
            if key.starts_with(entries_prefix.as_bytes()) {
                if let Err(e) = apply_entry(&self.cfg, &self.prefix, &mut m, ev) {
                    log(format_args!("revision {}: {e:#}", ev.revision()));
                    self.last_error = Some((ev.revision(), format!("{e:#}")));
                }
                self.applied_rev = self.applied_rev.max(ev.revision());
                self.publish = true;
            } else if key.starts_with(members_prefix.as_bytes()) {
                let Some(n) = std::str::from_utf8(&key[members_prefix.len()..])
                    .ok()
                    .and_then(|s| s.parse::<u8>().ok())
                    .filter(|&n| n < self.cfg.n())
                else {
                    continue;
                };
                let is_up = matches!(ev, Event::Put(_));
                if n == self.id {
                    if !is_up && !self.stopping {
                        // Our own key went (the lease expired while etcd was away): again.
                        log("our member key was deleted; registering again");
                        if let Some(r) = &mut self.reg {
                            r.last_ok = Instant::now() - Duration::from_secs(3600);
                        }
                    }
                    continue;
                }
                let mut up = self.up.lock().unwrap_or_else(|e| e.into_inner());
                if up[n as usize] != is_up {
                    log(format_args!(
                        "node {n} is {}",
                        if is_up { "up" } else { "down" }
                    ));
                }
                up[n as usize] = is_up;
                m.set_down(n, !is_up);
            }
        }
        drop(m);
        *self.applied.lock().unwrap_or_else(|e| e.into_inner()) = self.applied_rev;
    }

    /// Keep the lease; register again if it was lost; publish the applied revision. While etcd
    /// does not answer, try again every half second (the data path keeps forwarding meanwhile).
    fn sync_etcd(&mut self) {
        if self
            .etcd_health
            .retry_at
            .is_some_and(|t| Instant::now() < t)
        {
            return;
        }
        let ttl = self.cfg.cluster.lease_ttl;
        let since = self
            .reg
            .as_ref()
            .map_or(Duration::MAX, |r| r.last_ok.elapsed());
        if since >= Duration::from_secs(ttl) {
            match register(&self.etcd, &self.member_key(), ttl, &self.record()) {
                Ok(r) => {
                    self.etcd_health.ok();
                    if self.reg.is_some() {
                        log(format_args!("registered again (lease {})", r.lease));
                    }
                    self.reg = Some(r);
                    self.publish = false;
                }
                Err(e) => self.etcd_health.failed("registering", &e),
            }
        } else if since >= Duration::from_millis(ttl * 1000 / 3) {
            let lease = self.reg.as_ref().map_or(0, |r| r.lease);
            match self.etcd.lease_keepalive(lease) {
                Ok(t) if t > 0 => {
                    self.etcd_health.ok();
                    if let Some(r) = &mut self.reg {
                        r.last_ok = Instant::now();
                    }
                }
                Ok(_) => {
                    if let Some(r) = &mut self.reg {
                        r.last_ok = Instant::now() - Duration::from_secs(3600);
                    }
                }
                Err(e) => self.etcd_health.failed("lease keepalive", &e),
            }
        }
        if let (true, Some(reg)) = (self.publish, &self.reg) {
            let rec = self.record();
            match self.etcd.put(
                self.member_key().as_bytes(),
                rec.to_json().as_bytes(),
                Some(reg.lease),
            ) {
                Ok(_) => {
                    self.etcd_health.ok();
                    self.publish = false;
                }
                Err(e) => self
                    .etcd_health
                    .failed("publishing the applied revision", &e),
            }
        }
    }
}

impl Service for NodeService {
    type Stage = NodeStage;
    type Probe = NodeTrace;
    type Event = Input;
    type View = NodeView;

    fn name(&self) -> &'static str {
        "cluster"
    }

    fn ports(&self) -> Ports {
        let mut interfaces = self.me.external.clone();
        interfaces.push(self.me.interconnect.clone());
        Ports {
            interfaces,
            capture: Capture::All,
            ring_bytes: Some(RING_BYTES),
        }
    }

    fn driver_options(&self, o: &mut Options) {
        o.name = format!("fp-node{}", self.id);
        harness::driver_options(&self.node_cfg, o);
    }

    fn stage(&mut self, _setup: Setup<'_>, probes: ProbeSender<NodeTrace>) -> Result<NodeStage> {
        let tables = self
            .tables
            .take()
            .ok_or_else(|| anyhow!("a cluster node runs one worker"))?;
        let mut stage = NodeStage::new(self.node_cfg, tables);
        stage.publish_to(self.published.clone());
        if self.trace {
            stage.trace_to(probes);
        }
        Ok(stage)
    }

    fn view(&self, engine: &[Arc<WorkerCounters>]) -> Arc<NodeView> {
        Arc::new(NodeView {
            cfg: self.cfg.clone(),
            id: self.id,
            member: self.member.clone(),
            reader: StatsReader::new(engine[0].clone(), self.published.clone()),
            applied: self.applied.clone(),
            up: self.up.clone(),
        })
    }

    /// Register, then follow the changes.
    fn started(&mut self, _cx: &mut Context<'_>) -> Result<()> {
        let ttl = self.cfg.cluster.lease_ttl;
        self.reg = Some(register(
            &self.etcd,
            &self.member_key(),
            ttl,
            &self.record(),
        )?);
        let (etcd, prefix, stop, events, from) = (
            self.etcd.clone(),
            self.prefix.clone(),
            self.stop_watch.clone(),
            self.events.clone(),
            self.rev0 + 1,
        );
        self.watcher = Some(
            std::thread::Builder::new()
                .name("fp-cluster-watch".into())
                .spawn(move || watch_loop(&etcd, &prefix, from, &events, &stop))?,
        );
        Ok(())
    }

    fn ready_status(&self) -> String {
        let up = self.up.lock().unwrap_or_else(|e| e.into_inner());
        format!(
            "cluster {:?} node {}: external {} + interconnect {} on {}; {} of {} members up",
            self.cfg.cluster.name,
            self.id,
            self.me.external.join(","),
            self.me.interconnect,
            self.cfg.driver,
            up.iter().filter(|u| **u).count(),
            self.cfg.n()
        )
    }

    fn tick_every(&self) -> Duration {
        TICK
    }

    fn tick(&mut self, _cx: &mut Context<'_>) -> Result<()> {
        if self.watcher.as_ref().is_some_and(|w| w.is_finished()) {
            bail!("the watch stopped");
        }
        self.sync_etcd();
        Ok(())
    }

    fn event(&mut self, input: Input, _cx: &mut Context<'_>) -> Result<()> {
        self.apply(input);
        self.sync_etcd();
        Ok(())
    }

    fn reload(&mut self, _cx: &mut Context<'_>) -> Result<u64> {
        bail!(
            "a cluster node takes its entries from etcd (flowplane cluster entries ...); \
             its configuration file is read at start"
        )
    }

    /// Leave at once: the other nodes mark this one down now, not after the lease's TTL.
    fn drain(&mut self, _cx: &mut Context<'_>, _clean: bool) -> Duration {
        self.stopping = true;
        self.stop_watch.store(true, Ordering::Relaxed);
        if let Some(r) = &self.reg {
            if let Err(e) = self.etcd.lease_revoke(r.lease) {
                log(format_args!("revoking the lease: {e}"));
            }
        }
        Duration::ZERO
    }

    fn shutdown(&mut self) {
        if let Some(w) = self.watcher.take() {
            let _ = w.join();
        }
    }

    fn finished(&mut self, stages: Vec<Finished<NodeStage>>) {
        if let Some(f) = stages.first() {
            let st = harness::stats_of(&f.counters, &f.stage.published());
            log(format_args!(
                "stopped: frames local {}, one hop {}, redirected {}; drops {}",
                st.ports.by_hops[0],
                st.ports.by_hops[1],
                st.ports.by_hops[2],
                st.counters.drops()
            ));
        }
    }
}

/// Follow the prefix from revision `from`, handing changes to the control thread; resume after a
/// broken stream, read the whole state again after a compaction.
fn watch_loop(etcd: &Etcd, prefix: &str, mut from: i64, tx: &Events<Input>, stop: &AtomicBool) {
    use std::sync::atomic::Ordering::Relaxed;
    let mut complained = false;
    while !stop.load(Relaxed) {
        let mut w = match etcd.watch_prefix(prefix.as_bytes(), from) {
            Ok(w) => w,
            Err(e) => {
                if !complained {
                    log(format_args!("watch: {e}; retrying"));
                    complained = true;
                }
                std::thread::sleep(Duration::from_millis(250));
                continue;
            }
        };
        if complained {
            log(format_args!("watch resumed from revision {from}"));
            complained = false;
        }
        while !stop.load(Relaxed) {
            match w.recv() {
                Ok(None) | Ok(Some(WatchMsg::Created { .. })) => {}
                Ok(Some(WatchMsg::Events { events, .. })) => {
                    if let Some(last) = events.last() {
                        from = last.revision() + 1;
                    }
                    if tx.send(Input::Events(events)).is_err() {
                        return;
                    }
                }
                Ok(Some(WatchMsg::Compacted { compact_revision })) => {
                    log(format_args!(
                        "watch: history compacted at {compact_revision}; reading the state again"
                    ));
                    match etcd.get_prefix(prefix.as_bytes()) {
                        Ok((rev, kvs)) => {
                            from = rev + 1;
                            if tx.send(Input::Snapshot(rev, kvs)).is_err() {
                                return;
                            }
                        }
                        Err(e) => log(format_args!("reading the state: {e}")),
                    }
                    break;
                }
                Ok(Some(WatchMsg::Canceled { reason })) => {
                    log(format_args!("watch cancelled ({reason}); watching again"));
                    break;
                }
                Err(e) => {
                    if !stop.load(Relaxed) {
                        log(format_args!("watch: {e}; resuming from revision {from}"));
                    }
                    std::thread::sleep(Duration::from_millis(100));
                    break;
                }
            }
        }
    }
}
