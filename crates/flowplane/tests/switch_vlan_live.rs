//! `flowplane switch` with 802.1Q VLANs on live ports, over AF_PACKET and over AF_XDP: two
//! access ports in two VLANs whose hosts have the *same* MAC and IP address, and a trunk to an
//! independent VLAN switch that carries both VLANs to two more such hosts. The peer is Open
//! vSwitch (userspace datapath, in its own namespace): this machine's kernel has neither 802.1Q
//! devices nor VLAN filtering in its bridge, so neither VLAN subinterfaces nor a VLAN-aware
//! Linux bridge can serve.
//!
//! ```text
//!   a10 eth0 ──veth── p0 (access 10) ┐
//!   a20 eth0 ──veth── p1 (access 20) │ sw: flowplane switch --config sw.toml
//!                     p2 (trunk 10,20) ──veth── trunk ┐ br: Open vSwitch br0: trunk carries
//!                                                     │ 10 and 20 tagged; d10 access 10,
//!   b10 eth0 ──veth── d10 ────────────────────────────┤ d20 access 20
//!   b20 eth0 ──veth── d20 ────────────────────────────┘
//! ```
//!
//! a10 and a20 are 10.0.0.1 with MAC 02:00:00:00:0a:01, b10 and b20 are 10.0.0.2 with MAC
//! 02:00:00:00:0b:02: only VLANs tell them apart. What is asserted:
//!
//! 1. b10 pings 10.0.0.1 and only a10 answers (a20's echo counter stays); b20 reaches a20 only;
//!    the switch learned the shared MACs once per VLAN (per-VLAN metrics);
//! 2. a reload that moves p1 from VLAN 20 to VLAN 30 removes exactly the learned entry no longer
//!    valid (a20's, on p1 in VLAN 20), keeps the others (VLAN 10 unchanged, b20 on the trunk in
//!    VLAN 20) and takes effect: b20 no longer reaches 10.0.0.1, b10 still reaches a10;
//! 3. a reload with a bad VLAN id is rejected naming the field, and the running configuration
//!    stays (generation unchanged, traffic still flows);
//! 4. port security: a10 sends frames from 2000 made-up source MACs (port p0 allows 8 learned
//!    MACs): the switch learns no more than 8 there and drops the rest, counted, while b10 and
//!    a10 keep talking.

mod common;

use anyhow::{bail, Context, Result};
use fp_engine::afpacket::{AfPacketConfig, AfPacketPort};
use fp_engine::port::Port;
use fp_pipeline::packet::{burst, Pool, MAX_BURST};
use fp_testnet::{Netns, Ovs, Proc, TestNet};
use std::collections::HashMap;
use std::time::{Duration, Instant};

const ADMIN: &str = "127.0.0.1:9311";
const A_MAC: &str = "02:00:00:00:0a:01";
const B_MAC: &str = "02:00:00:00:0b:02";

/// The FIB layout each driver's run uses: both layouts go through every step, keyed by VLAN
/// and MAC.
fn layout(driver: &str) -> &'static str {
    if driver == "af_xdp" {
        "quotient"
    } else {
        "compact"
    }
}

fn config_text(p1_vlan: &str, driver: &str) -> String {
    let layout = layout(driver);
    format!(
        r#"
[switch]
aging_secs = 300
fib_capacity = 65536
fib_layout = "{layout}"

[[port]]
interface = "p0"
vlan = 10
max_macs = 8

[[port]]
interface = "p1"
vlan = {p1_vlan}

[[port]]
interface = "p2"
trunk = [10, 20]
"#
    )
}

/// `Icmp: ... InEchos` of a namespace: echo requests its host answered.
fn echos(ns: &Netns) -> Result<u64> {
    let snmp = ns.sh("cat /proc/net/snmp")?.stdout;
    let icmp: Vec<&str> = snmp.lines().filter(|l| l.starts_with("Icmp:")).collect();
    if icmp.len() < 2 {
        bail!("no Icmp lines in /proc/net/snmp:\n{snmp}");
    }
    let names: Vec<&str> = icmp[0].split_whitespace().collect();
    let vals: Vec<&str> = icmp[1].split_whitespace().collect();
    let i = names
        .iter()
        .position(|n| *n == "InEchos")
        .context("InEchos column")?;
    Ok(vals[i].parse()?)
}

struct Bed {
    net: TestNet,
    sw: Netns,
    hosts: HashMap<&'static str, Netns>,
    switch: Proc,
    config: std::path::PathBuf,
    ovs: Ovs,
}

impl Bed {
    fn curl(&self, args: &[&str]) -> Result<String> {
        let mut a = vec!["curl", "-sS", "--max-time", "10"];
        a.extend_from_slice(args);
        Ok(self.sw.cmd(a).run()?.stdout)
    }

    fn metrics(&self) -> Result<HashMap<String, f64>> {
        common::scrape(&self.sw, ADMIN)
    }

