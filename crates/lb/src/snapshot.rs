//! What the workers read: an immutable [`Snapshot`] of the configuration, backend health and the
//! Maglev tables, built off the data path and published atomically.
//!
//! The control side (the single writer) owns a [`Builder`]: it keeps the stable backend ids (an
//! address keeps its id across configuration changes, so connection entries stay meaningful) and
//! the health of every backend, and turns (config, health) into a new `Snapshot`, rebuilding the
//! Maglev table of each VIP from its *healthy* backends. [`Published`] hands the newest snapshot
//! to the workers: a worker checks one atomic generation number per batch and only takes the
//! (uncontended, rare) lock when it changed. No packet ever sees half of a configuration: a batch
//! runs entirely against the snapshot it started with.

use crate::config::{EncapKind, LbConfig, VipMatch};
use fp_wire::encap::{Encap, EncapTemplate, OuterIp, OuterL2, Tunnel};
use fp_wire::ethernet::MacAddr;
use fp_wire::ip::IpProtocol;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The VIP maps: std's hash map with foldhash, a fast process-local hasher (these maps never leave
/// the process, and their keys are the configuration's VIPs, not packet fields an attacker picks).
type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
type FastSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;

/// A backend's runtime state.
#[derive(Clone, Debug)]
pub struct BackendState {
    /// Stable id (index into [`Snapshot::backends`]).
    pub id: u32,
    /// Address.
    pub address: IpAddr,
    /// Maglev name.
    pub name: String,
    /// Healthy (health checks, or an operator's mark).
    pub healthy: bool,
    /// Draining in some VIP (`weight = 0` or `drain = true`): no new connections there.
    pub draining: bool,
    /// MAC, if configured.
    pub mac: Option<MacAddr>,
}

/// A VIP's runtime state.
#[derive(Debug)]
pub struct VipState {
    /// Dense id (index into [`Snapshot::vips`]).
    pub id: u32,
    /// Name.
    pub name: String,
    /// Matching rule.
    pub matcher: VipMatch,
    /// Port (0 = any).
    pub port: u16,
    /// Protocol.
    pub protocol: IpProtocol,
    /// Encapsulation.
    pub encap: EncapKind,
    /// The Maglev table over the healthy backends that are not draining (`None` when there is
    /// none): where new connections go.
    pub table: Option<fp_maglev::Table>,
    /// Backend id of each Maglev table backend index.
    pub table_ids: Vec<u32>,
    /// Bitmap over backend ids: healthy members of this VIP, draining ones included (what a
    /// tracked connection may keep).
    member_bits: Vec<u64>,
    /// Bitmap over backend ids: healthy members that are draining.
    drain_bits: Vec<u64>,
    /// Every configured backend id of the VIP (healthy or not).
    pub members: Vec<u32>,
    /// Healthy members that are draining.
    pub draining: usize,
    /// IP MTU of the path toward the backends (`vip.mtu`, `balancer.mtu`, the interface's, or
    /// 1500).
    pub mtu: u16,
    /// QUIC connection-ID routing, on a VIP with `quic = true`.
    pub quic: Option<QuicRoute>,
    /// Encapsulation toward each member, indexed by backend id (built once per snapshot).
    encaps: Vec<Option<Prebuilt>>,
    /// The VIP's earlier Maglev tables whose second-chance windows last, oldest first (empty
    /// without second chance, or when the backend set has not changed within the window).
    pub earlier: Vec<Earlier>,
}

/// One backend Maglev deals a VIP's new connections to: what its table is built from.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Selected {
    /// Address (the backend's identity across configurations and processes).
    pub address: IpAddr,
    /// The name Maglev hashes.
    pub name: String,
    /// Weight.
    pub weight: u32,
}

/// A VIP's selectable backends, in configuration order.
pub type Selection = Vec<Selected>;

/// A Maglev table a VIP dealt new connections from before its backend set changed: for a flow
/// the balancer has no entry for, the backend it most likely lived on (second chance).
#[derive(Debug)]
pub struct Earlier {
    /// The set's id (1..=[`MAX_SET_ID`], unique among the VIP's kept sets): a connection entry
    /// made for a flow picked up mid-way keeps the id of the set that named its backend, so
    /// later changes do not change the name.
    pub id: u8,
    table: Arc<fp_maglev::Table>,
    /// Address of each table backend index; `None` where that backend no longer serves the VIP
    /// (a packet sent there would be lost: its connections ended with it).
    addrs: Vec<Option<IpAddr>>,
}

/// Largest earlier-set id (ids live in 6 bits of a connection entry; 0 means none).
pub const MAX_SET_ID: u8 = 63;
/// Earlier sets a VIP keeps at most (the oldest goes first).
pub const MAX_EARLIER: usize = 8;

impl VipState {
    /// The newest earlier set: the one a flow picked up now is checked against.
    #[inline(always)]
    pub fn newest_earlier(&self) -> Option<&Earlier> {
        self.earlier.last()
    }

    /// The earlier set with `id`, while it is kept.
    #[inline(always)]
    pub fn earlier_set(&self, id: u8) -> Option<&Earlier> {
        self.earlier.iter().find(|e| e.id == id)
    }
}

