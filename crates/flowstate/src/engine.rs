//! The pass model: how one worker drives a [`Table`] over batches of packets.
//!
//! A worker calls [`Engine::run_pass`] once per received batch. The pass processes, in order:
//!
//! 1. the SWAP packets spawned in the previous pass (so an entry in transit lands before the packets
//!    that wait for it look again),
//! 2. the data packets recirculated in the previous pass, in the order they were recirculated,
//! 3. the new batch, in arrival order.
//!
//! Recirculated packets are thus processed before any new packet can overtake them, and every
//! recirculated packet or swap is processed in exactly the next pass (the table's "next pass or
//! never" discipline, see [`table`](crate::table)). Packets leave in the order the pass decides:
//! [`Departure`]s are appended to the caller's vector in that order, and the caller transmits in that
//! order. A packet that recirculates stays inside the engine (its [`FlowFn::Meta`] is a handle to the
//! buffer, which the caller keeps) until its departure appears.
//!
//! The recirculation queue is bounded (`recirc_capacity` data packets, like the bandwidth of a
//! switch's recirculation port): a packet that would overflow it is dropped and reported. Swaps are
//! never dropped by the engine: there is at most one per packet processed in the previous pass.
//!
//! [`Schedule::Interleaved`] replaces step 1-3's order by time order, with recirculated packets
//! coming back `recirc_ns` after they left, as on a switch whose recirculation port has a latency
//! and new packets keep arriving meanwhile. It exists to reproduce the paper's switch behaviour (Fig. 9:
//! without the ordering arrays, packets get reordered); a software worker uses the default.
use crate::config::{Config, ConfigError};
use crate::key::FlowKey;
use crate::table::{
    DataPacket, DropReason, Effects, Entry, FlowFn, Stats, SwapPacket, Table, Verdict,
};
use core::mem;

/// How many items ahead of the one being processed the engine prefetches.
const PREFETCH_AHEAD: usize = 8;

/// In which order a pass processes recirculated and new packets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Schedule {
    /// Swaps, then recirculated packets, then the new batch (a software worker).
    RecirculatedFirst,
    /// By time: a packet recirculated at `t` comes back at `t + recirc_ns`, between the new packets
    /// that arrive around then (a switch with a recirculation port). Arrivals must be in time order,
    /// and a pass should cover about `recirc_ns` of arrivals.
    Interleaved {
        /// Recirculation latency in ns (the paper measures about 1.5 us per recirculation, Fig. 10b).
        recirc_ns: u64,
    },
}

/// Engine settings (the table has its own [`Config`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EngineConfig {
    /// Most data packets held for the next pass.
    pub recirc_capacity: usize,
    /// Processing order within a pass.
    pub schedule: Schedule,
    /// Keep evicted entries for [`Engine::drain_evictions`] (audits; off on the data path).
    pub log_evictions: bool,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            recirc_capacity: 4096,
            schedule: Schedule::RecirculatedFirst,
            log_evictions: false,
        }
    }
}

/// How a packet left.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate<O> {
    /// Sent, with the network function's output.
    Exit(O),
    /// Dropped, with the reason.
    Drop(DropReason),
}

/// A packet leaving the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Departure<M, O> {
    /// The caller's metadata given at arrival.
    pub meta: M,
    /// Sent or dropped.
    pub fate: Fate<O>,
    /// Passes it took (1: left in the pass it arrived in).
    pub passes: u16,
    /// Time of the pass it left in.
    pub now: u64,
}

/// Where departures go: a `Vec<Departure>` collects them; a network function's wrapper can turn them
/// into its own decisions on the fly (as [`FlowletLb`](crate::FlowletLb) does).
pub trait Departures<M, O> {
    /// A packet leaves (in transmit order).
    fn depart(&mut self, d: Departure<M, O>);
}

impl<M, O> Departures<M, O> for Vec<Departure<M, O>> {
    #[inline(always)]
    fn depart(&mut self, d: Departure<M, O>) {
        self.push(d);
    }
}

/// One worker's Switcharoo table, its network function and its recirculation queue.
pub struct Engine<K, F: FlowFn<K>> {
    table: Table<K, F::Value>,
    nf: F,
    cfg: EngineConfig,
    swaps: Vec<SwapPacket<K, F::Value>>,
    data: Vec<DataPacket<K, F::Meta, F::Out>>,
    spare_swaps: Vec<SwapPacket<K, F::Value>>,
    spare_data: Vec<DataPacket<K, F::Meta, F::Out>>,
    fresh: Vec<DataPacket<K, F::Meta, F::Out>>,
    evicted: Vec<Entry<K, F::Value>>,
    last_now: u64,
}

