//! Validation: the meaning of a parsed file ([`super::LbConfig::from_toml`]'s second step).
//!
//! [`validate`] checks the sections in a fixed order — `[balancer]`, prefix groups, pool names,
//! pools' own backends, pool nesting and health checks, VIPs, the counter limits, the shared seed,
//! `[bgp]`, `[cluster]`, `[ipfix]` — and stops at the first error, which names the field. Later sections
//! see the earlier ones validated (a VIP resolves its pools against the flattened pools, the BGP
//! router id defaults to the validated `balancer.address`).

use super::{
    err, low_bits, BackendSpec, BalancerSpec, BgpSpec, ClusterSpec, ConfigError, EncapKind,
    HealthCheck, HealthKind, LbConfig, PoolSpec, Prefix, PrefixGroup, QuicIdLayout, RawBalancer,
    RawBgp, RawCluster, RawConfig, RawHealth, RawPool, RawPrefixGroup, RawVip, SeedOrigin,
    VipMatch, VipSpec, DEFAULT_CONN_CACHE_ENTRIES,
};
use fp_wire::ethernet::MacAddr;
use fp_wire::ip::IpProtocol;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::IpAddr;

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

/// Every section's meaning, in this order; the first error found is returned.
pub(super) fn validate(raw: RawConfig) -> Result<LbConfig, ConfigError> {
    let balancer = balancer(&raw.balancer)?;
    let (prefix_groups, group_index) = prefix_groups(&raw.prefix_group)?;
    let pool_index = pool_index(&raw.pool)?;
    let direct = pool_backends(&raw.pool)?;
    let (pools, flat) = pools(&raw.pool, &pool_index, &direct)?;
    let vips = vips(
        &raw.vip,
        &balancer,
        &prefix_groups,
        &group_index,
        &pool_index,
        &flat,
    )?;
    limits(&balancer, &vips, &pools)?;
    shared_seed(&raw)?;
    let bgp = match &raw.bgp {
        Some(g) => Some(validate_bgp(g, &balancer)?),
        None => None,
    };
    let cluster = match &raw.cluster {
        Some(c) => Some(validate_cluster(c, &balancer)?),
        None => None,
    };
    let ipfix = match &raw.ipfix {
        Some(x) => Some(x.validate().map_err(|e| err(e.field, e.message))?),
        None => None,
    };
    Ok(LbConfig {
        balancer,
        prefix_groups,
        vips,
        pools,
        bgp,
        cluster,
        ipfix,
    })
}

/// `[balancer]`: addresses, MACs, Maglev size, table sizes, timeouts, rates, MTU, cache, slots.
fn balancer(b: &RawBalancer) -> Result<BalancerSpec, ConfigError> {
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
    let second_chance_s = b.second_chance_s.unwrap_or(DEFAULT_SECOND_CHANCE_S as u64);
    if second_chance_s > MAX_SECOND_CHANCE_S as u64 {
        return Err(err(
            "balancer.second_chance_s",
            format!("{second_chance_s} is more than {MAX_SECOND_CHANCE_S} (7 days)"),
        ));
    }
    Ok(BalancerSpec {
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
        seed_file: b.seed_file.clone(),
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
        second_chance_s: second_chance_s as u32,
        state_dir: b.state_dir.clone(),
    })
}

/// Default of `balancer.second_chance_s`: an hour.
pub const DEFAULT_SECOND_CHANCE_S: u32 = 3600;
/// Largest `balancer.second_chance_s`.
pub const MAX_SECOND_CHANCE_S: u32 = 7 * 24 * 3600;

/// `vip.second_chance`: on by default where the tunnel can carry it (GRE, IPIP); asking for it
/// with VXLAN or L2 DSR is an error.
fn vip_second_chance(f: &str, v: &RawVip, encap: EncapKind) -> Result<bool, ConfigError> {
    let tunnel = matches!(encap, EncapKind::Gre | EncapKind::Ipip);
    match v.second_chance {
        Some(true) if !tunnel => Err(err(
            format!("{f}.second_chance"),
            "needs encap = \"gre\" or \"ipip\" (the option rides in the outer IP header)",
        )),
        Some(on) => Ok(on),
        None => Ok(tunnel),
    }
}