    fn metric(&self, key: &str) -> Result<f64> {
        self.metrics()?
            .get(key)
            .copied()
            .with_context(|| format!("metric {key} missing from /metrics"))
    }

    fn wait_metric(&self, key: &str, within: Duration, ok: impl Fn(f64) -> bool) -> Result<f64> {
        let t = Instant::now();
        loop {
            let v = self.metric(key)?;
            if ok(v) {
                return Ok(v);
            }
            if t.elapsed() > within {
                bail!("metric {key} = {v} after {within:?}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn host(&self, name: &str) -> &Netns {
        &self.hosts[name]
    }

    /// `from` pings 10.0.0.1 three times: whether it got answers, and how many echo requests
    /// a10 and a20 answered meanwhile.
    fn ping_a(&self, from: &str) -> Result<(bool, u64, u64)> {
        let (a10, a20) = (echos(self.host("a10"))?, echos(self.host("a20"))?);
        let ok = self
            .host(from)
            .cmd(["ping", "-c", "3", "-i", "0.2", "-W", "1", "10.0.0.1"])
            .output()?
            .success();
        Ok((
            ok,
            echos(self.host("a10"))? - a10,
            echos(self.host("a20"))? - a20,
        ))
    }
}

fn bed(tag: &str, driver: &str) -> Result<Bed> {
    let net = TestNet::new(tag)?;
    net.require_tools(&["ping", "curl"])?;
    let sw = net.ns("sw")?;
    let br = net.ns("br")?;
    common::quiet(&sw)?;
    common::quiet(&br)?;
    let mut hosts = HashMap::new();
    for (name, port, mac, ip) in [
        ("a10", "p0", A_MAC, "10.0.0.1/24"),
        ("a20", "p1", A_MAC, "10.0.0.1/24"),
        ("b10", "d10", B_MAC, "10.0.0.2/24"),
        ("b20", "d20", B_MAC, "10.0.0.2/24"),
    ] {
        let h = net.ns(name)?;
        common::quiet(&h)?;
        let peer = if name.starts_with('a') { &sw } else { &br };
        let (he, _) = net.veth(&h, "eth0", peer, port)?;
        he.set_mac(mac)?;
        he.addr_add(ip)?;
        he.tx_checksum_off()?;
        hosts.insert(name, h);
    }
    net.veth(&br, "trunk", &sw, "p2")?;
    let ovs = br.ovs(&net.dir("ovs")?)?;
    ovs.add_bridge("br0")?;
    ovs.vsctl(&[
        "add-port",
        "br0",
        "trunk",
        "--",
        "set",
        "port",
        "trunk",
        "trunks=10,20",
    ])?;
    ovs.vsctl(&["add-port", "br0", "d10", "tag=10"])?;
    ovs.vsctl(&["add-port", "br0", "d20", "tag=20"])?;
    let (switch, config) = common::start_switch(
        &sw,
        &net.dir("switch")?,
        &config_text("20", driver),
        driver,
        ADMIN,
    )?;
    Ok(Bed {
        net,
        sw,
        hosts,
        switch,
        config,
        ovs,
    })
}

fn run_steps(b: &mut Bed, driver: &str) -> Result<()> {
    // 1. Same MAC and address in two VLANs: each VLAN's traffic reaches only its own host.
    let (ok, a10, a20) = b.ping_a("b10")?;
    assert!(ok, "b10 could not reach 10.0.0.1 (a10) over the trunk");
    assert!(
        a10 >= 3 && a20 == 0,
        "b10's pings reached a10 {a10}, a20 {a20}"
    );
    let (ok, a10, a20) = b.ping_a("b20")?;
    assert!(ok, "b20 could not reach 10.0.0.1 (a20) over the trunk");
    assert!(
        a20 >= 3 && a10 == 0,
        "b20's pings reached a10 {a10}, a20 {a20}"
    );
    for v in ["10", "20"] {
        let key = format!("flowplane_switch_vlan_learned_entries{{vlan=\"{v}\"}}");
        b.wait_metric(&key, Duration::from_secs(2), |x| x >= 2.0)?;
        assert!(
            b.metric(&format!(
                "flowplane_switch_vlan_frames_total{{vlan=\"{v}\"}}"
            ))? >= 6.0
        );
    }
    let status = b.curl(&[&format!("http://{ADMIN}/status")])?;
    assert!(status.contains("port 2: p2 (trunk [10,20])"), "{status}");
    let name = if layout(driver) == "quotient" {
        "quotient"
    } else {
        "2,4"
    };
    assert!(status.contains(&format!("{name} layout")), "{status}");
    eprintln!("{driver}: two VLANs with one MAC and address kept apart");

    // 2. Reload: p1 moves to VLAN 30. a20's entry (VLAN 20 on p1) goes; VLAN 10's entries and
    //    b20's (VLAN 20, on the trunk) stay.
    let learned10 = b.metric("flowplane_switch_vlan_learned_entries{vlan=\"10\"}")?;
    let flushed0 = b.metric("flowplane_switch_fib_flushed_total")?;
    std::fs::write(&b.config, config_text("30", driver))?;
    b.switch.signal(libc::SIGHUP);
    b.switch
        .wait_log("committed, generation 2", Duration::from_secs(5))
        .with_context(|| b.switch.log())?;
    assert_eq!(b.metric("flowplane_switch_config_generation")?, 2.0);
    assert_eq!(
        b.metric("flowplane_switch_fib_flushed_total")? - flushed0,
        1.0
    );
    assert_eq!(
        b.metric("flowplane_switch_vlan_learned_entries{vlan=\"10\"}")?,
        learned10,
        "a reload that did not touch VLAN 10 changed its entries"
    );
    assert!(b.metric("flowplane_switch_vlan_learned_entries{vlan=\"20\"}")? >= 1.0);
    let (ok, _, a20) = b.ping_a("b20")?;
    assert!(!ok && a20 == 0, "b20 still reaches a20 in VLAN 30");
    let (ok, a10, _) = b.ping_a("b10")?;
    assert!(
        ok && a10 >= 3,
        "b10 lost a10 after a reload that did not touch VLAN 10"
    );

    // 3. A bad reload is rejected naming the field; the running configuration stays.
    std::fs::write(&b.config, config_text("5000", driver))?;
    let reply = b.curl(&["-X", "POST", &format!("http://{ADMIN}/reload")])?;
    assert!(reply.contains("port[1].vlan"), "reload reply: {reply}");
    assert_eq!(b.metric("flowplane_switch_config_generation")?, 2.0);
    let (ok, a10, _) = b.ping_a("b10")?;
    assert!(ok && a10 >= 3, "traffic stopped after a rejected reload");

    // 4. Port security: a MAC flood from a10 is stopped at p0's limit; the hosts keep talking.
    let flood: Vec<Vec<u8>> = (0..2000u32)
        .map(|k| {
            let mut f = vec![0u8; 60];
            f[..6].copy_from_slice(&[0xff; 6]);
            f[6..12].copy_from_slice(&[2, 0x66, 0, 0, (k >> 8) as u8, k as u8]);
            f[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
            f
        })
        .collect();
    let mut port = b
        .host("a10")
        .enter(|| AfPacketPort::open("eth0", &AfPacketConfig::default()))??;
    let mut pool = Pool::new(4 * MAX_BURST);
    for chunk in flood.chunks(MAX_BURST) {
        let mut out = burst();
        for f in chunk {
            let mut p = pool.get().context("pool")?;
            p.fill(f);
            out.push(p);
        }
        port.tx_burst(&mut out, &mut pool);
        pool.put_all(&mut out);
        // Paced a little (16 000 frames/s): the switch locks the port within the FIB writer's
        // next tick, and a veth drops what a busy receiver cannot take.
        std::thread::sleep(Duration::from_millis(2));
    }
    b.wait_metric(
        "flowplane_switch_frames_total{outcome=\"drop_port_security\"}",
        Duration::from_secs(3),
        |v| v >= 1000.0,
    )?;
    let learned = b.metric("flowplane_switch_port_learned_macs{port=\"0\",interface=\"p0\"}")?;
    assert!(learned <= 8.0, "{learned} MACs learned on p0, limit 8");
    assert!(b.metric("flowplane_switch_fib_port_limit_total")? >= 1.0);
    let (ok, a10, _) = b.ping_a("b10")?;
    assert!(
        ok && a10 >= 3,
        "b10 lost a10 during a MAC flood on a10's port"
    );
    let status = b.curl(&[&format!("http://{ADMIN}/status")])?;
    assert!(status.contains("port security p0:"), "{status}");
    eprintln!(
        "{driver}: MAC flood stopped at {learned} learned MACs on p0, {} frames dropped",
        b.metric("flowplane_switch_frames_total{outcome=\"drop_port_security\"}")?
    );
    let _ = &b.net;
    Ok(())
}

fn scenario(tag: &str, driver: &str) -> Result<()> {
    let mut b = bed(tag, driver)?;
    let r = run_steps(&mut b, driver);
    if r.is_err() {
        eprintln!("switch log:\n{}\n{}", b.switch.log(), b.ovs.logs());
    }
    r?;
    b.switch.signal(libc::SIGTERM);
    b.switch.wait(Duration::from_secs(10))?;
    assert!(b.net.cleanup().is_empty());
    Ok(())
}

#[test]
fn switch_vlans_over_af_packet() -> Result<()> {
    scenario("swv-afp", "af_packet")
}

#[test]
fn switch_vlans_over_af_xdp() -> Result<()> {
    scenario("swv-xdp", "af_xdp")
}
