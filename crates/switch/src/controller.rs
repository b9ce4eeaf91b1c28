//! The switch's control logic, free of I/O: the FIB's single writer (CuckooSwitch §3.2: one
//! writer, lock-free readers). It applies the workers' learn events, keeps static entries and ages
//! learned ones; time is an argument. The service (`service.rs`) calls it on its tick. It also
//! owns the VLAN settings the workers follow ([`crate::vlan::PortPlan`]): it gives VLANs their
//! FIDs, publishes the plan, and when a reload changes VLANs removes exactly the learned entries
//! that are no longer valid (a VLAN gone, a port no longer in a VLAN); the others stay.
//!
//! Entries are identified by (VLAN, MAC); VLAN 0 is the VLAN-unaware switch's only one.

use crate::guard::{Damping, PortLocks, Storm};
use crate::stage::Learn;
use crate::vlan::{self, FidMap, PortPlan, PortVlans};
use fp_cuckoo::{FibReader, FibWriter, InsertError};
use fp_pipeline::published::Published;
use fp_wire::ethernet::MacAddr;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError};
use std::sync::Arc;

/// The count of FIB changes a cached answer could miss: an entry moved to another port or
/// removed. (A new entry needs no count: caches hold answers for MACs found in the FIB only.)
///
/// The writer changes the FIB, then [`bump`](FibEpoch::bump)s (Release); a worker loads the count
/// (Acquire) once per burst and uses a cached answer only if it was cached under that same count,
/// so no answer outlives a change by more than the burst that overlapped it — as if that burst
/// had read the FIB just before the change.
#[derive(Clone, Debug, Default)]
pub struct FibEpoch(Arc<AtomicU64>);

impl FibEpoch {
    /// The current count.
    #[inline]
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }

    /// Count a change (after making it).
    #[inline]
    pub fn bump(&self) {
        self.0.fetch_add(1, Ordering::Release);
    }
}

/// What the FIB writer did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ControlStats {
    /// MACs learned.
    pub learned: u64,
    /// MACs that moved to another port.
    pub moved: u64,
    /// Learned MACs aged out.
    pub aged: u64,
    /// Learn events ignored because the MAC is static.
    pub static_kept: u64,
    /// Learn events that found the FIB full (the MAC stays unknown and is flooded).
    pub fib_full: u64,
    /// Learn events for a VLAN or port a reload removed meanwhile (ignored).
    pub stale: u64,
    /// Learned entries removed by reloads (their VLAN gone, or their port left it).
    pub flushed: u64,
    /// New source MACs refused because their port had its limit of learned MACs.
    pub port_limit: u64,
    /// Moves ignored because the MAC was pinned for moving too often.
    pub move_damped: u64,
    /// Times a MAC was pinned for moving too often.
    pub pinned: u64,
    /// Learned entries removed by spanning-tree topology changes.
    pub topology_flushed: u64,
}

/// A MAC's recent moves, for damping.
#[derive(Clone, Copy, Debug, Default)]
struct Flaps {
    window_start: u64,
    moves: u32,
    pinned_until: u64,
}

/// A MAC pinned for moving too often: (VLAN, MAC), the port it is pinned to, until when (ns),
/// and the port it last tried to move to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pinned {
    /// The VLAN (0: VLAN-unaware).
    pub vlan: u16,
    /// The MAC.
    pub mac: MacAddr,
    /// The port it stays on.
    pub port: u16,
    /// The port it tried to move to.
    pub other: u16,
    /// Until when (ns).
    pub until_ns: u64,
}

/// A (VLAN, MAC) pair the FIB writer knows: VLAN 0 in a VLAN-unaware switch.
pub type Id = (u16, MacAddr);

/// A configured entry that did not fit in the FIB; nothing after it was loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// Preload entry `index` (1-based) of `total`.
    #[error("preloading entry {index} ({mac}) of {total}: {error} (raise --fib-capacity)")]
    Preload {
        /// Its place in the list, from 1.
        index: usize,
        /// The list's length.
        total: usize,
        /// Its MAC address.
        mac: MacAddr,
        /// Why it did not fit.
        error: InsertError,
    },
    /// A static entry.
    #[error("static entry {mac}: {error}")]
    Static {
        /// Its MAC address.
        mac: MacAddr,
        /// Why it did not fit.
        error: InsertError,
    },
    /// An entry names a VLAN the switch does not have.
    #[error("entry {mac} in VLAN {vlan}: no such VLAN is configured")]
    NoVlan {
        /// Its MAC address.
        mac: MacAddr,
        /// The VLAN.
        vlan: u16,
    },
}

