//! End-to-end test of `flowplane flowlet` on live interfaces (AF_PACKET and AF_XDP): TCP flows
//! from iperf3 balanced flowlet by flowlet over three routed paths of different delays.
//!
//! # Topology
//!
//! ```text
//!                       in0 10.0.1.1             p1 ─ a1 ─ m1 ─ b1 (+0 ms)  ─ r1
//!   snd eth0 10.0.1.2 ───────────── fl (flowplane   p2 ─ a2 ─ m2 ─ b2 (+1 ms)  ─ r2  rcv
//!   (iperf3 client)                     flowlet)    p3 ─ a3 ─ m3 ─ b3 (+2 ms)  ─ r3  10.0.9.1 on lo
//!       ret0 10.0.3.1 ─────────────────────────── return path ──────────────── ret0 10.0.3.2
//! ```
//!
//! The sender routes 10.0.9.1 through `fl`'s `in0` (a static neighbour entry: under AF_XDP every
//! frame of `in0` goes to the balancer, ARP included). `flowplane flowlet --interface in0 --paths
//! p1,p2,p3` sends each flowlet out of one path, to that path's router `m_i` (next hop = `a_i`'s
//! MAC), where a relay (`tests/flowlet_live/relay.py`, an AF_PACKET forwarder: this kernel has no
//! netem) sends it on to the receiver 0, 1 or 2 ms later, in order. The receiver answers (ACKs)
//! straight back over the return path; `fl`'s and the routers' kernels forward nothing.
//!
//! # What is asserted (per driver)
//!
//! 1. **Flowlets** (gap 5 ms, longer than the 2 ms spread of path delays): four iperf3 TCP streams
//!    sending 128 KiB blocks at 16 Mbit/s each (a burst, then tens of ms of silence) for 4 s
//!    complete; every stream's data segments, captured at the receiver's three interfaces and
//!    put in sequence order, change path at least once (flowlets move after the pauses); every path carried traffic and each path's share of frames is within
//!    [0.5, 1.5] × 1/3 (least-loaded by bytes balances flowlets, not packets, so a bound, not
//!    equality); the receiver queued at most 1 % of the segments it received out of order
//!    (`TcpExtTCPOFOQueue`).
//! 2. **Per-packet spraying** (the negative control: gap 1 ns, every packet a flowlet of its own),
//!    same traffic: at least 90 % of the input frames start a flowlet (each frame has its own
//!    receive time, also inside a burst), at least 30 % of consecutive data segments change path
//!    and at least 30 % of the flowlets count as moved; the receiver queues at least 10 times more
//!    segments out of order than with flowlets, and at least 5 % of what it received — the
//!    reordering the flowlet gap prevents. With flowlets, the metrics count moved flowlets too.
//! 3. A tracer probe (a UDP datagram carrying `FLOWPLANE-TRACE1` and an id) sent during the
//!    flowlet run appears on `/trace` as forwarded, with its flow, path and next hop.
//! 4. SIGTERM: exit 0 both times.
//!
//! Run with `cargo test -p flowplane --test flowlet_live -- --nocapture` to see the figures. Needs
//! root, iperf3, nstat, curl and Debian's python3; fails saying so otherwise.

mod common;

use anyhow::{ensure, Context, Result};
use common::read_pcap;
use fp_testnet::{Netns, Proc, TestNet};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_flowplane");
const ADMIN: &str = "127.0.0.1:9120";
const PATHS: usize = 3;
const DELAY_MS: [u32; PATHS] = [0, 1, 2];
const RCV: &str = "10.0.9.1";
const RELAY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/flowlet_live/relay.py");

/// One lab at a time.
static SERIAL: Mutex<()> = Mutex::new(());

struct Lab {
    _net: TestNet,
    snd: Netns,
    fl: Netns,
    rcv: Netns,
    _routers: Vec<Netns>,
    _relays: Vec<Proc>,
    /// `a_i`'s MAC: the next hop of path i.
    next_hops: Vec<String>,
}

