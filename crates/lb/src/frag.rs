//! The fragment table (Maglev §4.3): all fragments of a datagram reach the same backend.
//!
//! A non-first fragment carries no ports, so it cannot be matched to a connection by itself. The
//! first fragment goes through the normal 5-tuple path and its decision (VIP, backend) is recorded
//! here under the datagram's key (source, destination, protocol, IP identification). Non-first
//! fragments look the key up: with a decision they are forwarded at once; without one (they
//! overtook their first fragment) they are *held* until the first fragment arrives, or dropped,
//! counted, when the entry expires. Steering sends every fragment of a datagram to one worker by
//! the 3-tuple, so one worker's table sees them all.
//!
//! Fixed size: `capacity` entries in 4-way sets, at most [`HOLD`] held fragments per datagram. When a
//! set has no free or expired way, the new datagram is refused (counted as table full) rather than
//! evicting one in progress. An entry is freed as soon as its datagram is complete (the last
//! fragment has been seen and the fragments seen cover every byte up to it), so the table holds only
//! datagrams in progress; the timeout reclaims datagrams that never complete.

use fp_pipeline::packet::Packet;
use fp_wire::FragmentKey;

/// Fragments held per datagram before further ones are dropped.
pub const HOLD: usize = 8;
const WAYS: usize = 4;

/// The forwarding decision of a datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    /// VIP id.
    pub vip: u32,
    /// Backend id.
    pub backend: u32,
}

struct Entry {
    key: Option<FragmentKey>,
    decision: Option<Decision>,
    expires_ns: u64,
    held: Vec<Packet>,
    /// Data bytes of the fragments seen so far.
    seen: u32,
    /// Datagram length, once its last fragment (more-fragments clear) was seen.
    total: Option<u32>,
}

impl Entry {
    fn clear(&mut self) {
        self.key = None;
        self.decision = None;
        self.seen = 0;
        self.total = None;
    }

    /// Account for a fragment; true when the datagram is complete.
    fn cover(&mut self, piece: Piece) -> bool {
        self.seen = self.seen.saturating_add(piece.len);
        if !piece.more {
            self.total = Some(piece.offset + piece.len);
        }
        self.total.is_some_and(|t| self.seen >= t)
    }
}

/// Where a fragment's data lies in its datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    /// Offset of the data in the datagram.
    pub offset: u32,
    /// Data bytes.
    pub len: u32,
    /// More fragments follow.
    pub more: bool,
}

/// What happened to a non-first fragment.
#[derive(Debug)]
pub enum FragAction {
    /// Forward it with the datagram's decision.
    Forward(Decision, Packet),
    /// Held until the first fragment arrives.
    Held,
    /// No room for a new datagram: the fragment comes back to be dropped.
    TableFull(Packet),
    /// Too many fragments held for this datagram: the fragment comes back to be dropped.
    HoldFull(Packet),
}

/// A fixed-size fragment table.
pub struct FragTable {
    entries: Box<[Entry]>,
    sets: usize,
    seed: u64,
    timeout_ns: u64,
    sweep_at: usize,
}

impl FragTable {
    /// A table of about `capacity` datagrams whose entries live `timeout_ns`.
    pub fn new(capacity: usize, timeout_ns: u64, seed: u64) -> FragTable {
        let sets = capacity.div_ceil(WAYS).max(1);
        let entries = (0..sets * WAYS)
            .map(|_| Entry {
                key: None,
                decision: None,
                expires_ns: 0,
                held: Vec::with_capacity(HOLD),
                seen: 0,
                total: None,
            })
            .collect();
        FragTable {
            entries,
            sets,
            seed,
            timeout_ns,
            sweep_at: 0,
        }
    }

    fn set(&self, key: &FragmentKey) -> std::ops::Range<usize> {
        let s = fp_hash::reduce(key.hash(self.seed), self.sets as u64) as usize;
        s * WAYS..s * WAYS + WAYS
    }

    /// Find the live entry of `key`, or claim a free or expired way for it. Expired entries found on
    /// the way give their held fragments to `expired`.
    fn slot(&mut self, key: &FragmentKey, now: u64, expired: &mut Vec<Packet>) -> Option<usize> {
        let range = self.set(key);
        let mut free = None;
        for i in range {
            let e = &mut self.entries[i];
            let live = e.key.is_some() && e.expires_ns > now;
            if live && e.key.as_ref() == Some(key) {
                return Some(i);
            }
            if !live {
                if e.key.is_some() {
                    expired.append(&mut e.held);
                    e.clear();
                }
                free.get_or_insert(i);
            }
        }
        let i = free?;
        let e = &mut self.entries[i];
        e.clear();
        e.key = Some(*key);
        e.expires_ns = now.saturating_add(self.timeout_ns);
        Some(i)
    }

    /// Record the first fragment's decision; held fragments of the datagram are moved to `release`
    /// (to be forwarded with the decision). Returns false if the table had no room (the datagram's
    /// later fragments will then be held and time out, or find room later).
    pub fn decide(
        &mut self,
        key: &FragmentKey,
        d: Decision,
        piece: Piece,
        now: u64,
        release: &mut Vec<Packet>,
        expired: &mut Vec<Packet>,
    ) -> bool {
        let Some(i) = self.slot(key, now, expired) else {
            return false;
        };
        let e = &mut self.entries[i];
        e.decision = Some(d);
        release.append(&mut e.held);
        if e.cover(piece) {
            e.clear();
        }
        true
    }

