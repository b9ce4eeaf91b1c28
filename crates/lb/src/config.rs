//! The load balancer's configuration: TOML in, a validated [`LbConfig`] out.
//!
//! Parsing and validation are separate steps. [`LbConfig::from_toml`] first lets `toml`/`serde` check
//! syntax, types and unknown keys (its errors carry the line and key), then checks meaning: every
//! name resolves, pools nest without cycles, every VIP reaches at least one backend, addresses and
//! prefixes parse, the Maglev table size is prime, encapsulations have what they need. An error names
//! the field (`vip[2].pools[0]: no pool named "web2"`) and nothing is applied: the engine only ever
//! sees a validated config, and a config that fails leaves the running one in force.
//!
//! VIPs are matched exactly (`address`, `port`, `protocol`), or by Maglev's prefix/suffix scheme
//! (§4.2): a VIP names a `prefix_group` and a host `suffix` of `suffix_len` bits; a packet's
//! destination first goes through longest-prefix match against the groups' prefixes, then through
//! longest-suffix match among that group's VIPs. `port = 0` matches any port.

pub use fp_control::announce::BgpSpec;
pub use fp_control::health::{HealthCheck, HealthKind};
pub use fp_wire::encap::EncapKind;
use fp_wire::ethernet::MacAddr;
use fp_wire::ip::IpProtocol;
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A configuration error: which field, and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ConfigError {
    /// Path of the offending field, e.g. `vip[1].address` or `pool "web".backends[0].weight`.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

fn err(field: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError {
        field: field.into(),
        message: message.into(),
    }
}

/// Why a prefix does not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PrefixError {
    /// No `/`.
    #[error("{0:?} is not a prefix (addr/len)")]
    NotAPrefix(String),
    /// The part before the `/`.
    #[error("{0:?} is not an IP address")]
    NotAnAddress(String),
    /// The part after the `/`.
    #[error("{0:?} is not a prefix length")]
    NotALength(String),
    /// Longer than the address.
    #[error("prefix length {len} exceeds {max}")]
    TooLong {
        /// The length given.
        len: u8,
        /// The address's bits.
        max: u8,
    },
    /// Bits set beyond the length.
    #[error("{text:?} has host bits set (network is {network})")]
    HostBits {
        /// The text given.
        text: String,
        /// The network it names.
        network: Prefix,
    },
}

/// An IP prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Prefix {
    /// Network address (host bits zero).
    pub addr: IpAddr,
    /// Prefix length in bits.
    pub len: u8,
}

impl Prefix {
    /// Parse `a.b.c.d/len` or `x::y/len`.
    pub fn parse(s: &str) -> Result<Prefix, PrefixError> {
        let (a, l) = s
            .split_once('/')
            .ok_or_else(|| PrefixError::NotAPrefix(s.to_string()))?;
        let addr: IpAddr = a
            .trim()
            .parse()
            .map_err(|_| PrefixError::NotAnAddress(a.to_string()))?;
        let len: u8 = l
            .trim()
            .parse()
            .map_err(|_| PrefixError::NotALength(l.to_string()))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        if len > max {
            return Err(PrefixError::TooLong { len, max });
        }
        let p = Prefix {
            addr: mask(addr, len),
            len,
        };
        if p.addr != addr {
            return Err(PrefixError::HostBits {
                text: s.to_string(),
                network: p,
            });
        }
        Ok(p)
    }

    /// Whether `a` lies inside the prefix.
    #[inline]
    pub fn contains(&self, a: IpAddr) -> bool {
        a.is_ipv4() == self.addr.is_ipv4() && mask(a, self.len) == self.addr
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// Keep the top `len` bits of `a`.
pub fn mask(a: IpAddr, len: u8) -> IpAddr {
    match a {
        IpAddr::V4(v) => {
            let m = if len == 0 {
                0
            } else {
                u32::MAX << (32 - len as u32)
            };
            IpAddr::V4(Ipv4Addr::from(u32::from(v) & m))
        }
        IpAddr::V6(v) => {
            let m = if len == 0 {
                0
            } else {
                u128::MAX << (128 - len as u32)
            };
            IpAddr::V6(Ipv6Addr::from(u128::from(v) & m))
        }
    }
}

/// Keep the low `len` bits of `a`.
pub fn low_bits(a: IpAddr, len: u8) -> u128 {
    let (v, width) = match a {
        IpAddr::V4(v) => (u32::from(v) as u128, 32u32),
        IpAddr::V6(v) => (u128::from(v), 128),
    };
    let len = (len as u32).min(width);
    if len == 0 {
        0
    } else if len == 128 {
        v
    } else {
        v & ((1u128 << len) - 1)
    }
}

/// One backend as a VIP sees it after pools are flattened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackendSpec {
    /// The address packets are tunnelled to.
    pub address: IpAddr,
    /// The name Maglev hashes (default: the address as text). Equal on every balancer.
    pub name: String,
    /// Relative weight (≥ 1 unless draining).
    pub weight: u32,
    /// Draining (`weight = 0` or `drain = true`): no new connections; the connections it holds
    /// keep it until they end or idle out.
    pub drain: bool,
    /// Backend MAC, for L2 DSR and as the inner destination of VXLAN.
    pub mac: Option<MacAddr>,
    /// The server id this backend puts in the QUIC connection IDs it issues (QUIC VIPs route
    /// short-header packets carrying it here, whatever their addresses and ports).
    pub quic_id: Option<u32>,
}

/// Where a QUIC VIP finds the server id in a short-header packet's destination connection ID: `len`
/// bytes (big-endian) from byte `offset` of the connection ID.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct QuicIdLayout {
    /// First byte of the id within the connection ID.
    pub offset: u8,
    /// Its length in bytes (1 to 4).
    pub len: u8,
}

impl QuicIdLayout {
    /// Largest server id the layout can carry.
    pub const fn max_id(&self) -> u32 {
        if self.len >= 4 {
            u32::MAX
        } else {
            (1u32 << (8 * self.len as u32)) - 1
        }
    }
}

/// How a VIP matches destination addresses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VipMatch {
    /// This exact address.
    Exact(IpAddr),
    /// Any address inside the group's prefixes whose low `len` bits equal `suffix`.
    Suffix {
        /// Index into [`LbConfig::prefix_groups`].
        group: usize,
        /// The host suffix.
        suffix: u128,
        /// Suffix length in bits.
        len: u8,
    },
}