impl Earlier {
    /// The backend the earlier table chose for `flow_hash`, if it still serves the VIP.
    #[inline(always)]
    pub fn choice(&self, flow_hash: u64) -> Option<IpAddr> {
        let k = self.table.entries()[self.table.slot(flow_hash)];
        self.addrs[k as usize]
    }
}

/// A VIP's backend sets as the builder last saw them: the current one, and the earlier ones
/// (oldest first) with the time each one's second-chance window ends. What [`Builder::sets`]
/// gives and [`Builder::restore`] takes, so a successor process can give second chance for the
/// flows its predecessor tracked.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct VipSets {
    /// The backends new connections are dealt to.
    pub current: Selection,
    /// Sets before the last changes, while their windows last, each with its window's end
    /// (milliseconds since the Unix epoch).
    pub earlier: Vec<(Selection, u64)>,
}

/// A VIP's earlier selection as the builder keeps it.
#[derive(Clone, Debug)]
struct EarlierSet {
    id: u8,
    selection: Selection,
    table: Arc<fp_maglev::Table>,
    until: Instant,
    until_unix_ms: u64,
}

/// Keep `selection` (with its table) as the newest of `sets` for `left`: a fresh id, the oldest
/// set dropped beyond [`MAX_EARLIER`].
fn push_earlier(
    sets: &mut Vec<EarlierSet>,
    next_id: &mut u8,
    selection: Selection,
    table: fp_maglev::Table,
    left: Duration,
) {
    if sets.len() >= MAX_EARLIER {
        sets.remove(0);
    }
    // The next id in 1..=MAX_SET_ID that no kept set has (at most MAX_EARLIER are taken).
    let mut id = *next_id;
    while id == 0 || sets.iter().any(|e| e.id == id) {
        id = if id >= MAX_SET_ID { 1 } else { id + 1 };
    }
    *next_id = if id >= MAX_SET_ID { 1 } else { id + 1 };
    let until = Instant::now() + left;
    sets.push(EarlierSet {
        id,
        selection,
        table: Arc::new(table),
        until,
        until_unix_ms: unix_ms(until),
    });
}

/// The Maglev table of a selection.
fn table_of(
    maglev: &fp_maglev::Config,
    sel: &[Selected],
) -> Result<fp_maglev::Table, fp_maglev::Error> {
    let mb: Vec<fp_maglev::Backend> = sel
        .iter()
        .map(|s| fp_maglev::Backend::weighted(s.name.clone(), s.weight))
        .collect();
    fp_maglev::Table::build(maglev, &mb)
}

fn unix_ms(t: Instant) -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let ahead = t.saturating_duration_since(Instant::now());
    (now + ahead).as_millis() as u64
}

/// A QUIC VIP's routing by server id: where the id lies in a short-header packet's destination
/// connection ID, and which backend (id) each configured server id names.
#[derive(Debug)]
pub struct QuicRoute {
    /// The id's place in the connection ID.
    pub layout: crate::config::QuicIdLayout,
    ids: FastMap<u32, u32>,
}

impl QuicRoute {
    /// The backend a QUIC packet (the UDP payload) is addressed to by its connection ID: found
    /// only for a short-header packet whose server id is configured; a long header (the
    /// handshake, routed by its flow) is [`QuicMiss::NotShort`], a payload too short to hold the
    /// id or an id no backend has is [`QuicMiss::UnknownId`].
    #[inline]
    pub fn backend(&self, udp_payload: &[u8]) -> Result<u32, QuicMiss> {
        let first = *udp_payload.first().ok_or(QuicMiss::NotShort)?;
        // Header form 0 (short) with the fixed bit set (RFC 9000 §17.3).
        if first & 0xC0 != 0x40 {
            return Err(QuicMiss::NotShort);
        }
        let start = 1 + self.layout.offset as usize;
        let bytes = udp_payload
            .get(start..start + self.layout.len as usize)
            .ok_or(QuicMiss::UnknownId)?;
        let id = bytes.iter().fold(0u32, |a, &b| a << 8 | b as u32);
        self.ids.get(&id).copied().ok_or(QuicMiss::UnknownId)
    }
}

/// Why [`QuicRoute::backend`] names no backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuicMiss {
    /// A long-header packet (or not QUIC at all): routed by its flow.
    NotShort,
    /// A short-header packet whose server id no backend of the VIP has.
    UnknownId,
}

/// The outer headers toward one backend: the general recipe, and its precomputed template when
/// the encapsulation has one (IPv4 outer with plain GRE or IPIP).
#[derive(Clone, Copy, Debug)]
pub struct Prebuilt {
    /// The recipe.
    pub encap: Encap,
    /// The fast path for it, if any.
    pub template: Option<EncapTemplate>,
    /// Largest inner IP packet that fits the path MTU once encapsulated: the VIP's MTU minus the
    /// outer IP and tunnel headers (the MTU itself for L2 DSR, which adds none).
    pub max_inner: u16,
}

impl VipState {
    /// Whether backend `id` currently serves this VIP.
    #[inline(always)]
    pub fn serves(&self, id: u32) -> bool {
        self.member_bits
            .get(id as usize / 64)
            .is_some_and(|w| w >> (id % 64) & 1 == 1)
    }

