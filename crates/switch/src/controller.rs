//! The switch's control logic, free of I/O: the FIB's single writer (CuckooSwitch §3.2: one
//! writer, lock-free readers). It applies the workers' learn events, keeps static entries and ages
//! learned ones; time is an argument. The service (`service.rs`) calls it on its tick.

use crate::stage::Learn;
use fp_cuckoo::{CompactReader, CompactWriter, InsertError};
use fp_wire::ethernet::MacAddr;
use std::collections::{HashMap, HashSet};
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
}

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
}

/// The single writer of the switch FIB: applies learn events, keeps static entries, ages.
pub struct SwitchControl {
    fib: CompactWriter,
    learn: Receiver<Learn>,
    statics: HashSet<MacAddr>,
    last_seen: HashMap<MacAddr, u64>,
    aging_ns: u64,
    stats: ControlStats,
    epoch: FibEpoch,
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
            statics: HashSet::new(),
            last_seen: HashMap::new(),
            aging_ns,
            stats: ControlStats::default(),
            epoch: FibEpoch::default(),
        }
    }

    /// The FIB's change count, for the workers' caches.
    pub fn epoch(&self) -> FibEpoch {
        self.epoch.clone()
    }

    /// Add a static entry: learning never overrides it and it never ages.
    pub fn add_static(&mut self, mac: MacAddr, port: u16) -> Result<(), InsertError> {
        if self
            .fib
            .insert(mac.to_u64(), port)?
            .is_some_and(|old| old != port)
        {
            self.epoch.bump();
        }
        self.statics.insert(mac);
        self.last_seen.remove(&mac);
        Ok(())
    }

    /// Insert an entry that neither ages nor is protected from learning (bulk preload).
    pub fn preload(&mut self, mac: MacAddr, port: u16) -> Result<(), InsertError> {
        if self
            .fib
            .insert(mac.to_u64(), port)?
            .is_some_and(|old| old != port)
        {
            self.epoch.bump();
        }
        Ok(())
    }

    /// Load the configured preload list, then the static entries.
    pub fn load(
        &mut self,
        preload: &[(MacAddr, u16)],
        statics: &[(MacAddr, u16)],
    ) -> Result<(), LoadError> {
        for (i, &(mac, port)) in preload.iter().enumerate() {
            self.preload(mac, port)
                .map_err(|error| LoadError::Preload {
                    index: i + 1,
                    total: preload.len(),
                    mac,
                    error,
                })?;
        }
        for &(mac, port) in statics {
            self.add_static(mac, port)
                .map_err(|error| LoadError::Static { mac, error })?;
        }
        Ok(())
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
        if self.statics.contains(&e.mac) {
            self.stats.static_kept += 1;
            return;
        }
        let key = e.mac.to_u64();
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
        self.last_seen.insert(e.mac, e.now_ns);
    }

    /// Every learned entry (not the static or preloaded ones) with its port and the time since
    /// its MAC was last seen at `now_ns`: what a restart carries (`crate::carry`).
    pub fn learned(&self, now_ns: u64) -> Vec<(MacAddr, u16, u64)> {
        self.last_seen
            .iter()
            .filter_map(|(&m, &t)| {
                let port = self.fib.get(m.to_u64())?;
                Some((m, port, now_ns.saturating_sub(t)))
            })
            .collect()
    }

    /// Put learned entries back at `now_ns`, each `(MAC, port, idle ns)` as if last seen `idle`
    /// ago: entries idle for the aging time are left out, and a static entry or one already in the
    /// FIB (preloaded) wins. Returns (restored, aged out, FIB full).
    pub fn restore(&mut self, entries: &[(MacAddr, u16, u64)], now_ns: u64) -> (u64, u64, u64) {
        let (mut restored, mut aged, mut full) = (0, 0, 0);
        for &(mac, port, idle) in entries {
            if idle >= self.aging_ns {
                aged += 1;
                continue;
            }
            let key = mac.to_u64();
            if self.statics.contains(&mac) || self.fib.get(key).is_some() {
                continue;
            }
            match self.fib.insert(key, port) {
                Ok(_) => {
                    self.last_seen.insert(mac, now_ns.saturating_sub(idle));
                    restored += 1;
                }
                Err(_) => full += 1,
            }
        }
        if restored > 0 {
            self.epoch.bump();
        }
        (restored, aged, full)
    }

    /// Remove learned entries not seen for the aging time. Returns how many were removed.
    pub fn age(&mut self, now_ns: u64) -> usize {
        let aging = self.aging_ns;
        let old: Vec<MacAddr> = self
            .last_seen
            .iter()
            .filter(|(_, &t)| now_ns.saturating_sub(t) >= aging)
            .map(|(&m, _)| m)
            .collect();
        for m in &old {
            self.last_seen.remove(m);
            self.fib.remove(m.to_u64());
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

    /// The FIB entry of `mac`.
    pub fn lookup(&self, mac: MacAddr) -> Option<u16> {
        self.fib.get(mac.to_u64())
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
                port,
                now_ns: t,
            })
            .unwrap();
        }
        a.drain();
        let mut learned = a.learned(6_000);
        learned.sort_by_key(|e| e.0 .0);
        // The static entry is not learned, and is not carried.
        assert_eq!(learned, vec![(mac(1), 0, 5_000), (mac(2), 1, 1_000)]);

        let (mut b, _tx) = control(10_000);
        b.add_static(mac(2), 7).unwrap();
        let carried = [(mac(1), 0, 5_000), (mac(2), 1, 1_000), (mac(3), 2, 10_000)];
        // mac 3 aged out meanwhile; mac 2 is static here: the static entry wins.
        assert_eq!(b.restore(&carried, 100_000), (1, 1, 0));
        assert_eq!(b.lookup(mac(1)), Some(0));
        assert_eq!(b.lookup(mac(2)), Some(7));
        assert_eq!(b.lookup(mac(3)), None);
        // Restored entries age from when they were last seen, not from the restart.
        assert_eq!(b.age(100_000 + 4_999), 0);
        assert_eq!(b.age(100_000 + 5_000), 1);
        assert_eq!(b.lookup(mac(1)), None);
    }
}
