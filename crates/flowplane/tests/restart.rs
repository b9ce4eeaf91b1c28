//! End-to-end test of restarting the live load balancer (`flowplane run --interface`, over
//! AF_PACKET and over AF_XDP) with a configuration that gives no `balancer.seed`: the seed is
//! kept in its state file, the connection entries are carried to the next start, and second
//! chance names earlier backends, so established connections keep their backends through
//! restarts with and without a changed backend set.
//!
//! The lab is `live_lb.rs`'s (client, router, balancer, three nginx backends behind GRE; VIP
//! 10.100.0.10:80). The configuration names `balancer.seed_file` in the lab's directory.
//!
//! # What is asserted (per driver)
//!
//! 1. At the first start the balancer draws the seed and writes the state file (mode 0600, 16
//!    hexadecimal digits); `flowplane check` names the file and never prints the value.
//! 2. 60 keep-alive connections are opened (one request each, the backend that answered noted).
//! 3. SIGTERM, start again: the balancer reads the same seed (the file is unchanged, the log says
//!    it was read), starts warm with the 60 connection entries carried, and every held connection
//!    answers its next request from the same backend.
//! 4. The control: stop, remove the seed's file and the carried entries (as after a crash), start
//!    again (a new seed): at least a quarter of the held connections are reset or answered by
//!    another backend — what every restart did before the seed was kept.
//! 5. A warm restart that changes the backend set: 60 new connections on backends 1-3; restart
//!    with backend 1's weight doubled and backend 4 added (an upgrade rolled out with a
//!    configuration change). The successor maps the carried entries onto its backends by address:
//!    every held connection answers from its backend, without second chance.
//! 6. Second chance across a cold restart that changes the backend set: 60 new connections; stop,
//!    remove the carried entries, restart with backend 2's weight tripled. The successor has no
//!    entries and its Maglev table moves a share of the flows, but it read its predecessor's
//!    backend sets from `balancer.state_dir`: the moved flows' packets name their earlier
//!    backends, the backends' tc programs find no socket and forward them there, and every held
//!    connection answers from its backend. Both sides count it (`second_chance_total{event="sent"}`
//!    on the balancer, "forwarded to the named backend" in `flowplane backend --status`).
//! 7. The control: the same cold restart with `second_chance = false` on the VIP loses connections
//!    (the number is printed).
//!
//! The overlapped handover (`handover_keeps_connections_*`): a second `flowplane run` with the
//! same state directory started while the first forwards takes over from it (checkpoint while
//! it forwards, cut-over, delta), with new connections opened and requests sent on earlier ones
//! all along:
//!
//! 1. 60 connections held; the successor starts with the same configuration: the predecessor
//!    logs that it handed over and exits 0, the successor starts warm by handover
//!    (`flowplane_takeover{kind="handover"}` 1, the gap printed); every held connection and every
//!    connection opened during the handover answers from its backend, and no request failed.
//! 2. The same with a changed configuration (backend 1's weight doubled, backend 4 added): the
//!    entries are carried by backend address, and again nothing breaks.
//!
//! Needs root, nginx, curl and iproute2; fails saying so otherwise.

mod common;

use anyhow::{ensure, Context, Result};
use common::*;
use fp_testnet::Proc;
use std::os::unix::fs::MetadataExt;
use std::time::Instant;

const VIP: &str = "10.100.0.10";
const HELD: usize = 60;
const BIN: &str = env!("CARGO_BIN_EXE_flowplane");

/// The lab's configuration: backends (index, weight), the seed's file, the state directory,
/// second chance on or off.
fn config_text(
    seed_file: &std::path::Path,
    backends: &[(usize, u32)],
    second_chance: bool,
) -> String {
    let list = backends
        .iter()
        .map(|&(i, w)| format!("{{ address = \"{}\", weight = {w} }}", backend_addr(i)))
        .collect::<Vec<_>>()
        .join(", ");
    let state_dir = seed_file.parent().expect("in a directory");
    format!(
        "[balancer]\naddress = \"{LB}\"\nseed_file = {:?}\nstate_dir = {:?}\n\
         maglev_size = 65537\nconn_idle_timeout_ms = 120000\n\n\
         [[vip]]\nname = \"web\"\naddress = \"{VIP}\"\nport = 80\nprotocol = \"tcp\"\n\
         pools = [\"web\"]\nencap = \"gre\"\nsecond_chance = {second_chance}\n\n\
         [[pool]]\nname = \"web\"\nbackends = [{list}]\nhealth = {{ kind = \"http\", \
         path = \"/\", status = 200, body = \"backend\", interval_ms = 200, timeout_ms = 150, \
         rise = 2, fall = 2 }}\n",
        seed_file.display().to_string(),
        state_dir.display().to_string(),
    )
}

