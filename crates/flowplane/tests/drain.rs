//! End-to-end test of draining a backend (`flowplane run --interface`, over AF_PACKET and over
//! AF_XDP): a reload that sets `weight = 0` (AF_PACKET run) or `drain = true` (AF_XDP run) on a
//! backend under load takes it out of the VIP's Maglev table — no new connection reaches it —
//! while the connections the balancer tracks on it keep it; a reload without the setting brings
//! it back.
//!
//! # Topology
//!
//! ```text
//!                 10.0.1.0/24                           10.0.2.0/24, one Linux bridge ("sw")
//!   client ─────────────────────── router ──────┬──────────────┬──────────────────────┐
//!   10.0.1.2                10.0.1.1   10.0.2.1 │              │                      │
//!   (wrk, Rust sockets)     static route        lb 10.0.2.2    b1..b3 10.0.2.11-13
//!                           VIP → 10.0.2.2      flowplane run  nginx ("backend N"),
//!                                               --interface    `flowplane backend
//!                                               eth0 (2 queues) --decap gre`
//! ```
//!
//! The lab is `live_lb.rs`'s (same platform choices: checksum offload off on the client, IPv6
//! off, strict rp_filter on the router, br_netfilter off) with one GRE VIP, 10.100.0.10:80, pool
//! `web` = b1..b3 with HTTP health checks every 200 ms; b2 is the backend drained. As in every
//! test of the lab, the client runs with `net.core.txrehash = 0`, so that each of its connections
//! keeps the receive queue (the worker, whose connection table knows it) it started on even after
//! a retransmission timeout: a connection that moved to the other worker would be balanced anew,
//! by a table without b2, which would reset a connection held on b2 for a reason that is not
//! draining's.
//!
//! # What is asserted (per driver, in one balancer run)
//!
//! 1. Before the drain no backend is draining: `flowplane_backend_draining` 0 for b1..b3,
//!    `flowplane_vip_backends{vip="web"}` configured 3, healthy 3, draining 0.
//! 2. 30 keep-alive connections from the client, one request each, spread over b1..b3 (at least
//!    3 on b2; more are opened if the first 30 put fewer there); each one's backend is the name
//!    in its body.
//! 3. wrk (2 threads, 20 keep-alive connections, 8 s) starts; under its load a reload drains b2.
//!    The reload answers `generation 2` and both workers forward with the new snapshot within
//!    2 s; `flowplane_backend_draining{backend="10.0.2.12"}` is 1 (b1, b3: 0), and the VIP has 3
//!    backends configured, 2 healthy (in its Maglev table), 1 draining. b2 stays healthy and
//!    health checked.
//! 4. While wrk still runs, every held connection answers again from the backend that answered
//!    it before (those on b2 included: they keep it); 100 new connections (each its own TCP
//!    connection, one request, close) all succeed, none on b2, both b1 and b3 serve some. From
//!    the moment both workers forward with the new snapshot on,
//!    `flowplane_backend_connections_total{backend="10.0.2.12"}` does not grow (a connection
//!    whose SYN a worker balanced before it switched was counted before that moment), while
//!    `flowplane_backend_packets_total` of b2 does (its held connections, and wrk's opened before
//!    the drain, still reach it); no tracked connection is re-selected
//!    (`flowplane_conn_lookups_total{result="reselect"}` unchanged).
//! 5. wrk: zero failed requests (socket errors including timeouts, non-2xx). Its connections opened
//!    before the drain may stay on b2; b2 gets no new connection until wrk ends.
//! 6. A reload without the drain (`generation 3`): b2's draining gauge back to 0, the VIP's
//!    backends 3 healthy, 0 draining; the held connections still answer from their backends; of
//!    100 new connections b2 answers some, and the balancer's new-connection counters grow by
//!    exactly what each backend answered. No backend changed health during the run.
//! 7. SIGTERM: exit 0, XDP program detached.
//!
//! Each driver prints one summary line: the spelling of the drain, the held connections (and how
//! many on b2), where the 100 new connections went during the drain and after it, the packets b2
//! was still sent while draining, and wrk's requests and failures.
//!
//! The tests serialise themselves (one lab at a time). Run with `cargo test -p flowplane --test
//! drain -- --nocapture` to see each step. They need root, nginx, wrk and curl, and fail saying so
//! otherwise.

