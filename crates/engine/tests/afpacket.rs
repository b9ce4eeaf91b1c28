//! The AF_PACKET port on live veths in network namespaces (fp-testnet): frames in and out (checked
//! by the kernel's own UDP stack on the far side), PACKET_IGNORE_OUTGOING, flow-hash fan-out over
//! several sockets, completion of the partial checksums a kernel TCP sender leaves on veth, VLAN
//! tags, and ring-overflow accounting.
//!
//! Live tests: they need root (CI is root). Where they cannot run they fail with the reason.

use fp_engine::afpacket::{AfPacketConfig, AfPacketPort, FanoutMode};
use fp_engine::port::Port;
use fp_pipeline::packet::{burst, Pool};
use fp_testnet::{Link, Netns, TestNet};
use fp_wire::ethernet::{EtherType, EthernetRepr, MacAddr};
use fp_wire::ip::{IpPair, IpProtocol};
use fp_wire::ipv4::Ipv4Repr;
use fp_wire::udp::UdpRepr;
use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

const A_IP: Ipv4Addr = Ipv4Addr::new(10, 81, 0, 1);
const B_IP: Ipv4Addr = Ipv4Addr::new(10, 81, 0, 2);
const MARK: &[u8; 5] = b"FPAFP";

struct Pair {
    net: TestNet,
    a: Netns,
    b: Netns,
    ea: Link,
    eb: Link,
}

/// Namespaces a and b joined by a veth (eth0 in each), IPv6 off so no stray ND/MLD frames.
fn pair(tag: &str) -> Pair {
    let net = TestNet::new(tag).expect("live AF_PACKET test cannot run");
    let a = net.ns("a").unwrap();
    let b = net.ns("b").unwrap();
    for ns in [&a, &b] {
        ns.sysctl("net.ipv6.conf.all.disable_ipv6", "1").unwrap();
        ns.sysctl("net.ipv6.conf.default.disable_ipv6", "1")
            .unwrap();
    }
    let (ea, eb) = net.veth(&a, "eth0", &b, "eth0").unwrap();
    ea.addr_add(&format!("{A_IP}/24")).unwrap();
    eb.addr_add(&format!("{B_IP}/24")).unwrap();
    Pair { net, a, b, ea, eb }
}

fn open(ns: &Netns, cfg: &AfPacketConfig) -> AfPacketPort {
    ns.enter(|| AfPacketPort::open("eth0", cfg))
        .unwrap()
        .unwrap_or_else(|e| panic!("opening the AF_PACKET port in {}: {e}", ns.name()))
}

/// An Ethernet/IPv4/UDP frame with valid checksums carrying `MARK`, `flow`, `seq`.
fn udp_frame(src_mac: [u8; 6], dst_mac: [u8; 6], sport: u16, flow: u32, seq: u32) -> Vec<u8> {
    let mut payload = MARK.to_vec();
    payload.extend_from_slice(&flow.to_be_bytes());
    payload.extend_from_slice(&seq.to_be_bytes());
    let udp_len = 8 + payload.len();
    let mut f = vec![0u8; 14 + 20 + udp_len];
    EthernetRepr {
        src_addr: MacAddr(src_mac),
        dst_addr: MacAddr(dst_mac),
        ethertype: EtherType::IPV4,
    }
    .emit(&mut f)
    .unwrap();
    Ipv4Repr::new(A_IP, B_IP, IpProtocol::UDP, udp_len as u16, 64)
        .emit(&mut f[14..])
        .unwrap();
    f[42..].copy_from_slice(&payload);
    UdpRepr {
        src_port: sport,
        dst_port: 9999,
    }
    .emit(&mut f[34..], Some(&IpPair::V4(A_IP, B_IP)))
    .unwrap();
    f
}

/// (flow, seq) of a frame made by `udp_frame` (untagged or with one VLAN tag), else None.
fn marked(frame: &[u8]) -> Option<(u32, u32)> {
    let l3 = if frame.get(12..14)? == [0x81, 0x00] {
        18
    } else {
        14
    };
    let p = frame.get(l3 + 28..)?;
    if p.len() < 13 || &p[..5] != MARK {
        return None;
    }
    Some((
        u32::from_be_bytes(p[5..9].try_into().ok()?),
        u32::from_be_bytes(p[9..13].try_into().ok()?),
    ))
}

