//! End-to-end test of the balancer's SYN-flood guard (`flowplane run --interface`, over AF_PACKET
//! and over AF_XDP): a flood of spoofed SYNs fills the connection tables while real clients keep
//! working and keep their backends.
//!
//! # Topology
//!
//! ```text
//!                 10.0.1.0/24                           10.0.2.0/24, one Linux bridge ("sw")
//!   client ─────────────────────── router ──────┬──────────────┬──────────────────┬──────────┐
//!   10.0.1.2                10.0.1.1   10.0.2.1 │              │                  │          │
//!   (wrk, Rust sockets)     static route        lb 10.0.2.2    b1..b4              attacker
//!                           VIP → 10.0.2.2,     flowplane run  10.0.2.11-14        (no address)
//!                           198.18.0.0/15       --interface    nginx ("backend N") SYN frames
//!                           blackholed          eth0           `flowplane backend` to the lb's
//!                                               (2 queues)     --decap gre         MAC
//! ```
//!
//! The lab is `live_lb.rs`'s (same platform choices: checksum offload off on the client, IPv6
//! off, strict rp_filter on the router, br_netfilter off) with one GRE VIP, 10.100.0.10:80, pool
//! `web` = b1..b3 with HTTP health checks (b4 is added by a reload), and small connection tables
//! (16384 IPv4 entries per worker) so that the flood fills them. `syn_timeout_ms = 2000`,
//! `new_conn_rate` left at its default (no limit).
//!
//! A platform choice that matters most here: **the lab's client runs with `net.core.txrehash =
//! 0`.** On veth the
//! balancer's receive queue (under AF_XDP: its worker) is chosen by the hash the client's socket
//! stamps on its packets, which survives the router and the bridge; TCP draws a new one after
//! each retransmission timeout, and the flood's load makes some. A connection would then move
//! to the other worker, whose table does not know it, and be balanced anew — after the reload
//! below, to another backend a quarter of the time, which resets it. (AF_PACKET's fan-out
//! hashes the headers, as a NIC's RSS does, and is not affected.)
//!
//! The attacker sits on the bridge and sends Ethernet frames straight to the balancer's MAC:
//! TCP SYNs to the VIP from random sources in 198.18.0.0/15 and random ports, with valid IPv4 and
//! TCP checksums, from one thread through an AF_PACKET socket (fp-engine's port, `sendmmsg`), as
//! fast as that thread can up to 60 000 a second, until b4 has come up and a second more
//! (spoofed sources could not come through the router, whose strict reverse-path filter would
//! drop them). The backends answer the flood's SYNs towards
//! those sources; the router blackholes 198.18.0.0/15 (the replies of spoofed SYNs go to the
//! internet), so no ICMP error about them comes back to the VIP.
//!
//! # What is asserted (per driver, in one balancer run)
//!
//! 1. Before the flood the guard is off: `flowplane_syn_guard_mode` 0 on both workers, no SYN
//!    bypassed, the status page names each worker's mode.
//! 2. 40 keep-alive connections from the client, one request each, spread over b1..b3; their
//!    SYNs' embryonic entries are confirmed by the handshake: `flowplane_conn_embryonic_total
//!    {event="confirmed"}` is exactly 40 (it counts entries, also when a connection's ACK and
//!    request reach the balancer in one burst).
//! 3. wrk (2 threads, 20 keep-alive connections, 20 s) starts, then the flood: both workers reach
//!    table pressure (`flowplane_syn_guard_mode` 2, shown on the status page), and SYNs are
//!    bypassed (`flowplane_syn_guard_bypass_total{reason="pressure"}` grows, `reason="rate"`
//!    stays 0: no rate limit is configured).
//! 4. Under pressure, 20 more keep-alive connections are opened (their SYNs bypassed, their
//!    handshake's ACK recorded); then a reload adds b4, which comes up while the flood still
//!    runs, so the VIP's Maglev table changes: a connection whose entry was lost would now be
//!    balanced anew, and a quarter of them would go to another backend. wrk: zero failed requests
//!    (socket errors, timeouts, non-2xx).
//! 5. After the flood, each of the 60 held connections answers from the backend that answered it
//!    before, and every one of their packets hits its connection entry (no connection-table miss
//!    or re-selection while they are asked again); no backend of the pool changed health.
//! 6. Embryonic entries confirmed: at least the 60 connections opened before the flood (held and
//!    wrk's), at most those, wrk's address check and the 20 opened under pressure (the flood's
//!    SYNs are never confirmed);
//!    the table's fill per worker at the end of the flood is printed; once the flood is over the flood's entries expire
//!    (`event="expired"`) and both workers return to normal mode within the sweep's bound
//!    (`syn_timeout_ms` + one sweep pass of `syn_timeout_ms`, + slack).
//! 7. SIGTERM: exit 0, XDP program detached.
//!
//! Each driver prints one summary line: the flood's rate (frames/s), SYNs sent, requests served by
//! wrk, failed requests, the table's fill at the end of the flood and the SYNs bypassed.
//!
//! The tests serialise themselves (one lab at a time). Run with `cargo test -p flowplane --test
//! syn_flood -- --nocapture` to see each step. They need root, nginx, wrk, curl and nstat
//! (iproute2), and fail saying so otherwise.