/// A static entry: (VLAN, MAC) → port.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Static {
    /// The MAC address.
    pub mac: MacAddr,
    /// Its VLAN (0 in a VLAN-unaware switch).
    pub vlan: u16,
    /// The port.
    pub port: u16,
}

/// The single writer of the switch FIB: applies learn events, keeps static entries, ages.
pub struct SwitchControl {
    fib: FibWriter,
    learn: Receiver<Learn>,
    statics: HashMap<Id, u16>,
    /// Learned entries: when last seen, and on which port.
    last_seen: HashMap<Id, (u64, u16)>,
    /// Learned entries per port.
    per_port: Vec<u32>,
    /// Per port, the most learned MACs (port security).
    max_macs: Vec<Option<u32>>,
    locks: PortLocks,
    storm: Vec<Storm>,
    /// The spanning tree's port states (none: no spanning tree).
    stp: Option<Vec<crate::stp::State>>,
    damping: Damping,
    flaps: HashMap<Id, Flaps>,
    /// MACs pinned since the service last asked ([`SwitchControl::take_pinned`]).
    newly_pinned: Vec<Pinned>,
    aging_ns: u64,
    stats: ControlStats,
    epoch: FibEpoch,
    fids: FidMap,
    /// The VLAN settings in force (`None`: VLAN-unaware), and what the workers read.
    modes: Option<Vec<PortVlans>>,
    plan: Arc<Published<PortPlan>>,
    /// The plan last published (read per learn event without the publication's lock).
    current: Arc<PortPlan>,
    /// Ports of the switch (0: not told; VLAN settings need it).
    ports: usize,
}

/// A learn queue: the sender for workers (clone it per worker), the receiver for the writer.
pub fn learn_queue(capacity: usize) -> (SyncSender<Learn>, Receiver<Learn>) {
    std::sync::mpsc::sync_channel(capacity)
}

impl SwitchControl {
    /// The writer of `fib`, consuming `learn`, aging learned entries after `aging_ns`.
    pub fn new(fib: impl Into<FibWriter>, learn: Receiver<Learn>, aging_ns: u64) -> SwitchControl {
        SwitchControl {
            fib: fib.into(),
            learn,
            statics: HashMap::new(),
            last_seen: HashMap::new(),
            per_port: Vec::new(),
            max_macs: Vec::new(),
            locks: PortLocks::new(0),
            storm: Vec::new(),
            stp: None,
            damping: Damping::default(),
            flaps: HashMap::new(),
            newly_pinned: Vec::new(),
            aging_ns,
            stats: ControlStats::default(),
            epoch: FibEpoch::default(),
            fids: FidMap::default(),
            modes: None,
            plan: Arc::new(Published::new(Arc::new(PortPlan::unaware(0)))),
            current: Arc::new(PortPlan::unaware(0)),
            ports: 0,
        }
    }

    /// The port settings the workers follow ([`crate::stage::SwitchWorker::set_plan`]).
    pub fn port_plan(&self) -> Arc<Published<PortPlan>> {
        self.plan.clone()
    }

    /// Which ports are full (port security), for the workers.
    pub fn port_locks(&self) -> PortLocks {
        self.locks.clone()
    }

    /// Set the ports' guards: storm-control limits and learned-MAC limits (one per port; a
    /// shorter list leaves the rest unlimited) and MAC-move damping. Ports over a new limit keep
    /// what they learned and take no new MAC until they are under it.
    pub fn set_guards(&mut self, storm: Vec<Storm>, max_macs: Vec<Option<u32>>, damping: Damping) {
        self.storm = storm;
        self.max_macs = max_macs;
        self.damping = damping;
        for p in 0..self.per_port.len().max(self.max_macs.len()) {
            self.update_lock(p as u16);
        }
        self.publish_plan();
    }