    /// Handle a non-first fragment.
    pub fn non_first(
        &mut self,
        key: &FragmentKey,
        p: Packet,
        piece: Piece,
        now: u64,
        expired: &mut Vec<Packet>,
    ) -> FragAction {
        let Some(i) = self.slot(key, now, expired) else {
            return FragAction::TableFull(p);
        };
        let e = &mut self.entries[i];
        match e.decision {
            Some(d) => {
                if e.cover(piece) {
                    e.clear();
                }
                FragAction::Forward(d, p)
            }
            None if e.held.len() < HOLD => {
                e.held.push(p);
                // Held fragments count toward completion; the entry stays until decided.
                e.cover(piece);
                FragAction::Held
            }
            None => FragAction::HoldFull(p),
        }
    }

    /// Expire up to `budget` entries' worth of the table (walking it round-robin), moving held
    /// fragments of expired datagrams to `expired`.
    pub fn sweep(&mut self, now: u64, budget: usize, expired: &mut Vec<Packet>) {
        let n = self.entries.len();
        for _ in 0..budget.min(n) {
            let e = &mut self.entries[self.sweep_at];
            if e.key.is_some() && e.expires_ns <= now {
                expired.append(&mut e.held);
                e.clear();
            }
            self.sweep_at = (self.sweep_at + 1) % n;
        }
    }

    /// Datagrams currently tracked (live or not yet swept).
    pub fn occupied(&self) -> usize {
        self.entries.iter().filter(|e| e.key.is_some()).count()
    }

    /// Fragments currently held.
    pub fn held(&self) -> usize {
        self.entries.iter().map(|e| e.held.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fp_pipeline::packet::Pool;
    use fp_wire::ip::{IpPair, IpProtocol};

    fn key(id: u32) -> FragmentKey {
        FragmentKey {
            tuple: fp_wire::ThreeTuple::new(
                IpPair::V4("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap()),
                IpProtocol::UDP,
            ),
            ident: id,
        }
    }

    fn mid(i: u32) -> Piece {
        Piece {
            offset: 100 * i,
            len: 100,
            more: true,
        }
    }

    fn held(a: FragAction) -> bool {
        matches!(a, FragAction::Held)
    }

    #[test]
    fn hold_then_release_then_forward_then_free() {
        let mut pool = Pool::new(64);
        let mut t = FragTable::new(16, 1000, 7);
        let mut exp = Vec::new();
        let d = Decision { vip: 1, backend: 2 };
        for i in 1..4 {
            assert!(held(t.non_first(
                &key(5),
                pool.get().unwrap(),
                mid(i),
                10,
                &mut exp
            )));
        }
        let mut rel = Vec::new();
        assert!(t.decide(&key(5), d, mid(0), 20, &mut rel, &mut exp));
        assert_eq!(rel.len(), 3);
        assert_eq!(t.occupied(), 1);
        let last = Piece {
            offset: 400,
            len: 50,
            more: false,
        };
        match t.non_first(&key(5), pool.get().unwrap(), last, 30, &mut exp) {
            FragAction::Forward(x, _) => assert_eq!(x, d),
            other => panic!("{other:?}"),
        }
        // Complete (0..450 covered): the entry is freed at once.
        assert_eq!(t.occupied(), 0);
        assert!(exp.is_empty());
    }

    #[test]
    fn expiry_drops_held_fragments() {
        let mut pool = Pool::new(64);
        let mut t = FragTable::new(16, 1000, 7);
        let mut exp = Vec::new();
        assert!(held(t.non_first(
            &key(1),
            pool.get().unwrap(),
            mid(1),
            0,
            &mut exp
        )));
        t.sweep(999, 1000, &mut exp);
        assert!(exp.is_empty());
        t.sweep(1000, 1000, &mut exp);
        assert_eq!(exp.len(), 1);
        assert_eq!(t.occupied(), 0);
    }

    #[test]
    fn bounded_hold_and_table() {
        let mut pool = Pool::new(256);
        let mut t = FragTable::new(4, 1000, 7); // one set of 4 ways
        let mut exp = Vec::new();
        for i in 0..HOLD as u32 {
            assert!(held(t.non_first(
                &key(1),
                pool.get().unwrap(),
                mid(i + 1),
                0,
                &mut exp
            )));
        }
        let a = t.non_first(&key(1), pool.get().unwrap(), mid(20), 0, &mut exp);
        assert!(matches!(a, FragAction::HoldFull(_)));
        for id in 2..5 {
            assert!(held(t.non_first(
                &key(id),
                pool.get().unwrap(),
                mid(1),
                0,
                &mut exp
            )));
        }
        let a = t.non_first(&key(9), pool.get().unwrap(), mid(1), 0, &mut exp);
        assert!(matches!(a, FragAction::TableFull(_)));
        // After expiry the way is reused and the held fragments come back.
        assert!(held(t.non_first(
            &key(9),
            pool.get().unwrap(),
            mid(1),
            5000,
            &mut exp
        )));
        assert!(!exp.is_empty());
    }
}
