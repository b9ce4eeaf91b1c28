//! End-to-end test of IPv6 through the live load balancer (`flowplane run --interface`, over
//! AF_PACKET and over AF_XDP): IPv6 VIPs and IPv6 tunnels, with real clients and nginx backends
//! that `flowplane backend` prepared (tc eBPF decapsulation of GRE and IP-in-IP, either outer
//! family).
//!
//! # Topology
//!
//! ```text
//!              10.0.1.0/24, fd00:1::/64                 10.0.2.0/24, fd00:2::/64, one bridge ("sw")
//!   client ─────────────────────── router ──────┬───────────────┬──────────────────────┐
//!   10.0.1.2              10.0.1.1   10.0.2.1   │               │                      │
//!   fd00:1::2             fd00:1::1  fd00:2::1  lb 10.0.2.2     b1..b3 10.0.2.11-13
//!   (curl, wrk, Rust      static routes:        fd00:2::2       fd00:2::11-13
//!    sockets)             VIPs → the balancer   flowplane run   nginx ("backend N") on both
//!                         (IPv4 via 10.0.2.2,   --interface     families, every VIP on lo,
//!                          IPv6 via fd00:2::2)  eth0 (2 queues) `flowplane backend --decap
//!                                                               gre,ipip`
//! ```
//!
//! The lab is `live_lb.rs`'s, dual stack (`LabSpec::build_dual_stack`): IPv6 on in every
//! namespace with duplicate address detection off (addresses `nodad`, usable at once), IPv6
//! forwarding on the router, MLD snooping off on the bridge (neighbour discovery never waits for
//! an MLD report), checksum offload off on the client (both families' segments cross the
//! balancer), and on the balancer a route back to the clients' network but none covering the
//! IPv6 VIPs (no default route): over AF_PACKET its kernel would answer every client packet to
//! them with ICMPv6 "unreachable route" (resetting the connection) if the port driver did not keep
//! VIP frames from the host's stack — 5. checks that it sends none. The balancer's kernel sees neighbour discovery and MLD
//! frames; the balancer counts
//! what reaches it of them as drops, which this test does not assert on. Its configuration has
//! `balancer.address` 10.0.2.2 and `balancer.address6` fd00:2::2 (the outer sources) and two
//! pools of the same three hosts: `web6` by their IPv6 addresses, `web4` by their IPv4 addresses,
//! each with an HTTP health check. Six VIPs, port 80:
//!
//! | VIP | pool | encap | on the wire to a backend |
//! |---|---|---|---|
//! | fd00:100::10 | web6 | gre | IPv6 in GRE in IPv6 |
//! | fd00:100::11 | web6 | ipip | IPv6 in IPv6 (next header 41) |
//! | 10.100.0.20 | web6 | gre | IPv4 in GRE in IPv6 |
//! | 10.100.0.21 | web6 | ipip | IPv4 in IPv6 (next header 4) |
//! | fd00:100::20 | web4 | gre | IPv6 in GRE in IPv4 |
//! | fd00:100::21 | web4 | ipip | IPv6 in IPv4 (protocol 41) |
//!
//! # What is asserted (per driver, in one balancer run)
//!
//! 1. The balancer starts with the IPv6 configuration and learns every backend's MAC for both of
//!    its addresses (the IPv6 ones from the kernel's IPv6 neighbour table), all health checks
//!    passing.
//! 2. For each VIP: curl (`-6` or `-4` after the VIP's family) gets a backend's page; 60 new
//!    connections (Rust sockets, one request each) all succeed and reach all three backends.
//! 3. A capture at b1's `eth0` (before its tc decapsulation) of the frames the balancer sent there
//!    while 2 ran: for each VIP at least one frame carries a packet to the VIP, and every such
//!    frame is in the VIP's encapsulation — Ethernet destination b1's MAC, outer family as in the
//!    table, outer source the balancer's address of that family (`address` / `address6`), outer
//!    destination b1's address of that family, GRE protocol type or IP-in-IP protocol number of
//!    the inner family, inner destination the VIP.
//! 4. For each VIP: wrk (1 thread, 10 keep-alive connections, 2 s) completes requests with zero
//!    failures (socket errors including timeouts, non-2xx); the VIP's packet counter in the
//!    balancer grew.
//! 5. No TCP checksum errors on the backends; no ICMPv6 destination unreachable sent by the
//!    balancer's kernel; no backend changed health; SIGTERM: exit 0, XDP program detached.
//! 6. Second chance over IPv6 tunnels: 30 keep-alive connections to fd00:100::10 (IPv6 in GRE in
//!    IPv6) and 30 to 10.100.0.20 (IPv4 in GRE in IPv6); the balancer stops, its carried
//!    connection entries are removed (as after a crash), and it starts with backend 1's weight
//!    tripled in `web6`: every held connection answers from its backend, the moved flows' packets
//!    having named their earlier backends in an IPv6 destination option.
//!
//! Every VIP is exercised even if another one fails; each driver prints one line per VIP (what
//! answered, where 30 connections went, the frames seen at b1, wrk's requests and failures) and
//! then fails naming every VIP that did not pass.
//!
//! The tests serialise themselves (one lab at a time). Run with `cargo test -p flowplane --test
//! ipv6 -- --nocapture` to see each step. They need root, nginx, wrk, curl, tcpdump and nstat
//! (iproute2), and fail saying so otherwise.

