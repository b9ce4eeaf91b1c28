use super::*;
use crate::config::LbConfig;
use crate::snapshot::{Builder, Published};
use crate::stage::LbStage;
use crate::stats::Outcome;
use fp_control::trace::{TraceCounts, TraceLog};
use fp_pipeline::craft::{self, Endpoints};
use fp_pipeline::packet::{burst, Pool};
use fp_pipeline::trace::{probe_payload, probe_queue, TracerConfig};
use fp_wire::FlowKey;
use std::sync::{Arc, Mutex};

fn v4() -> Endpoints {
    Endpoints::new("198.51.100.7", 40000, "203.0.113.10", 80)
}

fn v6() -> Endpoints {
    Endpoints::new("2001:db8::7", 40000, "2001:db8::10", 80)
}

fn quiet_log(capacity: usize) -> Arc<TraceLog<TraceRecord>> {
    TraceLog::with_sink(capacity, "lb-test".into(), None)
}

/// A tracer whose queue `log` collects.
fn tracer(log: &TraceLog<TraceRecord>, cfg: TracerConfig) -> PacketTracer {
    let (tx, rx) = probe_queue(64, cfg);
    log.attach(rx);
    PacketTracer::new(tx)
}

#[test]
fn rate_limit_and_ring_bound() {
    let log = quiet_log(4);
    // Burst of 3, refill so slow it cannot matter within the test.
    let mut t = tracer(
        &log,
        TracerConfig {
            rate_per_sec: 1e-6,
            burst: 3,
        },
    );
    let key = fp_wire::PacketSummary::parse(&craft::udp_with(&v4(), &probe_payload(1)))
        .unwrap()
        .flow_key();
    let mut traced = 0;
    for id in 0..10u64 {
        let f = craft::udp_with(&v4(), &probe_payload(id));
        if t.wants(&f, &key, id * 1000) {
            traced += 1;
            t.record(record(&key));
        }
        // Ordinary packets never, whatever the bucket holds.
        assert!(!t.wants(&craft::udp(&v4(), 64), &key, id * 1000));
    }
    assert_eq!(traced, 3);
    assert_eq!(
        log.counts(),
        TraceCounts {
            recorded: 3,
            suppressed: 7,
            dropped: 0
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
    let k4 = fp_wire::PacketSummary::parse(&craft::udp_with(&v4(), &probe_payload(1)))
        .unwrap()
        .flow_key();
    let k6 = fp_wire::PacketSummary::parse(&craft::tcp_with(&v6(), &probe_payload(1)))
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
    let mut worker = LbStage::new(3, snaps.clone(), 0x5eed).unwrap();
    let stats = worker.stats().clone();
    let log = quiet_log(64);
    worker.set_tracer(Box::new(tracer(&log, TracerConfig::default())));
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
                craft::tcp_with(&tcp, &probe_payload(1)),
                craft::udp_with(
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
    let stray = craft::udp_with(
        &Endpoints::new("198.51.100.9", 1, "203.0.113.99", 53),
        &probe_payload(3),
    );
    assert_eq!(send(&[stray], 3_000_000), 0);
    assert_eq!(log.entries().len(), 2);
}
