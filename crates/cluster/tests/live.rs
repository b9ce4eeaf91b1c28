//! The ScaleBricks cluster on real interfaces: two nodes, each in its own network
//! namespace, each with two external ports on veths to host namespaces, their interconnect ports on
//! a Linux bridge in a third namespace. Nodes run on the engine's worker threads in this test
//! process (their AF_PACKET sockets were opened inside the node namespaces); the control plane
//! installs the four host MACs as static entries (host MAC → owner node, port).
//!
//! ```text
//!  h0 10.77.0.1 ─ p0 ┐                       ┌ p0 ─ h2 10.77.0.3
//!                    node 0 ─ ic0 ══ br0 ══ ic0 ─ node 1
//!  h1 10.77.0.2 ─ p1 ┘      (bridge namespace)  └ p1 ─ h3 10.77.0.4
//! ```
//!
//! Checked: hosts on different nodes ping each other both ways, and on the same node; ARP requests
//! (broadcast) are flooded across the cluster; a UDP request/response exchange where a capture on
//! the bridge shows every datagram crossing the interconnect exactly once, one hop, as one
//! encapsulated frame; a bulk TCP exchange in both directions with no checksum errors at the
//! hosts; a host's entry removed by the control plane while the nodes run makes its traffic drop
//! as unknown, and restoring it restores the traffic. Node counters: no drops, no redirects, no
//! frame with two hops, every interconnect frame sent by one node received by the other.
//!
//! Needs root (CI runs as root), iproute2, ping, ethtool and tcpdump: a missing piece fails the test
//! with the reason.

use anyhow::{bail, ensure, Context, Result};
use fp_cluster::harness::{self, LiveNode, NodeStats};
use fp_cluster::interconnect::{node_mac, Interconnect, Kind};
use fp_cluster::{build_tables, ClusterConfig, Controller, Counters, Mode, Update};
use fp_testnet::{Netns, TestNet};
use fp_wire::ethernet::MacAddr;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

/// (node, external port, MAC, IPv4) of the four hosts.
const HOSTS: [(u8, u16, [u8; 6], &str); 4] = [
    (0, 0, [0x02, 0, 0, 0x77, 0, 1], "10.77.0.1"),
    (0, 1, [0x02, 0, 0, 0x77, 0, 2], "10.77.0.2"),
    (1, 0, [0x02, 0, 0, 0x77, 0, 3], "10.77.0.3"),
    (1, 1, [0x02, 0, 0, 0x77, 0, 4], "10.77.0.4"),
];
/// Interconnect MTU: the hosts' 1500 plus the 22-byte interconnect header, rounded up.
const IC_MTU: u32 = 1600;

