//! A cluster node's membership, its control side in etcd: joining (the shared settings, a
//! previous incarnation's lease, every entry read at one revision and this node's tables built),
//! registering under a lease it keeps alive, following the changes in revision order (a watch
//! thread that resumes after a break and reads the state again after a compaction), publishing
//! the revision applied, and leaving. The node's data path is [`crate::service`]'s.

use crate::config::{Config, NodeSection};
use crate::stage::{NodeConfig, Tables};
use crate::store::{
    apply_entry, parse_entry, snapshot_events, Input, MemberRecord, SharedSettings,
};
use crate::{ClusterConfig, Member};
use anyhow::{bail, Context as _, Result};
use fp_control::etcd::{Etcd, Event, WatchMsg};
use fp_control::log;
use fp_control::signal::TerminateSignal;
use fp_service::Events;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

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

/// A node's membership of the cluster in etcd, on the control side: the member (its FIB share and
/// partition-table replica) fed the cluster's changes in revision order, the lease, the record
/// it publishes, the watch.
pub(crate) struct Membership {
    cfg: Config,
    id: u8,
    admin: Option<std::net::SocketAddr>,
    etcd: Etcd,
    prefix: String,
    pub(crate) member: Arc<Mutex<Member>>,
    pub(crate) applied: Arc<Mutex<i64>>,
    pub(crate) up: Arc<Mutex<Vec<bool>>>,
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

impl Membership {
    /// Join the cluster as node `id`: agree on the shared settings, wait for a previous
    /// incarnation's lease to expire, read every entry at one revision and build this node's
    /// tables. Returns the membership, the tables and the node's settings for its stage.
    pub(crate) fn join(
        cfg: &Config,
        id: u8,
        me: &NodeSection,
    ) -> Result<(Membership, Tables, NodeConfig)> {
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
        ccfg.fib_layout = cfg.fib_layout;
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
        let m = Membership {
            cfg: cfg.clone(),
            id,
            admin: me.admin,
            etcd,
            prefix,
            member: Arc::new(Mutex::new(member)),
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
        };
        Ok((m, tables, node_cfg))
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
            admin: self.admin.map(|a| a.to_string()),
            pid: std::process::id(),
        }
    }

    /// Apply changes from the watch, in revision order.
    pub(crate) fn apply(&mut self, input: Input) {
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
    pub(crate) fn sync(&mut self) {
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

    /// Register this node, then follow the cluster's changes: a thread watches the keys and
    /// hands every change to `events` (the control thread calls [`Membership::apply`]).
    pub(crate) fn start(&mut self, events: Events<Input>) -> Result<()> {
        let ttl = self.cfg.cluster.lease_ttl;
        self.reg = Some(register(
            &self.etcd,
            &self.member_key(),
            ttl,
            &self.record(),
        )?);
        let (etcd, prefix, stop, from) = (
            self.etcd.clone(),
            self.prefix.clone(),
            self.stop_watch.clone(),
            self.rev0 + 1,
        );
        self.watcher = Some(
            std::thread::Builder::new()
                .name("fp-cluster-watch".into())
                .spawn(move || watch_loop(&etcd, &prefix, from, &events, &stop))?,
        );
        Ok(())
    }

    /// Whether the watch thread ended (it never does on its own while the node runs).
    pub(crate) fn watch_stopped(&self) -> bool {
        self.watcher.as_ref().is_some_and(|w| w.is_finished())
    }

    /// Leave at once: the other nodes mark this one down now, not after the lease's TTL.
    pub(crate) fn leave(&mut self) {
        self.stopping = true;
        self.stop_watch.store(true, Ordering::Relaxed);
        if let Some(r) = &self.reg {
            if let Err(e) = self.etcd.lease_revoke(r.lease) {
                log(format_args!("revoking the lease: {e}"));
            }
        }
    }

    /// Wait for the watch thread to end (after [`Membership::leave`]).
    pub(crate) fn join_watch(&mut self) {
        if let Some(w) = self.watcher.take() {
            let _ = w.join();
        }
    }

    /// How many members are up, of how many.
    pub(crate) fn members_up(&self) -> (usize, usize) {
        let up = self.up.lock().unwrap_or_else(|e| e.into_inner());
        (up.iter().filter(|u| **u).count(), up.len())
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