mod common;

use anyhow::{bail, ensure, Result};
use common::*;
use fp_testnet::{Netns, Proc, WrkOptions};
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};

/// Health check of both pools.
const HC_INTERVAL_MS: u64 = 200;
const HC_TIMEOUT_MS: u64 = 150;
const HC_RISE: u64 = 2;
const HC_FALL: u64 = 2;

/// New connections per VIP.
const NEW: usize = 60;

/// One VIP of the test and how it reaches the backends.
struct Case {
    name: &'static str,
    vip: &'static str,
    /// `gre` or `ipip`.
    encap: &'static str,
    /// Served by the IPv6 addresses of the backends (pool `web6`), so tunnelled in IPv6.
    outer6: bool,
}

impl Case {
    fn inner6(&self) -> bool {
        self.vip.contains(':')
    }

    fn addr(&self) -> IpAddr {
        self.vip.parse().expect("literal VIP")
    }

    fn pool(&self) -> &'static str {
        if self.outer6 {
            "web6"
        } else {
            "web4"
        }
    }

    fn fam(v6: bool) -> &'static str {
        if v6 {
            "IPv6"
        } else {
            "IPv4"
        }
    }

    /// "IPv6 in GRE in IPv4" and the like.
    fn wire(&self) -> String {
        let (inner, outer) = (Case::fam(self.inner6()), Case::fam(self.outer6));
        match self.encap {
            "gre" => format!("{inner} in GRE in {outer}"),
            _ => format!("{inner} in {outer}"),
        }
    }
}

const CASES: [Case; 6] = [
    Case {
        name: "gre6",
        vip: "fd00:100::10",
        encap: "gre",
        outer6: true,
    },
    Case {
        name: "ip6ip6",
        vip: "fd00:100::11",
        encap: "ipip",
        outer6: true,
    },
    Case {
        name: "v4-gre6",
        vip: "10.100.0.20",
        encap: "gre",
        outer6: true,
    },
    Case {
        name: "v4-ipip6",
        vip: "10.100.0.21",
        encap: "ipip",
        outer6: true,
    },
    Case {
        name: "v6-gre4",
        vip: "fd00:100::20",
        encap: "gre",
        outer6: false,
    },
    Case {
        name: "v6-ipip4",
        vip: "fd00:100::21",
        encap: "ipip",
        outer6: false,
    },
];

fn config_text() -> String {
    config_with_weight(1)
}

