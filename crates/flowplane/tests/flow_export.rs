//! End-to-end test of the balancer's IPFIX export (`[ipfix]`), over AF_PACKET and over AF_XDP,
//! read back by a real collector: nfdump's `nfcapd` listens in the balancer's namespace and
//! `nfdump` decodes what it stored.
//!
//! # Topology
//!
//! `drain.rs`'s lab: client 10.0.1.2 → router → the balancer 10.0.2.2 (`flowplane run
//! --interface eth0`, two workers) → backends b1..b3 on a bridge, GRE VIP 10.100.0.10:80, direct
//! server return. `nfcapd` runs in the balancer's namespace on 127.0.0.1:4739, the collector of
//! `[ipfix]`; `conn_idle_timeout_ms` is 3 s so that connections end during the test, and one
//! packet in 10 is sampled.
//!
//! # What is asserted (per driver)
//!
//! 1. 30 connections from curl, each from its own fixed client port, each answered by a backend
//!    (its body names it); then wrk (10 keep-alive connections, 2 s) with no error.
//! 2. Every connection ends (idle timeout): the balancer's `flowplane_ipfix_records_total`
//!    counts as many ended records as created ones; nothing dropped
//!    (`flowplane_ipfix_events_dropped_total` 0), no message refused.
//! 3. After SIGTERM (the exporter sends what the workers queued) nfdump reads back, for each
//!    curl connection, exactly one created record (no end reason) and one ended record (end
//!    reason 1, idle timeout, starting when the created one did), both with the client's
//!    address and port, the VIP and port 80, TCP, and the backend that answered as the next hop.
//! 4. nfdump's counts equal the balancer's: created, ended, and sampled records (one packet
//!    each, to the VIP, through one of the three backends); the sampled records are one in 10 of
//!    the VIP's packets, within one per worker.
//!
//! Needs root, nginx, wrk, curl and nfdump (`scripts/deps.sh`), and fails saying so otherwise.

mod common;

use anyhow::{ensure, Context, Result};
use common::*;
use fp_testnet::{Netns, Proc, WrkOptions};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const VIP: &str = "10.100.0.10";
const COLLECTOR: &str = "127.0.0.1:4739";
const CONNS: u16 = 30;
const FIRST_PORT: u16 = 41_000;
const ONE_IN: f64 = 10.0;
const IDLE_MS: u64 = 3000;

fn config_text() -> String {
    let backends = (1..=3)
        .map(|i| format!("{{ address = \"{}\" }}", backend_addr(i)))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "[balancer]\naddress = \"{LB}\"\nseed = 0x5eed\nmaglev_size = 65537\n\
         conn_idle_timeout_ms = {IDLE_MS}\nsyn_timeout_ms = 1000\n\n\
         [[vip]]\nname = \"web\"\naddress = \"{VIP}\"\nport = 80\nprotocol = \"tcp\"\n\
         pools = [\"web\"]\nencap = \"gre\"\n\n\
         [[pool]]\nname = \"web\"\nbackends = [{backends}]\nhealth = {{ kind = \"http\", \
         path = \"/\", status = 200, body = \"backend\", interval_ms = 500 }}\n\n\
         [ipfix]\ncollectors = [\"{COLLECTOR}\"]\nsample_one_in = {ONE_IN}\n"
    )
}

/// nfcapd in `ns`, storing into `dir`; listening once its current file exists.
fn start_nfcapd(ns: &Netns, dir: &Path) -> Result<Proc> {
    std::fs::create_dir_all(dir)?;
    let (host, port) = COLLECTOR.split_once(':').expect("address:port");
    let d = dir.to_string_lossy().into_owned();
    let p = ns
        .cmd(["nfcapd", "-b", host, "-p", port, "-t", "3600", "-w", &d])
        .spawn()
        .context("nfcapd (Debian package nfdump; scripts/deps.sh installs it)")?;
    wait_for("nfcapd to listen", Duration::from_secs(10), || {
        Ok(std::fs::read_dir(dir)?
            .flatten()
            .any(|e| e.file_name().to_string_lossy().contains("current"))
            .then_some(()))
    })?;
    Ok(p)
}

type Rec = HashMap<&'static str, String>;

fn nfdump(dir: &Path) -> Result<Vec<Rec>> {
    Ok(fp_testnet::collectors::nfdump_records(
        dir,
        &fp_testnet::collectors::FLOW_FIELDS,
    )?)
}

fn run_driver(driver: &str) {
    let tag = if driver == "af_xdp" {
        "ipfix-xsk"
    } else {
        "ipfix-pkt"
    };
    run_lab(
        driver,
        || {
            LabSpec {
                tag,
                tools: &["nginx", "wrk", "curl", "nfcapd", "nfdump"],
                vips: &[VIP],
                decap: "gre",
                backend_args: &|_| Vec::new(),
                backends: 3,
                nginx_server: "",
            }
            .build()
        },
        |lab, balancer, t0| scenario(lab, driver, balancer, t0),
    );
}

