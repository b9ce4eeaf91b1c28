//! A worker's connection entries out of and into its tables across a restart
//! ([`crate::carry`]): by backend address, with the time since each flow's last packet.

use super::conn::{entry, entry_backend, entry_seen, entry_set, is_embryonic, EMBRYONIC};
use super::LbStage;
use crate::carry::{Carried, CarriedEntry};
use crate::snapshot::Snapshot;
use fp_cuckoo::{GeneralMap, Reader, Writer};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

/// How many entries ahead of its insert [`LbStage::import`] prefetches an entry's buckets.
const AHEAD: usize = 8;

/// Insert `entries` into `table`, each with the value `value` gives it (`None`: left out, counted
/// by `value`); returns (inserted, refused by a full table). Each insert's two buckets are
/// prefetched [`AHEAD`] entries earlier: the entries come in key order, which is random in the
/// table, so an insert alone waits for two cache misses.
fn fill<const N: usize>(
    table: &mut Writer<GeneralMap<[u8; N], u64>>,
    entries: &[([u8; N], CarriedEntry)],
    value: &mut impl FnMut(&CarriedEntry) -> Option<u64>,
) -> (u64, u64) {
    let (mut inserted, mut full) = (0, 0);
    for (i, (k, e)) in entries.iter().enumerate() {
        if let Some((k, _)) = entries.get(i + AHEAD) {
            table.prefetch(*k);
        }
        if let Some(v) = value(e) {
            match table.insert(*k, v) {
                Ok(_) => inserted += 1,
                Err(_) => full += 1,
            }
        }
    }
    (inserted, full)
}

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

/// What one worker's deferred import ([`LbStage::defer_import`]) did, and when.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ImportReport {
    /// What became of the entries.
    pub imported: Imported,
    /// Wall-clock ms (since the Unix epoch) when the worker finished: it forwards from then on.
    pub done_wall_ms: u64,
    /// How long the worker took to fill its tables, in ms.
    pub load_ms: u64,
}

/// Where a worker reports its deferred import (set once, read by the control side).
pub type ImportSlot = Arc<OnceLock<ImportReport>>;

/// An import a worker runs on its own thread before its first receive.
pub(super) struct Deferred {
    carried: Arc<Carried>,
    slot: ImportSlot,
}

/// Export every worker's entries at `now_ms`, each worker on its own thread (exported and
/// de-duplicated in parallel, then merged): the connection entries a stopping balancer carries.
/// `stopped_ms` of the result is left for the caller to set.
pub fn export_workers(stages: &mut [&mut LbStage], now_ms: u32) -> (Carried, Exported) {
    export_workers_since(stages, now_ms, None)
}

