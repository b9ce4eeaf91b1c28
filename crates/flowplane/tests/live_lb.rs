//! End-to-end tests of the live load balancer (`flowplane run --interface`): real TCP
//! clients and servers in network namespaces built with fp-testnet, the balancer in between, over
//! AF_PACKET and over AF_XDP.
//!
//! # Topology
//!
//! ```text
//!                 10.0.1.0/24                           10.0.2.0/24, one Linux bridge ("sw")
//!   client ─────────────────────── router ──────┬──────────────┬──────────────────────┐
//!   10.0.1.2                10.0.1.1   10.0.2.1 │              │                      │
//!   (wrk, curl, Rust            static routes   lb 10.0.2.2    b1..b4 10.0.2.11-14
//!    sockets)                   VIPs → 10.0.2.2  flowplane run  nginx ("backend N"), VIPs on lo,
//!                                               --interface eth0  prepared by `flowplane backend
//!                                               (2 queues)       --decap gre,ipip,vxlan`,
//!                                                               default route via the router
//! ```
//!
//! The client reaches the VIPs through the router, whose static routes send them to the balancer.
//! The balancer encapsulates each packet to a backend on the bridge (one-armed: out of the same
//! `eth0`); the backend decapsulates it and answers the client directly through the router
//! (direct server return). Four VIPs, one per encapsulation: 10.100.0.10 GRE (pool `web`, the full
//! scenario), .11 IPIP, .12 VXLAN (VNI 4242, inner destination = each backend's VXLAN device MAC)
//! and .13 L2 DSR (destination MAC = the backend's `eth0`). b4 starts outside the configuration
//! and is added by a reload.
//!
//! Platform choices (the traps of docs/platform.md, and one more):
//! * **Checksums:** TX checksum offload is turned off on the client's `eth0` only. The client is
//!   the only kernel TCP source whose segments pass through the balancer (the router forwards
//!   them with whatever checksum state they left the client with). With offload on, they would
//!   carry only the pseudo-header sum (CHECKSUM_PARTIAL); the AF_XDP port has no checksum
//!   metadata and forwards them as they are, and the backends would drop them
//!   (`TcpInCsumErrors`). This also turns TSO off, so no 64 KB GSO frames reach the balancer. The
//!   backends keep offload on: their replies go kernel to kernel (backend → router → client)
//!   and never through the balancer; scapy computes its own checksums.
//! * **IPv6** is disabled in every namespace: no DAD / solicited-node delays, no ND/MLD frames in
//!   the balancer's drop counters.
//! * **Socket hash:** the client runs with `net.core.txrehash = 0`: under AF_XDP on veth the
//!   balancer's receive queue (its worker) follows the hash the client's socket stamps on its
//!   packets, and TCP draws a new one after a retransmission timeout; a connection that moved to
//!   the other worker would be balanced anew by a table that does not know it.
//! * **rp_filter:** the router runs with strict reverse-path filtering on purpose. The DSR replies
//!   (source = VIP) arrive on the router's bridge-side `eth1`, which is also the interface of its
//!   route to the VIP, so they pass; the backends' rp_filter is switched off by `flowplane
//!   backend` (decapsulated packets come from clients not routed via `eth0`).
//! * **br_netfilter** is built into this kernel and enabled in new namespaces
//!   (`net.bridge.bridge-nf-call-iptables = 1`): the bridge would check IPv4 headers and drop
//!   frames with a bad header checksum, IHL or total length before the balancer sees them. The
//!   bridge namespace switches it off.
//! * The balancer namespace keeps `ip_forward = 0` and has no VIP on its interfaces, so its kernel
//!   drops (without ICMP) the copies of VIP packets that AF_PACKET also hands to the balancer.
//!
//! # What is asserted (per driver, in one balancer run)
//!
//! 1. curl reaches each of the four VIPs (GRE, IPIP, VXLAN, L2 DSR); 30 new connections per VIP
//!    all succeed and reach all three backends; a capture at b1 (before its decapsulation) shows
//!    each VIP's packets in their encapsulation: outer 10.0.2.2 → b1, GRE / IPIP / VXLAN with
//!    VNI 4242 and b1's VXLAN MAC inside / untouched with b1's MAC for L2 DSR.
//! 2. 600 new connections to the GRE VIP: every one answered, each backend's share within the
//!    Maglev balance bound; wrk (keep-alive) with 0 errors; no `TcpInCsumErrors`,
//!    `TcpEstabResets` or `TcpAttemptFails` in the client, no checksum errors on the backends.
//! 3. Packet tracer: a probe inside a real connection is recorded as a connection hit on the
//!    backend that served the connection; scapy probes outside a connection are a Maglev miss
//!    then a hit on the same backend, with VIP, backend, encapsulation and slot.
//! 4. Malformed and non-VIP packets sent with scapy are dropped and counted by reason (exact
//!    counts for the parser's reasons; non-VIP addresses go to the balancer's kernel under AF_XDP,
//!    which drops them: `IpInAddrErrors`).
//! 5. Invalid reloads (`POST /reload` and SIGHUP) are rejected naming the field; generation,
//!    table digest and traffic unchanged.
//! 6. A reload adding b4 under wrk load and a stream of new connections: no failed request;
//!    b4 comes up within `rise × interval + timeout` (+ slack) and serves its share. (Printed, not
//!    asserted: frames sent to the placeholder `balancer.gateway_mac` while b4's MAC was not yet
//!    learnt, and the slowest new connection.)
//! 7. b2's nginx killed: marked down within `fall × interval + timeout` (+ slack for this shared
//!    machine), held connections to other backends keep working on the same backend, new
//!    connections avoid b2.
//! 8. SIGTERM: exit 0, XDP program detached.
//!
//! The tests serialise themselves (one lab at a time; timing assertions on 2 cores). Run with
//! `cargo test -p flowplane --test live_lb -- --nocapture` to see each step's timing. They need
//! root, nginx, wrk, curl, nstat (iproute2) and python3-scapy, and fail saying so otherwise.