const THREE: &[(usize, u32)] = &[(1, 1), (2, 1), (3, 1)];
/// Backend 1's weight doubled and backend 4 added.
const CHANGED: &[(usize, u32)] = &[(1, 2), (2, 1), (3, 1), (4, 1)];
/// Then backend 2's weight tripled.
const CHANGED_AGAIN: &[(usize, u32)] = &[(1, 2), (2, 3), (3, 1), (4, 1)];

/// Packets the backends' tc programs forwarded to a named backend (`flowplane backend --status`).
fn backends_forwarded(lab: &Lab) -> Result<u64> {
    let mut n = 0;
    for b in &lab.backends {
        let state = lab
            .net
            .dir(&format!("backend-b{}", b.i))?
            .join("state.json");
        n += second_chance_forwarded(&b.ns, &state)?;
    }
    Ok(n)
}

/// One more request on each held connection: how many were answered by their backend.
fn still_on_their_backend(lab: &Lab, held: &mut [(std::net::TcpStream, String)]) -> Result<usize> {
    Ok(lab.client.enter(|| {
        held.iter_mut()
            .filter_map(|(s, was)| match request(s, VIP, false) {
                Ok((200, body)) if body.trim() == was => Some(()),
                _ => None,
            })
            .count()
    })?)
}

