//! fp-testnet builds working networks: two namespaces on a veth, three on a bridge, and a routed
//! client → router → ECMP → servers topology with nginx, wrk, iperf3, tcpdump and scapy.
//! These are live tests: they need root and the tools of scripts/deps.sh, and fail (with the
//! reason) where they cannot run.

use fp_testnet::{NginxConfig, TestNet, WrkOptions};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

#[test]
fn two_namespaces_ping_and_talk() -> anyhow::Result<()> {
    let net = TestNet::new("ping2")?;
    let a = net.ns("a")?;
    let b = net.ns("b")?;
    assert!(a.name().starts_with(net.id()) && a.name().ends_with("-a"));
    let (ea, eb) = net.veth(&a, "eth0", &b, "eth0")?;
    ea.addr_add("10.77.0.1/24")?;
    eb.addr_add("10.77.0.2/24")?;
    a.ping("10.77.0.2", 2)?;
    b.ping("10.77.0.1", 1)?;
    // The two ends are a pair: each is the other's peer, with distinct MACs.
    assert_ne!(ea.mac()?, eb.mac()?);
    assert!(ea.ifindex()? > 1);
    assert!(eb.stats()?.rx_packets >= 2);

    // Rust code in each namespace: a listener in b, a client in a.
    let listener = b.enter(|| TcpListener::bind("10.77.0.2:7000"))??;
    let server = std::thread::spawn(move || -> std::io::Result<String> {
        let (mut s, peer) = listener.accept()?;
        let mut buf = String::new();
        s.read_to_string(&mut buf)?;
        Ok(format!("{buf} from {}", peer.ip()))
    });
    a.enter(|| -> std::io::Result<()> {
        let mut c = TcpStream::connect("10.77.0.2:7000")?;
        c.write_all(b"hello")
    })??;
    assert_eq!(server.join().unwrap()?, "hello from 10.77.0.1");
    // Sysctls are per namespace.
    a.sysctl("net.ipv4.ip_forward", "1")?;
    assert_eq!(a.sysctl_get("net.ipv4.ip_forward")?, "1");
    assert_eq!(b.sysctl_get("net.ipv4.ip_forward")?, "0");
    let seen = a.cmd(["cat", "/proc/sys/net/ipv4/ip_forward"]).run()?;
    assert_eq!(seen.stdout.trim(), "1");

    // Offloads (docs/platform.md, "Partial checksums on veth").
    assert!(ea.feature_on("tx-checksumming")?);
    ea.tx_checksum_off()?;
    assert!(!ea.feature_on("tx-checksumming")?);

    // Commands: output, failures, time limits, missing programs.
    let out = a.cmd(["sh", "-c", "echo out; echo err >&2"]).run()?;
    assert_eq!(
        (out.stdout.as_str(), out.stderr.as_str()),
        ("out\n", "err\n")
    );
    let fail = a
        .cmd(["sh", "-c", "echo why >&2; exit 3"])
        .run()
        .unwrap_err();
    assert!(
        fail.to_string().contains("exit status 3") && fail.to_string().contains("why"),
        "{fail}"
    );
    let t0 = std::time::Instant::now();
    let slow = a
        .cmd(["sleep", "10"])
        .timeout(Duration::from_millis(300))
        .run();
    assert!(
        matches!(slow, Err(fp_testnet::Error::Timeout { .. })),
        "{slow:?}"
    );
    assert!(t0.elapsed() < Duration::from_secs(5));
    let missing = a.cmd(["fp-no-such-program"]).run().unwrap_err();
    assert!(
        matches!(missing, fp_testnet::Error::MissingTool { .. }),
        "{missing}"
    );
    Ok(())
}

#[test]
fn bridge_of_three() -> anyhow::Result<()> {
    let net = TestNet::new("bridge3")?;
    let sw = net.ns("sw")?;
    let br = sw.bridge("br0")?;
    let mut hosts = Vec::new();
    for i in 1..=3 {
        let h = net.ns(&format!("h{i}"))?;
        let (eth, port) = net.veth(&h, "eth0", &sw, &format!("p{i}"))?;
        port.set_master(&br)?;
        eth.addr_add(&format!("10.78.0.{i}/24"))?;
        hosts.push((h, eth));
    }
    let cap = hosts[2].1.capture(&["icmp"])?;
    for (i, (h, _)) in hosts.iter().enumerate() {
        for j in 1..=3 {
            if j != i + 1 {
                h.ping(&format!("10.78.0.{j}"), 1)?;
            }
        }
    }
    let pcap = cap.stop()?;
    // h3 took part in 4 of the 6 pings (2 as pinger, 2 as target): 4 echo requests and 4 replies
    // to or from 10.78.0.3 on its link (other hosts' frames may appear while the bridge learns).
    let out = hosts[0]
        .0
        .cmd([
            "tshark".as_ref(),
            "-r".as_ref(),
            pcap.as_os_str(),
            "-T".as_ref(),
            "fields".as_ref(),
            "-e".as_ref(),
            "ip.src".as_ref(),
            "-e".as_ref(),
            "ip.dst".as_ref(),
            "-e".as_ref(),
            "icmp.type".as_ref(),
        ])
        .run()?;
    let mine: Vec<&str> = out
        .stdout
        .lines()
        .filter(|l| l.contains("10.78.0.3"))
        .collect();
    let requests = mine.iter().filter(|l| l.ends_with("\t8")).count();
    let replies = mine.iter().filter(|l| l.ends_with("\t0")).count();
    assert_eq!((requests, replies, mine.len()), (4, 4, 8), "{}", out.stdout);
    // The bridge learned the three hosts' MACs on their ports.
    let fdb = sw.cmd(["bridge", "fdb", "show", "br", "br0"]).run()?.stdout;
    for (_, eth) in &hosts {
        assert!(fdb.contains(&eth.mac_string()?), "{fdb}");
    }
    Ok(())
}

