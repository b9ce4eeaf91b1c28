//! What the Flowlet balancer's admin endpoints read (`fp_service::View`): frames by path, flowlet
//! events, drops by reason, passes, and the tracer records' JSON — all from the workers' own
//! counters.

use crate::stage::{FlowletRecord, LiveStats, DROPS};
use fp_control::json;
use fp_control::metrics::{Exposition, Kind};
use fp_control::trace::Record;
use fp_pipeline::stats::Counter;
use fp_service::View;
use fp_wire::ethernet::MacAddr;
use std::fmt::Write as _;
use std::sync::Arc;

impl Record for FlowletRecord {
    fn write_json(&self, s: &mut String) {
        let _ = write!(s, "\"worker\":{},\"flow\":", self.worker);
        json::push_str(s, &self.flow);
        let _ = write!(
            s,
            ",\"decision\":\"{}\",\"passes\":{}",
            self.decision, self.passes
        );
        if let Some((o, name, mac)) = &self.output {
            let _ = write!(s, ",\"output\":{o},\"interface\":");
            json::push_str(s, name);
            let _ = write!(s, ",\"next_hop\":\"{mac}\"");
        }
        if let Some(r) = self.drop_reason {
            let _ = write!(s, ",\"drop_reason\":\"{r}\"");
        }
    }
}

/// What the Flowlet balancer's admin endpoints read: the workers' counters.
pub struct FlowletView {
    pub(crate) names: Arc<Vec<String>>,
    pub(crate) next_hops: Vec<MacAddr>,
    pub(crate) workers: Vec<Arc<LiveStats>>,
    pub(crate) gap_ns: u64,
}

impl FlowletView {
    fn sum(&self, f: impl Fn(&LiveStats) -> &Counter) -> u64 {
        self.workers.iter().map(|w| f(w).get()).sum()
    }
}

impl View for FlowletView {
    fn metrics(&self, e: &mut Exposition) {
        e.single(
            "flowplane_flowlet_rx_frames_total",
            Kind::Counter,
            "Frames the workers received on the input.",
            self.sum(|w| &w.rx),
        );
        for (name, help, f) in [
            (
                "flowplane_flowlet_path_packets_total",
                "Frames sent on each output path.",
                (|w: &LiveStats, o: usize| w.packets[o].get()) as fn(&LiveStats, usize) -> u64,
            ),
            (
                "flowplane_flowlet_path_bytes_total",
                "Bytes sent on each output path.",
                |w: &LiveStats, o: usize| w.bytes[o].get(),
            ),
        ] {
            e.family(name, Kind::Counter, help);
            for o in 0..self.next_hops.len() {
                let v: u64 = self.workers.iter().map(|w| f(w, o)).sum();
                e.sample(
                    name,
                    &[("path", &o.to_string()), ("interface", &self.names[1 + o])],
                    v,
                );
            }
        }
        e.family(
            "flowplane_flowlet_events_total",
            Kind::Counter,
            "Packets by what the flow-state table made of them: new (a flow without state starts a \
             flowlet), gap (a flowlet starts after a pause longer than the gap), same (the packet \
             continues its flowlet); and moved: flowlets (new or after a gap) that took another \
             path than the flow's previous flowlet.",
        );
        for (i, ev) in ["new", "gap", "moved", "same"].iter().enumerate() {
            let v = self.sum(|w| &w.events[i]);
            e.sample("flowplane_flowlet_events_total", &[("event", ev)], v);
        }
        e.family(
            "flowplane_flowlet_drops_total",
            Kind::Counter,
            "Frames dropped, by reason: the flow-state table's (pass_limit, late, recirc_overflow, \
             ordering_full, anomaly), from_path (received on an output path), and the parser's for \
             frames that do not parse.",
        );
        for (i, (_, reason)) in DROPS.iter().enumerate() {
            let v = self.sum(|w| &w.drops[i]);
            e.sample("flowplane_flowlet_drops_total", &[("reason", reason)], v);
        }
        e.sample(
            "flowplane_flowlet_drops_total",
            &[("reason", "from_path")],
            self.sum(|w| &w.from_path),
        );
        for (k, err) in fp_wire::Error::ALL.iter().enumerate() {
            let v = self.sum(|w| &w.parse[k]);
            e.sample(
                "flowplane_flowlet_drops_total",
                &[("reason", err.name())],
                v,
            );
        }
        e.family(
            "flowplane_flowlet_passes_total",
            Kind::Counter,
            "Forwarded frames by passes through the table (recirculations + 1): 1, 2, 3, 4, 5+.",
        );
        for (i, label) in ["1", "2", "3", "4", "5+"].iter().enumerate() {
            let v = self.sum(|w| &w.passes[i]);
            e.sample("flowplane_flowlet_passes_total", &[("passes", label)], v);
        }
        e.single(
            "flowplane_flowlet_gap_seconds",
            Kind::Gauge,
            "The flowlet gap (also each entry's expiry after its flow's last packet).",
            self.gap_ns as f64 / 1e9,
        );
    }

    fn status(&self, s: &mut String) {
        let _ = writeln!(
            s,
            "input {}; gap {} us",
            self.names[0],
            self.gap_ns as f64 / 1e3
        );
        let total: u64 = (0..self.next_hops.len())
            .map(|o| self.workers.iter().map(|w| w.packets[o].get()).sum::<u64>())
            .sum();
        for (o, mac) in self.next_hops.iter().enumerate() {
            let n: u64 = self.workers.iter().map(|w| w.packets[o].get()).sum();
            let _ = writeln!(
                s,
                "path {o}: {} next hop {mac}: {n} frames ({:.1} %)",
                self.names[1 + o],
                if total == 0 {
                    0.0
                } else {
                    100.0 * n as f64 / total as f64
                }
            );
        }
        let ev: Vec<u64> = (0..4).map(|i| self.sum(|w| &w.events[i])).collect();
        let _ = writeln!(
            s,
            "flowlets: {} new, {} after a gap ({} moved), {} packets continued their flowlet",
            ev[0], ev[1], ev[2], ev[3]
        );
    }
}