    /// Whether backend `id` is a draining member of this VIP (keeps its connections, gets no new
    /// ones).
    #[inline(always)]
    pub fn drains(&self, id: u32) -> bool {
        self.drain_bits
            .get(id as usize / 64)
            .is_some_and(|w| w >> (id % 64) & 1 == 1)
    }

    /// The encapsulation toward backend `id`, if it is a member of the VIP.
    #[inline(always)]
    pub fn encap(&self, id: u32) -> Option<&Prebuilt> {
        self.encaps.get(id as usize).and_then(|e| e.as_ref())
    }

    /// Maglev selection: the backend id for a flow hash, if any backend is healthy.
    #[inline(always)]
    pub fn select(&self, flow_hash: u64) -> Option<(u32, u32)> {
        let t = self.table.as_ref()?;
        let slot = t.slot(flow_hash);
        Some((self.table_ids[t.entries()[slot] as usize], slot as u32))
    }

    /// Prefetch the Maglev entry [`select`](Self::select) will read for `flow_hash`: the table
    /// (128 KiB at M = 65537) is out of L1 and L2 while a burst of new connections walks the
    /// connection table.
    #[inline(always)]
    pub fn prefetch_select(&self, flow_hash: u64) {
        if let Some(t) = self.table.as_ref() {
            fp_hash::prefetch_read(t.entries().as_ptr().wrapping_add(t.slot(flow_hash)));
        }
    }
}

/// Exact-VIP key of an IPv4 destination: address, port and protocol in one integer.
#[inline(always)]
fn key4(a: std::net::Ipv4Addr, port: u16, proto: u8) -> u64 {
    (a.to_bits() as u64) << 24 | (port as u64) << 8 | proto as u64
}

/// Exact-VIP key of an IPv6 destination.
#[inline(always)]
fn key6(a: std::net::Ipv6Addr, port: u16, proto: u8) -> (u128, u32) {
    (a.to_bits(), (port as u32) << 8 | proto as u32)
}

/// A prefix group at run time: its prefixes, and its suffix VIPs as (VIP id, suffix, suffix length),
/// longest suffix first.
#[derive(Debug)]
struct GroupState {
    prefixes: Vec<crate::config::Prefix>,
    suffixes: Vec<(u32, u128, u8)>,
}

/// The immutable view workers forward with.
#[derive(Debug)]
pub struct Snapshot {
    /// Generation: increases with every publication.
    pub generation: u64,
    /// The configuration it was built from.
    pub config: Arc<LbConfig>,
    /// VIPs by id.
    pub vips: Vec<VipState>,
    /// Backends by stable id (`None` for ids of backends no longer configured).
    pub backends: Vec<Option<BackendState>>,
    exact4: FastMap<u64, u32>,
    exact6: FastMap<(u128, u32), u32>,
    /// (address, protocol) pairs that some exact VIP uses, for non-first fragments (no port).
    exact_addrs: FastSet<(IpAddr, u8)>,
    groups: Vec<GroupState>,
    /// Fragment redirection to owner balancers, from `[cluster]`.
    pub cluster: Option<ClusterState>,
    /// The interface's MAC when it is known ([`Builder::set_local_mac`]): unicast frames to any
    /// other MAC are not this balancer's to forward.
    pub local_mac: Option<MacAddr>,
}

/// Where fragments go in a scale-out deployment (Maglev §4.3): the owner of a datagram is a hash
/// of its 3-tuple over the configured balancers, so all its fragments meet on one balancer
/// whichever balancers the router's ECMP hash sent them to.
#[derive(Debug)]
pub struct ClusterState {
    /// This balancer's index in `balancers`.
    pub me: usize,
    /// Every balancer's address, in configuration order (equal on every balancer).
    pub balancers: Vec<std::net::Ipv4Addr>,
    /// Outer Ethernet header toward each balancer; `None` while its MAC is not in the neighbour
    /// table.
    l2: Vec<Option<OuterL2>>,
    src4: Option<std::net::Ipv4Addr>,
    src6: Option<std::net::Ipv6Addr>,
    ttl: u8,
    seed: u64,
}

/// Salt of the owner hash, so it is independent of the flow hash that picks backends.
const OWNER_SALT: u64 = 0x6f77_6e65_7266_7261;

impl ClusterState {
    /// Index of the balancer that owns a datagram with this 3-tuple.
    #[inline]
    pub fn owner(&self, t: &fp_wire::ThreeTuple) -> usize {
        let mut b = [0u8; fp_wire::flow::MAX_KEY_LEN];
        let h = fp_hash::hash_bytes(self.seed ^ OWNER_SALT, t.encode(&mut b));
        fp_hash::reduce(h, self.balancers.len() as u64) as usize
    }

    /// Whether balancer `i`'s MAC is known, so a fragment can be sent to it. (Through the
    /// gateway it would not reach that balancer: the router picks an ECMP next hop by the outer
    /// header.)
    #[inline]
    pub fn reachable(&self, i: usize) -> bool {
        self.l2.get(i).is_some_and(Option::is_some)
    }