    /// Build and publish the workers' plan from the settings in force.
    fn publish_plan(&mut self) {
        let plan = match &self.modes {
            None => PortPlan::unaware(self.ports),
            Some(m) => PortPlan::new(m, &self.fids),
        };
        let mut storm = self.storm.clone();
        storm.resize(self.ports, Storm::default());
        self.current = Arc::new(
            plan.with_storm(storm)
                .with_stp(self.stp.clone())
                .with_refresh((self.aging_ns / 4).max(1)),
        );
        self.plan.publish(self.current.clone());
    }

    /// Apply the spanning tree's port states (`None`: no spanning tree, every port forwards):
    /// the workers get them with the rest of the port plan, all at once.
    pub fn set_stp_states(&mut self, states: Option<Vec<crate::stp::State>>) {
        if self.stp != states {
            self.stp = states;
            self.publish_plan();
        }
    }

    /// Remove the learned entries of every port but `keep` (`None`: of every port), as a
    /// spanning-tree topology change asks. Returns how many.
    pub fn flush_except(&mut self, keep: Option<u16>) -> usize {
        self.flush_learned(|port| Some(port) != keep)
    }

    /// Remove the learned entries of `port` (it stopped forwarding). Returns how many.
    pub fn flush_port(&mut self, port: u16) -> usize {
        self.flush_learned(|p| p == port)
    }

    /// Remove the learned entries whose port `which` picks (topology changes).
    fn flush_learned(&mut self, which: impl Fn(u16) -> bool) -> usize {
        let gone: Vec<Id> = self
            .last_seen
            .iter()
            .filter(|(_, &(_, port))| which(port))
            .map(|(&id, _)| id)
            .collect();
        for &(v, m) in &gone {
            self.forget((v, m));
            if let Some(k) = self.key(v, m) {
                self.fib.remove(k);
            }
        }
        if !gone.is_empty() {
            self.epoch.bump();
        }
        self.stats.topology_flushed += gone.len() as u64;
        gone.len()
    }

    /// Lock `port` if it has its limit of learned MACs, unlock it otherwise.
    fn update_lock(&self, port: u16) {
        let n = self.per_port.get(port as usize).copied().unwrap_or(0);
        let full = self
            .max_macs
            .get(port as usize)
            .copied()
            .flatten()
            .is_some_and(|max| n >= max);
        self.locks.set(port, full);
    }

    /// Whether `port` takes no new learned MAC.
    fn port_full(&self, port: u16) -> bool {
        self.locks.locked(port)
    }

    /// Record a learned entry seen at `t` on `port` (counting per port).
    fn remember(&mut self, id: Id, port: u16, t: u64) {
        let old = self.last_seen.insert(id, (t, port)).map(|e| e.1);
        if old == Some(port) {
            return;
        }
        if self.per_port.len() <= port as usize {
            self.per_port.resize(port as usize + 1, 0);
        }
        self.per_port[port as usize] += 1;
        self.update_lock(port);
        if let Some(o) = old {
            self.per_port[o as usize] -= 1;
            self.update_lock(o);
        }
    }

    /// Forget a learned entry (not the FIB's: the caller removes that).
    fn forget(&mut self, id: Id) {
        if let Some((_, p)) = self.last_seen.remove(&id) {
            self.per_port[p as usize] -= 1;
            self.update_lock(p);
        }
    }

    /// Learned MACs per port.
    pub fn learned_per_port(&self) -> &[u32] {
        &self.per_port
    }

    /// MACs pinned for flapping since the last call.
    pub fn take_pinned(&mut self) -> Vec<Pinned> {
        std::mem::take(&mut self.newly_pinned)
    }

    /// MACs pinned at `now_ns`.
    pub fn pinned(&self, now_ns: u64) -> Vec<Pinned> {
        let mut v: Vec<Pinned> = self
            .flaps
            .iter()
            .filter(|(_, f)| f.pinned_until > now_ns)
            .filter_map(|(&(vlan, mac), f)| {
                let (_, port) = *self.last_seen.get(&(vlan, mac))?;
                Some(Pinned {
                    vlan,
                    mac,
                    port,
                    other: port,
                    until_ns: f.pinned_until,
                })
            })
            .collect();
        v.sort_by_key(|p| (p.vlan, p.mac.to_u64()));
        v
    }

    /// The VLAN settings in force (`None`: VLAN-unaware).
    pub fn vlan_modes(&self) -> Option<&[PortVlans]> {
        self.modes.as_deref()
    }

