//! End-to-end test of QUIC connection-ID routing through the live load balancer (`flowplane run
//! --interface`, over AF_PACKET and over AF_XDP), with a real QUIC client and servers (aioquic).
//!
//! The lab is `live_lb.rs`'s (client → router → one-armed balancer on a bridge, backends b1..b3
//! prepared by `flowplane backend --decap gre`). Every backend runs `tests/quic/peer.py server`:
//! an aioquic server on both VIPs (UDP port 4433, bound to the VIP so that its answers leave from
//! it, direct to the client) whose connection IDs carry the backend's server id `i` in bytes 1–2,
//! and which answers each request with its name. Two VIPs share the three backends:
//!
//! | VIP | `quic` | what a client that changes its source port should see |
//! |---|---|---|
//! | 10.100.0.40:4433/udp | `true`, backends `quic_id = 1..3` | the same server on every port |
//! | 10.100.0.41:4433/udp | off (the control) | its packets hashed by the new 5-tuple, to any server |
//!
//! # What is asserted (per driver, in one balancer run)
//!
//! 1. QUIC VIP: the client (`peer.py client`, aioquic's sans-I/O connection over a plain UDP
//!    socket) opens 12 connections; on each it sends a request, then 6 times moves to a new UDP
//!    socket (a new source port, as a NAT rebinding gives; every other time with a new connection
//!    ID from the server's NEW_CONNECTION_ID frames) and sends another: every request on every
//!    port is answered (none times out), and by the server that answered the connection's first
//!    request. The connections reach at least two servers (all on one by chance: 3^-11). The
//!    balancer counted packets routed by connection ID
//!    (`flowplane_quic_cid_total{result="routed"}`).
//! 2. Control VIP: the same client; at least one connection loses its server after a port change
//!    (a timeout or another server's answer) — what the QUIC VIP prevents, and the sign that the
//!    port changes really reached other servers by hash (probability of the contrary with 72
//!    changes over 3 servers: 3^-72 per driver run).
//! 3. SIGTERM: exit 0.
//!
//! The tests serialise themselves (one lab at a time). Run with `cargo test -p flowplane --test
//! quic -- --nocapture` to see each step. They need root, nginx, curl, and aioquic in the
//! project's Python environment (`target/py`, made by `scripts/deps.sh`), and fail saying so
//! otherwise.

mod common;

use anyhow::{bail, ensure, Context, Result};
use common::*;
use fp_testnet::Proc;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

const QUIC_VIP: &str = "10.100.0.40";
const PLAIN_VIP: &str = "10.100.0.41";
const PORT: &str = "4433";
const CONNECTIONS: usize = 12;
const REBINDS: usize = 6;

fn python() -> Result<PathBuf> {
    let p = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../target/py/bin/python3"
    ));
    ensure!(
        p.exists(),
        "{} is missing: scripts/deps.sh makes the Python environment with aioquic",
        p.display()
    );
    Ok(p)
}

fn peer() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/quic/peer.py"))
}

fn config_text() -> String {
    let backends = (1..=3)
        .map(|i| format!("{{ address = \"{}\", quic_id = {i} }}", backend_addr(i)))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "[balancer]\naddress = \"{LB}\"\nseed = 0x5eed\nconn_table_capacity = 65536\n\n\
         [[vip]]\nname = \"quic\"\naddress = \"{QUIC_VIP}\"\nport = {PORT}\nprotocol = \"udp\"\n\
         pools = [\"q\"]\nquic = true\n\n\
         [[vip]]\nname = \"plain\"\naddress = \"{PLAIN_VIP}\"\nport = {PORT}\nprotocol = \"udp\"\n\
         pools = [\"q\"]\n\n\
         [[pool]]\nname = \"q\"\nbackends = [{backends}]\n"
    )
}

fn build(tag: &str) -> Result<Lab> {
    LabSpec {
        tag,
        tools: &["nginx", "curl"],
        vips: &[QUIC_VIP, PLAIN_VIP],
        decap: "gre",
        backend_args: &|_| Vec::new(),
        backends: 3,
        nginx_server: "",
    }
    .build()
}

/// One request of the client: connection, step (0 = before any port change), source port, and
/// the server that answered (`None`: timed out).
#[derive(Debug)]
struct Answer {
    conn: usize,
    step: usize,
    port: u16,
    server: Option<String>,
}

fn parse(stdout: &str) -> Result<Vec<Answer>> {
    stdout
        .lines()
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            match w.as_slice() {
                ["conn", c, "step", s, "port", p, "answer", rest @ ..] => Ok(Answer {
                    conn: c.parse()?,
                    step: s.parse()?,
                    port: p.parse()?,
                    server: Some(rest.join(" ")),
                }),
                ["conn", c, "step", s, "port", p, "timeout"] => Ok(Answer {
                    conn: c.parse()?,
                    step: s.parse()?,
                    port: p.parse()?,
                    server: None,
                }),
                _ => bail!("unexpected client output line {l:?}"),
            }
        })
        .collect()
}

