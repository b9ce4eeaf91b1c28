//! Step 3, for each packet that waited for its connection lookup: reuse the backend of a live
//! entry (confirming an embryonic one, refreshing the last-seen time) or select one with Maglev
//! and record it, within the SYN-flood guard's limits; trace; emit; and release the fragments
//! that waited for a first fragment's decision.

use super::classify::l3_of;
use super::conn::{entry, entry_backend, entry_seen, is_embryonic, record_cached, update_cached};
use super::conn::{entry_set, EMBRYONIC, SET_BITS, SET_SHIFT};
use super::emit::Emitter;
use super::guard::Guard;
use super::sweep::ended;
use super::{Pending, Scratch, Tables, TraceRecord, Tracer};
use crate::export::{Event, Why, END_OF_FLOW, LACK_OF_RESOURCES};
use crate::frag::Decision;
use crate::stats::Outcome;
use fp_cuckoo::Placed;
use fp_pipeline::packet::Packet;
use fp_wire::second_chance::MAX_NAMED;
use fp_wire::{FlowKey, FragmentKey, PacketSummary};
use std::net::IpAddr;

/// A connection's last-seen time is rewritten at most this often (ms).
const TOUCH_MS: u32 = 1000;

/// What step 3 needs besides the tables: the burst's time, the tracer, the SYN-flood guard.
pub(super) struct Decide<'a> {
    pub(super) worker: usize,
    pub(super) now_ns: u64,
    pub(super) now_ms: u32,
    pub(super) tracer: Option<&'a mut (dyn Tracer + 'static)>,
    pub(super) guard: &'a mut Guard,
}

/// The backends a second-chance option names, the one to try first first.
#[derive(Clone, Copy, Debug)]
pub(super) struct Chain {
    addrs: [IpAddr; MAX_NAMED],
    n: u8,
}

impl Chain {
    /// The names, in order.
    #[inline]
    pub(super) fn addrs(&self) -> &[IpAddr] {
        &self.addrs[..self.n as usize]
    }
}

/// What the earlier sets `sets` (oldest first) chose for flow hash `h`, newest first, without
/// `backend`, without repeats and without backends of the other address family than `backend`
/// (the tunnel's outer header can name only its own; at most [`MAX_NAMED`]); `None` when none is
/// left.
#[inline]
fn chain(
    sets: &[crate::snapshot::Earlier],
    h: u64,
    backend: u32,
    snap: &crate::snapshot::Snapshot,
) -> Option<Chain> {
    let current = snap.backend(backend).map(|b| b.address);
    let mut c = Chain {
        addrs: [IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED); MAX_NAMED],
        n: 0,
    };
    for e in sets.iter().rev() {
        let Some(a) = e.choice(h) else { continue };
        let other_family = current.is_some_and(|b| b.is_ipv6() != a.is_ipv6());
        if Some(a) == current || other_family || c.addrs().contains(&a) {
            continue;
        }
        c.addrs[c.n as usize] = a;
        c.n += 1;
        if c.n as usize == MAX_NAMED {
            break;
        }
    }
    (c.n > 0).then_some(c)
}

