//! The AF_PACKET port on live veths in network namespaces (fp-testnet): frames in and out (checked
//! by the kernel's own UDP stack on the far side), PACKET_IGNORE_OUTGOING, flow-hash fan-out over
//! several sockets, completion of the partial checksums a kernel TCP sender leaves on veth, VLAN
//! tags, ring-overflow accounting, per-frame receive times, and the tc shield that keeps the
//! host's stack from answering frames to the captured destinations.
//!
//! Live tests: they need root (CI is root). Where they cannot run they fail with the reason.

use fp_engine::afpacket::{AfPacketConfig, AfPacketPort, FanoutMode};
use fp_engine::live::{Capture, LiveSpec, Opened};
use fp_engine::port::Port;
use fp_engine::sys::monotonic_ns;
use fp_pipeline::craft::{self, Endpoints};
use fp_pipeline::packet::{burst, Pool};
use fp_testnet::{Link, Netns, TestNet};
use fp_wire::ethernet::{EtherType, EthernetRepr, MacAddr};
use fp_wire::ip::{IpPair, IpProtocol};
use fp_wire::ipv4::Ipv4Repr;
use fp_wire::udp::UdpRepr;
use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, TcpListener, TcpStream, UdpSocket};
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

/// Frames sent a few milliseconds apart and read in one `rx_burst` carry their own receive times
/// (the kernel's per-frame stamps on the monotonic clock), not one time for the burst: the gaps
/// follow the send gaps, stamps never go back, and none is later than a clock reading taken
/// after the burst.
#[test]
fn receive_times_are_per_frame() {
    let Pair {
        net: _net,
        a,
        b,
        ea,
        eb,
    } = pair("afpstamp");
    let (amac, bmac) = (ea.mac().unwrap(), eb.mac().unwrap());
    let mut pa = open(&a, &AfPacketConfig::default());
    let mut pb = open(&b, &AfPacketConfig::default());
    let mut pool = Pool::new(128);
    let gap = Duration::from_millis(3);
    let mut last = 0u64;
    for round in 0..3u32 {
        let mut sent_at = Vec::new();
        for i in 0..8u32 {
            if i > 0 {
                std::thread::sleep(gap);
            }
            sent_at.push(monotonic_ns());
            let f = udp_frame(amac, bmac, 5000, 7, round * 8 + i);
            assert_eq!(send(&mut pa, &mut pool, &[f]), 1);
        }
        let sent_end = monotonic_ns();
        // Every frame has landed and its ring block has retired (1 ms) before the one read.
        std::thread::sleep(Duration::from_millis(30));
        let mut rx = burst();
        let n = pb.rx_burst(&mut pool, &mut rx, 32);
        let after = monotonic_ns();
        let ours: Vec<(u32, u64)> = rx
            .iter()
            .filter_map(|p| marked(p.data()).map(|(_, seq)| (seq, p.ts_ns)))
            .collect();
        pool.put_all(&mut rx);
        let seqs: Vec<u32> = ours.iter().map(|&(s, _)| s).collect();
        assert_eq!(
            seqs,
            (round * 8..round * 8 + 8).collect::<Vec<_>>(),
            "round {round}: all 8 frames in one burst of {n}"
        );
        let ts: Vec<u64> = ours.iter().map(|&(_, t)| t).collect();
        eprintln!(
            "round {round}: stamp gaps (us) {:?}",
            ts.windows(2)
                .map(|w| (w[1] - w[0]) / 1000)
                .collect::<Vec<_>>()
        );
        assert!(ts[0] >= last, "stamps go forward across bursts");
        assert!(
            ts[0] + 1_000_000 >= sent_at[0],
            "the first frame is stamped when it arrived ({} ns before it was sent?)",
            sent_at[0].saturating_sub(ts[0])
        );
        assert!(*ts.last().unwrap() <= after, "no stamp after the burst");
        for (i, w) in ts.windows(2).enumerate() {
            assert!(
                w[1] - w[0] >= 1_000_000,
                "round {round}: frames {i} and {} were sent {} us apart but stamped {} us apart",
                i + 1,
                (sent_at[i + 1] - sent_at[i]) / 1000,
                w[1].saturating_sub(w[0]) / 1000
            );
        }
        let span = ts[7] - ts[0];
        assert!(
            span <= sent_end - sent_at[0] + 5_000_000,
            "stamps span {span} ns, sends {} ns",
            sent_end - sent_at[0]
        );
        last = ts[7];
    }
}

// ---------- the tc shield: the host's stack does not answer VIP frames ----------

