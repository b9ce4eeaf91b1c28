//! Metrics in the Prometheus text exposition format (version 0.0.4), Maglev §4.4's "white box
//! monitoring … via an HTTP server".
//!
//! [`render`] turns a [`MetricsView`] — plain data the control loop collects: the workers' summed
//! counters, per-worker figures, the current snapshot, health states, Maglev table changes — into
//! the text served at `GET /metrics`. Workers keep their counters privately (one writer each) and
//! nothing here touches the data path: the reader sums, the renderer formats.
//!
//! Conventions: every counter ends in `_total`; every family has `# HELP` and `# TYPE` lines and
//! its samples are contiguous; label values are escaped (`\\`, `\"`, `\n`). Counters are emitted
//! even when zero, so `rate()` works from the first scrape. Values that are 64-bit identifiers
//! (the Maglev table digest) go into labels as hex text, since a sample value is a float64.
//! docs/operations.md lists every metric.

use crate::config::VipMatch;
use crate::snapshot::{Published, Snapshot};
use crate::stage::TraceRecord;
use crate::stats::{Outcome, Totals, WorkerStats};
use fp_control::health::BackendHealth;
use fp_control::json;
pub use fp_control::metrics::ReloadCounts;
use fp_control::metrics::{Exposition, Kind};
use fp_control::trace::Record;
use fp_service::View;
use fp_wire::ethernet::MacAddr;
use fp_wire::FlowKey;
use std::collections::BTreeMap;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::Mutex;

/// Figures of one worker that are not counters of [`Totals`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkerMetrics {
    /// Worker id.
    pub worker: usize,
    /// Burst-size histogram: `bursts[n]` counts bursts of `n` packets (`WorkerStats::bursts`).
    pub bursts: Vec<u64>,
    /// Tracked connections (IPv4, IPv6).
    pub connections: (usize, usize),
    /// Connection-table sizes in slots (IPv4, IPv6).
    pub connection_slots: (usize, usize),
    /// Fragments held waiting for their first fragment.
    pub held_fragments: usize,
    /// Generation of the snapshot the worker forwards with.
    pub generation: u64,
    /// The SYN-flood guard's mode (0 normal, 1 rate limit, 2 table pressure).
    pub guard_mode: u64,
}

impl WorkerMetrics {
    /// Worker `worker`'s figures, from the gauges its thread keeps in `stats`.
    pub fn of(worker: usize, stats: &WorkerStats) -> WorkerMetrics {
        let ((c4, c6), (s4, s6)) = stats.occupancy();
        WorkerMetrics {
            worker,
            bursts: stats.bursts(),
            connections: (c4 as usize, c6 as usize),
            connection_slots: (s4 as usize, s6 as usize),
            held_fragments: stats.held_fragments() as usize,
            generation: stats.generation(),
            guard_mode: stats.guard_mode(),
        }
    }
}

/// Maglev table changes of one VIP.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VipTableChanges {
    /// Entries that changed in the most recent update that changed this VIP's table.
    pub last_moved: u64,
    /// Entries changed over all updates.
    pub total_moved: u64,
    /// Updates that changed the table.
    pub updates: u64,
}

/// Maglev table changes per VIP, accumulated over snapshot publications. The control loop calls
/// [`MaglevChanges::record`] with the previous and the new snapshot each time it publishes one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MaglevChanges {
    vips: BTreeMap<String, VipTableChanges>,
}

impl MaglevChanges {
    /// Empty.
    pub fn new() -> MaglevChanges {
        MaglevChanges::default()
    }

    /// Account for publishing `new` after `old` (`None` for the first snapshot, which moves
    /// nothing). VIPs are matched by name. A table that appears or disappears (no healthy backend
    /// before or after) or changes size counts all of its slots as moved; otherwise the moved
    /// entries are the slots whose backend differs (`fp_maglev::Table::diff`). VIPs absent from
    /// `new` are forgotten. Returns the entries moved per VIP by this update (non-zero only).
    pub fn record(&mut self, old: Option<&Snapshot>, new: &Snapshot) -> Vec<(String, u64)> {
        let mut moved = Vec::new();
        let mut next = BTreeMap::new();
        for v in &new.vips {
            let mut c = self.vips.get(&v.name).copied().unwrap_or_default();
            let before = old.and_then(|o| o.vips.iter().find(|x| x.name == v.name));
            let n = match (before.map(|b| b.table.as_ref()), v.table.as_ref()) {
                (None, _) => 0, // a new VIP: nothing moved from anywhere
                (Some(None), None) => 0,
                (Some(None), Some(t)) | (Some(Some(t)), None) => t.size() as u64,
                (Some(Some(a)), Some(b)) => {
                    if a.digest() == b.digest() && a.size() == b.size() {
                        0
                    } else {
                        a.diff(b).map_or(b.size() as u64, |d| d.changed() as u64)
                    }
                }
            };
            if n > 0 {
                c.last_moved = n;
                c.total_moved += n;
                c.updates += 1;
                moved.push((v.name.clone(), n));
            }
            next.insert(v.name.clone(), c);
        }
        self.vips = next;
        moved
    }