mod common;

use anyhow::{anyhow, ensure, Result};
use common::*;
use fp_engine::afpacket::{AfPacketConfig, AfPacketPort};
use fp_engine::port::Port;
use fp_pipeline::craft::{self, Endpoints};
use fp_pipeline::packet::{burst, Pool, MAX_BURST};
use fp_testnet::{Netns, Proc, WrkOptions};
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const VIP: &str = "10.100.0.10";
/// IPv4 connections per worker's table: small, so that the flood fills it.
const CONN_CAPACITY: u64 = 16384;
const SYN_TIMEOUT_MS: u64 = 2000;
/// Spoofed sources: 198.18.0.0/15 (RFC 2544's benchmarking range).
const FLOOD_NET: u32 = 0xc612_0000;
const FLOOD_MASK: u32 = 0x0001_ffff;
/// The flood runs until b4 is up and then [`FLOOD_AFTER_B4`] more (the connections opened under
/// it may wait out SYN retransmission timeouts first, seconds on a slow machine), at most this.
const FLOOD_TIME: Duration = Duration::from_secs(30);
const FLOOD_AFTER_B4: Duration = Duration::from_secs(1);
/// Most SYNs a second the flood sends: several times what keeps both tables at the pressure mark
/// (16 384 entries each, refilled every `SYN_TIMEOUT_MS`), and no more, so that on a slow 2-core
/// machine the sender, the balancer, nginx and wrk still share the cores (a flood that takes all
/// of them tests the machine's overload, not the guard).
const FLOOD_RATE: f64 = 60_000.0;
/// Connections opened before the flood, and under it.
const HELD_BEFORE: usize = 40;
const HELD_DURING: usize = 20;

/// Health check of pool `web`.
const HC_INTERVAL_MS: u64 = 200;
const HC_TIMEOUT_MS: u64 = 150;
const HC_RISE: u64 = 2;
const HC_FALL: u64 = 2;
/// Allowance for a loaded 2-core machine on top of configured times.
const SLACK: Duration = Duration::from_millis(1500);

const WORKERS: [&str; 2] = ["0", "1"];

fn config_text(web: &[usize]) -> String {
    let backends = web
        .iter()
        .map(|&i| format!("{{ address = \"{}\" }}", backend_addr(i)))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "[balancer]\naddress = \"{LB}\"\nseed = 0x5eed\nmaglev_size = 65537\n\
         conn_table_capacity = {CONN_CAPACITY}\nconn_table_capacity_v6 = 1024\n\
         conn_idle_timeout_ms = 120000\nsyn_timeout_ms = {SYN_TIMEOUT_MS}\n\n\
         [[vip]]\nname = \"web\"\naddress = \"{VIP}\"\nport = 80\nprotocol = \"tcp\"\n\
         pools = [\"web\"]\nencap = \"gre\"\n\n\
         [[pool]]\nname = \"web\"\nbackends = [{backends}]\nhealth = {{ kind = \"http\", \
         path = \"/\", status = 200, body = \"backend\", interval_ms = {HC_INTERVAL_MS}, \
         timeout_ms = {HC_TIMEOUT_MS}, rise = {HC_RISE}, fall = {HC_FALL} }}\n"
    )
}