    /// Set the switch's VLANs: `modes` has one entry per port (`None`: VLAN-unaware), `ports`
    /// is the port count (it decides how many VLANs the FIB key has room for). Learned entries
    /// whose VLAN is gone or whose port left their VLAN are removed (returned: how many); the
    /// others stay. Static entries are the caller's to set again ([`SwitchControl::set_statics`]).
    /// Nothing changes if it fails.
    pub fn set_vlans(
        &mut self,
        ports: usize,
        modes: Option<Vec<PortVlans>>,
    ) -> Result<usize, String> {
        let old_fids = self.fids.clone();
        let (plan, fids) = match &modes {
            None => (PortPlan::unaware(ports), FidMap::default()),
            Some(m) => {
                if m.len() != ports {
                    return Err(format!("{} port VLAN settings for {ports} ports", m.len()));
                }
                let vids: BTreeSet<u16> = m.iter().flat_map(PortVlans::members).collect();
                let limit = ((1usize << vlan::fid_bits(ports)) - 1).min(vlan::MAX_VID as usize);
                let mut fids = self.fids.clone();
                fids.assign(&vids, limit)?;
                (PortPlan::new(m, &fids), fids)
            }
        };
        // Learned entries no longer valid under the new settings, removed under the old FIDs.
        let was_aware = self.modes.is_some();
        let stale: Vec<Id> = self
            .last_seen
            .keys()
            .filter(|&&(v, m)| {
                let Some(port) = self.lookup_with(&old_fids, was_aware, v, m) else {
                    return true;
                };
                let valid = match (&modes, v) {
                    (None, 0) => (port as usize) < ports,
                    (None, _) | (Some(_), 0) => false,
                    (Some(_), v) => plan.is_member(port, v),
                };
                !valid
            })
            .copied()
            .collect();
        for &(v, m) in &stale {
            if let Some(k) = Self::key_with(&old_fids, was_aware, v, m) {
                self.fib.remove(k);
            }
            self.forget((v, m));
        }
        self.stats.flushed += stale.len() as u64;
        // Static entries whose key changes (their VLAN gone, the switch now VLAN-aware or not)
        // leave the FIB under their old key and the list; the caller sets the statics again.
        let aware = modes.is_some();
        let moved: Vec<Id> = self
            .statics
            .keys()
            .filter(|&&(v, m)| {
                Self::key_with(&old_fids, was_aware, v, m) != Self::key_with(&fids, aware, v, m)
            })
            .copied()
            .collect();
        for (v, m) in moved {
            if let Some(k) = Self::key_with(&old_fids, was_aware, v, m) {
                self.fib.remove(k);
            }
            self.statics.remove(&(v, m));
        }
        self.fids = fids;
        self.modes = modes;
        if self.ports != ports {
            self.ports = ports;
            self.locks = PortLocks::new(ports);
            for p in 0..ports {
                self.update_lock(p as u16);
            }
        }
        drop(plan);
        self.publish_plan();
        if !stale.is_empty() {
            self.epoch.bump();
        }
        Ok(stale.len())
    }

    /// The FIB key of (VLAN, MAC) under `fids` (`None`: the VLAN is not configured).
    fn key_with(fids: &FidMap, aware: bool, vlan: u16, mac: MacAddr) -> Option<u64> {
        match (aware, vlan) {
            (false, 0) => Some(mac.to_u64()),
            (false, _) | (true, 0) => None,
            (true, v) => fids.get(v).map(|f| vlan::key(f, mac.to_u64())),
        }
    }

    fn lookup_with(&self, fids: &FidMap, aware: bool, vlan: u16, mac: MacAddr) -> Option<u16> {
        self.fib.get(Self::key_with(fids, aware, vlan, mac)?)
    }

    /// The FIB key of (VLAN, MAC) now.
    fn key(&self, vlan: u16, mac: MacAddr) -> Option<u64> {
        Self::key_with(&self.fids, self.modes.is_some(), vlan, mac)
    }