mod common;

use anyhow::{anyhow, bail, ensure, Context, Result};
use common::*;
use fp_testnet::{Netns, Proc, WrkOptions};
use std::collections::HashMap;
use std::io::{self, Write};
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const VIP_GRE: &str = "10.100.0.10";
const VIP_IPIP: &str = "10.100.0.11";
const VIP_VXLAN: &str = "10.100.0.12";
const VIP_L2: &str = "10.100.0.13";
/// In the VIP range but no VIP.
const NOT_VIP: &str = "10.100.0.99";
const VNI: u32 = 4242;
/// Source port of the scapy probes: below the client's ephemeral range (32768–60999), so no real
/// connection of the client has their 5-tuple in the balancer's connection table.
const PROBE_PORT: u16 = 2999;

/// Health check of pool `web` (and, by address, of every backend).
const HC_INTERVAL_MS: u64 = 200;
const HC_TIMEOUT_MS: u64 = 150;
const HC_RISE: u64 = 2;
const HC_FALL: u64 = 2;
/// Allowance for a loaded 2-core machine on top of the configured detection times.
const SLACK: Duration = Duration::from_millis(1500);

fn vxlan_mac(i: usize) -> String {
    format!("02:66:70:00:00:{i:02x}")
}

impl Lab {
    /// The configuration with `web` = the given backends (the other VIPs always use b1..b3).
    fn config_text(&self, web: &[usize]) -> String {
        let list = |f: &dyn Fn(&Backend) -> String, which: &[usize]| {
            which
                .iter()
                .map(|&i| f(self.backend(i)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let plain = |b: &Backend| format!("{{ address = \"{}\" }}", b.addr);
        let vx = |b: &Backend| {
            format!(
                "{{ address = \"{}\", mac = \"{}\" }}",
                b.addr,
                vxlan_mac(b.i)
            )
        };
        let l2 = |b: &Backend| format!("{{ address = \"{}\", mac = \"{}\" }}", b.addr, b.mac);
        let base = [1, 2, 3];
        let mut s = format!(
            "[balancer]\naddress = \"{LB}\"\nseed = 0x5eed\nmaglev_size = 65537\n\
             conn_table_capacity = 65536\nconn_idle_timeout_ms = 120000\n\n"
        );
        for (name, vip, encap, pool) in [
            ("web", VIP_GRE, "encap = \"gre\"".to_string(), "web"),
            ("web-ipip", VIP_IPIP, "encap = \"ipip\"".to_string(), "base"),
            (
                "web-vxlan",
                VIP_VXLAN,
                format!("encap = \"vxlan\"\nvni = {VNI}"),
                "vxlan",
            ),
            ("web-l2", VIP_L2, "encap = \"l2dsr\"".to_string(), "l2"),
        ] {
            s += &format!(
                "[[vip]]\nname = \"{name}\"\naddress = \"{vip}\"\nport = 80\nprotocol = \"tcp\"\n\
                 pools = [\"{pool}\"]\n{encap}\n\n"
            );
        }
        s += &format!(
            "[[pool]]\nname = \"web\"\nbackends = [{}]\nhealth = {{ kind = \"http\", path = \"/\", \
             status = 200, body = \"backend\", interval_ms = {HC_INTERVAL_MS}, timeout_ms = \
             {HC_TIMEOUT_MS}, rise = {HC_RISE}, fall = {HC_FALL} }}\n\n",
            list(&plain, web)
        );
        s += &format!(
            "[[pool]]\nname = \"base\"\nbackends = [{}]\n\n",
            list(&plain, &base)
        );
        s += &format!(
            "[[pool]]\nname = \"vxlan\"\nbackends = [{}]\n\n",
            list(&vx, &base)
        );
        s += &format!(
            "[[pool]]\nname = \"l2\"\nbackends = [{}]\n",
            list(&l2, &base)
        );
        s
    }
}

/// The lab of this test: four VIPs (one per encapsulation), four backends decapsulating GRE, IPIP
/// and VXLAN.
fn build_lab(tag: &str) -> Result<Lab> {
    LabSpec {
        tag,
        tools: &["nginx", "wrk", "curl", "nstat"],
        vips: &[VIP_GRE, VIP_IPIP, VIP_VXLAN, VIP_L2],
        decap: "gre,ipip,vxlan",
        backend_args: &|i| vec!["--vxlan-mac".to_string(), vxlan_mac(i)],
        backends: 4,
        nginx_server: "",
    }
    .build()
}

// ---------------------------------------------------------------------------------------------
// Balance, counters, traces and captures.

/// Every connection answered, by exactly the `expected` backends, each within the Maglev balance
/// bound: equal weights give each backend 1/k of the table (±1% for a 65537-slot table, Maglev
/// §3.4), and new connections sample it with binomial noise, allowed up to 5 standard
/// deviations.
fn check_balance(what: &str, t: &Tally, expected: &[usize]) -> Result<()> {
    ensure!(
        t.failures.is_empty(),
        "{what}: {} of {} connections failed: {:?}",
        t.failures.len(),
        t.total() + t.failures.len(),
        &t.failures[..t.failures.len().min(5)]
    );
    let n = t.total() as f64;
    let p = 1.0 / expected.len() as f64;
    let tol = 5.0 * (n * p * (1.0 - p)).sqrt() + 0.01 * n;
    for name in t.served.keys() {
        ensure!(
            expected.iter().any(|&i| body_of(i) == *name),
            "{what}: unexpected answer {name:?} (expected backends {expected:?}); tally {:?}",
            t.served
        );
    }
    for &i in expected {
        let c = t.served.get(&body_of(i)).copied().unwrap_or(0) as f64;
        ensure!(
            (c - n * p).abs() <= tol,
            "{what}: backend {i} served {c} of {n} connections, outside {:.0} ± {tol:.0}; tally {:?}",
            n * p,
            t.served
        );
    }
    Ok(())
}

fn curl_body(client: &Netns, vip: &str) -> Result<String> {
    let out = client
        .cmd(["curl", "-sS", "-m", "5", &format!("http://{vip}/")])
        .run()?;
    Ok(out.stdout.trim().to_string())
}

/// Trace records (`GET /trace`, one JSON object per line).
fn traces(lb: &Netns) -> Result<Vec<serde_json::Value>> {
    let (st, body) = admin(lb, "GET", "/trace")?;
    ensure!(st == 200, "GET /trace: status {st}: {body}");
    body.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).with_context(|| format!("trace record {l:?}")))
        .collect()
}

fn trace_of(lb: &Netns, id: u64) -> Result<Option<serde_json::Value>> {
    Ok(traces(lb)?
        .into_iter()
        .find(|r| r["probe_id"].as_u64() == Some(id)))
}

fn ip4_at(b: &[u8], at: usize) -> Option<Ipv4Addr> {
    let a: [u8; 4] = b.get(at..at + 4)?.try_into().ok()?;
    Some(Ipv4Addr::from(a))
}

/// A frame from the balancer as a backend receives it: how the VIP packet inside is carried.
#[derive(Debug)]
struct Seen {
    /// `gre`, `ipip`, `vxlan` or `plain` (no tunnel: L2 DSR).
    kind: &'static str,
    eth_dst: String,
    outer_src: Ipv4Addr,
    outer_dst: Ipv4Addr,
    /// Destination of the carried packet (the VIP).
    inner_dst: Ipv4Addr,
    vni: Option<u32>,
    inner_eth_dst: Option<String>,
}

impl Seen {
    fn parse(f: &[u8]) -> Option<Seen> {
        if f.get(12..14)? != [0x08, 0x00] {
            return None;
        }
        let ip = f.get(14..)?;
        let ihl = usize::from(ip.first()? & 0x0f) * 4;
        let (proto, payload) = (*ip.get(9)?, ip.get(ihl..)?);
        let (kind, inner, vni, inner_eth_dst) = match proto {
            47 => {
                let flags = u16::from_be_bytes(payload.get(0..2)?.try_into().ok()?);
                let len = 4 + [0x8000u16, 0x2000, 0x1000]
                    .iter()
                    .filter(|&&b| flags & b != 0)
                    .count()
                    * 4;
                ("gre", payload.get(len..)?, None, None)
            }
            4 => ("ipip", payload, None, None),
            17 if payload.get(2..4)? == 4789u16.to_be_bytes() => {
                let vx = payload.get(8..)?;
                let vni = u32::from_be_bytes([0, *vx.get(4)?, *vx.get(5)?, *vx.get(6)?]);
                let eth = vx.get(8..)?;
                (
                    "vxlan",
                    eth.get(14..)?,
                    Some(vni),
                    Some(mac_text(eth.get(0..6)?)),
                )
            }
            _ => ("plain", ip, None, None),
        };
        Some(Seen {
            kind,
            eth_dst: mac_text(f.get(0..6)?),
            outer_src: ip4_at(ip, 12)?,
            outer_dst: ip4_at(ip, 16)?,
            inner_dst: ip4_at(inner, 16)?,
            vni,
            inner_eth_dst,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// The scenario.

fn run_driver(driver: &str) {
    run_lab(
        driver,
        || {
            build_lab(if driver == "af_xdp" {
                "lb-xsk"
            } else {
                "lb-pkt"
            })
        },
        |lab, balancer, t0| scenario(lab, driver, balancer, t0),
    );
}

fn scenario(lab: &Lab, driver: &str, balancer: &mut Option<Proc>, t0: Instant) -> Result<()> {
    let lb = &lab.lb;
    let client = &lab.client;
    let all_backends: Vec<&Backend> = lab.backends.iter().collect();
    let snmp_start: Vec<HashMap<String, i64>> = all_backends
        .iter()
        .map(|b| snmp(&b.ns))
        .collect::<Result<_>>()?;
    let client_start = snmp(client)?;

    // ---- start -------------------------------------------------------------------------
    lab.write_config(&lab.config_text(&[1, 2, 3]))?;
    let fp = start_balancer(lab, driver, 3, balancer, t0)?;

    // ---- 1. every encapsulation serves curl and new connections --------------------------
    // What the balancer puts on the wire, seen at b1 (before b1's tc decapsulation).
    let b1 = lab.backend(1);
    let cap = b1
        .ns
        .link("eth0")
        .capture(&["ether", "src", &lab.lb_mac, "and", "ip"])?;
    for (vip, encap) in [
        (VIP_GRE, "gre"),
        (VIP_IPIP, "ipip"),
        (VIP_VXLAN, "vxlan"),
        (VIP_L2, "l2dsr"),
    ] {
        let body = curl_body(client, vip).with_context(|| format!("curl to the {encap} VIP"))?;
        ensure!(
            (1..=3).any(|i| body == body_of(i)),
            "curl http://{vip}/ ({encap}) answered {body:?}"
        );
        let t = new_connections(client, vip, 30)?;
        ensure!(
            t.failures.is_empty(),
            "{encap} VIP {vip}: failed connections {:?}",
            t.failures
        );
        ensure!(
            t.served.len() == 3,
            "{encap} VIP {vip}: 30 connections reached only {:?}",
            t.served
        );
    }
    let frames = read_pcap(&cap.stop()?)?;
    let seen: Vec<Seen> = frames.iter().filter_map(|f| Seen::parse(f)).collect();
    let b1_addr: Ipv4Addr = b1.addr.parse()?;
    let lb_addr: Ipv4Addr = LB.parse()?;
    for (vip, kind) in [
        (VIP_GRE, "gre"),
        (VIP_IPIP, "ipip"),
        (VIP_VXLAN, "vxlan"),
        (VIP_L2, "plain"),
    ] {
        let vip: Ipv4Addr = vip.parse()?;
        let to_vip: Vec<&Seen> = seen.iter().filter(|s| s.inner_dst == vip).collect();
        ensure!(
            !to_vip.is_empty(),
            "b1 received no frame for VIP {vip} from the balancer ({} frames captured)",
            frames.len()
        );
        for s in to_vip {
            let tunnel_ok = kind == "plain" || (s.outer_src == lb_addr && s.outer_dst == b1_addr);
            let vxlan_ok = kind != "vxlan"
                || (s.vni == Some(VNI) && s.inner_eth_dst.as_deref() == Some(&*vxlan_mac(1)));
            ensure!(
                s.kind == kind && s.eth_dst == b1.mac && tunnel_ok && vxlan_ok,
                "VIP {vip} should reach b1 as {kind} (outer {lb_addr} -> {b1_addr}, MAC {}): \
                 captured {s:?}",
                b1.mac
            );
        }
    }
    let m = Metrics::scrape(lb)?;
    for (vip, encap) in [
        ("web", "gre"),
        ("web-ipip", "ipip"),
        ("web-vxlan", &*format!("vxlan(vni {VNI})")),
        ("web-l2", "l2dsr"),
    ] {
        ensure!(
            m.get("flowplane_vip_info", &[("vip", vip), ("encap", encap)]) == Some(1.0),
            "flowplane_vip_info for {vip} with encap {encap} missing"
        );
        ensure!(
            m.val("flowplane_vip_connections_total", &[("vip", vip)])? >= 31.0,
            "VIP {vip}: fewer connections counted than made"
        );
    }
    step(
        "curl + 30 connections through GRE, IPIP, VXLAN and L2 DSR VIPs; encapsulations seen on the wire",
        t0,
    );

    // ---- 2. balance, wrk, no checksum or reset errors -----------------------------------
    // Kernel counters of the client: checksum errors, resets and failed connection attempts.
    // The 600 connections close in order (the server closes first), so none may reset. wrk ends
    // by closing its connections with requests in flight, which the client's kernel aborts with
    // a RST of its own (TcpExtTCPAbortOnClose, also counted in TcpEstabResets); resets received
    // are the difference.
    let c0 = snmp(client)?;
    let t = new_connections(client, VIP_GRE, 600)?;
    check_balance("600 new connections to the GRE VIP", &t, &[1, 2, 3])?;
    println!("    600 connections: {:?}", t.served);
    let c1 = snmp(client)?;
    for key in ["TcpInCsumErrors", "TcpEstabResets", "TcpAttemptFails"] {
        ensure!(
            delta(&c0, &c1, key) == 0,
            "client {key} grew by {} during 600 sequential connections",
            delta(&c0, &c1, key)
        );
    }
    let wrk_opts = WrkOptions {
        threads: 2,
        connections: 50,
        duration: Duration::from_secs(3),
        timeout: Duration::from_secs(2),
    };
    let w = client.wrk(&format!("http://{VIP_GRE}/"), &wrk_opts)?;
    let c2 = snmp(client)?;
    let d = |k: &str| delta(&c1, &c2, k);
    println!(
        "    wrk: {} requests, {:.0}/s, errors {}; client EstabResets +{}, AbortOnClose +{}, \
         OutRsts +{}, RetransSegs +{}",
        w.requests,
        w.requests_per_sec,
        w.errors(),
        d("TcpEstabResets"),
        d("TcpExtTCPAbortOnClose"),
        d("TcpOutRsts"),
        d("TcpRetransSegs")
    );
    ensure!(w.errors() == 0, "wrk through the balancer: {w:?}");
    ensure!(
        w.requests > 300,
        "wrk made only {} requests: {w:?}",
        w.requests
    );
    ensure!(
        d("TcpInCsumErrors") == 0 && d("TcpAttemptFails") == 0,
        "client during wrk: TcpInCsumErrors +{}, TcpAttemptFails +{}",
        d("TcpInCsumErrors"),
        d("TcpAttemptFails")
    );
    ensure!(
        d("TcpEstabResets") == d("TcpExtTCPAbortOnClose"),
        "client during wrk: {} connections reset, {} of them by the client's own close",
        d("TcpEstabResets"),
        d("TcpExtTCPAbortOnClose")
    );
    let m = Metrics::scrape(lb)?;
    for i in 1..=3 {
        let a = backend_addr(i);
        ensure!(
            m.val("flowplane_backend_connections_total", &[("backend", &a)])? > 100.0,
            "backend {a}: balancer counted few connections"
        );
    }
    // Both workers forwarded part of the load (AF_PACKET fan-out by flow hash; AF_XDP: the
    // bridge port hashes flows over its two TX queues = the balancer's two RX queues).
    for w in ["0", "1"] {
        let n = m.val("flowplane_batch_size_sum", &[("worker", w)])?;
        ensure!(n > 1000.0, "worker {w} processed only {n} packets");
    }
    for r in ["drop_encap_failed", "drop_tx", "drop_no_backend"] {
        ensure!(m.drops(r)? == 0.0, "drops {r} = {}", m.drops(r)?);
    }
    step(
        "balance within bound, wrk 0 errors, no checksum/reset errors",
        t0,
    );

    // ---- 3+4. tracer and malformed packets ----------------------------------------------
    // A probe inside a real connection: after a GET told us the backend, the marker as data.
    let vip_addr: SocketAddr = format!("{VIP_GRE}:80").parse()?;
    let hit_id: u64 = 0x7e57_0001;
    let served_by = client.enter(move || -> io::Result<String> {
        let mut s = connect(vip_addr)?;
        let (_, body) = request(&mut s, VIP_GRE, false)?;
        s.write_all(&fp_pipeline::trace::probe_payload(hit_id))?;
        // nginx answers the marker with 400 and closes; read it so the close is orderly.
        let _ = fp_testnet::read_http_response(&mut s);
        Ok(body.trim().to_string())
    })??;
    let rec = wait_for(
        "the in-connection probe's trace record",
        Duration::from_secs(3),
        || trace_of(lb, hit_id),
    )?;
    let served_addr = (1..=3)
        .find(|&i| body_of(i) == served_by)
        .map(backend_addr)
        .ok_or_else(|| anyhow!("probe connection answered {served_by:?}"))?;
    ensure!(
        rec["conn"] == "hit"
            && rec["vip"] == "web"
            && rec["encap"] == "gre"
            && rec["backend"] == served_addr.as_str()
            && rec["dst"] == format!("{VIP_GRE}:80").as_str()
            && rec["protocol"] == "tcp",
        "in-connection probe served by {served_addr}: record {rec}"
    );

    let before = Metrics::scrape(lb)?;
    let lb_snmp0 = snmp(lb)?;
    let (miss_id, again_id) = (0x7e57_0002u64, 0x7e57_0003u64);
    const N: u64 = 3;
    let script = format!(
        r#"
import struct
lb = "{lb_mac}"
me = get_if_hwaddr("eth1")
vip, cl = "{VIP_GRE}", "{CLIENT}"
def e():
    return Ether(src=me, dst=lb)
pk = []
for i in range({N}):
    pk.append(e()/IP(src=cl, dst="{NOT_VIP}")/TCP(sport=50000+i, dport=80, flags="S"))  # address no VIP
    pk.append(e()/IP(src=cl, dst=vip)/TCP(sport=50100+i, dport=8080, flags="S"))  # port not served
    pk.append(e()/IP(src=cl, dst=vip)/UDP(sport=50200+i, dport=80)/Raw(b"x"))  # protocol not served
    pk.append(e()/IP(src=cl, dst=vip, chksum=0x1234)/TCP(sport=50300+i, dport=80, flags="S"))  # ipv4_bad_checksum
    pk.append(e()/IP(src=cl, dst=vip, proto=6)/Raw(b"\x00" * 8))  # tcp_truncated
    pk.append(e()/IP(src=cl, dst=vip)/TCP(sport=50400+i, dport=80, flags="S", dataofs=3))  # tcp_bad_data_offset
    pk.append(e()/IP(src=cl, dst=vip, ihl=4)/TCP(sport=50500+i, dport=80, flags="S"))  # ipv4_bad_ihl
    pk.append(e()/IP(src=cl, dst=vip, len=1000)/TCP(sport=50600+i, dport=80, flags="S"))  # ipv4_bad_total_len
sendp(pk, iface="eth1", verbose=False)
m = b"FLOWPLANE-TRACE1"
for pid in ({miss_id}, {again_id}):
    sendp(e()/IP(src=cl, dst=vip)/TCP(sport={PROBE_PORT}, dport=80, flags="PA", seq=1000)/Raw(m + struct.pack(">Q", pid)), iface="eth1", verbose=False)
print("sent", len(pk) + 2)
"#,
        lb_mac = lab.lb_mac
    );
    let out = lab.router.scapy(&script)?;
    ensure!(out.stdout.contains("sent"), "scapy: {out:?}");
    let exact = [
        "ipv4_bad_checksum",
        "tcp_truncated",
        "tcp_bad_data_offset",
        "ipv4_bad_ihl",
        "ipv4_bad_total_len",
    ];
    // Non-VIP destination address: the AF_PACKET balancer sees it and drops it; under AF_XDP
    // the XDP program leaves it to the kernel, which does not forward (ip_forward = 0).
    let non_vip_min = (if driver == "af_packet" { 3 * N } else { 2 * N }) as f64;
    let after = wait_for(
        "the malformed packets to be counted",
        Duration::from_secs(3),
        || {
            let m = Metrics::scrape(lb)?;
            let mut done = m.drops("drop_non_vip")? - before.drops("drop_non_vip")? >= non_vip_min;
            for r in exact {
                done &= m.drops(r)? - before.drops(r)? >= N as f64;
            }
            Ok(done.then_some(m))
        },
    )
    .map_err(|e| {
        let m = Metrics::scrape(lb).ok();
        let d: Vec<String> = exact
            .iter()
            .chain(&["drop_non_vip"])
            .map(|r| {
                let now = m.as_ref().and_then(|m| m.drops(r).ok()).unwrap_or(-1.0);
                format!("{r} +{}", now - before.drops(r).unwrap_or(0.0))
            })
            .collect();
        e.context(format!("drop counters moved: {}", d.join(", ")))
    })?;
    for r in exact {
        let d = after.drops(r)? - before.drops(r)?;
        ensure!(
            d == N as f64,
            "drops {{reason={r}}} grew by {d}, {N} such packets were sent"
        );
    }
    if driver == "af_xdp" {
        let lb_snmp1 = snmp(lb)?;
        ensure!(
            delta(&lb_snmp0, &lb_snmp1, "IpInAddrErrors") >= N as i64,
            "AF_XDP: non-VIP packets should reach the balancer's kernel and be dropped there \
             (IpInAddrErrors +{})",
            delta(&lb_snmp0, &lb_snmp1, "IpInAddrErrors")
        );
    }
    let miss = wait_for(
        "the scapy probe's trace record",
        Duration::from_secs(3),
        || trace_of(lb, miss_id),
    )?;
    let again = wait_for(
        "the second scapy probe's trace record",
        Duration::from_secs(3),
        || trace_of(lb, again_id),
    )?;
    let backends3: Vec<String> = (1..=3).map(backend_addr).collect();
    ensure!(
        miss["conn"] == "miss"
            && miss["maglev_slot"].is_u64()
            && miss["vip"] == "web"
            && miss["encap"] == "gre"
            && miss["src"] == format!("{CLIENT}:{PROBE_PORT}").as_str()
            && miss["backend"]
                .as_str()
                .is_some_and(|b| backends3.iter().any(|x| x == b)),
        "first probe of a new 5-tuple: record {miss}"
    );
    ensure!(
        again["conn"] == "hit" && again["backend"] == miss["backend"],
        "second probe of the same 5-tuple should hit the connection entry, same backend: \
         first {miss}, second {again}"
    );
    ensure!(
        after.val("flowplane_trace_records_total", &[("result", "recorded")])? >= 3.0,
        "flowplane_trace_records_total{{result=\"recorded\"}}"
    );
    step(
        "tracer (hit in a connection; miss then hit from scapy) and malformed packets counted by reason",
        t0,
    );

    // ---- 5. invalid reloads ------------------------------------------------------------
    let good = lab.config_text(&[1, 2, 3]);
    let digest = |m: &Metrics| -> Option<String> {
        m.all("flowplane_maglev_table_info")
            .into_iter()
            .find(|(l, _)| l.iter().any(|(k, v)| k == "vip" && v == "web"))
            .and_then(|(l, _)| l.into_iter().find(|(k, _)| k == "digest").map(|(_, v)| v))
    };
    let m0 = Metrics::scrape(lb)?;
    let digest0 = digest(&m0).ok_or_else(|| anyhow!("no maglev digest for web"))?;
    lab.write_config(&good.replacen("pools = [\"web\"]", "pools = [\"nope\"]", 1))?;
    let (st, body) = admin(lb, "POST", "/reload")?;
    ensure!(
        st == 400 && body.contains("vip[0].pools[0]"),
        "invalid reload (unknown pool) should be 400 naming vip[0].pools[0]: {st} {body:?}"
    );
    lab.write_config(&good.replace(
        &format!("interval_ms = {HC_INTERVAL_MS}"),
        "interval_ms = 5",
    ))?;
    fp.signal(libc::SIGHUP);
    wait_for(
        "the SIGHUP reload's rejection in the log",
        Duration::from_secs(5),
        || {
            Ok(fp
                .log()
                .lines()
                .any(|l| l.contains("rejected") && l.contains("pool \"web\".health.interval_ms"))
                .then_some(()))
        },
    )?;
    lab.write_config(&good)?;
    let m1 = Metrics::scrape(lb)?;
    ensure!(
        m1.val("flowplane_config_generation", &[])? == 1.0,
        "generation changed by rejected reloads"
    );
    ensure!(
        m1.val("flowplane_config_reloads_total", &[("result", "error")])? == 2.0
            && m1.val("flowplane_config_reloads_total", &[("result", "ok")])? == 0.0,
        "reload counters after two rejected reloads: {:?}",
        m1.all("flowplane_config_reloads_total")
    );
    ensure!(
        digest(&m1).as_deref() == Some(digest0.as_str()),
        "web's Maglev table changed after rejected reloads"
    );
    let t = new_connections(client, VIP_GRE, 30)?;
    ensure!(
        t.failures.is_empty() && t.served.len() == 3,
        "traffic after rejected reloads: {t:?}"
    );
    step(
        "invalid reloads rejected (POST 400 + SIGHUP), generation kept, traffic continues",
        t0,
    );

    // ---- 6. reload adding b4 under load ------------------------------------------------
    let b4 = backend_addr(4);
    let wrk_opts = WrkOptions {
        threads: 2,
        connections: 20,
        duration: Duration::from_secs(4),
        timeout: Duration::from_secs(2),
    };
    let pk0 = Metrics::scrape(lb)?.val("flowplane_vip_packets_total", &[("vip", "web")])?;
    let wrk = client.wrk_spawn(&format!("http://{VIP_GRE}/"), &wrk_opts)?;
    // Besides wrk's kept-alive connections, a stream of new connections (one request each)
    // across the table change; each one's time is kept.
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let churn = client.spawn_thread(move || {
        let mut t = Tally::default();
        let mut slowest = (Duration::ZERO, String::new());
        while !stop2.load(Ordering::Relaxed) {
            let start = Instant::now();
            match get_once(vip_addr) {
                Ok(b) => {
                    if start.elapsed() > slowest.0 {
                        slowest = (start.elapsed(), b.clone());
                    }
                    *t.served.entry(b).or_default() += 1
                }
                Err(e) => t.failures.push(e.to_string()),
            }
        }
        (t, slowest)
    })?;
    wait_vip_packets(lb, "wrk's load to reach the balancer", "web", pk0, 500.0)?;
    // Frames the balancer addresses to `balancer.gateway_mac` (its placeholder while a backend's
    // MAC is not yet in the neighbour table) — nobody on the segment has that MAC. Captured on
    // the bridge's port: frames the balancer sends bypass the taps of its own interface.
    let gw_cap = lab
        .sw
        .link("p-lb")
        .capture(&["ether", "dst", "02:00:00:00:00:fe"])?;
    lab.write_config(&lab.config_text(&[1, 2, 3, 4]))?;
    let t_reload = Instant::now();
    let (st, body) = admin(lb, "POST", "/reload")?;
    ensure!(
        st == 200 && body.trim() == "generation 2",
        "reload adding b4: {st} {body:?}"
    );
    let up_after = wait_for(
        "b4 to be marked healthy",
        Duration::from_millis(HC_RISE * HC_INTERVAL_MS + HC_TIMEOUT_MS) + SLACK,
        || {
            let m = Metrics::scrape(lb)?;
            Ok(
                (m.get("flowplane_backend_healthy", &[("backend", &b4)]) == Some(1.0))
                    .then(|| t_reload.elapsed()),
            )
        },
    )?;
    println!("    b4 healthy {up_after:?} after the reload");
    let w = client.wrk_finish(&wrk, &wrk_opts)?;
    stop.store(true, Ordering::Relaxed);
    let blackholed = read_pcap(&gw_cap.stop()?)?;
    println!(
        "    frames sent to the placeholder gateway MAC across the reload: {}{}",
        blackholed.len(),
        blackholed
            .iter()
            .filter_map(|f| Seen::parse(f))
            .next()
            .map_or(String::new(), |s| format!(" (first: {s:?})"))
    );
    let (churned, slowest) = churn
        .join()
        .map_err(|_| anyhow!("the connection thread panicked"))?;
    println!(
        "    new connections across the reload: {:?}, {} failed; slowest {:?} (served by {})",
        churned.served,
        churned.failures.len(),
        slowest.0,
        slowest.1
    );
    ensure!(
        churned.failures.is_empty(),
        "new connections across the reload adding b4 failed: {:?}",
        &churned.failures[..churned.failures.len().min(5)]
    );
    ensure!(
        churned.served.contains_key(&body_of(4)),
        "no new connection reached b4 after it came up: {:?}",
        churned.served
    );
    println!(
        "    wrk across the reload: {} requests, errors {}",
        w.requests,
        w.errors()
    );
    ensure!(w.errors() == 0, "wrk across the reload adding b4: {w:?}");
    let m = Metrics::scrape(lb)?;
    ensure!(m.val("flowplane_config_generation", &[])? == 2.0);
    ensure!(
        m.val(
            "flowplane_vip_backends",
            &[("vip", "web"), ("state", "healthy")]
        )? == 4.0
    );
    let t = new_connections(client, VIP_GRE, 400)?;
    check_balance("400 new connections after adding b4", &t, &[1, 2, 3, 4])?;
    println!("    400 connections: {:?}", t.served);
    step(
        "reload adding b4 under wrk: 0 errors, b4 serves its share",
        t0,
    );

    // ---- 7. b2's nginx killed ----------------------------------------------------------
    let held = hold_connections(client, VIP_GRE, 40)?;
    let b2 = backend_addr(2);
    let t_kill = Instant::now();
    lab.backend(2).nginx.proc.kill();
    let bound = Duration::from_millis(HC_FALL * HC_INTERVAL_MS + HC_TIMEOUT_MS);
    let down_after = wait_for("b2 to be marked down", bound + SLACK, || {
        let m = Metrics::scrape(lb)?;
        Ok(
            (m.get("flowplane_backend_healthy", &[("backend", &b2)]) == Some(0.0))
                .then(|| t_kill.elapsed()),
        )
    })?;
    println!("    b2 down {down_after:?} after its nginx was killed (configured bound {bound:?})");
    let (mut kept, mut lost) = (0, 0);
    for (mut s, was) in held {
        if was == body_of(2) {
            lost += 1;
            continue;
        }
        match request(&mut s, VIP_GRE, false) {
            Ok((200, body)) if body.trim() == was => kept += 1,
            other => bail!(
                "a held connection to {was} (healthy) was disturbed by b2's failure: {other:?}"
            ),
        }
    }
    ensure!(kept > 0, "no held connection on a healthy backend");
    println!("    held connections: {kept} on healthy backends kept, {lost} were on b2");
    let t = new_connections(client, VIP_GRE, 200)?;
    check_balance("200 new connections with b2 down", &t, &[1, 3, 4])?;
    let m = Metrics::scrape(lb)?;
    ensure!(
        m.val(
            "flowplane_vip_backends",
            &[("vip", "web"), ("state", "healthy")]
        )? == 3.0
    );
    step(
        "b2 killed: marked down in time, others undisturbed, new connections avoid it",
        t0,
    );

    // ---- whole-run kernel counters -----------------------------------------------------
    for (b, s0) in all_backends.iter().zip(&snmp_start) {
        let s1 = snmp(&b.ns)?;
        ensure!(
            delta(s0, &s1, "TcpInCsumErrors") == 0,
            "backend {}: TcpInCsumErrors +{}",
            b.i,
            delta(s0, &s1, "TcpInCsumErrors")
        );
    }
    let client_end = snmp(client)?;
    ensure!(
        delta(&client_start, &client_end, "TcpInCsumErrors") == 0,
        "client TcpInCsumErrors"
    );

    // ---- 8. shutdown -------------------------------------------------------------------
    stop_balancer(lab, &fp, t0)
}

#[test]
fn live_lb_af_packet() {
    run_driver("af_packet");
}

#[test]
fn live_lb_af_xdp() {
    run_driver("af_xdp");
}

#[test]
fn metrics_parser() {
    let m = Metrics(
        "# HELP x\nflowplane_vip_info{vip=\"web-vxlan\",match=\"10.0.0.1\",encap=\"vxlan(vni 4242)\"} 1\n\
         flowplane_workers 2\nflowplane_drops_total{reason=\"tcp_truncated\"} 7\n"
            .into(),
    );
    assert_eq!(
        m.get("flowplane_vip_info", &[("encap", "vxlan(vni 4242)")]),
        Some(1.0)
    );
    assert_eq!(m.get("flowplane_workers", &[]), Some(2.0));
    assert_eq!(m.drops("tcp_truncated").unwrap(), 7.0);
    assert_eq!(m.get("flowplane_drops_total", &[("reason", "x")]), None);
}
