//! What the switch's admin endpoints read (`fp_service::View`): its metric families, its lines
//! of `/status`, and the tracer records' JSON. Counters come from the workers (single-writer
//! atomics), the FIB writer's figures from what its tick publishes: nothing here waits for the
//! control thread.

use crate::service::{Published, WorkerCounters};
use crate::stage::SwitchRecord;
use fp_control::json;
use fp_control::metrics::{Exposition, Kind};
use fp_control::trace::Record;
use fp_cuckoo::CompactReader;
use fp_service::View;
use fp_wire::ethernet::MacAddr;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

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
            ",\"src\":\"{}\",\"dst\":\"{}\",\"fib\":{},\"decision\":\"{}\",\"out_ports\":{:?},\"out_interfaces\":[",
            self.src,
            self.dst,
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
    pub(crate) fib: CompactReader,
    pub(crate) statics: Vec<(MacAddr, u16)>,
    pub(crate) preloaded: usize,
    pub(crate) fib_capacity: usize,
    pub(crate) aging: Duration,
    pub(crate) learn_queue: usize,
    /// How this start went with the previous run's learned entries.
    pub(crate) restored: crate::carry::Restored,
}

impl SwitchView {
    fn published(&self) -> Published {
        *self.published.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl View for SwitchView {
    fn metrics(&self, e: &mut Exposition) {
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
                "Static entries from --static.",
                self.statics.len() as u64,
            ),
            (
                "flowplane_switch_preloaded_entries",
                "Entries preloaded from --fib.",
                self.preloaded as u64,
            ),
            (
                "flowplane_switch_aging_seconds",
                "Aging time of learned entries.",
                self.aging.as_secs(),
            ),
            (
                "flowplane_switch_learn_queue_capacity",
                "Capacity of the learn-event queue.",
                self.learn_queue as u64,
            ),
        ] {
            e.single(name, Kind::Gauge, help, v);
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
        for (i, n) in self.names.iter().enumerate() {
            let _ = writeln!(s, "port {i}: {n}");
        }
        let fib = self.published().fib;
        let _ = writeln!(
            s,
            "fib: {} entries of {} slots (capacity asked {}), {} pages; aging {:?}; learn queue {}",
            fib.len, fib.slots, self.fib_capacity, fib.pages, self.aging, self.learn_queue
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
        for &(m, p) in &self.statics {
            let _ = writeln!(
                s,
                "static {m} -> port {p} ({}); fib says {:?}",
                self.names[p as usize],
                self.fib.get(m.to_u64())
            );
        }
    }
}
