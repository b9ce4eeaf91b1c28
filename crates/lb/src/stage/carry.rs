//! A worker's connection entries out of and into its tables across a restart
//! ([`crate::carry`]): by backend address, with the time since each flow's last packet.

use super::conn::{entry, entry_backend, entry_seen, entry_set, is_embryonic, EMBRYONIC};
use super::LbStage;
use crate::carry::{Carried, CarriedEntry};
use std::collections::HashMap;
use std::net::IpAddr;

/// What [`LbStage::export`] left out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Exported {
    /// Entries written out.
    pub entries: u64,
    /// Entries of flows picked up mid-way under second chance (picked up again after a restart).
    pub picked: u64,
    /// Entries whose backend id the snapshot no longer names.
    pub unknown: u64,
}

/// What [`LbStage::import`] did with the carried entries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Imported {
    /// Entries now in the worker's tables.
    pub carried: u64,
    /// Dropped: their backend is not in the configuration.
    pub removed_backend: u64,
    /// Dropped: idle longer than the idle timeout.
    pub expired: u64,
    /// Dropped: the table had no room.
    pub full: u64,
}

impl LbStage {
    /// Append every connection entry of this worker to `out`, at `now_ms` (the workers' clock:
    /// `CLOCK_MONOTONIC` in ms). Leaves the tables as they are.
    pub fn export(&mut self, now_ms: u32, out: &mut Carried) -> Exported {
        let snap = self.snap.get().clone();
        let mut r = Exported::default();
        let mut one = |v: u64| -> Option<CarriedEntry> {
            if entry_set(v) != 0 {
                r.picked += 1;
                return None;
            }
            let Some(b) = snap.backend(entry_backend(v)) else {
                r.unknown += 1;
                return None;
            };
            r.entries += 1;
            Some(CarriedEntry {
                backend: b.address,
                embryonic: is_embryonic(v),
                idle_ms: now_ms.wrapping_sub(entry_seen(v)),
            })
        };
        let t = &mut self.tables;
        let n4 = t.conn4.buckets();
        t.conn4.retain_range(0, n4, |k, v| {
            if let Some(e) = one(*v) {
                out.v4.push((*k, e));
            }
            true
        });
        let n6 = t.conn6.buckets();
        t.conn6.retain_range(0, n6, |k, v| {
            if let Some(e) = one(*v) {
                out.v6.push((*k, e));
            }
            true
        });
        r
    }

    /// Put the carried entries into this worker's tables at `now_ms`, each onto the backend id
    /// its address has in the current snapshot; entries of backends the configuration no longer
    /// has, and entries idle for longer than `idle_ms` (the downtime `gap_ms` included), are
    /// dropped and counted.
    pub fn import(&mut self, c: &Carried, now_ms: u32, gap_ms: u64) -> Imported {
        let snap = self.snap.get().clone();
        let ids: HashMap<IpAddr, u32> = snap
            .backends
            .iter()
            .flatten()
            .map(|b| (b.address, b.id))
            .collect();
        let idle_limit = self.idle_ms as u64;
        let mut r = Imported::default();
        let mut value = |e: &CarriedEntry| -> Option<u64> {
            let Some(&id) = ids.get(&e.backend) else {
                r.removed_backend += 1;
                return None;
            };
            let idle = e.idle_ms as u64 + gap_ms;
            if idle >= idle_limit {
                r.expired += 1;
                return None;
            }
            let seen = now_ms.wrapping_sub(idle as u32);
            Some(entry(id, seen) | if e.embryonic { EMBRYONIC } else { 0 })
        };
        let t = &mut self.tables;
        let (mut carried, mut full) = (0, 0);
        for (k, e) in &c.v4 {
            if let Some(v) = value(e) {
                match t.conn4.insert(*k, v) {
                    Ok(_) => carried += 1,
                    Err(_) => full += 1,
                }
            }
        }
        for (k, e) in &c.v6 {
            if let Some(v) = value(e) {
                match t.conn6.insert(*k, v) {
                    Ok(_) => carried += 1,
                    Err(_) => full += 1,
                }
            }
        }
        r.carried = carried;
        r.full = full;
        self.stats.set_occupancy(
            (self.tables.conn4.len(), self.tables.conn6.len()),
            self.slots,
        );
        r
    }
}