    /// Replace the static entries by `statics`: those no longer listed are removed, new ones
    /// added, learned entries of their (VLAN, MAC) overridden. On an error (a VLAN not
    /// configured, the FIB full), the entries before it are set.
    pub fn set_statics(&mut self, statics: &[Static]) -> Result<(), LoadError> {
        let keep: HashSet<Id> = statics.iter().map(|s| (s.vlan, s.mac)).collect();
        let gone: Vec<Id> = self
            .statics
            .keys()
            .filter(|id| !keep.contains(id))
            .copied()
            .collect();
        for (v, m) in gone {
            self.statics.remove(&(v, m));
            if let Some(k) = self.key(v, m) {
                self.fib.remove(k);
                self.epoch.bump();
            }
        }
        for s in statics {
            self.add_static_in(s.vlan, s.mac, s.port)?;
        }
        Ok(())
    }

    /// The FIB's change count, for the workers' caches.
    pub fn epoch(&self) -> FibEpoch {
        self.epoch.clone()
    }

    /// Add a static entry in a VLAN-unaware switch: learning never overrides it and it never
    /// ages.
    pub fn add_static(&mut self, mac: MacAddr, port: u16) -> Result<(), InsertError> {
        self.add_static_in(0, mac, port).map_err(|e| match e {
            LoadError::Static { error, .. } | LoadError::Preload { error, .. } => error,
            LoadError::NoVlan { .. } => InsertError::KeyOutOfRange,
        })
    }

    /// Add a static entry for (VLAN, MAC).
    pub fn add_static_in(&mut self, vlan: u16, mac: MacAddr, port: u16) -> Result<(), LoadError> {
        let key = self.key(vlan, mac).ok_or(LoadError::NoVlan { mac, vlan })?;
        if self
            .fib
            .insert(key, port)
            .map_err(|error| LoadError::Static { mac, error })?
            .is_some_and(|old| old != port)
        {
            self.epoch.bump();
        }
        self.statics.insert((vlan, mac), port);
        self.forget((vlan, mac));
        Ok(())
    }

    /// Insert an entry that neither ages nor is protected from learning (bulk preload), in a
    /// VLAN-unaware switch.
    pub fn preload(&mut self, mac: MacAddr, port: u16) -> Result<(), InsertError> {
        self.preload_in(0, mac, port)
    }

    /// [`SwitchControl::preload`] for (VLAN, MAC); `KeyOutOfRange` if the VLAN is not
    /// configured.
    pub fn preload_in(&mut self, vlan: u16, mac: MacAddr, port: u16) -> Result<(), InsertError> {
        let key = self.key(vlan, mac).ok_or(InsertError::KeyOutOfRange)?;
        if self.fib.insert(key, port)?.is_some_and(|old| old != port) {
            self.epoch.bump();
        }
        Ok(())
    }

    /// Load the configured preload list (each entry in the untagged VLAN of its port, VLAN 0
    /// when unaware), then the static entries.
    pub fn load(
        &mut self,
        preload: &[(MacAddr, u16)],
        statics: &[Static],
    ) -> Result<(), LoadError> {
        for (i, &(mac, port)) in preload.iter().enumerate() {
            let vlan = self.untagged_vlan(port);
            self.preload_in(vlan, mac, port)
                .map_err(|error| LoadError::Preload {
                    index: i + 1,
                    total: preload.len(),
                    mac,
                    error,
                })?;
        }
        self.set_statics(statics)
    }

    /// The VLAN untagged frames of `port` belong to (0 when VLAN-unaware or none).
    pub fn untagged_vlan(&self, port: u16) -> u16 {
        self.modes
            .as_ref()
            .and_then(|m| m.get(port as usize))
            .and_then(PortVlans::untagged)
            .unwrap_or(0)
    }

    /// Apply every queued learn event; returns how many.
    pub fn drain(&mut self) -> usize {
        let mut n = 0;
        loop {
            match self.learn.try_recv() {
                Ok(e) => {
                    self.apply(e);
                    n += 1;
                }
                Err(TryRecvError::Empty) | Err(TryRecvError::Disconnected) => return n,
            }
        }
    }