/// A validated VIP.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VipSpec {
    /// Name (unique).
    pub name: String,
    /// Address matching.
    pub matcher: VipMatch,
    /// Destination port, 0 for any.
    pub port: u16,
    /// TCP or UDP.
    pub protocol: IpProtocol,
    /// Encapsulation toward backends.
    pub encap: EncapKind,
    /// Backends, pools flattened, deduplicated by address, in configuration order.
    pub backends: Vec<BackendSpec>,
    /// Names of the pools whose backends serve this VIP (directly or nested), for health checks.
    pub pools: Vec<String>,
    /// IP MTU toward this VIP's backends, if it differs from the balancer's (`vip.mtu`).
    pub mtu: Option<u16>,
    /// QUIC connection-ID routing (`vip.quic`): where short-header packets carry the server id.
    pub quic: Option<QuicIdLayout>,
}

/// A validated pool (kept for health checking).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolSpec {
    /// Name.
    pub name: String,
    /// All backends reachable from the pool, nested pools included.
    pub backends: Vec<BackendSpec>,
    /// Health check, if any.
    pub health: Option<HealthCheck>,
}

/// A named set of prefixes for prefix/suffix VIP matching (Maglev §4.2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrefixGroup {
    /// Name.
    pub name: String,
    /// Prefixes.
    pub prefixes: Vec<Prefix>,
}

/// The balancer's own settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BalancerSpec {
    /// Outer IPv4 source of encapsulated packets.
    pub address: Option<Ipv4Addr>,
    /// Outer IPv6 source of encapsulated packets.
    pub address6: Option<Ipv6Addr>,
    /// The balancer's MAC (outer Ethernet source).
    pub mac: MacAddr,
    /// MAC of the next hop toward backends (outer Ethernet destination for tunnels).
    pub gateway_mac: MacAddr,
    /// Hash seed for flow hashing, Maglev and the connection tables. Secret: whoever knows it
    /// can craft flows that collide in one bucket or land on one backend (hash flooding).
    /// Must be equal on every balancer of a cluster.
    pub seed: u64,
    /// Whether `seed` came from the file (`balancer.seed`) or was drawn at random when the file
    /// was read. A reload of a file without a seed keeps the running seed.
    pub seed_origin: SeedOrigin,
    /// Maglev lookup table size (prime).
    pub maglev_size: u32,
    /// IPv4 connection-table entries per worker.
    pub conn_capacity: usize,
    /// IPv6 connection-table entries per worker.
    pub conn_capacity_v6: usize,
    /// Idle time after which a connection entry expires.
    pub conn_idle_timeout_ms: u32,
    /// Lifetime of an embryonic entry (made by a SYN, not yet confirmed by a later packet of its
    /// flow): the SYN-flood guard's first line.
    pub syn_timeout_ms: u32,
    /// New connections a worker records per second before it balances further SYNs by the Maglev
    /// hash without recording them (0: no limit). Under table pressure SYNs are never recorded.
    pub new_conn_rate: u64,
    /// Fragment-table entries per worker.
    pub frag_capacity: usize,
    /// How long a fragment entry (and held fragments) lives.
    pub frag_timeout_ms: u32,
    /// Outer TTL / hop limit.
    pub ttl: u8,
    /// IP MTU of the path toward backends (`balancer.mtu`): an encapsulated packet larger than this
    /// is answered with ICMP "fragmentation needed" / "packet too big", or fragmented when its
    /// sender allowed it. `None`: the interface's MTU (`flowplane run`), else 1500.
    pub mtu: Option<u16>,
    /// ICMP "too big" errors a worker sends per second at most (burst up to 50); 0 sends none.
    pub icmp_rate: u32,
    /// Entries of each worker's flow cache in front of its IPv4 connection table (the IPv6 one
    /// gets a quarter); 0: no cache.
    pub conn_cache_entries: usize,
    /// Counter slots for VIPs (ids are dense; more VIPs than this are rejected).
    pub max_vips: usize,
    /// Counter slots for backends.
    pub max_backends: usize,
}

/// Where the hash seed came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SeedOrigin {
    /// `balancer.seed` in the file.
    Configured,
    /// Drawn from the operating system's random source when the file was read (a single
    /// balancer needs nothing else; a balancer that restarts gets a new one).
    Random,
}

/// A validated load-balancer configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LbConfig {
    /// Balancer settings.
    pub balancer: BalancerSpec,
    /// Prefix groups.
    pub prefix_groups: Vec<PrefixGroup>,
    /// VIPs.
    pub vips: Vec<VipSpec>,
    /// Pools.
    pub pools: Vec<PoolSpec>,
    /// VIP announcement over BGP (`[bgp]`), if configured.
    pub bgp: Option<BgpSpec>,
    /// The balancers of a scale-out deployment (`[cluster]`), if configured.
    pub cluster: Option<ClusterSpec>,
}

/// The balancers of a scale-out deployment (`[cluster]`, Maglev §4.3): non-first fragments carry
/// no ports, so the router may send a datagram's fragments to different balancers; each
/// balancer forwards a fragment to the datagram's *owner* (a hash of source, destination and
/// protocol over this list), GRE-encapsulated with the recursion control field set, and the
/// owner reassembles the flow decision. Every balancer must list the same addresses (in any order).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterSpec {
    /// Every balancer's address, this one's (`balancer.address`) included, sorted (so every
    /// balancer computes the same owner whatever order its file lists them in).
    pub balancers: Vec<Ipv4Addr>,
    /// This balancer's index in `balancers`.
    pub me: usize,
}

