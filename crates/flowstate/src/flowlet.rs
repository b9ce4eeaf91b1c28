//! The Flowlet load balancer (Sinha, Kandula, Katabi; the paper's driving case, §2 and §5) on the
//! Switcharoo table.
//!
//! Each flow's packets go to one output (a path, a backend) for the length of a *flowlet*: a burst of
//! packets with no gap longer than the flowlet timeout (default 50 us). The table's entries expire
//! `timeout` after the flow's last packet, so a gap longer than the timeout lets the entry expire and
//! the next packet inserts a new state: a new flowlet, whose output is chosen afresh and may differ.
//! The state also records the last packet's arrival time, so a gap is recognised even if the entry is
//! still in the table when the packet is processed (its pass came before the expiry was noticed, or
//! a recirculation delayed it).
//!
//! The load balancer works on parsed packets (5-tuple, arrival time, length, a caller token for the
//! buffer) in batches; see [`FlowletLb::process`]. It is one worker's instance: a pipeline runs one per
//! worker, with packets steered to workers by a hash of the 5-tuple so each flow meets one instance.
//!
//! Output choice for a new flowlet: [`Policy::LeastLoaded`] (the output that this instance has sent
//! the fewest bytes to; a local stand-in for CONGA-style congestion feedback, which the pipeline can
//! replace by calling [`FlowletLb::set_load`]) or [`Policy::Random`] (the paper's Tofino code picks one
//! of four ports at random).

use crate::config::{Config, ConfigError, Expiry, ExpiryFrom};
use crate::engine::{Departure, Departures, Engine, EngineConfig, Fate};
use crate::key::{FiveTuple, FlowKey};
use crate::table::{DropReason, FlowFn, Stats};
use thiserror::Error;

/// How a new flowlet picks its output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// The output with the least load (bytes sent by this instance, or what [`FlowletLb::set_load`] says).
    LeastLoaded,
    /// Uniformly at random (seeded, reproducible).
    Random,
}

/// Flowlet state kept per flow in the table: 8 bytes, so a slot with a 5-tuple key is 32 bytes.
/// The low 48 bits hold the arrival time of the flow's last packet modulo 2^48 ns (78 hours; gaps are
/// computed modulo 2^48, so the clock may wrap), the high 16 bits the flowlet's output.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowletState(u64);

const TIME_MASK: u64 = (1 << 48) - 1;

impl FlowletState {
    /// A state for output `output` whose last packet arrived at `last_ns`.
    pub fn new(last_ns: u64, output: u16) -> Self {
        FlowletState((last_ns & TIME_MASK) | (output as u64) << 48)
    }
    /// The flowlet's output.
    pub fn output(&self) -> u16 {
        (self.0 >> 48) as u16
    }
    /// Arrival time of the last packet, modulo 2^48 ns.
    pub fn last_ns(&self) -> u64 {
        self.0 & TIME_MASK
    }
    /// Time since the last packet for a packet arriving at `ts_ns` (0 if it is older, as can happen
    /// with weak consistency).
    pub fn gap(&self, ts_ns: u64) -> u64 {
        let d = ts_ns.wrapping_sub(self.0) & TIME_MASK;
        if d >= 1 << 47 {
            0
        } else {
            d
        }
    }
}

/// Per-packet data carried through the table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PacketMeta {
    /// Arrival time (ns).
    pub ts_ns: u64,
    /// Bytes.
    pub len: u32,
    /// The caller's handle for the packet buffer.
    pub token: u32,
}

/// What happened to a forwarded packet's flowlet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum FlowletEvent {
    /// The flow had no state (a new flow, or its previous flowlet's state expired): a new flowlet.
    #[default]
    NewFlowlet,
    /// The state was still in the table but the gap since the last packet exceeded the timeout: a
    /// new flowlet.
    GapFlowlet,
    /// Same flowlet as the previous packet.
    SameFlowlet,
}

/// A forwarded packet's output.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowletOut {
    /// The output.
    pub output: u16,
    /// The flowlet event.
    pub event: FlowletEvent,
}