    /// The changes of one VIP.
    pub fn get(&self, vip: &str) -> Option<&VipTableChanges> {
        self.vips.get(vip)
    }
}

/// Everything [`render`] reports. The control loop fills it at each scrape.
#[derive(Clone, Copy, Debug)]
pub struct MetricsView<'a> {
    /// Counters summed over workers (`Totals::sum`).
    pub totals: &'a Totals,
    /// Per-worker figures.
    pub workers: &'a [WorkerMetrics],
    /// The snapshot in force (VIP and backend names, health as the data path sees it, tables).
    pub snapshot: &'a Snapshot,
    /// Configuration generation (increases with every committed reload).
    pub config_generation: u64,
    /// Reloads so far.
    pub reloads: ReloadCounts,
    /// Health-check states (`HealthMonitor::states`).
    pub health: &'a [BackendHealth],
    /// Maglev table changes.
    pub maglev: &'a MaglevChanges,
    /// How this start went (warm or cold).
    pub takeover: &'a crate::carry::Takeover,
    /// The flow export's counters (none: no exporter, e.g. offline).
    pub export: Option<&'a crate::export::ExportStats>,
}

/// Upper bounds of the batch-size histogram buckets (`+Inf` added).
const BATCH_BUCKETS: [usize; 7] = [0, 1, 2, 4, 8, 16, 32];

/// How a VIP matches, as label text: the address, or `group/suffix/len` for Maglev §4.2's
/// prefix/suffix VIPs.
fn match_text(s: &Snapshot, m: &VipMatch) -> String {
    match m {
        VipMatch::Exact(a) => a.to_string(),
        VipMatch::Suffix { group, suffix, len } => {
            let g = s
                .config
                .prefix_groups
                .get(*group)
                .map_or("?", |g| g.name.as_str());
            format!("{g}/suffix:{suffix:#x}/{len}")
        }
    }
}

/// A protocol as label text: `tcp`, `udp`, else the number (0 for a VIP of any protocol).
pub(crate) fn proto_text(p: fp_wire::ip::IpProtocol) -> String {
    match p.0 {
        6 => "tcp".into(),
        17 => "udp".into(),
        n => n.to_string(),
    }
}