impl<K: FlowKey + Default, F: FlowFn<K>> Engine<K, F> {
    /// An engine with an empty table.
    pub fn new(table: &Config, cfg: EngineConfig, nf: F) -> Result<Self, ConfigError> {
        let cap = cfg.recirc_capacity;
        Ok(Engine {
            table: Table::new(table)?,
            nf,
            cfg,
            swaps: Vec::with_capacity(cap),
            data: Vec::with_capacity(cap),
            spare_swaps: Vec::with_capacity(cap),
            spare_data: Vec::with_capacity(cap),
            fresh: Vec::with_capacity(64),
            evicted: Vec::new(),
            last_now: 0,
        })
    }

    /// The table.
    pub fn table(&self) -> &Table<K, F::Value> {
        &self.table
    }

    /// Table counters.
    pub fn stats(&self) -> &Stats {
        self.table.stats()
    }

    /// The network function.
    pub fn nf(&self) -> &F {
        &self.nf
    }

    /// The network function, mutably (for reconfiguration between passes).
    pub fn nf_mut(&mut self) -> &mut F {
        &mut self.nf
    }

    /// Data packets waiting for the next pass.
    pub fn in_flight(&self) -> usize {
        self.data.len()
    }

    /// SWAP packets waiting for the next pass.
    pub fn swaps_in_flight(&self) -> usize {
        self.swaps.len()
    }

    /// Nothing waits for another pass.
    pub fn is_idle(&self) -> bool {
        self.data.is_empty() && self.swaps.is_empty()
    }