fn build(tag: &str) -> Result<Lab> {
    let net = TestNet::new(tag)?;
    net.require_tools(&["iperf3", "nstat", "curl"])?;
    let snd = net.ns("snd")?;
    let fl = net.ns("fl")?;
    let rcv = net.ns("rcv")?;
    let routers: Vec<Netns> = (1..=PATHS)
        .map(|k| net.ns(&format!("m{k}")))
        .collect::<Result<_, _>>()?;
    // Packets arrive on interfaces their source is not routed through (the paths, the return
    // link): no reverse-path filtering anywhere (set before the interfaces exist, so that every
    // one inherits it); no IPv6 chatter.
    for ns in [&snd, &fl, &rcv].into_iter().chain(&routers) {
        for k in ["all", "default"] {
            ns.sysctl(&format!("net.ipv4.conf.{k}.rp_filter"), "0")?;
        }
        ns.sysctl("net.ipv6.conf.all.disable_ipv6", "1")?;
        ns.sysctl("net.ipv6.conf.default.disable_ipv6", "1")?;
    }
    let (s0, in0) = net.veth(&snd, "eth0", &fl, "in0")?;
    s0.addr_add("10.0.1.2/24")?;
    in0.addr_add("10.0.1.1/24")?;
    // The sender's segments cross the balancer as they are on the wire: complete checksums, no
    // 64 KiB GSO frames.
    s0.tx_checksum_off()?;
    let (sr, rr) = net.veth(&snd, "ret0", &rcv, "ret0")?;
    sr.addr_add("10.0.3.1/24")?;
    rr.addr_add("10.0.3.2/24")?;
    snd.route_add(&format!("{RCV}/32"), "10.0.1.1")?;
    snd.ip(&[
        "neigh",
        "replace",
        "10.0.1.1",
        "lladdr",
        &in0.mac_string()?,
        "dev",
        "eth0",
        "nud",
        "permanent",
    ])?;
    rcv.lo().addr_add(&format!("{RCV}/32"))?;
    rcv.route_add("10.0.1.0/24", "10.0.3.1")?;
    fl.sysctl("net.ipv4.ip_forward", "0")?;
    let mut next_hops = Vec::new();
    let mut relays = Vec::new();
    for (i, delay) in DELAY_MS.iter().enumerate() {
        let k = i + 1;
        let m = &routers[i];
        let (p, a) = net.veth(&fl, &format!("p{k}"), m, &format!("a{k}"))?;
        p.tx_checksum_off()?;
        a.addr_add(&format!("10.0.{}.1/24", 20 + k))?;
        let (b, r) = net.veth(m, &format!("b{k}"), &rcv, &format!("r{k}"))?;
        b.addr_add(&format!("10.0.{}.1/24", 10 + k))?;
        r.addr_add(&format!("10.0.{}.2/24", 10 + k))?;
        // The relay is the path (and its delay); the router's kernel forwards nothing.
        m.sysctl("net.ipv4.ip_forward", "0")?;
        let relay = m
            .cmd([
                "/usr/bin/python3",
                RELAY,
                &format!("a{k}"),
                &format!("b{k}"),
                &delay.to_string(),
                &r.mac_string()?,
            ])
            .spawn()?;
        relay.wait_log("relaying", Duration::from_secs(10))?;
        relays.push(relay);
        next_hops.push(a.mac_string()?);
    }
    // Without the balancer nothing reaches the receiver from the sender's side.
    ensure!(
        !snd.cmd(["ping", "-c", "1", "-W", "1", RCV])
            .output()?
            .success(),
        "the receiver answers without the balancer: the topology leaks"
    );
    Ok(Lab {
        _net: net,
        snd,
        fl,
        rcv,
        _routers: routers,
        _relays: relays,
        next_hops,
    })
}

fn admin_get(fl: &Netns, path: &str) -> Result<String> {
    let out = fl
        .cmd(["curl", "-sS", "-m", "5", &format!("http://{ADMIN}{path}")])
        .run()?;
    Ok(out.stdout)
}