fn scenario(lab: &Lab, driver: &str, balancer: &mut Option<Proc>, t0: Instant) -> Result<()> {
    let (lb, client) = (&lab.lb, &lab.client);
    let dir: PathBuf = state_dir(lab).with_file_name("flows");
    let nfcapd = start_nfcapd(lb, &dir)?;
    step("nfcapd listening in the balancer's namespace", t0);
    lab.write_config(&config_text())?;
    let fp = start_balancer(lab, driver, 3, balancer, t0)?;

    // ---- 1. known connections, then wrk ------------------------------------------------------
    let mut answered: HashMap<u16, usize> = HashMap::new();
    for k in 0..CONNS {
        let port = FIRST_PORT + k;
        let (p, url) = (port.to_string(), format!("http://{VIP}/"));
        let out = client
            .cmd(["curl", "-sS", "-m", "5", "--local-port", &p, &url])
            .run()
            .with_context(|| format!("curl from port {port}"))?;
        let body = out.stdout.trim().to_string();
        let i = (1..=3)
            .find(|&i| body_of(i) == body)
            .with_context(|| format!("curl from port {port} answered {body:?}"))?;
        answered.insert(port, i);
    }
    step(&format!("{CONNS} curl connections answered"), t0);
    let w = client.wrk(
        &format!("http://{VIP}/"),
        &WrkOptions {
            threads: 1,
            connections: 10,
            duration: Duration::from_secs(2),
            timeout: Duration::from_secs(2),
        },
    )?;
    ensure!(
        w.errors() == 0 && w.requests > 0,
        "wrk: {} requests, {} errors",
        w.requests,
        w.errors()
    );
    step(&format!("wrk: {} requests, no error", w.requests), t0);

    // ---- 2. every connection ends -------------------------------------------------------------
    let kind = |m: &Metrics, k: &str| m.val("flowplane_ipfix_records_total", &[("kind", k)]);
    let m = wait_for(
        "every connection's entry to expire (ended records = created)",
        Duration::from_secs(20),
        || {
            let m = Metrics::scrape(lb)?;
            let (c, e) = (kind(&m, "created")?, kind(&m, "ended")?);
            Ok((c >= CONNS as f64 && e >= c).then_some(m))
        },
    )?;
    let (created, ended, sampled) = (
        kind(&m, "created")?,
        kind(&m, "ended")?,
        kind(&m, "sampled")?,
    );
    ensure!(m.val("flowplane_ipfix_events_dropped_total", &[])? == 0.0);
    ensure!(m.val("flowplane_ipfix_messages_total", &[("result", "failed")])? == 0.0);
    let vip_packets = m.val("flowplane_vip_packets_total", &[("vip", "web")])?;
    step(
        &format!("{created} created, {ended} ended, {sampled} sampled records sent"),
        t0,
    );

    // ---- 3. what the collector stored ---------------------------------------------------------
    stop_balancer(lab, &fp, t0)?;
    nfcapd.signal(libc::SIGTERM);
    nfcapd.wait(Duration::from_secs(10))?;
    let recs = nfdump(&dir)?;
    let vip_rec = |r: &Rec| r["da"] == VIP && r["dp"] == "80" && r["pr"] == "6";
    ensure!(
        recs.iter().all(vip_rec),
        "a record not of the VIP: {recs:?}"
    );
    for (port, i) in &answered {
        let mine: Vec<&Rec> = recs
            .iter()
            .filter(|r| r["sa"] == CLIENT && r["sp"] == port.to_string() && r["pkt"] == "0")
            .collect();
        let c: Vec<&&Rec> = mine.iter().filter(|r| r["reason"] == "0").collect();
        let e: Vec<&&Rec> = mine.iter().filter(|r| r["reason"] == "1").collect();
        ensure!(
            c.len() == 1 && e.len() == 1 && mine.len() == 2,
            "connection from port {port}: expected one created and one ended record, got {mine:?}"
        );
        for r in &mine {
            ensure!(
                r["nh"] == backend_addr(*i),
                "connection from port {port} was answered by b{i}, its record names {}",
                r["nh"]
            );
        }
        ensure!(e[0]["start"] == c[0]["start"], "{mine:?}");
    }
    let count = |f: &dyn Fn(&Rec) -> bool| recs.iter().filter(|r| f(r)).count() as f64;
    let (n_created, n_ended, n_sampled) = (
        count(&|r| r["pkt"] == "0" && r["reason"] == "0"),
        count(&|r| r["pkt"] == "0" && r["reason"] == "1"),
        count(&|r| r["pkt"] == "1"),
    );
    ensure!(
        (n_created, n_ended, n_sampled) == (created, ended, sampled),
        "nfdump read {n_created} created, {n_ended} ended, {n_sampled} sampled records; the \
         balancer sent {created}, {ended}, {sampled}"
    );
    let backends: Vec<String> = (1..=3).map(backend_addr).collect();
    ensure!(
        recs.iter()
            .filter(|r| r["pkt"] == "1")
            .all(|r| backends.contains(&r["nh"])),
        "a sampled packet without one of the backends"
    );
    let expect = vip_packets / ONE_IN;
    ensure!(
        (sampled - expect).abs() <= 2.0,
        "{sampled} sampled records of {vip_packets} VIP packets at 1 in {ONE_IN}"
    );
    step(
        &format!(
            "nfdump: {n_created} created, {n_ended} ended, {n_sampled} sampled records ({vip_packets} \
             VIP packets); each curl connection's pair with its backend"
        ),
        t0,
    );
    println!(
        "flow export {driver}: {CONNS} curl connections each with a created and an ended record \
         naming its backend; {n_created} created, {n_ended} ended, {n_sampled} sampled records \
         (1 in {ONE_IN} of {vip_packets} packets) read back by nfdump, as the balancer counted"
    );
    Ok(())
}

#[test]
fn flow_export_af_packet() {
    run_driver("af_packet");
}

#[test]
fn flow_export_af_xdp() {
    run_driver("af_xdp");
}