const S_A4: &str = "10.82.0.1";
const S_B4: &str = "10.82.0.2";
const S_A6: &str = "fd00:82::1";
const S_B6: &str = "fd00:82::2";
/// On b's loopback: b's kernel answers a SYN with a RST and a UDP datagram with ICMP "port
/// unreachable" unless shielded.
const S_VIP4: &str = "203.0.113.80";
/// Not covered by any route of b: b's kernel answers with ICMPv6 "no route" unless shielded.
const S_VIP6: &str = "2001:db8:82::10";

struct ShieldNet {
    _net: TestNet,
    a: Netns,
    b: Netns,
    amac: [u8; 6],
    bmac: [u8; 6],
}

/// a (client side, an AF_PACKET port that sends and captures) and b (the balancer host) joined by
/// a veth, both families on; b holds the IPv4 VIP on its loopback, has no route for the IPv6 VIP
/// and no ICMP rate limits (so every answer it would send is sent).
fn shield_net(tag: &str) -> ShieldNet {
    let net = TestNet::new(tag).expect("live AF_PACKET shield test cannot run");
    let a = net.ns("a").unwrap();
    let b = net.ns("b").unwrap();
    let (ea, eb) = net.veth(&a, "eth0", &b, "eth0").unwrap();
    ea.addr_add(&format!("{S_A4}/24")).unwrap();
    eb.addr_add(&format!("{S_B4}/24")).unwrap();
    a.ip(&["addr", "add", &format!("{S_A6}/64"), "dev", "eth0", "nodad"])
        .unwrap();
    b.ip(&["addr", "add", &format!("{S_B6}/64"), "dev", "eth0", "nodad"])
        .unwrap();
    b.lo().addr_add(&format!("{S_VIP4}/32")).unwrap();
    b.sysctl("net.ipv4.icmp_ratelimit", "0").unwrap();
    b.sysctl("net.ipv6.icmp.ratelimit", "0").unwrap();
    assert!(
        !b.routes().unwrap().contains("default"),
        "b must have no default route"
    );
    // IPv6 neighbour discovery answers only once the solicited-node groups are joined (up to
    // about a second after carrier up): wait until both families work.
    let deadline = Instant::now() + Duration::from_secs(10);
    while a.ping(S_B6, 1).is_err() || a.ping(S_B4, 1).is_err() {
        assert!(
            Instant::now() < deadline,
            "a cannot ping b: {}",
            a.ip(&["-6", "neigh"]).map(|o| o.stdout).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let (amac, bmac) = (ea.mac().unwrap(), eb.mac().unwrap());
    ShieldNet {
        _net: net,
        a,
        b,
        amac,
        bmac,
    }
}

/// TCP SYNs and UDP datagrams from a to both VIPs, addressed to b's MAC (`round` varies the
/// source ports).
fn vip_frames(n: &ShieldNet, round: u16) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for i in 0..3u16 {
        let sport = 30000 + round * 16 + i;
        for mut f in [
            craft::tcp(&Endpoints::new(S_A4, sport, S_VIP4, 80), true),
            craft::udp(&Endpoints::new(S_A4, sport, S_VIP4, 53), 20),
            craft::tcp(&Endpoints::new(S_A6, sport, S_VIP6, 80), true),
            craft::udp(&Endpoints::new(S_A6, sport, S_VIP6, 53), 20),
        ] {
            f[..6].copy_from_slice(&n.bmac);
            f[6..12].copy_from_slice(&n.amac);
            out.push(f);
        }
    }
    out
}

/// The destination address of an untagged IPv4/IPv6 frame.
fn dst_of(f: &[u8]) -> Option<IpAddr> {
    match f.get(12..14)? {
        [0x08, 0x00] => Some(IpAddr::from(<[u8; 4]>::try_from(f.get(30..34)?).ok()?)),
        [0x86, 0xdd] => Some(IpAddr::from(<[u8; 16]>::try_from(f.get(38..54)?).ok()?)),
        _ => None,
    }
}

/// What a host's stack answers to a frame it should not have seen: a TCP RST or SYN-ACK, ICMP
/// destination unreachable, ICMPv6 destination unreachable. Echo replies, ARP and neighbour
/// discovery are not answers.
fn answer(f: &[u8]) -> Option<&'static str> {
    match f.get(12..14)? {
        [0x08, 0x00] => {
            let ihl = usize::from(f.get(14)? & 0x0f) * 4;
            let l4 = 14 + ihl;
            match f.get(23)? {
                6 if f.get(l4 + 13)? & 0x04 != 0 => Some("tcp rst (v4)"),
                6 if f.get(l4 + 13)? & 0x12 == 0x12 => Some("tcp syn-ack (v4)"),
                1 if *f.get(l4)? == 3 => Some("icmp unreachable"),
                _ => None,
            }
        }
        [0x86, 0xdd] => match f.get(20)? {
            58 if *f.get(54)? == 1 => Some("icmpv6 unreachable"),
            6 if f.get(54 + 13)? & 0x04 != 0 => Some("tcp rst (v6)"),
            _ => None,
        },
        _ => None,
    }
}