fn mac_str(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

struct Topology {
    hosts: Vec<Netns>,
    nodes: Vec<Netns>,
    bridge_ports: Vec<fp_testnet::Link>,
}

fn topology(net: &TestNet) -> Result<Topology> {
    net.require_tools(&["ping", "ethtool", "tcpdump"])?;
    let quiet = |ns: &Netns| -> Result<()> {
        // No IPv6 (neighbour discovery, MLD): the only frames are the test's and ARP.
        ns.sysctl("net.ipv6.conf.all.disable_ipv6", "1")?;
        ns.sysctl("net.ipv6.conf.default.disable_ipv6", "1")?;
        Ok(())
    };
    let sw = net.ns("sw")?;
    quiet(&sw)?;
    let br = sw.bridge("br0")?;
    let mut nodes = vec![];
    let mut bridge_ports = vec![];
    for i in 0..2 {
        let n = net.ns(&format!("node{i}"))?;
        quiet(&n)?;
        let (ic, bp) = net.veth(&n, "ic0", &sw, &format!("n{i}"))?;
        bp.set_master(&br)?;
        ic.set_mtu(IC_MTU)?;
        bp.set_mtu(IC_MTU)?;
        nodes.push(n);
        bridge_ports.push(bp);
    }
    br.set_mtu(IC_MTU)?;
    let mut hosts = vec![];
    for (i, &(node, port, mac, ip)) in HOSTS.iter().enumerate() {
        let h = net.ns(&format!("h{i}"))?;
        quiet(&h)?;
        let (e, _) = net.veth(&h, "eth0", &nodes[node as usize], &format!("p{port}"))?;
        e.set_mac(&mac_str(mac))?;
        e.addr_add(&format!("{ip}/24"))?;
        // Kernel senders: full checksums and no 64 KB TSO frames (docs/live-ports.md).
        e.tx_checksum_off()?;
        // Keep resolved neighbours reachable for the whole test, so that no unicast ARP probe
        // interleaves with the exchanges whose frames are counted exactly.
        h.sysctl("net.ipv4.neigh.eth0.base_reachable_time_ms", "600000")?;
        hosts.push(h);
    }
    Ok(Topology {
        hosts,
        nodes,
        bridge_ports,
    })
}

/// The nodes' published counters once the cluster is quiet: each node has been idle (published)
/// again since the previous look 30 ms earlier, nothing changed in between, and every frame one
/// node sent over the interconnect the other has received. After 10 s, whatever was read last (the
/// checks then fail with the numbers).
fn settle(nodes: &[LiveNode]) -> Vec<NodeStats> {
    let read = || -> Vec<NodeStats> { nodes.iter().map(|n| n.stats()).collect() };
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut prev = read();
    loop {
        std::thread::sleep(Duration::from_millis(30));
        let cur = read();
        let fresh = cur.iter().zip(&prev).all(|(c, p)| c.seq > p.seq);
        let same = cur
            .iter()
            .zip(&prev)
            .all(|(c, p)| c.counters == p.counters && c.ports.by_hops == p.ports.by_hops);
        let (a, b) = (&cur[0].counters, &cur[1].counters);
        let balanced = a.ic_tx == b.ic_rx && b.ic_tx == a.ic_rx;
        if (fresh && same && balanced) || Instant::now() > deadline {
            return cur;
        }
        prev = cur;
    }
}

/// Wait (up to 10 s) until `done` holds for the published counters.
fn wait_for(nodes: &[LiveNode], done: impl Fn(&[NodeStats]) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let cur: Vec<NodeStats> = nodes.iter().map(|n| n.stats()).collect();
        if done(&cur) {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Counters that hold after any traffic: nothing dropped or redirected, nothing took two hops,
/// what one node sent over the interconnect the other received, every flood crossed once.
fn check_invariants(s: &[NodeStats]) {
    for (i, n) in s.iter().enumerate() {
        assert_eq!(n.counters.drops(), 0, "node {i}: {:?}", n.counters);
        assert_eq!(n.counters.redirected, 0, "node {i}");
        assert_eq!(n.ports.by_hops[2], 0, "node {i}: a frame took two hops");
        assert_eq!(n.link.tx, n.counters.ic_tx, "node {i}: link vs node");
        assert_eq!(n.link.rx, n.counters.ic_rx, "node {i}: link vs node");
        // (`rx_ignored` is not checked: the bridge itself sends an IGMP report when it joins the
        // multicast-router-discovery group; the link ignores it, as it should.)
        assert_eq!(
            (n.link.rx_dropped, n.link.tx_dropped),
            (0, 0),
            "node {i}: {:?}",
            n.link
        );
        for (p, pc) in n.ports.ports.iter().enumerate() {
            assert_eq!(
                (pc.rx_dropped, pc.tx_dropped),
                (0, 0),
                "node {i} port {p}: {pc:?}"
            );
        }
        // Flood copies: every other local port for a local flood, every port for a remote one.
        assert_eq!(
            n.counters.flood_emitted,
            n.counters.flooded + 2 * n.counters.flood_ic_rx
        );
        // Unicast frames emitted after an interconnect hop are exactly the unicast frames received
        // from it; flood copies from remote floods also carry one hop.
        assert_eq!(
            n.ports.by_hops[1],
            (n.counters.ic_rx - n.counters.flood_ic_rx) + 2 * n.counters.flood_ic_rx
        );
    }
    let (a, b) = (&s[0], &s[1]);
    assert_eq!(
        a.counters.ic_tx, b.counters.ic_rx,
        "node 0 → node 1 lost or duplicated"
    );
    assert_eq!(
        b.counters.ic_tx, a.counters.ic_rx,
        "node 1 → node 0 lost or duplicated"
    );
    assert_eq!(a.counters.flooded, b.counters.flood_ic_rx);
    assert_eq!(b.counters.flooded, a.counters.flood_ic_rx);
}

fn delta(after: &NodeStats, before: &NodeStats) -> Counters {
    let (a, b) = (&after.counters, &before.counters);
    Counters {
        ext_rx: a.ext_rx - b.ext_rx,
        emitted: a.emitted - b.emitted,
        ic_rx: a.ic_rx - b.ic_rx,
        ic_tx: a.ic_tx - b.ic_tx,
        drop_unknown: a.drop_unknown - b.drop_unknown,
        flooded: a.flooded - b.flooded,
        ..Counters::default()
    }
}

fn payload(tag: &str, i: usize) -> Vec<u8> {
    let mut p = format!("fp-cluster-live {tag} {i:05} ").into_bytes();
    p.resize(200, b'.');
    p
}

/// `k` datagrams from `client` to `server` (UDP port 7000), each echoed back; request/response, one
/// at a time. Returns an error if a reply is missing or wrong.
fn udp_exchange(
    client: &Netns,
    server: &Netns,
    server_ip: &str,
    tag: &str,
    k: usize,
) -> Result<()> {
    let addr = format!("{server_ip}:7000");
    let srv = server.enter(|| UdpSocket::bind(&addr))??;
    let cli = client.enter(|| UdpSocket::bind("0.0.0.0:0"))??;
    srv.set_read_timeout(Some(Duration::from_secs(5)))?;
    cli.set_read_timeout(Some(Duration::from_secs(3)))?;
    cli.connect(&addr)?;
    std::thread::scope(|s| -> Result<()> {
        let echo = s.spawn(|| -> Result<Vec<Vec<u8>>> {
            let mut got = vec![];
            let mut buf = [0u8; 2048];
            for _ in 0..k {
                let (n, from) = srv.recv_from(&mut buf).context("echo server: recv")?;
                got.push(buf[..n].to_vec());
                srv.send_to(&buf[..n], from)?;
            }
            Ok(got)
        });
        let mut buf = [0u8; 2048];
        for i in 0..k {
            let p = payload(tag, i);
            cli.send(&p)?;
            let n = cli
                .recv(&mut buf)
                .with_context(|| format!("{tag}: no reply to datagram {i}"))?;
            ensure!(buf[..n] == p[..], "{tag}: wrong reply to datagram {i}");
        }
        let got = echo.join().expect("echo thread panicked")?;
        ensure!(
            got == (0..k).map(|i| payload(tag, i)).collect::<Vec<_>>(),
            "{tag}: the server saw other datagrams than were sent"
        );
        Ok(())
    })
}

/// A deterministic byte stream.
fn stream(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (fp_hash::splitmix64(seed ^ (i as u64 / 8)) >> ((i % 8) * 8)) as u8)
        .collect()
}

/// Bulk TCP both ways: the client sends 256 KiB and closes its side; the server checks the bytes
/// and answers with 256 KiB of its own.
fn tcp_exchange(client: &Netns, server: &Netns, server_ip: &str) -> Result<()> {
    const LEN: usize = 256 << 10;
    let addr = format!("{server_ip}:7001");
    let lis = server.enter(|| TcpListener::bind(&addr))??;
    std::thread::scope(|s| -> Result<()> {
        let srv = s.spawn(|| -> Result<()> {
            let (mut c, _) = lis.accept()?;
            c.set_read_timeout(Some(Duration::from_secs(10)))?;
            let mut got = vec![];
            c.read_to_end(&mut got)?;
            ensure!(
                got == stream(1, LEN),
                "server: stream from the client damaged"
            );
            c.write_all(&stream(2, LEN))?;
            c.shutdown(Shutdown::Write)?;
            Ok(())
        });
        let mut c = client.enter(|| {
            TcpStream::connect_timeout(&addr.parse().unwrap(), Duration::from_secs(5))
        })??;
        c.set_read_timeout(Some(Duration::from_secs(10)))?;
        c.write_all(&stream(1, LEN))?;
        c.shutdown(Shutdown::Write)?;
        let mut got = vec![];
        c.read_to_end(&mut got)?;
        srv.join().expect("server thread panicked")?;
        ensure!(
            got == stream(2, LEN),
            "client: stream from the server damaged"
        );
        Ok(())
    })
}

/// `InCsumErrors` of TCP and UDP in a namespace (/proc/net/snmp).
fn csum_errors(ns: &Netns) -> Result<u64> {
    let out = ns.cmd(["cat", "/proc/net/snmp"]).run()?;
    let lines: Vec<&str> = out.stdout.lines().collect();
    let mut total = 0;
    for proto in ["Tcp:", "Udp:"] {
        let rows: Vec<&&str> = lines.iter().filter(|l| l.starts_with(proto)).collect();
        ensure!(rows.len() == 2, "no {proto} rows in /proc/net/snmp");
        let names: Vec<&str> = rows[0].split_whitespace().collect();
        let values: Vec<&str> = rows[1].split_whitespace().collect();
        let i = names
            .iter()
            .position(|n| *n == "InCsumErrors")
            .context("no InCsumErrors column")?;
        total += values[i].parse::<u64>()?;
    }
    Ok(total)
}

/// An interconnect frame seen in a capture.
struct Captured {
    outer_src: MacAddr,
    outer_dst: MacAddr,
    kind: Kind,
    hops: u8,
    inner: Vec<u8>,
}

/// The frames of a capture; an error if any is not a valid interconnect frame.
fn interconnect_frames(path: &std::path::Path) -> Result<Vec<Captured>> {
    let mut r = fp_engine::pcap::PcapReader::open(path)?;
    let mut v = vec![];
    while let Some((_, f)) = r.next_frame() {
        let Ok(ic) = Interconnect::new_checked(f) else {
            bail!(
                "a non-interconnect frame on the interconnect: {:02x?}",
                &f[..f.len().min(34)]
            );
        };
        v.push(Captured {
            outer_src: MacAddr(f[6..12].try_into()?),
            outer_dst: MacAddr(f[..6].try_into()?),
            kind: ic.kind(),
            hops: ic.hops(),
            inner: ic.inner().to_vec(),
        });
    }
    Ok(v)
}

#[test]
fn two_node_cluster_on_veths_and_a_bridge() -> Result<()> {
    let net = TestNet::new("cluster")?;
    let topo = topology(&net)?;

    // Control plane: the four host MACs, static.
    let cfg = ClusterConfig::new(2, Mode::ScaleBricks, 2, 64);
    let entries: Vec<(u64, u8, u16)> = HOSTS
        .iter()
        .map(|&(node, port, mac, _)| (MacAddr(mac).to_u64(), node, port))
        .collect();
    let (tables, mut control) = build_tables(&cfg, &entries)?;
    let mut nodes: Vec<LiveNode> = vec![];
    for (i, t) in tables.into_iter().enumerate() {
        let ports = topo.nodes[i].enter(|| harness::open(&["p0", "p1"], "ic0", "af_packet"))??;
        nodes.push(harness::start(cfg.node_config(i as u8), t, ports)?);
    }

    // The nodes run on their own threads for the whole test; the scenario reads their counters.
    // Stopped (and drained) when the scenario ends, also on a failed assertion.
    let r = scenario(&topo, &mut control, &nodes);
    for n in nodes {
        n.stop()?;
    }
    r
}

/// The phases of the test, on the running cluster.
fn scenario(topo: &Topology, control: &mut Controller, pubs: &[LiveNode]) -> Result<()> {
    let h = &topo.hosts;

    // 1. Pings: across the cluster both ways (the first of each needs ARP, a broadcast flooded
    // through the interconnect), and between the two hosts of one node.
    let s0 = settle(pubs);
    h[0].ping("10.77.0.3", 3)
        .context("h0 (node 0) → h2 (node 1)")?;
    h[2].ping("10.77.0.1", 3)
        .context("h2 (node 1) → h0 (node 0)")?;
    h[3].ping("10.77.0.2", 3)
        .context("h3 (node 1) → h1 (node 0)")?;
    h[1].ping("10.77.0.4", 3)
        .context("h1 (node 0) → h3 (node 1)")?;
    h[0].ping("10.77.0.2", 3)
        .context("h0 → h1 (both on node 0)")?;
    h[3].ping("10.77.0.3", 3)
        .context("h3 → h2 (both on node 1)")?;
    let s1 = settle(pubs);
    check_invariants(&s1);
    let d: Vec<Counters> = (0..2).map(|i| delta(&s1[i], &s0[i])).collect();
    // At least the ARP requests of h0 (for h2, then h1) at node 0 and of h3 (for h1, then h2) at
    // node 1; h2 and h1 answer from entries they learned from the requests they received.
    assert!(d[0].flooded >= 2 && d[1].flooded >= 2, "{d:?}");
    // 4 cross-node pings of 3 echo requests and 3 replies: at least 12 unicast frames each way.
    for (i, x) in d.iter().enumerate() {
        assert!(x.ic_tx >= 12 + x.flooded, "node {i}: {x:?}");
    }
    // The same-node pings never touched the interconnect: 0-hop deliveries on both nodes.
    for (i, s) in s1.iter().enumerate() {
        assert!(s.ports.by_hops[0] >= 6, "node {i}: {:?}", s.ports);
    }

    // ARP through the cluster is proven; pin the neighbours now, so that no unicast ARP probe
    // (sent some seconds after an entry learned from a request is used) mixes with the frames the
    // next phases count exactly.
    for (i, hns) in h.iter().enumerate() {
        for (j, &(_, _, mac, ip)) in HOSTS.iter().enumerate() {
            if i != j {
                hns.ip(&[
                    "neigh",
                    "replace",
                    ip,
                    "lladdr",
                    &mac_str(mac),
                    "dev",
                    "eth0",
                    "nud",
                    "permanent",
                ])?;
            }
        }
    }

    // 2. UDP request/response h0 (node 0) ↔ h2 (node 1), captured on the bridge port of node 0's
    // interconnect: every datagram crosses once, as one encapsulated frame with one hop.
    const K: usize = 40;
    let cap = topo.bridge_ports[0].capture(&["ether", "proto", "0x88b5"])?;
    let s1 = settle(pubs);
    udp_exchange(&h[0], &h[2], "10.77.0.3", "udp", K)?;
    let s2 = settle(pubs);
    // Let tcpdump write what it saw, then stop it.
    std::thread::sleep(Duration::from_millis(200));
    let pcap = cap.stop()?;
    check_invariants(&s2);
    let d: Vec<Counters> = (0..2).map(|i| delta(&s2[i], &s1[i])).collect();
    for (i, x) in d.iter().enumerate() {
        assert_eq!(
            (x.ext_rx, x.ic_tx, x.ic_rx, x.emitted, x.flooded),
            (K as u64, K as u64, K as u64, K as u64, 0),
            "node {i}: one frame in, one across, one out per datagram"
        );
    }
    let frames = interconnect_frames(&pcap)?;
    assert_eq!(frames.len(), 2 * K, "interconnect frames captured");
    for (tag, from, to, inner_dst) in [
        ("request", 0u8, 1u8, HOSTS[2].2),
        ("reply", 1, 0, HOSTS[0].2),
    ] {
        for i in 0..K {
            let p = payload("udp", i);
            let hits: Vec<&Captured> = frames
                .iter()
                .filter(|f| f.inner.windows(p.len()).any(|w| w == p))
                .filter(|f| f.inner[..6] == inner_dst)
                .collect();
            assert_eq!(
                hits.len(),
                1,
                "{tag} {i}: crossed the interconnect {} times",
                hits.len()
            );
            let f = hits[0];
            assert_eq!(
                (f.outer_src, f.outer_dst, f.kind, f.hops),
                (node_mac(from), node_mac(to), Kind::ToOwner, 1),
                "{tag} {i}"
            );
        }
    }
    // Inside: the hosts' IPv4 frames, byte for byte as they left the sending host (the payload
    // matched above; the inner Ethernet header carries IPv4).
    assert!(frames.iter().all(|f| f.inner[12..14] == [0x08, 0x00]));

    // 3. Bulk TCP both ways h1 (node 0) ↔ h3 (node 1): bytes intact, no checksum errors.
    tcp_exchange(&h[1], &h[3], "10.77.0.4")?;
    let s3 = settle(pubs);
    check_invariants(&s3);
    for ns in [&h[1], &h[3], &h[0], &h[2]] {
        assert_eq!(
            csum_errors(ns)?,
            0,
            "checksum errors in {}",
            ns.short_name()
        );
    }
    assert!(
        s3[1].counters.emitted - s2[1].counters.emitted > (256 << 10) / 1500,
        "the client's stream reached node 1's port"
    );

    // 4. The control plane on the running cluster: remove h2's entry — h0's datagrams to h2 are
    // dropped as unknown, none reaches h2; restore it — the exchange works again.
    let h2_key = MacAddr(HOSTS[2].2).to_u64();
    assert_eq!(control.remove(h2_key)?, Update::Deleted);
    let srv = h[2].enter(|| UdpSocket::bind("10.77.0.3:7002"))??;
    srv.set_nonblocking(true)?;
    let cli = h[0].enter(|| UdpSocket::bind("0.0.0.0:0"))??;
    let s3 = settle(pubs);
    for i in 0..5 {
        cli.send_to(&payload("gone", i), "10.77.0.3:7002")?;
    }
    let unknown = |s: &[NodeStats]| s.iter().map(|n| n.counters.drop_unknown).sum::<u64>();
    let before = unknown(&s3);
    wait_for(pubs, |s| unknown(s) >= before + 5);
    let s4 = settle(pubs);
    let mut buf = [0u8; 2048];
    assert!(
        srv.recv_from(&mut buf).is_err(),
        "a datagram to a removed MAC arrived"
    );
    let dropped: u64 = (0..2).map(|i| delta(&s4[i], &s3[i]).drop_unknown).sum();
    assert_eq!(
        dropped, 5,
        "datagrams to the removed MAC dropped as unknown"
    );
    assert_eq!(
        s4[1].ports.ports[0].tx, s3[1].ports.ports[0].tx,
        "nothing emitted to h2's port"
    );
    assert_eq!(control.set(h2_key, 1, 0)?, Update::Added);
    udp_exchange(&h[0], &h[2], "10.77.0.3", "back", 5)?;
    let s5 = settle(pubs);
    assert_eq!(s5[1].counters.drop_unknown, s4[1].counters.drop_unknown);
    assert_eq!(s5[0].counters.drop_unknown, s4[0].counters.drop_unknown);
    Ok(())
}