/// Per-outcome counters of one instance.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FlowletCounters {
    /// Packets that started a flowlet because the flow had no state.
    pub new_flowlets: u64,
    /// Packets that started a flowlet after a gap while the state was still present.
    pub gap_flowlets: u64,
    /// Of the gap flowlets, those that moved to another output.
    pub moved: u64,
    /// Packets that continued their flowlet.
    pub same_flowlet: u64,
    /// Packets sent per output.
    pub packets_per_output: Vec<u64>,
    /// Bytes sent per output.
    pub bytes_per_output: Vec<u64>,
    /// Drops by reason (from the table).
    pub drops_pass_limit: u64,
    /// See `drops_pass_limit`.
    pub drops_late: u64,
    /// See `drops_pass_limit`.
    pub drops_overflow: u64,
    /// See `drops_pass_limit`.
    pub drops_ordering_full: u64,
}

/// The flowlet network function (what the table calls at the value stage).
#[derive(Clone, Debug)]
pub struct FlowletFn {
    timeout_ns: u64,
    policy: Policy,
    /// Per output: [load seen by the policy, packets, bytes].
    per_output: Vec<[u64; 3]>,
    rng: u64,
    counters: FlowletCounters,
}

impl FlowletFn {
    fn new(outputs: u16, timeout_ns: u64, policy: Policy, seed: u64) -> Self {
        FlowletFn {
            timeout_ns,
            policy,
            per_output: vec![[0; 3]; outputs as usize],
            rng: seed,
            counters: FlowletCounters::default(),
        }
    }

    #[inline]
    fn choose(&mut self) -> u16 {
        match self.policy {
            Policy::Random => {
                self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
                fp_hash::reduce(fp_hash::splitmix64(self.rng), self.per_output.len() as u64) as u16
            }
            Policy::LeastLoaded => {
                let mut best = 0;
                let mut least = u64::MAX;
                for (i, o) in self.per_output.iter().enumerate() {
                    if o[0] < least {
                        least = o[0];
                        best = i;
                    }
                }
                best as u16
            }
        }
    }

    #[inline]
    fn send(&mut self, output: u16, len: u32) {
        if let Some(o) = self.per_output.get_mut(output as usize) {
            o[0] += len as u64;
            o[1] += 1;
            o[2] += len as u64;
        }
    }
}

impl<K> FlowFn<K> for FlowletFn {
    type Value = FlowletState;
    type Meta = PacketMeta;
    type Out = FlowletOut;

    #[inline]
    fn create(&mut self, _key: &K, meta: &PacketMeta, _now: u64) -> (FlowletState, FlowletOut) {
        let output = self.choose();
        self.send(output, meta.len);
        self.counters.new_flowlets += 1;
        (
            FlowletState::new(meta.ts_ns, output),
            FlowletOut {
                output,
                event: FlowletEvent::NewFlowlet,
            },
        )
    }

    #[inline]
    fn update(
        &mut self,
        _key: &K,
        v: &mut FlowletState,
        meta: &PacketMeta,
        _now: u64,
    ) -> FlowletOut {
        let gap = v.gap(meta.ts_ns);
        let (output, event) = if gap > self.timeout_ns {
            let o = self.choose();
            if o != v.output() {
                self.counters.moved += 1;
            }
            self.counters.gap_flowlets += 1;
            (o, FlowletEvent::GapFlowlet)
        } else {
            self.counters.same_flowlet += 1;
            (v.output(), FlowletEvent::SameFlowlet)
        };
        let last = if gap > 0 { meta.ts_ns } else { v.last_ns() };
        *v = FlowletState::new(last, output);
        self.send(output, meta.len);
        FlowletOut { output, event }
    }
}