mod common;

use anyhow::{ensure, Result};
use common::*;
use fp_testnet::{Netns, Proc, WrkOptions};
use std::collections::BTreeMap;
use std::net::TcpStream;
use std::time::{Duration, Instant};

const VIP: &str = "10.100.0.10";
/// The backend drained.
const DRAINED: usize = 2;
/// Connections held across the drain, and the least of them on the drained backend.
const HELD: usize = 30;
const HELD_ON_DRAINED: usize = 3;
/// Upper bound on the held connections, if the first `HELD` put too few on the drained backend.
const HELD_MAX: usize = 90;
/// New connections opened during the drain and after it.
const NEW: usize = 100;

/// Health check of pool `web`.
const HC_INTERVAL_MS: u64 = 200;
const HC_TIMEOUT_MS: u64 = 150;
const HC_RISE: u64 = 2;
const HC_FALL: u64 = 2;

const WORKERS: [&str; 2] = ["0", "1"];

/// How the configuration spells b2's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum B2 {
    /// Plain member: `{ address = "10.0.2.12" }`.
    Serving,
    /// `weight = 0`.
    Weight0,
    /// `drain = true` (weight left at its default).
    DrainTrue,
}

impl B2 {
    fn fields(self) -> &'static str {
        match self {
            B2::Serving => "",
            B2::Weight0 => ", weight = 0",
            B2::DrainTrue => ", drain = true",
        }
    }

    fn spelling(self) -> &'static str {
        match self {
            B2::Serving => "no drain",
            B2::Weight0 => "weight = 0",
            B2::DrainTrue => "drain = true",
        }
    }
}

fn config_text(b2: B2) -> String {
    let backends = (1..=3)
        .map(|i| {
            let extra = if i == DRAINED { b2.fields() } else { "" };
            format!("{{ address = \"{}\"{extra} }}", backend_addr(i))
        })
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "[balancer]\naddress = \"{LB}\"\nseed = 0x5eed\nmaglev_size = 65537\n\
         conn_idle_timeout_ms = 120000\n\n\
         [[vip]]\nname = \"web\"\naddress = \"{VIP}\"\nport = 80\nprotocol = \"tcp\"\n\
         pools = [\"web\"]\nencap = \"gre\"\n\n\
         [[pool]]\nname = \"web\"\nbackends = [{backends}]\nhealth = {{ kind = \"http\", \
         path = \"/\", status = 200, body = \"backend\", interval_ms = {HC_INTERVAL_MS}, \
         timeout_ms = {HC_TIMEOUT_MS}, rise = {HC_RISE}, fall = {HC_FALL} }}\n"
    )
}

// ---------------------------------------------------------------------------------------------
// Reading the balancer.

/// A per-backend sample of b`i`.
fn of_backend(m: &Metrics, name: &str, i: usize) -> Result<f64> {
    m.val(name, &[("backend", &backend_addr(i))])
}

fn new_conns(m: &Metrics, i: usize) -> Result<f64> {
    of_backend(m, "flowplane_backend_connections_total", i)
}

fn packets(m: &Metrics, i: usize) -> Result<f64> {
    of_backend(m, "flowplane_backend_packets_total", i)
}

fn health_successes(m: &Metrics, i: usize) -> Result<f64> {
    m.val(
        "flowplane_health_checks_total",
        &[("backend", &backend_addr(i)), ("result", "success")],
    )
}

/// SYNs that found a confirmed entry on their ports and kept its backend: a new connection the
/// client happened to open on the ports of an earlier one, which the backend counters do not count
/// as new.
fn syn_reused(m: &Metrics) -> Result<f64> {
    m.val(
        "flowplane_worker_events_total",
        &[("event", "conn_syn_reused")],
    )
}

fn reselected(m: &Metrics) -> Result<f64> {
    m.val("flowplane_conn_lookups_total", &[("result", "reselect")])
}

