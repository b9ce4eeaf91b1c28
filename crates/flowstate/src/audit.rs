//! Checking the paper's three properties (§3.6) on what leaves the table.
//!
//! [`AuditFn`] is a network function whose state is `(instance, count)`: `create` starts a new
//! instance with count 1, `update` increments the count, and every packet leaves with the pair it
//! read. [`Auditor`] watches the departures of a run (packets tagged with their flow and their
//! sequence number within the flow, in arrival order) and counts:
//!
//! * **Ordering** — packets of a flow that leave after a later packet of the same flow left.
//! * **Consistency** — a packet that reads a state other than its flow's current one; a new state
//!   created while the previous one could not yet have expired (its last read was less than the
//!   timeout ago, or it was inserted less than the timeout ago for [`ExpiryFrom::Insertion`]) and had
//!   not been evicted; a count that is not the previous packet's plus one (an update made out of
//!   arrival order: [`Mode::Weak`](crate::Mode::Weak) can do that).
//! * **Termination** — the most passes any packet took, and drops by reason.
//!
//! The expiry check is a necessary condition (a lookup that refreshed the entry without reading it is
//! invisible here); the model tests inspect the table itself for the exact invariants.

use crate::config::{Expiry, ExpiryFrom};
use crate::engine::{Departure, Fate};
use crate::table::{DropReason, Entry, FlowFn};
use std::collections::HashMap;

/// State of [`AuditFn`] (16 bytes, like the Flowlet state).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AuditState {
    /// The flow it belongs to (so an evicted entry can be traced).
    pub flow: u64,
    /// Which state of the flow this is (unique per run).
    pub instance: u32,
    /// Packets that read it.
    pub count: u32,
}

/// Per-packet data for an audited run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AuditMeta {
    /// Flow id.
    pub flow: u64,
    /// Position of the packet in its flow, in arrival order.
    pub seq: u32,
}

/// What an audited packet read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AuditOut {
    /// The instance read.
    pub instance: u32,
    /// The count after this packet's update.
    pub count: u32,
    /// This packet created the instance.
    pub created: bool,
    /// When it read (ns).
    pub read_at: u64,
}

/// The auditing network function.
#[derive(Clone, Debug, Default)]
pub struct AuditFn {
    next_instance: u32,
}

impl<K> FlowFn<K> for AuditFn {
    type Value = AuditState;
    type Meta = AuditMeta;
    type Out = AuditOut;

    fn create(&mut self, _key: &K, meta: &AuditMeta, now: u64) -> (AuditState, AuditOut) {
        self.next_instance = self.next_instance.wrapping_add(1);
        let s = AuditState {
            flow: meta.flow,
            instance: self.next_instance,
            count: 1,
        };
        (
            s,
            AuditOut {
                instance: s.instance,
                count: 1,
                created: true,
                read_at: now,
            },
        )
    }

    fn update(&mut self, _key: &K, v: &mut AuditState, _meta: &AuditMeta, now: u64) -> AuditOut {
        v.count += 1;
        AuditOut {
            instance: v.instance,
            count: v.count,
            created: false,
            read_at: now,
        }
    }
}

/// Counts from an audited run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AuditReport {
    /// Packets that left (sent or dropped).
    pub departures: u64,
    /// Packets sent.
    pub exits: u64,
    /// Packets dropped, by reason: pass limit, late, overflow, ordering full, anomaly.
    pub drops: [u64; 5],
    /// Packets sent after a later packet of their flow.
    pub out_of_order: u64,
    /// Packets that created a state while the flow's previous state could not have expired.
    pub lost_state: u64,
    /// Packets that read a state other than their flow's current one.
    pub foreign_state: u64,
    /// Packets whose update was not applied right after the previous packet's.
    pub update_order: u64,
    /// Evicted entries reported by the table.
    pub evicted: u64,
    /// `passes_hist[n]`: packets sent after `n` passes (index 0 unused).
    pub passes_hist: Vec<u64>,
    /// Most passes any packet took (sent or dropped).
    pub max_passes: u16,
}

impl AuditReport {
    /// All consistency violations.
    pub fn consistency_violations(&self) -> u64 {
        self.lost_state + self.foreign_state + self.update_order
    }
    /// All drops.
    pub fn dropped(&self) -> u64 {
        self.drops.iter().sum()
    }
}

#[derive(Clone, Copy, Default)]
struct FlowAudit {
    max_seq: Option<u32>,
    instance: Option<u32>,
    count: u32,
    created_at: u64,
    last_read: u64,
    evicted: Option<u32>,
}

/// Watches departures; see the module doc.
#[derive(Clone, Default)]
pub struct Auditor {
    expiry: Option<Expiry>,
    flows: HashMap<u64, FlowAudit>,
    /// The counts so far.
    pub report: AuditReport,
}

impl Auditor {
    /// An auditor for a table with this expiry.
    pub fn new(expiry: Expiry) -> Self {
        Auditor {
            expiry: Some(expiry),
            flows: HashMap::new(),
            report: AuditReport {
                passes_hist: vec![0; 2],
                ..AuditReport::default()
            },
        }
    }

    /// Record an entry the table evicted.
    pub fn evicted<K>(&mut self, e: &Entry<K, AuditState>) {
        self.report.evicted += 1;
        // Instances are numbered in creation order; an old instance's eviction may be reported after
        // a newer one's (a late swap), so keep the newest.
        let f = self.flows.entry(e.value.flow).or_default();
        f.evicted = f.evicted.max(Some(e.value.instance));
    }