// ---------------------------------------------------------------------------------------------
// The flood.

/// Sum of big-endian 16-bit words.
fn sum16(b: &[u8]) -> u32 {
    b.chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum()
}

/// Ones' complement of the folded sum: an Internet checksum.
fn checksum(mut s: u32) -> [u8; 2] {
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    (!(s as u16)).to_be_bytes()
}

/// SYN frames to the VIP: one frame crafted by `fp_pipeline::craft`, of which each copy gets its
/// own source address and port and the two checksums updated for them (no other field depends
/// on them), so making a frame costs a copy and a few additions.
struct SynFrames {
    template: [u8; 54],
    /// Sums of the IPv4 header and of the TCP pseudo-header and header without the source
    /// address, the source port and the checksum fields.
    ip_sum: u32,
    tcp_sum: u32,
}

impl SynFrames {
    const LEN: usize = 54;

    fn new(src_mac: [u8; 6], dst_mac: [u8; 6], vip: Ipv4Addr) -> SynFrames {
        let mut t = [0u8; Self::LEN];
        let e = Endpoints {
            src: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            sport: 0,
            dst: IpAddr::V4(vip),
            dport: 80,
        };
        let n = craft::tcp_into(&e, true, &mut t);
        assert_eq!(n, Self::LEN, "an IPv4 SYN without options");
        t[0..6].copy_from_slice(&dst_mac);
        t[6..12].copy_from_slice(&src_mac);
        // IPv4 header at 14 (checksum at 24, source at 26), TCP at 34 (source port at 34,
        // checksum at 50); the source fields are zero in the template.
        let ip_sum = sum16(&t[14..24]) + sum16(&t[26..34]);
        let tcp_len = (Self::LEN - 34) as u32;
        let tcp_sum = sum16(&t[30..34]) + 6 + tcp_len + sum16(&t[34..50]) + sum16(&t[52..54]);
        SynFrames {
            template: t,
            ip_sum,
            tcp_sum,
        }
    }

    /// Write the SYN from `src:sport` into `out`; returns its length.
    #[inline]
    fn write(&self, src: Ipv4Addr, sport: u16, out: &mut [u8]) -> usize {
        let out = &mut out[..Self::LEN];
        out.copy_from_slice(&self.template);
        let a = src.octets();
        out[26..30].copy_from_slice(&a);
        out[34..36].copy_from_slice(&sport.to_be_bytes());
        let s = sum16(&a);
        out[24..26].copy_from_slice(&checksum(self.ip_sum + s));
        out[50..52].copy_from_slice(&checksum(self.tcp_sum + s + u32::from(sport)));
        Self::LEN
    }
}