/// The draining gauges: b`drained` (if any) draining, the others not; the VIP's three backends
/// configured, in its Maglev table unless draining; every backend healthy.
fn check_draining(m: &Metrics, drained: Option<usize>) -> Result<()> {
    for i in 1..=3 {
        let want = if drained == Some(i) { 1.0 } else { 0.0 };
        let got = of_backend(m, "flowplane_backend_draining", i)?;
        ensure!(
            got == want,
            "flowplane_backend_draining{{backend=\"{}\"}} is {got}, expected {want}",
            backend_addr(i)
        );
        let healthy = of_backend(m, "flowplane_backend_healthy", i)?;
        ensure!(
            healthy == 1.0,
            "flowplane_backend_healthy{{backend=\"{}\"}} is {healthy} (a draining backend stays \
             healthy and health checked)",
            backend_addr(i)
        );
    }
    let d = drained.is_some() as usize;
    let state = |s: &str| m.val("flowplane_vip_backends", &[("vip", "web"), ("state", s)]);
    let (configured, healthy, draining) =
        (state("configured")?, state("healthy")?, state("draining")?);
    ensure!(
        configured == 3.0 && healthy == (3 - d) as f64 && draining == d as f64,
        "flowplane_vip_backends{{vip=\"web\"}}: configured {configured}, healthy {healthy}, \
         draining {draining}; expected 3, {}, {d}",
        3 - d
    );
    Ok(())
}

/// Rewrite the configuration with b2 as `b2`, `POST /reload` and expect `generation`.
fn reload(lab: &Lab, b2: B2, generation: u64) -> Result<()> {
    lab.write_config(&config_text(b2))?;
    let (st, body) = admin(&lab.lb, "POST", "/reload")?;
    ensure!(
        st == 200 && body.trim() == format!("generation {generation}"),
        "reload with b2 {}: {st} {body:?}",
        b2.spelling()
    );
    Ok(())
}