/// Render the balancer's metric families of `v` in the Prometheus text format (the service
/// runner adds the families every application has: `flowplane_info`, uptime, workers, trace
/// records, the engine's port counters).
pub fn render(v: &MetricsView<'_>, o: &mut Exposition) {
    let t = v.totals;
    let snap = v.snapshot;
    let outcome = |name: &str| -> u64 {
        Outcome::ALL
            .iter()
            .position(|x| x.name() == name)
            .and_then(|i| t.outcomes.get(i).copied())
            .unwrap_or(0)
    };

    // Configuration.
    o.single(
        "flowplane_config_generation",
        Kind::Gauge,
        "Generation of the configuration in force; increases with every committed reload.",
        v.config_generation,
    );
    o.single(
        "flowplane_snapshot_generation",
        Kind::Gauge,
        "Generation of the forwarding snapshot in force; increases with every publication (reloads and health changes).",
        snap.generation,
    );
    o.family(
        "flowplane_config_reloads_total",
        Kind::Counter,
        "Configuration reloads by result: ok (validated and committed) or error (rejected, the running configuration stayed).",
    );
    o.sample(
        "flowplane_config_reloads_total",
        &[("result", "ok")],
        v.reloads.ok,
    );
    o.sample(
        "flowplane_config_reloads_total",
        &[("result", "error")],
        v.reloads.failed,
    );

    // Traffic and outcomes.
    for (name, key, help) in [
        (
            "flowplane_rx_packets_total",
            "rx",
            "Frames received by the workers.",
        ),
        (
            "flowplane_rx_bytes_total",
            "rx_bytes",
            "Bytes received by the workers.",
        ),
        (
            "flowplane_tx_packets_total",
            "tx",
            "Frames sent by the workers.",
        ),
        (
            "flowplane_tx_bytes_total",
            "tx_bytes",
            "Bytes sent by the workers (after encapsulation).",
        ),
    ] {
        o.single(name, Kind::Counter, help, outcome(key));
    }
    o.family(
        "flowplane_drops_total",
        Kind::Counter,
        "Packets dropped, by reason: the worker outcomes named drop_* and the packet parser's error names.",
    );
    for (i, oc) in Outcome::ALL.iter().enumerate() {
        if oc.name().starts_with("drop_") {
            o.sample(
                "flowplane_drops_total",
                &[("reason", oc.name())],
                t.outcomes.get(i).copied().unwrap_or(0),
            );
        }
    }
    for e in fp_wire::Error::ALL {
        o.sample(
            "flowplane_drops_total",
            &[("reason", e.name())],
            t.parse.get(e.index()).copied().unwrap_or(0),
        );
    }
    o.family(
        "flowplane_conn_lookups_total",
        Kind::Counter,
        "Connection-table lookups by result: hit (recorded backend reused), miss (new selection), reselect (recorded backend down or gone). Hit rate = hit / sum.",
    );
    for (res, key) in [
        ("hit", "conn_hit"),
        ("miss", "conn_miss"),
        ("reselect", "conn_reselect"),
    ] {
        o.sample(
            "flowplane_conn_lookups_total",
            &[("result", res)],
            outcome(key),
        );
    }
    let tk = v.takeover;
    o.family(
        "flowplane_takeover",
        Kind::Gauge,
        "How this process started: 1 for warm (the previous run's connection entries carried into its tables) or cold (none: first start, a crash, another file layout); handover is 1 when the warm start was the overlapped handover (the previous process handed its entries over while it forwarded).",
    );
    o.sample("flowplane_takeover", &[("kind", "warm")], tk.warm as u64);
    o.sample("flowplane_takeover", &[("kind", "cold")], !tk.warm as u64);
    o.sample(
        "flowplane_takeover",
        &[("kind", "handover")],
        tk.handover as u64,
    );
    o.family(
        "flowplane_takeover_entries",
        Kind::Gauge,
        "The previous run's connection entries at this start: read from the state directory (or the handover's checkpoint), carried into every worker's tables, dropped because their backend left the configuration, idled out meanwhile, or refused by a full table (summed over workers); delta: entries of the handover's cut-over (seen after its checkpoint).",
    );
    for (result, n) in [
        ("read", tk.read),
        ("delta", tk.delta),
        ("carried", tk.carried),
        ("removed_backend", tk.removed_backend),
        ("expired", tk.expired),
        ("full", tk.full),
    ] {
        o.sample("flowplane_takeover_entries", &[("result", result)], n);
    }
    o.single(
        "flowplane_takeover_gap_seconds",
        Kind::Gauge,
        "Time without forwarding at this start: from the previous run's workers stopping to this run's workers running (0 on a cold start).",
        tk.gap_ms.unwrap_or(0) as f64 / 1000.0,
    );
    o.single(
        "flowplane_takeover_load_seconds",
        Kind::Gauge,
        "Time this start spent putting the carried connection entries into the workers' tables (the slowest worker; they fill theirs in parallel).",
        tk.load_ms as f64 / 1000.0,
    );
    o.family(
        "flowplane_second_chance_total",
        Kind::Counter,
        "Second chance: picked (flows picked up mid-way, no SYN seen, whose VIP's earlier backend set chose another backend), sent (packets naming that backend in the tunnel header), unsent (packets that could not carry the option: no headroom).",
    );
    for (event, key) in [
        ("picked", "second_chance_picked"),
        ("sent", "second_chance_sent"),
        ("unsent", "second_chance_unsent"),
    ] {
        o.sample(
            "flowplane_second_chance_total",
            &[("event", event)],
            outcome(key),
        );
    }
    o.single(
        "flowplane_conn_inserts_total",
        Kind::Counter,
        "Connection entries recorded.",
        outcome("conn_insert"),
    );
    o.single(
        "flowplane_conn_table_full_total",
        Kind::Counter,
        "New connections forwarded without an entry because the connection table was full (Maglev 3.3).",
        outcome("conn_table_full"),
    );
    o.single(
        "flowplane_conn_expired_total",
        Kind::Counter,
        "Connection entries removed after their idle timeout.",
        outcome("conn_expired"),
    );
    o.family(
        "flowplane_syn_guard_bypass_total",
        Kind::Counter,
        "SYNs of new connections balanced by the Maglev hash without a connection entry, by reason: rate (the worker's new_conn_rate reached) or pressure (connection table at 90 % of its slots).",
    );
    for (reason, key) in [
        ("rate", "syn_bypass_rate"),
        ("pressure", "syn_bypass_pressure"),
    ] {
        o.sample(
            "flowplane_syn_guard_bypass_total",
            &[("reason", reason)],
            outcome(key),
        );
    }
    o.family(
        "flowplane_conn_embryonic_total",
        Kind::Counter,
        "Embryonic connection entries (made by a SYN) by fate: confirmed by a later packet of the flow, evicted for a new connection under table pressure, or expired after syn_timeout_ms.",
    );
    for (event, key) in [
        ("confirmed", "conn_confirmed"),
        ("evicted", "conn_evicted"),
        ("expired", "conn_embryonic_expired"),
    ] {
        o.sample(
            "flowplane_conn_embryonic_total",
            &[("event", event)],
            outcome(key),
        );
    }
    o.family(
        "flowplane_mtu_total",
        Kind::Counter,
        "Packets too big for the path MTU once encapsulated, by action: an ICMP fragmentation-needed / packet-too-big error sent to the client, such an error suppressed by the ICMP rate limit, or (IPv4 without DF) the datagram fragmented.",
    );
    for (action, key) in [
        ("icmp_sent", "mtu_icmp_sent"),
        ("icmp_rate_limited", "mtu_icmp_rate_limited"),
        ("fragmented", "mtu_fragmented"),
    ] {
        o.sample("flowplane_mtu_total", &[("action", action)], outcome(key));
    }
    o.family(
        "flowplane_conn_cache_lookups_total",
        Kind::Counter,
        "Connection lookups through the workers' flow caches (balancer.conn_cache_entries), by result: hit (answered by the cache) or miss (looked up in the connection table).",
    );
    for (result, key) in [("hit", "conn_cache_hit"), ("miss", "conn_cache_miss")] {
        o.sample(
            "flowplane_conn_cache_lookups_total",
            &[("result", result)],
            outcome(key),
        );
    }
    o.family(
        "flowplane_quic_cid_total",
        Kind::Counter,
        "QUIC short-header packets to VIPs with quic = true, by result: routed to the backend named by the server id in their connection ID, or the id unknown (or its backend down) and routed by their flow.",
    );
    for (result, key) in [
        ("routed", "quic_cid_routed"),
        ("unknown", "quic_cid_unknown"),
    ] {
        o.sample(
            "flowplane_quic_cid_total",
            &[("result", result)],
            outcome(key),
        );
    }
    o.family(
        "flowplane_fragments_total",
        Kind::Counter,
        "IP fragments by action: forwarded with their datagram's decision, held until the first fragment arrives, redirected to the balancer that owns their datagram, or received as that owner.",
    );
    o.sample(
        "flowplane_fragments_total",
        &[("action", "forwarded")],
        outcome("frag_forwarded"),
    );
    o.sample(
        "flowplane_fragments_total",
        &[("action", "held")],
        outcome("frag_held"),
    );
    o.sample(
        "flowplane_fragments_total",
        &[("action", "redirected")],
        outcome("frag_redirected"),
    );
    o.sample(
        "flowplane_fragments_total",
        &[("action", "redirect_in")],
        outcome("frag_redirect_in"),
    );
    // Outcomes this renderer does not know by name (added to the pipeline later) still show.
    const KNOWN: [&str; 27] = [
        "rx",
        "tx",
        "rx_bytes",
        "tx_bytes",
        "conn_hit",
        "conn_miss",
        "conn_reselect",
        "conn_insert",
        "conn_table_full",
        "conn_expired",
        "frag_forwarded",
        "frag_held",
        "frag_redirected",
        "frag_redirect_in",
        "traced",
        "syn_bypass_rate",
        "syn_bypass_pressure",
        "conn_confirmed",
        "conn_evicted",
        "conn_embryonic_expired",
        "mtu_icmp_sent",
        "mtu_icmp_rate_limited",
        "mtu_fragmented",
        "quic_cid_routed",
        "quic_cid_unknown",
        "conn_cache_hit",
        "conn_cache_miss",
    ];
    let other: Vec<(usize, &Outcome)> = Outcome::ALL
        .iter()
        .enumerate()
        .filter(|(_, x)| !x.name().starts_with("drop_") && !KNOWN.contains(&x.name()))
        .collect();
    if !other.is_empty() {
        o.family(
            "flowplane_worker_events_total",
            Kind::Counter,
            "Other worker outcomes, by name.",
        );
        for (i, x) in other {
            o.sample(
                "flowplane_worker_events_total",
                &[("event", x.name())],
                t.outcomes.get(i).copied().unwrap_or(0),
            );
        }
    }

    // Per worker.
    let ids: Vec<String> = v.workers.iter().map(|w| w.worker.to_string()).collect();
    o.family(
        "flowplane_conn_table_entries",
        Kind::Gauge,
        "Connections tracked in each worker's table, by address family. Occupancy = entries / slots.",
    );
    for (w, id) in v.workers.iter().zip(&ids) {
        o.sample(
            "flowplane_conn_table_entries",
            &[("worker", id), ("family", "ipv4")],
            w.connections.0,
        );
        o.sample(
            "flowplane_conn_table_entries",
            &[("worker", id), ("family", "ipv6")],
            w.connections.1,
        );
    }
    o.family(
        "flowplane_conn_table_slots",
        Kind::Gauge,
        "Capacity of each worker's connection table in slots, by address family.",
    );
    for (w, id) in v.workers.iter().zip(&ids) {
        o.sample(
            "flowplane_conn_table_slots",
            &[("worker", id), ("family", "ipv4")],
            w.connection_slots.0,
        );
        o.sample(
            "flowplane_conn_table_slots",
            &[("worker", id), ("family", "ipv6")],
            w.connection_slots.1,
        );
    }
    o.family(
        "flowplane_syn_guard_mode",
        Kind::Gauge,
        "Each worker's SYN-flood guard: 0 normal (SYNs recorded as embryonic entries), 1 rate limit (new_conn_rate reached: SYNs balanced without an entry), 2 table pressure (likewise, and embryonic entries may be evicted).",
    );
    for (w, id) in v.workers.iter().zip(&ids) {
        o.sample("flowplane_syn_guard_mode", &[("worker", id)], w.guard_mode);
    }
    o.family(
        "flowplane_held_fragments",
        Kind::Gauge,
        "Non-first fragments each worker holds, waiting for their first fragment.",
    );
    for (w, id) in v.workers.iter().zip(&ids) {
        o.sample(
            "flowplane_held_fragments",
            &[("worker", id)],
            w.held_fragments,
        );
    }
    o.family(
        "flowplane_worker_snapshot_generation",
        Kind::Gauge,
        "Snapshot generation each worker forwards with (lags flowplane_snapshot_generation by at most one burst).",
    );
    for (w, id) in v.workers.iter().zip(&ids) {
        o.sample(
            "flowplane_worker_snapshot_generation",
            &[("worker", id)],
            w.generation,
        );
    }
    o.family(
        "flowplane_batch_size",
        Kind::Histogram,
        "Packets per burst each worker processed (dynamic batching; 0 = an empty poll).",
    );
    for (w, id) in v.workers.iter().zip(&ids) {
        let mut cum = 0u64;
        let mut sum = 0u64;
        let mut n_idx = 0usize;
        for le in BATCH_BUCKETS {
            while n_idx <= le && n_idx < w.bursts.len() {
                cum += w.bursts[n_idx];
                sum += w.bursts[n_idx] * n_idx as u64;
                n_idx += 1;
            }
            o.sample(
                "flowplane_batch_size_bucket",
                &[("worker", id), ("le", &le.to_string())],
                cum,
            );
        }
        for (n, &c) in w.bursts.iter().enumerate().skip(n_idx) {
            cum += c;
            sum += c * n as u64;
        }
        o.sample(
            "flowplane_batch_size_bucket",
            &[("worker", id), ("le", "+Inf")],
            cum,
        );
        o.sample("flowplane_batch_size_sum", &[("worker", id)], sum);
        o.sample("flowplane_batch_size_count", &[("worker", id)], cum);
    }

    // Per VIP.
    o.family(
        "flowplane_vip_info",
        Kind::Gauge,
        "Always 1 per configured VIP; labels describe it (match is the address, or group/suffix/length for prefix-suffix VIPs; port 0 = any).",
    );
    for vs in &snap.vips {
        o.sample(
            "flowplane_vip_info",
            &[
                ("vip", &vs.name),
                ("match", &match_text(snap, &vs.matcher)),
                ("port", &vs.port.to_string()),
                ("protocol", &proto_text(vs.protocol)),
                ("encap", &vs.encap.to_string()),
            ],
            1u64,
        );
    }
    let vip_counter =
        |o: &mut Exposition, name: &str, help: &str, pick: fn(&(u64, u64, u64)) -> u64| {
            o.family(name, Kind::Counter, help);
            for vs in &snap.vips {
                let c = t.vip.get(vs.id as usize).map_or(0, pick);
                o.sample(name, &[("vip", &vs.name)], c);
            }
        };
    vip_counter(
        o,
        "flowplane_vip_packets_total",
        "Packets forwarded to each VIP's backends.",
        |c| c.0,
    );
    vip_counter(
        o,
        "flowplane_vip_bytes_total",
        "Bytes forwarded to each VIP's backends (inner packets, before encapsulation).",
        |c| c.1,
    );
    vip_counter(
        o,
        "flowplane_vip_connections_total",
        "Connections assigned (Maglev selections recorded) per VIP.",
        |c| c.2,
    );
    o.family(
        "flowplane_vip_backends",
        Kind::Gauge,
        "Backends of each VIP: configured, healthy (in its Maglev table: receiving new connections), and draining (healthy, keeping their connections, receiving no new ones).",
    );
    for vs in &snap.vips {
        o.sample(
            "flowplane_vip_backends",
            &[("vip", &vs.name), ("state", "configured")],
            vs.members.len(),
        );
        o.sample(
            "flowplane_vip_backends",
            &[("vip", &vs.name), ("state", "healthy")],
            vs.table.as_ref().map_or(0, |t| t.backends().len()),
        );
        o.sample(
            "flowplane_vip_backends",
            &[("vip", &vs.name), ("state", "draining")],
            vs.draining,
        );
    }
    o.family(
        "flowplane_second_chance_earlier_sets",
        Kind::Gauge,
        "Earlier backend sets each VIP keeps (sets before its changes, each for balancer.second_chance_s): packets of flows picked up mid-way that such a set sent elsewhere name that backend in the tunnel header.",
    );
    for vs in &snap.vips {
        o.sample(
            "flowplane_second_chance_earlier_sets",
            &[("vip", &vs.name)],
            vs.earlier.len(),
        );
    }
    o.family(
        "flowplane_maglev_table_info",
        Kind::Gauge,
        "Always 1 per VIP; digest is the Maglev lookup table's 64-bit digest in hex (equal on balancers that agree; \"none\" without a healthy backend), size its entry count.",
    );
    for vs in &snap.vips {
        let (digest, size) = match &vs.table {
            Some(tb) => (format!("{:016x}", tb.digest()), tb.size().to_string()),
            None => ("none".to_string(), "0".to_string()),
        };
        o.sample(
            "flowplane_maglev_table_info",
            &[("vip", &vs.name), ("digest", &digest), ("size", &size)],
            1u64,
        );
    }
    let changes = |name: &str| v.maglev.get(name).copied().unwrap_or_default();
    o.family(
        "flowplane_maglev_entries_moved_total",
        Kind::Counter,
        "Maglev table entries that changed backend, summed over all table updates, per VIP.",
    );
    for vs in &snap.vips {
        o.sample(
            "flowplane_maglev_entries_moved_total",
            &[("vip", &vs.name)],
            changes(&vs.name).total_moved,
        );
    }
    o.family(
        "flowplane_maglev_last_entries_moved",
        Kind::Gauge,
        "Maglev table entries that changed backend in the most recent update that changed the VIP's table.",
    );
    for vs in &snap.vips {
        o.sample(
            "flowplane_maglev_last_entries_moved",
            &[("vip", &vs.name)],
            changes(&vs.name).last_moved,
        );
    }
    o.family(
        "flowplane_maglev_table_updates_total",
        Kind::Counter,
        "Updates (reloads, health changes) that changed the VIP's Maglev table.",
    );
    for vs in &snap.vips {
        o.sample(
            "flowplane_maglev_table_updates_total",
            &[("vip", &vs.name)],
            changes(&vs.name).updates,
        );
    }

    // Per backend.
    let backends: Vec<_> = snap.backends.iter().flatten().collect();
    let addrs: Vec<String> = backends.iter().map(|b| b.address.to_string()).collect();
    o.family(
        "flowplane_backend_info",
        Kind::Gauge,
        "Always 1 per configured backend; name is the name Maglev hashes.",
    );
    for (b, a) in backends.iter().zip(&addrs) {
        o.sample(
            "flowplane_backend_info",
            &[("backend", a), ("name", &b.name)],
            1u64,
        );
    }
    o.family(
        "flowplane_backend_healthy",
        Kind::Gauge,
        "1 if the backend is healthy in the forwarding snapshot, else 0 (a healthy backend receives new connections unless it drains: flowplane_backend_draining).",
    );
    for (b, a) in backends.iter().zip(&addrs) {
        o.sample(
            "flowplane_backend_healthy",
            &[("backend", a)],
            b.healthy as u64,
        );
    }
    o.family(
        "flowplane_backend_draining",
        Kind::Gauge,
        "1 if the backend is draining (weight 0 or drain = true) in some VIP: no new connections there, its tracked connections stay.",
    );
    for (b, a) in backends.iter().zip(&addrs) {
        o.sample(
            "flowplane_backend_draining",
            &[("backend", a)],
            b.draining as u64,
        );
    }
    let backend_counter =
        |o: &mut Exposition, name: &str, help: &str, pick: fn(&(u64, u64, u64)) -> u64| {
            o.family(name, Kind::Counter, help);
            for (b, a) in backends.iter().zip(&addrs) {
                let c = t.backend.get(b.id as usize).map_or(0, pick);
                o.sample(name, &[("backend", a)], c);
            }
        };
    backend_counter(
        o,
        "flowplane_backend_packets_total",
        "Packets forwarded to each backend.",
        |c| c.0,
    );
    backend_counter(
        o,
        "flowplane_backend_bytes_total",
        "Bytes forwarded to each backend (inner packets, before encapsulation).",
        |c| c.1,
    );
    backend_counter(
        o,
        "flowplane_backend_connections_total",
        "Connections assigned to each backend by Maglev selection.",
        |c| c.2,
    );

    // Health checks.
    o.family(
        "flowplane_health_check_up",
        Kind::Gauge,
        "Health-check verdict per checked backend address (1 up, 0 down), after rise/fall; kind is tcp or http.",
    );
    let health_addrs: Vec<String> = v.health.iter().map(|h| h.address.to_string()).collect();
    for (h, a) in v.health.iter().zip(&health_addrs) {
        if let Some(c) = &h.check {
            o.sample(
                "flowplane_health_check_up",
                &[("backend", a), ("kind", c.kind())],
                h.healthy as u64,
            );
        }
    }
    o.family(
        "flowplane_health_checks_total",
        Kind::Counter,
        "Health checks run per backend address, by result.",
    );
    for (h, a) in v.health.iter().zip(&health_addrs) {
        if h.check.is_some() {
            o.sample(
                "flowplane_health_checks_total",
                &[("backend", a), ("result", "success")],
                h.successes,
            );
            o.sample(
                "flowplane_health_checks_total",
                &[("backend", a), ("result", "failure")],
                h.failures,
            );
        }
    }
    o.family(
        "flowplane_health_transitions_total",
        Kind::Counter,
        "Health state changes per backend address (up to down and down to up).",
    );
    for (h, a) in v.health.iter().zip(&health_addrs) {
        o.sample(
            "flowplane_health_transitions_total",
            &[("backend", a)],
            h.transitions,
        );
    }
    if let Some(x) = v.export {
        render_export(x, o);
    }
}