    /// Evicted entries logged since the last call (only with `log_evictions`).
    pub fn drain_evictions(&mut self) -> impl Iterator<Item = Entry<K, F::Value>> + '_ {
        self.evicted.drain(..)
    }

    /// A bound on the passes any packet or swap can take: [`flush`](Self::flush) never needs more.
    pub fn pass_bound(&self) -> u32 {
        let c = self.table.config();
        (c.max_passes as u32).max(c.max_swap_passes as u32 + 1)
    }

    #[inline(always)]
    fn clock(&mut self, t: u64) -> u64 {
        // Time given to the table never goes backwards.
        self.last_now = self.last_now.max(t);
        self.last_now
    }

    /// One pass at time `now` (ns): previous pass's swaps and recirculated packets, then `arrivals`
    /// (key, metadata, arrival time). Departures are appended to `out` in departure order.
    pub fn run_pass<I, D>(&mut self, arrivals: I, now: u64, out: &mut D)
    where
        I: IntoIterator<Item = (K, F::Meta, u64)>,
        D: Departures<F::Meta, F::Out>,
    {
        self.table.begin_pass();
        let mut fresh = mem::take(&mut self.fresh);
        for (k, m, at) in arrivals {
            fresh.push(self.table.admit(k, m, at));
        }
        let spare_s = mem::take(&mut self.spare_swaps);
        let mut swaps = mem::replace(&mut self.swaps, spare_s);
        let spare_d = mem::take(&mut self.spare_data);
        let mut data = mem::replace(&mut self.data, spare_d);

        // Batched, prefetched lookups (DESIGN "Performance rules"): every packet was hashed at
        // admission; each item's cache lines are prefetched PREFETCH_AHEAD items before it is
        // processed (prefetching a whole pass at once overflows the CPU's miss buffers).
        let (ns, nd, nf) = (swaps.len(), data.len(), fresh.len());
        let total = ns + nd + nf;
        for k in 0..PREFETCH_AHEAD.min(total) {
            prefetch_item(&self.table, &swaps, &data, &fresh, k);
        }

        let (mut i, mut j, mut l) = (0usize, 0usize, 0usize);
        match self.cfg.schedule {
            Schedule::RecirculatedFirst => {
                for k in 0..total {
                    prefetch_item(&self.table, &swaps, &data, &fresh, k + PREFETCH_AHEAD);
                    let t = self.clock(now);
                    if k < ns {
                        let mut s = swaps[k];
                        self.swap(&mut s, t);
                    } else if k < ns + nd {
                        self.data_pass(&mut data[k - ns], t, out);
                    } else {
                        self.data_pass(&mut fresh[k - ns - nd], t, out);
                    }
                }
            }
            Schedule::Interleaved { .. } => loop {
                let ts = swaps.get(i).map_or(u64::MAX, |s| s.at);
                let td = data.get(j).map_or(u64::MAX, |p| p.at);
                let tf = fresh.get(l).map_or(u64::MAX, |p| p.at);
                if i < swaps.len() && ts <= td && ts <= tf {
                    let t = self.clock(ts);
                    self.swap(&mut swaps[i], t);
                    i += 1;
                } else if j < data.len() && td <= tf {
                    let t = self.clock(td);
                    self.data_pass(&mut data[j], t, out);
                    j += 1;
                } else if l < fresh.len() {
                    let t = self.clock(tf);
                    self.data_pass(&mut fresh[l], t, out);
                    l += 1;
                } else {
                    break;
                }
            },
        }
        swaps.clear();
        data.clear();
        fresh.clear();
        self.spare_swaps = swaps;
        self.spare_data = data;
        self.fresh = fresh;
    }

    /// Run passes without new packets until nothing is in flight (at most [`pass_bound`](Self::pass_bound)
    /// passes). Returns the number of passes run.
    pub fn flush<D: Departures<F::Meta, F::Out>>(&mut self, now: u64, out: &mut D) -> u32 {
        let mut n = 0;
        while !self.is_idle() {
            self.run_pass(core::iter::empty(), now, out);
            n += 1;
            debug_assert!(n <= self.pass_bound() + 1, "termination bound exceeded");
        }
        n
    }

    #[inline(always)]
    fn recirc_at(&self, now: u64) -> u64 {
        match self.cfg.schedule {
            Schedule::RecirculatedFirst => now,
            Schedule::Interleaved { recirc_ns } => now + recirc_ns,
        }
    }

    #[inline(always)]
    fn swap(&mut self, s: &mut SwapPacket<K, F::Value>, now: u64) {
        let at = self.recirc_at(now);
        let mut fx = Fx {
            swaps: &mut self.swaps,
            evicted: &mut self.evicted,
            log: self.cfg.log_evictions,
            at,
        };
        self.table.step_swap_into(s, now, &mut fx);
    }

    #[inline(always)]
    fn data_pass<D: Departures<F::Meta, F::Out>>(
        &mut self,
        p: &mut DataPacket<K, F::Meta, F::Out>,
        now: u64,
        out: &mut D,
    ) {
        let at = self.recirc_at(now);
        let mut fx = Fx {
            swaps: &mut self.swaps,
            evicted: &mut self.evicted,
            log: self.cfg.log_evictions,
            at,
        };
        let result = self.table.step_data_into(p, &mut self.nf, now, &mut fx);
        let fate = match result {
            Verdict::Recirculate => {
                if self.data.len() < self.cfg.recirc_capacity {
                    p.at = at;
                    self.data.push(*p);
                    return;
                }
                let s = self.table.stats_mut();
                s.recirculations -= 1;
                s.count_drop(DropReason::RecircOverflow);
                Fate::Drop(DropReason::RecircOverflow)
            }
            Verdict::Exit(o) => Fate::Exit(o),
            Verdict::Drop(r) => Fate::Drop(r),
        };
        out.depart(Departure {
            meta: p.meta,
            fate,
            passes: p.passes(),
            now,
        });
    }
}

/// Prefetch the cache lines of item `k` of a pass (swaps, then recirculated, then new packets).
#[inline(always)]
fn prefetch_item<K: FlowKey + Default, V: Copy + Default, M, O>(
    t: &Table<K, V>,
    swaps: &[SwapPacket<K, V>],
    data: &[DataPacket<K, M, O>],
    fresh: &[DataPacket<K, M, O>],
    k: usize,
) {
    let (ns, nd) = (swaps.len(), data.len());
    if k < ns {
        t.prefetch_swap(&swaps[k]);
    } else if k < ns + nd {
        t.prefetch(&data[k - ns]);
    } else if let Some(p) = fresh.get(k - ns - nd) {
        t.prefetch(p);
    }
}

/// The engine's [`Effects`]: spawned swaps go straight to the next pass's queue.
struct Fx<'a, K, V> {
    swaps: &'a mut Vec<SwapPacket<K, V>>,
    evicted: &'a mut Vec<Entry<K, V>>,
    log: bool,
    at: u64,
}

impl<K, V> Effects<K, V> for Fx<'_, K, V> {
    #[inline(always)]
    fn spawned(&mut self, mut s: SwapPacket<K, V>) {
        s.at = self.at;
        self.swaps.push(s);
    }
    #[inline(always)]
    fn evicted(&mut self, e: Entry<K, V>) {
        if self.log {
            self.evicted.push(e);
        }
    }
}