    /// The GRE encapsulation (recursion control 1: redirected once, never again) that carries a
    /// fragment addressed to `vip` to balancer `owner`. The outer destination is the VIP itself,
    /// sent to the owner's MAC: the owner's port steers VIP traffic to its workers (the AF_XDP
    /// program by destination address), and no kernel sees a tunnel to a local address. `None`
    /// when there is no outer source address of the VIP's family or the owner is not
    /// [`reachable`](Self::reachable).
    pub fn redirect(&self, owner: usize, vip: IpAddr) -> Option<Encap> {
        let ip = match vip {
            IpAddr::V4(dst) => OuterIp::V4 {
                src: self.src4?,
                dst,
                ttl: self.ttl,
            },
            IpAddr::V6(dst) => OuterIp::V6 {
                src: self.src6?,
                dst,
                hop_limit: self.ttl,
            },
        };
        Some(Encap {
            l2: (*self.l2.get(owner)?)?,
            ip,
            tunnel: Tunnel::Gre {
                key: None,
                sequence: None,
                checksum: false,
                recursion: 1,
            },
        })
    }
}

impl Snapshot {
    /// Match a destination to a VIP. `port = None` for non-first fragments: any VIP on the address
    /// and protocol matches (the datagram's first fragment decides the real one).
    #[inline]
    pub fn match_vip(&self, dst: IpAddr, port: Option<u16>, proto: IpProtocol) -> Option<u32> {
        match port {
            Some(p) => {
                let hit = match dst {
                    IpAddr::V4(a) => self
                        .exact4
                        .get(&key4(a, p, proto.0))
                        .or_else(|| self.exact4.get(&key4(a, 0, proto.0))),
                    IpAddr::V6(a) => self
                        .exact6
                        .get(&key6(a, p, proto.0))
                        .or_else(|| self.exact6.get(&key6(a, 0, proto.0))),
                };
                if let Some(&v) = hit {
                    return Some(v);
                }
            }
            None => {
                if self.exact_addrs.contains(&(dst, proto.0)) {
                    return Some(u32::MAX);
                }
            }
        }
        if self.groups.is_empty() {
            return None;
        }
        self.match_suffix(dst, port, proto)
    }

    #[cold]
    fn match_suffix(&self, dst: IpAddr, port: Option<u16>, proto: IpProtocol) -> Option<u32> {
        // Longest prefix over all groups, then longest suffix within that group (Maglev §4.2).
        let mut best: Option<(usize, u8)> = None;
        for (g, group) in self.groups.iter().enumerate() {
            for p in &group.prefixes {
                if p.contains(dst) && best.is_none_or(|(_, l)| p.len > l) {
                    best = Some((g, p.len));
                }
            }
        }
        let (g, _) = best?;
        let host = crate::config::low_bits(dst, 128);
        self.groups[g]
            .suffixes
            .iter()
            .find_map(|&(id, suffix, len)| {
                let v = &self.vips[id as usize];
                let port_ok = match port {
                    Some(p) => v.port == 0 || v.port == p,
                    None => true,
                };
                let mask = if len >= 128 {
                    u128::MAX
                } else {
                    (1u128 << len) - 1
                };
                (port_ok && v.protocol == proto && host & mask == suffix).then_some(id)
            })
    }

    /// The encapsulation toward a backend of a VIP.
    #[inline]
    pub fn encap(&self, vip: u32, backend: u32) -> Option<&Prebuilt> {
        self.vips.get(vip as usize)?.encap(backend)
    }

    /// A backend's state.
    #[inline]
    pub fn backend(&self, id: u32) -> Option<&BackendState> {
        self.backends.get(id as usize).and_then(|b| b.as_ref())
    }
}

/// Turns configurations and health into snapshots, keeping backend ids stable. Control side only.
/// A reload checks a new configuration with [`Builder::check`] (nothing is built or changed) and
/// builds its snapshot once, when it commits.
#[derive(Clone, Debug, Default)]
pub struct Builder {
    ids: HashMap<IpAddr, u32>,
    health: HashMap<IpAddr, bool>,
    neighbors: HashMap<IpAddr, MacAddr>,
    local_mac: Option<MacAddr>,
    interface_mtu: Option<u16>,
    generation: u64,
    /// Snapshots built by this builder and its copies.
    builds: Arc<std::sync::atomic::AtomicU64>,
    /// Each VIP's selection in the last snapshot built (by VIP name).
    selections: HashMap<String, Selection>,
    /// Each VIP's earlier selection, its table and the end of its second-chance window (as an
    /// instant, and in ms since the Unix epoch for a successor process).
    earlier: HashMap<String, Vec<EarlierSet>>,
    /// The next earlier-set id to give.
    next_set_id: u8,
}

/// Why a snapshot could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// More distinct backends over time than counter slots.
    #[error("balancer.max_backends: backend id {id} exceeds the {max} counter slots")]
    TooManyBackends {
        /// The id that did not fit.
        id: u32,
        /// The configured maximum.
        max: usize,
    },
    /// Maglev refused the backend set.
    #[error("vip {vip:?}: {source}")]
    Maglev {
        /// The VIP.
        vip: String,
        /// Maglev's error.
        source: fp_maglev::Error,
    },
}

impl Builder {
    /// A builder with no backends known yet.
    pub fn new() -> Builder {
        Builder::default()
    }