fn scenario(lab: &Lab, driver: &str, balancer: &mut Option<Proc>, t0: Instant) -> Result<()> {
    let dir = lab
        .config
        .parent()
        .context("the lab's directory")?
        .to_path_buf();
    let seed_file = dir.join("state/seed");
    lab.write_config(&config_text(&seed_file, THREE, true))?;
    let check = lab
        .lb
        .cmd([BIN, "check", "--config", &lab.config.to_string_lossy()])
        .run()?
        .stdout;
    ensure!(
        check.contains(&format!("kept in the state file {}", seed_file.display())),
        "flowplane check does not name the state file: {check}"
    );

    // 1. First start: the seed is drawn and kept.
    let fp = start_balancer(lab, driver, 3, balancer, t0)?;
    ensure!(
        fp.log().contains("hash seed drawn and kept in"),
        "no log line about the new seed"
    );
    let seed = std::fs::read_to_string(&seed_file)
        .with_context(|| format!("reading {}", seed_file.display()))?;
    let mode = std::fs::metadata(&seed_file)?.mode() & 0o777;
    ensure!(
        seed.trim().len() == 16 && u64::from_str_radix(seed.trim(), 16).is_ok(),
        "the state file does not hold a seed"
    );
    ensure!(mode == 0o600, "the state file's mode is {mode:o}, not 600");
    ensure!(
        !check.contains(seed.trim()) && !fp.log().contains(seed.trim()),
        "the seed's value was printed"
    );
    step("seed drawn and kept (mode 600, value never printed)", t0);

    // 2. Connections.
    let mut held = hold_connections(&lab.client, VIP, HELD)?;
    step("60 keep-alive connections held", t0);

    // 3. Restart: the same seed, the same backends.
    stop_balancer(lab, &fp, t0)?;
    let fp = start_balancer(lab, driver, 3, balancer, t0)?;
    ensure!(
        fp.log().contains("hash seed read from"),
        "the restarted balancer did not read the state file"
    );
    ensure!(
        std::fs::read_to_string(&seed_file)? == seed,
        "the restart changed the seed"
    );
    let log = fp.log();
    let warm = log.lines().find(|l| l.contains("warm start:"));
    ensure!(
        warm.is_some(),
        "the restarted balancer did not carry the connection entries"
    );
    println!("    {driver}: {}", warm.unwrap_or_default().trim());
    let carried =
        Metrics::scrape(&lab.lb)?.val("flowplane_takeover_entries", &[("result", "carried")])?;
    ensure!(
        carried >= HELD as f64,
        "{carried} entries carried, {HELD} connections held"
    );
    ask_held(&lab.client, VIP, &mut held, "after a restart")?;
    step("restart: warm, every held connection kept its backend", t0);

    // 4. Control: a new seed (and no carried entries) moves most of them.
    stop_balancer(lab, &fp, t0)?;
    std::fs::remove_file(&seed_file)?;
    std::fs::remove_file(dir.join("state/connections"))?;
    let fp = start_balancer(lab, driver, 3, balancer, t0)?;
    ensure!(fp.log().contains("hash seed drawn and kept in"));
    let kept = still_on_their_backend(lab, &mut held)?;
    println!("    {driver}: with a new seed, {kept} of {HELD} held connections kept their backend");
    ensure!(
        kept <= HELD * 3 / 4,
        "with a new seed {kept} of {HELD} connections kept their backend: the control shows \
         nothing for the state file to prevent"
    );
    step("control: a new seed moved the connections", t0);

    // 5. A warm restart that changes the backend set.
    let mut held = hold_connections(&lab.client, VIP, HELD)?;
    stop_balancer(lab, &fp, t0)?;
    lab.write_config(&config_text(&seed_file, CHANGED, true))?;
    let fp = start_balancer(lab, driver, 4, balancer, t0)?;
    ensure!(fp.log().contains("warm start:"), "no warm start");
    ask_held(
        &lab.client,
        VIP,
        &mut held,
        "after a warm restart that changed the backends",
    )?;
    let sent =
        Metrics::scrape(&lab.lb)?.val("flowplane_second_chance_total", &[("event", "sent")])?;
    ensure!(
        sent == 0.0,
        "{sent} second-chance packets: the carried entries should do"
    );
    step(
        "warm restart with a changed backend set: every held connection kept its backend",
        t0,
    );

    // 6. A cold restart that changes the backend set: second chance.
    let state = dir.join("state/connections");
    let mut held = hold_connections(&lab.client, VIP, HELD)?;
    stop_balancer(lab, &fp, t0)?;
    std::fs::remove_file(&state)?;
    lab.write_config(&config_text(&seed_file, CHANGED_AGAIN, true))?;
    let forwarded_before = backends_forwarded(lab)?;
    let fp = start_balancer(lab, driver, 4, balancer, t0)?;
    ensure!(fp.log().contains("cold start:"), "not a cold start");
    ensure!(
        fp.log().contains("1 VIP(s) give second chance"),
        "the successor did not take its predecessor's backend sets"
    );
    ask_held(
        &lab.client,
        VIP,
        &mut held,
        "after a cold restart that changed the backends",
    )?;
    let m = Metrics::scrape(&lab.lb)?;
    let sent = m.val("flowplane_second_chance_total", &[("event", "sent")])?;
    let forwarded = backends_forwarded(lab)? - forwarded_before;
    println!(
        "    {driver}: cold restart, changed backend set: {HELD} of {HELD} kept; {sent} packets \
         named their earlier backends, the backends forwarded {forwarded}"
    );
    ensure!(sent > 0.0 && forwarded > 0, "second chance was not used");
    step(
        "cold restart with a changed backend set: every held connection kept its backend",
        t0,
    );

    // 7. Control: the same without second chance.
    let mut held = hold_connections(&lab.client, VIP, HELD)?;
    stop_balancer(lab, &fp, t0)?;
    std::fs::remove_file(&state)?;
    lab.write_config(&config_text(&seed_file, CHANGED, false))?;
    let fp = start_balancer(lab, driver, 4, balancer, t0)?;
    let kept = still_on_their_backend(lab, &mut held)?;
    println!(
        "    {driver}: without second chance, {kept} of {HELD} held connections kept their backend"
    );
    ensure!(
        kept < HELD,
        "without second chance every connection survived the change: the control shows nothing"
    );
    step(
        "control: without second chance the change broke connections",
        t0,
    );
    stop_balancer(lab, &fp, t0)?;
    Ok(())
}

/// Connections opened, and requests sent on them, while a handover runs.
struct Traffic {
    /// Connections opened (each with the backend that answered its first request).
    streams: Vec<(std::net::TcpStream, String)>,
    /// Requests sent on earlier connections.
    requests: usize,
    /// What went wrong: a connection not opened, a request not answered by its backend.
    failed: Vec<String>,
}

/// At most this many connections are opened during one handover; after that, requests only.
const OPENED_MAX: usize = 600;