fn send(port: &mut AfPacketPort, pool: &mut Pool, frames: &[Vec<u8>]) -> usize {
    let mut sent = 0;
    for chunk in frames.chunks(32) {
        let mut b = burst();
        for f in chunk {
            let mut p = pool.get().expect("pool");
            assert!(p.fill(f));
            b.push(p);
        }
        sent += port.tx_burst(&mut b, pool);
        assert!(b.is_empty(), "tx_burst drains its batch");
    }
    sent
}

/// Receive from every port until `done(received)` or `timeout`; returns, per port, the frames that
/// satisfy `keep`.
fn collect(
    ports: &mut [&mut AfPacketPort],
    keep: impl Fn(&[u8]) -> bool,
    done: impl Fn(&[Vec<Vec<u8>>]) -> bool,
    timeout: Duration,
) -> Vec<Vec<Vec<u8>>> {
    let mut pool = Pool::new(256);
    let mut got = vec![Vec::new(); ports.len()];
    let deadline = Instant::now() + timeout;
    while !done(&got) && Instant::now() < deadline {
        let mut any = false;
        for (i, port) in ports.iter_mut().enumerate() {
            let mut rx = burst();
            if port.rx_burst(&mut pool, &mut rx, 32) > 0 {
                any = true;
            }
            for p in rx.drain(..) {
                if keep(p.data()) {
                    got[i].push(p.data().to_vec());
                }
                pool.put(p);
            }
        }
        if !any {
            let _ = ports[0].wait_rx(Duration::from_millis(5));
        }
    }
    got
}

fn total(v: &[Vec<Vec<u8>>]) -> usize {
    v.iter().map(Vec::len).sum()
}

/// An independent TCP/UDP-over-IPv4 checksum check (RFC 1071 written out here, not fp-wire's):
/// `Some(valid)` for an untagged IPv4 TCP/UDP frame, else `None`.
fn l4_checksum_ok(f: &[u8]) -> Option<bool> {
    if f.get(12..14)? != [0x08, 0x00] {
        return None;
    }
    let ip = &f[14..];
    let ihl = usize::from(ip.first()? & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes([*ip.get(2)?, *ip.get(3)?]));
    let proto = *ip.get(9)?;
    if proto != 6 && proto != 17 {
        return None;
    }
    let seg = ip.get(ihl..total)?;
    let mut sum: u32 = 0;
    let mut add = |b: &[u8]| {
        for c in b.chunks(2) {
            sum += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
        }
    };
    add(&ip[12..20]);
    add(&[0, proto]);
    add(&(seg.len() as u16).to_be_bytes());
    add(seg);
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    Some(sum == 0xffff)
}