    /// Mark a backend up or down. Returns whether this changed anything.
    pub fn set_health(&mut self, addr: IpAddr, healthy: bool) -> bool {
        self.health.insert(addr, healthy) != Some(healthy)
    }

    /// Record the link-layer address of an on-link backend (from the kernel's neighbour table):
    /// tunnelled packets to it are sent to that MAC instead of the gateway's. `None` forgets it.
    /// Returns whether this changed anything.
    pub fn set_neighbor(&mut self, addr: IpAddr, mac: Option<MacAddr>) -> bool {
        match mac {
            Some(m) => self.neighbors.insert(addr, m) != Some(m),
            None => self.neighbors.remove(&addr).is_some(),
        }
    }

    /// Use `mac` as the source MAC of every packet sent (the interface's own address), instead of
    /// the configured `balancer.mac`.
    pub fn set_local_mac(&mut self, mac: MacAddr) -> bool {
        self.local_mac.replace(mac) != Some(mac)
    }

    /// The MTU of the interface the balancer sends on: the path MTU toward backends unless the
    /// configuration sets `balancer.mtu` or a VIP's `mtu` (1500 when neither is known).
    pub fn set_interface_mtu(&mut self, mtu: u16) {
        self.interface_mtu = Some(mtu);
    }

    /// Current health of an address (backends start healthy).
    pub fn healthy(&self, addr: IpAddr) -> bool {
        self.health.get(&addr).copied().unwrap_or(true)
    }

    /// Record VIP `name`'s selection; when it changed from a non-empty one, the old one becomes
    /// the VIP's earlier set for `balancer.second_chance_s`.
    fn note_selection(
        &mut self,
        name: &str,
        selection: Selection,
        second_chance: bool,
        b: &crate::config::BalancerSpec,
        maglev: &fp_maglev::Config,
    ) {
        if !second_chance || b.second_chance_s == 0 {
            self.earlier.remove(name);
            self.selections.insert(name.to_string(), selection);
            return;
        }
        let old = self.selections.insert(name.to_string(), selection.clone());
        if let Some(old) = old.filter(|o| !o.is_empty() && *o != selection) {
            if let Ok(t) = table_of(maglev, &old) {
                let left = Duration::from_secs(b.second_chance_s as u64);
                let sets = self.earlier.entry(name.to_string()).or_default();
                push_earlier(sets, &mut self.next_set_id, old, t, left);
            }
        }
    }

    fn id_of(&mut self, addr: IpAddr) -> u32 {
        let next = self.ids.len() as u32;
        *self.ids.entry(addr).or_insert(next)
    }

    /// Whether [`Builder::build`] would accept `config`, without building anything: the backend
    /// ids it would assign fit `balancer.max_backends`. (Maglev accepts the backend set of every
    /// configuration that passed validation: weights, names and the table size are checked there.)
    pub fn check(&self, config: &LbConfig) -> Result<(), BuildError> {
        let max = config.balancer.max_backends;
        let mut next = self.ids.len();
        let mut new = std::collections::HashSet::new();
        for spec in config.vips.iter().flat_map(|v| &v.backends) {
            let id = match self.ids.get(&spec.address) {
                Some(&id) => id as usize,
                None if new.insert(spec.address) => {
                    next += 1;
                    next - 1
                }
                None => continue,
            };
            if id >= max {
                return Err(BuildError::TooManyBackends { id: id as u32, max });
            }
        }
        Ok(())
    }

    /// Every VIP's backend sets: what a successor process needs for second chance.
    pub fn sets(&self) -> std::collections::BTreeMap<String, VipSets> {
        self.selections
            .iter()
            .map(|(name, current)| {
                let earlier = self
                    .earlier
                    .get(name)
                    .map(|sets| {
                        sets.iter()
                            .map(|e| (e.selection.clone(), e.until_unix_ms))
                            .collect()
                    })
                    .unwrap_or_default();
                let sets = VipSets {
                    current: current.clone(),
                    earlier,
                };
                (name.clone(), sets)
            })
            .collect()
    }

    /// Take a predecessor's backend sets (before the first build): every VIP keeps the
    /// predecessor's earlier sets for the rest of their windows, and one whose set differs in the
    /// configuration gets the predecessor's current set as its newest earlier one at the next
    /// build. Returns how many earlier sets were taken; sets whose table cannot be built under
    /// `maglev` are skipped.
    pub fn restore(
        &mut self,
        sets: &std::collections::BTreeMap<String, VipSets>,
        maglev: &fp_maglev::Config,
    ) -> usize {
        let now_unix = unix_ms(Instant::now());
        let mut n = 0;
        for (name, s) in sets {
            self.selections.insert(name.clone(), s.current.clone());
            let sets = self.earlier.entry(name.clone()).or_default();
            for (sel, until) in &s.earlier {
                let left = Duration::from_millis(until.saturating_sub(now_unix));
                if left.is_zero() || sel.is_empty() {
                    continue;
                }
                if let Ok(t) = table_of(maglev, sel) {
                    push_earlier(sets, &mut self.next_set_id, sel.clone(), t, left);
                    n += 1;
                }
            }
        }
        n
    }