/// `[[prefix_group]]`: unique names and prefixes that parse; returns the groups and their index.
fn prefix_groups(
    raw: &[RawPrefixGroup],
) -> Result<(Vec<PrefixGroup>, HashMap<String, usize>), ConfigError> {
    let mut prefix_groups = Vec::new();
    let mut group_index = HashMap::new();
    for (i, g) in raw.iter().enumerate() {
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
    Ok((prefix_groups, group_index))
}

/// `[[pool]]` names: non-empty and unique; returns the pools' index by name.
fn pool_index(raw: &[RawPool]) -> Result<BTreeMap<&str, usize>, ConfigError> {
    let mut pool_index: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, p) in raw.iter().enumerate() {
        if p.name.is_empty() || pool_index.insert(p.name.as_str(), i).is_some() {
            return Err(err(
                format!("pool[{i}].name"),
                format!("{:?} is empty or not unique", p.name),
            ));
        }
    }
    Ok(pool_index)
}

/// `pool.backends`: each pool's own backends (address, weight, drain, mac, name, quic_id).
fn pool_backends(raw: &[RawPool]) -> Result<Vec<Vec<BackendSpec>>, ConfigError> {
    let mut direct: Vec<Vec<BackendSpec>> = Vec::new();
    for p in raw {
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
    Ok(direct)
}

/// A flattened pool: its backends, nested pools' included and deduplicated, and the pool names.
type Flat = (Vec<BackendSpec>, Vec<String>);

/// `pool.pools` and `pool.health`: nesting that resolves without a cycle, and health checks.
fn pools(
    raw: &[RawPool],
    pool_index: &BTreeMap<&str, usize>,
    direct: &[Vec<BackendSpec>],
) -> Result<(Vec<PoolSpec>, Vec<Option<Flat>>), ConfigError> {
    let mut flat: Vec<Option<Flat>> = vec![None; raw.len()];
    let mut pools = Vec::new();
    for i in 0..raw.len() {
        let (backends, _) = flatten(i, raw, pool_index, direct, &mut flat, &mut Vec::new())?;
        let health = match &raw[i].health {
            Some(h) => Some(health(&format!("pool \"{}\".health", raw[i].name), h)?),
            None => None,
        };
        pools.push(PoolSpec {
            name: raw[i].name.clone(),
            backends,
            health,
        });
    }
    Ok((pools, flat))
}

/// Pool `i` flattened (memoised in `flat`): a nested pool that does not exist or a cycle fails.
fn flatten(
    i: usize,
    raw: &[RawPool],
    index: &BTreeMap<&str, usize>,
    direct: &[Vec<BackendSpec>],
    flat: &mut Vec<Option<Flat>>,
    stack: &mut Vec<usize>,
) -> Result<Flat, ConfigError> {
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

/// `[[vip]]`: names, matching, protocol, encapsulation, MTU, pools, QUIC routing, backends.
fn vips(
    raw: &[RawVip],
    balancer: &BalancerSpec,
    prefix_groups: &[PrefixGroup],
    group_index: &HashMap<String, usize>,
    pool_index: &BTreeMap<&str, usize>,
    flat: &[Option<Flat>],
) -> Result<Vec<VipSpec>, ConfigError> {
    let mut vips = Vec::new();
    let mut names = HashSet::new();
    let mut keys = HashSet::new();
    for (i, v) in raw.iter().enumerate() {
        let f = format!("vip[{i}]");
        if v.name.is_empty() || !names.insert(v.name.clone()) {
            return Err(err(
                format!("{f}.name"),
                format!("{:?} is empty or not unique", v.name),
            ));
        }
        let protocol = vip_protocol(&f, v)?;
        let matcher = vip_matcher(&f, v, prefix_groups, group_index)?;
        let key = format!("{matcher:?}/{}/{}", v.port, protocol.0);
        if !keys.insert(key) {
            return Err(err(
                f.clone(),
                "another VIP has the same address, port and protocol",
            ));
        }
        let encap = vip_encap(&f, v)?;
        if v.pools.is_empty() {
            return Err(err(format!("{f}.pools"), "needs at least one pool"));
        }
        let vip_mtu = v
            .mtu
            .map(|m| check_mtu(&format!("{f}.mtu"), m))
            .transpose()?;
        let (backends, pool_names) = vip_backends(&f, v, pool_index, flat)?;
        let quic = quic_layout(&f, v, protocol, &backends)?;
        let second_chance = vip_second_chance(&f, v, encap)?;
        vip_reach(&f, v, encap, vip_mtu, &backends, balancer)?;
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
            second_chance,
        });
    }
    Ok(vips)
}