#[test]
fn frames_in_and_out() {
    let Pair {
        net: _net,
        a,
        b,
        ea,
        eb,
    } = pair("afpio");
    let (amac, bmac) = (ea.mac().unwrap(), eb.mac().unwrap());
    let mut pa = open(&a, &AfPacketConfig::default());
    let mut pb = open(&b, &AfPacketConfig::default());
    // A second port on b that also sees what leaves the interface.
    let mut pb_out = open(
        &b,
        &AfPacketConfig {
            ignore_outgoing: false,
            ..Default::default()
        },
    );
    assert!(pa.fanout_group().is_none());
    assert_eq!(pa.ifname(), "eth0");
    assert_eq!(pa.ifindex(), ea.ifindex().unwrap());
    let sock = b.enter(|| UdpSocket::bind((B_IP, 9999))).unwrap().unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(2))).unwrap();

    // b's kernel receives on a thread while a's port sends 200 frames (no socket-buffer build-up).
    let rsock = sock.try_clone().unwrap();
    let receiver = std::thread::spawn(move || {
        let mut buf = [0u8; 64];
        (0..200)
            .map(|_| {
                let (n, from) = rsock.recv_from(&mut buf).expect("datagram from a's port");
                (from, buf[..n].to_vec())
            })
            .collect::<Vec<_>>()
    });
    let frames: Vec<Vec<u8>> = (0..200)
        .map(|i| udp_frame(amac, bmac, 40000, 0, i))
        .collect();
    let mut pool = Pool::new(64);
    assert_eq!(send(&mut pa, &mut pool, &frames), 200);
    assert_eq!(pa.stats().tx, 200);
    assert_eq!(pa.stats().tx_dropped, 0);

    // b's kernel accepted every one (so the frames and their checksums were right) ...
    for (i, (from, d)) in receiver.join().unwrap().into_iter().enumerate() {
        assert_eq!(from, (A_IP, 40000).into());
        assert_eq!(d.len(), 13);
        assert_eq!(&d[..5], MARK);
        assert_eq!(u32::from_be_bytes(d[5..9].try_into().unwrap()), 0);
        assert_eq!(u32::from_be_bytes(d[9..13].try_into().unwrap()), i as u32);
    }
    // ... and b's port received them byte for byte, in order.
    let got = collect(
        &mut [&mut pb],
        |f| marked(f).is_some(),
        |g| total(g) >= 200,
        Duration::from_secs(5),
    );
    assert_eq!(got[0], frames);
    assert!(pb.stats().rx >= 200);

    // b's kernel answers a (it sends from b's eth0): pb ignores outgoing frames, pb_out does not,
    // and a's port receives them with checksums completed (tx offload is on: the kernel left
    // them partial).
    for i in 0..10u32 {
        let mut m = MARK.to_vec();
        m.extend_from_slice(&1u32.to_be_bytes());
        m.extend_from_slice(&i.to_be_bytes());
        sock.send_to(&m, (A_IP, 7777)).unwrap();
    }
    let at_a = collect(
        &mut [&mut pa],
        |f| marked(f).is_some(),
        |g| total(g) >= 10,
        Duration::from_secs(5),
    );
    assert_eq!(at_a[0].len(), 10);
    for f in &at_a[0] {
        assert_eq!(
            l4_checksum_ok(f),
            Some(true),
            "checksum not completed: {f:02x?}"
        );
    }
    let st = pa.afp_stats();
    assert!(st.rx_csum_partial >= 10, "{st:?}");
    assert_eq!(st.rx_csum_completed, st.rx_csum_partial, "{st:?}");
    // pa never saw its own 200 transmissions (they were outgoing on a's eth0).
    assert!(at_a[0].iter().all(|f| marked(f).unwrap().0 == 1));

    let b_out = collect(
        &mut [&mut pb_out],
        |f| marked(f).is_some_and(|(flow, _)| flow == 1),
        |g| total(g) >= 10,
        Duration::from_secs(5),
    );
    assert_eq!(
        b_out[0].len(),
        10,
        "the port without IGNORE_OUTGOING sees b's own sends"
    );
    let b_in = collect(
        &mut [&mut pb],
        |f| marked(f).is_some_and(|(flow, _)| flow == 1),
        |_| false,
        Duration::from_millis(300),
    );
    assert!(b_in[0].is_empty(), "IGNORE_OUTGOING let b's own sends in");
}

#[test]
fn fanout_hash_keeps_each_flow_on_one_socket() {
    let Pair {
        net: _net,
        a,
        b,
        ea,
        eb,
    } = pair("afpfanout");
    let (amac, bmac) = (ea.mac().unwrap(), eb.mac().unwrap());
    let mut pa = open(&a, &AfPacketConfig::default());
    let cfg = AfPacketConfig::default();
    let mut group = b
        .enter(|| AfPacketPort::open_fanout("eth0", &cfg, 2))
        .unwrap()
        .expect("fan-out group");
    let id = group[0].fanout_group().expect("in a group");
    assert_eq!(group[1].fanout_group(), Some(id));
    // A third member joins the same group by id.
    let third = open(
        &b,
        &AfPacketConfig {
            fanout_group: Some(id),
            ..Default::default()
        },
    );
    assert_eq!(third.fanout_group(), Some(id));
    // A member with another mode is refused: the group's mode is fixed.
    let clash = b
        .enter(|| {
            AfPacketPort::open(
                "eth0",
                &AfPacketConfig {
                    fanout_group: Some(id),
                    fanout_mode: FanoutMode::RoundRobin,
                    ..Default::default()
                },
            )
        })
        .unwrap();
    assert!(clash.is_err());
    group.push(third);

    // 64 flows (source ports) × 8 frames, interleaved.
    let (flows, per) = (64u32, 8u32);
    let frames: Vec<Vec<u8>> = (0..per)
        .flat_map(|s| (0..flows).map(move |f| (f, s)))
        .map(|(f, s)| udp_frame(amac, bmac, 20000 + f as u16, f, s))
        .collect();
    let mut pool = Pool::new(64);
    assert_eq!(send(&mut pa, &mut pool, &frames), frames.len());
    let mut refs: Vec<&mut AfPacketPort> = group.iter_mut().collect();
    let got = collect(
        &mut refs,
        |f| marked(f).is_some(),
        |g| total(g) >= frames.len(),
        Duration::from_secs(5),
    );
    assert_eq!(
        total(&got),
        frames.len(),
        "every frame reached exactly one socket"
    );
    let mut owner: HashMap<u32, usize> = HashMap::new();
    for (sock, fs) in got.iter().enumerate() {
        for f in fs {
            let (flow, _) = marked(f).unwrap();
            let o = *owner.entry(flow).or_insert(sock);
            assert_eq!(o, sock, "flow {flow} split across sockets {o} and {sock}");
        }
    }
    assert_eq!(owner.len(), flows as usize);
    let per_socket: Vec<usize> = (0..group.len())
        .map(|s| owner.values().filter(|&&o| o == s).count())
        .collect();
    // 64 flows on 3 sockets by a hash: each gets some (none empty: probability ~1e-11).
    assert!(
        per_socket.iter().all(|&c| c > 0),
        "flows per socket {per_socket:?}"
    );
    // Per flow, order is kept.
    for fs in &got {
        let mut last: HashMap<u32, u32> = HashMap::new();
        for f in fs {
            let (flow, seq) = marked(f).unwrap();
            if let Some(prev) = last.insert(flow, seq) {
                assert!(seq > prev, "flow {flow} reordered");
            }
        }
    }
    eprintln!("fan-out: flows per socket {per_socket:?}");
}