/// The value of a sample `name{labels}` in Prometheus text.
fn sample(text: &str, name: &str, labels: &str) -> Option<f64> {
    let head = if labels.is_empty() {
        name.to_string()
    } else {
        format!("{name}{{{labels}}}")
    };
    text.lines()
        .find(|l| l.starts_with(&format!("{head} ")))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

fn nstat(ns: &Netns) -> Result<HashMap<String, i64>> {
    let out = ns.cmd(["nstat", "-a", "-z", "-s"]).run()?;
    Ok(out
        .stdout
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            Some((w.next()?.to_string(), w.next()?.parse().ok()?))
        })
        .collect())
}

/// Data segments seen at the receiver: (source port, sequence number, path).
fn segments(frames: &[Vec<u8>], path: usize, out: &mut Vec<(u16, u32, usize)>) {
    for f in frames {
        let Some(ip) = f.get(14..) else { continue };
        if ip.len() < 20 || ip[0] >> 4 != 4 || ip[9] != 6 {
            continue;
        }
        let ihl = usize::from(ip[0] & 0x0f) * 4;
        let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
        let Some(tcp) = ip.get(ihl..) else { continue };
        if tcp.len() < 20 {
            continue;
        }
        let doff = usize::from(tcp[12] >> 4) * 4;
        if total <= ihl + doff {
            continue; // no payload: a pure ACK, the handshake
        }
        let sport = u16::from_be_bytes([tcp[0], tcp[1]]);
        let seq = u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]]);
        out.push((sport, seq, path));
    }
}

/// Per data flow (source port): its segments, and how many times consecutive segments (in
/// sequence order) arrived on different paths.
fn moves(segs: &[(u16, u32, usize)]) -> Vec<(u16, usize, usize)> {
    let mut by_flow: HashMap<u16, Vec<(u32, usize)>> = HashMap::new();
    for &(sport, seq, path) in segs {
        by_flow.entry(sport).or_default().push((seq, path));
    }
    let mut out: Vec<(u16, usize, usize)> = by_flow
        .into_iter()
        .map(|(sport, mut v)| {
            let base = v.iter().map(|s| s.0).min().unwrap_or(0);
            v.sort_by_key(|s| s.0.wrapping_sub(base));
            v.dedup_by_key(|s| s.0);
            let changes = v.windows(2).filter(|w| w[0].1 != w[1].1).count();
            (sport, v.len(), changes)
        })
        .collect();
    out.sort();
    out
}

/// What one balancer run showed.
struct Run {
    /// Frames the balancer received on its input, the flowlets it started (new or after a gap)
    /// and the flowlets that took another path than their flow's previous one (its metrics).
    input: f64,
    flowlets: f64,
    moved: f64,
    /// Segments the receiver got, and those it queued out of order.
    segments: i64,
    ofo: i64,
    per_path: Vec<f64>,
    /// Per data flow: source port, segments, path changes along its sequence.
    flows: Vec<(u16, usize, usize)>,
    mbps: f64,
    /// The tracer's record of the probe.
    trace: String,
}