/// The configuration with backend 1's weight in `web6` set to `w1`.
fn config_with_weight(w1: u32) -> String {
    let mut s = format!(
        "[balancer]\naddress = \"{LB}\"\naddress6 = \"{LB6}\"\nseed = 0x5eed\n\
         maglev_size = 65537\nconn_table_capacity = 65536\nconn_idle_timeout_ms = 120000\n\n"
    );
    for c in &CASES {
        s += &format!(
            "[[vip]]\nname = \"{}\"\naddress = \"{}\"\nport = 80\nprotocol = \"tcp\"\n\
             pools = [\"{}\"]\nencap = \"{}\"\n\n",
            c.name,
            c.vip,
            c.pool(),
            c.encap
        );
    }
    for (pool, addr) in [
        ("web6", backend_addr6 as fn(usize) -> String),
        ("web4", backend_addr),
    ] {
        let backends = (1..=3)
            .map(|i| {
                let w = if pool == "web6" && i == 1 { w1 } else { 1 };
                format!("{{ address = \"{}\", weight = {w} }}", addr(i))
            })
            .collect::<Vec<_>>()
            .join(", ");
        s += &format!(
            "[[pool]]\nname = \"{pool}\"\nbackends = [{backends}]\nhealth = {{ kind = \"http\", \
             path = \"/\", status = 200, body = \"backend\", interval_ms = {HC_INTERVAL_MS}, \
             timeout_ms = {HC_TIMEOUT_MS}, rise = {HC_RISE}, fall = {HC_FALL} }}\n\n"
        );
    }
    s
}

fn build(tag: &str) -> Result<Lab> {
    let vips: Vec<&str> = CASES.iter().map(|c| c.vip).collect();
    LabSpec {
        tag,
        tools: &["nginx", "wrk", "curl", "tcpdump", "nstat"],
        vips: &vips,
        decap: "gre,ipip",
        backend_args: &|_| Vec::new(),
        backends: 3,
        nginx_server: "",
    }
    .build_dual_stack()
}

// ---------------------------------------------------------------------------------------------
// Clients.

/// curl to the VIP in its family: the body.
fn curl_body(client: &Netns, c: &Case) -> Result<String> {
    let fam = if c.inner6() { "-6" } else { "-4" };
    let out = client
        .cmd(["curl", fam, "-g", "-sS", "-m", "5", &url_of(c.vip)])
        .run()?;
    Ok(out.stdout.trim().to_string())
}

/// `n` sequential new connections to `vip:80`, one request each (`Host` in URL syntax).
fn new_connections(client: &Netns, vip: IpAddr, n: usize) -> Result<Tally> {
    let addr = SocketAddr::new(vip, 80);
    let host = match vip {
        IpAddr::V4(a) => a.to_string(),
        IpAddr::V6(a) => format!("[{a}]"),
    };
    Ok(client.enter(move || {
        let mut t = Tally::default();
        for k in 0..n {
            let r = connect(addr).and_then(|mut s| request(&mut s, &host, true));
            match r {
                Ok((200, body)) => *t.served.entry(body.trim().to_string()).or_default() += 1,
                Ok((st, body)) => t
                    .failures
                    .push(format!("connection {k}: HTTP {st} {body:?}")),
                Err(e) => t.failures.push(format!("connection {k}: {e}")),
            }
        }
        t
    })?)
}

// ---------------------------------------------------------------------------------------------
// What a backend receives from the balancer.

/// An IP packet's version, source and destination (no options or extension headers needed).
fn ip_addrs(ip: &[u8]) -> Option<(bool, IpAddr, IpAddr)> {
    match ip.first()? >> 4 {
        4 => {
            let s: [u8; 4] = ip.get(12..16)?.try_into().ok()?;
            let d: [u8; 4] = ip.get(16..20)?.try_into().ok()?;
            Some((false, Ipv4Addr::from(s).into(), Ipv4Addr::from(d).into()))
        }
        6 => {
            let s: [u8; 16] = ip.get(8..24)?.try_into().ok()?;
            let d: [u8; 16] = ip.get(24..40)?.try_into().ok()?;
            Some((true, Ipv6Addr::from(s).into(), Ipv6Addr::from(d).into()))
        }
        _ => None,
    }
}

/// A frame from the balancer as a backend receives it: how the packet inside is carried.
#[derive(Debug)]
struct Seen {
    eth_dst: String,
    /// The Ethernet type says IPv6.
    outer6: bool,
    outer_src: IpAddr,
    outer_dst: IpAddr,
    /// `gre`, `ipip` or `plain` (no tunnel).
    kind: &'static str,
    /// GRE protocol type, or the IP-in-IP protocol number (4, 41).
    tunnel_proto: Option<u16>,
    /// The carried packet's version and destination (the outer ones for `plain`).
    inner6: bool,
    inner_dst: IpAddr,
}