/// Flowlet load balancer settings.
#[derive(Clone, Debug, PartialEq)]
pub struct FlowletConfig {
    /// Number of outputs (paths or backends), 1 ..= 65535.
    pub outputs: u16,
    /// Flowlet timeout in ns (default 50 us). The table's entries expire this long after a flow's last
    /// packet ([`ExpiryFrom::LastPacket`]); `table.expiry` is overwritten with it.
    pub flowlet_timeout_ns: u64,
    /// How a new flowlet picks its output.
    pub policy: Policy,
    /// The flow-state table.
    pub table: Config,
    /// The pass engine (recirculation queue size).
    pub engine: EngineConfig,
}

impl Default for FlowletConfig {
    fn default() -> Self {
        FlowletConfig {
            outputs: 4,
            flowlet_timeout_ns: 50_000,
            policy: Policy::LeastLoaded,
            table: Config::default(),
            engine: EngineConfig::default(),
        }
    }
}

/// A Flowlet configuration that cannot be used.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum FlowletConfigError {
    /// No outputs.
    #[error("flowlet config: outputs = 0; at least one output is needed")]
    NoOutputs,
    /// The flowlet timeout is zero.
    #[error("flowlet config: flowlet_timeout_ns = 0")]
    ZeroTimeout,
    /// The table configuration is invalid.
    #[error(transparent)]
    Table(#[from] ConfigError),
}

/// A parsed packet handed to the load balancer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketIn<K = FiveTuple> {
    /// The flow.
    pub key: K,
    /// Arrival time (ns).
    pub ts_ns: u64,
    /// Bytes.
    pub len: u32,
    /// The caller's handle for the buffer; returned in the [`Decision`].
    pub token: u32,
}

/// What to do with a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Send it to this output.
    Forward(u16),
    /// Drop it (and free its buffer).
    Drop(DropReason),
}

/// The load balancer's decision for one packet, in transmit order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    /// The token given with the packet.
    pub token: u32,
    /// Forward or drop.
    pub action: Action,
    /// The flowlet event (meaningful for forwarded packets).
    pub event: FlowletEvent,
    /// Passes the packet took (1: no recirculation).
    pub passes: u16,
}

/// One worker's Flowlet load balancer.
///
/// ```
/// use fp_flowstate::{Action, FiveTuple, FlowletConfig, FlowletLb, PacketIn};
/// let mut lb: FlowletLb = FlowletLb::new(FlowletConfig::default()).unwrap();
/// let key = FiveTuple::new(0x0a000001, 0x0a000002, 40000, 443, 6);
/// let mut out = Vec::new();
/// // A new flow's first packet: one pass to find no state, one to insert it.
/// lb.process(1_000, &[PacketIn { key, ts_ns: 1_000, len: 1000, token: 7 }], &mut out);
/// assert!(out.is_empty() && lb.in_flight() == 1);
/// lb.process(1_100, &[PacketIn { key, ts_ns: 1_100, len: 1000, token: 8 }], &mut out);
/// let Action::Forward(port) = out[0].action else { panic!() };
/// assert_eq!((out[0].token, out[1].token), (7, 8));      // in order
/// assert_eq!(out[1].action, Action::Forward(port));       // same flowlet, same output
/// ```
pub struct FlowletLb<K = FiveTuple>
where
    K: FlowKey + Default,
{
    engine: Engine<K, FlowletFn>,
}

/// Turns departures into decisions as they happen.
struct ToDecisions<'a>(&'a mut Vec<Decision>);

impl Departures<PacketMeta, FlowletOut> for ToDecisions<'_> {
    #[inline(always)]
    fn depart(&mut self, d: Departure<PacketMeta, FlowletOut>) {
        let (action, event) = match d.fate {
            Fate::Exit(o) => (Action::Forward(o.output), o.event),
            Fate::Drop(r) => (Action::Drop(r), FlowletEvent::default()),
        };
        self.0.push(Decision {
            token: d.meta.token,
            action,
            event,
            passes: d.passes,
        });
    }
}