/// A kernel TCP sender on a veth with TX checksum offload on leaves partial checksums; the port
/// completes them (and a port told not to shows that they were partial). With offload off
/// (`ethtool -K tx off`, docs/platform.md, "Partial checksums on veth") the frames arrive complete.
#[test]
fn partial_checksums_from_kernel_tcp_are_completed() {
    let Pair {
        net: _net,
        a,
        b,
        ea,
        ..
    } = pair("afpcsum");
    assert!(ea.feature_on("tx-checksumming").unwrap(), "veth default");
    let mut fixing = open(&b, &AfPacketConfig::default());
    let mut raw = open(
        &b,
        &AfPacketConfig {
            complete_checksums: false,
            ..Default::default()
        },
    );
    let listener = b
        .enter(|| TcpListener::bind((B_IP, 8080)))
        .unwrap()
        .unwrap();
    let server = std::thread::spawn(move || {
        for _ in 0..2 {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = vec![0u8; 1000];
            s.read_exact(&mut buf).unwrap();
            s.write_all(b"ok").unwrap();
        }
    });
    let client = |a: &Netns| {
        a.enter(|| {
            let mut c = TcpStream::connect((B_IP, 8080)).unwrap();
            c.write_all(&[7u8; 1000]).unwrap();
            let mut ok = [0u8; 2];
            c.read_exact(&mut ok).unwrap();
        })
        .unwrap()
    };
    let to_server = |f: &[u8]| f.len() > 37 && f[23] == 6 && f[36..38] == 8080u16.to_be_bytes();
    // Both ports tap the same interface: read both for a while after the exchange, so each has
    // seen the whole connection (SYN, data, ACKs, FIN: at least 4 frames towards port 8080).
    let settle = Duration::from_millis(400);

    client(&a);
    let got = collect(&mut [&mut raw, &mut fixing], to_server, |_| false, settle);
    let (got_raw, got_fixed) = (&got[0], &got[1]);
    assert!(got_raw.len() >= 4, "{} frames", got_raw.len());
    assert_eq!(got_raw.len(), got_fixed.len());
    let bad_raw = got_raw
        .iter()
        .filter(|f| l4_checksum_ok(f) == Some(false))
        .count();
    assert!(
        bad_raw > 0,
        "expected partial checksums from a kernel sender with tx offload on"
    );
    // fp-wire agrees that they hold exactly the pseudo-header sum.
    let f = got_raw
        .iter()
        .find(|f| l4_checksum_ok(f) == Some(false))
        .unwrap();
    let s = fp_wire::PacketSummary::parse(f).unwrap();
    assert!(fp_wire::offload::looks_partial(f, &s).unwrap());
    let r = raw.afp_stats();
    assert!(
        r.rx_csum_partial >= bad_raw as u64 && r.rx_csum_completed == 0,
        "{r:?}"
    );
    for f in got_fixed {
        assert_eq!(l4_checksum_ok(f), Some(true), "not completed: {f:02x?}");
    }
    let s = fixing.afp_stats();
    assert_eq!(s.rx_csum_partial, r.rx_csum_partial, "{s:?} {r:?}");
    assert_eq!(s.rx_csum_completed, s.rx_csum_partial, "{s:?}");

    // Offload off on the sender: complete checksums on the wire, nothing flagged.
    ea.tx_checksum_off().unwrap();
    let before = raw.afp_stats().rx_csum_partial;
    client(&a);
    server.join().unwrap();
    let got = collect(&mut [&mut raw], to_server, |_| false, settle);
    assert!(got[0].len() >= 4, "{} frames", got[0].len());
    for f in &got[0] {
        assert_eq!(l4_checksum_ok(f), Some(true));
    }
    assert_eq!(raw.afp_stats().rx_csum_partial, before);
}

