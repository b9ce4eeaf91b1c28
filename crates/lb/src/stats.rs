//! The load balancer's per-worker counters: every outcome and drop reason, per VIP and per
//! backend traffic, burst sizes and table occupancy.
//!
//! Every counter has exactly one writer, the worker that owns it, so an increment is a relaxed load
//! and a relaxed store (two plain `mov`s on x86, no locked read-modify-write). A metrics reader may
//! read them at any time from another thread and sums the workers' values; it sees each counter at
//! some recent value, which is all metrics need. The struct is cache-line aligned so that no two
//! workers' counters share a line.

pub use fp_pipeline::stats::Counter;

macro_rules! outcomes {
    ($( $(#[$m:meta])* $name:ident => $label:literal, )*) => {
        /// Everything a load-balancer worker counts, other than parse errors (see
        /// [`fp_wire::Error`]) and per-VIP / per-backend traffic.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[repr(usize)]
        pub enum Outcome { $( $(#[$m])* $name, )* }

        impl Outcome {
            /// Number of outcomes.
            pub const COUNT: usize = [$(Outcome::$name),*].len();
            /// All outcomes, in index order.
            pub const ALL: [Outcome; Outcome::COUNT] = [$(Outcome::$name),*];
            /// Metrics label.
            pub const fn name(self) -> &'static str {
                match self { $( Outcome::$name => $label, )* }
            }
        }
    };
}

outcomes! {
    /// Frames received by the worker.
    Rx => "rx",
    /// Frames sent.
    Tx => "tx",
    /// Bytes received.
    RxBytes => "rx_bytes",
    /// Bytes sent.
    TxBytes => "tx_bytes",
    /// Dropped: not addressed to any VIP.
    NonVip => "drop_non_vip",
    /// Dropped: a unicast frame addressed to another host's MAC (a bridge flooding it, or a
    /// promiscuous interface); only checked on live interfaces, where the local MAC is known.
    OtherHost => "drop_other_host",
    /// Dropped: the VIP has no healthy backend.
    NoBackend => "drop_no_backend",
    /// Dropped: encapsulation failed (result larger than a buffer).
    EncapFailed => "drop_encap_failed",
    /// Dropped: the output port could not take the packet.
    TxDropped => "drop_tx",
    /// Connection-table hits that reused the recorded backend.
    ConnHit => "conn_hit",
    /// Connection-table misses (new connection or expired entry): Maglev selection.
    ConnMiss => "conn_miss",
    /// Hits whose backend had gone down or left the VIP: re-selected by Maglev.
    ConnReselect => "conn_reselect",
    /// Hits by a SYN on a confirmed entry whose backend still serves: a new connection on the
    /// ports of a recorded one keeps its backend (counted in `ConnHit` too, not as a new
    /// connection of the backend).
    SynReused => "conn_syn_reused",
    /// Connections assigned a backend and recorded: new entries, and entries whose backend
    /// changed (re-selections).
    ConnInsert => "conn_insert",
    /// Connection table full: forwarded by Maglev without an entry (§3.3).
    ConnFull => "conn_table_full",
    /// Entries removed after their idle timeout.
    ConnExpired => "conn_expired",
    /// Fragments forwarded with their datagram's decision.
    FragForwarded => "frag_forwarded",
    /// Non-first fragments held until their first fragment arrives.
    FragHeld => "frag_held",
    /// Dropped: held fragments whose first fragment never came in time.
    FragExpired => "drop_frag_expired",
    /// Dropped: fragment table full.
    FragTableFull => "drop_frag_table_full",
    /// Dropped: too many fragments held for one datagram.
    FragHoldFull => "drop_frag_hold_full",
    /// Packets that carried the tracer mark and were traced.
    Traced => "traced",
    /// Fragments sent on to the balancer that owns their datagram (Maglev §4.3).
    FragRedirected => "frag_redirected",
    /// Fragments another balancer redirected to this one (their owner).
    FragRedirectIn => "frag_redirect_in",
    /// SYNs balanced without an entry: the worker's new-connection rate limit was reached.
    SynBypassRate => "syn_bypass_rate",
    /// SYNs balanced without an entry: the connection table was under pressure.
    SynBypassPressure => "syn_bypass_pressure",
    /// Embryonic entries (made by a SYN) confirmed by a later packet of their flow.
    ConnConfirmed => "conn_confirmed",
    /// Embryonic entries replaced by a new connection's entry in a table under pressure.
    ConnEvicted => "conn_evicted",
    /// Embryonic entries removed after the embryonic timeout (never confirmed).
    ConnEmbryonicExpired => "conn_embryonic_expired",
    /// Dropped: the packet, encapsulated, would exceed the path MTU and its sender did not allow
    /// fragmenting it (DF set, or IPv6); an ICMP error went back unless rate-limited.
    TooBig => "drop_too_big",
    /// ICMP "fragmentation needed" / "packet too big" errors sent to clients.
    MtuIcmpSent => "mtu_icmp_sent",
    /// Such errors not sent: the worker's ICMP rate limit (`balancer.icmp_rate`) was reached.
    MtuIcmpLimited => "mtu_icmp_rate_limited",
    /// IPv4 datagrams without DF cut into fragments that fit the path MTU.
    MtuFragmented => "mtu_fragmented",
    /// Connection lookups answered by the worker's flow cache.
    ConnCacheHit => "conn_cache_hit",
    /// Connection lookups the flow cache could not answer (looked up in the table).
    ConnCacheMiss => "conn_cache_miss",
    /// QUIC short-header packets sent to the backend named by the server id in their connection
    /// ID (QUIC VIPs), whatever their 5-tuple.
    QuicRouted => "quic_cid_routed",
    /// QUIC short-header packets whose server id no backend of the VIP has, or whose backend is
    /// down: routed by their flow like any packet.
    QuicUnknownId => "quic_cid_unknown",
    /// Flows picked up mid-way (no SYN seen, no entry) whose VIP's earlier backend set chose
    /// another backend than the current one: recorded with the second-chance mark.
    SecondChancePicked => "second_chance_picked",
    /// Packets sent naming the earlier set's backend in the outer header (second chance).
    SecondChanceSent => "second_chance_sent",
    /// Packets that should have named earlier backends but went without the option (no
    /// headroom in the buffer).
    SecondChanceUnsent => "second_chance_unsent",
}

/// The counters of one worker.
#[repr(align(64))]
#[derive(Debug)]
pub struct WorkerStats {
    outcomes: [Counter; Outcome::COUNT],
    parse: [Counter; fp_wire::Error::COUNT],
    /// Burst sizes seen: `bursts[n]` counts bursts of `n` packets.
    bursts: [Counter; fp_pipeline::packet::MAX_BURST + 1],
    vip: Box<[TrafficCounters]>,
    backend: Box<[TrafficCounters]>,
    /// Gauges: tracked connections and table slots, IPv4 then IPv6.
    conns: [Counter; 2],
    slots: [Counter; 2],
    /// Gauges: non-first fragments held, and the generation of the snapshot in use.
    held: Counter,
    generation: Counter,
    /// Gauge: the SYN-flood guard's mode (`stage::GuardMode`).
    guard_mode: Counter,
}

/// Packets, bytes and new connections of one VIP or backend.
#[derive(Default, Debug)]
pub struct TrafficCounters {
    /// Packets forwarded.
    pub packets: Counter,
    /// Bytes forwarded (inner packet, before encapsulation).
    pub bytes: Counter,
    /// Connections assigned (Maglev selections).
    pub connections: Counter,
}

impl WorkerStats {
    /// Counters for up to `max_vips` VIPs and `max_backends` backends (ids are dense indices).
    pub fn new(max_vips: usize, max_backends: usize) -> WorkerStats {
        WorkerStats {
            outcomes: std::array::from_fn(|_| Counter::default()),
            parse: std::array::from_fn(|_| Counter::default()),
            bursts: std::array::from_fn(|_| Counter::default()),
            vip: (0..max_vips).map(|_| TrafficCounters::default()).collect(),
            backend: (0..max_backends)
                .map(|_| TrafficCounters::default())
                .collect(),
            conns: Default::default(),
            slots: Default::default(),
            held: Counter::default(),
            generation: Counter::default(),
            guard_mode: Counter::default(),
        }
    }

    /// Count an outcome.
    #[inline(always)]
    pub fn count(&self, o: Outcome, n: u64) {
        self.outcomes[o as usize].add(n);
    }

    /// Count a parse error.
    #[inline(always)]
    pub fn parse_error(&self, e: fp_wire::Error) {
        self.parse[e.index()].inc();
    }

    /// Count a burst of `n` packets.
    #[inline(always)]
    pub fn burst(&self, n: usize) {
        self.bursts[n.min(fp_pipeline::packet::MAX_BURST)].inc();
    }

    /// Per-VIP counters (`None` beyond the configured maximum).
    #[inline(always)]
    pub fn vip(&self, id: usize) -> Option<&TrafficCounters> {
        self.vip.get(id)
    }

    /// Per-backend counters.
    #[inline(always)]
    pub fn backend(&self, id: usize) -> Option<&TrafficCounters> {
        self.backend.get(id)
    }

    /// Record the connection tables' occupancy (IPv4 and IPv6 entries and slots).
    #[inline]
    pub fn set_occupancy(&self, conns: (usize, usize), slots: (usize, usize)) {
        self.conns[0].set(conns.0 as u64);
        self.conns[1].set(conns.1 as u64);
        self.slots[0].set(slots.0 as u64);
        self.slots[1].set(slots.1 as u64);
    }

    /// Connection tables' occupancy: ((IPv4 entries, IPv6 entries), (IPv4 slots, IPv6 slots)).
    pub fn occupancy(&self) -> ((u64, u64), (u64, u64)) {
        (
            (self.conns[0].get(), self.conns[1].get()),
            (self.slots[0].get(), self.slots[1].get()),
        )
    }

    /// Record the fragments held and the snapshot generation in use (the worker's maintenance).
    #[inline]
    pub fn set_state(&self, held_fragments: usize, generation: u64) {
        self.held.set(held_fragments as u64);
        self.generation.set(generation);
    }

    /// Record the SYN-flood guard's mode.
    #[inline]
    pub fn set_guard_mode(&self, mode: u64) {
        self.guard_mode.set(mode);
    }

    /// The SYN-flood guard's mode, as last recorded (`stage::GuardMode::from_gauge`).
    pub fn guard_mode(&self) -> u64 {
        self.guard_mode.get()
    }

    /// Fragments held, as last recorded.
    pub fn held_fragments(&self) -> u64 {
        self.held.get()
    }

    /// Snapshot generation in use, as last recorded.
    pub fn generation(&self) -> u64 {
        self.generation.get()
    }

    /// Value of an outcome counter.
    pub fn outcome(&self, o: Outcome) -> u64 {
        self.outcomes[o as usize].get()
    }

    /// Value of a parse-error counter.
    pub fn parse_errors(&self, e: fp_wire::Error) -> u64 {
        self.parse[e.index()].get()
    }

    /// Burst-size histogram.
    pub fn bursts(&self) -> Vec<u64> {
        self.bursts.iter().map(Counter::get).collect()
    }

    /// Number of VIP counter slots.
    pub fn vip_slots(&self) -> usize {
        self.vip.len()
    }

    /// Number of backend counter slots.
    pub fn backend_slots(&self) -> usize {
        self.backend.len()
    }
}

/// Counters summed over workers (a snapshot for reports).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// Outcome counters, indexed by [`Outcome`].
    pub outcomes: Vec<u64>,
    /// Parse errors, indexed by [`fp_wire::Error::index`].
    pub parse: Vec<u64>,
    /// (packets, bytes, connections) per VIP id.
    pub vip: Vec<(u64, u64, u64)>,
    /// (packets, bytes, connections) per backend id.
    pub backend: Vec<(u64, u64, u64)>,
    /// Burst-size histogram.
    pub bursts: Vec<u64>,
}

impl Totals {
    /// Sum the counters of several workers.
    pub fn sum<'a>(workers: impl IntoIterator<Item = &'a WorkerStats>) -> Totals {
        let mut t = Totals {
            outcomes: vec![0; Outcome::COUNT],
            parse: vec![0; fp_wire::Error::COUNT],
            vip: Vec::new(),
            backend: Vec::new(),
            bursts: vec![0; fp_pipeline::packet::MAX_BURST + 1],
        };
        let add3 = |dst: &mut Vec<(u64, u64, u64)>, src: &[TrafficCounters]| {
            if dst.len() < src.len() {
                dst.resize(src.len(), (0, 0, 0));
            }
            for (d, s) in dst.iter_mut().zip(src) {
                d.0 += s.packets.get();
                d.1 += s.bytes.get();
                d.2 += s.connections.get();
            }
        };
        for w in workers {
            for (d, s) in t.outcomes.iter_mut().zip(&w.outcomes) {
                *d += s.get();
            }
            for (d, s) in t.parse.iter_mut().zip(&w.parse) {
                *d += s.get();
            }
            for (d, s) in t.bursts.iter_mut().zip(&w.bursts) {
                *d += s.get();
            }
            add3(&mut t.vip, &w.vip);
            add3(&mut t.backend, &w.backend);
        }
        t
    }

    /// An outcome's total.
    pub fn get(&self, o: Outcome) -> u64 {
        self.outcomes[o as usize]
    }

    /// All parse errors.
    pub fn parse_total(&self) -> u64 {
        self.parse.iter().sum()
    }

    /// Drops by reason (non-zero only), parse errors included, as (label, count).
    pub fn drops(&self) -> Vec<(&'static str, u64)> {
        let mut v: Vec<(&'static str, u64)> = Outcome::ALL
            .iter()
            .filter(|o| o.name().starts_with("drop_"))
            .map(|&o| (o.name(), self.get(o)))
            .chain(
                fp_wire::Error::ALL
                    .iter()
                    .map(|e| (e.name(), self.parse[e.index()])),
            )
            .filter(|&(_, n)| n > 0)
            .collect();
        v.sort_by_key(|d| std::cmp::Reverse(d.1));
        v
    }

    /// [`Totals::drops`] on one line: `reason count, …`, or `none`.
    pub fn drops_line(&self) -> String {
        let drops: Vec<String> = self
            .drops()
            .iter()
            .map(|(r, n)| format!("{r} {n}"))
            .collect();
        if drops.is_empty() {
            "none".into()
        } else {
            drops.join(", ")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_sums() {
        let a = WorkerStats::new(2, 3);
        let b = WorkerStats::new(2, 3);
        a.count(Outcome::Rx, 5);
        b.count(Outcome::Rx, 2);
        a.parse_error(fp_wire::Error::Ipv4Truncated);
        a.vip(1).unwrap().packets.add(4);
        b.backend(2).unwrap().connections.inc();
        let t = Totals::sum([&a, &b]);
        assert_eq!(t.get(Outcome::Rx), 7);
        assert_eq!(t.parse_total(), 1);
        assert_eq!(t.vip[1].0, 4);
        assert_eq!(t.backend[2].2, 1);
        assert_eq!(t.drops(), vec![(fp_wire::Error::Ipv4Truncated.name(), 1)]);
        assert!(a.vip(2).is_none());
        assert_eq!(std::mem::align_of::<WorkerStats>(), 64);
    }

    #[test]
    fn outcome_names_are_unique() {
        let mut names: Vec<_> = Outcome::ALL.iter().map(|o| o.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), Outcome::COUNT);
    }
}
