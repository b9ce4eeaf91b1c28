//! The balancer's packet tracer, worker side (Maglev §4.4): a worker that meets a probe (a TCP/UDP
//! payload starting with `FLOWPLANE-TRACE1`, see [`fp_pipeline::trace`]) forwards it as usual and
//! records its path — worker, VIP, connection-table outcome, Maglev slot, backend, encapsulation,
//! configuration generation — into its tracer queue, rate-limited on its own clock. The control
//! side collects the records (`fp_control::trace::TraceLog`) and serves them at `GET /trace`.
//!
//! The worker calls [`Tracer::wants`] for every packet it matched to a VIP while a tracer is
//! installed: a length test, the parser and two 8-byte compares for an ordinary long packet, no
//! allocation, no clock, no lock.
//!
//! A record as served by `GET /trace` (one JSON object per line):
//! `{"seq":1,"unix_ms":…,"node":"lb1","probe_id":42,"worker":0,"generation":3,"vip":"web",
//! "protocol":"tcp","src":"198.51.100.7:40000","dst":"203.0.113.10:80","conn":"miss",
//! "maglev_slot":1234,"backend":"10.0.1.2","encap":"gre"}` (`maglev_slot` and `backend` are
//! `null` when there was no selection / no backend).

use crate::stage::{TraceRecord, Tracer};
use fp_pipeline::trace::{probe_id, ProbeSender};
use fp_wire::FlowKey;

/// A worker's tracer: recognises probes, rate-limits them, queues their records.
///
/// `wants` returning `true` is followed by `record` for the same packet (the worker's contract);
/// the probe id and the time found by `wants` are kept in between.
pub struct PacketTracer {
    probes: ProbeSender<TraceRecord>,
    pending: Option<(u64, u64)>,
}

impl PacketTracer {
    /// A tracer queueing into `probes` (a worker's end of the tracer queue).
    pub fn new(probes: ProbeSender<TraceRecord>) -> PacketTracer {
        PacketTracer {
            probes,
            pending: None,
        }
    }

    #[cold]
    #[inline(never)]
    fn probe(&mut self, id: u64, now_ns: u64) -> bool {
        if self.probes.admit(now_ns) {
            self.pending = Some((id, now_ns));
            true
        } else {
            false
        }
    }
}

impl Tracer for PacketTracer {
    #[inline]
    fn wants(&mut self, frame: &[u8], flow: &FlowKey, now_ns: u64) -> bool {
        let proto = match flow {
            FlowKey::V4(k) => k.protocol,
            FlowKey::V6(k) => k.protocol,
        };
        if !proto.has_ports() {
            return false;
        }
        let Some(id) = probe_id(frame) else {
            return false;
        };
        self.probe(id, now_ns)
    }

    fn record(&mut self, r: TraceRecord) {
        // `wants` said yes just before; a record without one (another caller) still goes in.
        let (id, now_ns) = self.pending.take().unwrap_or((0, 0));
        self.probes.send(id, now_ns, r);
    }
}

#[cfg(test)]
mod tests;
