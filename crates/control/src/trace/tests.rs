use super::*;
use fp_pipeline::config::LbConfig;
use fp_pipeline::craft::{self, Endpoints};
use fp_pipeline::lb::LbWorker;
use fp_pipeline::packet::{burst, Pool};
use fp_pipeline::snapshot::{Builder, Published};
use fp_pipeline::stats::Outcome;
use fp_wire::ipv4::Ipv4Packet;
use fp_wire::ipv6::Ipv6Packet;

/// A UDP frame whose payload is `payload`.
fn udp_with(e: &Endpoints, payload: &[u8]) -> Vec<u8> {
    let mut f = craft::udp(e, payload.len());
    let n = f.len();
    f[n - payload.len()..].copy_from_slice(payload);
    f
}

/// A TCP ACK+PSH frame carrying `payload` (IPv4 or IPv6; IP lengths and IPv4 checksum fixed up,
/// the TCP checksum left stale: nothing on the path verifies it).
fn tcp_with(e: &Endpoints, payload: &[u8]) -> Vec<u8> {
    let mut f = craft::tcp(e, false);
    f.extend_from_slice(payload);
    if e.src.is_ipv4() {
        let mut ip = Ipv4Packet::new_unchecked(&mut f[14..]);
        let total = ip.total_len() + payload.len() as u16;
        ip.set_total_len(total);
        ip.fill_checksum();
    } else {
        let mut ip = Ipv6Packet::new_unchecked(&mut f[14..]);
        let len = ip.payload_len() + payload.len() as u16;
        ip.set_payload_len(len);
    }
    f
}

fn v4() -> Endpoints {
    Endpoints::new("198.51.100.7", 40000, "203.0.113.10", 80)
}

fn v6() -> Endpoints {
    Endpoints::new("2001:db8::7", 40000, "2001:db8::10", 80)
}

#[test]
fn probes_are_recognised() {
    let p = probe_payload(0x0102_0304_0506_0708);
    assert_eq!(p.len(), PROBE_LEN);
    assert_eq!(&p[..16], b"FLOWPLANE-TRACE1");
    for e in [v4(), v6()] {
        assert_eq!(probe_id(&udp_with(&e, &p)), Some(0x0102_0304_0506_0708));
        assert_eq!(probe_id(&tcp_with(&e, &p)), Some(0x0102_0304_0506_0708));
        // Trailing bytes after the id are allowed.
        let mut long = p.clone();
        long.extend_from_slice(b"anything");
        assert!(probe_id(&udp_with(&e, &long)).is_some());
    }
    // One VLAN tag and two (QinQ).
    let f = udp_with(&v4(), &p);
    let mut tagged = f[..12].to_vec();
    tagged.extend_from_slice(&[0x81, 0x00, 0x00, 0x07]);
    tagged.extend_from_slice(&f[12..]);
    assert_eq!(probe_id(&tagged), Some(0x0102_0304_0506_0708));
    let mut qinq = f[..12].to_vec();
    qinq.extend_from_slice(&[0x88, 0xa8, 0x00, 0x01, 0x81, 0x00, 0x00, 0x07]);
    qinq.extend_from_slice(&f[12..]);
    assert_eq!(probe_id(&qinq), Some(0x0102_0304_0506_0708));
}

