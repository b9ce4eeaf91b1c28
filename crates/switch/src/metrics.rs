//! What the switch's admin endpoints read (`fp_service::View`): its metric families, its lines
//! of `/status`, and the tracer records' JSON. Counters come from the workers (single-writer
//! atomics), the FIB writer's figures from what its tick publishes: nothing here waits for the
//! control thread.

use crate::service::{Published, WorkerCounters};
use crate::stage::SwitchRecord;
use fp_control::json;
use fp_control::metrics::{Exposition, Kind};
use fp_control::trace::Record;
use fp_service::View;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

impl Record for SwitchRecord {
    fn write_json(&self, s: &mut String) {
        let _ = write!(
            s,
            "\"worker\":{},\"in_port\":{},\"in_interface\":",
            self.worker, self.in_port
        );
        json::push_str(s, &self.in_interface);
        let _ = write!(
            s,
            ",\"src\":\"{}\",\"dst\":\"{}\",\"vlan\":{},\"fib\":{},\"decision\":\"{}\",\"out_ports\":{:?},\"out_interfaces\":[",
            self.src,
            self.dst,
            self.vlan.map_or("null".to_string(), |v| v.to_string()),
            self.fib.map_or("null".to_string(), |p| p.to_string()),
            self.decision,
            self.out.iter().map(|o| o.0).collect::<Vec<_>>()
        );
        for (i, (_, name)) in self.out.iter().enumerate() {
            if i > 0 {
                s.push(',');
            }
            json::push_str(s, name);
        }
        s.push(']');
    }
}

/// What the switch's admin endpoints read.
pub struct SwitchView {
    pub(crate) names: Arc<Vec<String>>,
    pub(crate) workers: Vec<WorkerCounters>,
    pub(crate) published: Arc<Mutex<Published>>,
    pub(crate) preloaded: usize,
    pub(crate) fib_capacity: usize,
    pub(crate) learn_queue: usize,
    /// How this start went with the previous run's learned entries.
    pub(crate) restored: crate::carry::Restored,
    /// The sFlow exporter's counters.
    pub(crate) sflow: Arc<crate::sflow::SflowStats>,
}

