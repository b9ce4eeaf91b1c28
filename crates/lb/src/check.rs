//! `flowplane check --config FILE`: validate a configuration the way `flowplane run` does at start
//! (and a reload does), without touching any interface, and print what it would do — the VIPs,
//! the pools with their weights and health checks, each VIP's Maglev table digest, the BGP
//! announcements and the scale-out peers. Run it before `systemctl reload` (the packaged unit
//! does): a file that fails here names the field and the running balancer never sees it.
//!
//! What only the running balancer can check is left to the reload itself: settings fixed at start
//! (table sizes, the seed, `[bgp]`) may not change by reload; a reload that tries is rejected
//! and the running configuration stays.

use crate::config::{LbConfig, SeedOrigin, VipMatch};
use crate::controller::{Balancer, ControlError};
use crate::health::{HealthKind, Plan};
use anyhow::{anyhow, Result};
use std::fmt::Write;
use std::path::PathBuf;

/// `flowplane check`.
#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    /// The configuration to check (TOML).
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,
    /// The port driver it will run with (AF_XDP steers by destination address in the kernel and
    /// so cannot serve prefix/suffix VIPs).
    #[arg(long, default_value = "af_packet")]
    pub driver: fp_engine::live::Driver,
    /// Print nothing when the configuration is valid.
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

/// Validate `a.config`; print the plan unless `--quiet`. The error names the file and the field.
pub fn run(a: CheckArgs) -> Result<()> {
    let path = a.config.display().to_string();
    let text = std::fs::read_to_string(&a.config).map_err(|e| anyhow!("reading {path}: {e}"))?;
    let plan = check(&text, a.driver.filters_destinations()).map_err(|e| anyhow!("{path}: {e}"))?;
    if !a.quiet {
        print!("{path}: valid\n{plan}");
    }
    Ok(())
}

/// Validate a configuration's text exactly as a start does (parse, fields, health plan, the
/// driver's steering, every VIP's Maglev table) and describe it. `filters_destinations`: whether
/// the port driver steers by destination address.
pub fn check(text: &str, filters_destinations: bool) -> Result<String, ControlError> {
    let mut cfg = LbConfig::from_toml(text)?;
    // A seed kept in its state file: read it if it exists (never create it here), so the digests
    // are the running balancer's.
    let seed_file = match crate::seed::path_of(&cfg) {
        Some(path) => match crate::seed::read(&path)? {
            Some(seed) => {
                cfg.balancer.seed = seed;
                Some((path, true))
            }
            None => Some((path, false)),
        },
        None => None,
    };
    let machine = Balancer::new(cfg, None, filters_destinations)?;
    Ok(describe(&machine, &machine.health_plan(), seed_file))
}