impl<K: FlowKey + Default> FlowletLb<K> {
    /// A load balancer with an empty table.
    pub fn new(cfg: FlowletConfig) -> Result<Self, FlowletConfigError> {
        if cfg.outputs == 0 {
            return Err(FlowletConfigError::NoOutputs);
        }
        if cfg.flowlet_timeout_ns == 0 {
            return Err(FlowletConfigError::ZeroTimeout);
        }
        let mut table = cfg.table.clone();
        table.expiry = Expiry {
            timeout_ns: cfg.flowlet_timeout_ns,
            from: ExpiryFrom::LastPacket,
        };
        let nf = FlowletFn::new(
            cfg.outputs,
            cfg.flowlet_timeout_ns,
            cfg.policy,
            fp_hash::splitmix64(table.seed),
        );
        Ok(FlowletLb {
            engine: Engine::new(&table, cfg.engine, nf)?,
        })
    }

    /// Process one batch (one pass) at time `now_ns`: the packets recirculated by the previous call,
    /// then `pkts` (in arrival order, timestamps not after `now_ns`). Decisions for the packets that
    /// leave in this pass are appended to `out` in transmit order; the others stay in flight and get
    /// their decision in a later call. Never allocates once warmed up.
    pub fn process(&mut self, now_ns: u64, pkts: &[PacketIn<K>], out: &mut Vec<Decision>) {
        self.engine.run_pass(
            pkts.iter().map(|p| {
                (
                    p.key,
                    PacketMeta {
                        ts_ns: p.ts_ns,
                        len: p.len,
                        token: p.token,
                    },
                    p.ts_ns,
                )
            }),
            now_ns,
            &mut ToDecisions(out),
        );
    }

    /// Run passes without new packets until every packet has its decision (at most
    /// [`Engine::pass_bound`] passes). Call at the end of a trace or when the input is idle.
    pub fn flush(&mut self, now_ns: u64, out: &mut Vec<Decision>) {
        self.engine.flush(now_ns, &mut ToDecisions(out));
    }

    /// Packets in flight (their buffers must be kept until their decision comes).
    pub fn in_flight(&self) -> usize {
        self.engine.in_flight()
    }

    /// Override the load the [`Policy::LeastLoaded`] choice sees for `output` (e.g. from queue depths).
    pub fn set_load(&mut self, output: u16, load: u64) {
        if let Some(o) = self.engine.nf_mut().per_output.get_mut(output as usize) {
            o[0] = load;
        }
    }

    /// Per-outcome counters.
    pub fn counters(&self) -> FlowletCounters {
        let s = self.engine.stats();
        let nf = self.engine.nf();
        FlowletCounters {
            packets_per_output: nf.per_output.iter().map(|o| o[1]).collect(),
            bytes_per_output: nf.per_output.iter().map(|o| o[2]).collect(),
            drops_pass_limit: s.drops_pass_limit,
            drops_late: s.drops_late,
            drops_overflow: s.drops_overflow,
            drops_ordering_full: s.drops_ordering_full,
            ..nf.counters.clone()
        }
    }

    /// The flowlet events so far, without allocating: packets that started a flowlet with no state,
    /// started one after a gap, moved with it to another output, continued their flowlet.
    pub fn events(&self) -> [u64; 4] {
        let c = &self.engine.nf().counters;
        [c.new_flowlets, c.gap_flowlets, c.moved, c.same_flowlet]
    }

    /// Table counters (insertions, recirculations, swaps, evictions, ...).
    pub fn table_stats(&self) -> &Stats {
        self.engine.stats()
    }

    /// The engine (table inspection).
    pub fn engine(&self) -> &Engine<K, FlowletFn> {
        &self.engine
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_packs_time_and_output_and_survives_clock_wrap() {
        let s = FlowletState::new(1_000, 7);
        assert_eq!((s.output(), s.last_ns()), (7, 1_000));
        assert_eq!(s.gap(51_000), 50_000);
        assert_eq!(s.gap(500), 0, "an older packet has no gap");
        // Across the 2^48 ns wrap.
        let near = (1u64 << 48) - 100;
        let s = FlowletState::new(near, 65535);
        assert_eq!(s.output(), 65535);
        assert_eq!(s.gap((1u64 << 48) + 400), 500);
        assert_eq!(core::mem::size_of::<FlowletState>(), 8);
    }
}