impl SwitchView {
    fn published(&self) -> Published {
        self.published
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl View for SwitchView {
    fn metrics(&self, e: &mut Exposition) {
        sflow_metrics(&self.sflow, e);
        let name = "flowplane_switch_port_flooded_frames_total";
        e.family(
            name,
            Kind::Counter,
            "Frames received on the port and flooded (unknown unicast, broadcast, multicast).",
        );
        for (i, n) in self.names.iter().enumerate() {
            let v: u64 = self.workers.iter().map(|w| w.flooded[i].get()).sum();
            e.sample(name, &[("port", &i.to_string()), ("interface", n)], v);
        }
        // Worker counters by outcome, summed.
        let mut totals: Vec<(&'static str, u64)> = Vec::new();
        for w in &self.workers {
            for (k, v) in w.switch.values() {
                match totals.iter_mut().find(|(n, _)| *n == k) {
                    Some(e) => e.1 += v,
                    None => totals.push((k, v)),
                }
            }
        }
        let get = |k: &str| totals.iter().find(|(n, _)| *n == k).map_or(0, |e| e.1);
        e.family(
            "flowplane_switch_frames_total",
            Kind::Counter,
            "Frames by what the switch did with them (rx, tx copies, forwarded, flooded, \
             unknown_unicast among flooded, drop_* by reason).",
        );
        for (k, v) in &totals {
            if !k.starts_with("learn_") && !k.starts_with("cache_") {
                e.sample("flowplane_switch_frames_total", &[("outcome", k)], *v);
            }
        }
        e.family(
            "flowplane_switch_fib_cache_lookups_total",
            Kind::Counter,
            "Destination lookups through the workers' FIB caches (--fib-cache), by result: hit or \
             miss (looked up in the FIB).",
        );
        for (label, key) in [("hit", "cache_hit"), ("miss", "cache_miss")] {
            e.sample(
                "flowplane_switch_fib_cache_lookups_total",
                &[("result", label)],
                get(key),
            );
        }
        e.single(
            "flowplane_switch_learn_events_total",
            Kind::Counter,
            "Learn events (new, moved or refreshed source MACs) the workers queued for the FIB writer.",
            get("learn_sent"),
        );
        e.single(
            "flowplane_switch_learn_queue_drops_total",
            Kind::Counter,
            "Learn events dropped because the queue was full (the frames were still forwarded).",
            get("learn_dropped"),
        );
        let p = self.published();
        let (st, fib) = (p.writer, p.fib);
        if let Some(modes) = &p.vlans {
            let vids: std::collections::BTreeSet<u16> = modes
                .iter()
                .flat_map(crate::vlan::PortVlans::members)
                .collect();
            let learned = |v: u16| {
                p.learned_per_vlan
                    .iter()
                    .find(|e| e.0 == v)
                    .map_or(0, |e| e.1)
            };
            for (name, kind, help) in [
                (
                    "flowplane_switch_vlan_frames_total",
                    Kind::Counter,
                    "Frames received in the VLAN.",
                ),
                (
                    "flowplane_switch_vlan_flooded_frames_total",
                    Kind::Counter,
                    "Frames flooded in the VLAN (unknown unicast, broadcast, multicast).",
                ),
                (
                    "flowplane_switch_vlan_learned_entries",
                    Kind::Gauge,
                    "Learned FIB entries in the VLAN.",
                ),
            ] {
                e.family(name, kind, help);
                for &v in &vids {
                    let x = match name {
                        "flowplane_switch_vlan_frames_total" => self
                            .workers
                            .iter()
                            .map(|w| w.vlans.rx[v as usize].get())
                            .sum(),
                        "flowplane_switch_vlan_flooded_frames_total" => self
                            .workers
                            .iter()
                            .map(|w| w.vlans.flooded[v as usize].get())
                            .sum(),
                        _ => learned(v),
                    };
                    e.sample(name, &[("vlan", &v.to_string())], x);
                }
            }
        }
        for (name, help, v) in [
            (
                "flowplane_switch_fib_learned_total",
                "MACs learned (inserted by the FIB writer).",
                st.learned,
            ),
            (
                "flowplane_switch_fib_moves_total",
                "MACs that moved to another port.",
                st.moved,
            ),
            (
                "flowplane_switch_fib_aged_total",
                "Learned MACs removed by aging.",
                st.aged,
            ),
            (
                "flowplane_switch_fib_static_kept_total",
                "Learn events ignored because the MAC has a static entry.",
                st.static_kept,
            ),
            (
                "flowplane_switch_fib_full_total",
                "Learn events that found the FIB full (the MAC stays unknown and is flooded).",
                st.fib_full,
            ),
            (
                "flowplane_switch_fib_stale_learn_total",
                "Learn events for a VLAN or port a reload had changed meanwhile (ignored).",
                st.stale,
            ),
            (
                "flowplane_switch_fib_flushed_total",
                "Learned entries removed by reloads (their VLAN gone, or their port left it).",
                st.flushed,
            ),
            (
                "flowplane_switch_fib_port_limit_total",
                "New source MACs refused because their port had its limit of learned MACs (port \
                 security).",
                st.port_limit,
            ),
            (
                "flowplane_switch_fib_move_damped_total",
                "MAC moves ignored because the MAC was pinned for moving too often.",
                st.move_damped,
            ),
            (
                "flowplane_switch_fib_topology_flushed_total",
                "Learned entries removed by spanning-tree topology changes.",
                st.topology_flushed,
            ),
            (
                "flowplane_switch_fib_pinned_total",
                "Times a MAC was pinned for moving between ports too often.",
                st.pinned,
            ),
        ] {
            e.single(name, Kind::Counter, help, v);
        }
        for (name, help, v) in [
            (
                "flowplane_switch_fib_entries",
                "Entries in the FIB (static, preloaded and learned).",
                fib.len as u64,
            ),
            (
                "flowplane_switch_fib_slots",
                "Slots of the FIB's cuckoo table.",
                fib.slots as u64,
            ),
            (
                "flowplane_switch_fib_bytes",
                "Bytes of the FIB (slots and version counters).",
                (fib.table_bytes + fib.version_bytes) as u64,
            ),
            (
                "flowplane_switch_static_entries",
                "Static entries (--static, or the configuration file's).",
                p.statics.len() as u64,
            ),
            (
                "flowplane_switch_preloaded_entries",
                "Entries preloaded from --fib.",
                self.preloaded as u64,
            ),
            (
                "flowplane_switch_aging_seconds",
                "Aging time of learned entries.",
                p.aging.as_secs(),
            ),
            (
                "flowplane_switch_config_generation",
                "Configuration generation: 1 at start, one more per reload applied.",
                p.generation,
            ),
            (
                "flowplane_switch_learn_queue_capacity",
                "Capacity of the learn-event queue.",
                self.learn_queue as u64,
            ),
        ] {
            e.single(name, Kind::Gauge, help, v);
        }
        if let Some(t) = &p.stp {
            stp_metrics(e, &self.names, t);
        }
        e.single(
            "flowplane_switch_pinned_macs",
            Kind::Gauge,
            "MACs pinned to their port now for moving too often.",
            p.pinned.len() as u64,
        );
        let name = "flowplane_switch_port_learned_macs";
        e.family(name, Kind::Gauge, "Learned MACs on the port.");
        for (i, n) in self.names.iter().enumerate() {
            let v = p.per_port.get(i).map_or(0, |x| x.0);
            e.sample(
                name,
                &[("port", &i.to_string()), ("interface", n)],
                v as u64,
            );
        }
        let name = "flowplane_switch_port_mac_limit";
        e.family(
            name,
            Kind::Gauge,
            "The port's limit of learned MACs (port security; ports without one are left out).",
        );
        for (i, n) in self.names.iter().enumerate() {
            if let Some(max) = p.per_port.get(i).and_then(|x| x.1) {
                e.sample(
                    name,
                    &[("port", &i.to_string()), ("interface", n)],
                    max as u64,
                );
            }
        }
        let r = &self.restored;
        e.family(
            "flowplane_switch_takeover",
            Kind::Gauge,
            "How this process started: 1 for warm (the previous run's learned FIB entries \
             restored) or cold (none: first start, a crash, another file layout).",
        );
        let warm = r.cold_reason.is_none();
        e.sample(
            "flowplane_switch_takeover",
            &[("kind", "warm")],
            warm as u64,
        );
        e.sample(
            "flowplane_switch_takeover",
            &[("kind", "cold")],
            !warm as u64,
        );
        e.family(
            "flowplane_switch_takeover_entries",
            Kind::Gauge,
            "The previous run's learned FIB entries at this start: read, restored, dropped because \
             their port is not configured, aged out meanwhile, or refused by a full FIB.",
        );
        for (result, n) in [
            ("read", r.read),
            ("restored", r.restored),
            ("port_gone", r.port_gone),
            ("aged", r.aged),
            ("full", r.full),
        ] {
            e.sample(
                "flowplane_switch_takeover_entries",
                &[("result", result)],
                n,
            );
        }
    }

    fn status(&self, s: &mut String) {
        let p = self.published();
        for (i, n) in self.names.iter().enumerate() {
            match p.vlans.as_ref().map(|m| &m[i]) {
                Some(m) => {
                    let _ = writeln!(s, "port {i}: {n} ({m})");
                }
                None => {
                    let _ = writeln!(s, "port {i}: {n}");
                }
            }
        }
        if p.vlans.is_none() {
            let _ = writeln!(
                s,
                "vlans: none (VLAN-unaware: frames switched by MAC alone)"
            );
        }
        let fib = p.fib;
        let _ = writeln!(
            s,
            "fib: {} entries of {} slots (capacity asked {}, {} layout, {:.2} bytes/entry), {} \
             pages; aging {:?}; learn queue {}; configuration generation {}",
            fib.len,
            fib.slots,
            self.fib_capacity,
            fib.layout,
            fib.bytes_per_entry(),
            fib.pages,
            p.aging,
            self.learn_queue,
            p.generation
        );
        let r = &self.restored;
        match &r.cold_reason {
            Some(why) => {
                let _ = writeln!(s, "start: cold ({why})");
            }
            None => {
                let _ = writeln!(
                    s,
                    "start: warm: {} learned entries restored (of {} read: port gone {}, aged out \
                     {}, FIB full {})",
                    r.restored, r.read, r.port_gone, r.aged, r.full
                );
            }
        }
        if let Some(t) = &p.stp {
            let id = |b: u64| {
                let v = b.to_be_bytes();
                format!(
                    "{}.{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
                    u16::from_be_bytes([v[0], v[1]]),
                    v[2],
                    v[3],
                    v[4],
                    v[5],
                    v[6],
                    v[7]
                )
            };
            let root = match t.root_port {
                None => "this bridge is the root".to_string(),
                Some(r) => format!(
                    "root port {} ({}), root path cost {}",
                    r, self.names[r as usize], t.root_cost
                ),
            };
            let _ = writeln!(
                s,
                "spanning tree: bridge {}, root {}; {root}; {} topology changes",
                id(t.bridge),
                id(t.root),
                t.topology_changes
            );
            for (i, n) in self.names.iter().enumerate() {
                if let Some(ps) = t.ports.get(i) {
                    let _ = writeln!(
                        s,
                        "stp port {i} ({n}): {} {}{}{}, cost {}, bpdus in {} out {}",
                        ps.role,
                        ps.state,
                        if ps.edge { ", edge" } else { "" },
                        if ps.stp { ", 802.1D neighbour" } else { "" },
                        ps.cost,
                        ps.rx,
                        ps.tx
                    );
                }
            }
        }
        for (i, n) in self.names.iter().enumerate() {
            if let Some(&(learned, Some(max))) = p.per_port.get(i) {
                let _ = writeln!(
                    s,
                    "port security {n}: {learned} of at most {max} learned MACs"
                );
            }
        }
        for x in &p.pinned {
            let _ = writeln!(
                s,
                "pinned: {} vlan {} on port {} ({}) for moving too often",
                x.mac, x.vlan, x.port, self.names[x.port as usize]
            );
        }
        for (st, fib) in &p.statics {
            let vlan = match p.vlans {
                Some(_) => format!(" vlan {}", st.vlan),
                None => String::new(),
            };
            let _ = writeln!(
                s,
                "static {}{vlan} -> port {} ({}); fib says {fib:?}",
                st.mac, st.port, self.names[st.port as usize],
            );
        }
    }
}

/// The spanning tree's metric families.
fn stp_metrics(e: &mut Exposition, names: &[String], t: &crate::service::StpView) {
    use crate::stp::{Role, State};
    let name = "flowplane_switch_stp_port_state";
    e.family(
        name,
        Kind::Gauge,
        "1 for the port's spanning-tree state (discarding, learning, forwarding).",
    );
    for (i, n) in names.iter().enumerate() {
        let Some(ps) = t.ports.get(i) else { continue };
        for st in [State::Discarding, State::Learning, State::Forwarding] {
            let label = st.to_string();
            let labels = [
                ("port", i.to_string()),
                ("interface", n.clone()),
                ("state", label),
            ];
            let labels: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
            e.sample(name, &labels, (ps.state == st) as u64);
        }
    }
    let name = "flowplane_switch_stp_port_role";
    e.family(
        name,
        Kind::Gauge,
        "1 for the port's spanning-tree role (root, designated, alternate, backup, disabled).",
    );
    for (i, n) in names.iter().enumerate() {
        let Some(ps) = t.ports.get(i) else { continue };
        for r in [
            Role::Root,
            Role::Designated,
            Role::Alternate,
            Role::Backup,
            Role::Disabled,
        ] {
            let label = r.to_string();
            let labels = [
                ("port", i.to_string()),
                ("interface", n.clone()),
                ("role", label),
            ];
            let labels: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
            e.sample(name, &labels, (ps.role == r) as u64);
        }
    }
    let name = "flowplane_switch_stp_bpdus_total";
    e.family(name, Kind::Counter, "BPDUs received and sent on the port.");
    for (i, n) in names.iter().enumerate() {
        let Some(ps) = t.ports.get(i) else { continue };
        for (dir, v) in [("in", ps.rx), ("out", ps.tx)] {
            e.sample(
                name,
                &[
                    ("port", &i.to_string()),
                    ("interface", n),
                    ("direction", dir),
                ],
                v,
            );
        }
    }
    e.single(
        "flowplane_switch_stp_is_root",
        Kind::Gauge,
        "1 when this switch is the spanning tree's root bridge.",
        (t.root == t.bridge) as u64,
    );
    e.single(
        "flowplane_switch_stp_root_path_cost",
        Kind::Gauge,
        "The root path cost (0 at the root).",
        t.root_cost as u64,
    );
    e.single(
        "flowplane_switch_stp_topology_changes_total",
        Kind::Counter,
        "Topology changes detected or received (each flushes the learned entries of the other ports).",
        t.topology_changes,
    );
}

/// The sFlow exporter's families (`[sflow]`).
fn sflow_metrics(x: &crate::sflow::SflowStats, e: &mut Exposition) {
    use std::sync::atomic::Ordering::Relaxed;
    e.family(
        "flowplane_sflow_samples_total",
        Kind::Counter,
        "sFlow samples sent, by kind: flow (sampled frames) and counters (interface counters).",
    );
    e.sample(
        "flowplane_sflow_samples_total",
        &[("kind", "flow")],
        x.flow_samples.load(Relaxed),
    );
    e.sample(
        "flowplane_sflow_samples_total",
        &[("kind", "counters")],
        x.counter_samples.load(Relaxed),
    );
    e.family(
        "flowplane_sflow_datagrams_total",
        Kind::Counter,
        "sFlow datagrams by result: sent (one per collector) or failed (refused by the socket; not retried).",
    );
    e.sample(
        "flowplane_sflow_datagrams_total",
        &[("result", "sent")],
        x.datagrams.load(Relaxed),
    );
    e.sample(
        "flowplane_sflow_datagrams_total",
        &[("result", "failed")],
        x.failed.load(Relaxed),
    );
    let (waiting, dropped) = x.queues();
    e.single(
        "flowplane_sflow_samples_dropped_total",
        Kind::Counter,
        "Sampled frames the workers dropped because their queue to the exporter was full (sflow.queue); reported to collectors in the samples' drops field.",
        dropped,
    );
    e.single(
        "flowplane_sflow_queue_samples",
        Kind::Gauge,
        "Sampled frames waiting in the workers' queues for the exporter.",
        waiting,
    );
}