fn describe(
    machine: &Balancer,
    plan: &Plan,
    seed_file: Option<(std::path::PathBuf, bool)>,
) -> String {
    let cfg = machine.config();
    let snap = machine.snapshots().load();
    let b = &cfg.balancer;
    let mut s = String::new();
    let opt = |a: Option<String>| a.unwrap_or_else(|| "none".into());
    let _ = writeln!(
        s,
        "balancer: address {}, address6 {}, mac {}, gateway_mac {}",
        opt(b.address.map(|a| a.to_string())),
        opt(b.address6.map(|a| a.to_string())),
        b.mac,
        b.gateway_mac
    );
    let _ = writeln!(
        s,
        "  seed: {}",
        match (b.seed_origin, &seed_file) {
            (SeedOrigin::Configured, _) =>
                "from the file (digests below match every balancer with the same file)".to_string(),
            (_, Some((path, true))) => format!(
                "not in the file: kept in the state file {} (the value is not shown; digests \
                 below match every balancer that reads it)",
                path.display()
            ),
            (_, Some((path, false))) => format!(
                "not in the file: kept in the state file {}, which the balancer creates at its \
                 first start and reads at every start (digests below are for this check only)",
                path.display()
            ),
            (_, None) => "not set".to_string(),
        }
    );
    let with: Vec<&str> = cfg
        .vips
        .iter()
        .filter(|v| v.second_chance)
        .map(|v| v.name.as_str())
        .collect();
    let _ = writeln!(
        s,
        "  second chance: {}; backend sets kept in {}",
        if b.second_chance_s == 0 || with.is_empty() {
            "off".to_string()
        } else {
            format!(
                "earlier backend sets kept {} s, on VIP(s) {}",
                b.second_chance_s,
                with.join(", ")
            )
        },
        crate::sets::path_of(cfg).display()
    );
    if let Some(x) = &cfg.ipfix {
        let to: Vec<String> = x.collectors.iter().map(|c| c.to_string()).collect();
        let _ = writeln!(
            s,
            "  ipfix: to {} (observation domain {}): connection records {}, {}; templates every \
             {} s; {} events queued per worker at most; {}",
            to.join(", "),
            x.observation_domain,
            if x.connections { "on" } else { "off" },
            match x.sample_one_in {
                0 => "no packet records".to_string(),
                n => format!("one packet in {n} sampled"),
            },
            x.template_refresh_s,
            x.queue,
            match x.max_records_per_second {
                0 => "no rate limit".to_string(),
                n => format!("at most {n} records/s"),
            }
        );
    }
    let _ = writeln!(
        s,
        "  per worker: {} IPv4 + {} IPv6 connections (idle timeout {} ms), {} fragment \
         entries ({} ms); Maglev tables of {} slots; outer TTL {}",
        b.conn_capacity,
        b.conn_capacity_v6,
        b.conn_idle_timeout_ms,
        b.frag_capacity,
        b.frag_timeout_ms,
        b.maglev_size,
        b.ttl
    );
    let _ =
        writeln!(
        s,
        "  syn guard: embryonic entries live {} ms; SYNs balanced without an entry at 90 % of a \
         table's slots{}",
        b.syn_timeout_ms,
        if b.new_conn_rate == 0 {
            String::new()
        } else {
            format!(" and above {} new connections/s per worker", b.new_conn_rate)
        }
    );
    let _ = writeln!(
        s,
        "  path MTU: {}; ICMP too-big errors at most {}/s per worker",
        match b.mtu {
            Some(m) => format!("{m}"),
            None => "the interface's (1500 when not live)".into(),
        },
        b.icmp_rate
    );
    let _ = writeln!(s, "vips: {}", cfg.vips.len());
    for (v, state) in cfg.vips.iter().zip(&snap.vips) {
        let matcher = match &v.matcher {
            VipMatch::Exact(a) => a.to_string(),
            VipMatch::Suffix { group, suffix, len } => format!(
                "suffix {suffix:#x}/{len} of prefix group {:?}",
                cfg.prefix_groups.get(*group).map_or("?", |g| &g.name)
            ),
        };
        let port = if v.port == 0 {
            "any port".to_string()
        } else {
            format!("port {}", v.port)
        };
        let table = match &state.table {
            Some(t) => format!("Maglev table digest {:016x}", t.digest()),
            None => "no Maglev table (no backend)".into(),
        };
        let mut extra = String::new();
        if let Some(m) = v.mtu {
            extra += &format!(", path MTU {m}");
        }
        if let Some(q) = v.quic {
            let ids = v.backends.iter().filter(|b| b.quic_id.is_some()).count();
            extra += &format!(
                ", QUIC: server id in bytes {}..{} of the connection ID ({ids} backend(s) with \
                 a quic_id)",
                q.offset,
                q.offset + q.len
            );
        }
        let _ = writeln!(
            s,
            "  vip {:?}: {matcher} {port}/{}, encap {}, pools [{}], {} backend(s), {table}{extra}",
            v.name,
            crate::metrics::proto_text(v.protocol),
            v.encap,
            v.pools.join(", "),
            v.backends.len()
        );
    }
    let _ = writeln!(s, "pools: {}", cfg.pools.len());
    for p in &cfg.pools {
        let health = match &p.health {
            None => "no health check (always up)".to_string(),
            Some(h) => {
                let what = match &h.kind {
                    HealthKind::Tcp => "tcp connect".to_string(),
                    HealthKind::Http { path, status, body } => format!(
                        "http GET {path} expecting {status}{}",
                        body.as_ref()
                            .map_or(String::new(), |b| format!(" and body containing {b:?}"))
                    ),
                };
                format!(
                    "{what} on {}, every {} ms, timeout {} ms, up after {}, down after {}",
                    h.port
                        .map_or("the VIP's port".to_string(), |p| format!("port {p}")),
                    h.interval_ms,
                    h.timeout_ms,
                    h.rise,
                    h.fall
                )
            }
        };
        let _ = writeln!(s, "  pool {:?}: {health}", p.name);
        for be in &p.backends {
            let _ = writeln!(
                s,
                "    backend {} name {:?} weight {}{}{}{}",
                be.address,
                be.name,
                be.weight,
                if be.drain {
                    " draining (no new connections)"
                } else {
                    ""
                },
                be.mac.map_or(String::new(), |m| format!(" mac {m}")),
                be.quic_id
                    .map_or(String::new(), |q| format!(" quic_id {q}"))
            );
        }
    }
    let _ = writeln!(
        s,
        "health checks: {} address(es) checked, {} unchecked",
        plan.checks.len(),
        plan.unchecked.len()
    );
    for c in &plan.conflicts {
        let _ = writeln!(s, "  note: {c}");
    }
    match &cfg.bgp {
        None => {
            let _ = writeln!(s, "bgp: none (nothing announced)");
        }
        Some(g) => {
            let vips: Vec<String> = cfg
                .vips
                .iter()
                .filter_map(|v| match v.matcher {
                    VipMatch::Exact(a) => Some(a.to_string()),
                    VipMatch::Suffix { .. } => None,
                })
                .collect();
            let _ = writeln!(
                s,
                "bgp: {} AS {} to peer {} AS {}, router id {}, next hop {}, hold {} s, drain {} \
                 ms; announces (while healthy) {}",
                g.speaker,
                g.local_as,
                g.peer,
                g.peer_as,
                g.router_id,
                g.next_hop,
                g.hold_time_s,
                g.drain_ms,
                if vips.is_empty() {
                    "nothing".to_string()
                } else {
                    vips.join(", ")
                }
            );
        }
    }
    if let Some(c) = &cfg.cluster {
        let _ = writeln!(
            s,
            "cluster: {} balancers ({}), this one is {}",
            c.balancers.len(),
            c.balancers
                .iter()
                .map(|a| a.to_string())
                .collect::<Vec<_>>()
                .join(", "),
            c.balancers[c.me]
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const CFG: &str = r#"
        [balancer]
        address = "10.0.0.2"
        seed = 7
        maglev_size = 251
        [[vip]]
        name = "web"
        address = "203.0.113.10"
        port = 80
        protocol = "tcp"
        pools = ["p"]
        [[pool]]
        name = "p"
        backends = [{ address = "10.0.1.1", weight = 3 }, { address = "10.0.1.2" }]
        health = { kind = "http", path = "/healthz", interval_ms = 200, timeout_ms = 100 }
    "#;

    #[test]
    fn plan_shows_vips_pools_checks_and_a_stable_digest() {
        let a = check(CFG, false).unwrap();
        assert!(a.contains("vip \"web\": 203.0.113.10 port 80/tcp"), "{a}");
        assert!(
            a.contains("backend 10.0.1.1 name \"10.0.1.1\" weight 3"),
            "{a}"
        );
        assert!(a.contains("http GET /healthz expecting 200"), "{a}");
        assert!(a.contains("bgp: none"), "{a}");
        // The digest depends only on the file when it gives the seed, so two balancers (or two
        // checks) agree; changing a weight changes it.
        assert_eq!(a, check(CFG, false).unwrap());
        let b = check(&CFG.replace("weight = 3", "weight = 4"), false).unwrap();
        let digest = |t: &str| {
            t.split("Maglev table digest ")
                .nth(1)
                .unwrap()
                .split_whitespace()
                .next()
                .unwrap()
                .to_string()
        };
        assert_ne!(digest(&a), digest(&b));
    }

    #[test]
    fn plan_shows_path_mtu_and_quic_routing() {
        let a = check(CFG, false).unwrap();
        assert!(a.contains("path MTU: the interface's (1500 when not live); ICMP too-big errors at most 1000/s per worker"), "{a}");
        let q = CFG
            .replace(
                "seed = 7",
                "seed = 7\n        mtu = 1600\n        icmp_rate = 10",
            )
            .replace(
                "protocol = \"tcp\"",
                "protocol = \"udp\"\n        quic = true\n        mtu = 9000",
            )
            .replace("weight = 3 }", "weight = 3, quic_id = 5 }");
        let b = check(&q, false).unwrap();
        assert!(
            b.contains("path MTU: 1600; ICMP too-big errors at most 10/s per worker"),
            "{b}"
        );
        assert!(b.contains(", path MTU 9000, QUIC: server id in bytes 1..3 of the connection ID (1 backend(s) with a quic_id)"), "{b}");
        assert!(b.contains("weight 3 quic_id 5"), "{b}");
    }

    #[test]
    fn errors_name_the_field() {
        let e = check(&CFG.replace("weight = 3", "weight = 3000000"), false)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("pool \"p\".backends[0].weight"), "{e}");
        let bgp = "\n[bgp]\nlocal_as = 65001\npeer = \"10.0.0.1\"\npeer_as = 65000\n";
        let e = check(&format!("{}{bgp}", CFG.replace("seed = 7", "")), false)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("balancer.seed"), "{e}");
        let ok = check(&format!("{CFG}{bgp}"), false).unwrap();
        assert!(
            ok.contains("announces (while healthy) 203.0.113.10"),
            "{ok}"
        );
    }
}
