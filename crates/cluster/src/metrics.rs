//! What a cluster node's admin endpoints read (`fp_service::View`): frames by path, drops by
//! reason, table sizes and bytes per entry, updates applied, the applied revision, members up;
//! `/status` with a check of every entry against this node's tables; the tracer records' JSON.

use crate::config::Config;
use crate::harness::StatsReader;
use crate::stage::NodeTrace;
use crate::{Member, MemberStats, Mode};
use fp_control::metrics::{Exposition, Kind};
use fp_control::trace::Record;
use fp_service::View;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

impl Record for NodeTrace {
    fn write_json(&self, s: &mut String) {
        use std::fmt::Write as _;
        let _ = write!(s, "\"node_id\":{},\"in_port\":", self.node);
        match self.in_port {
            Some(p) => {
                let _ = write!(s, "{p}");
            }
            None => s.push_str("null"),
        }
        match self.from_node {
            Some((n, h)) => {
                let _ = write!(s, ",\"from_node\":{n},\"hops\":{h}");
            }
            None => s.push_str(",\"from_node\":null,\"hops\":0"),
        }
        let _ = write!(s, ",\"dst\":\"{}\",\"owner\":", self.dst);
        match self.owner {
            Some(o) => {
                let _ = write!(s, "{o}");
            }
            None => s.push_str("null"),
        }
        let _ = write!(s, ",\"decision\":\"{}\",\"out\":[", self.decision);
        for (i, o) in self.out.iter().enumerate() {
            if i > 0 {
                s.push(',');
            }
            fp_control::json::push_str(s, o);
        }
        s.push(']');
    }
}

/// What a node's admin endpoints read: the node's counters (published by its stage, no lock),
/// its sockets' (the engine's), and the control side's member (its tables), applied revision and
/// view of the members.
pub struct NodeView {
    pub(crate) cfg: Config,
    pub(crate) id: u8,
    pub(crate) member: Arc<Mutex<Member>>,
    pub(crate) reader: StatsReader,
    pub(crate) applied: Arc<Mutex<i64>>,
    pub(crate) up: Arc<Mutex<Vec<bool>>>,
}

