//! What protects the switch from its own ports: **storm control** (per-port limits on the frames
//! it floods: broadcast, multicast, unknown unicast), **port security** (a limit of learned MACs
//! per port; frames from new sources beyond it are dropped) and **MAC-move damping** (a MAC that
//! moves between ports faster than a threshold is pinned where it is for a while, and reported).
//!
//! Storm control runs in the workers, one token bucket per (port, kind) in each worker, filled
//! at the configured rate divided by the number of workers (a port's frames are spread over the
//! workers), holding at most a tenth of a second's worth: a flood beyond the rate is cut within
//! that, and a frame over the limit is dropped and counted, never queued. Time is the stage's
//! argument. Port security and damping are the FIB writer's (`crate::controller`): it counts
//! the MACs learned per port and tells the workers through [`PortLocks`] which ports are full.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Storm control of one port: most frames per second flooded from it, per kind (0: no limit).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Storm {
    /// Broadcast frames (ff:ff:ff:ff:ff:ff).
    pub broadcast: u32,
    /// Multicast frames (group addresses other than broadcast).
    pub multicast: u32,
    /// Unicast frames to unknown destinations.
    pub unknown_unicast: u32,
}

impl Storm {
    /// Whether any limit is set.
    pub fn any(&self) -> bool {
        self.broadcast | self.multicast | self.unknown_unicast != 0
    }

    /// The limit of a kind ([`Kind`]).
    fn limit(&self, kind: Kind) -> u32 {
        match kind {
            Kind::Broadcast => self.broadcast,
            Kind::Multicast => self.multicast,
            Kind::UnknownUnicast => self.unknown_unicast,
        }
    }
}

/// The kind of a flooded frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// To ff:ff:ff:ff:ff:ff.
    Broadcast,
    /// To another group address.
    Multicast,
    /// To a unicast address the FIB does not know.
    UnknownUnicast,
}

/// One worker's token buckets: per port, per kind.
#[derive(Debug, Default)]
pub struct StormBuckets {
    /// (tokens in millionths of a frame, last refill ns) per port × kind.
    state: Vec<[(u64, u64); 3]>,
    /// Workers sharing each port's rate.
    share: u32,
}

/// Millionths of a frame per token unit.
const MICRO: u64 = 1_000_000;

impl StormBuckets {
    /// Buckets for `ports` ports, the rates shared by `workers` workers.
    pub fn new(ports: usize, workers: usize) -> StormBuckets {
        StormBuckets {
            state: vec![[(0, 0); 3]; ports],
            share: workers.max(1) as u32,
        }
    }

    /// Whether a flooded frame of `kind` from `port` at `now_ns` is within `limits` (then it
    /// takes its token).
    #[inline]
    pub fn admit(&mut self, limits: &Storm, port: u16, kind: Kind, now_ns: u64) -> bool {
        let rate = limits.limit(kind) as u64;
        if rate == 0 {
            return true;
        }
        let Some(b) = self.state.get_mut(port as usize) else {
            return true;
        };
        let (tokens, last) = &mut b[kind as usize];
        // Frames per second per worker, in millionths of a frame per ns = rate / share / 1000.
        let per_worker = rate * MICRO / self.share as u64;
        let cap = (per_worker / 10).max(MICRO);
        if *last == 0 {
            *tokens = cap;
        } else {
            let dt = now_ns.saturating_sub(*last).min(1_000_000_000);
            // In u128: rate x dt overflows u64 for fast ports after a pause.
            let add = (dt as u128 * per_worker as u128 / 1_000_000_000) as u64;
            *tokens = tokens.saturating_add(add).min(cap);
        }
        *last = now_ns.max(1);
        if *tokens >= MICRO {
            *tokens -= MICRO;
            true
        } else {
            false
        }
    }
}

/// Which ports have reached their limit of learned MACs: set by the FIB writer, read by the
/// workers (who then drop frames from sources new to the port).
#[derive(Clone, Debug)]
pub struct PortLocks(Arc<[AtomicBool]>);

impl PortLocks {
    /// `ports` ports, none locked.
    pub fn new(ports: usize) -> PortLocks {
        PortLocks((0..ports).map(|_| AtomicBool::new(false)).collect())
    }

    /// Whether `port` takes no new source MAC.
    #[inline(always)]
    pub fn locked(&self, port: u16) -> bool {
        self.0
            .get(port as usize)
            .is_some_and(|b| b.load(Ordering::Relaxed))
    }

    /// Lock or unlock `port`.
    pub fn set(&self, port: u16, locked: bool) {
        if let Some(b) = self.0.get(port as usize) {
            b.store(locked, Ordering::Relaxed);
        }
    }
}

/// MAC-move damping: a MAC that moves more than `moves` times within `window_ns` is pinned to
/// the port it is on for `hold_ns` (moves ignored and counted meanwhile). `moves` 0: off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Damping {
    /// Moves allowed within the window.
    pub moves: u32,
    /// The window (ns).
    pub window_ns: u64,
    /// How long a flapping MAC stays pinned (ns).
    pub hold_ns: u64,
}

impl Default for Damping {
    /// 5 moves within a second pins a MAC for 30 s: a host that moves (a migrated VM, a cable
    /// replugged) moves once; a MAC seen on two ports many times a second is a loop or a spoof.
    fn default() -> Damping {
        Damping {
            moves: 5,
            window_ns: 1_000_000_000,
            hold_ns: 30_000_000_000,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_hold_a_flood_to_its_rate() {
        let limits = Storm {
            broadcast: 1000,
            multicast: 0,
            unknown_unicast: 200,
        };
        let mut b = StormBuckets::new(2, 1);
        // 10 000 broadcasts over one second (one every 100 µs): about 1000 pass, plus the first
        // tenth of a second's burst.
        let mut passed = 0;
        for i in 0..10_000u64 {
            passed += b.admit(&limits, 0, Kind::Broadcast, 1 + i * 100_000) as u32;
        }
        assert!((1000..=1110).contains(&passed), "{passed} passed");
        // No limit for multicast; the other port's buckets are its own.
        assert!((0..5000).all(|i| b.admit(&limits, 0, Kind::Multicast, 2_000_000_000 + i)));
        assert!(b.admit(&limits, 1, Kind::Broadcast, 2_000_000_000));
        // Two workers share the rate: each passes about half.
        let mut w = StormBuckets::new(1, 2);
        let passed: u32 = (0..10_000u64)
            .map(|i| w.admit(&limits, 0, Kind::UnknownUnicast, 1 + i * 100_000) as u32)
            .sum();
        assert!((100..=112).contains(&passed), "{passed} passed");
        // A fast port after a pause: no overflow, a full bucket.
        let fast = Storm {
            broadcast: 4_000_000_000,
            ..limits
        };
        let mut f = StormBuckets::new(1, 1);
        assert!(f.admit(&fast, 0, Kind::Broadcast, 1));
        assert!(f.admit(&fast, 0, Kind::Broadcast, 1 + 5_000_000_000));
        // Out-of-range ports and kinds without a limit always pass.
        assert!(w.admit(&limits, 7, Kind::Broadcast, 5));
    }

    #[test]
    fn locks_are_per_port() {
        let l = PortLocks::new(3);
        l.set(1, true);
        assert!(!l.locked(0) && l.locked(1) && !l.locked(2) && !l.locked(9));
        l.set(1, false);
        assert!(!l.locked(1));
    }
}