/// Receive from `port` for `dur`, returning the frames.
fn drain(port: &mut dyn Port, dur: Duration) -> Vec<Vec<u8>> {
    let mut pool = Pool::new(256);
    let mut got = Vec::new();
    let end = Instant::now() + dur;
    while Instant::now() < end {
        let mut rx = burst();
        if port.rx_burst(&mut pool, &mut rx, 32) == 0 {
            std::thread::sleep(Duration::from_millis(2));
        }
        for p in rx.drain(..) {
            got.push(p.data().to_vec());
            pool.put(p);
        }
    }
    got
}

/// Send `frames` from a's port and return the answers b's stack sent back (counted by kind)
/// within `wait`.
fn answers_to(
    n: &ShieldNet,
    pa: &mut AfPacketPort,
    frames: &[Vec<u8>],
    wait: Duration,
) -> HashMap<&'static str, usize> {
    drain(pa, Duration::from_millis(50)); // stale frames
    let mut pool = Pool::new(64);
    assert_eq!(send(pa, &mut pool, frames), frames.len());
    let mut kinds = HashMap::new();
    for f in drain(pa, wait) {
        if f[6..12] == n.bmac {
            if let Some(k) = answer(&f) {
                *kinds.entry(k).or_insert(0) += 1;
            }
        }
    }
    kinds
}

/// The VIP frames among `frames` (by destination), sorted.
fn vip_only(frames: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    let vips: [IpAddr; 2] = [S_VIP4.parse().unwrap(), S_VIP6.parse().unwrap()];
    let mut v: Vec<Vec<u8>> = frames
        .into_iter()
        .filter(|f| dst_of(f).is_some_and(|d| vips.contains(&d)))
        .collect();
    v.sort();
    v
}

fn open_live(ns: &Netns, capture: Capture) -> Opened {
    ns.enter(move || {
        fp_engine::live::driver("af_packet")
            .unwrap()
            .open(&LiveSpec::new(&["eth0"], 1, capture))
    })
    .unwrap()
    .unwrap_or_else(|e| panic!("opening the af_packet driver: {e}"))
}

/// Without the shield (Capture::All) b's stack answers the client's frames to the VIPs — ICMPv6
/// "no route" for the IPv6 VIP, RST and ICMP "port unreachable" for the IPv4 VIP on its
/// loopback. With Capture::Destinations the driver attaches the shield: the balancer's socket
/// still receives every frame, the stack answers none, and traffic to b's own addresses still
/// reaches it. Changing the destinations moves the shield; dropping the control removes it.
#[test]
fn shield_keeps_the_host_stack_from_answering_vip_traffic() {
    let n = shield_net("afpshield");
    let mut pa = open(&n.a, &AfPacketConfig::default());
    let wait = Duration::from_millis(700);

    // 1. No shield: the stack answers (this is what the shield must prevent).
    let mut opened = open_live(&n.b, Capture::All);
    assert!(
        !opened.description.contains("shield"),
        "{}",
        opened.description
    );
    let frames = vip_frames(&n, 0);
    let before = answers_to(&n, &mut pa, &frames, wait);
    eprintln!("without the shield, b's stack answered: {before:?}");
    for k in ["icmpv6 unreachable", "tcp rst (v4)", "icmp unreachable"] {
        assert!(
            before.get(k).is_some_and(|&c| c > 0),
            "{k} expected: {before:?}"
        );
    }
    let got = vip_only(drain(&mut *opened.ports[0][0], Duration::from_millis(100)));
    let mut want = frames.clone();
    want.sort();
    assert_eq!(got, want, "the port sees every VIP frame");
    drop(opened);

    // 2. Shielded: the port still receives every VIP frame; the stack answers none.
    let vips: Vec<IpAddr> = vec![S_VIP6.parse().unwrap(), S_VIP4.parse().unwrap()];
    let mut opened = open_live(&n.b, Capture::Destinations(vips));
    eprintln!("{}", opened.description);
    assert!(
        opened.description.contains("fp_vip_shield"),
        "{}",
        opened.description
    );
    for round in 1..3 {
        let frames = vip_frames(&n, round);
        let during = answers_to(&n, &mut pa, &frames, wait);
        assert!(
            during.is_empty(),
            "round {round}: b's stack answered {during:?}"
        );
        let got = vip_only(drain(&mut *opened.ports[0][0], Duration::from_millis(100)));
        let mut want = frames.clone();
        want.sort();
        assert_eq!(
            got, want,
            "round {round}: the port still receives every VIP frame"
        );
    }
    // The host's own addresses are not shielded.
    n.a.ping(S_B4, 2).expect("ping to b's IPv4 address");
    n.a.ping(S_B6, 2).expect("ping to b's IPv6 address");
    let conn =
        n.b.enter(|| TcpListener::bind((S_B4, 8081)))
            .unwrap()
            .unwrap();
    n.a.wait_tcp(
        format!("{S_B4}:8081").parse().unwrap(),
        Duration::from_secs(3),
    )
    .expect("a TCP connection to b's own address");
    drop(conn);

    // 3. Only the IPv4 VIP left: the IPv6 VIP is answered again, the IPv4 one is not.
    opened
        .control
        .set_destinations(&[S_VIP4.parse().unwrap()])
        .unwrap();
    let partly = answers_to(&n, &mut pa, &vip_frames(&n, 3), wait);
    assert!(
        partly.get("icmpv6 unreachable").is_some_and(|&c| c > 0),
        "{partly:?}"
    );
    assert!(
        !partly.contains_key("tcp rst (v4)") && !partly.contains_key("icmp unreachable"),
        "{partly:?}"
    );

    // 4. Dropping the control detaches the shield.
    drop(opened);
    let after = answers_to(&n, &mut pa, &vip_frames(&n, 4), wait);
    assert!(
        after.get("tcp rst (v4)").is_some_and(|&c| c > 0),
        "{after:?}"
    );
}