    /// Forget earlier sets whose window ended by `now`. Returns whether any did (the snapshot
    /// must be rebuilt without them).
    pub fn expire(&mut self, now: Instant) -> bool {
        let mut gone = false;
        for sets in self.earlier.values_mut() {
            let before = sets.len();
            sets.retain(|e| e.until > now);
            gone |= sets.len() != before;
        }
        gone
    }

    /// When the next second-chance window ends, if any is open.
    pub fn next_expiry(&self) -> Option<Instant> {
        self.earlier.values().flatten().map(|e| e.until).min()
    }

    /// Snapshots built so far by this builder and its copies (each builds every VIP's Maglev
    /// table: the cost a reload pays).
    pub fn builds(&self) -> u64 {
        self.builds.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Build the snapshot for `config` and the current health.
    pub fn build(&mut self, config: Arc<LbConfig>) -> Result<Snapshot, BuildError> {
        self.builds
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let b = &config.balancer;
        let maglev =
            fp_maglev::Config::new(b.maglev_size as u64, b.seed).expect("validated maglev_size");
        // Backends (stable ids).
        let mut backends: Vec<Option<BackendState>> = Vec::new();
        for vip in &config.vips {
            for spec in &vip.backends {
                let id = self.id_of(spec.address);
                let draining_elsewhere = backends
                    .get(id as usize)
                    .and_then(|b| b.as_ref())
                    .is_some_and(|b| b.draining);
                if id as usize >= b.max_backends {
                    return Err(BuildError::TooManyBackends {
                        id,
                        max: b.max_backends,
                    });
                }
                if backends.len() <= id as usize {
                    backends.resize(id as usize + 1, None);
                }
                backends[id as usize] = Some(BackendState {
                    id,
                    address: spec.address,
                    name: spec.name.clone(),
                    healthy: self.healthy(spec.address),
                    draining: spec.drain || draining_elsewhere,
                    mac: spec.mac,
                });
            }
        }
        let words = backends.len().div_ceil(64);
        let mut vips = Vec::new();
        let mut exact4 = FastMap::default();
        let mut exact6 = FastMap::default();
        let mut exact_addrs = FastSet::default();
        let mut groups: Vec<GroupState> = config
            .prefix_groups
            .iter()
            .map(|g| GroupState {
                prefixes: g.prefixes.clone(),
                suffixes: Vec::new(),
            })
            .collect();
        for (i, v) in config.vips.iter().enumerate() {
            let id = i as u32;
            let members: Vec<u32> = v.backends.iter().map(|s| self.ids[&s.address]).collect();
            let healthy: Vec<&crate::config::BackendSpec> = v
                .backends
                .iter()
                .filter(|s| self.healthy(s.address))
                .collect();
            // New connections go to healthy backends that are not draining; tracked ones may keep
            // any healthy member (a draining backend finishes its connections).
            let selectable: Vec<&crate::config::BackendSpec> =
                healthy.iter().copied().filter(|s| !s.drain).collect();
            let selection: Selection = selectable
                .iter()
                .map(|s| Selected {
                    address: s.address,
                    name: s.name.clone(),
                    weight: s.weight,
                })
                .collect();
            self.note_selection(&v.name, selection, v.second_chance, b, &maglev);
            let (table, table_ids) = if selectable.is_empty() {
                (None, Vec::new())
            } else {
                let mb: Vec<fp_maglev::Backend> = selectable
                    .iter()
                    .map(|s| fp_maglev::Backend::weighted(s.name.clone(), s.weight))
                    .collect();
                let t = fp_maglev::Table::build(&maglev, &mb).map_err(|e| BuildError::Maglev {
                    vip: v.name.clone(),
                    source: e,
                })?;
                let ids = (0..t.backends().len())
                    .map(|k| self.ids[&selectable[t.input_index(k as u16)].address])
                    .collect();
                (Some(t), ids)
            };
            let mut member_bits = vec![0u64; words];
            let mut drain_bits = vec![0u64; words];
            for s in healthy.iter().filter(|s| s.drain) {
                let bid = self.ids[&s.address];
                drain_bits[bid as usize / 64] |= 1 << (bid % 64);
            }
            for s in &healthy {
                let bid = self.ids[&s.address];
                member_bits[bid as usize / 64] |= 1 << (bid % 64);
            }
            let mtu = v.mtu.or(b.mtu).or(self.interface_mtu).unwrap_or(1500);
            let quic = v.quic.map(|layout| QuicRoute {
                layout,
                ids: v
                    .backends
                    .iter()
                    .filter_map(|s| s.quic_id.map(|q| (q, self.ids[&s.address])))
                    .collect(),
            });
            let mut encaps = vec![None; backends.len()];
            for s in &v.backends {
                let bid = self.ids[&s.address];
                let local = self.local_mac.unwrap_or(b.mac);
                let encap = encap_for(
                    b,
                    v.encap,
                    s,
                    self.neighbors.get(&s.address).copied(),
                    local,
                );
                // L2 DSR rewrites MACs only: its recipe must never be used as a tunnel template.
                let (template, added) = match v.encap {
                    EncapKind::L2Dsr => (None, 0),
                    _ => (
                        EncapTemplate::new(&encap),
                        encap.overhead() - encap.l2.len(),
                    ),
                };
                let max_inner = mtu.saturating_sub(added as u16);
                encaps[bid as usize] = Some(Prebuilt {
                    encap,
                    template,
                    max_inner,
                });
            }
            match &v.matcher {
                VipMatch::Exact(a) => {
                    match a {
                        IpAddr::V4(a4) => exact4.insert(key4(*a4, v.port, v.protocol.0), id),
                        IpAddr::V6(a6) => exact6.insert(key6(*a6, v.port, v.protocol.0), id),
                    };
                    exact_addrs.insert((*a, v.protocol.0));
                }
                VipMatch::Suffix { group, suffix, len } => {
                    groups[*group].suffixes.push((id, *suffix, *len));
                }
            }
            vips.push(VipState {
                id,
                name: v.name.clone(),
                matcher: v.matcher.clone(),
                port: v.port,
                protocol: v.protocol,
                encap: v.encap,
                table,
                table_ids,
                member_bits,
                drain_bits,
                members,
                draining: healthy.len() - selectable.len(),
                mtu,
                quic,
                encaps,
                earlier: Vec::new(),
            });
            let vs = vips.last_mut().expect("just pushed");
            let kept = self.earlier.get(&v.name).map_or(&[][..], |s| &s[..]);
            vs.earlier = kept
                .iter()
                .map(|e| Earlier {
                    id: e.id,
                    table: e.table.clone(),
                    addrs: (0..e.table.backends().len())
                        .map(|k| {
                            let a = e.selection[e.table.input_index(k as u16)].address;
                            self.ids.get(&a).filter(|&&id| vs.serves(id)).map(|_| a)
                        })
                        .collect(),
                })
                .collect();
        }
        for g in &mut groups {
            g.suffixes.sort_by_key(|s| std::cmp::Reverse(s.2));
        }
        // VIPs that left the configuration leave no sets behind.
        let named = |n: &String| config.vips.iter().any(|v| v.name == *n);
        self.selections.retain(|n, _| named(n));
        self.earlier.retain(|n, s| named(n) && !s.is_empty());
        let local = self.local_mac.unwrap_or(b.mac);
        let cluster = config.cluster.as_ref().map(|c| ClusterState {
            me: c.me,
            balancers: c.balancers.clone(),
            l2: c
                .balancers
                .iter()
                .map(|a| {
                    self.neighbors.get(&IpAddr::V4(*a)).map(|&dst| OuterL2 {
                        src: local,
                        dst,
                        vlan: None,
                    })
                })
                .collect(),
            src4: b.address,
            src6: b.address6,
            ttl: b.ttl,
            seed: b.seed,
        });
        self.generation += 1;
        Ok(Snapshot {
            generation: self.generation,
            config,
            vips,
            backends,
            exact4,
            exact6,
            exact_addrs,
            groups,
            cluster,
            local_mac: self.local_mac,
        })
    }
}

/// The outer headers toward one backend of a VIP.
fn encap_for(
    b: &crate::config::BalancerSpec,
    kind: EncapKind,
    s: &crate::config::BackendSpec,
    neighbor: Option<MacAddr>,
    local_mac: MacAddr,
) -> Encap {
    let ip = match s.address {
        IpAddr::V4(dst) => OuterIp::V4 {
            src: b.address.unwrap_or(std::net::Ipv4Addr::UNSPECIFIED),
            dst,
            ttl: b.ttl,
        },
        IpAddr::V6(dst) => OuterIp::V6 {
            src: b.address6.unwrap_or(std::net::Ipv6Addr::UNSPECIFIED),
            dst,
            hop_limit: b.ttl,
        },
    };
    // On-link backends get frames addressed to their own MAC; others go through the gateway.
    let l2_dst = match kind {
        EncapKind::L2Dsr => s.mac.or(neighbor).unwrap_or(b.gateway_mac),
        _ => neighbor.unwrap_or(b.gateway_mac),
    };
    let tunnel = match kind {
        EncapKind::Gre | EncapKind::L2Dsr => Tunnel::GRE,
        EncapKind::Ipip => Tunnel::Ipip,
        EncapKind::Vxlan { vni } => Tunnel::Vxlan {
            vni,
            dst_port: fp_wire::vxlan::UDP_PORT,
            inner_src: local_mac,
            // Default: the VXLAN device MAC `flowplane backend --decap vxlan` creates.
            inner_dst: s.mac.unwrap_or(MacAddr([0x02, 0x66, 0x70, 0, 0, 0x01])),
            udp_checksum: false,
        },
    };
    Encap {
        l2: OuterL2 {
            src: local_mac,
            dst: l2_dst,
            vlan: None,
        },
        ip,
        tunnel,
    }
}

pub use fp_pipeline::published::{Cached, Published};

#[cfg(test)]
mod tests {
    use super::*;