#[test]
fn ordinary_packets_are_not_probes() {
    let p = probe_payload(7);
    // No payload (SYN, pure ACK), ordinary payloads, a near-miss of the magic.
    assert_eq!(probe_id(&craft::tcp(&v4(), true)), None);
    assert_eq!(probe_id(&craft::tcp(&v6(), false)), None);
    assert_eq!(probe_id(&craft::udp(&v4(), 1400)), None);
    assert_eq!(
        probe_id(&tcp_with(&v4(), b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")),
        None
    );
    let mut near = p.clone();
    near[15] = b'2';
    assert_eq!(probe_id(&udp_with(&v4(), &near)), None);
    // The marker must be at the start of the payload.
    let mut shifted = vec![0u8];
    shifted.extend_from_slice(&p);
    assert_eq!(probe_id(&udp_with(&v4(), &shifted)), None);
    // Magic beyond the IP datagram's end (in Ethernet padding) does not count.
    let mut f = craft::udp(&v4(), 0);
    f.extend_from_slice(&p);
    assert_eq!(probe_id(&f), None);
    // A non-first IPv4 fragment whose data happens to start with the magic.
    let mut frag = udp_with(&v4(), &p);
    {
        let mut ip = Ipv4Packet::new_unchecked(&mut frag[14..]);
        ip.set_frag(false, false, 1480);
        ip.fill_checksum();
    }
    assert_eq!(probe_id(&frag), None);
}

#[test]
fn truncated_and_random_frames_never_panic() {
    let f = tcp_with(&v6(), &probe_payload(9));
    for n in 0..f.len() {
        assert_eq!(probe_id(&f[..n]), None, "prefix of {n} bytes");
    }
    // Random bytes behind valid-looking Ethernet/IP prefixes.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for i in 0..20_000 {
        let len = (next() % 120) as usize;
        let mut b: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        if len > 14 && i % 2 == 0 {
            b[12] = if i % 4 == 0 { 0x08 } else { 0x86 };
            b[13] = if i % 4 == 0 { 0x00 } else { 0xdd };
        }
        let _ = probe_id(&b);
    }
}

#[test]
fn token_bucket() {
    let mut b = TokenBucket::new(10.0, 3);
    assert!(b.take(0) && b.take(0) && b.take(0));
    assert!(!b.take(0), "burst spent");
    assert!(!b.take(50_000_000), "half a token after 50 ms");
    assert!(b.take(100_000_000), "one token after 100 ms");
    assert!(!b.take(100_000_000));
    // Long idle refills to the burst, not beyond.
    for _ in 0..3 {
        assert!(b.take(10_000_000_000));
    }
    assert!(!b.take(10_000_000_000));
    // Time going backwards takes nothing and gives nothing.
    assert!(!b.take(5));
}

fn quiet_log(capacity: usize) -> Arc<TraceLog> {
    TraceLog::with_sink(capacity, "lb-test".into(), None)
}

#[test]
fn rate_limit_and_ring_bound() {
    let log = quiet_log(4);
    // Burst of 3, refill so slow it cannot matter within the test.
    let mut t = log.tracer(TracerConfig {
        rate_per_sec: 1e-6,
        burst: 3,
    });
    let key = fp_wire::PacketSummary::parse(&udp_with(&v4(), &probe_payload(1)))
        .unwrap()
        .flow_key();
    let mut traced = 0;
    for id in 0..10u64 {
        let f = udp_with(&v4(), &probe_payload(id));
        if t.wants(&f, &key) {
            traced += 1;
            t.record(record(&key));
        }
        // Ordinary packets never, whatever the bucket holds.
        assert!(!t.wants(&craft::udp(&v4(), 64), &key));
    }
    assert_eq!(traced, 3);
    assert_eq!(
        log.counts(),
        TraceCounts {
            recorded: 3,
            suppressed: 7
        }
    );
    let ids: Vec<u64> = log.entries().iter().map(|e| e.probe_id).collect();
    assert_eq!(ids, vec![0, 1, 2]);

    // The ring keeps the newest `capacity` records.
    for id in 100..110 {
        log.push(id, record(&key));
    }
    let e = log.entries();
    assert_eq!(e.len(), 4);
    assert_eq!(e[0].probe_id, 106);
    assert_eq!(e[3].seq, 13);
}

fn record(key: &FlowKey) -> TraceRecord {
    TraceRecord {
        worker: 1,
        generation: 5,
        flow: *key,
        vip: "web \"quoted\"".into(),
        conn: "miss",
        maglev_slot: Some(17),
        backend: Some("10.0.1.1".parse().unwrap()),
        encap: "gre".into(),
    }
}

#[test]
fn json_lines_are_well_formed() {
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let sink_lines = lines.clone();
    let log = TraceLog::with_sink(
        16,
        "node\n1".into(),
        Some(Box::new(move |l: &str| {
            sink_lines.lock().unwrap().push(l.to_string())
        })),
    );
    let k4 = fp_wire::PacketSummary::parse(&udp_with(&v4(), &probe_payload(1)))
        .unwrap()
        .flow_key();
    let k6 = fp_wire::PacketSummary::parse(&tcp_with(&v6(), &probe_payload(1)))
        .unwrap()
        .flow_key();
    log.push(42, record(&k4));
    let mut r = record(&k6);
    r.maglev_slot = None;
    r.backend = None;
    r.conn = "hit";
    log.push(u64::MAX, r);
    let text = log.json_lines();
    assert_eq!(lines.lock().unwrap().len(), 2, "each record is logged");
    let objs: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(objs.len(), 2);
    let a = &objs[0];
    assert_eq!(a["seq"], 1);
    assert_eq!(a["node"], "node\n1");
    assert_eq!(a["probe_id"], 42);
    assert_eq!(a["worker"], 1);
    assert_eq!(a["generation"], 5);
    assert_eq!(a["vip"], "web \"quoted\"");
    assert_eq!(a["protocol"], "udp");
    assert_eq!(a["src"], "198.51.100.7:40000");
    assert_eq!(a["dst"], "203.0.113.10:80");
    assert_eq!(a["conn"], "miss");
    assert_eq!(a["maglev_slot"], 17);
    assert_eq!(a["backend"], "10.0.1.1");
    assert_eq!(a["encap"], "gre");
    assert!(a["unix_ms"].as_u64().unwrap() > 1_600_000_000_000);
    let b = &objs[1];
    assert_eq!(b["protocol"], "tcp");
    assert_eq!(b["src"], "[2001:db8::7]:40000");
    assert!(b["maglev_slot"].is_null() && b["backend"].is_null());
    assert_eq!(b["probe_id"].as_u64(), Some(u64::MAX));
}

/// The tracer inside a real load-balancer worker: probes are forwarded *and* recorded with the
/// worker's decision; ordinary packets of the same flows are not recorded.
#[test]
fn traces_through_the_pipeline() {
    let cfg = LbConfig::from_toml(
        r#"
        [balancer]
        address = "10.0.0.2"
        conn_table_capacity = 1000
        maglev_size = 251
        [[vip]]
        name = "web"
        address = "203.0.113.10"
        port = 80
        protocol = "tcp"
        pools = ["web"]
        [[vip]]
        name = "dns"
        address = "203.0.113.10"
        port = 53
        protocol = "udp"
        pools = ["web"]
        encap = "ipip"
        [[pool]]
        name = "web"
        backends = [{ address = "10.0.1.1" }, { address = "10.0.1.2" }]
        "#,
    )
    .unwrap();
    let mut builder = Builder::new();
    let snaps = Arc::new(Published::new(Arc::new(
        builder.build(Arc::new(cfg)).unwrap(),
    )));
    let mut worker = LbWorker::new(3, snaps.clone(), 0x5eed).unwrap();
    let stats = worker.stats().clone();
    let log = quiet_log(64);
    worker.set_tracer(Box::new(log.tracer(TracerConfig::default())));
    let mut pool = Pool::new(64);
    let (mut rx, mut tx) = (burst(), burst());
    let mut send = |frames: &[Vec<u8>], now_ns: u64| {
        for f in frames {
            let mut p = pool.get().unwrap();
            p.fill(f);
            rx.push(p);
        }
        worker.process(&mut rx, &mut tx, &mut pool, now_ns);
        let n = tx.len();
        for p in tx.drain(..) {
            pool.put(p);
        }
        n
    };
    let tcp = Endpoints::new("198.51.100.7", 40000, "203.0.113.10", 80);
    let udp = Endpoints::new("198.51.100.8", 5353, "203.0.113.10", 53);
    // Ordinary traffic: forwarded, not traced.
    assert_eq!(
        send(&[craft::tcp(&tcp, true), craft::udp(&udp, 100)], 1_000_000),
        2
    );
    assert!(log.entries().is_empty());
    // Probes on the same flows: forwarded too, and traced (TCP hits its connection entry).
    assert_eq!(
        send(
            &[
                tcp_with(&tcp, &probe_payload(1)),
                udp_with(
                    &Endpoints::new("198.51.100.9", 1, "203.0.113.10", 53),
                    &probe_payload(2)
                ),
            ],
            2_000_000
        ),
        2
    );
    let e = log.entries();
    assert_eq!(e.len(), 2);
    assert_eq!(e[0].probe_id, 1);
    assert_eq!(e[0].record.worker, 3);
    assert_eq!(e[0].record.vip, "web");
    assert_eq!(e[0].record.conn, "hit");
    assert_eq!(e[0].record.maglev_slot, None);
    assert_eq!(e[0].record.encap, "gre");
    assert_eq!(e[0].record.generation, snaps.load().generation);
    assert_eq!(e[1].probe_id, 2);
    assert_eq!(e[1].record.vip, "dns");
    assert_eq!(e[1].record.conn, "miss");
    assert!(e[1].record.maglev_slot.unwrap() < 251);
    assert_eq!(e[1].record.encap, "ipip");
    let backends = ["10.0.1.1".parse().unwrap(), "10.0.1.2".parse().unwrap()];
    assert!(e
        .iter()
        .all(|x| backends.contains(&x.record.backend.unwrap())));
    assert_eq!(stats.outcome(Outcome::Traced), 2);
    // A probe to no VIP is dropped as usual and never reaches the tracer.
    let stray = udp_with(
        &Endpoints::new("198.51.100.9", 1, "203.0.113.99", 53),
        &probe_payload(3),
    );
    assert_eq!(send(&[stray], 3_000_000), 0);
    assert_eq!(log.entries().len(), 2);
}