impl Seen {
    fn parse(f: &[u8]) -> Option<Seen> {
        let outer6 = match f.get(12..14)? {
            [0x08, 0x00] => false,
            [0x86, 0xdd] => true,
            _ => return None,
        };
        let ip = f.get(14..)?;
        let (v6, outer_src, outer_dst) = ip_addrs(ip)?;
        if v6 != outer6 {
            return None;
        }
        let (proto, payload) = if outer6 {
            (*ip.get(6)?, ip.get(40..)?)
        } else {
            (*ip.get(9)?, ip.get(usize::from(ip.first()? & 0x0f) * 4..)?)
        };
        let (kind, tunnel_proto, inner) = match proto {
            47 => {
                let flags = u16::from_be_bytes(payload.get(0..2)?.try_into().ok()?);
                let len = 4 + [0x8000u16, 0x2000, 0x1000]
                    .iter()
                    .filter(|&&b| flags & b != 0)
                    .count()
                    * 4;
                let pt = u16::from_be_bytes(payload.get(2..4)?.try_into().ok()?);
                ("gre", Some(pt), payload.get(len..)?)
            }
            4 | 41 => ("ipip", Some(u16::from(proto)), payload),
            _ => ("plain", None, ip),
        };
        let (inner6, _, inner_dst) = ip_addrs(inner)?;
        Some(Seen {
            eth_dst: mac_text(f.get(0..6)?),
            outer6,
            outer_src,
            outer_dst,
            kind,
            tunnel_proto,
            inner6,
            inner_dst,
        })
    }
}

/// Check b1's frames for `c`'s VIP: how many, and a description of the encapsulation seen.
fn check_frames(lab: &Lab, seen: &[Seen], c: &Case) -> Result<String> {
    let b1 = lab.backend(1);
    let vip = c.addr();
    let (src, dst): (IpAddr, IpAddr) = if c.outer6 {
        (
            LB6.parse()?,
            b1.addr6.as_deref().expect("dual stack").parse()?,
        )
    } else {
        (LB.parse()?, b1.addr.parse()?)
    };
    let proto: u16 = match (c.encap, c.inner6()) {
        ("gre", false) => 0x0800,
        ("gre", true) => 0x86dd,
        (_, false) => 4,
        (_, true) => 41,
    };
    let to_vip: Vec<&Seen> = seen.iter().filter(|s| s.inner_dst == vip).collect();
    ensure!(
        !to_vip.is_empty(),
        "b1 received no frame for VIP {vip} from the balancer ({} frames captured from it)",
        seen.len()
    );
    let wrong: Vec<&&Seen> = to_vip
        .iter()
        .filter(|s| {
            !(s.eth_dst == b1.mac
                && s.outer6 == c.outer6
                && s.outer_src == src
                && s.outer_dst == dst
                && s.kind == c.encap
                && s.tunnel_proto == Some(proto)
                && s.inner6 == c.inner6())
        })
        .collect();
    if let Some(w) = wrong.first() {
        bail!(
            "{} of {} frames for VIP {vip} at b1 are not {} from {src} to {dst} (b1's MAC {}, \
             {} protocol {proto:#06x}); first: {w:?}",
            wrong.len(),
            to_vip.len(),
            c.wire(),
            b1.mac,
            c.encap
        );
    }
    Ok(format!(
        "{} frames {}, {src} → {dst}, {} {proto:#x}",
        to_vip.len(),
        c.wire(),
        c.encap
    ))
}

// ---------------------------------------------------------------------------------------------
// The scenario.

fn run_driver(driver: &str) {
    run_lab(
        driver,
        || {
            build(if driver == "af_xdp" {
                "v6-xsk"
            } else {
                "v6-pkt"
            })
        },
        |lab, balancer, t0| scenario(lab, driver, balancer, t0),
    );
}

/// What happened to one VIP: the summary so far, or the failures.
#[derive(Default)]
struct Outcome {
    notes: Vec<String>,
    failures: Vec<String>,
}

impl Outcome {
    fn record(&mut self, what: &str, r: Result<String>) {
        match r {
            Ok(n) => self.notes.push(n),
            Err(e) => self.failures.push(format!("{what}: {e:#}")),
        }
    }
}