/// The fallback attachment (a clsact cls_bpf filter, used where the kernel refuses tcx links):
/// it shields the same way, replaces a stale shield filter left by a crashed run, refuses to
/// replace someone else's filter at its position, and is removed when the shield is dropped.
#[test]
fn shield_filter_fallback_attaches_replaces_and_removes() {
    use fp_ebpf::netlink::Netlink;
    use fp_ebpf::shield::{self, AttachChoice, Attachment, VipShield};
    let n = shield_net("afpshieldnl");
    let mut pa = open(&n.a, &AfPacketConfig::default());
    let wait = Duration::from_millis(700);
    let vip4: IpAddr = S_VIP4.parse().unwrap();
    let in_b = |f: Box<dyn FnOnce() -> Option<u32> + Send>| n.b.enter(f).unwrap();
    let installed = || {
        in_b(Box::new(|| {
            let i = fp_ebpf::ifindex("eth0").unwrap();
            Netlink::open()
                .unwrap()
                .filter_prog_id(&shield::filter(i))
                .unwrap()
        }))
    };

    // A shield on the VIP, attached as a clsact filter inside the namespace.
    let filter_shield = || {
        n.b.enter(move || {
            let mut s = VipShield::load(8).unwrap();
            s.set_vips(&[vip4]).unwrap();
            let i = fp_ebpf::ifindex("eth0").unwrap();
            assert_eq!(
                s.attach(i, AttachChoice::Filter).unwrap(),
                Attachment::Filter
            );
            s
        })
        .unwrap()
    };

    // A stale shield: attached as a filter by a "process" that never cleaned up.
    let stale = filter_shield();
    let stale_id = stale.program().info().unwrap().id;
    std::mem::forget(stale); // its Drop never runs, as after a crash
    assert_eq!(installed(), Some(stale_id));

    // A new shield replaces it, and shields.
    let fresh = filter_shield();
    let fresh_id = fresh.program().info().unwrap().id;
    assert_ne!(fresh_id, stale_id);
    assert_eq!(installed(), Some(fresh_id), "the stale filter was replaced");
    let during = answers_to(&n, &mut pa, &vip_frames(&n, 0), wait);
    assert!(
        !during.contains_key("tcp rst (v4)") && !during.contains_key("icmp unreachable"),
        "{during:?}"
    );
    assert!(fresh.stats().unwrap().dropped >= 6, "{:?}", fresh.stats());
    // Dropping it (from this thread, outside the namespace) removes the filter.
    drop(fresh);
    assert_eq!(installed(), None, "the filter is gone");
    let after = answers_to(&n, &mut pa, &vip_frames(&n, 1), wait);
    assert!(
        after.get("tcp rst (v4)").is_some_and(|&c| c > 0),
        "{after:?}"
    );

    // Someone else's filter at the shield's position is not replaced.
    let refused =
        n.b.enter(|| {
            let i = fp_ebpf::ifindex("eth0").unwrap();
            let decap = fp_ebpf::decap::TcDecap::load(fp_ebpf::decap::DecapConfig::ALL).unwrap();
            let mut nl = Netlink::open().unwrap();
            nl.filter_add(&shield::filter(i), decap.program().raw_fd(), "other")
                .unwrap();
            let mut s = VipShield::load(8).unwrap();
            let e = s.attach(i, AttachChoice::Filter).unwrap_err().to_string();
            nl.filter_del(&shield::filter(i)).unwrap();
            e
        })
        .unwrap();
    assert!(refused.contains("not flowplane's VIP shield"), "{refused}");
}