/// Wait until both workers forward with the snapshot in force (each loads it at the start of its
/// next burst, so every packet a worker takes after that is balanced with it); how long it took.
fn wait_workers_current(lb: &Netns, timeout: Duration) -> Result<Duration> {
    let t = Instant::now();
    let snap = Metrics::scrape(lb)?.val("flowplane_snapshot_generation", &[])?;
    wait_for(
        "both workers to forward with the reloaded snapshot",
        timeout,
        || {
            let m = Metrics::scrape(lb)?;
            Ok(WORKERS
                .iter()
                .all(|w| {
                    m.get("flowplane_worker_snapshot_generation", &[("worker", w)])
                        .is_some_and(|g| g >= snap)
                })
                .then_some(()))
        },
    )?;
    Ok(t.elapsed())
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

fn run_driver(driver: &str, drain: B2) {
    let tag = if driver == "af_xdp" {
        "drain-xsk"
    } else {
        "drain-pkt"
    };
    run_lab(
        driver,
        || {
            LabSpec {
                tag,
                tools: &["nginx", "wrk", "curl"],
                vips: &[VIP],
                decap: "gre",
                backend_args: &|_| Vec::new(),
                backends: 3,
                nginx_server: "",
            }
            .build()
        },
        |lab, balancer, t0| scenario(lab, driver, drain, balancer, t0),
    );
}

fn scenario(
    lab: &Lab,
    driver: &str,
    drain: B2,
    balancer: &mut Option<Proc>,
    t0: Instant,
) -> Result<()> {
    let lb = &lab.lb;
    let client = &lab.client;
    let b2 = body_of(DRAINED);
    let b2_addr = backend_addr(DRAINED);
    let others = [1, 3];

    // ---- 1. start: nothing draining --------------------------------------------------------
    lab.write_config(&config_text(B2::Serving))?;
    let fp = start_balancer(lab, driver, 3, balancer, t0)?;
    check_draining(&Metrics::scrape(lb)?, None)?;
    step(
        "no backend draining: VIP web has 3 backends in its table",
        t0,
    );

    // ---- 2. connections held across the drain ----------------------------------------------
    let mut held = hold_connections(client, VIP, HELD)?;
    while held.iter().filter(|(_, b)| *b == b2).count() < HELD_ON_DRAINED && held.len() < HELD_MAX {
        held.extend(hold_connections(client, VIP, 10)?);
    }
    let before = spread(&held);
    let on_b2 = before.get(b2.as_str()).copied().unwrap_or(0);
    println!("    {} held connections: {before:?}", held.len());
    ensure!(
        before.len() == 3 && on_b2 >= HELD_ON_DRAINED,
        "{} connections should reach b1..b3, at least {HELD_ON_DRAINED} of them b2: {before:?}",
        held.len()
    );
    step(
        &format!("{} keep-alive connections held, {on_b2} on b2", held.len()),
        t0,
    );

    // ---- 3. wrk, and the drain under its load ----------------------------------------------
    let wrk_opts = WrkOptions {
        threads: 2,
        connections: 20,
        duration: Duration::from_secs(8),
        timeout: Duration::from_secs(2),
    };
    let m0 = Metrics::scrape(lb)?;
    let wrk = client.wrk_spawn(&format!("http://{VIP}/"), &wrk_opts)?;
    let pk0 = m0.val("flowplane_vip_packets_total", &[("vip", "web")])?;
    wait_vip_packets(lb, "wrk's load to reach the balancer", "web", pk0, 500.0)?;
    let t_drain = Instant::now();
    reload(lab, drain, 2)?;
    let acked = t_drain.elapsed();
    // From here on every SYN is balanced by the table without b2: a connection whose SYN a
    // worker balanced just before it switched was counted before this scrape.
    let switched = wait_workers_current(lb, Duration::from_secs(2))?;
    let m1 = Metrics::scrape(lb)?;
    println!(
        "    reload ({}) acknowledged in {acked:?}, both workers on the new snapshot {switched:?} \
         later; Maglev entries moved {}",
        drain.spelling(),
        m1.val("flowplane_maglev_last_entries_moved", &[("vip", "web")])?
    );
    check_draining(&m1, Some(DRAINED))?;
    step(
        &format!(
            "b2 draining ({}): gauge 1, VIP web 2 healthy + 1 draining",
            drain.spelling()
        ),
        t0,
    );

    // ---- 4. during the drain: held connections keep their backend, new ones avoid b2 -------
    ask_held(client, VIP, &mut held, "while b2 drains")?;
    let during = new_connections(client, VIP, NEW)?;
    let m2 = Metrics::scrape(lb)?;
    let wrk_running = wrk.is_running();
    println!(
        "    during the drain: {NEW} new connections {:?}, {} failed{}; wrk still running: \
         {wrk_running}",
        during.served,
        during.failures.len(),
        if during.failures.is_empty() {
            String::new()
        } else {
            format!(" {:?}", during.failures)
        }
    );
    ensure!(
        during.failures.is_empty() && during.total() == NEW,
        "{NEW} new connections while b2 drains: {} failed: {:?}",
        during.failures.len(),
        during.failures
    );
    ensure!(
        !during.served.contains_key(&b2),
        "b2 is draining but answered {} of {NEW} new connections: {:?}",
        during.served[&b2],
        during.served
    );
    ensure!(
        others
            .iter()
            .all(|&i| during.served.contains_key(&body_of(i))),
        "{NEW} new connections while b2 drains should reach b1 and b3: {:?}",
        during.served
    );
    let new_b2 = new_conns(&m2, DRAINED)? - new_conns(&m1, DRAINED)?;
    ensure!(
        new_b2 == 0.0,
        "flowplane_backend_connections_total{{backend=\"{b2_addr}\"}} grew by {new_b2} while b2 \
         drains (both workers had switched to the snapshot without it)"
    );
    let new_others: f64 = others
        .iter()
        .map(|&i| Ok(new_conns(&m2, i)? - new_conns(&m1, i)?))
        .sum::<Result<f64>>()?;
    let reused = syn_reused(&m2)? - syn_reused(&m1)?;
    ensure!(
        new_others + reused >= NEW as f64,
        "{NEW} new connections while b2 drains, but b1 and b3 counted only {new_others} new \
         connections ({reused} SYNs on reused ports)"
    );
    let b2_packets = packets(&m2, DRAINED)? - packets(&m1, DRAINED)?;
    ensure!(
        b2_packets >= on_b2 as f64,
        "b2 was sent only {b2_packets} packets while draining, though its {on_b2} held \
         connections each sent a request"
    );
    ensure!(
        reselected(&m2)? == reselected(&m1)?,
        "{} tracked connections re-selected while b2 drains (a draining backend stays a member \
         of the VIP for its connections)",
        reselected(&m2)? - reselected(&m1)?
    );
    step(
        &format!(
            "during the drain: {} held connections on their backends, {NEW} new ones on b1/b3, \
             b2 no new connection, {b2_packets} packets",
            held.len()
        ),
        t0,
    );

    // ---- 5. wrk ---------------------------------------------------------------------------
    let w = client.wrk_finish(&wrk, &wrk_opts)?;
    let m3 = Metrics::scrape(lb)?;
    println!(
        "    wrk across the drain: {} requests, {:.0}/s, failed {} ({w:?})",
        w.requests,
        w.requests_per_sec,
        w.errors()
    );
    ensure!(w.errors() == 0, "wrk across the drain of b2: {w:?}");
    let new_b2 = new_conns(&m3, DRAINED)? - new_conns(&m1, DRAINED)?;
    ensure!(
        new_b2 == 0.0,
        "flowplane_backend_connections_total{{backend=\"{b2_addr}\"}} grew by {new_b2} between \
         the drain and wrk's end"
    );
    let b2_packets = packets(&m3, DRAINED)? - packets(&m1, DRAINED)?;
    let checked = health_successes(&m3, DRAINED)? - health_successes(&m1, DRAINED)?;
    ensure!(checked > 0.0, "b2 was not health checked while draining");
    step("wrk: 0 failed requests; b2 still no new connection", t0);

    // ---- 6. undrain ----------------------------------------------------------------------
    reload(lab, B2::Serving, 3)?;
    let m4 = Metrics::scrape(lb)?;
    check_draining(&m4, None)?;
    ask_held(client, VIP, &mut held, "after the drain ended")?;
    let m5 = Metrics::scrape(lb)?;
    let after = new_connections(client, VIP, NEW)?;
    let m6 = Metrics::scrape(lb)?;
    println!(
        "    after the drain: {NEW} new connections {:?}, {} failed",
        after.served,
        after.failures.len()
    );
    ensure!(
        after.failures.is_empty() && after.total() == NEW,
        "{NEW} new connections after the drain: {} failed: {:?}",
        after.failures.len(),
        after.failures
    );
    ensure!(
        after.served.get(&b2).copied().unwrap_or(0) > 0,
        "b2 no longer drains, but none of {NEW} new connections reached it: {:?}",
        after.served
    );
    // Each new connection is counted once by the backend that answered it, unless the client
    // opened it on the ports of an earlier connection whose entry is still live: then the SYN
    // keeps that entry's backend and is counted as a reused entry instead.
    let reused = syn_reused(&m6)? - syn_reused(&m5)?;
    let mut uncounted = 0.0;
    for i in 1..=3 {
        let served = after.served.get(&body_of(i)).copied().unwrap_or(0) as f64;
        let counted = new_conns(&m6, i)? - new_conns(&m5, i)?;
        ensure!(
            counted <= served,
            "b{i} answered {served} of {NEW} new connections after the drain, \
             flowplane_backend_connections_total{{backend=\"{}\"}} grew by {counted}",
            backend_addr(i)
        );
        uncounted += served - counted;
    }
    ensure!(
        uncounted == reused,
        "{uncounted} of {NEW} new connections after the drain were not counted by the backend \
         that answered them, but {reused} SYNs reused a live entry"
    );
    for i in 1..=3 {
        let n = of_backend(&m6, "flowplane_health_transitions_total", i)?;
        ensure!(
            n == 0.0,
            "backend {} changed health {n} times during the test",
            backend_addr(i)
        );
    }
    step("drain ended: b2 takes new connections again", t0);
    println!(
        "drain {driver} ({}): {} held connections ({on_b2} on b2) kept their backend; {NEW} new \
         connections during the drain {:?}, after it {:?}; b2 sent {b2_packets} packets and 0 new \
         connections while draining; wrk {} requests, {} failed",
        drain.spelling(),
        held.len(),
        during.served,
        after.served,
        w.requests,
        w.errors()
    );

    // ---- 7. shutdown ---------------------------------------------------------------------
    drop(held);
    stop_balancer(lab, &fp, t0)
}

#[test]
fn drain_af_packet() {
    run_driver("af_packet", B2::Weight0);
}

#[test]
fn drain_af_xdp() {
    run_driver("af_xdp", B2::DrainTrue);
}