    /// Record a departure.
    pub fn departure(&mut self, d: &Departure<AuditMeta, AuditOut>) {
        let r = &mut self.report;
        r.departures += 1;
        r.max_passes = r.max_passes.max(d.passes);
        let out = match d.fate {
            Fate::Drop(reason) => {
                let i = match reason {
                    DropReason::PassLimit => 0,
                    DropReason::Late => 1,
                    DropReason::RecircOverflow => 2,
                    DropReason::OrderingFull => 3,
                    DropReason::Anomaly => 4,
                };
                r.drops[i] += 1;
                return;
            }
            Fate::Exit(o) => o,
        };
        r.exits += 1;
        let p = d.passes as usize;
        if r.passes_hist.len() <= p {
            r.passes_hist.resize(p + 1, 0);
        }
        r.passes_hist[p] += 1;
        let f = self.flows.entry(d.meta.flow).or_default();
        match f.max_seq {
            Some(m) if d.meta.seq < m => r.out_of_order += 1,
            _ => f.max_seq = Some(d.meta.seq),
        }
        let expiry = self.expiry.unwrap_or_default();
        if out.created {
            if let Some(prev) = f.instance {
                let since = match expiry.from {
                    ExpiryFrom::LastPacket => f.last_read,
                    ExpiryFrom::Insertion => f.created_at,
                };
                let expired = out.read_at.saturating_sub(since) >= expiry.timeout_ns;
                if !expired && f.evicted != Some(prev) {
                    r.lost_state += 1;
                }
            }
            f.instance = Some(out.instance);
            f.count = 1;
            f.created_at = out.read_at;
            f.last_read = out.read_at;
            f.evicted = None;
        } else if f.instance == Some(out.instance) {
            if out.count != f.count + 1 {
                r.update_order += 1;
            }
            f.count = f.count.max(out.count);
            f.last_read = f.last_read.max(out.read_at);
        } else {
            r.foreign_state += 1;
            f.instance = Some(out.instance);
            f.count = out.count;
            f.last_read = out.read_at;
        }
    }
}

/// A generated trace to run through an audited [`Engine`](crate::Engine).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TraceSpec {
    /// Traffic pattern.
    pub workload: crate::workload::Workload,
    /// Offered load in Gbit/s.
    pub gbps: f64,
    /// Packet size in bytes.
    pub pkt_bytes: u32,
    /// Packets to generate.
    pub packets: u64,
    /// Packets per pass with [`Schedule::RecirculatedFirst`](crate::Schedule) (with
    /// `Interleaved { recirc_ns }` a pass covers `recirc_ns` of arrivals instead).
    pub batch: usize,
    /// Generator seed.
    pub seed: u64,
}

/// Everything measured by [`run_audited`].
#[derive(Clone, Debug)]
pub struct AuditedRun {
    /// Ordering / consistency / termination counts.
    pub report: AuditReport,
    /// Table counters.
    pub stats: crate::table::Stats,
    /// Passes run (flush included).
    pub passes: u64,
    /// Duration of the trace (ns).
    pub trace_ns: u64,
}

/// Run `spec`'s traffic through an engine with the [`AuditFn`] network function, audit every
/// departure and eviction, flush at the end. Time is the trace's: pass `now` is the last arrival of
/// the batch (or the end of the window), so results do not depend on the machine's speed.
pub fn run_audited(
    table: &crate::Config,
    engine: crate::EngineConfig,
    spec: &TraceSpec,
) -> Result<AuditedRun, crate::ConfigError> {
    use crate::engine::{Engine, Schedule};
    use crate::workload::TrafficGen;
    let mut ecfg = engine;
    ecfg.log_evictions = true;
    let mut e: Engine<crate::FiveTuple, AuditFn> = Engine::new(table, ecfg, AuditFn::default())?;
    let mut aud = Auditor::new(table.expiry);
    let mut gen = TrafficGen::new(spec.workload, spec.gbps, spec.pkt_bytes, spec.seed).peekable();
    let mut batch: Vec<(crate::FiveTuple, AuditMeta, u64)> = Vec::with_capacity(spec.batch.max(1));
    let mut out = Vec::new();
    let mut left = spec.packets;
    let (mut passes, mut now) = (0u64, 0u64);
    let window = match engine.schedule {
        Schedule::Interleaved { recirc_ns } => Some(recirc_ns.max(1)),
        Schedule::RecirculatedFirst => None,
    };
    let mut window_end = 0u64;
    while left > 0 {
        batch.clear();
        match window {
            None => {
                while batch.len() < spec.batch.max(1) && left > 0 {
                    let p = gen.next().expect("endless generator");
                    batch.push((
                        p.key,
                        AuditMeta {
                            flow: p.flow,
                            seq: p.seq,
                        },
                        p.at,
                    ));
                    now = p.at;
                    left -= 1;
                }
            }
            Some(w) => {
                window_end += w;
                while left > 0 && gen.peek().is_some_and(|p| p.at < window_end) {
                    let p = gen.next().expect("endless generator");
                    batch.push((
                        p.key,
                        AuditMeta {
                            flow: p.flow,
                            seq: p.seq,
                        },
                        p.at,
                    ));
                    left -= 1;
                }
                now = window_end;
            }
        }
        e.run_pass(batch.drain(..), now, &mut out);
        passes += 1;
        for d in out.drain(..) {
            aud.departure(&d);
        }
        for ev in e.drain_evictions() {
            aud.evicted(&ev);
        }
    }
    while !e.is_idle() {
        now += window.unwrap_or(0);
        e.run_pass(core::iter::empty(), now, &mut out);
        passes += 1;
        for d in out.drain(..) {
            aud.departure(&d);
        }
        for ev in e.drain_evictions() {
            aud.evicted(&ev);
        }
    }
    Ok(AuditedRun {
        report: aud.report,
        stats: *e.stats(),
        passes,
        trace_ns: now,
    })
}