/// What the control thread publishes for the admin server after every change: the reader
/// copies it under a lock held only for the copy, never across a reload.
#[derive(Clone, Debug, Default)]
pub struct ControlState {
    /// The configuration file.
    pub config_path: String,
    /// Configuration generation.
    pub generation: u64,
    /// Reloads so far.
    pub reloads: ReloadCounts,
    /// Health-check states.
    pub health: Vec<BackendHealth>,
    /// Maglev table changes.
    pub maglev: MaglevChanges,
    /// The neighbour MACs last read.
    pub neighbors: HashMap<IpAddr, MacAddr>,
    /// The BGP speaker's session and announcements, when there is one.
    pub bgp: Option<String>,
    /// How this start went: warm (connection entries carried from the previous run) or cold.
    pub takeover: crate::carry::Takeover,
}

/// What the balancer's admin endpoints read: the workers' counters, the published snapshot and
/// the control thread's [`ControlState`].
pub struct LbView {
    /// Each worker's counters.
    pub stats: Vec<Arc<WorkerStats>>,
    /// The snapshots the workers follow.
    pub snapshots: Arc<Published<Snapshot>>,
    /// The control side's state.
    pub control: Arc<Mutex<ControlState>>,
    /// The flow exporter's counters.
    pub export: Arc<crate::export::ExportStats>,
}