// ---------------------------------------------------------------------------------------------
// The raw, syntactic form.

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    balancer: RawBalancer,
    #[serde(default)]
    prefix_group: Vec<RawPrefixGroup>,
    #[serde(default)]
    vip: Vec<RawVip>,
    #[serde(default)]
    pool: Vec<RawPool>,
    bgp: Option<RawBgp>,
    cluster: Option<RawCluster>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBgp {
    speaker: Option<String>,
    local_as: u32,
    peer: String,
    peer_as: u32,
    router_id: Option<String>,
    next_hop: Option<String>,
    hold_time_s: Option<u16>,
    drain_ms: Option<u64>,
    state_dir: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCluster {
    balancers: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBalancer {
    address: Option<String>,
    address6: Option<String>,
    mac: Option<String>,
    gateway_mac: Option<String>,
    seed: Option<u64>,
    maglev_size: Option<u64>,
    conn_table_capacity: Option<usize>,
    conn_table_capacity_v6: Option<usize>,
    conn_idle_timeout_ms: Option<u64>,
    syn_timeout_ms: Option<u64>,
    new_conn_rate: Option<u64>,
    fragment_table_capacity: Option<usize>,
    fragment_timeout_ms: Option<u64>,
    ttl: Option<u8>,
    mtu: Option<u64>,
    icmp_rate: Option<u64>,
    conn_cache_entries: Option<usize>,
    max_vips: Option<usize>,
    max_backends: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPrefixGroup {
    name: String,
    prefixes: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawVip {
    name: String,
    address: Option<String>,
    prefix_group: Option<String>,
    suffix: Option<String>,
    suffix_len: Option<u8>,
    port: u16,
    protocol: String,
    pools: Vec<String>,
    encap: Option<String>,
    vni: Option<u32>,
    mtu: Option<u64>,
    quic: Option<bool>,
    quic_id_offset: Option<u8>,
    quic_id_len: Option<u8>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPool {
    name: String,
    #[serde(default)]
    backends: Vec<RawBackend>,
    #[serde(default)]
    pools: Vec<String>,
    health: Option<RawHealth>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBackend {
    address: String,
    name: Option<String>,
    weight: Option<u32>,
    drain: Option<bool>,
    mac: Option<String>,
    quic_id: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHealth {
    kind: String,
    port: Option<u16>,
    path: Option<String>,
    status: Option<u16>,
    body: Option<String>,
    interval_ms: Option<u64>,
    timeout_ms: Option<u64>,
    rise: Option<u32>,
    fall: Option<u32>,
}

/// Default entries of a worker's connection flow cache (`balancer.conn_cache_entries`).
pub const DEFAULT_CONN_CACHE_ENTRIES: usize = 0;

/// An IP MTU: 576 (the smallest every IPv4 host must accept) to 9216 (jumbo frames).
fn check_mtu(field: &str, m: u64) -> Result<u16, ConfigError> {
    if (576..=9216).contains(&m) {
        Ok(m as u16)
    } else {
        Err(err(field, format!("{m} is not in 576..=9216")))
    }
}

fn parse_mac(field: &str, s: &str) -> Result<MacAddr, ConfigError> {
    s.parse().map_err(|_| {
        err(
            field,
            format!("{s:?} is not a MAC address (aa:bb:cc:dd:ee:ff)"),
        )
    })
}

fn parse_ip(field: &str, s: &str) -> Result<IpAddr, ConfigError> {
    s.trim()
        .parse()
        .map_err(|_| err(field, format!("{s:?} is not an IP address")))
}

impl LbConfig {
    /// Parse and validate a TOML configuration.
    pub fn from_toml(text: &str) -> Result<LbConfig, ConfigError> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| {
            let field = e.span().map_or("config".to_string(), |s| {
                let line = text[..s.start.min(text.len())].matches('\n').count() + 1;
                format!("line {line}")
            });
            err(field, e.message().to_string())
        })?;
        validate(raw)
    }

    /// Index of a VIP by name.
    pub fn vip_index(&self, name: &str) -> Option<usize> {
        self.vips.iter().position(|v| v.name == name)
    }

    /// Every distinct backend address across VIPs, in first-seen order.
    pub fn backend_addresses(&self) -> Vec<IpAddr> {
        let mut seen = HashSet::new();
        self.vips
            .iter()
            .flat_map(|v| v.backends.iter())
            .filter(|b| seen.insert(b.address))
            .map(|b| b.address)
            .collect()
    }
}

fn validate(raw: RawConfig) -> Result<LbConfig, ConfigError> {
    let b = &raw.balancer;
    let address = match &b.address {
        Some(s) => match parse_ip("balancer.address", s)? {
            IpAddr::V4(a) => Some(a),
            IpAddr::V6(_) => {
                return Err(err(
                    "balancer.address",
                    "must be IPv4 (use address6 for IPv6)",
                ))
            }
        },
        None => None,
    };
    let address6 = match &b.address6 {
        Some(s) => match parse_ip("balancer.address6", s)? {
            IpAddr::V6(a) => Some(a),
            IpAddr::V4(_) => return Err(err("balancer.address6", "must be IPv6")),
        },
        None => None,
    };
    let mac = match &b.mac {
        Some(s) => parse_mac("balancer.mac", s)?,
        None => MacAddr([0x02, 0, 0, 0, 0, 0x01]),
    };
    let gateway_mac = match &b.gateway_mac {
        Some(s) => parse_mac("balancer.gateway_mac", s)?,
        None => MacAddr([0x02, 0, 0, 0, 0, 0xfe]),
    };
    let maglev_size = b.maglev_size.unwrap_or(65537);
    let maglev_cfg = fp_maglev::Config::new(maglev_size, 0)
        .map_err(|e| err("balancer.maglev_size", e.to_string()))?;
    let conn_capacity = b.conn_table_capacity.unwrap_or(1 << 20);
    if conn_capacity == 0 || conn_capacity > 1 << 32 {
        return Err(err(
            "balancer.conn_table_capacity",
            format!("{conn_capacity} is not in 1..=2^32"),
        ));
    }
    let conn_capacity_v6 = b
        .conn_table_capacity_v6
        .unwrap_or((conn_capacity / 4).max(1024));
    if conn_capacity_v6 == 0 || conn_capacity_v6 > 1 << 32 {
        return Err(err(
            "balancer.conn_table_capacity_v6",
            format!("{conn_capacity_v6} is not in 1..=2^32"),
        ));
    }
    let idle = b.conn_idle_timeout_ms.unwrap_or(300_000);
    if !(1000..=24 * 3600 * 1000).contains(&idle) {
        return Err(err(
            "balancer.conn_idle_timeout_ms",
            format!("{idle} is not in 1000..=86400000"),
        ));
    }
    let syn_timeout = b.syn_timeout_ms.unwrap_or(5000.min(idle));
    if !(100..=idle).contains(&syn_timeout) {
        return Err(err(
            "balancer.syn_timeout_ms",
            format!("{syn_timeout} is not in 100..=conn_idle_timeout_ms ({idle})"),
        ));
    }
    let new_conn_rate = b.new_conn_rate.unwrap_or(0);
    if new_conn_rate > 1_000_000_000 {
        return Err(err(
            "balancer.new_conn_rate",
            format!("{new_conn_rate} is more than 1000000000 per second"),
        ));
    }
    let frag_capacity = b.fragment_table_capacity.unwrap_or(4096);
    if !(4..=1 << 24).contains(&frag_capacity) {
        return Err(err(
            "balancer.fragment_table_capacity",
            format!("{frag_capacity} is not in 4..=2^24"),
        ));
    }
    let frag_timeout = b.fragment_timeout_ms.unwrap_or(2000);
    if !(1..=60_000).contains(&frag_timeout) {
        return Err(err(
            "balancer.fragment_timeout_ms",
            format!("{frag_timeout} is not in 1..=60000"),
        ));
    }
    let max_vips = b.max_vips.unwrap_or(1024);
    let max_backends = b.max_backends.unwrap_or(16384);
    // Connection entries keep a backend id in 31 bits (the 32nd marks embryonic entries).
    if max_backends > 1 << 24 {
        return Err(err(
            "balancer.max_backends",
            format!("{max_backends} is more than 16777216"),
        ));
    }
    let mtu = b.mtu.map(|m| check_mtu("balancer.mtu", m)).transpose()?;
    let icmp_rate = b.icmp_rate.unwrap_or(1000);
    if icmp_rate > 1_000_000 {
        return Err(err(
            "balancer.icmp_rate",
            format!("{icmp_rate} is more than 1000000 per second"),
        ));
    }
    let conn_cache_entries = b.conn_cache_entries.unwrap_or(DEFAULT_CONN_CACHE_ENTRIES);
    if conn_cache_entries > fp_flowcache::keyed::MAX_ENTRIES {
        return Err(err(
            "balancer.conn_cache_entries",
            format!(
                "{conn_cache_entries} is more than {}",
                fp_flowcache::keyed::MAX_ENTRIES
            ),
        ));
    }
    let balancer = BalancerSpec {
        address,
        address6,
        mac,
        gateway_mac,
        seed: b.seed.unwrap_or_else(fp_control::seed::random_seed),
        seed_origin: if b.seed.is_some() {
            SeedOrigin::Configured
        } else {
            SeedOrigin::Random
        },
        maglev_size: maglev_cfg.size(),
        conn_capacity,
        conn_capacity_v6,
        conn_idle_timeout_ms: idle as u32,
        syn_timeout_ms: syn_timeout as u32,
        new_conn_rate,
        frag_capacity,
        frag_timeout_ms: frag_timeout as u32,
        ttl: b.ttl.unwrap_or(64),
        mtu,
        icmp_rate: icmp_rate as u32,
        conn_cache_entries,
        max_vips,
        max_backends,
    };

    // Prefix groups.
    let mut prefix_groups = Vec::new();
    let mut group_index = HashMap::new();
    for (i, g) in raw.prefix_group.iter().enumerate() {
        let f = format!("prefix_group[{i}]");
        if g.name.is_empty() || group_index.insert(g.name.clone(), i).is_some() {
            return Err(err(
                format!("{f}.name"),
                format!("{:?} is empty or not unique", g.name),
            ));
        }
        if g.prefixes.is_empty() {
            return Err(err(format!("{f}.prefixes"), "needs at least one prefix"));
        }
        let mut prefixes = Vec::new();
        for (j, p) in g.prefixes.iter().enumerate() {
            prefixes.push(
                Prefix::parse(p).map_err(|m| err(format!("{f}.prefixes[{j}]"), m.to_string()))?,
            );
        }
        prefix_groups.push(PrefixGroup {
            name: g.name.clone(),
            prefixes,
        });
    }

    // Pools: index, then flatten with cycle detection.
    let mut pool_index: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, p) in raw.pool.iter().enumerate() {
        if p.name.is_empty() || pool_index.insert(p.name.as_str(), i).is_some() {
            return Err(err(
                format!("pool[{i}].name"),
                format!("{:?} is empty or not unique", p.name),
            ));
        }
    }
    let mut direct: Vec<Vec<BackendSpec>> = Vec::new();
    for p in &raw.pool {
        let mut v = Vec::new();
        for (j, rb) in p.backends.iter().enumerate() {
            let f = format!("pool \"{}\".backends[{j}]", p.name);
            let address = parse_ip(&format!("{f}.address"), &rb.address)?;
            // Weight 0 drains the backend (as `drain = true` does).
            let weight = rb.weight.unwrap_or(1);
            if weight > 1_000_000 {
                return Err(err(
                    format!("{f}.weight"),
                    format!("{weight} is more than 1000000"),
                ));
            }
            let drain = weight == 0 || rb.drain == Some(true);
            let mac = match &rb.mac {
                Some(m) => Some(parse_mac(&format!("{f}.mac"), m)?),
                None => None,
            };
            let name = rb.name.clone().unwrap_or_else(|| address.to_string());
            if name.is_empty() {
                return Err(err(format!("{f}.name"), "must not be empty"));
            }
            if rb.quic_id == Some(0) {
                return Err(err(
                    format!("{f}.quic_id"),
                    "0 is not a server id (it marks connection IDs that carry none)",
                ));
            }
            v.push(BackendSpec {
                address,
                name,
                weight,
                drain,
                mac,
                quic_id: rb.quic_id,
            });
        }
        direct.push(v);
    }
    let mut flat: Vec<Option<(Vec<BackendSpec>, Vec<String>)>> = vec![None; raw.pool.len()];
    fn flatten(
        i: usize,
        raw: &[RawPool],
        index: &BTreeMap<&str, usize>,
        direct: &[Vec<BackendSpec>],
        flat: &mut Vec<Option<(Vec<BackendSpec>, Vec<String>)>>,
        stack: &mut Vec<usize>,
    ) -> Result<(Vec<BackendSpec>, Vec<String>), ConfigError> {
        if let Some(done) = &flat[i] {
            return Ok(done.clone());
        }
        if let Some(pos) = stack.iter().position(|&s| s == i) {
            let cycle: Vec<&str> = stack[pos..]
                .iter()
                .chain([&i])
                .map(|&s| raw[s].name.as_str())
                .collect();
            return Err(err(
                format!("pool \"{}\".pools", raw[i].name),
                format!("pools nest in a cycle: {}", cycle.join(" -> ")),
            ));
        }
        stack.push(i);
        let mut backends = direct[i].clone();
        let mut names = vec![raw[i].name.clone()];
        for (j, sub) in raw[i].pools.iter().enumerate() {
            let &k = index.get(sub.as_str()).ok_or_else(|| {
                err(
                    format!("pool \"{}\".pools[{j}]", raw[i].name),
                    format!("no pool named {sub:?}"),
                )
            })?;
            let (b, n) = flatten(k, raw, index, direct, flat, stack)?;
            backends.extend(b);
            names.extend(n);
        }
        stack.pop();
        let backends = dedup(&format!("pool \"{}\"", raw[i].name), backends)?;
        names.sort();
        names.dedup();
        flat[i] = Some((backends.clone(), names.clone()));
        Ok((backends, names))
    }
    let mut pools = Vec::new();
    for i in 0..raw.pool.len() {
        let (backends, _) = flatten(
            i,
            &raw.pool,
            &pool_index,
            &direct,
            &mut flat,
            &mut Vec::new(),
        )?;
        let health = match &raw.pool[i].health {
            Some(h) => Some(health(&format!("pool \"{}\".health", raw.pool[i].name), h)?),
            None => None,
        };
        pools.push(PoolSpec {
            name: raw.pool[i].name.clone(),
            backends,
            health,
        });
    }

    // VIPs.
    let mut vips = Vec::new();
    let mut names = HashSet::new();
    let mut keys = HashSet::new();
    for (i, v) in raw.vip.iter().enumerate() {
        let f = format!("vip[{i}]");
        if v.name.is_empty() || !names.insert(v.name.clone()) {
            return Err(err(
                format!("{f}.name"),
                format!("{:?} is empty or not unique", v.name),
            ));
        }
        let protocol = match v.protocol.to_ascii_lowercase().as_str() {
            "tcp" => IpProtocol::TCP,
            "udp" => IpProtocol::UDP,
            other => {
                return Err(err(
                    format!("{f}.protocol"),
                    format!("{other:?}: use \"tcp\" or \"udp\""),
                ))
            }
        };
        let matcher = match (&v.address, &v.prefix_group) {
            (Some(a), None) => {
                if v.suffix.is_some() || v.suffix_len.is_some() {
                    return Err(err(
                        format!("{f}.suffix"),
                        "only with prefix_group, not with address",
                    ));
                }
                VipMatch::Exact(parse_ip(&format!("{f}.address"), a)?)
            }
            (None, Some(g)) => {
                let &group = group_index.get(g).ok_or_else(|| {
                    err(
                        format!("{f}.prefix_group"),
                        format!("no prefix_group named {g:?}"),
                    )
                })?;
                let s = v
                    .suffix
                    .as_deref()
                    .ok_or_else(|| err(format!("{f}.suffix"), "required with prefix_group"))?;
                let suffix_addr = parse_ip(&format!("{f}.suffix"), s)?;
                let len = v
                    .suffix_len
                    .ok_or_else(|| err(format!("{f}.suffix_len"), "required with prefix_group"))?;
                let width = if suffix_addr.is_ipv4() { 32 } else { 128 };
                if len == 0 || len > width {
                    return Err(err(
                        format!("{f}.suffix_len"),
                        format!("{len} is not in 1..={width}"),
                    ));
                }
                if prefix_groups[group]
                    .prefixes
                    .iter()
                    .any(|p| p.addr.is_ipv4() != suffix_addr.is_ipv4())
                {
                    return Err(err(
                        format!("{f}.suffix"),
                        "address family differs from the prefix group's",
                    ));
                }
                let suffix = low_bits(suffix_addr, width);
                if suffix != low_bits(suffix_addr, len) {
                    return Err(err(
                        format!("{f}.suffix"),
                        format!("{s} has bits set above suffix_len {len}"),
                    ));
                }
                VipMatch::Suffix { group, suffix, len }
            }
            _ => {
                return Err(err(
                    format!("{f}.address"),
                    "give exactly one of address or prefix_group (with suffix and suffix_len)",
                ))
            }
        };
        let key = format!("{matcher:?}/{}/{}", v.port, protocol.0);
        if !keys.insert(key) {
            return Err(err(
                f.clone(),
                "another VIP has the same address, port and protocol",
            ));
        }
        let encap = match v.encap.as_deref().unwrap_or("gre") {
            "gre" => EncapKind::Gre,
            "ipip" => EncapKind::Ipip,
            "vxlan" => EncapKind::Vxlan {
                vni: v
                    .vni
                    .ok_or_else(|| err(format!("{f}.vni"), "required with encap = \"vxlan\""))?,
            },
            "l2dsr" => EncapKind::L2Dsr,
            other => {
                return Err(err(
                    format!("{f}.encap"),
                    format!("{other:?}: use gre, ipip, vxlan or l2dsr"),
                ))
            }
        };
        if let EncapKind::Vxlan { vni } = encap {
            if vni >= 1 << 24 {
                return Err(err(
                    format!("{f}.vni"),
                    format!("{vni} does not fit in 24 bits"),
                ));
            }
        } else if v.vni.is_some() {
            return Err(err(format!("{f}.vni"), "only with encap = \"vxlan\""));
        }
        if v.pools.is_empty() {
            return Err(err(format!("{f}.pools"), "needs at least one pool"));
        }
        let vip_mtu = v
            .mtu
            .map(|m| check_mtu(&format!("{f}.mtu"), m))
            .transpose()?;
        let mut backends = Vec::new();
        let mut pool_names = Vec::new();
        for (j, p) in v.pools.iter().enumerate() {
            let &k = pool_index
                .get(p.as_str())
                .ok_or_else(|| err(format!("{f}.pools[{j}]"), format!("no pool named {p:?}")))?;
            let (b, n) = flat[k].clone().expect("all pools flattened");
            backends.extend(b);
            pool_names.extend(n);
        }
        let backends = dedup(&f, backends)?;
        let quic = quic_layout(&f, v, protocol, &backends)?;
        if backends.is_empty() {
            return Err(err(format!("{f}.pools"), "the pools hold no backend"));
        }
        if backends.len() as u64 > balancer.maglev_size as u64 {
            return Err(err(
                "balancer.maglev_size",
                format!(
                    "{} is smaller than VIP {:?}'s {} backends",
                    balancer.maglev_size,
                    v.name,
                    backends.len()
                ),
            ));
        }
        for b in &backends {
            let mtu = vip_mtu.or(balancer.mtu).unwrap_or(1500);
            if b.address.is_ipv6() && encap != EncapKind::L2Dsr && mtu < 1280 {
                let field = if vip_mtu.is_some() {
                    format!("{f}.mtu")
                } else {
                    "balancer.mtu".to_string()
                };
                return Err(err(
                    field,
                    format!(
                        "{mtu} is below IPv6's minimum of 1280 (VIP {:?} tunnels to {} over IPv6)",
                        v.name, b.address
                    ),
                ));
            }
            let needs = match (encap, b.address) {
                (EncapKind::L2Dsr, _) => None,
                (_, IpAddr::V4(_)) if address.is_none() => Some("balancer.address"),
                (_, IpAddr::V6(_)) if address6.is_none() => Some("balancer.address6"),
                _ => None,
            };
            if let Some(field) = needs {
                return Err(err(
                    field,
                    format!(
                        "required: VIP {:?} tunnels to backend {} with {encap}",
                        v.name, b.address
                    ),
                ));
            }
            if encap == EncapKind::L2Dsr && b.mac.is_none() {
                return Err(err(
                    format!("{f}.encap"),
                    format!(
                        "l2dsr needs a mac for backend {} (pool backends[].mac)",
                        b.address
                    ),
                ));
            }
        }
        pool_names.sort();
        pool_names.dedup();
        vips.push(VipSpec {
            name: v.name.clone(),
            matcher,
            port: v.port,
            protocol,
            encap,
            backends,
            pools: pool_names,
            mtu: vip_mtu,
            quic,
        });
    }
    if vips.len() > max_vips {
        return Err(err(
            "balancer.max_vips",
            format!("{} VIPs configured, max_vips is {max_vips}", vips.len()),
        ));
    }
    let distinct: HashSet<IpAddr> = pools
        .iter()
        .flat_map(|p| p.backends.iter().map(|b| b.address))
        .collect();
    if distinct.len() > max_backends {
        return Err(err(
            "balancer.max_backends",
            format!(
                "{} backends configured, max_backends is {max_backends}",
                distinct.len()
            ),
        ));
    }
    if b.seed.is_none() && (raw.bgp.is_some() || raw.cluster.is_some()) {
        let section = if raw.bgp.is_some() {
            "[bgp]"
        } else {
            "[cluster]"
        };
        return Err(err(
            "balancer.seed",
            format!(
                "must be set with {section}: every balancer behind the same router must hash \
                 flows alike, so a connection keeps its backend whichever balancer gets it; \
                 choose a random 64-bit value, keep it secret and give it to all of them"
            ),
        ));
    }
    let bgp = match &raw.bgp {
        Some(g) => Some(validate_bgp(g, &balancer)?),
        None => None,
    };
    let cluster = match &raw.cluster {
        Some(c) => Some(validate_cluster(c, &balancer)?),
        None => None,
    };
    Ok(LbConfig {
        balancer,
        prefix_groups,
        vips,
        pools,
        bgp,
        cluster,
    })
}

fn validate_bgp(g: &RawBgp, b: &BalancerSpec) -> Result<BgpSpec, ConfigError> {
    let speaker = g.speaker.clone().unwrap_or_else(|| "bird".into());
    if speaker != "bird" {
        return Err(err(
            "bgp.speaker",
            format!("{speaker:?} is not supported (use \"bird\")"),
        ));
    }
    for (f, v) in [("bgp.local_as", g.local_as), ("bgp.peer_as", g.peer_as)] {
        if v == 0 {
            return Err(err(f, "0 is not a valid AS number"));
        }
    }
    let peer = parse_ip("bgp.peer", &g.peer)?;
    let router_id = match &g.router_id {
        Some(s) => match parse_ip("bgp.router_id", s)? {
            IpAddr::V4(a) => a,
            IpAddr::V6(_) => return Err(err("bgp.router_id", "must be an IPv4 address")),
        },
        None => b
            .address
            .ok_or_else(|| err("bgp.router_id", "required when balancer.address is not set"))?,
    };
    let next_hop = match &g.next_hop {
        Some(s) => parse_ip("bgp.next_hop", s)?,
        None => IpAddr::V4(
            b.address
                .ok_or_else(|| err("bgp.next_hop", "required when balancer.address is not set"))?,
        ),
    };
    let hold_time_s = g.hold_time_s.unwrap_or(9);
    if hold_time_s < 3 {
        return Err(err(
            "bgp.hold_time_s",
            format!("{hold_time_s} is below BGP's minimum of 3"),
        ));
    }
    let drain_ms = g.drain_ms.unwrap_or(2000);
    if drain_ms > 600_000 {
        return Err(err(
            "bgp.drain_ms",
            format!("{drain_ms} is more than 600000"),
        ));
    }
    Ok(BgpSpec {
        speaker,
        local_as: g.local_as,
        peer,
        peer_as: g.peer_as,
        router_id,
        next_hop,
        hold_time_s,
        drain_ms,
        state_dir: g.state_dir.clone(),
    })
}

fn validate_cluster(c: &RawCluster, b: &BalancerSpec) -> Result<ClusterSpec, ConfigError> {
    let mut balancers = Vec::new();
    for (i, s) in c.balancers.iter().enumerate() {
        let f = format!("cluster.balancers[{i}]");
        match parse_ip(&f, s)? {
            IpAddr::V4(a) if !balancers.contains(&a) => balancers.push(a),
            IpAddr::V4(a) => return Err(err(f, format!("{a} is listed twice"))),
            IpAddr::V6(_) => {
                return Err(err(
                    f,
                    "must be IPv4 (fragments are redirected over IPv4 GRE)",
                ))
            }
        }
    }
    // The owner of a datagram is an index into this list: sort it, so balancers that list the
    // same addresses in different orders still agree.
    balancers.sort();
    let me_addr = b.address.ok_or_else(|| {
        err(
            "cluster",
            "needs balancer.address (this balancer's own address)",
        )
    })?;
    let me = balancers
        .iter()
        .position(|a| *a == me_addr)
        .ok_or_else(|| {
            err(
                "cluster.balancers",
                format!("must include this balancer's own address {me_addr} (balancer.address)"),
            )
        })?;
    Ok(ClusterSpec { balancers, me })
}

/// Deduplicate backends by address; the same address with conflicting settings is an error.
fn dedup(field: &str, v: Vec<BackendSpec>) -> Result<Vec<BackendSpec>, ConfigError> {
    let mut out: Vec<BackendSpec> = Vec::new();
    for b in v {
        match out.iter().find(|x| x.address == b.address) {
            Some(x) if *x != b => {
                return Err(err(
                    field,
                    format!(
                        "backend {} appears twice with different name, weight, drain, mac or \
                         quic_id",
                        b.address
                    ),
                ))
            }
            Some(_) => {}
            None => out.push(b),
        }
    }
    let mut names = HashSet::new();
    for b in &out {
        if !names.insert(b.name.as_str()) {
            return Err(err(
                field,
                format!("two backends share the name {:?}", b.name),
            ));
        }
    }
    Ok(out)
}

/// A VIP's QUIC routing: `quic = true` on a UDP VIP, the id layout within the connection ID
/// (default 2 bytes from byte 1), and server ids that fit it and are unique among its backends.
fn quic_layout(
    f: &str,
    v: &RawVip,
    protocol: IpProtocol,
    backends: &[BackendSpec],
) -> Result<Option<QuicIdLayout>, ConfigError> {
    if v.quic != Some(true) {
        for (field, set) in [
            ("quic_id_offset", v.quic_id_offset.is_some()),
            ("quic_id_len", v.quic_id_len.is_some()),
        ] {
            if set {
                return Err(err(format!("{f}.{field}"), "only with quic = true"));
            }
        }
        return Ok(None);
    }
    if protocol != IpProtocol::UDP {
        return Err(err(
            format!("{f}.quic"),
            "QUIC runs over UDP: needs protocol = \"udp\"",
        ));
    }
    let len = v.quic_id_len.unwrap_or(2);
    if !(1..=4).contains(&len) {
        return Err(err(
            format!("{f}.quic_id_len"),
            format!("{len} is not in 1..=4"),
        ));
    }
    let offset = v.quic_id_offset.unwrap_or(1);
    // A connection ID has at most 20 bytes (RFC 9000 §17.2).
    if offset as usize + len as usize > 20 {
        return Err(err(
            format!("{f}.quic_id_offset"),
            format!("{offset} + quic_id_len {len} is beyond a 20-byte connection ID"),
        ));
    }
    let layout = QuicIdLayout { offset, len };
    let mut seen = HashMap::new();
    for b in backends {
        let Some(id) = b.quic_id else { continue };
        if id > layout.max_id() {
            return Err(err(
                format!("{f}.quic_id_len"),
                format!(
                    "backend {}'s quic_id {id} does not fit in {len} bytes",
                    b.address
                ),
            ));
        }
        if let Some(other) = seen.insert(id, b.address) {
            return Err(err(
                format!("{f}.pools"),
                format!("backends {other} and {} share quic_id {id}", b.address),
            ));
        }
    }
    Ok(Some(layout))
}

fn health(f: &str, h: &RawHealth) -> Result<HealthCheck, ConfigError> {
    let kind = match h.kind.as_str() {
        "tcp" => HealthKind::Tcp,
        "http" => HealthKind::Http {
            path: h.path.clone().unwrap_or_else(|| "/".into()),
            status: h.status.unwrap_or(200),
            body: h.body.clone(),
        },
        other => {
            return Err(err(
                format!("{f}.kind"),
                format!("{other:?}: use \"tcp\" or \"http\""),
            ))
        }
    };
    if let Some(p) = &h.path {
        if !p.starts_with('/') {
            return Err(err(format!("{f}.path"), format!("{p:?} must start with /")));
        }
    }
    let interval_ms = h.interval_ms.unwrap_or(1000);
    let timeout_ms = h.timeout_ms.unwrap_or(500);
    if !(10..=3_600_000).contains(&interval_ms) {
        return Err(err(
            format!("{f}.interval_ms"),
            format!("{interval_ms} is not in 10..=3600000"),
        ));
    }
    if timeout_ms == 0 || timeout_ms > interval_ms {
        return Err(err(
            format!("{f}.timeout_ms"),
            format!("{timeout_ms} must be in 1..=interval_ms"),
        ));
    }
    let rise = h.rise.unwrap_or(2);
    let fall = h.fall.unwrap_or(2);
    if rise == 0 {
        return Err(err(format!("{f}.rise"), "must be at least 1"));
    }
    if fall == 0 {
        return Err(err(format!("{f}.fall"), "must be at least 1"));
    }
    Ok(HealthCheck {
        kind,
        port: h.port,
        interval_ms,
        timeout_ms,
        rise,
        fall,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
        [balancer]
        address = "10.0.0.2"
        address6 = "fd00::2"
        maglev_size = 251

        [[prefix_group]]
        name = "class-a"
        prefixes = ["74.125.0.0/16", "173.194.0.0/16"]

        [[vip]]
        name = "web"
        address = "203.0.113.10"
        port = 80
        protocol = "tcp"
        pools = ["web"]

        [[vip]]
        name = "svc1"
        prefix_group = "class-a"
        suffix = "0.0.0.1"
        suffix_len = 8
        port = 443
        protocol = "tcp"
        pools = ["all"]
        encap = "ipip"

        [[pool]]
        name = "web"
        backends = [{ address = "10.0.1.1", weight = 2 }, { address = "10.0.1.2" }]
        health = { kind = "http", path = "/healthz", interval_ms = 200, timeout_ms = 100 }

        [[pool]]
        name = "all"
        pools = ["web"]
        backends = [{ address = "10.0.1.1", weight = 2 }, { address = "fd00::1:3" }]
    "#;

    #[test]
    fn good_config() {
        let c = LbConfig::from_toml(GOOD).unwrap();
        assert_eq!(c.vips.len(), 2);
        assert_eq!(c.vips[0].backends.len(), 2);
        assert_eq!(c.vips[0].backends[0].weight, 2);
        // Nested pool flattened and deduplicated by address.
        assert_eq!(c.vips[1].backends.len(), 3);
        assert_eq!(c.vips[1].pools, vec!["all".to_string(), "web".to_string()]);
        assert_eq!(c.vips[1].encap, EncapKind::Ipip);
        assert_eq!(
            c.vips[1].matcher,
            VipMatch::Suffix {
                group: 0,
                suffix: 1,
                len: 8
            }
        );
        assert!(c.pools[0].health.is_some());
        assert_eq!(c.backend_addresses().len(), 3);
    }

    fn error_of(text: &str) -> ConfigError {
        LbConfig::from_toml(text).unwrap_err()
    }

    #[test]
    fn errors_name_the_field() {
        let cases: &[(&str, &str, &str)] = &[
            (
                r#"pools = ["web"]"#,
                r#"pools = ["nope"]"#,
                "vip[0].pools[0]",
            ),
            (
                r#"port = 80"#,
                r#"port = 80
        encap = "carrier-pigeon""#,
                "vip[0].encap",
            ),
            (
                r#"address = "203.0.113.10""#,
                r#"address = "203.0.113.x""#,
                "vip[0].address",
            ),
            (
                r#"maglev_size = 251"#,
                r#"maglev_size = 250"#,
                "balancer.maglev_size",
            ),
            (
                r#"maglev_size = 251"#,
                r#"maglev_size = 251
        syn_timeout_ms = 50"#,
                "balancer.syn_timeout_ms",
            ),
            (
                r#"maglev_size = 251"#,
                r#"maglev_size = 251
        conn_idle_timeout_ms = 2000
        syn_timeout_ms = 3000"#,
                "balancer.syn_timeout_ms",
            ),
            (
                r#"maglev_size = 251"#,
                r#"maglev_size = 251
        max_backends = 100000000"#,
                "balancer.max_backends",
            ),
            (
                r#"maglev_size = 251"#,
                r#"maglev_size = 251
        mtu = 100"#,
                "balancer.mtu",
            ),
            (
                // The second VIP tunnels to an IPv6 backend: below 1280 is refused.
                r#"maglev_size = 251"#,
                r#"maglev_size = 251
        mtu = 1000"#,
                "balancer.mtu",
            ),
            (
                r#"maglev_size = 251"#,
                r#"maglev_size = 251
        icmp_rate = 10000000"#,
                "balancer.icmp_rate",
            ),
            (
                r#"port = 80"#,
                r#"port = 80
        mtu = 70000"#,
                "vip[0].mtu",
            ),
            (
                r#"weight = 2 }, { address = "10.0.1.2" }]"#,
                r#"weight = 2000000 }, { address = "10.0.1.2" }]"#,
                "pool \"web\".backends[0].weight",
            ),
            (
                r#"protocol = "tcp"
        pools = ["web"]"#,
                r#"protocol = "sctp"
        pools = ["web"]"#,
                "vip[0].protocol",
            ),
            (
                r#""74.125.0.0/16""#,
                r#""74.125.0.1/16""#,
                "prefix_group[0].prefixes[0]",
            ),
            (
                r#"interval_ms = 200"#,
                r#"interval_ms = 200, rise = 0"#,
                "pool \"web\".health.rise",
            ),
        ];
        for (from, to, field) in cases {
            assert!(GOOD.contains(from), "fixture lacks {from}");
            let e = error_of(&GOOD.replacen(from, to, 1));
            assert_eq!(e.field, *field, "{e}");
        }
    }

    #[test]
    fn seed_is_secret_by_default_and_required_for_a_cluster() {
        let seeded = GOOD.replacen(
            "maglev_size = 251",
            "maglev_size = 251\n        seed = 42",
            1,
        );
        let c = LbConfig::from_toml(&seeded).unwrap();
        assert_eq!(
            (c.balancer.seed, c.balancer.seed_origin),
            (42, SeedOrigin::Configured)
        );
        let a = LbConfig::from_toml(GOOD).unwrap();
        let b = LbConfig::from_toml(GOOD).unwrap();
        assert_eq!(a.balancer.seed_origin, SeedOrigin::Random);
        assert_ne!(a.balancer.seed, b.balancer.seed, "a fresh seed per start");
        for section in [
            "[bgp]\nlocal_as = 65001\npeer = \"10.0.0.1\"\npeer_as = 65000\n",
            "[cluster]\nbalancers = [\"10.0.0.3\", \"10.0.0.2\"]\n",
        ] {
            let e = error_of(&format!("{GOOD}\n{section}"));
            assert_eq!(e.field, "balancer.seed", "{e}");
            assert!(LbConfig::from_toml(&format!("{seeded}\n{section}")).is_ok());
        }
    }

    #[test]
    fn bgp_and_cluster_sections() {
        let seeded = GOOD.replacen(
            "maglev_size = 251",
            "maglev_size = 251\n        seed = 42",
            1,
        );
        let text = format!(
            "{seeded}\n[bgp]\nlocal_as = 65001\npeer = \"10.0.0.1\"\npeer_as = 65000\n\
             [cluster]\nbalancers = [\"10.0.0.3\", \"10.0.0.2\"]\n"
        );
        let c = LbConfig::from_toml(&text).unwrap();
        let b = c.bgp.as_ref().unwrap();
        assert_eq!(b.speaker, "bird");
        assert_eq!(
            b.router_id,
            Ipv4Addr::new(10, 0, 0, 2),
            "defaults to balancer.address"
        );
        assert_eq!(b.next_hop, IpAddr::from([10, 0, 0, 2]));
        assert_eq!((b.hold_time_s, b.drain_ms), (9, 2000));
        let cl = c.cluster.as_ref().unwrap();
        // Sorted: the owner index means the same balancer everywhere.
        assert_eq!(
            cl.balancers,
            [Ipv4Addr::new(10, 0, 0, 2), Ipv4Addr::new(10, 0, 0, 3)]
        );
        assert_eq!(cl.me, 0);
        let cases: &[(&str, &str, &str)] = &[
            ("local_as = 65001", "local_as = 0", "bgp.local_as"),
            ("peer = \"10.0.0.1\"", "peer = \"router\"", "bgp.peer"),
            (
                "peer_as = 65000",
                "peer_as = 65000\nspeaker = \"quagga\"",
                "bgp.speaker",
            ),
            (
                "peer_as = 65000",
                "peer_as = 65000\nhold_time_s = 2",
                "bgp.hold_time_s",
            ),
            (
                "[\"10.0.0.3\", \"10.0.0.2\"]",
                "[\"10.0.0.3\"]",
                "cluster.balancers",
            ),
            (
                "[\"10.0.0.3\", \"10.0.0.2\"]",
                "[\"10.0.0.2\", \"10.0.0.2\"]",
                "cluster.balancers[1]",
            ),
            (
                "[\"10.0.0.3\", \"10.0.0.2\"]",
                "[\"fd00::3\", \"10.0.0.2\"]",
                "cluster.balancers[0]",
            ),
        ];
        for (from, to, field) in cases {
            assert!(text.contains(from), "fixture lacks {from}");
            let e = error_of(&text.replacen(from, to, 1));
            assert_eq!(e.field, *field, "{e}");
        }
    }

    #[test]
    fn cycles_and_unknown_keys_are_rejected() {
        let cyc = GOOD.replace(
            r#"name = "web"
        backends"#,
            r#"name = "web"
        pools = ["all"]
        backends"#,
        );
        let e = error_of(&cyc);
        assert!(e.message.contains("cycle"), "{e}");
        let e = error_of(&GOOD.replace("maglev_size = 251", "maglev_size = 251\nmagelv = 1"));
        assert!(e.message.contains("unknown field"), "{e}");
        assert!(e.field.starts_with("line "), "{e}");
    }

    #[test]
    fn weight_zero_or_drain_marks_a_backend_draining() {
        let c = LbConfig::from_toml(
            &GOOD
                .replace(
                    r#"{ address = "10.0.1.1", weight = 2 }"#,
                    r#"{ address = "10.0.1.1", weight = 0 }"#,
                )
                .replace(
                    r#"{ address = "10.0.1.2" }"#,
                    r#"{ address = "10.0.1.2", drain = true }"#,
                ),
        )
        .unwrap();
        let b = &c.vips[0].backends;
        assert!(b[0].drain && b[1].drain, "{b:?}");
        let c = LbConfig::from_toml(GOOD).unwrap();
        assert!(!c.vips[0].backends[0].drain);
    }

    #[test]
    fn missing_outer_address_is_reported() {
        let e = error_of(&GOOD.replace("address6 = \"fd00::2\"", ""));
        assert_eq!(e.field, "balancer.address6", "{e}");
    }

    #[test]
    fn prefix_and_suffix_helpers() {
        let p = Prefix::parse("10.0.0.0/8").unwrap();
        assert!(p.contains("10.1.2.3".parse().unwrap()));
        assert!(!p.contains("11.1.2.3".parse().unwrap()));
        assert!(!p.contains("::1".parse().unwrap()));
        assert_eq!(low_bits("1.2.3.4".parse().unwrap(), 8), 4);
        assert_eq!(
            mask("1.2.3.4".parse().unwrap(), 16),
            "1.2.0.0".parse::<IpAddr>().unwrap()
        );
        assert!(Prefix::parse("10.0.0.0/33").is_err());
    }
}