/// Run the client against `vip`; its answers grouped by connection.
fn client(lab: &Lab, vip: &str, timeout_s: &str) -> Result<BTreeMap<usize, Vec<Answer>>> {
    let py = python()?;
    let conns = CONNECTIONS.to_string();
    let rebinds = REBINDS.to_string();
    let out = lab
        .client
        .cmd([
            py.to_string_lossy().as_ref(),
            peer().to_string_lossy().as_ref(),
            "client",
            "--vip",
            vip,
            "--port",
            PORT,
            "--connections",
            &conns,
            "--rebinds",
            &rebinds,
            "--timeout",
            timeout_s,
        ])
        .timeout(Duration::from_secs(120))
        .run()
        .context("peer.py client")?;
    let mut by_conn: BTreeMap<usize, Vec<Answer>> = BTreeMap::new();
    for a in parse(&out.stdout)? {
        by_conn.entry(a.conn).or_default().push(a);
    }
    Ok(by_conn)
}

fn describe(answers: &[Answer]) -> String {
    answers
        .iter()
        .map(|a| format!("{}@{}", a.server.as_deref().unwrap_or("timeout"), a.port))
        .collect::<Vec<_>>()
        .join(" ")
}

fn scenario(lab: &Lab, driver: &str, balancer: &mut Option<Proc>, t0: Instant) -> Result<()> {
    let py = python()?;
    lab.write_config(&config_text())?;
    let fp = start_balancer(lab, driver, 3, balancer, t0)?;
    let mut servers = Vec::new();
    for b in &lab.backends {
        let name = format!("backend {}", b.i);
        let id = b.i.to_string();
        let p =
            b.ns.cmd([
                py.to_string_lossy().as_ref(),
                peer().to_string_lossy().as_ref(),
                "server",
                "--vip",
                QUIC_VIP,
                "--vip",
                PLAIN_VIP,
                "--port",
                PORT,
                "--id",
                &id,
                "--name",
                &name,
            ])
            .spawn()?;
        p.wait_log("listening", Duration::from_secs(20))
            .with_context(|| format!("QUIC server on b{}", b.i))?;
        servers.push(p);
    }
    step("QUIC servers listening on every backend", t0);
    let m0 = Metrics::scrape(&lab.lb)?;

    // ---- 1. the QUIC VIP: every port change keeps the server -----------------------------------
    let mut failures = Vec::new();
    let quic = client(lab, QUIC_VIP, "3")?;
    let mut first_servers = BTreeSet::new();
    for (k, answers) in &quic {
        let first = answers.first().and_then(|a| a.server.clone());
        let ports: BTreeSet<u16> = answers.iter().map(|a| a.port).collect();
        let ok = answers.len() == REBINDS + 1
            && answers.iter().enumerate().all(|(i, a)| a.step == i)
            && answers
                .iter()
                .all(|a| a.server.is_some() && a.server == first)
            && ports.len() == REBINDS + 1;
        println!(
            "{driver}: QUIC VIP connection {k}: {} {}",
            describe(answers),
            if ok { "ok" } else { "FAILED" }
        );
        if !ok {
            failures.push(format!(
                "QUIC VIP connection {k}: expected {} answers from one server on {} ports, got: {}",
                REBINDS + 1,
                REBINDS + 1,
                describe(answers)
            ));
        }
        first_servers.extend(first);
    }
    if quic.len() != CONNECTIONS {
        failures.push(format!(
            "QUIC VIP: {} of {CONNECTIONS} connections reported",
            quic.len()
        ));
    }
    if first_servers.len() < 2 {
        failures.push(format!(
            "QUIC VIP: {CONNECTIONS} connections all went to {first_servers:?}"
        ));
    }
    let m1 = Metrics::scrape(&lab.lb)?;
    let routed = m1.val("flowplane_quic_cid_total", &[("result", "routed")])?
        - m0.val("flowplane_quic_cid_total", &[("result", "routed")])?;
    println!("{driver}: {routed} packets routed by connection ID");
    if routed <= 0.0 {
        failures.push("no packet routed by connection ID".into());
    }
    step("QUIC VIP: port changes kept their server", t0);

    // ---- 2. the control: without connection-ID routing, port changes lose the server ----------
    let plain = client(lab, PLAIN_VIP, "1")?;
    let lost: Vec<usize> = plain
        .iter()
        .filter(|(_, answers)| {
            let first = answers.first().and_then(|a| a.server.clone());
            answers
                .iter()
                .any(|a| a.server.is_none() || a.server != first)
        })
        .map(|(k, _)| *k)
        .collect();
    for (k, answers) in &plain {
        println!(
            "{driver}: control VIP connection {k}: {}",
            describe(answers)
        );
    }
    if lost.is_empty() {
        failures.push(format!(
            "control VIP (no quic): all {} connections kept their server across {REBINDS} port \
             changes each, so the QUIC VIP's result shows nothing",
            plain.len()
        ));
    }
    step("control VIP: port changes lost the server", t0);

    drop(servers);
    if let Err(e) = stop_balancer(lab, &fp, t0) {
        failures.push(format!("shutdown: {e:#}"));
    }
    none_failed(&failures)
}

fn run_driver(driver: &str) {
    run_lab(
        driver,
        || build(&lab_tag("quic", driver)),
        |lab, balancer, t0| scenario(lab, driver, balancer, t0),
    );
}

#[test]
fn quic_af_packet() {
    run_driver("af_packet");
}

#[test]
fn quic_af_xdp() {
    run_driver("af_xdp");
}
