//! Step 4, housekeeping after each burst: the connection- and fragment-expiry sweeps, paced by
//! the clock rather than by bursts, and the occupancy and guard-mode gauges.

use super::conn::{cache_hash, entry_backend, entry_seen, is_embryonic};
use super::{GuardMode, LbStage};
use crate::export::{Event, Tap, IDLE_TIMEOUT};
use crate::snapshot::Snapshot;
use crate::stats::Outcome;
use fp_pipeline::packet::Pool;

/// The expiry sweep runs on the clock, not per burst: at most once per this many ms of burst time
/// (a burst-paced sweep reads a few cold buckets per burst, a cache miss per few packets, at any
/// packet rate; the sweep only needs to keep pace with time).
const SWEEP_EVERY_MS: u32 = 1;
/// One pass of the connection-expiry sweep over a table takes at most a quarter of the idle
/// timeout, and at most [`SWEEP_PASS_MAX_MS`]: an entry outlives its timeout by at most that much.
const SWEEP_PASS_MAX_MS: u32 = 10_000;
/// Milliseconds of sweep work caught up in one burst after a pause (the driver's periodic
/// `maintain` covers idle periods).
const SWEEP_CATCH_UP_MS: u32 = 16;
/// Fragment-table entries the expiry sweep visits per ms of burst time.
const SWEEP_FRAGS_PER_MS: usize = 16;

impl LbStage {
    /// Step 4: the expiry sweeps, paced by the clock, and the occupancy gauges.
    #[inline]
    pub(super) fn housekeeping(&mut self, now_ns: u64, pool: &mut Pool) {
        let now_ms = (now_ns / 1_000_000) as u32;
        let due = now_ms.wrapping_sub(self.swept_ms);
        if due >= SWEEP_EVERY_MS {
            self.swept_ms = now_ms;
            let due = due.min(SWEEP_CATCH_UP_MS) as usize;
            self.tables
                .frags
                .sweep(now_ns, SWEEP_FRAGS_PER_MS * due, &mut self.scratch.expired);
            self.expire(now_ns, due);
        }
        if !self.scratch.expired.is_empty() {
            self.stats
                .count(Outcome::FragExpired, self.scratch.expired.len() as u64);
            pool.put_all(&mut self.scratch.expired);
        }
        self.publish_gauges(now_ms);
    }

    /// Occupancy and the guard's mode, for the metrics reader.
    #[inline]
    pub(super) fn publish_gauges(&mut self, now_ms: u32) {
        let conns = self.connections();
        self.stats.set_occupancy(conns, self.slots);
        let g = &mut self.guard;
        let mode = if conns.0 >= g.pressure.0 || conns.1 >= g.pressure.1 {
            GuardMode::Pressure
        } else if g.over_rate(now_ms) {
            GuardMode::RateLimit
        } else {
            GuardMode::Normal
        };
        self.stats.set_guard_mode(mode as u64);
    }

    /// `ms` milliseconds' worth of the connection-expiry sweep: enough buckets of each table that
    /// a pass over it takes a quarter of the idle timeout or the embryonic timeout, whichever is
    /// shorter (at most [`SWEEP_PASS_MAX_MS`]).
    fn expire(&mut self, now_ns: u64, ms: usize) {
        let pass_ms = (self.idle_ms / 4)
            .min(self.guard.syn_ms)
            .clamp(1, SWEEP_PASS_MAX_MS) as usize;
        let buckets =
            (self.tables.conn4.buckets().max(self.tables.conn6.buckets()) * ms).div_ceil(pass_ms);
        self.expire_buckets(now_ns, buckets);
    }

    /// Visit `buckets` buckets of each connection table, removing idle entries (embryonic ones
    /// after the shorter embryonic timeout); the flow export hears of each.
    pub(super) fn expire_buckets(&mut self, now_ns: u64, buckets: usize) {
        let now_ms = (now_ns / 1_000_000) as u32;
        let (idle, syn) = (self.idle_ms, self.guard.syn_ms);
        // (established, embryonic) entries removed.
        let mut n = (0u64, 0u64);
        let mut export = self.export.as_mut().filter(|t| t.connections());
        let snap = self.snap.get();
        let mut keep = |k: &[u8], v: u64| {
            let embryonic = is_embryonic(v);
            let live = now_ms.wrapping_sub(entry_seen(v)) < if embryonic { syn } else { idle };
            if !live {
                if embryonic {
                    n.1 += 1;
                } else {
                    n.0 += 1;
                }
                if let (Some(t), Some(k)) = (export.as_deref_mut(), fp_wire::FlowKey::from_bytes(k))
                {
                    ended(t, snap, k, v, now_ns, IDLE_TIMEOUT);
                }
            }
            live
        };
        let t = &mut self.tables;
        let seed = t.cache_seed;
        let (c4, c6) = (&mut t.cache4, &mut t.cache6);
        // An expired entry leaves the cache with the table.
        self.sweep4 = t.conn4.retain_range(self.sweep4, buckets, |k, v| {
            let live = keep(k, *v);
            if let (false, Some(c)) = (live, c4.as_mut()) {
                c.remove(cache_hash(seed, k), k);
            }
            live
        });
        self.sweep6 = t.conn6.retain_range(self.sweep6, buckets, |k, v| {
            let live = keep(k, *v);
            if let (false, Some(c)) = (live, c6.as_mut()) {
                c.remove(cache_hash(seed, k), k);
            }
            live
        });
        self.stats.count(Outcome::ConnExpired, n.0);
        self.stats.count(Outcome::ConnEmbryonicExpired, n.1);
    }
}

/// Tell the flow export that the entry `v` of connection `flow` left the table at `now_ns` for
/// `reason` (`flowEndReason`); the record carries its last-seen time.
#[inline]
pub(super) fn ended(
    t: &mut Tap,
    snap: &Snapshot,
    flow: fp_wire::FlowKey,
    v: u64,
    now_ns: u64,
    reason: u8,
) {
    let idle_ms = ((now_ns / 1_000_000) as u32).wrapping_sub(entry_seen(v)) as u64;
    let seen_ns = now_ns.saturating_sub(idle_ms * 1_000_000);
    let backend = || snap.backend(entry_backend(v)).map(|b| b.address);
    t.send(Event::Ended(reason), flow, backend, seen_ns);
}
