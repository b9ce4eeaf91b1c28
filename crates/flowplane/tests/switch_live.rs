//! `flowplane switch` on live ports: four host namespaces on four switch ports, the
//! built binary running in its own namespace, over AF_PACKET and over AF_XDP.
//!
//! ```text
//!   h0 eth0 ──veth── p0 ┐
//!   h1 eth0 ──veth── p1 │ sw: flowplane switch --ports p0,p1,p2,p3 --aging-secs 2
//!   h2 eth0 ──veth── p2 │        --learn-queue 8 --static 02:00:00:00:00:99=2 --admin ...
//!   h3 eth0 ──veth── p3 ┘
//! ```
//!
//! Each host also holds an AF_PACKET socket on its `eth0` (a capture: it sees every frame the
//! switch delivers to the host) and sends hand-made frames through it; IPv6 is off everywhere so no
//! stray frames appear. What is asserted, in order:
//!
//! 1. unknown unicast is flooded to every other port and never back out of the ingress port;
//! 2. once the destination has been learned, frames go to its port only;
//! 3. a static entry is obeyed, and a frame *from* the static MAC elsewhere does not move it;
//! 4. the tracer records a probe's decision (forwarded to port 1; flooded to 1, 2, 3);
//! 5. a learn-queue overflow (600 new source MACs at once, queue of 8) is counted, and every one
//!    of the 600 frames is still delivered;
//! 6. every pair of hosts pings;
//! 7. TCP (iperf3) across the switch without checksum errors (`TcpInCsumErrors` stays 0) — with
//!    tx checksum offload off on the hosts, and for AF_PACKET also with offload *on* (TSO off), where
//!    the switch's port completes the partial checksums;
//! 8. a host moving to another port is relearned there (moves counter, ping and frames follow it);
//! 9. aging: after 2 s of silence every learned entry is removed (only the static one is left);
//! 10. a restart keeps the learned entries (restored from the state directory before forwarding).

mod common;

use anyhow::{bail, Context, Result};
use common::probe_frame;
use fp_engine::afpacket::{AfPacketConfig, AfPacketPort};
use fp_engine::port::Port;
use fp_pipeline::packet::{burst, Pool, MAX_BURST};
use fp_testnet::{Link, Netns, Proc, TestNet};
use std::collections::HashMap;
use std::time::{Duration, Instant};

const HOSTS: usize = 4;
const ADMIN: &str = "127.0.0.1:9310";
const STATIC_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0x99];
const UNKNOWN_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0x42];
const BROADCAST: [u8; 6] = [0xff; 6];
/// Local experimental ethertype: the hosts' kernels ignore these frames.
const ETHERTYPE: u16 = 0x88b5;
const MARK: &[u8; 8] = b"FPSWTEST";

fn host_mac(i: usize) -> [u8; 6] {
    [2, 0, 0, 0, 0, i as u8 + 1]
}

