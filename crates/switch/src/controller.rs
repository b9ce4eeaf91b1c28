//! The switch's control logic, free of I/O: the FIB's single writer (CuckooSwitch §3.2: one
//! writer, lock-free readers). It applies the workers' learn events, keeps static entries and ages
//! learned ones; time is an argument. The service (`service.rs`) calls it on its tick. It also
//! owns the VLAN settings the workers follow ([`crate::vlan::VlanPlan`]): it gives VLANs their
//! FIDs, publishes the plan, and when a reload changes VLANs removes exactly the learned entries
//! that are no longer valid (a VLAN gone, a port no longer in a VLAN); the others stay.
//!
//! Entries are identified by (VLAN, MAC); VLAN 0 is the VLAN-unaware switch's only one.

use crate::stage::Learn;
use crate::vlan::{self, FidMap, PortVlans, VlanPlan};
use fp_cuckoo::{CompactReader, CompactWriter, InsertError};
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
    fib: CompactWriter,
    learn: Receiver<Learn>,
    statics: HashMap<Id, u16>,
    last_seen: HashMap<Id, u64>,
    aging_ns: u64,
    stats: ControlStats,
    epoch: FibEpoch,
    fids: FidMap,
    /// The VLAN settings in force (`None`: VLAN-unaware), and what the workers read.
    modes: Option<Vec<PortVlans>>,
    plan: Arc<Published<VlanPlan>>,
    /// The plan last published (read per learn event without the publication's lock).
    current: Arc<VlanPlan>,
    /// Ports of the switch (0: not told; VLAN settings need it).
    ports: usize,
}

/// A learn queue: the sender for workers (clone it per worker), the receiver for the writer.
pub fn learn_queue(capacity: usize) -> (SyncSender<Learn>, Receiver<Learn>) {
    std::sync::mpsc::sync_channel(capacity)
}

impl SwitchControl {
    /// The writer of `fib`, consuming `learn`, aging learned entries after `aging_ns`.
    pub fn new(fib: CompactWriter, learn: Receiver<Learn>, aging_ns: u64) -> SwitchControl {
        SwitchControl {
            fib,
            learn,
            statics: HashMap::new(),
            last_seen: HashMap::new(),
            aging_ns,
            stats: ControlStats::default(),
            epoch: FibEpoch::default(),
            fids: FidMap::default(),
            modes: None,
            plan: Arc::new(Published::new(Arc::new(VlanPlan::unaware(0)))),
            current: Arc::new(VlanPlan::unaware(0)),
            ports: 0,
        }
    }

    /// The VLAN settings the workers follow ([`crate::stage::SwitchWorker::set_vlans`]).
    pub fn vlan_plan(&self) -> Arc<Published<VlanPlan>> {
        self.plan.clone()
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
            None => (VlanPlan::unaware(ports), FidMap::default()),
            Some(m) => {
                if m.len() != ports {
                    return Err(format!("{} port VLAN settings for {ports} ports", m.len()));
                }
                let vids: BTreeSet<u16> = m.iter().flat_map(PortVlans::members).collect();
                let limit = ((1usize << vlan::fid_bits(ports)) - 1).min(vlan::MAX_VID as usize);
                let mut fids = self.fids.clone();
                fids.assign(&vids, limit)?;
                (VlanPlan::new(m, &fids), fids)
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
            self.last_seen.remove(&(v, m));
        }
        self.stats.flushed += stale.len() as u64;
        self.fids = fids;
        self.modes = modes;
        self.ports = ports;
        self.current = Arc::new(plan);
        self.plan.publish(self.current.clone());
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
        self.last_seen.remove(&(vlan, mac));
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
            Some(_) => {
                if self.fib.update(key, e.port).is_ok() {
                    self.stats.moved += 1;
                    self.epoch.bump();
                }
            }
            None => match self.fib.insert(key, e.port) {
                Ok(_) => self.stats.learned += 1,
                Err(_) => {
                    self.stats.fib_full += 1;
                    return;
                }
            },
        }
        self.last_seen.insert(id, e.now_ns);
    }

    /// Every learned entry (not the static or preloaded ones) with its VLAN, port and the time
    /// since its MAC was last seen at `now_ns`: what a restart carries (`crate::carry`).
    pub fn learned(&self, now_ns: u64) -> Vec<(MacAddr, u16, u16, u64)> {
        self.last_seen
            .iter()
            .filter_map(|(&(v, m), &t)| {
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
            let member = self.modes.is_none() || plan.is_member(port, vlan);
            let Some(key) = self.key(vlan, mac).filter(|_| member) else {
                vlan_gone += 1;
                continue;
            };
            if self.statics.contains_key(&(vlan, mac)) || self.fib.get(key).is_some() {
                continue;
            }
            match self.fib.insert(key, port) {
                Ok(_) => {
                    self.last_seen
                        .insert((vlan, mac), now_ns.saturating_sub(idle));
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
            .filter(|(_, &t)| now_ns.saturating_sub(t) >= aging)
            .map(|(&id, _)| id)
            .collect();
        for &(v, m) in &old {
            self.last_seen.remove(&(v, m));
            if let Some(k) = self.key(v, m) {
                self.fib.remove(k);
            }
        }
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
    pub fn reader(&self) -> CompactReader {
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

    /// Change the aging time (a reload).
    pub fn set_aging(&mut self, aging_ns: u64) {
        self.aging_ns = aging_ns;
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