impl LbView {
    fn control(&self) -> ControlState {
        self.control
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl View for LbView {
    fn metrics(&self, e: &mut Exposition) {
        let totals = Totals::sum(self.stats.iter().map(|s| &**s));
        let workers: Vec<_> = self
            .stats
            .iter()
            .enumerate()
            .map(|(i, s)| WorkerMetrics::of(i, s))
            .collect();
        let c = self.control();
        let snap = self.snapshots.load();
        render(
            &MetricsView {
                totals: &totals,
                workers: &workers,
                snapshot: &snap,
                config_generation: c.generation,
                reloads: c.reloads,
                health: &c.health,
                maglev: &c.maglev,
                takeover: &c.takeover,
                export: Some(&self.export),
            },
            e,
        );
    }

    fn status(&self, s: &mut String) {
        use std::fmt::Write;
        let c = self.control();
        let snap = self.snapshots.load();
        let _ = writeln!(
            s,
            "config {} generation {} (reloads: {} ok, {} rejected); snapshot {}",
            c.config_path,
            c.generation,
            c.reloads.ok,
            c.reloads.failed,
            self.snapshots.generation(),
        );
        let t = &c.takeover;
        let _ = match &t.cold_reason {
            Some(why) => writeln!(s, "start: cold ({why})"),
            None if !t.warm => writeln!(s, "start: not finished"),
            None if t.handover => writeln!(
                s,
                "start: warm, handed over by the running process: {} connection entries carried \
                 of {} in its checkpoint ({}), {} written since; {} ms without forwarding",
                t.carried,
                t.read,
                t.dropped(),
                t.delta,
                t.gap_ms.unwrap_or(0)
            ),
            None => writeln!(
                s,
                "start: warm, {} connection entries carried of {} read ({}); {} ms without \
                 forwarding",
                t.carried,
                t.read,
                t.dropped(),
                t.gap_ms.unwrap_or(0)
            ),
        };
        for v in &snap.vips {
            let _ = writeln!(
                s,
                "vip {:?}: {} backends, table {}; path MTU {}{}",
                v.name,
                v.members.len(),
                v.table
                    .as_ref()
                    .map_or("none (no healthy backend)".to_string(), |t| format!(
                        "{} slots, digest {:016x}",
                        t.size(),
                        t.digest()
                    )),
                v.mtu,
                if v.quic.is_some() {
                    "; QUIC connection-ID routing"
                } else {
                    ""
                }
            );
        }
        if let Some(b) = &c.bgp {
            let _ = writeln!(s, "bgp: {b}");
        }
        for (i, w) in self.stats.iter().enumerate() {
            let ((c4, c6), (s4, s6)) = w.occupancy();
            let _ = writeln!(
                s,
                "worker {i}: connections {c4} of {s4} slots (IPv4), {c6} of {s6} (IPv6); syn guard {}; snapshot {}",
                crate::stage::GuardMode::from_gauge(w.guard_mode()).name(),
                w.generation()
            );
        }
        for h in &c.health {
            let mac = c
                .neighbors
                .get(&h.address)
                .map_or("unresolved".to_string(), |m| m.to_string());
            let draining = snap
                .backends
                .iter()
                .flatten()
                .any(|b| b.address == h.address && b.draining);
            let _ = writeln!(
                s,
                "backend {h}; mac {mac}{}",
                if draining { "; draining" } else { "" }
            );
        }
    }
}

// The tracer's records as JSON (see `crate::trace` for the fields).
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

#[cfg(test)]
mod tests;

/// The flow export's families (`[ipfix]`).
fn render_export(x: &crate::export::ExportStats, o: &mut Exposition) {
    use std::sync::atomic::Ordering::Relaxed;
    o.family(
        "flowplane_ipfix_records_total",
        Kind::Counter,
        "IPFIX records sent, by kind: created and ended (connections), sampled (packets), options (sampler and exporter statistics).",
    );
    for (kind, c) in [
        ("created", &x.created),
        ("ended", &x.ended),
        ("sampled", &x.sampled),
        ("options", &x.options),
    ] {
        o.sample(
            "flowplane_ipfix_records_total",
            &[("kind", kind)],
            c.load(Relaxed),
        );
    }
    o.family(
        "flowplane_ipfix_messages_total",
        Kind::Counter,
        "IPFIX messages by result: sent (taken by the socket, one per collector) or failed (refused by the socket; not retried).",
    );
    o.sample(
        "flowplane_ipfix_messages_total",
        &[("result", "sent")],
        x.messages.load(Relaxed),
    );
    o.sample(
        "flowplane_ipfix_messages_total",
        &[("result", "failed")],
        x.failed.load(Relaxed),
    );
    let (waiting, dropped) = x.queues();
    o.single(
        "flowplane_ipfix_events_dropped_total",
        Kind::Counter,
        "Flow events the workers dropped because their queue to the exporter was full (ipfix.queue; also while the exporter is held at ipfix.max_records_per_second).",
        dropped,
    );
    o.single(
        "flowplane_ipfix_queue_events",
        Kind::Gauge,
        "Flow events waiting in the workers' queues for the exporter.",
        waiting,
    );
    o.single(
        "flowplane_ipfix_connections_tracked",
        Kind::Gauge,
        "Connections whose start time the exporter holds for their end record.",
        x.starts.load(Relaxed),
    );
    o.single(
        "flowplane_ipfix_ended_without_start_total",
        Kind::Counter,
        "Connection-ended records sent without a start time (entries carried across a restart, or more live connections than the exporter tracks).",
        x.no_start.load(Relaxed),
    );
    o.single(
        "flowplane_ipfix_rate_limited_total",
        Kind::Counter,
        "Times the exporter stopped taking events at ipfix.max_records_per_second with events still waiting (the workers' queues then fill and drop).",
        x.limited.load(Relaxed),
    );
}