/// Open connections to the VIP and send requests on the earlier ones until `stop`.
fn traffic(stop: &std::sync::atomic::AtomicBool) -> Traffic {
    use std::sync::atomic::Ordering;
    let vip: std::net::SocketAddr = format!("{VIP}:80").parse().expect("an address");
    let mut t = Traffic {
        streams: Vec::new(),
        requests: 0,
        failed: Vec::new(),
    };
    let mut next = 0;
    while !stop.load(Ordering::Acquire) {
        if t.streams.len() < OPENED_MAX {
            match connect(vip).and_then(|mut s| request(&mut s, VIP, false).map(|r| (s, r))) {
                Ok((s, (200, body))) => t.streams.push((s, body.trim().to_string())),
                Ok((_, (st, _))) => t.failed.push(format!("a new connection: status {st}")),
                Err(e) => t.failed.push(format!("a new connection: {e}")),
            }
        } else {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        if !t.streams.is_empty() {
            let k = next % t.streams.len();
            next += 1;
            let (s, was) = &mut t.streams[k];
            t.requests += 1;
            match request(s, VIP, false) {
                Ok((200, body)) if body.trim() == was => {}
                Ok((st, body)) => t
                    .failed
                    .push(format!("connection {k} (on {was}): {st} {:?}", body.trim())),
                Err(e) => t.failed.push(format!("connection {k} (on {was}): {e}")),
            }
        }
    }
    t
}

/// Start a successor while `old` forwards, with traffic all along: the successor, and the
/// traffic (stopped a moment after the successor is ready).
fn hand_over(
    lab: &Lab,
    driver: &str,
    backends: usize,
    old: &Proc,
    balancer: &mut Option<Proc>,
    t0: Instant,
) -> Result<(Proc, Traffic)> {
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (new, traffic) = std::thread::scope(|s| {
        let h = s.spawn(|| lab.client.enter(|| traffic(&stop)));
        std::thread::sleep(std::time::Duration::from_millis(300));
        let new = start_balancer(lab, driver, backends, balancer, t0);
        std::thread::sleep(std::time::Duration::from_millis(500));
        stop.store(true, std::sync::atomic::Ordering::Release);
        let t = h.join().expect("the traffic thread");
        (new, t)
    });
    let (new, traffic) = (new?, traffic?);
    let st = old.wait(std::time::Duration::from_secs(10))?;
    ensure!(st.success(), "the predecessor's exit status: {st}");
    ensure!(
        old.log().contains("handed over: the successor forwards"),
        "the predecessor did not hand over"
    );
    let log = new.log();
    let line = log
        .lines()
        .find(|l| l.contains("handed over by the running process"))
        .context("the successor did not start by handover")?;
    println!("    {driver}: {}", line.trim());
    for l in log.lines().filter(|l| l.contains("cut-over:")) {
        println!("    {driver}: {}", l.trim());
    }
    // AF_XDP sockets are handed over open, not closed and bound again.
    if driver == "af_xdp" {
        ensure!(
            log.contains("the predecessor's ports taken over")
                && old.log().contains("handover: ports handed over"),
            "the AF_XDP sockets were not handed over:\n{log}"
        );
    }
    let m = Metrics::scrape(&lab.lb)?;
    ensure!(m.val("flowplane_takeover", &[("kind", "handover")])? == 1.0);
    println!(
        "    {driver}: during the handover {} connections opened and {} requests sent on them; \
         {} failed",
        traffic.streams.len(),
        traffic.requests,
        traffic.failed.len()
    );
    Ok((new, traffic))
}

fn handover_scenario(
    lab: &Lab,
    driver: &str,
    balancer: &mut Option<Proc>,
    t0: Instant,
) -> Result<()> {
    let dir = lab
        .config
        .parent()
        .context("the lab's directory")?
        .to_path_buf();
    let seed_file = dir.join("state/seed");
    lab.write_config(&config_text(&seed_file, THREE, true))?;
    let old = start_balancer(lab, driver, 3, balancer, t0)?;
    let mut held = hold_connections(&lab.client, VIP, HELD)?;
    step("60 keep-alive connections held", t0);

    // 1. The same configuration.
    let (new, mut during) = hand_over(lab, driver, 3, &old, balancer, t0)?;
    ensure!(
        during.failed.is_empty(),
        "during the handover: {:?}",
        during.failed
    );
    ask_held(&lab.client, VIP, &mut held, "after a handover")?;
    ask_held(
        &lab.client,
        VIP,
        &mut during.streams,
        "opened during a handover, after it",
    )?;
    step(
        "handover: every connection kept its backend, no request failed",
        t0,
    );

    // 2. A changed configuration, the successor started by the running process on SIGUSR2
    //    (from the binary's path: what a package upgrade does).
    lab.write_config(&config_text(&seed_file, CHANGED, true))?;
    let (newer, mut during2) = hand_over_on_usr2(lab, driver, &new, t0)?;
    ensure!(
        during2.failed.is_empty(),
        "during the handover with a changed configuration: {:?}",
        during2.failed
    );
    ask_held(
        &lab.client,
        VIP,
        &mut held,
        "after a handover with a changed configuration",
    )?;
    ask_held(
        &lab.client,
        VIP,
        &mut during.streams,
        "after a second handover",
    )?;
    ask_held(
        &lab.client,
        VIP,
        &mut during2.streams,
        "opened during a handover with a changed configuration, after it",
    )?;
    step(
        "SIGUSR2 handover with a changed backend set: every connection kept its backend",
        t0,
    );
    // The successor is not this harness's child: stop it by its pid.
    // SAFETY: kill(2) with a pid and a signal number; no memory is passed.
    let r = unsafe { libc::kill(newer as i32, libc::SIGTERM) };
    ensure!(
        r == 0,
        "SIGTERM to the successor: {}",
        std::io::Error::last_os_error()
    );
    wait_for(
        "the successor to exit",
        std::time::Duration::from_secs(10),
        || Ok((!fp_testnet::pid_alive(newer)).then_some(())),
    )?;
    ensure!(
        !xdp_attached(&lab.lb)?,
        "XDP program still attached to eth0 after the balancer exited"
    );
    step("SIGTERM: the successor exited, nothing left attached", t0);
    Ok(())
}

/// `SIGUSR2` to `old` while traffic runs: it starts its own successor, which takes over. The
/// successor's pid and the traffic.
fn hand_over_on_usr2(lab: &Lab, driver: &str, old: &Proc, t0: Instant) -> Result<(u32, Traffic)> {
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (pid, traffic) = std::thread::scope(|s| {
        let h = s.spawn(|| lab.client.enter(|| traffic(&stop)));
        std::thread::sleep(std::time::Duration::from_millis(300));
        let took = (|| -> Result<u32> {
            let before = old
                .log()
                .matches("handed over by the running process")
                .count();
            old.signal(libc::SIGUSR2);
            let st = old.wait(std::time::Duration::from_secs(30))?;
            ensure!(st.success(), "the predecessor's exit status: {st}");
            wait_for(
                "the successor's start line",
                std::time::Duration::from_secs(10),
                || {
                    Ok((old
                        .log()
                        .matches("handed over by the running process")
                        .count()
                        > before)
                        .then_some(()))
                },
            )?;
            let log = old.log();
            let pid = log
                .lines()
                .rev()
                .find_map(|l| {
                    l.split("(this is pid ")
                        .nth(1)?
                        .split(')')
                        .next()?
                        .parse::<u32>()
                        .ok()
                })
                .context("the successor's pid in the log")?;
            Ok(pid)
        })();
        std::thread::sleep(std::time::Duration::from_millis(500));
        stop.store(true, std::sync::atomic::Ordering::Release);
        (took, h.join().expect("the traffic thread"))
    });
    let (pid, traffic) = (pid?, traffic?);
    ensure!(
        old.log().contains("SIGUSR2: started"),
        "the predecessor did not start a successor"
    );
    wait_for(
        "the successor's admin server",
        std::time::Duration::from_secs(10),
        || Ok(Metrics::scrape(&lab.lb).ok()),
    )?;
    let m = Metrics::scrape(&lab.lb)?;
    ensure!(m.val("flowplane_takeover", &[("kind", "handover")])? == 1.0);
    ensure!(m.val("flowplane_config_generation", &[])? == 1.0);
    step("SIGUSR2: the successor took over", t0);
    println!(
        "    {driver}: SIGUSR2 handover: {} connections opened and {} requests sent during it; {} \
         failed",
        traffic.streams.len(),
        traffic.requests,
        traffic.failed.len()
    );
    Ok((pid, traffic))
}

#[test]
fn handover_keeps_connections_af_packet() {
    run_driver("hov", "af_packet", handover_scenario);
}

#[test]
fn handover_keeps_connections_af_xdp() {
    run_driver("hov", "af_xdp", handover_scenario);
}

/// Run `scenario` on a lab of its own (`tag`: the lab's name) with `driver`.
fn run_driver(
    tag: &str,
    driver: &str,
    scenario: fn(&Lab, &str, &mut Option<Proc>, Instant) -> Result<()>,
) {
    run_lab(
        driver,
        || {
            LabSpec {
                tag: &lab_tag(tag, driver),
                tools: &["nginx", "curl"],
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

#[test]
fn restart_keeps_connections_af_packet() {
    run_driver("rst", "af_packet", scenario);
}

#[test]
fn restart_keeps_connections_af_xdp() {
    run_driver("rst", "af_xdp", scenario);
}