    const CFG: &str = r#"
        [balancer]
        address = "10.0.0.2"
        maglev_size = 1009
        [[prefix_group]]
        name = "g"
        prefixes = ["74.125.0.0/16"]
        [[vip]]
        name = "web"
        address = "203.0.113.10"
        port = 80
        protocol = "tcp"
        pools = ["p"]
        [[vip]]
        name = "any"
        address = "203.0.113.11"
        port = 0
        protocol = "udp"
        pools = ["p"]
        [[vip]]
        name = "sfx"
        prefix_group = "g"
        suffix = "0.0.0.7"
        suffix_len = 8
        port = 443
        protocol = "tcp"
        pools = ["p"]
        [[pool]]
        name = "p"
        backends = [{ address = "10.0.1.1" }, { address = "10.0.1.2" }, { address = "10.0.1.3" }]
    "#;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn vip_matching() {
        let cfg = Arc::new(LbConfig::from_toml(CFG).unwrap());
        let s = Builder::new().build(cfg).unwrap();
        assert_eq!(
            s.match_vip(ip("203.0.113.10"), Some(80), IpProtocol::TCP),
            Some(0)
        );
        assert_eq!(
            s.match_vip(ip("203.0.113.10"), Some(81), IpProtocol::TCP),
            None
        );
        assert_eq!(
            s.match_vip(ip("203.0.113.10"), Some(80), IpProtocol::UDP),
            None
        );
        assert_eq!(
            s.match_vip(ip("203.0.113.11"), Some(5353), IpProtocol::UDP),
            Some(1)
        );
        assert_eq!(
            s.match_vip(ip("74.125.9.7"), Some(443), IpProtocol::TCP),
            Some(2)
        );
        assert_eq!(
            s.match_vip(ip("74.125.9.8"), Some(443), IpProtocol::TCP),
            None
        );
        assert_eq!(
            s.match_vip(ip("74.126.9.7"), Some(443), IpProtocol::TCP),
            None
        );
        // Non-first fragments: address and protocol only.
        assert!(s
            .match_vip(ip("203.0.113.10"), None, IpProtocol::TCP)
            .is_some());
        assert!(s
            .match_vip(ip("203.0.113.99"), None, IpProtocol::TCP)
            .is_none());
    }