fn run_balancer(lab: &Lab, driver: &str, gap_us: &str) -> Result<Run> {
    let hops = lab.next_hops.join(",");
    let fp: Proc = lab
        .fl
        .cmd([
            BIN,
            "flowlet",
            "--interface",
            "in0",
            "--paths",
            "p1,p2,p3",
            "--next-hops",
            &hops,
            "--driver",
            driver,
            "--workers",
            "1",
            "--gap-us",
            gap_us,
            "--admin",
            ADMIN,
        ])
        .spawn()
        .context("flowplane flowlet")?;
    fp.wait_log("ready:", Duration::from_secs(20))?;
    let rcv0 = nstat(&lab.rcv)?;
    let caps = (1..=PATHS)
        .map(|k| {
            lab.rcv
                .link(&format!("r{k}"))
                .capture(&["tcp", "and", "dst", "port", "5201"])
        })
        .collect::<Result<Vec<_>, _>>()?;
    let srv = lab.rcv.iperf3_server(5201)?;
    let rep = lab.snd.iperf3_client(
        RCV,
        5201,
        4,
        &["-P", "4", "-b", "16M", "-l", "128K", "-C", "reno"],
    );
    drop(srv);
    let rcv1 = nstat(&lab.rcv)?;
    let mut segs = Vec::new();
    for (o, c) in caps.into_iter().enumerate() {
        segments(&read_pcap(&c.stop()?)?, o, &mut segs);
    }
    let m = admin_get(&lab.fl, "/metrics")?;
    // A tracer probe: recorded with the path it was given.
    let probe: u64 = 0x5eed_f10e;
    lab.snd.enter(move || -> std::io::Result<()> {
        let s = std::net::UdpSocket::bind("10.0.1.2:0")?;
        s.send_to(&fp_pipeline::trace::probe_payload(probe), (RCV, 9999))?;
        Ok(())
    })??;
    let mut trace = String::new();
    for _ in 0..50 {
        trace = admin_get(&lab.fl, "/trace")?;
        if trace.contains("forwarded") {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    fp.signal(libc::SIGTERM);
    let st = fp.wait(Duration::from_secs(10))?;
    let rep = rep.context("iperf3 through the balancer")?;
    ensure!(
        st.success(),
        "flowplane flowlet exit status on SIGTERM: {st}"
    );
    let d = |k: &str| rcv1.get(k).copied().unwrap_or(0) - rcv0.get(k).copied().unwrap_or(0);
    let per_path = (0..PATHS)
        .map(|o| {
            sample(
                &m,
                "flowplane_flowlet_path_packets_total",
                &format!("path=\"{o}\",interface=\"p{}\"", o + 1),
            )
            .unwrap_or(0.0)
        })
        .collect();
    let event = |e: &str| {
        sample(
            &m,
            "flowplane_flowlet_events_total",
            &format!("event=\"{e}\""),
        )
        .unwrap_or(0.0)
    };
    Ok(Run {
        input: sample(&m, "flowplane_flowlet_rx_frames_total", "").unwrap_or(0.0),
        flowlets: event("new") + event("gap"),
        moved: event("moved"),
        segments: d("TcpInSegs"),
        ofo: d("TcpExtTCPOFOQueue"),
        per_path,
        flows: moves(&segs).into_iter().filter(|f| f.1 >= 100).collect(),
        mbps: rep.received_bps / 1e6,
        trace,
    })
}

fn scenario(driver: &str) -> Result<()> {
    let t0 = Instant::now();
    let lab = build(if driver == "af_xdp" {
        "fll-xsk"
    } else {
        "fll-pkt"
    })?;
    println!("[{:>5.2}s] {driver}: lab built", t0.elapsed().as_secs_f64());

    let fl = run_balancer(&lab, driver, "5000")?;
    let total: f64 = fl.per_path.iter().sum();
    let shares: Vec<f64> = fl.per_path.iter().map(|p| p / total).collect();
    println!(
        "[{:>5.2}s] {driver}: flowlets (gap 5 ms): {:.1} Mbit/s, {} segments, {} out of order \
         ({:.3} %), path changes per flow (port, segments, changes) {:?}, shares {:?}",
        t0.elapsed().as_secs_f64(),
        fl.mbps,
        fl.segments,
        fl.ofo,
        100.0 * fl.ofo as f64 / fl.segments.max(1) as f64,
        fl.flows,
        shares
            .iter()
            .map(|s| format!("{:.3}", s))
            .collect::<Vec<_>>()
    );
    let spray = run_balancer(&lab, driver, "0.001")?;
    println!(
        "[{:>5.2}s] {driver}: per-packet spraying: {:.1} Mbit/s, {} segments, {} out of order \
         ({:.3} %); {} of {} input frames started a flowlet, {} moved; path changes per flow \
         (port, segments, changes) {:?}",
        t0.elapsed().as_secs_f64(),
        spray.mbps,
        spray.segments,
        spray.ofo,
        100.0 * spray.ofo as f64 / spray.segments.max(1) as f64,
        spray.flowlets,
        spray.input,
        spray.moved,
        spray.flows
    );
    println!(
        "{driver}: flowlets (gap 5 ms): {} of {} input frames started a flowlet, {} moved",
        fl.flowlets, fl.input, fl.moved
    );

    let mut failures = Vec::new();
    if fl.segments < 1000 {
        failures.push(format!("flowlets: only {} segments received", fl.segments));
    }
    if fl.flows.len() < 4 || fl.flows.iter().any(|f| f.2 == 0) {
        failures.push(format!(
            "flowlets: expected 4 data flows each moving between paths after its pauses, got \
             (port, segments, path changes) {:?}",
            fl.flows
        ));
    }
    for (o, s) in shares.iter().enumerate() {
        if !(0.5 / PATHS as f64..=1.5 / PATHS as f64).contains(s) {
            failures.push(format!(
                "flowlets: path {o} carried {:.1} % of the frames, outside [{:.1}, {:.1}] %",
                100.0 * s,
                50.0 / PATHS as f64,
                150.0 / PATHS as f64
            ));
        }
    }
    let record = fl.trace.lines().find(|l| l.contains("10.0.1.2:"));
    match record {
        Some(r) if r.contains("\"decision\":\"forwarded\"") && r.contains("> 10.0.9.1:9999 17") => {
            println!("{driver}: trace: {r}")
        }
        _ => failures.push(format!(
            "the tracer did not record the probe as forwarded: {:?}",
            fl.trace
        )),
    }
    if fl.ofo as f64 > 0.01 * fl.segments as f64 {
        failures.push(format!(
            "flowlets: {} of {} segments queued out of order (more than 1 %)",
            fl.ofo, fl.segments
        ));
    }
    // Every frame has its own receive time, so with a gap of 1 ns every packet is a flowlet of
    // its own, and least-loaded sends consecutive packets of a flow down different paths.
    if spray.flowlets < 0.9 * spray.input {
        failures.push(format!(
            "per-packet spraying: only {} of {} frames started a flowlet (the receive times do \
             not separate the frames of a burst)",
            spray.flowlets, spray.input
        ));
    }
    let (seg, changes) = spray
        .flows
        .iter()
        .fold((0, 0), |(s, c), f| (s + f.1, c + f.2));
    if (changes as f64) < 0.3 * seg as f64 || spray.moved < 0.3 * spray.flowlets {
        failures.push(format!(
            "per-packet spraying: {changes} path changes over {seg} data segments, {} of {} \
             flowlets moved (metrics): too few for per-packet spraying",
            spray.moved, spray.flowlets
        ));
    }
    if fl.moved < 1.0 {
        failures.push(format!(
            "flowlets: the flows changed path (captures) but flowplane_flowlet_events_total\
             {{event=\"moved\"}} is {}",
            fl.moved
        ));
    }
    if (spray.ofo as f64) < 0.05 * spray.segments as f64 || spray.ofo < 10 * fl.ofo.max(1) {
        failures.push(format!(
            "per-packet spraying: {} of {} segments out of order — the control shows no \
             reordering for the flowlets to prevent (flowlets: {})",
            spray.ofo, spray.segments, fl.ofo
        ));
    }
    ensure!(
        failures.is_empty(),
        "{driver}: {} failure(s):\n  {}",
        failures.len(),
        failures.join("\n  ")
    );
    Ok(())
}

fn run_driver(driver: &str) {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if let Err(e) = scenario(driver) {
        panic!("{e:#}");
    }
}

#[test]
fn flowlet_live_af_packet() {
    run_driver("af_packet");
}

#[test]
fn flowlet_live_af_xdp() {
    run_driver("af_xdp");
}
