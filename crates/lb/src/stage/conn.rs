//! Connection entries: the value a connection table maps a 5-tuple to (backend id in bits 0-23,
//! the earlier set of a flow picked up mid-way in bits 24-29, the embryonic mark in bit 31,
//! last-seen time in ms in bits 32-63), and the writes of step 3, which keep the flow cache in step
//! with the table (an entry written is cached, one removed or evicted is forgotten).

use super::PRESSURE_SEARCH_NODES;
use fp_cuckoo::{InsertError, Layout, Placed, Writer};
use fp_flowcache::KeyedCache;

/// Marks an entry made by a SYN and not yet confirmed by a later packet of its flow (backend ids
/// stay below 2^24, see the configuration's `max_backends`).
pub(super) const EMBRYONIC: u64 = 1 << 31;

/// Where an entry keeps the id of the earlier backend set that named another backend for its
/// flow, when a packet that did not open the connection made it (no SYN seen: the flow was
/// picked up mid-way, after a restart or from another balancer): the flow's packets name that
/// set's backend in the tunnel header (second chance) for as long as the set is kept. 0: none.
pub(super) const SET_SHIFT: u32 = 24;
/// The set id's bits, in place.
pub(super) const SET_BITS: u64 = 0x3F << SET_SHIFT;
/// The backend id's bits.
const BACKEND: u64 = (1 << 24) - 1;

/// The earlier set id an entry keeps (0: none).
#[inline]
pub(super) fn entry_set(v: u64) -> u8 {
    ((v & SET_BITS) >> SET_SHIFT) as u8
}

#[inline]
pub(super) fn entry(backend: u32, now_ms: u32) -> u64 {
    backend as u64 | (now_ms as u64) << 32
}
#[inline]
pub(super) fn entry_backend(v: u64) -> u32 {
    (v & BACKEND) as u32
}
#[inline]
pub(super) fn is_embryonic(v: u64) -> bool {
    v & EMBRYONIC != 0
}
#[inline]
pub(super) fn entry_seen(v: u64) -> u32 {
    (v >> 32) as u32
}

/// The flow cache's hash of a connection key.
#[inline(always)]
pub(super) fn cache_hash(seed: u64, key: &[u8]) -> u64 {
    fp_hash::hash_bytes(seed, key)
}

/// Rewrite an entry's value in the table and the cache.
#[inline(always)]
pub(super) fn update_cached<L, const N: usize>(
    table: &mut Writer<L>,
    cache: &mut Option<KeyedCache<[u8; N], u64>>,
    key: [u8; N],
    hash: u64,
    e: u64,
) -> Result<Option<u64>, InsertError>
where
    L: Layout<Key = [u8; N], Value = u64>,
{
    let r = table.update(key, e);
    if let Some(c) = cache {
        match r {
            Ok(Some(_)) => c.put(hash, key, e),
            _ => drop(c.remove(hash, &key)),
        }
    }
    r
}

/// [`record`] an entry in the table and keep the cache in step: the entry written is cached, an
/// embryonic entry evicted for it is forgotten (and returned, with its flow).
#[inline(always)]
pub(super) fn record_cached<L, const N: usize>(
    table: &mut Writer<L>,
    cache: &mut Option<KeyedCache<[u8; N], u64>>,
    seed: u64,
    key: [u8; N],
    hash: u64,
    e: u64,
    under_pressure: bool,
) -> Result<Placed<Option<fp_wire::FlowKey>, u64>, InsertError>
where
    L: Layout<Key = [u8; N], Value = u64>,
{
    let r = record(table, key, e, under_pressure);
    if let Some(c) = cache {
        match &r {
            Ok(Placed::Evicted(k, _)) => {
                c.remove(cache_hash(seed, k), k);
                c.put(hash, key, e);
            }
            Ok(_) => c.put(hash, key, e),
            Err(_) => drop(c.remove(hash, &key)),
        }
    }
    r.map(|p| match p {
        Placed::New => Placed::New,
        Placed::Updated(old) => Placed::Updated(old),
        Placed::Evicted(k, old) => Placed::Evicted(fp_wire::FlowKey::from_bytes(&k), old),
    })
}

/// Record a connection entry: a plain insert, or under pressure a bounded one that may replace an
/// embryonic entry.
#[inline(always)]
fn record<L: Layout<Value = u64>>(
    t: &mut Writer<L>,
    key: L::Key,
    e: u64,
    under_pressure: bool,
) -> Result<Placed<L::Key, u64>, InsertError> {
    if under_pressure {
        t.insert_bounded(key, e, PRESSURE_SEARCH_NODES, |_, v| is_embryonic(*v))
    } else {
        t.insert(key, e)
            .map(|old| old.map_or(Placed::New, Placed::Updated))
    }
}