/// xorshift64: the flood's sources and ports.
fn next_random(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

/// What the flood's sender did.
#[derive(Debug)]
struct Flood {
    /// Frames the interface took.
    sent: u64,
    /// Frames it refused (a veth refuses a frame when its peer's backlog is full).
    refused: u64,
    secs: f64,
    /// The sender thread's CPU time in user space and in the kernel (s).
    cpu: (f64, f64),
}

impl Flood {
    fn rate(&self) -> f64 {
        self.sent as f64 / self.secs
    }
}

/// The calling thread's CPU time in user space and in the kernel, in seconds
/// (`/proc/thread-self/stat`: utime and stime, in clock ticks).
fn thread_cpu() -> Result<(f64, f64)> {
    let stat = std::fs::read_to_string("/proc/thread-self/stat")?;
    let f: Vec<&str> = stat
        .rsplit_once(')')
        .ok_or_else(|| anyhow!("/proc/thread-self/stat: {stat:?}"))?
        .1
        .split_whitespace()
        .collect();
    // SAFETY: sysconf only reads its integer argument.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Ok((f[11].parse::<f64>()? / hz, f[12].parse::<f64>()? / hz))
}

/// Start the flood in `attacker`: SYNs to `vip:80` out of its `eth0` to `dst_mac`, from random
/// sources of 198.18.0.0/15 and random ports ≥ 1024, bursts of [`MAX_BURST`] frames per
/// `sendmmsg`, at most [`FLOOD_RATE`] a second, until `stop` is set or for at most `length`.
fn start_flood(
    attacker: &Netns,
    dst_mac: [u8; 6],
    vip: Ipv4Addr,
    length: Duration,
    stop: Arc<AtomicBool>,
) -> Result<JoinHandle<Result<Flood>>> {
    let src_mac = attacker.link("eth0").mac()?;
    Ok(attacker.spawn_thread(move || -> Result<Flood> {
        let frames = SynFrames::new(src_mac, dst_mac, vip);
        let mut port = AfPacketPort::open("eth0", &AfPacketConfig::default())?;
        let mut pool = Pool::new(2 * MAX_BURST);
        let mut batch = burst();
        let mut rng = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_nanos() as u64
            | 1;
        let (mut sent, mut tried) = (0u64, 0u64);
        let cpu0 = thread_cpu()?;
        let t0 = Instant::now();
        while t0.elapsed() < length && !stop.load(Ordering::Relaxed) {
            if tried as f64 > FLOOD_RATE * t0.elapsed().as_secs_f64() {
                std::thread::sleep(Duration::from_micros(200));
                continue;
            }
            while batch.len() < MAX_BURST {
                let Some(mut p) = pool.get() else { break };
                let r = next_random(&mut rng);
                let src = Ipv4Addr::from(FLOOD_NET | (r as u32 & FLOOD_MASK));
                let sport = 1024 + ((r >> 32) % (65536 - 1024)) as u16;
                let n = frames.write(src, sport, p.rx_area());
                p.set_len(n);
                batch.push(p);
            }
            tried += batch.len() as u64;
            sent += port.tx_burst(&mut batch, &mut pool) as u64;
        }
        let secs = t0.elapsed().as_secs_f64();
        let cpu1 = thread_cpu()?;
        Ok(Flood {
            sent,
            refused: tried - sent,
            secs,
            cpu: (cpu1.0 - cpu0.0, cpu1.1 - cpu0.1),
        })
    })?)
}

// ---------------------------------------------------------------------------------------------
// Reading the guard.

/// One worker's IPv4 table and guard, from a scrape.
#[derive(Clone, Copy, Debug, Default)]
struct Table {
    entries: f64,
    slots: f64,
    mode: f64,
}

impl Table {
    fn of(m: &Metrics, worker: &str) -> Result<Table> {
        let fam = [("worker", worker), ("family", "ipv4")];
        Ok(Table {
            entries: m.val("flowplane_conn_table_entries", &fam)?,
            slots: m.val("flowplane_conn_table_slots", &fam)?,
            mode: m.val("flowplane_syn_guard_mode", &[("worker", worker)])?,
        })
    }

    fn fill(&self) -> f64 {
        self.entries / self.slots
    }

    fn text(&self) -> String {
        format!(
            "{:.0}/{:.0} ({:.1} %)",
            self.entries,
            self.slots,
            100.0 * self.fill()
        )
    }
}

fn tables(m: &Metrics) -> Result<Vec<Table>> {
    WORKERS.iter().map(|w| Table::of(m, w)).collect()
}

fn bypassed(m: &Metrics, reason: &str) -> Result<f64> {
    m.val("flowplane_syn_guard_bypass_total", &[("reason", reason)])
}

fn embryonic(m: &Metrics, event: &str) -> Result<f64> {
    m.val("flowplane_conn_embryonic_total", &[("event", event)])
}

fn lookups(m: &Metrics, result: &str) -> Result<f64> {
    m.val("flowplane_conn_lookups_total", &[("result", result)])
}

/// The status page's line for `worker` (it names the worker's guard mode).
fn status_line(status: &str, worker: &str) -> Option<String> {
    status
        .lines()
        .find(|l| l.starts_with(&format!("worker {worker}:")))
        .map(str::to_string)
}

/// Backends that answered, by name.
fn spread(held: &[(TcpStream, String)]) -> BTreeMap<&str, usize> {
    let mut m = BTreeMap::new();
    for (_, b) in held {
        *m.entry(b.as_str()).or_default() += 1;
    }
    m
}

// ---------------------------------------------------------------------------------------------
// The scenario.

fn run_driver(driver: &str) {
    let tag = if driver == "af_xdp" {
        "syn-xsk"
    } else {
        "syn-pkt"
    };
    run_lab(
        driver,
        || {
            LabSpec {
                tag,
                tools: &["nginx", "wrk", "curl", "nstat"],
                vips: &[VIP],
                decap: "gre",
                backend_args: &|_| Vec::new(),
                backends: 4,
                nginx_server: "",
            }
            .build()
        },
        |lab, balancer, t0| scenario(lab, driver, balancer, t0),
    );
}

fn scenario(lab: &Lab, driver: &str, balancer: &mut Option<Proc>, t0: Instant) -> Result<()> {
    let lb = &lab.lb;
    let client = &lab.client;

    // ---- the attacker -------------------------------------------------------------------
    let attacker = lab.net.ns("attacker")?;
    quiet(&attacker)?;
    let (_, p) = lab.net.veth(&attacker, "eth0", &lab.sw, "p-attacker")?;
    p.set_master(&lab.br)?;
    // Where the backends' answers to the spoofed sources end.
    lab.router
        .ip(&["route", "add", "blackhole", "198.18.0.0/15"])?;

    // ---- 1. start: the guard is off -------------------------------------------------------
    lab.write_config(&config_text(&[1, 2, 3]))?;
    let fp = start_balancer(lab, driver, 3, balancer, t0)?;
    let m = Metrics::scrape(lb)?;
    for (w, t) in WORKERS.iter().zip(tables(&m)?) {
        ensure!(
            t.mode == 0.0,
            "worker {w}: flowplane_syn_guard_mode {} before any traffic",
            t.mode
        );
        ensure!(
            t.slots >= CONN_CAPACITY as f64,
            "worker {w}: {} slots for a capacity of {CONN_CAPACITY}",
            t.slots
        );
    }
    for r in ["rate", "pressure"] {
        ensure!(
            bypassed(&m, r)? == 0.0,
            "SYNs bypassed ({r}) before traffic"
        );
    }
    let (_, status) = admin(lb, "GET", "/status")?;
    for w in WORKERS {
        let l = status_line(&status, w)
            .ok_or_else(|| anyhow!("no line for worker {w} on the status page:\n{status}"))?;
        ensure!(
            l.contains("normal"),
            "status page before the flood should show worker {w}'s guard as normal: {l:?}"
        );
    }
    step(
        "SYN guard off: mode 0 on both workers, nothing bypassed",
        t0,
    );

    // ---- 2. connections held across the flood ----------------------------------------------
    let mut held = hold_connections(client, VIP, HELD_BEFORE)?;
    let before = spread(&held);
    println!("    {HELD_BEFORE} held connections: {before:?}");
    ensure!(
        before.len() == 3 && (1..=3).all(|i| before.contains_key(body_of(i).as_str())),
        "{HELD_BEFORE} connections should reach b1..b3: {before:?}"
    );
    wait_for(
        "the held connections' embryonic entries to be confirmed",
        Duration::from_secs(3),
        || {
            let c = embryonic(&Metrics::scrape(lb)?, "confirmed")?;
            Ok((c >= HELD_BEFORE as f64).then_some(()))
        },
    )?;
    // Nothing else has opened a connection through the VIP: one entry per connection, each
    // confirmed once (by the handshake's ACK, also when the request follows it in one burst).
    std::thread::sleep(Duration::from_millis(100));
    let c = embryonic(&Metrics::scrape(lb)?, "confirmed")?;
    ensure!(
        c == HELD_BEFORE as f64,
        "{HELD_BEFORE} connections opened, {c} embryonic entries counted as confirmed (each \
         entry is confirmed once, however many of its packets see it embryonic)"
    );
    step(
        "40 keep-alive connections on b1..b3, their embryonic entries confirmed",
        t0,
    );

    // ---- 3. wrk, then the flood -------------------------------------------------------------
    let wrk_opts = WrkOptions {
        threads: 2,
        connections: 20,
        duration: Duration::from_secs(20),
        timeout: Duration::from_secs(2),
    };
    let m0 = Metrics::scrape(lb)?;
    let c0 = snmp(client)?;
    let wrk = client.wrk_spawn(&format!("http://{VIP}/"), &wrk_opts)?;
    let pk0 = m0.val("flowplane_vip_packets_total", &[("vip", "web")])?;
    // wrk's connections are open (and recorded) before the flood starts.
    wait_vip_packets(lb, "wrk's load to reach the balancer", "web", pk0, 500.0)?;
    let vip: Ipv4Addr = VIP.parse()?;
    let t_flood = Instant::now();
    let stop_flood = Arc::new(AtomicBool::new(false));
    let flood = start_flood(
        &attacker,
        lab.lb.link("eth0").mac()?,
        vip,
        FLOOD_TIME,
        stop_flood.clone(),
    )?;
    let pressure_after = wait_for(
        "both workers to reach table pressure under the flood",
        Duration::from_secs(3),
        || {
            let t = tables(&Metrics::scrape(lb)?)?;
            Ok(t.iter().all(|t| t.mode == 2.0).then(|| t_flood.elapsed()))
        },
    )?;
    println!("    both workers under table pressure {pressure_after:?} into the flood");
    let mut shown = Vec::new();
    wait_for(
        "the status page to show each worker under table pressure",
        Duration::from_secs(2),
        || {
            let (_, s) = admin(lb, "GET", "/status")?;
            for w in WORKERS {
                if let Some(l) = status_line(&s, w).filter(|l| l.contains("pressure")) {
                    if !shown.contains(&w) {
                        println!("    status: {l}");
                        shown.push(w);
                    }
                }
            }
            Ok((shown.len() == WORKERS.len()).then_some(()))
        },
    )?;
    step("flood: both workers under table pressure", t0);

    // ---- 4. new connections under pressure, then b4 added while the flood runs -------------
    let mut during = hold_connections(client, VIP, HELD_DURING)?;
    let m_during = Metrics::scrape(lb)?;
    println!(
        "    {HELD_DURING} connections opened under pressure: {:?} (guard modes now {:?})",
        spread(&during),
        tables(&m_during)?
            .iter()
            .map(|t| t.mode)
            .collect::<Vec<_>>()
    );
    lab.write_config(&config_text(&[1, 2, 3, 4]))?;
    let t_reload = Instant::now();
    let (st, body) = admin(lb, "POST", "/reload")?;
    ensure!(
        st == 200 && body.trim() == "generation 2",
        "reload adding b4: {st} {body:?}"
    );
    let b4 = backend_addr(4);
    let up_after = wait_for(
        "b4 to be marked healthy under the flood",
        Duration::from_millis(HC_RISE * HC_INTERVAL_MS + HC_TIMEOUT_MS) + SLACK,
        || {
            let m = Metrics::scrape(lb)?;
            Ok(
                (m.get("flowplane_backend_healthy", &[("backend", &b4)]) == Some(1.0))
                    .then(|| t_reload.elapsed()),
            )
        },
    )?;
    let b4_at = t_flood.elapsed();
    println!("    b4 healthy {up_after:?} after the reload, {b4_at:?} into the flood");
    ensure!(
        b4_at < FLOOD_TIME && !flood.is_finished(),
        "b4 came up {b4_at:?} into the flood, not before its end ({FLOOD_TIME:?}): the Maglev \
         table did not change under the flood"
    );
    std::thread::sleep(FLOOD_AFTER_B4);
    stop_flood.store(true, Ordering::Relaxed);
    // The table until the flood ends; the last scrape is its state at the end.
    let mut end = Metrics::scrape(lb)?;
    let mut samples = 0;
    while !flood.is_finished() {
        end = Metrics::scrape(lb)?;
        samples += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    let flood = flood
        .join()
        .map_err(|_| anyhow!("the flood thread panicked"))??;
    let end_tables = tables(&end)?;
    // While wrk runs on: when both workers are back to normal.
    let flood_end = t_flood + Duration::from_secs_f64(flood.secs);
    let mut normal_after = None;
    while wrk.is_running() && normal_after.is_none() {
        if tables(&Metrics::scrape(lb)?)?.iter().all(|t| t.mode == 0.0) {
            normal_after = Some(flood_end.elapsed());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    println!(
        "    flood: {} frames in {:.2} s = {:.0} frames/s ({} refused by the veth; sender CPU \
         {:.2} s user, {:.2} s kernel); table at its end ({samples} samples): {}; modes {:?}",
        flood.sent,
        flood.secs,
        flood.rate(),
        flood.refused,
        flood.cpu.0,
        flood.cpu.1,
        end_tables
            .iter()
            .zip(WORKERS)
            .map(|(t, w)| format!("worker {w} {}", t.text()))
            .collect::<Vec<_>>()
            .join(", "),
        end_tables.iter().map(|t| t.mode).collect::<Vec<_>>()
    );
    let w = client.wrk_finish(&wrk, &wrk_opts)?;
    let c1 = snmp(client)?;
    println!(
        "    wrk across the flood: {} requests, {:.0}/s, failed {} ({w:?}); client TCP: {} \
         segments retransmitted, {} retransmission timeouts",
        w.requests,
        w.requests_per_sec,
        w.errors(),
        delta(&c0, &c1, "TcpRetransSegs"),
        delta(&c0, &c1, "TcpExtTCPTimeouts")
    );
    ensure!(
        w.errors() == 0,
        "wrk across the flood and the reload adding b4: {w:?}"
    );
    step(
        "flood over: wrk 0 failed requests, b4 added under the flood",
        t0,
    );

    // ---- 5. every held connection on its backend, every packet a hit -----------------------
    let m1 = Metrics::scrape(lb)?;
    for i in 1..=3 {
        let a = backend_addr(i);
        let n = m1.val("flowplane_health_transitions_total", &[("backend", &a)])?;
        ensure!(
            n == 0.0,
            "backend {a} changed health {n} times during the test (its connections were \
             re-selected, whatever the guard did): health checks {:?}",
            m1.all("flowplane_health_checks_total")
        );
    }
    held.append(&mut during);
    ask_held(client, VIP, &mut held, "after the flood")?;
    let m2 = Metrics::scrape(lb)?;
    let d = |f: fn(&Metrics, &str) -> Result<f64>, k: &str| -> Result<f64> {
        Ok(f(&m2, k)? - f(&m1, k)?)
    };
    let held_n = HELD_BEFORE + HELD_DURING;
    ensure!(
        d(lookups, "miss")? == 0.0 && d(lookups, "reselect")? == 0.0,
        "asking the {held_n} held connections again after the flood: {} connection-table \
         misses and {} re-selections (an established connection lost its entry)",
        d(lookups, "miss")?,
        d(lookups, "reselect")?
    );
    ensure!(
        d(lookups, "hit")? >= held_n as f64,
        "asking the {held_n} held connections again: only {} hits",
        d(lookups, "hit")?
    );
    step(
        &format!("after the flood: all {held_n} held connections on the same backend, all hits"),
        t0,
    );

    // ---- 6. the guard's counters; back to normal -------------------------------------------
    let by_pressure = bypassed(&m2, "pressure")?;
    ensure!(
        by_pressure > 0.0,
        "no SYN bypassed for table pressure under the flood"
    );
    ensure!(
        bypassed(&m2, "rate")? == 0.0,
        "SYNs bypassed for the rate limit, but new_conn_rate is not set (no limit): {}",
        bypassed(&m2, "rate")?
    );
    let confirmed = embryonic(&m2, "confirmed")?;
    let min_confirmed = (HELD_BEFORE + wrk_opts.connections as usize) as f64;
    // wrk also opens (and closes) one connection to check the address before its load; the
    // connections opened under pressure may have been recorded by their ACK without an
    // embryonic entry; the flood's SYNs are never confirmed.
    let max_confirmed = min_confirmed + 1.0 + HELD_DURING as f64;
    ensure!(
        (min_confirmed..=max_confirmed).contains(&confirmed),
        "embryonic entries confirmed: {confirmed}, expected the {min_confirmed} connections \
         opened before the flood (and wrk's address check) and at most the {HELD_DURING} opened \
         under it"
    );
    // An embryonic entry goes between `syn_timeout_ms` and one sweep pass (as long, here) later.
    let bound = Duration::from_millis(2 * SYN_TIMEOUT_MS) + SLACK;
    if let Some(t) = normal_after {
        ensure!(
            t <= bound,
            "both workers back to normal mode only {t:?} after the flood's end (bound {bound:?})"
        );
    }
    let normal = wait_for(
        "both workers back to normal mode after the flood",
        (flood_end + bound).saturating_duration_since(Instant::now()),
        || {
            let m = Metrics::scrape(lb)?;
            let t = tables(&m)?;
            Ok(t.iter().all(|t| t.mode == 0.0).then_some((m, t)))
        },
    )
    .map_err(|e| {
        let t = Metrics::scrape(lb).and_then(|m| tables(&m));
        e.context(format!(
            "{bound:?} after the flood's end; tables now: {t:?}"
        ))
    })?;
    let (m3, t3) = normal;
    println!(
        "    normal mode {} after the flood's end: {}; embryonic entries confirmed \
         {confirmed}, evicted {}, expired {}; table full {}",
        normal_after.map_or_else(
            || format!("by {:?}", flood_end.elapsed()),
            |t| format!("{t:?}")
        ),
        t3.iter()
            .zip(WORKERS)
            .map(|(t, w)| format!("worker {w} {}", t.text()))
            .collect::<Vec<_>>()
            .join(", "),
        embryonic(&m3, "evicted")?,
        embryonic(&m3, "expired")?,
        m3.val("flowplane_conn_table_full_total", &[])?
    );
    ensure!(
        embryonic(&m3, "expired")? > 0.0,
        "the flood's embryonic entries did not expire"
    );
    step("guard back to normal, the flood's entries expired", t0);
    println!(
        "syn_flood {driver}: flood {:.0} frames/s ({} SYNs in {:.1} s, one sender thread); wrk \
         {} requests, {} failed; table fill at the end of the flood {}; {by_pressure:.0} SYNs \
         bypassed (pressure)",
        flood.rate(),
        flood.sent,
        flood.secs,
        w.requests,
        w.errors(),
        end_tables
            .iter()
            .zip(WORKERS)
            .map(|(t, w)| format!("worker {w} {:.1} %", 100.0 * t.fill()))
            .collect::<Vec<_>>()
            .join(", ")
    );

    // ---- 7. shutdown ---------------------------------------------------------------------
    drop((held, during));
    stop_balancer(lab, &fp, t0)
}

#[test]
fn syn_flood_af_packet() {
    run_driver("af_packet");
}

#[test]
fn syn_flood_af_xdp() {
    run_driver("af_xdp");
}

/// The flood's frames are the frames `fp_pipeline::craft` makes for the same 5-tuples.
#[test]
fn syn_frames_match_craft() {
    let (src_mac, dst_mac) = ([2, 0, 0, 0, 0, 0xaa], [2, 0, 0, 0, 0, 0xbb]);
    let vip: Ipv4Addr = VIP.parse().unwrap();
    let frames = SynFrames::new(src_mac, dst_mac, vip);
    let mut rng = 0x5eed_u64;
    let mut out = [0u8; 128];
    for _ in 0..10_000 {
        let r = next_random(&mut rng);
        let src = Ipv4Addr::from(FLOOD_NET | (r as u32 & FLOOD_MASK));
        let sport = (r >> 32) as u16;
        let n = frames.write(src, sport, &mut out);
        let e = Endpoints {
            src: IpAddr::V4(src),
            sport,
            dst: IpAddr::V4(vip),
            dport: 80,
        };
        let mut want = craft::tcp(&e, true);
        want[0..6].copy_from_slice(&dst_mac);
        want[6..12].copy_from_slice(&src_mac);
        assert_eq!(&out[..n], &want[..], "SYN from {src}:{sport}");
    }
}