#[test]
fn vlan_tags_are_restored() {
    let Pair {
        net: _net,
        a,
        b,
        ea,
        eb,
    } = pair("afpvlan");
    let mut pa = open(&a, &AfPacketConfig::default());
    let mut pb = open(&b, &AfPacketConfig::default());
    let mut f = udp_frame(ea.mac().unwrap(), eb.mac().unwrap(), 1000, 9, 0);
    // Insert an 802.1Q tag, VID 42, PCP 5.
    f.splice(12..12, [0x81, 0x00, 0xa0, 0x2a]);
    let mut pool = Pool::new(8);
    assert_eq!(send(&mut pa, &mut pool, std::slice::from_ref(&f)), 1);
    let got = collect(
        &mut [&mut pb],
        |x| marked(x).is_some(),
        |g| total(g) >= 1,
        Duration::from_secs(5),
    );
    assert_eq!(
        got[0],
        vec![f],
        "the tag the kernel stripped is back in place"
    );
    assert_eq!(pb.afp_stats().rx_vlan_restored, 1);
}

#[test]
fn ring_overflow_is_counted_and_recovers() {
    let Pair {
        net: _net,
        a,
        b,
        ea,
        eb,
    } = pair("afpdrops");
    let (amac, bmac) = (ea.mac().unwrap(), eb.mac().unwrap());
    let mut pa = open(&a, &AfPacketConfig::default());
    // 2 blocks of one page: room for a few dozen small frames.
    let small = AfPacketConfig {
        block_size: 4096,
        block_count: 2,
        frame_size: 2048,
        ..Default::default()
    };
    let mut pb = open(&b, &small);
    let frames: Vec<Vec<u8>> = (0..2000)
        .map(|i| udp_frame(amac, bmac, 3000, 2, i))
        .collect();
    let mut pool = Pool::new(64);
    assert_eq!(send(&mut pa, &mut pool, &frames), frames.len());
    std::thread::sleep(Duration::from_millis(20)); // let the last block retire
    let got = collect(
        &mut [&mut pb],
        |f| marked(f).is_some(),
        |_| false,
        Duration::from_millis(300),
    );
    let st = pb.afp_stats();
    assert!(
        got[0].len() < 2000,
        "a two-page ring cannot hold 2000 frames"
    );
    assert!(st.rx_ring_drops > 0, "{st:?}");
    assert!(
        got[0].len() as u64 + st.rx_ring_drops >= 2000,
        "{} + {st:?}",
        got[0].len()
    );
    assert_eq!(pb.stats().rx_dropped, st.rx_ring_drops);
    // What arrived is in order and undamaged.
    let seqs: Vec<u32> = got[0].iter().map(|f| marked(f).unwrap().1).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]));
    let uniq: HashSet<u32> = seqs.iter().copied().collect();
    assert_eq!(uniq.len(), seqs.len());
    // Drained, the ring takes traffic again.
    let more: Vec<Vec<u8>> = (0..5).map(|i| udp_frame(amac, bmac, 3000, 3, i)).collect();
    send(&mut pa, &mut pool, &more);
    let got = collect(
        &mut [&mut pb],
        |f| marked(f).is_some_and(|(fl, _)| fl == 3),
        |g| total(g) >= 5,
        Duration::from_secs(5),
    );
    assert_eq!(got[0], more);
}
