//! The load balancer's configuration: TOML in, a validated [`LbConfig`] out.
//!
//! Parsing and validation are separate steps. [`LbConfig::from_toml`] first lets `toml`/`serde` check
//! syntax, types and unknown keys (its errors carry the line and key), then checks meaning: every
//! name resolves, pools nest without cycles, every VIP reaches at least one backend, addresses and
//! prefixes parse, the Maglev table size is prime, encapsulations have what they need. An error names
//! the field (`vip[2].pools[0]: no pool named "web2"`) and nothing is applied: the engine only ever
//! sees a validated config, and a config that fails leaves the running one in force. This file
//! holds the types, the raw form and the parsing; the checks of meaning live in
//! `config/validate.rs`, one function per section.
//!
//! VIPs are matched exactly (`address`, `port`, `protocol`), or by Maglev's prefix/suffix scheme
//! (§4.2): a VIP names a `prefix_group` and a host `suffix` of `suffix_len` bits; a packet's
//! destination first goes through longest-prefix match against the groups' prefixes, then through
//! longest-suffix match among that group's VIPs. `port = 0` matches any port.

pub use fp_control::announce::BgpSpec;
pub use fp_control::health::{HealthCheck, HealthKind};
pub use fp_export::config::IpfixSpec;
use fp_export::config::RawIpfix;
pub use fp_wire::encap::EncapKind;
use fp_wire::ethernet::MacAddr;
use fp_wire::ip::IpProtocol;
use serde::Deserialize;
use std::collections::HashSet;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use validate::validate;

mod validate;

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
    /// Second chance (`vip.second_chance`, default on for GRE and IPIP): a packet of a flow with
    /// no connection entry, whose backend moved in the last `balancer.second_chance_s`, names the
    /// backend it had in its tunnel header (see `crate::stage` and `fp_wire::second_chance`).
    pub second_chance: bool,
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
    /// Whether `seed` came from the file (`balancer.seed`), or is to come from the state file
    /// (`balancer.seed_file`, else the service's state directory: `flowplane run` reads it, or
    /// creates it once, before the balancer starts). A reload of a file without a seed keeps the
    /// running seed.
    pub seed_origin: SeedOrigin,
    /// Where the seed is kept when the file does not give one (`balancer.seed_file`); `None`: the
    /// default, `seed` in the service's state directory (`$STATE_DIRECTORY`, else
    /// `/var/lib/flowplane`).
    pub seed_file: Option<std::path::PathBuf>,
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
    /// How long after a change of a VIP's backend set its earlier set is kept for second chance
    /// (`balancer.second_chance_s`, seconds; 0 turns second chance off everywhere).
    pub second_chance_s: u32,
    /// Where the balancer keeps what outlives a process (`balancer.state_dir`): the backend sets
    /// Maglev dealt from, so that a restart with a changed backend set gives second chance too.
    /// `None`: the service's state directory (`$STATE_DIRECTORY`, else `/var/lib/flowplane`).
    pub state_dir: Option<std::path::PathBuf>,
}

/// Where the hash seed came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SeedOrigin {
    /// `balancer.seed` in the file.
    Configured,
    /// Read from the seed's state file (or created there once, from the operating system's
    /// random source): restarts and upgrades keep it (`crate::seed`).
    StateFile,
    /// Drawn from the operating system's random source when the file was read, for this run
    /// only: what a configuration without a seed gets before the state file is read, and what
    /// offline runs and `flowplane check` use.
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
    /// IPFIX flow records (`[ipfix]`), if configured.
    pub ipfix: Option<IpfixSpec>,
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
    ipfix: Option<RawIpfix>,
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
    seed_file: Option<std::path::PathBuf>,
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
    second_chance_s: Option<u64>,
    state_dir: Option<std::path::PathBuf>,
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
    second_chance: Option<bool>,
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
    fn the_ipfix_section_is_checked_naming_the_field() {
        let c = LbConfig::from_toml(&format!(
            "{GOOD}\n[ipfix]\ncollectors = [\"192.0.2.7\"]\nsample_one_in = 0\n"
        ))
        .unwrap();
        let x = c.ipfix.unwrap();
        assert_eq!(x.collectors, vec!["192.0.2.7:4739".parse().unwrap()]);
        assert_eq!(x.sample_one_in, 0);
        assert!(x.connections);
        for (text, field) in [
            ("collectors = [\"192.0.2.7:0\"]", "ipfix.collectors[0]"),
            ("collectors = []", "ipfix.collectors"),
            (
                "collectors = [\"192.0.2.7\"]\ntemplate_refresh_s = 0",
                "ipfix.template_refresh_s",
            ),
            (
                "collectors = [\"192.0.2.7\"]\nmax_message_bytes = 100",
                "ipfix.max_message_bytes",
            ),
        ] {
            let e = LbConfig::from_toml(&format!("{GOOD}\n[ipfix]\n{text}\n")).unwrap_err();
            assert_eq!(e.field, field, "{text}: {e}");
        }
        let e = LbConfig::from_toml(&format!("{GOOD}\n[ipfix]\ncolectors = []\n")).unwrap_err();
        assert!(e.to_string().contains("colectors"), "{e}");
    }

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