/// `vip.protocol`: `tcp` or `udp`.
fn vip_protocol(f: &str, v: &RawVip) -> Result<IpProtocol, ConfigError> {
    Ok(match v.protocol.to_ascii_lowercase().as_str() {
        "tcp" => IpProtocol::TCP,
        "udp" => IpProtocol::UDP,
        other => {
            return Err(err(
                format!("{f}.protocol"),
                format!("{other:?}: use \"tcp\" or \"udp\""),
            ))
        }
    })
}

/// `vip.address`, or `vip.prefix_group` with a `suffix` of `suffix_len` bits that fits the group.
fn vip_matcher(
    f: &str,
    v: &RawVip,
    prefix_groups: &[PrefixGroup],
    group_index: &HashMap<String, usize>,
) -> Result<VipMatch, ConfigError> {
    Ok(match (&v.address, &v.prefix_group) {
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
    })
}

/// `vip.encap` (default `gre`) and `vip.vni`: a 24-bit VNI with `vxlan` and only with it.
fn vip_encap(f: &str, v: &RawVip) -> Result<EncapKind, ConfigError> {
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
    Ok(encap)
}

/// `vip.pools`: pools that exist; returns their backends (deduplicated) and all pool names.
fn vip_backends(
    f: &str,
    v: &RawVip,
    pool_index: &BTreeMap<&str, usize>,
    flat: &[Option<Flat>],
) -> Result<Flat, ConfigError> {
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
    let backends = dedup(f, backends)?;
    pool_names.sort();
    pool_names.dedup();
    Ok((backends, pool_names))
}

/// A VIP's backends: present, within Maglev's size, reachable by MTU, outer address and MAC.
fn vip_reach(
    f: &str,
    v: &RawVip,
    encap: EncapKind,
    vip_mtu: Option<u16>,
    backends: &[BackendSpec],
    balancer: &BalancerSpec,
) -> Result<(), ConfigError> {
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
    for b in backends {
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
            (_, IpAddr::V4(_)) if balancer.address.is_none() => Some("balancer.address"),
            (_, IpAddr::V6(_)) if balancer.address6.is_none() => Some("balancer.address6"),
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
    Ok(())
}

/// `balancer.max_vips` and `max_backends`: VIPs and backend addresses fit the counter slots.
fn limits(
    balancer: &BalancerSpec,
    vips: &[VipSpec],
    pools: &[PoolSpec],
) -> Result<(), ConfigError> {
    let (max_vips, max_backends) = (balancer.max_vips, balancer.max_backends);
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
    Ok(())
}

/// `balancer.seed`, `balancer.seed_file`: not both; one of them set explicitly when other
/// balancers share the traffic (`[bgp]`, `[cluster]`): they must all hash alike.
fn shared_seed(raw: &RawConfig) -> Result<(), ConfigError> {
    if raw.balancer.seed.is_some() && raw.balancer.seed_file.is_some() {
        return Err(err(
            "balancer.seed_file",
            "give the seed or the file that keeps it, not both",
        ));
    }
    if let Some(f) = &raw.balancer.seed_file {
        if !f.is_absolute() {
            return Err(err(
                "balancer.seed_file",
                format!("{:?} is not an absolute path", f.display().to_string()),
            ));
        }
    }
    if raw.balancer.seed.is_none()
        && raw.balancer.seed_file.is_none()
        && (raw.bgp.is_some() || raw.cluster.is_some())
    {
        let section = if raw.bgp.is_some() {
            "[bgp]"
        } else {
            "[cluster]"
        };
        return Err(err(
            "balancer.seed",
            format!(
                "must be set with {section} (or balancer.seed_file, a file every balancer \
                 reads): every balancer behind the same router must hash flows alike, so a \
                 connection keeps its backend whichever balancer gets it; choose a random 64-bit \
                 value, keep it secret and give it to all of them"
            ),
        ));
    }
    Ok(())
}

/// `[bgp]`: speaker, AS numbers, peer, router id, next hop, hold time and drain time.
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

/// `[cluster]`: distinct IPv4 balancer addresses that include this balancer's own.
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

/// `pool.health`: kind, HTTP path, interval, timeout within the interval, rise and fall.
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