    fn apply(&mut self, e: Learn) {
        let id = (e.vlan, e.mac);
        if self.statics.contains_key(&id) {
            self.stats.static_kept += 1;
            return;
        }
        // Learned under settings a reload has changed since: the VLAN is gone or the port left it.
        let valid = match &self.modes {
            None => e.vlan == 0,
            Some(_) => e.vlan != 0 && self.current.is_member(e.port, e.vlan),
        };
        let Some(key) = self.key(e.vlan, e.mac).filter(|_| valid) else {
            self.stats.stale += 1;
            return;
        };
        match self.fib.get(key) {
            Some(p) if p == e.port => {}
            Some(p) => {
                if self.damped(id, p, e.port, e.now_ns) {
                    self.stats.move_damped += 1;
                    return;
                }
                if self.port_full(e.port) {
                    self.stats.port_limit += 1;
                    return;
                }
                if self.fib.update(key, e.port).is_ok() {
                    self.stats.moved += 1;
                    self.epoch.bump();
                }
            }
            None => {
                if self.port_full(e.port) {
                    self.stats.port_limit += 1;
                    return;
                }
                match self.fib.insert(key, e.port) {
                    Ok(_) => self.stats.learned += 1,
                    Err(_) => {
                        self.stats.fib_full += 1;
                        return;
                    }
                }
            }
        }
        self.remember(id, e.port, e.now_ns);
    }

    /// A move of `id` from port `from` to `to` at `now`: whether damping holds it back (the MAC
    /// is pinned, or this move pins it).
    fn damped(&mut self, id: Id, from: u16, to: u16, now: u64) -> bool {
        let d = self.damping;
        if d.moves == 0 {
            return false;
        }
        let f = self.flaps.entry(id).or_default();
        if f.pinned_until > now {
            return true;
        }
        if now.saturating_sub(f.window_start) > d.window_ns {
            f.window_start = now;
            f.moves = 0;
        }
        f.moves += 1;
        if f.moves <= d.moves {
            return false;
        }
        f.pinned_until = now + d.hold_ns;
        f.moves = 0;
        self.stats.pinned += 1;
        self.newly_pinned.push(Pinned {
            vlan: id.0,
            mac: id.1,
            port: from,
            other: to,
            until_ns: now + d.hold_ns,
        });
        true
    }

    /// Every learned entry (not the static or preloaded ones) with its VLAN, port and the time
    /// since its MAC was last seen at `now_ns`: what a restart carries (`crate::carry`).
    pub fn learned(&self, now_ns: u64) -> Vec<(MacAddr, u16, u16, u64)> {
        self.last_seen
            .iter()
            .filter_map(|(&(v, m), &(t, _))| {
                let port = self.fib.get(self.key(v, m)?)?;
                Some((m, v, port, now_ns.saturating_sub(t)))
            })
            .collect()
    }

    /// Learned entries per VLAN (VLAN 0: the VLAN-unaware switch's).
    pub fn learned_per_vlan(&self) -> Vec<(u16, u64)> {
        let mut n: std::collections::BTreeMap<u16, u64> = Default::default();
        for &(v, _) in self.last_seen.keys() {
            *n.entry(v).or_default() += 1;
        }
        n.into_iter().collect()
    }

    /// Put learned entries back at `now_ns`, each `(MAC, VLAN, port, idle ns)` as if last seen
    /// `idle` ago: entries idle for the aging time are left out, and so are entries whose VLAN
    /// this switch does not have or whose port is not in it; a static entry or one already in
    /// the FIB (preloaded) wins. Returns (restored, aged out, FIB full, VLAN gone).
    pub fn restore(
        &mut self,
        entries: &[(MacAddr, u16, u16, u64)],
        now_ns: u64,
    ) -> (u64, u64, u64, u64) {
        let (mut restored, mut aged, mut full, mut vlan_gone) = (0, 0, 0, 0);
        let plan = self.current.clone();
        for &(mac, vlan, port, idle) in entries {
            if idle >= self.aging_ns {
                aged += 1;
                continue;
            }
            let member =
                vlan <= vlan::MAX_VID && (self.modes.is_none() || plan.is_member(port, vlan));
            let Some(key) = self.key(vlan, mac).filter(|_| member) else {
                vlan_gone += 1;
                continue;
            };
            if self.statics.contains_key(&(vlan, mac)) || self.fib.get(key).is_some() {
                continue;
            }
            match self.fib.insert(key, port) {
                Ok(_) => {
                    self.remember((vlan, mac), port, now_ns.saturating_sub(idle));
                    restored += 1;
                }
                Err(_) => full += 1,
            }
        }
        if restored > 0 {
            self.epoch.bump();
        }
        (restored, aged, full, vlan_gone)
    }