fn health_changes(m: &Metrics) -> f64 {
    m.all("flowplane_health_transitions_total")
        .iter()
        .map(|(_, v)| v)
        .sum()
}

fn scenario(lab: &Lab, driver: &str, balancer: &mut Option<Proc>, t0: Instant) -> Result<()> {
    let lb = &lab.lb;
    let client = &lab.client;
    let snmp_start: Vec<_> = lab
        .backends
        .iter()
        .map(|b| snmp(&b.ns))
        .collect::<Result<_>>()?;
    let lb_start = snmp(lb)?;

    // ---- 1. start; both families of backends resolved and healthy ---------------------------
    lab.write_config(&config_text())?;
    let fp = start_balancer(lab, driver, 3, balancer, t0)?;
    wait_for(
        "the balancer to know every backend's IPv6 MAC and all backends healthy (/status)",
        Duration::from_secs(10),
        || {
            let m = Metrics::scrape(lb)?;
            let healthy = lab.backends.iter().all(|b| {
                [Some(&b.addr), b.addr6.as_ref()]
                    .into_iter()
                    .flatten()
                    .all(|a| {
                        m.get("flowplane_backend_healthy", &[("backend", a.as_str())]) == Some(1.0)
                    })
            });
            let (_, s) = admin(lb, "GET", "/status")?;
            let resolved = (1..=3).all(|i| {
                s.lines().any(|l| {
                    l.starts_with(&format!("backend {} ", backend_addr6(i)))
                        && !l.contains("unresolved")
                })
            });
            Ok((healthy && resolved).then_some(()))
        },
    )?;
    step("IPv6 backend MACs resolved, every backend healthy", t0);
    let m0 = Metrics::scrape(lb)?;
    let health0 = health_changes(&m0);

    let mut outcomes: BTreeMap<&str, Outcome> = BTreeMap::new();

    // ---- 2. curl and new connections per VIP, captured at b1 -------------------------------
    let b1 = lab.backend(1);
    let cap = b1.ns.link("eth0").capture(&[
        "ether",
        "src",
        &lab.lb_mac,
        "and",
        "(",
        "ip",
        "or",
        "ip6",
        ")",
    ])?;
    for c in &CASES {
        let o = outcomes.entry(c.name).or_default();
        o.record(
            "curl",
            curl_body(client, c).and_then(|body| {
                ensure!(
                    (1..=3).any(|i| body == body_of(i)),
                    "curl {} answered {body:?}",
                    url_of(c.vip)
                );
                Ok(format!("curl: {body}"))
            }),
        );
        o.record(
            "new connections",
            new_connections(client, c.addr(), NEW).and_then(|t| {
                ensure!(
                    t.failures.is_empty(),
                    "{} of {NEW} failed: {:?}",
                    t.failures.len(),
                    t.failures
                );
                ensure!(
                    t.served.len() == 3,
                    "{NEW} connections reached only {:?}",
                    t.served
                );
                Ok(format!("{NEW} connections {:?}", t.served))
            }),
        );
    }
    step("curl and new connections to every VIP", t0);

    // ---- 3. the encapsulation b1 received ------------------------------------------------------
    let frames = read_pcap(&cap.stop()?)?;
    let seen: Vec<Seen> = frames.iter().filter_map(|f| Seen::parse(f)).collect();
    for c in &CASES {
        outcomes
            .get_mut(c.name)
            .expect("every case recorded")
            .record("capture at b1", check_frames(lab, &seen, c));
    }
    step("capture at b1 checked", t0);

    // ---- 4. wrk per VIP ----------------------------------------------------------------------
    let opts = WrkOptions {
        threads: 1,
        connections: 10,
        duration: Duration::from_secs(2),
        timeout: Duration::from_secs(2),
    };
    for c in &CASES {
        let before = Metrics::scrape(lb)?.val("flowplane_vip_packets_total", &[("vip", c.name)])?;
        let r = client.wrk(&url_of(c.vip), &opts);
        let after = Metrics::scrape(lb)?.val("flowplane_vip_packets_total", &[("vip", c.name)])?;
        let o = outcomes.get_mut(c.name).expect("every case recorded");
        o.record(
            "wrk",
            r.map_err(anyhow::Error::from).and_then(|w| {
                ensure!(
                    w.requests > 0 && w.errors() == 0,
                    "{} requests, {} failed ({w:?})",
                    w.requests,
                    w.errors()
                );
                ensure!(
                    after > before,
                    "flowplane_vip_packets_total{{vip=\"{}\"}} did not grow ({before})",
                    c.name
                );
                Ok(format!(
                    "wrk {} requests, 0 failed; {} packets",
                    w.requests,
                    after - before
                ))
            }),
        );
    }
    step("wrk through every VIP", t0);

    // ---- 5. the backends' kernels, health, shutdown ---------------------------------------------
    let mut failed = Vec::new();
    for c in &CASES {
        let o = &outcomes[c.name];
        let verdict = if o.failures.is_empty() {
            "ok"
        } else {
            "FAILED"
        };
        println!(
            "{driver}: {} {} ({}, {}): {verdict}: {}{}",
            c.name,
            c.vip,
            c.wire(),
            c.pool(),
            o.notes.join("; "),
            if o.failures.is_empty() {
                String::new()
            } else {
                format!(" | failures: {}", o.failures.join("; "))
            }
        );
        if !o.failures.is_empty() {
            failed.push(format!(
                "{} ({} {}): {}",
                c.name,
                c.vip,
                c.wire(),
                o.failures.join("; ")
            ));
        }
    }
    for (b, start) in lab.backends.iter().zip(&snmp_start) {
        let e = delta(start, &snmp(&b.ns)?, "TcpInCsumErrors");
        if e != 0 {
            failed.push(format!("backend {}: {e} TCP checksum errors", b.i));
        }
    }
    let unreach = delta(&lb_start, &snmp(lb)?, "Icmp6OutDestUnreachs");
    if unreach != 0 {
        failed.push(format!(
            "the balancer's kernel sent {unreach} ICMPv6 destination unreachable"
        ));
    }
    let changes = health_changes(&Metrics::scrape(lb)?) - health0;
    if changes != 0.0 {
        failed.push(format!("{changes} health transitions during the run"));
    }
    if let Err(e) = stop_balancer(lab, &fp, t0) {
        failed.push(format!("shutdown: {e:#}"));
    }
    ensure!(
        failed.is_empty(),
        "{} failure(s):\n  {}",
        failed.len(),
        failed.join("\n  ")
    );
    second_chance_over_ipv6(lab, driver, balancer, t0)
}