/// client → router → ECMP over two servers that both hold the VIP on lo (the shape of the
/// scale-out tests): connections spread over both paths, nginx and Python's http.server answer,
/// wrk and iperf3 run through the router.
#[test]
fn routed_ecmp_with_servers() -> anyhow::Result<()> {
    let net = TestNet::new("ecmp")?;
    net.require_tools(&["nginx", "wrk", "iperf3", "curl"])?;
    let client = net.ns("client")?;
    let router = net.ns("router")?;
    let (c0, r0) = net.veth(&client, "eth0", &router, "eth0")?;
    c0.addr_add("10.79.0.2/24")?;
    r0.addr_add("10.79.0.1/24")?;
    client.route_add("default", "10.79.0.1")?;
    router.sysctl("net.ipv4.ip_forward", "1")?;
    router.sysctl("net.ipv4.fib_multipath_hash_policy", "1")?;
    let vip = "10.100.9.9";
    let mut gws = Vec::new();
    let mut servers = Vec::new();
    for i in 1..=2u8 {
        let s = net.ns(&format!("s{i}"))?;
        let (r, e) = net.veth(&router, &format!("eth{i}"), &s, "eth0")?;
        r.addr_add(&format!("10.79.{i}.1/24"))?;
        e.addr_add(&format!("10.79.{i}.2/24"))?;
        e.tx_checksum_off()?;
        s.route_add("default", &format!("10.79.{i}.1"))?;
        s.lo().addr_add(&format!("{vip}/32"))?;
        gws.push(format!("10.79.{i}.2"));
        servers.push(s);
    }
    let gw_refs: Vec<&str> = gws.iter().map(String::as_str).collect();
    router.route_add_multipath(&format!("{vip}/32"), &gw_refs)?;
    assert!(router.routes()?.contains("nexthop via 10.79.2.2"));

    let ngx = servers[0].nginx(&NginxConfig {
        body: "server 1\n".into(),
        ..Default::default()
    })?;
    let www = net.dir("www2")?;
    std::fs::write(www.join("index.html"), "server 2\n")?;
    let py = servers[1].http_server(80, &www)?;

    let mut seen = [0u32; 2];
    for _ in 0..24 {
        let out = client
            .cmd(["curl", "-s", "-m", "3", &format!("http://{vip}/")])
            .run()?;
        match out.stdout.as_str() {
            "server 1\n" => seen[0] += 1,
            "server 2\n" => seen[1] += 1,
            other => panic!("unexpected answer {other:?}"),
        }
    }
    // 24 connections with random source ports on a 5-tuple hash: both paths get some
    // (all on one path has probability 2^-23).
    assert!(seen[0] > 0 && seen[1] > 0, "ECMP did not spread: {seen:?}");

    let wrk = client.wrk(
        &format!("http://{vip}/"),
        &WrkOptions {
            connections: 8,
            duration: Duration::from_secs(1),
            ..Default::default()
        },
    )?;
    assert!(wrk.requests > 0 && wrk.errors() == 0, "{wrk:?}");

    servers[0].iperf3_server(5201)?;
    let ip = client.iperf3_client("10.79.1.2", 5201, 1, &[])?;
    assert!(ip.sent_bps > 1e6, "{ip:?}");

    // scapy builds and parses packets in a namespace.
    let sc = client.scapy(
        "p = Ether(dst='ff:ff:ff:ff:ff:ff')/IP(dst='10.79.1.2')/UDP(dport=9)\nprint(len(raw(p)))",
    )?;
    assert_eq!(sc.stdout.trim(), "42");

    assert!(ngx.proc.is_running() && py.is_running());
    ngx.proc.stop(Duration::from_secs(2));
    assert!(!ngx.proc.is_running());
    Ok(())
}