/// [`export_workers`] of only the entries written at or after `since_ms` (the workers' clock),
/// when given: inserted, or their last-seen time rewritten (at most once a second per flow, and
/// with any other change of the entry) — what changed since a checkpoint ([`checkpoint`]).
pub fn export_workers_since(
    stages: &mut [&mut LbStage],
    now_ms: u32,
    since_ms: Option<u32>,
) -> (Carried, Exported) {
    let parts: Vec<(Carried, Exported)> = std::thread::scope(|s| {
        let handles: Vec<_> = stages
            .iter_mut()
            .map(|w| {
                s.spawn(move || {
                    let mut c = Carried::default();
                    let r = w.export_since(now_ms, since_ms, &mut c);
                    c.dedup();
                    (c, r)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("an export thread panicked"))
            .collect()
    });
    merge_parts(parts)
}

/// Merge per-worker exports (each sorted, each key once) into one.
fn merge_parts(parts: Vec<(Carried, Exported)>) -> (Carried, Exported) {
    let mut all = Carried::default();
    let mut sum = Exported::default();
    for (c, r) in parts {
        all.v4 = merge(std::mem::take(&mut all.v4), c.v4);
        all.v6 = merge(std::mem::take(&mut all.v6), c.v6);
        sum.entries += r.entries;
        sum.picked += r.picked;
        sum.unknown += r.unknown;
    }
    (all, sum)
}

/// Merge two lists sorted by key (each key once) into one, keeping of a key present in both the
/// copy seen most recently.
fn merge<const N: usize>(
    a: Vec<([u8; N], CarriedEntry)>,
    b: Vec<([u8; N], CarriedEntry)>,
) -> Vec<([u8; N], CarriedEntry)> {
    if a.is_empty() {
        return b;
    }
    if b.is_empty() {
        return a;
    }
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut a, mut b) = (a.into_iter().peekable(), b.into_iter().peekable());
    loop {
        let next = match (a.peek(), b.peek()) {
            (Some(x), Some(y)) => match x.0.cmp(&y.0) {
                std::cmp::Ordering::Less => a.next(),
                std::cmp::Ordering::Greater => b.next(),
                std::cmp::Ordering::Equal => {
                    let (x, y) = (a.next(), b.next());
                    match (x, y) {
                        (Some(x), Some(y)) if y.1.idle_ms < x.1.idle_ms => Some(y),
                        (x, _) => x,
                    }
                }
            },
            (Some(_), None) => a.next(),
            (None, Some(_)) => b.next(),
            (None, None) => break,
        };
        out.extend(next);
    }
    out
}

/// Read handles on one worker's connection tables, for a checkpoint taken while it forwards.
#[derive(Clone)]
pub struct ConnReaders {
    conn4: Reader<GeneralMap<[u8; 13], u64>>,
    conn6: Reader<GeneralMap<[u8; 37], u64>>,
}

/// How many times a checkpoint scans a table again when the worker moved entries along cuckoo
/// paths during the scan (an entry moved backwards across the scan position may have been
/// missed); after that, the last scan stands and [`Checkpoint::unsure`] counts it.
const SCAN_TRIES: usize = 3;

/// What [`checkpoint`] copied.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Checkpoint {
    /// As for an export.
    pub exported: Exported,
    /// Tables scanned again because their worker moved entries meanwhile.
    pub rescans: u64,
    /// Tables whose last scan still overlapped moves: an entry may be missing from the copy
    /// (its flow then goes by the backend sets' second chance and Maglev).
    pub unsure: u64,
}

/// The connection entries of every worker, copied through `readers` while the workers forward
/// (no worker stops or waits): each table is scanned bucket by bucket under the tables' version
/// protocol, entries mapped to backend addresses through `snap`, at `now_ms` (the workers'
/// clock). Entries written after their bucket was read are the successor's delta
/// ([`export_workers_since`] from a little before this `now_ms`).
pub fn checkpoint(readers: &[ConnReaders], snap: &Snapshot, now_ms: u32) -> (Carried, Checkpoint) {
    let mut cp = Checkpoint::default();
    let parts: Vec<(Carried, Exported)> = readers
        .iter()
        .map(|r| {
            let mut c = Carried::default();
            let mut e = Exported::default();
            scan(&r.conn4, snap, now_ms, &mut c.v4, &mut e, &mut cp);
            scan(&r.conn6, snap, now_ms, &mut c.v6, &mut e, &mut cp);
            c.dedup();
            (c, e)
        })
        .collect();
    let (c, e) = merge_parts(parts);
    cp.exported = e;
    (c, cp)
}

/// One table of [`checkpoint`]: scan, and scan again while its writer moved entries meanwhile.
fn scan<const N: usize>(
    table: &Reader<GeneralMap<[u8; N], u64>>,
    snap: &Snapshot,
    now_ms: u32,
    out: &mut Vec<([u8; N], CarriedEntry)>,
    exported: &mut Exported,
    cp: &mut Checkpoint,
) {
    for attempt in 0..SCAN_TRIES {
        let moved = table.moved();
        let mut e = Exported::default();
        let mut v = Vec::with_capacity(table.len());
        table.scan_range(0, table.buckets(), |k, val| {
            if let Some(c) = carried_entry(snap, *val, now_ms, &mut e) {
                v.push((*k, c));
            }
        });
        let whole = table.moved() == moved;
        if whole || attempt + 1 == SCAN_TRIES {
            cp.unsure += u64::from(!whole);
            out.append(&mut v);
            exported.entries += e.entries;
            exported.picked += e.picked;
            exported.unknown += e.unknown;
            return;
        }
        cp.rescans += 1;
    }
}

/// The carried form of connection entry `v` at `now_ms`, or `None` (counted in `r`): a flow
/// picked up under second chance, or a backend id `snap` does not name.
fn carried_entry(snap: &Snapshot, v: u64, now_ms: u32, r: &mut Exported) -> Option<CarriedEntry> {
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
}

/// Put `c` into every worker's tables at `now_ms`, each worker on its own thread (see
/// [`LbStage::import`]); what each did.
pub fn import_workers(
    stages: &mut [LbStage],
    c: &Carried,
    now_ms: u32,
    gap_ms: u64,
) -> Vec<Imported> {
    std::thread::scope(|s| {
        let handles: Vec<_> = stages
            .iter_mut()
            .map(|w| s.spawn(move || w.import(c, now_ms, gap_ms)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("an import thread panicked"))
            .collect()
    })
}

impl LbStage {
    /// Read handles on this worker's connection tables ([`checkpoint`]).
    pub fn conn_readers(&self) -> ConnReaders {
        ConnReaders {
            conn4: self.tables.conn4.reader(),
            conn6: self.tables.conn6.reader(),
        }
    }

    /// Put `carried` into this worker's tables on its own thread, before it receives its first
    /// packet (in its first `maintain`, which the driver runs before its first receive; or its
    /// first burst), and report to `slot`: the workers of a start fill their tables in parallel
    /// instead of one after the other, and the frames arriving meanwhile wait in their ports.
    pub fn defer_import(&mut self, carried: Arc<Carried>, slot: ImportSlot) {
        self.deferred = Some(Deferred { carried, slot });
    }

    /// Run the import [`defer_import`](Self::defer_import) left, if it has not run, at the
    /// workers' clock `now_ns`. Once per start, not per packet: the wall-clock reads measure the
    /// downtime, and the report goes out through a set-once cell.
    pub(super) fn run_deferred_import(&mut self, now_ns: u64) {
        let Some(d) = self.deferred.take() else {
            return;
        };
        let t0 = Instant::now();
        let gap = crate::carry::wall_ms().saturating_sub(d.carried.stopped_ms);
        let now_ms = (now_ns / 1_000_000) as u32;
        let imported = self.import(&d.carried, now_ms, gap);
        let report = ImportReport {
            imported,
            done_wall_ms: crate::carry::wall_ms(),
            load_ms: t0.elapsed().as_millis() as u64,
        };
        let _ = d.slot.set(report);
    }

    /// Append every connection entry of this worker to `out`, at `now_ms` (the workers' clock:
    /// `CLOCK_MONOTONIC` in ms). Leaves the tables as they are.
    pub fn export(&mut self, now_ms: u32, out: &mut Carried) -> Exported {
        self.export_since(now_ms, None, out)
    }

    /// [`export`](Self::export) of only the entries written (last-seen time set) at or after
    /// `since_ms`, when given.
    pub fn export_since(
        &mut self,
        now_ms: u32,
        since_ms: Option<u32>,
        out: &mut Carried,
    ) -> Exported {
        // A worker stopped before its first receive still holds what it was to carry.
        self.run_deferred_import(now_ms as u64 * 1_000_000);
        let snap = self.snap.get().clone();
        let mut r = Exported::default();
        // Seen at or after `since` (the clock wraps: compare ages).
        let horizon = since_ms.map(|s| now_ms.wrapping_sub(s));
        let mut one = |v: u64| -> Option<CarriedEntry> {
            if let Some(h) = horizon {
                if now_ms.wrapping_sub(entry_seen(v)) > h {
                    return None;
                }
            }
            carried_entry(&snap, v, now_ms, &mut r)
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
        let (c4, f4) = fill(&mut t.conn4, &c.v4, &mut value);
        let (c6, f6) = fill(&mut t.conn6, &c.v6, &mut value);
        let (carried, full) = (c4 + c6, f4 + f6);
        r.carried = carried;
        r.full = full;
        self.stats.set_occupancy(
            (self.tables.conn4.len(), self.tables.conn6.len()),
            self.slots,
        );
        r
    }
}