fn mac_str(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

fn host_ip(i: usize) -> String {
    format!("10.0.0.{}", i + 1)
}

/// A test frame: dst, src, [`ETHERTYPE`], [`MARK`], tag, padding to 60 bytes.
fn frame(dst: [u8; 6], src: [u8; 6], tag: u32) -> Vec<u8> {
    common::tagged_frame(dst, src, ETHERTYPE, MARK, tag)
}

fn tag_of(f: &[u8]) -> Option<u32> {
    if f.len() >= 26 && f[12..14] == ETHERTYPE.to_be_bytes() && &f[14..22] == MARK {
        Some(u32::from_be_bytes([f[22], f[23], f[24], f[25]]))
    } else {
        None
    }
}

/// A host's AF_PACKET socket on its eth0: sends test frames, and records every test frame the
/// switch delivers.
struct Tap {
    port: AfPacketPort,
    pool: Pool,
    /// Tags of the test frames received so far, and the probes (by their UDP payload).
    seen: Vec<u32>,
    probes: usize,
}

impl Tap {
    fn open(ns: &Netns) -> Result<Tap> {
        let port = ns.enter(|| AfPacketPort::open("eth0", &AfPacketConfig::default()))??;
        Ok(Tap {
            port,
            pool: Pool::new(4 * MAX_BURST),
            seen: Vec::new(),
            probes: 0,
        })
    }

    fn send(&mut self, frames: &[Vec<u8>]) -> Result<()> {
        for chunk in frames.chunks(MAX_BURST) {
            let mut b = burst();
            for f in chunk {
                let mut p = self.pool.get().context("tap pool")?;
                p.fill(f);
                b.push(p);
            }
            let n = self.port.tx_burst(&mut b, &mut self.pool);
            if n != chunk.len() {
                bail!("tap sent {n} of {} frames", chunk.len());
            }
        }
        Ok(())
    }

    /// Read whatever arrived.
    fn drain(&mut self) {
        let mut b = burst();
        while self.port.rx_burst(&mut self.pool, &mut b, MAX_BURST) > 0 {
            for p in b.drain(..) {
                if let Some(t) = tag_of(p.data()) {
                    self.seen.push(t);
                } else if fp_pipeline::trace::probe_id(p.data()).is_some() {
                    self.probes += 1;
                }
                self.pool.put(p);
            }
        }
    }

    fn count(&self, tag: u32) -> usize {
        self.seen.iter().filter(|&&t| t == tag).count()
    }
}

/// Start `flowplane switch` on `ports` in `sw`, with the test's settings, the aging time `aging`
/// (seconds) and the state directory `state`; wait until it is ready.
fn start_switch(
    sw: &Netns,
    ports: &[String],
    driver: &str,
    aging: &str,
    state: &std::path::Path,
) -> Result<Proc> {
    // Both FIB layouts go through every step: the 2,4 layout on AF_PACKET, the quotiented one
    // on AF_XDP.
    let layout = if driver == "af_xdp" {
        "quotient"
    } else {
        "compact"
    };
    let switch = sw
        .cmd([
            env!("CARGO_BIN_EXE_flowplane"),
            "switch",
            "--ports",
            &ports.join(","),
            "--driver",
            driver,
            "--workers",
            "2",
            "--aging-secs",
            aging,
            "--learn-queue",
            "8",
            "--fib-capacity",
            "65536",
            "--fib-layout",
            layout,
            "--static",
            &format!("{}=2", mac_str(STATIC_MAC)),
            "--admin",
            ADMIN,
            "--state-dir",
            state.to_str().context("state directory path")?,
        ])
        .spawn()?;
    switch
        .wait_log("flowplane: ready", Duration::from_secs(20))
        .with_context(|| format!("the switch did not start:\n{}", switch.log()))?;
    Ok(switch)
}

struct Bed {
    net: TestNet,
    sw: Netns,
    hosts: Vec<Netns>,
    links: Vec<Link>,
    taps: Vec<Tap>,
    switch: Proc,
}

fn no_ipv6(ns: &Netns) -> Result<()> {
    ns.sysctl("net.ipv6.conf.all.disable_ipv6", "1")?;
    ns.sysctl("net.ipv6.conf.default.disable_ipv6", "1")?;
    Ok(())
}

fn bed(tag: &str, driver: &str) -> Result<Bed> {
    let net = TestNet::new(tag)?;
    net.require_tools(&["iperf3", "curl", "ping"])?;
    let sw = net.ns("sw")?;
    no_ipv6(&sw)?;
    let mut hosts = Vec::new();
    let mut links = Vec::new();
    let mut ports = Vec::new();
    for i in 0..HOSTS {
        let h = net.ns(&format!("h{i}"))?;
        no_ipv6(&h)?;
        let (he, _pe) = net.veth(&h, "eth0", &sw, &format!("p{i}"))?;
        he.set_mac(&mac_str(host_mac(i)))?;
        he.addr_add(&format!("{}/24", host_ip(i)))?;
        // AF_XDP cannot complete partial checksums (docs/platform.md, "Partial checksums on veth"): the hosts send
        // complete ones. (Step 7 turns offload back on for AF_PACKET.)
        he.tx_checksum_off()?;
        hosts.push(h);
        links.push(he);
        ports.push(format!("p{i}"));
    }
    let state = net.dir("switch-state")?;
    let switch = start_switch(&sw, &ports, driver, "2", &state)?;
    let taps = hosts.iter().map(Tap::open).collect::<Result<Vec<_>>>()?;
    Ok(Bed {
        net,
        sw,
        hosts,
        links,
        taps,
        switch,
    })
}

impl Bed {
    fn get(&self, path: &str) -> Result<String> {
        let out = self
            .sw
            .cmd([
                "curl",
                "-sS",
                "--max-time",
                "5",
                &format!("http://{ADMIN}{path}"),
            ])
            .run()?;
        Ok(out.stdout)
    }

    /// All samples of /metrics: `name{labels}` → value.
    fn metrics(&self) -> Result<HashMap<String, f64>> {
        common::scrape(&self.sw, ADMIN)
    }

    fn metric(&self, key: &str) -> Result<f64> {
        let m = self.metrics()?;
        m.get(key)
            .copied()
            .with_context(|| format!("metric {key} missing from /metrics"))
    }

    /// Let frames in flight arrive, then read every tap.
    fn settle(&mut self) {
        std::thread::sleep(Duration::from_millis(150));
        for t in &mut self.taps {
            t.drain();
        }
    }

    /// Wait until `key` satisfies `ok`, or fail after `within`.
    fn wait_metric(&self, key: &str, within: Duration, ok: impl Fn(f64) -> bool) -> Result<f64> {
        let t = Instant::now();
        loop {
            let v = self.metric(key)?;
            if ok(v) {
                return Ok(v);
            }
            if t.elapsed() > within {
                bail!(
                    "metric {key} = {v} after {within:?}\n{}",
                    self.get("/metrics")?
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// `Tcp: ... InCsumErrors` from the namespace's /proc/net/snmp.
fn tcp_csum_errors(ns: &Netns) -> Result<u64> {
    let snmp = ns.sh("cat /proc/net/snmp")?.stdout;
    let tcp: Vec<&str> = snmp.lines().filter(|l| l.starts_with("Tcp:")).collect();
    if tcp.len() < 2 {
        bail!("no Tcp lines in /proc/net/snmp:\n{snmp}");
    }
    let names: Vec<&str> = tcp[0].split_whitespace().collect();
    let vals: Vec<&str> = tcp[1].split_whitespace().collect();
    let i = names
        .iter()
        .position(|n| *n == "InCsumErrors")
        .context("InCsumErrors column")?;
    Ok(vals[i].parse()?)
}

fn iperf(b: &Bed, client: usize, server: usize, port: u16) -> Result<()> {
    let srv = b.hosts[server].iperf3_server(port)?;
    let r = b.hosts[client].iperf3_client(&host_ip(server), port, 2, &[])?;
    srv.kill();
    assert!(r.received_bps > 1e6, "iperf3 h{client} -> h{server}: {r:?}");
    for h in [client, server] {
        assert_eq!(
            tcp_csum_errors(&b.hosts[h])?,
            0,
            "h{h} dropped TCP segments with bad checksums"
        );
    }
    eprintln!(
        "iperf3 h{client} -> h{server}: {:.0} Mbit/s, {} retransmits",
        r.received_bps / 1e6,
        r.retransmits
    );
    Ok(())
}

fn scenario(tag: &str, driver: &str) -> Result<()> {
    let mut b = bed(tag, driver)?;
    let r = run_steps(&mut b, driver);
    if r.is_err() {
        eprintln!("switch log:\n{}", b.switch.log());
    }
    r?;
    b.switch.signal(libc::SIGTERM);
    b.switch.wait(Duration::from_secs(10))?;
    let log = b.switch.log();
    assert!(log.contains("shutting down"), "{log}");
    assert!(b.net.cleanup().is_empty());
    Ok(())
}

fn run_steps(b: &mut Bed, driver: &str) -> Result<()> {
    let (h0, h1) = (host_mac(0), host_mac(1));

    // 1. Unknown unicast: flooded to every other port, never back to the ingress port.
    b.taps[0].send(&vec![frame(UNKNOWN_MAC, h0, 1); 3])?;
    b.settle();
    for i in 1..HOSTS {
        assert_eq!(b.taps[i].count(1), 3, "h{i} did not get the flooded frames");
    }
    assert_eq!(
        b.taps[0].count(1),
        0,
        "a frame went back out its ingress port"
    );
    assert!(
        b.metric("flowplane_switch_port_flooded_frames_total{port=\"0\",interface=\"p0\"}")? >= 3.0
    );

    // 2. h1 speaks (a broadcast: flooded), and is learned on port 1; then h0 -> h1 is not flooded.
    b.taps[1].send(&[frame(BROADCAST, h1, 2)])?;
    b.settle();
    for i in [0, 2, 3] {
        assert_eq!(b.taps[i].count(2), 1, "h{i} did not get the broadcast");
    }
    b.taps[0].send(&vec![frame(h1, h0, 3); 5])?;
    b.settle();
    assert_eq!(b.taps[1].count(3), 5, "h1 did not get its frames");
    for i in [0, 2, 3] {
        assert_eq!(b.taps[i].count(3), 0, "h{i} got a frame for learned h1");
    }

    // 3. Static entry 02:00:00:00:00:99 -> port 2, also after a frame from that MAC on port 3.
    b.taps[0].send(&[frame(STATIC_MAC, h0, 4)])?;
    b.settle();
    assert_eq!(b.taps[2].count(4), 1);
    assert_eq!(b.taps[1].count(4) + b.taps[3].count(4), 0);
    b.taps[3].send(&[frame(BROADCAST, STATIC_MAC, 5)])?;
    b.settle();
    b.taps[0].send(&[frame(STATIC_MAC, h0, 6)])?;
    b.settle();
    assert_eq!(b.taps[2].count(6), 1, "the static entry moved");
    assert_eq!(b.taps[3].count(6), 0, "the static entry moved");
    assert!(b.metric("flowplane_switch_fib_static_kept_total")? >= 1.0);

    // 4. Tracer: a probe to learned h1 is forwarded to port 1 only; one to an unknown MAC flooded.
    //    (h1 speaks first: with 2 s aging, its entry must be fresh.)
    b.taps[1].send(&[frame(BROADCAST, h1, 14)])?;
    b.settle();
    b.taps[0].send(&[
        probe_frame(h1, h0, 7001),
        probe_frame(UNKNOWN_MAC, h0, 7002),
    ])?;
    b.settle();
    assert_eq!(b.taps[1].probes, 2);
    assert_eq!(b.taps[2].probes, 1);
    let traces = b.get("/trace")?;
    let rec = |id: u64| -> Result<serde_json::Value> {
        traces
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|v| v["probe_id"] == id)
            .with_context(|| format!("no trace record for probe {id}:\n{traces}"))
    };
    let r = rec(7001)?;
    assert_eq!(r["decision"], "forwarded", "{r}");
    assert_eq!(r["in_port"], 0, "{r}");
    assert_eq!(r["fib"], 1, "{r}");
    assert_eq!(r["out_ports"], serde_json::json!([1]), "{r}");
    assert_eq!(r["dst"], mac_str(h1), "{r}");
    let r = rec(7002)?;
    assert_eq!(r["decision"], "flooded", "{r}");
    assert_eq!(r["out_ports"], serde_json::json!([1, 2, 3]), "{r}");

    // 5. Learn-queue overflow: 600 new source MACs at once into a queue of 8. Events are dropped
    //    and counted; frames are not.
    let drops0 = b.metric("flowplane_switch_learn_queue_drops_total")?;
    let burst: Vec<Vec<u8>> = (0..600u32)
        .map(|k| {
            let src = [2, 0, 0, 1, (k >> 8) as u8, k as u8];
            frame(UNKNOWN_MAC, src, 9)
        })
        .collect();
    b.taps[0].send(&burst)?;
    b.settle();
    let drops = b.metric("flowplane_switch_learn_queue_drops_total")?;
    assert!(drops > drops0, "no learn event was dropped ({drops})");
    for i in 1..HOSTS {
        assert_eq!(b.taps[i].count(9), 600, "h{i}: frames were lost");
    }
    eprintln!("{driver}: learn-queue drops {}", drops - drops0);

    // 6. Every pair pings (ARP broadcasts are flooded, replies forwarded).
    for i in 0..HOSTS {
        for j in 0..HOSTS {
            if i != j {
                b.hosts[i]
                    .ping(&host_ip(j), 1)
                    .with_context(|| format!("h{i} -> h{j}"))?;
            }
        }
    }
    assert!(b.metric("flowplane_switch_fib_learned_total")? >= 4.0);

    // 7. TCP across the switch without checksum errors.
    iperf(b, 2, 3, 5201)?;
    if driver == "af_packet" {
        // Checksum offload on (partial checksums on the wire, TSO off so frames fit the MTU): the
        // AF_PACKET port completes them.
        for h in [0, 1] {
            b.links[h].ethtool_k(&[("tx", "on"), ("tso", "off"), ("gso", "off")])?;
            assert!(b.links[h].feature_on("tx-checksumming")?);
        }
        iperf(b, 0, 1, 5202)?;
    }

    // 8. Move: host 3's identity (MAC and address) moves from port 3 to port 2.
    b.taps[3].send(&[frame(BROADCAST, host_mac(3), 10)])?; // refresh: still learned on port 3
    b.settle();
    let moves0 = b.metric("flowplane_switch_fib_moves_total")?;
    b.links[3].down()?;
    let l2 = &b.links[2];
    l2.ns().ip(&["addr", "flush", "dev", "eth0"])?;
    l2.set_mac(&mac_str(host_mac(3)))?;
    l2.addr_add(&format!("{}/24", host_ip(3)))?;
    // The moved host speaks first (as a host does after moving, e.g. gratuitous ARP).
    b.taps[2].send(&[frame(BROADCAST, host_mac(3), 11)])?;
    b.wait_metric(
        "flowplane_switch_fib_moves_total",
        Duration::from_secs(2),
        |v| v > moves0,
    )?;
    b.taps[0].send(&[frame(host_mac(3), h0, 12)])?;
    b.settle();
    assert_eq!(
        b.taps[2].count(12),
        1,
        "the moved host did not get its frame"
    );
    assert_eq!(
        b.taps[1].count(12),
        0,
        "frame to the moved host was flooded"
    );
    b.hosts[0]
        .ping(&host_ip(3), 1)
        .context("ping after the move")?;

    // 9. Aging: silence; every learned entry goes, the static one stays.
    let aged0 = b.metric("flowplane_switch_fib_aged_total")?;
    b.wait_metric(
        "flowplane_switch_fib_entries",
        Duration::from_secs(8),
        |v| v == 1.0,
    )?;
    // At least h0 and the moved host, both heard in step 8 (others may have aged earlier).
    assert!(b.metric("flowplane_switch_fib_aged_total")? >= aged0 + 2.0);
    let status = b.get("/status")?;
    assert!(
        status.contains("static 02:00:00:00:00:99 -> port 2 (p2); fib says Some(2)"),
        "{status}"
    );
    let layout = if driver == "af_xdp" {
        "quotient"
    } else {
        "2,4"
    };
    assert!(status.contains(&format!("{layout} layout")), "{status}");
    // After aging, the next frame to h1 is flooded again (unknown): h2 sees it too. A stray frame
    // from h1 (its kernel's own traffic) can relearn it between the check above and the send, so
    // wait for the FIB to hold only the static entry again before each attempt.
    let mut flooded = false;
    for tag in 13..18u32 {
        b.wait_metric(
            "flowplane_switch_fib_entries",
            Duration::from_secs(8),
            |v| v == 1.0,
        )?;
        b.taps[0].send(&[frame(h1, h0, tag)])?;
        b.settle();
        assert_eq!(b.taps[1].count(tag), 1);
        if b.taps[2].count(tag) == 1 {
            flooded = true;
            break;
        }
    }
    assert!(flooded, "h1 was not forgotten");

    // 10. A restart keeps what the switch learned: three hosts speak, the switch restarts (with
    // another aging time), and its FIB holds them before any frame arrives; a frame to one of
    // them is not flooded.
    let h2 = host_mac(3); // the host on port 2 since step 8
    for (k, src) in [(0, h0), (1, h1), (2, h2)] {
        b.taps[k].send(&[frame(BROADCAST, src, 20 + k as u32)])?;
    }
    b.wait_metric(
        "flowplane_switch_fib_entries",
        Duration::from_secs(2),
        |v| v == 4.0,
    )?;
    b.switch.signal(libc::SIGTERM);
    b.switch.wait(Duration::from_secs(10))?;
    let log = b.switch.log();
    assert!(
        log.contains("3 learned FIB entries kept for the next start"),
        "{log}"
    );
    let ports: Vec<String> = (0..HOSTS).map(|i| format!("p{i}")).collect();
    let state = b.net.dir("switch-state")?;
    b.switch = start_switch(&b.sw, &ports, driver, "30", &state)?;
    assert_eq!(b.metric("flowplane_switch_takeover{kind=\"warm\"}")?, 1.0);
    assert_eq!(
        b.metric("flowplane_switch_takeover_entries{result=\"restored\"}")?,
        3.0
    );
    assert_eq!(b.metric("flowplane_switch_fib_entries")?, 4.0);
    assert!(b
        .get("/status")?
        .contains("start: warm: 3 learned entries restored"));
    b.settle();
    b.taps[0].send(&[frame(h1, h0, 24)])?;
    b.settle();
    assert_eq!(b.taps[1].count(24), 1, "h1 did not get its frame");
    assert_eq!(
        b.taps[2].count(24),
        0,
        "a frame to a host learned before the restart was flooded"
    );
    eprintln!("{driver}: restart kept 3 learned entries");
    Ok(())
}

#[test]
fn switch_over_af_packet() -> Result<()> {
    scenario("sw-afp", "af_packet")
}

#[test]
fn switch_over_af_xdp() -> Result<()> {
    scenario("sw-xdp", "af_xdp")
}