/// 6.: held connections through a cold restart that changes `web6`'s weights.
fn second_chance_over_ipv6(
    lab: &Lab,
    driver: &str,
    balancer: &mut Option<Proc>,
    t0: Instant,
) -> Result<()> {
    let fp = start_balancer(lab, driver, 3, balancer, t0)?;
    let mut held6 = hold_connections(&lab.client, "[fd00:100::10]", 30)?;
    let mut held4 = hold_connections(&lab.client, "10.100.0.20", 30)?;
    stop_balancer(lab, &fp, t0)?;
    std::fs::remove_file(state_dir(lab).join("connections"))?;
    lab.write_config(&config_with_weight(3))?;
    let fp = start_balancer(lab, driver, 3, balancer, t0)?;
    ask_held(&lab.client, "[fd00:100::10]", &mut held6, "IPv6 in IPv6")?;
    ask_held(&lab.client, "10.100.0.20", &mut held4, "IPv4 in IPv6")?;
    let m = Metrics::scrape(&lab.lb)?;
    let sent = m.val("flowplane_second_chance_total", &[("event", "sent")])?;
    println!("    {driver}: 60 of 60 held connections kept over IPv6 tunnels; {sent} packets named earlier backends");
    ensure!(sent > 0.0, "second chance was not used");
    step(
        "second chance over IPv6 tunnels: every held connection kept its backend",
        t0,
    );
    lab.write_config(&config_text())?;
    stop_balancer(lab, &fp, t0)
}

#[test]
fn ipv6_af_packet() {
    run_driver("af_packet");
}

#[test]
fn ipv6_af_xdp() {
    run_driver("af_xdp");
}