/// Step 3 for the `i`-th pending packet: reuse the connection's backend or select one with
/// Maglev, record it, trace, encapsulate, emit (and release fragments that waited for it).
#[inline(always)]
pub(super) fn decide(
    d: &mut Decide<'_>,
    i: usize,
    pkt: Packet,
    pending: &Pending,
    out: &mut Emitter<'_>,
    tables: &mut Tables,
    scratch: &mut Scratch,
) {
    let Pending {
        key,
        vip,
        slot,
        l3,
        frag,
    } = *pending;
    let snap = out.snap;
    let stats = out.stats;
    let slot = slot as usize;
    let vs = &snap.vips[vip as usize];
    let found = match key {
        FlowKey::V4(_) => scratch.vals4[slot],
        FlowKey::V6(_) => scratch.vals6[slot],
    };
    // A SYN without ACK: opens a connection (and was hashed in step 1).
    let syn = scratch.syns >> i & 1 != 0;
    // A SYN that finds a confirmed entry opens a new connection on reused ports: one whose entry
    // names a draining backend is balanced anew (the entry is overwritten).
    let (backend, outcome, maglev_slot, second, why) = match found {
        Some(v)
            if vs.serves(entry_backend(v))
                && !(syn && !is_embryonic(v) && vs.drains(entry_backend(v))) =>
        {
            stats.count(Outcome::ConnHit, 1);
            if syn && !is_embryonic(v) {
                stats.count(Outcome::SynReused, 1);
                // A new connection on the ports of an ended one, which keeps its backend: for the
                // flow export, the one ended and another began.
                if let Some(t) = out.export.as_deref_mut().filter(|t| t.connections()) {
                    let a = || snap.backend(entry_backend(v)).map(|b| b.address);
                    ended(t, snap, key, v, d.now_ns, END_OF_FLOW);
                    t.send(Event::Created(Why::New), key, a, d.now_ns);
                }
            }
            // A later packet of the flow confirms an embryonic entry; the last-seen time is
            // rewritten at most every TOUCH_MS.
            let confirm = is_embryonic(v) && !syn;
            if confirm || d.now_ms.wrapping_sub(entry_seen(v)) >= TOUCH_MS {
                let e = entry(entry_backend(v), d.now_ms)
                    | if confirm { 0 } else { v & EMBRYONIC }
                    | v & SET_BITS;
                let old = match key {
                    FlowKey::V4(_) => update_cached(
                        &mut tables.conn4,
                        &mut tables.cache4,
                        scratch.keys4[slot],
                        scratch.hash4[slot],
                        e,
                    ),
                    FlowKey::V6(_) => update_cached(
                        &mut tables.conn6,
                        &mut tables.cache6,
                        scratch.keys6[slot],
                        scratch.hash6[slot],
                        e,
                    ),
                };
                // Counted once per entry: a burst may hold the ACK and the first request of a
                // connection, both looked up before either was decided.
                if confirm && matches!(old, Ok(Some(o)) if is_embryonic(o)) {
                    stats.count(Outcome::ConnConfirmed, 1);
                }
            }
            let b = entry_backend(v);
            // A flow picked up mid-way names the backends of the earlier sets it was picked up
            // under (those up to the one its entry keeps), whatever changed since.
            let second = match entry_set(v) {
                0 => None,
                id => vs
                    .earlier
                    .iter()
                    .position(|e| e.id == id)
                    .and_then(|k| chain(&vs.earlier[..=k], key.hash(out.seed), b, snap)),
            };
            (b, "hit", None, second, Why::Hit)
        }
        other => {
            let (outcome, label) = if other.is_some() {
                (Outcome::ConnReselect, "reselect")
            } else {
                (Outcome::ConnMiss, "miss")
            };
            stats.count(outcome, 1);
            let h = if syn {
                scratch.hashes[i]
            } else {
                key.hash(out.seed)
            };
            let Some((b, mslot)) = vs.select(h) else {
                out.drop(pkt, Outcome::NoBackend);
                return;
            };
            // A packet that does not open its connection, of a flow this balancer has no entry
            // for: if the VIP's earlier backend sets chose other backends, the flow most likely
            // lives on one of them; the packet names them (second chance), and the entry keeps
            // the newest set's id.
            let second = match vs.newest_earlier() {
                Some(e) if !syn && other.is_none() => {
                    chain(&vs.earlier, h, b, snap).map(|c| (e.id, c))
                }
                _ => None,
            };
            let under_pressure = match key {
                FlowKey::V4(_) => tables.conn4.len() >= d.guard.pressure.0,
                FlowKey::V6(_) => tables.conn6.len() >= d.guard.pressure.1,
            };
            // A SYN that opens a new connection under pressure or above the rate limit is
            // balanced without an entry: its handshake's ACK records the connection.
            let bypass = if !syn || other.is_some() {
                None
            } else if under_pressure {
                Some(Outcome::SynBypassPressure)
            } else if d.guard.over_rate(d.now_ms) {
                Some(Outcome::SynBypassRate)
            } else {
                None
            };
            // Why this backend, for the flow export.
            // (A SYN opens a new connection, also over an entry it replaces.)
            let mut why = match (&second, other) {
                (Some(_), _) => Why::SecondChance,
                (None, Some(_)) if !syn => Why::Reselected,
                (None, _) => Why::New,
            };
            if let Some(b) = bypass {
                stats.count(b, 1);
                why = Why::NoEntry;
            } else {
                let e = entry(b, d.now_ms)
                    | if syn { EMBRYONIC } else { 0 }
                    | second.map_or(0, |(id, _)| (id as u64) << SET_SHIFT);
                let seed = tables.cache_seed;
                let r = match key {
                    FlowKey::V4(_) => record_cached(
                        &mut tables.conn4,
                        &mut tables.cache4,
                        seed,
                        scratch.keys4[slot],
                        scratch.hash4[slot],
                        e,
                        under_pressure,
                    ),
                    FlowKey::V6(_) => record_cached(
                        &mut tables.conn6,
                        &mut tables.cache6,
                        seed,
                        scratch.keys6[slot],
                        scratch.hash6[slot],
                        e,
                        under_pressure,
                    ),
                };
                // A new assignment: a new entry, or an entry whose backend changed. An entry that
                // already holds this choice was written by an earlier packet of the same burst
                // (looked up before it was decided) and is not counted again.
                let (assigned, evicted, new) = match r {
                    Ok(Placed::New) => (true, false, true),
                    Ok(Placed::Evicted(k, v)) => {
                        if let (Some(t), Some(k)) =
                            (out.export.as_deref_mut().filter(|t| t.connections()), k)
                        {
                            ended(t, snap, k, v, d.now_ns, LACK_OF_RESOURCES);
                        }
                        (true, true, true)
                    }
                    Ok(Placed::Updated(old)) => (entry_backend(old) != b, false, false),
                    Err(_) => {
                        stats.count(Outcome::ConnFull, 1);
                        why = Why::NoEntry;
                        (false, false, false)
                    }
                };
                if evicted {
                    stats.count(Outcome::ConnEvicted, 1);
                }
                d.guard.recorded += new as u32;
                if assigned && second.is_some() {
                    stats.count(Outcome::SecondChancePicked, 1);
                }
                if let Some(t) = out
                    .export
                    .as_deref_mut()
                    .filter(|t| assigned && t.connections())
                {
                    // A SYN that replaced a confirmed entry (its backend draining or gone): the
                    // connection on those ports before it ended.
                    if let Some(old) = other.filter(|&o| syn && !is_embryonic(o)) {
                        ended(t, snap, key, old, d.now_ns, END_OF_FLOW);
                    }
                    let a = || snap.backend(b).map(|b| b.address);
                    t.send(Event::Created(why), key, a, d.now_ns);
                }
                if assigned {
                    stats.count(Outcome::ConnInsert, 1);
                    if let Some(c) = stats.vip(vip as usize) {
                        c.connections.inc();
                    }
                    if let Some(c) = stats.backend(b as usize) {
                        c.connections.inc();
                    }
                }
            }
            (b, label, Some(mslot), second.map(|(_, a)| a), why)
        }
    };
    out.sample(l3, &key, backend, why);
    if let Some(t) = d.tracer.as_deref_mut() {
        if t.wants(pkt.data(), &key, d.now_ns) {
            stats.count(Outcome::Traced, 1);
            t.record(TraceRecord {
                worker: d.worker,
                generation: snap.generation,
                flow: key,
                vip: vs.name.clone(),
                conn: if frag.is_some() { "fragment" } else { outcome },
                maglev_slot,
                backend: snap.backend(backend).map(|b| b.address),
                encap: vs.encap.to_string(),
            });
        }
    }
    let Some((ident_no, pc)) = frag else {
        out.send(pkt, l3, vip, backend, &key, second);
        return;
    };
    let fk = FragmentKey {
        tuple: key.three_tuple(),
        ident: ident_no,
    };
    scratch.release.clear();
    tables.frags.decide(
        &fk,
        Decision { vip, backend },
        pc,
        d.now_ns,
        &mut scratch.release,
        &mut scratch.expired,
    );
    out.packet(pkt, l3, vip, backend, &key);
    // Fragments that overtook their first fragment follow it now.
    for held in scratch.release.drain(..) {
        match PacketSummary::parse(held.data()) {
            Ok(hs) => {
                stats.count(Outcome::FragForwarded, 1);
                out.packet(held, l3_of(&hs), vip, backend, &key);
            }
            Err(e) => {
                stats.parse_error(e);
                out.pool.put(held);
            }
        }
    }
}