    #[test]
    fn health_rebuilds_tables_and_ids_are_stable() {
        let cfg = Arc::new(LbConfig::from_toml(CFG).unwrap());
        let mut b = Builder::new();
        let s1 = b.build(cfg.clone()).unwrap();
        let v = &s1.vips[0];
        assert_eq!(v.table.as_ref().unwrap().backends().len(), 3);
        assert!(v.serves(0) && v.serves(1) && v.serves(2));
        assert!(b.set_health(ip("10.0.1.2"), false));
        assert!(!b.set_health(ip("10.0.1.2"), false));
        let s2 = b.build(cfg.clone()).unwrap();
        let v = &s2.vips[0];
        assert_eq!(v.table.as_ref().unwrap().backends().len(), 2);
        assert!(!v.serves(1));
        assert!(s2.generation > s1.generation);
        // Selection never returns the down backend.
        for h in 0..10_000u64 {
            assert_ne!(v.select(fp_hash::splitmix64(h)).unwrap().0, 1);
        }
        // A new config keeps ids of known addresses.
        let cfg2 = Arc::new(
            LbConfig::from_toml(&CFG.replace(
                r#"{ address = "10.0.1.1" }, "#,
                r#"{ address = "10.0.1.9" }, { address = "10.0.1.1" }, "#,
            ))
            .unwrap(),
        );
        let s3 = b.build(cfg2).unwrap();
        assert_eq!(s3.backend(0).unwrap().address, ip("10.0.1.1"));
        assert_eq!(s3.backend(3).unwrap().address, ip("10.0.1.9"));
        // All down: no table, no selection.
        for a in ["10.0.1.1", "10.0.1.3", "10.0.1.9"] {
            b.set_health(ip(a), false);
        }
        let s4 = b.build(s3.config.clone()).unwrap();
        assert!(s4.vips[0].select(1).is_none());
    }

    #[test]
    fn neighbors_and_local_mac_address_tunnelled_frames() {
        let cfg = Arc::new(LbConfig::from_toml(CFG).unwrap());
        let mut b = Builder::new();
        let s = b.build(cfg.clone()).unwrap();
        let gw = cfg.balancer.gateway_mac;
        assert_eq!(s.encap(0, 0).unwrap().encap.l2.dst, gw);
        let nmac = MacAddr([2, 0, 0, 0, 9, 1]);
        assert!(b.set_neighbor(ip("10.0.1.1"), Some(nmac)));
        assert!(!b.set_neighbor(ip("10.0.1.1"), Some(nmac)));
        assert!(b.set_local_mac(MacAddr([2, 0, 0, 0, 9, 9])));
        let s = b.build(cfg.clone()).unwrap();
        let e = &s.encap(0, 0).unwrap().encap;
        assert_eq!(e.l2.dst, nmac);
        assert_eq!(e.l2.src, MacAddr([2, 0, 0, 0, 9, 9]));
        assert_eq!(
            s.encap(0, 1).unwrap().encap.l2.dst,
            gw,
            "other backends still via the gateway"
        );
        assert!(b.set_neighbor(ip("10.0.1.1"), None));
        assert_eq!(b.build(cfg).unwrap().encap(0, 0).unwrap().encap.l2.dst, gw);
    }

    #[test]
    fn published_refresh() {
        let p = Arc::new(Published::new(Arc::new(1u32)));
        let mut c = Cached::new(p.clone());
        assert!(!c.refresh());
        p.publish(Arc::new(2));
        assert!(c.refresh());
        assert_eq!(**c.get(), 2);
        assert!(!c.refresh());
    }
}
