//! The balancer's packet tracer (Maglev §4.4): a worker that meets a probe (a TCP/UDP payload
//! starting with `FLOWPLANE-TRACE1`, see [`fp_control::trace`]) forwards it as usual and records
//! its path — worker, VIP, connection-table outcome, Maglev slot, backend, encapsulation,
//! configuration generation — in the shared [`TraceLog`], rate-limited per worker.
//!
//! The worker calls [`Tracer::wants`] for every packet it matched to a VIP while a tracer is
//! installed: a few header reads and two 8-byte compares for an ordinary packet, no allocation,
//! no clock, no lock.
//!
//! A record as served by `GET /trace` (one JSON object per line):
//! `{"seq":1,"unix_ms":…,"node":"lb1","probe_id":42,"worker":0,"generation":3,"vip":"web",
//! "protocol":"tcp","src":"198.51.100.7:40000","dst":"203.0.113.10:80","conn":"miss",
//! "maglev_slot":1234,"backend":"10.0.1.2","encap":"gre"}` (`maglev_slot` and `backend` are
//! `null` when there was no selection / no backend).

use crate::worker::{TraceRecord, Tracer};
use fp_control::json;
use fp_control::trace::{probe_id, Limiter, Record, TracerConfig};
pub use fp_control::trace::{TraceCounts, TraceEntry, TraceLog};
use fp_wire::FlowKey;
use std::fmt::Write;
use std::sync::Arc;

impl Record for TraceRecord {
    fn write_json(&self, s: &mut String) {
        let _ = write!(
            s,
            "\"worker\":{},\"generation\":{},\"vip\":",
            self.worker, self.generation
        );
        json::push_str(s, &self.vip);
        let (proto, src, dst) = endpoints(&self.flow);
        let _ = write!(
            s,
            ",\"protocol\":\"{proto}\",\"src\":\"{src}\",\"dst\":\"{dst}\",\"conn\":"
        );
        json::push_str(s, self.conn);
        s.push_str(",\"maglev_slot\":");
        match self.maglev_slot {
            Some(m) => {
                let _ = write!(s, "{m}");
            }
            None => s.push_str("null"),
        }
        s.push_str(",\"backend\":");
        match self.backend {
            Some(b) => {
                let _ = write!(s, "\"{b}\"");
            }
            None => s.push_str("null"),
        }
        s.push_str(",\"encap\":");
        json::push_str(s, &self.encap);
    }
}

/// (protocol name, source, destination) of a flow, as text.
fn endpoints(f: &FlowKey) -> (String, std::net::SocketAddr, std::net::SocketAddr) {
    let (p, src, dst) = match f {
        FlowKey::V4(k) => (
            k.protocol,
            (std::net::IpAddr::V4(k.src), k.src_port),
            (std::net::IpAddr::V4(k.dst), k.dst_port),
        ),
        FlowKey::V6(k) => (
            k.protocol,
            (std::net::IpAddr::V6(k.src), k.src_port),
            (std::net::IpAddr::V6(k.dst), k.dst_port),
        ),
    };
    (crate::metrics::proto_text(p), src.into(), dst.into())
}

/// A worker's tracer: recognises probes, rate-limits them, records into the shared [`TraceLog`].
///
/// `wants` returning `true` is followed by `record` for the same packet (the worker's contract);
/// the probe id found by `wants` is kept in between.
pub struct PacketTracer {
    log: Arc<TraceLog<TraceRecord>>,
    limiter: Limiter,
    pending: Option<u64>,
}

impl PacketTracer {
    /// A tracer recording into `log`, rate-limited by `cfg`.
    pub fn new(log: &Arc<TraceLog<TraceRecord>>, cfg: TracerConfig) -> PacketTracer {
        PacketTracer {
            log: log.clone(),
            limiter: log.limiter(cfg),
            pending: None,
        }
    }

    /// The log this tracer records into.
    pub fn log(&self) -> &Arc<TraceLog<TraceRecord>> {
        &self.log
    }

    #[cold]
    #[inline(never)]
    fn probe(&mut self, id: u64) -> bool {
        if self.limiter.take() {
            self.pending = Some(id);
            true
        } else {
            false
        }
    }
}

impl Tracer for PacketTracer {
    #[inline]
    fn wants(&mut self, frame: &[u8], flow: &FlowKey) -> bool {
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
        self.probe(id)
    }

    fn record(&mut self, r: TraceRecord) {
        // `wants` said yes just before; a record without one (another caller) still goes in.
        let id = self.pending.take().unwrap_or(0);
        self.log.push(id, r);
    }
}

#[cfg(test)]
mod tests;