impl View for NodeView {
    fn metrics(&self, e: &mut Exposition) {
        let st = self.reader.stats();
        let c = st.counters;
        e.family(
            "flowplane_cluster_frames_total",
            Kind::Counter,
            "Frames by path: local (emitted on an external port, entered at this node), one_hop \
             (emitted here after one interconnect hop), redirected (emitted after two or more \
             hops: the entry moved while the frame travelled), flooded (group-addressed frames \
             that entered here), to_interconnect and from_interconnect (frames this node sent \
             to and received from other nodes).",
        );
        for (path, v) in [
            ("local", st.ports.by_hops[0]),
            ("one_hop", st.ports.by_hops[1]),
            ("redirected", st.ports.by_hops[2]),
            ("flooded", c.flooded),
            ("to_interconnect", c.ic_tx),
            ("from_interconnect", c.ic_rx),
        ] {
            e.sample("flowplane_cluster_frames_total", &[("path", path)], v);
        }
        e.family(
            "flowplane_cluster_drops_total",
            Kind::Counter,
            "Frames dropped, by reason: unknown (no entry), owner_down (the entry's node is \
             down), malformed, link_full (the interconnect refused it), oversize (too large \
             once encapsulated), no_buffer, no_port (an entry names a port this node lacks).",
        );
        for (reason, v) in [
            ("unknown", c.drop_unknown),
            ("owner_down", c.drop_owner_down),
            ("malformed", c.drop_malformed),
            ("link_full", c.drop_link_full),
            ("oversize", c.drop_oversize),
            ("no_buffer", c.drop_no_buffer),
            ("no_port", st.ports.tx_no_port),
        ] {
            e.sample("flowplane_cluster_drops_total", &[("reason", reason)], v);
        }
        let m = self.member.lock().unwrap_or_else(|e| e.into_inner());
        let mem = m.memory();
        let s: MemberStats = m.stats();
        let n = m.len();
        drop(m);
        e.family(
            "flowplane_cluster_entries",
            Kind::Gauge,
            "Entries: cluster (all entries this node applied), fib (held in this node's FIB \
             share), partition (keys of the partition table replica; 0 unless scalebricks).",
        );
        let gpt_keys = if self.cfg.mode == Mode::ScaleBricks {
            n
        } else {
            0
        };
        for (t, v) in [
            ("cluster", n),
            ("fib", mem.fib_entries),
            ("partition", gpt_keys),
        ] {
            e.sample("flowplane_cluster_entries", &[("table", t)], v as u64);
        }
        e.family(
            "flowplane_cluster_table_bytes",
            Kind::Gauge,
            "Bytes of this node's tables: fib (its FIB share) and partition (its partition \
             table replica).",
        );
        e.sample(
            "flowplane_cluster_table_bytes",
            &[("table", "fib")],
            mem.fib_bytes as u64,
        );
        e.sample(
            "flowplane_cluster_table_bytes",
            &[("table", "partition")],
            mem.gpt_bytes as u64,
        );
        e.single(
            "flowplane_cluster_bytes_per_entry",
            Kind::Gauge,
            "This node's table bytes (FIB share + partition table) per entry of the cluster.",
            if n == 0 {
                0.0
            } else {
                mem.bytes() as f64 / n as f64
            },
        );
        e.family(
            "flowplane_cluster_updates_total",
            Kind::Counter,
            "Entry changes applied, by result: added, moved, repointed, removed, unchanged, \
             error (refused: a full table, an invalid entry).",
        );
        for (r, v) in [
            ("added", s.added),
            ("moved", s.moved),
            ("repointed", s.repointed),
            ("removed", s.removed),
            ("unchanged", s.unchanged),
            ("error", s.errors),
        ] {
            e.sample("flowplane_cluster_updates_total", &[("result", r)], v);
        }
        e.single(
            "flowplane_cluster_applied_revision",
            Kind::Gauge,
            "The etcd revision up to which this node applied every entry change.",
            *self.applied.lock().unwrap_or_else(|e| e.into_inner()) as u64,
        );
        let up = self.up.lock().unwrap_or_else(|e| e.into_inner()).clone();
        e.family(
            "flowplane_cluster_member_up",
            Kind::Gauge,
            "1 if the node is a live member (its lease is held), as this node sees it.",
        );
        for (i, u) in up.iter().enumerate() {
            e.sample(
                "flowplane_cluster_member_up",
                &[("node", &i.to_string())],
                *u as u64,
            );
        }
    }

    fn status(&self, s: &mut String) {
        let st = self.reader.stats();
        let m = self.member.lock().unwrap_or_else(|e| e.into_inner());
        let applied = *self.applied.lock().unwrap_or_else(|e| e.into_inner());
        let up = self.up.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let _ = writeln!(
            s,
            "cluster {:?} node {} of {} ({})",
            self.cfg.cluster.name,
            self.id,
            self.cfg.n(),
            self.cfg.mode.name(),
        );
        let _ = writeln!(
            s,
            "applied revision {applied}; {} entries; digest {:016x}",
            m.len(),
            m.digest()
        );
        let mem = m.memory();
        let _ = writeln!(
            s,
            "tables: FIB share {} entries, {} bytes, {} layout; partition table {} bytes",
            mem.fib_entries, mem.fib_bytes, mem.fib_layout, mem.gpt_bytes
        );
        let _ = writeln!(
            s,
            "verify: {}",
            match m.verify() {
                Ok(()) => "ok".to_string(),
                Err(e) => e,
            }
        );
        drop(m);
        let list: Vec<String> = up
            .iter()
            .enumerate()
            .map(|(i, u)| format!("{i}:{}", if *u { "up" } else { "down" }))
            .collect();
        let _ = writeln!(s, "members: {}", list.join(" "));
        let c = st.counters;
        let _ = writeln!(
            s,
            "frames: local {}, one hop {}, redirected {}, flooded {}; drops: unknown {}, \
             owner down {}, other {}",
            st.ports.by_hops[0],
            st.ports.by_hops[1],
            st.ports.by_hops[2],
            c.flooded,
            c.drop_unknown,
            c.drop_owner_down,
            c.drops() - c.drop_unknown - c.drop_owner_down
        );
    }
}