    /// Remove learned entries not seen for the aging time. Returns how many were removed.
    pub fn age(&mut self, now_ns: u64) -> usize {
        let aging = self.aging_ns;
        let old: Vec<Id> = self
            .last_seen
            .iter()
            .filter(|(_, &(t, _))| now_ns.saturating_sub(t) >= aging)
            .map(|(&id, _)| id)
            .collect();
        for &(v, m) in &old {
            self.forget((v, m));
            if let Some(k) = self.key(v, m) {
                self.fib.remove(k);
            }
        }
        // Move histories whose window and pin are over.
        let window = self.damping.window_ns;
        self.flaps.retain(|_, f| {
            f.pinned_until > now_ns || now_ns.saturating_sub(f.window_start) <= window
        });
        if !old.is_empty() {
            self.epoch.bump();
        }
        self.stats.aged += old.len() as u64;
        old.len()
    }

    /// What the writer did so far.
    pub fn stats(&self) -> ControlStats {
        self.stats
    }

    /// A reader of the FIB.
    pub fn reader(&self) -> FibReader {
        self.fib.reader()
    }

    /// The FIB entry of `mac` in a VLAN-unaware switch.
    pub fn lookup(&self, mac: MacAddr) -> Option<u16> {
        self.lookup_in(0, mac)
    }

    /// The FIB entry of (VLAN, MAC).
    pub fn lookup_in(&self, vlan: u16, mac: MacAddr) -> Option<u16> {
        self.fib.get(self.key(vlan, mac)?)
    }

    /// Change the aging time (a reload); the workers' refresh interval follows.
    pub fn set_aging(&mut self, aging_ns: u64) {
        self.aging_ns = aging_ns;
        self.publish_plan();
    }

    /// The static entries, by (VLAN, MAC).
    pub fn statics(&self) -> Vec<Static> {
        let mut v: Vec<Static> = self
            .statics
            .iter()
            .map(|(&(vlan, mac), &port)| Static { mac, vlan, port })
            .collect();
        v.sort_by_key(|s| (s.vlan, s.mac.to_u64()));
        v
    }

    /// FIB occupancy and size.
    pub fn fib_stats(&self) -> fp_cuckoo::Stats {
        self.fib.stats()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fp_cuckoo::{CompactMap, Config};

    fn control(aging_ns: u64) -> (SwitchControl, SyncSender<Learn>) {
        let (w, _) = CompactMap::new(&Config::with_capacity(64)).unwrap();
        let (tx, rx) = learn_queue(16);
        (SwitchControl::new(w, rx, aging_ns), tx)
    }

    fn mac(i: u8) -> MacAddr {
        MacAddr([2, 0, 0, 0, 0, i])
    }

    #[test]
    fn learned_entries_come_back_with_their_age() {
        let (mut a, tx) = control(10_000);
        a.add_static(mac(9), 3).unwrap();
        for (i, port, t) in [(1, 0, 1_000), (2, 1, 5_000), (9, 0, 5_000)] {
            tx.send(Learn {
                mac: mac(i),
                vlan: 0,
                port,
                now_ns: t,
            })
            .unwrap();
        }
        a.drain();
        let mut learned = a.learned(6_000);
        learned.sort_by_key(|e| e.0 .0);
        // The static entry is not learned, and is not carried.
        assert_eq!(learned, vec![(mac(1), 0, 0, 5_000), (mac(2), 0, 1, 1_000)]);

        let (mut b, _tx) = control(10_000);
        b.add_static(mac(2), 7).unwrap();
        let carried = [
            (mac(1), 0, 0, 5_000),
            (mac(2), 0, 1, 1_000),
            (mac(3), 0, 2, 10_000),
            (mac(4), 7, 2, 1_000),
        ];
        // mac 3 aged out meanwhile; mac 2 is static here: the static entry wins; mac 4's VLAN
        // does not exist in a VLAN-unaware switch.
        assert_eq!(b.restore(&carried, 100_000), (1, 1, 0, 1));
        assert_eq!(b.lookup(mac(1)), Some(0));
        assert_eq!(b.lookup(mac(2)), Some(7));
        assert_eq!(b.lookup(mac(3)), None);
        // Restored entries age from when they were last seen, not from the restart.
        assert_eq!(b.age(100_000 + 4_999), 0);
        assert_eq!(b.age(100_000 + 5_000), 1);
        assert_eq!(b.lookup(mac(1)), None);
    }
}
